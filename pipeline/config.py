"""The one configuration of badpoints: a frozen dataclass loaded from TOML.

Only the CLI and ``flow.py`` read the whole config; stages get keyword arguments.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from schemas.checks import CHECKS, SEVERITIES


DEFAULTS = Path(__file__).with_name("defaults.toml")
"""The documented defaults; a user's file needs only the keys it changes."""


class ConfigError(ValueError):
    """The config file cannot be used (unknown key, wrong type, unknown check)."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True)
class RawConfig:
    valuenum_abs_bound: float
    stay_tolerance_hours: float

    def __post_init__(self) -> None:
        _require(math.isfinite(self.valuenum_abs_bound) and self.valuenum_abs_bound > 0,
                 f"[raw] valuenum_abs_bound must be a finite number > 0, got {self.valuenum_abs_bound!r}")
        _require(math.isfinite(self.stay_tolerance_hours) and self.stay_tolerance_hours >= 0,
                 f"[raw] stay_tolerance_hours must be a finite number >= 0, got {self.stay_tolerance_hours!r}")


@dataclass(frozen=True)
class ReportConfig:
    max_lines: int

    def __post_init__(self) -> None:
        _require(1 <= self.max_lines <= 10_000, f"[report] max_lines must be between 1 and 10000, got {self.max_lines!r}")


@dataclass(frozen=True)
class Config:
    raw: RawConfig
    report: ReportConfig
    severity: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None

    def severity_of(self, check: str) -> str:
        """The effective severity of a check: the config's if set, else the catalogue's."""
        return self.severity.get(check, CHECKS[check].severity)


def _defaults() -> dict[str, Any]:
    text = DEFAULTS.read_text(encoding="utf-8")
    return tomllib.loads(text)


def _section(cls: type, values: Mapping[str, Any], name: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"unknown key(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(known)}")
    converted = {}
    for key, value in values.items():
        kind = {"float": float, "int": int}.get(str(known[key].type), float)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"[{name}] {key} must be a number, got {value!r}")
        if kind is int and not float(value).is_integer():
            raise ConfigError(f"[{name}] {key} must be a whole number, got {value!r}")
        converted[key] = kind(value)
    return cls(**converted)


def load_config(path: Path | None = None) -> Config:
    """Defaults, overridden by the TOML file at ``path`` when given."""
    merged = _defaults()
    if path is not None:
        try:
            user = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config {str(path)!r} is not valid TOML: {exc}") from None
        unknown = sorted(set(user) - set(merged))
        if unknown:
            raise ConfigError(f"unknown section(s) in {str(path)!r}: {', '.join(unknown)}")
        for section, values in user.items():
            if not isinstance(values, dict):
                raise ConfigError(f"[{section}] must be a table")
            merged[section] = {**merged.get(section, {}), **values}
    severity = merged.get("severity", {})
    for check, level in severity.items():
        if check not in CHECKS:
            raise ConfigError(f"[severity] names unknown check {check!r}; known: {', '.join(sorted(CHECKS))}")
        if level not in SEVERITIES:
            raise ConfigError(f"[severity] {check} must be one of {', '.join(SEVERITIES)}, got {level!r}")
    return Config(
        raw=_section(RawConfig, merged.get("raw", {}), "raw"),
        report=_section(ReportConfig, merged.get("report", {}), "report"),
        severity=MappingProxyType(dict(severity)),
        source=str(path) if path is not None else None,
    )
