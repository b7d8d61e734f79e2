"""Bucketed lab rows: a whole-interval timestep since the start of the admission day."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import INFO, WARNING, CheckInfo
from schemas.fill import FilledEvents
from schemas.raw import ABOUT

CHECKS = (  # what the bucket stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("before_admission", "bucket", INFO, "lab rows charted before the admission day",
              "Before their admission's ED stay too (EDREGTIME, else [bucket] ed_hours before ADMITTIME): another "
              "encounter's labs, or a broken time. They have no timestep and are quarantined."),
    CheckInfo("from_ed_stay", "bucket", INFO, "lab rows drawn in the ED stay before the admission day",
              "Emergency department labs belong to their admission. [bucket] ed_hours = 0 "
              "quarantines them as before_admission instead."),
    CheckInfo("after_discharge", "bucket", INFO, "lab rows charted after discharge",
              "More than [bucket] after_discharge_hours after DISCHTIME: quarantined or clipped by late_policy."),
    CheckInfo("beyond_max_stay", "bucket", WARNING, "lab rows more than max_stay_days after the admission day",
              "No real stay lasts that long: a DISCHTIME or CHARTTIME with a broken year. Quarantined; repair "
              "the dates, or raise [bucket] max_stay_days if the stay is real."),
    CheckInfo("beyond_max_timestep", "bucket", INFO, "lab rows past the deliberate [bucket] max_timestep",
              "The horizon was capped on purpose; set max_timestep = \"none\" to keep every day of a stay."),
)


class BucketedEvents(FilledEvents):
    """TIMESTEP: int64 >= 0 (the upper bound is checked by the stage against its configured maximum)."""

    TIMESTEP: Series[np.int64] = pa.Field(ge=0, description=ABOUT["TIMESTEP"])
