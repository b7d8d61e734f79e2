"""The task stage's work on the lab rows: each row kept only when its admission is in the task's cohort and it was
charted in the admission's observation window (:func:`observed_rows`), what each admission keeps
(:func:`observed_admissions`), and the guard a build holds its edges to (:func:`charted_after`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.kernel.calls import reads
from pipeline.kernel.quarantine import Kept, set_aside
from pipeline.kernel.stage import Drop, Reason
from pipeline.stages.task.cohort import CENSORED, LEFT, NAME
from schemas.guard import guarded
from schemas.split import SplitEvents
from schemas.task import COHORT, IN_COHORT, PREDICTION_TIME, TaskEvents

EXCLUDED = "admission excluded by the task's cohort criteria"
ENDED = "admission ended by the prediction time"
UNLABELLED = "admission's label censored"
AFTER = "charted after the prediction time"
BEFORE = "charted before the observation window"
COLUMNS = {EXCLUDED: "HADM_ID", ENDED: "HADM_ID", UNLABELLED: "HADM_ID", AFTER: "CHARTTIME", BEFORE: "CHARTTIME"}
_NO_DATA = Drop("task_no_observed_data", "with no lab row kept in the observation window")
REASONS = (
    Reason(EXCLUDED, "task_outside_cohort", per_admission=True,
           drops=Drop("task_excluded", "excluded by the task's cohort criteria")),
    Reason(ENDED, "task_outside_cohort", per_admission=True,
           drops=Drop("task_left_before_prediction", "that ended (died or were discharged) by the prediction time")),
    Reason(UNLABELLED, "task_outside_cohort", per_admission=True,
           drops=Drop("task_label_censored", "whose label is censored (the record ends before the label window)")),
    Reason(AFTER, "task_after_prediction", per_admission=True, drops=_NO_DATA),
    Reason(BEFORE, "task_after_prediction", per_admission=True, drops=_NO_DATA),
)
WINDOW_COLUMNS = ["HADM_ID", COHORT, "SINCE", "UNTIL"]  # what the rows' call reads of each admission


def _seconds(times: pd.Series) -> np.ndarray:
    """Seconds since the epoch as float64 (exact for whole seconds), NaN for NaT."""
    return times.astype("datetime64[s]").astype("int64").where(times.notna()).astype("float64").to_numpy()


@guarded(stage=NAME, takes=SplitEvents, gives=TaskEvents)
def observed_rows(events: pd.DataFrame, windows: pd.DataFrame) -> Kept:
    """The rows the task's features may read: of admissions in its cohort, charted in their observation window
    (``windows``: per admission HADM_ID, COHORT, SINCE and UNTIL, as the stage's cohort gives them). The rest are
    quarantined, each with the reason that took it: its admission's (excluded, ended, censored) or its time's."""
    at = pd.Index(windows["HADM_ID"]).get_indexer(events["HADM_ID"])
    # Each admission's place as a small code (0: in the cohort; an unknown admission is excluded), read per row.
    place = np.select([windows[COHORT].eq(IN_COHORT), windows[COHORT].eq(LEFT), windows[COHORT].eq(CENSORED)],
                      [0, 2, 3], default=1).astype("int8")
    cohort = np.append(place, np.int8(1))[at]
    since = np.append(_seconds(windows["SINCE"]), np.nan)[at]
    until = np.append(_seconds(windows["UNTIL"]), np.nan)[at]
    charted = _seconds(events["CHARTTIME"])
    masks = {EXCLUDED: cohort == 1, ENDED: cohort == 2, UNLABELLED: cohort == 3, AFTER: charted > until,
             BEFORE: charted < since}
    return set_aside(events, [(reason, pd.Series(mask, index=events.index)) for reason, mask in masks.items()],
                     stage=NAME, columns=COLUMNS, planned=True)


@reads("HADM_ID")
def observed_admissions(events: pd.DataFrame) -> pd.DataFrame:
    """Each admission among the rows (its first row's source line) and how many rows it keeps (ROWS)."""
    first = ~events["HADM_ID"].duplicated()
    rows = events.groupby("HADM_ID", sort=False).size()
    kept = events.loc[first.to_numpy(), ["HADM_ID"]]
    return kept.assign(ROWS=kept["HADM_ID"].map(rows).astype("int64"))


@reads("HADM_ID", "ITEMID", "CHARTTIME")
def charted_after(edges: pd.DataFrame, admissions: pd.DataFrame) -> pd.DataFrame:
    """The edge rows charted after their admission's prediction time (``admissions``: HADM_ID, PREDICTION_TIME):
    none, unless a stage after the task moved a later row in. Their HADM_ID and ITEMID, by source line."""
    asked = edges["HADM_ID"].map(admissions.set_index("HADM_ID")[PREDICTION_TIME])
    return edges.loc[(edges["CHARTTIME"] > asked).to_numpy(), ["HADM_ID", "ITEMID"]]
