"""The task stage's name and config section (``[task]``): what the model is asked, when, from which rows, and the
built-in tasks a name stands for (:data:`PRESETS`), each key's default declared once."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from pipeline.kernel.options import Section, require, setting
from schemas.windows import OPEN, WindowError, Windows, parse_duration, parse_point

NAME = "task"
LABELS = ("next_labs", "death", "long_stay", "readmission", "lab")
LAST_TIMESTEP = "last timestep"  # next_labs' prediction time: the start of each admission's last timestep
PREDICTION_ANCHORS = ("admit", "discharge")  # what a prediction time is anchored on
WINDOW_ANCHORS = ("admit", "discharge", "prediction")
UNMEASURED = ("exclude", "negative")  # a lab label with no result of its item in the label window

# The built-in tasks, by name: the keys each sets (every other key keeps its default: the observation window is
# everything up to the prediction time, no gap, the label window from the prediction time to discharge). A [task]
# table or a --task file that names one takes its keys first, then its own.
PRESETS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "next_labs": MappingProxyType({}),  # the default keys
    "mortality_24h": MappingProxyType({"label": "death", "prediction_time": "admit + 24h"}),
    "long_stay_3d": MappingProxyType({"label": "long_stay", "prediction_time": "admit + 24h",
                                      "label_window": ["prediction", "admit + 72h"]}),
    "readmission_30d": MappingProxyType({"label": "readmission", "prediction_time": "discharge",
                                         "label_window": ["prediction", "prediction + 30d"]}),
})

@dataclass(frozen=True)
class Options(Section):
    NAME = "task"
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    name: str = setting(str, "next_labs", doc="""
        What the model is asked, and when. A built-in task by name (badpoints build DATA --task NAME):
        next_labs (the default: admission.y = the lab items measured at each admission's last timestep, from
        the edges before it, marked is_history), mortality_24h (death in hospital, asked 24 h after admission),
        long_stay_3d (still in hospital 72 h after admission, asked at 24 h), readmission_30d (a new admission
        of the same SUBJECT_ID within 30 days of discharge, asked at discharge). A table naming one takes its
        keys, then any it sets itself; another name is a task of your own, every key below as you set it.""")
    label: str = setting(str, "next_labs", words=LABELS, doc="""
        death: a DEATHTIME in the label window (MIMIC records in-hospital deaths: one after DISCHTIME is
        read at DISCHTIME). long_stay: the stay lasts past the label window's end. readmission: another
        admission of the same SUBJECT_ID begins in the label window. lab: a result of [task] item in the label
        window flagged abnormal (flag = "abnormal"), or with VALUENUM in [low, high].""")
    prediction_time: str = setting(str, LAST_TIMESTEP, doc="""
        When the question is asked, once per admission: "admit + 24h", "discharge", "discharge - 6h" (units s,
        min, h, d, w). The features read only what was charted at or before it; an admission that died or left
        by then has no prediction (check task_left_before_prediction). "last timestep" is next_labs' own.""")
    observation_window: tuple[str, ...] = setting(list, (OPEN, "prediction"), doc="""
        [start, end] of what the features read: points on admit, discharge or prediction ("prediction - 48h");
        "none" as the start reads from the record's first row the stages keep (the ED stay's, see [bucket]
        ed_hours). The end is at or before the prediction time.""")
    gap: str = setting(str, "0h", doc="""
        Time between the prediction time and the label window's start, when no label event may count.""")
    label_window: tuple[str, ...] = setting(list, ("prediction", "discharge"), doc="""
        [start, end] of what the label is made of: it starts at or after the prediction time plus the gap
        (else check task_window_geometry refuses the task before any data is read). "none" as the end: until
        the record ends. A record that ends before the window does, with no event in it, is censored (check
        task_label_censored): its label is unknown, not negative.""")
    item: int = setting(int, 0, low=0, doc="""
        label = "lab": the ITEMID whose results make the label (0: none).""")
    flag: str = setting(str, "abnormal", words=("abnormal", "none"), doc="""
        label = "lab": positive when a result in the label window is flagged abnormal; "none" reads low and
        high instead.""")
    low: float = setting(float, "none", words=("none",), doc="""
        label = "lab", flag = "none": positive when a result's VALUENUM lies in [low, high] ("none": unbounded).""")
    high: float = setting(float, "none", words=("none",))
    unmeasured: str = setting(str, "exclude", words=UNMEASURED, doc="""
        label = "lab": an admission with no result of the item in the label window is left out ("exclude",
        counted as censored) or negative ("negative").""")
    min_stay_hours: float = setting(float, 0.0, low=0, doc="""
        Cohort criteria, applied in this order; each counts what it removes in the task's ledger (a criterion
        that removes none is a warning, one that removes every admission left an error), and one decided after
        the prediction time is an error (check task_selection_on_future): a stay of at least 48 h is known only
        48 h in. min_stay_hours: stays of at least this many hours (0: no criterion); decided at discharge.""")
    max_stay_hours: float = setting(float, "none", low=0, words=("none",), doc="""
        Stays of at most this many hours ("none": no criterion); decided that many hours after admission.""")
    admission_types: tuple[str, ...] = setting(list, (), doc="""
        ADMISSION_TYPE among these (e.g. ["EMERGENCY", "URGENT"]; empty: any); decided at admission.""")
    first_admission: bool = setting(bool, False, doc="""
        Each SUBJECT_ID's first admission only; decided at admission.""")
    survived: bool = setting(bool, False, doc="""
        Admissions without a DEATHTIME only; decided at the death.""")
    min_positives: int = setting(int, 1, low=0, doc="""
        Fewer positive (or negative) labels than this in a split's graphs is an error (check
        task_few_positives); task_prevalence gives each split's rate.""")
    class_tolerance: float = setting(float, 2.0, low=1, above=True, doc="""
        Observation windows or lab rows per admission whose medians differ by class more than this many times
        are a warning (check task_window_by_class).""")

    @classmethod
    def preset(cls, table: Mapping[str, Any]) -> dict[str, Any]:
        """A [task] table as written, with the keys of the built-in task it names first."""
        named = PRESETS.get(table.get("name")) if isinstance(table.get("name"), str) else None
        return {**(named or {}), **table}

    def relations(self) -> None:
        require(self.label != "next_labs" or self.prediction_time == LAST_TIMESTEP,
                "[task] label = \"next_labs\" asks at each admission's last timestep: prediction_time = "
                f"\"{LAST_TIMESTEP}\", got {self.prediction_time!r}")
        require(self.label == "next_labs" or self.prediction_time != LAST_TIMESTEP,
                f"[task] prediction_time = \"{LAST_TIMESTEP}\" is next_labs' own: give a time such as "
                "\"admit + 24h\" or \"discharge\"")
        for key in ("observation_window", "label_window"):
            require(len(getattr(self, key)) == 2, f"[task] {key} is [start, end], got {list(getattr(self, key))}")
        try:
            windows = self.windows()
        except WindowError as problem:
            require(False, f"[task] {problem}")
        require(self.label != "long_stay" or not windows.label[1].open,
                "[task] label = \"long_stay\" needs a label window that ends (\"admit + 72h\"), not \"none\"")
        require(self.label != "lab" or self.item > 0, "[task] label = \"lab\" needs the ITEMID of its item: item = ...")

    def windows(self) -> Windows | None:
        """The task's windows (None for next_labs, which has none of its own)."""
        if self.prediction_time == LAST_TIMESTEP:
            return None
        prediction = parse_point(self.prediction_time, PREDICTION_ANCHORS)
        require(not prediction.open, "[task] prediction_time is a time, not \"none\"")
        points = {key: tuple(parse_point(p, WINDOW_ANCHORS) for p in getattr(self, key))
                  for key in ("observation_window", "label_window")}
        return Windows(prediction=prediction, observation=points["observation_window"], gap=parse_duration(self.gap),
                       label=points["label_window"])

    @property
    def idle(self) -> bool:
        """next_labs asks nothing of the rows: the graph stage makes its labels."""
        return self.label == "next_labs"
