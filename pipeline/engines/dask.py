"""The Dask engine: the parts engine's work on the workers of a ``dask.distributed`` cluster (a fresh loopback
``LocalCluster``, or an existing scheduler's), the same parts files, each per-part step a task."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import warnings
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pandas as pd

from pipeline.engines.base import ahead_of_results
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.engines.parts import PartsEngine, parts_folder
from pipeline.engines.workers import ctrl_c_held
from pipeline.kernel.quarantine import LineMask


class DaskEngine(PartsEngine):
    """The parts engine's work on a ``dask.distributed`` cluster: the same parts files, each per-part step (a
    stage, a fit's partial result, a pick, a count) a task on a worker, which reads its part's file and
    writes what it makes beside it.

    LABEVENTS' blocks are read here (a ``.gz`` stream is read in order) and sent to the workers, which check them and
    write them into the parts (:class:`BlockRoute`), so the client holds ADMISSIONS, D_LABITEMS, the fitted state
    and what comes back per part (counts, steps, a part's quarantine records on their way to the line-range files),
    never all the rows; a worker holds the part it works on. The workers must see the parts folder: a
    ``LocalCluster``'s do; a remote cluster's need it on a filesystem they share (``folder``). Tasks are sent a few per
    worker ahead of the results read back.

    Nothing a task needs lives only in a worker's memory: its part, the frames it reads and what it writes are files of
    the parts folder, so a task whose worker is lost runs again on another (Dask retries it). Frames were once
    broadcast to every worker (``client.scatter``): a worker lost during the scatter left the scheduler copying to it
    forever, and the build hung.
    """

    def __init__(self, folder: Path, client: Any, options: EngineOptions | None = None, **changes: Any) -> None:
        super().__init__(folder, options, **changes)
        self.client = client

    def _elsewhere(self) -> bool:
        return True

    def _map(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        if "args" in kwargs:  # frames and masks among the arguments: written into the parts folder once, as the chain's
            kwargs = {**kwargs, "args": tuple(self.share(a) if isinstance(a, (pd.DataFrame, pd.Series, LineMask))
                                              else a for a in kwargs["args"])}
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
        seen = _seeing(self.client, folder)
        return bool(seen) and all(seen.values())


def _seeing(client: Any, folder: Path) -> dict[str, bool]:
    """Per worker that answers, whether it sees ``folder``. A worker lost while it is asked is left out (its tasks go
    to the others), not an error that ends the run."""
    return client.run(os.path.isdir, str(folder), on_error="ignore")


# A LocalCluster's nannies start a lost worker again in seconds; with no worker running for this long, the tasks
# waiting fail (NoWorkerError: the CLI's exit 2), rather than wait forever. A Dask config that sets it wins.
NO_WORKERS = "distributed.scheduler.no-workers-timeout"
NO_WORKERS_TIMEOUT = "60s"


@contextlib.contextmanager
def dask_engine(options: EngineOptions | None = None, *, folder: Path | None = None,
                **changes: Any) -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` on the cluster at the options' ``scheduler``, or on a fresh loopback ``LocalCluster`` of
    ``workers`` processes of ``memory_limit`` each, its parts in a fresh temporary folder (in ``folder``, or the
    system's) that every worker must see; deleted afterwards. ``options`` whole, or ``changes`` to the defaults by
    name (``dask_engine(workers=1, memory_limit="1GB")``). A
    ``LocalCluster``'s scheduler and workers keep their own scratch (Dask's ``dask-scratch-space``) in it too, so a
    killed run leaves none in TMPDIR: the next run removes its parts folder (:func:`parts_folder`).

    A worker lost during the run is started again by its nanny (a ``LocalCluster``'s), and the tasks it was running
    run again (up to ``distributed.scheduler.allowed-failures`` times each: then ``KilledWorker``); when no worker has
    run for :data:`NO_WORKERS_TIMEOUT`, the waiting tasks fail (``NoWorkerError``)."""
    import dask
    from dask.distributed import Client, LocalCluster

    options = EngineOptions.given(options, **changes)
    restore: list[Callable[[], None]] = []  # stderr given back once the cluster has closed
    try:
        with contextlib.ExitStack() as stack:
            parts = Path(stack.enter_context(parts_folder(folder)))  # removed after the cluster has stopped
            if options.scheduler:
                client = stack.enter_context(Client(options.scheduler))
            else:
                stack.enter_context(cluster_logs(options.logs))
                # Started with Ctrl-C held: the cluster's thread, and every worker process it starts (also later,
                # for a lost one), inherit SIGINT blocked, and leave Ctrl-C to this process, which stops the
                # cluster. The resource tracker first: the thread that starts it has SIGINT unblocked after
                # (multiprocessing's doing).
                resource_tracker.ensure_running()
                with dask.config.set({NO_WORKERS: dask.config.get(NO_WORKERS) or NO_WORKERS_TIMEOUT,
                                      "temporary-directory": str(parts)}), ctrl_c_held():  # their scratch in parts
                    cluster = stack.enter_context(LocalCluster(
                        n_workers=options.workers, threads_per_worker=1, processes=True, silence_logs=False,
                        memory_limit=options.memory_limit, host="127.0.0.1", dashboard_address=None))
                client = stack.enter_context(Client(cluster))
            blind = sorted(worker for worker, sees in _seeing(client, parts).items() if not sees)
            if blind:
                raise OSError(f"{len(blind)} Dask worker(s) cannot see the parts folder {parts} (first: "
                              f"{blind[0]}): run the workers where it is, or set TMPDIR to a folder they share")
            try:
                yield DaskEngine(parts, client, options)
            except KeyboardInterrupt:
                if not options.scheduler:
                    restore.append(_unheard(cluster))
                raise
    finally:
        for given_back in restore:
            given_back()


def _unheard(cluster: Any) -> Callable[[], None]:
    """A cluster that Ctrl-C stops: its worker processes killed at once (their work is dropped with the run), and what
    the scheduler and nannies log as it closes kept off stderr (a worker that outlived its scheduler would print the
    tracebacks of its failed heartbeats); what gives stderr back, once it has closed."""
    for nanny in list(cluster.workers.values()):
        with contextlib.suppress(ProcessLookupError, PermissionError, TypeError, AttributeError):
            os.kill(nanny.pid, signal.SIGKILL)
    handlers = [h for h in logging.getLogger("distributed").handlers if isinstance(h, logging.StreamHandler)]
    levels = [h.level for h in handlers]
    for handler in handlers:
        handler.setLevel(logging.CRITICAL + 1)

    def given_back() -> None:
        for handler, was in zip(handlers, levels):
            handler.setLevel(was)

    return given_back


@contextlib.contextmanager
def cluster_logs(level: str) -> Iterator[None]:
    """While a LocalCluster runs, what its processes log reaches stderr from ``level`` up (``warning``, ``error``):
    this process's scheduler, nannies and client through the handler Dask gives its loggers here, and its warnings
    (``error``: Dask's Python warnings are ignored too); the worker processes, which its nannies start, through the
    config Dask hands a process it starts (``DASK_INTERNAL_INHERIT_CONFIG``, read when a worker imports Dask), as
    long as the cluster lasts."""
    import dask

    handlers = [h for h in logging.getLogger("distributed").handlers if isinstance(h, logging.StreamHandler)]
    levels = [h.level for h in handlers]
    inherited = os.environ.get(INHERIT)
    given = dask.config.deserialize(inherited) if inherited else {}
    os.environ[INHERIT] = dask.config.serialize(dask.config.merge(given, {"logging": {
        name: level for name in ("distributed", "distributed.client", "distributed.gc")}}))
    try:
        with warnings.catch_warnings():
            if level == "error":
                warnings.filterwarnings("ignore", module="distributed")
            for handler in handlers:
                handler.setLevel(level.upper())
            yield
    finally:
        for handler, was in zip(handlers, levels):
            handler.setLevel(was)
        if inherited is None:
            os.environ.pop(INHERIT, None)
        else:
            os.environ[INHERIT] = inherited


INHERIT = "DASK_INTERNAL_INHERIT_CONFIG"


KIND = EngineKind("dask", dask_engine, reads=("scheduler", "workers", "memory_limit", "partitions", "rows_per_part",
                                              "logs"),
                  doc="the same parts, worked on by a Dask cluster's workers", starts="the Dask cluster")
