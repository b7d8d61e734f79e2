"""Task builds on the sample and the real MIMIC-III demo: the labels are what a few lines of pandas compute from
ADMISSIONS, every admission read is in the task's ledger, no edge comes from a row charted after its admission's
prediction time (every edge checked against CHARTTIME), labels.parquet is MEDS' label schema (checked in the MEDS
tools' own environment), and the files are the same byte for byte on every engine and every run."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipeline.builds import build
from pipeline.config import load_config
from pipeline.engines.parts import parts_engine
from pipeline.output.write import load_graphs
from schemas.split import SPLITS
from tests.conftest import ROOT, _mimic3demo
from tests.pipeline.engines.rows import output_files

SAMPLE = ROOT / "data" / "sample"
DEMO = _mimic3demo()
HOUR = pd.Timedelta(hours=1)
OUT = Path(tempfile.mkdtemp(prefix="badpoints-task-builds-"))
atexit.register(shutil.rmtree, OUT, ignore_errors=True)
MEDS_PYTHON = Path(os.environ.get("BADPOINTS_MEDS_PYTHON", ROOT / ".venv-meds" / "bin" / "python"))
# The sample's deaths all fall in its training split: built with min_positives = 0, as its ledger and labels are
# still checked (its validation, with the error, is tests/pipeline/stages/test_task.py's).
TASKS = {"mortality_24h": "min_positives = 0\n", "long_stay_3d": ""}
BUILDS = [(folder, name) for folder in ("sample", "demo") for name in TASKS]


def data(folder: str) -> Path:
    if folder == "demo" and not (DEMO / "LABEVENTS.csv").is_file():
        pytest.skip(f"real MIMIC-III demo tables not found at {DEMO} (see shared/real/README.md; or set "
                    "BADPOINTS_MIMIC3DEMO)")
    return SAMPLE if folder == "sample" else DEMO


def config_of(name: str):
    path = OUT / f"{name}.toml"
    path.write_text(f'[task]\nname = "{name}"\n{TASKS[name]}')
    return load_config(path)


@functools.cache
def built(folder: str, name: str, engine: str = "pandas", partitions: int = 1, run: int = 0):
    """A build of ``folder`` with task ``name``, once per session (``run``: another build of the same)."""
    out = OUT / f"{folder}-{name}-{engine}-{partitions}-{run}"
    if engine == "pandas":
        return build(data(folder), out, config_of(name))
    if engine == "parts":  # in this process: the Dask cluster's two workers are the other processes compared
        with parts_engine(partitions=partitions, workers=1) as parts:
            return build(data(folder), out, config_of(name), engine=parts)
    from pipeline.engines.dask import dask_engine
    with dask_engine(workers=2, memory_limit="1GB", partitions=partitions) as cluster:
        return build(data(folder), out, config_of(name), engine=cluster)


def admissions_of(folder: Path) -> pd.DataFrame:
    adm = pd.read_csv(folder / "ADMISSIONS.csv", dtype=str)
    adm.columns = adm.columns.str.upper()
    for column in ("ADMITTIME", "DISCHTIME", "DEATHTIME"):
        adm[column] = pd.to_datetime(adm[column])
    return adm.assign(HADM_ID=adm["HADM_ID"].astype("int64"))


def pandas_labels(folder: Path, name: str) -> pd.Series:
    """The task's cohort and labels, in a few lines of pandas on ADMISSIONS: asked 24 h after admission, of those
    still in hospital and alive then; death in hospital, or a stay longer than 72 h."""
    adm = admissions_of(folder)
    asked = adm["ADMITTIME"] + 24 * HOUR
    present = (adm["DISCHTIME"] > asked) & (adm["DEATHTIME"].isna() | (adm["DEATHTIME"] > asked))
    label = adm["DEATHTIME"].notna() if name == "mortality_24h" else adm["DISCHTIME"] - adm["ADMITTIME"] > 72 * HOUR
    return pd.Series(label[present].to_numpy(), index=adm.loc[present, "HADM_ID"].to_numpy())


def graph_labels(out: Path) -> pd.Series:
    """Each graph admission's y, by HADM_ID."""
    labels = {}
    for split in SPLITS:
        for g in load_graphs(out, split):
            labels.update(zip(g["admission"].hadm_id.tolist(), g["admission"].y[:, 0].tolist()))
    return pd.Series(labels).sort_index()


@pytest.mark.parametrize(("folder", "name"), BUILDS)
def test_a_task_builds_and_its_labels_are_what_pandas_computes_from_admissions(folder, name):
    done = built(folder, name)
    assert done.exit_code == 0 and done.out_dir is not None
    expected = pandas_labels(data(folder), name)
    got = graph_labels(done.out_dir)
    assert len(got) and set(got.index) <= set(expected.index)  # only the cohort reaches the graphs
    assert (got == expected.loc[got.index].astype(float)).all()
    labels = pq.read_table(done.out_dir / "labels.parquet").to_pandas()
    splits = pq.read_table(done.out_dir / "label_splits.parquet").to_pandas()
    index = pd.read_parquet(done.out_dir / "index.parquet")
    assert len(labels) == len(splits) == len(index) == len(got)
    assert labels["subject_id"].equals(splits["subject_id"]) and labels["prediction_time"].equals(
        splits["prediction_time"])
    assert labels["boolean_value"].sum() == got.sum()
    assert splits["split"].value_counts().to_dict() == index["split"].value_counts().to_dict()


@pytest.mark.parametrize(("folder", "name"), BUILDS)
def test_every_admission_read_is_in_the_task_ledger(folder, name):
    done = built(folder, name)
    ledger = done.report.attrition["task"]
    read = len(admissions_of(data(folder)))
    assert ledger["read"] == read == ledger["labelled"] + sum(step["removed"] for step in ledger["steps"])
    expected = pandas_labels(data(folder), name)
    ended = {step["step"]: step["removed"] for step in ledger["steps"]}["ended by the prediction time"]
    assert ended == read - len(expected)  # those not in hospital and alive 24 h after admission
    in_graphs = set(graph_labels(done.out_dir).index)
    assert ledger["labelled"] == len(in_graphs)
    left_out = {step["step"]: step["removed"] for step in ledger["steps"]}
    assert len(expected) - len(in_graphs) == sum(n for step, n in left_out.items()
                                                 if step.startswith(("no lab row", "left out by a later stage")))
    positives = {s: ledger["splits"][s]["positives"] for s in SPLITS}
    assert sum(positives.values()) == int(expected.loc[sorted(in_graphs)].sum())


def _timestep(charted: pd.Series, admitted: pd.Series) -> pd.Series:
    """The bucket stage's 24 h timestep since midnight of the admission day; a row before it (the ED stay) at 0."""
    return ((charted - admitted.dt.floor("D")) // (24 * HOUR)).clip(lower=0)


@pytest.mark.parametrize(("folder", "name"), BUILDS)
def test_no_edge_comes_from_a_row_charted_after_its_prediction_time(folder, name):
    """Every edge checked against LABEVENTS' CHARTTIME: each (admission, item, timestep) edge has a row charted by
    its admission's prediction time in that timestep, and every row of a graph admission charted after it is in
    the quarantine, set aside by the task."""
    done = built(folder, name)
    labs = pd.read_csv(data(folder) / "LABEVENTS.csv", dtype=str)
    labs.columns = labs.columns.str.upper()
    labs = labs[labs["HADM_ID"].notna()].assign(
        HADM_ID=lambda f: f["HADM_ID"].astype(float).astype("int64"), ITEMID=lambda f: f["ITEMID"].astype("int64"),
        CHARTTIME=lambda f: pd.to_datetime(f["CHARTTIME"]))
    labs.index = labs.index + 2  # source lines: the header is line 1
    adm = admissions_of(data(folder)).set_index("HADM_ID")
    asked = labs["HADM_ID"].map(adm["ADMITTIME"] + 24 * HOUR)
    step = _timestep(labs["CHARTTIME"], labs["HADM_ID"].map(adm["ADMITTIME"]))
    visible = labs[labs["CHARTTIME"] <= asked]
    possible = set(zip(visible["HADM_ID"], visible["ITEMID"], step[visible.index]))
    edges = set()
    for split in SPLITS:
        for g in load_graphs(done.out_dir, split):
            did = g["admission", "did", "labitem"]
            hadm = g["admission"].hadm_id[did.edge_index[0]].tolist()
            item = g["labitem"].itemid[did.edge_index[1]].tolist()
            edges |= set(zip(hadm, item, did.timestep.tolist()))
            assert bool(did.is_history.all())  # every edge may be read
    assert edges and edges <= possible
    in_graphs = set(graph_labels(done.out_dir).index)
    late = labs[(labs["CHARTTIME"] > asked) & labs["HADM_ID"].isin(in_graphs)]
    quarantine = pq.read_table(done.out_dir / "quarantine.parquet").to_pandas().set_index("line")
    set_aside = quarantine.loc[quarantine.index.isin(late.index)]
    assert len(late) and set(set_aside.index) == set(late.index)
    assert set(set_aside["STAGE"]) <= {"clean", "task"}  # the task's, or (a raw check's row) clean's before it


@pytest.mark.skipif(not MEDS_PYTHON.is_file(), reason=f"MEDS-Transforms' environment not found at {MEDS_PYTHON}: "
                                                      "run `make meds-env` (or set BADPOINTS_MEDS_PYTHON)")
def test_labels_parquet_is_meds_label_schema_in_the_meds_tools_own_environment(tmp_path):
    """meds.LabelSchema.validate, run where MEDS-Transforms is installed; a file with a column it does not allow is
    refused there, so the check can fail."""
    done = built("sample", "long_stay_3d")
    broken = pq.read_table(done.out_dir / "labels.parquet").append_column("hadm_id", pq.read_table(
        done.out_dir / "index.parquet").column("HADM_ID"))
    pq.write_table(broken, tmp_path / "broken.parquet")
    script = ("import sys, meds, pyarrow.parquet as pq\n"
              "for path in sys.argv[1:]:\n"
              "    try:\n"
              "        meds.LabelSchema.validate(pq.read_table(path)); print('valid')\n"
              "    except Exception as problem:\n"
              "        print('refused', type(problem).__name__)\n")
    done_check = subprocess.run([str(MEDS_PYTHON), "-c", script, str(done.out_dir / "labels.parquet"),
                                 str(tmp_path / "broken.parquet")], capture_output=True, text=True, timeout=300)
    assert done_check.returncode == 0, done_check.stderr
    first, second = done_check.stdout.splitlines()
    assert first == "valid" and second.startswith("refused")


@pytest.mark.parametrize(("engine", "partitions"), [("parts", 1), ("parts", 3), ("dask", 3)])
def test_a_task_build_is_the_same_on_every_engine_and_every_run(engine, partitions):
    whole = output_files(built("sample", "long_stay_3d").out_dir)
    other = output_files(built("sample", "long_stay_3d", engine, partitions).out_dir)
    assert sorted(name for name in whole.keys() | other.keys() if whole.get(name) != other.get(name)) == []
    again = output_files(built("sample", "long_stay_3d", run=1).out_dir)
    assert again == whole


def test_a_lab_label_build_is_the_same_on_the_parts_engine(tmp_path):
    """A lab label reads the rows in the stage's fit: a pass of its own, which parts must add up to the same."""
    path = tmp_path / "lab.toml"
    path.write_text('[task]\nname = "creatinine"\nlabel = "lab"\nitem = 50912\nprediction_time = "admit + 24h"\n'
                    'label_window = ["prediction", "prediction + 24h"]\n')
    whole = build(SAMPLE, tmp_path / "whole", load_config(path))
    with parts_engine(partitions=4, workers=1) as parts:
        parted = build(SAMPLE, tmp_path / "parts", load_config(path), engine=parts)
    assert whole.exit_code == parted.exit_code == 0
    assert parted.report.as_json() == whole.report.as_json()
    assert output_files(tmp_path / "parts") == output_files(tmp_path / "whole")
    state = json.loads((tmp_path / "whole" / "stats.json").read_text())["task"]
    assert state["label"] == "lab" and state["measured"] > state["positive"] > 0
    assert 0 < graph_labels(tmp_path / "whole").sum() <= state["positive"]  # the positives the graphs keep


def test_a_rebuild_without_the_task_removes_its_labels_and_a_meds_build_writes_them(tmp_path):
    """labels.parquet is a task build's: a rebuild of the same folder without a task leaves none behind (no stale
    labels beside graphs of another task); a build written as MEDS holds it too, its subjects the shards'."""
    out = tmp_path / "out"
    assert build(SAMPLE, out, config_of("long_stay_3d")).exit_code == 0
    assert (out / "labels.parquet").is_file() and (out / "label_splits.parquet").is_file()
    assert build(SAMPLE, out, load_config()).exit_code == 0
    assert not (out / "labels.parquet").exists() and not (out / "label_splits.parquet").exists()
    meds = build(SAMPLE, tmp_path / "meds", config_of("long_stay_3d"), to="meds")
    labels = pq.read_table(tmp_path / "meds" / "labels.parquet").to_pandas()
    events = pd.read_parquet(tmp_path / "meds" / "data")
    assert meds.exit_code == 0 and len(labels) == built("sample", "long_stay_3d").report.attrition["task"]["labelled"]
    assert set(labels["subject_id"]) <= set(events["subject_id"])
    assert labels.equals(pq.read_table(built("sample", "long_stay_3d").out_dir / "labels.parquet").to_pandas())
