"""Filled lab rows: no nulls left in a column that becomes a tensor."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, INFO, STOPS, CheckInfo
from schemas.raw import ABOUT
from schemas.scale import ScaledEvents

CHECKS = (  # what the fill stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("filled", "fill", INFO, "missing values filled by the declared policy",
              "Declared in [fill]; indicator = true in [fill.<column>] adds a column that shows the model what was "
              "filled."),
    CheckInfo("structural_fill", "fill", INFO, "values a row does not have by construction, filled",
              "Not missing data: a numeric row has no category (CODE) and a categorical row no number (Z); "
              "the declared [fill] value stands in, and the row's other column carries its result."),
    CheckInfo("fill_collides", "fill", ERROR, "fill value that equals a real code",
              "A filled value must not pose as a real category; fill codes with 0 (reserved).", locked=STOPS),
    CheckInfo("fill_left_nulls", "fill", ERROR, "nulls left in a column that becomes a tensor",
              "Declare a fill policy for the column in [fill].", locked=STOPS),
)


TENSOR_COLUMNS = ("CODE", "Z")


class FilledEvents(ScaledEvents):
    """Z and CODE are complete; ``*_MISSING`` indicator columns, when asked for, are 0/1."""

    CODE: Series[pd.Int64Dtype] = pa.Field(nullable=False, ge=0, description=ABOUT["CODE"] + ", filled")
    Z: Series[float] = pa.Field(nullable=False, finite=(), description=ABOUT["Z"] + ", filled")
