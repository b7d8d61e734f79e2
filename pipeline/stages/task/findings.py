"""What the task stage finds: of its cohort's criteria (one that removes none, or all, or decides after the
prediction time), of the features a build chose (one that defines the label, or is known after the prediction
time), of what the model sees per class, and, once every admission's fate is known, the task's own ledger (each
admission read counted once), its prevalence per split and the splits with too few labels of a kind."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from pipeline.kernel.finding import Finding
from pipeline.ledgers import IN_GRAPHS
from pipeline.reporting.findings import LISTED, summary_finding
from pipeline.stages.task.cohort import CENSORED, LEFT, NAME, Cohort, criterion_keys
from pipeline.stages.task.options import Options
from pipeline.stages.task.rows import charted_after
from schemas.raw import KNOWN_AFTER_ADMISSION
from schemas.split import SPLITS
from schemas.task import COHORT, IN_COHORT, LABEL, LABEL_COLUMNS, PREDICTION_TIME
from schemas.windows import Point, relation

NO_DATA = ("admission_no_labs", "task_no_observed_data")  # the fates of an admission with nothing observed


def listed(ids: Iterable[int]) -> str:
    """The first HADM_IDs of a list, and how many more."""
    ids = sorted(int(i) for i in ids)
    more = f" +{len(ids) - LISTED} more" if len(ids) > LISTED else ""
    return ", ".join(map(str, ids[:LISTED])) + more


def criteria_findings(cohort: Cohort, admissions: pd.DataFrame) -> list[Finding]:
    """Per criterion: removing none (a warning), removing every admission left (an error), removing admissions
    for what is known only after their prediction time (an error, naming them and their patients)."""
    found, left = [], len(admissions)
    subjects = admissions.set_index("HADM_ID")["SUBJECT_ID"] if "SUBJECT_ID" in admissions else None
    for criterion in cohort.criteria:
        removed = len(criterion.removed)
        if removed == 0:
            found.append(summary_finding(stage=NAME, check="task_criterion_removes_none", table="ADMISSIONS",
                                         column=None, count=0, message=f"[task] {criterion.key} ({criterion.keeps}) "
                                         f"removes no admission of the {left} left"))
        elif removed == left:
            found.append(summary_finding(stage=NAME, check="task_criterion_removes_all", table="ADMISSIONS",
                                         column=None, count=removed, message=f"[task] {criterion.key} "
                                         f"({criterion.keeps}) removes all {left} admissions left"))
        if len(criterion.future):
            whose = "" if subjects is None else \
                f" (SUBJECT_ID {listed(subjects.loc[criterion.future].dropna().unique())})"
            found.append(summary_finding(
                stage=NAME, check="task_selection_on_future", table="ADMISSIONS", column=None,
                count=len(criterion.future), items=criterion.future.tolist(),
                message=f"[task] {criterion.key} ({criterion.keeps}) removes {len(criterion.future)} admissions "
                        f"for what happens after their prediction time: HADM_ID {listed(criterion.future)}{whose}"))
        left -= removed
    return found


def feature_findings(options: Options, admission_features: tuple[str, ...]) -> list[Finding]:
    """The chosen admission features that define the task's label, or are recorded at discharge while the task asks
    before it."""
    prediction = options.windows().prediction
    asks_before_discharge = relation(Point("discharge"), prediction) != -1 and \
        relation(Point("discharge"), prediction) != 0
    found = []
    defining = [c for c in admission_features if c in LABEL_COLUMNS[options.label]]
    if defining:
        found.append(summary_finding(
            stage=NAME, check="task_label_in_features", table="ADMISSIONS", column=", ".join(defining),
            count=len(defining), message=f"chosen in [graph] admission_features, but it defines the task's label "
                                         f"({options.label})"))
    late = [c for c in admission_features if c in KNOWN_AFTER_ADMISSION and c not in defining]
    if late and asks_before_discharge:
        found.append(summary_finding(
            stage=NAME, check="task_feature_after_prediction", table="ADMISSIONS", column=", ".join(late),
            count=len(late), message=f"chosen in [graph] admission_features, but recorded at discharge, after the "
                                     f"prediction time {prediction}"))
    return found


def charted_after_finding(late: pd.DataFrame, *, max_lines: int) -> list[Finding]:
    """The edge rows charted after their admission's prediction time (:func:`.rows.charted_after`), as one error."""
    if late.empty:
        return []
    items = late["ITEMID"].astype("int64").value_counts()
    return [summary_finding(
        stage=NAME, check="task_feature_after_prediction", table="LABEVENTS", column="CHARTTIME", count=len(late),
        lines=[int(line) for line in late.index[:max_lines]], items=items,
        message=f"{len(late)} edge rows charted after their admission's prediction time reach the graphs: "
                f"HADM_ID {listed(late['HADM_ID'].unique())}; ITEMID {listed(items.index)}")]


def class_findings(cohort: Cohort, admissions: pd.DataFrame, observed: pd.DataFrame, options: Options
                   ) -> list[Finding]:
    """A warning when the observation window's length, or the rows it keeps, differ by label beyond
    ``class_tolerance`` (median against median), over the admissions of the cohort."""
    kept = cohort.kept
    if kept.empty or kept[LABEL].nunique() < 2:
        return []
    start = kept["SINCE"].fillna(admissions.loc[kept.index, "ADMITTIME"])
    hours = ((kept["UNTIL"] - start).dt.total_seconds() / 3600).clip(lower=0)
    rows = kept["HADM_ID"].map(observed.set_index("HADM_ID")["ROWS"]).fillna(0)
    found = []
    for what, values, unit in (("observation windows", hours, "h"), ("lab rows kept per admission", rows, "rows")):
        medians = values.groupby(kept[LABEL].astype(bool)).median()
        low, high = float(medians.min()), float(medians.max())
        ratio = np.inf if low == 0 and high > 0 else (high / low if low else 1.0)
        if ratio > options.class_tolerance:
            found.append(summary_finding(
                stage=NAME, check="task_window_by_class", table="ADMISSIONS", column=None, count=len(kept),
                message=f"{what} differ by label: median {medians.get(True, 0):g} {unit} for positives, "
                        f"{medians.get(False, 0):g} {unit} for negatives ({ratio:.3g} times, above [task] "
                        f"class_tolerance {options.class_tolerance:g})"))
    return found


def cohort_ledger(prepared: Any, options: Options) -> dict:
    """Every admission read, counted once: failed a raw check, removed by each criterion in order, ended by the
    prediction time, label censored, nothing observed, left out by a later stage, or labelled in the graphs; and
    per split the labelled admissions and their positives."""
    fates = prepared.fates
    task = prepared.admissions.set_index("HADM_ID")[[COHORT, LABEL]]
    fate = fates["FATE"]
    place = fates["HADM_ID"].map(task[COHORT]).where(fate != "admission_rejected")
    steps = [("failed a raw check", int((fate == "admission_rejected").sum()))]
    for key in criterion_keys(options):
        steps.append((f"[task] {key}", int((place == key).sum())))
    steps += [(LEFT, int((place == LEFT).sum())), (CENSORED, int((place == CENSORED).sum()))]
    kept = place == IN_COHORT
    steps.append(("no lab row kept in the observation window", int((kept & fate.isin(NO_DATA)).sum())))
    later = fate[kept & ~fate.isin(NO_DATA) & (fate != IN_GRAPHS)].value_counts()
    steps += [(f"left out by a later stage ({check})", int(n)) for check, n in sorted(later.items())]
    labelled = fates[kept & (fate == IN_GRAPHS)]
    positive = labelled["HADM_ID"].map(task[LABEL]).astype(bool)
    splits = {name: {"admissions": int((labelled["SPLIT"] == name).sum()),
                     "positives": int(positive[labelled["SPLIT"] == name].sum())} for name in SPLITS}
    return {"task": options.name, "label": options.label, "prediction_time": options.prediction_time,
            "read": int(len(fates)), "steps": [{"step": step, "removed": n} for step, n in steps],
            "labelled": int(len(labelled)), "splits": splits}


def closing(prepared: Any, options: Options, engine: Any, max_lines: int) -> tuple[dict | None, list[Finding]]:
    """The task's ledger and what it says once every admission's fate is known (:attr:`Stage.closes`): every edge
    row held to its admission's prediction time (where the engine holds them), the cohort criterion by criterion,
    the prevalence per split, and the splits below ``min_positives`` of either label."""
    if prepared.fates is None or prepared.admissions is None or COHORT not in prepared.admissions:
        return None, []
    late = engine.rows(prepared.edges, charted_after, prepared.admissions[["HADM_ID", PREDICTION_TIME]])
    ledger = cohort_ledger(prepared, options)
    removed = "; ".join(f"{s['step']} -{s['removed']}" for s in ledger["steps"] if s["removed"])
    found = [summary_finding(
        stage=NAME, check="task_cohort", table="ADMISSIONS", column=None, count=ledger["labelled"],
        message=f"task {options.name}: ADMISSIONS read {ledger['read']} = labelled in the graphs "
                f"{ledger['labelled']} + {ledger['read'] - ledger['labelled']} left out ({removed or 'none'})")]
    rates = ", ".join(f"{name} {s['positives']}/{s['admissions']}"
                      + (f" ({s['positives'] / s['admissions']:.1%})" if s["admissions"] else "")
                      for name, s in ledger["splits"].items())
    found.append(summary_finding(stage=NAME, check="task_prevalence", table="ADMISSIONS", column=None,
                                 count=sum(s["positives"] for s in ledger["splits"].values()),
                                 message=f"positive labels ({options.label}) per split: {rates}"))
    few = [(name, kind, n) for name, s in ledger["splits"].items()
           for kind, n in (("positive", s["positives"]), ("negative", s["admissions"] - s["positives"]))
           if n < options.min_positives]
    if few:
        found.append(summary_finding(
            stage=NAME, check="task_few_positives", table="ADMISSIONS", column=None, count=len(few),
            message="; ".join(f"{name} has {n} {kind} label{'s' if n != 1 else ''}" for name, kind, n in few)
                    + f", fewer than [task] min_positives {options.min_positives}"))
    return ledger, [*charted_after_finding(late, max_lines=max_lines), *found]


__all__ = ["PREDICTION_TIME", "charted_after_finding", "class_findings", "closing", "cohort_ledger",
           "criteria_findings", "feature_findings"]
