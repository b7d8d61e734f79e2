"""Find and read the raw tables: the only module that reads input files.

A table is read as text (every needed column ``str``) through pyarrow, with the
index set to each row's source line number (the header is line 1), so every
later finding can name the line in the file even when quoted fields span lines.
It is read as a stream of blocks (:func:`read_blocks`): memory holds about one
block of the file's text, never the whole file.
File-level problems raise :class:`schemas.StageError` with stage ``load``.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import difflib
import gzip
import hashlib
import io
import itertools
import os
import re
import stat
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pv

from schemas.checks import check_info
from schemas.errors import SAMPLE_CAP, StageError
from schemas.raw import ADMISSION_CATEGORICALS, ALIASES, OPTIONAL, REQUIRED

TABLES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
SUFFIXES = (".csv", ".csv.gz")
SUBFOLDERS = ("", "hosp")
_GZIP_MAGIC = b"\x1f\x8b"
_BLANK = re.compile(rb"[\r\n\t \xef\xbb\xbf]*")  # a file of only these bytes has not even a header
# A missing table's file name is compared with the names in DATA_DIR and its subfolders; one this close
# (difflib's ratio) is suggested: 'Admission.csv' for ADMISSIONS, 'labevents.tsv' for LABEVENTS.
NEAR_NAME_CUTOFF = 0.8
# The other tables of MIMIC-III and MIMIC-IV: a file named for one of them is that table, never a misspelling
# (D_ITEMS is near D_LABITEMS, CHARTEVENTS near LABEVENTS).
OTHER_MIMIC_TABLES = frozenset("""
    callout caregiver caregivers chartevents cptevents d_cpt d_hcpcs d_icd_diagnoses d_icd_procedures d_items
    datetimeevents diagnoses_icd drgcodes emar emar_detail hcpcsevents icustays ingredientevents inputevents
    inputevents_cv inputevents_mv microbiologyevents noteevents omr outputevents patients pharmacy poe poe_detail
    prescriptions procedureevents procedureevents_mv procedures_icd provider services transfers
""".split())
# Problems of the file as a whole: their message counts no rows.
WHOLE_FILE = frozenset({"file_missing", "file_unreadable", "file_empty", "compression", "table_empty"})
_NEAR_NAME_SCAN = 2000  # entries looked at, at most: DATA_DIR may be a large folder
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
_HEADER_BYTES = 1 << 16  # the header is read from the text's first bytes
_BLOCK = 1 << 24  # pyarrow's first block size, at most; doubled for rows longer than a block
_MIN_ARROW_BLOCK = 1 << 20  # ... and at least
_MAX_BLOCK = 1 << 30  # beyond this, rows are read by the csv module
_OPEN_AT_END = "unexpected end of data"  # the csv module's error for a quote still open where the text ends


@dataclass(frozen=True)
class TextTable:
    """One raw table as text: needed columns under canonical names, index = source line."""

    table: str
    path: Path
    sha256: str
    frame: pd.DataFrame
    problems: tuple[StageError, ...] = ()  # rows rejected while the rest was read (field_too_long)

    @property
    def rows(self) -> int:
        return len(self.frame)


def candidate_names(table: str) -> list[str]:
    """The file names tried for a table, relative to DATA_DIR (matched case-insensitively)."""
    return [str(Path(sub) / f"{table.lower()}{suffix}") for sub in SUBFOLDERS for suffix in SUFFIXES]


def locate_table(data_dir: Path, table: str) -> Path:
    """The file holding ``table`` under ``data_dir`` (MIMIC-III or MIMIC-IV naming, any case)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise _load_error(table, "file_unreadable", path=data_dir, detail="DATA_DIR is not a folder")
    found = next(_candidates(data_dir, table), None)
    if found is not None:
        return _regular(found, table)
    tried = ", ".join(candidate_names(table))
    near = near_name(data_dir, table)
    hint = ""
    if near is not None:
        target = f"{table}.csv" + (".gz" if near.name.lower().endswith(".gz") else "")
        relative = near.relative_to(data_dir).as_posix()
        hint = (f"Did you mean {relative!r}? Rename it to {target}. "
                if near.parent in (data_dir, data_dir / "hosp") else
                f"Did you mean {relative!r}? Move it to DATA_DIR as {target}, "
                "or give its folder as DATA_DIR. ")
    raise _load_error(table, "file_missing", path=data_dir, detail=f"{hint}Tried (any case): {tried}")


def near_name(data_dir: Path, table: str) -> Path | None:
    """The file in ``data_dir`` or one of its subfolders whose name is nearest one of ``table``'s names
    (``Admission.csv`` for ADMISSIONS), when it is near enough; files named for any MIMIC table are left out."""
    known = {name for other in TABLES for name in (f"{other.lower()}.csv", f"{other.lower()}.csv.gz")}
    wanted = [f"{table.lower()}.csv", f"{table.lower()}.csv.gz"]
    files: dict[str, Path] = {}  # lower-case name (with its subfolder) -> file
    try:
        for entry in _entries(data_dir):
            name = entry.name.lower()
            if entry.name.startswith(".") or name.split(".")[0] in OTHER_MIMIC_TABLES:
                continue
            if entry.is_dir():
                for inner in _entries(entry):
                    inner_name = inner.name.lower()
                    if inner.is_file() and inner_name.split(".")[0] not in OTHER_MIMIC_TABLES \
                            and (inner_name not in known or inner_name in wanted):
                        files.setdefault(f"{name}/{inner_name}", inner)
            elif name not in known and entry.is_file():
                files.setdefault(name, entry)
    except OSError:
        return None
    scored = sorted((-max(difflib.SequenceMatcher(None, key.rsplit("/", 1)[-1], w).ratio() for w in wanted),
                     key.count("/"), key) for key in files)
    if not scored or -scored[0][0] < NEAR_NAME_CUTOFF:
        return None
    return files[scored[0][2]]


def _entries(folder: Path) -> list[Path]:
    """The first entries of ``folder`` in name order (at most ``_NEAR_NAME_SCAN``)."""
    entries = []
    for entry in folder.iterdir():
        entries.append(entry)
        if len(entries) >= _NEAR_NAME_SCAN:
            break
    return sorted(entries)


def _candidates(data_dir: Path, table: str) -> Iterator[Path]:
    """Every entry named like ``table`` under ``data_dir``, the one to read first (exact case before other cases)."""
    for sub in SUBFOLDERS:
        folder = _child_ci(data_dir, sub) if sub else data_dir
        if folder is None or not folder.is_dir():
            continue
        for suffix in SUFFIXES:
            name = f"{table}{suffix}"
            exact = [folder / name] if os.path.lexists(folder / name) else []
            yield from exact + sorted(p for p in folder.iterdir() if p.name.lower() == name.lower() and p not in exact)


def _regular(path: Path, table: str) -> Path:
    """``path`` when it is a regular file (or a link to one); else file_unreadable, saying what it is.

    Only ``stat`` is called: a FIFO is never opened, so reading never blocks on it."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        what = "a link to nothing" if path.is_symlink() else (exc.strerror or type(exc).__name__)
        raise _load_error(table, "file_unreadable", path=path, detail=f"It is not a regular file: {what}") from None
    if stat.S_ISREG(mode):
        return path
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((kind for test, kind in kinds if test(mode)), "not a file")
    link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
    raise _load_error(table, "file_unreadable", path=path,
                      detail=f"It is not a regular file but {what}{link}; badpoints reads regular files only")


def _child_ci(folder: Path, name: str) -> Path | None:
    """The entry of ``folder`` named ``name`` case-insensitively (exact match preferred)."""
    exact = folder / name
    if exact.exists():
        return exact
    matches = sorted(p for p in folder.iterdir() if p.name.lower() == name.lower())
    return matches[0] if matches else None


def read_table(path: Path, table: str, *, block_bytes: int = BLOCK_BYTES,
               max_expanded_bytes: int = MAX_EXPANDED_BYTES, max_expansion_ratio: float = MAX_EXPANSION_RATIO,
               max_field_chars: int = MAX_FIELD_CHARS) -> TextTable:
    """Read the needed columns of one raw table as text, keeping each row's source line: the blocks of
    :func:`read_blocks` put together."""
    blocks = read_blocks(path, table, block_bytes=block_bytes, max_expanded_bytes=max_expanded_bytes,
                         max_expansion_ratio=max_expansion_ratio, max_field_chars=max_field_chars)
    frames = list(blocks)
    frame = frames[0] if len(frames) == 1 else pd.concat(frames)
    return TextTable(table=table, path=blocks.path, sha256=blocks.sha256, frame=frame, problems=blocks.problems)


def read_blocks(path: Path, table: str, *, block_bytes: int = BLOCK_BYTES,
                max_expanded_bytes: int = MAX_EXPANDED_BYTES, max_expansion_ratio: float = MAX_EXPANSION_RATIO,
                max_field_chars: int = MAX_FIELD_CHARS) -> "TextBlocks":
    """Read one raw table as a stream of text blocks of about ``block_bytes`` bytes of the file's text each.

    Memory stays bounded by about a block whatever the file's size: the text is read (a ``.gz`` decompressed)
    as a stream and cut just after a newline outside quotes, so neither a quoted field nor a UTF-8 sequence is
    ever split. A ``.gz`` file is refused (``decompression_bound``) as soon as its text passes
    ``max_expanded_bytes``, or ``max_expansion_ratio`` times the file's size beyond the first
    :data:`RATIO_FREE_BYTES`. Rows with a read field longer than ``max_field_chars`` are left out and
    reported (``field_too_long``, in ``problems`` once the blocks were all taken). A problem of the file
    (``file_empty``, ``encoding``, header problems, ``malformed_row``, ``table_empty`` ...) is raised while
    iterating, after the whole file was looked at, so it is the one (with every line) that reading the file
    at once finds; blocks taken before it must then be dropped.
    """
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be at least 1, not {block_bytes}")
    return TextBlocks(Path(path), table, block_bytes=block_bytes, max_expanded_bytes=max_expanded_bytes,
                      max_expansion_ratio=max_expansion_ratio, max_field_chars=max_field_chars)


class TextBlocks:
    """One raw table as text blocks, in file order: each like :attr:`TextTable.frame` (needed columns under
    canonical names, ``str``, index = source line). What only the whole file tells is set once the last block
    was taken: ``sha256`` (of the file's bytes), ``rows`` and ``problems`` (rows left out, field_too_long)."""

    def __init__(self, path: Path, table: str, *, block_bytes: int, max_expanded_bytes: int,
                 max_expansion_ratio: float, max_field_chars: int) -> None:
        self.path = path
        self.table = table
        self.sha256: str | None = None
        self.rows = 0
        self.problems: tuple[StageError, ...] = ()
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
        undecodable = _Undecodable()
        failure: StageError | None = None  # the first problem of the rows: raised once the whole file was read
        ragged: list[int] = []  # rows with another number of fields than the header: all of them are reported
        long_fields = _LongFields(max_field_chars)
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
                    header, header_bytes, header_lines = _read_header(piece, path, table)
                    columns = _select_columns(header, path, table)
                except StageError as problem:
                    failure = problem
                    continue
                piece, line = piece[header_bytes:], 1 + header_lines
            data = pending + piece if pending else piece
            if not data:
                continue
            try:
                frame, bad_rows = _parse_block(data, header, columns, line, path, table, last=last)
            except _OpenQuote:
                pending = data
                continue
            except StageError as problem:
                failure = problem
                continue
            pending = b""
            line += data.count(b"\n") + _lone_crs(data)
            ragged += bad_rows
            if ragged:
                continue  # only more ragged rows are looked for now
            frame = long_fields.drop(frame)
            if len(frame):
                self.rows += len(frame)
                yield frame
        self.sha256 = digest.hexdigest()
        if blank:
            raise _load_error(table, "file_empty", path=path)
        if undecodable.count:
            raise undecodable.error(path, table)
        if failure is not None:
            raise failure
        if ragged:
            raise _load_error(
                table, "malformed_row", path=path, lines=ragged, count=len(ragged),
                detail=f"Rows with a different number of fields than the header's {len(header)}",
            )
        too_long = long_fields.problem(path, table)
        if not self.rows and too_long is None:
            raise _load_error(table, "table_empty", path=path, detail="Only the header line was found")
        if not self.rows:  # every row was too long: no table was read, whatever field_too_long's severity
            raise _load_error(table, "table_empty", path=path, detail=f"Every row was left out: {too_long.detail}")
        self.problems = (too_long,) if too_long else ()


def locate_tables(data_dir: Path) -> tuple[dict[str, Path], list[StageError]]:
    """Where each table is, collecting the tables that could not be found."""
    found: dict[str, Path] = {}
    problems: list[StageError] = []
    for table in TABLES:
        try:
            found[table] = locate_table(data_dir, table)
        except StageError as problem:
            problems.append(problem)
            continue
        others = [path for path in _candidates(Path(data_dir), table) if path != found[table]]
        if others:
            problems.append(_load_error(
                table, "file_ambiguous", path=found[table], count=len(others),
                detail=f"Read {str(found[table])!r}; also found, not read: " + ", ".join(repr(str(p)) for p in others)))
    return found, problems


def file_sha256(path: Path, table: str) -> str:
    """The content hash of a raw file, streamed (the file is not held in memory)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError as exc:
        raise _load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None


def load_text_tables(data_dir: Path) -> tuple[dict[str, TextTable], list[StageError]]:
    """Read all three tables, collecting file problems instead of stopping at the first."""
    located, problems = locate_tables(data_dir)
    tables: dict[str, TextTable] = {}
    for table, path in located.items():
        try:
            tables[table] = read_table(path, table)
        except StageError as problem:
            problems.append(problem)
        else:
            problems.extend(tables[table].problems)
    return tables, sorted(problems, key=lambda p: TABLES.index(p.table))


# -- reading ---------------------------------------------------------------------------------
def _load_error(
    table: str,
    check: str,
    *,
    path: Path | None = None,
    lines: list[int] | None = None,
    count: int = 1,
    column: str | None = None,
    detail: str = "",
) -> StageError:
    where = f"{path}" if path is not None else table
    lines = lines or []
    return StageError(
        stage="load",
        side="input",
        check=check,
        column=column,
        count=count,
        failure_cases=pd.DataFrame({"line": pd.Series(lines[:SAMPLE_CAP], dtype="int64")}),
        table=table,
        detail=f"{check_info(check).title} in {where}" + (f". {detail}" if detail else ""),
        advice=check_info(check).advice,
        whole_file=check in WHOLE_FILE,
    )


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
        raise _load_error(table, "file_missing", path=path) from None
    except OSError as exc:
        raise _load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None
    with handle:
        first = True
        while True:
            try:
                chunk = handle.read(size)
            except OSError as exc:
                raise _load_error(table, "file_unreadable", path=path,
                                  detail=exc.strerror or type(exc).__name__) from None
            if not chunk:
                return
            digest.update(chunk)
            if first and chunk.startswith(_GZIP_MAGIC):
                raise _load_error(table, "compression", path=path,
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
        raise _load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None
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
                        raise _load_error(
                            table, "decompression_bound", path=path,
                            detail=f"It expands to more than {bound:,.0f} bytes of text, over {which}; "
                                   "decompression stopped there and the table was not read")
                    yield chunk
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
            reason = "truncated or corrupt stream" if source.head == _GZIP_MAGIC else "not a gzip file"
            raise _load_error(table, "compression", path=path, detail=f"{reason} ({type(exc).__name__})") from None
        except OSError as exc:
            raise _load_error(table, "file_unreadable", path=path, detail=exc.strerror or type(exc).__name__) from None


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


def _is_utf8(data: bytes) -> bool:
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    try:  # the bytes as one large_string value, without a copy
        pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(data)).validate(full=True)
        return True
    except pa.ArrowInvalid:
        return False


class _Undecodable:
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
        return _load_error(
            table, "encoding", path=path, lines=sorted(set(self.lines)), count=self.count,
            detail="Counted are undecodable byte sequences; the table was not read further",
        )


def _read_header(data: bytes, path: Path, table: str) -> tuple[list[str], int, int]:
    """The header record, whatever the line endings (LF, CRLF or a lone CR), with the bytes and lines it takes."""
    text = data[:_HEADER_BYTES].decode("utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, [])
    except csv.Error:
        raise _load_error(table, "malformed_row", path=path, lines=[1],
                          detail="The header line is not valid CSV (a quote that never closes?)") from None
    lines = itertools.islice(io.StringIO(text, newline=""), reader.line_num)
    size = sum(len(line.encode("utf-8")) for line in lines) + (3 if data.startswith(codecs.BOM_UTF8) else 0)
    return header, size, reader.line_num


def _canonical(name: str) -> str:
    upper = name.strip().upper()
    return ALIASES.get(upper, upper)


def _printable(name: str) -> str:
    """A header name as shown in a message: identifiers only, never a data value."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ ]{0,39}", name):
        return name
    return f"<non-identifier, {len(name)} chars>"


def _select_columns(header: list[str], path: Path, table: str) -> dict[str, str]:
    """Map canonical name -> header name for the columns to read; check duplicates and required."""
    canonical = [_canonical(name) for name in header]
    seen = pd.Series(canonical)
    duplicated = sorted(set(seen[seen.duplicated()]))
    if duplicated:
        raise _load_error(
            table, "duplicate_header", path=path, lines=[1],
            detail="Duplicated: " + ", ".join(_printable(name) for name in duplicated),
        )
    wanted = REQUIRED[table] + OPTIONAL[table] + (ADMISSION_CATEGORICALS if table == "ADMISSIONS" else ())
    by_name = dict(zip(canonical, header))
    missing = [name for name in REQUIRED[table] if name not in by_name]
    if missing:
        found = ", ".join(_printable(name) for name in header[:30]) or "nothing"
        hint = ""
        if len(header) == 1 and re.search(r"[;\t|]", header[0]):
            hint = ". The header has no commas but contains ';', tab or '|': is the file delimited by another character?"
        raise _load_error(
            table, "missing_column", path=path, lines=[1], column=", ".join(missing),
            detail=f"Expected {', '.join(REQUIRED[table])}; found {found}{hint}",
        )
    return {name: by_name[name] for name in wanted if name in by_name}


class _OpenQuote(Exception):
    """A block (not the last) ended inside a quote: it is read again with the next one."""


def _parse_block(data: bytes, header: list[str], columns: dict[str, str], line: int, path: Path, table: str, *,
                 last: bool) -> tuple[pd.DataFrame, list[int]]:
    """One block's rows (its first line is ``line``) and the lines of its ragged rows: fast through pyarrow;
    exact line numbers through the csv module when rows span lines."""
    ragged: list[int] = []
    convert = pv.ConvertOptions(
        include_columns=list(columns.values()),
        column_types={name: pa.string() for name in columns.values()},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        check_utf8=False,  # _Undecodable checked every byte of the block
    )
    arrow, block = None, min(_BLOCK, max(_MIN_ARROW_BLOCK, len(data) // 4))  # parts parsed on threads
    while arrow is None:
        ragged.clear()
        try:
            arrow = pv.read_csv(
                pa.py_buffer(data),
                read_options=pv.ReadOptions(use_threads=True, block_size=block, column_names=header),
                parse_options=pv.ParseOptions(invalid_row_handler=lambda row: ragged.append(1) or "skip"),
                convert_options=convert,
            )
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
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
    if lines != rows or _lone_crs(data):
        return False
    tail = data[data.rfind(b"\n", 0, len(data) - 1) + 1:].decode("utf-8")
    try:
        with _any_field_size():
            for _ in csv.reader(io.StringIO(tail, newline=""), strict=True):
                pass
    except csv.Error as exc:
        return _OPEN_AT_END not in str(exc)
    return True


def _lone_crs(data: bytes) -> int:
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
            raise _OpenQuote from None
        raise _load_error(
            table, "malformed_row", path=path, lines=[line + end],
            detail=f"A quote opened at line {line + end} never closes; nothing after it could be read",
        ) from None
    values = np.array(records, dtype=object).reshape(len(records), len(positions))
    frame = pd.DataFrame(values, columns=list(columns), index=pd.Index(lines, name="line", dtype="int64"))
    return frame.replace("", None).astype("str"), ragged


class _LongFields:
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
        return _load_error(
            table, "field_too_long", path=path, lines=self.lines, count=count, column=column,
            detail=f"{rows} with a field longer than [load] max_field_chars ({self.max_chars:,} characters), the "
                   f"longest a field of {chars:,} characters ({chars / 2**20:.1f} MiB) in {column} at line {line}; "
                   f"{'it was' if count == 1 else 'they were'} left out and the rest of the table read",
        )
