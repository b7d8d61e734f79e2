"""The task stage's fit: what it learns of the lab rows before it sets any aside. For a lab label (a result of
``[task] item`` in the label window, flagged abnormal or inside ``[low, high]``) each admission's results in its
label window, read part by part (:func:`count_results`, :func:`add_results`, :func:`results_from_counts`); for any
other task nothing (it reads no row). Its state, :class:`TaskResults`, is kept as the stage's fitted state and
summed up in ``stats.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pipeline.kernel.calls import reads
from pipeline.kernel.stage import Context
from pipeline.stages.task.cohort import admission_times
from pipeline.stages.task.options import NAME, Options
from schemas.guard import guarded
from schemas.raw import ADMISSIONS
from schemas.split import SplitEvents

RESULT_COLUMNS = ["HADM_ID", "POSITIVE"]
READS = ("HADM_ID", "ITEMID", "CHARTTIME", "FLAG", "VALUENUM")  # the columns of the rows a lab label reads


@dataclass(frozen=True)
class TaskResults:
    """What a lab label read of the rows: its item, the admissions with a result of it in their label window
    (``measured_``) and those among them whose result makes the label (``positive_``), sorted HADM_IDs."""

    name_: str
    label_: str
    item_: int = 0
    measured_: tuple[int, ...] = ()
    positive_: tuple[int, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """What ``stats.json`` keeps of it: the task and, for a lab label, how many admissions it read."""
        kept = {"name": self.name_, "label": self.label_}
        if self.label_ == "lab":
            kept.update(item=self.item_, measured=len(self.measured_), positive=len(self.positive_))
        return kept


def reads_results(options: Options) -> bool:
    """Whether the fit reads rows: only a lab label's."""
    return options.label == "lab"


def fit_inputs(events: Any, context: Context) -> tuple[Any, tuple, dict]:
    """The rows the stage is handed (a lab label's; none otherwise), each admission's label window, and the label."""
    options = context.options
    kwargs = dict(name=options.name, label=options.label, item=options.item, flag=options.flag, low=options.low,
                  high=options.high)
    if not reads_results(options):
        return None, (None,), kwargs
    admissions = context.table(ADMISSIONS)
    times = admission_times(admissions, options.windows())
    windows = pd.DataFrame({"HADM_ID": admissions["HADM_ID"].to_numpy("int64"),
                            "LABEL_START": times["LABEL_START"].to_numpy(), "LABEL_END": times["LABEL_END"].to_numpy()})
    return events, (windows,), kwargs


@reads(*READS)
@guarded(stage=NAME, takes=SplitEvents, reads=READS)
def count_results(events: pd.DataFrame | None, windows: pd.DataFrame | None = None, *, name: str = Options.name,
                  label: str = Options.label, item: int = Options.item, flag: str = Options.flag,
                  low: float | str = Options.low, high: float | str = Options.high) -> pd.DataFrame:
    """A part's admissions with a result of ``item`` in their label window, and whether one makes the label:
    flagged abnormal (``flag``), or a VALUENUM in ``[low, high]``."""
    if events is None or windows is None:
        return pd.DataFrame({"HADM_ID": pd.Series([], dtype="int64"), "POSITIVE": pd.Series([], dtype=bool)})
    rows = events[(events["ITEMID"] == item).to_numpy()]
    bounds = windows.set_index("HADM_ID")
    start = rows["HADM_ID"].map(bounds["LABEL_START"])
    end = rows["HADM_ID"].map(bounds["LABEL_END"])
    inside = (rows["CHARTTIME"] > start) & (end.isna() | (rows["CHARTTIME"] <= end))
    rows = rows[inside.to_numpy()]
    if flag == "abnormal":
        positive = rows["FLAG"].fillna("") == "abnormal"
    else:
        value = rows["VALUENUM"]
        positive = value.notna() & (value >= (-np.inf if low == "none" else low)) & \
            (value <= (np.inf if high == "none" else high))
    found = pd.DataFrame({"HADM_ID": rows["HADM_ID"].to_numpy("int64"), "POSITIVE": positive.to_numpy(bool)})
    return found.groupby("HADM_ID", as_index=False)["POSITIVE"].max()


def add_results(partials: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Parts' results as one: an admission is positive when any part found a positive result."""
    frames = [p for p in partials if len(p)]
    if not frames:
        return partials[0] if partials else count_results(None, None)
    return pd.concat(frames, ignore_index=True).groupby("HADM_ID", as_index=False)["POSITIVE"].max()


def results_from_counts(found: pd.DataFrame, windows: pd.DataFrame | None = None, *, name: str = Options.name,
                        label: str = Options.label, item: int = Options.item, flag: str = Options.flag,
                        low: float | str = Options.low, high: float | str = Options.high) -> TaskResults:
    """The state of the results read."""
    found = found.sort_values("HADM_ID")
    return TaskResults(name_=name, label_=label, item_=int(item) if label == "lab" else 0,
                       measured_=tuple(int(h) for h in found["HADM_ID"]),
                       positive_=tuple(int(h) for h in found.loc[found["POSITIVE"], "HADM_ID"]))


@guarded(stage=NAME, takes=SplitEvents, reads=READS)
def fit_results(events: pd.DataFrame | None, windows: pd.DataFrame | None = None, **options: Any) -> TaskResults:
    """:func:`results_from_counts` of :func:`count_results` of all the rows."""
    return results_from_counts(add_results([count_results(events, windows, **options)]), windows, **options)
