"""What ``badpoints cache`` shows of the cache's folder (:func:`contents`, :func:`shown_lines`) and how ``--clear``
empties it (:func:`clear`): only a folder :func:`pipeline.cache.recognised` takes for a cache, and in it only the files
the cache writes."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pipeline.cache import ENTRY, FOLDERS, MAX_BYTES, TAG, TEMPORARY, CacheError, recognised, tag_of, write_tag
from schemas.pyg import size_text


@dataclass(frozen=True)
class Contents:
    """A cache folder's entries (tables, reports), their bytes with any temporary files, its mode and owner (None
    when there is no folder), the files in its folders the cache did not write (never removed), and whether its
    ``CACHEDIR.TAG`` is damaged (not badpoints')."""

    root: Path
    tables: int = 0
    reports: int = 0
    bytes: int = 0
    mode: int | None = None
    ours: bool = True  # this user's folder
    others: tuple[str, ...] = ()
    damaged_tag: bool = False

    @property
    def entries(self) -> str:
        return f"{_count(self.tables, 'table')} and {_count(self.reports, 'report')}, {size_text(self.bytes)}"


def contents(root: Path) -> Contents:
    """What the cache at ``root`` holds; a folder that is not a badpoints cache is a :class:`CacheError`."""
    root = Path(os.path.abspath(root))
    if not _checked(root):
        return Contents(root)
    info = root.stat()
    counted = _entries(root)
    return Contents(root, tables=sum(p.parent.name == "tables" and p.suffix == ".parquet" for p, _ in counted),
                    reports=sum(p.parent.name == "reports" and ENTRY.fullmatch(p.name) is not None for p, _ in counted),
                    bytes=sum(size for _, size in counted), mode=stat.S_IMODE(info.st_mode),
                    ours=info.st_uid == os.geteuid(), others=_others(root), damaged_tag=tag_of(root) is False)


def clear(root: Path) -> Contents:
    """Remove the entries of the cache at ``root`` (and temporary files): what was removed. The folder, its tag (a
    damaged one written again) and any file the cache did not write stay; a folder that is not a badpoints cache is a
    :class:`CacheError`, and nothing in it is touched."""
    held = contents(root)
    if held.mode is None:
        return held
    for path, _ in _entries(held.root):
        try:
            path.unlink()
        except FileNotFoundError:  # pruned meanwhile by a run
            continue
        except OSError as exc:
            raise CacheError(f"cannot remove {path} ({exc.strerror or type(exc).__name__}): the cache is only partly "
                             "cleared; check the folder's owner and permissions") from None
    if held.damaged_tag:
        try:
            write_tag(held.root, replace=True)
        except OSError as exc:
            raise CacheError(f"cannot write {held.root / TAG} ({exc.strerror or type(exc).__name__}): the cache is "
                             "cleared, but its tag is still damaged") from None
    return held


def shown_lines(held: Contents, *, max_bytes: int = MAX_BYTES) -> list[str]:
    """``badpoints cache``: where the cache is, what it holds, who can read it, and how to remove it."""
    lines = [f"cache: {held.root}"]
    if held.mode is None:
        return [*lines, "  none yet: the first validate or build without --no-cache makes it (private to you)"]
    lines.append(f"  holds {held.entries} (at most {size_text(max_bytes)}: the least recently used go first)")
    if held.mode & 0o077 == 0:
        lines.append(f"  mode {held.mode:04o}: private to you")
    elif held.ours:
        lines.append(f"  mode {held.mode:04o}: others can read it; the next run that uses it makes it private")
    else:
        lines.append(f"  mode {held.mode:04o}, another user's folder: others can read it, and badpoints leaves it so")
    if held.damaged_tag:
        lines.append(f"  its {TAG} is damaged: the next run, or badpoints cache --clear, writes it again")
    lines += _left(held)
    return [*lines, "  parsed copies of the tables: badpoints cache --clear removes them; --no-cache keeps none"]


def cleared_lines(removed: Contents) -> list[str]:
    """``badpoints cache --clear``: what was removed from where, and what was left."""
    if removed.mode is None:
        return [f"cache: {removed.root}", "  nothing to clear: no such folder"]
    marked = f"marked as a cache (its damaged {TAG} written again)" if removed.damaged_tag else "marked as a cache"
    return [f"cache: {removed.root}", f"  removed {removed.entries}; the folder stays, {marked}",
            *_left(removed)]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _left(held: Contents) -> list[str]:
    if not held.others:
        return []
    shown = ", ".join(held.others[:5]) + (", ..." if len(held.others) > 5 else "")
    return [f"  {_count(len(held.others), 'file')} the cache did not write, left alone: {shown}"]


def _checked(root: Path) -> bool:
    """True when ``root`` is a badpoints cache, False when there is no such folder; anything else a CacheError."""
    if not os.path.lexists(root):
        return False
    if not root.is_dir():
        raise CacheError(f"{root} is not a folder, so not a badpoints cache; nothing was touched (check --cache-dir "
                         "and $BADPOINTS_CACHE_DIR)")
    try:
        known = recognised(root)
    except OSError as exc:
        raise CacheError(f"cannot read {root} ({exc.strerror or type(exc).__name__})") from None
    if not known:
        raise CacheError(f"{root} is not a badpoints cache: it has no {TAG} of badpoints' and holds files a cache "
                         "does not write; nothing was touched (check --cache-dir and $BADPOINTS_CACHE_DIR)")
    return True


def _entries(root: Path) -> list[tuple[Path, int]]:
    """The files the cache wrote in its folders (entries and temporary files), with their sizes."""
    found = []
    for name in FOLDERS:
        folder = root / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        for path in sorted(folder.iterdir()):
            if ENTRY.fullmatch(path.name) or TEMPORARY.fullmatch(path.name):
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile by a run
                    info = path.lstat()
                    if stat.S_ISREG(info.st_mode):
                        found.append((path, info.st_size))
    return found


def _others(root: Path) -> tuple[str, ...]:
    """The files in the cache's folders that the cache did not write (in a tagged folder: someone put them there)."""
    left = []
    for name in FOLDERS:
        folder = root / name
        if folder.is_dir() and not folder.is_symlink():
            left += [f"{name}/{p.name}" for p in sorted(folder.iterdir())
                     if not (ENTRY.fullmatch(p.name) or TEMPORARY.fullmatch(p.name)) or not p.is_file()]
    return tuple(left)
