"""schemas/guard.py: a chain of stages validates each frame once; any other call validates its input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.stages.bucket import bucket
from pipeline.config import load_config
from pipeline.stages.dedup import dedup
from schemas import guard
from schemas.errors import StageError
from tests.pipeline.stages.sample import sample_filled


def _bucket():
    events, admissions = sample_filled()
    config = load_config()
    return bucket(events, admissions, interval_hours=config.bucket.interval_hours,
                  max_timestep=config.bucket.max_timestep,
                  after_discharge_hours=config.bucket.after_discharge_hours,
                  late_policy=config.bucket.late_policy).frame


@pytest.fixture(scope="module")
def bucketed():
    return _bucket()


def _counting(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = guard.check_frame

    def counted(model, frame, **kwargs):
        seen.append(f"{kwargs['stage']}:{kwargs['side']}:{model.__name__}")
        return real(model, frame, **kwargs)

    monkeypatch.setattr(guard, "check_frame", counted)
    return seen


def test_in_a_chain_the_next_stage_trusts_the_output_its_guard_just_passed(monkeypatch):
    seen = _counting(monkeypatch)
    with guard.trusted_chain():
        dedup(_bucket())

    assert seen[-2:] == ["bucket:output:BucketedEvents", "dedup:output:EdgeRows"]
    assert not any(entry.endswith(":input:BucketedEvents") for entry in seen)


def test_outside_a_chain_every_input_is_validated(monkeypatch, bucketed):
    seen = _counting(monkeypatch)
    dedup(bucketed)

    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]


def test_a_frame_changed_after_its_guard_passed_is_validated_again(bucketed):
    """A copy with a bad point is another object: the chain trusts only the very frame that passed."""
    with guard.trusted_chain():
        guard._LAST_OUTPUT.set((bucketed, dedup.takes))
        broken = bucketed.assign(Z=bucketed["Z"].where(bucketed.index != bucketed.index[0], np.inf))
        with pytest.raises(StageError) as raised:
            dedup(broken)

    assert (raised.value.stage, raised.value.side, raised.value.column) == ("dedup", "input", "Z")
    assert guard._LAST_OUTPUT.get() is guard._OUTSIDE


def test_a_vouched_part_read_back_skips_only_the_input_guard_it_passed(monkeypatch, bucketed):
    """An engine's part read back from disk is another object: vouched for with the schema it passed as output, the
    next stage's input guard skips it inside a chain; outside one, or vouched for a looser schema, it is validated."""
    seen = _counting(monkeypatch)
    read_back = bucketed.copy()
    with guard.trusted_chain():
        dedup(guard.vouch(read_back, dedup.takes))
    assert seen == ["dedup:output:EdgeRows"]
    seen.clear()
    dedup(guard.vouch(bucketed.copy(), dedup.takes))  # outside a chain: vouching changes nothing
    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]
    seen.clear()
    from schemas.raw import LabEvents

    with guard.trusted_chain():
        dedup(guard.vouch(bucketed.copy(), LabEvents))  # passed a looser schema than dedup takes: validated
    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]


def test_a_guard_validates_the_frame_itself_without_copying_or_changing_it(bucketed):
    """No schema coerces or adds columns, so validation in place must hand back the very frame, unchanged."""
    before = bucketed.copy()
    passed = guard.check_frame(dedup.takes, bucketed, stage="dedup", side="input")

    assert passed is bucketed
    assert list(bucketed.columns) == list(before.columns)
    pd.testing.assert_frame_equal(bucketed, before)


def test_a_guarded_stage_names_its_stage_and_schemas():
    from pipeline.stages import split
    from schemas.clean import CleanAdmissions, CleanEvents
    from schemas.split import SplitAssignment, SplitEvents

    assert (split.assign_splits.stage, split.assign_splits.takes, split.assign_splits.gives) == (
        "split", CleanAdmissions, SplitAssignment)
    assert (split.attach_split.stage, split.attach_split.takes, split.attach_split.gives) == (
        "split", CleanEvents, SplitEvents)


# -- the StageError a failing schema becomes: every field pinned ----------------------------------------------
import pandera.pandas as pa  # noqa: E402
from pandera.typing import Series  # noqa: E402


class _Rows(pa.DataFrameModel):
    """A small strict model: X finite and not below -10, Y not null, and no row where X equals Y."""

    X: Series[float] = pa.Field(finite=(), ge=-10)
    Y: Series[float] = pa.Field(nullable=False)

    @pa.dataframe_check
    def x_differs_from_y(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["X"] != frame["Y"]

    class Config:
        strict = True


def _frame(**columns) -> pd.DataFrame:
    base = {"X": [1.0, 2.0, 3.0, 4.0], "Y": [5.0, 6.0, 7.0, 8.0]}
    return pd.DataFrame({**base, **columns}, index=pd.Index([11, 12, 13, 14], name="line"))


def _raised(frame: pd.DataFrame, *, side: str = "output", table: str | None = None) -> StageError:
    with pytest.raises(StageError) as raised:
        guard.check_frame(_Rows, frame, stage="scale", side=side, table=table)
    return raised.value


def test_a_column_check_names_stage_side_check_column_count_lines_and_value_classes():
    error = _raised(_frame(X=[1.0, np.inf, np.inf, np.inf]))
    assert (error.stage, error.side, error.check, error.column, error.count, error.table) == (
        "scale", "output", "finite", "X", 3, "_Rows")
    assert error.failure_cases["line"].tolist() == [12, 13, 14] and error.failure_cases["line"].dtype == "int64"
    assert error.failure_cases["value_class"].tolist() == ["inf", "inf", "inf"]
    assert error.detail == "_Rows failed"
    assert error.advice == "The stage produced data its schema forbids"


def test_other_failing_column_checks_are_counted_in_the_detail_and_the_input_side_blames_the_stage_before():
    # X fails two checks (not below -10 on lines 13-14, finite on line 12), Y one: the first (column, check) is
    # reported with its own rows only, the two others counted.
    error = _raised(_frame(X=[1.0, np.inf, -50.0, -60.0], Y=[5.0, np.nan, 7.0, 8.0]), side="input",
                    table="LABEVENTS")
    assert (error.check, error.column, error.count, error.table) == ("greater_than_or_equal_to(-10)", "X", 2,
                                                                     "LABEVENTS")
    assert error.failure_cases["line"].tolist() == [13, 14]
    assert error.detail == "_Rows failed; 2 other column checks failed too"
    assert error.advice == "The stage was handed data its schema forbids: fix the stage before it"


def test_a_frame_wide_check_counts_each_failing_row_once_and_names_no_column():
    error = _raised(_frame(Y=[1.0, 6.0, 3.0, 8.0]))
    assert (error.check, error.column, error.count) == ("x_differs_from_y", None, 2)
    assert error.failure_cases["line"].tolist() == [11, 13]
    assert "value_class" not in error.failure_cases
    assert error.detail == "_Rows failed"


def test_a_missing_column_names_that_column():
    error = _raised(_frame().drop(columns="Y"))
    assert (error.check, error.column, error.count) == ("column_in_dataframe", "Y", 1)
    assert error.failure_cases["line"].tolist() == []


def test_guarded_applied_at_call_time_records_stage_and_schemas_and_guards_both_sides():
    """Decorated here, not at import, so the decorator itself runs under the test."""
    stage = guard.guarded(stage="scale", takes=_Rows, gives=_Rows)(lambda frame: frame.assign(X=-frame["X"]))
    assert (stage.stage, stage.takes, stage.gives) == ("scale", _Rows, _Rows)
    assert stage(_frame(X=[1.0, 2.0, 3.0, 4.0]))["X"].tolist() == [-1.0, -2.0, -3.0, -4.0]
    with pytest.raises(StageError) as raised:
        stage(_frame(X=[1.0, 2.0, 3.0, np.inf]))
    assert (raised.value.side, raised.value.check, raised.value.failure_cases["line"].tolist()) == (
        "input", "finite", [14])
    with pytest.raises(StageError) as raised:
        stage(_frame(X=[1.0, 2.0, 30.0, 40.0]))  # -30 and -40 are below the output's bound
    assert (raised.value.side, raised.value.failure_cases["line"].tolist()) == ("output", [13, 14])


def test_exactly_one_other_failing_check_is_counted():
    error = _raised(_frame(X=[1.0, 2.0, -50.0, -60.0], Y=[5.0, np.nan, 7.0, 8.0]))
    assert error.detail == "_Rows failed; 1 other column checks failed too"


def test_a_check_that_runs_out_of_memory_raises_it_never_a_stage_error():
    """Pandera reports a check that raised as the check failing (its failure case 'MemoryError()'): guarded, that read
    as bad data (exit 1). Memory that runs out is raised as such."""
    class Checked(pa.DataFrameModel):
        X: Series[float]

        @pa.check("X")
        def exhausted(cls, values: pd.Series) -> pd.Series:
            raise MemoryError

    with pytest.raises(MemoryError):
        guard.check_frame(Checked, pd.DataFrame({"X": [1.0, 2.0]}), stage="scale", side="input")
