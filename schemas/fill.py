"""Filled lab rows: no nulls left in a column that becomes a tensor."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.scale import ScaledEvents

TENSOR_COLUMNS = ("CODE", "Z")


class FilledEvents(ScaledEvents):
    """Z and CODE are complete; ``*_MISSING`` indicator columns, when asked for, are 0/1."""

    CODE: Series[pd.Int64Dtype] = pa.Field(nullable=False, ge=0)
    Z: Series[float] = pa.Field(nullable=False, finite=())
