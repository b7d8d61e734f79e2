"""Edge rows: one per (HADM_ID, TIMESTEP, ITEMID), the input of the graph stage."""

from __future__ import annotations


from schemas.bucket import BucketedEvents


class EdgeRows(BucketedEvents):
    """Deduplicated lab rows, sorted by split, admission, timestep and item."""

    class Config:
        strict = False
        unique = ["HADM_ID", "TIMESTEP", "ITEMID"]
