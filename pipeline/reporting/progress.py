"""Where a long run is: one line per step (read, raw checks, each stage, graphs, writing) with rows per second.

``flow`` calls :meth:`Progress.step` at each stage boundary; the step before ends
there. What is shown depends on where it goes: live rich bars on a terminal,
one plain line per finished step in a log (no colour, no bars), nothing with
``--quiet`` or from Python (:data:`NO_PROGRESS`). Progress goes to stderr, so
stdout keeps only the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from pipeline.kernel.stage import Order, Stage

if TYPE_CHECKING:  # rich loads only when a terminal shows the bars
    from rich.console import Console


class Progress(Protocol):
    def step(self, name: str, *, rows: int | None = None, unit: str = "rows") -> None:
        """Start step ``name`` over ``rows`` (None: not known yet); the running step ends here."""

    def rows(self, rows: int) -> None:
        """Set the running step's rows once they are known (a table's rows after reading it)."""

    def end(self) -> None:
        """End the running step."""


class _NoProgress:
    """Shows nothing: the default for ``flow`` called from Python, and ``--quiet``."""

    def step(self, name: str, *, rows: int | None = None, unit: str = "rows") -> None:
        pass

    def rows(self, rows: int) -> None:
        pass

    def end(self) -> None:
        pass

    def __enter__(self) -> "_NoProgress":
        return self

    def __exit__(self, *exc) -> None:
        pass


NO_PROGRESS = _NoProgress()


@dataclass
class Timed:
    """One step: its name, rows, unit, and when it started and ended (``time.perf_counter``)."""

    name: str
    rows: int | None
    unit: str
    started: float
    ended: float | None = None

    @property
    def seconds(self) -> float:
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started

    def rate(self) -> str:
        """``1.2M rows/s``, or '' when the rows are unknown or the step took no measurable time."""
        if not self.rows or self.seconds <= 0:
            return ""
        return f"{_si(self.rows / self.seconds)} {self.unit}/s"


def _si(value: float) -> str:
    for bound, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= bound:
            return f"{value / bound:.1f}{suffix}"
    return f"{value:.0f}"


@dataclass
class _Steps:
    """The bookkeeping shared by the plain and the rich display."""

    done: list[Timed] = field(default_factory=list)
    current: Timed | None = None

    def start(self, name: str, rows: int | None, unit: str) -> Timed:
        self.current = Timed(name=name, rows=rows, unit=unit, started=time.perf_counter())
        return self.current

    def finish(self) -> Timed | None:
        step, self.current = self.current, None
        if step is not None:
            step.ended = time.perf_counter()
            self.done.append(step)
        return step


def _line(step: Timed) -> str:
    rows = f"{step.rows:>12,} {step.unit}" if step.rows is not None else " " * 13 + " " * len(step.unit)
    rate = step.rate()
    return f"{step.name:<16} {rows} {step.seconds:7.2f} s" + (f"  {rate}" if rate else "")


class PlainProgress:
    """One line per finished step, for logs: ``badpoints: clean      13,041 rows    0.05 s  260.8k rows/s``."""

    def __init__(self, console: "Console") -> None:
        self.console = console
        self.steps = _Steps()

    def step(self, name: str, *, rows: int | None = None, unit: str = "rows") -> None:
        self.end()
        self.steps.start(name, rows, unit)

    def rows(self, rows: int) -> None:
        if self.steps.current is not None:
            self.steps.current.rows = rows

    def end(self) -> None:
        step = self.steps.finish()
        if step is not None:
            self.console.print(f"badpoints: {_line(step)}", markup=False, highlight=False)

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.end()


class RichProgress:
    """Live bars on a terminal: the run's steps overall, and each step with its rows, time and rows/s."""

    def __init__(self, console: "Console", *, steps: int, title: str) -> None:
        from rich.progress import BarColumn, Progress as Bars, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.steps = _Steps()
        self.bars = Bars(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("{task.description:<16}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[rows]:>18}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"),
            console=console, transient=False, refresh_per_second=8,
        )
        self.overall = self.bars.add_task(title, total=steps, rows="", rate="")
        self.task = None

    def step(self, name: str, *, rows: int | None = None, unit: str = "rows") -> None:
        self.end()
        self.steps.start(name, rows, unit)
        self.task = self.bars.add_task(name, total=None, rows=self._rows(rows, unit), rate="")

    def rows(self, rows: int) -> None:
        if self.steps.current is not None and self.task is not None:
            self.steps.current.rows = rows
            self.bars.update(self.task, rows=self._rows(rows, self.steps.current.unit))

    def end(self) -> None:
        step = self.steps.finish()
        if step is None or self.task is None:
            return
        self.bars.update(self.task, total=1, completed=1, rows=self._rows(step.rows, step.unit), rate=step.rate())
        self.bars.stop_task(self.task)
        overall = self.bars.tasks[0]
        if overall.total is not None and overall.completed >= overall.total:
            self.bars.update(self.overall, total=overall.completed + 1)  # more steps than planned
        self.bars.advance(self.overall)
        self.task = None

    @staticmethod
    def _rows(rows: int | None, unit: str) -> str:
        return "" if rows is None else f"{rows:,} {unit}"

    def __enter__(self) -> "RichProgress":
        self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        self.end()
        self.bars.stop()


def progress_for(console: "Console", *, quiet: bool, steps: int, title: str) -> Progress:
    """What a command shows on ``console`` (stderr): nothing when quiet, bars on a terminal, lines in a log."""
    if quiet:
        return NO_PROGRESS
    if console.is_terminal and not console.is_dumb_terminal:
        return RichProgress(console, steps=steps, title=title)
    return PlainProgress(console)


def pass_step(stages: Sequence[Stage]) -> str:
    """The progress step of one pass over the rows: the stages it runs, ``clean+split``."""
    return "+".join(step for stage in stages for step in stage.steps)


def validate_steps(order: Order, config: Any) -> tuple[str, ...]:
    """The steps ``flow.validate`` reports with ``config``, in order (the overall bar's length): reading and checking
    each table, their relations, then the passes of the stages of ``order``."""
    return tuple(f"{verb} {table}" for table in ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
                 for verb in ("read", "check")) + (
        "relations", *(pass_step(segment.stages) for segment in order.passes(config)))


def build_steps(order: Order, config: Any, to: str) -> tuple[str, ...]:
    """The steps ``pipeline.builds.build`` reports: validate's, those of the stage that makes the target ``to``
    (the graphs and their guard), the report and the writing."""
    return validate_steps(order, config) + order.targets[to].steps + ("report", "write")
