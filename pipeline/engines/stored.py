"""What a parts engine keeps on disk, in Arrow files of its folder: the parts of a frame cut by admission
(:class:`Stored`, read one at a time by :func:`read_part`), and quarantine records by source line range
(:class:`LineFiles` writes them as the parts give them, :class:`Ranged` reads a range back)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.engines.workers import give_back_memory
from pipeline.kernel.quarantine import LINE_RANGE, empty_quarantine
from pipeline.kernel.handed import scratch


@dataclass(frozen=True)
class Batches:
    """Some record batches of one Arrow file (a routed block's rows of some admission ranges)."""

    path: Path
    batches: tuple[int, ...]


@dataclass(frozen=True)
class Stored:
    """A frame cut by admission, its parts Arrow files (in part order) of a :class:`PartsEngine`'s folder; a
    part routed from blocks (:class:`Router`) is some record batches of several files (:class:`Batches`: files that
    parts share), read together in source line order."""

    paths: tuple[Path | tuple[Path | Batches, ...], ...]
    lengths: tuple[int, ...]
    order: pd.Index | None  # the source lines in the row order of the frame that was cut (None: increasing)
    columns: tuple[str, ...] = ()  # the frame's columns, when known
    schema: type | None = None  # the schema every part passed as a stage's output (its guard's), when known

    def __len__(self) -> int:
        return sum(self.lengths)

    def read(self, columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
        """The parts one at a time, in part order (only ``columns``, when given)."""
        for path in self.paths:
            yield read_part(path, None if columns is None else list(columns))


def read_part(path: Path | tuple[Path | Batches, ...], columns: Sequence[str] | None = None, *,
              present: bool = False, where: Callable[[pa.Table], Any] | None = None) -> pd.DataFrame:
    """A part written by :func:`pipeline.kernel.handed.write_part` (or a :class:`Router`'s pieces of one part: files, or
    some record batches of files, put in source line order), with only ``columns`` (``present``: those of them it
    has) and its index; ``where``: only the rows of its mask (of the Arrow table), chosen before any pandas column
    is made. What the part before it used is given back first."""
    give_back_memory()
    pieces = (path,) if isinstance(path, Path) else tuple(path)
    batches = []
    for one in pieces:
        with pa.OSFile(str(one.path if isinstance(one, Batches) else one)) as source:  # the buffers are our own
            reader = pa.ipc.open_file(source)
            chosen = range(reader.num_record_batches) if isinstance(one, Path) else one.batches
            table = pa.Table.from_batches([reader.get_batch(i) for i in chosen], schema=reader.schema)
        if columns is not None:
            index = [c for c in (table.schema.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)]
            table = table.select([*(c for c in columns if not present or c in table.column_names), *index])
        batches.append(table if where is None else table.filter(where(table)))
    table = batches[0] if len(batches) == 1 else pa.concat_tables(batches)
    frame = table.combine_chunks().to_pandas()
    several = not isinstance(path, Path) and sum(1 if isinstance(one, Path) else len(one.batches) for one in pieces) > 1
    return frame.sort_index(kind="stable") if several else frame


def frames(events: pd.DataFrame | Stored, columns: Sequence[str] | None = None) -> Iterable[pd.DataFrame]:
    """A frame (only ``columns``, when given), or the parts of one a :class:`PartsEngine` keeps, read one at a time."""
    if isinstance(events, pd.DataFrame):
        return [events if columns is None else events[list(columns)]]
    return events.read(columns)


@dataclass(frozen=True)
class Ranged:
    """Quarantine records kept by source line range (:class:`pipeline.kernel.quarantine.ByLines`): per range, an Arrow
    file of a :class:`PartsEngine`'s folder."""

    files: tuple[tuple[int, Path], ...]  # (range, file), by range

    def ranges(self) -> tuple[int, ...]:
        return tuple(number for number, _ in self.files)

    def range(self, number: int, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The records of range ``number`` (only ``columns``), in source line order."""
        return read_part(dict(self.files)[number], columns).sort_index(kind="stable")


class LineFiles:
    """Quarantine records written by source line range as the parts give them (:class:`Ranged`): a range is one
    file, each part's records in it a record batch (compressed: the same few texts on every row)."""

    def __init__(self, new_path: Callable[[], Path]) -> None:
        self.new_path = new_path  # a fresh file of the parts folder
        self._writers: dict[int, Any] = {}
        self._files: dict[int, Path] = {}
        self._schema = None

    def add(self, records: pd.DataFrame) -> None:
        if not len(records):
            return
        records = records.sort_index(kind="stable")
        number = records.index.to_numpy("int64") // LINE_RANGE
        starts = np.flatnonzero(np.r_[True, number[1:] != number[:-1]])
        if self._schema is None:
            self._schema = pa.Schema.from_pandas(records, preserve_index=True)
        for start, stop in zip(starts, [*starts[1:], len(number)]):
            key = int(number[start])
            if key not in self._writers:
                self._files[key] = self.new_path()
                with scratch(self._files[key]):
                    self._writers[key] = pa.ipc.new_file(self._files[key], self._schema, options=_RECORDS)
            with scratch(self._files[key]):
                self._writers[key].write_table(pa.Table.from_pandas(records.iloc[start:stop], schema=self._schema,
                                                                    preserve_index=True))

    def finish(self) -> Ranged | pd.DataFrame:
        """The records by line range (none: an empty quarantine frame)."""
        for key, writer in self._writers.items():
            with scratch(self._files[key]):
                writer.close()
        if not self._files:
            return empty_quarantine()
        return Ranged(files=tuple(sorted(self._files.items())))


_RECORDS = pa.ipc.IpcWriteOptions(compression="lz4")  # quarantine records: the same few texts on every row
