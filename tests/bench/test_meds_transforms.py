"""The bug badpoints' MEDS checks catch, shown on the real MEDS-Transforms 0.7.0: its normalization pipeline
(``fit_normalization`` -> ``fit_vocabulary_indices`` -> ``normalization``, run by bench/meds_transforms.py in
``.venv-meds``) on tests/meds.py's fixture writes NaN and inf z for the constant, single-value, ill-conditioned
and inf-input codes, drops the rows of codes never seen in train, and exits 0; bench/meds_formula.py predicts
every one of its outputs. Skips where ``make meds-env`` has not been run (MEDS-Transforms pins polars<2, so it
never enters .venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.meds_formula import fit_folder, predict_folder
from tests import meds as fixture
from tests.meds import CASES, PLANTED_CASES, NON_FINITE, write_meds

ROOT = Path(__file__).resolve().parents[2]
MEDS_PYTHON = Path(os.environ.get("BADPOINTS_MEDS_PYTHON", ROOT / ".venv-meds" / "bin" / "python"))
RUNNER = ROOT / "bench" / "meds_transforms.py"
GIVEN = {fixture.CONSTANT: (1.0, 0.5), fixture.CANCELLATION: (10_000.0, 0.0058)}

pytestmark = pytest.mark.skipif(
    not MEDS_PYTHON.is_file(),
    reason=f"MEDS-Transforms' environment not found at {MEDS_PYTHON}: run `make meds-env` (or set "
           "BADPOINTS_MEDS_PYTHON to a python with meds-transforms==0.7.0)")


def _run(root: Path, out: Path) -> dict:
    done = subprocess.run([str(MEDS_PYTHON), str(RUNNER), str(root), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def issue(tmp_path_factory):
    """The planted cases (every code under 65,536 values: float32 arithmetic), and what MEDS-Transforms made."""
    folder = tmp_path_factory.mktemp("meds-issue")
    written = write_meds(folder / "in", PLANTED_CASES)
    return written, _run(written.root, folder / "out"), folder / "out"


@pytest.fixture(scope="module")
def given(tmp_path_factory):
    """The planted cases with values/mean and values/std in codes.parquet for two codes, null for the rest."""
    folder = tmp_path_factory.mktemp("meds-given")
    written = write_meds(folder / "in", PLANTED_CASES, code_stats=GIVEN)
    return written, _run(written.root, folder / "out"), folder / "out"


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Every case, many_values too (a code of 70,000 values: float64 arithmetic)."""
    folder = tmp_path_factory.mktemp("meds-many")
    written = write_meds(folder / "in", CASES)
    return written, _run(written.root, folder / "out"), folder / "out"


def test_the_planted_codes_come_out_nan_or_inf_and_nothing_fails(issue):
    _, made, _ = issue
    assert made["meds_transforms"] == "0.7.0"
    assert made["non_finite_codes"] == NON_FINITE
    z = made["z"]
    assert z[fixture.CONSTANT] == z[fixture.CONSTANT_TENTH] == {"rows": 42, "nan": 41, "posinf": 1, "neginf": 0,
                                                                "max_abs_finite": None}
    assert z[fixture.SINGLE] == {"rows": 3, "nan": 2, "posinf": 1, "neginf": 0, "max_abs_finite": None}
    assert z[fixture.LARGE_OFFSET]["nan"] == z[fixture.INF_INPUT]["nan"] == 50
    assert z[fixture.CANCELLATION] == {"rows": 10_010, "nan": 446, "posinf": 4_763, "neginf": 4_801,
                                       "max_abs_finite": None}
    fitted = made["fitted"][fixture.CANCELLATION]
    assert fitted["sum"] == 1e8 and fitted["sum_sqd"] == float(np.float32(1e12))  # every digit of variance gone
    for code in (*fixture.BASE_LABS, fixture.MIXED, fixture.NOT_IN_CODES):
        assert z[code]["nan"] == z[code]["posinf"] == z[code]["neginf"] == 0 and z[code]["max_abs_finite"] < 5


def test_codes_never_seen_in_train_lose_their_rows_without_a_word(issue):
    written, made, _ = issue
    assert made["dropped_by_code"] == {fixture.HELD_OUT_ONLY: 3} and made["rows_dropped"] == 3
    held_out = made["rows"]["held_out"]
    assert held_out["in"] - held_out["out"] == 3 == (written.rows["code"] == fixture.HELD_OUT_ONLY).sum()
    assert fixture.HELD_OUT_ONLY not in made["fitted"]


def test_the_emptied_split_is_read_and_written_with_no_rows(issue):
    _, made, out = issue
    assert made["rows"]["tuning"] == {"in": 0, "out": 0, "shards": 1}
    assert pq.read_table(out / "data/tuning/0.parquet").num_rows == 0
    assert made["rows"]["train"]["in"] == made["rows"]["train"]["out"]


def test_unsorted_and_split_subjects_pass_unnoticed(issue):
    _, _, out = issue
    train_1 = pq.read_table(out / "data/train/1.parquet").to_pandas()
    unsorted = train_1[train_1["subject_id"] == fixture.UNSORTED_SUBJECT]["time"]
    assert unsorted.is_monotonic_decreasing and unsorted.nunique() > 1  # written back as it came
    held_out = pq.read_table(out / "data/held_out/0.parquet").to_pandas()
    assert (held_out["subject_id"] == fixture.SPLIT_SPLIT_SUBJECT).sum() > 0  # a train subject, normalized here
    assert "text_value" not in held_out.columns  # the mixed code's text is gone


@pytest.mark.parametrize("run", ["issue", "many", "given"])
def test_the_reproduction_predicts_every_output(request, run):
    written, made, _ = request.getfixturevalue(run)
    predicted = predict_folder(written.root)
    assert predicted == {key: made[key] for key in predicted}
    fitted = fit_folder(written.root)
    for code, n, total, total_sqd in zip(fitted.codes, fitted.n, fitted.total, fitted.total_sqd):
        found = made["fitted"][code]
        assert (found["n_occurrences"], found["sum"], found["sum_sqd"]) == (n, _json(total), _json(total_sqd))
    assert made["fitted_types"]["values/n_occurrences"] == str(fitted.count_dtype())


def test_past_65535_values_a_constant_code_comes_out_finite_and_huge(many):
    _, made, _ = many
    assert made["fitted_types"]["values/n_occurrences"] == "uint32"
    assert made["non_finite_codes"] == sorted(set(NON_FINITE) - {fixture.CONSTANT_TENTH})
    assert made["z"][fixture.CONSTANT_TENTH]["max_abs_finite"] > 1000
    assert made["z"][fixture.MANY]["nan"] == 0 and 990 < made["z"][fixture.MANY]["max_abs_finite"] < 1010  # the outlier
    assert made["z"][fixture.CANCELLATION]["nan"] == 10_010


def test_given_mean_and_std_are_used_and_a_null_there_makes_every_z_null(given):
    _, made, _ = given
    assert made["non_finite_codes"] == []
    z = made["z"]
    assert z[fixture.CONSTANT]["max_abs_finite"] == 2.0  # (2 - 1) / 0.5
    assert 1 < z[fixture.CANCELLATION]["max_abs_finite"] < 2  # its real spread, at last
    for code in (*fixture.BASE_LABS, fixture.SINGLE, fixture.INF_INPUT):
        assert z[code]["max_abs_finite"] is None and z[code]["nan"] == 0  # null given: all null, not NaN
    assert made["fitted_types"]["values/mean"] == "float"  # float64 in, shrunk to float32


def _json(value: np.float32):
    value = float(value)
    return value if np.isfinite(value) else ("nan" if np.isnan(value) else ("inf" if value > 0 else "-inf"))
