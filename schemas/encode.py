"""Encoded lab rows, admissions and lab items: codes are >= 0, 0 meaning missing or unseen in train."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import INFO, CheckInfo
from schemas.raw import ABOUT
from schemas.split import SplitEvents

CHECKS = (  # what the encode stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("unseen_category", "encode", INFO, "categorical values not seen in the training split",
              "They get code 0, the code of missing and unseen values, as values too rare to be coded do."),
    CheckInfo("category_case_variants", "encode", INFO, "D_LABITEMS values that differ only in letter case",
              "With [encode] fold_case = true (the default) each such value has one code, its most used spelling; "
              "false gives each spelling a code of its own."),
    CheckInfo("rare_category", "encode", INFO, "categorical values too rare in the training split to be coded",
              "Seen in fewer than [encode] min_admissions training admissions, they get code 0 and stay out "
              "of stats.json, so no value that could single out a patient is saved."),
)


class EncodedEvents(SplitEvents):
    """CODE: the categorical VALUE's code for categorical rows (0 = missing/unseen), null for numeric rows."""

    CODE: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description=ABOUT["CODE"])

    @pa.dataframe_check(name="categorical_rows_have_code")
    def categorical_rows_have_code(cls, frame: pd.DataFrame) -> pd.Series:
        return (frame["KIND"] != "categorical") | frame["CODE"].notna()


class EncodedAdmissions(pa.DataFrameModel):
    """Admissions with their split; every ``*_CODE`` column is int64 >= 0."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0, unique=True)
    ADMITTIME: Series[pa.DateTime] = pa.Field(nullable=False)
    DISCHTIME: Series[pa.DateTime] = pa.Field(nullable=False)
    EDREGTIME: Series[pa.DateTime] = pa.Field(nullable=True, required=False)  # when present: the ED stay's start
    SPLIT: Series[str] = pa.Field(nullable=False)
    CODES: Series[np.int64] = pa.Field(ge=0, alias=r".*_CODE$", regex=True, required=False)

    class Config:
        strict = False


class EncodedLabItems(pa.DataFrameModel):
    """Every lab item of the dictionary with its FLUID and CATEGORY codes."""

    ITEMID: Series[np.int64] = pa.Field(gt=0, unique=True)
    FLUID_CODE: Series[np.int64] = pa.Field(ge=0)
    CATEGORY_CODE: Series[np.int64] = pa.Field(ge=0)

    class Config:
        strict = False
