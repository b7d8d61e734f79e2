"""bench/shapes.py (and bench/run.py's --shape): several shapes in one run, each in OUT/<shape>/, their memory side
by side in a table and in OUT/shapes.json."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from bench.run import main
from bench.shapes import shape_figures
from bench.synth.shape import SHAPES


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench-shapes")
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["--rows", "5000", "--out", str(out)]) == 0  # no --shape: every preset
    return out, json.loads((out / "shapes.json").read_text()), printed.getvalue()


def test_every_shape_runs_into_a_folder_of_its_own(shapes_run):
    out, summary, _ = shapes_run
    assert list(SHAPES) == ["default", "heavy"] and list(summary["shapes"]) == ["default", "heavy"]
    assert not (out / "bench.json").exists()
    for shape, figures in summary["shapes"].items():
        results = json.loads((out / shape / "bench.json").read_text())
        assert results["shape"] == shape and results["rows"] == 5000 and results["dataset"]["shape"]["name"] == shape
        assert Path(figures["bench_json"]) == (out / shape / "bench.json").resolve()
        assert (out / shape / "logs" / "build.log").is_file()
        assert (out / shape / "steps" / "build.report.json").is_file()
        assert Path(results["data"]).parent == out / "data"  # where a one-shape run keeps it, so either reuses it


def test_shapes_json_holds_each_shapes_memory_and_ledger(shapes_run):
    out, summary, _ = shapes_run
    for shape, figures in summary["shapes"].items():
        results = json.loads((out / shape / "bench.json").read_text())
        build = next(step for step in results["steps"] if step["name"] == "build")
        assert figures["build"] == {"tree_peak_rss_mb": build["tree_peak_rss_mb"], "peak_rss_mb": build["peak_rss_mb"]}
        assert figures["build"]["tree_peak_rss_mb"] >= figures["build"]["peak_rss_mb"] > 10
        assert figures["validate"]["tree_peak_rss_mb"] >= figures["validate"]["peak_rss_mb"] > 10
        assert figures["dask"] == {"skipped": "not requested (--dask)"}
        ledger = figures["labevents"]  # as the build's report counts them
        assert ledger["read"] == 5000 == ledger["kept"] + ledger["quarantined"] + ledger["deduplicated"]
        assert ledger["kept"] == results["edges"]["build"]
        assert ledger["quarantined_share"] == round(ledger["quarantined"] / 5000, 4)
    default, heavy = (summary["shapes"][name]["labevents"] for name in ("default", "heavy"))
    assert heavy["quarantined_share"] > default["quarantined_share"]
    assert heavy["deduplicated_share_of_rest"] > default["deduplicated_share_of_rest"]


def test_the_memory_by_shape_table_follows_each_shapes_tables(shapes_run):
    out, summary, printed = shapes_run
    table = printed[printed.index("memory by shape"):]
    assert printed.count("(c) validate, cache cold") == 2 and "(d) build" not in table
    for shape, figures in summary["shapes"].items():
        assert f"wrote {out / shape / 'bench.json'}" in printed
        row = next(line for line in table.splitlines() if f"{shape} (5,000 rows, mimic3)" in line)
        assert f"{round(figures['build']['tree_peak_rss_mb']):,}" in row
        assert f"{100 * figures['labevents']['quarantined_share']:.1f}" in row
    assert "dask client MB" not in table and f"wrote {out / 'shapes.json'}" in printed


def test_the_dask_step_is_shown_client_and_workers_apart():
    step = {"skipped": None, "tree_peak_rss_mb": 900.0, "peak_rss_mb": 500.0, "main_peak_rss_mb": 400.0,
            "children_peak_rss_mb": 500.0}
    results = {"rows": 10, "layout": "mimic4", "shape": "heavy",
               "steps": [{**step, "name": name, "result": {}} for name in ("build", "validate", "dask")]}
    figures = shape_figures(results, Path("x/bench.json"))
    assert figures["dask"] == {"main_peak_rss_mb": 400.0, "children_peak_rss_mb": 500.0, "tree_peak_rss_mb": 900.0}
    assert figures["labevents"] is None  # no ledger in the build's report: none made up


def test_one_data_folder_is_one_shape(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--rows", "5000", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "data"),
              "--shape", "default", "heavy"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--data" in error and "is one data folder, so one shape: name one --shape (got default heavy)" in error
    assert not (tmp_path / "out").exists()
