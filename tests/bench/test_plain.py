"""bench/plain.py: the plain pandas and polars baselines keep exactly badpoints' edges, and agree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline import load_config, validate
from bench.plain import plain_pandas, plain_polars
from bench.synth import write_synthetic

HAS_POLARS = importlib.util.find_spec("polars") is not None
needs_polars = pytest.mark.skipif(not HAS_POLARS, reason="polars is not installed (the optional extra 'bench')")


def test_baseline_matches_badpoints_on_the_sample(sample_dir):
    kept = validate(sample_dir, load_config()).prepared.ledger()["kept"]
    found = plain_pandas(sample_dir)
    assert found["edges"] == kept and found["read"] == 13041 and found["finite"]


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
