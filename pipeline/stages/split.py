"""Split stage: admissions to train/val/test before anything is fitted, one patient in one split.

Groups are SUBJECT_ID when ADMISSIONS has it (else HADM_ID, with a warning);
the sorted groups are permuted by a seeded generator and cut by the configured
ratios, so the assignment depends on the data and the seed, never on row order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from pipeline.reporting.findings import summary_finding

from pipeline.kernel.options import Section, require, setting
from pipeline.kernel.stage import Context, Plan, Stage
from pipeline.kernel.calls import Call
from schemas.clean import CleanAdmissions, CleanEvents
from schemas.errors import StageError
from schemas.guard import guarded
from schemas.raw import ADMISSIONS
from schemas.split import SPLITS, SplitAssignment, SplitEvents

NAME = "split"


@dataclass(frozen=True)
class Options(Section):
    NAME = "split"
    train: float = setting(float, 0.8, low=0, high=1, above=True, doc="""
        Admissions are assigned to splits by patient (SUBJECT_ID), seeded, before anything is fitted.""")
    val: float = setting(float, 0.1, low=0, high=1, above=True)
    test: float = setting(float, 0.1, low=0, high=1, above=True)
    seed: int = setting(int, 2101, low=0)

    def relations(self) -> None:
        ratios = (self.train, self.val, self.test)
        require(abs(sum(ratios) - 1) < 1e-9, f"[split] train, val and test must be > 0 and sum to 1, got {ratios}")


@guarded(stage=NAME, takes=CleanAdmissions, gives=SplitAssignment)
def assign_splits(admissions: pd.DataFrame, *, train: float, val: float, test: float, seed: int) -> pd.DataFrame:
    """One row per admission: HADM_ID, GROUP (SUBJECT_ID or HADM_ID) and SPLIT."""
    by_subject = "SUBJECT_ID" in admissions and admissions["SUBJECT_ID"].notna().all()
    group = (admissions["SUBJECT_ID"] if by_subject else admissions["HADM_ID"]).astype("int64")
    groups = np.sort(group.unique())
    if len(groups) < len(SPLITS):
        raise StageError(
            stage=NAME, side="output", check="split_empty", column="SPLIT", count=len(SPLITS) - len(groups),
            failure_cases=pd.DataFrame({"line": []}), table="ADMISSIONS",
            detail=f"{len(groups)} patient group(s) cannot fill train, val and test",
            advice="Add admissions, or validate a larger extract",
        )
    order = np.random.default_rng(seed).permutation(groups)
    cuts = np.round(np.cumsum([train, val]) * len(order)).astype(int)
    cuts = np.clip(cuts, [1, 2], [len(order) - 2, len(order) - 1])  # every split gets at least one group
    cuts[1] = max(cuts[1], cuts[0] + 1)
    split_of = pd.Series(np.repeat(np.array(SPLITS), np.diff([0, *cuts, len(order)])), index=order)
    return pd.DataFrame({
        "HADM_ID": admissions["HADM_ID"].astype("int64").to_numpy(),
        "GROUP": group.to_numpy(),
        "SPLIT": group.map(split_of).astype("str").to_numpy(),
    }).sort_values("HADM_ID", ignore_index=True)


def known_splits(admissions: pd.DataFrame, *, train: float, val: float, test: float, seed: int) -> pd.DataFrame | None:
    """The split of every admission that passes the raw checks, as the stage will assign it, from ADMISSIONS alone
    (the raw table): so lab rows can be cut into parts in (split, HADM_ID) order before any stage runs. None when
    the stage will fail (it reports why)."""
    from pipeline.stages.clean import clean_admissions

    try:
        return assign_splits(clean_admissions(admissions).frame, train=train, val=val, test=test, seed=seed)
    except StageError:
        return None


def splits_ahead(admissions: pd.DataFrame, options: Options) -> pd.DataFrame | None:
    """:func:`known_splits` with the stage's options: the stage's declared ``splits_ahead``."""
    return known_splits(admissions, train=options.train, val=options.val, test=options.test, seed=options.seed)


def split_by_subject(admissions: pd.DataFrame) -> bool:
    """Whether :func:`assign_splits` can group by patient (else it falls back to HADM_ID)."""
    return "SUBJECT_ID" in admissions and bool(admissions["SUBJECT_ID"].notna().all())


@guarded(stage=NAME, takes=CleanEvents, gives=SplitEvents)
def attach_split(events: pd.DataFrame, splits: pd.DataFrame) -> pd.DataFrame:
    """Each lab row with the split of its admission."""
    split = events["HADM_ID"].map(splits.set_index("HADM_ID")["SPLIT"])
    return events.assign(SPLIT=split.astype("str"))


def plan(context: Context) -> Plan:
    """The stage in flow: admissions assigned by the [split] options, then every lab row and admission gets its
    split (a warning when there is no SUBJECT_ID to group by)."""
    options, admissions = context.options, context.table(ADMISSIONS)
    splits = assign_splits(admissions, train=options.train, val=options.val, test=options.test, seed=options.seed)
    before = () if split_by_subject(admissions) else (summary_finding(
        stage=NAME, check="split_by_admission", table="ADMISSIONS", column="SUBJECT_ID", count=len(admissions),
        message="SUBJECT_ID is absent or incomplete"),)
    admissions = admissions.merge(splits[["HADM_ID", "SPLIT"]], on="HADM_ID", validate="one_to_one")
    return Plan(context=replace(context.with_tables(**{ADMISSIONS: admissions}), splits=splits), before=before,
                calls=(Call(attach_split, (splits,)),))


STAGE = Stage(NAME, colour="#17becf", plan=plan, options=Options, takes=CleanEvents, gives=SplitEvents,
              by_admission=True, filters=False, writes=("SPLIT",), splits_ahead=splits_ahead)
