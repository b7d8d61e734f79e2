"""``badpoints inspect``: re-check a build's manifest hashes and every graph, and summarise it.

The summary names the feature columns the manifest records (admission x, labitem x and
edge_attr, in order) and where the raw identifiers are (``node_id`` is ``arange``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from pipeline.write import FEATURES, limits_of, read_graph, read_manifest, verify_outputs, where_of
from schemas.errors import StageError
from schemas.graph import EDGE, graph_problems


@dataclass
class Inspection:
    lines: list[str] = field(default_factory=list)
    problems: list[StageError] = field(default_factory=list)


def inspect_build(out_dir: Path) -> Inspection:
    """Hashes against the manifest, each graph loaded with weights_only=True and re-guarded, and a summary."""
    out_dir = Path(out_dir)
    result = Inspection()
    try:
        manifest = read_manifest(out_dir)
    except StageError as problem:
        result.problems.append(problem)
        return result
    graph_files = frozenset(entry["path"] for entry in manifest["graphs"])
    result.problems.extend(verify_outputs(out_dir, manifest, skip=graph_files))  # graphs: hashed as they load
    limits = limits_of(manifest)
    totals: dict[str, dict[str, float]] = {}
    for entry in manifest["graphs"]:
        try:
            data = read_graph(out_dir, manifest, entry)
        except StageError as problem:
            result.problems.append(problem)
            continue
        result.problems.extend(graph_problems(data, limits, where=where_of(entry)))
        z = data[EDGE].edge_attr[:, 1]
        split = totals.setdefault(entry["split"], {"graphs": 0, "admissions": 0, "edges": 0, "z_min": float("inf"),
                                                   "z_max": float("-inf"), "memory": 0})
        split["graphs"] += 1
        split["admissions"] += data["admission"].num_nodes
        split["edges"] += int(data[EDGE].edge_index.shape[1])
        if z.numel():
            split["z_min"] = min(split["z_min"], float(torch.min(z)))
            split["z_max"] = max(split["z_max"], float(torch.max(z)))
        split["memory"] = max(split["memory"], entry["memory"]["total"])
    ledger = manifest["accounting"]["LABEVENTS"]
    result.lines.append(f"build in {out_dir}: {len(manifest['graphs'])} graphs, {len(manifest['outputs'])} files "
                        f"checked against the manifest")
    for name, split in totals.items():
        result.lines.append(
            f"{name:<5} {split['graphs']:>4} graphs {split['admissions']:>8} admissions {split['edges']:>10} edges "
            f"z in [{split['z_min']:.3g}, {split['z_max']:.3g}]  largest batch ~{split['memory'] / 2**20:.1f} MB")
    for name in FEATURES:
        result.lines.append(f"features {name}: {', '.join(manifest['features'][name])}")
    result.lines.append("node ids: node_id = arange(num_nodes) per graph; HADM_ID in admission.hadm_id, "
                        "ITEMID in labitem.itemid")
    result.lines.append(f"LABEVENTS read {ledger['read']} = kept {ledger['kept']} + quarantined "
                        f"{ledger['quarantined']} + deduplicated {ledger['deduplicated']}")
    admissions = manifest["accounting"].get("ADMISSIONS")
    if admissions:
        dropped = ", ".join(f"{n} {check}" for check, n in admissions["dropped_by"].items() if n)
        result.lines.append(f"ADMISSIONS read {admissions['read']} = in graphs {admissions['in_graphs']} + dropped "
                            f"{admissions['dropped']}" + (f" ({dropped})" if dropped else ""))
    return result
