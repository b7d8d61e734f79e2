"""pipeline/clean.py: outpatient, rejected and mixed-text rows are quarantined with a reason; every item gets a KIND."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline import clean
from pipeline.parse import RawTables
from pipeline.quarantine import Kept, combine
from schemas.errors import StageError
from tests.pipeline.stages import sample_stages, sample_text, shuffled, typed

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
