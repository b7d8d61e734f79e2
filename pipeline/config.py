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

from pipeline.bucket import last_timestep
from pipeline.clean import EMPTY_VALUE_POLICIES
from schemas.checks import CHECKS, SEVERITIES

DEFAULTS = Path(__file__).with_name("defaults.toml")
"""The documented defaults; a user's file needs only the keys it changes."""

SCALE_POLICIES = ("none", "clip", "log")
FILL_POLICIES = ("constant", "mean", "median", "drop", "ffill")
FILL_COLUMNS = ("Z", "CODE")
LATE_POLICIES = ("quarantine", "clip")


class ConfigError(ValueError):
    """The config file cannot be used (unknown key, wrong type, out-of-range value, unknown check)."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _finite(value: float) -> bool:
    return math.isfinite(value)


@dataclass(frozen=True)
class RawConfig:
    valuenum_abs_bound: float
    stay_tolerance_hours: float

    def __post_init__(self) -> None:
        _require(_finite(self.valuenum_abs_bound) and self.valuenum_abs_bound > 0,
                 f"[raw] valuenum_abs_bound must be a finite number > 0, got {self.valuenum_abs_bound!r}")
        _require(_finite(self.stay_tolerance_hours) and self.stay_tolerance_hours >= 0,
                 f"[raw] stay_tolerance_hours must be a finite number >= 0, got {self.stay_tolerance_hours!r}")


@dataclass(frozen=True)
class LoadConfig:
    max_expanded_bytes: int
    max_expansion_ratio: float
    max_field_chars: int

    def __post_init__(self) -> None:
        _require(self.max_expanded_bytes > 0, f"[load] max_expanded_bytes must be > 0, got {self.max_expanded_bytes!r}")
        _require(_finite(self.max_expansion_ratio) and self.max_expansion_ratio >= 1,
                 f"[load] max_expansion_ratio must be a finite number >= 1, got {self.max_expansion_ratio!r}")
        _require(self.max_field_chars > 0, f"[load] max_field_chars must be > 0, got {self.max_field_chars!r}")


@dataclass(frozen=True)
class FiltersConfig:
    warn_removed_fraction: float
    error_removed_fraction: float

    def __post_init__(self) -> None:
        _require(0 <= self.warn_removed_fraction <= self.error_removed_fraction <= 1,
                 "[filters] need 0 <= warn_removed_fraction <= error_removed_fraction <= 1, got "
                 f"{self.warn_removed_fraction!r} and {self.error_removed_fraction!r}")


@dataclass(frozen=True)
class SplitConfig:
    train: float
    val: float
    test: float
    seed: int

    def __post_init__(self) -> None:
        ratios = (self.train, self.val, self.test)
        _require(all(_finite(r) and r > 0 for r in ratios) and abs(sum(ratios) - 1) < 1e-9,
                 f"[split] train, val and test must be > 0 and sum to 1, got {ratios}")
        _require(self.seed >= 0, f"[split] seed must be >= 0, got {self.seed!r}")


@dataclass(frozen=True)
class ScaleConfig:
    eps: float
    clip_sigma: float
    warn_bound: float
    error_bound: float
    min_rows: int = 10
    constant_bound: float = 10.0
    range_widths: float = 10.0
    policy: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        _require(_finite(self.eps) and 0 < self.eps < 1, f"[scale] eps must be in (0, 1), got {self.eps!r}")
        _require(_finite(self.clip_sigma) and self.clip_sigma > 0,
                 f"[scale] clip_sigma must be a finite number > 0, got {self.clip_sigma!r}")
        _require(_finite(self.warn_bound) and _finite(self.error_bound) and 0 < self.warn_bound <= self.error_bound,
                 f"[scale] need 0 < warn_bound <= error_bound, both finite, got {self.warn_bound!r} and "
                 f"{self.error_bound!r}")
        _require(self.min_rows >= 2, f"[scale] min_rows must be an integer >= 2 (one row has no spread), "
                                     f"got {self.min_rows!r}")
        _require(_finite(self.constant_bound) and self.constant_bound > 0,
                 f"[scale] constant_bound must be a finite number > 0, got {self.constant_bound!r}")
        _require(_finite(self.range_widths) and self.range_widths > 0,
                 f"[scale] range_widths must be a finite number > 0, got {self.range_widths!r}")
        for item, policy in self.policy.items():
            _require(policy in SCALE_POLICIES,
                     f"[scale.policy] {item} must be one of {', '.join(SCALE_POLICIES)}, got {policy!r}")


@dataclass(frozen=True)
class FillPolicy:
    policy: str
    value: float | None = None
    indicator: bool = False

    def __post_init__(self) -> None:
        _require(self.policy in FILL_POLICIES,
                 f"[fill] policy must be one of {', '.join(FILL_POLICIES)}, got {self.policy!r}")
        _require(self.policy != "constant" or (self.value is not None and _finite(self.value)),
                 "[fill] policy 'constant' needs a finite value")


@dataclass(frozen=True)
class BucketConfig:
    interval_hours: float
    max_timestep: int  # "none" in TOML: the timestep max_stay_days reaches (see pipeline.bucket.last_timestep)
    after_discharge_hours: float
    late_policy: str
    max_stay_days: float = 1000.0

    def __post_init__(self) -> None:
        _require(_finite(self.interval_hours) and self.interval_hours > 0,
                 f"[bucket] interval_hours must be > 0, got {self.interval_hours!r}")
        _require(self.max_timestep >= 0, f"[bucket] max_timestep must be >= 0, got {self.max_timestep!r}")
        _require(_finite(self.after_discharge_hours) and self.after_discharge_hours >= 0,
                 f"[bucket] after_discharge_hours must be a finite number >= 0, got {self.after_discharge_hours!r}")
        _require(self.late_policy in LATE_POLICIES,
                 f"[bucket] late_policy must be one of {', '.join(LATE_POLICIES)}, got {self.late_policy!r}")
        _require(_finite(self.max_stay_days) and self.max_stay_days > 0,
                 f"[bucket] max_stay_days must be a finite number > 0, got {self.max_stay_days!r}")


@dataclass(frozen=True)
class GraphConfig:
    batch_size: int
    labels: bool
    hidden: int
    layers: int
    memory_budget_mb: float
    min_timesteps: int = 1

    def __post_init__(self) -> None:
        _require(self.min_timesteps >= 1, f"[graph] min_timesteps must be >= 1, got {self.min_timesteps!r}")
        _require(self.batch_size >= 1, f"[graph] batch_size must be >= 1, got {self.batch_size!r}")
        _require(self.hidden >= 1 and self.layers >= 1, "[graph] hidden and layers must be >= 1")
        _require(_finite(self.memory_budget_mb) and self.memory_budget_mb > 0,
                 f"[graph] memory_budget_mb must be a finite number > 0, got {self.memory_budget_mb!r}")


@dataclass(frozen=True)
class EncodeConfig:
    min_admissions: int
    fold_case: bool = True

    def __post_init__(self) -> None:
        _require(self.min_admissions >= 1,
                 f"[encode] min_admissions must be at least 1, got {self.min_admissions!r}")


@dataclass(frozen=True)
class CommentsConfig:
    empty_value: str

    def __post_init__(self) -> None:
        _require(self.empty_value in EMPTY_VALUE_POLICIES,
                 f"[comments] empty_value must be one of {', '.join(EMPTY_VALUE_POLICIES)}, got {self.empty_value!r}")


@dataclass(frozen=True)
class ReportConfig:
    max_lines: int

    def __post_init__(self) -> None:
        _require(1 <= self.max_lines <= 10_000, f"[report] max_lines must be between 1 and 10000, got {self.max_lines!r}")


@dataclass(frozen=True)
class Config:
    load: LoadConfig
    raw: RawConfig
    filters: FiltersConfig
    split: SplitConfig
    encode: EncodeConfig
    scale: ScaleConfig
    fill: Mapping[str, FillPolicy]
    bucket: BucketConfig
    graph: GraphConfig
    report: ReportConfig
    comments: CommentsConfig
    severity: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None

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


def _defaults() -> dict[str, Any]:
    return tomllib.loads(DEFAULTS.read_text(encoding="utf-8"))


_KINDS = {"float": (float, "a number"), "int": (int, "a whole number"), "str": (str, "a string"),
          "bool": (bool, "true or false"), "float | None": (float, "a number")}


def _typed(cls: type, values: Mapping[str, Any], name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    known = {f.name: f for f in fields(cls) if f.name not in skip}
    unknown = sorted(set(values) - set(known) - set(skip))
    _require(not unknown, f"unknown key(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(known)}")
    out = {}
    for key, value in values.items():
        if key in skip:
            continue
        kind, words = _KINDS[str(known[key].type)]
        if kind in (int, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            _require(ok, f"[{name}] {key} must be {words}, got {value!r}")
            _require(kind is float or float(value).is_integer(), f"[{name}] {key} must be {words}, got {value!r}")
            value = kind(value)
        else:
            _require(isinstance(value, kind), f"[{name}] {key} must be {words}, got {value!r}")
        out[key] = value
    return out


def _merge(base: dict[str, Any], user: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    merged = dict(base)
    for key, value in user.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            merged[key] = value
    return merged


def _bucket(values: Mapping[str, Any]) -> BucketConfig:
    """[bucket], with max_timestep = "none" (no deliberate cap) resolved to the timestep max_stay_days reaches."""
    uncapped = values.get("max_timestep") == "none"
    typed = _typed(BucketConfig, {k: v for k, v in values.items() if not (uncapped and k == "max_timestep")},
                   "bucket")
    if uncapped:
        stay = BucketConfig(**{**typed, "max_timestep": 0})  # validates interval_hours and max_stay_days first
        typed["max_timestep"] = last_timestep(interval_hours=stay.interval_hours, max_stay_days=stay.max_stay_days)
    return BucketConfig(**typed)


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
        _require(not unknown, f"unknown section(s) in {str(path)!r}: {', '.join(unknown)}")
        for section, values in user.items():
            _require(isinstance(values, dict), f"[{section}] must be a table")
        merged = _merge(defaults, user)

    severity = merged.get("severity", {})
    for check, level in severity.items():
        _require(check in CHECKS, f"[severity] names unknown check {check!r}; known: {', '.join(sorted(CHECKS))}")
        _require(level in SEVERITIES, f"[severity] {check} must be one of {', '.join(SEVERITIES)}, got {level!r}")

    scale = dict(merged["scale"])
    policy = scale.get("policy", {})
    _require(isinstance(policy, dict), "[scale.policy] must be a table of ITEMID = policy")
    for item in policy:
        _require(str(item).isdigit() and int(item) > 0, f"[scale.policy] keys must be ITEMIDs, got {item!r}")

    fill = merged["fill"]
    unknown_fill = sorted(set(fill) - set(FILL_COLUMNS))
    _require(not unknown_fill, f"[fill] names unknown column(s) {', '.join(unknown_fill)}; "
                               f"columns that become tensors: {', '.join(FILL_COLUMNS)}")
    return Config(
        load=LoadConfig(**_typed(LoadConfig, merged["load"], "load")),
        raw=RawConfig(**_typed(RawConfig, merged["raw"], "raw")),
        filters=FiltersConfig(**_typed(FiltersConfig, merged["filters"], "filters")),
        split=SplitConfig(**_typed(SplitConfig, merged["split"], "split")),
        encode=EncodeConfig(**_typed(EncodeConfig, merged["encode"], "encode")),
        scale=ScaleConfig(**_typed(ScaleConfig, scale, "scale", skip=("policy",)),
                          policy=MappingProxyType({int(k): v for k, v in policy.items()})),
        fill=MappingProxyType({
            column: FillPolicy(**_typed(FillPolicy, values, f"fill.{column}")) for column, values in fill.items()
        }),
        bucket=_bucket(merged["bucket"]),
        graph=GraphConfig(**_typed(GraphConfig, merged["graph"], "graph")),
        report=ReportConfig(**_typed(ReportConfig, merged["report"], "report")),
        comments=CommentsConfig(**_typed(CommentsConfig, merged["comments"], "comments")),
        severity=MappingProxyType(dict(severity)),
        source=str(path) if path is not None else None,
    )
