"""What the engine tests share: generated data with every special item of ``bench.synth``."""

from __future__ import annotations

import pytest

from bench.synth import write_synthetic
from tests.pipeline.engines.rows import SYNTHETIC_ROWS


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Generated data with an ill-conditioned item, constant items, CHARTTIME ties and labs before admission."""
    folder = tmp_path_factory.mktemp("synthetic")
    write_synthetic(folder, rows=SYNTHETIC_ROWS, seed=11)
    return folder
