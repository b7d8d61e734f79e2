"""pipeline/output/frame.py and ``GraphDataset(..., frame=True)``: a build's features in PyTorch Frame's layout.

Every node type gets a ``TensorFrame`` (``tf``) and every edge type one (``edge_tf``) of the graph's own tensors,
and the dataset the ``col_names_dict`` and ``col_stats`` PyTorch Frame's encoders are made from: what
``torch_frame.data.stats.compute_col_stats`` gives of the training graphs' tensors, whichever split is read.
``StypeWiseFeatureEncoder`` and a RelBench-shaped ``HeteroEncoder`` (a model per node type over ``tf_dict``) take
them as they are. On the real MIMIC-III demo, in MIMIC-III's layout and in MIMIC-IV's, no float column holds a
category code and the manifest gives each column its kind and each categorical one its cardinality.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch_frame
from torch_frame.data.stats import StatType, compute_col_stats
from torch_frame.nn import EmbeddingEncoder, LinearEncoder, StypeWiseFeatureEncoder
from torch_frame.nn.models import ResNet
from torch_geometric.loader import DataLoader

from pipeline import GraphDataset
from pipeline.builds import build
from pipeline.config import load_config
from pipeline.flow import validate
from pipeline.output.write import MANIFEST, load_graphs
from schemas.graph import EDGE, REVERSE
from tests.mimic4 import in_mimic4_layout

ROOT = Path(__file__).resolve().parents[3]
SPLITS = ("train", "val", "test")
STORES = ("admission", "labitem", EDGE, REVERSE)
ENCODERS = {torch_frame.categorical: EmbeddingEncoder, torch_frame.numerical: LinearEncoder}


def build_checked(data: Path, out: Path, batch_size: int | None = None) -> Path:
    """A default build of ``data`` (in batches of ``batch_size`` admissions), which must have no error."""
    config = load_config()
    if batch_size is not None:
        config = dataclasses.replace(config, graph=dataclasses.replace(config.graph, batch_size=batch_size))
    result = build(data, out, config)
    assert result.exit_code == 0, [f.message for f in result.report.findings if f.severity == "error"]
    return result.out_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The sample in batches of 16 admissions: the training split has several graphs."""
    return build_checked(ROOT / "data" / "sample", tmp_path_factory.mktemp("frame") / "out", batch_size=16)


def _frames(store) -> tuple[str, str, str]:
    """A store's TensorFrame, float tensor and category tensor."""
    return ("tf", "x", "x_cat") if "x" in store else ("edge_tf", "edge_attr", "edge_attr_cat")


def _encoder(stats: dict, names: dict, channels: int = 8) -> StypeWiseFeatureEncoder:
    return StypeWiseFeatureEncoder(channels, stats, names, {stype: ENCODERS[stype]() for stype in names})


def _stats_of(dataset: GraphDataset, key) -> tuple[dict, dict]:
    if isinstance(key, tuple):
        return dataset.edge_col_stats_dict[key], dataset.edge_col_names_dict[key]
    return dataset.col_stats_dict[key], dataset.col_names_dict[key]


# -- the layout ------------------------------------------------------------------------------------------------
def test_each_store_gets_a_tensor_frame_of_its_own_tensors(built):
    dataset = GraphDataset(built, split="val", frame=True)
    data = dataset[0]
    for key in STORES:
        store = data[key]
        frame, floats, categorical = _frames(store)
        tf = store[frame]
        assert isinstance(tf, torch_frame.TensorFrame) and tf.num_rows == store[categorical].shape[0]
        assert tf.feat_dict[torch_frame.categorical] is store[categorical]  # shared, not copied
        if store[floats].shape[1]:
            assert tf.feat_dict[torch_frame.numerical] is store[floats]
        else:  # a stype without columns is left out, as TensorFrame requires
            assert torch_frame.numerical not in tf.feat_dict
        assert tf.col_names_dict == _stats_of(dataset, key)[1]
    features = dataset.features
    assert dataset.col_names_dict["admission"] == {
        torch_frame.categorical: [c["name"] for c in features["admission.x_cat"]]}
    assert dataset.edge_col_names_dict[EDGE] == dataset.edge_col_names_dict[REVERSE] == {
        torch_frame.categorical: ["CODE"], torch_frame.numerical: ["Z", "Z_BOUNDED", "Z_CENSORED", "Z_UNSEEN"]}


def test_without_frame_a_graph_holds_the_files_tensors_only(built):
    data = GraphDataset(built, split="val")[0]
    assert "tf" not in data["admission"] and "edge_tf" not in data[EDGE]
    assert not hasattr(GraphDataset(built, split="val"), "col_stats_dict")


# -- the statistics -------------------------------------------------------------------------------------------
def _train_tensors(built: Path, key, attribute: str) -> torch.Tensor:
    """A store's tensor over the training graphs, the lab-item dictionary once (every graph holds it whole)."""
    graphs = load_graphs(built, "train")
    assert len(graphs) > 1
    if key == "labitem":
        return graphs[0][key][attribute]
    return torch.cat([g[key][attribute] for g in graphs])


@pytest.mark.parametrize("split", SPLITS)
def test_col_stats_are_pytorch_frames_of_the_training_graphs_whatever_the_split(built, split):
    dataset = GraphDataset(built, split=split, frame=True)
    for key in STORES:
        stats, names = _stats_of(dataset, key)
        frame, floats, categorical = _frames(dataset[0][key])
        codes = _train_tensors(built, key, categorical)
        for at, name in enumerate(names.get(torch_frame.categorical, [])):
            (categories, counts), = stats[name].values()
            assert categories == list(range(len(categories)))  # position = index, every index of the vocabulary
            assert (codes[:, at] < len(categories)).all()
            seen = compute_col_stats(pd.Series(codes[:, at].numpy()), torch_frame.categorical)[StatType.COUNT]
            assert {i: n for i, n in enumerate(counts) if n} == dict(zip(*seen))  # PyTorch Frame's counts
        values = _train_tensors(built, key, floats)
        for at, name in enumerate(names.get(torch_frame.numerical, [])):
            theirs = compute_col_stats(pd.Series(values[:, at].double().numpy()), torch_frame.numerical)
            assert stats[name][StatType.QUANTILES] == theirs[StatType.QUANTILES]
            assert stats[name][StatType.MEAN] == pytest.approx(theirs[StatType.MEAN], rel=1e-12, abs=1e-15)
            assert stats[name][StatType.STD] == pytest.approx(theirs[StatType.STD], rel=1e-12, abs=1e-15)


def test_the_statistics_are_the_manifests(built):
    manifest = json.loads((built / MANIFEST).read_text())
    dataset = GraphDataset(built, frame=True)
    for column in manifest["features"]["edge_attr"]:
        stats = dataset.edge_col_stats_dict[EDGE][column["name"]]
        assert stats[StatType.MEAN] == column["stats"]["mean"] and stats[StatType.STD] == column["stats"]["std"]
    for column in manifest["features"]["admission.x_cat"]:
        categories, counts = dataset.col_stats_dict["admission"][column["name"]][StatType.COUNT]
        assert len(categories) == column["cardinality"] and counts == column["stats"]["count"]
    trained = manifest["splits"]["train"]
    assert sum(manifest["features"]["edge_attr_cat"][0]["stats"]["count"]) == trained["edges"]
    assert all(sum(c["stats"]["count"]) == trained["admissions"] for c in manifest["features"]["admission.x_cat"])


# -- what PyTorch Frame's encoders make of it ------------------------------------------------------------------
def test_stypewise_encoders_encode_every_store_as_given(built):
    torch.manual_seed(0)
    dataset = GraphDataset(built, split="test", frame=True)  # indices of the test split, stats of train
    data = dataset[0]
    for key in STORES:
        stats, names = _stats_of(dataset, key)
        tf = data[key][_frames(data[key])[0]]
        x, columns = _encoder(stats, names)(tf)
        assert x.shape == (tf.num_rows, tf.num_cols, 8) and torch.isfinite(x).all()
        assert sorted(columns) == sorted(c for names_ in names.values() for c in names_)
        x.sum().backward()


def test_a_relbench_shaped_hetero_encoder_trains_on_a_dataloaders_batches(built):
    """RelBench's HeteroEncoder: one PyTorch Frame model per node type, made from col_names_dict and col_stats,
    applied to ``batch.tf_dict``."""
    torch.manual_seed(0)
    dataset = GraphDataset(built, split="train", frame=True)
    models = torch.nn.ModuleDict({
        node_type: ResNet(channels=16, out_channels=8, num_layers=2, col_stats=dataset.col_stats_dict[node_type],
                          col_names_dict=dataset.col_names_dict[node_type],
                          stype_encoder_dict={stype: ENCODERS[stype]() for stype in dataset.col_names_dict[node_type]})
        for node_type in dataset.col_names_dict})
    head = torch.nn.Linear(8, dataset[0]["labitem"].num_nodes)
    optimizer = torch.optim.Adam([*models.parameters(), *head.parameters()], lr=0.01)
    losses = []
    for _ in range(3):
        for batch in DataLoader(dataset, batch_size=2):
            assert set(batch.tf_dict) == {"admission", "labitem"}  # node types only: edges' are edge_tf
            assert batch["admission"].tf.num_rows == batch["admission"].num_nodes
            x_dict = {node_type: models[node_type](tf) for node_type, tf in batch.tf_dict.items()}
            loss = torch.nn.functional.binary_cross_entropy_with_logits(head(x_dict["admission"]),
                                                                        batch["admission"].y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


# -- the real MIMIC-III demo, in both layouts --------------------------------------------------------------------
@pytest.fixture(scope="module", params=["mimic3", "mimic4"])
def demo(request, mimic3demo, tmp_path_factory) -> tuple[str, Path, Path]:
    """The demo in MIMIC-III's layout or MIMIC-IV's (hosp/*.csv.gz, lower-case headers, race), and its build."""
    root = tmp_path_factory.mktemp(request.param)
    data = mimic3demo if request.param == "mimic3" else in_mimic4_layout(mimic3demo, root / "data")
    return request.param, data, build_checked(data, root / "out")


def test_on_the_demo_no_float_column_is_a_category_code(demo):
    _, data, out = demo
    manifest = json.loads((out / MANIFEST).read_text())
    features = manifest["features"]
    prepared = validate(data, load_config()).prepared
    codes = {column for column in prepared.admissions.columns if column.endswith("_CODE")} | {
        "FLUID_CODE", "CATEGORY_CODE", "CODE"}  # every column the encode stage codes
    for tensor in ("admission.x", "labitem.x", "edge_attr"):
        assert all(c["kind"] in ("numerical", "mark") and c["name"] not in codes for c in features[tensor])
        assert all(c["kind"] == "categorical" and c["name"] in codes for c in features[f"{tensor}_cat"])
    assert [c["name"] for c in features["edge_attr"]] == ["Z", "Z_BOUNDED", "Z_CENSORED", "Z_UNSEEN"]
    edges = prepared.edges.set_index(["HADM_ID", "ITEMID", "TIMESTEP"])
    for split in SPLITS:
        for graph in load_graphs(out, split):  # hash-checked and guarded as they load
            assert graph["admission"].x.shape[1] == graph["labitem"].x.shape[1] == 0
            for key in STORES:
                store = graph[key]
                frame, floats, categorical = _frames(store)
                assert store[floats].dtype == torch.float32 and store[categorical].dtype == torch.int64
            forward = graph[EDGE]
            rows = edges.loc[list(zip(graph["admission"].hadm_id[forward.edge_index[0]].tolist(),
                                      graph["labitem"].itemid[forward.edge_index[1]].tolist(),
                                      forward.timestep.tolist()))]
            assert torch.equal(forward.edge_attr_cat[:, 0], torch.from_numpy(rows["CODE"].to_numpy("int64")))
            assert torch.equal(forward.edge_attr[:, 0], torch.from_numpy(rows["Z"].to_numpy("float32")))
            admitted = prepared.admissions.set_index("HADM_ID").loc[graph["admission"].hadm_id.numpy()]
            chosen = [c["name"] for c in features["admission.x_cat"]]
            assert torch.equal(graph["admission"].x_cat, torch.from_numpy(admitted[chosen].to_numpy("int64")))


def test_on_the_demo_the_manifest_gives_each_columns_kind_and_each_categoricals_cardinality(demo):
    layout, data, out = demo
    manifest = json.loads((out / MANIFEST).read_text())
    vocabularies = validate(data, load_config()).prepared.fitted["encode"]
    sizes = {column: len(values) + 1 for column, values in vocabularies.admission_}
    admitted = manifest["features"]["admission.x_cat"]
    # the columns known at admission: in MIMIC-IV's layout, ETHNICITY is race
    assert [c["name"] for c in admitted] == [
        "ADMISSION_TYPE_CODE", "ADMISSION_LOCATION_CODE", "INSURANCE_CODE", "LANGUAGE_CODE", "RELIGION_CODE",
        "MARITAL_STATUS_CODE", {"mimic3": "ETHNICITY_CODE", "mimic4": "RACE_CODE"}[layout]]
    assert [(c["kind"], c["cardinality"]) for c in admitted] == [
        ("categorical", sizes[c["name"].removesuffix("_CODE")]) for c in admitted]
    assert [(c["name"], c["cardinality"]) for c in manifest["features"]["labitem.x_cat"]] == [
        ("FLUID_CODE", len(vocabularies.fluid_) + 1), ("CATEGORY_CODE", len(vocabularies.category_) + 1)]
    (code,) = manifest["features"]["edge_attr_cat"]
    assert code["cardinality"] == max(c for _, _, c in vocabularies.lab_values_) + 1
    assert [c["kind"] for c in manifest["features"]["edge_attr"]] == ["numerical", "mark", "mark", "mark"]


def test_on_the_demo_pytorch_frames_encoder_takes_each_node_types_features_as_given(demo):
    _, _, out = demo
    torch.manual_seed(0)
    for split in SPLITS:
        dataset = GraphDataset(out, split=split, frame=True)
        for data in dataset:
            for node_type in ("admission", "labitem"):
                encoder = StypeWiseFeatureEncoder(
                    out_channels=8, col_stats=dataset.col_stats_dict[node_type],
                    col_names_dict=dataset.col_names_dict[node_type],
                    stype_encoder_dict={torch_frame.categorical: EmbeddingEncoder(),
                                        torch_frame.numerical: LinearEncoder()})
                x, _ = encoder(data[node_type].tf)
                assert x.shape == (data[node_type].num_nodes, data[node_type].x_cat.shape[1], 8)
                assert torch.isfinite(x).all()
