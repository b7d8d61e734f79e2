"""Several shapes in one benchmark: where each shape's run goes, and its memory figures side by side in
``shapes.json`` (memory bounded by the part, not by the data's shape).

Each shape's run is :func:`bench.run.run` into ``OUT/<shape>/`` (its own ``bench.json``, logs and reports); what is
gathered here is read from those results only: the build's and validate's summed process-tree peak RSS and largest
single process, the Dask step's client and workers apart (when it ran), and the LABEVENTS ledger the build's
badpoints report gives (rows read, kept, quarantined, merged by dedup), nothing the report does not say.
"""

from __future__ import annotations

from pathlib import Path

MEMORY_STEPS = {"build": ("tree_peak_rss_mb", "peak_rss_mb"), "validate": ("tree_peak_rss_mb", "peak_rss_mb"),
                "dask": ("main_peak_rss_mb", "children_peak_rss_mb", "tree_peak_rss_mb")}
LEDGER = ("read", "kept", "quarantined", "deduplicated")  # the build report's attrition.LABEVENTS


def shape_out(out: Path, shape: str) -> Path:
    """The folder of one shape's run when several shapes run: ``out/<shape>``."""
    return Path(out) / shape


def shape_figures(results: dict, bench_json: Path) -> dict:
    """One shape's memory figures (MB; a skipped step: why) and the build's LABEVENTS ledger with the shares
    quarantined (of the rows read) and merged by dedup (of the rest) (None where the build's report gave no ledger)."""
    steps = {step["name"]: step for step in results["steps"]}
    memory = {}
    for name, keys in MEMORY_STEPS.items():
        step = steps.get(name)
        if step is not None:
            memory[name] = {"skipped": step["skipped"]} if step["skipped"] else {key: step.get(key) for key in keys}
    return {"bench_json": str(bench_json), "rows": results["rows"], "layout": results["layout"],
            "shape": results["shape"], **memory, "labevents": _ledger(steps["build"]["result"])}


def _ledger(result: dict) -> dict | None:
    """The build's LABEVENTS rows read = kept + quarantined + deduplicated; the shares the heavy shape is stated
    in: quarantined of the rows read, merged by dedup of the rest (the rows not quarantined)."""
    if not all(isinstance(result.get(key), int) for key in LEDGER) or not result["read"]:
        return None
    ledger = {key: result[key] for key in LEDGER}
    rest = ledger["read"] - ledger["quarantined"]
    return {**ledger, "quarantined_share": round(ledger["quarantined"] / ledger["read"], 4),
            "deduplicated_share_of_rest": round(ledger["deduplicated"] / rest, 4) if rest else None}


def shapes_summary(out: Path, runs: dict[str, dict]) -> dict:
    """What ``out/shapes.json`` holds: each shape's figures (:func:`shape_figures`) with the path of its
    ``bench.json``."""
    return {"shapes": {shape: shape_figures(results, shape_out(out, shape).resolve() / "bench.json")
                       for shape, results in runs.items()}}
