"""The shards' partials put together (:class:`Combined`): per split and code the rows, per code the float64 two-pass
reference (Chan's merge of each shard's count, mean and centred sum of squares), MEDS-Transforms' own float32 fit
(:func:`pipeline.meds.formula.reduce_shards`, in its shard order), and per subject its shards and splits. The
result does not depend on the order the partials come in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from pipeline.meds.formula import Fitted, reduce_shards
from pipeline.meds.shards import CODE_COLUMNS, SUBJECT_COLUMNS, ShardPartial, no_rows

_COUNTS = ["rows", "numeric", "nan", "inf", "beyond", "text_only"]


@dataclass(frozen=True)
class Combined:
    """``shards``: the read partials by name (sorted); ``by_split``: per (split, code) the counts of
    :data:`pipeline.meds.shards.CODE_COLUMNS`; ``codes``: per code those counts over every split, finite min and
    max, and the reference ``fit_n``, ``mean64``, ``std64`` (population, float64, two-pass) of its fitted values;
    ``fitted``: MEDS-Transforms' fit; ``subjects``: :func:`subject_places`."""

    shards: dict[str, ShardPartial]
    by_split: pd.DataFrame
    codes: pd.DataFrame
    fitted: Fitted
    subjects: pd.DataFrame


def combine(partials: Iterable[ShardPartial]) -> Combined:
    """Every read shard's partial, put together (shards that could not be read or checked are left out)."""
    shards = {p.name: p for p in sorted(partials, key=lambda p: p.name) if p.unreadable is None and p.schema is None}
    frames = [p.codes.assign(split=p.split, shard=p.name) for p in shards.values() if len(p.codes)]
    rows = (pd.concat(frames).rename_axis("code").reset_index() if frames
            else no_rows({"code": "str", "split": "str", "shard": "str"} | CODE_COLUMNS))
    by_split = rows.groupby(["split", "code"], sort=True)[_COUNTS].sum()
    codes = rows.groupby("code", sort=True).agg(**{c: (c, "sum") for c in _COUNTS}, min=("min", "min"),
                                                 max=("max", "max"))
    codes = codes.join(reference(rows))
    fitted = reduce_shards({name: p.fitted for name, p in shards.items() if p.fitted is not None})
    return Combined(shards, by_split, codes, fitted, subject_places(shards.values()))


def reference(rows: pd.DataFrame) -> pd.DataFrame:
    """Per code, the shards' float64 (n, mean, centred sum of squares) merged exactly in the parallel form (Chan et
    al.): ``fit_n``, ``mean64`` and ``std64``, the population std of the fitted values, NaN without any."""
    n = rows["fit_n"].astype(np.float64)
    mean = rows["fit_mean"].fillna(0.0).astype(np.float64)
    parts = pd.DataFrame({"code": rows["code"], "n": n, "sum": n * mean, "m2": rows["fit_m2"].fillna(0.0)})
    totals = parts.groupby("code", sort=True)[["n", "sum", "m2"]].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        totals["mean64"] = totals["sum"] / totals["n"]
        spread = (mean - rows["code"].map(totals["mean64"]).to_numpy(np.float64)) ** 2 * n
        totals["m2"] += spread.groupby(rows["code"]).sum()
        totals["std64"] = np.sqrt(totals["m2"] / totals["n"])
    return totals.assign(fit_n=totals["n"].astype(np.int64))[["fit_n", "mean64", "std64"]]


def subject_places(shards: Iterable[ShardPartial]) -> pd.DataFrame:
    """Per subject: rows, first and last time, out of order in any shard, how many shards and splits hold its
    rows and the first and last of each by name."""
    frames = [p.subjects.assign(shard=p.name, split=p.split) for p in shards if len(p.subjects)]
    spans = (pd.concat(frames, ignore_index=True) if frames
             else no_rows(SUBJECT_COLUMNS | {"shard": "str", "split": "str"}))
    groups = spans.groupby("subject_id", sort=True)
    return groups.agg(rows=("rows", "sum"), first_time=("first_time", "min"), last_time=("last_time", "max"),
                      out_of_order=("out_of_order", "any"),
                      shards=("shard", "nunique"), shard=("shard", "min"), last_shard=("shard", "max"),
                      splits=("split", "nunique"), split=("split", "min"), last_split=("split", "max"))
