"""The graph guard: what every built heterograph must satisfy before it may be saved or trained on.

Beyond ``HeteroData.validate()``: every float tensor finite; ``edge_index``
int64 of shape [2, E], inside the node counts and non-empty; every per-edge
tensor with E rows; node features with one row per node; ``node_id`` equal to
``arange(num_nodes)`` and the raw identifiers (``admission.hadm_id``,
``labitem.itemid``) int64, positive and unique, one per node; timesteps within
[0, max_timestep]; category codes within their vocabulary; labels 0 or 1.
Each problem is a :class:`StageError` of stage ``graph`` naming the split,
batch and edge or node type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import pandas as pd

from schemas.catalogue import ERROR, GRAPH_FILE, WARNING, CheckInfo
from schemas.catalogue import check_info
from schemas.errors import StageError

if TYPE_CHECKING:  # torch and PyG load when a graph is checked, not when the catalogue reads CHECKS
    import torch
    from torch_geometric.data import HeteroData

CHECKS = (  # what the graph stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("graph_finite", "graph", ERROR, "float tensor with inf or NaN",
              "A non-finite feature poisons every loss it touches; find the stage that let it through.",
              locked=GRAPH_FILE),
    CheckInfo("graph_edge_index", "graph", ERROR, "edge_index that is not int64 of shape [2, E]",
              "PyG expects int64 [2, E]; rebuild the graph with badpoints or fix the code that made it.",
              locked=GRAPH_FILE),
    CheckInfo("graph_index_bounds", "graph", ERROR, "edge_index outside the node counts",
              "An index past the node count (or negative) reads another node's memory or crashes scatter.",
              locked=GRAPH_FILE),
    CheckInfo("graph_empty", "graph", ERROR, "graph without edges",
              "A batch with no edges trains nothing; check the batching and the stages' attrition.", locked=GRAPH_FILE),
    CheckInfo("graph_edge_rows", "graph", ERROR, "per-edge tensor whose rows do not match the edges",
              "edge_attr, timestep and the other per-edge tensors need one row per edge.", locked=GRAPH_FILE),
    CheckInfo("graph_node_rows", "graph", ERROR, "node features whose rows do not match the node count",
              "x needs one row per node.", locked=GRAPH_FILE),
    CheckInfo("graph_node_ids", "graph", ERROR, "node_id that is not arange(num_nodes), or a bad raw id",
              "node_id indexes embeddings (arange per graph); HADM_ID and ITEMID live in hadm_id and itemid, "
              "positive and one per node. Rebuild graphs made by an older badpoints.", locked=GRAPH_FILE),
    CheckInfo("graph_timestep_range", "graph", ERROR, "timestep outside [0, max_timestep]",
              "Timesteps come from the bucket stage; check [bucket] max_timestep.", locked=GRAPH_FILE),
    CheckInfo("graph_code_range", "graph", ERROR, "category code outside its vocabulary",
              "Codes index embeddings: one past the vocabulary crashes or reads garbage.", locked=GRAPH_FILE),
    CheckInfo("graph_label_range", "graph", ERROR, "label outside {0, 1}",
              "Multi-hot labels must be 0 or 1.", locked=GRAPH_FILE),
    CheckInfo("graph_pyg", "graph", ERROR, "graph that HeteroData.validate() rejects",
              "PyG's own validation failed; the message names the store.", locked=GRAPH_FILE),
    CheckInfo("feature_known_after_admission", "graph", WARNING, "admission feature recorded at or after discharge",
              "Known only at discharge, it leaks the outcome into every admission node (DISCHARGE_LOCATION holds "
              "DEAD/EXPIRED, DIED and HOSPICE); remove it from [graph] admission_features."),
    CheckInfo("graph_memory", "graph", WARNING, "batch whose memory estimate exceeds the budget",
              "Lower [graph] batch_size or raise memory_budget_mb; whole-graph node counts are what ran "
              "the seed out of memory."),
    CheckInfo("graph_manifest", "graph", ERROR, "output file missing or different from the manifest",
              "Rebuild: the folder holds a half-written or altered build.", locked=GRAPH_FILE),
    CheckInfo("graph_unsafe", "graph", ERROR, "graph file that does not load with weights_only=True",
              "Refused: it needs unsafe unpickling. Never load it; rebuild the graphs.", locked=GRAPH_FILE),
)


EDGE = ("admission", "did", "labitem")
REVERSE = ("labitem", "rev_did", "admission")
RAW_IDS = {"admission": "hadm_id", "labitem": "itemid"}  # per node type, the attribute holding its raw identifier
Problem = Callable[[str, str, int, str], None]  # (check, store.attribute, count, detail): one problem, recorded


@dataclass(frozen=True)
class GraphLimits:
    """What the graph's values must stay within: the vocabularies' sizes and the last timestep."""

    max_timestep: int
    max_code: int  # the largest category code in edge_attr[:, 0]
    max_node_code: dict[str, tuple[int, ...]]  # per node type, the largest code of each column of x


def _store_name(key: str | tuple[str, str, str]) -> str:
    return "__".join(key) if isinstance(key, tuple) else key


def _failing_rows(mask: torch.Tensor) -> torch.Tensor:
    """Per row (the first dimension), whether any of its values fails; a scalar is one row."""
    return mask.reshape(mask.shape[0] if mask.dim() else 1, -1).any(dim=1)


def _positions(mask: torch.Tensor, cap: int = 10) -> str:
    import torch

    where = torch.nonzero(_failing_rows(mask)).flatten()
    shown = ", ".join(str(int(i)) for i in where[:cap])
    more = f" (+{len(where) - cap} more)" if len(where) > cap else ""
    return f"at rows {shown}{more}"


def _kind(value) -> str:
    """A tensor's dtype and shape ('int32 [16]'), or the type of what is not a tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    return type(value).__name__


def _check_node_ids(store, node_type: str, count: int | None, problem: Problem) -> None:
    """node_id is arange(num_nodes), what an Embedding indexes; the raw id is int64, positive, unique, one per node."""
    import torch

    node_id = store.get("node_id")
    if node_id is None:
        problem("graph_node_ids", f"{node_type}.node_id", 1, "node_id is missing")
    elif (not isinstance(node_id, torch.Tensor) or node_id.dtype != torch.int64 or node_id.dim() != 1
          or node_id.shape[0] != count):
        problem("graph_node_ids", f"{node_type}.node_id", 1, f"node_id is {_kind(node_id)}, not arange({count}) (int64)")
    else:
        off = node_id != torch.arange(count, dtype=torch.int64)
        if off.any():
            problem("graph_node_ids", f"{node_type}.node_id", int(off.sum()),
                    f"node_id is not arange({count}): {int(off.sum())} nodes hold another value {_positions(off)}")
    raw = RAW_IDS.get(node_type)
    if raw is None:
        return
    ids = store.get(raw)
    if ids is None:
        problem("graph_node_ids", f"{node_type}.{raw}", 1, f"{raw} is missing")
        return
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 1 or ids.shape[0] != count:
        problem("graph_node_ids", f"{node_type}.{raw}", 1, f"{raw} is {_kind(ids)}, not int64 [{count}]")
        return
    bad = ids <= 0
    if bad.any():
        problem("graph_node_ids", f"{node_type}.{raw}", int(bad.sum()), f"{raw} not positive {_positions(bad)}")
    values, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    repeated = counts[inverse] > 1
    if repeated.any():
        shown = ", ".join(str(int(v)) for v in values[counts > 1][:10])
        problem("graph_node_ids", f"{node_type}.{raw}", int(repeated.sum()),
                f"{raw} {shown} on more than one node {_positions(repeated)}")


def _check_finite(data: HeteroData, problem: Problem) -> None:
    """graph_finite: every float tensor of every store (the graph's own, each node and edge type's) is finite."""
    import torch

    for store in data.stores:
        key = store._key if store._key is not None else "global"
        name = _store_name(key)
        for attr, value in store.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                bad = ~torch.isfinite(value)
                if bad.any():
                    problem("graph_finite", f"{name}.{attr}", int(_failing_rows(bad).sum()),
                            f"{int(bad.sum())} non-finite values {_positions(bad)}")


def _check_node_rows(store, node_type: str, count: int | None, problem: Problem) -> None:
    """graph_node_rows: every tensor of a node type has one row per node."""
    import torch

    for attr, value in store.items():
        if isinstance(value, torch.Tensor) and (value.dim() == 0 or value.shape[0] != count):
            rows = value.shape[0] if value.dim() else 0
            problem("graph_node_rows", f"{node_type}.{attr}", abs(rows - (count or 0)) or 1,
                    f"{attr} has {rows} rows for {count} nodes")


def _check_node_codes(store, node_type: str, tops: tuple[int, ...] | None, problem: Problem) -> None:
    """graph_code_range: the codes in x are whole and within each column's vocabulary (``tops``); an x of
    another shape than [N, len(tops)] is graph_node_rows."""
    import torch

    x = store.get("x")
    if x is not None and tops is not None and x.dim() == 2 and x.shape[1] == len(tops) and x.numel():
        top = torch.tensor(tops, dtype=x.dtype)
        bad = torch.isfinite(x) & ((x < 0) | (x > top) | (x != torch.round(x)))
        if bad.any():
            problem("graph_code_range", f"{node_type}.x", int(_failing_rows(bad).sum()),
                    f"codes outside their vocabularies (0..{list(tops)} per column) {_positions(bad)}")
    elif x is not None and tops is not None and (x.dim() != 2 or x.shape[1] != len(tops)):
        problem("graph_node_rows", f"{node_type}.x", 1,
                f"x has shape {list(x.shape)}, expected {len(tops)} columns")


def _check_labels(store, node_type: str, problem: Problem) -> None:
    """graph_label_range: the labels y are 0 or 1."""
    y = store.get("y")
    if y is not None:
        bad = (y != 0) & (y != 1)
        if bad.any():
            problem("graph_label_range", f"{node_type}.y", int(_failing_rows(bad).sum()),
                    f"labels not 0 or 1 {_positions(bad)}")


def _check_edge_index(data: HeteroData, edge_type: tuple[str, str, str], problem: Problem) -> int | None:
    """graph_edge_index, graph_empty and graph_index_bounds: edge_index is int64 [2, E], has edges, and points
    at nodes the graph has. The number of edges E, or None when the edge type's other tensors cannot be
    checked against it (no usable edge_index, or a node type the graph lacks)."""
    import torch

    name = _store_name(edge_type)
    index = data[edge_type].get("edge_index")
    if index is None or index.dtype != torch.int64 or index.dim() != 2 or index.shape[0] != 2:
        shape = "missing" if index is None else f"{str(index.dtype).removeprefix('torch.')} {list(index.shape)}"
        problem("graph_edge_index", f"{name}.edge_index", 1, f"edge_index is {shape}, not int64 [2, E]")
        return None
    edges = index.shape[1]
    if edges == 0:
        problem("graph_empty", f"{name}.edge_index", 1, "no edges")
    source, _, target = edge_type
    missing = [t for t in (source, target) if t not in data.node_types]
    if missing:
        problem("graph_index_bounds", f"{name}.edge_index", 1,
                f"indices into node type(s) {', '.join(missing)} that the graph does not have")
        return None
    for row, node_type in ((0, source), (1, target)):
        nodes = data[node_type].num_nodes or 0
        bad = (index[row] < 0) | (index[row] >= nodes)
        if bad.any():
            problem("graph_index_bounds", f"{name}.edge_index", int(bad.sum()),
                    f"{int(bad.sum())} {'source' if row == 0 else 'target'} indices outside 0..{nodes - 1} "
                    f"({node_type} nodes) {_positions(bad)}")
    return edges


def _check_edge_rows(store, name: str, edges: int, problem: Problem) -> None:
    """graph_edge_rows: every per-edge tensor besides edge_index has one row per edge."""
    import torch

    for attr, value in store.items():
        if attr == "edge_index" or not isinstance(value, torch.Tensor):
            continue
        if value.dim() == 0 or value.shape[0] != edges:
            rows = value.shape[0] if value.dim() else 0
            problem("graph_edge_rows", f"{name}.{attr}", abs(rows - edges) or 1,
                    f"{attr} has {rows} rows for {edges} edges")


def _check_timesteps(store, name: str, max_timestep: int, problem: Problem) -> None:
    """graph_timestep_range: every timestep is within [0, max_timestep]."""
    timestep = store.get("timestep")
    if timestep is not None:
        bad = (timestep < 0) | (timestep > max_timestep)
        if bad.any():
            problem("graph_timestep_range", f"{name}.timestep", int(bad.sum()),
                    f"timesteps outside 0..{max_timestep} {_positions(bad)}")


def _check_edge_codes(store, name: str, edges: int, max_code: int, problem: Problem) -> None:
    """graph_code_range: the category codes in edge_attr[:, 0] are whole and within 0..max_code."""
    import torch

    attr = store.get("edge_attr")
    if attr is not None and attr.dim() == 2 and attr.shape[1] >= 1 and attr.shape[0] == edges:
        codes = attr[:, 0]
        bad = torch.isfinite(codes) & ((codes < 0) | (codes > max_code) | (codes != torch.round(codes)))
        if bad.any():
            problem("graph_code_range", f"{name}.edge_attr", int(bad.sum()),
                    f"category codes outside 0..{max_code} {_positions(bad)}")


def graph_problems(data: HeteroData, limits: GraphLimits, *, where: str) -> list[StageError]:
    """Every problem of one graph (empty when it is sound); ``where`` names it, e.g. 'train/batch 3'.

    The float tensors first, then each node type, then each edge type, one check after another; PyG's own
    ``validate()`` only on a graph without other problems."""
    problems: list[StageError] = []

    def problem(check: str, store: str, count: int, detail: str) -> None:
        problems.append(StageError(
            stage="graph", side="output", check=check, column=store, count=count,
            failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=where,
            detail=detail, advice=check_info(check).advice,
        ))

    _check_finite(data, problem)
    for node_type in data.node_types:
        store = data[node_type]
        count = store.num_nodes
        _check_node_rows(store, node_type, count, problem)
        _check_node_codes(store, node_type, limits.max_node_code.get(node_type), problem)
        _check_node_ids(store, node_type, count, problem)
        _check_labels(store, node_type, problem)
    for edge_type in data.edge_types:
        edges = _check_edge_index(data, edge_type, problem)
        if edges is None:
            continue
        store, name = data[edge_type], _store_name(edge_type)
        _check_edge_rows(store, name, edges, problem)
        _check_timesteps(store, name, limits.max_timestep, problem)
        _check_edge_codes(store, name, edges, limits.max_code, problem)
    if not problems:
        try:
            data.validate(raise_on_error=True)
        except ValueError as exc:
            problem("graph_pyg", "graph", 1, str(exc).splitlines()[0][:300])
    return problems
