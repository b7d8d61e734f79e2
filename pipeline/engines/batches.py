"""The graphs' edge rows cut into pieces of whole batches (:func:`batch_pieces`), so an engine makes each piece
where its parts are (:func:`batch_piece`): a piece holds the batches that begin in one part, read from it and from
the parts their last admissions reach."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.engines.base import error_as_data
from pipeline.engines.stored import read_part
from pipeline.kernel.handed import value_of
from schemas.errors import StageError
from schemas.split import SPLITS, split_codes


@dataclass(frozen=True)
class BatchPiece:
    """Whole batches of edge rows: the parts they are read from, per split code the HADM_ID range of their
    admissions, and per split name the admissions of the batches before them (``start``)."""

    paths: tuple[Any, ...]
    ranges: tuple[tuple[int, int, int], ...]  # (split code, first HADM_ID, last HADM_ID)
    start: dict[str, int]


def admitted_in(part: pd.DataFrame) -> pd.DataFrame:
    """A part's admissions: split code and HADM_ID, sorted (the edge rows' order)."""
    pairs = pd.DataFrame({"split": split_codes(part["SPLIT"]).astype("int64"),
                          "hadm": part["HADM_ID"].to_numpy("int64")})
    return pairs.drop_duplicates().sort_values(["split", "hadm"], ignore_index=True)


def batch_pieces(admitted: Sequence[pd.DataFrame], paths: Sequence[Any], batch_size: int) -> list[BatchPiece]:
    """Pieces of whole batches of ``batch_size`` admissions per split, one per part in which a batch begins: its
    batches are those that begin there, read from that part and the parts after it that their admissions reach.
    ``admitted``: each part's admissions (:func:`admitted_in`), the parts in (split, HADM_ID) order, every admission
    in one part."""
    whole = pd.concat([frame.assign(part=n) for n, frame in enumerate(admitted)], ignore_index=True)
    if whole.empty:
        return []
    split, hadm, part = (whole[c].to_numpy("int64") for c in ("split", "hadm", "part"))
    batch = whole.groupby("split").cumcount().to_numpy("int64") // batch_size
    first = np.flatnonzero(np.r_[True, (split[1:] != split[:-1]) | (batch[1:] != batch[:-1])])
    last = np.r_[first[1:], len(whole)] - 1
    batches = pd.DataFrame({"piece": part[first], "split": split[first], "lo": hadm[first], "hi": hadm[last],
                            "batch": batch[first], "reach": part[last]})
    # Per piece and split: the HADM_ID range and the first batch of the batches that begin in the piece's part.
    per = batches.groupby(["piece", "split"], sort=True).agg(
        lo=("lo", "min"), hi=("hi", "max"), batch=("batch", "min"), reach=("reach", "max")).reset_index()
    piece = per["piece"].to_numpy("int64")
    bounds = np.flatnonzero(np.r_[True, piece[1:] != piece[:-1]])
    pieces = []
    for begin, end in zip(bounds, [*bounds[1:], len(per)]):  # one per part in which a batch begins
        rows = per.iloc[begin:end]
        pieces.append(BatchPiece(
            paths=tuple(paths[int(piece[begin]):int(rows["reach"].max()) + 1]),
            ranges=tuple(zip(*(rows[c].astype("int64").tolist() for c in ("split", "lo", "hi")))),
            start={SPLITS[s]: b * batch_size for s, b in zip(rows["split"].tolist(), rows["batch"].tolist())}))
    return pieces


@dataclass(frozen=True)
class PieceDone:
    """What ``make`` made of a piece, as data (a StageError is carried, never raised across processes)."""

    made: tuple = ()
    error: dict | None = None


def batch_piece(piece: BatchPiece, *, make: Callable[..., Iterable[Any]], args: tuple, kwargs: dict,
                columns: list[str] | None) -> PieceDone:
    """``make`` of the rows of ``piece``'s batches (a StageError carried as data), read from its parts with only
    those rows (a part its last batches reach holds mostly the next piece's)."""
    frames = [read_part(path, columns, where=functools.partial(_in_ranges, ranges=piece.ranges))
              for path in piece.paths]
    rows = frames[0] if len(frames) == 1 else pd.concat(frames)
    try:
        return PieceDone(made=tuple(make([rows], *map(value_of, args), start=dict(piece.start), **kwargs)))
    except StageError as error:
        return PieceDone(error=error_as_data(error))


def _in_ranges(table: pa.Table, *, ranges: tuple[tuple[int, int, int], ...]) -> pa.Array:
    """Which rows of an Arrow table of edge rows have their admission in ``ranges`` (split code, first and last
    HADM_ID; at most one range per split)."""
    hadm = table["HADM_ID"]
    return functools.reduce(pc.or_, [pc.and_(pc.equal(table["SPLIT"], SPLITS[code]),
                                             pc.and_(pc.greater_equal(hadm, lo), pc.less_equal(hadm, hi)))
                                     for code, lo, hi in ranges])
