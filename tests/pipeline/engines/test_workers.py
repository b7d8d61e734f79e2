"""pipeline/engines/workers.py: a parts engine's worker processes run torch on one thread each, keep the memory a
part frees through a pass and all give it back after."""

from __future__ import annotations

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
    from tests.processes import badpoints

    return badpoints("build", str(data), "--out", str(tmp_path / "out"), "--engine", "parts", "--workers", "2",
                     "--partitions", "8", "--no-cache")


def test_a_build_killed_9_leaves_no_worker_behind(tmp_path, synthetic):
    """kill -9 of a parts build (the system's out-of-memory kill) left its spawn workers alive with parent pid 1,
    holding their memory; each now ends within a second of its parent (once it has started), and the resource
    tracker with them."""
    from tests.processes import kill_9, left_running, started

    process = _badpoints_build(tmp_path, synthetic)
    under = started(process)
    kill_9(process)
    assert left_running(under) == []


def test_ctrl_c_ends_a_parts_build_without_a_traceback(tmp_path, synthetic):
    """SIGINT to the process group (Ctrl-C) while the workers run: exit 130, and no worker's KeyboardInterrupt
    traceback on stderr."""
    from tests.processes import ctrl_c, started

    process = _badpoints_build(tmp_path, synthetic)
    started(process)
    out, err = ctrl_c(process)
    assert process.returncode == 130, err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err
