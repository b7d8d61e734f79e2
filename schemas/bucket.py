"""Bucketed lab rows: a whole-interval timestep since the start of the admission day."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa
from pandera.typing import Series

from schemas.fill import FilledEvents


class BucketedEvents(FilledEvents):
    """TIMESTEP: int64 >= 0 (the upper bound is checked by the stage against its configured maximum)."""

    TIMESTEP: Series[np.int64] = pa.Field(ge=0)
