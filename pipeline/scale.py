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
from typing import Any, Mapping

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


def centred_stats(values: pd.Series, items: pd.Series) -> pd.DataFrame:
    """Per item: mean, two-pass centred sample std (NaN for one observation) and count."""
    grouped = values.groupby(items)
    mean = grouped.mean()
    count = grouped.count()
    deviation = values - items.map(mean)
    squares = (deviation * deviation).groupby(items).sum()
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
    policy = dict(policy or {})
    log_items = _policy_items(policy, "log")
    train = events[(events["SPLIT"] == "train") & events["VALUENUM"].notna()]
    # Sums in a fixed order, so the stats are bit-identical whatever the input's row order.
    train = train.sort_values(["ITEMID", "VALUENUM"], kind="stable")
    values = _transformed(train, log_items)
    items = train["ITEMID"]
    normal = train["FLAG"].isna()
    has_normal = normal.groupby(items).transform("any")
    basis = normal | ~has_normal  # items without a normal row fall back to all their rows
    first = centred_stats(values[basis], items[basis])
    mean, std = items[basis].map(first["mean"]), items[basis].map(first["std"])
    inside = ((values[basis] - mean).abs() <= clip_sigma * std) | ~(std > 0)
    kept = basis[basis].index[inside.to_numpy()]
    stats = centred_stats(values.loc[kept], items.loc[kept])
    constant = (stats["count"] == 1) | ~(stats["std"] > eps * stats["mean"].abs())
    scale = stats["std"].where(~constant, 1.0)
    fallback = np.sort(items[~has_normal].unique())
    return ZScoreStats(
        items_=tuple(int(i) for i in stats.index), mean_=tuple(float(m) for m in stats["mean"]),
        scale_=tuple(float(s) for s in scale), count_=tuple(int(c) for c in stats["count"]),
        constant_items_=tuple(int(i) for i in stats.index[constant.to_numpy()]),
        fallback_items_=tuple(int(i) for i in fallback), log_items_=tuple(log_items), eps=float(eps),
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
    number = scaled["VALUENUM"].notna()
    unseen = number & ~scaled["ITEMID"].isin(stats.items_)
    beyond = scaled["Z"].abs() > warn_bound

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
