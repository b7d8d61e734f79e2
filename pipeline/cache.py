"""The cache: raw-checked tables as Parquet, and whole reports, keyed by what produced them.

A table entry is keyed by the file's content hash, the checks' settings and the
code that checks it (badpoints' version and a digest of its source), so a
changed input invalidates only its own table and a changed badpoints
invalidates everything. A report entry is keyed by every input's hash and the
whole effective config: ``badpoints validate`` of unchanged inputs returns the
report at once. Entries are written atomically and verified by hash when read;
an entry that fails is ignored and rebuilt. The cache only saves time, so it
is never fatal: a folder that cannot be made, read or written (not a folder, no
home, a full disk) turns the cache off for the rest of the run, and
:meth:`Cache.warning` says once why; the run's report is the same as without a
cache. The cache holds parsed copies of the data: keep it where the data may
live (``--cache-dir``), or use ``--no-cache``.

So the copies stay the user's: the folder is made private (0700, every entry 0600, whatever the umask) and marked
with a ``CACHEDIR.TAG`` that names badpoints (backup tools skip it; ``badpoints cache --clear`` removes entries only
from a folder it recognises). The run that marks a folder says where it is (:meth:`Cache.notices`), once; an
existing cache of this user's that others could read is made private, and says so. A folder that holds other files
is not used (nor ever cleared).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.reading.parse import RawResult, RawTables
from pipeline.reporting.report import Finding, InputFile, Report, atomic_path

ENV = "BADPOINTS_CACHE_DIR"
FORMAT = 2
INDEX = "line"  # a table's index: the source line of each row
SLICE_ROWS = 1 << 20  # rows converted to Arrow at a time when a table is stored
MAX_BYTES = 8 * 2**30  # least recently used entries go first beyond this
STALE_TMP_SECONDS = 3600  # a temporary file untouched this long was left by a killed run, not a running one
FOLDERS = ("tables", "reports")
TAG = "CACHEDIR.TAG"  # https://bford.info/cachedir/: its first line is the signature; ours names badpoints
SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
TAG_TEXT = (f"{SIGNATURE}\n# This file is a cache directory tag created by badpoints: parsed copies of MIMIC tables.\n"
            "# `badpoints cache` shows where and how much; `badpoints cache --clear` removes them.\n")
PRIVATE_FOLDER, PRIVATE_FILE = 0o700, 0o600
ENTRY = re.compile(r"[0-9a-f]{64}\.(?:json|parquet)")  # a key's entry: its table's Parquet and metadata, or a report
TEMPORARY = re.compile(r"\..+\.tmp")  # a write in progress (pipeline.reporting.report.atomic_path), or one a killed run left


class CacheError(ValueError):
    """A folder that is not a badpoints cache, or one ``badpoints cache`` cannot read or clear: the CLI's "cannot
    run" (exit 2). A run never raises it: there the cache is turned off with one warning."""


def default_dir() -> Path | None:
    """``$BADPOINTS_CACHE_DIR``, else ``$XDG_CACHE_HOME/badpoints``, else ``~/.cache/badpoints``;
    None when there is no home directory to put it in."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return home_dir()


def home_dir() -> Path | None:
    """The folder badpoints names for its cache when none is given: ``$XDG_CACHE_HOME/badpoints``, else
    ``~/.cache/badpoints``; None when there is no home directory to put it in."""
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "badpoints"
    try:
        return Path.home() / ".cache" / "badpoints"
    except RuntimeError:  # no $HOME and no password entry for this user
        return None


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


class _Health:
    """What went wrong with a cache during a run: the failure that turned it off, and damaged entries."""

    def __init__(self) -> None:
        self.opened = False
        self.off: str | None = None
        self.damaged: list[str] = []
        self.marked = False  # this run made the folder a cache (wrote its tag): it says where, once
        self.loosened: int | None = None  # the mode of an existing cache that others could read, made private


@dataclass(frozen=True)
class Cache:
    """A cache folder; ``max_bytes`` bounds it (least recently used entries go first).

    Any failure to use the folder turns the cache off for the rest of the run (every get misses, every put
    is skipped) instead of raising; :meth:`warning` says why.
    """

    root: Path
    max_bytes: int = MAX_BYTES
    _health: _Health = field(default_factory=_Health, init=False, repr=False, compare=False)

    def notices(self) -> list[str]:
        """What a user should know about the folder after :meth:`open`: where the parsed copies go, from the run that
        made it a cache (later runs say nothing), and an existing cache that others could read, made private."""
        where = Path(os.path.abspath(self.root))
        said = []
        if self._health.marked:
            said.append(f"cache: parsed copies of the tables kept in {where} (badpoints cache --clear removes them; "
                        "--no-cache keeps none)")
        if self._health.loosened is not None:
            said.append(f"cache: {where} could be read by others (mode {self._health.loosened:04o}); made private "
                        f"({PRIVATE_FOLDER:04o}, its files {PRIVATE_FILE:04o})")
        return said

    def warning(self) -> str | None:
        """One line on what kept the cache from working during this run, or None when it worked."""
        if self._health.off:
            return f"the cache was not used: {self._health.off}; the run went on without it (as with --no-cache)"
        damaged = self._health.damaged
        if damaged:
            entries = "a damaged cache entry" if len(damaged) == 1 else f"{len(damaged)} damaged cache entries"
            return f"{entries} ignored and rebuilt: {damaged[0]}"
        return None

    # -- raw-checked tables ------------------------------------------------------------------
    def get_table(self, table: str, key: str) -> RawResult | None:
        if not self._usable():
            return None
        meta = self._read_json(self.root / "tables" / f"{key}.json")
        path = self.root / "tables" / f"{key}.parquet"
        if meta is None or meta.get("table") != table:
            return None
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # pruned by a run meanwhile
            return None
        except OSError as exc:
            self._turn_off("cannot read", path, exc)
            return None
        if hashlib.sha256(data).hexdigest() != meta.get("parquet_sha256"):
            self._health.damaged.append(f"{path} (its hash differs from the one recorded)")
            return None
        try:
            frame = pq.read_table(pa.BufferReader(data)).to_pandas().set_index(INDEX)
        except (pa.ArrowException, ValueError, KeyError) as exc:
            self._health.damaged.append(f"{path} ({type(exc).__name__})")
            return None
        try:
            findings = [Finding(**record) for record in meta["findings"]]
        except (KeyError, TypeError) as exc:
            self._health.damaged.append(f"{path.with_suffix('.json')} ({type(exc).__name__})")
            return None
        _touch(path)
        _touch(path.with_suffix(".json"))
        return RawResult(tables=RawTables.only(table, frame), findings=findings)

    def put_table(self, table: str, key: str, result: RawResult) -> None:
        """Store a checked table: Parquet written slice by slice (memory stays bounded), then its metadata."""
        if not self._usable():
            return
        folder = self.root / "tables"
        try:
            self._store_table(folder, table, key, result)
        except (OSError, pa.ArrowException) as exc:  # a full disk, a folder removed meanwhile, ...
            self._turn_off("cannot write", folder / f"{key}.parquet", exc)
            return
        self.prune()

    def _store_table(self, folder: Path, table: str, key: str, result: RawResult) -> None:
        # The source lines as a column, so every slice has the same schema (a RangeIndex would not).
        frame = result.tables.of(table).rename_axis(INDEX).reset_index()
        path = folder / f"{key}.parquet"
        with atomic_path(path) as tmp:
            schema = pa.Schema.from_pandas(frame.head(0), preserve_index=False)
            with _private_file(tmp) as sink, pq.ParquetWriter(sink, schema, compression="zstd") as writer:
                for start in range(0, max(len(frame), 1), SLICE_ROWS):
                    part = frame.iloc[start:start + SLICE_ROWS]
                    writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False))
            with open(tmp, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        meta = {"table": table, "parquet_sha256": digest, "findings": [asdict(f) for f in result.findings]}
        _write_private(folder / f"{key}.json", json.dumps(meta).encode())

    @contextlib.contextmanager
    def writing_behind(self) -> Iterator[Callable[[str, str, RawResult], None]]:
        """A ``put_table`` that runs on a background thread while the caller goes on (Arrow's conversion,
        encoding and zstd release the GIL, so the write takes the other core). When the block ends, every
        write has finished (a write that failed turned the cache off; any other error is raised)."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="badpoints-cache") as pool:
            pending: list[Future] = []
            yield lambda table, key, result: pending.append(pool.submit(self.put_table, table, key, result))
            for write in pending:
                write.result()

    # -- whole reports -------------------------------------------------------------------------
    def get_report(self, key: str, paths: Mapping[str, str]) -> Report | None:
        """The report saved under ``key``, naming the inputs by their ``paths`` now (table -> path)."""
        if not self._usable():
            return None
        path = self.root / "reports" / f"{key}.json"
        record = self._read_json(path)
        if record is None:
            return None
        try:
            report = Report(
                inputs=[InputFile(**{**i, "path": paths.get(i["table"], i["path"])}) for i in record["inputs"]],
                findings=[Finding(**f) for f in record["findings"]],
                overrides=dict(record["overrides"]),
                attrition=record["attrition"],
                summary=[(str(label), str(text)) for label, text in record.get("summary", [])],
            )
        except (KeyError, TypeError, ValueError) as exc:
            self._health.damaged.append(f"{path} ({type(exc).__name__})")
            return None
        _touch(path)
        return report

    def put_report(self, key: str, report: Report) -> None:
        if not self._usable():
            return
        record = {"inputs": [asdict(i) for i in report.inputs], "findings": [asdict(f) for f in report.findings],
                  "overrides": report.overrides, "attrition": report.attrition,
                  "summary": [list(line) for line in report.summary]}
        path = self.root / "reports" / f"{key}.json"
        try:
            _write_private(path, json.dumps(record).encode())
        except OSError as exc:
            self._turn_off("cannot write", path, exc)
            return
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
            try:
                Path(path).unlink(missing_ok=True)
            except OSError as exc:  # a read-only folder: the cache can only grow, so stop using it
                self._turn_off("cannot remove", Path(path), exc)
                return
            total -= size

    def remove_stale_tmp(self, *, older_than: float = STALE_TMP_SECONDS) -> None:
        """Remove the temporary files of writes that never finished (a killed run), once they are ``older_than``
        seconds untouched; a running write's file is younger."""
        now = time.time()
        for path in self.root.glob("*/.*.tmp"):
            try:
                if now - path.lstat().st_mtime > older_than:
                    path.unlink()
            except OSError:  # removed meanwhile, by its run or another cleaning one
                continue

    def open(self) -> None:
        """Make the folder a private, marked cache (once a run; :meth:`notices` then says what a user should know),
        and clear what killed runs left. Any failure turns the cache off; a folder holding other files is not used.
        Every get and put opens it first."""
        health = self._health
        if health.opened:
            return
        health.opened = True
        root = self.root
        try:
            root.mkdir(parents=True, mode=PRIVATE_FOLDER)
            made = True
        except FileExistsError:
            made = False
        except OSError as exc:  # no home, a read-only disk
            self._turn_off("cannot create", root, exc)
            return
        if not made and root.is_dir() and not recognised(root):
            health.off = (f"{root} is not a badpoints cache: it holds files badpoints did not write (name a new or "
                          "empty folder with --cache-dir or $BADPOINTS_CACHE_DIR)")
            return
        for name in FOLDERS:
            try:
                (root / name).mkdir(exist_ok=True, mode=PRIVATE_FOLDER)
            except OSError as exc:  # a file where the folder should be
                self._turn_off("cannot create", root / name, exc)
                return
        try:
            loosened = _make_private(root)
            if tag_of(root) is False:  # a damaged tag: recognised by where the folder is, or what it holds
                write_tag(root, replace=True)
                health.damaged.append(f"{root / TAG} (not badpoints' tag: written again)")
            health.marked = _mark(root)
        except OSError as exc:  # a read-only disk, a folder removed meanwhile
            self._turn_off("cannot make private", root, exc)
            return
        health.loosened = None if made else loosened
        self.remove_stale_tmp()

    def _usable(self) -> bool:
        """Open the folder on first use; False once the cache is off."""
        self.open()
        return self._health.off is None

    def _turn_off(self, what: str, path: Path, exc: BaseException) -> None:
        if self._health.off is None:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            self._health.off = f"{what} {path} ({reason})"

    def _read_json(self, path: Path) -> Mapping[str, Any] | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a miss
            return None
        except OSError as exc:
            self._turn_off("cannot read", path, exc)
            return None
        try:
            return json.loads(data)
        except ValueError:
            self._health.damaged.append(f"{path} (not valid JSON)")
            return None


def recognised(root: Path) -> bool:
    """Whether the folder ``root`` may be used and cleared as a badpoints cache: it holds badpoints' tag, or nothing
    but a cache's folders holding nothing but entries (a folder that is empty, or a cache made before the tag), or a
    damaged tag (a ``CACHEDIR.TAG`` that is not badpoints') and either nothing but such folders or is the folder
    badpoints names when none is given (:func:`home_dir`)."""
    try:
        tag = tag_of(root)
    except OSError:  # a folder named CACHEDIR.TAG, unreadable: not ours to judge
        return False
    if tag or (tag is False and _is_home(root)):
        return True
    for child in root.iterdir():
        if child.name in FOLDERS and child.is_dir() and not child.is_symlink():
            if not all(ENTRY.fullmatch(entry.name) or TEMPORARY.fullmatch(entry.name) for entry in child.iterdir()):
                return False
        elif not (child.is_file() and (TEMPORARY.fullmatch(child.name) or (tag is False and child.name == TAG))):
            return False  # (a temporary file: the tag of a run making the folder now)
    return True


def tag_of(root: Path) -> bool | None:
    """Whether the ``CACHEDIR.TAG`` in ``root`` is badpoints' whole (True) or not (False: damaged, or another tool's);
    None when there is none. An OSError when it cannot be read (a folder of that name)."""
    try:
        with open(root / TAG, "rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    return head.startswith(SIGNATURE) and "badpoints" in head


def _is_home(root: Path) -> bool:
    """Whether ``root`` is the folder badpoints names for its cache when none is given (:func:`home_dir`)."""
    home = home_dir()
    return home is not None and os.path.realpath(root) == os.path.realpath(home)


def _make_private(root: Path) -> int | None:
    """The cache's folders 0700 and its files 0600 where they are this user's; the root's mode before when others
    could read it (and it is ours to change), else None."""
    folders = [root, *(root / name for name in FOLDERS)]
    changed, before = False, None
    for folder in folders:
        info = folder.stat()
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid == os.geteuid() and mode != PRIVATE_FOLDER:
            os.chmod(folder, PRIVATE_FOLDER)
            changed = True
            before = mode if folder == root and mode & 0o077 else before
    if not changed:
        return None  # files written since the cache was private are private: no need to look at each
    for path in [root / TAG, *(entry for folder in folders[1:] for entry in folder.iterdir())]:
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile, by another run's prune
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077:
                os.chmod(path, PRIVATE_FILE)
    return before


def _mark(root: Path) -> bool:
    """Write badpoints' ``CACHEDIR.TAG`` into ``root`` unless it has one: True when this run wrote it (of runs
    starting together, exactly one: the tag appears whole, by a hard link that fails where one exists)."""
    if (root / TAG).exists():
        return False
    try:
        write_tag(root, replace=False)
    except FileExistsError:
        return False
    return True


def write_tag(root: Path, *, replace: bool) -> None:
    """badpoints' ``CACHEDIR.TAG`` in ``root``, appearing whole: linked where there is none (FileExistsError where
    there is one), or put in place of one (``replace``: a damaged tag)."""
    tmp = root / f".{TAG}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with _private_file(tmp) as handle:
            handle.write(TAG_TEXT.encode())
        (os.replace if replace else os.link)(tmp, root / TAG)
    finally:
        tmp.unlink(missing_ok=True)


def _private_file(path: Path) -> BinaryIO:
    """``path`` opened for writing, readable by its owner only (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # a file left by an earlier run keeps its mode through O_CREAT
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def _write_private(path: Path, data: bytes) -> None:
    """Write atomically (:func:`pipeline.reporting.report.atomic_path`) a file only its owner can read."""
    with atomic_path(path) as tmp:
        with _private_file(tmp) as handle:
            handle.write(data)


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass
