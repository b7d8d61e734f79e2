"""What a researcher acts on, held on real and MIMIC-IV-shaped data: a warning asks for a decision (none calls its
rows expected), no rows are counted by two findings, and the terminal output stays short (under 8 KB, no line over
200 characters) while the JSON report keeps every item a finding names.

Runs on the real MIMIC-III demo in both layouts (MIMIC-III's and MIMIC-IV's: ``hosp/*.csv.gz``, lower-case headers)
and on the MIMIC-IV-layout fixture of :mod:`tests.mimic4`; the demo's skip with a reason where ``../shared`` is absent.
"""

from __future__ import annotations

import itertools
import json
import re

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.reporting.findings import LISTED
from schemas.catalogue import CHECKS
from tests import mimic4
from tests.mimic4 import in_mimic4_layout

runner = CliRunner()
# What a message says of rows a dataset of its kind is expected to hold: such rows are a note, never a warning.
EXPECTED = re.compile(r"\b(expected|common in|normal in)\b", re.IGNORECASE)


@pytest.fixture(scope="module", params=["mimic3-demo", "mimic4-demo", "mimic4-fixture"])
def run(request, tmp_path_factory):
    """One default ``validate`` of the dataset: its terminal output (stdout and stderr) and its JSON report."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "mimic4-fixture":
        data = mimic4.dataset().write(root / "data")
    else:
        demo = request.getfixturevalue("mimic3demo")
        data = demo if request.param == "mimic3-demo" else in_mimic4_layout(demo, root / "data")
    result = runner.invoke(app, ["validate", str(data), "--no-cache", "--json", str(root / "report.json")])
    assert result.exit_code == 0, result.output
    return (request.param, result.stdout + result.stderr,
            json.loads((root / "report.json").read_text(encoding="utf-8")))


def test_no_warning_calls_its_rows_expected_and_each_names_what_to_do(run):
    _, _, report = run
    warnings = [f for f in report["findings"] if f["severity"] == "warning"]
    assert not [f["check"] for f in warnings if EXPECTED.search(f["message"])]
    for finding in warnings:  # the catalogue's advice ends every message: a setting to change or a fix
        assert finding["message"].endswith(CHECKS[finding["check"]].advice)


def test_no_rows_are_counted_by_two_findings(run):
    _, _, report = run
    rows = [f for f in report["findings"] if f["lines"]]
    assert rows
    shared = [(a["check"], b["check"]) for a, b in itertools.combinations(rows, 2)
              if a["table"] == b["table"] and set(a["lines"]) & set(b["lines"])]
    assert shared == []
    checks = {f["check"] for f in report["findings"]}
    assert not {"hadm_id_missing", "charttime_outside_stay"} & checks  # counted where the clean and bucket stages act


def test_the_terminal_output_is_short_and_its_lists_are_capped(run):
    name, printed, report = run
    assert len(printed.encode("utf-8")) < 8_000
    assert max(len(line) for line in printed.splitlines()) <= 200
    long = [f for f in report["findings"] if len(f.get("items") or ()) > LISTED]
    assert long or name == "mimic4-fixture"  # the demo's lists are longer than a message shows
    for finding in long:  # the message lists the first few, the JSON every one
        assert "more in the JSON report" in finding["message"]
        assert sum(str(item) in finding["message"] for item in finding["items"]) < len(finding["items"])


def test_fills_count_missing_values_apart_from_values_a_row_has_not_by_construction(run):
    _, _, report = run
    fills = {f["column"]: f for f in report["findings"] if f["check"] in ("filled", "structural_fill")}
    assert {f["check"] for f in fills.values()} == {"structural_fill"}  # every row has its number or its text
    assert "indicator" not in " ".join(f["message"] for f in fills.values())


def test_what_the_input_lacks_is_said_first_and_whole(run):
    """A column the demo lacks and what the run does without it (VALUENUM derived from VALUE, the split by HADM_ID)
    is printed whole right under the tables read, whatever its severity, not as one note's line among twenty."""
    name, printed, report = run
    announced = [f for f in report["findings"] if CHECKS[f["check"]].announce]
    checks = {f["check"] for f in announced}
    assert checks == (set() if name == "mimic4-fixture" else {"valuenum_derived", "split_by_admission"})
    lines = printed.splitlines()
    first = next(n for n, line in enumerate(lines) if not line.startswith("read "))
    heads = [n for n, line in enumerate(lines) if re.match(r"(ERROR|WARNING|NOTE) +\w+/\w+ ", line)]
    assert heads[0] == first
    said = [lines[n].split()[1].split("/")[1] for n in heads]
    assert set(said[:len(announced)]) == checks and not checks & set(said[len(announced):])
    shown = " ".join(" ".join(lines[first:heads[len(announced)]] if len(heads) > len(announced) else lines).split())
    for finding in announced:
        assert " ".join(finding["message"].split()) in shown
