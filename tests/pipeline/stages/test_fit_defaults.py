"""Every stage's fit, called directly, gets the run's defaults: its keyword defaults are the declared ones of the
sections it reads (its own, or another stage's: scale reads [encode] min_admissions), never a second set.

A default run of the sample records, per fit, the rows the flow hands it and its positional arguments (the tables
it reads); the fit called on them with no keyword argument gives the state the run fitted, by ``whole`` and, for a
mergeable fit, by ``finish`` of ``combine`` of one ``partial``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import pytest

from pipeline.config import load_config
from pipeline.engines.pandas import PandasEngine
from pipeline.flow import ORDER, prepare
from pipeline.kernel.calls import Chained, Fit, Link
from tests.pipeline.stages.sample import typed

# The fits a default run makes (the task stage is idle under the default task, next_labs: its fit is held to a run of
# a lab label in tests/pipeline/stages/test_task.py).
FITTED = tuple(stage for stage in ORDER.prepare if stage.fit is not None and not stage.idle_in(load_config()))


class Handed(NamedTuple):
    """What the flow handed one fit: the fit (as it ran it: replaying the calls before it, where it does), its rows,
    its positional and its keyword arguments."""

    fit: Fit
    rows: Any
    args: tuple
    kwargs: dict


class RecordingEngine(PandasEngine):
    """The pandas engine, keeping what each fit is handed, by the name its state is saved under."""

    def __init__(self) -> None:
        self.handed: dict[str, Handed] = {}

    def fit(self, fit: Fit, events: Any, *args: Any, **kwargs: Any) -> Any:
        self.handed[fit.saved_as] = Handed(fit, events, args, kwargs)
        return super().fit(fit, events, *args, **kwargs)

    def chain(self, events: Any, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()) -> Chained:
        chained = super().chain(events, links, fits)
        for fit, args, kwargs in fits:  # fits read ahead from the rows the chain hands on
            self.handed[fit.saved_as] = Handed(fit, chained.events, args, kwargs)
        return chained


@pytest.fixture(scope="module")
def default_run() -> tuple[dict[str, Any], dict[str, Handed]]:
    engine = RecordingEngine()
    prepared = prepare(typed(), load_config(), engine=engine)
    assert prepared.stopped_at is None
    return prepared.fitted, engine.handed


def test_every_fit_of_a_default_run_is_recorded(default_run):
    fitted, handed = default_run
    assert {stage.fit.saved_as for stage in FITTED} == set(handed)
    assert {stage.name for stage in FITTED} <= set(fitted)


@pytest.mark.parametrize("stage", FITTED, ids=[stage.name for stage in FITTED])
def test_a_direct_call_of_a_fit_gives_the_state_of_a_default_run(stage, default_run):
    fitted, handed = default_run
    fit, rows, args, _ = handed[stage.fit.saved_as]
    assert fit.whole(rows, *args) == fitted[stage.name]


@pytest.mark.parametrize("stage", [s for s in FITTED if s.fit.partial is not None],
                         ids=[s.name for s in FITTED if s.fit.partial is not None])
def test_a_direct_call_of_a_mergeable_fit_gives_the_state_of_a_default_run(stage, default_run):
    fitted, handed = default_run
    fit, rows, args, _ = handed[stage.fit.saved_as]
    assert fit.finish(fit.combine([fit.partial(rows, *args)]), *args) == fitted[stage.name]


@pytest.mark.parametrize(("stage", "key", "attribute", "meaning"), [
    ("scale", "min_admissions", "min_admissions", 1),  # no item rare
    ("encode", "fold_case", "fold_case_", False),  # FLUID and CATEGORY matched as spelled
])
def test_a_saved_state_without_a_setting_keeps_the_meaning_it_was_saved_with(stage, key, attribute, meaning,
                                                                            default_run):
    """A stats.json without the key reads as a fit without the setting did, not as its declared default."""
    fitted, _ = default_run
    state = fitted[stage]
    saved = {name: value for name, value in state.as_json().items() if name != key}
    again = type(state).from_json(saved)
    assert getattr(again, attribute) == meaning != getattr(state, attribute)
    assert dataclasses.replace(again, **{attribute: getattr(state, attribute)}) == state
