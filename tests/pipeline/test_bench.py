"""pipeline/bench.py: every step measured in its own process, badpoints compared on the same data."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from pipeline import load_config, validate
from pipeline.bench import BenchError, _badpoints_step, main, plain_pandas, prepare_data

MEASURED = ("floor", "baseline", "validate", "build", "validate_warm")


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["--rows", "5000", "--out", str(out)]) == 0
    return out, json.loads((out / "bench.json").read_text()), printed.getvalue()


def test_every_step_measured(bench):
    out, results, printed = bench
    steps = {step["name"]: step for step in results["steps"]}
    assert list(steps) == ["generate", *MEASURED, "dask"]
    for name in ("generate", *MEASURED):
        step = steps[name]
        assert step["seconds"] > 0 and step["cpu_seconds"] > 0 and step["peak_rss_mb"] > 10, step
        assert step["exit_code"] == 0, step
        assert Path(step["log"]).is_file()
    assert steps["dask"]["skipped"] and steps["dask"]["seconds"] is None
    assert steps["floor"]["ratio_floor"] == 1.0 and steps["baseline"]["ratio_baseline"] == 1.0
    assert steps["build"]["result"]["graph_files"] > 0
    assert results["rows"] == 5000 and results["dataset"]["rows"] == 5000
    assert {"cpu_count", "memory_gb", "python", "pandas", "pyarrow", "load_average"} <= set(results["machine"])
    assert set(results["git"]) == {"commit", "dirty"}
    assert [t["target"] for t in results["targets"]] == [
        "validate / baseline", "build / baseline", "build / floor", "peak RSS of badpoints, GB",
        "warm / cold validate"]
    assert all(isinstance(t["met"], bool) for t in results["targets"])
    assert "(c) validate, cache cold" in printed and "warm / cold validate" in printed
    assert not list(out.glob("cache-*")) and not list(out.glob("build-*"))  # no copies of the data left


def test_baseline_keeps_exactly_badpoints_edges(bench):
    # The baseline drops what badpoints quarantines on valid data (outpatient rows, mixed items' text
    # rows, rows before the admission day or late) and keeps one row per (HADM_ID, timestep, ITEMID),
    # so the counts are equal, not merely close; split, codes and z-scores differ, counts do not.
    _, results, _ = bench
    edges = results["edges"]
    assert edges["baseline"] == edges["validate"] == edges["build"] > 0


def test_baseline_matches_badpoints_on_the_sample(sample_dir):
    kept = validate(sample_dir, load_config()).prepared.ledger()["kept"]
    found = plain_pandas(sample_dir)
    assert found["edges"] == kept and found["read"] == 13041 and found["finite"]


def test_data_is_reused_and_foreign_tables_are_left_alone(bench, sample_dir, tmp_path):
    out, results, _ = bench
    step, info = prepare_data(Path(results["data"]), rows=5000, seed=results["seed"], out=tmp_path)
    assert step.skipped.startswith("reused") and info["rows"] == 5000
    step, info = prepare_data(sample_dir, rows=5000, seed=1, out=tmp_path)
    assert step.skipped.startswith("given tables") and not (sample_dir / "synth.json").exists()


def test_data_errors_are_recorded_cannot_run_fails(sample_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(sample_dir, broken, ignore=shutil.ignore_patterns("*.py"))
    lines = (broken / "LABEVENTS.csv").read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[6] = "inf"  # VALUENUM
    lines[1] = ",".join(fields)
    (broken / "LABEVENTS.csv").write_text("".join(lines))
    step = _badpoints_step("validate", ["validate", str(broken)], tmp_path, cache=tmp_path / "cache",
                           fresh_cache=True)
    assert step.exit_code == 1 and step.result["status"] == "errors"

    with pytest.raises(BenchError, match=r"could not run \(exit 2\)"):
        _badpoints_step("validate", ["validate", str(tmp_path / "missing")], tmp_path, cache=tmp_path / "cache",
                        fresh_cache=True)
