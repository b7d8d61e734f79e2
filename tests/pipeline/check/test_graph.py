"""pipeline/check/graph.py: ``check_graph`` guards any PyG graph, ``Data`` and ``HeteroData`` alike, and names each
bad point (the check, the store and attribute, the first rows); ``check_graph_files`` does it for ``.pt`` files,
loaded only with ``weights_only=True``.

Each broken case starts from a sound graph (PyG's Karate Club, shipped with PyG, with an ``edge_attr``; a small
``HeteroData`` of users and items), breaks one thing, and asserts the one finding it must give. badpoints' own
graphs (built from the sample) and graphs of PyG's own datasets give no error and no warning.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.datasets import FakeDataset, FakeHeteroDataset, KarateClub
from torch_geometric.loader import DataLoader
from torch_geometric.transforms import RandomLinkSplit, ToSparseTensor

import pipeline
from pipeline.check import GraphCheck, check_graph, check_graph_files
from pipeline.config import load_config
from pipeline.flow import prepare
from pipeline.output.write import graph_bytes
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import check_raw
from pipeline.stages.graph import build_graphs
from schemas.catalogue import check_info
from schemas.errors import StageError

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"
BUYS = ("user", "buys", "item")
BOUGHT = ("item", "rev_buys", "user")


# -- inputs ------------------------------------------------------------------------------------------
def karate() -> Data:
    """PyG's Karate Club (34 nodes, 156 edges, 4 classes) with a two-column edge_attr."""
    data = KarateClub()[0]
    data.edge_attr = torch.arange(2 * data.num_edges, dtype=torch.float32).reshape(-1, 2) / 100
    return data


def shop() -> HeteroData:
    """Five users (3 classes) who bought among four items, with the reverse edges; every node in some edge."""
    generator = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["user"].x = torch.randn(5, 3, generator=generator)
    data["user"].y = torch.tensor([0, 1, 2, 1, 0])
    data["item"].x = torch.randn(4, 2, generator=generator)
    data[BUYS].edge_index = torch.tensor([[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 0, 1]])
    data[BUYS].edge_attr = torch.randn(6, 2, generator=generator)
    data[BOUGHT].edge_index = data[BUYS].edge_index.flip(0)
    return data


GRAPHS = {"data": (karate, 4), "hetero": (shop, 3)}  # each kind's graph and its number of classes


def found(data: Data | HeteroData, num_classes: int, check: str) -> tuple[GraphCheck, object]:
    """The one finding of ``check``; a finding of an error check makes the graph not ok."""
    result = check_graph(data, num_classes=num_classes)
    matching = [f for f in result.findings if f.check == check]
    assert len(matching) == 1, [f.message for f in result.findings]
    (finding,) = matching
    assert finding.severity == check_info(check).severity and finding.stage == "graph"
    assert result.ok == (finding.severity != "error")
    return result, finding


# -- the sound graphs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_a_sound_graph_has_no_findings(kind):
    make, classes = GRAPHS[kind]
    result = check_graph(make(), num_classes=classes)
    assert result.ok and result.findings == () and result.bytes > 0


@pytest.fixture(scope="module")
def sample_graphs():
    """badpoints' own graphs of the sample, as a build makes them."""
    config = load_config()
    text, problems = load_text_tables(SAMPLE)
    assert not problems
    prepared = prepare(check_raw({name: table.frame for name, table in text.items()}).tables, config)
    return build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=16)


def test_badpoints_own_graphs_give_no_error_or_warning(sample_graphs):
    """Their multi-hot labels are 0 or 1 (num_classes=2). The one note is the lab items no admission of a batch
    measured: every graph holds the whole dictionary, so those nodes are in no edge."""
    assert len(sample_graphs) > 3
    for graph in sample_graphs:
        result = check_graph(graph.data, num_classes=2, where=graph.where)
        assert result.ok
        assert {(f.severity, f.check, f.column) for f in result.findings} <= {
            ("info", "graph_isolated_nodes", "labitem")}
        assert check_graph(graph.data, num_classes=2, isolated=False).findings == ()


@pytest.mark.parametrize("make", [
    lambda: KarateClub()[0],
    lambda: FakeDataset(num_graphs=1, avg_num_nodes=50, num_classes=5, edge_dim=1)[0],
    lambda: FakeDataset(num_graphs=3, avg_num_nodes=30, edge_dim=2, task="graph")[0],
    lambda: next(iter(DataLoader(FakeDataset(num_graphs=4, avg_num_nodes=30, task="graph"), batch_size=4))),
    lambda: FakeHeteroDataset(num_graphs=1, avg_num_nodes=40, edge_dim=2)[0],
    lambda: RandomLinkSplit(num_val=0.1, num_test=0.1)(KarateClub()[0])[1],
    lambda: ToSparseTensor()(KarateClub()[0]),
    lambda: ToSparseTensor()(FakeHeteroDataset(num_graphs=1, avg_num_nodes=40)[0]),
], ids=["karate", "fake-nodes", "fake-graph", "fake-batch", "fake-hetero", "link-split", "sparse", "sparse-hetero"])
def test_graphs_of_pyg_own_datasets_give_no_error_or_warning(make):
    """PyG's datasets that need no download: node and graph classification, a batch (its batch and ptr), a
    heterograph, a link split (edge_label_index and edge_label), edges as a sparse adjacency (adj_t)."""
    torch.manual_seed(0)
    result = check_graph(make())
    assert result.ok and [f.message for f in result.findings if f.severity != "info"] == []


# -- what check_graph names, on Data and on HeteroData -----------------------------------------------------
def _set(store, attr, value):
    store[attr] = value


BROKEN: dict[str, dict[str, tuple[Callable, str, str, int, str]]] = {
    # kind -> case -> (breaking, check, column, count, phrase of the message)
    "data": {
        "label": (lambda g: g.y.__setitem__(5, 4), "graph_label_range", "data.y", 1, "labels outside 0..3 at rows 5"),
        "index-past-nodes": (lambda g: g.edge_index.__setitem__((1, 10), 34), "graph_index_bounds", "data.edge_index",
                             1, "1 target indices outside 0..33 (the graph's nodes) at rows 10"),
        "int32-index": (lambda g: _set(g, "edge_index", g.edge_index.int()), "graph_edge_index", "data.edge_index", 1,
                        "edge_index is int32 [2, 156], not int64 [2, E]"),
        "x-nan-inf": (lambda g: g.x.__setitem__(([3, 7], [3, 0]), torch.tensor([float("nan"), float("inf")])),
                      "graph_finite", "data.x", 2, "2 non-finite values at rows 3, 7"),
        "edge-attr-nan-inf": (lambda g: g.edge_attr.__setitem__(([4, 9], [1, 1]), torch.tensor([float("-inf"),
                                                                                                float("nan")])),
                              "graph_finite", "data.edge_attr", 2, "2 non-finite values at rows 4, 9"),
        "edge-rows": (lambda g: _set(g, "edge_attr", g.edge_attr[:-1]), "graph_edge_rows", "data.edge_attr", 1,
                      "edge_attr has 155 rows for 156 edges"),
        "node-rows": (lambda g: _set(g, "train_mask", g.train_mask[:-2]), "graph_node_rows", "data.train_mask", 2,
                      "train_mask has 32 rows for 34 nodes"),
    },
    "hetero": {
        "label": (lambda g: g["user"].y.__setitem__(2, 3), "graph_label_range", "user.y", 1,
                  "labels outside 0..2 at rows 2"),
        "index-past-nodes": (lambda g: g[BUYS].edge_index.__setitem__((1, 2), 4), "graph_index_bounds",
                             "user__buys__item.edge_index", 1, "1 target indices outside 0..3 (item nodes) at rows 2"),
        "int32-index": (lambda g: _set(g[BOUGHT], "edge_index", g[BOUGHT].edge_index.int()), "graph_edge_index",
                        "item__rev_buys__user.edge_index", 1, "edge_index is int32 [2, 6], not int64 [2, E]"),
        "x-nan-inf": (lambda g: g["item"].x.__setitem__(([1, 3], [0, 1]), torch.tensor([float("inf"), float("nan")])),
                      "graph_finite", "item.x", 2, "2 non-finite values at rows 1, 3"),
        "edge-attr-nan-inf": (lambda g: g[BUYS].edge_attr.__setitem__((5, 0), float("nan")), "graph_finite",
                              "user__buys__item.edge_attr", 1, "1 non-finite values at rows 5"),
        "edge-rows": (lambda g: _set(g[BUYS], "edge_attr", g[BUYS].edge_attr[:-2]), "graph_edge_rows",
                      "user__buys__item.edge_attr", 2, "edge_attr has 4 rows for 6 edges"),
        "node-rows": (lambda g: _set(g["user"], "y", g["user"].y[:-1]), "graph_node_rows", "user.y", 1,
                      "y has 4 rows for 5 nodes"),
    },
}


@pytest.mark.parametrize(("kind", "case"), [(kind, case) for kind in BROKEN for case in BROKEN[kind]])
def test_check_graph_names_each_bad_point(kind, case):
    make, classes = GRAPHS[kind]
    breaking, check, column, count, phrase = BROKEN[kind][case]
    data = make()
    breaking(data)
    result, finding = found(data, classes, check)
    assert (finding.column, finding.count, finding.table) == (column, count, None)
    assert finding.message.startswith(f"[graph:input] {column} {check} failed on {count} row")
    assert phrase in finding.message and finding.message.endswith(check_info(check).advice)
    assert not result.ok
    assert [f.check for f in result.findings if f.severity == "error"] == [check]  # nothing else is blamed
    with pytest.raises(StageError) as raised:
        check_graph(data, num_classes=classes, raise_error=True)
    assert raised.value.check == check and str(raised.value) == finding.message


@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_check_graph_does_not_change_the_graph(kind):
    make, classes = GRAPHS[kind]
    data = make()
    BROKEN[kind]["x-nan-inf"][0](data)
    before = copy.deepcopy(data)
    assert not check_graph(data, num_classes=classes, max_bytes=1).ok
    assert [sorted(store.keys()) for store in data.stores] == [sorted(store.keys()) for store in before.stores]
    assert "_cached_attr" not in data.stores[0].__dict__  # PyG's attribute cache is not filled in
    for store, original in zip(data.stores, before.stores):
        assert all(torch.equal(store[k].nan_to_num(), v.nan_to_num()) if v.is_floating_point() else
                   torch.equal(store[k], v) for k, v in original.items() if isinstance(v, torch.Tensor))


def test_a_label_attribute_is_named_and_labels_unchecked_without_num_classes():
    data = karate()
    data.y[0] = 9
    result = check_graph(data)
    assert result.ok  # no number of classes, no label range: a note says the labels were not checked
    assert [(f.severity, f.check, f.column, f.count) for f in result.findings] == [
        ("info", "graph_labels_unchecked", "data.y", 1)]
    assert "y not checked against a number of classes: none was given" in result.findings[0].message
    assert "num_classes" in result.findings[0].message and "--num-classes" in result.findings[0].message
    assert [f.column for f in check_graph(shop()).findings] == ["user.y"]  # per store that holds labels
    data.y = None
    assert check_graph(data).findings == ()  # no labels, nothing unchecked
    data = karate()
    data.edge_label = torch.ones(data.num_edges)
    data.edge_label[[3, 8]] = 2.0
    (finding,) = check_graph(data, num_classes=2, label="edge_label").findings
    assert (finding.check, finding.column, finding.count) == ("graph_label_range", "data.edge_label", 2)
    assert "labels not 0 or 1 at rows 3, 8" in finding.message


def test_fractional_labels_are_outside_the_classes():
    data = karate()
    data.y = data.y.float()
    data.y[6] = 1.5
    _, finding = found(data, 4, "graph_label_range")
    assert finding.count == 1 and "at rows 6" in finding.message


def test_a_graph_label_of_a_data_is_one_row_per_graph():
    batch = next(iter(DataLoader(FakeDataset(num_graphs=3, avg_num_nodes=20, task="graph"), batch_size=3)))
    assert check_graph(batch, num_classes=10).ok
    batch.y = torch.cat([batch.y, batch.y[:1]])  # four labels for three graphs and none of nodes or edges
    _, finding = found(batch, 10, "graph_node_rows")
    assert finding.column == "data.y" and "y has 4 rows for" in finding.message


# -- link splits: edge_label_index and what goes with it ------------------------------------------------------
@pytest.fixture
def link() -> Data:
    torch.manual_seed(0)
    return RandomLinkSplit(num_val=0.1, num_test=0.1)(KarateClub()[0])[0]


def test_an_edge_label_index_past_the_nodes_is_out_of_bounds(link):
    link.edge_label_index[0, 5] = 40
    _, finding = found(link, 4, "graph_index_bounds")
    assert finding.column == "data.edge_label_index" and "1 source indices outside 0..33" in finding.message


def test_edge_label_has_a_row_per_column_of_edge_label_index(link):
    labels = link.edge_label_index.shape[1]
    link.edge_label = link.edge_label[:-1]
    _, finding = found(link, 4, "graph_edge_rows")
    assert finding.column == "data.edge_label"
    assert f"edge_label has {labels - 1} rows for {labels} edges of edge_label_index" in finding.message


# -- magnitudes no model should read ---------------------------------------------------------------------------
def test_a_float_beyond_the_build_s_error_bound_is_an_error_naming_the_attribute_and_rows():
    """A z-score of 3e11 is finite, and no measurement: the std guard failed. Above the error bound badpoints'
    own scale stage stops at (1e6 by default), a float tensor's value is an error, in float32 as in float64."""
    from schemas.scale import Z_ERROR_BOUND

    data = karate()
    data.edge_attr[[7, 40, 41], 0] = torch.tensor([3e11, -2e6, 9e5])  # 9e5 is below the bound
    result, finding = found(data, 4, "graph_magnitude")
    assert (finding.column, finding.count) == ("data.edge_attr", 2) and not result.ok
    assert f"2 values with |value| above {Z_ERROR_BOUND:g} (max_abs) at rows 7, 40" in finding.message
    assert "3e+11" not in finding.message and "2e+06" not in finding.message  # no raw value
    hetero = shop()
    hetero[BUYS].edge_attr[2, 1] = 1e30
    _, finding = found(hetero, 3, "graph_magnitude")
    assert (finding.column, finding.count) == ("user__buys__item.edge_attr", 1) and "at rows 2" in finding.message
    assert check_graph(data, num_classes=4, max_abs=1e12).ok  # a bound of the caller's
    assert check_graph(data, num_classes=4, max_abs=None).ok  # none
    data.edge_attr[7, 0] = float("inf")  # not finite: graph_finite's, not counted twice
    assert {f.check: f.count for f in check_graph(data, num_classes=4).findings} == {
        "graph_finite": 1, "graph_magnitude": 1}
    with pytest.raises(StageError, match="graph_magnitude"):
        check_graph(hetero, num_classes=3, raise_error=True)


def test_the_bound_is_held_in_files_too(tmp_path):
    data = karate()
    data.edge_attr[3, 1] = 5e7
    torch.save(data.to_dict(), tmp_path / "z.pt")
    findings, _ = check_graph_files(tmp_path, num_classes=4)
    assert [(f.check, f.table, f.column) for f in findings] == [("graph_magnitude", "z.pt", "data.edge_attr")]
    assert check_graph_files(tmp_path, num_classes=4, max_abs=None).findings == []


# -- notes and warnings ------------------------------------------------------------------------------------------
def test_nodes_in_no_edge_are_a_note_naming_them():
    data = karate()
    keep = (data.edge_index != 11).all(dim=0) & (data.edge_index != 30).all(dim=0)
    data.edge_index, data.edge_attr = data.edge_index[:, keep], data.edge_attr[keep]
    result, finding = found(data, 4, "graph_isolated_nodes")
    assert result.ok and finding.severity == "info" and (finding.column, finding.count) == ("data", 2)
    assert "data graph_isolated_nodes: 2 of 34 nodes in no edge, at rows 11, 30" in finding.message


def test_a_node_type_in_no_edge_type_is_all_isolated():
    data = shop()
    data["shop"].x = torch.zeros(3, 1)
    _, finding = found(data, 3, "graph_isolated_nodes")
    assert (finding.column, finding.count) == ("shop", 3) and "3 of 3 nodes in no edge" in finding.message


def test_bytes_are_reported_and_a_graph_above_max_bytes_is_a_warning_that_never_raises():
    data = karate()
    tensors = sum(v.numel() * v.element_size() for v in data.to_dict().values() if isinstance(v, torch.Tensor))
    assert check_graph(data).bytes == tensors
    result = check_graph(data, num_classes=4, max_bytes=1024, raise_error=True)
    (finding,) = result.findings
    assert result.ok and finding.severity == "warning" and finding.check == "graph_bytes"
    assert f"({result.bytes:,} bytes), above max_bytes 1.0 KiB" in finding.message
    assert check_graph(data, num_classes=4, max_bytes=None).findings == ()


def test_pyg_validate_runs_on_a_graph_with_only_notes(monkeypatch):
    def rejects(self, raise_on_error=True):
        raise ValueError("'edge_index' of 'Data' is odd\nsecond line")

    monkeypatch.setattr(Data, "validate", rejects)
    result = check_graph(karate(), num_classes=4, max_bytes=1)
    assert [(f.check, f.column) for f in result.findings] == [("graph_bytes", "graph"), ("graph_pyg", "graph")]
    assert "'edge_index' of 'Data' is odd" in result.findings[1].message and "second" not in result.findings[1].message


# -- the result ----------------------------------------------------------------------------------------------
def test_the_result_reads_as_text_and_html():
    data = karate()
    data.x[0, 0] = float("nan")
    result = check_graph(data, num_classes=4)
    text = repr(result)
    assert text.startswith("GraphCheck(ok=False: 1 error, 0 warnings, 0 notes; 8.5 KiB of tensors)")
    assert "\n  error: [graph:input] data.x graph_finite failed on 1 row" in text
    page = result._repr_html_()
    assert "<table>" in page and "<code>graph_finite</code>" in page and "<code>data.x</code>" in page
    assert repr(check_graph(karate(), num_classes=4)).startswith("GraphCheck(ok=True: 0 errors, 0 warnings, 0 notes;")


def test_findings_are_what_a_report_holds():
    data = karate()
    data.y[1] = -1
    (finding,) = check_graph(data, num_classes=4, where="karate").findings
    record = finding.as_json()
    assert {k: record[k] for k in ("severity", "stage", "table", "check", "column", "count", "lines")} == {
        "severity": "error", "stage": "graph", "table": "karate", "check": "graph_label_range", "column": "data.y",
        "count": 1, "lines": []}
    assert record["message"].startswith("[graph:input] karate.data.y graph_label_range")


def test_what_is_not_a_graph_is_a_type_error():
    with pytest.raises(TypeError, match="Data or HeteroData, not dict"):
        check_graph({"edge_index": torch.zeros(2, 0, dtype=torch.int64)})


def test_pipeline_hands_out_check_graph_and_loads_no_torch_until_used():
    assert pipeline.check_graph is check_graph and "check_graph_files" in pipeline.__all__
    code = "import sys, pipeline; pipeline.check_graph; assert 'torch' not in sys.modules, 'torch loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# -- .pt files -----------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_of_badpoints_graph_files_is_read_and_checked(sample_graphs, tmp_path):
    for graph in sample_graphs[:3]:  # train/batch 0 .. 2
        path = tmp_path / graph.where.split("/")[0] / f"batch_{int(graph.where.split()[-1]):05d}.pt"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(graph_bytes(graph.data))  # the bytes a build writes
    (tmp_path / "notes.txt").write_text("not a graph file: left alone")
    findings, inputs = check_graph_files(tmp_path, num_classes=2)
    assert [i.table for i in inputs] == ["train/batch_00000.pt", "train/batch_00001.pt", "train/batch_00002.pt"]
    assert all(i.sha256 == _sha256(Path(i.path)) and i.rows == 1 for i in inputs)
    assert {(f.severity, f.check, f.column) for f in findings} <= {("info", "graph_isolated_nodes", "labitem")}
    assert {f.table for f in findings} <= {i.table for i in inputs}
    assert check_graph_files(tmp_path, num_classes=2, isolated=False).findings == []


def test_a_file_of_several_graphs_names_each(tmp_path):
    sound, broken = karate(), karate()
    broken.edge_index[0, 3] = 34
    path = tmp_path / "graphs.pt"
    torch.save([sound.to_dict(), broken.to_dict(), shop().to_dict()], path)
    findings, (read,) = check_graph_files(path, num_classes=4)
    assert (read.table, read.path, read.rows, read.sha256) == (path.as_posix(), str(path), 3, _sha256(path))
    assert [(f.check, f.table, f.column) for f in findings] == [
        ("graph_index_bounds", f"{path.as_posix()}[1]", "data.edge_index")]


def test_a_saved_data_object_is_refused_unread_and_its_to_dict_accepted(tmp_path):
    torch.save(karate(), tmp_path / "object.pt")  # needs PyG's classes unpickled: more than weights_only
    torch.save(shop().to_dict(), tmp_path / "plain.pt")
    findings, inputs = check_graph_files(tmp_path, num_classes=3)
    assert [(f.check, f.table, f.severity) for f in findings] == [("graph_unsafe", "object.pt", "error")]
    assert "refused by torch.load(weights_only=True)" in findings[0].message
    assert [(i.table, i.rows) for i in inputs] == [("object.pt", 0), ("plain.pt", 1)]


class Payload:
    """Unpickling this runs a shell command that creates ``sentinel``: harmless, but proof it ran."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.sentinel))}",)


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_a_pickle_that_needs_more_than_weights_only_is_refused_and_never_runs(tmp_path, how):
    sentinel, path = tmp_path / "payload-ran", tmp_path / "evil.pt"
    if how == "torch.save":
        torch.save({"x": torch.zeros(2, 1), "edge_index": Payload(sentinel)}, path)
    else:
        path.write_bytes(pickle.dumps(Payload(sentinel)))
    findings, inputs = check_graph_files(path)
    assert [(f.check, f.severity) for f in findings] == [("graph_unsafe", "error")]
    assert not sentinel.exists()
    assert inputs[0].rows == 0 and inputs[0].sha256 == _sha256(path)
    if how == "torch.save":  # control: the file really runs code when unpickled without weights_only
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert sentinel.exists()


@pytest.mark.parametrize("record", [
    torch.zeros(3), {"layer.weight": torch.zeros(2, 2)}, {"a": {"x": torch.zeros(1)}, "b": torch.zeros(1)}, [], {},
], ids=["tensor", "state-dict", "mixed", "empty-list", "empty-dict"])
def test_a_plain_file_that_holds_no_graph_is_refused(tmp_path, record):
    torch.save(record, tmp_path / "x.pt")
    findings, _ = check_graph_files(tmp_path / "x.pt")
    assert [f.check for f in findings] == ["graph_unsafe"] and "holds" in findings[0].message


def test_a_missing_path_is_an_error_of_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError):
        check_graph_files(tmp_path / "absent.pt")


def test_a_file_that_cannot_be_read_is_named_and_the_others_are_checked(tmp_path, monkeypatch):
    torch.save(karate().to_dict(), tmp_path / "a.pt")
    torch.save(karate().to_dict(), tmp_path / "b.pt")
    read_bytes = Path.read_bytes

    def refuses(path: Path) -> bytes:
        if path.name == "a.pt":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuses)
    findings, inputs = check_graph_files(tmp_path, num_classes=4)
    assert [(f.check, f.stage, f.table, f.severity) for f in findings] == [("file_unreadable", "load", "a.pt", "error")]
    assert "Permission denied" in findings[0].message
    assert [(i.table, i.rows) for i in inputs] == [("b.pt", 1)]
