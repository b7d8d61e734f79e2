"""The cache: raw-checked tables as Parquet, and whole reports, keyed by what produced them.

A table entry is keyed by the file's content hash, the checks' settings and the
code that checks it (badpoints' version and a digest of its source), so a
changed input invalidates only its own table and a changed badpoints
invalidates everything. A report entry is keyed by every input's hash and the
whole effective config: ``badpoints validate`` of unchanged inputs returns the
report at once. Entries are written atomically and verified by hash when read;
an entry that fails is ignored and rebuilt. The cache holds parsed copies of
the data: keep it where the data may live (``--cache-dir``), or use
``--no-cache``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.parse import RawResult, RawTables
from pipeline.report import Finding, InputFile, Report, atomic_path, write_atomic

ENV = "BADPOINTS_CACHE_DIR"
FORMAT = 2
INDEX = "line"  # a table's index: the source line of each row
SLICE_ROWS = 1 << 20  # rows converted to Arrow at a time when a table is stored


def default_dir() -> Path:
    """``$BADPOINTS_CACHE_DIR``, else ``$XDG_CACHE_HOME/badpoints``, else ``~/.cache/badpoints``."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "badpoints"


@lru_cache(maxsize=1)
def code_digest() -> str:
    """badpoints' version and a hash of every source file that checks or parses data."""
    digest = hashlib.sha256()
    try:
        digest.update(metadata.version("badpoints").encode())
    except metadata.PackageNotFoundError:
        digest.update(b"unknown")
    root = Path(__file__).resolve().parents[1]
    for folder in ("pipeline", "schemas"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file():
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def key_of(*parts: Any) -> str:
    """A stable key for JSON-able parts."""
    text = json.dumps([FORMAT, code_digest(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Cache:
    """A cache folder; ``max_bytes`` bounds it (least recently used entries go first)."""

    root: Path
    max_bytes: int = 8 * 2**30

    # -- raw-checked tables ------------------------------------------------------------------
    def get_table(self, table: str, key: str) -> RawResult | None:
        meta = self._read_json(self.root / "tables" / f"{key}.json")
        path = self.root / "tables" / f"{key}.parquet"
        if meta is None or meta.get("table") != table:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != meta.get("parquet_sha256"):
            return None
        try:
            frame = pq.read_table(pa.BufferReader(data)).to_pandas().set_index(INDEX)
        except (pa.ArrowException, ValueError, KeyError):
            return None
        _touch(path)
        _touch(path.with_suffix(".json"))
        findings = [Finding(**record) for record in meta["findings"]]
        return RawResult(tables=RawTables.only(table, frame), findings=findings)

    def put_table(self, table: str, key: str, result: RawResult) -> None:
        """Store a checked table: Parquet written slice by slice (memory stays bounded), then its metadata."""
        # The source lines as a column, so every slice has the same schema (a RangeIndex would not).
        frame = result.tables.of(table).rename_axis(INDEX).reset_index()
        folder = self._folder("tables")
        path = folder / f"{key}.parquet"
        with atomic_path(path) as tmp:
            schema = pa.Schema.from_pandas(frame.head(0), preserve_index=False)
            with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
                for start in range(0, max(len(frame), 1), SLICE_ROWS):
                    part = frame.iloc[start:start + SLICE_ROWS]
                    writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False))
            with open(tmp, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        meta = {"table": table, "parquet_sha256": digest, "findings": [asdict(f) for f in result.findings]}
        write_atomic(folder / f"{key}.json", json.dumps(meta).encode())
        self.prune()

    @contextlib.contextmanager
    def writing_behind(self) -> Iterator[Callable[[str, str, RawResult], None]]:
        """A ``put_table`` that runs on a background thread while the caller goes on (Arrow's conversion,
        encoding and zstd release the GIL, so the write takes the other core). When the block ends, every
        write has finished, or its error is raised."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="badpoints-cache") as pool:
            pending: list[Future] = []
            yield lambda table, key, result: pending.append(pool.submit(self.put_table, table, key, result))
            for write in pending:
                write.result()

    # -- whole reports -------------------------------------------------------------------------
    def get_report(self, key: str, paths: Mapping[str, str]) -> Report | None:
        """The report saved under ``key``, naming the inputs by their ``paths`` now (table -> path)."""
        record = self._read_json(self.root / "reports" / f"{key}.json")
        if record is None:
            return None
        report = Report(
            inputs=[InputFile(**{**i, "path": paths.get(i["table"], i["path"])}) for i in record["inputs"]],
            findings=[Finding(**f) for f in record["findings"]],
            overrides=dict(record["overrides"]),
            attrition=record["attrition"],
        )
        _touch(self.root / "reports" / f"{key}.json")
        return report

    def put_report(self, key: str, report: Report) -> None:
        record = {"inputs": [asdict(i) for i in report.inputs], "findings": [asdict(f) for f in report.findings],
                  "overrides": report.overrides, "attrition": report.attrition}
        write_atomic(self._folder("reports") / f"{key}.json", json.dumps(record).encode())
        self.prune()

    # -- housekeeping --------------------------------------------------------------------------
    def prune(self) -> None:
        """Drop the least recently used entries until the cache fits ``max_bytes``."""
        entries = []
        for path in self.root.glob("*/*"):
            try:
                info = path.stat()
            except OSError:  # removed meanwhile by another run
                continue
            if stat.S_ISREG(info.st_mode):
                entries.append((info.st_mtime, str(path), info.st_size))
        total = sum(size for _, _, size in entries)
        for _, path, size in sorted(entries):
            if total <= self.max_bytes:
                break
            Path(path).unlink(missing_ok=True)
            total -= size

    def _folder(self, name: str) -> Path:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return folder

    @staticmethod
    def _read_json(path: Path) -> Mapping[str, Any] | None:
        try:
            return json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass
