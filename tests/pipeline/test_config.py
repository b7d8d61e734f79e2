"""pipeline/config.py: defaults come from defaults.toml, a user file changes only its keys, mistakes are errors."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from pipeline.config import DEFAULTS, Config, ConfigError, RawConfig, ReportConfig, load_config
from schemas.checks import CHECKS


@pytest.fixture
def write(tmp_path: Path):
    def write(text: str | bytes) -> Path:
        path = tmp_path / "badpoints.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return write


def test_defaults_are_the_values_in_defaults_toml():
    documented = tomllib.loads(DEFAULTS.read_text(encoding="utf-8"))
    config = load_config()
    assert DEFAULTS.name == "defaults.toml" and DEFAULTS.parent.name == "pipeline"
    assert dataclasses.asdict(config.raw) == documented["raw"]
    assert dataclasses.asdict(config.report) == documented["report"]
    assert dict(config.severity) == documented.get("severity", {})
    assert config.source is None


def test_default_values_and_types():
    config = load_config()
    assert config.raw == RawConfig(valuenum_abs_bound=1e10, stay_tolerance_hours=0.0)
    assert config.report == ReportConfig(max_lines=20)
    assert isinstance(config.raw.valuenum_abs_bound, float)
    assert isinstance(config.raw.stay_tolerance_hours, float)
    assert isinstance(config.report.max_lines, int)


def test_user_file_overrides_one_key_and_keeps_the_other_defaults(write):
    path = write("[raw]\nvaluenum_abs_bound = 5\n")
    config = load_config(path)
    assert config.raw.valuenum_abs_bound == 5.0 and isinstance(config.raw.valuenum_abs_bound, float)
    assert config.raw.stay_tolerance_hours == 0.0
    assert config.report.max_lines == 20
    assert config.source == str(path)


def test_user_file_sets_severities(write):
    config = load_config(write('[severity]\nid_float_format = "off"\nflag_value = "error"\n'))
    assert dict(config.severity) == {"id_float_format": "off", "flag_value": "error"}
    assert config.severity_of("id_float_format") == "off"
    assert config.severity_of("flag_value") == "error"
    assert config.severity_of("valuenum_finite") == CHECKS["valuenum_finite"].severity == "error"
    assert config.severity_of("hadm_id_missing") == "warning"


def test_empty_user_file_is_the_defaults(write):
    config = load_config(write(""))
    assert (config.raw, config.report, dict(config.severity)) == (
        load_config().raw, load_config().report, {}
    )


def test_severity_of_an_unknown_check_is_a_key_error():
    with pytest.raises(KeyError):
        load_config().severity_of("no_such_check")


@pytest.mark.parametrize(("text", "match"), [
    ("[paths]\nroot = 1\n", r"unknown section\(s\) in '.*badpoints.toml': paths"),
    ("[raw]\nvaluenum_bound = 5\n", r"unknown key\(s\) in \[raw\]: valuenum_bound; known: valuenum_abs_bound, "
                                     r"stay_tolerance_hours"),
    ("[report]\nmax_lines = \"20\"\n", r"\[report\] max_lines must be a whole number in \[1, 10000\], got '20' \(str\)"),
    ("[raw]\nvaluenum_abs_bound = true\n", r"\[raw\] valuenum_abs_bound must be a finite number > 0, got True \(bool\)"),
    ('[severity]\nvaluenum_finit = "off"\n',
     r"\[severity\] names unknown check 'valuenum_finit'; known: .*valuenum_finite"),
    ('[severity]\nid_missing = "fatal"\n', r"\[severity\] id_missing must be one of error, warning, info, off, got 'fatal' \(str\)"),
    ('[severity]\nid_missing = "Warning"\n', r"got 'Warning'"),
    ('severity = "off"\n', r"\[severity\] must be a table"),
    ("[raw\n", r"config '.*badpoints.toml' is not valid TOML"),
    ("[raw]\nvaluenum_abs_bound = 1\nvaluenum_abs_bound = 2\n", r"is not valid TOML"),
    (b"\xff\xfe[raw]\n", r"is not valid TOML"),
], ids=["unknown-section", "unknown-key", "string", "bool", "unknown-check", "bad-level", "level-case",
        "severity-not-table", "bad-toml", "duplicate-key", "not-utf8"])
def test_bad_config_is_a_config_error_naming_the_problem(write, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(text))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read config '.*nope.toml': No such file or directory"):
        load_config(tmp_path / "nope.toml")


def test_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read config .*: Is a directory"):
        load_config(tmp_path)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_config_is_frozen(write):
    config = load_config(write('[severity]\nid_float_format = "off"\n'))
    assert isinstance(config, Config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.raw = RawConfig(valuenum_abs_bound=1.0, stay_tolerance_hours=0.0)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.raw.valuenum_abs_bound = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.report.max_lines = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.severity["id_float_format"] = "error"  # type: ignore[index]


@pytest.mark.parametrize(("text", "match"), [
    ("[report]\nmax_lines = 2.5\n", r"\[report\] max_lines must be a whole number in \[1, 10000\], got 2.5 \(float\)"),
    ("[report]\nmax_lines = inf\n", r"\[report\] max_lines must be a whole number in \[1, 10000\], got inf \(float\)"),
    ("[report]\nmax_lines = 0\n", r"\[report\] max_lines must be a whole number in \[1, 10000\], got 0 \(int\)"),
    ("[report]\nmax_lines = -3\n", r"max_lines must be a whole number in \[1, 10000\], got -3 \(int\)"),
    ("[report]\nmax_lines = 10001\n", r"max_lines must be a whole number in \[1, 10000\], got 10001 \(int\)"),
    ("[raw]\nvaluenum_abs_bound = nan\n", r"\[raw\] valuenum_abs_bound must be a finite number > 0, got nan \(float\)"),
    ("[raw]\nvaluenum_abs_bound = inf\n", r"valuenum_abs_bound must be a finite number > 0, got inf"),
    ("[raw]\nvaluenum_abs_bound = 0\n", r"valuenum_abs_bound must be a finite number > 0, got 0 \(int\)"),
    ("[raw]\nvaluenum_abs_bound = -1.0\n", r"valuenum_abs_bound must be a finite number > 0, got -1.0"),
    ("[raw]\nstay_tolerance_hours = inf\n", r"\[raw\] stay_tolerance_hours must be a finite number in \[0, 2400\], got inf \(float\)"),
    ("[raw]\nstay_tolerance_hours = nan\n", r"stay_tolerance_hours must be a finite number in \[0, 2400\], got nan"),
    ("[raw]\nstay_tolerance_hours = -1\n", r"stay_tolerance_hours must be a finite number in \[0, 2400\], got -1 \(int\)"),
], ids=["fractional-max-lines", "inf-max-lines", "zero-max-lines", "negative-max-lines", "huge-max-lines",
        "nan-bound", "inf-bound", "zero-bound", "negative-bound", "inf-tolerance", "nan-tolerance",
        "negative-tolerance"])
def test_out_of_range_numbers_are_config_errors(write, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(text))


@pytest.mark.parametrize(("text", "match"), [
    ("[scale]\nmin_rows = 1\n", r"\[scale\] min_rows must be a whole number >= 2, got 1 \(int\)"),
    ("[scale]\nmin_rows = 2.5\n", r"\[scale\] min_rows must be a whole number >= 2, got 2.5 \(float\)"),
    ("[scale]\nconstant_bound = 0\n", r"\[scale\] constant_bound must be a finite number > 0, got 0 \(int\)"),
    ("[scale]\nconstant_bound = inf\n", r"constant_bound must be a finite number > 0, got inf"),
    ("[scale]\nrange_widths = nan\n", r"\[scale\] range_widths must be a finite number > 0, got nan"),
], ids=["one-row", "fractional-rows", "zero-bound", "inf-bound", "nan-widths"])
def test_scale_fallback_settings_are_checked(write, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(text))


def test_scale_fallback_settings_have_documented_defaults():
    scale = load_config().scale
    assert (scale.min_rows, scale.constant_bound, scale.range_widths) == (10, 10.0, 10.0)


@pytest.mark.parametrize(("text", "expected"), [
    ("[report]\nmax_lines = 1\n", 1),
    ("[report]\nmax_lines = 10000\n", 10_000),
    ("[report]\nmax_lines = 1e3\n", 1000),
    ("[report]\nmax_lines = 40.0\n", 40),
])
def test_whole_max_lines_in_range_are_accepted(write, text, expected):
    max_lines = load_config(write(text)).report.max_lines
    assert max_lines == expected and isinstance(max_lines, int)


def test_zero_tolerance_and_tiny_bound_are_accepted(write):
    config = load_config(write("[raw]\nstay_tolerance_hours = 0\nvaluenum_abs_bound = 1e-9\n"))
    assert (config.raw.stay_tolerance_hours, config.raw.valuenum_abs_bound) == (0.0, 1e-9)


def test_config_sections_check_their_values_when_built_directly():
    with pytest.raises(ConfigError, match="valuenum_abs_bound"):
        RawConfig(valuenum_abs_bound=float("nan"), stay_tolerance_hours=0.0)
    with pytest.raises(ConfigError, match="max_lines"):
        ReportConfig(max_lines=0)


def test_comments_policy_defaults_to_quarantine_and_may_be_category(write):
    documented = tomllib.loads(DEFAULTS.read_text(encoding="utf-8"))
    assert dataclasses.asdict(load_config().comments) == documented["comments"] == {"empty_value": "quarantine"}
    assert load_config(write('[comments]\nempty_value = "category"\n')).comments.empty_value == "category"
    with pytest.raises(ConfigError, match=r"\[comments\] empty_value must be one of quarantine, category, got 'drop'"):
        load_config(write('[comments]\nempty_value = "drop"\n'))
