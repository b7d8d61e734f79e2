"""The speed and memory targets: each with the scale it is stated for, its limit, the measured value, met or not, and the
baselines' figures beside."""

from __future__ import annotations

from bench.steps import DASK_MEMORY_LIMIT, DASK_WORKERS, MB, StepResult

# The scales the speed and memory targets are stated for, on a 2-core, 24 GiB machine.
MIMIC3_ROWS, MIMIC4_ROWS = 27_800_000, 118_000_000
MIMIC3_SCALE = "27.8M rows, MIMIC-III"
MIMIC4_SCALE = "118M rows, MIMIC-IV"
ANY_SCALE = "any"
# The targets' limits.
VALIDATE_PER_BASELINE = 1.0
BUILD_PER_BASELINE = 1.2
RSS_GB = 3.0  # validate's and build's, all processes, at 27.8M rows
MIMIC4_BUILD_RSS_GB = 4.0
MIMIC4_SECONDS_PER_ROW = 1.5  # build's seconds per row against the 27.8M (MIMIC-III) reference run
DASK_CLIENT_RSS_GB = 1.5
WARM_PER_COLD = 0.1
TASK_PER_BUILD = 1.15  # a build asked a prediction task, against the same build without one
TASK_RSS_PER_BUILD = 1.1


def targets(by_name: dict[str, StepResult], *, rows: int, layout: str = "mimic3", dask: bool = False,
            reference: dict | None = None) -> list[dict]:
    """The speed and memory targets: per row the measured value, the limit, met (None where it cannot be told), the scale the
    target is stated for, and beside it what it is made of (badpoints' figure and both baselines')."""
    found = _mimic3_targets(by_name)
    if layout == "mimic4":
        found += _mimic4_targets(by_name, rows=rows, reference=reference)
    if dask:
        found.append(_dask_target(by_name))
    return found


def _mimic3_targets(by_name: dict[str, StepResult]) -> list[dict]:
    """Validate's and build's time against the pandas baseline's, their memory, and the warm cache's speed-up."""
    seconds = {name: _seconds(by_name, name) for name in ("baseline", "baseline_polars", "validate", "build",
                                                          "validate_warm")}
    beside = {"s": (seconds["baseline"], seconds["baseline_polars"]), "GB": _baselines_gb(by_name)}
    validate, build = _gb(by_name.get("validate")), _gb(by_name.get("build"))
    return [
        _target("validate / baseline", MIMIC3_SCALE, ratio(seconds["validate"], seconds["baseline"]),
                VALIDATE_PER_BASELINE, "s", seconds["validate"], *beside["s"]),
        _target("build / baseline", MIMIC3_SCALE, ratio(seconds["build"], seconds["baseline"]), BUILD_PER_BASELINE,
                "s", seconds["build"], *beside["s"]),
        _target("validate peak RSS, GB", MIMIC3_SCALE, validate, RSS_GB, "GB", validate, *beside["GB"],
                note=f"all processes; max 1: {fmt(_gb(by_name.get('validate'), 'peak_rss_mb'))} GB"),
        _target("build peak RSS, GB", MIMIC3_SCALE, build, RSS_GB, "GB", build, *beside["GB"],
                note=f"all processes; max 1: {fmt(_gb(by_name.get('build'), 'peak_rss_mb'))} GB"),
        _target("build --task / build", ANY_SCALE, ratio(_seconds(by_name, "build_task"), seconds["build"]),
                TASK_PER_BUILD, "s", _seconds(by_name, "build_task"), None, None, completed=by_name.get("build_task"),
                note=f"build without a task: {fmt(seconds['build'])} s"),
        _target("build --task peak RSS / build's", ANY_SCALE, ratio(_gb(by_name.get("build_task")), build),
                TASK_RSS_PER_BUILD, "GB", _gb(by_name.get("build_task")), None, None,
                completed=by_name.get("build_task"), note=f"build without a task: {fmt(build)} GB"),
        _target("2nd validate / 1st", ANY_SCALE, ratio(seconds["validate_warm"], seconds["validate"]), WARM_PER_COLD,
                "s", seconds["validate_warm"], None, None, note=f"unchanged inputs; 1st: {fmt(seconds['validate'])} s"),
    ]


def _mimic4_targets(by_name: dict[str, StepResult], *, rows: int, reference: dict | None) -> list[dict]:
    """Build's memory at MIMIC-IV scale, and its seconds per row against a MIMIC-III run's (``reference``)."""
    build = by_name.get("build")
    per_row = {name: _per_row(_seconds(by_name, name), rows) for name in ("build", "baseline", "baseline_polars")}
    if reference is None:
        value, note = None, "no reference (--reference BENCH_JSON of a mimic3 run)"
    else:
        ref_build = next(s for s in reference["steps"] if s["name"] == "build")
        ref_per_row = ref_build["seconds"] / reference["rows"]
        value = ratio(per_row["build"], ref_per_row)
        ref_layout = reference.get("layout", "mimic3")
        note = (f"reference: {reference['rows']:,} rows ({ref_layout}), {ref_per_row * 1e6:.3f} us/row"
                + ("" if ref_layout == "mimic3" else "; the reference is not a mimic3 run"))
    micro = {name: None if seconds is None else seconds * 1e6 for name, seconds in per_row.items()}
    return [
        _target("mimic4 build peak RSS, GB", MIMIC4_SCALE, _gb(build), MIMIC4_BUILD_RSS_GB, "GB", _gb(build),
                *_baselines_gb(by_name), completed=build),
        _target("mimic4 build s/row / reference", MIMIC4_SCALE, value, MIMIC4_SECONDS_PER_ROW, "us/row",
                micro["build"], micro["baseline"], micro["baseline_polars"], completed=build, note=note),
    ]


def _dask_target(by_name: dict[str, StepResult]) -> dict:
    """The Dask client's memory, apart from its workers' (their sum in the note)."""
    step = by_name.get("dask")
    client = _gb(step, "main_peak_rss_mb")
    workers = fmt(_gb(step, "children_peak_rss_mb"))
    return _target("dask client peak RSS, GB", MIMIC4_SCALE, client, DASK_CLIENT_RSS_GB, "GB", client,
                   *_baselines_gb(by_name), completed=step,
                   note=f"{DASK_WORKERS} workers x {DASK_MEMORY_LIMIT}: {workers} GB summed")


def _target(target: str, scale: str, value: float | None, limit: float, unit: str, measured: float | None,
            baseline: float | None, baseline_polars: float | None, *, completed: StepResult | None = None,
            note: str | None = None) -> dict:
    """One target's row; not met, whatever its value, when the step it needs did not complete."""
    met = None if value is None else bool(value <= limit)
    if completed is not None and completed.exit_code not in (0, 1):
        met, note = False, f"did not complete (exit {completed.exit_code})"
    return {"target": target, "scale": scale, "value": value, "limit": limit, "met": met, "unit": unit,
            "measured": measured, "baseline": baseline, "baseline_polars": baseline_polars, "note": note}


def _seconds(by_name: dict[str, StepResult], name: str) -> float | None:
    found = by_name.get(name)
    return None if found is None else found.seconds


def _gb(found: StepResult | None, field: str = "tree_peak_rss_mb") -> float | None:
    value = None if found is None else getattr(found, field)
    return None if value is None else value * MB / 1e9


def _baselines_gb(by_name: dict[str, StepResult]) -> tuple[float | None, float | None]:
    """The pandas and the polars baseline's peak RSS (all processes), in GB."""
    return _gb(by_name.get("baseline")), _gb(by_name.get("baseline_polars"))


def _per_row(seconds: float | None, rows: int | None) -> float | None:
    return None if seconds is None or not rows else seconds / rows


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"
