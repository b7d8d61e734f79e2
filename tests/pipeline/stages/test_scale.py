"""pipeline/stages/scale.py: per-item z-scores fitted on training rows by a declared fallback chain, with a principled
std guard.

The seed researcher's bug was an item whose normal training values were all
equal (std 0), so ``(x - mean) / std`` gave inf and every loss went NaN. Sample
items 51100 (every normal value 20) and 50963 (one normal observation) carry
that bug. Calling them constant (scale 1) then turned raw-unit differences into
z-scores of thousands (D-dimer reached z = 8,900 on the MIMIC-III demo): they vary,
so they are scaled on all their training rows; only an item whose training values
are all equal is constant, and its other values get a bounded z.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd
import pytest

from tests.pipeline.stages.sample import run_stages, sample_stages, shuffled, typed
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pipeline.stages import clean, scale, text
from pipeline.config import load_config
from pipeline.flow import prepare, validate
from schemas.errors import StageError
from schemas.guard import check_frame
from schemas.scale import ScaledEvents

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
SODIUM_URINE = 51100  # every normal value is 20, abnormal values differ
NTPROBNP = 50963  # one normal observation, the other rows abnormal
AST = 50878  # heavy-tailed: mostly 15-40 IU/L, a few in the thousands
LIPASE, POTASSIUM_FLUID = 50956, 51041  # one row each, in the test split
HADM_OF_SPLIT = {"train": 100, "val": 200, "test": 300}


RAW = {"default": "none"}  # today's raw z: these tests hold the fit's chain of rules, not the default policy


def fit(events, *, min_admissions=1, **options):
    """:func:`scale.fit_zscore` with no item rare unless ``min_admissions`` says: :func:`lab_rows` puts a split's
    rows in one admission, which [encode] min_admissions would make every item's too few."""
    return scale.fit_zscore(events, min_admissions=min_admissions, **options)


def fit_raw(events, *, policy=None, **options):
    """:func:`fit` with every item not named in ``policy`` scaled by the raw z."""
    return fit(events, policy={**RAW, **(policy or {})}, **options)


def raw_config(**policy):
    """The default config with [scale.policy] default = "none" (and ``policy``'s lines)."""
    config = load_config()
    return dataclasses.replace(config, scale=dataclasses.replace(config.scale, policy=MappingProxyType(
        {**RAW, **policy})))


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config():
    return load_config()


@pytest.fixture(scope="module")
def encoded(config) -> pd.DataFrame:
    """The sample's lab rows as the scale stage receives them: clean, split and encoded."""
    return sample_stages().encoded


@pytest.fixture(scope="module")
def fitted(encoded, config) -> scale.ZScoreStats:
    return fit_raw(encoded, eps=config.scale.eps, clip_sigma=config.scale.clip_sigma)


@pytest.fixture(scope="module")
def scaled(encoded, fitted) -> pd.DataFrame:
    return scale.apply_zscore(encoded, fitted)


def lab_rows(rows: list[tuple]) -> pd.DataFrame:
    """EncodedEvents from ``(ITEMID, VALUENUM, FLAG, SPLIT)`` tuples; lines 2, 3, ...

    A row with VALUENUM None is a categorical row (VALUE 'NEG', CODE 1); an item's
    KIND follows clean.item_kinds.
    """
    items = [int(r[0]) for r in rows]
    values = pd.Series([np.nan if r[1] is None else float(r[1]) for r in rows], dtype="float64")
    frame = pd.DataFrame({
        "HADM_ID": pd.Series([HADM_OF_SPLIT[r[3]] for r in rows], dtype="int64"),
        "ITEMID": pd.Series(items, dtype="int64"),
        "CHARTTIME": pd.Series(pd.Timestamp("2150-01-01 08:00") + pd.to_timedelta(range(len(rows)), unit="min"))
        .astype("datetime64[ns]"),
        "VALUE": pd.Series(["NEG" if np.isnan(v) else repr(v) for v in values], dtype="str"),
        "FLAG": pd.Series([r[2] for r in rows], dtype="str"),
        "VALUENUM": values,
        "SPLIT": pd.Series([r[3] for r in rows], dtype="str"),
    })
    frame.index = pd.RangeIndex(2, len(rows) + 2, name="line")
    frame.insert(6, "KIND", clean.item_kinds(frame))
    frame["CODE"] = pd.Series(1, index=frame.index, dtype="Int64").where(frame["KIND"] == "categorical")
    return frame


# -- the centred std ---------------------------------------------------------------------------------
def test_the_fit_gives_numpys_two_pass_sample_std_per_item():
    rng = np.random.default_rng(7)
    values = {1: rng.normal(5, 2, 40), 2: rng.normal(-300, 0.5, 9)}
    events = lab_rows([(item, v, None, "train") for item, group in values.items() for v in group]
                      + [(3, 42.0, None, "train")])
    table = fit_raw(events, clip_sigma=100.0, min_rows=2).table()
    for item, group in values.items():
        assert table.loc[item, "mean"] == pytest.approx(np.mean(group), rel=1e-12)
        assert table.loc[item, "scale"] == pytest.approx(np.std(group, ddof=1), rel=1e-12)
        assert (table.loc[item, "count"], table.loc[item, "rule"]) == (len(group), "normal")
    assert table.loc[3, "rule"] == "constant"  # one observation has no sample std


def test_the_fit_reads_only_rows_with_a_number():
    events = lab_rows([(9, 1.0, None, "train"), (9, None, None, "train"), (9, 3.0, None, "train")])
    stats = fit_raw(events, min_rows=2)
    assert (stats.mean_, stats.count_) == ((2.0,), (2,)) and stats.scale_[0] == pytest.approx(np.sqrt(2.0))


def test_the_centred_std_stays_right_where_a_sum_of_squares_formula_fails():
    rng = np.random.default_rng(11)
    values = 1e6 + 1e-3 * rng.standard_normal(2_000)
    n = len(values)
    reference = np.std(values - values.mean(), ddof=1)
    stats = fit_raw(lab_rows([(7, v, None, "train") for v in values]), clip_sigma=100.0)
    assert stats.rule_ == ("normal",) and abs(stats.scale_[0] - reference) <= 1e-6 * reference
    # The one-pass formula the module refuses to use: catastrophic cancellation at mean 1e6, std 1e-3.
    squares = np.sum(values ** 2)
    one_pass_variance = (squares - n * values.mean() ** 2) / (n - 1)
    one_pass = np.sqrt(one_pass_variance) if one_pass_variance >= 0 else np.nan
    assert not (abs(one_pass - reference) <= 1e-6 * reference)


# -- fit_zscore ---------------------------------------------------------------------------------------
def test_fit_uses_the_training_split_only():
    events = lab_rows([(1, v, None, "train") for v in (1.0, 2.0, 3.0)]
                      + [(1, 1000.0, None, "val"), (1, -1000.0, None, "test"), (2, 5.0, None, "val")])
    table = fit_raw(events).table()
    assert list(table.index) == [1]  # item 2 has no training row
    assert (table.loc[1, "mean"], table.loc[1, "scale"], table.loc[1, "count"]) == (2.0, 1.0, 3)


def test_fit_uses_normal_rows_only():
    events = lab_rows([(1, v, None, "train") for v in (10.0, 11.0, 12.0)]
                      + [(1, 400.0, "abnormal", "train"), (1, -90.0, "delta", "train")])
    stats = fit_raw(events, min_rows=3)
    assert (stats.table().loc[1, "mean"], stats.table().loc[1, "scale"]) == (11.0, 1.0)
    assert stats.fallback_items_ == () and stats.rule_ == ("normal",) and stats.count_ == (3,)


def test_fit_clips_normal_rows_beyond_three_sigma():
    normal = [10.0 + 0.1 * k for k in range(-10, 11)]  # 21 values, mean 10
    events = lab_rows([(1, v, None, "train") for v in normal] + [(1, 1000.0, None, "train")])
    table = fit_raw(events, clip_sigma=3.0).table()
    assert table.loc[1, "mean"] == pytest.approx(10.0, rel=1e-12)
    assert table.loc[1, "scale"] == pytest.approx(np.std(normal, ddof=1), rel=1e-12)
    assert table.loc[1, "count"] == 21
    # Without clipping the outlier would have pulled the mean to about 55.
    loose = fit_raw(events, clip_sigma=100.0).table()
    assert loose.loc[1, "mean"] == pytest.approx(np.mean(normal + [1000.0]))


def test_sample_seed_bug_items_vary_so_they_are_scaled_on_all_their_training_rows(encoded, fitted):
    table = fitted.table()
    train = encoded[(encoded["SPLIT"] == "train") & encoded["VALUENUM"].notna()]
    for item, normal in ((SODIUM_URINE, 20), (NTPROBNP, 1)):
        values = train.loc[train["ITEMID"] == item, "VALUENUM"]
        assert values.nunique() > 1  # they vary: not constant
        assert (table.loc[item, "rule"], table.loc[item, "normal_count"]) == ("all", normal)
        kept = values[(values - values.mean()).abs() <= 3 * values.std(ddof=1)]  # all rows, 3-sigma clipped
        assert table.loc[item, "mean"] == pytest.approx(kept.mean()) and table.loc[item, "count"] == len(kept)
        assert table.loc[item, "scale"] == pytest.approx(kept.std(ddof=1))
    assert fitted.constant_items_ == () and set(fitted.fallback_items_) == {SODIUM_URINE, NTPROBNP}
    assert (table["scale"] > 0).all() and np.isfinite(table[["mean", "scale"]].to_numpy()).all()


def test_the_seed_bug_items_get_small_z_and_are_reported_with_their_reason(fitted, scaled, config):
    rows = scaled["ITEMID"].isin([SODIUM_URINE, NTPROBNP])
    assert rows.sum() > 20 and scaled.loc[rows, "VALUENUM"].nunique() > 2  # abnormal values differ
    z = scaled.loc[rows, "Z"]
    assert np.isfinite(z).all() and z.abs().max() < 10  # scale 1 gave raw-unit differences up to 6,639 here
    findings = {f.check: f for f in scale.scale_findings(scaled, fitted, warn_bound=config.scale.warn_bound)}
    assert "constant_item" not in findings and "constant_item_value" not in findings
    fallback = findings["fallback_item"]
    assert (fallback.stage, fallback.count, fallback.severity) == ("scale", 2, "info")
    assert f"normal rows without spread: ITEMID {SODIUM_URINE} (23 fitted rows)" in fallback.message
    assert f"only 1 normal row: ITEMID {NTPROBNP} (9 fitted rows)" in fallback.message


def test_an_item_with_one_normal_row_among_abnormal_rows_spread_over_thousands_gets_single_digit_z(config):
    """MIMIC-IV's NTproBNP: 28 training rows over ~12,860 pg/mL and one normal row. Scale 1 gave z = 62,122."""
    rng = np.random.default_rng(50963)
    abnormal = np.round(rng.uniform(400.0, 13_260.0, 27), 1)
    held = [14_000.0, 90.0, 7_500.0]
    events = lab_rows([(NTPROBNP, 120.0, None, "train")] + [(NTPROBNP, v, "abnormal", "train") for v in abnormal]
                      + [(NTPROBNP, v, "abnormal", "val") for v in held])
    stats = fit_raw(events, min_rows=config.scale.min_rows)
    train = np.concatenate([[120.0], abnormal])
    mean, std = train.mean(), np.std(train, ddof=1)
    assert stats.table().loc[NTPROBNP].tolist() == [pytest.approx(mean), pytest.approx(std), 28, "all", 1]
    z = scale.apply_zscore(events, stats)["Z"]
    own = np.abs(train - mean).max() / std  # the largest |z| the training rows' own spread gives
    assert z.iloc[:28].abs().max() == pytest.approx(own) and own < 3
    assert z.abs().max() == pytest.approx(np.abs(np.array(held) - mean).max() / std) and z.abs().max() < 10


def test_an_item_whose_training_values_are_all_equal_is_constant_with_bounded_other_values(config):
    events = lab_rows([(1, 5.0, None, "train")] * 4 + [(1, 5.0, "abnormal", "train")]
                      + [(1, 5.0, None, "val"), (1, 7.5, None, "val"), (1, 500.0, "abnormal", "test"),
                         (1, -20.0, None, "test")]
                      + [(3, 0.0, None, "train")] * 3 + [(3, 0.25, "abnormal", "test"), (3, -40.0, None, "val")])
    stats = fit_raw(events, constant_bound=10.0)
    assert stats.constant_items_ == (1, 3) and stats.fallback_items_ == ()
    table = stats.table()
    assert table.loc[1].tolist() == [5.0, 5.0, 5, "constant", 4]
    assert table.loc[3].tolist() == [0.0, 1.0, 3, "constant", 3]
    scaled = scale.apply_zscore(events, stats)
    # its value: 0; others: (x - c) / |c| (x - c when c = 0), clipped to +-10
    assert scaled["Z"].tolist() == [0.0] * 6 + [0.5, 10.0, -5.0] + [0.0] * 3 + [0.25, -10.0]
    findings = {f.check: f for f in scale.scale_findings(scaled, stats, warn_bound=config.scale.warn_bound)}
    constant = findings["constant_item"]
    assert (constant.count, constant.severity) == (2, "info")
    assert "training values are all equal: ITEMID 1 (5 train rows), 3 (3 train rows)" in constant.message
    other = findings["constant_item_value"]
    assert (other.stage, other.count, other.lines, other.severity) == ("scale", 5, [8, 9, 10, 14, 15], "info")
    assert "ITEMID 1 (3 rows), 3 (2 rows)" in other.message and "|z| at most 10" in other.message
    assert "z_warn_bound" not in findings
    assert scale.scale_findings(scale.reported_rows(scaled, stats, warn_bound=100.0), stats,
                                warn_bound=100.0) == scale.scale_findings(scaled, stats, warn_bound=100.0)


def test_items_that_vary_are_never_constant_even_when_clipping_leaves_one_value():
    # 30 equal normal values and one far abnormal one: clipping all the rows keeps only the equal values
    events = lab_rows([(1, 5.0, None, "train")] * 30 + [(1, 1000.0, "abnormal", "train")]
                      + [(2, 7.0, None, "train"), (2, 7.0 + 1e-9, None, "train")])
    stats = fit_raw(events)
    table = stats.table()
    values = np.array([5.0] * 30 + [1000.0])
    assert table.loc[1].tolist() == [pytest.approx(values.mean()), pytest.approx(np.std(values, ddof=1)), 31,
                                     "all_unclipped", 30]
    assert table.loc[2, "rule"] == "all" and stats.constant_items_ == ()
    assert scale.apply_zscore(events, stats)["Z"].abs().max() <= 30 / np.sqrt(31)  # (n - 1) / sqrt(n)


@pytest.mark.parametrize(("normal_rows", "min_rows", "rule"), [
    (10, 10, "normal"), (9, 10, "all"), (9, 9, "normal"), (0, 10, "all"), (1, 2, "all")])
def test_min_rows_picks_the_rule_in_the_chain(normal_rows, min_rows, rule):
    normal = [10.0 + 0.5 * k for k in range(normal_rows)]
    events = lab_rows([(1, v, None, "train") for v in normal]
                      + [(1, v, "abnormal", "train") for v in (100.0, 200.0, 300.0)])
    stats = fit_raw(events, min_rows=min_rows)
    assert stats.rule_ == (rule,) and stats.normal_count_ == (normal_rows,)
    used = normal if rule == "normal" else normal + [100.0, 200.0, 300.0]
    assert stats.count_ == (len(used),)
    assert stats.scale_[0] == pytest.approx(np.std(used, ddof=1))


def test_tiny_relative_std_is_constant_but_a_real_spread_is_not():
    tiny = [1e6 + 1e-3 * k for k in range(5)]  # std 1.6e-3 <= 1e-6 * 1e6
    real = [1.0, 2.0, 3.0]
    events = lab_rows([(1, v, None, "train") for v in tiny] + [(2, v, None, "train") for v in real])
    stats = fit_raw(events, eps=1e-6)
    assert stats.constant_items_ == (1,)
    assert stats.table().loc[2, "scale"] == 1.0 and 2 not in stats.constant_items_
    assert 1 not in fit_raw(events, eps=1e-12).constant_items_


def test_item_without_normal_training_rows_falls_back_to_all_its_training_rows(config):
    events = lab_rows([(1, v, "abnormal", "train") for v in (2.0, 4.0, 6.0)]
                      + [(1, 3.0, None, "val"), (2, 1.0, None, "train"), (2, 3.0, None, "train")])
    stats = fit_raw(events)
    assert stats.fallback_items_ == (1, 2) and stats.rule_ == ("all", "all") and stats.normal_count_ == (0, 2)
    assert (stats.table().loc[1, "mean"], stats.table().loc[1, "scale"]) == (4.0, 2.0)
    scaled = scale.apply_zscore(events, stats)
    fallback = next(f for f in scale.scale_findings(scaled, stats, warn_bound=config.scale.warn_bound)
                    if f.check == "fallback_item")
    assert fallback.count == 2
    assert "no normal rows: ITEMID 1 (3 fitted rows); only 2 normal rows: ITEMID 2 (2 fitted rows)" in fallback.message


def test_items_unseen_in_train_get_zero_and_are_reported(scaled, fitted, config):
    unseen = scaled["ITEMID"].isin([LIPASE, POTASSIUM_FLUID])
    assert unseen.sum() == 2 and not {LIPASE, POTASSIUM_FLUID} & set(fitted.items_)
    assert (scaled.loc[unseen, "Z"] == 0.0).all()
    finding = next(f for f in scale.scale_findings(scaled, fitted, warn_bound=config.scale.warn_bound)
                   if f.check == "unseen_item")
    assert finding.count == 2 and finding.lines == sorted(int(n) for n in scaled.index[unseen])
    assert f"{LIPASE} (1 row)" in finding.message and f"{POTASSIUM_FLUID} (1 row)" in finding.message


def test_categorical_rows_keep_a_null_z(scaled):
    categorical = scaled["VALUENUM"].isna()
    assert categorical.any() and scaled.loc[categorical, "Z"].isna().all()
    assert scaled.loc[~categorical, "Z"].notna().all()


def test_apply_leaves_its_input_unchanged(encoded, fitted):
    before = encoded.copy()
    scale.apply_zscore(encoded, fitted)
    pd.testing.assert_frame_equal(encoded, before)


# -- per-item policies --------------------------------------------------------------------------------
def test_clip_policy_clips_z_at_the_warning_bound(encoded, fitted, scaled):
    assert scaled.loc[scaled["ITEMID"] == AST, "Z"].abs().max() > 100  # heavy tail, unclipped
    clipped = scale.apply_zscore(encoded, fit_raw(encoded, policy={AST: "clip"}), warn_bound=100.0)
    ast = clipped["ITEMID"] == AST
    assert clipped.loc[ast, "Z"].abs().max() == 100.0
    assert (clipped.loc[ast, "Z"] == scaled.loc[ast, "Z"].clip(-100.0, 100.0)).all()
    pd.testing.assert_series_equal(clipped.loc[~ast, "Z"], scaled.loc[~ast, "Z"])
    assert "z_warn_bound" not in {f.check for f in scale.scale_findings(clipped, fitted, warn_bound=100.0)}


def test_log_policy_scales_log1p_of_the_value():
    values = [0.0, 9.0, 99.0, 999.0]
    events = lab_rows([(1, v, None, "train") for v in values] + [(1, 9999.0, None, "test")])
    stats = fit_raw(events, policy={1: "log"}, clip_sigma=10.0)
    logs = np.log1p(values)
    assert stats.log_items_ == (1,)
    assert stats.table().loc[1, "mean"] == pytest.approx(logs.mean(), rel=1e-12)
    assert stats.table().loc[1, "scale"] == pytest.approx(np.std(logs, ddof=1), rel=1e-12)
    z = scale.apply_zscore(events, stats)["Z"]
    expected = (np.log1p(values + [9999.0]) - logs.mean()) / np.std(logs, ddof=1)
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("split_name", ["train", "val"])
def test_log_policy_refuses_values_at_or_below_minus_one(split_name):
    events = lab_rows([(7, 1.0, None, "train"), (7, 2.0, None, "train"), (7, -1.0, None, split_name),
                       (8, -5.0, None, "train")])
    with pytest.raises(StageError) as caught:
        stats = fit_raw(events, policy={7: "log"})
        scale.apply_zscore(events, stats)
    error = caught.value
    assert (error.stage, error.check, error.column, error.count, error.lines) == (
        "scale", "log_domain", "VALUENUM", 1, [4])
    assert "ITEMID 7" in str(error) and "'clip' or 'none'" in str(error)


# -- bounds -------------------------------------------------------------------------------------------
def test_sample_warning_bound_names_items_and_counts(scaled, fitted, config):
    beyond = scaled["Z"].abs() > config.scale.warn_bound
    finding = next(f for f in scale.scale_findings(scaled, fitted, warn_bound=config.scale.warn_bound)
                   if f.check == "z_warn_bound")
    assert finding.severity == "warning" and finding.count == int(beyond.sum()) > 0
    counts = scaled.loc[beyond, "ITEMID"].value_counts()
    assert AST in counts.index  # AST's shock-liver values reach z ~ 2,000
    for item, n in counts.items():
        assert f"{item} ({n} row{'s' if n != 1 else ''}; heavy tail on an item fitted on" in finding.message


def test_z_above_the_error_bound_stops_the_stage_naming_items_and_lines(encoded, fitted):
    bound = 500.0
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(encoded, fitted, error_bound=bound)
    error = caught.value
    z = scale.apply_zscore(encoded, fitted)["Z"]
    over = z.abs() > bound
    assert (error.stage, error.side, error.check, error.column) == ("scale", "output", "z_error_bound", "Z")
    assert error.count == int(over.sum()) > 0
    assert error.lines == [int(n) for n in z.index[over]][: len(error.lines)]
    for item in sorted(encoded.loc[over[over].index, "ITEMID"].unique()):
        assert str(item) in str(error)
    assert "above the error bound 500" in str(error)


# -- censored bounds off their item's scale --------------------------------------------------------------------
def _off_scale_rows() -> pd.DataFrame:
    """An item whose values are 1e6 + 0.001 k (its std about 2e-3) with censored results read as their bounds (the
    text stage's Z_CENSORED): '<0.01' (line 42) and '>1000' (43) in train, '<0.01' in test (44), all with z near
    -5e8, and '<1000000.001' (45), a bound on the item's scale. Line 46 is item 2's plain number, censored nowhere."""
    rows = [(1, 1e6 + 0.001 * (k % 5), None, "train") for k in range(40)]
    rows += [(1, 0.01, None, "train"), (1, 1000.0, None, "train"), (1, 0.01, None, "test"),
             (1, 1e6 + 0.001, None, "test"), (2, 5.0, None, "train")]
    events = lab_rows(rows)
    marks = pd.Series(0, index=events.index, dtype="int8")
    marks.loc[[42, 43, 44, 45]] = np.array([-1, 1, -1, -1], dtype="int8")
    return events.assign(Z_CENSORED=marks)


def test_a_censored_bound_off_its_item_s_scale_is_set_aside_never_an_error():
    events = _off_scale_rows()
    stats = fit(events[events["Z_CENSORED"] == 0])
    kept = scale.scale_events(events, stats)
    assert kept.quarantine.index.tolist() == [42, 43, 44]
    assert set(kept.quarantine["REASON"]) == {scale.OFF_SCALE} and set(kept.quarantine["STAGE"]) == {"scale"}
    assert kept.quarantine["ITEMID"].tolist() == [1, 1, 1]
    (step,) = kept.steps
    assert (step.step, step.rows_in, step.rows_out, step.quarantined, step.column) == (
        scale.OFF_SCALE, 45, 42, 3, "VALUENUM")
    assert kept.frame.index.tolist() == [n for n in events.index if n not in (42, 43, 44)]
    assert kept.frame.loc[45, "Z"] == pytest.approx(scale.apply_zscore(events.drop(index=[42, 43, 44]), stats)
                                                    .loc[45, "Z"])
    assert kept.frame["Z"].abs().max() < 10
    with pytest.raises(StageError) as caught:  # called directly, every row is held to the error bound
        scale.apply_zscore(events, stats)
    assert (caught.value.check, caught.value.lines) == ("z_error_bound", [42, 43, 44])


def test_an_uncensored_value_off_the_scale_is_still_an_error():
    events = _off_scale_rows()
    stats = fit(events[events["Z_CENSORED"] == 0])
    events.loc[46, "ITEMID"] = 1  # a plain 5.0 of the item of 1e6: a unit error
    with pytest.raises(StageError) as caught:
        scale.scale_events(events, stats)
    error = caught.value
    assert (error.stage, error.check, error.lines) == ("scale", "z_error_bound", [46])
    assert "for ITEMID 1 (1)" in str(error)


def test_a_censored_bound_below_a_log_item_s_domain_is_set_aside_too():
    events = lab_rows([(1, float(v), None, "train") for v in range(1, 30)] + [(1, -5.0, None, "test")])
    events = events.assign(Z_CENSORED=pd.Series(0, index=events.index, dtype="int8").where(
        events.index != events.index[-1], -1).astype("int8"))
    stats = fit(events.iloc[:-1], policy={"default": "log"})
    kept = scale.scale_events(events, stats)
    assert kept.quarantine.index.tolist() == [events.index[-1]] and len(kept.frame) == len(events) - 1
    assert scale.off_scale(events, stats).tolist() == [False] * (len(events) - 1) + [True]


def test_rows_without_a_censoring_mark_are_never_set_aside():
    events = _off_scale_rows().drop(columns="Z_CENSORED")
    stats = fit(events.drop(index=[42, 43, 44]))
    assert not scale.off_scale(events, stats).any()


@pytest.mark.parametrize("parts", [2, 3])
def test_off_scale_rows_of_parts_and_shuffled_rows_are_those_of_all_the_rows(parts):
    events = _off_scale_rows()
    stats = fit(events[events["Z_CENSORED"] == 0])
    whole = scale.scale_events(events, stats)
    pieces = [scale.scale_events(events.iloc[n::parts], stats) for n in range(parts)]
    assert sorted(i for p in pieces for i in p.quarantine.index) == whole.quarantine.index.tolist()
    assert [s.step for s in pieces[0].steps] == [s.step for s in whole.steps]
    pd.testing.assert_frame_equal(pd.concat([p.frame for p in pieces]).sort_index(), whole.frame)
    again = scale.scale_events(shuffled(events), stats)
    pd.testing.assert_frame_equal(again.frame.sort_index(), whole.frame)
    assert sorted(again.quarantine.index) == whole.quarantine.index.tolist()


def _zero_scale(mean: float) -> scale.ZScoreStats:
    """Stats as memory corruption could hold them (the constructor refuses scale 0): the output guard still holds."""
    stats = scale.ZScoreStats(items_=(1,), mean_=(mean,), scale_=(1.0,), count_=(2,), rule_=("normal",),
                              normal_count_=(2,), eps=1e-6)
    object.__setattr__(stats, "scale_", (0.0,))
    return stats


@pytest.mark.parametrize(("mean", "scale_"), [(float("nan"), 1.0), (1.0, 0.0), (1.0, -2.0), (1.0, float("inf"))])
def test_stats_refuse_non_finite_means_and_non_positive_scales(mean, scale_):
    record = {"items": [7], "mean": [mean], "scale": [scale_], "count": [3], "rule": ["normal"],
              "normal_count": [3], "log_items": [], "eps": 1e-12, "min_rows": 10, "constant_bound": 10.0}
    with pytest.raises(ValueError, match="ITEMID \\[7\\]"):
        scale.ZScoreStats.from_json(record)


def test_corrupt_stats_with_zero_scale_are_caught_as_infinite_z():
    events = lab_rows([(1, 1.0, None, "train"), (1, 2.0, None, "train")])
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(events, _zero_scale(0.0))
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("scale", "output", "z_finite", "Z")
    assert (error.count, error.lines) == (2, [2, 3])
    assert "ITEMID 1 (2)" in str(error) and "stats.json" in str(error)


def test_corrupt_stats_giving_nan_z_are_caught_as_non_finite_z():
    events = lab_rows([(1, 1.0, None, "train"), (1, 1.0, None, "train")])
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(events, _zero_scale(1.0))  # (1 - 1) / 0 = NaN
    assert (caught.value.check, caught.value.column, caught.value.lines) == ("z_finite", "Z", [2, 3])


def test_input_that_breaks_the_encoded_schema_is_refused():
    events = lab_rows([(1, 1.0, None, "train"), (1, 2.0, None, "train")])
    events.loc[3, "VALUENUM"] = np.inf
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(events, fit_raw(events.iloc[:1]))
    assert (caught.value.stage, caught.value.side, caught.value.column) == ("scale", "input", "VALUENUM")
    assert caught.value.lines == [3]


# -- the fit is a stage boundary: rows handed to it by hand -------------------------------------------------
def _with_value(value: float) -> pd.DataFrame:
    """Item 7 (numeric, lines 2-5) and item 8 (categorical, lines 6-7) in train, item 7 in val (line 8); line 3's
    VALUENUM set to ``value``."""
    events = lab_rows([(7, v, None, "train") for v in (10.0, 12.0, 11.0, 13.0)] + [(8, None, None, "train")] * 2
                      + [(7, 12.0, None, "val")])
    events.loc[3, "VALUENUM"] = value
    return events


@pytest.mark.parametrize("function", ["fit_zscore", "fit_rows"])
@pytest.mark.parametrize(("value", "shown"), [(np.inf, "inf"), (-np.inf, "-inf"), (np.nan, "missing")],
                         ids=["inf", "-inf", "nan"])
def test_the_fit_refuses_a_training_number_that_is_not_finite_naming_its_item_and_line(function, value, shown):
    """+inf made item 7 'constant' (mean = scale = its first value), -inf ended in the stats' own refusal, NaN in a
    numeric row was left out unsaid: each is one error of the fit now, and nothing is fitted."""
    with pytest.raises(StageError) as caught:
        getattr(scale, function)(_with_value(value))
    error = caught.value
    assert (error.stage, error.side, error.check, error.column, error.count, error.lines) == (
        "scale", "input", "fit_finite", "VALUENUM", 1, [3])
    assert str(error).startswith(f"[scale:input] LABEVENTS.VALUENUM fit_finite failed on 1 row (line 3): {shown} ×1. "
                                 f"In ITEMID 7 (1 row) of the rows handed to scale.{function}. scale.{function} needs ")
    assert "editing" not in str(error)


def test_the_fit_takes_a_categorical_rows_empty_value_and_leaves_val_and_test_rows_to_the_stage():
    events = _with_value(11.5)
    events.loc[8, "VALUENUM"] = np.inf  # a val row: not the fit's, the stage's guard refuses it
    stats = fit_raw(events, min_rows=2)
    assert stats.items_ == (7,) and stats.count_ == (4,)
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(events, stats)
    assert (caught.value.check, caught.value.lines) == ("finite", [8])


def test_the_parts_engine_refuses_a_part_whose_training_number_is_not_finite(tmp_path):
    from pipeline.engines.parts import PartsEngine

    events = _with_value(-np.inf)
    engine = PartsEngine(tmp_path, partitions=3, workers=1)
    with pytest.raises(StageError) as caught:
        engine.fit(scale.STAGE.fit, engine.partition(events), policy=RAW, min_admissions=1)
    assert (caught.value.check, caught.value.lines) == ("fit_finite", [3])
    assert "scale.fit_rows" in str(caught.value)


def test_a_users_frame_without_flag_and_kind_is_told_what_each_is_for():
    """HADM_ID, ITEMID, VALUENUM and SPLIT, as a notebook makes them: no bare KeyError of the first column read."""
    events = _with_value(11.5)[["HADM_ID", "ITEMID", "VALUENUM", "SPLIT"]]
    with pytest.raises(StageError) as caught:
        scale.fit_zscore(events)
    error = caught.value
    assert (error.check, error.count) == ("column_in_dataframe", 2)
    assert "2 columns missing: FLAG (str): 'abnormal' or 'delta' for a flagged result" in str(error)
    assert "; KIND (str): the kind of its lab item" in str(error)
    assert str(error).endswith("scale.fit_zscore reads SPLIT, VALUENUM, ITEMID, FLAG, HADM_ID, KIND of SplitEvents "
                               "(schemas.split): give the frame these columns")


def test_scaled_events_schema_refuses_an_infinite_z(scaled):
    broken = scaled.copy()
    line = broken.index[broken["VALUENUM"].notna()][0]
    broken.loc[line, "Z"] = np.inf
    with pytest.raises(StageError) as caught:
        check_frame(ScaledEvents, broken, stage="scale", side="output")
    assert (caught.value.column, caught.value.lines) == ("Z", [int(line)])


# -- fitted state -------------------------------------------------------------------------------------
def test_stats_round_trip_through_json(fitted):
    text = json.dumps(fitted.as_json())
    assert scale.ZScoreStats.from_json(json.loads(text)) == fitted
    again = scale.ZScoreStats.from_json(json.loads(text))
    assert again.table().equals(fitted.table())


# -- determinism --------------------------------------------------------------------------------------
def test_shuffled_rows_give_identical_stats_and_z(encoded, fitted, scaled):
    shuffled = encoded.sample(frac=1.0, random_state=5)
    stats = fit_raw(shuffled)
    assert stats == fitted  # bit-identical, not approximately equal
    pd.testing.assert_frame_equal(scale.apply_zscore(shuffled, stats).sort_index(), scaled)


# -- property: no inf ever leaves the stage -----------------------------------------------------------
def _item_rows(item: int):
    """Rows of one item, in one of the shapes that break naive z-scoring."""
    flag = st.sampled_from([None, None, "abnormal", "delta"])
    split_name = st.sampled_from(["train", "train", "val", "test"])
    value = st.one_of(
        st.floats(-1e4, 1e4, allow_nan=False),
        st.builds(lambda e: 1e6 + 1e-3 * e, st.floats(-3, 3)),  # huge mean, tiny noise
        st.sampled_from([0.0, 20.0, -0.999, 1e10, -1e10, 5e-324]),
    )
    constant = st.builds(lambda v, n: [v] * n, value, st.integers(1, 6))
    spread = st.lists(value, min_size=1, max_size=8)
    categorical = st.builds(lambda n: [None] * n, st.integers(1, 3))
    values = st.one_of(constant, spread, categorical)
    return values.flatmap(lambda vs: st.tuples(*[
        st.tuples(st.just(item), st.just(v), flag, split_name) for v in vs]))


@settings(max_examples=40)
@given(items=st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True).flatmap(
    lambda ids: st.tuples(*[_item_rows(i) for i in ids])),
    log_item=st.sampled_from([None, 1, 2]), clip_item=st.sampled_from([None, 3]))
def test_z_is_finite_for_every_row_with_a_number_or_the_stage_says_why(items, log_item, clip_item):
    events = lab_rows([row for rows in items for row in rows])
    policy = {i: p for i, p in ((log_item, "log"), (clip_item, "clip")) if i is not None}
    try:
        stats = fit_raw(events, policy=policy)
        scaled = scale.apply_zscore(events, stats)
    except StageError as error:
        assert error.stage == "scale" and error.check in {"log_domain", "z_error_bound", "z_finite"}
        assert error.count > 0 and error.lines
        event(f"stopped: {error.check}")
        return
    event("scaled" + (" with a constant item" if stats.constant_items_ else ""))
    number = scaled["VALUENUM"].notna()
    assert np.isfinite(scaled.loc[number, "Z"]).all()
    assert (scaled.loc[number, "Z"].abs() <= 1e6).all()
    assert scaled.loc[~number, "Z"].isna().all()
    constant = scaled["ITEMID"].isin(stats.constant_items_) & number
    assert np.isfinite(scaled.loc[constant, "Z"]).all()


# -- the fit from parts (what the parts and Dask engines add up) ---------------------------------------------
def _fit_from_parts(events: pd.DataFrame, parts: int, *, policy=None, min_admissions=1,
                    **settings) -> scale.ZScoreStats:
    """The fit as an engine of parts runs the stage's :class:`Fit`: each part's :func:`scale.fit_rows`, added up
    (:func:`scale.add_fit_rows`), then finished (:func:`scale.fit_from_rows`); :func:`fit_raw`'s policy and
    ``min_admissions``."""
    fit, policy = scale.STAGE.fit, {**RAW, **(policy or {})}
    frames = [events[events["HADM_ID"] % parts == n] for n in range(parts)]
    return fit.finish(fit.combine([fit.partial(frame, policy=policy) for frame in frames]), policy=policy,
                      min_admissions=min_admissions, **settings)


def test_fit_rows_added_over_parts_give_the_whole_fit(encoded):
    whole = fit_raw(encoded, policy={AST: "log"})
    assert _fit_from_parts(encoded, 1, policy={AST: "log"}) == whole  # one part: bit for bit
    for parts in (2, 7):
        split = _fit_from_parts(encoded, parts, policy={AST: "log"})
        assert (split.items_, split.count_, split.rule_, split.normal_count_) == (
            whole.items_, whole.count_, whole.rule_, whole.normal_count_)
        np.testing.assert_allclose(split.mean_, whole.mean_, rtol=1e-12)
        np.testing.assert_allclose(split.scale_, whole.scale_, rtol=1e-12)


def test_parts_keep_the_centred_std_of_an_ill_conditioned_item():
    """mean 1e6, std 1e-3 over three parts: a one-pass sum of squares would give 0 (dask issue 6306)."""
    rng = np.random.default_rng(0)
    values = 1e6 + rng.normal(0.0, 1e-3, size=600)
    events = lab_rows([(7, v, None, "train") for v in values])
    events["HADM_ID"] = np.arange(len(events)) % 3 + 100
    stats = _fit_from_parts(events, 3, clip_sigma=100.0)
    assert 7 not in stats.constant_items_
    assert stats.scale_[0] == pytest.approx(np.std(values, ddof=1), rel=1e-6)


def test_reported_rows_give_the_same_findings_as_all_rows(scaled, fitted):
    picked = scale.reported_rows(scaled, fitted, warn_bound=5.0)
    assert 0 < len(picked) < len(scaled)
    assert scale.scale_findings(picked, fitted, warn_bound=5.0) == scale.scale_findings(scaled, fitted, warn_bound=5.0)


def test_the_fit_over_parts_records_the_same_rules_ranges_and_counts():
    rng = np.random.default_rng(3)
    rows = ([(1, v, None, "train") for v in rng.normal(10, 1, 40)] + [(1, 90.0, "abnormal", "train")]
            + [(2, 120.0, None, "train")] + [(2, v, "abnormal", "train") for v in rng.uniform(400, 13_000, 27)]
            + [(3, 4.0, None, "train")] * 6 + [(4, 5.0, None, "train")] * 30 + [(4, 1000.0, "abnormal", "train")])
    events = lab_rows(rows)
    events["HADM_ID"] = np.arange(len(events)) % 5 + 100
    whole = fit_raw(events)
    assert whole.rule_ == ("normal", "all", "constant", "all_unclipped")
    for parts in (1, 2, 5):
        split = _fit_from_parts(events, parts)
        assert (split.items_, split.rule_, split.count_, split.normal_count_) == (
            whole.items_, whole.rule_, whole.count_, whole.normal_count_)
        assert split.mean_[2] == whole.mean_[2] == 4.0  # the constant value exactly
        np.testing.assert_allclose(split.mean_, whole.mean_, rtol=1e-12)
        np.testing.assert_allclose(split.scale_, whole.scale_, rtol=1e-12)


# -- rare items: fewer training admissions than [encode] min_admissions ----------------------------------------
def _admissions_rows(item: int, values: list[float], admissions: list[int], split: str = "train") -> pd.DataFrame:
    events = lab_rows([(item, v, None, split) for v in values])
    events["HADM_ID"] = pd.Series(admissions, index=events.index, dtype="int64")
    return events


def test_an_item_of_fewer_training_admissions_than_min_admissions_keeps_nothing_and_scales_to_zero():
    spread = [10.0, 11.0, 12.5, 9.0, 10.5, 11.5]
    events = pd.concat([
        _admissions_rows(1, [31337.777], [100]),  # one row
        _admissions_rows(2, [111.111, 222.222], [101, 102]),  # two rows, two admissions
        _admissions_rows(3, spread * 3, [103] * 6 + [104] * 6 + [105] * 6),  # many rows, three admissions
        _admissions_rows(4, spread * 3, [100, 101, 102, 103, 104, 105] * 3),  # six admissions
        _admissions_rows(3, [50.0], [200], split="test"),
    ], ignore_index=True)
    events.index = pd.RangeIndex(2, len(events) + 2, name="line")
    stats = fit_raw(events, min_admissions=5)
    table = stats.table()
    assert stats.rare_items_ == (1, 2, 3) and table.loc[4, "rule"] == "normal"
    assert table.loc[[1, 2, 3], ["mean", "scale"]].to_numpy().tolist() == [[0.0, 1.0]] * 3
    assert table.loc[[1, 2, 3], "count"].tolist() == [1, 2, 18]  # rows are counted, values kept out
    saved = json.dumps(stats.as_json())
    assert not any(v in saved for v in ("31337.777", "111.111", "222.222", "166.666"))
    scaled = scale.apply_zscore(events, stats)
    rare = scaled["ITEMID"].isin([1, 2, 3])
    assert (scaled.loc[rare, "Z"] == 0).all() and (scaled.loc[rare, "Z_UNSEEN"] == 1).all()
    assert (scaled.loc[~rare, "Z_UNSEEN"] == 0).all() and scaled.loc[~rare, "Z"].abs().max() > 0
    (finding,) = [f for f in scale.scale_findings(scaled, stats, warn_bound=100.0) if f.check == "rare_item"]
    assert finding.severity == "info" and finding.count == 3
    assert "ITEMID 3 (18 train rows), 2 (2 train rows), 1 (1 train row)" in finding.message
    # With min_admissions 1, the one row's value is the mean: what the rule keeps out of stats.json.
    assert fit_raw(events, min_admissions=1).table().loc[1, "mean"] == 31337.777


def test_rare_items_are_the_same_from_parts_cut_by_admission():
    events = pd.concat([_admissions_rows(1, [1.0, 2.0, 3.0, 4.0], [100, 101, 102, 103]),
                        _admissions_rows(2, [5.0, 6.0, 7.0, 8.0, 9.0], [100, 101, 102, 103, 104])], ignore_index=True)
    events.index = pd.RangeIndex(2, len(events) + 2, name="line")
    whole = fit_raw(events, min_admissions=5)
    assert whole.rare_items_ == (1,)
    for parts in (2, 3):
        assert _fit_from_parts(events, parts, min_admissions=5) == whole


def test_stats_json_of_a_rare_item_round_trips_and_an_edited_one_is_refused():
    stats = fit_raw(_admissions_rows(1, [7.0, 8.0], [100, 101]), min_admissions=5)
    again = scale.ZScoreStats.from_json(json.loads(json.dumps(stats.as_json())))
    assert again == stats and again.rare_items_ == (1,) and again.min_admissions == 5
    edited = {**stats.as_json(), "mean": [7.5]}
    with pytest.raises(ValueError, match="rare ITEMID \\[1\\] must keep nothing of their values"):
        scale.ZScoreStats.from_json(edited)


# -- what stats.json records per item ---------------------------------------------------------------------
def test_stats_json_records_the_rule_and_rows_of_every_item_and_round_trips():
    events = lab_rows([(1, 10.0 + k, None, "train") for k in range(12)] + [(2, 7.0, None, "train"),
                      (2, 70.0, "abnormal", "train"), (2, 90.0, "abnormal", "train"), (3, 1.0, None, "train")])
    stats = fit_raw(events, min_rows=10, constant_bound=8.0)
    record = json.loads(json.dumps(stats.as_json()))
    assert record["items"] == [1, 2, 3] and record["rule"] == ["normal", "all", "constant"]
    assert record["count"] == [12, 3, 1] and record["normal_count"] == [12, 1, 1]
    assert (record["constant_items"], record["fallback_items"]) == ([3], [2])
    assert (record["min_rows"], record["constant_bound"]) == (10, 8.0)
    assert scale.ZScoreStats.from_json(record) == stats
    with pytest.raises(ValueError, match="unknown rule"):
        scale.ZScoreStats.from_json({**record, "rule": ["normal", "guess", "constant"]})


def test_shuffled_rows_give_identical_rules_and_stats_on_the_fallback_items():
    rng = np.random.default_rng(9)
    events = lab_rows([(NTPROBNP, 120.0, None, "train")]
                      + [(NTPROBNP, v, "abnormal", "train") for v in rng.uniform(400, 13_000, 27)]
                      + [(1, 5.0, None, "train")] * 5 + [(1, 8.0, None, "test")]
                      + [(2, v, None, "train") for v in rng.normal(3, 0.2, 15)])
    stats = fit_raw(events)
    for seed in range(3):
        again = fit_raw(events.sample(frac=1.0, random_state=seed))
        assert again == stats  # bit-identical
    assert stats.items_ == (1, 2, NTPROBNP) and stats.rule_ == ("constant", "normal", "all")


# -- z_warn_bound: the cause per item, and reference ranges ------------------------------------------------
def _warned_events() -> pd.DataFrame:
    """Item 1 fitted on 20 normal rows with a far value in val; item 2 with one normal row, scaled on all 6 rows."""
    normal = [(1, 20.0 + 0.1 * k, None, "train") for k in range(-10, 10)]
    few = [(2, 10.0, None, "train")] + [(2, v, "abnormal", "train") for v in (11.0, 12.0, 13.0, 14.0, 15.0)]
    return lab_rows(normal + few + [(1, 500.0, "abnormal", "val"), (2, 2_000.0, "abnormal", "test"),
                                    (1, 21.5, None, "test")])


def test_the_warning_bound_finding_names_the_cause_of_each_item():
    events = _warned_events()
    stats = fit_raw(events)
    assert stats.rule_ == ("normal", "all")
    scaled = scale.apply_zscore(events, stats)
    (warned,) = [f for f in scale.scale_findings(scaled, stats, warn_bound=100.0) if f.check == "z_warn_bound"]
    assert (warned.count, warned.lines, warned.severity) == (2, [28, 29], "warning")
    assert "1 (1 row; heavy tail on an item fitted on 20 normal rows: real; 'clip' or 'log' bounds it)" in warned.message
    assert ("2 (1 row; scaled on all its training rows (6 fitted) because only 1 normal row: relative to the spread of the "
            "abnormal values, which is real)") in warned.message
    assert "reference range" not in warned.message  # no ranges given


def test_reference_ranges_sort_rows_above_the_bound_into_real_extremes_and_suspect_scales():
    events = _warned_events()
    stats = fit_raw(events)
    scaled = scale.apply_zscore(events, stats)
    # line 28 (item 1, 500): range 18-22, 120 widths beyond: a real extreme.
    # line 29 (item 2, 2,000): range 0-500 (upper only counts: 1,500 / 500 = 3 widths): a suspect scale.
    ranges = pd.DataFrame({"REF_RANGE_LOWER": [18.0, 0.0, np.nan], "REF_RANGE_UPPER": [22.0, 500.0, np.nan]},
                          index=pd.Index([28, 29, 30], name="line"))
    (warned,) = [f for f in scale.scale_findings(scaled, stats, warn_bound=100.0, ranges=ranges, range_widths=10.0)
                 if f.check == "z_warn_bound"]
    assert warned.count == 2 and warned.lines == [28, 29]
    assert ("; against each row's own reference range: 1 real extreme(s) (more than 10 range widths beyond the "
            "nearer bound), 1 suspect scale(s) (within 10 widths: the item's scale is likely too small, "
            "ITEMID 2 (1 row)), 0 without a range (lines 28, 29)") in warned.message
    wider = [f for f in scale.scale_findings(scaled, stats, warn_bound=100.0, ranges=ranges, range_widths=2.0)
             if f.check == "z_warn_bound"][0]
    assert "2 real extreme(s)" in wider.message and "0 suspect scale(s)" in wider.message


def test_range_classes_per_row():
    line = pd.Index([2, 3, 4, 5, 6, 7, 8], name="line")
    values = pd.Series([100.0, 30.0, -50.0, 9.0, 12.0, 7.0, 100.0], index=line)
    ranges = pd.DataFrame({
        "REF_RANGE_LOWER": [0.0, 0.0, 0.0, np.nan, 5.0, np.nan, 3.0],
        "REF_RANGE_UPPER": [8.0, 8.0, 8.0, 5.0, 5.0, np.nan, 3.0],
    }, index=line)
    classes = scale.range_classes(values, ranges, range_widths=3.0)
    # 11.5 widths above; 2.75 above; 6.25 below; upper-only range of width 5: 0.8 above;
    # lower = upper = 5: width 5, 1.4 above; no range; lower = upper = 3: width 3, 32 above
    assert classes.tolist() == ["real extreme", "suspect scale", "real extreme", "suspect scale", "suspect scale",
                                "no range", "real extreme"]


def test_reference_ranges_are_read_only_where_labevents_has_them():
    frame = pd.DataFrame({"ITEMID": [1], "REF_RANGE_LOWER": [1.0], "REF_RANGE_UPPER": [2.0]})
    assert list(scale.reference_ranges(frame).columns) == ["REF_RANGE_LOWER", "REF_RANGE_UPPER"]
    assert scale.reference_ranges(frame.drop(columns="REF_RANGE_UPPER")) is None
    assert scale.reference_ranges(None) is None


def test_the_flow_passes_labevents_reference_ranges_to_the_warning_finding():
    tables = typed()
    labs = tables.labevents
    ast = labs["ITEMID"] == AST
    with_ranges = labs.assign(REF_RANGE_LOWER=pd.Series(0.0, index=labs.index).where(ast),
                              REF_RANGE_UPPER=pd.Series(40.0, index=labs.index).where(ast))
    prepared = prepare(dataclasses.replace(tables, labevents=with_ranges), raw_config())
    (warned,) = [f for f in prepared.findings if f.check == "z_warn_bound"]
    assert warned.count == 5 and "5 real extreme(s)" in warned.message and "0 suspect scale(s)" in warned.message
    (plain,) = [f for f in prepare(tables, raw_config()).findings if f.check == "z_warn_bound"]
    assert "reference range" not in plain.message and plain.lines == warned.lines


# -- the real MIMIC-III demo ----------------------------------------------------------------------------------
D_DIMER = 51196  # one normal training row among abnormal ones: z reached 8,900 with scale 1


@pytest.fixture(scope="module")
def demo(mimic3demo):
    """The demo validated by the flow with today's raw z and every item fitted ([encode] min_admissions 1: no item
    is rare), and its lab rows as the scale stage received them (read by the text stage's fit first)."""
    config = raw_config()
    config = dataclasses.replace(config, encode=dataclasses.replace(config.encode, min_admissions=1))
    validation = validate(mimic3demo, config)
    read = text.read_numbers(validation.tables.labevents, validation.prepared.fitted[text.NAME],
                             censored=config.clean.censored, text_values=config.clean.text_values)
    return validation.prepared, run_stages(dataclasses.replace(validation.tables, labevents=read), config).encoded


def test_on_the_mimic3_demo_no_varying_item_is_constant_and_fallback_z_stays_small(demo):
    prepared, encoded = demo
    stats, edges = prepared.fitted.get("scale"), prepared.edges
    spread = scale.fit_rows(encoded).values.groupby("ITEMID")["X"].agg(["min", "max"])
    constant = list(stats.constant_items_)
    assert constant and (spread.loc[constant, "min"] == spread.loc[constant, "max"]).all()
    assert not set(spread.index[spread["min"] < spread["max"]]) & set(constant)
    # 64 and 38 when scale 1 meant constant; bacteria (51463), once numeric and constant at its 'NONE' = 0, is
    # ordinal and varies, Calcium Oxalate Crystals (51469, 'FEW' twice) is ordinal and constant
    assert (len(constant), len(stats.fallback_items_)) == (43, 94)
    assert stats.table().loc[D_DIMER, "rule"] == "all"
    rule = edges["ITEMID"].map(stats.table()["rule"])
    z = edges["Z"].abs()
    assert z[edges["ITEMID"] == D_DIMER].max() < 2  # was 8,900
    assert z[rule.isin(["all", "all_unclipped"])].max() < 100  # 94 observed (51218: 2 train rows, far test values)
    assert z[rule == "constant"].max() <= stats.constant_bound
    assert z.max() < 1_200  # 1,113 observed: AST's real heavy tail, fitted on 90 normal rows
    assert stats.table().loc[z.groupby(edges["ITEMID"]).max().idxmax(), "rule"] == "normal"


# -- the default policy: a transform chosen per item, a soft bound, marks ------------------------------------------
def test_soft_bound_keeps_small_z_and_draws_the_rest_in_under_the_bound_in_order():
    z = pd.Series([-1e6, -40.0, -5.0, 0.0, 3.0, 5.0, 5.5, 20.0, 1_000.0, 1e6])
    drawn, marked = scale.soft_bound(z, 10.0, pd.Series(True, index=z.index))
    assert drawn.abs().max() < 10 and drawn.is_monotonic_increasing and drawn.is_unique
    assert drawn[z.abs() <= 5].tolist() == z[z.abs() <= 5].tolist()
    assert marked.tolist() == (z.abs() > 5).tolist()
    assert drawn[7] == pytest.approx(8.75)  # 5 + 5 * 15 / 20
    assert np.unique(drawn.astype("float32")).size == len(z)  # still apart in float32, as edge_attr holds them
    untouched, none = scale.soft_bound(z, 10.0, pd.Series(False, index=z.index))
    assert untouched.equals(z) and not none.any()


def test_auto_takes_asinh_for_a_right_skewed_item_and_nothing_for_a_symmetric_one():
    rng = np.random.default_rng(26)
    skewed = np.round(np.exp(rng.normal(3.0, 1.2, 300)), 1)  # AST-like: 20 IU/L with a tail into the thousands
    symmetric = np.round(rng.normal(140.0, 3.0, 300), 1)  # sodium
    events = lab_rows([(1, v, None, "train") for v in skewed] + [(2, v, None, "train") for v in symmetric]
                      + [(1, -3.0, None, "test"), (1, 50_000.0, None, "test")])
    stats = fit(events)
    assert dict(zip(stats.items_, stats.transforms)) == {1: "asinh", 2: "identity"}
    assert dict(zip(stats.items_, stats.policies)) == {1: "auto", 2: "auto"}
    z = scale.apply_zscore(events, stats)
    test = z[z["SPLIT"] == "test"]
    assert test["Z"].notna().all() and test["Z"].abs().max() < 10  # a negative value is no error under asinh
    assert test["Z_BOUNDED"].tolist() == [0, 1]


def test_the_default_keeps_every_items_order_and_marks_what_it_bounded():
    events = lab_rows([(1, v, None, "train") for v in (10.0, 11.0, 12.0, 11.5, 10.5, 9.0, 13.0, 12.5, 10.2, 11.1)]
                      + [(1, v, "abnormal", s) for v, s in ((400.0, "train"), (9_000.0, "val"), (20.0, "test"))]
                      + [(5, 7.0, None, "val")])
    scaled = scale.apply_zscore(events, fit(events))
    item = scaled[scaled["ITEMID"] == 1].sort_values("VALUENUM")
    assert item["Z"].is_monotonic_increasing and item["Z"].abs().max() < 10
    assert item.loc[item["VALUENUM"] >= 400, "Z_BOUNDED"].tolist() == [1, 1]
    unseen = scaled[scaled["ITEMID"] == 5]
    assert unseen[["Z", "Z_UNSEEN", "Z_BOUNDED"]].values.tolist() == [[0.0, 1, 0]]


def test_a_raw_policy_item_is_neither_transformed_nor_bounded():
    events = lab_rows([(1, v, None, "train") for v in (10.0, 11.0, 12.0)] + [(1, 400.0, None, "test")])
    stats = fit(events, policy={"default": "auto", 1: "none"})
    assert stats.transforms == ("identity",)
    assert scale.apply_zscore(events, stats)["Z"].max() == pytest.approx(389.0)


def test_policy_lines_resolve_by_itemid_then_category_then_fluid_then_default():
    labitems = pd.DataFrame({"ITEMID": [1, 2, 3, 4], "FLUID": ["Blood", "Blood", "Urine", "Blood"],
                             "CATEGORY": ["Chemistry", "Blood Gas", "Chemistry", "Hematology"]})
    policy = {"default": "linear", "blood": "log", "Blood Gas": "none", 4: "clip"}
    resolved = scale.item_policies(policy, labitems)
    assert scale.policy_of(pd.Series([1, 2, 3, 4, 99]), resolved).tolist() == ["log", "none", "linear", "clip",
                                                                               "linear"]
    assert scale.unmatched_groups({"Bloood": "log", "default": "none", 7: "log"}, labitems) == ["Bloood"]


def test_a_policy_group_that_names_nothing_is_a_warning_naming_it():
    config = raw_config(**{"Chemstry": "log"})
    (warned,) = [f for f in prepare(typed(), config).findings if f.check == "policy_group_unknown"]
    assert warned.severity == "warning" and "'Chemstry'" in warned.message and "CATEGORY and FLUID" in warned.message


def test_a_policy_that_is_not_one_of_the_policies_is_a_config_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[scale.policy]\ndefault = "squash"\n')
    with pytest.raises(Exception, match=r"\[scale.policy\] default must be one of auto, log, linear, clip, none"):
        load_config(path)


def test_stats_json_records_each_items_transform_policy_and_the_bound():
    events = lab_rows([(1, v, None, "train") for v in np.exp(np.linspace(0, 8, 50))]
                      + [(2, v, None, "train") for v in (1.0, 2.0, 3.0)])
    stats = fit(events, policy={2: "log"})
    saved = json.loads(json.dumps(stats.as_json()))
    assert (saved["transform"], saved["policy"], saved["bound"]) == (["asinh", "log1p"], ["auto", "log"], 10.0)
    assert scale.ZScoreStats.from_json(saved) == stats
    unbounded = fit(events, bound="none").as_json()
    assert unbounded["bound"] is None and scale.ZScoreStats.from_json(unbounded).bound == float("inf")


def test_the_default_fit_does_not_depend_on_row_order():
    rng = np.random.default_rng(7)
    events = lab_rows([(1 + n % 3, float(np.round(np.exp(rng.normal(2, 1)), 2)), None, "train") for n in range(300)])
    stats = fit(events)
    for seed in range(3):
        shuffled = events.sample(frac=1.0, random_state=seed)
        assert fit(shuffled) == stats
        pd.testing.assert_frame_equal(scale.apply_zscore(shuffled, stats).sort_index(),
                                      scale.apply_zscore(events, stats).sort_index())


@pytest.fixture(scope="module")
def demo_default(mimic3demo):
    """The demo through the flow with the default config."""
    return validate(mimic3demo, load_config()).prepared


def test_on_the_mimic3_demo_the_default_z_is_bounded_in_order_and_every_bounded_value_is_counted(demo_default):
    edges, stats = demo_default.edges, demo_default.fitted["scale"]
    numbers = edges[edges["VALUENUM"].notna()]
    assert numbers["Z"].abs().max() <= 10  # 1,113 with the raw z
    ordered = numbers.sort_values(["ITEMID", "VALUENUM", "Z"], kind="stable")
    steps = ordered.groupby("ITEMID")["Z"].diff().dropna()
    assert (steps >= 0).all()  # within an item, a larger value never gets a smaller z
    (bounded,) = [f for f in demo_default.findings if f.check == "z_bounded"]
    assert bounded.severity == "info" and "51274 PT (Blood)" in bounded.message
    unseen = numbers[numbers["Z_UNSEEN"] == 1]
    rare = unseen["ITEMID"].isin(stats.rare_items_)
    assert (unseen["Z"] == 0).all() and not unseen.loc[~rare, "ITEMID"].isin(stats.items_).any()
    # 83 rows of items unseen in train; 458 of the 101 items seen in fewer than 5 of the 103 training admissions
    # (three of them ordinal urine items: 51469, 51505, 51518)
    assert (int((~rare).sum()), int(rare.sum()), len(stats.rare_items_)) == (83, 458, 101)
    assert not numbers.loc[numbers["Z_UNSEEN"] == 0, "ITEMID"].isin(stats.rare_items_).any()
    assert "asinh" in stats.transforms and set(stats.policies) == {"auto"}


def test_the_rows_of_a_policy_are_those_policy_of_names():
    items = pd.Series([1, 2, 3, 4, 99])
    for policy in ({"default": "log", 2: "none", 3: "log"}, {"default": "auto", 2: "log"}, {}):
        for wanted in ("log", "auto", "none"):
            assert scale.rows_with(items, policy, wanted).tolist() == (scale.policy_of(items, policy) == wanted).tolist()
