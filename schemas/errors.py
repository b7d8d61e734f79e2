"""The one error type of badpoints, how failing values are described without leaking them, and what an error that
says memory ran out looks like (:func:`out_of_memory`: never a finding about the data).

MIMIC's data use agreement forbids sharing raw values, so by default a failing
value is described by its *class* ("non-numeric text, 5 chars", "inf",
"2-digit-year date"), never by its text.
"""

from __future__ import annotations

import errno
from typing import Any

import numpy as np
import pandas as pd

from schemas.checks import matches, number_values

SAMPLE_CAP = 20
"""How many failing lines (and, with ``show_values``, raw values) an error or finding carries."""

_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_CLASSES: list[tuple[str, str]] = [
    # (regex matched against the stripped text, class)
    (r"[+]?(?:inf|infinity)", "inf"),
    (r"-(?:inf|infinity)", "-inf"),
    (r"[+-]?nan", "nan token"),
    (r"(?:na|n/a|null|none|#n/a|nil|missing|\?|-|\.)", "NA token"),
    (r"\d{1,2}/\d{1,2}/\d{2}(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?", "2-digit-year date"),
    (r"\d{1,2}/\d{1,2}/\d{4}(?:\s+\d{1,2}:\d{2}(?::\d{2})?)?", "month/day/year date"),
    (r"\d{4}-\d{2}-\d{2}[ t]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:z|[+-]\d{2}:?\d{2})", "date with time zone"),
    (r"\d{4}-\d{2}-\d{2}", "date without time"),
    (r"\d{4}-\d{2}-\d{2}[ t]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?", "ISO-shaped datetime (impossible date, or beyond 1677-2262)"),
    (r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", "number with thousands separator"),
    (r"[<>]=?\s*" + _NUMBER, "censored number"),
    (r"[+-]?0+(?:\.0*)?", "zero"),
    (r"-" + _NUMBER[5:], "negative number"),
    (r"\+?\d{19,}", "integer of 19 or more digits"),
    (r"\+?\d+", "positive integer"),
    (_NUMBER, "decimal number"),
]


def value_classes(values: pd.Series) -> pd.Series:
    """Describe each value by its class, never by its text (vectorized)."""
    text = values.astype("str")
    stripped = text.str.strip().str.lower()
    overflow = (number_values(text).abs() == np.inf).to_numpy()
    conditions = [overflow] + [matches(stripped, rx).to_numpy() for rx, _ in _CLASSES]
    labels = ["number beyond float64"] + [label for _, label in _CLASSES]
    lengths = text.str.len().fillna(0).astype("int64").astype("str")
    fallback = np.where(
        text.str.contains("\x00", regex=False).fillna(False).to_numpy(bool),
        "text with NUL bytes, " + lengths.to_numpy(object) + " chars",
        "non-numeric text, " + lengths.to_numpy(object) + " chars",
    )
    classes = np.select(conditions, labels, default=fallback).astype(object)
    classes[(stripped == "").to_numpy(bool)] = "blank text"
    classes[values.isna().to_numpy(bool)] = "missing"
    return pd.Series(classes, index=values.index, dtype="str")


def summarize_classes(classes: pd.Series, *, cap: int = 3) -> str:
    """'inf ×2, non-numeric text, 5 chars ×1' for the most common classes, in a stable order."""
    if classes.empty:
        return ""
    counts = classes.value_counts()
    counts = counts.sort_index().sort_values(ascending=False, kind="stable")
    parts = [f"{label} ×{n}" for label, n in counts.head(cap).items()]
    if len(counts) > cap:
        parts.append(f"{len(counts) - cap} more classes")
    return ", ".join(parts)


def format_lines(lines: list[int], total: int) -> str:
    """'lines 18, 43, 100' or 'lines 18, 43, 100 (+97 more)'."""
    if not lines:
        return "no line numbers"
    shown = ", ".join(str(n) for n in lines)
    more = total - len(lines)
    word = "line" if total == 1 else "lines"
    return f"{word} {shown}" + (f" (+{more} more)" if more > 0 else "")


class StageError(ValueError):
    """A guarded stage found bad points.

    Carries the stage, the side of the stage that failed (``input`` or
    ``output``), the check, the column, how many rows failed, and a capped
    ``failure_cases`` frame with the source ``line`` and ``value_class`` of
    each failing row (plus ``value`` only when values were asked for).
    """

    def __init__(
        self,
        *,
        stage: str,
        side: str,
        check: str,
        column: str | None,
        count: int,
        failure_cases: pd.DataFrame,
        table: str | None = None,
        detail: str = "",
        advice: str = "",
        whole_file: bool = False,
    ) -> None:
        self.stage = stage
        self.side = side
        self.check = check
        self.column = column
        self.count = int(count)
        self.failure_cases = failure_cases.head(SAMPLE_CAP).reset_index(drop=True)
        self.table = table
        self.detail = detail
        self.advice = advice
        self.whole_file = whole_file  # about a whole file, table, store or graph (unreadable, columns missing, its
        # nodes in no edge, its size): a count, no failing rows
        super().__init__(self._message())

    @property
    def lines(self) -> list[int]:
        if "line" not in self.failure_cases:
            return []
        return [int(n) for n in self.failure_cases["line"].dropna()]

    def _message(self) -> str:
        where = ".".join(part for part in (self.table, self.column) if part) or "frame"
        classes = summarize_classes(self.failure_cases.get("value_class", pd.Series(dtype="str")))
        found = f"{where} {self.check}" if self.whole_file else \
            f"{where} {self.check} failed on {self.count} row{'s' if self.count != 1 else ''}"
        detail = f" ({format_lines(self.lines, self.count)})" if self.lines else ""
        values = f": {classes}" if classes else ""
        extra = f"{':' if self.whole_file else '.'} {self.detail}" if self.detail else ""
        advice = f". {self.advice}" if self.advice else ""
        return f"[{self.stage}:{self.side}] {found}{detail}{values}{extra}{advice}"


class ValidationDisabled(RuntimeError):
    """Pandera validation was switched off, so no schema would check anything."""


def require_validation() -> None:
    """Refuse to run when pandera's validation is disabled or limited to schema-level checks."""
    from pandera.config import ValidationDepth, get_config_context

    config = get_config_context()
    if not config.validation_enabled:
        raise ValidationDisabled(
            "pandera validation is disabled (PANDERA_VALIDATION_ENABLED=False), so no check would run and every "
            "table would pass. Unset PANDERA_VALIDATION_ENABLED to validate."
        )
    if config.validation_depth not in (None, ValidationDepth.SCHEMA_AND_DATA):
        raise ValidationDisabled(
            f"pandera runs only part of each schema (PANDERA_VALIDATION_DEPTH={config.validation_depth.value}), "
            "so some checks would silently pass. Unset PANDERA_VALIDATION_DEPTH to validate."
        )


# What libraries say when memory runs out but raise no MemoryError: a shared library that cannot be mapped (an import
# or ctypes' load), errno ENOMEM in words, a thread whose stack cannot be had, C++'s std::bad_alloc, torch's CPU
# allocator. Matched in lower case.
_OUT_OF_MEMORY_SAID = ("memoryerror(", "failed to map segment", "cannot allocate memory", "can't allocate memory",
                       "can't start new thread", "std::bad_alloc", "out of memory")
# CPython's SystemError when a C function failed and set no error: under an address-space limit, an allocation in an
# import that runs short (torch's, as the graphs are made) ends so.
_FAILED_UNSAID = "error return without exception set"


def out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, says that memory ran out: a
    MemoryError (numpy's and Arrow's are ones), an OSError of errno ENOMEM, an ImportError, OSError or RuntimeError
    in the words libraries use for it (:data:`_OUT_OF_MEMORY_SAID`), or a SystemError of a C function that failed
    without an error (:data:`_FAILED_UNSAID`). Such an error is never a finding about the data: whoever catches
    errors to report them as findings lets these through."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
            return True
        if isinstance(exc, (ImportError, OSError, RuntimeError)) and said_out_of_memory(str(exc)):
            return True
        if isinstance(exc, SystemError) and _FAILED_UNSAID in str(exc):
            return True
        exc = exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__
    return False


def said_out_of_memory(text: str) -> bool:
    """Whether an error's text says that memory ran out (:data:`_OUT_OF_MEMORY_SAID`)."""
    text = text.lower()
    return any(words in text for words in _OUT_OF_MEMORY_SAID)


def raise_if_out_of_memory(errors: Any) -> None:
    """A lazy pandera validation (its ``SchemaErrors``, ``errors``) reports a check that raised as that check failing
    (``CHECK_ERROR``, its failure case the exception written out: ``MemoryError()``): where memory ran out, a
    MemoryError is raised instead, so that it never reads as bad data."""
    from pandera.errors import SchemaErrorReason

    for error in getattr(errors, "schema_errors", ()):
        said = str(error.failure_cases)
        if error.reason_code == SchemaErrorReason.CHECK_ERROR and said_out_of_memory(said):
            raise MemoryError(f"a check ran out of memory: {said[:200]}")
