"""schemas/registered.py: badpoints' checks registered with pandera, for a user's own schema. Each finds the rows it
says (in pandera's own validate), keeps its statistics through pandera's YAML, and a table check gives the same rows
on a frame whole and block by block (its state fitted on all the blocks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest

from schemas import registered
from schemas.catalogue import CHECKS
from schemas.registered import TABLE_FITS, fitted_on, key_of


def failing(schema: pa.DataFrameSchema, frame: pd.DataFrame) -> dict[str, list[int]]:
    """The rows (index) each check of ``schema`` fails on ``frame``, by check name; a table-wide failure is [-1]."""
    try:
        schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases
        names = cases["check"].astype(str).str.replace(r"\(.*", "", regex=True)
        return {name: sorted({-1 if pd.isna(i) else int(i) for i in rows["index"]})
                for name, rows in cases.groupby(names)}
    return {}


@pytest.fixture
def labs() -> pd.DataFrame:
    """A user's preprocessed lab rows: item 1's std was 0 in train and std + 1e-7 made its other rows' z 1e7."""
    return pd.DataFrame({
        "HADM_ID": [10, 11, 12, 13, 14, 15, 16, 16],
        "ITEMID": [1, 1, 1, 2, 2, 2, 3, 3],
        "VALUENUM": [5.0, 5.0, 6.0, 1.0, 2.0, 3.0, 7.0, 7.0],
        "Z": [0.0, 0.0, 1e7, -1.2, 0.0, 1.2, 0.0, 0.0],
        "CODE": [0, 1, 2, 2, 1, 0, 3, 1],
        "T": [1, 2, 3, 1, 0, 2, 5, 6],
        "SUBJECT": [1, 1, 2, 3, 3, 4, 5, 5],
        "SPLIT": ["train", "train", "test", "train", "val", "val", "test", "test"],
    }, index=range(2, 10))


CASES = [
    (pa.Check.z_within(bound=10), "Z", [4]),
    (pa.Check.finite(), "Z", []),
    (pa.Check.code_in_range(n=3), "CODE", [8]),
    (pa.Check.label_in_range(num_classes=2), "CODE", [4, 5, 8]),
    (pa.Check.values_within(low=0, high=5), "T", [9]),
]


@pytest.mark.parametrize(("check", "column", "rows"), CASES, ids=lambda c: getattr(c, "name", None))
def test_a_row_check_fails_the_rows_it_says(labs, check, column, rows):
    schema = pa.DataFrameSchema({column: pa.Column(checks=[check])})
    assert failing(schema, labs).get(check.name, []) == rows


TABLE_CASES = [
    (pa.Check.z_explained(column="Z", values="VALUENUM", by="ITEMID"), [4]),
    (pa.Check.z_within(bound=10, column="Z", by="ITEMID"), [4]),
    (pa.Check.keys_unique(columns=["HADM_ID"]), [8, 9]),
    (pa.Check.monotone_within(column="T", by="ITEMID"), [6]),
    (pa.Check.one_value_per_group(column="SPLIT", by="SUBJECT"), [5, 6]),
    (pa.Check.not_empty(), []),
    (pa.Check.kept_share(rows_in=100, at_least=0.5), [-1]),
    (pa.Check.added_share(rows_in=4, at_most=0.5), [-1]),
]


@pytest.mark.parametrize(("check", "rows"), TABLE_CASES, ids=lambda c: getattr(c, "name", None))
def test_a_table_check_fails_the_rows_it_says(labs, check, rows):
    assert failing(pa.DataFrameSchema(checks=[check]), labs).get(check.name, []) == rows


def test_an_empty_table_fails_not_empty(labs):
    assert failing(pa.DataFrameSchema(checks=[pa.Check.not_empty()]), labs.iloc[:0]) == {"not_empty": [-1]}


def test_added_share_passes_the_rows_it_allows_and_fails_a_join_that_repeats_them(labs):
    """at_most=0: as many rows as came in pass, one more fails (a join that repeated a row)."""
    kept = pa.DataFrameSchema(checks=[pa.Check.added_share(rows_in=len(labs), at_most=0)])
    assert failing(kept, labs) == {}
    assert failing(kept, pd.concat([labs, labs.iloc[:1]])) == {"added_share": [-1]}


def test_z_explained_leaves_a_real_outlier_and_a_tiny_real_spread_alone():
    """A z that is large because the value is far out (a real outlier) and an item of 1e6 +- 1e-3 (a tiny but
    real spread) are what z-scores of their values can be: only a scale far below the values' spread fails."""
    frame = pd.DataFrame({"ITEMID": [1] * 6 + [2] * 4,
                          "X": [1.0, 1.1, 0.9, 1.0, 1.05, 60.0, 1e6, 1e6 + 1e-3, 1e6 - 1e-3, 1e6],
                          "Z": [0.0, 1.0, -1.0, 0.0, 0.5, 590.0, 0.0, 1.0, -1.0, 0.0]})
    assert failing(pa.DataFrameSchema(checks=[pa.Check.z_explained(column="Z", values="X", by="ITEMID")]), frame) == {}


@pytest.mark.parametrize(("check", "rows"), [case for case in TABLE_CASES if case[0].name in TABLE_FITS],
                         ids=lambda c: getattr(c, "name", None))
def test_a_table_check_gives_the_same_rows_block_by_block(labs, check, rows):
    """Fitted on three blocks in row order and checked a block at a time, a table check fails exactly the rows it
    fails on the whole frame."""
    statistics, fit = dict(check.statistics), TABLE_FITS[check.name]
    blocks = [labs.iloc[:3], labs.iloc[3:5], labs.iloc[5:]]
    state = fit.finish(fit.combine([fit.partial(block, **statistics) for block in blocks]), **statistics)
    found = []
    with fitted_on({key_of(check.name, statistics): state}):
        for block in blocks:
            found += failing(pa.DataFrameSchema(checks=[check]), block).get(check.name, [])
    assert sorted(set(found)) == rows  # a table-wide failure ([-1]) is each block's: once for the run


ALL = [check for check, *_ in CASES + TABLE_CASES]


@pytest.mark.parametrize("check", ALL, ids=lambda c: c.name)
def test_every_registered_check_round_trips_through_pandera_yaml(labs, check):
    """A schema using it is the same schema after to_yaml and from_yaml, and finds the same rows."""
    schema = (pa.DataFrameSchema({"Z": pa.Column(checks=[check])}) if not check.statistics or "column" not in
              check.statistics and "columns" not in check.statistics and check.name in ("finite", "z_within",
                                                                                          "code_in_range",
                                                                                          "label_in_range",
                                                                                          "values_within")
              else pa.DataFrameSchema(checks=[check]))
    again = pa.DataFrameSchema.from_yaml(schema.to_yaml())
    assert again == schema
    assert failing(again, labs) == failing(schema, labs)


def test_every_registered_check_is_in_the_catalogue_and_every_catalogued_one_registered():
    names = {check.name for check in ALL}
    declared = {info.id for info in registered.CHECKS} - {"table_schema"}
    assert names == declared
    assert all(CHECKS[name].stage == "check" for name in declared)
    assert all(hasattr(pa.Check, name) for name in declared)


def test_a_table_check_reads_nan_and_inf_as_no_number():
    frame = pd.DataFrame({"ITEMID": [1, 1, 1], "X": [np.nan, 1.0, 2.0], "Z": [np.inf, -1.0, 1.0]})
    check = pa.Check.z_explained(column="Z", values="X", by="ITEMID")
    assert failing(pa.DataFrameSchema(checks=[check]), frame) == {}


def test_z_explained_fails_only_finite_rows_and_leaves_inf_and_nan_to_finite():
    """Item 1's values are all 5.0 but its z varies (std + 1e-7): its finite rows with |z| > 1 fail z_explained;
    its inf, -inf and NaN rows are finite's to name, not counted again."""
    frame = pd.DataFrame({"ITEMID": [1] * 6 + [2] * 3,
                          "X": [5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 1.0, 2.0, 3.0],
                          "Z": [0.0, 1e7, -1e7, np.inf, -np.inf, np.nan, -1.2, 0.0, 1.2]})
    schema = pa.DataFrameSchema({"Z": pa.Column(float, nullable=True, checks=[pa.Check.finite()])},
                                checks=[pa.Check.z_explained(column="Z", values="X", by="ITEMID")])
    assert failing(schema, frame) == {"finite": [3, 4], "z_explained": [1, 2]}


def test_z_explained_is_the_rule_docs_check_md_writes():
    """docs/check.md's rule, computed here from each group's spreads of its finite rows (population std):
    a group of 2 rows or more fails when s_z > 0 and (s_x = 0 or s_z > 1 / min_ratio); its finite rows with
    |z| > 1 fail. Real z-scores, shifted ones (fitted on other rows), a constant item under std + 1e-7, a tiny
    std, a lone row and a constant z: the check fails the rows the rule says."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "check.md").read_text()
    assert "fails when s_z > 0 and (s_x = 0 or s_z > 1 / min_ratio)" in " ".join(page.replace("`", "").split())
    rng = np.random.default_rng(5)
    x = {1: rng.normal(10, 2, 30), 2: rng.normal(10, 2, 30), 3: np.full(20, 4.0), 4: rng.normal(5, 1e-4, 20),
         5: np.array([7.0]), 6: rng.normal(3, 1, 10)}
    z = {1: (x[1] - 10) / 2, 2: (x[2] - 14) / 0.1, 3: np.r_[np.zeros(10), np.full(10, 3e7)],
         4: (x[4] - 5) / (1e-4 / 1e4), 5: np.array([9e9]), 6: np.full(10, 50.0)}
    frame = pd.DataFrame({"ITEMID": np.concatenate([[g] * len(x[g]) for g in x]), "X": np.concatenate(list(x.values())),
                          "Z": np.concatenate(list(z.values()))})
    frame.loc[[75, 3], "Z"] = [np.inf, np.nan]  # in the constant item, and in the real one
    for min_ratio in (1e-3, 0.1):
        expected = []
        for _, group in frame.groupby("ITEMID"):
            ok = group[np.isfinite(group["X"]) & np.isfinite(group["Z"])]
            s_x, s_z = ok["X"].std(ddof=0), ok["Z"].std(ddof=0)
            if len(ok) > 1 and s_z > 0 and (s_x == 0 or s_z > 1 / min_ratio):
                expected += ok.index[ok["Z"].abs() > 1].tolist()
        check = pa.Check.z_explained(column="Z", values="X", by="ITEMID", min_ratio=min_ratio)
        assert failing(pa.DataFrameSchema(checks=[check]), frame).get("z_explained", []) == sorted(expected)
        assert set(frame.loc[expected, "ITEMID"]) == ({3, 4} if min_ratio == 1e-3 else {2, 3, 4})
