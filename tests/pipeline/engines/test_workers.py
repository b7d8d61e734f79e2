"""pipeline/engines/workers.py: a parts engine's worker processes run torch on one thread each, keep the memory a
part frees through a pass and all give it back after."""

from __future__ import annotations

import pytest

from pipeline.engines.parts import PartsEngine


def _keeps_freed_memory(_: int) -> bool:
    """In a worker: whether it keeps what a part freed (Arrow's pool is not emptied between parts)."""
    from pipeline.engines import workers

    return workers._GIVE_BACK_BARRIER is not None


def _give_back_barrier(_: int) -> tuple[bool, int]:
    """In a worker: whether the workers' give-back barrier broke (one worker never came), and who waits at it."""
    from pipeline.engines import workers

    return workers._GIVE_BACK_BARRIER.broken, workers._GIVE_BACK_BARRIER.n_waiting


def _torch_threads(_: int) -> tuple[str | None, int]:
    """In a worker: OMP_NUM_THREADS, and the threads torch's loops run on once it is imported there."""
    import os

    import torch

    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def test_workers_run_torch_on_one_thread_each(tmp_path):
    """Two workers on two cores: each runs torch's loops on one thread (with two each, OpenMP's threads spun against
    each other and the graphs took 3.5 times as long); this process keeps its own."""
    import os

    here = os.environ.get("OMP_NUM_THREADS")
    engine = PartsEngine(tmp_path, workers=2)
    try:
        assert set(engine._map(_torch_threads, range(4))) == {("1", 1)}
    finally:
        engine.close()
    assert os.environ.get("OMP_NUM_THREADS") == here


def test_workers_keep_freed_memory_during_a_pass_and_all_give_it_back_after(tmp_path):
    """A worker keeps the memory a part frees for its next part; when a pass's results are all read, each of the
    two workers gives it back once (they meet at a barrier, so neither takes both tasks and none waits alone)."""
    engine = PartsEngine(tmp_path, workers=2)
    try:
        assert all(engine._map(_keeps_freed_memory, range(8)))
        for _ in range(2):  # the pass after also ended with both workers at the barrier
            assert set(engine._map(_give_back_barrier, range(4))) == {(False, 0)}
    finally:
        engine.close()
    from pipeline.engines import workers as here

    assert here._GIVE_BACK_BARRIER is None  # this process empties Arrow's pool before each part, as before


def _badpoints_build(tmp_path, data):
    import subprocess
    import sys

    out = tmp_path / "out"
    return subprocess.Popen([sys.executable, "-m", "pipeline.cli", "build", str(data), "--out", str(out), "--engine",
                             "parts", "--workers", "2", "--partitions", "8", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _workers_of(process, timeout: float = 120.0) -> list:
    """The build's worker processes, once it has started them. A build that ends before it starts them failed
    early (its data are large enough to need them): that fails the test, with what the build said."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        children = [c for c in psutil.Process(process.pid).children(recursive=True)
                    if "multiprocessing" in " ".join(c.cmdline())]
        if len(children) >= 2:
            return children
        time.sleep(0.05)
    out, err = process.communicate(timeout=60) if process.poll() is not None else ("", "")
    pytest.fail(f"the build ended (exit {process.returncode}) before it started its workers: {err[-2000:]}")


def test_a_build_killed_9_leaves_no_worker_behind(tmp_path, synthetic):
    """kill -9 of a parts build (the system's out-of-memory kill) left its spawn workers alive with parent pid 1,
    holding their memory; each now ends within a second of its parent."""
    import signal
    import time

    import psutil

    process = _badpoints_build(tmp_path, synthetic)
    workers = _workers_of(process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    gone, alive = psutil.wait_procs([w for w in workers if w.is_running()], timeout=10)
    assert not [w.pid for w in alive if w.status() != psutil.STATUS_ZOMBIE]
    time.sleep(0.1)


def test_ctrl_c_ends_a_parts_build_without_a_traceback(tmp_path, synthetic):
    """SIGINT to the process group (Ctrl-C) while the workers run: exit 130, and no worker's KeyboardInterrupt
    traceback on stderr."""
    import os
    import signal

    process = _badpoints_build(tmp_path, synthetic)
    _workers_of(process)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err
