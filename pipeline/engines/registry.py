"""The engines by name: :data:`ENGINES` holds each engine module's :class:`EngineKind` (its ``KIND``: the name,
how it is opened, the options it reads); :func:`auto_name` is the choice ``auto`` makes by the size of the input;
:func:`open_engine` opens any of them with :class:`EngineOptions`. The CLI, the benchmark and a library caller
open an engine here, never by its factory.

Adding an engine is its module (the engine, its factory and its ``KIND``) and one line in :data:`ENGINES`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pipeline.engines import dask, pandas, parts
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.kernel.engine import Engine
from schemas.errors import StageError

ENGINES: dict[str, EngineKind] = {kind.name: kind for kind in (
    pandas.KIND,
    parts.KIND,
    dask.KIND,
)}
AUTO = "auto"  # not an engine: the name that chooses one by the size of the input (:func:`auto_name`)
SMALL, LARGE = pandas.KIND.name, parts.KIND.name  # what ``auto`` chooses below and from AUTO_PARTS_BYTES
AUTO_PARTS_BYTES = 256 * 2**20  # the input's text from which ``auto`` works on parts
GZIP_TEXT_RATIO = 7  # about how many bytes of text a byte of gzipped LABEVENTS holds (MIMIC-IV: 17 GB in 2.5 GB)
# About how many bytes of LABEVENTS text a byte of MEDS shards holds for the same events, so that a MEDS dataset
# works on parts from about as many events as a MIMIC folder does: bench.meds_convert wrote bench.synth's 1M
# LABEVENTS rows (61.3 MB of text) as 4.9 MB of shards (pyarrow's default Parquet: snappy, the codes
# dictionary-encoded, rows sorted by subject and time), 12.4 times fewer bytes.
MEDS_TEXT_RATIO = 12


def names() -> tuple[str, ...]:
    """What ``--engine`` takes: ``auto``, then every registered engine's name."""
    return (AUTO, *ENGINES)


def register(kind: EngineKind) -> EngineKind:
    """``kind`` taken into :data:`ENGINES` by its name (a name already taken, or ``auto``, is refused)."""
    if kind.name in names():
        raise ValueError(f"an engine named {kind.name!r} is already registered (or the name is {AUTO!r})")
    ENGINES[kind.name] = kind
    return kind


@dataclass(frozen=True)
class InputSize:
    """What ``auto`` weighs: about how many bytes of text the input holds, and how many files it is read in one
    file a task (a MEDS dataset's shards; None: read in blocks, as LABEVENTS is)."""

    text_bytes: float
    files: int | None = None


def auto_name(size: InputSize) -> str:
    """The engine ``auto`` names for an input of ``size``: :data:`LARGE` (parts) from :data:`AUTO_PARTS_BYTES` of
    text, when it is read in blocks or in more than one file (one file is read by one process whatever the engine),
    else :data:`SMALL` (pandas)."""
    spread = size.files is None or size.files > 1
    return LARGE if spread and size.text_bytes >= AUTO_PARTS_BYTES else SMALL


def labevents_size(data_dir: Path) -> InputSize:
    """A MIMIC folder's size as ``auto`` weighs it: the text its LABEVENTS holds (a ``.gz`` about
    :data:`GZIP_TEXT_RATIO` times its bytes); none when the file cannot be found or read (the run reports why)."""
    from pipeline.reading.locate import locate_table

    try:
        path = locate_table(Path(data_dir), "LABEVENTS")
        size = path.stat().st_size
    except (StageError, OSError):
        return InputSize(0)
    return InputSize(size * (GZIP_TEXT_RATIO if path.name.lower().endswith(".gz") else 1))


def meds_size(root: Path) -> InputSize:
    """A MEDS dataset's size as ``auto`` weighs it: its shards (every ``.parquet`` under ``data/``), their bytes
    times :data:`MEDS_TEXT_RATIO`; a shard that cannot be read counts nothing (the run reports it)."""
    import meds

    total, files = 0, 0
    for path in (Path(root) / meds.data_subdirectory).rglob("*.parquet"):
        files += 1
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return InputSize(total * MEDS_TEXT_RATIO, files=files)


def in_parts(data_dir: Path) -> bool:
    """Whether ``--engine auto`` works on parts for the MIMIC folder ``data_dir``: LABEVENTS holds about
    :data:`AUTO_PARTS_BYTES` of text or more."""
    return auto_name(labevents_size(data_dir)) == LARGE


def resolve(name: str, size: InputSize | None = None) -> EngineKind:
    """The engine ``name`` names (``auto``: the one :func:`auto_name` chooses for ``size``)."""
    if name == AUTO:
        if size is None:
            raise ValueError(f"{AUTO!r} chooses an engine by the size of the input: give its size")
        name = auto_name(size)
    if name not in ENGINES:
        raise ValueError(f"no engine named {name!r}: one of {', '.join(names())}")
    return ENGINES[name]


@contextlib.contextmanager
def open_engine(name: str, options: EngineOptions | None = None, *,
                size: InputSize | None = None) -> Iterator[Engine]:
    """The engine ``name`` names (:func:`resolve`), opened with the ``options`` its kind reads (every other at its
    default), and closed when the block ends; ``pandas`` yields :data:`pipeline.engines.pandas.PANDAS`."""
    kind = resolve(name, size)
    with kind.opens((options or EngineOptions()).only(kind.reads)) as engine:
        yield engine
