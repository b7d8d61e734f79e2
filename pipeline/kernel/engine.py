"""What an engine is: the one protocol every engine follows (:class:`Engine`). An engine decides where the stages'
calls run (this process, worker processes, a Dask cluster) and how their parts come back together; it runs the very
same functions everywhere. It declares what it can do (:attr:`Engine.keeps_parts`); a run reads that, never sniffs
it. The engines themselves, and what they share, are in ``pipeline.engines``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import pandas as pd

from pipeline.kernel.calls import Chained, Events, Fit, Link


class Engine(Protocol):
    """Runs the LABEVENTS work: raw checks of a block or a table, and the stages, on whole frames or on parts cut by
    admission."""

    # LABEVENTS is kept in the engine's parts: its checked blocks are routed straight into them (:meth:`router`), so
    # the whole table never exists in this process, and the stages hand on parts, not frames.
    keeps_parts: bool

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> Any:
        """The raw checks of one block of a table (a reading's ``PartCheck``), where the engine works."""

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        """``function(block, **kwargs)`` of each block as it comes (a table read block by block), in order."""

    def each(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        """``function(item, **kwargs)`` of each small item (a file's path and name: a MEDS shard), in order, where
        the parts are worked on: here, in the worker processes, or on the Dask cluster's workers (which must see the
        files ``item`` names)."""

    def router(self, splits: pd.DataFrame | None) -> Any:
        """Where a table's checked blocks go, as they come: into the engine's parts, by admission (``splits``:
        HADM_ID and SPLIT, known from ADMISSIONS). Only an engine that :attr:`keeps_parts` has one."""

    def share(self, value: Any) -> Any:
        """A frame (or another large value) as a task takes it: itself, or (an engine with other processes) a
        :class:`Shared` copy."""

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> Events:
        """``events`` ready for per-admission stages (``splits``: HADM_ID and SPLIT, when the rows have no SPLIT)."""

    def fit(self, fit: Fit, events: Events, *args: Any, **kwargs: Any) -> Any:
        """The state ``fit`` learns from all the rows: ``fit.whole(events, *args, **kwargs)``, or (a mergeable fit
        of rows in parts) as much from its partial results, combined and finished."""

    def chain(self, events: Events, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()) -> Chained:
        """Each link's counts, calls and picks, link after link, on all the rows (in one go on each part): what
        each stage made of them (a stage whose call raises :class:`StageError` ends the chain, with the whole
        table's error), the last link's rows, and the states ``fits`` learn from them."""

    def rows(self, events: Events, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        """``pick(events, *args, **kwargs)`` (or ``events[columns]``) as one pandas frame, in row order."""

    def collect(self, events: Events, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows (only ``columns``, when given) as one pandas frame, in part order."""

    def per_part(self, call: Callable[..., Any], events: Events, *args: Any, columns: Sequence[str] | None = None,
                 **kwargs: Any) -> Iterator[Any]:
        """``call(part, *args, **kwargs)`` of each part (only ``columns``, when given), in part order, made where the
        parts are (a frame: of itself, its one part)."""

    def in_batches(self, make: Callable[..., Iterable[Any]], events: Events, *args: Any, batch_size: int,
                   columns: Sequence[str] | None = None, sees: Path | None = None, **kwargs: Any) -> Iterator[Any]:
        """What ``make(parts, *args, batch_size=batch_size, **kwargs)`` yields for edge rows (only ``columns``) that
        come in (split, HADM_ID) order, every admission's rows in one part, and are made into batches of
        ``batch_size`` admissions per split (the graphs): in that order. An engine may cut them into pieces of whole
        batches and make each where the parts are, giving ``make`` ``start``, the admissions of each split in the
        pieces before; ``sees``: a folder ``make`` writes into, which the workers must see to make pieces there."""

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` where the parts are worked on: here, or (Dask) on a worker, when the
        workers see ``sees`` (a folder it writes into)."""

    def result(self, events: Events) -> Events:
        """What a run hands on as its edge rows: a pandas frame, or (parts engine) the parts on disk."""

    def release(self, events: Events) -> None:
        """``events`` will not be read again: what holds them may go."""
