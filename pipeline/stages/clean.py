"""Clean stage: set aside what cannot enter a graph, and classify every lab item.

Lab rows without HADM_ID (outpatient), rows that failed a raw check, rows of an
admission or item that failed one, are quarantined with a reason. Every ITEMID
is then numeric (all its rows with a result have VALUENUM), ordinal (the text
stage read its words as ranks), categorical (no row has VALUENUM) or mixed; the
text rows of mixed items ('See Comments', '0-2') are quarantined. A row with neither VALUE nor VALUENUM is of a class of its own,
never text: MIMIC-IV writes some results only in COMMENTS, and such a row
becomes what ``empty_value`` declares; a row without a comment either has no
result and is quarantined. COMMENTS (free text) goes no further than this stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pipeline.reporting.findings import item_names
from pipeline.kernel.options import Section, setting
from pipeline.kernel.stage import Context, Plan, Reason, Stage
from pipeline.kernel.calls import Call, Fit
from pipeline.kernel.quarantine import Kept, set_aside
from pipeline.kernel.calls import reads
from pipeline.stages import text
from schemas.clean import CleanAdmissions, CleanEvents, CleanLabItems
from schemas.guard import guarded, refuse_non_finite
from schemas.raw import ADMISSIONS, LABITEMS, Admissions, LabEvents, LabItems

NAME = "clean"
OUTPATIENT = "outpatient lab (no HADM_ID)"
RAW_ERROR = "failed raw check"
ADMISSION_REJECTED = "admission failed a raw check"
ITEM_REJECTED = "lab item failed a raw check"
MIXED_TEXT = "non-numeric value in numeric item"
IN_COMMENTS = "result only in comments"
NO_RESULT = "no result"
EMPTY_VALUE_POLICIES = ("quarantine", "category")
# The columns of the lab rows the item-kind fit reads.
FIT_READS = ("HADM_ID", "REJECT", "ITEMID", "VALUE", "VALUENUM", "COMMENTS")


@dataclass(frozen=True)
class Options(Section):
    NAME = "comments"
    empty_value: str = setting(str, "quarantine", words=EMPTY_VALUE_POLICIES, doc="""
        MIMIC-IV writes some lab results only in labevents.comments ('NEG.', 'UNABLE TO REPORT.', '___'), with value
        and valuenum empty. Such a row is never taken for text in a numeric item (it does not make its item mixed).
        empty_value says what it becomes:
          "quarantine": set aside with the reason "result only in comments" (check result_in_comments), counted per ITEMID;
          "category":   the comment becomes the row's categorical VALUE, coded with the lab VALUE vocabulary under
                        [encode] min_admissions (a comment seen in fewer training admissions gets code 0 and stays out
                        of stats.json).
        The default is the conservative one: comments are free text, written by people, and may name a patient or mix
        several findings; keeping them as categories is a choice to make knowing the data. Rows with neither a value
        nor a comment carry no result and are always quarantined ("no result", check no_result).
        A comment's text appears in no report, quarantine.parquet or graph, even with --show-values; under "category"
        it reaches stats.json only as a vocabulary value of at least min_admissions training admissions.""")


@guarded(stage=NAME, takes=Admissions, gives=CleanAdmissions)
def clean_admissions(admissions: pd.DataFrame) -> Kept:
    """Admissions whose key and times passed the raw checks; the others are quarantined."""
    return _without_rejected(admissions, table="ADMISSIONS", key="HADM_ID")


@guarded(stage=NAME, takes=LabItems, gives=CleanLabItems)
def clean_labitems(labitems: pd.DataFrame) -> Kept:
    """Lab items whose ITEMID passed the raw checks; the others are quarantined."""
    return _without_rejected(labitems, table="D_LABITEMS", key="ITEMID")


def _without_rejected(rows: pd.DataFrame, *, table: str, key: str) -> Kept:
    """The rows of a small table that passed their raw checks, keyed by an int64 ``key``; the others quarantined."""
    kept = set_aside(rows, [(RAW_ERROR, rows["REJECT"].notna())], stage=NAME, table=table,
                     columns={RAW_ERROR: "REJECT"})
    frame = kept.frame.drop(columns="REJECT").astype({key: "int64"})
    return Kept(frame=frame, quarantine=kept.quarantine, steps=kept.steps)


@dataclass(frozen=True)
class ItemKinds:
    """What clean learns from all the inpatient rows it keeps: each lab item's kind (:data:`schemas.clean.KINDS`),
    and how many rows have no result (with and without a comment), which decides the steps it takes. Items absent
    are categorical."""

    kinds_: tuple[tuple[int, str], ...]
    no_result_rows_: int = 0
    commented_rows_: int = 0

    def of(self, items: pd.Series) -> pd.Series:
        """The kind of each row's item (categorical for an item without any result)."""
        table = pd.Series([kind for _, kind in self.kinds_], index=pd.Index([i for i, _ in self.kinds_], dtype="int64"),
                          dtype="str")
        return pd.Series(table.reindex(items.to_numpy()).fillna("categorical").to_numpy(), index=items.index,
                         dtype="str")

    def as_json(self) -> dict[str, Any]:
        return {"kinds": [list(row) for row in self.kinds_], "no_result_rows": self.no_result_rows_,
                "commented_rows": self.commented_rows_}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ItemKinds":
        return cls(kinds_=tuple((int(item), str(kind)) for item, kind in data["kinds"]),
                   no_result_rows_=int(data["no_result_rows"]), commented_rows_=int(data["commented_rows"]))


@dataclass(frozen=True)
class KindCounts:
    """One part's share of :class:`ItemKinds`: per ITEMID, RESULTS (rows with VALUE or VALUENUM) and NUMBERS (of
    those, rows with VALUENUM); rows without a result, with and without a comment. Parts add up."""

    per_item: pd.DataFrame
    no_result_rows: int
    commented_rows: int


def inpatient_rows(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame) -> Kept:
    """Rows with an admission and an item that passed the raw checks; the others set aside with their reason."""
    return set_aside(labevents, _not_inpatient(labevents, admissions, labitems), stage=NAME,
                     columns={OUTPATIENT: "HADM_ID", RAW_ERROR: "REJECT", ADMISSION_REJECTED: "HADM_ID",
                              ITEM_REJECTED: "ITEMID"})


def _not_inpatient(labevents: pd.DataFrame, admissions: pd.DataFrame,
                   labitems: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """The filters of :func:`inpatient_rows`, in order: (reason, rows it takes)."""
    return [(OUTPATIENT, labevents["HADM_ID"].isna() & labevents["REJECT"].isna()),
            (RAW_ERROR, labevents["REJECT"].notna()),
            (ADMISSION_REJECTED, ~labevents["HADM_ID"].isin(admissions["HADM_ID"])),
            (ITEM_REJECTED, ~labevents["ITEMID"].isin(labitems["ITEMID"]))]


def _empty_rows(events: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Rows with neither VALUE nor VALUENUM, and those of them with a comment."""
    empty = events["VALUE"].isna() & events["VALUENUM"].isna()
    commented = empty & events["COMMENTS"].notna() if "COMMENTS" in events else pd.Series(False, index=events.index)
    return empty, commented


@reads(*FIT_READS)
@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def count_kinds(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame,
                numbered: text.NumberedItems | None = None) -> KindCounts:
    """The counts :class:`ItemKinds` is learned from, of ``labevents`` (all the rows, or those of some admissions):
    of the rows :func:`inpatient_rows` keeps (:func:`pipeline.stages.text.inpatient`), without making the records
    of those it sets aside. ``numbered``, the text stage's state, tells the ordinal items when the kinds are
    finished (:func:`kinds_from_counts`); the counts do not read it. A VALUENUM that is inf or -inf is refused
    (``fit_finite``); a null one is a row without a number."""
    return _count_kinds(labevents, admissions, labitems, fit="clean.count_kinds")


def _count_kinds(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                 fit: str) -> KindCounts:
    """:func:`count_kinds` of rows already guarded; ``fit`` names the function called, for its refusal."""
    kept = text.inpatient(labevents, admissions, labitems)
    refuse_non_finite(labevents, "VALUENUM", among=kept.to_numpy(bool), stage=NAME, fit=fit,
                      needs="a VALUENUM that is finite or null in each inpatient row")
    return _counts(labevents[kept.to_numpy(bool)])


def _counts(events: pd.DataFrame) -> KindCounts:
    has_result = events["VALUENUM"].notna() | events["VALUE"].notna() if "VALUE" in events else \
        pd.Series(True, index=events.index)
    numbers = events["VALUENUM"].notna()[has_result].astype("int64")
    items = pd.Index(events["ITEMID"].to_numpy()[has_result.to_numpy()], dtype="int64", name="ITEMID")
    per_item = pd.DataFrame({"RESULTS": 1, "NUMBERS": numbers.to_numpy()}, index=items).groupby(level="ITEMID").sum()
    empty, commented = _empty_rows(events) if "VALUE" in events else (pd.Series(False, index=events.index),) * 2
    return KindCounts(per_item=per_item, no_result_rows=int((empty & ~commented).sum()),
                      commented_rows=int(commented.sum()))


def add_kind_counts(parts: Sequence[KindCounts]) -> KindCounts:
    """The counts of all the rows from those of each part."""
    per_item = pd.concat([part.per_item for part in parts]).groupby(level="ITEMID").sum()
    return KindCounts(per_item=per_item, no_result_rows=sum(p.no_result_rows for p in parts),
                      commented_rows=sum(p.commented_rows for p in parts))


def kinds_from_counts(counts: KindCounts, admissions: Any = None, labitems: Any = None,
                      numbered: text.NumberedItems | None = None) -> ItemKinds:
    """Per item, sorted by ITEMID: ordinal (the text stage's ordinal items, ``numbered``), numeric (every row with a
    result has VALUENUM), categorical (none has) or mixed."""
    per_item = counts.per_item.sort_index()
    numbers, results = per_item["NUMBERS"].to_numpy(), per_item["RESULTS"].to_numpy()
    ordinal = per_item.index.isin(numbered.items_of("ordinal") if numbered is not None else ())
    kind = np.select([ordinal, numbers == results, numbers == 0], ["ordinal", "numeric", "categorical"],
                     default="mixed")
    return ItemKinds(kinds_=tuple(zip(per_item.index.astype("int64").tolist(), kind.tolist())),
                     no_result_rows_=counts.no_result_rows, commented_rows_=counts.commented_rows)


@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def fit_kinds(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame,
              numbered: text.NumberedItems | None = None) -> ItemKinds:
    """Item kinds of all the rows: :func:`count_kinds` of one part (``numbered``: the text stage's state, which
    names the ordinal items)."""
    counts = _count_kinds(labevents, admissions, labitems, fit="clean.fit_kinds")
    return kinds_from_counts(add_kind_counts([counts]), numbered=numbered)


@guarded(stage=NAME, takes=LabEvents, gives=CleanEvents)
def clean_events(labevents: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame,
                 kinds: ItemKinds | None = None, *, empty_value: str = Options.empty_value) -> Kept:
    """Inpatient lab rows with valid keys and a result, each with the KIND of its item.

    ``admissions`` and ``labitems`` are the clean tables: rows referring to a
    rejected admission or item are quarantined with that reason. ``kinds`` are learned from all the rows (by
    :func:`fit_kinds`, or from parts' :func:`count_kinds`); without them, from ``labevents``. ``empty_value``
    says what a row whose result is only in COMMENTS becomes: "quarantine", or
    "category" (the comment is its categorical VALUE and the row's KIND is categorical).
    """
    if empty_value not in EMPTY_VALUE_POLICIES:
        raise ValueError(f"empty_value must be one of {', '.join(EMPTY_VALUE_POLICIES)}, got {empty_value!r}")
    kept = inpatient_rows(labevents, admissions, labitems)
    events = kept.frame.drop(columns=["REJECT", "SUBJECT_ID"], errors="ignore")
    events = events.astype({"HADM_ID": "int64", "ITEMID": "int64"})
    kinds = kinds if kinds is not None else kinds_from_counts(_counts(events))
    events = events.assign(KIND=kinds.of(events["ITEMID"]))
    empty, commented = _empty_rows(events)
    filters = [(NO_RESULT, empty & ~commented, kinds.no_result_rows_)]
    if empty_value == "category" and commented.any():
        events = events.assign(VALUE=events["VALUE"].mask(commented, events["COMMENTS"]),
                               KIND=events["KIND"].mask(commented, "categorical"))
    elif empty_value == "quarantine":
        filters.append((IN_COMMENTS, commented, kinds.commented_rows_))
    # A class of rows that does not occur (in all the rows) adds no step: data without empty values has no step for
    # them in its attrition.
    filters = [(reason, mask) for reason, mask, rows in filters if rows]
    # The text of a mixed item, and a word an ordinal item's scale does not hold (a state fitted on other rows).
    filters.append((MIXED_TEXT, events["KIND"].isin(("mixed", "ordinal")) & events["VALUENUM"].isna()))
    results = set_aside(events.drop(columns="COMMENTS", errors="ignore"), filters, stage=NAME,
                        columns={NO_RESULT: "VALUE", IN_COMMENTS: "VALUE", MIXED_TEXT: "VALUENUM"})
    return Kept(frame=results.frame, quarantine=pd.concat([kept.quarantine, results.quarantine]),
                steps=kept.steps + results.steps)


def item_kinds(events: pd.DataFrame) -> pd.Series:
    """Per row, the kind of its item: numeric (every row with a result has VALUENUM), categorical (none) or
    mixed (no item is ordinal: only the text stage's state names those). Rows with neither VALUE nor VALUENUM have no say (without a VALUE column every row has); an item with
    only such rows is categorical."""
    return kinds_from_counts(_counts(events)).of(events["ITEMID"])


def fit_inputs(labevents: Any, context: Context) -> tuple[Any, tuple, dict]:
    """What :func:`fit_kinds` reads in flow: every lab row, the admissions and lab items that pass the raw checks
    (cleaned again: the stage cleans them when it runs, after its fit), and the text stage's state (none where the
    stage runs without it: no item is then ordinal)."""
    read = context.read
    return labevents, (clean_admissions(read.of(ADMISSIONS)).frame, clean_labitems(read.of(LABITEMS)).frame,
                       context.fitted.get(text.NAME)), {}


def plan(context: Context) -> Plan:
    """The stage in flow: admissions and lab items first, then the lab rows against them ([comments] options)."""
    admissions = clean_admissions(context.read.of(ADMISSIONS))
    labitems = clean_labitems(context.read.of(LABITEMS))
    context.ledger.names = item_names(labitems.frame)
    return Plan(context=context.with_tables(**{ADMISSIONS: admissions.frame, LABITEMS: labitems.frame}),
                taken=(admissions, labitems),
                calls=(Call(clean_events, (admissions.frame, labitems.frame, context.fitted[NAME]),
                            {"empty_value": context.options.empty_value}),))


STAGE = Stage(NAME, colour="#1f77b4", plan=plan, options=Options, takes=LabEvents, gives=CleanEvents,
              fit=Fit(whole=fit_kinds, partial=count_kinds, combine=add_kind_counts, finish=kinds_from_counts,
                      inputs=fit_inputs, state=ItemKinds, saved_as="item_kinds"),
              reasons=(Reason(OUTPATIENT, "quarantine_outpatient"),
                       Reason(RAW_ERROR, "quarantine_raw_error"),
                       Reason(ADMISSION_REJECTED, "quarantine_admission"),
                       Reason(ITEM_REJECTED, "quarantine_raw_error"),
                       Reason(MIXED_TEXT, "mixed_item_text", per_item=True),
                       Reason(IN_COMMENTS, "result_in_comments", per_item=True),
                       Reason(NO_RESULT, "no_result", per_item=True)),
              by_admission=True)
