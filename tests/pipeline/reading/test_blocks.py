"""pipeline/reading/load.py read_blocks: a table read in blocks is exactly the table read whole, in bounded memory."""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import io
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from pipeline import flow
from pipeline.config import load_config
from pipeline.reading.load import read_blocks, read_table
from pipeline.reading.locate import TABLES, locate_tables
from pipeline.reading.parse import check_blocks
from schemas.errors import StageError
from tests.corpus import CASES, build

HEADER = "ROW_ID,SUBJECT_ID,HADM_ID,ITEMID,CHARTTIME,VALUE,VALUENUM,VALUEUOM,FLAG"
WHOLE = 2**30  # one block for any test file
# Blocks small enough to cut every table many times, large enough to keep the corpus quick (a block costs ~2 ms).
TINY = {"ADMISSIONS": 256, "D_LABITEMS": 64, "LABEVENTS": 4096}


def _outcome(path: Path, table: str, block_bytes: int):
    """What reading gives: the frame, hash and problems, or the problem that stopped it."""
    try:
        text = read_table(path, table, block_bytes=block_bytes)
    except StageError as error:
        return ("refused", error.check, error.lines, error.count, str(error))
    problems = [(p.check, p.lines, p.count, str(p)) for p in text.problems]
    return ("read", text.frame, text.sha256, problems)


def _assert_same(tiny, whole) -> None:
    assert tiny[0] == whole[0], (tiny[:1], whole)
    if whole[0] == "read":
        pd.testing.assert_frame_equal(tiny[1], whole[1])
        assert tiny[2:] == whole[2:]
    else:
        assert tiny == whole


def _labevents(tmp_path: Path, body: bytes, name: str = "LABEVENTS.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(body, mtime=0) if name.endswith(".gz") else body)
    return path


def _rows(values: list[str], *, lineterminator: str = "\n") -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=lineterminator)
    writer.writerow(HEADER.split(","))
    for number, value in enumerate(values, start=1):
        writer.writerow([str(number), "5", "100", "50912", "2101-01-01 10:00:00", value, "", "mg/dL", ""])
    return out.getvalue().encode("utf-8")


# -- the same table, whatever the block size -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_corpus_case_reads_in_tiny_blocks_as_in_one(tmp_path, name):
    build(name, tmp_path / "data")
    located, _ = locate_tables(tmp_path / "data")
    for table, path in located.items():
        _assert_same(_outcome(path, table, TINY[table]), _outcome(path, table, WHOLE))


@pytest.mark.parametrize("block_bytes", [64, 1024, 1000, 65_536])
def test_the_sample_reads_in_blocks_as_in_one(sample_dir, block_bytes):
    for table in TABLES:
        path = sample_dir / f"{table}.csv"
        if table == "LABEVENTS" and block_bytes < 1000:
            continue  # 12,000 blocks: the smaller tables show this size
        blocks = list(read_blocks(path, table, block_bytes=block_bytes))
        assert len(blocks) > 1 or path.stat().st_size <= block_bytes
        _assert_same(_outcome(path, table, block_bytes), _outcome(path, table, WHOLE))


def test_the_real_demo_reads_in_blocks_as_in_one(mimic3demo):
    for table in TABLES:
        path = mimic3demo / f"{table}.csv"
        _assert_same(_outcome(path, table, 1 << 16), _outcome(path, table, WHOLE))


def _report(data: Path, block_bytes: int, monkeypatch) -> tuple:
    monkeypatch.setattr(flow, "read_blocks", functools.partial(read_blocks, block_bytes=block_bytes))
    validation = flow.validate(data, load_config(None))
    report = validation.report
    return (validation.exit_code, report.findings, report.inputs, report.attrition)


# Cases whose findings come from reading or the raw checks of LABEVENTS (every case costs two validations).
VALIDATED = ("sample_as_is", "byte_order_mark", "mimic_iv_names_gzip_in_hosp", "quoted_newline_keeps_lines",
             "ragged_row", "unclosed_quote", "undecodable_bytes", "field_of_a_megabyte", "text_in_itemid",
             "text_in_valuenum", "unknown_flag", "no_valuenum_column", "ref_range_text", "two_digit_year",
             "empty_charttime", "result_only_in_comments")


@pytest.mark.parametrize("name", VALIDATED)
def test_validating_in_blocks_gives_the_report_of_one_block(tmp_path, monkeypatch, name):
    build(name, tmp_path / "data")
    tiny = _report(tmp_path / "data", 1 << 16, monkeypatch)  # 12 blocks of LABEVENTS
    whole = _report(tmp_path / "data", WHOLE, monkeypatch)
    assert tiny == whole


def test_validating_the_real_demo_in_blocks_gives_the_report_of_one_block(mimic3demo, monkeypatch):
    assert _report(mimic3demo, 1 << 18, monkeypatch) == _report(mimic3demo, WHOLE, monkeypatch)


def test_checking_blocks_is_checking_the_whole_table(sample_dir):
    path = sample_dir / "LABEVENTS.csv"
    whole = check_blocks("LABEVENTS", [read_table(path, "LABEVENTS").frame])
    blocks = check_blocks("LABEVENTS", read_blocks(path, "LABEVENTS", block_bytes=50_000))
    pd.testing.assert_frame_equal(blocks.tables.labevents, whole.tables.labevents)
    assert blocks.findings == whole.findings


def test_a_gzip_file_gives_the_blocks_of_the_plain_file(tmp_path, sample_dir):
    raw = (sample_dir / "LABEVENTS.csv").read_bytes()
    zipped = _labevents(tmp_path, raw, "LABEVENTS.csv.gz")
    plain = read_blocks(sample_dir / "LABEVENTS.csv", "LABEVENTS", block_bytes=50_000)
    unzipped = read_blocks(zipped, "LABEVENTS", block_bytes=50_000)
    plain_blocks, unzipped_blocks = list(plain), list(unzipped)
    assert len(plain_blocks) == len(unzipped_blocks) > 10
    for one, other in zip(plain_blocks, unzipped_blocks):
        pd.testing.assert_frame_equal(one, other)
    assert plain.sha256 == hashlib.sha256(raw).hexdigest()
    assert unzipped.sha256 == hashlib.sha256(zipped.read_bytes()).hexdigest()
    assert plain.rows == unzipped.rows == 13_041


# -- memory ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["LABEVENTS.csv", "LABEVENTS.csv.gz"])
def test_memory_stays_about_one_block_whatever_the_file_size(tmp_path, sample_dir, name):
    """A 40 MB table in 1 MiB blocks: Python's peak stays a few blocks (reading it whole held all 40 MB)."""
    text = (sample_dir / "LABEVENTS.csv").read_bytes()
    header, body = text.split(b"\n", 1)
    path = tmp_path / name
    with (gzip.open(path, "wb", compresslevel=1) if name.endswith(".gz") else open(path, "wb")) as handle:
        handle.write(header + b"\n")
        for _ in range(50):
            handle.write(body)
    size = len(header) + 1 + 50 * len(body)
    tracemalloc.start()
    try:
        rows = 0
        for block in read_blocks(path, "LABEVENTS", block_bytes=2**20):
            rows += len(block)
            del block
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rows == 50 * 13_041
    assert size > 35 * 2**20 and peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB for {size / 2**20:.0f} MiB of text"


# -- cuts --------------------------------------------------------------------------------------------
def test_a_quoted_newline_across_a_block_boundary_is_never_split(tmp_path):
    values = ["1.0", "first\nsecond", "3.0", "4.0"]
    body = _rows(values)
    inside = body.index(b"first") + 2  # the block's size ends inside the quoted field, before its newline
    path = _labevents(tmp_path, body)
    blocks = list(read_blocks(path, "LABEVENTS", block_bytes=inside))
    assert len(blocks) == 2
    assert blocks[0].index.tolist() == [2, 3] and blocks[0].loc[3, "VALUE"] == "first\nsecond"
    assert blocks[1].index.tolist() == [5, 6]
    _assert_same(_outcome(path, "LABEVENTS", inside), _outcome(path, "LABEVENTS", WHOLE))


def test_a_quoted_field_longer_than_many_blocks_is_read_whole(tmp_path):
    long = "\n".join(f"line {n}" for n in range(200))
    path = _labevents(tmp_path, _rows(["1.0", long, "3.0"]))
    frame = read_table(path, "LABEVENTS", block_bytes=64).frame
    assert frame.index.tolist() == [2, 3, 203] and frame.loc[3, "VALUE"] == long
    _assert_same(_outcome(path, "LABEVENTS", 64), _outcome(path, "LABEVENTS", WHOLE))


def test_a_stray_quote_in_a_plain_field_does_not_split_a_later_quoted_field(tmp_path):
    """Outside RFC 4180: a quote inside an unquoted field is a character, so quote parity misleads the cut;
    a block that ends inside a quote is read again with the next one."""
    body = _rows(["1.0"]) + b'2,5,100,50912,2101-01-01 10:00:00,5\'2",,in,\n' + \
        b'3,5,100,50912,2101-01-01 10:00:00,"a\nb",,u,\n4,5,100,50912,2101-01-01 10:00:00,4.0,,u,\n'
    path = _labevents(tmp_path, body)
    for block_bytes in (1, 32, 64, 100, 170, 200):
        _assert_same(_outcome(path, "LABEVENTS", block_bytes), _outcome(path, "LABEVENTS", WHOLE))
    frame = read_table(path, "LABEVENTS", block_bytes=64).frame
    assert frame.index.tolist() == [2, 3, 4, 6] and frame.loc[4, "VALUE"] == "a\nb"
    # The quoted field last in its row: the block cut inside it has as many rows as lines.
    path.write_bytes(body.replace(b'"a\nb",,u,\n', b'a,,u,"c\nd"\n'))
    for block_bytes in (1, 100, 170):
        _assert_same(_outcome(path, "LABEVENTS", block_bytes), _outcome(path, "LABEVENTS", WHOLE))
    assert read_table(path, "LABEVENTS", block_bytes=170).frame.loc[4, "FLAG"] == "c\nd"


def test_a_quote_that_never_closes_is_named_whatever_the_block_size(tmp_path):
    body = _rows([f"{n}.0" for n in range(40)]).replace(b"\n31,5,100,50912,", b'\n31,5,"100,50912,')
    path = _labevents(tmp_path, body)
    for block_bytes in (64, 1000, WHOLE):
        with pytest.raises(StageError, match="A quote opened at line 32 never closes") as caught:
            read_table(path, "LABEVENTS", block_bytes=block_bytes)
        assert caught.value.check == "malformed_row" and caught.value.lines == [32]


def test_a_quote_still_open_at_the_last_line_is_named(tmp_path):
    """pyarrow reads a quote that never closes as a value when it opens on the last line; the csv module says."""
    for last in (b'"open,1,u,\n', b'2.0,1,u,"open\n'):  # a ragged row then; a row of the header's fields
        path = _labevents(tmp_path, _rows(["1.0"]) + b"2,5,100,50912,2101-01-01 10:00:00," + last)
        for block_bytes in (64, WHOLE):
            with pytest.raises(StageError, match="A quote opened at line 3 never closes"):
                read_table(path, "LABEVENTS", block_bytes=block_bytes)


def test_ragged_rows_in_different_blocks_are_all_named(tmp_path):
    body = _rows([f"{n}.0" for n in range(60)])
    lines = body.split(b"\n")
    lines[5] += b",extra"
    lines[50] = lines[50][:12]
    path = _labevents(tmp_path, b"\n".join(lines))
    for block_bytes in (64, 1000, WHOLE):
        with pytest.raises(StageError) as caught:
            read_table(path, "LABEVENTS", block_bytes=block_bytes)
        assert (caught.value.check, caught.value.lines, caught.value.count) == ("malformed_row", [6, 51], 2)


def test_undecodable_bytes_in_different_blocks_are_all_named(tmp_path):
    lines = _rows([f"{n}.0" for n in range(60)]).split(b"\n")
    lines[4] += b"\xff"
    lines[55] = lines[55].replace(b"mg", b"m\xc3")
    path = _labevents(tmp_path, b"\n".join(lines))
    for block_bytes in (64, 1000, WHOLE):
        with pytest.raises(StageError) as caught:
            read_table(path, "LABEVENTS", block_bytes=block_bytes)
        assert (caught.value.check, caught.value.lines, caught.value.count) == ("encoding", [5, 56], 2)


def test_long_fields_in_different_blocks_are_one_problem(tmp_path):
    values = ["1.0", "x" * 3000, *[f"{n}.0" for n in range(40)], "y" * 3000, "z" * 2000]
    path = _labevents(tmp_path, _rows(values))
    for block_bytes in (64, 1000, WHOLE):
        table = read_table(path, "LABEVENTS", block_bytes=block_bytes, max_field_chars=1000)
        (problem,) = table.problems
        assert (problem.check, problem.lines, problem.count) == ("field_too_long", [3, 44, 45], 3)
        assert "a field of 3,000 characters (0.0 MiB) in VALUE at line 3" in str(problem)
        assert table.rows == len(values) - 3


@pytest.mark.parametrize("ending", ["\r\n", "\r"], ids=["CRLF", "CR"])
def test_crlf_and_cr_line_endings_keep_source_lines_in_blocks(tmp_path, ending):
    body = _rows(["1.0", "two\r\nlines", "3.5", *[f"{n}.0" for n in range(20)]], lineterminator=ending)
    body = body.replace(f"3.5,,mg/dL,{ending}".encode(), f"3.5,,mg/dL,{ending}{ending}".encode())  # a blank line
    path = _labevents(tmp_path, body)
    frame = read_table(path, "LABEVENTS", block_bytes=64).frame
    assert frame.index.tolist()[:4] == [2, 3, 5, 7]
    assert frame.loc[3, "VALUE"] == "two\r\nlines"
    _assert_same(_outcome(path, "LABEVENTS", 64), _outcome(path, "LABEVENTS", WHOLE))


def test_a_byte_order_mark_is_read_past_in_blocks(tmp_path):
    path = _labevents(tmp_path, b"\xef\xbb\xbf" + _rows([f"{n}.0" for n in range(20)]))
    blocks = list(read_blocks(path, "LABEVENTS", block_bytes=64))
    assert len(blocks) > 5 and blocks[0].index[0] == 2 and blocks[0].columns[0] == "HADM_ID"
    _assert_same(_outcome(path, "LABEVENTS", 64), _outcome(path, "LABEVENTS", WHOLE))


def test_a_header_only_file_and_a_blank_file_say_so_in_blocks(tmp_path):
    path = _labevents(tmp_path, HEADER.encode() + b"\n\n")
    with pytest.raises(StageError, match="Only the header line was found"):
        read_table(path, "LABEVENTS", block_bytes=16)
    path.write_bytes(b"\n \r\n" * 100)
    with pytest.raises(StageError) as caught:
        read_table(path, "LABEVENTS", block_bytes=16)
    assert caught.value.check == "file_empty"


def test_blocks_taken_before_a_problem_leave_it_for_the_end(tmp_path):
    """Blocks that read well come out; the problem found later (here bytes that are not UTF-8) is raised once
    the whole file was read, as reading it whole raised it."""
    lines = _rows([f"{n}.0" for n in range(60)]).split(b"\n")
    lines[55] += b"\xff"
    path = _labevents(tmp_path, b"\n".join(lines))
    blocks = read_blocks(path, "LABEVENTS", block_bytes=200)
    taken = []
    with pytest.raises(StageError) as caught:
        for block in blocks:
            taken.append(block)
    assert taken and caught.value.check == "encoding" and caught.value.lines == [56]
    assert blocks.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
