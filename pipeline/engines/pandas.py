"""The pandas engine (the default): everything in this process, on whole frames. It keeps no parts, so LABEVENTS'
checked blocks are put together into one typed table before the stages run on it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pandas as pd

from pipeline.engines.base import picked, run_link
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.engines.stored import Stored, frames
from pipeline.reading.parse import PartCheck, check_part
from pipeline.kernel.calls import Chained, Fit, Link


class PandasEngine:
    """Everything in this process, on whole frames."""

    keeps_parts = False

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> PartCheck:
        return check_part(table, frame, **settings)

    def blocks(self, function: Callable[..., Any], blocks: Iterable[pd.DataFrame], **kwargs: Any) -> Iterator[Any]:
        return (function(block, **kwargs) for block in blocks)

    def each(self, function: Callable[..., Any], items: Sequence[Any], **kwargs: Any) -> Iterator[Any]:
        return (function(item, **kwargs) for item in items)

    def router(self, splits: pd.DataFrame | None) -> Any:
        raise NotImplementedError("the pandas engine keeps no parts (keeps_parts is False): nothing to route into")

    def share(self, value: Any) -> Any:
        return value

    def partition(self, events: pd.DataFrame, splits: pd.DataFrame | None = None) -> pd.DataFrame:
        return events

    def fit(self, fit: Fit, events: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
        return fit.whole(events, *args, **kwargs)

    def chain(self, events: pd.DataFrame, links: Sequence[Link], fits: Sequence[tuple[Fit, tuple, dict]] = ()
              ) -> Chained:
        done, frame = [], events
        for link in links:
            linked, frame = run_link(link, frame)
            done.append(linked)
            if linked.error is not None:
                return Chained(links=tuple(done))
        return Chained(links=tuple(done), events=frame,
                       fitted=tuple(fit.whole(frame, *args, **kwargs) for fit, args, kwargs in fits))

    def rows(self, events: pd.DataFrame, pick: Callable[..., pd.DataFrame] | None = None, *args: Any,
             columns: Sequence[str] | None = None, **kwargs: Any) -> pd.DataFrame:
        return picked(pick, columns, args, kwargs, events)

    def collect(self, events: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
        return events if columns is None else events[list(columns)]

    def per_part(self, call: Callable[..., Any], events: pd.DataFrame | Stored, *args: Any,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[Any]:
        """Here: of the frame, or of a parts engine's parts read one at a time."""
        return (call(part, *args, **kwargs) for part in frames(events, columns))

    def in_batches(self, make: Callable[..., Iterable[Any]], events: pd.DataFrame, *args: Any, batch_size: int,
                   columns: Sequence[str] | None = None, sees: Path | None = None, **kwargs: Any) -> Iterator[Any]:
        return iter(make(frames(events, columns), *args, batch_size=batch_size, **kwargs))

    def call(self, function: Callable[..., Any], *args: Any, sees: Path | None = None, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    def result(self, events: pd.DataFrame) -> pd.DataFrame:
        return events

    def release(self, events: pd.DataFrame) -> None:
        pass


PANDAS = PandasEngine()


def pandas_engine(options: EngineOptions | None = None) -> contextlib.nullcontext[PandasEngine]:
    """:data:`PANDAS`, as the registry opens an engine (it reads no option, and there is nothing to close)."""
    return contextlib.nullcontext(PANDAS)


KIND = EngineKind("pandas", pandas_engine, doc="this process, whole frames")
