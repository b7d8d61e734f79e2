"""What the text stage hands on: the raw lab rows, with the censored and coded text of numeric items as numbers."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import INFO, CheckInfo
from schemas.raw import ABOUT, LabEvents

CENSORED = "Z_CENSORED"  # the censoring mark: -1 at most the value, +1 at least, 0 a plain number (an edge feature)

CHECKS = (  # what the text stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("censored_value", "text", INFO, "censored results ('<x', '>x') of numeric items read as x",
              "Beyond the assay's range, they are kept at their bound and marked Z_CENSORED (-1: at most, +1: at "
              "least) in edge_attr; [clean] censored = false leaves them as text (quarantined by clean)."),
    CheckInfo("mapped_text_value", "text", INFO, "words of numeric items mapped to numbers by [clean] text_values",
              "Declared in [clean.text_values] ('NEG' = 0 by default); words not declared stay text and are "
              "quarantined by clean (mixed_item_text)."),
)


class TextEvents(LabEvents):
    """Raw lab rows with Z_CENSORED: -1, 0 or +1 on every row."""

    Z_CENSORED: Series[np.int8] = pa.Field(isin=(-1, 0, 1), description=ABOUT["Z_CENSORED"])
