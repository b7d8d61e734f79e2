"""``badpoints validate AFTER --compare BEFORE``: what a MEDS-Transforms stage (or several) did to a MEDS folder's
rows, as a ledger like a MIMIC run's attrition: rows in and out per split and per shard (where a shard of the same
name is on both sides), subjects in and out per split, and the codes present before and absent after with their
rows. Both sides are read as :func:`pipeline.meds.validate_meds` reads a folder (a normalized folder's codes
named through its vocabulary), so the codes compare as strings. A shard refused on either side (``meds_schema``,
each side's finding) is left out of both: its rows were not checked, so they are neither counted nor gone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.meds.shards import ShardPartial


@dataclass(frozen=True)
class Comparison:
    """``splits``: per split ``rows_before``, ``rows_after``, ``subjects_before``, ``subjects_after``;
    ``shards``: per shard name on both sides its rows before and after; ``dropped``: per code present before and
    absent after, its rows before; ``stages``: the stages ``AFTER/.logs/*.done`` marks done (sorted);
    ``left_out``: the shard names refused on either side, left out of the rest (sorted)."""

    before: str
    after: str
    splits: pd.DataFrame
    shards: pd.DataFrame
    dropped: pd.Series
    stages: tuple[str, ...]
    left_out: tuple[str, ...] = ()


def compare(before: Path, after: Path, read_before: list[ShardPartial], read_after: list[ShardPartial]) -> Comparison:
    """The ledger of BEFORE -> AFTER from both sides' partials, those of a shard name refused on either side left
    out."""
    left_out = sorted({p.name for p in (*read_before, *read_after) if p.schema is not None})
    read_before, read_after = ([p for p in side if p.name not in left_out] for side in (read_before, read_after))
    sides = {"before": per_split(read_before), "after": per_split(read_after)}
    splits = pd.concat({f"{what}_{side}": frame[what] for side, frame in sides.items()
                        for what in ("rows", "subjects")}, axis=1).fillna(0).astype(np.int64)
    splits = splits[["rows_before", "rows_after", "subjects_before", "subjects_after"]].sort_index()
    shards = pd.DataFrame({"rows_before": pd.Series({p.name: p.rows for p in read_before}, dtype=np.int64),
                           "rows_after": pd.Series({p.name: p.rows for p in read_after}, dtype=np.int64)})
    shards = shards.dropna().astype(np.int64).sort_index()
    rows_before, rows_after = code_rows(read_before), code_rows(read_after)
    gone = ~rows_before.index.isin(rows_after.index[rows_after > 0])
    dropped = rows_before[gone & (rows_before > 0)]
    return Comparison(str(before), str(after), splits, shards, dropped, done_stages(after), tuple(left_out))


def code_rows(partials: list[ShardPartial]) -> pd.Series:
    """Per code (sorted): its rows over the shards read."""
    rows = [p.codes["rows"] for p in partials if p.unreadable is None and len(p.codes)]
    return (pd.concat(rows).groupby(level=0, sort=True).sum() if rows else pd.Series(dtype=np.int64)).astype(np.int64)


def per_split(partials: list[ShardPartial]) -> pd.DataFrame:
    """Per split: its rows, and its subjects (distinct over its shards)."""
    read = [p for p in partials if p.unreadable is None]
    rows = pd.Series([p.rows for p in read], index=[p.split for p in read], dtype=np.int64)
    rows = rows.groupby(level=0).sum() if len(rows) else rows
    ids = [p.subjects[["subject_id"]].assign(split=p.split) for p in read if len(p.subjects)]
    subjects = (pd.concat(ids).drop_duplicates().groupby("split")["subject_id"].size() if ids
                else pd.Series(dtype=np.int64))
    return pd.DataFrame({"rows": rows, "subjects": subjects}).fillna(0).astype(np.int64)


def done_stages(root: Path) -> tuple[str, ...]:
    """The stages MEDS-Transforms marks done in ``root/.logs`` (``STAGE.done``; not its ``_all_stages``)."""
    logs = Path(root) / ".logs"
    return tuple(sorted(p.stem for p in logs.glob("*.done") if not p.stem.startswith("_"))) if logs.is_dir() else ()


def ledger(comparison: Comparison) -> dict:
    """The attrition's ``MEDS compare`` entry: both folders, rows and subjects per split, rows per shard, the
    dropped codes with their rows, and the stages marked done."""
    return {"before": comparison.before, "after": comparison.after, "stages": list(comparison.stages),
            "rows": {"before": int(comparison.splits["rows_before"].sum()),
                     "after": int(comparison.splits["rows_after"].sum())},
            "splits": {split: {k: int(v) for k, v in row.items()} for split, row in comparison.splits.iterrows()},
            "shards": {name: {k: int(v) for k, v in row.items()} for name, row in comparison.shards.iterrows()},
            "codes_dropped": {code: int(n) for code, n in comparison.dropped.sort_index().items()},
            "shards_left_out": list(comparison.left_out)}


def summary(comparison: Comparison) -> list[tuple[str, str]]:
    """The terminal summary's line: rows and subjects in -> out per split, and the codes dropped."""
    text = " · ".join(f"{split} {r.rows_before:,} -> {r.rows_after:,} rows, {r.subjects_before:,} -> "
                      f"{r.subjects_after:,} subjects" for split, r in comparison.splits.iterrows())
    dropped = (f"; {len(comparison.dropped)} code(s) dropped ({int(comparison.dropped.sum()):,} rows)"
               if len(comparison.dropped) else "")
    return [("MEDS compare", f"{text}{dropped}")]
