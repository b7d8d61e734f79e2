"""pipeline/output/dataset.py: ``GraphDataset`` serves one split of a build to PyG, lazily, verified and guarded.

One build of the sample per module, in batches of 16 admissions so the training split has several
graphs; a test that alters a build works on its own copy. The real MIMIC-III demo, where it is
present, is built once and trained on through a ``DataLoader``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.loader import DataLoader

from pipeline import GraphDataset
from pipeline.output.write import MANIFEST, load_graphs
from schemas.errors import StageError
from schemas.graph import EDGE, REVERSE
from tests.pipeline.output.test_frame import build_checked
from tests.pipeline.output.test_write import _rehash

ROOT = Path(__file__).resolve().parents[3]
SPLITS = ("train", "val", "test")
BATCH = 16


def _build(data: Path, out: Path) -> Path:
    return build_checked(data, out, batch_size=BATCH)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return _build(ROOT / "data" / "sample", tmp_path_factory.mktemp("dataset") / "out")


@pytest.fixture(scope="module")
def manifest(built) -> dict:
    return json.loads((built / MANIFEST).read_text())


@pytest.fixture
def out(built, tmp_path) -> Path:
    """A private copy of the build, free to break."""
    copy = tmp_path / "build"
    shutil.copytree(built, copy)
    return copy


def _files(out: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(out).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in out.rglob("*")}


def _same(a: HeteroData, b: HeteroData) -> bool:
    return all(list(s.keys()) == list(t.keys()) and all(
        torch.equal(v, t[k]) if isinstance(v, torch.Tensor) else v == t[k] for k, v in s.items())
        for s, t in zip(a.stores, b.stores))


# -- what it serves ------------------------------------------------------------------------------------
@pytest.mark.parametrize("split", SPLITS)
def test_len_is_the_splits_batches_and_get_returns_what_load_graphs_does(built, manifest, split):
    dataset = GraphDataset(built, split=split)
    expected = load_graphs(built, split)
    assert len(dataset) == manifest["splits"][split]["graphs"] == len(expected) > 0
    assert len(dataset) == sum(e["split"] == split for e in manifest["graphs"])
    if split == "train":
        assert len(dataset) > 1
    for i, graph in enumerate(expected):
        got = dataset[i]
        assert isinstance(got, HeteroData) and _same(got, graph)


def test_graphs_come_in_batch_order_with_the_index_parquets_admissions(built):
    index = pd.read_parquet(built / "index.parquet")
    dataset = GraphDataset(built, split="train")
    for batch in range(len(dataset)):
        rows = index[(index["split"] == "train") & (index["batch"] == batch)].sort_values("node")
        data = dataset.get(batch)
        assert rows["node"].tolist() == data["admission"].node_id.tolist()
        assert rows["HADM_ID"].tolist() == data["admission"].hadm_id.tolist()


def test_features_are_the_manifests_and_name_every_column(built, manifest):
    dataset = GraphDataset(built)
    assert dataset.split == "train"
    assert dataset.features == manifest["features"]
    data = dataset[0]
    for tensor, columns in dataset.features.items():
        store, _, attribute = tensor.rpartition(".")
        assert data[store or EDGE][attribute].shape[1] == len(columns)
    assert data["admission"].x_cat.shape[1] == len(dataset.features["admission.x_cat"]) > 0


def test_an_embedding_over_node_id_works_on_every_graph(built):
    """PyG's tutorials index ``Embedding(num_nodes, d)`` with node_id: raw ITEMIDs made it an IndexError."""
    for split in SPLITS:
        for data in GraphDataset(built, split=split):
            for node_type in ("admission", "labitem"):
                store = data[node_type]
                embedded = torch.nn.Embedding(store.num_nodes, 4)(store.node_id)
                assert embedded.shape == (store.num_nodes, 4)
    data = GraphDataset(built)[0]
    with pytest.raises(IndexError):  # control: the raw identifiers are not embedding indices
        torch.nn.Embedding(data["labitem"].num_nodes, 4)(data["labitem"].itemid)


def test_a_transform_is_applied_to_what_get_returns(built):
    def drop_labels(data: HeteroData) -> HeteroData:
        data = data.clone()
        del data["admission"].y
        return data

    dataset = GraphDataset(built, split="val", transform=drop_labels)
    assert "y" not in dataset[0]["admission"] and "y" in dataset.get(0)["admission"]


# -- with a DataLoader ---------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_dataloader_collates_the_splits_graphs(built, manifest, batch_size):
    dataset = GraphDataset(built, split="train")
    items = dataset[0]["labitem"].num_nodes
    index = pd.read_parquet(built / "index.parquet")
    hadm_ids, edges, steps = [], 0, 0
    for batch in DataLoader(dataset, batch_size=batch_size):
        graphs = int(batch["admission"].ptr.numel() - 1)
        assert graphs <= batch_size
        # node_id is concatenated, not offset: the dictionary's items repeat once per graph, in order
        assert torch.equal(batch["labitem"].node_id, torch.arange(items).repeat(graphs))
        assert torch.equal(batch["labitem"].itemid, dataset[0]["labitem"].itemid.repeat(graphs))
        embedded = torch.nn.Embedding(items, 8)(batch["labitem"].node_id)
        assert embedded.shape == (graphs * items, 8)
        # edge_index is offset per graph, so it stays inside the batch's node counts
        assert int(batch[EDGE].edge_index[0].max()) < batch["admission"].num_nodes
        assert int(batch[EDGE].edge_index[1].max()) < batch["labitem"].num_nodes
        assert torch.equal(batch[REVERSE].edge_index, batch[EDGE].edge_index.flip(0))
        assert batch["admission"].y.shape == (batch["admission"].num_nodes, items)
        hadm_ids += batch["admission"].hadm_id.tolist()
        edges += batch[EDGE].edge_index.shape[1]
        steps += 1
    assert steps == -(-len(dataset) // batch_size)
    assert hadm_ids == index[index["split"] == "train"]["HADM_ID"].tolist()
    assert edges == manifest["splits"]["train"]["edges"]


def test_a_model_trains_on_batches_from_the_dataloader(built):
    torch.manual_seed(0)
    dataset = GraphDataset(built, split="train")
    items = dataset[0]["labitem"].num_nodes
    embedding = torch.nn.Embedding(items, 4)
    # every admission column's categories in one table: a column's indices start after the columns before it
    sizes = torch.tensor([c["cardinality"] for c in dataset.features["admission.x_cat"]])
    offsets = torch.cumsum(sizes, 0) - sizes
    categories = torch.nn.Embedding(int(sizes.sum()), 4)
    head = torch.nn.Linear(dataset[0]["admission"].x.shape[1] + 8, items)
    optimizer = torch.optim.Adam([*embedding.parameters(), *categories.parameters(), *head.parameters()], lr=0.05)
    losses = []
    for _ in range(5):
        for batch in DataLoader(dataset, batch_size=2):
            item = embedding(batch["labitem"].node_id)  # one row per item node of the batch
            source, target = batch[EDGE].edge_index
            seen = torch.zeros(batch["admission"].num_nodes, 4).index_add(0, source, item[target])
            admitted = categories(batch["admission"].x_cat + offsets).sum(dim=1)
            logits = head(torch.cat([batch["admission"].x, admitted, seen], dim=1))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["admission"].y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert embedding.weight.grad is not None and categories.weight.grad is not None


# -- lazy, read-only and verified ------------------------------------------------------------------------
def test_construction_reads_only_the_manifest_and_get_reads_its_file_once(built, monkeypatch):
    reads: list[str] = []
    original = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self.name if self.suffix != ".pt" else self.relative_to(built).as_posix())
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    dataset = GraphDataset(built, split="train")
    assert not [name for name in reads if name.endswith(".pt")]
    dataset.get(1)
    assert [name for name in reads if name.endswith(".pt")] == ["graphs/train/batch_00001.pt"]


def test_the_build_folder_is_never_written(out):
    before = _files(out)
    dataset = GraphDataset(out, split="train")
    for _ in DataLoader(dataset, batch_size=2):
        pass
    assert _files(out) == before
    assert not (out / "raw").exists() and not (out / "processed").exists()


def test_a_changed_graph_file_is_refused_naming_the_file(out):
    name = "graphs/train/batch_00001.pt"
    dataset = GraphDataset(out, split="train")
    data = bytearray((out / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (out / name).write_bytes(bytes(data))
    dataset.get(0)  # the other batches still load
    with pytest.raises(StageError) as caught:
        dataset.get(1)
    assert caught.value.check == "graph_manifest" and caught.value.table == name
    assert name in str(caught.value) and "sha256 differs" in str(caught.value)


def test_a_deleted_graph_file_is_refused_naming_the_file(out):
    dataset = GraphDataset(out, split="val")
    (out / "graphs/val/batch_00000.pt").unlink()
    with pytest.raises(StageError, match="graphs/val/batch_00000.pt.*missing"):
        dataset[0]


def test_a_graph_that_fails_the_guard_is_refused(out):
    name = "graphs/test/batch_00000.pt"
    record = torch.load(out / name, weights_only=True)
    record["labitem"]["node_id"] = record["labitem"]["itemid"].clone()  # the layout before node_id was arange
    torch.save(record, out / name)
    _rehash(out, name)
    with pytest.raises(StageError) as caught:
        GraphDataset(out, split="test")[0]
    assert caught.value.check == "graph_node_ids" and "test/batch 0" in str(caught.value)


# -- refusing what is not a build ------------------------------------------------------------------------
@pytest.mark.parametrize("split", ["holdout", "Train", ""])
def test_an_unknown_split_is_refused(built, split):
    with pytest.raises(ValueError, match=f"split {split!r} is not one of train, val, test"):
        GraphDataset(built, split=split)


def test_a_folder_without_a_finished_build_is_refused(out, tmp_path):
    with pytest.raises(StageError, match="no manifest"):
        GraphDataset(tmp_path / "empty")
    (out / MANIFEST).unlink()  # what a build that was interrupted leaves
    with pytest.raises(StageError) as caught:
        GraphDataset(out)
    assert caught.value.check == "graph_manifest"


def test_a_build_of_an_older_format_is_refused(out):
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["format"] = 1
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(StageError, match="format 1 .*rebuild"):
        GraphDataset(out)


# -- the real MIMIC-III demo ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(mimic3demo, tmp_path_factory) -> Path:
    return _build(mimic3demo, tmp_path_factory.mktemp("real") / "out")


def test_the_real_demo_serves_node_ids_an_embedding_can_index_through_a_dataloader(real, mimic3demo):
    index = pd.read_parquet(real / "index.parquet")
    labitems = pd.read_csv(mimic3demo / "D_LABITEMS.csv").rename(columns=str.upper)  # the demo's headers are lower
    item_ids = torch.tensor(sorted(labitems["ITEMID"]))
    for split in SPLITS:
        dataset = GraphDataset(real, split=split)
        assert len(dataset) == index[index["split"] == split]["batch"].nunique() > 0
        hadm_ids = []
        for batch in DataLoader(dataset, batch_size=2):
            graphs = batch.to_data_list()
            assert torch.equal(batch["labitem"].itemid, item_ids.repeat(len(graphs)))  # the whole dictionary
            assert int(item_ids.max()) > len(item_ids)  # real ITEMIDs are no embedding index: node_id is
            torch.nn.Embedding(len(item_ids), 8)(batch["labitem"].node_id).sum().backward()
            for graph in graphs:
                admissions = graph["admission"]
                assert torch.equal(admissions.node_id, torch.arange(admissions.num_nodes))
                torch.nn.Embedding(admissions.num_nodes, 8)(admissions.node_id).sum().backward()
            hadm_ids += batch["admission"].hadm_id.tolist()
        assert hadm_ids == index[index["split"] == split]["HADM_ID"].tolist()
