"""pipeline/load.py: finding the tables, reading them as text, and keeping each row's source line."""

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
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.flow import validate

from pipeline.load import TABLES, candidate_names, load_text_tables, locate_table, read_table
from schemas.errors import StageError

ROOT = Path(__file__).resolve().parents[2]
HEADER = "ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM,VALUEUOM,FLAG"


def _labevents(tmp_path, body: str, name="LABEVENTS.csv", **bounds):
    path = tmp_path / name
    path.write_bytes(body.encode("utf-8"))
    return read_table(path, "LABEVENTS", **bounds)


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


def test_quoted_newlines_keep_source_lines(tmp_path):
    body = (f"{HEADER}\n"
            "1,5,100,50912,2101-01-01 10:00:00,\"two\nlines\",1.0,mg/dL,\n"
            "2,5,100,50912,2101-01-01 11:00:00,2.0,2.0,mg/dL,\n")
    frame = _labevents(tmp_path, body).frame
    assert frame.index.tolist() == [2, 4]
    assert frame.loc[2, "VALUE"] == "two\nlines"
    assert frame.loc[4, "VALUENUM"] == "2.0"


def test_blank_lines_and_crlf_keep_source_lines(tmp_path):
    body = (f"{HEADER}\r\n"
            "1,5,100,50912,2101-01-01 10:00:00,1.0,1.0,mg/dL,\r\n"
            "\r\n"
            "2,5,100,50912,2101-01-01 11:00:00,2.0,2.0,mg/dL,abnormal\r\n\r\n")
    frame = _labevents(tmp_path, body).frame
    assert frame.index.tolist() == [2, 4]
    assert frame["FLAG"].tolist()[1] == "abnormal"
    assert pd.isna(frame["FLAG"].tolist()[0])


@settings(max_examples=40)
@given(st.lists(st.tuples(st.text(alphabet="ab,\"\n x1", max_size=6), st.booleans()), min_size=1, max_size=15))
def test_any_quoting_gives_the_line_where_each_row_starts(tmp_path_factory, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER.split(","))
    expected, line = [], 2
    for value, flagged in rows:
        record = ["1", "5", "100", "50912", "2101-01-01 10:00:00", value, "1", "u", "delta" if flagged else ""]
        writer.writerow(record)
        expected.append(line)
        line += out.getvalue().count("\n") - (line - 1)
    folder = tmp_path_factory.mktemp("q")
    frame = _labevents(folder, out.getvalue()).frame
    assert frame.index.tolist() == expected
    assert frame["VALUE"].fillna("").tolist() == [value for value, _ in rows]


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


def test_gzip_tables_read_like_plain_ones(tmp_path, sample_dir):
    raw = (sample_dir / "D_LABITEMS.csv").read_bytes()
    (tmp_path / "D_LABITEMS.csv.gz").write_bytes(gzip.compress(raw, mtime=0))
    plain = read_table(sample_dir / "D_LABITEMS.csv", "D_LABITEMS")
    zipped = read_table(tmp_path / "D_LABITEMS.csv.gz", "D_LABITEMS")
    pd.testing.assert_frame_equal(plain.frame, zipped.frame)


def test_missing_column_lists_expected_and_found(tmp_path):
    path = tmp_path / "D_LABITEMS.csv"
    path.write_text("ROW_ID,ITEMID,LABEL,FLUID\n1,50912,Creatinine,Blood\n")
    with pytest.raises(StageError) as raised:
        read_table(path, "D_LABITEMS")
    message = str(raised.value)
    assert raised.value.check == "missing_column" and raised.value.column == "CATEGORY"
    assert "Expected ITEMID, FLUID, CATEGORY" in message and "found ROW_ID, ITEMID, LABEL, FLUID" in message


def test_semicolon_delimiter_is_named_in_the_hint(tmp_path):
    path = tmp_path / "D_LABITEMS.csv"
    path.write_text("ROW_ID;ITEMID;LABEL;FLUID;CATEGORY\n1;50912;Creatinine;Blood;Chemistry\n")
    with pytest.raises(StageError, match="delimited by another character"):
        read_table(path, "D_LABITEMS")


def test_header_values_that_are_not_identifiers_are_not_echoed(tmp_path):
    path = tmp_path / "D_LABITEMS.csv"
    path.write_text("50912,Creatinine level 1.3 mg/dL,Blood\n1,2,3\n")
    with pytest.raises(StageError) as raised:
        read_table(path, "D_LABITEMS")
    assert "1.3" not in str(raised.value)


def test_undecodable_bytes_name_their_lines(tmp_path, sample_dir):
    lines = (sample_dir / "D_LABITEMS.csv").read_bytes().split(b"\n")
    lines[4] += b"\xff"
    lines[9] += b"\xc3"
    path = tmp_path / "D_LABITEMS.csv"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(StageError) as raised:
        read_table(path, "D_LABITEMS")
    assert raised.value.check == "encoding"
    assert raised.value.lines == [5, 10]


def test_undecodable_bytes_in_a_read_column_name_their_line(tmp_path):
    body = (f"{HEADER}\n"
            "1,5,100,50912,2101-01-01 10:00:00,1.0,1.0,mg/dL,\n").encode() + \
        b"2,5,100,50912,2101-01-01 11:00:00,caf\xe9,2.0,mg/dL,\n"
    path = tmp_path / "LABEVENTS.csv"
    path.write_bytes(body)
    with pytest.raises(StageError) as raised:
        read_table(path, "LABEVENTS")
    assert (raised.value.check, raised.value.lines) == ("encoding", [3])


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
        "from pipeline.load import read_table\n"
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


def _rows(values: list[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER.split(","))
    for number, value in enumerate(values, start=1):
        writer.writerow([str(number), "5", "100", "50912", "2101-01-01 10:00:00", value, "", "mg/dL", ""])
    return out.getvalue()


@pytest.mark.parametrize("quoted_newline", [False, True], ids=["one line a row", "a quoted newline elsewhere"])
def test_a_50_mb_field_is_reported_as_such_and_the_rest_is_read(tmp_path, quoted_newline):
    """A row beyond pyarrow's block (16 MiB) or a field beyond the csv module's limit (131,072 characters)
    was reported as 'a quote ... never closes' and the whole table rejected."""
    long = "x" * (50 * 2**20)
    values = ["1.0", "two\nlines" if quoted_newline else "2.0", "3.0", long, "5.0"]
    table = _labevents(tmp_path, _rows(values))

    shift = 1 if quoted_newline else 0
    assert table.frame.index.tolist() == [2, 3, 4 + shift, 6 + shift]
    assert table.frame["VALUE"].tolist()[-1] == "5.0"
    (problem,) = table.problems
    assert problem.check == "field_too_long" and problem.column == "VALUE" and problem.lines == [5 + shift]
    assert f"a field of {len(long):,} characters (50.0 MiB) in VALUE at line {5 + shift}" in str(problem)
    assert "never closes" not in str(problem)


def test_a_table_whose_every_row_is_too_long_was_not_read(tmp_path):
    """Not a field_too_long finding that a lowered severity could pass as 'warnings': no table was read."""
    with pytest.raises(StageError) as caught:
        _labevents(tmp_path, _rows(["x" * 200_000, "y" * 300_000]), max_field_chars=100_000)
    assert caught.value.check == "table_empty" and "Every row was left out" in str(caught.value)
    assert "field longer than [load] max_field_chars (100,000 characters)" in str(caught.value)


def test_fields_longer_than_the_csv_modules_limit_are_read_when_rows_span_lines(tmp_path):
    values = ["two\nlines", "y" * 200_000, "3.0"]
    table = _labevents(tmp_path, _rows(values))
    assert table.frame.index.tolist() == [2, 4, 5] and not table.problems
    assert table.frame.loc[4, "VALUE"] == values[1]


def test_a_quote_that_never_closes_is_still_named_after_a_long_row(tmp_path):
    body = _rows(["1.0", "z" * (20 * 2**20), "3.0"]) + '6,5,100,50912,2101-01-01 10:00:00,"open,1,u,\n7,5\n'
    with pytest.raises(StageError, match="A quote opened at line 5 never closes") as caught:
        _labevents(tmp_path, body)
    assert caught.value.check == "malformed_row"


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
