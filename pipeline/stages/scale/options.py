"""The scale stage's name, rules and config section (``[scale]``, ``[scale.policy]``), each default declared once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import pandas as pd

from pipeline.kernel.options import POSITIVE, Section, require, setting, table, typed
from schemas.scale import Z_ERROR_BOUND

NAME = "scale"
# The fallback chain, in order; an item is scaled by the first rule that fits it ("rare": seen in fewer than
# [encode] min_admissions training admissions, z = 0 and nothing of its values kept).
RULES = ("rare", "normal", "all", "all_unclipped", "constant")
# Per item, group or default ([scale.policy]): "auto" takes asinh for right-skewed items, "log" log1p, "linear"
# none; the three are then bounded ([scale] bound). "clip" clips at warn_bound, "none" is the raw z.
POLICIES = ("auto", "log", "linear", "clip", "none")
BOUNDED = ("auto", "log", "linear")  # the policies whose z [scale] bound draws in
DEFAULT_POLICY = "auto"  # an item's policy when neither its ITEMID, its category, its fluid nor "default" is named
TRANSFORMS = ("identity", "log1p", "asinh")  # what an item's values go through before their z
MAX_Z_BOUND = 1e15  # far past any z-score a real value has; the HTML report's log-scale charts draw up to it


@dataclass(frozen=True)


class Options(Section):
    NAME = "scale"
    eps: float = setting(float, 1e-12, low=0, high=0.5, above=True, doc="""
        Each item is scaled by the first rule of a chain, fitted on its training rows only (stats.json records
        the rule and the rows per item): its normal (unflagged) rows, clip_sigma-clipped, when it has at least
        min_rows of them and their std is above eps * |mean|; else all its rows, clipped the same way
        (fallback_item); else all its rows unclipped; else it is constant (constant_item).
        An item is constant only when its training values are all equal: max - min <= eps * max(|min|, |max|).
        eps sits well above float64 rounding noise (~1e-16) and well below any real measurement's spread: an
        item of 1e6 +- 1e-3 (relative spread 1e-9) is still scaled, by its centred two-pass std. At most 0.5.""")
    clip_sigma: float = setting(float, 3.0, **POSITIVE, doc="""
        Values further than this many std from the mean of the item's fitted rows are left out of its stats.""")
    min_rows: int = setting(int, 10, low=2, doc="""
        The fewest normal training rows an item is scaled on. A std from n rows is off by about
        1 / sqrt(2 (n - 1)): 24% at 10 rows, 71% at 2; and below 11 rows no value can lie beyond 3 sigma, so
        clipping does nothing. With fewer normal rows, the item is scaled on all its training rows: one normal
        NTproBNP row among 28 spread over 12,860 pg/mL must not set its scale.""")  # one row has no spread
    constant_bound: float = setting(float, 10.0, **POSITIVE, doc="""
        A constant item's value c gets z = 0; any other value x (in val or test) gets the relative difference
        (x - c) / |c| ((x - c) in raw units when c = 0) clipped to +-constant_bound, so it never turns raw-unit
        differences into huge z-scores (check constant_item_value names these rows). Keep it well below
        warn_bound, so such a value never passes for a heavy tail.""")
    warn_bound: float = setting(float, 100.0, low=0, high=MAX_Z_BOUND, above=True, doc="""
        |z| above warn_bound is a warning naming the items and the rule that scaled each (a heavy tail on an
        item fitted on its normal rows is real: AST reaches z ~ 1,100); above error_bound it is an error:
        beyond any real measurement, the mark of a failed std guard or a unit error. The error bound is held
        against the z before [scale] bound draws it in (a bound never hides a unit error), the warning bound
        against the z handed on. Both at most 1e15.""")
    error_bound: float = setting(float, Z_ERROR_BOUND, low=0, high=MAX_Z_BOUND, above=True)
    range_widths: float = setting(float, 10.0, **POSITIVE, doc="""
        Where LABEVENTS has reference ranges (MIMIC-IV's ref_range_lower / ref_range_upper), each row above
        warn_bound is a real extreme when its value lies more than range_widths range widths beyond the nearer
        bound, else a suspect scale. A normal range spans about 4 std, so a value within 10 widths of it that
        still has |z| > 100 means a scale at least 2.5 times too small.""")
    bound: float = setting(float, 10.0, low=0, above=True, words=("none",), doc="""
        The z of an item whose policy is "auto", "log" or "linear" is bounded: up to bound / 2 it is left as it is,
        beyond it z' = sign(z) (k + k e / (e + k)) with k = bound / 2 and e = |z| - k: smooth, strictly increasing
        (two values never swap, and a z of 20 stays apart from one of 1,000 well past float32's precision) and
        always under bound. Every such row is marked in the edge feature Z_BOUNDED and counted per item (check
        z_bounded). A z of 1,000 is real (AST 13,060 IU/L against a normal range near 22) but one edge with it
        dominates every activation it touches; 10 keeps all of a normal range's detail and the order of the tail.
        "none": no bound (with "auto" the transform only).""")
    skew: float = setting(float, 1.0, low=0, doc="""
        Under "auto", an item whose training values are right-skewed (skewness above this) is scaled on
        asinh(x) when that makes it less skewed: asinh is log(2x) for large values and x near 0, strictly
        increasing over all numbers, so a negative value in val or test is no error.""")
    policy: Mapping[int | str, str] = table(doc="""
        Which policy scales each item, by ITEMID, by category or fluid of D_LABITEMS, or "default" (the rest):
        "auto" (default: asinh for right-skewed items, then bounded), "log" (log1p, then bounded), "linear"
        (bounded), "clip" (|z| clipped at warn_bound) or "none" (today's raw z, unbounded). An ITEMID's line
        wins over its category's, a category's over its fluid's. stats.json records each item's transform.
        "default" = "auto"
        "Blood Gas" = "linear"
        "50878" = "log"
        """)

    @classmethod
    def load(cls, values: Any, name: str | None = None) -> "Options":
        """The section, its ``[scale.policy]`` table keyed by ITEMID (an integer), group name or "default"."""
        policy = values.get("policy", {}) if isinstance(values, dict) else {}
        require(isinstance(policy, dict), "[scale.policy] must be a table of ITEMID, category, fluid or default = policy")
        for item in policy:
            if re.fullmatch(r"[0-9]+", item):
                require(re.fullmatch(r"[0-9]{1,18}", item) is not None and int(item) > 0,
                        f"[scale.policy] ITEMID keys must be positive integers below 10^18, got {item!r}")
            else:  # a category or fluid names something in letters
                require(re.search(r"[A-Za-z]", item) is not None,
                        f"[scale.policy] keys must be ITEMIDs, categories, fluids or default, got {item!r}")
        return cls(**typed(cls, values, cls.NAME, skip=("policy",)),
                   policy=MappingProxyType({int(k) if re.fullmatch(r"[0-9]+", k) else k: v for k, v in policy.items()}))

    def relations(self) -> None:
        require(self.warn_bound <= self.error_bound,
                f"[scale] need warn_bound <= error_bound, got {self.warn_bound!r} and {self.error_bound!r}")
        for item, policy in self.policy.items():
            require(policy in POLICIES,
                    f"[scale.policy] {item} must be one of {', '.join(POLICIES)}, got {policy!r}")


def item_policies(policy: Mapping[Any, str] | None, labitems: pd.DataFrame | None = None) -> dict[Any, str]:
    """``[scale.policy]`` with its category and fluid keys resolved to the ITEMIDs of ``labitems`` (an ITEMID's
    own line wins over its category's, a category's over its fluid's), and its "default": what the fit and the z
    read (:func:`policy_of`). Without ``labitems``, group keys are left out."""
    policy = dict(policy or {})
    resolved: dict[Any, str] = {"default": policy.get("default", DEFAULT_POLICY)}
    groups = {key: value for key, value in policy.items() if isinstance(key, str) and key != "default"}
    if groups and labitems is not None:
        for column in ("FLUID", "CATEGORY"):  # the fluid's first, so a category's line overrides it
            names = labitems[column].astype("str").str.strip().str.casefold()
            for key, value in groups.items():
                hit = labitems.loc[(names == key.strip().casefold()).to_numpy(), "ITEMID"]
                resolved.update({int(item): value for item in hit})
    resolved.update({key: value for key, value in policy.items() if isinstance(key, int)})
    return resolved


def unmatched_groups(policy: Mapping[Any, str] | None, labitems: pd.DataFrame) -> list[str]:
    """The group keys of ``[scale.policy]`` that name no category or fluid of ``labitems``."""
    known = set(labitems["FLUID"].astype("str").str.strip().str.casefold()) | \
        set(labitems["CATEGORY"].astype("str").str.strip().str.casefold())
    return sorted(key for key in dict(policy or {}) if isinstance(key, str) and key != "default"
                  and key.strip().casefold() not in known)


def rows_with(items: pd.Series, policy: Mapping[Any, str] | None, wanted: str) -> pd.Series:
    """Whether each row's policy (``items``: ITEMIDs; the mapping of :func:`item_policies`) is ``wanted``: the
    rows of the items named so, or of every item not named otherwise when it is the default."""
    policy = dict(policy or {})
    if policy.get("default", DEFAULT_POLICY) == wanted:
        return ~items.isin([key for key, value in policy.items() if isinstance(key, int) and value != wanted])
    return items.isin([key for key, value in policy.items() if isinstance(key, int) and value == wanted])


def policy_of(items: pd.Series, policy: Mapping[Any, str] | None) -> pd.Series:
    """Each row's policy (``items``: ITEMIDs) from :func:`item_policies`' mapping: its own, else the default."""
    policy = dict(policy or {})
    own = {key: value for key, value in policy.items() if isinstance(key, int)}
    mapped = items.map(own).astype("object")
    return mapped.where(mapped.notna(), policy.get("default", DEFAULT_POLICY)).astype("str")
