"""The results as tables on the console: the steps, then the targets; with several shapes, their memory side by
side."""

from __future__ import annotations

import sys

from bench.steps import RSS_SAMPLE_SECONDS
from bench.targets import MIMIC3_ROWS, MIMIC3_SCALE, MIMIC4_ROWS, MIMIC4_SCALE, fmt


def print_results(results: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 170)
    rows = results["rows"]
    shape = "" if results.get("shape") in (None, "default") else f", {results['shape']} shape"
    steps = Table(title=f"badpoints bench: {rows:,} LABEVENTS rows, {results.get('layout', 'mimic3')} layout{shape}",
                  title_justify="left")
    steps.add_column("step")  # the one column that may wrap on a narrow terminal
    for column in ("wall s", "CPU s", "RSS MB, all", "RSS MB, max 1", "x floor", "x baseline", "exit"):
        steps.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for step in results["steps"]:
        if step["skipped"]:
            steps.add_row(step["what"], "-", "-", "-", "-", "-", "-", "skip")
            continue
        steps.add_row(step["what"], f"{step['seconds']:.2f}", f"{step['cpu_seconds']:.2f}",
                      fmt(step.get("tree_peak_rss_mb"), 0), fmt(step["peak_rss_mb"], 0),
                      _x(step["ratio_floor"]), _x(step["ratio_baseline"]), str(step["exit_code"]))
    console.print(steps)
    console.print("RSS MB, all: the process tree's summed RSS at its worst sample (psutil, every "
                  f"{RSS_SAMPLE_SECONDS:g} s); max 1: ru_maxrss, the largest single process")
    for step in results["steps"]:
        if step["skipped"]:
            console.print(f"{step['name']} skipped: {step['skipped']}")
        elif step["name"] == "dask":
            console.print(f"dask: client {fmt(step.get('main_peak_rss_mb'), 0)} MB, workers "
                          f"{fmt(step.get('children_peak_rss_mb'), 0)} MB summed (peaks, apart)")
    console.print(target_table(results))
    edges = ", ".join(f"{name} {count:,}" for name, count in results["edges"].items() if count is not None)
    console.print(f"edges kept: {edges}")
    info = results["machine"]
    load = info.get("load_average") or {}
    console.print(f"machine: {info['cpu_count']} CPUs, {info['memory_gb']} GB, Python {info['python']}, "
                  f"pandas {info['pandas']}, pyarrow {info['pyarrow']}, polars {info.get('polars')}; load average "
                  f"before {load.get('before')}, after {load.get('after')}; commit {results['git']['commit']}"
                  f"{' (dirty)' if results['git']['dirty'] else ''}")


def target_table(results: dict):
    """The targets with the scale each is meant for (and this run's, where it differs) and the baselines beside."""
    from rich.table import Table

    rows = results["rows"]
    scale_rows = {MIMIC3_SCALE: MIMIC3_ROWS, MIMIC4_SCALE: MIMIC4_ROWS}
    shape = "" if results.get("shape") in (None, "default") else f", {results['shape']} shape"
    goals = Table(title=f"targets (2 cores, 24 GiB), measured at {rows:,} rows "
                        f"({results.get('layout', 'mimic3')}{shape})", title_justify="left")
    for column in ("target", "meant for", "value", "limit", "met", "badpoints", "pandas", "polars", "note"):
        goals.add_column(column, justify="left" if column in ("target", "meant for", "met", "note") else "right",
                         no_wrap=column not in ("target", "note"))
    for goal in results["targets"]:
        met = "n/a" if goal["met"] is None else "[green]met[/]" if goal["met"] else "[red]not met[/]"
        scale = goal["scale"]
        if scale in scale_rows and scale_rows[scale] != rows:
            scale = f"{scale} (run: {_short(rows)})"
        unit = goal["unit"]
        digits = 3 if unit == "us/row" else 2
        goals.add_row(goal["target"], scale, fmt(goal["value"]), f"<= {goal['limit']:g}", met,
                      *(f"{fmt(goal[k], digits)} {unit}" if goal[k] is not None else "-"
                        for k in ("measured", "baseline", "baseline_polars")), goal["note"] or "")
    return goals


def print_shapes(summary: dict, console=None) -> None:
    """The "memory by shape" table: per shape the build's and validate's peak RSS (all processes, and the largest
    one), the Dask step's client and workers (when any shape ran it), and the shares the build quarantined and
    merged."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False, width=None if sys.stdout.isatty() else 170)
    shapes = summary["shapes"]
    dask = any("skipped" not in figures.get("dask", {"skipped": "absent"}) for figures in shapes.values())
    columns = ["build MB, all", "build MB, max 1", "validate MB, all", "validate MB, max 1",
               *(("dask client MB", "dask workers MB") if dask else ()), "quarantined %", "merged % of rest"]
    table = Table(title="memory by shape", title_justify="left")
    table.add_column("shape")
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for shape, figures in shapes.items():
        build, validate = figures["build"], figures["validate"]
        cells = [fmt(build.get("tree_peak_rss_mb"), 0), fmt(build.get("peak_rss_mb"), 0),
                 fmt(validate.get("tree_peak_rss_mb"), 0), fmt(validate.get("peak_rss_mb"), 0)]
        if dask:
            step = figures.get("dask", {})
            cells += [fmt(step.get("main_peak_rss_mb"), 0), fmt(step.get("children_peak_rss_mb"), 0)]
        ledger = figures["labevents"] or {}
        cells += [_percent(ledger.get("quarantined_share")), _percent(ledger.get("deduplicated_share_of_rest"))]
        table.add_row(f"{shape} ({figures['rows']:,} rows, {figures['layout']})", *cells)
    console.print(table)
    console.print("all: the process tree's summed RSS at its worst sample; max 1: the largest single process; "
                  "quarantined: share of the LABEVENTS rows read; merged (by dedup): share of the rows not "
                  "quarantined; from the build's report")


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}"


def _short(rows: int) -> str:
    return f"{rows / 1e6:.1f}M" if rows >= 1e6 else f"{rows / 1e3:.0f}k"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"
