"""Bucket stage: timestep = whole intervals since the start (midnight) of the admission day.

Vectorized datetime arithmetic, no loop over admissions. Rows charted before
the admission day have no timestep of their own: those drawn in the admission's
emergency department stay (from EDREGTIME, where ADMISSIONS has it, else from
``ed_hours`` before ADMITTIME) belong to it and are kept at timestep 0, counted
as ``from_ed_stay``; earlier ones (another encounter) are quarantined. Three
bounds end a stay, each a reason of its own: more than
``after_discharge_hours`` after DISCHTIME (the stay's own end), more than
``max_stay_days`` after the admission day (no real stay lasts that long: only a
broken date gets there), and past a deliberate ``max_timestep`` (none by
default). Rows past the first and the last are quarantined or clipped to the
last allowed timestep, per policy; rows past ``max_stay_days`` are always
quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.reporting.findings import Finding, summary_finding
from pipeline.kernel.options import Section, setting
from pipeline.kernel.calls import reads
from pipeline.kernel.stage import Context, Plan, Reason, Stage
from pipeline.kernel.calls import Call
from pipeline.kernel.quarantine import Kept, Step, set_aside
from schemas.bucket import BucketedEvents
from schemas.fill import FilledEvents
from schemas.guard import guarded
from schemas.raw import ADMISSIONS

NAME = "bucket"
NO_ADMISSION = "admission not among the clean admissions"
BEFORE = "charted before the admission day"
AFTER_DISCHARGE = "charted more than after_discharge_hours after discharge"
BEYOND_STAY = "charted more than max_stay_days after the admission day"
BEYOND_MAX = "beyond max_timestep"
FROM_ED = "from_ed_stay"  # the step (and check) of rows charted in the ED stay before the admission day, kept at 0
COLUMNS = {NO_ADMISSION: "HADM_ID", BEFORE: "CHARTTIME", AFTER_DISCHARGE: "CHARTTIME", BEYOND_STAY: "CHARTTIME",
           BEYOND_MAX: "CHARTTIME"}  # the column each filter reads
DAY = 86_400.0
LATE_POLICIES = ("quarantine", "clip")


def last_timestep(*, interval_hours: float, max_stay_days: float, max_timestep: int | None = None) -> int:
    """The largest timestep a kept row can have: the deliberate cap, or the one ``max_stay_days`` reaches."""
    reach = int(np.floor(max_stay_days * DAY / (interval_hours * 3600.0)))
    return reach if max_timestep is None else min(int(max_timestep), reach)


@dataclass(frozen=True)
class Options(Section):
    NAME = "bucket"
    interval_hours: float = setting(float, 24, low=0.001, high=24 * 366, doc="""
        timestep = whole intervals since the start (midnight) of the admission day; from 0.001 (3.6 s) to 8784 (a leap year).""")
    after_discharge_hours: float = setting(float, 24.0, low=0, high=24 * 36_600, doc="""
        Rows charted more than after_discharge_hours after DISCHTIME (check after_discharge) are quarantined
        (late_policy = "quarantine") or clipped to the last timestep of the stay ("clip"). This bounds every
        row by its own stay, so no maximum is needed to keep timesteps sane.""")
    late_policy: str = setting(str, "quarantine", words=LATE_POLICIES)
    ed_hours: float = setting(float, 12.0, low=0, high=24 * 7, doc="""
        Labs drawn in the emergency department before admission belong to it: a row charted before the admission
        day but at or after the ED stay's start is kept at timestep 0 (check from_ed_stay, counted), not
        quarantined. The start is ADMISSIONS' EDREGTIME where present (and not after ADMITTIME), else ADMITTIME
        minus ed_hours. 12 h: every one of the MIMIC-III demo's 391 rows charted before the admission day lies
        within 8.2 h of ADMITTIME, and the 7 MIMIC-IV demo admissions that quarantining such rows lost whole had
        their ED labs 2-9 h before it; 12 h holds an ED stay of typical length plus boarding, while labs a day or
        more earlier (another encounter) stay quarantined (check before_admission). 0 keeps no row before the
        admission day, EDREGTIME or not (as before this key). At most 168 (a week).""")
    # "none": the timestep max_stay_days reaches (see last_timestep), set on construction
    max_timestep: int = setting(int, "none", low=0, high=2**31 - 1, words=("none",), doc="""
        A deliberate horizon, in intervals: rows past it are reported (check beyond_max_timestep) and quarantined
        or clipped per late_policy. "none" keeps every day of a stay: MIMIC has stays of 200+ days (the MIMIC-III
        demo one of 124), and a cap of 99 cut 1,060 real rows from it. Example: max_timestep = 30 (at most 2^31 - 1).""")
    max_stay_days: float = setting(float, 1000.0, low=0, high=36_600, above=True, doc="""
        Rows more than this many days after the admission day are always quarantined (check beyond_max_stay).
        No hospital stay in MIMIC comes near 1000 days (~2.7 years; the longest are under a year); a DISCHTIME
        or CHARTTIME years or decades off (a mistyped year, a 1900 placeholder) does. With max_timestep = "none",
        the graphs' timesteps are bounded by floor(max_stay_days * 24 / interval_hours) (1000 by default).
        At most 36600 (100 years); after_discharge_hours at most 878400 (the same in hours).""")

    def relations(self) -> None:
        if self.max_timestep == "none":
            object.__setattr__(self, "max_timestep", last_timestep(interval_hours=self.interval_hours,
                                                                   max_stay_days=self.max_stay_days))


@guarded(stage=NAME, takes=FilledEvents, gives=BucketedEvents)
def bucket(events: pd.DataFrame, admissions: pd.DataFrame, *, interval_hours: float = Options.interval_hours,
           max_timestep: int | None = None, max_stay_days: float = Options.max_stay_days,
           after_discharge_hours: float = Options.after_discharge_hours,
           late_policy: str = Options.late_policy, ed_hours: float = Options.ed_hours) -> Kept:
    """TIMESTEP for every row; rows charted in the ED stay before the admission day get 0 (a ``from_ed_stay`` step
    counts them), earlier rows and rows past max_stay_days are quarantined, rows after discharge or past
    ``max_timestep`` per ``late_policy``."""
    stays = admissions.set_index("HADM_ID")
    at = stays.index.get_indexer(events["HADM_ID"])  # each row's admission, -1 where it has none
    unknown = pd.Series(at < 0, index=events.index)
    day_start = _per_row(_seconds(stays["ADMITTIME"].dt.floor("D")), at)
    ed_start = _per_row(ed_stay_start(stays, ed_hours=ed_hours), at)
    end = _per_row(_seconds(stays["DISCHTIME"]), at) + after_discharge_hours * 3600.0
    charted = _seconds(events["CHARTTIME"]).to_numpy()
    interval = interval_hours * 3600.0
    # Whole seconds since the start of the admission day: nanosecond differences overflow past 292 years.
    elapsed = pd.Series(charted - day_start, index=events.index)
    from_ed = (elapsed < 0) & (charted >= ed_start)  # NaN (no admission, no ED stay) compares False
    step = np.floor(elapsed / interval).where(~from_ed, 0.0)
    before = (elapsed < 0) & ~from_ed
    after = pd.Series(charted > end, index=events.index)
    beyond_stay = elapsed > max_stay_days * DAY
    beyond_max = step > (np.inf if max_timestep is None else max_timestep)
    if late_policy == "clip":
        last = np.floor((end - day_start) / interval)
        if max_timestep is not None:
            last = np.minimum(last, max_timestep)
        gone = before | unknown | beyond_stay
        timed = events.assign(TIMESTEP=np.minimum(step, last).where(~gone, 0).astype("int64"))
        kept = set_aside(timed, [(NO_ADMISSION, unknown), (BEFORE, before), (BEYOND_STAY, beyond_stay)],
                         stage=NAME, columns=COLUMNS)
        rows = len(kept.frame)
        notes = tuple(Step(stage=NAME, step=f"{reason} (clipped)", rows_in=rows, rows_out=rows,
                           clipped=int(mask.sum()), column=COLUMNS[reason])
                      for reason, mask in ((AFTER_DISCHARGE, after & ~gone), (BEYOND_MAX, beyond_max & ~after & ~gone)))
        ed = _ed_step(rows, from_ed & ~gone)
        return Kept(frame=kept.frame, quarantine=kept.quarantine, steps=kept.steps + (ed,) + notes)
    gone = before | unknown | after | beyond_stay | beyond_max
    timed = events.assign(TIMESTEP=step.where(~gone, 0).astype("int64"))
    kept = set_aside(timed, [(NO_ADMISSION, unknown), (BEFORE, before), (AFTER_DISCHARGE, after),
                             (BEYOND_STAY, beyond_stay), (BEYOND_MAX, beyond_max)], stage=NAME, columns=COLUMNS)
    ed = _ed_step(len(kept.frame), from_ed & ~gone)
    return Kept(frame=kept.frame, quarantine=kept.quarantine, steps=kept.steps + (ed,))


def ed_stay_start(stays: pd.DataFrame, *, ed_hours: float = Options.ed_hours) -> pd.Series:
    """Per admission (``stays``: indexed by HADM_ID), the start of its emergency department stay in seconds since
    the epoch: EDREGTIME where present and not after ADMITTIME, else ADMITTIME minus ``ed_hours``; with
    ``ed_hours`` 0, ADMITTIME itself (no row before the admission day is in it)."""
    admit = _seconds(stays["ADMITTIME"])
    window = admit - ed_hours * 3600.0
    if "EDREGTIME" not in stays or ed_hours == 0:
        return window
    registered = _seconds(stays["EDREGTIME"])
    return registered.where(registered <= admit, window)  # NaN (no EDREGTIME) compares False: the window


def _ed_step(rows: int, from_ed: pd.Series) -> Step:
    """The rows charted in the ED stay before the admission day, kept at timestep 0: a step that removes none (its
    rows, rows in and out; how many it moved to timestep 0 counted as clipped)."""
    return Step(stage=NAME, step=FROM_ED, rows_in=rows, rows_out=rows, clipped=int(from_ed.sum()), column="CHARTTIME")


@reads("HADM_ID", "CHARTTIME")
def ed_stay_rows(events: pd.DataFrame, admissions: pd.DataFrame) -> pd.DataFrame:
    """HADM_ID of the bucketed rows charted before their admission day: those kept from the ED stay."""
    admit_day = events["HADM_ID"].map(admissions.set_index("HADM_ID")["ADMITTIME"].dt.floor("D"))
    return events.loc[(events["CHARTTIME"] < admit_day).to_numpy(), ["HADM_ID"]]


def ed_stay_findings(rows: pd.DataFrame, *, max_lines: int) -> list[Finding]:
    """How many rows of how many admissions were kept from the ED stay (``rows``: :func:`ed_stay_rows`, index =
    source line); none when there are none."""
    if rows.empty:
        return []
    n, stays = len(rows), rows["HADM_ID"].nunique()
    return [summary_finding(
        stage=NAME, check=FROM_ED, table="LABEVENTS", column="CHARTTIME", count=n,
        lines=[int(line) for line in rows.index[:max_lines]],
        message=f"{n} {'row' if n == 1 else 'rows'} of {stays} admission{'' if stays == 1 else 's'} charted in the "
                "ED stay before the admission day (from EDREGTIME, else [bucket] ed_hours before ADMITTIME), kept "
                "at timestep 0")]


def _seconds(times: pd.Series) -> pd.Series:
    """Seconds since the epoch as float64 (exact for whole seconds), NaN for NaT."""
    return times.astype("datetime64[s]").astype("int64").where(times.notna()).astype("float64")


def _per_row(per_admission: pd.Series, at: np.ndarray) -> np.ndarray:
    """An admission's float value on each row that refers to it (``at``: its position, -1 for none: NaN)."""
    return np.append(per_admission.to_numpy("float64"), np.nan)[at]


def plan(context: Context) -> Plan:
    """The stage in flow, per admission on the engine, with the [bucket] options; the rows kept from the ED stay
    are a finding."""
    options, admissions = context.options, context.table(ADMISSIONS)
    return Plan(context=context, calls=(Call(bucket, (admissions,), dict(
        interval_hours=options.interval_hours, max_timestep=options.max_timestep, max_stay_days=options.max_stay_days,
        after_discharge_hours=options.after_discharge_hours, late_policy=options.late_policy,
        ed_hours=options.ed_hours)),),
        picks=(Call(ed_stay_rows, (admissions,)),),
        report=lambda outcome: ed_stay_findings(outcome.picks[0], max_lines=context.max_lines))


STAGE = Stage(NAME, colour="#2ca02c", plan=plan, options=Options, takes=FilledEvents, gives=BucketedEvents,
              reasons=(Reason(NO_ADMISSION, "quarantine_admission"),
                       Reason(BEFORE, "before_admission"),
                       Reason(AFTER_DISCHARGE, "after_discharge", per_admission=True),
                       Reason(BEYOND_STAY, "beyond_max_stay", per_admission=True),
                       Reason(BEYOND_MAX, "beyond_max_timestep", per_admission=True)),
              by_admission=True)
