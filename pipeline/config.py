"""The one configuration of badpoints: frozen sections loaded from TOML.

The run's own sections (load, raw, filters, report, severity) are declared here, their documented defaults in
``defaults.toml``; each stage declares its section in its module (``Options``, named in its
:class:`pipeline.stages.Stage`), keys, defaults and documentation together. :class:`Config` holds one field per
section, the stages' in flow order, so a new stage's section needs no line here. Only the CLI and ``flow.py``
read the whole config; stages get their section (``context.options``) or keyword arguments.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from pipeline.options import POSITIVE, Allowed, ConfigError, Section, require, setting  # noqa: F401 (re-exported)
from pipeline.stage import sections_of
from pipeline.stages import STAGES
from schemas.checks import CHECKS, ERROR, LOCKED, SEVERITIES

DEFAULTS = Path(__file__).with_name("defaults.toml")
"""The documented defaults of the run's own sections; a user's file needs only the keys it changes."""

# Raw times lie in the years 1678-2261 (schemas.checks.YEARS); datetime64[ns] reaches ~100 days past either
# end, so a stay widened by up to 100 days cannot overflow.
MAX_STAY_TOLERANCE_HOURS = 2400.0


@dataclass(frozen=True)
class RawConfig(Section):
    NAME = "raw"
    valuenum_abs_bound: float = setting(float, **POSITIVE)
    stay_tolerance_hours: float = setting(float, low=0, high=MAX_STAY_TOLERANCE_HOURS)


@dataclass(frozen=True)
class LoadConfig(Section):
    NAME = "load"
    max_expanded_bytes: int = setting(int, low=1)
    max_expansion_ratio: float = setting(float, low=1)
    max_field_chars: int = setting(int, low=1)


@dataclass(frozen=True)
class FiltersConfig(Section):
    NAME = "filters"
    warn_removed_fraction: float = setting(float, low=0, high=1)
    error_removed_fraction: float = setting(float, low=0, high=1)

    def relations(self) -> None:
        require(self.warn_removed_fraction <= self.error_removed_fraction,
                 "[filters] need 0 <= warn_removed_fraction <= error_removed_fraction <= 1, got "
                 f"{self.warn_removed_fraction!r} and {self.error_removed_fraction!r}")


@dataclass(frozen=True)
class ReportConfig(Section):
    NAME = "report"
    max_lines: int = setting(int, low=1, high=10_000)


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
    """Every section's documented defaults as one TOML text: the run's (``defaults.toml``), then the stages'."""
    return "\n".join([DEFAULTS.read_text(encoding="utf-8").rstrip("\n") + "\n",
                      *(options.toml() for options in OPTIONS.values())])


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


def load_config(path: Path | None = None) -> Config:
    """Defaults, overridden by the TOML file at ``path`` when given."""
    defaults = _defaults()
    merged = defaults
    if path is not None:
        try:
            user = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config {str(path)!r} is not valid TOML: {exc}") from None
        unknown = sorted(set(user) - set(defaults))
        require(not unknown, f"unknown section(s) in {str(path)!r}: {', '.join(unknown)}")
        for section, values in user.items():
            require(isinstance(values, dict), f"[{section}] must be a table")
        merged = _merge(defaults, user)
    return Config(**{name: section.load(merged[name], name) for name, section in SECTIONS.items()},
                  severity=MappingProxyType(dict(merged.get("severity", {}))),
                  source=str(path) if path is not None else None)
