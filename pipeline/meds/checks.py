"""The findings of a MEDS dataset, one function per check (``schemas/meds.py`` declares them). Each puts together
the small table its check reads (per shard, split, subject or code, from the combined shards:
:class:`pipeline.meds.combine.Combined`, or the readiness table: :func:`pipeline.meds.formula.readiness`), has
pandera check it against its model in ``schemas/meds.py`` (:func:`failing`), and names at most
:data:`pipeline.reporting.findings.LISTED` of the rows that fail in its message, the most rows first."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pandas as pd
import pandera.pandas as pa

from pipeline.kernel.finding import Finding
from pipeline.meds.combine import Combined
from pipeline.meds.compare import Comparison
from pipeline.meds.metadata import Problem
from pipeline.meds.shards import ShardPartial
from pipeline.reporting.findings import format_items, summary_finding
from schemas.catalogue import CHECKS
from schemas.errors import raise_if_out_of_memory, require_validation
from schemas.guard import stage_error
from schemas.meds import (STAGE, MedsCodes, MedsCompared, MedsDropped, MedsFitted, MedsNormalized, MedsReadiness,
                          MedsShards, MedsSplits, MedsSubjects, MedsValues)

CODES = "codes.parquet"
SPLITS = "subject_splits.parquet"


def failing(model: type[pa.DataFrameModel], frame: pd.DataFrame) -> Callable[[str], np.ndarray]:
    """The rows of ``frame`` (a unique index) that fail each of ``model``'s checks, checked by pandera at once:
    ``failing(model, frame)(check)`` is a mask of the rows the check (a catalogue id) fails. A failing check that
    is no finding's (a column's type or range) means the table was put together wrong: a :class:`StageError`."""
    require_validation()
    try:
        model.validate(frame, lazy=True)
        return lambda check: np.zeros(len(frame), dtype=bool)
    except pa.errors.SchemaErrors as errors:
        raise_if_out_of_memory(errors)
        cases = errors.failure_cases
    checks = cases["check"].astype(str)
    ours = checks.map(lambda check: check in CHECKS and CHECKS[check].stage == STAGE)
    if not ours.all():
        raise stage_error(cases[~ours], stage=STAGE, side="output", model=model, frame=frame, table=None)
    failed = {check: frame.index.isin(group["index"].unique()) for check, group in cases.groupby(checks)}
    return lambda check: failed.get(check, np.zeros(len(frame), dtype=bool))


def listed(counts: pd.Series, *, unit: str = "row", why: pd.Series | None = None) -> str:
    """``'A (3 rows; why), B (1 row) +4 more in the JSON report'``: :func:`pipeline.reporting.findings.format_items`
    of ``counts`` (name -> count), the most first, ties by name; the finding keeps every one (:func:`_finding`'s
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


def metadata(problems: Iterable[Problem]) -> list[Finding]:
    """``meds_metadata``: each metadata file that cannot be read or that meds' schema refuses, read as absent."""
    return [_finding("meds_metadata", p.name, None, 1, f"{p.path}: {p.why}; the run read it as absent")
            for p in problems]


def schema(partials: Iterable[ShardPartial], *, side: str = "") -> list[Finding]:
    """``meds_schema``: each shard meds' DataSchema refuses, named as its input is (``side``: ``'before '`` for
    the folder ``--compare`` reads)."""
    return [_finding("meds_schema", f"{side}{p.name}", None, p.schema_rows, f"{p.schema_rows:,} of {p.rows:,} rows "
                     f"fail meds.DataSchema: {p.schema}") for p in partials if p.schema is not None]


def empty(partials: list[ShardPartial], assigned: pd.Series | None) -> list[Finding]:
    """``meds_split_empty``: a split that subject_splits.parquet or a shard names with no row; else
    ``meds_shard_empty``: each shard with no row in a split that has rows."""
    read = [p for p in partials if p.unreadable is None]
    rows = pd.Series({p.name: p.rows for p in read}, dtype=np.int64)
    split_of = pd.Series({p.name: p.split for p in read}, dtype=object)
    per_split = rows.groupby(split_of).sum() if len(rows) else pd.Series(dtype=np.int64)
    named = assigned.value_counts() if assigned is not None else pd.Series(dtype=np.int64)
    splits = pd.DataFrame({"rows": per_split.reindex(sorted(set(per_split.index) | set(named.index)), fill_value=0)
                           .astype(np.int64)})
    found = []
    for split in splits.index[failing(MedsSplits, splits)("meds_split_empty")]:
        subjects = int(named.get(split, 0))
        said = (f"though {SPLITS} puts {subjects:,} subjects there" if assigned is not None
                else f"and no {SPLITS} (a stage's output has none)")
        found.append(_finding("meds_split_empty", split, None, subjects if assigned is not None else 1,
                              f"no row in split {split!r} ({(split_of == split).sum()} shard(s)), {said}"))
    shards = pd.DataFrame({"split": split_of.astype(str), "rows": rows,
                           "split_rows": split_of.map(per_split).astype(np.int64)}, index=rows.index)
    for name in shards.index[failing(MedsShards, shards)("meds_shard_empty")]:
        found.append(_finding("meds_shard_empty", name, None, 1, f"shard {name} has no row"))
    return found


# -- subjects ----------------------------------------------------------------------------------------------------
def subjects(combined: Combined, assigned: pd.Series | None) -> list[Finding]:
    """``meds_subject_shards``, ``meds_subject_split`` and ``meds_subject_order``."""
    places = combined.subjects
    expected = places.index.map(assigned) if assigned is not None else places["split"]
    table = pd.DataFrame({"shards": places["shards"].astype(np.int64), "splits": places["splits"].astype(np.int64),
                          "split": places["split"].astype("str"),
                          "expected": pd.Series(expected, index=places.index, dtype="str"),  # typed with no subject too
                          "out_of_order": places["out_of_order"].astype(bool)}, index=places.index)
    failed, found = failing(MedsSubjects, table), []
    spread = places[failed("meds_subject_shards")]
    if len(spread):
        why = spread["shard"] + " .. " + spread["last_shard"]
        found.append(_finding("meds_subject_shards", "data", "subject_id", len(spread),
                              f"{len(spread):,} subject(s) with rows in more than one shard: "
                              f"{listed(spread['rows'], why=why)}", named=spread['rows']))
    wrong = places[failed("meds_subject_split")]
    if len(wrong):
        said = table["expected"].loc[wrong.index].fillna("no split").astype(str)
        given = SPLITS + ": " + said if assigned is not None else f"no {SPLITS}"
        why = "rows in " + wrong["split"] + " .. " + wrong["last_split"] + ", " + given
        found.append(_finding("meds_subject_split", SPLITS, "split", len(wrong),
                              f"{len(wrong):,} subject(s) with rows outside the split {SPLITS} gives them: "
                              f"{listed(wrong['rows'], why=why)}", named=wrong['rows']))
    unsorted = places[failed("meds_subject_order")]
    if len(unsorted):
        found.append(_finding("meds_subject_order", "data", "time", len(unsorted),
                              f"{len(unsorted):,} subject(s) whose rows in a shard are not one run sorted by time: "
                              f"{listed(unsorted['rows'], why=unsorted['shard'])}", named=unsorted['rows']))
    return found


# -- codes and values --------------------------------------------------------------------------------------------
def code_table(combined: Combined, known: pd.Index | None) -> tuple[pd.DataFrame, Callable[[str], np.ndarray]]:
    """Per code: its counts and whether codes.parquet (or a normalized folder's vocabulary: ``known``) lists it;
    and which rows fail which of its checks."""
    codes = combined.codes
    table = pd.DataFrame({"rows": codes["rows"].astype(np.int64), "numeric": codes["numeric"].astype(np.int64),
                          "text_only": codes["text_only"].astype(np.int64),
                          "listed": codes.index.isin(known) if known is not None else np.zeros(len(codes), bool)},
                         index=codes.index)
    return table, failing(MedsCodes, table)


def unseen(by_split: pd.Series, fitted: Iterable[str]) -> tuple[pd.Series, pd.Series]:
    """What MEDS-Transforms' normalization drops without a word: it inner-joins each row's code with the codes its
    fit saw, so a code with rows (``by_split``: rows per split and code) and none among the fitted (train) rows
    (``fitted``: the codes those rows hold) loses every row. Per such code, sorted: its rows, and where they are
    (``'held_out 32, tuning 1'``). A MEDS run and a build written as MEDS both ask this."""
    held = by_split[by_split > 0].astype(np.int64)
    rows = held.groupby(level="code", sort=True).sum()
    table = pd.DataFrame({"rows": rows, "fitted": rows.index.isin(pd.Index(list(fitted), dtype=object))},
                         index=rows.index)
    dropped = rows[failing(MedsFitted, table)("meds_code_unseen")]
    where = held[held.index.get_level_values("code").isin(dropped.index)].rename("rows").reset_index()
    why = (where["split"].astype(str) + " " + where["rows"].astype(str)).groupby(where["code"]).agg(", ".join)
    return dropped, why


def unseen_message(dropped: pd.Series, why: pd.Series) -> str:
    """``'196 rows of 97 code(s) with no row in the fitted (train) rows, which normalization drops: ...'``, the codes
    of :func:`unseen` listed the most rows first."""
    return (f"{int(dropped.sum()):,} rows of {len(dropped)} code(s) with no row in the fitted (train) rows, which "
            f"normalization drops: {listed(dropped, why=why)}")


def unlisted(combined: Combined, known: pd.Index | None) -> list[Finding]:
    """``meds_code_unlisted``: codes of the data (of a normalized folder: vocabulary indices) not in codes.parquet."""
    table, failed = code_table(combined, known)
    missing = table[failed("meds_code_unlisted")]
    if not len(missing):
        return []
    absent = "" if known is not None else f" ({CODES} is absent)"
    return [_finding("meds_code_unlisted", CODES, "code", len(missing),
                     f"{len(missing):,} code(s) in the data not in {CODES}{absent}: {listed(missing['rows'])}",
                     named=missing["rows"])]


def codes(combined: Combined, known: pd.Index | None, *, listing: bool = True) -> list[Finding]:
    """``meds_code_unlisted`` (where codes.parquet could be read: ``listing``), ``meds_code_mixed`` and
    ``meds_code_unseen`` (:func:`unseen`)."""
    table, failed = code_table(combined, known)
    found = unlisted(combined, known) if listing else []
    mixed = table[failed("meds_code_mixed")]
    if len(mixed):
        found.append(_finding("meds_code_mixed", "data", "text_value", int(mixed["text_only"].sum()),
                              f"{int(mixed['text_only'].sum()):,} rows with text and no numeric_value in "
                              f"{len(mixed)} code(s) that have numbers: "
                              f"{listed(mixed['text_only'], why=mixed['numeric'].map('{:,} with numbers'.format))}",
                              named=mixed["text_only"]))
    dropped, why = unseen(combined.by_split["rows"], combined.fitted.codes)
    if len(dropped):
        found.append(_finding("meds_code_unseen", "data", "code", int(dropped.sum()), unseen_message(dropped, why),
                              named=dropped))
    return found


def values(combined: Combined, bound: float) -> list[Finding]:
    """``meds_value_finite`` and ``meds_value_bound``, one finding per split, listing the codes."""
    table = combined.by_split[["nan", "inf", "beyond"]].astype(np.int64).reset_index()
    failed = failing(MedsValues, table.astype({"split": str, "code": str}))
    found = []
    for split, rows in table.assign(finite=failed("meds_value_finite"), bounded=failed("meds_value_bound")).groupby(
            "split", sort=True):
        rows = rows.set_index("code")
        bad = (rows["nan"] + rows["inf"])[rows["finite"]]
        if len(bad):
            why = "inf " + rows["inf"].astype(str) + ", NaN " + rows["nan"].astype(str)
            found.append(_finding("meds_value_finite", split, "numeric_value", int(bad.sum()),
                                  f"{int(bad.sum()):,} inf or NaN values: {listed(bad, why=why)}", named=bad))
        beyond = rows["beyond"][rows["bounded"]]
        if len(beyond):
            found.append(_finding("meds_value_bound", split, "numeric_value", int(beyond.sum()),
                                  f"{int(beyond.sum()):,} values beyond +-{bound:g}: {listed(beyond)}", named=beyond))
    return found


# -- normalization readiness -------------------------------------------------------------------------------------
def normalization(ready: pd.DataFrame, bound: float) -> list[Finding]:
    """``meds_z_non_finite``: the codes whose z will be NaN or inf, with why; ``meds_z_noise``: the codes of equal
    train values whose std is a positive rounding residue (their z finite noise here, NaN or inf at another scale);
    ``meds_z_bound``: the other codes whose finite |z| will pass ``bound``. A code is in one of them at most."""
    table = pd.DataFrame({"non_finite": ready["non_finite"].astype(np.int64), "noise": ready["noise"].astype(bool),
                          "beyond": (ready["z_max"] > bound).to_numpy()}, index=ready.index)
    failed, found = failing(MedsReadiness, table), []
    broken = ready[failed("meds_z_non_finite")]
    if len(broken):
        rows = int(broken["non_finite"].sum())
        found.append(_finding("meds_z_non_finite", CODES, "values/std", rows,
                              f"{rows:,} rows of {len(broken)} code(s) will get a NaN or inf z from MEDS-Transforms' "
                              f"normalization: {listed(broken['non_finite'], why=broken['why'])}",
                              named=broken['non_finite']))
    noise = ready[failed("meds_z_noise")]
    if len(noise):
        rows, numeric = int(noise["numeric"].sum()), noise["numeric"].astype(np.int64)
        z = noise["z_max"].map("{:,.0f}".format)
        found.append(_finding("meds_z_noise", CODES, "values/std", rows,
                              f"{rows:,} rows of {len(noise)} code(s) whose train values are all equal will get a "
                              f"finite z of rounding noise from MEDS-Transforms' normalization: "
                              f"{listed(numeric, why='largest |z| ' + z + '; ' + noise['why'])}",
                              named=numeric))
    large = ready[failed("meds_z_bound")]
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
    per_code = bad.groupby("code", sort=True)["bad"].sum().reindex(combined.codes.index, fill_value=0)
    table = pd.DataFrame({"bad": per_code.astype(np.int64), "beyond": combined.codes["beyond"].astype(np.int64)},
                         index=combined.codes.index)
    failed, found = failing(MedsNormalized, table), []
    wrong = per_code[failed("meds_normalized_non_finite")]
    if len(wrong):
        bad = bad[bad["bad"] > 0]
        codes_ = combined.codes.loc[wrong.index]
        why = ("NaN " + codes_["nan"].map("{:,}".format) + ", inf " + codes_["inf"].map("{:,}".format) + "; "
               + (bad["split"] + " " + bad["bad"].map("{:,}".format)).groupby(bad["code"]).agg(", ".join))
        rows = int(wrong.sum())
        found.append(_finding("meds_normalized_non_finite", "data", "numeric_value", rows,
                              f"{rows:,} normalized values (z) NaN or inf in {len(wrong)} code(s): "
                              f"{listed(wrong, why=why)}", named=wrong))
    beyond = combined.codes[failed("meds_normalized_bound")]
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
    emptied = splits[failing(MedsCompared, splits[["rows_before", "rows_after"]].astype(np.int64))(
        "meds_compare_split_emptied")]
    for split, row in emptied.iterrows():
        found.append(_finding("meds_compare_split_emptied", split, None, int(row["rows_before"]),
                              f"split {split!r} had {row['rows_before']:,} rows of {row['subjects_before']:,} "
                              f"subjects in {comparison.before} and has none in {comparison.after}"))
    filters = [stage for stage in comparison.stages if stage.startswith("filter")]
    dropped = comparison.dropped
    table = pd.DataFrame({"rows_before": dropped.astype(np.int64), "filtered": bool(filters)}, index=dropped.index)
    dropped = dropped[failing(MedsDropped, table)("meds_compare_codes_dropped")]
    if len(dropped):
        stages = ", ".join(comparison.stages) if comparison.stages else "none marked in .logs/"
        found.append(_finding("meds_compare_codes_dropped", "data", "code", int(dropped.sum()),
                              f"{int(dropped.sum()):,} rows of {len(dropped)} code(s) in {comparison.before} are "
                              f"gone from {comparison.after}, and no stage that ran is a filter (stages: {stages}): "
                              f"{listed(dropped)}", named=dropped))
    return found
