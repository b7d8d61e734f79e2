"""Each step in a process of its own, measured: wall and CPU seconds, ``ru_maxrss`` and the process tree's summed
RSS; the steps that run the plain scripts, badpoints and its Dask engine; and the data they run on."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import plain
from bench.synth.shape import SHAPES
from pipeline.config import Config, load_config
from pipeline.engines import EngineOptions
from pipeline.stages.text import CENSORING
from schemas.raw import DEFAULT_VALUENUM_ABS_BOUND

ROOT = Path(__file__).resolve().parents[1]
MB = 1_000_000
STEP_INFO = {
    "generate": "generate: bench.synth (not compared)",
    "floor": "(a) floor: pyarrow read_csv",
    "baseline": "(b) baseline: plain pandas",
    "baseline_polars": "(b2) baseline: the same in polars",
    "validate": "(c) validate, cache cold",
    "build": "(d) build, cache cold",
    "build_task": "(d2) build --task mortality_24h, cache cold",
    "validate_warm": "(e) validate, cache warm",
    "dask": "(f) build --engine dask",
    "meds_convert": "MEDS: bench.meds_convert (not compared)",
    "meds_validate": "(g) MEDS: badpoints validate --workers 2",
    "meds_transforms": "(h) MEDS: MEDS-Transforms' normalization",
    "check": "(i) badpoints check of a user's table",
    "pandera": "(j) pandera validate of the same schema, pandas read_csv",
}
RSS_SAMPLE_SECONDS = 0.1  # how often a step's process tree is summed
# --- Dask: a LocalCluster of the engine options' default workers and memory; the client's RSS apart from the workers'
DASK_WORKERS = EngineOptions.workers
DASK_MEMORY_LIMIT = EngineOptions.memory_limit
BENCH_TASK = "mortality_24h"  # the task build_task asks: in-hospital death, 24 h after admission


class BenchError(RuntimeError):
    """A step could not run (badpoints exit 2, or a step that crashed)."""


@dataclass
class StepResult:
    name: str
    what: str
    seconds: float | None = None
    cpu_seconds: float | None = None  # user + system: less sensitive than wall time to other load
    peak_rss_mb: float | None = None  # ru_maxrss: the largest single process (the step or one it reaped)
    tree_peak_rss_mb: float | None = None  # the process and all its descendants, RSS summed, at the worst sample
    main_peak_rss_mb: float | None = None  # the step's own process alone (Dask: the client)
    children_peak_rss_mb: float | None = None  # its descendants summed (Dask: the workers and their nannies)
    rss_samples: int | None = None
    exit_code: int | None = None
    command: list[str] = field(default_factory=list)
    log: str | None = None
    skipped: str | None = None  # why the step did not run
    result: dict = field(default_factory=dict)  # what the step reported (edges, rows, ...)
    ratio_floor: float | None = None
    ratio_baseline: float | None = None


# -- measuring ----------------------------------------------------------------------------------
def measure(name: str, command: list[str], *, log: Path, env: dict[str, str] | None = None) -> StepResult:
    """Run ``command`` as a child process: wall seconds, its ``ru_maxrss`` (``os.wait4``) and, sampled every
    :data:`RSS_SAMPLE_SECONDS` with psutil, the peak of its process tree's summed RSS (``ru_maxrss`` only
    knows the largest single process), of its own RSS and of its descendants' (a Dask client's workers)."""
    import psutil

    log.parent.mkdir(parents=True, exist_ok=True)
    peaks = {"tree": 0, "main": 0, "children": 0}
    samples = 0
    started = time.perf_counter()
    with open(log, "wb") as sink:
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=ROOT, env={**os.environ, **(env or {})})
        process = psutil.Process(child.pid)
        while True:
            sample = _tree_rss(process)
            if sample is not None:
                samples += 1
                for key, value in zip(("main", "children"), sample):
                    peaks[key] = max(peaks[key], value)
                peaks["tree"] = max(peaks["tree"], sum(sample))
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(RSS_SAMPLE_SECONDS)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    # The tree's sum is never below its largest process's peak, which a short peak between samples would miss.
    largest = usage.ru_maxrss * 1024
    return StepResult(name=name, what=STEP_INFO[name], seconds=seconds, cpu_seconds=usage.ru_utime + usage.ru_stime,
                      peak_rss_mb=largest / MB, tree_peak_rss_mb=max(peaks["tree"], largest) / MB,
                      main_peak_rss_mb=peaks["main"] / MB, children_peak_rss_mb=peaks["children"] / MB,
                      rss_samples=samples, exit_code=child.returncode, command=[str(part) for part in command],
                      log=str(log))


def _tree_rss(process) -> tuple[int, int] | None:
    """RSS in bytes of ``process`` and of all its descendants summed; None once it has exited (a zombie has none)."""
    import psutil

    try:
        own = process.memory_info().rss
        children = process.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    total = 0
    for descendant in children:
        try:
            total += descendant.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # ended between the listing and the reading
    return own, total


# -- the steps ------------------------------------------------------------------------------------
def baseline_settings(config: Config | None = None) -> plain.Settings:
    """What the baselines take from badpoints' config (``config``, or the stages' declared defaults, which the
    benchmark's badpoints steps run with), so that none of its values is written again here."""
    config = config or load_config()
    bucket, split, fill = config.bucket, config.split, config.fill
    if bucket.late_policy != "quarantine" or {policy.policy for policy in fill.values()} != {"constant"}:
        raise BenchError("the baselines drop late rows and fill constants: [bucket] late_policy must be "
                         "'quarantine' and every [fill] policy 'constant'")
    return plain.Settings(interval_hours=bucket.interval_hours, max_stay_days=bucket.max_stay_days,
                          after_discharge_hours=bucket.after_discharge_hours, ed_hours=bucket.ed_hours,
                          max_timestep=bucket.max_timestep,
                          train=split.train, val=split.val, z_fill=fill["Z"].value, code_fill=fill["CODE"].value,
                          admission_categoricals=tuple(config.graph.admission_features),
                          censored=config.clean.censored, censoring=CENSORING.pattern,
                          text_values=dict(config.clean.text_values), text_bound=DEFAULT_VALUENUM_ABS_BOUND)


def python_step(name: str, data: Path, out: Path, settings: plain.Settings) -> StepResult:
    """The floor and the baselines: :mod:`bench.plain` run as a script (-P: its folder not on sys.path), so no
    badpoints import; ``settings`` go to it as JSON."""
    result_path = out / "steps" / f"{name}.json"
    result_path.unlink(missing_ok=True)
    step = measure(name, [sys.executable, "-P", str(Path(plain.__file__).resolve()), name, str(data),
                          str(result_path), settings.to_json()], log=out / "logs" / f"{name}.log")
    if step.exit_code != 0:
        raise BenchError(f"step {name} failed with exit {step.exit_code}:\n{_tail(Path(step.log))}")
    step.result = json.loads(result_path.read_text())
    return step


def badpoints_step(name: str, args: list[str], out: Path, *, cache: Path, fresh_cache: bool) -> StepResult:
    """A badpoints command (``python -m pipeline.cli``, what the console script runs), its report read back."""
    if fresh_cache and cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    report_path = out / "steps" / f"{name}.report.json"
    report_path.unlink(missing_ok=True)
    step = measure(name, [sys.executable, "-m", "pipeline.cli", *args, "--json", str(report_path)],
                   log=out / "logs" / f"{name}.log", env={"BADPOINTS_CACHE_DIR": str(cache)})
    if step.exit_code not in (0, 1):
        raise BenchError(f"`badpoints {args[0]}` could not run (exit {step.exit_code}); its output "
                         f"({step.log}) ends with:\n{_tail(Path(step.log))}")
    if report_path.exists():
        report = json.loads(report_path.read_text())
        attrition = report.get("attrition") or {}
        step.result = {"status": report.get("status"), **(attrition.get("LABEVENTS") or {})}
    return step


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def dask_step(data: Path, out: Path, cache: Path) -> StepResult:
    """``build --engine dask`` on a LocalCluster of :data:`DASK_WORKERS` workers x :data:`DASK_MEMORY_LIMIT`, its
    parts the engine's default (about a million rows each, a worker reading one part's file at a time).

    The client is the step's own process (``main_peak_rss_mb``); its workers are its descendants
    (``children_peak_rss_mb``), so the two are measured apart.
    """
    graphs = Path(tempfile.mkdtemp(prefix="build-dask-", dir=out))
    try:
        args = ["build", str(data), "--out", str(graphs), "--engine", "dask", "--workers", str(DASK_WORKERS),
                "--memory-limit", DASK_MEMORY_LIMIT]
        step = badpoints_step("dask", args, out, cache=cache, fresh_cache=True)
    finally:
        shutil.rmtree(graphs, ignore_errors=True)
    step.result.update(worker_memory_limit=DASK_MEMORY_LIMIT, workers=DASK_WORKERS)
    return step


# -- data ---------------------------------------------------------------------------------------
def synth_source_digest() -> str:
    """What the generated bytes depend on: the modules of bench/synth/ and the sample generator they reuse."""
    digest = hashlib.sha256()
    for path in (*sorted((ROOT / "bench" / "synth").glob("*.py")), ROOT / "data" / "sample" / "generate.py"):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def prepare_data(data: Path, *, rows: int, seed: int, out: Path, layout: str = "mimic3",
                 shape: str = "default") -> tuple[StepResult, dict]:
    """Reuse ``data`` when its synth.json matches, use foreign tables as they are, else generate into it (``shape``:
    a preset of :data:`bench.synth.shape.SHAPES`; a synth.json from before shapes is of the default shape)."""
    stamp = data / "synth.json"
    digest = synth_source_digest()
    if stamp.is_file():
        info = json.loads(stamp.read_text())
        made = (info.get("rows"), info.get("seed"), info.get("layout", "mimic3"),
                info.get("shape", SHAPES["default"].as_json()), info.get("source_sha256"))
        if made == (rows, seed, layout, SHAPES[shape].as_json(), digest):
            return StepResult(name="generate", what=STEP_INFO["generate"], skipped=f"reused {data}"), info
    elif data.is_dir() and any(p.name.lower().startswith("labevents") for p in data.rglob("*")):
        return (StepResult(name="generate", what=STEP_INFO["generate"], skipped=f"given tables in {data}"),
                {"generator": None})
    step = measure("generate", [sys.executable, "-m", "bench.synth", str(data), "--rows", str(rows),
                                "--seed", str(seed), "--layout", layout, "--shape", shape],
                   log=out / "logs" / "generate.log")
    if step.exit_code != 0:
        raise BenchError(f"generating the data failed (exit {step.exit_code}):\n{_tail(Path(step.log))}")
    info = json.loads(stamp.read_text())
    info["source_sha256"] = digest
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    return step, info


def polars_missing() -> str | None:
    """Why the polars baseline cannot run here, or None."""
    if importlib.util.find_spec("polars") is None:
        return "polars is not installed (pip install -e '.[bench]', as make bench does)"
    return None
