"""Dedup stage: one row per (HADM_ID, TIMESTEP, ITEMID), keeping the latest CHARTTIME.

Ties on CHARTTIME are broken by the row's content (VALUENUM, VALUE, FLAG), so
the kept row never depends on input order. The output is sorted by split,
admission, timestep and item: the order the graph stage slices by offsets.

Most keys hold one row, so the rows are ordered by one int64 key (a single
stable sort) and only the rows that share a key are sorted by their content.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from pipeline.reporting.findings import Finding, summary_finding
from pipeline.kernel.stage import Context, Drop, Outcome, Plan, Reason, Stage
from pipeline.kernel.calls import Call
from pipeline.kernel.quarantine import Kept, Step, set_aside
from schemas.bucket import BucketedEvents
from schemas.dedup import EdgeRows
from schemas.guard import guarded
from schemas.split import split_codes

NAME = "dedup"
SHORT = "admission below min_timesteps"
KEY = ["HADM_ID", "TIMESTEP", "ITEMID"]
TIE_BREAK = ["CHARTTIME", "VALUENUM", "VALUE", "FLAG"]


@guarded(stage=NAME, takes=BucketedEvents, gives=EdgeRows)
def dedup(events: pd.DataFrame) -> Kept:
    """The latest row of each (HADM_ID, TIMESTEP, ITEMID); merged rows are counted, not quarantined."""
    key = edge_key(events)
    order = np.argsort(key, kind="stable")
    key = key[order]
    shared = np.zeros(len(key), dtype=bool)
    shared[1:] |= key[1:] == key[:-1]
    shared[:-1] |= key[:-1] == key[1:]
    # Among rows that share a key, the last by (CHARTTIME, VALUENUM, VALUE, FLAG), nulls first, wins;
    # full ties keep the later input row, as one stable sort of every row by key and content would.
    at = np.flatnonzero(shared)
    ties = events.iloc[order[at]][TIE_BREAK].assign(_KEY=key[at], _AT=at)
    ties = ties.sort_values(["_KEY", *TIE_BREAK], kind="stable", na_position="first")
    keep = np.ones(len(key), dtype=bool)
    keep[ties["_AT"].to_numpy()[ties["_KEY"].duplicated(keep="last").to_numpy()]] = False
    latest = events.iloc[order[keep]]  # one gather of the rows, in key order
    step = Step(stage=NAME, step="one row per (HADM_ID, TIMESTEP, ITEMID)", rows_in=len(events),
                rows_out=len(latest), merged=len(events) - len(latest))
    return Kept(frame=latest, steps=(step,))


@guarded(stage=NAME, takes=EdgeRows, gives=EdgeRows)
def drop_short_admissions(edges: pd.DataFrame, *, min_timesteps: int) -> Kept:
    """Edge rows of admissions with at least ``min_timesteps`` distinct timesteps ([graph] min_timesteps); the
    others are quarantined."""
    timesteps = edges.groupby("HADM_ID", sort=False)["TIMESTEP"].transform("nunique")
    return set_aside(edges, [(SHORT, timesteps < min_timesteps)], stage=NAME)


def edge_key(events: pd.DataFrame) -> np.ndarray:
    """One int64 per row ordered as (split, HADM_ID, TIMESTEP, ITEMID): equal exactly for equal keys."""
    key = split_codes(events["SPLIT"]).astype("int64")
    for column in KEY:
        codes, uniques = pd.factorize(events[column], sort=True)
        if int(key.max(initial=0)) + 1 > np.iinfo("int64").max // max(len(uniques), 1):
            raise OverflowError("dedup: too many distinct keys for one int64")  # beyond 10^18 key combinations
        key = key * len(uniques) + codes
    return key


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine: one row per key, then admissions below [graph]
    min_timesteps set aside; how many rows were merged is a finding."""

    def report(outcome: Outcome) -> list[Finding]:
        merged = sum(step.merged for step in outcome.steps)
        return [summary_finding(
            stage=NAME, check="merged", table="LABEVENTS", column=None, count=merged,
            message=f"{merged} rows merged into {outcome.rows} edge rows, one per (HADM_ID, timestep, ITEMID)")]

    return Plan(context=context, report=report,
                calls=(Call(dedup), Call(drop_short_admissions, kwargs={"min_timesteps": context.options.min_timesteps})))


STAGE = Stage(NAME, colour="#d62728", plan=plan, reads="graph", takes=BucketedEvents, gives=EdgeRows,
              reasons=(Reason(SHORT, "below_min_timesteps", per_admission=True,
                              drops=Drop("admission_below_min_timesteps",
                                         "with fewer timesteps than [graph] min_timesteps")),),
              by_admission=True)
