"""The helpers that make findings (:class:`pipeline.kernel.finding.Finding`): from an error, a mask of failing rows or
a summary, with the severity the catalogue gives their check, lists of items capped to what a message shows, and
failing values described by class. Raw values appear only in ``samples`` and only when ``--show-values`` was given.
Stages make findings here; :mod:`pipeline.reporting.report` gathers them into the report.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pandas as pd

from pipeline.kernel.finding import Finding
from schemas.catalogue import CHECKS
from schemas.errors import SAMPLE_CAP, StageError, format_lines, summarize_classes, value_classes


# How many failing values a finding reads to describe them by class ("inf ×2, non-numeric text").
CLASS_SAMPLE = 100_000
# How many entries of a list (lab items, admissions, source lines) a message shows: the most rows first, then
# "+K more". A finding's JSON holds every lab item it names (``items``) and its first [report] max_lines lines.
LISTED = 5
# How many characters of one name (a code, a label, a path) a message shows: a longer one is cut there and followed
# by its length. A finding's ``items`` keep every name whole.
NAME_SHOWN = 80


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
    count: int | None = None,
    items: Iterable[int] | Mapping[int, int] | pd.Series | None = None,
) -> Finding | None:
    """One finding for the rows where ``failed`` is true (index = source line), or None; ``count``: how many rows
    failed in all, when ``failed`` holds only the first of them; ``items``: the lab items the message lists
    (:func:`format_items`), every one kept in the finding."""
    failing = failed[failed.fillna(False).astype(bool)].index
    count = len(failing) if count is None else int(count)
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
    message = f"{where}: {count} {rows} {verb} {what or info.title} ({format_lines(lines[:LISTED], count)})"
    if classes:
        message += f": {classes}"
    message += f". {info.advice}"
    return Finding(
        severity=info.severity, stage=stage, table=table, check=check, column=column,
        count=count, lines=lines, message=message, samples=samples, items=ordered(items),
    )


def summary_finding(*, stage: str, check: str, table: str | None, column: str | None, count: int, message: str,
                    lines: list[int] | None = None,
                    items: Iterable[int] | Mapping[int, int] | pd.Series | None = None) -> Finding:
    """A finding about a whole table or item set rather than failing rows (constant items, fills, attrition);
    ``items``: the lab items the message lists (:func:`format_items`), every one kept in the finding."""
    info = CHECKS[check]
    where = ".".join(part for part in (table, column) if part)
    return Finding(severity=info.severity, stage=stage, table=table, check=check, column=column, count=int(count),
                   lines=list(lines or []), message=f"{where}: {message}. {info.advice}" if where else
                   f"{message}. {info.advice}", items=ordered(items))


def ordered(items: Iterable[Any] | Mapping[Any, int] | pd.Series | None) -> list[int | str] | None:
    """ITEMIDs as :func:`format_items` lists them: with counts, the most first (ties in the given order); a name
    that is not a number (a MEDS code) is kept as text."""
    if items is None:
        return None
    if hasattr(items, "items"):
        counts = dict(items.items())
        items = sorted(counts, key=lambda i: -int(counts[i]))  # sorted() is stable
    return [i if isinstance(i, str) else int(i) for i in items]


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


def shown(name: Any) -> str:
    """``name`` as a message shows it: its first :data:`NAME_SHOWN` characters, and where it is longer, an ellipsis
    and its length (``'BBBB…BB… (1,000,000 characters)'``)."""
    text = str(name)
    return text if len(text) <= NAME_SHOWN else f"{text[:NAME_SHOWN]}… ({len(text):,} characters)"


def format_items(items: Iterable[Any] | Mapping[Any, int] | pd.Series, *, names: Mapping[Any, str] | None = None,
                 limit: int = LISTED, unit: str = "row", why: Callable[[Any], str] | None = None) -> str:
    """``'50963 NTproBNP (Blood) (28 rows), 51100 Troponin T (Blood) (3 rows) +12 more'``.

    ``items`` are ITEMIDs in the order to list them, or ITEMID -> count (a dict, or a Series such as
    ``value_counts()``), each then followed by its count of ``unit``, the most first. ``names`` comes from
    :func:`item_names` (an item without a name is its number alone). At most ``limit`` items are listed
    (:data:`LISTED`), each name cut at :data:`NAME_SHOWN` characters (:func:`shown`); the finding keeps them all,
    whole (its ``items``). ``why(item)``, when given and not empty, follows the count. An item may be text (a MEDS
    code): it is listed as it is.
    """
    counts = dict(items.items()) if hasattr(items, "items") else None
    listed = ordered(items)
    names = names or {}
    parts = []
    for item in listed[:limit]:
        part = f"{shown(item)} {shown(names[item])}" if item in names else shown(item)
        if counts is not None:
            count, because = int(counts[item]), why(item) if why else ""
            part += f" ({count:,} {unit}{'' if count == 1 else 's'}{'; ' + because if because else ''})"
        parts.append(part)
    more = len(listed) - limit
    return ", ".join(parts) + (f" +{more} more in the JSON report" if more > 0 else "")
