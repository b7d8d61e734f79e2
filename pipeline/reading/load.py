"""Read the raw tables: the only module that reads input files.

A table is read as text (every needed column ``str``), with the index set to each row's source line number
(the header is line 1), so every later finding can name the line in the file even when quoted fields span
lines. It is read as a stream of blocks (:func:`read_blocks`): memory holds about one block of the file's
text, never the whole file. Where the tables are is :mod:`pipeline.reading.locate`'s to say (it opens no file); what
a block's bytes hold, row by row, :mod:`pipeline.reading.decode`'s (through pyarrow).
File-level problems raise :class:`schemas.StageError` with stage ``load``.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import pandas as pd

from pipeline.reading.decode import (LongFields, OpenQuote, Undecodable, lone_crs, near_columns, parse_block,
                                     printable_name, read_header, select_columns)
from pipeline.reading.load_error import load_error
from pipeline.reading.locate import TABLES, locate_tables
from schemas.errors import StageError

_GZIP_MAGIC = b"\x1f\x8b"
_BLANK = re.compile(rb"[\r\n\t \xef\xbb\xbf]*")  # a file of only these bytes has not even a header
# Reading bounds; the config's [load] section sets them (pipeline/config.py declares them, with why these values).
MAX_EXPANDED_BYTES = 64 * 2**30
MAX_EXPANSION_RATIO = 100.0
RATIO_FREE_BYTES = 64 * 2**20  # text up to this size is never refused for its expansion ratio
MAX_FIELD_CHARS = 2**20
# Text read and checked at a time (read_blocks). Measured on 2M generated rows (123 MB, bench.synth): reading
# and checking LABEVENTS took 5.0 s at 16 MiB (peak RSS 570 MiB) against 4.8-5.5 s whole (710-750 MiB); 8 MiB and
# less cost more time per row, 32-64 MiB more memory for no speed.
BLOCK_BYTES = 16 * 2**20
_CHUNK = 1 << 23  # bytes read (decompressed) at a time, at most
_MIN_READ = 1 << 16  # ... and at least


Select = Callable[[list[str], Path, str], dict[str, str]]  # (header, path, table): the columns read, by name


def every_column(header: list[str], path: Path, table: str) -> dict[str, str]:
    """Every column of the header, under its own name (a table of any kind); a name twice is a problem."""
    seen = pd.Series(header)
    if seen.duplicated().any():
        raise load_error(table, "duplicate_header", path=path, lines=[1],
                         detail="Duplicated: " + ", ".join(printable_name(name)
                                                           for name in sorted(set(seen[seen.duplicated()]))))
    return {name: name for name in header}


@dataclass(frozen=True)
class TextTable:
    """One raw table as text: needed columns under canonical names, index = source line."""

    table: str
    path: Path
    sha256: str
    frame: pd.DataFrame
    # the header's warnings (header_near_column) and rows rejected while the rest was read (field_too_long)
    problems: tuple[StageError, ...] = ()

    @property
    def rows(self) -> int:
        return len(self.frame)


def read_table(path: Path, table: str, *, block_bytes: int = BLOCK_BYTES,
               max_expanded_bytes: int = MAX_EXPANDED_BYTES, max_expansion_ratio: float = MAX_EXPANSION_RATIO,
               max_field_chars: int = MAX_FIELD_CHARS) -> TextTable:
    """Read the needed columns of one raw table as text, keeping each row's source line: the blocks of
    :func:`read_blocks` put together."""
    return whole_table(read_blocks(path, table, block_bytes=block_bytes, max_expanded_bytes=max_expanded_bytes,
                                   max_expansion_ratio=max_expansion_ratio, max_field_chars=max_field_chars))


def whole_table(blocks: "TextBlocks") -> TextTable:
    """Every block of ``blocks`` put together."""
    frames = list(blocks)
    frame = frames[0] if len(frames) == 1 else pd.concat(frames)
    return TextTable(table=blocks.table, path=blocks.path, sha256=blocks.sha256, frame=frame, problems=blocks.problems)


def read_blocks(path: Path, table: str, *, block_bytes: int = BLOCK_BYTES,
                max_expanded_bytes: int = MAX_EXPANDED_BYTES, max_expansion_ratio: float = MAX_EXPANSION_RATIO,
                max_field_chars: int = MAX_FIELD_CHARS, select: Select = select_columns,
                numbers: frozenset[str] = frozenset()) -> "TextBlocks":
    """Read one raw table as a stream of text blocks of about ``block_bytes`` bytes of the file's text each.

    Memory stays bounded by about a block whatever the file's size: the text is read (a ``.gz`` decompressed)
    as a stream and cut just after a newline outside quotes, so neither a quoted field nor a UTF-8 sequence is
    ever split. A ``.gz`` file is refused (``decompression_bound``) as soon as its text passes
    ``max_expanded_bytes``, or ``max_expansion_ratio`` times the file's size beyond the first
    :data:`RATIO_FREE_BYTES`. Rows with a read field longer than ``max_field_chars`` are left out and
    reported (``field_too_long``, in ``problems`` once the blocks were all taken); a header name near a column the
    header lacks is a warning (``header_near_column``, in ``notices`` once the header was read, and in
    ``problems``), which a problem of the file found after it leaves standing. A problem of the file
    (``file_empty``, ``encoding``, header problems, ``malformed_row``, ``table_empty`` ...) is raised while
    iterating, after the whole file was looked at, so it is the one (with every line) that reading the file
    at once finds; blocks taken before it must then be dropped. ``select`` picks the columns read from the header
    (by default a MIMIC table's, under their canonical names; :func:`every_column` reads a table of any kind);
    the columns of ``numbers`` are read as float64 in a block where every value of theirs is a number.
    """
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be at least 1, not {block_bytes}")
    return TextBlocks(Path(path), table, block_bytes=block_bytes, max_expanded_bytes=max_expanded_bytes,
                      max_expansion_ratio=max_expansion_ratio, max_field_chars=max_field_chars, select=select,
                      numbers=numbers)


class TextBlocks:
    """One raw table as text blocks, in file order: each like :attr:`TextTable.frame` (needed columns under
    canonical names, ``str``, index = source line). ``notices``, the header's warnings (header_near_column), is set
    once the header was read, even when reading fails after it. What only the whole file tells is set once the last
    block was taken: ``sha256`` (of the file's bytes), ``rows`` and ``problems`` (the notices, and rows left out:
    field_too_long)."""

    def __init__(self, path: Path, table: str, *, block_bytes: int, max_expanded_bytes: int,
                 max_expansion_ratio: float, max_field_chars: int, select: Select = select_columns,
                 numbers: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.numbers = numbers
        self.table = table
        self.select = select
        self.sha256: str | None = None
        self.rows = 0
        self.problems: tuple[StageError, ...] = ()
        self.notices: tuple[StageError, ...] = ()
        self._blocks = self._read(block_bytes, max_field_chars, max_expanded_bytes=max_expanded_bytes,
                                  max_expansion_ratio=max_expansion_ratio)

    def __iter__(self) -> "TextBlocks":
        return self

    def __next__(self) -> pd.DataFrame:
        return next(self._blocks)

    def _read(self, block_bytes: int, max_field_chars: int, **bounds) -> Iterator[pd.DataFrame]:
        path, table = self.path, self.table
        digest = hashlib.sha256()
        chunks = _chunks(path, table, digest, min(_CHUNK, max(block_bytes, _MIN_READ)), **bounds)
        blank = True
        undecodable = Undecodable()
        failure: StageError | None = None  # the first problem of the rows: raised once the whole file was read
        ragged: list[int] = []  # rows with another number of fields than the header: all of them are reported
        long_fields = LongFields(max_field_chars)
        header: list[str] | None = None
        columns: dict[str, str] = {}
        line = 1  # where the next block starts (counted like the csv module: LF, CRLF or a lone CR)
        pending = b""  # a block that ended inside a quote, read again with the next one
        for piece, last in _cut(chunks, block_bytes):
            blank = blank and _BLANK.fullmatch(piece) is not None
            undecodable.scan(piece)
            if undecodable.count or failure is not None:
                continue  # the rest is read for its hash, gzip's checks and every undecodable byte only
            if header is None:
                try:
                    header, header_bytes, header_lines = read_header(piece, path, table)
                    self.notices = tuple(near_columns(header, path, table))
                    columns = self.select(header, path, table)
                except StageError as problem:
                    failure = problem
                    continue
                piece, line = piece[header_bytes:], 1 + header_lines
            data = pending + piece if pending else piece
            if not data:
                continue
            try:
                frame, bad_rows = parse_block(data, header, columns, line, path, table, last=last,
                                              numbers=self.numbers)
            except OpenQuote:
                pending = data
                continue
            except StageError as problem:
                failure = problem
                continue
            pending = b""
            line += data.count(b"\n") + lone_crs(data)
            ragged += bad_rows
            if ragged:
                continue  # only more ragged rows are looked for now
            frame = long_fields.drop(frame)
            if len(frame):
                self.rows += len(frame)
                yield frame
        self.sha256 = digest.hexdigest()
        self._settle(blank=blank, undecodable=undecodable, failure=failure, ragged=ragged, header=header,
                     long_fields=long_fields)

    def _settle(self, *, blank: bool, undecodable: Undecodable, failure: StageError | None, ragged: list[int],
                header: list[str] | None, long_fields: LongFields) -> None:
        """Once the whole file was looked at: raise its problem, the first of file_empty, encoding, the rows'
        first problem, ragged rows and table_empty (the one reading the file at once finds); else keep the rows
        left out (field_too_long) as ``problems``."""
        path, table = self.path, self.table
        if blank:
            raise load_error(table, "file_empty", path=path)
        if undecodable.count:
            raise undecodable.error(path, table)
        if failure is not None:
            raise failure
        if ragged:
            raise load_error(
                table, "malformed_row", path=path, lines=ragged, count=len(ragged),
                detail=f"Rows with a different number of fields than the header's {len(header)}",
            )
        too_long = long_fields.problem(path, table)
        if not self.rows and too_long is None:
            raise load_error(table, "table_empty", path=path, detail="Only the header line was found")
        if not self.rows:  # every row was too long: no table was read, whatever field_too_long's severity
            raise load_error(table, "table_empty", path=path, detail=f"Every row was left out: {too_long.detail}")
        self.problems = (*self.notices, *((too_long,) if too_long else ()))


def file_sha256(path: Path, table: str) -> str:
    """The content hash of a raw file, streamed (the file is not held in memory)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        raise load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None


def load_text_tables(data_dir: Path) -> tuple[dict[str, TextTable], list[StageError]]:
    """Read all three tables, collecting file problems instead of stopping at the first."""
    located, problems = locate_tables(data_dir)
    tables: dict[str, TextTable] = {}
    for table, path in located.items():
        blocks = read_blocks(path, table)
        try:
            tables[table] = whole_table(blocks)
        except StageError as problem:
            problems.extend([problem, *blocks.notices])  # the header's warnings stand beside what stopped it
        else:
            problems.extend(tables[table].problems)
    return tables, sorted(problems, key=lambda p: TABLES.index(p.table))


def _chunks(path: Path, table: str, digest, size: int, *, max_expanded_bytes: int,
            max_expansion_ratio: float) -> Iterator[bytes]:
    """The file's text ``size`` bytes at a time (a ``.gz`` decompressed within the bounds); ``digest`` takes
    every byte of the file as it is read."""
    if path.name.lower().endswith(".gz"):
        return _gzip_chunks(path, table, digest, size, max_expanded_bytes=max_expanded_bytes,
                            max_expansion_ratio=max_expansion_ratio)
    return _plain_chunks(path, table, digest, size)


def _plain_chunks(path: Path, table: str, digest, size: int) -> Iterator[bytes]:
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise load_error(table, "file_missing", path=path) from None
    except OSError as exc:
        raise load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None
    with handle:
        first = True
        while True:
            try:
                chunk = handle.read(size)
            except OSError as exc:
                raise load_error(table, "file_unreadable", path=path,
                                  detail=exc.strerror or type(exc).__name__) from None
            if not chunk:
                return
            digest.update(chunk)
            if first and chunk.startswith(_GZIP_MAGIC):
                raise load_error(table, "compression", path=path,
                                  detail="the file is gzip-compressed but not named .gz")
            first = False
            yield chunk


class _Hashing:
    """A binary file read through: hashes every byte read and keeps the first two (the gzip magic)."""

    def __init__(self, handle: BinaryIO, digest) -> None:
        self.handle = handle
        self.digest = digest
        self.head = b""

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        if len(self.head) < 2:
            self.head = (self.head + data)[:2]
        return data


def _gzip_chunks(path: Path, table: str, digest, size: int, *, max_expanded_bytes: int,
                 max_expansion_ratio: float) -> Iterator[bytes]:
    """The decompressed text, streamed: refused once it passes the bounds."""
    try:
        handle = open(path, "rb")
        compressed = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None
    by_ratio = max(RATIO_FREE_BYTES, max_expansion_ratio * compressed)
    bound = min(max_expanded_bytes, by_ratio)
    expanded = 0
    source = _Hashing(handle, digest)
    with handle:
        try:
            with gzip.GzipFile(fileobj=source, mode="rb") as stream:
                while chunk := stream.read(size):
                    expanded += len(chunk)
                    if expanded > bound:
                        which = ("[load] max_expanded_bytes" if bound == max_expanded_bytes else
                                 f"{max_expansion_ratio:g} times its {compressed:,} bytes ([load] max_expansion_ratio)")
                        raise load_error(
                            table, "decompression_bound", path=path,
                            detail=f"It expands to more than {bound:,.0f} bytes of text, over {which}; "
                                   "decompression stopped there and the table was not read")
                    yield chunk
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            reason = "truncated or corrupt stream" if source.head == _GZIP_MAGIC else "not a gzip file"
            raise load_error(table, "compression", path=path, detail=f"{reason} ({type(exc).__name__})") from None
        except OSError as exc:
            raise load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None


# From a position outside quotes (EVEN) or inside them (ODD), the text up to the first newline outside quotes.
# Quote parity is all it takes: RFC 4180's doubled quotes close and reopen. Possessive: no backtracking.
_TO_RECORD_END = {
    0: re.compile(rb'[^"\n]*+(?:"[^"]*+"[^"\n]*+)*+\n'),
    1: re.compile(rb'[^"]*+"[^"\n]*+(?:"[^"]*+"[^"\n]*+)*+\n'),
}


def _cut(chunks: Iterator[bytes], size: int) -> Iterator[tuple[bytes, bool]]:
    """The text in blocks, each ending at the first newline outside quotes at or after its ``size``-th byte, so
    no quoted field (and no UTF-8 sequence) is split; the flag marks the last block, which ends where the text
    does (empty when the text ended at a cut). Memory: the block and the chunk being read."""
    buffer = bytearray()
    scan: tuple[int, int] | None = None  # (position, quote parity there) where the search for a cut goes on

    def cut() -> int | None:
        nonlocal scan
        if len(buffer) < size:
            return None
        if scan is None:
            scan = (size - 1, buffer.count(b'"', 0, size - 1) % 2)
        position, parity = scan
        found = _TO_RECORD_END[parity].match(buffer, position)
        if found is None:  # no record ends in what was read: go on from its end with the next chunk
            scan = (len(buffer), (parity + buffer.count(b'"', position)) % 2)
            return None
        scan = None
        return found.end()

    for chunk in chunks:
        buffer += chunk
        while (end := cut()) is not None:
            yield bytes(memoryview(buffer)[:end]), False
            del buffer[:end]
    while (end := cut()) is not None and end < len(buffer):
        yield bytes(memoryview(buffer)[:end]), False
        del buffer[:end]
    yield bytes(buffer), True
