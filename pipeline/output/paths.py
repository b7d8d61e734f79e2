"""Where a build may write: output folder rules, kept apart from the writer so the CLI loads no torch for them."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

MARKER = ".badpoints"  # says the folder holds a badpoints build, so a rebuild may replace its files
HOLDER_WAIT = 2.0  # seconds a refused build reads the marker again while it names no running holder


class OutputError(ValueError):
    """The output folder cannot be used (inside the input, holding the input, someone else's folder, not
    writable, or held by another build), or a write into it failed: the CLI's "cannot run" (exit 2)."""


def check_output_dir(out_dir: Path, data_dir: Path) -> Path:
    """The resolved output folder, refused if it is or sits inside the input, holds the input, or holds
    someone else's files."""
    out, data = Path(out_dir).resolve(), Path(data_dir).resolve()
    if out == data or data in out.parents:
        raise OutputError(f"output folder {str(out)!r} is inside the input folder {str(data)!r}; choose another")
    if out in data.parents:
        raise OutputError(f"input folder {str(data)!r} is inside the output folder {str(out)!r}; a build replaces "
                          "its output folder's files, so choose an output folder outside the input")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise OutputError(f"{str(out)!r} exists and is not a badpoints build folder; badpoints will not "
                          "overwrite it. Choose an empty or new folder")
    return out


def os_reason(exc: OSError) -> str:
    """An OS error as a user reads it: the reason and the path it names, e.g. 'No space left on device: /out/x'."""
    reason = exc.strerror or type(exc).__name__
    return f"{reason}: {exc.filename}" if exc.filename else reason


@contextlib.contextmanager
def claim_output_dir(out_dir: Path) -> Iterator[Path]:
    """Hold the output folder for a whole build: created, shown writable, and locked against other builds.

    The lock is an exclusive ``flock`` on the folder's :data:`MARKER`, which holds the holder's pid; a second build
    is refused at once (:class:`OutputError`, exit 2, naming that pid), never made to wait or interleave. A build
    that leaves nothing in the folder but a marker it created removes the marker again, and the folder too if it
    created it: a failed first build leaves the folder as it found it.
    """
    out = Path(out_dir)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        # Nameless where the system allows (O_TMPFILE): a build killed here leaves no file in the user's folder.
        with tempfile.TemporaryFile(dir=out) as probe:
            probe.write(b"badpoints")
    except OSError as exc:
        blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
        reason = f"{str(blocking)!r} is a file, not a folder" if blocking else os_reason(exc)
        raise OutputError(f"cannot write the output folder {str(out)!r} ({reason}); create it and make it "
                          "writable, or choose another --out") from None
    fd, marked = _lock(out)
    try:
        try:
            _record_pid(fd)
        except OSError as exc:
            raise OutputError(f"cannot write the output folder {str(out)!r} ({os_reason(exc)})") from None
        yield out
    finally:
        unused = False
        with contextlib.suppress(OSError):
            if marked and [p.name for p in out.iterdir()] == [MARKER]:  # nothing written: leave no marker behind
                (out / MARKER).unlink()  # while still held: a contender that opened it is refused, not let in
                unused = created
        os.close(fd)  # releases the lock
        if unused:
            with contextlib.suppress(OSError):
                out.rmdir()


def _lock(out: Path) -> tuple[int, bool]:
    """The marker opened and locked (``flock``, exclusive, never waiting), and whether this build created it. A
    contender opens the marker without truncating it, so the holder's pid stays readable; a marker its holder
    removed before the lock was won is opened anew."""
    path = out / MARKER
    for _ in range(100):
        try:
            fd, marked = _open_marker(path)
        except OSError as exc:
            raise OutputError(f"cannot lock the output folder {str(out)!r} ({os_reason(exc)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd) if exc.errno in (errno.EAGAIN, errno.EACCES) else None
            os.close(fd)
            if holder is None:
                raise OutputError(f"cannot lock the output folder {str(out)!r} ({os_reason(exc)})") from None
            raise OutputError(f"another badpoints build{holder} is writing {str(out)!r}; wait for it to finish, "
                              "or choose another --out") from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd, marked
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed it as it left: the lock is on a file no longer there
    raise OutputError(f"cannot lock the output folder {str(out)!r} (its {MARKER} keeps being replaced)")


def _open_marker(path: Path) -> tuple[int, bool]:
    """The marker opened for reading and writing (never truncated, never through a link), and whether this call
    created it."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        return os.open(path, flags), False


def _record_pid(fd: int) -> None:
    """The holder's pid written into its locked marker, for the message a refused build gives."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)


def _holder(fd: int) -> str:
    """' (pid N)' as the lock holder recorded it in the marker (read through the refused build's own descriptor, so
    from the holder's file), or '' when none is recorded. A holder records its pid just after it took the lock, so
    while the marker names no running process this reads again, for at most :data:`HOLDER_WAIT` seconds; then the
    last pid read, if any."""
    deadline, pid = time.monotonic() + HOLDER_WAIT, None
    while True:
        pid = _recorded_pid(fd) or pid
        if (pid is not None and _running(pid)) or time.monotonic() >= deadline:
            return f" (pid {pid})" if pid is not None else ""
        time.sleep(0.01)


def _recorded_pid(fd: int) -> int | None:
    """The pid a marker records: a whole line of digits, or None."""
    try:
        line, newline, _ = os.pread(fd, 64, 0).partition(b"\n")
    except OSError:
        return None
    return int(line) if newline and line.isdigit() and int(line) > 0 else None


def _running(pid: int) -> bool:
    """Whether a process of this pid runs (another user's included)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True
