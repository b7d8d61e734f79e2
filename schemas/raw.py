"""Schemas for the raw tables: as text straight from the CSV, and as typed frames after parsing.

The ``Raw*`` models describe the text read from the files (every column is
``str``; the index is the source line number). Their checks are the raw checks
of the catalogue in ``schemas.checks``, so a lazy validation returns every bad
point of a table at once. The typed models (``Admissions``, ``LabItems``,
``LabEvents``) guard what the raw stage hands to the next one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas import checks as _checks  # noqa: F401  (registers the check methods)
from schemas import guard as _guard  # noqa: F401  (registers the 'finite' check)

# The tables of a lab run, by the names the data gives them (MIMIC-III's file names, upper case).
ADMISSIONS, LABITEMS, LABEVENTS = "ADMISSIONS", "D_LABITEMS", "LABEVENTS"
TABLES = (ADMISSIONS, LABITEMS, LABEVENTS)

DEFAULT_VALUENUM_ABS_BOUND = 1e10
DEFAULT_STAY_TOLERANCE_HOURS = 0.0  # [raw] stay_tolerance_hours: every lab outside the stay is reported

# Columns each table must have (canonical MIMIC-III upper-case names), and those read when present.
REQUIRED = {
    "ADMISSIONS": ("HADM_ID", "ADMITTIME", "DISCHTIME"),
    "D_LABITEMS": ("ITEMID", "FLUID", "CATEGORY"),
    "LABEVENTS": ("HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "FLAG"),
}
OPTIONAL = {
    # EDREGTIME: when the emergency department stay began; DEATHTIME: an in-hospital death (a task's label)
    "ADMISSIONS": ("SUBJECT_ID", "EDREGTIME", "DEATHTIME"),
    "D_LABITEMS": ("LABEL",),  # free text, but dictionary metadata: findings name items by it
    "LABEVENTS": ("SUBJECT_ID", "VALUENUM", "COMMENTS", "REF_RANGE_LOWER", "REF_RANGE_UPPER"),
}
# What a run does without an optional column, by table and column (a finding that the header lacks it says so).
WITHOUT = {
    ("ADMISSIONS", "SUBJECT_ID"): "admissions are split by HADM_ID (split_by_admission)",
    ("ADMISSIONS", "EDREGTIME"): "each ED stay is taken to begin [bucket] ed_hours before ADMITTIME",
    ("D_LABITEMS", "LABEL"): "findings name lab items by ITEMID and FLUID",
    ("LABEVENTS", "VALUENUM"): "VALUENUM is derived from VALUE (valuenum_derived)",
}
# MIMIC-IV's reference range bounds: metadata read as numbers (null where the text is not one).
REF_RANGES = ("REF_RANGE_LOWER", "REF_RANGE_UPPER")
# Categorical admission columns read when present (MIMIC-III has ETHNICITY, MIMIC-IV race).
ADMISSION_CATEGORICALS = (
    "ADMISSION_TYPE",
    "ADMISSION_LOCATION",
    "DISCHARGE_LOCATION",
    "INSURANCE",
    "LANGUAGE",
    "RELIGION",
    "MARITAL_STATUS",
    "ETHNICITY",
    "RACE",
)
# Admission columns recorded at or after discharge (MIMIC's DISCHARGE_LOCATION holds DEAD/EXPIRED, DIED and
# HOSPICE): known only once the stay is over, so a feature made of one leaks the outcome into every admission node.
# A column derived from DISCHTIME (a length of stay) belongs here too, should badpoints ever read one.
KNOWN_AFTER_ADMISSION = ("DISCHARGE_LOCATION", "HOSPITAL_EXPIRE_FLAG", "DEATHTIME", "DISCHTIME")
# MIMIC-IV names that differ from MIMIC-III's beyond case.
ALIASES = {"LABEVENT_ID": "ROW_ID"}
# What each column of the typed tables and the lab rows the stages hand on holds: the ``description`` each schema
# gives it, which a guard's error names when a frame lacks the column.
ABOUT = {
    "SUBJECT_ID": "the patient, a positive integer",
    "HADM_ID": "the hospital admission, a positive integer",
    "ITEMID": "the lab item measured, a positive integer (a D_LABITEMS key)",
    "CHARTTIME": "when the lab was charted",
    "VALUE": "the result as text (null where there is none)",
    "VALUENUM": "the result as a number: finite, or null for a text result",
    "FLAG": "'abnormal' or 'delta' for a flagged result, null for a normal one (the z-score fit reads it)",
    "COMMENTS": "MIMIC-IV's comment on the result (null where there is none)",
    "REF_RANGE_LOWER": "the reference range's lower bound, null where unknown",
    "REF_RANGE_UPPER": "the reference range's upper bound, null where unknown",
    "REJECT": "the raw check the row failed, null for a row that passed",
    "ADMITTIME": "when the admission began",
    "DISCHTIME": "when the admission ended",
    "EDREGTIME": "when the admission's emergency department stay began (null: none known)",
    "DEATHTIME": "when the patient died in hospital (null: discharged alive)",
    "FLUID": "the lab item's fluid ('Blood', 'Urine')",
    "CATEGORY": "the lab item's category ('Chemistry', 'Hematology')",
    "LABEL": "the lab item's name",
    "KIND": "the kind of its lab item: 'numeric' (every result a number), 'ordinal' (every result a word of one "
            "ordered scale, read as its rank), 'categorical' (no result a number) or 'mixed'",
    "SPLIT": "the split of its admission: 'train', 'val' or 'test' (fits read the 'train' rows)",
    "CODE": "the code of a categorical row's VALUE (0: missing or unseen in train), null on a row with a number",
    "Z": "the z-score of VALUENUM by its item's training stats, null on a categorical row",
    "Z_BOUNDED": "1 where a bound drew the z in, else 0",
    "Z_UNSEEN": "1 where the item has no training stats (z = 0), else 0",
    "Z_CENSORED": "-1 for a result '<x' read as x (at most x), +1 for '>x' (at least x), else 0",
    "TIMESTEP": "the row's interval since the start of its admission day, an integer >= 0",
}


class _Text(pa.DataFrameModel):
    class Config:
        strict = False
        coerce = False


class RawAdmissions(_Text):
    """ADMISSIONS as text: one row per hospital admission."""

    SUBJECT_ID: Series[str] = pa.Field(nullable=True, id_positive_integer=(), id_float_format=(), required=False)
    HADM_ID: Series[str] = pa.Field(nullable=False, id_positive_integer=(), id_float_format=())
    ADMITTIME: Series[str] = pa.Field(nullable=False, datetime_iso=())
    DISCHTIME: Series[str] = pa.Field(nullable=False, datetime_iso=())
    EDREGTIME: Series[str] = pa.Field(nullable=True, required=False, edregtime_iso=())
    DEATHTIME: Series[str] = pa.Field(nullable=True, required=False, deathtime_iso=())


class RawLabItems(_Text):
    """D_LABITEMS as text: one row per lab item."""

    ITEMID: Series[str] = pa.Field(nullable=False, id_positive_integer=(), id_float_format=())
    FLUID: Series[str] = pa.Field(nullable=True)
    CATEGORY: Series[str] = pa.Field(nullable=True)
    LABEL: Series[str] = pa.Field(nullable=True, required=False)


class RawLabEvents(_Text):
    """LABEVENTS as text: one row per lab measurement."""

    SUBJECT_ID: Series[str] = pa.Field(nullable=True, id_positive_integer=(), id_float_format=(), required=False)
    HADM_ID: Series[str] = pa.Field(nullable=True, id_positive_integer=(), id_float_format=())
    ITEMID: Series[str] = pa.Field(nullable=False, id_positive_integer=(), id_float_format=())
    CHARTTIME: Series[str] = pa.Field(nullable=False, datetime_iso=())
    VALUE: Series[str] = pa.Field(nullable=True)
    VALUENUM: Series[str] = pa.Field(
        nullable=True,
        required=False,
        valuenum_numeric=(),
        valuenum_finite=(),
        valuenum_bound={"bound": DEFAULT_VALUENUM_ABS_BOUND},
    )
    FLAG: Series[str] = pa.Field(nullable=True, flag_value=())
    COMMENTS: Series[str] = pa.Field(nullable=True, required=False)
    REF_RANGE_LOWER: Series[str] = pa.Field(nullable=True, required=False, ref_range_numeric=())
    REF_RANGE_UPPER: Series[str] = pa.Field(nullable=True, required=False, ref_range_numeric=())


def raw_labevents_schema(*, valuenum_abs_bound: float = DEFAULT_VALUENUM_ABS_BOUND) -> pa.DataFrameSchema:
    """``RawLabEvents`` with the configured magnitude bound on VALUENUM."""
    schema = RawLabEvents.to_schema()
    column = schema.columns["VALUENUM"]
    checks = [
        pa.Check.valuenum_bound(bound=valuenum_abs_bound) if check.name == "valuenum_bound" else check
        for check in column.checks
    ]
    return schema.update_column("VALUENUM", checks=checks)


# -- typed frames handed to the next stage --------------------------------------------------
class _Typed(pa.DataFrameModel):
    class Config:
        strict = False
        coerce = False


class Admissions(_Typed):
    """Parsed admissions; rows whose key or times failed are kept with ``REJECT`` naming the check. EDREGTIME and
    DEATHTIME, when present, are metadata: null where it is empty or not a time, and never a reason to reject its row."""

    SUBJECT_ID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, required=False,
                                                 description=ABOUT["SUBJECT_ID"])
    HADM_ID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, description=ABOUT["HADM_ID"])
    ADMITTIME: Series[pa.DateTime] = pa.Field(nullable=True, description=ABOUT["ADMITTIME"])
    DISCHTIME: Series[pa.DateTime] = pa.Field(nullable=True, description=ABOUT["DISCHTIME"])
    EDREGTIME: Series[pa.DateTime] = pa.Field(nullable=True, required=False, description=ABOUT["EDREGTIME"])
    DEATHTIME: Series[pa.DateTime] = pa.Field(nullable=True, required=False, description=ABOUT["DEATHTIME"])
    REJECT: Series[str] = pa.Field(nullable=True, description=ABOUT["REJECT"])


class LabItems(_Typed):
    """Parsed lab items."""

    ITEMID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, description=ABOUT["ITEMID"])
    FLUID: Series[str] = pa.Field(nullable=True, description=ABOUT["FLUID"])
    CATEGORY: Series[str] = pa.Field(nullable=True, description=ABOUT["CATEGORY"])
    LABEL: Series[str] = pa.Field(nullable=True, required=False, description=ABOUT["LABEL"])
    REJECT: Series[str] = pa.Field(nullable=True, description=ABOUT["REJECT"])


class LabEvents(_Typed):
    """Parsed lab events: VALUENUM finite or null, FLAG normalised to lower case; MIMIC-IV's COMMENTS as text
    and its reference range bounds as finite numbers or null, when present."""

    SUBJECT_ID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, required=False,
                                                 description=ABOUT["SUBJECT_ID"])
    HADM_ID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, description=ABOUT["HADM_ID"])
    ITEMID: Series[pd.Int64Dtype] = pa.Field(nullable=True, gt=0, description=ABOUT["ITEMID"])
    CHARTTIME: Series[pa.DateTime] = pa.Field(nullable=True, description=ABOUT["CHARTTIME"])
    VALUE: Series[str] = pa.Field(nullable=True, description=ABOUT["VALUE"])
    VALUENUM: Series[np.float64] = pa.Field(nullable=True, finite=(), description=ABOUT["VALUENUM"])
    FLAG: Series[str] = pa.Field(nullable=True, description=ABOUT["FLAG"])
    COMMENTS: Series[str] = pa.Field(nullable=True, required=False, description=ABOUT["COMMENTS"])
    REF_RANGE_LOWER: Series[np.float64] = pa.Field(nullable=True, required=False, finite=(),
                                                   description=ABOUT["REF_RANGE_LOWER"])
    REF_RANGE_UPPER: Series[np.float64] = pa.Field(nullable=True, required=False, finite=(),
                                                   description=ABOUT["REF_RANGE_UPPER"])
    REJECT: Series[str] = pa.Field(nullable=True, description=ABOUT["REJECT"])
