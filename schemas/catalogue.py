"""The catalogue of checks: what a check is (:class:`CheckInfo`), its severities, why some stay errors, and every
check by id (:data:`CHECKS`).

Every check has a stable id (used in reports, JUnit files and the config's ``[severity]`` table), a default
severity, a short title and advice that says what to do. A new check is one ``CheckInfo``: a stage's in the
``CHECKS`` of its schema module (``schemas/<stage>.py``; the catalogue finds them there, so a new stage adds no line
here), reading's, the raw tables' and the run's below; plus one registered function (:mod:`schemas.checks`) when
it runs inside a pandera schema.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Iterable, Iterator, Mapping, Sequence

ERROR = "error"
WARNING = "warning"
INFO = "info"  # reported, never changes the status (fills, merges, attrition)
OFF = "off"
SEVERITIES = (ERROR, WARNING, INFO, OFF)

# Why some checks stay errors whatever the config says: a run that reported them as anything less would lie.
# The config's [severity] may set these checks to "error" only; `badpoints checks` and the README say which.
CANNOT_RUN = "cannot run"
NOT_READ = "table not read"
STOPS = "stops the stages"
GRAPH_FILE = "graph file"
LOCKED = {
    CANNOT_RUN: "badpoints could not run at all (exit 2)",
    NOT_READ: "the table was not read, so no stage ran on it",
    STOPS: "the stage that finds it stops there: no later stage runs and no graph is written",
    GRAPH_FILE: "without it a written graph file could be corrupt (inf or NaN, indices out of bounds, "
                "tensors of the wrong shape, an unsafe pickle)",
}


@dataclass(frozen=True)
class CheckInfo:
    """What a check finds, how bad it is by default, and what the user should do.

    ``locked`` names why the config may not set the check below error (a key of :data:`LOCKED`), or is None.
    ``announce``: its findings say what the input lacks (a column absent or misnamed, and what the run does
    without it), so the terminal shows them whole in its first lines, whatever their severity.
    """

    id: str
    stage: str
    severity: str
    title: str
    advice: str
    locked: str | None = None
    announce: bool = False


# The checks of reading, of the raw tables and of every stage's guards and steps (stage "all"); each stage's own are
# declared in its schema module (``CHECKS``), and the run's (its ledgers, ``_AFTER``) come after those.
_BEFORE = [
    # -- files --------------------------------------------------------------------------
    CheckInfo("file_missing", "load", ERROR, "table file not found",
              "Put the table where the run looks: in DATA_DIR under one of the names tried (.csv or .csv.gz, any "
              "case) for validate and build, at the path given for check.", locked=CANNOT_RUN),
    CheckInfo("file_unreadable", "load", ERROR, "file cannot be read",
              "Check the file's permissions and that it is a regular file.", locked=CANNOT_RUN),
    CheckInfo("file_ambiguous", "load", WARNING, "more than one file could hold the table",
              "Keep one file per table in DATA_DIR (and its hosp/ folder); the one read is named."),
    CheckInfo("file_empty", "load", ERROR, "file has no bytes",
              "Re-export or re-download the table; an empty file has not even a header.", locked=NOT_READ),
    CheckInfo("compression", "load", ERROR, "gzip stream is truncated or corrupt",
              "Re-download the file or re-compress it with gzip; a file named .gz must be gzip.", locked=NOT_READ),
    CheckInfo("decompression_bound", "load", ERROR, "gzip file expands beyond the configured bound",
              "A file that expands this far is most often a gzip bomb or a broken export; if it is real, raise "
              "[load] max_expanded_bytes or max_expansion_ratio.", locked=CANNOT_RUN),
    CheckInfo("encoding", "load", ERROR, "bytes that are not UTF-8",
              "Re-export the table as UTF-8 (MIMIC ships UTF-8; a spreadsheet save may not).", locked=NOT_READ),
    CheckInfo("duplicate_header", "load", ERROR, "header names a column twice",
              "Rename or drop the duplicated column so every header name is unique (case-insensitively).",
              locked=NOT_READ),
    CheckInfo("header_near_column", "load", WARNING, "a header one edit from a column the header lacks",
              "Columns are read by name (any case): if the column holds what the name it is near says, rename it "
              "to that name; if not, rename it further from it.", announce=True),
    CheckInfo("missing_column", "load", ERROR, "required column absent",
              "Check the delimiter (badpoints reads comma-separated files) and the header names.", locked=NOT_READ),
    CheckInfo("malformed_row", "load", ERROR, "row that is not valid CSV",
              "Fix the rows: every row needs as many fields as the header, and every quote must close.",
              locked=NOT_READ),
    CheckInfo("field_too_long", "load", ERROR, "a field longer than the configured bound",
              "No lab value, time or ID is this long: the export merged rows or lost a delimiter; fix the rows "
              "named. They were left out; the rest of the table was read and checked."),
    CheckInfo("table_empty", "load", ERROR, "table has a header but no rows",
              "Re-export the table with its rows; an empty table leaves nothing to train on.", locked=NOT_READ),
    # -- values -------------------------------------------------------------------------
    CheckInfo("id_missing", "raw", ERROR, "an empty required ID",
              "Every row needs this ID; drop or repair the rows."),
    CheckInfo("id_positive_integer", "raw", ERROR, "an ID that is not a positive integer",
              "IDs must be positive integers below 10^18; repair the export (no text, signs, or separators)."),
    CheckInfo("id_float_format", "raw", WARNING, "an integer ID written as a float ('123.0')",
              "Read as an integer; re-export with integer IDs (pandas writes 123.0 when the column had NaN)."),
    CheckInfo("hadm_id_missing", "raw", OFF, "no HADM_ID (outpatient labs)",
              "Outpatient labs have no admission: the clean stage sets them aside and counts them "
              "(quarantine_outpatient), so this check is off unless [severity] turns it on."),
    CheckInfo("valuenum_numeric", "raw", ERROR, "VALUENUM that is not a number",
              "VALUENUM must be a plain decimal number or empty; move text results to VALUE."),
    CheckInfo("valuenum_finite", "raw", ERROR, "VALUENUM that is inf or NaN",
              "Non-finite values poison the z-scores and the gradients; repair the export step that wrote them."),
    CheckInfo("valuenum_bound", "raw", ERROR, "VALUENUM beyond the configured magnitude bound",
              "No lab measurement is this large; raise [raw] valuenum_abs_bound only if it is real."),
    CheckInfo("valuenum_derived", "raw", INFO, "VALUENUM derived from VALUE",
              "The table has no VALUENUM column; numbers were parsed from VALUE with a strict grammar.",
              announce=True),
    CheckInfo("ref_range_numeric", "raw", WARNING, "a reference range bound that is not a finite number",
              "REF_RANGE_LOWER/UPPER are metadata, read as numbers when present: this bound is left empty "
              "(null); the row and its result are kept. Re-export the bound as a plain decimal to use it."),
    CheckInfo("flag_value", "raw", WARNING, "FLAG other than 'abnormal' or 'delta'",
              "Unknown flags are treated as abnormal; map them to 'abnormal', 'delta' or empty."),
    CheckInfo("datetime_missing", "raw", ERROR, "an empty required time",
              "Every row needs this time; drop or repair the rows."),
    CheckInfo("datetime_iso", "raw", ERROR, "a time that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "Re-export the original file; a spreadsheet re-save rewrites dates and can lose the century."),
    CheckInfo("edregtime_iso", "raw", WARNING, "an EDREGTIME that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "EDREGTIME is optional, read only for where the ED stay began: this one is left empty (null) and its "
              "admission kept; the bucket stage then bounds its ED stay by [bucket] ed_hours. Re-export the time "
              "as ISO to use it."),
    CheckInfo("deathtime_iso", "raw", WARNING, "a DEATHTIME that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "DEATHTIME is optional, read only by a prediction task whose label is a death: this one is left "
              "empty (null) and its admission kept, so such a task reads the patient as discharged alive. "
              "Re-export the time as ISO."),
    # -- relations ----------------------------------------------------------------------
    CheckInfo("primary_key_unique", "raw", ERROR, "a key that appears more than once",
              "Each admission and lab item must appear once; drop the duplicated rows."),
    CheckInfo("foreign_key", "raw", ERROR, "a reference to a row that does not exist",
              "Every LABEVENTS HADM_ID must be in ADMISSIONS and every ITEMID in D_LABITEMS; "
              "check that the tables come from the same export."),
    CheckInfo("subject_mismatch", "raw", ERROR, "a SUBJECT_ID other than its admission's",
              "The lab row names a different patient than its admission; check the join that made it."),
    CheckInfo("discharge_before_admit", "raw", ERROR, "DISCHTIME earlier than ADMITTIME",
              "The stay has negative length; repair the admission's times."),
    CheckInfo("charttime_outside_stay", "raw", OFF, "CHARTTIME outside the admission's stay",
              "The bucket stage decides each such row and counts what it does (from_ed_stay, before_admission, "
              "after_discharge, beyond_max_stay), so this check is off unless [severity] turns it on."),
    # -- every stage ---------------------------------------------------------------------
    CheckInfo("stage_guard", "all", ERROR, "rows that break the stage's schema",
              "A stage received or produced data its schema forbids; the message names the column and check.",
              locked=STOPS),
    CheckInfo("fit_finite", "all", ERROR, "a number a fit needs that is inf or NaN",
              "A fit learns its state from every number it reads: one inf, or a row of a numeric item without its "
              "number, would make it wrong. The raw checks keep such values from badpoints' own stages; in rows "
              "you hand a stage's fit, drop or repair the rows named.", locked=STOPS),
    CheckInfo("step_empty", "all", ERROR, "a filter, join or dedup that left no rows",
              "Nothing would reach the graphs; check the inputs and the step's settings.", locked=STOPS),
    CheckInfo("step_removed_most", "all", WARNING, "a step that removed more than the warning fraction",
              "Check that the step's settings fit this data ([filters] warn_removed_fraction)."),
    CheckInfo("step_removed_nearly_all", "all", ERROR, "a step that removed more than the error fraction",
              "Almost nothing survives this step; check its settings ([filters] error_removed_fraction)."),
    CheckInfo("attrition", "all", INFO, "rows read, kept, quarantined and merged per step",
              "Every row read is accounted for; quarantined rows keep their line and reason."),
]
_AFTER = [
    # -- admissions (the ADMISSIONS ledger: read = in graphs + dropped) -------------------
    CheckInfo("admission_no_labs", "flow", INFO, "admissions without any lab row",
              "Normal in MIMIC (short stays, labs charted elsewhere); they have no edges, so no graph node."),
    CheckInfo("admission_rejected", "flow", WARNING, "admissions dropped because they failed a raw check",
              "See the ADMISSIONS raw findings; repair the admission's key or times to keep it."),
    CheckInfo("admission_labs_quarantined", "flow", WARNING, "admissions whose every lab row was quarantined",
              "They reach no graph; the quarantine findings of the named stages say why their rows went."),
]


def collect_checks(declared: Iterable[tuple[str, Iterable[CheckInfo]]]) -> dict[str, CheckInfo]:
    """Checks by id, in the order given; ``declared`` pairs where each group is declared (a module's name) with its
    checks. An id declared twice is refused, naming both places."""
    checks: dict[str, CheckInfo] = {}
    where: dict[str, str] = {}
    for place, infos in declared:
        for info in infos:
            if info.id in checks:
                raise ValueError(f"check {info.id!r} is declared twice: in {where[info.id]} and {place}")
            checks[info.id], where[info.id] = info, place
    return checks


def _declaring_modules() -> list[ModuleType]:
    """The modules of this package that declare checks (``CHECKS``), imported, by name; not this one, whose
    ``CHECKS`` is the catalogue itself."""
    found = pkgutil.iter_modules(importlib.import_module(__package__).__path__, prefix=f"{__package__}.")
    modules = [importlib.import_module(name) for _, name, _ in found]
    return [module for module in modules if module.__name__ != __name__ and hasattr(module, "CHECKS")]


class _Catalogue(Mapping[str, CheckInfo]):
    """Every check by id: reading's, the raw tables' and those of every stage (``_BEFORE``), each stage's own (the
    schema modules' ``CHECKS``, by module name: ``pipeline.stages.in_flow_order`` lists them in the flow's order),
    then the run's (``_AFTER``).

    Put together on first use, when every schema module can be imported (they import this one): read it inside
    functions, never while a schema module is being imported.
    """

    @functools.cached_property
    def _checks(self) -> dict[str, CheckInfo]:
        modules = [(module.__name__, module.CHECKS) for module in _declaring_modules()]
        return collect_checks([(__name__, _BEFORE), *modules, (__name__, _AFTER)])

    def __getitem__(self, check_id: str) -> CheckInfo:
        return self._checks[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._checks)

    def __len__(self) -> int:
        return len(self._checks)


CHECKS: Mapping[str, CheckInfo] = _Catalogue()
# Checks that mean the run could not happen at all (exit 2), rather than that the data is bad (exit 1): reading's,
# as no stage runs before the tables are read.
CANNOT_RUN_CHECKS = tuple(info.id for info in _BEFORE if info.locked == CANNOT_RUN)


def check_info(check_id: str) -> CheckInfo:
    """The catalogue entry for a check id (KeyError names the known ids)."""
    try:
        return CHECKS[check_id]
    except KeyError:
        raise KeyError(f"unknown check {check_id!r}; known checks: {', '.join(sorted(CHECKS))}") from None


def in_flow_order(checks: Iterable[CheckInfo], order: Sequence[str]) -> list[CheckInfo]:
    """Checks as people read them: by the stage that reports them in ``order`` (the names of reading, the raw
    tables, the stages, the run), those of every stage after the raw tables'; each stage's in the order declared."""
    at = {name: n for n, name in enumerate(order)}
    raw = at.get("raw", 0)
    return sorted(checks, key=lambda info: at.get(info.stage, raw))
