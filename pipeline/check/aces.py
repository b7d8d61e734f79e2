"""``badpoints check TASK.yaml``: the window geometry of an ACES task config, read without ACES.

An ACES config (``predicates``, ``trigger``, ``windows``) places each window's ``start`` and ``end`` relative to
the trigger, to another window's edge (``input.end``, ``gap.end + 2h``) or to the window's other edge (``start +
24h``, ``end - 24h``, ``start -> discharge``: the next discharge at or after the start; ``end <- death``: the last
death at or before the end); an edge left empty is the record's start or end. :func:`read_task_config` resolves
every edge into a :class:`schemas.windows.Point`: on the anchor ``trigger`` with an offset, or on an anchor of its
own for an edge bound to an event (``target.end``), with how long it is at least after the edge it follows (the
:data:`~schemas.windows.Known` order the geometry reads). The window holding ``index_timestamp`` gives the
prediction time (its ``end`` closes the observation window, the window the features read); the window holding
``label`` is the label window. :func:`task_problems` then asks :func:`schemas.windows.geometry_problems`, the same
geometry a badpoints task is held to, and adds what only ACES' inclusive edges can get wrong: a label window that
starts at the prediction time and counts it, where a MEDS model reads every event up to and including it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.check.run import CheckRun
from pipeline.check.stage import ORDER
from pipeline.config import ConfigError
from pipeline.reporting.findings import summary_finding
from pipeline.reporting.report import InputFile, Report
from schemas.windows import OPEN, Point, WindowError, Windows, geometry_problems, parse_duration, relation

TRIGGER = "trigger"
ANY_EVENT = "_ANY_EVENT"  # ACES' predicate of every event
EDGES = ("start", "end")
# REF, REF + 24h, REF - 2 days, REF -> predicate, REF <- predicate
_EDGE = re.compile(r"^\s*(?P<ref>[A-Za-z0-9_]+(?:\.(?:start|end))?)\s*(?:(?P<op>->|<-|\+|-)\s*(?P<arg>.+?))?\s*$")
STAGE = "task"  # the check it reports, task_window_geometry, is the task stage's


def is_task_config(path: Path) -> bool:
    """Whether ``badpoints check`` reads ``path`` as an ACES task config: a ``.yaml`` or ``.yml`` file."""
    return Path(path).suffix.lower() in (".yaml", ".yml") and Path(path).is_file()


@dataclass(frozen=True)
class AcesWindow:
    """One window as the config gives it: its edges resolved, whether each counts the event at it, and the
    ``label`` predicate or ``index_timestamp`` edge it holds."""

    name: str
    start: Point
    end: Point
    start_inclusive: bool
    end_inclusive: bool
    label: str | None = None
    index_timestamp: str | None = None
    has: tuple[str, ...] = ()  # its constraints, "predicate: (min, max)": a record without them is left out


@dataclass(frozen=True)
class AcesTask:
    """An ACES task config read: its name (the file's stem), trigger predicate, windows by name and the known order
    of the anchors of its event-bound edges (``(earlier, later) -> seconds``)."""

    name: str
    trigger: str
    windows: dict[str, AcesWindow]
    known: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def label_window(self) -> AcesWindow:
        return next(w for w in self.windows.values() if w.label is not None)

    @property
    def index_window(self) -> AcesWindow:
        return next(w for w in self.windows.values() if w.index_timestamp is not None)

    @property
    def prediction(self) -> Point:
        index = self.index_window
        return index.end if index.index_timestamp == "end" else index.start

    def geometry(self) -> Windows:
        """The task's windows as :func:`schemas.windows.geometry_problems` reads them: the observation window is
        the window whose end is the prediction time (else everything up to it), the gap 0 (an ACES gap is a
        window of its own)."""
        index, label = self.index_window, self.label_window
        observation = (index.start, index.end) if index.index_timestamp == "end" else (Point(OPEN), self.prediction)
        return Windows(prediction=self.prediction, observation=observation, gap=0.0, label=(label.start, label.end))


def task_problems(task: AcesTask) -> list[str]:
    """What the config's windows get wrong for every record: the geometry of every task (:mod:`schemas.windows`),
    a label window bound to an event at or before the prediction time (``end <- death``), and one that starts at
    the prediction time and counts the event there."""
    problems = geometry_problems(task.geometry(), task.known)
    label, prediction = task.label_window, task.prediction
    if relation(label.start, prediction, task.known) is None and \
            relation(label.start, prediction.plus(1.0), task.known) == -1:  # no later than it, never after
        problems.append(f"the label window {label.name} starts at {label.start}, at or before the prediction time "
                        f"{prediction} for every record: it looks back into what the features read")
    if label.start_inclusive and relation(label.start, prediction, task.known) == 0:
        problems.append(f"the label window {label.name} starts at the prediction time ({label.start}) and counts the "
                        "event there (start_inclusive: true), which a MEDS model reads too (every event up to and "
                        "including prediction_time): set start_inclusive: false")
    return problems


def future_selections(task: AcesTask) -> list[AcesWindow]:
    """The windows whose ``has`` constraints keep or drop a record for what happens after its prediction time: each
    that may end after it (an end left open is the record's end; an event-bound one may come later)."""
    prediction = task.prediction
    return [w for w in task.windows.values() if w.has
            and (w.end.open or relation(w.end, prediction, task.known) not in (-1, 0))]


def check_task_config(path: Path, config: Any) -> CheckRun:
    """``badpoints check TASK.yaml``: the config read (:func:`read_task_config`; one that cannot be read is a
    :class:`~pipeline.config.ConfigError`, exit 2), ``task_window_geometry`` for what its windows get wrong and
    ``task_selection_on_future`` for the constraints it reads after the prediction time."""
    path = Path(path)
    task = read_task_config(path)
    report = Report(stages=ORDER.colours)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    report.inputs.append(InputFile(path.name, str(path), digest, len(task.windows)))
    problems = task_problems(task)
    if problems:
        report.add([summary_finding(stage=STAGE, check="task_window_geometry", table=path.name,
                                    column=f"windows.{task.label_window.name}", count=len(problems),
                                    message=f"ACES task {task.name!r}: " + "; ".join(problems))])
    future = future_selections(task)
    if future:
        said = "; ".join(f"window {w.name} ({w.start} .. {w.end}) has {', '.join(w.has)}" for w in future)
        report.add([summary_finding(stage=STAGE, check="task_selection_on_future", table=path.name,
                                    column=f"windows.{future[0].name}.has", count=len(future),
                                    message=f"ACES task {task.name!r}: {said}, read after the prediction time "
                                            f"{task.prediction}: a record is kept or left out for what happens "
                                            "after the question is asked")])
    checked = report.with_severities(dict(config.severity))
    checked.summary = [("task", summary_line(task))]
    return CheckRun(checked, config=config)


def summary_line(task: AcesTask) -> str:
    """``ACES task 'x': trigger admission; prediction time input.end (trigger + 24h); observation ...``."""
    windows = task.geometry()
    label = task.label_window
    return (f"ACES task {task.name!r}: trigger {task.trigger}; prediction time {task.index_window.name}."
            f"{task.index_window.index_timestamp} ({task.prediction}); observation {windows.observation[0]} .. "
            f"{windows.observation[1]}; label {label.label} in {label.name} ({label.start} .. {label.end})")


# -- reading -----------------------------------------------------------------------------------------------------
def read_task_config(path: Path) -> AcesTask:
    """The ACES config at ``path`` with every window edge resolved; a :class:`ConfigError` naming the file, the
    field and what is wrong where it cannot be read (YAML, a window without start and end, a reference to no window
    edge, a circle of references, a duration, no ``label`` or ``index_timestamp`` window, or more than one)."""
    import yaml

    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot be read as an ACES task config ({type(exc).__name__}: "
                          f"{str(exc)[:300]})") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("windows"), dict) or not loaded["windows"]:
        raise ConfigError(f"{path}: an ACES task config is a mapping with predicates, trigger and windows (a "
                          "mapping of window names to start, end, start_inclusive, end_inclusive, has, label, "
                          "index_timestamp): no windows found")
    predicates = {*dict(loaded.get("predicates") or {}), *dict(loaded.get("patient_demographics") or {}), ANY_EVENT}
    trigger = loaded.get("trigger")
    trigger = trigger.get("predicate") if isinstance(trigger, dict) else trigger
    if trigger not in predicates:
        raise ConfigError(f"{path}: trigger {trigger!r} is not a predicate of the config (predicates: "
                          f"{', '.join(sorted(map(str, predicates)))})")
    return _Resolver(path, loaded["windows"], predicates).task(str(trigger))


class _Resolver:
    """Resolves every window edge of one config, each once, following its references (a circle is an error)."""

    def __init__(self, path: Path, windows: dict, predicates: set[str]) -> None:
        self.path, self.raw, self.predicates = path, windows, predicates
        self.points: dict[tuple[str, str], Point] = {}
        self.known: dict[tuple[str, str], float] = {}
        self.resolving: list[tuple[str, str]] = []

    def error(self, where: str, what: str) -> ConfigError:
        return ConfigError(f"{self.path}: windows.{where}: {what}")

    def task(self, trigger: str) -> AcesTask:
        windows = {str(name): self.window(str(name), spec) for name, spec in self.raw.items()}
        for key, what in (("label", "the label"), ("index_timestamp", "the prediction time")):
            holding = [w.name for w in windows.values() if getattr(w, key) is not None]
            if len(holding) != 1:
                raise ConfigError(f"{self.path}: {len(holding)} windows name {key} ({', '.join(holding) or 'none'}): "
                                  f"exactly one window holds {what}")
        return AcesTask(self.path.stem, trigger, windows, dict(self.known))

    def window(self, name: str, spec: Any) -> AcesWindow:
        if not isinstance(spec, dict):
            raise self.error(name, "a window is a mapping of start, end, start_inclusive, end_inclusive, has, label, "
                                   "index_timestamp")
        if spec.get("start") is None and spec.get("end") is None:
            raise self.error(name, "start and end are both empty: a window cannot run from the record's start to "
                                   "its end")
        label, index = spec.get("label"), spec.get("index_timestamp")
        if label is not None and label not in self.predicates:
            raise self.error(f"{name}.label", f"{label!r} is not a predicate of the config")
        if index is not None and index not in EDGES:
            raise self.error(f"{name}.index_timestamp", f"{index!r}: write start or end")
        has = spec.get("has") or {}
        if not isinstance(has, dict):
            raise self.error(f"{name}.has", "has is a mapping of predicates to (min, max) counts")
        return AcesWindow(name, self.edge(name, "start"), self.edge(name, "end"),
                          _flag(spec, "start_inclusive", True), _flag(spec, "end_inclusive", True),
                          None if label is None else str(label), index,
                          tuple(f"{predicate}: {bounds}" for predicate, bounds in has.items()))

    def edge(self, window: str, edge: str) -> Point:
        """The point of ``window``'s ``edge``, resolved once (its references first)."""
        key = (window, edge)
        if key in self.points:
            return self.points[key]
        if key in self.resolving:
            circle = " -> ".join(f"{w}.{e}" for w, e in self.resolving[self.resolving.index(key):] + [key])
            raise self.error(f"{window}.{edge}", f"its references go round in a circle ({circle})")
        if window not in self.raw or not isinstance(self.raw[window], dict):
            raise self.error(f"{window}.{edge}", "no such window")
        self.resolving.append(key)
        try:
            self.points[key] = self._resolved(window, edge, self.raw[window].get(edge))
        finally:
            self.resolving.pop()
        return self.points[key]

    def _resolved(self, window: str, edge: str, text: Any) -> Point:
        where = f"{window}.{edge}"
        if text is None:  # the record's start, or its end
            return Point(OPEN)
        match = _EDGE.match(str(text))
        if match is None:
            raise self.error(where, f"{text!r} is not an edge: write REF, REF + 24h, REF - 24h, REF -> predicate or "
                                    "REF <- predicate, REF being trigger, start, end or WINDOW.start / WINDOW.end")
        base = self._reference(window, edge, match["ref"], where)
        op, arg = match["op"], match["arg"]
        if op is None:
            return base
        if op in ("+", "-"):
            try:
                seconds = parse_duration(arg)
            except WindowError as exc:
                raise self.error(where, str(exc)) from None
            return base.plus(seconds if op == "+" else -seconds)
        if arg not in self.predicates:
            raise self.error(where, f"{arg!r} is not a predicate of the config")
        anchor = where  # an event's own time: at or after the edge it follows (->), or at or before it (<-)
        self._order(*((base.anchor, anchor, base.offset) if op == "->" else (anchor, base.anchor, -base.offset)))
        return Point(anchor)

    def _reference(self, window: str, edge: str, ref: str, where: str) -> Point:
        if ref == TRIGGER:
            return Point(TRIGGER)
        if ref in EDGES:
            if ref == edge:
                raise self.error(where, f"{ref!r} is the edge itself: refer to the window's other edge")
            point = self.edge(window, ref)
        else:
            name, _, other = ref.partition(".")
            if not other:
                raise self.error(where, f"{ref!r} is no edge: write trigger, start, end or WINDOW.start / WINDOW.end")
            point = self.edge(name, other)
        if point.open:
            raise self.error(where, f"it refers to {ref}, which is empty (the record's start or end): refer to an edge "
                                    "placed in time")
        return point

    def _order(self, earlier: str, later: str, gap: float) -> None:
        """``later`` at least ``gap`` seconds after ``earlier``, and every order that follows from it with those
        known (so :func:`schemas.windows.relation` reads any two anchors at once)."""
        before = [(a, g) for (a, b), g in self.known.items() if b == earlier] + [(earlier, 0.0)]
        after = [(b, g) for (a, b), g in self.known.items() if a == later] + [(later, 0.0)]
        for first, g1 in before:
            for last, g2 in after:
                if first != last:
                    total = g1 + gap + g2
                    self.known[(first, last)] = max(total, self.known.get((first, last), total))


def _flag(spec: dict, key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return bool(value)
