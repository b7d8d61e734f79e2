"""``badpoints check LABELS --meds MEDS_DIR`` (pipeline/meds/labels.py): a MEDS label file against its MEDS dataset,
on tests/meds_labels.py's fixture (one leak planted per case, a clean file that passes) and on a real build of the
sample written as MEDS with a task (its labels.parquet beside the shards it was made with)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.builds import build
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.meds.labels import check_labels, read_labels
from schemas.catalogue import CHECKS
from tests.corpus import Dataset
from tests.meds import SPLIT_SPLIT_SUBJECT
from tests.meds_labels import DEATH, EARLY, LABEL_CASES, LATE, SEEN, UNKNOWN, write_labels

runner = CliRunner()
NAMED = {"after_last_event": f"{LATE} at ", "no_history": f"{EARLY} at ", "unknown_subject": f"{UNKNOWN} at ",
         "split": f"{SPLIT_SPLIT_SUBJECT} (held_out, train", "label_code_seen": f"{SEEN} at ",
         "schema": "prediction_time (want timestamp[us], got string)"}


def checked(fixture, codes=(DEATH,)):
    return check_labels(fixture.labels, fixture.meds, load_config(), codes=codes)


def test_labels_without_a_plant_pass(tmp_path):
    run = checked(write_labels(tmp_path))
    assert run.exit_code == 0 and run.report.findings == []
    assert run.report.attrition["MEDS labels"] == {"labels": 60, "subjects": 60,
                                                   "splits": {"held_out": 10, "train": 40, "tuning": 10}}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_each_planted_leak_is_named_by_its_check(tmp_path, case):
    check, _ = LABEL_CASES[case]
    run = checked(write_labels(tmp_path, [case]))
    (finding,) = run.report.findings
    assert (finding.check, finding.severity, finding.count) == (check, CHECKS[check].severity, 1)
    assert NAMED[case] in finding.message
    assert run.exit_code == (1 if CHECKS[check].severity == "error" else 0)


def test_the_label_code_is_checked_only_when_named(tmp_path):
    fixture = write_labels(tmp_path, ["label_code_seen"])
    assert checked(fixture, codes=()).report.findings == []
    assert [f.check for f in checked(fixture, codes=("MEDS_BIRTH",)).report.findings] == ["meds_label_code_seen"]


def test_a_label_code_with_no_time_is_seen_at_every_prediction_time(tmp_path):
    fixture = write_labels(tmp_path)
    shard = fixture.meds / meds.data_subdirectory / "tuning" / "0.parquet"
    table = pq.read_table(shard)
    static = pa.table({"subject_id": pa.array([2001], pa.int64()), "time": pa.nulls(1, pa.timestamp("us")),
                       "code": pa.array(["GENDER//F"]), "numeric_value": pa.nulls(1, pa.float32()),
                       "text_value": pa.nulls(1, pa.large_string())}, schema=table.schema)
    pq.write_table(pa.concat_tables([static, table]), shard)
    (finding,) = checked(fixture, codes=("GENDER//F",)).report.findings
    assert finding.check == "meds_label_code_seen" and "2001 at " in finding.message
    assert "with no time (static)" in finding.message


def test_every_planted_leak_at_once_is_one_finding_per_check(tmp_path):
    cases = [case for case in LABEL_CASES if case != "schema"]
    fixture = write_labels(tmp_path, cases)
    run = checked(fixture)
    assert sorted(f.check for f in run.report.findings) == sorted(LABEL_CASES[c][0] for c in cases)
    assert run.exit_code == 1
    late = next(f for f in run.report.findings if f.check == "meds_label_after_last_event")
    row = int(np.flatnonzero(fixture.frame["subject_id"] == LATE)[0])  # its row in the label file
    assert late.items == [f"{LATE} at 2130-01-05T10:00:00"] and late.lines == [row]


def test_without_subject_splits_a_labels_split_is_the_split_of_its_subjects_shards(tmp_path):
    fixture = write_labels(tmp_path, ["split"])
    (fixture.meds / meds.subject_splits_filepath).unlink()
    run = checked(fixture)
    (finding,) = run.report.findings
    assert (finding.check, finding.items) == ("meds_label_split", [SPLIT_SPLIT_SUBJECT])
    assert run.report.attrition["MEDS"]["splits"]["train"]["subjects"] == 40


def test_a_label_file_under_another_split_than_its_subject_is_a_split_finding(tmp_path):
    fixture = write_labels(tmp_path)
    folder = tmp_path / "labels"
    labels = pq.read_table(fixture.labels).to_pandas()
    split_of = pd.cut(labels["subject_id"], [0, 2000, 3000, 4000], labels=["train", "tuning", "held_out"])
    for split, rows in labels.groupby(split_of.astype(str)):
        (folder / split).mkdir(parents=True)
        moved = pd.concat([rows, labels[labels["subject_id"] == 1001]]) if split == "held_out" else rows
        pq.write_table(pa.Table.from_pandas(moved, schema=pq.read_schema(fixture.labels), preserve_index=False),
                       folder / split / "0.parquet")
    run = check_labels(folder, fixture.meds, load_config())
    (finding,) = run.report.findings
    assert (finding.check, finding.count, finding.items) == ("meds_label_split", 1, [1001])
    assert "1001 (held_out, train; 2 label(s))" in finding.message


@pytest.mark.parametrize("breaking, column, said", [
    (lambda t: t.set_column(0, "subject_id", pa.array([None] + t["subject_id"].to_pylist()[1:], pa.int64())),
     "subject_id", "1 label(s) with a null subject_id (rows 0)"),
    (lambda t: t.append_column("split", pa.array(["train"] * t.num_rows)), None, "Disallowed extra columns: split"),
    (lambda t: t.drop_columns(["prediction_time"]), None, "Missing required columns: prediction_time"),
    (lambda t: t.set_column(1, "prediction_time", t["prediction_time"].cast(pa.timestamp("ns"))), None,
     "prediction_time (want timestamp[us], got timestamp[ns])"),
], ids=["null_subject", "extra_column", "no_prediction_time", "nanoseconds"])
def test_a_label_file_not_in_meds_label_schema_names_the_column(tmp_path, breaking, column, said):
    fixture = write_labels(tmp_path)
    pq.write_table(breaking(pq.read_table(fixture.labels)), fixture.labels)
    run = checked(fixture)
    (finding,) = run.report.findings
    assert (finding.check, finding.column, run.exit_code) == ("meds_label_schema", column, 1)
    assert said in finding.message


def test_what_cannot_be_read_is_exit_2(tmp_path):
    fixture = write_labels(tmp_path)
    (tmp_path / "not.parquet").write_text("subject_id,prediction_time\n1,2\n")
    cases = {"missing labels": (tmp_path / "none.parquet", fixture.meds, "file_missing"),
             "not MEDS": (fixture.labels, tmp_path, "file_missing"),
             "not Parquet": (tmp_path / "not.parquet", fixture.meds, "file_unreadable")}
    for what, (labels, root, check) in cases.items():
        run = check_labels(labels, root, load_config())
        assert run.exit_code == 2 and check in {f.check for f in run.report.findings}, what
    shutil.copy(tmp_path / "not.parquet", fixture.meds / meds.data_subdirectory / "train" / "0.parquet")
    run = check_labels(fixture.labels, fixture.meds, load_config())
    assert run.exit_code == 2 and [f.table for f in run.report.findings] == ["train/0"]


def test_only_the_columns_a_check_reads_are_read(tmp_path):
    fixture = write_labels(tmp_path)
    read = read_labels(fixture.labels, {"train"}, max_lines=20)
    assert list(read.labels.columns) == ["subject_id", "prediction_time", "split"]
    assert read.labels["prediction_time"].dtype == np.int64


def test_the_cli_reports_as_every_check_does(tmp_path):
    fixture = write_labels(tmp_path, ["after_last_event", "no_history"])
    args = ["check", str(fixture.labels), "--meds", str(fixture.meds), "--label-code", DEATH, "--json",
            str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"), "--html", str(tmp_path / "r.html")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert {f["check"]: f["severity"] for f in report["findings"]} == {"meds_label_after_last_event": "error",
                                                                       "meds_label_no_history": "warning"}
    assert 'name="meds_label_after_last_event"' in (tmp_path / "j.xml").read_text()
    assert "meds_label_no_history" in (tmp_path / "r.html").read_text()
    assert "labels    61 labels" not in result.output and "60 labels of 60 subjects" in result.output
    clean = write_labels(tmp_path / "clean")
    assert runner.invoke(app, ["check", str(clean.labels), "--meds", str(clean.meds)]).exit_code == 0


# -- a real build: the sample as MEDS with a task, its labels beside the shards they were made from ---------------
@pytest.fixture(scope="module")
def task_build(tmp_path_factory):
    folder = tmp_path_factory.mktemp("task_meds")
    Dataset.sample().write(folder / "data")
    built = build(folder / "data", folder / "out", load_config(task="long_stay_3d"), to="meds")
    assert built.out_dir is not None
    return built.out_dir


def test_a_task_built_as_meds_checks_clean_against_its_own_shards(task_build):
    run = check_labels(task_build / "labels.parquet", task_build, load_config(),
                       codes=("HOSPITAL_DISCHARGE//DEAD/EXPIRED",))
    assert run.exit_code == 0 and run.report.findings == [], [f.message for f in run.report.findings]
    labels = pq.read_table(task_build / "labels.parquet").to_pandas()
    named = pq.read_table(task_build / meds.subject_splits_filepath).to_pandas().set_index("subject_id")["split"]
    per_split = labels["subject_id"].map(named).value_counts().sort_index()  # every subject named, in one split
    assert run.report.attrition["MEDS labels"]["splits"] == {k: int(v) for k, v in per_split.items()}
    assert sum(per_split) == len(labels) == run.report.attrition["MEDS labels"]["labels"]


def test_a_label_moved_past_its_subjects_record_is_named_on_the_real_build(task_build, tmp_path):
    table = pq.read_table(task_build / "labels.parquet")
    times = table["prediction_time"].to_numpy().copy()
    times[3] = times[3] + np.timedelta64(3650, "D")
    moved = table.set_column(1, "prediction_time", pa.array(times, pa.timestamp("us")))
    pq.write_table(moved.cast(table.schema), tmp_path / "labels.parquet")
    run = check_labels(tmp_path / "labels.parquet", task_build, load_config())
    (finding,) = run.report.findings
    assert (finding.check, finding.count, finding.lines) == ("meds_label_after_last_event", 1, [3])
    assert finding.items == [f"{table['subject_id'][3].as_py()} at "
                             f"{np.datetime_as_string(times[3].astype('datetime64[us]'), unit='s')}"]
