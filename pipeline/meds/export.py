"""A build written as a MEDS 0.4 dataset (``badpoints build DATA --out OUT --to meds``): the rows the graphs would
hold, as events, with the guarded fit in ``metadata/codes.parquet``, so that MEDS-Transforms' own
``normalization`` gives every row badpoints' z: finite and bounded.

- **Events.** Each edge row (one per admission, 24-hour timestep and item: the graphs' rows) is a
  ``LAB//{ITEMID}//{unit}`` event at its CHARTTIME, the code as MEDS-Extract's MIMIC-IV configuration names it
  (the unit: the item's most common VALUEUOM in LABEVENTS, ``UNK`` without one). Each admission in a graph adds
  ``HOSPITAL_ADMISSION//{ADMISSION_TYPE}//{ADMISSION_LOCATION}`` at ADMITTIME and
  ``HOSPITAL_DISCHARGE//{DISCHARGE_LOCATION}`` at DISCHTIME. A subject is SUBJECT_ID (HADM_ID where ADMISSIONS has
  none, as the split groups them); splits are named ``train``, ``tuning`` (val) and ``held_out`` (test).
- **Values.** ``numeric_value`` is the value the scale stage z-scores: VALUENUM through the item's transform
  (``identity``, ``log1p`` or ``asinh``), and where a bound changed the z (Z_BOUNDED) the value that gives the
  bounded z, ``mean + scale * Z``: so ``(numeric_value - values/mean) / values/std`` is the graphs' Z. A row whose
  item is rare or unseen in train (Z_UNSEEN: its z is 0 and carries no measurement) has a null ``numeric_value``.
  A text-only row keeps VALUE as ``text_value``.
- **codes.parquet** carries ``values/mean`` and ``values/std`` (the fit's mean and scale; 0 and 1 for codes without
  a fit, so no code's z is nulled by a missing number), and beside them ``badpoints/itemid``, ``badpoints/rule``
  (the scale rule; ``unfitted`` for an item with no number in train, ``none`` for a code that is no lab item),
  ``badpoints/transform``, ``badpoints/bounded`` (rows whose value a bound changed) and ``badpoints/withheld`` (rows
  whose value is null for a rare or unseen item): every value the build changed, counted per code.

Memory is bounded by a part and a shard: the engine's parts are written as pieces per shard where they are
(:func:`write_pieces`), then each shard is read alone, its admission events added, sorted and written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv
import pyarrow.parquet as pq

from pipeline.stages.scale.fit import ZScoreStats, _transformed, row_transforms

MEDS_SPLITS = {"train": meds.train_split, "val": meds.tuning_split, "test": meds.held_out_split}
SHARD_EVENTS = 1_000_000  # about this many events per shard, as MEDS-Extract shards
UNKNOWN = "UNK"  # a null part of a code, as MEDS-Extract writes it
SEP = "//"  # between a code's parts
LAB, ADMISSION, DISCHARGE = "LAB", "HOSPITAL_ADMISSION", "HOSPITAL_DISCHARGE"  # MEDS-Extract's MIMIC-IV prefixes
PIECES = "meds-pieces"  # inside the staging folder, while the shards are made
COLUMNS = ["SPLIT", "HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM", "Z", "Z_BOUNDED", "Z_UNSEEN"]
ETL = "badpoints"


def item_units(path: Path | None) -> pd.Series:
    """ITEMID -> its rows' most common VALUEUOM (ties: the first in sorted order), read from LABEVENTS' two
    columns a block at a time; empty when the file has no VALUEUOM column (or none is readable)."""
    if path is None:
        return pd.Series(dtype=object)
    header = pv.open_csv(path, read_options=pv.ReadOptions(block_size=1 << 16)).schema.names
    named = {name.upper(): name for name in header}
    if "VALUEUOM" not in named or "ITEMID" not in named:
        return pd.Series(dtype=object)
    item, unit = named["ITEMID"], named["VALUEUOM"]
    reader = pv.open_csv(path, read_options=pv.ReadOptions(block_size=64 << 20),
                         parse_options=pv.ParseOptions(newlines_in_values=True, invalid_row_handler=lambda _: "skip"),
                         convert_options=pv.ConvertOptions(include_columns=[item, unit], strings_can_be_null=True,
                                                           column_types={item: pa.string(), unit: pa.string()}))
    counts = []
    for batch in reader:
        table = pa.Table.from_batches([batch]).drop_null()
        counts.append(table.group_by([item, unit]).aggregate([([], "count_all")]).to_pandas())
    if not counts:
        return pd.Series(dtype=object)
    tally = pd.concat(counts).groupby([item, unit], sort=True)["count_all"].sum().reset_index()
    tally = tally[pd.to_numeric(tally[item], errors="coerce").notna()]
    tally[item] = pd.to_numeric(tally[item]).astype("int64")
    top = tally.sort_values([item, "count_all", unit], ascending=[True, False, True]).drop_duplicates(item)
    return top.set_index(item)[unit].rename_axis("ITEMID")


def lab_codes(items: Iterable[int], units: pd.Series) -> pd.Series:
    """ITEMID -> ``LAB//{ITEMID}//{unit}``."""
    items = pd.Index(sorted(set(int(i) for i in items)), dtype="int64", name="ITEMID")
    unit = pd.Series(items.map(units), index=items).fillna(UNKNOWN).astype(str).str.strip()
    return (LAB + SEP + items.astype(str) + SEP + unit.where(unit != "", UNKNOWN)).rename("code")


def subjects(fates: pd.DataFrame, splits: pd.DataFrame, kept_rows: int) -> pd.DataFrame:
    """Per admission in a graph: HADM_ID, subject_id (the split's GROUP), split (MEDS' name) and shard, the subjects
    of each split cut in order into shards of about :data:`SHARD_EVENTS` events."""
    admitted = fates.loc[fates["FATE"] == "in_graphs", ["HADM_ID"]].drop_duplicates().astype("int64")
    table = admitted.merge(splits[["HADM_ID", "GROUP", "SPLIT"]], on="HADM_ID", how="left")
    table = table.rename(columns={"GROUP": "subject_id"}).astype({"subject_id": "int64"})
    table["split"] = table.pop("SPLIT").map(MEDS_SPLITS)
    people = table[["split", "subject_id"]].drop_duplicates()
    per_shard = max(1, math.ceil(len(people) * SHARD_EVENTS / max(kept_rows, 1)))
    people = people.sort_values(["split", "subject_id"])
    people["shard"] = people.groupby("split").cumcount() // per_shard
    return table.merge(people, on=["split", "subject_id"]).sort_values("HADM_ID").reset_index(drop=True)


def item_table(stats: ZScoreStats, codes: pd.Series) -> pd.DataFrame:
    """Per ITEMID the edges may carry: code, mean and scale (0 and 1 without a fit)."""
    fitted = stats.table()
    table = pd.DataFrame({"code": codes})
    table["mean"] = table.index.map(fitted["mean"]).astype("float64")
    table["scale"] = table.index.map(fitted["scale"]).astype("float64")
    return table.fillna({"mean": 0.0, "scale": 1.0})


def lab_events(rows: pd.DataFrame, items: pd.DataFrame, people: pd.DataFrame, stats: ZScoreStats) -> pd.DataFrame:
    """The MEDS events of edge rows, with their split and shard (module docstring: Values)."""
    item = rows["ITEMID"].astype("int64")
    who = people.set_index("HADM_ID").loc[rows["HADM_ID"].to_numpy("int64")]
    value = _transformed(rows, *row_transforms(item, stats), strict=False)
    mean, scale = item.map(items["mean"]), item.map(items["scale"])
    bounded = rows["Z_BOUNDED"].to_numpy() == 1
    value = value.where(~bounded, mean + scale * rows["Z"])
    withheld = rows["Z_UNSEEN"].to_numpy() == 1
    number = rows["VALUENUM"].notna().to_numpy()
    return pd.DataFrame({
        "split": who["split"].to_numpy(), "shard": who["shard"].to_numpy("int64"),
        "subject_id": who["subject_id"].to_numpy("int64"),
        "time": rows["CHARTTIME"].to_numpy("datetime64[us]"),
        "code": item.map(items["code"]).to_numpy(object),
        "numeric_value": value.where(number & ~withheld).astype("float32").to_numpy(),
        "text_value": rows["VALUE"].where(~number).to_numpy(object),
        "bounded": bounded & number, "withheld": withheld & number,
    })


def write_pieces(parts: Iterable[pd.DataFrame], items: pd.DataFrame, people: pd.DataFrame, stats: ZScoreStats, *,
                 pieces: Path, batch_size: int, start: Mapping[str, int] | None = None) -> Iterator[dict]:
    """Each part's events written as one piece per shard (``pieces/{split}/{shard}/{first HADM_ID}.parquet``), where
    the part is: what stays is, per piece, its admissions and its rows, bounded and withheld rows per code.
    ``batch_size`` and ``start`` are the engine's (:meth:`pipeline.engines.base.Engine.in_batches`); every admission
    is in one part, so piece names never meet."""
    for part in parts:
        if part.empty:
            continue
        events = lab_events(part, items, people, stats)
        events["HADM_ID"] = part["HADM_ID"].to_numpy("int64")
        for (split, shard), group in events.groupby(["split", "shard"], sort=True):
            folder = Path(pieces) / split / str(shard)
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.Table.from_pandas(group[list(meds.DataSchema.schema().names)], preserve_index=False)
            pq.write_table(table.cast(meds.DataSchema.schema()), folder / f"{int(group['HADM_ID'].min())}.parquet")
            per_code = group.groupby("code", sort=True)[["bounded", "withheld"]].sum()
            yield {"split": split, "shard": int(shard), "rows": len(group),
                   "admissions": np.unique(group["HADM_ID"].to_numpy()), "per_code": per_code}


def admission_events(admissions: pd.DataFrame, people: pd.DataFrame) -> pd.DataFrame:
    """``HOSPITAL_ADMISSION//{type}//{location}`` at ADMITTIME and ``HOSPITAL_DISCHARGE//{location}`` at DISCHTIME of
    every admission of ``people``, with split and shard."""
    rows = people.merge(admissions, on="HADM_ID", how="left")

    def part(name: str) -> pd.Series:
        column = rows[name] if name in rows else pd.Series(None, index=rows.index, dtype=object)
        return column.astype(object).where(column.notna() & (column.astype(str).str.strip() != ""), UNKNOWN).astype(str)

    admitted = rows.assign(time=rows["ADMITTIME"], code=ADMISSION + SEP + part("ADMISSION_TYPE") + SEP
                           + part("ADMISSION_LOCATION"))
    discharged = rows.assign(time=rows["DISCHTIME"], code=DISCHARGE + SEP + part("DISCHARGE_LOCATION"))
    events = pd.concat([admitted, discharged], ignore_index=True)
    return pd.DataFrame({"split": events["split"], "shard": events["shard"].astype("int64"),
                         "subject_id": events["subject_id"].astype("int64"),
                         "time": events["time"].to_numpy("datetime64[us]"), "code": events["code"],
                         "numeric_value": np.full(len(events), np.nan, dtype="float32"),
                         "text_value": pd.Series(None, index=events.index, dtype=object)})


def shard_table(pieces: Path, split: str, shard: int, admitted: pd.DataFrame) -> pa.Table:
    """One shard: its pieces and its admission events, sorted by subject, time, code, value (stable, so the same
    inputs give the same bytes)."""
    schema = meds.DataSchema.schema()
    folder = Path(pieces) / split / str(shard)
    tables = [pq.read_table(path, schema=schema) for path in sorted(folder.glob("*.parquet"))]
    mine = admitted[(admitted["split"] == split) & (admitted["shard"] == shard)]
    tables.append(pa.Table.from_pandas(mine[list(schema.names)], preserve_index=False).cast(schema))
    table = pa.concat_tables(tables)
    order = pc.sort_indices(table, [("subject_id", "ascending"), ("time", "ascending"), ("code", "ascending"),
                                    ("numeric_value", "ascending"), ("text_value", "ascending")])
    return table.take(order)


def codes_table(stats: ZScoreStats, items: pd.DataFrame, names: Mapping[int, str], other: Iterable[str],
                counted: pd.DataFrame) -> pa.Table:
    """``metadata/codes.parquet``: every code written, with the fit (module docstring) and its provenance."""
    fitted = stats.table().assign(transform=list(stats.transforms))
    labs = items.reset_index()
    labs = labs[labs["code"].isin(counted.index) | labs["ITEMID"].isin(fitted.index)]
    other = sorted(set(other))
    frame = pd.DataFrame({
        "code": [*labs["code"], *other],
        "description": [*(names.get(int(i)) for i in labs["ITEMID"]), *([None] * len(other))],
        "values/mean": [*labs["mean"], *([0.0] * len(other))],
        "values/std": [*labs["scale"], *([1.0] * len(other))],
        "badpoints/itemid": pd.array([*labs["ITEMID"], *([None] * len(other))], dtype="Int64"),
        "badpoints/rule": [*labs["ITEMID"].map(fitted["rule"]).fillna("unfitted"), *(["none"] * len(other))],
        "badpoints/transform": [*labs["ITEMID"].map(fitted["transform"]).fillna("identity"),
                                *(["none"] * len(other))],
    }).sort_values("code", kind="stable")
    frame = frame.join(counted.rename(columns={"bounded": "badpoints/bounded", "withheld": "badpoints/withheld"}),
                       on="code").fillna({"badpoints/bounded": 0, "badpoints/withheld": 0})
    table = pa.Table.from_pandas(frame.astype({"badpoints/bounded": "int64", "badpoints/withheld": "int64"}),
                                 preserve_index=False)
    parents = pa.nulls(len(frame), pa.list_(pa.string()))
    base = meds.CodeMetadataSchema.schema()
    columns = [table["code"].cast(pa.string()), table["description"].cast(pa.string()), parents,
               table["values/mean"].cast(pa.float32()), table["values/std"].cast(pa.float32()),
               *(table[name] for name in table.column_names if name.startswith("badpoints/"))]
    names_ = [*base.names, "values/mean", "values/std",
              *(name for name in table.column_names if name.startswith("badpoints/"))]
    return pa.table(columns, names=names_)


def subject_splits(people: pd.DataFrame) -> pa.Table:
    """``metadata/subject_splits.parquet``: every subject written and its split."""
    table = people[["subject_id", "split"]].drop_duplicates().sort_values("subject_id")
    return pa.Table.from_pandas(table, preserve_index=False).cast(meds.SubjectSplitSchema.schema())


def dataset_json(data_dir: Path, version: str, inputs: list[dict]) -> bytes:
    """``metadata/dataset.json``: named for the data and badpoints; its version is a hash of the inputs (the same
    inputs, the same bytes)."""
    digest = "-".join(i["sha256"][:12] for i in sorted(inputs, key=lambda i: i["table"]))
    return (json.dumps({"dataset_name": f"{Path(data_dir).name} (badpoints build --to meds)",
                        "dataset_version": digest, "etl_name": ETL, "etl_version": version,
                        "meds_version": meds.__version__}, indent=2) + "\n").encode()


def parquet_writer(table: pa.Table) -> Any:
    """A ``write(path)`` of ``table`` as Parquet (for :meth:`pipeline.output.write.StagedBuild.add_written`)."""
    return lambda path: pq.write_table(table, path)
