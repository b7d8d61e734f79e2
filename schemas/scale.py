"""Scaled lab rows: Z finite for every row with a number, null for categorical rows."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.encode import EncodedEvents


class ScaledEvents(EncodedEvents):
    """Z: the z-score of VALUENUM with train-fitted stats (float64, finite)."""

    Z: Series[float] = pa.Field(nullable=True, finite=())

    @pa.dataframe_check(name="numbers_have_z")
    def numbers_have_z(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["VALUENUM"].isna() | frame["Z"].notna()
