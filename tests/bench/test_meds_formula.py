"""bench/meds_formula.py: MEDS-Transforms 0.7's normalization arithmetic, reproduced (no MEDS-Transforms needed
here; tests/bench/test_meds_transforms.py holds it against the real thing)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.meds_formula import Fitted, fit_shard, predict_folder, reduce_shards, shard_order, zscore
from tests import meds as fixture
from tests.meds import CASES, PLANTED_CASES, NON_FINITE, write_meds


def _fit(values, code="A"):
    values = np.asarray(values, dtype=np.float32)
    return fit_shard(np.array([code] * len(values), dtype=object), values, np.zeros(len(values), dtype=bool))


def test_one_value_or_equal_values_give_std_zero_and_z_nan_or_inf():
    for values in ([5.5], [1.0] * 40, [1e6] * 40):
        fitted = _fit(values)
        mean, std = fitted.mean_std()
        assert std[0] == 0 and mean[0] == np.float32(values[0])
        rows = np.float32([values[0], values[0] + 1, values[0] - 1])
        kept, z, _ = zscore(fitted, np.array(["A"] * 3, dtype=object), rows, np.zeros(3, dtype=bool))
        assert kept.all() and np.isnan(z[0]) and z[1] == np.inf and z[2] == -np.inf


def test_an_inf_input_makes_every_z_of_its_code_nan():
    fitted = _fit([2.0, np.inf, 2.2])
    assert fitted.n[0] == 3 and fitted.total[0] == np.inf
    _, z, _ = zscore(fitted, np.array(["A"] * 3, dtype=object), np.float32([2.0, 2.1, np.inf]), np.zeros(3, bool))
    assert np.isnan(z).all()


def test_null_and_nan_values_are_not_fitted_and_a_null_stays_null():
    values = np.float32([1.0, np.nan, 3.0, 0.0])
    null = np.array([False, False, False, True])
    fitted = fit_shard(np.array(["A"] * 4, dtype=object), values, null)
    assert fitted.n.tolist() == [2] and fitted.total.tolist() == [4.0]
    _, z, z_null = zscore(fitted, np.array(["A"] * 4, dtype=object), values, null)
    assert z[0] == -1 and z[2] == 1 and np.isnan(z[1]) and np.isnan(z[3])
    assert z_null.tolist() == [False, False, False, True]  # a NaN input is a NaN z, not a null one


def test_a_shard_sums_in_float64_and_rounds_once_to_float32():
    fitted = _fit([0.1] * 10)
    assert fitted.total[0] == np.float32(1.0)  # float32 addition in turn would give 1.0000001
    naive = np.float32(0)
    for _ in range(10):
        naive = np.float32(naive + np.float32(0.1))
    assert naive != np.float32(1.0)


def test_the_arithmetic_turns_float64_past_65535_values_of_one_code():
    for largest, counts, arithmetic in ((65_535, np.uint16, np.float32), (65_536, np.uint32, np.float64)):
        fitted = Fitted(np.array(["A"], dtype=object), np.array([largest]), np.float32([1.0]), np.float32([1.0]))
        assert fitted.count_dtype() == counts and fitted.arithmetic_dtype() == arithmetic
    tenth = _fit([0.1] * 40)
    assert tenth.arithmetic_dtype() == np.float32 and tenth.mean_std()[1][0] == 0  # 0.1's residue cancels to 0
    beside_many = Fitted(np.array(["A", "B"], dtype=object), np.array([40, 70_000]),
                         np.append(tenth.total, np.float32(1)), np.append(tenth.total_sqd, np.float32(1)))
    assert 0 < beside_many.mean_std()[1][0] < 1e-4  # the same sums in float64 keep a residue: std 3e-5


def test_shards_are_added_in_float32_in_meds_transforms_order():
    parts = {f"train/{i}": Fitted(np.array(["A"], dtype=object), np.array([1]), np.float32([v]), np.float32([0]))
             for i, v in enumerate([1e8, 1.0, -1e8])}
    order = shard_order(parts)
    assert sorted(order) == sorted(parts) and order == shard_order(list(reversed(order)))
    expected = np.float32(0)
    for name in order:
        expected = np.float32(expected + parts[name].total[0])
    assert reduce_shards(parts).total[0] == expected


def test_codes_without_a_fitted_row_are_dropped():
    fitted = _fit([1.0, 2.0])
    kept, z, _ = zscore(fitted, np.array(["A", "B", "A"], dtype=object), np.float32([1.0, 5.0, 2.0]), np.zeros(3, bool))
    assert kept.tolist() == [True, False, True] and z.tolist() == [-1.0, 1.0]


@pytest.fixture(scope="module")
def issue_fixture(tmp_path_factory):
    return write_meds(tmp_path_factory.mktemp("meds") / "issue", PLANTED_CASES)


def test_on_the_fixture_it_predicts_the_planted_codes_non_finite_and_the_unseen_rows_dropped(issue_fixture):
    predicted = predict_folder(issue_fixture.root)
    assert predicted["non_finite_codes"] == NON_FINITE
    assert predicted["dropped_by_code"] == {fixture.HELD_OUT_ONLY: 3}
    for code in (*fixture.BASE_LABS, fixture.MIXED, fixture.NOT_IN_CODES):
        assert predicted["z"][code]["max_abs_finite"] < 5
    assert predicted["z"][fixture.CANCELLATION] == {"rows": 10_010, "nan": 446, "posinf": 4_763, "neginf": 4_801,
                                                    "max_abs_finite": None}


def test_with_many_values_the_constant_tenth_is_finite_and_huge(tmp_path):
    predicted = predict_folder(write_meds(tmp_path, CASES).root)
    assert fixture.CONSTANT_TENTH not in predicted["non_finite_codes"]
    assert predicted["z"][fixture.CONSTANT_TENTH]["max_abs_finite"] > 1000
    assert predicted["z"][fixture.CANCELLATION]["nan"] == 10_010


def test_given_mean_and_std_replace_the_fit_and_a_code_without_them_gets_null_z(tmp_path):
    stats = {fixture.CONSTANT: (1.0, 0.5), fixture.SINGLE: (5.0, 1.0)}
    predicted = predict_folder(write_meds(tmp_path, PLANTED_CASES, code_stats=stats).root)
    assert predicted["non_finite_codes"] == []
    assert predicted["z"][fixture.CONSTANT]["max_abs_finite"] == 2.0  # held_out 2.0: (2 - 1) / 0.5
    assert predicted["z"][fixture.CANCELLATION]["max_abs_finite"] is None  # null given: every z null
