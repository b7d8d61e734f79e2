"""The graph stage's options (``[graph]``): batch size, labels, the admission columns of ``admission.x_cat``, and the
memory budget and model size its estimate uses."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.kernel.options import POSITIVE, Section, setting
from schemas.raw import ADMISSION_CATEGORICALS, KNOWN_AFTER_ADMISSION

NAME = "graph"


@dataclass(frozen=True)
class Options(Section):
    NAME = "graph"
    batch_size: int = setting(int, 128, low=1, doc="""
        Admissions per graph, per split, in HADM_ID order.""")
    labels: bool = setting(bool, True, doc="""
        Add the next-timestep target: admission.y, multi-hot over lab items at each admission's last timestep.""")
    admission_features: tuple[str, ...] = setting(list, tuple(c for c in ADMISSION_CATEGORICALS
                                                                if c not in KNOWN_AFTER_ADMISSION),
                                                  words=ADMISSION_CATEGORICALS, doc="""
        The admission columns whose category indices make admission.x_cat: any of those below and
        DISCHARGE_LOCATION (a column the data lacks is skipped), always in this order (DISCHARGE_LOCATION after
        ADMISSION_LOCATION), whatever the order written. By default every column known at admission.
        DISCHARGE_LOCATION is known only at discharge (MIMIC's DEAD/EXPIRED, HOSPICE): as a feature it leaks the
        outcome, and choosing it is a warning (check feature_known_after_admission). labitem.x_cat (FLUID,
        CATEGORY), edge_attr (the value's z-score, fill's indicators) and edge_attr_cat (its code) are all known
        when the lab is charted.""")
    hidden: int = setting(int, 64, low=1, high=1 << 16, note="at most 65536", doc="""
        Each batch's memory is estimated (tensors, and a float32 GNN's activations at this width and depth);
        above the budget it is a warning (graph_memory).""")
    layers: int = setting(int, 2, low=1, high=1 << 10, note="at most 1024")
    memory_budget_mb: float = setting(float, 1024.0, **POSITIVE)
    min_timesteps: int = setting(int, 1, low=1, doc="""
        Admissions with fewer distinct timesteps than this are left out of the graphs: their lab rows are
        quarantined (check below_min_timesteps) and the admission counted (check admission_below_min_timesteps).
        1 keeps every admission that has a kept lab. A next-timestep target needs history before its last
        timestep: set 2 for that (as the seed research code did), knowing it drops one-day admissions.""")
