"""Small real filesystems for tests of full or read-only locations: mounted for a block, unmounted after.

They need mount rights (root in a container that allows it); a test is skipped with the reason where there are none.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def mounted(folder: Path, *options: str, what: str) -> Iterator[Path]:
    """``mount OPTIONS folder`` for the block (``folder`` is created), then ``umount``; skip when it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or subprocess.run(["mount", *options, str(folder)],
                                                       capture_output=True).returncode:
        pytest.skip(f"cannot make {what} here (not root, or no mount rights in this container)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def small_tmpfs(folder: Path, size: str) -> contextlib.AbstractContextManager[Path]:
    """A tmpfs of ``size`` (``"64k"``) at ``folder``: a real disk that fills up."""
    return mounted(folder, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", what=f"a {size} tmpfs")
