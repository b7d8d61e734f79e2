"""pipeline/stages/graph.py: the sample's edge rows become one sound HeteroData per batch, holding every edge once.

Graphs come per split in train/val/test order, admissions in HADM_ID order;
``node_id`` is ``arange(num_nodes)`` and every tensor can be joined back
through ``hadm_id`` and ``itemid`` to the edge row it came from, labels are the items of each admission's last timestep, and the same
rows in any order give byte-identical graphs. Categorical columns are int64 category indices (``x_cat``,
``edge_attr_cat``) inside their cardinalities, numerical ones float32 (``x``, ``edge_attr``): no float column holds a
code. ``admission.x_cat`` holds the admission columns ``[graph] admission_features`` chooses (by default those known
at admission: no DISCHARGE_LOCATION), in one fixed order; choosing one known only at discharge is a warning.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline.config import ConfigError, load_config
from pipeline.flow import prepare, validate
from pipeline.stages.graph import (GraphBatch, Options, admission_feature_columns, build_graphs, feature_columns,
                                   graph_features, graph_limits, memory_estimate)
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import check_raw
from pipeline.output.write import graph_bytes
from schemas.graph import CATEGORICAL, EDGE, MARK, NUMERICAL, REVERSE, graph_problems
from schemas.raw import ADMISSION_CATEGORICALS
from schemas.split import SPLITS

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
BATCH = 16
# The sample's admission columns known at admission, in ADMISSION_CATEGORICALS' order: what admission.x_cat holds.
KNOWN_AT_ADMISSION = ["ADMISSION_TYPE_CODE", "ADMISSION_LOCATION_CODE", "INSURANCE_CODE", "LANGUAGE_CODE",
                      "RELIGION_CODE", "MARITAL_STATUS_CODE", "ETHNICITY_CODE"]


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config():
    return load_config()


@pytest.fixture(scope="module")
def tables(config):
    text, problems = load_text_tables(SAMPLE)
    assert not problems
    return check_raw({name: table.frame for name, table in text.items()}).tables


@pytest.fixture(scope="module")
def prepared(tables, config):
    result = prepare(tables, config)
    assert result.stopped_at is None
    return result


@pytest.fixture(scope="module")
def graphs(prepared) -> list[GraphBatch]:
    return build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=BATCH)


@pytest.fixture(scope="module")
def joined(graphs, prepared) -> pd.DataFrame:
    """Every did-edge of every graph joined back, through hadm_id and itemid, to the edge row it came from."""
    columns = ["HADM_ID", "ITEMID", "TIMESTEP", "SPLIT", "CODE", "Z"]
    return edge_frame(graphs).merge(prepared.edges[columns], on=["HADM_ID", "ITEMID", "TIMESTEP"], how="outer",
                                    suffixes=("", "_ROW"), validate="one_to_one", indicator=True)


def edge_frame(graphs: list[GraphBatch]) -> pd.DataFrame:
    """The did-edges of ``graphs`` as rows: split, batch, HADM_ID, ITEMID, the attrs and the timestep."""
    parts = []
    for g in graphs:
        data = g.data
        index = data[EDGE].edge_index
        parts.append(pd.DataFrame({
            "GRAPH_SPLIT": g.split, "BATCH": g.batch,
            "HADM_ID": data["admission"].hadm_id[index[0]].numpy(),
            "ITEMID": data["labitem"].itemid[index[1]].numpy(),
            "TIMESTEP": data[EDGE].timestep.numpy(), "GRAPH_CODE": data[EDGE].edge_attr_cat[:, 0].numpy(),
            "GRAPH_Z": data[EDGE].edge_attr[:, 0].numpy(),
        }))
    return pd.concat(parts, ignore_index=True)


def last_timesteps(edges: pd.DataFrame) -> pd.Series:
    return edges.groupby("HADM_ID")["TIMESTEP"].max()


# -- batching and order --------------------------------------------------------------------------------
def test_one_graph_per_batch_of_admissions_per_split_in_split_order(graphs, prepared):
    admitted = prepared.edges.groupby("SPLIT")["HADM_ID"].nunique()
    expected = [(split, b) for split in SPLITS for b in range(-(-int(admitted.get(split, 0)) // BATCH))]
    assert [(g.split, g.batch) for g in graphs] == expected
    assert len(graphs) > len(SPLITS)  # several batches in train at this size
    assert [g.where for g in graphs][:2] == ["train/batch 0", "train/batch 1"]
    for split in SPLITS:
        sizes = [g.data["admission"].num_nodes for g in graphs if g.split == split]
        assert all(size == BATCH for size in sizes[:-1]) and 0 < sizes[-1] <= BATCH


def test_admissions_are_in_hadm_id_order_and_each_in_one_graph_of_its_split(graphs, prepared):
    split_of = prepared.edges.drop_duplicates("HADM_ID").set_index("HADM_ID")["SPLIT"]
    seen = []
    for split in SPLITS:
        ids = np.concatenate([g.data["admission"].hadm_id.numpy() for g in graphs if g.split == split])
        assert (np.diff(ids) > 0).all()  # sorted within and across the split's batches: none twice
        assert (split_of.loc[ids] == split).all()
        seen.append(ids)
    seen = np.concatenate(seen)
    assert len(seen) == len(set(seen)) and set(seen) == set(prepared.edges["HADM_ID"])


def test_admission_nodes_carry_their_hadm_id_and_encoded_columns(graphs, prepared):
    features = admission_feature_columns(prepared.admissions)
    assert features == KNOWN_AT_ADMISSION
    by_hadm = prepared.admissions.set_index("HADM_ID")
    for g in graphs:
        store = g.data["admission"]
        assert store.hadm_id.dtype == torch.int64 and store.x_cat.dtype == torch.int64
        assert store.x_cat.shape == (len(store.hadm_id), len(features))
        assert store.x.dtype == torch.float32 and store.x.shape == (len(store.hadm_id), 0)  # no numerical column
        expected = by_hadm.loc[store.hadm_id.numpy(), features].to_numpy("int64")
        np.testing.assert_array_equal(store.x_cat.numpy(), expected)


def test_every_graph_holds_the_whole_lab_item_dictionary(graphs, tables, prepared):
    item_ids = np.sort(tables.labitems["ITEMID"].to_numpy("int64"))  # every D_LABITEMS item, not only the measured
    assert len(item_ids) > prepared.edges["ITEMID"].nunique()
    codes = prepared.labitems.set_index("ITEMID").loc[item_ids, ["FLUID_CODE", "CATEGORY_CODE"]].to_numpy("int64")
    first = graphs[0].data["labitem"]
    for g in graphs:
        store = g.data["labitem"]
        assert store.itemid.dtype == torch.int64 and store.x_cat.dtype == torch.int64
        np.testing.assert_array_equal(store.itemid.numpy(), item_ids)
        np.testing.assert_array_equal(store.x_cat.numpy(), codes)
        assert store.x.shape == (len(item_ids), 0)
        assert torch.equal(store.x_cat, first.x_cat) and torch.equal(store.itemid, first.itemid)
        assert torch.equal(store.node_id, first.node_id)


def test_node_id_is_arange_and_the_raw_ids_are_hadm_id_and_itemid(graphs, tables):
    item_ids = np.sort(tables.labitems["ITEMID"].to_numpy("int64"))
    hadm_ids = np.concatenate([g.data["admission"].hadm_id.numpy() for g in graphs])
    assert (hadm_ids > 0).all() and len(np.unique(hadm_ids)) == len(hadm_ids)
    for g in graphs:
        for node_type, raw in (("admission", "hadm_id"), ("labitem", "itemid")):
            store = g.data[node_type]
            assert store.node_id.dtype == store[raw].dtype == torch.int64
            assert torch.equal(store.node_id, torch.arange(store.num_nodes))
            assert store[raw].shape == (store.num_nodes,)
            embedded = torch.nn.Embedding(store.num_nodes, 4)(store.node_id)  # PyG's tutorials do this
            assert embedded.shape == (store.num_nodes, 4)
        np.testing.assert_array_equal(g.data["labitem"].itemid.numpy(), item_ids)
    assert int(item_ids.max()) >= len(item_ids)  # raw ITEMIDs would be out of the embedding's bounds


def test_feature_columns_name_every_tensor_column_in_order(graphs, prepared, joined):
    names = feature_columns(prepared.edges, prepared.admissions)
    assert names == {"admission.x": [], "admission.x_cat": admission_feature_columns(prepared.admissions),
                     "labitem.x": [], "labitem.x_cat": ["FLUID_CODE", "CATEGORY_CODE"],
                     "edge_attr": ["Z", "Z_BOUNDED", "Z_CENSORED", "Z_UNSEEN"], "edge_attr_cat": ["CODE"]}
    for g in graphs:
        for tensor, columns in names.items():
            store, _, attribute = tensor.rpartition(".")
            assert g.data[store or EDGE][attribute].shape[1] == len(columns)
    items = prepared.labitems.set_index("ITEMID").loc[graphs[0].data["labitem"].itemid.numpy(),
                                                      names["labitem.x_cat"]]
    np.testing.assert_array_equal(graphs[0].data["labitem"].x_cat.numpy(), items.to_numpy("int64"))
    np.testing.assert_array_equal(joined["GRAPH_CODE"].to_numpy(), joined["CODE"].to_numpy("int64"))
    np.testing.assert_array_equal(joined["GRAPH_Z"].to_numpy(), joined["Z"].to_numpy("float32"))


def test_graph_features_give_each_column_its_kind_and_each_categorical_its_cardinality(prepared):
    vocabularies = prepared.fitted.get("encode")
    described = graph_features(vocabularies, prepared.edges, prepared.admissions)
    names = feature_columns(prepared.edges, prepared.admissions)
    assert {tensor: [c.name for c in columns] for tensor, columns in described.items()} == names
    assert all(c.kind == CATEGORICAL for tensor in names if tensor.endswith("_cat") for c in described[tensor])
    assert [c.kind for c in described["edge_attr"]] == [NUMERICAL, MARK, MARK, MARK]
    sizes = dict(vocabularies.admission_)
    assert [c.cardinality for c in described["admission.x_cat"]] == [
        len(sizes[name.removesuffix("_CODE")]) + 1 for name in names["admission.x_cat"]]  # code 0 and one per value
    assert [c.cardinality for c in described["labitem.x_cat"]] == [len(vocabularies.fluid_) + 1,
                                                                    len(vocabularies.category_) + 1]
    assert described["edge_attr_cat"][0].cardinality == max(code for _, _, code in vocabularies.lab_values_) + 1


def test_fills_indicators_become_edge_attr_columns_named_after_them(tables, config):
    policies = {column: dataclasses.replace(policy, indicator=True) for column, policy in config.fill.items()}
    prepared = prepare(tables, dataclasses.replace(config, fill=policies))
    assert prepared.stopped_at is None
    names = feature_columns(prepared.edges, prepared.admissions)["edge_attr"]
    assert names == ["Z", "CODE_MISSING", "Z_BOUNDED", "Z_CENSORED", "Z_MISSING", "Z_UNSEEN"]  # by name
    graphs = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=BATCH)
    edges = edge_frame(graphs).merge(prepared.edges, on=["HADM_ID", "ITEMID", "TIMESTEP"], validate="one_to_one")
    attr = torch.cat([g.data[EDGE].edge_attr for g in graphs]).numpy()
    assert attr.shape == (len(prepared.edges), 6)
    np.testing.assert_array_equal(attr, edges[names].to_numpy("float32"))
    assert attr[:, names.index("Z_MISSING")].sum() == prepared.edges["Z_MISSING"].sum() > 0
    limits = graph_limits(prepared.fitted.get("encode"), prepared.edges, prepared.admissions,
                          max_timestep=config.bucket.max_timestep)
    assert all(graph_problems(g.data, limits, where=g.where) == [] for g in graphs)


# -- which admission columns make admission.x_cat ------------------------------------------------------------
def chosen(config, *names: str):
    return dataclasses.replace(config, graph=dataclasses.replace(config.graph, admission_features=names))


def test_by_default_admission_x_cat_holds_the_columns_known_at_admission_never_discharge_location(graphs, prepared):
    assert "DISCHARGE_LOCATION_CODE" in prepared.admissions  # encoded (stats.json keeps its vocabulary) ...
    assert Options().admission_features == tuple(c for c in ADMISSION_CATEGORICALS if c != "DISCHARGE_LOCATION")
    names = feature_columns(prepared.edges, prepared.admissions)["admission.x_cat"]
    assert names == KNOWN_AT_ADMISSION and "DISCHARGE_LOCATION_CODE" not in names  # ... but no feature
    assert all(g.data["admission"].x_cat.shape[1] == len(KNOWN_AT_ADMISSION) for g in graphs)


def test_the_mimic3_demo_admission_x_cat_leaves_discharge_location_out(mimic3demo):
    validation = validate(mimic3demo, load_config())
    prepared = validation.prepared
    assert prepared.stopped_at is None and "DISCHARGE_LOCATION_CODE" in prepared.admissions
    assert admission_feature_columns(prepared.admissions) == KNOWN_AT_ADMISSION  # the demo has no RACE either
    graphs = build_graphs(prepared.edges, prepared.admissions, prepared.labitems)
    by_hadm = prepared.admissions.set_index("HADM_ID")
    for g in graphs:
        x_cat = g.data["admission"].x_cat.numpy()
        np.testing.assert_array_equal(x_cat, by_hadm.loc[g.data["admission"].hadm_id.numpy(),
                                                         KNOWN_AT_ADMISSION].to_numpy("int64"))
    assert "feature_known_after_admission" not in {f.check for f in validation.report.findings}


def test_choosing_discharge_location_puts_it_back_and_warns_naming_it(config, prepared):
    leaking = chosen(config, "INSURANCE", "DISCHARGE_LOCATION")
    validation = validate(SAMPLE, leaking)
    (warning,) = [f for f in validation.report.findings if f.check == "feature_known_after_admission"]
    assert (warning.severity, warning.stage, warning.table, warning.column, warning.count) == \
        ("warning", "graph", "ADMISSIONS", "DISCHARGE_LOCATION", 1)
    assert warning.message == (
        "ADMISSIONS.DISCHARGE_LOCATION: chosen in [graph] admission_features for admission.x_cat, but recorded at or "
        "after discharge. Known only at discharge, it leaks the outcome into every admission node "
        "(DISCHARGE_LOCATION holds DEAD/EXPIRED, DIED and HOSPICE); remove it from [graph] admission_features.")
    assert validation.exit_code == 0  # a warning: the graphs may still be built
    features = leaking.graph.admission_features
    assert feature_columns(prepared.edges, prepared.admissions, admission_features=features)["admission.x_cat"] == \
        ["DISCHARGE_LOCATION_CODE", "INSURANCE_CODE"]
    graphs = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=BATCH,
                          admission_features=features)
    by_hadm = prepared.admissions.set_index("HADM_ID")
    for g in graphs:
        np.testing.assert_array_equal(g.data["admission"].x_cat.numpy(), by_hadm.loc[
            g.data["admission"].hadm_id.numpy(), ["DISCHARGE_LOCATION_CODE", "INSURANCE_CODE"]].to_numpy("int64"))
    limits = graph_limits(prepared.fitted.get("encode"), prepared.edges, prepared.admissions,
                          max_timestep=config.bucket.max_timestep, admission_features=features)
    sizes = dict(prepared.fitted.get("encode").admission_)
    assert limits.cardinalities("admission.x_cat") == (len(sizes["DISCHARGE_LOCATION"]) + 1,
                                                       len(sizes["INSURANCE"]) + 1)
    assert all(graph_problems(g.data, limits, where=g.where) == [] for g in graphs)


def test_a_build_of_a_chosen_column_warns_and_its_manifest_and_inspect_name_the_columns(tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    (tmp_path / "badpoints.toml").write_text('[graph]\nadmission_features = ["INSURANCE", "DISCHARGE_LOCATION"]\n')
    built = runner.invoke(app, ["build", str(SAMPLE), "--out", str(tmp_path / "out"), "--json",
                                str(tmp_path / "report.json"), "--config", str(tmp_path / "badpoints.toml")])
    assert built.exit_code == 0, built.output
    assert "WARNING graph/feature_known_after_admission ADMISSIONS.DISCHARGE_LOCATION (1)" in built.output
    (warning,) = [f for f in json.loads((tmp_path / "report.json").read_text())["findings"]
                  if f["check"] == "feature_known_after_admission"]
    assert (warning["severity"], warning["column"]) == ("warning", "DISCHARGE_LOCATION")
    assert "remove it from [graph] admission_features" in warning["message"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    columns = manifest["features"]["admission.x_cat"]
    assert [c["name"] for c in columns] == ["DISCHARGE_LOCATION_CODE", "INSURANCE_CODE"]
    assert all(c["kind"] == "categorical" and c["cardinality"] > 1 for c in columns)
    inspected = runner.invoke(app, ["inspect", str(tmp_path / "out")])
    assert inspected.exit_code == 0, inspected.output
    assert (f"features admission.x_cat: DISCHARGE_LOCATION_CODE ({columns[0]['cardinality']} categories), "
            f"INSURANCE_CODE ({columns[1]['cardinality']} categories)") in inspected.output


def test_the_warning_is_reported_even_when_a_stage_stops_the_run(tables, config):
    stopping = chosen(config, "DISCHARGE_LOCATION")
    stopping = dataclasses.replace(stopping, scale=dataclasses.replace(
        config.scale, warn_bound=10.0, error_bound=50.0, policy=MappingProxyType({"default": "none"})))  # raw z
    stopped = prepare(tables, stopping)
    assert stopped.stopped_at == "scale"
    assert [f.column for f in stopped.findings if f.check == "feature_known_after_admission"] == ["DISCHARGE_LOCATION"]


def test_no_admission_feature_is_an_admission_x_cat_of_width_zero(prepared):
    graphs = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=BATCH,
                          admission_features=())
    assert all(g.data["admission"].x_cat.shape == (g.data["admission"].num_nodes, 0) for g in graphs)


def test_a_column_badpoints_does_not_read_is_a_config_error_naming_the_allowed_ones(tmp_path):
    path = tmp_path / "badpoints.toml"
    path.write_text('[graph]\nadmission_features = ["ADMISSION_TYPE", "HOSPITAL_EXPIRE_FLAG"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        "[graph] admission_features names 'HOSPITAL_EXPIRE_FLAG', which it does not take: it must be a list of any "
        "of ADMISSION_TYPE, ADMISSION_LOCATION, DISCHARGE_LOCATION, INSURANCE, LANGUAGE, RELIGION, MARITAL_STATUS, "
        "ETHNICITY, RACE")


def test_admission_x_columns_come_in_one_order_whatever_the_order_chosen_or_the_frames(prepared):
    written = ("ETHNICITY", "DISCHARGE_LOCATION", "ADMISSION_TYPE")
    assert Options(admission_features=written).admission_features == \
        Options(admission_features=written[::-1]).admission_features == \
        ("ADMISSION_TYPE", "DISCHARGE_LOCATION", "ETHNICITY")
    shuffled = prepared.admissions[prepared.admissions.columns[::-1]]
    assert admission_feature_columns(shuffled, admission_features=written) == \
        admission_feature_columns(prepared.admissions, admission_features=written[::-1]) == \
        ["ADMISSION_TYPE_CODE", "DISCHARGE_LOCATION_CODE", "ETHNICITY_CODE"]
    once, again = (build_graphs(prepared.edges, admissions, prepared.labitems, batch_size=BATCH,
                                admission_features=features)
                   for admissions, features in ((prepared.admissions, written), (shuffled, written[::-1])))
    assert [graph_bytes(g.data) for g in once] == [graph_bytes(g.data) for g in again]


def test_a_column_the_data_lacks_is_skipped(prepared):
    assert "RACE" in Options().admission_features and "RACE_CODE" not in prepared.admissions  # MIMIC-IV's
    assert admission_feature_columns(prepared.admissions.drop(columns="RELIGION_CODE")) == \
        [c for c in KNOWN_AT_ADMISSION if c != "RELIGION_CODE"]


# -- edges ---------------------------------------------------------------------------------------------
def test_edge_tensors_have_the_types_and_shapes_of_pyg(graphs):
    for g in graphs:
        store = g.data[EDGE]
        edges = store.edge_index.shape[1]
        assert store.edge_index.dtype == torch.int64 and store.edge_index.shape == (2, edges) and edges > 0
        assert store.edge_attr.dtype == torch.float32 and store.edge_attr.shape == (edges, 4)
        assert store.edge_attr_cat.dtype == torch.int64 and store.edge_attr_cat.shape == (edges, 1)
        assert store.timestep.dtype == torch.int64 and store.timestep.shape == (edges,)
        assert store.is_history.dtype == torch.bool and store.is_history.shape == (edges,)


def test_every_edge_row_is_in_exactly_one_graph_with_its_code_z_and_timestep(joined, prepared, graphs):
    assert (joined["_merge"] == "both").all()  # no edge row left out, no graph edge without its row
    assert len(joined) == len(prepared.edges) == prepared.ledger()["kept"]
    assert sum(g.data[EDGE].edge_index.shape[1] for g in graphs) == len(prepared.edges)
    assert (joined["GRAPH_SPLIT"] == joined["SPLIT"]).all()
    np.testing.assert_array_equal(joined["GRAPH_CODE"].to_numpy(), joined["CODE"].to_numpy("int64"))
    np.testing.assert_array_equal(joined["GRAPH_Z"].to_numpy(), joined["Z"].to_numpy("float32"))


def test_edges_run_in_hadm_id_timestep_itemid_order(graphs):
    for g in graphs:
        index, step = g.data[EDGE].edge_index, g.data[EDGE].timestep
        keys = np.column_stack([index[0].numpy(), step.numpy(), index[1].numpy()])
        assert np.lexsort(keys.T[::-1]).tolist() == list(range(len(keys)))
        assert not pd.DataFrame(keys).duplicated().any()


def test_the_reverse_edge_type_is_the_flipped_edge_index_with_the_same_attrs(graphs):
    for g in graphs:
        forward, backward = g.data[EDGE], g.data[REVERSE]
        assert torch.equal(backward.edge_index, forward.edge_index.flip(0))
        assert backward.edge_index.is_contiguous()
        assert torch.equal(backward.edge_attr, forward.edge_attr) and torch.equal(backward.timestep, forward.timestep)
        assert torch.equal(backward.edge_attr_cat, forward.edge_attr_cat)
        assert set(backward.keys()) == {"edge_index", "edge_attr", "edge_attr_cat", "timestep"}


def test_every_graph_is_sound(graphs, prepared, config):
    limits = graph_limits(prepared.fitted.get("encode"), prepared.edges, prepared.admissions,
                          max_timestep=config.bucket.max_timestep)
    for g in graphs:
        assert g.data.validate(raise_on_error=True)
        assert graph_problems(g.data, limits, where=g.where) == []


# -- labels --------------------------------------------------------------------------------------------
def test_labels_are_the_items_measured_at_each_admissions_last_timestep(graphs, prepared):
    edges = prepared.edges
    last = last_timesteps(edges)
    at_last = edges[edges["TIMESTEP"] == edges["HADM_ID"].map(last)]
    expected = set(zip(at_last["HADM_ID"], at_last["ITEMID"]))
    labelled = set()
    for g in graphs:
        store = g.data["admission"]
        y = store.y
        assert y.dtype == torch.float32 and y.shape == (store.num_nodes, g.data["labitem"].num_nodes)
        assert ((y == 0) | (y == 1)).all()
        rows, cols = torch.nonzero(y, as_tuple=True)
        labelled |= set(zip(store.hadm_id[rows].tolist(), g.data["labitem"].itemid[cols].tolist()))
        assert store.y_timestep.dtype == torch.int64
        np.testing.assert_array_equal(store.y_timestep.numpy(), last.loc[store.hadm_id.numpy()].to_numpy())
    assert labelled == expected


def test_is_history_marks_the_edges_before_the_label_timestep(graphs):
    for g in graphs:
        store = g.data[EDGE]
        label_step = g.data["admission"].y_timestep[store.edge_index[0]]
        assert torch.equal(store.is_history, store.timestep < label_step)
        assert not (store.timestep > label_step).any()
    assert any(g.data[EDGE].is_history.any() for g in graphs) and not all(g.data[EDGE].is_history.all()
                                                                          for g in graphs)


def test_labels_false_leaves_the_labels_out(prepared, graphs):
    plain = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=BATCH, labels=False)
    assert [(g.split, g.batch) for g in plain] == [(g.split, g.batch) for g in graphs]
    for g, labelled in zip(plain, graphs):
        assert set(g.data["admission"].keys()) == {"x", "x_cat", "node_id", "hadm_id", "num_nodes"}
        assert set(g.data[EDGE].keys()) == {"edge_index", "edge_attr", "edge_attr_cat", "timestep"}
        assert torch.equal(g.data[EDGE].edge_index, labelled.data[EDGE].edge_index)
        assert torch.equal(g.data[EDGE].edge_attr, labelled.data[EDGE].edge_attr)
        assert g.data.validate(raise_on_error=True)


# -- memory ----------------------------------------------------------------------------------------------
def test_memory_estimate_counts_every_tensor_byte(graphs):
    for g in graphs:
        data = g.data
        tensors = [value for store in data.stores for value in store.values() if isinstance(value, torch.Tensor)]
        stored = sum(value.untyped_storage().nbytes() for value in tensors)
        by_hand = sum(value.numel() * value.element_size() for value in tensors)
        estimate = memory_estimate(data, hidden=64, layers=2)
        assert estimate["tensors"] == stored == by_hand
        assert estimate["total"] == estimate["tensors"] + estimate["activations"]


def test_memory_estimate_grows_with_hidden_width_and_layers(graphs):
    data = graphs[0].data
    nodes = data["admission"].num_nodes + data["labitem"].num_nodes
    edges = 2 * data[EDGE].edge_index.shape[1]
    base = memory_estimate(data, hidden=64, layers=2)
    assert base["activations"] == 4 * 64 * 2 * (nodes + edges)
    wider = memory_estimate(data, hidden=128, layers=2)
    deeper = memory_estimate(data, hidden=64, layers=3)
    assert wider["tensors"] == deeper["tensors"] == base["tensors"]
    assert wider["activations"] == 2 * base["activations"]
    assert deeper["activations"] * 2 == 3 * base["activations"]
    assert base["total"] < deeper["total"] < wider["total"]


def test_a_larger_batch_makes_fewer_larger_graphs(prepared, graphs):
    whole = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=1000)
    assert [g.where for g in whole] == [f"{split}/batch 0" for split in SPLITS]
    train = [g for g in graphs if g.split == "train"]
    assert whole[0].data[EDGE].edge_index.shape[1] == sum(g.data[EDGE].edge_index.shape[1] for g in train)
    estimate = memory_estimate(whole[0].data, hidden=64, layers=2)["total"]
    assert estimate > max(memory_estimate(g.data, hidden=64, layers=2)["total"] for g in train)


# -- bad input -----------------------------------------------------------------------------------------
def test_an_edge_of_an_item_missing_from_labitems_is_refused(prepared):
    measured = prepared.edges["ITEMID"].value_counts().index
    missing = int(np.sort(measured)[0])  # the first item: its edges would otherwise land on the second
    labitems = prepared.labitems[prepared.labitems["ITEMID"] != missing]
    with pytest.raises(ValueError, match=str(missing)):
        build_graphs(prepared.edges, prepared.admissions, labitems, batch_size=BATCH)


def test_an_edge_of_an_admission_missing_from_admissions_is_refused(prepared):
    missing = int(prepared.edges["HADM_ID"].iloc[0])
    admissions = prepared.admissions[prepared.admissions["HADM_ID"] != missing]
    with pytest.raises(KeyError, match=str(missing)):
        build_graphs(prepared.edges, admissions, prepared.labitems, batch_size=BATCH)


# -- determinism ---------------------------------------------------------------------------------------
def test_rows_in_any_order_give_identical_graphs_and_bytes(prepared, graphs):
    again = build_graphs(prepared.edges.sample(frac=1.0, random_state=7),
                         prepared.admissions.sample(frac=1.0, random_state=8),
                         prepared.labitems.sample(frac=1.0, random_state=9), batch_size=BATCH)
    assert [g.where for g in again] == [g.where for g in graphs]
    for g, h in zip(graphs, again):
        assert g.data.node_types == h.data.node_types and g.data.edge_types == h.data.edge_types
        for store, other in zip(g.data.stores, h.data.stores):
            assert list(store.keys()) == list(other.keys())
            assert all(torch.equal(value, other[key]) and value.dtype == other[key].dtype
                       if isinstance(value, torch.Tensor) else value == other[key] for key, value in store.items())
        assert graph_bytes(g.data) == graph_bytes(h.data)


def test_building_does_not_change_its_inputs(prepared):
    edges, admissions, labitems = (prepared.edges.copy(), prepared.admissions.copy(), prepared.labitems.copy())
    build_graphs(edges, admissions, labitems, batch_size=BATCH)
    pd.testing.assert_frame_equal(edges, prepared.edges)
    pd.testing.assert_frame_equal(admissions, prepared.admissions)
    pd.testing.assert_frame_equal(labitems, prepared.labitems)


# -- the limits the graph guard measures indices against ----------------------------------------------------
def test_graph_limits_are_the_sizes_of_the_fitted_vocabularies(prepared):
    """A cardinality above its vocabulary's size lets an out-of-range index past the guard (which trusts the
    limits); one below refuses a real code."""
    vocabularies = prepared.fitted.get("encode")
    limits = graph_limits(vocabularies, prepared.edges, prepared.admissions, max_timestep=7)
    codes_per_item = pd.Series([item for item, _, _ in vocabularies.lab_values_]).value_counts()
    (code,) = limits.cardinalities("edge_attr_cat")
    assert code == codes_per_item.max() + 1 == 4  # items 51466's and 51486's three coded values; codes 1..3, 0 unseen
    assert code - 1 < len(vocabularies.lab_values_)  # codes count per item, not over all items
    assert code - 1 == prepared.edges["CODE"].max()  # the sample's edges use the last code
    sizes = dict(vocabularies.admission_)
    columns = admission_feature_columns(prepared.admissions)
    assert limits.cardinalities("admission.x_cat") == tuple(len(sizes[c.removesuffix("_CODE")]) + 1
                                                            for c in columns) == (4, 5, 4, 3, 6, 4, 5)
    assert limits.cardinalities("labitem.x_cat") == (len(vocabularies.fluid_) + 1,
                                                     len(vocabularies.category_) + 1) == (5, 4)
    assert limits.features["admission.x"] == limits.features["labitem.x"] == ()
    assert limits.max_timestep == 7


@pytest.mark.parametrize("cuts", [1, 3, 7, 40])
def test_graphs_streamed_from_parts_are_the_graphs_of_all_rows(prepared, graphs, cuts):
    """Edge rows in (split, HADM_ID) order cut into parts at admission boundaries (mid-batch and mid-split too):
    stream_graphs makes exactly build_graphs' graphs, byte for byte, in the same order."""
    from pipeline.stages.dedup import edge_key
    from pipeline.stages.graph import stream_graphs

    edges = prepared.edges.iloc[np.argsort(edge_key(prepared.edges), kind="stable")]
    admitted = edges["HADM_ID"].to_numpy("int64")
    starts = np.flatnonzero(np.r_[True, admitted[1:] != admitted[:-1]])
    bounds = [0, *starts[np.linspace(0, len(starts), cuts + 1).astype(int)[1:-1]], len(edges)]
    parts = [edges.iloc[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]
    streamed = list(stream_graphs(iter(parts), prepared.admissions, prepared.labitems, batch_size=BATCH))
    assert [g.where for g in streamed] == [g.where for g in graphs]
    assert [graph_bytes(g.data) for g in streamed] == [graph_bytes(g.data) for g in graphs]


def test_graphs_streamed_from_a_later_piece_are_numbered_on_from_its_start(prepared, graphs):
    """Rows of whole batches from some batch on (a Dask worker's piece), with ``start`` the admissions of each split
    before them: exactly those graphs of all the rows, numbered as there."""
    from pipeline.stages.dedup import edge_key
    from pipeline.stages.graph import stream_graphs
    from schemas.split import split_codes

    edges = prepared.edges.iloc[np.argsort(edge_key(prepared.edges), kind="stable")]
    code, hadm = split_codes(edges["SPLIT"]), edges["HADM_ID"].to_numpy("int64")
    train = np.unique(hadm[code == 0])
    assert len(train) > 2 * BATCH
    later = (code > 0) | (hadm >= train[BATCH])  # from train's second batch on
    streamed = list(stream_graphs(iter([edges[later]]), prepared.admissions, prepared.labitems, batch_size=BATCH,
                                  start={"train": BATCH}))
    expected = [g for g in graphs if not (g.split == "train" and g.batch == 0)]
    assert [g.where for g in streamed] == [g.where for g in expected]
    assert [graph_bytes(g.data) for g in streamed] == [graph_bytes(g.data) for g in expected]
