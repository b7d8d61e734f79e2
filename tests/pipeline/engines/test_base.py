"""pipeline/engines/base.py: the one protocol every engine declares its capabilities in, and what the engines
share: steps added up over parts, the choice ``--engine auto`` makes."""

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


def test_auto_takes_parts_from_the_text_labevents_holds(tmp_path, sample_dir, monkeypatch):
    from pipeline.engines import base as engines

    size = (sample_dir / "LABEVENTS.csv").stat().st_size
    assert not engines.in_parts(sample_dir)  # the sample: far below 256 MiB, the pandas engine
    monkeypatch.setattr(engines, "AUTO_PARTS_BYTES", size)
    assert engines.in_parts(sample_dir)
    zipped = tmp_path / "hosp"
    zipped.mkdir()
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // engines.GZIP_TEXT_RATIO + 1))
    assert engines.in_parts(tmp_path)  # a .gz counts for the text it holds, about seven times its size
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // engines.GZIP_TEXT_RATIO - 10))
    assert not engines.in_parts(tmp_path)
    assert not engines.in_parts(tmp_path / "nowhere")  # no LABEVENTS: pandas, and the run says why
