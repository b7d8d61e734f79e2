"""Rows set aside with a reason, and the attrition ledger: every row read is accounted for.

A filtering stage returns :class:`Kept`: the rows that go on, the rows
quarantined (index = source line, with table, stage and reason) and one
:class:`Step` per filter with rows in and out, so an empty or near-empty result
is caught at the step that made it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

KEYS = ("HADM_ID", "ITEMID")
QUARANTINE_COLUMNS = ("TABLE", "STAGE", "REASON", *KEYS)
LINE_RANGE = 2**20  # source lines per range: records kept by line range are read (and ordered) a range at a time


@dataclass(frozen=True)
class Step:
    """One filter, join or dedup: rows in, rows out, and how the difference was spent."""

    stage: str
    step: str
    rows_in: int
    rows_out: int
    quarantined: int = 0
    merged: int = 0
    clipped: int = 0  # rows kept with a value moved to a bound (a timestep to a stay's last, or to 0)
    table: str = "LABEVENTS"
    column: str | None = None  # the column its filter read (CHARTTIME, HADM_ID, ...), named in its findings
    # The config asked for what it removes (a task's windows): how much it removes is the design, never a finding
    # (an empty output still is an error).
    planned: bool = False

    def as_json(self) -> dict[str, Any]:
        """The step as the report's attrition lists it (``Report.attrition_frame`` reads these keys)."""
        return dict(table=self.table, stage=self.stage, step=self.step, rows_in=self.rows_in,
                    rows_out=self.rows_out, quarantined=self.quarantined, merged=self.merged, clipped=self.clipped)


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
              table: str = "LABEVENTS", columns: Mapping[str, str] | None = None, planned: bool = False) -> Kept:
    """Apply ``(reason, mask)`` filters in order; a row goes to quarantine under the first reason that takes it.

    ``columns`` names, per reason, the column its mask was computed from: its step carries it to the findings;
    ``planned``: the config asked for these cuts (:attr:`Step.planned`).
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
                          quarantined=int(taken.sum()), table=table, column=(columns or {}).get(reason),
                          planned=planned))
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


class ByLines(Protocol):
    """Quarantine records kept by source line range (a parts engine's files): range ``r`` holds the records of
    lines ``r * LINE_RANGE`` to ``(r + 1) * LINE_RANGE - 1``."""

    def ranges(self) -> tuple[int, ...]: ...

    def range(self, number: int, columns: Sequence[str] | None = None) -> pd.DataFrame: ...


@dataclass(frozen=True)
class Reasoned:
    """What the quarantine holds for one (table, stage, reason): rows, their first source lines, rows per ITEMID
    and the admissions (HADM_IDs) they belong to."""

    rows: int
    lines: np.ndarray
    items: pd.Series
    admissions: np.ndarray


@dataclass(frozen=True)
class Quarantine:
    """Every quarantined row, as the stages set them aside: frames (the pandas engine's, the small tables'), and
    records a parts engine keeps on disk by source line range (:class:`ByLines`). They are read a frame or a range
    at a time and never put together whole, unless asked (:meth:`whole`): at MIMIC-IV scale a run quarantines
    tens of millions of rows."""

    sources: tuple[pd.DataFrame | ByLines, ...] = ()

    def frames(self, columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
        """The records (only ``columns``, and the source line index), a frame or a line range at a time."""
        for source in self.sources:
            if isinstance(source, pd.DataFrame):
                if len(source):
                    yield source if columns is None else source[list(columns)]
            else:
                for number in source.ranges():
                    yield source.range(number, columns)

    def whole(self) -> pd.DataFrame:
        """Every record in one frame, ordered as :func:`combine` orders them."""
        return combine(list(self.frames()))

    def in_order(self) -> Iterator[pd.DataFrame]:
        """Every record, ordered by table, source line and stage (as :meth:`whole`); records kept by line range come
        a range at a time (at most :data:`LINE_RANGE` rows of a table each)."""
        ranged = [s for s in self.sources if not isinstance(s, pd.DataFrame)]
        held = [s for s in self.sources if isinstance(s, pd.DataFrame) and len(s)]
        by_lines = {table for s in ranged for n in s.ranges() for table in s.range(n, ["TABLE"])["TABLE"].unique()}
        for table in sorted({table for table, _, _ in self.counts}):
            if table not in by_lines:
                chosen = combine([f[f["TABLE"] == table] for f in held])
                if len(chosen):
                    yield chosen
                continue
            for number in sorted(set().union(*(s.ranges() for s in ranged))):
                parts = [s.range(number) for s in ranged if number in s.ranges()]
                parts += [f[f.index // LINE_RANGE == number] for f in held]
                chosen = combine([p[p["TABLE"] == table] for p in parts])
                if len(chosen):
                    yield chosen

    @property
    def counts(self) -> dict[tuple[str, str, str], int]:
        """Rows per (table, stage, reason)."""
        return {key: summary.rows for key, summary in self.by_reason().items()}

    def count(self, table: str) -> int:
        return sum(n for (of, _, _), n in self.counts.items() if of == table)

    def by_reason(self, *, lines: int = 0) -> dict[tuple[str, str, str], Reasoned]:
        """Per (table, stage, reason), sorted: its rows, first ``lines`` source lines, rows per ITEMID and HADM_IDs;
        each frame summed up as it is read (once: a later call for as many lines or fewer reuses it)."""
        known = self._summaries.get("lines")
        if known is None or known < lines:
            self._summaries.update(lines=lines, summary=self._summarize(lines))
        summary = self._summaries["summary"]
        return {key: replace(s, lines=s.lines[:lines]) for key, s in summary.items()}

    @functools.cached_property
    def _summaries(self) -> dict[str, Any]:
        return {}

    def _summarize(self, lines: int) -> dict[tuple[str, str, str], Reasoned]:
        found: dict[tuple[str, str, str], Reasoned] = {}  # folded frame by frame: held whole, they grew with the rows
        for frame in self.frames():
            for key, rows in frame.groupby(["TABLE", "STAGE", "REASON"], sort=True):
                part = Reasoned(rows=len(rows), lines=np.sort(rows.index.to_numpy("int64"))[:lines],
                                items=rows["ITEMID"].dropna().astype("int64").value_counts(),
                                admissions=rows["HADM_ID"].dropna().astype("int64").unique())
                found[key] = part if key not in found else _fold(found[key], part, lines=lines)
        return {key: replace(found[key], items=found[key].items.groupby(level=0).sum().sort_index(),
                             admissions=np.unique(found[key].admissions)) for key in sorted(found)}

    def taken(self, table: str, stage: str) -> "LineMask":
        """Which source lines of ``table`` ``stage`` quarantined, as a bit per line (read once, a frame or a line range
        at a time: the report asks in each of its passes; 118M lines are 15 MB, where their numbers were 0.4 GB)."""
        key = ("taken", table, stage)
        if key not in self._summaries:
            mask = LineMask.empty()
            for frame in self.frames(["TABLE", "STAGE"]):
                mask = mask.with_lines(frame.index[(frame["TABLE"] == table) & (frame["STAGE"] == stage)].to_numpy(
                    "int64"))
            self._summaries[key] = mask
        return self._summaries[key]


def _fold(one: Reasoned, other: Reasoned, *, lines: int) -> Reasoned:
    """What two frames' records of one (table, stage, reason) hold together."""
    return Reasoned(rows=one.rows + other.rows, lines=np.sort(np.concatenate([one.lines, other.lines]))[:lines],
                    items=pd.concat([one.items, other.items]).groupby(level=0).sum(),
                    admissions=np.union1d(one.admissions, other.admissions))


@dataclass(frozen=True)
class LineMask:
    """A set of source lines as one bit per line (``np.packbits`` order: line ``n`` is bit ``7 - n % 8`` of byte
    ``n // 8``), up to the largest line in it."""

    bits: np.ndarray  # uint8

    @classmethod
    def empty(cls) -> "LineMask":
        return cls(np.zeros(0, dtype="uint8"))

    def with_lines(self, lines: np.ndarray) -> "LineMask":
        """This set and ``lines`` (a new mask; only the bytes from the smallest to the largest line are touched)."""
        if not len(lines):
            return self
        low = int(lines.min()) // 8 * 8
        chunk = np.zeros(int(lines.max()) - low + 1, dtype=bool)
        chunk[lines - low] = True
        packed = np.packbits(chunk)
        end = low // 8 + len(packed)
        bits = np.zeros(max(end, len(self.bits)), dtype="uint8")
        bits[:len(self.bits)] = self.bits
        bits[low // 8:end] |= packed
        return LineMask(bits)

    def of(self, lines: np.ndarray) -> np.ndarray:
        """Per line of ``lines``, whether it is in the set."""
        lines = np.asarray(lines, dtype="int64")
        found = np.zeros(len(lines), dtype=bool)
        inside = (lines >= 0) & (lines < 8 * len(self.bits))
        at = lines[inside]
        found[inside] = (self.bits[at >> 3] >> (7 - (at & 7))) & 1 == 1
        return found

    def lines(self) -> np.ndarray:
        """The lines in the set, sorted."""
        return np.flatnonzero(np.unpackbits(self.bits)).astype("int64")
