"""Encode stage: categorical values to integer codes with vocabularies fitted on the training split.

Codes start at 1 and follow frequency (descending), then the value itself, so
they never depend on row order; 0 is reserved for missing values and for values
the training split never saw. The vocabularies are a frozen, JSON-serialisable
object that ``build`` saves and a later run can reuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pandas as pd

from pipeline.reporting.findings import Finding, finding_from_mask, format_items, summary_finding
from pipeline.kernel.options import Section, setting
from pipeline.kernel.stage import Context, Outcome, Plan, Stage
from pipeline.kernel.calls import Call, Fit
from pipeline.kernel.calls import reads
from schemas.encode import EncodedAdmissions, EncodedEvents, EncodedLabItems
from schemas.errors import SAMPLE_CAP
from schemas.guard import guarded
from schemas.raw import ADMISSIONS, ADMISSION_CATEGORICALS, LABITEMS
from schemas.split import SplitEvents

NAME = "encode"
MISSING = 0
# The columns of the lab rows the vocabulary fit reads (it reads no number).
FIT_READS = ("SPLIT", "KIND", "VALUE", "HADM_ID", "ITEMID")


@dataclass(frozen=True)
class Options(Section):
    NAME = "encode"
    min_admissions: int = setting(int, 5, low=1, doc="""
        A categorical value (an admission's ETHNICITY, a lab item's text VALUE) gets a code of its own only when
        at least this many training admissions have it; rarer values get code 0, like unseen ones. Vocabularies
        are saved in stats.json: this keeps values that could single out a patient out of it. A numeric lab item
        seen in fewer training admissions is scaled to z = 0 (scale's rule "rare"): its mean and scale would give
        its values back.""")
    fold_case: bool = setting(bool, True, doc="""
        D_LABITEMS' FLUID and CATEGORY values that differ only in letter case ('BLOOD' and 'Blood', both in the
        MIMIC-III demo) are reported (category_case_variants). true: they share one code, the spelling most items
        use (ties: the first in sort order), so one fluid is one feature. false: each spelling keeps a code of its own.
        The dictionary's case carries no meaning in MIMIC, so folding is the default.""")


@dataclass(frozen=True)
class Vocabularies:
    """Fitted codes: per lab item for categorical VALUEs, per admission column, and for FLUID and CATEGORY.

    ``lab_values_`` holds (ITEMID, VALUE, CODE) rows; the other vocabularies are
    tuples of values whose code is their position + 1.
    """

    lab_values_: tuple[tuple[int, str, int], ...]
    admission_: tuple[tuple[str, tuple[str, ...]], ...]
    fluid_: tuple[str, ...]
    category_: tuple[str, ...]
    fold_case_: bool = Options.fold_case  # FLUID and CATEGORY looked up regardless of letter case

    def lab_table(self) -> pd.DataFrame:
        """(ITEMID, VALUE) -> CODE."""
        return pd.DataFrame(list(self.lab_values_), columns=["ITEMID", "VALUE", "CODE"]).astype(
            {"ITEMID": "int64", "VALUE": "str", "CODE": "int64"})

    def as_json(self) -> dict[str, Any]:
        return {
            "lab_values": [list(row) for row in self.lab_values_],
            "admission": [[column, list(values)] for column, values in self.admission_],
            "fluid": list(self.fluid_),
            "category": list(self.category_),
            "fold_case": self.fold_case_,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Vocabularies":
        return cls(
            lab_values_=tuple((int(item), str(value), int(code)) for item, value, code in data["lab_values"]),
            admission_=tuple((column, tuple(values)) for column, values in data["admission"]),
            fluid_=tuple(data["fluid"]),
            category_=tuple(data["category"]),
            fold_case_=bool(data.get("fold_case", False)),  # a stats.json without the key matched case exactly
        )


def ordered_vocabulary(values: pd.Series, *, min_count: int = 1) -> tuple[str, ...]:
    """Distinct non-null values seen at least ``min_count`` times, most frequent first, ties by value:
    never by row order."""
    counts = values.dropna().astype("str").value_counts().rename_axis("value").reset_index(name="n")
    counts = counts[counts["n"] >= min_count]
    return tuple(counts.sort_values(["n", "value"], ascending=[False, True])["value"])


def case_spellings(values: pd.Series) -> pd.Series:
    """Per distinct value, the spelling its case variants fold to: of the values equal but for letter case, the
    most frequent, ties by sort order (never by row order). Indexed by value."""
    counts = values.dropna().astype("str").value_counts().rename_axis("value").reset_index(name="n")
    counts["key"] = counts["value"].str.casefold()
    counts = counts.sort_values(["key", "n", "value"], ascending=[True, False, True], kind="stable")
    kept = counts.drop_duplicates("key").set_index("key")["value"]
    return pd.Series(kept.reindex(counts["key"]).to_numpy(), index=pd.Index(counts["value"], dtype="str"), dtype="str")


def case_variants(values: pd.Series) -> pd.DataFrame:
    """The values that differ from another only in letter case: VALUE, N (rows) and KEPT (the folded spelling),
    grouped by KEPT (by sort order), most frequent first within a group."""
    spellings = case_spellings(values)
    counts = values.dropna().astype("str").value_counts()
    frame = pd.DataFrame({"VALUE": spellings.index, "N": counts.reindex(spellings.index).to_numpy(),
                          "KEPT": spellings.to_numpy()})
    frame = frame[frame.groupby("KEPT")["VALUE"].transform("size") > 1]
    frame = frame.sort_values(["KEPT", "N", "VALUE"], ascending=[True, False, True], kind="stable")
    return frame.reset_index(drop=True)


def admission_columns(admissions: pd.DataFrame) -> list[str]:
    """The categorical admission columns present, in the catalogue's order."""
    return [column for column in ADMISSION_CATEGORICALS if column in admissions]


def train_lab_values(events: pd.DataFrame) -> pd.DataFrame:
    """The training rows of categorical items that carry a VALUE (their HADM_ID, ITEMID and VALUE): what lab
    vocabularies are fitted on."""
    chosen = (events["SPLIT"] == "train") & (events["KIND"] == "categorical") & events["VALUE"].notna()
    return events.loc[chosen, ["HADM_ID", "ITEMID", "VALUE"]]


@reads(*FIT_READS)
@guarded(stage=NAME, takes=SplitEvents, reads=FIT_READS)
def count_values(events: pd.DataFrame, *args: Any, **kwargs: Any) -> pd.DataFrame:
    """One part's share of the lab vocabularies (all the rows, or those of some admissions): per (ITEMID, VALUE)
    of :func:`train_lab_values`, N (rows) and ADMISSIONS (distinct training admissions). Parts cut by admission
    add up (:func:`add_value_counts`)."""
    return _value_counts(events)


def _value_counts(events: pd.DataFrame) -> pd.DataFrame:
    """:func:`count_values` of rows already guarded."""
    grouped = train_lab_values(events).groupby(["ITEMID", "VALUE"])
    return pd.DataFrame({"N": grouped.size(), "ADMISSIONS": grouped["HADM_ID"].nunique()}).astype("int64")


def add_value_counts(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The counts of all the rows from those of parts that share no admission."""
    return pd.concat(parts).groupby(level=["ITEMID", "VALUE"]).sum()


def vocabularies_from_counts(counts: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                             min_admissions: int = Options.min_admissions,
                             fold_case: bool = Options.fold_case) -> Vocabularies:
    """The vocabularies from the lab values' counts over all the rows (see :func:`fit_vocabularies`)."""
    counts = counts.reset_index()
    counts = counts[counts["ADMISSIONS"] >= min_admissions]
    counts = counts.sort_values(["ITEMID", "N", "VALUE"], ascending=[True, False, True], kind="stable")
    counts["CODE"] = counts.groupby("ITEMID").cumcount() + 1
    lab_values = tuple(zip(counts["ITEMID"].astype("int64").tolist(), counts["VALUE"].astype("str").tolist(),
                           counts["CODE"].astype("int64").tolist()))
    train_admissions = admissions[admissions["SPLIT"] == "train"]  # one row per HADM_ID (CleanAdmissions)
    return Vocabularies(
        lab_values_=lab_values,
        admission_=tuple((column, ordered_vocabulary(train_admissions[column], min_count=min_admissions))
                         for column in admission_columns(admissions)),
        fluid_=ordered_vocabulary(_folded(labitems["FLUID"]) if fold_case else labitems["FLUID"]),
        category_=ordered_vocabulary(_folded(labitems["CATEGORY"]) if fold_case else labitems["CATEGORY"]),
        fold_case_=fold_case,
    )


@guarded(stage=NAME, takes=SplitEvents, reads=FIT_READS)
def fit_vocabularies(events: pd.DataFrame, admissions: pd.DataFrame, labitems: pd.DataFrame, *,
                     min_admissions: int = Options.min_admissions,
                     fold_case: bool = Options.fold_case) -> Vocabularies:
    """Fit on the training split: lab VALUEs of categorical items, admission columns; FLUID/CATEGORY on the dictionary.

    ``events`` and ``admissions`` carry SPLIT. A lab VALUE or admission value enters a vocabulary only when
    at least ``min_admissions`` training admissions have it (rarer ones get code 0, as unseen ones do), so no
    value that could single out a patient is saved. The lab-item dictionary is not patient data, so its FLUID
    and CATEGORY vocabularies cover every item (labitem nodes are the whole dictionary). With ``fold_case``,
    FLUID and CATEGORY values that differ only in letter case share one entry (:func:`case_spellings`).
    Codes follow the counts only, so rows in parts (:func:`count_values` of each) give the same vocabularies.
    """
    return vocabularies_from_counts(add_value_counts([_value_counts(events)]), admissions, labitems,
                                    min_admissions=min_admissions, fold_case=fold_case)


def _folded(values: pd.Series) -> pd.Series:
    """Each value as the spelling its case variants fold to."""
    return values.map(case_spellings(values))


def case_findings(labitems: pd.DataFrame, *, fold_case: bool, max_lines: int = SAMPLE_CAP) -> list[Finding]:
    """D_LABITEMS' FLUID and CATEGORY values that differ only in letter case, per column, naming the variants
    (dictionary metadata, not patient data) and what encoding did with them."""
    findings = []
    for column in ("FLUID", "CATEGORY"):
        variants = case_variants(labitems[column])
        if variants.empty:
            continue
        groups = [" / ".join(f"{value!r} ({n} item{'s' if n != 1 else ''})"
                             for value, n in zip(group["VALUE"], group["N"])) + (f" -> {kept!r}" if fold_case else "")
                  for kept, group in variants.groupby("KEPT", sort=True)]
        listed = "; ".join(groups[:max_lines]) + (f"; and {len(groups) - max_lines} more" if len(groups) > max_lines
                                                  else "")
        done = ("folded into one code each (the most used spelling; [encode] fold_case = true)" if fold_case else
                "coded apart ([encode] fold_case = false)")
        findings.append(summary_finding(
            stage=NAME, check="category_case_variants", table="D_LABITEMS", column=column,
            count=int(variants["N"].sum()),
            message=f"{len(groups)} value(s) spelled in more than one letter case, {done}: {listed}"))
    return findings


def codes(values: pd.Series, vocabulary: tuple[str, ...], *, fold_case: bool = False) -> pd.Series:
    """Code of each value in ``vocabulary`` (position + 1); 0 for missing and unseen values. With ``fold_case``,
    values are matched regardless of letter case (the vocabulary then holds one spelling per value)."""
    keys = pd.Index(vocabulary, dtype="str")
    text = values.astype("str")
    if fold_case:
        keys, text = keys.str.casefold(), text.str.casefold()
    lookup = pd.Series(range(1, len(vocabulary) + 1), index=keys, dtype="int64")
    return text.map(lookup).fillna(MISSING).astype("int64")


@guarded(stage=NAME, takes=SplitEvents, gives=EncodedEvents)
def encode_events(events: pd.DataFrame, vocabularies: Vocabularies) -> pd.DataFrame:
    """CODE for categorical rows (0 = missing/unseen); null for rows that carry a number."""
    table = vocabularies.lab_table()
    categorical = (events["KIND"] == "categorical").to_numpy()
    # Only categorical rows are looked up: numeric rows (most of LABEVENTS) keep a null CODE.
    keyed = pd.MultiIndex.from_frame(events.loc[categorical, ["ITEMID", "VALUE"]].astype({"VALUE": "str"}))
    lookup = pd.Series(table["CODE"].to_numpy(), index=pd.MultiIndex.from_frame(table[["ITEMID", "VALUE"]]))
    code = pd.Series(pd.NA, index=events.index, dtype="Int64")
    code[categorical] = lookup.reindex(keyed).fillna(MISSING).to_numpy("int64")
    return events.assign(CODE=code)


def unseen_lab_values(encoded: pd.DataFrame) -> pd.Series:
    """Rows of categorical items whose VALUE was present but got code 0 (unseen in train)."""
    return (encoded["KIND"] == "categorical") & encoded["VALUE"].notna() & (encoded["CODE"] == MISSING)


@guarded(stage=NAME, gives=EncodedAdmissions)
def encode_admissions(admissions: pd.DataFrame, vocabularies: Vocabularies) -> pd.DataFrame:
    """Admissions (with SPLIT) plus ``<COLUMN>_CODE`` for each categorical column."""
    encoded = admissions.copy()
    for column, vocabulary in vocabularies.admission_:
        encoded[f"{column}_CODE"] = codes(admissions[column], vocabulary)
    return encoded


@guarded(stage=NAME, gives=EncodedLabItems)
def encode_labitems(labitems: pd.DataFrame, vocabularies: Vocabularies) -> pd.DataFrame:
    """Every lab item with FLUID_CODE and CATEGORY_CODE, sorted by ITEMID (the labitem node order)."""
    return labitems.assign(
        FLUID_CODE=codes(labitems["FLUID"], vocabularies.fluid_, fold_case=vocabularies.fold_case_),
        CATEGORY_CODE=codes(labitems["CATEGORY"], vocabularies.category_, fold_case=vocabularies.fold_case_),
    ).sort_values("ITEMID", kind="stable")


def fit_inputs(events: pd.DataFrame, context: Context) -> tuple[pd.DataFrame, tuple, dict]:
    """What :func:`fit_vocabularies` reads in flow: the lab rows, admissions and lab items, the [encode] options."""
    options = context.options
    return (events, (context.table(ADMISSIONS), context.table(LABITEMS)),
            dict(min_admissions=options.min_admissions, fold_case=options.fold_case))


def plan(context: Context) -> Plan:
    """The stage in flow: lab rows, admissions and lab items coded with the fitted vocabularies; letter-case
    variants and values coded 0 are findings."""
    vocabularies, ledger, options = context.fitted[NAME], context.ledger, context.options
    admissions = encode_admissions(context.table(ADMISSIONS), vocabularies)
    labitems = encode_labitems(context.table(LABITEMS), vocabularies)

    def report(outcome: Outcome) -> list[Finding]:
        zero, seen = outcome.picks
        return unseen_findings(zero, seen, context.table(ADMISSIONS), admissions, min_admissions=options.min_admissions,
                               max_lines=context.max_lines, names=ledger.names)

    # Read part by part: the rows coded 0, and the (ITEMID, VALUE) pairs training rows have (never every categorical
    # row: MIMIC-IV has tens of millions).
    return Plan(context=context.with_tables(**{ADMISSIONS: admissions, LABITEMS: labitems}),
                before=tuple(case_findings(context.table(LABITEMS), fold_case=vocabularies.fold_case_,
                                           max_lines=context.max_lines)),
                calls=(Call(encode_events, (vocabularies,)),), picks=(Call(zero_coded_rows), Call(train_pairs)),
                report=report)


@reads("KIND", "VALUE", "CODE", "ITEMID")
def zero_coded_rows(events: pd.DataFrame) -> pd.DataFrame:
    """ITEMID and VALUE of the rows :func:`unseen_lab_values` finds (categorical, a VALUE, code 0)."""
    return events.loc[unseen_lab_values(events).to_numpy(), ["ITEMID", "VALUE"]]


@reads("SPLIT", "KIND", "VALUE", "HADM_ID", "ITEMID")
def train_pairs(events: pd.DataFrame) -> pd.DataFrame:
    """The distinct (ITEMID, VALUE) pairs of :func:`train_lab_values` (each at its first row)."""
    return train_lab_values(events)[["ITEMID", "VALUE"]].drop_duplicates()


def unseen_findings(zero: pd.DataFrame, seen: pd.DataFrame, admissions: pd.DataFrame, encoded: pd.DataFrame, *,
                    min_admissions: int, max_lines: int, names: Mapping[int, str] | None = None) -> list[Finding]:
    """Categorical values that got code 0 (``zero``: their rows' ITEMID and VALUE, index = source line): unseen
    in train (a warning), or too rare there to be coded (a note), as their pair is among the training rows' pairs
    (``seen``) or not."""
    k = min_admissions
    pairs = [zero[["ITEMID", "VALUE"]], seen[["ITEMID", "VALUE"]]]
    zero_pairs, seen_pairs = (pd.MultiIndex.from_frame(frame.astype({"VALUE": "str"})) for frame in pairs)
    in_train = pd.Series(zero_pairs.isin(seen_pairs), index=zero.index)
    lines = max_lines

    def counts(failed: pd.Series) -> pd.Series:  # rows per item, ties by ITEMID
        return zero.loc[failed, "ITEMID"].value_counts().sort_index()

    def items(failed: pd.Series) -> str:
        return "items " + format_items(counts(failed), names=names)

    unseen, rare = ~in_train, in_train
    findings = [
        finding_from_mask(stage=NAME, table="LABEVENTS", check="unseen_category", column="VALUE",
                          failed=unseen, what=f"categorical VALUE unseen in train (code 0), in {items(unseen)}",
                          max_lines=lines, items=counts(unseen)),
        finding_from_mask(stage=NAME, table="LABEVENTS", check="rare_category", column="VALUE",
                          failed=rare, max_lines=lines, items=counts(rare),
                          what=f"categorical VALUE seen in fewer than {k} train admissions (code 0), in {items(rare)}"),
    ]
    train_admissions = admissions[admissions["SPLIT"] == "train"]
    per_check: dict[str, dict[str, int]] = {"unseen_category": {}, "rare_category": {}}
    for column in admission_columns(admissions):
        zero = admissions[column].notna() & (encoded[f"{column}_CODE"] == MISSING)
        rare = zero & admissions[column].isin(train_admissions[column].dropna())
        for check, failed in (("unseen_category", zero & ~rare), ("rare_category", rare)):
            if failed.any():
                per_check[check][column] = int(failed.sum())
    for check, what in (("unseen_category", "unseen in train"),
                        ("rare_category", f"seen in fewer than {k} train admissions")):
        columns = per_check[check]
        if columns:  # one finding for every admission column, the most admissions first
            listed = ", ".join(f"{column} {n}" for column, n in sorted(columns.items(), key=lambda kv: -kv[1]))
            findings.append(summary_finding(
                stage=NAME, check=check, table="ADMISSIONS", column=None, count=sum(columns.values()),
                message=f"values {what} given code 0, in {len(columns)} column(s) (admissions): {listed}"))
    return [f for f in findings if f is not None]


STAGE = Stage(NAME, colour="#9467bd", plan=plan, options=Options, takes=SplitEvents, gives=EncodedEvents,
              fit=Fit(whole=fit_vocabularies, partial=count_values, combine=add_value_counts,
                      finish=vocabularies_from_counts, inputs=fit_inputs, state=Vocabularies, saved_as="vocabularies"),
              by_admission=True, filters=False, writes=("CODE",))
