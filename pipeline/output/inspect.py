"""``badpoints inspect``: re-check a build's manifest hashes and every graph, and summarise it.

It says two things apart: whether the files are intact (every hash matches the manifest, every graph loads and
passes its checks: what decides inspect's exit code) and what the build's own report (``report.json``) says of the
data (``ok`` or ``warnings``, with its findings by severity), which is shown and never fails inspect.

The summary names the feature columns the manifest records (each feature tensor's, in order, a categorical one
with its cardinality, a mark as such) and where the raw identifiers are (``node_id`` is ``arange``). Per lab item it
tallies, one graph at a time, the edges that carry the item, their largest |z| and how many are marked
bounded, beside what each stage that shows per-item state says of its state in ``stats.json``
(:attr:`pipeline.kernel.stage.Stage.items`: the z-score stats) (``inspect --items``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from pipeline.reporting.report import tally
from pipeline.kernel.stage import Stage
from pipeline.output.write import (FEATURES, feature_names, limits_of, read_graph, read_manifest, verified_bytes,
                                   verify_outputs, where_of)
from schemas.errors import StageError
from schemas.graph import CATEGORICAL, EDGE, NUMERICAL, graph_problems

if TYPE_CHECKING:
    from torch_geometric.data import HeteroData

STATS = "stats.json"
REPORT = "report.json"
Z, Z_BOUNDED = "Z", "Z_BOUNDED"  # edge_attr's z-score and its 0/1 mark of a bounded z, found by name
TALLIED = ("edges", "max_abs_z", "bounded")  # the item table's columns tallied from the graphs
NONE = "-"  # a figure the build does not record


@dataclass(frozen=True)
class DataStatus:
    """What the build's own report says of its data: its status and its findings by severity."""

    status: str  # ok, warnings or errors, as report.json records it
    errors: int
    warnings: int
    notes: int


@dataclass
class Inspection:
    lines: list[str] = field(default_factory=list)
    problems: list[StageError] = field(default_factory=list)  # the files: none when they are intact
    data: DataStatus | None = None  # None when there is no intact report.json to read it from
    items: pd.DataFrame | None = None  # per lab item on the edges (:func:`item_table`); None without a manifest
    item_notes: list[str] = field(default_factory=list)  # what the item table's figures rest on
    kind: str = "graphs"  # what the build wrote: graphs, or a MEDS dataset (``--to meds``)


def _empty(dtype: str) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


@dataclass
class ItemTally:
    """Per ITEMID (sorted), over the graphs added one at a time: the edges that carry it, their largest |z| (NaN
    for none) and how many of them are marked bounded (``marked``: whether the graphs mark bounded edges)."""

    itemid: np.ndarray = field(default_factory=lambda: _empty("int64"))
    edges: np.ndarray = field(default_factory=lambda: _empty("int64"))
    max_abs_z: np.ndarray = field(default_factory=lambda: _empty("float64"))
    bounded: np.ndarray = field(default_factory=lambda: _empty("int64"))
    marked: bool = False

    def add(self, data: HeteroData, *, z: int | None, bounded: int | None) -> None:
        """Fold in one guarded graph: each edge's target indexes ``labitem.itemid``; ``z`` and ``bounded`` are
        edge_attr's columns (None where the build has none)."""
        target, attr = data[EDGE].edge_index[1], data[EDGE].edge_attr
        itemid = data["labitem"].itemid.numpy()
        n = len(itemid)
        top = torch.full((n,), float("nan"), dtype=torch.float64)
        if z is not None:
            top = top.scatter_reduce(0, target, attr[:, z].double().abs(), "amax", include_self=False)
        marked = torch.zeros(n, dtype=torch.int64)
        if bounded is not None:
            marked = torch.bincount(target[attr[:, bounded] != 0], minlength=n)
            self.marked = True
        self._merge(itemid, torch.bincount(target, minlength=n).numpy(), top.numpy(), marked.numpy())

    def _merge(self, itemid: np.ndarray, edges: np.ndarray, top: np.ndarray, marked: np.ndarray) -> None:
        union = np.union1d(self.itemid, itemid)
        mine, theirs = np.searchsorted(union, self.itemid), np.searchsorted(union, itemid)

        def placed(where: np.ndarray, values: np.ndarray, fill: float) -> np.ndarray:
            out = np.full(len(union), fill, dtype=values.dtype)
            out[where] = values
            return out

        self.edges = placed(mine, self.edges, 0) + placed(theirs, edges.astype("int64"), 0)
        self.max_abs_z = np.fmax(placed(mine, self.max_abs_z, np.nan), placed(theirs, top, np.nan))
        self.bounded = placed(mine, self.bounded, 0) + placed(theirs, marked.astype("int64"), 0)
        self.itemid = union


def inspect_build(out_dir: Path, *, stages: Sequence[Stage] = ()) -> Inspection:
    """Hashes against the manifest, each graph loaded with weights_only=True and re-guarded, and a summary; the item
    table beside what the ``stages`` that show per-item state (:attr:`Stage.items`) say of their saved state."""
    out_dir = Path(out_dir)
    result = Inspection()
    try:
        manifest = read_manifest(out_dir)
    except StageError as problem:
        result.problems.append(problem)
        return result
    if manifest.get("kind") == "meds":
        return _inspect_meds(out_dir, manifest, result)
    graph_files = frozenset(entry["path"] for entry in manifest["graphs"])
    result.problems.extend(verify_outputs(out_dir, manifest, skip=graph_files))  # graphs: hashed as they load
    limits = limits_of(manifest)
    z_column, bounded_column = _column(manifest, Z), _column(manifest, Z_BOUNDED)
    tally, untallied = ItemTally(), 0
    totals: dict[str, dict[str, float]] = {}
    for entry in manifest["graphs"]:
        try:
            data = read_graph(out_dir, manifest, entry)
        except StageError as problem:
            result.problems.append(problem)
            continue
        problems = graph_problems(data, limits, where=where_of(entry))
        result.problems.extend(problems)
        width = data[EDGE].edge_attr.shape[1]
        if problems or any(c is not None and c >= width for c in (z_column, bounded_column)):
            untallied += 1  # its figures would not add up: the build's status says why
        else:
            tally.add(data, z=z_column, bounded=bounded_column)
        _add_split(totals, entry, data, z_column if z_column is not None and z_column < width else None)
    result.lines.extend(_summary(out_dir, manifest, totals))
    result.data = _data_status(out_dir, manifest)
    saved = _stats(out_dir, manifest)
    shown = [stage.items(saved.get(stage.fit.saved_as)) for stage in stages
             if stage.items is not None and stage.fit is not None]
    result.items = item_table(tally, manifest.get("item_names"), [table for table, _ in shown])
    result.item_notes = [note for _, notes in shown for note in notes] + _item_notes(
        bounded=bounded_column is not None, untallied=untallied)
    return result


def _inspect_meds(out_dir: Path, manifest: dict[str, Any], result: Inspection) -> Inspection:
    """A build written as MEDS: every file against its hash, its shards per split and the ledgers (the dataset's
    own checks are ``badpoints validate OUT``'s)."""
    result.kind = "meds"
    result.problems.extend(verify_outputs(out_dir, manifest))
    shards = manifest["shards"]
    result.lines.append(f"MEDS build in {out_dir}: {len(shards)} shards, {len(manifest['outputs'])} files checked "
                        f"against the manifest; `badpoints validate {out_dir}` checks it as a MEDS dataset")
    for name, split in manifest.get("splits", {}).items():
        result.lines.append(f"{name:<5} {split['shards']:>4} shards {split['admissions']:>8} admissions "
                            f"{split['events']:>10} lab events")
    result.lines.extend(_ledger_lines(manifest))
    result.data = _data_status(out_dir, manifest)
    return result


def _add_split(totals: dict[str, dict[str, float]], entry: dict[str, Any], data: HeteroData,
               z_column: int | None) -> None:
    """One graph added to its split's totals: graphs, admissions, edges, z range, largest batch."""
    split = totals.setdefault(entry["split"], {"graphs": 0, "admissions": 0, "edges": 0, "z_min": float("inf"),
                                               "z_max": float("-inf"), "memory": 0})
    split["graphs"] += 1
    split["admissions"] += data["admission"].num_nodes
    split["edges"] += int(data[EDGE].edge_index.shape[1])
    z = data[EDGE].edge_attr[:, z_column] if z_column is not None else torch.zeros(0)
    if z.numel():
        split["z_min"] = min(split["z_min"], float(torch.min(z)))
        split["z_max"] = max(split["z_max"], float(torch.max(z)))
    split["memory"] = max(split["memory"], entry["memory"]["total"])


def _summary(out_dir: Path, manifest: dict[str, Any], totals: Mapping[str, dict[str, float]]) -> list[str]:
    """The summary's lines: the files checked, each split's graphs, the feature names, the ledgers."""
    lines = [f"build in {out_dir}: {len(manifest['graphs'])} graphs, {len(manifest['outputs'])} files checked "
             f"against the manifest"]
    for name, split in totals.items():
        lines.append(
            f"{name:<5} {split['graphs']:>4} graphs {split['admissions']:>8} admissions {split['edges']:>10} edges "
            f"z in [{split['z_min']:.3g}, {split['z_max']:.3g}]  largest batch ~{split['memory'] / 2**20:.1f} MB")
    for name in FEATURES:
        lines.append(f"features {name}: {', '.join(map(_described, manifest['features'][name])) or 'none'}")
    lines.append("node ids: node_id = arange(num_nodes) per graph; HADM_ID in admission.hadm_id, "
                 "ITEMID in labitem.itemid")
    return lines + _ledger_lines(manifest)


def _ledger_lines(manifest: dict[str, Any]) -> list[str]:
    """The LABEVENTS and ADMISSIONS ledgers of the manifest, a line each."""
    lines = []
    ledger = manifest["accounting"]["LABEVENTS"]
    lines.append(f"LABEVENTS read {ledger['read']} = kept {ledger['kept']} + quarantined "
                 f"{ledger['quarantined']} + deduplicated {ledger['deduplicated']}")
    admissions = manifest["accounting"].get("ADMISSIONS")
    if admissions:
        dropped = ", ".join(f"{n} {check}" for check, n in admissions["dropped_by"].items() if n)
        lines.append(f"ADMISSIONS read {admissions['read']} = in graphs {admissions['in_graphs']} + dropped "
                     f"{admissions['dropped']}" + (f" ({dropped})" if dropped else ""))
    return lines


def _described(column: dict[str, Any]) -> str:
    """A feature column as the summary names it: ``CODE (5 categories)``, ``Z_BOUNDED (mark)``, ``Z``."""
    if column["kind"] == CATEGORICAL:
        return f"{column['name']} ({column['cardinality']} categories)"
    return column["name"] if column["kind"] == NUMERICAL else f"{column['name']} ({column['kind']})"


def _column(manifest: dict[str, Any], name: str) -> int | None:
    """Where edge_attr's column ``name`` is, by the names the manifest records (None when it has none)."""
    columns = feature_names(manifest, "edge_attr")
    return columns.index(name) if name in columns else None


def _stats(out_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """``stats.json`` when it matches the manifest's hash, else nothing (its problem is reported already)."""
    if STATS not in manifest["outputs"]:
        return {}
    try:
        stats = json.loads(verified_bytes(out_dir, manifest, STATS))
    except (StageError, ValueError):
        return {}
    return stats if isinstance(stats, dict) else {}


def _data_status(out_dir: Path, manifest: dict[str, Any]) -> DataStatus | None:
    """The status and finding counts of ``report.json`` when it matches the manifest's hash, else None (its
    problem is reported already)."""
    if REPORT not in manifest["outputs"]:
        return None
    try:
        report = json.loads(verified_bytes(out_dir, manifest, REPORT))
    except (StageError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("status") not in ("ok", "warnings", "errors") \
            or not isinstance(report.get("findings"), list):
        return None
    findings = report["findings"]
    severities = [finding.get("severity") if isinstance(finding, dict) else None for finding in findings]
    errors, warnings = severities.count("error"), severities.count("warning")
    return DataStatus(status=report["status"], errors=errors, warnings=warnings,
                      notes=len(severities) - errors - warnings)


def status_lines(inspection: Inspection) -> list[str]:
    """The two closing lines: whether the files are intact (what inspect's exit code says), then the data's status
    as the build's report recorded it (shown, never failing inspect)."""
    problems = len(inspection.problems)
    loads = "" if inspection.kind == "meds" else "; every graph loads and passes its checks"
    files = (f"files: ok (every hash matches the manifest{loads})" if not problems
             else f"files: broken ({problems} problem{'s' if problems != 1 else ''}: see the ERROR lines above)")
    data = inspection.data
    if data is None:
        return [files, f"data: unknown (no intact {REPORT} to read it from)"]
    return [files, f"data: {data.status} ({tally(data.errors, data.warnings, data.notes)}; "
                   f"see {REPORT})"]


def item_table(tally: ItemTally, names: Any, stated: Sequence[pd.DataFrame] = ()) -> pd.DataFrame:
    """One row per lab item the edges carry, by max |z| descending, then ITEMID: its name (as findings give it),
    what the stages say of it (``stated``: tables by ITEMID, the z-score stats), edges, max |z| and bounded edges
    (missing where the build does not record them)."""
    carried = tally.edges > 0
    itemid = tally.itemid[carried]
    names = names if isinstance(names, Mapping) else {}
    table = pd.DataFrame({"name": [names.get(str(i)) for i in itemid.tolist()]},
                         index=pd.Index(itemid, name="ITEMID", dtype="int64"))
    for stated_table in stated:
        table = table.join(stated_table)
    table["edges"] = tally.edges[carried]
    table["max_abs_z"] = tally.max_abs_z[carried]
    table["bounded"] = tally.bounded[carried] if tally.marked else None
    order = np.lexsort((itemid, -np.nan_to_num(table["max_abs_z"].to_numpy(), nan=-np.inf)))
    return table.iloc[order]


def _item_notes(*, bounded: bool, untallied: int) -> list[str]:
    """What the tallied figures rest on: whether edges mark a bounded z, and the graphs left out."""
    notes = []
    if not bounded:
        notes.append(f"bounded: {NONE} (edge_attr has no {Z_BOUNDED} column)")
    if untallied:
        notes.append(f"{untallied} graph(s) with problems left out of the item figures")
    return notes


def _cell(value: Any, how: str) -> str:
    """One figure as text in ``how``'s format (``d``: a whole number), or ``-`` when the build does not record it."""
    if value is None or pd.isna(value):
        return NONE
    return str(int(value)) if how == "d" else format(value, how)


# Each column of the item table: its heading, its format, and whether it is text (left-aligned).
_SHOWN = {"ITEMID": ("ITEMID", "d", False), "name": ("name", "", True), "rule": ("rule", "", True),
          "transform": ("transform", "", True), "mean": ("mean", ".4g", False), "scale": ("scale", ".4g", False),
          "count": ("count", "d", False), "edges": ("edges", "d", False), "max_abs_z": ("max|z|", ".4g", False),
          "bounded": ("bounded", "d", False)}


def item_lines(inspection: Inspection, *, top: int) -> list[str]:
    """The item table as text: a heading with what its figures rest on, at most ``top`` rows (0: all), and a line
    saying how many more there are."""
    table = inspection.items
    if table is None:
        return []
    shown = (table if top == 0 else table.head(top)).reset_index()
    columns = []
    for name in shown.columns:
        head, how, text = _SHOWN.get(name, (name, "", True))
        cells = [head, *(_cell(value, how) for value in shown[name].tolist())]
        width = max(map(len, cells))
        columns.append([cell.ljust(width) if text else cell.rjust(width) for cell in cells])
    lines = [f"items: {len(table)} lab items on the edges, by max |z| then ITEMID",
             *(f"  {note}" for note in inspection.item_notes)]
    lines += ["  ".join(row).rstrip() for row in zip(*columns)]
    more = len(table) - len(shown)
    if more > 0:
        lines.append(f"... and {more} more items (--top N lists N, --top 0 all)")
    return lines
