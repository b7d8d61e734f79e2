"""pipeline/inspect.py and ``badpoints inspect``: a build is re-checked against its manifest and summarised."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.builds import build
from pipeline.inspect import inspect_build
from pipeline.write import MANIFEST, load_graphs
from schemas.graph import EDGE
from tests.pipeline.test_write import _rehash

ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("train", "val", "test")
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("inspect") / "out"
    assert build(ROOT / "data" / "sample", out, load_config()).exit_code == 0
    return out


@pytest.fixture
def out(built, tmp_path) -> Path:
    """A private copy of the build, free to break."""
    copy = tmp_path / "build"
    shutil.copytree(built, copy)
    return copy


def _inspect(out: Path):
    return runner.invoke(app, ["inspect", str(out)])


def test_a_good_build_exits_0_and_summarises_every_split(built):
    manifest = json.loads((built / MANIFEST).read_text())
    result = _inspect(built)
    assert result.exit_code == 0, result.output
    assert "status: ok" in result.output and "ERROR" not in result.output
    assert f"{len(manifest['graphs'])} graphs, {len(manifest['outputs'])} files" in result.output
    for split in SPLITS:
        expected = manifest["splits"][split]
        line = next(line for line in result.output.splitlines() if line.startswith(f"{split} "))
        found = re.search(r"(\d+) graphs\s+(\d+) admissions\s+(\d+) edges z in \[(\S+), (\S+)\]", line)
        assert found, line
        assert [int(n) for n in found.groups()[:3]] == [expected["graphs"], expected["admissions"], expected["edges"]]
        z = torch.cat([g[EDGE].edge_attr[:, 1] for g in load_graphs(built, split)])
        assert float(found.group(4)) == pytest.approx(float(z.min()), rel=1e-2)
        assert float(found.group(5)) == pytest.approx(float(z.max()), rel=1e-2)
    ledger = manifest["accounting"]["LABEVENTS"]
    assert (f"LABEVENTS read {ledger['read']} = kept {ledger['kept']} + quarantined {ledger['quarantined']} + "
            f"deduplicated {ledger['deduplicated']}") in result.output


def test_inspect_shows_the_feature_columns_and_where_the_raw_ids_are(built):
    manifest = json.loads((built / MANIFEST).read_text())
    result = _inspect(built)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("features ")]
    assert lines == [f"features {name}: {', '.join(manifest['features'][name])}"
                     for name in ("admission.x", "labitem.x", "edge_attr")]
    assert "features edge_attr: CODE, Z" in lines and "features labitem.x: FLUID_CODE, CATEGORY_CODE" in lines
    assert "node_id = arange(num_nodes)" in result.output and "admission.hadm_id" in result.output
    assert "labitem.itemid" in result.output


def test_a_graph_from_before_node_id_was_arange_exits_1(out):
    name = "graphs/train/batch_00000.pt"
    record = torch.load(out / name, weights_only=True)
    record["admission"]["node_id"] = record["admission"]["hadm_id"].clone()
    torch.save(record, out / name)
    _rehash(out, name)
    result = _inspect(out)
    assert result.exit_code == 1
    assert "graph_node_ids" in result.output and "train/batch 0.admission.node_id" in result.output


def test_inspect_build_finds_no_problems_in_a_good_build(built):
    inspection = inspect_build(built)
    assert inspection.problems == []
    # + one line per feature tensor, + node ids, + the ADMISSIONS ledger
    assert len(inspection.lines) == 1 + len(SPLITS) + 3 + 1 + 1 + 1
    assert any(line.startswith("ADMISSIONS read ") and "= in graphs " in line for line in inspection.lines)


def test_a_deleted_graph_exits_1_naming_the_file(out):
    (out / "graphs/val/batch_00000.pt").unlink()
    result = _inspect(out)
    assert result.exit_code == 1
    assert "graph_manifest" in result.output and "graphs/val/batch_00000.pt" in result.output
    assert "missing" in result.output and "status: errors" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", ["graphs/train/batch_00000.pt", "graphs/test/batch_00000.pt", "stats.json",
                                  "index.parquet", "quarantine.parquet", "report.json"])
def test_a_flipped_byte_exits_1_naming_the_file(out, name):
    data = bytearray((out / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (out / name).write_bytes(bytes(data))
    result = _inspect(out)
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, result.output
    assert "graph_manifest" in errors[0] and name in errors[0] and "sha256 differs" in errors[0]


def test_no_manifest_exits_1(out):
    (out / MANIFEST).unlink()
    result = _inspect(out)
    assert result.exit_code == 1
    assert "graph_manifest" in result.output and "no manifest" in result.output


def test_an_empty_folder_exits_1(tmp_path):
    result = _inspect(tmp_path)
    assert result.exit_code == 1 and "no manifest" in result.output


def test_an_unreadable_manifest_exits_1(out):
    (out / MANIFEST).write_text('{"outputs": ')
    result = _inspect(out)
    assert result.exit_code == 1
    assert "unreadable manifest" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("text", ["{}", "[]"])
def test_a_manifest_of_the_wrong_shape_exits_1(out, text):
    (out / MANIFEST).write_text(text)
    result = _inspect(out)
    assert result.exit_code == 1
    assert "graph_manifest" in result.output
