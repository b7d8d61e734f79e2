"""Broken raw datasets made from data/sample, one per problem class, each with what badpoints must say.

Every case starts from a copy of the sample tables, changes as little as
possible, and returns an :class:`Expect`: the exit code and the finding
(table, check, column, lines) that the JSON report must hold. ``secret`` is a
planted raw value that must not appear in any output unless ``--show-values``.
Every case also plants :data:`CANARY` in its data: as the broken value itself
where the problem allows text, else in a field of the broken row (LABEVENTS
VALUE of a numeric row, ADMISSIONS DIAGNOSIS, D_LABITEMS LABEL: dictionary metadata that findings may show
to name an item, so only in an item that is rejected or never read) or, where the
broken table has no rows, in another table (``tests/test_canary.py`` checks
that neither ever reaches an output).
Nothing here is hand-pasted: each broken file is derived from the sample.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
TABLES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
CANARY = "CANARY7319"


@dataclass(frozen=True)
class Expect:
    exit_code: int
    check: str | None = None
    table: str | None = None
    column: str | None = None
    lines: tuple[int, ...] = ()
    severity: str = "error"
    secret: str | None = None


@dataclass
class Dataset:
    """The sample's tables as header + rows of text, to be changed and written somewhere."""

    header: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, list[list[str]]] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)  # replaces a table's bytes entirely
    names: dict[str, str] = field(default_factory=dict)  # file name per table
    missing: set[str] = field(default_factory=set)
    copies: dict[str, str] = field(default_factory=dict)  # a second file name per table, holding the same bytes

    @classmethod
    def sample(cls) -> "Dataset":
        data = cls()
        for table in TABLES:
            with open(SAMPLE / f"{table}.csv", newline="", encoding="utf-8") as handle:
                records = list(csv.reader(handle))
            assert not any("\n" in value for record in records for value in record), "sample must be one line a row"
            data.header[table], data.rows[table] = records[0], records[1:]
            data.names[table] = f"{table}.csv"
        return data

    def col(self, table: str, column: str) -> int:
        return self.header[table].index(column)

    def set(self, table: str, row: int, column: str, value: str) -> int:
        """Set one field; returns the source line of that row (header = line 1)."""
        self.rows[table][row][self.col(table, column)] = value
        return row + 2

    def plant(self, table: str, row: int, column: str, prefix: str = "") -> str:
        """Write ``prefix`` + CANARY into one field (header matched case-insensitively); returns the value."""
        i = [name.upper() for name in self.header[table]].index(column.upper())
        self.rows[table][row][i] = prefix + CANARY
        return self.rows[table][row][i]

    def first(self, table: str, column: str, predicate: Callable[[str], bool]) -> int:
        """Index of the first row whose ``column`` satisfies ``predicate``."""
        i = self.col(table, column)
        return next(n for n, record in enumerate(self.rows[table]) if predicate(record[i]))

    def text(self, table: str, *, delimiter: str = ",") -> str:
        out = io.StringIO()
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        writer.writerow(self.header[table])
        writer.writerows(self.rows[table])
        return out.getvalue()

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for table in TABLES:
            if table in self.missing:
                continue
            path = folder / self.names[table]
            path.parent.mkdir(parents=True, exist_ok=True)
            data = self.raw.get(table, self.text(table).encode("utf-8"))
            for path in (path, *([folder / self.copies[table]] if table in self.copies else [])):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") and table not in self.raw
                                 else data)
        return folder


CASES: dict[str, Callable[[Dataset], Expect]] = {}


def case(function: Callable[[Dataset], Expect]) -> Callable[[Dataset], Expect]:
    CASES[function.__name__] = function
    return function


# -- valid variants -----------------------------------------------------------------------------
@case
def sample_as_is(d: Dataset) -> Expect:
    d.plant("LABEVENTS", 0, "VALUE")  # a numeric row's VALUE: carried through every stage, never output
    # Outpatient rows are set aside and counted once, by clean (raw's hadm_id_missing is off by default)
    line = d.first("LABEVENTS", "HADM_ID", lambda v: v == "") + 2
    return Expect(0, "quarantine_outpatient", "LABEVENTS", lines=(line,), severity="info", secret=CANARY)


@case
def byte_order_mark(d: Dataset) -> Expect:
    d.plant("LABEVENTS", 1, "VALUE")
    d.raw["LABEVENTS"] = b"\xef\xbb\xbf" + d.text("LABEVENTS").encode()
    return Expect(0, secret=CANARY)


@case
def mimic_iv_names_gzip_in_hosp(d: Dataset) -> Expect:
    for table in TABLES:
        d.header[table] = [name.lower() for name in d.header[table]]
        d.names[table] = f"hosp/{table.lower()}.csv.gz"
    d.header["LABEVENTS"][d.col("LABEVENTS", "row_id")] = "labevent_id"
    d.header["ADMISSIONS"][d.col("ADMISSIONS", "ethnicity")] = "race"
    d.plant("LABEVENTS", 2, "value")  # inside the gzip stream
    return Expect(0, secret=CANARY)


@case
def ref_range_text(d: Dataset) -> Expect:
    """MIMIC-IV's reference range bounds, one of them text: null with a warning, the row and its value kept."""
    d.header["LABEVENTS"] += ["REF_RANGE_LOWER", "REF_RANGE_UPPER"]
    for record in d.rows["LABEVENTS"]:
        record += ["0.5", "1.5"]
    line = d.set("LABEVENTS", 15, "REF_RANGE_LOWER", CANARY)
    return Expect(0, "ref_range_numeric", "LABEVENTS", "REF_RANGE_LOWER", lines=(line,), severity="warning",
                  secret=CANARY)


@case
def result_only_in_comments(d: Dataset) -> Expect:
    """MIMIC-IV's comments column, with one numeric row's result only there: quarantined, never a mixed item."""
    d.header["LABEVENTS"].append("COMMENTS")
    for record in d.rows["LABEVENTS"]:
        record.append("")
    hadm, valuenum = d.col("LABEVENTS", "HADM_ID"), d.col("LABEVENTS", "VALUENUM")
    row = next(n for n, record in enumerate(d.rows["LABEVENTS"]) if record[hadm] and record[valuenum])
    d.set("LABEVENTS", row, "VALUENUM", "")
    line = d.set("LABEVENTS", row, "VALUE", "")
    d.plant("LABEVENTS", row, "COMMENTS")
    return Expect(0, "result_in_comments", "LABEVENTS", None, lines=(line,), severity="warning", secret=CANARY)


@case
def quoted_newline_keeps_lines(d: Dataset) -> Expect:
    d.plant("LABEVENTS", 3, "VALUE", prefix="line one\n")
    row = 9
    d.set("LABEVENTS", row, "VALUENUM", "inf")
    return Expect(1, "valuenum_finite", "LABEVENTS", "VALUENUM", lines=(row + 3,), secret=CANARY)


@case
def float_formatted_ids(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 4, "ITEMID", d.rows["LABEVENTS"][4][d.col("LABEVENTS", "ITEMID")] + ".0")
    d.plant("LABEVENTS", 4, "VALUE")
    return Expect(0, "id_float_format", "LABEVENTS", "ITEMID", lines=(line,), severity="warning", secret=CANARY)


@case
def unknown_flag(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 7, "FLAG", CANARY)
    return Expect(0, "flag_value", "LABEVENTS", "FLAG", lines=(line,), severity="warning", secret=CANARY)


# -- files ---------------------------------------------------------------------------------------
@case
def missing_file(d: Dataset) -> Expect:
    d.missing.add("LABEVENTS")
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(2, "file_missing", "LABEVENTS", secret=CANARY)


@case
def empty_file(d: Dataset) -> Expect:
    d.raw["D_LABITEMS"] = b""
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "file_empty", "D_LABITEMS", secret=CANARY)


@case
def header_only(d: Dataset) -> Expect:
    d.rows["ADMISSIONS"] = []
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "table_empty", "ADMISSIONS", secret=CANARY)


@case
def truncated_gzip(d: Dataset) -> Expect:
    d.names["LABEVENTS"] = "LABEVENTS.csv.gz"
    d.plant("LABEVENTS", 0, "VALUE")  # in the half that still decompresses
    whole = gzip.compress(d.text("LABEVENTS").encode(), mtime=0)
    d.raw["LABEVENTS"] = whole[: len(whole) // 2]
    return Expect(1, "compression", "LABEVENTS", secret=CANARY)


@case
def plain_text_named_gz(d: Dataset) -> Expect:
    d.names["LABEVENTS"] = "LABEVENTS.csv.gz"
    d.plant("LABEVENTS", 0, "VALUE")
    d.raw["LABEVENTS"] = d.text("LABEVENTS").encode()
    return Expect(1, "compression", "LABEVENTS", secret=CANARY)


@case
def gzip_named_csv(d: Dataset) -> Expect:
    d.plant("D_LABITEMS", 0, "LABEL")
    d.raw["D_LABITEMS"] = gzip.compress(d.text("D_LABITEMS").encode(), mtime=0)
    return Expect(1, "compression", "D_LABITEMS", secret=CANARY)


@case
def binary_garbage(d: Dataset) -> Expect:
    garbage = bytes((i * 151 + 7) % 256 for i in range(4096))
    d.raw["ADMISSIONS"] = garbage[:2048] + CANARY.encode() + garbage[2048:]
    return Expect(1, "encoding", "ADMISSIONS", secret=CANARY)


@case
def undecodable_bytes(d: Dataset) -> Expect:
    d.plant("LABEVENTS", 39, "VALUE")  # line 41, the line with the bad byte
    text = d.text("LABEVENTS").encode()
    lines = text.split(b"\n")
    lines[40] = lines[40].replace(b",", b",\xe9", 1)  # latin-1 'é' in the second field
    d.raw["LABEVENTS"] = b"\n".join(lines)
    return Expect(1, "encoding", "LABEVENTS", lines=(41,), secret=CANARY)


@case
def duplicate_header(d: Dataset) -> Expect:
    d.plant("D_LABITEMS", 0, "LABEL")  # now a value of the second 'fluid' column
    d.header["D_LABITEMS"][d.col("D_LABITEMS", "LABEL")] = "fluid"
    return Expect(1, "duplicate_header", "D_LABITEMS", lines=(1,), secret=CANARY)


@case
def missing_required_column(d: Dataset) -> Expect:
    i = d.col("LABEVENTS", "CHARTTIME")
    d.header["LABEVENTS"].pop(i)
    for record in d.rows["LABEVENTS"]:
        record.pop(i)
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "missing_column", "LABEVENTS", "CHARTTIME", lines=(1,), secret=CANARY)


@case
def wrong_delimiter(d: Dataset) -> Expect:
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")  # on line 2, right after the header the hint is about
    d.raw["ADMISSIONS"] = d.text("ADMISSIONS", delimiter=";").encode()
    return Expect(1, "missing_column", "ADMISSIONS", "HADM_ID, ADMITTIME, DISCHTIME", lines=(1,), secret=CANARY)


@case
def ragged_row(d: Dataset) -> Expect:
    d.rows["LABEVENTS"][11].append(CANARY)
    return Expect(1, "malformed_row", "LABEVENTS", lines=(13,), secret=CANARY)


@case
def unclosed_quote(d: Dataset) -> Expect:
    text = d.text("LABEVENTS").split("\n")
    text[30] = text[30].replace(",", ',"' + CANARY, 1)
    d.raw["LABEVENTS"] = "\n".join(text).encode()
    return Expect(1, "malformed_row", "LABEVENTS", lines=(31,), secret=CANARY)


@case
def field_of_a_megabyte(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 20, "VALUE", CANARY + "x" * 2**20)  # one character past [load] max_field_chars
    return Expect(1, "field_too_long", "LABEVENTS", "VALUE", lines=(line,), secret=CANARY)


@case
def gzip_bomb(d: Dataset) -> Expect:
    """80 MiB of NUL bytes in ~80 KB (gzip members end to end): over 100 times the file, refused early."""
    d.names["LABEVENTS"] = "LABEVENTS.csv.gz"
    d.raw["LABEVENTS"] = gzip.compress(bytes(1 << 24), compresslevel=9, mtime=0) * 5
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(2, "decompression_bound", "LABEVENTS", secret=CANARY)


@case
def two_files_for_one_table(d: Dataset) -> Expect:
    d.copies["LABEVENTS"] = "hosp/labevents.csv.gz"
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(0, "file_ambiguous", "LABEVENTS", severity="warning", secret=CANARY)


# -- values --------------------------------------------------------------------------------------
@case
def text_in_itemid(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 5, "ITEMID", CANARY)
    return Expect(1, "id_positive_integer", "LABEVENTS", "ITEMID", lines=(line,), secret=CANARY)


@case
def negative_hadm_id(d: Dataset) -> Expect:
    line = d.set("ADMISSIONS", 2, "HADM_ID", "-177013")
    d.plant("ADMISSIONS", 2, "DIAGNOSIS")
    return Expect(1, "id_positive_integer", "ADMISSIONS", "HADM_ID", lines=(line,), secret="-177013")


@case
def zero_subject_id(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 8, "SUBJECT_ID", "0")
    d.plant("LABEVENTS", 8, "VALUE")
    return Expect(1, "id_positive_integer", "LABEVENTS", "SUBJECT_ID", lines=(line,), secret=CANARY)


@case
def overflowing_id(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 12, "HADM_ID", "9" * 25)
    d.plant("LABEVENTS", 12, "VALUE")
    return Expect(1, "id_positive_integer", "LABEVENTS", "HADM_ID", lines=(line,), secret="9" * 25)


@case
def nul_byte_in_id(d: Dataset) -> Expect:
    line = d.set("D_LABITEMS", 3, "ITEMID", "509\x0012")
    d.plant("D_LABITEMS", 3, "LABEL")
    return Expect(1, "id_positive_integer", "D_LABITEMS", "ITEMID", lines=(line,), secret=CANARY)


@case
def empty_itemid(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 14, "ITEMID", "")
    d.plant("LABEVENTS", 14, "VALUE")
    return Expect(1, "id_missing", "LABEVENTS", "ITEMID", lines=(line,), secret=CANARY)


@case
def text_in_valuenum(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "VALUENUM", lambda v: v != "")
    line = d.set("LABEVENTS", row, "VALUENUM", CANARY)
    return Expect(1, "valuenum_numeric", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def thousands_separator(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 20, "VALUENUM", "13,448")
    d.plant("LABEVENTS", 20, "VALUE")
    return Expect(1, "valuenum_numeric", "LABEVENTS", "VALUENUM", lines=(line,), secret="13,448")


@case
def inf_valuenum(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 21, "VALUENUM", "inf")
    d.plant("LABEVENTS", 21, "VALUE")
    return Expect(1, "valuenum_finite", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def minus_inf_valuenum(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 22, "VALUENUM", "-inf")
    d.plant("LABEVENTS", 22, "VALUE")
    return Expect(1, "valuenum_finite", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def overflowing_valuenum(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 23, "VALUENUM", "1e309")
    d.plant("LABEVENTS", 23, "VALUE")
    return Expect(1, "valuenum_finite", "LABEVENTS", "VALUENUM", lines=(line,), secret="1e309")


@case
def nan_token_valuenum(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 24, "VALUENUM", "NaN")
    d.plant("LABEVENTS", 24, "VALUE")
    return Expect(1, "valuenum_finite", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def huge_valuenum(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 25, "VALUENUM", "7.31e12")
    d.plant("LABEVENTS", 25, "VALUE")
    return Expect(1, "valuenum_bound", "LABEVENTS", "VALUENUM", lines=(line,), secret="7.31e12")


@case
def two_digit_year(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 26, "CHARTTIME", "10/23/64 21:09")
    d.plant("LABEVENTS", 26, "VALUE")
    return Expect(1, "datetime_iso", "LABEVENTS", "CHARTTIME", lines=(line,), secret="10/23/64")


@case
def time_zone_offset(d: Dataset) -> Expect:
    line = d.set("ADMISSIONS", 5, "ADMITTIME", "2162-11-26 18:29:00+02:00")
    d.plant("ADMISSIONS", 5, "DIAGNOSIS")
    return Expect(1, "datetime_iso", "ADMISSIONS", "ADMITTIME", lines=(line,), secret="+02:00")


@case
def impossible_date(d: Dataset) -> Expect:
    line = d.set("ADMISSIONS", 6, "DISCHTIME", "2163-02-30 10:00:00")
    d.plant("ADMISSIONS", 6, "DIAGNOSIS")
    return Expect(1, "datetime_iso", "ADMISSIONS", "DISCHTIME", lines=(line,), secret=CANARY)


@case
def edregtime_text(d: Dataset) -> Expect:
    """An EDREGTIME that is not a time: null with a warning, its admission kept (EDREGTIME is optional metadata)."""
    row = d.first("ADMISSIONS", "EDREGTIME", lambda v: v != "")
    line = d.set("ADMISSIONS", row, "EDREGTIME", CANARY)
    return Expect(0, "edregtime_iso", "ADMISSIONS", "EDREGTIME", lines=(line,), severity="warning", secret=CANARY)


@case
def deathtime_text(d: Dataset) -> Expect:
    """A DEATHTIME that is not a time: null with a warning, its admission kept (DEATHTIME is optional metadata, read
    by a task's death label)."""
    row = d.first("ADMISSIONS", "DEATHTIME", lambda v: v != "")
    line = d.set("ADMISSIONS", row, "DEATHTIME", CANARY)
    return Expect(0, "deathtime_iso", "ADMISSIONS", "DEATHTIME", lines=(line,), severity="warning", secret=CANARY)


@case
def empty_charttime(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 27, "CHARTTIME", "")
    d.plant("LABEVENTS", 27, "VALUE")
    return Expect(1, "datetime_missing", "LABEVENTS", "CHARTTIME", lines=(line,), secret=CANARY)


# -- relations -----------------------------------------------------------------------------------
@case
def duplicate_admission(d: Dataset) -> Expect:
    d.rows["ADMISSIONS"].append(list(d.rows["ADMISSIONS"][3]))
    d.plant("ADMISSIONS", -1, "DIAGNOSIS")
    return Expect(1, "primary_key_unique", "ADMISSIONS", "HADM_ID", lines=(5, len(d.rows["ADMISSIONS"]) + 1),
                  secret=CANARY)


@case
def duplicate_labitem(d: Dataset) -> Expect:
    d.rows["D_LABITEMS"].insert(1, list(d.rows["D_LABITEMS"][0]))
    d.plant("D_LABITEMS", 1, "LABEL")
    return Expect(1, "primary_key_unique", "D_LABITEMS", "ITEMID", lines=(2, 3), secret=CANARY)


@case
def unknown_hadm_id(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v != "")
    line = d.set("LABEVENTS", row, "HADM_ID", "199999999")
    d.plant("LABEVENTS", row, "VALUE")
    return Expect(1, "foreign_key", "LABEVENTS", "HADM_ID", lines=(line,), secret=CANARY)


@case
def unknown_itemid(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 33, "ITEMID", "99999")
    d.plant("LABEVENTS", 33, "VALUE")
    return Expect(1, "foreign_key", "LABEVENTS", "ITEMID", lines=(line,), secret=CANARY)


@case
def subject_mismatch(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v != "")
    subject = int(d.rows["LABEVENTS"][row][d.col("LABEVENTS", "SUBJECT_ID")])
    line = d.set("LABEVENTS", row, "SUBJECT_ID", str(subject + 1))
    d.plant("LABEVENTS", row, "VALUE")
    return Expect(1, "subject_mismatch", "LABEVENTS", "SUBJECT_ID", lines=(line,), secret=CANARY)


@case
def discharge_before_admit(d: Dataset) -> Expect:
    admit = d.rows["ADMISSIONS"][8][d.col("ADMISSIONS", "ADMITTIME")]
    line = d.set("ADMISSIONS", 8, "DISCHTIME", admit.replace(admit[:4], str(int(admit[:4]) - 1), 1))
    d.plant("ADMISSIONS", 8, "DIAGNOSIS")
    return Expect(1, "discharge_before_admit", "ADMISSIONS", "DISCHTIME", lines=(line,), secret=CANARY)


# -- more type and value classes ----------------------------------------------------------------------
@case
def date_beyond_pandas_range(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 28, "CHARTTIME", "2300-01-01 00:00:00")
    d.plant("LABEVENTS", 28, "VALUE")
    return Expect(1, "datetime_iso", "LABEVENTS", "CHARTTIME", lines=(line,), secret=CANARY)


@case
def leading_zeros_in_itemid(d: Dataset) -> Expect:
    itemid = d.rows["LABEVENTS"][29][d.col("LABEVENTS", "ITEMID")]
    d.set("LABEVENTS", 29, "ITEMID", "00" + itemid)  # the same item: read as an integer, not rejected
    d.plant("LABEVENTS", 29, "VALUE")
    return Expect(0, secret=CANARY)


@case
def na_token_in_valuenum(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "VALUENUM", lambda v: v != "")
    line = d.set("LABEVENTS", row + 1, "VALUENUM", "N/A")
    d.plant("LABEVENTS", row + 1, "VALUE")
    return Expect(1, "valuenum_numeric", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def largest_finite_double(d: Dataset) -> Expect:
    line = d.set("LABEVENTS", 31, "VALUENUM", "1e308")
    d.plant("LABEVENTS", 31, "VALUE")
    return Expect(1, "valuenum_bound", "LABEVENTS", "VALUENUM", lines=(line,), secret=CANARY)


@case
def all_null_valuenum_column(d: Dataset) -> Expect:
    i = d.col("LABEVENTS", "VALUENUM")
    for record in d.rows["LABEVENTS"]:
        record[i] = ""
    # Every VALUE is then categorical; the canary goes into an outpatient row's VALUE (quarantined, never fitted).
    d.plant("LABEVENTS", d.first("LABEVENTS", "HADM_ID", lambda v: v == ""), "VALUE")
    return Expect(0, secret=CANARY)  # every item is then categorical: still a valid (if odd) dataset


@case
def every_lab_outpatient(d: Dataset) -> Expect:
    i = d.col("LABEVENTS", "HADM_ID")
    for record in d.rows["LABEVENTS"]:
        record[i] = ""
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "step_empty", "LABEVENTS", "HADM_ID", secret=CANARY)


@case
def labs_long_after_discharge(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v != "")
    hadm = d.rows["LABEVENTS"][row][d.col("LABEVENTS", "HADM_ID")]
    admission = next(r for r in d.rows["ADMISSIONS"] if r[d.col("ADMISSIONS", "HADM_ID")] == hadm)
    discharge = admission[d.col("ADMISSIONS", "DISCHTIME")]
    later = f"{int(discharge[:4]) + 1}{discharge[4:]}"
    d.set("LABEVENTS", row, "CHARTTIME", later)
    d.plant("LABEVENTS", row, "VALUE")
    return Expect(0, "after_discharge", "LABEVENTS", severity="info", secret=CANARY)


@case
def discharge_decades_late(d: Dataset) -> Expect:
    # A mistyped year makes a 50-year stay; a lab five years into it is inside the stay, but no real stay is.
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v != "")
    hadm = d.rows["LABEVENTS"][row][d.col("LABEVENTS", "HADM_ID")]
    at = next(n for n, r in enumerate(d.rows["ADMISSIONS"]) if r[d.col("ADMISSIONS", "HADM_ID")] == hadm)
    discharge = d.rows["ADMISSIONS"][at][d.col("ADMISSIONS", "DISCHTIME")]
    d.set("ADMISSIONS", at, "DISCHTIME", f"{int(discharge[:4]) + 50}{discharge[4:]}")
    d.set("LABEVENTS", row, "CHARTTIME", f"{int(discharge[:4]) + 5}{discharge[4:]}")
    d.plant("LABEVENTS", row, "VALUE")
    return Expect(0, "beyond_max_stay", "LABEVENTS", severity="warning", secret=CANARY)


@case
def lab_in_the_ed_the_evening_before(d: Dataset) -> Expect:
    """A lab drawn at ED registration, the evening before the admission day: kept at timestep 0 and counted."""
    hadm, admit, registered = (d.col("ADMISSIONS", c) for c in ("HADM_ID", "ADMITTIME", "EDREGTIME"))
    evening = {r[hadm]: r[registered] for r in d.rows["ADMISSIONS"]
               if r[registered] and r[registered][:10] < r[admit][:10]}
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v in evening)
    line = d.set("LABEVENTS", row, "CHARTTIME", evening[d.rows["LABEVENTS"][row][d.col("LABEVENTS", "HADM_ID")]])
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(0, "from_ed_stay", "LABEVENTS", "CHARTTIME", lines=(line,), severity="info", secret=CANARY)


@case
def huge_text_field(d: Dataset) -> Expect:
    d.set("ADMISSIONS", 10, "DIAGNOSIS", CANARY + "x" * 200_000)
    return Expect(0, secret=CANARY)


@case
def tab_delimited(d: Dataset) -> Expect:
    d.plant("D_LABITEMS", 0, "LABEL")
    d.raw["D_LABITEMS"] = d.text("D_LABITEMS", delimiter="\t").encode()
    return Expect(1, "missing_column", "D_LABITEMS", lines=(1,), secret=CANARY)


@case
def crlf_line_endings_and_bom(d: Dataset) -> Expect:
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    d.raw["ADMISSIONS"] = b"\xef\xbb\xbf" + d.text("ADMISSIONS").replace("\n", "\r\n").encode()
    return Expect(0, secret=CANARY)


@case
def header_only_labevents(d: Dataset) -> Expect:
    d.rows["LABEVENTS"] = []
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(1, "table_empty", "LABEVENTS", secret=CANARY)


# -- the stages' own checks -------------------------------------------------------------------------
@case
def table_is_a_folder(d: Dataset) -> Expect:
    d.names["LABEVENTS"] = "LABEVENTS.csv/LABEVENTS.csv"  # DATA_DIR/LABEVENTS.csv is a folder, not a file
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(2, "file_unreadable", "LABEVENTS", secret=CANARY)


@case
def no_valuenum_column(d: Dataset) -> Expect:
    i = d.col("LABEVENTS", "VALUENUM")
    d.header["LABEVENTS"].pop(i)
    for record in d.rows["LABEVENTS"]:
        record.pop(i)
    d.plant("LABEVENTS", d.first("LABEVENTS", "HADM_ID", lambda v: v == ""), "VALUE")  # outpatient: never fitted
    return Expect(0, "valuenum_derived", "LABEVENTS", "VALUENUM", severity="info", secret=CANARY)


@case
def valuenum_header_one_edit_away(d: Dataset) -> Expect:
    """VALUENUM's header written ``value_num``: not read under that name, so VALUENUM is derived from VALUE."""
    d.header["LABEVENTS"][d.col("LABEVENTS", "VALUENUM")] = "value_num"
    d.plant("LABEVENTS", d.first("LABEVENTS", "HADM_ID", lambda v: v == ""), "VALUE")  # outpatient: never fitted
    return Expect(0, "header_near_column", "LABEVENTS", "VALUENUM", lines=(1,), severity="warning", secret=CANARY)


@case
def admissions_without_subject_id(d: Dataset) -> Expect:
    i = d.col("ADMISSIONS", "SUBJECT_ID")
    d.header["ADMISSIONS"].pop(i)
    for record in d.rows["ADMISSIONS"]:
        record.pop(i)
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(0, "split_by_admission", "ADMISSIONS", "SUBJECT_ID", severity="warning", secret=CANARY)


@case
def almost_every_lab_outpatient(d: Dataset) -> Expect:
    """All but 0.5% of the lab rows lose their HADM_ID: the outpatient step removes more than 99%."""
    i = d.col("LABEVENTS", "HADM_ID")
    for record in d.rows["LABEVENTS"][len(d.rows["LABEVENTS"]) // 200:]:
        record[i] = ""
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "step_removed_nearly_all", "LABEVENTS", "HADM_ID", secret=CANARY)


@case
def fluid_case_variants(d: Dataset) -> Expect:
    row = d.first("D_LABITEMS", "FLUID", lambda v: v == "Urine")
    d.set("D_LABITEMS", row, "FLUID", "URINE")
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(0, "category_case_variants", "D_LABITEMS", "FLUID", severity="info", secret=CANARY)


@case
def two_patients(d: Dataset) -> Expect:
    """Two patients cannot fill train, val and test."""
    subject, hadm = d.col("ADMISSIONS", "SUBJECT_ID"), d.col("ADMISSIONS", "HADM_ID")
    subjects = sorted({r[subject] for r in d.rows["ADMISSIONS"]})[:2]
    d.rows["ADMISSIONS"] = [r for r in d.rows["ADMISSIONS"] if r[subject] in subjects]
    kept = {r[hadm] for r in d.rows["ADMISSIONS"]}
    d.rows["LABEVENTS"] = [r for r in d.rows["LABEVENTS"] if r[d.col("LABEVENTS", "HADM_ID")] in kept]
    d.plant("LABEVENTS", 0, "VALUE")
    return Expect(1, "split_empty", "ADMISSIONS", "SPLIT", secret=CANARY)


@case
def lab_row_without_result(d: Dataset) -> Expect:
    row = d.first("LABEVENTS", "HADM_ID", lambda v: v != "")
    d.set("LABEVENTS", row, "VALUENUM", "")
    line = d.set("LABEVENTS", row, "VALUE", "")
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(0, "no_result", "LABEVENTS", lines=(line,), severity="info", secret=CANARY)


@case
def censored_bound_off_the_item_s_scale(d: Dataset) -> Expect:
    """An item whose values are 1e6 +- 0.003 (the anion gap, 50868, rewritten) with two '<0.01' and two '>1000':
    the text stage reads them as 0.01 and 1000, whose z is near -1e9. A detection limit of another unit is no
    measurement on the item's scale: the four rows are quarantined and named, never the error z_error_bound."""
    item, hadm = d.col("LABEVENTS", "ITEMID"), d.col("LABEVENTS", "HADM_ID")
    rows = [n for n, record in enumerate(d.rows["LABEVENTS"]) if record[item] == "50868" and record[hadm]]
    for k, row in enumerate(rows):
        value = f"{1e6 + (k % 7) * 0.001:.3f}"
        d.set("LABEVENTS", row, "VALUENUM", value)
        d.set("LABEVENTS", row, "VALUE", value)
        d.set("LABEVENTS", row, "FLAG", "")
    lines = []
    for row, bound in zip(rows[5::40], ("<0.01", ">1000", "<0.01", ">1000")):
        d.set("LABEVENTS", row, "VALUENUM", "")
        lines.append(d.set("LABEVENTS", row, "VALUE", bound))
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(0, "censored_off_scale", "LABEVENTS", lines=tuple(lines), severity="warning", secret=CANARY)


def _hadm_rows(d: Dataset, hadm: str) -> list[int]:
    i = d.col("LABEVENTS", "HADM_ID")
    return [n for n, record in enumerate(d.rows["LABEVENTS"]) if record[i] == hadm]


@case
def admission_without_labs(d: Dataset) -> Expect:
    hadm = d.rows["ADMISSIONS"][0][d.col("ADMISSIONS", "HADM_ID")]
    its = set(_hadm_rows(d, hadm))
    d.rows["LABEVENTS"] = [r for n, r in enumerate(d.rows["LABEVENTS"]) if n not in its]
    d.plant("ADMISSIONS", 0, "DIAGNOSIS")
    return Expect(0, "admission_no_labs", "ADMISSIONS", lines=(2,), severity="info", secret=CANARY)


@case
def admission_labs_all_a_year_early(d: Dataset) -> Expect:
    """Every lab row of one admission charted a year before it: all quarantined, the admission in no graph."""
    hadm = d.rows["ADMISSIONS"][1][d.col("ADMISSIONS", "HADM_ID")]
    for row in _hadm_rows(d, hadm):
        charttime = d.rows["LABEVENTS"][row][d.col("LABEVENTS", "CHARTTIME")]
        d.set("LABEVENTS", row, "CHARTTIME", f"{int(charttime[:4]) - 1}{charttime[4:]}")
    d.plant("LABEVENTS", _hadm_rows(d, hadm)[0], "VALUE")
    return Expect(0, "admission_labs_quarantined", "ADMISSIONS", lines=(3,), severity="warning", secret=CANARY)


def build(name: str, folder: Path) -> Expect:
    """Write case ``name`` into ``folder`` and return what badpoints must report for it."""
    data = Dataset.sample()
    expect = CASES[name](data)
    data.write(folder)
    return expect
