"""A MEDS label file beside the small MEDS dataset of :mod:`tests.meds`, with the leaks of a task defined elsewhere
planted on request (``badpoints check LABELS --meds MEDS_DIR``, docs/tasks.md).

:func:`write_labels` writes the dataset (:func:`tests.meds.write_meds`) into ``root/meds`` with a ``MEDS_DEATH``
for :data:`DYING` subjects at ``admit + 30h`` (after their last lab draw, at 18 h), and ``root/labels.parquet`` in
``meds.LabelSchema``: one label per subject, asked at ``admit + 12h`` (after the third draw), ``True`` for those who
die. Without cases every label passes. Each case of :data:`LABEL_CASES` plants one leak, on one subject, named by
the check that finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests.meds import FIRST_ID, SPLIT_SPLIT_SUBJECT, write_meds

DEATH = meds.death_code
ASKED_AT = np.timedelta64(12, "h")
DIES_AT = np.timedelta64(30, "h")
DYING = (FIRST_ID["train"] + 9, FIRST_ID["tuning"] + 2, FIRST_ID["held_out"] + 3)
LATE, EARLY, SEEN = FIRST_ID["train"] + 2, FIRST_ID["train"] + 3, FIRST_ID["train"] + 4  # the planted subjects
UNKNOWN = 9001  # a subject the dataset does not hold
# case: (the check that names it, what it plants)
LABEL_CASES = {
    "after_last_event": ("meds_label_after_last_event", f"subject {LATE} asked 2 days after admission, past its "
                                                        "last event"),
    "no_history": ("meds_label_no_history", f"subject {EARLY} asked a century before admission, before its birth"),
    "unknown_subject": ("meds_label_subject_unknown", f"a label of subject {UNKNOWN}, whom the dataset lacks"),
    "split": ("meds_label_split", f"subject {SPLIT_SPLIT_SUBJECT}'s later rows in held_out/0 (tests.meds' "
                                  "split_subject), where subject_splits.parquet puts it in train"),
    "label_code_seen": ("meds_label_code_seen", f"subject {SEEN} dies 6 h after admission, before it is asked"),
    "schema": ("meds_label_schema", "prediction_time written as text"),
}


@dataclass(frozen=True)
class LabelsFixture:
    """What :func:`write_labels` wrote: the MEDS dataset's folder, the label file, and the labels as written."""

    meds: Path
    labels: Path
    frame: pd.DataFrame


def write_labels(root: Path, cases: Iterable[str] = ()) -> LabelsFixture:
    """The dataset and its labels under ``root`` with ``cases`` (of :data:`LABEL_CASES`) planted."""
    cases = set(cases)
    if cases - set(LABEL_CASES):
        raise ValueError(f"unknown label cases {sorted(cases - set(LABEL_CASES))}; known: {sorted(LABEL_CASES)}")
    root = Path(root)
    fixture = write_meds(root / "meds", ("split_subject",) if "split" in cases else ())
    admit = fixture.rows[fixture.rows["code"] == "ADMISSION//EMERGENCY"].set_index("subject_id")["time"]
    deaths = {subject: admit[subject] + DIES_AT for subject in DYING}
    if "label_code_seen" in cases:
        deaths[SEEN] = admit[SEEN] + np.timedelta64(6, "h")
    _add_deaths(fixture.root, fixture.rows, deaths)
    asked = admit + ASKED_AT
    if "after_last_event" in cases:
        asked[LATE] = admit[LATE] + np.timedelta64(2, "D")
    if "no_history" in cases:
        asked[EARLY] = admit[EARLY] - np.timedelta64(36_500, "D")
    frame = pd.DataFrame({"subject_id": asked.index.to_numpy(np.int64), "prediction_time": asked.to_numpy(),
                          "boolean_value": asked.index.isin(list(deaths))})
    if "unknown_subject" in cases:
        extra = {"subject_id": UNKNOWN, "prediction_time": asked.iloc[0], "boolean_value": False}
        frame = pd.concat([frame, pd.DataFrame([extra])], ignore_index=True)
    path = root / "labels.parquet"
    pq.write_table(_label_table(frame, text_times="schema" in cases), path)
    return LabelsFixture(fixture.root, path, frame)


def _label_table(frame: pd.DataFrame, *, text_times: bool = False) -> pa.Table:
    times = frame["prediction_time"].to_numpy("datetime64[us]")
    return pa.table({"subject_id": pa.array(frame["subject_id"], pa.int64()),
                     "prediction_time": (pa.array(np.datetime_as_string(times, unit="s")) if text_times else
                                         pa.array(times, pa.timestamp("us"))),
                     "boolean_value": pa.array(frame["boolean_value"], pa.bool_())})


def _add_deaths(root: Path, rows: pd.DataFrame, deaths: dict[int, np.datetime64]) -> None:
    """A MEDS_DEATH event for each subject at its time, written into the shard of its first rows, which stays
    sorted by subject and time."""
    shard_of = rows.groupby("subject_id")["shard"].first()
    added = pd.DataFrame({"subject_id": list(deaths), "time": list(deaths.values())})
    added["shard"] = added["subject_id"].map(shard_of)
    for shard, events in added.groupby("shard"):
        path = root / meds.data_subdirectory / f"{shard}.parquet"
        table = pq.read_table(path)
        new = pa.table({"subject_id": pa.array(events["subject_id"], pa.int64()),
                        "time": pa.array(events["time"].to_numpy("datetime64[us]"), pa.timestamp("us")),
                        "code": pa.array([DEATH] * len(events), pa.string()),
                        "numeric_value": pa.nulls(len(events), pa.float32()),
                        "text_value": pa.nulls(len(events), pa.large_string())}, schema=table.schema)
        merged = pa.concat_tables([table, new]).sort_by([("subject_id", "ascending"), ("time", "ascending")])
        pq.write_table(merged, path)
