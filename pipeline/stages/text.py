"""Text stage: censored and coded lab results become numbers, and ordered words ranks, before clean classifies the
items.

A lab item writes some results as text: a result beyond the assay's range as ``<0.01`` or ``GREATER THAN 300``, a
dipstick's ``NEG``, a urine sediment's ``FEW`` or ``MANY``. Each item's kind is decided here, from all its
inpatient results (a mergeable fit over the rows clean keeps as inpatient, the rows clean's own kinds are learned
from), and its text read accordingly:

- *numeric*: it has a positive number (a VALUENUM other than 0, or a censored bound other than 0), or no text at
  all. ``<x``, ``<=x``, ``>x``, ``>=x`` (and ``LESS THAN x``, ``GREATER THAN x``) become VALUENUM x, with the
  censoring mark Z_CENSORED = -1 (the result is at most x) or +1 (at least x), an edge feature (0 on every other
  row); a word of the declared ``[clean.text_values]`` map (``NEG = 0``) becomes its number; what is still text
  goes on as text, and clean quarantines it;
- *ordinal*: not numeric, and every result is a word of one ordered scale of ``[clean.ordinal]`` (or the number 0,
  the scale's lowest level), at least one above its lowest level: each word becomes its rank in the scale (0 for
  the lowest level, ``NEG``, then 1, 2, ...), which the scale stage z-scores like a number;
- *categorical*: the rest. Its results stay text, a number among them too (VALUENUM null): an item never becomes
  numeric on its negatives alone (``NONE`` read as 0 beside ``FEW`` and ``MANY`` left as text).

An item whose reading keeps less than ``[clean] min_kept_share`` of its results is named (``biased_item``). VALUE
keeps the text as it was read. Nothing here reads COMMENTS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.reporting import page
from pipeline.reporting.findings import LISTED, Finding, format_items, item_names, summary_finding
from pipeline.kernel.options import Section, require, setting, table, typed
from pipeline.kernel.calls import reads
from pipeline.kernel.stage import Context, Outcome, Plan, Shown, Stage
from pipeline.kernel.calls import Call, Fit
from schemas.errors import SAMPLE_CAP
from schemas.guard import guarded, refuse_non_finite
from schemas.raw import ADMISSIONS, DEFAULT_VALUENUM_ABS_BOUND, LABITEMS, LabEvents
from schemas.text import CENSORED, TextEvents

NAME = "text"
# A censored result: the sign (or its words), then a plain decimal number and nothing else.
CENSORING = re.compile(r"^\s*(<=|>=|<|>|LESS THAN|GREATER THAN)\s*([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*$",
                       re.IGNORECASE)
DIRECTION = {"<": -1, "<=": -1, "LESS THAN": -1, ">": 1, ">=": 1, "GREATER THAN": 1}
# The columns of the lab rows the fit reads.
FIT_READS = ("HADM_ID", "ITEMID", "VALUE", "VALUENUM", "REJECT")
# [clean.text_values] as declared: the words of every build's map.
DEFAULT_TEXT_VALUES = MappingProxyType({"NEG": 0.0, "NEGATIVE": 0.0, "NONE": 0.0})
# [clean.ordinal] as declared: each scale's levels from the lowest (an absence) up, a level one word or its synonyms.
DEFAULT_ORDINAL = MappingProxyType({
    "amount": (("NEG", "NEGATIVE", "NONE"), ("TRACE", "TR"), ("FEW", "RARE", "OCC"), "MOD", "MANY"),
    "plus": (("NEG", "NEGATIVE", "NONE"), ("TRACE", "TR"), "1+", "2+", "3+", "4+"),
})
KINDS = ("numeric", "ordinal", "categorical")  # what the fit decides of an item


@dataclass(frozen=True)
class Options(Section):
    NAME = "clean"
    censored: bool = setting(bool, True, doc="""
        In a lab item that has numbers, a result written '<x', '<=x', '>x', '>=x', 'LESS THAN x' or 'GREATER THAN x'
        (beyond the assay's range: '<0.01' troponin, '>300' glucose) becomes x, marked Z_CENSORED = -1 (at most x)
        or +1 (at least x) in edge_attr; false leaves it as text, which clean quarantines (mixed_item_text).""")
    min_kept_share: float = setting(float, 0.5, low=0, high=1, doc="""
        An item's kind is decided from all its inpatient results: numeric when it has a number other than 0 (or no
        text at all), ordinal when its results are the words of one scale of [clean.ordinal], else categorical. A
        numeric item keeps its numbers, its censored results and the words of [clean.text_values]; its other text
        is quarantined (mixed_item_text). An item that keeps less than this share of its results is named, with
        its share (biased_item, a warning): what it keeps is a biased sample of what it measured.""")
    text_values: Mapping[str, float] = table(default=DEFAULT_TEXT_VALUES, doc="""
        Words that stand for a number in a numeric lab item, matched whatever their case and a trailing period;
        what is still text is quarantined. These map the dipstick's absence ("NEG": 634 inpatient rows of the
        MIMIC-III demo's numeric items) to 0; a file's words are added to them (or give one another number). 'TR'
        (trace) means a different amount in each item and is left to you, e.g. "TR" = 0.5""")
    ordinal: Mapping[str, tuple] = table(default=DEFAULT_ORDINAL, doc="""
        Ordered scales of words, each a list of levels from the lowest (an absence) up, a level one word or a list
        of synonyms, matched whatever their case and a trailing period. An item that is not numeric and whose
        results are all words of one scale (or 0, its lowest level), one at least above the lowest, is ordinal:
        each result becomes its rank (0, 1, 2, ...), z-scored like a number. The first scale in this order that
        holds them all is the item's; a file's scales are added to these (or replace one of the same name), e.g.
        dipstick = ["NEG", ["TRACE", "TR"], "SM", "MOD", ["LG", "LGE"]]""")

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Options":
        """The section, its ``[clean.text_values]`` table of word = number and its ``[clean.ordinal]`` table of
        name = levels (the defaults' when not given)."""
        values = values if isinstance(values, dict) else {}
        words = values.get("text_values", {})
        require(isinstance(words, dict), "[clean.text_values] must be a table of word = number")
        for word, number in words.items():
            require(word.strip() != "" and isinstance(number, (int, float)) and not isinstance(number, bool)
                    and np.isfinite(number) and abs(number) <= DEFAULT_VALUENUM_ABS_BOUND,
                    f"[clean.text_values] {word!r} must be a finite number of at most "
                    f"{DEFAULT_VALUENUM_ABS_BOUND:g} in magnitude, got {number!r}")
        scales = values.get("ordinal", {})
        require(isinstance(scales, dict), "[clean.ordinal] must be a table of name = levels")
        return cls(**typed(cls, values, cls.NAME, skip=("text_values", "ordinal")),
                   text_values=MappingProxyType({_word(w): float(v) for w, v in words.items()}), ordinal=scales)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Each scale as its levels of words, however it was written (a level one word, or a list of synonyms).
        object.__setattr__(self, "ordinal", MappingProxyType({name: _levels(name, levels)
                                                              for name, levels in self.ordinal.items()}))


def _levels(name: str, levels: Any) -> tuple[tuple[str, ...], ...]:
    """A scale of ``[clean.ordinal]`` as levels of words (each a tuple, the words as :func:`_word` matches them),
    or ConfigError naming the scale and what is wrong."""
    where = f"[clean.ordinal] {name!r}"
    require(isinstance(levels, (list, tuple)) and len(levels) >= 2,
            f"{where} must be a list of at least two levels (a word, or a list of synonyms), got {levels!r:.60}")
    scale = []
    for level in levels:
        synonyms = [level] if isinstance(level, str) else level
        require(isinstance(synonyms, (list, tuple)) and len(synonyms) > 0
                and all(isinstance(word, str) and _word(word) for word in synonyms),
                f"{where}: a level must be a word or a list of words, got {level!r:.60}")
        scale.append(tuple(_word(word) for word in synonyms))
    words = [word for level in scale for word in level]
    twice = sorted({word for word in words if words.count(word) > 1})
    require(not twice, f"{where} names {', '.join(map(repr, twice))} more than once")
    return tuple(scale)


def ranks(levels: Sequence[Any]) -> dict[str, int]:
    """Each word of a scale (as declared, or as :func:`_levels` gives it) with its level's rank: 0 the lowest."""
    return {_word(word): rank for rank, level in enumerate(levels)
            for word in ([level] if isinstance(level, str) else level)}


def _word(text: str) -> str:
    return text.strip().rstrip(".").strip().upper()


def _words(values: pd.Series) -> pd.Series:
    """:func:`_word` of every value, vectorized."""
    return values.str.strip().str.rstrip(".").str.strip().str.upper()


def inpatient(events: pd.DataFrame, admissions: pd.DataFrame | None = None,
              labitems: pd.DataFrame | None = None) -> pd.Series:
    """The rows clean keeps as inpatient: they passed the raw checks and have an HADM_ID, of an admission among
    ``admissions`` and an item among ``labitems`` (those that passed their raw checks; None: any)."""
    kept = events["HADM_ID"].notna() & events["ITEMID"].notna()
    if "REJECT" in events:
        kept &= events["REJECT"].isna()
    if admissions is not None:
        kept &= events["HADM_ID"].isin(admissions["HADM_ID"])
    if labitems is not None:
        kept &= events["ITEMID"].isin(labitems["ITEMID"])
    return kept.astype(bool)


@dataclass(frozen=True)
class NumberedItems:
    """Per lab item whose results become numbers or ranks, or that has a number (sorted by ITEMID), over all its
    inpatient results: its kind (:data:`KINDS`), the scale of an ordinal item ("" for the others), and its rows with
    a result, with a number, with censored text and with a mapped word read (numeric items), and with a word read
    as its rank (ordinal items); ``scales_``, the levels of each scale an ordinal item reads by."""

    items_: tuple[int, ...]
    numbers_: tuple[int, ...]
    censored_: tuple[int, ...]
    mapped_: tuple[int, ...]
    kinds_: tuple[str, ...] | None = None  # None: every item numeric
    scale_: tuple[str, ...] | None = None
    results_: tuple[int, ...] | None = None  # None: the rows it reads (numbers, censored and mapped)
    ranked_: tuple[int, ...] | None = None
    scales_: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.kinds_ if self.kinds_ is not None else ("numeric",) * len(self.items_)

    def items_of(self, kind: str) -> tuple[int, ...]:
        """The items of one kind, in order."""
        return tuple(item for item, of in zip(self.items_, self.kinds) if of == kind)

    def table(self) -> pd.DataFrame:
        """Per item (ITEMID): KIND, SCALE, RESULTS, NUMBERS, CENSORED, MAPPED, RANKED and KEPT, the results its
        reading keeps (a numeric item's numbers, censored results and mapped words; all of another's)."""
        n = len(self.items_)
        frame = pd.DataFrame({
            "KIND": self.kinds, "SCALE": self.scale_ if self.scale_ is not None else ("",) * n,
            "NUMBERS": self.numbers_, "CENSORED": self.censored_, "MAPPED": self.mapped_,
            "RANKED": self.ranked_ if self.ranked_ is not None else (0,) * n,
        }, index=pd.Index(self.items_, name="ITEMID", dtype="int64"))
        read = frame["NUMBERS"] + frame["CENSORED"] + frame["MAPPED"]
        frame.insert(2, "RESULTS", list(self.results_) if self.results_ is not None else read.tolist())
        frame["RESULTS"] = frame["RESULTS"].astype("int64")
        frame["KEPT"] = read.where(frame["KIND"] == "numeric", frame["RESULTS"]).astype("int64")
        return frame

    def as_json(self) -> dict[str, Any]:
        table = self.table()
        return {"items": list(self.items_), "kinds": list(self.kinds), "scale": table["SCALE"].tolist(),
                "results": table["RESULTS"].tolist(), "numbers": list(self.numbers_),
                "censored": list(self.censored_), "mapped": list(self.mapped_), "ranked": table["RANKED"].tolist(),
                "scales": {name: [list(level) for level in levels] for name, levels in self.scales_}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NumberedItems":
        """The state as :meth:`as_json` saved it; a file without kinds is a fit that read every item it lists as
        numeric (and its results as the rows it read)."""
        def ints(key: str) -> tuple[int, ...] | None:
            return tuple(int(n) for n in data[key]) if key in data else None

        return cls(items_=ints("items"), numbers_=ints("numbers"), censored_=ints("censored"),
                   mapped_=ints("mapped"), kinds_=tuple(str(k) for k in data["kinds"]) if "kinds" in data else None,
                   scale_=tuple(str(s) for s in data["scale"]) if "scale" in data else None,
                   results_=ints("results"), ranked_=ints("ranked"),
                   scales_=tuple((str(name), tuple(tuple(str(w) for w in level) for level in levels))
                                 for name, levels in data.get("scales", {}).items()))


def read_text(events: pd.DataFrame, *, censored: bool = Options.censored,
              text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES,
              items: Sequence[int] | None = None) -> pd.DataFrame:
    """Per row that passed the raw checks and has text but no number (of ``items`` only, when given): the number
    its text stands for (NaN: none) and its censoring (-1, +1; 0 for a mapped word), as NUMBER and CENSORED,
    indexed like those rows."""
    values = events.loc[_text_rows(events, items), "VALUE"].astype("str")
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


def _text_rows(events: pd.DataFrame, items: Sequence[int] | None = None) -> np.ndarray:
    """The rows that passed the raw checks with text and no number (of ``items`` only, when given)."""
    text = events["VALUE"].notna() & events["VALUENUM"].isna() & events["ITEMID"].notna()
    if items is not None:
        text &= events["ITEMID"].isin(items)
    if "REJECT" in events:
        text &= events["REJECT"].isna()
    return text.to_numpy(bool)


def read_ranks(events: pd.DataFrame, numbered: NumberedItems) -> pd.Series:
    """Per text row of an ordinal item (:func:`read_text`'s rows): its word's rank in the item's scale (NaN: a word
    the scale does not hold), indexed like those rows."""
    scales = {item: scale for item, kind, scale in zip(numbered.items_, numbered.kinds, numbered.scale_ or ())
              if kind == "ordinal"}
    rows = _text_rows(events, list(scales)) if scales else np.zeros(len(events), dtype=bool)
    words = _words(events.loc[rows, "VALUE"].astype("str"))
    rank = pd.Series(np.nan, index=words.index, dtype="float64")
    if not len(words):
        return rank
    scale = events.loc[rows, "ITEMID"].astype("int64").map(scales)
    for name, levels in numbered.scales_:
        of = (scale == name).to_numpy(bool)
        rank[of] = words[of].map(ranks(levels)).astype("float64")
    return rank


@reads(*FIT_READS)
@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def count_numbered(events: pd.DataFrame, admissions: pd.DataFrame | None = None,
                   labitems: pd.DataFrame | None = None, *, censored: bool = Options.censored,
                   text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES,
                   ordinal: Mapping[str, Sequence[Any]] = DEFAULT_ORDINAL) -> pd.DataFrame:
    """One part's share of :class:`NumberedItems`: per ITEMID, of its inpatient rows (:func:`inpatient`), rows
    with a result, with a number, with a positive number (not 0, or a censored bound not 0), with the number 0,
    with censored text and with a mapped word, and per scale of ``ordinal``, rows with one of its words and rows
    with one above its lowest level. Parts add up (:func:`add_numbered`). A VALUENUM that is inf or -inf is refused
    (``fit_finite``); a null one is a row without a number."""
    return _count_numbered(events, admissions, labitems, censored=censored, text_values=text_values,
                           ordinal=ordinal, fit="text.count_numbered")


def _count_numbered(events: pd.DataFrame, admissions: pd.DataFrame | None, labitems: pd.DataFrame | None, *,
                    censored: bool, text_values: Mapping[str, float], ordinal: Mapping[str, Sequence[Any]],
                    fit: str) -> pd.DataFrame:
    """:func:`count_numbered` of rows already guarded; ``fit`` names the function called, for its refusal."""
    events = events[inpatient(events, admissions, labitems).to_numpy(bool)]
    refuse_non_finite(events, "VALUENUM", stage=NAME, fit=fit,
                      needs="a VALUENUM that is finite or null in each inpatient row")
    read = read_text(events, censored=censored, text_values=text_values)
    values = events["VALUENUM"]
    bound = read["NUMBER"].where(read["CENSORED"] != 0).reindex(events.index)
    counts = {"RESULTS": values.notna() | events["VALUE"].notna(), "NUMBERS": values.notna(),
              "POSITIVE": (values.notna() & (values != 0)) | (bound.notna() & (bound != 0)), "ZEROS": values == 0,
              "CENSORED": bound.notna(), "MAPPED": read["WORD"].reindex(events.index, fill_value=False)}
    words = _words(events.loc[read.index, "VALUE"].astype("str"))
    for name, levels in ordinal.items():
        rank = words.map(ranks(levels)).reindex(events.index)
        counts[f"IN {name}"], counts[f"ABOVE {name}"] = rank.notna(), rank > 0
    frame = pd.DataFrame({column: mask.to_numpy(bool).astype("int64") for column, mask in counts.items()},
                         index=events.index)
    return frame.groupby(events["ITEMID"].to_numpy("int64")).sum().rename_axis("ITEMID")


def add_numbered(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The counts of all the rows from those of each part."""
    return pd.concat(list(parts)).groupby(level="ITEMID").sum()


def numbered_from_counts(counts: pd.DataFrame, *args: Any,
                         ordinal: Mapping[str, Sequence[Any]] = DEFAULT_ORDINAL, **kwargs: Any) -> NumberedItems:
    """Each item's kind from its counts (:func:`count_numbered`), sorted by ITEMID: numeric when it has a positive
    number or no text; else ordinal when one scale of ``ordinal`` (the first, in its order) holds every result
    but its zeros, one at least above its lowest level; else categorical. Listed: the items that have a number or
    are ordinal."""
    counts = counts.sort_index()
    text = counts["RESULTS"] > counts["NUMBERS"]
    numeric = (counts["NUMBERS"] > 0) & ((counts["POSITIVE"] > 0) | ~text)
    scale = pd.Series("", index=counts.index, dtype="str")
    for name in reversed(list(ordinal)):  # the first scale that holds an item's results wins
        holds = (counts[f"IN {name}"] + counts["ZEROS"] == counts["RESULTS"]) & (counts[f"ABOVE {name}"] > 0)
        scale = scale.mask(holds & ~numeric, name)
    kind = pd.Series(np.select([numeric, scale != ""], ["numeric", "ordinal"], default="categorical"),
                     index=counts.index)
    listed = (counts["NUMBERS"] > 0) | (kind == "ordinal")
    counts, kind, scale = counts[listed], kind[listed], scale[listed]
    ranked = pd.Series(0, index=counts.index, dtype="int64")
    for name in ordinal:
        ranked = ranked.mask(scale == name, counts[f"IN {name}"] + counts["ZEROS"])
    read = kind == "numeric"
    used = [name for name in ordinal if (scale == name).any()]
    return NumberedItems(
        items_=tuple(counts.index.astype("int64").tolist()), numbers_=tuple(counts["NUMBERS"].tolist()),
        censored_=tuple(counts["CENSORED"].where(read, 0).tolist()),
        mapped_=tuple(counts["MAPPED"].where(read, 0).tolist()), kinds_=tuple(kind.tolist()),
        scale_=tuple(scale.tolist()), results_=tuple(counts["RESULTS"].tolist()), ranked_=tuple(ranked.tolist()),
        scales_=tuple((name, _levels(name, ordinal[name])) for name in used))


@guarded(stage=NAME, takes=LabEvents, reads=FIT_READS)
def fit_numbered(events: pd.DataFrame, admissions: pd.DataFrame | None = None,
                 labitems: pd.DataFrame | None = None, *, censored: bool = Options.censored,
                 text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES,
                 ordinal: Mapping[str, Sequence[Any]] = DEFAULT_ORDINAL) -> NumberedItems:
    """:class:`NumberedItems` of all the rows: :func:`count_numbered` of one part."""
    counts = _count_numbered(events, admissions, labitems, censored=censored, text_values=text_values,
                             ordinal=ordinal, fit="text.fit_numbered")
    return numbered_from_counts(add_numbered([counts]), ordinal=ordinal)


@guarded(stage=NAME, takes=LabEvents, gives=TextEvents)
def read_numbers(events: pd.DataFrame, numbered: NumberedItems, *, censored: bool = Options.censored,
                 text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> pd.DataFrame:
    """VALUENUM for the censored and mapped text of the numeric items, with Z_CENSORED (-1, 0, +1); for the words of
    the ordinal items, their ranks; none for the numbers of the categorical items (their results are text)."""
    read = read_text(events, censored=censored, text_values=text_values, items=numbered.items_of("numeric"))
    read = read[read["NUMBER"].notna().to_numpy(bool)]
    ranked = read_ranks(events, numbered).dropna()
    mark = pd.Series(np.int8(0), index=events.index)
    mark.loc[read.index] = read["CENSORED"].to_numpy("int8")
    values = events["VALUENUM"].copy()
    values.loc[read.index] = read["NUMBER"].to_numpy("float64")
    values.loc[ranked.index] = ranked.to_numpy("float64")
    categorical = numbered.items_of("categorical")
    if categorical:
        values = values.mask(events["ITEMID"].isin(categorical).to_numpy(bool))
    return events.assign(VALUENUM=values, **{CENSORED: mark})


@reads("ITEMID", "VALUE", "VALUENUM", "REJECT")
def read_counts(events: pd.DataFrame, numbered: NumberedItems, *, censored: bool = Options.censored,
                text_values: Mapping[str, float] = DEFAULT_TEXT_VALUES) -> pd.DataFrame:
    """Per item, the rows :func:`read_numbers` turns into numbers: CENSORED and MAPPED, and RANKED (parts add up)."""
    read = read_text(events, censored=censored, text_values=text_values, items=numbered.items_of("numeric"))
    read = read[read["NUMBER"].notna().to_numpy(bool)]
    ranked = read_ranks(events, numbered).dropna()
    frame = pd.DataFrame({"CENSORED": (read["CENSORED"] != 0).astype("int64"), "MAPPED": read["WORD"].astype("int64"),
                          "RANKED": pd.Series(0, index=read.index, dtype="int64")})
    frame = pd.concat([frame, pd.DataFrame({"CENSORED": 0, "MAPPED": 0, "RANKED": 1}, index=ranked.index,
                                           dtype="int64")])
    counts = frame.groupby(events.loc[frame.index, "ITEMID"].to_numpy("int64")).sum()
    return counts.reindex(pd.Index(numbered.items_, dtype="int64", name="ITEMID"), fill_value=0)


def read_findings(counts: pd.DataFrame, *, names: Mapping[int, str] | None = None, max_lines: int = SAMPLE_CAP
                  ) -> list[Finding]:
    """How many text results became numbers, per item: the censored ones, the mapped words and the ranked words."""
    findings = []
    for column, check, what in (("CENSORED", "censored_value", "censored result(s) ('<x', '>x') read as x and "
                                 "marked Z_CENSORED"),
                                ("MAPPED", "mapped_text_value", "word(s) mapped to numbers by [clean] text_values"),
                                ("RANKED", "ranked_value", "word(s) of ordinal items read as their rank in "
                                 "their [clean.ordinal] scale")):
        if column not in counts:
            continue
        per_item = counts[column][counts[column] > 0].sort_index().sort_values(ascending=False, kind="stable")
        if len(per_item):
            total = int(per_item.sum())
            findings.append(summary_finding(
                stage=NAME, check=check, table="LABEVENTS", column="VALUE", count=total,
                message=f"{total} {what} in {len(per_item)} item(s): ITEMID "
                        f"{format_items(per_item, names=names)}", items=per_item))
    return findings


def kept_findings(numbered: NumberedItems, *, min_kept_share: float = Options.min_kept_share,
                  names: Mapping[int, str] | None = None) -> list[Finding]:
    """The items whose reading keeps less than ``min_kept_share`` of their inpatient results (``biased_item``),
    the least kept first, each with what it keeps (its share, and how many of its kept rows a declared word or a
    censored bound gave)."""
    table = numbered.table()
    share = table["KEPT"] / table["RESULTS"].where(table["RESULTS"] > 0)
    below = (share < min_kept_share).to_numpy(bool)
    if not below.any():
        return []
    low = table[below].assign(SHARE=share[below])
    low = low.sort_index().sort_values("SHARE", kind="stable")

    def kept(item: int) -> str:
        row = low.loc[item]
        read = [f"{int(row[column]):,} {what}" for column, what in (("MAPPED", "mapped"), ("CENSORED", "censored"))
                if row[column]]
        return (f"keeps {int(row['KEPT']):,} of {int(row['RESULTS']):,} results ({_percent(row['SHARE'])})"
                + (f", {' and '.join(read)}" if read else ""))

    listed = [f"{item} {names[item]}" if names and item in names else str(item) for item in low.index[:LISTED]]
    shown = "; ".join(f"{name} {kept(item)}" for name, item in zip(listed, low.index))
    more = len(low) - LISTED
    return [summary_finding(
        stage=NAME, check="biased_item", table="LABEVENTS", column="VALUE", count=len(low),
        message=f"{len(low)} numeric item(s) keep less than {_percent(min_kept_share)} of their inpatient results "
                f"([clean] min_kept_share): ITEMID {shown}" + (f" +{more} more in the JSON report" if more > 0 else ""),
        items=list(low.index))]


def _percent(share: float) -> str:
    """``0.0174`` as ``'1.74%'``, ``0.5`` as ``'50%'``: three significant digits."""
    return f"{float(share) * 100:.3g}%"


def fit_inputs(events: Any, context: Context) -> tuple[Any, tuple, dict]:
    """What the fit reads in flow: every lab row, the admissions and lab items that passed the raw checks (the
    inpatient rows are those of both; a table not read holds them all), with the [clean] options."""
    options, read = context.options, context.read
    passed = [None if table is None else table.loc[table["REJECT"].isna(), [key]]
              for table, key in ((read.of(ADMISSIONS), "HADM_ID"), (read.of(LABITEMS), "ITEMID"))]
    return events, tuple(passed), dict(censored=options.censored, text_values=options.text_values,
                                       ordinal=options.ordinal)


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: censored and mapped text read as numbers, ordered words as
    ranks, counted per item; the items that keep little of their results named before the rows are read."""
    options, numbered = context.options, context.fitted[NAME]
    kwargs = dict(censored=options.censored, text_values=options.text_values)
    names = item_names(context.read.of(LABITEMS))  # the typed D_LABITEMS: clean has not named the items yet

    def report(outcome: Outcome) -> list[Finding]:
        counts, = outcome.counts
        return read_findings(counts, names=names, max_lines=context.max_lines)

    return Plan(context=context, report=report, calls=(Call(read_numbers, (numbered,), kwargs),),
                before=tuple(kept_findings(numbered, min_kept_share=options.min_kept_share, names=names)),
                counts=(Call(read_counts, (numbered,), kwargs),))


def sections(shown: Shown) -> list[str]:
    """The stage's section of the HTML report: the items whose text became numbers or ranks, most first."""
    if shown.state is None:
        return []
    counts = shown.state.table()
    counts = counts[(counts["CENSORED"] + counts["MAPPED"] + counts["RANKED"]) > 0]
    if counts.empty:
        return []
    counts = counts.assign(TOTAL=counts["CENSORED"] + counts["MAPPED"] + counts["RANKED"]).sort_values(
        "TOTAL", ascending=False, kind="stable")
    listed = counts.head(shown.max_lines)
    rows = [[str(item), shown.names.get(int(item), "-"), kind + (f" ({scale})" if scale else ""), page.n(results),
             page.n(numbers), page.n(censored), page.n(mapped), page.n(ranked)]
            for item, kind, scale, results, numbers, censored, mapped, ranked in zip(
                listed.index, listed["KIND"], listed["SCALE"], listed["RESULTS"], listed["NUMBERS"],
                listed["CENSORED"], listed["MAPPED"], listed["RANKED"])]
    more = f"<p class=note>and {len(counts) - len(rows)} more items</p>" if len(counts) > len(rows) else ""
    return ['<section id="text-values"><h2>Lab text read as numbers</h2><p class=note>In numeric items: censored '
            "results ('&lt;0.01', '&gt;300') kept as their bound with Z_CENSORED, and the words of [clean] "
            "text_values; in ordinal items, the words of their [clean.ordinal] scale as their rank; counted over "
            "every inpatient result.</p>"
            + page.table(["ITEMID", "item", "kind", "results", "with a number", "censored", "mapped words",
                          "ranked words"], rows, numeric={3, 4, 5, 6, 7}, sortable=True) + more + "</section>"]


STAGE = Stage(NAME, colour="#aec7e8", plan=plan, options=Options, takes=LabEvents, gives=TextEvents,
              fit=Fit(whole=fit_numbered, partial=count_numbered, combine=add_numbered, finish=numbered_from_counts,
                      inputs=fit_inputs, state=NumberedItems, saved_as="text_values"),
              by_admission=True, filters=False, writes=("VALUENUM", CENSORED), replay=True, sections=sections)
