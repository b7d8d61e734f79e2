"""bench/meds_bench.py at 20,000 lab rows: the synthetic MIMIC tables converted to MEDS, badpoints validate and
MEDS-Transforms' normalization (in ``.venv-meds``) each measured, and badpoints' predicted non-finite codes, rows
and dropped rows equal to what MEDS-Transforms makes. Skips where ``make meds-env`` has not been run."""

from __future__ import annotations

import json

import meds
import pyarrow.parquet as pq
import pytest

from bench.meds_bench import meds_missing, run

pytestmark = pytest.mark.skipif(meds_missing() is not None, reason=str(meds_missing()))

STEP_FIELDS = {"seconds", "cpu_seconds", "tree_peak_rss_mb", "exit_code", "result"}
RESULT_FIELDS = {"non_finite_codes", "non_finite_rows", "rows_dropped"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("meds-bench")
    return out, run(rows=20_000, out=out)


def test_the_json_has_every_field(bench):
    out, results = bench
    assert json.loads((out / "meds_bench.json").read_text()) == results
    assert results["events"] == results["converted"]["lab_rows"] + results["converted"]["admission_events"]
    assert results["converted"]["lab_rows"] == 20_000
    validate, normalization = results["steps"]
    assert validate["name"] == "meds_validate" and normalization["name"] == "meds_transforms"
    for step in (validate, normalization):
        assert STEP_FIELDS <= step.keys() and RESULT_FIELDS <= step["result"].keys() and step["seconds"] > 0
    assert normalization["result"]["stages_seconds"] > 0 and results["ratio"] > 0
    assert set(results["targets"]) == {"validate / normalization wall", "validate peak RSS GB"}


def test_badpoints_predicts_what_meds_transforms_makes(bench):
    _, results = bench
    ours, theirs = (step["result"] for step in results["steps"])
    assert ours["non_finite_codes"] == theirs["non_finite_codes"] != []  # the synthetic data has such codes
    assert ours["non_finite_rows"] == theirs["non_finite_rows"]
    assert ours["rows_dropped"] == theirs["rows_dropped"]
    assert results["agree"] == {"non_finite_codes": True, "non_finite_rows": True, "rows_dropped": True}


def test_the_dataset_is_meds(bench):
    out, _ = bench
    root = out / "meds"
    shards = sorted((root / "data").rglob("*.parquet"))
    assert {p.parent.name for p in shards} == {meds.train_split, meds.tuning_split, meds.held_out_split}
    for path in shards:
        table = pq.read_table(path)
        assert table.schema.equals(meds.DataSchema.schema())
        assert table.sort_by([("subject_id", "ascending"), ("time", "ascending")]).equals(table)
    splits = pq.read_table(root / meds.subject_splits_filepath)
    assert splits.schema.equals(meds.SubjectSplitSchema.schema())
    codes = pq.read_table(root / meds.code_metadata_filepath)["code"].to_pylist()
    assert all(code.startswith(("LAB//", "HOSPITAL_ADMISSION//", "HOSPITAL_DISCHARGE//")) for code in codes)
    assert json.loads((root / meds.dataset_metadata_filepath).read_text())["meds_version"] == meds.__version__
