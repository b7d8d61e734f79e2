"""pipeline/stages/bucket.py: timestep = whole intervals since midnight of the admission day.

Rows charted before the admission day are quarantined; rows beyond the last
timestep or too long after discharge are quarantined or clipped, per policy,
and every row is accounted for in the stage's steps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.pipeline.stages.sample import sample_filled

from pipeline.stages import bucket as bucket_stage
from pipeline.stages.bucket import AFTER_DISCHARGE, BEFORE, BEYOND_MAX, BEYOND_STAY, bucket
from pipeline.config import load_config
from schemas.errors import StageError

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
ADMIT, DISCHARGE = pd.Timestamp("2150-03-10 14:20"), pd.Timestamp("2150-03-13 09:00")  # HADM_ID 100


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config():
    return load_config()


@pytest.fixture(scope="module")
def sample(config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sample's lab rows as the bucket stage receives them (filled), and the clean admissions."""
    return sample_filled()


def admissions_frame(stays: dict[int, tuple[str, str]] | None = None) -> pd.DataFrame:
    stays = stays or {100: (str(ADMIT), str(DISCHARGE))}
    return pd.DataFrame({
        "HADM_ID": pd.Series(list(stays), dtype="int64"),
        "ADMITTIME": pd.to_datetime([a for a, _ in stays.values()], format="ISO8601").astype("datetime64[ns]"),
        "DISCHTIME": pd.to_datetime([d for _, d in stays.values()], format="ISO8601").astype("datetime64[ns]"),
    })


def filled_rows(times: list[str], hadm_id: int = 100, first_line: int = 2) -> pd.DataFrame:
    """FilledEvents: one numeric row of ITEMID 50912 per CHARTTIME, lines first_line, first_line + 1, ..."""
    n = len(times)
    frame = pd.DataFrame({
        "HADM_ID": pd.Series([hadm_id] * n, dtype="int64"),
        "ITEMID": pd.Series([50912] * n, dtype="int64"),
        "CHARTTIME": pd.to_datetime(times).astype("datetime64[ns]"),
        "VALUE": pd.Series([str(1.0 + k / 10) for k in range(n)], dtype="str"),
        "FLAG": pd.Series([None] * n, dtype="str"),
        "VALUENUM": pd.Series([1.0 + k / 10 for k in range(n)], dtype="float64"),
        "KIND": pd.Series(["numeric"] * n, dtype="str"),
        "SPLIT": pd.Series(["train"] * n, dtype="str"),
        "CODE": pd.Series([0] * n, dtype="Int64"),
        "Z": pd.Series([0.1 * k for k in range(n)], dtype="float64"),
    })
    frame.index = pd.RangeIndex(first_line, first_line + n, name="line")
    return frame


def timesteps(kept) -> dict[str, int]:
    frame = kept.frame
    return dict(zip(frame["CHARTTIME"].dt.strftime("%m-%d %H:%M"), frame["TIMESTEP"]))


# -- happy path ---------------------------------------------------------------------------------------
def test_sample_timestep_counts_calendar_days_since_the_admission_day(sample):
    events, admissions = sample
    kept = bucket(events, admissions)
    stays = admissions.set_index("HADM_ID")
    admit_day = kept.frame["HADM_ID"].map(stays["ADMITTIME"]).dt.normalize()
    days = (kept.frame["CHARTTIME"].dt.normalize() - admit_day).dt.days
    assert kept.frame["TIMESTEP"].dtype == np.int64
    assert (kept.frame["TIMESTEP"] == days).all()
    assert kept.frame["TIMESTEP"].min() == 0 and kept.frame["TIMESTEP"].max() <= 99
    assert len(kept.frame) + len(kept.quarantine) == len(events)
    assert kept.frame.drop(columns="TIMESTEP").equals(events.loc[kept.frame.index])


def test_a_day_is_counted_from_midnight_of_the_admission_day():
    events = filled_rows(["2150-03-10 14:25", "2150-03-10 23:59", "2150-03-11 00:01", "2150-03-12 23:59",
                          "2150-03-13 00:00"])
    assert timesteps(bucket(events, admissions_frame())) == {
        "03-10 14:25": 0, "03-10 23:59": 0, "03-11 00:01": 1, "03-12 23:59": 2, "03-13 00:00": 3}


def test_interval_hours_sets_the_width_of_a_timestep():
    events = filled_rows(["2150-03-10 05:59", "2150-03-10 06:00", "2150-03-10 14:25", "2150-03-10 23:59",
                          "2150-03-11 00:01"])
    assert timesteps(bucket(events, admissions_frame(), interval_hours=6)) == {
        "03-10 05:59": 0, "03-10 06:00": 1, "03-10 14:25": 2, "03-10 23:59": 3, "03-11 00:01": 4}
    assert timesteps(bucket(events, admissions_frame(), interval_hours=48))["03-11 00:01"] == 0


def test_a_lab_earlier_on_the_admission_day_gets_timestep_zero():
    kept = bucket(filled_rows(["2150-03-10 00:00", "2150-03-10 03:00"]), admissions_frame())  # ED labs
    assert kept.frame["TIMESTEP"].tolist() == [0, 0] and kept.quarantine.empty


def test_each_admission_counts_from_its_own_day():
    stays = {100: (str(ADMIT), str(DISCHARGE)), 200: ("2150-03-12 23:00", "2150-03-14 10:00")}
    events = pd.concat([filled_rows(["2150-03-13 01:00"], hadm_id=100),
                        filled_rows(["2150-03-13 01:00"], hadm_id=200, first_line=3)])
    assert bucket(events, admissions_frame(stays)).frame["TIMESTEP"].tolist() == [3, 1]


# -- rows outside the stay ----------------------------------------------------------------------------
def test_rows_before_the_admission_day_are_quarantined():
    events = filled_rows(["2150-03-09 23:59", "2150-03-10 00:00", "2150-03-08 10:00", "2150-03-11 10:00"])
    kept = bucket(events, admissions_frame())
    assert kept.frame.index.tolist() == [3, 5]
    quarantine = kept.quarantine
    assert quarantine.index.tolist() == [2, 4] and quarantine.index.name == "line"
    assert set(quarantine["REASON"]) == {BEFORE} and set(quarantine["STAGE"]) == {"bucket"}
    assert set(quarantine["TABLE"]) == {"LABEVENTS"}
    assert quarantine["HADM_ID"].tolist() == [100, 100] and quarantine["ITEMID"].tolist() == [50912, 50912]
    before = next(s for s in kept.steps if s.step == BEFORE)
    assert (before.rows_in, before.rows_out, before.quarantined) == (4, 2, 2)


def test_rows_beyond_a_deliberate_max_timestep_are_quarantined_under_their_own_reason():
    events = filled_rows(["2150-03-10 15:00", "2150-03-12 08:00", "2150-03-13 08:00"])
    kept = bucket(events, admissions_frame(), max_timestep=2)
    assert kept.frame["TIMESTEP"].tolist() == [0, 2]
    assert kept.quarantine.index.tolist() == [4] and set(kept.quarantine["REASON"]) == {BEYOND_MAX}


def test_a_124_day_stay_keeps_every_day_by_default():
    stays = {100: ("2150-01-01 10:00", "2150-05-04 12:00")}  # day 123 is 05-04
    times = [str(pd.Timestamp("2150-01-01 12:00") + pd.Timedelta(days=d)) for d in range(124)]
    kept = bucket(filled_rows(times), admissions_frame(stays))
    assert kept.quarantine.empty
    assert kept.frame["TIMESTEP"].tolist() == list(range(124))


def test_a_stay_longer_than_max_stay_days_is_cut_there_under_its_own_reason():
    # A DISCHTIME a century off (2250 for 2150): the stay is 36,500 days long, and nothing after the first
    # 1000 days can be real.
    stays = {100: ("2150-03-10 14:20", "2250-03-13 09:00")}
    events = filled_rows(["2150-03-11 10:00", "2152-12-03 23:59", "2152-12-04 00:01", "2250-03-13 08:00"])
    kept = bucket(events, admissions_frame(stays), max_stay_days=1000.0)
    assert kept.frame["TIMESTEP"].tolist() == [1, 999]
    assert kept.quarantine.index.tolist() == [4, 5] and set(kept.quarantine["REASON"]) == {BEYOND_STAY}
    clipped = bucket(events, admissions_frame(stays), max_stay_days=1000.0, late_policy="clip")
    assert clipped.quarantine.index.tolist() == [4, 5], "a broken date is never clipped into the graph"


def test_a_row_after_discharge_is_not_reported_as_beyond_the_max_timestep():
    # Past discharge and past the cap: the stay's own end is the reason given.
    events = filled_rows(["2150-03-11 10:00", "2150-03-20 12:00"])
    kept = bucket(events, admissions_frame(), max_timestep=3)
    assert kept.quarantine["REASON"].tolist() == [AFTER_DISCHARGE]
    beyond = next(s for s in kept.steps if s.step == BEYOND_MAX)
    assert beyond.quarantined == 0


def test_rows_too_long_after_discharge_are_quarantined_as_after_discharge():
    # DISCHTIME 03-13 09:00 + 24 h = 03-14 09:00: at it is kept, a minute after is late.
    events = filled_rows(["2150-03-14 09:00", "2150-03-14 09:01", "2150-03-20 12:00"])
    kept = bucket(events, admissions_frame(), after_discharge_hours=24.0)
    assert timesteps(kept) == {"03-14 09:00": 4}
    assert kept.quarantine.index.tolist() == [3, 4] and set(kept.quarantine["REASON"]) == {AFTER_DISCHARGE}
    late = next(s for s in kept.steps if s.step == AFTER_DISCHARGE)
    assert (late.rows_in, late.rows_out, late.quarantined) == (3, 1, 2)
    assert bucket(events, admissions_frame(), after_discharge_hours=0.0).frame.empty


def test_clip_policy_keeps_late_rows_at_the_last_allowed_timestep():
    events = filled_rows(["2150-03-09 10:00", "2150-03-11 10:00", "2150-03-14 09:00", "2150-03-14 09:01",
                          "2150-03-25 12:00"])
    kept = bucket(events, admissions_frame(), after_discharge_hours=24.0, late_policy="clip")
    assert kept.frame.index.tolist() == [3, 4, 5, 6]
    assert kept.frame["TIMESTEP"].tolist() == [1, 4, 4, 4]  # 03-14 09:00 is the last allowed moment: day 4
    assert kept.quarantine.index.tolist() == [2] and set(kept.quarantine["REASON"]) == {BEFORE}
    clipped = [s for s in kept.steps if s.clipped]
    assert len(clipped) == 1 and clipped[0].clipped == 2 and clipped[0].step == f"{AFTER_DISCHARGE} (clipped)"
    assert (clipped[0].rows_in, clipped[0].rows_out, clipped[0].quarantined) == (4, 4, 0)


def test_clip_policy_clips_to_max_timestep_when_that_comes_first():
    events = filled_rows(["2150-03-10 15:00", "2150-03-12 08:00", "2150-03-13 08:00"])
    kept = bucket(events, admissions_frame(), max_timestep=1, late_policy="clip")
    assert kept.frame["TIMESTEP"].tolist() == [0, 1, 1]
    assert {s.step: s.clipped for s in kept.steps if s.clipped} == {f"{BEYOND_MAX} (clipped)": 2}
    assert kept.quarantine.empty


def test_sample_late_rows_are_quarantined_or_clipped_and_every_row_is_counted(sample):
    events, admissions = sample
    quarantined = bucket(events, admissions, max_timestep=99)
    clipped = bucket(events, admissions, max_timestep=99, late_policy="clip")
    reasons = quarantined.quarantine["REASON"].value_counts()
    late = reasons.get(AFTER_DISCHARGE, 0) + reasons.get(BEYOND_MAX, 0)
    assert reasons[BEFORE] > 0 and late > 0
    assert set(clipped.quarantine["REASON"]) == {BEFORE}
    assert len(clipped.frame) == len(events) - reasons[BEFORE]
    assert sum(s.clipped for s in clipped.steps) == late
    late_lines = quarantined.quarantine.index[quarantined.quarantine["REASON"].isin([AFTER_DISCHARGE, BEYOND_MAX])]
    stays = admissions.set_index("HADM_ID")
    last = clipped.frame.loc[late_lines]
    discharge_day = (last["HADM_ID"].map(stays["DISCHTIME"]) + pd.Timedelta(hours=24)).dt.normalize()
    admit_day = last["HADM_ID"].map(stays["ADMITTIME"]).dt.normalize()
    assert (last["TIMESTEP"] == np.minimum((discharge_day - admit_day).dt.days, 99)).all()


# -- bad input ----------------------------------------------------------------------------------------
def test_unfilled_input_is_refused_naming_the_column_and_line():
    events = filled_rows(["2150-03-10 15:00", "2150-03-11 15:00"])
    events.loc[3, ["VALUE", "VALUENUM", "KIND", "Z"]] = ["NEG", np.nan, "categorical", np.nan]  # a categorical row
    with pytest.raises(StageError) as caught:
        bucket(events, admissions_frame())
    error = caught.value
    assert (error.stage, error.side, error.check, error.column, error.lines) == (
        "bucket", "input", "not_nullable", "Z", [3])
    assert str(error).startswith("[bucket:input] FilledEvents.Z not_nullable failed on 1 row (line 3): missing")


def test_unfilled_numeric_row_is_refused_naming_the_check_and_line():
    events = filled_rows(["2150-03-10 15:00", "2150-03-11 15:00"])
    events.loc[3, "Z"] = np.nan  # a row with a number and no z-score
    with pytest.raises(StageError) as caught:
        bucket(events, admissions_frame())
    error = caught.value
    assert (error.stage, error.side, error.count, error.lines) == ("bucket", "input", 1, [3])
    assert error.check in ("numbers_have_z", "_scaled")  # which one depends on build order: see the next test
    # A dataframe-wide check is not blamed on the frame's first column (HADM_ID) or described by its values.
    assert error.column in (None, "Z")
    assert "HADM_ID" not in str(error) and "positive integer" not in str(error)


def test_inherited_guard_checks_keep_their_names_in_every_stage_schema():
    from schemas.bucket import BucketedEvents
    from schemas.dedup import EdgeRows
    from schemas.encode import EncodedEvents
    from schemas.fill import FilledEvents
    from schemas.scale import ScaledEvents
    from schemas.split import SplitEvents

    for model in (SplitEvents, EncodedEvents, ScaledEvents, FilledEvents, BucketedEvents, EdgeRows):
        names = [check.name for check in model.to_schema().checks]
        assert not [name for name in names if name.startswith("_")], (model.__name__, names)


@pytest.mark.parametrize("late_policy", ["quarantine", "clip"])
def test_a_row_without_its_admission_is_quarantined_naming_the_line(late_policy):
    events = pd.concat([filled_rows(["2150-03-10 15:00"]),
                        filled_rows(["2150-03-10 15:00"], hadm_id=999, first_line=3)])
    kept = bucket(events, admissions_frame(), late_policy=late_policy)
    assert kept.frame.index.tolist() == [2]
    assert kept.quarantine.index.tolist() == [3]
    assert kept.quarantine["REASON"].tolist() == [bucket_stage.NO_ADMISSION]
    assert kept.quarantine["HADM_ID"].tolist() == [999]
    step = next(s for s in kept.steps if s.step == bucket_stage.NO_ADMISSION)
    assert (step.rows_in, step.rows_out, step.quarantined) == (2, 1, 1)


def test_late_policy_quarantine_and_clip_differ_only_in_late_rows():
    events = filled_rows(["2150-03-10 15:00", "2150-03-30 15:00"])
    assert bucket(events, admissions_frame(), late_policy="quarantine").frame.index.tolist() == [2]
    assert bucket(events, admissions_frame(), late_policy="clip").frame.index.tolist() == [2, 3]


def test_the_stage_does_not_change_its_input(sample):
    events, admissions = sample
    before = events.copy()
    bucket(events, admissions, late_policy="clip")
    pd.testing.assert_frame_equal(events, before)


# -- determinism --------------------------------------------------------------------------------------
@pytest.mark.parametrize("late_policy", ["quarantine", "clip"])
def test_shuffled_rows_give_the_same_timesteps_and_quarantine(sample, late_policy):
    events, admissions = sample
    first = bucket(events, admissions, late_policy=late_policy)
    second = bucket(events.sample(frac=1.0, random_state=9), admissions.sample(frac=1.0, random_state=2),
                    late_policy=late_policy)
    pd.testing.assert_frame_equal(first.frame, second.frame.sort_index())
    pd.testing.assert_frame_equal(first.quarantine.sort_index(), second.quarantine.sort_index())
    assert first.steps == second.steps
