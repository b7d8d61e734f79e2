"""Dedup stage: one row per (HADM_ID, TIMESTEP, ITEMID), keeping the latest CHARTTIME.

Ties on CHARTTIME are broken by the row's content (VALUENUM, VALUE, FLAG), so
the kept row never depends on input order. The output is sorted by split,
admission, timestep and item: the order the graph stage slices by offsets.
"""

from __future__ import annotations

import pandas as pd

from pipeline.quarantine import Kept, Step
from schemas.bucket import BucketedEvents
from schemas.dedup import EdgeRows
from schemas.guard import guarded

STAGE = "dedup"
KEY = ["HADM_ID", "TIMESTEP", "ITEMID"]
SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}


@guarded(stage=STAGE, takes=BucketedEvents, gives=EdgeRows)
def dedup(events: pd.DataFrame) -> Kept:
    """The latest row of each (HADM_ID, TIMESTEP, ITEMID); merged rows are counted, not quarantined."""
    split_order = pd.Categorical(events["SPLIT"], categories=list(SPLIT_ORDER)).codes
    ordered = events.assign(_SPLIT=split_order).sort_values(
        ["_SPLIT", *KEY, "CHARTTIME", "VALUENUM", "VALUE", "FLAG"], kind="stable", na_position="first")
    latest = ordered[~ordered.duplicated(KEY, keep="last")].drop(columns="_SPLIT")
    merged = len(events) - len(latest)
    step = Step(stage=STAGE, step="one row per (HADM_ID, TIMESTEP, ITEMID)", rows_in=len(events),
                rows_out=len(latest), merged=merged)
    return Kept(frame=latest, steps=(step,))
