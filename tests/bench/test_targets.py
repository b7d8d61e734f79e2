"""bench/targets.py: the speed and memory targets, each with its scale, limit, value and the baselines beside."""

from __future__ import annotations

import pytest

from bench.steps import StepResult
from bench.targets import MIMIC4_SCALE, targets


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
