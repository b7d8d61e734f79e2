"""Each stage's example: a handful of input rows, and the exact output the stage gives on them.

One TOML file per stage, beside the stages (``<stage>.toml``, shipped as package data), as MEDS-Transforms keeps
one beside each of its stages: the stage's tests run the stage on it (``tests/pipeline/stages/test_examples.py``)
and ``docs/stages.md`` shows it as it is, so the tests and the documentation read the same rows. A file holds:

- ``[config]``: the config sections the example sets, written as in a config file (every other key keeps its
  default);
- ``[input.<TABLE>]`` and ``[output.<TABLE>]``: ``LABEVENTS`` (the lab rows the stage takes, and those it hands on),
  ``ADMISSIONS`` and ``D_LABITEMS`` (the small tables it reads, and those it hands on changed), and
  ``[output.quarantine]`` (the rows it sets aside, with their reasons; without it, none); the MEDS export's
  ``splits`` and ``units`` (the split stage's assignment and each item's VALUEUOM, which it reads) and
  ``[output.events]`` and ``[output.codes]`` (every shard's events and ``metadata/codes.parquet``'s rows, which it
  writes). Each table names its ``schema`` (a ``DataFrameModel`` of ``schemas/``, as ``"<module>.<Class>"``; the
  quarantine has its record's columns; a table no schema describes names none) and holds its ``rows`` as CSV: the
  first column, ``line``, is the source line and the index (a table that keeps no source lines has none, and is
  numbered from 0); an empty field is null. A column the schema does not name is text, unless the table's
  ``dtypes`` names its dtype;
- ``[fit]``: what the stage's fit learns (a stage that fits nothing: the fitted state it reads), its ``state`` as
  ``stats.json`` keeps it (JSON) under ``saved_as``;
- the graph stage's ``[output.features]`` (the names of each feature tensor's columns) and
  ``[output.graphs."<split>/<batch>".<store>]``: each graph's tensors, read by :func:`tensor`.

Nothing here names a stage: the tests hand each stage its example by name.
"""

from __future__ import annotations

import importlib
import io
import json
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping

import pandas as pd
from pandas.api import types

from pipeline.kernel.quarantine import empty_quarantine

QUARANTINE = "quarantine"  # the output table of the rows a stage sets aside
INDEX = "line"  # the first column of every table's rows: the source line
TEXT = types.pandas_dtype("str")  # a column no dtype is given for


@dataclass(frozen=True)
class Table:
    """One table of an example: the schema it is described by (None: the quarantine, whose record types its
    columns, or a table no schema describes, typed by its ``dtypes`` alone) and its rows, typed."""

    schema: type | None
    frame: pd.DataFrame


@dataclass(frozen=True)
class Example:
    """A stage's example as read: its config, its input and expected output tables by name, the state its fit
    learns or, for a stage that fits nothing, reads (``stats.json``'s JSON, parsed; None: neither) and the key it
    is saved under, and, for the graph stage, the feature names and each graph's stores (attribute -> value, as
    written)."""

    name: str
    config: Mapping[str, Any]
    input: Mapping[str, Table]
    output: Mapping[str, Table]
    state: Any = None
    saved_as: str | None = None
    features: Mapping[str, list[str]] = field(default_factory=dict)
    graphs: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)


def names() -> tuple[str, ...]:
    """The stages that have an example here, sorted."""
    return tuple(sorted(entry.name.removesuffix(".toml") for entry in resources.files(__package__).iterdir()
                        if entry.name.endswith(".toml")))


def text(name: str) -> str:
    """The example file of stage ``name``, as written."""
    return resources.files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")


def load(name: str) -> Example:
    """The example of stage ``name``, its tables typed by their schemas."""
    data = tomllib.loads(text(name))
    output, fit = data.get("output", {}), data.get("fit", {})
    tables = {side: {table: _table(table, block) for table, block in data.get(side, {}).items()
                     if table not in ("features", "graphs")} for side in ("input", "output")}
    return Example(name=name, config=data.get("config", {}), input=tables["input"], output=tables["output"],
                   state=json.loads(fit["state"]) if "state" in fit else None, saved_as=fit.get("saved_as"),
                   features=output.get("features", {}), graphs=output.get("graphs", {}))


def schema_of(name: str) -> type:
    """The ``DataFrameModel`` a table names, ``"<module>.<Class>"`` of ``schemas/``."""
    module, _, model = name.rpartition(".")
    return getattr(importlib.import_module(f"schemas.{module}"), model)


def _table(name: str, block: Mapping[str, Any]) -> Table:
    schema = schema_of(block["schema"]) if "schema" in block else None
    dtypes = (dict(empty_quarantine().dtypes) if name == QUARANTINE else {} if schema is None
              else _schema_dtypes(schema))
    dtypes.update({column: types.pandas_dtype(dtype) for column, dtype in block.get("dtypes", {}).items()})
    return Table(schema=schema, frame=frame(block["rows"], dtypes))


def _schema_dtypes(schema: type) -> dict[str, Any]:
    """Column -> dtype of a ``DataFrameModel``; a column matched by a pattern (``.*_CODE$``) under its pattern."""
    return {name: column.dtype.type for name, column in schema.to_schema().columns.items()}


def frame(rows: str, dtypes: Mapping[str, Any]) -> pd.DataFrame:
    """CSV ``rows`` as a frame indexed by its ``line`` column (the source line; without one, 0 to n - 1), each
    column of its dtype in ``dtypes`` (a key may be a pattern, ``.*_CODE$``), text where none is given; an empty
    field is null."""
    raw = pd.read_csv(io.StringIO(rows.strip("\n") + "\n"), dtype=str, keep_default_na=False)
    index = (pd.Index([int(line) for line in raw[INDEX]], dtype="int64", name=INDEX) if INDEX in raw
             else pd.RangeIndex(len(raw)))
    columns = {column: _typed(raw[column].tolist(), _dtype_of(column, dtypes), column)
               for column in raw.columns if column != INDEX}
    return pd.DataFrame({column: pd.Series(values, index=index) for column, values in columns.items()}, index=index)


def _dtype_of(column: str, dtypes: Mapping[str, Any]) -> Any:
    """The dtype ``dtypes`` gives ``column``: under its name, else under a pattern it matches, else text."""
    if column in dtypes:
        return dtypes[column]
    matched = [dtype for key, dtype in dtypes.items() if not key.isidentifier() and re.fullmatch(key, column)]
    return matched[0] if matched else TEXT


def _typed(values: list[str], dtype: Any, column: str) -> Any:
    """CSV fields as one column of ``dtype`` (numbers parsed by Python, exactly; times as ISO 8601; booleans as true
    or false)."""
    missing = [value == "" for value in values]
    if types.is_datetime64_any_dtype(dtype):
        return pd.to_datetime(pd.Series([None if m else v for v, m in zip(values, missing)], dtype="object"),
                              format="ISO8601").astype(dtype).to_numpy()
    if types.is_float_dtype(dtype):
        return pd.array([float("nan") if m else float(v) for v, m in zip(values, missing)], dtype=dtype)
    if types.is_bool_dtype(dtype):
        words = {"true": True, "false": False}
        unknown = sorted({v for v, m in zip(values, missing) if not m and v not in words})
        if unknown:
            raise ValueError(f"{column}: {', '.join(unknown)} in a boolean column (true or false)")
        return pd.array([None if m else words[v] for v, m in zip(values, missing)], dtype=dtype)
    if types.is_integer_dtype(dtype):
        if any(missing) and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
            raise ValueError(f"{column}: an empty field in a column of {dtype}, which holds no null")
        return pd.array([None if m else int(v) for v, m in zip(values, missing)], dtype=dtype)
    return pd.array([None if m else v for v, m in zip(values, missing)], dtype=dtype)


def tensor(value: Any) -> Any:
    """A graph attribute as written (a number or nested lists) as the tensor it stands for: integers are int64,
    decimals float32 (the graphs' float type), true and false bool. torch loads only here."""
    import torch

    first = value
    while isinstance(first, list) and first:
        first = first[0]
    kind = torch.bool if isinstance(first, bool) else torch.int64 if isinstance(first, int) else torch.float32
    return torch.tensor(value, dtype=kind)
