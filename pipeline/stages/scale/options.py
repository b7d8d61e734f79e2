"""The scale stage's name, rules and config section (``[scale]``, ``[scale.policy]``), each default declared once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from pipeline.options import POSITIVE, Section, require, setting, table, typed

NAME = "scale"
# The fallback chain, in order; an item is scaled by the first rule that fits it.
RULES = ("normal", "all", "all_unclipped", "constant")
POLICIES = ("none", "clip", "log")  # per item: [scale.policy]
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
        beyond any real measurement, the mark of a failed std guard. Both at most 1e15.""")
    error_bound: float = setting(float, 1e6, low=0, high=MAX_Z_BOUND, above=True)
    range_widths: float = setting(float, 10.0, **POSITIVE, doc="""
        Where LABEVENTS has reference ranges (MIMIC-IV's ref_range_lower / ref_range_upper), each row above
        warn_bound is a real extreme when its value lies more than range_widths range widths beyond the nearer
        bound, else a suspect scale. A normal range spans about 4 std, so a value within 10 widths of it that
        still has |z| > 100 means a scale at least 2.5 times too small.""")
    policy: Mapping[int, str] = table(doc="""
        Per ITEMID: "none" (default), "clip" (|z| clipped to warn_bound) or "log" (log1p before scaling).
        "50878" = "log"
        """)

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
