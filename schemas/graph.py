"""The graph guard of badpoints' own heterographs, beyond what any PyG graph must satisfy (:mod:`schemas.pyg`), and
the graph stage's checks.

:func:`graph_problems` is :func:`schemas.pyg.pyg_problems` under :func:`badpoints_rules`: non-empty edge types,
``node_id`` equal to ``arange(num_nodes)`` and the raw identifiers (``admission.hadm_id``, ``labitem.itemid``) int64,
positive and unique, one per node; timesteps within [0, max_timestep]; each feature tensor as :class:`GraphLimits`
describes it (the float ones, ``x`` and ``edge_attr``, of numerical columns only, as many as it names; the
categorical ones, ``x_cat`` and ``edge_attr_cat``, int64 indices inside ``[0, cardinality)`` per column); labels 0 or
1. Each problem is a :class:`StageError` of stage ``graph`` naming the store, the attribute and the first rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from schemas.catalogue import ERROR, GRAPH_FILE, INFO, WARNING, CheckInfo
from schemas.errors import StageError
from schemas.pyg import (ANY_GRAPH, GraphRules, Problem, failing_rows, kind_of, positions,  # noqa: F401  (re-exported)
                         pyg_problems, size_text, tensor_bytes)

if TYPE_CHECKING:  # torch and PyG load when a graph is checked, not when the catalogue reads CHECKS
    from torch_geometric.data import HeteroData


CHECKS = (  # what the graph stage finds (schemas.checks puts them into the catalogue)
    CheckInfo("graph_finite", "graph", ERROR, "float tensor with inf or NaN",
              "A non-finite value poisons every loss it touches; find the code or stage that let it through.",
              locked=GRAPH_FILE),
    CheckInfo("graph_magnitude", "graph", ERROR, "float value above max_abs in magnitude",
              "Finite, and no value a model should read: a z-score this far out is a std guard that failed "
              "(std + 1e-7 on a constant item) or a unit error. Fix the scaling of what is named; values that are "
              "real want scaling too, or a max_abs of yours (check_graph's; None: no bound) or a [severity] of "
              "yours for badpoints check."),
    CheckInfo("graph_labels_unchecked", "graph", INFO, "labels not checked against a number of classes",
              "Without it a label past the classes cannot be told: give check_graph num_classes=N "
              "(badpoints check --num-classes N)."),
    CheckInfo("graph_edge_index", "graph", ERROR, "edge index that is not int64 of shape [2, E]",
              "PyG expects int64 [2, E]; rebuild the graph with badpoints or fix the code that made it.",
              locked=GRAPH_FILE),
    CheckInfo("graph_index_bounds", "graph", ERROR, "edge index outside the node counts",
              "An index past the node count (or negative) reads another node's memory or crashes scatter.",
              locked=GRAPH_FILE),
    CheckInfo("graph_empty", "graph", ERROR, "graph without edges",
              "A batch with no edges trains nothing; check the batching and the stages' attrition.", locked=GRAPH_FILE),
    CheckInfo("graph_edge_rows", "graph", ERROR, "per-edge tensor whose rows do not match the edges",
              "edge_attr, edge_weight, timestep and the other per-edge tensors need one row per edge (edge_label: "
              "one per column of edge_label_index where there is one).", locked=GRAPH_FILE),
    CheckInfo("graph_node_rows", "graph", ERROR, "per-node tensor whose rows do not match the node count",
              "x and every other per-node tensor need one row per node (a Data's y: one per node or per graph).",
              locked=GRAPH_FILE),
    CheckInfo("graph_node_ids", "graph", ERROR, "node_id that is not arange(num_nodes), or a bad raw id",
              "node_id indexes embeddings (arange per graph); HADM_ID and ITEMID live in hadm_id and itemid, "
              "positive and one per node. Rebuild graphs made by an older badpoints.", locked=GRAPH_FILE),
    CheckInfo("graph_timestep_range", "graph", ERROR, "timestep outside [0, max_timestep]",
              "Timesteps come from the bucket stage; check [bucket] max_timestep.", locked=GRAPH_FILE),
    CheckInfo("graph_code_range", "graph", ERROR, "category index that is not int64 inside [0, cardinality)",
              "Categorical columns (x_cat, edge_attr_cat) index embeddings: one past the vocabulary crashes or reads "
              "garbage, and a code in a float tensor is read as a magnitude.", locked=GRAPH_FILE),
    CheckInfo("graph_label_range", "graph", ERROR, "label outside [0, num_classes)",
              "A label is a whole class index below num_classes, or 0 or 1 in multi-hot labels (badpoints' y): "
              "one past the classes crashes the loss or trains on garbage.", locked=GRAPH_FILE),
    CheckInfo("graph_pyg", "graph", ERROR, "graph that PyG's validate() rejects",
              "PyG's own validation failed; the message names the store.", locked=GRAPH_FILE),
    CheckInfo("graph_isolated_nodes", "graph", INFO, "nodes in no edge",
              "A node in no edge_index gets no message from any neighbour: expected where a graph holds a whole "
              "dictionary (badpoints' lab items), a lost edge list elsewhere."),
    CheckInfo("graph_bytes", "graph", WARNING, "graph whose tensors exceed max_bytes",
              "The sum of its tensors' sizes: cut it into batches (a loader, smaller graphs) or raise max_bytes "
              "if your device holds it."),
    CheckInfo("feature_known_after_admission", "graph", WARNING, "admission feature recorded at or after discharge",
              "Known only at discharge, it leaks the outcome into every admission node (DISCHARGE_LOCATION holds "
              "DEAD/EXPIRED, DIED and HOSPICE); remove it from [graph] admission_features."),
    CheckInfo("graph_memory", "graph", WARNING, "batch whose memory estimate exceeds the budget",
              "Lower [graph] batch_size or raise memory_budget_mb; whole-graph node counts are what ran "
              "the seed out of memory."),
    CheckInfo("graph_manifest", "graph", ERROR, "output file missing or different from the manifest",
              "Rebuild: the folder holds a half-written or altered build.", locked=GRAPH_FILE),
    CheckInfo("graph_unsafe", "graph", ERROR, "graph file that does not load with weights_only=True as graph data",
              "Refused: it needs unsafe unpickling or holds no graph. Never load it unsafely; rebuild the graphs "
              "(a graph of your own: torch.save(data.to_dict(), path)).", locked=GRAPH_FILE),
)


EDGE = ("admission", "did", "labitem")
REVERSE = ("labitem", "rev_did", "admission")
RAW_IDS = {"admission": "hadm_id", "labitem": "itemid"}  # per node type, the attribute holding its raw identifier


CATEGORICAL, NUMERICAL, MARK = KINDS = ("categorical", "numerical", "mark")  # what a feature column is
# Per store kind, its float tensor (numerical columns and marks) and its int64 tensor of category indices.
NODE_TENSORS = ("x", "x_cat")
EDGE_TENSORS = ("edge_attr", "edge_attr_cat")
# badpoints' feature tensors, by the names features give them (:func:`tensor_name`), in order.
FEATURES = ("admission.x", "admission.x_cat", "labitem.x", "labitem.x_cat", "edge_attr", "edge_attr_cat")


@dataclass(frozen=True)
class Column:
    """One feature column: its name, its kind (``categorical``: an index into a vocabulary of ``cardinality``
    entries, 0 for missing or unseen; ``numerical``: a number; ``mark``: a 0/1 or -1/0/1 flag a stage wrote) and,
    for a categorical column, how many indices it has."""

    name: str
    kind: str
    cardinality: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if (self.kind == CATEGORICAL) != (self.cardinality is not None):
            raise ValueError(f"column {self.name}: a cardinality is given for categorical columns, and only them")
        if self.cardinality is not None and self.cardinality < 1:
            raise ValueError(f"column {self.name}: cardinality {self.cardinality} is below 1")


def tensor_name(store: str, attribute: str) -> str:
    """How features name a tensor: ``admission.x_cat`` for a node type's, ``edge_attr`` for every edge type's."""
    return attribute if attribute in EDGE_TENSORS else f"{store}.{attribute}"


@dataclass(frozen=True)
class GraphLimits:
    """What the graph's values must stay within: the last timestep, and every feature tensor's columns, by
    :func:`tensor_name` (``admission.x``, ``admission.x_cat``, ..., ``edge_attr``, ``edge_attr_cat``): a float
    tensor (``x``, ``edge_attr``) holds numerical columns and marks only, an int64 one (``x_cat``,
    ``edge_attr_cat``) categorical columns only."""

    max_timestep: int
    features: Mapping[str, tuple[Column, ...]]

    def __post_init__(self) -> None:
        for tensor, columns in self.features.items():
            categorical = tensor.endswith("_cat")
            wrong = [c.name for c in columns if (c.kind == CATEGORICAL) != categorical]
            if wrong:
                held = "categorical columns only" if categorical else "no categorical column"
                raise ValueError(f"{tensor} holds {held}: {', '.join(wrong)}")

    def cardinalities(self, tensor: str) -> tuple[int, ...] | None:
        """Each column's cardinality of a categorical tensor (None: the limits do not describe it)."""
        columns = self.features.get(tensor)
        return None if columns is None else tuple(int(c.cardinality) for c in columns)


# -- badpoints' own checks --------------------------------------------------------------------------------
def _check_node_ids(store, node_type: str, count: int | None, problem: Problem) -> None:
    """node_id is arange(num_nodes), what an Embedding indexes; the raw id is int64, positive, unique, one per node."""
    import torch

    node_id = store.get("node_id")
    if node_id is None:
        problem("graph_node_ids", f"{node_type}.node_id", 1, "node_id is missing")
    elif (not isinstance(node_id, torch.Tensor) or node_id.dtype != torch.int64 or node_id.dim() != 1
          or node_id.shape[0] != count):
        problem("graph_node_ids", f"{node_type}.node_id", 1, f"node_id is {kind_of(node_id)}, not arange({count}) (int64)")
    else:
        off = node_id != torch.arange(count, dtype=torch.int64)
        if off.any():
            problem("graph_node_ids", f"{node_type}.node_id", int(off.sum()),
                    f"node_id is not arange({count}): {int(off.sum())} nodes hold another value {positions(off)}")
    raw = RAW_IDS.get(node_type)
    if raw is None:
        return
    ids = store.get(raw)
    if ids is None:
        problem("graph_node_ids", f"{node_type}.{raw}", 1, f"{raw} is missing")
        return
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 1 or ids.shape[0] != count:
        problem("graph_node_ids", f"{node_type}.{raw}", 1, f"{raw} is {kind_of(ids)}, not int64 [{count}]")
        return
    bad = ids <= 0
    if bad.any():
        problem("graph_node_ids", f"{node_type}.{raw}", int(bad.sum()), f"{raw} not positive {positions(bad)}")
    values, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
    repeated = counts[inverse] > 1
    if repeated.any():
        shown = ", ".join(str(int(v)) for v in values[counts > 1][:10])
        problem("graph_node_ids", f"{node_type}.{raw}", int(repeated.sum()),
                f"{raw} {shown} on more than one node {positions(repeated)}")


def _check_features(store, name: str, rows: int | None, attributes: tuple[str, str], limits: GraphLimits,
                    problem: Problem) -> None:
    """graph_node_rows / graph_edge_rows and graph_code_range: the store's float feature tensor holds as many
    columns as the limits name for it (numerical columns and marks: no category code), its categorical tensor is
    int64 [rows, columns] with every index inside its column's ``[0, cardinality)``. A tensor the limits do not
    describe is not checked; one they describe that is missing is a problem."""
    import torch

    floats, categorical = attributes
    check_rows = "graph_edge_rows" if floats == "edge_attr" else "graph_node_rows"
    columns = limits.features.get(tensor_name(name, floats))
    value = store.get(floats)
    if columns is not None:
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() != 2:
            problem(check_rows, f"{name}.{floats}", 1,
                    f"{floats} is {'missing' if value is None else kind_of(value)}, expected float [{rows}, "
                    f"{len(columns)}] (numerical columns: {', '.join(c.name for c in columns) or 'none'})")
        elif value.shape[1] != len(columns):
            problem(check_rows, f"{name}.{floats}", 1,
                    f"{floats} has {value.shape[1]} columns, expected {len(columns)} (numerical columns: "
                    f"{', '.join(c.name for c in columns) or 'none'}; categorical ones are in {categorical})")
    tops = limits.cardinalities(tensor_name(name, categorical))
    value = store.get(categorical)
    if tops is None:
        return
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 2:
        problem("graph_code_range", f"{name}.{categorical}", 1,
                f"{categorical} is {'missing' if value is None else kind_of(value)}, expected int64 [{rows}, "
                f"{len(tops)}]")
    elif value.shape[1] != len(tops):
        problem(check_rows, f"{name}.{categorical}", 1,
                f"{categorical} has {value.shape[1]} columns, expected {len(tops)}")
    elif value.numel():
        bad = (value < 0) | (value >= torch.tensor(tops, dtype=torch.int64))
        if bad.any():
            problem("graph_code_range", f"{name}.{categorical}", int(failing_rows(bad).sum()),
                    f"indices outside [0, cardinality) (cardinalities {list(tops)} per column) {positions(bad)}")


def _check_timesteps(store, name: str, max_timestep: int, problem: Problem) -> None:
    """graph_timestep_range: every timestep is within [0, max_timestep]."""
    timestep = store.get("timestep")
    if timestep is not None:
        bad = (timestep < 0) | (timestep > max_timestep)
        if bad.any():
            problem("graph_timestep_range", f"{name}.timestep", int(bad.sum()),
                    f"timesteps outside 0..{max_timestep} {positions(bad)}")


def badpoints_rules(limits: GraphLimits) -> GraphRules:
    """What badpoints' heterographs are held to beyond any graph's checks: edges in every edge type, node ids and
    raw ids, feature tensors as ``limits`` describe them (category indices inside their cardinalities), timesteps
    up to its last, multi-hot labels 0 or 1. No note of isolated nodes (every graph holds the whole lab-item
    dictionary) and no byte bound (the graph stage estimates a batch's memory itself: graph_memory)."""

    def node(store, node_type: str, count: int | None, problem: Problem) -> None:
        _check_features(store, node_type, count, NODE_TENSORS, limits, problem)
        _check_node_ids(store, node_type, count, problem)

    def edge(store, name: str, edges: int, problem: Problem) -> None:
        _check_timesteps(store, name, limits.max_timestep, problem)
        _check_features(store, name, edges, EDGE_TENSORS, limits, problem)

    return GraphRules(num_classes=2, isolated=False, require_edges=True, node=node, edge=edge)


def graph_problems(data: HeteroData, limits: GraphLimits, *, where: str) -> list[StageError]:
    """Every problem of one of badpoints' graphs (empty when it is sound); ``where`` names it, e.g. 'train/batch 3'.

    :func:`pyg_problems` under :func:`badpoints_rules`: the float tensors first, then each node type, then each
    edge type, one check after another; PyG's own ``validate()`` only on a graph without other problems."""
    return pyg_problems(data, badpoints_rules(limits), where=where, side="output")
