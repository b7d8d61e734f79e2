"""Findings and the report: what every run produces, as JSON for CI and as text for people.

A finding names the severity, stage, table, check, column, how many rows, the
first source lines and a message that says what was found and what to do. Raw
values appear only in ``samples`` and only when ``--show-values`` was given.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import pandas as pd

from schemas.checks import CANNOT_RUN_CHECKS, CHECKS, ERROR, OFF, WARNING
from schemas.errors import SAMPLE_CAP, StageError, format_lines, summarize_classes, value_classes


# How many failing values a finding reads to describe them by class ("inf ×2, non-numeric text").
CLASS_SAMPLE = 100_000

STAGE_ORDER = {stage: n for n, stage in enumerate(
    ("load", "raw", "clean", "split", "encode", "scale", "fill", "bucket", "dedup", "graph", "flow"))}


@dataclass(frozen=True)
class Finding:
    severity: str
    stage: str
    table: str | None
    check: str
    column: str | None
    count: int
    lines: list[int]
    message: str
    default_severity: str | None = None
    samples: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        record = asdict(self)
        if record["default_severity"] is None or record["default_severity"] == record["severity"]:
            record.pop("default_severity")
        if record["samples"] is None:
            record.pop("samples")
        return record


def finding_from_error(error: StageError) -> Finding:
    """The report's view of a :class:`StageError`; a schema's own check is reported as ``stage_guard``."""
    check = error.check if error.check in CHECKS else "stage_guard"
    return Finding(
        severity=CHECKS[check].severity,
        stage=error.stage,
        table=error.table,
        check=check,
        column=error.column,
        count=error.count,
        lines=error.lines,
        message=str(error),
    )


def finding_from_mask(
    *,
    stage: str,
    table: str,
    check: str,
    column: str | None,
    failed: pd.Series,
    values: pd.Series | None = None,
    what: str | None = None,
    verb: str = "with",
    show_values: bool = False,
    max_lines: int = SAMPLE_CAP,
) -> Finding | None:
    """One finding for the rows where ``failed`` is true (index = source line), or None."""
    failing = failed[failed.fillna(False).astype(bool)].index
    count = len(failing)
    if count == 0:
        return None
    lines = [int(n) for n in failing[:max_lines]]
    classes = ""
    samples = None
    if values is not None:
        sample = values.loc[failing[:CLASS_SAMPLE]]
        classes = summarize_classes(value_classes(sample))
        if show_values:
            samples = [str(v) for v in values.loc[failing[:max_lines]]]
    info = CHECKS[check]
    where = f"{table}.{column}" if column else table
    rows = "row" if count == 1 else "rows"
    message = f"{where}: {count} {rows} {verb} {what or info.title} ({format_lines(lines, count)})"
    if classes:
        message += f": {classes}"
    message += f". {info.advice}"
    return Finding(
        severity=info.severity, stage=stage, table=table, check=check, column=column,
        count=count, lines=lines, message=message, samples=samples,
    )


def summary_finding(*, stage: str, check: str, table: str | None, column: str | None, count: int, message: str,
                    lines: list[int] | None = None) -> Finding:
    """A finding about a whole table or item set rather than failing rows (constant items, fills, attrition)."""
    info = CHECKS[check]
    where = ".".join(part for part in (table, column) if part)
    return Finding(severity=info.severity, stage=stage, table=table, check=check, column=column, count=int(count),
                   lines=list(lines or []), message=f"{where}: {message}. {info.advice}" if where else
                   f"{message}. {info.advice}")


def item_names(labitems: pd.DataFrame | None) -> dict[int, str]:
    """ITEMID -> how findings name it, ``'NTproBNP (Blood)'``: D_LABITEMS' LABEL (read when the file has one) and
    FLUID. Dictionary metadata, not patient data. Build it once per run from the typed or clean D_LABITEMS and
    hand it to :func:`format_items`; an ITEMID that appears twice gets no name."""
    if labitems is None or "ITEMID" not in labitems or labitems.empty:
        return {}
    items = labitems[labitems["ITEMID"].notna()].drop_duplicates("ITEMID", keep=False)

    def text(column: str) -> pd.Series:  # whitespace collapsed: a name is one short line
        if column not in items:
            return pd.Series("", index=items.index, dtype="str")
        return items[column].astype("str").fillna("").str.split().str.join(" ").fillna("")

    label, fluid = text("LABEL"), text("FLUID")
    name = (label + (" (" + fluid + ")").where(fluid != "", "")).str.strip()
    named = name != ""
    return dict(zip(items.loc[named, "ITEMID"].astype("int64").tolist(), name[named].tolist()))


def format_items(items: Iterable[int] | Mapping[int, int] | pd.Series, *, names: Mapping[int, str] | None = None,
                 limit: int = SAMPLE_CAP, unit: str = "row", why: Callable[[int], str] | None = None) -> str:
    """``'50963 NTproBNP (Blood) (28 rows), 51100 Troponin T (Blood) (3 rows) and 12 more'``.

    ``items`` are ITEMIDs in the order to list them, or ITEMID -> count (a dict, or a Series such as
    ``value_counts().sort_index()``), each then followed by its count of ``unit``. ``names`` comes from
    :func:`item_names` (an item without a name is its number alone). At most ``limit`` items are listed,
    like a finding's lines (``[report] max_lines``). ``why(item)``, when given, follows the count.
    """
    counts = dict(items.items()) if hasattr(items, "items") else None
    listed = list(counts) if counts is not None else list(items)
    names = names or {}
    parts = []
    for item in listed[:limit]:
        part = f"{int(item)} {names[int(item)]}" if int(item) in names else str(int(item))
        if counts is not None:
            count = int(counts[item])
            part += f" ({count:,} {unit}{'' if count == 1 else 's'}{'; ' + why(int(item)) if why else ''})"
        parts.append(part)
    more = len(listed) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class InputFile:
    table: str
    path: str
    sha256: str
    rows: int


@dataclass
class Report:
    """Everything a run found. Severities from the config are applied by :meth:`with_severities`."""

    inputs: list[InputFile] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)
    attrition: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``errors``, ``warnings`` or ``ok``: what the status line and the JSON say (the exit code follows it)."""
        severities = {f.severity for f in self.findings}
        if ERROR in severities:
            return "errors"
        return "warnings" if WARNING in severities else "ok"

    @property
    def exit_code(self) -> int:
        """2 when badpoints could not run (a check of ``CANNOT_RUN_CHECKS``), 1 for any other error, else 0.

        Taken from the findings alone, like :attr:`status`, so the two always agree: 0 is ``ok`` or
        ``warnings``, 1 and 2 are ``errors``.
        """
        if any(f.check in CANNOT_RUN_CHECKS and f.severity == ERROR for f in self.findings):
            return 2
        return 1 if self.status == "errors" else 0

    def add(self, findings: Iterable[Finding | None]) -> None:
        self.findings.extend(f for f in findings if f is not None)

    def with_severities(self, severity: dict[str, str]) -> "Report":
        """Apply the config's severity changes; changed findings say so, 'off' ones are dropped."""
        kept = []
        for finding in self.findings:
            level = severity.get(finding.check)
            if level is None or level == finding.severity:
                kept.append(finding)
            elif level != OFF:
                note = f" (severity changed from {finding.severity} to {level} by config)"
                kept.append(replace(finding, severity=level, default_severity=finding.severity,
                                    message=finding.message + note))
        return Report(inputs=list(self.inputs), findings=kept, overrides=dict(severity), attrition=self.attrition)

    def findings_frame(self) -> pd.DataFrame:
        """The findings as a DataFrame (for notebooks)."""
        columns = ["severity", "stage", "table", "check", "column", "count", "lines", "message"]
        return pd.DataFrame([asdict(f) for f in self.findings], columns=columns + ["default_severity", "samples"])[
            columns
        ]

    def attrition_frame(self) -> pd.DataFrame:
        """Every filter, join and dedup with its rows in and out, as a DataFrame (for notebooks).

        The LABEVENTS ledger (read = kept + quarantined + deduplicated) is in ``frame.attrs["ledger"]``.
        """
        columns = ["table", "stage", "step", "rows_in", "rows_out", "quarantined", "merged", "clipped"]
        steps = (self.attrition or {}).get("steps") or []
        frame = pd.DataFrame(steps, columns=columns).astype(
            {c: "int64" for c in columns[3:]} if steps else {})
        frame["removed"] = frame["rows_in"] - frame["rows_out"]
        frame.attrs["ledger"] = dict((self.attrition or {}).get("LABEVENTS") or {})
        return frame

    def stage_counts(self) -> dict[str, dict[str, int]]:
        """Findings per stage (in flow order) and severity: ``{"raw": {"error": 2, "warning": 1}, ...}``."""
        counts: dict[str, dict[str, int]] = {}
        for finding in sorted(self.findings, key=lambda f: STAGE_ORDER.get(f.stage, 99)):
            by_severity = counts.setdefault(finding.stage, {})
            by_severity[finding.severity] = by_severity.get(finding.severity, 0) + 1
        return counts

    def as_json(self) -> dict[str, Any]:
        order = {ERROR: 0, WARNING: 1}
        findings = sorted(self.findings, key=lambda f: (order.get(f.severity, 2), STAGE_ORDER.get(f.stage, 99),
                                                        f.table or "", f.check, f.column or ""))
        return {
            "status": self.status,
            "inputs": [asdict(i) for i in self.inputs],
            "findings": [f.as_json() for f in findings],
            "overrides": dict(sorted(self.overrides.items())),
            "attrition": self.attrition,
        }

    def write_json(self, path: Path) -> None:
        """Write the report atomically: a temp file in the same folder (umask applies), then rename."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.as_json(), indent=2) + "\n"
        write_atomic(path, text.encode("utf-8"))


def write_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of it."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temp path beside ``path`` to write in any way; on success it is synced and renamed to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
