"""Turn a raw table's text, one block at a time, into rows of text: the header and the columns to read, the
rows through pyarrow (through the csv module where rows span lines), each row's source line as the index, and
the problems of the text (undecodable bytes, ragged rows, quotes that never close, fields too long).

The bytes come from :mod:`pipeline.reading.load`, which reads the files: nothing here opens one. Problems raise
:class:`schemas.StageError` with stage ``load``.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import difflib
import io
import itertools
import re
import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from pipeline.reading.load_error import load_error
from schemas.errors import SAMPLE_CAP, StageError, out_of_memory
from schemas.raw import ADMISSION_CATEGORICALS, ALIASES, OPTIONAL, REQUIRED, WITHOUT

_HEADER_BYTES = 1 << 16  # the header is read from the text's first bytes
_BLOCK = 1 << 24  # pyarrow's first block size, at most; doubled for rows longer than a block
_MIN_ARROW_BLOCK = 1 << 20  # ... and at least
_MAX_BLOCK = 1 << 30  # beyond this, rows are read by the csv module
_OPEN_AT_END = "unexpected end of data"  # the csv module's error for a quote still open where the text ends


def _is_utf8(data: bytes) -> bool:
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:  # the bytes as one large_string value, without a copy
        pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(data)).validate(full=True)
        return True
    except pa.ArrowInvalid:
        return False


class Undecodable:
    """Strict UTF-8 (a BOM is tolerated), block by block: the undecodable byte sequences, counted, and the lines
    of the first :data:`SAMPLE_CAP`. Every byte is checked, unread columns too, so the CSV reader need not check
    its columns again."""

    def __init__(self) -> None:
        self.count = 0
        self.lines: list[int] = []
        self._line = 1  # the line where the next block starts (counted by LF)

    def scan(self, data: bytes) -> None:
        if not _is_utf8(data):
            text = data.decode("utf-8", errors="surrogateescape")
            bad = [m.start() for m in re.finditer("[\udc80-\udcff]+", text)]
            line, last = self._line, 0
            for position in bad[:SAMPLE_CAP - len(self.lines)]:
                line += text.count("\n", last, position)
                last = position
                self.lines.append(line)
            self.count += len(bad)
        self._line += data.count(b"\n")

    def error(self, path: Path, table: str) -> StageError:
        return load_error(
            table, "encoding", path=path, lines=sorted(set(self.lines)), count=self.count,
            detail="Counted are undecodable byte sequences; the table was not read further",
        )


def read_header(data: bytes, path: Path, table: str) -> tuple[list[str], int, int]:
    """The header record, whatever the line endings (LF, CRLF or a lone CR), with the bytes and lines it takes."""
    text = data[:_HEADER_BYTES].decode("utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, [])
    except csv.Error:
        raise load_error(table, "malformed_row", path=path, lines=[1],
                          detail="The header line is not valid CSV (a quote that never closes?)") from None
    lines = itertools.islice(io.StringIO(text, newline=""), reader.line_num)
    size = sum(len(line.encode("utf-8")) for line in lines) + (3 if data.startswith(codecs.BOM_UTF8) else 0)
    return header, size, reader.line_num


def _canonical(name: str) -> str:
    upper = name.strip().upper()
    return ALIASES.get(upper, upper)


def printable_name(name: str) -> str:
    """A header name as shown in a message: identifiers only, never a data value."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ ]{0,39}", name):
        return name
    return f"<non-identifier, {len(name)} chars>"


def select_columns(header: list[str], path: Path, table: str) -> dict[str, str]:
    """Map canonical name -> header name for the columns to read; check duplicates and required."""
    canonical = [_canonical(name) for name in header]
    seen = pd.Series(canonical)
    duplicated = sorted(set(seen[seen.duplicated()]))
    if duplicated:
        raise load_error(
            table, "duplicate_header", path=path, lines=[1],
            detail="Duplicated: " + ", ".join(printable_name(name) for name in duplicated),
        )
    wanted = _wanted(table)
    by_name = dict(zip(canonical, header))
    missing = [name for name in REQUIRED[table] if name not in by_name]
    if missing:
        found = ", ".join(printable_name(name) for name in header[:30]) or "nothing"
        hint = ""
        if len(header) == 1 and re.search(r"[;\t|]", header[0]):
            hint = ". The header has no commas but contains ';', tab or '|': is the file delimited by another character?"
        raise load_error(
            table, "missing_column", path=path, lines=[1], column=", ".join(missing),
            detail=f"Expected {', '.join(REQUIRED[table])}; found {found}{hint}",
        )
    return {name: by_name[name] for name in wanted if name in by_name}


def near_columns(header: list[str], path: Path, table: str) -> list[StageError]:
    """A warning (``header_near_column``) for each header name one edit or less from a column ``table`` reads that
    the header lacks, case and underscores set aside (``value_num`` for VALUENUM, ``chart_time`` for CHARTTIME,
    ``hadmid`` for HADM_ID): columns are read by name, so that column counts as absent while its near name is
    ignored. None for a table of another kind than the three MIMIC tables."""
    if table not in REQUIRED:
        return []
    wanted = _wanted(table)
    canonical = [_canonical(name) for name in header]
    absent = [name for name in wanted if name not in canonical]
    found = []
    for name, known in zip(header, canonical):
        if known in wanted:
            continue
        for column in absent:
            if _edits(_folded(known), _folded(column)) <= 1:
                consequence = ("without it the table is not read (missing_column)" if column in REQUIRED[table]
                               else WITHOUT.get((table, column), "the run goes on without it"))
                found.append(load_error(
                    table, "header_near_column", path=path, lines=[1], column=column,
                    detail=f"The header has {printable_name(name)!r} and no {column}: {printable_name(name)!r} is "
                           f"not read, and {consequence}"))
    return found


def _wanted(table: str) -> tuple[str, ...]:
    """The columns read of ``table`` when its header has them: the required, then the optional ones."""
    return REQUIRED[table] + OPTIONAL[table] + (ADMISSION_CATEGORICALS if table == "ADMISSIONS" else ())


def _folded(name: str) -> str:
    """A column name as the layouts spell it apart from case and underscores (HADM_ID, hadm_id: HADMID)."""
    return name.replace("_", "")


def _edits(a: str, b: str) -> int:
    """The insertions, deletions and substitutions that turn ``a`` into ``b``, as difflib's opcodes count them
    (exact for the one edit or none asked here)."""
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal")


_CONVERSION = "conversion error"  # pyarrow's words for a value that is not of its column's type


class OpenQuote(Exception):
    """A block (not the last) ended inside a quote: it is read again with the next one."""


def parse_block(data: bytes, header: list[str], columns: dict[str, str], line: int, path: Path, table: str, *,
                 last: bool, numbers: frozenset[str] = frozenset()) -> tuple[pd.DataFrame, list[int]]:
    """One block's rows (its first line is ``line``) and the lines of its ragged rows: fast through pyarrow;
    exact line numbers through the csv module when rows span lines. Every column is text, but those of
    ``numbers`` (canonical names), which are float64 where each of their values in the block reads as one (a
    column with any other text is read as text, like the rest)."""
    ragged: list[int] = []
    arrow, block = None, min(_BLOCK, max(_MIN_ARROW_BLOCK, len(data) // 4))  # parts parsed on threads
    as_numbers = {source for name, source in columns.items() if name in numbers}
    while arrow is None:
        ragged.clear()
        convert = pv.ConvertOptions(
            include_columns=list(columns.values()),
            column_types={name: pa.float64() if name in as_numbers else pa.string() for name in columns.values()},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            check_utf8=False,  # Undecodable checked every byte of the block
        )
        try:
            arrow = pv.read_csv(
                pa.py_buffer(data),
                read_options=pv.ReadOptions(use_threads=True, block_size=block, column_names=header),
                parse_options=pv.ParseOptions(invalid_row_handler=lambda row: ragged.append(1) or "skip"),
                convert_options=convert,
            )
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            if out_of_memory(exc):
                raise
            if as_numbers and _CONVERSION in str(exc):
                as_numbers = set()  # text in a number column: the block is read as text, and typed by its reader
                continue
            if "straddl" not in str(exc) or block >= min(len(data), _MAX_BLOCK):
                break  # not a row longer than a block: the csv module says what it is
            block *= 2  # a row longer than a block (a long field, or a quote that never closes)
    if arrow is not None and not ragged and _one_line_a_row(data, arrow.num_rows):
        frame = arrow.to_pandas()
        frame.index = pd.RangeIndex(line, line + arrow.num_rows, name="line")
        return frame.rename(columns={v: k for k, v in columns.items()})[list(columns)], []
    positions = [header.index(name) for name in columns.values()]
    with _any_field_size():
        return _read_records(data, header, columns, positions, line, path, table, last=last)


def _one_line_a_row(data: bytes, rows: int) -> bool:
    """Whether the block's rows are its lines, one each: no row spans lines, no line is blank, no row ends in a
    lone CR, and the last line closes its quotes (pyarrow takes a quote still open at the end as a value)."""
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if lines != rows or lone_crs(data):
        return False
    tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1:].decode("utf-8")
    try:
        with _any_field_size():
            for _ in csv.reader(io.StringIO(tail, newline=""), strict=True):
                pass
    except csv.Error as exc:
        return _OPEN_AT_END not in str(exc)
    return True


def lone_crs(data: bytes) -> int:
    """Line breaks that are a CR alone (old Mac files; the csv module counts them as lines)."""
    crs = data.count(b"\r")
    return crs - data.count(b"\r\n") if crs else 0


@contextlib.contextmanager
def _any_field_size() -> Iterator[None]:
    """Lift the csv module's field size limit (131,072 characters) while a table is read: a long field is
    then read whole and reported for what it is (``field_too_long``), not as a quote that never closes."""
    limit = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)
    try:
        yield
    finally:
        csv.field_size_limit(limit)


def _read_records(data: bytes, header: list[str], columns: dict[str, str], positions: list[int], line: int,
                  path: Path, table: str, *, last: bool) -> tuple[pd.DataFrame, list[int]]:
    """Record by record with the csv module: exact start lines, ragged rows and unclosed quotes."""
    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""), strict=True)
    records: list[list[str]] = []
    lines: list[int] = []
    ragged: list[int] = []
    end = 0  # lines of the block read so far
    try:
        for record in reader:
            start, end = line + end, reader.line_num
            if not record:
                continue
            if len(record) != len(header):
                ragged.append(start)
                continue
            records.append([record[i] for i in positions])
            lines.append(start)
    except csv.Error as exc:
        if not last and _OPEN_AT_END in str(exc):
            raise OpenQuote from None
        raise load_error(
            table, "malformed_row", path=path, lines=[line + end],
            detail=f"A quote opened at line {line + end} never closes; nothing after it could be read",
        ) from None
    values = np.array(records, dtype=object).reshape(len(records), len(positions))
    frame = pd.DataFrame(values, columns=list(columns), index=pd.Index(lines, name="line", dtype="int64"))
    return frame.replace("", None).astype("str"), ragged


class LongFields:
    """Rows with a read field longer than ``max_chars``, block by block: left out, and one problem naming them
    all, with the longest field (the first of its length in the file)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.count = 0
        self.lines: list[int] = []
        self.longest: dict[str, tuple[int, int]] = {}  # column -> (characters, line)

    def drop(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows whose read fields all fit. Lengths are taken chunk by chunk from the Arrow data (no length
        column for the whole block); only a column that holds a long field is measured whole."""
        arrow = pa.Table.from_pandas(frame, preserve_index=False)
        over = np.zeros(len(frame), dtype=bool)
        for name in frame.columns:
            column = arrow.column(name)
            if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
                continue  # a column read as numbers holds no long field
            if not any((pc.max(pc.utf8_length(chunk)).as_py() or 0) > self.max_chars for chunk in column.chunks):
                continue
            lengths = pc.fill_null(pc.utf8_length(column), 0).to_numpy()
            over |= lengths > self.max_chars
            at = int(lengths.argmax())
            if lengths[at] > self.longest.get(name, (0, 0))[0]:
                self.longest[name] = (int(lengths[at]), int(frame.index[at]))
        if not over.any():
            return frame
        self.count += int(over.sum())
        self.lines += frame.index[over][:SAMPLE_CAP - len(self.lines)].tolist()
        return frame[~over]

    def problem(self, path: Path, table: str) -> StageError | None:
        if not self.count:
            return None
        chars, column, line = max((chars, name, line) for name, (chars, line) in self.longest.items())
        count = self.count
        rows = "A row" if count == 1 else f"{count} rows"
        return load_error(
            table, "field_too_long", path=path, lines=self.lines, count=count, column=column,
            detail=f"{rows} with a field longer than [load] max_field_chars ({self.max_chars:,} characters), the "
                   f"longest a field of {chars:,} characters ({chars / 2**20:.1f} MiB) in {column} at line {line}; "
                   f"{'it was' if count == 1 else 'they were'} left out and the rest of the table read",
        )
