"""The ``badpoints`` command: validate raw tables and print or write the report.

Exit codes: 0 = no errors (warnings allowed), 1 = the data has errors, 2 = it could not run.
"""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cache import Cache
from pipeline.cache import default_dir as default_cache_dir
from pipeline.cache_folder import clear as clear_cache
from pipeline.cache_folder import cleared_lines, contents, shown_lines
from pipeline.config import Config, load_config
from pipeline.builds import TARGETS
from pipeline.builds import build as run_build
from pipeline.engines import (AUTO, ENGINES, Engine, EngineOptions, InputSize, labevents_size, meds_size, names,
                              open_engine, resolve)
from pipeline.engines.registry import AUTO_PARTS_BYTES, LARGE, SMALL
from pipeline.exits import CANNOT_RUN, ended, guarded_run, prepare, said_of, say
from pipeline.flow import ORDER
from pipeline.flow import steps as run_steps
from pipeline.flow import validate as run_validate
from pipeline.meds import is_meds, meds_steps, validate_meds
from pipeline.reporting.progress import progress_for
from pipeline.reporting.report import Report
from pipeline.reporting.terminal import TerminalConsole, consoles, print_report, print_summary
from schemas.catalogue import in_flow_order
from schemas.catalogue import CHECKS, LOCKED
from schemas.errors import StageError, out_of_memory


class _Flags:
    """Flags shown as flags in --help: typer shows an on/off option's type, ``<bool>``, as if it took a value."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""  # the help's type column stays empty, as for --help in plain click
        return params


class _Command(_Flags, typer.core.TyperCommand):
    pass


class _Group(_Flags, typer.core.TyperGroup):
    pass


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Catch bad points in MIMIC-style CSVs before they reach training.",
)
REPORT_HTML = "report.html"


@app.callback()
def _main() -> None:
    """badpoints: validate raw clinical tables and build guarded PyTorch Geometric graphs."""


_DATA_DIR = typer.Argument(help="Folder with ADMISSIONS, D_LABITEMS and LABEVENTS (.csv or .csv.gz); validate also "
                                "takes a MEDS dataset (data/ and metadata/).")
_CONFIG = typer.Option("--config", help="TOML file overriding the defaults.")
_TASK = typer.Option("--task", help="What the model is asked and when: a built-in task (next_labs, the default; "
                                    "mortality_24h, long_stay_3d, readmission_30d) or a TOML file with a [task] "
                                    "table (docs/tasks.md). Its guards refuse a task whose labels the features can "
                                    "see.", metavar="NAME|FILE")
_HTML = typer.Option("--html", help="Write the HTML report (one self-contained file) here.")
_JUNIT = typer.Option("--junit", help="Write JUnit XML here (one test case per check) for CI.")
_QUIET = typer.Option("--quiet", "-q", help="No progress; print only errors and the summary.")
_CACHE_DIR = typer.Option("--cache-dir", help="Cache of raw-checked tables (default $BADPOINTS_CACHE_DIR or "
                                              "~/.cache/badpoints). It holds parsed copies of the data.")
_NO_CACHE = typer.Option("--no-cache", help="Neither read nor write the cache.")
_ENGINE = typer.Option("--engine", help="Where LABEVENTS' raw checks and its stages run: "
                       + ", ".join(f"{kind.name} ({kind.doc})" for kind in ENGINES.values())
                       + f", or {AUTO} (default): {LARGE} when LABEVENTS holds more than about "
                         f"{AUTO_PARTS_BYTES >> 20} MiB of text (a MEDS dataset: as its shards' bytes suggest), "
                         f"else {SMALL}.")
_CHECK_ENGINE = typer.Option("--engine", help="Where the table's blocks are checked: pandas (this process), parts "
                                              "(--workers processes), dask (a Dask cluster's workers), or "
                                              f"{AUTO} (default): {LARGE} when the tables hold more than about "
                                              f"{AUTO_PARTS_BYTES >> 20} MiB of text, else {SMALL}.")
_SCHEDULER = typer.Option("--scheduler", help="With --engine dask: an existing scheduler's address "
                                              "(default: a LocalCluster on loopback).")
_WORKERS = typer.Option("--workers", min=1, help="With --engine parts (or auto choosing it): processes that work "
                                                "on the parts (1: this process only). With --engine dask and no "
                                                "--scheduler: the LocalCluster's worker processes.")
_MEMORY = typer.Option("--memory-limit", help="With --engine dask and no --scheduler: memory per worker.")
_COMPARE = typer.Option("--compare", help="With a MEDS folder: the folder before the stage(s) that wrote it; "
                                          "adds rows and subjects in and out per split, rows per shard and the "
                                          "codes dropped.", metavar="BEFORE")
_PARTITIONS = typer.Option("--partitions", min=1, help="With --engine parts or dask: the admission-range parts "
                                                      f"of LABEVENTS (default: about {EngineOptions.rows_per_part:,} "
                                                      "rows each).")


BuildTarget = Enum("BuildTarget", {target: target for target in TARGETS}, type=str)
BuildTarget.__doc__ = "What ``build`` writes: one of ``pipeline.builds.TARGETS``."
_TO = typer.Option("--to", help="What to write: PyG graphs, or a MEDS 0.4 dataset whose codes.parquet carries the "
                                "guarded fit.")
EngineName = Enum("EngineName", {name: name for name in names()}, type=str)
EngineName.__doc__ = "Where LABEVENTS' raw checks and heavy stages run: auto, or an engine of the registry."


@contextlib.contextmanager
def _where(err: Console, data_dir: Path, *, cache_dir: Optional[Path], no_cache: bool, engine: EngineName,
           options: EngineOptions) -> Iterator[tuple[Optional[Cache], Engine]]:
    """The cache and the engine a run uses (``auto``: by the text LABEVENTS holds)."""
    cache = None if no_cache else _cache(err, cache_dir or default_cache_dir())
    with _opened(err, engine, options, labevents_size(data_dir)) as running:
        yield cache, running


@contextlib.contextmanager
def _opened(err: Console, engine: EngineName, options: EngineOptions, size: InputSize) -> Iterator[Engine]:
    """The engine named, opened by the registry; one that cannot start (a Dask cluster) is a 'cannot run' (exit 2)."""
    kind = resolve(EngineName(engine).value, size)
    with contextlib.ExitStack() as stack:
        try:
            running = stack.enter_context(open_engine(kind.name, options))
        except Exception as exc:  # noqa: BLE001 - an engine that cannot start: say why, no traceback
            say(err, *(said_of(exc) if out_of_memory(exc) else
                       (CANNOT_RUN, f"{kind.starts} did not start ({type(exc).__name__}: {str(exc)[:200]})")))
            raise typer.Exit(2)
        yield running


def _engine_options(workers: int, memory_limit: str, partitions: Optional[int], scheduler: Optional[str],
                    quiet: bool) -> EngineOptions:
    """The engine options the command line gives; with -q the engine's own processes log errors only."""
    return EngineOptions(workers=workers, memory_limit=memory_limit, partitions=partitions, scheduler=scheduler,
                         logs="error" if quiet else EngineOptions.logs)


def _cache(err: Console, root: Optional[Path]) -> Optional[Cache]:
    """The run's cache, opened before any work: the run that makes the folder says where it is, once (before
    anything could stop the run). With no folder to put it in, a warning and none (the cache only saves time)."""
    if root is None:
        err.print("[yellow]badpoints: warning:[/] the cache was not used: no $BADPOINTS_CACHE_DIR, $XDG_CACHE_HOME "
                  "or home directory; the run went on without it (as with --no-cache)")
        return None
    cache = Cache(root)
    cache.open()
    for notice in cache.notices():
        err.print(f"badpoints: {escape(notice)}")
    return cache


def _cache_warning(err: Console, cache: Optional[Cache]) -> None:
    """Say once, on stderr, what kept the cache from working; the report is the same as without it."""
    problem = cache.warning() if cache is not None else None
    if problem:
        err.print(f"[yellow]badpoints: warning:[/] {escape(problem)}")


@app.command(cls=_Command)
def validate(
    data_dir: Annotated[Path, _DATA_DIR],
    config: Annotated[Optional[Path], _CONFIG] = None,
    task: Annotated[Optional[str], _TASK] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the machine-readable report here.")] = None,
    html_path: Annotated[Optional[Path], _HTML] = None,
    junit_path: Annotated[Optional[Path], _JUNIT] = None,
    show_values: Annotated[bool, typer.Option("--show-values", help="Include capped raw values (off by default: "
                                                                    "MIMIC's data use agreement).")] = False,
    quiet: Annotated[bool, _QUIET] = False,
    cache_dir: Annotated[Optional[Path], _CACHE_DIR] = None,
    no_cache: Annotated[bool, _NO_CACHE] = False,
    engine: Annotated[EngineName, _ENGINE] = EngineName(AUTO),
    scheduler: Annotated[Optional[str], _SCHEDULER] = EngineOptions.scheduler,
    workers: Annotated[int, _WORKERS] = EngineOptions.workers,
    memory_limit: Annotated[str, _MEMORY] = EngineOptions.memory_limit,
    partitions: Annotated[Optional[int], _PARTITIONS] = EngineOptions.partitions,
    compare: Annotated[Optional[Path], _COMPARE] = None,
) -> None:
    """Validate the raw tables, run every stage, and report every finding at once.

    Unchanged inputs are read from the cache; when the config is unchanged too, the earlier report is reused
    (except with --html, which needs the stages' data).
    """
    console, err = _consoles()
    settings = guarded_run(err, lambda: load_config(config, task=task))
    options = guarded_run(err, lambda: _engine_options(workers, memory_limit, partitions, scheduler, quiet))
    if compare is not None and not (is_meds(data_dir) and is_meds(compare)):
        err.print(f"[bold red]badpoints: cannot run:[/] --compare takes two MEDS folders (data/ and metadata/); "
                  f"{escape(str(compare if is_meds(data_dir) else data_dir))} is not one")
        raise typer.Exit(2)
    if is_meds(data_dir):  # a MEDS dataset: its shards, read where the engine works; no cache
        result = _meds_run(err, data_dir, settings, compare=compare, engine=engine, options=options, quiet=quiet)
        _reported(console, err, result, settings, quiet=quiet, json_path=json_path, html_path=html_path,
                  junit_path=junit_path, show_values=show_values)
        raise typer.Exit(result.exit_code)
    where = _where(err, data_dir, cache_dir=cache_dir, no_cache=no_cache, engine=engine, options=options)
    with where as (cache, running):  # the engine's parts of LABEVENTS last until the HTML report read them
        with progress_for(err, quiet=quiet, steps=len(run_steps(settings)), title="validate") as progress:
            result = guarded_run(err, lambda: run_validate(data_dir, settings, show_values=show_values,
                                                           progress=progress, cache=cache, engine=running,
                                                           reuse_report=html_path is None))
        _cache_warning(err, cache)
        if result.cached:
            err.print("report reused from the cache: inputs, config and badpoints unchanged (--no-cache to rerun)")
        _reported(console, err, result, settings, quiet=quiet, json_path=json_path, html_path=html_path,
                  junit_path=junit_path, show_values=show_values)
    raise typer.Exit(result.exit_code)


def _meds_run(err: Console, data_dir: Path, settings: Config, *, compare: Optional[Path], engine: EngineName,
              options: EngineOptions, quiet: bool) -> Any:
    """``validate`` of a MEDS folder: its shards read where the engine the registry opens works (this process, the
    parts engine's processes, a Dask cluster's workers; ``auto``: by the bytes of its shards), with the MEDS
    stage's progress steps."""
    with _opened(err, engine, options, meds_size(data_dir)) as running, \
            progress_for(err, quiet=quiet, steps=len(meds_steps()), title="validate") as progress:
        return guarded_run(err, lambda: validate_meds(data_dir, settings, compare=compare, engine=running,
                                                      progress=progress))


def _reported(console: Console, err: Console, result: Any, settings: Config, *, quiet: bool,
              json_path: Optional[Path], html_path: Optional[Path], junit_path: Optional[Path],
              show_values: bool, kind: str = "validate", checks: Optional[tuple[str, ...]] = None) -> None:
    """A validation's report (or, ``kind`` "check", a check run's, ``checks`` those it ran) in every form asked
    for: the terminal's findings and summary, JSON, HTML, JUnit."""
    print_report(console, result.report, quiet=quiet)
    print_summary(console, result.report)
    _write_json(err, result.report, json_path)
    _write_html(err, result, settings, html_path, show_values=show_values, kind=kind)
    _write_junit(err, result.report, junit_path, name=f"badpoints {kind}", checks=checks)


@app.command(cls=_Command)
def build(
    data_dir: Annotated[Path, _DATA_DIR],
    out: Annotated[Path, typer.Option("--out", help="Folder for the graphs, manifest, stats and report.")],
    config: Annotated[Optional[Path], _CONFIG] = None,
    task: Annotated[Optional[str], _TASK] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the report here.")] = None,
    html_path: Annotated[Optional[Path], _HTML] = None,
    junit_path: Annotated[Optional[Path], _JUNIT] = None,
    show_values: Annotated[bool, typer.Option("--show-values", help="Include capped raw values.")] = False,
    quiet: Annotated[bool, _QUIET] = False,
    cache_dir: Annotated[Optional[Path], _CACHE_DIR] = None,
    no_cache: Annotated[bool, _NO_CACHE] = False,
    engine: Annotated[EngineName, _ENGINE] = EngineName(AUTO),
    scheduler: Annotated[Optional[str], _SCHEDULER] = EngineOptions.scheduler,
    workers: Annotated[int, _WORKERS] = EngineOptions.workers,
    memory_limit: Annotated[str, _MEMORY] = EngineOptions.memory_limit,
    partitions: Annotated[Optional[int], _PARTITIONS] = EngineOptions.partitions,
    to: Annotated[BuildTarget, _TO] = BuildTarget.graphs,
) -> None:
    """Validate, run every stage, and write guarded graphs (or, with --to meds, a MEDS dataset) only if nothing is
    an error."""
    console, err = _consoles()
    if is_meds(data_dir):
        err.print(f"[bold red]badpoints: cannot run:[/] {escape(str(data_dir))} is a MEDS dataset: `badpoints "
                  "validate` checks it; `build` reads MIMIC CSVs only for now")
        raise typer.Exit(2)
    settings = guarded_run(err, lambda: load_config(config, task=task))
    options = guarded_run(err, lambda: _engine_options(workers, memory_limit, partitions, scheduler, quiet))
    where = _where(err, data_dir, cache_dir=cache_dir, no_cache=no_cache, engine=engine, options=options)
    with where as (cache, running), \
            progress_for(err, quiet=quiet, steps=len(run_steps(settings, build=BuildTarget(to).value)),
                         title="build") as progress:
        result = guarded_run(err, lambda: run_build(data_dir, out, settings, show_values=show_values,
                                                    progress=progress, cache=cache, engine=running,
                                                    to=BuildTarget(to).value))
    _cache_warning(err, cache)
    print_report(console, result.report, quiet=quiet)
    print_summary(console, result.report)
    written = "MEDS shards" if result.to == "meds" else "graphs"
    if result.out_dir is not None:
        made = result.shards if result.to == "meds" else result.graphs
        console.print(f"wrote {len(made)} {written} and the report "
                      f"{escape(str(result.out_dir / REPORT_HTML))}")
    else:
        console.print(f"[bold red]no {written} written[/]: fix the errors above first")
    _write_json(err, result.report, json_path)
    _write_html(err, result, settings, html_path, show_values=show_values)
    _write_junit(err, result.report, junit_path, name="badpoints build")
    raise typer.Exit(result.exit_code)


_SCHEMA = typer.Option("--schema", help="The schema to check against: a pandera YAML file, or a Python module:Class "
                                        "(a DataFrameModel or DataFrameSchema), which may use badpoints' checks "
                                        "(`badpoints checks` lists them, stage check).", metavar="SCHEMA")
_INFER = typer.Option("--infer", help="Write a starter schema inferred from the table here (YAML) instead of "
                                      "checking: it passes on the table as it is; edit it to say what must hold.")
_NUM_CLASSES = typer.Option("--num-classes", min=1, help="Graphs only: each graph's labels (y) must lie in "
                                                         "[0, NUM_CLASSES).")


_MEDS = typer.Option("--meds", help="Check TABLE as a MEDS label file (or a folder of them) against this MEDS "
                                    "dataset (data/ and metadata/): prediction times, splits, the label in the "
                                    "features.", metavar="MEDS_DIR")
_LABEL_CODE = typer.Option("--label-code", help="With --meds: the code that makes the label (MEDS_DEATH); an event "
                                                "of it at or before a prediction time is an error. Repeat for more.")


def _checked_task(err: Console, path: Path, settings: Config, meds_dir: Optional[Path], codes: Optional[list[str]],
                  *, engine: EngineName, workers: int) -> Any:
    """``badpoints check`` of a task defined elsewhere: a label file against ``meds_dir``, or an ACES config."""
    if meds_dir is None:
        from pipeline.check.aces import check_task_config

        return guarded_run(err, lambda: check_task_config(path, settings))
    from pipeline.meds.labels import check_labels

    options = guarded_run(err, lambda: EngineOptions(workers=workers))
    with _opened(err, engine, options, meds_size(meds_dir)) as running:
        return guarded_run(err, lambda: check_labels(path, meds_dir, settings, codes=tuple(codes or ()),
                                                     engine=running))


@app.command(cls=_Command)
def check(
    table: Annotated[Path, typer.Argument(help="A CSV (.csv, .csv.gz) or Parquet file, or a folder of them; or "
                                               "PyG graphs: a .pt file, or a folder of them.")],
    schema: Annotated[Optional[str], _SCHEMA] = None,
    num_classes: Annotated[Optional[int], _NUM_CLASSES] = None,
    infer: Annotated[Optional[Path], _INFER] = None,
    config: Annotated[Optional[Path], _CONFIG] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the machine-readable report here.")] = None,
    html_path: Annotated[Optional[Path], _HTML] = None,
    junit_path: Annotated[Optional[Path], _JUNIT] = None,
    show_values: Annotated[bool, typer.Option("--show-values", help="Include capped failing values.")] = False,
    quiet: Annotated[bool, _QUIET] = False,
    engine: Annotated[EngineName, _CHECK_ENGINE] = EngineName(AUTO),
    workers: Annotated[int, _WORKERS] = EngineOptions.workers,
    meds_dir: Annotated[Optional[Path], _MEDS] = None,
    label_code: Annotated[Optional[list[str]], _LABEL_CODE] = None,
) -> None:
    """Check a table your own pipeline wrote against a schema of yours, in blocks of bounded memory, the PyG graphs
    it saved, a task defined elsewhere (a MEDS label file against its MEDS dataset, an ACES task config), and
    report every finding at once (exit 0, 1 on an error, 2 when it cannot run), as validate does."""
    from pipeline.check.aces import is_task_config
    from pipeline.check.run import check_graphs, check_table, is_graphs, table_size
    from pipeline.check.schema import load_schema

    console, err = _consoles()
    settings = guarded_run(err, lambda: load_config(config))
    task = meds_dir is not None or (is_task_config(table) and schema is None and infer is None)  # made elsewhere
    if task or (is_graphs(table) and schema is None and infer is None):
        result = _checked_task(err, table, settings, meds_dir, label_code, engine=engine, workers=workers) if task \
            else guarded_run(err, lambda: check_graphs(table, settings, num_classes=num_classes))
        _reported(console, err, result, settings, quiet=quiet, json_path=json_path, html_path=html_path,
                  junit_path=junit_path, show_values=show_values, kind="check", checks=result.checks)
        raise typer.Exit(result.exit_code)
    if (schema is None) == (infer is None):
        err.print("[bold red]badpoints: cannot run:[/] give --schema SCHEMA to check the table, or --infer FILE to "
                  "write a starter schema of it")
        raise typer.Exit(2)
    try:
        if infer is not None:
            _write_inferred(err, table, infer)
            raise typer.Exit(0)
        load_schema(schema)  # refused here, before any table is read, when it cannot be used
    except StageError as problem:  # a schema or a table that cannot be read: nothing was checked
        err.print(f"[bold red]badpoints: cannot run:[/] {escape(str(problem))}")
        raise typer.Exit(2)
    options = guarded_run(err, lambda: EngineOptions(workers=workers))
    with _opened(err, engine, options, table_size(table)) as running, \
            progress_for(err, quiet=quiet, steps=2, title="check") as progress:
        result = guarded_run(err, lambda: check_table(table, schema, settings, engine=running, progress=progress,
                                                       show_values=show_values))
    _reported(console, err, result, settings, quiet=quiet, json_path=json_path, html_path=html_path,
              junit_path=junit_path, show_values=show_values, kind="check", checks=result.checks)
    raise typer.Exit(result.exit_code)


def _write_inferred(err: Console, table: Path, infer: Path) -> None:
    """``check --infer FILE``: a starter schema of ``table`` written to ``infer``, and what it saw that no real table
    holds (the schema passes it: each line says the edit to make)."""
    from pipeline.check.run import tables_in
    from pipeline.check.schema import infer as infer_schema
    from pipeline.check.table import TableBlocks

    inferred = guarded_run(err, lambda: infer_schema(
        lambda: (block for path in tables_in(table) for block in TableBlocks(path, path.name))))
    text = inferred.to_yaml()
    _write_file(err, infer, lambda: infer.write_text(text, encoding="utf-8"))
    err.print(f"wrote a starter schema of {len(inferred.schema.columns)} columns to {escape(str(infer))}")
    for line in inferred.seen:
        err.print(f"[yellow]badpoints: warning:[/] {escape(line)}")


_ITEMS = typer.Option("--items", help="Also list the lab items of the edges, by max |z|: ITEMID, name, rule, "
                                      "transform, mean, scale, fitted rows, edges, max |z| and bounded edges.")
ITEM_ROWS = 20  # the lab items `inspect --items` lists unless --top says how many: a screen, not 1,600 rows
_TOP = typer.Option("--top", min=0, help=f"With --items (which it implies): list this many items, 0 all "
                                         f"(default {ITEM_ROWS}; a line says how many more there are).")


@app.command(cls=_Command)
def inspect(out_dir: Annotated[Path, typer.Argument(help="A folder written by `badpoints build`.")],
            items: Annotated[bool, _ITEMS] = False, top: Annotated[Optional[int], _TOP] = None) -> None:
    """Re-check every graph and the manifest's hashes, and summarise the build.

    The summary ends with whether the files are intact (exit 1 when they are not) and the data's status as the
    build's report records it (shown, not failing).
    """
    from pipeline.output.inspect import inspect_build, item_lines, status_lines

    console, err = _consoles()
    if not out_dir.is_dir():  # nothing to inspect: could not run (2), like a missing DATA_DIR
        what = "is not a folder" if out_dir.exists() else "does not exist"
        err.print(f"[bold red]badpoints: cannot run:[/] {escape(str(out_dir))} {what}")
        raise typer.Exit(2)
    summary = guarded_run(err, lambda: inspect_build(out_dir, stages=ORDER.stages))
    listed = item_lines(summary, top=ITEM_ROWS if top is None else top) if items or top is not None else []
    for line in [*summary.lines, *listed]:
        console.print(escape(line))
    for problem in summary.problems:
        console.print(f"[bold red]ERROR[/]   {escape(str(problem))}")
    for line in status_lines(summary):
        console.print(escape(line))
    raise typer.Exit(1 if summary.problems else 0)


def _consoles() -> tuple[Console, Console]:
    """stdout for the report, stderr for progress and problems (:func:`consoles`). What saying why a run ended takes
    is held from here on (:func:`pipeline.exits.prepare`)."""
    console, err = consoles()
    prepare(err)
    return console, err


def _write_json(err: Console, report: Report, json_path: Optional[Path]) -> None:
    if json_path is None:
        return
    try:
        report.write_json(json_path)
    except OSError as exc:
        err.print(f"[bold red]badpoints: cannot write {escape(str(json_path))}:[/] {escape(exc.strerror or '')}")
        raise typer.Exit(2)


def _write_html(err: Console, result, config: Config, html_path: Optional[Path], *, show_values: bool,
                kind: Optional[str] = None) -> None:
    """The HTML report at ``html_path``. A build's own OUT_DIR/report.html (listed in the manifest) never shows
    raw values; with --show-values, ``html_path`` gets a page that does."""
    if html_path is None:
        return
    written = getattr(result, "out_dir", None)
    if written is not None and (written / REPORT_HTML).resolve() == Path(html_path).resolve():
        return  # the build wrote this very file
    from pipeline.reporting.html import HtmlReport, render

    def write() -> None:
        if written is not None and not show_values:  # the build's page: the same bytes, not rendered twice
            HtmlReport((written / REPORT_HTML).read_text(encoding="utf-8")).write(html_path)
        else:
            HtmlReport(render(result, config, show_values=show_values, kind=kind)).write(html_path)

    _write_file(err, html_path, write)


def _write_junit(err: Console, report: Report, junit_path: Optional[Path], *, name: str,
                 checks: Optional[tuple[str, ...]] = None) -> None:
    if junit_path is None:
        return
    from pipeline.reporting.junit import write_junit

    _write_file(err, junit_path, lambda: write_junit(report, junit_path, name=name, checks=checks))


def _write_file(err: Console, path: Path, write) -> None:
    """Run ``write``: a file that cannot be written exits 2 with the reason, anything else is a bug."""
    def attempt() -> OSError | None:
        try:
            write()
        except OSError as exc:
            return exc
        return None

    problem = guarded_run(err, attempt)
    if problem is not None:
        err.print(f"[bold red]badpoints: cannot write {escape(str(path))}:[/] {escape(problem.strerror or '')}")
        raise typer.Exit(2)


@app.command(cls=_Command)
def checks() -> None:
    """List every check with its id and default severity (ids are what \\[severity] in the config takes)."""
    table = Table(box=None)
    for name in ("check", "stage", "severity", "fixed"):  # ids are what the config takes: never cut
        table.add_column(name, no_wrap=True)
    table.add_column("finds")
    for info in in_flow_order(CHECKS.values(), ORDER.names):
        table.add_row(info.id, info.stage, info.severity, info.locked or "", info.title)
    console = TerminalConsole()
    console.print(table)
    console.print()
    console.print("A check marked fixed stays an error: \\[severity] may set it to \"error\" only.")
    for why, meaning in LOCKED.items():
        console.print(f"  {why}: {escape(meaning)}")


_CLEAR = typer.Option("--clear", help="Remove the cache's entries (every parsed copy); the folder stays, marked as "
                                      "a cache. A folder that is not a badpoints cache is refused (exit 2).")


@app.command(cls=_Command, name="cache")
def cache_folder(cache_dir: Annotated[Optional[Path], _CACHE_DIR] = None,
                 clear: Annotated[bool, _CLEAR] = False) -> None:
    """Show where the cache of parsed tables is, what it holds and who can read it; --clear removes its entries."""
    console, err = _consoles()
    root = cache_dir or default_cache_dir()
    if root is None:
        err.print("[bold red]badpoints: cannot run:[/] no cache folder to show: no $BADPOINTS_CACHE_DIR, "
                  "$XDG_CACHE_HOME or home directory (name one with --cache-dir)")
        raise typer.Exit(2)
    if clear:
        lines = cleared_lines(guarded_run(err, lambda: clear_cache(root)))
    else:
        lines = shown_lines(guarded_run(err, lambda: contents(root)))
    for line in lines:
        console.print(escape(line))


@app.command(cls=_Command, name="config")
def config_defaults() -> None:
    """Print every config key with its default and what it does, as TOML (a --config FILE needs only the keys it
    changes): the run's sections, then each stage's, as its module declares them."""
    from pipeline.config import documented_defaults

    typer.echo(documented_defaults(), nl=False)




def main() -> None:
    """Console-script entry point: what escapes a command (a context that failed in turn as the command ended it, out
    of memory) is said in one line, exit 2, never a traceback."""
    try:
        app(prog_name="badpoints")
    except Exception as exc:  # noqa: BLE001 - see pipeline.exits.ended
        sys.exit(ended(exc))


if __name__ == "__main__":
    main()
