"""Rows set aside with a reason, and the attrition ledger: every row read is accounted for.

A filtering stage returns :class:`Kept`: the rows that go on, the rows
quarantined (index = source line, with table, stage and reason) and one
:class:`Step` per filter with rows in and out, so an empty or near-empty result
is caught at the step that made it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

KEYS = ("HADM_ID", "ITEMID")
QUARANTINE_COLUMNS = ("TABLE", "STAGE", "REASON", *KEYS)


@dataclass(frozen=True)
class Step:
    """One filter, join or dedup: rows in, rows out, and how the difference was spent."""

    stage: str
    step: str
    rows_in: int
    rows_out: int
    quarantined: int = 0
    merged: int = 0
    clipped: int = 0
    table: str = "LABEVENTS"
    column: str | None = None  # the column its filter read (CHARTTIME, HADM_ID, ...), named in its findings


@dataclass(frozen=True)
class Kept:
    """The rows that go on, the rows set aside, and the steps that decided."""

    frame: pd.DataFrame
    quarantine: pd.DataFrame = field(default_factory=lambda: empty_quarantine())
    steps: tuple[Step, ...] = ()


def empty_quarantine() -> pd.DataFrame:
    return quarantine_frame(pd.DataFrame(index=pd.Index([], name="line", dtype="int64")), "", "", "")


def quarantine_frame(rows: pd.DataFrame, table: str, stage: str, reason: str | pd.Series) -> pd.DataFrame:
    """The quarantine record of ``rows``: source line (index), table, stage, reason and keys."""
    out = pd.DataFrame(index=rows.index.rename("line"))
    out["TABLE"] = pd.Series(table, index=out.index, dtype="str")
    out["STAGE"] = pd.Series(stage, index=out.index, dtype="str")
    out["REASON"] = reason if isinstance(reason, pd.Series) else pd.Series(reason, index=out.index, dtype="str")
    out["REASON"] = out["REASON"].astype("str")
    for key in KEYS:
        out[key] = (rows[key] if key in rows else pd.Series(pd.NA, index=rows.index)).astype("Int64")
    return out


def set_aside(frame: pd.DataFrame, filters: Sequence[tuple[str, pd.Series]], *, stage: str,
              table: str = "LABEVENTS", columns: Mapping[str, str] | None = None) -> Kept:
    """Apply ``(reason, mask)`` filters in order; a row goes to quarantine under the first reason that takes it.

    ``columns`` names, per reason, the column its mask was computed from: its step carries it to the findings.
    """
    remaining = pd.Series(True, index=frame.index)
    keys = [key for key in KEYS if key in frame]  # all a quarantine record keeps of a row
    parts, steps = [], []
    for reason, mask in filters:
        taken = remaining & mask.reindex(frame.index).fillna(False).astype(bool)
        rows_in = int(remaining.sum())
        parts.append(quarantine_frame(frame.loc[taken, keys], table, stage, reason))
        remaining &= ~taken
        steps.append(Step(stage=stage, step=reason, rows_in=rows_in, rows_out=int(remaining.sum()),
                          quarantined=int(taken.sum()), table=table, column=(columns or {}).get(reason)))
    quarantine = pd.concat(parts) if parts else empty_quarantine()
    kept = frame if remaining.all() else frame[remaining]  # nothing taken: no copy of every column
    return Kept(frame=kept, quarantine=quarantine, steps=tuple(steps))


def combine(quarantines: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """All quarantined rows, ordered by table, source line and stage (stable across runs)."""
    frames = [q for q in quarantines if len(q)]
    if not frames:
        return empty_quarantine()
    whole = pd.concat(frames)
    return whole.reset_index().sort_values(["TABLE", "line", "STAGE"], kind="stable").set_index("line")
