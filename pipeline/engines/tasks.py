"""A part's work as one function of its file, which a worker runs as a task (:class:`PartsEngine` calls it here,
one part at a time, or in its worker processes; :class:`DaskEngine` sends it to a cluster's worker): the links of
a chain (:func:`chain_part`), a raw block's check (:func:`block_part`), a call (a fit's partial result among them)
or a pick of a part (:func:`call_part`, :func:`pick_part`). What it makes comes back as data, a
:class:`StageError` included."""

from __future__ import annotations

import copyreg
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Sequence

import pandas as pd

from pipeline.engines.base import error_as_data, picked, run_link
from pipeline.engines.stored import read_part
from pipeline.kernel.quarantine import Step
from pipeline.kernel.handed import value_of, write_part
from schemas.guard import trusted_chain, vouch


@dataclass(frozen=True)
class LinkDone:
    """What one link made of one part, as data: counts, each call's (quarantine, steps) or None, picks, rows."""

    counts: tuple[Any, ...] = ()
    kept: tuple[tuple[pd.DataFrame, tuple[Step, ...]] | None, ...] = ()
    picks: tuple[pd.DataFrame, ...] = ()
    rows: int = 0
    tallies: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ChainDone:
    """What a chain made of one part: per link its :class:`LinkDone`; the rows written, or (link, call, error)."""

    links: tuple[LinkDone, ...] = ()
    rows: int = 0
    columns: tuple[str, ...] = ()
    partials: tuple[Any, ...] = ()
    error: tuple[int, int, dict] | None = None


def chain_part(paths: tuple[Any, Path], *, work: Any, schema: type | None) -> ChainDone:
    """The links (and the fits' partial results, of the last link's rows) on the part at ``paths[0]``, vouched
    for with ``schema``; the rows written to ``paths[1]``. Each call's output goes straight to the next call (a
    trusted chain: its guard passed it already)."""
    links, partials = work
    source, target = paths
    done = []
    with trusted_chain():
        frame = vouch(read_part(source), schema)
        for n, link in enumerate(links):
            linked, frame = run_link(link, frame)
            done.append(LinkDone(counts=linked.counts, picks=linked.picks, rows=linked.rows, tallies=linked.tallies,
                                 kept=tuple(None if k is None else (k.quarantine, k.steps) for k in linked.kept)))
            if linked.error is not None:
                return ChainDone(links=tuple(done), error=(n, len(linked.kept), error_as_data(linked.error)))
        fitted = tuple(partial(frame) for partial in partials)
    write_part(frame, target)
    return ChainDone(links=tuple(done), rows=len(frame), columns=tuple(frame.columns), partials=fitted)


def block_part(path: Path, *, call: Callable[..., Any], kwargs: dict) -> Any:
    """``call(block, **kwargs)`` of the block handed over at ``path`` (which the engine deletes once it has the
    result: a task run again finds it)."""
    return call(read_part(path), **kwargs)


def call_part(source: Any, *, call: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
              columns: list[str] | None = None) -> Any:
    """``call`` of a part: only ``columns`` read when given, else those ``call`` declares it reads (all without);
    each argument as handed, or the value the :class:`pipeline.kernel.handed.Shared` handed names."""
    args = tuple(map(value_of, args))
    if columns is not None:
        return call(read_part(source, columns), *args, **(kwargs or {}))
    return call(read_part(source, getattr(call, "reads", None), present=True), *args, **(kwargs or {}))


def pick_part(source: Any, *, pick: Callable[..., pd.DataFrame] | None, columns: Sequence[str] | None,
              args: tuple, kwargs: dict) -> pd.DataFrame:
    """Rows picked from a part: only ``columns`` read when given, else those ``pick`` declares it reads (its
    arguments as :func:`call_part`'s)."""
    args = tuple(map(value_of, args))
    if columns is not None:
        return picked(pick, columns, args, kwargs, read_part(source, list(columns)))
    return picked(pick, columns, args, kwargs, read_part(source, getattr(pick, "reads", None), present=True))


def _read_only(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


def _reduce_mapping_proxy(mapping: MappingProxyType) -> tuple:
    return _read_only, (dict(mapping),)


# Config sections hold read-only mappings (fill policies, [scale.policy]): a worker process is sent them as such.
copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)
