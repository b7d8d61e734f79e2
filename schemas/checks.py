"""The catalogue of checks and the pandera check methods that run on raw text.

Every check has a stable id (used in reports, JUnit files and the config's
``[severity]`` table), a default severity, a short title and advice that says
what to do. A new check is one ``CheckInfo``: a stage's in the ``CHECKS`` of its schema
module (``schemas/<stage>.py``; the catalogue finds them there, so a new stage adds no
line here), reading's, the raw tables' and the run's below; plus one registered function
when it runs inside a pandera schema.

The registered checks read a parse of their column (``ParsedIds``, ``ParsedTimes``, ...).
Within :func:`sharing_parses` they read the one the caller made, so a column is parsed once
for all of its checks and for its typed values; anywhere else they parse the text they are handed.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Iterable, Iterator, Mapping, TypeVar

import numpy as np
import pandas as pd
import pandera.pandas as pandera
import pyarrow as pa
import pyarrow.compute as pc
from pandera import extensions

from schemas.catalogue import (CANNOT_RUN, ERROR, GRAPH_FILE, INFO, LOCKED, NOT_READ, OFF,  # noqa: F401
                               SEVERITIES, STOPS, WARNING, CheckInfo)

# The checks of reading, of the raw tables and of every stage's guards and steps (stage "all"); each stage's own are
# declared in its schema module (``CHECKS``), and the run's (its ledgers, ``_AFTER``) come after those.
_BEFORE = [
    # -- files --------------------------------------------------------------------------
    CheckInfo("file_missing", "load", ERROR, "table file not found",
              "Put the table in DATA_DIR under one of the names tried (.csv or .csv.gz, any case).", locked=CANNOT_RUN),
    CheckInfo("file_unreadable", "load", ERROR, "file cannot be read",
              "Check the file's permissions and that it is a regular file.", locked=CANNOT_RUN),
    CheckInfo("file_ambiguous", "load", WARNING, "more than one file could hold the table",
              "Keep one file per table in DATA_DIR (and its hosp/ folder); the one read is named."),
    CheckInfo("file_empty", "load", ERROR, "file has no bytes",
              "Re-export or re-download the table; an empty file has not even a header.", locked=NOT_READ),
    CheckInfo("compression", "load", ERROR, "gzip stream is truncated or corrupt",
              "Re-download the file or re-compress it with gzip; a file named .gz must be gzip.", locked=NOT_READ),
    CheckInfo("decompression_bound", "load", ERROR, "gzip file expands beyond the configured bound",
              "A file that expands this far is most often a gzip bomb or a broken export; if it is real, raise "
              "[load] max_expanded_bytes or max_expansion_ratio.", locked=CANNOT_RUN),
    CheckInfo("encoding", "load", ERROR, "bytes that are not UTF-8",
              "Re-export the table as UTF-8 (MIMIC ships UTF-8; a spreadsheet save may not).", locked=NOT_READ),
    CheckInfo("duplicate_header", "load", ERROR, "header names a column twice",
              "Rename or drop the duplicated column so every header name is unique (case-insensitively).",
              locked=NOT_READ),
    CheckInfo("missing_column", "load", ERROR, "required column absent",
              "Check the delimiter (badpoints reads comma-separated files) and the header names.", locked=NOT_READ),
    CheckInfo("malformed_row", "load", ERROR, "row that is not valid CSV",
              "Fix the rows: every row needs as many fields as the header, and every quote must close.",
              locked=NOT_READ),
    CheckInfo("field_too_long", "load", ERROR, "a field longer than the configured bound",
              "No lab value, time or ID is this long: the export merged rows or lost a delimiter; fix the rows "
              "named. They were left out; the rest of the table was read and checked."),
    CheckInfo("table_empty", "load", ERROR, "table has a header but no rows",
              "Re-export the table with its rows; an empty table leaves nothing to train on.", locked=NOT_READ),
    # -- values -------------------------------------------------------------------------
    CheckInfo("id_missing", "raw", ERROR, "an empty required ID",
              "Every row needs this ID; drop or repair the rows."),
    CheckInfo("id_positive_integer", "raw", ERROR, "an ID that is not a positive integer",
              "IDs must be positive integers below 10^18; repair the export (no text, signs, or separators)."),
    CheckInfo("id_float_format", "raw", WARNING, "an integer ID written as a float ('123.0')",
              "Read as an integer; re-export with integer IDs (pandas writes 123.0 when the column had NaN)."),
    CheckInfo("hadm_id_missing", "raw", OFF, "no HADM_ID (outpatient labs)",
              "Outpatient labs have no admission: the clean stage sets them aside and counts them "
              "(quarantine_outpatient), so this check is off unless [severity] turns it on."),
    CheckInfo("valuenum_numeric", "raw", ERROR, "VALUENUM that is not a number",
              "VALUENUM must be a plain decimal number or empty; move text results to VALUE."),
    CheckInfo("valuenum_finite", "raw", ERROR, "VALUENUM that is inf or NaN",
              "Non-finite values poison the z-scores and the gradients; repair the export step that wrote them."),
    CheckInfo("valuenum_bound", "raw", ERROR, "VALUENUM beyond the configured magnitude bound",
              "No lab measurement is this large; raise [raw] valuenum_abs_bound only if it is real."),
    CheckInfo("valuenum_derived", "raw", INFO, "VALUENUM derived from VALUE",
              "The table has no VALUENUM column; numbers were parsed from VALUE with a strict grammar."),
    CheckInfo("ref_range_numeric", "raw", WARNING, "a reference range bound that is not a finite number",
              "REF_RANGE_LOWER/UPPER are metadata, read as numbers when present: this bound is left empty "
              "(null); the row and its result are kept. Re-export the bound as a plain decimal to use it."),
    CheckInfo("flag_value", "raw", WARNING, "FLAG other than 'abnormal' or 'delta'",
              "Unknown flags are treated as abnormal; map them to 'abnormal', 'delta' or empty."),
    CheckInfo("datetime_missing", "raw", ERROR, "an empty required time",
              "Every row needs this time; drop or repair the rows."),
    CheckInfo("datetime_iso", "raw", ERROR, "a time that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "Re-export the original file; a spreadsheet re-save rewrites dates and can lose the century."),
    CheckInfo("edregtime_iso", "raw", WARNING, "an EDREGTIME that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "EDREGTIME is optional, read only for where the ED stay began: this one is left empty (null) and its "
              "admission kept; the bucket stage then bounds its ED stay by [bucket] ed_hours. Re-export the time "
              "as ISO to use it."),
    # -- relations ----------------------------------------------------------------------
    CheckInfo("primary_key_unique", "raw", ERROR, "a key that appears more than once",
              "Each admission and lab item must appear once; drop the duplicated rows."),
    CheckInfo("foreign_key", "raw", ERROR, "a reference to a row that does not exist",
              "Every LABEVENTS HADM_ID must be in ADMISSIONS and every ITEMID in D_LABITEMS; "
              "check that the tables come from the same export."),
    CheckInfo("subject_mismatch", "raw", ERROR, "a SUBJECT_ID other than its admission's",
              "The lab row names a different patient than its admission; check the join that made it."),
    CheckInfo("discharge_before_admit", "raw", ERROR, "DISCHTIME earlier than ADMITTIME",
              "The stay has negative length; repair the admission's times."),
    CheckInfo("charttime_outside_stay", "raw", OFF, "CHARTTIME outside the admission's stay",
              "The bucket stage decides each such row and counts what it does (from_ed_stay, before_admission, "
              "after_discharge, beyond_max_stay), so this check is off unless [severity] turns it on."),
    # -- every stage ---------------------------------------------------------------------
    CheckInfo("stage_guard", "all", ERROR, "rows that break the stage's schema",
              "A stage received or produced data its schema forbids; the message names the column and check.",
              locked=STOPS),
    CheckInfo("step_empty", "all", ERROR, "a filter, join or dedup that left no rows",
              "Nothing would reach the graphs; check the inputs and the step's settings.", locked=STOPS),
    CheckInfo("step_removed_most", "all", WARNING, "a step that removed more than the warning fraction",
              "Check that the step's settings fit this data ([filters] warn_removed_fraction)."),
    CheckInfo("step_removed_nearly_all", "all", ERROR, "a step that removed more than the error fraction",
              "Almost nothing survives this step; check its settings ([filters] error_removed_fraction)."),
    CheckInfo("attrition", "all", INFO, "rows read, kept, quarantined and merged per step",
              "Every row read is accounted for; quarantined rows keep their line and reason."),
]
_AFTER = [
    # -- admissions (the ADMISSIONS ledger: read = in graphs + dropped) -------------------
    CheckInfo("admission_no_labs", "flow", INFO, "admissions without any lab row",
              "Normal in MIMIC (short stays, labs charted elsewhere); they have no edges, so no graph node."),
    CheckInfo("admission_rejected", "flow", WARNING, "admissions dropped because they failed a raw check",
              "See the ADMISSIONS raw findings; repair the admission's key or times to keep it."),
    CheckInfo("admission_labs_quarantined", "flow", WARNING, "admissions whose every lab row was quarantined",
              "They reach no graph; the quarantine findings of the named stages say why their rows went."),
]


def collect_checks(declared: Iterable[tuple[str, Iterable[CheckInfo]]]) -> dict[str, CheckInfo]:
    """Checks by id, in the order given; ``declared`` pairs where each group is declared (a module's name) with its
    checks. An id declared twice is refused, naming both places."""
    checks: dict[str, CheckInfo] = {}
    where: dict[str, str] = {}
    for place, infos in declared:
        for info in infos:
            if info.id in checks:
                raise ValueError(f"check {info.id!r} is declared twice: in {where[info.id]} and {place}")
            checks[info.id], where[info.id] = info, place
    return checks


def _declaring_modules() -> list[ModuleType]:
    """The modules of this package that declare checks (``CHECKS``), imported, by name; not this one, whose
    ``CHECKS`` is the catalogue itself."""
    found = pkgutil.iter_modules(importlib.import_module(__package__).__path__, prefix=f"{__package__}.")
    modules = [importlib.import_module(name) for _, name, _ in found]
    return [module for module in modules if module.__name__ != __name__ and hasattr(module, "CHECKS")]


class _Catalogue(Mapping[str, CheckInfo]):
    """Every check by id: reading's, the raw tables' and those of every stage (``_BEFORE``), each stage's own (the
    schema modules' ``CHECKS``, by module name: ``pipeline.stages.in_flow_order`` lists them in the flow's order),
    then the run's (``_AFTER``).

    Put together on first use, when every schema module can be imported (they import this one): read it inside
    functions, never while a schema module is being imported.
    """

    @functools.cached_property
    def _checks(self) -> dict[str, CheckInfo]:
        modules = [(module.__name__, module.CHECKS) for module in _declaring_modules()]
        return collect_checks([(__name__, _BEFORE), *modules, (__name__, _AFTER)])

    def __getitem__(self, check_id: str) -> CheckInfo:
        return self._checks[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._checks)

    def __len__(self) -> int:
        return len(self._checks)


CHECKS: Mapping[str, CheckInfo] = _Catalogue()
# Checks that mean the run could not happen at all (exit 2), rather than that the data is bad (exit 1): reading's,
# as no stage runs before the tables are read.
CANNOT_RUN_CHECKS = tuple(info.id for info in _BEFORE if info.locked == CANNOT_RUN)


def check_info(check_id: str) -> CheckInfo:
    """The catalogue entry for a check id (KeyError names the known ids)."""
    try:
        return CHECKS[check_id]
    except KeyError:
        raise KeyError(f"unknown check {check_id!r}; known checks: {', '.join(sorted(CHECKS))}") from None


# -- grammars of raw text ------------------------------------------------------------------
ID_TEXT = r"\s*\+?0*[1-9]\d{0,17}(?:\.0+)?\s*"
NUMBER_TEXT = r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*"
NONFINITE_TEXT = r"(?i)\s*[+-]?(?:inf|infinity|nan)\s*"
ISO_DATETIME_TEXT = r"\s*\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?\s*"
FLAGS = ("abnormal", "delta")
# Years whose every instant datetime64[ns] can hold (it spans 1677-09-21 to 2262-04-11).
YEARS = (1678, 2261)


def matches(text: pd.Series, pattern: str) -> pd.Series:
    """Whole-value regex match in pyarrow's RE2 (pandas falls back to Python's re per row); null is False."""
    return pd.Series(_matches(_arrow(text), pattern), index=text.index, dtype=bool)


def number_values(text: pd.Series) -> pd.Series:
    """float64 of the text that follows the strict numeric grammar (1e309 gives inf); NaN elsewhere."""
    return ParsedNumbers.of(text).values.rename(None)


def parse_datetime_text(text: pd.Series) -> pd.Series:
    """ISO text to datetime64[ns]; anything else, impossible dates and years outside 1678-2261 to NaT."""
    return ParsedTimes.of(text).values


# -- each text column parsed once ------------------------------------------------------------
P = TypeVar("P", bound="ParsedText")


@dataclass(frozen=True)
class ParsedText:
    """A text column parsed once: its typed ``values`` (null where the text does not parse), and what the
    registered checks ask of each row. Subclasses add those answers; ``of(text)`` parses.

    The raw stage parses each column before validating and lets the checks read the parse
    (:func:`sharing_parses`), so the text is parsed once for all of its checks and for the typed table.
    """

    values: pd.Series
    present: np.ndarray  # the text is not null: the rows pandera hands a check after dropping nulls

    def rows(self, text: pd.Series) -> slice | np.ndarray | None:
        """Which of the parsed rows ``text`` holds: all, the non-null ones (as pandera hands a check
        after dropping nulls), or None when it holds other rows."""
        index = self.values.index
        if len(text) == len(index) and text.index.equals(index):
            return slice(None)
        if len(text) == np.count_nonzero(self.present) and text.index.equals(index[self.present]):
            return self.present
        return None


@dataclass(frozen=True)
class ParsedIds(ParsedText):
    """ID text: nullable Int64 values, whether each row is a valid ID, and whether it is written '123.0'."""

    valid: np.ndarray
    float_format: np.ndarray

    @classmethod
    def of(cls, text: pd.Series) -> "ParsedIds":
        distinct, codes = _distinct(text)
        valid = _matches(distinct, ID_TEXT)
        dotted = valid & _filled(pc.match_substring(distinct, "."))  # a valid ID's only '.' starts a '.0' tail
        digits = pc.utf8_ltrim(_trimmed_where(valid, distinct), characters="+")
        if dotted.any():
            digits = pc.replace_substring_regex(digits, pattern=r"\.0+$", replacement="")
        numbers = pc.cast(digits, pa.int64())
        values = pd.arrays.IntegerArray(numbers.fill_null(0).to_numpy()[codes], ~valid[codes])
        return cls(values=pd.Series(values, index=text.index, name=text.name, copy=False), present=_present(text),
                   valid=valid[codes], float_format=dotted[codes])


@dataclass(frozen=True)
class ParsedTimes(ParsedText):
    """ISO datetime text: datetime64[ns] values, NaT where the text is not ISO or not a real date in range."""

    @classmethod
    def of(cls, text: pd.Series) -> "ParsedTimes":
        distinct, codes = _distinct(text)
        iso = _matches(distinct, ISO_DATETIME_TEXT)
        trimmed = _trimmed_where(iso, distinct)
        real = iso & _real_datetimes(trimmed)
        # pyarrow reads every ISO form the grammar allows; only real dates in range reach it, as it raises on others.
        stamps = pc.cast(pc.if_else(pa.array(real), trimmed, None), pa.timestamp("ns"))
        values = stamps.to_numpy(zero_copy_only=False)[codes]
        return cls(values=pd.Series(values, index=text.index, dtype="datetime64[ns]", name=text.name, copy=False),
                   present=_present(text))


@dataclass(frozen=True)
class ParsedNumbers(ParsedText):
    """VALUENUM text: float64 of the strict grammar (inf where it overflows), and which rows are
    grammatical numbers or inf/NaN tokens."""

    numeric: np.ndarray
    nonfinite: np.ndarray

    @classmethod
    def of(cls, text: pd.Series) -> "ParsedNumbers":
        distinct, codes = _distinct(text)
        numeric = _matches(distinct, NUMBER_TEXT)
        numbers = pc.cast(_trimmed_where(numeric, distinct), pa.float64())
        values = numbers.to_numpy(zero_copy_only=False)[codes]
        # The two grammars share no text, so only values that are not numbers can be inf or NaN tokens.
        others = pc.is_valid(distinct).to_numpy(zero_copy_only=False) & ~numeric
        nonfinite = _matches(distinct, NONFINITE_TEXT) if others.any() else np.zeros(len(distinct), bool)
        return cls(values=pd.Series(values, index=text.index, dtype="float64", name=text.name, copy=False),
                   present=_present(text), numeric=numeric[codes], nonfinite=nonfinite[codes])


@dataclass(frozen=True)
class ParsedFlags(ParsedText):
    """FLAG text, stripped and in lower case."""

    @classmethod
    def of(cls, text: pd.Series) -> "ParsedFlags":
        return cls(values=text.str.strip().str.lower(), present=_present(text))


_SHARED: ContextVar[Mapping[str, ParsedText] | None] = ContextVar("shared_parses", default=None)


@contextmanager
def sharing_parses(parses: Mapping[str, ParsedText]) -> Iterator[None]:
    """Within the block, a registered check handed (the non-null rows of) a parsed column reads its parse,
    by column name, instead of parsing the text again; any other text it parses itself.

    ``parses`` must be of the frame being validated, as :func:`parse_columns` makes them.
    """
    token = _SHARED.set(parses)
    try:
        yield
    finally:
        _SHARED.reset(token)


def parsed(text: pd.Series, kind: type[P]) -> tuple[P, slice | np.ndarray]:
    """``text`` parsed as ``kind``, and the parsed rows it holds: the shared parse of its column when
    one covers these rows (see :func:`sharing_parses`), else a parse of ``text`` itself."""
    shared = (_SHARED.get() or {}).get(text.name)
    if type(shared) is kind:
        rows = shared.rows(text)
        if rows is not None:
            return shared, rows
    return kind.of(text), slice(None)


def parse_columns(schema: pandera.DataFrameSchema, frame: pd.DataFrame) -> dict[str, ParsedText]:
    """Each column of ``frame`` that ``schema`` checks with registered checks, parsed once for all of them."""
    parses = {}
    for name, column in schema.columns.items():
        kinds = {PARSED_AS[check.name] for check in column.checks if check.name in PARSED_AS}
        if name in frame and len(kinds) == 1:
            parses[name] = kinds.pop().of(frame[name])
    return parses


# -- registered checks on raw text -----------------------------------------------------------
@extensions.register_check_method(check_type="vectorized")
def id_positive_integer(text: pd.Series) -> pd.Series:
    """A positive integer below 10^18, optionally written with a '.0' tail."""
    ids, rows = parsed(text, ParsedIds)
    return _answer(text, ids.valid[rows])


@extensions.register_check_method(check_type="vectorized")
def id_float_format(text: pd.Series) -> pd.Series:
    """Not an integer written as a float ('123.0')."""
    ids, rows = parsed(text, ParsedIds)
    return _answer(text, ~ids.float_format[rows])


@extensions.register_check_method(check_type="vectorized")
def valuenum_numeric(text: pd.Series) -> pd.Series:
    """A plain decimal number (inf and NaN tokens are left to ``valuenum_finite``)."""
    numbers, rows = parsed(text, ParsedNumbers)
    return _answer(text, (numbers.numeric | numbers.nonfinite)[rows])


@extensions.register_check_method(check_type="vectorized")
def valuenum_finite(text: pd.Series) -> pd.Series:
    """Not inf, -inf, NaN, nor a number that overflows float64 (1e309)."""
    numbers, rows = parsed(text, ParsedNumbers)
    overflow = np.isinf(numbers.values.to_numpy())
    return _answer(text, ~(numbers.nonfinite | overflow)[rows])


@extensions.register_check_method(statistics=["bound"], check_type="vectorized")
def valuenum_bound(text: pd.Series, *, bound: float) -> pd.Series:
    """|VALUENUM| within the configured bound (finite overflow is ``valuenum_finite``'s)."""
    numbers, rows = parsed(text, ParsedNumbers)
    magnitude = np.abs(numbers.values.to_numpy()[rows])
    return _answer(text, ~((magnitude > bound) & (magnitude < float("inf"))))


@extensions.register_check_method(check_type="vectorized")
def ref_range_numeric(text: pd.Series) -> pd.Series:
    """A reference range bound is a finite number by VALUENUM's strict grammar (anything else becomes null)."""
    numbers, rows = parsed(text, ParsedNumbers)
    return _answer(text, (numbers.numeric & np.isfinite(numbers.values.to_numpy()))[rows])


@extensions.register_check_method(check_type="vectorized")
def datetime_iso(text: pd.Series) -> pd.Series:
    """ISO 8601 'YYYY-MM-DD HH:MM[:SS[.f]]' without a time zone, as MIMIC writes it, and a real date."""
    times, rows = parsed(text, ParsedTimes)
    return _answer(text, times.values.notna().to_numpy()[rows])


@extensions.register_check_method(check_type="vectorized")
def edregtime_iso(text: pd.Series) -> pd.Series:
    """EDREGTIME is a time by ``datetime_iso``'s grammar (anything else becomes null, and rejects no admission)."""
    times, rows = parsed(text, ParsedTimes)
    return _answer(text, times.values.notna().to_numpy()[rows])


@extensions.register_check_method(check_type="vectorized")
def flag_value(text: pd.Series) -> pd.Series:
    """FLAG is 'abnormal' or 'delta' (any case); empty means normal."""
    flags, rows = parsed(text, ParsedFlags)
    return _answer(text, flags.values.isin(FLAGS).to_numpy()[rows])


# The parse each registered check reads: the checks of one column share it.
PARSED_AS: dict[str, type[ParsedText]] = {
    "id_positive_integer": ParsedIds,
    "id_float_format": ParsedIds,
    "datetime_iso": ParsedTimes,
    "edregtime_iso": ParsedTimes,
    "valuenum_numeric": ParsedNumbers,
    "valuenum_finite": ParsedNumbers,
    "valuenum_bound": ParsedNumbers,
    "ref_range_numeric": ParsedNumbers,
    "flag_value": ParsedFlags,
}


# -- helpers -----------------------------------------------------------------------------------
def _arrow(text: pd.Series) -> pa.Array | pa.ChunkedArray:
    return pa.array(text, type=pa.large_string(), from_pandas=True)


def _distinct(text: pd.Series) -> tuple[pa.Array, np.ndarray]:
    """The distinct values of ``text`` (null among them) and, per row, the position of its value there.

    Raw columns repeat their values (IDs, chart times, flags), so parsing the distinct values and
    spreading the results back by position is much faster than parsing every row.
    """
    arrow = _arrow(text)
    if isinstance(arrow, pa.ChunkedArray):
        arrow = arrow.combine_chunks()
    encoded = pc.dictionary_encode(arrow, null_encoding="encode")
    return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False)


def _trimmed_where(keep: np.ndarray, distinct: pa.Array) -> pa.Array:
    """The distinct values where ``keep`` (those that follow a grammar), whitespace trimmed; null elsewhere."""
    return pc.utf8_trim_whitespace(pc.if_else(pa.array(keep), distinct, None))


def _filled(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _matches(arrow: pa.Array | pa.ChunkedArray, pattern: str) -> np.ndarray:
    return _filled(pc.match_substring_regex(arrow, f"^(?:{pattern})$"))


def _present(text: pd.Series) -> np.ndarray:
    return text.notna().to_numpy()


def _answer(text: pd.Series, passed: np.ndarray) -> pd.Series:
    return pd.Series(passed, index=text.index, dtype=bool)


_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
_NO_DATETIME = "0000-00-00 00:00:00"  # stands in for null text while the date fields are read


def _real_datetimes(trimmed: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether ISO-shaped text ('YYYY-MM-DD?hh:mm[:ss...]', or null) names a real instant in :data:`YEARS`:
    the calendar date exists (leap years included), hours < 24, minutes and seconds < 60."""
    # Each value as its first 19 characters ('YYYY-MM-DD hh:mm' padded with '0' seconds), one byte each.
    head = pc.utf8_rpad(pc.utf8_slice_codeunits(pc.fill_null(trimmed, _NO_DATETIME), 0, 19), 19, "0")
    fixed = pc.cast(head, pa.binary(19))
    if isinstance(fixed, pa.ChunkedArray):
        fixed = fixed.combine_chunks()
    if len(fixed) == 0:
        return np.zeros(0, bool)
    raw = np.frombuffer(fixed.buffers()[1], np.uint8, count=19 * len(fixed), offset=19 * fixed.offset)
    digits = raw.reshape(len(fixed), 19).astype(np.int16) - ord("0")

    def field(start: int, width: int) -> np.ndarray:
        value = np.zeros(len(digits), np.int16)
        for position in range(start, start + width):
            value = value * 10 + digits[:, position]
        return value

    year, month, day = field(0, 4), field(5, 2), field(8, 2)
    hour, minute, second = field(11, 2), field(14, 2), field(17, 2)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    days = _DAYS_IN_MONTH[np.clip(month, 0, 12)] + (leap & (month == 2))
    return ((year >= YEARS[0]) & (year <= YEARS[1]) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= days)
            & (hour < 24) & (minute < 60) & (second < 60))
