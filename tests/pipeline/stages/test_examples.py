"""pipeline/stages/examples/: every stage keeps an example beside it (a handful of input rows and the exact output
it gives on them), the stage gives that output, and docs/stages.md shows each example as the file holds it.

A stage runs on its example as ``flow.prepare`` runs it: its fit from its declared inputs, its plan, then its plan's
calls on the rows (the pandas engine's chain), so the functions and the wiring of its declaration are both held to
the example. The graph stage has no plan: its example holds the graphs ``build_graphs`` makes of the edge rows; nor
has the MEDS export: its example holds the events and the codes.parquet rows ``write_meds`` makes of them.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipeline.config import SECTIONS, Config, documented_defaults
from pipeline.engines.pandas import PANDAS
from pipeline.kernel.calls import Link
from pipeline.kernel.quarantine import combine
from pipeline.kernel.stage import Context, Stage
from pipeline.ledgers import Ledger
from pipeline.reading.parse import RawTables
from pipeline.reporting.findings import item_names
from pipeline.stages import STAGES, graph, meds_export
from pipeline.stages import examples
from pipeline.stages.scale.fit import ZScoreStats
from schemas.raw import ADMISSIONS, LABEVENTS, LABITEMS

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "stages.md"
BY_NAME = {stage.name: stage for stage in STAGES}
PLANNED = [stage for stage in STAGES if stage.plan is not None]


def config_of(values: Mapping[str, Any]) -> Config:
    """The config a file holding ``values`` loads to: the documented defaults, with ``values`` merged in."""
    def merged(base: dict, user: Mapping[str, Any]) -> dict:
        return {**base, **{key: merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict)
                           else value for key, value in user.items()}}

    unknown = sorted(set(values) - set(SECTIONS))
    assert not unknown, f"the example's [config] names unknown section(s) {unknown}"
    whole = merged(tomllib.loads(documented_defaults()), values)
    return Config(**{name: section.load(whole[name], name) for name, section in SECTIONS.items()},
                  severity=MappingProxyType({}))


@dataclass(frozen=True)
class Ran:
    """What a stage made of its example: the rows it hands on, its quarantine (in the run's order), the tables it
    hands on by name, and the state its fit learned (as ``stats.json`` keeps it; None: it fits nothing)."""

    rows: pd.DataFrame
    quarantine: pd.DataFrame
    tables: Mapping[str, pd.DataFrame]
    state: Any


def context_of(stage: Stage, example: examples.Example) -> Context:
    """What the stage reads besides its rows: the example's small tables, as read (for the stages that read the
    raw tables) and as the stages before it left them, and its config."""
    config = config_of(example.config)
    given = {name: table.frame for name, table in example.input.items()}
    return Context(read=RawTables(admissions=given.get(ADMISSIONS), labitems=given.get(LABITEMS),
                                  labevents=given[LABEVENTS]),
                   engine=PANDAS, max_lines=config.report.max_lines, options=stage.options_in(config),
                   settings=config, tables={name: given[name] for name in (ADMISSIONS, LABITEMS) if name in given},
                   ledger=Ledger(warn_removed_fraction=config.filters.warn_removed_fraction,
                                 error_removed_fraction=config.filters.error_removed_fraction))


def run(stage: Stage, example: examples.Example) -> Ran:
    """The stage on its example, as ``flow.prepare`` runs it: its fit, its plan, its calls on the rows."""
    events, context = example.input[LABEVENTS].frame, context_of(stage, example)
    state = None
    if stage.fit is not None:
        rows, args, kwargs = stage.fit.inputs(events, context)
        state = PANDAS.fit(stage.fit, rows, *args, **kwargs)
        context = replace(context, fitted={stage.name: state})
    plan = stage.plan(context)
    chained = PANDAS.chain(events, [Link(calls=plan.calls, counts=plan.counts, picks=plan.picks,
                                         tallies=plan.tallies)])
    linked, = chained.links
    if linked.error is not None:
        raise linked.error
    kept = [k for k in (*plan.taken, *linked.kept) if k is not None]
    return Ran(rows=chained.events, quarantine=combine([k.quarantine for k in kept]),
               tables=dict(plan.context.tables), state=None if state is None else state.as_json())


def assert_gives(stage: Stage, example: examples.Example, ran: Ran) -> None:
    """The stage made exactly the example's output: rows, quarantine, tables handed on and state."""
    expected = example.output
    pd.testing.assert_frame_equal(ran.rows, expected[LABEVENTS].frame, check_exact=True, obj="LABEVENTS handed on")
    quarantine = expected.get(examples.QUARANTINE)
    quarantined = quarantine.frame if quarantine is not None else combine([])
    pd.testing.assert_frame_equal(ran.quarantine, quarantined, check_exact=True, obj="quarantine")
    for name in (ADMISSIONS, LABITEMS):
        if name in expected:
            pd.testing.assert_frame_equal(ran.tables[name], expected[name].frame, check_exact=True, obj=name)
    assert ran.state == example.state, "the state its fit learned"
    assert example.saved_as == (stage.fit.saved_as if stage.fit is not None else None), "where stats.json keeps it"


@pytest.mark.parametrize("stage", PLANNED, ids=lambda stage: stage.name)
def test_the_stage_gives_its_example_output(stage: Stage):
    example = examples.load(stage.name)
    assert_gives(stage, example, run(stage, example))


def graphs_of(example: examples.Example) -> dict[str, dict[str, dict[str, Any]]]:
    """The graphs the graph stage builds of its example's edge rows, each as its stores' attributes (an empty store,
    the global one, left out)."""
    options = config_of(example.config).graph
    edges = example.input[LABEVENTS].frame
    admissions, labitems = example.input[ADMISSIONS].frame, example.input[LABITEMS].frame
    built = graph.build_graphs(edges, admissions, labitems, batch_size=options.batch_size, labels=options.labels,
                               admission_features=options.admission_features)
    return {f"{g.split}/{g.batch}": {"__".join(key) if isinstance(key, tuple) else key: dict(store)
                                     for key, store in g.data.to_dict().items() if store} for g in built}


def assert_graphs(example: examples.Example, built: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
    """Every graph, store and attribute of the example, and no other; each tensor of the dtype and values written."""
    import torch

    assert sorted(built) == sorted(example.graphs), "the graphs built"
    for where, stores in example.graphs.items():
        assert sorted(built[where]) == sorted(stores), f"{where}: its stores"
        for store, attributes in stores.items():
            made = built[where][store]
            assert sorted(made) == sorted(attributes), f"{where} {store}: its attributes"
            for name, written in attributes.items():
                expected, got = examples.tensor(written), made[name]
                if not isinstance(got, torch.Tensor):
                    assert got == written, f"{where} {store}.{name}"
                    continue
                assert got.dtype == expected.dtype and torch.equal(got, expected), (
                    f"{where} {store}.{name}: {got.dtype} {got.tolist()}, expected {expected.dtype} {written}")


def test_the_graph_stage_builds_its_example_graphs():
    example = examples.load(graph.NAME)
    edges, admissions = example.input[LABEVENTS].frame, example.input[ADMISSIONS].frame
    options = config_of(example.config).graph
    assert graph.feature_columns(edges, admissions, admission_features=options.admission_features) == \
        example.features
    assert_graphs(example, graphs_of(example))


def meds_of(example: examples.Example) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What ``write_meds`` makes of the example's edge rows, without the files: every shard's events (its path
    first, the shards in the order written) and ``metadata/codes.parquet``'s rows (parent_codes, checked null, left
    out; its int64 columns read as Int64, as badpoints/itemid holds nulls). An admission is in the graphs when it
    has an edge row, as the admission ledger says."""
    given = {name: table.frame for name, table in example.input.items()}
    edges, admissions, labitems = given[LABEVENTS], given[ADMISSIONS], given[LABITEMS]
    stats = ZScoreStats.from_json(example.state)
    known = set(labitems["ITEMID"].astype("int64")) | set(stats.items_)
    items = meds_export.item_table(stats, meds_export.lab_codes(known, given["units"].set_index("ITEMID")["VALUEUOM"]))
    fates = pd.DataFrame({"HADM_ID": admissions["HADM_ID"],
                          "FATE": np.where(admissions["HADM_ID"].isin(edges["HADM_ID"]), "in_graphs", "dropped")})
    people = meds_export.subjects(fates, given["splits"], len(edges))
    labs = meds_export.lab_events(edges, items, people, stats)
    admitted = meds_export.admission_events(admissions, people)
    shards = []
    for (split, shard), events in pd.concat([labs, admitted], ignore_index=True).groupby(["split", "shard"]):
        where = f"data/{split}/{shard}.parquet"
        written = meds_export.sorted_shard([meds_export.meds_table(events)], where=where).to_pandas()
        shards.append(written.assign(file=where)[["file", *written.columns]])
    counted = labs.groupby("code", sort=True)[["bounded", "withheld"]].sum()
    codes = meds_export.codes_table(stats, items, item_names(labitems), admitted["code"], counted)
    codes = codes.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    assert codes.pop("parent_codes").isna().all(), "parent_codes: null in every row"
    return pd.concat(shards, ignore_index=True), codes


def assert_meds(example: examples.Example, events: pd.DataFrame, codes: pd.DataFrame) -> None:
    """The export wrote exactly the example's events and codes.parquet rows."""
    pd.testing.assert_frame_equal(events, example.output["events"].frame, check_exact=True, obj="MEDS events")
    pd.testing.assert_frame_equal(codes, example.output["codes"].frame, check_exact=True, obj="codes.parquet")


def test_the_meds_export_writes_its_example_events_and_codes():
    example = examples.load(meds_export.NAME)
    assert example.saved_as == BY_NAME["scale"].fit.saved_as, "the state it reads is the scale stage's"
    assert_meds(example, *meds_of(example))


@pytest.mark.parametrize("wrong", ["a value", "a row", "a dtype", "a code's mean", "a count"])
def test_a_meds_example_with_a_wrong_expected_output_fails(wrong: str):
    """One wrong numeric_value, a missing event, another dtype, a code's values/mean or a withheld count fails."""
    example = examples.load(meds_export.NAME)
    events, codes = meds_of(example)
    assert_meds(example, events, codes)
    output = dict(example.output)
    written, table = output["events"], output["codes"]
    if wrong == "a value":
        bounded = written.frame["numeric_value"] == np.float32(185.0)
        changed = written.frame.copy()
        changed.loc[bounded, "numeric_value"] = np.float32(210.0)
        output["events"] = replace(written, frame=changed)
    elif wrong == "a row":
        output["events"] = replace(written, frame=written.frame.iloc[1:].reset_index(drop=True))
    elif wrong == "a dtype":
        output["events"] = replace(written, frame=written.frame.astype({"numeric_value": "float64"}))
    elif wrong == "a code's mean":
        output["codes"] = replace(table, frame=_changed(table.frame, "values/mean", np.float32(0.000001)))
    else:
        output["codes"] = replace(table, frame=table.frame.assign(**{"badpoints/withheld": 0}).astype(
            {"badpoints/withheld": "Int64"}))
    with pytest.raises(AssertionError):
        assert_meds(replace(example, output=output), events, codes)


def test_every_stage_has_an_example_and_every_example_a_stage():
    assert examples.names() == tuple(sorted(BY_NAME))


@pytest.mark.parametrize("stage", STAGES, ids=lambda stage: stage.name)
def test_an_example_takes_what_its_stage_takes_and_gives_what_it_gives(stage: Stage):
    """Its lab rows are described by the schemas the stage declares, and every table satisfies its schema."""
    example = examples.load(stage.name)
    assert example.input[LABEVENTS].schema is stage.takes
    if stage.gives is not None:
        assert example.output[LABEVENTS].schema is stage.gives
    for side, tables in (("input", example.input), ("output", example.output)):
        for name, table in tables.items():
            if table.schema is not None:
                table.schema.validate(table.frame)
            elif name == examples.QUARANTINE:
                assert list(table.frame.columns) == list(combine([]).columns), f"{side} {name}"


def _changed(frame: pd.DataFrame, column: str, value: Any) -> pd.DataFrame:
    """``frame`` with the first row's ``column`` set to ``value``."""
    changed = frame.copy()
    changed.iloc[0, changed.columns.get_loc(column)] = value
    return changed


@pytest.mark.parametrize("wrong", ["a value", "a row", "a dtype", "the quarantine", "a table", "the state"])
def test_an_example_with_a_wrong_expected_output_fails(wrong: str):
    """The comparison is exact: one wrong value, a missing row, another dtype, a reason, a code or a fitted number
    makes the stage's test fail."""
    stage = BY_NAME["clean"] if wrong in ("the quarantine", "a table") else BY_NAME["scale"]
    example = examples.load(stage.name)
    ran = run(stage, example)
    assert_gives(stage, example, ran)
    output = dict(example.output)
    rows, quarantine = output[LABEVENTS], output.get(examples.QUARANTINE)
    if wrong == "a value":
        output[LABEVENTS] = replace(rows, frame=_changed(rows.frame, "Z", -0.999999))
    elif wrong == "a row":
        output[LABEVENTS] = replace(rows, frame=rows.frame.iloc[1:])
    elif wrong == "a dtype":
        output[LABEVENTS] = replace(rows, frame=rows.frame.astype({"Z_BOUNDED": "int64"}))
    elif wrong == "the quarantine":
        output[examples.QUARANTINE] = replace(quarantine, frame=_changed(quarantine.frame, "REASON", "no result"))
    elif wrong == "a table":
        admissions = output[ADMISSIONS]
        output[ADMISSIONS] = replace(admissions, frame=admissions.frame.iloc[:1])
    wrong_state = {**example.state, "mean": [110.000001, 4.0, 0.0]} if wrong == "the state" else example.state
    with pytest.raises(AssertionError):
        assert_gives(stage, replace(example, output=output, state=wrong_state), ran)


@pytest.mark.parametrize("wrong", ["a value", "a dtype", "an attribute"])
def test_a_graph_example_with_a_wrong_tensor_fails(wrong: str):
    example = examples.load(graph.NAME)
    built = graphs_of(example)
    assert_graphs(example, built)
    stores = {where: {store: dict(attributes) for store, attributes in graph_stores.items()}
              for where, graph_stores in example.graphs.items()}
    edges = stores["train/0"]["admission__did__labitem"]
    if wrong == "a value":
        edges["timestep"] = [0, 0, 1, 1, 1]
    elif wrong == "a dtype":
        edges["timestep"] = [float(step) for step in edges["timestep"]]
    else:
        del edges["is_history"]
    with pytest.raises(AssertionError):
        assert_graphs(replace(example, graphs=stores), built)


# docs/stages.md shows each example under its link, in a toml block: exactly the file's text.
SHOWN = re.compile(r"^\[`pipeline/stages/examples/(\w+)\.toml`\]\(\.\./pipeline/stages/examples/\1\.toml\):\n\n"
                   r"```toml\n(.*?)^```$", flags=re.M | re.S)


def test_the_docs_show_every_example_as_its_file_holds_it():
    shown = SHOWN.findall(DOCS.read_text(encoding="utf-8"))
    assert [name for name, _ in shown] == [stage.name for stage in STAGES], "one example per stage, in flow order"
    for name, block in shown:
        assert block == examples.text(name), f"docs/stages.md shows {name}'s example otherwise than its file"
