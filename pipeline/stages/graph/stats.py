"""The training split's statistics of every feature column, as PyTorch Frame's encoders read them (a column's
``col_stats``): per categorical column the training rows of each index (``count``, every index from 0 to its
cardinality, so an index unseen in train still has its embedding), per numerical column and mark the ``mean``, the
``std`` (population, as ``numpy.std``) and the ``quantiles`` 0, 0.25, 0.5, 0.75 and 1 (``numpy.quantile``'s linear
method) of its training values, exactly as ``torch_frame.data.stats.compute_col_stats`` computes them from the same
values (up to the order a float sum is added in).

Fitted on train only, as every fit is: the training split's edges (each part of the edge rows counted apart, the
counts added up: :func:`edge_counts`, :func:`add_counts`), the admissions of the training graphs, and the lab-item
dictionary (each graph holds it whole: counted once). A float column's counts are its distinct values (as float32,
the graphs' float type) with their rows, so the parts add up exactly and the quantiles are those of every value.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from schemas.graph import CATEGORICAL, EDGE_TENSORS, Column

QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)  # what PyTorch Frame's StatType.QUANTILES holds

# Per tensor, per column: a categorical column's rows per index (int64 [cardinality]); a float column's distinct
# values, sorted (float32), and their rows (int64).
Counts = dict[str, dict[str, Any]]


def count_column(values: np.ndarray, column: Column) -> Any:
    """One column's counts (see :data:`Counts`). An index outside ``[0, cardinality)`` is not counted: the graph
    guard reports it (graph_code_range)."""
    if column.kind == CATEGORICAL:
        values = np.asarray(values, dtype="int64")
        inside = (values >= 0) & (values < column.cardinality)
        return np.bincount(values[inside], minlength=column.cardinality).astype("int64")
    distinct, rows = np.unique(np.asarray(values, dtype="float32"), return_counts=True)
    return distinct, rows.astype("int64")


def count_frame(rows: pd.DataFrame, features: Mapping[str, tuple[Column, ...]], tensors: Iterable[str]) -> Counts:
    """The counts of ``tensors``' columns over ``rows``, each column read as the graphs hold it (a float column
    through float64 to float32, a categorical one as int64)."""
    return {tensor: {column.name: count_column(rows[column.name].to_numpy(
        "int64" if column.kind == CATEGORICAL else "float64"), column) for column in features[tensor]}
        for tensor in tensors}


def edge_counts(part: pd.DataFrame, features: Mapping[str, tuple[Column, ...]]) -> Counts:
    """One part of the edge rows' share of the edge columns' counts: its training rows (every edge row is one
    did-edge of its split's graphs). Parts add up (:func:`add_counts`)."""
    return count_frame(part[(part["SPLIT"] == "train").to_numpy()], features, EDGE_TENSORS)


def _add(one: Any, other: Any) -> Any:
    if isinstance(one, np.ndarray):
        return one + other
    distinct, inverse = np.unique(np.concatenate([one[0], other[0]]), return_inverse=True)
    rows = np.bincount(inverse, weights=np.concatenate([one[1], other[1]]), minlength=len(distinct))
    return distinct, rows.astype("int64")


def add_counts(parts: Iterable[Counts]) -> Counts:
    """The counts of all the rows from those of parts that share no row."""
    total: Counts = {}
    for part in parts:
        for tensor, columns in part.items():
            held = total.setdefault(tensor, {})
            for name, counts in columns.items():
                held[name] = counts if name not in held else _add(held[name], counts)
    return total


def _lerp(a: float, b: float, t: float) -> float:
    """``numpy.quantile``'s linear interpolation between two neighbouring values, as numpy computes it."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def column_stats(counts: Any, column: Column) -> dict[str, Any]:
    """A column's statistics from its counts: ``count`` (rows per index) for a categorical column; ``mean``,
    ``std`` and ``quantiles`` for a float one (None for each when the training split has no row of it, where
    PyTorch Frame gives NaN)."""
    if column.kind == CATEGORICAL:
        return {"count": [int(n) for n in counts]}
    distinct, rows = counts
    n = int(rows.sum())
    if n == 0:
        return {"mean": None, "std": None, "quantiles": [None] * len(QUANTILES)}
    values, weights = distinct.astype("float64"), rows.astype("float64")
    mean = float(np.sum(values * weights) / n)
    std = float(np.sqrt(np.sum(weights * (values - mean) ** 2) / n))  # centred: two passes over the distinct values
    ends = np.cumsum(rows)  # the sorted rows' position after each distinct value

    def at(position: int) -> float:  # the value at a position of the sorted training values
        return float(values[np.searchsorted(ends, position, side="right")])

    quantiles = []
    for q in QUANTILES:
        virtual = n * q + (1 + q * (1 - 1 - 1)) - 1  # numpy's virtual index of the linear method: (n - 1) q
        below = int(np.floor(virtual))
        if virtual >= n - 1:
            quantiles.append(at(n - 1))
        else:
            quantiles.append(_lerp(at(below), at(below + 1), virtual - below))
    return {"mean": mean, "std": std, "quantiles": quantiles}


def feature_stats(features: Mapping[str, tuple[Column, ...]], counts: Counts) -> dict[str, list[dict[str, Any]]]:
    """Every feature column as the manifest's ``features`` records it: its name, kind, cardinality (categorical
    columns) and training statistics (``stats``, from ``counts``)."""
    described = {}
    for tensor, columns in features.items():
        described[tensor] = [{"name": column.name, "kind": column.kind,
                              **({"cardinality": column.cardinality} if column.kind == CATEGORICAL else {}),
                              "stats": column_stats(counts[tensor][column.name], column)} for column in columns]
    return described
