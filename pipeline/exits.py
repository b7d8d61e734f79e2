"""How the command line ends a run that cannot go on: exit 2 and one line saying why, never a traceback. A problem it
names (a config, an output folder, the cache, pandera switched off), a Dask cluster that failed, memory that ran out
(here or in a worker process), a worker process lost, or a bug (``BADPOINTS_DEBUG=1`` shows its traceback).

Saying that memory ran out takes memory: the command holds a reserve from its start (:func:`prepare`), given back
as soon as a run fails, and has imported and drawn once what printing the line needs (rich imports its emoji table
the first time it reads markup), so that the line is printed where the run could not go on.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import sys
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.cache import CacheError
from pipeline.config import ConfigError
from pipeline.kernel.handed import ScratchError
from pipeline.output.paths import OutputError
from schemas.errors import ValidationDisabled, out_of_memory

T = TypeVar("T")

NAMED = (ConfigError, ValidationDisabled, OutputError, ScratchError, CacheError)  # said as they are
CANNOT_RUN, INTERNAL = "badpoints: cannot run:", "badpoints: internal error"  # how a line that ends a run begins
RESERVE_BYTES = 64 << 20  # held from the start, given back when a run fails: what saying why may take
MORE_MEMORY = ("give it more memory (a higher ulimit -v or container limit), or work on parts: --engine parts, with "
               "fewer --workers or more --partitions (a worker holds one part at a time)")
_reserve: list[mmap.mmap] = []  # address space held back (never touched, so it costs no memory until used)
_said: list[str] = []  # the line this command ended a run with: said once, also if ending it fails again
_lacked: list[str] = []  # memory that ran out where no one could raise it (an exception in a C library's callback)


def prepare(err: Console) -> None:
    """Before a run: the reserve held, and the out-of-memory line drawn once on ``err`` (not printed), so that
    everything printing it imports is imported now."""
    _give_back()
    _reserve.append(mmap.mmap(-1, RESERVE_BYTES))
    _said.clear()
    _lacked.clear()
    sys.unraisablehook = _unraisable
    for _ in err.render(err.render_str(_marked(CANNOT_RUN, _lacking_memory(MemoryError())))):
        pass
    _blas_buffers()


def _blas_buffers() -> None:
    """OpenBLAS (numpy's) maps a work buffer for each of its threads on their first product and keeps it for the next;
    one it cannot map later, when memory runs short, ends the process with exit 1 and no word from badpoints (1 says
    the data has errors). One product large enough to use every thread maps them all now."""
    import numpy as np

    square = np.ones((512, 512))
    square @ square


def _unraisable(unraisable: Any) -> None:
    """An exception no one can catch (raised in a callback a C library called, as FreeType's reads of a font file):
    memory that ran out is kept, unprinted, to be said when the error it leads to ends the run; anything else is
    printed as Python prints it."""
    if out_of_memory(unraisable.exc_value):
        _lacked.append(f"{unraisable.exc_type.__name__}: {unraisable.exc_value}".rstrip(": "))
        return
    sys.__unraisablehook__(unraisable)


def guarded_run(err: Console, run: Callable[[], T]) -> T:
    """``run()``; what stops it ends the command: exit 2 and one line on ``err`` saying why."""
    try:
        return run()
    except NAMED as exc:
        _give_back()
        head, said = CANNOT_RUN, str(exc)
    except Exception as exc:  # noqa: BLE001 - never a traceback for a user; what it was is enough to say
        _give_back()  # first: what follows may need memory
        if os.environ.get("BADPOINTS_DEBUG") and not out_of_memory(exc):
            raise
        head, said = said_of(exc)
    gc.collect()  # the frames the error held, and the data in them, are freed once the except clause is left
    say(err, head, said)
    raise typer.Exit(2)


def said_of(exc: BaseException) -> tuple[str, str]:
    """What ends the run for ``exc``: the head (:data:`CANNOT_RUN` or :data:`INTERNAL`) and the plain line after it."""
    name = type(exc).__name__
    if out_of_memory(exc):
        return CANNOT_RUN, _lacking_memory(exc)
    if _lacked:  # the error after memory ran out in a callback (FreeType's RuntimeError after its read failed)
        return CANNOT_RUN, _lacking_memory(exc, f"{_lacked[0]}, then {name}")
    if name == "BrokenProcessPool":  # a worker process ended abruptly: killed by the system, or past ulimit -v
        return CANNOT_RUN, f"a worker process was lost ({name}), most often out of memory: {MORE_MEMORY}"
    if type(exc).__module__.split(".")[0] == "distributed":  # the cluster failed, not the data or badpoints
        return CANNOT_RUN, (f"the Dask cluster failed ({name}: {opening(str(exc), 300)}), most often a worker "
                            "killed at its memory limit: raise --memory-limit, or use more --partitions")
    return INTERNAL, f"({name}); this is a bug in badpoints. Rerun with BADPOINTS_DEBUG=1 for the traceback and report it."


def _lacking_memory(exc: BaseException, said: str | None = None) -> str:
    """The line for memory that ran out, naming how it was said (``exc``, or ``said``) and what to do."""
    what = opening(said or (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__), 160)
    return f"out of memory ({what}): {MORE_MEMORY}"


def say(err: Console, head: str, said: str) -> None:
    """``head`` in bold red and ``said`` on ``err``, once per command: written plainly if printing fails (memory)."""
    if _said:
        return
    _said.append(f"{head} {said}")
    try:
        err.print(_marked(head, said))
    except Exception:  # noqa: BLE001 - the line is said however it can be
        _write_plainly(_said[0])


def _marked(head: str, said: str) -> str:
    """``head`` in bold red, then ``said`` as plain text (rich markup)."""
    return f"[bold red]{head}[/] {escape(said)}"


def ended(exc: BaseException) -> int:
    """What escaped a command (a context it left while it ended failed in turn, as memory ran out): said in one line
    unless the command said why already, never as a traceback; the exit status, 2."""
    _give_back()
    if os.environ.get("BADPOINTS_DEBUG") and not out_of_memory(exc):
        raise exc
    if not _said:
        _said.append(f"{CANNOT_RUN} out of memory: {MORE_MEMORY}" if out_of_memory(exc) or _lacked else
                     f"{INTERNAL} ({type(exc).__name__}); this is a bug in badpoints")
        _write_plainly(_said[0])
    return 2


def _write_plainly(line: str) -> None:
    """``line`` written to stderr's file as bytes, with nothing rich or buffered in between."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.write(sys.stderr.fileno(), (line + "\n").encode("utf-8", "replace"))


def _give_back() -> None:
    """The reserve unmapped: its address space is the system's again."""
    for held in _reserve:
        held.close()
    _reserve.clear()


def opening(text: str, limit: int) -> str:
    """``text`` on one line, cut at a word before ``limit`` characters (a Dask error names the task and the worker
    lost first, then adds advice and links)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."
