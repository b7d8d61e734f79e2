"""A run of badpoints: read and check the raw tables, then the declared stages in order.

load -> raw -> the stages of ``pipeline.stages.STAGES`` (the one list) -> graph (``build`` only: ``pipeline.builds``).
:func:`prepare` is a loop over the list: each stage's fit, then its plan; the stages up to the next fit that must read
their rows work on the rows in one pass of the engine. A stage that raises :class:`StageError` stops the stages after
it (their input would be corrupt); everything found until then is reported. This module names no stage: what a stage
adds (its state, its drops, its findings) comes through its declaration (``pipeline.kernel.stage``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd

from pipeline.cache import Cache
from pipeline.cache import key_of as cache_key
from pipeline.config import Config
from pipeline.reporting.findings import finding_from_error, item_names
from pipeline.ledgers import (Ledger, Prepared, admission_fates, admission_findings, attrition_finding,
                              quarantine_findings)
from pipeline.engines import PANDAS, Engine
from pipeline.reading.load import TextBlocks, file_sha256, read_blocks
from pipeline.check import stage as check
from pipeline.meds import stage as meds
from pipeline.reading.locate import LOAD, TABLES, locate_tables
from pipeline.reading.parse import (RAW, LabRelations, RawResult, RawTables, check_blocks, check_relations, check_stream,
                                    keyed_admissions)
from pipeline.reporting.progress import NO_PROGRESS, Progress, build_steps, pass_step, validate_steps
from pipeline.kernel.quarantine import Quarantine
from pipeline.reporting.report import InputFile, Report
from pipeline.kernel.stage import Context, Order, Outcome, Pass, Plan, Stage
from pipeline.stages import STAGES
from pipeline.kernel.calls import Chained, Link, Linked
from schemas.catalogue import CHECKS, ERROR, STOPS
from schemas.errors import StageError, require_validation
from schemas.guard import trusted_chain
from schemas.raw import ADMISSIONS, LABITEMS

FLOW = Stage("flow", colour="#7f7f7f")  # the run as a whole: attrition, admissions in no graph
ORDER = Order(STAGES, before=(LOAD, RAW, meds.STAGE, check.STAGE), after=(FLOW,))
"""Everything that reports findings, in the report's order: reading, the raw checks, a MEDS dataset's checks and a
user's table's (the stages of a MEDS run, ``pipeline.meds``, and of a check run, ``pipeline.check``: in this order for
the catalogue), the declared stages, then the run as a whole."""


def steps(config: Config, *, build: str | None = None) -> tuple[str, ...]:
    """The progress steps a run with ``config`` reports, in order: validate's, or (``build``: its target, ``graphs``)
    a build's."""
    return build_steps(ORDER, config, build) if build else validate_steps(ORDER, config)


@dataclass(frozen=True)
class Validation:
    """A lab run: its report, the typed raw tables, what the stages made, the config it ran with and the engine that
    holds its rows (whether the report came from the cache: ``cached``, with no tables and no state)."""

    report: Report
    tables: RawTables
    prepared: Prepared
    cached: bool = False
    config: Config | None = None
    engine: Engine = PANDAS

    @property
    def exit_code(self) -> int:
        return self.report.exit_code

    @property
    def order(self) -> Order:
        """The run's stages, in the report's order."""
        return self.prepared.order

    @property
    def names(self) -> dict[int, str]:
        """How findings name lab items (``'50963 NTproBNP (Blood)'``)."""
        return item_names(self.prepared.labitems)


def validate(data_dir: Path, config: Config, *, show_values: bool = False, cache: Cache | None = None,
             reuse_report: bool = True, progress: Progress | None = None,
             engine: Engine | None = None) -> Validation:
    """Read the raw tables, run every raw check and every stage, and collect all findings.

    With a ``cache``, tables whose file, settings and checking code are unchanged are taken from it
    already parsed and checked; with ``reuse_report`` too, a run whose inputs and config are all
    unchanged returns the earlier report (its ``tables`` and ``prepared`` are then empty). An ``engine``
    (``pipeline.engines.parts_engine`` or ``dask_engine``) routes LABEVENTS' checked blocks into parts and runs its
    stages part by part, here, in worker processes or on a Dask cluster, with the same result.
    """
    require_validation()
    progress = progress or NO_PROGRESS
    refused = _refused_by_config(config, engine)
    if refused is not None:
        return refused
    located, problems = locate_tables(Path(data_dir))
    digests = _digests(located, problems) if cache else {}
    report_key = None
    if cache is not None and reuse_report and not problems:
        report_key = cache_key("report", digests, {t: p.name.lower() for t, p in located.items()},
                               config.as_json(), show_values)
        cached = cache.get_report(report_key, {t: str(p) for t, p in located.items()})
        if cached is not None:
            cached.stages = ORDER.colours
            return Validation(report=cached, tables=RawTables(), prepared=Prepared(order=ORDER), cached=True,
                              config=config, engine=engine or PANDAS)
    reading = _Reading(config, show_values=show_values, cache=cache, digests=digests, progress=progress,
                       engine=engine)
    # Checked tables are stored in the cache behind the run, while the next table and the stages go on.
    with cache.writing_behind() if cache else contextlib.nullcontext() as store:
        checked, inputs = reading.tables(located, problems, store)
        report = Report(inputs=inputs, stages=ORDER.colours)
        report.add(finding_from_error(problem) for problem in sorted(problems, key=lambda p: TABLES.index(p.table)))
        progress.step("relations", rows=sum(i.rows for i in inputs))
        raw = check_relations(checked, stay_tolerance_hours=config.raw.stay_tolerance_hours, severity=config.severity,
                              show_values=show_values, max_lines=config.report.max_lines)
        report.add(raw.findings)
        prepared = prepare(raw.tables, config, progress=progress, engine=engine)
    progress.end()
    report.add(prepared.findings)
    # A table that could not be read stops the run before the stages: there is no ledger to report.
    report.attrition = prepared.attrition() if all(raw.tables.of(t) is not None for t in TABLES) else {}
    validation = Validation(report=report.with_severities(dict(config.severity)), tables=raw.tables,
                            prepared=prepared, config=config, engine=engine or PANDAS)
    validation.report.summary = summary_lines(validation, config)
    # Stored under the files' hashes only when the bytes read are those bytes: a file replaced during the run (mv,
    # rsync) must not leave its report under the key of the file it replaced.
    read_as_hashed = all(i.sha256 == digests.get(i.table) for i in inputs) and len(inputs) == len(digests)
    if report_key is not None and validation.exit_code != 2 and read_as_hashed:
        cache.put_report(report_key, validation.report)
    return validation


def _refused_by_config(config: Config, engine: Engine | None) -> Validation | None:
    """A run its config alone refuses, before any data is read: a stage's options say what no data can mend (a
    task whose label window overlaps its observation window). Its report holds what the options say, and no
    table."""
    said = ORDER.options_findings(config)
    if not any(CHECKS[finding.check].locked == STOPS and config.severity_of(finding.check) == ERROR
               for finding in said):
        return None
    report = Report(inputs=[], stages=ORDER.colours)
    report.add(said)
    return Validation(report=report.with_severities(dict(config.severity)), tables=RawTables(),
                      prepared=Prepared(order=ORDER), config=config, engine=engine or PANDAS)


def summary_lines(validation: Validation, config: Config) -> list[tuple[str, str]]:
    """Each stage's lines of the terminal summary (:attr:`Stage.summary`), in flow order, from what the run made."""
    prepared = validation.prepared
    names = item_names(prepared.labitems)
    return [line for stage in prepared.order.stages if stage.summary is not None
            for line in stage.summary(stage.shown(config, read=validation.tables, prepared=prepared,
                                                  report=validation.report, engine=PANDAS, names=names))]


class _Reading:
    """Each located table read and checked block by block, or taken from the cache: the whole text table never
    exists, only the typed one (with an engine that keeps parts, not even that: LABEVENTS' blocks go straight into
    its parts)."""

    def __init__(self, config: Config, *, show_values: bool, cache: Cache | None, digests: Mapping[str, str],
                 progress: Progress, engine: Engine | None) -> None:
        self.config, self.cache, self.digests, self.progress, self.engine = config, cache, digests, progress, engine
        self.settings = dict(valuenum_abs_bound=config.raw.valuenum_abs_bound, severity=config.severity,
                             show_values=show_values, max_lines=config.report.max_lines)
        self.limits = dict(max_expanded_bytes=config.load.max_expanded_bytes,
                           max_expansion_ratio=config.load.max_expansion_ratio,
                           max_field_chars=config.load.max_field_chars)

    def tables(self, located: Mapping[str, Path], problems: list[StageError], store: Any
               ) -> tuple[dict[str, RawResult], list[InputFile]]:
        """Every located table's checks (a table that cannot be read is one more of the ``problems``)."""
        checked, inputs = {}, []
        for table, path in located.items():
            text = read_blocks(path, table, **self.limits)  # nothing is read until a block is taken
            try:
                result, sha256 = self.table(table, path, text, checked, store)
            except StageError as problem:
                problems.extend([problem, *text.notices])  # the header's warnings stand beside what stopped it
                continue
            checked[table] = result
            inputs.append(InputFile(table=table, path=str(path), sha256=sha256, rows=len(result.tables.of(table))))
        return checked, inputs

    def table(self, table: str, path: Path, text: TextBlocks, checked: Mapping[str, RawResult],
              store: Any) -> tuple[RawResult, str]:
        """One table's checks and its file's sha256: from the cache, or read (``text``), checked and stored behind."""
        # The file name says how the bytes are read (.gz or not): the same bytes under another name differ.
        key = cache_key("table", table, self.digests.get(table), path.name.lower().endswith(".gz"), self.settings,
                        self.limits) if self.cache else None
        streams = table == "LABEVENTS" and self.engine is not None and self.engine.keeps_parts  # into its parts
        result = self.cache.get_table(table, key) if self.cache and not streams else None
        if result is not None:
            self.progress.step(f"cached {table}", rows=len(result.tables.of(table)))
            return result, self.digests[table]
        self.progress.step(f"read {table}")
        if streams:
            result = check_stream(self._counted(text), self._router(checked), self._relations(checked),
                                  engine=self.engine, **self.settings)
            key = None  # the parts are this run's: the checked table is not cached
        else:
            result = check_blocks(table, self._counted(text), engine=self.engine, **self.settings)
        if text.problems:  # the header's warnings, rows left out: reported, and cached, with the checks
            result = replace(result, findings=[*map(finding_from_error, text.problems), *result.findings])
        if store is not None and key is not None and text.sha256 == self.digests[table]:
            store(table, key, result)
        return result, text.sha256

    def _counted(self, blocks: Any) -> Iterator[pd.DataFrame]:
        """A table's blocks, the running step counting their rows; ``check TABLE`` (the blocks' checks combined
        into findings) starts after the last block, so ``read TABLE`` times reading and checking the blocks."""
        rows = 0
        for block in blocks:
            rows += len(block)
            self.progress.rows(rows)
            yield block
        self.progress.step(f"check {blocks.table}", rows=blocks.rows)

    def _router(self, checked: Mapping[str, RawResult]) -> Any:
        """Where LABEVENTS' checked blocks go: the engine's parts, by the split each admission will get."""
        admissions = _typed(checked, "ADMISSIONS")
        splits = None if admissions is None else ORDER.splits_ahead(
            keyed_admissions(admissions, severity=self.config.severity), self.config)
        return self.engine.router(splits)

    def _relations(self, checked: Mapping[str, RawResult]) -> LabRelations:
        return LabRelations.of(_typed(checked, "ADMISSIONS"), _typed(checked, "D_LABITEMS"),
                               self.config.raw.stay_tolerance_hours)


def _typed(checked: Mapping[str, RawResult], table: str) -> pd.DataFrame | None:
    return checked[table].tables.of(table) if table in checked else None


def _digests(located: dict[str, Path], problems: list[StageError]) -> dict[str, str]:
    """Each located file's sha256 (the cache's key). A file that cannot be read is a problem like any other
    load problem and leaves ``located``, as reading it would have."""
    digests = {}
    for table, path in list(located.items()):
        try:
            digests[table] = file_sha256(path, table)
        except StageError as problem:
            problems.append(problem)
            del located[table]
    return digests


def prepare(tables: RawTables, config: Config, *, fitted: Any = (), progress: Progress | None = None,
            engine: Engine | None = None) -> Prepared:
    """Run the declared stages (clean, split, encode, scale, fill, bucket, dedup) on the typed raw tables.

    ``fitted``: states saved by an earlier run (``from_json``), by stage name or in any order, reused instead of
    fitted, so new data is transformed with exactly what training saw. The ``engine`` runs the stages that work by
    admission on parts, and their fits where the parts are (in this process by default; see ``pipeline.engines``).
    """
    if tables.admissions is None or tables.labitems is None or tables.labevents is None:
        return Prepared(order=ORDER)
    engine = engine or PANDAS
    ledger = Ledger(warn_removed_fraction=config.filters.warn_removed_fraction,
                    error_removed_fraction=config.filters.error_removed_fraction)
    ledger.findings.extend(ORDER.options_findings(config))  # known from the config alone, even if a stage stops
    given = ORDER.fitted_by(fitted)
    run = _Run(tables, config, progress or NO_PROGRESS, engine, Context(
        read=tables, engine=engine, ledger=ledger, max_lines=config.report.max_lines, fitted=given, settings=config))
    with trusted_chain():  # each stage's output goes straight to the next: its guard ran already
        try:
            for segment in ORDER.passes(config, given):
                run.one_pass(segment)
            run.state["edges"] = engine.result(run.events)
        except StageError as error:
            ledger.findings.append(finding_from_error(error))
            run.state["stopped_at"] = error.stage
    context, stopped_at = run.context, run.state.get("stopped_at")
    # States fitted ahead for stages that never ran are not theirs to keep.
    kept = {name: state for name, state in context.fitted.items()
            if stopped_at is None or name in given or ORDER.index[name] <= ORDER.index[stopped_at]}
    prepared = Prepared(admissions=context.table(ADMISSIONS), labitems=context.table(LABITEMS), splits=context.splits,
                        fitted=kept, quarantine=Quarantine(tuple(ledger.quarantines)), steps=tuple(ledger.steps),
                        order=ORDER, **run.state)
    return _reported(prepared, tables, config, ledger, engine)


def _reported(prepared: Prepared, tables: RawTables, config: Config, ledger: Ledger, engine: Engine) -> Prepared:
    """What the stages made, with the admissions' fates and every finding: the stages', the quarantine's, the
    admissions in no graph and the attrition."""
    max_lines = config.report.max_lines
    # The quarantine's findings first: the fates reuse its summary (one read of the records, not two).
    quarantined = quarantine_findings(prepared.quarantine, ORDER, max_lines=max_lines, names=ledger.names)
    closing: list = []
    if prepared.edges is not None:
        prepared = replace(prepared, fates=admission_fates(tables, prepared, engine=engine))
        ledgers, closing = ORDER.closing(prepared, config, engine, max_lines=max_lines)
        prepared = replace(prepared, ledgers=ledgers)
    findings = ledger.findings + quarantined + admission_findings(prepared, max_lines=max_lines) + closing
    return replace(prepared, findings=tuple([*findings, attrition_finding(prepared)]))


class _Run:
    """The stages' passes over the lab rows: the rows between passes, the context the next stage sees, and what
    :class:`Prepared` takes of the run (``state``: rows read, edges, the stage that stopped it)."""

    def __init__(self, tables: RawTables, config: Config, progress: Progress, engine: Engine,
                 context: Context) -> None:
        self.tables, self.config, self.progress, self.engine, self.context = tables, config, progress, engine, context
        self.events, self.parts = tables.labevents, False
        self.state: dict[str, Any] = {"read": len(tables.labevents)}

    def one_pass(self, segment: Pass) -> None:
        """The stages of one pass: each stage's fit, then its plan (made here before any part is worked on), then
        all their calls on each part in one go, the fits read ahead from their rows on the way."""
        if segment.stages[0].by_admission and not self.parts:  # every stage from here on is per row or admission
            splits = ORDER.splits_ahead(self.tables.admissions, self.config)
            self.events, self.parts = self.engine.partition(self.events, splits), True
        self.progress.step(pass_step(segment.stages), rows=len(self.events))
        plans, stopped = self._plans(segment.stages)
        # The fits read from this pass's rows: their arguments are their options (Fit.early) or known now.
        ahead = () if stopped else segment.ahead
        fits = [(stage.fit, *stage.fit.inputs(None, self._for(stage))[1:]) for stage in ahead]
        chained = self.engine.chain(self.events, [Link(calls=p.calls, counts=p.counts, picks=p.picks, tallies=p.tallies)
                                                  for p in plans], fits) if plans else Chained(links=())
        for plan, linked in zip(plans, chained.links):  # reported stage by stage, as they ran
            _take(plan, linked, self.context.ledger)
        if stopped is not None:
            raise stopped
        self.context = replace(self.context, fitted={**self.context.fitted,
                                                     **{s.name: state for s, state in zip(ahead, chained.fitted)}})
        if self.events is not self.tables.labevents:
            self.engine.release(self.events)  # each pass's rows are read by the next pass only
        self.events = chained.events

    def _for(self, stage: Stage) -> Context:
        return replace(self.context, options=stage.options_in(self.config))

    def _plans(self, stages: tuple[Stage, ...]) -> tuple[list[Plan], StageError | None]:
        """Each stage's fit (unless known), then its plan; a stage that cannot plan stops the pass there."""
        plans = []
        for stage in stages:
            self.context = self._for(stage)
            if stage.fit is not None and stage.name not in self.context.fitted:
                rows, args, kwargs = stage.fit.inputs(self.events, self.context)
                # A fit that reads the rows, within a pass: the stages before it were replayable (stage_pass), and
                # it reads the rows their calls give.
                calls = tuple(call for plan in plans for call in plan.calls)
                fit = stage.fit.replaying(calls) if stage.fit.reads_rows(self.context.options) else stage.fit
                state = self.engine.fit(fit, rows, *args, **kwargs)
                self.context = replace(self.context, fitted={**self.context.fitted, stage.name: state})
            try:
                plans.append(stage.plan(self.context))
            except StageError as error:
                return plans, error
            self.context = plans[-1].context
        return plans, None


def _take(plan: Plan, linked: Linked, ledger: Ledger) -> None:
    """What a stage made, into the ledger in the order its plan says (a step or call that failed raises)."""
    ledger.findings.extend(plan.before)
    for kept in plan.taken:
        ledger.take(kept)
    outcome = Outcome(counts=linked.counts, picks=linked.picks, rows=linked.rows, tallies=linked.tallies,
                      steps=tuple(step for kept in linked.kept if kept is not None for step in kept.steps))
    if plan.counted is not None:
        ledger.findings.extend(plan.counted(outcome))
    for kept in linked.kept:
        if kept is not None:
            ledger.take(kept)
    if linked.error is not None:
        raise linked.error
    if plan.report is not None:
        ledger.findings.extend(plan.report(outcome))
