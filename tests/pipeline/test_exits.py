"""pipeline/exits.py: a run that cannot go on ends with exit 2 and one line saying why, never a traceback; memory that
runs out (here, in a worker process, or as a library says it) is 'cannot run: out of memory' with what to do, and the
line is printed even where nothing more can be imported or allocated."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console

from pipeline import exits
from pipeline.engines.parts import PartsEngine

ROOT = Path(__file__).resolve().parents[2]


def _ended(tmp_path, run) -> tuple[int, str]:
    """``run`` under :func:`exits.guarded_run` as a command runs it: the exit status and what it said."""
    err = Console(file=(tmp_path / "err.txt").open("w"), width=400)
    exits.prepare(err)
    with pytest.raises(typer.Exit) as stopped:
        exits.guarded_run(err, run)
    err.file.close()
    return stopped.value.exit_code, (tmp_path / "err.txt").read_text()


def _raises(exc: BaseException):
    def run():
        raise exc
    return run


def test_a_dask_cluster_that_fails_mid_run_is_cannot_run_not_a_bug(monkeypatch, tmp_path):
    """A worker killed at its memory limit surfaces as a distributed error: exit 2 with what to change."""
    CommClosedError = type("CommClosedError", (OSError,), {"__module__": "distributed.comm.core"})
    monkeypatch.delenv("BADPOINTS_DEBUG", raising=False)
    code, said = _ended(tmp_path, _raises(CommClosedError("in <TCP (closed) ConnectionPool.gather local=tcp://127.0.0.1>")))

    assert code == 2
    assert "cannot run" in said and "--memory-limit" in said and "bug" not in said
    assert "CommClosedError: in <TCP (closed) ConnectionPool.gather local=tcp://127.0.0.1>" in said  # what was lost


def test_a_dask_error_is_shown_by_its_opening_on_one_line():
    """KilledWorker names the task and the last worker lost first, then adds advice and a link: the opening is kept,
    cut at a word."""
    text = ("Attempted to run task 'chain_part-8a3f' on 4 different workers, but all those workers died while\n"
            "running it. The last worker that attempt to run the task was tcp://127.0.0.1:36423. " + "More. " * 60)
    shown = exits.opening(text, 300)
    assert shown.startswith("Attempted to run task 'chain_part-8a3f' on 4 different workers, but all those workers died "
                            "while running it. The last worker that attempt to run the task was tcp://127.0.0.1:36423.")
    assert shown.endswith(" ...") and len(shown) <= 304 and "\n" not in shown
    assert exits.opening("short", 300) == "short"


class _Callback:
    """An object whose finalizer runs out of memory: Python calls it where no caller can catch what it raises, as a
    C library's callback (FreeType reading a font for matplotlib) is called."""

    def __del__(self):
        raise MemoryError


def test_memory_that_ran_out_in_a_callback_is_said_when_the_error_after_it_ends_the_run(monkeypatch, tmp_path, capsys):
    """Python prints an exception no one can catch with its traceback ('Exception ignored in'), and the library then
    fails in words of its own (a RuntimeError): under a memory limit, that read as an internal error after a
    traceback. The lack is kept unprinted and said as the reason the run ended."""
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # given back after the test
    monkeypatch.delenv("BADPOINTS_DEBUG", raising=False)

    def run():
        _Callback()  # finalized at once: its MemoryError goes to sys.unraisablehook
        raise RuntimeError("In FT2Font: Can not load face (unknown file format; error code 0x2)")

    code, said = _ended(tmp_path, run)
    assert code == 2
    assert said.startswith("badpoints: cannot run: out of memory (MemoryError, then RuntimeError): give it more memory")
    assert "Traceback" not in said + capsys.readouterr().err and "internal error" not in said


def test_an_uncaught_error_of_another_kind_in_a_callback_is_printed_as_python_prints_it(monkeypatch, tmp_path,
                                                                                       capsys):
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    exits.prepare(Console(file=(tmp_path / "err.txt").open("w")))

    class Failing:
        def __del__(self):
            raise ValueError("a bug in a finalizer")

    Failing()
    assert "ValueError: a bug in a finalizer" in capsys.readouterr().err
    assert exits._lacked == []


LACKS = [
    MemoryError(),
    ImportError("libtorch_cpu.so: failed to map segment from shared object"),  # a lazy import, mapped past ulimit -v
    OSError(errno.ENOMEM, "Cannot allocate memory"),
    RuntimeError("can't start new thread"),  # a thread pool's thread, its stack past the limit
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
                 "allocate 4096 bytes."),  # torch
]


@pytest.mark.parametrize("lack", LACKS, ids=lambda lack: type(lack).__name__ + ":" + str(lack)[:20])
def test_memory_that_runs_out_is_cannot_run_with_what_to_do_never_a_bug(monkeypatch, tmp_path, lack):
    """However a library says that memory ran out, the run says so (exit 2), with what to do; BADPOINTS_DEBUG does
    not turn it into a traceback (it is no bug)."""
    monkeypatch.setenv("BADPOINTS_DEBUG", "1")
    code, said = _ended(tmp_path, _raises(lack))
    said = " ".join(said.split())
    assert code == 2 and said.startswith("badpoints: cannot run: out of memory (") and "bug" not in said
    assert "more memory" in said and "--engine parts" in said and "fewer --workers" in said


def test_a_bug_is_still_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.delenv("BADPOINTS_DEBUG", raising=False)
    code, said = _ended(tmp_path, _raises(KeyError("ITEMID")))
    assert code == 2 and said.startswith("badpoints: internal error (KeyError)") and "memory" not in said


def _no_memory_left(_: int) -> None:
    raise MemoryError


def _lost(_: int) -> None:
    os._exit(134)  # as a worker that C++'s std::bad_alloc aborts


@pytest.mark.parametrize(("task", "said"), [(_no_memory_left, "out of memory (MemoryError)"),
                                            (_lost, "a worker process was lost (BrokenProcessPool), most often out "
                                                    "of memory")])
def test_a_worker_process_that_runs_out_of_memory_ends_the_run_the_same_way(tmp_path, task, said):
    """A MemoryError in a parts engine's worker comes back as one; a worker that memory killed is lost: both end the
    run with exit 2, saying so, and the engine still closes."""
    engine = PartsEngine(tmp_path, workers=2)
    try:
        code, printed = _ended(tmp_path, lambda: list(engine.each(task, range(4))))
    finally:
        engine.close()
    assert code == 2 and said in " ".join(printed.split()) and "fewer --workers" in printed


CANNOT_IMPORT = r"""
import sys
import typer
from pipeline import cli

console, err = cli._consoles()


class NoMemory:
    "Every import from here on fails as it does once memory is exhausted (and says so)."

    def find_spec(self, name, *args, **kwargs):
        sys.stderr.write(f"[import {name} refused]\n")
        raise MemoryError


def run():
    raise MemoryError


sys.meta_path.insert(0, NoMemory())
try:
    cli.guarded_run(err, run)
except typer.Exit as stopped:
    sys.exit(stopped.exit_code)
"""


def test_the_out_of_memory_line_needs_no_import_once_the_command_started():
    """What printing the line imports is imported when the command starts: rich read its emoji table lazily, the
    import raised MemoryError again and the command ended with exit 1 and a traceback of a hundred lines."""
    done = subprocess.run([sys.executable, "-c", CANNOT_IMPORT], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("badpoints: cannot run: out of memory (MemoryError)"), done.stderr[-3000:]
    assert "refused" not in done.stderr and "Traceback" not in done.stderr


# -- under ulimit -v ------------------------------------------------------------------------------------------------
ABORTED = 127  # glibc's exit when a new thread's thread-local data cannot be had ("cannot allocate memory for ...")
PEAK = r"""
import atexit, runpy, sys


def peak():
    with open("/proc/self/status") as status:
        sys.stderr.write("".join(line for line in status if line.startswith("VmPeak:")))


atexit.register(peak)
sys.argv = ["badpoints", *sys.argv[1:]]
runpy.run_module(sys.argv.pop(1), run_name="__main__")
"""


def _peak_kb(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """``python -m`` ``args`` run to its end, and the address space it took at most (VmPeak, kB)."""
    done = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    peak = [line for line in done.stderr.splitlines() if line.startswith("VmPeak:")]
    return done, int(peak[-1].split()[1])


def _files(folder: Path) -> dict[str, bytes]:
    """A build's files by path (not its marker, nor what a build in progress staged)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}


def _limited(kb: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (kb * 1024, kb * 1024))
    return limit


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux's /proc/self/status (VmPeak)")
def test_a_build_past_ulimit_v_is_out_of_memory_and_the_previous_build_stays(tmp_path, sample_dir):
    """Three limits on the address space (ulimit -v) between what badpoints takes to start and what the build takes:
    each build ends with exit 2 'cannot run: out of memory' (or, where the limit was enough after all, builds),
    never exit 1, a traceback or an internal error, and the build OUT held before is still there, whole. A C++
    library that aborts (Arrow's thread pool when a thread cannot start) ends the process by SIGABRT, or by SIGSEGV
    (one that writes through an allocation that failed), which badpoints cannot catch: the previous build is whole
    then too."""
    out = tmp_path / "out"
    built, build_kb = _peak_kb("pipeline.cli", "build", str(sample_dir), "--out", str(out), "--no-cache", "-q")
    assert built.returncode == 0, built.stderr[-3000:]
    started, start_kb = _peak_kb("pipeline.cli", "checks")
    assert started.returncode == 0 and start_kb < build_kb, started.stderr[-3000:]
    before = _files(out)
    ended = []
    for k in (1, 2, 3):
        kb = start_kb + (build_kb - start_kb) * k // 4
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "build", str(sample_dir), "--out", str(out),
                               "--no-cache", "-q"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_limited(kb))
        said = " ".join(done.stderr.split())
        where = f"under ulimit -v {kb} (exit {done.returncode}): {done.stderr[-3000:]}"
        assert done.returncode in (0, 2, -signal.SIGABRT, -signal.SIGSEGV, ABORTED), where
        assert "Traceback" not in done.stderr and "internal error" not in said, where
        if done.returncode == 2:
            assert said.startswith("badpoints: cannot run: out of memory") and "more memory" in said, where
        if done.returncode != 0:
            assert _files(out) == before, f"the previous build changed {where}"
        ended.append(done.returncode)
    assert 2 in ended, ended  # the limits are tight enough that memory ran out at least once
