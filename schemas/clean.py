"""What the clean stage hands on: inpatient lab rows with valid keys, each item classified."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import guard as _guard  # noqa: F401  (registers the 'finite' check)
from schemas.catalogue import INFO, WARNING, CheckInfo
from schemas.raw import ABOUT

CHECKS = (  # what the clean stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("quarantine_outpatient", "clean", INFO, "outpatient lab rows (no HADM_ID) quarantined",
              "Expected in MIMIC; they belong to no admission and so to no graph."),
    CheckInfo("quarantine_raw_error", "clean", WARNING, "rows quarantined because they failed a raw check",
              "See the raw findings for each row; repair the export to keep them."),
    CheckInfo("quarantine_admission", "clean", WARNING, "lab rows of an admission that failed a raw check",
              "The admission's key or times are unusable; see the ADMISSIONS findings."),
    CheckInfo("mixed_item_text", "clean", WARNING, "non-numeric value in numeric item",
              "Text the text stage could not read as a number ('See Comments', '0-2', 'TR'); declare a word's "
              "number in [clean.text_values] to keep its rows (censored results such as '<0.01' are read already)."),
    CheckInfo("result_in_comments", "clean", WARNING, "lab rows whose result is only in COMMENTS",
              "MIMIC-IV writes some results ('NEG.', 'UNABLE TO REPORT.') only in comments, with VALUE and "
              "VALUENUM empty. They are quarantined by default; [comments] empty_value = \"category\" keeps them "
              "with the comment as a categorical VALUE (coded under [encode] min_admissions)."),
    CheckInfo("no_result", "clean", INFO, "lab rows without any result (no VALUE, VALUENUM or comment)",
              "They carry nothing to learn from and are quarantined; if the export dropped the results, re-export."),
)


KINDS = ("numeric", "ordinal", "categorical", "mixed")


class CleanAdmissions(pa.DataFrameModel):
    """Admissions whose key and times passed the raw checks (one row per HADM_ID)."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0, unique=True, description=ABOUT["HADM_ID"])
    ADMITTIME: Series[pa.DateTime] = pa.Field(nullable=False, description=ABOUT["ADMITTIME"])
    DISCHTIME: Series[pa.DateTime] = pa.Field(nullable=False, description=ABOUT["DISCHTIME"])
    EDREGTIME: Series[pa.DateTime] = pa.Field(nullable=True, required=False, description=ABOUT["EDREGTIME"])

    @pa.dataframe_check(name="discharge_after_admit")
    def discharge_after_admit(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["DISCHTIME"] >= frame["ADMITTIME"]

    class Config:
        strict = False


class CleanLabItems(pa.DataFrameModel):
    """Lab items whose ITEMID passed the raw checks (one row per ITEMID)."""

    ITEMID: Series[np.int64] = pa.Field(gt=0, unique=True, description=ABOUT["ITEMID"])
    FLUID: Series[str] = pa.Field(nullable=True, description=ABOUT["FLUID"])
    CATEGORY: Series[str] = pa.Field(nullable=True, description=ABOUT["CATEGORY"])

    class Config:
        strict = False


class CleanEvents(pa.DataFrameModel):
    """Inpatient lab rows: keys and time present, VALUENUM finite or null (an ordinal item's rank), KIND of the
    row's item (categorical for a row whose result was only in COMMENTS and became its VALUE)."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0, description=ABOUT["HADM_ID"])
    ITEMID: Series[np.int64] = pa.Field(gt=0, description=ABOUT["ITEMID"])
    CHARTTIME: Series[pa.DateTime] = pa.Field(nullable=False, description=ABOUT["CHARTTIME"])
    VALUE: Series[str] = pa.Field(nullable=True, description=ABOUT["VALUE"])
    VALUENUM: Series[np.float64] = pa.Field(nullable=True, finite=(), description=ABOUT["VALUENUM"])
    FLAG: Series[str] = pa.Field(nullable=True, description=ABOUT["FLAG"])
    KIND: Series[str] = pa.Field(isin=KINDS, description=ABOUT["KIND"])

    @pa.dataframe_check(name="numeric_rows_have_valuenum")
    def numeric_rows_have_valuenum(cls, frame: pd.DataFrame) -> pd.Series:
        return (frame["KIND"] == "categorical") | frame["VALUENUM"].notna()

    class Config:
        strict = False
