"""Scale stage: per-ITEMID z-scores of VALUENUM with stats fitted on the training split.

Each item is scaled by the first rule of a declared chain that fits it, on its
training rows only (``RULES``):

- ``normal``: its normal (unflagged) training rows after ``clip_sigma`` clipping,
  when it has at least ``min_rows`` of them and their std is above ``eps`` x |mean|;
- ``all``: all its training rows, clipped the same way, when their std is above
  ``eps`` x |mean| (too few normal rows, none, or normal rows without spread);
- ``all_unclipped``: all its training rows unclipped, when clipping left no spread;
- ``constant``: every training value is equal (within ``eps`` relative, after the
  log transform of 'log' items). Its value c gets z = 0; another value x gets the
  relative difference (x - c) / |c| (x - c when c = 0), clipped to
  ``constant_bound``: never a raw-unit difference, never beyond the bound.

The std is computed in two centred passes (never from sums of squares, which go
negative for an item with mean 1e6 and std 1e-3), not ``std + 1e-7``, which turns
noise into z-scores of 1e7. The fit reads the training values counted
(:func:`fit_rows`): the counts of parts add up (:func:`add_fit_rows`) to those of
all the rows, so rows held in parts give the same stats, bit for bit; its passes
(:func:`fit_sums`) then run on the counted values.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.findings import Finding, finding_from_mask, format_items, summary_finding
from pipeline.options import POSITIVE, Section, require, setting, typed
from pipeline.stage import Context, Outcome, Plan, Stage
from pipeline.work import Call, Fit
from pipeline.shared import reads
from schemas.encode import EncodedEvents
from schemas.errors import StageError
from schemas.guard import guarded
from schemas.scale import ScaledEvents

if TYPE_CHECKING:
    from pipeline.engines.base import Engine

NAME = "scale"
# The fallback chain, in order; an item is scaled by the first rule that fits it.
RULES = ("normal", "all", "all_unclipped", "constant")
# The two row sets each pass of the fit sums over: an item's normal training rows, and all of them.
BASES = ("NORMAL", "ALL")
# How per-part columns combine in add_sums (every other column is a sum).
_COMBINE = {"MIN": "min", "MAX": "max"}
# Optional per-row reference ranges of LABEVENTS (MIMIC-IV's ref_range_lower / ref_range_upper).
RANGE_COLUMNS = ("REF_RANGE_LOWER", "REF_RANGE_UPPER")
POLICIES = ("none", "clip", "log")  # per item: [scale.policy]
MAX_Z_BOUND = 1e15  # far past any z-score a real value has; the HTML report's log-scale charts draw up to it


@dataclass(frozen=True)
class Options(Section):
    NAME = "scale"
    TOML = """
# Each item is scaled by the first rule of a chain, fitted on its training rows only (stats.json records
# the rule and the rows per item): its normal (unflagged) rows, clip_sigma-clipped, when it has at least
# min_rows of them and their std is above eps * |mean|; else all its rows, clipped the same way
# (fallback_item); else all its rows unclipped; else it is constant (constant_item).
# An item is constant only when its training values are all equal: max - min <= eps * max(|min|, |max|).
# eps sits well above float64 rounding noise (~1e-16) and well below any real measurement's spread: an
# item of 1e6 +- 1e-3 (relative spread 1e-9) is still scaled, by its centred two-pass std. At most 0.5.
eps = 1e-12
# Values further than this many std from the mean of the item's fitted rows are left out of its stats.
clip_sigma = 3.0
# The fewest normal training rows an item is scaled on. A std from n rows is off by about
# 1 / sqrt(2 (n - 1)): 24% at 10 rows, 71% at 2; and below 11 rows no value can lie beyond 3 sigma, so
# clipping does nothing. With fewer normal rows, the item is scaled on all its training rows: one normal
# NTproBNP row among 28 spread over 12,860 pg/mL must not set its scale.
min_rows = 10
# A constant item's value c gets z = 0; any other value x (in val or test) gets the relative difference
# (x - c) / |c| ((x - c) in raw units when c = 0) clipped to +-constant_bound, so it never turns raw-unit
# differences into huge z-scores (check constant_item_value names these rows). Keep it well below
# warn_bound, so such a value never passes for a heavy tail.
constant_bound = 10.0
# |z| above warn_bound is a warning naming the items and the rule that scaled each (a heavy tail on an
# item fitted on its normal rows is real: AST reaches z ~ 1,100); above error_bound it is an error:
# beyond any real measurement, the mark of a failed std guard. Both at most 1e15.
warn_bound = 100.0
error_bound = 1e6
# Where LABEVENTS has reference ranges (MIMIC-IV's ref_range_lower / ref_range_upper), each row above
# warn_bound is a real extreme when its value lies more than range_widths range widths beyond the nearer
# bound, else a suspect scale. A normal range spans about 4 std, so a value within 10 widths of it that
# still has |z| > 100 means a scale at least 2.5 times too small.
range_widths = 10.0

[scale.policy]
# Per ITEMID: "none" (default), "clip" (|z| clipped to warn_bound) or "log" (log1p before scaling).
# "50878" = "log"
"""
    eps: float = setting(float, low=0, high=0.5, above=True)
    clip_sigma: float = setting(float, **POSITIVE)
    warn_bound: float = setting(float, low=0, high=MAX_Z_BOUND, above=True)
    error_bound: float = setting(float, low=0, high=MAX_Z_BOUND, above=True)
    min_rows: int = setting(int, 10, low=2)  # one row has no spread
    constant_bound: float = setting(float, 10.0, **POSITIVE)
    range_widths: float = setting(float, 10.0, **POSITIVE)
    policy: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Options":
        """The section, its ``[scale.policy]`` table keyed by ITEMID."""
        policy = values.get("policy", {}) if isinstance(values, dict) else {}
        require(isinstance(policy, dict), "[scale.policy] must be a table of ITEMID = policy")
        for item in policy:
            require(re.fullmatch(r"[0-9]{1,18}", item) is not None and int(item) > 0,
                    f"[scale.policy] keys must be ITEMIDs (positive integers below 10^18), got {item!r}")
        return cls(**typed(cls, values, cls.NAME, skip=("policy",)),
                   policy=MappingProxyType({int(k): v for k, v in policy.items()}))

    def relations(self) -> None:
        require(self.warn_bound <= self.error_bound,
                f"[scale] need warn_bound <= error_bound, got {self.warn_bound!r} and {self.error_bound!r}")
        for item, policy in self.policy.items():
            require(policy in POLICIES,
                    f"[scale.policy] {item} must be one of {', '.join(POLICIES)}, got {policy!r}")


@dataclass(frozen=True)
class ZScoreStats:
    """Fitted per-item mean and scale (z = (x - mean_) / scale_), aligned on ``items_``.

    ``rule_`` names the rule of :data:`RULES` that scaled each item, ``count_`` the rows it was fitted on and
    ``normal_count_`` the item's normal training rows. For a constant item, ``mean_`` is its value and
    ``scale_`` |value| (1 when 0), and its z is clipped to ``constant_bound``.
    """

    items_: tuple[int, ...]
    mean_: tuple[float, ...]
    scale_: tuple[float, ...]
    count_: tuple[int, ...]
    rule_: tuple[str, ...]
    normal_count_: tuple[int, ...]
    log_items_: tuple[int, ...]
    eps: float
    min_rows: int = 10
    constant_bound: float = 10.0

    @property
    def constant_items_(self) -> tuple[int, ...]:
        """Items whose training values are all equal."""
        return tuple(i for i, r in zip(self.items_, self.rule_) if r == "constant")

    @property
    def fallback_items_(self) -> tuple[int, ...]:
        """Items scaled on all their training rows (rule ``all`` or ``all_unclipped``)."""
        return tuple(i for i, r in zip(self.items_, self.rule_) if r in ("all", "all_unclipped"))

    def table(self) -> pd.DataFrame:
        """mean, scale, count, rule and normal count per ITEMID."""
        return pd.DataFrame({"mean": self.mean_, "scale": self.scale_, "count": self.count_, "rule": self.rule_,
                             "normal_count": self.normal_count_},
                            index=pd.Index(self.items_, name="ITEMID", dtype="int64"))

    def as_json(self) -> dict[str, Any]:
        return {
            "items": list(self.items_), "mean": list(self.mean_), "scale": list(self.scale_),
            "count": list(self.count_), "rule": list(self.rule_), "normal_count": list(self.normal_count_),
            "constant_items": list(self.constant_items_), "fallback_items": list(self.fallback_items_),
            "log_items": list(self.log_items_), "eps": self.eps, "min_rows": self.min_rows,
            "constant_bound": self.constant_bound,
        }

    def __post_init__(self) -> None:
        sizes = {len(self.items_), len(self.mean_), len(self.scale_), len(self.count_), len(self.rule_),
                 len(self.normal_count_)}
        if len(sizes) != 1:
            raise ValueError(f"ZScoreStats: items, mean, scale, count, rule and normal_count differ in length "
                             f"({sorted(sizes)})")
        unknown = sorted(set(self.rule_) - set(RULES))
        if unknown:
            raise ValueError(f"ZScoreStats: unknown rule(s) {unknown}; the rules are {', '.join(RULES)}")
        bad = [item for item, m, s in zip(self.items_, self.mean_, self.scale_)
               if not (np.isfinite(m) and np.isfinite(s) and s > 0)]
        if bad:
            raise ValueError(f"ZScoreStats: non-finite mean or non-positive scale for ITEMID {bad[:10]}; "
                             "refit the stats instead of editing them")
        if not (np.isfinite(self.constant_bound) and self.constant_bound > 0):
            raise ValueError(f"ZScoreStats: constant_bound must be finite and > 0, got {self.constant_bound!r}")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ZScoreStats":
        return cls(
            items_=tuple(int(i) for i in data["items"]), mean_=tuple(float(m) for m in data["mean"]),
            scale_=tuple(float(s) for s in data["scale"]), count_=tuple(int(c) for c in data["count"]),
            rule_=tuple(str(r) for r in data["rule"]), normal_count_=tuple(int(c) for c in data["normal_count"]),
            log_items_=tuple(int(i) for i in data["log_items"]), eps=float(data["eps"]),
            min_rows=int(data["min_rows"]), constant_bound=float(data["constant_bound"]),
        )


def item_sums(values: pd.Series, items: pd.Series, centre: pd.Series | None = None,
              shift: pd.Series | None = None, weights: pd.Series | None = None) -> pd.DataFrame:
    """Per item, N (values that are not NaN) and SUM of the values, of their differences from a per-item
    ``shift``, or of their squared deviations from a per-item ``centre``: sums of parts of the rows add up to the
    sums of all of them. With ``weights``, each value stands for that many rows."""
    if centre is not None:
        deviation = values - items.map(centre)
        values = deviation * deviation
    elif shift is not None:
        values = values - items.map(shift)
    if weights is not None:
        counted = weights.where(values.notna(), 0)
        return pd.DataFrame({"N": counted.groupby(items).sum(), "SUM": (values * weights).groupby(items).sum()})
    grouped = values.groupby(items)
    return pd.DataFrame({"N": grouped.count(), "SUM": grouped.sum()})


def add_sums(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The per-item sums of all the rows from the sums of each part (in the given order, for repeatable rounding):
    MIN and MAX columns combine by min and max, every other column by sum."""
    parts = list(parts)
    how = {column: _COMBINE.get(column, "sum") for column in parts[0].columns}
    return pd.concat(parts).groupby(level=0).agg(how)


def centred_stats(values: pd.Series, items: pd.Series) -> pd.DataFrame:
    """Per item: mean, two-pass centred sample std (NaN for one observation) and count."""
    return _centred(lambda centre: item_sums(values, items, centre))


def _centred(sums: Callable[[pd.Series | None], pd.DataFrame]) -> pd.DataFrame:
    """Mean, centred sample std and count from two passes of ``sums``: plain, then about the mean."""
    totals = sums(None)
    count = totals["N"]
    mean = totals["SUM"] / count
    squares = sums(mean)["SUM"].reindex(mean.index)
    std = np.sqrt(squares / (count - 1)).where(count > 1)
    return pd.DataFrame({"mean": mean, "std": std, "count": count})


def _policy_items(policy: Mapping[int, str], name: str) -> list[int]:
    return sorted(item for item, p in policy.items() if p == name)


def _transformed(events: pd.DataFrame, log_items: list[int], *, strict: bool = True) -> pd.Series:
    """VALUENUM, with log1p applied to the items whose policy is 'log'.

    ``strict``: a value at or below -1 of such an item is a StageError; otherwise it gives NaN or -inf.
    """
    values = events["VALUENUM"].astype("float64")
    logged = events["ITEMID"].isin(log_items) & values.notna()
    domain = logged & (values <= -1)
    if strict and domain.any():
        raise StageError(
            stage=NAME, side="input", check="log_domain", column="VALUENUM", count=int(domain.sum()),
            failure_cases=pd.DataFrame({"line": events.index[domain]}), table="LABEVENTS",
            detail="ITEMID " + ", ".join(map(str, sorted(events.loc[domain, "ITEMID"].unique())[:10])),
            advice="log1p needs values above -1; set this item's [scale.policy] to 'clip' or 'none'",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return values.where(~logged, np.log1p(values.where(logged, 0.0)))


def fit_zscore(events: pd.DataFrame, *, eps: float = 1e-12, clip_sigma: float = 3.0, min_rows: int = 10,
               constant_bound: float = 10.0, policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """Fit per-item stats on the training rows that carry a number (``events`` has SPLIT and FLAG)."""
    return fit_from_rows(add_fit_rows([fit_rows(events, policy=policy)]), eps=eps, clip_sigma=clip_sigma,
                         min_rows=min_rows, constant_bound=constant_bound, policy=policy)


def fit_by_passes(keep: Callable[[Callable[[pd.DataFrame], pd.DataFrame]], Any],
                  each: Callable[[Any, Callable[[pd.DataFrame], pd.DataFrame]], Sequence[pd.DataFrame]], *,
                  eps: float = 1e-12, clip_sigma: float = 3.0, min_rows: int = 10, constant_bound: float = 10.0,
                  policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """The fit of rows that may lie in parts: ``keep(step)`` applies ``step`` to every part and keeps what it
    gives where the part is; ``each(kept, step)`` gives ``step`` of every kept part. Each part's
    :func:`fit_rows` (its distinct values, counted) come back and add up (:func:`add_fit_rows`) to the very
    table one part gives, so one part or many give the same stats, bit for bit."""
    kept = keep(functools.partial(fit_rows, policy=policy))
    return fit_from_rows(add_fit_rows(each(kept, _as_is)), eps=eps, clip_sigma=clip_sigma,
                         min_rows=min_rows, constant_bound=constant_bound, policy=policy)


def _as_is(rows: pd.DataFrame) -> pd.DataFrame:
    """A part's fit rows as they were kept (a module function: a worker process is sent it by name)."""
    return rows


def fit_from_rows(rows: pd.DataFrame, *, eps: float = 1e-12, clip_sigma: float = 3.0, min_rows: int = 10,
                  constant_bound: float = 10.0, policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """The stats from the counted training values of all the rows (:func:`add_fit_rows`)."""
    return fit_from_sums(functools.partial(fit_sums, rows, clip_sigma=clip_sigma), eps=eps, min_rows=min_rows,
                         constant_bound=constant_bound, policy=policy)


@reads("SPLIT", "VALUENUM", "ITEMID", "FLAG")
def fit_rows(events: pd.DataFrame, *args: Any, policy: Mapping[int, str] | None = None,
             **kwargs: Any) -> pd.DataFrame:
    """What the fit reads of ``events`` (all of them, or the rows of some admissions): the training rows that
    carry a number, as their distinct ITEMID, X (VALUENUM, log1p for 'log' items) and NORMAL (no FLAG), with
    COUNT (rows), sorted by ITEMID, X and NORMAL: it never depends on the input's row order, and the tables of
    parts add up (:func:`add_fit_rows`). Lab values repeat, so it is much smaller than the rows.
    """
    chosen = ((events["SPLIT"] == "train") & events["VALUENUM"].notna()).to_numpy()
    # Only the three columns the fit reads are gathered.
    train = events.loc[chosen, ["ITEMID", "VALUENUM"]]
    values = _transformed(train, _policy_items(dict(policy or {}), "log"))
    rows = pd.DataFrame({"ITEMID": train["ITEMID"].to_numpy("int64"), "X": values.to_numpy("float64"),
                         "NORMAL": events["FLAG"].isna().to_numpy()[chosen]})
    return _counted(rows.assign(COUNT=np.int64(1)))


def add_fit_rows(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The counted training values of all the rows from those of each part."""
    return _counted(pd.concat(list(parts)))


def _counted(rows: pd.DataFrame) -> pd.DataFrame:
    counted = rows.groupby(["ITEMID", "X", "NORMAL"], sort=True, dropna=False)["COUNT"].sum()
    return counted.astype("int64").reset_index()


def fit_sums(rows: pd.DataFrame, known: pd.DataFrame | None = None, *, clip_sigma: float = 3.0) -> pd.DataFrame:
    """One pass of the fit over ``rows`` (from :func:`fit_rows`): per-item sums that :func:`add_sums` combines
    over parts of the rows.

    Without ``known``: N_NORMAL (the item's normal rows), MIN and MAX (of X over all its rows). With ``known``
    (indexed by ITEMID), for each basis b of :data:`BASES` (the normal rows, all rows): N_b and SUM_b of
    :func:`item_sums` of the basis rows' X, about CENTRE_b when ``known`` has it; with MEAN_b and STD_b, only
    the basis rows within ``clip_sigma`` STD_b of MEAN_b (all of them where STD_b is not positive).
    """
    items, values = rows["ITEMID"], rows["X"]
    weights = rows["COUNT"] if "COUNT" in rows else None
    if known is None:
        grouped = values.groupby(items)
        normal = rows["NORMAL"].astype("int64") * (1 if weights is None else weights)
        return pd.DataFrame({"N_NORMAL": normal.groupby(items).sum(), "MIN": grouped.min(), "MAX": grouped.max()})
    columns = []
    for basis in BASES:  # two fixed row sets, each summed over all items at once
        chosen = rows["NORMAL"].to_numpy(bool, copy=True) if basis == "NORMAL" else np.ones(len(rows), dtype=bool)
        if f"STD_{basis}" in known:
            mean, std = items.map(known[f"MEAN_{basis}"]), items.map(known[f"STD_{basis}"])
            chosen = chosen & (((values - mean).abs() <= clip_sigma * std) | ~(std > 0)).to_numpy(bool)
        centre = known[f"CENTRE_{basis}"] if f"CENTRE_{basis}" in known else None
        shift = known[f"SHIFT_{basis}"] if f"SHIFT_{basis}" in known else None
        columns.append(item_sums(values[chosen], items[chosen], centre, shift,
                                 None if weights is None else weights[chosen]).add_suffix(f"_{basis}"))
    return pd.concat(columns, axis=1)


def _centred_bases(sums: Callable[[pd.DataFrame | None], pd.DataFrame], known: pd.DataFrame,
                   shift: Mapping[str, pd.Series]) -> dict[str, pd.DataFrame]:
    """Per basis: mean, centred sample std and count of the rows ``known`` picks, from two passes of ``sums``.

    The mean is ``shift`` plus the mean difference from it: with a shift near the values (the same however the
    rows are cut into parts), the rounding of the sums over parts stays far below the mean's own, so one part or
    many give the same mean (an item of 1e6 +- 1e-3 included)."""
    shift = {b: shift[b].reindex(known.index).fillna(0.0) for b in BASES}
    totals = sums(known.assign(**{f"SHIFT_{b}": shift[b] for b in BASES})).reindex(known.index)
    count = {b: totals[f"N_{b}"].fillna(0).astype("int64") for b in BASES}
    mean = {b: shift[b] + totals[f"SUM_{b}"].fillna(0.0) / count[b] for b in BASES}  # NaN for an empty basis
    squares = sums(known.assign(**{f"CENTRE_{b}": mean[b] for b in BASES})).reindex(known.index)
    return {b: pd.DataFrame({"mean": mean[b], "std": np.sqrt(squares[f"SUM_{b}"] / (count[b] - 1)).where(count[b] > 1),
                             "count": count[b]}) for b in BASES}


def fit_from_sums(sums: Callable[[pd.DataFrame | None], pd.DataFrame], *, eps: float = 1e-12, min_rows: int = 10,
                  constant_bound: float = 10.0, policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """The stats from ``sums(known)``: :func:`fit_sums` of every training row, in one part or added over many.

    Five passes: counts and ranges; per basis, the mean and centred std (two passes), which set the
    ``clip_sigma`` window; the mean and centred std of the rows inside it (two passes). Each item then takes
    the first rule of :data:`RULES` that fits it.
    """
    first = sums(None)
    index = first.index
    low, high = first["MIN"], first["MAX"]
    middle = low + (high - low) / 2  # of every row's X: the same in one part or many
    unclipped = _centred_bases(sums, pd.DataFrame(index=index), {b: middle for b in BASES})
    window = pd.DataFrame({f"{what}_{b}": unclipped[b][column] for b in BASES
                           for what, column in (("MEAN", "mean"), ("STD", "std"))}, index=index)
    clipped = _centred_bases(sums, window, {b: unclipped[b]["mean"] for b in BASES})
    constant = ~((high - low) > eps * np.maximum(low.abs(), high.abs()))
    candidates = {"normal": clipped["NORMAL"], "all": clipped["ALL"], "all_unclipped": unclipped["ALL"]}
    fits = {
        "normal": (first["N_NORMAL"] >= min_rows) & _spread(clipped["NORMAL"], eps),
        "all": _spread(clipped["ALL"], eps),
        "all_unclipped": _spread(unclipped["ALL"], 0.0),  # values differ: any finite positive std
    }
    rules = list(fits)
    # An item's values that differ at float64's resolution only (the std underflows) count as constant too.
    rule = pd.Series(np.select([~constant & fits[r] for r in rules], rules, default="constant"), index=index)
    value = low.where(low != 0, 0.0)  # the constant value (-0.0 read as 0)
    mean = pd.Series(np.select([rule == r for r in rules], [candidates[r]["mean"] for r in rules], default=value),
                     index=index)
    scale = pd.Series(np.select([rule == r for r in rules], [candidates[r]["std"] for r in rules],
                                default=value.abs().where(value != 0, 1.0)), index=index)
    count = pd.Series(np.select([rule == r for r in rules], [candidates[r]["count"] for r in rules],
                                default=unclipped["ALL"]["count"]), index=index)
    return ZScoreStats(
        items_=tuple(int(i) for i in index), mean_=tuple(float(m) for m in mean),
        scale_=tuple(float(s) for s in scale), count_=tuple(int(c) for c in count),
        rule_=tuple(str(r) for r in rule), normal_count_=tuple(int(n) for n in first["N_NORMAL"]),
        log_items_=tuple(_policy_items(dict(policy or {}), "log")), eps=float(eps), min_rows=int(min_rows),
        constant_bound=float(constant_bound),
    )


def _spread(stats: pd.DataFrame, eps: float) -> pd.Series:
    """Whether a fitted set's std is finite and above ``eps`` times its |mean| (so it can scale the item)."""
    return np.isfinite(stats["std"]) & np.isfinite(stats["mean"]) & (stats["std"] > eps * stats["mean"].abs())


def zscores(events: pd.DataFrame, stats: ZScoreStats, *, policy: Mapping[int, str] | None = None,
            warn_bound: float = 100.0, strict: bool = True) -> pd.Series:
    """The z of each row with a number (NaN elsewhere), from ``events``' ITEMID and VALUENUM: train stats;
    items unseen in train get 0; constant items are clipped at the stats' ``constant_bound`` and 'clip' items
    at ``warn_bound``. Nothing is checked but, when ``strict``, the log policy's domain: :func:`apply_zscore`
    guards the result."""
    values = _transformed(events, list(stats.log_items_), strict=strict)
    table = stats.table()
    mean, scale = events["ITEMID"].map(table["mean"]), events["ITEMID"].map(table["scale"])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = ((values - mean) / scale).where(mean.notna(), 0.0)
    constant = events["ITEMID"].isin(stats.constant_items_)
    z = z.where(~constant, z.clip(-stats.constant_bound, stats.constant_bound))
    clipped = events["ITEMID"].isin(_policy_items(dict(policy or {}), "clip"))
    return z.where(~clipped, z.clip(-warn_bound, warn_bound)).where(values.notna())


@guarded(stage=NAME, takes=EncodedEvents, gives=ScaledEvents)
def apply_zscore(events: pd.DataFrame, stats: ZScoreStats, *, policy: Mapping[int, str] | None = None,
                 warn_bound: float = 100.0, error_bound: float = 1e6) -> pd.DataFrame:
    """Z for every row with a number: train stats; items unseen in train get 0; constant items' z is bounded;
    'clip' items are clipped."""
    z = zscores(events, stats, policy=policy, warn_bound=warn_bound)
    number = events["VALUENUM"].notna()
    nonfinite = number & pd.Series(~np.isfinite(z.to_numpy("float64", na_value=np.nan)), index=z.index)
    _raise_if(nonfinite, events, "z_finite",
              "z-score that is inf or NaN", "Check the item's mean and scale in stats.json")
    _raise_if(z.abs() > error_bound, events, "z_error_bound", f"|z| above the error bound {error_bound:g}",
              "Beyond any real measurement: the mark of a failed std guard or a unit error")
    return events.assign(Z=z.astype("float64"))


def _raise_if(failed: pd.Series, events: pd.DataFrame, check: str, what: str, advice: str) -> None:
    failed = failed.fillna(False).astype(bool)
    if not failed.any():
        return
    items = events.loc[failed, "ITEMID"].value_counts().sort_index()
    listed = ", ".join(f"{item} ({n})" for item, n in items.head(10).items())
    raise StageError(
        stage=NAME, side="output", check=check, column="Z", count=int(failed.sum()),
        failure_cases=pd.DataFrame({"line": events.index[failed]}), table="LABEVENTS",
        detail=f"{what} for ITEMID {listed}", advice=advice,
    )


def reference_ranges(labevents: Any, lines: pd.Index | None = None, engine: Engine | None = None
                     ) -> pd.DataFrame | None:
    """The typed raw LABEVENTS' REF_RANGE_LOWER and REF_RANGE_UPPER (index = line), or None without them; with
    ``lines``, only those rows (read on the ``engine`` when LABEVENTS is held in its parts)."""
    if labevents is None or not set(RANGE_COLUMNS) <= set(labevents.columns):
        return None
    if lines is None:
        return labevents[list(RANGE_COLUMNS)]
    if engine is None:
        return _at_lines(labevents, lines)[list(RANGE_COLUMNS)]
    return engine.rows(labevents, _at_lines, lines, columns=list(RANGE_COLUMNS))


def _at_lines(frame: pd.DataFrame, lines: pd.Index) -> pd.DataFrame:
    return frame[frame.index.isin(lines)]


def range_classes(values: pd.Series, ranges: pd.DataFrame, *, range_widths: float) -> pd.Series:
    """Each row's value against its own reference range (``ranges`` indexed like ``values``): 'real extreme'
    when it lies more than ``range_widths`` range widths beyond the nearer bound, 'suspect scale' when it lies
    within that (or inside the range), 'no range' without a usable range.

    The width is upper - lower; with one bound (or lower = upper), the bound's magnitude.
    """
    lower = ranges["REF_RANGE_LOWER"].reindex(values.index).astype("float64")
    upper = ranges["REF_RANGE_UPPER"].reindex(values.index).astype("float64")
    width = (upper - lower).where(upper > lower)
    width = width.fillna(np.fmax(lower.abs(), upper.abs()).where(lambda w: w > 0))
    beyond = pd.Series(np.fmax(lower - values, values - upper), index=values.index)
    usable = width.notna() & beyond.notna() & values.notna()
    classes = np.where(beyond > range_widths * width, "real extreme", "suspect scale")
    return pd.Series(np.where(usable, classes, "no range"), index=values.index)


def scale_findings(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float, max_lines: int = 20,
                   ranges: pd.DataFrame | None = None, range_widths: float = 10.0,
                   names: Mapping[int, str] | None = None) -> list[Finding]:
    """Constant, fallback and unseen items, values of constant items other than their one value, and |z| above
    the warning bound, named by ITEMID (with ``names`` from :func:`pipeline.report.item_names`, at most
    ``max_lines`` of them) and the rule that scaled each item; with ``ranges`` (REF_RANGE_LOWER and
    REF_RANGE_UPPER by line), the rows above the bound are counted as real extremes or suspect scales."""
    findings = []
    unseen, beyond, off_constant = _named(scaled, stats, warn_bound=warn_bound)
    table = stats.table()

    def items_of(mask: pd.Series, why: Callable[[int], str] | None = None) -> str:
        counts = scaled.loc[mask, "ITEMID"].value_counts().sort_index()
        return format_items(counts, names=names, limit=max_lines, why=why)

    constant = stats.constant_items_
    if constant:
        # The most training rows first (ties by ITEMID): an item constant over many rows matters more than one row.
        counts = table.loc[sorted(constant), "count"].sort_values(ascending=False, kind="stable")
        listed = format_items(counts, names=names, limit=max_lines, unit="train row")
        findings.append(summary_finding(
            stage=NAME, check="constant_item", table="LABEVENTS", column="VALUENUM", count=len(constant),
            message=f"{len(constant)} item(s) whose training values are all equal: ITEMID {listed}"))
    fallback = stats.fallback_items_
    if fallback:
        reasons = table.loc[list(fallback)].assign(WHY=[_fallback_reason(table, i, stats.min_rows) for i in fallback])
        groups = "; ".join(f"{why}: ITEMID " + format_items(group["count"], names=names, limit=max_lines,
                                                            unit="fitted row")
                           for why, group in reasons.groupby("WHY", sort=True))
        findings.append(summary_finding(
            stage=NAME, check="fallback_item", table="LABEVENTS", column="VALUENUM", count=len(fallback),
            message=f"{len(fallback)} item(s) scaled on all their training rows ([scale] min_rows "
                    f"{stats.min_rows}): {groups}"))
    findings.append(finding_from_mask(stage=NAME, table="LABEVENTS", check="unseen_item", column="ITEMID",
                                      failed=unseen, what=f"numeric items unseen in train: ITEMID {items_of(unseen)}",
                                      max_lines=max_lines))
    findings.append(finding_from_mask(
        stage=NAME, table="LABEVENTS", check="constant_item_value", column="VALUENUM", failed=off_constant,
        what=f"a value other than their item's one training value (|z| at most {stats.constant_bound:g}): "
             f"ITEMID {items_of(off_constant)}", max_lines=max_lines))
    against = ""
    if ranges is not None and beyond.any():
        classes = range_classes(scaled.loc[beyond, "VALUENUM"], ranges, range_widths=range_widths)
        counts = classes.value_counts()
        suspect = scaled.loc[classes.index[classes == "suspect scale"], "ITEMID"].value_counts().sort_index()
        against = (f"; against each row's own reference range: {counts.get('real extreme', 0)} real extreme(s) (more "
                   f"than {range_widths:g} range widths beyond the nearer bound), {counts.get('suspect scale', 0)} "
                   f"suspect scale(s) (within {range_widths:g} widths: the item's scale is likely too small"
                   + (f", ITEMID {format_items(suspect, names=names, limit=max_lines)}" if len(suspect) else "") + f"), {counts.get('no range', 0)} without a range")
    findings.append(finding_from_mask(
        stage=NAME, table="LABEVENTS", check="z_warn_bound", column="Z", failed=beyond, max_lines=max_lines,
        what=f"|z| > {warn_bound:g}: ITEMID {items_of(beyond, lambda item: _cause(table, item, stats.min_rows))}"
             f"{against}"))
    return [f for f in findings if f is not None]


def _rows(n: int, what: str = "row") -> str:
    return f"{int(n)} {what}{'s' if int(n) != 1 else ''}"


def _fallback_reason(table: pd.DataFrame, item: int, min_rows: int) -> str:
    """Why an item was scaled on all its training rows."""
    normal = int(table.loc[item, "normal_count"])
    if normal == 0:
        why = "no normal rows"
    elif normal < min_rows:
        why = f"only {_rows(normal, 'normal row')}"
    else:
        why = "normal rows without spread"
    return why + (" and clipping left no spread (unclipped)" if table.loc[item, "rule"] == "all_unclipped" else "")


def _cause(table: pd.DataFrame, item: int, min_rows: int) -> str:
    """What a |z| above the warning bound means for an item, from the rule that scaled it."""
    rule, count = table.loc[item, "rule"], int(table.loc[item, "count"])
    if rule == "normal":
        return f"heavy tail on an item fitted on {_rows(count, 'normal row')}: real; 'clip' or 'log' bounds it"
    if rule == "constant":
        return "constant item"
    return (f"scaled on all its training rows ({count} fitted) because {_fallback_reason(table, item, min_rows)}: "
            "relative to the spread of the abnormal values, which is real")


@reads("VALUENUM", "ITEMID", "Z")
def reported_rows(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> pd.DataFrame:
    """The rows :func:`scale_findings` names (numeric items unseen in train, values of constant items other than
    their own, |z| above ``warn_bound``) and the columns it reads: its findings from these rows, in their order,
    are its findings from all the rows."""
    unseen, beyond, off_constant = _named(scaled, stats, warn_bound=warn_bound)
    return scaled.loc[unseen | beyond | off_constant, ["ITEMID", "VALUENUM", "Z"]]


def _named(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Rows of numeric items unseen in train, rows with |z| above ``warn_bound``, and rows of constant items whose
    value is not the item's one training value (z is 0 exactly on it)."""
    unseen = scaled["VALUENUM"].notna() & ~scaled["ITEMID"].isin(stats.items_)
    off_constant = scaled["ITEMID"].isin(stats.constant_items_) & scaled["Z"].notna() & (scaled["Z"] != 0)
    return unseen, scaled["Z"].abs() > warn_bound, off_constant


def fit_inputs(events: Any, context: Context) -> tuple[Any, tuple, dict]:
    """What the fit reads in flow: every lab row (on the engine's parts: each part's :func:`fit_rows`), [scale] options."""
    options = context.options
    return events, (), dict(eps=options.eps, clip_sigma=options.clip_sigma, min_rows=options.min_rows,
                            constant_bound=options.constant_bound, policy=options.policy)


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: z with the fitted stats; constant, fallback and unseen
    items and large |z| are findings, read from the rows they name."""
    options, stats = context.options, context.fitted[NAME]

    def report(outcome: Outcome) -> list[Finding]:
        reported, = outcome.picks
        return scale_findings(reported, stats, warn_bound=options.warn_bound, max_lines=context.max_lines,
                              ranges=reference_ranges(context.tables.labevents, reported.index, context.engine),
                              range_widths=options.range_widths, names=context.ledger.names)

    return Plan(context=context, report=report,
                calls=(Call(apply_zscore, (stats,), dict(policy=options.policy, warn_bound=options.warn_bound,
                                                         error_bound=options.error_bound)),),
                picks=(Call(reported_rows, (stats,), dict(warn_bound=options.warn_bound)),))


STAGE = Stage(NAME, colour="#ff7f0e", plan=plan, options=Options, takes=EncodedEvents, gives=ScaledEvents,
              fit=Fit(whole=fit_zscore, partial=fit_rows, combine=add_fit_rows, finish=fit_from_rows,
                      inputs=fit_inputs, state=ZScoreStats, saved_as="scale", early=True),
              by_admission=True, filters=False, writes=("Z",))
