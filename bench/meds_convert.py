"""MIMIC-shaped CSVs (:mod:`bench.synth`'s LABEVENTS and ADMISSIONS) as a MEDS 0.4 dataset, streamed.

Codes as MEDS-Extract's MIMIC-IV configuration (``hosp/labevents``, ``hosp/admissions``) names them:

- a lab row: ``LAB//{ITEMID}//{VALUEUOM}`` at CHARTTIME, ``numeric_value`` VALUENUM as float32, ``text_value``
  VALUE where VALUENUM is null (MEDS-Extract keeps VALUE on every row; only the text-only rows carry it here);
- an admission: ``HOSPITAL_ADMISSION//{ADMISSION_TYPE}//{ADMISSION_LOCATION}`` at ADMITTIME and
  ``HOSPITAL_DISCHARGE//{DISCHARGE_LOCATION}`` at DISCHTIME, for the subjects with a lab row.

A null part of a code is ``UNK``, as MEDS-Extract writes it. Subjects go to ``train``/``tuning``/``held_out``
80/10/10 by a hash of SUBJECT_ID (the same subject, the same split, at any N), and within a split to shards of
about :data:`SHARD_EVENTS` events by a second hash; each shard is sorted by subject, then time (stable).

LABEVENTS is read in blocks of about a million rows, each block's rows appended to its shard's temporary Parquet
file; each shard is then read alone, sorted and written: memory is bounded by a block and a shard, not by N.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import meds
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv
import pyarrow.parquet as pq

# the codes named, and the shards cut, as a build names and cuts them
from pipeline.stages.meds_export import ADMISSION, DISCHARGE, LAB, SEP, SHARD_EVENTS, UNKNOWN

SPLITS = {meds.train_split: 0.8, meds.tuning_split: 0.1, meds.held_out_split: 0.1}
BLOCK_BYTES = 64 << 20  # a CSV block: about a million LABEVENTS rows
LAB_TYPES = {"SUBJECT_ID": pa.int64(), "ITEMID": pa.int64(), "CHARTTIME": pa.timestamp("us"), "VALUE": pa.string(),
             "VALUENUM": pa.float64(), "VALUEUOM": pa.string()}
ADMISSION_TYPES = {"SUBJECT_ID": pa.int64(), "ADMITTIME": pa.timestamp("us"), "DISCHTIME": pa.timestamp("us"),
                   "ADMISSION_TYPE": pa.string(), "ADMISSION_LOCATION": pa.string(),
                   "DISCHARGE_LOCATION": pa.string()}


def convert(data: Path, root: Path, *, rows: int | None = None) -> dict:
    """Write the MEDS dataset of ``data``'s first ``rows`` LABEVENTS rows (all without ``rows``) and their subjects'
    admissions into ``root`` (replaced); what was written, as a dict (also ``root/convert.json``)."""
    started = time.perf_counter()
    data, root = Path(data), Path(root)
    if root.exists():
        shutil.rmtree(root)
    pieces = root / "pieces"
    pieces.mkdir(parents=True)
    lab_rows = rows if rows is not None else _count_rows(data / "LABEVENTS.csv")
    shards = {split: max(1, round(lab_rows * share / SHARD_EVENTS)) for split, share in SPLITS.items()}
    writers: dict[tuple[str, int], pq.ParquetWriter] = {}
    subjects: list[np.ndarray] = []
    read = 0
    try:
        for block in _lab_blocks(data / "LABEVENTS.csv", rows):
            read += block.num_rows
            subjects.append(pc.unique(block["subject_id"]).to_numpy())
            _append(block, shards, writers, pieces)
        admitted = _admission_events(data / "ADMISSIONS.csv", np.unique(np.concatenate(subjects)))
        _append(admitted, shards, writers, pieces)
    finally:
        for writer in writers.values():
            writer.close()
    written = _write_shards(pieces, root, shards)
    shutil.rmtree(pieces)
    codes = _write_metadata(root, data, written.pop("codes"), written.pop("subjects"))
    info = {"data": str(data), "lab_rows": read, "admission_events": admitted.num_rows,
            "events": read + admitted.num_rows, "codes": codes, **written,
            "seconds": round(time.perf_counter() - started, 2)}
    (root / "convert.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _count_rows(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b"")) - 1


def _lab_blocks(path: Path, rows: int | None):
    """LABEVENTS as MEDS columns, a block at a time, stopping after ``rows`` rows."""
    reader = pv.open_csv(path, read_options=pv.ReadOptions(block_size=BLOCK_BYTES),
                         convert_options=pv.ConvertOptions(column_types=LAB_TYPES, include_columns=list(LAB_TYPES)))
    left = rows
    for batch in reader:
        if left is not None:
            if left <= 0:
                break
            batch = batch.slice(0, left)
            left -= batch.num_rows
        value = batch.column("VALUENUM")
        code = pc.binary_join_element_wise(LAB, pc.cast(batch.column("ITEMID"), pa.string()),
                                           pc.fill_null(batch.column("VALUEUOM"), UNKNOWN), SEP)
        text = pc.if_else(pc.is_null(value), batch.column("VALUE"), pa.scalar(None, pa.string()))
        yield _events(batch.column("SUBJECT_ID"), batch.column("CHARTTIME"), code, pc.cast(value, pa.float32()),
                      text)


def _admission_events(path: Path, subjects: np.ndarray) -> pa.Table:
    """An admission and a discharge event per admission of ``subjects``."""
    table = pv.read_csv(path, convert_options=pv.ConvertOptions(column_types=ADMISSION_TYPES,
                                                                include_columns=list(ADMISSION_TYPES)))
    table = table.filter(pc.is_in(table["SUBJECT_ID"], pa.array(subjects)))
    part = lambda name: pc.fill_null(table[name], UNKNOWN)
    admission = pc.binary_join_element_wise(ADMISSION, part("ADMISSION_TYPE"), part("ADMISSION_LOCATION"), SEP)
    discharge = pc.binary_join_element_wise(DISCHARGE, part("DISCHARGE_LOCATION"), SEP)
    none = pa.nulls(table.num_rows, pa.float32())
    text = pa.nulls(table.num_rows, pa.string())
    return pa.concat_tables([_events(table["SUBJECT_ID"], table["ADMITTIME"], admission, none, text),
                             _events(table["SUBJECT_ID"], table["DISCHTIME"], discharge, none, text)])


def _events(subject, when, code, value, text) -> pa.Table:
    return pa.table({"subject_id": subject, "time": when, "code": code, "numeric_value": value,
                     "text_value": pc.cast(text, pa.large_string())}, schema=meds.DataSchema.schema())


def split_of(subject: np.ndarray) -> np.ndarray:
    """0 train, 1 tuning, 2 held_out: 80/10/10 by a multiplicative hash of the subject id."""
    share = ((subject.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)) / float(1 << 32)
    return np.searchsorted(np.cumsum(list(SPLITS.values()))[:-1], share, side="right")


def shard_of(subject: np.ndarray, split: np.ndarray, shards: dict[str, int]) -> np.ndarray:
    """The shard within its split, by a second hash of the subject id."""
    spread = (subject.astype(np.uint64) * np.uint64(40503) + np.uint64(12345)) % np.uint64(1 << 16)
    count = np.array(list(shards.values()), dtype=np.uint64)[split]
    return (spread % count).astype(np.int64)


def _append(table: pa.Table, shards: dict[str, int], writers: dict, pieces: Path) -> None:
    """Each row of ``table`` onto its shard's temporary file."""
    subject = table["subject_id"].to_numpy()
    split = split_of(subject)
    key = split * 1_000_000 + shard_of(subject, split, shards)
    order = np.argsort(key, kind="stable")
    ordered, keys = table.take(pa.array(order)), key[order]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    for start, stop in zip(np.r_[0, bounds], np.r_[bounds, len(keys)]):
        name = (list(shards)[int(keys[start] // 1_000_000)], int(keys[start] % 1_000_000))
        if name not in writers:
            writers[name] = pq.ParquetWriter(pieces / f"{name[0]}-{name[1]}.parquet", meds.DataSchema.schema())
        writers[name].write_table(ordered.slice(start, stop - start))


def _write_shards(pieces: Path, root: Path, shards: dict[str, int]) -> dict:
    """Each shard read alone, sorted by subject then time, written as ``data/{split}/{i}.parquet`` (every shard
    written, an empty one too)."""
    codes: set[str] = set()
    subjects, events = [], {}
    for split, count in shards.items():
        (root / meds.data_subdirectory / split).mkdir(parents=True, exist_ok=True)
        events[split] = 0
        for i in range(count):
            piece = pieces / f"{split}-{i}.parquet"
            table = pq.read_table(piece) if piece.exists() else meds.DataSchema.schema().empty_table()
            table = table.take(pc.sort_indices(table, [("subject_id", "ascending"), ("time", "ascending")]))
            pq.write_table(table, root / meds.data_subdirectory / split / f"{i}.parquet")
            codes.update(pc.unique(table["code"]).to_pylist())
            ids = pc.unique(table["subject_id"])
            subjects.append(pa.table({"subject_id": ids, "split": pa.array([split] * len(ids), pa.string())}))
            events[split] += table.num_rows
    return {"shards": shards, "events_by_split": events, "codes": codes,
            "subjects": pa.concat_tables(subjects)}


def _write_metadata(root: Path, data: Path, codes: set[str], subjects: pa.Table) -> int:
    """codes.parquet (lab codes described by D_LABITEMS' LABEL where it is there), subject_splits.parquet,
    dataset.json."""
    labels = {}
    if (data / "D_LABITEMS.csv").is_file():
        items = pv.read_csv(data / "D_LABITEMS.csv")
        labels = dict(zip(map(str, items["ITEMID"].to_pylist()), items["LABEL"].to_pylist()))
    listed = sorted(codes)
    described = [labels.get(code.split("//")[1]) if code.startswith("LAB//") else None for code in listed]
    metadata = root / "metadata"
    metadata.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"code": pa.array(listed, pa.string()), "description": pa.array(described, pa.string()),
                             "parent_codes": pa.nulls(len(listed), pa.list_(pa.string()))},
                            schema=meds.CodeMetadataSchema.schema()), root / meds.code_metadata_filepath)
    subjects = subjects.sort_by("subject_id")
    pq.write_table(subjects.cast(meds.SubjectSplitSchema.schema()), root / meds.subject_splits_filepath)
    (root / meds.dataset_metadata_filepath).write_text(json.dumps({
        "dataset_name": f"badpoints bench: {data.name} as MEDS", "dataset_version": "1",
        "etl_name": "bench/meds_convert.py", "etl_version": "1", "meds_version": meds.__version__,
        "created_at": "2026-01-01T00:00:00"}, indent=2) + "\n")
    return len(listed)



def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.meds_convert", description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, help="MIMIC-III-shaped CSVs (LABEVENTS.csv, ADMISSIONS.csv)")
    parser.add_argument("root", type=Path, help="the MEDS folder to write (replaced)")
    parser.add_argument("--rows", type=int, default=None, help="the first N LABEVENTS rows (default all)")
    args = parser.parse_args(argv)
    print(json.dumps(convert(args.data, args.root, rows=args.rows), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
