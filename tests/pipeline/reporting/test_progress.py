"""pipeline/reporting/progress.py: where a run is, as bars on a terminal, lines in a log, nothing when quiet."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from pipeline import load_config, validate
from pipeline.flow import steps as steps_of
from pipeline.reporting.progress import NO_PROGRESS, PlainProgress, RichProgress, progress_for

ROOT = Path(__file__).resolve().parents[3]


class Recorder:
    """A Progress that remembers what flow told it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def step(self, name, *, rows=None, unit="rows"):
        self.calls.append(("step", name, rows, unit))

    def rows(self, rows):
        self.calls.append(("rows", rows))

    def end(self):
        self.calls.append(("end",))


def test_validate_reports_every_step_in_flow_order_with_rows():
    recorder = Recorder()
    validation = validate(ROOT / "data" / "sample", load_config(), progress=recorder)
    steps = [call[1] for call in recorder.calls if call[0] == "step"]
    assert tuple(steps) == steps_of(load_config())
    rows = {call[1]: call[2] for call in recorder.calls if call[0] == "step"}
    assert rows["text+clean+split"] == 13_041 and rows["check LABEVENTS"] == 13_041
    assert ("rows", 13_041) in recorder.calls  # the table's rows, known once it was read
    assert recorder.calls[-1] == ("end",)
    assert validation.exit_code == 0


def test_plain_progress_prints_one_line_per_step_without_colour():
    out = io.StringIO()
    progress = PlainProgress(Console(file=out, force_terminal=False, width=200))
    with progress:
        progress.step("read LABEVENTS")
        progress.rows(13_041)
        progress.step("clean", rows=12_000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("badpoints: read LABEVENTS") and "13,041 rows" in lines[0]
    assert "rows/s" in lines[0] or "0.00 s" in lines[0]
    assert lines[1].startswith("badpoints: clean") and "12,000 rows" in lines[1]
    assert "\x1b[" not in out.getvalue()


def test_rich_progress_on_a_terminal_shows_each_step():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with RichProgress(console, steps=2, title="validate") as progress:
        progress.step("read LABEVENTS")
        progress.rows(13_041)
        progress.step("clean", rows=12_000)
        progress.step("one more than planned")
    text = out.getvalue()
    assert "read LABEVENTS" in text and "13,041 rows" in text and "clean" in text
    assert "rows/s" in text


def test_progress_for_picks_quiet_plain_or_bars():
    terminal = Console(file=io.StringIO(), force_terminal=True)
    log = Console(file=io.StringIO(), force_terminal=False)
    assert progress_for(terminal, quiet=True, steps=3, title="t") is NO_PROGRESS
    assert isinstance(progress_for(log, quiet=False, steps=3, title="t"), PlainProgress)
    assert isinstance(progress_for(terminal, quiet=False, steps=3, title="t"), RichProgress)
