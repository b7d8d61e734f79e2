"""What the engines share (what an engine is, :class:`pipeline.kernel.engine.Engine`, is the kernel's): a link run
on a frame, rows picked and put back in row order, steps added up over parts, errors carried as data, results read a
few tasks ahead. This module names no engine and no stage; the engines by name, their options and the choice
``--engine auto`` makes are :mod:`pipeline.engines.registry`'s.
"""

from __future__ import annotations

import collections
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from pipeline.kernel.quarantine import Kept, Step
from pipeline.kernel.calls import Link, Linked
from schemas.errors import StageError



def run_link(link: Link, frame: pd.DataFrame) -> tuple[Linked, pd.DataFrame]:
    """One link on ``frame``: what it made, and the rows it hands on (on an error, the rows before the call)."""
    counts = tuple(count(frame) for count in link.counts)
    kept: list[Kept | None] = []
    for call in link.calls:
        try:
            done = call(frame)
        except StageError as error:
            return Linked(counts=counts, kept=tuple(kept), error=error), frame
        kept.append(replace(done, frame=None) if isinstance(done, Kept) else None)  # no frame kept but the last
        frame = done.frame if isinstance(done, Kept) else done
    return Linked(counts=counts, kept=tuple(kept), picks=tuple(pick(frame) for pick in link.picks),
                  rows=len(frame), tallies=tuple(tally(frame) for tally in link.tallies)), frame


def picked(pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None, args: tuple, kwargs: dict,
           frame: pd.DataFrame) -> pd.DataFrame:
    """``pick(frame, *args, **kwargs)`` (``frame`` itself without one), only ``columns`` when given."""
    rows = frame if pick is None else pick(frame, *args, **kwargs)
    return rows if columns is None else rows[list(columns)]


def add_steps(parts: Sequence[tuple[Step, ...]]) -> tuple[Step, ...]:
    """The steps of a stage over all the rows from its steps on each part (the same steps, in the same order)."""
    names = [tuple((s.table, s.stage, s.step) for s in steps) for steps in parts]
    if len(set(names)) != 1:
        raise RuntimeError(f"the parts took different steps: {sorted(set(names))}")
    return tuple(replace(step, **{count: sum(getattr(steps[n], count) for steps in parts)
                                  for count in ("rows_in", "rows_out", "quarantined", "merged", "clipped")})
                 for n, step in enumerate(parts[0]))


def in_row_order(frames: Sequence[pd.DataFrame], order: pd.Index | None) -> pd.DataFrame:
    """``frames`` (rows of the frame whose source lines were ``order``, in that order) as one frame in that order
    (``order`` None: the lines were increasing)."""
    whole = pd.concat(list(frames))
    if order is None:
        return whole.iloc[np.argsort(whole.index.to_numpy(), kind="stable")]
    return whole.iloc[np.argsort(order.get_indexer(whole.index), kind="stable")]


def error_as_data(error: StageError) -> dict:
    """A :class:`StageError` as its fields: what a worker hands back (an error is carried, never raised across
    processes), to be raised again here as ``StageError(**data)``."""
    return dict(stage=error.stage, side=error.side, check=error.check, column=error.column, count=error.count,
                failure_cases=error.failure_cases, table=error.table, detail=error.detail, advice=error.advice)


def ahead_of_results(submit: Callable[[Any], Any], items: Iterable[Any], *, ahead: int) -> Iterator[Any]:
    """The results of ``submit(item)`` (a future) in the items' order, at most ``ahead`` tasks sent before their
    results are read: the workers stay busy, and neither they nor this process hold every part's result at once.
    Tasks not yet read are cancelled when the reader stops (a stage error)."""
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append(submit(item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()

