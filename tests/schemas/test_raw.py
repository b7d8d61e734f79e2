"""schemas/raw.py: the text schemas find every bad point lazily, by column, check and source line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest

from schemas.catalogue import CHECKS
from schemas.raw import (
    DEFAULT_VALUENUM_ABS_BOUND,
    OPTIONAL,
    REQUIRED,
    Admissions,
    LabEvents,
    LabItems,
    RawAdmissions,
    RawLabEvents,
    RawLabItems,
    raw_labevents_schema,
)

LINES = pd.Index([2, 3, 4], name="line", dtype="int64")


def _text(columns: dict[str, list[str | None]]) -> pd.DataFrame:
    """A raw table as load.py hands it on: every column 'str', index = source line."""
    return pd.DataFrame(columns, index=LINES).astype("str")


def _labevents(**changes: list[str | None]) -> pd.DataFrame:
    columns = {
        "SUBJECT_ID": ["1", "2", "3"],
        "HADM_ID": ["100", None, "101"],
        "ITEMID": ["50912", "50971", "51221"],
        "CHARTTIME": ["2101-01-02 00:00:00", "2101-01-02T06:30", "2101-01-03 08:15:00"],
        "VALUE": ["1.2", "POS", None],
        "VALUENUM": ["1.2", None, "-3e2"],
        "FLAG": [None, "abnormal", "DELTA"],
        "COMMENTS": [None, "NEG.", None],
        "REF_RANGE_LOWER": ["0.5", None, " -1e3 "],
        "REF_RANGE_UPPER": ["1.2", None, "+10."],
    }
    return _text({**columns, **changes})


def _failures(schema, frame: pd.DataFrame) -> list[tuple[str, str, int]]:
    with pytest.raises(pa.errors.SchemaErrors) as excinfo:
        schema.validate(frame, lazy=True)
    cases = excinfo.value.failure_cases
    return sorted(zip(cases["column"], cases["check"], cases["index"].astype("int64")))


def test_good_labevents_pass_unchanged():
    frame = _labevents()
    validated = RawLabEvents.validate(frame, lazy=True)
    pd.testing.assert_frame_equal(validated, frame)


def test_optional_labevents_columns_may_be_absent():
    frame = _labevents().drop(columns=list(OPTIONAL["LABEVENTS"]))
    assert RawLabEvents.validate(frame, lazy=True).columns.tolist() == list(frame.columns)


def test_bad_labevents_report_every_column_check_and_line_at_once():
    frame = _labevents(
        SUBJECT_ID=["1", "0", "3"],
        HADM_ID=["123.0", None, "101"],
        ITEMID=["50912", "50971", "abc"],
        CHARTTIME=["10/23/64 21:09", "2101-01-02T06:30", "2101-01-03 08:15:00"],
        VALUENUM=["1.2", "inf", "<0.01"],
        FLAG=[None, "abnormal", "high"],
    )
    assert _failures(RawLabEvents, frame) == [
        ("CHARTTIME", "datetime_iso", 2),
        ("FLAG", "flag_value", 4),
        ("HADM_ID", "id_float_format", 2),
        ("ITEMID", "id_positive_integer", 4),
        ("SUBJECT_ID", "id_positive_integer", 3),
        ("VALUENUM", "valuenum_finite", 3),
        ("VALUENUM", "valuenum_numeric", 4),
    ]


def test_failure_cases_carry_the_failing_text():
    frame = _labevents(VALUENUM=["1.2", "1e309", None])
    with pytest.raises(pa.errors.SchemaErrors) as excinfo:
        RawLabEvents.validate(frame, lazy=True)
    cases = excinfo.value.failure_cases
    assert cases[["column", "check", "failure_case", "index"]].values.tolist() == [
        ["VALUENUM", "valuenum_finite", "1e309", 3]
    ]


def test_empty_required_values_fail_as_not_nullable():
    frame = _labevents(ITEMID=["50912", None, "51221"], CHARTTIME=[None, "2101-01-02T06:30", "2101-01-03 08:15:00"])
    assert _failures(RawLabEvents, frame) == [("CHARTTIME", "not_nullable", 2), ("ITEMID", "not_nullable", 3)]


def test_missing_required_column_fails_at_table_level():
    frame = _labevents().drop(columns=["ITEMID"])
    with pytest.raises(pa.errors.SchemaErrors) as excinfo:
        RawLabEvents.validate(frame, lazy=True)
    cases = excinfo.value.failure_cases
    assert cases["check"].tolist() == ["column_in_dataframe"]
    assert cases["failure_case"].tolist() == ["ITEMID"]
    assert cases["index"].isna().all()


def test_default_bound_is_1e10():
    assert DEFAULT_VALUENUM_ABS_BOUND == 1e10
    RawLabEvents.validate(_labevents(VALUENUM=["1e10", "-1e10", None]), lazy=True)
    assert _failures(RawLabEvents, _labevents(VALUENUM=["1e10", "-2e10", None])) == [
        ("VALUENUM", "valuenum_bound(bound=10000000000.0)", 3)
    ]


def test_configured_bound_accepts_the_bound_and_rejects_beyond_it():
    schema = raw_labevents_schema(valuenum_abs_bound=5)
    schema.validate(_labevents(VALUENUM=["5", "-5", "5.0"]), lazy=True)
    assert _failures(schema, _labevents(VALUENUM=["5", "6", "-6"])) == [
        ("VALUENUM", "valuenum_bound(bound=5)", 3),
        ("VALUENUM", "valuenum_bound(bound=5)", 4),
    ]


def test_configured_bound_keeps_the_other_valuenum_checks_in_order():
    schema = raw_labevents_schema(valuenum_abs_bound=5)
    checks = schema.columns["VALUENUM"].checks
    assert [check.name for check in checks] == ["valuenum_numeric", "valuenum_finite", "valuenum_bound"]
    assert checks[2].statistics == {"bound": 5}
    # The model itself keeps its default.
    assert RawLabEvents.to_schema().columns["VALUENUM"].checks[2].statistics == {"bound": DEFAULT_VALUENUM_ABS_BOUND}


@pytest.mark.parametrize("column", ["REF_RANGE_LOWER", "REF_RANGE_UPPER"])
def test_ref_range_bounds_must_be_finite_numbers_by_the_valuenum_grammar(column):
    frame = _labevents(**{column: ["<0.5", "inf", "1e309"]})
    assert _failures(RawLabEvents, frame) == [(column, "ref_range_numeric", 2), (column, "ref_range_numeric", 3),
                                              (column, "ref_range_numeric", 4)]
    assert CHECKS["ref_range_numeric"].severity == "warning"  # metadata: never an error by default


def test_comments_take_any_text():
    frame = _labevents(COMMENTS=["UNABLE TO REPORT.", "___", "line one\nline two"])
    pd.testing.assert_frame_equal(RawLabEvents.validate(frame, lazy=True), frame)


def test_raw_admissions_and_labitems():
    admissions = _text({
        "SUBJECT_ID": ["1", None, "3"],
        "HADM_ID": ["100", "101", "102.0"],
        "ADMITTIME": ["2101-01-01 00:00:00", "2101-01-01 00:00:00", "2101-01-01 00:00:00"],
        "DISCHTIME": ["2101-01-05 00:00:00", "2101-02-30 00:00:00", "2101-01-05 00:00:00"],
    })
    assert _failures(RawAdmissions, admissions) == [("DISCHTIME", "datetime_iso", 3), ("HADM_ID", "id_float_format", 4)]
    items = _text({"ITEMID": ["50912", "-1", "51221"], "FLUID": ["Blood", None, "Urine"], "CATEGORY": [None] * 3})
    assert _failures(RawLabItems, items) == [("ITEMID", "id_positive_integer", 3)]


@pytest.mark.parametrize("model", [RawAdmissions, RawLabItems, RawLabEvents], ids=lambda m: m.__name__)
def test_raw_models_describe_the_declared_columns_with_catalogued_checks(model):
    table = {RawAdmissions: "ADMISSIONS", RawLabItems: "D_LABITEMS", RawLabEvents: "LABEVENTS"}[model]
    schema = model.to_schema()
    assert set(schema.columns) == set(REQUIRED[table]) | set(OPTIONAL[table])
    for name, column in schema.columns.items():
        assert column.required == (name in REQUIRED[table]), name
        assert all(check.name in CHECKS for check in column.checks), name


# -- typed frames ------------------------------------------------------------------------------------
def _typed_labevents(valuenum: list[float]) -> pd.DataFrame:
    return pd.DataFrame({
        "HADM_ID": pd.array([100, None, 101], dtype="Int64"),
        "ITEMID": pd.array([50912, 50971, 51221], dtype="Int64"),
        "CHARTTIME": pd.Series(pd.to_datetime(["2101-01-02", "2101-01-03", None]), index=LINES).astype(
            "datetime64[ns]").to_numpy(),
        "VALUE": pd.array(["1.2", "POS", None], dtype="str"),
        "VALUENUM": np.array(valuenum, dtype="float64"),
        "FLAG": pd.array([None, "abnormal", None], dtype="str"),
        "REJECT": pd.array([None, None, "datetime_iso"], dtype="str"),
    }, index=LINES)


def test_typed_labevents_accept_finite_and_null_values():
    frame = _typed_labevents([1.2, np.nan, -300.0])
    pd.testing.assert_frame_equal(LabEvents.validate(frame, lazy=True), frame)


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_typed_labevents_reject_an_infinite_valuenum(bad):
    frame = _typed_labevents([1.2, bad, -300.0])
    assert _failures(LabEvents, frame) == [("VALUENUM", "finite", 3)]


def test_typed_labevents_reject_wrong_dtypes_and_nonpositive_ids():
    frame = _typed_labevents([1.2, np.nan, 3.0]).assign(ITEMID=pd.array([0, 1, 2], dtype="Int64"))
    assert _failures(LabEvents, frame) == [("ITEMID", "greater_than(0)", 2)]
    with pytest.raises(pa.errors.SchemaErrors, match="float64"):
        LabEvents.validate(frame.assign(ITEMID=pd.array([1, 1, 2], dtype="Int64"),
                                        VALUENUM=frame["VALUENUM"].astype("float32")), lazy=True)


def test_typed_labevents_accept_comments_and_reference_ranges():
    frame = _typed_labevents([1.2, np.nan, -300.0]).assign(
        COMMENTS=pd.array([None, "NEG.", None], dtype="str"),
        REF_RANGE_LOWER=np.array([0.5, np.nan, -1e3]), REF_RANGE_UPPER=np.array([1.2, np.nan, 10.0]))
    pd.testing.assert_frame_equal(LabEvents.validate(frame, lazy=True), frame)
    assert _failures(LabEvents, frame.assign(REF_RANGE_UPPER=np.array([1.2, np.inf, 10.0]))) == [
        ("REF_RANGE_UPPER", "finite", 3)]


def test_typed_admissions_and_labitems_accept_parsed_frames():
    admissions = pd.DataFrame({
        "SUBJECT_ID": pd.array([1, 2, None], dtype="Int64"),
        "HADM_ID": pd.array([100, 101, 102], dtype="Int64"),
        "ADMITTIME": pd.to_datetime(["2101-01-01", "2101-01-01", None]).astype("datetime64[ns]"),
        "DISCHTIME": pd.to_datetime(["2101-01-05", None, "2101-01-05"]).astype("datetime64[ns]"),
        "REJECT": pd.array([None, "datetime_iso", None], dtype="str"),
    }, index=LINES)
    Admissions.validate(admissions, lazy=True)
    assert _failures(Admissions, admissions.assign(HADM_ID=pd.array([100, -1, 102], dtype="Int64"))) == [
        ("HADM_ID", "greater_than(0)", 3)
    ]
    items = pd.DataFrame({
        "ITEMID": pd.array([50912, None, 51221], dtype="Int64"),
        "FLUID": pd.array(["Blood", None, "Urine"], dtype="str"),
        "CATEGORY": pd.array([None, None, "Chemistry"], dtype="str"),
        "REJECT": pd.array([None, "id_positive_integer", None], dtype="str"),
    }, index=LINES)
    LabItems.validate(items, lazy=True)
