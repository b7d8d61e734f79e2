"""pipeline/stages/split.py: every admission in one split, patients never straddling, seeded and free of row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages import split
from pipeline.config import load_config
from schemas.errors import StageError
from schemas.split import SPLITS
from tests.pipeline.stages.sample import sample_stages, shuffled

DEFAULTS = load_config().split
RATIOS = {"train": DEFAULTS.train, "val": DEFAULTS.val, "test": DEFAULTS.test}


def _assign(admissions: pd.DataFrame, **changes) -> pd.DataFrame:
    return split.assign_splits(admissions, **{**RATIOS, "seed": DEFAULTS.seed, **changes})


def _admissions(subjects: list[int | None], hadm_ids: list[int]) -> pd.DataFrame:
    """Clean admissions (the split stage's input) for the given SUBJECT_ID of each HADM_ID."""
    admit = pd.Timestamp("2150-01-01") + pd.to_timedelta(np.arange(len(hadm_ids)), unit="D")
    return pd.DataFrame({
        "HADM_ID": np.asarray(hadm_ids, dtype="int64"),
        "ADMITTIME": admit.astype("datetime64[ns]"),
        "DISCHTIME": (admit + pd.Timedelta(hours=30)).astype("datetime64[ns]"),
        "SUBJECT_ID": pd.array(subjects, dtype="Int64"),
    }, index=pd.Index(np.arange(2, len(hadm_ids) + 2), name="line"))


def _holds(assignment: pd.DataFrame, admissions: pd.DataFrame, group: str) -> None:
    """The split guard, said again: one split per admission, none empty, a group in one split."""
    assert sorted(assignment["HADM_ID"]) == sorted(admissions["HADM_ID"])
    assert assignment["HADM_ID"].is_unique
    assert set(assignment["SPLIT"]) == set(SPLITS)
    expected_group = admissions.set_index("HADM_ID")[group].astype("int64")
    assert (assignment.set_index("HADM_ID")["GROUP"] == expected_group.reindex(assignment["HADM_ID"])).all()
    assert (assignment.groupby("GROUP")["SPLIT"].nunique() == 1).all()


@pytest.fixture(scope="module")
def sample():
    return sample_stages()


# -- happy path on the sample ------------------------------------------------------------------------
def test_sample_admissions_each_in_one_split_and_patients_never_straddle(sample):
    admissions = sample.admissions.frame
    assignment = sample.splits
    _holds(assignment, admissions, "SUBJECT_ID")
    assert split.split_by_subject(admissions)
    assert list(assignment.columns) == ["HADM_ID", "GROUP", "SPLIT"]
    assert assignment["HADM_ID"].is_monotonic_increasing
    subjects = {name: set(assignment.loc[assignment["SPLIT"] == name, "GROUP"]) for name in SPLITS}
    assert not (subjects["train"] & subjects["val"] or subjects["train"] & subjects["test"]
                or subjects["val"] & subjects["test"])


def test_sample_split_sizes_follow_the_ratios(sample):
    assignment = sample.splits
    groups = assignment.drop_duplicates("GROUP")["SPLIT"].value_counts()
    total = int(groups.sum())
    assert total == sample.admissions.frame["SUBJECT_ID"].nunique() > 10
    for name, ratio in RATIOS.items():
        assert abs(groups[name] - ratio * total) <= 1, (name, groups[name], ratio * total)
    admissions = assignment["SPLIT"].value_counts(normalize=True)
    assert admissions["train"] > 0.6 and admissions["val"] < 0.25 and admissions["test"] < 0.25


def test_attach_split_gives_every_event_its_admissions_split(sample):
    events = sample.split_events
    of_admission = sample.splits.set_index("HADM_ID")["SPLIT"]
    assert events.index.equals(sample.events.frame.index)
    assert (events["SPLIT"] == events["HADM_ID"].map(of_admission)).all()
    assert set(events["SPLIT"]) == set(SPLITS)
    pd.testing.assert_frame_equal(events.drop(columns="SPLIT"), sample.events.frame)


def test_without_subject_id_admissions_are_the_groups(sample):
    admissions = sample.admissions.frame.drop(columns="SUBJECT_ID")
    assert not split.split_by_subject(admissions)
    assignment = _assign(admissions)
    assert (assignment["GROUP"] == assignment["HADM_ID"]).all()
    _holds(assignment, admissions.assign(GROUP=admissions["HADM_ID"]), "GROUP")


def test_incomplete_subject_id_falls_back_to_admissions():
    admissions = _admissions([1, 1, 2, None, 3, 3], [11, 12, 21, 22, 31, 32])
    assert not split.split_by_subject(admissions)
    assert (_assign(admissions)["GROUP"] == [11, 12, 21, 22, 31, 32]).all()


# -- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("subjects", [[7, 7, 7], [7, 8, 8, 7]])
def test_fewer_than_three_patients_cannot_fill_the_splits(subjects):
    admissions = _admissions(subjects, list(range(100, 100 + len(subjects))))
    with pytest.raises(StageError) as caught:
        _assign(admissions)
    error = caught.value
    assert (error.stage, error.side, error.check, error.column) == ("split", "output", "split_empty", "SPLIT")
    assert error.count == 3 - len(set(subjects))
    assert f"{len(set(subjects))} patient group(s) cannot fill train, val and test" in str(error)


def test_three_patients_fill_each_split_once():
    admissions = _admissions([7, 8, 9, 9], [100, 101, 102, 103])
    assignment = _assign(admissions)
    _holds(assignment, admissions, "SUBJECT_ID")
    assert assignment.drop_duplicates("GROUP")["SPLIT"].value_counts().to_dict() == {"train": 1, "val": 1, "test": 1}


def test_unclean_admissions_are_refused_on_input(sample):
    admissions = sample.admissions.frame.copy()
    admissions["HADM_ID"] = admissions["HADM_ID"].astype("float64")  # ids that went through a float
    with pytest.raises(StageError) as caught:
        _assign(admissions)
    error = caught.value
    assert (error.stage, error.side, error.column, error.table) == ("split", "input", "HADM_ID", "CleanAdmissions")
    assert "int64" in error.check and str(error).startswith("[split:input] CleanAdmissions.HADM_ID ")


# -- determinism -------------------------------------------------------------------------------------
def test_same_seed_and_shuffled_rows_give_the_same_assignment(sample):
    admissions = sample.admissions.frame
    pd.testing.assert_frame_equal(_assign(admissions), _assign(shuffled(admissions)))
    pd.testing.assert_frame_equal(_assign(admissions), sample.splits)


def test_another_seed_gives_another_assignment(sample):
    admissions = sample.admissions.frame
    first, other = _assign(admissions), _assign(admissions, seed=DEFAULTS.seed + 1)
    assert first["HADM_ID"].equals(other["HADM_ID"])
    assert not first["SPLIT"].equals(other["SPLIT"])
    _holds(other, admissions, "SUBJECT_ID")


@st.composite
def admissions_tables(draw):
    per_subject = draw(st.lists(st.integers(1, 5), min_size=3, max_size=60))
    subjects = draw(st.lists(st.integers(1, 10**7), min_size=len(per_subject), max_size=len(per_subject),
                             unique=True))
    rows = [subject for subject, n in zip(subjects, per_subject) for _ in range(n)]
    hadm_ids = draw(st.permutations(list(range(100_000, 100_000 + len(rows)))))
    return _admissions(rows, hadm_ids)


@settings(max_examples=40)
@given(admissions=admissions_tables(), seed=st.integers(0, 2**32 - 1),
       weights=st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 20)))
def test_any_admissions_table_keeps_the_guard(admissions, seed, weights):
    train, val, test = (w / sum(weights) for w in weights)
    assignment = split.assign_splits(admissions, train=train, val=val, test=test, seed=seed)
    _holds(assignment, admissions, "SUBJECT_ID")
    groups = assignment.drop_duplicates("GROUP")["SPLIT"].value_counts()
    assert groups.sum() == admissions["SUBJECT_ID"].nunique()
