"""The ``badpoints`` command: validate raw tables and print or write the report.

Exit codes: 0 = no errors (warnings allowed), 1 = the data has errors, 2 = it could not run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.config import ConfigError, load_config
from pipeline.flow import build as run_build
from pipeline.flow import validate as run_validate
from pipeline.paths import OutputError
from pipeline.report import Report
from schemas.checks import CHECKS
from schemas.errors import ValidationDisabled

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Catch bad points in MIMIC-style CSVs before they reach training.",
)
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@app.callback()
def _main() -> None:
    """badpoints: validate raw clinical tables and build guarded PyTorch Geometric graphs."""


@app.command()
def validate(
    data_dir: Annotated[Path, typer.Argument(help="Folder with ADMISSIONS, D_LABITEMS and LABEVENTS (.csv or .csv.gz).")],
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML file overriding the defaults.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the machine-readable report here.")] = None,
    show_values: Annotated[bool, typer.Option("--show-values", help="Include capped raw values (off by default: "
                                                                    "MIMIC's data use agreement).")] = False,
) -> None:
    """Validate the raw tables, run every stage, and report every finding at once."""
    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    result = _guarded_run(err, lambda: run_validate(data_dir, load_config(config), show_values=show_values))
    _print_report(console, result.report)
    _write_json(err, result.report, json_path)
    raise typer.Exit(result.exit_code)


@app.command()
def build(
    data_dir: Annotated[Path, typer.Argument(help="Folder with ADMISSIONS, D_LABITEMS and LABEVENTS (.csv or .csv.gz).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the graphs, manifest, stats and report.")],
    config: Annotated[Optional[Path], typer.Option("--config", help="TOML file overriding the defaults.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the report here.")] = None,
    show_values: Annotated[bool, typer.Option("--show-values", help="Include capped raw values.")] = False,
) -> None:
    """Validate, run every stage, and write guarded graphs only if nothing is an error."""
    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    result = _guarded_run(err, lambda: run_build(data_dir, out, load_config(config), show_values=show_values))
    _print_report(console, result.report)
    if result.out_dir is not None:
        console.print(f"wrote {len(list((result.out_dir / 'graphs').rglob('*.pt')))} graphs to "
                      f"{escape(str(result.out_dir))}")
    else:
        console.print("[bold red]no graphs written[/]: fix the errors above first")
    _write_json(err, result.report, json_path)
    raise typer.Exit(result.exit_code)


@app.command()
def inspect(out_dir: Annotated[Path, typer.Argument(help="A folder written by `badpoints build`.")]) -> None:
    """Re-check every graph and the manifest's hashes, and summarise the build."""
    from pipeline.inspect import inspect_build

    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    summary = _guarded_run(err, lambda: inspect_build(out_dir))
    for line in summary.lines:
        console.print(escape(line))
    for problem in summary.problems:
        console.print(f"[bold red]ERROR[/]   {escape(str(problem))}")
    console.print(f"status: {'errors' if summary.problems else 'ok'}")
    raise typer.Exit(1 if summary.problems else 0)


def _guarded_run(err: Console, run):
    try:
        return run()
    except (ConfigError, ValidationDisabled, OutputError) as exc:
        err.print(f"[bold red]badpoints: cannot run:[/] {escape(str(exc))}")
        raise typer.Exit(2)
    except Exception as exc:  # noqa: BLE001 - never a traceback for a user; the type is enough to report
        if os.environ.get("BADPOINTS_DEBUG"):
            raise
        err.print(f"[bold red]badpoints: internal error[/] ({type(exc).__name__}); this is a bug in badpoints. "
                  "Rerun with BADPOINTS_DEBUG=1 for the traceback and report it.")
        raise typer.Exit(2)


def _write_json(err: Console, report: Report, json_path: Optional[Path]) -> None:
    if json_path is None:
        return
    try:
        report.write_json(json_path)
    except OSError as exc:
        err.print(f"[bold red]badpoints: cannot write {escape(str(json_path))}:[/] {escape(exc.strerror or '')}")
        raise typer.Exit(2)


@app.command()
def checks() -> None:
    """List every check with its id and default severity (ids are what [severity] in the config takes)."""
    table = Table("check", "stage", "severity", "finds", box=None)
    for info in CHECKS.values():
        table.add_row(info.id, info.stage, info.severity, info.title)
    Console().print(table)


def _print_report(console: Console, report: Report) -> None:
    for source in report.inputs:
        console.print(f"read {source.table:<10} {source.rows:>10,} rows  {escape(source.path)}")
    for finding in report.as_json()["findings"]:
        style = _STYLE.get(finding["severity"], "")
        where = ".".join(p for p in (finding["table"], finding["column"]) if p)
        console.print(f"[{style}]{finding['severity'].upper():<7}[/] {finding['stage']}/{finding['check']} "
                      f"{escape(where)} ({finding['count']:,})")
        console.print(f"        {escape(finding['message'])}")
        if finding.get("samples"):
            console.print(f"        values: {escape(', '.join(repr(v) for v in finding['samples']))}")
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)
    style = {"errors": "bold red", "warnings": "yellow", "ok": "green"}[report.status]
    console.print(f"[{style}]status: {report.status}[/] ({errors} errors, {warnings} warnings, "
                  f"{len(report.findings) - errors - warnings} notes)")
    if report.overrides:
        changed = ", ".join(f"{k}={v}" for k, v in sorted(report.overrides.items()))
        console.print(f"severities changed by config: {escape(changed)}")


def main() -> None:
    """Console-script entry point."""
    app(prog_name="badpoints")


if __name__ == "__main__":
    main()
