"""bench/meds_bench.py at 20,000 lab rows: the synthetic MIMIC tables converted to MEDS, badpoints validate and
MEDS-Transforms' normalization (in ``.venv-meds``) each measured, and badpoints' predicted non-finite codes, rows
and dropped rows equal to what MEDS-Transforms makes; those skip where ``make meds-env`` has not been run. The
agreement rule, on hand-made results: a noise code may come out either way, nothing else may."""

from __future__ import annotations

import json

import meds
import pyarrow.parquet as pq
import pytest

from bench.meds_bench import agreement, meds_missing, run

needs_meds = pytest.mark.skipif(meds_missing() is not None, reason=str(meds_missing()))

STEP_FIELDS = {"seconds", "cpu_seconds", "tree_peak_rss_mb", "exit_code", "result"}
RESULT_FIELDS = {"non_finite_codes", "non_finite_rows", "rows_dropped"}
PREDICTED_FIELDS = RESULT_FIELDS | {"noise_codes", "noise_rows", "noise_rows_by_code"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("meds-bench")
    return out, run(rows=20_000, out=out)


@needs_meds
def test_the_json_has_every_field(bench):
    out, results = bench
    assert json.loads((out / "meds_bench.json").read_text()) == results
    assert results["events"] == results["converted"]["lab_rows"] + results["converted"]["admission_events"]
    assert results["converted"]["lab_rows"] == 20_000
    validate, normalization = results["steps"]
    assert validate["name"] == "meds_validate" and normalization["name"] == "meds_transforms"
    for step in (validate, normalization):
        assert STEP_FIELDS <= step.keys() and RESULT_FIELDS <= step["result"].keys() and step["seconds"] > 0
    assert PREDICTED_FIELDS <= validate["result"].keys()
    assert normalization["result"]["stages_seconds"] > 0 and results["ratio"] > 0
    assert set(results["targets"]) == {"validate / normalization wall", "validate peak RSS GB"}


@needs_meds
def test_badpoints_predicts_what_meds_transforms_makes(bench):
    _, results = bench
    ours, theirs = (step["result"] for step in results["steps"])
    assert ours["non_finite_codes"] == theirs["non_finite_codes"] != []  # the synthetic data has such codes
    assert ours["non_finite_rows"] == theirs["non_finite_rows"]
    assert ours["rows_dropped"] == theirs["rows_dropped"]
    assert results["agree"] == {"non_finite_codes": True, "non_finite_rows": True, "rows_dropped": True}
    flipped = sorted(set(ours["noise_codes"]) & set(theirs["non_finite_codes"]))
    assert results["differ"] == {"made_not_predicted": [], "predicted_not_made": [], "noise_made_non_finite": flipped}


@needs_meds
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


def _predicted(non_finite: dict[str, int], noise: dict[str, int]) -> dict:
    return {"non_finite_codes": sorted(non_finite), "non_finite_rows": sum(non_finite.values()),
            "noise_codes": sorted(noise), "noise_rows": sum(noise.values()), "noise_rows_by_code": noise,
            "rows_dropped": 3}


def _made(non_finite: dict[str, int], dropped: int = 3) -> dict:
    return {"non_finite_codes": sorted(non_finite), "non_finite_rows": sum(non_finite.values()),
            "rows_dropped": dropped}


def test_a_noise_code_may_come_out_either_way_and_nothing_else_may():
    ours = _predicted({"INF": 50, "ONE": 42}, {"TENTH": 42, "MILLION": 143_048})
    agree = {"non_finite_codes": True, "non_finite_rows": True, "rows_dropped": True}
    # the noise codes finite (as the reproduction's residue says), all NaN, or one of them (as at 27.8M events)
    for flipped in ({}, {"TENTH": 42, "MILLION": 143_048}, {"MILLION": 143_048}):
        found = agreement(ours, _made({"INF": 50, "ONE": 42, **flipped}))
        assert found == {"agree": agree, "differ": {"made_not_predicted": [], "predicted_not_made": [],
                                                    "noise_made_non_finite": sorted(flipped)}}
    # a code made non-finite that is neither predicted non-finite nor noise, a predicted one not made so
    found = agreement(ours, _made({"INF": 50, "OTHER": 7}))
    assert found["agree"] == {**agree, "non_finite_codes": False, "non_finite_rows": False}
    assert found["differ"] == {"made_not_predicted": ["OTHER"], "predicted_not_made": ["ONE"],
                               "noise_made_non_finite": []}
    # the right codes with the wrong rows, or other dropped rows
    assert agreement(ours, _made({"INF": 50, "ONE": 41}))["agree"]["non_finite_rows"] is False
    assert agreement(ours, _made({"INF": 50, "ONE": 42, "TENTH": 40}))["agree"]["non_finite_rows"] is False
    assert agreement(ours, _made({"INF": 50, "ONE": 42}, dropped=0))["agree"]["rows_dropped"] is False
