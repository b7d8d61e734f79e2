"""What docs/python.md and docs/check.md show of a newcomer's own pipeline is what the code does: lab rows with
MIMIC-IV's lower-case names handed to the stages, a guarded per-item loop, a graph whose z a ``std + 1e-7`` blew up,
a dtype failure. The pages' Python blocks run in order as one notebook (as tests/test_readme.py runs them); the
blocks of output they show are compared with what the code prints, and the figures their prose states with counts
made here."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import torch
from torch_geometric.data import Data
from typer.testing import CliRunner

from pipeline import Guard
from pipeline.check.run import check_table
from pipeline.cli import app
from pipeline.config import load_config
from tests.test_readme import _python_blocks, _run

ROOT = Path(__file__).resolve().parents[1]
PYTHON_PAGE = ROOT / "docs" / "python.md"
CHECK_PAGE = ROOT / "docs" / "check.md"
runner = CliRunner()


def _shown_after(text: str, marker: str) -> str:
    """The first block of output (a bare fence) after ``marker`` on a page."""
    return re.search(r"```\n\n```\n(.*?)```", text.split(marker, 1)[1], flags=re.S).group(1)


def test_python_guide_s_own_frames_in_lower_case_and_its_loop_print_what_the_page_shows(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in _python_blocks(PYTHON_PAGE):
        _run(block, PYTHON_PAGE, namespace)
    out = capsys.readouterr().out
    # "Your own frames": the five lower-case columns are read; only KIND is missing, then only CHARTTIME
    assert ("[scale:input] SplitEvents.KIND column_in_dataframe: 1 column missing: KIND (str): the kind of its lab "
            "item") in out
    assert ("[scale:input] EncodedEvents.CHARTTIME column_in_dataframe: 1 column missing: CHARTTIME "
            "(datetime64[ns]): when the lab was charted. scale.apply_zscore takes EncodedEvents (schemas.encode): "
            "give the frame these columns") in out
    my_labs, my_scaled = namespace["my_labs"], namespace["my_scaled"]
    assert list(my_scaled.columns) == [*my_labs.columns, "z", "z_bounded", "z_unseen"]  # no VALUE, no CODE
    assert my_scaled["z"].notna().all() and namespace["my_stats"].items_ == (50912,)
    assert "In ITEMID 50912 (1 row) of the rows handed to scale.fit_zscore" in out  # the inf of `valuenum`
    # "A function called in a loop": the block of output the page shows is what its block printed, last
    text = PYTHON_PAGE.read_text()
    loop = text.split("### A function called in a loop", 1)[1]
    shown = _shown_after(loop, "```python\n")
    assert out.endswith(shown)
    # its prose, counted here: the items without a std are those measured once, in the calls the page names
    numbers = namespace["numbers"]
    counts, spread = numbers.groupby("ITEMID").size(), numbers.groupby("ITEMID")["VALUENUM"].std()
    emptied = sorted(item for item in counts.index if not spread[item] > 0)
    assert emptied == [50956, 51041] and counts[emptied].tolist() == [1, 1]
    assert "Two items lose every row: 50956 and 51041, each measured once on the sample" in loop
    for item in emptied:
        assert f"call {list(counts.index).index(item) + 1} (ITEMID={item}) output" in shown


def _bad_graph(path: Path) -> None:
    """bad.pt as docs/check.md describes it: three nodes, two edges, labels 0, 1 and 7, float32 edge_attr 0.5 and
    3e11."""
    graph = Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0, 1, 7]),
                 edge_attr=torch.tensor([[0.5], [3e11]], dtype=torch.float32))
    torch.save(graph.to_dict(), path)


def test_check_guide_s_graph_example_prints_what_the_page_shows(tmp_path, monkeypatch):
    text = CHECK_PAGE.read_text()
    section = text.split("## Graphs", 1)[1].split("\n## ", 1)[0]
    assert "holds one graph (three nodes, two\nedges, labels 0, 1 and 7) whose float32 `edge_attr` is" in section
    monkeypatch.chdir(tmp_path)
    _bad_graph(tmp_path / "bad.pt")
    result = runner.invoke(app, ["check", "bad.pt"])
    assert result.exit_code == 1
    assert result.stdout == _shown_after(section, "badpoints check bad.pt\n")
    # what the prose says of two more runs
    result = runner.invoke(app, ["check", "bad.pt", "--num-classes", "2"])
    assert "graph/graph_label_range bad.pt.data.y (1)" in result.stdout
    assert "graph_labels_unchecked" not in result.stdout
    (tmp_path / "severity.toml").write_text('[severity]\ngraph_magnitude = "warning"\n')
    result = runner.invoke(app, ["check", "bad.pt", "--config", "severity.toml"])
    assert result.exit_code == 0 and "WARNING graph/graph_magnitude" in result.stdout


def test_check_guide_s_dtype_failure_says_what_was_found(tmp_path):
    phrase = "2 rows fail dtype('int64'): found\ndecimal number ×1, non-numeric text, 6 chars ×1"
    assert phrase in CHECK_PAGE.read_text()
    (tmp_path / "t.csv").write_text("HADM_ID\n101\n102.5\nsecret\n")
    run = check_table(tmp_path / "t.csv", pa.DataFrameSchema({"HADM_ID": pa.Column("int64")}), load_config())
    assert phrase.replace("\n", " ") in "\n".join(f.message for f in run.report.findings)
    guard = Guard(errors="collect")  # a frame read typed: HADM_ID with a gap is float64 in pandas
    guard.stage(takes=pa.DataFrameSchema({"HADM_ID": pa.Column("int64", nullable=True)}))(lambda frame: frame)(
        pd.DataFrame({"HADM_ID": [101, None]}))
    assert "frame's that a Guard checks: `found float64 (the column's dtype)`" in CHECK_PAGE.read_text()
    (finding,) = guard.report.findings
    assert "fails dtype('int64'): found float64 (the column's dtype)" in finding.message
