"""pipeline/stages/encode.py: codes fitted on train, 1.. by frequency then value, 0 for missing and unseen."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages import encode
from schemas.errors import StageError
from schemas.raw import ADMISSION_CATEGORICALS
from tests.pipeline.stages.sample import sample_stages, shuffled

SAMPLE_ADMISSION_COLUMNS = ["ADMISSION_TYPE", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE", "LANGUAGE",
                            "RELIGION", "MARITAL_STATUS", "ETHNICITY"]


# Every training value gets a code: these tests hold how codes are made; [encode] min_admissions, which leaves the
# sample's rarer values uncoded, has tests of its own.
EVERY_VALUE = dict(min_admissions=1)


@pytest.fixture(scope="module")
def sample():
    """The sample's stages up to encode, its vocabularies fitted with :data:`EVERY_VALUE`."""
    stages = sample_stages()
    vocabularies = encode.fit_vocabularies(stages.split_events, stages.split_admissions, stages.labitems.frame,
                                           **EVERY_VALUE)
    return replace(stages, vocabularies=vocabularies, encoded=encode.encode_events(stages.split_events, vocabularies))


def _fit(stages, events=None, admissions=None, labitems=None) -> encode.Vocabularies:
    return encode.fit_vocabularies(stages.split_events if events is None else events,
                                   stages.split_admissions if admissions is None else admissions,
                                   stages.labitems.frame if labitems is None else labitems, **EVERY_VALUE)


def _row_of(events: pd.DataFrame, item: int, split: str) -> int:
    rows = events.index[(events["ITEMID"] == item) & (events["SPLIT"] == split) & events["VALUE"].notna()]
    return int(rows[0])


# -- ordered_vocabulary ------------------------------------------------------------------------------
def test_ordered_vocabulary_is_by_frequency_then_value():
    values = pd.Series(["b", "c", None, "b", "a", "c", "a", "d", "b"], dtype="str")
    assert encode.ordered_vocabulary(values) == ("b", "a", "c", "d")
    assert encode.ordered_vocabulary(pd.Series([], dtype="str")) == ()


@settings(max_examples=50)
@given(data=st.data(), values=st.lists(st.one_of(st.none(), st.sampled_from(["NEG", "TR", "1+", "neg", "ÿ", "Z"])),
                                       max_size=40))
def test_ordered_vocabulary_does_not_depend_on_row_order(data, values):
    permuted = data.draw(st.permutations(values))
    vocabulary = encode.ordered_vocabulary(pd.Series(values, dtype="str"))
    assert encode.ordered_vocabulary(pd.Series(permuted, dtype="str")) == vocabulary
    present = [v for v in values if v is not None]
    assert vocabulary == tuple(sorted(set(present), key=lambda v: (-present.count(v), v)))


# -- fit on train, apply everywhere ------------------------------------------------------------------
def test_lab_codes_start_at_one_by_train_frequency(sample):
    vocabularies = sample.vocabularies
    table = vocabularies.lab_table()
    assert set(table["ITEMID"]) == set(sample.split_events.loc[sample.split_events["KIND"] == "categorical", "ITEMID"])
    for item, codes in table.groupby("ITEMID"):
        assert sorted(codes["CODE"]) == list(range(1, len(codes) + 1)), item
    events = sample.split_events
    train = events[(events["SPLIT"] == "train") & (events["ITEMID"] == 51492)]
    counts = train["VALUE"].value_counts()
    expected = tuple(sorted(counts.index, key=lambda v: (-counts[v], v)))
    codes = table[table["ITEMID"] == 51492].sort_values("CODE")
    assert tuple(codes["VALUE"]) == expected and expected[0] == "NEG"


def test_codes_of_the_sample_events(sample):
    encoded = sample.encoded
    categorical = encoded["KIND"] == "categorical"
    assert encoded.loc[~categorical, "CODE"].isna().all()
    assert (encoded.loc[categorical, "CODE"] >= 1).all()  # every value of the sample is seen in train
    table = sample.vocabularies.lab_table().set_index(["ITEMID", "VALUE"])["CODE"]
    rows = encoded[categorical]
    expected = table.reindex(pd.MultiIndex.from_frame(rows[["ITEMID", "VALUE"]])).to_numpy()
    assert (rows["CODE"].to_numpy("int64") == expected).all()
    assert encode.unseen_lab_values(encoded).sum() == 0
    pd.testing.assert_frame_equal(encoded.drop(columns="CODE"), sample.split_events)


def test_a_value_seen_only_outside_train_gets_code_zero_and_is_counted(sample):
    events = sample.split_events.copy()
    line = _row_of(events, 51487, "val")
    events.loc[line, "VALUE"] = "PURPLE"
    vocabularies = _fit(sample, events=events)
    assert "PURPLE" not in {value for _, value, _ in vocabularies.lab_values_}
    encoded = encode.encode_events(events, vocabularies)
    assert encoded.loc[line, "CODE"] == encode.MISSING
    unseen = encode.unseen_lab_values(encoded)
    assert unseen.sum() == 1 and unseen[line]


def test_the_same_value_in_train_gets_a_code(sample):
    events = sample.split_events.copy()
    line = _row_of(events, 51487, "train")
    events.loc[line, "VALUE"] = "PURPLE"
    vocabularies = _fit(sample, events=events)
    assert (51487, "PURPLE", 3) in vocabularies.lab_values_  # NEG and POS are more frequent
    encoded = encode.encode_events(events, vocabularies)
    assert encoded.loc[line, "CODE"] == 3 and encode.unseen_lab_values(encoded).sum() == 0


def test_a_missing_categorical_value_gets_code_zero_and_is_not_unseen(sample):
    events = sample.split_events.copy()
    line = _row_of(events, 51486, "train")
    events.loc[line, "VALUE"] = pd.NA
    encoded = encode.encode_events(events, _fit(sample, events=events))
    assert encoded.loc[line, "CODE"] == encode.MISSING
    assert not encode.unseen_lab_values(encoded)[line]


def test_admissions_get_an_int64_code_per_categorical_column(sample):
    admissions = sample.split_admissions
    assert encode.admission_columns(admissions) == SAMPLE_ADMISSION_COLUMNS
    encoded = encode.encode_admissions(admissions, sample.vocabularies)
    train = admissions[admissions["SPLIT"] == "train"]
    for column in SAMPLE_ADMISSION_COLUMNS:
        code = encoded[f"{column}_CODE"]
        assert code.dtype == np.int64, column
        seen = admissions[column].isin(train[column].dropna())
        assert ((code == 0) == ~seen).all(), column  # 0: missing, or a value train never saw
        assert (code[seen] >= 1).all() and code.max() == len(dict(sample.vocabularies.admission_)[column])
    assert (encoded["ETHNICITY_CODE"] == 0).any()  # the sample has an ethnicity seen only outside train
    vocabulary = dict(sample.vocabularies.admission_)["INSURANCE"]
    assert vocabulary == encode.ordered_vocabulary(train["INSURANCE"])
    assert (encoded["INSURANCE_CODE"] == admissions["INSURANCE"].map(
        {v: i + 1 for i, v in enumerate(vocabulary)})).all()
    pd.testing.assert_frame_equal(encoded[admissions.columns], admissions)


def test_admission_value_seen_only_outside_train_gets_code_zero(sample):
    admissions = sample.split_admissions.copy()
    line = admissions.index[admissions["SPLIT"] == "test"][0]
    admissions.loc[line, "RELIGION"] = "PASTAFARIAN"
    vocabularies = _fit(sample, admissions=admissions)
    assert "PASTAFARIAN" not in dict(vocabularies.admission_)["RELIGION"]
    assert encode.encode_admissions(admissions, vocabularies).loc[line, "RELIGION_CODE"] == 0


def test_labitems_one_row_per_item_sorted_by_itemid(sample):
    labitems = sample.labitems.frame
    encoded = encode.encode_labitems(shuffled(labitems), sample.vocabularies)
    assert encoded["ITEMID"].tolist() == sorted(labitems["ITEMID"])
    for column in ("FLUID", "CATEGORY"):
        code = encoded[f"{column}_CODE"]
        assert code.dtype == np.int64
        assert ((code == 0) == encoded[column].isna()).all()
    assert sample.vocabularies.fluid_[0] == labitems["FLUID"].value_counts().idxmax()


def test_events_without_split_are_refused(sample):
    with pytest.raises(StageError) as caught:
        encode.encode_events(sample.events.frame, sample.vocabularies)
    error = caught.value
    assert (error.stage, error.side, error.check) == ("encode", "input", "column_in_dataframe")


@pytest.mark.parametrize("function", ["fit_vocabularies", "count_values"])
def test_the_fit_of_rows_without_kind_names_the_column_not_a_key_error(sample, function):
    with pytest.raises(StageError) as caught:
        getattr(encode, function)(sample.split_events.drop(columns="KIND"), sample.split_admissions,
                                  sample.labitems.frame)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("encode", "input", "column_in_dataframe", "KIND")
    assert "1 column missing: KIND (str): the kind of its lab item" in str(error)
    assert f"encode.{function} reads SPLIT, KIND, VALUE, HADM_ID, ITEMID of SplitEvents" in str(error)


def test_admission_codes_must_be_int64_on_output(sample):
    vocabularies = sample.vocabularies
    admissions = sample.split_admissions.assign(EXTRA_CODE=-1)
    with pytest.raises(StageError) as caught:
        encode.encode_admissions(admissions, vocabularies)
    error = caught.value
    assert (error.stage, error.side, error.column) == ("encode", "output", "EXTRA_CODE")
    assert "greater_than_or_equal_to(0)" in error.check and error.count == len(admissions)


# -- fitted state ------------------------------------------------------------------------------------
def test_vocabularies_round_trip_through_json(sample):
    vocabularies = sample.vocabularies
    text = json.dumps(vocabularies.as_json())
    again = encode.Vocabularies.from_json(json.loads(text))
    assert again == vocabularies
    assert json.dumps(again.as_json()) == text
    assert set(vocabularies.as_json()) == {"lab_values", "admission", "fluid", "category", "fold_case"}
    assert [column for column, _ in again.admission_] == SAMPLE_ADMISSION_COLUMNS
    assert set(SAMPLE_ADMISSION_COLUMNS) <= set(ADMISSION_CATEGORICALS)


def test_shuffled_rows_give_equal_vocabularies(sample):
    again = _fit(sample, events=shuffled(sample.split_events, 11), admissions=shuffled(sample.split_admissions, 12),
                 labitems=shuffled(sample.labitems.frame, 13))
    assert again == sample.vocabularies
    pd.testing.assert_frame_equal(encode.encode_events(shuffled(sample.split_events, 11), again).sort_index(),
                                  sample.encoded)


# -- letter case ---------------------------------------------------------------------------------------
def _labitems_with_case_variants(sample) -> pd.DataFrame:
    """The sample's dictionary with 'BLOOD' x3 and 'blood' x3 beside 'Blood', and a CATEGORY tie."""
    labitems = sample.labitems.frame.copy()
    blood = labitems.index[labitems["FLUID"] == "Blood"]
    labitems.loc[blood[:3], "FLUID"] = "BLOOD"
    labitems.loc[blood[3:6], "FLUID"] = "blood"
    gas = labitems.index[labitems["CATEGORY"] == "Blood Gas"]  # 5 items: 'Blood Gas' x2, 'BLOOD GAS' x2, 'blood gas'
    labitems.loc[gas[:2], "CATEGORY"] = "BLOOD GAS"
    labitems.loc[gas[2:3], "CATEGORY"] = "blood gas"
    return labitems


def test_case_variants_fold_to_the_most_used_spelling_ties_by_sort_order(sample):
    labitems = _labitems_with_case_variants(sample)
    folded = _fit_folded(sample, labitems, fold_case=True)
    assert "Blood" in folded.fluid_ and not {"BLOOD", "blood"} & set(folded.fluid_)
    assert "BLOOD GAS" in folded.category_ and not {"Blood Gas", "blood gas"} & set(folded.category_)  # 2-2 tie
    coded = encode.encode_labitems(labitems, folded).set_index("ITEMID")
    assert coded.groupby(coded["FLUID"].str.casefold())["FLUID_CODE"].nunique().max() == 1
    assert coded.groupby(coded["CATEGORY"].str.casefold())["CATEGORY_CODE"].nunique().max() == 1
    assert (coded["FLUID_CODE"] > 0).all() and (coded["CATEGORY_CODE"] > 0).all()
    for seed in (1, 2, 3):  # the kept spelling never depends on row order
        assert _fit_folded(sample, shuffled(labitems, seed), fold_case=True) == folded
    assert encode.Vocabularies.from_json(json.loads(json.dumps(folded.as_json()))) == folded

    apart = _fit_folded(sample, labitems, fold_case=False)
    assert {"Blood", "BLOOD", "blood"} <= set(apart.fluid_)
    assert encode.encode_labitems(labitems, apart)["FLUID_CODE"].nunique() > coded["FLUID_CODE"].nunique()


def test_case_variants_are_reported_naming_column_and_spellings(sample):
    labitems = _labitems_with_case_variants(sample)
    for fold_case in (True, False):
        findings = {f.column: f for f in encode.case_findings(labitems, fold_case=fold_case)}
        assert set(findings) == {"FLUID", "CATEGORY"}
        fluid = findings["FLUID"]
        assert (fluid.check, fluid.severity, fluid.table) == ("category_case_variants", "info", "D_LABITEMS")
        assert fluid.count == int(labitems["FLUID"].str.casefold().eq("blood").sum())
        assert "'Blood' (" in fluid.message and "'BLOOD' (3 items)" in fluid.message
        assert "'blood' (3 items)" in fluid.message
        assert ("-> 'Blood'" in fluid.message) is fold_case
        assert ("fold_case = false" in fluid.message) is not fold_case
    assert encode.case_findings(sample.labitems.frame, fold_case=True) == []  # the sample spells each value once


def test_the_mimic3_demo_dictionary_folds_blood_and_blood(mimic3demo):
    from pipeline.stages.clean import clean_labitems
    from pipeline.reading.load import read_table
    from pipeline.reading.parse import check_raw

    text = read_table(mimic3demo / "D_LABITEMS.csv", "D_LABITEMS").frame
    labitems = clean_labitems(check_raw({"D_LABITEMS": text}).tables.labitems).frame
    assert {"BLOOD", "Blood"} <= set(labitems["FLUID"])  # as published
    empty = pd.DataFrame({"SPLIT": pd.Series([], dtype="str"), "KIND": pd.Series([], dtype="str"),
                          "HADM_ID": pd.Series([], dtype="int64"), "ITEMID": pd.Series([], dtype="int64"),
                          "VALUE": pd.Series([], dtype="str")})
    admissions = pd.DataFrame({"SPLIT": pd.Series([], dtype="str")})
    folded = encode.fit_vocabularies(empty, admissions, labitems, fold_case=True)
    assert folded.fluid_[0] == "Blood" and "BLOOD" not in folded.fluid_
    assert {"Chemistry", "Hematology", "Blood Gas"} <= set(folded.category_) and "CHEMISTRY" not in folded.category_
    assert len({value.casefold() for value in folded.fluid_}) == len(folded.fluid_)
    coded = encode.encode_labitems(labitems, folded)
    assert coded.loc[coded["FLUID"] == "BLOOD", "FLUID_CODE"].eq(1).all()
    findings = {f.column: f for f in encode.case_findings(labitems, fold_case=True)}
    assert "'Blood' (359 items) / 'BLOOD' (15 items) -> 'Blood'" in findings["FLUID"].message
    assert "'Chemistry' (274 items) / 'CHEMISTRY' (19 items)" in findings["CATEGORY"].message


def _fit_folded(sample, labitems, *, fold_case):
    return encode.fit_vocabularies(sample.split_events, sample.split_admissions, labitems, fold_case=fold_case,
                                   **EVERY_VALUE)


# -- the fit from parts' counts -----------------------------------------------------------------------
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_value_counts_of_admission_parts_give_the_whole_vocabularies(sample, parts):
    """Parts share no admission, so their distinct training admissions per value add up: the same codes."""
    events, admissions, labitems = sample.split_events, sample.split_admissions, sample.labitems.frame
    counts = [encode.count_values(events[events["HADM_ID"] % parts == n]) for n in range(parts)]
    fitted = encode.vocabularies_from_counts(encode.add_value_counts(counts), admissions, labitems, **EVERY_VALUE)
    assert fitted == _fit(sample) == sample.vocabularies
    assert fitted.lab_values_


def test_vocabularies_with_min_admissions_count_admissions_across_parts(sample):
    events, admissions, labitems = sample.split_events, sample.split_admissions, sample.labitems.frame
    counts = [encode.count_values(events[events["HADM_ID"] % 5 == n]) for n in range(5)]
    fitted = encode.vocabularies_from_counts(encode.add_value_counts(counts), admissions, labitems, min_admissions=3)
    assert fitted == encode.fit_vocabularies(events, admissions, labitems, min_admissions=3)
    assert len(fitted.lab_values_) < len(sample.vocabularies.lab_values_)
