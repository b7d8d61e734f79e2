"""What a stage is, naming none: its declaration (:class:`Stage`), what it reads (:class:`Context`), what it plans
(:class:`Plan`), the ledger it reports into (:class:`Ledger`) and the passes its declaration implies (:func:`passes`).

The kernel of badpoints: each module of ``pipeline/stages/`` declares its one :class:`Stage` beside its code,
``pipeline/stages/__init__.py`` lists them in flow order, and ``pipeline.flow`` runs that list. Nothing here
imports a stage or the list. The work a plan hands an engine (:class:`pipeline.kernel.calls.Call`,
:class:`pipeline.kernel.calls.Fit`) is the kernel's lower half, in :mod:`pipeline.kernel.calls`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Iterable, Mapping, Protocol, Sequence

import pandas as pd

from pipeline.kernel.calls import Call, Fit
from pipeline.kernel.engine import Engine
from pipeline.kernel.finding import Finding
from pipeline.kernel.quarantine import Kept, Step


@dataclass(frozen=True)
class Drop:
    """Admissions a stage leaves out of every graph for a reason of its own (those of an admission in no graph
    whose rows it quarantined for that reason): the check that reports them, and what it says of them."""

    check: str
    what: str  # 'with fewer timesteps than [graph] min_timesteps'


@dataclass(frozen=True)
class Reason:
    """A quarantine reason a stage gives, and the check of ``schemas/checks.py`` whose finding reports it."""

    text: str
    check: str
    per_admission: bool = False  # the finding also counts the admissions its rows belong to
    per_item: bool = False  # the finding names the lab items its rows belong to
    drops: Drop | None = None  # the admissions it leaves without a lab row are dropped for it, not "quarantined"


@dataclass(frozen=True)
class Target:
    """What a build writes, declared by the stage that makes it from a finished run's rows (``build --to NAME``):
    ``write(staged, validation, config, progress, *, engine, data_dir)`` makes, guards and stages the files (in a
    staged build of ``pipeline.output.write``) and gives the build, committed only when nothing is an error."""

    name: str
    write: Callable[..., Any]


@dataclass(frozen=True)
class Stage:
    """One stage: its name (in findings, quarantine records and steps), what it runs and reads, and how it shows.

    ``plan`` is None for a part of the order that is not a LABEVENTS stage of ``flow.prepare`` (reading, the
    raw checks, a build's target, the run as a whole). ``by_admission``: it works per row or per admission,
    so an engine may run it on parts cut by admission. ``filters``: it may drop rows; ``writes``: the columns its
    calls add or change (None: any); both say which fits may read the rows before it (:attr:`Fit.early`), and the
    tests hold each stage to them.
    """

    name: str
    colour: str  # in the HTML report
    plan: Callable[[Context], Plan] | None = None
    options: Any = None  # the config section it declares (an ``Options`` of its module: name, keys, defaults)
    reads: str | None = None  # the section handed to it as ``context.options``, when not its own
    takes: type | None = None  # the schema of the LABEVENTS rows it takes and gives
    gives: type | None = None
    fit: Fit | None = None
    reasons: tuple[Reason, ...] = ()
    by_admission: bool = False
    filters: bool = True
    writes: tuple[str, ...] | None = None
    # Its calls are cheap: the next stage's fit may read the rows they give by replaying them on the rows they take
    # (:meth:`Fit.replaying`), so the pass goes on through that stage instead of ending before it.
    replay: bool = False
    progress: tuple[str, ...] = ()  # the progress steps it shows (default: its name, when it runs)
    # The split each admission will get, known from the raw ADMISSIONS and the stage's options alone (HADM_ID,
    # SPLIT; None when the stage will fail): how an engine cuts lab rows into parts before any stage runs.
    splits_ahead: Callable[[pd.DataFrame, Any], pd.DataFrame | None] | None = None
    # How it shows in the reports, from what the run made (:class:`Shown`): its lines of the terminal summary
    # (label, text), and its sections of the HTML report (drawn with ``pipeline.reporting.page``), in flow order.
    summary: Callable[[Shown], list[tuple[str, str]]] | None = None
    sections: Callable[[Shown], list[str]] | None = None
    # What its config section alone says, whatever the data (a legal but risky choice): findings of the options it
    # is handed, reported by every run of the stages, validate's and build's alike.
    checks_options: Callable[[Any], list[Finding]] | None = None
    # What a build writes when this stage is its target (``build --to NAME``); its progress steps are ``progress``.
    target: Target | None = None
    # Its state as a build saved it (stats.json's JSON) as one row per item and the notes the table rests on, for
    # ``badpoints inspect --items``.
    items: Callable[[Any], tuple[pd.DataFrame, list[str]]] | None = None
    # Whether it does nothing with its options (no call, no fit, no table changed): the passes then go through it
    # as if it were not declared, so a stage a config leaves unused costs no pass and moves no figure.
    idle: Callable[[Any], bool] | None = None
    # What it says of the finished run once every admission's fate is known (``pipeline.ledgers.Prepared``, its
    # options, the engine that holds the rows, how many lines a finding lists): its own ledger (plain JSON, in the
    # report's attrition under its name; None: none) and its findings.
    closes: Callable[[Any, Any, Engine, int], tuple[dict | None, list[Finding]]] | None = None

    @property
    def section(self) -> str | None:
        """The config section handed to it as ``context.options``: its own, or the one it reads."""
        return self.reads or getattr(self.options, "NAME", None)

    def options_in(self, config: Any) -> Any:
        """The config section this stage is handed as ``context.options`` (None: it reads none)."""
        return getattr(config, self.section) if self.section else None

    def idle_in(self, config: Any) -> bool:
        """Whether the stage does nothing with ``config`` (:attr:`idle`)."""
        return self.idle is not None and bool(self.idle(self.options_in(config)))

    def shown(self, config: Any, *, read: Any, prepared: Any, report: Any, engine: Engine,
              names: Mapping[int, str], built: Any = None) -> Shown:
        """What its report hooks read of a run with ``config``: its own state and section among the rest."""
        return Shown(read=read, prepared=prepared, report=report, state=prepared.fitted.get(self.name),
                     options=self.options_in(config), engine=engine, names=names,
                     max_lines=config.report.max_lines, built=built)

    @property
    def steps(self) -> tuple[str, ...]:
        return self.progress or ((self.name,) if self.plan is not None else ())


@dataclass(frozen=True)
class Shown:
    """What a stage's report hooks (:attr:`Stage.summary`, :attr:`Stage.sections`) read of a finished run: the inputs
    as read (a lab run's typed raw tables, LABEVENTS maybe in the engine's parts), what the stages made (a lab run's
    ``pipeline.ledgers.Prepared``), the report, the stage's own fitted state (None: not fitted) and config section,
    the engine that holds the rows, how findings name items, and the build (None for a validation): its target,
    what it made and whether it wrote it. A run served from the cache has no inputs and no state: a hook then shows
    nothing."""

    read: Any
    prepared: Any
    report: Any
    state: Any
    options: Any
    engine: Engine
    names: Mapping[int, str]
    max_lines: int
    built: Any = None


class Ledger(Protocol):
    """Where a stage's records go besides its rows (a run's ledger): what it quarantined and the steps that decided
    (:meth:`take` hands on the rows kept), its findings, and how findings name the dataset's items."""

    findings: list[Finding]
    names: dict[int, str]

    def take(self, kept: Kept) -> Any: ...


@dataclass(frozen=True)
class Context:
    """What a stage reads besides its rows, the same for every stage and every dataset: the inputs as read, the
    dataset's named tables as the stages before it left them, the split, the fitted state by stage, its config
    section, and where it runs and reports."""

    read: Any  # the inputs as read and checked (a lab run: the typed raw tables, ``.of("D_LABITEMS")``)
    engine: Engine
    ledger: Ledger
    max_lines: int  # [report] max_lines: how many lines and items a finding lists
    # The dataset's tables besides the rows, by name, as the stages before it left them (a lab run: ADMISSIONS and
    # D_LABITEMS, clean from the clean stage on, with SPLIT from split's, with codes from encode's).
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    splits: pd.DataFrame | None = None  # each admission's (or subject's) split, once a stage assigned them
    fitted: Mapping[str, Any] = field(default_factory=dict)  # by stage name
    options: Any = None  # the running stage's config section
    # Every section, for a setting that holds across stages (scale keeps out of stats.json what [encode]
    # min_admissions keeps out of the vocabularies); a stage's own options are ``options``.
    settings: Any = None

    def table(self, name: str) -> pd.DataFrame | None:
        """The dataset's table ``name`` as the stages before this one left it (None: the dataset has none)."""
        return self.tables.get(name)

    def with_tables(self, **tables: pd.DataFrame) -> "Context":
        """The context with ``tables`` replaced (by name), what the next stage sees."""
        return replace(self, tables={**self.tables, **tables})


@dataclass(frozen=True)
class Outcome:
    """What a stage's calls made of all the rows, for its findings: its counts (of its input, added up), its picks
    (of its output, in row order), its tallies (of its output, added up), its steps and how many rows it handed
    on."""

    counts: tuple[Any, ...] = ()
    picks: tuple[pd.DataFrame, ...] = ()
    steps: tuple[Step, ...] = ()
    rows: int = 0
    tallies: tuple[Any, ...] = ()  # of its output, added up


@dataclass(frozen=True)
class Plan:
    """What a stage does, once its fit is known, made before any part is worked on (``plan(context)``).

    ``calls`` run on each part in turn (the last one's rows go on); ``counts`` read each part's input, ``picks``
    and ``tallies`` (counts that add up) its output. What the stage reports comes in this order: ``before`` (findings known from the small
    tables alone), ``taken`` (ADMISSIONS' and D_LABITEMS' own quarantines and steps), ``counted(outcome)``, the
    steps of its calls, then ``report(outcome)``. ``context`` is what the next stage sees.
    """

    context: "Context"
    calls: tuple[Call, ...] = ()
    counts: tuple[Call, ...] = ()
    picks: tuple[Call, ...] = ()
    tallies: tuple[Call, ...] = ()
    before: tuple[Finding, ...] = ()
    taken: tuple[Kept, ...] = ()
    counted: Callable[[Outcome], list[Finding]] | None = None
    report: Callable[[Outcome], list[Finding]] | None = None


def _waits_for_rows(stage: Stage, config: Any, fitted: Collection[str]) -> bool:
    """Whether a stage's fit must read the rows the stage before it gives: it is not fitted yet, and reads rows with
    its options."""
    return stage.fit is not None and stage.name not in fitted and stage.fit.reads_rows(stage.options_in(config))


def stage_pass(prepare: Sequence[Stage], start: int, config: Any, fitted: Collection[str] = ()) -> tuple[Stage, ...]:
    """The stages of ``prepare`` (those that work on the lab rows, in order) from ``start`` that work on the rows in
    one pass: up to the next one whose fit waits for its rows (``fitted``: the stages whose state is known), unless
    every stage before it in the pass may be replayed for its fit (:attr:`Stage.replay`)."""
    end = start + 1
    while end < len(prepare) and (not _waits_for_rows(prepare[end], config, fitted)
                                  or _replays(prepare[start:end], prepare[end])):
        end += 1
    return tuple(prepare[start:end])


def _replays(before: Sequence[Stage], stage: Stage) -> bool:
    """Whether ``stage``'s fit can read the rows of the stages ``before`` it by replaying their calls."""
    return all(s.replay for s in before) and stage.fit is not None


def fits_ahead(prepare: Sequence[Stage], end: int, config: Any, fitted: Collection[str] = ()
               ) -> tuple[Stage, ...]:
    """The stages whose mergeable fits are read from the rows of the pass that ends before stage ``end``: that
    stage's, and a later stage's :attr:`Fit.early` fit when the stages between keep every row and write none of
    the columns its partial reads."""
    ahead = []
    for at in range(end, len(prepare)):
        stage, between = prepare[at], prepare[end:at]
        if at > end and any(s.filters or s.writes is None for s in between):
            break
        written = {column for s in between for column in s.writes or ()}
        reads = getattr(stage.fit.partial, "reads", None) if stage.fit is not None else None
        if (_waits_for_rows(stage, config, fitted) and stage.fit.partial is not None
                and (at == end or (stage.fit.early and reads is not None and not written & set(reads)))):
            ahead.append(stage)
    return tuple(ahead)


@dataclass(frozen=True)
class Pass:
    """One pass of ``flow.prepare`` over the rows: the stages it runs, and those whose fits read its rows."""

    stages: tuple[Stage, ...]
    ahead: tuple[Stage, ...] = ()


def passes(prepare: Sequence[Stage], config: Any, fitted: Collection[str] = ()) -> list[Pass]:
    """The passes ``flow.prepare`` makes over the rows of the stages ``prepare`` with this config (``fitted``: the
    stages whose state an earlier run gave)."""
    known, done, start = set(fitted), [], 0
    while start < len(prepare):
        stages = stage_pass(prepare, start, config, known)
        start += len(stages)
        ahead = fits_ahead(prepare, start, config, known)
        known |= {s.name for s in (*stages, *ahead)}
        done.append(Pass(stages=stages, ahead=ahead))
    return done


@dataclass(frozen=True)
class Order:
    """Everything that reports findings, in the report's order: the run's steps ``before`` the stages (reading,
    the raw checks), the declared ``stages``, and those ``after`` them (the run as a whole). Everything ordered by
    stage (the report, the HTML colours, the progress steps, the passes, the config sections) reads it here."""

    stages: tuple[Stage, ...]
    before: tuple[Stage, ...] = ()
    after: tuple[Stage, ...] = ()

    @property
    def all(self) -> tuple[Stage, ...]:
        return (*self.before, *self.stages, *self.after)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.all)

    @property
    def index(self) -> dict[str, int]:
        """Each name's place in the report's order."""
        return {stage.name: n for n, stage in enumerate(self.all)}

    @property
    def colours(self) -> dict[str, str]:
        return {stage.name: stage.colour for stage in self.all}

    @property
    def prepare(self) -> tuple[Stage, ...]:
        """The stages ``flow.prepare`` runs on LABEVENTS (those with a plan), in order."""
        return tuple(stage for stage in self.stages if stage.plan is not None)

    @property
    def targets(self) -> dict[str, Stage]:
        """The stages a build may write, by the name of what they write (``build --to NAME``)."""
        return {stage.target.name: stage for stage in self.stages if stage.target is not None}

    @property
    def reasons(self) -> dict[str, Reason]:
        """Every declared quarantine reason, by its text."""
        return {reason.text: reason for stage in self.stages for reason in stage.reasons}

    def options_findings(self, config: Any) -> list[Finding]:
        """What each stage finds of its own config section (:attr:`Stage.checks_options`), in flow order."""
        return [finding for stage in self.stages if stage.checks_options is not None
                for finding in stage.checks_options(stage.options_in(config))]

    def closing(self, prepared: Any, config: Any, engine: Engine, *, max_lines: int
                ) -> tuple[dict[str, dict], list[Finding]]:
        """What each stage that is not idle says of the finished run (:attr:`Stage.closes`): its ledger by its name,
        and every finding, in flow order."""
        ledgers, findings = {}, []
        for stage in self.stages:
            if stage.closes is not None and not stage.idle_in(config):
                ledger, found = stage.closes(prepared, stage.options_in(config), engine, max_lines)
                if ledger is not None:
                    ledgers[stage.name] = ledger
                findings.extend(found)
        return ledgers, findings

    def passes(self, config: Any, fitted: Collection[str] = ()) -> list[Pass]:
        """The passes over the rows with ``config``: of the stages it does not leave idle (:attr:`Stage.idle`)."""
        return passes([stage for stage in self.prepare if not stage.idle_in(config)], config, fitted)

    def splits_ahead(self, admissions: pd.DataFrame, config: Any) -> pd.DataFrame | None:
        """The split of every admission, as the stage that assigns them will (None: no stage can tell ahead)."""
        for stage in self.stages:
            if stage.splits_ahead is not None:
                return stage.splits_ahead(admissions, stage.options_in(config))
        return None

    def fitted_by(self, states: Any) -> dict[str, Any]:
        """States saved by an earlier run (``from_json``), by the stage whose :class:`Fit` learns their kind:
        ``states`` is a mapping by stage name, or states of any order."""
        if isinstance(states, Mapping):
            return {name: state for name, state in states.items() if state is not None}
        return {stage.name: state for state in states if state is not None
                for stage in self.prepare if stage.fit is not None and isinstance(state, stage.fit.state)}


def sections_of(stages: Iterable[Stage]) -> dict[str, Any]:
    """The config sections ``stages`` declare (their ``Options``), by name, in their order."""
    return {stage.options.NAME: stage.options for stage in stages if stage.options is not None}
