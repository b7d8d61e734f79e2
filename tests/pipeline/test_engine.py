"""pipeline/engine.py: LABEVENTS' raw checks on a real dask.distributed LocalCluster give the pandas engine's
report, tables and edges exactly, with one slice or many, on clean and on broken data."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.engine import dask_engine, row_slices
from pipeline.flow import validate
from pipeline.parse import RawTables
from tests.corpus import CASES, build

pytest.importorskip("dask.distributed")

# Broken datasets whose bad rows fall in different slices: failures must combine, not shadow each other.
BROKEN = ("text_in_valuenum", "inf_valuenum", "duplicate_admission", "unknown_hadm_id", "two_digit_year",
          "all_null_valuenum_column", "every_lab_outpatient")


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes on loopback with bounded memory, as the CLI starts by default."""
    with dask_engine(workers=2, memory_limit="1GB") as engine:
        yield engine


def _same_run(data_dir, engine, partitions):
    config = load_config()
    expected = validate(data_dir, config)
    got = validate(data_dir, config, engine=type(engine)(client=engine.client, partitions=partitions))

    assert got.report.as_json() == expected.report.as_json()
    for table in ("ADMISSIONS", "D_LABITEMS", "LABEVENTS"):
        pd.testing.assert_frame_equal(got.tables.of(table), expected.tables.of(table))
    if expected.prepared.edges is not None:
        pd.testing.assert_frame_equal(got.prepared.edges, expected.prepared.edges)
    return got


@pytest.mark.parametrize("partitions", [1, 3, 8])
def test_the_sample_checked_on_dask_matches_pandas(cluster, sample_dir, partitions):
    got = _same_run(sample_dir, cluster, partitions)
    assert got.report.attrition["LABEVENTS"]["read"] == 13041


@pytest.mark.parametrize("name", [n for n in BROKEN if n in CASES])
def test_a_broken_dataset_gives_the_same_findings_on_dask(cluster, tmp_path, name):
    build(name, tmp_path)
    got = _same_run(tmp_path, cluster, partitions=5)
    assert got.report.status == "errors" or got.report.findings


def test_row_slices_cover_every_row_once():
    frame = pd.DataFrame({"x": range(10)}, index=pd.RangeIndex(2, 12, name="line"))
    for partitions in (1, 3, 10, 50):
        slices = row_slices(frame, partitions)
        assert pd.concat(slices).equals(frame)
        assert len(slices) == min(partitions, 10) and all(len(s) for s in slices)
    assert len(row_slices(frame.iloc[:0], 4)) == 1
