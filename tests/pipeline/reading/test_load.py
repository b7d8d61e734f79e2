"""pipeline/reading/load.py: reading the tables as text (plain or gzip, within the bounds), hashing them, and keeping
each row's source line."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.flow import validate

from pipeline.reading.decode import near_columns
from pipeline.reading.load import load_text_tables, read_table
from pipeline.reading.locate import TABLES, locate_table
from schemas.errors import StageError
from tests import mimic4
from tests.corpus import Dataset

ROOT = Path(__file__).resolve().parents[3]


def test_sample_reads_needed_columns_as_text_with_lines(sample_dir):
    table = read_table(locate_table(sample_dir, "LABEVENTS"), "LABEVENTS")
    frame = table.frame
    assert list(frame.columns) == ["HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "FLAG", "SUBJECT_ID", "VALUENUM"]
    assert all(str(dtype) == "str" for dtype in frame.dtypes)
    assert frame.index.name == "line"
    assert frame.index[0] == 2 and frame.index[-1] == table.rows + 1
    assert len(table.sha256) == 64


def test_reading_is_deterministic(sample_dir):
    first = read_table(sample_dir / "LABEVENTS.csv", "LABEVENTS")
    second = read_table(sample_dir / "LABEVENTS.csv", "LABEVENTS")
    pd.testing.assert_frame_equal(first.frame, second.frame)
    assert first.sha256 == second.sha256


def test_gzip_tables_read_like_plain_ones(tmp_path, sample_dir):
    raw = (sample_dir / "D_LABITEMS.csv").read_bytes()
    (tmp_path / "D_LABITEMS.csv.gz").write_bytes(gzip.compress(raw, mtime=0))
    plain = read_table(sample_dir / "D_LABITEMS.csv", "D_LABITEMS")
    zipped = read_table(tmp_path / "D_LABITEMS.csv.gz", "D_LABITEMS")
    pd.testing.assert_frame_equal(plain.frame, zipped.frame)


@pytest.mark.parametrize("body", [b"", b"\n\r\n", b"\xef\xbb\xbf \t\n"])
def test_a_file_of_only_blanks_and_a_byte_order_mark_is_empty(tmp_path, body):
    path = tmp_path / "D_LABITEMS.csv"
    path.write_bytes(body)
    with pytest.raises(StageError) as raised:
        read_table(path, "D_LABITEMS")
    assert raised.value.check == "file_empty"


def test_load_text_tables_collects_every_file_problem(tmp_path, sample_dir):
    (tmp_path / "ADMISSIONS.csv").write_bytes(b"")
    (tmp_path / "LABEVENTS.csv").write_bytes((sample_dir / "LABEVENTS.csv").read_bytes())
    tables, problems = load_text_tables(tmp_path)
    assert list(tables) == ["LABEVENTS"]
    assert sorted((p.table, p.check) for p in problems) == [("ADMISSIONS", "file_empty"),
                                                          ("D_LABITEMS", "file_missing")]
    assert set(TABLES) == {"ADMISSIONS", "D_LABITEMS", "LABEVENTS"}


# -- hostile or huge input -----------------------------------------------------------------------
def _nul_bomb(path, gib: float = 1.0) -> int:
    """A valid .gz of ``gib`` GiB of NUL bytes, ~1 MB on disk: one 16 MiB member written many times (gzip
    allows members end to end), so it is made in milliseconds."""
    member = gzip.compress(bytes(1 << 24), compresslevel=9, mtime=0)
    with open(path, "wb") as handle:
        for _ in range(int(gib * 64)):
            handle.write(member)
    return path.stat().st_size


def test_a_gzip_bomb_is_refused_early_and_memory_stays_bounded(tmp_path):
    """1 GiB of NULs in ~1 MB: refused at the ratio bound, long before it is held whole (peak RSS measured
    in a fresh process; the whole text alone would be 1 GiB). The peak is VmHWM, the new process's own:
    getrusage's ru_maxrss keeps the peak of the (pytest) process it was forked from."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status (VmHWM) to measure peak memory with")
    bomb = tmp_path / "LABEVENTS.csv.gz"
    size = _nul_bomb(bomb)
    probe = (
        "import json, re, sys\n"
        "from pipeline.reading.load import read_table\n"
        "from schemas.errors import StageError\n"
        "try:\n"
        "    read_table(sys.argv[1], 'LABEVENTS')\n"
        "    check, detail = None, ''\n"
        "except StageError as error:\n"
        "    check, detail = error.check, str(error)\n"
        "peak = re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
        "print(json.dumps({'check': check, 'detail': detail, 'rss': int(peak) * 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(bomb)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["check"] == "decompression_bound"
    assert f"over 100 times its {size:,} bytes ([load] max_expansion_ratio)" in result["detail"]
    assert result["rss"] < 600 * 2**20, f"peak RSS {result['rss'] / 2**20:.0f} MiB"


def test_the_expanded_size_bound_refuses_a_real_table_and_exits_2(tmp_path, sample_dir):
    data = tmp_path / "data"
    shutil.copytree(sample_dir, data, ignore=shutil.ignore_patterns("*.py", "*.png", "__pycache__"))
    text = (data / "LABEVENTS.csv").read_bytes()
    (data / "LABEVENTS.csv").unlink()
    (data / "LABEVENTS.csv.gz").write_bytes(gzip.compress(text, mtime=0))
    config = tmp_path / "small.toml"
    config.write_text(f"[load]\nmax_expanded_bytes = {len(text) - 1}\n")

    refused = CliRunner().invoke(app, ["validate", str(data), "--no-cache", "--config", str(config)])
    read = CliRunner().invoke(app, ["validate", str(data), "--no-cache"])

    assert refused.exit_code == 2, refused.output
    assert "load/decompression_bound LABEVENTS" in refused.output
    assert "over [load] max_expanded_bytes" in refused.output
    assert read.exit_code == 0, read.output


def test_gzip_tables_are_hashed_as_their_compressed_bytes(tmp_path, sample_dir):
    raw = (sample_dir / "D_LABITEMS.csv").read_bytes()
    path = tmp_path / "D_LABITEMS.csv.gz"
    path.write_bytes(gzip.compress(raw, mtime=0))
    assert read_table(path, "D_LABITEMS").sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_long_field_is_a_finding_of_the_run_and_the_other_rows_are_checked(tmp_path, sample_dir):
    data = tmp_path / "data"
    shutil.copytree(sample_dir, data, ignore=shutil.ignore_patterns("*.py", "*.png", "__pycache__"))
    path = data / "LABEVENTS.csv"
    rows = list(csv.reader(io.StringIO(path.read_text())))
    rows[5][rows[0].index("VALUE")] = "x" * (2 * 2**20)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())

    validation = validate(data, load_config(None))

    found = [f for f in validation.report.findings if f.check == "field_too_long"]
    assert len(found) == 1 and found[0].lines == [6] and found[0].severity == "error"
    assert validation.exit_code == 1
    assert validation.report.attrition["LABEVENTS"]["read"] == len(rows) - 2  # all but the header and line 6


# -- a header near an expected column -------------------------------------------------------------------------
def _layout(name: str) -> Dataset:
    """The sample in MIMIC-III's layout (upper-case headers), or the MIMIC-IV-shaped fixture (``hosp/``, lower-case)."""
    return Dataset.sample() if name == "mimic3" else mimic4.dataset()


@pytest.mark.parametrize("layout", ["mimic3", "mimic4"])
@pytest.mark.parametrize(("expected", "written", "exit_code"), [
    ("VALUENUM", "value_num", 0), ("CHARTTIME", "chart_time", 1), ("HADM_ID", "hadmid", 1)])
def test_a_header_one_edit_from_an_expected_column_is_a_warning_naming_both_before_any_derivation(
        tmp_path, layout, expected, written, exit_code):
    """VALUENUM written ``value_num`` is not read: the warning names both, first under the tables read, and says
    what the run does without it (derive VALUENUM from VALUE, or stop the table: CHARTTIME and HADM_ID are
    required)."""
    data = _layout(layout)
    header = data.header["LABEVENTS"]
    header[[name.upper() for name in header].index(expected)] = written
    folder = data.write(tmp_path / "data")
    result = CliRunner().invoke(app, ["validate", str(folder), "--no-cache", "--json", str(tmp_path / "r.json")])
    assert result.exit_code == exit_code, result.output
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    (near,) = [f for f in findings if f["check"] == "header_near_column"]
    assert (near["severity"], near["table"], near["column"], near["lines"]) == ("warning", "LABEVENTS", expected, [1])
    assert f"The header has {written!r} and no {expected}: {written!r} is not read" in near["message"]
    lines = result.stdout.splitlines()
    after_reading = next(n for n, line in enumerate(lines) if not line.startswith("read "))
    assert lines[after_reading].startswith(f"WARNING load/header_near_column LABEVENTS.{expected} (1)")
    if expected == "VALUENUM":
        (derived,) = [f for f in findings if f["check"] == "valuenum_derived"]
        assert "VALUENUM is derived from VALUE" in near["message"]
        assert findings.index(near) < findings.index(derived)
        shown = next(n for n, line in enumerate(lines) if "raw/valuenum_derived" in line)
        assert after_reading < shown < next(n for n, line in enumerate(lines) if line.startswith("WARNING clean/"))
    else:
        assert [f["column"] for f in findings if f["check"] == "missing_column"] == [expected]
        assert "without it the table is not read (missing_column)" in near["message"]


def test_headers_as_mimic_and_badpoints_write_them_are_near_no_expected_column(tmp_path):
    """No false alarm on the headers of MIMIC-III, MIMIC-IV and the sample (VALUEUOM is two edits from VALUENUM,
    DEATHTIME three from DISCHTIME, EDOUTTIME from EDREGTIME), nor on the tables that lack an optional column."""
    for data in (Dataset.sample(), mimic4.dataset()):
        for table, header in data.header.items():
            assert near_columns(header, tmp_path, table) == [], (table, header)
    demo = {"ADMISSIONS": "HADM_ID,ADMITTIME,DISCHTIME,DEATHTIME,ADMISSION_TYPE,ADMISSION_LOCATION,"
                          "DISCHARGE_LOCATION,INSURANCE,LANGUAGE,RELIGION,MARITAL_STATUS,ETHNICITY,DIAGNOSIS,"
                          "EDOUTTIME,HOSPITAL_EXPIRE_FLAG,HAS_CHARTEVENTS_DATA,ROW_ID",
            "D_LABITEMS": "row_id,itemid,label,fluid,category,loinc_code",
            "LABEVENTS": "HADM_ID,ITEMID,CHARTTIME,VALUE,VALUEUOM,FLAG"}
    for table, header in demo.items():
        assert near_columns(header.split(","), tmp_path, table) == [], table
    assert near_columns(["value_num"], tmp_path, "labevents.csv") == []  # a table of another kind: no expectation


def test_load_text_tables_keeps_the_header_warning_beside_the_error_that_stopped_the_table(tmp_path):
    data = Dataset.sample()
    header = data.header["LABEVENTS"]
    header[header.index("CHARTTIME")] = "CHART_TIME"
    tables, problems = load_text_tables(data.write(tmp_path / "data"))
    assert "LABEVENTS" not in tables
    assert [(p.check, p.column) for p in problems if p.table == "LABEVENTS"] == [
        ("missing_column", "CHARTTIME"), ("header_near_column", "CHARTTIME")]
