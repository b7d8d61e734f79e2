"""pipeline/stages/text.py: censored and coded text of items that have numbers becomes numbers, marked, counted."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.kernel.options import ConfigError
from pipeline.flow import validate
from pipeline.stages import clean, text
from schemas.errors import StageError

GLUCOSE, TROPONIN, KETONE, SCREEN = 50931, 51003, 51484, 50999  # SCREEN: text only ('POS', '<5')
BACTERIA, PLATELETS, BILIRUBIN, HOLD = 51463, 51240, 51464, 50887  # urine bacteria, large platelets
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
    labs = pd.concat([labs, _labs([(30 + n, BACTERIA, value, number) for n, (value, number) in enumerate(
        [("NONE", None), ("0", 0.0), ("FEW", None), ("MANY", None), ("neg.", None), ("OCC", None)])])])
    whole = text.fit_numbered(labs)
    parts = [text.count_numbered(part) for part in (labs.iloc[:7], labs.iloc[7:12], labs.iloc[12:22], labs.iloc[22:])]
    assert text.numbered_from_counts(text.add_numbered(parts)) == whole
    assert whole.items_ == (GLUCOSE, TROPONIN, BACTERIA, KETONE)
    assert whole.kinds == ("numeric", "numeric", "ordinal", "numeric")
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


# -- each item's kind, from all its inpatient results ---------------------------------------------------------
BACTERIA_ROWS = [("NONE", None), ("NONE", None), ("NEG", None), ("0", 0.0), ("FEW", None), ("RARE", None),
                 ("OCC", None), ("MOD", None), ("MANY", None), ("many.", None)]


def _kinds(labs: pd.DataFrame, **options) -> dict[int, tuple[str, str]]:
    numbered = text.fit_numbered(labs, **options)
    return {item: (kind, scale) for item, kind, scale in zip(numbered.items_, numbered.kinds, numbered.table()["SCALE"])}


def _clean(read: pd.DataFrame, numbered: text.NumberedItems) -> clean.Kept:
    admissions = pd.DataFrame({"HADM_ID": [100, 101, 102], "ADMITTIME": [START] * 3,
                               "DISCHTIME": [START + pd.Timedelta(days=30)] * 3}).astype({"HADM_ID": "int64"})
    labitems = pd.DataFrame({"ITEMID": sorted(set(read["ITEMID"].dropna().astype(int))), "FLUID": "Urine",
                             "CATEGORY": "Hematology"}).astype({"ITEMID": "int64"})
    return clean.clean_events(read, admissions, labitems, clean.fit_kinds(read, admissions, labitems, numbered))


def test_an_item_whose_positives_are_words_is_ordinal_and_keeps_them_all_as_ranks():
    """Urine bacteria: 'NONE', 'NEG' and 0 are its absence, its positives the sediment's words. It is never
    numeric on its negatives alone (0 for 'NONE' and the rest quarantined): every result is its rank."""
    labs = _labs([(2 + n, BACTERIA, value, number) for n, (value, number) in enumerate(BACTERIA_ROWS)])
    numbered = text.fit_numbered(labs)
    assert _kinds(labs) == {BACTERIA: ("ordinal", "amount")}
    read = text.read_numbers(labs, numbered)
    assert read["VALUENUM"].tolist() == [0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 3.0, 4.0, 4.0]
    assert (read["Z_CENSORED"] == 0).all() and read["VALUE"].tolist() == labs["VALUE"].tolist()
    kept = _clean(read, numbered)
    assert len(kept.frame) == len(labs) and kept.quarantine.empty
    assert set(kept.frame["KIND"]) == {"ordinal"}
    counts = text.read_counts(labs, numbered)
    assert counts.loc[BACTERIA].tolist() == [0, 0, 9]  # censored, mapped, ranked: the 0 was a number already
    (finding,) = text.read_findings(counts, names={BACTERIA: "Bacteria (Urine)"})
    assert finding.check == "ranked_value" and finding.count == 9 and "51463 Bacteria (Urine) (9 rows)" in \
        finding.message


def test_the_plus_scale_and_the_first_scale_that_holds_an_item():
    labs = _labs([(2, PLATELETS, "1+", None), (3, PLATELETS, "3+", None), (4, PLATELETS, "NEG", None),
                  (5, BILIRUBIN, "NEG", None), (6, BILIRUBIN, "TR", None)])  # both scales hold NEG and TR
    assert _kinds(labs) == {PLATELETS: ("ordinal", "plus"), BILIRUBIN: ("ordinal", "amount")}
    assert text.read_numbers(labs, text.fit_numbered(labs))["VALUENUM"].tolist() == [2.0, 4.0, 0.0, 0.0, 1.0]


def test_an_item_with_a_positive_number_is_numeric_and_its_other_words_stay_text():
    """The urine ketone: 'NEG' beside 15 and 80 is 0; 'TR' is no declared number and stays text, though the
    ordinal scales hold it: the numbers are the item's scale."""
    labs = _labs([(2, KETONE, "15", 15.0), (3, KETONE, "80", 80.0), (4, KETONE, "NEG", None),
                  (5, KETONE, "TR", None), (6, KETONE, "TR", None)])
    assert _kinds(labs) == {KETONE: ("numeric", "")}
    read = text.read_numbers(labs, text.fit_numbered(labs))
    assert read["VALUENUM"].tolist()[:3] == [15.0, 80.0, 0.0] and read["VALUENUM"].iloc[3:].isna().all()


@pytest.mark.parametrize("other", ["HOLD", "SEE COMMENTS"])
def test_an_item_with_only_zero_and_words_no_scale_holds_is_categorical_its_zero_a_category(other):
    """'NONE' and 0 are negatives and the other results words of no scale: the item is categorical, every result
    text (its 0 too, VALUENUM null), so clean keeps them all and codes them."""
    labs = _labs([(2, HOLD, "NONE", None), (3, HOLD, "0", 0.0), (4, HOLD, other, None), (5, HOLD, "MANY", None)])
    numbered = text.fit_numbered(labs)
    assert _kinds(labs) == {HOLD: ("categorical", "")}
    read = text.read_numbers(labs, numbered)
    assert read["VALUENUM"].isna().all()
    kept = _clean(read, numbered)
    assert kept.quarantine.empty and set(kept.frame["KIND"]) == {"categorical"}


def test_an_item_of_zeros_alone_is_numeric_and_one_of_negatives_alone_is_categorical():
    labs = _labs([(2, HOLD, "0", 0.0), (3, HOLD, "0", 0.0), (4, BILIRUBIN, "NEG", None), (5, BILIRUBIN, "NONE", None)])
    assert _kinds(labs) == {HOLD: ("numeric", "")}  # BILIRUBIN: no number, no word above the lowest level


def test_the_kind_is_decided_from_inpatient_rows_alone():
    """An item whose only number is an outpatient row's has no number where it counts: its inpatient 'NEG' stays
    text (categorical), where reading every row made it 0. Rows of an admission or item that failed a raw check
    have no say either."""
    labs = _labs([(2, BILIRUBIN, "NEG", None), (3, BILIRUBIN, "NEG", None), (4, BILIRUBIN, "1", 1.0)])
    labs.loc[4, "HADM_ID"] = pd.NA
    assert _kinds(labs) == {}
    assert text.read_numbers(labs, text.fit_numbered(labs)).loc[[2, 3], "VALUENUM"].isna().all()
    admissions = pd.DataFrame({"HADM_ID": [101, 102]})  # admission 100 (line 2's) failed a raw check
    assert text.inpatient(labs, admissions).tolist() == [False, True, False]
    assert text.inpatient(labs, admissions, pd.DataFrame({"ITEMID": [KETONE]})).tolist() == [False] * 3


def test_a_scale_of_the_config_makes_its_items_ordinal_and_a_bad_scale_is_a_config_error(tmp_path):
    path = tmp_path / "dipstick.toml"
    path.write_text('[clean.ordinal]\ndipstick = ["neg", ["TRACE", "TR"], "SM", "MOD", ["LG", "LGE"]]\n')
    options = load_config(path).clean
    assert list(options.ordinal) == ["amount", "plus", "dipstick"]  # a file's scales added to the declared ones
    assert options.ordinal["dipstick"] == (("NEG",), ("TRACE", "TR"), ("SM",), ("MOD",), ("LG", "LGE"))
    labs = _labs([(2, BILIRUBIN, "NEG", None), (3, BILIRUBIN, "SM", None), (4, BILIRUBIN, "LGE", None)])
    assert _kinds(labs, ordinal=options.ordinal) == {BILIRUBIN: ("ordinal", "dipstick")}
    assert _kinds(labs) == {}  # the declared scales hold neither 'SM' nor 'LGE'
    for scale, message in [('["NEG"]', "must be a list of at least two levels"),
                           ('["NEG", 1]', "a level must be a word or a list of words, got 1"),
                           ('["NEG", []]', "a level must be a word or a list of words, got []"),
                           ('["NEG", ["neg.", "SM"]]', "names 'NEG' more than once"), ('"NEG < SM"', "must be a list")]:
        path.write_text(f"[clean.ordinal]\nbad = {scale}\n")
        with pytest.raises(ConfigError, match=re.escape("[clean.ordinal] 'bad'") + ".*" + re.escape(message)):
            load_config(path)
    path.write_text("[clean]\nmin_kept_share = 1.5\n")
    with pytest.raises(ConfigError, match=r"\[clean\] min_kept_share must be a finite number in \[0, 1\]"):
        load_config(path)


# -- items that keep little of their results -----------------------------------------------------------------
def test_a_numeric_item_that_keeps_less_than_the_share_is_named_with_its_share():
    """Large platelets: one number (8) makes it numeric, its ten words of no declared number are quarantined; it
    keeps 1 of 11 results. The ketone keeps 3 of 4, one of them a declared word."""
    labs = _labs([(2, PLATELETS, "8", 8.0)] + [(3 + n, PLATELETS, "SEE SMEAR", None) for n in range(10)]
                 + [(20, KETONE, "15", 15.0), (21, KETONE, "NEG", None), (22, KETONE, "<5", None),
                    (23, KETONE, "TR", None)])
    numbered = text.fit_numbered(labs)
    names = {PLATELETS: "Large Platelets (Blood)", KETONE: "Ketone (Urine)"}
    (finding,) = text.kept_findings(numbered, names=names)
    assert (finding.check, finding.severity, finding.count, finding.items) == ("biased_item", "warning", 1,
                                                                              [PLATELETS])
    assert ("1 numeric item(s) keep less than 50% of their inpatient results ([clean] min_kept_share): ITEMID "
            "51240 Large Platelets (Blood) keeps 1 of 11 results (9.09%)") in finding.message
    (both,) = text.kept_findings(numbered, min_kept_share=0.8, names=names)
    assert "keep less than 80% of their inpatient results" in both.message
    assert "keep less than 99.5% of" in text.kept_findings(numbered, min_kept_share=0.995)[0].message
    assert both.items == [PLATELETS, KETONE] and "51484 Ketone (Urine) keeps 3 of 4 results (75%), 1 mapped and " \
        "1 censored" in both.message
    assert text.kept_findings(numbered, min_kept_share=0.0) == []
    assert numbered.table().loc[KETONE, ["RESULTS", "KEPT"]].tolist() == [4, 3]


def test_an_ordinal_or_categorical_item_keeps_every_result_and_is_never_named():
    labs = _labs([(2 + n, BACTERIA, value, number) for n, (value, number) in enumerate(BACTERIA_ROWS)]
                 + [(20, SCREEN, "POS", None), (21, SCREEN, "0", 0.0)])
    assert text.kept_findings(text.fit_numbered(labs), min_kept_share=1.0) == []


def test_a_state_saved_before_item_kinds_reads_every_item_as_numeric():
    saved = {"items": [TROPONIN, KETONE], "numbers": [1, 1], "censored": [2, 0], "mapped": [0, 1]}
    numbered = text.NumberedItems.from_json(saved)
    assert numbered.kinds == ("numeric", "numeric") and numbered.items_of("ordinal") == ()
    assert numbered.table()["KEPT"].tolist() == numbered.table()["RESULTS"].tolist() == [3, 2]
    assert text.kept_findings(numbered, min_kept_share=1.0) == []


def test_shuffled_rows_give_the_same_kinds_and_ranks():
    labs = _labs([(2 + n, BACTERIA, value, number) for n, (value, number) in enumerate(BACTERIA_ROWS)]
                 + [(20, PLATELETS, "2+", None), (21, PLATELETS, "NEG", None), (22, KETONE, "15", 15.0),
                    (23, KETONE, "NEG", None)])
    expected = _read(labs)
    for seed in range(3):
        shuffled = labs.sample(frac=1.0, random_state=seed)
        assert text.fit_numbered(shuffled) == text.fit_numbered(labs)
        pd.testing.assert_frame_equal(_read(shuffled).sort_index(), expected)


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


def test_on_the_mimic3_demo_bacteria_keeps_its_positives_and_every_item_under_the_share_is_named(mimic3demo):
    """Urine bacteria (51463): 52 'NONE', 3 'NEG' and 3 '0' beside 114 sediment words; read as a number it kept
    only its negatives and was constant at z = 0. Ordinal, it keeps every inpatient result, positives included."""
    validation = validate(mimic3demo, load_config())
    numbered, kinds = validation.prepared.fitted["text"], validation.prepared.fitted["clean"]
    assert dict(kinds.kinds_)[BACTERIA] == "ordinal"
    assert numbered.table().loc[BACTERIA, ["KIND", "SCALE", "RESULTS", "RANKED"]].tolist() == [
        "ordinal", "amount", 172, 172]
    edges = validation.prepared.edges
    bacteria = edges[edges["ITEMID"] == BACTERIA]
    assert set(bacteria["VALUE"].str.upper()) >= {"FEW", "OCC", "MOD", "MANY", "RARE"}
    assert bacteria["Z"].nunique() > 1  # no longer constant at its negatives' 0
    quarantine = validation.prepared.quarantine.whole()
    assert not ((quarantine["ITEMID"] == BACTERIA) & (quarantine["REASON"] == clean.MIXED_TEXT)).any()
    # Every item whose reading keeps less than the declared share of its results is named, with its share.
    share = load_config().clean.min_kept_share
    table = numbered.table()
    low = set(table.index[table["KEPT"] < share * table["RESULTS"]])
    (finding,) = [f for f in validation.report.findings if f.check == "biased_item"]
    assert low and set(finding.items) == low and finding.count == len(low)
    assert "51087 Length of Urine Collection (Urine) keeps 2 of 115 results (1.74%)" in finding.message
