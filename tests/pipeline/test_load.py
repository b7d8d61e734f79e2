"""pipeline/load.py: finding the tables, reading them as text, and keeping each row's source line."""

from __future__ import annotations

import csv
import gzip
import io

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.load import TABLES, candidate_names, load_text_tables, locate_table, read_table
from schemas.errors import StageError

HEADER = "ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM,VALUEUOM,FLAG"


def _labevents(tmp_path, body: str, name="LABEVENTS.csv"):
    path = tmp_path / name
    path.write_bytes(body.encode("utf-8"))
    return read_table(path, "LABEVENTS")


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
