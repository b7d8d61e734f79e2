"""pipeline/kernel/stage.py: the kernel, on made-up stages (it names none): the order and what derives from it, the passes a
declaration implies, saved states matched to their stage, the ledger's judgement of steps, and the report hooks."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import pytest

from pipeline.engines import PANDAS
from pipeline.ledgers import Prepared, dropped
from pipeline.reading.parse import RawTables
from pipeline.kernel.quarantine import Kept, Step
from pipeline.kernel.calls import reads
from pipeline.kernel.stage import Drop, Order, Reason, Stage, Target, passes
from pipeline.ledgers import Ledger
from schemas.catalogue import in_flow_order
from pipeline.kernel.calls import Call, Fit
from schemas.catalogue import INFO, CheckInfo
from schemas.errors import StageError


@dataclass(frozen=True)
class Counts:
    count_: int


@dataclass(frozen=True)
class Other:
    items_: tuple


@reads("A")
def _count_a(part):
    return len(part)


def _fit(state: type = Counts, *, partial=None, early: bool = False, rows=None) -> Fit:
    return Fit(whole=lambda rows: state(len(rows)), inputs=lambda events, context: (events, (), {}), state=state,
               saved_as=state.__name__.lower(), partial=partial, combine=sum, finish=state, early=early, rows=rows)


def _plan(context):
    return None


def _order(*stages: Stage) -> Order:
    return Order(stages, before=(Stage("load", colour="#000001"),), after=(Stage("flow", colour="#000002"),))


def test_the_order_derives_everything_from_the_list():
    first = Stage("first", colour="#111111", plan=_plan,
                  reasons=(Reason("gone", "check_a", drops=Drop("admission_gone", "gone for good")),))
    built = Stage("built", colour="#222222", progress=("make", "guard"), target=Target("things", write=_plan))
    order = _order(first, built)
    assert order.names == ("load", "first", "built", "flow")
    assert order.index == {"load": 0, "first": 1, "built": 2, "flow": 3}
    assert order.colours["first"] == "#111111" and list(order.colours) == list(order.names)
    assert order.prepare == (first,) and order.targets == {"things": built}
    assert order.reasons == {"gone": first.reasons[0]}
    assert order.targets["things"].steps == ("make", "guard")
    assert list(dropped(order))[-1] == "admission_gone"  # the run's reasons, then the stages' own


def test_a_fit_that_must_read_its_rows_starts_a_new_pass():
    a = Stage("a", colour="#000000", plan=_plan, writes=("A",))
    b = Stage("b", colour="#000000", plan=_plan, fit=_fit(), filters=False, writes=("B",))
    c = Stage("c", colour="#000000", plan=_plan)
    cut = passes((a, b, c), config=None)
    assert [[s.name for s in p.stages] for p in cut] == [["a"], ["b", "c"]]
    assert [[s.name for s in p.ahead] for p in cut] == [[], []]  # b's fit has no partial: it reads b's input whole
    assert [[s.name for s in p.stages] for p in passes((a, b, c), config=None, fitted={"b"})] == [["a", "b", "c"]]


def test_a_mergeable_fit_is_read_from_the_rows_of_the_pass_before_it():
    a = Stage("a", colour="#000000", plan=_plan)
    b = Stage("b", colour="#000000", plan=_plan, fit=_fit(partial=_count_a), filters=False, writes=("B",))
    early = Stage("early", colour="#000000", plan=_plan, fit=_fit(Other, partial=_count_a, early=True))
    cut = passes((a, b, early), config=None)
    # b's fit is read from a's rows, and so is the later early fit: b keeps every row and writes no column it reads
    assert [([s.name for s in p.stages], [s.name for s in p.ahead]) for p in cut] == [(["a"], ["b", "early"]),
                                                                                   (["b", "early"], [])]


def test_a_fit_after_replayable_stages_goes_on_in_their_pass_and_reads_the_rows_they_give():
    cheap = Stage("cheap", colour="#000000", plan=_plan, replay=True, writes=("A",))
    b = Stage("b", colour="#000000", plan=_plan, fit=_fit(partial=_count_a), writes=("B",))
    after = Stage("after", colour="#000000", plan=_plan, fit=_fit())
    assert [[s.name for s in p.stages] for p in passes((cheap, b), config=None)] == [["cheap", "b"]]
    # c is not replayed: the fit after it reads the rows c gives, in a pass of its own.
    assert [[s.name for s in p.stages] for p in passes((cheap, b, Stage("c", colour="#000000", plan=_plan),
                                                        after), config=None)] == [["cheap", "b", "c"], ["after"]]
    # The fit reads what the calls give, each in turn: here rows doubled, then one taken away.
    doubled = Call(lambda part: pd.concat([part, part]))
    kept = Call(lambda part: Kept(frame=part.iloc[1:]))
    fit = _fit(partial=_count_a).replaying((doubled, kept))
    rows = pd.DataFrame({"A": [1, 2, 3]})
    assert fit.whole(rows) == Counts(5) and fit.partial(rows) == 5
    plain = _fit()
    assert plain.replaying(()) is plain  # nothing to replay: the fit as it is


def test_a_fit_that_reads_no_row_waits_for_nothing():
    a = Stage("a", colour="#000000", plan=_plan)
    constants = Stage("constants", colour="#000000", plan=_plan, fit=_fit(rows=lambda options: False))
    assert [[s.name for s in p.stages] for p in passes((a, constants), config=None)] == [["a", "constants"]]


def test_saved_states_go_to_the_stage_whose_fit_learns_their_kind():
    counts = Stage("counts", colour="#000000", plan=_plan, fit=_fit(Counts))
    other = Stage("other", colour="#000000", plan=_plan, fit=_fit(Other))
    order = _order(counts, other)
    assert order.fitted_by((Other((1,)), None, Counts(3))) == {"other": Other((1,)), "counts": Counts(3)}
    assert order.fitted_by({"counts": Counts(2), "other": None}) == {"counts": Counts(2)}


def test_splits_known_ahead_come_from_the_stage_that_declares_them():
    splits = pd.DataFrame({"HADM_ID": [1], "SPLIT": ["train"]})
    plain = Stage("plain", colour="#000000", plan=_plan)
    splitter = Stage("splitter", colour="#000000", plan=_plan, splits_ahead=lambda admissions, options: splits)
    assert _order(plain).splits_ahead(pd.DataFrame(), config=None) is None
    assert _order(plain, splitter).splits_ahead(pd.DataFrame(), config=None) is splits


def test_a_stage_is_shown_its_own_state_and_section():
    config = SimpleNamespace(mine=SimpleNamespace(NAME="mine"), report=SimpleNamespace(max_lines=7))
    options = type("Options", (), {"NAME": "mine"})
    stage = Stage("mine", colour="#000000", plan=_plan, options=options, summary=lambda shown: [("x", "y")])
    prepared = Prepared(fitted={"mine": Counts(4), "other": Counts(5)})
    shown = stage.shown(config, read=RawTables(), prepared=prepared, report=None, engine=PANDAS, names={})
    assert shown.state == Counts(4) and shown.options is config.mine and shown.max_lines == 7
    assert stage.summary(shown) == [("x", "y")]


def test_each_stage_checks_its_own_options_and_stages_that_read_another_section_check_that_one():
    config = SimpleNamespace(mine=SimpleNamespace(risky=True), theirs=SimpleNamespace(risky=False))
    mine, theirs = (type("Options", (), {"NAME": name}) for name in ("mine", "theirs"))

    def check(options):
        return [("risky", options)] if options.risky else []

    order = _order(Stage("plain", colour="#000000", plan=_plan),
                   Stage("mine", colour="#000000", plan=_plan, options=mine, checks_options=check),
                   Stage("reader", colour="#000000", plan=_plan, reads="mine", checks_options=check),
                   Stage("theirs", colour="#000000", options=theirs, checks_options=check))
    assert order.options_findings(config) == [("risky", config.mine), ("risky", config.mine)]  # in flow order
    assert _order(Stage("plain", colour="#000000", plan=_plan)).options_findings(config) == []


def test_the_ledger_refuses_an_empty_step_and_names_it():
    ledger = Ledger(warn_removed_fraction=0.5, error_removed_fraction=0.99)
    step = Step(table="LABEVENTS", stage="first", step="keep none", rows_in=10, rows_out=0)
    with pytest.raises(StageError) as raised:
        ledger._judge(step)
    error = raised.value
    assert (error.stage, error.check, error.count) == ("first", "step_empty", 10)
    assert "first step 'keep none' removed all 10 rows" in str(error)


@pytest.mark.parametrize(("rows_in", "rows_out", "found"), [(10, 9, []), (10, 4, ["step_removed_most"]),
                                                        (1000, 5, ["step_removed_nearly_all"])])
def test_the_ledger_judges_what_a_step_removed(rows_in, rows_out, found):
    ledger = Ledger(warn_removed_fraction=0.5, error_removed_fraction=0.99)
    ledger._judge(Step(table="LABEVENTS", stage="first", step="filter", rows_in=rows_in, rows_out=rows_out))
    assert [finding.check for finding in ledger.findings] == found


def test_checks_are_listed_in_the_order_handed():
    checks = [CheckInfo("late", "second", INFO, "t", "a."), CheckInfo("early", "first", INFO, "t", "a."),
              CheckInfo("any", "all", INFO, "t", "a.")]
    assert [c.id for c in in_flow_order(checks, ["raw", "first", "second"])] == ["any", "early", "late"]
    assert [c.id for c in in_flow_order(checks, ["raw", "first", "second"])] == \
        [c.id for c in in_flow_order(list(reversed(checks)), ["raw", "first", "second"])]  # the same in any order
