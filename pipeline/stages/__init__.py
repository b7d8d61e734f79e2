"""The stages that turn the checked raw tables into graph edges, declared once, in flow order.

:data:`STAGES` is the one list: ``flow.prepare`` loops over it, and the report's stage order,
the HTML colours, the progress steps, the quarantine reasons' checks and the tests derive from it.
Each stage is a module of this package: typed, guarded functions (``clean_events``, ``apply_zscore``,
...) and one uniform entry, ``plan(context)``, that says what the stage does to the lab rows as data (a
:class:`Plan`: the guarded functions it calls on each part of the rows with keyword-only options from its config
section, the small results it reads from them, the findings it makes of those) and gives the next stage an updated
:class:`Context`. A stage that learns state on the training split declares its :class:`Fit`. The engine decides
where the calls and the fits run, never what they compute: consecutive stages with no fit between them run on a
part in one go (``flow.prepare``), and a fit's partial results are read on the way.

Adding a stage: its module here (with ``plan``), its schema in ``schemas/``, one :class:`Stage`
below, and its tests in ``tests/pipeline/stages/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping

import pandas as pd

from pipeline.findings import Finding, summary_finding
from pipeline.plan import Call, Outcome, Plan
from pipeline.quarantine import Kept, Step
from pipeline.stages import bucket, clean, dedup, encode, fill, graph, scale, split
from schemas.bucket import BucketedEvents
from schemas.catalogue import CheckInfo
from schemas.clean import CleanEvents
from schemas.dedup import EdgeRows
from schemas.encode import EncodedEvents
from schemas.errors import StageError
from schemas.fill import FilledEvents
from schemas.raw import LabEvents
from schemas.scale import ScaledEvents
from schemas.split import SplitEvents

if TYPE_CHECKING:
    from pipeline.engine import Engine
    from pipeline.parse import RawTables

Events = Any  # a pandas frame, or (Dask) its parts on the workers


@dataclass(frozen=True)
class Reason:
    """A quarantine reason a stage gives, and the check of ``schemas/checks.py`` whose finding reports it."""

    text: str
    check: str
    per_admission: bool = False  # the finding also counts the admissions its rows belong to
    per_item: bool = False  # the finding names the lab items its rows belong to


@dataclass(frozen=True)
class Fit:
    """What a stage learns on the training split before it runs (unless an earlier run's ``state`` is given).

    ``whole`` fits one frame. A mergeable fit gives the same state from rows held in parts (the engine picks):
    ``partial(part, *args, **kwargs)`` is a part's small result, ``combine(partials)`` adds them up (into a
    result that combines again: an engine combines a few at a time) and
    ``finish(combined, *args, **kwargs)`` is the state (``whole`` is ``finish`` of ``combine`` of one
    ``partial``); or ``parts`` runs passes over the parts itself (the z-score fit's centred sums). ``inputs(events, context)`` says what the fit reads: the rows
    (or the columns it needs of them), its arguments and its options. The state is a frozen dataclass,
    saved in ``stats.json`` under ``saved_as``.

    ``rows(options)``: whether it reads any row with these options (fill's constants read none: it is fitted
    without waiting for the rows). ``early``: its arguments are its options alone, so a mergeable fit may read the
    rows of an earlier stage when the stages between keep every row and write none of the columns its partial
    reads (the z-score fit reads split's rows, before encode writes CODE).
    """

    whole: Callable[..., Any]
    inputs: Callable[[Events, "Context"], tuple[Events, tuple, dict]]
    state: type
    saved_as: str
    parts: Callable[..., Any] | None = None
    partial: Callable[..., Any] | None = None
    combine: Callable[[list], Any] | None = None
    finish: Callable[..., Any] | None = None
    rows: Callable[[Any], bool] | None = None
    early: bool = False

    def reads_rows(self, options: Any) -> bool:
        return self.rows is None or self.rows(options)


@dataclass(frozen=True)
class Stage:
    """One stage: its name (in findings, quarantine records and steps), what it runs and reads, and how it shows.

    ``plan`` is None for a part of the order that is not a LABEVENTS stage of ``flow.prepare`` (reading, the
    raw checks, the graph build, the run as a whole). ``by_admission``: it works per row or per admission,
    so an engine may run it on parts cut by admission. ``filters``: it may drop rows; ``writes``: the columns its
    calls add or change (None: any); both say which fits may read the rows before it (:attr:`Fit.early`), and the
    tests hold each stage to them.
    """

    name: str
    colour: str  # in the HTML report
    plan: Callable[["Context"], Plan] | None = None
    options: Any = None  # the config section it declares (an ``Options`` of its module: name, keys, defaults)
    reads: str | None = None  # the section handed to it as ``context.options``, when not its own
    takes: type | None = None  # the schema of the LABEVENTS rows it takes and gives
    gives: type | None = None
    fit: Fit | None = None
    reasons: tuple[Reason, ...] = ()
    by_admission: bool = False
    filters: bool = True
    writes: tuple[str, ...] | None = None
    progress: tuple[str, ...] = ()  # the progress steps it shows (default: its name, when it runs)

    @property
    def section(self) -> str | None:
        """The config section handed to it as ``context.options``: its own, or the one it reads."""
        return self.reads or getattr(self.options, "NAME", None)

    def options_in(self, config: Any) -> Any:
        """The config section this stage is handed as ``context.options`` (None: it reads none)."""
        return getattr(config, self.section) if self.section else None

    @property
    def steps(self) -> tuple[str, ...]:
        return self.progress or ((self.name,) if self.plan is not None else ())


class Ledger:
    """What the stages hand back besides their rows: quarantines, steps, findings and the lab items' names.

    It outlives a stage that stops the run, so everything found until then is reported. An empty step is a
    :class:`StageError`; a step that removes more than the ``[filters]`` fractions, a finding.
    """

    def __init__(self, *, warn_removed_fraction: float, error_removed_fraction: float) -> None:
        self.warn_removed_fraction = warn_removed_fraction
        self.error_removed_fraction = error_removed_fraction
        self.quarantines: list[pd.DataFrame] = []
        self.steps: list[Step] = []
        self.findings: list[Finding] = []
        self.names: dict[int, str] = {}  # how findings name lab items: '50963 NTproBNP (Blood)'

    def take(self, kept: Kept) -> Events:
        self.quarantines.append(kept.quarantine)
        self.steps.extend(kept.steps)
        for step in kept.steps:
            self._judge(step)
        return kept.frame

    def _judge(self, step: Step) -> None:
        if step.rows_in == 0:
            return
        removed = (step.rows_in - step.rows_out) / step.rows_in
        where = f"{step.stage} step '{step.step}'"
        if step.rows_out == 0:
            raise StageError(stage=step.stage, side="output", check="step_empty", column=step.column,
                             count=step.rows_in,
                             failure_cases=pd.DataFrame({"line": []}), table=step.table,
                             detail=f"{where} removed all {step.rows_in} rows",
                             advice="Nothing would reach the graphs; check the inputs and this step's settings")
        check = ("step_removed_nearly_all" if removed > self.error_removed_fraction
                 else "step_removed_most" if removed > self.warn_removed_fraction else None)
        if check:
            self.findings.append(summary_finding(
                stage=step.stage, check=check, table=step.table, column=step.column,
                count=step.rows_in - step.rows_out,
                message=f"{where} removed {removed:.1%} of its {step.rows_in} rows"))


@dataclass(frozen=True)
class Context:
    """What a stage reads besides its rows, the same for every stage: the tables it works with (as the stages
    before it left them), the fitted state by stage, its config section, and where it runs and reports."""

    tables: RawTables  # the typed raw tables
    engine: Engine
    ledger: Ledger
    max_lines: int  # [report] max_lines: how many lines and items a finding lists
    admissions: pd.DataFrame | None = None  # clean; with SPLIT from split on; with codes from encode on
    labitems: pd.DataFrame | None = None  # clean; with codes from encode on
    splits: pd.DataFrame | None = None
    fitted: Mapping[str, Any] = field(default_factory=dict)  # by stage name
    options: Any = None  # the running stage's config section


BEFORE = (
    Stage("load", colour="#7f7f7f"),  # reading the files
    Stage("raw", colour="#8c564b", gives=LabEvents),  # the raw checks of every table and their relations
)

STAGES = (
    Stage("clean", colour="#1f77b4", plan=clean.plan, options=clean.Options, takes=LabEvents, gives=CleanEvents,
          fit=Fit(whole=clean.fit_kinds, partial=clean.count_kinds, combine=clean.add_kind_counts,
                  finish=clean.kinds_from_counts, inputs=clean.fit_inputs, state=clean.ItemKinds,
                  saved_as="item_kinds"),
          reasons=(Reason(clean.OUTPATIENT, "quarantine_outpatient"),
                   Reason(clean.RAW_ERROR, "quarantine_raw_error"),
                   Reason(clean.ADMISSION_REJECTED, "quarantine_admission"),
                   Reason(clean.ITEM_REJECTED, "quarantine_raw_error"),
                   Reason(clean.MIXED_TEXT, "mixed_item_text", per_item=True),
                   Reason(clean.IN_COMMENTS, "result_in_comments", per_item=True),
                   Reason(clean.NO_RESULT, "no_result", per_item=True)),
          by_admission=True),
    Stage("split", colour="#17becf", plan=split.plan, options=split.Options, takes=CleanEvents, gives=SplitEvents,
          by_admission=True, filters=False, writes=("SPLIT",)),
    Stage("encode", colour="#9467bd", plan=encode.plan, options=encode.Options, takes=SplitEvents, gives=EncodedEvents,
          fit=Fit(whole=encode.fit_vocabularies, partial=encode.count_values, combine=encode.add_value_counts,
                  finish=encode.vocabularies_from_counts, inputs=encode.fit_inputs, state=encode.Vocabularies,
                  saved_as="vocabularies"),
          by_admission=True, filters=False, writes=("CODE",)),
    Stage("scale", colour="#ff7f0e", plan=scale.plan, options=scale.Options, takes=EncodedEvents, gives=ScaledEvents,
          fit=Fit(whole=scale.fit_zscore, partial=scale.fit_rows, combine=scale.add_fit_rows,
                  finish=scale.fit_from_rows, inputs=scale.fit_inputs,
                  state=scale.ZScoreStats, saved_as="scale", early=True),
          by_admission=True, filters=False, writes=("Z",)),
    Stage("fill", colour="#bcbd22", plan=fill.plan, options=fill.Options, takes=ScaledEvents, gives=FilledEvents,
          fit=Fit(whole=fill.fit_fill, inputs=fill.fit_inputs, state=fill.FillValues, saved_as="fill",
                  rows=fill.fits_rows),
          by_admission=True, writes=fill.TENSOR_COLUMNS),
    Stage("bucket", colour="#2ca02c", plan=bucket.plan, options=bucket.Options, takes=FilledEvents, gives=BucketedEvents,
          reasons=(Reason(bucket.NO_ADMISSION, "quarantine_admission"),
                   Reason(bucket.BEFORE, "before_admission"),
                   Reason(bucket.AFTER_DISCHARGE, "after_discharge", per_admission=True),
                   Reason(bucket.BEYOND_STAY, "beyond_max_stay", per_admission=True),
                   Reason(bucket.BEYOND_MAX, "beyond_max_timestep", per_admission=True)),
          by_admission=True),
    Stage("dedup", colour="#d62728", plan=dedup.plan, reads="graph", takes=BucketedEvents, gives=EdgeRows,
          reasons=(Reason(dedup.SHORT, "below_min_timesteps", per_admission=True),),
          by_admission=True),
    # Built by ``flow.build`` from the edge rows (pipeline/stages/graph.py: torch and PyG load only then).
    Stage("graph", colour="#e377c2", options=graph.Options, takes=EdgeRows, progress=("graphs", "guard")),
)

AFTER = (
    Stage("flow", colour="#7f7f7f"),  # the run as a whole: attrition, admissions in no graph
)

ORDER = (*BEFORE, *STAGES, *AFTER)
"""Everything that reports findings, in the report's order."""
STAGE_ORDER = {stage.name: n for n, stage in enumerate(ORDER)}
COLOURS = {stage.name: stage.colour for stage in ORDER}
PREPARE = tuple(stage for stage in STAGES if stage.plan is not None)
"""The stages ``flow.prepare`` runs on LABEVENTS, in order."""
BUILT = tuple(stage for stage in STAGES if stage.plan is None)
"""The stages ``flow.build`` runs after them (the graphs and their guard)."""
REASONS = {reason.text: reason for stage in STAGES for reason in stage.reasons}
"""Every declared quarantine reason, by its text."""
OPTIONS = {stage.options.NAME: stage.options for stage in STAGES if stage.options is not None}
"""The config sections the stages declare, by name, in flow order."""


def _waits_for_rows(stage: Stage, config: Any, fitted: Collection[str]) -> bool:
    """Whether a stage's fit must read the rows the stage before it gives: it is not fitted yet, and reads rows with
    its options."""
    return stage.fit is not None and stage.name not in fitted and stage.fit.reads_rows(stage.options_in(config))


def stage_pass(start: int, config: Any, fitted: Collection[str] = ()) -> tuple[Stage, ...]:
    """The stages of :data:`PREPARE` from ``start`` that work on the rows in one pass: up to the next one whose fit
    waits for its rows (``fitted``: the stages whose state is known)."""
    end = start + 1
    while end < len(PREPARE) and not _waits_for_rows(PREPARE[end], config, fitted):
        end += 1
    return PREPARE[start:end]


def fits_ahead(end: int, config: Any, fitted: Collection[str] = ()) -> tuple[Stage, ...]:
    """The stages whose mergeable fits are read from the rows of the pass that ends before stage ``end``: that
    stage's, and a later stage's :attr:`Fit.early` fit when the stages between keep every row and write none of
    the columns its partial reads."""
    ahead = []
    for at in range(end, len(PREPARE)):
        stage, between = PREPARE[at], PREPARE[end:at]
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


def passes(config: Any, fitted: Collection[str] = ()) -> list[Pass]:
    """The passes ``flow.prepare`` makes over the rows with this config (``fitted``: the stages whose state an
    earlier run gave)."""
    known, done, start = set(fitted), [], 0
    while start < len(PREPARE):
        stages = stage_pass(start, config, known)
        start += len(stages)
        ahead = fits_ahead(start, config, known)
        known |= {s.name for s in (*stages, *ahead)}
        done.append(Pass(stages=stages, ahead=ahead))
    return done


def in_flow_order(checks: Iterable[CheckInfo]) -> list[CheckInfo]:
    """Checks as people read them: by the stage that reports them in :data:`ORDER` (reading, the raw tables, then
    the stages, the run), those of every stage after the raw tables'; each stage's in the order declared."""
    raw = STAGE_ORDER["raw"]
    return sorted(checks, key=lambda info: STAGE_ORDER.get(info.stage, raw))
