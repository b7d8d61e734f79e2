import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# CI runs derandomized so a failure reproduces; locally HYPOTHESIS_PROFILE=dev explores more.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=500)
settings.load_profile("ci")

# The CLI caches raw-checked tables; tests (and the CLI runs they start) use a cache of their own, removed at exit.
if "BADPOINTS_CACHE_DIR" not in os.environ:
    os.environ["BADPOINTS_CACHE_DIR"] = tempfile.mkdtemp(prefix="badpoints-test-cache-")
    atexit.register(shutil.rmtree, os.environ["BADPOINTS_CACHE_DIR"], ignore_errors=True)


@pytest.fixture
def sample_dir() -> Path:
    return ROOT / "data" / "sample"



def _mimic3demo() -> Path:
    """$BADPOINTS_MIMIC3DEMO, else ``shared/real/mimic3demo`` beside the project (or beside a folder above it,
    as for a git worktree)."""
    if os.environ.get("BADPOINTS_MIMIC3DEMO"):
        return Path(os.environ["BADPOINTS_MIMIC3DEMO"])
    candidates = [folder / "shared" / "real" / "mimic3demo" for folder in ROOT.parents]
    return next((c for c in candidates if c.is_dir()), candidates[0])


@pytest.fixture(scope="session")
def mimic3demo() -> Path:
    """The real MIMIC-III demo lab tables (read-only, outside the project); skips where they are absent."""
    folder = _mimic3demo()
    if not (folder / "LABEVENTS.csv").is_file():
        pytest.skip(f"real MIMIC-III demo tables not found at {folder} (see shared/real/README.md; "
                    "or set BADPOINTS_MIMIC3DEMO)")
    return folder
