"""A MEDS label file (``meds.LabelSchema``: subject_id, prediction_time, one of boolean/integer/float/categorical
value) checked against the MEDS dataset it was made for (``badpoints check LABELS --meds MEDS_DIR``): whether each
label's prediction time is one the dataset can ask at, and whether the features can see its label. Stage ``meds``,
as the dataset's own checks; each check named by its catalogue id on :class:`MedsLabelTimes`, one row per label.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, NOT_READ, WARNING, CheckInfo
from schemas.meds import STAGE

CHECKS = (
    CheckInfo("meds_label_schema", STAGE, ERROR, "label file that is not in MEDS' label schema",
              "Write it as meds.LabelSchema says: subject_id int64 and prediction_time timestamp[us], never null, "
              "and only boolean_value (bool), integer_value (int64), float_value (float32) or categorical_value "
              "(string) beside them; its labels were not checked further.", locked=NOT_READ),
    CheckInfo("meds_label_subject_unknown", STAGE, ERROR, "label of a subject with no event in the dataset",
              "The dataset has nothing to read for it and no split to put it in: the labels were made from other "
              "data (another extraction, another subject numbering). Make the labels from this dataset."),
    CheckInfo("meds_label_after_last_event", STAGE, ERROR, "prediction time after the subject's last event",
              "Nothing is recorded at or after it, so its label window holds no event: the label is censored, not "
              "negative, or the times were shifted (another time zone, another date shift). Drop such labels or "
              "fix their times."),
    CheckInfo("meds_label_no_history", STAGE, WARNING, "prediction time before which the subject has no event",
              "The model is asked with an empty history and can only learn the base rate from these labels; many "
              "of them usually mean prediction times on another clock than the events'. Check the times, or ask "
              "at or after the subject's first event."),
    CheckInfo("meds_label_split", STAGE, ERROR, "subject whose events or labels lie in more than one split",
              "A label's split is the split of its subject's shards: a subject in two splits is trained on and "
              "evaluated on at once. Keep each subject's shards, its subject_splits.parquet entry and its label "
              "files in one split."),
    CheckInfo("meds_label_code_seen", STAGE, ERROR, "label code among the subject's events at or before its "
              "prediction time",
              "The features can see the label: an event that defines it (--label-code) is recorded by the "
              "prediction time. Ask before the event, or leave out subjects who already have it (a death, a first "
              "diagnosis)."),
)


class MedsLabelTimes(pa.DataFrameModel):
    """Per label (one row each): its prediction time and, of its subject in the dataset, its rows (0: none), its
    first and last timed event, the earliest event of a label code (the smallest time for one with no time: it
    is visible at every time) and how many splits its shards, subject_splits.parquet and label files put it in.
    Times are microseconds since the epoch; null where the subject has none."""

    subject_id: Series[np.int64]
    prediction_time: Series[np.int64]
    events: Series[np.int64] = pa.Field(ge=0)
    first_time: Series[pd.Int64Dtype] = pa.Field(nullable=True)
    last_time: Series[pd.Int64Dtype] = pa.Field(nullable=True)
    label_code_time: Series[pd.Int64Dtype] = pa.Field(nullable=True)
    splits: Series[np.int64] = pa.Field(ge=0)

    @pa.check("events", name="meds_label_subject_unknown")
    def subject_known(cls, events: pd.Series) -> pd.Series:
        return events > 0

    @pa.dataframe_check(name="meds_label_after_last_event")
    def asked_by_the_last_event(cls, frame: pd.DataFrame) -> pd.Series:
        return ~(frame["prediction_time"] > frame["last_time"]).fillna(False).astype(bool)

    @pa.dataframe_check(name="meds_label_no_history")
    def has_history(cls, frame: pd.DataFrame) -> pd.Series:
        """An event at or before the prediction time (a subject with no event at all is another check's)."""
        return (frame["first_time"] <= frame["prediction_time"]).fillna(False).astype(bool) | (frame["events"] == 0)

    @pa.check("splits", name="meds_label_split")
    def in_one_split(cls, splits: pd.Series) -> pd.Series:
        return splits <= 1

    @pa.dataframe_check(name="meds_label_code_seen")
    def label_unseen(cls, frame: pd.DataFrame) -> pd.Series:
        return ~(frame["label_code_time"] <= frame["prediction_time"]).fillna(False).astype(bool)
