"""What a config section is: its keys, each declared once with its type, range and default (:func:`setting`),
checked whenever the section is made, and its documented defaults as TOML.

A stage declares its own section (``Options`` in its module, named in its :class:`pipeline.stages.Stage`);
:mod:`pipeline.config` puts the declared sections together with the run's own (load, raw, filters, report).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar


class ConfigError(ValueError):
    """The config file cannot be used (unknown key, wrong type, out-of-range value, unknown check)."""


def require(condition: bool, message: str) -> None:
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


class Section:
    """A config section: every key is checked against its declared :class:`Allowed` when the section is made
    (from TOML or in code); :meth:`relations` checks what ties keys together."""

    NAME: ClassVar[str]
    TOML: ClassVar[str] = ""  # the section's keys with their defaults, documented: the lines under [NAME]

    def __post_init__(self) -> None:
        for key in fields(self):
            allowed = key.metadata.get("allowed")
            if allowed is not None and not (key.default is None and getattr(self, key.name) is None):
                object.__setattr__(self, key.name, allowed.parse(f"[{self.NAME}] {key.name}",
                                                                 getattr(self, key.name)))
        self.relations()

    def relations(self) -> None:
        """Rules over several keys of the section (none by default)."""

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Section":
        """The section from its TOML table (``values``: the keys a file sets over the documented defaults)."""
        return cls(**typed(cls, values, name or cls.NAME))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The documented defaults (:attr:`TOML`) as a table, by section name."""
        return tomllib.loads(cls.toml())

    @classmethod
    def toml(cls) -> str:
        return f"[{cls.NAME}]\n{cls.TOML.strip()}\n"


def typed(cls: type, values: Any, name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of section ``[name]``, each parsed by its declared :class:`Allowed`; unknown keys are refused."""
    require(isinstance(values, dict), f"[{name}] must be a table, got {values!r:.60} ({type(values).__name__})")
    known = {f.name: f for f in fields(cls) if f.name not in skip}
    unknown = sorted(set(values) - set(known) - set(skip))
    require(not unknown, f"unknown key(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(known)}")
    return {key: known[key].metadata["allowed"].parse(f"[{name}] {key}", value)
            for key, value in values.items() if key not in skip}
