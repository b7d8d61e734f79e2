"""What the task stage hands on and finds: the lab rows a prediction task's features may read, its admissions with
their prediction time and label, and the checks that refuse a task whose labels the features can see.

The windows themselves (points, their geometry) are :mod:`schemas.windows`.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, INFO, STOPS, WARNING, CheckInfo
from schemas.clean import CleanAdmissions
from schemas.raw import ABOUT
from schemas.split import SPLITS, SplitEvents

# The columns the task stage adds to ADMISSIONS: what the graphs and labels.parquet read of a task.
PREDICTION_TIME, LABEL, COHORT = "PREDICTION_TIME", "LABEL", "COHORT"
IN_COHORT = "in"  # COHORT of an admission the task keeps (else the criterion or reason that left it out)

CHECKS = (  # what the task stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("task_window_geometry", "task", ERROR, "a task whose label window can see the features",
              "The label window must start at or after the prediction time (plus the gap) and after the "
              "observation window, which ends at or before the prediction time. Fix [task] observation_window, "
              "gap or label_window (an ACES config: its windows' start and end); a run refuses such a task before "
              "it reads any data.", locked=STOPS),
    CheckInfo("task_needs_column", "task", ERROR, "a task that reads a column the data lacks",
              "A readmission needs ADMISSIONS' SUBJECT_ID, a death its DEATHTIME, [task] admission_types its "
              "ADMISSION_TYPE: add the column to the export, or choose another task.", locked=STOPS),
    CheckInfo("task_label_in_features", "task", ERROR, "a column that defines the task's label among the features",
              "The model would read its answer (DISCHARGE_LOCATION's DEAD/EXPIRED is the death label): take the "
              "column out of [graph] admission_features."),
    CheckInfo("task_feature_after_prediction", "task", ERROR, "a feature known only after the prediction time",
              "A column recorded at discharge, or a lab row charted after its admission's prediction time, "
              "reaches the model: take the column out of [graph] admission_features; a lab row here is a bug in "
              "badpoints."),
    CheckInfo("task_selection_on_future", "task", ERROR, "a cohort criterion decided after the prediction time",
              "Selection on the future: the criterion removes admissions for what happens after the question is "
              "asked (a stay of at least 48 h when predicting at 24 h), so the cohort itself leaks the label. "
              "Drop the criterion, or move the prediction time after what it reads."),
    CheckInfo("task_criterion_removes_none", "task", WARNING, "a cohort criterion that removes no admission",
              "It says nothing of this data: check its value, or drop it from [task]."),
    CheckInfo("task_criterion_removes_all", "task", ERROR, "a cohort criterion that removes every admission left",
              "No admission would be labelled: check its value in [task]."),
    CheckInfo("task_outside_cohort", "task", INFO, "lab rows of admissions outside the task's cohort, quarantined",
              "Their admissions are excluded by a criterion, ended before the prediction time, or have a "
              "censored label (the task's ledger counts each)."),
    CheckInfo("task_after_prediction", "task", INFO, "lab rows charted outside the observation window",
              "After the prediction time (or before the observation window begins): the features may not read "
              "them. Quarantined by design."),
    CheckInfo("task_cohort", "task", INFO, "the task's cohort, criterion by criterion",
              "Every admission read is counted once: excluded, ended before the prediction time, censored, "
              "without data, or labelled in the graphs."),
    CheckInfo("task_prevalence", "task", INFO, "positive labels per split",
              "The base rate a model must beat, per split (of the admissions in the graphs)."),
    CheckInfo("task_few_positives", "task", ERROR, "a split with too few positive (or negative) labels",
              "Its metric would mean nothing: at least [task] min_positives of each label per split. Use more "
              "data, other [split] ratios, or a task with a commoner label."),
    CheckInfo("task_window_by_class", "task", WARNING, "observation windows or lab counts that differ by class",
              "The model can tell the label from how long it observes or how much it sees, not from what it "
              "sees (a prediction time at discharge when predicting a death). Above [task] class_tolerance "
              "times, median against median; fix the prediction time or the observation window."),
    # The admissions the task leaves out of every graph (its reasons' Drops): reported by the admission ledger.
    CheckInfo("task_excluded", "flow", INFO, "admissions excluded by the task's cohort criteria",
              "Left out on purpose ([task] cohort criteria); the task's ledger counts each criterion."),
    CheckInfo("task_left_before_prediction", "flow", INFO, "admissions that ended by the prediction time",
              "Died or discharged at or before it: there is no one to predict for."),
    CheckInfo("task_label_censored", "flow", INFO, "admissions whose label is censored",
              "The record ends before the label window does, with no event in it: the label is unknown, not "
              "negative. Shorten the label window to keep them."),
    CheckInfo("task_no_observed_data", "flow", INFO, "admissions with no lab row kept in the observation window",
              "Nothing was charted (or kept) by the prediction time: the model would see an empty history."),
)

# The columns each label reads: a feature made of one of them hands the model its answer.
LABEL_COLUMNS = {
    "death": ("DEATHTIME", "DISCHARGE_LOCATION", "HOSPITAL_EXPIRE_FLAG"),
    "long_stay": ("DISCHTIME", "DISCHARGE_LOCATION"),
    "readmission": (),
    "lab": (),
    "next_labs": (),
}


class TaskEvents(SplitEvents):
    """The lab rows a task's features may read: each charted in its admission's observation window, at or before
    its prediction time."""


class TaskAdmissions(CleanAdmissions):
    """Admissions with their split and the task's answer: when it is asked (PREDICTION_TIME), what the answer is
    (LABEL, null where the task keeps no label), and whether the task keeps the admission (COHORT: 'in', else
    what left it out)."""

    SPLIT: Series[str] = pa.Field(isin=SPLITS, description=ABOUT["SPLIT"])
    PREDICTION_TIME: Series[pa.DateTime] = pa.Field(nullable=True, description="when the task asks its question")
    LABEL: Series[pd.BooleanDtype] = pa.Field(nullable=True, description="the task's answer")
    COHORT: Series[str] = pa.Field(description="'in', or the criterion or reason that left the admission out")

    @pa.dataframe_check(name="labelled_in_cohort")
    def labelled_in_cohort(cls, frame: pd.DataFrame) -> pd.Series:
        return (frame[COHORT] == IN_COHORT) == frame[LABEL].notna()

    class Config:
        strict = False
