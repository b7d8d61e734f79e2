"""pipeline/reporting/junit.py: JUnit XML with one test case per check, failures carrying the findings' messages."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.reporting.junit import junit_xml
from pipeline.reporting.report import Finding, Report
from schemas.catalogue import CHECKS
from tests.corpus import CANARY
from tests.corpus import build as build_case

runner = CliRunner()


def cases_of(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name"): case for case in root.iter("testcase")}


def failing(root: ET.Element) -> set[str]:
    return {case.get("name") for case in root.iter("testcase") if case.find("failure") is not None}


def run_junit(tmp_path, *args: str) -> tuple[int, ET.Element, bytes]:
    path = tmp_path / "junit.xml"
    result = runner.invoke(app, [*args, "--junit", str(path), "--quiet"])
    assert "Traceback" not in result.output
    data = path.read_bytes()
    return result.exit_code, ET.fromstring(data), data


def test_sample_has_one_case_per_check_and_no_failure(tmp_path, sample_dir):
    code, root, _ = run_junit(tmp_path, "validate", str(sample_dir))
    assert code == 0
    cases = cases_of(root)
    assert set(cases) == set(CHECKS)
    assert all(cases[check].get("classname") == info.stage for check, info in CHECKS.items())
    assert failing(root) == set()
    assert root.get("tests") == str(len(CHECKS)) and root.get("failures") == "0"
    assert "mixed_item_text" in cases["mixed_item_text"].findtext("system-out")  # warnings shown, not failed
    assert "WARNING clean/mixed_item_text" in cases["mixed_item_text"].findtext("system-out")
    suites = root.findall("testsuite")
    assert sum(int(s.get("tests")) for s in suites) == len(CHECKS)


@pytest.mark.parametrize("case", ["inf_valuenum", "text_in_itemid", "duplicate_admission", "missing_file"])
def test_broken_dataset_lists_the_failing_checks(tmp_path, case):
    expect = build_case(case, tmp_path / "data")
    code, root, data = run_junit(tmp_path, "validate", str(tmp_path / "data"))
    assert code == expect.exit_code
    assert expect.check in failing(root)
    failure = cases_of(root)[expect.check].find("failure")
    assert failure.get("type") == expect.check and failure.get("message")
    for line in expect.lines:
        assert str(line) in failure.text
    assert int(root.get("failures")) == len(failing(root)) >= 1
    assert CANARY.encode() not in data and (expect.secret is None or expect.secret.encode() not in data)


def test_off_checks_are_skipped(tmp_path, sample_dir):
    config = tmp_path / "quiet.toml"
    config.write_text('[severity]\nmixed_item_text = "off"\ncharttime_outside_stay = "info"\n')
    code, root, _ = run_junit(tmp_path, "validate", str(sample_dir), "--config", str(config))
    assert code == 0
    skipped = sorted(c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None)
    # hadm_id_missing is off by default; charttime_outside_stay, off by default, is turned on
    assert skipped == ["hadm_id_missing", "mixed_item_text"] and root.get("skipped") == "2"


def test_characters_xml_cannot_carry_are_escaped():
    finding = Finding(severity="error", stage="raw", table="D_LABITEMS", check="id_positive_integer",
                      column="ITEMID", count=1, lines=[5], message="bad <id> & more", samples=["509\x0012"])
    data = junit_xml(Report(findings=[finding]))
    root = ET.fromstring(data)  # parses: the NUL byte is written as \x00
    failure = cases_of(root)["id_positive_integer"].find("failure")
    assert "bad <id> & more" in failure.text and "\\x00" in failure.text
    assert data.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
