"""A badpoints command run as a process group of its own, as a terminal runs it: its worker processes found once it
has started them, then the command killed (``kill -9``) or interrupted (Ctrl-C: SIGINT to the group), and what it
left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


# A terminal's command takes Ctrl-C: a pytest started in the background of a script (``make test &``) ignores
# SIGINT, and a process inherits that, so the command sets Python's own handler back before anything else.
CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); import sys; sys.argv[0] = 'badpoints'"
# ``badpoints`` for which every input is large: ``--engine auto`` works on parts whatever it weighs
LARGE = "from pipeline.engines import registry; registry.AUTO_PARTS_BYTES = 0"


def badpoints(*args: str, large: bool = False) -> subprocess.Popen:
    """``badpoints ARGS`` started in a session (a process group) of its own, taking Ctrl-C as in a terminal;
    ``large``: as if its input were large (``--engine auto`` chooses the parts engine)."""
    command = "; ".join([CTRL_C, *([LARGE] if large else []), "from pipeline.cli import main; main()"])
    return subprocess.Popen([sys.executable, "-c", command, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # ended meanwhile, or a zombie
        return ""


def started(process: subprocess.Popen, workers: int = 2, *, timeout: float = 120.0,
            settle: float = 1.0) -> list[psutil.Process]:
    """Every process the command runs under it once ``workers`` worker processes (spawned: the parts engine's, a
    LocalCluster's) have run for ``settle`` seconds: the workers, the resource tracker and whatever else. A command
    that ends before that fails the test, with what it said: its data are large enough to keep its workers busy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        found = [p for p in psutil.Process(process.pid).children(recursive=True)
                 if "spawn_main" in _command(p) and "resource_tracker" not in _command(p)]
        if len(found) >= workers:
            time.sleep(settle)
            if process.poll() is None:
                return psutil.Process(process.pid).children(recursive=True)
        time.sleep(0.05)
    if process.poll() is None:
        process.kill()
    out, err = process.communicate(timeout=60)
    pytest.fail(f"the command ended (exit {process.returncode}) before its workers had run {settle} s: {err[-2000:]}")


def left_running(processes: list[psutil.Process], timeout: float = 10.0) -> list[str]:
    """Those of ``processes`` still running ``timeout`` seconds from now (a zombie has ended), each as 'pid command';
    they are killed, so that a failing test leaves none behind either."""
    gone, alive = psutil.wait_procs([p for p in processes if p.is_running()], timeout=timeout)
    left = [f"{p.pid} {_command(p)[:120]}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    return left


def kill_9(process: subprocess.Popen) -> None:
    """The command killed (SIGKILL), not its group; its pipes are not read to their end (a process it left running
    holds them open)."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    for pipe in (process.stdout, process.stderr):
        pipe.close()


def ctrl_c(process: subprocess.Popen, timeout: float = 60.0) -> tuple[str, str]:
    """SIGINT to the command's process group, as Ctrl-C in a terminal sends it; what it printed until it ended."""
    os.killpg(process.pid, signal.SIGINT)
    return process.communicate(timeout=timeout)
