"""What the work on a part needs besides the part: objects every task of a run reads (ADMISSIONS' stays, the
admission ranges), written once where the engine's parts are (a task carries the path, and each process reads the
object once, not once per task); and the columns a function of a part reads (:func:`reads`)."""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Shared:
    """An object written by :func:`share` into a folder every process of the run sees."""

    path: Path

    def get(self) -> Any:
        return _read(self.path)


def share(value: Any, path: Path) -> Shared:
    """``value`` pickled at ``path``, for tasks to carry as a :class:`Shared`."""
    with open(path, "wb") as handle:
        pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return Shared(path)


def value_of(value: Any) -> Any:
    """What a task was handed: the object itself, or the one a :class:`Shared` names."""
    return value.get() if isinstance(value, Shared) else value


@functools.lru_cache(maxsize=4)
def _read(path: Path) -> Any:
    with open(path, "rb") as handle:
        return pickle.load(handle)


def reads(*columns: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares the columns a function of a part's rows reads (a fit's partial result, a count, a pick): an engine
    that keeps parts in files reads only those of them the part has, and its index. The function is unchanged."""

    def declare(function: Callable[..., Any]) -> Callable[..., Any]:
        function.reads = columns  # type: ignore[attr-defined]
        return function

    return declare
