"""Writing a build, and reading it back safely: the only module that writes outputs.

Every file is written to a temp file in the same folder and renamed into place,
so a reader sees the old file or the new one, never half of one. The manifest
is removed when a build starts and written last: it is the commit marker. Graph
files hold ``HeteroData.to_dict()`` (plain tensors, strings and tuples) and are
loaded only with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch_geometric.data import HeteroData

from pipeline.graph import GraphBatch
from pipeline.report import write_atomic
from schemas.errors import StageError
from schemas.graph import GraphLimits, graph_problems

MANIFEST = "manifest.json"
MARKER = ".badpoints"  # says the folder holds a badpoints build, so a rebuild may replace its files
FORMAT = 1
PACKAGES = ("badpoints", "pandas", "pandera", "numpy", "pyarrow", "torch", "torch_geometric")


class OutputError(ValueError):
    """The output folder cannot be used (inside the input, or someone else's folder)."""


def graph_path(split: str, batch: int) -> str:
    """A graph's path relative to OUT_DIR: names come from the split and batch number, never from data."""
    return f"graphs/{split}/batch_{batch:05d}.pt"


def check_output_dir(out_dir: Path, data_dir: Path) -> Path:
    """The resolved output folder, refused if it is or sits inside the input, or holds someone else's files."""
    out, data = Path(out_dir).resolve(), Path(data_dir).resolve()
    if out == data or data in out.parents:
        raise OutputError(f"output folder {str(out)!r} is inside the input folder {str(data)!r}; choose another")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise OutputError(f"{str(out)!r} exists and is not a badpoints build folder; badpoints will not "
                          "overwrite it. Choose an empty or new folder")
    return out


def graph_bytes(data: HeteroData) -> bytes:
    """The graph's bytes: deterministic (no file name, no time stamp in the archive)."""
    buffer = io.BytesIO()
    torch.save(data.to_dict(), buffer)
    return buffer.getvalue()


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "unknown"
    return found


@dataclass(frozen=True)
class BuildOutputs:
    """Everything a build writes, as bytes, before any of it touches the disk."""

    files: dict[str, bytes]
    manifest: dict[str, Any]


def build_outputs(*, graphs: list[GraphBatch], limits: GraphLimits, config: dict, inputs: list[dict],
                  fitted: dict, quarantine: pd.DataFrame, index: pd.DataFrame, report: dict,
                  accounting: dict, splits: dict, memory: dict) -> BuildOutputs:
    """Serialise every output and the manifest that names their hashes (pure: no I/O)."""
    files = {graph_path(g.split, g.batch): graph_bytes(g.data) for g in graphs}
    files["stats.json"] = _json_bytes(fitted)
    files["quarantine.parquet"] = _parquet_bytes(quarantine.reset_index())
    files["index.parquet"] = _parquet_bytes(index)
    files["report.json"] = _json_bytes(report)
    manifest = {
        "format": FORMAT,
        "config": config,
        "versions": versions(),
        "inputs": inputs,
        "outputs": {name: {"sha256": _sha256(data), "bytes": len(data)} for name, data in sorted(files.items())},
        "graphs": [{"split": g.split, "batch": g.batch, "path": graph_path(g.split, g.batch),
                    "admissions": int(g.data["admission"].num_nodes),
                    "edges": int(g.data["admission", "did", "labitem"].edge_index.shape[1]),
                    "memory": memory[g.where]} for g in graphs],
        "limits": {"max_timestep": limits.max_timestep, "max_code": limits.max_code,
                   "max_node_code": {k: list(v) for k, v in sorted(limits.max_node_code.items())}},
        "splits": splits,
        "accounting": {"LABEVENTS": accounting},
    }
    return BuildOutputs(files=files, manifest=manifest)


def write_build(out_dir: Path, outputs: BuildOutputs) -> None:
    """Uncommit (remove the manifest), write every file atomically, drop stale files, commit (manifest last)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).touch()
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for name, data in outputs.files.items():
        path = out_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    keep = set(outputs.files) | {MANIFEST, MARKER}
    for path in sorted(out_dir.rglob("*"), reverse=True):
        relative = path.relative_to(out_dir).as_posix()
        if path.is_file() and relative not in keep:
            path.unlink()  # stale graphs of an earlier build, temp files of a killed one
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    write_atomic(out_dir / MANIFEST, _json_bytes(outputs.manifest))


# -- reading back ---------------------------------------------------------------------------------
def read_manifest(out_dir: Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _problem("graph_manifest", MANIFEST, "no manifest: the folder holds no finished build") from None
    except (OSError, ValueError) as exc:
        raise _problem("graph_manifest", MANIFEST, f"unreadable manifest ({type(exc).__name__})") from None


def _problem(check: str, where: str, detail: str) -> StageError:
    from schemas.checks import check_info

    return StageError(stage="graph", side="input", check=check, column=None, count=1,
                      failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=where,
                      detail=detail, advice=check_info(check).advice)


def verify_outputs(out_dir: Path, manifest: dict[str, Any]) -> list[StageError]:
    """Every output file missing or differing from the manifest's hash."""
    problems = []
    for name, expected in manifest["outputs"].items():
        path = Path(out_dir) / name
        if not path.is_file():
            problems.append(_problem("graph_manifest", name, "listed in the manifest but missing"))
        elif _sha256(path.read_bytes()) != expected["sha256"]:
            problems.append(_problem("graph_manifest", name, "sha256 differs from the manifest's"))
    return problems


def load_graph_file(path: Path) -> HeteroData:
    """One graph, loaded with weights_only=True (no allow-list): anything needing unsafe unpickling is refused."""
    try:
        record = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:
        raise _problem("graph_unsafe", str(path), f"refused by torch.load(weights_only=True) "
                                                  f"({type(exc).__name__})") from None
    if not isinstance(record, dict):
        raise _problem("graph_unsafe", str(path), f"holds a {type(record).__name__}, not a graph dictionary")
    return HeteroData.from_dict(record)


def limits_of(manifest: dict[str, Any]) -> GraphLimits:
    raw = manifest["limits"]
    return GraphLimits(max_timestep=int(raw["max_timestep"]), max_code=int(raw["max_code"]),
                       max_node_code={k: tuple(int(c) for c in v) for k, v in raw["max_node_code"].items()})


def load_graphs(out_dir: Path, split: str) -> list[HeteroData]:
    """The graphs of one split, each checked against the manifest's hash, loaded safely and re-guarded."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    limits = limits_of(manifest)
    graphs = []
    for entry in manifest["graphs"]:
        if entry["split"] != split:
            continue
        path = out_dir / entry["path"]
        expected = manifest["outputs"][entry["path"]]["sha256"]
        if not path.is_file() or _sha256(path.read_bytes()) != expected:
            raise _problem("graph_manifest", entry["path"], "missing or differs from the manifest: rebuild")
        data = load_graph_file(path)
        problems = graph_problems(data, limits, where=f"{split}/batch {entry['batch']}")
        if problems:
            raise problems[0]
        graphs.append(data)
    return graphs
