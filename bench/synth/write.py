"""Writing the three tables and ``synth.json``: the small tables whole, LABEVENTS streamed chunk by chunk, each
chunk of whole subjects from its own seeded Generator; and the command line (``python -m bench.synth``)."""

from __future__ import annotations

import argparse
import gzip
import json
import time
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.csv as pv

from bench.synth import mimic4
from bench.synth.labevents import chunk_events
from bench.synth.shape import (CHUNK_ROWS, GZIP_LEVEL, LABEVENTS_HEADER, LAYOUTS, MIMIC3_FILES, MIN_ROWS, N_ITEMS,
                               OUTPATIENT_SHARE, SEED, SHAPES, VERSION, Shape, sample_generator)
from bench.synth.tables import Items, admissions, admissions_table, lab_items, labitems_table


def _subject_chunks(adm: pd.DataFrame, outpatient: np.ndarray) -> np.ndarray:
    """Chunk number of every subject: whole subjects, about CHUNK_ROWS rows per chunk."""
    per_subject = adm.groupby("SUBJECT_ID", sort=True)["ROWS"].sum().to_numpy() + outpatient
    before = np.cumsum(per_subject) - per_subject
    return before // CHUNK_ROWS


def _write_table(table: pd.DataFrame, path: Path) -> None:
    """A small table as MIMIC-style CSV; gzip (level GZIP_LEVEL, no timestamp: same bytes each time) for .gz."""
    if path.suffix != ".gz":
        sample_generator()._write_csv(table, path)
        return
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL,
                                                 mtime=0) as sink:
        sink.write(table.to_csv(index=False, lineterminator="\n").encode("utf-8"))


def write_synthetic(out_dir: Path, *, rows: int, seed: int = SEED, layout: str = "mimic3",
                    shape: Shape = Shape()) -> dict:
    """Write the three tables of ``layout`` (LABEVENTS with exactly ``rows`` rows, spread as ``shape`` says) and
    synth.json; return synth.json."""
    if rows < MIN_ROWS:
        raise ValueError(f"rows must be at least {MIN_ROWS} (got {rows})")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    mimic_iv = layout == "mimic4"
    out_dir = Path(out_dir)
    files = {table: out_dir / name for table, name in (mimic4.MIMIC4_FILES if mimic_iv else MIMIC3_FILES).items()}
    files["LABEVENTS"].parent.mkdir(parents=True, exist_ok=True)
    (out_dir / "synth.json").unlink(missing_ok=True)  # written last: marks a finished dataset
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    items = lab_items(rng)
    outpatient_share = shape.outpatient_share
    if outpatient_share is None:
        outpatient_share = mimic4.MIMIC4_OUTPATIENT_SHARE if mimic_iv else OUTPATIENT_SHARE
    adm = admissions(rng, rows, outpatient_share=outpatient_share)
    span = adm.groupby("SUBJECT_ID", sort=True).agg(FIRST=("ADMIT", "min"), LAST=("DISCH", "max"),
                                                    DIED=("EXPIRED", "any")).reset_index()
    outpatient = rows - int(adm["ROWS"].sum())
    weight = rng.lognormal(0.0, 0.7, len(span))
    span["OUT_ROWS"] = rng.multinomial(outpatient, weight / weight.sum())
    span["CHUNK"] = _subject_chunks(adm, span["OUT_ROWS"].to_numpy())

    _write_table(mimic4.admissions(adm) if mimic_iv else admissions_table(adm), files["ADMISSIONS"])
    _write_table(mimic4.labitems(items) if mimic_iv else labitems_table(items), files["D_LABITEMS"])
    written = _write_labevents(files["LABEVENTS"], items, adm, span, seed=seed, mimic_iv=mimic_iv, shape=shape)
    if written != rows:
        raise RuntimeError(f"wrote {written} LABEVENTS rows instead of {rows}")
    info = {"generator": "bench.synth", "version": VERSION, "rows": rows, "seed": seed, "layout": layout,
            "shape": shape.as_json(),
            "files": {table: str(path.relative_to(out_dir)) for table, path in files.items()},
            "admissions": len(adm), "subjects": len(span), "items": N_ITEMS,
            "special_items": items.special, "seconds": round(time.perf_counter() - started, 2)}
    (out_dir / "synth.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _write_labevents(path: Path, items: Items, adm: pd.DataFrame, span: pd.DataFrame, *, seed: int,
                     mimic_iv: bool, shape: Shape) -> int:
    """Stream LABEVENTS to ``path`` one chunk of whole subjects at a time (through a .tmp file, renamed when
    complete); return how many rows were written."""
    chunk_of_admission = adm["SUBJECT_ID"].map(span.set_index("SUBJECT_ID")["CHUNK"]).to_numpy()
    written = specimens = 0
    options = pv.WriteOptions(include_header=False, quoting_style="none")
    header = mimic4.MIMIC4_LABEVENTS_HEADER if mimic_iv else LABEVENTS_HEADER
    partial = path.with_name(path.name + ".tmp")
    with open(partial, "wb") as raw, (gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL,
                                                    mtime=0) if mimic_iv else raw) as sink:
        sink.write((",".join(header) + "\n").encode())
        for number, subjects in span.groupby("CHUNK", sort=True):
            chunk_rng = np.random.default_rng([seed, VERSION, int(number)])
            table = chunk_events(chunk_rng, items, adm[chunk_of_admission == number], subjects, written + 1,
                                 inject_single=written == 0, draws=mimic_iv, shape=shape)
            if mimic_iv:
                draws = int(pc.max(table["_DRAW"]).as_py()) + 1
                table = mimic4.labevents(np.random.default_rng([seed, VERSION, int(number), 4]), items, table,
                                         first_specimen=mimic4.MIMIC4_SPECIMEN_BASE + specimens)
                specimens += draws
            pv.write_csv(table, sink, options)
            written += table.num_rows
    partial.replace(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.synth",
                                     description="Synthetic MIMIC-shaped raw tables at any scale, for the benchmark.")
    parser.add_argument("out_dir", type=Path, help="folder for the three tables and synth.json")
    parser.add_argument("--rows", type=int, required=True,
                        help="LABEVENTS rows (27800000 is MIMIC-III, 118000000 MIMIC-IV)")
    parser.add_argument("--seed", type=int, default=SEED, help="default %(default)s")
    parser.add_argument("--layout", choices=LAYOUTS, default="mimic3",
                        help="mimic3: upper-case CSVs; mimic4: MIMIC-IV 2.2's hosp/*.csv.gz (default %(default)s)")
    parser.add_argument("--shape", choices=SHAPES, default="default",
                        help="how the rows fall around the stays: default (MIMIC's proportions) or heavy (most "
                             "rows quarantined or merged by the build; docs/benchmarks.md) (default %(default)s)")
    overrides = parser.add_argument_group("shape options", "each overrides the --shape preset's value (a share, 0-1)")
    overrides.add_argument("--outpatient-share", type=float,
                           help="rows without HADM_ID (the layout's: 0.15 mimic3, 0.40 mimic4)")
    overrides.add_argument("--early-draw-share", type=float, help="inpatient draws charted 2-48 h before ADMITTIME")
    overrides.add_argument("--late-draw-share", type=float, help="inpatient draws charted 1-72 h after DISCHTIME")
    overrides.add_argument("--repeat-share", type=float,
                           help="inpatient rows repeating an item of the same admission and day (dedup merges them)")
    args = parser.parse_args(argv)
    changed = {option.name: getattr(args, option.name) for option in fields(Shape)
               if getattr(args, option.name) is not None}
    try:
        shape = replace(SHAPES[args.shape], **changed)
    except ValueError as error:
        parser.error(str(error))
    info = write_synthetic(args.out_dir, rows=args.rows, seed=args.seed, layout=args.layout, shape=shape)
    for name in info["files"].values():
        path = args.out_dir / name
        print(f"{path}: {path.stat().st_size:,} bytes")
    print(f"{info['rows']:,} lab rows ({info['layout']}, shape {info['shape']['name']}), {info['admissions']:,} "
          f"admissions, {info['subjects']:,} subjects in {info['seconds']:.1f} s")
    return 0
