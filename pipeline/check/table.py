"""A table as ``badpoints check`` reads it: its rows in blocks of bounded size, whatever the file's size, each row
indexed by where it is in the file (a CSV's source line, as every finding names it; a Parquet file's row number,
from 1), typed as the schema declares its columns.

A CSV (``.csv``, ``.csv.gz``) is read by the lab flow's own reader (:func:`pipeline.reading.load.read_blocks`:
strict UTF-8, quoted fields that span lines, a ``.gz`` bounded in what it expands to), every column as text; each
block is then typed column by column (:func:`typed`), and a value whose text is not of its column's type is a
failure of the column's dtype check, as pandera names it. A Parquet file is read a row group batch at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.reading.load import BLOCK_BYTES, every_column, read_blocks
from schemas.checks import NUMBER_TEXT

PARQUET_ROWS = 1 << 20  # rows of a Parquet file read at a time
SUFFIXES = (".csv", ".csv.gz", ".parquet")


def is_table(path: Path) -> bool:
    """A file ``badpoints check`` reads as a table (a CSV, gzipped or not, or Parquet)."""
    return path.is_file() and path.name.lower().endswith(SUFFIXES)


@dataclass
class TableBlocks:
    """One table's blocks, in file order; once they were all taken, its ``sha256`` and ``rows``."""

    path: Path
    name: str
    sha256: str = ""
    rows: int = 0
    block_bytes: int = BLOCK_BYTES  # a CSV's text read at a time
    numbers: frozenset[str] = frozenset()  # a CSV's columns read as numbers where a block's text allows

    def __iter__(self) -> Iterator[pd.DataFrame]:
        if self.path.name.lower().endswith(".parquet"):
            yield from self._parquet()
            return
        blocks = read_blocks(self.path, self.name, select=every_column, block_bytes=self.block_bytes,
                             numbers=self.numbers)
        for block in blocks:
            self.rows += len(block)
            yield block
        self.sha256 = blocks.sha256 or ""

    def _parquet(self) -> Iterator[pd.DataFrame]:
        with open(self.path, "rb") as handle:  # a Python file: any path's bytes
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
            handle.seek(0)
            start = 1
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=PARQUET_ROWS):
                frame = pa_arrow.Table.from_batches([batch]).to_pandas()
                frame.index = pd.RangeIndex(start, start + len(frame), name="line")
                start += len(frame)
                self.rows += len(frame)
                yield frame
        self.sha256 = digest


@dataclass(frozen=True)
class Untyped:
    """The rows of one column whose text is not of the column's type (``dtype``, pandera's name of it)."""

    column: str
    dtype: str
    lines: np.ndarray


def number_columns(schema: pa.DataFrameSchema) -> frozenset[str]:
    """The schema's columns of numbers (integers too: read as float64, then typed as :func:`typed` types text)."""
    return frozenset(name for name, column in schema.columns.items() if column.dtype is not None
                     and pd.api.types.is_numeric_dtype(getattr(column.dtype, "type", None))
                     and not pd.api.types.is_bool_dtype(getattr(column.dtype, "type", None)))


def typed(block: pd.DataFrame, schema: pa.DataFrameSchema) -> tuple[pd.DataFrame, list[Untyped]]:
    """A block of text typed as ``schema`` declares each column (numbers, datetimes, booleans; text as it is), and
    per column the rows whose text is not of its type (their value is null then, so the column's other checks
    see a null, not a wrong number). A block read already typed (Parquet) is left as it is."""
    failures: list[Untyped] = []
    columns = {}
    for name, column in schema.columns.items():
        if name not in block or column.dtype is None or not _is_text(block[name]) and not _read_as_numbers(
                block[name], column.dtype):
            continue
        values, bad = _as(block[name], column.dtype)
        if values is not None:
            columns[name] = values
        if bad is not None and bad.any():
            failures.append(Untyped(name, f"dtype('{column.dtype}')", block.index.to_numpy()[bad]))
    return (block.assign(**columns) if columns else block), failures


def _is_text(values: pd.Series) -> bool:
    return pd.api.types.is_string_dtype(values) or values.dtype == object


def _read_as_numbers(values: pd.Series, dtype: Any) -> bool:
    """A column the reader gave as float64 whose schema wants whole numbers: typed as its text would be."""
    return values.dtype == np.float64 and pd.api.types.is_integer_dtype(getattr(dtype, "type", None))


def _arrow(text: pd.Series) -> pa_arrow.ChunkedArray | pa_arrow.Array:
    """A text column as Arrow (its own buffers where it is Arrow-backed already)."""
    held = getattr(text.array, "_pa_array", None)
    return held if held is not None else pa_arrow.array(text.astype(object), type=pa_arrow.string(), from_pandas=True)


def _numbers(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A text column's numbers (float64, NaN where null or not a number) and which non-null values are not one:
    cast by Arrow in one go, or, where some text is not a number, value by value (blanks around a number allowed)."""
    arrow = _arrow(text)
    try:
        numbers = pc.cast(arrow, pa_arrow.float64())
    except pa_arrow.ArrowInvalid:
        trimmed = pc.utf8_trim_whitespace(arrow)
        ok = pc.or_(pc.match_substring_regex(trimmed, f"^(?:{NUMBER_TEXT})$"),
                    pc.match_substring_regex(trimmed, r"(?i)^[+-]?(?:inf|infinity|nan)$"))
        numbers = pc.cast(pc.if_else(ok, trimmed, None), pa_arrow.float64())
    values = numbers.to_numpy(zero_copy_only=False) if not isinstance(numbers, pa_arrow.ChunkedArray) else (
        numbers.to_numpy())
    values = np.asarray(values, dtype="float64")
    suspect = text.notna().to_numpy() & np.isnan(values)  # null, or text that is not a number, or the text NaN
    return values, (suspect & ~_nan_text(arrow)) if suspect.any() else suspect


def _nan_text(arrow: pa_arrow.ChunkedArray | pa_arrow.Array) -> np.ndarray:
    """Which values are the text NaN (a number, not a failure to read one)."""
    found = pc.match_substring_regex(pc.utf8_trim_whitespace(arrow), r"(?i)^[+-]?nan$")
    return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)


def _as(text: pd.Series, dtype: Any) -> tuple[pd.Series | None, np.ndarray | None]:
    """``text`` as ``dtype`` (a pandera DataType), and which of its non-null values are not of it."""
    kind = getattr(dtype, "type", None)
    present = text.notna().to_numpy()
    if kind is None:
        return None, None
    if pd.api.types.is_bool_dtype(kind):
        lowered = text.str.strip().str.lower()
        values = lowered.map({"true": True, "false": False, "1": True, "0": False})
        bad = present & values.isna().to_numpy()
        return values.astype("boolean" if values.isna().any() else "bool"), bad
    if pd.api.types.is_numeric_dtype(kind):
        numbers, bad = _numbers(text) if _is_text(text) else (text.to_numpy("float64"), np.zeros(len(text), bool))
        if pd.api.types.is_integer_dtype(kind):
            fraction = np.isfinite(numbers) & (numbers != np.round(numbers))
            bad |= fraction | np.isinf(numbers)
            numbers = np.where(fraction | np.isinf(numbers), np.nan, numbers)
            series = pd.Series(numbers, index=text.index, name=text.name)
            return (series.astype(kind) if not np.isnan(numbers).any() else series.astype("Int64")), bad
        return pd.Series(numbers, index=text.index, name=text.name).astype(kind), bad
    if pd.api.types.is_datetime64_any_dtype(kind):
        times = pd.to_datetime(text, errors="coerce", format="ISO8601")
        return times, present & times.isna().to_numpy()
    return None, None
