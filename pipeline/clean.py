"""Clean stage: set aside what cannot enter a graph, and classify every lab item.

Lab rows without HADM_ID (outpatient), rows that failed a raw check, rows of an
admission or item that failed one, are quarantined with a reason. Every ITEMID
is then numeric (all its rows have VALUENUM), categorical (none has) or mixed;
the text rows of mixed items ('<0.01', 'See Comments') are quarantined.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.quarantine import Kept, set_aside
from schemas.clean import CleanAdmissions, CleanEvents, CleanLabItems
from schemas.guard import guarded
from schemas.raw import Admissions, LabEvents, LabItems

STAGE = "clean"
OUTPATIENT = "outpatient lab (no HADM_ID)"
RAW_ERROR = "failed raw check"
ADMISSION_REJECTED = "admission failed a raw check"
ITEM_REJECTED = "lab item failed a raw check"
MIXED_TEXT = "non-numeric value in numeric item"


@guarded(stage=STAGE, takes=Admissions, gives=CleanAdmissions)
def clean_admissions(admissions: pd.DataFrame) -> Kept:
    """Admissions whose key and times passed the raw checks; the others are quarantined."""
    kept = set_aside(admissions, [(RAW_ERROR, admissions["REJECT"].notna())], stage=STAGE, table="ADMISSIONS",
                     columns={RAW_ERROR: "REJECT"})
    frame = kept.frame.drop(columns="REJECT").astype({"HADM_ID": "int64"})
    return Kept(frame=frame, quarantine=kept.quarantine, steps=kept.steps)


@guarded(stage=STAGE, takes=LabItems, gives=CleanLabItems)
def clean_labitems(labitems: pd.DataFrame) -> Kept:
    """Lab items whose ITEMID passed the raw checks; the others are quarantined."""
    kept = set_aside(labitems, [(RAW_ERROR, labitems["REJECT"].notna())], stage=STAGE, table="D_LABITEMS",
                     columns={RAW_ERROR: "REJECT"})
    frame = kept.frame.drop(columns="REJECT").astype({"ITEMID": "int64"})
    return Kept(frame=frame, quarantine=kept.quarantine, steps=kept.steps)


@guarded(stage=STAGE, takes=LabEvents, gives=CleanEvents)
def clean_events(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame) -> Kept:
    """Inpatient lab rows with valid keys, each with the KIND of its item.

    ``admissions`` and ``labitems`` are the clean tables: rows referring to a
    rejected admission or item are quarantined with that reason.
    """
    kept = set_aside(labevents, [
        (OUTPATIENT, labevents["HADM_ID"].isna() & labevents["REJECT"].isna()),
        (RAW_ERROR, labevents["REJECT"].notna()),
        (ADMISSION_REJECTED, ~labevents["HADM_ID"].isin(admissions["HADM_ID"])),
        (ITEM_REJECTED, ~labevents["ITEMID"].isin(labitems["ITEMID"])),
    ], stage=STAGE, columns={OUTPATIENT: "HADM_ID", RAW_ERROR: "REJECT", ADMISSION_REJECTED: "HADM_ID",
                             ITEM_REJECTED: "ITEMID"})
    events = kept.frame.drop(columns=["REJECT", "SUBJECT_ID"], errors="ignore")
    events = events.astype({"HADM_ID": "int64", "ITEMID": "int64"})
    events = events.assign(KIND=item_kinds(events))
    mixed = set_aside(events, [(MIXED_TEXT, (events["KIND"] == "mixed") & events["VALUENUM"].isna())], stage=STAGE,
                      columns={MIXED_TEXT: "VALUENUM"})
    return Kept(frame=mixed.frame, quarantine=pd.concat([kept.quarantine, mixed.quarantine]),
                steps=kept.steps + mixed.steps)


def item_kinds(events: pd.DataFrame) -> pd.Series:
    """Per row, the kind of its item: numeric (every row has VALUENUM), categorical (none) or mixed."""
    share = events["VALUENUM"].notna().groupby(events["ITEMID"]).mean()
    per_item = pd.array(np.select([share == 1.0, share == 0.0], ["numeric", "categorical"], default="mixed"),
                        dtype="str")
    kind = per_item.take(share.index.get_indexer(events["ITEMID"]))
    return pd.Series(kind, index=events.index, dtype="str")
