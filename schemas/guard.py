"""The ``guarded`` decorator: a stage's input and output are validated by its pandera schemas.

A failing schema becomes one :class:`StageError` naming the stage, the side
(``input`` or ``output``), the check, the column, how many rows failed and
their source lines (the frames' index), so a notebook user sees at once which
stage made the bad point. A frame that lacks columns gets one message naming
each of them with what it holds (the schema's column descriptions). Columns are
matched without letter case (MIMIC-IV's ``hadm_id`` is ``HADM_ID``), and a
frame comes back in its own case (:func:`case_renames`). A fit is
guarded on the columns it reads, and refuses the numbers it cannot learn from
(:func:`refuse_non_finite`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera import extensions

from schemas.errors import StageError, raise_if_out_of_memory, require_validation, value_classes

F = TypeVar("F", bound=Callable[..., Any])

OTHERS_LISTED = 5
"""How many other failing (column, check) pairs an error names besides the one it reports."""
FLOW_ADVICE = "The stage was handed data its schema forbids: fix the stage before it"


@extensions.register_check_method(check_type="vectorized")
def finite(values: pd.Series) -> pd.Series:
    """Not inf, -inf or NaN (nulls are the schema's ``nullable`` business)."""
    numbers = values.to_numpy("float64", na_value=0.0)
    return pd.Series(np.isfinite(numbers), index=values.index) | values.isna()


@functools.lru_cache(maxsize=None)
def reading(model: type[pa.DataFrameModel], columns: tuple[str, ...]) -> pa.DataFrameSchema:
    """``model`` as a fit that reads only ``columns`` of it is guarded: those columns with their checks, but for
    ``finite`` (the fit refuses a non-finite number itself, naming its items: :func:`refuse_non_finite`), and none
    of the model's frame-wide checks (they read columns the fit does not)."""
    schema = model.to_schema()
    kept = {name: column.set_checks([check for check in column.checks if check.name != "finite"])
            for name, column in schema.columns.items() if name in columns}
    return pa.DataFrameSchema(kept, name=model.__name__, strict=False)


def check_frame(model: type[pa.DataFrameModel], frame: pd.DataFrame, *, stage: str, side: str,
                table: str | None = None, caller: str | None = None,
                reads: Sequence[str] | None = None) -> pd.DataFrame:
    """Validate ``frame`` against ``model`` lazily (only the columns ``reads`` names, when given: a fit's); the
    first failing (column, check) becomes a StageError. ``caller`` names the stage function handed the frame."""
    require_validation()
    schema = model if reads is None else reading(model, tuple(reads))
    try:
        # inplace: no schema here coerces, adds columns or sets defaults, so pandera's only use of a copy
        # would be to protect the frame from changes that cannot happen; skipping it saves a full copy.
        return schema.validate(frame, lazy=True, inplace=True)
    except pa.errors.SchemaErrors as errors:
        raise_if_out_of_memory(errors)
        raise stage_error(errors.failure_cases, stage=stage, side=side, model=model, frame=frame,
                          table=table, caller=caller, reads=reads) from None


def stage_error(cases: pd.DataFrame, *, stage: str, side: str, model: type, frame: pd.DataFrame,
                table: str | None, caller: str | None = None, reads: Sequence[str] | None = None) -> StageError:
    """One StageError of pandera's failure cases: when columns are missing, each of them with what it holds; else
    the first failing (column, check) with its rows. Either way the other failing (column, check) pairs are named
    (the first :data:`OTHERS_LISTED`)."""
    cases = cases.assign(check=cases["check"].astype("str"), column=cases["column"].astype("str"))
    whole_frame = cases["schema_context"].astype("str").eq("DataFrameSchema") & cases["check"].ne(
        "column_in_dataframe")
    # A dataframe-wide check is listed once per column of each failing row: count rows, name no column.
    cases = cases.assign(column=cases["column"].where(~whole_frame, ""))
    missing = cases.loc[cases["check"].eq("column_in_dataframe"), "failure_case"].astype("str").tolist()
    cases = cases.drop_duplicates(["column", "check", "index"])
    advice = _advice(model, side=side, caller=caller, reads=reads, missing=bool(missing))
    if missing:
        return _missing_columns(missing, cases[~whole_frame.reindex(cases.index)], stage=stage, side=side,
                                model=model, table=table, advice=advice, present=list(frame.columns))
    first = cases.iloc[0]
    same = cases[(cases["check"] == first["check"]) & (cases["column"] == first["column"])]
    lines = pd.to_numeric(same["index"], errors="coerce").dropna().astype("int64")
    column = first["column"] if first["column"] in frame.columns else None
    classes = (value_classes(frame.loc[lines.to_numpy(), column].astype("str"))
               if column is not None and len(lines) and lines.isin(frame.index).all() else None)
    failure_cases = pd.DataFrame({"line": lines.to_numpy()})
    if classes is not None:
        failure_cases["value_class"] = classes.to_numpy()
    others = _others(cases[~cases.index.isin(same.index)])
    return StageError(
        stage=stage, side=side, check=str(first["check"]), column=column, count=max(len(same), 1),
        failure_cases=failure_cases, table=table or model.__name__,
        detail=f"{model.__name__} failed" + (f"; {others}" if others else ""), advice=advice,
    )


def _missing_columns(missing: list[str], cases: pd.DataFrame, *, stage: str, side: str, model: type,
                     table: str | None, advice: str, present: Sequence[Any] = ()) -> StageError:
    """The error of a frame that lacks the ``missing`` columns: each of them, its dtype and what it holds (its
    schema's description), the rename that gives it where several of the ``present`` columns match it but for
    letter case (:func:`case_renames` reads none of them), and the present columns' failing checks (``cases``; the
    frame-wide checks, which read the missing columns, left out)."""
    columns = model.to_schema().columns
    described = [f"{name} ({_dtype(columns[name])}): {columns[name].description}"
                 if name in columns and columns[name].description else name for name in missing]
    for at, name in enumerate(missing):
        alike = [str(column) for column in present if isinstance(column, str) and column.casefold() == name.casefold()]
        if len(alike) > 1:
            described[at] += (f" (the frame has {', '.join(alike[:-1])} and {alike[-1]}: rename the one that holds it "
                              f"to {name})")
    others = _others(cases[cases["check"] != "column_in_dataframe"])
    word = "column" if len(missing) == 1 else "columns"
    return StageError(
        stage=stage, side=side, check="column_in_dataframe", column=missing[0] if len(missing) == 1 else None,
        count=len(missing),
        failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=table or model.__name__,
        detail=f"{len(missing)} {word} missing: " + "; ".join(described) + (f"; {others}" if others else ""),
        advice=advice, whole_file=True,
    )


def _dtype(column: Any) -> str:
    """A column's dtype as a frame is given it: 'str' for pandas' string dtypes, else pandera's name."""
    name = str(column.dtype)
    return "str" if name.startswith("string") else name


def _others(cases: pd.DataFrame) -> str:
    """'also failed: SPLIT isin(...) (1 row), ...': the failing (column, check) pairs of ``cases``, the first
    :data:`OTHERS_LISTED` in the order pandera found them, with how many rows each (a frame-wide check's rows)."""
    if cases.empty:
        return ""
    rows = cases.groupby(["column", "check"], sort=False)["index"].nunique()
    named = [f"{' '.join(part for part in pair if part)} ({n} row{'s' if n != 1 else ''})"
             for pair, n in rows.head(OTHERS_LISTED).items()]
    more = f" (+{len(rows) - OTHERS_LISTED} more)" if len(rows) > OTHERS_LISTED else ""
    return "also failed: " + ", ".join(named) + more


def _advice(model: type, *, side: str, caller: str | None, reads: Sequence[str] | None, missing: bool) -> str:
    """What to do: inside badpoints' flow, fix the stage before; called directly, the function names the schema
    it takes (or the columns of it that it reads) and what the frame needs."""
    if side != "input":
        return "The stage produced data its schema forbids"
    if caller is None or _LAST_OUTPUT.get() is not _OUTSIDE:
        return FLOW_ADVICE
    takes = (f"{caller} reads {', '.join(reads)} of {model.__name__} ({model.__module__})" if reads
             else f"{caller} takes {model.__name__} ({model.__module__})")
    return takes + (": give the frame these columns" if missing
                    else ": repair or drop the rows named and call it again")


def refuse_non_finite(events: pd.DataFrame, column: str, *, among: np.ndarray | None = None,
                      needed: Callable[[np.ndarray], np.ndarray] | None = None, stage: str, fit: str, needs: str,
                      table: str = "LABEVENTS") -> None:
    """A fit's refusal of the rows of ``events`` it reads (``among``, a boolean mask; all without) whose ``column``
    is inf or -inf, or NaN where the row must carry a number (``needed``: of the rows a mask picks, which must,
    as their stage's schema says): one StageError, check ``fit_finite``, naming their items (ITEMID, when the rows
    have it) and lines (the index). ``fit`` names the function, ``needs`` what it needs."""
    values = events[column].to_numpy("float64", na_value=np.nan)
    read = np.ones(len(values), dtype=bool) if among is None else np.asarray(among, dtype=bool)
    bad = read & np.isinf(values)
    missing = read & np.isnan(values)
    if needed is not None and missing.any():
        bad[missing] = np.asarray(needed(missing), dtype=bool)
    if not bad.any():
        return
    failing = events.loc[bad, [name for name in (column, "ITEMID") if name in events]]
    failure_cases = pd.DataFrame({"line": failing.index.to_numpy(),
                                  "value_class": value_classes(failing[column]).to_numpy()})
    items = f"ITEMID {_items(failing['ITEMID'])} of " if "ITEMID" in failing else ""
    raise StageError(
        stage=stage, side="input", check="fit_finite", column=column, count=int(bad.sum()),
        failure_cases=failure_cases, table=table, detail=f"In {items}the rows handed to {fit}",
        advice=f"{fit} needs {needs}: drop or repair these rows and call it again; nothing was fitted",
    )


def _items(items: pd.Series) -> str:
    """'50912 (2 rows), 50931 (1 row)': the items, the most rows first (ties by ITEMID), the first
    :data:`OTHERS_LISTED` named."""
    counts = items.value_counts().sort_index().sort_values(ascending=False, kind="stable")
    named = [f"{item} ({n} row{'s' if n != 1 else ''})" for item, n in counts.head(OTHERS_LISTED).items()]
    return ", ".join(named) + (f" (+{len(counts) - OTHERS_LISTED} more)" if len(counts) > OTHERS_LISTED else "")


# Inside ``trusted_chain``: the frame a guard last passed as output, and the schema it passed.
_OUTSIDE = object()
_LAST_OUTPUT: contextvars.ContextVar[Any] = contextvars.ContextVar("badpoints_last_output", default=_OUTSIDE)


@contextlib.contextmanager
def trusted_chain() -> Iterator[None]:
    """Stages called in a chain: a frame that one stage's guard has just passed as output is not validated again
    as the next stage's input against the same (or a looser) schema.

    Only for code that hands a stage's output straight to the next stage without touching it (``flow.prepare``);
    every other call validates its input.
    """
    token = _LAST_OUTPUT.set(None)
    try:
        yield
    finally:
        _LAST_OUTPUT.reset(token)


def vouch(frame: pd.DataFrame, model: type | None) -> pd.DataFrame:
    """Inside :func:`trusted_chain`: ``frame`` is a stage's output that its guard passed against ``model`` and that
    was stored and read back unchanged (an engine's part), so the next stage's input guard need not validate it
    again. Outside, or with no ``model``, nothing changes."""
    if model is not None and _LAST_OUTPUT.get() is not _OUTSIDE:
        _LAST_OUTPUT.set((frame, model))
    return frame


def _passed_as_output(frame: pd.DataFrame, model: type) -> bool:
    last = _LAST_OUTPUT.get()
    return isinstance(last, tuple) and last[0] is frame and issubclass(last[1], model)


def case_renames(columns: Sequence[Any], names: Sequence[str]) -> dict[str, str]:
    """The columns that are one of ``names`` but for letter case (``hadm_id`` for ``HADM_ID``), each to that name:
    only where no column is the name itself and exactly one matches it (``hadm_id`` beside ``Hadm_Id`` is
    neither)."""
    present = set(columns)
    folded: dict[str, list[str]] = {}
    for column in columns:
        if isinstance(column, str):
            folded.setdefault(column.casefold(), []).append(column)
    return {match[0]: name for name in names if name not in present
            for match in [folded.get(name.casefold(), [])] if len(match) == 1}


@dataclasses.dataclass(frozen=True)
class _AsGiven:
    """How a frame handed to a stage differs from its schema's names: its columns renamed to them, and the
    ``absent`` columns it lacks whose absence means none (added empty on the way in, dropped on the way out);
    ``lower`` when it names every column of the schema it has in lower case."""

    renames: Mapping[str, str]
    absent: tuple[str, ...]
    lower: bool = False

    def schema_names(self, frame: pd.DataFrame, model: type[pa.DataFrameModel]) -> pd.DataFrame:
        """``frame`` with the schema's names and its absent columns, empty (a copy; the frame is left alone)."""
        dtypes = _columns(model)
        renamed = frame.rename(columns=dict(self.renames))
        return renamed.assign(**{name: pd.Series(pd.NA, index=frame.index, dtype=dtypes[name])
                                 for name in self.absent})

    def given_names(self, result: Any, before: pd.Index) -> Any:
        """``result`` (a frame, an object whose ``frame`` is one, or a fitted state) as the caller named the frame:
        the renamed columns back, the absent ones dropped, and the columns the stage added in lower case where every
        schema column it has was (a frame in MIMIC-IV's case gets ``z``, not ``Z``)."""
        if not isinstance(result, pd.DataFrame):
            inner = getattr(result, "frame", None)
            if isinstance(inner, pd.DataFrame) and dataclasses.is_dataclass(result):
                return dataclasses.replace(result, frame=self.given_names(inner, before))
            return result
        back = {name: column for column, name in self.renames.items()}
        added = [column for column in result.columns if column not in before and isinstance(column, str)]
        if self.lower:
            taken = set(result.columns) | set(back.values())
            back.update({column: column.lower() for column in added
                         if column.lower() not in taken and column.lower() != column})
        return result.drop(columns=[name for name in self.absent if name in result]).rename(columns=back)


@functools.lru_cache(maxsize=None)
def _columns(model: type[pa.DataFrameModel]) -> dict[str, Any]:
    """``model``'s columns named in full (not by a pattern), each with the dtype it is added as when absent and
    empty (object for text); once per model, as a stage is called once per part."""
    return {name: object if str(column.dtype) in ("str", "object") or str(column.dtype).startswith("string")
            else str(column.dtype) for name, column in model.to_schema().columns.items() if not column.regex}


def _as_given(frame: pd.DataFrame, model: type[pa.DataFrameModel], optional: Sequence[str]) -> _AsGiven | None:
    """How ``frame`` differs from ``model``'s names (None when it does not)."""
    names = list(_columns(model))
    renames = case_renames(list(frame.columns), names)
    absent = tuple(name for name in optional if name not in frame.columns and name not in renames.values())
    lower = bool(renames) and all(column == column.lower() for column in renames) and not any(
        name in frame.columns and name != name.lower() for name in names)
    return _AsGiven(renames, absent, lower) if renames or absent else None


def guarded(*, stage: str, takes: type[pa.DataFrameModel] | None = None,
            gives: type[pa.DataFrameModel] | None = None, reads: Sequence[str] | None = None,
            optional: Sequence[str] = ()) -> Callable[[F], F]:
    """Validate the first argument against ``takes`` and the returned frame against ``gives``.

    A stage that returns an object with a ``frame`` attribute (such as
    :class:`pipeline.kernel.quarantine.Kept`) has that frame validated. A fit, which reads some columns of what
    its stage takes and returns a state, declares them in ``reads``: its input is validated on those
    (:func:`reading`); a fit that reads no rows (handed ``None``) has nothing to validate. An error names the
    function as ``<stage>.<name>``, the way a notebook calls it.

    The frame's columns are matched to ``takes``' names without letter case (:func:`case_renames`): the function
    sees the schema's names, and the caller gets its own back (the stage's new columns in lower case where the
    frame's were). ``optional`` names columns of ``takes`` whose absence means none (a frame of numbers has no
    VALUE text and no category CODE): a frame without them is handled as if they were there and empty, and comes
    back without them.
    """

    def decorate(function: F) -> F:
        caller = f"{stage}.{function.__name__}"

        @functools.wraps(function)
        def wrapper(frame: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
            given = (_as_given(frame, takes, optional)
                     if takes is not None and isinstance(frame, pd.DataFrame) else None)
            if given is not None:
                frame = given.schema_names(frame, takes)
            if takes is not None and frame is not None and not _passed_as_output(frame, takes):
                check_frame(takes, frame, stage=stage, side="input", caller=caller, reads=reads)
            result = function(frame, *args, **kwargs)
            if gives is not None:
                out = result.frame if hasattr(result, "frame") else result
                check_frame(gives, out, stage=stage, side="output")
                if _LAST_OUTPUT.get() is not _OUTSIDE:
                    _LAST_OUTPUT.set((out, gives))
            return given.given_names(result, frame.columns) if given is not None else result

        wrapper.stage = stage  # type: ignore[attr-defined]
        wrapper.takes = takes  # type: ignore[attr-defined]
        wrapper.gives = gives  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
