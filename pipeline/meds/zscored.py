"""The output of MEDS-Transforms' ``normalization`` stage, told apart from a MEDS dataset and read as one.

``normalization`` writes ``data/{split}/*.parquet`` with ``code`` as the code's vocabulary index (an integer,
``fit_vocabulary_indices``' ``code/vocab_index`` in ``metadata/codes.parquet``, numbered from 1), the z in
``numeric_value`` (float32) and no ``text_value``. ``meds.DataSchema`` wants a string ``code``, so such a shard is
checked with :func:`schema_problem` instead, and its codes are named through the vocabulary (:func:`name_codes`)
so that every finding names a code as the dataset before the stage did.

How a folder is known to be normalized (:func:`is_normalized`): most of its shards' ``code`` is an integer, read
from the Parquet footers only; a shard of the other kind is then that shard's ``meds_schema`` finding, not the
folder's kind. The data decide, not the run's markers: MEDS' own schema has a string code and the only
MEDS-Transforms stage that writes an integer one into ``data/`` is ``normalization``; a ``data/`` folder copied
without ``.logs/normalization.done`` is still normalized, and a folder with the marker but string codes is not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.reading.arrow import parquet_schema
from schemas.errors import out_of_memory


def is_normalized(paths: list[Path]) -> bool:
    """Whether most of the shards whose footer can be read have an integer ``code``: normalization's output (a
    tie is a MEDS dataset, whose schema is meds' own)."""
    kinds = [kind for kind in map(_integer_code, paths) if kind is not None]
    return 2 * sum(kinds) > len(kinds)


def _integer_code(path: Path) -> bool | None:
    """Whether the shard's footer declares an integer ``code``; None where it cannot be read."""
    try:
        schema = parquet_schema(path)
    except (OSError, pa.ArrowException) as exc:  # not Parquet, or not a regular file (never opened)
        if out_of_memory(exc):
            raise
        return None
    return "code" in schema.names and pa.types.is_integer(schema.field("code").type)


def unnamed(index: int) -> str:
    """How a vocabulary index that codes.parquet does not list is named in findings."""
    return f"vocab_index {index}"


def schema_problem(table: pa.Table) -> str | None:
    """Why a shard is not normalization's layout: ``subject_id`` int64, ``time`` timestamp, ``code`` an integer
    and ``numeric_value`` a float, no null subject_id or code; None where it is."""
    want = {"subject_id": pa.types.is_int64, "time": pa.types.is_timestamp, "code": pa.types.is_integer,
            "numeric_value": pa.types.is_floating}
    missing = [name for name in want if name not in table.column_names]
    if missing:
        return f"normalized shard without column(s) {', '.join(missing)}"
    wrong = [f"{name} (want {check.__name__.removeprefix('is_')}, got {table.schema.field(name).type})"
             for name, check in want.items() if not check(table.schema.field(name).type)]
    if wrong:
        return f"normalized shard with incorrect types: {', '.join(wrong)}"
    nulls = [name for name in ("subject_id", "code") if table[name].null_count]
    if nulls:
        return f"normalized shard with nulls in {', '.join(nulls)}"
    return None


def name_codes(table: pa.Table, vocab: dict[int, str]) -> pa.Table:
    """The table with ``code`` as the code strings (dictionary-encoded), an index codes.parquet does not list
    named by :func:`unnamed`; and an all-null ``text_value`` where the stage wrote none."""
    index = table["code"].to_numpy().astype(np.int64)
    kept, at = np.unique(index, return_inverse=True)
    names = np.array([vocab.get(int(i), unnamed(int(i))) for i in kept], dtype=object)
    order = np.argsort(names, kind="stable")  # the dictionary sorted, as a string column's categories are
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    code = pa.DictionaryArray.from_arrays(pa.array(rank[at], pa.int32()), pa.array(names[order].tolist(), pa.string()))
    table = table.set_column(table.column_names.index("code"), "code", code)
    if "text_value" not in table.column_names:
        table = table.append_column("text_value", pa.nulls(table.num_rows, pa.large_string()))
    return table
