"""Where LABEVENTS is worked on: in this process on whole frames (pandas, the default), or on parts of it kept as
Arrow files, each part worked on in this process (parts) or by the workers of a ``dask.distributed`` cluster (Dask).

All engines run the very same stage functions; an engine only decides where
they run and how their parts come back together. With the parts and Dask engines:

- raw checks: LABEVENTS is read in blocks; each is checked, guarded and routed (:class:`Router`) into
  admission-range parts as it comes, so the whole table never exists. The split and the admission order are
  known from ADMISSIONS (small) before any lab row is read. Keys, foreign keys and stays are checked per block
  against ADMISSIONS and D_LABITEMS (``pipeline.parse.check_stream``).
- every stage works per row or per admission (clean, split, encode, z-scores, fill, bucket, dedup), and every
  admission's rows are in one part, so a stage runs on each part alone (``each``) and its quarantine records
  (kept on disk by source line range: :class:`LineFiles`) and steps are added up.
- a stage's fit (:class:`pipeline.stages.Fit`) is global: a mergeable one (``partial``, ``combine``,
  ``finish``: item kinds, vocabularies, z-score stats) reads each part and gives a small result; those are
  combined into exactly the state one process fits. Any other fit (fill's exact medians) reads the rows and
  columns it needs, gathered.
- findings about the whole table read the rows or columns they need, gathered in the input's row order (``rows``).
- a :class:`StageError` on any part makes the stage run on its gathered input, so the report carries exactly the
  error the pandas engine reports (count, lines, items), never just the first part's.
- the edge rows stay in their parts, in part order, which is the dedup stage's order (split, admission,
  timestep, item): the graphs are built from them one part at a time.

A part's work is one function of its file (``_each_part``, ``_call_part``, ...): :class:`PartsEngine` calls it
here, one part at a time, and :class:`DaskEngine` sends it to a worker as a task.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copyreg
import functools
import itertools
import multiprocessing
import operator
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.parse import PartCheck, check_part
from pipeline.quarantine import LINE_RANGE, Kept, LineMask, Step, empty_quarantine
from schemas.errors import StageError
from schemas.guard import vouch
from schemas.split import SPLITS, split_codes

if TYPE_CHECKING:
    from pipeline.stages import Fit

ROWS_PER_PART = 1_000_000  # a PartsEngine's default: a part of LABEVENTS about this many rows
AUTO_PARTS_BYTES = 256 * 2**20  # LABEVENTS' text from which ``--engine auto`` works on parts
GZIP_TEXT_RATIO = 7  # about how many bytes of text a byte of gzipped LABEVENTS holds (MIMIC-IV: 17 GB in 2.5 GB)
BUCKETS = 64  # admission ranges a Router writes checked blocks into (consecutive ones make a part)
FLUSH_ROWS = 1_000_000  # rows a Router buffers before it writes them out
COMBINE_EVERY = 8  # a mergeable fit's partial results held before they are combined (MIMIC-IV: ~120 parts)

# What a stage hands on: a pandas frame, or (Dask) the parts of one on the workers.
Events = Any


class Engine(Protocol):
    """Runs the LABEVENTS work: raw checks of a block or a table, and the stages, on whole frames or on parts cut by
    admission."""

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck: ...

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> Events:
        """``events`` ready for per-admission stages (``splits``: HADM_ID and SPLIT, when the rows have no SPLIT)."""

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """The state ``fit`` learns from all the rows: ``fit.whole(events, *args, **kwargs)``, or as much from
        ``fit.parts`` over the parts."""

    def each(self, stage: Callable[..., Any], events: Events, *args: Any, **kwargs: Any) -> Any:
        """``stage(events, *args, **kwargs)``: its frame, or its :class:`Kept` with the whole quarantine and steps."""

    def rows(self, events: Events, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        """``pick(events, *args, **kwargs)`` (or ``events[columns]``) as one pandas frame, in row order."""

    def collect(self, events: Events, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows (only ``columns``, when given) as one pandas frame, in part order."""

    def total(self, count: Callable[[pd.DataFrame], Any], events: Events) -> Any:
        """``count(events)`` for a count that adds up over parts: ``count`` of each part, summed."""

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

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> pd.DataFrame:
        return events

    def fit(self, fit: Fit, events: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        return fit.whole(events, *args, **kwargs)

    def each(self, stage: Callable[..., Any], events: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        return stage(events, *args, **kwargs)

    def rows(self, events: pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        return _pick(pick, columns, args, kwargs, events)

    def collect(self, events: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return events if columns is None else events[list(columns)]

    def total(self, count: Callable[[pd.DataFrame], Any], events: pd.DataFrame) -> Any:
        return count(events)

    def per_part(self, call: Callable[..., Any], events: pd.DataFrame, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        yield call(_pick(None, columns, (), {}, events), *args, **kwargs)

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
    part routed from blocks (:class:`Router`) may be several files, read together in source line order."""

    paths: tuple[Path | tuple[Path, ...], ...]
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

    A table's raw checks run here, block by block (LABEVENTS' blocks routed into the parts: :meth:`router`). Use
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

    def each(self, stage: Callable[..., Any], events: Stored, *args: Any, **kwargs: Any) -> Any:
        """``stage`` on every part in turn; a part's StageError makes the stage run on all the rows, as pandas
        does, so the error counts every part's rows."""
        targets = [self._path() for _ in events.paths]
        lengths, steps, columns, kept = [], [], (), False
        records = LineFiles(self)  # the quarantine records, by source line range: never whole in memory
        for done in self._map(_each_part, list(zip(events.paths, targets)), stage=stage, args=args, kwargs=kwargs,
                              schema=events.schema):
            if done.error is not None:
                self.release(replace(events, paths=tuple(targets)))
                stage(self.rows(events), *args, **kwargs)  # raises the whole table's StageError
                raise StageError(**done.error)  # a stage that fails on a part but not on the whole is not per admission
            kept, columns = done.kept, done.columns
            lengths.append(done.rows)
            if kept:
                records.add(done.quarantine)
                steps.append(done.steps)
        parts = Stored(paths=tuple(targets), lengths=tuple(lengths), order=events.order, columns=columns,
                       schema=getattr(stage, "gives", None))
        return Kept(frame=parts, quarantine=records.finish(), steps=add_steps(steps)) if kept else parts

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

    def total(self, count: Callable[[pd.DataFrame], Any], events: Stored) -> Any:
        return functools.reduce(operator.add, self._map(_call_part, events.paths, call=count))

    def per_part(self, call: Callable[..., Any], events: Stored | pd.DataFrame, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        if isinstance(events, pd.DataFrame):
            return PANDAS.per_part(call, events, *args, columns=columns, **kwargs)
        return self._map(_call_part, events.paths, call=call, args=args, kwargs=kwargs,
                         columns=None if columns is None else list(columns))

    def in_batches(self, make: Callable[..., Iterable[Any]], events: Stored | pd.DataFrame, *args: Any,
                   batch_size: int, columns: Sequence[str] | None = None, sees: Path | None = None,
                   **kwargs: Any) -> Iterator[Any]:
        """Here, from the parts read one at a time (``make`` streams over them)."""
        return PANDAS.in_batches(make, events, *args, batch_size=batch_size, columns=columns, **kwargs)

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        """Here (the parts engine's processes work on parts only)."""
        return function(*args, **kwargs)

    def _map(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        """``function(item, **kwargs)`` of each item, in order: here, one part at a time, or with ``workers`` on
        that many processes of this machine (see :class:`DaskEngine` for the parts on a cluster's workers)."""
        if not self.workers or self.workers < 2:
            return (function(item, **kwargs) for item in items)
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"))
        return ahead_of_results(lambda item: self._pool.submit(function, item, **kwargs), items,
                                ahead=2 * self.workers)

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
                    one.unlink(missing_ok=True)

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
class _PartDone:
    """What a stage made of one part, as data (a StageError is carried, never raised across processes)."""

    rows: int = 0
    columns: tuple[str, ...] = ()
    kept: bool = False
    quarantine: pd.DataFrame | None = None
    steps: tuple[Step, ...] = ()
    error: dict | None = None


def _each_part(paths: tuple[Any, Path], *, stage: Callable[..., Any], args: tuple, kwargs: dict,
               schema: type | None) -> _PartDone:
    """``stage`` on the part at ``paths[0]`` (vouched for with ``schema``), its rows written to ``paths[1]``."""
    source, target = paths
    try:
        done = stage(vouch(read_part(source), schema), *args, **kwargs)
    except StageError as error:
        return _PartDone(error=_as_data(error))
    kept = isinstance(done, Kept)
    frame = done.frame if kept else done
    write_part(frame, target)
    return _PartDone(rows=len(frame), columns=tuple(frame.columns), kept=kept,
                     quarantine=done.quarantine if kept else None, steps=done.steps if kept else ())


def _step_part(paths: tuple[Any, Path], *, step: Callable[[pd.DataFrame], pd.DataFrame]) -> int:
    source, target = paths
    frame = step(read_part(source))
    write_part(frame, target)
    return len(frame)


def _call_part(source: Any, *, call: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
               columns: list[str] | None = None) -> Any:
    return call(read_part(source, columns), *args, **(kwargs or {}))


def _pick_part(source: Any, *, pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None,
               args: tuple, kwargs: dict) -> pd.DataFrame:
    return _pick(pick, columns, args, kwargs, read_part(source, None if columns is None else list(columns)))


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


class Router:
    """Checked LABEVENTS blocks written straight into admission-range parts, so the whole table never exists.

    The parts are those :func:`admission_parts` cuts: admissions in (split, HADM_ID) order (``splits`` from
    ADMISSIONS alone, known before any lab row), every admission's rows in one part, each part in source line
    order, rows of no known admission last. As the rows per admission are known only at the end, rows go to
    :data:`BUCKETS` admission ranges first (buffered, appended as record batches); :meth:`finish` puts consecutive
    ranges together into parts of about the engine's ``rows_per_part`` (or into its ``partitions``). Rows of no
    known admission (quarantined by clean) are parts of their own, cut by rows.
    """

    def __init__(self, engine: PartsEngine, splits: pd.DataFrame | None) -> None:
        self.engine = engine
        known = pd.DataFrame(columns=["HADM_ID", "SPLIT"]) if splits is None else splits
        order = pd.DataFrame({"SPLIT": split_codes(known["SPLIT"]).astype("int64"),
                              "HADM_ID": known["HADM_ID"].to_numpy("int64")}).sort_values(["SPLIT", "HADM_ID"])
        buckets = max(1, min(BUCKETS, len(order)))
        bucket = pd.Series(np.arange(len(order)) * buckets // max(1, len(order)),
                           index=order["HADM_ID"].to_numpy("int64"))
        self._bucket = bucket[~bucket.index.duplicated()]
        self._unknown = buckets  # the bucket of rows of no known admission
        self._buffers: dict[int, list[pd.DataFrame]] = {}
        self._buffered = 0
        self._files: dict[int, list[Path]] = {}  # per bucket its files (the unknown bucket: one per cut)
        self._rows: dict[int, list[int]] = {}  # rows per file
        self._writers: dict[int, Any] = {}
        self._schema = None
        self._empty: pd.DataFrame | None = None
        self._cut = engine.rows_per_part if engine.partitions is None and engine.rows_per_part else None

    def add(self, frame: pd.DataFrame) -> None:
        hadm = frame["HADM_ID"].to_numpy("float64", na_value=np.nan)
        known = ~np.isnan(hadm)
        bucket = np.full(len(frame), self._unknown, dtype="int64")
        bucket[known] = self._bucket.reindex(hadm[known].astype("int64")).fillna(self._unknown).to_numpy("int64")
        order = np.argsort(bucket, kind="stable")
        ranked, frame = bucket[order], frame.iloc[order]  # one take; each bucket's rows are then a slice
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(ranked) else np.array([], "int64")
        for start, stop in zip(starts, [*starts[1:], len(ranked)]):
            self._buffers.setdefault(int(ranked[start]), []).append(frame.iloc[start:stop])
            self._buffered += stop - start
        if self._buffered >= FLUSH_ROWS:
            self._flush()
        elif self._cut is not None and sum(map(len, self._buffers.get(self._unknown, []))) >= self._cut:
            self._flush([self._unknown])  # a part of rows of no known admission is full

    def finish(self, schema: type | None = None) -> Stored:
        """The parts (``schema``: what every block added passed, for the next stage's guard)."""
        self._flush()
        for writer in self._writers.values():
            writer.close()
        known = [b for b in sorted(self._files) if b != self._unknown]
        rows = np.array([sum(self._rows[b]) for b in known], dtype="int64")
        total = int(rows.sum())
        before = np.cumsum(rows) - rows
        if self._cut is None:
            cut = (before * max(1, self.engine.partitions or 1)) // max(1, total)
        else:
            cut = before // max(1, self._cut)
        paths: list[tuple[Path, ...]] = []
        lengths: list[int] = []
        for part in np.unique(cut):
            chosen = [b for b, c in zip(known, cut) if c == part]
            paths.append(tuple(path for b in chosen for path in self._files[b]))
            lengths.append(int(sum(sum(self._rows[b]) for b in chosen)))
        for path, n in zip(self._files.get(self._unknown, []), self._rows.get(self._unknown, [])):
            paths.append((path,))
            lengths.append(n)
        if not paths and self._empty is not None:  # no row at all: one empty part, as admission_parts gives
            paths, lengths = [(self.engine._write(self._empty),)], [0]
        columns = () if self._empty is None else tuple(self._empty.columns)
        return Stored(paths=tuple(paths), lengths=tuple(lengths), order=None, columns=columns, schema=schema)

    def _flush(self, buckets: list[int] | None = None) -> None:
        """Write the buffered rows (of ``buckets`` only, when given) as one record batch per bucket."""
        for bucket in sorted(self._buffers) if buckets is None else buckets:
            frames = self._buffers.pop(bucket)
            self._buffered -= sum(map(len, frames))
            frame = frames[0] if len(frames) == 1 else pd.concat(frames)
            if self._schema is None:
                self._schema = pa.Schema.from_pandas(frame, preserve_index=True)
                self._empty = frame.iloc[:0]
            rows = self._rows.setdefault(bucket, [])
            new_part = bucket == self._unknown and self._cut is not None  # each flush of them: a part of its own
            if bucket not in self._writers or new_part:
                if bucket in self._writers:
                    self._writers[bucket].close()
                path = self.engine._path()
                self._writers[bucket] = pa.ipc.new_file(path, self._schema, options=_IPC)
                self._files.setdefault(bucket, []).append(path)
                rows.append(0)
            self._writers[bucket].write_table(pa.Table.from_pandas(frame, schema=self._schema, preserve_index=True))
            rows[-1] += len(frame)
        give_back_memory()


_IPC = pa.ipc.IpcWriteOptions(compression=None)  # parts are written once and read a few times: fast, not small
_RECORDS = pa.ipc.IpcWriteOptions(compression="lz4")  # quarantine records: the same few texts on every row


def write_part(frame: pd.DataFrame, path: Path) -> None:
    """A part as an Arrow IPC file (LZ4), its index kept (pandas metadata): read back exactly by :func:`read_part`."""
    table = pa.Table.from_pandas(frame, preserve_index=True)
    with pa.ipc.new_file(path, table.schema, options=_IPC) as writer:
        writer.write_table(table)


def give_back_memory() -> None:
    """Return the memory Arrow's pool keeps from the part before (without it, the pool's retained memory, not the
    parts, sets the peak over a run of parts)."""
    pa.default_memory_pool().release_unused()


def read_part(path: Path | tuple[Path, ...], columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A part written by :func:`write_part` (or a :class:`Router`'s files of one part, in source line order), with
    only ``columns`` and its index. What the part before it used is given back first."""
    give_back_memory()
    paths = (path,) if isinstance(path, Path) else tuple(path)
    tables = []
    for one in paths:
        with pa.OSFile(str(one)) as source:  # compressed: the table's buffers are its own, not the file's
            table = pa.ipc.open_file(source).read_all()
        if columns is not None:
            index = [c for c in (table.schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)]
            table = table.select([*columns, *index])
        tables.append(table)
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    frame = table.combine_chunks().to_pandas()
    return frame if len(tables) == 1 else frame.sort_index(kind="stable")


def frames(events: pd.DataFrame | Stored, columns: Sequence[str] | None = None) -> Iterable[pd.DataFrame]:
    """A frame (only ``columns``, when given), or the parts of one a :class:`PartsEngine` keeps, read one at a time."""
    if isinstance(events, pd.DataFrame):
        return [events if columns is None else events[list(columns)]]
    return events.read(columns)


def in_parts(data_dir: Path) -> bool:
    """Whether ``--engine auto`` works on parts: LABEVENTS holds about :data:`AUTO_PARTS_BYTES` of text or more
    (a file that cannot be found or read: no, the run reports why)."""
    from pipeline.load import locate_table

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

    LABEVENTS' blocks are read and checked here and routed into the parts (a ``.gz`` stream is read in order), so
    the client holds ADMISSIONS, D_LABITEMS, the fitted state and what comes back per part (counts, steps, a
    part's quarantine records on their way to the line-range files), never all the rows; a worker holds the part
    it works on. The workers must see the parts folder: a ``LocalCluster``'s do; a remote cluster's need it on a
    filesystem they share (``folder``). Tasks are sent a few per worker ahead of the results read back.
    """

    def __init__(self, folder: Path, client: Any, *, partitions: int | None = None,
                 rows_per_part: int | None = None) -> None:
        super().__init__(folder, partitions=partitions, rows_per_part=rows_per_part)
        self.client = client

    def _map(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        if "args" in kwargs:  # frames among the arguments (ADMISSIONS for bucket) go to every worker once
            kwargs = {**kwargs, "args": _shared(self.client, kwargs["args"])}
        ahead = 2 * max(1, len(self.client.scheduler_info().get("workers", {})))
        return ahead_of_results(lambda item: self.client.submit(function, item, pure=False, **kwargs), items,
                                ahead=ahead)

    def in_batches(self, make: Callable[..., Iterable[Any]], events: Stored | pd.DataFrame, *args: Any,
                   batch_size: int, columns: Sequence[str] | None = None, sees: Path | None = None,
                   **kwargs: Any) -> Iterator[Any]:
        """On the workers, a piece of whole batches per task (:func:`batch_pieces`: the batches that begin in a part,
        read from it and the parts their last admissions are in), so this process never holds the edge rows or
        what ``make`` makes of them beyond what it yields. Here, as the parts engine does, when the workers cannot
        see ``sees``."""
        if isinstance(events, pd.DataFrame) or (sees is not None and not self._seen_by_workers(Path(sees))):
            yield from super().in_batches(make, events, *args, batch_size=batch_size, columns=columns, **kwargs)
            return
        admitted = list(self._map(_call_part, events.paths, call=admitted_in, columns=["SPLIT", "HADM_ID"]))
        pieces = batch_pieces(admitted, events.paths, batch_size)
        for done in self._map(_batch_piece, pieces, make=make, args=args,
                              kwargs={**kwargs, "batch_size": batch_size},
                              columns=None if columns is None else list(columns)):
            if done.error is not None:
                raise StageError(**done.error)
            yield from done.made

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
    """``make`` of the rows of ``piece``'s batches (a StageError carried as data)."""
    frames = [read_part(path, columns) for path in piece.paths]
    rows = frames[0] if len(frames) == 1 else pd.concat(frames)
    split, hadm = split_codes(rows["SPLIT"]), rows["HADM_ID"].to_numpy("int64")
    chosen = np.zeros(len(rows), dtype=bool)
    for code, lo, hi in piece.ranges:  # at most one range per split
        chosen |= (split == code) & (hadm >= lo) & (hadm <= hi)
    try:
        return _PieceDone(made=tuple(make([rows[chosen]], *args, start=dict(piece.start), **kwargs)))
    except StageError as error:
        return _PieceDone(error=_as_data(error))


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
