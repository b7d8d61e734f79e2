"""MEDS export stage: a build written as a MEDS 0.4 dataset (its target ``meds``: ``badpoints build DATA --out OUT
--to meds``): the rows the graphs would hold, as events, with the guarded fit in ``metadata/codes.parquet``, so that MEDS-Transforms' own
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
(:func:`write_pieces`, through the build's staged writer), then each shard is read alone, its admission events added,
sorted, guarded (``schemas/meds_export.py``: MEDS' own types, a finite or null value, each subject's rows one run in
time order) and staged. Nothing is committed unless every shard passed its guard.
"""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from pipeline.kernel.stage import Shown, Stage, Target
from pipeline.ledgers import check_built
from pipeline.meds.checks import unseen, unseen_message
from pipeline.output import write
from pipeline.output.built import Build
from pipeline.reading.arrow import input_stream, read_parquet
from pipeline.reporting import page
from pipeline.reporting.findings import LISTED, finding_from_error, format_items, item_names, summary_finding
from pipeline.reporting.progress import Progress
from pipeline.reporting.report import as_shown
from pipeline.stages.scale.fit import ZScoreStats
from pipeline.stages.task import task_labels
from schemas.dedup import EdgeRows
from schemas.errors import StageError
from schemas.guard import check_frame
from schemas.meds_export import NAME, UNSEEN, MedsShard
from schemas.split import SPLITS

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
    with input_stream(path) as source:  # pyarrow reads the open file: a path of any bytes
        header = pv.open_csv(source, read_options=pv.ReadOptions(block_size=1 << 16)).schema.names
    named = {name.upper(): name for name in header}
    if "VALUEUOM" not in named or "ITEMID" not in named:
        return pd.Series(dtype=object)
    item, unit = named["ITEMID"], named["VALUEUOM"]
    counts = []
    with input_stream(path) as source:
        reader = pv.open_csv(source, read_options=pv.ReadOptions(block_size=64 << 20),
                             parse_options=pv.ParseOptions(newlines_in_values=True,
                                                           invalid_row_handler=lambda _: "skip"),
                             convert_options=pv.ConvertOptions(include_columns=[item, unit], strings_can_be_null=True,
                                                               column_types={item: pa.string(), unit: pa.string()}))
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
    value = stats.transformed(rows)
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
    the part is: what stays is, per piece, its admissions and its rows, and per code its rows, bounded and withheld.
    ``batch_size`` and ``start`` are the engine's (:meth:`pipeline.engines.base.Engine.in_batches`); every admission
    is in one part, so piece names never meet."""
    for part in parts:
        if part.empty:
            continue
        events = lab_events(part, items, people, stats)
        events["HADM_ID"] = part["HADM_ID"].to_numpy("int64")
        for (split, shard), group in events.groupby(["split", "shard"], sort=True):
            write.write_scratch(Path(pieces) / split / str(shard) / f"{int(group['HADM_ID'].min())}.parquet",
                                parquet_writer(meds_table(group)))
            per_code = group.groupby("code", sort=True)[["bounded", "withheld"]].sum()
            yield {"split": split, "shard": int(shard), "rows": len(group),
                   "admissions": np.unique(group["HADM_ID"].to_numpy()), "per_code": per_code,
                   "code_rows": group.groupby("code", sort=True).size()}


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


def meds_table(events: pd.DataFrame) -> pa.Table:
    """Events (a frame with at least MEDS' columns) as a table of ``meds.DataSchema``: its columns, its types."""
    schema = meds.DataSchema.schema()
    return pa.Table.from_pandas(events[list(schema.names)], preserve_index=False).cast(schema)


def shard_table(pieces: Path, split: str, shard: int, admitted: pd.DataFrame) -> pa.Table:
    """One shard: its pieces and its admission events, sorted and guarded (:func:`sorted_shard`)."""
    folder = Path(pieces) / split / str(shard)
    tables = [read_parquet(path, schema=meds.DataSchema.schema()) for path in sorted(folder.glob("*.parquet"))]
    tables.append(meds_table(admitted[(admitted["split"] == split) & (admitted["shard"] == shard)]))
    return sorted_shard(tables, where=f"data/{split}/{shard}.parquet")


def sorted_shard(tables: list[pa.Table], *, where: str) -> pa.Table:
    """The shard ``where`` of its events' tables: sorted by subject, time, code, value (stable, so the same inputs
    give the same bytes), guarded before it is staged (:func:`guard_shard`)."""
    table = pa.concat_tables(tables)
    order = pc.sort_indices(table, [("subject_id", "ascending"), ("time", "ascending"), ("code", "ascending"),
                                    ("numeric_value", "ascending"), ("text_value", "ascending")])
    table = table.take(order)
    guard_shard(table.select(["subject_id", "time", "code", "numeric_value"]).to_pandas(), where=where)
    return table


def guard_shard(events: pd.DataFrame, *, where: str) -> None:
    """A shard's events as written, checked against :class:`schemas.meds_export.MedsShard` before it is staged: a
    failure is a :class:`StageError` of ``meds_export_shard`` naming the shard (``where``), the column and the rows."""
    try:
        check_frame(MedsShard, events, stage=NAME, side="output", table=where)
    except StageError as error:
        rows = error.failure_cases["line"].to_numpy()  # the shard's row positions: its rows have no source line
        shown = ", ".join(map(str, rows[:LISTED])) + (f" +{error.count - LISTED} more" if error.count > LISTED else "")
        cases = error.failure_cases.drop(columns="line").iloc[:0].assign(line=pd.Series([], dtype="int64"))
        raise StageError(stage=NAME, side="output", check="meds_export_shard", column=error.column,
                         count=error.count, failure_cases=cases, table=where,
                         detail=f"{error.check} failed on the shard's rows {shown}",
                         advice=error.advice) from None


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
    return (json.dumps({"dataset_name": f"{as_shown(Path(data_dir).name)} (badpoints build --to meds)",
                        "dataset_version": digest, "etl_name": ETL, "etl_version": version,
                        "meds_version": meds.__version__}, indent=2) + "\n").encode()


def parquet_writer(table: pa.Table) -> Any:
    """A ``write(path)`` of ``table`` as Parquet (for :meth:`pipeline.output.write.StagedBuild.add_written`)."""
    return lambda path: write.write_parquet(table, path)


STEPS = ("events", "shards")  # its progress steps: each part's events written as pieces, then the shards


def write_meds(staged: Any, validation: Any, config: Any, progress: Progress, *, engine: Any,
               data_dir: Path) -> Build:
    """The edge rows of a validated run written as a MEDS dataset (the stage's target ``meds``): each part's events
    as pieces where the parts are, then each shard sorted, guarded and staged with its admissions' events; then
    codes.parquet, subject_splits.parquet and dataset.json beside the report, the fitted state, the quarantine and
    the manifest. A shard that fails its guard is an error finding, and nothing is committed."""
    out, prepared = staged.out_dir, validation.prepared
    progress.step(STEPS[0], rows=len(prepared.edges))
    stats = prepared.state_of(ZScoreStats)
    labevents = next((Path(i.path) for i in validation.report.inputs if i.table == "LABEVENTS"), None)
    known = set(prepared.labitems["ITEMID"].astype("int64")) | set(stats.items_)
    items = item_table(stats, lab_codes(known, item_units(labevents)))
    accounting = {"LABEVENTS": prepared.ledger(), "ADMISSIONS": prepared.admission_ledger()}
    people = subjects(prepared.fates, prepared.splits, accounting["LABEVENTS"]["kept"])
    pieces = staged.stage / PIECES
    made = list(engine.in_batches(write_pieces, prepared.edges, items, people, stats,
                                  batch_size=config.graph.batch_size, columns=COLUMNS, sees=out, pieces=pieces))
    progress.step(STEPS[1], rows=len(made), unit="pieces")
    admitted = admission_events(prepared.admissions, people)
    try:
        files, shards = _shards(staged, pieces, people, admitted, made)
    except StageError as error:
        report = _with_findings(validation.report, [finding_from_error(error)], config)
        progress.end()
        return Build(validation=validation, report=report, out_dir=None, to=TARGET)
    check_built(shards, accounting, rows="events")
    report = _with_findings(validation.report, normalization_drops(events_by_split(made, admitted)), config)
    report.summary.extend(dropped_lines(report))
    counted = (pd.concat([m["per_code"] for m in made]).groupby(level=0).sum() if made
               else pd.DataFrame(columns=["bounded", "withheld"]))
    codes = codes_table(stats, items, item_names(prepared.labitems), admitted["code"], counted)
    inputs = [{"table": i.table, "sha256": i.sha256, "rows": i.rows, "file": Path(i.path).name}
              for i in validation.report.inputs]
    files += [staged.add_written("metadata/codes.parquet", parquet_writer(codes)),
              staged.add_written("metadata/subject_splits.parquet", parquet_writer(subject_splits(people))),
              staged.add("metadata/dataset.json", dataset_json(data_dir, write.versions()["badpoints"], inputs))]
    built = Build(validation=validation, report=report, out_dir=out, shards=shards, to=TARGET)
    _write(built, staged, config, progress, files=files, accounting=accounting, inputs=inputs, engine=engine)
    return built


def _shards(staged: Any, pieces: Path, people: pd.DataFrame, admitted: pd.DataFrame,
            made: list[dict]) -> tuple[list, tuple[dict, ...]]:
    """Each shard made from its pieces, guarded and staged: the staged files, and per shard its split (badpoints'
    name), number, path, admissions and lab events."""
    back = {meds_name: name for name, meds_name in MEDS_SPLITS.items()}
    sizes = pd.DataFrame([{"split": m["split"], "shard": m["shard"], "rows": m["rows"],
                           "admissions": len(m["admissions"])} for m in made], columns=["split", "shard", "rows",
                                                                                        "admissions"])
    sizes = sizes.groupby(["split", "shard"])[["rows", "admissions"]].sum()  # pieces share no admission
    files, shards = [], []
    for split, shard in people[["split", "shard"]].drop_duplicates().sort_values(["split", "shard"]).itertuples(
            index=False):
        path = f"data/{split}/{shard}.parquet"
        files.append(staged.add_written(path, parquet_writer(shard_table(pieces, split, int(shard), admitted))))
        size = sizes.loc[(split, shard)] if (split, shard) in sizes.index else {"rows": 0, "admissions": 0}
        shards.append({"split": back[split], "shard": int(shard), "path": path,
                       "admissions": int(size["admissions"]), "events": int(size["rows"])})
    return files, tuple(shards)


def events_by_split(made: list[dict], admitted: pd.DataFrame) -> pd.Series:
    """The events written per split (MEDS' names) and code: the pieces' lab events and the admissions' events."""
    labs = [m["code_rows"].rename("rows").rename_axis("code").reset_index().assign(split=m["split"]) for m in made]
    events = pd.concat([*labs, admitted.groupby(["split", "code"]).size().rename("rows").reset_index()],
                       ignore_index=True)
    return events.groupby(["split", "code"], sort=True)["rows"].sum().astype(np.int64)


def normalization_drops(by_split: pd.Series) -> list:
    """``meds_export_unseen_codes``: the codes MEDS-Transforms' normalization will drop with every row of theirs,
    those written with no row in the train split it fits on (:func:`pipeline.meds.checks.unseen`, the question
    ``badpoints validate`` of the dataset asks as ``meds_code_unseen``); none when every code has a train row."""
    split = by_split.index.get_level_values("split")
    fitted = by_split[split == meds.train_split].index.get_level_values("code")
    dropped, why = unseen(by_split, fitted)
    if not len(dropped):
        return []
    return [summary_finding(stage=NAME, check=UNSEEN, table="data", column="code", count=int(dropped.sum()),
                            message=unseen_message(dropped, why), items=dropped)]


def dropped_lines(report: Any) -> list[tuple[str, str]]:
    """The terminal summary's line of what MEDS-Transforms' normalization will drop (from the build's finding)."""
    return [("MEDS", f"MEDS-Transforms' normalization will drop {f.count:,} rows of {len(f.items):,} codes with no "
                     f"row in train: {format_items(f.items)}") for f in report.findings if f.check == UNSEEN]


def _with_findings(report: Any, findings: list, config: Any) -> Any:
    """The validation's report with the build's own findings (severities applied) after its own, and its summary
    lines."""
    added = type(report)(findings=findings).with_severities(dict(config.severity)).findings
    return type(report)(inputs=list(report.inputs), findings=[*report.findings, *added],
                        overrides=dict(report.overrides), attrition=report.attrition, stages=report.stages,
                        summary=list(report.summary))


def _write(built: Build, staged: Any, config: Any, progress: Progress, *, files: list,
           accounting: Mapping[str, dict], inputs: list[dict], engine: Any) -> None:
    """A MEDS build's own files beside the dataset: report (JSON and HTML), fitted state, quarantine, manifest."""
    from pipeline.reporting import html  # matplotlib loads only when a build is written

    out, report, prepared = staged.out_dir, built.report, built.validation.prepared
    progress.step("report")
    files = [*files, write.stage_quarantine(prepared.quarantine, staged,
                                            where=lambda function, *args: engine.call(function, *args, sees=out)),
             staged.add("report.html", as_shown(html.render(built, config, engine=engine)).encode("utf-8")),
             staged.add("report.json", write.json_bytes(report.without_samples().as_json())),
             staged.add("stats.json", write.json_bytes(prepared.saved_state()))]
    people = subjects(prepared.fates, prepared.splits, accounting["LABEVENTS"]["kept"])
    labels = task_labels(prepared.admissions, prepared.splits, people["HADM_ID"], people["split"])
    if labels is not None:  # a task's labels beside the dataset, in MEDS' label schema (its splits: subject_splits)
        files.append(staged.add(write.LABELS, write.label_files(labels)[write.LABELS]))
    splits = {name: {"admissions": sum(s["admissions"] for s in built.shards if s["split"] == name),
                     "shards": sum(s["split"] == name for s in built.shards),
                     "events": sum(s["events"] for s in built.shards if s["split"] == name)} for name in SPLITS}
    shards = [{"split": s["split"], "batch": s["shard"], "path": s["path"], "admissions": s["admissions"],
               "edges": s["events"]} for s in built.shards]  # the manifest's names, as inspect reads them
    manifest = write.meds_manifest(files, config=config.as_json(), inputs=inputs, shards=shards, splits=splits,
                                   accounting=accounting)
    progress.step("write", rows=len(manifest["outputs"]), unit="files")
    staged.commit(manifest)
    progress.end()


def sections(shown: Shown) -> list[str]:
    """A build written as MEDS: its shards, with the admissions and lab events each holds."""
    built = shown.built
    if built is None or built.to != TARGET:
        return []
    rows = [[s["path"], s["split"], page.n(s["admissions"]), page.n(s["events"])] for s in built.shards]
    table = page.table(["shard", "split", "admissions", "lab events"], rows, numeric={2, 3}, sortable=True)
    drops = "".join(f" {escape(text)} (<code>{UNSEEN}</code> lists them all)."
                    for _, text in dropped_lines(built.report))
    return [f'<section id="graphs"><h2>MEDS shards</h2><p>{len(built.shards)} shards; metadata/codes.parquet holds '
            f'each code\'s values/mean and values/std from the fit.{drops}</p>{table}</section>']


TARGET = "meds"
STAGE = Stage(NAME, colour="#9edae5", takes=EdgeRows, progress=STEPS, target=Target(TARGET, write=write_meds),
              sections=sections)
