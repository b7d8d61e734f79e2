"""One MEDS shard read whole (memory bounded by the shard), checked against ``meds``' ``DataSchema`` and summed into
a small :class:`ShardPartial`: per code its rows and values (MEDS-Transforms' float32 sums of the fitted rows, and
float64 count, mean and centred sum of squares for the two-pass reference), per subject where its rows are and
whether they are in order. Partials of any shards, in any order, are put together by :mod:`pipeline.meds.combine`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.meds import zscored
from pipeline.meds.formula import Fitted, fit_shard
from pipeline.reading.arrow import NotRegular, opened
from pipeline.reporting.report import as_shown
from schemas.errors import out_of_memory

CODE_COLUMNS = {"rows": np.int64, "numeric": np.int64, "nan": np.int64, "inf": np.int64, "beyond": np.int64,
                "text_only": np.int64, "min": np.float64, "max": np.float64, "fit_n": np.int64,
                "fit_mean": np.float64, "fit_m2": np.float64}
SUBJECT_COLUMNS = {"subject_id": np.int64, "rows": np.int64, "first_time": np.int64, "last_time": np.int64,
                   "out_of_order": bool}


def no_rows(columns: dict[str, type | str]) -> pd.DataFrame:
    """A frame of ``columns`` (name -> dtype) with no row, typed as one with rows is: a shard refused, a shard of
    no row and a folder with neither give the checks tables of the types their models declare."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


@dataclass(frozen=True)
class ShardPartial:
    """What one shard holds, small: ``name`` (``train/0``), its split (the first folder of the name), file digest
    and rows; ``unreadable`` (why it could not be read) or ``schema`` (why meds' DataSchema refused it, and
    ``schema_rows`` the rows that fail: those with a null subject_id or code, else all) instead of the rest; per
    code (:data:`CODE_COLUMNS`), MEDS-Transforms' fit of its fitted rows (``fitted``), per subject
    (:data:`SUBJECT_COLUMNS`)."""

    name: str
    path: str
    split: str
    sha256: str = ""
    rows: int = 0
    unreadable: str | None = None
    schema: str | None = None
    schema_rows: int = 0
    codes: pd.DataFrame = field(default_factory=lambda: no_rows(CODE_COLUMNS))
    fitted: Fitted | None = None
    subjects: pd.DataFrame = field(default_factory=lambda: no_rows(SUBJECT_COLUMNS))


def shard_name(data: Path, path: Path) -> str:
    """``data/train/0.parquet`` -> ``train/0``: how MEDS-Transforms names a shard; a byte of the name that is not
    UTF-8 written as its escape (``train/\\xff``: :func:`pipeline.reporting.report.as_shown`), so the name is text
    that every table and report holds."""
    return as_shown(path.relative_to(data).with_suffix("").as_posix())


def read_shard(path: Path, name: str, *, fit: bool | np.ndarray, bound: float,
               vocab: dict[int, str] | None = None) -> ShardPartial:
    """The partial of one shard. ``fit``: whether MEDS-Transforms fits on its rows (a train/ shard), or the train
    subjects of subject_splits.parquet whose rows it fits on (a dataset without train/ shards); ``bound``: [raw]
    valuenum_abs_bound, or for normalized z [scale] warn_bound; ``vocab``: None for a MEDS dataset, else the
    shard is normalization's output (:mod:`pipeline.meds.zscored`), its integer codes named by ``vocab``."""
    split = name.split("/")[0] if "/" in name else name
    try:
        with opened(path) as handle:  # pyarrow reads the open file: a path of any bytes
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
            handle.seek(0)
            table = pq.read_table(handle)
    except NotRegular as exc:  # a FIFO or a device: never opened
        return ShardPartial(name, str(path), split, unreadable=str(exc))
    except (OSError, pa.ArrowException) as exc:
        if out_of_memory(exc):
            raise
        return ShardPartial(name, str(path), split, unreadable=f"{type(exc).__name__}: {exc}"[:300])
    problem = schema_problem(table) if vocab is None else zscored.schema_problem(table)
    if problem is not None:
        return ShardPartial(name, str(path), split, digest, table.num_rows, schema=problem,
                            schema_rows=_null_key_rows(table) or table.num_rows)
    if vocab is not None:
        table = zscored.name_codes(table, vocab)
    frame = _frame(table)
    fitted_rows = _fitted_rows(frame, fit)
    fitted = fit_shard(frame["code"].to_numpy()[fitted_rows], frame["numeric_value"].to_numpy()[fitted_rows],
                       frame["null"].to_numpy()[fitted_rows])
    return ShardPartial(name, str(path), split, digest, table.num_rows, codes=code_sums(frame, fitted_rows, bound),
                        fitted=fitted, subjects=subject_spans(frame))


def schema_problem(table: pa.Table) -> str | None:
    """Why ``meds.DataSchema`` refuses the table (types, missing columns, nulls where none may be), or None."""
    try:
        meds.DataSchema.validate(table)
    except Exception as exc:  # noqa: BLE001 - flexible_schema's errors and whatever its casts raise
        if out_of_memory(exc):
            raise
        cause = exc.__cause__
        return f"{exc}" + (f" ({cause})" if cause is not None else "")
    return None


def _null_key_rows(table: pa.Table) -> int:
    """Rows with a null subject_id or code (0 where a column is absent)."""
    names = [name for name in ("subject_id", "code") if name in table.column_names]
    if not names:
        return 0
    null = np.zeros(table.num_rows, dtype=bool)
    for name in names:
        null |= table[name].is_null().to_numpy(zero_copy_only=False)
    return int(null.sum())


def _frame(table: pa.Table) -> pd.DataFrame:
    """The columns the partial needs: subject_id, time (int64 microseconds; null time -> smallest), code,
    numeric_value (float32, NaN where null), null, has_text."""
    values = table["numeric_value"]
    text = table["text_value"] if "text_value" in table.column_names else None
    time = table["time"].cast(pa.timestamp("us")).cast(pa.int64()).fill_null(np.iinfo(np.int64).min)
    return pd.DataFrame({
        "subject_id": table["subject_id"].to_numpy(),
        "time": time.to_numpy(),
        "code": pd.Categorical(table["code"].to_pandas()),
        "numeric_value": values.to_numpy(zero_copy_only=False).astype(np.float32),
        "null": values.is_null().to_numpy(zero_copy_only=False),
        "has_text": (np.zeros(table.num_rows, dtype=bool) if text is None
                     else text.is_valid().to_numpy(zero_copy_only=False)),
    })


def _fitted_rows(frame: pd.DataFrame, fit: bool | np.ndarray) -> np.ndarray:
    if isinstance(fit, np.ndarray):
        return np.isin(frame["subject_id"].to_numpy(), fit)
    return np.full(len(frame), bool(fit))


def code_sums(frame: pd.DataFrame, fitted: np.ndarray, bound: float) -> pd.DataFrame:
    """Per code (:data:`CODE_COLUMNS`): rows, non-null values, NaN, +-inf, finite values beyond ``bound``, rows
    with text and no value, finite min and max; over the fitted rows' finite values, n, mean and the centred sum
    of squares (float64, two-pass within the shard)."""
    x = frame["numeric_value"].to_numpy().astype(np.float64)
    null = frame["null"].to_numpy()
    finite = ~null & np.isfinite(x)
    kept = np.where(finite, x, np.nan)
    fit_x = np.where(finite & fitted, x, np.nan)
    parts = pd.DataFrame({"code": frame["code"], "rows": 1, "numeric": ~null, "nan": ~null & np.isnan(x),
                          "inf": ~null & np.isinf(x), "beyond": finite & (np.abs(x) > bound),
                          "text_only": null & frame["has_text"].to_numpy(), "x": kept, "fit_x": fit_x})
    groups = parts.groupby("code", observed=True, sort=True)
    sums = groups[["rows", "numeric", "nan", "inf", "beyond", "text_only"]].sum()
    sums["min"], sums["max"] = groups["x"].min(), groups["x"].max()
    sums["fit_n"] = groups["fit_x"].count()
    sums["fit_mean"] = groups["fit_x"].mean()
    centred = parts["fit_x"] - parts["code"].map(sums["fit_mean"]).astype(np.float64)
    sums["fit_m2"] = (centred * centred).groupby(parts["code"], observed=True).sum()
    sums.index = sums.index.astype(str)
    return sums[list(CODE_COLUMNS)].astype(CODE_COLUMNS)


def subject_spans(frame: pd.DataFrame) -> pd.DataFrame:
    """Per subject (:data:`SUBJECT_COLUMNS`): its rows, first and last time, and whether its rows are out of order
    in the shard: not one contiguous run, or a time before the row before it."""
    subject = frame["subject_id"].to_numpy()
    time = frame["time"].to_numpy()
    position = np.arange(len(frame))
    backwards = np.zeros(len(frame), dtype=bool)
    backwards[1:] = (subject[1:] == subject[:-1]) & (time[1:] < time[:-1])
    parts = pd.DataFrame({"subject_id": subject, "position": position, "time": time, "backwards": backwards})
    groups = parts.groupby("subject_id", sort=True)
    spans = groups.agg(rows=("position", "size"), first=("position", "min"), last=("position", "max"),
                       first_time=("time", "min"), last_time=("time", "max"), backwards=("backwards", "any"))
    spans["out_of_order"] = spans["backwards"] | (spans["last"] - spans["first"] + 1 != spans["rows"])
    return spans.reset_index()[list(SUBJECT_COLUMNS)]
