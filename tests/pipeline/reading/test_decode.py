"""pipeline/reading/decode.py: a raw table's text into rows, read through ``pipeline.reading.load.read_table``: each row's source
line, the header and its columns, undecodable bytes, quotes that never close and fields too long."""

from __future__ import annotations

import csv
import io

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reading.load import read_table
from schemas.errors import StageError

HEADER = "ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM,VALUEUOM,FLAG"


def _labevents(tmp_path, body: str, name="LABEVENTS.csv", **bounds):
    path = tmp_path / name
    path.write_bytes(body.encode("utf-8"))
    return read_table(path, "LABEVENTS", **bounds)


def _rows(values: list[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER.split(","))
    for number, value in enumerate(values, start=1):
        writer.writerow([str(number), "5", "100", "50912", "2101-01-01 10:00:00", value, "", "mg/dL", ""])
    return out.getvalue()


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
