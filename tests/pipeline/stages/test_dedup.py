"""pipeline/stages/dedup.py: one row per (HADM_ID, TIMESTEP, ITEMID), the latest CHARTTIME, never by input order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.pipeline.stages.sample import sample_filled

from pipeline.stages import bucket as bucket_stage
from pipeline.stages.dedup import KEY, dedup
from schemas.dedup import EdgeRows
from schemas.errors import StageError
from schemas.guard import check_frame

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bucketed() -> pd.DataFrame:
    """The sample's lab rows as the dedup stage receives them (bucketed)."""
    events, admissions = sample_filled()
    return bucket_stage.bucket(events, admissions).frame


def rows(records: list[dict]) -> pd.DataFrame:
    """BucketedEvents from partial records; lines 2, 3, ...

    Defaults: HADM_ID 100 (train), ITEMID 50912, TIMESTEP 0, CHARTTIME 2150-01-01 08:00, VALUENUM 1.0.
    A record with VALUENUM None is a categorical row of its item.
    """
    full = []
    for record in records:
        row = {"HADM_ID": 100, "ITEMID": 50912, "TIMESTEP": 0, "CHARTTIME": "2150-01-01 08:00", "VALUENUM": 1.0,
               "FLAG": None, "SPLIT": "train", **record}
        number = row["VALUENUM"] is not None
        row.setdefault("VALUE", repr(float(row["VALUENUM"])) if number else "NEG")
        row.setdefault("KIND", "numeric" if number else "categorical")
        row.setdefault("CODE", 0 if number else 1)
        row.setdefault("Z", float(row["VALUENUM"]) / 10 if number else 0.0)
        full.append(row)
    n = len(full)
    frame = pd.DataFrame({
        "HADM_ID": pd.Series([r["HADM_ID"] for r in full], dtype="int64"),
        "ITEMID": pd.Series([r["ITEMID"] for r in full], dtype="int64"),
        "CHARTTIME": pd.to_datetime([r["CHARTTIME"] for r in full]).astype("datetime64[ns]"),
        "VALUE": pd.Series([r["VALUE"] for r in full], dtype="str"),
        "FLAG": pd.Series([r["FLAG"] for r in full], dtype="str"),
        "VALUENUM": pd.Series([np.nan if r["VALUENUM"] is None else r["VALUENUM"] for r in full], dtype="float64"),
        "KIND": pd.Series([r["KIND"] for r in full], dtype="str"),
        "SPLIT": pd.Series([r["SPLIT"] for r in full], dtype="str"),
        "CODE": pd.Series([r["CODE"] for r in full], dtype="Int64"),
        "Z": pd.Series([r["Z"] for r in full], dtype="float64"),
        "TIMESTEP": pd.Series([r["TIMESTEP"] for r in full], dtype="int64"),
    })
    frame.index = pd.RangeIndex(2, n + 2, name="line")
    return frame


def values(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows' content, without their source lines."""
    return frame.reset_index(drop=True)


# -- happy path ---------------------------------------------------------------------------------------
def test_sample_has_one_row_per_key_holding_the_latest_charttime(bucketed):
    kept = dedup(bucketed)
    edges = kept.frame
    assert not edges.duplicated(KEY).any()
    assert len(edges) == bucketed.groupby(KEY).ngroups < len(bucketed)  # the sample has re-run panels
    latest = bucketed.groupby(KEY)["CHARTTIME"].max()
    assert (edges.set_index(KEY)["CHARTTIME"] == latest.reindex(edges.set_index(KEY).index)).all()
    assert edges.index.isin(bucketed.index).all()
    pd.testing.assert_frame_equal(edges, bucketed.loc[edges.index])  # rows are kept whole, not rebuilt


def test_merged_rows_are_counted_in_the_step_not_quarantined(bucketed):
    kept = dedup(bucketed)
    (step,) = kept.steps
    assert (step.stage, step.rows_in, step.rows_out) == ("dedup", len(bucketed), len(kept.frame))
    assert step.merged == len(bucketed) - len(kept.frame) > 0
    assert (step.quarantined, step.clipped) == (0, 0) and kept.quarantine.empty


def test_the_latest_charttime_wins():
    events = rows([{"CHARTTIME": "2150-01-01 08:00", "VALUENUM": 5.0},
                   {"CHARTTIME": "2150-01-01 20:00", "VALUENUM": 3.0},
                   {"CHARTTIME": "2150-01-01 14:00", "VALUENUM": 9.0},
                   {"CHARTTIME": "2150-01-01 09:00", "VALUENUM": 2.0, "ITEMID": 50971}])
    kept = dedup(events)
    assert kept.frame.index.tolist() == [3, 5]
    assert kept.frame["VALUENUM"].tolist() == [3.0, 2.0]
    assert kept.steps[0].merged == 2


def test_rows_in_other_timesteps_or_admissions_are_not_merged():
    events = rows([{"TIMESTEP": 0}, {"TIMESTEP": 1}, {"HADM_ID": 101}, {"ITEMID": 50971}])
    kept = dedup(events)
    assert len(kept.frame) == 4 and kept.steps[0].merged == 0


@pytest.mark.parametrize("tied", [
    [{"VALUENUM": 4.0}, {"VALUENUM": 7.0}, {"VALUENUM": 5.5}],
    [{"VALUENUM": 4.0, "FLAG": "abnormal"}, {"VALUENUM": 4.0}, {"VALUENUM": 4.0, "FLAG": "delta"}],
    [{"VALUENUM": 4.0, "VALUE": "4"}, {"VALUENUM": 4.0, "VALUE": "4.0"}],
    [{"VALUENUM": None, "VALUE": "NEG", "CODE": 1}, {"VALUENUM": None, "VALUE": "TR", "CODE": 2},
     {"VALUENUM": None, "VALUE": None, "CODE": 0}],
], ids=["value", "flag", "value-text", "categorical"])
def test_a_charttime_tie_is_broken_by_content_whatever_the_row_order(tied):
    events = rows([{**record, "CHARTTIME": "2150-01-01 10:00"} for record in tied]
                  + [{"CHARTTIME": "2150-01-01 06:00", "VALUENUM": 99.0}])  # earlier: never kept
    n = len(events)
    orders = [list(range(n)), list(reversed(range(n))), [1, 0, *range(2, n)], [n - 1, *range(n - 1)]]
    kept = [values(dedup(events.iloc[order]).frame) for order in orders]
    assert len(kept[0]) == 1 and kept[0]["CHARTTIME"].iloc[0] == pd.Timestamp("2150-01-01 10:00")
    for other in kept[1:]:
        pd.testing.assert_frame_equal(other, kept[0])


def test_identical_rows_on_different_lines_keep_one_of_them():
    events = rows([{"VALUENUM": 4.0}, {"VALUENUM": 4.0}])
    kept = dedup(events)
    assert len(kept.frame) == 1 and kept.steps[0].merged == 1
    pd.testing.assert_frame_equal(values(kept.frame), values(events.iloc[:1]))


def test_output_is_sorted_by_split_admission_timestep_and_item():
    events = rows([
        {"HADM_ID": 5, "SPLIT": "test", "TIMESTEP": 0},
        {"HADM_ID": 900, "SPLIT": "train", "TIMESTEP": 2, "ITEMID": 50971},
        {"HADM_ID": 900, "SPLIT": "train", "TIMESTEP": 2, "ITEMID": 50912},
        {"HADM_ID": 60, "SPLIT": "val", "TIMESTEP": 0},
        {"HADM_ID": 900, "SPLIT": "train", "TIMESTEP": 1},
        {"HADM_ID": 400, "SPLIT": "train", "TIMESTEP": 3},
        {"HADM_ID": 7, "SPLIT": "test", "TIMESTEP": 0},
    ])
    edges = dedup(events).frame
    assert edges["SPLIT"].tolist() == ["train"] * 4 + ["val"] + ["test"] * 2  # not alphabetical
    assert list(zip(edges["HADM_ID"], edges["TIMESTEP"], edges["ITEMID"])) == [
        (400, 3, 50912), (900, 1, 50912), (900, 2, 50912), (900, 2, 50971), (60, 0, 50912), (5, 0, 50912),
        (7, 0, 50912)]


def test_sample_output_is_sorted_by_split_then_key(bucketed):
    edges = dedup(bucketed).frame
    order = edges["SPLIT"].map({"train": 0, "val": 1, "test": 2})
    assert order.is_monotonic_increasing
    keys = list(zip(order, *(edges[column] for column in KEY)))
    assert keys == sorted(keys)


def test_the_stage_does_not_change_its_input(bucketed):
    before = bucketed.copy()
    dedup(bucketed)
    pd.testing.assert_frame_equal(bucketed, before)


# -- bad input ----------------------------------------------------------------------------------------
def test_edge_rows_schema_refuses_a_duplicate_key(bucketed):
    edges = dedup(bucketed).frame
    duplicate = pd.concat([edges, edges.iloc[[3]].rename(index={edges.index[3]: 999_999})])
    with pytest.raises(StageError) as caught:
        check_frame(EdgeRows, duplicate, stage="dedup", side="output")
    error = caught.value
    assert (error.stage, error.side) == ("dedup", "output")
    assert sorted(error.lines) == sorted([int(edges.index[3]), 999_999])
    assert "EdgeRows" in str(error) and error.count >= 2


def test_input_without_a_timestep_is_refused_naming_the_column():
    events = rows([{}]).drop(columns="TIMESTEP")
    with pytest.raises(StageError) as caught:
        dedup(events)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("dedup", "input", "column_in_dataframe",
                                                                    "TIMESTEP")
    assert str(error).startswith("[dedup:input] BucketedEvents.TIMESTEP column_in_dataframe: 1 column missing: "
                                 "TIMESTEP (int64): the row's interval since the start of its admission day")


def test_input_with_a_negative_timestep_is_refused_naming_the_line():
    events = rows([{"TIMESTEP": 0}, {"TIMESTEP": -1}])
    with pytest.raises(StageError) as caught:
        dedup(events)
    assert (caught.value.side, caught.value.column, caught.value.lines) == ("input", "TIMESTEP", [3])


# -- determinism --------------------------------------------------------------------------------------
def test_shuffled_rows_give_the_same_edges(bucketed):
    first = dedup(bucketed)
    for seed in (1, 2):
        again = dedup(bucketed.sample(frac=1.0, random_state=seed))
        pd.testing.assert_frame_equal(values(again.frame), values(first.frame))
        assert again.steps == first.steps


def test_renumbered_lines_give_the_same_edges(bucketed):
    """The file's rows in another order: line numbers change, the kept content must not."""
    shuffled = bucketed.sample(frac=1.0, random_state=4)
    shuffled.index = pd.RangeIndex(2, len(shuffled) + 2, name="line")
    pd.testing.assert_frame_equal(values(dedup(shuffled).frame), values(dedup(bucketed).frame))


def test_the_one_key_sort_keeps_the_rows_one_full_sort_of_every_row_would(bucketed):
    """The reference: one stable sort of every row by split, key and content, keeping each key's last row."""
    moved = bucketed.sample(frac=0.3, random_state=7)
    # Re-charted copies an hour earlier, exact copies (full ties) and copies with another value.
    noisy = pd.concat([bucketed, moved.assign(CHARTTIME=moved["CHARTTIME"] - pd.Timedelta(hours=1)),
                       moved.head(200), moved.tail(200).assign(VALUENUM=moved.tail(200)["VALUENUM"] + 1)])
    noisy = noisy.sample(frac=1.0, random_state=3)
    noisy.index = pd.RangeIndex(2, len(noisy) + 2, name="line")
    split = pd.Categorical(noisy["SPLIT"], categories=["train", "val", "test"]).codes
    reference = noisy.assign(_SPLIT=split).sort_values(
        ["_SPLIT", *KEY, "CHARTTIME", "VALUENUM", "VALUE", "FLAG"], kind="stable", na_position="first")
    reference = reference[~reference.duplicated(KEY, keep="last")].drop(columns="_SPLIT")

    got = dedup(noisy).frame
    pd.testing.assert_frame_equal(got, reference)
    assert len(got) < len(noisy) - 400
