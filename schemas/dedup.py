"""Edge rows: one per (HADM_ID, TIMESTEP, ITEMID), the input of the graph stage."""

from __future__ import annotations

from schemas.bucket import BucketedEvents
from schemas.catalogue import INFO, CheckInfo

CHECKS = (  # what the dedup stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("merged", "dedup", INFO, "rows merged into one per (HADM_ID, timestep, ITEMID)",
              "The latest CHARTTIME is kept; ties are broken by value, deterministically."),
    CheckInfo("below_min_timesteps", "dedup", INFO, "lab rows of admissions with fewer than min_timesteps",
              "Their admission is left out of the graphs ([graph] min_timesteps); lower it to keep them."),
    # The admissions its reason leaves out of every graph (its Drop): reported by the run's admission ledger.
    CheckInfo("admission_below_min_timesteps", "flow", INFO, "admissions with fewer timesteps than min_timesteps",
              "Left out of the graphs on purpose ([graph] min_timesteps)."),
)


class EdgeRows(BucketedEvents):
    """Deduplicated lab rows, sorted by split, admission, timestep and item."""

    class Config:
        strict = False
        unique = ["HADM_ID", "TIMESTEP", "ITEMID"]
