"""schemas/catalogue.py and schemas/checks.py: the catalogue is well formed and each registered check accepts and rejects the right text."""

from __future__ import annotations

import importlib
import itertools
import math
import subprocess
import sys
import types
from datetime import datetime
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.flow import ORDER

STAGE_ORDER = ORDER.index
from schemas.catalogue import (CANNOT_RUN, CANNOT_RUN_CHECKS, CHECKS, ERROR, INFO, OFF, SEVERITIES, WARNING, CheckInfo,
                               check_info, collect_checks)
from schemas.checks import (NUMBER_TEXT, PARSED_AS, ParsedFlags, ParsedIds, ParsedNumbers, ParsedTimes, _real_datetimes,
                            matches, number_values, parse_columns, parse_datetime_text, sharing_parses)
from schemas import catalogue as catalogue_module
from schemas.raw import RawAdmissions, RawLabEvents, RawLabItems

ROOT = Path(__file__).resolve().parents[2]


def _passes(check: pa.Check, values: list[str]) -> list[bool]:
    """Run a registered check on text as pandera does (nulls are dropped before the check)."""
    return check(pd.Series(values, dtype="str")).check_output.tolist()


# -- the catalogue ------------------------------------------------------------------------------
def test_catalogue_ids_are_unique_and_keyed_by_id():
    ids = [info.id for info in CHECKS.values()]
    assert len(ids) == len(set(ids)) == len(CHECKS)
    assert all(CHECKS[key].id == key for key in CHECKS)


def test_each_stage_declares_its_checks_in_its_schema_module_and_the_catalogue_finds_them():
    """A stage's checks live in ``schemas/<stage>.py`` (``CHECKS``): schemas/catalogue.py names no stage module, so a
    new stage's checks reach the catalogue, the config's [severity] and `badpoints checks` from its schema alone."""
    from pipeline.stages import STAGES

    source = Path(catalogue_module.__file__).read_text(encoding="utf-8")
    for stage in STAGES:
        module = importlib.import_module(f"schemas.{stage.name}")
        declared = getattr(module, "CHECKS", ())
        assert declared, stage.name
        # Its own checks, and the run's check of each admission drop its reasons declare (Reason.drops)
        drops = {reason.drops.check for reason in stage.reasons if reason.drops is not None}
        assert {info.stage for info in declared if info.id not in drops} == {stage.name}
        assert {info.id for info in declared if info.stage == "flow"} == drops
        assert all(CHECKS[info.id] is info for info in declared)
        assert f"schemas.{stage.name}" not in source and f"schemas/{stage.name}.py" not in source
    # meds: a MEDS dataset's checks, reported instead of the stages' (pipeline/meds)
    assert {info.stage for info in CHECKS.values()} == {"load", "raw", "meds", "check", "all", "flow",
                                                        *(s.name for s in STAGES)}


def test_a_check_declared_twice_is_refused_naming_both_modules():
    first = (CheckInfo("same_id", "clean", WARNING, "a title", "Some advice."),)
    second = (CheckInfo("other_id", "scale", INFO, "a title", "Some advice."),
              CheckInfo("same_id", "scale", ERROR, "another title", "Other advice."))
    assert list(collect_checks([("schemas.first", first), ("schemas.second", second[:1])])) == ["same_id", "other_id"]
    with pytest.raises(ValueError, match="'same_id' is declared twice: in schemas.first and schemas.second"):
        collect_checks([("schemas.first", first), ("schemas.second", second)])


def test_the_catalogue_refuses_a_stage_check_that_reuses_a_listed_id(monkeypatch):
    clash = types.ModuleType("schemas.clash")
    clash.CHECKS = (CheckInfo("file_missing", "clean", WARNING, "a title", "Some advice."),)
    monkeypatch.setattr(catalogue_module, "_declaring_modules", lambda: [clash])
    with pytest.raises(ValueError, match="'file_missing' is declared twice: in schemas.catalogue and schemas.clash"):
        len(type(CHECKS)())


def test_checks_are_listed_in_the_flow_order_each_stage_as_declared():
    """`badpoints checks` and the JUnit file list reading's checks, the raw tables', those of every stage, then
    each stage's in flow order, and the run's last; a stage's checks keep the order of its ``CHECKS``."""
    from schemas.catalogue import in_flow_order
    from pipeline.stages import STAGES

    listed = in_flow_order(CHECKS.values(), ORDER.names)
    runs = [stage for stage, _ in itertools.groupby(info.stage for info in listed)]
    assert runs == ["load", "raw", "all", *(s.name for s in ORDER.all if s.name not in ("load", "raw"))]
    assert runs[-1] == "flow"
    for stage in STAGES:
        assert [info for info in listed if info.stage == stage.name] == [
            info for info in importlib.import_module(f"schemas.{stage.name}").CHECKS if info.stage == stage.name]


def test_only_reading_checks_mean_the_run_could_not_happen():
    assert CANNOT_RUN_CHECKS == tuple(check for check, info in CHECKS.items() if info.locked == CANNOT_RUN)
    assert {CHECKS[check].stage for check in CANNOT_RUN_CHECKS} == {"load"}


def test_reading_the_catalogue_does_not_load_torch():
    """The graph stage's checks are in schemas/graph.py, which loads torch only when a graph is checked: validate
    stays light."""
    code = ("import sys; from schemas.catalogue import CHECKS; assert CHECKS['graph_finite'].stage == 'graph'; "
            "import pipeline.cli; assert 'torch' not in sys.modules, 'torch loaded'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("info", list(CHECKS.values()), ids=lambda info: info.id)
def test_catalogue_entry_is_complete(info: CheckInfo):
    assert info.stage in {*STAGE_ORDER, "all"}  # the report's stage order, or every stage
    assert info.severity in {ERROR, WARNING, INFO, OFF}
    assert info.title.strip() == info.title and info.title
    assert info.advice.strip() and info.advice.endswith(".")
    if info.severity == OFF:  # off by default: the config may turn it on, and its advice says how
        assert info.locked is None
        assert "unless [severity] turns it on" in info.advice


def test_checks_off_by_default_are_those_a_stage_counts_again():
    """Outpatient rows and rows charted outside their stay are counted where a stage handles them (the clean
    stage's quarantine_outpatient, the bucket stage's own checks), so the raw checks that also find them are off
    by default; their advice names the checks that count those rows."""
    off = {check: info for check, info in CHECKS.items() if info.severity == OFF}
    assert sorted(off) == ["charttime_outside_stay", "hadm_id_missing"]
    assert {info.stage for info in off.values()} == {"raw"}
    assert "quarantine_outpatient" in off["hadm_id_missing"].advice
    for counted in ("from_ed_stay", "before_admission", "after_discharge", "beyond_max_stay"):
        assert counted in CHECKS and counted in off["charttime_outside_stay"].advice
    assert "quarantine_outpatient" in CHECKS


def test_severities_are_error_warning_info_off():
    assert SEVERITIES == ("error", "warning", "info", "off")


def test_check_info_returns_the_entry():
    assert check_info("valuenum_finite") is CHECKS["valuenum_finite"]
    assert check_info("id_float_format").severity == WARNING


def test_check_info_names_the_known_checks_on_an_unknown_id():
    with pytest.raises(KeyError) as excinfo:
        check_info("valuenum_finit")
    message = str(excinfo.value)
    assert "'valuenum_finit'" in message
    assert "valuenum_finite" in message and "file_missing" in message
    assert ", ".join(sorted(CHECKS)) in message  # every known id, in order


def test_catalogue_entries_are_frozen():
    with pytest.raises(AttributeError):
        CHECKS["id_missing"].severity = WARNING  # type: ignore[misc]


# -- matches ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["str", object])
def test_matches_is_a_whole_value_match_with_null_false(dtype):
    text = pd.Series(["12", "12a", "a12", None, ""], index=pd.Index([5, 6, 7, 8, 9], name="line"), dtype=dtype)
    matched = matches(text, r"[0-9]+")
    assert matched.dtype == bool
    assert matched.index.equals(text.index)
    assert matched.tolist() == [True, False, False, False, False]


def test_matches_groups_an_alternation_as_a_whole():
    assert matches(pd.Series(["ab", "abx", "xcd", "cd"], dtype="str"), "ab|cd").tolist() == [True, False, False, True]


def test_number_values_reads_only_the_strict_grammar():
    text = pd.Series(["1.", ".5", "+2E5", " 2 ", "1e309", "-9e308", "1e-400", "1,234", "inf", "abc", None],
                     index=pd.Index(range(10, 21), name="line"), dtype="str")
    values = number_values(text)
    assert values.dtype == "float64"
    assert values.index.equals(text.index)
    assert values.iloc[:7].tolist() == [1.0, 0.5, 2e5, 2.0, float("inf"), float("-inf"), 0.0]
    assert values.iloc[7:].isna().all()


_GRAMMAR_NUMBER = st.from_regex(r"[ \t]?[+-]?([0-9]{1,20}\.?[0-9]{0,20}|\.[0-9]{1,20})([eE][+-]?[0-9]{1,3})?[ \t]?",
                                fullmatch=True)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(st.lists(st.one_of(_GRAMMAR_NUMBER, st.text(max_size=8)), min_size=1, max_size=10))
def test_number_values_agree_with_python_float(texts):
    text = pd.Series(texts, dtype="str")
    numeric = matches(text, NUMBER_TEXT)
    for raw, ok, value in zip(texts, numeric, number_values(text)):
        if ok:
            assert value == float(raw), raw
        else:
            assert math.isnan(value), raw


# -- registered checks on raw text ----------------------------------------------------------------
@pytest.mark.parametrize(("text", "ok"), [
    ("1", True), ("+0123", True), ("123.0", True), (" 7 ", True), ("123.00", True), ("9" * 18, True),
    ("0", False), ("00", False), ("-3", False), ("1.5", False), ("abc", False), ("1,234", False),
    ("1" * 19, False), ("1e3", False), ("", False),
])
def test_id_positive_integer(text, ok):
    assert _passes(pa.Check.id_positive_integer(), [text]) == [ok]


def test_checks_accept_only_ascii_digits():
    """Non-ASCII digits ('1\u0661', fullwidth '\uff12') would crash the int64 cast after passing a Unicode \\d."""
    text = ["1\u0661", "2\uff13", "\u0661"]
    assert _passes(pa.Check.id_positive_integer(), text) == [False, False, False]
    assert _passes(pa.Check.valuenum_numeric(), text) == [False, False, False]
    assert _passes(pa.Check.datetime_iso(), ["2101-10-2\u0661 19:08:00"]) == [False]


@pytest.mark.parametrize(("text", "ok"), [
    ("123", True), ("+0123", True), ("abc", True), ("123.0", False), (" 5.000 ", False), ("1.5", True),
])
def test_id_float_format(text, ok):
    assert _passes(pa.Check.id_float_format(), [text]) == [ok]


@pytest.mark.parametrize(("text", "ok"), [
    ("1", True), ("-1.5", True), (" .5 ", True), ("1.", True), ("1e-3", True), ("+2E5", True),
    ("inf", True), ("-Infinity", True), ("NaN", True),  # left to valuenum_finite
    ("1,234", False), ("<0.01", False), ("abc", False), ("0x10", False), ("1_000", False), ("", False), ("-", False),
])
def test_valuenum_numeric(text, ok):
    assert _passes(pa.Check.valuenum_numeric(), [text]) == [ok]


@pytest.mark.parametrize(("text", "ok"), [
    ("1", True), ("-1e300", True), ("1e-400", True), ("abc", True),  # not a number: valuenum_numeric's
    ("inf", False), ("-INF", False), (" nan ", False), ("+infinity", False), ("1e309", False), ("-9e308", False),
])
def test_valuenum_finite(text, ok):
    assert _passes(pa.Check.valuenum_finite(), [text]) == [ok]


@pytest.mark.parametrize(("text", "ok"), [
    ("5", True), ("-5", True), ("5.0", True), ("0", True), ("6", False), ("-6", False), ("5.0000001", False),
    ("1e309", True), ("inf", True), ("abc", True),  # non-finite and non-numeric text belong to other checks
])
def test_valuenum_bound(text, ok):
    assert _passes(pa.Check.valuenum_bound(bound=5), [text]) == [ok]


def test_valuenum_bound_keeps_its_bound_as_a_statistic():
    check = pa.Check.valuenum_bound(bound=1e10)
    assert check.name == "valuenum_bound"
    assert check.statistics == {"bound": 1e10}


@pytest.mark.parametrize(("text", "ok"), [
    ("2101-10-20 19:08:00", True), ("2101-10-20T19:08", True), ("2101-10-20 19:08:00.123456789", True),
    ("  2101-10-20 19:08:00 ", True), ("1678-01-01 00:00:00", True), ("2261-12-31 23:59:59", True),
    ("10/23/64 21:09", False), ("2101-02-30 10:00:00", False), ("2300-01-01 00:00:00", False),
    ("1677-12-31 00:00:00", False), ("2262-01-01 00:00:00", False), ("2101-10-20 19:08:00+00:00", False),
    ("2101-10-20 19:08:00Z", False), ("2101-10-20", False), ("2101-10-20 25:00:00", False),
    ("2101-10-20 19:08:00.1234567890", False), ("", False),
])
def test_datetime_iso(text, ok):
    assert _passes(pa.Check.datetime_iso(), [text]) == [ok]


@pytest.mark.parametrize(("text", "ok"), [
    ("abnormal", True), ("ABNORMAL", True), (" delta ", True), ("high", False), ("", False), ("normal", False),
])
def test_flag_value(text, ok):
    assert _passes(pa.Check.flag_value(), [text]) == [ok]


def test_checks_leave_nulls_to_the_schema():
    values = pd.Series(["abc", None], dtype="str")
    for check in (pa.Check.id_positive_integer(), pa.Check.valuenum_numeric(), pa.Check.datetime_iso(),
                  pa.Check.flag_value()):
        assert check(values).check_output.tolist() == [False]


# -- parse_datetime_text ------------------------------------------------------------------------------
def test_parse_datetime_text_returns_nanoseconds_with_nat_for_bad_text():
    text = pd.Series(["2101-10-20 19:08:00", "2101-10-20T19:08", "2101-02-30 10:00:00", None, "9999-12-31 23:59:59"],
                     index=pd.Index([4, 5, 6, 7, 8], name="line"), dtype="str")
    parsed = parse_datetime_text(text)
    assert parsed.dtype == "datetime64[ns]"
    assert parsed.index.equals(text.index)
    assert parsed.tolist()[:2] == [pd.Timestamp("2101-10-20 19:08:00"), pd.Timestamp("2101-10-20 19:08:00")]
    assert parsed.iloc[2:].isna().all()


def test_parse_datetime_text_of_nothing_is_still_nanoseconds():
    assert parse_datetime_text(pd.Series([], dtype="str")).dtype == "datetime64[ns]"
    assert parse_datetime_text(pd.Series([None, None], dtype="str")).dtype == "datetime64[ns]"


@settings(derandomize=True, max_examples=100, deadline=None)
@given(
    st.datetimes(min_value=datetime(1678, 1, 1), max_value=datetime(2261, 12, 31, 23, 59, 59)),
    st.sampled_from([" ", "T"]),
    st.sampled_from(["%Y-%m-%d{}%H:%M:%S.%f", "%Y-%m-%d{}%H:%M:%S", "%Y-%m-%d{}%H:%M"]),
)
def test_parse_datetime_text_round_trips_iso_text(moment, sep, pattern):
    text = moment.strftime(pattern.format(sep))
    expected = pd.Timestamp(datetime.strptime(text, pattern.format(sep)))
    parsed = parse_datetime_text(pd.Series([text], dtype="str"))
    assert parsed.tolist() == [expected]
    assert _passes(pa.Check.datetime_iso(), [text]) == [True]


# -- the strict numeric grammar -------------------------------------------------------------------
_NUMBERISH = st.from_regex(r"\s?[+-]?([0-9]{0,12}\.?[0-9]{0,6}|inf|nan)([eE][+-]?[0-9]{1,3})?\s?", fullmatch=True)
_VALUENUM = [pa.Check.valuenum_numeric(), pa.Check.valuenum_finite(), pa.Check.valuenum_bound(bound=1e10)]


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.lists(st.one_of(_NUMBERISH, st.text(max_size=12),
                          st.sampled_from(["1e10", "1e11", "-1e10", "9e308", "1e309", "\uff11\uff12", "1\x1c"])),
                min_size=1, max_size=10))
def test_valuenum_checks_never_pass_a_non_finite_or_unparseable_value(texts):
    values = pd.Series(texts, dtype="str")
    passed = pd.concat([check(values).check_output for check in _VALUENUM], axis=1).all(axis=1)
    for text, ok in zip(texts, passed):
        if ok:
            number = float(text)
            assert math.isfinite(number) and abs(number) <= 1e10, text


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.sampled_from(["1677", "1678", "1900", "2000", "2100", "2104", "2261", "2262", "0000", "9999"]),
    st.integers(0, 13), st.integers(0, 32), st.sampled_from([" ", "T"]), st.integers(0, 25), st.integers(0, 61),
    st.one_of(st.just(""), st.integers(0, 61).map(":{:02d}".format),
              st.tuples(st.integers(0, 61), st.text("0123456789", min_size=1, max_size=9)).map(
                  lambda s: f":{s[0]:02d}.{s[1]}")),
), min_size=1, max_size=20))
def test_parse_datetime_text_agrees_with_pandas_on_every_iso_shaped_text(fields):
    """Impossible dates (Feb 29 of 2100, day 31 of April, hour 24, second 60) are NaT exactly where pandas says."""
    texts = [f"{y}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}{rest}" for y, mo, d, sep, h, mi, rest in fields]
    text = pd.Series(texts, dtype="str")
    reference = pd.to_datetime(text, format="ISO8601", errors="coerce")
    reference = reference.where(reference.dt.year.between(1678, 2261)).astype("datetime64[ns]")
    pd.testing.assert_series_equal(parse_datetime_text(text), reference)


# -- each column parsed once ------------------------------------------------------------------------
def test_parsed_ids_values_and_answers():
    text = pd.Series(["+0123", "123.0", " 7 ", "abc", None, "123"], index=pd.Index(range(3, 9), name="line"),
                     dtype="str")
    ids = ParsedIds.of(text)
    assert str(ids.values.dtype) == "Int64" and ids.values.index.equals(text.index)
    assert ids.values.tolist() == [123, 123, 7, pd.NA, pd.NA, 123]
    assert ids.valid.tolist() == [True, True, True, False, False, True]
    assert ids.float_format.tolist() == [False, True, False, False, False, False]
    assert ids.present.tolist() == [True, True, True, True, False, True]


def test_parsed_numbers_values_and_answers():
    numbers = ParsedNumbers.of(pd.Series(["1.5", "inf", "1e309", "<1", None, "1.5"], dtype="str"))
    values = numbers.values.tolist()
    assert values[0] == values[5] == 1.5 and values[2] == math.inf
    assert all(math.isnan(value) for value in values[1:2] + values[3:5])
    assert numbers.numeric.tolist() == [True, False, True, False, False, True]
    assert numbers.nonfinite.tolist() == [False, True, False, False, False, False]


def test_parse_columns_parses_each_checked_column_as_its_checks_read_it():
    frame = pd.DataFrame({"HADM_ID": ["1"], "ITEMID": ["2"], "CHARTTIME": ["2101-01-01 00:00"], "VALUE": ["x"],
                          "VALUENUM": ["1"], "FLAG": [None], "EXTRA": ["y"]}, dtype="str")
    parses = parse_columns(RawLabEvents.to_schema(), frame)
    assert {name: type(parse) for name, parse in parses.items()} == {
        "HADM_ID": ParsedIds, "ITEMID": ParsedIds, "CHARTTIME": ParsedTimes, "VALUENUM": ParsedNumbers,
        "FLAG": ParsedFlags}


def test_every_check_of_the_raw_schemas_says_what_it_reads():
    used = {check.name for model in (RawAdmissions, RawLabItems, RawLabEvents)
            for column in model.to_schema().columns.values() for check in column.checks}
    assert used == set(PARSED_AS)
    assert all(CHECKS[name].stage == "raw" for name in PARSED_AS)


def test_checks_read_the_shared_parse_of_the_rows_they_are_handed():
    text = pd.Series(["1", "2", None, "4"], index=pd.Index([2, 3, 4, 5], name="line"), name="HADM_ID", dtype="str")
    shared = ParsedIds.of(pd.Series(["x", "2", None, "x"], index=text.index, dtype="str"))  # planted answers
    with sharing_parses({"HADM_ID": shared}):
        assert pa.Check.id_positive_integer()(text).check_output.tolist() == [False, True, False]  # nulls dropped
        assert pa.Check.id_positive_integer()(text.fillna("3")).check_output.tolist() == [False, True, False, False]
        other_rows = text.set_axis([12, 13, 14, 15])
        assert pa.Check.id_positive_integer()(other_rows).check_output.tolist() == [True, True, True]
        same_length = text.fillna("3").set_axis([12, 13, 14, 15])  # as many rows as the parse, other lines
        assert pa.Check.id_positive_integer()(same_length).check_output.tolist() == [True, True, True, True]
        assert pa.Check.id_positive_integer()(text.rename("ITEMID")).check_output.tolist() == [True, True, True]
        assert pa.Check.datetime_iso()(text).check_output.tolist() == [False, False, False]  # another kind of parse
    assert pa.Check.id_positive_integer()(text).check_output.tolist() == [True, True, True]


def test_a_shared_time_parse_serves_the_non_null_rows_a_check_is_handed():
    index = pd.Index([2, 3, 4], name="line")
    text = pd.Series(["2101-01-01 00:00", None, "2101-01-02 00:00"], index=index, name="CHARTTIME", dtype="str")
    planted = ParsedTimes.of(pd.Series(["x", None, "2101-01-02 00:00"], index=index, name="CHARTTIME", dtype="str"))
    assert planted.present.tolist() == [True, False, True]
    with sharing_parses({"CHARTTIME": planted}):
        assert pa.Check.datetime_iso()(text).check_output.tolist() == [False, True]  # the planted answer
    assert pa.Check.datetime_iso()(text).check_output.tolist() == [True, True]


@pytest.mark.parametrize(("text", "real"), [
    ("2000-02-29 00:00", True),  # divisible by 400: a leap year
    ("2104-02-29 00:00", True),
    ("1900-02-29 00:00", False),  # divisible by 100 only: not a leap year
    ("2100-02-29 00:00", False),
    ("2101-02-29 00:00", False),
    ("2101-04-31 00:00", False),
    ("2101-12-31 23:59:59", True),
])
def test_real_datetimes_follow_the_gregorian_calendar(text, real):
    assert _real_datetimes(pa_arrow.array([text])).tolist() == [real]


def test_real_datetimes_answer_one_value_per_text_of_any_layout():
    chunked = pa_arrow.chunked_array([["2101-01-31 00:00", None], [], ["2101-02-30 00:00", "2101-03-01 12:00"]])
    assert _real_datetimes(chunked).tolist() == [True, False, False, True]
    assert _real_datetimes(pa_arrow.array([], pa_arrow.string())).shape == (0,)


def test_a_shared_number_parse_serves_the_non_null_rows_a_check_is_handed():
    index = pd.Index([2, 3, 4], name="line")
    text = pd.Series(["1.5", None, "2"], index=index, name="VALUENUM", dtype="str")
    planted = ParsedNumbers.of(pd.Series(["x", None, "2"], index=index, name="VALUENUM", dtype="str"))
    assert planted.present.tolist() == [True, False, True]
    with sharing_parses({"VALUENUM": planted}):
        assert pa.Check.valuenum_numeric()(text).check_output.tolist() == [False, True]  # the planted answer
    assert pa.Check.valuenum_numeric()(text).check_output.tolist() == [True, True]


def test_a_schema_finds_the_same_failures_with_shared_parses():
    frame = pd.DataFrame({
        "SUBJECT_ID": ["1", "0", None, "4.0"], "HADM_ID": ["123.0", None, "101", "x"],
        "ITEMID": ["5", "6", "abc", "7"], "CHARTTIME": ["10/23/64", "2101-02-29 00:00", None, "2104-02-29T01:02"],
        "VALUE": ["a", None, "b", "c"], "VALUENUM": ["inf", "1e309", "<1", "2e10"], "FLAG": [None, "x", "delta", "X"],
    }, index=pd.Index([2, 3, 4, 5], name="line"), dtype="str")
    schema = RawLabEvents.to_schema()

    def failures():
        with pytest.raises(pa.errors.SchemaErrors) as excinfo:
            schema.validate(frame, lazy=True)
        return excinfo.value.failure_cases

    alone = failures()
    with sharing_parses(parse_columns(schema, frame)):
        shared = failures()
    pd.testing.assert_frame_equal(shared, alone)
    assert len(alone) > 10
