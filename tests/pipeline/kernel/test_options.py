"""Every config default is written once: in its key's declaration (``setting(...)`` in its section), which the
documented TOML (``badpoints config``) is generated from and the functions take their keyword defaults from.

For every key of every section's documented defaults (:data:`pipeline.config.SECTIONS`, the ``[fill.COLUMN]``
tables too), the source of ``pipeline/`` and ``schemas/`` is read for that value written under that key's name:
a keyword default (``min_rows: int = 10``), an assignment (``min_rows = 10``, ``MIN_ROWS = 10``), a keyword
argument (``min_rows=10``), a dict entry, a declaration (``setting(int, 10, ...)``) or a TOML line
(``min_rows = 10``, in a ``.toml`` file or a Python string). A literal is read for its value, however written
(``1e6``, ``1_000_000.0``, ``64 * 2**30``); a name (``min_rows: int = Options.min_rows``) is a reference, not a
second writing. Prose that mentions a value ("1000 by default") is not read.

Names that only happen to spell a key and hold its value (UNRELATED) are listed, each checked to be still there.
A list key (names among those it takes, held as a tuple in their declared order) is read and written here too.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import operator
import re
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

from pipeline.config import SECTIONS, documented_defaults
from pipeline.engines.options import EngineOptions
from pipeline.kernel.options import Allowed, ConfigError, setting, toml_value

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("pipeline", "schemas", "bench")  # the package, and the benchmark beside it (which reads the defaults)
# Names that spell a key and hold its default by coincidence, not as its default: (file, name) -> why.
UNRELATED = {
    ("bench/synth/shape.py", "SEED"): "the synthetic data's generator seed, not [split] seed",
}
NOT_LITERAL = object()


@dataclasses.dataclass(frozen=True)
class Written:
    """A value written in the source under a name: where, the name, the value."""

    path: str
    line: int
    name: str
    value: Any

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name} = {self.value!r}"


# -- what the sections declare ------------------------------------------------------------------------------------
def declared() -> list[tuple[str, str, Any]]:
    """(table, key, default) of every key of every section's documented defaults, nested tables' keys too."""
    documented = tomllib.loads(documented_defaults())
    found = []

    def walk(table: str, values: dict) -> None:
        for key, value in values.items():
            if isinstance(value, dict):
                walk(f"{table}.{key}", value)
            else:
                found.append((table, key, value))

    for name in SECTIONS:
        walk(name, documented[name])
    return found


DECLARED = declared()


# -- what the source writes ---------------------------------------------------------------------------------------
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.LShift: operator.lshift}
_TOML_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\S.*?)\s*$", re.MULTILINE)


def literal(node: ast.AST | None) -> Any:
    """The value a literal writes: a constant, a signed or arithmetic one (``-1.0``, ``64 * 2**30``), or the default
    a declaration writes (``setting(int, 10, ...)``, ``field(default=10)``); NOT_LITERAL for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = literal(node.operand)
        if _number(value):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = literal(node.left), literal(node.right)
        if _number(left) and _number(right) and not (isinstance(node.op, (ast.Pow, ast.LShift)) and abs(right) > 256):
            try:
                return _OPERATORS[type(node.op)](left, right)
            except ArithmeticError:
                return NOT_LITERAL
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        default = next((k.value for k in node.keywords if k.arg == "default"), None)
        if name == "setting" and default is None and len(node.args) > 1:
            default = node.args[1]
        if name in ("setting", "field") and default is not None:
            return literal(default)
    return NOT_LITERAL


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def toml_lines(text: str) -> Iterator[tuple[int, str, Any]]:
    """(line offset, key, value) of every line of ``text`` that is a whole TOML assignment (``key = value``,
    a comment after it or not); prose that mentions a key in a sentence is not one."""
    for match in _TOML_LINE.finditer(text):
        try:
            value = tomllib.loads(f"v = {match.group(2)}")["v"]
        except tomllib.TOMLDecodeError:
            continue
        yield text.count("\n", 0, match.start()), match.group(1), value


def writings_in(source: str, path: str) -> Iterator[Written]:
    """Every value ``source`` (Python) writes under a name, that is a literal."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.AST | None, ast.AST]] = []
        if isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            pairs += [(a.arg, d, a) for a, d in zip(positional[len(positional) - len(node.defaults):], node.defaults)]
            pairs += [(a.arg, d, a) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            pairs += [(t.id if isinstance(t, ast.Name) else t.attr, node.value, t)
                      for t in targets if isinstance(t, (ast.Name, ast.Attribute)) and node.value is not None]
        elif isinstance(node, ast.keyword) and node.arg is not None:
            pairs.append((node.arg, node.value, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [(k.value, v, k) for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for offset, key, value in toml_lines(node.value):
                yield Written(path, node.lineno + offset, key, value)
        for name, value_node, at in pairs:
            value = literal(value_node)
            if value is not NOT_LITERAL:
                yield Written(path, at.lineno, name, value)


def writings_of(path: Path) -> Iterator[Written]:
    where = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        yield from (Written(where, 1 + offset, key, value) for offset, key, value in toml_lines(text))
    else:
        yield from writings_in(text, where)


@functools.cache
def writings() -> tuple[Written, ...]:
    paths = sorted(path for package in SCANNED for suffix in ("*.py", "*.toml")
                   for path in (ROOT / package).rglob(suffix))
    return tuple(written for path in paths for written in writings_of(path))


def same(a: Any, b: Any) -> bool:
    """Equal values of the same kind: a number equals a number of equal value (10 is 10.0), never a bool."""
    if _number(a) and _number(b):
        return a == b
    return type(a) is type(b) and a == b


def names_key(name: str, key: str) -> bool:
    """Whether a name in the source stands for ``key``: the key itself, or a constant named for it
    (``MAX_EXPANDED_BYTES``, ``DEFAULT_VALUENUM_ABS_BOUND``)."""
    return name == key or (name.isupper() and (name == key.upper() or name.endswith("_" + key.upper())))


def written_again(key: str, default: Any, found: tuple[Written, ...] | list[Written]) -> list[Written]:
    """Where ``found`` writes ``default`` under ``key``'s name, in file and line order."""
    return sorted((w for w in found if names_key(w.name, key) and same(w.value, default)
                   and (w.path, w.name) not in UNRELATED), key=lambda w: (w.path, w.line))


# -- the tests ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("table", "key", "default"), DECLARED, ids=[f"{t}.{k}" for t, k, _ in DECLARED])
def test_every_default_is_written_once(table, key, default):
    found = list(written_again(key, default, writings()))
    # Keys of one name and value in several tables ([fill.Z] and [fill.CODE] policy = "constant") may be written
    # once per table.
    tables = sum(1 for _, k, v in DECLARED if k == key and same(v, default))
    assert len(found) <= tables, (
        f"[{table}] {key} = {default!r} is written {len(found)} times; declare it once and refer to the "
        "declaration:\n" + "\n".join(map(str, found)))


@pytest.mark.parametrize(("where", "name"), list(UNRELATED), ids=[name for _, name in UNRELATED])
def test_the_names_left_out_are_still_there(where, name):
    assert any(w.path == where and w.name == name for w in writings()), (where, name)


def test_the_scan_finds_a_default_written_again():
    """The check itself: each way of writing a default is found, as its value, and references are not."""
    source = '''
class Options:
    min_rows: int = setting(int, 10, low=2)
    eps: float = setting(float, default=1e-12)
    TOML = """
# min_rows = 10 (a comment line is prose)
min_rows = 10.0  # a TOML line
"""
MAX_EXPANDED_BYTES = 64 * 2**30

def fit(events, *, min_rows: int = 10, eps=Options.eps, error_bound: float = 1_000_000.0):
    return fit_from(events, min_rows=10, bound={"error_bound": 1e6})
'''
    found = list(writings_in(source, "made_up.py"))
    assert [w.line for w in written_again("min_rows", 10, found)] == [3, 7, 11, 12]
    assert [w.line for w in written_again("error_bound", 1e6, found)] == [11, 12]
    assert [w.line for w in written_again("eps", 1e-12, found)] == [4]
    assert [w.line for w in written_again("max_expanded_bytes", 68_719_476_736, found)] == [9]
    assert written_again("min_rows", True, found) == []  # True is not 1


# -- the engines' options ------------------------------------------------------------------------------------------
ENGINE_DEFAULTS = [(option.name, option.default) for option in dataclasses.fields(EngineOptions)
                   if option.default is not None]
ENGINE_OPTIONS = "pipeline/engines/options.py"
PARTS_RULE = ("partitions", "rows_per_part")  # the two options one rule decides between


@pytest.mark.parametrize(("key", "default"), ENGINE_DEFAULTS, ids=[key for key, _ in ENGINE_DEFAULTS])
def test_every_engine_default_is_written_once_in_its_declaration(key, default):
    """``--workers`` 2, ``--memory-limit`` "4GB", a part's million rows: in :class:`EngineOptions` alone; the CLI,
    the engines' factories and the benchmark refer to it (``EngineOptions.workers``)."""
    found = written_again(key, default, writings())
    assert [w.path for w in found] == [ENGINE_OPTIONS], (
        f"the engine option {key} = {default!r} is written {len(found)} times; declare it once in "
        f"{ENGINE_OPTIONS} and refer to the declaration:\n" + "\n".join(map(str, found)))


def _reads(node: ast.AST) -> set[str]:
    """The rule's options ``node`` reads: names and attributes spelling one (``self.partitions``, ``ROWS_PER_PART``)."""
    spelled = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
               if isinstance(n, (ast.Name, ast.Attribute))}
    return {key for key in PARTS_RULE for name in spelled if names_key(name, key) or name.lower() == key}


def rules_in(source: str, path: str) -> list[Written]:
    """Every place ``source`` decides between partitions and rows_per_part: a conditional expression or an and/or
    that reads both, or an ``if`` whose test reads one and whose branches read the other (the outermost only)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.IfExp, ast.BoolOp)):
            decides = _reads(node) == set(PARTS_RULE)
        elif isinstance(node, ast.If):
            tested = _reads(node.test)
            decides = bool(tested) and tested | _reads(ast.Module(body=[*node.body, *node.orelse],
                                                                  type_ignores=[])) == set(PARTS_RULE)
        else:
            continue
        if decides:
            found.append((node.lineno, node.end_lineno))
    outermost = [span for span in found if not any(o != span and o[0] <= span[0] and span[1] <= o[1] for o in found)]
    return [Written(path, line, "partitions wins over rows_per_part", source.splitlines()[line - 1].strip())
            for line, _ in sorted(set(outermost))]


def test_the_rule_between_partitions_and_rows_per_part_is_written_once():
    """An explicit count of parts wins over rows_per_part: :attr:`EngineOptions.part_rows` says so, and every
    engine reads it there."""
    paths = sorted(path for package in SCANNED for path in (ROOT / package).rglob("*.py"))
    found = [w for path in paths for w in rules_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]
    assert [w.path for w in found] == [ENGINE_OPTIONS], (
        f"the rule between partitions and rows_per_part is written {len(found)} times; read "
        "EngineOptions.part_rows instead:\n" + "\n".join(map(str, found)))


def test_the_scan_finds_the_rule_written_again():
    """The check itself: each way of writing the rule is found once, where it starts; reading part_rows is not."""
    source = '''
def where(partitions, rows_per_part):
    rows = None if partitions else ROWS_PER_PART
    count = self.partitions or -(-n // self.rows_per_part)
    if self.partitions is None:
        cut = self.rows_per_part if self.rows_per_part and n else None
    if options.part_rows is None:
        count = options.partitions
    return parts_engine(partitions=partitions, rows_per_part=rows_per_part)
'''
    assert [w.line for w in rules_in(source, "made_up.py")] == [3, 4, 5]


def test_every_declared_key_is_documented_in_its_declared_order_with_its_default():
    """The documented TOML is generated from the declarations: each key a section declares, in order, with the
    value the section holds by default (``[fill]``: per column, from its declared policies)."""
    documented = tomllib.loads(documented_defaults())
    for name, section in SECTIONS.items():
        if dataclasses.is_dataclass(section):
            assert [f.name for f in dataclasses.fields(section)] == list(documented[name]), name
            assert dataclasses.asdict(section.load(documented[name])) == dataclasses.asdict(section()), name
    fill = SECTIONS["fill"]
    loaded = {column: dataclasses.asdict(policy) for column, policy in fill.load(documented["fill"]).items()}
    assert loaded == {column: dataclasses.asdict(declared.policy) for column, declared in fill.COLUMNS.items()}


@pytest.mark.parametrize("value", [True, False, 0, 20, 2101, 1_048_576, 68_719_476_736, 0.0, 0.99, 3.0, 1024.0, 1e-12,
                                   1e6, 1e10, 1.5e7, -2.5e15, 3.4028234663852886e38, "none", 'a "quoted" word'])
def test_a_default_is_written_as_toml_that_reads_back_as_itself(value):
    text = toml_value(value)
    read = tomllib.loads(f"v = {text}")["v"]
    assert read == value and type(read) is type(value), text


def test_a_declared_default_outside_its_range_is_refused_when_declared():
    with pytest.raises(ConfigError, match="a declared default must be a whole number >= 2, got 1"):
        setting(int, 1, low=2)
    assert setting(float, 24).default == 24.0  # held as the key's type


# -- a list key ---------------------------------------------------------------------------------------------------
NAMES = Allowed(list, words=("ADMISSION_TYPE", "DISCHARGE_LOCATION", "INSURANCE"))


def test_a_list_key_holds_the_names_it_takes_as_a_tuple_in_their_declared_order():
    assert NAMES.parse("[graph] k", ["INSURANCE", "ADMISSION_TYPE"]) == ("ADMISSION_TYPE", "INSURANCE")
    assert NAMES.parse("[graph] k", ("ADMISSION_TYPE", "INSURANCE")) == ("ADMISSION_TYPE", "INSURANCE")
    assert NAMES.parse("[graph] k", []) == ()
    assert Allowed(list).parse("[graph] k", ["b", "a"]) == ("b", "a")  # without words: as written
    assert setting(list, ["INSURANCE", "ADMISSION_TYPE"], words=NAMES.words).default == ("ADMISSION_TYPE", "INSURANCE")


@pytest.mark.parametrize(("value", "message"), [
    (["INSURANCE", "RACE"], "[graph] k names 'RACE', which it does not take: it must be a list of any of "
                            "ADMISSION_TYPE, DISCHARGE_LOCATION, INSURANCE"),
    (["insurance"], "[graph] k names 'insurance', which it does not take"),
    (["INSURANCE", "INSURANCE"], "[graph] k names 'INSURANCE' more than once"),
    ("INSURANCE", "[graph] k must be a list of any of ADMISSION_TYPE, DISCHARGE_LOCATION, INSURANCE, "
                  "got 'INSURANCE' (str)"),
    ([1], "[graph] k must be a list of any of ADMISSION_TYPE, DISCHARGE_LOCATION, INSURANCE, got [1] (list)"),
], ids=["unknown", "lower-case", "twice", "a-string", "a-number"])
def test_a_list_key_refuses_what_it_does_not_take_naming_what_it_does(value, message):
    with pytest.raises(ConfigError) as caught:
        NAMES.parse("[graph] k", value)
    assert str(caught.value).startswith(message)


def test_a_list_default_is_written_as_a_toml_array_that_reads_back_as_its_names():
    text = toml_value(("ADMISSION_TYPE", "INSURANCE"))
    assert text == '["ADMISSION_TYPE", "INSURANCE"]'
    assert tomllib.loads(f"v = {text}")["v"] == ["ADMISSION_TYPE", "INSURANCE"]
    assert toml_value(()) == "[]"
