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

:class:`PartsEngine` keeps the parts as Parquet files in a temporary folder and holds
one in memory at a time. :class:`DaskEngine` holds them on the workers:
``LocalCluster`` by default (worker processes on loopback, bounded memory), or
an existing scheduler at an address.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd

from pipeline.parse import PartCheck, check_part, combine_parts
from pipeline.quarantine import Kept, Step, empty_quarantine
from schemas.errors import StageError
from schemas.split import SPLITS, split_codes

if TYPE_CHECKING:
    from pipeline.stages import Fit

ROWS_PER_PART = 1_000_000  # a PartsEngine's default: a part of LABEVENTS about this many rows

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

    def collect(self, events: Events) -> pd.DataFrame:
        """The rows as one pandas frame."""


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

    def collect(self, events: pd.DataFrame) -> pd.DataFrame:
        return events


PANDAS = PandasEngine()


@dataclass(frozen=True)
class Stored:
    """A frame cut by admission, its parts Parquet files (in part order) of a :class:`PartsEngine`'s folder."""

    paths: tuple[Path, ...]
    lengths: tuple[int, ...]
    order: pd.Index | None  # the source lines in the row order of the frame that was cut (None: increasing)

    def __len__(self) -> int:
        return sum(self.lengths)


class PartsEngine:
    """In this process, on parts cut by admission (as :class:`DaskEngine` cuts them) and kept as Parquet files in
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

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> Stored:
        count = self.partitions or -(-len(events) // max(1, self.rows_per_part or len(events) or 1))
        frames = admission_parts(events, max(1, count), splits)
        order = None if events.index.is_monotonic_increasing else events.index
        return Stored(paths=tuple(self._write(frame) for frame in frames), lengths=tuple(len(f) for f in frames),
                      order=order)

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """A mergeable fit part by part (its partial results, or its passes); any other fit on what it was handed."""
        if not isinstance(events, Stored) or (fit.parts is None and fit.partial is None):
            return fit.whole(events, *args, **kwargs)
        if fit.partial is not None:
            partials = [fit.partial(self._read(path), *args, **kwargs) for path in events.paths]
            return fit.finish(fit.combine(partials), *args, **kwargs)

        def keep(step: Callable[[pd.DataFrame], pd.DataFrame]) -> Stored:
            frames = [self._write(step(self._read(path))) for path in events.paths]
            return replace(events, paths=tuple(frames))

        return fit.parts(keep, lambda kept, step: [step(self._read(path)) for path in kept.paths], *args, **kwargs)

    def each(self, stage: Callable[..., Any], events: Stored, *args: Any, **kwargs: Any) -> Any:
        """``stage`` on every part in turn; a part's StageError makes the stage run on all the rows, as pandas
        does, so the error counts every part's rows."""
        paths, lengths, quarantines, steps, kept = [], [], [], [], False
        for path in events.paths:
            try:
                done = stage(self._read(path), *args, **kwargs)
            except StageError:
                stage(self.rows(events), *args, **kwargs)  # raises the whole table's StageError
                raise  # a stage that fails on a part but not on the whole is not per admission
            kept = isinstance(done, Kept)
            frame = done.frame if kept else done
            paths.append(self._write(frame))
            lengths.append(len(frame))
            if kept:
                quarantines.append(done.quarantine)
                steps.append(done.steps)
        parts = Stored(paths=tuple(paths), lengths=tuple(lengths), order=events.order)
        return Kept(frame=parts, quarantine=_quarantine(quarantines), steps=add_steps(steps)) if kept else parts

    def rows(self, events: Stored, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        read = list(columns) if pick is None and columns is not None else None  # only the columns asked for
        return in_row_order([_pick(pick, columns, args, kwargs, self._read(path, read)) for path in events.paths],
                            events.order)

    def collect(self, events: Stored) -> pd.DataFrame:
        return pd.concat([self._read(path) for path in events.paths])

    def _write(self, frame: pd.DataFrame) -> Path:
        path = self.folder / f"part-{next(self._written):06d}.parquet"
        frame.to_parquet(path, engine="pyarrow", index=True, compression="zstd")
        return path

    @staticmethod
    def _read(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
        return pd.read_parquet(path, engine="pyarrow", columns=columns)


@contextlib.contextmanager
def parts_engine(*, partitions: int | None = None, rows_per_part: int | None = ROWS_PER_PART,
                 folder: Path | None = None) -> Iterator[PartsEngine]:
    """A :class:`PartsEngine` on a fresh temporary folder (in ``folder``, or the system's), deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="badpoints-parts-", dir=folder) as temporary:
        yield PartsEngine(Path(temporary), partitions=partitions, rows_per_part=rows_per_part)


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

    def rows(self, events: Parts, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        picked = self.client.map(functools.partial(_pick, pick, columns, args, kwargs), events.futures, pure=False)
        return in_row_order(self.client.gather(picked), events.order)

    def collect(self, events: Parts) -> pd.DataFrame:
        """The parts gathered a wave at a time: a worker never serializes everything it holds at once (at
        27.8M rows, gathering all parts together got both 3 GB workers killed at their limit)."""
        wave = self._workers()
        frames: list[pd.DataFrame] = []
        for start in range(0, len(events.futures), wave):
            frames += self.client.gather(list(events.futures[start:start + wave]))
        return pd.concat(frames)

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
