"""badpoints' MEDS validate against MEDS-Transforms' normalization, side by side on the same N events.

    python -m bench.meds_bench --rows N --out DIR [--data MIMIC_DIR] [--workers 2] [--seed S]

1. The data: :mod:`bench.synth`'s LABEVENTS and ADMISSIONS at N rows (generated under ``DIR/data`` and reused as
   ``python -m bench`` does), or the first N LABEVENTS rows of ``--data`` (read only), converted to MEDS 0.4 by
   :mod:`bench.meds_convert` into ``DIR/meds`` (not timed against either tool).
2. ``meds_validate``: ``badpoints validate DIR/meds --workers 2`` (:mod:`bench.meds_validate`, which also writes
   every code it predicts non-finite, and every noise code: all train values equal, a positive rounding residue
   for a std).
3. ``meds_transforms``: :mod:`bench.meds_transforms` in ``.venv-meds`` (``make meds-env``; ``BADPOINTS_MEDS_PYTHON``
   names another python): ``fit_normalization`` -> ``fit_vocabulary_indices`` -> ``normalization``, then its
   count of what the stages made. Skipped, with the reason, where that python is absent.

Each runs in a process of its own, measured by :func:`bench.steps.measure` (wall and CPU seconds, the process
tree's summed RSS sampled every 0.1 s). MEDS-Transforms' wall time is its stages' alone (the runner's
``seconds``; the tree's RSS includes its count of the outputs afterwards). Printed as one table, and written as
``DIR/meds_bench.json``: seconds, peak RSS, non-finite outputs (predicted by badpoints, produced by
MEDS-Transforms), noise codes, rows dropped, and validate's wall time over the normalization's, with the targets.

They agree (:func:`agreement`) when every code MEDS-Transforms made non-finite is predicted non-finite or noise,
every code predicted non-finite was made non-finite, the non-finite rows are the predicted ones plus those of the
noise codes it made non-finite, and the dropped rows are equal. A noise code may go either way: the sign of its
variance residue follows polars' sums at this scale, which the reproduction does not predict (at 27.8M events a
code exactly 1e6 came out NaN where the reproduction gave a tiny positive residue). The codes that break the rule
are listed under ``differ``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from bench.steps import MB, ROOT, STEP_INFO, BenchError, StepResult, measure, prepare_data
from bench.synth import SEED
from bench.targets import ratio
from pipeline.engines import EngineOptions

MEDS_PYTHON = Path(os.environ.get("BADPOINTS_MEDS_PYTHON", ROOT / ".venv-meds" / "bin" / "python"))
WORKERS = EngineOptions.workers
RATIO_LIMIT = 1.5  # validate wall time / MEDS-Transforms' normalization's, at 27.8M events (the MEDS target)
RSS_LIMIT_GB = 3.0


def meds_missing(python: Path = MEDS_PYTHON) -> str | None:
    """Why MEDS-Transforms cannot run here, or None."""
    if not Path(python).is_file():
        return (f"MEDS-Transforms' environment not found at {python}: run `make meds-env` (or set "
                "BADPOINTS_MEDS_PYTHON to a python with meds-transforms==0.7.0)")
    return None


def run(*, rows: int, out: Path, data: Path | None = None, seed: int = SEED, workers: int = WORKERS,
        python: Path = MEDS_PYTHON) -> dict:
    """Convert, then both tools; the results (also ``out/meds_bench.json``)."""
    out = Path(out).resolve()
    for folder in (out, out / "steps", out / "logs"):
        folder.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = out / "data" / f"synth-rows{rows}-seed{seed}"
        prepare_data(data, rows=rows, seed=seed, out=out)
    meds_dir = out / "meds"
    # In a process of its own: a child's ru_maxrss starts from its parent's peak, which converting would raise.
    step = measure("meds_convert", [sys.executable, "-m", "bench.meds_convert", str(data), str(meds_dir),
                                    "--rows", str(rows)], log=out / "logs" / "meds_convert.log")
    if step.exit_code != 0:
        raise BenchError(f"converting {data} to MEDS failed (exit {step.exit_code}); see {step.log}")
    converted = json.loads((meds_dir / "convert.json").read_text())
    validate = validate_step(meds_dir, out, workers=workers)
    missing = meds_missing(python)
    normalization = (StepResult(name="meds_transforms", what=STEP_INFO["meds_transforms"], skipped=missing)
                     if missing else transforms_step(meds_dir, out, python=python))
    results = {"rows": rows, "data": str(data), "events": converted["events"], "converted": converted,
               "steps": [asdict(validate), asdict(normalization)]}
    results.update(compared(validate, normalization))
    (out / "meds_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def validate_step(meds_dir: Path, out: Path, *, workers: int) -> StepResult:
    report, predicted = out / "steps" / "meds_validate.report.json", out / "steps" / "meds_validate.predicted.json"
    for path in (report, predicted):
        path.unlink(missing_ok=True)
    step = measure("meds_validate", [sys.executable, "-m", "bench.meds_validate", str(meds_dir), str(report),
                                     str(predicted), "--workers", str(workers)], log=out / "logs" / "meds_validate.log")
    if step.exit_code not in (0, 1):
        raise BenchError(f"`badpoints validate` on {meds_dir} could not run (exit {step.exit_code}); see {step.log}")
    findings = json.loads(report.read_text())["findings"]
    count = {f["check"]: f["count"] for f in findings}
    step.result = {**json.loads(predicted.read_text()), "rows_dropped": count.get("meds_code_unseen", 0),
                   "status": json.loads(report.read_text())["status"],
                   "checks": sorted(count)}
    return step


def transforms_step(meds_dir: Path, out: Path, *, python: Path) -> StepResult:
    target = out / "meds_transforms"
    shutil.rmtree(target, ignore_errors=True)
    log = out / "logs" / "meds_transforms.log"
    step = measure("meds_transforms", [str(python), str(ROOT / "bench" / "meds_transforms.py"), str(meds_dir),
                                       str(target)], log=log)
    text = log.read_text(errors="replace")
    if step.exit_code != 0:
        raise BenchError(f"MEDS-Transforms' normalization failed (exit {step.exit_code}); see {log}")
    made = json.loads(text[text.index("\n{") + 1 if not text.startswith("{") else 0:])
    step.result = {"non_finite_codes": made["non_finite_codes"],
                   "non_finite_rows": sum(z["nan"] + z["posinf"] + z["neginf"] for z in made["z"].values()),
                   "rows_dropped": made["rows_dropped"], "stages_seconds": made["seconds"],
                   "stage_peak_rss_mb": made["peak_rss_bytes"] / MB, "meds_transforms": made["meds_transforms"],
                   "polars": made["polars"]}
    shutil.rmtree(target, ignore_errors=True)
    return step


def compared(validate: StepResult, normalization: StepResult) -> dict:
    """The ratio of wall times (validate over the normalization's stages), agreement, and the MEDS targets."""
    if normalization.skipped:
        return {"ratio": None, "agree": None, "differ": None, "targets": None}
    theirs = normalization.result
    ours = validate.result
    wall = ratio(validate.seconds, theirs["stages_seconds"])
    wall = None if wall is None else round(wall, 2)
    rss_gb = validate.tree_peak_rss_mb / 1000
    return {"ratio": wall, **agreement(ours, theirs),
            "targets": {"validate / normalization wall": {"value": wall, "limit": RATIO_LIMIT,
                                                          "met": wall is not None and wall <= RATIO_LIMIT},
                        "validate peak RSS GB": {"value": round(rss_gb, 2), "limit": RSS_LIMIT_GB,
                                                 "met": rss_gb <= RSS_LIMIT_GB}}}


def agreement(ours: dict, theirs: dict) -> dict:
    """``agree``: every code MEDS-Transforms made non-finite is predicted non-finite or noise and every predicted
    non-finite code was made non-finite; its non-finite rows are the predicted ones plus the rows of the noise codes
    it made non-finite; the dropped rows are equal. ``differ``: the codes made non-finite but not predicted so,
    those predicted but not made, and the noise codes made non-finite (allowed)."""
    made, predicted = set(theirs["non_finite_codes"]), set(ours["non_finite_codes"])
    noise = ours.get("noise_rows_by_code", {})
    unpredicted, unmade = sorted(made - predicted - set(noise)), sorted(predicted - made)
    flipped = sorted(made & set(noise))
    rows = ours["non_finite_rows"] + sum(noise[code] for code in flipped)
    return {"agree": {"non_finite_codes": not unpredicted and not unmade,
                      "non_finite_rows": rows == theirs["non_finite_rows"],
                      "rows_dropped": ours["rows_dropped"] == theirs["rows_dropped"]},
            "differ": {"made_not_predicted": unpredicted, "predicted_not_made": unmade,
                       "noise_made_non_finite": flipped}}


def print_results(results: dict) -> None:
    print(f"MEDS bench: {results['events']:,} events ({results['converted']['lab_rows']:,} lab rows, "
          f"{sum(results['converted']['shards'].values())} shards, {results['converted']['codes']:,} codes)")
    header = (f"{'step':<44}{'wall s':>9}{'CPU s':>9}{'RSS MB':>9}{'non-finite codes':>18}{'rows':>10}"
              f"{'noise codes':>13}{'dropped':>9}")
    print(header)
    for step in results["steps"]:
        if step["skipped"]:
            print(f"{step['what']:<44}{'skipped':>9}  {step['skipped']}")
            continue
        r = step["result"]
        seconds = r.get("stages_seconds", step["seconds"])
        noise = f"{len(r['noise_codes']):,}" if "noise_codes" in r else "-"
        print(f"{step['what']:<44}{seconds:>9.2f}{step['cpu_seconds']:>9.2f}{step['tree_peak_rss_mb']:>9.0f}"
              f"{len(r['non_finite_codes']):>18,}{r['non_finite_rows']:>10,}{noise:>13}{r['rows_dropped']:>9,}")
    print("non-finite: predicted by badpoints, produced by MEDS-Transforms; noise: all train values equal, the std a "
          "rounding residue (z noise, or NaN/inf); RSS: the process tree's peak; MEDS-Transforms' wall: its stages")
    noise = results["steps"][0]["result"].get("noise_codes", [])
    if noise:
        print(f"noise codes: {', '.join(noise[:5])}" + (f" (+{len(noise) - 5} more)" if len(noise) > 5 else ""))
    if results["targets"]:
        print(f"validate / normalization wall: {results['ratio']}; agree: {results['agree']}; "
              f"differ: {results['differ']}")
        for name, goal in results["targets"].items():
            print(f"target {name}: {goal['value']} (<= {goal['limit']:g}): {'met' if goal['met'] else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.meds_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="LABEVENTS rows (default %(default)s)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None, help="MIMIC-III-shaped CSVs to take the rows from "
                        "(read only; default: generated by bench.synth under OUT/data)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--workers", type=int, default=WORKERS)
    args = parser.parse_args(argv)
    try:
        results = run(rows=args.rows, out=args.out, data=args.data, seed=args.seed, workers=args.workers)
    except BenchError as error:
        print(f"meds bench failed: {error}", file=sys.stderr)
        return 2
    print_results(results)
    print(f"wrote {Path(args.out) / 'meds_bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
