"""Scale stage: per-ITEMID z-scores of VALUENUM with stats fitted on the training split.

Each item is scaled by the first rule of a declared chain that fits it, on its
training rows only (``RULES``):

- ``rare``: seen in fewer than [encode] min_admissions distinct training admissions: z = 0
  (marked Z_UNSEEN), and stats.json keeps nothing of its values (mean 0, scale 1);

- ``normal``: its normal (unflagged) training rows after ``clip_sigma`` clipping,
  when it has at least ``min_rows`` of them and their std is above ``eps`` x |mean|;
- ``all``: all its training rows, clipped the same way, when their std is above
  ``eps`` x |mean| (too few normal rows, none, or normal rows without spread);
- ``all_unclipped``: all its training rows unclipped, when clipping left no spread;
- ``constant``: every training value is equal (within ``eps`` relative, after the
  log transform of 'log' items). Its value c gets z = 0; another value x gets the
  relative difference (x - c) / |c| (x - c when c = 0), clipped to
  ``constant_bound``: never a raw-unit difference, never beyond the bound.

Before its stats, each item's values go through the transform its policy gives (``[scale.policy]``, by ITEMID,
category, fluid or "default"): under "auto" (the default) asinh when the item's training values are right-skewed and
asinh makes them less so, under "log" log1p, else none; after them, the z of the bounded policies ("auto", "log",
"linear") is drawn in under ``[scale] bound`` by a smooth, strictly increasing map, and marked Z_BOUNDED. No
transform swaps two values of an item. A numeric item unseen in train gets z = 0, marked Z_UNSEEN.

The std is computed in two centred passes (never from sums of squares, which go
negative for an item with mean 1e6 and std 1e-3), not ``std + 1e-7``, which turns
noise into z-scores of 1e7. The fit reads the training values counted
(:func:`fit_rows`): the counts of parts add up (:func:`add_fit_rows`) to those of
all the rows, so rows held in parts give the same stats, bit for bit; its passes
(:func:`fit_sums`) then run on the counted values.

The stage is this package: its options (``options``), its fitted state and fit (``fit``), the z and the findings
(``apply``) and how it shows in the HTML report (``view``); here, its plan and its declaration.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from pipeline.reporting.findings import Finding, format_items, summary_finding
from pipeline.kernel.stage import Context, Outcome, Plan, Reason, Shown, Stage
from pipeline.kernel.calls import Call, Fit
from pipeline.stages.scale.apply import (OFF_SCALE, RANGE_COLUMNS, apply_zscore, bounded_counts,  # noqa: F401
                                         off_scale, range_classes, reference_ranges, reported_rows, scale_events,
                                         scale_findings, scaled, soft_bound)
from pipeline.stages.scale.fit import (BASES, STAT_COLUMNS, ZScoreStats, add_fit_rows, fit_from_rows,  # noqa: F401
                                       fit_from_sums, fit_rows, fit_sums, fit_zscore, item_sums, item_transforms,
                                       stats_table)
from pipeline.stages.scale.options import (BOUNDED, DEFAULT_POLICY, MAX_Z_BOUND, NAME, POLICIES, RULES,  # noqa: F401
                                           TRANSFORMS, Options, item_policies, policy_of, rows_with, unmatched_groups)
from pipeline.stages.scale.view import sections
from schemas.encode import EncodedEvents
from schemas.raw import LABEVENTS, LABITEMS
from schemas.scale import ScaledEvents


def fit_inputs(events: Any, context: Context) -> tuple[Any, tuple, dict]:
    """What the fit reads in flow: every lab row (on the engine's parts: each part's :func:`fit_rows`), [scale]
    options and [encode] min_admissions (an item seen in fewer training admissions keeps nothing in stats.json)."""
    options = context.options
    return events, (), dict(eps=options.eps, clip_sigma=options.clip_sigma, min_rows=options.min_rows,
                            constant_bound=options.constant_bound, bound=options.bound, skew=options.skew,
                            policy=item_policies(options.policy, context.table(LABITEMS)),
                            min_admissions=context.settings.encode.min_admissions)


def summary(shown: Shown) -> list[tuple[str, str]]:
    """The stage's lines of the terminal summary: its constant and fallback items (none before it was fitted)."""
    stats = shown.state
    if stats is None:
        return []
    return [(name, format_items(items, names=shown.names) if items else "none")
            for name, items in (("constant", stats.constant_items_), ("fallback", stats.fallback_items_))]


def items(saved: Any) -> tuple[pd.DataFrame, list[str]]:
    """The stage's state as a build saved it (stats.json's ``scale``), per ITEMID (rule, transform, mean, scale and
    fitted rows: :func:`stats_table`), and the z bound it records (``badpoints inspect --items``)."""
    saved = saved if isinstance(saved, Mapping) else {}
    if "bound" not in saved:
        bound = "z bound: - (stats.json records none: a build from before z was bounded)"
    elif isinstance(saved["bound"], (int, float)) and not isinstance(saved["bound"], bool):
        bound = f"z bound: |z| <= {saved['bound']:g}"
    else:
        bound = "z bound: none (z is not bounded)"
    return stats_table(saved), [bound]


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: z with the fitted stats; constant, fallback and unseen
    items, values the bound drew in and large |z| are findings, read from the rows they name and from per-item
    counts; a [scale.policy] group that names no category or fluid is a warning before it runs."""
    options, stats = context.options, context.fitted[NAME]
    unmatched = unmatched_groups(options.policy, context.table(LABITEMS))
    before = (summary_finding(
        stage=NAME, check="policy_group_unknown", table="D_LABITEMS", column=None, count=len(unmatched),
        message=f"[scale.policy] names {', '.join(map(repr, unmatched))}, no category or fluid of D_LABITEMS"),
    ) if unmatched else ()

    def report(outcome: Outcome) -> list[Finding]:
        reported, = outcome.picks
        bounded, = outcome.tallies
        return scale_findings(reported, stats, warn_bound=options.warn_bound, max_lines=context.max_lines,
                              ranges=reference_ranges(context.read.of(LABEVENTS), reported.index, context.engine),
                              range_widths=options.range_widths, names=context.ledger.names, bounded=bounded)

    return Plan(context=context, report=report, before=before,
                calls=(Call(scale_events, (stats,), dict(warn_bound=options.warn_bound,
                                                         error_bound=options.error_bound)),),
                tallies=(Call(bounded_counts, (stats,)),),
                picks=(Call(reported_rows, (stats,), dict(warn_bound=options.warn_bound)),))


STAGE = Stage(NAME, colour="#ff7f0e", plan=plan, options=Options, takes=EncodedEvents, gives=ScaledEvents,
              fit=Fit(whole=fit_zscore, partial=fit_rows, combine=add_fit_rows, finish=fit_from_rows,
                      inputs=fit_inputs, state=ZScoreStats, saved_as="scale", early=True),
              reasons=(Reason(OFF_SCALE, "censored_off_scale", per_item=True),),
              by_admission=True, writes=("Z", "Z_BOUNDED", "Z_UNSEEN"), summary=summary, sections=sections,
              items=items)
