"""What a process that works on parts does besides its tasks: it gives back the memory the part before freed
(:func:`give_back_memory`, before every part it reads), unless it is a :class:`pipeline.engines.parts.PartsEngine`
worker, which starts with torch and the BLAS libraries on one thread (:func:`start_worker`) and keeps freed memory
through a pass (:func:`keep_freed_memory`) to give it all back at the end (:func:`give_back_all`)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from typing import Any

import pyarrow as pa


_GIVE_BACK_BARRIER: Any = None  # a PartsEngine's worker keeps freed memory: where its workers meet to give it back


def give_back_memory() -> None:
    """Return the memory Arrow's pool keeps from the part before (without it, the pool's retained memory, not the
    parts, sets the peak over a run of parts), unless this process keeps it for the next part (a worker:
    :func:`keep_freed_memory`)."""
    if _GIVE_BACK_BARRIER is None:
        pa.default_memory_pool().release_unused()


def start_worker(barrier: Any, parent: int | None = None) -> None:
    """A :class:`PartsEngine` worker process, before its first task: torch's and the BLAS libraries' loops run on one
    thread (:data:`ONE_THREAD`, as Dask's nanny sets for its workers), since the workers are already one per core, and
    it keeps the memory a part frees (:func:`keep_freed_memory`). With two threads in each of two workers, torch's
    OpenMP threads spun against each other: the graphs of 27.8M rows took 43 s on the workers against 12 s here."""
    os.environ.update(ONE_THREAD)
    die_with_parent(parent)
    keep_freed_memory(barrier)


def die_with_parent(parent: int | None = None) -> None:
    """A worker ends with the build that started it: a watchdog thread ends it within a second of its parent's
    death (a build killed -9, or by the system for memory, left its workers holding a gigabyte for good), and it
    leaves Ctrl-C to its parent, which ends the run (its own KeyboardInterrupt tracebacks reached the terminal).
    Linux's parent-death signal would follow the thread that started the worker, which may end before the build."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid() if parent is None else parent  # the build's pid: it may have died while this one started

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="badpoints-parent-watch", daemon=True).start()


PARENT_CHECK_SECONDS = 0.5


def started(pool: Any, workers: int) -> None:
    """Every worker of a new ``pool`` started now, from this thread, with Ctrl-C blocked while they start: a worker
    inherits the blocked signal (the mask is kept across exec), so one interrupted while it still imported can no
    longer print its KeyboardInterrupt, while a Ctrl-C that comes meanwhile waits, pending, and reaches this process
    once they are started. A process pool starts a worker per task submitted until it has them all, then no more."""
    if threading.current_thread() is not threading.main_thread():  # the main thread takes the signals
        return
    with ctrl_c_held():
        for _ in range(workers):
            pool.submit(_ready)


def stopped(pool: Any) -> None:
    """A ``pool``'s workers told to stop and waited for, with Ctrl-C held until they are (from the main thread), so
    a Ctrl-C never breaks the shutdown off halfway, leaving workers to read a queue this process closes by exiting.
    A pass may stop its workers (the graphs'), so this happens within a run too, not only at its end."""
    with ctrl_c_held() if threading.current_thread() is threading.main_thread() else contextlib.nullcontext():
        pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def ctrl_c_held():
    """Ctrl-C held off meanwhile (from the main thread), and raised once done if it came. SIGINT is blocked in this
    thread, so a worker (or a thread, which passes the mask on to the workers it starts) started meanwhile inherits
    the mask; and it is only noted, not raised, by this process:
    another of its threads may take the signal, and Python then raises KeyboardInterrupt in the main thread wherever
    it is, between starting a worker and writing what it reads first (the worker read an empty pipe: EOFError)."""
    came: list[int] = []
    handler = signal.signal(signal.SIGINT, lambda number, frame: came.append(number))
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        signal.signal(signal.SIGINT, handler)
        if came:
            signal.raise_signal(signal.SIGINT)


def _ready() -> None:
    """A task that starts a worker and does nothing."""


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def keep_freed_memory(barrier: Any) -> None:
    """A :class:`PartsEngine` worker keeps the memory a part frees for the next part of the pass: glibc's malloc
    neither maps big arrays apart nor trims its heap (``mallopt``), and :func:`give_back_memory` leaves Arrow's pool
    as it is. Memory given back to the system comes back zero-filled, by the kernel, at the next part's first
    touch: at 27.8M rows ``validate``'s system time fell from 21-23 s to 17-19 s once the workers kept it. At the
    end of a pass each worker gives it all back (:func:`give_back_all`), so what one pass (a stage's, the graphs')
    kept is not held through the next, nor by idle workers while this process works alone."""
    global _GIVE_BACK_BARRIER
    _GIVE_BACK_BARRIER = barrier
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        mallopt(M_MMAP_THRESHOLD, 2**30)
        mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def give_back_all() -> None:
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
