"""What the clean stage hands on: inpatient lab rows with valid keys, each item classified."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import guard as _guard  # noqa: F401  (registers the 'finite' check)

KINDS = ("numeric", "categorical", "mixed")


class CleanAdmissions(pa.DataFrameModel):
    """Admissions whose key and times passed the raw checks (one row per HADM_ID)."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0, unique=True)
    ADMITTIME: Series[pa.DateTime] = pa.Field(nullable=False)
    DISCHTIME: Series[pa.DateTime] = pa.Field(nullable=False)

    @pa.dataframe_check(name="discharge_after_admit")
    def discharge_after_admit(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["DISCHTIME"] >= frame["ADMITTIME"]

    class Config:
        strict = False


class CleanLabItems(pa.DataFrameModel):
    """Lab items whose ITEMID passed the raw checks (one row per ITEMID)."""

    ITEMID: Series[np.int64] = pa.Field(gt=0, unique=True)
    FLUID: Series[str] = pa.Field(nullable=True)
    CATEGORY: Series[str] = pa.Field(nullable=True)

    class Config:
        strict = False


class CleanEvents(pa.DataFrameModel):
    """Inpatient lab rows: keys and time present, VALUENUM finite or null, KIND of the row's item (categorical
    for a row whose result was only in COMMENTS and became its VALUE)."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0)
    ITEMID: Series[np.int64] = pa.Field(gt=0)
    CHARTTIME: Series[pa.DateTime] = pa.Field(nullable=False)
    VALUE: Series[str] = pa.Field(nullable=True)
    VALUENUM: Series[np.float64] = pa.Field(nullable=True, finite=())
    FLAG: Series[str] = pa.Field(nullable=True)
    KIND: Series[str] = pa.Field(isin=KINDS)

    @pa.dataframe_check(name="numeric_rows_have_valuenum")
    def numeric_rows_have_valuenum(cls, frame: pd.DataFrame) -> pd.Series:
        return (frame["KIND"] == "categorical") | frame["VALUENUM"].notna()

    class Config:
        strict = False
