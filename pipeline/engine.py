"""Where LABEVENTS is worked on: in this process on whole frames (pandas, the default), in this process one part
at a time (parts), or on a ``dask.distributed`` cluster.

All engines run the very same stage functions; an engine only decides where
they run and how their parts come back together. With the parts and Dask engines:

- raw checks: (Dask) LABEVENTS is cut into row slices; :func:`pipeline.parse.check_part`
  checks each on a worker and the results come back as data (failing lines and
  values, typed rows), which :func:`pipeline.parse.combine_parts` turns into what
  one process finds. Keys, foreign keys and stays are checked on the combined rows.
- ``partition`` then cuts the checked rows by admission, before clean: admissions
  in (split, HADM_ID) order (the split is known from ADMISSIONS alone), in contiguous
  ranges of about equal rows, so every admission's rows are in one part. Every stage
  works per row or per admission (clean, split, encode, z-scores, fill, bucket, dedup),
  so it runs on each part alone (``each``) and its quarantine and steps are added up.
- a stage's fit (:class:`pipeline.stages.Fit`) is global: a mergeable one (``partial``,
  ``combine``, ``finish``: item kinds, vocabularies, z-score stats) reads each part and
  gives a small result; those are combined into exactly the state one process fits.
  Any other fit (fill's exact medians) reads the rows and columns it needs, gathered.
- findings about the whole table read the rows or columns they need, gathered
  in the input's row order (``rows``).
- a :class:`StageError` on any part makes the stage run on its gathered input, so
  the report carries exactly the error the pandas engine reports (count, lines,
  items), never just the first part's.
- the edge rows come back in part order, which is the dedup stage's order
  (split, admission, timestep, item): no global sort.

:class:`PartsEngine` keeps the parts as Arrow files in a temporary folder and holds
one in memory at a time. :class:`DaskEngine` holds them on the workers:
``LocalCluster`` by default (worker processes on loopback, bounded memory), or
an existing scheduler at an address.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.parse import PartCheck, check_part, combine_parts
from pipeline.quarantine import LINE_RANGE, Kept, Step, empty_quarantine
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

# What a stage hands on: a pandas frame, or (Dask) the parts of one on the workers.
Events = Any


class Engine(Protocol):
    """Runs the LABEVENTS work: raw checks by row slices, the stages after encode by admission."""

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
    """In this process, on parts cut by admission (as :class:`DaskEngine` cuts them) and kept as Arrow files in
    ``folder``: a stage reads one part, runs, and writes what it gives as a new file, so one part of LABEVENTS is
    in memory at a time. ``partitions`` parts, or as many as ``rows_per_part`` needs (at least one).

    Raw checks run on the whole table, as with :class:`PandasEngine`. Use :func:`parts_engine`: its folder is
    deleted at the end of the run, also when the run fails.
    """

    def __init__(self, folder: Path, *, partitions: int | None = None, rows_per_part: int | None = None) -> None:
        self.folder = Path(folder)
        self.partitions = partitions
        self.rows_per_part = rows_per_part
        self._written = itertools.count()

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
        if fit.partial is not None:
            partials = [fit.partial(self._read(path), *args, **kwargs) for path in events.paths]
            return fit.finish(fit.combine(partials), *args, **kwargs)

        kept_by_passes: list[Stored] = []

        def keep(step: Callable[[pd.DataFrame], pd.DataFrame]) -> Stored:
            frames = [self._write(step(self._read(path))) for path in events.paths]
            kept_by_passes.append(replace(events, paths=tuple(frames)))
            return kept_by_passes[-1]

        try:
            return fit.parts(keep, lambda kept, step: [step(self._read(path)) for path in kept.paths], *args,
                             **kwargs)
        finally:
            for kept in kept_by_passes:
                self.release(kept)

    def each(self, stage: Callable[..., Any], events: Stored, *args: Any, **kwargs: Any) -> Any:
        """``stage`` on every part in turn; a part's StageError makes the stage run on all the rows, as pandas
        does, so the error counts every part's rows."""
        paths, lengths, steps, kept = [], [], [], False
        records = LineFiles(self)  # the quarantine records, by source line range: never whole in memory
        for path in events.paths:
            try:
                done = stage(vouch(self._read(path), events.schema), *args, **kwargs)
            except StageError:
                stage(self.rows(events), *args, **kwargs)  # raises the whole table's StageError
                raise  # a stage that fails on a part but not on the whole is not per admission
            kept = isinstance(done, Kept)
            frame = done.frame if kept else done
            paths.append(self._write(frame))
            lengths.append(len(frame))
            if kept:
                records.add(done.quarantine)
                steps.append(done.steps)
        parts = Stored(paths=tuple(paths), lengths=tuple(lengths), order=events.order,
                       columns=tuple(frame.columns) if paths else (), schema=getattr(stage, "gives", None))
        return Kept(frame=parts, quarantine=records.finish(), steps=add_steps(steps)) if kept else parts

    def rows(self, events: Stored | pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        """Rows picked part by part, in row order; ``columns``: only those are read (``pick`` sees no others)."""
        if isinstance(events, pd.DataFrame):
            return _pick(pick, columns, args, kwargs, events)
        read = list(columns) if columns is not None else None
        return in_row_order([_pick(pick, columns, args, kwargs, self._read(path, read)) for path in events.paths],
                            events.order)

    def collect(self, events: Stored | pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        if isinstance(events, pd.DataFrame):
            return PANDAS.collect(events, columns)
        return pd.concat(list(events.read(columns)))

    def total(self, count: Callable[[pd.DataFrame], Any], events: Stored) -> Any:
        return functools.reduce(operator.add, (count(self._read(path)) for path in events.paths))

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
        return self.folder / f"part-{next(self._written):06d}.arrow"

    @staticmethod
    def _read(path: Path | tuple[Path, ...], columns: list[str] | None = None) -> pd.DataFrame:
        return read_part(path, columns)

    def router(self, splits: pd.DataFrame | None) -> "Router":
        """Where a table's checked blocks go, as they come: into this engine's parts, by admission."""
        return Router(self, splits)


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
                 folder: Path | None = None) -> Iterator[PartsEngine]:
    """A :class:`PartsEngine` on a fresh temporary folder (in ``folder``, or the system's), deleted afterwards.

    A run that was killed (by the system for memory, or by a signal) cannot delete its folder; its folder holds its
    pid (``OWNER``), and the next run removes the folders of owners that are no longer running."""
    parent = Path(folder or tempfile.gettempdir())
    _remove_orphans(parent)
    with tempfile.TemporaryDirectory(prefix=PARTS_PREFIX, dir=parent) as temporary:
        (Path(temporary) / OWNER).write_text(str(os.getpid()))
        yield PartsEngine(Path(temporary), partitions=partitions, rows_per_part=rows_per_part)


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


@dataclass(frozen=True)
class Parts:
    """A frame cut by admission, its parts held by the workers (futures, in part order)."""

    futures: tuple[Any, ...]
    lengths: tuple[int, ...]
    order: pd.Index  # the source lines in the row order of the frame that was cut

    def __len__(self) -> int:
        return sum(self.lengths)


@dataclass(frozen=True)
class _Done:
    """What a stage made of one part, as data: a StageError is carried, never raised across processes."""

    result: Any = None
    error: dict | None = None


@dataclass(frozen=True)
class _Summary:
    """A part's result without its rows: what comes back to the client after each stage."""

    rows: int
    kept: bool
    quarantine: pd.DataFrame | None
    steps: tuple[Step, ...]
    error: dict | None


@dataclass(frozen=True)
class DaskEngine:
    """Runs the LABEVENTS work on a Dask cluster; ``partitions`` slices or parts per table (default: two per worker)."""

    client: Any
    partitions: int

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck:
        """Slices checked a wave at a time, one slice per worker: a worker never holds its share of the whole text."""
        slices = row_slices(frame, self.partitions)
        check = functools.partial(check_part, table, **settings)
        wave = self._workers()
        checked = []
        for start in range(0, len(slices), wave):
            sent = self.client.scatter(slices[start:start + wave])
            checked += self.client.gather(self.client.map(check, sent, pure=False))
        return combine_parts(checked)

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> Parts:
        frames = admission_parts(events, self.partitions, splits)
        return Parts(futures=tuple(self.client.scatter(frames)), lengths=tuple(len(f) for f in frames),
                     order=events.index)

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """A mergeable fit on the parts: what each pass keeps stays on its worker; every pass's results come
        back. Any other fit (or rows not cut into parts) runs here, on what it was handed."""
        if not isinstance(events, Parts) or (fit.parts is None and fit.partial is None):
            return fit.whole(events, *args, **kwargs)
        if fit.partial is not None:
            shared = _shared(self.client, args)
            partials = self.client.gather(self.client.map(_call, events.futures, call=fit.partial, args=shared,
                                                          kwargs=kwargs, pure=False))
            return fit.finish(fit.combine(partials), *args, **kwargs)
        return fit.parts(
            lambda step: self._run(step, events),
            lambda rows, step: self.client.gather(self.client.map(step, rows.futures, pure=False)), *args, **kwargs)

    def each(self, stage: Callable[..., Any], events: Parts, *args: Any, **kwargs: Any) -> Any:
        return self._run(stage, events, *args, **kwargs)

    def rows(self, events: Parts | pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        if isinstance(events, pd.DataFrame):  # a frame held here (the raw LABEVENTS): picked here
            return _pick(pick, columns, args, kwargs, events)
        picked = self.client.map(functools.partial(_pick, pick, columns, args, kwargs), events.futures, pure=False)
        return in_row_order(self.client.gather(picked), events.order)

    def collect(self, events: Parts | pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The parts gathered a wave at a time: a worker never serializes everything it holds at once (at
        27.8M rows, gathering all parts together got both 3 GB workers killed at their limit)."""
        if isinstance(events, pd.DataFrame):
            return PANDAS.collect(events, columns)
        futures = events.futures if columns is None else tuple(
            self.client.map(functools.partial(_pick, None, columns, (), {}), events.futures, pure=False))
        wave = self._workers()
        frames: list[pd.DataFrame] = []
        for start in range(0, len(futures), wave):
            frames += self.client.gather(list(futures[start:start + wave]))
        return pd.concat(frames)

    def total(self, count: Callable[[pd.DataFrame], Any], events: Parts) -> Any:
        return functools.reduce(operator.add, self.client.gather(self.client.map(count, events.futures,
                                                                                 pure=False)))

    def result(self, events: Parts) -> pd.DataFrame:
        return self.collect(events)  # the workers' parts end with the cluster: the edge rows come here

    def release(self, events: Events) -> None:
        pass  # the workers drop the parts once no future refers to them

    def _workers(self) -> int:
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def _run(self, stage: Callable[..., Any], events: Parts, *args: Any, **kwargs: Any) -> Any:
        """``stage`` on every part; a part's StageError makes the stage run here on all the rows, as pandas does."""
        # Frames among the arguments (ADMISSIONS for bucket) go to every worker once, not inside every task.
        shared = _shared(self.client, args)
        done = self.client.map(_attempt, events.futures, stage=stage, args=shared, kwargs=kwargs, pure=False)
        summaries = self.client.gather(self.client.map(_summarize, done, pure=False))
        errors = [s.error for s in summaries if s.error is not None]
        if errors:
            stage(self.rows(events), *args, **kwargs)  # raises the whole table's StageError
            raise StageError(**errors[0])  # a stage that fails on a part but not on the whole is not per admission
        parts = Parts(futures=tuple(self.client.map(_result_frame, done, pure=False)),
                      lengths=tuple(s.rows for s in summaries), order=events.order)
        if not summaries[0].kept:
            return parts
        return Kept(frame=parts, quarantine=_quarantine([s.quarantine for s in summaries]),
                    steps=add_steps([s.steps for s in summaries]))


def _shared(client: Any, args: tuple) -> tuple:
    """Frames among the arguments sent to every worker once, not inside every task."""
    return tuple(client.scatter(a, broadcast=True) if isinstance(a, pd.DataFrame) else a for a in args)


def _call(frame: pd.DataFrame, *, call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return call(frame, *args, **kwargs)


def _attempt(frame: pd.DataFrame, *, stage: Callable[..., Any], args: tuple, kwargs: dict) -> _Done:
    try:
        return _Done(result=stage(frame, *args, **kwargs))
    except StageError as error:
        return _Done(error=dict(stage=error.stage, side=error.side, check=error.check, column=error.column,
                                count=error.count, failure_cases=error.failure_cases, table=error.table,
                                detail=error.detail, advice=error.advice))


def _summarize(done: _Done) -> _Summary:
    kept = isinstance(done.result, Kept)
    frame = done.result.frame if kept else done.result
    return _Summary(rows=0 if frame is None else len(frame), kept=kept,
                    quarantine=done.result.quarantine if kept else None,
                    steps=done.result.steps if kept else (), error=done.error)


def _result_frame(done: _Done) -> pd.DataFrame:
    return done.result.frame if isinstance(done.result, Kept) else done.result


def _pick(pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None, args: tuple, kwargs: dict,
          frame: pd.DataFrame) -> pd.DataFrame:
    picked = frame if pick is None else pick(frame, *args, **kwargs)
    return picked if columns is None else picked[list(columns)]


def _quarantine(parts: list[pd.DataFrame]) -> pd.DataFrame:
    found = [q for q in parts if len(q)]
    return pd.concat(found) if found else empty_quarantine()


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


def row_slices(frame: pd.DataFrame, partitions: int) -> list[pd.DataFrame]:
    """``frame`` cut into at most ``partitions`` consecutive, near-equal row slices (at least one)."""
    count = max(1, min(int(partitions), len(frame)))
    bounds = np.linspace(0, len(frame), count + 1).round().astype(int)
    return [frame.iloc[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]


@contextlib.contextmanager
def dask_engine(scheduler: str | None = None, *, workers: int = 2, memory_limit: str = "4GB",
                partitions: int | None = None) -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` on the cluster at ``scheduler``, or on a fresh loopback ``LocalCluster``."""
    from dask.distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if scheduler:
            client = stack.enter_context(Client(scheduler))
        else:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                host="127.0.0.1", dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        found = len(client.scheduler_info().get("workers", {})) or workers
        yield DaskEngine(client=client, partitions=partitions or 2 * found)
