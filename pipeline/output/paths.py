"""Where a build may write: output folder rules, kept apart from the writer so the CLI loads no torch for them."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

MARKER = ".badpoints"  # says the folder holds a badpoints build, so a rebuild may replace its files


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

    The lock is an exclusive ``flock`` (``filelock``) on the folder's :data:`MARKER`, which holds the
    holder's pid; a second build is refused at once (:class:`OutputError`, exit 2), never made to wait or
    interleave. A folder this call created is removed again if the build left nothing in it but the marker.
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
    lock = FileLock(out / MARKER, blocking=False)
    try:
        lock.acquire()
    except Timeout:
        raise OutputError(f"another badpoints build{_holder(out)} is writing {str(out)!r}; wait for it to finish, "
                          "or choose another --out") from None
    except OSError as exc:
        raise OutputError(f"cannot lock the output folder {str(out)!r} ({os_reason(exc)})") from None
    try:
        try:
            (out / MARKER).write_text(f"{os.getpid()}\n", encoding="ascii")  # who holds the lock, for the message
        except OSError as exc:
            raise OutputError(f"cannot write the output folder {str(out)!r} ({os_reason(exc)})") from None
        yield out
    finally:
        unused = False
        with contextlib.suppress(OSError):
            if created and [p.name for p in out.iterdir()] == [MARKER]:  # nothing written: leave no folder behind
                (out / MARKER).unlink()  # while still held: a contender that opened it is refused, not let in
                unused = True
        lock.release()
        if unused:
            with contextlib.suppress(OSError):
                out.rmdir()


def _holder(out: Path) -> str:
    """' (pid N)' as the lock holder recorded it in the marker, or '' when it cannot be read."""
    try:
        pid = (out / MARKER).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
