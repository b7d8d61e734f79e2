"""The parts engine: LABEVENTS in parts cut by admission, kept as Arrow files of a folder, each part worked on in
this process or by worker processes of this machine (and by :class:`pipeline.engines.dask.DaskEngine`, on the
workers of a ``dask.distributed`` cluster). It runs the very same stage functions as the pandas engine and gives
the same result:

- raw checks: LABEVENTS is read in blocks here; each is checked, guarded and written into its admission ranges
  (:class:`pipeline.engines.routing.BlockRoute`) where the parts are worked on (in the worker processes or on the
  cluster, while this process reads the next blocks), and a :class:`pipeline.engines.routing.Router` makes
  admission-range parts of them, so the whole table never exists. The split and the admission order are known
  from ADMISSIONS (small) before any lab row is read. Keys, foreign keys and stays are checked per block against
  ADMISSIONS and D_LABITEMS (``pipeline.reading.parse.check_stream``), which every task reads from one file
  (:class:`pipeline.kernel.handed.Shared`), not from the task.
- every stage works per row or per admission (clean, split, encode, z-scores, fill, bucket, dedup), and every
  admission's rows are in one part, so the stages of a pass run on each part alone, one after the other (``chain``),
  and their quarantine records (kept on disk by source line range: :class:`pipeline.engines.stored.LineFiles`) and
  steps are added up.
- a stage's fit (:class:`pipeline.kernel.calls.Fit`) is global: a mergeable one (``partial``, ``combine``,
  ``finish``: item kinds, vocabularies, z-score stats) reads each part and gives a small result; those are
  combined into exactly the state one process fits. Any other fit (fill's exact medians) reads the rows and
  columns it needs, gathered.
- findings about the whole table read the rows or columns they need, gathered in the input's row order (``rows``).
- a :class:`StageError` on any part makes the stage run on its gathered input, so the report carries exactly the
  error the pandas engine reports (count, lines, items), never just the first part's.
- the edge rows stay in their parts, in part order, which is the dedup stage's order (split, admission,
  timestep, item): the graphs are built from them one part at a time.

A part's work is one function of its file (``pipeline.engines.tasks``): :class:`PartsEngine` calls it here, one
part at a time, or in its worker processes (``pipeline.engines.workers``), and the Dask engine sends it to a
cluster's worker as a task.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import multiprocessing
import os
import shutil
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pandas as pd

from pipeline.engines.base import add_steps, ahead_of_results, in_row_order, picked
from pipeline.engines.batches import admitted_in, batch_piece, batch_pieces
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.engines.pandas import PANDAS
from pipeline.engines.routing import Router, admission_parts
from pipeline.engines.stored import Batches, LineFiles, Stored, read_part
from pipeline.engines.tasks import ChainDone, LinkDone, block_part, call_part, chain_part, pick_part
from pipeline.engines.workers import give_back_all, start_worker, started, stopped
from pipeline.reading.parse import PartCheck, check_part
from pipeline.kernel.quarantine import Kept
from pipeline.kernel.handed import Shared, share, shared_frames, write_part
from pipeline.kernel.calls import Call, Chained, Events, Fit, Link, Linked
from schemas.errors import StageError


COMBINE_EVERY = 8  # a mergeable fit's partial results held before they are combined (MIMIC-IV: ~120 parts)


class PartsEngine:
    """On parts cut by admission and kept as Arrow files in ``folder``: a stage reads one part, runs, and writes
    what it gives as a new file, so one part of LABEVENTS is in memory per process at a time; the parts are worked
    on here, or by ``workers`` processes of this machine. As many parts as its options cut
    (:attr:`EngineOptions.part_rows`, :meth:`EngineOptions.parts_for`); ``options`` whole, or ``changes`` to the
    defaults by name.

    A table's raw checks run block by block: ADMISSIONS' and D_LABITEMS' here, LABEVENTS' where the parts are worked
    on, each block routed into the parts (:meth:`router`, :meth:`blocks`). Use
    :func:`parts_engine`: its folder is deleted at the end of the run, also when the run fails.
    """

    keeps_parts = True

    def __init__(self, folder: Path, options: EngineOptions | None = None, **changes: Any) -> None:
        self.folder = Path(folder)
        self.options = EngineOptions.given(options, **changes)
        self.workers = self.options.workers
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
        return self._handed_over(function, blocks, kwargs)

    def each(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        """Here, in this machine's worker processes (``workers``), or (Dask) on the cluster's workers."""
        return self._map(function, items, **kwargs)

    def _handed_over(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], kwargs: dict) -> Iterator[Any]:
        """:meth:`blocks` in other processes: each block's file deleted here once its result is read, not by its
        task, so a task run again (its Dask worker was lost) finds its block."""
        handed: collections.deque[Path] = collections.deque()

        def written(block: pd.DataFrame) -> Path:
            handed.append(self._write(block))
            return handed[-1]

        for result in self._map(block_part, (written(block) for block in blocks), call=function, kwargs=kwargs):
            handed.popleft().unlink(missing_ok=True)
            yield result

    def _elsewhere(self) -> bool:
        """Whether the parts are worked on in other processes."""
        return bool(self.workers and self.workers >= 2)

    def share(self, value: Any) -> Shared:
        """A frame (or another large value) written once into the parts folder: tasks carry its path, each process
        reads it once."""
        return share(value, self._path())

    def partition(self, events: pd.DataFrame | Stored, splits: pd.DataFrame | None = None) -> Stored:
        if isinstance(events, Stored):  # routed into parts as its blocks were read
            return events
        frames = admission_parts(events, self.options.parts_for(len(events)), splits)
        order = None if events.index.is_monotonic_increasing else events.index
        return Stored(paths=tuple(self._write(frame) for frame in frames), lengths=tuple(len(f) for f in frames),
                      order=order, columns=tuple(events.columns))

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """A mergeable fit part by part (its partial results); any other fit on what it was handed."""
        if not isinstance(events, Stored) or fit.partial is None:
            return fit.whole(events, *args, **kwargs)
        partials: list = []  # combined a few at a time as they come (a combine adds up: counts, sums)
        for partial in self._map(call_part, events.paths, call=fit.partial, args=args, kwargs=kwargs):
            partials.append(partial)
            if len(partials) > COMBINE_EVERY:
                partials = [fit.combine(partials)]
        return fit.finish(fit.combine(partials), *args, **kwargs)

    def chain(self, events: Stored, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()) -> Chained:
        """The links on every part, each part in one go (one read, one write: in a worker process or on a cluster's
        worker): the calls' quarantine records go to line-range files as the parts give them, their steps, counts
        and the fits' partial results add up, the picks are put in row order. A call that fails on any part is run
        again here on all its input rows (the links before it redone part by part), so the error is the whole
        table's, as the pandas engine reports it."""
        if not isinstance(events, Stored):
            return PANDAS.chain(events, links, fits)
        targets = [self._path() for _ in events.paths]
        sums = _ChainSums(links, fits, self._path)
        for done in self._map(chain_part, list(zip(events.paths, targets)), work=self._work(links, fits),
                              schema=events.schema):
            sums.add(done)
        linked = sums.linked(events.order)
        if sums.failed is not None:
            self.release(replace(events, paths=tuple(targets)))
            linked[-1] = replace(linked[-1], error=self._whole_error(events, links, sums.failed))
            return Chained(links=tuple(linked))
        gives = getattr(links[-1].calls[-1].function, "gives", None) if links and links[-1].calls else events.schema
        out = Stored(paths=tuple(targets), lengths=tuple(sums.lengths), order=events.order, columns=sums.columns,
                     schema=gives)
        return Chained(links=tuple(linked), events=out, fitted=sums.fitted())

    def _work(self, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]]) -> tuple:
        """The links and the fits' partial results as a part's task takes them: frames among the calls' arguments
        (ADMISSIONS, the split) go into the parts folder once, not into every task."""
        return (tuple(Link(*(tuple(self._shared(call) for call in calls) for calls in (link.calls, link.counts,
                                                                                        link.picks, link.tallies)))
                      for link in links),
                tuple(self._shared(Call(fit.partial, args, kwargs)) for fit, args, kwargs in fits))

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
            return picked(pick, columns, args, kwargs, events)
        return in_row_order(list(self._map(pick_part, events.paths, pick=pick, columns=columns, args=args,
                                           kwargs=kwargs)), events.order)

    def collect(self, events: Stored | pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        if isinstance(events, pd.DataFrame):
            return PANDAS.collect(events, columns)
        return pd.concat(list(events.read(columns)))

    def per_part(self, call: Callable[..., Any], events: Stored | pd.DataFrame, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        if isinstance(events, pd.DataFrame):
            return PANDAS.per_part(call, events, *args, columns=columns, **kwargs)
        return self._map(call_part, events.paths, call=call, args=args, kwargs=kwargs,
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
        admitted = list(self._map(call_part, events.paths, call=admitted_in, columns=["SPLIT", "HADM_ID"]))
        pieces = batch_pieces(admitted, events.paths, batch_size)
        try:
            for done in self._map(batch_piece, pieces, make=make, args=shared_frames(args, self.share),
                                  kwargs={**kwargs, "batch_size": batch_size},
                                  columns=None if columns is None else list(columns)):
                if done.error is not None:
                    raise StageError(**done.error)
                yield from done.made
        finally:
            # What makes the pieces (the graphs: torch and PyG, 280 MB a process) stays loaded in the workers, with
            # the heap it fragmented: the passes after it (the report's) start fresh workers, which takes a few
            # seconds and keeps each idle worker's memory to what a part needs. (A Dask engine's workers are its
            # cluster's.)
            self._stop_workers()

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
                initargs=(context.Barrier(self.workers), os.getpid()))
            started(self._pool, self.workers)
        return self._then_give_back(ahead_of_results(lambda item: self._pool.submit(function, item, **kwargs), items,
                                                     ahead=2 * self.workers))

    def _then_give_back(self, results: Iterator[Any]) -> Iterator[Any]:
        """``results``, then (all read) each worker gives back the memory it kept for the next part."""
        yield from results
        for done in [self._pool.submit(give_back_all) for _ in range(self.workers)]:
            done.result()

    def close(self) -> None:
        """Stop the processes ``workers`` started (:func:`parts_engine` does, at the end of the run)."""
        self._stop_workers()

    def _stop_workers(self) -> None:
        """The worker processes stopped; the next pass starts new ones."""
        if self._pool is not None:
            stopped(self._pool)
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

    def router(self, splits: pd.DataFrame | None) -> Router:
        """Where a table's checked blocks go, as they come: into this engine's parts, by admission."""
        return Router(self, splits)


class _ChainSums:
    """What the parts of a chain gave, added up as they come: per link its counts, each call's quarantine records
    (into line-range files) and steps, its picks and rows; the rows and columns each part wrote; the fits' partial
    results (combined a few at a time); and the first (link, call, error) that failed on a part."""

    def __init__(self, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]],
                 new_path: Callable[[], Path]) -> None:
        self.links, self.fits = links, fits
        self.records = [[LineFiles(new_path) for _ in link.calls] for link in links]
        self.steps: list[list[list]] = [[[] for _ in link.calls] for link in links]
        self.kept = [[False] * len(link.calls) for link in links]
        self.counts: list[list[Any]] = [[None] * len(link.counts) for link in links]
        self.tallies: list[list[Any]] = [[None] * len(link.tallies) for link in links]
        self.picks: list[list[list[pd.DataFrame]]] = [[[] for _ in link.picks] for link in links]
        self.rows = [0] * len(links)
        self.partials: list[list[Any]] = [[] for _ in fits]
        self.lengths: list[int] = []
        self.columns: tuple[str, ...] = ()
        self.failed: tuple[int, int, dict] | None = None

    def add(self, done: ChainDone) -> None:
        """One part's :class:`ChainDone`."""
        for n, part in enumerate(done.links):
            self._add_link(n, part)
        if done.error is not None:
            self.failed = min(self.failed or done.error, done.error, key=lambda e: (e[0], e[1]))
            return
        self.lengths.append(done.rows)
        self.columns = done.columns
        for f, partial in enumerate(done.partials):
            self.partials[f].append(partial)
            if len(self.partials[f]) > COMBINE_EVERY:
                self.partials[f] = [self.fits[f][0].combine(self.partials[f])]

    def _add_link(self, n: int, part: LinkDone) -> None:
        for added, given in ((self.counts[n], part.counts), (self.tallies[n], part.tallies)):
            for k, count in enumerate(given):
                added[k] = count if added[k] is None else added[k] + count
        for k, call in enumerate(part.kept):
            if call is not None:
                self.kept[n][k] = True
                self.records[n][k].add(call[0])
                self.steps[n][k].append(call[1])
        for k, picked_rows in enumerate(part.picks):
            self.picks[n][k].append(picked_rows)
        self.rows[n] += part.rows

    def linked(self, order: pd.Index | None) -> list[Linked]:
        """What each link made of all the rows, up to the one that failed (its calls up to the failing one, no
        picks); its picks in the row order ``order``. Every line-range file is closed."""
        failed = self.failed
        ended = len(self.links) if failed is None else failed[0] + 1
        quarantines = [[files.finish() for files in link] for link in self.records]  # every writer closed
        linked = []
        for n in range(ended):
            whole = n < ended - 1 or failed is None  # the link ran to its end on every part
            calls = len(self.links[n].calls) if whole else failed[1]
            linked.append(Linked(
                counts=tuple(self.counts[n]),
                kept=tuple(Kept(frame=None, quarantine=quarantines[n][k], steps=add_steps(self.steps[n][k]))
                           if self.kept[n][k] else None for k in range(calls)),
                picks=tuple(in_row_order(frames, order) for frames in self.picks[n]) if whole else (),
                rows=self.rows[n], tallies=tuple(self.tallies[n]) if whole else ()))
        return linked

    def fitted(self) -> tuple[Any, ...]:
        """The states the fits learn from all the parts' rows."""
        return tuple(fit.finish(fit.combine(partial), *args, **kwargs)
                     for (fit, args, kwargs), partial in zip(self.fits, self.partials))


@contextlib.contextmanager
def parts_engine(options: EngineOptions | None = None, *, folder: Path | None = None,
                 **changes: Any) -> Iterator[PartsEngine]:
    """A :class:`PartsEngine` on a fresh temporary folder (in ``folder``, or the system's), deleted afterwards;
    ``options`` whole, or ``changes`` to the defaults by name (``parts_engine(partitions=3, workers=1)``).

    A run that was killed (by the system for memory, or by a signal) cannot delete its folder; its folder holds its
    pid (``OWNER``), and the next run removes the folders of owners that are no longer running."""
    with parts_folder(folder) as temporary:
        engine = PartsEngine(temporary, options, **changes)
        try:
            yield engine
        finally:
            engine.close()


KIND = EngineKind("parts", parts_engine, reads=("workers", "partitions", "rows_per_part"),
                  doc="its checked blocks routed into admission-range parts kept as Arrow files in a temporary "
                      "folder, each part worked on by one of --workers processes: memory stays bounded")


@contextlib.contextmanager
def parts_folder(folder: Path | None) -> Iterator[Path]:
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
