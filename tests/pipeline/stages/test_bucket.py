"""pipeline/stages/bucket.py: timestep = whole intervals since midnight of the admission day.

Rows charted before the admission day are kept at timestep 0 when drawn in the
admission's ED stay (from EDREGTIME, else ``ed_hours`` before ADMITTIME) and
quarantined otherwise; rows beyond the last timestep or too long after
discharge are quarantined or clipped, per policy, and every row is accounted
for in the stage's steps.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests import mimic4
from tests.pipeline.stages.sample import sample_filled, typed

from pipeline.stages import bucket as bucket_stage
from pipeline.stages.bucket import (AFTER_DISCHARGE, BEFORE, BEYOND_MAX, BEYOND_STAY, FROM_ED, bucket,
                                    ed_stay_findings, ed_stay_rows)
from pipeline.config import load_config
from pipeline.flow import prepare, validate
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


def admissions_frame(stays: dict[int, tuple[str, str]] | None = None,
                     registered: dict[int, str | None] | None = None) -> pd.DataFrame:
    """Clean admissions of ``stays`` (HADM_ID: ADMITTIME, DISCHTIME); with ``registered``, an EDREGTIME column
    (HADM_ID: the time, or None for null; admissions it leaves out get null)."""
    stays = stays or {100: (str(ADMIT), str(DISCHARGE))}
    frame = pd.DataFrame({
        "HADM_ID": pd.Series(list(stays), dtype="int64"),
        "ADMITTIME": pd.to_datetime([a for a, _ in stays.values()], format="ISO8601").astype("datetime64[ns]"),
        "DISCHTIME": pd.to_datetime([d for _, d in stays.values()], format="ISO8601").astype("datetime64[ns]"),
    })
    if registered is not None:
        times = [registered.get(hadm) for hadm in stays]
        frame["EDREGTIME"] = pd.to_datetime(times, format="ISO8601").astype("datetime64[ns]")
    return frame


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


# -- rows drawn in the ED stay, before the admission day -----------------------------------------------
NIGHT = {300: ("2150-03-10 01:30", "2150-03-12 09:00")}  # admitted at 01:30 from an ED stay begun the evening before


def ed_step(kept) -> tuple[int, int, int, int]:
    """(rows_in, rows_out, quarantined, clipped) of the step that counts the rows kept from the ED stay."""
    (step,) = [s for s in kept.steps if s.step == FROM_ED]
    return step.rows_in, step.rows_out, step.quarantined, step.clipped


def test_rows_from_edregtime_on_are_kept_at_timestep_zero():
    events = filled_rows(["2150-03-09 19:59", "2150-03-09 20:00", "2150-03-09 23:10", "2150-03-10 00:40",
                          "2150-03-11 08:00"], hadm_id=300)
    kept = bucket(events, admissions_frame(NIGHT, {300: "2150-03-09 20:00"}))
    assert timesteps(kept) == {"03-09 20:00": 0, "03-09 23:10": 0, "03-10 00:40": 0, "03-11 08:00": 1}
    assert kept.quarantine.index.tolist() == [2] and kept.quarantine["REASON"].tolist() == [BEFORE]
    assert ed_step(kept) == (4, 4, 0, 2)  # removes none; two rows moved to timestep 0
    assert kept.frame.drop(columns="TIMESTEP").equals(events.loc[kept.frame.index])


def test_edregtime_is_the_start_whatever_the_window():
    # Registered 15 h before ADMITTIME: a row 14 h before is in the ED stay, though beyond ed_hours.
    events = filled_rows(["2150-03-09 10:29", "2150-03-09 11:30"], hadm_id=300)
    kept = bucket(events, admissions_frame(NIGHT, {300: "2150-03-09 10:30"}), ed_hours=12.0)
    assert kept.frame.index.tolist() == [3] and kept.quarantine.index.tolist() == [2]


def test_without_edregtime_the_ed_stay_is_ed_hours_before_admittime():
    # ADMITTIME 03-10 01:30 - 12 h = 03-09 13:30: at it kept, a minute before quarantined.
    events = filled_rows(["2150-03-09 13:29", "2150-03-09 13:30", "2150-03-09 22:00", "2150-03-10 00:10"],
                         hadm_id=300)
    kept = bucket(events, admissions_frame(NIGHT), ed_hours=12.0)
    assert timesteps(kept) == {"03-09 13:30": 0, "03-09 22:00": 0, "03-10 00:10": 0}
    assert kept.quarantine.index.tolist() == [2] and kept.quarantine["REASON"].tolist() == [BEFORE]
    assert ed_step(kept) == (3, 3, 0, 2)
    assert bucket(events, admissions_frame(NIGHT), ed_hours=3.0).frame.index.tolist() == [5]  # from 22:30 on


@pytest.mark.parametrize("registered", [None, "2150-03-10 02:00"], ids=["null", "after_admittime"])
def test_a_null_or_later_edregtime_falls_back_to_the_window(registered):
    events = filled_rows(["2150-03-09 13:29", "2150-03-09 13:30"], hadm_id=300)
    stays = {**NIGHT, 100: (str(ADMIT), str(DISCHARGE))}
    with_column = bucket(events, admissions_frame(stays, {300: registered, 100: "2150-03-10 09:00"}), ed_hours=12.0)
    without = bucket(events, admissions_frame(stays), ed_hours=12.0)
    assert with_column.frame.index.tolist() == [3] == without.frame.index.tolist()
    pd.testing.assert_frame_equal(with_column.quarantine, without.quarantine)


def test_rows_a_day_or_more_before_admission_stay_quarantined():
    # Another encounter's labs: before the ED stay however it is bounded.
    events = filled_rows(["2150-03-08 23:00", "2150-03-09 09:00", "2150-03-10 03:00"], hadm_id=300)
    for admissions in (admissions_frame(NIGHT), admissions_frame(NIGHT, {300: "2150-03-09 21:00"})):
        kept = bucket(events, admissions)
        assert kept.frame.index.tolist() == [4]
        assert kept.quarantine.index.tolist() == [2, 3] and set(kept.quarantine["REASON"]) == {BEFORE}
        before = next(s for s in kept.steps if s.step == BEFORE)
        assert (before.rows_in, before.rows_out, before.quarantined, before.column) == (3, 1, 2, "CHARTTIME")
        assert ed_step(kept) == (1, 1, 0, 0)


@pytest.mark.parametrize("late_policy", ["quarantine", "clip"])
def test_ed_hours_zero_keeps_no_row_before_the_admission_day_edregtime_or_not(late_policy):
    events = pd.concat([filled_rows(["2150-03-09 20:00", "2150-03-09 23:30", "2150-03-10 00:10", "2150-03-14 10:00"],
                                    hadm_id=300),
                        filled_rows(["2150-03-09 23:00", "2150-03-10 12:00"], first_line=6)])
    stays = {**NIGHT, 100: (str(ADMIT), str(DISCHARGE))}
    for admissions in (admissions_frame(stays), admissions_frame(stays, {300: "2150-03-09 19:00"})):
        kept = bucket(events, admissions, ed_hours=0.0, late_policy=late_policy)
        # As before ed_hours: every row before its admission day quarantined, every other row's timestep its own.
        day = events["HADM_ID"].map(admissions.set_index("HADM_ID")["ADMITTIME"]).dt.normalize()
        early = events.index[events["CHARTTIME"] < day]
        assert kept.quarantine.loc[kept.quarantine["REASON"] == BEFORE].index.tolist() == early.tolist() == [2, 3, 6]
        assert (kept.frame["TIMESTEP"] == (kept.frame["CHARTTIME"].dt.normalize() - day[kept.frame.index]).dt.days
                ).all() if late_policy == "quarantine" else kept.frame["TIMESTEP"].min() == 0
        assert ed_step(kept)[3] == 0
        steps = [s for s in kept.steps if s.step != FROM_ED]
        legacy = bucket(events, admissions.drop(columns="EDREGTIME", errors="ignore"), ed_hours=0.0,
                        late_policy=late_policy)
        assert steps == [s for s in legacy.steps if s.step != FROM_ED]
        pd.testing.assert_frame_equal(kept.frame, legacy.frame)


def test_clip_policy_keeps_ed_rows_at_timestep_zero():
    events = filled_rows(["2150-03-09 22:00", "2150-03-11 10:00", "2150-03-20 12:00"], hadm_id=300)
    kept = bucket(events, admissions_frame(NIGHT, {300: "2150-03-09 21:00"}), late_policy="clip")
    assert kept.frame["TIMESTEP"].tolist() == [0, 1, 3] and kept.quarantine.empty
    assert {s.step: s.clipped for s in kept.steps if s.clipped} == {FROM_ED: 1, f"{AFTER_DISCHARGE} (clipped)": 1}


def test_smaller_intervals_keep_ed_rows_at_zero_and_count_the_admission_day_as_before():
    events = filled_rows(["2150-03-09 22:00", "2150-03-10 00:40", "2150-03-10 07:00"], hadm_id=300)
    kept = bucket(events, admissions_frame(NIGHT), interval_hours=6)
    assert kept.frame["TIMESTEP"].tolist() == [0, 0, 1]


def test_the_ed_rows_finding_counts_rows_and_admissions_and_names_the_option():
    stays = {**NIGHT, 100: (str(ADMIT), str(DISCHARGE)), 200: ("2150-03-12 02:00", "2150-03-14 10:00")}
    events = pd.concat([filled_rows(["2150-03-09 22:00", "2150-03-09 23:00", "2150-03-10 05:00"], hadm_id=300),
                        filled_rows(["2150-03-11 21:00", "2150-03-10 09:00"], hadm_id=200, first_line=5),
                        filled_rows(["2150-03-10 16:00"], first_line=7)])
    admissions = admissions_frame(stays, {300: "2150-03-09 21:30"})
    kept = bucket(events, admissions)
    rows = ed_stay_rows(kept.frame, admissions)
    assert rows.index.tolist() == [2, 3, 5] and rows["HADM_ID"].tolist() == [300, 300, 200]
    assert len(rows) == ed_step(kept)[3]
    (finding,) = ed_stay_findings(rows, max_lines=2)
    assert (finding.check, finding.severity, finding.stage, finding.column) == ("from_ed_stay", "info", "bucket",
                                                                                "CHARTTIME")
    assert (finding.count, finding.lines) == (3, [2, 3])
    assert "3 rows of 2 admissions charted in the ED stay before the admission day" in finding.message
    assert "EDREGTIME" in finding.message and "[bucket] ed_hours" in finding.message
    assert ed_stay_findings(ed_stay_rows(kept.frame.loc[[4, 7]], admissions), max_lines=2) == []  # none


def test_the_flow_reports_the_ed_rows_as_a_step_and_a_finding():
    # The sample's rows before their admission day lie 18-39 h before ADMITTIME (none from the ED stay); a window
    # of 40 h takes those of admissions without EDREGTIME.
    tables, config = typed(), load_config()
    wide = dataclasses.replace(config, bucket=dataclasses.replace(config.bucket, ed_hours=40.0))
    default, widened = prepare(tables, config), prepare(tables, wide)
    counted = [[s for s in p.attrition()["steps"] if s["step"] == FROM_ED] for p in (default, widened)]
    assert [(s["stage"], s["rows_in"] == s["rows_out"], s["clipped"]) for s in counted[0]] == [("bucket", True, 0)]
    assert not [f for f in default.findings if f.check == "from_ed_stay"]
    (step,) = counted[1]
    (finding,) = [f for f in widened.findings if f.check == "from_ed_stay"]
    assert step["clipped"] == finding.count > 0 and step["rows_in"] == step["rows_out"]
    before = [int((p.quarantine.whole()["REASON"] == BEFORE).sum()) for p in (default, widened)]
    assert before[1] == before[0] - finding.count
    assert widened.ledger()["quarantined"] == default.ledger()["quarantined"] - finding.count
    assert "from_ed_stay" not in {f.check for f in prepare(tables, dataclasses.replace(
        wide, bucket=dataclasses.replace(wide.bucket, ed_hours=0.0))).findings}


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


def test_shuffled_rows_and_admissions_keep_the_same_ed_rows():
    stays = {**NIGHT, 100: (str(ADMIT), str(DISCHARGE)), 200: ("2150-03-12 02:00", "2150-03-14 10:00")}
    events = pd.concat([filled_rows(["2150-03-09 22:00", "2150-03-09 11:00", "2150-03-10 05:00"], hadm_id=300),
                        filled_rows(["2150-03-11 21:00", "2150-03-10 09:00"], hadm_id=200, first_line=5),
                        filled_rows(["2150-03-09 23:00", "2150-03-10 16:00"], first_line=7)])
    admissions = admissions_frame(stays, {300: "2150-03-09 21:30", 200: None})
    first = bucket(events, admissions)
    second = bucket(events.sample(frac=1.0, random_state=3), admissions.sample(frac=1.0, random_state=4))
    pd.testing.assert_frame_equal(first.frame, second.frame.sort_index())
    pd.testing.assert_frame_equal(first.quarantine.sort_index(), second.quarantine.sort_index())
    assert first.steps == second.steps and ed_step(first)[3] == 2
    pd.testing.assert_frame_equal(ed_stay_rows(first.frame, admissions),
                                  ed_stay_rows(second.frame, admissions).sort_index())


# -- MIMIC-IV's lower-case edregtime ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def mimic4_data(tmp_path_factory):
    """The MIMIC-IV-shaped dataset written as is, and written without ``edregtime``; the ED admission's lab lines."""
    data = mimic4.dataset()
    folder = data.write(tmp_path_factory.mktemp("mimic4") / "data")
    column = data.col("ADMISSIONS", "edregtime")
    data.header["ADMISSIONS"].pop(column)
    for record in data.rows["ADMISSIONS"]:
        record.pop(column)
    without = data.write(tmp_path_factory.mktemp("mimic4") / "without")
    hadm, admittime = data.col("ADMISSIONS", "hadm_id"), data.col("ADMISSIONS", "admittime")
    admit = pd.Timestamp(next(r[admittime] for r in data.rows["ADMISSIONS"] if r[hadm] == str(mimic4.ED_HADM)))
    hadm, charttime = data.col("LABEVENTS", "hadm_id"), data.col("LABEVENTS", "charttime")
    lines = [n + 2 for n, r in enumerate(data.rows["LABEVENTS"])
             if r[hadm] == str(mimic4.ED_HADM) and pd.Timestamp(r[charttime]) < admit.normalize()]
    return folder, without, lines


def test_mimic4_labs_drawn_in_the_ed_the_evening_before_reach_the_graphs(mimic4_data):
    folder, _, lines = mimic4_data
    prepared = validate(folder, load_config()).prepared
    assert len(lines) == 2 and (prepared.edges.loc[lines, "TIMESTEP"] == 0).all()
    assert (prepared.edges.loc[lines, "HADM_ID"] == mimic4.ED_HADM).all()
    (finding,) = [f for f in prepared.findings if f.check == "from_ed_stay"]
    assert (finding.count, finding.lines) == (2, lines) and "of 1 admission " in finding.message
    assert "before_admission" not in {f.check for f in prepared.findings}


def test_mimic4_without_edregtime_bounds_the_ed_stay_by_ed_hours(mimic4_data):
    # Drawn 13 h before admittime: beyond the 12 h window, so only EDREGTIME kept them.
    _, without, lines = mimic4_data
    prepared = validate(without, load_config()).prepared
    quarantine = prepared.quarantine.whole()
    assert quarantine.loc[lines, "REASON"].tolist() == [BEFORE, BEFORE]
    assert "from_ed_stay" not in {f.check for f in prepared.findings}
    wide = dataclasses.replace(load_config(), bucket=dataclasses.replace(load_config().bucket, ed_hours=13.0))
    assert (validate(without, wide).prepared.edges.loc[lines, "TIMESTEP"] == 0).all()


# -- the real MIMIC-III demo ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(mimic3demo):
    """The MIMIC-III demo validated with the default config (its ADMISSIONS has no EDREGTIME: the window)."""
    validation = validate(mimic3demo, load_config())
    assert validation.exit_code == 0
    return validation


def test_the_demos_ed_admission_reaches_the_graphs(demo):
    """HADM 160442 was admitted at 2130-10-06 01:34 with every lab drawn 23:15-23:45 the evening before: all of
    them were once quarantined and the admission lost."""
    prepared = demo.prepared
    fates = prepared.fates.set_index("HADM_ID")["FATE"]
    assert fates[160442] == "in_graphs"
    edges = prepared.edges
    assert (edges.loc[edges["HADM_ID"] == 160442, "TIMESTEP"] == 0).all() and (edges["HADM_ID"] == 160442).any()
    (finding,) = [f for f in prepared.findings if f.check == "from_ed_stay"]
    assert "of 9 admissions" in finding.message  # every admission with labs before its admission day
    assert "before_admission" not in {f.check for f in prepared.findings}


def test_no_row_of_the_demo_kept_from_before_its_admission_day_is_more_than_12_hours_before_admittime(demo):
    # Rows charted on the admission day before ADMITTIME were always kept (one 12 h 15 min before it, for an
    # admission late in the day); of the rows charted the day before, none is kept from further back than ed_hours.
    edges, admissions = demo.prepared.edges, demo.prepared.admissions.set_index("HADM_ID")
    admit = edges["HADM_ID"].map(admissions["ADMITTIME"])
    earlier = edges["CHARTTIME"] < admit.dt.normalize()
    lead = (admit - edges["CHARTTIME"])[earlier]
    assert lead.max() <= pd.Timedelta(hours=load_config().bucket.ed_hours)
    assert lead.max() > pd.Timedelta(hours=8) and edges.loc[earlier, "TIMESTEP"].eq(0).all()
