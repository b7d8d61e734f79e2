"""pipeline/reporting/report.py: findings say what was found and what to do, and the report is stable JSON for CI."""

from __future__ import annotations

import json
import os
import stat

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reporting.report import (Finding, InputFile, Report, finding_from_error, finding_from_mask, format_items,
                                       item_names, write_atomic)
from pipeline.reporting.findings import NAME_SHOWN
from schemas.catalogue import CHECKS
from schemas.errors import SAMPLE_CAP, StageError

FINDING_KEYS = {"severity", "stage", "table", "check", "column", "count", "lines", "message"}


def _mask(failed_lines: list[int], lines: range = range(2, 40)) -> pd.Series:
    index = pd.Index(list(lines), name="line")
    return pd.Series(index.isin(failed_lines), index=index)


def _valuenum(lines: range = range(2, 40)) -> pd.Series:
    return pd.Series(["1.5"] * len(lines), index=pd.Index(list(lines), name="line"), dtype="str")


def _finding(check: str, severity: str | None = None, **changes) -> Finding:
    info = CHECKS[check]
    fields = dict(severity=severity or info.severity, stage=info.stage, table="LABEVENTS", check=check,
                  column="VALUENUM", count=1, lines=[2], message=f"LABEVENTS.VALUENUM: 1 row with {info.title}")
    return Finding(**{**fields, **changes})


# -- finding_from_mask ------------------------------------------------------------------------------
def test_no_failures_is_no_finding():
    assert finding_from_mask(stage="raw", table="LABEVENTS", check="valuenum_finite", column="VALUENUM",
                             failed=_mask([])) is None


def test_nullable_mask_counts_only_true():
    failed = pd.Series([True, pd.NA, False], index=pd.Index([5, 6, 7], name="line"), dtype="boolean")
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="hadm_id_missing", column="HADM_ID",
                                failed=failed)
    assert (finding.count, finding.lines) == (1, [5])


def test_finding_from_mask_describes_rows_by_class_with_advice():
    values = _valuenum().copy()
    values.loc[[3, 17, 30]] = ["inf", "-inf", "inf"]
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="valuenum_finite", column="VALUENUM",
                                failed=_mask([3, 17, 30]), values=values)
    info = CHECKS["valuenum_finite"]
    assert (finding.severity, finding.stage, finding.table, finding.check, finding.column) == (
        "error", "raw", "LABEVENTS", "valuenum_finite", "VALUENUM")
    assert (finding.count, finding.lines, finding.samples, finding.default_severity) == (3, [3, 17, 30], None, None)
    assert finding.message == (
        f"LABEVENTS.VALUENUM: 3 rows with {info.title} (lines 3, 17, 30): inf ×2, -inf ×1. {info.advice}"
    )


def test_finding_from_mask_for_one_row_says_line():
    finding = finding_from_mask(stage="raw", table="ADMISSIONS", check="discharge_before_admit", column="DISCHTIME",
                                failed=_mask([9]))
    info = CHECKS["discharge_before_admit"]
    assert finding.message == f"ADMISSIONS.DISCHTIME: 1 row with {info.title} (line 9). {info.advice}"


def test_finding_from_mask_uses_what_and_table_without_column():
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="foreign_key", column=None,
                                failed=_mask([4, 5]), what="ITEMID not in D_LABITEMS")
    assert finding.message.startswith("LABEVENTS: 2 rows with ITEMID not in D_LABITEMS (lines 4, 5). ")
    assert finding.message.endswith(CHECKS["foreign_key"].advice)


def test_finding_from_mask_caps_lines_at_max_lines_but_counts_all():
    failed_lines = list(range(2, 37))
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="valuenum_numeric", column="VALUENUM",
                                failed=_mask(failed_lines), values=_valuenum(), max_lines=4, show_values=True)
    assert finding.count == 35
    assert finding.lines == [2, 3, 4, 5]
    assert "(lines 2, 3, 4, 5 (+31 more))" in finding.message
    assert finding.samples == ["1.5"] * 4


def test_finding_from_mask_default_cap_is_sample_cap():
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="valuenum_numeric", column="VALUENUM",
                                failed=_mask(list(range(2, 40))))
    assert finding.count == 38
    assert finding.lines == list(range(2, 2 + SAMPLE_CAP))


def test_samples_only_with_show_values():
    values = pd.Series(["K+ 4.1", "abc", "1.0"], index=pd.Index([7, 8, 9], name="line"), dtype="str")
    failed = pd.Series([True, True, False], index=values.index)
    kwargs = dict(stage="raw", table="LABEVENTS", check="valuenum_numeric", column="VALUENUM", failed=failed,
                  values=values)
    hidden = finding_from_mask(**kwargs)
    shown = finding_from_mask(**kwargs, show_values=True)
    assert hidden.samples is None and "samples" not in hidden.as_json()
    assert shown.samples == ["K+ 4.1", "abc"] and shown.as_json()["samples"] == ["K+ 4.1", "abc"]
    assert "K+ 4.1" not in hidden.message and "K+ 4.1" not in shown.message
    assert ": non-numeric text, 3 chars ×1, non-numeric text, 6 chars ×1. " in hidden.message


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=20).map(lambda s: "§" + s), min_size=1, max_size=8))
def test_messages_never_carry_values_without_show_values(secrets):
    values = pd.Series(secrets, index=pd.Index(range(2, 2 + len(secrets)), name="line"), dtype="str")
    finding = finding_from_mask(stage="raw", table="LABEVENTS", check="valuenum_numeric", column="VALUENUM",
                                failed=pd.Series(True, index=values.index), values=values)
    text = json.dumps(finding.as_json(), ensure_ascii=False)
    assert finding.samples is None
    assert finding.count == len(secrets)
    for secret in secrets:
        assert secret not in finding.message and secret not in text


def test_finding_from_error_keeps_the_stage_error_message():
    error = StageError(stage="raw", side="output", check="valuenum_finite", column="VALUENUM", count=2,
                       failure_cases=pd.DataFrame({"line": [4, 9]}), table="LABEVENTS", advice="Report a bug")
    finding = finding_from_error(error)
    assert (finding.severity, finding.stage, finding.table, finding.check, finding.column, finding.count,
            finding.lines, finding.message) == ("error", "raw", "LABEVENTS", "valuenum_finite", "VALUENUM", 2,
                                                [4, 9], str(error))
    uncatalogued = StageError(stage="raw", side="output", check="greater_than(0)", column="ITEMID", count=1,
                              failure_cases=pd.DataFrame({"line": [4]}))
    assert finding_from_error(uncatalogued).severity == "error"
    warning = StageError(stage="raw", side="input", check="id_float_format", column="HADM_ID", count=1,
                         failure_cases=pd.DataFrame({"line": [4]}))
    assert finding_from_error(warning).severity == "warning"


# -- the report ---------------------------------------------------------------------------------------
def test_status_and_exit_code():
    assert (Report().status, Report().exit_code) == ("ok", 0)
    warnings = Report(findings=[_finding("id_float_format")])
    assert (warnings.status, warnings.exit_code) == ("warnings", 0)
    errors = Report(findings=[_finding("id_float_format"), _finding("valuenum_finite")])
    assert (errors.status, errors.exit_code) == ("errors", 1)


def test_add_skips_none():
    report = Report()
    report.add([None, _finding("valuenum_finite"), None])
    assert [f.check for f in report.findings] == ["valuenum_finite"]


def test_downgrading_an_error_makes_a_warning_and_says_so():
    original = _finding("valuenum_finite")
    report = Report(findings=[original])
    changed = report.with_severities({"valuenum_finite": "warning"})
    (finding,) = changed.findings
    assert (changed.status, changed.exit_code) == ("warnings", 0)
    assert (finding.severity, finding.default_severity) == ("warning", "error")
    assert finding.message == original.message + " (severity changed from error to warning by config)"
    assert changed.overrides == {"valuenum_finite": "warning"}
    assert changed.as_json()["findings"][0]["default_severity"] == "error"
    # The original report is untouched.
    assert report.findings == [original] and report.status == "errors" and report.overrides == {}


def test_upgrading_a_warning_makes_an_error():
    changed = Report(findings=[_finding("flag_value")]).with_severities({"flag_value": "error"})
    assert changed.status == "errors"
    assert changed.findings[0].default_severity == "warning"


def test_off_drops_the_finding_and_same_level_changes_nothing():
    kept = _finding("id_float_format")
    report = Report(inputs=[InputFile("LABEVENTS", "x.csv", "0" * 64, 3)],
                    findings=[_finding("valuenum_finite"), kept])
    changed = report.with_severities({"valuenum_finite": "off", "id_float_format": "warning"})
    assert changed.findings == [kept]
    assert changed.status == "warnings"
    assert changed.inputs == report.inputs
    assert "default_severity" not in changed.as_json()["findings"][0]


def test_as_json_shape_and_order():
    report = Report(
        inputs=[InputFile("LABEVENTS", "data/LABEVENTS.csv", "ab" * 32, 38)],
        findings=[
            _finding("id_float_format", column="HADM_ID"),
            _finding("valuenum_numeric"),
            _finding("valuenum_finite"),
            _finding("file_empty", table="ADMISSIONS", column=None),
        ],
        overrides={"z_check": "off", "a_check": "warning"},
    )
    record = report.as_json()
    assert list(record) == ["status", "inputs", "findings", "overrides", "attrition"]
    assert record["status"] == "errors"
    assert record["inputs"] == [{"table": "LABEVENTS", "path": "data/LABEVENTS.csv", "sha256": "ab" * 32, "rows": 38}]
    assert [(f["severity"], f["stage"], f["check"]) for f in record["findings"]] == [
        ("error", "load", "file_empty"),
        ("error", "raw", "valuenum_finite"),
        ("error", "raw", "valuenum_numeric"),
        ("warning", "raw", "id_float_format"),
    ]
    assert all(set(f) == FINDING_KEYS for f in record["findings"])
    assert list(record["overrides"]) == ["a_check", "z_check"]
    assert json.loads(json.dumps(record)) == record


def test_write_json_writes_the_report_atomically(tmp_path):
    report = Report(findings=[_finding("valuenum_finite")])
    path = tmp_path / "out" / "nested" / "report.json"
    report.write_json(path)
    assert json.loads(path.read_text(encoding="utf-8")) == report.as_json()
    assert path.read_text(encoding="utf-8").endswith("}\n")
    Report().write_json(path)  # replaces the earlier report
    assert json.loads(path.read_text(encoding="utf-8"))["status"] == "ok"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_write_json_gives_the_report_ordinary_permissions(tmp_path):
    """The umask applies, as for any file the user writes (a private 0600 report would hide it from CI)."""
    plain = tmp_path / "plain.json"
    plain.write_text("{}\n", encoding="utf-8")
    report = tmp_path / "report.json"
    Report().write_json(report)
    assert stat.S_IMODE(os.stat(report).st_mode) == stat.S_IMODE(os.stat(plain).st_mode)


def test_write_atomic_leaves_no_temp_file_when_the_rename_fails(tmp_path):
    target = tmp_path / "report.json"
    target.mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        write_atomic(target, b"{}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    assert target.is_dir() and not any(target.iterdir())


def test_write_atomic_replaces_the_whole_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_bytes(b"x" * 1000)
    write_atomic(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_findings_frame_columns():
    report = Report(findings=[_finding("valuenum_finite"), _finding("id_float_format", lines=[2, 3], count=2)])
    frame = report.findings_frame()
    assert frame.columns.tolist() == ["severity", "stage", "table", "check", "column", "count", "lines", "message"]
    assert frame["check"].tolist() == ["valuenum_finite", "id_float_format"]
    assert frame["lines"].tolist() == [[2], [2, 3]]
    assert Report().findings_frame().columns.tolist() == frame.columns.tolist()
    assert Report().findings_frame().empty


def test_findings_are_frozen():
    finding = _finding("valuenum_finite")
    with pytest.raises(AttributeError):
        finding.severity = "warning"  # type: ignore[misc]


def test_report_path_argument_may_be_text(tmp_path):
    Report().write_json(str(tmp_path / "r.json"))  # type: ignore[arg-type]
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["findings"] == []


# -- naming lab items ----------------------------------------------------------------------------------
def _labitems(**columns) -> pd.DataFrame:
    frame = pd.DataFrame({"ITEMID": pd.array([50963, 51100, 51003, 51003, 7], dtype="Int64"),
                          "FLUID": pd.array(["Blood", "Urine", "Blood", "Blood", None], dtype="str"),
                          "LABEL": pd.array(["NTproBNP", " Sodium,\n  Urine ", "Troponin T", "Troponin I", None],
                                            dtype="str")})
    return frame.assign(**columns)


def test_item_names_are_label_and_fluid_from_the_dictionary():
    assert item_names(_labitems()) == {50963: "NTproBNP (Blood)", 51100: "Sodium, Urine (Urine)"}  # 51003 twice
    assert item_names(_labitems().drop(columns="LABEL")) == {50963: "(Blood)", 51100: "(Urine)"}
    assert item_names(None) == {} and item_names(_labitems().iloc[:0]) == {}


def test_format_items_names_counts_and_caps():
    names = item_names(_labitems())
    assert format_items([50963, 7], names=names) == "50963 NTproBNP (Blood), 7"
    counts = pd.Series([28, 1, 5], index=[50963, 51100, 7])
    assert format_items(counts, names=names) == \
        "50963 NTproBNP (Blood) (28 rows), 7 (5 rows), 51100 Sodium, Urine (Urine) (1 row)"  # the most rows first
    assert format_items(counts, names=names, limit=2, unit="train row") == \
        "50963 NTproBNP (Blood) (28 train rows), 7 (5 train rows) +1 more in the JSON report"
    assert format_items(range(1, 31)) == "1, 2, 3, 4, 5 +25 more in the JSON report"  # LISTED by default
    assert format_items([]) == ""


def test_format_items_shows_the_opening_of_a_long_name_and_its_length():
    """A name (a MEDS code, a label) of a million characters printed whole made a megabyte of terminal; the
    message shows NAME_SHOWN characters of it, the finding's items keep it whole."""
    code = "B" * 1_000_000
    assert format_items(pd.Series([3, 1], index=[code, "A"])) == \
        f"{'B' * NAME_SHOWN}… (1,000,000 characters) (3 rows), A (1 row)"
    label = "L" * (NAME_SHOWN + 1)
    assert format_items([7], names={7: label}) == f"7 {'L' * NAME_SHOWN}… ({NAME_SHOWN + 1} characters)"
    assert format_items(["x" * NAME_SHOWN]) == "x" * NAME_SHOWN  # at the bound: whole


def test_a_report_path_that_is_a_link_or_a_fifo_is_written_through_never_replaced(tmp_path):
    """--json, --junit and --html write beside the target and rename: a link became a file, a device or FIFO (as
    root, /dev/stdout itself) was replaced."""
    import threading

    from pipeline.reporting.report import write_atomic

    target = tmp_path / "reports" / "report.json"
    target.parent.mkdir()
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_atomic(link, b'{"status": "ok"}\n')
    assert link.is_symlink() and target.read_bytes() == b'{"status": "ok"}\n'

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, b"through the pipe\n")
    reader.join(timeout=10)
    assert got == [b"through the pipe\n"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "pipe", "reports"]  # no temp file left
