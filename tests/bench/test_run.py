"""bench/run.py: every step measured in its own process, badpoints compared on the same data."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from pipeline import load_config, validate
from bench.run import (MIMIC3_SCALE, MIMIC4_SCALE, BenchError, StepResult, _badpoints_step, main, measure,
                       plain_pandas, plain_polars, prepare_data, targets)
from bench.synth import write_synthetic

MEASURED = ("floor", "baseline", "validate", "build", "validate_warm")
HAS_POLARS = importlib.util.find_spec("polars") is not None
needs_polars = pytest.mark.skipif(not HAS_POLARS, reason="polars is not installed (the optional extra 'bench')")


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
    assert list(steps) == ["generate", "floor", "baseline", "baseline_polars", "validate", "build", "validate_warm",
                           "dask"]
    for name in ("generate", *MEASURED):
        step = steps[name]
        assert step["seconds"] > 0 and step["cpu_seconds"] > 0 and step["peak_rss_mb"] > 10, step
        assert step["tree_peak_rss_mb"] >= step["peak_rss_mb"] and step["main_peak_rss_mb"] > 0, step
        assert step["exit_code"] == 0, step
        assert Path(step["log"]).is_file()
    if HAS_POLARS:
        assert steps["baseline_polars"]["exit_code"] == 0 and steps["baseline_polars"]["seconds"] > 0
    else:
        assert "polars is not installed" in steps["baseline_polars"]["skipped"]
        assert "baseline_polars skipped: polars is not installed" in printed
    assert steps["dask"]["skipped"] and steps["dask"]["seconds"] is None
    assert steps["floor"]["ratio_floor"] == 1.0 and steps["baseline"]["ratio_baseline"] == 1.0
    assert steps["build"]["result"]["graph_files"] > 0
    assert results["rows"] == 5000 and results["dataset"]["rows"] == 5000 and results["layout"] == "mimic3"
    assert {"cpu_count", "memory_gb", "python", "pandas", "pyarrow", "polars", "load_average"} <= set(
        results["machine"])
    assert set(results["git"]) == {"commit", "dirty"}
    assert [t["target"] for t in results["targets"]] == [
        "validate / baseline", "build / baseline", "validate peak RSS, GB", "build peak RSS, GB", "2nd validate / 1st"]
    assert all(isinstance(t["met"], bool) for t in results["targets"])
    validate_row = results["targets"][0]
    assert validate_row["measured"] == steps["validate"]["seconds"] and validate_row["baseline"] == steps["baseline"][
        "seconds"] and validate_row["scale"] == MIMIC3_SCALE
    assert "(c) validate, cache cold" in printed and "2nd validate / 1st" in printed
    assert "27.8M rows, MIMIC-III (run: 5k)" in printed  # the scale a target is meant for, beside this run's
    assert not list(out.glob("cache-*")) and not list(out.glob("build-*"))  # no copies of the data left


def test_baseline_keeps_exactly_badpoints_edges(bench):
    # The baseline drops what badpoints quarantines on valid data (outpatient rows, mixed items' text
    # rows, rows before the admission day or late) and keeps one row per (HADM_ID, timestep, ITEMID),
    # so the counts are equal, not merely close; split, codes and z-scores differ, counts do not.
    _, results, _ = bench
    edges = results["edges"]
    assert edges["baseline"] == edges["validate"] == edges["build"] > 0
    if HAS_POLARS:
        assert edges["baseline_polars"] == edges["baseline"]


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


def test_data_of_another_layout_is_generated_anew(tmp_path):
    data = tmp_path / "data"
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.exit_code == 0 and info["layout"] == "mimic4" and (data / "hosp" / "labevents.csv.gz").is_file()
    step, _ = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.skipped.startswith("reused")
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic3")
    assert step.exit_code == 0 and info["layout"] == "mimic3" and (data / "LABEVENTS.csv").is_file()


# -- the polars baseline does the pandas baseline's work ---------------------------------------------
@pytest.fixture(scope="module")
def small_sets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("baselines")
    write_synthetic(root / "mimic3", rows=50_000, seed=5)
    write_synthetic(root / "mimic4", rows=50_000, seed=5, layout="mimic4")
    return {"sample": Path(__file__).resolve().parents[2] / "data" / "sample", "mimic3": root / "mimic3",
            "mimic4": root / "mimic4"}


@needs_polars
@pytest.mark.parametrize("name", ["sample", "mimic3", "mimic4"])
def test_polars_baseline_gives_the_pandas_baselines_results(small_sets, name):
    # Same split (pandas' hash), so not only the counts but the codes, |z| and item indices agree.
    pandas_found, polars_found = plain_pandas(small_sets[name]), plain_polars(small_sets[name])
    assert polars_found.pop("z_abs_sum") == pytest.approx(pandas_found.pop("z_abs_sum"), rel=1e-9)
    assert polars_found == pandas_found and pandas_found["edges"] > 0 and pandas_found["coded"] > 0


def test_pandas_baseline_keeps_badpoints_edges_on_mimic4(small_sets):
    # Lower-case headers, outpatient rows and results only in comments: still exactly badpoints' kept rows.
    kept = validate(small_sets["mimic4"], load_config()).prepared.ledger()["kept"]
    found = plain_pandas(small_sets["mimic4"])
    assert found["edges"] == kept and found["read"] == 50_000 and found["admission_features"] == 7


# -- targets -------------------------------------------------------------------------------------
def _step(name: str, seconds: float, gb: float, *, client_gb: float | None = None, exit_code: int = 0) -> StepResult:
    return StepResult(name=name, what=name, seconds=seconds, cpu_seconds=seconds, peak_rss_mb=gb * 1000,
                      tree_peak_rss_mb=gb * 1000, main_peak_rss_mb=(client_gb or gb) * 1000,
                      children_peak_rss_mb=gb * 1000 - (client_gb or gb) * 1000, exit_code=exit_code)


def _steps(**changed: StepResult) -> dict[str, StepResult]:
    steps = {"floor": _step("floor", 10, 1), "baseline": _step("baseline", 50, 2),
             "baseline_polars": _step("baseline_polars", 20, 1.5), "validate": _step("validate", 40, 2.5),
             "build": _step("build", 70, 3.5), "validate_warm": _step("validate_warm", 2, 0.2)}
    return {**steps, **changed}


def test_targets_measured_limits_and_baselines_beside():
    rows = {row["target"]: row for row in targets(_steps(), rows=27_800_000)}
    assert rows["validate / baseline"]["value"] == pytest.approx(0.8) and rows["validate / baseline"]["met"]
    assert rows["validate / baseline"]["baseline_polars"] == 20
    assert rows["build / baseline"]["value"] == pytest.approx(1.4) and rows["build / baseline"]["met"] is False
    assert rows["build peak RSS, GB"]["value"] == pytest.approx(3.5) and rows["build peak RSS, GB"]["met"] is False
    assert rows["validate peak RSS, GB"]["met"] and rows["validate peak RSS, GB"]["baseline"] == pytest.approx(2)
    assert rows["2nd validate / 1st"]["value"] == pytest.approx(0.05) and rows["2nd validate / 1st"]["met"]
    assert not any(row["target"].startswith(("mimic4", "dask")) for row in rows.values())


def test_mimic4_targets_with_and_without_a_reference():
    steps = _steps(build=_step("build", 600, 3.9))
    found = {row["target"]: row for row in targets(steps, rows=118_000_000, layout="mimic4")}
    assert found["mimic4 build peak RSS, GB"]["met"] and found["mimic4 build peak RSS, GB"]["scale"] == MIMIC4_SCALE
    per_row = found["mimic4 build s/row / reference"]
    assert per_row["value"] is None and per_row["met"] is None and "no reference" in per_row["note"]
    assert per_row["measured"] == pytest.approx(600 / 118_000_000 * 1e6)
    reference = {"rows": 27_800_000, "layout": "mimic3", "steps": [{"name": "build", "seconds": 139}]}
    per_row = next(row for row in targets(steps, rows=118_000_000, layout="mimic4", reference=reference)
                   if row["target"] == "mimic4 build s/row / reference")
    assert per_row["value"] == pytest.approx((600 / 118e6) / (139 / 27.8e6)) and per_row["met"]  # ~1.02
    crashed = targets(_steps(build=_step("build", 10, 1, exit_code=-9)), rows=118_000_000, layout="mimic4")
    assert [row["met"] for row in crashed if row["target"].startswith("mimic4")] == [False, False]
    assert "did not complete (exit -9)" in crashed[-1]["note"]


def test_dask_target_is_the_clients_rss_apart_from_the_workers():
    steps = _steps(dask=_step("dask", 300, 9.0, client_gb=1.2))
    (row,) = [row for row in targets(steps, rows=1000, dask=True) if row["target"].startswith("dask")]
    assert row["value"] == pytest.approx(1.2) and row["met"] and "7.80 GB summed" in row["note"]


def test_rss_of_the_whole_process_tree_is_measured(tmp_path):
    # A parent that starts a child holding ~200 MB: ru_maxrss sees one process, the tree sees both.
    child = "import time; block = bytearray(200_000_000); block[::4096] = b'x' * len(block[::4096]); time.sleep(1.5)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    step = measure("floor", [sys.executable, "-c", parent], log=tmp_path / "log")
    assert step.exit_code == 0 and step.rss_samples >= 5
    assert step.children_peak_rss_mb > 190 and step.main_peak_rss_mb < 100
    assert step.tree_peak_rss_mb >= step.children_peak_rss_mb + step.main_peak_rss_mb * 0.9


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
