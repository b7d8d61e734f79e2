"""A run of badpoints: read and check the raw tables, then the declared stages in order.

load -> raw -> the stages of :data:`pipeline.stages.STAGES` (clean, split, encode, scale, fill,
bucket, dedup) -> graph (``build`` only). :func:`prepare` is a loop over the declaration: each stage's fit, then
its plan; the stages up to the next fit that must read their rows work on the rows in one pass of the engine.
A stage that raises :class:`StageError` stops the stages after it (their input
would be corrupt); everything found until then is reported.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from pipeline.stage import Context, Ledger, Order, Outcome, Plan, Stage
from pipeline.stages import STAGES
from pipeline.stages.dedup import SHORT
from pipeline.stages.split import known_splits
from pipeline.stages.encode import Vocabularies
from pipeline.stages.fill import FillValues
from pipeline.stages.scale import ZScoreStats
from pipeline.paths import check_output_dir, claim_output_dir
from pipeline.config import Config
from pipeline.cache import Cache
from pipeline.cache import key_of as cache_key
from pipeline.load import file_sha256, read_blocks
from pipeline.locate import TABLES, locate_tables
from pipeline.engine import PANDAS, Chained, Engine, Link, Linked
from pipeline.parse import (LabRelations, RawResult, RawTables, check_blocks, check_relations, check_stream,
                            keyed_admissions)
from pipeline.progress import NO_PROGRESS, Progress, build_steps, pass_step, validate_steps
from pipeline.quarantine import Quarantine, Step
from pipeline.report import (Finding, InputFile, Report, finding_from_error, finding_from_mask, format_items,
                             summary_finding)
from schemas.checks import CANNOT_RUN_CHECKS
from schemas.raw import LabEvents
from schemas.split import SPLITS
from schemas.errors import StageError, require_validation
from schemas.guard import trusted_chain

ORDER = Order(STAGES, before=(Stage("load", colour="#7f7f7f"),  # reading the files
                              Stage("raw", colour="#8c564b", gives=LabEvents)),  # the raw checks and relations
              after=(Stage("flow", colour="#7f7f7f"),))  # the run as a whole: attrition, admissions in no graph
"""Everything that reports findings, in the report's order: the run's steps around the declared stages."""
STAGE_ORDER = ORDER.index
REASONS = ORDER.reasons
PREPARE = ORDER.prepare
BUILT = ORDER.built

# Checks that mean the run could not happen at all (exit 2), rather than that the data is bad (exit 1).
CANNOT_RUN = CANNOT_RUN_CHECKS

# Quarantine reasons and the check that reports them, as the stages declare them (others: quarantine_raw_error).
REASON_CHECKS = {text: reason.check for text, reason in REASONS.items()}
# Quarantine reasons whose finding also counts the admissions the rows belong to.
PER_ADMISSION = tuple(text for text, reason in REASONS.items() if reason.per_admission)

# Why an admission read from ADMISSIONS is in no graph: the check that reports it, in the order they are decided.
IN_GRAPHS = "in_graphs"
DROPPED = {
    "admission_rejected": "failed a raw check",
    "admission_no_labs": "without any lab row",
    "admission_labs_quarantined": "whose every lab row was quarantined",
    "admission_below_min_timesteps": "with fewer timesteps than [graph] min_timesteps",
}
UNSPLIT = "unsplit"  # admissions rejected before the split have none


def steps(config: Config, *, build: bool = False) -> tuple[str, ...]:
    """The progress steps a run with ``config`` reports, in order (``build``: a build's, else validate's)."""
    return (build_steps if build else validate_steps)(ORDER, config)


@dataclass(frozen=True)
class Prepared:
    """What the stages made: edge rows, encoded node tables, fitted state, quarantine and ledger."""

    edges: pd.DataFrame | None = None
    admissions: pd.DataFrame | None = None
    labitems: pd.DataFrame | None = None
    splits: pd.DataFrame | None = None
    fitted: Mapping[str, Any] = field(default_factory=dict)  # by stage name: what each stage's Fit learned
    quarantine: Quarantine = field(default_factory=Quarantine)
    steps: tuple[Step, ...] = ()
    findings: tuple[Finding, ...] = ()
    stopped_at: str | None = None
    read: int = 0
    fates: pd.DataFrame | None = None  # per ADMISSIONS line: HADM_ID, SPLIT, FATE (in_graphs or a DROPPED check)

    @property
    def vocabularies(self) -> Vocabularies | None:
        return self.fitted.get("encode")

    @property
    def stats(self) -> ZScoreStats | None:
        return self.fitted.get("scale")

    @property
    def fill_values(self) -> FillValues | None:
        return self.fitted.get("fill")

    def saved_state(self) -> dict[str, Any]:
        """The fitted state as JSON, by the name each stage's Fit saves it under (``stats.json``)."""
        return {stage.fit.saved_as: self.fitted[stage.name].as_json() for stage in STAGES
                if stage.fit is not None and stage.name in self.fitted}

    def ledger(self) -> dict[str, int]:
        """LABEVENTS rows read = kept + quarantined + deduplicated."""
        quarantined = self.quarantine.count("LABEVENTS")
        merged = sum(step.merged for step in self.steps if step.table == "LABEVENTS")
        kept = 0 if self.edges is None else len(self.edges)
        return {"read": self.read, "kept": kept, "quarantined": quarantined, "deduplicated": merged}

    def admission_ledger(self) -> dict | None:
        """ADMISSIONS read = in graphs + dropped, per split and per reason (None when the stages did not finish)."""
        if self.fates is None:
            return None
        fates = self.fates

        def count(rows: pd.DataFrame) -> dict:
            fate = rows["FATE"].value_counts()
            return {"read": len(rows), IN_GRAPHS: int(fate.get(IN_GRAPHS, 0)),
                    "dropped": int(len(rows) - fate.get(IN_GRAPHS, 0)),
                    "dropped_by": {check: int(fate.get(check, 0)) for check in DROPPED}}

        splits = [name for name in (*SPLITS, UNSPLIT) if name != UNSPLIT or (fates["SPLIT"] == UNSPLIT).any()]
        emptied = fates.loc[fates["FATE"] == "admission_labs_quarantined", "STAGE"].value_counts()
        # Every admission in no graph, named (the findings list the first few): source line, HADM_ID, split, the
        # reason and, for one whose lab rows were all quarantined, the stage that took the last of them.
        dropped = fates[fates["FATE"] != IN_GRAPHS].rename_axis("line").reset_index().rename(
            columns={"SPLIT": "split", "FATE": "reason", "STAGE": "stage"})[["line", "HADM_ID", "split", "reason",
                                                                            "stage"]]
        return {**count(fates), "splits": {name: count(fates[fates["SPLIT"] == name]) for name in splits},
                "labs_quarantined_at": {stage: int(n) for stage, n in sorted(emptied.items(),
                                                                            key=lambda kv: STAGE_ORDER[kv[0]])},
                "dropped_admissions": dropped.astype(object).where(dropped.notna(), None).to_dict("records")}

    def attrition(self) -> dict:
        """The ledgers and every step's rows in and out, as plain JSON."""
        admissions = self.admission_ledger()
        return {
            "LABEVENTS": self.ledger(),
            **({"ADMISSIONS": admissions} if admissions is not None else {}),
            "stopped_at": self.stopped_at,
            "steps": [dict(table=s.table, stage=s.stage, step=s.step, rows_in=s.rows_in, rows_out=s.rows_out,
                           quarantined=s.quarantined, merged=s.merged, clipped=s.clipped) for s in self.steps],
        }


@dataclass(frozen=True)
class Validation:
    report: Report
    tables: RawTables
    prepared: Prepared
    cached: bool = False

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def validate(data_dir: Path, config: Config, *, show_values: bool = False, cache: Cache | None = None,
             reuse_report: bool = True, progress: Progress | None = None,
             engine: Engine | None = None) -> Validation:
    """Read the raw tables, run every raw check and every stage, and collect all findings.

    With a ``cache``, tables whose file, settings and checking code are unchanged are taken from it
    already parsed and checked; with ``reuse_report`` too, a run whose inputs and config are all
    unchanged returns the earlier report (its ``tables`` and ``prepared`` are then empty). An ``engine``
    (``pipeline.engine.parts_engine`` or ``dask_engine``) routes LABEVENTS' checked blocks into parts and runs its
    stages part by part, here, in worker processes or on a Dask cluster, with the same result.
    """
    require_validation()
    progress = progress or NO_PROGRESS
    located, problems = locate_tables(Path(data_dir))
    digests = _digests(located, problems) if cache else {}
    report_key = None
    if cache is not None and reuse_report and not problems:
        report_key = cache_key("report", digests, {t: p.name.lower() for t, p in located.items()},
                               config.as_json(), show_values)
        cached = cache.get_report(report_key, {t: str(p) for t, p in located.items()})
        if cached is not None:
            cached.stages = ORDER.colours
            return Validation(report=cached, tables=RawTables(), prepared=Prepared(), cached=True)

    settings = dict(valuenum_abs_bound=config.raw.valuenum_abs_bound, severity=config.severity,
                    show_values=show_values, max_lines=config.report.max_lines)
    limits = dict(max_expanded_bytes=config.load.max_expanded_bytes,
                  max_expansion_ratio=config.load.max_expansion_ratio, max_field_chars=config.load.max_field_chars)

    def counted(blocks):
        """A table's blocks, the running step counting their rows; ``check TABLE`` (the blocks' checks combined
        into findings) starts after the last block, so ``read TABLE`` times reading and checking the blocks."""
        rows = 0
        for block in blocks:
            rows += len(block)
            progress.rows(rows)
            yield block
        progress.step(f"check {blocks.table}", rows=blocks.rows)

    # Checked tables are stored in the cache behind the run, while the next table and the stages go on.
    with cache.writing_behind() if cache else contextlib.nullcontext() as store:
        checked, inputs = {}, []
        for table, path in located.items():
            # The file name says how the bytes are read (.gz or not): the same bytes under another name differ.
            key = cache_key("table", table, digests.get(table), path.name.lower().endswith(".gz"), settings,
                            limits) if cache else None
            streams = table == "LABEVENTS" and hasattr(engine, "router")  # into the engine's parts, never whole
            result = cache.get_table(table, key) if cache and not streams else None
            if result is not None:
                sha256 = digests[table]
                progress.step(f"cached {table}", rows=len(result.tables.of(table)))
            else:
                progress.step(f"read {table}")
                # Read and checked block by block: the whole text table never exists, only the typed one (with an
                # engine that keeps parts, not even that: LABEVENTS' blocks go straight into its parts).
                text = read_blocks(path, table, **limits)
                try:
                    if streams:
                        result = check_stream(counted(text), _router(engine, checked, config),
                                              _relations(checked, config), engine=engine, **settings)
                        key = None  # the parts are this run's: the checked table is not cached
                    else:
                        result = check_blocks(table, counted(text), engine=engine, **settings)
                except StageError as problem:
                    problems.append(problem)
                    continue
                if text.problems:  # rows left out while the rest was read: reported, and cached, with the checks
                    result = replace(result, findings=[*map(finding_from_error, text.problems), *result.findings])
                sha256 = text.sha256
                if store is not None and key is not None and sha256 == digests[table]:
                    store(table, key, result)
            checked[table] = result
            inputs.append(InputFile(table=table, path=str(path), sha256=sha256, rows=len(result.tables.of(table))))
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
                            prepared=prepared)
    if report_key is not None and validation.exit_code != 2:
        cache.put_report(report_key, validation.report)
    return validation


def _typed(checked: Mapping[str, RawResult], table: str) -> pd.DataFrame | None:
    return checked[table].tables.of(table) if table in checked else None


def _router(engine: Engine, checked: Mapping[str, RawResult], config: Config) -> Any:
    """Where LABEVENTS' checked blocks go: the engine's parts, by the split each admission will get."""
    admissions = _typed(checked, "ADMISSIONS")
    splits = None if admissions is None else known_splits(
        keyed_admissions(admissions, severity=config.severity), train=config.split.train, val=config.split.val,
        test=config.split.test, seed=config.split.seed)
    return engine.router(splits)


def _relations(checked: Mapping[str, RawResult], config: Config) -> LabRelations:
    return LabRelations.of(_typed(checked, "ADMISSIONS"), _typed(checked, "D_LABITEMS"),
                           config.raw.stay_tolerance_hours)


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


def prepare(tables: RawTables, config: Config, *, vocabularies: Vocabularies | None = None,
            stats: ZScoreStats | None = None, progress: Progress | None = None,
            engine: Engine | None = None) -> Prepared:
    """Run the declared stages (clean, split, encode, scale, fill, bucket, dedup) on the typed raw tables.

    ``vocabularies`` and ``stats`` saved by an earlier run (``from_json``) are reused instead of fitted,
    so new data is transformed with exactly what training saw. The ``engine`` runs the stages that work
    by admission on parts, and their fits where the parts are (in this process by default; see ``pipeline.engine``).
    """
    if tables.admissions is None or tables.labitems is None or tables.labevents is None:
        return Prepared()
    progress = progress or NO_PROGRESS
    engine = engine or PANDAS
    ledger = Ledger(warn_removed_fraction=config.filters.warn_removed_fraction,
                    error_removed_fraction=config.filters.error_removed_fraction)
    given = _given(vocabularies, stats)
    context = Context(tables=tables, engine=engine, ledger=ledger, max_lines=config.report.max_lines, fitted=given)
    events, state, parts = tables.labevents, {"read": len(tables.labevents)}, False
    splitting = dict(train=config.split.train, val=config.split.val, test=config.split.test, seed=config.split.seed)
    with trusted_chain():  # each stage's output goes straight to the next: its guard ran already
        try:
            for segment in ORDER.passes(config, given):
                if segment.stages[0].by_admission and not parts:  # every stage from here on is per row or admission
                    events, parts = engine.partition(events, known_splits(tables.admissions, **splitting)), True
                progress.step(pass_step(segment.stages), rows=len(events))
                plans, stopped = [], None
                for stage in segment.stages:  # each stage's fit, then its plan, made here before any part is worked on
                    context = replace(context, options=stage.options_in(config))
                    if stage.fit is not None and stage.name not in context.fitted:
                        rows, args, kwargs = stage.fit.inputs(events, context)
                        context = replace(context, fitted={**context.fitted,
                                                           stage.name: engine.fit(stage.fit, rows, *args, **kwargs)})
                    try:
                        plans.append(stage.plan(context))
                    except StageError as error:
                        stopped = error
                        break
                    context = plans[-1].context
                # The fits read from this pass's rows: their arguments are their options (Fit.early) or known now.
                ahead = () if stopped else segment.ahead
                fits = [(stage.fit, *stage.fit.inputs(None, replace(context, options=stage.options_in(config)))[1:])
                        for stage in ahead]
                chained = engine.chain(events, [Link(calls=p.calls, counts=p.counts, picks=p.picks) for p in plans],
                                       fits) if plans else Chained(links=())
                for plan, linked in zip(plans, chained.links):  # reported stage by stage, as they ran
                    _take(plan, linked, ledger)
                if stopped is not None:
                    raise stopped
                context = replace(context, fitted={**context.fitted,
                                                   **{s.name: fitted for s, fitted in zip(ahead, chained.fitted)}})
                if events is not tables.labevents:
                    engine.release(events)  # each pass's rows are read by the next pass only
                events = chained.events
                chained = linked = None  # what the stages picked for their findings (rows coded 0, |z| rows) goes
            state["edges"] = engine.result(events)
        except StageError as error:
            ledger.findings.append(finding_from_error(error))
            state["stopped_at"] = error.stage
    stopped_at = state.get("stopped_at")  # states fitted ahead for stages that never ran are not theirs to keep
    fitted = {name: fitted for name, fitted in context.fitted.items()
              if stopped_at is None or name in given or STAGE_ORDER[name] <= STAGE_ORDER[stopped_at]}
    prepared = Prepared(admissions=context.admissions, labitems=context.labitems, splits=context.splits,
                        fitted=fitted, quarantine=Quarantine(tuple(ledger.quarantines)), steps=tuple(ledger.steps),
                        **state)
    # The quarantine's findings first: the fates reuse its summary (one read of the records, not two).
    quarantined = _quarantine_findings(prepared.quarantine, config, names=ledger.names)
    if prepared.edges is not None:
        prepared = Prepared(**{**prepared.__dict__, "fates": admission_fates(tables, prepared, engine=engine)})
    findings = ledger.findings + quarantined + _admission_findings(prepared, config) + [_attrition(prepared)]
    return Prepared(**{**prepared.__dict__, "findings": tuple(findings)})


def _take(plan: Plan, linked: Linked, ledger: Ledger) -> None:
    """What a stage made, into the ledger in the order its plan says (a step or call that failed raises)."""
    ledger.findings.extend(plan.before)
    for kept in plan.taken:
        ledger.take(kept)
    outcome = Outcome(counts=linked.counts, picks=linked.picks, rows=linked.rows,
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


def _given(*states: Any) -> dict[str, Any]:
    """States saved by an earlier run, by the stage whose Fit learns their kind."""
    return {stage.name: state for state in states if state is not None
            for stage in PREPARE if stage.fit is not None and isinstance(state, stage.fit.state)}


def admission_fates(tables: RawTables, prepared: Prepared, *, engine: Engine = PANDAS) -> pd.DataFrame:
    """Per ADMISSIONS row (index = source line): HADM_ID, SPLIT and FATE, ``in_graphs`` or the check that says
    why it is in no graph; for admissions whose labs were all quarantined, STAGE: the stage that took the last.

    In graphs means having an edge row: the graph stage makes one admission node per HADM_ID among the edges.
    """
    admissions = tables.admissions
    hadm = admissions["HADM_ID"]
    split = hadm.map(prepared.splits.set_index("HADM_ID")["SPLIT"]).astype("object")
    rejected = admissions["REJECT"].notna() if "REJECT" in admissions else pd.Series(False, index=admissions.index)
    split = split.where(~rejected & split.notna(), UNSPLIT)
    lab_rows = engine.rows(tables.labevents, _admissions_of, columns=["HADM_ID"])["HADM_ID"].dropna().unique()
    edges = engine.rows(prepared.edges, _admissions_of, columns=["HADM_ID"])["HADM_ID"].unique()
    reasons = prepared.quarantine.by_reason()
    short = np.concatenate([np.array([], dtype="int64"), *(s.admissions for (table, _, reason), s in reasons.items()
                                                          if table == "LABEVENTS" and reason == SHORT)])
    fate = np.select([rejected.to_numpy(), hadm.isin(edges).to_numpy(), ~hadm.isin(lab_rows).to_numpy(),
                      hadm.isin(short).to_numpy()],
                     ["admission_rejected", IN_GRAPHS, "admission_no_labs", "admission_below_min_timesteps"],
                     default="admission_labs_quarantined")
    # The stage that took an admission's last lab rows: the latest stage that quarantined any of them (read only
    # when some admission's labs were all quarantined: most runs have none, and millions of records).
    quarantined = hadm[fate == "admission_labs_quarantined"].dropna().to_numpy("int64")
    latest = pd.Series(dtype="int64")  # folded frame by frame: one number per admission, not per frame
    for records in prepared.quarantine.frames(["TABLE", "STAGE", "HADM_ID"]) if len(quarantined) else ():
        records = records[(records["TABLE"] == "LABEVENTS") & records["HADM_ID"].isin(quarantined)]
        order = records["STAGE"].map(STAGE_ORDER).groupby(records["HADM_ID"]).max()
        latest = order if latest.empty else pd.concat([latest, order]).groupby(level=0).max()
    last = latest.map({n: stage for stage, n in STAGE_ORDER.items()})
    stage = hadm.map(last).where(fate == "admission_labs_quarantined")
    return pd.DataFrame({"HADM_ID": hadm.astype("Int64"), "SPLIT": split.astype("str"), "FATE": fate,
                         "STAGE": stage.astype("object")}, index=admissions.index)


def _admissions_of(labevents: pd.DataFrame) -> pd.DataFrame:
    """The first row of each admission (HADM_ID) among ``labevents``."""
    return labevents[~labevents["HADM_ID"].duplicated()]


def _admission_findings(prepared: Prepared, config: Config) -> list[Finding]:
    """One finding per reason an admission is in no graph: its count per split and its first HADM_IDs."""
    if prepared.fates is None:
        return []
    findings = []
    cap = config.report.max_lines
    for check, what in DROPPED.items():
        rows = prepared.fates[prepared.fates["FATE"] == check]
        if rows.empty:
            continue
        per_split = rows["SPLIT"].value_counts()
        splits = ", ".join(f"{name} {int(per_split.get(name, 0))}" for name in (*SPLITS, UNSPLIT)
                           if name != UNSPLIT or name in per_split)
        stages = ""
        if check == "admission_labs_quarantined":
            taken = rows["STAGE"].value_counts()
            stages = "; last rows taken at " + ", ".join(
                f"{stage} {int(taken[stage])}" for stage in sorted(taken.index, key=STAGE_ORDER.get))
        ids = rows["HADM_ID"].dropna().astype("int64").sort_values()
        shown = ", ".join(map(str, ids[:cap])) + (f" (+{len(ids) - cap} more, every one in the report's admissions "
                                                  f"ledger: attrition.ADMISSIONS.dropped_admissions)"
                                                  if len(ids) > cap else "")
        noun = "admission" if len(rows) == 1 else "admissions"
        findings.append(summary_finding(
            stage="flow", check=check, table="ADMISSIONS", column=None, count=len(rows),
            lines=[int(line) for line in rows.index[:cap]],
            message=f"{len(rows)} {noun} {what}, in no graph ({splits}){stages}; HADM_ID {shown or '-'}"))
    return findings


def _quarantine_findings(quarantine: Quarantine, config: Config, *, names: dict[int, str] | None = None
                         ) -> list[Finding]:
    """One finding per quarantine reason, with the first source lines (LABEVENTS rows); items named."""
    findings = []
    for (table, stage, reason), rows in quarantine.by_reason(lines=config.report.max_lines).items():
        check = REASON_CHECKS.get(reason, "quarantine_raw_error")
        items = ""
        declared = REASONS.get(reason)
        if declared is not None and declared.per_item:
            items = ": items " + format_items(rows.items, names=names, limit=config.report.max_lines)
        if declared is not None and declared.per_admission:
            n = len(rows.admissions)
            items = f", in {n} admission{'s' if n != 1 else ''}"
        failed = pd.Series(True, index=rows.lines)
        findings.append(finding_from_mask(stage=stage, table=table, check=check, column=None, failed=failed,
                                          verb="quarantined:", what=f"{reason}{items}",
                                          max_lines=config.report.max_lines, count=rows.rows))
    return [f for f in findings if f is not None]


def _attrition(prepared: Prepared) -> Finding:
    ledger = prepared.ledger()
    funnel = " -> ".join(f"{s.stage}/{s.step}: {s.rows_out}" for s in prepared.steps
                         if s.table == "LABEVENTS" and (s.quarantined or s.merged))
    sizes = ""
    admissions = prepared.admission_ledger()
    if admissions is not None:
        splits = admissions["splits"]
        sizes = ("; admissions in graphs per split: "
                 + ", ".join(f"{name} {splits[name][IN_GRAPHS]}" for name in SPLITS)
                 + f"; ADMISSIONS read {admissions['read']} = in graphs {admissions[IN_GRAPHS]} + dropped "
                 + f"{admissions['dropped']}"
                 + "".join(f" ({n} {check})" for check, n in admissions["dropped_by"].items() if n))
    stopped = f"; stopped at stage {prepared.stopped_at}" if prepared.stopped_at else ""
    return summary_finding(
        stage="flow", check="attrition", table="LABEVENTS", column=None, count=ledger["read"],
        message=f"read {ledger['read']} = kept {ledger['kept']} + quarantined {ledger['quarantined']} + "
                f"deduplicated {ledger['deduplicated']}{stopped}{sizes}; funnel: {funnel or 'no rows removed'}")


@dataclass(frozen=True)
class Build:
    """A build's report, and where its outputs went (None when errors kept it from writing)."""

    validation: Validation
    report: Report
    out_dir: Path | None
    graphs: tuple[dict, ...] = ()  # per graph: split, batch, admissions, labitems, edges, memory

    @property
    def exit_code(self) -> int:
        return self.report.exit_code  # the build's report holds the validation's findings and the graphs'


def build(data_dir: Path, out_dir: Path, config: Config, *, show_values: bool = False,
          cache: Cache | None = None, progress: Progress | None = None, engine: Engine | None = None) -> Build:
    """Validate, run every stage, build and guard the graphs, and write them only if nothing is an error.

    ``cache`` serves the raw-checked tables as in :func:`validate`; the stages always run. The output folder
    is checked and held before any work (:func:`claim_output_dir`): a second build into it is refused.
    """
    out = check_output_dir(out_dir, data_dir)
    with claim_output_dir(out):
        return _build_into(out, data_dir, config, show_values=show_values, cache=cache, progress=progress,
                           engine=engine)


def _build_into(out: Path, data_dir: Path, config: Config, *, show_values: bool, cache: Cache | None,
                progress: Progress | None, engine: Engine | None) -> Build:
    from pipeline import write  # torch and PyG load only when graphs are built

    progress = progress or NO_PROGRESS
    building, guarding = (step for stage in BUILT for step in stage.steps)
    validation = validate(data_dir, config, show_values=show_values, cache=cache, reuse_report=False, engine=engine,
                          progress=progress)
    report = validation.report
    prepared = validation.prepared
    if validation.exit_code or prepared.edges is None:
        return Build(validation=validation, report=report, out_dir=None)

    progress.step(building, rows=len(prepared.edges))
    # Graph files are staged in OUT_DIR as they are made (the previous build stays as it was); a build that finds
    # errors, or fails, drops them.
    staged = write.StagedBuild(out)
    try:
        built = _graphs_into(staged, validation, config, progress, guarding=guarding, engine=engine or PANDAS)
    except BaseException:
        staged.abandon()
        raise
    if built.out_dir is None:
        staged.abandon()
    return built


@dataclass(frozen=True)
class MadeGraph:
    """A graph built, guarded, serialised and staged (where the edge rows are: this process, or a Dask worker):
    what the build keeps of it."""

    file: Any  # pipeline.write.GraphFile, without its bytes
    staged: bool | OSError  # whether its file was staged (pipeline.write.stage_file), or why it could not be
    labitems: int
    memory: dict[str, int]
    findings: tuple[Finding, ...]
    node: np.ndarray
    hadm: np.ndarray


def made_graphs(parts: Iterable[pd.DataFrame], admissions: pd.DataFrame, labitems: pd.DataFrame, *, out_dir: Path,
                limits: Any, batch_size: int, labels: bool, hidden: int, layers: int,
                start: Mapping[str, int] | None = None) -> Iterator[MadeGraph]:
    """The graphs of edge rows in parts (:func:`pipeline.stages.graph.stream_graphs`) each built, guarded, sized,
    serialised and staged in ``out_dir`` at once, so only what :class:`MadeGraph` keeps stays."""
    from pipeline import write
    from pipeline.stages import graph

    for g in graph.stream_graphs(parts, admissions, labitems, batch_size=batch_size, labels=labels, start=start):
        file = write.graph_file(g)
        try:
            staged: bool | OSError = write.stage_file(out_dir, file.path, file.data)
        except OSError as problem:
            staged = problem
        yield MadeGraph(file=replace(file, data=None), staged=staged, labitems=int(g.data["labitem"].num_nodes),
                        memory=graph.memory_estimate(g.data, hidden=hidden, layers=layers),
                        findings=tuple(finding_from_error(problem) for problem in graph.check_graphs([g], limits)),
                        node=g.data["admission"].node_id.numpy(), hadm=g.data["admission"].hadm_id.numpy())
        if not isinstance(staged, bool):
            return


def _graphs_into(staged: Any, validation: Validation, config: Config, progress: Progress, *, guarding: str,
                 engine: Engine = PANDAS) -> Build:
    """The graphs of a validated run built, guarded and (unless anything is an error) written with the rest."""
    from pipeline import html, write  # matplotlib loads only when graphs are built
    from pipeline.stages import graph

    out, report, prepared = staged.out_dir, validation.report, validation.prepared
    limits = graph.graph_limits(prepared.vocabularies, prepared.admissions, max_timestep=config.bucket.max_timestep)
    # Built, guarded, serialised and staged a few batches at a time, from the edge rows' parts (only the columns
    # graphs read), on the engine's workers (here without any): what stays is each graph's hash and summary, never
    # all the graphs' tensors or bytes.
    made = engine.in_batches(made_graphs, prepared.edges, prepared.admissions, prepared.labitems,
                             batch_size=config.graph.batch_size, columns=graph.graph_columns(prepared.edges), sees=out,
                             out_dir=out, limits=limits, labels=config.graph.labels, hidden=config.graph.hidden,
                             layers=config.graph.layers)
    findings, memory, files, summaries, nodes_of = [], {}, [], [], []
    for g in made:
        staged.took(g.file.path, g.staged)  # a file that could not be staged: the staged files go, OutputError
        findings += g.findings
        memory[g.file.where] = g.memory
        summaries.append({"split": g.file.split, "batch": g.file.batch, "admissions": g.file.admissions,
                          "labitems": g.labitems, "edges": g.file.edges, "memory": g.memory})
        nodes_of.append((g.file.split, g.file.batch, g.node, g.hadm))
        files.append(g.file)
    summaries = tuple(summaries)
    progress.step(guarding, rows=len(summaries), unit="graphs")
    budget = config.graph.memory_budget_mb * 2**20
    over = {where: m["total"] for where, m in memory.items() if m["total"] > budget}
    if over:
        largest = max(over, key=over.get)
        findings.append(summary_finding(
            stage="graph", check="graph_memory", table=None, column=None, count=len(over),
            message=f"{len(over)} batch(es) above {config.graph.memory_budget_mb:g} MB, largest {largest} at "
                    f"{over[largest] / 2**20:.1f} MB (hidden {config.graph.hidden}, {config.graph.layers} layers)"))
    edges_in_graphs = sum(g["edges"] for g in summaries)
    ledger = prepared.ledger()
    if edges_in_graphs != ledger["kept"]:
        raise RuntimeError(f"graphs hold {edges_in_graphs} edges but {ledger['kept']} rows were kept")
    admissions = prepared.admission_ledger()
    nodes = {name: sum(g["admissions"] for g in summaries if g["split"] == name) for name in SPLITS}
    counted = {name: admissions["splits"][name][IN_GRAPHS] for name in SPLITS}
    if nodes != counted:
        raise RuntimeError(f"graphs hold admissions {nodes} per split but the ledger counted {counted}")
    # A report of its own: the validation's findings (severities applied) and the graphs', in a new list.
    graph_findings = Report(findings=findings).with_severities(dict(config.severity)).findings
    report = Report(inputs=list(report.inputs), findings=[*report.findings, *graph_findings],
                    overrides=dict(report.overrides), attrition=report.attrition, stages=report.stages)
    if report.exit_code:
        progress.end()
        return Build(validation=validation, report=report, out_dir=None, graphs=summaries)

    index = pd.DataFrame({
        "split": np.concatenate([np.repeat(split, len(node)) for split, _, node, _ in nodes_of]),
        "batch": np.concatenate([np.repeat(batch, len(node)) for _, batch, node, _ in nodes_of]),
        "node": np.concatenate([node for _, _, node, _ in nodes_of]),
        "HADM_ID": np.concatenate([hadm for _, _, _, hadm in nodes_of]),
    }).astype({"split": "str", "batch": "int64", "node": "int64", "HADM_ID": "int64"})
    splits = {name: {"admissions": int((index["split"] == name).sum()),
                     "graphs": sum(g["split"] == name for g in summaries),
                     "edges": sum(g["edges"] for g in summaries if g["split"] == name)}
              for name in ("train", "val", "test")}
    built = Build(validation=validation, report=report, out_dir=out, graphs=summaries)
    progress.step("report")
    # quarantine.parquet is written (Arrow's work, mostly free of the GIL) while the HTML report is drawn.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quarantine") as aside:
        writing = aside.submit(write.stage_quarantine, prepared.quarantine, staged,
                               where=lambda function, *args: engine.call(function, *args, sees=out))
        # OUT_DIR/report.html, in the manifest; no raw values even with show_values
        page = html.render(built, config, engine=engine)
        quarantine = writing.result()
    outputs = write.build_outputs(
        graphs=files, limits=limits, config=config.as_json(),
        inputs=[{"table": i.table, "sha256": i.sha256, "rows": i.rows, "file": Path(i.path).name}
                for i in report.inputs],
        fitted=prepared.saved_state(), quarantine=quarantine, index=index, report=report.as_json(),
        accounting={"LABEVENTS": ledger, "ADMISSIONS": admissions}, splits=splits, memory=memory,
        report_html=page.encode("utf-8"), features=graph.feature_columns(prepared.edges, prepared.admissions))
    progress.step("write", rows=len(outputs.manifest["outputs"]), unit="files")
    write.write_build(out, outputs, staged)
    progress.end()
    return built
