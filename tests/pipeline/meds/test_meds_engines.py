"""``badpoints validate`` of a MEDS folder with ``--engine parts`` or ``--engine dask``: the shards are read where
the engine works (its worker processes; a real two-worker Dask LocalCluster on loopback), through
:meth:`pipeline.engines.base.Engine.each`, and the report is the one read in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.meds import PLANTED_CASES, write_meds

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("meds-engines") / "planted"
    write_meds(root, PLANTED_CASES)
    return root


def _findings(root, tmp_path, *options):
    report = tmp_path / f"report{len(options)}.json"
    result = runner.invoke(app, ["validate", str(root), "-q", "--json", str(report), *options])
    assert result.exit_code == 1, result.output  # the fixture's planted errors
    return [(f["check"], f["count"], f["message"], f.get("items")) for f in json.loads(report.read_text())["findings"]]


@pytest.mark.parametrize("engine", ["parts", "dask"])
def test_an_engine_reads_the_shards_and_finds_what_this_process_finds(planted, tmp_path, engine):
    here = _findings(planted, tmp_path)
    there = _findings(planted, tmp_path, "--engine", engine, "--workers", "2")
    assert there == here and {"meds_z_non_finite", "meds_subject_order"} <= {f[0] for f in here}


def test_the_pandas_engine_reads_every_shard_in_this_process(planted, monkeypatch):
    """``--engine pandas`` means this process: every shard's partial is read here, none in a worker."""
    from pipeline.config import load_config
    from pipeline.engines import PANDAS
    from pipeline.meds import stage, validate_meds

    seen: list[int] = []
    read = stage.read_shard

    def counted(*args, **kwargs):
        seen.append(os.getpid())
        return read(*args, **kwargs)

    monkeypatch.setattr(stage, "read_shard", counted)
    run = validate_meds(planted, load_config(), engine=PANDAS)
    assert seen == [os.getpid()] * len(run.report.inputs) and len(seen) > 1


def test_pandera_switched_off_refuses_a_meds_run(planted):
    """As a lab run does: with pandera's validation off no check would run, so the MEDS run does not start."""
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(planted)], capture_output=True,
                          text=True, env={**os.environ, "PANDERA_VALIDATION_ENABLED": "False"}, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "PANDERA_VALIDATION_ENABLED" in done.stderr and "status:" not in done.stdout


# -- the processes a MEDS run starts ---------------------------------------------------------------------------------
BUSY_DRAWS = 2000  # lab draws a subject: 360k events in four shards, seconds of work for two workers


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """A MEDS dataset that keeps two workers busy while they are killed or interrupted."""
    root = tmp_path_factory.mktemp("meds-busy") / "busy"
    write_meds(root, draws=BUSY_DRAWS)
    return root


ENGINES = ["auto", "dask"]  # auto: on a dataset it weighs as large, the parts engine


@pytest.mark.parametrize("engine", ENGINES)
def test_a_meds_run_killed_9_leaves_no_process_behind(busy, engine):
    """kill -9 of a MEDS validate while its workers run (the system's out-of-memory kill): its shard workers and the
    resource tracker were left running, owned by init, holding their memory. Now each worker ends within seconds of
    the run: the parts engine's by their watchdog, a LocalCluster's as their nanny's pipe closes; the resource tracker
    once they have."""
    from tests.processes import badpoints, kill_9, left_running, started

    run = badpoints("validate", str(busy), "-q", "--engine", engine, "--workers", "2", large=True)
    under = started(run)
    kill_9(run)
    assert left_running(under) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_ctrl_c_ends_a_meds_run_without_a_traceback(busy, engine):
    """Ctrl-C (SIGINT to the process group) while the workers read the shards: exit 130, no traceback and no worker's
    KeyboardInterrupt on stderr (each worker printed its own), and no process left running."""
    from tests.processes import badpoints, ctrl_c, left_running, started

    run = badpoints("validate", str(busy), "--engine", engine, "--workers", "2", large=True)
    under = started(run)
    out, err = ctrl_c(run)
    assert run.returncode == 130, err[-3000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err, err[-3000:]
    assert left_running(under) == []
