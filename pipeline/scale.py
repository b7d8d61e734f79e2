"""Scale stage: per-ITEMID z-scores of VALUENUM with stats fitted on the training split.

Stats come from each item's normal (unflagged) training rows after 3-sigma
clipping, the seed researcher's rule, with the std computed in two centred
passes (never from sums of squares, which go negative for an item with mean 1e6
and std 1e-3). The std guard is principled: an item whose std is at most
``eps`` times its |mean|, or that has one normal observation, is *constant* and
gets scale 1 — not ``std + 1e-7``, which turns noise into z-scores of 1e7.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.report import Finding, finding_from_mask, summary_finding
from schemas.encode import EncodedEvents
from schemas.errors import StageError
from schemas.guard import guarded
from schemas.scale import ScaledEvents

STAGE = "scale"


@dataclass(frozen=True)
class ZScoreStats:
    """Fitted per-item mean and scale (z = (x - mean_) / scale_), aligned on ``items_``."""

    items_: tuple[int, ...]
    mean_: tuple[float, ...]
    scale_: tuple[float, ...]
    count_: tuple[int, ...]
    constant_items_: tuple[int, ...]
    fallback_items_: tuple[int, ...]
    log_items_: tuple[int, ...]
    eps: float

    def table(self) -> pd.DataFrame:
        """mean and scale per ITEMID."""
        return pd.DataFrame({"mean": self.mean_, "scale": self.scale_, "count": self.count_},
                            index=pd.Index(self.items_, name="ITEMID", dtype="int64"))

    def as_json(self) -> dict[str, Any]:
        return {
            "items": list(self.items_), "mean": list(self.mean_), "scale": list(self.scale_),
            "count": list(self.count_), "constant_items": list(self.constant_items_),
            "fallback_items": list(self.fallback_items_), "log_items": list(self.log_items_), "eps": self.eps,
        }

    def __post_init__(self) -> None:
        sizes = {len(self.items_), len(self.mean_), len(self.scale_), len(self.count_)}
        if len(sizes) != 1:
            raise ValueError(f"ZScoreStats: items, mean, scale and count differ in length ({sorted(sizes)})")
        bad = [item for item, m, s in zip(self.items_, self.mean_, self.scale_)
               if not (np.isfinite(m) and np.isfinite(s) and s > 0)]
        if bad:
            raise ValueError(f"ZScoreStats: non-finite mean or non-positive scale for ITEMID {bad[:10]}; "
                             "refit the stats instead of editing them")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ZScoreStats":
        return cls(
            items_=tuple(int(i) for i in data["items"]), mean_=tuple(float(m) for m in data["mean"]),
            scale_=tuple(float(s) for s in data["scale"]), count_=tuple(int(c) for c in data["count"]),
            constant_items_=tuple(int(i) for i in data["constant_items"]),
            fallback_items_=tuple(int(i) for i in data["fallback_items"]),
            log_items_=tuple(int(i) for i in data["log_items"]), eps=float(data["eps"]),
        )


def item_sums(values: pd.Series, items: pd.Series, centre: pd.Series | None = None) -> pd.DataFrame:
    """Per item, N (values that are not NaN) and SUM of the values, or of their squared deviations from a per-item
    ``centre``: sums of parts of the rows add up to the sums of all of them."""
    if centre is not None:
        deviation = values - items.map(centre)
        values = deviation * deviation
    grouped = values.groupby(items)
    return pd.DataFrame({"N": grouped.count(), "SUM": grouped.sum()})


def add_sums(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The per-item sums of all the rows from the sums of each part (in the given order, for repeatable rounding)."""
    return pd.concat(list(parts)).groupby(level=0).sum()


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
            stage=STAGE, side="input", check="log_domain", column="VALUENUM", count=int(domain.sum()),
            failure_cases=pd.DataFrame({"line": events.index[domain]}), table="LABEVENTS",
            detail="ITEMID " + ", ".join(map(str, sorted(events.loc[domain, "ITEMID"].unique())[:10])),
            advice="log1p needs values above -1; set this item's [scale.policy] to 'clip' or 'none'",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        return values.where(~logged, np.log1p(values.where(logged, 0.0)))


def fit_zscore(events: pd.DataFrame, *, eps: float = 1e-12, clip_sigma: float = 3.0,
               policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """Fit per-item stats on the training rows that carry a number (``events`` has SPLIT and FLAG)."""
    rows = fit_rows(events, policy=policy)
    return fit_from_sums(lambda known: fit_sums(rows, known, clip_sigma=clip_sigma), eps=eps, policy=policy)


def fit_rows(events: pd.DataFrame, *, policy: Mapping[int, str] | None = None) -> pd.DataFrame:
    """What the fit reads of ``events`` (all of them, or the rows of some admissions): each training row that
    carries a number, as ITEMID, X (VALUENUM, log1p for 'log' items) and NORMAL (no FLAG).

    Sorted by (ITEMID, VALUENUM), so the sums never depend on the input's row order.
    """
    chosen = ((events["SPLIT"] == "train") & events["VALUENUM"].notna()).to_numpy()
    # Only the three columns the fit reads are gathered, ordered by one stable numeric sort.
    train = events.loc[chosen, ["ITEMID", "VALUENUM"]].assign(NORMAL=events["FLAG"].isna().to_numpy()[chosen])
    train = train.iloc[np.lexsort((train["VALUENUM"].to_numpy("float64"), train["ITEMID"].to_numpy("int64")))]
    values = _transformed(train, _policy_items(dict(policy or {}), "log"))
    return pd.DataFrame({"ITEMID": train["ITEMID"], "X": values, "NORMAL": train["NORMAL"]})


def fit_sums(rows: pd.DataFrame, known: pd.DataFrame | None = None, *, clip_sigma: float = 3.0) -> pd.DataFrame:
    """One pass of the fit over ``rows`` (from :func:`fit_rows`): per-item sums that add up over parts of the rows.

    Without ``known``: N_NORMAL, each item's count of normal rows. Then ``known`` (indexed by ITEMID) picks the
    rows: HAS_NORMAL, an item's basis is its normal rows (all its rows when it has none); with MEAN and STD, only
    the basis rows within ``clip_sigma`` STD of MEAN (all of them where STD is not positive). The result is
    :func:`item_sums` of their X, about CENTRE when ``known`` has one.
    """
    items = rows["ITEMID"]
    if known is None:
        return pd.DataFrame({"N_NORMAL": rows["NORMAL"].groupby(items).sum()})
    values = rows["X"]
    basis = rows["NORMAL"] | ~items.map(known["HAS_NORMAL"]).astype(bool)
    if "STD" in known:
        mean, std = items.map(known["MEAN"]), items.map(known["STD"])
        basis &= ((values - mean).abs() <= clip_sigma * std) | ~(std > 0)
    return item_sums(values[basis], items[basis], known["CENTRE"] if "CENTRE" in known else None)


def fit_from_sums(sums: Callable[[pd.DataFrame | None], pd.DataFrame], *, eps: float = 1e-12,
                  policy: Mapping[int, str] | None = None) -> ZScoreStats:
    """The stats from ``sums(known)``: :func:`fit_sums` of every training row, in one part or added over many.

    Items without a normal row fall back to all their rows; the mean and centred std of the basis set the
    ``clip_sigma`` window; the stats are the mean and centred std of the rows inside it.
    """
    has_normal = sums(None)["N_NORMAL"] > 0
    known = pd.DataFrame({"HAS_NORMAL": has_normal})
    first = _centred(lambda centre: sums(known if centre is None else known.assign(CENTRE=centre)))
    window = known.assign(MEAN=first["mean"], STD=first["std"])
    stats = _centred(lambda centre: sums(window if centre is None else window.assign(CENTRE=centre)))
    constant = (stats["count"] == 1) | ~(stats["std"] > eps * stats["mean"].abs())
    scale = stats["std"].where(~constant, 1.0)
    return ZScoreStats(
        items_=tuple(int(i) for i in stats.index), mean_=tuple(float(m) for m in stats["mean"]),
        scale_=tuple(float(s) for s in scale), count_=tuple(int(c) for c in stats["count"]),
        constant_items_=tuple(int(i) for i in stats.index[constant.to_numpy()]),
        fallback_items_=tuple(int(i) for i in has_normal.index[~has_normal.to_numpy()]),
        log_items_=tuple(_policy_items(dict(policy or {}), "log")), eps=float(eps),
    )


def zscores(events: pd.DataFrame, stats: ZScoreStats, *, policy: Mapping[int, str] | None = None,
            warn_bound: float = 100.0, strict: bool = True) -> pd.Series:
    """The z of each row with a number (NaN elsewhere), from ``events``' ITEMID and VALUENUM: train stats;
    items unseen in train get 0; 'clip' items are clipped at ``warn_bound``. Nothing is checked but, when
    ``strict``, the log policy's domain: :func:`apply_zscore` guards the result."""
    values = _transformed(events, list(stats.log_items_), strict=strict)
    table = stats.table()
    mean, scale = events["ITEMID"].map(table["mean"]), events["ITEMID"].map(table["scale"])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = ((values - mean) / scale).where(mean.notna(), 0.0)
    clipped = events["ITEMID"].isin(_policy_items(dict(policy or {}), "clip"))
    return z.where(~clipped, z.clip(-warn_bound, warn_bound)).where(values.notna())


@guarded(stage=STAGE, takes=EncodedEvents, gives=ScaledEvents)
def apply_zscore(events: pd.DataFrame, stats: ZScoreStats, *, policy: Mapping[int, str] | None = None,
                 warn_bound: float = 100.0, error_bound: float = 1e6) -> pd.DataFrame:
    """Z for every row with a number: train stats; items unseen in train get 0; 'clip' items are clipped."""
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
        stage=STAGE, side="output", check=check, column="Z", count=int(failed.sum()),
        failure_cases=pd.DataFrame({"line": events.index[failed]}), table="LABEVENTS",
        detail=f"{what} for ITEMID {listed}", advice=advice,
    )


def scale_findings(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float, max_lines: int = 20) -> list[Finding]:
    """Constant, fallback and unseen items, and |z| above the warning bound, named by ITEMID."""
    findings = []
    unseen, beyond = _named(scaled, stats, warn_bound=warn_bound)

    def items_of(mask: pd.Series) -> str:
        counts = scaled.loc[mask, "ITEMID"].value_counts().sort_index()
        return ", ".join(f"{item} ({n} row{'s' if n != 1 else ''})" for item, n in counts.head(15).items()) + (
            f" and {len(counts) - 15} more" if len(counts) > 15 else "")

    for check, items in (("constant_item", stats.constant_items_), ("fallback_item", stats.fallback_items_)):
        if items:
            findings.append(summary_finding(
                stage=STAGE, check=check, table="LABEVENTS", column="VALUENUM", count=len(items),
                message=f"{len(items)} item(s): ITEMID {', '.join(map(str, items))}"))
    findings.append(finding_from_mask(stage=STAGE, table="LABEVENTS", check="unseen_item", column="ITEMID",
                                      failed=unseen, what=f"numeric items unseen in train: ITEMID {items_of(unseen)}",
                                      max_lines=max_lines))
    findings.append(finding_from_mask(stage=STAGE, table="LABEVENTS", check="z_warn_bound", column="Z",
                                      failed=beyond, what=f"|z| > {warn_bound:g}: ITEMID {items_of(beyond)}",
                                      max_lines=max_lines))
    return [f for f in findings if f is not None]


def reported_rows(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> pd.DataFrame:
    """The rows :func:`scale_findings` names (numeric items unseen in train, |z| above ``warn_bound``) and the
    columns it reads: its findings from these rows, in their order, are its findings from all the rows."""
    unseen, beyond = _named(scaled, stats, warn_bound=warn_bound)
    return scaled.loc[unseen | beyond, ["ITEMID", "VALUENUM", "Z"]]


def _named(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> tuple[pd.Series, pd.Series]:
    """Rows of numeric items unseen in train, and rows with |z| above ``warn_bound``."""
    unseen = scaled["VALUENUM"].notna() & ~scaled["ITEMID"].isin(stats.items_)
    return unseen, scaled["Z"].abs() > warn_bound
