"""What an engine is (:class:`Engine`, the one protocol every engine follows) and what the engines share: a link
run on a frame, rows picked and put back in row order, steps added up over parts, errors carried as data, results
read a few tasks ahead, and the choice ``--engine auto`` makes.

Every engine runs the very same stage functions; an engine only decides where they run and how their parts come
back together. It declares what it can do (:attr:`Engine.keeps_parts`); the flow reads that, never sniffs it.
This module names no engine and no stage.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd

from pipeline.reading.parse import PartCheck
from pipeline.kernel.quarantine import Kept, Step
from pipeline.kernel.calls import Chained, Events, Fit, Link, Linked
from schemas.errors import StageError


ROWS_PER_PART = 1_000_000  # a PartsEngine's default: a part of LABEVENTS about this many rows
AUTO_PARTS_BYTES = 256 * 2**20  # LABEVENTS' text from which ``--engine auto`` works on parts
GZIP_TEXT_RATIO = 7  # about how many bytes of text a byte of gzipped LABEVENTS holds (MIMIC-IV: 17 GB in 2.5 GB)


class Engine(Protocol):
    """Runs the LABEVENTS work: raw checks of a block or a table, and the stages, on whole frames or on parts cut by
    admission."""

    # LABEVENTS is kept in the engine's parts: its checked blocks are routed straight into them (:meth:`router`), so
    # the whole table never exists in this process, and the stages hand on parts, not frames.
    keeps_parts: bool

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck: ...

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        """``function(block, **kwargs)`` of each block as it comes (a table read block by block), in order."""

    def each(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        """``function(item, **kwargs)`` of each small item (a file's path and name: a MEDS shard), in order, where
        the parts are worked on: here, in the worker processes, or on the Dask cluster's workers (which must see the
        files ``item`` names)."""

    def router(self, splits: pd.DataFrame | None) -> Any:
        """Where a table's checked blocks go, as they come: into the engine's parts, by admission (``splits``:
        HADM_ID and SPLIT, known from ADMISSIONS). Only an engine that :attr:`keeps_parts` has one."""

    def share(self, value: Any) -> Any:
        """A frame (or another large value) as a task takes it: itself, or (an engine with other processes) a
        :class:`Shared` copy."""

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> Events:
        """``events`` ready for per-admission stages (``splits``: HADM_ID and SPLIT, when the rows have no SPLIT)."""

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """The state ``fit`` learns from all the rows: ``fit.whole(events, *args, **kwargs)``, or as much from
        ``fit.parts`` over the parts."""

    def chain(self, events: Events, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()) -> Chained:
        """Each link's counts, calls and picks, link after link, on all the rows (in one go on each part): what
        each stage made of them (a stage whose call raises :class:`StageError` ends the chain, with the whole
        table's error), the last link's rows, and the states ``fits`` learn from them."""

    def rows(self, events: Events, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        """``pick(events, *args, **kwargs)`` (or ``events[columns]``) as one pandas frame, in row order."""

    def collect(self, events: Events, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows (only ``columns``, when given) as one pandas frame, in part order."""

    def per_part(self, call: Callable[..., Any], events: Events, *args: Any, columns: Sequence[str] | None = None,
                 **kwargs: Any) -> Iterator[Any]:
        """``call(part, *args, **kwargs)`` of each part (only ``columns``, when given), in part order, made where the
        parts are (a frame: of itself, its one part)."""

    def in_batches(self, make: Callable[..., Iterable[Any]], events: Events, *args: Any, batch_size: int,
                   columns: Sequence[str] | None = None, sees: Path | None = None, **kwargs: Any) -> Iterator[Any]:
        """What ``make(parts, *args, batch_size=batch_size, **kwargs)`` yields for edge rows (only ``columns``) that
        come in (split, HADM_ID) order, every admission's rows in one part, and are made into batches of
        ``batch_size`` admissions per split (the graphs): in that order. An engine may cut them into pieces of whole
        batches and make each where the parts are, giving ``make`` ``start``, the admissions of each split in the
        pieces before; ``sees``: a folder ``make`` writes into, which the workers must see to make pieces there."""

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` where the parts are worked on: here, or (Dask) on a worker, when the
        workers see ``sees`` (a folder it writes into)."""

    def result(self, events: Events) -> Events:
        """What a run hands on as its edge rows: a pandas frame, or (parts engine) the parts on disk."""

    def release(self, events: Events) -> None:
        """``events`` will not be read again: what holds them may go."""


def run_link(link: Link, frame: pd.DataFrame) -> tuple[Linked, pd.DataFrame]:
    """One link on ``frame``: what it made, and the rows it hands on (on an error, the rows before the call)."""
    counts = tuple(count(frame) for count in link.counts)
    kept: list[Kept | None] = []
    for call in link.calls:
        try:
            done = call(frame)
        except StageError as error:
            return Linked(counts=counts, kept=tuple(kept), error=error), frame
        kept.append(replace(done, frame=None) if isinstance(done, Kept) else None)  # no frame kept but the last
        frame = done.frame if isinstance(done, Kept) else done
    return Linked(counts=counts, kept=tuple(kept), picks=tuple(pick(frame) for pick in link.picks),
                  rows=len(frame), tallies=tuple(tally(frame) for tally in link.tallies)), frame


def picked(pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None, args: tuple, kwargs: dict,
           frame: pd.DataFrame) -> pd.DataFrame:
    """``pick(frame, *args, **kwargs)`` (``frame`` itself without one), only ``columns`` when given."""
    rows = frame if pick is None else pick(frame, *args, **kwargs)
    return rows if columns is None else rows[list(columns)]


def add_steps(parts: Sequence[tuple[Step, ...]]) -> tuple[Step, ...]:
    """The steps of a stage over all the rows from its steps on each part (the same steps, in the same order)."""
    names = [tuple((s.table, s.stage, s.step) for s in steps) for steps in parts]
    if len(set(names)) != 1:
        raise RuntimeError(f"the parts took different steps: {sorted(set(names))}")
    return tuple(replace(step, **{count: sum(getattr(steps[n], count) for steps in parts)
                                  for count in ("rows_in", "rows_out", "quarantined", "merged", "clipped")})
                 for n, step in enumerate(parts[0]))


def in_row_order(frames: Sequence[pd.DataFrame], order: pd.Index | None) -> pd.DataFrame:
    """``frames`` (rows of the frame whose source lines were ``order``, in that order) as one frame in that order
    (``order`` None: the lines were increasing)."""
    whole = pd.concat(list(frames))
    if order is None:
        return whole.iloc[np.argsort(whole.index.to_numpy(), kind="stable")]
    return whole.iloc[np.argsort(order.get_indexer(whole.index), kind="stable")]


def error_as_data(error: StageError) -> dict:
    """A :class:`StageError` as its fields: what a worker hands back (an error is carried, never raised across
    processes), to be raised again here as ``StageError(**data)``."""
    return dict(stage=error.stage, side=error.side, check=error.check, column=error.column, count=error.count,
                failure_cases=error.failure_cases, table=error.table, detail=error.detail, advice=error.advice)


def ahead_of_results(submit: Callable[[Any], Any], items: Iterable[Any], *, ahead: int) -> Iterator[Any]:
    """The results of ``submit(item)`` (a future) in the items' order, at most ``ahead`` tasks sent before their
    results are read: the workers stay busy, and neither they nor this process hold every part's result at once.
    Tasks not yet read are cancelled when the reader stops (a stage error)."""
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append(submit(item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def in_parts(data_dir: Path) -> bool:
    """Whether ``--engine auto`` works on parts: LABEVENTS holds about :data:`AUTO_PARTS_BYTES` of text or more
    (a file that cannot be found or read: no, the run reports why)."""
    from pipeline.reading.locate import locate_table

    try:
        path = locate_table(Path(data_dir), "LABEVENTS")
        size = path.stat().st_size
    except (StageError, OSError):
        return False
    return size * (GZIP_TEXT_RATIO if path.name.lower().endswith(".gz") else 1) >= AUTO_PARTS_BYTES

