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


@pytest.fixture(scope="session")
def mimic3demo() -> Path:
    """The real MIMIC-III demo lab tables (read-only, ../shared/real/mimic3demo); tests skip without them."""
    path = ROOT.parent.parent / "shared" / "real" / "mimic3demo"
    for candidate in (ROOT.parent / "shared" / "real" / "mimic3demo", path, Path("/work/shared/real/mimic3demo")):
        if (candidate / "LABEVENTS.csv").is_file():
            return candidate
    pytest.skip("the MIMIC-III demo tables are absent (../shared/real/mimic3demo): real-data test skipped")
