"""The pandera check methods that run on raw text (the catalogue of every check is :mod:`schemas.catalogue`): a
check that runs inside a pandera schema is one registered function here, besides its ``CheckInfo``.

The registered checks read a parse of their column (``ParsedIds``, ``ParsedTimes``, ...).
Within :func:`sharing_parses` they read the one the caller made, so a column is parsed once
for all of its checks and for its typed values; anywhere else they parse the text they are handed.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator, Mapping, TypeVar

import numpy as np
import pandas as pd
import pandera.pandas as pandera
import pyarrow as pa
import pyarrow.compute as pc
from pandera import extensions

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
def deathtime_iso(text: pd.Series) -> pd.Series:
    """DEATHTIME is a time by ``datetime_iso``'s grammar (anything else becomes null, and rejects no admission)."""
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
    "deathtime_iso": ParsedTimes,
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
