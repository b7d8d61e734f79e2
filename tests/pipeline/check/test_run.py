"""``badpoints check TABLE --schema SCHEMA`` (pipeline/check/run.py): a table a pipeline of the user's wrote, checked
block by block against a schema of theirs, every finding at once, with validate's report forms and exit codes.

The pipeline here makes the mistakes this tool exists for (a std fitted on train, guarded with ``std + 1e-7``, so an
item constant in train gets z of millions in test), on the sample's lab rows; the schema is the one docs/check.md
shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest
from typer.testing import CliRunner

from pipeline.check.run import check_table
from pipeline.check.schema import load_schema
from pipeline.cli import app
from pipeline.config import load_config

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()
CHECK_PAGE = ROOT / "docs" / "check.md"
# The schema docs/check.md writes for a z-scored lab table: the page's first YAML block, as a reader copies it.
SCHEMA = re.search(r"```yaml\n(schema_type:.*?)```", CHECK_PAGE.read_text(), flags=re.S).group(1)


def preprocessed(labevents: pd.DataFrame) -> pd.DataFrame:
    """A user's z-score of VALUENUM per item: mean and std fitted on the train admissions, ``std + 1e-7``."""
    rows = labevents.dropna(subset=["HADM_ID", "VALUENUM"]).astype({"HADM_ID": "int64"})
    train = rows["HADM_ID"] % 10 < 7
    fitted = rows[train].groupby("ITEMID")["VALUENUM"].agg(["mean", "std"])
    mean = rows["ITEMID"].map(fitted["mean"]).fillna(0.0)
    std = rows["ITEMID"].map(fitted["std"]).fillna(0.0)
    return rows.assign(**{"VALUENUM_Z-SCORED": (rows["VALUENUM"] - mean) / (std + 1e-7)})[
        ["HADM_ID", "ITEMID", "CHARTTIME", "VALUENUM", "VALUENUM_Z-SCORED"]]


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    labevents = pd.read_csv(ROOT / "data" / "sample" / "LABEVENTS.csv")
    # Two items held constant in train, as the std + 1e-7 case needs: their other rows get z of millions.
    for item in sorted(labevents["ITEMID"].unique())[:2]:
        train = (labevents["ITEMID"] == item) & (labevents["HADM_ID"] % 10 < 7)
        labevents.loc[train, "VALUENUM"] = 4.0
    frame = preprocessed(labevents).reset_index(drop=True)  # the CSV's row n is on line n + 2
    path = tmp_path_factory.mktemp("check") / "LABEVENTS_PREPROCESSED.csv"
    frame.to_csv(path, index=False)
    return path, frame


def bogus(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose z no real measurement has: the std + 1e-7 ones (millions), found here independently."""
    return frame[frame["VALUENUM_Z-SCORED"].abs() > 1e3]


def test_the_documented_schema_names_every_row_of_a_failed_std_guard_per_item(table, tmp_path):
    """Every row whose z no real measurement has is named, by its source line, with its item; z_explained names
    those of the items whose own values cannot explain their z (the std + 1e-7 items), and nothing else."""
    path, frame = table
    (tmp_path / "schema.yaml").write_text(SCHEMA)
    (tmp_path / "badpoints.toml").write_text("[report]\nmax_lines = 1000\n")
    result = runner.invoke(app, ["check", str(path), "--schema", str(tmp_path / "schema.yaml"), "--json",
                                 str(tmp_path / "r.json"), "--config", str(tmp_path / "badpoints.toml"), "-q"])
    assert result.exit_code == 1, result.output
    found = {f["check"]: f for f in json.loads((tmp_path / "r.json").read_text())["findings"]}
    wrong = bogus(frame)
    lines = sorted((wrong.index.to_numpy() + 2).tolist())  # the CSV's source lines (the header is line 1)
    assert len(wrong) > 10 and found["z_within"]["count"] == len(wrong) and found["z_within"]["lines"] == lines
    assert sorted(found["z_within"]["items"]) == sorted(wrong["ITEMID"].unique())
    explained = found["z_explained"]
    assert set(explained["lines"]) <= set(lines) and explained["count"] >= len(wrong) - 1
    assert "z_explained" in result.output and "VALUENUM_Z-SCORED" in result.output


def test_block_by_block_finds_what_pandera_finds_on_the_whole_frame(table):
    """Read in blocks of 4 KiB (dozens of blocks), each check's failing rows are the ones pandera's own validate
    finds on the table whole."""
    path, frame = table
    schema = load_schema_text(SCHEMA)
    run = check_table(path, schema, load_config(), block_bytes=4096)
    whole = frame.set_axis(frame.index + 2)
    try:
        schema.validate(whole, lazy=True)
        cases = pd.DataFrame(columns=["check", "index"])
    except pa.errors.SchemaErrors as errors:
        cases = errors.failure_cases
    names = cases["check"].astype(str).str.replace(r"\(.*", "", regex=True)
    for finding in run.report.findings:
        expected = sorted(set(cases.loc[names == finding.check, "index"].dropna().astype(int)))
        assert finding.count == len(expected) and finding.lines == expected[:len(finding.lines)], finding.check
    assert {f.check for f in run.report.findings} == {"z_within", "z_explained"}


def load_schema_text(text: str) -> pa.DataFrameSchema:
    return pa.DataFrameSchema.from_yaml(text)


def test_an_inferred_schema_passes_unedited_on_the_table_it_was_inferred_from(table, tmp_path):
    path, _ = table
    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "a.csv").write_bytes(path.read_bytes())
    pd.read_csv(path).to_parquet(folder / "b.parquet")
    done = runner.invoke(app, ["check", str(folder), "--infer", str(tmp_path / "inferred.yaml")])
    assert done.exit_code == 0, done.output
    inferred = load_schema(tmp_path / "inferred.yaml")
    assert {"finite", "z_within"} <= {check.name for check in inferred.columns["VALUENUM_Z-SCORED"].checks}
    again = runner.invoke(app, ["check", str(folder), "--schema", str(tmp_path / "inferred.yaml"), "-q"])
    assert again.exit_code == 0, again.output


def test_text_that_is_not_a_number_and_a_missing_column_are_named_with_their_lines(tmp_path):
    (tmp_path / "t.csv").write_text("HADM_ID,VALUENUM\n1,2.5\n2,high\n3,\n")
    schema = pa.DataFrameSchema({"HADM_ID": pa.Column(int), "VALUENUM": pa.Column(float, nullable=True),
                                 "ITEMID": pa.Column(int)})
    run = check_table(tmp_path / "t.csv", schema, load_config())
    found = {(f.check, f.column): f for f in run.report.findings}
    assert found[("table_schema", "VALUENUM")].lines == [3] and found[("table_schema", "VALUENUM")].count == 1
    assert ("table_schema", "ITEMID") in found and run.exit_code == 1


def test_a_number_column_reads_alike_in_a_block_of_numbers_and_in_a_block_with_text(tmp_path):
    """A block whose number columns hold only numbers is read as numbers, one with text in them as text and typed
    after: the same values and the same failures either way (a whole float is an integer, inf a number the finite
    check names, NaN and a blank the nulls of a nullable column, text a failure of the dtype), each by its line."""
    rows = ["100375.0,inf", "2,NaN", "3, 5", "4,", "5,1e3"] * 40  # lines 2..201: numbers only
    rows[150] = "x,1"  # line 152: text in HADM_ID, so its block is read as text
    (tmp_path / "t.csv").write_text("HADM_ID,Z\n" + "\n".join(rows) + "\n")
    schema = pa.DataFrameSchema({"HADM_ID": pa.Column(int, nullable=True),
                                 "Z": pa.Column(float, pa.Check.finite(), nullable=True)})
    config = load_config()
    found = {}
    for block_bytes in (1 << 20, 256):  # one block; blocks of a few rows, most of them numbers only
        run = check_table(tmp_path / "t.csv", schema, config, block_bytes=block_bytes)
        found[block_bytes] = {(f.check, f.column): (f.count, f.lines[:4]) for f in run.report.findings}
    assert found[1 << 20] == found[256]
    assert found[256][("table_schema", "HADM_ID")] == (1, [152])
    assert found[256][("finite", "Z")] == (39, [2, 7, 12, 17])  # line 152's inf is now text's row


@pytest.mark.parametrize("schema", ["nowhere.yaml", "no_such_module:Schema", "pipeline.cli:app"])
def test_a_schema_that_cannot_be_used_cannot_run(table, schema):
    done = runner.invoke(app, ["check", str(table[0]), "--schema", schema])
    assert done.exit_code == 2 and "cannot run" in done.output


def test_a_schema_may_be_a_dataframe_model_of_a_module(table, tmp_path, monkeypatch):
    (tmp_path / "myschemas.py").write_text(
        "import pandera.pandas as pa\nfrom pandera.typing import Series\n"
        "class Labs(pa.DataFrameModel):\n"
        "    HADM_ID: Series[int]\n"
        "    z: Series[float] = pa.Field(alias='VALUENUM_Z-SCORED', z_within={'bound': 1000})\n")
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["check", str(table[0]), "--schema", "myschemas:Labs", "-q"])
    assert done.exit_code == 1 and "z_within" in done.output, done.output


def test_check_and_infer_together_or_neither_cannot_run(table, tmp_path):
    assert runner.invoke(app, ["check", str(table[0])]).exit_code == 2
    both = runner.invoke(app, ["check", str(table[0]), "--schema", "x.yaml", "--infer", str(tmp_path / "y.yaml")])
    assert both.exit_code == 2


def test_a_clean_table_is_ok_and_every_report_form_is_written(tmp_path):
    (tmp_path / "t.csv").write_text("A,Z\n1,0.5\n2,-0.5\n")
    (tmp_path / "s.yaml").write_text(pa.DataFrameSchema({"A": pa.Column(int), "Z": pa.Column(
        float, checks=[pa.Check.z_within(bound=3)])}).to_yaml())
    done = runner.invoke(app, ["check", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "s.yaml"), "--json",
                               str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"), "--junit",
                               str(tmp_path / "r.xml")])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "ok"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>") and (tmp_path / "r.xml").is_file()
    assert np.isfinite(0)


def test_check_on_saved_graphs_names_each_bad_graph_and_passes_the_good_one(tmp_path):
    """``badpoints check FOLDER`` of ``.pt`` files guards each graph (no schema needed): the bad file's NaN feature,
    edge past the node count and label outside ``[0, --num-classes)`` are named, the good one gives nothing."""
    import torch
    from torch_geometric.data import Data

    bad = Data(x=torch.tensor([[1.0], [float("nan")], [2.0]]), edge_index=torch.tensor([[0, 1], [1, 5]]),
               y=torch.tensor([0, 3, 1]))
    good = Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0, 1, 1]))
    torch.save(bad.to_dict(), tmp_path / "bad.pt")
    torch.save(good.to_dict(), tmp_path / "good.pt")
    result = runner.invoke(app, ["check", str(tmp_path), "--num-classes", "2", "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1, result.output
    found = {(f["table"], f["column"], f["check"])
             for f in json.loads((tmp_path / "r.json").read_text())["findings"]}
    assert found == {("bad.pt", "data.x", "graph_finite"), ("bad.pt", "data.edge_index", "graph_index_bounds"),
                     ("bad.pt", "data.y", "graph_label_range")}
    result = runner.invoke(app, ["check", str(tmp_path / "good.pt"), "--num-classes", "2"])
    assert result.exit_code == 0, result.output


def test_a_dtype_failure_names_what_was_found_never_the_values(tmp_path):
    """Text that is not of its column's type is named by its classes (a decimal number where whole numbers are
    due, a word); a Parquet column of the wrong dtype by that dtype."""
    schema = pa.DataFrameSchema({"HADM_ID": pa.Column("int64"), "Z": pa.Column("float64", nullable=True)})
    (tmp_path / "t.csv").write_text("HADM_ID,Z\n101,0.5\n102.5,1.5\nsecret,2.5\n")
    run = check_table(tmp_path / "t.csv", schema, load_config())
    (finding,) = [f for f in run.report.findings if "dtype(" in f.message]
    assert (finding.check, finding.column, finding.count, finding.lines) == ("table_schema", "HADM_ID", 2, [3, 4])
    assert "2 rows fail dtype('int64'): found " in finding.message
    assert "non-numeric text, 6 chars ×1" in finding.message and "secret" not in finding.message
    pd.DataFrame({"HADM_ID": [True, False], "Z": pd.to_datetime(["2150-01-01", "2150-01-02"])}).to_parquet(
        tmp_path / "t.parquet")
    run = check_table(tmp_path / "t.parquet", schema, load_config())
    said = {f.column: f.message for f in run.report.findings}
    assert "fails dtype('int64'): found bool (the column's dtype)" in said["HADM_ID"]
    assert "2 rows fail dtype('float64'): found datetime64[" in said["Z"]  # ns or us, as pyarrow reads it


def test_check_of_graphs_counts_graphs_says_when_labels_went_unchecked_and_bounds_their_magnitudes(tmp_path):
    """A .pt file holds graphs: its read line counts them. Without --num-classes the labels are not checked, and
    the report says so; a finite z of 3e11 in edge_attr is an error naming the attribute and its rows."""
    import torch
    from torch_geometric.data import Data

    one = Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0, 1, 7]),
               edge_attr=torch.tensor([[0.5], [3e11]], dtype=torch.float32))
    torch.save(one.to_dict(), tmp_path / "bad.pt")
    torch.save([one.to_dict(), one.to_dict()], tmp_path / "two.pt")
    result = runner.invoke(app, ["check", str(tmp_path / "bad.pt"), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1, result.output
    (read,) = [line for line in result.output.splitlines() if line.startswith("read ")]
    assert read.split()[1:4] == [str(tmp_path / "bad.pt"), "1", "graph"]
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    found = {(f["check"], f["column"], f["severity"]): f["message"] for f in findings}
    assert set(found) == {("graph_magnitude", "data.edge_attr", "error"), ("graph_labels_unchecked", "data.y", "info")}
    assert "1 value with |value| above 1e+06 (max_abs) at rows 1" in found["graph_magnitude", "data.edge_attr", "error"]
    result = runner.invoke(app, ["check", str(tmp_path / "two.pt"), "--num-classes", "8"])
    (read,) = [line for line in result.output.splitlines() if line.startswith("read ")]
    assert read.split()[2:4] == ["2", "graphs"] and "graph_labels_unchecked" not in result.output


def test_the_page_s_report_of_a_user_s_pipeline_on_the_mimic_iii_demo_is_what_check_prints(mimic3demo, tmp_path,
                                                                                           monkeypatch):
    """docs/check.md's terminal report is a real run: the page's own ``preprocess`` (its std + 1e-7 script) on the
    MIMIC-III demo's LABEVENTS, checked with the page's schema, prints the page's block, figure for figure."""
    text = CHECK_PAGE.read_text()
    namespace: dict = {}
    exec(re.findall(r"```python\n(.*?)```", text, flags=re.S)[1].split("\nwritten = ")[0], namespace)  # noqa: S102
    labevents = pd.read_csv(mimic3demo / "LABEVENTS.csv")
    labevents["VALUENUM"] = pd.to_numeric(labevents["VALUE"], errors="coerce")
    preprocessed = namespace["preprocess"](labevents)
    top = f"{preprocessed['VALUENUM_Z-SCORED'].abs().max():.1e}".replace("e+", "e")
    assert re.search(r"it wrote z-scores up to (\S+);", text).group(1) == top  # the page's words on that script
    preprocessed.to_csv(tmp_path / "LABEVENTS_PREPROCESSED.csv", index=False)
    (tmp_path / "lab_schema.yaml").write_text(SCHEMA)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check", "LABEVENTS_PREPROCESSED.csv", "--schema", "lab_schema.yaml"])
    assert result.exit_code == 1, result.output
    shown = re.search(r"```\n(read LABEVENTS_PREPROCESSED\.csv.*?)```", text, flags=re.S).group(1)
    assert result.stdout == shown
