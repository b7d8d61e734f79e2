"""schemas/errors.py: value classes never leak values, StageError reads as documented, validation must be on."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandera.config import ValidationDepth, config_context

from schemas.errors import (
    _CLASSES,
    SAMPLE_CAP,
    StageError,
    ValidationDisabled,
    format_lines,
    require_validation,
    summarize_classes,
    value_classes,
)

# One representative value per class of ``_CLASSES``, plus the classes set outside the table.
REPRESENTATIVES = [
    ("inf", "inf"),
    ("+Infinity", "inf"),
    ("-inf", "-inf"),
    ("NaN", "nan token"),
    ("NA", "NA token"),
    ("n/a", "NA token"),
    ("10/23/64 21:09", "2-digit-year date"),
    ("10/23/2164", "month/day/year date"),
    ("2101-01-01 10:00:00+02:00", "date with time zone"),
    ("2101-01-01", "date without time"),
    ("2101-02-30 10:00:00", "ISO-shaped datetime (impossible date, or beyond 1677-2262)"),
    ("1e309", "number beyond float64"),
    ("-1E400", "number beyond float64"),
    ("1,234", "number with thousands separator"),
    ("<0.01", "censored number"),
    (">= 5", "censored number"),
    ("0", "zero"),
    ("-0.00", "zero"),
    ("-5", "negative number"),
    ("-.5e-3", "negative number"),
    ("1" * 25, "integer of 19 or more digits"),
    ("42", "positive integer"),
    ("+007", "positive integer"),
    ("1.5", "decimal number"),
    (".5e3", "decimal number"),
    ("abc", "non-numeric text, 3 chars"),
    ("a\x00bc", "text with NUL bytes, 4 chars"),
    ("", "blank text"),
    ("   ", "blank text"),
    ("\t", "blank text"),
    (None, "missing"),
]

FIXED_LABELS = {label for _, label in _CLASSES} | {"blank text", "missing", "number beyond float64"}


def _classes_of(values: list[str | None]) -> list[str]:
    return value_classes(pd.Series(values, dtype="str")).tolist()


@pytest.mark.parametrize(("value", "label"), REPRESENTATIVES)
def test_value_classes_names_each_representative_value(value, label):
    assert _classes_of([value]) == [label]


def test_every_class_label_is_produced_by_some_representative():
    produced = {label for _, label in REPRESENTATIVES}
    assert {label for _, label in _CLASSES} <= produced


def test_value_classes_keeps_index_and_returns_text():
    values = pd.Series(["inf", None, "abc"], index=pd.Index([18, 43, 100], name="line"), dtype="str")
    classes = value_classes(values)
    assert classes.index.equals(values.index)
    assert classes.dtype == "str"
    assert classes.tolist() == ["inf", "missing", "non-numeric text, 3 chars"]


def test_value_classes_treats_object_and_str_dtypes_alike():
    values = [value for value, _ in REPRESENTATIVES]
    assert value_classes(pd.Series(values, dtype=object)).tolist() == _classes_of(values)


@pytest.mark.parametrize(("value", "label"), [
    ("2101-01-01T10:00:00+02:00", "date with time zone"),
    ("2101-01-01T10:00Z", "date with time zone"),
    ("2101-02-30T10:00:00", "ISO-shaped datetime (impossible date, or beyond 1677-2262)"),
])
def test_value_classes_knows_the_iso_t_separator(value, label):
    assert _classes_of([value]) == [label]


def test_value_classes_names_ids_too_long_for_badpoints_by_digit_count():
    assert _classes_of(["1" * 18, str(2**63 - 1)]) == ["positive integer", "integer of 19 or more digits"]


def test_value_classes_calls_every_float64_overflow_beyond_float64():
    assert float("9e308") == float("inf")
    assert _classes_of(["9e308"]) == ["number beyond float64"]


_NUMBERISH = st.from_regex(r"[<>+-]?[0-9]{0,25}[.,]?[0-9]{0,4}([eE][+-]?[0-9]{1,4})?", fullmatch=True)
_DATEISH = st.from_regex(
    r"[0-9]{1,4}[-/][0-9]{1,2}[-/][0-9]{2,4}([ Tt][0-9]{2}:[0-9]{2}(:[0-9]{2})?)?(Z|[+-][0-9]{2}:[0-9]{2})?",
    fullmatch=True,
)
_ANY_TEXT = st.one_of(st.text(max_size=30), _NUMBERISH, _DATEISH, st.sampled_from([v for v, _ in REPRESENTATIVES[:-1]]))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.lists(_ANY_TEXT, min_size=1, max_size=15))
def test_value_classes_never_contain_the_value(texts):
    """The privacy guarantee: a class is a fixed label or a length, never the text itself."""
    classes = _classes_of(texts)
    for text, label in zip(texts, classes):
        by_length = {f"non-numeric text, {len(text)} chars", f"text with NUL bytes, {len(text)} chars"}
        assert label in FIXED_LABELS | by_length
        possible = FIXED_LABELS | by_length
        if len(text) > 3 and not any(text in fixed for fixed in possible):
            assert text not in label


def test_summarize_classes_counts_most_common_first_and_breaks_ties_by_label():
    classes = pd.Series(["zero", "inf", "zero", "abc", "inf", "-inf"], dtype="str")
    assert summarize_classes(classes) == "inf ×2, zero ×2, -inf ×1, 1 more classes"
    assert summarize_classes(classes, cap=5) == "inf ×2, zero ×2, -inf ×1, abc ×1"


def test_summarize_classes_at_exactly_the_cap_names_no_more_classes():
    classes = pd.Series(["inf", "inf", "zero", "abc"], dtype="str")
    assert summarize_classes(classes) == "inf ×2, abc ×1, zero ×1"


def test_summarize_classes_of_nothing_is_empty():
    assert summarize_classes(pd.Series([], dtype="str")) == ""


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["inf", "-inf", "zero", "missing", "blank text"]), min_size=1, max_size=12)
       .flatmap(lambda labels: st.tuples(st.just(labels), st.permutations(labels))))
def test_summarize_classes_does_not_depend_on_row_order(pair):
    labels, shuffled = pair
    assert summarize_classes(pd.Series(shuffled, dtype="str"), cap=2) == summarize_classes(
        pd.Series(labels, dtype="str"), cap=2
    )


@pytest.mark.parametrize(("lines", "total", "expected"), [
    ([], 0, "no line numbers"),
    ([5], 1, "line 5"),
    ([18, 43, 100], 3, "lines 18, 43, 100"),
    ([18, 43, 100], 100, "lines 18, 43, 100 (+97 more)"),
    ([7], 4, "lines 7 (+3 more)"),
    ([18], 2, "lines 18 (+1 more)"),
])
def test_format_lines(lines, total, expected):
    assert format_lines(lines, total) == expected


def _cases(n: int) -> pd.DataFrame:
    lines = [10 + i for i in range(n)]
    return pd.DataFrame({"line": lines, "value_class": ["inf" if i % 3 else "-inf" for i in range(n)]})


def test_stage_error_message_names_stage_side_table_column_check_lines_classes_and_advice():
    error = StageError(
        stage="scale", side="output", check="finite", column="z", count=3,
        failure_cases=pd.DataFrame({"line": [18, 43, 100], "value_class": ["inf", "inf", "-inf"]}),
        table="ScaledEvents", advice="Refit the scaler on the training split.",
    )
    assert str(error) == (
        "[scale:output] ScaledEvents.z finite failed on 3 rows (lines 18, 43, 100): inf ×2, -inf ×1. "
        "Refit the scaler on the training split."
    )
    assert isinstance(error, ValueError)
    assert (error.stage, error.side, error.check, error.column, error.count) == ("scale", "output", "finite", "z", 3)
    assert error.table == "ScaledEvents"
    assert error.lines == [18, 43, 100]


def test_stage_error_with_one_row_detail_and_no_table():
    error = StageError(
        stage="raw", side="input", check="valuenum_finite", column="VALUENUM", count=1,
        failure_cases=pd.DataFrame({"line": [7], "value_class": ["nan token"]}), detail="Found while parsing",
    )
    assert str(error) == (
        "[raw:input] VALUENUM valuenum_finite failed on 1 row (line 7): nan token ×1. Found while parsing"
    )


def test_stage_error_without_lines_or_classes_names_the_frame():
    error = StageError(stage="load", side="input", check="file_empty", column=None, count=0,
                       failure_cases=pd.DataFrame())
    assert str(error) == "[load:input] frame file_empty failed on 0 rows"
    assert error.lines == []


def test_stage_error_caps_failure_cases_and_counts_the_rest():
    cases = _cases(SAMPLE_CAP + 15).set_index(pd.Index(range(100, 100 + SAMPLE_CAP + 15)))
    error = StageError(stage="raw", side="input", check="valuenum_finite", column="VALUENUM",
                       count=SAMPLE_CAP + 15, failure_cases=cases, table="LABEVENTS")
    assert SAMPLE_CAP == 20
    assert len(error.failure_cases) == SAMPLE_CAP
    assert error.failure_cases.index.tolist() == list(range(SAMPLE_CAP))
    assert error.lines == list(range(10, 10 + SAMPLE_CAP))
    assert f"(lines {', '.join(str(n) for n in range(10, 30))} (+15 more))" in str(error)
    assert "failed on 35 rows" in str(error)


def test_stage_error_lines_skip_missing_line_numbers():
    error = StageError(stage="raw", side="output", check="x", column="c", count=2,
                       failure_cases=pd.DataFrame({"line": [3.0, None]}))
    assert error.lines == [3]


def test_require_validation_passes_with_pandera_defaults():
    require_validation()


def test_require_validation_allows_full_depth():
    with config_context(validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        require_validation()


def test_require_validation_refuses_data_only_depth():
    with config_context(validation_depth=ValidationDepth.DATA_ONLY):
        with pytest.raises(ValidationDisabled) as refused:
            require_validation()
    assert str(refused.value) == (
        "pandera runs only part of each schema (PANDERA_VALIDATION_DEPTH=DATA_ONLY), so some checks would silently "
        "pass. Unset PANDERA_VALIDATION_DEPTH to validate.")


def test_require_validation_refuses_disabled_validation():
    with config_context(validation_enabled=False):
        with pytest.raises(ValidationDisabled) as refused:
            require_validation()
    assert str(refused.value) == (
        "pandera validation is disabled (PANDERA_VALIDATION_ENABLED=False), so no check would run and every table "
        "would pass. Unset PANDERA_VALIDATION_ENABLED to validate.")
    require_validation()


def test_require_validation_refuses_schema_only_depth():
    with config_context(validation_depth=ValidationDepth.SCHEMA_ONLY):
        with pytest.raises(ValidationDisabled, match="PANDERA_VALIDATION_DEPTH=SCHEMA_ONLY"):
            require_validation()


def test_a_problem_of_the_whole_file_reads_without_rows():
    error = StageError(stage="load", side="input", check="file_missing", column=None, count=1,
                       failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table="LABEVENTS",
                       detail="table file not found in /data", advice="Put the file there.", whole_file=True)
    assert error.whole_file is True
    assert str(error).startswith("[load:input] LABEVENTS file_missing: table file not found in /data. ")
    assert "row" not in str(error)


@pytest.mark.parametrize(("exc", "lack"), [
    (MemoryError(), True),
    (ImportError("libtorch_cpu.so: failed to map segment from shared object"), True),
    (OSError(12, "Cannot allocate memory"), True),
    (RuntimeError("can't start new thread"), True),
    (RuntimeError("std::bad_alloc"), True),
    (SystemError("error return without exception set"), True),  # an import under ulimit -v
    (SystemError("bad argument to internal function"), False),
    (ValueError("bad value 'out of memory'"), False),  # a data value that reads like it: a ValueError is no lack
    (OSError(2, "No such file or directory"), False),
    (KeyError("ITEMID"), False),
])
def test_out_of_memory_knows_a_lack_of_memory_however_a_library_says_it(exc, lack):
    from schemas.errors import out_of_memory

    assert out_of_memory(exc) is lack


def test_out_of_memory_follows_what_an_error_was_raised_from():
    from schemas.errors import out_of_memory

    try:
        try:
            raise MemoryError
        except MemoryError as cause:
            raise RuntimeError("reading the shard failed") from cause
    except RuntimeError as raised:
        assert out_of_memory(raised)
