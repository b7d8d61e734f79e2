"""The MEDS export's target, on the real MEDS-Transforms 0.7.0: ``badpoints build`` of the real MIMIC-III demo
``--to meds``, then its normalization pipeline (``fit_normalization`` -> ``fit_vocabulary_indices`` ->
``normalization``, bench/meds_transforms.py in ``.venv-meds``) gives not one NaN or inf z, every |z| within the
build's bound, and drops only the rows of codes never seen in train: those the build names beforehand
(meds_export_unseen_codes), as `badpoints validate` of the output does (meds_code_unseen). Skips where ``make
meds-env`` has not been run, or without the demo."""

from __future__ import annotations

import json
import math
import subprocess

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.bench.test_meds_transforms import MEDS_PYTHON, RUNNER

pytestmark = pytest.mark.skipif(
    not MEDS_PYTHON.is_file(),
    reason=f"MEDS-Transforms' environment not found at {MEDS_PYTHON}: run `make meds-env` (or set "
           "BADPOINTS_MEDS_PYTHON to a python with meds-transforms==0.7.0)")


def test_meds_transforms_normalization_of_the_demo_built_as_meds_has_no_bad_z(mimic3demo, tmp_path):
    built = CliRunner().invoke(app, ["build", str(mimic3demo), "--out", str(tmp_path / "meds"), "--to", "meds",
                                     "--no-cache", "-q"])
    assert built.exit_code == 0, built.output
    done = subprocess.run([str(MEDS_PYTHON), str(RUNNER), str(tmp_path / "meds"), str(tmp_path / "norm")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout)
    assert made["non_finite_codes"] == []
    assert sum(z["nan"] + z["posinf"] + z["neginf"] for z in made["z"].values()) == 0
    largest = max(float(z["max_abs_finite"]) for z in made["z"].values() if z["max_abs_finite"] is not None)
    assert 5 < largest <= 10  # the build's bound: [scale] bound drew every |z| in under 10
    codes = pq.read_table(tmp_path / "meds" / "metadata" / "codes.parquet").to_pandas().set_index("code")
    for code, fit in made["fitted"].items():  # MEDS-Transforms took the build's mean and std, as float32
        if fit["n_occurrences"]:
            assert math.isclose(fit["mean"], codes.loc[code, "values/mean"], rel_tol=1e-6, abs_tol=1e-6), code
            assert math.isclose(fit["std"], codes.loc[code, "values/std"], rel_tol=1e-6), code
    unseen = set(made["dropped_by_code"])
    train = set(pq.read_table(tmp_path / "meds" / "data" / "train").column("code").to_pylist())
    assert made["rows_dropped"] > 0 and not unseen & train
    # the build said so beforehand: its finding names every code normalization dropped, and their rows
    report = json.loads((tmp_path / "meds" / "report.json").read_text())
    (said,) = [f for f in report["findings"] if f["check"] == "meds_export_unseen_codes"]
    assert said["count"] == made["rows_dropped"] == 196
    assert set(said["items"]) == unseen and len(unseen) == 97
    for code in said["items"][:5]:  # the most rows first, each with its rows as normalization dropped them
        rows = made["dropped_by_code"][code]
        assert f"{code} ({rows} row{'s' if rows != 1 else ''};" in said["message"]
    assert "normalization will drop 196 rows of 97 codes with no row in train" in " ".join(built.output.split())
