"""Raw stage: check the text tables against ``schemas.raw`` and parse them into typed frames.

Every raw check runs lazily, so one call reports every bad point of every
table. Each checked column is parsed once (``schemas.checks.parse_columns``):
its checks read that parse while the schema validates, and it becomes the typed
column. Rows that fail a check whose severity is ``error`` stay in the typed
frames with ``REJECT`` naming the first such check; the clean stage quarantines
them. Nothing here reads or writes files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
import pandera.pandas as pa

from pipeline.reporting.findings import CLASS_SAMPLE, Finding, finding_from_mask
from pipeline.kernel.handed import value_of
from pipeline.kernel.stage import Stage
from schemas.catalogue import CHECKS, ERROR
from schemas.checks import ParsedNumbers, ParsedText, parse_columns, sharing_parses
from schemas.errors import SAMPLE_CAP, raise_if_out_of_memory, require_validation, value_classes
from schemas.guard import check_frame
from schemas.raw import (
                         DEFAULT_STAY_TOLERANCE_HOURS,
                         DEFAULT_VALUENUM_ABS_BOUND,
                         Admissions,
                         LabEvents,
                         LabItems,
                         RawAdmissions,
                         RawLabItems,
                         raw_labevents_schema,
                         )

STAGE = "raw"
_TIMES = ("ADMITTIME", "DISCHTIME", "CHARTTIME")
# Checks whose failing text cannot become a value: the typed column holds null there.
_UNPARSEABLE = ("id_positive_integer", "datetime_iso", "valuenum_numeric", "valuenum_finite", "ref_range_numeric",
                "edregtime_iso", "deathtime_iso")
# Checks of metadata (MIMIC-IV's reference range bounds, the ED registration time): the failing text becomes null,
# the row is never rejected.
_METADATA = ("ref_range_numeric", "edregtime_iso", "deathtime_iso")


RAW = Stage("raw", colour="#8c564b", gives=LabEvents)  # the raw checks and relations: in a lab run's order


@dataclass(frozen=True)
class RawTables:
    """The typed raw tables (None where the file could not be read), index = source line."""

    admissions: pd.DataFrame | None = None
    labitems: pd.DataFrame | None = None
    labevents: pd.DataFrame | None = None

    @classmethod
    def only(cls, table: str, frame: pd.DataFrame) -> "RawTables":
        """Just one table, by its name ("LABEVENTS")."""
        return cls(**{_FIELDS[table]: frame})

    def of(self, table: str) -> pd.DataFrame | None:
        """The table named ``table`` ("LABEVENTS")."""
        return getattr(self, _FIELDS[table])


@dataclass(frozen=True)
class RawResult:
    tables: RawTables
    findings: list[Finding]
    # LABEVENTS checked by check_stream: its relations' failures (relation, line), found block by block.
    related: pd.DataFrame | None = None


def check_raw(
    text: Mapping[str, pd.DataFrame],
    *,
    valuenum_abs_bound: float = DEFAULT_VALUENUM_ABS_BOUND,
    stay_tolerance_hours: float = DEFAULT_STAY_TOLERANCE_HOURS,
    severity: Mapping[str, str] | None = None,
    show_values: bool = False,
    max_lines: int = SAMPLE_CAP,
) -> RawResult:
    """Check and parse the raw text tables ``{"ADMISSIONS": ..., "D_LABITEMS": ..., "LABEVENTS": ...}``."""
    checked = {
        table: check_blocks(table, [frame], valuenum_abs_bound=valuenum_abs_bound, severity=severity,
                            show_values=show_values, max_lines=max_lines)
        for table, frame in text.items() if frame is not None
    }
    return check_relations(checked, stay_tolerance_hours=stay_tolerance_hours, severity=severity,
                           show_values=show_values, max_lines=max_lines)


def check_blocks(
    table: str,
    blocks: Iterable[pd.DataFrame],
    *,
    valuenum_abs_bound: float = DEFAULT_VALUENUM_ABS_BOUND,
    severity: Mapping[str, str] | None = None,
    show_values: bool = False,
    max_lines: int = SAMPLE_CAP,
    engine: PartChecker | None = None,
) -> RawResult:
    """One table's own checks and parse, the part that depends on this file alone (and so can be cached), of a table
    that comes in row blocks (``pipeline.reading.load.read_blocks``; a frame is ``[frame]``): each block is checked
    as it comes and the checks combined, so the whole text table never exists at once. The result's ``tables``
    holds only this table; :func:`check_relations` joins the tables afterwards. An ``engine`` (see
    ``pipeline.engines``) may check the blocks elsewhere; the result is the same."""
    part = _check_each(table, blocks, valuenum_abs_bound=valuenum_abs_bound, severity=severity, engine=engine)
    return RawResult(tables=RawTables.only(table, part.typed),
                     findings=part_findings(part, show_values=show_values, max_lines=max_lines))


def check_stream(
    blocks: Iterable[pd.DataFrame],
    router: Any,
    relations: LabRelations,
    *,
    valuenum_abs_bound: float = DEFAULT_VALUENUM_ABS_BOUND,
    severity: Mapping[str, str] | None = None,
    show_values: bool = False,
    max_lines: int = SAMPLE_CAP,
    engine: PartChecker | None = None,
) -> RawResult:
    """:func:`check_blocks` of LABEVENTS that holds none of its rows: each block is checked, related to ADMISSIONS
    and D_LABITEMS (``relations``), guarded and routed (:func:`check_and_route`, where the ``engine`` works on
    parts: in its worker processes while this one reads the next block) into ``router``'s parts
    (``pipeline.engines.routing.Router``: ``take`` a routed block, ``finish`` gives the parts); only what the
    findings need comes back. The result's table is the parts; its ``related``, the relations' failures, for
    :func:`check_relations`."""
    keep = max(max_lines, CLASS_SAMPLE)  # as many failing lines as a finding lists or classifies by value
    if engine is not None:  # ADMISSIONS' stays and the items reach each process once, as files
        relations = relations.shared(engine.share)
    checked = (map if engine is None else engine.blocks)(
        functools.partial(check_and_route, relations=relations, route=router.route,
                          valuenum_abs_bound=valuenum_abs_bound, severity=dict(severity or {}), keep=keep), blocks)
    related: list[pd.DataFrame] = []

    def taken() -> Iterable[PartCheck]:
        for routed, part, failures in checked:
            router.take(routed)
            related[:] = [combined_relations([*related, failures], keep)]
            yield part

    part = _combined(taken(), "LABEVENTS", keep=keep)
    return RawResult(tables=RawTables.only("LABEVENTS", router.finish(LabEvents)),
                     findings=part_findings(part, show_values=show_values, max_lines=max_lines),
                     related=combined_relations(related, keep))


def check_and_route(block: pd.DataFrame, *, relations: Any, route: Callable[[pd.DataFrame], Any],
                    valuenum_abs_bound: float, severity: Mapping[str, str], keep: int
                    ) -> tuple[Any, PartCheck, pd.DataFrame]:
    """One LABEVENTS block checked, related to ADMISSIONS and D_LABITEMS, guarded and written by ``route``: what
    was written, the block's check (its first ``keep`` failing lines per check, and their count) and its relations'
    failures."""
    part = check_part("LABEVENTS", block, valuenum_abs_bound=valuenum_abs_bound, severity=severity)
    typed, failures = relations.check(part.typed, _rejects(severity))
    routed = route(_guard(typed, LabEvents))
    return routed, replace(part, typed=typed.iloc[:0].copy()).capped(keep), capped_relations(failures, keep)


def _check_each(table: str, blocks: Iterable[pd.DataFrame], *, valuenum_abs_bound: float,
                severity: Mapping[str, str] | None, engine: PartChecker | None) -> PartCheck:
    """Every block checked (on the ``engine``) and combined."""
    run = check_part if engine is None else engine.check_part
    return _combined((run(table, block, valuenum_abs_bound=valuenum_abs_bound, severity=severity)
                      for block in blocks), table)


def _combined(parts: Iterable[PartCheck], table: str, *, keep: int | None = None) -> PartCheck:
    """The checks of a table's blocks combined as they come; with ``keep``, only each check's first ``keep``
    failing lines and their count are kept."""
    held: list[PartCheck] = []
    for part in parts:
        held.append(part if keep is None or part.counts is not None else part.capped(keep))  # capped already
        if keep is not None and len(held) >= _COMBINE_EVERY:
            held = [combine_parts(held).capped(keep)]
    if not held:
        raise ValueError(f"{table}: no block of rows to check")
    return held[0] if len(held) == 1 else combine_parts(held)


class PartChecker(Protocol):
    """Runs :func:`check_part` on a table, in any number of row slices, and combines the results."""

    def check_part(self, table: str, frame: pd.DataFrame, **settings: Any) -> "PartCheck": ...


@dataclass(frozen=True)
class PartCheck:
    """A table's (or a slice of its rows') own check results as data, before they become findings.

    ``failures`` has one row per failing (column, check, line); ``values`` the failing text of the first
    :data:`CLASS_SAMPLE` failures of each (column, check). Slices of one table :func:`combine_parts` into the
    result of checking the whole table, so the rows can be checked anywhere (for example on Dask workers).
    """

    table: str
    typed: pd.DataFrame
    failures: pd.DataFrame
    values: pd.DataFrame
    derived: tuple[int, int, int] | None = None  # VALUENUM derived from VALUE: (numbers, censored, text)
    # With failures capped (check_stream): per (column, check), how many lines failed in all (else len of its lines).
    counts: pd.DataFrame | None = None

    def capped(self, keep: int) -> "PartCheck":
        """Only the first ``keep`` failing lines of each (column, check), and how many failed in all: what its
        findings need, at a size that does not grow with the rows (every outpatient row is a failing line)."""
        failures = self.failures.sort_values(["column", "check", "line"], kind="stable", ignore_index=True)
        first = failures[failures.groupby(["column", "check"]).cumcount() < keep].reset_index(drop=True)
        return replace(self, failures=first, counts=self.failure_counts())

    def failure_counts(self) -> pd.DataFrame:
        """Per (column, check): how many lines failed."""
        if self.counts is not None:
            return self.counts
        return self.failures.groupby(["column", "check"], sort=True).size().rename("count").reset_index()


def check_part(table: str, frame: pd.DataFrame, *, valuenum_abs_bound: float = DEFAULT_VALUENUM_ABS_BOUND,
               severity: Mapping[str, str] | None = None) -> PartCheck:
    """Run one table's schema checks on ``frame`` (the whole table or any slice of its rows) and parse it."""
    require_validation()
    rejects = _rejects(severity)
    schemas = {
        "ADMISSIONS": RawAdmissions.to_schema,
        "D_LABITEMS": RawLabItems.to_schema,
        "LABEVENTS": lambda: raw_labevents_schema(valuenum_abs_bound=valuenum_abs_bound),
    }
    derived = None
    if table == "LABEVENTS" and "VALUENUM" not in frame:
        frame = _derive_valuenum(frame)
        derived = _derived_counts(frame)
    schema = schemas[table]()
    parses = parse_columns(schema, frame)  # each checked column parsed once, for its checks and the typed table
    with sharing_parses(parses):
        failures = _schema_failures(schema, frame)
    reject = pd.Series(pd.NA, index=frame.index, dtype="str")
    for check, lines in failures.groupby("check", sort=True)["line"]:
        if rejects(check) and check not in _METADATA:
            failed = pd.Series(frame.index.isin(lines.to_numpy()), index=frame.index)
            reject = reject.mask(reject.isna() & failed, check)
    nulled = failures[failures["check"].isin(_UNPARSEABLE) | (failures["check"].eq("valuenum_bound")
                                                                & rejects("valuenum_bound"))]
    typed = _typed(frame, parses, nulled).assign(REJECT=reject)
    if table == "LABEVENTS":
        missing = frame.index[frame["HADM_ID"].isna()]
        failures = pd.concat([failures, pd.DataFrame({"column": "HADM_ID", "check": "hadm_id_missing",
                                                      "line": missing.to_numpy("int64")})], ignore_index=True)
    return PartCheck(table=table, typed=typed, failures=failures, values=_failing_values(failures, frame),
                     derived=derived)


def combine_parts(parts: list[PartCheck]) -> PartCheck:
    """The check of a whole table from the checks of its row slices (in any order)."""
    parts = sorted(parts, key=lambda p: p.typed.index.min() if len(p.typed) else 0)
    failures = pd.concat([p.failures for p in parts], ignore_index=True)
    values = pd.concat([p.values for p in parts], ignore_index=True)
    derived = None
    if parts[0].derived is not None:
        derived = tuple(int(sum(counts)) for counts in zip(*(p.derived for p in parts)))
    typed = _one_chunk(pd.concat([p.typed for p in parts]).sort_index(kind="stable"))
    counts = None
    if any(p.counts is not None for p in parts):  # capped parts: their counts add up
        counts = pd.concat([p.failure_counts() for p in parts]).groupby(["column", "check"], sort=True)[
            "count"].sum().reset_index()
    return PartCheck(table=parts[0].table, typed=typed,
                     failures=failures.sort_values(["column", "check", "line"], kind="stable", ignore_index=True),
                     values=_cap_values(values), derived=derived, counts=counts)


def _one_chunk(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns as one Arrow chunk each, not several per part (37 for 2M rows in 16 MiB blocks): the
    stages' filters and lookups go through every chunk."""
    for column in frame.columns:
        values = frame[column].array
        if isinstance(values, pd.arrays.ArrowStringArray) and values.__arrow_array__().num_chunks > 1:
            one = type(values)(values.__arrow_array__().combine_chunks(), dtype=values.dtype)
            frame[column] = pd.Series(one, index=frame.index, name=column)
    return frame


def part_findings(part: PartCheck, *, show_values: bool = False, max_lines: int = SAMPLE_CAP) -> list[Finding]:
    """The findings of a checked table: one per failing (column, check), plus the derived-VALUENUM note."""
    findings: list[Finding | None] = []
    report = _reporter(findings, show_values=show_values, max_lines=max_lines)
    if part.derived is not None:
        findings.append(_derived_finding(*part.derived))
    order = part.failures["check"].eq("hadm_id_missing")  # reported after the schema checks
    counts = None if part.counts is None else part.counts.set_index(["column", "check"])["count"]
    for (_, column, check), lines in part.failures.groupby([order, "column", "check"], sort=True)["line"]:
        lines = np.sort(lines.to_numpy())
        failed = pd.Series(True, index=pd.Index(lines, name="line"))
        shown = None
        if check != "hadm_id_missing":
            chosen = part.values[(part.values["column"] == column) & (part.values["check"] == check)]
            shown = pd.Series(chosen["value"].to_numpy(), index=pd.Index(chosen["line"].to_numpy(), name="line"),
                              dtype="str")
        report(part.table, check, column, failed, values=shown,
               count=None if counts is None else int(counts[(column, check)]))
    return [f for f in findings if f is not None]


def _failing_values(failures: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The text of the first failures of each (column, check): what a finding describes by value class."""
    chosen = _cap_values(failures[failures["check"] != "hadm_id_missing"])
    value = pd.Series(pd.NA, index=chosen.index, dtype="str")
    for column, rows in chosen.groupby("column", sort=True):
        value.loc[rows.index] = frame.loc[rows["line"].to_numpy(), column].to_numpy()
    return chosen.assign(value=value)


def _cap_values(values: pd.DataFrame) -> pd.DataFrame:
    ordered = values.sort_values(["column", "check", "line"], kind="stable", ignore_index=True)
    return ordered[ordered.groupby(["column", "check"]).cumcount() < CLASS_SAMPLE].reset_index(drop=True)


def check_relations(
    checked: Mapping[str, RawResult],
    *,
    stay_tolerance_hours: float = DEFAULT_STAY_TOLERANCE_HOURS,
    severity: Mapping[str, str] | None = None,
    show_values: bool = False,
    max_lines: int = SAMPLE_CAP,
) -> RawResult:
    """Keys, foreign keys and stays across the tables checked by :func:`check_blocks`, then the typed guard."""
    findings: list[Finding | None] = [f for result in checked.values() for f in result.findings]
    typed = {table: result.tables.of(table) for table, result in checked.items()}
    related = checked["LABEVENTS"].related if "LABEVENTS" in checked else None
    _check_relations(typed, _reporter(findings, show_values=show_values, max_lines=max_lines), _rejects(severity),
                     stay_tolerance_hours, related)
    tables = RawTables(
        admissions=_guard(typed.get("ADMISSIONS"), Admissions),
        labitems=_guard(typed.get("D_LABITEMS"), LabItems),
        # Rows routed into parts were guarded block by block (check_stream).
        labevents=typed.get("LABEVENTS") if related is not None else _guard(typed.get("LABEVENTS"), LabEvents),
    )
    return RawResult(tables=tables, findings=[f for f in findings if f is not None])


_COMBINE_EVERY = 16  # check_stream combines and caps its blocks' failures this often

_FIELDS = {"ADMISSIONS": "admissions", "D_LABITEMS": "labitems", "LABEVENTS": "labevents"}


def _rejects(severity: Mapping[str, str] | None):
    """Whether a failing check sends its rows to quarantine (its severity, after the config, is error)."""
    severity = dict(severity or {})
    return lambda check: severity.get(check, CHECKS[check].severity) == ERROR


def _reporter(findings: list, *, show_values: bool, max_lines: int):
    def report(table: str, check: str, column: str | None, failed: pd.Series, values=None, what=None, count=None):
        findings.append(finding_from_mask(
            stage=STAGE, table=table, check=check, column=column, failed=failed, values=values,
            what=what, show_values=show_values, max_lines=max_lines, count=count,
        ))
    return report


# -- schema checks on text --------------------------------------------------------------------
def _schema_failures(schema: pa.DataFrameSchema, frame: pd.DataFrame) -> pd.DataFrame:
    """Every failing (column, check, line) of a lazy validation; missing required values get their own ids."""
    try:
        schema.validate(frame, lazy=True, inplace=True)  # nothing coerces: no copy of the text table needed
        return pd.DataFrame({"column": [], "check": [], "line": []}).astype({"line": "int64"})
    except pa.errors.SchemaErrors as errors:
        raise_if_out_of_memory(errors)
        cases = errors.failure_cases
    unexpected = cases[cases["index"].isna()]
    if not unexpected.empty:
        raise RuntimeError(f"raw schema failed at table level: {sorted(set(unexpected['check']))}")
    check = cases["check"].astype("str").str.replace(r"\(.*$", "", regex=True)  # 'valuenum_bound(1e10)'
    missing = np.where(cases["column"].isin(_TIMES), "datetime_missing", "id_missing")
    check = check.where(check != "not_nullable", pd.Series(missing, index=cases.index))
    return pd.DataFrame({
        "column": cases["column"].astype("str"),
        "check": check,
        "line": cases["index"].astype("int64"),
    })


def _derive_valuenum(frame: pd.DataFrame) -> pd.DataFrame:
    """VALUENUM from VALUE by the strict numeric grammar; censored '<0.01' and text stay text only."""
    numeric = ParsedNumbers.of(frame["VALUE"]).numeric
    return frame.assign(VALUENUM=frame["VALUE"].where(numeric))


def _derived_counts(frame: pd.DataFrame) -> tuple[int, int, int]:
    value = frame["VALUE"]
    numeric = int(frame["VALUENUM"].notna().sum())
    counts = value.value_counts()  # each distinct text classified once
    censored = int(counts[value_classes(counts.index.to_series()).eq("censored number").to_numpy()].sum())
    return numeric, censored, int(value.notna().sum()) - numeric


def _derived_finding(numeric: int, censored: int, text: int) -> Finding:
    info = CHECKS["valuenum_derived"]
    return Finding(
        severity=info.severity, stage=STAGE, table="LABEVENTS", check=info.id, column="VALUENUM",
        count=numeric, lines=[],
        message=f"LABEVENTS.VALUENUM: column absent, {numeric:,} numbers parsed from VALUE; {text:,} values kept as "
                f"text ({censored:,} censored like '<x'). {info.advice}",
    )


# -- typed columns ----------------------------------------------------------------------------
def _typed(frame: pd.DataFrame, parses: Mapping[str, ParsedText], nulled: pd.DataFrame) -> pd.DataFrame:
    """Typed columns: each column's one parse (the text itself where it has none); text that failed a
    parsing check becomes null, so it can never pass as a value."""
    typed = {}
    for column in frame.columns:
        values = parses[column].values if column in parses else frame[column]
        bad_lines = nulled.loc[nulled["column"] == column, "line"].to_numpy()
        typed[column] = values.mask(frame.index.isin(bad_lines)) if len(bad_lines) else values
    return pd.DataFrame(typed, index=frame.index)


# -- relational checks ------------------------------------------------------------------------
def _check_relations(typed: dict[str, pd.DataFrame], report, rejects, stay_tolerance_hours: float,
                     related: pd.DataFrame | None = None) -> None:
    """ADMISSIONS' and D_LABITEMS' keys and stays, then LABEVENTS against them (``related``: already done, block
    by block, by :func:`check_stream`)."""
    admissions = typed.get("ADMISSIONS")
    labitems = typed.get("D_LABITEMS")
    labevents = typed.get("LABEVENTS")
    _check_keys(typed, report, rejects)
    if labevents is None:
        return
    if related is None:
        typed["LABEVENTS"], related = LabRelations.of(admissions, labitems, stay_tolerance_hours).check(
            labevents, rejects)
    report_relations(related, report)


def _check_keys(typed: dict[str, pd.DataFrame], report, rejects) -> None:
    """ADMISSIONS' and D_LABITEMS' primary keys and ADMISSIONS' stays: rows that fail are marked in ``typed``."""

    def mark(table: str, check: str, failed: pd.Series) -> None:
        if rejects(check):
            frame = typed[table]
            typed[table] = frame.assign(REJECT=frame["REJECT"].mask(frame["REJECT"].isna() & failed, check))

    for table, key in (("ADMISSIONS", "HADM_ID"), ("D_LABITEMS", "ITEMID")):
        frame = typed.get(table)
        if frame is not None:
            duplicated = frame[key].notna() & frame[key].duplicated(keep=False)
            report(table, "primary_key_unique", key, duplicated, what=f"{key} that appears more than once")
            mark(table, "primary_key_unique", duplicated)

    admissions = typed.get("ADMISSIONS")
    if admissions is not None:
        backwards = admissions["DISCHTIME"] < admissions["ADMITTIME"]
        report("ADMISSIONS", "discharge_before_admit", "DISCHTIME", backwards)
        mark("ADMISSIONS", "discharge_before_admit", backwards)


def keyed_admissions(admissions: pd.DataFrame, *, severity: Mapping[str, str] | None = None) -> pd.DataFrame:
    """ADMISSIONS as :func:`check_relations` hands it on (rows failing its own relations rejected), known before
    LABEVENTS is read: what its rows are routed by."""
    typed = {"ADMISSIONS": admissions}
    _check_keys(typed, lambda *args, **kwargs: None, _rejects(severity))
    return typed["ADMISSIONS"]


# LABEVENTS against ADMISSIONS and D_LABITEMS, in report order: check, column, what fails, and whether a failing
# row is rejected (when the check's severity is error).
LAB_RELATIONS = (
    ("foreign_key", "ITEMID", "ITEMID not in D_LABITEMS", True),
    ("foreign_key", "HADM_ID", "HADM_ID not in ADMISSIONS", True),
    ("subject_mismatch", "SUBJECT_ID", "SUBJECT_ID other than its admission's", True),
    ("charttime_outside_stay", "CHARTTIME", "CHARTTIME before the admission's ADMITTIME", False),
    ("charttime_outside_stay", "CHARTTIME", "CHARTTIME after the admission's DISCHTIME", False),
)


@dataclass(frozen=True)
class LabRelations:
    """What LABEVENTS rows are checked against: D_LABITEMS' items and each admission's stay. Every check is per
    row, so any block of rows is checked alone and the blocks' failures add up to the whole table's."""

    items: Any  # D_LABITEMS' ITEMIDs (None: the table could not be read), or a Shared copy of them
    stays: Any  # per HADM_ID (its first ADMISSIONS row): SUBJECT_ID, ADMITTIME, DISCHTIME (or a Shared copy)
    tolerance: pd.Timedelta

    @classmethod
    def of(cls, admissions: pd.DataFrame | None, labitems: pd.DataFrame | None,
           stay_tolerance_hours: float) -> "LabRelations":
        stays = (None if admissions is None  # only what the checks read: every block's task is handed them
                 else admissions.dropna(subset=["HADM_ID"]).drop_duplicates("HADM_ID").set_index("HADM_ID")[
                     [c for c in ("SUBJECT_ID", "ADMITTIME", "DISCHTIME") if c in admissions]])
        return cls(items=None if labitems is None else labitems["ITEMID"].dropna(), stays=stays,
                   tolerance=pd.Timedelta(hours=stay_tolerance_hours))

    def shared(self, put: Callable[[Any], Any]) -> "LabRelations":
        """These relations with their frames handed as ``put`` makes them (an engine's ``share``: files that each
        process reads once)."""
        return replace(self, items=None if self.items is None else put(self.items),
                       stays=None if self.stays is None else put(self.stays))

    def check(self, labevents: pd.DataFrame, rejects) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``labevents`` with REJECT set by the first failing relation that rejects, and every failing
        (relation: its place in :data:`LAB_RELATIONS`, line)."""
        failed: dict[int, pd.Series] = {}
        items, stays = value_of(self.items), value_of(self.stays)
        if items is not None:
            failed[0] = labevents["ITEMID"].notna() & ~labevents["ITEMID"].isin(items)
        if stays is not None:
            hadm = labevents["HADM_ID"]
            failed[1] = hadm.notna() & ~hadm.isin(stays.index)
            if "SUBJECT_ID" in labevents and "SUBJECT_ID" in stays:
                failed[2] = (labevents["SUBJECT_ID"] != hadm.map(stays["SUBJECT_ID"])).fillna(False).astype(bool)
            charted = labevents["CHARTTIME"]
            failed[3] = (charted < hadm.map(stays["ADMITTIME"]) - self.tolerance).fillna(False).astype(bool)
            failed[4] = (charted > hadm.map(stays["DISCHTIME"]) + self.tolerance).fillna(False).astype(bool)
        reject = labevents["REJECT"]
        for n, mask in failed.items():
            check, _, _, marks = LAB_RELATIONS[n]
            if marks and rejects(check):
                reject = reject.mask(reject.isna() & mask, check)
        lines = [labevents.index[mask.to_numpy()].to_numpy("int64") for mask in failed.values()]
        failures = pd.DataFrame({"relation": np.repeat(list(failed), [len(n) for n in lines]).astype("int64"),
                                 "line": np.concatenate(lines) if lines else np.array([], "int64")})
        return labevents.assign(REJECT=reject), failures


def report_relations(failures: pd.DataFrame, report) -> None:
    """One finding per failing relation of :data:`LAB_RELATIONS`, in its order (lines increasing); failures capped
    by :func:`capped_relations` carry each relation's whole count (``count``), of which their lines are the first."""
    for n, (check, column, what, _) in enumerate(LAB_RELATIONS):
        mine = failures[failures["relation"] == n]
        lines = np.sort(mine["line"].to_numpy("int64"))
        count = int(mine["count"].iloc[0]) if "count" in mine and len(mine) else None
        report("LABEVENTS", check, column, pd.Series(True, index=pd.Index(lines, name="line")), what=what,
               count=count)


def capped_relations(failures: pd.DataFrame, keep: int) -> pd.DataFrame:
    """Only the first ``keep`` lines of each relation, each with its relation's count of failing lines: what the
    findings need, at a size that does not grow with the rows (at MIMIC-IV scale 18.8M rows are charted outside their
    stay: 0.3 GB of (relation, line) pairs, held through every pass, where a finding lists 20)."""
    return _first_lines(failures, failures.groupby("relation").size(), keep)


def combined_relations(capped: Sequence[pd.DataFrame], keep: int) -> pd.DataFrame:
    """Blocks' :func:`capped_relations` as one: their counts added, their first ``keep`` lines kept."""
    frames = [frame for frame in capped if len(frame)]
    if not frames:
        return capped_relations(_no_relations(), keep)
    totals = pd.concat([frame.groupby("relation")["count"].first() for frame in frames]).groupby(level=0).sum()
    return _first_lines(pd.concat(frames, ignore_index=True), totals, keep)


def _first_lines(failures: pd.DataFrame, totals: pd.Series, keep: int) -> pd.DataFrame:
    first = failures.sort_values(["relation", "line"], kind="stable", ignore_index=True)
    first = first[first.groupby("relation").cumcount() < keep]
    return pd.DataFrame({"relation": first["relation"].to_numpy("int64"), "line": first["line"].to_numpy("int64"),
                         "count": first["relation"].map(totals).to_numpy("int64")})


def _no_relations() -> pd.DataFrame:
    return pd.DataFrame({"relation": np.array([], "int64"), "line": np.array([], "int64")})


def _guard(frame: pd.DataFrame | None, model: type[pa.DataFrameModel]) -> pd.DataFrame | None:
    """What the raw stage hands on must pass its typed schema; a failure here is a badpoints bug."""
    return None if frame is None else check_frame(model, frame, stage=STAGE, side="output")
