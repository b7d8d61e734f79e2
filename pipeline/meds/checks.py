"""The findings of a MEDS dataset, one function per check (``schemas/meds.py`` declares them): each reads the
combined shards (:class:`pipeline.meds.combine.Combined`) or the readiness table
(:func:`pipeline.meds.normalization.readiness`) and names at most :data:`pipeline.reporting.findings.LISTED` codes or
subjects in its message, the most rows first."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from pipeline.reporting.findings import Finding, format_items, summary_finding
from pipeline.meds.combine import Combined
from pipeline.meds.compare import Comparison
from pipeline.meds.shards import ShardPartial
from schemas.meds import STAGE

CODES = "codes.parquet"
SPLITS = "subject_splits.parquet"


def listed(counts: pd.Series, *, unit: str = "row", why: pd.Series | None = None) -> str:
    """``'A (3 rows; why), B (1 row) +4 more in the JSON report'``: :func:`pipeline.reporting.findings.format_items` of
    ``counts`` (name -> count), the most first, ties by name; the finding keeps every one (:func:`_finding`'s
    ``named``)."""
    return format_items(counts.sort_index(), unit=unit, why=None if why is None else lambda name: why.get(name) or "")


def _finding(check: str, table: str | None, column: str | None, count: int, message: str,
             named: pd.Series | None = None) -> Finding:
    """A finding of the MEDS stage; ``named``: the counts its message lists (:func:`listed`), every name kept in
    its ``items`` (codes or subject ids), in the same order."""
    return summary_finding(stage=STAGE, check=check, table=table, column=column, count=count, message=message,
                           items=None if named is None else named.sort_index())


# -- shards and splits -------------------------------------------------------------------------------------------
def cannot_read(partials: Iterable[ShardPartial], shards: int) -> list[Finding]:
    """No shard at all (``file_missing``), or a shard that cannot be read (``file_unreadable``): exit 2."""
    if shards == 0:
        return [summary_finding(stage="load", check="file_missing", table="data", column=None, count=1,
                                message="no .parquet shard under data/ (a MEDS dataset keeps them in "
                                        "data/{split}/*.parquet)")]
    return [summary_finding(stage="load", check="file_unreadable", table=p.name, column=None, count=1,
                            message=f"{p.path} could not be read as Parquet ({p.unreadable})")
            for p in partials if p.unreadable is not None]


def schema(partials: Iterable[ShardPartial]) -> list[Finding]:
    """``meds_schema``: each shard meds' DataSchema refuses."""
    return [_finding("meds_schema", p.name, None, p.schema_rows, f"{p.schema_rows:,} of {p.rows:,} rows fail "
                     f"meds.DataSchema: {p.schema}") for p in partials if p.schema is not None]


def empty(partials: list[ShardPartial], assigned: pd.Series | None) -> list[Finding]:
    """``meds_split_empty``: a split that subject_splits.parquet or a shard names with no row; else
    ``meds_shard_empty``: each shard with no row in a split that has rows."""
    read = [p for p in partials if p.unreadable is None]
    rows = pd.Series({p.name: p.rows for p in read}, dtype=np.int64)
    split_of = pd.Series({p.name: p.split for p in read}, dtype=object)
    per_split = rows.groupby(split_of).sum() if len(rows) else pd.Series(dtype=np.int64)
    named = assigned.value_counts() if assigned is not None else pd.Series(dtype=np.int64)
    splits = sorted(set(per_split.index) | set(named.index))
    found = []
    for split in splits:
        if per_split.get(split, 0) == 0:
            subjects = int(named.get(split, 0))
            said = (f"though {SPLITS} puts {subjects:,} subjects there" if assigned is not None
                    else f"and no {SPLITS} (a stage's output has none)")
            found.append(_finding("meds_split_empty", split, None, subjects if assigned is not None else 1,
                                  f"no row in split {split!r} ({(split_of == split).sum()} shard(s)), {said}"))
    for name in rows.index[(rows == 0) & split_of.map(per_split).gt(0)]:
        found.append(_finding("meds_shard_empty", name, None, 1, f"shard {name} has no row"))
    return found


# -- subjects ----------------------------------------------------------------------------------------------------
def subjects(combined: Combined, assigned: pd.Series | None) -> list[Finding]:
    """``meds_subject_shards``, ``meds_subject_split`` and ``meds_subject_order``."""
    places = combined.subjects
    found = []
    spread = places[places["shards"] > 1]
    if len(spread):
        why = spread["shard"] + " .. " + spread["last_shard"]
        found.append(_finding("meds_subject_shards", "data", "subject_id", len(spread),
                              f"{len(spread):,} subject(s) with rows in more than one shard: "
                              f"{listed(spread['rows'], why=why)}", named=spread['rows']))
    expected = places.index.map(assigned) if assigned is not None else places["split"]
    wrong = places[(places["splits"] > 1) | (places["split"] != expected)]
    if len(wrong):
        said = pd.Series(expected, index=places.index).loc[wrong.index].fillna("no split").astype(str)
        given = SPLITS + ": " + said if assigned is not None else f"no {SPLITS}"
        why = "rows in " + wrong["split"] + " .. " + wrong["last_split"] + ", " + given
        found.append(_finding("meds_subject_split", SPLITS, "split", len(wrong),
                              f"{len(wrong):,} subject(s) with rows outside the split {SPLITS} gives them: "
                              f"{listed(wrong['rows'], why=why)}", named=wrong['rows']))
    unsorted = places[places["out_of_order"].astype(bool)]
    if len(unsorted):
        found.append(_finding("meds_subject_order", "data", "time", len(unsorted),
                              f"{len(unsorted):,} subject(s) whose rows in a shard are not one run sorted by time: "
                              f"{listed(unsorted['rows'], why=unsorted['shard'])}", named=unsorted['rows']))
    return found


# -- codes and values --------------------------------------------------------------------------------------------
def unlisted(combined: Combined, known: pd.Index | None) -> list[Finding]:
    """``meds_code_unlisted``: codes of the data (of a normalized folder: vocabulary indices) not in codes.parquet."""
    table = combined.codes
    missing = table[~table.index.isin(known)] if known is not None else table
    if not len(missing):
        return []
    absent = "" if known is not None else f" ({CODES} is absent)"
    return [_finding("meds_code_unlisted", CODES, "code", len(missing),
                     f"{len(missing):,} code(s) in the data not in {CODES}{absent}: {listed(missing['rows'])}",
                     named=missing["rows"])]


def codes(combined: Combined, known: pd.Index | None) -> list[Finding]:
    """``meds_code_unlisted``, ``meds_code_mixed`` and ``meds_code_unseen``."""
    table, found = combined.codes, unlisted(combined, known)
    mixed = table[(table["numeric"] > 0) & (table["text_only"] > 0)]
    if len(mixed):
        found.append(_finding("meds_code_mixed", "data", "text_value", int(mixed["text_only"].sum()),
                              f"{int(mixed['text_only'].sum()):,} rows with text and no numeric_value in "
                              f"{len(mixed)} code(s) that have numbers: "
                              f"{listed(mixed['text_only'], why=mixed['numeric'].map('{:,} with numbers'.format))}",
                              named=mixed["text_only"]))
    unseen = table[~table.index.isin(combined.fitted.codes)]
    if len(unseen):
        rows = combined.by_split["rows"].reset_index()
        rows = rows[rows["code"].isin(unseen.index) & (rows["rows"] > 0)]
        why = (rows["split"] + " " + rows["rows"].astype(str)).groupby(rows["code"]).agg(", ".join)
        found.append(_finding("meds_code_unseen", "data", "code", int(unseen["rows"].sum()),
                              f"{int(unseen['rows'].sum()):,} rows of {len(unseen)} code(s) with no row in the "
                              f"fitted (train) rows, which normalization drops: {listed(unseen['rows'], why=why)}",
                              named=unseen['rows']))
    return found


def values(combined: Combined, bound: float) -> list[Finding]:
    """``meds_value_finite`` and ``meds_value_bound``, one finding per split, listing the codes."""
    found = []
    for split, table in combined.by_split.groupby(level="split", sort=True):
        table = table.droplevel("split")
        bad = table["nan"] + table["inf"]
        if bad.sum():
            why = "inf " + table["inf"].astype(str) + ", NaN " + table["nan"].astype(str)
            found.append(_finding("meds_value_finite", split, "numeric_value", int(bad.sum()),
                                  f"{int(bad.sum()):,} inf or NaN values: {listed(bad[bad > 0], why=why)}",
                                  named=bad[bad > 0]))
        beyond = table["beyond"][table["beyond"] > 0]
        if len(beyond):
            found.append(_finding("meds_value_bound", split, "numeric_value", int(beyond.sum()),
                                  f"{int(beyond.sum()):,} values beyond +-{bound:g}: {listed(beyond)}", named=beyond))
    return found


# -- normalization readiness -------------------------------------------------------------------------------------
def normalization(ready: pd.DataFrame, bound: float) -> list[Finding]:
    """``meds_z_non_finite``: the codes whose z will be NaN or inf, with why; ``meds_z_noise``: the codes of equal
    train values whose std is a positive rounding residue (their z finite noise here, NaN or inf at another scale);
    ``meds_z_bound``: the other codes whose finite |z| will pass ``bound``. A code is in one of them at most."""
    found = []
    broken = ready[ready["non_finite"] > 0]
    if len(broken):
        rows = int(broken["non_finite"].sum())
        found.append(_finding("meds_z_non_finite", CODES, "values/std", rows,
                              f"{rows:,} rows of {len(broken)} code(s) will get a NaN or inf z from MEDS-Transforms' "
                              f"normalization: {listed(broken['non_finite'], why=broken['why'])}",
                              named=broken['non_finite']))
    noise = ready[ready["noise"]]
    if len(noise):
        rows, numeric = int(noise["numeric"].sum()), noise["numeric"].astype(np.int64)
        z = noise["z_max"].map("{:,.0f}".format)
        found.append(_finding("meds_z_noise", CODES, "values/std", rows,
                              f"{rows:,} rows of {len(noise)} code(s) whose train values are all equal will get a "
                              f"finite z of rounding noise from MEDS-Transforms' normalization: "
                              f"{listed(numeric, why='largest |z| ' + z + '; ' + noise['why'])}",
                              named=numeric))
    large = ready[(ready["z_max"] > bound) & ~ready["noise"]]
    if len(large):
        z = large["z_max"].map("{:,.0f}".format)
        found.append(_finding("meds_z_bound", CODES, "values/std", len(large),
                              f"{len(large)} code(s) whose largest |z| will pass {bound:g}: "
                              f"{listed(large['numeric'], why='|z| ' + z + '; ' + large['why'])}",
                              named=large['numeric']))
    return found


# -- the output of MEDS-Transforms' normalization ----------------------------------------------------------------
def normalized(combined: Combined, bound: float) -> list[Finding]:
    """``meds_normalized_non_finite``: every code with a NaN or inf z, its rows per split; ``meds_normalized_bound``:
    every code with a finite |z| beyond ``bound`` ([scale] warn_bound), its largest |z|."""
    by_split = combined.by_split
    bad = (by_split["nan"] + by_split["inf"]).rename("bad").reset_index()
    bad = bad[bad["bad"] > 0]
    found = []
    if len(bad):
        per_code = bad.groupby("code", sort=True)["bad"].sum()
        table = combined.codes.loc[per_code.index]
        why = ("NaN " + table["nan"].map("{:,}".format) + ", inf " + table["inf"].map("{:,}".format) + "; "
               + (bad["split"] + " " + bad["bad"].map("{:,}".format)).groupby(bad["code"]).agg(", ".join))
        rows = int(per_code.sum())
        found.append(_finding("meds_normalized_non_finite", "data", "numeric_value", rows,
                              f"{rows:,} normalized values (z) NaN or inf in {len(per_code)} code(s): "
                              f"{listed(per_code, why=why)}", named=per_code))
    beyond = combined.codes[combined.codes["beyond"] > 0]
    if len(beyond):
        largest = np.maximum(beyond["max"].abs(), beyond["min"].abs()).map("largest |z| {:,.1f}".format)
        rows = int(beyond["beyond"].sum())
        found.append(_finding("meds_normalized_bound", "data", "numeric_value", rows,
                              f"{rows:,} normalized values (z) in {len(beyond)} code(s) with |z| beyond {bound:g}: "
                              f"{listed(beyond['beyond'], why=largest)}", named=beyond['beyond']))
    return found


# -- two folders, before and after a stage -----------------------------------------------------------------------
def compared(comparison: Comparison) -> list[Finding]:
    """``meds_compare_split_emptied``: a split with rows before and none after; ``meds_compare_codes_dropped``:
    codes with rows before and none after, where no stage marked done in AFTER/.logs is a filter (a stage whose
    name starts with ``filter``, which declares that it drops rows)."""
    splits, found = comparison.splits, []
    emptied = splits[(splits["rows_before"] > 0) & (splits["rows_after"] == 0)]
    for split, row in emptied.iterrows():
        found.append(_finding("meds_compare_split_emptied", split, None, int(row["rows_before"]),
                              f"split {split!r} had {row['rows_before']:,} rows of {row['subjects_before']:,} "
                              f"subjects in {comparison.before} and has none in {comparison.after}"))
    filters = [stage for stage in comparison.stages if stage.startswith("filter")]
    dropped = comparison.dropped
    if len(dropped) and not filters:
        stages = ", ".join(comparison.stages) if comparison.stages else "none marked in .logs/"
        found.append(_finding("meds_compare_codes_dropped", "data", "code", int(dropped.sum()),
                              f"{int(dropped.sum()):,} rows of {len(dropped)} code(s) in {comparison.before} are "
                              f"gone from {comparison.after}, and no stage that ran is a filter (stages: {stages}): "
                              f"{listed(dropped)}", named=dropped))
    return found
