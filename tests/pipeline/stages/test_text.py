"""pipeline/stages/text.py: censored and coded text of items that have numbers becomes numbers, marked, counted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.kernel.options import ConfigError
from pipeline.flow import validate
from pipeline.stages import clean, text
from schemas.errors import StageError

GLUCOSE, TROPONIN, KETONE, SCREEN = 50931, 51003, 51484, 50999  # SCREEN: text only ('POS', '<5')
START = pd.Timestamp("2150-03-01 08:00:00")


def _labs(rows: list[tuple]) -> pd.DataFrame:
    """Typed raw lab rows (the text stage's input) from (line, ITEMID, VALUE, VALUENUM[, REJECT])."""
    frame = pd.DataFrame([(*row, None)[:5] for row in rows], columns=["line", "ITEMID", "VALUE", "VALUENUM", "REJECT"])
    return pd.DataFrame({
        "HADM_ID": pd.array([100 + n % 3 for n in range(len(frame))], dtype="Int64"),
        "ITEMID": pd.array(frame["ITEMID"], dtype="Int64"),
        "CHARTTIME": pd.Series(START + pd.to_timedelta(np.arange(len(frame)), unit="h")).astype("datetime64[ns]"),
        "VALUE": pd.Series(frame["VALUE"], dtype="str"),
        "VALUENUM": frame["VALUENUM"].astype("float64"),
        "FLAG": pd.Series(pd.NA, index=frame.index, dtype="str"),
        "REJECT": pd.Series(frame["REJECT"], dtype="str"),
    }).set_axis(pd.Index(frame["line"].astype("int64"), name="line"))


@pytest.fixture
def labs() -> pd.DataFrame:
    return _labs([
        (2, TROPONIN, "0.05", 0.05), (3, TROPONIN, "<0.01", None), (4, TROPONIN, "GREATER THAN 25", None),
        (5, TROPONIN, " <= 0.02 ", None), (6, TROPONIN, "less than .5", None), (7, TROPONIN, ">=3", None),
        (8, GLUCOSE, "110", 110.0), (9, GLUCOSE, ">500", None), (10, GLUCOSE, "GREATER THAN 20 NG/ML", None),
        (11, KETONE, "15", 15.0), (12, KETONE, "NEG", None), (13, KETONE, "neg.", None), (14, KETONE, "TR", None),
        (15, KETONE, "0-2", None), (16, SCREEN, "POS", None), (17, SCREEN, "<5", None),
        (18, GLUCOSE, ">600", None, "valuenum_numeric"), (19, GLUCOSE, ">1e99", None),
        (20, GLUCOSE, ">99999999999", None),
    ])


def _read(labs: pd.DataFrame, **options) -> pd.DataFrame:
    return text.read_numbers(labs, text.fit_numbered(labs, **options), **options)


def test_censored_results_become_their_bound_marked_by_direction(labs):
    read = _read(labs)
    got = read.loc[[3, 4, 5, 6, 7, 9], ["VALUENUM", "Z_CENSORED"]]
    assert got.values.tolist() == [[0.01, -1], [25.0, 1], [0.02, -1], [0.5, -1], [3.0, 1], [500.0, 1]]
    assert read.loc[[3, 9], "VALUE"].tolist() == ["<0.01", ">500"]  # the text as it was read


def test_declared_words_become_their_numbers_whatever_their_case_or_period(labs):
    read = _read(labs)
    assert read.loc[[12, 13], ["VALUENUM", "Z_CENSORED"]].values.tolist() == [[0.0, 0], [0.0, 0]]
    traced = _read(labs, text_values={**text.DEFAULT_TEXT_VALUES, "TR": 0.5})
    assert traced.loc[14, "VALUENUM"] == 0.5


def test_what_is_still_text_stays_text(labs):
    read = _read(labs)
    for line in (10, 14, 15, 16, 17, 19, 20):  # units after the number, no word declared, a range, no numbers
        assert np.isnan(read.loc[line, "VALUENUM"]) and read.loc[line, "Z_CENSORED"] == 0, line
    assert np.isnan(read.loc[18, "VALUENUM"])  # a row that failed a raw check is never read
    assert (read["Z_CENSORED"] != 0).sum() == 6 and read["Z_CENSORED"].dtype == "int8"


def test_an_item_without_numbers_keeps_its_censored_text():
    """'<5' of an item that is all text is one of its categories, not a number: clean codes it as before."""
    labs = _labs([(2, SCREEN, "POS", None), (3, SCREEN, "<5", None)])
    assert _read(labs)["VALUENUM"].isna().all()


def test_censored_false_keeps_censored_text_and_still_maps_words(labs):
    read = _read(labs, censored=False)
    assert read["VALUENUM"].notna().sum() == 5 and (read["Z_CENSORED"] == 0).all()


def test_clean_keeps_the_read_rows_and_quarantines_the_rest_as_mixed_text(labs):
    read = _read(labs)
    admissions = pd.DataFrame({"HADM_ID": [100, 101, 102], "ADMITTIME": [START] * 3,
                               "DISCHTIME": [START + pd.Timedelta(days=2)] * 3}).astype({"HADM_ID": "int64"})
    labitems = pd.DataFrame({"ITEMID": [GLUCOSE, TROPONIN, KETONE, SCREEN], "FLUID": "Blood",
                             "CATEGORY": "Chemistry"}).astype({"ITEMID": "int64"})
    kept = clean.clean_events(read, admissions, labitems)
    mixed = kept.quarantine[kept.quarantine["REASON"] == clean.MIXED_TEXT]
    assert sorted(mixed.index) == [10, 14, 15, 19, 20]
    assert kept.frame.loc[[3, 9, 12], "KIND"].tolist() == ["numeric", "mixed", "mixed"]


def test_counts_per_item_are_findings_naming_the_items(labs):
    numbered = text.fit_numbered(labs)
    counts = text.read_counts(labs, numbered)
    findings = {f.check: f for f in text.read_findings(counts, names={TROPONIN: "51003 Troponin T (Blood)"})}
    assert findings["censored_value"].count == 6 and findings["mapped_text_value"].count == 2
    assert "51003 Troponin T (Blood) (5 rows)" in findings["censored_value"].message
    assert findings["censored_value"].severity == "info"


def test_the_fit_from_parts_is_the_fit_of_all_the_rows(labs):
    whole = text.fit_numbered(labs)
    parts = [text.count_numbered(part) for part in (labs.iloc[:7], labs.iloc[7:12], labs.iloc[12:])]
    assert text.numbered_from_counts(text.add_numbered(parts)) == whole
    assert whole.items_ == (GLUCOSE, TROPONIN, KETONE)
    assert text.NumberedItems.from_json(whole.as_json()) == whole


def test_shuffled_rows_give_the_same_numbers(labs):
    expected = _read(labs)
    for seed in range(3):
        shuffled = labs.sample(frac=1.0, random_state=seed)
        pd.testing.assert_frame_equal(_read(shuffled).sort_index(), expected)


def test_rows_without_valuenum_are_refused_naming_the_column(labs):
    with pytest.raises(StageError) as error:
        text.read_numbers(labs.drop(columns="VALUENUM"), text.fit_numbered(labs))
    assert "[text:input]" in str(error.value) and "VALUENUM" in str(error.value)


@pytest.mark.parametrize("function", ["fit_numbered", "count_numbered"])
@pytest.mark.parametrize(("value", "shown"), [(np.inf, "inf"), (-np.inf, "-inf")], ids=["inf", "-inf"])
def test_the_fit_refuses_a_number_that_is_not_finite_naming_its_item_and_line(labs, function, value, shown):
    labs.loc[11, "VALUENUM"] = value
    with pytest.raises(StageError) as caught:
        getattr(text, function)(labs)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column, error.lines) == (
        "text", "input", "fit_finite", "VALUENUM", [11])
    assert f"{shown} ×1. In ITEMID {KETONE} (1 row) of the rows handed to text.{function}" in str(error)


def test_the_fit_reads_a_missing_number_as_text_and_a_rejected_rows_not_at_all(labs):
    """A null VALUENUM is a row without a number (the fit counts the rows with one); a row that failed a raw check
    is not the fit's, whatever it holds."""
    labs.loc[18, "VALUENUM"] = np.inf  # line 18 failed valuenum_numeric
    assert text.fit_numbered(labs) == text.fit_numbered(labs.drop(index=18))


def test_the_fit_of_a_frame_without_reject_names_the_column_and_what_it_holds(labs):
    with pytest.raises(StageError) as caught:
        text.fit_numbered(labs.drop(columns="REJECT"))
    assert str(caught.value).startswith("[text:input] LabEvents.REJECT column_in_dataframe: 1 column missing: REJECT "
                                        "(str): the raw check the row failed, null for a row that passed.")


def test_a_text_value_that_is_not_a_finite_number_is_a_config_error(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[clean.text_values]\n"TR" = "trace"\n')
    with pytest.raises(ConfigError, match=r"\[clean.text_values\] 'TR' must be a finite number"):
        load_config(path)
    path.write_text('[clean.text_values]\n"TR" = 0.5\n')
    assert dict(load_config(path).clean.text_values) == {"NEG": 0.0, "NEGATIVE": 0.0, "NONE": 0.0, "TR": 0.5}


# -- the real MIMIC-III demo ----------------------------------------------------------------------------------
def test_on_the_mimic3_demo_the_censored_and_mapped_rows_of_mixed_items_are_kept(mimic3demo):
    validation = validate(mimic3demo, load_config())
    labevents, quarantine = validation.tables.labevents, validation.prepared.quarantine.whole()
    # The rows clean called mixed text before this stage: text without a number, inpatient, in an item with numbers.
    numbered = labevents.loc[labevents["VALUENUM"].notna(), "ITEMID"].unique()
    mixed = labevents[labevents["VALUENUM"].isna() & labevents["VALUE"].notna() & labevents["HADM_ID"].notna()
                      & labevents["ITEMID"].isin(numbered)]
    words = mixed["VALUE"].str.strip().str.rstrip(".").str.upper()
    readable = mixed[mixed["VALUE"].str.match(text.CENSORING) | words.isin(list(text.DEFAULT_TEXT_VALUES))]
    still_text = set(quarantine.index[quarantine["REASON"] == clean.MIXED_TEXT])
    kept = ~readable.index.isin(list(still_text))
    assert len(readable) >= 800 and kept.mean() >= 0.8  # 1,616 quarantined before; 637 of them 'NEG'
    edges = validation.prepared.edges
    censored = edges[edges["Z_CENSORED"] != 0]
    assert len(censored) > 0 and censored["VALUE"].str.match(text.CENSORING).all()
    assert ((censored["Z_CENSORED"] == -1) == censored["VALUE"].str.contains("<|LESS", case=False)).all()
