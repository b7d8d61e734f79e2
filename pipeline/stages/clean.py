"""Clean stage: set aside what cannot enter a graph, and classify every lab item.

Lab rows without HADM_ID (outpatient), rows that failed a raw check, rows of an
admission or item that failed one, are quarantined with a reason. Every ITEMID
is then numeric (all its rows with a result have VALUENUM), categorical (none
has) or mixed; the text rows of mixed items ('<0.01', 'See Comments') are
quarantined. A row with neither VALUE nor VALUENUM is of a class of its own,
never text: MIMIC-IV writes some results only in COMMENTS, and such a row
becomes what ``empty_value`` declares; a row without a comment either has no
result and is quarantined. COMMENTS (free text) goes no further than this stage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pipeline.findings import item_names
from pipeline.quarantine import Kept, set_aside
from schemas.clean import CleanAdmissions, CleanEvents, CleanLabItems
from schemas.guard import guarded
from schemas.raw import Admissions, LabEvents, LabItems

if TYPE_CHECKING:
    from pipeline.stages import Context

STAGE = "clean"
OUTPATIENT = "outpatient lab (no HADM_ID)"
RAW_ERROR = "failed raw check"
ADMISSION_REJECTED = "admission failed a raw check"
ITEM_REJECTED = "lab item failed a raw check"
MIXED_TEXT = "non-numeric value in numeric item"
IN_COMMENTS = "result only in comments"
NO_RESULT = "no result"
EMPTY_VALUE_POLICIES = ("quarantine", "category")


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
def clean_events(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                 empty_value: str = "quarantine") -> Kept:
    """Inpatient lab rows with valid keys and a result, each with the KIND of its item.

    ``admissions`` and ``labitems`` are the clean tables: rows referring to a
    rejected admission or item are quarantined with that reason. ``empty_value``
    says what a row whose result is only in COMMENTS becomes: "quarantine", or
    "category" (the comment is its categorical VALUE and the row's KIND is categorical).
    """
    if empty_value not in EMPTY_VALUE_POLICIES:
        raise ValueError(f"empty_value must be one of {', '.join(EMPTY_VALUE_POLICIES)}, got {empty_value!r}")
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
    empty = events["VALUE"].isna() & events["VALUENUM"].isna()
    commented = empty & events["COMMENTS"].notna() if "COMMENTS" in events else pd.Series(False, index=events.index)
    filters = [(NO_RESULT, empty & ~commented)]
    if empty_value == "category" and commented.any():
        events = events.assign(VALUE=events["VALUE"].mask(commented, events["COMMENTS"]),
                               KIND=events["KIND"].mask(commented, "categorical"))
    elif empty_value == "quarantine":
        filters.append((IN_COMMENTS, commented))
    # A class of rows that does not occur adds no step: data without empty values keeps its attrition as it was.
    filters = [(reason, mask) for reason, mask in filters if mask.any()]
    filters.append((MIXED_TEXT, (events["KIND"] == "mixed") & events["VALUENUM"].isna()))
    results = set_aside(events.drop(columns="COMMENTS", errors="ignore"), filters, stage=STAGE,
                        columns={NO_RESULT: "VALUE", IN_COMMENTS: "VALUE", MIXED_TEXT: "VALUENUM"})
    return Kept(frame=results.frame, quarantine=pd.concat([kept.quarantine, results.quarantine]),
                steps=kept.steps + results.steps)


def item_kinds(events: pd.DataFrame) -> pd.Series:
    """Per row, the kind of its item: numeric (every row with a result has VALUENUM), categorical (none) or
    mixed. Rows with neither VALUE nor VALUENUM have no say (without a VALUE column every row has); an item with
    only such rows is categorical."""
    has_result = events["VALUENUM"].notna() | events["VALUE"].notna() if "VALUE" in events else \
        pd.Series(True, index=events.index)
    share = events["VALUENUM"].notna()[has_result].groupby(events["ITEMID"][has_result]).mean()
    per_item = pd.Series(np.select([share == 1.0, share == 0.0], ["numeric", "categorical"], default="mixed"),
                         index=share.index, dtype="str")
    kind = per_item.reindex(events["ITEMID"].to_numpy()).fillna("categorical")
    return pd.Series(kind.to_numpy(), index=events.index, dtype="str")


def run(labevents: pd.DataFrame, context: Context) -> tuple[pd.DataFrame, Context]:
    """The stage in flow: admissions and lab items first, then the lab rows against them ([comments] options)."""
    ledger = context.ledger
    admissions = ledger.take(clean_admissions(context.tables.admissions))
    labitems = ledger.take(clean_labitems(context.tables.labitems))
    ledger.names = item_names(labitems)
    events = ledger.take(clean_events(labevents, admissions, labitems, empty_value=context.options.empty_value))
    return events, replace(context, admissions=admissions, labitems=labitems)
