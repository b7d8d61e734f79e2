"""pipeline/stages/fill.py: every null in a tensor column is filled by a declared policy, fitted on train, or refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.stages import fill
from pipeline.config import load_config
from pipeline.stages.fill import FillPolicy
from schemas.errors import SAMPLE_CAP, StageError
from tests.pipeline.stages.sample import sample_stages, shuffled

DEFAULTS = load_config().fill
START = pd.Timestamp("2150-03-01 08:00:00")


def _events(rows: list[tuple]) -> pd.DataFrame:
    """Scaled lab rows (the fill stage's input) from (line, HADM_ID, ITEMID, hour, KIND, SPLIT, Z, CODE).

    A row with a Z carries it as VALUENUM too; a categorical row without one has VALUE 'NEG'.
    """
    frame = pd.DataFrame(rows, columns=["line", "HADM_ID", "ITEMID", "HOUR", "KIND", "SPLIT", "Z", "CODE"])
    z = frame["Z"].astype("float64")
    return pd.DataFrame({
        "HADM_ID": frame["HADM_ID"].astype("int64"),
        "ITEMID": frame["ITEMID"].astype("int64"),
        "CHARTTIME": (START + pd.to_timedelta(frame["HOUR"], unit="h")).astype("datetime64[ns]"),
        "VALUE": pd.Series(np.where(z.notna(), z.astype("str"), "NEG"), dtype="str"),
        "VALUENUM": z,
        "FLAG": pd.Series(pd.NA, index=frame.index, dtype="str"),
        "KIND": frame["KIND"].astype("str"),
        "SPLIT": frame["SPLIT"].astype("str"),
        "CODE": pd.array(frame["CODE"], dtype="Int64"),
        "Z": z,
    }).set_axis(pd.Index(frame["line"].astype("int64"), name="line"))


def _fill(events: pd.DataFrame, policies: dict[str, FillPolicy]):
    return fill.apply_fill(events, fill.fit_fill(events, policies=policies), policies)


@pytest.fixture(scope="module")
def scaled() -> pd.DataFrame:
    return sample_stages().scaled


@pytest.fixture
def train_and_val() -> pd.DataFrame:
    """Numeric rows whose Z differ between train (1, 3, 20) and val (100, 200); categorical rows have no Z."""
    return _events([
        (2, 1, 10, 0, "numeric", "train", 1.0, None),
        (3, 1, 10, 1, "numeric", "train", 3.0, None),
        (4, 2, 10, 0, "numeric", "train", 20.0, None),
        (5, 3, 10, 0, "numeric", "val", 100.0, None),
        (6, 3, 10, 1, "numeric", "val", 200.0, None),
        (7, 1, 20, 0, "categorical", "train", None, 1),
        (8, 3, 20, 0, "categorical", "val", None, 2),
    ])


@pytest.fixture
def charted() -> pd.DataFrame:
    """Rows of one categorical item whose file order is not their CHARTTIME order; some have a Z, some not."""
    return _events([
        (2, 1, 10, 3, "categorical", "train", None, 1),  # -> 1.5, the Z at hour 2 (not line 3's, at hour 0)
        (3, 1, 10, 0, "categorical", "train", 0.5, 1),
        (4, 1, 10, 2, "categorical", "train", 1.5, 1),
        (5, 1, 11, 4, "categorical", "train", None, 1),  # -> -2.0, its own item's
        (6, 1, 11, 1, "categorical", "train", -2.0, 1),
        (7, 2, 10, 5, "categorical", "val", 9.0, 1),
        (8, 2, 10, 6, "categorical", "val", None, 1),  # -> 9.0, its own admission's
    ])


# -- defaults on the sample --------------------------------------------------------------------------
def test_default_policies_leave_no_nulls_and_count_what_they_filled(scaled):
    nulls = {column: int(scaled[column].isna().sum()) for column in ("Z", "CODE")}
    assert nulls["Z"] > 0 and nulls["CODE"] > 0
    findings = {f.column: f for f in fill.fill_findings(scaled, DEFAULTS)}
    assert {column: f.count for column, f in findings.items()} == nulls
    # Every null is one a row does not have by construction: a numeric row's CODE, a categorical row's Z.
    assert nulls["Z"] == int(scaled["VALUENUM"].isna().sum()) and nulls["CODE"] == int(scaled["VALUENUM"].notna().sum())
    assert all(f.check == "structural_fill" and f.stage == "fill" for f in findings.values())
    assert "values of categorical rows (no number by construction) filled by policy 'constant' with 0" in \
        findings["Z"].message
    assert "indicator" not in findings["Z"].message
    kept = _fill(scaled, DEFAULTS)
    filled = kept.frame
    assert filled[["Z", "CODE"]].notna().all().all()
    assert kept.quarantine.empty and kept.steps == () and filled.index.equals(scaled.index)
    assert (filled.loc[scaled["Z"].isna(), "Z"] == 0.0).all()
    assert (filled.loc[scaled["CODE"].isna(), "CODE"] == 0).all()
    pd.testing.assert_series_equal(filled.loc[scaled["Z"].notna(), "Z"], scaled["Z"].dropna())
    assert str(filled["CODE"].dtype) == "Int64" and filled["Z"].dtype == np.float64
    assert "Z_MISSING" not in filled and "CODE_MISSING" not in filled


def test_fill_does_not_change_its_input(scaled):
    before = scaled.copy()
    _fill(scaled, {**DEFAULTS, "Z": FillPolicy("constant", 0.0, indicator=True)})
    pd.testing.assert_frame_equal(scaled, before)


def test_indicator_marks_the_rows_that_were_missing(scaled):
    policies = {"Z": FillPolicy("constant", 0.0, indicator=True), "CODE": FillPolicy("constant", 0.0, indicator=True)}
    filled = _fill(scaled, policies).frame
    for column in ("Z", "CODE"):
        indicator = filled[f"{column}_MISSING"]
        assert indicator.dtype == np.int8
        assert set(indicator) == {0, 1}
        assert (indicator == scaled[column].isna().astype("int8")).all()
    assert "indicator column" in fill.fill_findings(scaled, policies)[0].message


# -- policies fitted on train ------------------------------------------------------------------------
@pytest.mark.parametrize(("policy", "expected"), [("mean", 8.0), ("median", 3.0)])
def test_mean_and_median_come_from_train_rows_only(train_and_val, policy, expected):
    policies = {"Z": FillPolicy(policy), "CODE": FillPolicy("constant", 0.0)}
    values = fill.fit_fill(train_and_val, policies=policies)
    assert values.value("Z") == expected  # with the val rows it would be 64.8 or 20
    assert values.as_json() == {"CODE": 0.0, "Z": expected}
    filled = fill.apply_fill(train_and_val, values, policies).frame
    assert filled.loc[[7, 8], "Z"].tolist() == [expected, expected]
    assert filled.loc[[2, 3, 4, 5, 6], "Z"].tolist() == [1.0, 3.0, 20.0, 100.0, 200.0]
    assert filled.loc[[2, 3, 4, 5, 6], "CODE"].tolist() == [0] * 5


@pytest.mark.parametrize("policy", ["mean", "median"])
@pytest.mark.parametrize(("value", "shown"), [(np.inf, "inf"), (-np.inf, "-inf"), (np.nan, "missing")],
                         ids=["inf", "-inf", "nan"])
def test_a_mean_or_median_refuses_a_training_z_that_is_not_finite_naming_its_item_and_line(train_and_val, policy,
                                                                                          value, shown):
    """Line 3 is a numeric training row: its Z is needed (it has a VALUENUM), and an inf is never a value."""
    train_and_val.loc[3, "Z"] = value
    with pytest.raises(StageError) as caught:
        fill.fit_fill(train_and_val, policies={"Z": FillPolicy(policy), "CODE": FillPolicy("constant", 0.0)})
    error = caught.value
    assert (error.stage, error.side, error.check, error.column, error.lines) == (
        "fill", "input", "fit_finite", "Z", [3])
    assert f"{shown} ×1. In ITEMID 10 (1 row) of the rows handed to fill.fit_fill" in str(error)


def test_a_mean_reads_a_categorical_rows_empty_z_and_leaves_val_rows_to_the_stage(train_and_val):
    train_and_val.loc[5, "Z"] = np.inf  # a val row: not the fit's
    policies = {"Z": FillPolicy("mean"), "CODE": FillPolicy("constant", 0.0)}
    assert fill.fit_fill(train_and_val, policies=policies).value("Z") == 8.0  # line 7's Z is null: categorical


def test_a_mean_code_refuses_a_categorical_training_row_without_one(train_and_val):
    policies = {"CODE": FillPolicy("mean"), "Z": FillPolicy("constant", 0.0)}
    assert fill.fit_fill(train_and_val, policies=policies).value("CODE") == 1.0  # numeric rows have none
    train_and_val.loc[7, "CODE"] = pd.NA
    with pytest.raises(StageError) as caught:
        fill.fit_fill(train_and_val, policies=policies)
    assert (caught.value.check, caught.value.column, caught.value.lines) == ("fit_finite", "CODE", [7])
    assert "In ITEMID 20 (1 row)" in str(caught.value)


def test_a_mean_of_a_frame_without_valuenum_names_the_column_constants_read_no_column(train_and_val):
    rows = train_and_val.drop(columns=["VALUENUM", "SPLIT"])
    with pytest.raises(StageError) as caught:
        fill.fit_fill(rows, policies={"Z": FillPolicy("mean"), "CODE": FillPolicy("constant", 0.0)})
    assert "2 columns missing: VALUENUM (float64): the result as a number" in str(caught.value)
    assert "; SPLIT (str): the split of its admission" in str(caught.value)
    assert fill.fit_fill(rows).as_json() == {"CODE": 0.0, "Z": 0.0}


def test_drop_quarantines_the_rows_with_the_reason(scaled):
    policies = {"Z": FillPolicy("drop"), "CODE": FillPolicy("constant", 0.0)}
    kept = _fill(scaled, policies)
    missing = scaled.index[scaled["Z"].isna()]
    reason = "fill: Z missing (policy 'drop')"
    assert sorted(kept.quarantine.index) == sorted(missing)
    assert set(kept.quarantine["REASON"]) == {reason} and set(kept.quarantine["STAGE"]) == {"fill"}
    assert (kept.quarantine["ITEMID"] == scaled.loc[kept.quarantine.index, "ITEMID"]).all()
    assert not kept.frame.index.isin(missing).any() and kept.frame["Z"].notna().all()
    (step,) = kept.steps
    assert (step.stage, step.step) == ("fill", reason)
    assert (step.rows_in, step.rows_out, step.quarantined) == (len(scaled), len(scaled) - len(missing), len(missing))


def test_ffill_takes_the_previous_charttime_of_the_same_admission_and_item(charted):
    policies = {"Z": FillPolicy("ffill", indicator=True), "CODE": FillPolicy("constant", 0.0)}
    filled = _fill(charted, policies).frame
    assert filled["Z"].to_dict() == {2: 1.5, 3: 0.5, 4: 1.5, 5: -2.0, 6: -2.0, 7: 9.0, 8: 9.0}
    assert filled["Z_MISSING"].to_dict() == {2: 1, 3: 0, 4: 0, 5: 1, 6: 0, 7: 0, 8: 1}


def test_ffill_without_an_earlier_value_in_the_admission_is_refused(charted):
    first_of_admission = _events([(9, 2, 10, 4, "categorical", "val", None, 1)])  # before hour 5; admission 1 has 10
    events = pd.concat([charted, first_of_admission])
    with pytest.raises(StageError) as caught:
        _fill(events, {"Z": FillPolicy("ffill"), "CODE": FillPolicy("constant", 0.0)})
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("fill", "output", "fill_left_nulls", "Z")
    assert error.lines == [9] and error.count == 1
    assert "policy 'ffill' left them" in str(error)


# -- bad input and bad policies ----------------------------------------------------------------------
def test_a_constant_code_that_is_a_real_code_is_refused(scaled):
    with pytest.raises(StageError) as caught:
        _fill(scaled, {"Z": FillPolicy("constant", 0.0), "CODE": FillPolicy("constant", 1.0)})
    error = caught.value
    real = scaled.index[(scaled["CODE"] == 1).fillna(False)]
    assert len(real) > 0
    assert (error.stage, error.side, error.check, error.column) == ("fill", "input", "fill_collides", "CODE")
    assert error.count == len(real)
    assert error.lines == real[:SAMPLE_CAP].tolist()
    assert f"fill value 1 is a real code in {len(real)} rows" in str(error)


def test_a_positive_constant_code_is_refused_even_where_no_row_has_it(train_and_val):
    with pytest.raises(StageError) as caught:
        _fill(train_and_val, {"Z": FillPolicy("constant", 0.0), "CODE": FillPolicy("constant", 999.0)})
    assert caught.value.check == "fill_collides"
    assert "can be a real code of an item's vocabulary" in str(caught.value)


@pytest.mark.parametrize("value", [-1.0, 0.5])
def test_a_constant_code_that_cannot_be_a_code_is_refused(train_and_val, value):
    with pytest.raises(StageError) as caught:
        _fill(train_and_val, {"Z": FillPolicy("constant", 0.0), "CODE": FillPolicy("constant", value)})
    assert (caught.value.check, caught.value.column) == ("fill_collides", "CODE")
    assert "is not a valid code" in str(caught.value)


def test_a_column_with_nulls_and_no_policy_is_refused(scaled):
    with pytest.raises(StageError) as caught:
        _fill(scaled, {"CODE": FillPolicy("constant", 0.0)})
    error = caught.value
    missing = scaled.index[scaled["Z"].isna()]
    assert (error.stage, error.check, error.column) == ("fill", "fill_left_nulls", "Z")
    assert error.count == len(missing) and error.lines == missing[:SAMPLE_CAP].tolist()
    assert "Declare a policy for Z in [fill.Z]" in str(error)


def test_a_column_without_nulls_needs_no_policy(train_and_val):
    events = train_and_val.drop(index=[7, 8])  # no categorical rows: Z is complete
    filled = _fill(events, {"CODE": FillPolicy("constant", 0.0)}).frame
    pd.testing.assert_series_equal(filled["Z"], events["Z"])


def test_unscaled_events_are_refused_on_input(scaled):
    with pytest.raises(StageError) as caught:
        _fill(scaled.drop(columns="Z"), DEFAULTS)
    assert (caught.value.stage, caught.value.side, caught.value.check) == ("fill", "input", "column_in_dataframe")


# -- determinism -------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["mean", "median", "drop"])
def test_shuffled_rows_give_the_same_fill(scaled, policy):
    policies = {"Z": FillPolicy(policy, indicator=True), "CODE": FillPolicy("constant", 0.0)}
    mixed_up = shuffled(scaled, 5)
    assert fill.fit_fill(mixed_up, policies=policies) == fill.fit_fill(scaled, policies=policies)
    first, second = _fill(scaled, policies), _fill(mixed_up, policies)
    pd.testing.assert_frame_equal(first.frame, second.frame.sort_index())
    pd.testing.assert_frame_equal(first.quarantine.sort_index(), second.quarantine.sort_index())
    assert first.steps == second.steps


def test_shuffled_rows_give_the_same_ffill(charted):
    policies = {"Z": FillPolicy("ffill"), "CODE": FillPolicy("constant", 0.0)}
    pd.testing.assert_frame_equal(_fill(charted, policies).frame, _fill(shuffled(charted, 3), policies).frame.sort_index())


def test_ffill_of_rows_charted_at_the_same_time_does_not_depend_on_row_order():
    events = _events([
        (2, 1, 10, 0, "categorical", "train", 0.5, 1),
        (3, 1, 10, 1, "categorical", "train", 1.5, 1),
        (4, 1, 10, 1, "categorical", "train", None, 1),  # charted with line 3
    ])
    policies = {"Z": FillPolicy("ffill"), "CODE": FillPolicy("constant", 0.0)}
    in_file_order = _fill(events, policies).frame
    reversed_order = _fill(events.iloc[::-1], policies).frame.sort_index()
    pd.testing.assert_frame_equal(in_file_order, reversed_order)
