"""Fill stage: declared policies for the columns that become tensors, never a silent ``fillna(0)``.

Each column has a policy in the config (constant, train mean or median, drop
the row, forward-fill within an admission) and an optional ``<COLUMN>_MISSING``
indicator. A constant fill of a code column may not pose as a real code. The
output guard allows no null in any tensor column.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd

from pipeline.reporting.findings import Finding, summary_finding
from pipeline.reporting import page
from pipeline.kernel.options import Allowed, Section, comments, require, setting, toml_value, typed
from pipeline.kernel.stage import Context, Plan, Shown, Stage
from pipeline.kernel.calls import Call, Fit
from pipeline.kernel.quarantine import Kept, set_aside
from pipeline.kernel.calls import reads
from schemas.errors import StageError
from schemas.fill import TENSOR_COLUMNS, FilledEvents
from schemas.guard import check_frame, guarded, refuse_non_finite
from schemas.scale import ScaledEvents

NAME = "fill"
CODE_COLUMNS = ("CODE",)
POLICIES = ("constant", "mean", "median", "drop", "ffill")
# Per tensor column, the column that says which rows must hold its value (:func:`carries`).
CARRIERS = MappingProxyType({"Z": "VALUENUM", "CODE": "KIND"})
HOLDING = MappingProxyType({"Z": "with a VALUENUM", "CODE": "of KIND 'categorical'"})  # those rows, in words
FLOAT32_MAX = float(np.finfo(np.float32).max)  # graph tensors are float32: a fill beyond it becomes inf
# What each tensor column's constant fill may be: Z goes into float32 edge_attr, CODE indexes embeddings.
VALUES = {"Z": Allowed(float, low=-FLOAT32_MAX, high=FLOAT32_MAX), "CODE": Allowed(int, low=0, high=2**31 - 1)}


@dataclass(frozen=True)
class FillPolicy(Section):
    """How one tensor column is filled: ``[fill.COLUMN]``."""

    NAME = "fill"
    policy: str = setting(str, words=POLICIES)
    value: float | None = setting(float, None, low=-FLOAT32_MAX, high=FLOAT32_MAX)
    indicator: bool = setting(bool, False)

    def relations(self) -> None:
        require(self.policy != "constant" or self.value is not None, "[fill] policy 'constant' needs a finite value")


class Column(NamedTuple):
    """A tensor column's default fill, and its documentation: the comment lines under ``[fill.COLUMN]``."""

    policy: FillPolicy
    doc: str


class Options:
    """The fill stage's config: a :class:`FillPolicy` per tensor column (``[fill.Z]``, ``[fill.CODE]``), each
    column's default declared once in :attr:`COLUMNS`, which its documented TOML is generated from."""

    NAME = "fill"
    COLUMNS = MappingProxyType({
        "Z": Column(FillPolicy(policy="constant", value=0.0), doc="""
            Categorical rows have no number: their z-score is declared 0. The graphs' tensors are float32, so a constant
            value must be finite in float32 (|value| <= 3.4028235e38); CODE's value must be a code in [0, 2^31 - 1].
            policy: "constant" (with value), "mean" or "median" (of the training split), "drop" (the row),
            "ffill" (the previous value of the item within the admission). indicator adds Z_MISSING (0/1)."""),
        "CODE": Column(FillPolicy(policy="constant", value=0), doc="""
            Numeric rows have no category: code 0, reserved for missing and unseen values."""),
    })
    # The section as a config without [fill] tables holds it: each column's declared policy.
    DEFAULTS = MappingProxyType({column: declared.policy for column, declared in COLUMNS.items()})

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> Mapping[str, FillPolicy]:
        unknown = sorted(set(values) - set(VALUES))
        require(not unknown, f"[fill] names unknown column(s) {', '.join(unknown)}; "
                             f"columns that become tensors: {', '.join(VALUES)}")
        policies = {}
        for column, table in values.items():
            keys = typed(FillPolicy, table, f"fill.{column}")
            if keys.get("value") is not None:
                keys["value"] = float(VALUES[column].parse(f"[fill.{column}] value", keys["value"]))
            policies[column] = FillPolicy(**keys)
        return MappingProxyType(policies)

    @classmethod
    def toml(cls) -> str:
        """``[fill.COLUMN]`` for each column of :attr:`COLUMNS`: its documentation, then its policy's keys (a value
        written as its column takes it: 0.0 for Z, 0 for CODE)."""
        tables = []
        for column, (policy, doc) in cls.COLUMNS.items():
            keys = {key.name: getattr(policy, key.name) for key in fields(FillPolicy)}
            if keys["value"] is not None:
                keys["value"] = VALUES[column].kind(keys["value"])
            tables.append("\n".join([f"[fill.{column}]", *comments(doc),
                                     *(f"{key} = {toml_value(value)}" for key, value in keys.items()
                                       if value is not None)]))
        return "\n\n".join(tables) + "\n"


@dataclass(frozen=True)
class FillValues:
    """The value each column is filled with (fitted on train for 'mean' and 'median')."""

    values_: tuple[tuple[str, float], ...]

    def value(self, column: str) -> float | None:
        return dict(self.values_).get(column)

    def as_json(self) -> dict[str, Any]:
        return {column: value for column, value in self.values_}


def carries(values: pd.Series, column: str) -> pd.Series:
    """Whether each row must hold a value of the tensor ``column``, by its :data:`CARRIERS` column's ``values``: a
    Z every row with a VALUENUM (ScaledEvents), a CODE every categorical row (KIND; EncodedEvents)."""
    return values.notna() if column == "Z" else values == "categorical"


def fit_reads(columns: Sequence[str]) -> tuple[str, ...]:
    """The columns :func:`fit_fill` reads to fit the tensor ``columns`` by their mean or median."""
    return ("SPLIT", "ITEMID", *columns, *(CARRIERS[column] for column in columns))


def fit_fill(events: pd.DataFrame, *, policies: Mapping[str, FillPolicy] = Options.DEFAULTS) -> FillValues:
    """Per column of ``policies`` ([fill]): constants as declared; means and medians of the training split, which
    read the columns of :func:`fit_reads` (as :class:`schemas.scale.ScaledEvents` has them) and refuse
    (``fit_finite``) a training value that is inf or -inf, or missing where its row must hold one
    (:func:`carries`)."""
    averaged = sorted(column for column, policy in policies.items() if policy.policy in ("mean", "median"))
    if averaged:  # constants read no row
        check_frame(ScaledEvents, events, stage=NAME, side="input", caller="fill.fit_fill", reads=fit_reads(averaged))
        train = (events["SPLIT"] == "train").to_numpy(bool)
    values = []
    for column, policy in sorted(policies.items()):
        if policy.policy == "constant":
            values.append((column, float(policy.value)))
        elif policy.policy in ("mean", "median"):
            refuse_non_finite(events, column, among=train,
                              needed=functools.partial(_must_hold, events, column), stage=NAME, fit="fill.fit_fill",
                              needs=f"a finite {column} in each training row {HOLDING[column]}, and no inf in any")
            ordered = events.loc[train, column].astype("float64").sort_values(ignore_index=True)  # order-free
            fitted = getattr(ordered, policy.policy)()
            values.append((column, float(fitted) if np.isfinite(fitted) else 0.0))
    return FillValues(values_=tuple(values))


def _must_hold(events: pd.DataFrame, column: str, rows: np.ndarray) -> np.ndarray:
    """Of the ``rows`` (a boolean mask) of ``events``, those that must hold a ``column`` value (:func:`carries`)."""
    return carries(events.loc[rows, CARRIERS[column]], column).to_numpy(bool)


@guarded(stage=NAME, takes=ScaledEvents, gives=FilledEvents)
def apply_fill(events: pd.DataFrame, values: FillValues, policies: Mapping[str, FillPolicy]) -> Kept:
    """Fill every tensor column by its policy; rows whose policy is 'drop' are quarantined."""
    missing = {column: events[column].isna() for column in TENSOR_COLUMNS}
    undeclared = [column for column in TENSOR_COLUMNS if column not in policies and missing[column].any()]
    if undeclared:
        column = undeclared[0]
        raise StageError(
            stage=NAME, side="output", check="fill_left_nulls", column=column, count=int(missing[column].sum()),
            failure_cases=pd.DataFrame({"line": events.index[missing[column]]}), table="LABEVENTS",
            advice=f"Declare a policy for {column} in [fill.{column}]",
        )
    filled = events.copy(deep=False)  # copy-on-write: the columns set below never reach ``events``
    for column in sorted(policies):
        policy = policies[column]
        if policy.policy in ("constant", "mean", "median"):
            value = values.value(column)
            _refuse_collision(events, column, value)
            filled[column] = filled[column].fillna(_cast(value, events[column]))
        elif policy.policy == "ffill":
            # Ties on CHARTTIME are ordered by value (nulls first), so the fill never depends on row order.
            order = filled.sort_values(["HADM_ID", "ITEMID", "CHARTTIME", column], kind="stable",
                                       na_position="first").index
            filled.loc[order, column] = filled.loc[order, column].groupby(
                [filled.loc[order, "HADM_ID"], filled.loc[order, "ITEMID"]]).ffill()
        if policy.indicator:
            filled[f"{column}_MISSING"] = missing[column].astype("int8")
    dropped = {f"fill: {column} missing (policy 'drop')": column
               for column in sorted(policies) if policies[column].policy == "drop"}
    kept = set_aside(filled, [(reason, filled[column].isna()) for reason, column in dropped.items()], stage=NAME,
                     columns=dropped)
    for column in TENSOR_COLUMNS:
        left = kept.frame[column].isna()
        if left.any():
            raise StageError(
                stage=NAME, side="output", check="fill_left_nulls", column=column, count=int(left.sum()),
                failure_cases=pd.DataFrame({"line": kept.frame.index[left]}), table="LABEVENTS",
                detail=f"policy '{policies[column].policy}' left them (ffill has no earlier value in the admission)",
                advice="Use a constant, mean or median policy, or 'drop'",
            )
    return kept


def _cast(value: float | None, column: pd.Series) -> Any:
    return int(value) if str(column.dtype) == "Int64" else value


def _refuse_collision(events: pd.DataFrame, column: str, value: float | None) -> None:
    """A code column is filled with the reserved code 0 only: codes 1..K of every item are real categories."""
    if column not in CODE_COLUMNS or value is None or value == 0:
        return
    clash = events.index[(events[column] == value).fillna(False).to_numpy(bool)]
    raise StageError(
        stage=NAME, side="input", check="fill_collides", column=column, count=max(len(clash), 1),
        failure_cases=pd.DataFrame({"line": clash}), table="LABEVENTS",
        detail=(f"fill value {value:g} is not a valid code (codes are whole numbers >= 0)"
                if value < 0 or value != int(value)
                else f"fill value {value:g} is a real code in {len(clash)} rows" if len(clash)
                else f"fill value {value:g} can be a real code of an item's vocabulary"),
        advice="Fill code columns with 0, the code reserved for missing and unseen values",
    )


# The rows a tensor column has no value for by construction: a row with a number (a numeric one, or an ordinal one's
# rank) has no category code, a row without a number (a categorical one) no z. Its other nulls are missing values.
ABSENT = {"CODE": "rows with a number (no category by construction)",
          "Z": "categorical rows (no number by construction)"}


@reads(*TENSOR_COLUMNS, "VALUENUM")
def missing_counts(events: pd.DataFrame) -> pd.Series:
    """How many values of each tensor column are missing (``CODE``, ``Z``) and how many its rows do not have by
    construction (``CODE_ABSENT``: rows with a number; ``Z_ABSENT``: rows without one): what :func:`fill_findings`
    reports (counts of parts add up)."""
    number = events["VALUENUM"].notna()
    absent = {"CODE": number, "Z": ~number}
    counts = {}
    for column in TENSOR_COLUMNS:
        null = events[column].isna()
        counts[column] = int((null & ~absent[column]).sum())
        counts[f"{column}_ABSENT"] = int((null & absent[column]).sum())
    return pd.Series(counts, dtype="int64")


def fill_findings(events: pd.DataFrame | pd.Series, policies: Mapping[str, FillPolicy]) -> list[Finding]:
    """How many values each column had filled, and by which policy (from the rows, or their
    :func:`missing_counts`): missing values (``filled``) apart from values its rows do not have by construction
    (``structural_fill``)."""
    findings = []
    missing = events if isinstance(events, pd.Series) else missing_counts(events)
    for column in TENSOR_COLUMNS:
        if column not in policies:
            continue
        policy = policies[column]
        how = (f"policy '{policy.policy}'" + (f" with {policy.value:g}" if policy.policy == "constant" else "")
               + (", with an indicator column" if policy.indicator else ""))
        absent, count = int(missing.get(f"{column}_ABSENT", 0)), int(missing[column])
        if absent:
            findings.append(summary_finding(
                stage=NAME, check="structural_fill", table="LABEVENTS", column=column, count=absent,
                message=f"{absent} values of {ABSENT[column]} filled by {how}"))
        if count:
            findings.append(summary_finding(
                stage=NAME, check="filled", table="LABEVENTS", column=column, count=count,
                message=f"{count} missing values filled by {how}"))
    return findings


def training_rows(events: pd.DataFrame, columns: Sequence[str] = TENSOR_COLUMNS) -> pd.DataFrame:
    """The training rows' columns :func:`fit_fill` reads to fit the tensor ``columns`` (:func:`fit_reads`: its
    means and medians, exact, need the values themselves; they are sorted first, so their order does not
    matter)."""
    return events.loc[(events["SPLIT"] == "train").to_numpy(), list(fit_reads(columns))]


def fit_inputs(events: Any, context: Context) -> tuple[pd.DataFrame, tuple, dict]:
    """What :func:`fit_fill` reads in flow: the training rows of the columns filled by their mean or median
    (none with constant policies, the defaults), and the [fill] policies."""
    fitted = [column for column in TENSOR_COLUMNS
              if column in context.options and context.options[column].policy in ("mean", "median")]
    rows = (context.engine.rows(events, training_rows, fitted) if fitted
            else pd.DataFrame({"SPLIT": pd.Series([], dtype="str")}))  # constants alone read no row
    return rows, (), dict(policies=context.options)


def fits_rows(policies: Mapping[str, FillPolicy]) -> bool:
    """Whether the fit reads rows with these policies: a mean or a median does; constants do not."""
    return any(policies[column].policy in ("mean", "median") for column in TENSOR_COLUMNS if column in policies)


def _null_counts(part: pd.DataFrame) -> pd.Series:
    return part.isna().sum()


def _missing_values(shown: Shown) -> list[list[str]]:
    """Per column of each raw table (LABEVENTS part by part, where its parts are): rows, missing and its share."""
    rows = []
    for name in ("admissions", "labitems", "labevents"):
        frame = getattr(shown.read, name, None)
        if frame is None:
            continue
        total = len(frame)
        counts = sum(shown.engine.per_part(_null_counts, frame))
        for column in frame.columns:
            if column == "REJECT":
                continue
            missing = int(counts[column])
            rows.append([name.upper().replace("LABITEMS", "D_LABITEMS"), column, page.n(total), page.n(missing),
                         f"{missing / total:.1%}" if total else "-"])
    return rows


def sections(shown: Shown) -> list[str]:
    """The stage's section of the HTML report: missing values per column of the raw tables, and the fill of each
    tensor column (its policy, fitted value, indicator and how many values it filled)."""
    parts = []
    rows = _missing_values(shown)
    if rows:
        parts.append("<h3>Missing values per column</h3><p class=note>After the raw checks: a value that failed "
                     "an error check is counted as missing.</p>")
        parts.append(page.table(["table", "column", "rows", "missing", "missing %"], rows, numeric={2, 3, 4},
                                sortable=True))
    filled: dict[str, int] = {}
    for f in shown.report.findings:
        if f.check in ("filled", "structural_fill"):
            filled[f.column] = filled.get(f.column, 0) + f.count
    fitted = dict(getattr(shown.state, "values_", ()) or ())
    fills = [[column, policy.policy, f"{fitted[column]:.4g}" if column in fitted else "-",
              "yes" if policy.indicator else "no", page.n(filled.get(column, 0))]
             for column, policy in sorted(shown.options.items())]
    if fills and shown.state is not None:
        parts.append("<h3>Fills per tensor column</h3>")
        parts.append(page.table(["column", "policy", "value", "indicator", "values filled"], fills, numeric={4}))
    if not parts:
        return []
    return [f'<section id="missingness"><h2>Missingness and fills</h2>{"".join(parts)}</section>']


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: what each policy fills is a finding, then the fill."""
    policies = context.options
    return Plan(context=context, counts=(Call(missing_counts),),
                counted=lambda outcome: fill_findings(outcome.counts[0], policies),
                calls=(Call(apply_fill, (context.fitted[NAME], policies)),))


STAGE = Stage(NAME, colour="#bcbd22", plan=plan, options=Options, takes=ScaledEvents, gives=FilledEvents,
              fit=Fit(whole=fit_fill, inputs=fit_inputs, state=FillValues, saved_as="fill", rows=fits_rows),
              by_admission=True, writes=TENSOR_COLUMNS, sections=sections)
