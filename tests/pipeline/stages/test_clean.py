"""pipeline/stages/clean.py: outpatient, rejected and mixed-text rows are quarantined with a reason; each item gets a KIND."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from pipeline.stages import clean, text
from pipeline.config import Config, load_config
from pipeline.flow import prepare
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import RawTables
from pipeline.kernel.quarantine import Kept, combine
from schemas.errors import StageError
from tests import mimic4
from tests.corpus import Dataset
from tests.pipeline.stages.sample import run_stages, sample_stages, sample_text, shuffled, typed

MIXED = (51003, 51275, 51514)
CATEGORICAL = (51486, 51492)
NUMERIC = (50912,)


def _clean(tables: RawTables) -> tuple[Kept, Kept, Kept]:
    admissions = clean.clean_admissions(tables.admissions)
    labitems = clean.clean_labitems(tables.labitems)
    return admissions, labitems, clean.clean_events(tables.labevents, admissions.frame, labitems.frame)


def _lines(quarantine: pd.DataFrame, reason: str) -> list[int]:
    return sorted(quarantine.index[quarantine["REASON"] == reason].tolist())


@pytest.fixture(scope="module")
def sample():
    return sample_stages()


@pytest.fixture(scope="module")
def broken():
    """The sample with one bad point of each kind planted in the text, before the raw stage.

    Returns the typed tables and what was planted: lab lines with ITEMID 'abc' (one of them
    outpatient), the admission whose ADMITTIME is impossible, and the item listed twice.
    """
    text = sample_text()
    events, admissions, labitems = text["LABEVENTS"], text["ADMISSIONS"], text["D_LABITEMS"]
    inpatient = events.index[events["HADM_ID"].notna()]
    outpatient = events.index[events["HADM_ID"].isna()]
    bad_item_lines = [int(inpatient[3]), int(inpatient[500]), int(outpatient[0])]
    events.loc[bad_item_lines, "ITEMID"] = "abc"

    hadm = events.loc[inpatient[1000], "HADM_ID"]
    admission_line = int(admissions.index[admissions["HADM_ID"] == hadm][0])
    admissions.loc[admission_line, "ADMITTIME"] = "2101-13-01 00:00:00"

    twice = "50912"
    copy = labitems[labitems["ITEMID"] == twice].copy()
    copy.index = pd.Index([labitems.index.max() + 1], name=labitems.index.name)
    text["D_LABITEMS"] = pd.concat([labitems, copy])
    return {"tables": typed(text), "bad_item_lines": bad_item_lines, "hadm": int(hadm),
            "admission_line": admission_line, "item": int(twice)}


# -- happy path on the sample ------------------------------------------------------------------------
def test_outpatient_rows_are_quarantined_with_their_source_lines(sample):
    text = sample_text()["LABEVENTS"]
    expected = sorted(text.index[text["HADM_ID"].isna()].tolist())
    quarantine = sample.events.quarantine
    assert len(expected) > 0
    assert _lines(quarantine, clean.OUTPATIENT) == expected
    rows = quarantine.loc[expected]
    assert set(rows["TABLE"]) == {"LABEVENTS"} and set(rows["STAGE"]) == {"clean"}
    assert rows["HADM_ID"].isna().all()
    assert rows["ITEMID"].tolist() == sample.tables.labevents.loc[expected, "ITEMID"].tolist()
    assert not sample.events.frame.index.isin(expected).any()


def test_sample_needs_no_other_quarantine_than_outpatient_and_mixed_text(sample):
    assert set(sample.events.quarantine["REASON"]) == {clean.OUTPATIENT, clean.MIXED_TEXT}
    assert sample.admissions.quarantine.empty and sample.labitems.quarantine.empty
    assert len(sample.admissions.frame) == len(sample.tables.admissions)
    assert sample.admissions.frame["HADM_ID"].dtype == np.int64
    assert sample.labitems.frame["ITEMID"].dtype == np.int64
    assert "REJECT" not in sample.admissions.frame and "REJECT" not in sample.labitems.frame
    assert not {"REJECT", "SUBJECT_ID"} & set(sample.events.frame.columns)


def test_item_kinds_of_the_sample(sample):
    by_item = sample.events.frame.groupby("ITEMID")["KIND"]
    assert (by_item.nunique() == 1).all()  # one kind per item
    kind = by_item.first()
    assert {item: kind[item] for item in MIXED + CATEGORICAL + NUMERIC} == {
        51003: "mixed", 51275: "mixed", 51514: "mixed",
        51486: "categorical", 51492: "categorical", 50912: "numeric"}
    assert set(kind) == {"numeric", "categorical", "mixed"}


def test_item_kinds_by_share_of_rows_with_a_number():
    events = pd.DataFrame({
        "ITEMID": [1, 1, 2, 2, 3, 3, 3],
        "VALUENUM": [1.0, 2.0, np.nan, np.nan, 5.0, np.nan, 0.0],
    }, index=pd.Index([9, 4, 7, 2, 5, 3, 8], name="line"))
    kinds = clean.item_kinds(events)
    assert kinds.index.equals(events.index)
    assert kinds.tolist() == ["numeric", "numeric", "categorical", "categorical", "mixed", "mixed", "mixed"]


def test_mixed_items_lose_their_text_rows_and_keep_their_numbers(sample):
    raw = sample.tables.labevents
    mixed = raw["ITEMID"].isin(MIXED) & raw["HADM_ID"].notna()
    text_lines = sorted(raw.index[mixed & raw["VALUENUM"].isna()].tolist())
    number_lines = raw.index[mixed & raw["VALUENUM"].notna()]
    quarantine = sample.events.quarantine
    assert len(text_lines) > 0 and len(number_lines) > 0
    assert _lines(quarantine, clean.MIXED_TEXT) == text_lines
    assert set(quarantine.loc[text_lines, "ITEMID"]) == set(MIXED)
    kept = sample.events.frame
    assert number_lines.isin(kept.index).all()
    assert (kept.loc[number_lines, "KIND"] == "mixed").all()
    assert kept.loc[kept["KIND"] != "categorical", "VALUENUM"].notna().all()


# -- rows that failed a raw check --------------------------------------------------------------------
def test_rejected_rows_are_quarantined_as_raw_errors_even_when_outpatient(broken):
    tables = broken["tables"]
    lines = broken["bad_item_lines"]
    assert tables.labevents.loc[lines, "REJECT"].notna().all()
    _, _, events = _clean(tables)
    quarantine = events.quarantine
    assert _lines(quarantine, clean.RAW_ERROR) == sorted(lines)
    assert not events.frame.index.isin(lines).any()
    assert lines[2] not in _lines(quarantine, clean.OUTPATIENT)  # the outpatient row: its first reason wins


def test_rows_of_a_rejected_admission_are_quarantined(broken):
    tables = broken["tables"]
    admissions, _, events = _clean(tables)
    assert _lines(admissions.quarantine, clean.RAW_ERROR) == [broken["admission_line"]]
    assert set(admissions.quarantine["TABLE"]) == {"ADMISSIONS"}
    assert broken["hadm"] not in set(admissions.frame["HADM_ID"])
    raw = tables.labevents
    of_admission = raw.index[(raw["HADM_ID"] == broken["hadm"]).fillna(False) & raw["REJECT"].isna()]
    assert len(of_admission) > 0
    assert _lines(events.quarantine, clean.ADMISSION_REJECTED) == sorted(of_admission.tolist())
    assert (events.quarantine.loc[of_admission, "HADM_ID"] == broken["hadm"]).all()
    assert not (events.frame["HADM_ID"] == broken["hadm"]).any()


def test_rows_of_a_rejected_item_are_quarantined(broken):
    tables = broken["tables"]
    _, labitems, events = _clean(tables)
    assert len(_lines(labitems.quarantine, clean.RAW_ERROR)) == 2  # both rows of the duplicated key
    raw = tables.labevents
    of_item = raw.index[(raw["ITEMID"] == broken["item"]).fillna(False) & raw["REJECT"].isna()
                        & raw["HADM_ID"].notna() & (raw["HADM_ID"] != broken["hadm"]).fillna(False)]
    assert len(of_item) > 0
    assert _lines(events.quarantine, clean.ITEM_REJECTED) == sorted(of_item.tolist())
    assert broken["item"] not in set(events.frame["ITEMID"])


@pytest.mark.parametrize("which", ["admissions", "labitems", "events"])
def test_steps_account_for_every_row(broken, which):
    tables = broken["tables"]
    source = {"admissions": tables.admissions, "labitems": tables.labitems, "events": tables.labevents}[which]
    kept = dict(zip(("admissions", "labitems", "events"), _clean(tables)))[which]
    steps = kept.steps
    assert steps and all(step.stage == "clean" for step in steps)
    assert steps[0].rows_in == len(source)
    for before, after in zip(steps, steps[1:]):
        assert after.rows_in == before.rows_out
    for step in steps:
        assert step.rows_in - step.rows_out == step.quarantined
    assert steps[-1].rows_out == len(kept.frame)
    assert sum(step.quarantined for step in steps) + len(kept.frame) == len(source)
    assert len(kept.quarantine) == sum(step.quarantined for step in steps) > 0
    assert kept.quarantine.index.append(kept.frame.index).sort_values().equals(source.index.sort_values())
    by_reason = kept.quarantine["REASON"].value_counts()
    assert {step.step: step.quarantined for step in steps if step.quarantined} == by_reason.to_dict()


# -- bad input ---------------------------------------------------------------------------------------
def test_input_with_infinite_valuenum_is_refused_naming_the_column(sample):
    events = sample.tables.labevents.copy()
    line = int(events.index[events["VALUENUM"].notna()][10])
    events.loc[line, "VALUENUM"] = np.inf
    with pytest.raises(StageError) as caught:
        clean.clean_events(events, sample.admissions.frame, sample.labitems.frame)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("clean", "input", "finite", "VALUENUM")
    assert error.lines == [line] and error.count == 1
    assert str(error).startswith("[clean:input] LabEvents.VALUENUM finite failed on 1 row (line ")
    assert "inf ×1" in str(error)


@pytest.mark.parametrize("function", ["fit_kinds", "count_kinds"])
@pytest.mark.parametrize(("value", "shown"), [(np.inf, "inf"), (-np.inf, "-inf")], ids=["inf", "-inf"])
def test_the_item_kind_fit_refuses_a_number_that_is_not_finite_naming_its_item_and_line(sample, function, value,
                                                                                         shown):
    events = sample.tables.labevents.copy()
    line = int(events.index[events["VALUENUM"].notna() & events["HADM_ID"].notna()][10])
    events.loc[line, "VALUENUM"] = value
    with pytest.raises(StageError) as caught:
        getattr(clean, function)(events, sample.admissions.frame, sample.labitems.frame)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column, error.lines) == (
        "clean", "input", "fit_finite", "VALUENUM", [line])
    item = int(events.loc[line, "ITEMID"])
    assert f"{shown} ×1. In ITEMID {item} (1 row) of the rows handed to clean.{function}" in str(error)


def test_the_item_kind_fit_reads_a_missing_number_as_a_row_without_one_and_set_aside_rows_not_at_all(sample):
    events = sample.tables.labevents.copy()
    outpatient = int(events.index[events["VALUENUM"].notna() & events["HADM_ID"].isna()][0])
    events.loc[outpatient, "VALUENUM"] = np.inf  # set aside as outpatient: not the fit's
    tables = (sample.admissions.frame, sample.labitems.frame)
    assert clean.fit_kinds(events, *tables) == clean.fit_kinds(sample.tables.labevents, *tables)


def test_input_without_reject_is_refused(sample):
    with pytest.raises(StageError) as caught:
        clean.clean_events(sample.tables.labevents.drop(columns="REJECT"), sample.admissions.frame,
                           sample.labitems.frame)
    assert (caught.value.stage, caught.value.side, caught.value.check) == ("clean", "input", "column_in_dataframe")


def test_input_without_reject_names_the_missing_column(sample):
    with pytest.raises(StageError) as caught:
        clean.clean_admissions(sample.tables.admissions.drop(columns="REJECT"))
    assert caught.value.column == "REJECT"
    assert "REJECT" in str(caught.value)


def test_admission_discharged_before_admitted_is_refused_on_output(sample):
    admissions = sample.tables.admissions.copy()
    line = int(admissions.index[5])
    admissions.loc[line, "DISCHTIME"] = admissions.loc[line, "ADMITTIME"] - pd.Timedelta(hours=1)
    with pytest.raises(StageError) as caught:
        clean.clean_admissions(admissions)  # REJECT is not set: the raw stage was bypassed
    error = caught.value
    assert (error.stage, error.side, error.check) == ("clean", "output", "discharge_after_admit")
    assert error.lines == [line]


# -- determinism -------------------------------------------------------------------------------------
def test_shuffled_input_gives_the_same_kept_rows_and_quarantine(broken):
    tables = broken["tables"]
    mixed_up = RawTables(admissions=shuffled(tables.admissions, 1), labitems=shuffled(tables.labitems, 2),
                         labevents=shuffled(tables.labevents, 3))
    first, second = _clean(tables), _clean(mixed_up)
    for a, b in zip(first, second):
        pd.testing.assert_frame_equal(a.frame.sort_index(), b.frame.sort_index())
        assert a.steps == b.steps
    pd.testing.assert_frame_equal(combine([k.quarantine for k in first]), combine([k.quarantine for k in second]))


# -- MIMIC-IV: rows whose result is only in COMMENTS -------------------------------------------------
def _mimic4_tables(tmp_path_factory, **options) -> tuple[RawTables, Dataset]:
    data = mimic4.dataset(**options)
    return typed(mimic4.text_tables(data, tmp_path_factory.mktemp("mimic4"))), data


def _with(config: Config, *, empty_value: str | None = None, min_admissions: int | None = None) -> Config:
    config = dataclasses.replace(config, comments=dataclasses.replace(
        config.comments, empty_value=empty_value or config.comments.empty_value))
    return dataclasses.replace(config, encode=dataclasses.replace(
        config.encode, min_admissions=min_admissions or config.encode.min_admissions))


@pytest.fixture(scope="module")
def mimic4_split(tmp_path_factory):
    """The MIMIC-IV-shaped tables with the rare comment in a training admission, and that admission."""
    tables, _ = _mimic4_tables(tmp_path_factory)
    splits = run_stages(tables).splits  # as flow.prepare assigns them with the default config
    rare_hadm = int(splits.loc[splits["SPLIT"] == "train", "HADM_ID"].max())
    tables, data = _mimic4_tables(tmp_path_factory, rare_hadm=rare_hadm)
    return tables, data, rare_hadm


def test_result_only_in_comments_is_not_text_of_a_mixed_item(mimic4_split):
    tables, data, _ = mimic4_split
    _, _, events = _clean(tables)
    commented = mimic4.lines_where(data, itemid=str(mimic4.COMMENT_ITEM), value="", valuenum="")
    assert len(commented) == 41 and mimic4.NO_RESULT_ROW + 2 not in commented
    assert _lines(events.quarantine, clean.IN_COMMENTS) == commented
    assert _lines(events.quarantine, clean.NO_RESULT) == [mimic4.NO_RESULT_ROW + 2]
    assert _lines(events.quarantine, clean.MIXED_TEXT) == []
    kinds = events.frame.groupby("ITEMID")["KIND"].unique().map(list).to_dict()
    assert kinds == {mimic4.NUMERIC_ITEM: ["numeric"], mimic4.CATEGORICAL_ITEM: ["categorical"],
                     mimic4.COMMENT_ITEM: ["numeric"]}
    assert "COMMENTS" not in events.frame  # free text goes no further than clean
    assert [(s.step, s.quarantined) for s in events.steps[4:]] == [
        (clean.NO_RESULT, 1), (clean.IN_COMMENTS, 41), (clean.MIXED_TEXT, 0)]


def test_result_in_comments_finding_counts_rows_per_item(mimic4_split):
    tables, data, _ = mimic4_split
    prepared = prepare(tables, load_config())
    findings = {f.check: f for f in prepared.findings if f.stage == "clean"}
    commented = mimic4.lines_where(data, itemid=str(mimic4.COMMENT_ITEM), value="", valuenum="")
    found = findings["result_in_comments"]
    assert (found.severity, found.table, found.count, found.lines) == ("warning", "LABEVENTS", 41, commented[:20])
    assert f"result only in comments: items {mimic4.COMMENT_ITEM} Troponin T (Blood) (41 rows)" in found.message
    no_result = findings["no_result"]
    assert (no_result.severity, no_result.count, no_result.lines) == ("info", 1, [2])
    assert f"no result: items {mimic4.NUMERIC_ITEM} " in no_result.message and "(1 row)" in no_result.message
    assert "mixed_item_text" not in findings
    assert not any(mimic4.RARE_COMMENT in f.message for f in prepared.findings)
    assert prepared.ledger() == {"read": len(tables.labevents), "kept": len(tables.labevents) - 42,
                                 "quarantined": 42, "deduplicated": 0}


def test_category_policy_codes_comments_seen_in_enough_training_admissions(mimic4_split):
    tables, data, rare_hadm = mimic4_split
    prepared = prepare(tables, _with(load_config(), empty_value="category"))
    assert set(prepared.quarantine.whole()["REASON"]) == {clean.NO_RESULT}
    commented = mimic4.lines_where(data, itemid=str(mimic4.COMMENT_ITEM), value="", valuenum="")
    rows = prepared.edges.loc[commented]  # edge rows keep their source line
    assert (rows["KIND"] == "categorical").all()
    table = prepared.fitted.get("encode").lab_table()
    assert table[table["ITEMID"] == mimic4.COMMENT_ITEM]["VALUE"].tolist() == [mimic4.COMMON_COMMENT]
    rare = rows["HADM_ID"].eq(rare_hadm) & rows["VALUE"].eq(mimic4.RARE_COMMENT)
    assert rare.sum() == 1
    assert rows.loc[rare, "CODE"].tolist() == [0]
    assert (rows.loc[~rare, "CODE"] >= 1).all()
    rare_finding = next(f for f in prepared.findings if f.check == "rare_category")
    assert rare_finding.lines == rows.index[rare.to_numpy()].tolist()
    assert mimic4.RARE_COMMENT not in str(prepared.fitted.get("encode").as_json())
    # The same comment, with min_admissions 1, is coded: the privacy rule is what kept it out.
    loose = prepare(tables, _with(load_config(), empty_value="category", min_admissions=1))
    assert mimic4.RARE_COMMENT in loose.fitted.get("encode").lab_table()["VALUE"].tolist()


def test_item_kinds_ignore_rows_without_a_result():
    events = pd.DataFrame({
        "ITEMID": [1, 1, 1, 2, 2, 3],
        "VALUE": ["1", None, "<1", "NEG", None, None],
        "VALUENUM": [1.0, np.nan, np.nan, np.nan, np.nan, np.nan],
    }, index=pd.Index([4, 2, 7, 3, 6, 5], name="line"))
    assert clean.item_kinds(events).tolist() == ["mixed", "mixed", "mixed", "categorical", "categorical",
                                                 "categorical"]
    numeric = events.assign(VALUE=["1", None, None, "NEG", None, None], VALUENUM=[1.0, np.nan, np.nan] + [np.nan] * 3)
    assert clean.item_kinds(numeric).tolist()[:3] == ["numeric"] * 3


@pytest.mark.parametrize("empty_value", ["quarantine", "category"])
def test_shuffled_mimic4_rows_give_the_same_result(mimic4_split, empty_value):
    tables, _, _ = mimic4_split
    admissions = clean.clean_admissions(tables.admissions).frame
    labitems = clean.clean_labitems(tables.labitems).frame
    first = clean.clean_events(tables.labevents, admissions, labitems, empty_value=empty_value)
    again = clean.clean_events(shuffled(tables.labevents), admissions, labitems, empty_value=empty_value)
    pd.testing.assert_frame_equal(again.frame.sort_index(), first.frame.sort_index())
    pd.testing.assert_frame_equal(combine([again.quarantine]), combine([first.quarantine]))


def test_real_mimic3_demo_keeps_its_kinds_and_quarantine_reasons(mimic3demo):
    """No comments column: nothing is classed as a result in comments; the text rows of mixed items still go."""
    tables, problems = load_text_tables(mimic3demo)
    assert problems == []
    raw = typed({name: table.frame for name, table in tables.items()})
    assert not {"COMMENTS", "REF_RANGE_LOWER", "REF_RANGE_UPPER"} & set(raw.labevents.columns)
    _, _, events = _clean(raw)
    reasons = events.quarantine["REASON"].value_counts()
    assert clean.IN_COMMENTS not in reasons and clean.NO_RESULT not in reasons
    inpatient = raw.labevents[raw.labevents["HADM_ID"].notna()]
    has_number = inpatient["VALUENUM"].notna().groupby(inpatient["ITEMID"])
    mixed_items = set(has_number.any().index[has_number.any() & ~has_number.all()])
    assert set(events.quarantine.loc[events.quarantine["REASON"] == clean.MIXED_TEXT, "ITEMID"]) == mixed_items


# -- ordinal items: the text stage's state names them ---------------------------------------------------------
def test_the_text_stage_s_ordinal_items_are_ordinal_their_ranks_kept(sample):
    """The sample's urine protein (51492: NEG, TR, 1+, 2+, 3+) is ordinal on the text stage's 'plus' scale: clean
    gives its rows KIND 'ordinal' and keeps every one, its rank as VALUENUM; its kind learned from parts too."""
    tables = sample.tables
    admissions, labitems = sample.admissions.frame, sample.labitems.frame
    numbered = text.fit_numbered(tables.labevents, admissions, labitems)
    assert numbered.items_of("ordinal") == (51492,)
    read = text.read_numbers(tables.labevents, numbered)
    kinds = clean.fit_kinds(read, admissions, labitems, numbered)
    assert dict(kinds.kinds_)[51492] == "ordinal"
    assert dict(clean.fit_kinds(read, admissions, labitems).kinds_)[51492] == "numeric"  # no state: no ordinal
    hadm = read["HADM_ID"].fillna(-1).astype("int64")
    parts = [clean.count_kinds(read[hadm % 3 == n], admissions, labitems, numbered) for n in range(3)]
    assert clean.kinds_from_counts(clean.add_kind_counts(parts), admissions, labitems, numbered) == kinds
    kept = clean.clean_events(read, admissions, labitems, kinds)
    protein = kept.frame[kept.frame["ITEMID"] == 51492]
    assert len(protein) == 69 and set(protein["KIND"]) == {"ordinal"} and protein["VALUENUM"].notna().all()
    assert set(protein["VALUENUM"]) == {0.0, 1.0, 2.0, 3.0, 4.0}
    assert 51492 not in set(kept.quarantine["ITEMID"].dropna())


def test_a_word_an_ordinal_item_s_saved_scale_does_not_hold_is_quarantined_as_text(sample):
    """A state fitted on other rows (stats.json of an earlier run): a word of an ordinal item outside its scale has
    no rank, and clean sets it aside as text, never as a category of an ordinal item."""
    tables = sample.tables
    admissions, labitems = sample.admissions.frame, sample.labitems.frame
    numbered = text.fit_numbered(tables.labevents, admissions, labitems)
    events = tables.labevents.copy()
    line = events.index[(events["ITEMID"] == 51492) & events["HADM_ID"].notna()][0]
    events.loc[line, "VALUE"] = "SEE COMMENTS"
    read = text.read_numbers(events, numbered)
    kept = clean.clean_events(read, admissions, labitems, clean.fit_kinds(read, admissions, labitems, numbered))
    assert kept.quarantine.loc[line, "REASON"] == clean.MIXED_TEXT
    assert dict(clean.fit_kinds(read, admissions, labitems, numbered).kinds_)[51492] == "ordinal"


# -- the item kinds from parts' counts ----------------------------------------------------------------
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_kind_counts_of_parts_give_the_whole_kinds_and_steps(sample, parts):
    """Per-item counts add up over parts cut by admission: the same kinds, and the same steps in every part."""
    tables = sample.tables
    admissions, labitems = sample.admissions.frame, sample.labitems.frame
    events = tables.labevents
    hadm = events["HADM_ID"].fillna(-1).astype("int64")
    frames = [events[hadm % parts == n] for n in range(parts)]
    kinds = clean.kinds_from_counts(clean.add_kind_counts([clean.count_kinds(f, admissions, labitems)
                                                           for f in frames]))
    assert kinds == clean.fit_kinds(events, admissions, labitems)
    assert {kind for _, kind in kinds.kinds_} == {"numeric", "categorical", "mixed"}
    whole = clean.clean_events(events, admissions, labitems)
    cleaned = [clean.clean_events(f, admissions, labitems, kinds) for f in frames]
    assert [s.step for s in cleaned[0].steps] == [s.step for s in whole.steps]
    together = pd.concat([c.frame for c in cleaned]).sort_index()
    pd.testing.assert_frame_equal(together, whole.frame.sort_index())


def test_kind_counts_are_those_of_the_rows_inpatient_rows_keeps(broken):
    """``count_kinds`` makes no quarantine records: it counts the rows ``inpatient_rows`` keeps (outpatient, raw
    errors, rejected admissions and items left out) all the same."""
    tables = broken["tables"]
    admissions = clean.clean_admissions(tables.admissions).frame
    labitems = clean.clean_labitems(tables.labitems).frame
    kept = clean.inpatient_rows(tables.labevents, admissions, labitems)
    assert {step.step for step in kept.steps if step.quarantined} >= {clean.OUTPATIENT, clean.RAW_ERROR,
                                                                     clean.ADMISSION_REJECTED, clean.ITEM_REJECTED}
    counts = clean.count_kinds(tables.labevents, admissions, labitems)
    expected = clean._counts(kept.frame)
    pd.testing.assert_frame_equal(counts.per_item, expected.per_item)
    assert (counts.no_result_rows, counts.commented_rows) == (expected.no_result_rows, expected.commented_rows)
    assert counts.per_item["RESULTS"].sum() < len(tables.labevents)
