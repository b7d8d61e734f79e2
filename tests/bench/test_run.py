"""bench/run.py: every step measured in its own process, badpoints compared on the same data."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from bench.run import main
from bench.steps import prepare_data
from bench.targets import MIMIC3_SCALE

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ("floor", "baseline", "validate", "build", "validate_warm")
HAS_POLARS = importlib.util.find_spec("polars") is not None


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["--rows", "5000", "--out", str(out), "--shape", "default"]) == 0
    return out, json.loads((out / "bench.json").read_text()), printed.getvalue()


def test_every_step_measured(bench):
    out, results, printed = bench
    steps = {step["name"]: step for step in results["steps"]}
    assert list(steps) == ["generate", "floor", "baseline", "baseline_polars", "validate", "build", "build_task",
                           "validate_warm", "dask"]
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
    assert steps["build_task"]["exit_code"] in (0, 1) and steps["build_task"]["seconds"] > 0  # 1: few deaths
    assert "--task" in steps["build_task"]["command"]
    assert results["rows"] == 5000 and results["dataset"]["rows"] == 5000 and results["layout"] == "mimic3"
    assert {"cpu_count", "memory_gb", "python", "pandas", "pyarrow", "polars", "load_average"} <= set(
        results["machine"])
    assert set(results["git"]) == {"commit", "dirty"}
    assert [t["target"] for t in results["targets"]] == [
        "validate / baseline", "build / baseline", "validate peak RSS, GB", "build peak RSS, GB",
        "build --task / build", "build --task peak RSS / build's", "2nd validate / 1st"]
    assert all(isinstance(t["met"], bool) for t in results["targets"])
    validate_row = results["targets"][0]
    assert validate_row["measured"] == steps["validate"]["seconds"] and validate_row["baseline"] == steps["baseline"][
        "seconds"] and validate_row["scale"] == MIMIC3_SCALE
    assert "(c) validate, cache cold" in printed and "2nd validate / 1st" in printed
    assert "27.8M rows, MIMIC-III (run: 5k)" in printed  # the scale a target is meant for, beside this run's
    assert not list(out.glob("cache-*")) and not list(out.glob("build-*"))  # no copies of the data left


def test_one_shape_writes_bench_json_only_as_before(bench):
    # One --shape is the run as it was before several shapes: OUT/bench.json, no folder per shape, no shapes.json.
    out, results, printed = bench
    assert results["shape"] == "default" and Path(results["data"]).parent == out / "data"
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "data", "logs", "steps"]
    assert "memory by shape" not in printed and f"wrote {out / 'bench.json'}" in printed


def test_baseline_keeps_exactly_badpoints_edges(bench):
    # The baseline drops what badpoints quarantines on valid data (outpatient rows, mixed items' text
    # rows, rows before the admission day or late) and keeps one row per (HADM_ID, timestep, ITEMID),
    # so the counts are equal, not merely close; split, codes and z-scores differ, counts do not.
    _, results, _ = bench
    edges = results["edges"]
    assert edges["baseline"] == edges["validate"] == edges["build"] > 0
    if HAS_POLARS:
        assert edges["baseline_polars"] == edges["baseline"]


def test_data_is_reused_and_foreign_tables_are_left_alone(bench, sample_dir, tmp_path):
    out, results, _ = bench
    step, info = prepare_data(Path(results["data"]), rows=5000, seed=results["seed"], out=tmp_path)
    assert step.skipped.startswith("reused") and info["rows"] == 5000
    step, info = prepare_data(sample_dir, rows=5000, seed=1, out=tmp_path)
    assert step.skipped.startswith("given tables") and not (sample_dir / "synth.json").exists()


def test_the_installed_packages_never_import_bench():
    # bench/ is a folder of the checkout, not of the installed badpoints: pipeline/ and schemas/ cannot need it.
    found = []
    for path in sorted([*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "schemas").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for name in names if name.split(".")[0] == "bench"]
    assert found == []
