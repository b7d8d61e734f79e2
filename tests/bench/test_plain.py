"""bench/plain.py: the plain pandas and polars baselines keep exactly badpoints' edges, and agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline import load_config, validate
from bench.plain import plain_pandas, plain_polars
from bench.steps import baseline_settings
from bench.synth import write_synthetic

HAS_POLARS = importlib.util.find_spec("polars") is not None
needs_polars = pytest.mark.skipif(not HAS_POLARS, reason="polars is not installed (the optional extra 'bench')")


@pytest.fixture(scope="module")
def settings():
    return baseline_settings()


def test_baseline_matches_badpoints_on_the_sample(sample_dir, settings):
    kept = validate(sample_dir, load_config()).prepared.ledger()["kept"]
    found = plain_pandas(sample_dir, settings)
    assert found["edges"] == kept and found["read"] == 13041 and found["finite"]


@pytest.mark.parametrize(("bucket", "last"), [("interval_hours = 12\nmax_timestep = 5\nafter_discharge_hours = 0", 5),
                                              ("max_stay_days = 3", 2)])  # days 0, 1, 2 (up to 72 h after midnight)
def test_baseline_follows_the_config_badpoints_runs_with(sample_dir, tmp_path, bucket, last):
    # Its bounds come from the stages' declarations, not from numbers of its own: other timesteps and bounds keep
    # other rows, and still exactly badpoints' kept rows.
    (tmp_path / "config.toml").write_text(f"[bucket]\n{bucket}\n")
    config = load_config(tmp_path / "config.toml")
    kept = validate(sample_dir, config).prepared.ledger()["kept"]
    found = plain_pandas(sample_dir, baseline_settings(config))
    assert found["edges"] == kept < validate(sample_dir, load_config()).prepared.ledger()["kept"]
    assert found["max_timestep"] == last


@pytest.fixture(scope="module")
def small_sets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("baselines")
    write_synthetic(root / "mimic3", rows=50_000, seed=5)
    write_synthetic(root / "mimic4", rows=50_000, seed=5, layout="mimic4")
    return {"sample": Path(__file__).resolve().parents[2] / "data" / "sample", "mimic3": root / "mimic3",
            "mimic4": root / "mimic4"}


@needs_polars
@pytest.mark.parametrize("name", ["sample", "mimic3", "mimic4"])
def test_polars_baseline_gives_the_pandas_baselines_results(small_sets, settings, name):
    # Same split (pandas' hash), so not only the counts but the codes, |z| and item indices agree.
    pandas_found, polars_found = plain_pandas(small_sets[name], settings), plain_polars(small_sets[name], settings)
    assert polars_found.pop("z_abs_sum") == pytest.approx(pandas_found.pop("z_abs_sum"), rel=1e-9)
    assert polars_found == pandas_found and pandas_found["edges"] > 0 and pandas_found["coded"] > 0


def test_pandas_baseline_keeps_badpoints_edges_on_mimic4(small_sets, settings):
    # Lower-case headers, outpatient rows and results only in comments: still exactly badpoints' kept rows.
    kept = validate(small_sets["mimic4"], load_config()).prepared.ledger()["kept"]
    found = plain_pandas(small_sets["mimic4"], settings)
    assert found["edges"] == kept and found["read"] == 50_000 and found["admission_features"] == 6  # DISCHARGE_LOCATION is known after admission
