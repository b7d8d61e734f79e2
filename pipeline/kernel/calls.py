"""The work an engine carries out for the stages, as data: calls on a part of the lab rows, fits of state from all
of them, and what comes back (the kernel's lower half: it names no stage, and no engine).

A stage's plan (:class:`pipeline.kernel.stage.Plan`) is made of :class:`Call` s; a stage that learns state declares its
:class:`Fit`; an engine (``pipeline.engines``) runs them on whole frames or on parts and gives back a
:class:`Chained`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import pandas as pd

from pipeline.kernel.quarantine import Kept
from pipeline.kernel.handed import value_of

Events = Any  # what a stage hands on: a pandas frame, or (parts and Dask engines) its parts


@dataclass(frozen=True)
class Call:
    """A function of one part of the lab rows (all of them, or an engine's part): ``function(part, *args,
    **kwargs)``. A stage's call gives its frame or its :class:`Kept`; a count gives what adds up over parts (``+``);
    a pick gives rows, put together in row order."""

    function: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, part: Any) -> Any:
        """The call on ``part`` (frames among the arguments that an engine shared as files read back)."""
        return self.function(part, *map(value_of, self.args), **{k: value_of(v) for k, v in self.kwargs.items()})


@dataclass(frozen=True)
class Fit:
    """What a stage learns on the training split before it runs (unless an earlier run's ``state`` is given).

    ``whole`` fits one frame. A mergeable fit gives the same state from rows held in parts (the engine picks):
    ``partial(part, *args, **kwargs)`` is a part's small result, ``combine(partials)`` adds them up (into a
    result that combines again: an engine combines a few at a time) and ``finish(combined, *args, **kwargs)`` is
    the state (``whole`` is ``finish`` of ``combine`` of one ``partial``). ``inputs(events, context)`` says what
    the fit reads: the rows (or the columns it needs of them), its arguments and its options. The state is a frozen
    dataclass whose fitted attributes end in ``_``, saved in ``stats.json`` under ``saved_as``.

    ``rows(options)``: whether it reads any row with these options (fill's constants read none: it is fitted
    without waiting for the rows). ``early``: its arguments are its options alone, so a mergeable fit may read the
    rows of an earlier stage when the stages between keep every row and write none of the columns its partial
    reads (the z-score fit reads split's rows, before encode writes CODE).
    """

    whole: Callable[..., Any]
    state: type
    saved_as: str
    # (events, context): the rows, arguments and options it reads in a run's passes (None: a run that hands it its
    # items itself, a MEDS run its shards)
    inputs: Callable[..., tuple[Events, tuple, dict]] | None = None
    partial: Callable[..., Any] | None = None
    combine: Callable[[list], Any] | None = None
    finish: Callable[..., Any] | None = None
    rows: Callable[[Any], bool] | None = None
    early: bool = False

    def reads_rows(self, options: Any) -> bool:
        return self.rows is None or self.rows(options)

    def of_items(self, each: Callable[..., Any], items: Any, **kwargs: Any) -> tuple[list, Any]:
        """The partial of every item, made by ``each(partial, items, **kwargs)`` (an engine's :meth:`each`: where its
        parts are worked on), and the state they give (``finish`` of ``combine``)."""
        partials = list(each(self.partial, items, **kwargs))
        return partials, self.finish(self.combine(partials))

    def replaying(self, calls: tuple[Call, ...]) -> "Fit":
        """The same fit of the rows ``calls`` give (each applied in turn to what the one before gave): read from the
        rows before them, so it needs no pass of its own (see :attr:`pipeline.kernel.stage.Stage.replay`)."""
        if not calls:
            return self
        return replace(self, whole=functools.partial(replayed, calls=calls, then=self.whole),
                       partial=None if self.partial is None else functools.partial(replayed, calls=calls,
                                                                                   then=self.partial))


def replayed(part: Any, *args: Any, calls: tuple[Call, ...], then: Callable[..., Any], **kwargs: Any) -> Any:
    """``then`` of what ``calls`` make of ``part``, one after another (a call's :class:`Kept` hands on its rows)."""
    for call in calls:
        made = call(part)
        part = made.frame if isinstance(made, Kept) else made
    return then(part, *args, **kwargs)


@dataclass(frozen=True)
class Link:
    """One stage's work on a part, in a chain (:meth:`Engine.chain`): counts of its input, its calls in order, picks
    of its output and tallies of its output (counts that add up, like ``counts``) (:class:`Call`)."""

    calls: tuple[Call, ...]
    counts: tuple[Call, ...] = ()
    picks: tuple[Call, ...] = ()
    tallies: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Linked:
    """What one link made of all the rows: its counts (added up over parts), each call's :class:`Kept` (the whole
    quarantine and steps; None for a call that gives a frame), its picks (in row order), the rows it handed on; or
    the whole table's error of the call that failed (the calls before it are in ``kept``)."""

    counts: tuple[Any, ...] = ()
    kept: tuple[Kept | None, ...] = ()
    picks: tuple[pd.DataFrame, ...] = ()
    rows: int = 0
    error: Exception | None = None  # a StageError, carried as data
    tallies: tuple[Any, ...] = ()  # of its output, added up over parts


@dataclass(frozen=True)
class Chained:
    """What a chain made: per link its :class:`Linked` (up to the one that failed), the last link's rows (None when
    one failed) and the fitted states."""

    links: tuple[Linked, ...]
    events: Any = None
    fitted: tuple[Any, ...] = ()


def reads(*columns: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares the columns a function of a part's rows reads (a fit's partial result, a count, a pick): an engine
    that keeps parts in files reads only those of them the part has, and its index. The function is unchanged."""

    def declare(function: Callable[..., Any]) -> Callable[..., Any]:
        function.reads = columns  # type: ignore[attr-defined]
        return function

    return declare
