"""What the work on a part needs besides the part: frames every task of a run reads (ADMISSIONS' stays, the
admission ranges, the split) and other large values (the report's mask of quarantined lines), written once where
the engine's parts are (a task carries the path, and each process reads a value once, not once per task); and the
columns a function of a part reads (:func:`reads`)."""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.kernel.quarantine import LineMask


@dataclass(frozen=True)
class Shared:
    """A value written by :func:`share` into a folder every process of the run sees: a frame or series as Arrow,
    a :class:`LineMask` as its bits (``.npy``; never a pickle: nothing the run reads back can run code)."""

    path: Path
    series: str | None = None  # the name of the series it was, when it was one (``""``: a series without a name)
    mask: bool = False  # a LineMask's bits

    def get(self) -> Any:
        if self.mask:
            return _mask(self.path)
        frame = _read(self.path)
        if self.series is None:
            return frame
        return frame.iloc[:, 0].rename(self.series or None)


def share(value: Any, path: Path) -> Shared:
    """``value`` written at ``path``, for tasks to carry: a frame or series as an Arrow file (its dtypes and index
    kept), a :class:`LineMask` (the report's quarantined lines) as its bits."""
    if isinstance(value, LineMask):
        with scratch(path), open(path, "wb") as file:
            np.save(file, value.bits, allow_pickle=False)
        return Shared(path, mask=True)
    series = isinstance(value, pd.Series)
    write_part(value.to_frame(name="values") if series else value, path)
    return Shared(path, series=(value.name or "") if series else None)


PART_OPTIONS = pa.ipc.IpcWriteOptions(compression=None)  # parts are written once and read a few times: fast, not small


class ScratchError(ValueError):
    """A write to a run's scratch space (an engine's parts, frames shared with tasks) failed: the CLI's "cannot run"
    (exit 2), naming the file and the system's reason. A ValueError, so it crosses from a worker process whole."""


def write_part(frame: pd.DataFrame, path: Path) -> None:
    """A frame as an Arrow IPC file, its index kept (pandas metadata): a part of an engine (read back exactly by
    ``pipeline.engines.stored.read_part``), or a frame shared with every task. A failed write (a full disk) removes
    what it wrote and is a :class:`ScratchError`."""
    table = pa.Table.from_pandas(frame, preserve_index=True)
    with scratch(path), pa.ipc.new_file(path, table.schema, options=PART_OPTIONS) as writer:
        writer.write_table(table)


@contextlib.contextmanager
def scratch(path: Path) -> Iterator[None]:
    """A write to a scratch file at ``path``: an OSError (a full disk, a folder gone) removes the file and is a
    :class:`ScratchError` naming it and the system's reason."""
    try:
        yield
    except OSError as exc:
        with contextlib.suppress(OSError):
            Path(path).unlink()
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ScratchError(f"could not write {path}: {reason}. A run's parts and records go to the temporary folder "
                           "(TMPDIR): free space there, or set TMPDIR to a larger disk") from None


def value_of(value: Any) -> Any:
    """What a task was handed: the object itself, or the frame a :class:`Shared` names."""
    return value.get() if isinstance(value, Shared) else value


def shared_frames(values: tuple, put: Callable[[Any], Any]) -> tuple:
    """``values`` with each frame or series among them replaced by ``put(it)`` (an engine's ``share``)."""
    return tuple(put(v) if isinstance(v, (pd.DataFrame, pd.Series)) else v for v in values)


@functools.lru_cache(maxsize=8)
def _read(path: Path) -> pd.DataFrame:
    with pa.OSFile(str(path)) as source:
        return pa.ipc.open_file(source).read_all().to_pandas()


@functools.lru_cache(maxsize=8)
def _mask(path: Path) -> LineMask:
    with open(path, "rb") as file:
        return LineMask(np.load(file, allow_pickle=False))
