"""Every problem class of the raw checks, end to end through the CLI and its JSON report."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.corpus import CASES, build

runner = CliRunner()


def _run(folder, *extra):
    report = folder.parent / "report.json"
    result = runner.invoke(app, ["validate", str(folder), "--json", str(report), *extra])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_is_reported_with_table_column_and_lines(tmp_path, name):
    expect = build(name, tmp_path / "data")
    result, report = _run(tmp_path / "data")
    assert result.exit_code == expect.exit_code, result.output
    assert report is not None
    if expect.exit_code == 0:
        assert report["status"] in ("ok", "warnings")
        assert all(f["severity"] != "error" for f in report["findings"])
    if expect.check is None:
        return
    matching = [
        f for f in report["findings"]
        if f["check"] == expect.check and f["table"] == expect.table
        and (expect.column is None or f["column"] == expect.column)
    ]
    assert matching, [(f["check"], f["table"], f["column"]) for f in report["findings"]]
    finding = matching[0]
    assert finding["severity"] == expect.severity
    assert set(expect.lines) <= set(finding["lines"]), finding
    assert finding["count"] >= max(1, len(expect.lines))
    assert finding["message"]
    if expect.secret is not None:
        assert expect.secret not in result.output
        assert expect.secret not in json.dumps(report)


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n].__name__ in {
    "text_in_itemid", "text_in_valuenum", "unknown_flag", "two_digit_year"}))
def test_show_values_opts_in_to_raw_samples(tmp_path, name):
    expect = build(name, tmp_path / "data")
    result, report = _run(tmp_path / "data", "--show-values")
    assert expect.secret in result.output
    finding = next(f for f in report["findings"] if f["check"] == expect.check)
    assert any(expect.secret in sample for sample in finding["samples"])


def test_corpus_covers_every_raw_check():
    from schemas.checks import CHECKS

    covered = set()
    for name, make in CASES.items():
        from tests.corpus import Dataset

        covered.add(make(Dataset.sample()).check)
    raw_checks = {check for check, info in CHECKS.items() if info.stage in ("load", "raw")}
    not_covered = raw_checks - covered - {"charttime_outside_stay"}  # the sample's own: tests/test_catalogue.py
    assert not not_covered, f"checks without a broken dataset: {sorted(not_covered)}"
