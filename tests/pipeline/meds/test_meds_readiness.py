"""pipeline/meds/formula.py's readiness on hand-made fits: a code whose train values are all equal gets a
variance of exactly 0 only where float32 holds its sums exactly; elsewhere a rounding residue, which the count type
of the whole dataset (float32 or float64 arithmetic) turns to 0 (every z NaN or inf: ``non_finite``) or to a tiny
positive std (every z noise: ``noise``), and each ``why`` says so."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.meds.formula import Fitted, exact_zero, readiness

TENTH, ONE, SPREAD = "EQUAL_TENTH", "EQUAL_ONE", "SPREAD"


def _fit(values: dict[str, list[float]], *, n: dict[str, int] | None = None) -> tuple[Fitted, pd.DataFrame]:
    """One shard's fit of ``values`` (float32, squares summed in float64 and rounded once, as polars does) and the
    codes table readiness reads; ``n`` overrides a code's count (the fit of many values, without the values)."""
    codes = np.array(sorted(values), dtype=object)
    x = [np.asarray(values[c], dtype=np.float32) for c in codes]
    fitted = Fitted(codes, np.array([(n or {}).get(c, len(v)) for c, v in zip(codes, x)], dtype=np.int64),
                    np.array([v.astype(np.float64).sum() for v in x], dtype=np.float32),
                    np.array([(v * v).astype(np.float64).sum() for v in x], dtype=np.float32))
    table = pd.DataFrame({"numeric": [len(v) for v in x], "nan": 0, "inf": 0, "min": [v.min() for v in x],
                          "max": [v.max() for v in x], "mean64": [v.astype(np.float64).mean() for v in x],
                          "std64": [v.astype(np.float64).std() for v in x]}, index=pd.Index(codes, name="code"))
    return fitted, table


def test_equal_values_give_a_residue_of_either_sign_and_the_why_says_so():
    values = {TENTH: [0.1] * 4, ONE: [1.0] * 3, SPREAD: [1.0, 2.0, 3.0]}
    # Small counts: float32 arithmetic. 0.1's residue rounds to 0: NaN or inf, as MEDS-Transforms makes it.
    ready = readiness(*_fit(values))
    assert ready.loc[TENTH, "variance"] == 0 and ready.loc[TENTH, "non_finite"] == 4
    assert not ready["noise"].any()
    assert ready.loc[TENTH, "why"] == (
        "all 4 train values equal: the float32 variance sum_sqd/n - mean^2 is 0 here, a rounding residue, whose "
        "sign is not reliable: at another scale, shard layout or thread count it may come out positive, and every "
        "z of the code a finite z of noise")
    assert ready.loc[ONE, "why"].startswith("all 3 train values equal: variance 0, exactly")
    # The same code beside one of 70,000 values: the counts are uint32, the arithmetic float64, and 0.1's rounded
    # float32 square leaves a positive residue: a finite std of noise.
    fitted, table = _fit(values, n={SPREAD: 70_000})
    assert fitted.arithmetic_dtype() == np.float64
    ready = readiness(fitted, table)
    tenth = ready.loc[TENTH]
    assert tenth["noise"] and tenth["non_finite"] == 0 and 0 < tenth["variance"] < 1e-9
    assert np.isfinite(tenth["z_max"])
    assert tenth["why"] == (
        f"all 4 train values equal: the float32 variance sum_sqd/n - mean^2 is {tenth['variance']:.3g} here, a "
        f"rounding residue (std {tenth['std']:.3g}), so every z of the code is noise; where it rounds to 0 or below, "
        "as it may at another scale, shard layout or thread count, every z of the code is NaN or inf")
    # 1.0 stays exactly 0 in either arithmetic: non-finite, never noise.
    assert ready.loc[ONE, "non_finite"] == 3 and not ready.loc[ONE, "noise"] and not ready.loc[SPREAD, "noise"]
    # Three 0.1s instead of four: the residue is negative, the std NaN, every z NaN.
    three = readiness(*_fit({TENTH: [0.1] * 3, SPREAD: [1.0, 2.0, 3.0]}, n={SPREAD: 70_000})).loc[TENTH]
    assert three["variance"] < 0 and three["non_finite"] == 3 and not three["noise"]
    assert "is -3.97e-10 here, a rounding residue, whose sign is not reliable" in three["why"]


def test_equal_values_are_exact_only_where_float32_holds_every_sum():
    value = np.array([1.0, 5.5, 0.0, 0.1, 1e6, 4096.0, 4097.0])
    assert exact_zero(value, np.full(len(value), 40)).tolist() == [True, True, True, False, False, True, False]
    assert exact_zero(np.array([1.0, 5.5]), np.array([2 ** 24, 2 ** 20])).tolist() == [False, False]


def test_nothing_fitted_is_an_empty_readiness_with_or_without_given_stats():
    """No train row (an emptied or absent train split): no code to predict, whether codes.parquet gives a mean and
    std or not."""
    fitted, table = _fit({})
    for given in (None, (np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, dtype=bool))):
        ready = readiness(fitted, table, given)
        assert ready.empty and {"non_finite", "noise", "z_max", "why"} <= set(ready.columns)
