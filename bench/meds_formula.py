"""MEDS-Transforms 0.7.0's normalization on a whole MEDS folder, in the benchmark's terms: the formula itself
(read from its source, with the lines it reproduces) lives in :mod:`pipeline.meds.formula`, which the
validator ships; this module reads a folder with it and says what the pipeline will output, as
``bench/meds_transforms.py`` measures it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.meds.formula import (WORKER, Fitted, fit_shard, given_mean_std, present,  # noqa: F401
                                         reduce_shards, shard_order, zscore)
from pipeline.meds.metadata import read_metadata


# A MEDS folder ------------------------------------------------------------------------------------------------


def _read(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    table = pq.read_table(path, columns=["subject_id", "code", "numeric_value"])
    values = table["numeric_value"]
    return (table["subject_id"].to_numpy(), np.asarray(table["code"].to_pylist(), dtype=object),
            values.to_numpy(zero_copy_only=False).astype(np.float32),
            values.is_null().to_numpy(zero_copy_only=False))


def fit_folder(root: Path, worker: int = WORKER) -> Fitted:
    """``fit_normalization`` on a MEDS folder: the train/ shards (else every shard filtered to the train
    subjects of ``subject_splits.parquet``), each fitted, then reduced."""
    data = Path(root) / "data"
    shards = {p.relative_to(data).with_suffix("").as_posix(): p for p in sorted(data.rglob("*.parquet"))}
    train = {name: p for name, p in shards.items() if name.startswith("train/")}
    subjects = None
    if not train:
        splits = pq.read_table(Path(root) / "metadata" / "subject_splits.parquet")
        subjects = splits.filter(pc.equal(splits["split"], "train"))["subject_id"].to_numpy()
        train = shards
    partials = {}
    for name, path in train.items():
        subject, codes, values, null = _read(path)
        if subjects is not None:
            keep = np.isin(subject, subjects)
            codes, values, null = codes[keep], values[keep], null[keep]
        partials[name] = fit_shard(codes, values, null)
    return reduce_shards(partials, worker)


def predict_folder(root: Path, worker: int = WORKER) -> dict:
    """What the pipeline will output for a MEDS folder, in ``bench/meds_transforms.py``'s terms: rows dropped
    per code, per code the rows out, their NaN, +inf and -inf z and largest finite |z|, and the non-finite
    codes."""
    fitted = fit_folder(root, worker)
    given = given_mean_std(read_metadata(Path(root)).codes, fitted)
    dropped, z = {}, {}
    for path in sorted((Path(root) / "data").rglob("*.parquet")):
        _, codes, values, null = _read(path)
        kept, out, z_null = zscore(fitted, codes, values, null, given)
        for code in np.unique(codes[~kept]):
            dropped[code] = dropped.get(code, 0) + int((codes[~kept] == code).sum())
        for code in np.unique(codes[kept]):
            rows = codes[kept] == code
            values_out, nulls = out[rows], z_null[rows]
            total = z.setdefault(str(code), {"rows": 0, "nan": 0, "posinf": 0, "neginf": 0, "max_abs_finite": None})
            total["rows"] += int(rows.sum())
            total["nan"] += int((np.isnan(values_out) & ~nulls).sum())
            total["posinf"] += int((values_out == np.inf).sum())
            total["neginf"] += int((values_out == -np.inf).sum())
            finite = np.abs(values_out[~nulls & np.isfinite(values_out)])
            if len(finite):
                largest = float(finite.max())
                seen = total["max_abs_finite"]
                total["max_abs_finite"] = largest if seen is None else max(seen, largest)
    return {
        "rows_dropped": sum(dropped.values()),
        "dropped_by_code": dict(sorted(dropped.items())),
        "non_finite_codes": sorted(c for c, n in z.items() if n["nan"] or n["posinf"] or n["neginf"]),
        "z": dict(sorted(z.items())),
    }
