"""bench/steps.py: a step's time and memory (its whole process tree), badpoints' exits, the data prepared."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from bench.run import data_name
from bench.steps import BenchError, badpoints_step, measure, prepare_data
from bench.synth import LAYOUTS
from bench.synth.shape import SHAPES


def test_data_of_another_layout_is_generated_anew(tmp_path):
    data = tmp_path / "data"
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.exit_code == 0 and info["layout"] == "mimic4" and (data / "hosp" / "labevents.csv.gz").is_file()
    step, _ = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.skipped.startswith("reused")
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic3")
    assert step.exit_code == 0 and info["layout"] == "mimic3" and (data / "LABEVENTS.csv").is_file()


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
    step = badpoints_step("validate", ["validate", str(broken)], tmp_path, cache=tmp_path / "cache",
                           fresh_cache=True)
    assert step.exit_code == 1 and step.result["status"] == "errors"

    with pytest.raises(BenchError, match=r"could not run \(exit 2\)"):
        badpoints_step("validate", ["validate", str(tmp_path / "missing")], tmp_path, cache=tmp_path / "cache",
                        fresh_cache=True)


def test_data_of_another_shape_is_generated_anew(tmp_path):
    data = tmp_path / "data"
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.exit_code == 0 and info["shape"]["name"] == "default"
    step, info = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4", shape="heavy")
    assert step.exit_code == 0 and info["shape"]["name"] == "heavy"
    step, _ = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4", shape="heavy")
    assert step.skipped.startswith("reused")
    # A synth.json from before shapes is of the default shape.
    prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    info = json.loads((data / "synth.json").read_text())
    del info["shape"]
    (data / "synth.json").write_text(json.dumps(info))
    step, _ = prepare_data(data, rows=2000, seed=3, out=tmp_path, layout="mimic4")
    assert step.skipped.startswith("reused")


def test_each_kind_of_data_has_a_folder_of_its_own():
    names = {data_name(rows=1000, seed=1, layout=layout, shape=shape) for layout in LAYOUTS for shape in SHAPES}
    assert len(names) == len(LAYOUTS) * len(SHAPES)
    assert data_name(rows=1000, seed=1, layout="mimic3", shape="default") == "synth-rows1000-seed1"  # as before shapes
    assert data_name(rows=1000, seed=1, layout="mimic4", shape="default") == "synth-mimic4-rows1000-seed1"
    assert data_name(rows=1000, seed=1, layout="mimic4", shape="heavy") == "synth-mimic4-heavy-rows1000-seed1"
