"""pipeline/engines/base.py: the one protocol every engine declares its capabilities in, and what the engines
share: steps added up over parts (the choice ``--engine auto`` makes is the registry's: test_registry.py)."""

from __future__ import annotations

import pytest

from pipeline.engines.base import add_steps
from pipeline.engines.dask import DaskEngine
from pipeline.engines.pandas import PANDAS, PandasEngine
from pipeline.engines.parts import PartsEngine
from pipeline.kernel.quarantine import Step


def test_every_engine_declares_whether_it_keeps_parts():
    """The flow routes LABEVENTS' checked blocks into an engine's parts when it declares it keeps them, never by
    sniffing for a router."""
    assert (PandasEngine.keeps_parts, PartsEngine.keeps_parts, DaskEngine.keeps_parts) == (False, True, True)
    with pytest.raises(NotImplementedError, match="keeps no parts"):
        PANDAS.router(None)


def test_steps_of_parts_add_up_and_must_agree():
    one = (Step(stage="bucket", step="late", rows_in=5, rows_out=3, quarantined=2),)
    two = (Step(stage="bucket", step="late", rows_in=7, rows_out=7, clipped=1),)
    assert add_steps([one, two]) == (Step(stage="bucket", step="late", rows_in=12, rows_out=10, quarantined=2,
                                          clipped=1),)
    with pytest.raises(RuntimeError, match="different steps"):
        add_steps([one, (Step(stage="bucket", step="early", rows_in=1, rows_out=1),)])

