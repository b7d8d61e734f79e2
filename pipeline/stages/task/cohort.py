"""A task's cohort and labels from the admissions alone: each admission's prediction time and windows, the cohort
criteria in order (each with when its decision is known), who ended before the prediction time, and the label with
its censoring. Pure and vectorized: no lab row is read here (a lab label's results are counted by the stage)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeline.stages.task.options import Options
from schemas.errors import StageError
from schemas.task import COHORT, IN_COHORT, LABEL, PREDICTION_TIME
from schemas.windows import Point, Windows

NAME = "task"
LEFT = "ended by the prediction time"  # COHORT of an admission that died or left at or before its prediction time
CENSORED = "label censored"  # COHORT of an admission whose record ends before its label window, with no event
# Per label, the columns it reads of ADMISSIONS beyond the keys and times.
NEEDS = {"death": ("DEATHTIME",), "readmission": ("SUBJECT_ID",), "long_stay": (), "lab": (), "next_labs": ()}


@dataclass(frozen=True)
class Criterion:
    """One cohort criterion as it ran: its key and what it keeps, the admissions it removed (HADM_ID) and those of
    them whose removal was decided after their prediction time."""

    key: str
    keeps: str
    removed: np.ndarray
    future: np.ndarray


@dataclass(frozen=True)
class Cohort:
    """The task on the admissions: one row per admission (HADM_ID, SPLIT, PREDICTION_TIME, LABEL, COHORT, and the
    bounds the features may read: SINCE, UNTIL; LABEL_START, LABEL_END for a lab label), and each criterion as it
    ran."""

    frame: pd.DataFrame
    criteria: tuple[Criterion, ...]

    def of(self, cohort: str) -> pd.DataFrame:
        return self.frame[self.frame[COHORT] == cohort]

    @property
    def kept(self) -> pd.DataFrame:
        return self.of(IN_COHORT)


def _at(point: Point, times: dict[str, pd.Series]) -> pd.Series:
    """Each admission's time of ``point`` (NaT for an open end)."""
    if point.open:
        return pd.Series(pd.NaT, index=times["admit"].index, dtype="datetime64[ns]")
    return times[point.anchor] + pd.Timedelta(seconds=point.offset)


def admission_times(admissions: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    """Per admission: its prediction time, what its features may read (SINCE, NaT: from the record's start; UNTIL)
    and its label window (LABEL_START, LABEL_END: NaT, until the record ends)."""
    times = {"admit": admissions["ADMITTIME"], "discharge": admissions["DISCHTIME"]}
    times["prediction"] = _at(windows.prediction, times)
    observed = [_at(windows.of(p), times) for p in windows.observation]
    label = [_at(windows.of(p), times) for p in windows.label]
    until = observed[1].where(observed[1].notna() & (observed[1] < times["prediction"]), times["prediction"])
    return pd.DataFrame({PREDICTION_TIME: times["prediction"], "SINCE": observed[0], "UNTIL": until,
                         "OBSERVED_END": observed[1], "LABEL_START": label[0], "LABEL_END": label[1]},
                        index=admissions.index)


def geometry_failures(times: pd.DataFrame, gap: float) -> pd.Series:
    """The admissions whose own windows fail what :func:`schemas.windows.geometry_problems` could not tell from the
    windows alone: a label window starting before the prediction time plus the gap, an observation window ending
    after it, a label window that ends before it starts."""
    after_gap = times[PREDICTION_TIME] + pd.Timedelta(seconds=gap)
    return ((times["LABEL_START"] < after_gap) | (times["OBSERVED_END"] > times[PREDICTION_TIME])
            | (times["LABEL_END"] <= times["LABEL_START"]))


def _criteria(admissions: pd.DataFrame, options: Options) -> list[tuple[str, str, pd.Series, pd.Series]]:
    """The cohort criteria the options ask for, in order: key, what it keeps, which admissions it removes, and
    when each removal is decided."""
    admit, discharge = admissions["ADMITTIME"], admissions["DISCHTIME"]
    stay = discharge - admit
    asked = []
    if options.min_stay_hours > 0:
        hours = pd.Timedelta(hours=options.min_stay_hours)
        asked.append(("min_stay_hours", f"stays of at least {options.min_stay_hours:g} h", stay < hours, discharge))
    if options.max_stay_hours != "none":
        hours = pd.Timedelta(hours=options.max_stay_hours)
        asked.append(("max_stay_hours", f"stays of at most {options.max_stay_hours:g} h", stay > hours,
                      admit + hours))
    if options.admission_types:
        kinds = admissions["ADMISSION_TYPE"]
        asked.append(("admission_types", f"ADMISSION_TYPE {', '.join(options.admission_types)}",
                      ~kinds.isin(options.admission_types), admit))
    if options.first_admission:
        earlier = admissions.groupby("SUBJECT_ID")["ADMITTIME"].transform("min") < admit
        asked.append(("first_admission", "each SUBJECT_ID's first admission", earlier, admit))
    if options.survived:
        asked.append(("survived", "admissions without a DEATHTIME", admissions["DEATHTIME"].notna(),
                      admissions["DEATHTIME"]))
    return asked


def criterion_keys(options: Options) -> tuple[str, ...]:
    """The keys of the cohort criteria the options ask for, in the order they run."""
    asked = (("min_stay_hours", options.min_stay_hours > 0), ("max_stay_hours", options.max_stay_hours != "none"),
             ("admission_types", bool(options.admission_types)), ("first_admission", options.first_admission),
             ("survived", options.survived))
    return tuple(key for key, on in asked if on)


def needed_columns(options: Options) -> tuple[str, ...]:
    """The ADMISSIONS columns the task reads beyond its keys and times."""
    criteria = (("ADMISSION_TYPE",) if options.admission_types else ()) + (
        ("SUBJECT_ID",) if options.first_admission else ()) + (("DEATHTIME",) if options.survived else ())
    return tuple(dict.fromkeys(NEEDS[options.label] + criteria))


def task_cohort(admissions: pd.DataFrame, options: Options, results: Any = None) -> Cohort:
    """Each admission's place in the task (``admissions``: clean, with SPLIT): the criteria in order, then those
    who ended by their prediction time, then the label (death, long stay, readmission; a lab label from the
    ``results`` the stage's fit read, :class:`pipeline.stages.task.labs.TaskResults`) and its censoring."""
    missing = [c for c in needed_columns(options) if c not in admissions or
               (c == "SUBJECT_ID" and admissions[c].isna().any())]
    if missing:
        raise StageError(stage=NAME, side="input", check="task_needs_column", column=", ".join(missing),
                         count=len(admissions), failure_cases=pd.DataFrame({"line": []}), table="ADMISSIONS",
                         detail=f"task {options.name!r} (label {options.label!r}) reads {', '.join(missing)}, "
                                "which ADMISSIONS lacks or leaves empty",
                         advice="Export ADMISSIONS with the column, or choose another task")
    windows = options.windows()
    times = admission_times(admissions, windows)
    cohort = pd.Series(IN_COHORT, index=admissions.index, dtype="str")
    criteria = []
    for key, keeps, removes, decided in _criteria(admissions, options):
        taken = removes.fillna(False).astype(bool) & (cohort == IN_COHORT)
        cohort = cohort.mask(taken, key)
        future = taken & (decided > times[PREDICTION_TIME])
        criteria.append(Criterion(key, keeps, admissions.loc[taken, "HADM_ID"].to_numpy("int64"),
                                  admissions.loc[future, "HADM_ID"].to_numpy("int64")))
    death = _death(admissions)
    # Present when the question is asked: alive at it, and discharged after it (a question asked at discharge is
    # asked as the patient leaves).
    asked = times[PREDICTION_TIME]
    left = admissions["DISCHTIME"] < asked if windows.prediction == Point("discharge") else \
        admissions["DISCHTIME"] <= asked
    ended = left | (death <= asked)
    cohort = cohort.mask(ended & (cohort == IN_COHORT), LEFT)
    label, censored = _label(admissions, times, death, options, results)
    cohort = cohort.mask(censored & (cohort == IN_COHORT), CENSORED)
    frame = pd.concat([admissions[["HADM_ID", "SPLIT"]], times], axis=1)
    frame[LABEL] = label.where(cohort == IN_COHORT).astype("boolean")
    frame[COHORT] = cohort
    return Cohort(frame=frame, criteria=tuple(criteria))


def _death(admissions: pd.DataFrame) -> pd.Series:
    """When each admission's patient died in hospital (NaT: alive at discharge), never after its DISCHTIME: MIMIC
    records a DEATHTIME only for a death in hospital, a few minutes to a day after the DISCHTIME it closes."""
    if "DEATHTIME" not in admissions:
        return pd.Series(pd.NaT, index=admissions.index, dtype="datetime64[ns]")
    return admissions["DEATHTIME"].where(admissions["DEATHTIME"] <= admissions["DISCHTIME"],
                                         admissions["DISCHTIME"].where(admissions["DEATHTIME"].notna()))


def _label(admissions: pd.DataFrame, times: pd.DataFrame, death: pd.Series, options: Options, results: Any
           ) -> tuple[pd.Series, pd.Series]:
    """Each admission's label and whether it is censored (its record ends before the label window does, with no
    event in it; a lab label's, also when its item has no result in the window and ``unmeasured`` excludes it)."""
    start, end = times["LABEL_START"], times["LABEL_END"]
    unbounded = end.isna()
    within = lambda at: at.notna() & (at > start) & (unbounded | (at <= end))  # noqa: E731
    no = pd.Series(False, index=admissions.index)
    if options.label == "death":
        positive = within(death)
        return positive, ~positive & ~unbounded & (admissions["DISCHTIME"] < end)
    if options.label == "long_stay":
        return admissions["DISCHTIME"] > end, no
    if options.label == "readmission":
        following = _next_admission(admissions, start)
        positive = within(following)
        # The data's record ends with its last discharge: a window past it, with no admission seen, is unknown.
        return positive, ~positive & ~unbounded & (end > admissions["DISCHTIME"].max())
    if options.label == "lab":
        hadm = admissions["HADM_ID"]
        positive = hadm.isin(results.positive_ if results is not None else ())
        measured = hadm.isin(results.measured_ if results is not None else ())
        unknown = ~measured & (options.unmeasured == "exclude")
        return positive, ~positive & (unknown | (~unbounded & (end > admissions["DISCHTIME"])))
    return no, no


def _next_admission(admissions: pd.DataFrame, after: pd.Series) -> pd.Series:
    """Each admission's subject's first ADMITTIME strictly after ``after`` (NaT: none)."""
    left = pd.DataFrame({"SUBJECT_ID": admissions["SUBJECT_ID"].astype("int64"), "AFTER": after,
                         "ROW": np.arange(len(admissions))}).dropna(subset=["AFTER"]).sort_values("AFTER")
    right = pd.DataFrame({"SUBJECT_ID": admissions["SUBJECT_ID"].astype("int64"),
                          "NEXT": admissions["ADMITTIME"]}).sort_values("NEXT")
    matched = pd.merge_asof(left, right, left_on="AFTER", right_on="NEXT", by="SUBJECT_ID", direction="forward",
                            allow_exact_matches=False)
    following = pd.Series(pd.NaT, index=range(len(admissions)), dtype="datetime64[ns]")
    following.iloc[matched["ROW"].to_numpy()] = matched["NEXT"].to_numpy()
    return pd.Series(following.to_numpy(), index=admissions.index)
