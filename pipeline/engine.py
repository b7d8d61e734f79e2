"""Where LABEVENTS' raw checks run: in this process (the default) or on a ``dask.distributed`` cluster.

The Dask engine cuts the table into row slices, runs the very same
:func:`pipeline.parse.check_part` on each slice on the workers, and gathers the
results back as data (failing lines and values, typed rows), which
:func:`pipeline.parse.combine_parts` turns into exactly what one process finds:
a failure in one slice never hides another's, and checks that need the whole
table (keys, foreign keys, stays) run after the gather, on the combined rows.

``LocalCluster`` by default (worker processes on loopback, bounded memory), or
an existing scheduler at an address.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd

from pipeline.parse import PartCheck, check_part, combine_parts

@dataclass(frozen=True)
class DaskEngine:
    """Checks slices of a table on a Dask cluster; ``partitions`` slices per table (default: two per worker)."""

    client: Any
    partitions: int

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck:
        slices = row_slices(frame, self.partitions)
        futures = self.client.map(check_part, [table] * len(slices), self.client.scatter(slices), pure=False,
                                  **settings)
        return combine_parts(self.client.gather(futures))


def row_slices(frame: pd.DataFrame, partitions: int) -> list[pd.DataFrame]:
    """``frame`` cut into at most ``partitions`` consecutive, near-equal row slices (at least one)."""
    count = max(1, min(int(partitions), len(frame)))
    bounds = np.linspace(0, len(frame), count + 1).round().astype(int)
    return [frame.iloc[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]


@contextlib.contextmanager
def dask_engine(scheduler: str | None = None, *, workers: int = 2, memory_limit: str = "4GB",
                partitions: int | None = None) -> Iterator[DaskEngine]:
    """A :class:`DaskEngine` on the cluster at ``scheduler``, or on a fresh loopback ``LocalCluster``."""
    from dask.distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if scheduler:
            client = stack.enter_context(Client(scheduler))
        else:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                host="127.0.0.1", dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        found = len(client.scheduler_info().get("workers", {})) or workers
        yield DaskEngine(client=client, partitions=partitions or 2 * found)
