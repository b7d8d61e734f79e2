"""pipeline/preflight.py: one forward and backward pass of a real PyG model on a built graph.

The model is what a user would train on these graphs: two HeteroConv layers of SAGEConv over both edge
types and a head giving each admission a logit per lab item (the next-timestep multi-hot ``y``). It reads each
node type's categories one-hot encoded beside its numerical columns (``x``), as the graph fixture gives them.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch_geometric.nn import HeteroConv, SAGEConv

from pipeline.config import load_config
from pipeline.builds import build
from pipeline.preflight import default_loss, preflight
from pipeline.output.write import load_graphs, read_manifest
from schemas.graph import EDGE, REVERSE

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = 16


class LabGNN(nn.Module):
    """Two hetero SAGE layers; logits = Linear(admission) + admission . labitem (so every layer is used)."""

    def __init__(self, n_items: int, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            HeteroConv({EDGE: SAGEConv((-1, -1), hidden), REVERSE: SAGEConv((-1, -1), hidden)}, aggr="sum")
            for _ in range(2))
        self.head = nn.Linear(hidden, n_items)

    def embed(self, x_dict, edge_index_dict):
        h = x_dict
        for n, conv in enumerate(self.convs):
            h = conv(h, edge_index_dict)
            if n < len(self.convs) - 1:
                h = {key: torch.relu(value) for key, value in h.items()}
        return h

    def forward(self, x_dict, edge_index_dict):
        h = self.embed(x_dict, edge_index_dict)
        return self.head(h["admission"]) + h["admission"] @ h["labitem"].T / math.sqrt(HIDDEN)


class WithUnusedLayer(LabGNN):
    def __init__(self, n_items: int) -> None:
        super().__init__(n_items)
        self.spare = nn.Linear(HIDDEN, HIDDEN)  # registered, never called


class DetachesHidden(LabGNN):
    def forward(self, x_dict, edge_index_dict):
        h = self.convs[0](x_dict, edge_index_dict)
        h = {key: torch.relu(value).detach() for key, value in h.items()}  # cuts the first layer off
        h = self.convs[1](h, edge_index_dict)
        return self.head(h["admission"]) + h["admission"] @ h["labitem"].T / math.sqrt(HIDDEN)


class TimesNaN(LabGNN):
    def forward(self, x_dict, edge_index_dict):
        return super().forward(x_dict, edge_index_dict) * float("nan")


def _make(cls, graph):
    torch.manual_seed(0)
    model = cls(graph["labitem"].num_nodes)
    with torch.no_grad():  # materialise the lazy (-1, -1) layers
        model(graph.x_dict, graph.edge_index_dict)
    return model


def _one_hot(graph, features: dict) -> None:
    """Each node type's x as the model reads it: its numerical columns, then each categorical column of x_cat
    one-hot over its cardinality (the manifest's ``features``)."""
    for node_type in graph.node_types:
        store = graph[node_type]
        sizes = [column["cardinality"] for column in features[f"{node_type}.x_cat"]]
        store.x = torch.cat([store.x, *(nn.functional.one_hot(store.x_cat[:, at], size).float()
                                        for at, size in enumerate(sizes))], dim=1)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    out = tmp_path_factory.mktemp("preflight") / "out"
    assert build(ROOT / "data" / "sample", out, load_config()).exit_code == 0
    graphs = load_graphs(out, "train")
    assert len(graphs) == 1
    _one_hot(graphs[0], read_manifest(out)["features"])
    return graphs[0]


def test_the_sound_model_passes(graph):
    model = _make(LabGNN, graph)
    result = preflight(model, graph)
    assert result.ok, result.problems
    assert math.isfinite(result.loss) and result.loss > 0
    output = model(graph.x_dict, graph.edge_index_dict)
    assert output.shape == graph["admission"].y.shape  # so the default loss is BCE against y
    bce = torch.nn.functional.binary_cross_entropy_with_logits(output, graph["admission"].y)
    assert result.loss == pytest.approx(float(bce), rel=1e-5)
    assert all(p.grad is None for p in model.parameters())  # preflight leaves no gradients behind


def test_every_parameter_gets_a_finite_gradient(graph):
    model = _make(LabGNN, graph)
    loss = default_loss(model(graph.x_dict, graph.edge_index_dict), graph)
    loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


def test_a_few_training_steps_stay_finite_and_lower_the_loss(graph):
    model = _make(LabGNN, graph)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = default_loss(model(graph.x_dict, graph.edge_index_dict), graph)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
    for name, parameter in model.named_parameters():
        assert torch.isfinite(parameter).all(), name
    assert preflight(model, graph).ok


def test_preflight_does_not_change_the_model_or_the_graph(graph):
    model = _make(LabGNN, graph)
    before = copy.deepcopy(model.state_dict())
    x = graph["admission"].x.clone()
    preflight(model, graph)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(graph["admission"].x, x)


def test_an_unused_layer_is_named(graph):
    result = preflight(_make(WithUnusedLayer, graph), graph)
    assert not result.ok
    assert sorted(p.split()[1] for p in result.problems) == ["spare.bias", "spare.weight"]
    assert all("received no gradient" in p for p in result.problems)


def test_a_detached_hidden_state_reports_the_cut_off_parameters(graph):
    result = preflight(_make(DetachesHidden, graph), graph)
    assert not result.ok
    named = {p.split()[1] for p in result.problems}
    first_layer = {name for name, _ in _make(LabGNN, graph).named_parameters() if name.startswith("convs.0.")}
    assert named == first_layer and first_layer
    assert all("received no gradient" in p for p in result.problems)


def test_nan_in_the_forward_pass_is_caught(graph):
    result = preflight(_make(TimesNaN, graph), graph)
    assert not result.ok
    assert any(p.startswith("output has") and "non-finite" in p for p in result.problems)
    assert any(p == "loss is nan" for p in result.problems)
    assert any("non-finite gradient" in p for p in result.problems)


@pytest.mark.parametrize("node_type", ["admission", "labitem"])
def test_an_inf_feature_that_got_past_the_guard_is_caught(graph, node_type):
    poisoned = copy.copy(graph)
    poisoned[node_type].x = graph[node_type].x.clone()
    poisoned[node_type].x[0, 0] = float("inf")
    model = _make(LabGNN, graph)
    result = preflight(model, poisoned)
    assert not result.ok
    assert any(p.startswith("output has") and "non-finite" in p for p in result.problems), result.problems
    assert any(p.startswith("loss is") for p in result.problems)
    assert torch.isfinite(graph[node_type].x).all()  # the shared graph was not touched


def test_a_model_whose_output_is_cut_from_its_parameters_is_reported(graph):
    class Frozen(LabGNN):
        def forward(self, x_dict, edge_index_dict):
            with torch.no_grad():
                return super().forward(x_dict, edge_index_dict)

    result = preflight(_make(Frozen, graph), graph)
    assert any("does not require grad" in p for p in result.problems)


class UsesEdgeAttr(LabGNN):
    """Adds each admission's summed z-score (edge_attr[:, 0]) when given the edge attributes."""

    def forward(self, x_dict, edge_index_dict, edge_attr_dict=None):
        logits = super().forward(x_dict, edge_index_dict)
        if edge_attr_dict is None:
            return logits
        z = edge_attr_dict[EDGE][:, 0]
        source = edge_index_dict[EDGE][0]
        total = torch.zeros(logits.shape[0]).index_add(0, source, z)
        return logits + total[:, None]


def test_an_inf_in_edge_attr_that_got_past_the_guard_is_caught(graph):
    poisoned = copy.copy(graph)
    poisoned[EDGE].edge_attr = graph[EDGE].edge_attr.clone()
    poisoned[EDGE].edge_attr[5, 0] = float("inf")
    model = _make(UsesEdgeAttr, graph)
    assert not torch.isfinite(model(poisoned.x_dict, poisoned.edge_index_dict, poisoned.edge_attr_dict)).all()
    assert not preflight(model, poisoned).ok
