"""The time windows of a prediction task, and what their geometry must hold before any data is read.

A task asks a question at a *prediction time* and answers it from a *label window*; the model may read only what
was charted in the *observation window*, which ends at or before the prediction time. Each end of a window is a
:class:`Point`: an anchor (``admit``, ``discharge``, ``prediction``, an ACES ``trigger``) and an offset, written
``"admit + 24h"``, ``"prediction - 2d"`` or ``"discharge"``; ``"none"`` is an open end (the record's start, or its
end). :func:`geometry_problems` says what a task's windows get wrong when that can be told from the windows alone
(a label window that starts before the prediction time or inside the observation window, an observation window
that runs past it): such a task is refused before its rows are read. Where it depends on the stay (``admit + 48h``
against ``discharge - 24h``), :func:`relation` says ``None`` and the run checks each admission.

Pure: no pandas, no I/O; the task stage and the check of an ACES task config both read windows here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

_SIZES = {1.0: ("s", "sec", "secs", "second", "seconds"), 60.0: ("m", "min", "mins", "minute", "minutes"),
          3600.0: ("h", "hr", "hrs", "hour", "hours"), 86_400.0: ("d", "day", "days"),
          604_800.0: ("w", "wk", "week", "weeks")}
UNITS = {unit: size for size, units in _SIZES.items() for unit in units}  # ACES' (pytimeparse's) spellings too
# A term: a number and a unit (the longest spelling first), terms apart by spaces or a comma ("1 day, 12 hours").
_TERM = re.compile(r"\s*,?\s*(\d+(?:\.\d+)?)\s*(" + "|".join(sorted(UNITS, key=len, reverse=True)) + r")(?![A-Za-z])\s*")
OPEN = "none"  # an open end: the record's start, or its end
# Anchors whose order is known whatever the stay: each pair (earlier, later) holds for every admission. A mapping
# of pairs to seconds says more: the later anchor is at least that long after the earlier one (an ACES window end
# "start -> discharge" is at or after its start).
KNOWN_ORDER = frozenset({("admit", "discharge")})
Known = frozenset[tuple[str, str]] | Mapping[tuple[str, str], float]


class WindowError(ValueError):
    """A point or duration that cannot be read: what was given, and the form it takes."""


def parse_duration(text: str) -> float:
    """Seconds in ``text``: one or more terms of a number and a unit (``24h``, ``30d``, ``1d12h``, ``90min``,
    ``0h``; units s, min, h, d, w, also spelled as ACES writes them: ``30 days``, ``2 hours``, ``1 day, 12 hours``)."""
    source = str(text).strip()
    at, seconds = 0, 0.0
    while at < len(source):
        term = _TERM.match(source, at)
        if term is None or term.end() == at:
            raise WindowError(f"{text!r} is not a duration: write a number and a unit, e.g. '24h', '30d', '1d12h' "
                              f"(units: s, min, h, d, w)")
        seconds += float(term.group(1)) * UNITS[term.group(2)]
        at = term.end()
    if not source:
        raise WindowError("an empty duration: write e.g. '0h' or '24h'")
    return seconds


@dataclass(frozen=True, order=True)
class Point:
    """One end of a window: ``anchor`` plus ``offset`` seconds (an open end: anchor ``none``)."""

    anchor: str
    offset: float = 0.0

    @property
    def open(self) -> bool:
        return self.anchor == OPEN

    def __str__(self) -> str:
        if self.open or not self.offset:
            return self.anchor
        sign = "+" if self.offset > 0 else "-"
        return f"{self.anchor} {sign} {_duration_text(abs(self.offset))}"

    def plus(self, seconds: float) -> "Point":
        return self if self.open else Point(self.anchor, self.offset + seconds)


def _duration_text(seconds: float) -> str:
    for unit, size in (("d", 86_400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size and (seconds / size).is_integer() and (unit != "d" or seconds >= 7 * 86_400.0):
            return f"{int(seconds / size)}{unit}"
    return f"{seconds:g}s"


def parse_point(text: str, anchors: Iterable[str]) -> Point:
    """``text`` as a point: an anchor of ``anchors`` (or ``none``), optionally ``+`` or ``-`` a duration."""
    known = tuple(anchors)
    source = str(text).strip()
    if source == OPEN:
        return Point(OPEN)
    match = re.fullmatch(r"([a-z_]+)\s*(?:([+-])\s*(.+))?", source)
    if match is None or match.group(1) not in known:
        raise WindowError(f"{text!r} is not a point in time: write one of {', '.join(known)} or {OPEN}, optionally "
                          f"+ or - a duration ('admit + 24h', 'prediction - 2d')")
    offset = parse_duration(match.group(3)) if match.group(3) else 0.0
    return Point(match.group(1), -offset if match.group(2) == "-" else offset)


def resolved(point: Point, prediction: Point) -> Point:
    """``point`` with the anchor ``prediction`` replaced by what the prediction time is anchored on."""
    return prediction.plus(point.offset) if point.anchor == "prediction" else point


def _least_gap(known: Known, first: str, later: str) -> float | None:
    """How long ``later`` is at least after ``first`` for every record (0 for a pair of a set), or None."""
    if isinstance(known, Mapping):
        return known.get((first, later))
    return 0.0 if (first, later) in known else None


def relation(a: Point, b: Point, known: Known = KNOWN_ORDER) -> int | None:
    """-1 when ``a`` is before ``b`` for every record, 0 when they are the same time, 1 when ``a`` is after; None
    when it depends on the record (two anchors of no known order, or ``admit + 72h`` against ``discharge``)."""
    if a.open or b.open:
        return None
    if a.anchor == b.anchor:
        return (a.offset > b.offset) - (a.offset < b.offset)
    gap = _least_gap(known, a.anchor, b.anchor)  # b's anchor is at least gap after a's: a is no later than b
    if gap is not None and a.offset <= b.offset + gap:
        return -1 if a.offset < b.offset + gap else None  # no later, maybe the same time (a stay of no length)
    gap = _least_gap(known, b.anchor, a.anchor)
    if gap is not None and a.offset + gap >= b.offset:
        return 1 if a.offset + gap > b.offset else None
    return None


@dataclass(frozen=True)
class Windows:
    """A task's times: the prediction time, the observation window (what the features may read), the gap, and the
    label window (what the label is made of). Points may be anchored on ``prediction``."""

    prediction: Point
    observation: tuple[Point, Point]
    gap: float
    label: tuple[Point, Point]

    def of(self, point: Point) -> Point:
        return resolved(point, self.prediction)


def geometry_problems(windows: Windows, known: Known = KNOWN_ORDER) -> list[str]:
    """What the windows get wrong for every record, each said with the points that show it (empty: nothing, or
    nothing the windows alone can tell). The label window must start at or after the prediction time plus the gap,
    after the observation window, and end after it starts; the observation window must end at or before the
    prediction time, and start before it ends."""
    problems = []
    prediction = windows.prediction
    gap_end = prediction.plus(windows.gap)
    obs_start, obs_end = (windows.of(p) for p in windows.observation)
    label_start, label_end = (windows.of(p) for p in windows.label)
    if windows.gap < 0 or not math.isfinite(windows.gap):
        problems.append(f"the gap is {windows.gap:g}s: it is a duration of 0 or more")
    if relation(obs_end, prediction, known) == 1:
        problems.append(f"the observation window ends at {obs_end}, after the prediction time {prediction}: the "
                        "features would read what happens after the question is asked")
    if label_start.open:
        problems.append("the label window has no start: it would begin with the record, before the prediction "
                        f"time {prediction}")
    elif relation(label_start, gap_end, known) == -1:
        where = (f"the prediction time {prediction}" if not windows.gap else
                 f"the end of the gap after the prediction time ({gap_end})")
        inside = (f", inside the observation window (which ends at {obs_end}): the same events would be features "
                  "and label" if not obs_end.open and relation(label_start, obs_end, known) == -1 else
                  ": the label would be made of what the model is shown")
        problems.append(f"the label window starts at {label_start}, before {where}{inside}")
    if relation(label_end, label_start, known) in (-1, 0):
        problems.append(f"the label window ends at {label_end}, not after it starts ({label_start}): it is empty")
    if relation(obs_end, obs_start, known) in (-1, 0):
        problems.append(f"the observation window ends at {obs_end}, not after it starts ({obs_start}): it is empty")
    return problems
