"""The one configuration of badpoints: a frozen dataclass loaded from TOML.

Only the CLI and ``flow.py`` read the whole config; stages get keyword arguments.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

import numpy as np

from pipeline.stages.bucket import last_timestep
from pipeline.stages.clean import EMPTY_VALUE_POLICIES
from schemas.checks import CHECKS, ERROR, LOCKED, SEVERITIES

DEFAULTS = Path(__file__).with_name("defaults.toml")
"""The documented defaults; a user's file needs only the keys it changes."""

SCALE_POLICIES = ("none", "clip", "log")
FILL_POLICIES = ("constant", "mean", "median", "drop", "ffill")
FILL_COLUMNS = ("Z", "CODE")
LATE_POLICIES = ("quarantine", "clip")
FLOAT32_MAX = float(np.finfo(np.float32).max)  # graph tensors are float32: a fill beyond it becomes inf
# Raw times lie in the years 1678-2261 (schemas.checks.YEARS); datetime64[ns] reaches ~100 days past either
# end, so a stay widened by up to 100 days cannot overflow.
MAX_STAY_TOLERANCE_HOURS = 2400.0
MAX_Z_BOUND = 1e15  # far past any z-score a real value has; the HTML report's log-scale charts draw up to it


class ConfigError(ValueError):
    """The config file cannot be used (unknown key, wrong type, out-of-range value, unknown check)."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True)
class Allowed:
    """What one config key takes: its type, and for a number its range (``low`` excluded when ``above``).

    Declared once per key, in its dataclass field (:func:`setting`), and checked whenever a section is made.
    """

    kind: type  # float (finite; an integer is taken as float), int (a float that is whole is taken), bool, str
    low: float | None = None
    high: float | None = None
    above: bool = False
    words: tuple[str, ...] = ()  # the strings a str key takes, or those a number key takes besides numbers

    def __str__(self) -> str:
        if self.kind is bool:
            return "true or false"
        choices = " or ".join(f"'{word}'" for word in self.words)
        if self.kind is str:
            return f"one of {', '.join(self.words)}"
        noun = "a whole number" if self.kind is int else "a finite number"
        if self.low is not None and self.high is not None:
            noun += f" in {'(' if self.above else '['}{_number(self.low)}, {_number(self.high)}]"
        elif self.low is not None:
            noun += f" {'>' if self.above else '>='} {_number(self.low)}"
        return f"{noun} or {choices}" if choices else noun

    def parse(self, where: str, value: Any) -> Any:
        """``value`` as this key's type, or ConfigError naming the key, the value and its class, and the range."""
        if isinstance(value, str) and value in self.words:
            return value
        if self.kind in (int, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            ok = ok and (self.kind is float or float(value).is_integer())
            ok = ok and (self.low is None or (value > self.low if self.above else value >= self.low))
            ok = ok and (self.high is None or value <= self.high)
            if ok:
                return self.kind(value)
        elif isinstance(value, self.kind) and (not self.words or value in self.words):
            return value
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ConfigError(f"{where} must be {self}, got {shown} ({type(value).__name__})")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e10 else f"{bound:.7g}"


def setting(kind: type, default: Any = MISSING, **allowed: Any) -> Any:
    """A config key: a dataclass field whose metadata declares what it takes (see :class:`Allowed`)."""
    return field(default=default, metadata={"allowed": Allowed(kind, **allowed)})


POSITIVE = dict(low=0, above=True)  # a finite number > 0


class _Section:
    """A config section: every key is checked against its declared :class:`Allowed` when the section is made
    (from TOML or in code); :meth:`relations` checks what ties keys together."""

    NAME: ClassVar[str]

    def __post_init__(self) -> None:
        for key in fields(self):
            allowed = key.metadata.get("allowed")
            if allowed is not None and not (key.default is None and getattr(self, key.name) is None):
                object.__setattr__(self, key.name, allowed.parse(f"[{self.NAME}] {key.name}",
                                                                 getattr(self, key.name)))
        self.relations()

    def relations(self) -> None:
        """Rules over several keys of the section (none by default)."""


@dataclass(frozen=True)
class RawConfig(_Section):
    NAME = "raw"
    valuenum_abs_bound: float = setting(float, **POSITIVE)
    stay_tolerance_hours: float = setting(float, low=0, high=MAX_STAY_TOLERANCE_HOURS)


@dataclass(frozen=True)
class LoadConfig(_Section):
    NAME = "load"
    max_expanded_bytes: int = setting(int, low=1)
    max_expansion_ratio: float = setting(float, low=1)
    max_field_chars: int = setting(int, low=1)


@dataclass(frozen=True)
class FiltersConfig(_Section):
    NAME = "filters"
    warn_removed_fraction: float = setting(float, low=0, high=1)
    error_removed_fraction: float = setting(float, low=0, high=1)

    def relations(self) -> None:
        _require(self.warn_removed_fraction <= self.error_removed_fraction,
                 "[filters] need 0 <= warn_removed_fraction <= error_removed_fraction <= 1, got "
                 f"{self.warn_removed_fraction!r} and {self.error_removed_fraction!r}")


@dataclass(frozen=True)
class SplitConfig(_Section):
    NAME = "split"
    train: float = setting(float, low=0, high=1, above=True)
    val: float = setting(float, low=0, high=1, above=True)
    test: float = setting(float, low=0, high=1, above=True)
    seed: int = setting(int, low=0)

    def relations(self) -> None:
        ratios = (self.train, self.val, self.test)
        _require(abs(sum(ratios) - 1) < 1e-9, f"[split] train, val and test must be > 0 and sum to 1, got {ratios}")


@dataclass(frozen=True)
class ScaleConfig(_Section):
    NAME = "scale"
    eps: float = setting(float, low=0, high=0.5, above=True)
    clip_sigma: float = setting(float, **POSITIVE)
    warn_bound: float = setting(float, low=0, high=MAX_Z_BOUND, above=True)
    error_bound: float = setting(float, low=0, high=MAX_Z_BOUND, above=True)
    min_rows: int = setting(int, 10, low=2)  # one row has no spread
    constant_bound: float = setting(float, 10.0, **POSITIVE)
    range_widths: float = setting(float, 10.0, **POSITIVE)
    policy: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))

    def relations(self) -> None:
        _require(self.warn_bound <= self.error_bound,
                 f"[scale] need warn_bound <= error_bound, got {self.warn_bound!r} and {self.error_bound!r}")
        for item, policy in self.policy.items():
            _require(policy in SCALE_POLICIES,
                     f"[scale.policy] {item} must be one of {', '.join(SCALE_POLICIES)}, got {policy!r}")


@dataclass(frozen=True)
class FillPolicy(_Section):
    NAME = "fill"
    policy: str = setting(str, words=FILL_POLICIES)
    value: float | None = setting(float, None, low=-FLOAT32_MAX, high=FLOAT32_MAX)
    indicator: bool = setting(bool, False)

    def relations(self) -> None:
        _require(self.policy != "constant" or self.value is not None, "[fill] policy 'constant' needs a finite value")


# What each tensor column's constant fill may be: Z goes into float32 edge_attr, CODE indexes embeddings.
FILL_VALUES = {"Z": Allowed(float, low=-FLOAT32_MAX, high=FLOAT32_MAX), "CODE": Allowed(int, low=0, high=2**31 - 1)}


@dataclass(frozen=True)
class BucketConfig(_Section):
    NAME = "bucket"
    interval_hours: float = setting(float, low=0.001, high=24 * 366)
    # "none" in TOML: the timestep max_stay_days reaches (see pipeline.stages.bucket.last_timestep), set on construction
    max_timestep: int = setting(int, low=0, high=2**31 - 1, words=("none",))
    after_discharge_hours: float = setting(float, low=0, high=24 * 36_600)
    late_policy: str = setting(str, words=LATE_POLICIES)
    max_stay_days: float = setting(float, 1000.0, low=0, high=36_600, above=True)

    def relations(self) -> None:
        if self.max_timestep == "none":
            object.__setattr__(self, "max_timestep", last_timestep(interval_hours=self.interval_hours,
                                                                   max_stay_days=self.max_stay_days))


@dataclass(frozen=True)
class GraphConfig(_Section):
    NAME = "graph"
    batch_size: int = setting(int, low=1)
    labels: bool = setting(bool)
    hidden: int = setting(int, low=1, high=1 << 16)
    layers: int = setting(int, low=1, high=1 << 10)
    memory_budget_mb: float = setting(float, **POSITIVE)
    min_timesteps: int = setting(int, 1, low=1)


@dataclass(frozen=True)
class EncodeConfig(_Section):
    NAME = "encode"
    min_admissions: int = setting(int, low=1)
    fold_case: bool = setting(bool, True)


@dataclass(frozen=True)
class CommentsConfig(_Section):
    NAME = "comments"
    empty_value: str = setting(str, words=EMPTY_VALUE_POLICIES)


@dataclass(frozen=True)
class ReportConfig(_Section):
    NAME = "report"
    max_lines: int = setting(int, low=1, high=10_000)


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

    def __post_init__(self) -> None:
        for check, level in self.severity.items():
            _require(check in CHECKS, f"[severity] names unknown check {check!r}; known: {', '.join(sorted(CHECKS))}")
            _require(isinstance(level, str) and level in SEVERITIES, f"[severity] {check} must be one of "
                     f"{', '.join(SEVERITIES)}, got {level!r:.60} ({type(level).__name__})")
            locked = CHECKS[check].locked
            _require(locked is None or level == ERROR,
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


def _defaults() -> dict[str, Any]:
    return tomllib.loads(DEFAULTS.read_text(encoding="utf-8"))


def _typed(cls: type, values: Any, name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of section ``[name]``, each parsed by its declared :class:`Allowed`; unknown keys are refused."""
    _require(isinstance(values, dict), f"[{name}] must be a table, got {values!r:.60} ({type(values).__name__})")
    known = {f.name: f for f in fields(cls) if f.name not in skip}
    unknown = sorted(set(values) - set(known) - set(skip))
    _require(not unknown, f"unknown key(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(known)}")
    return {key: known[key].metadata["allowed"].parse(f"[{name}] {key}", value)
            for key, value in values.items() if key not in skip}


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
        _require(not unknown, f"unknown section(s) in {str(path)!r}: {', '.join(unknown)}")
        for section, values in user.items():
            _require(isinstance(values, dict), f"[{section}] must be a table")
        merged = _merge(defaults, user)

    severity = merged.get("severity", {})
    scale = dict(merged["scale"])
    policy = scale.get("policy", {})
    _require(isinstance(policy, dict), "[scale.policy] must be a table of ITEMID = policy")
    for item in policy:
        _require(re.fullmatch(r"[0-9]{1,18}", item) is not None and int(item) > 0,
                 f"[scale.policy] keys must be ITEMIDs (positive integers below 10^18), got {item!r}")

    fill = merged["fill"]
    unknown_fill = sorted(set(fill) - set(FILL_COLUMNS))
    _require(not unknown_fill, f"[fill] names unknown column(s) {', '.join(unknown_fill)}; "
                               f"columns that become tensors: {', '.join(FILL_COLUMNS)}")
    fills = {column: _typed(FillPolicy, values, f"fill.{column}") for column, values in fill.items()}
    for column, values in fills.items():
        if values.get("value") is not None:
            values["value"] = float(FILL_VALUES[column].parse(f"[fill.{column}] value", values["value"]))
    return Config(
        load=LoadConfig(**_typed(LoadConfig, merged["load"], "load")),
        raw=RawConfig(**_typed(RawConfig, merged["raw"], "raw")),
        filters=FiltersConfig(**_typed(FiltersConfig, merged["filters"], "filters")),
        split=SplitConfig(**_typed(SplitConfig, merged["split"], "split")),
        encode=EncodeConfig(**_typed(EncodeConfig, merged["encode"], "encode")),
        scale=ScaleConfig(**_typed(ScaleConfig, scale, "scale", skip=("policy",)),
                          policy=MappingProxyType({int(k): v for k, v in policy.items()})),
        fill=MappingProxyType({column: FillPolicy(**values) for column, values in fills.items()}),
        bucket=BucketConfig(**_typed(BucketConfig, merged["bucket"], "bucket")),
        graph=GraphConfig(**_typed(GraphConfig, merged["graph"], "graph")),
        report=ReportConfig(**_typed(ReportConfig, merged["report"], "report")),
        comments=CommentsConfig(**_typed(CommentsConfig, merged["comments"], "comments")),
        severity=MappingProxyType(dict(severity)),
        source=str(path) if path is not None else None,
    )
