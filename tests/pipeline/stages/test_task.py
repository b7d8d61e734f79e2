"""pipeline/stages/task/: a prediction task's options and built-in tasks, its cohort and labels, its cut of the lab
rows, and every leakage case planted in a copy of the sample named by its check (error or warning), while the same
task without the plant passes. Builds on the sample and the real demo, the edges against CHARTTIME, the engines and
labels.parquet: tests/pipeline/stages/test_task_builds.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import ConfigError, load_config
from pipeline.flow import validate
from pipeline.stages import task
from pipeline.stages.task.cohort import CENSORED, LEFT, task_cohort
from pipeline.stages.task.options import Options
from schemas.errors import StageError
from schemas.task import COHORT, IN_COHORT, LABEL, PREDICTION_TIME
from schemas.windows import Point, Windows, geometry_problems, parse_duration, parse_point, relation
from tests.corpus import Dataset
from tests.pipeline.stages.sample import sample_stages, shuffled

HOUR = pd.Timedelta(hours=1)


def options(name: str = "mortality_24h", **keys) -> Options:
    """The [task] section of a built-in task, with ``keys`` changed."""
    return Options(**Options.preset({"name": name, **keys}))


def findings(validation, prefix: str = "task") -> dict[str, dict]:
    """The run's findings whose check starts with ``prefix``, by check (the first of each)."""
    found = {}
    for f in validation.report.as_json()["findings"]:
        if f["check"].startswith(prefix) or f["check"] in ("step_empty",):
            found.setdefault(f["check"], f)
    return found


def planted(tmp_path: Path, change=None) -> Path:
    """A copy of the sample, changed by ``change(dataset)``."""
    data = Dataset.sample()
    if change is not None:
        change(data)
    data.write(tmp_path / "data")
    return tmp_path / "data"


def run(folder: Path, tmp_path: Path, toml: str):
    """``validate`` of ``folder`` with ``toml`` as its config."""
    (tmp_path / "task.toml").write_text(toml)
    return validate(folder, load_config(tmp_path / "task.toml"))


@pytest.fixture(scope="module")
def split_admissions() -> pd.DataFrame:
    return sample_stages().split_admissions


# -- windows and options ---------------------------------------------------------------------------------------------
def test_points_and_durations_read_as_written():
    anchors = ("admit", "discharge", "prediction")
    assert parse_duration("1d12h") == 36 * 3600 and parse_duration("90min") == 5400
    assert parse_point("admit + 24h", anchors) == Point("admit", 86_400.0)
    assert parse_point("prediction - 2d", anchors) == Point("prediction", -172_800.0)
    assert str(parse_point("admit + 72h", anchors)) == "admit + 72h"
    assert relation(Point("admit", 3600.0), Point("discharge", 3600.0)) is None  # a stay of no length: same time
    assert relation(Point("admit"), Point("discharge", 1.0)) == -1
    for wrong in ("admit + 24", "later", "admit * 2h", ""):
        with pytest.raises(ValueError, match="duration|point in time"):
            parse_point(wrong, anchors)


def test_each_built_in_task_has_windows_the_geometry_accepts():
    for name in Options.PRESETS:
        windows = options(name).windows()
        assert name == "next_labs" or geometry_problems(windows) == [], name
    assert options("next_labs").idle and not options("mortality_24h").idle


def test_a_label_window_inside_the_observation_window_is_named_with_the_points_that_show_it():
    windows = options(label_window=["admit + 12h", "discharge"]).windows()
    (problem,) = geometry_problems(windows)
    assert "starts at admit + 12h, before the prediction time admit + 24h, inside the observation window" in problem
    late = options(observation_window=["none", "prediction + 1h"]).windows()
    assert any("ends at admit + 25h, after the prediction time" in p for p in geometry_problems(late))
    gapped = Windows(Point("discharge"), (Point("none"), Point("prediction")), 3600.0,
                     (Point("prediction"), Point("prediction", 30 * 86_400.0)))
    assert "end of the gap after the prediction time (discharge + 1h)" in geometry_problems(gapped)[0]


def test_task_names_a_built_in_task_or_a_file_with_a_task_table_or_its_keys(tmp_path):
    assert load_config(task="long_stay_3d").task.label_window == ("prediction", "admit + 72h")
    (tmp_path / "table.toml").write_text('[task]\nname = "mortality_24h"\ngap = "6h"\n')
    (tmp_path / "keys.toml").write_text('name = "mine"\nlabel = "death"\nprediction_time = "admit + 48h"\n')
    assert (load_config(task=tmp_path / "table.toml").task.gap, load_config(task=tmp_path / "table.toml").task.label) \
        == ("6h", "death")
    assert load_config(task=str(tmp_path / "keys.toml")).task.prediction_time == "admit + 48h"
    (tmp_path / "config.toml").write_text('[task]\nname = "readmission_30d"\n')
    assert load_config(tmp_path / "config.toml").task.prediction_time == "discharge"  # a config's [task] too
    assert load_config(tmp_path / "config.toml", task="mortality_24h").task.label == "death"  # --task wins


@pytest.mark.parametrize(("given", "said"), [
    ({"task": "mortality_1h"}, "neither a file nor a built-in task; built-in: next_labs, mortality_24h"),
    ({"keys": 'name = "x"\nlabel = "death"\nprediction_time = "admit + 24"\n'}, "'24' is not a duration"),
    ({"keys": 'name = "x"\nlabel = "death"\nprediction_time = "last timestep"\n'}, "is next_labs' own"),
    ({"keys": 'name = "x"\nlabel = "long_stay"\nprediction_time = "admit + 24h"\nlabel_window = ["prediction", '
              '"none"]\n'}, "needs a label window that ends"),
    ({"keys": 'name = "x"\nlabel = "lab"\nprediction_time = "admit + 24h"\n'}, "needs the ITEMID"),
    ({"keys": 'name = "x"\nlabel = "death"\nprediction_time = "admit + 24h"\nlabel_window = ["prediction"]\n'},
     "label_window is [start, end]"),
])
def test_a_task_that_cannot_be_read_is_a_config_error_naming_the_key(tmp_path, given, said):
    if "keys" in given:
        (tmp_path / "task.toml").write_text(given["keys"])
        given = {"task": tmp_path / "task.toml"}
    with pytest.raises(ConfigError, match="task") as caught:
        load_config(**given)
    assert said in str(caught.value)


# -- the cohort and labels, from ADMISSIONS alone -----------------------------------------------------------------------
def test_the_cohort_keeps_who_is_there_at_the_prediction_time_and_labels_the_deaths(split_admissions):
    adm = split_admissions
    cohort = task_cohort(adm, options()).frame
    asked = adm["ADMITTIME"] + 24 * HOUR
    assert cohort[PREDICTION_TIME].equals(asked)
    present = (adm["DISCHTIME"] > asked) & (adm["DEATHTIME"].isna() | (adm["DEATHTIME"] > asked))
    assert (cohort[COHORT] == IN_COHORT).equals(present)
    assert (cohort.loc[~present, COHORT] == LEFT).all()
    assert cohort.loc[present, LABEL].astype(bool).equals(adm.loc[present, "DEATHTIME"].notna())
    assert cohort.loc[~present, LABEL].isna().all()


def test_the_cohort_is_the_same_whatever_the_order_of_the_admissions(split_admissions):
    for name in ("mortality_24h", "long_stay_3d", "readmission_30d"):
        whole = task_cohort(split_admissions, options(name)).frame
        mixed = task_cohort(split_admissions.sample(frac=1, random_state=3), options(name)).frame
        pd.testing.assert_frame_equal(mixed.sort_index(), whole.sort_index())


def test_readmission_is_a_new_admission_of_the_same_subject_within_30_days_and_censored_past_the_data(
        split_admissions):
    adm = split_admissions.copy()
    first = adm.sort_values("ADMITTIME").groupby("SUBJECT_ID").head(1)
    subject = adm["SUBJECT_ID"].value_counts().loc[lambda n: n >= 2].index[0]
    mine = adm[adm["SUBJECT_ID"] == subject].sort_values("ADMITTIME")
    moved = mine.index[1]  # its second admission now begins 10 days after the first ends
    shift = mine["DISCHTIME"].iloc[0] + 240 * HOUR - mine.loc[moved, "ADMITTIME"]
    adm.loc[moved, ["ADMITTIME", "DISCHTIME"]] += shift
    cohort = task_cohort(adm, options("readmission_30d")).frame
    kept = cohort[cohort[COHORT] == IN_COHORT]
    assert kept[LABEL].astype(bool).sum() >= 1 and bool(kept.loc[mine.index[0], LABEL])
    last = adm["DISCHTIME"].idxmax()
    assert cohort.loc[last, COHORT] == CENSORED  # its 30 days run past the data's last discharge
    assert first.index.isin(cohort.index).all()


def test_a_readmission_task_without_subject_ids_stops_naming_the_column(split_admissions):
    with pytest.raises(StageError) as caught:
        task_cohort(split_admissions.drop(columns="SUBJECT_ID"), options("readmission_30d"))
    assert caught.value.check == "task_needs_column" and caught.value.column == "SUBJECT_ID"
    assert "reads SUBJECT_ID, which ADMISSIONS lacks" in str(caught.value)


def test_an_admissions_own_windows_out_of_order_stop_the_stage_naming_them(sample_dir):
    """The label window 'discharge - 24h' against a prediction time 24 h after admission: the windows alone cannot
    tell (it depends on the stay), so every admission of a stay under 48 h is named."""
    config = dataclasses.replace(load_config(), task=options(label_window=["discharge - 24h", "discharge"]))
    validation = validate(sample_dir, config)
    found = findings(validation)["task_window_geometry"]
    assert found["severity"] == "error" and validation.exit_code == 1
    assert "label windows start before their prediction time plus the gap" in found["message"]


# -- the cut of the lab rows --------------------------------------------------------------------------------------------
def _windows(adm: pd.DataFrame, name: str = "mortality_24h") -> pd.DataFrame:
    return task_cohort(adm, options(name)).frame[task.rows.WINDOW_COLUMNS]


def test_rows_after_the_prediction_time_or_of_admissions_outside_the_cohort_are_set_aside(split_admissions):
    events = sample_stages().split_events
    kept = task.observed_rows(events, _windows(split_admissions))
    asked = events["HADM_ID"].map(split_admissions.set_index("HADM_ID")["ADMITTIME"] + 24 * HOUR)
    assert (kept.frame["CHARTTIME"] <= asked.loc[kept.frame.index]).all()
    late = kept.quarantine[kept.quarantine["REASON"] == task.rows.AFTER].index
    assert (events.loc[late, "CHARTTIME"] > asked.loc[late]).all()
    assert len(kept.frame) + len(kept.quarantine) == len(events)
    assert all(step.planned for step in kept.steps)  # a cut the task asked for: no step_removed_most


def test_the_cut_is_the_same_whatever_the_order_of_the_rows(split_admissions):
    events = sample_stages().split_events
    whole = task.observed_rows(events, _windows(split_admissions))
    mixed = task.observed_rows(shuffled(events, seed=7), _windows(split_admissions))
    pd.testing.assert_frame_equal(mixed.frame.sort_index(), whole.frame.sort_index())
    pd.testing.assert_frame_equal(mixed.quarantine.sort_index(), whole.quarantine.sort_index())


def test_rows_without_charttime_are_refused_naming_the_column(split_admissions):
    events = sample_stages().split_events.drop(columns="CHARTTIME")
    with pytest.raises(StageError) as caught:
        task.observed_rows(events, _windows(split_admissions))
    assert caught.value.stage == "task" and caught.value.side == "input" and "CHARTTIME" in str(caught.value)


def test_the_guard_names_an_edge_charted_after_its_prediction_time(split_admissions):
    events = sample_stages().split_events
    kept = task.observed_rows(events, _windows(split_admissions)).frame.copy()
    asked = split_admissions.assign(PREDICTION_TIME=split_admissions["ADMITTIME"] + 24 * HOUR)
    assert task.charted_after(kept, asked[["HADM_ID", PREDICTION_TIME]]).empty
    line = kept.index[3]
    kept.loc[line, "CHARTTIME"] += 48 * HOUR  # a stage after the task moved it past the prediction time
    late = task.charted_after(kept, asked[["HADM_ID", PREDICTION_TIME]])
    (found,) = task.charted_after_finding(late, max_lines=10)
    assert late.index.tolist() == [line] and found.check == "task_feature_after_prediction"
    assert f"HADM_ID {kept.loc[line, 'HADM_ID']}" in found.message and str(kept.loc[line, "ITEMID"]) in found.message
    assert found.severity == "error" and found.lines == [line]


# -- each leakage case planted, named; the same task without it passes ----------------------------------------------
def test_a_task_without_a_plant_passes(sample_dir):
    validation = validate(sample_dir, load_config(task="long_stay_3d"))
    assert validation.exit_code == 0
    bad = [f for f in validation.report.as_json()["findings"] if f["severity"] in ("error", "warning")
           and f["stage"] in ("task", "flow")]
    assert bad == []


def test_a_leaky_window_is_refused_before_any_data_is_read(tmp_path):
    (tmp_path / "leaky.toml").write_text('[task]\nname = "mortality_24h"\nlabel_window = ["admit + 12h", "discharge"]\n')
    validation = validate(tmp_path / "no such folder", load_config(task=tmp_path / "leaky.toml"))
    assert validation.exit_code == 1 and validation.report.inputs == []
    (found,) = validation.report.as_json()["findings"]
    assert (found["check"], found["severity"]) == ("task_window_geometry", "error")
    assert "label window starts at admit + 12h" in found["message"]


@pytest.mark.parametrize(("toml", "check", "said"), [
    ('[task]\nname = "mortality_24h"\n[graph]\nadmission_features = ["ADMISSION_TYPE", "DISCHARGE_LOCATION"]\n',
     "task_label_in_features", "defines the task's label (death)"),
    ('[task]\nname = "readmission_30d"\nprediction_time = "discharge - 24h"\nlabel_window = ["discharge", '
     '"discharge + 30d"]\n[graph]\nadmission_features = ["ADMISSION_TYPE", "DISCHARGE_LOCATION"]\n',
     "task_feature_after_prediction", "recorded at discharge, after the prediction time discharge - 24h"),
    ('[task]\nname = "mortality_24h"\nmin_stay_hours = 48\n', "task_selection_on_future",
     "for what happens after their prediction time: HADM_ID"),
])
def test_a_planted_leak_is_an_error_naming_it(sample_dir, tmp_path, toml, check, said):
    validation = run(sample_dir, tmp_path, toml)
    found = findings(validation)[check]
    assert found["severity"] == "error" and validation.exit_code == 1
    assert said in found["message"]


def test_selection_on_the_future_names_the_subjects_it_removes(sample_dir, tmp_path, split_admissions):
    validation = run(sample_dir, tmp_path, '[task]\nname = "mortality_24h"\nmin_stay_hours = 48\n')
    found = findings(validation)["task_selection_on_future"]
    stay = split_admissions["DISCHTIME"] - split_admissions["ADMITTIME"]
    future = split_admissions[(stay < 48 * HOUR) & (stay > 24 * HOUR)]  # discharged after the prediction time
    assert sorted(found["items"]) == sorted(future["HADM_ID"].tolist()) and found["count"] == len(future)
    assert f"SUBJECT_ID {min(future['SUBJECT_ID'])}" in found["message"]


def test_windows_that_differ_by_class_are_a_warning(tmp_path):
    """Asked an hour before discharge, a death's observation window is its stay: planted stays of 30 days more for
    the patients who died make the windows differ by class; asked at 24 h, they do not."""
    def longer_deaths(data: Dataset) -> None:
        death, disch = data.col("ADMISSIONS", "DEATHTIME"), data.col("ADMISSIONS", "DISCHTIME")
        for row in data.rows["ADMISSIONS"]:
            if row[death]:
                later = str(pd.Timestamp(row[disch]) + 720 * HOUR)
                row[death] = row[disch] = later
    folder = planted(tmp_path, longer_deaths)
    at_discharge = ('[task]\nname = "death_at_discharge"\nlabel = "death"\nprediction_time = "discharge - 1h"\n'
                    "min_positives = 0\n")
    found = findings(run(folder, tmp_path, at_discharge))["task_window_by_class"]
    assert found["severity"] == "warning" and "observation windows differ by label" in found["message"]
    assert "task_window_by_class" not in findings(run(folder, tmp_path, '[task]\nname = "mortality_24h"\n'
                                                                          "min_positives = 0\n"))


def test_a_criterion_that_removes_none_warns_and_one_that_removes_all_stops(sample_dir, tmp_path):
    none = findings(run(sample_dir, tmp_path, '[task]\nname = "long_stay_3d"\nadmission_types = ["EMERGENCY", '
                                              '"ELECTIVE", "URGENT", "NEWBORN"]\n'))["task_criterion_removes_none"]
    assert none["severity"] == "warning" and "admission_types" in none["message"]
    everything = run(sample_dir, tmp_path, '[task]\nname = "long_stay_3d"\nadmission_types = ["TRAUMA"]\n')
    found = findings(everything)
    assert found["task_criterion_removes_all"]["severity"] == "error" and everything.exit_code == 1
    assert "removes all 120 admissions left" in found["task_criterion_removes_all"]["message"]


def test_too_few_positives_in_a_split_is_an_error_naming_it(sample_dir, tmp_path):
    """The sample's 9 deaths all fall in train: val and test have none to measure a model on."""
    validation = validate(sample_dir, load_config(task="mortality_24h"))
    found = findings(validation)["task_few_positives"]
    assert found["severity"] == "error" and validation.exit_code == 1
    assert "val has 0 positive labels; test has 0 positive labels, fewer than [task] min_positives 1" in \
        found["message"]
    assert "task_few_positives" not in findings(run(sample_dir, tmp_path, '[task]\nname = "mortality_24h"\n'
                                                                           "min_positives = 0\n"))


# -- the ledger and the lab label ----------------------------------------------------------------------------------------
def test_the_task_ledger_counts_every_admission_read_once(sample_dir, tmp_path):
    for toml in ('[task]\nname = "long_stay_3d"\nadmission_types = ["EMERGENCY"]\n',
                 '[task]\nname = "readmission_30d"\n',
                 '[task]\nname = "long_stay_3d"\nobservation_window = ["prediction - 1h", "prediction"]\n'):
        validation = run(sample_dir, tmp_path, toml)
        ledger = validation.report.attrition["task"]
        assert ledger["read"] == 120 == ledger["labelled"] + sum(step["removed"] for step in ledger["steps"]), toml
        in_graphs = validation.report.attrition["ADMISSIONS"]["in_graphs"]
        assert ledger["labelled"] == in_graphs, toml  # every admission in the graphs is labelled
        assert sum(s["admissions"] for s in ledger["splits"].values()) == ledger["labelled"]


def test_a_lab_label_is_an_abnormal_result_of_its_item_in_the_label_window(sample_dir, tmp_path, split_admissions):
    """Creatinine (50912) flagged abnormal in the 24 h after the prediction time, by the stage's fit; admissions with
    no creatinine then are censored (unmeasured = "exclude")."""
    validation = run(sample_dir, tmp_path, '[task]\nname = "creatinine"\nlabel = "lab"\nitem = 50912\n'
                                           'prediction_time = "admit + 24h"\nlabel_window = ["prediction", '
                                           '"prediction + 24h"]\n')
    labs = pd.read_csv(sample_dir / "LABEVENTS.csv", parse_dates=["CHARTTIME"])
    adm = split_admissions.set_index("HADM_ID")
    asked = labs["HADM_ID"].map(adm["ADMITTIME"] + 24 * HOUR)
    inside = (labs["ITEMID"] == 50912) & (labs["CHARTTIME"] > asked) & (labs["CHARTTIME"] <= asked + 24 * HOUR)
    positive = set(labs.loc[inside & (labs["FLAG"] == "abnormal"), "HADM_ID"].astype(int))
    measured = set(labs.loc[inside, "HADM_ID"].astype(int))
    handed = validation.prepared.admissions.set_index("HADM_ID")
    kept = handed[handed[COHORT] == IN_COHORT]
    assert set(kept.index) <= measured
    assert set(kept.index[kept[LABEL].astype(bool)]) == positive & set(kept.index)
    unmeasured = set(handed.index) - measured
    assert (handed.loc[sorted(unmeasured & set(handed.index[handed[COHORT] != LEFT])), COHORT] == CENSORED).all()
    state = validation.prepared.fitted["task"].as_json()
    assert state == {"name": "creatinine", "label": "lab", "item": 50912, "measured": len(measured & set(adm.index)),
                     "positive": len(positive & set(adm.index))}


def test_the_fit_of_a_lab_label_in_parts_is_its_fit_of_all_the_rows(split_admissions):
    """count_results per part, add_results and results_from_counts give fit_results of all the rows, parts cut by
    admission in any order."""
    from pipeline.stages.task.labs import add_results, count_results, fit_results, results_from_counts
    from pipeline.stages.task.cohort import admission_times

    lab = options("creatinine", label="lab", item=50912, prediction_time="admit + 24h",
                  label_window=["prediction", "prediction + 24h"])
    times = admission_times(split_admissions, lab.windows())
    windows = pd.DataFrame({"HADM_ID": split_admissions["HADM_ID"], "LABEL_START": times["LABEL_START"],
                            "LABEL_END": times["LABEL_END"]})
    kwargs = dict(name=lab.name, label=lab.label, item=lab.item, flag=lab.flag, low=lab.low, high=lab.high)
    events = sample_stages().split_events
    whole = fit_results(events, windows, **kwargs)
    groups = events["HADM_ID"] % 4
    parts = [count_results(events[groups == g], windows, **kwargs) for g in (3, 0, 2, 1)]
    assert results_from_counts(add_results([add_results(parts[:2]), add_results(parts[2:])]), windows,
                               **kwargs) == whole
    assert whole.measured_ and set(whole.positive_) < set(whole.measured_)
    assert fit_results(None, None, **{**kwargs, "label": "death"}).as_json() == {"name": "creatinine",
                                                                                 "label": "death"}


def test_a_run_whose_edges_hold_a_row_charted_after_its_prediction_time_is_an_error_naming_it(sample_dir):
    """The task's closing guard, on a finished run's edge rows: none in a real run; one planted (a row moved past
    its admission's prediction time, as only a stage after the task could) is named with its admission and item."""
    from dataclasses import replace

    from pipeline.engines.pandas import PANDAS
    from pipeline.stages.task.findings import closing

    validation = validate(sample_dir, load_config(task="long_stay_3d"))
    prepared, config = validation.prepared, validation.config
    _, found = closing(prepared, config.task, PANDAS, 20)
    assert "task_feature_after_prediction" not in {f.check for f in found}
    edges = prepared.edges.copy()
    line = edges.index[10]
    edges.loc[line, "CHARTTIME"] += 72 * HOUR
    _, found = closing(replace(prepared, edges=edges), config.task, PANDAS, 20)
    (late,) = [f for f in found if f.check == "task_feature_after_prediction"]
    assert late.severity == "error" and late.lines == [line] and late.items == [int(edges.loc[line, "ITEMID"])]
    assert f"HADM_ID {edges.loc[line, 'HADM_ID']}" in late.message
