"""The schema a table is checked against (``badpoints check TABLE --schema SCHEMA``): a pandera YAML file, or a Python
``module:Class`` (a ``DataFrameModel`` or a ``DataFrameSchema``); and a starter schema inferred from a table
(``--infer``): pandera's own inference of each block, put together over every block, plus badpoints' checks where
the data calls for them (:mod:`schemas.registered`), for the user to edit.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
import pandera.pandas as pa

from pipeline.check.table import typed
from schemas import registered as _registered  # noqa: F401  (registers badpoints' checks by name)
from schemas.errors import StageError

NAME = "check"
MODULE_CLASS = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<name>[A-Za-z_]\w*)$")


def schema_problem(detail: str, advice: str, *, where: str) -> StageError:
    """A schema that cannot be used: a 'cannot run' of the check (exit 2), naming it and why."""
    return StageError(stage=NAME, side="input", check="file_unreadable", column=None, count=1,
                      failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=where,
                      detail=detail, advice=advice, whole_file=True)


# -- checks that cannot run -------------------------------------------------------------------------------------
BADPOINTS_CHECKS = {info.id for info in _registered.CHECKS} - {"table_schema"}
NAMING = ("column", "values", "by")  # the arguments of a table check that name one of the table's columns
EXAMPLES = {"bound": "1000", "min_ratio": "0.001", "column": "Z", "values": "VALUENUM", "by": "ITEMID",
            "columns": "[HADM_ID, ITEMID]", "n": "<the vocabulary's size>", "num_classes": "<the class count>",
            "low": "0", "high": "1", "rows_in": "<the rows it was made from>", "at_least": "0.5", "at_most": "0"}
"""What each argument of badpoints' checks may be, as the edit a refusal names."""


def label(check: pa.Check) -> str:
    """A check as its findings name it: its name and arguments (``z_within(column=z, by=itemid)``)."""
    return str(check.error or check.name)


def usable(schema: pa.DataFrameSchema, *, where: str = "schema") -> pa.DataFrameSchema:
    """``schema``, refused when one of badpoints' checks in it lacks an argument it needs to run (a ``z_within``
    without its ``bound``; a table's check without the ``column`` it reads): a schema that cannot be used, named
    with the argument and the edit, rather than a failure of the rows."""
    for check, whole in _badpoints_checks(schema):
        missing = _missing(check, whole)
        if missing:
            arguments = f"argument{'s' * (len(missing) > 1)} {', '.join(missing)}"
            yaml = ", ".join(f"{name}: {EXAMPLES.get(name, '<...>')}" for name in missing)
            python = ", ".join(f"{name}={EXAMPLES.get(name, '<...>')}" for name in missing)
            raise schema_problem(
                f"the {'table ' if whole else ''}check {label(check)} lacks its {arguments}, without which it "
                f"cannot run", f"Add {yaml} beside its other arguments in the YAML (in Python: "
                f"pa.Check.{check.name}({python}, ...)); docs/check.md lists every check's arguments", where=where)
    return schema


def runnable(schema: pa.DataFrameSchema, block: pd.DataFrame, *, where: str) -> None:
    """Refused (a schema that cannot be used) when a table check of ``schema`` names a column that ``block``
    lacks and the schema does not declare (one it declares is pandera's to name missing)."""
    for check, whole in _badpoints_checks(schema):
        absent = [c for c in named_columns(check) if c not in block.columns and c not in schema.columns]
        if whole and absent:
            raise schema_problem(
                f"the table check {label(check)} names the column {absent[0]}, which {where} lacks (its columns: "
                f"{', '.join(map(str, block.columns))})", "Name one of the table's columns in it, or give the "
                "table that column", where=where)


def named_columns(check: pa.Check | None) -> list[str]:
    """The columns a check's arguments name (``column``, ``values``, ``by``, ``columns``)."""
    statistics = dict(check.statistics or {}) if check is not None else {}
    named = [statistics.get(name) for name in NAMING] + list(statistics.get("columns") or ())
    return [column for column in named if column is not None]


def could_not_run(check: pa.Check, reason: str, *, where: str) -> StageError:
    """A check that raised as it ran (pandera's ``CHECK_ERROR``): the schema cannot be used as it is."""
    return schema_problem(f"the check {label(check)} could not run ({reason[:200]})",
                          "Fix its arguments: docs/check.md lists every check's, and what each must be",
                          where=where)


def checks_run(schema: pa.DataFrameSchema) -> tuple[str, ...]:
    """The checks a check run of ``schema`` runs, by id: ``table_schema`` (pandera's own: the types, the nulls, its
    checks) and each of badpoints' it uses, once, in the schema's order."""
    return ("table_schema", *dict.fromkeys(check.name for check, _ in _badpoints_checks(schema)))


def _badpoints_checks(schema: pa.DataFrameSchema) -> Iterator[tuple[pa.Check, bool]]:
    """badpoints' checks of ``schema``: each column's, then the table's (``True``)."""
    for column in schema.columns.values():
        yield from ((check, False) for check in column.checks if check.name in BADPOINTS_CHECKS)
    yield from ((check, True) for check in schema.checks if check.name in BADPOINTS_CHECKS)


def _missing(check: pa.Check, whole: bool) -> list[str]:
    """The arguments ``check`` needs and was not given: its function's keyword-only ones without a default, and
    a table check's ``column`` (a column's check reads its own)."""
    function = getattr(getattr(check, "_check_fn", None), "func", None)
    if function is None:
        return []
    parameters = inspect.signature(function).parameters
    needed = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if whole and "column" in parameters and "column" not in needed:
        needed.insert(0, "column")
    statistics = check.statistics or {}
    return [name for name in needed if statistics.get(name) is None]


def load_schema(spec: str | Path) -> pa.DataFrameSchema:
    """The schema ``spec`` names: a YAML file pandera wrote (``DataFrameSchema.to_yaml``), or ``module:Class`` of a
    ``DataFrameModel`` or ``DataFrameSchema`` (the module found from the current folder too)."""
    text = str(spec)
    match = MODULE_CLASS.match(text)
    if match and not Path(text).exists():
        return usable(_from_module(match["module"], match["name"], text), where=text)
    path = Path(text)
    if not path.is_file():
        raise schema_problem(f"the schema {text!r} is neither a file nor module:Class",
                             "Name a pandera YAML file, or a Python module:Class of a DataFrameModel or "
                             "DataFrameSchema", where=text)
    try:
        schema = pa.DataFrameSchema.from_yaml(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - YAML, pandera's own and a registered check's errors alike
        raise schema_problem(f"the schema file could not be read as pandera YAML ({type(exc).__name__}: "
                             f"{str(exc)[:200]})", "Write it with DataFrameSchema.to_yaml, or check its checks' "
                             "names (badpoints checks are registered by name)", where=text) from None
    return usable(schema, where=text)


def _from_module(module: str, name: str, where: str) -> pa.DataFrameSchema:
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # a module of the current folder, as `python -m` finds it
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise schema_problem(f"{where!r} could not be imported ({type(exc).__name__}: {str(exc)[:200]})",
                             "Run from the folder that holds the module, or name a YAML file", where=where) from None
    if isinstance(found, pa.DataFrameSchema):
        return found
    if isinstance(found, type) and issubclass(found, pa.DataFrameModel):
        return found.to_schema()
    raise schema_problem(f"{where!r} is a {type(found).__name__}, not a DataFrameModel or DataFrameSchema",
                         "Name a pandera DataFrameModel class or a DataFrameSchema object", where=where)


# -- inference --------------------------------------------------------------------------------------------------
Z_BOUND = 1000.0  # no real measurement is further out: a |z| beyond is a bug --infer names, not a range to keep
Z_NAME = re.compile(r"(^|_)Z($|_)|Z_?SCORE")  # a z column, by its name (upper case, '-' as '_')


@dataclass(frozen=True)
class Inferred:
    """A starter schema the table passes as it is, and what the table holds that no real one does (``seen``: one
    line each, naming the column and the edit to make once the step that wrote it is fixed)."""

    schema: pa.DataFrameSchema
    seen: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        """The schema as pandera's YAML, ``seen`` atop it as comments."""
        head = "".join(f"# {line}\n" for line in self.seen)
        if head:
            head = "# What no real table holds, each with the edit to make:\n" + head
        return head + self.schema.to_yaml().rstrip("\n") + "\n"


def infer(read: Callable[[], Iterable[pd.DataFrame]]) -> Inferred:
    """A schema every block of the table passes (``read()`` gives the blocks, twice): each text column's type from
    every block (a number where every value is one, whole or not; a time where every value is an ISO time; else
    text), then pandera's inference of each typed block (types, nullability, numeric ranges), put together (a
    column's range over every block, nullable where any block has a null), plus badpoints' checks the data calls
    for: ``finite()`` on a float column whose values are all finite, ``code_in_range(n)`` on a column of whole
    codes ``0..n-1`` (a code column, by its name), ``z_within(bound)`` on a z column (by its name) with the bound
    its largest |z| rounds up to. A column with inf in it keeps its range as ``values_within`` (the infs are
    ``finite``'s to name, not a range's). What it saw that no real table holds is in ``seen``: non-finite values,
    a |z| beyond :data:`Z_BOUND`, a z that is no z-score of its values within a group (``z_explained``'s rule,
    with the values and group columns found by name)."""
    kinds: dict[str, str] = {}
    for block in read():
        for name in block.columns:
            kinds[name] = _kind(block[name], kinds.get(name))
    typing = pa.DataFrameSchema({name: pa.Column(kind, name=name, nullable=True) for name, kind in kinds.items()
                                 if kind != "str"})
    explained = _explained_by(kinds)
    fit = _registered.TABLE_FITS["z_explained"]
    merged: dict[str, dict[str, Any]] = {}
    partials: dict[str, list] = {column: [] for column in explained}
    for block in read():
        block, _ = typed(block, typing)
        for name, column in pa.infer_schema(block).columns.items():
            merged[name] = _merge(merged.get(name), column, block[name])
        for column, statistics in explained.items():
            partials[column].append(fit.partial(block, **statistics))
    degenerate = {column: sorted(fit.finish(fit.combine(partials[column]), **statistics))
                  for column, statistics in explained.items()}
    schema = pa.DataFrameSchema({name: _column(name, merged[name]) for name in kinds if name in merged}, coerce=False)
    seen = [line for name in kinds if name in merged for line in _seen(name, merged[name])]
    seen += [_unexplained(statistics, groups) for column, statistics in explained.items()
             if (groups := degenerate[column])]
    return Inferred(schema, tuple(seen))


def _explained_by(kinds: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each float z column's ``z_explained`` arguments, where the table has columns to read them from: its values
    (the z column's name without its z part, else ``VALUENUM`` or ``VALUE``) and its groups (a whole-number column
    naming an item)."""
    upper = {name.upper().replace("-", "_"): name for name in kinds}
    groups = [name for name, kind in kinds.items() if kind == "int64" and "ITEM" in name.upper()]
    found = {}
    for name, kind in kinds.items():
        named = name.upper().replace("-", "_")
        if kind != "float64" or not Z_NAME.search(named) or not groups:
            continue
        stem = re.sub(r"_?Z(_?SCORED?)?$", "", named)
        values = next((upper[v] for v in (stem, "VALUENUM", "VALUE") if v and v != named and v in upper
                       and kinds[upper[v]] in ("float64", "int64")), None)
        if values is not None:
            found[name] = {"column": name, "values": values, "by": groups[0]}
    return found


def _seen(name: str, seen: Mapping[str, Any]) -> list[str]:
    """What one column holds that no real table does, each with its edit."""
    lines = []
    if seen.get("infinite"):
        signs = " or ".join(sign for sign, count in (("inf", seen["positive"]), ("-inf", seen["negative"])) if count)
        lines.append(f"{name}: {seen['infinite']:,} values are {signs}: the schema lets them pass; add finite to its "
                     f"checks (- options: {{check_name: finite}}) once the step that wrote them is fixed")
    top = max(abs(seen.get("low") or 0.0), abs(seen.get("high") or 0.0))
    if _is_z(name, seen) and top > Z_BOUND:
        lines.append(f"{name}: |z| up to {top:.1e}, beyond {Z_BOUND:,.0f}, which no real measurement is: the "
                     f"inferred bound lets it pass; set z_within's bound to {Z_BOUND:.0f} once its scaling is fixed"
                     .replace("e+", "e"))
    return lines


def _unexplained(statistics: Mapping[str, str], groups: list) -> str:
    column, values, by = statistics["column"], statistics["values"], statistics["by"]
    named = ", ".join(map(str, groups[:5])) + (f" +{len(groups) - 5} more" if len(groups) > 5 else "")
    return (f"{column}: in {len(groups):,} {by} group{'s' * (len(groups) != 1)} ({named}) it is no z-score of "
            f"{values}: it varies where {values} does not, or over {1 / _registered.MIN_RATIO:,.0f} times more (a "
            f"std of zero or tiny, as std + 1e-7 makes); add the table check z_explained (column: {column}, values: "
            f"{values}, by: {by}) once its scaling is fixed")


def _is_z(name: str, seen: Mapping[str, Any]) -> bool:
    return "float" in seen["dtype"] and bool(Z_NAME.search(name.upper().replace("-", "_")))


def _kind(values: pd.Series, known: str | None) -> str:
    """A text column's type so far: ``int64``, ``float64``, ``datetime64[ns]`` or ``str`` (what every value, and
    every block before, allows)."""
    if known == "str" or not pd.api.types.is_string_dtype(values) and values.dtype != object:
        return known or str(values.dtype)
    present = values.dropna()
    order = ["int64", "float64", "datetime64[ns]", "str"]
    numbers = pd.to_numeric(present, errors="coerce")
    if numbers.notna().all():
        whole = bool((numbers[np.isfinite(numbers)] == np.round(numbers[np.isfinite(numbers)])).all())
        found = "int64" if whole and not present.str.contains(r"[.eE]|inf|nan", case=False).any() else "float64"
    elif pd.to_datetime(present, errors="coerce", format="ISO8601").notna().all():
        found = "datetime64[ns]"
    else:
        found = "str"
    if known is None or known == found:
        return found
    if {known, found} <= {"int64", "float64"}:
        return "float64"
    return "str" if order.index(found) >= 2 or order.index(known) >= 2 else max(known, found, key=order.index)


def _merge(known: dict[str, Any] | None, column: pa.Column, values: pd.Series) -> dict[str, Any]:
    """What every block so far says of one column: its dtype (the first block's, text where two disagree),
    nullable, and for numbers the range, whether all are finite and whole, and the largest |value|."""
    numbers = pd.to_numeric(values, errors="coerce") if pd.api.types.is_numeric_dtype(values) else None
    seen: dict[str, Any] = {"dtype": str(column.dtype), "nullable": bool(values.isna().any())}
    if numbers is not None:
        floats = numbers.to_numpy("float64", na_value=np.nan)
        finite = numbers[np.isfinite(floats)]
        seen.update(low=float(finite.min()) if len(finite) else None, high=float(finite.max()) if len(finite) else None,
                    all_finite=bool(np.isfinite(numbers.dropna().to_numpy("float64")).all()),
                    whole=bool((finite == np.round(finite)).all()), positive=int(np.count_nonzero(floats == np.inf)),
                    negative=int(np.count_nonzero(floats == -np.inf)))
        seen["infinite"] = seen["positive"] + seen["negative"]
    if known is None:
        return seen
    if known["dtype"] != seen["dtype"]:
        return {"dtype": "str", "nullable": known["nullable"] or seen["nullable"]}
    if numbers is not None and "low" in known:
        lows = [v for v in (known["low"], seen["low"]) if v is not None]
        highs = [v for v in (known["high"], seen["high"]) if v is not None]
        seen.update(low=min(lows) if lows else None, high=max(highs) if highs else None,
                    all_finite=known["all_finite"] and seen["all_finite"], whole=known["whole"] and seen["whole"],
                    **{count: known[count] + seen[count] for count in ("positive", "negative", "infinite")})
    seen["nullable"] = known["nullable"] or seen["nullable"]
    return seen


def _column(name: str, seen: dict[str, Any]) -> pa.Column:
    checks = []
    low, high = seen.get("low"), seen.get("high")
    if low is not None and high is not None:
        # inf fails in_range: a column with infs keeps its range as values_within, which leaves them to finite
        checks.append(pa.Check.values_within(low=low, high=high) if seen.get("infinite") else
                      pa.Check.in_range(low, high))
        if "float" in seen["dtype"] and seen["all_finite"]:
            checks.append(pa.Check.finite())
        named = name.upper().replace("-", "_")
        if seen["whole"] and low >= 0 and (named.endswith("CODE") or named.endswith("_CODE")):
            checks.append(pa.Check.code_in_range(n=int(high) + 1))
        if _is_z(name, seen):
            checks.append(pa.Check.z_within(bound=float(np.ceil(max(abs(low), abs(high))))))
    return pa.Column(seen["dtype"], checks=checks, nullable=seen["nullable"], name=name)
