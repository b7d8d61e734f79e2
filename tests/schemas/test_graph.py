"""schemas/graph.py: ``graph_problems`` passes a sound graph and names every bad point of a broken one.

Each test starts from a real graph built from the sample (the first training
batch), breaks one thing in a deep copy, and asserts the StageError: stage
``graph``, the check id, the store and attribute as column, the batch as table,
and a message that names the offending rows or counts. The last section holds ``graph_problems`` to the guard of
any PyG graph (``pyg_problems``) under badpoints' rules, and that guard to a ``Data`` and to rules of its own.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from pipeline.config import load_config
from pipeline.flow import prepare
from pipeline.stages.graph import build_graphs, graph_limits
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import check_raw
from schemas.catalogue import check_info
from schemas.errors import StageError
from schemas.graph import (ANY_GRAPH, EDGE, NUMERICAL, REVERSE, Column, GraphLimits, GraphRules, badpoints_rules,
                           graph_problems, pyg_problems, size_text, tensor_bytes)

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
WHERE = "train/batch 0"
FORWARD = "admission__did__labitem"
BACKWARD = "labitem__rev_did__admission"


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built() -> tuple[HeteroData, GraphLimits]:
    """The sample's first training graph and the limits ``flow.build`` would check it against."""
    config = load_config()
    text, problems = load_text_tables(SAMPLE)
    assert not problems
    prepared = prepare(check_raw({name: table.frame for name, table in text.items()}).tables, config)
    assert prepared.stopped_at is None
    graphs = build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=16)
    limits = graph_limits(prepared.fitted.get("encode"), prepared.edges, prepared.admissions,
                          max_timestep=config.bucket.max_timestep)
    assert graphs[0].where == WHERE
    return graphs[0].data, limits


@pytest.fixture
def data(built) -> HeteroData:
    """A deep copy of the sound graph: a test may break it."""
    return copy.deepcopy(built[0])


@pytest.fixture(scope="module")
def limits(built) -> GraphLimits:
    return built[1]


def only(data: HeteroData, limits: GraphLimits, check: str) -> StageError:
    """The one problem of ``check`` (others may be reported alongside it); its common fields are checked."""
    problems = graph_problems(data, limits, where=WHERE)
    assert all(isinstance(p, StageError) for p in problems)
    found = [p for p in problems if p.check == check]
    assert len(found) == 1, [str(p) for p in problems]
    (error,) = found
    assert (error.stage, error.side, error.table) == ("graph", "output", WHERE)
    assert error.advice == check_info(check).advice
    assert str(error).startswith(f"[graph:output] {WHERE}.{error.column} {check} failed on {error.count} row")
    return error


def checks(data: HeteroData, limits: GraphLimits) -> list[tuple[str, str]]:
    return sorted((p.check, p.column) for p in graph_problems(data, limits, where=WHERE))


# -- the sound graph -----------------------------------------------------------------------------------
def test_the_sample_graph_has_no_problems(built, limits):
    data, _ = built
    assert graph_problems(data, limits, where=WHERE) == []
    assert data[EDGE].edge_index.shape[1] > 0 and data["admission"].num_nodes == 16
    assert int(data[EDGE].edge_attr_cat[:, 0].max()) < limits.cardinalities("edge_attr_cat")[0]
    assert data["admission"].x.shape == (16, 0) and data["admission"].x_cat.dtype == torch.int64
    assert limits.max_timestep >= int(data[EDGE].timestep.max())


def test_graph_problems_does_not_mutate_its_input(data, limits):
    data[EDGE].edge_attr[0, 1] = float("inf")
    before = copy.deepcopy(data)
    assert graph_problems(data, limits, where=WHERE)
    assert data.node_types == before.node_types and data.edge_types == before.edge_types
    for store, original in zip(data.stores, before.stores):
        assert list(store.keys()) == list(original.keys())
        assert all(torch.equal(store[key], value) if isinstance(value, torch.Tensor) else store[key] == value
                   for key, value in original.items())


# -- graph_finite ------------------------------------------------------------------------------------
def test_inf_and_nan_in_edge_attr(data, limits):
    data[EDGE].edge_attr[5, 0] = float("inf")
    data[EDGE].edge_attr[7, 0] = float("nan")
    data[EDGE].edge_attr[9, 0] = float("-inf")
    error = only(data, limits, "graph_finite")
    assert error.column == f"{FORWARD}.edge_attr" and error.count == 3
    assert "3 non-finite values at rows 5, 7, 9" in str(error)
    assert checks(data, limits) == [("graph_finite", f"{FORWARD}.edge_attr")]  # the z column: nothing else


def test_nan_and_inf_in_a_numerical_admission_column(data, limits):
    """The sample's admissions have no numerical column; limits that name two hold x to them, finite."""
    numerical = GraphLimits(max_timestep=limits.max_timestep, features={
        **limits.features, "admission.x": (Column("AGE", NUMERICAL), Column("WEIGHT", NUMERICAL))})
    data["admission"].x = torch.zeros(data["admission"].num_nodes, 2)
    assert graph_problems(data, numerical, where=WHERE) == []
    data["admission"].x[3, 1] = float("nan")
    data["admission"].x[11, 0] = float("inf")
    error = only(data, numerical, "graph_finite")
    assert error.column == "admission.x" and error.count == 2
    assert "2 non-finite values at rows 3, 11" in str(error)


def test_many_non_finite_values_are_capped_in_the_message(data, limits):
    data[REVERSE].edge_attr[:25, 1] = float("nan")
    error = only(data, limits, "graph_finite")
    assert error.column == f"{BACKWARD}.edge_attr" and error.count == 25
    assert "25 non-finite values at rows 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (+15 more)" in str(error)


def test_exactly_the_cap_of_non_finite_values_are_all_listed_with_nothing_more(data, limits):
    data[REVERSE].edge_attr[:10, 1] = float("nan")
    message = str(only(data, limits, "graph_finite"))
    assert "10 non-finite values at rows 0, 1, 2, 3, 4, 5, 6, 7, 8, 9" in message
    assert "more" not in message and "XX" not in message


# -- graph_index_bounds --------------------------------------------------------------------------------
def test_target_index_past_the_labitems(data, limits):
    items = data["labitem"].num_nodes
    data[EDGE].edge_index[1, 10] = items
    error = only(data, limits, "graph_index_bounds")
    assert error.column == f"{FORWARD}.edge_index" and error.count == 1
    assert f"1 target indices outside 0..{items - 1} (labitem nodes) at rows 10" in str(error)


def test_negative_source_index(data, limits):
    data[EDGE].edge_index[0, [4, 20]] = -1
    error = only(data, limits, "graph_index_bounds")
    assert error.column == f"{FORWARD}.edge_index" and error.count == 2
    assert "2 source indices outside 0..15 (admission nodes) at rows 4, 20" in str(error)


def test_target_index_past_the_admissions_on_the_reverse_edge(data, limits):
    data[REVERSE].edge_index[1, 3] = 16
    error = only(data, limits, "graph_index_bounds")
    assert error.column == f"{BACKWARD}.edge_index" and error.count == 1
    assert "1 target indices outside 0..15 (admission nodes) at rows 3" in str(error)


def test_negative_source_index_on_the_reverse_edge(data, limits):
    items = data["labitem"].num_nodes
    data[REVERSE].edge_index[0, 8] = -5
    error = only(data, limits, "graph_index_bounds")
    assert error.column == f"{BACKWARD}.edge_index" and error.count == 1
    assert f"1 source indices outside 0..{items - 1} (labitem nodes) at rows 8" in str(error)


# -- graph_edge_index ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("breaking", "shown"), [
    (lambda index: index.float(), "float32 [2, {E}]"),
    (lambda index: index.int(), "int32 [2, {E}]"),
    (lambda index: torch.cat([index, index[:1]]), "int64 [3, {E}]"),
], ids=["float", "int32", "three-rows"])
def test_edge_index_not_int64_two_by_e(data, limits, breaking, shown):
    edges = data[EDGE].edge_index.shape[1]
    data[EDGE].edge_index = breaking(data[EDGE].edge_index)
    error = only(data, limits, "graph_edge_index")
    assert error.column == f"{FORWARD}.edge_index" and error.count == 1
    assert f"edge_index is {shown.format(E=edges)}, not int64 [2, E]" in str(error)


def test_missing_edge_index(data, limits):
    del data[REVERSE].edge_index
    error = only(data, limits, "graph_edge_index")
    assert error.column == f"{BACKWARD}.edge_index" and "edge_index is missing" in str(error)


# -- graph_edge_rows -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("attr", "change"), [
    ("edge_attr", -1), ("edge_attr_cat", -2), ("timestep", +1), ("is_history", -3), ("is_history", +2),
])
def test_per_edge_tensor_with_other_rows_than_edges(data, limits, attr, change):
    edges = data[EDGE].edge_index.shape[1]
    value = data[EDGE][attr]
    data[EDGE][attr] = value[:edges + change] if change < 0 else torch.cat([value, value[:change]])
    error = only(data, limits, "graph_edge_rows")
    assert error.column == f"{FORWARD}.{attr}" and error.count == abs(change)
    assert f"{attr} has {edges + change} rows for {edges} edges" in str(error)


def test_scalar_per_edge_tensor(data, limits):
    data[REVERSE].timestep = torch.tensor(3)
    error = only(data, limits, "graph_edge_rows")
    assert error.column == f"{BACKWARD}.timestep" and "timestep has 0 rows for" in str(error)


# -- graph_node_rows -----------------------------------------------------------------------------------
def test_admission_x_with_one_row_too_few(data, limits):
    data["admission"].x = data["admission"].x[:-1]
    error = only(data, limits, "graph_node_rows")
    assert error.column == "admission.x" and error.count == 1
    assert "x has 15 rows for 16 nodes" in str(error)


def test_admission_x_three_rows_short_counts_three(data, limits):
    data["admission"].x = data["admission"].x[:-3]
    error = only(data, limits, "graph_node_rows")
    assert error.count == 3 and "x has 13 rows for 16 nodes" in str(error)


def test_a_scalar_node_tensor_has_no_rows(data, limits):
    data["admission"].weight = torch.tensor(1.0)
    error = only(data, limits, "graph_node_rows")
    assert (error.column, error.count) == ("admission.weight", 16) and "weight has 0 rows for 16 nodes" in str(error)


def test_a_non_finite_graph_level_scalar_is_one_row_of_the_global_store(data, limits):
    data.scale = torch.tensor(float("nan"))
    error = only(data, limits, "graph_finite")
    assert (error.column, error.count) == ("global.scale", 1)


def test_labitem_x_cat_with_a_column_missing_is_a_shape_problem_not_a_code_check(data, limits):
    data["labitem"].x_cat = data["labitem"].x_cat[:, :1].clone()
    error = only(data, limits, "graph_node_rows")
    assert (error.column, error.count) == ("labitem.x_cat", 1)
    assert "x_cat has 1 columns, expected 2" in str(error)
    assert [check for check, _ in checks(data, limits)] == ["graph_node_rows"]


def test_a_graph_without_labitem_features_is_named_without_a_crash(data, limits):
    del data["labitem"].x
    del data["labitem"].x_cat
    found = {p.column: p for p in graph_problems(data, limits, where=WHERE)}
    assert found["labitem.x"].check == "graph_node_rows" and "x is missing, expected float [" in str(
        found["labitem.x"])
    assert found["labitem.x_cat"].check == "graph_code_range" and "x_cat is missing, expected int64 [" in str(
        found["labitem.x_cat"])


def test_an_admission_store_emptied_to_zero_nodes_counts_each_tensors_rows(data, limits):
    """x of shape [0, k] fits zero nodes; every other tensor is off by all its rows."""
    admissions = data["admission"].num_nodes
    data["admission"].x = data["admission"].x[:0]
    data["admission"].num_nodes = 0
    problems = {p.column: p for p in graph_problems(data, limits, where=WHERE) if p.check == "graph_node_rows"}
    assert "admission.x" not in problems
    assert problems["admission.y"].count == admissions and f"y has {admissions} rows for 0 nodes" in str(
        problems["admission.y"])


def test_a_scalar_in_a_node_store_of_unknown_size_is_one_problem_row():
    lone = HeteroData()
    lone["admission"].flag = torch.tensor(1.0)  # PyG cannot infer num_nodes from a scalar
    (problem,) = [p for p in graph_problems(lone, GraphLimits(max_timestep=1, features={}),
                                            where=WHERE) if p.check == "graph_node_rows"]
    assert (problem.column, problem.count) == ("admission.flag", 1)


@pytest.mark.parametrize("breaking", [
    lambda store: setattr(store, "x", torch.cat([store.x, store.x[:1]])),
    lambda store: setattr(store, "y", store.y[:-1]),
    lambda store: setattr(store, "node_id", store.node_id[:-1]),
], ids=["x-extra-row", "y-short", "node_id-short"])
def test_node_tensor_with_other_rows_than_nodes_is_reported(data, limits, breaking):
    breaking(data["admission"])
    assert "graph_node_rows" in {check for check, _ in checks(data, limits)}


# -- graph_node_ids ------------------------------------------------------------------------------------
def test_the_sound_graphs_node_ids_are_arange_and_its_raw_ids_one_per_node(built):
    data, _ = built
    for node_type, raw in (("admission", "hadm_id"), ("labitem", "itemid")):
        assert torch.equal(data[node_type].node_id, torch.arange(data[node_type].num_nodes))
        assert len(data[node_type][raw].unique()) == data[node_type].num_nodes


def test_node_id_holding_the_raw_itemids_is_refused(data, limits):
    """The layout before node_id was arange: Embedding(num_nodes, d)(node_id) raised an IndexError."""
    data["labitem"].node_id = data["labitem"].itemid.clone()
    error = only(data, limits, "graph_node_ids")
    items = data["labitem"].num_nodes
    assert error.column == "labitem.node_id" and error.count == items
    assert f"node_id is not arange({items}): {items} nodes hold another value at rows 0, 1, 2" in str(error)


def test_node_id_with_two_nodes_swapped_is_refused(data, limits):
    data["admission"].node_id[[3, 7]] = data["admission"].node_id[[7, 3]]
    error = only(data, limits, "graph_node_ids")
    assert error.column == "admission.node_id" and error.count == 2
    assert "node_id is not arange(16): 2 nodes hold another value at rows 3, 7" in str(error)


@pytest.mark.parametrize("node_type", ["admission", "labitem"])
def test_missing_node_id_is_refused(data, limits, node_type):
    del data[node_type].node_id
    error = only(data, limits, "graph_node_ids")
    assert (error.column, error.count) == (f"{node_type}.node_id", 1)
    assert f"{node_type}.node_id graph_node_ids failed on 1 row. node_id is missing. " in str(error)
    assert error.failure_cases.columns.tolist() == ["line"] and error.failure_cases["line"].dtype == "int64"


def test_int32_node_id_is_refused(data, limits):
    data["admission"].node_id = data["admission"].node_id.int()
    error = only(data, limits, "graph_node_ids")
    assert error.count == 1 and "node_id is int32 [16], not arange(16) (int64)" in str(error)


@pytest.mark.parametrize("node_type,raw", [("admission", "hadm_id"), ("labitem", "itemid")])
def test_missing_raw_id_is_refused(data, limits, node_type, raw):
    del data[node_type][raw]
    error = only(data, limits, "graph_node_ids")
    assert (error.column, error.count) == (f"{node_type}.{raw}", 1) and f"{raw} is missing" in str(error)


def test_duplicate_hadm_id_is_refused_naming_the_id_and_rows(data, limits):
    repeated = int(data["admission"].hadm_id[2])
    data["admission"].hadm_id[9] = repeated
    error = only(data, limits, "graph_node_ids")
    assert error.column == "admission.hadm_id" and error.count == 2
    assert f"hadm_id {repeated} on more than one node at rows 2, 9" in str(error)


def test_non_positive_itemid_is_refused(data, limits):
    data["labitem"].itemid[[0, 4]] = torch.tensor([0, -50862])
    error = only(data, limits, "graph_node_ids")
    assert error.column == "labitem.itemid" and error.count == 2
    assert "itemid not positive at rows 0, 4" in str(error)


def test_float_hadm_id_is_refused(data, limits):
    data["admission"].hadm_id = data["admission"].hadm_id.double()
    error = only(data, limits, "graph_node_ids")
    assert error.count == 1 and "hadm_id is float64 [16], not int64 [16]" in str(error)


def test_hadm_id_one_short_of_the_nodes_is_refused(data, limits):
    data["admission"].hadm_id = data["admission"].hadm_id[:-1].clone()
    error = only(data, limits, "graph_node_ids")
    assert error.count == 1 and "hadm_id is int64 [15], not int64 [16]" in str(error)


def test_a_raw_id_of_1_is_positive(data, limits):
    data["admission"].hadm_id[0] = 1
    assert checks(data, limits) == []


def test_many_repeated_ids_name_the_first_ten(data, limits):
    ids = data["labitem"].itemid
    ids[12:24] = ids[:12].clone()  # twelve values on two nodes each
    error = only(data, limits, "graph_node_ids")
    listed = ", ".join(str(int(v)) for v in ids[:10].sort().values)
    assert error.count == 24 and f"itemid {listed} on more than one node at rows 0, 1, 2" in str(error)


def test_raw_ids_that_are_not_a_tensor_are_refused(data, limits):
    data["labitem"].itemid = data["labitem"].itemid.tolist()
    error = only(data, limits, "graph_node_ids")
    assert error.column == "labitem.itemid" and "itemid is list, not int64 [" in str(error)


# -- graph_timestep_range ------------------------------------------------------------------------------
def test_timestep_below_zero(data, limits):
    data[EDGE].timestep[[2, 30]] = -1
    error = only(data, limits, "graph_timestep_range")
    assert error.column == f"{FORWARD}.timestep" and error.count == 2
    assert f"timesteps outside 0..{limits.max_timestep} at rows 2, 30" in str(error)


def test_timestep_past_the_last(data, limits):
    data[REVERSE].timestep[6] = limits.max_timestep + 1
    error = only(data, limits, "graph_timestep_range")
    assert error.column == f"{BACKWARD}.timestep" and error.count == 1
    assert f"timesteps outside 0..{limits.max_timestep} at rows 6" in str(error)


def test_timestep_at_the_last_is_allowed(data, limits):
    data[EDGE].timestep[6] = limits.max_timestep
    data[REVERSE].timestep[6] = 0
    assert graph_problems(data, limits, where=WHERE) == []


# -- graph_code_range ----------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["past", -1], ids=["one-past-the-last", "negative"])
def test_category_index_outside_the_vocabulary(data, limits, code):
    (cardinality,) = limits.cardinalities("edge_attr_cat")
    data[EDGE].edge_attr_cat[12, 0] = cardinality if code == "past" else code
    error = only(data, limits, "graph_code_range")
    assert error.column == f"{FORWARD}.edge_attr_cat" and error.count == 1
    assert f"indices outside [0, cardinality) (cardinalities [{cardinality}] per column) at rows 12" in str(error)
    assert checks(data, limits) == [("graph_code_range", f"{FORWARD}.edge_attr_cat")]


def test_category_index_at_the_last_of_its_vocabulary_is_allowed(data, limits):
    (cardinality,) = limits.cardinalities("edge_attr_cat")
    data[EDGE].edge_attr_cat[12, 0] = cardinality - 1
    data[REVERSE].edge_attr_cat[12, 0] = cardinality - 1
    assert graph_problems(data, limits, where=WHERE) == []


def test_category_index_on_the_reverse_edge(data, limits):
    data[REVERSE].edge_attr_cat[[0, 1, 2], 0] = limits.cardinalities("edge_attr_cat")[0] + 2
    error = only(data, limits, "graph_code_range")
    assert error.column == f"{BACKWARD}.edge_attr_cat" and error.count == 3
    assert "at rows 0, 1, 2" in str(error)


@pytest.mark.parametrize(("store", "attribute"), [("admission", "x_cat"), (EDGE, "edge_attr_cat")])
def test_category_indices_as_floats_are_refused(data, limits, store, attribute):
    """A category index is int64: a float tensor of codes (1.0, 2.0) is read as a magnitude by a model."""
    data[store][attribute] = data[store][attribute].float()
    error = only(data, limits, "graph_code_range")
    name = store if isinstance(store, str) else "__".join(store)
    assert error.column == f"{name}.{attribute}" and f"{attribute} is float32 [" in str(error)
    assert "expected int64 [" in str(error)


def test_labitem_index_past_its_cardinality(data, limits):
    tops = limits.cardinalities("labitem.x_cat")
    data["labitem"].x_cat[4, 1] = tops[1]
    error = only(data, limits, "graph_code_range")
    assert error.column == "labitem.x_cat" and error.count == 1
    assert f"indices outside [0, cardinality) (cardinalities {list(tops)} per column) at rows 4" in str(error)


def test_each_column_has_its_own_cardinality(data, limits):
    tops = limits.cardinalities("admission.x_cat")
    narrow = min(range(len(tops)), key=lambda column: tops[column])
    assert max(tops) > tops[narrow]
    data["admission"].x_cat[0, narrow] = max(tops) - 1  # legal in the widest column, not in this one
    assert only(data, limits, "graph_code_range").column == "admission.x_cat"


def test_negative_admission_indices(data, limits):
    tops = list(limits.cardinalities("admission.x_cat"))
    data["admission"].x_cat[1, 0] = -1
    data["admission"].x_cat[9, 3] = -2
    error = only(data, limits, "graph_code_range")
    assert error.column == "admission.x_cat" and error.count == 2
    assert f"indices outside [0, cardinality) (cardinalities {tops} per column) at rows 1, 9" in str(error)


def test_no_float_column_holds_a_category_code(data, limits):
    """A float tensor holds the numerical columns the limits name, and no other: category codes put back into x
    or edge_attr as floats (as a float feature) are found by their width."""
    data["admission"].x = data["admission"].x_cat.float()
    data[EDGE].edge_attr = torch.cat([data[EDGE].edge_attr_cat.float(), data[EDGE].edge_attr], dim=1)
    found = {p.column: p for p in graph_problems(data, limits, where=WHERE)}
    columns = len(limits.features["admission.x_cat"])
    assert found["admission.x"].check == "graph_node_rows"
    assert f"x has {columns} columns, expected 0 (numerical columns: none; categorical ones are in x_cat)" in str(
        found["admission.x"])
    assert found[f"{FORWARD}.edge_attr"].check == "graph_edge_rows"
    assert "edge_attr has 5 columns, expected 4 (numerical columns: Z, Z_BOUNDED, Z_CENSORED, Z_UNSEEN; " \
           "categorical ones are in edge_attr_cat)" in str(found[f"{FORWARD}.edge_attr"])


def test_limits_refuse_a_categorical_column_in_a_float_tensor(limits):
    code = limits.features["edge_attr_cat"][0]
    with pytest.raises(ValueError, match="edge_attr holds no categorical column: CODE"):
        GraphLimits(max_timestep=1, features={"edge_attr": (code, *limits.features["edge_attr"])})
    with pytest.raises(ValueError, match="admission.x_cat holds categorical columns only: AGE"):
        GraphLimits(max_timestep=1, features={"admission.x_cat": (Column("AGE", NUMERICAL),)})
    with pytest.raises(ValueError, match="a cardinality is given for categorical columns"):
        Column("CODE", "categorical")


# -- graph_label_range ---------------------------------------------------------------------------------
@pytest.mark.parametrize("label", [2.0, 0.5, -1.0])
def test_label_not_zero_or_one(data, limits, label):
    data["admission"].y[7, 3] = label
    error = only(data, limits, "graph_label_range")
    assert error.column == "admission.y" and error.count == 1
    assert "labels not 0 or 1 at rows 7" in str(error)
    assert checks(data, limits) == [("graph_label_range", "admission.y")]


def test_labels_are_counted_by_row_not_by_cell(data, limits):
    data["admission"].y[7, [1, 3]] = 2.0  # two cells, one admission
    data["admission"].y[9, 3] = -1.0  # the same item, another admission
    data["admission"].y[11, 3] = 2.0  # and a third: three admissions, two items
    error = only(data, limits, "graph_label_range")
    assert error.count == 3 and "labels not 0 or 1 at rows 7, 9, 11" in str(error)


def test_labels_of_higher_rank_are_counted_by_row(data, limits):
    n = data["admission"].num_nodes
    data["admission"].y = torch.zeros(n, 2, 3)
    data["admission"].y[4, 1, 2] = 2.0
    data["admission"].y[6, 0, [0, 1]] = 2.0
    error = only(data, limits, "graph_label_range")
    assert error.count == 2 and "labels not 0 or 1 at rows 4, 6" in str(error)


def test_one_dimensional_labels_are_counted_by_value(data, limits):
    data["admission"].y = torch.zeros(data["admission"].num_nodes)
    data["admission"].y[[2, 5]] = 3.0
    error = only(data, limits, "graph_label_range")
    assert error.count == 2 and "labels not 0 or 1 at rows 2, 5" in str(error)


def test_a_broken_edge_index_does_not_stop_the_checks_of_the_next_edge_type(data, limits):
    data[EDGE].edge_index = data[EDGE].edge_index.float()
    data[REVERSE].timestep[0] = -1
    assert checks(data, limits) == [("graph_edge_index", f"{FORWARD}.edge_index"),
                                    ("graph_timestep_range", f"{BACKWARD}.timestep")]


# -- graph_empty ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("edge_type", "name"), [(EDGE, FORWARD), (REVERSE, BACKWARD)])
def test_edge_type_with_no_edges(data, limits, edge_type, name):
    store = data[edge_type]
    for attr in list(store.keys()):
        store[attr] = store[attr][:, :0] if attr == "edge_index" else store[attr][:0]
    error = only(data, limits, "graph_empty")
    assert error.column == f"{name}.edge_index" and error.count == 1
    assert f"{name}.edge_index graph_empty failed on 1 row. no edges. " in str(error)
    assert checks(data, limits) == [("graph_empty", f"{name}.edge_index")]


def test_a_long_pyg_message_is_cut_at_300_characters(data, limits, monkeypatch):
    def rejects(self, raise_on_error=True):
        raise ValueError("y" * 400)

    monkeypatch.setattr(HeteroData, "validate", rejects)
    (problem,) = graph_problems(data, limits, where=WHERE)
    assert problem.detail == "y" * 300


def test_an_edge_type_into_a_missing_node_type_is_one_bounds_problem(data, limits):
    del data["labitem"]
    found = {p.column: p for p in graph_problems(data, limits, where=WHERE) if p.check == "graph_index_bounds"}
    assert found[f"{FORWARD}.edge_index"].count == 1
    assert "indices into node type(s) labitem that the graph does not have" in str(found[f"{FORWARD}.edge_index"])
    # The next edge type is checked too: the reverse edge points into the missing type as well.
    assert "indices into node type(s) labitem that" in str(found[f"{BACKWARD}.edge_index"])


def test_an_edge_type_between_two_missing_node_types_names_both(data, limits):
    data["patient", "saw", "ward"].edge_index = torch.tensor([[0], [0]])
    found = {p.column: p for p in graph_problems(data, limits, where=WHERE) if p.check == "graph_index_bounds"}
    assert "indices into node type(s) patient, ward that the graph does not have" in str(
        found["patient__saw__ward.edge_index"])


def test_indices_into_a_node_type_of_unknown_size_are_all_out_of_bounds():
    lone = HeteroData()
    lone["admission"].flag = "no tensor: PyG cannot count these nodes"
    lone["labitem"].x = torch.zeros(3, 1)
    lone[EDGE].edge_index = torch.tensor([[0, 0], [1, 2]])
    found = {p.column: p for p in graph_problems(lone, GraphLimits(max_timestep=1, features={}),
                                                 where=WHERE) if p.check == "graph_index_bounds"}
    assert found[f"{FORWARD}.edge_index"].count == 2
    assert "2 source indices outside 0..-1 (admission nodes) at rows 0, 1" in str(found[f"{FORWARD}.edge_index"])


def test_a_scalar_on_an_edge_type_without_edges_is_one_row_off(data, limits):
    store = data[REVERSE]
    for attr in list(store.keys()):
        store[attr] = store[attr][:, :0] if attr == "edge_index" else store[attr][:0]
    store.weight = torch.tensor(1.0)
    found = {p.column: p for p in graph_problems(data, limits, where=WHERE)}
    assert found[f"{BACKWARD}.weight"].check == "graph_edge_rows" and found[f"{BACKWARD}.weight"].count == 1


def test_a_one_dimensional_edge_attr_is_named_without_a_crash(data, limits):
    edges = data[EDGE].edge_index.shape[1]
    data[EDGE].edge_attr = data[EDGE].edge_attr[:, 0].clone()
    error = only(data, limits, "graph_edge_rows")
    assert error.column == f"{FORWARD}.edge_attr" and f"edge_attr is float32 [{edges}], expected float " \
                                                          f"[{edges}, 4]" in str(error)


def test_an_edge_attr_cat_of_another_width_is_a_shape_problem(data, limits):
    data[EDGE].edge_attr_cat = torch.cat([data[EDGE].edge_attr_cat] * 2, dim=1)
    error = only(data, limits, "graph_edge_rows")
    assert error.column == f"{FORWARD}.edge_attr_cat" and "edge_attr_cat has 2 columns, expected 1" in str(error)


# -- graph_pyg -----------------------------------------------------------------------------------------
def test_what_only_pyg_validate_rejects_is_reported(data, limits, monkeypatch):
    # Every case validate() knows is caught by a check above first, so its verdict is stood in for here.
    def rejects(self, raise_on_error=True):  # like PyG's: raises only when asked to, else returns False
        if not raise_on_error:
            return False
        raise ValueError("'edge_index' of edge type ('admission', 'did', 'labitem') is odd\nsecond line")

    monkeypatch.setattr(HeteroData, "validate", rejects)
    problems = graph_problems(data, limits, where=WHERE)
    assert [p.check for p in problems] == ["graph_pyg"]
    assert (problems[0].column, problems[0].table, problems[0].count) == ("graph", WHERE, 1)
    assert "('admission', 'did', 'labitem') is odd" in str(problems[0]) and "second line" not in str(problems[0])


def test_pyg_validate_does_not_run_on_a_graph_with_problems(data, limits, monkeypatch):
    monkeypatch.setattr(HeteroData, "validate", lambda self, raise_on_error=True: pytest.fail("validate ran"))
    data[EDGE].timestep[0] = -1
    assert [p.check for p in graph_problems(data, limits, where=WHERE)] == ["graph_timestep_range"]


def test_an_edge_type_naming_an_absent_node_type_is_reported_without_changing_the_graph(data, limits):
    data["admission", "in", "ward"].edge_index = torch.zeros((2, 1), dtype=torch.int64)
    before = list(data.node_types)
    problems = graph_problems(data, limits, where=WHERE)
    assert list(data.node_types) == before
    assert [(p.check, p.column) for p in problems] == [("graph_index_bounds", "admission__in__ward.edge_index")]


# -- every problem, not only the first -------------------------------------------------------------------
def test_several_problems_in_one_graph_are_all_reported(data, limits):
    data[EDGE].edge_attr[5, 1] = float("nan")
    data[REVERSE].edge_attr[2, 0] = float("inf")
    data[EDGE].edge_index[1, 10] = data["labitem"].num_nodes
    data[REVERSE].edge_index[0, 11] = -1
    data[EDGE].timestep[3] = limits.max_timestep + 1
    data[REVERSE].edge_attr_cat[4, 0] = limits.cardinalities("edge_attr_cat")[0]
    data["labitem"].x_cat[0, 0] = limits.cardinalities("labitem.x_cat")[0]
    data["admission"].y[1, 1] = 2.0
    data[EDGE].is_history = data[EDGE].is_history[:-1]
    found = checks(data, limits)
    assert {
        ("graph_finite", f"{FORWARD}.edge_attr"),
        ("graph_finite", f"{BACKWARD}.edge_attr"),
        ("graph_index_bounds", f"{FORWARD}.edge_index"),
        ("graph_index_bounds", f"{BACKWARD}.edge_index"),
        ("graph_timestep_range", f"{FORWARD}.timestep"),
        ("graph_code_range", f"{BACKWARD}.edge_attr_cat"),
        ("graph_code_range", "labitem.x_cat"),
        ("graph_label_range", "admission.y"),
        ("graph_edge_rows", f"{FORWARD}.is_history"),
    } <= set(found)
    assert "graph_pyg" not in {check for check, _ in found}  # validate() runs only on an otherwise sound graph


# -- determinism ---------------------------------------------------------------------------------------
def test_problems_are_the_same_on_every_call(data, limits):
    data[EDGE].edge_attr[5, 1] = float("nan")
    data[REVERSE].timestep[3] = -1
    data["admission"].y[1, 1] = 0.5
    first = [str(p) for p in graph_problems(data, limits, where=WHERE)]
    again = [str(p) for p in graph_problems(copy.deepcopy(data), limits, where=WHERE)]
    assert first == again and len(first) == 3


# -- the guard of any graph, which badpoints' guard is -------------------------------------------------------
def test_badpoints_guard_is_the_guard_of_any_graph_under_its_rules(data, limits):
    data[EDGE].timestep[3] = -1
    data["labitem"].node_id[0] = 5
    data["admission"].y[2, 0] = 3.0
    ours = [str(p) for p in graph_problems(data, limits, where=WHERE)]
    assert ours == [str(p) for p in pyg_problems(data, badpoints_rules(limits), where=WHERE, side="output")]
    assert len(ours) == 3


def test_a_badpoints_graph_under_any_graphs_rules_has_only_its_dictionary_nodes_in_no_edge(built):
    """Every graph holds the whole lab-item dictionary, so the items no admission of the batch measured are in no
    edge: a note, which badpoints' own rules leave out. Nothing else is found without its rules."""
    data, limits = built
    problems = pyg_problems(data, ANY_GRAPH, where=WHERE)
    assert [(p.check, p.column, p.side) for p in problems] == [("graph_isolated_nodes", "labitem", "input")]
    assert graph_problems(data, limits, where=WHERE) == []


def test_any_graph_may_have_an_edge_type_without_edges(data):
    for attr in list(data[REVERSE].keys()):
        data[REVERSE][attr] = data[REVERSE][attr][:, :0] if attr == "edge_index" else data[REVERSE][attr][:0]
    assert [p.check for p in pyg_problems(data, GraphRules(isolated=False))] == []
    assert [p.check for p in pyg_problems(data, GraphRules(isolated=False, require_edges=True))] == ["graph_empty"]


def test_the_rules_own_checks_run_per_store_after_its_rows(data):
    seen = []
    rules = GraphRules(node=lambda store, name, count, problem: seen.append(("node", name, count)),
                       edge=lambda store, name, edges, problem: seen.append(("edge", name, edges)))
    pyg_problems(data, rules)
    edges = data[EDGE].edge_index.shape[1]
    assert seen == [("node", "admission", 16), ("node", "labitem", data["labitem"].num_nodes),
                    ("edge", FORWARD, edges), ("edge", BACKWARD, edges)]


def test_a_data_is_one_store_named_data():
    data = Data(x=torch.zeros(3, 2), edge_index=torch.tensor([[0, 1], [1, 3]]), edge_weight=torch.ones(3))
    data.x[1, 1] = float("inf")
    found = {(p.check, p.column): p for p in pyg_problems(data, GraphRules(num_classes=2))}
    assert set(found) == {("graph_finite", "data.x"), ("graph_index_bounds", "data.edge_index"),
                          ("graph_edge_rows", "data.edge_weight")}
    assert "1 target indices outside 0..2 (the graph's nodes) at rows 1" in str(found["graph_index_bounds",
                                                                                  "data.edge_index"])


def test_a_data_without_edges_has_no_edge_problem():
    cloud = Data(pos=torch.zeros(4, 3), y=torch.tensor([1]))
    assert pyg_problems(cloud, GraphRules(num_classes=2, isolated=False)) == []


def test_labels_of_a_whole_graph_and_of_edges_are_checked_where_they_are(data):
    data.y = torch.tensor([5])  # the graph's class, in the global store
    data[EDGE].edge_label = torch.zeros(data[EDGE].edge_index.shape[1])
    data[EDGE].edge_label[4] = 7.0
    rules = GraphRules(num_classes=5, isolated=False)
    # the admissions' multi-hot y (0 or 1) is inside [0, 5); the graph's class 5 is not
    assert [(p.check, p.column) for p in pyg_problems(data, rules)] == [("graph_label_range", "global.y")]
    named = pyg_problems(data, GraphRules(num_classes=5, label="edge_label", isolated=False))
    assert [(p.column, p.count) for p in named] == [(f"{FORWARD}.edge_label", 1)]


def test_a_batch_pointer_is_no_per_node_tensor(data):
    data["admission"].ptr = torch.tensor([0, 16])
    data["admission"].batch = torch.zeros(16, dtype=torch.int64)
    assert pyg_problems(data, GraphRules(isolated=False)) == []


def test_bytes_count_every_store_and_sizes_read_as_people_read_them(data):
    expected = sum(v.numel() * v.element_size() for store in data.stores for v in store.values()
                   if isinstance(v, torch.Tensor))
    assert tensor_bytes(data) == expected > 0
    (problem,) = pyg_problems(data, GraphRules(isolated=False, max_bytes=expected - 1))
    assert (problem.check, problem.column, problem.count, problem.whole_file) == ("graph_bytes", "graph", 1, True)
    assert pyg_problems(data, GraphRules(isolated=False, max_bytes=expected)) == []
    assert [size_text(n) for n in (0, 1023, 1024, 5 * 2**20 + 2**19, 3 * 2**40)] == [
        "0 B", "1023 B", "1.0 KiB", "5.5 MiB", "3.0 TiB"]
