"""A build's files staged in OUT_DIR's staging folder while the previous build stays as it was, then switched into
place (:class:`StagedBuild`); the build's scratch (:func:`write_scratch`). The writing half of
:mod:`pipeline.output.write`, which serialises what is staged here."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.output.paths import OutputError, os_reason
from pipeline.reporting.report import atomic_path, write_atomic

MANIFEST = "manifest.json"
STAGING = ".badpoints-staging"  # new files are written here, then renamed into place
PREVIOUS = "previous-manifest.json"  # in STAGING while files are switched: the replaced build's list
# The names a build writes, of either target: only these, and only when a previous manifest lists them, does a
# rebuild remove (a build to graphs removes the MEDS files a build to MEDS left, and the other way round).
OUTPUT_NAME = re.compile(r"(stats|report)\.json|report\.html|(index|quarantine|labels|label_splits)\.parquet"
                         r"|graphs/[A-Za-z0-9_-]+/batch_\d{5}\.pt"
                         r"|data/[A-Za-z0-9_-]+/\d+\.parquet"
                         r"|metadata/(codes|subject_splits)\.parquet|metadata/dataset\.json")


def json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class StagedFile:
    """An output written into the staging folder as it was made: its name, hash and size (for the manifest)."""

    name: str
    sha256: str
    bytes: int


class StagedBuild:
    """A build's files staged one by one in OUT_DIR's staging folder while the previous build stays as it was;
    :meth:`commit` switches them in by renames (manifest last) and drops what only the previous build listed,
    :meth:`abandon` (a build that found errors) drops them. A file that holds exactly the same bytes already is
    not staged (a rebuild leaves it as it is)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.stage = self.out_dir / STAGING
        self.earlier = _listed(self.out_dir / MANIFEST) | _listed(self.stage / MANIFEST) | _listed(
            self.stage / PREVIOUS)
        self.names: set[str] = set()
        self.changed: list[str] = []
        self.folders: list[Path] = []  # made in OUT_DIR for the staged files, just before the switch
        self.switching = False
        self._attempt(lambda: _clear(self.stage))  # what a killed build staged: whole files or temp files

    def add(self, name: str, data: bytes) -> StagedFile:
        """``data`` staged as ``name`` (unless OUT_DIR holds the same bytes already): its hash and size."""
        self._attempt(lambda: self.took(name, stage_file(self.out_dir, name, data)))
        return StagedFile(name=name, sha256=sha256_of(data), bytes=len(data))

    def took(self, name: str, staged: bool | OSError) -> None:
        """``name`` is one of this build's files, ``staged`` (:func:`stage_file`, where it was made) or already in
        place; an OSError: it could not be staged (the staged files go: :class:`OutputError`)."""
        if isinstance(staged, OSError):
            self._attempt(functools.partial(_raise, staged))
        self.names.add(name)
        if staged:
            self.changed.append(name)

    def add_written(self, name: str, write: Callable[[Path], None]) -> StagedFile:
        """A file ``write(path)`` writes, staged as ``name`` (unless OUT_DIR holds the same bytes already): its hash and
        size, read back from the staged file in blocks, never whole in memory."""
        found: list[StagedFile] = []

        def stage() -> None:
            target = self.stage / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with _named(target), atomic_path(target) as tmp:
                write(tmp)
            sha256, size = _file_sha256(target)
            same = _same_file(self.out_dir / name, sha256, size)
            if same:
                target.unlink()
            self.took(name, not same)
            found.append(StagedFile(name=name, sha256=sha256, bytes=size))

        self._attempt(stage)
        return found[0]

    def abandon(self) -> None:
        """Drop what was staged, and the folders made for it in OUT_DIR, unless the switch began: then the staging
        folder holds the previous build's list (a switch cut short is finished by the next build)."""
        if self.switching:
            return
        with contextlib.suppress(OSError):
            _clear(self.stage)
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):  # one that holds something now stays
                folder.rmdir()
        self.folders.clear()

    def commit(self, manifest: dict[str, Any]) -> None:
        out_dir, stage, changed = self.out_dir, self.stage, sorted(self.changed)

        def staged_manifest() -> None:
            stage.mkdir(exist_ok=True)
            write_atomic(stage / MANIFEST, json_bytes(manifest))
            self._make_folders(changed)

        self._attempt(staged_manifest)
        self.switching = True
        try:
            if changed and (out_dir / MANIFEST).exists():
                os.replace(out_dir / MANIFEST, stage / PREVIOUS)  # uncommit; its list stays for the next build
            for name in changed:
                os.replace(stage / name, out_dir / name)
            os.replace(stage / MANIFEST, out_dir / MANIFEST)  # commit
        except OSError as exc:
            raise _write_failed(out_dir, exc, "it holds no finished build until a rebuild completes") from None
        try:
            for name in sorted(self.earlier - self.names):
                path = out_dir / name
                path.unlink(missing_ok=True)
                _remove_empty(path.parent, out_dir)
            _clear(stage)
        except OSError as exc:
            raise _write_failed(out_dir, exc, "the new build is complete, but files of the previous one are left") \
                from None

    def _make_folders(self, names: list[str]) -> None:
        """The folders of OUT_DIR that staged files go into, made just before the switch (which then only renames):
        until then a build makes nothing in OUT_DIR but its staging folder. Each one made is recorded, and goes again
        if the build stops before the switch."""
        for name in names:
            for folder in reversed(Path(name).parents[:-1]):  # 'data/train/0.parquet': data, then data/train
                path = self.out_dir / folder
                if not path.is_dir():
                    path.mkdir()
                    self.folders.append(path)

    def _attempt(self, write: Any) -> None:
        """A write before the switch: on failure, the staged files go and the previous build is unchanged."""
        try:
            write()
        except OSError as exc:
            self.abandon()
            raise _write_failed(self.out_dir, exc, "the previous build there is unchanged") from None


def write_scratch(path: Path, write: Callable[[Path], None]) -> None:
    """A file of the build's own scratch inside its staging folder (a part's piece of a MEDS shard), written by
    ``write(path)``: a failed write (a full disk) removes it and is an :class:`OutputError` naming the file and the
    system's reason. Runs wherever OUT_DIR can be seen (a worker); a killed build's scratch goes with its staging
    folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        raise OutputError(f"cannot write {str(path)!r} ({os_reason(exc)}); the previous build there is unchanged. "
                          "Free space or fix the folder, then rebuild") from None


def stage_file(out_dir: Path, name: str, data: bytes) -> bool:
    """``data`` staged as ``name`` in OUT_DIR's staging folder, unless ``out_dir / name`` holds exactly these bytes
    already (a rebuild leaves such a file as it is): whether it was staged. Runs wherever OUT_DIR can be seen (a Dask
    worker stages the graphs it builds); the build that stages records the name (:meth:`StagedBuild.took`)."""
    if _holds(Path(out_dir) / name, data):
        return False
    target = Path(out_dir) / STAGING / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with _named(target):
        write_atomic(target, data)
    return True


@contextlib.contextmanager
def _named(path: Path) -> Iterator[None]:
    """The block's OSError that names no file (a write's, a full disk's) made to name ``path``, the file written."""
    try:
        yield
    except OSError as exc:
        if not exc.filename:
            exc.filename = str(path)
        raise


def _raise(problem: OSError) -> None:
    raise problem


def _file_sha256(path: Path) -> tuple[str, int]:
    """A file's sha256 (streamed, never whole in memory) and size."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest(), os.fstat(handle.fileno()).st_size


def _same_file(path: Path, sha256: str, size: int) -> bool:
    """Whether ``path`` is a file of this size and hash (then a rebuild leaves it as it is)."""
    try:
        return path.is_file() and path.stat().st_size == size and _file_sha256(path)[0] == sha256
    except OSError:
        return False


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` already holds exactly ``data`` (then a rebuild leaves it as it is)."""
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _listed(manifest: Path) -> set[str]:
    """The outputs a manifest lists, of the names a build writes: a rebuild removes these and nothing else."""
    try:
        names = json.loads(manifest.read_text(encoding="utf-8"))["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {name for name in names if isinstance(name, str) and OUTPUT_NAME.fullmatch(name)} \
        if isinstance(names, dict) else set()


def _remove_empty(folder: Path, out_dir: Path) -> None:
    """``folder`` and the folders above it inside OUT_DIR, each removed while it is empty: one that still holds
    something (a file of the user's) stays, and so do those above it."""
    while folder != out_dir and out_dir in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _clear(stage: Path) -> None:
    if stage.exists() or stage.is_symlink():
        shutil.rmtree(stage)


def _write_failed(out_dir: Path, exc: OSError, state: str) -> OutputError:
    return OutputError(f"cannot write the build into {str(out_dir)!r} ({os_reason(exc)}); {state}. Free space "
                       "or fix the folder, then rebuild")
