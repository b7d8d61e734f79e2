"""badpoints' checks for any table: pandera check methods registered by name (``pa.Check.z_within(bound=10)``), so a
user puts them in a schema of their own (a ``DataFrameSchema``, a ``DataFrameModel``'s ``Field`` or ``@dataframe_check``,
or pandera's YAML: every check keeps its statistics, and a schema using them round-trips through ``to_yaml`` and
``from_yaml``). ``badpoints check`` runs such a schema on a table of any size; pandera's own ``validate`` runs it on
a frame in memory; both give the same rows.

Row checks (a column's values, one row at a time): :func:`finite` (registered by :mod:`schemas.guard`),
:func:`z_within`, :func:`code_in_range`, :func:`label_in_range`, :func:`values_within`. Table checks (what only all
the rows tell: a group's spread, a key seen twice, an order, the rows left or added): :func:`z_explained`,
:func:`keys_unique`, :func:`monotone_within`, :func:`one_value_per_group`, :func:`not_empty`, :func:`kept_share`,
:func:`added_share`.
A table check learns its state from the rows as a fit does (:data:`TABLE_FITS`: a partial per block of rows, a
combine, a finish); on a frame in memory it fits the frame itself, and a run over blocks hands it the state of the
whole table (:func:`fitted_on`), so a block's failing rows are the whole table's.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
from pandera import extensions

from schemas import guard as _guard  # noqa: F401  (registers 'finite')
from schemas.catalogue import ERROR, CheckInfo

STAGE = "check"  # a table or graph checked by `badpoints check`, or a user's stage guarded by badpoints

CHECKS = (
    CheckInfo("table_schema", STAGE, ERROR, "a check of the table's own schema failed (types, nulls, ranges)",
              "The schema the table was checked against says these rows are wrong: fix the step that wrote them, "
              "or the schema if it says more than the table promises."),
    CheckInfo("finite", STAGE, ERROR, "value that is inf or NaN",
              "A non-finite number poisons every loss it touches; find the step that divided by zero or took "
              "the log of 0, and guard it."),
    CheckInfo("z_within", STAGE, ERROR, "z-score beyond the bound",
              "No real measurement is this many standard deviations out: a std guard that failed (std + 1e-7 "
              "on a constant item) or a unit error. Look at the items named; fix their scaling."),
    CheckInfo("z_explained", STAGE, ERROR, "z-score the group's own values cannot explain (a failed std guard)",
              "The z of the group's rows implies a scale far below its values' spread: its std was zero or "
              "tiny and a guard like std + 1e-7 blew differences up into millions. Scale such items as constant."),
    CheckInfo("code_in_range", STAGE, ERROR, "category code outside [0, n)",
              "A code past the vocabulary reads another row of an embedding, or crashes it; rebuild the codes "
              "with the vocabulary the model was made for."),
    CheckInfo("label_in_range", STAGE, ERROR, "label outside [0, num_classes)",
              "A label past the class count crashes cross-entropy on GPU or trains on a class that does not "
              "exist; fix the labelling step."),
    CheckInfo("values_within", STAGE, ERROR, "value outside its declared range",
              "A value outside what the column can hold (a unit or parse error); repair the rows or the range."),
    CheckInfo("keys_unique", STAGE, ERROR, "key shared by more than one row",
              "Rows that share their keys are counted twice by every join after; deduplicate them."),
    CheckInfo("monotone_within", STAGE, ERROR, "value that goes back within its group",
              "Sequence models read events in row order: sort each group by time (stable)."),
    CheckInfo("one_value_per_group", STAGE, ERROR, "group with more than one value (a patient in two splits)",
              "A group whose rows carry different values, as a patient's admissions in train and test, leaks "
              "between them; assign each group once."),
    CheckInfo("not_empty", STAGE, ERROR, "table with no rows",
              "A filter or a join emptied it: a model would train or be tested on nothing. Loosen the step that "
              "removed every row."),
    CheckInfo("kept_share", STAGE, ERROR, "table that kept less than its share of the rows it came from",
              "A step removed more rows than expected (a join on the wrong key, a filter too strict); look at "
              "what it dropped before training on the rest."),
    CheckInfo("added_share", STAGE, ERROR, "table with more rows than its share over the rows it came from",
              "A join on a key that is not unique on its other side repeats rows (each lab row once per matching "
              "row): deduplicate that side or join on the whole key; if the step is meant to add rows, raise "
              "at_most."),
)


# -- row checks -------------------------------------------------------------------------------------------------
def _numbers(values: pd.Series) -> np.ndarray:
    """A column's values as float64, NaN where null."""
    return pd.to_numeric(values, errors="coerce").to_numpy("float64", na_value=np.nan)


def _fine(values: pd.Series, passing: np.ndarray) -> pd.Series:
    """A row passes where ``passing`` or its value is null or non-finite (nulls are the schema's ``nullable``
    business, non-finite values :func:`finite`'s)."""
    numbers = _numbers(values)
    return pd.Series(passing | ~np.isfinite(numbers), index=values.index)


@extensions.register_check_method(statistics=["bound", "column", "by"], supported_types=[pd.Series, pd.DataFrame],
                                  check_type="vectorized")
def z_within(values: pd.Series | pd.DataFrame, *, bound: float, column: str | None = None,
             by: str | None = None) -> pd.Series:
    """|z| at most ``bound`` (e.g. 10: no real measurement is further out). A column's check; or the table's, of
    its ``column``, whose finding names the groups (``by``: the items) its rows belong to."""
    values = values[column] if isinstance(values, pd.DataFrame) else values
    return _fine(values, np.abs(_numbers(values)) <= bound)


def _whole_below(values: pd.Series, top: int) -> pd.Series:
    numbers = _numbers(values)
    return _fine(values, (numbers >= 0) & (numbers < top) & (numbers == np.round(numbers)))


@extensions.register_check_method(statistics=["n"], check_type="vectorized")
def code_in_range(values: pd.Series, *, n: int) -> pd.Series:
    """A category code: a whole number in ``[0, n)``, ``n`` the vocabulary's size."""
    return _whole_below(values, n)


@extensions.register_check_method(statistics=["num_classes"], check_type="vectorized")
def label_in_range(values: pd.Series, *, num_classes: int) -> pd.Series:
    """A class label: a whole number in ``[0, num_classes)``."""
    return _whole_below(values, num_classes)


@extensions.register_check_method(statistics=["low", "high"], check_type="vectorized")
def values_within(values: pd.Series, *, low: float, high: float) -> pd.Series:
    """A value in ``[low, high]``."""
    numbers = _numbers(values)
    return _fine(values, (numbers >= low) & (numbers <= high))


# -- table checks: their state from all the rows ----------------------------------------------------------------
@dataclass(frozen=True)
class TableFit:
    """What a table check learns from all the rows before it checks one: ``partial(block, **statistics)`` of each
    block of rows (in row order), ``combine(partials)`` (in the blocks' order), ``finish(combined, **statistics)``
    the state its check reads."""

    partial: Callable[..., Any]
    combine: Callable[[list], Any]
    finish: Callable[..., Any]

    def of(self, frame: pd.DataFrame, statistics: Mapping[str, Any]) -> Any:
        """The state of one frame that is the whole table (pandera's own ``validate``)."""
        return self.finish(self.combine([self.partial(frame, **statistics)]), **statistics)


MIN_RATIO = 1e-3  # z_explained's default: a z-score's scale is at least this share of its group's values' spread
DEFAULTS = {"z_explained": {"min_ratio": MIN_RATIO}}  # the table checks' statistics a user may leave out

_FITTED: contextvars.ContextVar[Mapping[Any, Any] | None] = contextvars.ContextVar("badpoints_table_fits",
                                                                                   default=None)


def key_of(name: str, statistics: Mapping[str, Any]) -> tuple:
    """How a table check's state is found: its name and its statistics (one not given, given as None, or given its
    default value is the same check)."""
    given = {key: value for key, value in statistics.items() if value is not None}
    return (name, *sorted((key, repr(value)) for key, value in {**DEFAULTS.get(name, {}), **given}.items()))


@contextlib.contextmanager
def fitted_on(states: Mapping[Any, Any]) -> Iterator[None]:
    """Within: the table checks read the states of the whole table (``states`` by :func:`key_of`), not of the
    block of rows they are handed."""
    token = _FITTED.set(states)
    try:
        yield
    finally:
        _FITTED.reset(token)


def _state(name: str, frame: pd.DataFrame, statistics: Mapping[str, Any]) -> Any:
    states = _FITTED.get()
    key = key_of(name, statistics)
    if states is not None and key in states:
        return states[key]
    return TABLE_FITS[name].of(frame, statistics)


def _concat(parts: list) -> Any:
    frames = [p for p in parts if p is not None and len(p)]
    return pd.concat(frames) if frames else (parts[0] if parts else None)


# z_explained: per group the centred moments of values and z, merged exactly (Chan et al.)
_MOMENTS = ["n", "mean_x", "mean_z", "m2_x", "m2_z"]


def _moments(frame: pd.DataFrame, *, column: str, values: str, by: str, **_: Any) -> pd.DataFrame:
    x, z = _numbers(frame[values]), _numbers(frame[column])
    ok = np.isfinite(x) & np.isfinite(z)
    codes, groups = pd.factorize(frame[by].to_numpy()[ok], sort=True)
    x, z = x[ok], z[ok]
    n = np.bincount(codes, minlength=len(groups)).astype("float64")
    mean_x = np.bincount(codes, weights=x, minlength=len(groups)) / n
    mean_z = np.bincount(codes, weights=z, minlength=len(groups)) / n
    centred_x, centred_z = x - mean_x[codes], z - mean_z[codes]
    return pd.DataFrame({"n": n.astype("int64"), "mean_x": mean_x, "mean_z": mean_z,
                         "m2_x": np.bincount(codes, weights=centred_x * centred_x, minlength=len(groups)),
                         "m2_z": np.bincount(codes, weights=centred_z * centred_z, minlength=len(groups))},
                        index=pd.Index(groups, name="g"))[_MOMENTS]


def _merged_moments(parts: list) -> pd.DataFrame:
    frames = [p for p in parts if p is not None and len(p)]
    if not frames:
        return pd.DataFrame(columns=_MOMENTS)
    rows = pd.concat(frames)
    n = rows["n"].astype("float64")
    totals = pd.DataFrame({"n": n, "sx": n * rows["mean_x"], "sz": n * rows["mean_z"]}).groupby(level=0).sum()
    merged = pd.DataFrame({"n": totals["n"], "mean_x": totals["sx"] / totals["n"], "mean_z": totals["sz"] / totals["n"]})
    for moment, mean in (("m2_x", "mean_x"), ("m2_z", "mean_z")):
        spread = n * (rows[mean] - merged[mean].reindex(rows.index).to_numpy()) ** 2
        merged[moment] = (rows[moment] + spread).groupby(level=0).sum()
    return merged[_MOMENTS]


def _degenerate(moments: pd.DataFrame, *, min_ratio: float | None = MIN_RATIO, **_: Any) -> set:
    """The groups whose z no z-score of their own values can be: with ``s_x`` and ``s_z`` the spreads (population
    std) of a group's finite values and z, a group of two rows or more fails when ``s_z > 0`` and (``s_x == 0`` or
    ``s_z > 1 / min_ratio``). A z-score divides by a scale ``s_x / s_z``; below ``min_ratio * s_x`` it is a std
    guard that failed (``std + 1e-7`` on an item constant in train), which is ``s_z > 1 / min_ratio``."""
    if moments is None or not len(moments):
        return set()
    min_ratio = MIN_RATIO if min_ratio is None else min_ratio
    spread_x = np.sqrt(moments["m2_x"] / moments["n"])
    spread_z = np.sqrt(moments["m2_z"] / moments["n"])
    bad = (moments["n"] > 1) & (spread_z > 0) & ((spread_x == 0) | (spread_z * min_ratio > 1))
    return set(moments.index[bad.to_numpy()])


@extensions.register_check_method(statistics=["column", "values", "by", "min_ratio"], supported_types=pd.DataFrame,
                                  check_type="vectorized")
def z_explained(frame: pd.DataFrame, *, column: str, values: str, by: str,
                min_ratio: float | None = MIN_RATIO) -> pd.Series:
    """Per group (``by``, the item), the z in ``column`` is what a z-score of the group's ``values`` can be: a
    group whose z implies a scale below ``min_ratio`` times its values' spread (:func:`_degenerate`: a std guard
    that failed, the ``std + 1e-7`` of a constant item) fails on its rows whose z is finite and |z| passes 1 (an
    inf or NaN z is :func:`finite`'s, and counted there only)."""
    statistics = dict(column=column, values=values, by=by, min_ratio=min_ratio)
    bad = _state("z_explained", frame, statistics)
    z = np.abs(_numbers(frame[column]))
    return pd.Series(~(frame[by].isin(bad).to_numpy() & np.isfinite(z) & (z > 1)), index=frame.index)


# keys_unique: the keys seen more than once in all the rows (their hashes)
def _key_hashes(frame: pd.DataFrame, *, columns: Sequence[str]) -> np.ndarray:
    return pd.util.hash_pandas_object(frame[list(columns)], index=False).to_numpy()


def _key_counts(frame: pd.DataFrame, *, columns: Sequence[str]) -> pd.Series:
    return pd.Series(_key_hashes(frame, columns=columns)).value_counts()


def _repeated(counts: pd.Series | None, **_: Any) -> np.ndarray:
    if counts is None or not len(counts):
        return np.zeros(0, dtype="uint64")
    return np.sort(counts.index[counts.to_numpy() > 1].to_numpy("uint64"))


def _added_counts(parts: list) -> pd.Series | None:
    frames = [p for p in parts if p is not None and len(p)]
    return pd.concat(frames).groupby(level=0).sum() if frames else None


@extensions.register_check_method(statistics=["columns"], supported_types=pd.DataFrame, check_type="vectorized")
def keys_unique(frame: pd.DataFrame, *, columns: Sequence[str]) -> pd.Series:
    """No two rows of the table share their ``columns`` (every row of a key seen twice fails)."""
    repeated = _state("keys_unique", frame, dict(columns=columns))
    return pd.Series(~np.isin(_key_hashes(frame, columns=columns), repeated), index=frame.index)


# monotone_within: per group, the rows (by source line) whose value is below the value before them in the group
def _ends(frame: pd.DataFrame, *, column: str, by: str) -> tuple[pd.DataFrame, np.ndarray]:
    """A block's per group first and last value (with the first's line), and its own rows that go back."""
    rows = pd.DataFrame({"g": frame[by].to_numpy(), "v": _numbers(frame[column]), "line": frame.index.to_numpy()})
    back = rows["v"].to_numpy() < rows.groupby("g", sort=False)["v"].shift(1).to_numpy()
    groups = rows.groupby("g", sort=False)
    ends = pd.DataFrame({"first": groups["v"].first(), "first_line": groups["line"].first(),
                         "last": groups["v"].last()})
    return ends, rows["line"].to_numpy()[back]


def _folded(parts: list) -> tuple[pd.DataFrame | None, np.ndarray]:
    """Blocks folded in row order: the rows that go back within a block, and the first row of a group in a block
    whose value is below the group's last value in the blocks before."""
    last, lines = None, [np.zeros(0, dtype="int64")]
    for ends, back in parts:
        lines.append(np.asarray(back, dtype="int64"))
        if last is not None:
            before = last.reindex(ends.index)
            lines.append(ends["first_line"].to_numpy("int64")[(ends["first"] < before).to_numpy()])
        last = ends["last"] if last is None else pd.concat([last.drop(ends.index, errors="ignore"), ends["last"]])
    return last, np.unique(np.concatenate(lines))


def _going_back(folded: tuple[pd.DataFrame | None, np.ndarray], **_: Any) -> np.ndarray:
    return folded[1]


@extensions.register_check_method(statistics=["column", "by"], supported_types=pd.DataFrame, check_type="vectorized")
def monotone_within(frame: pd.DataFrame, *, column: str, by: str) -> pd.Series:
    """Within each group (``by``), ``column`` never goes back in row order (a time per patient)."""
    back = _state("monotone_within", frame, dict(column=column, by=by))
    return pd.Series(~np.isin(frame.index.to_numpy(), back), index=frame.index)


# one_value_per_group: the groups whose rows carry more than one value
def _group_values(frame: pd.DataFrame, *, column: str, by: str) -> pd.DataFrame:
    return frame[[by, column]].drop_duplicates().rename(columns={by: "g", column: "v"})


def _mixed(pairs: pd.DataFrame | None, **_: Any) -> set:
    if pairs is None or not len(pairs):
        return set()
    distinct = pairs.drop_duplicates().groupby("g")["v"].nunique(dropna=False)
    return set(distinct.index[distinct.to_numpy() > 1])


@extensions.register_check_method(statistics=["column", "by"], supported_types=pd.DataFrame, check_type="vectorized")
def one_value_per_group(frame: pd.DataFrame, *, column: str, by: str) -> pd.Series:
    """Every row of a group (``by``: a patient) has the same ``column`` (its split): the rows of a group with more
    than one value fail."""
    mixed = _state("one_value_per_group", frame, dict(column=column, by=by))
    return pd.Series(~frame[by].isin(mixed).to_numpy(), index=frame.index)


# not_empty, kept_share and added_share: the rows of the table
def _rows(frame: pd.DataFrame, **_: Any) -> int:
    return len(frame)


def _total(parts: list) -> int:
    return int(sum(parts))


def _same(total: int, **_: Any) -> int:
    return total


@extensions.register_check_method(supported_types=pd.DataFrame, check_type="vectorized")
def not_empty(frame: pd.DataFrame) -> bool:
    """The table has rows."""
    return _state("not_empty", frame, {}) > 0


@extensions.register_check_method(statistics=["rows_in", "at_least"], supported_types=pd.DataFrame,
                                  check_type="vectorized")
def kept_share(frame: pd.DataFrame, *, rows_in: int, at_least: float) -> bool:
    """The table holds at least ``at_least`` (a share) of the ``rows_in`` rows it was made from."""
    return _state("kept_share", frame, dict(rows_in=rows_in, at_least=at_least)) >= at_least * rows_in


@extensions.register_check_method(statistics=["rows_in", "at_most"], supported_types=pd.DataFrame,
                                  check_type="vectorized")
def added_share(frame: pd.DataFrame, *, rows_in: int, at_most: float) -> bool:
    """The table holds at most ``at_most`` (a share) more rows than the ``rows_in`` rows it was made from: 0, a step
    that adds no row (a join that must not repeat one)."""
    return _state("added_share", frame, dict(rows_in=rows_in, at_most=at_most)) <= (1 + at_most) * rows_in


TABLE_FITS: dict[str, TableFit] = {
    "z_explained": TableFit(_moments, _merged_moments, _degenerate),
    "keys_unique": TableFit(_key_counts, _added_counts, _repeated),
    "monotone_within": TableFit(_ends, _folded, _going_back),
    "one_value_per_group": TableFit(_group_values, _concat, _mixed),
    "not_empty": TableFit(_rows, _total, _same),
    "kept_share": TableFit(_rows, _total, _same),
    "added_share": TableFit(_rows, _total, _same),
}
"""Each table check's fit, by its registered name."""

GROUPED = {"z_within", "z_explained", "monotone_within", "one_value_per_group"}  # checks whose finding names groups
