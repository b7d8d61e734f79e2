"""pipeline/output/inspect.py and ``badpoints inspect``: a build is re-checked against its manifest and summarised."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.builds import build
from pipeline.flow import ORDER
from pipeline.output import inspect
from pipeline.output.write import MANIFEST, load_graphs
from schemas.graph import EDGE, FEATURES
from tests.pipeline.output.test_write import _rehash

ROOT = Path(__file__).resolve().parents[3]
SPLITS = ("train", "val", "test")
FILES_OK = "files: ok (every hash matches the manifest; every graph loads and passes its checks)"
runner = CliRunner()


def inspect_build(out_dir, stages=ORDER.stages):
    """What ``badpoints inspect`` reads of a build: with the declared stages' per-item state, as the CLI asks."""
    return inspect.inspect_build(out_dir, stages=stages)


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
    assert FILES_OK in result.output.splitlines() and "ERROR" not in result.output
    assert f"{len(manifest['graphs'])} graphs, {len(manifest['outputs'])} files" in result.output
    for split in SPLITS:
        expected = manifest["splits"][split]
        line = next(line for line in result.output.splitlines() if line.startswith(f"{split} "))
        found = re.search(r"(\d+) graphs\s+(\d+) admissions\s+(\d+) edges z in \[(\S+), (\S+)\]", line)
        assert found, line
        assert [int(n) for n in found.groups()[:3]] == [expected["graphs"], expected["admissions"], expected["edges"]]
        z = torch.cat([g[EDGE].edge_attr[:, 0] for g in load_graphs(built, split)])  # Z, edge_attr's first
        assert float(found.group(4)) == pytest.approx(float(z.min()), rel=1e-2)
        assert float(found.group(5)) == pytest.approx(float(z.max()), rel=1e-2)
    ledger = manifest["accounting"]["LABEVENTS"]
    assert (f"LABEVENTS read {ledger['read']} = kept {ledger['kept']} + quarantined {ledger['quarantined']} + "
            f"deduplicated {ledger['deduplicated']}") in result.output


def _counts(out: Path) -> tuple[str, int, int, int]:
    """The status and the errors, warnings and notes of the build's report.json, counted here."""
    report = json.loads((out / "report.json").read_text())
    severities = [finding["severity"] for finding in report["findings"]]
    errors, warnings = severities.count("error"), severities.count("warning")
    return report["status"], errors, warnings, len(severities) - errors - warnings


def test_a_build_with_warnings_shows_its_files_ok_and_its_data_warnings_with_the_counts(built):
    """A build whose data had warnings said 'status: ok': inspect says both, and only broken files fail it."""
    status, errors, warnings, notes = _counts(built)
    assert (status, errors) == ("warnings", 0) and warnings > 0 and notes > 0  # the sample warns
    result = _inspect(built)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        FILES_OK, f"data: warnings (0 errors, {warnings} warning{'s' if warnings != 1 else ''}, {notes} notes; see report.json)"]
    assert "status: ok" not in result.output
    data = inspect_build(built).data
    assert (data.status, data.errors, data.warnings, data.notes) == (status, errors, warnings, notes)


def test_a_tampered_graph_shows_the_files_broken_and_still_the_datas_status(out):
    status, _, warnings, notes = _counts(out)
    data = bytearray((out / "graphs/train/batch_00000.pt").read_bytes())
    data[len(data) // 2] ^= 0x01
    (out / "graphs/train/batch_00000.pt").write_bytes(bytes(data))
    result = _inspect(out)
    assert result.exit_code == 1
    assert result.output.splitlines()[-2:] == [
        "files: broken (1 problem: see the ERROR lines above)",
        f"data: {status} (0 errors, {warnings} warning{'s' if warnings != 1 else ''}, {notes} notes; see report.json)"]


@pytest.mark.parametrize("tamper", ["flip", "delete"])
def test_a_tampered_report_shows_the_files_broken_and_the_data_unknown(out, tamper):
    path = out / "report.json"
    if tamper == "flip":
        text = path.read_text()
        assert '"status": "warnings"' in text
        path.write_text(text.replace('"status": "warnings"', '"status": "ok"'))  # the hash no longer matches
    else:
        path.unlink()
    result = _inspect(out)
    assert result.exit_code == 1
    assert result.output.splitlines()[-2:] == ["files: broken (1 problem: see the ERROR lines above)",
                                               "data: unknown (no intact report.json to read it from)"]
    assert inspect_build(out).data is None


def test_inspect_shows_the_feature_columns_and_where_the_raw_ids_are(built):
    manifest = json.loads((built / MANIFEST).read_text())
    result = _inspect(built)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("features ")]
    assert [line.split(":")[0] for line in lines] == [f"features {name}" for name in (
        "admission.x", "admission.x_cat", "labitem.x", "labitem.x_cat", "edge_attr", "edge_attr_cat")]
    code, fluid, category = (manifest["features"][tensor][at]["cardinality"]
                             for tensor, at in (("edge_attr_cat", 0), ("labitem.x_cat", 0), ("labitem.x_cat", 1)))
    assert "features admission.x: none" in lines and "features labitem.x: none" in lines
    assert "features edge_attr: Z, Z_BOUNDED (mark), Z_CENSORED (mark), Z_UNSEEN (mark)" in lines
    assert f"features edge_attr_cat: CODE ({code} categories)" in lines
    assert f"features labitem.x_cat: FLUID_CODE ({fluid} categories), CATEGORY_CODE ({category} categories)" in lines
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
    assert len(inspection.lines) == 1 + len(SPLITS) + len(FEATURES) + 1 + 1 + 1
    assert any(line.startswith("ADMISSIONS read ") and "= in graphs " in line for line in inspection.lines)


def test_a_deleted_graph_exits_1_naming_the_file(out):
    (out / "graphs/val/batch_00000.pt").unlink()
    result = _inspect(out)
    assert result.exit_code == 1
    assert "graph_manifest" in result.output and "graphs/val/batch_00000.pt" in result.output
    assert "missing" in result.output and "files: broken (1 problem: see the ERROR lines above)" in result.output
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


# -- inspect --items: per-item z figures -----------------------------------------------------------------------
ROW = re.compile(r"^\s*(\d+)\s{2}")  # a row of the item table starts with its ITEMID


def _items(out: Path, *args: str) -> tuple[list[str], list[str]]:
    """``inspect OUT --items ARGS``: the item section's heading lines and its rows."""
    result = runner.invoke(app, ["inspect", str(out), "--items", *args])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("items: "))
    section = lines[start:lines.index(FILES_OK)]
    return section, [line for line in section if ROW.match(line)]


def _edges_by_item(out: Path, column: str) -> pd.DataFrame:
    """Every did-edge of every graph as (ITEMID, edge_attr[column]), computed here from the tensors."""
    manifest = json.loads((out / MANIFEST).read_text())
    at = [c["name"] for c in manifest["features"]["edge_attr"]].index(column)
    frames = []
    for split in SPLITS:
        for graph in load_graphs(out, split):
            store = graph[EDGE]
            frames.append(pd.DataFrame({"ITEMID": graph["labitem"].itemid[store.edge_index[1]].numpy(),
                                        column: store.edge_attr[:, at].double().numpy()}))
    return pd.concat(frames, ignore_index=True)


def test_items_lists_every_item_on_the_edges_with_its_max_abs_z(built):
    edges = _edges_by_item(built, "Z")
    expected = edges.assign(Z=edges["Z"].abs()).groupby("ITEMID")["Z"].agg(["max", "size"])
    table = inspect_build(built).items
    assert sorted(table.index) == sorted(expected.index)
    assert (table["max_abs_z"] == expected["max"].reindex(table.index)).all()  # exact: the same float32 values
    assert (table["edges"] == expected["size"].reindex(table.index)).all()
    assert table["edges"].sum() == json.loads((built / MANIFEST).read_text())["accounting"]["LABEVENTS"]["kept"]
    _, rows = _items(built, "--top", "0")
    assert [int(ROW.match(row).group(1)) for row in rows] == table.index.tolist()


def test_items_are_sorted_by_max_abs_z_then_itemid(built):
    table = inspect_build(built).items
    keys = list(zip(-table["max_abs_z"], table.index))
    assert keys == sorted(keys)
    assert table["max_abs_z"].is_monotonic_decreasing


def test_items_show_the_fitted_stats_and_the_names_findings_give(built):
    stats = json.loads((built / "stats.json").read_text())["scale"]
    names = json.loads((built / MANIFEST).read_text())["item_names"]
    table = inspect_build(built).items
    fitted = pd.DataFrame({k: stats[k] for k in ("mean", "scale", "count", "rule")}, index=stats["items"])
    shared = table.index.intersection(fitted.index)
    assert len(shared) > 0
    pd.testing.assert_frame_equal(table.loc[shared, ["mean", "scale", "count", "rule"]],
                                  fitted.loc[shared], check_dtype=False, check_names=False)
    assert table.loc[50963, "name"] == "NTproBNP (Blood)"  # as the fallback finding names it
    named = {int(item): name for item, name in names.items() if int(item) in table.index}
    assert named and all(table.loc[item, "name"] == name for item, name in named.items())  # the manifest's names
    unseen = table.index.difference(fitted.index)  # on the edges, not fitted (unseen in train): no stats
    assert len(unseen) > 0 and table.loc[unseen, ["rule", "mean", "scale", "count"]].isna().all().all()
    section, rows = _items(built, "--top", "0")
    row = next(r for r in rows if r.lstrip().startswith("50963 "))
    assert "NTproBNP (Blood)" in row and table.loc[50963, "rule"] in row.split()
    assert next(r for r in rows if r.lstrip().startswith(f"{unseen[0]} ")).split().count("-") >= 4


def test_the_manifest_names_only_the_items_on_the_edges(built):
    names = json.loads((built / MANIFEST).read_text())["item_names"]
    on_edges = set(_edges_by_item(built, "Z")["ITEMID"])
    assert set(map(int, names)) == on_edges  # the sample names every item; none off the edges
    assert names["51100"] == "Sodium, Urine (Urine)"


def test_items_are_capped_with_a_line_saying_how_many_more(built):
    total = len(inspect_build(built).items)
    assert total > 20
    section, rows = _items(built)
    assert len(rows) == 20 and section[-1] == f"... and {total - 20} more items (--top N lists N, --top 0 all)"
    section, rows = _items(built, "--top", "5")
    assert len(rows) == 5 and f"and {total - 5} more items" in section[-1]
    section, rows = _items(built, "--top", "0")
    assert len(rows) == total and "more items" not in section[-1]
    alone = runner.invoke(app, ["inspect", str(built), "--top", "3"])  # --top implies --items
    assert alone.exit_code == 0 and len([line for line in alone.output.splitlines() if ROW.match(line)]) == 3
    plain = runner.invoke(app, ["inspect", str(built)])
    assert "items: " not in plain.output
    assert runner.invoke(app, ["inspect", str(built), "--top", "-1"]).exit_code == 2


def test_a_build_without_z_bounded_transform_or_names_shows_dashes(out):
    manifest = json.loads((out / MANIFEST).read_text())
    (bounded,) = [c for c in manifest["features"]["edge_attr"] if c["name"] == "Z_BOUNDED"]
    bounded["name"] = "Z_OLDER"  # a build from before z was bounded marked none
    del manifest["item_names"]  # a build from before names were kept
    (out / MANIFEST).write_text(json.dumps(manifest))
    stats = json.loads((out / "stats.json").read_text())
    for key in ("log_items", "transform", "bound"):
        del stats["scale"][key]
    (out / "stats.json").write_text(json.dumps(stats))
    _rehash(out, "stats.json")
    section, rows = _items(out, "--top", "0")
    assert "  bounded: - (edge_attr has no Z_BOUNDED column)" in section
    assert "  z bound: - (stats.json records none: a build from before z was bounded)" in section
    header = section[section.index(next(line for line in section if line.startswith("ITEMID")))].split()
    assert header == ["ITEMID", "name", "rule", "transform", "mean", "scale", "count", "edges", "max|z|", "bounded"]
    assert all(row.split()[-1] == "-" and row.split()[1] == "-" for row in rows)  # no bounded count, no name
    table = inspect_build(out).items
    assert table["name"].isna().all() and table["transform"].isna().all() and table["bounded"].isna().all()


def test_an_older_build_names_its_log1p_items_from_log_items(out):
    stats = json.loads((out / "stats.json").read_text())
    logged = stats["scale"]["items"][0]
    stats["scale"]["log_items"] = [logged]
    del stats["scale"]["transform"]  # a build from before each item's transform was recorded
    (out / "stats.json").write_text(json.dumps(stats))
    _rehash(out, "stats.json")
    table = inspect_build(out).items
    fitted = table.index.intersection(stats["scale"]["items"])
    assert table.loc[logged, "transform"] == "log1p"
    assert set(table.loc[fitted.drop(logged), "transform"]) == {"identity"}


def test_bounded_edges_are_counted_per_item_from_z_bounded(out):
    edges = _edges_by_item(out, "Z_BOUNDED")
    expected = edges.groupby("ITEMID")["Z_BOUNDED"].sum().astype("int64")
    inspection = inspect_build(out)
    assert inspection.problems == []
    table = inspection.items
    assert (table["bounded"] == expected.reindex(table.index)).all() and table["bounded"].sum() > 0
    stats = json.loads((out / "stats.json").read_text())["scale"]
    fitted = table.index.intersection(stats["items"])
    transforms = dict(zip(stats["items"], stats["transform"]))
    assert table.loc[fitted, "transform"].tolist() == [transforms[item] for item in fitted]
    section, rows = _items(out, "--top", "0")
    assert "  z bound: |z| <= 10" in section and not any("Z_BOUNDED" in line for line in section)
    shown = {int(ROW.match(row).group(1)): int(row.split()[-1]) for row in rows}
    assert shown == expected.reindex(table.index).to_dict()


def test_an_unbounded_build_says_so(out):
    stats = json.loads((out / "stats.json").read_text())
    stats["scale"]["bound"] = None
    (out / "stats.json").write_text(json.dumps(stats))
    _rehash(out, "stats.json")
    section, _ = _items(out)
    assert "  z bound: none (z is not bounded)" in section


def test_items_do_not_depend_on_the_order_graphs_are_read_in(out):
    first = runner.invoke(app, ["inspect", str(out), "--items", "--top", "0"]).output
    assert runner.invoke(app, ["inspect", str(out), "--items", "--top", "0"]).output == first
    before = inspect_build(out).items
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["graphs"].reverse()
    (out / MANIFEST).write_text(json.dumps(manifest))
    pd.testing.assert_frame_equal(inspect_build(out).items, before)


def test_a_broken_graph_is_left_out_of_the_item_figures(out):
    name = "graphs/val/batch_00000.pt"
    record = torch.load(out / name, weights_only=True)
    record[EDGE]["edge_attr"][0, 1] = float("nan")
    torch.save(record, out / name)
    _rehash(out, name)
    result = runner.invoke(app, ["inspect", str(out), "--items"])
    assert result.exit_code == 1
    assert "  1 graph(s) with problems left out of the item figures" in result.output.splitlines()


def test_the_feature_lines_docs_graphs_shows_are_what_inspect_prints_for_the_sample(built):
    """docs/graphs.md shows inspect's feature lines for the sample: they are the lines a build of it prints."""
    shown = re.search(r"```\n(features admission\.x:.*?)```", (ROOT / "docs" / "graphs.md").read_text(), flags=re.S)
    printed = [line for line in _inspect(built).stdout.splitlines() if line.startswith("features ")]
    assert printed == shown.group(1).splitlines()
