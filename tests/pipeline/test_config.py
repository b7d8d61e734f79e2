"""pipeline/config.py: defaults come from the sections' declarations, a user file changes only its keys, mistakes
are errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pipeline.config import (MAX_CONFIG_BYTES, RUN_SECTIONS, SECTIONS, Allowed, Config, ConfigError, RawConfig, ReportConfig,
                             documented_defaults, load_config)
from pipeline.stages.fill import FLOAT32_MAX, FillPolicy
from pipeline.stages.fill import VALUES as FILL_VALUES
from schemas.catalogue import CANNOT_RUN_CHECKS
from schemas.catalogue import CHECKS, LOCKED

ROOT = Path(__file__).resolve().parents[2]
BADPOINTS = Path(sys.executable).with_name("badpoints")


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


def test_defaults_are_the_documented_values():
    documented = tomllib.loads(documented_defaults())
    config = load_config()
    assert dataclasses.asdict(config.raw) == documented["raw"]
    assert dataclasses.asdict(config.report) == documented["report"]
    assert dict(config.severity) == documented.get("severity", {})
    assert config.source is None


def test_every_section_is_documented_once_the_stages_in_their_modules():
    """config.py declares the run's sections; each stage's section, keys and documented defaults are in its module
    (an ``Options`` its declaration names): a new stage adds its section without a line in config.py or here."""
    from pipeline.stages import STAGES

    documented = tomllib.loads(documented_defaults())
    assert list(RUN_SECTIONS) == ["load", "raw", "filters", "report"]
    assert all(section.__module__ == "pipeline.config" for section in RUN_SECTIONS.values())
    declared = {stage.options.NAME: stage for stage in STAGES if stage.options is not None}
    assert set(documented) == set(RUN_SECTIONS) | set(declared) | {"severity"} == set(SECTIONS) | {"severity"}
    assert list(declared) == [stage.options.NAME for stage in STAGES if stage.options is not None]  # flow order
    assert {"comments", "split", "encode", "scale", "fill", "bucket", "graph"} <= set(declared)
    for name, stage in declared.items():
        assert stage.options.__module__ in (f"pipeline.stages.{stage.name}", f"pipeline.stages.{stage.name}.options")
        assert set(tomllib.loads(stage.options.toml())) == {name}
    assert [f.name for f in dataclasses.fields(Config)] == [*SECTIONS, "severity", "source"]
    for line in documented_defaults().splitlines():  # every key's line is in the text `badpoints config` prints
        assert not line.strip() or line.startswith(("#", "[")) or "=" in line


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
    assert config.severity_of("hadm_id_missing") == "off"  # off by default: clean's quarantine counts its rows


def test_empty_user_file_is_the_defaults(write):
    config = load_config(write(""))
    assert (config.raw, config.report, dict(config.severity)) == (
        load_config().raw, load_config().report, {}
    )


def test_the_effective_config_is_plain_json_a_list_key_a_list():
    effective = load_config().as_json()
    assert json.loads(json.dumps(effective)) == effective
    assert effective["graph"]["admission_features"] == list(load_config().graph.admission_features)


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
    documented = tomllib.loads(documented_defaults())
    assert dataclasses.asdict(load_config().comments) == documented["comments"] == {"empty_value": "quarantine"}
    assert load_config(write('[comments]\nempty_value = "category"\n')).comments.empty_value == "category"
    with pytest.raises(ConfigError, match=r"\[comments\] empty_value must be one of quarantine, category, got 'drop'"):
        load_config(write('[comments]\nempty_value = "drop"\n'))


# -- every key declares its type and range; values that crashed a run are refused at load ------------------
@pytest.mark.parametrize(("text", "match"), [
    ("[fill]\nZ = 3\n", r"\[fill.Z\] must be a table, got 3 \(int\)"),
    ("[raw]\nstay_tolerance_hours = 2e6\n",
     r"\[raw\] stay_tolerance_hours must be a finite number in \[0, 2400\], got 2000000.0 \(float\)"),
    ("[raw]\nstay_tolerance_hours = 1e9\n", r"stay_tolerance_hours .* in \[0, 2400\], got 1000000000.0 \(float\)"),
    ("[fill.Z]\nvalue = 1e39\n",
     r"\[fill.Z\] value must be a finite number in \[-3.402823e\+38, 3.402823e\+38\], got 1e\+39 \(float\)"),
    ("[fill.CODE]\nvalue = 1e20\n", r"\[fill.CODE\] value must be a whole number in \[0, 2147483647\], got 1e\+20"),
    ("[bucket]\ninterval_hours = 1e-300\n", r"\[bucket\] interval_hours must be a finite number in \[0.001, 8784\]"),
    ('[bucket]\nmax_timestep = "forever"\n',
     r"\[bucket\] max_timestep must be a whole number in \[0, 2147483647\] or 'none', got 'forever' \(str\)"),
    ("[scale]\nwarn_bound = 1.7e308\n", r"\[scale\] warn_bound must be a finite number in \(0, 1e\+15\]"),
    ("[graph]\nlabels = 1\n", r"\[graph\] labels must be true or false, got 1 \(int\)"),
    ('[scale.policy]\n"²" = "log"\n', r"\[scale.policy\] keys must be ITEMIDs, categories, fluids or default"),
    ("[encode]\nfold_case = [true]\n", r"\[encode\] fold_case must be true or false, got \[True\] \(list\)"),
    ('[severity]\nid_missing = {level = "off"}\n', r"\[severity\] id_missing must be one of .*\(dict\)"),
], ids=["fill-not-table", "tolerance-2e6", "tolerance-1e9", "fill-beyond-float32", "code-beyond-int32",
        "tiny-interval", "max-timestep-word", "huge-warn-bound", "bool-as-int", "superscript-itemid", "list",
        "severity-table"])
def test_values_that_crashed_a_run_are_config_errors_naming_key_class_and_range(write, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(text))


def test_every_key_of_the_defaults_declares_what_it_takes():
    """The type and range of each key are declared once, in its field: a key without them would go unchecked."""
    documented = tomllib.loads(documented_defaults())
    config = load_config()
    for section, keys in documented.items():
        if section in ("severity", "fill"):
            continue
        fields = {f.name: f.metadata for f in dataclasses.fields(getattr(config, section))}
        for key in keys:
            if not fields[key].get("table"):  # a table's keys are the user's ([scale.policy]: ITEMID = policy)
                assert isinstance(fields[key].get("allowed"), Allowed), (section, key)
    for column in documented["fill"]:
        assert set(documented["fill"][column]) <= {f.name for f in dataclasses.fields(FillPolicy)}
        assert column in FILL_VALUES


def test_the_range_ends_are_accepted(write):
    config = load_config(write("[raw]\nstay_tolerance_hours = 2400\n[fill.Z]\nvalue = 3.4028234663852886e38\n"
                               "[bucket]\ninterval_hours = 0.01\nmax_timestep = 0\n"))
    assert config.raw.stay_tolerance_hours == 2400.0 and config.fill["Z"].value == FLOAT32_MAX
    assert (config.bucket.interval_hours, config.bucket.max_timestep) == (0.01, 0)


# -- severities that cannot be lowered ----------------------------------------------------------------------
LOCKED_CHECKS = sorted(check for check, info in CHECKS.items() if info.locked)


def test_the_fixed_checks_are_the_ones_without_which_a_run_could_pass_untrue():
    fixed = {info.locked: set() for info in CHECKS.values() if info.locked}
    for check, info in CHECKS.items():
        if info.locked:
            fixed[info.locked].add(check)
            assert info.severity == "error" and info.locked in LOCKED, check
    assert fixed["cannot run"] == set(CANNOT_RUN_CHECKS) == {"file_missing", "file_unreadable", "decompression_bound"}
    assert {"file_empty", "table_empty", "compression", "encoding", "missing_column"} <= fixed["table not read"]
    assert fixed["graph file"] == {"graph_finite", "graph_edge_index", "graph_index_bounds", "graph_edge_rows",
                                   "graph_node_rows", "graph_node_ids", "graph_code_range", "graph_timestep_range",
                                   "graph_label_range", "graph_pyg", "graph_empty", "graph_manifest", "graph_unsafe",
                                   "meds_export_shard"}
    assert {"z_finite", "z_error_bound", "fill_left_nulls", "step_empty"} <= fixed["stops the stages"]
    assert "graph_memory" not in LOCKED_CHECKS and "field_too_long" not in LOCKED_CHECKS


@pytest.mark.parametrize("level", ["warning", "info", "off"])
def test_a_fixed_check_cannot_be_set_below_error(write, level):
    for check in LOCKED_CHECKS:
        with pytest.raises(ConfigError, match=rf"\[severity\] {check} cannot be set to '{level}': it stays an "
                                              rf"error because {re.escape(LOCKED[CHECKS[check].locked])}"):
            load_config(write(f'[severity]\n{check} = "{level}"\n'))


def test_a_fixed_check_may_be_named_as_error_and_others_may_be_lowered(write):
    config = load_config(write('[severity]\ngraph_finite = "error"\nfile_missing = "error"\ngraph_memory = "off"\n'))
    assert config.severity_of("graph_finite") == "error" and config.severity_of("graph_memory") == "off"


def test_a_config_made_in_code_cannot_lower_a_fixed_check_either():
    with pytest.raises(ConfigError, match="graph_finite cannot be set to 'off'"):
        dataclasses.replace(load_config(), severity={"graph_finite": "off"})


# -- any TOML value for any key: a Config or a ConfigError, never another exception -------------------------
def _keys(table: dict, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key of the defaults, nested ones too ([fill.Z] value), and the tables themselves."""
    keys = []
    for key, value in table.items():
        keys.append((*path, key))
        if isinstance(value, dict):
            keys.extend(_keys(value, (*path, key)))
    return keys


DEFAULT_TABLES = tomllib.loads(documented_defaults())
KEYS = [key for key in _keys(DEFAULT_TABLES) if len(key) > 1] + [
    ("scale", "policy", "50878"), ("scale", "policy", "0"), ("severity", "id_float_format"),
    ("severity", "graph_finite"), ("severity", "table_empty"), ("severity", "file_missing")]
TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters='"\\\x7f'), max_size=12)
SCALARS = st.one_of(
    st.integers(-2**63, 2**63 - 1), st.sampled_from([0, 1, 2, -1, 2**31, 10**18]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e39, 1e308, -1e308, 5e-324, 2e6, 1e9, 0.01]),
    TEXT, st.sampled_from(["none", "off", "error", "warning", "log", "clip", "constant", "category"]), st.booleans())
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.sampled_from(["value", "policy", "a"]),
                                                                             SCALARS, max_size=2))


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"


@st.composite
def configs(draw) -> str:
    """A TOML file giving 1 to 3 keys of the defaults (or their tables) a value of any TOML type."""
    chosen = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    lines = []
    for section in dict.fromkeys(key[0] for key in chosen):
        lines.append(f"[{section}]")
        for key in (key[1:] for key in chosen if key[0] == section):
            if not any(len(other) > len(key) + 1 and other[1:len(key) + 1] == key for other in chosen):  # not
                lines.append(f"{'.'.join(json.dumps(k) for k in key)} = {_toml(draw(VALUES))}")  # a table twice
    return "\n".join(lines) + "\n"


def _loads(path: Path) -> bool:
    try:
        tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError:
        return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=configs())
def test_any_value_for_any_key_is_a_config_or_a_config_error(write, text):
    path = write(text)
    assume(_loads(path))  # keys given twice ([raw] twice) are TOML's error, not a value's
    try:
        config = load_config(path)
    except ConfigError as error:
        assert str(error).startswith(("[", "unknown")), str(error)
        return
    assert isinstance(config, Config)
    numbers = [getattr(section, f.name) for section in (config.raw, config.scale, config.bucket, config.split)
               for f in dataclasses.fields(section)]
    assert all(math.isfinite(v) for v in numbers if isinstance(v, float))


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(text="[raw]\nstay_tolerance_hours = 2e6\n")
@example(text="[fill]\nZ = 3\n")
@example(text='[severity]\ngraph_finite = "off"\n[fill.Z]\nvalue = 1e39\n')
@example(text="[bucket]\ninterval_hours = 0.01\n[raw]\nstay_tolerance_hours = 2400\n")
@given(text=configs())
def test_the_cli_runs_any_config_to_exit_0_1_or_2_without_an_internal_error(write, text):
    path = write(text)
    assume(_loads(path))
    try:
        load_config(path)
        refused = False
    except ConfigError:
        refused = True
    done = subprocess.run([str(BADPOINTS), "validate", "data/sample", "--config", str(path), "--no-cache", "-q"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stdout + done.stderr, done.stderr
    assert (done.returncode == 2 and "cannot run" in done.stderr) == refused, done.stdout + done.stderr


@pytest.mark.parametrize("device", ["/dev/zero", "fifo", "folder"])
def test_a_config_that_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path, device):
    """/dev/zero was read until memory ran out; a FIFO would block the run for ever."""
    path = Path(device)
    if device == "fifo":
        path = tmp_path / "config.fifo"
        os.mkfifo(path)
    elif device == "folder":
        path = tmp_path
    with pytest.raises(ConfigError, match=r"is not a regular file|Is a directory"):
        load_config(path)


def test_a_config_larger_than_its_bound_is_refused_naming_the_bound(tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text("# " + "x" * (MAX_CONFIG_BYTES + 10) + "\n")
    with pytest.raises(ConfigError, match=r"larger than 1,048,576 bytes"):
        load_config(path)
