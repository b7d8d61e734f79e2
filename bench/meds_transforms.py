"""MEDS-Transforms 0.7's normalization pipeline on a MEDS dataset, measured: ``fit_normalization`` ->
``fit_vocabulary_indices`` -> ``normalization``, as its README's example pipeline declares them.

Run it with the python of the environment MEDS-Transforms lives in (``make meds-env``; it pins ``polars<2``, so
never badpoints' ``.venv``)::

    .venv-meds/bin/python bench/meds_transforms.py MEDS_DIR OUT_DIR [--threads N]

It writes ``OUT_DIR/pipeline.yaml``, runs ``MEDS_transform-pipeline`` on it (the console script beside this
python, which runs each stage as ``MEDS_transform-stage pipeline.yaml STAGE stage=STAGE``), and prints one JSON
object: wall seconds and peak RSS of the stages, rows in and out per split, rows dropped (per code), and per code
how many output z are NaN, +inf or -inf and the largest finite |z|, with its fitted ``values/*`` from
``OUT_DIR/metadata/codes.parquet``.
Non-finite numbers in the JSON are the strings "nan", "inf", "-inf".

It imports nothing from badpoints (it runs in the other environment) and reads parquet with pyarrow alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STAGES = ("fit_normalization", "fit_vocabulary_indices", "normalization")
AGGREGATIONS = ("code/n_occurrences", "code/n_subjects", "values/n_occurrences", "values/sum", "values/sum_sqd")
SPLITS = ("train", "tuning", "held_out")


def pipeline_yaml(input_dir: Path, output_dir: Path) -> str:
    """The pipeline configuration: the README's normalization stages, nothing before them."""
    aggregations = "".join(f"        - {name}\n" for name in AGGREGATIONS)
    return (f"input_dir: {json.dumps(str(input_dir))}\n"
            f"output_dir: {json.dumps(str(output_dir))}\n"
            "description: badpoints bench/meds_transforms.py, MEDS-Transforms' normalization\n"
            "stages:\n"
            "  - fit_normalization:\n"
            "      _base_stage: aggregate_code_metadata\n"
            "      aggregations:\n"
            f"{aggregations}"
            "  - fit_vocabulary_indices\n"
            "  - normalization\n")


def run(input_dir: Path, output_dir: Path, *, threads: int | None = None) -> dict:
    """Run the pipeline from ``input_dir`` into ``output_dir`` (which must be empty or absent) and measure it."""
    input_dir, output_dir = input_dir.resolve(), output_dir.resolve()
    if output_dir.exists() and any(output_dir.iterdir()):
        raise SystemExit(f"{output_dir} is not empty: MEDS-Transforms skips the stages it finds done there; "
                         "give an empty or new folder")
    output_dir.mkdir(parents=True, exist_ok=True)
    config = output_dir / "pipeline.yaml"
    config.write_text(pipeline_yaml(input_dir, output_dir))
    bin_dir = Path(sys.executable).parent
    # The runner starts each stage through the shell as `MEDS_transform-stage ...`, found on PATH.
    env = dict(os.environ, PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    if threads:
        env["POLARS_MAX_THREADS"] = str(threads)
    script = bin_dir / "MEDS_transform-pipeline"
    start = time.perf_counter()
    done = subprocess.run([str(script), str(config)], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest stage process (Linux: KiB)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"MEDS_transform-pipeline exited {done.returncode} (log: {output_dir / '.logs'})")
    return {
        "meds_transforms": metadata.version("MEDS_transforms"), "polars": metadata.version("polars"),
        "polars_threads": threads, "stages": list(STAGES), "input": str(input_dir), "output": str(output_dir),
        "seconds": round(seconds, 3), "peak_rss_bytes": peak_kib * 1024,
        **measure(input_dir, output_dir),
    }


def measure(input_dir: Path, output_dir: Path) -> dict:
    """Rows in and out per split, rows dropped per code, and per code the non-finite z and the fitted values."""
    codes = pq.read_table(output_dir / "metadata" / "codes.parquet")
    names = dict(zip(codes["code/vocab_index"].to_pylist(), codes["code"].to_pylist()))
    rows, dropped, z = {}, {}, {}
    for split in _splits(input_dir, output_dir):
        before = _read_split(input_dir / "data" / split, ["code"])
        after = _read_split(output_dir / "data" / split, ["code", "numeric_value"])
        rows[split] = {"in": before.num_rows, "out": after.num_rows, "shards": _shards(input_dir / "data" / split)}
        counted_in = _count(before["code"])
        counted_out = {names[index]: n for index, n in _count(after["code"]).items()}
        for code, n in counted_in.items():
            if n > counted_out.get(code, 0):
                dropped[code] = dropped.get(code, 0) + n - counted_out.get(code, 0)
        for code, counts in _non_finite(after, names).items():
            total = z.setdefault(code, {"rows": 0, "nan": 0, "posinf": 0, "neginf": 0, "max_abs_finite": None})
            for key, n in counts.items():
                total[key] = _larger(total[key], n) if key == "max_abs_finite" else total[key] + n
    fitted = {code: {key.removeprefix("values/"): _number(value) for key, value in record.items()
                     if key.startswith("values/")}
              for code, record in zip(codes["code"].to_pylist(), codes.to_pylist())}
    return {
        "rows": rows,
        "rows_dropped": sum(dropped.values()),
        "dropped_by_code": dict(sorted(dropped.items())),
        "non_finite_codes": sorted(code for code, c in z.items() if c["nan"] or c["posinf"] or c["neginf"]),
        "z": dict(sorted(z.items())),
        "fitted": dict(sorted(fitted.items())),
        "fitted_types": {name: str(codes.schema.field(name).type) for name in codes.column_names
                         if name.startswith("values/")},
    }


def _splits(input_dir: Path, output_dir: Path) -> list[str]:
    found = {p.name for folder in (input_dir, output_dir) for p in (folder / "data").iterdir()
             if p.is_dir() and not p.name.startswith(".")}
    return [s for s in SPLITS if s in found] + sorted(found - set(SPLITS))


def _shards(folder: Path) -> int:
    return len(list(folder.rglob("*.parquet"))) if folder.is_dir() else 0


def _read_split(folder: Path, columns: list[str]) -> pa.Table:
    paths = sorted(folder.rglob("*.parquet")) if folder.is_dir() else []
    tables = [pq.read_table(p, columns=columns) for p in paths]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.table({c: pa.array([], pa.int64() if c == "code" else pa.float32()) for c in columns})
    return pa.concat_tables(tables, promote_options="permissive")


def _count(column: pa.ChunkedArray) -> dict:
    counted = pc.value_counts(column)
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist()))


def _non_finite(table: pa.Table, names: dict) -> dict[str, dict[str, int]]:
    """Per code: rows, the z that are NaN, +inf, -inf (a null z, a row without a value, is none of them), and
    the largest finite |z| (None without one)."""
    if table.num_rows == 0:
        return {}
    codes = table["code"].to_numpy()
    z = table["numeric_value"].to_numpy(zero_copy_only=False)  # null -> NaN here, so count nulls apart
    null = table["numeric_value"].is_null().to_numpy(zero_copy_only=False)
    found = {}
    for index in np.unique(codes):
        at = codes == index
        values, present = z[at], ~null[at]
        finite = values[present & np.isfinite(values)]
        found[names[int(index)]] = {"rows": int(at.sum()), "nan": int((np.isnan(values) & present).sum()),
                                    "posinf": int((values == np.inf).sum()), "neginf": int((values == -np.inf).sum()),
                                    "max_abs_finite": float(np.abs(finite).max()) if len(finite) else None}
    return found


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _number(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input_dir", type=Path, help="a MEDS dataset (data/, metadata/)")
    parser.add_argument("output_dir", type=Path, help="an empty or new folder for MEDS-Transforms' outputs")
    parser.add_argument("--threads", type=int, default=None,
                        help="POLARS_MAX_THREADS for the stages (default: polars' own, one per core)")
    args = parser.parse_args(argv)
    try:
        metadata.version("MEDS_transforms")
    except metadata.PackageNotFoundError:
        raise SystemExit(f"MEDS-Transforms is not installed for {sys.executable}; run `make meds-env` and use "
                         ".venv-meds/bin/python") from None
    print(json.dumps(run(args.input_dir, args.output_dir, threads=args.threads), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
