"""Where LABEVENTS is worked on: in this process on whole frames (pandas, the default), or on parts of it kept as
Arrow files, each part worked on in this process (parts) or by the workers of a ``dask.distributed`` cluster (Dask).

All engines run the very same stage functions; an engine only decides where
they run and how their parts come back together. With the parts and Dask engines:

- raw checks: LABEVENTS is read in blocks here; each is checked, guarded and written into its admission ranges
  (:class:`BlockRoute`) where the parts are worked on (in the worker processes or on the cluster, while this
  process reads the next blocks), and :class:`Router` makes admission-range parts of them, so the whole table never
  exists. The split and the admission order are known from ADMISSIONS (small) before any lab row is read. Keys,
  foreign keys and stays are checked per block against ADMISSIONS and D_LABITEMS (``pipeline.parse.check_stream``),
  which every task reads from one file (:class:`pipeline.shared.Shared`), not from the task.
- every stage works per row or per admission (clean, split, encode, z-scores, fill, bucket, dedup), and every
  admission's rows are in one part, so the stages of a pass run on each part alone, one after the other (``chain``),
  and their quarantine records (kept on disk by source line range: :class:`LineFiles`) and steps are added up.
- a stage's fit (:class:`pipeline.work.Fit`) is global: a mergeable one (``partial``, ``combine``,
  ``finish``: item kinds, vocabularies, z-score stats) reads each part and gives a small result; those are
  combined into exactly the state one process fits. Any other fit (fill's exact medians) reads the rows and
  columns it needs, gathered.
- findings about the whole table read the rows or columns they need, gathered in the input's row order (``rows``).
- a :class:`StageError` on any part makes the stage run on its gathered input, so the report carries exactly the
  error the pandas engine reports (count, lines, items), never just the first part's.
- the edge rows stay in their parts, in part order, which is the dedup stage's order (split, admission,
  timestep, item): the graphs are built from them one part at a time.

A part's work is one function of its file (``_chain_part``, ``_call_part``, ...): :class:`PartsEngine` calls it
here, one part at a time, and :class:`DaskEngine` sends it to a worker as a task.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copyreg
import ctypes
import functools
import itertools
import multiprocessing
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.parse import PartCheck, check_part
from pipeline.quarantine import LINE_RANGE, Kept, LineMask, Step, empty_quarantine
from pipeline.shared import PART_OPTIONS, Shared, share, shared_frames, value_of, write_part
from pipeline.work import Call, Chained, Events, Fit, Link, Linked
from schemas.errors import StageError
from schemas.guard import trusted_chain, vouch
from schemas.split import SPLITS, split_codes


ROWS_PER_PART = 1_000_000  # a PartsEngine's default: a part of LABEVENTS about this many rows
AUTO_PARTS_BYTES = 256 * 2**20  # LABEVENTS' text from which ``--engine auto`` works on parts
GZIP_TEXT_RATIO = 7  # about how many bytes of text a byte of gzipped LABEVENTS holds (MIMIC-IV: 17 GB in 2.5 GB)
BUCKETS = 64  # admission ranges a Router writes checked blocks into (consecutive ones make a part)
COMBINE_EVERY = 8  # a mergeable fit's partial results held before they are combined (MIMIC-IV: ~120 parts)


class Engine(Protocol):
    """Runs the LABEVENTS work: raw checks of a block or a table, and the stages, on whole frames or on parts cut by
    admission."""

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck: ...

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        """``function(block, **kwargs)`` of each block as it comes (a table read block by block), in order."""

    def share(self, value: pd.DataFrame | pd.Series) -> Any:
        """A frame as a task takes it: itself, or (an engine with other processes) a :class:`Shared` copy."""

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


class PandasEngine:
    """Everything in this process, on whole frames."""

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck:
        return check_part(table, frame, **settings)

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        return (function(block, **kwargs) for block in blocks)

    def share(self, value: Any) -> Any:
        return value

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> pd.DataFrame:
        return events

    def fit(self, fit: Fit, events: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        return fit.whole(events, *args, **kwargs)

    def chain(self, events: pd.DataFrame, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()
              ) -> Chained:
        done, frame = [], events
        for link in links:
            linked, frame = _link(link, frame)
            done.append(linked)
            if linked.error is not None:
                return Chained(links=tuple(done))
        return Chained(links=tuple(done), events=frame,
                       fitted=tuple(fit.whole(frame, *args, **kwargs) for fit, args, kwargs in fits))

    def rows(self, events: pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        return _pick(pick, columns, args, kwargs, events)

    def collect(self, events: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return events if columns is None else events[list(columns)]

    def per_part(self, call: Callable[..., Any], events: pd.DataFrame | Stored, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        """Here: of the frame, or of a parts engine's parts read one at a time."""
        return (call(part, *args, **kwargs) for part in frames(events, columns))

    def in_batches(self, make: Callable[..., Iterable[Any]], events: pd.DataFrame, *args: Any, batch_size: int,
                   columns: Sequence[str] | None = None, sees: Path | None = None, **kwargs: Any) -> Iterator[Any]:
        return iter(make(frames(events, columns), *args, batch_size=batch_size, **kwargs))

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    def result(self, events: pd.DataFrame) -> pd.DataFrame:
        return events

    def release(self, events: pd.DataFrame) -> None:
        pass


PANDAS = PandasEngine()


@dataclass(frozen=True)
class Stored:
    """A frame cut by admission, its parts Arrow files (in part order) of a :class:`PartsEngine`'s folder; a
    part routed from blocks (:class:`Router`) is some record batches of several files (:class:`Batches`: files that
    parts share), read together in source line order."""

    paths: tuple[Path | tuple[Path | Batches, ...], ...]
    lengths: tuple[int, ...]
    order: pd.Index | None  # the source lines in the row order of the frame that was cut (None: increasing)
    columns: tuple[str, ...] = ()  # the frame's columns, when known
    schema: type | None = None  # the schema every part passed as a stage's output (its guard's), when known

    def __len__(self) -> int:
        return sum(self.lengths)

    def read(self, columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
        """The parts one at a time, in part order (only ``columns``, when given)."""
        for path in self.paths:
            yield PartsEngine._read(path, None if columns is None else list(columns))


class PartsEngine:
    """On parts cut by admission and kept as Arrow files in ``folder``: a stage reads one part, runs, and writes
    what it gives as a new file, so one part of LABEVENTS is in memory per process at a time; the parts are worked
    on here, or by ``workers`` processes of this machine. ``partitions`` parts, or as many as ``rows_per_part``
    needs (at least one).

    A table's raw checks run block by block: ADMISSIONS' and D_LABITEMS' here, LABEVENTS' where the parts are worked
    on, each block routed into the parts (:meth:`router`, :meth:`blocks`). Use
    :func:`parts_engine`: its folder is deleted at the end of the run, also when the run fails.
    """

    def __init__(self, folder: Path, *, partitions: int | None = None, rows_per_part: int | None = None,
                 workers: int | None = None) -> None:
        self.folder = Path(folder)
        self.partitions = partitions
        self.rows_per_part = rows_per_part
        self.workers = workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._written = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]  # engines sharing a folder never write the same file

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck:
        return check_part(table, frame, **settings)

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        """``function(block, **kwargs)`` of each block, in order, where the parts are worked on (here, or in the
        worker processes while this one reads the next blocks: each block handed over as an Arrow file of the parts
        folder, which costs one copy, not a pickle sent through a pipe)."""
        if not self._elsewhere():
            return self._map(function, blocks, **kwargs)
        return self._map(_block_part, (self._write(block) for block in blocks), call=function, kwargs=kwargs)

    def _elsewhere(self) -> bool:
        """Whether the parts are worked on in other processes."""
        return bool(self.workers and self.workers >= 2)

    def share(self, value: pd.DataFrame | pd.Series) -> Shared:
        """A frame written once into the parts folder: tasks carry its path, each process reads it once."""
        return share(value, self._path())

    def partition(self, events: pd.DataFrame | Stored, splits: pd.DataFrame | None = None) -> Stored:
        if isinstance(events, Stored):  # routed into parts as its blocks were read
            return events
        count = self.partitions or -(-len(events) // max(1, self.rows_per_part or len(events) or 1))
        frames = admission_parts(events, max(1, count), splits)
        order = None if events.index.is_monotonic_increasing else events.index
        return Stored(paths=tuple(self._write(frame) for frame in frames), lengths=tuple(len(f) for f in frames),
                      order=order, columns=tuple(events.columns))

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """A mergeable fit part by part (its partial results, or its passes); any other fit on what it was handed."""
        if not isinstance(events, Stored) or (fit.parts is None and fit.partial is None):
            return fit.whole(events, *args, **kwargs)
        if fit.partial is not None:  # combined a few at a time as they come (a combine adds up: counts, sums)
            partials: list = []
            for partial in self._map(_call_part, events.paths, call=fit.partial, args=args, kwargs=kwargs):
                partials.append(partial)
                if len(partials) > COMBINE_EVERY:
                    partials = [fit.combine(partials)]
            return fit.finish(fit.combine(partials), *args, **kwargs)

        kept_by_passes: list[Stored] = []

        def keep(step: Callable[[pd.DataFrame], pd.DataFrame]) -> Stored:
            targets = [self._path() for _ in events.paths]
            list(self._map(_step_part, list(zip(events.paths, targets)), step=step))
            kept_by_passes.append(replace(events, paths=tuple(targets)))
            return kept_by_passes[-1]

        try:
            return fit.parts(keep, lambda kept, step: list(self._map(_call_part, kept.paths, call=step)), *args,
                             **kwargs)
        finally:
            for kept in kept_by_passes:
                self.release(kept)

    def chain(self, events: Stored, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()) -> Chained:
        """The links on every part, each part in one go (one read, one write: in a worker process or on a cluster's
        worker): the calls' quarantine records go to line-range files as the parts give them, their steps, counts
        and the fits' partial results add up, the picks are put in row order. A call that fails on any part is run
        again here on all its input rows (the links before it redone part by part), so the error is the whole
        table's, as the pandas engine reports it."""
        if not isinstance(events, Stored):
            return PANDAS.chain(events, links, fits)
        targets = [self._path() for _ in events.paths]
        # Frames among the calls' arguments (ADMISSIONS, the split) go into the parts folder once, not into every task.
        work = (tuple(Link(*(tuple(self._shared(call) for call in calls) for calls in (link.calls, link.counts,
                                                                                            link.picks)))
                      for link in links),
                tuple(self._shared(Call(fit.partial, args, kwargs)) for fit, args, kwargs in fits))
        records = [[LineFiles(self) for _ in link.calls] for link in links]
        steps: list[list[list]] = [[[] for _ in link.calls] for link in links]
        kept = [[False] * len(link.calls) for link in links]
        counts: list[list[Any]] = [[None] * len(link.counts) for link in links]
        picks: list[list[list[pd.DataFrame]]] = [[[] for _ in link.picks] for link in links]
        rows = [0] * len(links)
        partials: list[list[Any]] = [[] for _ in fits]
        lengths, columns, failed = [], (), None
        for done in self._map(_chain_part, list(zip(events.paths, targets)), work=work, schema=events.schema):
            for n, part in enumerate(done.links):
                for k, count in enumerate(part.counts):
                    counts[n][k] = count if counts[n][k] is None else counts[n][k] + count
                for k, call in enumerate(part.kept):
                    if call is not None:
                        kept[n][k] = True
                        records[n][k].add(call[0])
                        steps[n][k].append(call[1])
                for k, picked in enumerate(part.picks):
                    picks[n][k].append(picked)
                rows[n] += part.rows
            if done.error is not None:
                failed = min(failed or done.error, done.error, key=lambda e: (e[0], e[1]))
                continue
            lengths.append(done.rows)
            columns = done.columns
            for f, partial in enumerate(done.partials):
                partials[f].append(partial)
                if len(partials[f]) > COMBINE_EVERY:
                    partials[f] = [fits[f][0].combine(partials[f])]
        ended = len(links) if failed is None else failed[0] + 1
        quarantines = [[files.finish() for files in link] for link in records]  # every writer closed
        linked = []
        for n in range(ended):
            calls = len(links[n].calls) if n < ended - 1 or failed is None else failed[1]
            linked.append(Linked(
                counts=tuple(counts[n]),
                kept=tuple(Kept(frame=None, quarantine=quarantines[n][k], steps=add_steps(steps[n][k]))
                           if kept[n][k] else None for k in range(calls)),
                picks=tuple(in_row_order(frames, events.order) for frames in picks[n]) if n < ended - 1 or
                failed is None else (),
                rows=rows[n]))
        if failed is not None:
            self.release(replace(events, paths=tuple(targets)))
            linked[-1] = replace(linked[-1], error=self._whole_error(events, links, failed))
            return Chained(links=tuple(linked))
        gives = getattr(links[-1].calls[-1].function, "gives", None) if links and links[-1].calls else events.schema
        out = Stored(paths=tuple(targets), lengths=tuple(lengths), order=events.order, columns=columns, schema=gives)
        return Chained(links=tuple(linked), events=out,
                       fitted=tuple(fit.finish(fit.combine(partial), *args, **kwargs)
                                    for (fit, args, kwargs), partial in zip(fits, partials)))

    def _shared(self, call: Call) -> Call:
        return Call(call.function, shared_frames(call.args, self.share),
                    dict(zip(call.kwargs, shared_frames(tuple(call.kwargs.values()), self.share))))

    def _whole_error(self, events: Stored, links: Sequence[Link], failed: tuple[int, int, dict]) -> StageError:
        """The error of call ``failed[1]`` of link ``failed[0]`` on all its input rows, gathered in row order (the
        error one part gave, if the whole raises none: a call that fails on a part but not on all the rows)."""
        link, call, error = failed
        before = [Link(calls=links[n].calls) for n in range(link)] + [Link(calls=links[link].calls[:call])]
        frames = [PANDAS.chain(read_part(path), before).events for path in events.paths]
        try:
            links[link].calls[call](in_row_order(frames, events.order))
        except StageError as whole:
            return whole
        return StageError(**error)

    def rows(self, events: Stored | pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        """Rows picked part by part, in row order; ``columns``: only those are read (``pick`` sees no others)."""
        if isinstance(events, pd.DataFrame):
            return _pick(pick, columns, args, kwargs, events)
        return in_row_order(list(self._map(_pick_part, events.paths, pick=pick, columns=columns, args=args,
                                           kwargs=kwargs)), events.order)

    def collect(self, events: Stored | pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        if isinstance(events, pd.DataFrame):
            return PANDAS.collect(events, columns)
        return pd.concat(list(events.read(columns)))

    def per_part(self, call: Callable[..., Any], events: Stored | pd.DataFrame, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        if isinstance(events, pd.DataFrame):
            return PANDAS.per_part(call, events, *args, columns=columns, **kwargs)
        return self._map(_call_part, events.paths, call=call, args=args, kwargs=kwargs,
                         columns=None if columns is None else list(columns))

    def in_batches(self, make: Callable[..., Iterable[Any]], events: Stored | pd.DataFrame, *args: Any,
                   batch_size: int, columns: Sequence[str] | None = None, sees: Path | None = None,
                   **kwargs: Any) -> Iterator[Any]:
        """Where the parts are worked on, a piece of whole batches per task (:func:`batch_pieces`: the batches that
        begin in a part, read from it and the parts their last admissions are in), so this process never holds the
        edge rows or what ``make`` makes of them beyond what it yields. Here, from the parts read one at a time
        (``make`` streams over them), when they are worked on here or the workers cannot see ``sees``."""
        if isinstance(events, pd.DataFrame) or not self._elsewhere() or (sees is not None
                                                                          and not self._seen_by_workers(Path(sees))):
            yield from PANDAS.in_batches(make, events, *args, batch_size=batch_size, columns=columns, **kwargs)
            return
        admitted = list(self._map(_call_part, events.paths, call=admitted_in, columns=["SPLIT", "HADM_ID"]))
        pieces = batch_pieces(admitted, events.paths, batch_size)
        for done in self._map(_batch_piece, pieces, make=make, args=shared_frames(args, self.share),
                              kwargs={**kwargs, "batch_size": batch_size},
                              columns=None if columns is None else list(columns)):
            if done.error is not None:
                raise StageError(**done.error)
            yield from done.made

    def _seen_by_workers(self, folder: Path) -> bool:
        """Whether the processes that work on the parts see ``folder``: this machine's do."""
        return True

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        """Here (the parts engine's processes work on parts only)."""
        return function(*args, **kwargs)

    def _map(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        """``function(item, **kwargs)`` of each item, in order: here, one part at a time, or with ``workers`` on
        that many processes of this machine (see :class:`DaskEngine` for the parts on a cluster's workers)."""
        if not self.workers or self.workers < 2:
            return (function(item, **kwargs) for item in items)
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=context, initializer=start_worker,
                initargs=(context.Barrier(self.workers),))
        return self._then_give_back(ahead_of_results(lambda item: self._pool.submit(function, item, **kwargs), items,
                                                     ahead=2 * self.workers))

    def _then_give_back(self, results: Iterator[Any]) -> Iterator[Any]:
        """``results``, then (all read) each worker gives back the memory it kept for the next part."""
        yield from results
        for done in [self._pool.submit(_give_back_all) for _ in range(self.workers)]:
            done.result()

    def close(self) -> None:
        """Stop the processes ``workers`` started (:func:`parts_engine` does, at the end of the run)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def result(self, events: Stored) -> Stored:
        """The edge rows stay in their parts (read them with ``Stored.read`` or :meth:`collect`, while the engine
        lasts): a run never holds them whole unless it builds graphs, which reads only the columns it needs."""
        return events

    def release(self, events: Events) -> None:
        """A stage's parts once the next stage made its own: their files are deleted (the disk holds about two
        copies of LABEVENTS at a time, not one per stage)."""
        if isinstance(events, Stored):
            for path in events.paths:
                for one in (path,) if isinstance(path, Path) else path:
                    (one.path if isinstance(one, Batches) else one).unlink(missing_ok=True)

    def _write(self, frame: pd.DataFrame) -> Path:
        path = self._path()
        write_part(frame, path)
        return path

    def _path(self) -> Path:
        return self.folder / f"part-{self._prefix}-{next(self._written):06d}.arrow"

    @staticmethod
    def _read(path: Path | tuple[Path, ...], columns: list[str] | None = None) -> pd.DataFrame:
        return read_part(path, columns)

    def router(self, splits: pd.DataFrame | None) -> "Router":
        """Where a table's checked blocks go, as they come: into this engine's parts, by admission."""
        return Router(self, splits)


@dataclass(frozen=True)
class _LinkDone:
    """What one link made of one part, as data: counts, each call's (quarantine, steps) or None, picks, rows."""

    counts: tuple[Any, ...] = ()
    kept: tuple[tuple[pd.DataFrame, tuple[Step, ...]] | None, ...] = ()
    picks: tuple[pd.DataFrame, ...] = ()
    rows: int = 0


@dataclass(frozen=True)
class _ChainDone:
    """What a chain made of one part: per link its :class:`_LinkDone`; the rows written, or (link, call, error)."""

    links: tuple[_LinkDone, ...] = ()
    rows: int = 0
    columns: tuple[str, ...] = ()
    partials: tuple[Any, ...] = ()
    error: tuple[int, int, dict] | None = None


def _link(link: Link, frame: pd.DataFrame) -> tuple[Linked, pd.DataFrame]:
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
                  rows=len(frame)), frame


def _chain_part(paths: tuple[Any, Path], *, work: Any, schema: type | None) -> _ChainDone:
    """The links (and the fits' partial results, of the last link's rows) on the part at ``paths[0]``, vouched
    for with ``schema``; the rows written to ``paths[1]``. Each call's output goes straight to the next call (a
    trusted chain: its guard passed it already)."""
    links, partials = work
    source, target = paths
    done = []
    with trusted_chain():
        frame = vouch(read_part(source), schema)
        for n, link in enumerate(links):
            linked, frame = _link(link, frame)
            done.append(_LinkDone(counts=linked.counts, picks=linked.picks, rows=linked.rows,
                                  kept=tuple(None if k is None else (k.quarantine, k.steps) for k in linked.kept)))
            if linked.error is not None:
                return _ChainDone(links=tuple(done), error=(n, len(linked.kept), _as_data(linked.error)))
        fitted = tuple(partial(frame) for partial in partials)
    write_part(frame, target)
    return _ChainDone(links=tuple(done), rows=len(frame), columns=tuple(frame.columns), partials=fitted)


def _step_part(paths: tuple[Any, Path], *, step: Callable[[pd.DataFrame], pd.DataFrame]) -> int:
    source, target = paths
    frame = step(read_part(source))
    write_part(frame, target)
    return len(frame)


def _block_part(path: Path, *, call: Callable[..., Any], kwargs: dict) -> Any:
    """``call(block, **kwargs)`` of the block handed over at ``path`` (deleted once read)."""
    block = read_part(path)
    path.unlink(missing_ok=True)
    return call(block, **kwargs)


def _call_part(source: Any, *, call: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
               columns: list[str] | None = None) -> Any:
    """``call`` of a part: only ``columns`` read when given, else those ``call`` declares it reads (all without)."""
    if columns is not None:
        return call(read_part(source, columns), *args, **(kwargs or {}))
    return call(read_part(source, getattr(call, "reads", None), present=True), *args, **(kwargs or {}))


def _pick_part(source: Any, *, pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None,
               args: tuple, kwargs: dict) -> pd.DataFrame:
    if columns is not None:
        return _pick(pick, columns, args, kwargs, read_part(source, list(columns)))
    return _pick(pick, columns, args, kwargs, read_part(source, getattr(pick, "reads", None), present=True))


def _as_data(error: StageError) -> dict:
    return dict(stage=error.stage, side=error.side, check=error.check, column=error.column, count=error.count,
                failure_cases=error.failure_cases, table=error.table, detail=error.detail, advice=error.advice)


@dataclass(frozen=True)
class Ranged:
    """Quarantine records kept by source line range (:class:`pipeline.quarantine.ByLines`): per range, an Arrow
    file of a :class:`PartsEngine`'s folder."""

    files: tuple[tuple[int, Path], ...]  # (range, file), by range

    def ranges(self) -> tuple[int, ...]:
        return tuple(number for number, _ in self.files)

    def range(self, number: int, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The records of range ``number`` (only ``columns``), in source line order."""
        return read_part(dict(self.files)[number], columns).sort_index(kind="stable")


class LineFiles:
    """Quarantine records written by source line range as the parts give them (:class:`Ranged`): a range is one
    file, each part's records in it a record batch (compressed: the same few texts on every row)."""

    def __init__(self, engine: PartsEngine) -> None:
        self.engine = engine
        self._writers: dict[int, Any] = {}
        self._files: dict[int, Path] = {}
        self._schema = None

    def add(self, records: pd.DataFrame) -> None:
        if not len(records):
            return
        records = records.sort_index(kind="stable")
        number = records.index.to_numpy("int64") // LINE_RANGE
        starts = np.flatnonzero(np.r_[True, number[1:] != number[:-1]])
        if self._schema is None:
            self._schema = pa.Schema.from_pandas(records, preserve_index=True)
        for start, stop in zip(starts, [*starts[1:], len(number)]):
            key = int(number[start])
            if key not in self._writers:
                self._files[key] = self.engine._path()
                self._writers[key] = pa.ipc.new_file(self._files[key], self._schema, options=_RECORDS)
            self._writers[key].write_table(pa.Table.from_pandas(records.iloc[start:stop], schema=self._schema,
                                                                preserve_index=True))

    def finish(self) -> Ranged | pd.DataFrame:
        """The records by line range (none: an empty quarantine frame)."""
        for writer in self._writers.values():
            writer.close()
        if not self._files:
            return empty_quarantine()
        return Ranged(files=tuple(sorted(self._files.items())))


@dataclass(frozen=True)
class Batches:
    """Some record batches of one Arrow file (a routed block's rows of some admission ranges)."""

    path: Path
    batches: tuple[int, ...]


@dataclass(frozen=True)
class Routed:
    """A checked block written by :class:`BlockRoute`: its file holds one record batch per admission range (bucket)
    that has rows, in bucket order."""

    path: Path
    buckets: tuple[int, ...]
    rows: tuple[int, ...]
    columns: tuple[str, ...]


@dataclass(frozen=True)
class BlockRoute:
    """Writes a checked block's rows into a file of the parts folder, one record batch per admission range: what a
    :class:`Router` makes parts of. Picklable, so the process that checks a block writes it."""

    folder: Path
    ranges: Any  # Shared, or the Series itself: HADM_ID -> admission range (bucket)
    unknown: int  # the bucket of rows of no known admission

    def __call__(self, frame: pd.DataFrame) -> Routed:
        ranges = value_of(self.ranges)
        hadm = frame["HADM_ID"].to_numpy("float64", na_value=np.nan)
        known = ~np.isnan(hadm)
        bucket = np.full(len(frame), self.unknown, dtype="int64")
        bucket[known] = ranges.reindex(hadm[known].astype("int64")).fillna(self.unknown).to_numpy("int64")
        order = np.argsort(bucket, kind="stable")
        ranked = bucket[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(ranked) else np.array([], "int64")
        stops = np.r_[starts[1:], len(ranked)].astype("int64")
        rows = frame if np.array_equal(order, np.arange(len(order))) else frame.iloc[order]
        batch = pa.RecordBatch.from_pandas(rows, preserve_index=True)
        path = self.folder / f"block-{uuid.uuid4().hex}.arrow"
        with pa.ipc.new_file(path, batch.schema, options=PART_OPTIONS) as writer:
            for start, stop in zip(starts, stops):
                writer.write_batch(batch.slice(int(start), int(stop - start)))
        return Routed(path=path, buckets=tuple(int(ranked[s]) for s in starts),
                      rows=tuple(int(n) for n in stops - starts), columns=tuple(frame.columns))


class Router:
    """Checked LABEVENTS blocks written straight into admission-range parts, so the whole table never exists.

    The parts are those :func:`admission_parts` cuts: admissions in (split, HADM_ID) order (``splits`` from
    ADMISSIONS alone, known before any lab row), every admission's rows in one part, each part in source line
    order, rows of no known admission last. As the rows per admission are known only at the end, each block is
    written (by :meth:`route`, in the process that checked it) as one file of :data:`BUCKETS` admission ranges, a
    record batch each; :meth:`finish` puts consecutive ranges of every block together into parts of about the
    engine's ``rows_per_part`` (or into its ``partitions``). Rows of no known admission (quarantined by clean) are
    parts of their own, cut by rows.
    """

    def __init__(self, engine: PartsEngine, splits: pd.DataFrame | None) -> None:
        self.engine = engine
        known = pd.DataFrame(columns=["HADM_ID", "SPLIT"]) if splits is None else splits
        order = pd.DataFrame({"SPLIT": split_codes(known["SPLIT"]).astype("int64"),
                              "HADM_ID": known["HADM_ID"].to_numpy("int64")}).sort_values(["SPLIT", "HADM_ID"])
        buckets = max(1, min(BUCKETS, len(order)))
        bucket = pd.Series(np.arange(len(order)) * buckets // max(1, len(order)),
                           index=order["HADM_ID"].to_numpy("int64"))
        self._unknown = buckets  # the bucket of rows of no known admission
        self.route = BlockRoute(engine.folder, engine.share(bucket[~bucket.index.duplicated()]), self._unknown)
        self._pieces: dict[int, list[tuple[Path, int, int]]] = {}  # per bucket: (file, batch, rows), in line order
        self._files: list[Path] = []
        self._columns: tuple[str, ...] | None = None
        self._cut = engine.rows_per_part if engine.partitions is None and engine.rows_per_part else None

    def add(self, frame: pd.DataFrame) -> None:
        """A checked block, routed here."""
        self.take(self.route(frame))

    def take(self, routed: Routed) -> None:
        """A block routed where it was checked (:attr:`route`)."""
        self._files.append(routed.path)
        self._columns = self._columns or routed.columns
        for batch, (bucket, rows) in enumerate(zip(routed.buckets, routed.rows)):
            self._pieces.setdefault(bucket, []).append((routed.path, batch, rows))

    def finish(self, schema: type | None = None) -> Stored:
        """The parts (``schema``: what every block added passed, for the next stage's guard)."""
        known = [b for b in sorted(self._pieces) if b != self._unknown]
        rows = np.array([sum(n for _, _, n in self._pieces[b]) for b in known], dtype="int64")
        total = int(rows.sum())
        before = np.cumsum(rows) - rows
        if self._cut is None:
            cut = (before * max(1, self.engine.partitions or 1)) // max(1, total)
        else:
            cut = before // max(1, self._cut)
        parts: list[list[tuple[Path, int, int]]] = []
        for part in np.unique(cut):
            chosen = {b for b, c in zip(known, cut) if c == part}
            parts.append([piece for b in sorted(chosen) for piece in self._pieces[b]])
        unknown = self._pieces.get(self._unknown, [])
        if self._cut is None:
            parts += [unknown] if unknown else []
        else:  # rows of no known admission: parts of about rows_per_part rows, in line order
            ends = np.cumsum([n for _, _, n in unknown]) if unknown else np.array([], "int64")
            group = (np.r_[0, ends[:-1]] // max(1, self._cut)) if len(ends) else ends
            parts += [[unknown[i] for i in np.flatnonzero(group == g)] for g in np.unique(group)]
        paths = tuple(_by_file(part, self._files) for part in parts)
        if not parts and self._files:  # no row at all: one empty part, as admission_parts gives
            paths, parts = ((Batches(self._files[0], ()),),), [[]]
        return Stored(paths=paths,
                      lengths=tuple(sum(n for _, _, n in part) for part in parts), order=None,
                      columns=self._columns or (), schema=schema)


def _by_file(pieces: Sequence[tuple[Path, int, int]], routed: Sequence[Path]) -> tuple[Batches, ...]:
    """A part's pieces as the batches of each file, the files in the order they were routed (source line order)."""
    files: dict[Path, list[int]] = {}
    for path, batch, _ in pieces:
        files.setdefault(path, []).append(batch)
    rank = {path: n for n, path in enumerate(routed)}
    return tuple(Batches(path, tuple(sorted(files[path]))) for path in sorted(files, key=rank.__getitem__))


_RECORDS = pa.ipc.IpcWriteOptions(compression="lz4")  # quarantine records: the same few texts on every row


_GIVE_BACK_BARRIER: Any = None  # a PartsEngine's worker keeps freed memory: where its workers meet to give it back


def give_back_memory() -> None:
    """Return the memory Arrow's pool keeps from the part before (without it, the pool's retained memory, not the
    parts, sets the peak over a run of parts), unless this process keeps it for the next part (a worker:
    :func:`keep_freed_memory`)."""
    if _GIVE_BACK_BARRIER is None:
        pa.default_memory_pool().release_unused()


def start_worker(barrier: Any) -> None:
    """A :class:`PartsEngine` worker process, before its first task: torch's and the BLAS libraries' loops run on one
    thread (:data:`ONE_THREAD`, as Dask's nanny sets for its workers), since the workers are already one per core, and
    it keeps the memory a part frees (:func:`keep_freed_memory`). With two threads in each of two workers, torch's
    OpenMP threads spun against each other: the graphs of 27.8M rows took 43 s on the workers against 12 s here."""
    os.environ.update(ONE_THREAD)
    keep_freed_memory(barrier)


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def keep_freed_memory(barrier: Any) -> None:
    """A :class:`PartsEngine` worker keeps the memory a part frees for the next part of the pass: glibc's malloc
    neither maps big arrays apart nor trims its heap (``mallopt``), and :func:`give_back_memory` leaves Arrow's pool
    as it is. Memory given back to the system comes back zero-filled, by the kernel, at the next part's first
    touch: at 27.8M rows ``validate``'s system time fell from 21-23 s to 17-19 s once the workers kept it. At the
    end of a pass each worker gives it all back (:func:`_give_back_all`), so what one pass (a stage's, the graphs')
    kept is not held through the next, nor by idle workers while this process works alone."""
    global _GIVE_BACK_BARRIER
    _GIVE_BACK_BARRIER = barrier
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        mallopt(M_MMAP_THRESHOLD, 2**30)
        mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def _give_back_all() -> None:
    """A worker's part of :meth:`PartsEngine._then_give_back`: what its allocators keep goes back to the system;
    then it waits for the other workers, so each takes exactly one of these tasks."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
        trim(0)
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(threading.BrokenBarrierError):  # a worker gone: the pool reports that, not this
        _GIVE_BACK_BARRIER.wait(timeout=GIVE_BACK_WAIT)


def _libc(name: str) -> Any:
    """A glibc function of this process (None with another C library)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
GIVE_BACK_WAIT = 60.0  # seconds a worker waits for the others to give back memory at the end of a pass


def read_part(path: Path | tuple[Path | Batches, ...], columns: Sequence[str] | None = None, *,
              present: bool = False, where: Callable[[pa.Table], Any] | None = None) -> pd.DataFrame:
    """A part written by :func:`write_part` (or a :class:`Router`'s pieces of one part: files, or some record
    batches of files, put in source line order), with only ``columns`` (``present``: those of them it has) and its
    index; ``where``: only the rows of its mask (of the Arrow table), chosen before any pandas column is made. What
    the part before it used is given back first."""
    give_back_memory()
    pieces = (path,) if isinstance(path, Path) else tuple(path)
    batches = []
    for one in pieces:
        with pa.OSFile(str(one.path if isinstance(one, Batches) else one)) as source:  # the buffers are our own
            reader = pa.ipc.open_file(source)
            chosen = range(reader.num_record_batches) if isinstance(one, Path) else one.batches
            table = pa.Table.from_batches([reader.get_batch(i) for i in chosen], schema=reader.schema)
        if columns is not None:
            index = [c for c in (table.schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)]
            table = table.select([*(c for c in columns if not present or c in table.column_names), *index])
        batches.append(table if where is None else table.filter(where(table)))
    table = batches[0] if len(batches) == 1 else pa.concat_tables(batches)
    frame = table.combine_chunks().to_pandas()
    several = not isinstance(path, Path) and sum(1 if isinstance(one, Path) else len(one.batches) for one in pieces) > 1
    return frame.sort_index(kind="stable") if several else frame


def frames(events: pd.DataFrame | Stored, columns: Sequence[str] | None = None) -> Iterable[pd.DataFrame]:
    """A frame (only ``columns``, when given), or the parts of one a :class:`PartsEngine` keeps, read one at a time."""
    if isinstance(events, pd.DataFrame):
        return [events if columns is None else events[list(columns)]]
    return events.read(columns)


def in_parts(data_dir: Path) -> bool:
    """Whether ``--engine auto`` works on parts: LABEVENTS holds about :data:`AUTO_PARTS_BYTES` of text or more
    (a file that cannot be found or read: no, the run reports why)."""
    from pipeline.locate import locate_table

    try:
        path = locate_table(Path(data_dir), "LABEVENTS")
        size = path.stat().st_size
    except (StageError, OSError):
        return False
    return size * (GZIP_TEXT_RATIO if path.name.lower().endswith(".gz") else 1) >= AUTO_PARTS_BYTES


@contextlib.contextmanager
def parts_engine(*, partitions: int | None = None, rows_per_part: int | None = ROWS_PER_PART,
                 folder: Path | None = None, workers: int | None = None) -> Iterator[PartsEngine]:
    """A :class:`PartsEngine` on a fresh temporary folder (in ``folder``, or the system's), deleted afterwards.

    A run that was killed (by the system for memory, or by a signal) cannot delete its folder; its folder holds its
    pid (``OWNER``), and the next run removes the folders of owners that are no longer running."""
    with _parts_folder(folder) as temporary:
        engine = PartsEngine(temporary, partitions=partitions, rows_per_part=rows_per_part, workers=workers)
        try:
            yield engine
        finally:
            engine.close()


@contextlib.contextmanager
def _parts_folder(folder: Path | None) -> Iterator[Path]:
    """A fresh parts folder in ``folder`` (or the system's temporary folder) that records its run's pid, deleted
    afterwards; first, the folders of runs that were killed."""
    parent = Path(folder or tempfile.gettempdir())
    _remove_orphans(parent)
    with tempfile.TemporaryDirectory(prefix=PARTS_PREFIX, dir=parent) as temporary:
        (Path(temporary) / OWNER).write_text(str(os.getpid()))
        yield Path(temporary)


PARTS_PREFIX = "badpoints-parts-"
OWNER = "owner.pid"  # in a parts folder: the pid of the run that made it


def _remove_orphans(parent: Path) -> None:
    """Delete the parts folders in ``parent`` whose run is gone (its pid is not running); never another's live one."""
    for candidate in parent.glob(f"{PARTS_PREFIX}*"):
        try:
            pid = int((candidate / OWNER).read_text())
        except (OSError, ValueError):
            continue  # no owner recorded (yet): not ours to judge
        if pid != os.getpid() and not _running(pid):
            shutil.rmtree(candidate, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class DaskEngine(PartsEngine):
    """The parts engine's work on a ``dask.distributed`` cluster: the same parts files, each per-part step (a
    stage, a fit's partial result or pass, a pick, a count) a task on a worker, which reads its part's file and
    writes what it makes beside it.

    LABEVENTS' blocks are read here (a ``.gz`` stream is read in order) and sent to the workers, which check them and
    write them into the parts (:class:`BlockRoute`), so the client holds ADMISSIONS, D_LABITEMS, the fitted state and what comes back per part (counts, steps, a
    part's quarantine records on their way to the line-range files), never all the rows; a worker holds the part
    it works on. The workers must see the parts folder: a ``LocalCluster``'s do; a remote cluster's need it on a
    filesystem they share (``folder``). Tasks are sent a few per worker ahead of the results read back.
    """

    def __init__(self, folder: Path, client: Any, *, partitions: int | None = None,
                 rows_per_part: int | None = None) -> None:
        super().__init__(folder, partitions=partitions, rows_per_part=rows_per_part)
        self.client = client

    def _elsewhere(self) -> bool:
        return True

    def _map(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        if "args" in kwargs:  # frames among the arguments (ADMISSIONS for bucket) go to every worker once
            kwargs = {**kwargs, "args": _shared(self.client, kwargs["args"])}
        ahead = 2 * max(1, len(self.client.scheduler_info().get("workers", {})))
        return ahead_of_results(lambda item: self.client.submit(function, item, pure=False, **kwargs), items,
                                ahead=ahead)

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        """On a worker (``quarantine.parquet`` written there, so this process never holds its row groups); here when
        the workers cannot see ``sees``."""
        if sees is not None and not self._seen_by_workers(Path(sees)):
            return super().call(function, *args, **kwargs)
        return self.client.submit(function, *args, pure=False, **kwargs).result()

    def _seen_by_workers(self, folder: Path) -> bool:
        return all(self.client.run(os.path.isdir, str(folder)).values())


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
class _PieceDone:
    """What ``make`` made of a piece, as data (a StageError is carried, never raised across processes)."""

    made: tuple = ()
    error: dict | None = None


def _batch_piece(piece: BatchPiece, *, make: Callable[..., Iterable[Any]], args: tuple, kwargs: dict,
                 columns: list[str] | None) -> _PieceDone:
    """``make`` of the rows of ``piece``'s batches (a StageError carried as data), read from its parts with only
    those rows (a part its last batches reach holds mostly the next piece's)."""
    frames = [read_part(path, columns, where=functools.partial(_in_ranges, ranges=piece.ranges))
              for path in piece.paths]
    rows = frames[0] if len(frames) == 1 else pd.concat(frames)
    try:
        return _PieceDone(made=tuple(make([rows], *map(value_of, args), start=dict(piece.start), **kwargs)))
    except StageError as error:
        return _PieceDone(error=_as_data(error))


def _in_ranges(table: pa.Table, *, ranges: tuple[tuple[int, int, int], ...]) -> pa.Array:
    """Which rows of an Arrow table of edge rows have their admission in ``ranges`` (split code, first and last
    HADM_ID; at most one range per split)."""
    hadm = table["HADM_ID"]
    return functools.reduce(pc.or_, [pc.and_(pc.equal(table["SPLIT"], SPLITS[code]),
                                             pc.and_(pc.greater_equal(hadm, lo), pc.less_equal(hadm, hi)))
                                     for code, lo, hi in ranges])


def _read_only(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


def _reduce_mapping_proxy(mapping: MappingProxyType) -> tuple:
    return _read_only, (dict(mapping),)


# Config sections hold read-only mappings (fill policies, [scale.policy]): a worker process is sent them as such.
copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)


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



def _shared(client: Any, args: tuple) -> tuple:
    """Frames and arrays among the arguments (ADMISSIONS, the report's mask of quarantined lines) sent to every worker
    once, not inside every task. Each under a key of its own (``hash=False``): the same frame scattered again by the
    next stage under its content's key could be released by the stage before (whose futures go when its map is
    done) while the next stage's tasks wait for it ("lost dependencies")."""
    return tuple(client.scatter(a, broadcast=True, hash=False) if isinstance(a, (pd.DataFrame, LineMask)) else a
                 for a in args)


def _pick(pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None, args: tuple, kwargs: dict,
          frame: pd.DataFrame) -> pd.DataFrame:
    picked = frame if pick is None else pick(frame, *args, **kwargs)
    return picked if columns is None else picked[list(columns)]


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


@contextlib.contextmanager
def dask_engine(scheduler: str | None = None, *, workers: int = 2, memory_limit: str = "4GB",
                partitions: int | None = None, rows_per_part: int | None = ROWS_PER_PART,
                folder: Path | None = None) -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` on the cluster at ``scheduler``, or on a fresh loopback ``LocalCluster``, its parts in
    a fresh temporary folder (in ``folder``, or the system's) that every worker must see; deleted afterwards."""
    from dask.distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if scheduler:
            client = stack.enter_context(Client(scheduler))
        else:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                host="127.0.0.1", dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        parts = Path(stack.enter_context(_parts_folder(folder)))
        blind = sorted(worker for worker, sees in client.run(os.path.isdir, str(parts)).items() if not sees)
        if blind:
            raise OSError(f"{len(blind)} Dask worker(s) cannot see the parts folder {parts} (first: {blind[0]}): "
                          "run the workers where it is, or set TMPDIR to a folder they share")
        yield DaskEngine(parts, client, partitions=partitions, rows_per_part=None if partitions else rows_per_part)
