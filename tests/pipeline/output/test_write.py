"""pipeline/output/write.py: what a build writes, that it reads back only what it wrote, and only safely.

One build of the sample per module (``built``); a test that alters a build works on its own copy.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import io
import json
import os
import pickle
import random
import shlex
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch_geometric.data import HeteroData
from typer.testing import CliRunner

from tests.mounts import small_tmpfs
from tests.pipeline.allow_list import empty_allow_list
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.stages.clean import ItemKinds
from pipeline.stages.encode import Vocabularies
from pipeline.builds import build
from pipeline.flow import prepare
from pipeline.stages import STAGES
from pipeline.stages.scale import ZScoreStats
from pipeline.output.write import MANIFEST, MARKER, PACKAGES, STAGING, OutputError, load_graph_file, load_graphs
from schemas.errors import StageError
from schemas.graph import EDGE, REVERSE

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"
TABLES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
SPLITS = ("train", "val", "test")
BADPOINTS = Path(sys.executable).with_name("badpoints")
runner = CliRunner()


# -- helpers ------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _final_files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def _rehash(out: Path, name: str) -> None:
    """Make the manifest agree with a file someone changed (what an attacker with write access could do)."""
    manifest = json.loads((out / MANIFEST).read_text())
    data = (out / name).read_bytes()
    manifest["outputs"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))


def _copy_build(built_out: Path, tmp_path: Path) -> Path:
    out = tmp_path / "build"
    shutil.copytree(built_out, out)
    return out


class Payload:
    """Unpickling this runs a shell command that creates ``sentinel``: harmless, but proof it ran."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.sentinel))}",)


def _plant_payload(path: Path, sentinel: Path, how: str) -> None:
    if how == "torch.save":
        torch.save(Payload(sentinel), path)
    else:
        path.write_bytes(pickle.dumps(Payload(sentinel)))


# -- the build ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("write") / "out"
    result = build(SAMPLE, out, load_config())
    assert result.exit_code == 0, [f.message for f in result.report.findings if f.severity == "error"]
    assert result.out_dir == out.resolve()
    return result


@pytest.fixture(scope="module")
def out(built) -> Path:
    return built.out_dir


@pytest.fixture(scope="module")
def manifest(out) -> dict:
    return json.loads((out / MANIFEST).read_text())


def test_build_writes_every_output_and_the_marker(out, manifest):
    graphs = {f"graphs/{split}/batch_00000.pt" for split in SPLITS}
    expected = graphs | {"stats.json", "quarantine.parquet", "index.parquet", "report.json", "report.html"}
    assert set(manifest["outputs"]) == expected
    assert _final_files(out) == expected | {MANIFEST, MARKER}


def test_every_graph_file_is_a_plain_dict_under_weights_only(out, manifest):
    for entry in manifest["graphs"]:
        with empty_allow_list():
            record = torch.load(out / entry["path"], weights_only=True)
        assert type(record) is dict
        data = HeteroData.from_dict(record)
        assert set(data.node_types) == {"admission", "labitem"}
        assert set(data.edge_types) == {EDGE, REVERSE}
        assert data["admission"].num_nodes == entry["admissions"]
        assert data[EDGE].edge_index.shape[1] == entry["edges"]


@pytest.mark.parametrize("split", SPLITS)
def test_load_graphs_returns_the_manifests_graphs_per_split(out, manifest, split):
    graphs = load_graphs(out, split)
    assert graphs and all(isinstance(g, HeteroData) for g in graphs)
    assert len(graphs) == manifest["splits"][split]["graphs"]
    assert len(graphs) == sum(e["split"] == split for e in manifest["graphs"])
    assert sum(g["admission"].num_nodes for g in graphs) == manifest["splits"][split]["admissions"]
    assert sum(g[EDGE].edge_index.shape[1] for g in graphs) == manifest["splits"][split]["edges"]


def test_load_graphs_of_an_unknown_split_is_empty(out):
    assert load_graphs(out, "holdout") == []


def test_manifest_config_versions_and_inputs(manifest):
    assert manifest["format"] == 3
    assert manifest["config"] == load_config().as_json()
    assert set(manifest["versions"]) == set(PACKAGES)
    assert manifest["versions"]["torch"] == torch.__version__
    assert [i["table"] for i in manifest["inputs"]] == list(TABLES)
    for record in manifest["inputs"]:
        source = SAMPLE / record["file"]
        assert record["sha256"] == _sha256(source)
        assert record["rows"] == len(source.read_text().splitlines()) - 1


def test_manifest_names_every_feature_column_the_graphs_hold(out, manifest, built):
    prepared = built.validation.prepared
    vocabularies = prepared.fitted["encode"]
    sizes = dict(vocabularies.admission_)
    # the columns known at admission ([graph] admission_features), in ADMISSION_CATEGORICALS' order
    codes = ["ADMISSION_TYPE_CODE", "ADMISSION_LOCATION_CODE", "INSURANCE_CODE", "LANGUAGE_CODE", "RELIGION_CODE",
             "MARITAL_STATUS_CODE", "ETHNICITY_CODE"]
    described = {tensor: [(c["name"], c["kind"], c.get("cardinality")) for c in columns]
                 for tensor, columns in manifest["features"].items()}
    assert described == {
        "admission.x": [],
        "admission.x_cat": [(code, "categorical", len(sizes[code.removesuffix("_CODE")]) + 1) for code in codes],
        "labitem.x": [],
        "labitem.x_cat": [("FLUID_CODE", "categorical", len(vocabularies.fluid_) + 1),
                          ("CATEGORY_CODE", "categorical", len(vocabularies.category_) + 1)],
        "edge_attr": [("Z", "numerical", None), ("Z_BOUNDED", "mark", None), ("Z_CENSORED", "mark", None),
                      ("Z_UNSEEN", "mark", None)],
        "edge_attr_cat": [("CODE", "categorical", max(code for _, _, code in vocabularies.lab_values_) + 1)]}
    assert manifest["limits"] == {"max_timestep": load_config().bucket.max_timestep}
    for split in SPLITS:
        for graph in load_graphs(out, split):
            for tensor, columns in manifest["features"].items():
                store, _, attribute = tensor.rpartition(".")
                value = graph[store or EDGE][attribute]
                assert value.dtype == (torch.int64 if attribute.endswith("_cat") else torch.float32)
                assert value.shape[1] == len(columns)
                if attribute.endswith("_cat") and value.numel():  # every index inside its column's cardinality
                    assert ((value >= 0) & (value < torch.tensor([c["cardinality"] for c in columns]))).all()
    by_hadm = prepared.admissions.set_index("HADM_ID")
    graph = load_graphs(out, "val")[0]
    expected = by_hadm.loc[graph["admission"].hadm_id.numpy(), codes]
    assert torch.equal(graph["admission"].x_cat, torch.from_numpy(expected.to_numpy("int64")))


@pytest.mark.parametrize("broken", ["a kind", "a cardinality", "a categorical in edge_attr"])
def test_a_manifest_whose_features_are_not_columns_is_refused(out, tmp_path, broken):
    out = _copy_build(out, tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    features = manifest["features"]
    if broken == "a kind":
        features["edge_attr"][0]["kind"] = "ordinal"
    elif broken == "a cardinality":
        features["admission.x_cat"][0]["cardinality"] = "4"
    else:
        features["edge_attr"].append(features["edge_attr_cat"][0])
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(StageError, match="features"):
        load_graphs(out, "train")


def test_a_manifest_without_features_is_refused(out, tmp_path):
    out = _copy_build(out, tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["features"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(StageError, match="features"):
        load_graphs(out, "train")


def test_manifest_hashes_match_the_files(out, manifest):
    for name, expected in manifest["outputs"].items():
        data = (out / name).read_bytes()
        assert expected == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}, name


def test_manifest_split_sizes_and_ledger_close(out, manifest):
    ledger = manifest["accounting"]["LABEVENTS"]
    assert ledger["read"] == ledger["kept"] + ledger["quarantined"] + ledger["deduplicated"]
    assert ledger["read"] == next(i["rows"] for i in manifest["inputs"] if i["table"] == "LABEVENTS")
    assert ledger["quarantined"] > 0 and ledger["deduplicated"] > 0
    edges = sum(g[EDGE].edge_index.shape[1] for split in SPLITS for g in load_graphs(out, split))
    assert edges == ledger["kept"] == sum(s["edges"] for s in manifest["splits"].values())
    index = pd.read_parquet(out / "index.parquet")
    for split in SPLITS:
        assert manifest["splits"][split]["admissions"] == int((index["split"] == split).sum()) > 0
    assert index["HADM_ID"].is_unique


def test_index_maps_graph_nodes_to_hadm_ids(out):
    index = pd.read_parquet(out / "index.parquet")
    for split in SPLITS:
        for batch, graph in enumerate(load_graphs(out, split)):
            rows = index[(index["split"] == split) & (index["batch"] == batch)].sort_values("node")
            assert rows["node"].tolist() == list(range(graph["admission"].num_nodes))
            assert rows["node"].tolist() == graph["admission"].node_id.tolist()
            assert rows["HADM_ID"].tolist() == graph["admission"].hadm_id.tolist()


def test_stats_json_rebuilds_the_fitted_state(out, built):
    stats = json.loads((out / "stats.json").read_text())
    prepared = built.validation.prepared
    config = built.validation.config
    ran = [stage for stage in STAGES if not stage.idle_in(config)]  # without a [task] table, not the task stage
    assert set(stats) == {stage.fit.saved_as for stage in ran if stage.fit is not None}  # every stage's state
    assert "task" not in stats and len(ran) < len(STAGES)
    assert {"item_kinds", "scale", "vocabularies", "fill"} <= set(stats)
    assert ItemKinds.from_json(stats["item_kinds"]) == prepared.fitted["clean"]
    assert ZScoreStats.from_json(stats["scale"]) == prepared.fitted.get("scale")
    vocabularies = Vocabularies.from_json(stats["vocabularies"])
    assert vocabularies.lab_values_ == prepared.fitted.get("encode").lab_values_
    assert dict(vocabularies.admission_) == dict(prepared.fitted.get("encode").admission_)
    assert (vocabularies.fluid_, vocabularies.category_) == (prepared.fitted.get("encode").fluid_,
                                                             prepared.fitted.get("encode").category_)
    assert stats["fill"] == json.loads(json.dumps(prepared.fitted.get("fill").as_json()))


def test_vocabularies_from_stats_json_equal_the_fitted_ones(out, built):
    stats = json.loads((out / "stats.json").read_text())
    assert Vocabularies.from_json(stats["vocabularies"]) == built.validation.prepared.fitted.get("encode")


def test_stats_json_reused_transforms_exactly_as_the_build(out, built):
    stats = json.loads((out / "stats.json").read_text())
    validation = built.validation
    again = prepare(validation.tables, load_config(), fitted={"encode": Vocabularies.from_json(stats["vocabularies"]),
                                                              "scale": ZScoreStats.from_json(stats["scale"])})
    pd.testing.assert_frame_equal(again.edges, validation.prepared.edges)
    codes = sorted(c for c in validation.prepared.admissions.columns if c.endswith("_CODE"))
    pd.testing.assert_frame_equal(again.admissions[codes], validation.prepared.admissions[codes])


def test_quarantine_parquet_holds_the_quarantined_rows(out, built, manifest):
    table = pd.read_parquet(out / "quarantine.parquet")
    assert {"line", "TABLE", "STAGE", "REASON"} <= set(table.columns)
    expected = built.validation.prepared.quarantine.whole().reset_index()
    assert len(table) == len(expected) > 0
    pd.testing.assert_frame_equal(table[["line", "TABLE", "STAGE", "REASON"]].reset_index(drop=True),
                                  expected[["line", "TABLE", "STAGE", "REASON"]].reset_index(drop=True),
                                  check_dtype=False)
    labevents = table[table["TABLE"] == "LABEVENTS"]
    assert len(labevents) == manifest["accounting"]["LABEVENTS"]["quarantined"]
    assert labevents["line"].between(2, manifest["accounting"]["LABEVENTS"]["read"] + 1).all()
    assert table[["TABLE", "STAGE", "REASON"]].ne("").all().all()


def test_quarantine_parquet_streamed_into_staging_is_the_frames_file(out, built, tmp_path, monkeypatch):
    """quarantine.parquet written into the staging folder a line range at a time: the bytes the whole frame gives
    (and the build listed); a rebuild that finds the same bytes in place stages nothing."""
    from pipeline.output import write

    quarantine = built.validation.prepared.quarantine
    whole = write._parquet_bytes(quarantine.whole().reset_index())
    assert (out / "quarantine.parquet").read_bytes() == whole
    monkeypatch.setattr("pipeline.output.write.ROW_GROUP", 7)  # many row groups, cut across the line ranges
    fresh = write.StagedBuild(tmp_path)
    staged = write.stage_quarantine(quarantine, fresh)
    data = (tmp_path / STAGING / "quarantine.parquet").read_bytes()
    assert data == write._parquet_bytes(quarantine.whole().reset_index()) != whole
    assert (staged.sha256, staged.bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    assert fresh.changed == ["quarantine.parquet"]
    monkeypatch.undo()
    again = write.StagedBuild(out)
    kept = write.stage_quarantine(quarantine, again)
    assert kept.sha256 == hashlib.sha256(whole).hexdigest() and again.changed == [] and again.names == {
        "quarantine.parquet"}
    assert not (out / STAGING / "quarantine.parquet").exists()
    again.abandon()


def test_a_quarantine_that_cannot_be_written_leaves_the_previous_build(earlier, monkeypatch):
    """No space left while quarantine.parquet is streamed into staging: exit 2, the previous build as it was."""
    from pipeline.output import write

    def full(quarantine, sink):
        sink.write(b"PAR1")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "quarantine.parquet")

    before = {name: (earlier / name).read_bytes() for name in _final_files(earlier) if name != MARKER}
    monkeypatch.setattr(write, "quarantine_parquet", full)
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(earlier), "--no-cache"])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.output and "previous build there is unchanged" in result.output
    assert {name: (earlier / name).read_bytes() for name in _final_files(earlier) if name != MARKER} == before
    assert not (earlier / STAGING).exists()


def test_report_json_is_the_builds_report(out, built):
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads(json.dumps(built.report.as_json()))
    assert report["status"] in ("ok", "warnings")


# -- refusing what the build did not write ------------------------------------------------------------
@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_the_payload_is_live_when_loaded_unsafely(tmp_path, how):
    """Control: the planted file really runs code when unpickled without weights_only."""
    sentinel = tmp_path / "ran"
    _plant_payload(tmp_path / "evil.pt", sentinel, how)
    if how == "torch.save":
        torch.load(tmp_path / "evil.pt", weights_only=False)
    else:
        pickle.loads((tmp_path / "evil.pt").read_bytes())
    assert sentinel.exists()


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_planted_pickle_is_refused_by_hash_and_never_runs(out, tmp_path, how):
    out = _copy_build(out, tmp_path)
    sentinel = tmp_path / "payload-ran"
    _plant_payload(out / "graphs/train/batch_00000.pt", sentinel, how)

    with pytest.raises(StageError) as caught:
        load_graphs(out, "train")
    assert caught.value.check == "graph_manifest"
    assert caught.value.table == "graphs/train/batch_00000.pt"
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 1
    assert "graph_manifest" in result.output and "graphs/train/batch_00000.pt" in result.output
    assert not sentinel.exists()


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_planted_pickle_with_a_matching_manifest_hash_is_still_refused(out, tmp_path, how):
    out = _copy_build(out, tmp_path)
    sentinel = tmp_path / "payload-ran"
    path = out / "graphs/train/batch_00000.pt"
    _plant_payload(path, sentinel, how)
    _rehash(out, "graphs/train/batch_00000.pt")

    with pytest.raises(StageError) as caught:
        load_graph_file(path)
    assert caught.value.check == "graph_unsafe"
    with pytest.raises(StageError) as caught:
        load_graphs(out, "train")
    assert caught.value.check == "graph_unsafe"
    assert load_graphs(out, "val")  # the other splits still load
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 1
    assert "graph_unsafe" in result.output and "batch_00000.pt" in result.output
    assert not sentinel.exists()


def test_tampered_edge_index_is_refused_with_index_bounds(out, tmp_path):
    out = _copy_build(out, tmp_path)
    name = "graphs/val/batch_00000.pt"
    data = HeteroData.from_dict(torch.load(out / name, weights_only=True))
    data[EDGE].edge_index[0, 3] = data["admission"].num_nodes  # one past the last admission
    torch.save(data.to_dict(), out / name)
    _rehash(out, name)

    with pytest.raises(StageError) as caught:
        load_graphs(out, "val")
    assert caught.value.check == "graph_index_bounds"
    assert "val/batch 0" in str(caught.value) and "admission__did__labitem" in str(caught.value)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 1 and "graph_index_bounds" in result.output


@pytest.mark.parametrize("record", [{"a": 1}, {"admission": {"x": 5}}, {}], ids=["scalar", "non-tensor-x", "empty"])
def test_a_dict_that_is_not_a_graph_is_refused_as_a_stage_error(out, tmp_path, record):
    out = _copy_build(out, tmp_path)
    name = "graphs/test/batch_00000.pt"
    torch.save(record, out / name)
    _rehash(out, name)
    with pytest.raises(StageError):
        load_graphs(out, "test")


def test_a_graph_holding_pyg_objects_is_refused(out, tmp_path):
    from torch_geometric import EdgeIndex

    out = _copy_build(out, tmp_path)
    name = "graphs/val/batch_00000.pt"
    record = torch.load(out / name, weights_only=True)
    sizes = (len(record["admission"]["node_id"]), len(record["labitem"]["node_id"]))
    record[EDGE]["edge_index"] = EdgeIndex(record[EDGE]["edge_index"], sparse_size=sizes)
    torch.save(record, out / name)
    _rehash(out, name)
    with empty_allow_list(), pytest.raises(pickle.UnpicklingError):  # control: not a plain-tensor file
        torch.load(out / name, weights_only=True)
    with pytest.raises(StageError) as caught:
        load_graphs(out, "val")
    assert caught.value.check == "graph_unsafe"


# -- the output folder --------------------------------------------------------------------------------
@pytest.fixture
def data_copy(tmp_path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    return data


@pytest.mark.parametrize("inside", [".", "out", "deep/er/out"])
def test_output_inside_the_input_is_refused(data_copy, inside):
    out = data_copy / inside
    before = _final_files(data_copy)
    with pytest.raises(OutputError, match="inside the input"):
        build(data_copy, out, load_config())
    result = runner.invoke(app, ["build", str(data_copy), "--out", str(out)])
    assert result.exit_code == 2
    assert "cannot run" in result.output and "Traceback" not in result.output
    assert _final_files(data_copy) == before


def test_someone_elses_folder_is_refused_and_left_alone(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a badpoints build folder"):
        build(SAMPLE, mine, load_config())
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(mine)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert _final_files(mine) == {"notes.txt"} and (mine / "notes.txt").read_text() == "keep me"


def test_a_file_as_output_is_refused(tmp_path):
    (tmp_path / "out").write_text("a file")
    with pytest.raises(OutputError):
        build(SAMPLE, tmp_path / "out", load_config())


def test_an_empty_folder_is_accepted(tmp_path):
    (tmp_path / "out").mkdir()
    assert build(SAMPLE, tmp_path / "out", load_config()).exit_code == 0
    assert (tmp_path / "out" / MANIFEST).is_file()


def test_input_inside_an_earlier_build_folder_is_refused(out, tmp_path):
    out = _copy_build(out, tmp_path)
    data = out / "data"
    shutil.copytree(SAMPLE, data)
    try:
        with pytest.raises(OutputError):
            build(data, out, load_config())
    finally:
        assert sorted(p.name for p in data.glob("*.csv")) == [f"{t}.csv" for t in TABLES], "input deleted"


def _list_in_manifest(out: Path, *names: str) -> None:
    """Make the manifest list ``names`` too, as the manifest of a build that wrote them would."""
    manifest = json.loads((out / MANIFEST).read_text())
    for name in names:
        data = (out / name).read_bytes()
        manifest["outputs"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_rebuild_removes_the_files_the_previous_manifest_listed(out, manifest, tmp_path):
    out = _copy_build(out, tmp_path)
    shutil.copy(out / "graphs/train/batch_00000.pt", out / "graphs/train/batch_00009.pt")
    (out / "graphs/holdout").mkdir()
    (out / "graphs/holdout/batch_00000.pt").write_bytes(b"old")
    _list_in_manifest(out, "graphs/train/batch_00009.pt", "graphs/holdout/batch_00000.pt")
    (out / STAGING / "graphs/val").mkdir(parents=True)  # what a killed build staged
    (out / STAGING / "graphs/val/.batch_00000.pt.4242.1.tmp").write_bytes(b"half")
    (out / "stats.json").write_text("{}")  # altered: replaced by the rebuild

    result = build(SAMPLE, out, load_config())
    assert result.exit_code == 0
    assert _final_files(out) == set(manifest["outputs"]) | {MANIFEST, MARKER}
    assert not (out / "graphs/holdout").exists() and not (out / STAGING).exists()
    rebuilt = json.loads((out / MANIFEST).read_text())
    assert rebuilt["outputs"] == manifest["outputs"]
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0


def test_rebuild_leaves_files_no_manifest_listed(out, manifest, tmp_path):
    """Files that only look like the build's (the graph pattern, a temp name) are the user's: a rebuild keeps them."""
    out = _copy_build(out, tmp_path)
    mine = {"graphs/train/batch_00000_embeddings.pt": b"user embeddings", "graphs/train/batch_00009.pt": b"mine",
            "graphs/holdout/batch_00000.pt": b"held out", ".x.tmp": b"notes", "graphs/val/.batch_00000.pt.1.tmp": b"x"}
    for name, data in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    _list_in_manifest(out, "graphs/train/batch_00000.pt")  # what a build lists: its own names only

    assert build(SAMPLE, out, load_config()).exit_code == 0
    assert {name: (out / name).read_bytes() for name in mine} == mine
    assert _final_files(out) == set(manifest["outputs"]) | {MANIFEST, MARKER} | set(mine)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output


def _only_the_build(out: Path, *mine: str) -> dict:
    """The build's manifest, once OUT_DIR holds exactly what it lists (and the files ``mine``), and no folder but
    those holding them."""
    manifest = json.loads((out / MANIFEST).read_text())
    files = set(manifest["outputs"]) | {MANIFEST, MARKER} | set(mine)
    assert _final_files(out) == files
    assert {p.relative_to(out) for p in out.rglob("*") if p.is_dir()} == \
        {parent for name in files for parent in Path(name).parents[:-1]}
    return manifest


def test_rebuilds_that_switch_target_or_write_fewer_shards_remove_what_the_previous_one_listed(earlier, monkeypatch):
    """graphs, then MEDS in 5 shards, then MEDS in 3, then graphs again, into one folder: each rebuild removes every
    file the previous manifest listed that it does not write (graphs and MEDS files alike, and folders left empty),
    and no file of the user's, even one named like a shard."""
    from pipeline.output.staged import OUTPUT_NAME
    from pipeline.stages import meds_export

    monkeypatch.setattr(meds_export, "SHARD_EVENTS", 3000)  # 95 train subjects in 3 shards
    assert build(SAMPLE, earlier, load_config(), to="meds").exit_code == 0
    many = _only_the_build(earlier)
    assert [n for n in many["outputs"] if not OUTPUT_NAME.fullmatch(n)] == []  # a rebuild may remove each of them
    assert sorted(p.name for p in (earlier / "data/train").iterdir()) == ["0.parquet", "1.parquet", "2.parquet"]
    monkeypatch.undo()
    assert build(SAMPLE, earlier, load_config(), to="meds").exit_code == 0
    fewer = _only_the_build(earlier)
    assert len(fewer["shards"]) == 3 < len(many["shards"])
    mine = {"data/train/9.parquet": b"named like a shard", "data/notes.txt": b"mine", "metadata/mine.json": b"{}"}
    for name, data in mine.items():
        (earlier / name).write_bytes(data)

    assert build(SAMPLE, earlier, load_config()).exit_code == 0
    _only_the_build(earlier, *mine)
    assert {name: (earlier / name).read_bytes() for name in mine} == mine
    _inspect_ok(earlier)


# -- a write that fails --------------------------------------------------------------------------------
@pytest.fixture
def small_batches(tmp_path) -> Path:
    """A config whose graphs differ from the default's (8 batches instead of 3): a rebuild changes every file."""
    path = tmp_path / "small_batches.toml"
    path.write_text("[graph]\nbatch_size = 16\n")
    return path


def _inspect_ok(out: Path) -> None:
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output


def test_a_full_disk_keeps_the_previous_build_loadable(tmp_path, small_batches):
    """A real full disk: a tmpfs holding one build and not two (needs mount rights; skipped where there are none)."""
    with small_tmpfs(tmp_path / "small", "1200k") as mount:
        out = mount / "out"
        assert runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache"]).exit_code == 0
        before = {name: (out / name).read_bytes() for name in _final_files(out) if name != MARKER}
        result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--no-cache",
                                     "--config", str(small_batches)])
        after = {name: (out / name).read_bytes() for name in _final_files(out) if name != MARKER}
        _inspect_ok(out)
    assert result.exit_code == 2, result.output
    assert "cannot run" in result.output and "No space left on device" in result.output
    assert str(out) in result.output and "the previous build there is unchanged" in result.output
    assert "internal error" not in result.output and "wrote" not in result.output
    assert after == before  # staging removed, nothing of the previous build touched


@pytest.fixture
def earlier(out, tmp_path) -> Path:
    return _copy_build(out, tmp_path)


@pytest.mark.parametrize("failing", ["graphs/train/batch_00000.pt", "graphs/train/batch_00004.pt", MANIFEST])
def test_a_failed_write_is_exit_2_and_leaves_the_previous_build(earlier, small_batches, monkeypatch, failing):
    """No space left when the first file, a later graph, or the manifest (written last) is staged."""
    from pipeline.output import staged

    real, calls = staged.write_atomic, []

    def fail_nth(path, data):
        calls.append(path)
        if path.relative_to(earlier / STAGING).as_posix() == failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    before = {name: (earlier / name).read_bytes() for name in _final_files(earlier)}
    monkeypatch.setattr(staged, "write_atomic", fail_nth)
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(earlier), "--config", str(small_batches),
                                 "--no-cache"])
    assert result.exit_code == 2, result.output
    assert f"No space left on device: {calls[-1]}" in result.output and "previous build there is unchanged" in \
        result.output
    assert "internal error" not in result.output
    assert {name: (earlier / name).read_bytes() for name in _final_files(earlier) if name != MARKER} == \
        {name: data for name, data in before.items() if name != MARKER}
    assert not (earlier / STAGING).exists()
    _inspect_ok(earlier)


def test_a_switch_cut_short_is_finished_by_the_next_build(earlier, small_batches, monkeypatch, tmp_path):
    """A rename failing after the previous manifest was moved aside: exit 2, no finished build; the next build
    completes, and still removes the files only that previous manifest listed."""
    from pipeline.output import staged

    assert build(SAMPLE, earlier, load_config(small_batches)).exit_code == 0  # 8 graphs, 6 of them train
    real = os.replace

    def fail_into_place(src, dst):
        if STAGING not in Path(dst).parts:  # a staged file renamed into place: the switch
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(src), None, str(dst))
        real(src, dst)

    monkeypatch.setattr(staged.os, "replace", fail_into_place)
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(earlier), "--no-cache"])
    monkeypatch.undo()
    assert result.exit_code == 2, result.output
    assert "Input/output error" in result.output and "holds no finished build" in result.output
    assert runner.invoke(app, ["inspect", str(earlier)]).exit_code == 1  # no manifest: says so, loads nothing

    assert build(SAMPLE, earlier, load_config()).exit_code == 0
    assert sorted(p.name for p in (earlier / "graphs/train").iterdir()) == ["batch_00000.pt"]
    assert not (earlier / STAGING).exists()
    _inspect_ok(earlier)


# -- determinism --------------------------------------------------------------------------------------
def _shuffled_sample(into: Path) -> Path:
    into.mkdir()
    rng = random.Random(20240611)
    for table in TABLES:
        header, *rows = (SAMPLE / f"{table}.csv").read_text().splitlines(keepends=True)
        shuffled = rows[:]
        rng.shuffle(shuffled)
        assert shuffled != rows
        (into / f"{table}.csv").write_text(header + "".join(shuffled))
    return into


def test_builds_are_byte_identical_across_row_order_tz_hash_seed_and_folder(tmp_path):
    shuffled = _shuffled_sample(tmp_path / "shuffled input")
    runs = [(SAMPLE, tmp_path / "first", {"TZ": "UTC", "PYTHONHASHSEED": "0"}),
            (shuffled, tmp_path / "second build, elsewhere", {"TZ": "Pacific/Chatham", "PYTHONHASHSEED": "4242"})]
    procs = [subprocess.Popen([str(BADPOINTS), "build", str(data), "--out", str(out)], cwd=tmp_path,
                              env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for data, out, env in runs]
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    first, second = (out for _, out, _ in runs)
    graphs = sorted(p.relative_to(first).as_posix() for p in first.rglob("*.pt"))
    assert graphs == sorted(p.relative_to(second).as_posix() for p in second.rglob("*.pt")) and graphs
    for name in [*graphs, "stats.json", "index.parquet"]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


# -- a build with errors writes nothing ---------------------------------------------------------------
@pytest.fixture
def data_with_inf(data_copy) -> Path:
    path = data_copy / "LABEVENTS.csv"
    header, first, *rest = path.read_text().splitlines(keepends=True)
    fields = first.rstrip("\n").split(",")
    fields[header.split(",").index("VALUENUM")] = "inf"
    path.write_text(header + ",".join(fields) + "\n" + "".join(rest))
    return data_copy


def test_a_build_with_errors_writes_nothing(data_with_inf, tmp_path):
    out = tmp_path / "out"
    result = build(data_with_inf, out, load_config())
    assert result.exit_code == 1 and result.out_dir is None
    assert not out.exists()


def test_a_build_with_errors_exits_1_and_writes_only_the_json_report(data_with_inf, tmp_path):
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    result = runner.invoke(app, ["build", str(data_with_inf), "--out", str(out), "--json", str(report_path)])
    assert result.exit_code == 1, result.output
    assert "no graphs written" in result.output
    assert not out.exists() or not (out / MANIFEST).exists()
    report = json.loads(report_path.read_text())
    assert report["status"] == "errors"
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert [(f["check"], f["column"], f["lines"]) for f in errors] == [("valuenum_finite", "VALUENUM", [2])]


# -- the source never unpickles unsafely --------------------------------------------------------------
def _code_calls_to_torch_load(source: str) -> list[int]:
    """Lines where code (not a string or comment) reads ``torch.load(`` or ``serialization.load(``."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    return [tokens[i].start[0] for i in range(len(tokens) - 3)
            if tokens[i].string in ("torch", "serialization") and [t.string for t in tokens[i + 1:i + 4]] ==
            [".", "load", "("]]


def test_every_torch_load_in_the_package_passes_weights_only_true():
    calls, unsafe = 0, []
    for path in sorted([*(ROOT / "pipeline").rglob("*.py"), *(ROOT / "schemas").rglob("*.py")]):
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        assert "pickle.load" not in source, f"{where}: pickle.load"
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch"):
                assert "load" not in {alias.name for alias in node.names}, f"{where}: from torch import load"
        found = {node.lineno: node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                 and isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "serialization")}
        assert sorted(found) == _code_calls_to_torch_load(source), where
        for line, node in found.items():
            calls += 1
            weights_only = {k.arg: k.value for k in node.keywords}.get("weights_only")
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                unsafe.append(f"{where}:{line}")
    assert calls >= 1
    assert unsafe == []


def test_graphs_staged_by_a_build_that_then_finds_errors_are_dropped(earlier, tmp_path):
    """Graph files are staged as they are built; a build whose graphs' findings are errors (here every batch above
    a tiny memory budget, made an error) writes nothing: the staged files go, the previous build is as it was."""
    before = {p: p.read_bytes() for p in earlier.rglob("*") if p.is_file()}
    strict = tmp_path / "strict.toml"
    strict.write_text("[graph]\nbatch_size = 16\nmemory_budget_mb = 0.001\n\n[severity]\ngraph_memory = \"error\"\n")
    result = build(SAMPLE, earlier, load_config(strict))
    assert result.exit_code == 1 and result.out_dir is None and result.graphs  # built and guarded, not written
    assert [f.check for f in result.report.findings if f.severity == "error"] == ["graph_memory"]
    assert not (earlier / STAGING).exists()
    assert {p: p.read_bytes() for p in earlier.rglob("*") if p.is_file()} == before
    _inspect_ok(earlier)
