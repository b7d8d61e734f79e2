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
from schemas.errors import StageError

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


def page_preprocessed(mimic3demo: Path) -> pd.DataFrame:
    """The table docs/check.md's own ``preprocess`` (its std + 1e-7 script) writes of the MIMIC-III demo's LABEVENTS
    (VALUENUM read from VALUE)."""
    namespace: dict = {}
    script = re.findall(r"```python\n(.*?)```", CHECK_PAGE.read_text(), flags=re.S)[1].split("\nwritten = ")[0]
    exec(script, namespace)  # noqa: S102
    labevents = pd.read_csv(mimic3demo / "LABEVENTS.csv")
    labevents["VALUENUM"] = pd.to_numeric(labevents["VALUE"], errors="coerce")
    return namespace["preprocess"](labevents)


def test_the_page_s_report_of_a_user_s_pipeline_on_the_mimic_iii_demo_is_what_check_prints(mimic3demo, tmp_path,
                                                                                           monkeypatch):
    """docs/check.md's terminal report is a real run: the page's own ``preprocess`` (its std + 1e-7 script) on the
    MIMIC-III demo's LABEVENTS, checked with the page's schema, prints the page's block, figure for figure."""
    text = CHECK_PAGE.read_text()
    preprocessed = page_preprocessed(mimic3demo)
    top = f"{preprocessed['VALUENUM_Z-SCORED'].abs().max():.1e}".replace("e+", "e")
    assert re.search(r"it wrote z-scores up to (\S+);", text).group(1) == top  # the page's words on that script
    preprocessed.to_csv(tmp_path / "LABEVENTS_PREPROCESSED.csv", index=False)
    (tmp_path / "lab_schema.yaml").write_text(SCHEMA)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["check", "LABEVENTS_PREPROCESSED.csv", "--schema", "lab_schema.yaml"])
    assert result.exit_code == 1, result.output
    shown = re.search(r"```\n(read LABEVENTS_PREPROCESSED\.csv.*?)```", text, flags=re.S).group(1)
    assert result.stdout == shown


def newcomer(labevents: pd.DataFrame) -> pd.DataFrame:
    """A newcomer's MIMIC-IV preprocessing: log(x) on a skewed item, then z per item with mean and std fitted on
    the train admissions and guarded with ``std + 1e-7``."""
    with np.errstate(divide="ignore"):
        x = labevents["valuenum"].where(labevents["itemid"] != SKEWED, np.log(labevents["valuenum"]))  # log(0): -inf
    train = labevents["hadm_id"] % 10 < 7
    fitted = x[train].groupby(labevents["itemid"][train]).agg(["mean", "std"])
    mean, std = labevents["itemid"].map(fitted["mean"]), labevents["itemid"].map(fitted["std"])
    return labevents.assign(z=(x - mean) / (std + 1e-7))


SKEWED, CONSTANT = 50889, 50983  # C-reactive protein (log-scaled); an item whose train rows are all equal


@pytest.fixture
def mimic4_table(tmp_path) -> tuple[Path, pd.DataFrame]:
    """The newcomer's table (``hadm_id, itemid, valuenum, z``) as a CSV: creatinine as it should be; CRP whose
    test rows of 0 became log(0) = -inf and z = -inf; an item equal in every train row, so std + 1e-7 made its
    other rows' z 3e11."""
    hadm = np.repeat(np.arange(20_000_000, 20_000_040), 3)
    items = np.tile([50912, SKEWED, CONSTANT], 40)
    creatinine = 0.7 + 0.05 * (np.arange(len(hadm)) % 9)
    crp = np.where(hadm % 10 == 9, 0.0, 2.0 + np.arange(len(hadm)) % 7)
    constant = np.where(hadm % 10 < 7, 0.0, 30_000.0)
    valuenum = np.select([items == 50912, items == SKEWED], [creatinine, crp], constant)
    frame = newcomer(pd.DataFrame({"hadm_id": hadm, "itemid": items, "valuenum": valuenum}))
    path = tmp_path / "labevents_preprocessed.csv"
    frame.to_csv(path, index=False)
    return path, frame


def yaml_schema(path: Path, table_checks: str) -> Path:
    """A pandera YAML schema of the newcomer's table with ``table_checks`` under ``checks:``."""
    path.write_text("schema_type: dataframe\ncolumns:\n  hadm_id: {dtype: int64}\n  itemid: {dtype: int64}\n"
                    "  valuenum: {dtype: float64}\n  z: {dtype: float64}\nchecks:\n" + table_checks)
    return path


def test_a_registered_check_without_an_argument_it_needs_cannot_run_and_says_which(mimic4_table, tmp_path):
    """A z_within with no bound is a schema error, refused before the table is read: exit 2, naming the check,
    the argument and the edit; not a finding about the data."""
    path, _ = mimic4_table
    schema = yaml_schema(tmp_path / "s.yaml", "  - column: z\n    by: itemid\n    options: {check_name: z_within}\n")
    done = runner.invoke(app, ["check", str(path), "--schema", str(schema), "--json", str(tmp_path / "r.json")])
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert "cannot run" in said and "z_within(column=z, by=itemid)" in said and "lacks its argument bound" in said
    assert "Add bound: 1000 beside its other arguments" in said and "No real measurement" not in said
    assert not (tmp_path / "r.json").exists()  # nothing was checked


def test_a_schema_object_whose_check_lacks_an_argument_is_refused_before_any_row_is_read(mimic4_table):
    path, _ = mimic4_table
    schema = pa.DataFrameSchema({"z": pa.Column(float)}, checks=[pa.Check.z_explained(column="z", by="itemid")])
    with pytest.raises(StageError) as refused:
        check_table(path, schema, load_config())
    assert "z_explained(column=z, by=itemid) lacks its argument values" in str(refused.value)


def test_a_check_naming_a_column_the_table_lacks_cannot_run_and_names_the_table_s_columns(mimic4_table, tmp_path):
    """A check whose group column is neither the schema's nor the table's cannot run (exit 2): the run says which
    column and which the table has, rather than failing rows or crashing."""
    path, _ = mimic4_table
    schema = yaml_schema(tmp_path / "s.yaml", "  - column: z\n    by: item\n    bound: 1000\n"
                                              "    options: {check_name: z_within}\n")
    run = check_table(path, str(schema), load_config())
    assert run.exit_code == 2
    [finding] = run.report.findings
    assert ("z_within(column=z, by=item, bound=1000) names the column item, which labevents_preprocessed.csv "
            "lacks (its columns: hadm_id, itemid, valuenum, z)") in finding.message


def test_a_check_that_fails_to_run_on_the_table_cannot_run_and_names_pandera_s_reason(mimic4_table, tmp_path):
    """A check with every argument that still cannot run (a bound that is text) ends the run as one that cannot
    run (exit 2) with pandera's reason, not as rows that fail."""
    path, _ = mimic4_table
    schema = yaml_schema(tmp_path / "s.yaml", "  - column: z\n    by: itemid\n    bound: a lot\n"
                                              "    options: {check_name: z_within}\n")
    run = check_table(path, str(schema), load_config())
    assert run.exit_code == 2
    [finding] = run.report.findings
    assert "z_within(column=z, by=itemid, bound=a lot) could not run (UFuncTypeError" in finding.message


def test_an_inferred_schema_passes_on_a_table_with_infs_and_says_what_no_real_table_holds(mimic4_table, tmp_path):
    """--infer on the newcomer's table writes a schema the table passes as it is (its -inf left to finite, not
    failed as out of range), and says, on the terminal and atop the file, what no real table holds: the -inf, a
    |z| of 3e11 its z_within bound now allows, an item whose z varies where its values do not; each with its edit."""
    path, frame = mimic4_table
    written = tmp_path / "inferred.yaml"
    done = runner.invoke(app, ["check", str(path), "--infer", str(written)])
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    infs = int(np.isinf(frame["z"]).sum())
    assert infs == 4
    assert f"z: {infs} values are -inf" in said and "add finite to its checks" in said
    assert "|z| up to 3.0e11" in said and "set z_within's bound to 1000" in said
    assert ("z: in 1 itemid group (50983) it is no z-score of valuenum: it varies where valuenum does not, or over "
            "1,000 times more") in said
    assert "add the table check z_explained (column: z, values: valuenum, by: itemid)" in said
    assert "# z: 4 values are -inf" in written.read_text()
    again = runner.invoke(app, ["check", str(path), "--schema", str(written), "-q"])
    assert again.exit_code == 0, again.output


def test_a_check_run_s_reports_name_it_and_list_the_checks_that_ran(mimic4_table, tmp_path):
    """JUnit's suites are "badpoints check", with a case for each check of the schema (pandera's own as
    table_schema) and none for the checks of a MIMIC run; the HTML page's title says check."""
    path, _ = mimic4_table
    schema = yaml_schema(tmp_path / "s.yaml", "  - column: z\n    by: itemid\n    bound: 1000\n"
                                              "    options: {check_name: z_within}\n")
    done = runner.invoke(app, ["check", str(path), "--schema", str(schema), "--junit", str(tmp_path / "r.xml"),
                               "--html", str(tmp_path / "r.html"), "-q"])
    assert done.exit_code == 1, done.output
    import xml.etree.ElementTree as ET

    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert root.get("name") == "badpoints check" and set(cases) == {"table_schema", "z_within"}
    assert cases["z_within"].find("failure") is not None and cases["table_schema"].find("failure") is None
    assert re.search(r"<title>badpoints check: errors</title>", (tmp_path / "r.html").read_text())


def test_a_graph_check_run_s_junit_lists_the_graph_checks_that_ran(tmp_path):
    """Saved graphs checked with --num-classes: JUnit's cases are the guard's checks of a graph file (its labels'
    among them), the bad graph's failing; no case of a MIMIC run's stages."""
    import xml.etree.ElementTree as ET

    import torch
    from torch_geometric.data import Data

    torch.save(Data(x=torch.tensor([[float("nan")]]), edge_index=torch.tensor([[0], [0]]),
                    y=torch.tensor([3])).to_dict(), tmp_path / "bad.pt")
    done = runner.invoke(app, ["check", str(tmp_path / "bad.pt"), "--num-classes", "2", "--junit",
                               str(tmp_path / "r.xml"), "-q"])
    assert done.exit_code == 1, done.output
    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert root.get("name") == "badpoints check" and {"graph_finite", "graph_label_range", "graph_pyg"} <= set(cases)
    assert all(name.startswith("graph_") for name in cases) and "graph_manifest" not in cases
    assert {name for name, case in cases.items() if case.find("failure") is not None} == {"graph_finite",
                                                                                           "graph_label_range"}


def _page_block(starting: str) -> str:
    """docs/check.md's output block that starts with ``starting``, its lines joined as one text."""
    block = re.search(rf"```\n({re.escape(starting)}.*?)```", CHECK_PAGE.read_text(), flags=re.S).group(1)
    return " ".join(block.split())


def test_the_page_s_schema_without_its_bound_cannot_run_as_the_page_prints(tmp_path, monkeypatch):
    """docs/check.md's refusal of its own schema with `bound: 1000` taken out is what check prints."""
    assert "    bound: 1000\n" in SCHEMA
    (tmp_path / "lab_schema.yaml").write_text(SCHEMA.replace("    bound: 1000\n", ""))
    (tmp_path / "LABEVENTS_PREPROCESSED.csv").write_text("HADM_ID,ITEMID,VALUENUM,VALUENUM_Z-SCORED\n1,50912,1.0,0.5\n")
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["check", "LABEVENTS_PREPROCESSED.csv", "--schema", "lab_schema.yaml"])
    assert done.exit_code == 2
    assert " ".join(done.output.split()) == _page_block("badpoints: cannot run:")


def test_the_page_s_infer_of_a_user_s_pipeline_on_the_mimic_iii_demo_is_what_check_prints(mimic3demo, tmp_path,
                                                                                           monkeypatch):
    """docs/check.md's --infer of its own std + 1e-7 script's table on the MIMIC-III demo prints the page's lines:
    the |z| of 1.4e10 and the 23 items whose z no z-score of their values is (those the page's z_explained names)."""
    page_preprocessed(mimic3demo).to_csv(tmp_path / "LABEVENTS_PREPROCESSED.csv", index=False)
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["check", "LABEVENTS_PREPROCESSED.csv", "--infer", "lab_schema.yaml"])
    assert done.exit_code == 0, done.output
    assert " ".join(done.output.split()) == _page_block("wrote a starter schema")


@pytest.mark.parametrize(("checks", "said"), [
    ("  - column: z\n    by: item\n    bound: 1000\n    options: {check_name: z_within}\n", "names the column item"),
    ("  - column: z\n    values: valuenum\n    by: itemid\n    min_ratio: tiny\n"
     "    options: {check_name: z_explained}\n", "could not run"),
])
def test_a_check_that_cannot_run_in_worker_processes_cannot_run_as_it_does_here(mimic4_table, tmp_path, checks,
                                                                                said):
    """Checked in two worker processes (--engine parts), a schema that cannot run on the table's blocks ends the
    run with exit 2 and the same words as in this process, carried back from the worker."""
    path, _ = mimic4_table
    schema = yaml_schema(tmp_path / "s.yaml", checks)
    here = runner.invoke(app, ["check", str(path), "--schema", str(schema), "-q"])
    there = runner.invoke(app, ["check", str(path), "--schema", str(schema), "-q", "--engine", "parts", "--workers",
                                "2"])
    assert here.exit_code == there.exit_code == 2, there.output
    assert said in " ".join(there.output.split()) and there.stdout == here.stdout


def test_a_table_without_a_column_its_schema_declares_fails_on_it_where_a_table_check_reads_it(mimic4_table,
                                                                                             tmp_path):
    """The table lacks itemid, which the schema declares and its z_explained groups by: pandera's missing column is
    the one finding (exit 1); the table check, which cannot read it, is neither a failure of the rows nor a check
    that cannot run."""
    path, frame = mimic4_table
    frame.drop(columns=["itemid"]).to_csv(tmp_path / "t.csv", index=False)
    schema = yaml_schema(tmp_path / "s.yaml", "  - column: z\n    values: valuenum\n    by: itemid\n"
                                              "    options: {check_name: z_explained}\n")
    run = check_table(tmp_path / "t.csv", str(schema), load_config())
    assert run.exit_code == 1
    assert [(f.check, f.column) for f in run.report.findings] == [("table_schema", "itemid")]
