"""Every problem class of the raw checks, end to end through the CLI and its JSON report."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from schemas.catalogue import OFF
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
    from schemas.catalogue import CHECKS

    covered = set()
    for name, make in CASES.items():
        from tests.corpus import Dataset

        covered.add(make(Dataset.sample()).check)
    raw_checks = {check for check, info in CHECKS.items() if info.stage in ("load", "raw")}
    # Off by default (a case runs the default config): the sample's own, fired under [severity] below and in
    # tests/test_catalogue.py
    off = {check for check in raw_checks if CHECKS[check].severity == OFF}
    not_covered = raw_checks - covered - off
    assert not not_covered, f"checks without a broken dataset: {sorted(not_covered)}"


def test_a_check_off_by_default_is_reported_only_when_the_config_turns_it_on(tmp_path):
    """The sample's outpatient rows: counted once by default (clean's quarantine_outpatient); [severity] turns
    hadm_id_missing on, at the level it names, with its lines."""
    expect = build("sample_as_is", tmp_path / "data")
    _, report = _run(tmp_path / "data")
    assert "hadm_id_missing" not in {f["check"] for f in report["findings"]}
    outpatient = next(f for f in report["findings"] if f["check"] == "quarantine_outpatient")
    config = tmp_path / "badpoints.toml"
    config.write_text('[severity]\nhadm_id_missing = "warning"\n')
    result, report = _run(tmp_path / "data", "--config", str(config))
    assert result.exit_code == 0 and report["status"] == "warnings"
    (finding,) = [f for f in report["findings"] if f["check"] == "hadm_id_missing"]
    assert (finding["table"], finding["column"], finding["severity"], finding["default_severity"]) == (
        "LABEVENTS", "HADM_ID", "warning", OFF)
    assert finding["count"] == outpatient["count"] and set(expect.lines) <= set(finding["lines"])
    assert finding["message"].endswith("(severity changed from off to warning by config)")
