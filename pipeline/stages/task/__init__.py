"""Task stage: what the model is asked, and when; the features read only what was charted before the question.

A task (``[task]``, or ``--task NAME|FILE``) asks one question per admission at its prediction time (``admit +
24h``, ``discharge``), answers it from a label window that starts at or after the prediction time plus a gap, and
lets the features read the observation window, which ends at or before it. Before any row is read, the windows'
geometry is checked (:func:`geometry_findings`: a label window the features can see refuses the run). Then, from
ADMISSIONS alone (:mod:`.cohort`): the cohort criteria in order (each decided at a known time: one decided after
the prediction time is selection on the future), those who died or left by the prediction time, each admission's
label and whether it is censored. On the rows (:mod:`.rows`): every lab row of an admission outside the cohort, and
every row charted outside its admission's observation window, is quarantined, so encode's vocabularies, scale's
z-score fit and every later stage see only what the model may read. ADMISSIONS is handed on with each admission's
PREDICTION_TIME, LABEL and COHORT: the graphs' ``admission.y`` and ``labels.parquet`` read them. Once every
admission's fate is known, the task's ledger counts each admission read once (:mod:`.findings`).

The default task, next_labs (the lab items measured at each admission's last timestep), asks nothing of the rows:
the stage is idle and the graph stage makes its labels, as it always did.

The stage is this package: its options and built-in tasks (``options``), the cohort (``cohort``), its work on the
rows (``rows``) and its findings (``findings``); here, its plan and declaration.
"""

from __future__ import annotations

from html import escape

import pandas as pd

from pipeline.kernel.calls import Call, Fit
from pipeline.kernel.finding import Finding
from pipeline.kernel.stage import Context, Plan, Shown, Stage
from pipeline.reporting import page
from pipeline.reporting.findings import summary_finding
from pipeline.stages.task.cohort import NAME, Cohort, geometry_failures, task_cohort
from pipeline.stages.task.findings import (charted_after_finding, class_findings, closing, criteria_findings,
                                           feature_findings, listed)
from pipeline.stages.task.labs import (TaskResults, add_results, count_results, fit_inputs, fit_results,
                                       reads_results, results_from_counts)
from pipeline.stages.task.options import LABELS, PRESETS, Options
from pipeline.stages.task.rows import REASONS, WINDOW_COLUMNS, charted_after, observed_admissions, observed_rows
from schemas.errors import StageError
from schemas.raw import ADMISSIONS
from schemas.split import SplitEvents
from schemas.task import COHORT, LABEL, PREDICTION_TIME, TaskEvents
from schemas.windows import geometry_problems

__all__ = ["LABELS", "NAME", "PRESETS", "STAGE", "Cohort", "Options", "charted_after", "charted_after_finding",
           "observed_rows", "task_cohort", "task_labels"]


def geometry_findings(options: Options) -> list[Finding]:
    """What the task's windows get wrong for every admission, found from the config alone (the stage's
    :attr:`Stage.checks_options`): the run refuses the task before it reads any data."""
    windows = options.windows()
    problems = geometry_problems(windows) if windows is not None else []
    return [summary_finding(stage=NAME, check="task_window_geometry", table=None, column=None, count=len(problems),
                            message=f"task {options.name!r}: " + "; ".join(problems))] if problems else []


def _geometry_per_admission(cohort: Cohort, gap: float) -> None:
    """The admissions whose own windows fail the geometry the config alone could not tell: one error naming them."""
    kept = cohort.kept
    failing = kept[geometry_failures(kept, gap)]
    if len(failing):
        raise StageError(stage=NAME, side="input", check="task_window_geometry", column=PREDICTION_TIME,
                         count=len(failing), failure_cases=failing.rename_axis("line").reset_index()[["line"]],
                         table="ADMISSIONS",
                         detail=f"{len(failing)} admissions' label windows start before their prediction time plus "
                                f"the gap, or their observation windows end after it: HADM_ID "
                                f"{listed(failing['HADM_ID'])}",
                         advice="Anchor both windows on the prediction time ('prediction + 24h'), or choose points "
                                "whose order holds for every stay")


def plan(context: Context) -> Plan:
    """The stage in flow: the cohort and labels from ADMISSIONS (with SPLIT), then every lab row outside the
    cohort or its observation window set aside; ADMISSIONS handed on with PREDICTION_TIME, LABEL and COHORT."""
    options, admissions = context.options, context.table(ADMISSIONS)
    cohort = task_cohort(admissions, options, context.fitted.get(NAME))
    _geometry_per_admission(cohort, options.windows().gap)
    handed = admissions.assign(**{column: cohort.frame[column] for column in (PREDICTION_TIME, LABEL, COHORT)})
    before = (*criteria_findings(cohort, admissions),
              *feature_findings(options, context.settings.graph.admission_features))
    return Plan(context=context.with_tables(**{ADMISSIONS: handed}), before=before,
                calls=(Call(observed_rows, (cohort.frame[WINDOW_COLUMNS],)),),
                picks=(Call(observed_admissions),),
                report=lambda outcome: class_findings(cohort, admissions, outcome.picks[0], options))


def summary(shown: Shown) -> list[tuple[str, str]]:
    """The task's line of the terminal summary: what it asks, and the labelled admissions per split."""
    ledger = getattr(shown.prepared, "ledgers", {}).get(NAME)
    if ledger is None:
        return []
    splits = ", ".join(f"{name} {s['admissions']} ({s['positives']} positive)" for name, s in ledger["splits"].items())
    return [("task", f"{ledger['task']} ({ledger['label']} at {ledger['prediction_time']}): of {ledger['read']} "
                     f"admissions, {ledger['labelled']} labelled: {splits}")]


def task_labels(admissions: pd.DataFrame, splits: pd.DataFrame, hadm: pd.Series, split: pd.Series
                ) -> pd.DataFrame | None:
    """A task's label of each admission ``hadm`` (those a build holds, with their ``split`` as it names them), as
    ``labels.parquet`` holds them: its subject (the split's group: SUBJECT_ID, or HADM_ID without one), prediction
    time, label and split; None without a task (next_labs' labels are the graphs' own)."""
    if LABEL not in admissions:
        return None
    held = hadm.to_numpy("int64")
    asked = admissions.set_index("HADM_ID").loc[held]
    group = splits.set_index("HADM_ID")["GROUP"].loc[held]
    return pd.DataFrame({"subject_id": group.to_numpy("int64"), "prediction_time": asked[PREDICTION_TIME].to_numpy(),
                         "boolean_value": asked[LABEL].astype(bool).to_numpy(), "split": split.to_numpy()})


def sections(shown: Shown) -> list[str]:
    """The task's section of the HTML report: what it asks, its ledger step by step, and its labels per split."""
    ledger = getattr(shown.prepared, "ledgers", {}).get(NAME)
    if ledger is None:
        return []
    steps = page.table(["admissions left out", "removed"], [[step["step"], page.n(step["removed"])]
                                                            for step in ledger["steps"]], numeric={1})
    splits = page.table(["split", "labelled", "positive", "share"], [
        [name, page.n(s["admissions"]), page.n(s["positives"]),
         f"{s['positives'] / s['admissions']:.1%}" if s["admissions"] else "-"] for name, s in ledger["splits"].items()],
        numeric={1, 2, 3})
    return [f'<section id="task"><h2>Task: {escape(ledger["task"])}</h2><p>{escape(ledger["label"])}, asked at '
            f'{escape(ledger["prediction_time"])}: of {page.n(ledger["read"])} admissions read, '
            f'{page.n(ledger["labelled"])} labelled in the graphs. The features read only the lab rows charted by '
            f'each admission\'s prediction time.</p>{steps}{splits}</section>']


STAGE = Stage(NAME, colour="#c5b0d5", plan=plan, options=Options, takes=SplitEvents, gives=TaskEvents,
              fit=Fit(whole=fit_results, partial=count_results, combine=add_results, finish=results_from_counts,
                      inputs=fit_inputs, rows=reads_results, state=TaskResults, saved_as="task"),
              reasons=REASONS, by_admission=True, filters=True, writes=(), idle=lambda options: options.idle,
              checks_options=geometry_findings, closes=closing, summary=summary, sections=sections)
