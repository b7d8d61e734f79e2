"""``badpoints check TABLE --schema SCHEMA``: a table of any size checked against a schema of the user's, block by
block, with every finding at once, as ``validate`` reports a MIMIC run's (terminal, ``--json``, ``--html``,
``--junit``, exit 0, 1 or 2).

A check run stands on the kernel with an order of its own (:data:`pipeline.check.stage.ORDER`: reading, then the
``check`` stage): the stage's fit learns, in a first pass over the blocks, the state of every table check of the
schema (:mod:`schemas.registered`: a group's spread, keys seen twice, ...); its call then validates each block with
pandera, lazily, against the schema, the table checks reading the whole table's state, so a block's failing rows
are the whole table's. What fails is kept small (counts, the first lines, the groups) and put together into one
finding per (check, column).
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pandera.pandas as pa

from pipeline.check.schema import checks_run, usable
from pipeline.check.stage import (ORDER, STAGE, Failures, SchemaSource, check_spilled, checked_block, prepared,
                                  read_block, table_fits)
from pipeline.check.table import TableBlocks, is_table, number_columns
from pipeline.reading.load import BLOCK_BYTES
from pipeline.engines import PANDAS
from pipeline.engines.registry import GZIP_TEXT_RATIO, InputSize
from pipeline.kernel.engine import Engine
from pipeline.reporting.findings import finding_from_error, summary_finding
from pipeline.reporting.progress import NO_PROGRESS, Progress
from pipeline.reporting.report import InputFile, Report
from schemas.errors import StageError, require_validation


GRAPH_FILE_CHECKS = ("graph_unsafe", "graph_finite", "graph_edge_index", "graph_index_bounds", "graph_edge_rows",
                     "graph_node_rows", "graph_isolated_nodes", "graph_bytes", "graph_pyg", "graph_magnitude")
"""The guard's checks of a graph file (:func:`check_graphs`), ``graph_label_range`` besides when the labels' class
count is given (else ``graph_labels_unchecked``, the note that says so); a build's own (its batches' memory, its manifest, its node and edge rules) are not run."""


@dataclass(frozen=True)
class CheckRun:
    """A check run: its report, the config it ran with and the engine it read the tables on (what the report's
    forms read, as of a validation)."""

    report: Report
    config: Any = None
    engine: Engine = PANDAS
    order: Any = ORDER
    tables: Any = None
    prepared: Any = None
    names: dict = field(default_factory=dict)
    checks: tuple[str, ...] = ()  # the checks the run ran, by id: what its JUnit lists

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def tables_in(path: Path) -> list[Path]:
    """The tables ``badpoints check`` reads at ``path``: the file itself, or every table file in the folder, by
    name."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if is_table(p))
    return [path]


def table_size(path: Path) -> InputSize:
    """The tables at ``path`` as ``--engine auto`` weighs them: their text (a ``.gz`` and a Parquet file about
    :data:`~pipeline.engines.registry.GZIP_TEXT_RATIO` times their bytes), read in blocks."""
    text = 0
    for table in tables_in(path):
        with contextlib.suppress(OSError):
            size = table.stat().st_size
            text += size * (1 if table.name.lower().endswith(".csv") else GZIP_TEXT_RATIO)
    return InputSize(text)


def check_table(path: Path, schema: pa.DataFrameSchema | str, config: Any, *, engine: Engine | None = None,
                progress: Progress | None = None, show_values: bool = False,
                block_bytes: int = BLOCK_BYTES) -> CheckRun:
    """Check every table at ``path`` (a file, or a folder of them) against ``schema`` (the schema, or the spec it
    is loaded from: a YAML file or ``module:Class``), every finding at once. The blocks are checked where the
    ``engine`` works (this process by default; a parts engine's workers need the schema by its spec). A CSV is read
    ``block_bytes`` of its text at a time."""
    require_validation()
    source = SchemaSource(spec=str(schema)) if isinstance(schema, (str, Path)) else SchemaSource(schema=schema)
    loaded = usable(source.load())
    engine, progress = engine or PANDAS, progress or NO_PROGRESS
    report = Report(stages=ORDER.colours)
    paths = tables_in(path) if Path(path).exists() else []
    if not paths:
        missing = f"no table (.csv, .csv.gz, .parquet) in {path}" if Path(path).exists() else \
            f"no such file or folder: {path}"
        report.add([summary_finding(stage="load", check="file_missing", table=str(path), column=None, count=1,
                                    message=missing)])
    for table in paths:
        _check_one(report, TableBlocks(table, table.name, block_bytes=block_bytes, numbers=number_columns(loaded)),
                   source, loaded, config, engine=engine, progress=progress, show_values=show_values)
    progress.end()
    return CheckRun(report.with_severities(dict(config.severity)), config=config, engine=engine,
                    checks=checks_run(loaded))


def is_graphs(path: Path) -> bool:
    """Whether ``badpoints check`` reads ``path`` as graphs: a ``.pt`` file, or a folder with ``.pt`` files under it
    and no table of its own."""
    path = Path(path)
    if path.is_dir():
        return not tables_in(path) and any(path.rglob("*.pt"))
    return path.suffix.lower() == ".pt"


def check_graphs(path: Path, config: Any, *, num_classes: int | None = None, label: str = "y") -> CheckRun:
    """Check the PyG graphs of a ``.pt`` file, or of every ``.pt`` under a folder
    (:func:`pipeline.check.graph.check_graph_files`), every finding at once, as a table's check reports them. A path
    that does not exist is ``file_missing``."""
    from pipeline.check.graph import check_graph_files

    report = Report(stages=ORDER.colours)
    try:
        found = check_graph_files(path, num_classes=num_classes, label=label)
    except FileNotFoundError as problem:
        report.add([summary_finding(stage="load", check="file_missing", table=str(path), column=None, count=1,
                                    message=str(problem))])
    else:
        report.inputs.extend(found.inputs)
        report.add(found.findings)
    checks = GRAPH_FILE_CHECKS + (("graph_label_range",) if num_classes is not None else ("graph_labels_unchecked",))
    return CheckRun(report.with_severities(dict(config.severity)), config=config, checks=checks)


def _check_one(report: Report, table: TableBlocks, source: SchemaSource, schema: pa.DataFrameSchema, config: Any,
               *, engine: Engine, progress: Progress, show_values: bool) -> None:
    """One table's findings and input line added to ``report``; a table that cannot be read is one finding. A
    schema with table checks takes two passes: the first types every block, takes the checks' partials and writes
    the typed rows aside; the second checks them with the whole table's state. Without, one pass checks each
    block as it is read."""
    settings = dict(source=source, max_lines=config.report.max_lines, show_values=show_values, table=table.name)
    fits = bool(table_fits(schema))
    try:
        with tempfile.TemporaryDirectory(prefix="badpoints-check-") as spill:
            progress.step(f"{STAGE.steps[0 if fits else 1]} {table.name}")
            read = list(engine.blocks(read_block, _blocks(table, progress), spill=Path(spill) if fits else None,
                                      **settings))
            failures = sum((r.failures for r in read), Failures.none()).raise_refused()
            states = STAGE.fit.finish(STAGE.fit.combine([r.partial for r in read]), schema) if fits else {}
            if fits:
                progress.step(f"{STAGE.steps[1]} {table.name}", rows=table.rows)
                for part in engine.each(check_spilled, [r.path for r in read], states=states, **settings):
                    failures = failures + part
                failures.raise_refused()
    except StageError as problem:
        if problem.check != "table_empty":
            report.add([finding_from_error(problem)])
            return
        failures, states = Failures.none(), {}  # a header and no row: what the schema says of an empty table
    if not table.rows:
        empty, _ = prepared(_no_rows(schema), schema, max_lines=config.report.max_lines)
        try:
            failures = checked_block(empty, schema=schema, states=states, max_lines=config.report.max_lines,
                                     show_values=show_values, table=table.name)
        except StageError as problem:  # a check that cannot run on the table's columns
            report.add([finding_from_error(problem)])
            return
    report.inputs.append(InputFile(table.name, str(table.path), table.sha256, table.rows))
    report.add(failures.findings(table.name, max_lines=config.report.max_lines))


def _no_rows(schema: pa.DataFrameSchema) -> pd.DataFrame:
    """A table with the schema's columns and no row."""
    return pd.DataFrame({name: pd.Series([], dtype=object) for name in schema.columns},
                        index=pd.Index([], dtype="int64", name="line"))


def _blocks(table: TableBlocks, progress: Progress) -> Iterator[pd.DataFrame]:
    """The table's blocks, each counted on the running step; a second pass reads the file again."""
    rows = 0
    table.rows = 0
    for block in table:
        rows += len(block)
        progress.rows(rows)
        yield block
