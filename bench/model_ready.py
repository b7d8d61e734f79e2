"""``python -m bench.model_ready OUT [OUT ...]``: what a build hands a model, in the figures of the "model-ready"
targets: max |z| over every edge, the share of edges with |z| > 10, edges marked bounded, unseen and censored,
admissions in the graphs, rows kept, and whether admission.x_cat holds a column known only at discharge. (That no item's
z breaks the order of its raw values is held by tests/pipeline/stages/test_scale.py on the real demo.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from pipeline.output.write import feature_names, read_graph, read_manifest
from schemas.graph import EDGE
from schemas.raw import KNOWN_AFTER_ADMISSION


def figures(out: Path) -> dict:
    """The figures of one build folder."""
    manifest = read_manifest(out)
    names = feature_names(manifest, "edge_attr")
    z_at = names.index("Z")
    marks = {name: names.index(name) for name in names if name.startswith("Z_")}
    z_all, counts, admissions = [], {name: 0 for name in marks}, 0
    for entry in manifest["graphs"]:
        data = read_graph(out, manifest, entry)
        attr = data[EDGE].edge_attr.double().numpy()
        z_all.append(attr[:, z_at])
        for name, at in marks.items():
            counts[name] += int((attr[:, at] != 0).sum())
        admissions += int(data["admission"].num_nodes)
    z = np.abs(np.concatenate(z_all)) if z_all else np.zeros(0)
    report = json.loads((out / "report.json").read_text())
    attrition = next((f for f in report["findings"] if f["check"] == "attrition"), {})
    return {"edges": int(len(z)), "max_abs_z": float(z.max(initial=0.0)),
            "share_over_10": float((z > 10).mean()) if len(z) else 0.0,
            "marked": counts, "admissions_in_graphs": admissions,
            "kept_rows": manifest.get("accounting", {}).get("LABEVENTS", {}).get("kept"),
            "admission_x": feature_names(manifest, "admission.x_cat"),
            "admission_x_known_after": [c for c in feature_names(manifest, "admission.x_cat")
                                        if c.removesuffix("_CODE") in KNOWN_AFTER_ADMISSION],
            "attrition": attrition.get("message", "")[:200]}


def main(argv: list[str] | None = None) -> int:
    for folder in argv if argv is not None else sys.argv[1:]:
        print(folder, json.dumps(figures(Path(folder)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
