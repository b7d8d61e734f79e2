"""The ``guarded`` decorator: a stage's input and output are validated by its pandera schemas.

A failing schema becomes one :class:`StageError` naming the stage, the side
(``input`` or ``output``), the check, the column, how many rows failed and
their source lines (the frames' index), so a notebook user sees at once which
stage made the bad point.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Callable, Iterator, TypeVar

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera import extensions

from schemas.errors import StageError, raise_if_out_of_memory, require_validation, value_classes

F = TypeVar("F", bound=Callable[..., Any])


@extensions.register_check_method(check_type="vectorized")
def finite(values: pd.Series) -> pd.Series:
    """Not inf, -inf or NaN (nulls are the schema's ``nullable`` business)."""
    numbers = values.to_numpy("float64", na_value=0.0)
    return pd.Series(np.isfinite(numbers), index=values.index) | values.isna()


def check_frame(model: type[pa.DataFrameModel], frame: pd.DataFrame, *, stage: str, side: str,
                table: str | None = None) -> pd.DataFrame:
    """Validate ``frame`` against ``model`` lazily; the first failing (column, check) becomes a StageError."""
    require_validation()
    try:
        # inplace: no schema here coerces, adds columns or sets defaults, so pandera's only use of a copy
        # would be to protect the frame from changes that cannot happen; skipping it saves a full copy.
        return model.validate(frame, lazy=True, inplace=True)
    except pa.errors.SchemaErrors as errors:
        raise_if_out_of_memory(errors)
        raise stage_error(errors.failure_cases, stage=stage, side=side, model=model, frame=frame,
                          table=table) from None


def stage_error(cases: pd.DataFrame, *, stage: str, side: str, model: type, frame: pd.DataFrame,
                table: str | None) -> StageError:
    cases = cases.assign(check=cases["check"].astype("str"), column=cases["column"].astype("str"))
    whole_frame = cases["schema_context"].astype("str").eq("DataFrameSchema") & cases["check"].ne(
        "column_in_dataframe")
    # A dataframe-wide check is listed once per column of each failing row: count rows, name no column.
    cases = cases.assign(column=cases["column"].where(~whole_frame, ""))
    cases = cases.drop_duplicates(["column", "check", "index"])
    first = cases.iloc[0]
    same = cases[(cases["check"] == first["check"]) & (cases["column"] == first["column"])]
    lines = pd.to_numeric(same["index"], errors="coerce").dropna().astype("int64")
    column = first["column"] if first["column"] in frame.columns else None
    if first["check"] == "column_in_dataframe":  # pandera names the model there, the column is the failure case
        column = str(first["failure_case"])
    classes = (value_classes(frame.loc[lines.to_numpy(), column].astype("str"))
               if column is not None and len(lines) and lines.isin(frame.index).all() else None)
    failure_cases = pd.DataFrame({"line": lines.to_numpy()})
    if classes is not None:
        failure_cases["value_class"] = classes.to_numpy()
    others = len(cases.groupby(["column", "check"])) - 1
    return StageError(
        stage=stage, side=side, check=str(first["check"]), column=column, count=max(len(same), 1),
        failure_cases=failure_cases, table=table or model.__name__,
        detail=f"{model.__name__} failed" + (f"; {others} other column checks failed too" if others > 0 else ""),
        advice=("The stage was handed data its schema forbids: fix the stage before it"
                if side == "input" else "The stage produced data its schema forbids"),
    )


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


def guarded(*, stage: str, takes: type[pa.DataFrameModel] | None = None,
            gives: type[pa.DataFrameModel] | None = None) -> Callable[[F], F]:
    """Validate the first argument against ``takes`` and the returned frame against ``gives``.

    A stage that returns an object with a ``frame`` attribute (such as
    :class:`pipeline.kernel.quarantine.Kept`) has that frame validated.
    """

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(frame: pd.DataFrame, *args: Any, **kwargs: Any) -> Any:
            if takes is not None and not _passed_as_output(frame, takes):
                check_frame(takes, frame, stage=stage, side="input")
            result = function(frame, *args, **kwargs)
            if gives is not None:
                out = result.frame if hasattr(result, "frame") else result
                check_frame(gives, out, stage=stage, side="output")
                if _LAST_OUTPUT.get() is not _OUTSIDE:
                    _LAST_OUTPUT.set((out, gives))
            return result

        wrapper.stage = stage  # type: ignore[attr-defined]
        wrapper.takes = takes  # type: ignore[attr-defined]
        wrapper.gives = gives  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
