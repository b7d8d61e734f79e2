"""What a config section is: its keys, each declared once with its type, range, default and documentation
(:func:`setting`), checked whenever the section is made; its documented defaults as TOML are generated from them.

A stage declares its own section (``Options`` in its module, named in its :class:`pipeline.stages.Stage`);
:mod:`pipeline.config` puts the declared sections together with the run's own (load, raw, filters, report).
"""

from __future__ import annotations

import json
import math
import textwrap
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Mapping


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

    kind: type  # float (finite; an integer is taken as float), int (a float that is whole is taken), bool, str,
    # list (of strings, held as a tuple)
    low: float | None = None
    high: float | None = None
    above: bool = False
    # the strings a str key takes, those a number key takes besides numbers, or those a list key may hold (each
    # at most once; held in this order, whatever the order written)
    words: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.kind is list:
            return f"a list of any of {', '.join(self.words)}" if self.words else "a list of strings"
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
        if self.kind is list:
            return self._names(where, value)
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
        raise ConfigError(f"{where} must be {self}, got {_shown(value)} ({type(value).__name__})")

    def _names(self, where: str, value: Any) -> tuple[str, ...]:
        """A list key's strings as a tuple (in the order of ``words`` when it has them), or ConfigError naming the
        string it does not take, and the ones it does."""
        if not isinstance(value, (list, tuple)) or not all(isinstance(name, str) for name in value):
            raise ConfigError(f"{where} must be {self}, got {_shown(value)} ({type(value).__name__})")
        unknown = [name for name in value if self.words and name not in self.words]
        require(not unknown, f"{where} names {', '.join(map(repr, unknown))}, which it does not take: it must be "
                f"{self}")
        twice = sorted({name for name in value if value.count(name) > 1})
        require(not twice, f"{where} names {', '.join(map(repr, twice))} more than once")
        return tuple(word for word in self.words if word in value) if self.words else tuple(value)


def _shown(value: Any) -> str:
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e10 else f"{bound:.7g}"


def setting(kind: type, default: Any = MISSING, *, doc: str = "", note: str = "", **allowed: Any) -> Any:
    """A config key, declared once: a dataclass field whose default is the key's and whose metadata holds what it
    takes (see :class:`Allowed`) and its documentation: ``doc``, the comment lines the documented TOML puts above
    the key, and ``note``, a comment after its value.

    The default is checked against what the key takes when it is declared, and held as the key's type (``24`` for
    a float key is 24.0; a list key holds a tuple); the documented TOML writes it as declared. Functions take it
    from the section by the key's name (``min_rows: int = Options.min_rows``)."""
    rule = Allowed(kind, **allowed)
    value = default if default is MISSING or default is None else rule.parse("a declared default", default)
    return field(default=value, metadata={"allowed": rule, "doc": doc, "note": note, "written": default})


def table(*, doc: str = "", default: Mapping[str, Any] | None = None) -> Any:
    """A config sub-table whose keys the user names (``[scale.policy]``: ITEMID = policy), empty by default or
    holding the ``default`` entries (written once, here: the documented TOML writes them under its header, and a
    file's entries are added to them): ``doc`` documents it, with an example, in the comment lines under its
    header."""
    entries = MappingProxyType(dict(default or {}))
    return field(default_factory=lambda: entries, metadata={"table": True, "doc": doc, "entries": entries})


def comments(doc: str) -> list[str]:
    """A declaration's documentation as TOML comment lines (its indentation in the source dropped)."""
    text = textwrap.dedent(doc).strip("\n")
    return [f"# {line}".rstrip() for line in text.splitlines()] if text.strip() else []


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it: ``true``, ``"quarantine"``, ``1_048_576``, ``3.0``, ``1e6``, ``1e-12``,
    ``["INSURANCE", "LANGUAGE"]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 100_000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a config default must be finite, got {value!r}")
        if value.is_integer() and abs(value) >= 1e6:  # 1e6, not 1000000.0
            digits = next(p for p in range(17) if float(f"{value:.{p}e}") == value)
            mantissa, exponent = f"{value:.{digits}e}".split("e")
            return f"{mantissa}e{int(exponent)}"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(toml_value, value))}]"
    raise TypeError(f"no TOML form for a config default of type {type(value).__name__}")


POSITIVE = dict(low=0, above=True)  # a finite number > 0


class Section:
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

    @classmethod
    def preset(cls, table: Mapping[str, Any]) -> dict[str, Any]:
        """The section's table as a file or the command line writes it, with what a name it gives stands for
        (a built-in task's keys) put first: none by default."""
        return dict(table)

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Section":
        """The section from its TOML table (``values``: the keys a file sets over the documented defaults)."""
        return cls(**typed(cls, values, name or cls.NAME))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The documented defaults (:meth:`toml`) as a table, by section name."""
        return tomllib.loads(cls.toml())

    @classmethod
    def toml(cls) -> str:
        """The section's documented defaults, generated from its declarations in their order: each key's ``doc``
        as comments, then ``key = default`` (and its ``note``); its sub-tables after, each with its ``doc``."""
        keys, tables = [f"[{cls.NAME}]"], []
        for key in fields(cls):
            about = key.metadata
            if "allowed" in about:
                if about["written"] is MISSING:
                    raise TypeError(f"[{cls.NAME}] {key.name} declares no default: the documented TOML needs one")
                note = f"  # {about['note']}" if about["note"] else ""
                keys += [*comments(about["doc"]), f"{key.name} = {toml_value(about['written'])}{note}"]
            elif about.get("table"):
                tables += ["", f"[{cls.NAME}.{key.name}]", *comments(about["doc"]),
                           *(f"{toml_value(entry)} = {toml_value(value)}" for entry, value in about["entries"].items())]
        return "\n".join(keys + tables) + "\n"


def typed(cls: type, values: Any, name: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keys of section ``[name]``, each parsed by its declared :class:`Allowed`; unknown keys are refused."""
    require(isinstance(values, dict), f"[{name}] must be a table, got {values!r:.60} ({type(values).__name__})")
    known = {f.name: f for f in fields(cls) if f.name not in skip}
    unknown = sorted(set(values) - set(known) - set(skip))
    require(not unknown, f"unknown key(s) in [{name}]: {', '.join(unknown)}; known: {', '.join(known)}")
    return {key: known[key].metadata["allowed"].parse(f"[{name}] {key}", value)
            for key, value in values.items() if key not in skip}
