"""schemas/guard.py: a chain of stages validates each frame once; any other call validates its input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.bucket import bucket
from pipeline.config import load_config
from pipeline.dedup import dedup
from schemas import guard
from schemas.errors import StageError
from tests.pipeline.stages import sample_filled


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


def test_a_guard_validates_the_frame_itself_without_copying_or_changing_it(bucketed):
    """No schema coerces or adds columns, so validation in place must hand back the very frame, unchanged."""
    before = bucketed.copy()
    passed = guard.check_frame(dedup.takes, bucketed, stage="dedup", side="input")

    assert passed is bucketed
    assert list(bucketed.columns) == list(before.columns)
    pd.testing.assert_frame_equal(bucketed, before)


def test_a_guarded_stage_names_its_stage_and_schemas():
    from pipeline import split
    from schemas.clean import CleanAdmissions, CleanEvents
    from schemas.split import SplitAssignment, SplitEvents

    assert (split.assign_splits.stage, split.assign_splits.takes, split.assign_splits.gives) == (
        "split", CleanAdmissions, SplitAssignment)
    assert (split.attach_split.stage, split.attach_split.takes, split.attach_split.gives) == (
        "split", CleanEvents, SplitEvents)
