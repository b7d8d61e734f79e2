"""Files opened by Python and handed to pyarrow as open files, never as paths: a path of any bytes reads
(``meds\\xff``: Python holds the byte as a surrogate, which pyarrow cannot encode), and a file that is not regular (a
FIFO, a link to ``/dev/zero``) is refused before it is opened (:func:`pipeline.reading.locate.not_regular`), so a
read never waits on a pipe nor reads a device without end."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.reading.locate import not_regular


class NotRegular(OSError):
    """A file badpoints does not open: not a regular file. Its message says what it is."""


def opened(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, once :func:`not_regular` has found it a regular file; else
    :class:`NotRegular`."""
    why = not_regular(Path(path))
    if why is not None:
        raise NotRegular(why)
    return open(path, "rb")


def read_parquet(path: Path, *, columns: list[str] | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """The Parquet file at ``path`` (only ``columns`` where given; read as ``schema`` where given)."""
    with opened(path) as handle:
        return pq.read_table(handle, columns=columns, schema=schema)


def parquet_schema(path: Path) -> pa.Schema:
    """The schema in the footer of the Parquet file at ``path``; no row is read."""
    with opened(path) as handle:
        return pq.read_schema(handle)


def input_stream(path: Path) -> pa.NativeFile:
    """``path`` as pyarrow's input stream (for ``pyarrow.csv``), decompressed where its name ends in ``.gz``; closing
    it closes the file."""
    stream = pa.PythonFile(opened(path), mode="r")
    return pa.CompressedInputStream(stream, "gzip") if Path(path).name.lower().endswith(".gz") else stream
