"""The scale stage's fitted state (:class:`ZScoreStats`) and its fit: per-item mean and scale by the first rule of
the chain that fits each item, from two centred passes over the training values counted (rows in parts give the same
stats, bit for bit)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.kernel.calls import reads
from pipeline.stages.encode import Options as EncodeOptions
from pipeline.stages.scale.options import NAME, POLICIES, RULES, TRANSFORMS, Options, policy_of, rows_with
from schemas.errors import StageError
from schemas.guard import guarded, refuse_non_finite
from schemas.split import SplitEvents

# The two row sets each pass of the fit sums over: an item's normal training rows, and all of them.
BASES = ("NORMAL", "ALL")
# The columns of the lab rows the fit reads (KIND: which rows must carry a number).
FIT_READS = ("SPLIT", "VALUENUM", "ITEMID", "FLAG", "HADM_ID", "KIND")


@dataclass(frozen=True)


class ZScoreStats:
    """Fitted per-item mean and scale (z = (x - mean_) / scale_), aligned on ``items_``.

    ``rule_`` names the rule of :data:`RULES` that scaled each item, ``count_`` the rows it was fitted on and
    ``normal_count_`` the item's normal training rows. For a constant item, ``mean_`` is its value and
    ``scale_`` |value| (1 when 0), and its z is clipped to ``constant_bound``. A rare item (seen in fewer than
    ``min_admissions`` training admissions) keeps nothing of its values: mean 0, scale 1, no transform; its z is 0.
    """

    items_: tuple[int, ...]
    mean_: tuple[float, ...]
    scale_: tuple[float, ...]
    count_: tuple[int, ...]
    rule_: tuple[str, ...]
    normal_count_: tuple[int, ...]
    eps: float
    min_rows: int = Options.min_rows
    constant_bound: float = Options.constant_bound
    transform_: tuple[str, ...] | None = None  # per item, of TRANSFORMS (None: identity for every item)
    policy_: tuple[str, ...] | None = None  # per item, its [scale.policy] (None: "none" for every item)
    bound: float = Options.bound  # [scale] bound of the items whose policy is one of BOUNDED (inf: "none")
    min_admissions: int = EncodeOptions.min_admissions  # an item seen in fewer training admissions is rare

    @property
    def transforms(self) -> tuple[str, ...]:
        return self.transform_ if self.transform_ is not None else ("identity",) * len(self.items_)

    @property
    def policies(self) -> tuple[str, ...]:
        return self.policy_ if self.policy_ is not None else ("none",) * len(self.items_)

    @property
    def log_items_(self) -> tuple[int, ...]:
        """Items scaled on log1p of their values ('log' policy)."""
        return tuple(i for i, t in zip(self.items_, self.transforms) if t == "log1p")

    def items_where(self, values: tuple[str, ...], wanted: tuple[str, ...]) -> tuple[int, ...]:
        return tuple(i for i, v in zip(self.items_, values) if v in wanted)

    @property
    def constant_items_(self) -> tuple[int, ...]:
        """Items whose training values are all equal."""
        return tuple(i for i, r in zip(self.items_, self.rule_) if r == "constant")

    @property
    def rare_items_(self) -> tuple[int, ...]:
        """Items seen in fewer than ``min_admissions`` training admissions: z = 0, nothing of their values kept."""
        return tuple(i for i, r in zip(self.items_, self.rule_) if r == "rare")

    @property
    def fallback_items_(self) -> tuple[int, ...]:
        """Items scaled on all their training rows (rule ``all`` or ``all_unclipped``)."""
        return tuple(i for i, r in zip(self.items_, self.rule_) if r in ("all", "all_unclipped"))

    def transformed(self, events: pd.DataFrame) -> pd.Series:
        """Each row's VALUENUM through its item's fitted transform (``identity``, ``log1p``, ``asinh``): the value
        its z is computed from, ``(value - mean) / scale``; NaN (or -inf) where log1p is undefined."""
        return _transformed(events, *row_transforms(events["ITEMID"].astype("int64"), self), strict=False)

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
            "rare_items": list(self.rare_items_), "min_admissions": self.min_admissions,
            "log_items": list(self.log_items_), "transform": list(self.transforms), "policy": list(self.policies),
            "bound": self.bound if math.isfinite(self.bound) else None, "eps": self.eps, "min_rows": self.min_rows,
            "constant_bound": self.constant_bound,
        }

    def __post_init__(self) -> None:
        sizes = {len(self.items_), len(self.mean_), len(self.scale_), len(self.count_), len(self.rule_),
                 len(self.normal_count_), len(self.transforms), len(self.policies)}
        if len(sizes) != 1:
            raise ValueError(f"ZScoreStats: items, mean, scale, count, rule, normal_count, transform and policy differ "
                             f"in length "
                             f"({sorted(sizes)})")
        unknown = sorted(set(self.rule_) - set(RULES))
        if unknown:
            raise ValueError(f"ZScoreStats: unknown rule(s) {unknown}; the rules are {', '.join(RULES)}")
        unknown = sorted(set(self.transforms) - set(TRANSFORMS)) + sorted(set(self.policies) - set(POLICIES))
        if unknown:
            raise ValueError(f"ZScoreStats: unknown transform(s) or policies {unknown}; the transforms are "
                             f"{', '.join(TRANSFORMS)}, the policies {', '.join(POLICIES)}")
        if not self.bound > 0:
            raise ValueError(f"ZScoreStats: bound must be > 0 (inf: none), got {self.bound!r}")
        bad = [item for item, m, s in zip(self.items_, self.mean_, self.scale_)
               if not (np.isfinite(m) and np.isfinite(s) and s > 0)]
        if bad:
            raise ValueError(f"ZScoreStats: non-finite mean or non-positive scale for ITEMID {bad[:10]}. "
                             "fit_zscore gives neither (it refuses rows whose numbers are not finite), so these stats "
                             "were made or changed by hand: fit them on finite rows")
        if not (np.isfinite(self.constant_bound) and self.constant_bound > 0):
            raise ValueError(f"ZScoreStats: constant_bound must be finite and > 0, got {self.constant_bound!r}")
        if self.min_admissions < 1:
            raise ValueError(f"ZScoreStats: min_admissions must be >= 1, got {self.min_admissions!r}")
        kept = [item for item, r, m, s, t in zip(self.items_, self.rule_, self.mean_, self.scale_, self.transforms)
                if r == "rare" and (m, s, t) != (0.0, 1.0, "identity")]
        if kept:
            raise ValueError(f"ZScoreStats: rare ITEMID {kept[:10]} must keep nothing of their values (mean 0, "
                             "scale 1, identity); refit the stats instead of editing them")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ZScoreStats":
        items = tuple(int(i) for i in data["items"])
        logged = {int(i) for i in data.get("log_items", ())}
        transforms = data.get("transform") or ["log1p" if i in logged else "identity" for i in items]
        bound = data.get("bound")
        return cls(
            items_=items, mean_=tuple(float(m) for m in data["mean"]),
            scale_=tuple(float(s) for s in data["scale"]), count_=tuple(int(c) for c in data["count"]),
            rule_=tuple(str(r) for r in data["rule"]), normal_count_=tuple(int(c) for c in data["normal_count"]),
            transform_=tuple(str(t) for t in transforms),
            policy_=tuple(str(p) for p in data["policy"]) if "policy" in data else None,
            bound=math.inf if bound is None else float(bound), eps=float(data["eps"]),
            min_rows=int(data["min_rows"]), constant_bound=float(data["constant_bound"]),
            # A stats.json without the key marks no item rare: each kept what its values gave.
            min_admissions=int(data.get("min_admissions", 1)),
        )


STAT_COLUMNS = ("rule", "transform", "mean", "scale", "count")  # per item in stats.json, aligned on "items"


def stats_table(stats: Any) -> pd.DataFrame:
    """The z-score stats per ITEMID as ``stats.json`` keeps them (:meth:`ZScoreStats.as_json`): rule, transform, mean,
    scale and count (fitted rows); a column the build does not record (or not one per item) is missing. A build from
    before ``transform`` names its log1p items in ``log_items``. What ``badpoints inspect --items`` and the HTML
    report's item table show."""
    stats = stats if isinstance(stats, Mapping) else {}
    items = stats.get("items")
    if not isinstance(items, list) or not all(isinstance(i, int) for i in items):
        return pd.DataFrame(columns=list(STAT_COLUMNS), index=pd.Index([], name="ITEMID", dtype="int64"))
    index = pd.Index(items, name="ITEMID", dtype="int64")
    table = pd.DataFrame({name: stats[name] if isinstance(stats.get(name), list) and len(stats[name]) == len(items)
                          else None for name in STAT_COLUMNS}, index=index)
    logged = stats.get("log_items")
    if table["transform"].isna().all() and isinstance(logged, list):
        table["transform"] = np.where(index.isin(logged), "log1p", "identity")
    return table[~index.duplicated()]


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


def _transformed(events: pd.DataFrame, logged: pd.Series | np.ndarray, asinh: pd.Series | np.ndarray | None = None,
                 *, strict: bool = True) -> pd.Series:
    """VALUENUM, with log1p applied to the ``logged`` rows and asinh to the ``asinh`` rows (boolean, per row).

    ``strict``: a value at or below -1 of a log1p row is a StageError; otherwise it gives NaN or -inf. asinh
    takes every number.
    """
    values = events["VALUENUM"].astype("float64")
    logged = np.asarray(logged, dtype=bool) & values.notna().to_numpy(bool)
    domain = logged & (values <= -1).to_numpy(bool)
    if strict and domain.any():
        raise StageError(
            stage=NAME, side="input", check="log_domain", column="VALUENUM", count=int(domain.sum()),
            failure_cases=pd.DataFrame({"line": events.index[domain]}), table="LABEVENTS",
            detail="ITEMID " + ", ".join(map(str, sorted(events.loc[domain, "ITEMID"].unique())[:10])),
            advice="log1p needs values above -1; set this item's [scale.policy] to 'auto' (asinh), 'linear', 'clip' or 'none'",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        values = values.where(~logged, np.log1p(values.where(logged, 0.0)))
    if asinh is None:
        return values
    return values.where(~np.asarray(asinh, dtype=bool), np.arcsinh(values))


def row_transforms(items: pd.Series, stats: "ZScoreStats") -> tuple[np.ndarray, np.ndarray]:
    """Which rows (``items``: their ITEMIDs) the fitted stats take log1p of, and which asinh (an item unseen in
    train: neither)."""
    return (items.isin(stats.items_where(stats.transforms, ("log1p",))).to_numpy(bool),
            items.isin(stats.items_where(stats.transforms, ("asinh",))).to_numpy(bool))


def item_transforms(rows: pd.DataFrame, policies: pd.Series, *, skew: float = Options.skew) -> pd.Series:
    """Per item of the counted training values ``rows`` (:func:`fit_rows`; ``policies`` by ITEMID): 'log1p' for
    the 'log' policy; under 'auto', 'asinh' for an item whose skewness is above ``skew`` and whose asinh values
    are less skewed; 'identity' for the rest."""
    items, weights = rows["ITEMID"], rows["COUNT"].astype("float64")
    raw = _skewness(rows["X"], items, weights)
    logged = _skewness(pd.Series(np.arcsinh(rows["X"].to_numpy("float64")), index=rows.index), items, weights)
    policies = policies.reindex(raw.index)
    auto = (policies == "auto") & (raw > skew) & (logged.abs() < raw.abs())
    return pd.Series(np.select([policies == "log", auto], ["log1p", "asinh"], default="identity"), index=raw.index)


def _skewness(values: pd.Series, items: pd.Series, weights: pd.Series) -> pd.Series:
    """Per item, the skewness of counted ``values`` (each standing for ``weights`` rows): NaN without spread."""
    count = weights.groupby(items).sum()
    mean = (values * weights).groupby(items).sum() / count
    deviation = values - items.map(mean)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        second = (deviation ** 2 * weights).groupby(items).sum() / count
        third = (deviation ** 3 * weights).groupby(items).sum() / count
        return (third / second ** 1.5).where(second > 0)


@guarded(stage=NAME, takes=SplitEvents, reads=FIT_READS)
def fit_zscore(events: pd.DataFrame, *, eps: float = Options.eps, clip_sigma: float = Options.clip_sigma,
               min_rows: int = Options.min_rows, constant_bound: float = Options.constant_bound,
               policy: Mapping[Any, str] | None = None, bound: float = Options.bound,
               skew: float = Options.skew, min_admissions: int = EncodeOptions.min_admissions) -> ZScoreStats:
    """Fit per-item stats on the training rows that carry a number (``events``: the columns of
    :data:`FIT_READS`, as :class:`schemas.split.SplitEvents` has them); ``policy`` as
    :func:`pipeline.stages.scale.options.item_policies` gives it (ITEMIDs and "default"); an item seen in fewer than
    ``min_admissions`` training admissions is rare (nothing of its values kept). A training row of a numeric item
    whose VALUENUM is inf, -inf or NaN is refused (``fit_finite``): nothing is fitted."""
    rows = _fit_rows(events, policy=policy, fit="scale.fit_zscore")
    return fit_from_rows(add_fit_rows([rows]), eps=eps, clip_sigma=clip_sigma, min_rows=min_rows,
                         constant_bound=constant_bound, policy=policy, bound=bound, skew=skew,
                         min_admissions=min_admissions)


def fit_from_rows(rows: FitRows, *, eps: float = Options.eps, clip_sigma: float = Options.clip_sigma,
                  min_rows: int = Options.min_rows, constant_bound: float = Options.constant_bound,
                  policy: Mapping[Any, str] | None = None, bound: float = Options.bound,
                  skew: float = Options.skew, min_admissions: int = EncodeOptions.min_admissions) -> ZScoreStats:
    """The stats from the counted training values of all the rows (:func:`add_fit_rows`): each item's transform
    is chosen from them (:func:`item_transforms`), then its mean and scale are fitted on the transformed values
    (strictly increasing: distinct values stay distinct and in order). An item seen in fewer than
    ``min_admissions`` training admissions is rare: no transform, and nothing of its values is kept."""
    values = rows.values
    items = pd.Series(values["ITEMID"].unique())
    policies = pd.Series(policy_of(items, policy).to_numpy(), index=pd.Index(items, dtype="int64"))
    rare = rows.admissions.reindex(policies.index, fill_value=0) < min_admissions
    transforms = item_transforms(values, policies, skew=skew).where(~rare, "identity")
    asinh = values["ITEMID"].map(transforms).to_numpy() == "asinh"
    values = values.assign(X=np.where(asinh, np.arcsinh(values["X"].to_numpy("float64")),
                                      values["X"].to_numpy("float64")))
    return fit_from_sums(functools.partial(fit_sums, values, clip_sigma=clip_sigma), eps=eps, min_rows=min_rows,
                         constant_bound=constant_bound, transforms=transforms, policies=policies,
                         bound=math.inf if bound == "none" else float(bound), rare=rare,
                         min_admissions=min_admissions)


@dataclass(frozen=True)
class FitRows:
    """What the fit reads of some rows (:func:`fit_rows`): ``values``, their training values counted (ITEMID, X,
    NORMAL, COUNT); ``admissions``, each item's distinct training admissions (by ITEMID). Those of parts that share
    no admission add up (:func:`add_fit_rows`)."""

    values: pd.DataFrame
    admissions: pd.Series


@reads(*FIT_READS)
@guarded(stage=NAME, takes=SplitEvents, reads=FIT_READS)
def fit_rows(events: pd.DataFrame, *args: Any, policy: Mapping[Any, str] | None = None,
             **kwargs: Any) -> FitRows:
    """What the fit reads of ``events`` (all of them, or the rows of some admissions): the training rows that
    carry a number, as their distinct ITEMID, X (VALUENUM, log1p for 'log' items) and NORMAL (no FLAG), with
    COUNT (rows), sorted by ITEMID, X and NORMAL: it never depends on the input's row order, and the tables of
    parts add up (:func:`add_fit_rows`). Lab values repeat, so it is much smaller than the rows. With them, each
    item's distinct training admissions (the rows' HADM_IDs). Non-finite values are refused as by
    :func:`fit_zscore`.
    """
    return _fit_rows(events, policy=policy, fit="scale.fit_rows")


def _fit_rows(events: pd.DataFrame, *, policy: Mapping[Any, str] | None, fit: str) -> FitRows:
    """:func:`fit_rows` of rows already guarded; ``fit`` names the function called, for its refusal."""
    training = (events["SPLIT"] == "train").to_numpy()
    refuse_non_finite(events, "VALUENUM", among=training,
                      needed=lambda rows: events.loc[rows, "KIND"].isin(("numeric", "ordinal")),
                      stage=NAME, fit=fit, needs="a VALUENUM that is finite or null in each training row, and a "
                                                 "number in each of a numeric or ordinal item (KIND 'numeric', "
                                                 "'ordinal')")
    chosen = training & events["VALUENUM"].notna().to_numpy()
    # Only the columns the fit reads are gathered.
    train = events.loc[chosen, ["ITEMID", "VALUENUM", "HADM_ID"]]
    values = _transformed(train, rows_with(train["ITEMID"], policy, "log").to_numpy(bool))
    rows = pd.DataFrame({"ITEMID": train["ITEMID"].to_numpy("int64"), "X": values.to_numpy("float64"),
                         "NORMAL": events["FLAG"].isna().to_numpy()[chosen]})
    admissions = train.groupby(rows["ITEMID"].to_numpy())["HADM_ID"].nunique()
    return FitRows(values=_counted(rows.assign(COUNT=np.int64(1))), admissions=_admissions(admissions))


def add_fit_rows(parts: Sequence[FitRows]) -> FitRows:
    """The counted training values and admissions of all the rows from those of parts that share no admission."""
    parts = list(parts)
    return FitRows(values=_counted(pd.concat([part.values for part in parts])),
                   admissions=_admissions(pd.concat([part.admissions for part in parts]).groupby(level=0).sum()))


def _admissions(counts: pd.Series) -> pd.Series:
    return counts.rename_axis("ITEMID").rename("ADMISSIONS").astype("int64").sort_index()


def _counted(rows: pd.DataFrame) -> pd.DataFrame:
    counted = rows.groupby(["ITEMID", "X", "NORMAL"], sort=True, dropna=False)["COUNT"].sum()
    return counted.astype("int64").reset_index()


def fit_sums(rows: pd.DataFrame, known: pd.DataFrame | None = None, *,
             clip_sigma: float = Options.clip_sigma) -> pd.DataFrame:
    """One pass of the fit over ``rows`` (the counted training values of all the rows, :func:`fit_from_rows`):
    per-item sums.

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

    The mean is ``shift`` plus the mean difference from it: with a shift near the values, the rounding of the sums
    stays far below the mean's own (an item of 1e6 +- 1e-3 included)."""
    shift = {b: shift[b].reindex(known.index).fillna(0.0) for b in BASES}
    totals = sums(known.assign(**{f"SHIFT_{b}": shift[b] for b in BASES})).reindex(known.index)
    count = {b: totals[f"N_{b}"].fillna(0).astype("int64") for b in BASES}
    mean = {b: shift[b] + totals[f"SUM_{b}"].fillna(0.0) / count[b] for b in BASES}  # NaN for an empty basis
    squares = sums(known.assign(**{f"CENTRE_{b}": mean[b] for b in BASES})).reindex(known.index)
    return {b: pd.DataFrame({"mean": mean[b], "std": np.sqrt(squares[f"SUM_{b}"] / (count[b] - 1)).where(count[b] > 1),
                             "count": count[b]}) for b in BASES}


def fit_from_sums(sums: Callable[[pd.DataFrame | None], pd.DataFrame], *, eps: float = Options.eps,
                  min_rows: int = Options.min_rows, constant_bound: float = Options.constant_bound,
                  transforms: pd.Series | None = None, policies: pd.Series | None = None,
                  bound: float = Options.bound, rare: pd.Series | None = None,
                  min_admissions: int = EncodeOptions.min_admissions) -> ZScoreStats:
    """The stats from ``sums(known)``: :func:`fit_sums` of the counted training values of every row.

    Five passes: counts and ranges; per basis, the mean and centred std (two passes), which set the
    ``clip_sigma`` window; the mean and centred std of the rows inside it (two passes). Each item then takes
    the first rule of :data:`RULES` that fits it: ``rare`` (by ITEMID) first, which keeps mean 0 and scale 1.
    """
    first = sums(None)
    index = first.index
    low, high = first["MIN"], first["MAX"]
    middle = low + (high - low) / 2  # of every row's X
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
    rare = pd.Series(False, index=index) if rare is None else rare.reindex(index, fill_value=False).astype(bool)
    rule = pd.Series(np.select([rare] + [~constant & fits[r] for r in rules], ["rare"] + rules, default="constant"),
                     index=index)
    value = low.where(low != 0, 0.0)  # the constant value (-0.0 read as 0)
    mean = pd.Series(np.select([rule == r for r in rules], [candidates[r]["mean"] for r in rules], default=value),
                     index=index).where(~rare, 0.0)
    scale = pd.Series(np.select([rule == r for r in rules], [candidates[r]["std"] for r in rules],
                                default=value.abs().where(value != 0, 1.0)), index=index).where(~rare, 1.0)
    count = pd.Series(np.select([rule == r for r in rules], [candidates[r]["count"] for r in rules],
                                default=unclipped["ALL"]["count"]), index=index)
    return ZScoreStats(
        items_=tuple(int(i) for i in index), mean_=tuple(float(m) for m in mean),
        scale_=tuple(float(s) for s in scale), count_=tuple(int(c) for c in count),
        rule_=tuple(str(r) for r in rule), normal_count_=tuple(int(n) for n in first["N_NORMAL"]),
        transform_=None if transforms is None else tuple(transforms.reindex(index).fillna("identity").astype("str")),
        policy_=None if policies is None else tuple(policies.reindex(index).fillna("none").astype("str")),
        bound=float(bound), eps=float(eps), min_rows=int(min_rows), constant_bound=float(constant_bound),
        min_admissions=int(min_admissions),
    )


def _spread(stats: pd.DataFrame, eps: float) -> pd.Series:
    """Whether a fitted set's std is finite and above ``eps`` times its |mean| (so it can scale the item)."""
    return np.isfinite(stats["std"]) & np.isfinite(stats["mean"]) & (stats["std"] > eps * stats["mean"].abs())
