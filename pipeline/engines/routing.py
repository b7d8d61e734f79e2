"""How LABEVENTS is cut into admission-range parts: a whole frame at once (:func:`admission_parts`), or its checked
blocks as they come (:class:`BlockRoute` writes a block by admission range where it was checked, :class:`Router`
makes parts of the ranges), so the whole table never exists. Either way every admission's rows are in one part and
the parts come in (split, HADM_ID) order."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.engines.options import EngineOptions
from pipeline.engines.stored import Batches, Stored
from pipeline.kernel.handed import PART_OPTIONS, scratch, value_of
from schemas.split import SPLITS, split_codes


FEWEST_RANGES = 64  # the fewest admission ranges a Router writes checked blocks into (consecutive ones make a part)
ADMISSIONS_PER_RANGE = 512  # the most admissions in one range: at MIMIC's 275-480 rows per admission, a range
# is a quarter of a part or less, so parts of whole ranges keep to rows_per_part however many admissions there are


def admission_parts(events: pd.DataFrame, partitions: int, splits: pd.DataFrame | None = None) -> list[pd.DataFrame]:
    """``events`` cut into at most ``partitions`` parts (at least one), each with all the rows of its admissions.

    Admissions in (split, HADM_ID) order are cut into contiguous ranges of about equal rows, so rows sorted by
    split and admission within each part are sorted across them. Each part keeps the input's row order. The split
    is the rows' SPLIT, or (``splits``: HADM_ID and SPLIT) their admission's, or none (neither is known); rows of
    no known admission (no HADM_ID, or one without a split) come last.
    """
    if events.empty:
        return [events]
    hadm = events["HADM_ID"]
    known = hadm.notna().to_numpy()
    key = np.where(known, hadm.to_numpy("float64", na_value=np.nan), -1).astype("int64")
    if splits is None and "SPLIT" not in events:  # no split known (the split stage will fail): by HADM_ID alone
        split = np.zeros(len(events), dtype="int64")
    elif splits is None:
        split = split_codes(events["SPLIT"]).astype("int64")
    else:
        of = pd.Series(split_codes(splits["SPLIT"]).astype("int64"), index=splits["HADM_ID"].to_numpy("int64"))
        split = of.reindex(key).fillna(len(SPLITS)).to_numpy("int64")
    split = np.where(known, split, len(SPLITS))
    split = pd.Series(split).groupby(key).transform("first").to_numpy("int64")  # an admission's first row's split
    per = pd.DataFrame({"SPLIT": split, "HADM_ID": key}).groupby(["SPLIT", "HADM_ID"]).size()  # sorted by both
    before = per.cumsum() - per
    cut = (before.to_numpy() * max(1, int(partitions))) // len(events)
    part = pd.Series(np.unique(cut, return_inverse=True)[1], index=per.index)
    of_row = part.reindex(pd.MultiIndex.from_arrays([split, key])).to_numpy("int64")
    order = np.argsort(of_row, kind="stable")
    bounds = np.searchsorted(of_row[order], np.arange(part.max() + 2))
    return [events.iloc[order[start:stop]] for start, stop in zip(bounds[:-1], bounds[1:])]


@dataclass(frozen=True)
class Routed:
    """A checked block written by :class:`BlockRoute`: its file holds one record batch per admission range that has
    rows, in range order (``ranges``: each batch's range)."""

    path: Path
    ranges: tuple[int, ...]
    rows: tuple[int, ...]
    columns: tuple[str, ...]


@dataclass(frozen=True)
class BlockRoute:
    """Writes a checked block's rows into a file of the parts folder, one record batch per admission range: what a
    :class:`Router` makes parts of. Picklable, so the process that checks a block writes it."""

    folder: Path
    range_of: Any  # Shared, or the Series itself: HADM_ID -> its admission range
    unknown: int  # the range of rows of no known admission

    def __call__(self, frame: pd.DataFrame) -> Routed:
        range_of = value_of(self.range_of)
        hadm = frame["HADM_ID"].to_numpy("float64", na_value=np.nan)
        known = ~np.isnan(hadm)
        in_range = np.full(len(frame), self.unknown, dtype="int64")
        in_range[known] = range_of.reindex(hadm[known].astype("int64")).fillna(self.unknown).to_numpy("int64")
        order = np.argsort(in_range, kind="stable")
        ranked = in_range[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(ranked) else np.array([], "int64")
        stops = np.r_[starts[1:], len(ranked)].astype("int64")
        rows = frame if np.array_equal(order, np.arange(len(order))) else frame.iloc[order]
        batch = pa.RecordBatch.from_pandas(rows, preserve_index=True)
        path = self.folder / f"block-{uuid.uuid4().hex}.arrow"
        with scratch(path), pa.ipc.new_file(path, batch.schema, options=PART_OPTIONS) as writer:
            for start, stop in zip(starts, stops):
                writer.write_batch(batch.slice(int(start), int(stop - start)))
        return Routed(path=path, ranges=tuple(int(ranked[s]) for s in starts),
                      rows=tuple(int(n) for n in stops - starts), columns=tuple(frame.columns))


class PartsFolder(Protocol):
    """What a :class:`Router` needs of the engine whose parts it makes: their folder, its options (how many rows or
    parts it cuts), and how it shares a frame with the processes that route blocks (a parts engine)."""

    folder: Path
    options: EngineOptions

    def share(self, value: pd.DataFrame | pd.Series) -> Any: ...


class Router:
    """Checked LABEVENTS blocks written straight into admission-range parts, so the whole table never exists.

    The parts are those :func:`admission_parts` cuts: admissions in (split, HADM_ID) order (``splits`` from
    ADMISSIONS alone, known before any lab row), every admission's rows in one part, each part in source line
    order, rows of no known admission last. As the rows per admission are known only at the end, each block is
    written (by :meth:`route`, in the process that checked it) as one file of admission ranges (:func:`range_count`), a
    record batch each; :meth:`finish` puts consecutive ranges of every block together into parts of at most the
    engine's :attr:`~pipeline.engines.options.EngineOptions.part_rows` (a range larger than that is a part alone),
    or, when its ``partitions`` count the parts, into that many. Rows of no known admission (quarantined by clean)
    are parts of their own, cut by rows.
    """

    def __init__(self, engine: PartsFolder, splits: pd.DataFrame | None) -> None:
        self.engine = engine
        known = pd.DataFrame(columns=["HADM_ID", "SPLIT"]) if splits is None else splits
        order = pd.DataFrame({"SPLIT": split_codes(known["SPLIT"]).astype("int64"),
                              "HADM_ID": known["HADM_ID"].to_numpy("int64")}).sort_values(["SPLIT", "HADM_ID"])
        ranges = range_count(len(order))
        range_of = pd.Series(np.arange(len(order)) * ranges // max(1, len(order)),
                             index=order["HADM_ID"].to_numpy("int64"))
        self._unknown = ranges  # the range of rows of no known admission
        self.route = BlockRoute(engine.folder, engine.share(range_of[~range_of.index.duplicated()]), self._unknown)
        # per routed block, in line order: its file, and per record batch its range and rows (arrays: a block has a
        # batch per range, 500 ranges x 800 blocks at MIMIC-IV scale)
        self._files: list[Path] = []
        self._ranges: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._columns: tuple[str, ...] | None = None
        self._cut = engine.options.part_rows  # None: the engine's partitions count the parts

    def add(self, frame: pd.DataFrame) -> None:
        """A checked block, routed here."""
        self.take(self.route(frame))

    def take(self, routed: Routed) -> None:
        """A block routed where it was checked (:attr:`route`)."""
        self._files.append(routed.path)
        self._columns = self._columns or routed.columns
        self._ranges.append(np.asarray(routed.ranges, dtype="int64"))
        self._rows.append(np.asarray(routed.rows, dtype="int64"))

    def finish(self, schema: type | None = None) -> Stored:
        """The parts (``schema``: what every block added passed, for the next stage's guard)."""
        pieces = _Pieces.of(self._ranges, self._rows)
        known = pieces.in_range != self._unknown
        per = pd.Series(pieces.rows[known]).groupby(pieces.in_range[known]).sum()  # rows per range that has any
        if self._cut is None:
            before = per.cumsum() - per
            cut = (before.to_numpy() * self.engine.options.partitions) // max(1, int(per.sum()))
        else:
            cut = packed(per.to_numpy(), self._cut)
        part = np.full(self._unknown + 1, -1, dtype="int64")
        part[per.index.to_numpy("int64")] = np.unique(cut, return_inverse=True)[1]
        of_piece = part[pieces.in_range]
        unknown = np.flatnonzero(~known)
        if self._cut is None:  # rows of no known admission: a part of their own
            of_piece[unknown] = of_piece.max(initial=-1) + 1
        else:  # rows of no known admission: parts of about rows_per_part rows, in line order
            ends = np.cumsum(pieces.rows[unknown])
            group = (ends - pieces.rows[unknown]) // max(1, self._cut)
            of_piece[unknown] = of_piece.max(initial=-1) + 1 + np.unique(group, return_inverse=True)[1]
        chosen = [np.flatnonzero(of_piece == n) for n in range(of_piece.max(initial=-1) + 1)]
        paths = tuple(pieces.batches(self._files, one) for one in chosen)
        if not paths and self._files:  # no row at all: one empty part, as admission_parts gives
            return Stored(paths=((Batches(self._files[0], ()),),), lengths=(0,), order=None,
                          columns=self._columns or (), schema=schema)
        return Stored(paths=paths, lengths=tuple(int(pieces.rows[one].sum()) for one in chosen), order=None,
                      columns=self._columns or (), schema=schema)


@dataclass(frozen=True)
class _Pieces:
    """Every routed block's record batches, in line order: their file (by position), batch, admission range and
    rows."""

    file: np.ndarray
    batch: np.ndarray
    in_range: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, ranges: Sequence[np.ndarray], rows: Sequence[np.ndarray]) -> "_Pieces":
        sizes = [len(r) for r in ranges]
        empty = np.zeros(0, dtype="int64")
        return cls(file=np.repeat(np.arange(len(sizes)), sizes),
                   batch=np.concatenate([np.arange(n) for n in sizes]) if sizes else empty,
                   in_range=np.concatenate(ranges) if sizes else empty,
                   rows=np.concatenate(rows) if sizes else empty)

    def batches(self, files: Sequence[Path], chosen: np.ndarray) -> tuple[Batches, ...]:
        """The ``chosen`` pieces (positions, in line order) as the batches of each file, files in routed order."""
        file, batch = self.file[chosen], self.batch[chosen]
        starts = np.flatnonzero(np.r_[True, file[1:] != file[:-1]]) if len(file) else np.zeros(0, dtype="int64")
        stops = np.r_[starts[1:], len(file)].astype("int64")
        return tuple(Batches(files[int(file[a])], tuple(batch[a:b].tolist())) for a, b in zip(starts, stops))


def range_count(admissions: int) -> int:
    """How many admission ranges a :class:`Router` cuts ``admissions`` into: :data:`FEWEST_RANGES`, or more where a
    range would hold over :data:`ADMISSIONS_PER_RANGE` admissions (never more ranges than admissions, at least one).

    A part is whole ranges, so a range's rows bound how far a part can be from ``rows_per_part``: the ranges grow
    with the admissions so that a range stays a fraction of a part however large the table is."""
    return max(1, min(admissions, max(FEWEST_RANGES, -(-admissions // ADMISSIONS_PER_RANGE))))


def packed(rows: np.ndarray, most: int) -> np.ndarray:
    """The part of each consecutive range of ``rows`` rows: ranges taken in order while their sum stays within
    ``most`` (a range over ``most`` is a part alone). Over ranges, never rows: a few thousand at MIMIC-IV scale."""
    part = np.zeros(len(rows), dtype="int64")
    current, held = 0, 0
    for n, count in enumerate(rows.tolist()):
        if held and held + count > most:
            current, held = current + 1, 0
        part[n], held = current, held + count
    return part
