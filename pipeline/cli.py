"""The ``badpoints`` command: validate raw tables and print or write the report.

Exit codes: 0 = no errors (warnings allowed), 1 = the data has errors, 2 = it could not run.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cache import Cache, cleared_lines, contents, shown_lines
from pipeline.cache import clear as clear_cache
from pipeline.cache import default_dir as default_cache_dir
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
from pipeline.reporting.report import Report, as_shown, tally
from schemas.catalogue import in_flow_order
from schemas.catalogue import CHECKS, LOCKED
from schemas.errors import out_of_memory


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
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_NOUN = {"error": "error", "warning": "warning", "info": "note"}
_RANK = {"error": 0, "warning": 1, "info": 2}
REPORT_HTML = "report.html"


@app.callback()
def _main() -> None:
    """badpoints: validate raw clinical tables and build guarded PyTorch Geometric graphs."""


_DATA_DIR = typer.Argument(help="Folder with ADMISSIONS, D_LABITEMS and LABEVENTS (.csv or .csv.gz); validate also "
                                "takes a MEDS dataset (data/ and metadata/).")
_CONFIG = typer.Option("--config", help="TOML file overriding the defaults.")
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
    settings = guarded_run(err, lambda: load_config(config))
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
              show_values: bool) -> None:
    """A validation's report in every form asked for: the terminal's findings and summary, JSON, HTML, JUnit."""
    _print_report(console, result.report, quiet=quiet)
    _print_summary(console, result.report)
    _write_json(err, result.report, json_path)
    _write_html(err, result, settings, html_path, show_values=show_values)
    _write_junit(err, result.report, junit_path, name="badpoints validate")


@app.command(cls=_Command)
def build(
    data_dir: Annotated[Path, _DATA_DIR],
    out: Annotated[Path, typer.Option("--out", help="Folder for the graphs, manifest, stats and report.")],
    config: Annotated[Optional[Path], _CONFIG] = None,
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
    settings = guarded_run(err, lambda: load_config(config))
    options = guarded_run(err, lambda: _engine_options(workers, memory_limit, partitions, scheduler, quiet))
    where = _where(err, data_dir, cache_dir=cache_dir, no_cache=no_cache, engine=engine, options=options)
    with where as (cache, running), \
            progress_for(err, quiet=quiet, steps=len(run_steps(settings, build=BuildTarget(to).value)),
                         title="build") as progress:
        result = guarded_run(err, lambda: run_build(data_dir, out, settings, show_values=show_values,
                                                    progress=progress, cache=cache, engine=running,
                                                    to=BuildTarget(to).value))
    _cache_warning(err, cache)
    _print_report(console, result.report, quiet=quiet)
    _print_summary(console, result.report)
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


class _Console(Console):
    """A console whose reader may leave early (``badpoints validate D | head -1``). rich exits 1 on a broken
    pipe, which reads as "the data has errors"; here the rest of that stream is dropped and the run goes on,
    so the JSON, HTML and JUnit files are written and the exit code says what the data is."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print with every text made safe for a terminal (:func:`printable`): a D_LABITEMS label holding
        ``ESC[2K`` must not rewrite the status line. The markup is ours; the JSON report keeps the text exact."""
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with contextlib.suppress(AttributeError, OSError, ValueError):  # later writes, and the flush at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # every control character but tab and newline


def printable(text: str) -> str:
    """``text`` with each control character (ESC, CR, BEL, DEL, C1 ...) written as its escape, ``\\x1b``: shown,
    never obeyed by the terminal."""
    return as_shown(_CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text))  # a path's odd bytes too


def _consoles() -> tuple[Console, Console]:
    """stdout for the report, stderr for progress and problems; no colour where they are not terminals. What saying
    why a run ended takes is held from here on (:func:`pipeline.exits.prepare`)."""
    console, err = _Console(highlight=False, soft_wrap=True), _Console(stderr=True, highlight=False, soft_wrap=True)
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


def _write_html(err: Console, result, config: Config, html_path: Optional[Path], *, show_values: bool) -> None:
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
            HtmlReport(render(result, config, show_values=show_values)).write(html_path)

    _write_file(err, html_path, write)


def _write_junit(err: Console, report: Report, junit_path: Optional[Path], *, name: str) -> None:
    if junit_path is None:
        return
    from pipeline.reporting.junit import write_junit

    _write_file(err, junit_path, lambda: write_junit(report, junit_path, name=name))


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
    console = _Console()
    console.print(table)
    console.print("\nA check marked fixed stays an error: \\[severity] may set it to \"error\" only.")
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


# The terminal's findings: a message wrapped at this width, under an indent; a note is one line, its title.
_WIDTH, _INDENT = 110, " " * 8


def _print_report(console: Console, report: Report, *, quiet: bool = False) -> None:
    """Every error and warning with its message, wrapped; every note on one line, with its check's title (the
    JSON and HTML reports hold its message); errors only when quiet. Then the status line."""
    if not quiet:
        for source in report.inputs:
            console.print(f"read {source.table:<10} {source.rows:>10,} rows  {escape(source.path)}")
    notes = 0
    for finding in report.as_json()["findings"]:
        if quiet and finding["severity"] != "error":
            continue
        style = _STYLE.get(finding["severity"], "")
        where = ".".join(p for p in (finding["table"], finding["column"]) if p)
        label = _NOUN.get(finding["severity"], finding["severity"]).upper()
        head = f"{finding['stage']}/{finding['check']} {where} ({finding['count']:,})"
        if finding["severity"] == "info":
            notes += 1
            line = textwrap.shorten(f"{head}: {CHECKS[finding['check']].title}", _WIDTH + len(_INDENT) - 8)
            console.print(f"[{style}]{label:<7}[/] {escape(line)}")
            continue
        console.print(f"[{style}]{label:<7}[/] {escape(head)}")
        for line in textwrap.wrap(printable(finding["message"]), _WIDTH, initial_indent=_INDENT,
                                  subsequent_indent=_INDENT):  # wrapped as shown: escapes written out first
            console.print(escape(line))
        if finding.get("samples"):
            console.print(f"        values: {escape(', '.join(repr(v) for v in finding['samples']))}")
    if notes:
        console.print(f"{notes} note{'s' if notes != 1 else ''} in short: their messages are in the JSON (--json) "
                      "and HTML (--html) reports")


def _print_summary(console: Console, report: Report) -> None:
    """The compact end: findings by stage, the LABEVENTS ledger and funnel, each stage's own lines (scale: its
    constant and fallback items), status."""
    console.print("[bold]summary[/]")
    counts = report.stage_counts()
    if counts:
        entries = [(f"{stage} " + ", ".join(f"{n} {_NOUN.get(sev, sev)}{'s' if n != 1 else ''}" for sev, n in ordered),
                    f"{stage} " + ", ".join(f"[{_STYLE.get(sev, '')}]{n} {_NOUN.get(sev, sev)}{'s' if n != 1 else ''}[/]"
                                            for sev, n in ordered))
                   for stage, levels in counts.items()
                   for ordered in [sorted(levels.items(), key=lambda kv: _RANK.get(kv[0], 3))]]
        lines, width = [[]], 12
        for plain, styled in entries:  # wrapped by the text shown, not by its markup
            if lines[-1] and width + 3 + len(plain) > _WIDTH + len(_INDENT):
                lines.append([])
                width = 12
            width += len(plain) + (3 if lines[-1] else 0)
            lines[-1].append(styled)
        console.print("\n".join(("  findings  " if n == 0 else " " * 12) + " · ".join(line)
                                 for n, line in enumerate(lines)))
    attrition = report.attrition or {}
    ledger = attrition.get("LABEVENTS")
    if not ledger and any(f.stage == "load" and f.severity == "error" for f in report.findings):
        console.print("  stages    not run: the run stopped before the stages (a table could not be read)")
    if ledger:
        console.print(f"  LABEVENTS read {ledger['read']:,} = kept {ledger['kept']:,} + quarantined "
                      f"{ledger['quarantined']:,} + deduplicated {ledger['deduplicated']:,}")
        funnel = [f"read {ledger['read']:,}"]
        last = ledger["read"]
        for stage, rows_out in _funnel(attrition.get("steps") or []):
            funnel.append(f"{stage} {rows_out:,} (-{last - rows_out:,})")
            last = rows_out
        stopped = f"  [bold red]stopped at {escape(str(attrition['stopped_at']))}[/]" \
            if attrition.get("stopped_at") else ""
        console.print(f"  funnel    {' -> '.join(funnel)}{stopped}")
    admissions = attrition.get("ADMISSIONS")
    if admissions:
        reasons = ", ".join(f"{n:,} {check.removeprefix('admission_').replace('_', ' ')}"
                            for check, n in admissions["dropped_by"].items() if n)
        splits = ", ".join(f"{name} {split['in_graphs']:,}/{split['read']:,}"
                           for name, split in admissions["splits"].items())
        console.print(f"  ADMISSIONS read {admissions['read']:,} = in graphs {admissions['in_graphs']:,} + dropped "
                      f"{admissions['dropped']:,}{f' ({reasons})' if reasons else ''}; in graphs/read: {splits}")
    for label, text in report.summary:  # the stages' own lines, as the run that made the report made them
        for line in textwrap.wrap(f"  {label:<9} {text}", _WIDTH + len(_INDENT), subsequent_indent=" " * 12):
            console.print(escape(line))
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)
    style = {"errors": "bold red", "warnings": "yellow", "ok": "green"}[report.status]
    console.print(f"[{style}]status: {report.status}[/] ({tally(errors, warnings, len(report.findings) - errors - warnings)})")
    if report.overrides:
        changed = ", ".join(f"{k}={v}" for k, v in sorted(report.overrides.items()))
        console.print(f"severities changed by config: {escape(changed)}")


def _funnel(steps: list[dict]) -> list[tuple[str, int]]:
    """LABEVENTS rows after each stage that removed or merged some (the stage's last step)."""
    after: dict[str, int] = {}
    changed: set[str] = set()
    for step in steps:
        if step["table"] != "LABEVENTS":
            continue
        after[step["stage"]] = step["rows_out"]
        if step["rows_in"] != step["rows_out"]:
            changed.add(step["stage"])
    return [(stage, rows) for stage, rows in after.items() if stage in changed]


def main() -> None:
    """Console-script entry point: what escapes a command (a context that failed in turn as the command ended it, out
    of memory) is said in one line, exit 2, never a traceback."""
    try:
        app(prog_name="badpoints")
    except Exception as exc:  # noqa: BLE001 - see pipeline.exits.ended
        sys.exit(ended(exc))


if __name__ == "__main__":
    main()
