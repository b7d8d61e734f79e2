"""pipeline/meds/compare.py: ``--compare BEFORE`` leaves out of its ledger a shard that meds' DataSchema refuses on
either side (its rows were not checked: neither counted nor gone), and the refusal is the side's ``meds_schema``
finding, BEFORE's named as its input is (``before held_out/0``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.meds import validate_meds
from pipeline.reporting.html import render
from tests.meds import write_meds


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("meds") / "clean"
    write_meds(root, ())
    return root


@pytest.mark.parametrize(("side", "named"), [("before", "before held_out/0"), ("after", "held_out/0")])
def test_a_shard_refused_on_either_side_is_named_and_left_out_of_the_comparison(clean, tmp_path, side, named):
    folders = {"before": tmp_path / "before", "after": tmp_path / "after"}
    for root in folders.values():
        shutil.copytree(clean, root)
    shard = folders[side] / "data" / "held_out" / "0.parquet"
    table = pq.read_table(shard)
    pq.write_table(table.set_column(0, "subject_id", table["subject_id"].cast(pa.string())), shard)
    run = validate_meds(folders["after"], load_config(), compare=folders["before"])
    assert [(f.check, f.table) for f in run.report.findings] == [("meds_schema", named)]
    assert "subject_id (want int64, got string)" in run.report.findings[0].message and run.exit_code == 1
    ledger = run.report.attrition["MEDS compare"]
    assert ledger["shards_left_out"] == ["held_out/0"] and "held_out/0" not in ledger["shards"]
    assert "held_out" not in ledger["splits"] and ledger["codes_dropped"] == {}  # not emptied, nothing gone
    assert ledger["rows"] == {"before": 840 - 140, "after": 840 - 140}
    (line,) = [text for label, text in run.report.summary if label == "MEDS compare"]
    assert line.endswith("; refused, left out: held_out/0")
    assert "(stages run: none marked in .logs/); refused, left out: held_out/0</p>" in render(run, load_config())
