"""Invariants of a build, as properties over datasets derived from data/sample.

Each example takes the sample's three tables as text (``tests.corpus.Dataset``) and changes them as a real
export might differ: a subset of the admissions (with their labs), items whose labs are dropped, duplicated
lab rows, items rescaled, shifted to a large offset or made constant (extreme but finite, within
``valuenum_abs_bound``), every table's rows shuffled; and a config file with another batch size, bucket
interval, late-row policy and fill policy. The dataset is written to CSV and run through the real
``pipeline.flow.build`` (which runs ``validate`` and ``prepare``, ``pipeline.stages.graph.build_graphs`` and
``pipeline.output.write``); what it wrote is read back through ``load_graphs`` (weights_only, hash-checked).

Properties (the fixed examples of tests/pipeline/stages/test_graph.py, test_write.py and test_flow.py, for any
such dataset):

* the ledger closes: LABEVENTS rows in the file = kept + quarantined + deduplicated, in ``Prepared.ledger``
  and in the manifest, and kept = the did-edges of all graphs;
* every file written has a name made from the split and batch number or a fixed name, never from data;
* every float tensor of every written graph is finite, and every number in ``stats.json`` too;
* every ``edge_index`` is int64 of shape [2, E], E > 0, inside its node types' counts;
* every per-edge tensor has exactly E rows, every node tensor one row per node;
* the graph files are exactly what ``build_graphs`` makes again from the same rows (bytes), and a rebuild
  from the same files, and from the files with every table's rows shuffled, writes byte-identical graphs,
  ``stats.json`` and ``index.parquet``.

The ci profile (tests/conftest.py) is derandomized; a build takes ~0.6 s, so the budgets below keep the
module well under two minutes on two cores.
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pipeline.config import load_config
from pipeline.builds import build
from pipeline.stages.graph import build_graphs
from pipeline.output.write import MANIFEST, graph_bytes, load_graphs
from schemas.graph import EDGE
from schemas.split import SPLITS
from tests.corpus import Dataset

# Every name a build may write: from the split and batch number, never from data.
OUTPUT_NAME = re.compile(r"graphs/(train|val|test)/batch_\d{5}\.pt|(stats|report|manifest)\.json|report\.html"
                         r"|(index|quarantine)\.parquet|\.badpoints")
COMPARED = ("stats.json", "index.parquet")  # besides the graphs: byte-identical across reruns and row order


def budget(examples: int) -> settings:
    """``examples`` builds on top of the loaded (ci) profile; a build takes ~0.6 s, not a deadline."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- datasets -----------------------------------------------------------------------------------------------
SAMPLE = Dataset.sample()


def _column(table: str, column: str) -> list[str]:
    i = SAMPLE.col(table, column)
    return [record[i] for record in SAMPLE.rows[table]]


ADMISSIONS = sorted(_column("ADMISSIONS", "HADM_ID"), key=int)
ITEMS = sorted(set(_column("LABEVENTS", "ITEMID")), key=int)
NUMERIC_ITEMS = sorted({item for item, number in zip(_column("LABEVENTS", "ITEMID"), _column("LABEVENTS", "VALUENUM"))
                        if number != ""}, key=int)
BOUND = load_config().raw.valuenum_abs_bound


@dataclass(frozen=True)
class Variant:
    data: Dataset
    config: str  # TOML, the keys it changes
    changes: tuple[str, ...]  # what was done, for the failure message

    @property
    def lab_rows(self) -> int:
        return len(self.data.rows["LABEVENTS"])


def _reshape(value: str, how: str, constant: float, largest: float) -> str:
    """One VALUENUM changed: the item made constant, shifted by 1e8, negated or rescaled (at most to 1e8)."""
    number = float(value)
    if how == "constant":
        number = constant
    elif how == "offset":  # a tiny relative spread at a large magnitude
        number = number + 1e8
    elif how == "negate":
        number = -number
    else:  # "x<factor>": rescaled, the item's largest |value| kept below 1e8
        number = number * min(float(how[1:]), 1e8 / max(largest, 1.0))
    if not (math.isfinite(number) and abs(number) < BOUND):
        raise ValueError(f"{how} made {number!r}")  # a strategy bug, not a finding
    return repr(number)


@st.composite
def variants(draw) -> Variant:
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))  # row-level choices: a seeded stream, not drawn one by one
    data = Dataset.sample()
    lab = data.rows["LABEVENTS"]
    hadm, item, valuenum, value = (data.col("LABEVENTS", c) for c in ("HADM_ID", "ITEMID", "VALUENUM", "VALUE"))
    changes = []

    kept = draw(st.integers(40, len(ADMISSIONS)))
    if kept < len(ADMISSIONS):
        admitted = set(rng.sample(ADMISSIONS, kept))
        i = data.col("ADMISSIONS", "HADM_ID")
        data.rows["ADMISSIONS"] = [r for r in data.rows["ADMISSIONS"] if r[i] in admitted]
        lab[:] = [r for r in lab if r[hadm] == "" or r[hadm] in admitted]  # outpatient rows stay
        changes.append(f"{kept} admissions")

    dropped = set(rng.sample(ITEMS, draw(st.integers(0, 6))))
    if dropped:
        lab[:] = [r for r in lab if r[item] not in dropped]
        changes.append(f"labs of items {sorted(dropped)} dropped")

    for how in draw(st.lists(st.sampled_from(["constant", "offset", "negate", "x1e-06", "x0.001", "x1000.0",
                                              "x1000000.0"]), max_size=4)):
        target = rng.choice(NUMERIC_ITEMS)
        constant = draw(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
        rows = [r for r in lab if r[item] == target and r[valuenum] != ""]
        largest = max((abs(float(r[valuenum])) for r in rows), default=1.0)
        for r in rows:
            r[valuenum] = r[value] = _reshape(r[valuenum], how, constant, largest)
        changes.append(f"item {target} {how}" + (f" {constant!r}" if how == "constant" else ""))

    copies = draw(st.integers(0, 300))
    if copies:
        for r in [list(r) for r in rng.sample(lab, min(copies, len(lab)))]:
            lab.insert(rng.randrange(len(lab) + 1), r)
        changes.append(f"{copies} lab rows duplicated")

    if draw(st.booleans()):
        for rows in data.rows.values():
            rng.shuffle(rows)
        changes.append("rows shuffled")

    fill = draw(st.sampled_from(["constant", "mean", "median", "drop"]))  # ffill of Z leaves nulls: an error
    config = "\n".join([
        f"[graph]\nbatch_size = {draw(st.one_of(st.sampled_from([1, 2, 16, 128]), st.integers(1, 130)))}",
        f"[bucket]\ninterval_hours = {draw(st.sampled_from([6, 24, 48]))}",
        f"late_policy = \"{draw(st.sampled_from(['quarantine', 'clip']))}\"",
        f"[fill.Z]\npolicy = \"{fill}\"" + ("\nvalue = 0.0" if fill == "constant" else ""),
        f"indicator = {str(draw(st.booleans())).lower()}",
    ]) + "\n"
    return Variant(data=data, config=config, changes=tuple(changes))


def _write(variant: Variant, root: Path):
    variant.data.write(root / "data")
    (root / "badpoints.toml").write_text(variant.config)
    return root / "data", load_config(root / "badpoints.toml")


def _shuffled(data: Dataset, seed: int) -> Dataset:
    """The same rows, every table in another order (``Dataset.write`` keeps each table's file name)."""
    copy = Dataset(header={k: list(v) for k, v in data.header.items()},
                   rows={k: [list(r) for r in v] for k, v in data.rows.items()}, names=dict(data.names))
    rng = np.random.default_rng(seed)
    for table, rows in copy.rows.items():
        copy.rows[table] = [rows[i] for i in rng.permutation(len(rows))]
    return copy


def _outputs(out: Path) -> dict[str, bytes]:
    manifest = json.loads((out / MANIFEST).read_text())
    return {name: (out / name).read_bytes() for name in manifest["outputs"]
            if name.startswith("graphs/") or name in COMPARED}


def _no_constant(token: str):
    raise ValueError(f"stats.json holds {token}")


def _finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return True


# -- the invariants -----------------------------------------------------------------------------------------
@budget(16)
@given(variant=variants())
def test_every_build_closes_its_ledger_and_writes_sound_graphs(tmp_path_factory, variant):
    root = tmp_path_factory.mktemp("variant")
    folder, config = _write(variant, root)
    result = build(folder, root / "out", config)
    prepared = result.validation.prepared
    ledger = prepared.ledger()
    assert ledger["read"] == variant.lab_rows, variant.changes

    if result.exit_code:  # errors: reported, nothing written
        event(f"exit {result.exit_code}: stopped at {prepared.stopped_at}")
        assert any(f.severity == "error" for f in result.report.findings), variant.changes
        assert result.out_dir is None and not any((root / "out").rglob("*"))
        return
    event("built")
    assert prepared.stopped_at is None
    assert ledger["read"] == ledger["kept"] + ledger["quarantined"] + ledger["deduplicated"], (ledger, variant.changes)
    out = result.out_dir
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["accounting"]["LABEVENTS"] == ledger
    names = [p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    assert [n for n in names if not OUTPUT_NAME.fullmatch(n)] == []

    stats = json.loads((out / "stats.json").read_text(), parse_constant=_no_constant)
    assert _finite_numbers(stats)

    graphs = {split: load_graphs(out, split) for split in SPLITS}
    edges = 0
    for split, loaded in graphs.items():
        for n, data in enumerate(loaded):
            where = (split, n, variant.changes)
            for store in data.stores:
                for name, tensor in store.items():
                    if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                        assert torch.isfinite(tensor).all(), (name, where)
            for node_type in data.node_types:
                count = data[node_type].num_nodes
                assert count > 0, (node_type, where)
                for name, tensor in data[node_type].items():
                    if isinstance(tensor, torch.Tensor):
                        assert tensor.dim() >= 1 and tensor.shape[0] == count, (node_type, name, where)
            for edge_type in data.edge_types:
                store = data[edge_type]
                index = store.edge_index
                assert index.dtype == torch.int64 and index.dim() == 2 and index.shape[0] == 2, (edge_type, where)
                count = index.shape[1]
                assert count > 0, (edge_type, where)
                source, _, target = edge_type
                assert int(index.min()) >= 0, (edge_type, where)
                assert int(index[0].max()) < data[source].num_nodes, (edge_type, where)
                assert int(index[1].max()) < data[target].num_nodes, (edge_type, where)
                for name, tensor in store.items():
                    if isinstance(tensor, torch.Tensor) and name != "edge_index":
                        assert tensor.dim() >= 1 and tensor.shape[0] == count, (edge_type, name, where)
            edges += data[EDGE].edge_index.shape[1]
    assert edges == ledger["kept"] == len(prepared.edges), variant.changes
    assert sum(len(g) for g in graphs.values()) == len(manifest["graphs"])

    # The files are exactly what build_graphs makes from the same rows, again.
    again = build_graphs(prepared.edges, prepared.admissions, prepared.labitems,
                         batch_size=config.graph.batch_size, labels=config.graph.labels)
    written = _outputs(out)
    assert {f"graphs/{g.split}/batch_{g.batch:05d}.pt" for g in again} == {n for n in written if n.startswith("graphs/")}
    for g in again:
        assert graph_bytes(g.data) == written[f"graphs/{g.split}/batch_{g.batch:05d}.pt"], (g.where, variant.changes)


@budget(5)
@given(variant=variants(), seed=st.integers(0, 2**16))
def test_rebuilds_and_shuffled_rows_write_byte_identical_graphs_and_stats(tmp_path_factory, variant, seed):
    root = tmp_path_factory.mktemp("rerun")
    folder, config = _write(variant, root)
    first = build(folder, root / "first", config)
    if first.exit_code:
        event("errors: nothing to compare")
        return
    event("built")
    second = build(folder, root / "elsewhere" / "second", config)
    assert second.exit_code == 0
    _shuffled(variant.data, seed).write(root / "shuffled")
    third = build(root / "shuffled", root / "third", config)
    assert third.exit_code == 0
    reference = _outputs(first.out_dir)
    assert reference.keys() > set(COMPARED)
    for label, result in (("rerun", second), ("shuffled rows", third)):
        outputs = _outputs(result.out_dir)
        differ = sorted(name for name in reference.keys() | outputs.keys() if reference.get(name) != outputs.get(name))
        assert differ == [], (label, variant.changes)
    assert (first.out_dir / "quarantine.parquet").read_bytes() == (second.out_dir / "quarantine.parquet").read_bytes()

