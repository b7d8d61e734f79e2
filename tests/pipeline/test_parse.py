"""pipeline/parse.py: the raw stage checks every table lazily and parses text into typed frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.load import read_table
from pipeline.parse import check_raw
from schemas.errors import ValidationDisabled


@pytest.fixture(scope="module")
def text(request):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "data" / "sample"
    return {t: read_table(sample / f"{t}.csv", t).frame for t in ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")}


def _checks(result):
    return sorted((f.check, f.table, f.column, f.count) for f in result.findings)


def test_sample_parses_to_typed_frames_with_only_expected_warnings(text):
    result = check_raw(text)
    events = result.tables.labevents
    assert str(events["HADM_ID"].dtype) == "Int64" and str(events["ITEMID"].dtype) == "Int64"
    assert str(events["CHARTTIME"].dtype) == "datetime64[ns]"
    assert events["VALUENUM"].dtype == np.float64
    assert np.isfinite(events["VALUENUM"].dropna()).all()
    assert events["REJECT"].isna().all()
    assert events.index.equals(text["LABEVENTS"].index)
    assert {f.severity for f in result.findings} == {"warning"}
    assert {f.check for f in result.findings} == {"hadm_id_missing", "charttime_outside_stay"}
    outpatient = next(f for f in result.findings if f.check == "hadm_id_missing")
    assert outpatient.count == int(text["LABEVENTS"]["HADM_ID"].isna().sum())


def test_bad_values_are_reported_nulled_and_rejected(text):
    events = text["LABEVENTS"].copy()
    lines = events.index[[3, 4, 5]]
    events.loc[lines[0], "VALUENUM"] = "inf"
    events.loc[lines[1], "ITEMID"] = "12abc"
    events.loc[lines[2], "CHARTTIME"] = "10/23/64 21:09"
    result = check_raw({**text, "LABEVENTS": events})
    typed = result.tables.labevents
    assert pd.isna(typed.loc[lines[0], "VALUENUM"]) and typed.loc[lines[0], "REJECT"] == "valuenum_finite"
    assert pd.isna(typed.loc[lines[1], "ITEMID"]) and typed.loc[lines[1], "REJECT"] == "id_positive_integer"
    assert pd.isna(typed.loc[lines[2], "CHARTTIME"]) and typed.loc[lines[2], "REJECT"] == "datetime_iso"
    assert typed["REJECT"].notna().sum() == 3
    by_check = {f.check: f for f in result.findings if f.severity == "error"}
    assert by_check["valuenum_finite"].lines == [int(lines[0])]
    assert "inf ×1" in by_check["valuenum_finite"].message
    assert by_check["datetime_iso"].lines == [int(lines[2])]
    assert "2-digit-year date" in by_check["datetime_iso"].message
    assert "12abc" not in " ".join(f.message for f in result.findings)


def test_every_finding_of_a_table_comes_back_at_once(text):
    events = text["LABEVENTS"].copy()
    events.iloc[10, events.columns.get_loc("VALUENUM")] = "-inf"
    events.iloc[11, events.columns.get_loc("FLAG")] = "odd"
    events.iloc[12, events.columns.get_loc("HADM_ID")] = "-4"
    admissions = text["ADMISSIONS"].copy()
    admissions.iloc[0, admissions.columns.get_loc("ADMITTIME")] = "2101-13-01 00:00:00"
    result = check_raw({**text, "LABEVENTS": events, "ADMISSIONS": admissions})
    found = {(f.table, f.check) for f in result.findings}
    assert {("LABEVENTS", "valuenum_finite"), ("LABEVENTS", "flag_value"), ("LABEVENTS", "id_positive_integer"),
            ("ADMISSIONS", "datetime_iso")} <= found


def test_downgraded_bound_keeps_the_value(text):
    events = text["LABEVENTS"].copy()
    line = events.index[7]
    events.loc[line, "VALUENUM"] = "5e10"
    strict = check_raw({**text, "LABEVENTS": events})
    assert pd.isna(strict.tables.labevents.loc[line, "VALUENUM"])
    lenient = check_raw({**text, "LABEVENTS": events}, severity={"valuenum_bound": "warning"})
    assert lenient.tables.labevents.loc[line, "VALUENUM"] == 5e10
    assert pd.isna(lenient.tables.labevents.loc[line, "REJECT"])


def test_configured_bound_applies(text):
    result = check_raw(text, valuenum_abs_bound=100.0)
    bound = next(f for f in result.findings if f.check == "valuenum_bound")
    expected = pd.to_numeric(text["LABEVENTS"]["VALUENUM"]).abs().gt(100).sum()
    assert bound.count == expected > 0


def test_missing_valuenum_is_derived_from_value_strictly(text):
    events = text["LABEVENTS"].drop(columns="VALUENUM")
    result = check_raw({**text, "LABEVENTS": events})
    typed = result.tables.labevents
    censored = events["VALUE"].str.startswith("<").fillna(False)
    assert censored.any()
    assert typed.loc[censored[censored].index, "VALUENUM"].isna().all()
    numeric = pd.to_numeric(events["VALUE"], errors="coerce")
    pd.testing.assert_series_equal(typed["VALUENUM"], numeric.astype("float64"), check_names=False)
    derived = next(f for f in result.findings if f.check == "valuenum_derived")
    assert derived.count == int(numeric.notna().sum()) and "censored" in derived.message


def test_shuffled_rows_give_the_same_findings_and_values(text):
    events = text["LABEVENTS"]
    shuffled = events.sample(frac=1.0, random_state=3)
    first = check_raw(text)
    second = check_raw({**text, "LABEVENTS": shuffled})
    assert _checks(first) == _checks(second)
    pd.testing.assert_frame_equal(first.tables.labevents, second.tables.labevents.sort_index())
    assert [f.message for f in check_raw(text).findings] == [f.message for f in first.findings]


def test_missing_reference_table_skips_only_its_relations(text):
    result = check_raw({"LABEVENTS": text["LABEVENTS"], "D_LABITEMS": text["D_LABITEMS"]})
    assert result.tables.admissions is None
    assert not any(f.check in ("subject_mismatch", "charttime_outside_stay") for f in result.findings)


def test_each_checked_column_is_parsed_once_for_its_checks_and_the_typed_table(text, monkeypatch):
    import schemas.checks as checks
    from pipeline.parse import check_part

    parsed: list[str] = []

    def counted(kind):
        parse = kind.of.__func__

        def of(cls, column):
            parsed.append(column.name)
            return parse(cls, column)
        return classmethod(of)

    for kind in (checks.ParsedIds, checks.ParsedTimes, checks.ParsedNumbers, checks.ParsedFlags):
        monkeypatch.setattr(kind, "of", counted(kind))
    events = text["LABEVENTS"].copy()
    events.iloc[[3, 7], events.columns.get_loc("VALUENUM")] = ["inf", "abc"]  # failures need no second parse
    part = check_part("LABEVENTS", events)
    assert sorted(parsed) == ["CHARTTIME", "FLAG", "HADM_ID", "ITEMID", "SUBJECT_ID", "VALUENUM"]
    assert {"valuenum_finite", "valuenum_numeric"} <= set(part.failures["check"])


def test_refuses_to_run_with_pandera_disabled(text):
    from pandera.config import config_context

    with config_context(validation_enabled=False), pytest.raises(ValidationDisabled, match="PANDERA_VALIDATION"):
        check_raw(text)


@settings(max_examples=60)
@given(st.text(max_size=12))
def test_any_text_in_valuenum_is_a_finite_number_or_reported(text_value):
    events = pd.DataFrame(
        {"HADM_ID": ["100"], "ITEMID": ["50912"], "CHARTTIME": ["2101-01-01 10:00:00"], "VALUE": ["x"],
         "FLAG": [None], "VALUENUM": [text_value]},
        index=pd.Index([2], name="line"),
    ).astype("str")
    result = check_raw({"LABEVENTS": events})
    value = result.tables.labevents["VALUENUM"].iloc[0]
    reported = {f.check for f in result.findings} & {"valuenum_numeric", "valuenum_finite", "valuenum_bound"}
    if pd.isna(value):
        assert reported or events["VALUENUM"].isna().iloc[0] or not text_value.strip()
    else:
        assert np.isfinite(value) and abs(value) <= 1e10 and not reported
