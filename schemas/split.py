"""The split assignment: every admission in exactly one of train/val/test, patients never straddling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, STOPS, WARNING, CheckInfo
from schemas.clean import CleanEvents
from schemas.raw import ABOUT

CHECKS = (  # what the split stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("split_by_admission", "split", WARNING, "split by HADM_ID because SUBJECT_ID is absent",
              "A patient with several admissions may straddle splits; add SUBJECT_ID to ADMISSIONS.", announce=True),
    CheckInfo("split_empty", "split", ERROR, "a split with no admissions",
              "Too few patients for the ratios; adjust [split] ratios or add data.", locked=STOPS),
    CheckInfo("split_overlap", "split", ERROR, "a patient or admission in more than one split",
              "Splits must be disjoint; this is a badpoints bug if it appears.", locked=STOPS),
)


SPLITS = ("train", "val", "test")


class SplitAssignment(pa.DataFrameModel):
    """One row per admission: its group (SUBJECT_ID, or HADM_ID as fallback) and split."""

    HADM_ID: Series[np.int64] = pa.Field(gt=0, unique=True)
    GROUP: Series[np.int64] = pa.Field(gt=0)
    SPLIT: Series[str] = pa.Field(isin=SPLITS)

    @pa.dataframe_check(name="split_overlap")
    def split_overlap(cls, frame: pd.DataFrame) -> pd.Series:
        return frame.groupby("GROUP")["SPLIT"].transform("nunique") == 1

    @pa.dataframe_check(name="split_empty", element_wise=False)
    def split_empty(cls, frame: pd.DataFrame) -> bool:
        return set(frame["SPLIT"]) == set(SPLITS)

    class Config:
        strict = True


class SplitEvents(CleanEvents):
    """Clean lab rows with the split of their admission."""

    SPLIT: Series[str] = pa.Field(isin=SPLITS, description=ABOUT["SPLIT"])


def split_codes(split: pd.Series) -> np.ndarray:
    """0, 1, 2 for train, val, test (-1 for anything else), without a per-row string comparison."""
    codes, uniques = pd.factorize(split)
    return pd.Index(SPLITS).get_indexer(uniques)[codes]
