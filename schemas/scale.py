"""Scaled lab rows: Z finite for every row with a number, null for categorical rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, INFO, STOPS, WARNING, CheckInfo
from schemas.encode import EncodedEvents
from schemas.raw import ABOUT

CHECKS = (  # what the scale stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("constant_item", "scale", INFO, "lab item whose training values are all equal",
              "Its value gets z = 0 and any other value a bounded relative difference ([scale] constant_bound); "
              "the item carries no spread to scale by until its training rows vary."),
    CheckInfo("rare_item", "scale", INFO, "lab item seen in fewer than [encode] min_admissions training admissions",
              "Its mean and scale would give its few patients' values back, so stats.json keeps nothing of them "
              "(mean 0, scale 1, rule 'rare') and its rows get z = 0, marked Z_UNSEEN = 1 in edge_attr. A lower "
              "[encode] min_admissions keeps more items, and more that could single out a patient."),
    CheckInfo("fallback_item", "scale", INFO, "lab item scaled on all its training rows",
              "It has fewer than [scale] min_rows normal training rows (or none, or none with spread), so its "
              "mean and scale come from all its training rows, abnormal ones included."),
    CheckInfo("constant_item_value", "scale", INFO, "value of a constant item other than its training value",
              "z = (x - c) / |c| ((x - c) when c = 0) clipped to [scale] constant_bound: bounded, never raw-unit "
              "differences; the item varies outside train, so more training rows would give it a real scale."),
    CheckInfo("unseen_item", "scale", INFO, "numeric lab item not seen in the training split",
              "Its rows get z = 0, marked Z_UNSEEN = 1 in edge_attr: they carry no information about the value."),
    CheckInfo("z_bounded", "scale", INFO, "values whose z a bound changed",
              "Heavy tails are real but would dominate a model: beyond [scale] bound / 2 their z is drawn in "
              "under the bound, order kept, and marked Z_BOUNDED. [scale.policy] \"none\" gives the raw z."),
    CheckInfo("policy_group_unknown", "scale", WARNING, "[scale.policy] group naming no category or fluid",
              "The line applies to no item; check its spelling against D_LABITEMS' CATEGORY and FLUID."),
    CheckInfo("z_finite", "scale", ERROR, "z-score that is inf or NaN",
              "The scaling produced a non-finite value; check the item's stats in the report.", locked=STOPS),
    CheckInfo("z_warn_bound", "scale", WARNING, "|z| above the warning bound",
              "Each item's cause is named: a heavy tail on an item fitted on its normal rows is real ('clip' or "
              "'log' in [scale.policy] bounds it); an item scaled on all its rows is measured against the "
              "spread of its abnormal values; a suspect scale needs a look at the item's stats in stats.json."),
    CheckInfo("z_error_bound", "scale", ERROR, "|z| above the error bound",
              "Beyond any real measurement: the mark of a failed std guard or a unit error.", locked=STOPS),
    CheckInfo("censored_off_scale", "scale", WARNING, "censored results whose bound is off their item's scale",
              "A censored result ('<0.01', '>1000') is kept at its bound; where that bound's z is beyond [scale] "
              "error_bound (or not finite), it is a detection limit of another unit or assay, no measurement on the "
              "item's scale: the row is quarantined, never an error. Check the item's units if it has many."),
    CheckInfo("log_domain", "scale", ERROR, "value <= -1 in an item scaled with the 'log' policy",
              "log1p needs values above -1; use 'clip' or 'none' for this item.", locked=STOPS),
)


Z_ERROR_BOUND = 1e6
"""[scale] error_bound's default: a |z| above it is no measurement (a failed std guard, a unit error). The graph
check holds any graph's float tensors to it by default."""


class ScaledEvents(EncodedEvents):
    """Z: the z-score of VALUENUM with train-fitted stats (float64, finite); Z_BOUNDED and Z_UNSEEN: 0/1 marks of a
    z the bound drew in and of an item unseen in train."""

    Z: Series[float] = pa.Field(nullable=True, finite=(), description=ABOUT["Z"])
    # The stage writes both marks: rows made by hand before them may lack them.
    Z_BOUNDED: Series[np.int8] = pa.Field(isin=(0, 1), required=False, description=ABOUT["Z_BOUNDED"])
    Z_UNSEEN: Series[np.int8] = pa.Field(isin=(0, 1), required=False, description=ABOUT["Z_UNSEEN"])

    @pa.dataframe_check(name="numbers_have_z")
    def numbers_have_z(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["VALUENUM"].isna() | frame["Z"].notna()
