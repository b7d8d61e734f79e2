"""pipeline/reading/locate.py: finding the tables by name (MIMIC-III or MIMIC-IV naming, any case), the near name
suggested for a missing one, and what is refused: a name that is not a regular file, two files for one table."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.flow import validate
from pipeline.reading.locate import candidate_names, locate_table
from schemas.errors import StageError

ROOT = Path(__file__).resolve().parents[3]


def test_locate_accepts_mimic_iv_names_in_hosp(tmp_path):
    (tmp_path / "hosp").mkdir()
    (tmp_path / "hosp" / "labevents.csv.gz").write_bytes(gzip.compress(b"x"))
    assert locate_table(tmp_path, "LABEVENTS") == tmp_path / "hosp" / "labevents.csv.gz"


def test_locate_matches_case_insensitively(tmp_path):
    (tmp_path / "Admissions.CSV").write_text("x")
    assert locate_table(tmp_path, "ADMISSIONS").name == "Admissions.CSV"


def test_missing_table_names_every_file_tried(tmp_path):
    with pytest.raises(StageError) as raised:
        locate_table(tmp_path, "D_LABITEMS")
    error = raised.value
    assert (error.stage, error.check, error.table) == ("load", "file_missing", "D_LABITEMS")
    for name in candidate_names("D_LABITEMS"):
        assert name in str(error)


@pytest.mark.parametrize("present, table, suggested, target", [
    ("Admission.csv", "ADMISSIONS", "'Admission.csv'", "Rename it to ADMISSIONS.csv."),
    ("admissions.gz", "ADMISSIONS", "'admissions.gz'", "Rename it to ADMISSIONS.csv.gz."),
    ("labevents.tsv", "LABEVENTS", "'labevents.tsv'", "Rename it to LABEVENTS.csv."),
    ("mimic3/ADMISSIONS.csv.gz", "ADMISSIONS", "'mimic3/ADMISSIONS.csv.gz'", "Move it to DATA_DIR as ADMISSIONS.csv.gz"),
])
def test_missing_table_suggests_a_near_name(tmp_path, present, table, suggested, target):
    (tmp_path / present).parent.mkdir(exist_ok=True)
    (tmp_path / present).write_text("x")
    if table != "LABEVENTS":
        (tmp_path / "LABEVENTS.csv").write_text("x")  # another table's file is never suggested
    with pytest.raises(StageError) as raised:
        locate_table(tmp_path, table)
    message = str(raised.value)
    assert f"Did you mean {suggested}? {target}" in message
    assert message.startswith(f"[load:input] {table} file_missing: table file not found in {tmp_path}.")
    assert "failed on" not in message and "row" not in message  # a missing file has no rows


def test_no_near_name_is_suggested_for_other_tables_or_far_names(tmp_path):
    """D_ITEMS and CHARTEVENTS are tables of their own in a full MIMIC-III folder, not misspellings."""
    for name in ("D_ITEMS.csv", "CHARTEVENTS.csv", "PATIENTS.csv", "notes.txt", "ADMISSIONS.csv"):
        (tmp_path / name).write_text("x")
    for table in ("D_LABITEMS", "LABEVENTS"):
        with pytest.raises(StageError) as raised:
            locate_table(tmp_path, table)
        assert "Did you mean" not in str(raised.value)


def _sample_copy(tmp_path, sample_dir):
    data = tmp_path / "data"
    shutil.copytree(sample_dir, data, ignore=shutil.ignore_patterns("*.py", "*.png", "__pycache__"))
    return data


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dangling"])
def test_a_table_name_that_is_not_a_regular_file_says_so_and_never_blocks(tmp_path, sample_dir, kind):
    data = _sample_copy(tmp_path, sample_dir)
    path = data / "LABEVENTS.csv"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        expected = "It is not a regular file but a FIFO (named pipe)"
    elif kind == "dev-zero":
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero on this machine")
        path.symlink_to("/dev/zero")
        expected = "It is not a regular file but a character device (a link to /dev/zero)"
    else:
        path.symlink_to(tmp_path / "gone.csv")
        expected = "It is not a regular file: a link to nothing"
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", str(data), "--no-cache", "-q",
                           "--json", str(report)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})

    assert done.returncode == 2, done.stdout + done.stderr
    (finding,) = [f for f in json.loads(report.read_text())["findings"] if f["table"] == "LABEVENTS"]
    assert finding["check"] == "file_unreadable" and expected in finding["message"]
    assert "not found" not in finding["message"]


@pytest.mark.parametrize("other", ["hosp/labevents.csv.gz", "labevents.csv", "LABEVENTS.csv.gz"])
def test_two_files_for_one_table_are_a_warning_naming_both(tmp_path, sample_dir, other):
    data = _sample_copy(tmp_path, sample_dir)
    plain = validate(data, load_config(None))
    text = (data / "LABEVENTS.csv").read_bytes()
    (data / other).parent.mkdir(exist_ok=True)
    (data / other).write_bytes(gzip.compress(text, mtime=0) if other.endswith(".gz") else text)
    if other == "labevents.csv" and len(list(data.iterdir())) < 4:
        pytest.skip("this file system ignores case: labevents.csv is LABEVENTS.csv")

    both = validate(data, load_config(None))

    ambiguous = [f for f in both.report.findings if f.check == "file_ambiguous"]
    assert len(ambiguous) == 1 and ambiguous[0].severity == "warning" and ambiguous[0].table == "LABEVENTS"
    assert f"Read {str(data / 'LABEVENTS.csv')!r}; also found, not read: {str(data / other)!r}" \
        in ambiguous[0].message
    assert both.exit_code == plain.exit_code == 0
    rest = [f for f in both.report.findings if f.check != "file_ambiguous"]
    assert rest == plain.report.findings
