"""Crash safety: ``badpoints build`` killed with SIGKILL at random moments never leaves a torn file.

After every kill, each final file (not ``*.tmp``) in OUT loads or is absent, and a manifest, when there is
one, matches every file it lists. The previous build stays committed unless the kill landed in the switch
(the renames after staging). Kills go into the same folder each time; a last full build must succeed and
``inspect`` must pass.

A build is ~5 s of imports and well under a second of work, of which writing takes ~10 ms, so random
delays over the whole run would almost never land in the write. Three kills hit the real console script
across its measured duration; the rest hit builds forked, already imported, from a server process
(the same ``pipeline.cli.main`` with the same argv), half at random moments of the build and half at
random moments of the write (started when the build creates its staging folder). Forked builds alternate
between two batch sizes, so that each one changes the graph files (and their number) on disk.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from tests.pipeline.allow_list import empty_allow_list
from pipeline.cli import app
from pipeline.output.write import MANIFEST, MARKER, PREVIOUS, STAGING, load_graphs, verify_outputs

ROOT = Path(__file__).resolve().parents[2]
BADPOINTS = Path(sys.executable).with_name("badpoints")
SEED = 20240611
CLI_KILLS = 3
BUILD_KILLS = 6
WRITE_KILLS = 8

# Imports once, then forks one build per line read (the --config to use); prints the child's pid, then its
# wait status.
SERVER = r"""
import os, sys
from pipeline.cli import main
out = sys.argv[1]
print("ready", flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        sys.argv = ["badpoints", "build", "data/sample", "--out", out, "--config", line.strip()]
        code = 3
        try:
            main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        finally:
            os._exit(code)
    print(pid, flush=True)
    print(os.waitpid(pid, 0)[1], flush=True)
"""


def check_consistent(out: Path) -> str:
    """Every final file loads; a manifest matches what it lists. Returns 'absent', 'uncommitted' or 'committed'."""
    if not out.exists():
        return "absent"
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if not path.is_file() or path.name.endswith(".tmp"):
            continue
        if name == MARKER:  # the lock: empty, or the pid of the build that held it last
            assert path.read_text(encoding="ascii").strip().isdigit() or path.stat().st_size == 0
        elif path.suffix == ".pt":
            with empty_allow_list():
                assert type(torch.load(path, weights_only=True)) is dict, name
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".parquet":
            pq.read_table(path)
        elif path.suffix == ".html":  # the report: whole or absent, never cut short
            assert path.read_text(encoding="utf-8").rstrip().endswith("</html>"), name
        else:
            pytest.fail(f"unexpected file {name}")
    if not (out / MANIFEST).exists():
        return "uncommitted"
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert verify_outputs(out, manifest) == []
    for split in ("train", "val", "test"):
        assert len(load_graphs(out, split)) == manifest["splits"][split]["graphs"]
    return "committed"


def _manifest_id(out: Path) -> tuple[int, int]:
    """Changes when a build commits (the manifest is renamed into place: a new inode)."""
    try:
        found = (out / MANIFEST).stat()
    except FileNotFoundError:
        return (-1, -1)
    return (found.st_ino, found.st_mtime_ns)


def _wait_until(condition, timeout: float = 60.0) -> float:
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout:
            pytest.fail("timed out waiting for the build")
        time.sleep(0.0002)
    return time.perf_counter()


class Server:
    def __init__(self, out: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(out)], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = False

    def start(self, config: Path) -> int:
        if not self.ready:
            assert self.proc.stdout.readline().strip() == "ready"
            self.ready = True
        self.proc.stdin.write(f"{config}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def wait(self) -> int:
        """The build's exit code; -9 when it was killed."""
        return os.waitstatus_to_exitcode(int(self.proc.stdout.readline()))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_kills_never_leave_a_torn_build(tmp_path):
    out = tmp_path / "out"
    rng = random.Random(SEED)
    states: list[tuple[str, float, int, str, bool]] = []  # (how, delay, exit code, state, in the switch)
    configs = {}
    for size in (128, 16):  # 1 or 6 training batches
        configs[size] = tmp_path / f"batch_{size}.toml"
        configs[size].write_text(f"[graph]\nbatch_size = {size}\n")

    def other_config() -> Path:
        """The batch size that is not on disk: the next build changes files."""
        try:
            on_disk = json.loads((out / MANIFEST).read_text(encoding="utf-8"))["config"]["graph"]["batch_size"]
        except FileNotFoundError:
            on_disk = 16
        return configs[128 if on_disk == 16 else 16]

    def outcome(how: str, delay: float, code: int) -> tuple[str, float, int, str, bool]:
        return how, delay, code, check_consistent(out), (out / STAGING / PREVIOUS).exists()

    # 1. one real build, timed
    started = time.perf_counter()
    done = subprocess.run([str(BADPOINTS), "build", "data/sample", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    duration = time.perf_counter() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert check_consistent(out) == "committed"

    server = Server(out)  # imports while the console-script kills run
    try:
        # 2. the real console script, killed at a random moment in each third of its duration
        for n in range(CLI_KILLS):
            delay = duration * (n + rng.random()) / CLI_KILLS
            proc = subprocess.Popen([str(BADPOINTS), "build", "data/sample", "--out", str(out)], cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            code = proc.wait(timeout=60)
            states.append(outcome("cli", delay, code))

        # 3. one forked build, unkilled: how long the work and the write take
        before = _manifest_id(out)
        started = time.perf_counter()
        server.start(other_config())
        touched = _wait_until(lambda: (out / STAGING).exists() or _manifest_id(out) != before)
        committed = _wait_until(lambda: _manifest_id(out) != before)
        assert server.wait() == 0
        work, write = committed - started, committed - touched
        assert check_consistent(out) == "committed"

        # 4. forked builds killed at random moments of the work, then of the write
        for n in range(BUILD_KILLS + WRITE_KILLS):
            before = _manifest_id(out)
            pid = server.start(other_config())
            if n < BUILD_KILLS:
                how, delay = "build", work * (n + rng.random()) / BUILD_KILLS
            else:
                how, delay = "write", write * rng.random()
                _wait_until(lambda: (out / STAGING).exists() or _manifest_id(out) != before)
            time.sleep(delay)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it finished and was reaped first
                pass
            states.append(outcome(how, delay, server.wait()))

        # 5. a full build over whatever the kills left, then inspect
        server.start(other_config())
        assert server.wait() == 0
    finally:
        server.close()
    assert check_consistent(out) == "committed"
    assert not list(out.rglob("*.tmp")) and not (out / STAGING).exists()
    result = CliRunner().invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output

    killed = [s for s in states if s[2] == -signal.SIGKILL]
    assert len(killed) >= CLI_KILLS + BUILD_KILLS, states
    # A build killed while staging leaves the previous build committed; only the switch (renames) uncommits.
    assert all(state == "committed" or switching for _, _, _, state, switching in states), states
    # The kills did land inside writes (killed after the staging folder appeared, before the build ended).
    assert any(code == -signal.SIGKILL for how, _, code, _, _ in states if how == "write"), states
