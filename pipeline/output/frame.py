"""A build's graphs in PyTorch Frame's layout: per node type a ``torch_frame.TensorFrame`` of its feature tensors
(``tf``; ``x_cat`` as ``stype.categorical``, ``x`` as ``stype.numerical``, a stype without columns left out, as
``TensorFrame`` requires), per edge type one of ``edge_attr_cat`` and ``edge_attr`` (``edge_tf``), and the
``col_stats`` of every column read from the manifest's ``features`` (fitted on the training split at build time:
:mod:`pipeline.stages.graph.stats`), so that ``torch_frame.nn.StypeWiseFeatureEncoder`` and RelBench's
``HeteroEncoder`` (a dict of TensorFrames and one of col_stats, by node type) take them as they are.

A categorical column's ``StatType.COUNT`` lists every index ``0 .. cardinality - 1`` in index order with its
training rows (PyTorch Frame lists the categories it saw, most frequent first, and maps each value to its position
there): position and index agree, and an index unseen in train still has its embedding. No index is -1, PyTorch
Frame's missing value: missing and unseen values are index 0. Marks are numerical columns here. The tensors are
shared with the graph, not copied.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch_frame
from torch_frame import TensorFrame
from torch_frame.data.stats import StatType

from schemas.graph import CATEGORICAL, EDGE_TENSORS, NODE_TENSORS

FRAME, EDGE_FRAME = "tf", "edge_tf"  # the attribute of a node type's and of an edge type's TensorFrame


def column_stats(column: Mapping[str, Any]) -> dict[StatType, Any]:
    """One column's ``col_stats`` as PyTorch Frame's encoders read them, from its entry in the manifest's
    ``features`` (a statistic the training split has no value for is NaN, as PyTorch Frame leaves it)."""
    stats = column["stats"]
    if column["kind"] == CATEGORICAL:
        return {StatType.COUNT: (list(range(int(column["cardinality"]))), [int(n) for n in stats["count"]])}

    def number(value: Any) -> float:
        return float("nan") if value is None else float(value)

    return {StatType.MEAN: number(stats["mean"]), StatType.STD: number(stats["std"]),
            StatType.QUANTILES: [number(q) for q in stats["quantiles"]]}


def _tensors(store: str, attributes: tuple[str, str]) -> tuple[str, str]:
    """The names features give a store's float and categorical tensors (``admission.x``; ``edge_attr``)."""
    floats, categorical = attributes
    return (floats, categorical) if floats == "edge_attr" else (f"{store}.{floats}", f"{store}.{categorical}")


def col_names(features: Mapping[str, list[dict]], store: str, attributes: tuple[str, str]
              ) -> dict[torch_frame.stype, list[str]]:
    """A store's ``col_names_dict``: the categorical columns, then the numerical ones (a stype with none left out)."""
    floats, categorical = _tensors(store, attributes)
    names = {torch_frame.categorical: [c["name"] for c in features[categorical]],
             torch_frame.numerical: [c["name"] for c in features[floats]]}
    return {stype: columns for stype, columns in names.items() if columns}


def col_stats(features: Mapping[str, list[dict]], store: str, attributes: tuple[str, str]
              ) -> dict[str, dict[StatType, Any]]:
    """A store's ``col_stats``: column name -> its statistics (:func:`column_stats`)."""
    return {column["name"]: column_stats(column) for tensor in _tensors(store, attributes)
            for column in features[tensor]}


def tensor_frame(floats: torch.Tensor, categorical: torch.Tensor,
                 names: Mapping[torch_frame.stype, list[str]]) -> TensorFrame:
    """A store's feature tensors as one TensorFrame (the same tensors, not copies)."""
    given = {torch_frame.categorical: categorical, torch_frame.numerical: floats}
    return TensorFrame(feat_dict={stype: given[stype] for stype in names},
                       col_names_dict={stype: list(columns) for stype, columns in names.items()},
                       num_rows=int(categorical.shape[0]))


class Frames:
    """What the manifest's ``features`` say of every store's columns in PyTorch Frame's terms: per node type its
    ``col_names_dict`` and ``col_stats`` (``col_names_dict``, ``col_stats_dict``: RelBench's shape), per edge type
    theirs (``edge_col_names_dict``, ``edge_col_stats_dict``); :meth:`attach` gives a graph its TensorFrames."""

    def __init__(self, features: Mapping[str, list[dict]], node_types: tuple[str, ...],
                 edge_types: tuple[tuple[str, str, str], ...]) -> None:
        self.col_names_dict = {t: col_names(features, t, NODE_TENSORS) for t in node_types}
        self.col_stats_dict = {t: col_stats(features, t, NODE_TENSORS) for t in node_types}
        self.edge_col_names_dict = {t: col_names(features, "__".join(t), EDGE_TENSORS) for t in edge_types}
        self.edge_col_stats_dict = {t: col_stats(features, "__".join(t), EDGE_TENSORS) for t in edge_types}

    def attach(self, data: Any) -> Any:
        """``data`` (a guarded graph) with ``tf`` on each node type and ``edge_tf`` on each edge type."""
        for node_type, names in self.col_names_dict.items():
            store = data[node_type]
            store[FRAME] = tensor_frame(store[NODE_TENSORS[0]], store[NODE_TENSORS[1]], names)
        for edge_type, names in self.edge_col_names_dict.items():
            store = data[edge_type]
            store[EDGE_FRAME] = tensor_frame(store[EDGE_TENSORS[0]], store[EDGE_TENSORS[1]], names)
        return data
