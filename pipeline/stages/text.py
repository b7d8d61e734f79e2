"""Text stage: censored and coded lab results become numbers before clean classifies the items.

A numeric lab item (one with a number in some row) sometimes writes its result as text: a result beyond the assay's
range as ``<0.01`` or ``GREATER THAN 300``, a dipstick's ``NEG``. Clean would call such an item mixed and quarantine
those rows; they are numbers a model can use. Here, in the rows of an item that has numbers:

- ``<x``, ``<=x``, ``>x``, ``>=x`` (and ``LESS THAN x``, ``GREATER THAN x``) become VALUENUM x, with the censoring
  mark Z_CENSORED = -1 (the result is at most x) or +1 (at least x), an edge feature (0 on every other row);
- a word of the declared ``[clean] text_values`` map (``NEG = 0``) becomes its number;
- what is still text goes on as text, and clean quarantines it as before.

Which items have numbers is learned from all the lab rows that passed the raw checks (a mergeable fit, like clean's
item kinds); VALUE keeps the text as it was read. Nothing here reads COMMENTS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.reporting import page
from pipeline.reporting.findings import Finding, format_items, item_names, summary_finding
from pipeline.kernel.options import Section, require, setting, table, typed
from pipeline.kernel.calls import reads
from pipeline.kernel.stage import Context, Outcome, Plan, Shown, Stage
from pipeline.kernel.calls import Call, Fit
from schemas.errors import SAMPLE_CAP
from schemas.guard import guarded, refuse_non_finite
from schemas.raw import DEFAULT_VALUENUM_ABS_BOUND, LABITEMS, LabEvents
from schemas.text import CENSORED, TextEvents

NAME = "text"
# A censored result: the sign (or its words), then a plain decimal number and nothing else.
CENSORING = re.compile(r"^\s*(<=|>=|<|>|LESS THAN|GREATER THAN)\s*([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*$",
                       re.IGNORECASE)
DIRECTION = {"<": -1, "<=": -1, "LESS THAN": -1, ">": 1, ">=": 1, "GREATER THAN": 1}
# The columns of the lab rows the fit reads.
FIT_READS = ("ITEMID", "VALUE", "VALUENUM", "REJECT")
# [clean.text_values] as declared: the words of every build's map.
DEFAULT_TEXT_VALUES = MappingProxyType({"NEG": 0.0, "NEGATIVE": 0.0, "NONE": 0.0})


@dataclass(frozen=True)
class Options(Section):
    NAME = "clean"
    censored: bool = setting(bool, True, doc="""
        In a lab item that has numbers, a result written '<x', '<=x', '>x', '>=x', 'LESS THAN x' or 'GREATER THAN x'
        (beyond the assay's range: '<0.01' troponin, '>300' glucose) becomes x, marked Z_CENSORED = -1 (at most x)
        or +1 (at least x) in edge_attr; false leaves it as text, which clean quarantines (mixed_item_text).""")
    text_values: Mapping[str, float] = table(default=DEFAULT_TEXT_VALUES, doc="""
        Words that stand for a number in a lab item that has numbers, matched whatever their case and a trailing
        period; what is still text is quarantined. These map the dipstick's and the sediment's absence ("NEG": 637
        and "NONE": 52 rows of the MIMIC-III demo's urine items) to 0; a file's words are added to them (or give
        one another number). 'TR' (trace) means a different amount in each item and is left to you, e.g.
        "TR" = 0.5""")

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Options":
        """The section, its ``[clean.text_values]`` table of word = number (the default's when not given)."""
        words = values.get("text_values", {}) if isinstance(values, dict) else {}
        require(isinstance(words, dict), "[clean.text_values] must be a table of word = number")
        for word, number in words.items():
            require(word.strip() != "" and isinstance(number, (int, float)) and not isinstance(number, bool)
                    and np.isfinite(number) and abs(number) <= DEFAULT_VALUENUM_ABS_BOUND,
                    f"[clean.text_values] {word!r} must be a finite number of at most "
                    f"{DEFAULT_VALUENUM_ABS_BOUND:g} in magnitude, got {number!r}")
        return cls(**typed(cls, values, cls.NAME, skip=("text_values",)),
                   text_values=MappingProxyType({_word(w): float(v) for w, v in words.items()}))



def _word(text: str) -> str:
    return text.strip().rstrip(".").strip().upper()


def _words(values: pd.Series) -> pd.Series:
    """:func:`_word` of every value, vectorized."""
    return values.str.strip().str.rstrip(".").str.strip().str.upper()


@dataclass(frozen=True)
class NumberedItems:
    """Per lab item that has numbers (sorted by ITEMID): its rows with a number, with censored text and with a
    mapped word, over all the rows that passed the raw checks."""

    items_: tuple[int, ...]
    numbers_: tuple[int, ...]
    censored_: tuple[int, ...]
    mapped_: tuple[int, ...]

    def table(self) -> pd.DataFrame:
        return pd.DataFrame({"NUMBERS": self.numbers_, "CENSORED": self.censored_, "MAPPED": self.mapped_},
                            index=pd.Index(self.items_, name="ITEMID", dtype="int64"))

    def as_json(self) -> dict[str, Any]:
        return {"items": list(self.items_), "numbers": list(self.numbers_), "censored": list(self.censored_),
                "mapped": list(self.mapped_)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NumberedItems":
        return cls(items_=tuple(int(i) for i in data["items"]), numbers_=tuple(int(n) for n in data["numbers"]),
                   censored_=tuple(int(n) for n in data["censored"]), mapped_=tuple(int(n) for n in data["mapped"]))


def read_text(events: pd.DataFrame, *, censored: bool = Options.censored,
              text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES,
              items: Sequence[int] | None = None) -> pd.DataFrame:
    """Per row that passed the raw checks and has text but no number (of ``items`` only, when given): the number
    its text stands for (NaN: none) and its censoring (-1, +1; 0 for a mapped word), as NUMBER and CENSORED,
    indexed like those rows."""
    text = events["VALUE"].notna() & events["VALUENUM"].isna() & events["ITEMID"].notna()
    if items is not None:
        text &= events["ITEMID"].isin(items)
    if "REJECT" in events:
        text &= events["REJECT"].isna()
    values = events.loc[text.to_numpy(bool), "VALUE"].astype("str")
    # Only text that starts like a censored result goes through the pattern (most text is a category's word).
    signed = values[values.str.match(r"^\s*[<>lLgG]").to_numpy(bool)] if censored else values.iloc[:0]
    parts = signed.str.extract(CENSORING)
    number = pd.to_numeric(parts[1], errors="coerce").astype("float64").reindex(values.index)
    direction = pd.to_numeric(parts[0].str.upper().map(DIRECTION), errors="coerce").reindex(values.index)
    mapped = _words(values).map(dict(text_values)).astype("float64")
    number = number.where(number.abs() <= DEFAULT_VALUENUM_ABS_BOUND)
    direction = direction.where(number.notna())
    return pd.DataFrame({"NUMBER": number.fillna(mapped), "CENSORED": direction.fillna(0).astype("int8"),
                         "WORD": number.isna() & mapped.notna()}, index=values.index)


@reads(*FIT_READS)
@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def count_numbered(events: pd.DataFrame, *, censored: bool = Options.censored,
                   text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> pd.DataFrame:
    """One part's share of :class:`NumberedItems`: per ITEMID, rows with a number, censored text and mapped words
    (rows that failed a raw check left out). Parts add up (:func:`add_numbered`). A VALUENUM that is inf or -inf
    is refused (``fit_finite``); a null one is a row without a number."""
    return _count_numbered(events, censored=censored, text_values=text_values, fit="text.count_numbered")


def _count_numbered(events: pd.DataFrame, *, censored: bool, text_values: Mapping[str, float],
                    fit: str) -> pd.DataFrame:
    """:func:`count_numbered` of rows already guarded; ``fit`` names the function called, for its refusal."""
    passed = events["REJECT"].isna() if "REJECT" in events else pd.Series(True, index=events.index)
    events = events[(passed & events["ITEMID"].notna()).to_numpy(bool)]
    refuse_non_finite(events, "VALUENUM", stage=NAME, fit=fit,
                      needs="a VALUENUM that is finite or null in each row that passed the raw checks")
    read = read_text(events, censored=censored, text_values=text_values)
    items = events["ITEMID"]
    frame = pd.DataFrame({"NUMBERS": events["VALUENUM"].notna().astype("int64"),
                          "CENSORED": ((read["CENSORED"] != 0).reindex(events.index, fill_value=False)
                                       .astype("int64")),
                          "MAPPED": read["WORD"].reindex(events.index, fill_value=False).astype("int64")})
    return frame.groupby(items.to_numpy("int64")).sum().rename_axis("ITEMID")


def add_numbered(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The counts of all the rows from those of each part."""
    return pd.concat(list(parts)).groupby(level="ITEMID").sum()


def numbered_from_counts(counts: pd.DataFrame, *args: Any, **kwargs: Any) -> NumberedItems:
    """The items with a number in some row, sorted by ITEMID."""
    counts = counts[counts["NUMBERS"] > 0].sort_index()
    return NumberedItems(items_=tuple(counts.index.astype("int64").tolist()),
                         numbers_=tuple(counts["NUMBERS"].tolist()), censored_=tuple(counts["CENSORED"].tolist()),
                         mapped_=tuple(counts["MAPPED"].tolist()))


@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def fit_numbered(events: pd.DataFrame, *, censored: bool = Options.censored,
                 text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> NumberedItems:
    """:class:`NumberedItems` of all the rows: :func:`count_numbered` of one part."""
    counts = _count_numbered(events, censored=censored, text_values=text_values, fit="text.fit_numbered")
    return numbered_from_counts(add_numbered([counts]))


@guarded(stage=NAME, takes=LabEvents, gives=TextEvents)
def read_numbers(events: pd.DataFrame, numbered: NumberedItems, *, censored: bool = Options.censored,
                 text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> pd.DataFrame:
    """VALUENUM for the censored and mapped text of the items that have numbers, with Z_CENSORED (-1, 0, +1)."""
    read = read_text(events, censored=censored, text_values=text_values, items=numbered.items_)
    read = read[read["NUMBER"].notna().to_numpy(bool)]
    mark = pd.Series(np.int8(0), index=events.index)
    mark.loc[read.index] = read["CENSORED"].to_numpy("int8")
    values = events["VALUENUM"].copy()
    values.loc[read.index] = read["NUMBER"].to_numpy("float64")
    return events.assign(VALUENUM=values, **{CENSORED: mark})


@reads("ITEMID", "VALUE", "VALUENUM", "REJECT")
def read_counts(events: pd.DataFrame, numbered: NumberedItems, *, censored: bool = Options.censored,
                text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> pd.DataFrame:
    """Per item, the rows :func:`read_numbers` turns into numbers: CENSORED and MAPPED (parts add up)."""
    read = read_text(events, censored=censored, text_values=text_values, items=numbered.items_)
    items = events.loc[read.index, "ITEMID"]
    read = read[read["NUMBER"].notna().to_numpy(bool)]
    frame = pd.DataFrame({"CENSORED": (read["CENSORED"] != 0).astype("int64"), "MAPPED": read["WORD"].astype("int64")})
    counts = frame.groupby(items.loc[read.index].to_numpy("int64")).sum()
    return counts.reindex(pd.Index(numbered.items_, dtype="int64", name="ITEMID"), fill_value=0)


def read_findings(counts: pd.DataFrame, *, names: Mapping[int, str] | None = None, max_lines: int = SAMPLE_CAP
                  ) -> list[Finding]:
    """How many text results became numbers, per item: the censored ones and the mapped words."""
    findings = []
    for column, check, what in (("CENSORED", "censored_value", "censored result(s) ('<x', '>x') read as x and "
                                 "marked Z_CENSORED"),
                                ("MAPPED", "mapped_text_value", "word(s) mapped to numbers by [clean] text_values")):
        per_item = counts[column][counts[column] > 0].sort_index().sort_values(ascending=False, kind="stable")
        if len(per_item):
            total = int(per_item.sum())
            findings.append(summary_finding(
                stage=NAME, check=check, table="LABEVENTS", column="VALUE", count=total,
                message=f"{total} {what} in {len(per_item)} item(s): ITEMID "
                        f"{format_items(per_item, names=names)}", items=per_item))
    return findings


def fit_inputs(events: Any, context: Context) -> tuple[Any, tuple, dict]:
    """What the fit reads in flow: every lab row, with the [clean] options."""
    options = context.options
    return events, (), dict(censored=options.censored, text_values=options.text_values)


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: censored and mapped text read as numbers, counted per item."""
    options, numbered = context.options, context.fitted[NAME]
    kwargs = dict(censored=options.censored, text_values=options.text_values)
    names = item_names(context.read.of(LABITEMS))  # the typed D_LABITEMS: clean has not named the items yet

    def report(outcome: Outcome) -> list[Finding]:
        counts, = outcome.counts
        return read_findings(counts, names=names, max_lines=context.max_lines)

    return Plan(context=context, report=report, calls=(Call(read_numbers, (numbered,), kwargs),),
                counts=(Call(read_counts, (numbered,), kwargs),))


def sections(shown: Shown) -> list[str]:
    """The stage's section of the HTML report: the items whose text became numbers, most first."""
    if shown.state is None:
        return []
    counts = shown.state.table()
    counts = counts[(counts["CENSORED"] + counts["MAPPED"]) > 0]
    if counts.empty:
        return []
    counts = counts.assign(TOTAL=counts["CENSORED"] + counts["MAPPED"]).sort_values("TOTAL", ascending=False,
                                                                                   kind="stable")
    listed = counts.head(shown.max_lines)
    rows = [[str(item), shown.names.get(int(item), "-"), page.n(numbers), page.n(censored), page.n(mapped)]
            for item, numbers, censored, mapped in zip(listed.index, listed["NUMBERS"], listed["CENSORED"],
                                                       listed["MAPPED"])]
    more = f"<p class=note>and {len(counts) - len(rows)} more items</p>" if len(counts) > len(rows) else ""
    return ['<section id="text-values"><h2>Lab text read as numbers</h2><p class=note>In items that have numbers: '
            "censored results ('&lt;0.01', '&gt;300') kept as their bound with Z_CENSORED, and the words of "
            "[clean] text_values; counted over every row that passed the raw checks.</p>"
            + page.table(["ITEMID", "item", "rows with a number", "censored", "mapped words"], rows,
                         numeric={2, 3, 4}, sortable=True) + more + "</section>"]


STAGE = Stage(NAME, colour="#aec7e8", plan=plan, options=Options, takes=LabEvents, gives=TextEvents,
              fit=Fit(whole=fit_numbered, partial=count_numbered, combine=add_numbered, finish=numbered_from_counts,
                      inputs=fit_inputs, state=NumberedItems, saved_as="text_values"),
              by_admission=True, filters=False, writes=("VALUENUM", CENSORED), replay=True, sections=sections)
