"""What a stage does to the lab rows, as data: the calls it makes on each part, what it reads from them and the
findings it makes of that (a stage module's ``plan(context)`` gives its :class:`Plan`; ``pipeline.stages``
declares the stages, ``flow.prepare`` has an engine carry the plans out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import pandas as pd

from pipeline.findings import Finding
from pipeline.quarantine import Kept, Step
from pipeline.shared import value_of

if TYPE_CHECKING:
    from pipeline.stages import Context


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
class Outcome:
    """What a stage's calls made of all the rows, for its findings: its counts (of its input, added up), its picks
    (of its output, in row order), its steps and how many rows it handed on."""

    counts: tuple[Any, ...] = ()
    picks: tuple[pd.DataFrame, ...] = ()
    steps: tuple[Step, ...] = ()
    rows: int = 0


@dataclass(frozen=True)
class Plan:
    """What a stage does, once its fit is known, made before any part is worked on (``plan(context)``).

    ``calls`` run on each part in turn (the last one's rows go on); ``counts`` read each part's input and
    ``picks`` its output. What the stage reports comes in this order: ``before`` (findings known from the small
    tables alone), ``taken`` (ADMISSIONS' and D_LABITEMS' own quarantines and steps), ``counted(outcome)``, the
    steps of its calls, then ``report(outcome)``. ``context`` is what the next stage sees.
    """

    context: "Context"
    calls: tuple[Call, ...] = ()
    counts: tuple[Call, ...] = ()
    picks: tuple[Call, ...] = ()
    before: tuple[Finding, ...] = ()
    taken: tuple[Kept, ...] = ()
    counted: Callable[[Outcome], list[Finding]] | None = None
    report: Callable[[Outcome], list[Finding]] | None = None
