"""pipeline/stages/graph/stats.py: each feature column's training statistics are PyTorch Frame's own
(``torch_frame.data.stats.compute_col_stats``) of the same values, and the counts of parts add up to those of the
whole, whatever the cut: the engines may count the edge rows part by part."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch_frame
from torch_frame.data.stats import StatType, compute_col_stats

from pipeline.stages.graph.stats import add_counts, column_stats, count_column, count_frame, edge_counts
from schemas.graph import CATEGORICAL, MARK, NUMERICAL, Column

Z = Column("Z", NUMERICAL)
CODE = Column("CODE", CATEGORICAL, 6)


def torch_frames(values: np.ndarray) -> dict:
    """What PyTorch Frame computes of a numerical column's values (float64, as a DataFrame column holds them)."""
    return compute_col_stats(pd.Series(values.astype("float64")), torch_frame.numerical)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 1000])
def test_a_float_columns_statistics_are_pytorch_frames_of_its_values(n):
    generator = np.random.default_rng(n)
    values = np.round(generator.normal(0.5, 3.0, n), 1).astype("float32")  # repeated values, as z-scores have
    ours = column_stats(count_column(values, Z), Z)
    theirs = torch_frames(values)
    assert ours["quantiles"] == theirs[StatType.QUANTILES]  # the same order statistics, interpolated as numpy does
    assert ours["mean"] == pytest.approx(theirs[StatType.MEAN], rel=1e-12, abs=1e-15)
    assert ours["std"] == pytest.approx(theirs[StatType.STD], rel=1e-12, abs=1e-15)


def test_a_mark_of_one_value_has_its_value_everywhere_and_no_spread():
    stats = column_stats(count_column(np.zeros(9, dtype="float32"), Column("Z_UNSEEN", MARK)), Column("Z_UNSEEN", MARK))
    assert stats == {"mean": 0.0, "std": 0.0, "quantiles": [0.0] * 5}


def test_a_column_without_training_rows_has_no_statistics():
    assert column_stats(count_column(np.zeros(0, dtype="float32"), Z), Z) == {
        "mean": None, "std": None, "quantiles": [None] * 5}
    assert column_stats(count_column(np.zeros(0, dtype="int64"), CODE), CODE) == {"count": [0] * 6}


def test_a_categorical_column_counts_every_index_up_to_its_cardinality():
    counts = count_column(np.array([1, 1, 0, 4, 1]), CODE)
    assert column_stats(counts, CODE) == {"count": [1, 3, 0, 0, 1, 0]}  # indices 2, 3 and 5: none in train
    # PyTorch Frame's COUNT of the same values: the same counts, for the indices it saw
    index, seen = compute_col_stats(pd.Series([1, 1, 0, 4, 1]), torch_frame.categorical)[StatType.COUNT]
    assert dict(zip(index, seen)) == {i: n for i, n in enumerate(column_stats(counts, CODE)["count"]) if n}


def test_an_index_outside_the_cardinality_is_left_to_the_guard():
    assert column_stats(count_column(np.array([-1, 2, 6, 99]), CODE), CODE) == {"count": [0, 0, 1, 0, 0, 0]}


@pytest.mark.parametrize("cuts", [1, 2, 5, 40])
def test_the_counts_of_parts_add_up_to_those_of_all_the_rows(cuts):
    generator = np.random.default_rng(cuts)
    rows = pd.DataFrame({"SPLIT": generator.choice(["train", "val", "test"], 400, p=[0.8, 0.1, 0.1]),
                         "Z": np.round(generator.normal(0, 2, 400), 2),
                         "Z_BOUNDED": generator.integers(0, 2, 400).astype("int8"),
                         "CODE": pd.array(generator.integers(0, 6, 400), dtype="Int64")})
    features = {"edge_attr": (Z, Column("Z_BOUNDED", MARK)), "edge_attr_cat": (CODE,)}
    bounds = np.linspace(0, len(rows), cuts + 1).astype(int)
    parts = [edge_counts(rows.iloc[lo:hi], features) for lo, hi in zip(bounds[:-1], bounds[1:])]
    whole = edge_counts(rows, features)
    added = add_counts(parts[::-1])  # in any order
    assert added.keys() == whole.keys()
    for tensor in whole:
        for name, counts in whole[tensor].items():
            column = {c.name: c for c in features[tensor]}[name]
            assert column_stats(added[tensor][name], column) == column_stats(counts, column)
    train = rows[rows["SPLIT"] == "train"]
    assert column_stats(whole["edge_attr"]["Z"], Z)["quantiles"] == torch_frames(
        train["Z"].to_numpy("float64").astype("float32"))[StatType.QUANTILES]  # training rows, as float32
    assert sum(column_stats(whole["edge_attr_cat"]["CODE"], CODE)["count"]) == len(train)


def test_count_frame_reads_each_column_as_the_graphs_hold_it():
    rows = pd.DataFrame({"Z": [0.1, 0.1, 1e-8], "CODE": pd.array([2, 2, 5], dtype="Int64")})
    counts = count_frame(rows, {"edge_attr": (Z,), "edge_attr_cat": (CODE,)}, ("edge_attr", "edge_attr_cat"))
    distinct, seen = counts["edge_attr"]["Z"]
    assert distinct.dtype == np.float32 and distinct.tolist() == [np.float32(1e-8), np.float32(0.1)]
    assert seen.tolist() == [1, 2]
    assert counts["edge_attr_cat"]["CODE"].tolist() == [0, 0, 2, 0, 0, 1]
