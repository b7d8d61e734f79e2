"""The MEDS stage (``meds``), declared on the kernel: its fit reads every shard where the engine works (a partial
each: :func:`pipeline.meds.shards.read_shard`), gathers the partials and puts them together
(:func:`pipeline.meds.combine.combine`); its checks are ``schemas/meds.py``'s, run by pandera on the small tables the
fit gives (:mod:`pipeline.meds.checks`); its report hooks draw its ledgers (:mod:`pipeline.meds.view`).

A MEDS run's order (:data:`ORDER`) is reading, then this stage: the report, its colours and the progress read it,
as a lab run's read ``pipeline.flow.ORDER``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from pipeline.kernel.calls import Fit
from pipeline.kernel.stage import Order, Stage
from pipeline.meds import view
from pipeline.meds.combine import Combined, combine
from pipeline.meds.shards import ShardPartial, read_shard
from pipeline.reading.locate import LOAD
from schemas.meds import STAGE as NAME


@dataclass(frozen=True)
class Shard:
    """One shard to read: its path, its name (``train/0``) and which of its rows MEDS-Transforms fits on (all: a
    train/ shard; none; or the train subjects of subject_splits.parquet, their ids)."""

    path: Path
    name: str
    fit: bool | np.ndarray


def read(shard: Shard, *, bound: float, vocab: dict[int, str] | None = None) -> ShardPartial:
    """The fit's partial: one shard read into its :class:`ShardPartial` (``bound``: [raw] valuenum_abs_bound, or for
    a folder normalization wrote [scale] warn_bound, its codes named by ``vocab``)."""
    return read_shard(shard.path, shard.name, fit=shard.fit, bound=bound, vocab=vocab)


def gathered(partials: Iterable[ShardPartial | tuple[ShardPartial, ...]]) -> tuple[ShardPartial, ...]:
    """The fit's combine: partials (or partials gathered already) as one tuple by shard name. MEDS-Transforms adds
    its float32 sums in its own shard order, so the partials are put together only at the end
    (:func:`combined`), where that order is known."""
    flat = [p for item in partials for p in (item if isinstance(item, tuple) else (item,))]
    return tuple(sorted(flat, key=lambda p: p.name))


def combined(partials: tuple[ShardPartial, ...]) -> Combined:
    """The fit's finish: every readable shard's partial put together (:func:`pipeline.meds.combine.combine`)."""
    return combine(partials)


def read_all(shards: Iterable[Shard], *, bound: float, vocab: dict[int, str] | None = None) -> Combined:
    """The whole fit in this process: every shard read, gathered and put together."""
    return combined(gathered(read(shard, bound=bound, vocab=vocab) for shard in shards))


STAGE = Stage(NAME, colour="#1f77b4", progress=("read shards", "check"),
              fit=Fit(whole=read_all, partial=read, combine=gathered, finish=combined, state=Combined, saved_as=NAME),
              summary=view.summary, sections=view.ledgers)
ORDER = Order((STAGE,), before=(LOAD,))
"""A MEDS run's order: reading the shards, then the MEDS stage."""
