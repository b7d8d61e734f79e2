import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# CI runs derandomized so a failure reproduces; locally HYPOTHESIS_PROFILE=dev explores more.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=500)
settings.load_profile("ci")

# The CLI caches raw-checked tables; tests (and the CLI runs they start) use a cache of their own.
os.environ.setdefault("BADPOINTS_CACHE_DIR", tempfile.mkdtemp(prefix="badpoints-test-cache-"))


@pytest.fixture
def sample_dir() -> Path:
    return ROOT / "data" / "sample"


# The real MIMIC-III demo's lab tables (read-only, outside the project: ../shared/real/mimic3demo from the
# project root, or from a folder above it for a git worktree; see shared/real/README.md there).
_DEMO = Path("shared", "real", "mimic3demo")
MIMIC3DEMO = next((parent / _DEMO for parent in ROOT.parents if (parent / _DEMO).is_dir()), ROOT.parent / _DEMO)


@pytest.fixture
def mimic3demo() -> Path:
    """The real MIMIC-III demo folder; tests that need it skip where it is absent."""
    folder = Path(os.environ.get("BADPOINTS_MIMIC3DEMO", MIMIC3DEMO))
    if not (folder / "D_LABITEMS.csv").is_file():
        pytest.skip(f"the real MIMIC-III demo tables are not at {folder} (set BADPOINTS_MIMIC3DEMO)")
    return folder
