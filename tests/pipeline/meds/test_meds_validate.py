"""pipeline/meds: ``badpoints validate`` on tests/meds.py's MEDS fixture names every planted case (its check, and
the code or subject in the message), is silent on the clean fixture, gives the same report whatever the shard
order or the workers, refuses what it cannot read (exit 2), and renders its JSON, JUnit and HTML forms."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.reporting.html import render
from pipeline.reporting.junit import junit_xml
from pipeline.engines import parts_engine
from pipeline.meds import is_meds, validate_meds
from tests import meds as fixture
from tests.meds import PLANTED_CASES, NON_FINITE, write_meds

runner = CliRunner()

# check -> what its message must name, on write_meds(PLANTED_CASES)
NAMED = {
    "meds_z_non_finite": [fixture.CANCELLATION, fixture.INF_INPUT, fixture.LARGE_OFFSET, fixture.CONSTANT,
                          fixture.CONSTANT_TENTH],  # SINGLE is the sixth: past LISTED, in the readiness table
    "meds_subject_order": [str(fixture.UNSORTED_SUBJECT)],
    "meds_subject_shards": [str(fixture.SHARD_SPLIT_SUBJECT), str(fixture.SPLIT_SPLIT_SUBJECT)],
    "meds_subject_split": [str(fixture.SPLIT_SPLIT_SUBJECT)],
    "meds_value_finite": [fixture.INF_INPUT],
    "meds_split_empty": ["'tuning'"],
    "meds_code_unlisted": [fixture.NOT_IN_CODES],
    "meds_code_mixed": [fixture.MIXED],
    "meds_code_unseen": [fixture.HELD_OUT_ONLY],
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("meds") / "planted"
    write_meds(root, PLANTED_CASES)
    return root


@pytest.fixture(scope="module")
def planted_run(planted):
    return validate_meds(planted, load_config())


def test_a_folder_with_data_and_metadata_is_meds(planted, tmp_path):
    assert is_meds(planted) and not is_meds(tmp_path)


def test_every_planted_case_is_named(planted_run):
    findings = {f["check"]: f for f in planted_run.report.as_json()["findings"]}
    assert set(findings) == set(NAMED)
    for check, names in NAMED.items():
        for name in names:
            assert name in findings[check]["message"], (check, name)
    assert planted_run.exit_code == 1
    # The message names five codes; the JSON keeps every one, the sixth (SINGLE) too.
    non_finite = findings["meds_z_non_finite"]
    assert sorted(non_finite["items"]) == NON_FINITE and "+1 more in the JSON report" in non_finite["message"]


def test_the_readiness_names_exactly_the_non_finite_codes_with_why(planted_run):
    ready = planted_run.ready
    assert sorted(ready.index[ready["non_finite"] > 0]) == NON_FINITE
    assert "one train value" in ready.loc[fixture.SINGLE, "why"]
    assert "all 40 train values equal: variance 0, exactly" in ready.loc[fixture.CONSTANT, "why"]
    assert "is 0 here, a rounding residue, whose sign is not reliable" in ready.loc[fixture.CONSTANT_TENTH, "why"]
    assert not ready["noise"].any()  # float32 arithmetic: 0.1's residue rounds to 0 here
    assert "cancellation" in ready.loc[fixture.CANCELLATION, "why"] and "0.00579" in ready.loc[fixture.CANCELLATION, "why"]
    assert "inf value in train" in ready.loc[fixture.INF_INPUT, "why"]
    assert ready.loc[fixture.CANCELLATION, "non_finite"] == 10_010  # every row: 4,763 +inf, 4,801 -inf, 446 NaN


def test_many_values_makes_a_constant_finite_and_huge(tmp_path):
    """Past 65,535 values the arithmetic is float64: CONSTANT_TENTH's residue gives finite z of noise, |z| 3,344
    (meds_z_noise, an error, and only there); MANY's held_out outlier is a real |z| past 100 (meds_z_bound)."""
    write_meds(tmp_path, fixture.CASES)
    run = validate_meds(tmp_path, load_config())
    found = {f.check: f for f in run.report.findings}
    noise, bound = found["meds_z_noise"], found["meds_z_bound"]
    assert noise.severity == "error" and noise.items == [fixture.CONSTANT_TENTH] and noise.count == 42
    assert f"{fixture.CONSTANT_TENTH} (42 rows; largest |z| 3,344; all 40 train values equal" in noise.message
    assert "is 8.94e-10 here, a rounding residue (std 2.99e-05)" in noise.message
    assert bound.items == [fixture.MANY] and fixture.CONSTANT_TENTH not in bound.message
    assert f"{fixture.MANY} (70,001 rows; |z| 1,0" in bound.message
    ready = run.ready
    assert list(ready.index[ready["noise"]]) == [fixture.CONSTANT_TENTH]
    assert fixture.CONSTANT_TENTH not in ready.index[ready["non_finite"] > 0]
    assert fixture.CONSTANT_TENTH not in found["meds_z_non_finite"].items
    # LARGE_OFFSET's equal values get a negative residue here: non-finite, and its why says the sign may turn
    assert "whose sign is not reliable" in ready.loc[fixture.LARGE_OFFSET, "why"]


def test_the_clean_fixture_is_ok(tmp_path):
    write_meds(tmp_path, ())
    run = validate_meds(tmp_path, load_config())
    assert run.report.findings == [] and run.report.status == "ok" and run.exit_code == 0
    assert run.report.attrition["MEDS"]["splits"]["train"] == {"shards": 2, "rows": 560, "subjects": 40}


def test_the_report_is_the_same_whatever_the_shard_order_and_workers(planted, tmp_path):
    one = validate_meds(planted, load_config()).report.as_json()  # the pandas engine: this process
    with parts_engine(workers=2) as engine:
        two = validate_meds(planted, load_config(), engine=engine).report.as_json()
    assert json.dumps(one) == json.dumps(two)
    moved = tmp_path / "moved"  # the same shards under other names: train/1 read first, as 0
    shutil.copytree(planted, moved)
    data = moved / "data" / "train"
    (data / "0.parquet").rename(data / "x.parquet")
    (data / "1.parquet").rename(data / "0.parquet")
    (data / "x.parquet").rename(data / "1.parquet")
    again = validate_meds(moved, load_config()).report.as_json()
    assert [(f["check"], f["count"]) for f in again["findings"]] == [(f["check"], f["count"]) for f in one["findings"]]


def test_a_shard_meds_refuses_is_named_with_its_reason(tmp_path):
    write_meds(tmp_path, ())
    shard = tmp_path / "data" / "held_out" / "0.parquet"
    table = pq.read_table(shard)
    codes = table["code"].to_pylist()
    codes[3] = None
    pq.write_table(table.set_column(2, "code", pa.array(codes, pa.string())), shard)
    run = validate_meds(tmp_path, load_config())
    (finding,) = run.report.findings
    assert (finding.check, finding.table, finding.count, finding.severity) == ("meds_schema", "held_out/0", 1, "error")
    assert "code" in finding.message and "rows were not checked further" in finding.message
    assert run.exit_code == 1


def test_no_shard_or_an_unreadable_one_cannot_run(tmp_path):
    (tmp_path / "empty" / "data").mkdir(parents=True)
    (tmp_path / "empty" / "metadata").mkdir()
    (finding,) = validate_meds(tmp_path / "empty", load_config()).report.findings
    assert finding.check == "file_missing" and "no .parquet shard" in finding.message
    write_meds(tmp_path / "broken", ())
    (tmp_path / "broken" / "data" / "train" / "1.parquet").write_bytes(b"not parquet")
    run = validate_meds(tmp_path / "broken", load_config())
    assert [(f.check, f.table) for f in run.report.findings] == [("file_unreadable", "train/1")]
    assert run.exit_code == 2


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("meds") / "clean"
    write_meds(root, ())
    return root


def _train_emptied(train: Path) -> None:
    for shard in train.glob("*.parquet"):
        pq.write_table(pq.read_table(shard).slice(0, 0), shard)


def _train_ids_as_text(train: Path) -> None:
    for shard in train.glob("*.parquet"):
        table = pq.read_table(shard)
        pq.write_table(table.set_column(0, "subject_id", table["subject_id"].cast(pa.string())), shard)


@pytest.mark.parametrize(("breaking", "found"), [
    (_train_emptied, ("meds_split_empty", "train")),
    (shutil.rmtree, ("meds_split_empty", "train")),  # subject_splits.parquet still names the train subjects
    (_train_ids_as_text, ("meds_schema", "train/0")),
])
def test_a_dataset_with_nothing_to_fit_is_reported_with_exit_1(clean, tmp_path, breaking, found):
    """No train row to fit on (train shards of 0 rows, no train/ folder, or train shards meds' DataSchema refuses):
    the findings docs/meds.md gives, exit 1, and nothing predicted for normalization."""
    root = tmp_path / "meds"
    shutil.copytree(clean, root)
    breaking(root / "data" / "train")
    run = validate_meds(root, load_config())
    assert found in [(f.check, f.table) for f in run.report.findings]
    assert run.exit_code == 1 and run.ready is not None and run.ready.empty


def test_a_shard_that_is_a_fifo_is_file_unreadable_naming_it_and_never_waited_on(clean, tmp_path):
    """A FIFO among the shards: exit 2 at once, the finding naming the file and what it is. A reader that waits on
    it would be let go by a writer every 5 s, and read nothing."""
    root = tmp_path / "meds"
    shutil.copytree(clean, root)
    fifo = root / "data" / "train" / "2.parquet"
    os.mkfifo(fifo)
    stop = threading.Event()

    def unblock() -> None:
        while not stop.wait(5):
            with contextlib.suppress(OSError):  # ENXIO: nobody waits on it
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=unblock, daemon=True).start()
    try:
        run = validate_meds(root, load_config())
    finally:
        stop.set()
    (finding,) = run.report.findings
    assert (finding.check, finding.table, run.exit_code) == ("file_unreadable", "train/2", 2)
    assert str(fifo) in finding.message and "not a regular file but a FIFO (named pipe)" in finding.message


def test_a_long_code_costs_its_bytes_once_and_a_message_shows_its_opening(tmp_path):
    """A code of 100,000 characters on 3 rows beside 400 one-row codes: a fixed-width string array of every code
    (codes x longest x 4 bytes) took 320 MB here, 3.9 GB at 1 MB, and the message printed the code whole."""
    long, n = "B" * 100_000, 403
    codes = [long] * 3 + [f"LAB//{i}//U" for i in range(n - 3)]
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "metadata").mkdir()
    pq.write_table(pa.table({
        "subject_id": pa.array([1] * n, pa.int64()),
        "time": pa.array(np.arange(n).astype("datetime64[m]").astype("datetime64[us]"), pa.timestamp("us")),
        "code": pa.array(codes, pa.string()), "numeric_value": pa.array(np.arange(n) % 7, pa.float32()),
        "text_value": pa.nulls(n, pa.large_string())}), tmp_path / "data" / "train" / "0.parquet")
    pq.write_table(pa.table({"code": pa.array(codes[3:], pa.string())}), tmp_path / "metadata" / "codes.parquet")
    tracemalloc.start()
    try:
        run = validate_meds(tmp_path, load_config())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2 ** 20, f"{peak:,} bytes"
    (unlisted,) = [f for f in run.report.findings if f.check == "meds_code_unlisted"]
    assert unlisted.items == [long] and f"{'B' * 80}… (100,000 characters) (3 rows)" in unlisted.message
    assert max(len(f.message) for f in run.report.findings) < 2_000


def test_the_cli_writes_every_form(planted, tmp_path):
    out = runner.invoke(app, ["validate", str(planted), "--json", str(tmp_path / "r.json"), "--junit",
                              str(tmp_path / "j.xml"), "--html", str(tmp_path / "r.html")])
    assert out.exit_code == 1, out.output
    assert "meds/meds_z_non_finite" in out.output and "status: errors (6 errors, 3 warnings, 0 notes)" in out.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "errors" and [i["table"] for i in report["inputs"]] == [
        "held_out/0", "train/0", "train/1", "tuning/0"]
    assert report["attrition"]["MEDS"]["splits"]["tuning"]["rows"] == 0
    assert '<testcase classname="meds" name="meds_z_non_finite"' in (tmp_path / "j.xml").read_text()
    assert "meds_z_non_finite" in (tmp_path / "r.html").read_text()
    built = runner.invoke(app, ["build", str(planted), "--out", str(tmp_path / "out")])
    assert built.exit_code == 2 and "MEDS dataset" in built.output


def test_html_and_junit_render_a_findings_only_run(planted_run):
    page = render(planted_run, load_config())
    assert "status: errors" in page and fixture.CANCELLATION in page
    assert b"failures=\"6\"" in junit_xml(planted_run.report)

