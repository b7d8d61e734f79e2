"""The graph stage's tensors (the graphs themselves are described in the package's docstring): the edge rows sorted
once and sliced by offsets into one ``HeteroData`` per batch of admissions, per split, with no rescan per batch; the
name, kind and cardinality of every feature column from :func:`feature_columns` and :func:`graph_features`, the one
place the tensors take them from; each graph's memory estimate and its guard. Pure: no I/O."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from pipeline.stages.dedup import KEY, edge_key
from pipeline.stages.graph.options import NAME, Options
from schemas.errors import StageError
from schemas.fill import TENSOR_COLUMNS
from schemas.graph import (CATEGORICAL, EDGE, FEATURES, MARK, NUMERICAL, REVERSE, Column, GraphLimits,  # noqa: F401
                           graph_problems, tensor_bytes)
from schemas.raw import ADMISSION_CATEGORICALS
from schemas.split import SPLITS, split_codes
from schemas.task import LABEL

if TYPE_CHECKING:  # torch and PyG load when graphs are built, not when the stages are declared
    import torch
    from torch_geometric.data import HeteroData


LABITEM_FEATURES = ("FLUID_CODE", "CATEGORY_CODE")
CODE, Z = TENSOR_COLUMNS  # the edge rows' category code (edge_attr_cat) and z-score (edge_attr's first column)


@dataclass(frozen=True)
class GraphBatch:
    split: str
    batch: int
    data: HeteroData

    @property
    def where(self) -> str:
        return f"{self.split}/batch {self.batch}"


def admission_feature_columns(admissions: pd.DataFrame, *,
                              admission_features: tuple[str, ...] = Options.admission_features) -> list[str]:
    """The encoded admission columns that make up admission x_cat: those of ``admission_features`` the admissions
    have, in the order of ``ADMISSION_CATEGORICALS`` whatever the order given."""
    return [f"{column}_CODE" for column in ADMISSION_CATEGORICALS
            if column in admission_features and f"{column}_CODE" in admissions.columns]


def edge_feature_columns(edges: Any) -> list[str]:
    """The edge row columns that make up edge_attr: Z, then every mark a stage wrote (0/1 or -1/0/1 columns named
    ``CODE_*`` or ``Z_*``: scale's Z_BOUNDED, fill's Z_MISSING, ...), sorted by name: a stage adds an edge feature
    by writing such a column, and the manifest names it. CODE, the category, is edge_attr_cat's
    (``edges``: a frame, or anything with its ``columns``)."""
    marks = sorted(column for column in edges.columns
                   if any(column.startswith(f"{name}_") for name in TENSOR_COLUMNS))
    return [Z, *marks]


def graph_columns(edges: Any) -> list[str]:
    """The edge row columns :func:`build_graphs` reads (``edges``: a frame, or anything with its ``columns``)."""
    return ["SPLIT", *KEY, CODE, *edge_feature_columns(edges)]


def feature_columns(edges: Any, admissions: pd.DataFrame, *,
                    admission_features: tuple[str, ...] = Options.admission_features) -> dict[str, list[str]]:
    """The name of every column of each feature tensor (``schemas.graph.FEATURES``), in order: the float tensors (x,
    edge_attr) hold the numerical columns and marks, the int64 ones (x_cat, edge_attr_cat) the categorical
    columns. No admission or lab-item column is numerical: their x has no column."""
    return {"admission.x": [],
            "admission.x_cat": admission_feature_columns(admissions, admission_features=admission_features),
            "labitem.x": [],
            "labitem.x_cat": list(LABITEM_FEATURES),
            "edge_attr": edge_feature_columns(edges),
            "edge_attr_cat": [CODE]}


def graph_features(vocabularies, edges: Any, admissions: pd.DataFrame, *,
                   admission_features: tuple[str, ...] = Options.admission_features) -> dict[str, tuple[Column, ...]]:
    """Every feature column of :func:`feature_columns` with its kind and, for a categorical column, its
    cardinality from the fitted vocabularies (code 0, missing or unseen, and one code per entry): an admission
    column's vocabulary, FLUID's and CATEGORY's, and CODE's largest code of any lab item (codes count per item)."""
    sizes = dict(vocabularies.admission_)
    max_code = max((code for _, _, code in vocabularies.lab_values_), default=0)
    cardinality = {"FLUID_CODE": len(vocabularies.fluid_) + 1, "CATEGORY_CODE": len(vocabularies.category_) + 1,
                   CODE: max_code + 1}

    def column(name: str, tensor: str) -> Column:
        if tensor.endswith("_cat"):
            size = cardinality.get(name, len(sizes.get(name.removesuffix("_CODE"), ())) + 1)
            return Column(name, CATEGORICAL, size)
        return Column(name, NUMERICAL if name == Z else MARK)

    names = feature_columns(edges, admissions, admission_features=admission_features)
    return {tensor: tuple(column(name, tensor) for name in columns) for tensor, columns in names.items()}


def graph_limits(vocabularies, edges: Any, admissions: pd.DataFrame, *, max_timestep: int,
                 admission_features: tuple[str, ...] = Options.admission_features) -> GraphLimits:
    """The last timestep and every feature tensor's columns (:func:`graph_features`): what the guard holds each
    graph to."""
    return GraphLimits(max_timestep=int(max_timestep),
                       features=graph_features(vocabularies, edges, admissions, admission_features=admission_features))


def stream_graphs(parts: Iterable[pd.DataFrame], admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                  batch_size: int = Options.batch_size, labels: bool = Options.labels,
                  admission_features: tuple[str, ...] = Options.admission_features,
                  start: Mapping[str, int] | None = None
                  ) -> Iterator[GraphBatch]:
    """:func:`build_graphs` of edge rows that come in parts in (split, HADM_ID) order, every admission's rows in one
    part (the parts engine's): a batch is built once all its admissions were read, so a part and the rows of one
    unfinished batch are held, never all the rows. The graphs are those of :func:`build_graphs` on all the rows.

    ``start``: per split, the admissions in the batches before these rows (whole batches: a Dask worker builds a piece
    of them), so batches are numbered on from there."""
    # admissions of each split already in graphs (whole batches, but a split's last)
    done = {name: int((start or {}).get(name, 0)) for name in SPLITS}
    carry: pd.DataFrame | None = None
    for part in itertools.chain(parts, [None]):
        rows = carry if part is None else part if carry is None else pd.concat([carry, part])
        if rows is None or rows.empty:
            continue
        split = split_codes(rows["SPLIT"]).astype("int64")
        hadm = rows["HADM_ID"].to_numpy("int64")
        admitted = pd.DataFrame({"split": split, "hadm": hadm}).drop_duplicates().sort_values(["split", "hadm"])
        position = admitted.groupby("split").cumcount().to_numpy() + admitted["split"].map(
            dict(enumerate(done.values()))).to_numpy("int64")
        batch = position // batch_size
        held = np.zeros(len(admitted), dtype=bool)
        if part is not None:  # the last batch read may go on in the next part
            held = (admitted["split"].to_numpy() == admitted["split"].iloc[-1]) & (batch == batch[-1])
        ready = admitted[~held]
        first = {SPLITS[s]: done[SPLITS[s]] // batch_size for s in ready["split"].unique()}
        taken = pd.MultiIndex.from_arrays([split, hadm]).isin(pd.MultiIndex.from_frame(ready))
        if taken.any():
            yield from graph_batches(rows[taken], admissions, labitems, batch_size=batch_size, labels=labels,
                                     admission_features=admission_features, first_batch=first)
        for s, n in ready["split"].value_counts().items():
            done[SPLITS[s]] += int(n)
        carry = rows[~taken]


def build_graphs(edges: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                 batch_size: int = Options.batch_size, labels: bool = Options.labels,
                 admission_features: tuple[str, ...] = Options.admission_features,
                 first_batch: Mapping[str, int] | None = None
                 ) -> list[GraphBatch]:
    """One HeteroData per batch of ``batch_size`` admissions, per split, in a deterministic order (a split's
    batches numbered from its ``first_batch``, 0 by default: :func:`stream_graphs` builds them a few at a time)."""
    return list(graph_batches(edges, admissions, labitems, batch_size=batch_size, labels=labels,
                              admission_features=admission_features, first_batch=first_batch))


def graph_batches(edges: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                  batch_size: int = Options.batch_size, labels: bool = Options.labels,
                  admission_features: tuple[str, ...] = Options.admission_features,
                  first_batch: Mapping[str, int] | None = None
                  ) -> Iterator[GraphBatch]:
    """:func:`build_graphs`' graphs made one at a time, so a build that serialises each as it comes holds one
    graph's tensors, not those of every batch of a part."""
    items = labitems.sort_values("ITEMID")
    item_ids = items["ITEMID"].to_numpy("int64").copy()
    columns = feature_columns(edges, admissions, admission_features=admission_features)
    import torch

    item_x = torch.from_numpy(_block(items, columns["labitem.x"], "float32"))
    item_x_cat = torch.from_numpy(_block(items, columns["labitem.x_cat"], "int64"))
    numerical, categorical = columns["admission.x"], columns["admission.x_cat"]
    asked = [LABEL] if LABEL in admissions else []  # a task's label (else the next-timestep target, if any)
    by_hadm = admissions.set_index("HADM_ID").sort_index()[[*numerical, *categorical, *asked]]

    # Sorted once, as numpy columns (the frame's text columns are never gathered); dedup's output already
    # is in this order, which a stable sort keeps at little cost.
    order = np.argsort(edge_key(edges), kind="stable")
    hadm = edges["HADM_ID"].to_numpy("int64")[order]
    item_of_row = edges["ITEMID"].to_numpy("int64")[order]
    item = _item_nodes(item_ids, item_of_row, edges.index[order])
    attr = np.column_stack([edges[column].to_numpy("float64")[order]
                            for column in columns["edge_attr"]]).astype("float32")
    attr_cat = np.column_stack([edges[column].to_numpy("int64")[order] for column in columns["edge_attr_cat"]])
    timestep = edges["TIMESTEP"].to_numpy("int64")[order]
    # An admission's rows are contiguous (it has one split): its last timestep is the max over its run.
    starts = np.flatnonzero(np.r_[True, hadm[1:] != hadm[:-1]]) if len(hadm) else np.array([], dtype="int64")
    last = np.repeat(np.maximum.reduceat(timestep, starts), np.diff(np.r_[starts, len(hadm)])) \
        if len(hadm) else timestep
    split_code = split_codes(edges["SPLIT"])[order]

    split_bounds = np.searchsorted(split_code, np.arange(len(SPLITS) + 1))
    for s, name in enumerate(SPLITS):
        lo, hi = split_bounds[s], split_bounds[s + 1]
        if lo == hi:
            continue
        admitted = np.unique(hadm[lo:hi])  # sorted HADM_IDs of this split
        position = np.searchsorted(admitted, hadm[lo:hi])
        batch_of_edge = position // batch_size
        n_batches = int(batch_of_edge[-1]) + 1
        edge_bounds = lo + np.searchsorted(batch_of_edge, np.arange(n_batches + 1))
        for b in range(n_batches):
            e0, e1 = edge_bounds[b], edge_bounds[b + 1]
            nodes = admitted[b * batch_size:(b + 1) * batch_size]
            local = position[e0 - lo:e1 - lo] - b * batch_size
            admitted_rows = by_hadm.loc[nodes]
            yield GraphBatch(split=name, batch=(first_batch or {}).get(name, 0) + b, data=_graph(
                nodes=nodes, x=_block(admitted_rows, numerical, "float32"),
                x_cat=_block(admitted_rows, categorical, "int64"), item_ids=item_ids, item_x=item_x,
                item_x_cat=item_x_cat, source=local, target=item[e0:e1], attr=attr[e0:e1], attr_cat=attr_cat[e0:e1],
                timestep=timestep[e0:e1], last=last[e0:e1], labels=labels,
                task=_task_labels(admitted_rows) if asked else None))


def _task_labels(admitted: pd.DataFrame) -> np.ndarray:
    """The task's label of each admission node, as a float32 column (an admission in a graph is labelled: the task
    stage kept only its cohort's rows)."""
    label = admitted[LABEL]
    if label.isna().any():
        raise StageError(stage=NAME, side="input", check="graph_label_range", column=LABEL,
                         count=int(label.isna().sum()), failure_cases=pd.DataFrame({"line": []}), table="ADMISSIONS",
                         detail=f"HADM_ID {', '.join(map(str, label.index[label.isna()][:5]))} in a graph without "
                                "the task's label", advice="A bug in badpoints: the task stage keeps only labelled "
                                                           "admissions' rows")
    return label.astype(bool).to_numpy("float32").reshape(-1, 1)


def _item_nodes(item_ids: np.ndarray, item_of_row: np.ndarray, lines: pd.Index) -> np.ndarray:
    """Each edge's lab-item node (its position in ``item_ids``); an ITEMID among no node is an error naming the
    edges' ``lines``."""
    item = pd.Index(item_ids).get_indexer(item_of_row)
    if (item < 0).any():
        unknown = np.unique(item_of_row[item < 0])
        raise StageError(
            stage=NAME, side="input", check="graph_index_bounds", column="ITEMID", count=int((item < 0).sum()),
            failure_cases=pd.DataFrame({"line": lines[item < 0]}), table="LABEVENTS",
            detail=f"ITEMID {', '.join(map(str, unknown[:10]))} not among the lab-item nodes",
            advice="Every edge's ITEMID must be in the encoded D_LABITEMS; check the clean stage's item filter",
        )
    return item


def _block(rows: pd.DataFrame, columns: list[str], dtype: str) -> np.ndarray:
    """``columns`` of ``rows`` as one contiguous [rows, columns] array of ``dtype`` (no column: [rows, 0])."""
    return np.ascontiguousarray(rows[columns].to_numpy(dtype).reshape(len(rows), len(columns)))


def _graph(*, nodes: np.ndarray, x: np.ndarray, x_cat: np.ndarray, item_ids: np.ndarray, item_x: torch.Tensor,
           item_x_cat: torch.Tensor, source: np.ndarray, target: np.ndarray, attr: np.ndarray, attr_cat: np.ndarray,
           timestep: np.ndarray, last: np.ndarray, labels: bool, task: np.ndarray | None = None) -> HeteroData:
    import torch
    from torch_geometric.data import HeteroData

    data = HeteroData()
    data["admission"].num_nodes = len(nodes)
    data["labitem"].num_nodes = len(item_ids)
    data["admission"].x = torch.from_numpy(x)  # numerical columns (none: [N, 0])
    data["admission"].x_cat = torch.from_numpy(x_cat)  # category indices, int64
    data["admission"].node_id = torch.arange(len(nodes), dtype=torch.int64)  # what an Embedding indexes
    data["admission"].hadm_id = torch.from_numpy(nodes.astype("int64"))  # graph index -> HADM_ID
    data["labitem"].x = item_x.clone()
    data["labitem"].x_cat = item_x_cat.clone()
    data["labitem"].node_id = torch.arange(len(item_ids), dtype=torch.int64)  # the same items in every graph
    data["labitem"].itemid = torch.from_numpy(item_ids.copy())  # graph index -> ITEMID
    index = torch.from_numpy(np.vstack([source, target]).astype("int64"))
    edge_attr = torch.from_numpy(np.ascontiguousarray(attr))
    edge_attr_cat = torch.from_numpy(np.ascontiguousarray(attr_cat))
    steps = torch.from_numpy(timestep.astype("int64"))
    data[EDGE].edge_index = index
    data[EDGE].edge_attr = edge_attr
    data[EDGE].edge_attr_cat = edge_attr_cat
    data[EDGE].timestep = steps
    data[REVERSE].edge_index = index.flip(0).contiguous()
    data[REVERSE].edge_attr = edge_attr.clone()
    data[REVERSE].edge_attr_cat = edge_attr_cat.clone()
    data[REVERSE].timestep = steps.clone()
    if labels and task is not None:
        # A task's label per admission ([N, 1]); every edge was charted by its admission's prediction time.
        data["admission"].y = torch.from_numpy(np.ascontiguousarray(task))
        data[EDGE].is_history = torch.ones(len(timestep), dtype=torch.bool)
    elif labels:
        # Next-timestep target: the items measured at each admission's last timestep (multi-hot);
        # is_history marks the edges before it, the input a model may see when predicting it.
        at_last = timestep == last
        y = torch.zeros((len(nodes), len(item_ids)), dtype=torch.float32)
        y[torch.from_numpy(source[at_last].astype("int64")), torch.from_numpy(target[at_last].astype("int64"))] = 1.0
        label_step = torch.full((len(nodes),), -1, dtype=torch.int64)
        label_step[torch.from_numpy(source.astype("int64"))] = torch.from_numpy(last.astype("int64"))
        data["admission"].y = y
        data["admission"].y_timestep = label_step
        data[EDGE].is_history = torch.from_numpy(~at_last)
    return data


def memory_estimate(data: HeteroData, *, hidden: int, layers: int) -> dict[str, int]:
    """Bytes of the graph's tensors, and of a float32 GNN's activations and messages at ``hidden`` width."""
    tensors = tensor_bytes(data)
    nodes = sum(data[t].num_nodes for t in data.node_types)
    edges = sum(data[t].edge_index.shape[1] for t in data.edge_types)
    activations = 4 * hidden * layers * (nodes + edges)
    return {"tensors": int(tensors), "activations": int(activations), "total": int(tensors + activations)}


def check_graphs(graphs: list[GraphBatch], limits: GraphLimits) -> list:
    """Every problem of every graph, as StageErrors naming split, batch and edge type."""
    return [problem for g in graphs for problem in graph_problems(g.data, limits, where=g.where)]
