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


# The real MIMIC-III demo lab tables (read-only, see shared/real/README.md), beside the project root or, for a
# git worktree, beside its parent folder; BADPOINTS_MIMIC3DEMO names another place.
MIMIC3DEMO_PLACES = (ROOT.parent / "shared" / "real" / "mimic3demo", ROOT.parents[1] / "shared" / "real" / "mimic3demo")


@pytest.fixture(scope="session")
def mimic3demo() -> Path:
    """The MIMIC-III demo folder; tests that use it skip when it is absent."""
    named = os.environ.get("BADPOINTS_MIMIC3DEMO")
    places = (Path(named),) if named else MIMIC3DEMO_PLACES
    found = next((place for place in places if (place / "LABEVENTS.csv").is_file()), None)
    if found is None:
        pytest.skip(f"real MIMIC-III demo data not found in {', '.join(map(str, places))}")
    return found
