"""The guard of any PyG graph: what every ``Data`` or ``HeteroData`` must satisfy, under the rules of its kind.

:func:`pyg_problems` walks a graph's stores as PyG's transforms do: every float tensor finite and, where the rules
bound them, none of its values but the labels above ``max_abs``; every edge index (``edge_index``, and
``edge_label_index`` where a link split put one) int64 of shape [2, E] and inside the node counts of its source and
target; every per-edge tensor with one row per edge, every per-node tensor with one row per node; the labels inside
``[0, num_classes)`` when their number is given (a note that they were not checked where the rules ask for it);
nodes in no edge counted (a note); the bytes of its tensors bounded (a warning); and PyG's own ``validate()``.
:class:`GraphRules` says what a kind of graph adds (badpoints' own: :func:`schemas.graph.badpoints_rules`). Each
problem is a :class:`StageError` of stage ``graph`` naming the store (node type, edge type, or ``data`` for the one
store of a ``Data``), the attribute and the first rows; the checks are declared in :mod:`schemas.graph`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from schemas.catalogue import ERROR, check_info
from schemas.errors import StageError

if TYPE_CHECKING:  # torch and PyG load when a graph is checked
    import torch
    from torch_geometric.data import Data, HeteroData


Problem = Callable[[str, str, int, str], None]  # (check, store.attribute, count, detail): one problem, recorded
# checks about a whole store or graph: a count, no failing rows
WHOLE = ("graph_isolated_nodes", "graph_bytes", "graph_labels_unchecked")
# A Data's tensors that hold one row per node, by name, as PyG's storage reads them (its N_KEYS), and those of
# one row per edge besides the names that start with "edge" (its E_KEYS).
NODE_KEYS = frozenset({"x", "feat", "pos", "batch", "node_type", "n_id"})
EDGE_KEYS = frozenset({"e_id"})
# Tensors of no row per node or edge: a batch's pointers and a loader's seeds (a row per graph or seed), a sparse
# adjacency (a row per node it points from or into).
NOT_PER_ROW = frozenset({"ptr", "input_id", "seed_time", "adj", "adj_t"})


@dataclass(frozen=True)
class GraphRules:
    """What a kind of graph is held to beyond what every PyG graph must satisfy.

    ``num_classes``: the labels (the attribute ``label`` of any store) are whole numbers in ``[0, num_classes)``,
    unchecked when None (a note says so, where ``unchecked_labels``); ``max_abs``: every float tensor but the
    labels holds no finite value above it in magnitude, none when None; ``max_bytes``: a warning above that many
    bytes of tensors, none when None;
    ``isolated``: nodes in no edge are a note; ``require_edges``: an edge type without edges is an error
    (``graph_empty``); ``node`` and ``edge``: the kind's own checks of a node store (after its rows:
    ``(store, node_type, num_nodes, problem)``) and of an edge store (after its rows: ``(store, name, edges,
    problem)``)."""

    num_classes: int | None = None
    label: str = "y"
    max_abs: float | None = None
    unchecked_labels: bool = False
    max_bytes: int | None = None
    isolated: bool = True
    require_edges: bool = False
    node: Callable[[Any, str, int | None, Problem], None] | None = None
    edge: Callable[[Any, str, int, Problem], None] | None = None


ANY_GRAPH = GraphRules()  # what every PyG graph must satisfy, with no label range and no byte bound


def _store_name(key: str | tuple[str, str, str]) -> str:
    return "__".join(key) if isinstance(key, tuple) else key


def failing_rows(mask: torch.Tensor) -> torch.Tensor:
    """Per row (the first dimension), whether any of its values fails; a scalar is one row."""
    return mask.reshape(mask.shape[0] if mask.dim() else 1, -1).any(dim=1)


def positions(mask: torch.Tensor, cap: int = 10) -> str:
    import torch

    where = torch.nonzero(failing_rows(mask)).flatten()
    shown = ", ".join(str(int(i)) for i in where[:cap])
    more = f" (+{len(where) - cap} more)" if len(where) > cap else ""
    return f"at rows {shown}{more}"


def kind_of(value) -> str:
    """A tensor's dtype and shape ('int32 [16]'), or the type of what is not a tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    return type(value).__name__


def _rows(value: torch.Tensor) -> int:
    return value.shape[0] if value.dim() else 0


def _stored(value: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The dense tensors a tensor is held in: itself, or a sparse tensor's indices and values (its values last)."""
    import torch

    if value.layout == torch.strided:
        return (value,)
    if value.layout == torch.sparse_coo:
        return value._indices(), value._values()
    if value.layout in (torch.sparse_csr, torch.sparse_bsr):
        return value.crow_indices(), value.col_indices(), value.values()
    return value.ccol_indices(), value.row_indices(), value.values()


def tensor_bytes(data: Data | HeteroData) -> int:
    """The bytes of a graph's tensors: every store's, each counted by its elements (a view by what it shows, a
    sparse tensor by its indices and values)."""
    import torch

    return int(sum(part.numel() * part.element_size() for store in data.stores for value in store.values()
                   if isinstance(value, torch.Tensor) for part in _stored(value)))


def size_text(count: int) -> str:
    """Bytes in binary units, the one way badpoints writes a size (tensors, the cache): '512 B', '3.2 MiB'."""
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"


def pyg_problems(data: Data | HeteroData, rules: GraphRules = ANY_GRAPH, *, where: str | None = None,
                 side: str = "input") -> list[StageError]:
    """Every problem of any PyG graph (a ``Data`` or a ``HeteroData``) under ``rules``, in the order they are
    checked: float tensors, node stores, edge stores, labels elsewhere, isolated nodes, bytes; PyG's own
    ``validate()`` only on a graph no other check found an error in. ``where`` names the graph in each problem
    (its table); ``side`` is ``input`` for a graph handed in, ``output`` for one a build made. The graph is not
    changed."""
    problems: list[StageError] = []

    def problem(check: str, store: str, count: int, detail: str) -> None:
        problems.append(StageError(
            stage="graph", side=side, check=check, column=store, count=count,
            failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=where,
            detail=detail, advice=check_info(check).advice, whole_file=check in WHOLE,
        ))

    with warnings.catch_warnings():  # PyG warns where it guesses a node count; the checks say what is wrong
        warnings.simplefilter("ignore")
        _Walk(data, rules, problem).run()
        if not any(check_info(p.check).severity == ERROR for p in problems):
            try:
                data.validate(raise_on_error=True)
            except ValueError as exc:
                problem("graph_pyg", "graph", 1, str(exc).splitlines()[0][:300])
    return problems


class _Walk:
    """One walk over a graph's stores, as PyG's transforms walk them (``node_stores``, ``edge_stores``): a
    ``Data`` is one store, both its nodes and its edges; a ``HeteroData`` has a store per node and edge type
    beside its global one. Each problem found is handed to ``problem``."""

    def __init__(self, data: Data | HeteroData, rules: GraphRules, problem: Problem) -> None:
        from torch_geometric.data import HeteroData

        self.data, self.rules, self.problem = data, rules, problem
        self.hetero = isinstance(data, HeteroData)
        self.linked: list[tuple[torch.Tensor, str, str]] = []  # sound edge_index, source and target store names
        self.unsound: set[str] = set()  # node stores an unusable edge_index points into

    def run(self) -> None:
        self.finite()
        for store in self.data.node_stores:
            self.node_store(store)
        for store in self.data.edge_stores:
            self.edge_store(store)
        self.other_labels()
        if self.rules.isolated:
            self.isolated()
        if self.rules.max_bytes is not None:
            self.bytes()

    def name(self, store) -> str:
        key = store._key
        return _store_name(key) if key is not None else ("global" if self.hetero else "data")

    def finite(self) -> None:
        """graph_finite: every float tensor of every store (the graph's own, each node and edge type's) is finite;
        graph_magnitude: but for the labels, none of its finite values is above the rules' ``max_abs``."""
        import torch

        bound = self.rules.max_abs
        for store in self.data.stores:
            name = self.name(store)
            for attr, value in store.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    values = _stored(value)[-1]  # a sparse tensor's rows: those of its values
                    finite = torch.isfinite(values)
                    bad = ~finite
                    if bad.any():
                        self.problem("graph_finite", f"{name}.{attr}", int(failing_rows(bad).sum()),
                                     f"{int(bad.sum())} non-finite values {positions(bad)}")
                    if bound is None or attr == self.rules.label:
                        continue
                    big = finite & (values.abs() > bound)
                    if big.any():
                        self.problem("graph_magnitude", f"{name}.{attr}", int(failing_rows(big).sum()),
                                     f"{int(big.sum())} value{'s' * (int(big.sum()) != 1)} with |value| "
                                     f"above {bound:g} (max_abs) "
                                     f"{positions(big)}")

    def node_store(self, store) -> None:
        """A node store: its per-node tensors' rows, the rules' own node checks, its labels."""
        name, count = self.name(store), store.num_nodes
        self.node_rows(store, name, count)
        if self.rules.node is not None:
            self.rules.node(store, name, count, self.problem)
        self.labels(store, name)

    def node_rows(self, store, name: str, count: int | None) -> None:
        """graph_node_rows: every tensor of a node type has one row per node; in a Data, the tensors named as
        per-node, and its label one per node, per graph or per edge."""
        import torch

        for attr, value in store.items():
            if not isinstance(value, torch.Tensor) or attr in NOT_PER_ROW:
                continue
            if not self.hetero and attr == "y":
                index = store.get("edge_index")
                edges = index.shape[-1] if isinstance(index, torch.Tensor) and index.dim() == 2 else None
                if value.dim() == 0 or value.shape[0] in (count, getattr(self.data, "num_graphs", None) or 1, edges):
                    continue
            elif not self.hetero and not _per_node(attr):
                continue
            if value.dim() == 0 or value.shape[0] != count:
                rows = _rows(value)
                self.problem("graph_node_rows", f"{name}.{attr}", abs(rows - (count or 0)) or 1,
                             f"{attr} has {rows} rows for {count} nodes")

    def labels(self, store, name: str) -> None:
        """graph_label_range: the labels are whole numbers in [0, num_classes)."""
        import torch

        y, classes = store.get(self.rules.label), self.rules.num_classes
        if classes is None and self.rules.unchecked_labels and isinstance(y, torch.Tensor):
            self.problem("graph_labels_unchecked", f"{name}.{self.rules.label}", 1,
                         f"{self.rules.label} not checked against a number of classes: none was given "
                         "(num_classes; badpoints check --num-classes)")
        if classes is None or not isinstance(y, torch.Tensor) or y.is_complex() or y.layout != torch.strided:
            return
        y = y.to(torch.int64) if y.dtype == torch.bool else y
        inside = (y >= 0) & (y < classes)
        bad = ~(inside & (y == torch.round(y))) if y.is_floating_point() else ~inside
        if bad.any():
            what = "not 0 or 1" if classes == 2 else f"outside 0..{classes - 1}"
            self.problem("graph_label_range", f"{name}.{self.rules.label}", int(failing_rows(bad).sum()),
                         f"labels {what} {positions(bad)}")

    def other_labels(self) -> None:
        """The labels of a HeteroData's global store and edge stores (a graph's class, an edge's label)."""
        if self.hetero:
            for store in (self.data.stores[0], *self.data.edge_stores):  # stores[0]: the global store
                self.labels(store, self.name(store))

    def endpoints(self, store) -> tuple[str, str]:
        """The names of the node stores an edge store's index points from and into."""
        if not self.hetero:
            return "data", "data"
        source, _, target = store._key
        return source, target

    def edge_store(self, store) -> None:
        """An edge store: its edge indices, its per-edge tensors' rows, the rules' own edge checks."""
        import torch

        name = self.name(store)
        tensors = [attr for attr, value in store.items() if isinstance(value, torch.Tensor)]
        if "edge_index" not in store and any(key in store for key in ("adj", "adj_t")):
            self.unsound |= set(self.endpoints(store))  # its nodes' edges are not counted here
            return  # edges held as a sparse adjacency (PyG's ToSparseTensor), not as an index
        if not self.hetero and "edge_index" not in store and not any(_per_edge(attr) for attr in tensors):
            return  # a Data without edges (a point cloud)
        edges = self.edge_index(store, "edge_index", name)
        if edges is None:
            return
        counts = {"edge_index": edges}
        for key in tensors:
            if key != "edge_index" and _is_index(key):
                counts[key] = self.edge_index(store, key, name)
        self.edge_rows(store, name, counts)
        if self.rules.edge is not None:
            self.rules.edge(store, name, edges, self.problem)

    def edge_index(self, store, key: str, name: str) -> int | None:
        """graph_edge_index, graph_empty and graph_index_bounds: an edge index is int64 [2, E], has edges (where
        the rules require them), and points at nodes the graph has. The number of its edges E, or None when the
        store's tensors cannot be checked against it (no usable index, or a node type the graph lacks)."""
        import torch

        index = store.get(key)
        source, target = self.endpoints(store)
        if not isinstance(index, torch.Tensor) or index.dtype != torch.int64 or index.dim() != 2 or index.shape[0] != 2:
            shape = "missing" if index is None else kind_of(index)
            self.problem("graph_edge_index", f"{name}.{key}", 1, f"{key} is {shape}, not int64 [2, E]")
            self.unsound |= {source, target}
            return None
        edges = index.shape[1]
        if edges == 0 and key == "edge_index" and self.rules.require_edges:
            self.problem("graph_empty", f"{name}.{key}", 1, "no edges")
        missing = [t for t in (source, target) if self.hetero and t not in self.data.node_types]
        if missing:
            self.problem("graph_index_bounds", f"{name}.{key}", 1,
                         f"indices into node type(s) {', '.join(missing)} that the graph does not have")
            return None
        sound = True
        for row, node_type in ((0, source), (1, target)):
            nodes = (self.data[node_type].num_nodes if self.hetero else self.data.num_nodes) or 0
            bad = (index[row] < 0) | (index[row] >= nodes)
            if bad.any():
                sound = False
                whose = f"{node_type} nodes" if self.hetero else "the graph's nodes"
                self.problem("graph_index_bounds", f"{name}.{key}", int(bad.sum()),
                             f"{int(bad.sum())} {'source' if row == 0 else 'target'} indices outside 0..{nodes - 1} "
                             f"({whose}) {positions(bad)}")
        if key == "edge_index" and sound:
            self.linked.append((index, source, target))
        elif key == "edge_index":
            self.unsound |= {source, target}
        return edges

    def edge_rows(self, store, name: str, counts: dict[str, int | None]) -> None:
        """graph_edge_rows: every per-edge tensor has one row per edge of its index: ``edge_label`` and the other
        names of ``edge_label_index``'s prefix one per column of that index, the rest one per edge of
        ``edge_index``. In a HeteroData every tensor of an edge store is per edge; in a Data, those named so."""
        import torch

        for attr, value in store.items():
            if not isinstance(value, torch.Tensor) or _is_index(attr) or attr in NOT_PER_ROW:
                continue
            if not self.hetero and not _per_edge(attr):
                continue
            key = _index_of(attr, counts)
            edges = counts[key]
            if edges is None:
                continue
            if value.dim() == 0 or value.shape[0] != edges:
                rows = _rows(value)
                of = "" if key == "edge_index" else f" of {key}"
                self.problem("graph_edge_rows", f"{name}.{attr}", abs(rows - edges) or 1,
                             f"{attr} has {rows} rows for {edges} edges{of}")

    def isolated(self) -> None:
        """graph_isolated_nodes: per node store, the nodes no sound edge_index names as source or target."""
        import torch

        for store in self.data.node_stores:
            name, count = self.name(store), store.num_nodes
            if not count or name in self.unsound:
                continue
            seen = torch.zeros(count, dtype=torch.bool)
            for index, source, target in self.linked:
                for row, node_type in ((0, source), (1, target)):
                    if node_type == name:
                        seen[index[row]] = True
            alone = ~seen
            if alone.any():
                self.problem("graph_isolated_nodes", name, int(alone.sum()),
                             f"{int(alone.sum())} of {count} nodes in no edge, {positions(alone)}")

    def bytes(self) -> None:
        """graph_bytes: the graph's tensors hold at most ``max_bytes``."""
        total, bound = tensor_bytes(self.data), self.rules.max_bytes
        if total > bound:
            self.problem("graph_bytes", "graph", 1,
                         f"{size_text(total)} of tensors ({total:,} bytes), above max_bytes {size_text(bound)}")


def _is_index(key: str) -> bool:
    """An edge index: ``edge_index``, or another index of edges such as ``edge_label_index``."""
    return key.startswith("edge") and key.endswith("index")


def _per_edge(key: str) -> bool:
    """A Data's tensor of one row per edge, by its name."""
    return (key.startswith("edge") and not _is_index(key)) or key in EDGE_KEYS


def _per_node(key: str) -> bool:
    """A Data's tensor of one row per node, by its name: PyG's node keys, a name with 'node', a node mask."""
    return key in NODE_KEYS or "node" in key or (key.endswith("_mask") and not key.startswith("edge"))


def _index_of(attr: str, counts: dict[str, int | None]) -> str:
    """The index whose edges ``attr`` has a row for: the longest whose prefix its name starts with
    (``edge_label`` -> ``edge_label_index``), else ``edge_index``."""
    prefixes = [key for key in counts if key != "edge_index" and attr.startswith(key.removesuffix("_index"))]
    return max(prefixes, key=len) if prefixes else "edge_index"
