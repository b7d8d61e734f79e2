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
