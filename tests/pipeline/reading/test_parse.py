"""pipeline/reading/parse.py: the raw stage checks every table lazily and parses text into typed frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reading.load import read_table
from pipeline.reading.parse import check_raw
from schemas.errors import ValidationDisabled
from tests import mimic4


@pytest.fixture(scope="module")
def text(request):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[3] / "data" / "sample"
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
    # Off by default (the clean and bucket stages count these rows), so the report drops them.
    assert {f.severity for f in result.findings} == {"off"}
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
    from pipeline.reading.parse import check_part

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


# -- MIMIC-IV: comments and reference ranges ----------------------------------------------------------
@pytest.fixture(scope="module")
def mimic4_text(tmp_path_factory):
    """The MIMIC-IV-shaped tables as text, with three unusable reference range bounds planted."""
    data = mimic4.dataset()
    rows = mimic4.lines_where(data, itemid=str(mimic4.NUMERIC_ITEM), ref_range_lower="0.5")
    planted = {rows[3]: ("ref_range_lower", "<0.5"), rows[7]: ("ref_range_upper", "n/a"),
               rows[8]: ("ref_range_upper", "1e309")}
    for line, (column, value) in planted.items():
        data.set("LABEVENTS", line - 2, column, value)
    return mimic4.text_tables(data, tmp_path_factory.mktemp("mimic4")), data, planted


def test_mimic4_comments_and_reference_ranges_reach_the_typed_labevents(mimic4_text):
    text, data, planted = mimic4_text
    events = check_raw(text).tables.labevents
    assert events.index.equals(text["LABEVENTS"].index) and events.index[0] == 2
    assert events["REF_RANGE_LOWER"].dtype == np.float64 and events["REF_RANGE_UPPER"].dtype == np.float64
    good = mimic4.lines_where(data, itemid=str(mimic4.NUMERIC_ITEM), ref_range_lower="0.5", ref_range_upper="1.2")
    assert (events.loc[good, "REF_RANGE_LOWER"] == 0.5).all() and (events.loc[good, "REF_RANGE_UPPER"] == 1.2).all()
    troponin = mimic4.lines_where(data, itemid=str(mimic4.COMMENT_ITEM), ref_range_upper="0.01")
    assert (events.loc[troponin, "REF_RANGE_LOWER"] == 0.0).all()
    assert events.loc[mimic4.lines_where(data, itemid=str(mimic4.CATEGORICAL_ITEM)), "REF_RANGE_LOWER"].isna().all()
    commented = mimic4.lines_where(data, comments=mimic4.COMMON_COMMENT)
    assert len(commented) == 40 and (events.loc[commented, "COMMENTS"] == mimic4.COMMON_COMMENT).all()
    assert events["COMMENTS"].notna().sum() == 41


def test_unusable_reference_range_is_null_with_a_warning_and_keeps_the_row(mimic4_text):
    text, _, planted = mimic4_text
    result = check_raw(text)
    events = result.tables.labevents
    for line, (column, _) in planted.items():
        assert np.isnan(events.loc[line, column.upper()])
    assert events.loc[list(planted), "REJECT"].isna().all()
    assert events.loc[list(planted), "VALUENUM"].notna().all()
    findings = sorted((f.column, f.severity, f.count, f.lines) for f in result.findings
                      if f.check == "ref_range_numeric")
    lower, upper = sorted(planted)[0], sorted(planted)[1:]
    assert findings == [("REF_RANGE_LOWER", "warning", 1, [lower]), ("REF_RANGE_UPPER", "warning", 2, upper)]
    message = next(f.message for f in result.findings if f.column == "REF_RANGE_UPPER")
    assert "n/a" not in message and "1e309" not in message  # described by class, never by value


def test_reference_range_raised_to_error_still_rejects_no_row(mimic4_text):
    text, _, planted = mimic4_text
    result = check_raw(text, severity={"ref_range_numeric": "error"})
    assert result.tables.labevents["REJECT"].isna().all()


# -- EDREGTIME: when the ED stay began, read when present ----------------------------------------------------------
def test_edregtime_is_typed_as_a_time_null_where_empty(text):
    admissions = check_raw(text).tables.admissions
    assert str(admissions["EDREGTIME"].dtype) == "datetime64[ns]"
    given = text["ADMISSIONS"]["EDREGTIME"]
    assert admissions["EDREGTIME"].isna().equals(given.isna())  # the sample's admissions not from the ED: empty
    first = given.first_valid_index()
    assert admissions.loc[first, "EDREGTIME"] == pd.Timestamp(given[first])


def test_unusable_edregtime_is_null_with_a_warning_and_keeps_the_admission(text):
    admissions = text["ADMISSIONS"].copy()
    lines = admissions.index[admissions["EDREGTIME"].notna()][:2]
    admissions.loc[lines[0], "EDREGTIME"] = "10/23/64 21:09"
    admissions.loc[lines[1], "EDREGTIME"] = "2163-02-30 19:36:00"  # no such day
    for severity in ({}, {"edregtime_iso": "error"}):  # raised to an error, it still rejects no admission
        result = check_raw({**text, "ADMISSIONS": admissions}, severity=severity)
        typed = result.tables.admissions
        assert typed.loc[lines, "EDREGTIME"].isna().all() and typed["REJECT"].isna().all()
        assert typed.loc[lines, "ADMITTIME"].notna().all()
        (found,) = [f for f in result.findings if f.check == "edregtime_iso"]
        assert (found.table, found.column, found.count, found.lines) == ("ADMISSIONS", "EDREGTIME", 2, list(lines))
        assert found.severity == "warning"  # as declared: the report applies [severity]
        assert "10/23/64" not in found.message  # described by class, never by value


def test_admissions_without_edregtime_parse_as_before(text):
    admissions = text["ADMISSIONS"].drop(columns="EDREGTIME")
    result = check_raw({**text, "ADMISSIONS": admissions})
    assert "EDREGTIME" not in result.tables.admissions
    assert _checks(result) == [c for c in _checks(check_raw(text)) if c[0] != "edregtime_iso"]


def test_shuffled_mimic4_rows_parse_to_the_same_typed_labevents(mimic4_text):
    text, _, _ = mimic4_text
    first = check_raw(text)
    second = check_raw({**text, "LABEVENTS": text["LABEVENTS"].sample(frac=1.0, random_state=5)})
    assert _checks(first) == _checks(second)
    pd.testing.assert_frame_equal(first.tables.labevents, second.tables.labevents.sort_index())


def test_failures_capped_per_block_give_the_findings_of_all_lines(text):
    """check_stream keeps, per block, only each (column, check)'s first failing lines and their count: the
    findings (counts, lines listed) are those of every line. Here every outpatient row is a hadm_id_missing line."""
    from pipeline.reading.parse import check_part, combine_parts, part_findings

    labevents = text["LABEVENTS"]
    blocks = [labevents.iloc[start:start + 700] for start in range(0, len(labevents), 700)]
    whole = combine_parts([check_part("LABEVENTS", block) for block in blocks])
    capped = combine_parts([check_part("LABEVENTS", block).capped(3) for block in blocks]).capped(3)
    missing = whole.failures[whole.failures["check"] == "hadm_id_missing"]
    assert len(missing) > 3 * len(blocks)  # the cap bites in every block
    assert len(capped.failures[capped.failures["check"] == "hadm_id_missing"]) == 3
    expected = {f.check: f for f in part_findings(whole, max_lines=3)}
    got = {f.check: f for f in part_findings(capped, max_lines=3)}
    assert got["hadm_id_missing"] == expected["hadm_id_missing"]
    assert got["hadm_id_missing"].count == len(missing) and len(got["hadm_id_missing"].lines) == 3
    assert capped.failure_counts().equals(whole.failure_counts())


def test_relation_failures_capped_per_block_add_up_to_the_whole_tables():
    """check_stream keeps, per relation, the first lines a finding lists and the count, block by block: the same as
    capping every failing line at once, and no more than ``keep`` lines per relation whatever the rows."""
    from pipeline.reading.parse import capped_relations, combined_relations

    rng = np.random.default_rng(7)
    whole = pd.DataFrame({"relation": rng.integers(0, 5, 10_000), "line": rng.permutation(10_000)})
    blocks = [whole.iloc[i:i + 1_500] for i in range(0, len(whole), 1_500)]
    folded = capped_relations(blocks[0].iloc[:0], 20)
    for block in blocks:  # as check_stream folds them, one block at a time
        folded = combined_relations([folded, capped_relations(block, 20)], 20)
    expected = capped_relations(whole, 20)
    pd.testing.assert_frame_equal(folded, expected)
    assert (folded.groupby("relation").size() == 20).all()
    assert folded.groupby("relation")["count"].first().to_dict() == whole["relation"].value_counts().sort_index().to_dict()
    assert (folded.groupby("relation")["line"].max() < 200).all()  # the first lines of 2,000 per relation
