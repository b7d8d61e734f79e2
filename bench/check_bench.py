"""``badpoints check`` of a user's preprocessed lab table beside pandera's own ``validate`` of the same schema on the
same file read by pandas, on N rows (the target: within 1.5x pandera's wall time, at most 2 GB peak RSS).

    python -m bench.check_bench --rows N --out DIR [--data DATA_DIR]

The table is what a user's pipeline writes from the synthetic LABEVENTS (:mod:`bench.synth`, generated once into
``DIR/data`` as ``make bench`` keeps it, or ``--data``): ten columns, among them a z-score of VALUENUM per item
(its mean and std fitted on the train admissions), a flag code, a timestep and a split, written with pyarrow a
batch at a time (``DIR/table/PREPROCESSED.csv``). The schema (``DIR/table/schema.yaml``, pandera YAML) types the ten
columns and uses badpoints' checks: ``finite``, ``z_within`` by item, ``code_in_range``, ``values_within`` and the
table check ``z_explained`` (which reads every row before any is checked: two passes over the file). Each side
runs in a process of its own, measured as every bench step is (:func:`bench.steps.measure`: wall seconds, peak RSS
of the process tree). Results go to ``DIR/check.json`` and stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from bench.steps import MB, measure, prepare_data
from bench.synth import SEED

RATIO_LIMIT = 1.5  # badpoints check's wall time over pandera's own validate of the same schema
RSS_LIMIT_MB = 2000  # badpoints check's peak RSS, all its processes
SCHEMA = """\
schema_type: dataframe
columns:
  SUBJECT_ID: {dtype: int64}
  HADM_ID: {dtype: int64}
  ITEMID: {dtype: int64}
  CHARTTIME: {dtype: str}
  VALUENUM: {dtype: float64, nullable: true}
  VALUENUM_Z:
    dtype: float64
    nullable: true
    checks:
      - options: {check_name: finite}
  VALUEUOM: {dtype: str, nullable: true}
  FLAG_CODE:
    dtype: int64
    checks:
      - n: 3
        options: {check_name: code_in_range}
  TIMESTEP:
    dtype: int64
    checks:
      - {low: 0, high: 100000, options: {check_name: values_within}}
  SPLIT:
    dtype: str
    checks:
      - {value: [train, val, test], options: {check_name: isin}}
checks:
  - {column: VALUENUM_Z, by: ITEMID, bound: 1000, options: {check_name: z_within}}
  - {column: VALUENUM_Z, values: VALUENUM, by: ITEMID, options: {check_name: z_explained}}
"""
PANDERA = """\
import sys
import pandas as pd
import pandera.pandas as pa
import schemas.registered  # badpoints' checks, registered by name, as a user's schema of them needs
schema = pa.DataFrameSchema.from_yaml(open(sys.argv[2]).read())
frame = pd.read_csv(sys.argv[1])
try:
    schema.validate(frame, lazy=True)
    print("valid")
except pa.errors.SchemaErrors as errors:
    print(len(errors.failure_cases), "failure cases")
"""


def write_table(labevents: Path, out: Path) -> Path:
    """The preprocessed table of ``labevents`` (its rows with a number), written a batch at a time."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "PREPROCESSED.csv"
    if path.exists():
        return path
    read = dict(convert_options=pv.ConvertOptions(include_columns=["SUBJECT_ID", "HADM_ID", "ITEMID", "CHARTTIME",
                                                                   "VALUENUM", "VALUEUOM", "FLAG"],
                                                  column_types={"CHARTTIME": pa.string()}),
                read_options=pv.ReadOptions(block_size=64 << 20))
    stats = _train_stats(labevents, read)
    with pv.CSVWriter(path.with_suffix(".tmp"), _schema()) as writer:
        for batch in pv.open_csv(labevents, **read):
            table = pa.Table.from_batches([batch]).filter(pc.is_valid(batch["VALUENUM"]))
            writer.write_table(_preprocessed(table.filter(pc.is_valid(table["HADM_ID"])), stats))
    path.with_suffix(".tmp").rename(path)
    return path


def _split(hadm: pa.Array) -> pa.Array:
    bucket = pc.bit_wise_and(pc.cast(hadm, pa.int64()), 15)
    return pc.if_else(pc.less(bucket, 12), "train", pc.if_else(pc.less(bucket, 14), "val", "test"))


def _train_stats(labevents: Path, read: dict) -> pa.Table:
    parts = []
    for batch in pv.open_csv(labevents, **read):
        table = pa.Table.from_batches([batch]).filter(pc.is_valid(batch["VALUENUM"]))
        table = table.filter(pc.is_valid(table["HADM_ID"]))
        train = table.filter(pc.equal(_split(table["HADM_ID"]), "train"))
        x = pc.cast(train["VALUENUM"], pa.float64())
        parts.append(pa.table({"ITEMID": train["ITEMID"], "n": pc.if_else(pc.is_valid(x), 1, 0), "s": x,
                               "q": pc.multiply(x, x)}).group_by("ITEMID").aggregate(
            [("n", "sum"), ("s", "sum"), ("q", "sum")]))
    totals = pa.concat_tables(parts).group_by("ITEMID").aggregate([("n_sum", "sum"), ("s_sum", "sum"),
                                                                   ("q_sum", "sum")])
    n = pc.cast(totals["n_sum_sum"], pa.float64())
    mean = pc.divide(totals["s_sum_sum"], n)
    var = pc.max_element_wise(pc.subtract(pc.divide(totals["q_sum_sum"], n), pc.multiply(mean, mean)), 0.0)
    return pa.table({"ITEMID": totals["ITEMID"], "mean": mean, "std": pc.sqrt(var)})


def _schema() -> pa.Schema:
    return pa.schema([("SUBJECT_ID", pa.int64()), ("HADM_ID", pa.int64()), ("ITEMID", pa.int64()),
                      ("CHARTTIME", pa.string()), ("VALUENUM", pa.float64()), ("VALUENUM_Z", pa.float64()),
                      ("VALUEUOM", pa.string()), ("FLAG_CODE", pa.int64()), ("TIMESTEP", pa.int64()),
                      ("SPLIT", pa.string())])


def _preprocessed(table: pa.Table, stats: pa.Table) -> pa.Table:
    """A user's columns: the z of each row with its item's train stats (a plain std, guarded by +1e-7), the flag as
    a code, a timestep (here the day of the month of CHARTTIME) and the split."""
    joined = table.join(stats, "ITEMID", join_type="left outer")
    x = pc.cast(joined["VALUENUM"], pa.float64())
    z = pc.divide(pc.subtract(x, pc.fill_null(joined["mean"], 0.0)), pc.add(pc.fill_null(joined["std"], 0.0), 1e-7))
    flag = pc.if_else(pc.is_null(joined["FLAG"]), 0, pc.if_else(pc.equal(joined["FLAG"], "abnormal"), 1, 2))
    day = pc.cast(pc.utf8_slice_codeunits(joined["CHARTTIME"], 8, 10), pa.int64())
    return pa.table([pc.cast(joined["SUBJECT_ID"], pa.int64()), pc.cast(joined["HADM_ID"], pa.int64()),
                     pc.cast(joined["ITEMID"], pa.int64()), pc.cast(joined["CHARTTIME"], pa.string()), x, z,
                     pc.cast(joined["VALUEUOM"], pa.string()), pc.cast(flag, pa.int64()), day,
                     _split(joined["HADM_ID"])], schema=_schema())


def run(*, rows: int, out: Path, data: Path | None = None) -> dict:
    """Both sides measured on the table of ``rows`` lab rows; the ratio and the targets."""
    if data is None:
        data = out / "data" / f"synth-rows{rows}-seed{SEED}"
        prepare_data(data, rows=rows, seed=SEED, out=out)
    table = write_table(data / "LABEVENTS.csv", out / "table")
    schema = out / "table" / "schema.yaml"
    schema.write_text(SCHEMA)
    logs = out / "logs"
    ours = measure("check", [sys.executable, "-m", "pipeline.cli", "check", str(table), "--schema", str(schema),
                             "-q", "--json", str(out / "check-report.json")], log=logs / "check.log")
    theirs = measure("pandera", [sys.executable, "-c", PANDERA, str(table), str(schema)], log=logs / "pandera.log")
    ratio = ours.seconds / theirs.seconds if ours.seconds and theirs.seconds else None
    results = {"rows": rows, "table_bytes": table.stat().st_size, "check": vars(ours), "pandera": vars(theirs),
               "ratio": ratio, "targets": {"ratio": {"limit": RATIO_LIMIT, "met": ratio is not None and
                                                     ratio <= RATIO_LIMIT},
                                           "check_rss_mb": {"limit": RSS_LIMIT_MB, "value": ours.tree_peak_rss_mb,
                                                            "met": (ours.tree_peak_rss_mb or 0) <= RSS_LIMIT_MB}}}
    (out / "check.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.check_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None, help="a folder holding LABEVENTS.csv (default: generated)")
    args = parser.parse_args(argv)
    results = run(rows=args.rows, out=args.out, data=args.data)
    ours, theirs = results["check"], results["pandera"]
    print(f"{results['rows']:,} rows, {results['table_bytes'] / MB:,.0f} MB of CSV")
    print(f"badpoints check: {ours['seconds']:.1f} s, peak RSS {ours['tree_peak_rss_mb']:,.0f} MB "
          f"(exit {ours['exit_code']})")
    print(f"pandera validate (pandas read_csv): {theirs['seconds']:.1f} s, peak RSS "
          f"{theirs['tree_peak_rss_mb']:,.0f} MB (exit {theirs['exit_code']})")
    print(f"ratio {results['ratio']:.2f} (limit {RATIO_LIMIT}); check RSS {ours['tree_peak_rss_mb']:,.0f} MB "
          f"(limit {RSS_LIMIT_MB})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
