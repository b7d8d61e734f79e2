"""pipeline/output/paths.py: a build holds its output folder (writable, locked) for its whole run.

Concurrency is made deterministic: the lock is held by the test, or by a real build stopped with SIGSTOP
once it has recorded its pid in the marker; nothing waits on a sleep.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from typer.testing import CliRunner

from tests.mounts import mounted
from pipeline import flow
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.builds import build
from pipeline.output.paths import MARKER, OutputError, claim_output_dir

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"
BADPOINTS = Path(sys.executable).with_name("badpoints")
runner = CliRunner()


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture
def no_work(monkeypatch):
    """Any stage running is a failure: the folder must be refused before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("the build started its work")

    monkeypatch.setattr(flow, "validate", refuse)


# -- the lock -----------------------------------------------------------------------------------------------
def test_a_held_folder_is_refused_at_once_with_the_holders_pid(tmp_path, no_work):
    out, holder = tmp_path / "out", os.getpid()
    out.mkdir()
    (out / MARKER).write_text(f"{holder}\n")
    with FileLock(out / MARKER):
        with pytest.raises(OutputError, match=rf"another badpoints build \(pid {holder}\) is writing"):
            build(SAMPLE, out, load_config())
        result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"])
    assert result.exit_code == 2, result.output
    assert "cannot run" in result.output and f"pid {holder}" in result.output and "Traceback" not in result.output
    assert _files(out) == {MARKER: f"{holder}\n".encode()}  # the refused build wrote nothing, not even its pid


def test_the_lock_is_released_after_a_build_and_after_a_failure(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), claim_output_dir(out):
        assert (out / MARKER).read_text() == f"{os.getpid()}\n"
        raise RuntimeError("boom")
    with FileLock(out / MARKER, blocking=False):  # free again
        pass
    assert build(SAMPLE, out, load_config()).exit_code == 0
    with FileLock(out / MARKER, blocking=False):
        pass


def test_the_marker_survives_rebuilds_and_is_not_in_the_manifest(tmp_path):
    out = tmp_path / "out"
    for _ in range(2):
        assert build(SAMPLE, out, load_config()).exit_code == 0
        assert (out / MARKER).is_file()
        assert MARKER not in json.loads((out / "manifest.json").read_text())["outputs"]
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _holds(out: Path, pid: int) -> bool:
    try:
        return (out / MARKER).read_text() == f"{pid}\n"
    except FileNotFoundError:
        return False


def test_a_second_build_is_refused_while_a_paused_build_holds_the_folder(tmp_path):
    """As reported: build A is stopped mid-run; build B into the same folder must not interleave."""
    out = tmp_path / "out"
    first = subprocess.Popen([str(BADPOINTS), "build", "data/sample", "--out", str(out), "--no-cache", "-q"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: _holds(out, first.pid) or first.poll() is not None, "the first build to hold the folder")
        first.send_signal(signal.SIGSTOP)
        assert _holds(out, first.pid), first.communicate()[0]  # it holds the lock, its work not yet written
        second = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"])
        assert second.exit_code == 2, second.output
        assert f"another badpoints build (pid {first.pid}) is writing" in second.output
        assert "cannot run" in second.output and "Traceback" not in second.output
    finally:
        first.send_signal(signal.SIGCONT)
        output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    assert "wrote 3 graphs" in output
    inspected = runner.invoke(app, ["inspect", str(out)])
    assert inspected.exit_code == 0, inspected.output


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open (its /proc fd table)."""
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it ended, or closed an fd meanwhile
        return False


def test_builds_started_together_each_name_the_holders_pid(tmp_path):
    """Builds started at once, while the holder has taken the lock and not yet recorded its pid (the moment a
    refused build used to read an empty marker): each refused build names the pid the holder then records."""
    out = tmp_path / "out"
    out.mkdir()
    marker = out.resolve() / MARKER
    holder = os.open(marker, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    builds = [subprocess.Popen([str(BADPOINTS), "build", "data/sample", "--out", str(out), "--no-cache", "-q"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(4)]
    seen: set[int] = set()

    def one_is_waiting() -> bool:  # seen holding the marker open twice in a row: refused, reading the holder's pid
        now = {b.pid for b in builds if _has_open(b.pid, marker)}
        waiting = bool(now & seen)
        seen.clear()
        seen.update(now)
        return waiting or all(b.poll() is not None for b in builds)

    try:
        _wait_for(one_is_waiting, "a refused build to read the marker")
        os.pwrite(holder, f"{os.getpid()}\n".encode(), 0)
        outputs = [b.communicate(timeout=120)[0] for b in builds]
    finally:
        for b in builds:
            if b.poll() is None:
                b.kill()
        os.close(holder)
    for b, output in zip(builds, outputs):
        assert b.returncode == 2, output
        assert f"another badpoints build (pid {os.getpid()}) is writing" in output, output
    assert _files(out) == {MARKER: f"{os.getpid()}\n".encode()}


@pytest.mark.parametrize("before", ["no folder", "an empty folder", "a build folder"])
def test_a_build_that_writes_nothing_leaves_the_folder_as_it_found_it(tmp_path, before):
    """A first build that fails (or finds errors) removes the marker it created, and the folder if it made it; a
    folder that held a build keeps its marker and files."""
    out = tmp_path / "out"
    if before != "no folder":
        out.mkdir()
    if before == "a build folder":
        (out / MARKER).write_text("4242\n")
        (out / "manifest.json").write_text("{}")
    found = _files(out) if out.exists() else None
    with pytest.raises(RuntimeError, match="boom"), claim_output_dir(out):
        assert (out / MARKER).read_text() == f"{os.getpid()}\n"
        raise RuntimeError("boom")
    if before == "a build folder":
        assert _files(out) == {**found, MARKER: f"{os.getpid()}\n".encode()}
    else:
        assert (_files(out) if out.exists() else None) == found


# -- a folder that cannot be written ------------------------------------------------------------------------
def test_an_output_under_a_file_is_refused_before_any_work(tmp_path, no_work):
    (tmp_path / "a file").write_text("not a folder")
    out = tmp_path / "a file" / "out"
    with pytest.raises(OutputError, match="is a file, not a folder"):
        build(SAMPLE, out, load_config())
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"])
    assert result.exit_code == 2
    assert "cannot run" in result.output and "a file" in result.output and "Traceback" not in result.output
    assert (tmp_path / "a file").read_text() == "not a folder"


def test_an_output_that_cannot_be_created_is_refused_before_any_work(no_work):
    out = Path("/proc/badpoints-out")
    with pytest.raises(OutputError, match="cannot write the output folder '/proc/badpoints-out'"):
        build(SAMPLE, out, load_config())
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"])
    assert result.exit_code == 2 and "No such file or directory" in result.output
    assert "internal error" not in result.output and "Traceback" not in result.output


def test_a_folder_whose_files_cannot_be_written_is_refused_before_any_work(tmp_path, no_work):
    """A folder that exists but takes no file (here a read-only bind mount; root ignores chmod)."""
    out = tmp_path / "ro"
    out.mkdir()
    with mounted(out, "--bind", "-o", "ro", str(out), what="a read-only bind mount"):
        result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"])
    assert result.exit_code == 2, result.output
    assert "cannot write the output folder" in result.output and "Read-only file system" in result.output
    assert not any(out.iterdir())
