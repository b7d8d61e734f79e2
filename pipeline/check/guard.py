"""Guard a researcher's own preprocessing functions as badpoints guards its stages: :class:`Guard`.

::

    guard = Guard()

    @guard.stage(takes=Labs, gives=Labs, keeps=0.5)
    def drop_outpatient(labs: pd.DataFrame) -> pd.DataFrame: ...

Each call of a guarded function ``f(frame, ...) -> frame`` validates the frame it is handed against ``takes`` and the
frame it returns against ``gives`` (pandera schemas, which may use badpoints' registered checks), lazily: every
failing check and column at once, found by the check stage's own call (:func:`pipeline.check.stage.checked_block`)
and made into findings as ``badpoints check`` makes them. It counts the rows in and out and holds them to what the
stage may do to the rows: keep at least a share (``keeps``: :func:`schemas.registered.kept_share`), add at most a
share (``adds``: :func:`schemas.registered.added_share`; 0, a join that must not repeat a row), and never empty the
frame (:func:`schemas.registered.not_empty`) unless ``empties``. Its findings (stage: the function's name; table:
``call N input`` or ``call N output``, N counting the function's calls, named by ``key`` where it is given:
``call 3 (ITEMID=50912) output``) and its step (rows in and out) go into the guard, call after call; a finding
handed on from call to call (the same check failing the same rows the same way) is reported once, where it first
appears. ``guard.report`` is a :class:`~pipeline.reporting.report.Report` (status, exit code, JSON,
``findings_frame()``, JUnit), ``guard.ledger()`` the rows in and out per call, and a notebook shows the guard as
the HTML report.

On an error, by default (``errors="raise"``), the call is reported in full and then raises one
:class:`~schemas.errors.StageError` naming the first error and counting the others: an input with an error is not
handed to the function, and an output with one is not handed back. ``errors="collect"`` raises for no finding: the
function runs whatever its input and its output is returned whatever it holds; the report says what was wrong (a
script in CI ends with ``guard.report.write_json(path)`` and exits with ``guard.exit_code``). ``guard.errors`` may be
set between calls.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import pandas as pd
import pandera.pandas as pa

from pipeline.check.stage import checked_block
from pipeline.kernel.finding import Finding
from pipeline.kernel.quarantine import Step
from pipeline.reporting.findings import summary_finding
from pipeline.reporting.html import HtmlReport, render
from pipeline.reporting.report import Report, tally
from schemas import registered
from schemas.catalogue import CHECKS, ERROR, SEVERITIES
from schemas.errors import SAMPLE_CAP, StageError, require_validation, value_classes
from schemas.guard import OTHERS_LISTED

F = TypeVar("F", bound=Callable[..., Any])
Schema = pa.DataFrameSchema | type[pa.DataFrameModel]

RAISE = "raise"  # a call with an error raises StageError once it is reported
COLLECT = "collect"  # no finding raises: the report holds them
FRAME = "frame"  # the table the ledger names for a guarded call's rows
LINES = "each frame's index (its row positions from 0 where the index is not unique integers)"
"""What a finding's line numbers are (:func:`_numbered`), as the HTML report says."""
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#7f7f7f")
"""The colours of the guarded functions in the HTML report, in the order they were guarded."""


def as_schema(schema: Schema | None, *, what: str) -> pa.DataFrameSchema | None:
    """A ``DataFrameSchema`` of a schema or a ``DataFrameModel`` class (None stays None)."""
    if schema is None or isinstance(schema, pa.DataFrameSchema):
        return schema
    if isinstance(schema, type) and issubclass(schema, pa.DataFrameModel):
        return schema.to_schema()
    raise TypeError(f"{what} is a pandera DataFrameSchema or DataFrameModel class, not {type(schema).__name__}")


@dataclass(frozen=True)
class Expected:
    """What a guarded function may do to the rows it is handed: keep at least ``keeps`` of them (a share), add at
    most ``adds`` (a share of them; 0: none), and leave none only when ``empties``."""

    keeps: float | None = None
    adds: float | None = None
    empties: bool = False

    def __post_init__(self) -> None:
        if self.keeps is not None and not 0 <= self.keeps <= 1:
            raise ValueError(f"keeps is a share of the rows in, from 0 to 1, not {self.keeps!r}")
        if self.adds is not None and not self.adds >= 0:
            raise ValueError(f"adds is a share of the rows in, 0 or more, not {self.adds!r}")

    def findings(self, out: pd.DataFrame, rows_in: int, *, stage: str, table: str) -> list[Finding]:
        """The findings of ``out`` made from ``rows_in`` rows, by the registered checks of the rows a table
        keeps; an emptied frame is one finding (not_empty), not also one of the share kept."""
        rows_out, found = len(out), []

        def finding(check: str, count: int, message: str) -> None:
            found.append(summary_finding(stage=stage, check=check, table=table, column=None, count=count,
                                         message=message))

        if rows_in and not self.empties and not registered.not_empty(out):
            finding("not_empty", rows_in, f"no row of the {rows_in:,} it was handed: {stage} emptied the frame")
        elif self.keeps is not None and not registered.kept_share(out, rows_in=rows_in, at_least=self.keeps):
            finding("kept_share", rows_in - rows_out, f"kept {rows_out:,} of {rows_in:,} rows "
                    f"({rows_out / rows_in:.1%}), fewer than keeps={self.keeps:g}")
        if self.adds is not None and not registered.added_share(out, rows_in=rows_in, at_most=self.adds):
            times = f" ({rows_out / rows_in:.2f} times as many)" if rows_in else ""
            finding("added_share", rows_out - rows_in, f"{rows_out:,} rows from {rows_in:,}{times}, more than "
                    f"adds={self.adds:g} allows")
        return found


Key = str | Callable[..., Any]


@dataclass(frozen=True)
class GuardedStage:
    """One guarded function: its name (the findings' stage), what it takes and gives, what it may do to the rows,
    its signature (the first parameter is the frame, when it is given by keyword) and what names a call
    (:meth:`called`)."""

    name: str
    takes: pa.DataFrameSchema | None
    gives: pa.DataFrameSchema | None
    expected: Expected
    signature: inspect.Signature
    key: Key | None = None

    @property
    def frame(self) -> str | None:
        return next(iter(self.signature.parameters), None)

    def called(self, frame: pd.DataFrame, args: tuple, kwargs: dict) -> str:
        """What names one call besides its number: ``key=value`` for a parameter named ``key`` (its argument) or a
        column of the frame holding one value (the group a per-group loop hands it); what ``key`` gives where it
        is a function of the call's arguments; nothing without a key (or a column of several values)."""
        if self.key is None:
            return ""
        if callable(self.key):
            return f" ({self.key(*args, **kwargs)})"
        if self.key in self.signature.parameters:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return f" ({self.key}={bound.arguments[self.key]})"
        if self.key in frame.columns:
            values = pd.unique(frame[self.key].dropna())
            return f" ({self.key}={values[0]})" if len(values) == 1 else ""
        raise ValueError(f"key names a parameter of {self.name} or a column of its frame: {self.key!r} is neither")


class Guard:
    """The report of every call of the functions it guards (:meth:`stage`), call after call.

    ``errors``: ``"raise"`` (a call with an error raises :class:`~schemas.errors.StageError` once it is reported)
    or ``"collect"`` (nothing raises for a finding). ``severity``: a check's severity changed, as the config's
    ``[severity]`` does (``{"kept_share": "warning"}``; ``"off"`` drops its findings). ``show_values``: the
    findings keep the first failing values (off by default: clinical values stay out of reports). ``max_lines``:
    the lines a finding lists.
    """

    def __init__(self, *, errors: str = RAISE, severity: Mapping[str, str] | None = None, show_values: bool = False,
                 max_lines: int = SAMPLE_CAP) -> None:
        for check, level in (severity or {}).items():
            if check not in CHECKS or level not in SEVERITIES:
                raise ValueError(f"severity maps a check id (`badpoints checks` lists them) to one of "
                                 f"{', '.join(SEVERITIES)}: not {check!r} = {level!r}")
        self.errors, self.show_values, self.max_lines = errors, show_values, max_lines
        self.severity = dict(severity or {})
        self._colours: dict[str, str] = {}  # each guarded function's, in the order they were guarded
        self.clear()

    @property
    def errors(self) -> str:
        """``"raise"`` or ``"collect"``; set it to change what the next calls do."""
        return self._errors

    @errors.setter
    def errors(self, errors: str) -> None:
        if errors not in (RAISE, COLLECT):
            raise ValueError(f"errors is {RAISE!r} or {COLLECT!r}, not {errors!r}")
        self._errors = errors

    def clear(self) -> None:
        """Forget every call (the functions stay guarded): a notebook starting over."""
        self.calls = 0
        self._findings: list[tuple[int, Finding]] = []  # by call number (the guard's, in call order)
        self._steps: list[tuple[int, Step]] = []
        self._counted: dict[str, int] = {}  # each function's calls
        self._said: set[tuple] = set()  # what the findings reported say (:func:`_same`)

    def stage(self, function: F | None = None, *, takes: Schema | None = None, gives: Schema | None = None,
              keeps: float | None = None, adds: float | None = None, empties: bool = False,
              key: Key | None = None) -> Any:
        """Guard ``function(frame, ...) -> frame``: its first argument validated against ``takes``, what it returns
        against ``gives``; it keeps at least ``keeps`` of the rows it is handed (a share, 0 to 1), adds at most
        ``adds`` of them (a share; 0: a join that must not repeat a row) and never empties the frame unless
        ``empties``. Used bare (``@guard.stage``) it counts the rows and holds the frame to not emptying. The
        findings name the function as their stage, and the call by its number among the function's calls and by
        ``key``: a parameter (``key="item"``: ``call 3 (item=50912)``), a column holding one value in the call
        (``key="ITEMID"`` in a per-item loop), or a function of the call's arguments giving its name."""
        if function is not None:
            return self.stage(takes=takes, gives=gives, keeps=keeps, adds=adds, empties=empties, key=key)(function)
        schemas = as_schema(takes, what="takes"), as_schema(gives, what="gives")
        expected = Expected(keeps, adds, empties)

        def decorate(function: F) -> F:
            guarded = GuardedStage(function.__name__, *schemas, expected, inspect.signature(function), key)
            self._colours.setdefault(guarded.name, COLOURS[len(self._colours) % len(COLOURS)])

            @functools.wraps(function)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return self._call(guarded, function, args, kwargs)

            wrapper.guard = self  # type: ignore[attr-defined]
            wrapper.takes, wrapper.gives = guarded.takes, guarded.gives  # type: ignore[attr-defined]
            return wrapper  # type: ignore[return-value]

        return decorate

    # -- a call ------------------------------------------------------------------------------------------------
    def _call(self, guarded: GuardedStage, function: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """One call: the input checked, the function run, its output checked and its rows judged; reported, then
        raised on an error where the guard raises."""
        require_validation()
        frame = args[0] if args else kwargs.get(guarded.frame) if guarded.frame else None
        _require_frame(frame, f"{guarded.name}'s first argument")
        called = f"call {self._counted.get(guarded.name, 0) + 1}{guarded.called(frame, args, kwargs)}"
        self.calls += 1
        self._counted[guarded.name] = self._counted.get(guarded.name, 0) + 1
        number = self.calls
        seen = {"input": _numbered(frame, guarded.takes)}  # the frames as their findings name rows
        found = self._validated(seen["input"], guarded.takes, stage=guarded.name, table=f"{called} input")
        if self.errors == RAISE and self._has_error(found):
            raise self._reported(number, guarded.name, found, seen)
        try:
            result = function(*args, **kwargs)
            out = result.frame if hasattr(result, "frame") else result
            _require_frame(out, f"what {guarded.name} returned")
        except BaseException:
            self._reported(number, guarded.name, found, seen)
            raise
        table, seen["output"] = f"{called} output", _numbered(out, guarded.gives)
        found += self._validated(seen["output"], guarded.gives, stage=guarded.name, table=table)
        found += guarded.expected.findings(out, len(frame), stage=guarded.name, table=table)
        step = Step(stage=guarded.name, step=called, rows_in=len(frame), rows_out=len(out), table=FRAME)
        error = self._reported(number, guarded.name, found, seen, step)
        if self.errors == RAISE and error is not None:
            raise error
        return result

    def _validated(self, frame: pd.DataFrame, schema: pa.DataFrameSchema | None, *, stage: str,
                   table: str) -> list[Finding]:
        """The findings of ``frame`` against ``schema``, every failing check and column at once."""
        if schema is None:
            return []
        failures = checked_block(frame, schema=schema, states={}, max_lines=self.max_lines,
                                 show_values=self.show_values, inplace=not _changes(schema))
        return failures.findings(table, max_lines=self.max_lines, stage=stage)

    def _has_error(self, found: list[Finding]) -> bool:
        return any(f.severity == ERROR for f in self._severe(found))

    def _severe(self, found: list[Finding]) -> list[Finding]:
        return Report(findings=list(found)).with_severities(self.severity).findings

    def _reported(self, number: int, stage: str, found: list[Finding], frames: Mapping[str, pd.DataFrame],
                  step: Step | None = None) -> StageError | None:
        """The call's findings (with the guard's severities) and step added to the guard, each but those an earlier
        call reported already (:func:`_same`); the error it raises where the guard raises, None when it has
        none."""
        found = self._severe(found)
        for finding in found:
            said = _same(finding)
            if said is None or said not in self._said:
                self._findings.append((number, finding))
            if said is not None:
                self._said.add(said)
        if step is not None:
            self._steps.append((number, step))
        errors = [f for f in found if f.severity == ERROR]
        return stage_error(stage, errors, frames) if errors else None

    # -- what the calls found ----------------------------------------------------------------------------------
    @property
    def report(self) -> Report:
        """Every call's findings and steps, in call order, as a run's report."""
        steps = [step.as_json() for _, step in sorted(self._steps, key=lambda pair: pair[0])]
        findings = [f for _, f in sorted(self._findings, key=lambda pair: pair[0])]
        return Report(findings=findings, overrides=dict(self.severity), attrition={"steps": steps},
                      stages=dict(self._colours))

    @property
    def exit_code(self) -> int:
        """0 with no error (warnings and notes may remain), 1 with one: as ``badpoints check`` exits."""
        return self.report.exit_code

    def ledger(self) -> pd.DataFrame:
        """One row per call that returned a frame: its stage (the function), step (``call N``), rows in and out,
        rows removed (negative: added), and its errors and warnings."""
        report = self.report
        ledger = report.attrition_frame()[["stage", "step", "rows_in", "rows_out", "removed"]]
        steps = pd.MultiIndex.from_frame(ledger[["stage", "step"]])
        for severity, column in ((ERROR, "errors"), ("warning", "warnings")):
            counted = pd.Series([(f.stage, f.table.rsplit(" ", 1)[0]) for _, f in self._findings
                                 if f.severity == severity], dtype="object").value_counts()
            ledger[column] = counted.reindex(steps, fill_value=0).to_numpy("int64")
        return ledger

    def html(self) -> HtmlReport:
        """The HTML report of every call (``.write(path)`` saves it)."""
        return HtmlReport(render(self, None, show_values=self.show_values, kind="guard", lines=LINES))

    def _repr_html_(self) -> str:
        return self.html()._repr_html_()

    def __repr__(self) -> str:
        found = [f.severity for _, f in self._findings]
        errors, warnings = found.count(ERROR), found.count("warning")
        return (f"<Guard: {self.calls} call{'s' if self.calls != 1 else ''} of {len(self._colours)} guarded "
                f"function{'s' if len(self._colours) != 1 else ''}, status {self.report.status} "
                f"({tally(errors, warnings, len(found) - errors - warnings)})>")


def stage_error(stage: str, errors: list[Finding], frames: Mapping[str, pd.DataFrame]) -> StageError:
    """The error a call raises: its first error finding, what the frame's failing values are (by class: ``frames``
    by side, as their findings name rows), and the other errors named (the first
    :data:`~schemas.guard.OTHERS_LISTED`)."""
    first = errors[0]
    side = first.table.rsplit(" ", 1)[-1]
    failure_cases = pd.DataFrame({"line": pd.Series(first.lines, dtype="int64")})
    frame = frames.get(side)
    if first.column is not None and frame is not None and first.column in frame and first.lines:
        if pd.Index(first.lines).isin(frame.index).all():
            failure_cases["value_class"] = value_classes(frame.loc[first.lines, first.column]).to_numpy()
    others = [f"{'.'.join(p for p in (f.table, f.column) if p)} {f.check}" for f in errors[1:]]
    more = f" (+{len(others) - OTHERS_LISTED} more)" if len(others) > OTHERS_LISTED else ""
    also = f"; also: {', '.join(others[:OTHERS_LISTED])}{more}" if others else ""
    return StageError(stage=stage, side=side, check=first.check, column=first.column, count=first.count,
                      failure_cases=failure_cases, table=first.table,
                      detail=_said(first) + also + "; every finding of the call is in the guard's report",
                      advice=CHECKS[first.check].advice, whole_file=not first.lines)


def _same(finding: Finding) -> tuple | None:
    """What makes a finding of rows the same as another's: its check, column and rows and what it says of them
    (its message without the call it names). A finding of no rows (a frame emptied, a share kept) is a call's own:
    None."""
    if not finding.lines:
        return None
    where = ".".join(p for p in (finding.table, finding.column) if p)
    return (finding.check, finding.column, finding.count, tuple(finding.lines), finding.severity,
            finding.message.removeprefix(f"{where}: "))


def _said(finding: Finding) -> str:
    """What a finding says, without the place it starts with or the catalogue's advice it ends with."""
    where = ".".join(p for p in (finding.table, finding.column) if p)
    said = finding.message.removeprefix(f"{where}: ")
    return said.removesuffix(f". {CHECKS[finding.check].advice}")


def _require_frame(value: Any, what: str) -> None:
    if not isinstance(value, pd.DataFrame):
        raise TypeError(f"{what} is a {type(value).__name__}, not a pandas DataFrame: a guarded function takes a "
                        "frame first and returns a frame (or an object whose .frame is one)")


def _numbered(frame: pd.DataFrame, schema: pa.DataFrameSchema | None) -> pd.DataFrame:
    """``frame`` as ``schema`` is checked on, with rows a finding can name: its own index where that is unique
    integers (or the schema checks the index, or there is no schema), else the rows' positions from 0."""
    index = frame.index
    if schema is None or schema.index is not None or (pd.api.types.is_integer_dtype(index) and index.is_unique):
        return frame
    return frame.reset_index(drop=True)


def _changes(schema: pa.DataFrameSchema) -> bool:
    """Whether validating against ``schema`` may change the frame (coerce a type, add a column, fill a default,
    drop a column): the guard then validates a copy, and hands on the frame as the function returned it."""
    columns = list(schema.columns.values())
    return bool(schema.coerce or schema.add_missing_columns or schema.strict == "filter"
                or any(column.coerce or column.default is not None for column in columns))
