"""``badpoints check TASK.yaml``: an ACES task config's window geometry (pipeline/check/aces.py), through the real
reader, the geometry every badpoints task is held to (schemas/windows.py) and the CLI. The configs are
tests/data/aces/ (a sound in-hospital mortality, a readmission bound to the discharge, the leaky one whose label
window lies inside the input window) and small ones written here, one plant each."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.check.aces import check_task_config, read_task_config, task_problems
from pipeline.cli import app
from pipeline.config import ConfigError, load_config
from schemas.windows import Point, parse_duration, relation

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "aces"
runner = CliRunner()

PREDICATES = """\
predicates:
  admission:
    code: {regex: "^HOSPITAL_ADMISSION//.*"}
  discharge:
    code: {regex: "^HOSPITAL_DISCHARGE//.*"}
  death:
    code: MEDS_DEATH
trigger: admission
"""


def config(tmp_path: Path, windows: str, name: str = "task.yaml") -> Path:
    path = tmp_path / name
    path.write_text(PREDICATES + "windows:\n" + textwrap.indent(textwrap.dedent(windows), "  "))
    return path


def test_durations_read_as_aces_writes_them():
    assert parse_duration("30 days") == parse_duration("30d") == 30 * 86_400
    assert parse_duration("2 hours") == parse_duration("2h") == 7_200
    assert parse_duration("1 day, 12 hours") == parse_duration("1d12h") == 129_600
    assert parse_duration("90 minutes") == parse_duration("90min") == parse_duration("90m") == 5_400
    assert parse_duration("1 week") == 604_800
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("1 day, 14:20:16")


def test_an_order_with_a_least_gap_tells_points_apart_only_where_it_holds_for_every_record():
    known = {("trigger", "target.end"): 48 * 3600.0}  # target.end is at least 48 h after the trigger
    assert relation(Point("trigger", 24 * 3600.0), Point("target.end"), known) == -1
    assert relation(Point("trigger", 48 * 3600.0), Point("target.end"), known) is None  # maybe the same time
    assert relation(Point("trigger", 72 * 3600.0), Point("target.end"), known) is None  # either way
    assert relation(Point("target.end"), Point("trigger", 47 * 3600.0), known) == 1


def test_every_edge_is_resolved_against_the_trigger_or_the_event_it_waits_for():
    task = read_task_config(CONFIGS / "in_hospital_mortality.yaml")
    windows = task.windows
    assert (windows["input"].start, windows["input"].end) == (Point("trigger", -86_400.0), Point("trigger"))
    assert (windows["gap"].start, windows["gap"].end) == (Point("trigger"), Point("trigger", 172_800.0))
    assert (windows["target"].start, windows["target"].end) == (Point("trigger", 172_800.0), Point("target.end"))
    assert task.known == {("trigger", "target.end"): 172_800.0}
    assert task.prediction == Point("trigger") and task.label_window.label == "death"


@pytest.mark.parametrize("name", ["in_hospital_mortality.yaml", "readmission_30d.yaml"])
def test_a_sound_config_passes(name):
    assert task_problems(read_task_config(CONFIGS / name)) == []
    run = check_task_config(CONFIGS / name, load_config())
    assert run.exit_code == 0 and run.report.findings == []


def test_the_leaky_config_is_a_geometry_error_naming_the_points():
    run = check_task_config(CONFIGS / "leaky_mortality.yaml", load_config())
    (finding,) = run.report.findings
    assert (finding.check, finding.severity, finding.count, run.exit_code) == ("task_window_geometry", "error", 1, 1)
    assert (finding.table, finding.column) == ("leaky_mortality.yaml", "windows.target")
    assert ("the label window starts at trigger, before the prediction time trigger + 24h, inside the observation "
            "window (which ends at trigger + 24h)") in finding.message


@pytest.mark.parametrize("windows, said", [
    ("""\
     input: {start: null, end: trigger + 24h, index_timestamp: end}
     target: {start: trigger + 12h, end: start + 2 days, label: death}
     """, "the label window starts at trigger + 12h, before the prediction time trigger + 24h"),
    ("""\
     input: {start: null, end: trigger + 24h, index_timestamp: end}
     target: {start: input.end, end: start + 2 days, start_inclusive: True, label: death}
     """, "the label window target starts at the prediction time (trigger + 24h) and counts the event there"),
    ("""\
     input: {start: trigger, end: start + 24h, index_timestamp: end}
     target: {start: null, end: input.end + 24h, label: death}
     """, "the label window has no start"),
    ("""\
     input: {start: trigger, end: start + 24h, index_timestamp: end}
     target: {start: end <- death, end: input.end, start_inclusive: False, label: death}
     """, "the label window target starts at target.start, at or before the prediction time trigger + 24h for every "
         "record"),
], ids=["starts_before_the_prediction", "counts_the_prediction_time", "no_start", "looks_back_from_the_end"])
def test_each_planted_leak_is_named_by_the_geometry_check(tmp_path, windows, said):
    run = check_task_config(config(tmp_path, windows), load_config())
    (finding,) = run.report.findings
    assert finding.check == "task_window_geometry" and run.exit_code == 1
    assert said in finding.message


@pytest.mark.parametrize("gap, future", [
    ('gap: {start: input.end, end: start + 48h, has: {death: "(None, 0)"}}', ["gap"]),
    ('gap: {start: input.end, end: start -> discharge, has: {death: "(None, 0)"}}', ["gap"]),
    ('gap: {start: input.start, end: input.end, has: {death: "(None, 0)"}}', []),
], ids=["a_gap_that_must_hold_no_death", "up_to_an_event_after_it", "within_the_observation_window"])
def test_a_constraint_read_after_the_prediction_time_is_selection_on_the_future(tmp_path, gap, future):
    """A window's ``has`` that may end after the prediction time keeps a record for what happens after the question
    is asked (the 48 h gap that must hold no death keeps only those who live): ``task_selection_on_future``; one
    within the observation window reads the past and passes."""
    windows = f"""\
     input: {{start: trigger, end: start + 24h, index_timestamp: end}}
     {gap}
     target: {{start: input.end, end: start + 30 days, start_inclusive: False, label: death}}
     """
    run = check_task_config(config(tmp_path, windows), load_config())
    found = [f for f in run.report.findings if f.check == "task_selection_on_future"]
    assert [f.column for f in found] == [f"windows.{name}.has" for name in future]
    assert run.exit_code == (1 if future else 0) and [f.check for f in run.report.findings] == [f.check for f in found]
    if future:
        assert found[0].severity == "error" and "window gap (" in found[0].message
        assert "has death: (None, 0), read after the prediction time trigger + 24h" in found[0].message


def test_a_label_window_bound_to_an_event_that_may_come_first_is_not_called_a_leak(tmp_path):
    """The order of a discharge and trigger + 24h depends on the record: the config alone cannot tell (the labels
    it made can: ``badpoints check LABELS --meds``)."""
    path = config(tmp_path, """\
        input: {start: null, end: trigger + 24h, index_timestamp: end}
        stay: {start: trigger, end: start -> discharge}
        target: {start: stay.end, end: start + 30 days, start_inclusive: False, label: admission}
        """)
    assert task_problems(read_task_config(path)) == []


@pytest.mark.parametrize("windows, said", [
    ("input: {start: trigger, end: start + 24h, index_timestamp: end}\n", "0 windows name label"),
    ("input: {start: trigger, end: start + 24h, label: death}\n", "0 windows name index_timestamp"),
    ("input: {start: gap.end, end: start + 24h, index_timestamp: end, label: death}\n"
     "gap: {start: input.end, end: start + 1h}\n", "go round in a circle (input.start -> gap.end -> gap.start -> "
                                                   "input.end -> input.start)"),
    ("input: {start: trigger, end: start + 24 parsecs, index_timestamp: end, label: death}\n", "windows.input.end"),
    ("input: {start: trigger, end: start -> nothing, index_timestamp: end, label: death}\n",
     "'nothing' is not a predicate"),
    ("input: {start: trigger, end: elsewhere.end, index_timestamp: end, label: death}\n", "no such window"),
], ids=["no_label", "no_index_timestamp", "circle", "duration", "predicate", "window"])
def test_a_config_that_cannot_be_read_is_a_config_error_naming_the_field(tmp_path, windows, said):
    with pytest.raises(ConfigError, match="task.yaml") as caught:
        read_task_config(config(tmp_path, windows))
    assert said in str(caught.value)


def test_the_cli_checks_an_aces_config_with_the_exit_codes_of_every_check(tmp_path):
    sound = runner.invoke(app, ["check", str(CONFIGS / "in_hospital_mortality.yaml")])
    assert sound.exit_code == 0, sound.output
    assert "prediction time input.end (trigger)" in sound.output
    leaky = runner.invoke(app, ["check", str(CONFIGS / "leaky_mortality.yaml"), "--json", str(tmp_path / "r.json"),
                                "--junit", str(tmp_path / "j.xml"), "--html", str(tmp_path / "r.html")])
    assert leaky.exit_code == 1
    assert "task_window_geometry" in (tmp_path / "r.html").read_text()
    report = json.loads((tmp_path / "r.json").read_text())
    assert [f["check"] for f in report["findings"]] == ["task_window_geometry"]
    assert 'name="task_window_geometry"' in (tmp_path / "j.xml").read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text("windows: [1, 2\n")
    unreadable = runner.invoke(app, ["check", str(broken)])
    assert unreadable.exit_code == 2 and "cannot run" in unreadable.output
