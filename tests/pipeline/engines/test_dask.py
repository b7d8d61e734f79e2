"""pipeline/engines/dask.py: on a real dask.distributed LocalCluster (the parts' files worked on by its workers),
LABEVENTS' stages from clean to dedup give the pandas engine's report, tables, quarantine, fitted state, edges and
graphs, with one part or many, on the sample, on generated MIMIC-III-shaped data and on broken data."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.engines.base import in_row_order
from pipeline.engines.dask import DaskEngine, dask_engine
from pipeline.engines.pandas import PANDAS
from pipeline.engines.stored import Stored
from pipeline.builds import build
from pipeline.flow import prepare, validate
from pipeline.ledgers import Prepared
from schemas.errors import StageError
from pipeline.output.write import load_graphs
from schemas.split import SPLITS
from tests.corpus import CASES, build as build_case
from tests.pipeline.engines.rows import edge_parts, output_files

pytest.importorskip("dask.distributed")

# Broken datasets whose bad rows fall in different slices: failures must combine, not shadow each other.
BROKEN = ("text_in_valuenum", "inf_valuenum", "duplicate_admission", "unknown_hadm_id", "two_digit_year",
          "all_null_valuenum_column", "every_lab_outpatient")


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes on loopback with bounded memory, as the CLI starts by default."""
    with dask_engine(workers=2, memory_limit="1GB") as engine:
        yield engine


@pytest.fixture(scope="module")
def synthetic_tables(synthetic):
    return validate(synthetic, load_config()).tables


def on(engine, partitions):
    """The cluster's engine cut into ``partitions`` parts (its parts folder and workers shared)."""
    return DaskEngine(engine.folder, engine.client, partitions=partitions)


def table_of(frame):
    """A table, or the parts the Dask engine keeps of one, read back in the table's row order."""
    return in_row_order(list(frame.read()), frame.order) if isinstance(frame, Stored) else frame


def edges_of(frame):
    """Edge rows, or the parts the Dask engine keeps of them, read in part order (the dedup stage's order)."""
    return pd.concat(list(frame.read())) if isinstance(frame, Stored) else frame


def assert_same_prepared(got: Prepared, expected: Prepared) -> None:
    """Identical rows, keys, timesteps, codes, quarantine, steps and findings; z within 1e-9 relative."""
    assert [f.as_json() for f in got.findings] == [f.as_json() for f in expected.findings]
    assert got.steps == expected.steps and got.stopped_at == expected.stopped_at and got.read == expected.read
    pd.testing.assert_frame_equal(got.quarantine.whole(), expected.quarantine.whole())
    assert got.fitted.get("encode") == expected.fitted.get("encode")
    if expected.fitted.get("fill") is None:
        assert got.fitted.get("fill") is None
    else:  # a train mean or median of z differs from pandas as z does, by rounding
        (columns, values), (wanted_columns, wanted) = (zip(*f.values_) for f in (got.fitted.get("fill"), expected.fitted.get("fill")))
        assert columns == wanted_columns
        np.testing.assert_allclose(values, wanted, rtol=1e-9, atol=1e-12)
    for name in ("admissions", "labitems", "splits"):
        if getattr(expected, name) is None:
            assert getattr(got, name) is None
        else:
            pd.testing.assert_frame_equal(getattr(got, name), getattr(expected, name))
    if expected.fitted.get("scale") is None:
        assert got.fitted.get("scale") is None
    else:
        fitted, wanted = got.fitted.get("scale").as_json(), expected.fitted.get("scale").as_json()
        for key in ("mean", "scale"):
            np.testing.assert_allclose(fitted.pop(key), wanted.pop(key), rtol=1e-9, atol=0)
        assert fitted == wanted  # items, counts, constant, fallback and log items exactly
    if expected.edges is None:
        assert got.edges is None
        return
    edges = edges_of(got.edges)
    pd.testing.assert_frame_equal(edges.drop(columns="Z"), expected.edges.drop(columns="Z"))
    np.testing.assert_allclose(edges["Z"], expected.edges["Z"], rtol=1e-9, atol=1e-12)


def _same_run(data_dir, engine, partitions):
    config = load_config()
    expected = validate(data_dir, config)
    got = validate(data_dir, config, engine=on(engine, partitions))

    assert got.report.as_json() == expected.report.as_json()
    for table in ("ADMISSIONS", "D_LABITEMS", "LABEVENTS"):
        pd.testing.assert_frame_equal(table_of(got.tables.of(table)), expected.tables.of(table))
    assert_same_prepared(got.prepared, expected.prepared)
    return got


@pytest.mark.parametrize("partitions", [1, 3, 8])
def test_the_sample_on_dask_matches_pandas(cluster, sample_dir, partitions):
    got = _same_run(sample_dir, cluster, partitions)
    assert got.report.attrition["LABEVENTS"]["read"] == 13041
    assert {50963, 51100} <= set(got.prepared.fitted.get("scale").fallback_items_)


@pytest.mark.parametrize("partitions", [1, 5])
def test_generated_data_on_dask_matches_pandas(cluster, synthetic, partitions):
    got = _same_run(synthetic, cluster, partitions)
    special = json.loads((synthetic / "synth.json").read_text())["special_items"]
    stats = got.prepared.fitted.get("scale").table()
    (ill,) = special["ill_conditioned"]
    assert ill not in got.prepared.fitted.get("scale").constant_items_ and 1e-4 < stats.loc[ill, "scale"] < 1e-2
    assert set(special["constant"]) <= set(got.prepared.fitted.get("scale").constant_items_)
    reasons = set(got.prepared.quarantine.whole()["REASON"])
    assert "charted before the admission day" in reasons
    assert got.prepared.ledger()["deduplicated"] > 0  # CHARTTIME ties were merged


@pytest.mark.parametrize("settings, stopped_at", [
    (dict(scale=dict(policy={50868: "log", 50912: "clip"}), fill=dict(Z=dict(policy="median", indicator=True)),
          bucket=dict(late_policy="clip", interval_hours=6.0)), None),
    (dict(fill=dict(Z=dict(policy="mean"), CODE=dict(policy="drop")), bucket=dict(max_timestep=3)), None),
    # ffill leaves the categorical rows with no earlier number in their admission: fill_left_nulls, in many parts
    (dict(fill=dict(Z=dict(policy="ffill"))), "fill"),
], ids=["log-median-clip", "mean-drop-short", "ffill-fails"])
def test_other_policies_on_dask_match_pandas(cluster, synthetic_tables, settings, stopped_at):
    config = _config(settings)
    expected = prepare(synthetic_tables, config)
    assert expected.stopped_at == stopped_at
    assert_same_prepared(prepare(synthetic_tables, config, engine=on(cluster, 4)), expected)


def test_a_stage_error_on_some_parts_is_the_whole_tables_error(cluster, synthetic_tables):
    """|z| above the error bound in several parts: one error counting them all, with the pandas engine's lines."""
    config = _config(dict(scale=dict(warn_bound=2.0, error_bound=4.0)))
    expected = prepare(synthetic_tables, config)
    got = prepare(synthetic_tables, config, engine=on(cluster, 6))
    assert expected.stopped_at == "scale" and expected.edges is None
    (error,) = [f for f in expected.findings if f.check == "z_error_bound"]
    assert error.count > 20 and len(error.lines) == 20
    assert_same_prepared(got, expected)


def test_an_empty_step_is_judged_on_the_sums_of_the_parts(cluster, synthetic_tables):
    """Every part's bucket step removes all its rows: one step_empty error for the whole table, as in pandas (no row
    kept from an ED stay at timestep 0 either: ed_hours 0)."""
    config = _config(dict(bucket=dict(max_timestep=0, interval_hours=1e-3, ed_hours=0.0)))
    expected = prepare(synthetic_tables, config)
    assert expected.stopped_at == "bucket"
    assert [f.check for f in expected.findings if f.severity == "error"] == ["step_empty"]
    assert_same_prepared(prepare(synthetic_tables, config, engine=on(cluster, 7)), expected)


@pytest.mark.parametrize("partitions", [1, 3, 9])
def test_build_on_dask_writes_the_same_graphs(cluster, synthetic, tmp_path, partitions):
    config = _config(dict(graph=dict(batch_size=8)))
    built = {name: build(synthetic, tmp_path / name, config, engine=engine)
             for name, engine in (("pandas", None), ("dask", on(cluster, partitions)))}
    assert built["dask"].exit_code == built["pandas"].exit_code == 0
    assert built["dask"].report.as_json() == built["pandas"].report.as_json()
    # byte for byte: graphs, stats.json, reports, manifest, quarantine and index
    assert output_files(tmp_path / "dask") == output_files(tmp_path / "pandas")
    assert built["dask"].graphs == built["pandas"].graphs and len(built["dask"].graphs) > 6
    for split in SPLITS:
        pandas_graphs, dask_graphs = (load_graphs(tmp_path / name, split) for name in ("pandas", "dask"))
        assert len(dask_graphs) == len(pandas_graphs) > 0
        for got, expected in zip(dask_graphs, pandas_graphs):
            assert got["admission"].node_id.equal(expected["admission"].node_id)
            assert got["admission"].hadm_id.equal(expected["admission"].hadm_id)
            assert got["labitem"].itemid.equal(expected["labitem"].itemid)
            for edge_type in expected.edge_types:
                assert got[edge_type].edge_index.equal(expected[edge_type].edge_index), (split, edge_type)
                assert got[edge_type].timestep.equal(expected[edge_type].timestep)
                assert got[edge_type].edge_attr_cat.equal(expected[edge_type].edge_attr_cat)
                assert got[edge_type].edge_attr.equal(expected[edge_type].edge_attr)


@pytest.mark.parametrize("name", [n for n in BROKEN if n in CASES])
def test_a_broken_dataset_gives_the_same_findings_on_dask(cluster, tmp_path, name):
    build_case(name, tmp_path)
    got = _same_run(tmp_path, cluster, partitions=5)
    assert got.report.status == "errors" or got.report.findings


# -- the pieces ------------------------------------------------------------------------------------------------
def _where_made(parts, *, batch_size, start=None):
    """A stand-in for made_graphs: which process saw which rows, numbered from ``start``."""
    import os

    rows = pd.concat(list(parts))
    yield os.getpid(), dict(start or {}), rows["HADM_ID"].tolist()


def test_pieces_of_batches_are_made_on_the_workers_that_see_the_folder(cluster, tmp_path):
    """The Dask engine makes each piece of whole batches on a worker, from the edge rows' parts; when the workers
    cannot see the folder the maker writes into, here from the same parts, as the parts engine does."""
    import os

    engine = on(cluster, None)
    parts = edge_parts(5, 6)
    edges = Stored(paths=tuple(engine._write(part) for part in parts), lengths=tuple(map(len, parts)), order=None,
                   columns=("SPLIT", "HADM_ID"))
    on_workers = list(engine.in_batches(_where_made, edges, batch_size=16, sees=tmp_path))
    here = list(engine.in_batches(_where_made, edges, batch_size=16, sees=tmp_path / "not there"))
    expected = pd.concat(parts)["HADM_ID"].tolist()
    assert [hadm for _, _, rows in on_workers for hadm in rows] == expected == here[0][2]
    assert len(on_workers) > 1 and os.getpid() not in {pid for pid, _, _ in on_workers}
    assert [pid for pid, _, _ in here] == [os.getpid()]
    assert on_workers[0][1] == {"train": 0} and all(
        n % 16 == 0 for _, start, _ in on_workers for n in start.values())


def _pid_and(value):
    import os

    return os.getpid(), value


def test_a_call_runs_on_a_worker_that_sees_the_folder(cluster, tmp_path):
    """What the client would rather not hold (quarantine.parquet's row groups) is made on a worker that sees the
    folder it writes into, else here; the pandas and parts engines make it here."""
    import os

    engine = on(cluster, None)
    worker, value = engine.call(_pid_and, "x", sees=tmp_path)
    assert value == "x" and worker != os.getpid()
    assert engine.call(_pid_and, "y", sees=tmp_path / "not there") == (os.getpid(), "y")
    assert PANDAS.call(_pid_and, "z", sees=tmp_path) == (os.getpid(), "z")


def _refusing(parts, *, batch_size, start=None):
    """A stand-in for made_graphs that finds an unknown item in the piece after the first."""
    rows = pd.concat(list(parts))
    if start and max(start.values()):
        raise StageError(stage="graph", side="input", check="graph_index_bounds", column="ITEMID", count=len(rows),
                         failure_cases=pd.DataFrame({"line": rows.index}), table="LABEVENTS", detail="not an item")
    yield len(rows)


def test_a_stage_error_in_a_piece_made_on_a_worker_is_raised_here(cluster, tmp_path):
    engine = on(cluster, None)
    parts = edge_parts(6, 5)
    edges = Stored(paths=tuple(engine._write(part) for part in parts), lengths=tuple(map(len, parts)), order=None,
                   columns=("SPLIT", "HADM_ID"))
    with pytest.raises(StageError, match="not an item") as raised:
        list(engine.in_batches(_refusing, edges, batch_size=16, sees=tmp_path))
    assert raised.value.check == "graph_index_bounds" and raised.value.count > 0


def test_the_dask_client_builds_without_torch(synthetic, tmp_path):
    """With the Dask engine the graphs are built on the workers: the client never imports torch (0.3 GB)."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from pathlib import Path\n"
              "from pipeline.config import load_config\n"
              "from pipeline.engines import dask_engine\n"
              "from pipeline.builds import build\n"
              "if __name__ == '__main__':\n"
              "    with dask_engine(workers=1, memory_limit='1GB', partitions=3) as engine:\n"
              "        built = build(Path(sys.argv[1]), Path(sys.argv[2]), load_config(), engine=engine)\n"
              "    print(built.exit_code, len(built.graphs), 'torch' in sys.modules, 'torch_geometric' in sys.modules)\n")
    (tmp_path / "client.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "client.py"), str(synthetic), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    code, graphs, torch_loaded, pyg_loaded = done.stdout.split()
    assert code == "0" and int(graphs) > 0 and (torch_loaded, pyg_loaded) == ("False", "False")
    assert len(list((tmp_path / "out" / "graphs").rglob("*.pt"))) == int(graphs)


# -- a worker lost during a build -----------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[3]


def _build_losing_workers(data: Path, out: Path, scratch: Path, *, at: tuple[str, ...],
                          lose: Callable[[subprocess.Popen, list[int]], None],
                          env: dict[str, str] | None = None) -> tuple[int | None, list[int], str]:
    """``badpoints build --engine dask --workers 2`` as a subprocess, ``lose(run, killed)`` called when its stderr
    shows the progress line of each step of ``at``. Its exit status (None: still running after 120 s, then killed),
    the pids killed, its stderr."""
    import psutil

    command = [sys.executable, "-m", "pipeline.cli", "build", str(data), "--out", str(out), "--engine", "dask",
               "--workers", "2", "--partitions", "3", "--no-cache"]
    with (out.parent / f"{out.name}.stdout").open("w") as stdout:
        run = subprocess.Popen(command, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(scratch), **(env or {})})
    lines: list[str] = []
    killed: list[int] = []

    def read() -> None:
        ahead = list(at)
        for line in run.stderr:
            lines.append(line)
            if ahead and line.startswith(f"badpoints: {ahead[0]} "):
                ahead.pop(0)
                lose(run, killed)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = run.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = None
        for process in psutil.Process(run.pid).children(recursive=True):
            process.kill()
        run.kill()
        run.wait()
    reader.join(timeout=10)
    return code, killed, "".join(lines)


def _workers(run: subprocess.Popen) -> list:
    """The worker processes of the ``LocalCluster`` a CLI run started (its nannies run in the run's process)."""
    import psutil

    found = []
    for process in psutil.Process(run.pid).children():
        try:
            if "multiprocessing.spawn" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            pass  # gone meanwhile
    return found


def _stop_then_kill_one(run: subprocess.Popen, killed: list[int]) -> None:
    """One worker stopped (SIGSTOP: whatever the run sends it stays in flight), then killed 2 s later (SIGKILL)."""
    worker = _workers(run)[0]
    worker.send_signal(signal.SIGSTOP)
    time.sleep(2)
    worker.send_signal(signal.SIGKILL)
    killed.append(worker.pid)


def _kill_the_run(run: subprocess.Popen, killed: list[int]) -> None:
    """The run itself killed (SIGKILL), as the system kills a run out of memory; its workers then end too."""
    import psutil

    workers = _workers(run)
    run.kill()
    killed.append(run.pid)
    psutil.wait_procs(workers, timeout=30)


def _dask_scratch(folder: Path) -> list[str]:
    """What a run's Dask cluster or parts left in ``folder`` (TMPDIR)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("dask-scratch-space", "badpoints-parts-")))


def _kill_every_worker(run: subprocess.Popen, killed: list[int]) -> None:
    """Every worker, and each one started in its place, killed as soon as it is seen, until the run ends."""
    import psutil

    def keep_killing() -> None:
        while run.poll() is None:
            for worker in _workers(run):
                try:
                    worker.kill()
                    killed.append(worker.pid)
                except psutil.Error:
                    pass
            time.sleep(0.1)

    threading.Thread(target=keep_killing, daemon=True).start()


def test_a_worker_killed_during_a_build_is_replaced_and_the_build_writes_the_same_files(synthetic, tmp_path):
    """A worker of the CLI's LocalCluster killed after the relations step (as reported: the build hung, the
    scheduler copying a broadcast frame to the dead worker every 30 s) and again before the report: its tasks run
    again on the other worker, and the build writes what a run without the kill writes."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code, killed, stderr = _build_losing_workers(synthetic, tmp_path / "dask", scratch, at=("relations", "guard"),
                                                 lose=_stop_then_kill_one)

    assert code is not None, f"the build hung after a worker was killed:\n{stderr[-3000:]}"
    assert code == 0, stderr[-3000:]
    assert len(killed) == 2 and "cannot run" not in stderr and "internal error" not in stderr
    assert build(synthetic, tmp_path / "pandas", load_config()).exit_code == 0
    assert output_files(tmp_path / "dask") == output_files(tmp_path / "pandas")
    assert _dask_scratch(scratch) == []  # the workers' folders, the killed one's too, went with the parts folder


def test_a_killed_runs_dask_scratch_is_in_its_parts_folder_which_the_next_run_removes(synthetic, tmp_path):
    """The scheduler's and workers' folders (Dask's dask-scratch-space) are in the run's parts folder, not in TMPDIR:
    a run killed before it could remove them leaves no dask-scratch-space beside it, and the next run removes its
    parts folder, the workers' folders with it."""
    from pipeline.engines.parts import PARTS_PREFIX

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code, killed, stderr = _build_losing_workers(synthetic, tmp_path / "dask", scratch, at=("relations",),
                                                 lose=_kill_the_run)
    assert code == -signal.SIGKILL and len(killed) == 1, stderr[-3000:]
    (left,) = _dask_scratch(scratch)
    assert left.startswith(PARTS_PREFIX) and any((scratch / left / "dask-scratch-space").glob("worker-*"))

    after = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(synthetic), "--engine", "parts",
                            "--no-cache", "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TMPDIR": str(scratch)})
    assert after.returncode == 0, after.stderr[-3000:]
    assert _dask_scratch(scratch) == []


def _no_workers_timeout(dask_scheduler) -> float | None:
    return dask_scheduler.no_workers_timeout


def test_the_local_clusters_tasks_fail_after_a_minute_without_a_worker(cluster):
    """Not the scheduler's default (wait for a worker forever): a LocalCluster whose workers are all lost and not
    started again ends the run."""
    assert cluster.client.run_on_scheduler(_no_workers_timeout) == 60


def test_a_cluster_that_loses_every_worker_ends_the_build_with_exit_2_naming_it(synthetic, tmp_path):
    """Every worker killed after the relations step, and each one its nanny starts again: once no worker has run for
    the no-workers timeout (here 3 s, not the 60 s the run sets), the build ends with exit 2 naming what failed, not
    a hang."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    started = time.monotonic()
    code, killed, stderr = _build_losing_workers(
        synthetic, tmp_path / "dask", scratch, at=("relations",), lose=_kill_every_worker,
        env={"DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "3s"})

    assert code is not None, f"the build hung with no worker left:\n{stderr[-3000:]}"
    assert code == 2 and len(killed) >= 2 and time.monotonic() - started < 90, stderr[-3000:]
    (said,) = [line for line in stderr.splitlines() if line.startswith("badpoints: cannot run:")]
    assert "the Dask cluster failed (NoWorkerError: " in said or "the Dask cluster failed (KilledWorker: " in said
    assert "without any running workers" in said or "The last worker that attempt to run the task was tcp://" in said
    assert not (tmp_path / "dask" / "manifest.json").exists() and _dask_scratch(scratch) == []


def _config(changes: dict):
    """The default config with some sections' fields replaced (``fill`` maps a column to its new policy)."""
    from pipeline.stages.fill import FillPolicy

    config = load_config()
    replaced = {}
    for section, values in changes.items():
        if section == "fill":
            replaced["fill"] = {**config.fill, **{c: FillPolicy(**v) for c, v in values.items()}}
        else:
            replaced[section] = dataclasses.replace(getattr(config, section), **values)
    return dataclasses.replace(config, **replaced)


CLUSTER_LOGS = r"""
import logging, sys, time
import dask
import distributed  # its config first: a dask.config.set of one of its keys before it would drop it all on exit
from pipeline.engines.dask import dask_engine

spills = {"distributed.worker.memory.spill": 0.01, "distributed.worker.memory.target": 0.01}  # a worker warns at once
for logs in ("warning", "error"):
    print(f"== logs={logs}", file=sys.stderr, flush=True)
    with dask.config.set(spills), dask_engine(workers=1, logs=logs):
        logging.getLogger("distributed.nanny").warning("a nanny's warning")
        logging.getLogger("distributed.nanny").error("a nanny's error")
        time.sleep(3)  # the worker's memory monitor warns within a second of its start
"""


def test_a_local_clusters_warnings_reach_stderr_unless_it_logs_errors_only():
    """-q (``logs="error"``): the nannies' warnings (in this process) and the workers' (their memory monitor's, in
    their processes) no longer reach stderr, and neither does any Dask logs at info; their errors still do. Without
    it, both warn as Dask does."""
    done = subprocess.run([sys.executable, "-c", CLUSTER_LOGS], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    warned, quiet = done.stderr.split("== logs=error")
    assert "a nanny's warning" in warned and "Unmanaged memory use is high" in warned, warned
    (logged,) = [line for line in quiet.splitlines() if line.strip()]  # one line: the error
    assert logged.endswith("distributed.nanny - ERROR - a nanny's error"), quiet
