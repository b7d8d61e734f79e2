"""A MEDS shard as ``build --to meds`` writes it (:class:`MedsShard`), guarded before it is staged: MEDS' own types,
a value that is finite or null (a z MEDS-Transforms computes from an inf is NaN), and each subject's rows one run
in time order (MEDS shards are sorted by subject, then time)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import guard as _guard  # noqa: F401  (registers the 'finite' check)
from schemas.catalogue import ERROR, GRAPH_FILE, INFO, CheckInfo

NAME = "meds_export"
UNSEEN = "meds_export_unseen_codes"

CHECKS = (
    CheckInfo("meds_export_shard", NAME, ERROR, "MEDS shard that failed its guard before it was written",
              "A value that is not finite, a type other than MEDS', or a subject's rows out of time order would "
              "reach MEDS-Transforms: nothing was written. This is a bug in badpoints; report it with the finding.",
              locked=GRAPH_FILE),
    CheckInfo(UNSEEN, NAME, INFO, "codes written with no row in train, whose rows MEDS-Transforms' normalization drops",
              "Its normalization inner-joins each row's code with the codes it fitted on the train split, so it "
              "drops these rows without a word, whatever codes.parquet says; the graphs keep them (Z_UNSEEN where "
              "they have a number). `badpoints validate OUT` names them too (meds_code_unseen)."),
)


class MedsShard(pa.DataFrameModel):
    """A shard's events: subject_id, time, code and numeric_value as meds.DataSchema types them."""

    subject_id: Series[np.int64] = pa.Field(nullable=False)
    time: Series[pa.DateTime] = pa.Field(nullable=True)
    code: Series[str] = pa.Field(nullable=False)
    numeric_value: Series[np.float32] = pa.Field(nullable=True, finite=())

    class Config:
        strict = True

    @pa.dataframe_check(name="subject_runs_in_time_order")
    def subject_runs_in_time_order(cls, frame: pd.DataFrame) -> pd.Series:
        """Each row comes after the one before it: a larger subject_id, or the same one at the same or a later
        time (a null time, a static event, first)."""
        subject = frame["subject_id"].to_numpy()
        time = frame["time"].to_numpy("datetime64[us]")
        later = np.ones(len(frame), dtype=bool)
        same = subject[1:] == subject[:-1]
        earlier = np.isnat(time[:-1]) | (~np.isnat(time[1:]) & (time[1:] >= time[:-1]))
        later[1:] = (subject[1:] > subject[:-1]) | (same & earlier)
        return pd.Series(later, index=frame.index)
