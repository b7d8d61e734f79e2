"""``--layout mimic4``: the same events in MIMIC-IV 2.2's ``hosp`` module, with MIMIC-IV's files, headers and IDs
and what it adds (specimens, providers, store times, priorities, reference ranges, results only in comments)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from bench.synth.labevents import fixed
from bench.synth.shape import pick
from bench.synth.tables import Items, admissions_table, labitems_table

MIMIC4_FILES = {"ADMISSIONS": "hosp/admissions.csv.gz", "D_LABITEMS": "hosp/d_labitems.csv.gz",
                "LABEVENTS": "hosp/labevents.csv.gz"}
MIMIC4_ADMISSIONS_HEADER = ("subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type",
                            "admit_provider_id", "admission_location", "discharge_location", "insurance", "language",
                            "marital_status", "race", "edregtime", "edouttime", "hospital_expire_flag")
MIMIC4_LABEVENTS_HEADER = ("labevent_id", "subject_id", "hadm_id", "specimen_id", "itemid", "order_provider_id",
                           "charttime", "storetime", "value", "valuenum", "valueuom", "ref_range_lower",
                           "ref_range_upper", "flag", "priority", "comments")
MIMIC4_OUTPATIENT_SHARE = 0.40
MIMIC4_SUBJECT_BASE, MIMIC4_HADM_BASE = 10_000_000, 19_900_000  # synthetic HADM_IDs start at 100,000
MIMIC4_SPECIMEN_BASE = 10_000_000
MIMIC4_ADMISSION_TYPE = {"EMERGENCY": "EW EMER.", "URGENT": "URGENT", "ELECTIVE": "ELECTIVE"}
COMMENT_ONLY_SHARE = 0.01  # value and valuenum empty, the result in comments
COMMENT_BESIDE_SHARE = 0.03  # a comment next to a value
COMMENT_RESULTS = (("___", 0.4), ("NEG.", 0.2), ("UNABLE TO REPORT.", 0.15), ("SPECIMEN HEMOLYZED.", 0.1),
                   ("TEST NOT PERFORMED.", 0.1), ("POSITIVE.", 0.05))
COMMENTS_BESIDE = (("VERIFIED BY REPLICATE ANALYSIS.", 0.5), ("___", 0.3), ("HEMOLYSIS MAY AFFECT RESULT.", 0.2))
REF_RANGE_SHARE = 0.95  # rows with a number that carry their item's reference range
PRIORITY = (("ROUTINE", 0.6), ("STAT", 0.3), ("", 0.1))
PROVIDER_SHARE = 0.7  # draws with an order_provider_id


def admissions(adm: pd.DataFrame) -> pd.DataFrame:
    """hosp/admissions columns (MIMIC-IV 2.2) from the MIMIC-III-shaped table: race for ETHNICITY, no RELIGION."""
    table = admissions_table(adm)
    provider = "P" + (adm["HADM_ID"].to_numpy() % 99_991).astype(str).astype(object)
    return pd.DataFrame({
        "subject_id": table["SUBJECT_ID"] + MIMIC4_SUBJECT_BASE,
        "hadm_id": table["HADM_ID"] + MIMIC4_HADM_BASE,
        "admittime": table["ADMITTIME"], "dischtime": table["DISCHTIME"], "deathtime": table["DEATHTIME"],
        "admission_type": table["ADMISSION_TYPE"].map(MIMIC4_ADMISSION_TYPE),
        "admit_provider_id": provider,
        "admission_location": table["ADMISSION_LOCATION"], "discharge_location": table["DISCHARGE_LOCATION"],
        "insurance": table["INSURANCE"], "language": table["LANGUAGE"], "marital_status": table["MARITAL_STATUS"],
        "race": table["ETHNICITY"], "edregtime": table["EDREGTIME"], "edouttime": table["EDOUTTIME"],
        "hospital_expire_flag": table["HOSPITAL_EXPIRE_FLAG"],
    })[list(MIMIC4_ADMISSIONS_HEADER)]


def labitems(items: Items) -> pd.DataFrame:
    """hosp/d_labitems columns (MIMIC-IV 2.2 has no loinc_code)."""
    table = labitems_table(items)
    return pd.DataFrame({"itemid": table["ITEMID"], "label": table["LABEL"], "fluid": table["FLUID"],
                         "category": table["CATEGORY"]})


def labevents(rng: np.random.Generator, items: Items, events: pa.Table, first_specimen: int) -> pa.Table:
    """hosp/labevents columns from a chunk made with ``draws=True`` (see :mod:`bench.synth`)."""
    n = events.num_rows
    item = events["_ITEM"].to_numpy()
    draw = events["_DRAW"].to_numpy()
    n_draws = int(draw.max()) + 1 if n else 0
    table = items.table
    has_number = events["VALUENUM"].is_valid()

    # Per draw: who ordered it, its priority, when it was stored (10 min to 6 h after it was charted).
    provider = np.where(rng.random(n_draws) < PROVIDER_SHARE, rng.integers(10_000, 99_999, n_draws), -1)
    provider_text = pc.binary_join_element_wise("P", pa.array(provider[draw]).cast(pa.string()), "")
    provider_text = pc.if_else(pa.array(provider[draw] < 0), pa.scalar(None, pa.string()), provider_text)
    priority = pick(rng, PRIORITY, n_draws)[draw]
    stored = pc.add(pc.cast(events["CHARTTIME"], pa.timestamp("s")),
                    pa.array((rng.integers(10, 6 * 60, n_draws)[draw] * 60).astype("timedelta64[s]")))

    # Reference ranges on most rows with a number; results only in comments; comments beside values.
    none = pa.scalar(None, pa.string())
    dec = table["DEC"].to_numpy(float)[item].astype(np.int64)
    lo, hi = table["LO"].to_numpy(float)[item], table["HI"].to_numpy(float)[item]
    known = np.isfinite(lo) & np.isfinite(hi) & (lo < hi)  # the sample's real items without a range get none
    with_range = pc.and_(has_number, pa.array(known & (rng.random(n) < REF_RANGE_SHARE)))
    lower = pc.if_else(with_range, fixed(np.where(known, lo, 0.0), dec), none)
    upper = pc.if_else(with_range, fixed(np.where(known, hi, 0.0), dec), none)
    u = rng.random(n)
    only_comment = pa.array(u < COMMENT_ONLY_SHARE)
    beside = pa.array((u >= COMMENT_ONLY_SHARE) & (u < COMMENT_ONLY_SHARE + COMMENT_BESIDE_SHARE))
    comments = pc.if_else(only_comment, pa.array(pick(rng, COMMENT_RESULTS, n), pa.string()),
                          pc.if_else(beside, pa.array(pick(rng, COMMENTS_BESIDE, n), pa.string()),
                                     pa.scalar(None, pa.string())))
    flag = events["FLAG"]
    return pa.table({
        "labevent_id": events["ROW_ID"],
        "subject_id": pc.add(events["SUBJECT_ID"], MIMIC4_SUBJECT_BASE),
        "hadm_id": pc.add(events["HADM_ID"], MIMIC4_HADM_BASE),
        "specimen_id": pa.array(draw + first_specimen),
        "itemid": events["ITEMID"],
        "order_provider_id": provider_text,
        "charttime": events["CHARTTIME"],
        "storetime": stored.cast(pa.string()),
        "value": pc.if_else(only_comment, none, events["VALUE"]),
        "valuenum": pc.if_else(only_comment, none, events["VALUENUM"]),
        "valueuom": pc.if_else(only_comment, none, events["VALUEUOM"]),
        "ref_range_lower": pc.if_else(only_comment, none, lower),
        "ref_range_upper": pc.if_else(only_comment, none, upper),
        "flag": pc.if_else(pc.or_kleene(only_comment, pc.equal(flag, "delta")), none, flag),  # MIMIC-IV has no 'delta'
        "priority": pc.if_else(pa.array(priority == ""), none, pa.array(priority, pa.string())),
        "comments": comments,
    })
