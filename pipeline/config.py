"""The one configuration of badpoints: frozen sections loaded from TOML.

The run's own sections (load, raw, filters, report) are declared here, each stage's in its module (``Options``,
named in its :class:`pipeline.stages.Stage`): every key once, with its type, range, default and documentation
(:func:`pipeline.kernel.options.setting`). The documented defaults (:func:`documented_defaults`, what ``badpoints config``
prints and the loader reads the defaults from) are generated from these declarations. :class:`Config` holds one
field per section, the stages' in flow order, so a new stage's section needs no line here. Only the CLI and
``flow.py`` read the whole config; stages get their section (``context.options``) or keyword arguments.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from pipeline.reading.load import MAX_EXPANDED_BYTES, MAX_EXPANSION_RATIO, MAX_FIELD_CHARS
from pipeline.kernel.options import (POSITIVE, Allowed, ConfigError, Section, comments, require,  # noqa: F401 (re-exported)
                                     setting)
from pipeline.kernel.stage import sections_of
from pipeline.stages import STAGES
from schemas.catalogue import CHECKS, ERROR, LOCKED, SEVERITIES
from schemas.errors import SAMPLE_CAP
from schemas.raw import DEFAULT_STAY_TOLERANCE_HOURS, DEFAULT_VALUENUM_ABS_BOUND

HEADER = """
    badpoints configuration: the documented defaults. A file given with --config needs only the keys it changes.
    Each key is declared once, with its default and these comments: the run's own sections in pipeline/config.py,
    each stage's in its module (pipeline/stages/). `badpoints config` prints them all."""

# Raw times lie in the years 1678-2261 (schemas.checks.YEARS); datetime64[ns] reaches ~100 days past either
# end, so a stay widened by up to 100 days cannot overflow.
MAX_STAY_TOLERANCE_HOURS = 2400.0


@dataclass(frozen=True)
class RawConfig(Section):
    NAME = "raw"
    valuenum_abs_bound: float = setting(float, DEFAULT_VALUENUM_ABS_BOUND, **POSITIVE, doc="""
        |VALUENUM| above this is an error (check valuenum_bound). No lab measurement comes near it;
        values beyond it are the mark of a broken export or unit conversion.""")
    stay_tolerance_hours: float = setting(float, DEFAULT_STAY_TOLERANCE_HOURS, low=0, high=MAX_STAY_TOLERANCE_HOURS,
                                          doc="""
        A lab charted more than this many hours before ADMITTIME or after DISCHTIME is reported
        (check charttime_outside_stay). 0 reports every lab outside the stay. At most 2400 (100 days): raw times
        lie in the years 1678-2261, and datetime64[ns] reaches about 100 days past either end.""")


@dataclass(frozen=True)
class LoadConfig(Section):
    NAME = "load"
    max_expanded_bytes: int = setting(int, MAX_EXPANDED_BYTES, low=1, note="64 GiB", doc="""
        A .gz table is decompressed as a stream and refused (check decompression_bound, exit 2) once its text
        passes max_expanded_bytes, or max_expansion_ratio times the .gz file's size (the ratio counts only past
        the first 64 MiB of text). MIMIC-IV's labevents.csv.gz (~2.5 GB) holds ~17 GB of text, a ratio of ~7;
        a gzip bomb of NUL bytes reaches ~1000.""")
    max_expansion_ratio: float = setting(float, MAX_EXPANSION_RATIO, low=1)
    max_field_chars: int = setting(int, MAX_FIELD_CHARS, low=1, doc="""
        A field of a read column longer than this many characters rejects its row (check field_too_long); the
        rest of the table is read. No lab value, time or ID comes near it.""")


@dataclass(frozen=True)
class FiltersConfig(Section):
    NAME = "filters"
    warn_removed_fraction: float = setting(float, 0.5, low=0, high=1, doc="""
        Every filter, join and dedup records rows in and out. Removing more than this fraction of
        its input is a warning (step_removed_most) ...""")
    error_removed_fraction: float = setting(float, 0.99, low=0, high=1, doc="""
        ... and more than this an error (step_removed_nearly_all). An empty output is always an error.""")

    def relations(self) -> None:
        require(self.warn_removed_fraction <= self.error_removed_fraction,
                 "[filters] need 0 <= warn_removed_fraction <= error_removed_fraction <= 1, got "
                 f"{self.warn_removed_fraction!r} and {self.error_removed_fraction!r}")


@dataclass(frozen=True)
class ReportConfig(Section):
    NAME = "report"
    max_lines: int = setting(int, SAMPLE_CAP, low=1, high=10_000, doc="""
        How many line numbers (and, with --show-values, raw values) a finding carries in the JSON report. A
        message names the first five of a list (lab items, admissions, lines), the most rows first, and says how
        many more ('... +36 more in the JSON report'); the finding's "items" holds every lab item it names.""")


SEVERITY = """
    Change a check's severity, as linters allow: "error", "warning", "info" or "off".
    Checks marked fixed in `badpoints checks` (a table that could not be read, a stage that stops, the graph
    files' guards) stay errors: a config that sets one to anything but "error" is refused, with the reason.
    The report says which checks were changed. `badpoints checks` lists the check ids.
    Example, for an export known to write integer IDs as '123.0':
    id_float_format = "off"
    """
"""The documentation of the [severity] table (check id = level), which is empty by default."""

RUN_SECTIONS = {section.NAME: section for section in (LoadConfig, RawConfig, FiltersConfig, ReportConfig)}
OPTIONS = sections_of(STAGES)
"""The config sections the stages declare, by name, in flow order."""
SECTIONS = {**RUN_SECTIONS, **OPTIONS}
"""Every config section by name: the run's, then the stages' in flow order."""


class _Config:
    """The methods of :class:`Config` (its fields are the sections of :data:`SECTIONS`)."""

    def __post_init__(self) -> None:
        for check, level in self.severity.items():
            require(check in CHECKS, f"[severity] names unknown check {check!r}; known: {', '.join(sorted(CHECKS))}")
            require(isinstance(level, str) and level in SEVERITIES, f"[severity] {check} must be one of "
                    f"{', '.join(SEVERITIES)}, got {level!r:.60} ({type(level).__name__})")
            locked = CHECKS[check].locked
            require(locked is None or level == ERROR,
                    f"[severity] {check} cannot be set to {level!r}: it stays an error because {LOCKED.get(locked)}; "
                    "remove the line (`badpoints checks` lists the checks whose severity is fixed)")

    def severity_of(self, check: str) -> str:
        """The effective severity of a check: the config's if set, else the catalogue's."""
        return self.severity.get(check, CHECKS[check].severity)

    def as_json(self) -> dict[str, Any]:
        """The effective config, as plain JSON (saved with every build)."""
        def plain(value: Any) -> Any:
            if hasattr(value, "__dataclass_fields__"):
                return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
            if isinstance(value, Mapping):
                return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
            if isinstance(value, tuple):  # a list key's names
                return [plain(v) for v in value]
            return value
        return plain(self)


Config = make_dataclass(
    "Config", [*((name, Any) for name in SECTIONS),
               ("severity", Mapping[str, str], field(default_factory=lambda: MappingProxyType({}))),
               ("source", "str | None", field(default=None))],
    bases=(_Config,), frozen=True)
Config.__module__ = __name__
Config.__doc__ = ("The whole configuration: one field per section of :data:`SECTIONS` (``config.scale``, "
                  "``config.fill``, ...), the ``[severity]`` table and the file it came from.")


def documented_defaults() -> str:
    """Every section's documented defaults as one TOML text, generated from the declarations: the run's sections,
    the [severity] table, then the stages' sections in flow order."""
    severity = "\n".join(["[severity]", *comments(SEVERITY)]) + "\n"
    return "\n".join(["\n".join(comments(HEADER)) + "\n", *(section.toml() for section in RUN_SECTIONS.values()),
                      severity, *(options.toml() for options in OPTIONS.values())])


def _defaults() -> dict[str, Any]:
    return tomllib.loads(documented_defaults())


def _merge(base: dict[str, Any], user: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    merged = dict(base)
    for key, value in user.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            merged[key] = value
    return merged


MAX_CONFIG_BYTES = 1 << 20  # a config is a page of keys: far more than any real one, far less than /dev/zero


def _config_text(path: Path) -> str:
    """The config file's text: a regular file of at most MAX_CONFIG_BYTES (a device, FIFO or folder is refused
    before it is read: /dev/zero would be read until memory ran out)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        require(stat.S_ISREG(status.st_mode), f"config {str(path)!r} is not a regular file; give a TOML file")
        data = handle.read(MAX_CONFIG_BYTES + 1)
    require(len(data) <= MAX_CONFIG_BYTES,
            f"config {str(path)!r} is larger than {MAX_CONFIG_BYTES:,} bytes; a config holds only the keys it changes")
    return data.decode("utf-8")


TASK = "task"  # the section --task names


def _task_table(task: str | Path) -> dict[str, Any]:
    """The [task] table ``--task`` gives: a TOML file's (its [task] table, or its keys when it has none), or
    ``name = task`` for a built-in task."""
    presets = getattr(SECTIONS[TASK], "PRESETS", {})
    path = Path(task)
    if path.is_file():
        try:
            table = tomllib.loads(_config_text(path))
        except OSError as exc:
            raise ConfigError(f"cannot read task {str(path)!r}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"task {str(path)!r} is not valid TOML: {exc}") from None
        table = table.get(TASK, table)
        require(isinstance(table, dict), f"task {str(path)!r}: [task] must be a table")
        return table
    require(str(task) in presets, f"--task {str(task)!r} is neither a file nor a built-in task; built-in: "
                                  f"{', '.join(presets)}")
    return {"name": str(task)}


def _preset(name: str, values: Any) -> Any:
    """A section's table as written, with what a name it gives stands for put first (a built-in task's keys:
    :meth:`pipeline.kernel.options.Section.preset`)."""
    preset = getattr(SECTIONS.get(name), "preset", None)
    return preset(values) if preset is not None and isinstance(values, dict) else values


def load_config(path: Path | None = None, *, task: str | Path | None = None) -> Config:
    """Defaults, overridden by the TOML file at ``path`` when given, and its ``[task]`` by ``task`` (``--task``): a
    built-in task's name, or a TOML file holding a ``[task]`` table (or the table's keys alone)."""
    defaults = _defaults()
    merged = defaults
    user: dict[str, Any] = {}
    if path is not None:
        try:
            user = tomllib.loads(_config_text(Path(path)))
        except OSError as exc:
            raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config {str(path)!r} is not valid TOML: {exc}") from None
        unknown = sorted(set(user) - set(defaults))
        require(not unknown, f"unknown section(s) in {str(path)!r}: {', '.join(unknown)}")
        for section, values in user.items():
            require(isinstance(values, dict), f"[{section}] must be a table")
    if task is not None:
        user = {**user, TASK: {**user.get(TASK, {}), **_task_table(task)}}
    if user:
        merged = _merge(defaults, {name: _preset(name, values) for name, values in user.items()})
    return Config(**{name: section.load(merged[name], name) for name, section in SECTIONS.items()},
                  severity=MappingProxyType(dict(merged.get("severity", {}))),
                  source=str(path) if path is not None else None)
