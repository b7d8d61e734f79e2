"""What the text stage hands on: the raw lab rows, with the censored and coded text of numeric items as numbers and
the words of ordinal items as their ranks."""

from __future__ import annotations

import numpy as np
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import INFO, WARNING, CheckInfo
from schemas.raw import ABOUT, LabEvents

CENSORED = "Z_CENSORED"  # the censoring mark: -1 at most the value, +1 at least, 0 a plain number (an edge feature)

CHECKS = (  # what the text stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("censored_value", "text", INFO, "censored results ('<x', '>x') of numeric items read as x",
              "Beyond the assay's range, they are kept at their bound and marked Z_CENSORED (-1: at most, +1: at "
              "least) in edge_attr; [clean] censored = false leaves them as text (quarantined by clean)."),
    CheckInfo("mapped_text_value", "text", INFO, "words of numeric items mapped to numbers by [clean] text_values",
              "Declared in [clean.text_values] ('NEG' = 0 by default); words not declared stay text and are "
              "quarantined by clean (mixed_item_text)."),
    CheckInfo("ranked_value", "text", INFO, "words of ordinal items read as their rank",
              "An item that is not numeric and whose results are all words of one ordered scale of [clean.ordinal] "
              "('NONE', 'FEW', 'MOD', 'MANY') is ordinal: each result is its rank (0 for the lowest level), "
              "z-scored like a number; declare a scale there to read another item's words so."),
    CheckInfo("biased_item", "text", WARNING, "numeric items that keep less than [clean] min_kept_share of their results",
              "Such an item is numeric (it has a number other than 0), and the rest of its results are text the "
              "text stage could not read (quarantined as mixed_item_text): what it keeps is a biased sample. Declare "
              "its words' numbers in [clean.text_values], or lower [clean] min_kept_share once you have looked."),
)


class TextEvents(LabEvents):
    """Raw lab rows with Z_CENSORED: -1, 0 or +1 on every row."""

    Z_CENSORED: Series[np.int8] = pa.Field(isin=(-1, 0, 1), description=ABOUT["Z_CENSORED"])
