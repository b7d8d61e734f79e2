"""Bucket stage: timestep = whole intervals since the start (midnight) of the admission day.

Vectorized datetime arithmetic, no loop over admissions. Rows charted before
the admission day have no timestep and are quarantined; rows beyond the
maximum timestep or too long after discharge are quarantined or clipped to the
last allowed timestep, per policy, and reported either way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.quarantine import Kept, Step, set_aside
from schemas.bucket import BucketedEvents
from schemas.fill import FilledEvents
from schemas.guard import guarded

STAGE = "bucket"
NO_ADMISSION = "admission not among the clean admissions"
BEFORE = "charted before the admission day"
LATE = "beyond the maximum timestep or after discharge"
COLUMNS = {NO_ADMISSION: "HADM_ID", BEFORE: "CHARTTIME", LATE: "CHARTTIME"}  # the column each filter reads


@guarded(stage=STAGE, takes=FilledEvents, gives=BucketedEvents)
def bucket(events: pd.DataFrame, admissions: pd.DataFrame, *, interval_hours: float = 24.0,
           max_timestep: int = 99, after_discharge_hours: float = 24.0, late_policy: str = "quarantine") -> Kept:
    """TIMESTEP for every row; rows before the admission day are quarantined, late rows per ``late_policy``."""
    stays = admissions.set_index("HADM_ID")
    at = stays.index.get_indexer(events["HADM_ID"])  # each row's admission, -1 where it has none
    unknown = pd.Series(at < 0, index=events.index)
    day_start = _per_row(_seconds(stays["ADMITTIME"].dt.floor("D")), at)
    discharge = _per_row(_seconds(stays["DISCHTIME"]), at)
    charted = _seconds(events["CHARTTIME"]).to_numpy()
    interval = interval_hours * 3600.0
    # Whole seconds since the start of the admission day: nanosecond differences overflow past 292 years.
    elapsed = pd.Series(charted - day_start, index=events.index)
    step = np.floor(elapsed / interval)
    last = np.minimum(np.floor((discharge + after_discharge_hours * 3600.0 - day_start) / interval), max_timestep)
    before = elapsed < 0
    late = (step > max_timestep) | pd.Series(charted > discharge + after_discharge_hours * 3600.0, index=events.index)
    if late_policy == "clip":
        timed = events.assign(TIMESTEP=np.minimum(step, last).where(~(before | unknown), 0).astype("int64"))
        kept = set_aside(timed, [(NO_ADMISSION, unknown), (BEFORE, before)], stage=STAGE, columns=COLUMNS)
        note = Step(stage=STAGE, step=f"{LATE} (clipped)", rows_in=len(kept.frame), rows_out=len(kept.frame),
                    clipped=int((late & ~before & ~unknown).sum()), column=COLUMNS[LATE])
        return Kept(frame=kept.frame, quarantine=kept.quarantine, steps=kept.steps + (note,))
    timed = events.assign(TIMESTEP=step.where(~(before | late | unknown), 0).astype("int64"))
    return set_aside(timed, [(NO_ADMISSION, unknown), (BEFORE, before), (LATE, late)], stage=STAGE, columns=COLUMNS)


def _seconds(times: pd.Series) -> pd.Series:
    """Seconds since the epoch as float64 (exact for whole seconds), NaN for NaT."""
    return times.astype("datetime64[s]").astype("int64").where(times.notna()).astype("float64")


def _per_row(per_admission: pd.Series, at: np.ndarray) -> np.ndarray:
    """An admission's float value on each row that refers to it (``at``: its position, -1 for none: NaN)."""
    return np.append(per_admission.to_numpy("float64"), np.nan)[at]
