"""The ``check`` stage, declared on the kernel: a table checked against a schema of the user's. Its fit is the state
of the schema's table checks (:data:`schemas.registered.TABLE_FITS`), a partial per block of rows put together in
the blocks' order; its call validates one block with pandera, lazily, and keeps what fails small
(:class:`Failures`: per check and column the rows, the first lines and the groups), which adds up over blocks into
one finding each.

A check run's order (:data:`ORDER`) is reading, then this stage.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow
from pandera.errors import SchemaErrorReason

from pipeline.check.schema import could_not_run, label, load_schema, named_columns, runnable, usable
from pipeline.check.table import typed
from pipeline.engines.base import error_as_data
from pipeline.kernel.calls import Fit
from pipeline.kernel.finding import Finding
from pipeline.kernel.handed import write_part
from pipeline.kernel.stage import Order, Stage
from pipeline.reading.locate import LOAD
from pipeline.reporting.findings import format_items, summary_finding
from schemas.catalogue import CHECKS
from schemas.errors import StageError
from schemas.errors import value_classes
from schemas.registered import GROUPED, STAGE as NAME, TABLE_FITS, fitted_on, key_of

SCHEMA_CHECK = "table_schema"  # a check of the schema that is not one of badpoints' own: pandera's, or a dtype
WHOLE_FRAME = "DataFrameSchema"


def table_fits(schema: pa.DataFrameSchema) -> list[pa.Check]:
    """The schema's table checks: those that need every row's state before a block can be checked."""
    return [check for check in schema.checks if check.name in TABLE_FITS]


def _statistics(check: pa.Check) -> dict[str, Any]:
    return dict(check.statistics or {})


def fit_partial(block: pd.DataFrame, schema: pa.DataFrameSchema) -> dict:
    """One typed block's partial of every table check of ``schema`` (none of one that names a column the block
    lacks: pandera names it missing)."""
    return {key_of(check.name, _statistics(check)): _fitting(check, TABLE_FITS[check.name].partial, block)
            for check in table_fits(schema) if not _lacks_a_column(check, block)}


def _fitting(check: pa.Check, step: Any, *args: Any) -> Any:
    """A step of ``check``'s fit; one that raises is a check that cannot run, as pandera's ``CHECK_ERROR`` is."""
    try:
        return step(*args, **_statistics(check))
    except Exception as exc:  # noqa: BLE001 - whatever a check's arguments make its fit raise
        raise could_not_run(check, f"{type(exc).__name__}: {exc}", where="schema") from None


def fit_combine(partials: list[dict]) -> dict:
    """The partials of the blocks so far, gathered in the blocks' order (a table check's combine folds them)."""
    gathered: dict = {}
    for partial in partials:
        for key, value in partial.items():
            gathered.setdefault(key, []).extend(value if isinstance(value, _Gathered) else [value])
    return {key: _Gathered(values) for key, values in gathered.items()}


class _Gathered(list):
    """The partials of one table check, in the blocks' order."""


def fit_finish(gathered: dict, schema: pa.DataFrameSchema) -> dict:
    """The state of every table check of ``schema``, by :func:`schemas.registered.key_of`."""
    states = {}
    for check in table_fits(schema):
        key, fit = key_of(check.name, _statistics(check)), TABLE_FITS[check.name]
        states[key] = _fitting(check, fit.finish, fit.combine(list(gathered.get(key, []))))
    return states


def fit_blocks(blocks: Iterable[pd.DataFrame], schema: pa.DataFrameSchema) -> dict:
    """The whole fit in this process: every typed block's partial, gathered and finished."""
    return fit_finish(fit_combine([fit_partial(block, schema) for block in blocks]), schema)


@dataclass(frozen=True)
class Failed:
    """What fails one (check, column) of the schema: its rows, the first lines, the rows per group (for a check
    that names groups), the first values (kept only when asked for) and, for a dtype, what was found instead
    (``found``: rows per class of the text, or the column's own dtype with 0 rows: never a value)."""

    rows: int
    lines: np.ndarray
    groups: pd.Series
    samples: tuple[str, ...] = ()
    found: pd.Series = field(default_factory=lambda: _no_groups())

    def __add__(self, other: "Failed") -> "Failed":
        return Failed(self.rows + other.rows, np.union1d(self.lines, other.lines),
                      self.groups.add(other.groups, fill_value=0).astype("int64"), self.samples + other.samples,
                      self.found.add(other.found, fill_value=0).astype("int64"))

    def found_text(self, cap: int = 3) -> str:
        """': found decimal number ×2, non-numeric text, 6 chars ×1' (the most rows first), or
        ': found float64 (the column's dtype)'; empty where nothing was recorded."""
        if self.found.empty:
            return ""
        counts = self.found.sort_index().sort_values(ascending=False, kind="stable")
        named = [label if n == 0 else f"{label} ×{n}" for label, n in counts.head(cap).items()]
        more = f", {len(counts) - cap} more classes" if len(counts) > cap else ""
        return ": found " + ", ".join(named) + more


@dataclass(frozen=True)
class Failures:
    """Every (check id, what, column) that fails, as :class:`Failed`; they add up over blocks."""

    failed: Mapping[tuple[str, str, str | None], Failed] = field(default_factory=dict)
    refused: dict | None = None  # a schema that cannot run, as a worker hands it back (error_as_data)

    @classmethod
    def none(cls) -> "Failures":
        return cls({})

    @classmethod
    def refusing(cls, error: StageError) -> "Failures":
        """What a worker hands back of a schema that cannot run: the error as data, never raised across processes."""
        return cls({}, {**error_as_data(error), "whole_file": error.whole_file})

    def __add__(self, other: "Failures") -> "Failures":
        merged = dict(self.failed)
        for key, failed in other.failed.items():
            merged[key] = merged[key] + failed if key in merged else failed
        return Failures(merged, self.refused or other.refused)

    def raise_refused(self) -> "Failures":
        """These failures; a schema that could not run on a block is raised here, where the run is."""
        if self.refused is not None:
            raise StageError(**self.refused)
        return self

    def findings(self, table: str, *, max_lines: int, stage: str = NAME) -> list[Finding]:
        """One finding per (check, column): its rows, the first lines, the groups named (all of them in the
        finding's ``items``, the most rows first); reported by ``stage`` (the check stage, or a user's function
        guarded by :class:`pipeline.check.guard.Guard`)."""
        found = []
        for (check, what, column), failed in sorted(self.failed.items(), key=lambda kv: (kv[0][0], kv[0][2] or "")):
            rows = f"{failed.rows:,} row{'s' if failed.rows != 1 else ''}" if failed.rows else "the table"
            groups = (f", in {len(failed.groups)} group(s): {format_items(failed.groups.sort_index())}"
                      if len(failed.groups) else "")
            finding = summary_finding(
                stage=stage, check=check, table=table, column=column, count=max(failed.rows, 1),
                lines=[int(line) for line in np.sort(failed.lines)[:max_lines]],
                message=f"{rows} fail{'s' if failed.rows == 1 or not failed.rows else ''} {what}"
                        f"{failed.found_text()}{groups}",
                items=failed.groups.sort_index() if len(failed.groups) else None)
            found.append(replace(finding, samples=list(failed.samples[:max_lines])) if failed.samples else finding)
        return found


def prepared(block: pd.DataFrame, schema: pa.DataFrameSchema, *, max_lines: int) -> tuple[pd.DataFrame, Failures]:
    """A block of the table typed as the schema says, and its values whose text is not of their column's type
    (with the classes of that text: :func:`schemas.errors.value_classes`)."""
    text = block
    block, untyped = typed(text, schema)
    return block, Failures({(SCHEMA_CHECK, u.dtype, u.column): Failed(
        len(u.lines), np.sort(u.lines)[:max_lines], _no_groups(),
        found=value_classes(text.loc[u.lines, u.column]).value_counts().astype("int64")) for u in untyped})


def checked_block(block: pd.DataFrame, *, schema: pa.DataFrameSchema, states: Mapping[Any, Any], max_lines: int,
                  show_values: bool, inplace: bool = True, table: str = "schema") -> Failures:
    """The call on one typed block: validated by pandera (lazily, the table checks reading the whole table's
    ``states``), and what fails kept small. ``inplace``: pandera may coerce the block itself rather than a copy
    (the check's own blocks; a frame of the user's is validated as a copy where the schema would change it).
    A check that cannot run on ``table`` (it names a column neither there nor in the schema, or it raised as it
    ran; a check of badpoints' lacks an argument it needs) is a schema that cannot be used
    (:func:`pipeline.check.schema.usable`), not rows that fail."""
    usable(schema, where=table)
    runnable(schema, block, where=table)
    try:
        with fitted_on(states):
            schema.validate(block, lazy=True, inplace=inplace)
    except pa.errors.SchemaErrors as errors:
        unrun = [error for error in errors.schema_errors if error.reason_code == SchemaErrorReason.CHECK_ERROR]
        for error in unrun:
            if not _lacks_a_column(error.check, block):
                raise could_not_run(error.check, str(error.failure_cases), where=table) from None
        cases = errors.failure_cases  # a check that read a missing column: the column's missing is the finding
        unread = cases["check"].astype(str).isin({label(error.check) for error in unrun}) & cases["index"].isna()
        return Failures(_failed(cases[~unread], schema, block, max_lines, show_values))
    return Failures.none()


def _lacks_a_column(check: pa.Check | None, block: pd.DataFrame) -> bool:
    """Whether ``check`` names a column ``block`` lacks (pandera names the schema's columns missing)."""
    return any(column not in block.columns for column in named_columns(check))


def _no_groups() -> pd.Series:
    return pd.Series(dtype="int64")


def _failed(cases: pd.DataFrame, schema: pa.DataFrameSchema, block: pd.DataFrame, max_lines: int,
            show_values: bool) -> dict[tuple[str, str, str | None], Failed]:
    """pandera's failure cases of one block, per (check id, what, column). A check of the whole frame is listed by
    pandera once per column of each failing row: it is one check of its own ``column`` statistic here."""
    whole = cases["schema_context"].astype(str).eq(WHOLE_FRAME) & ~cases["check"].astype(str).isin(
        ["column_in_dataframe", "column_in_schema"])
    cases = cases.assign(check=cases["check"].astype(str), column=cases["column"].where(~whole, None))
    found: dict[tuple[str, str, str | None], Failed] = {}
    for (context, column, what, number), rows in cases.groupby(
            ["schema_context", "column", "check", "check_number"], dropna=False, sort=False):
        check = _check_object(schema, context, column, number)
        name = check.name if check is not None else None
        statistics = _statistics(check) if check is not None else {}
        if context == WHOLE_FRAME and what not in ("column_in_dataframe", "column_in_schema"):
            column = statistics.get("column") or ", ".join(statistics.get("columns") or ()) or None
        elif what == "column_in_dataframe":
            column = str(rows["failure_case"].iloc[0])
        key = (name if name in CHECKS and CHECKS[name].stage == NAME else SCHEMA_CHECK, what,
               None if column is None or pd.isna(column) else str(column))
        index = pd.to_numeric(rows["index"], errors="coerce").dropna().astype("int64").unique()
        by = statistics.get("by") if name in GROUPED and statistics.get("by") in block.columns else None
        groups = (block.loc[index, by].value_counts() if by is not None and len(index) else _no_groups())
        samples = tuple(map(str, rows["failure_case"].head(max_lines))) if show_values and len(index) else ()
        instead = (pd.Series({f"{block[column].dtype} (the column's dtype)": 0}, dtype="int64")
                   if str(what).startswith("dtype(") and column in block else _no_groups())
        part = Failed(len(index), np.sort(index)[:max_lines], groups.astype("int64"), samples, instead)
        found[key] = found[key] + part if key in found else part
    return found


def _check_object(schema: pa.DataFrameSchema, context: Any, column: Any, number: Any) -> pa.Check | None:
    """The schema's check a failure case names (by its place in its list), None for pandera's own (dtype,
    nullable, a missing column)."""
    if pd.isna(number):
        return None
    checks = schema.checks if context == WHOLE_FRAME else (
        schema.columns[column].checks if column in schema.columns else [])
    return checks[int(number)] if int(number) < len(checks) else None


@dataclass(frozen=True)
class SchemaSource:
    """Where a process finds the schema: the spec the user named (a YAML file or ``module:Class``, loaded once per
    process: a worker reads it again), or the schema itself (this process only: pandera's registered checks do not
    pickle)."""

    spec: str | None = None
    schema: pa.DataFrameSchema | None = field(default=None, compare=False)

    def load(self) -> pa.DataFrameSchema:
        return self.schema if self.schema is not None else _loaded(self.spec)

    def __getstate__(self) -> dict:
        if self.spec is None:
            raise TypeError("a schema given as an object is checked in this process only: name its file or "
                            "module:Class to check in worker processes")
        return {"spec": self.spec, "schema": None}


@functools.lru_cache(maxsize=4)
def _loaded(spec: str) -> pa.DataFrameSchema:
    return load_schema(spec)


@dataclass(frozen=True)
class Read:
    """One block as the first pass leaves it: its typed rows written where the second pass reads them (``path``;
    None when the schema has no table check and the block was checked at once), what failed so far, and its table
    checks' partial."""

    path: Path | None
    failures: Failures
    partial: dict


def read_block(block: pd.DataFrame, *, source: SchemaSource, spill: Path | None, max_lines: int,
               show_values: bool, table: str = "schema") -> Read:
    """The first pass's call on one block of text: typed as the schema says; with table checks, their partial
    taken and the typed rows written to ``spill`` (one file a block) for the second pass; without, checked at once."""
    try:
        schema = source.load()
        block, failures = prepared(block, schema, max_lines=max_lines)
        if spill is None:
            return Read(None, failures + checked_block(block, schema=schema, states={}, max_lines=max_lines,
                                                       show_values=show_values, table=table), {})
        runnable(schema, block, where=table)  # before the table checks' partials read the columns they name
        partial = fit_partial(block, schema)
    except StageError as refused:  # carried back as data: it may be a worker's
        return Read(None, Failures.refusing(refused), {})
    path = spill / f"{block.index[0] if len(block) else 0:012d}-{uuid.uuid4().hex}.arrow"
    write_part(block, path)
    return Read(path, failures, partial)


def check_spilled(path: Path, *, source: SchemaSource, states: Mapping[Any, Any], max_lines: int,
                  show_values: bool, table: str = "schema") -> Failures:
    """The second pass's call on one typed block the first wrote (:func:`read_block`)."""
    with pa_arrow.OSFile(str(path)) as handle:
        block = pa_arrow.ipc.open_file(handle).read_all().to_pandas()
    try:
        return checked_block(block, schema=source.load(), states=states, max_lines=max_lines,
                             show_values=show_values, table=table)
    except StageError as refused:  # carried back as data: it may be a worker's
        return Failures.refusing(refused)


STAGE = Stage(NAME, colour="#393b79", progress=("fit", "check"),
              fit=Fit(whole=fit_blocks, partial=fit_partial, combine=fit_combine, finish=fit_finish, state=dict,
                      saved_as=NAME))
ORDER = Order((STAGE,), before=(LOAD,))
"""A check run's order: reading the tables, then the check stage."""
