"""pipeline/meds on the output of a MEDS-Transforms stage: a folder ``normalization`` wrote (integer code, z in
numeric_value) is checked for its z, per code named through codes.parquet's vocabulary, and not as raw values;
``validate AFTER --compare BEFORE`` gives the ledger of rows, subjects and codes and names an emptied split and
silently dropped codes. Each on tests/meds.py's ``write_normalized`` (no MEDS-Transforms needed) and, where
``.venv-meds`` exists, on the real tool's output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.meds import validate_meds
from pipeline.meds.zscored import is_normalized
from tests import meds as fixture
from tests.bench.test_meds_transforms import MEDS_PYTHON, RUNNER
from tests.meds import PLANTED_CASES, NON_FINITE, write_meds, write_normalized

runner = CliRunner()
RAW_ONLY = {"meds_value_finite", "meds_value_bound", "meds_z_non_finite", "meds_z_noise", "meds_z_bound",
            "meds_code_unseen", "meds_code_mixed", "meds_schema"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("stage")
    before = write_meds(root / "before", PLANTED_CASES).root
    write_normalized(before, root / "normalized")
    return before, root / "normalized"


def _findings(run) -> dict[str, dict]:
    return {f["check"]: f for f in run.report.as_json()["findings"]}


def test_a_normalized_folder_is_told_by_its_integer_codes(folders):
    before, after = folders
    shards = lambda root: sorted((root / "data").rglob("*.parquet"))  # noqa: E731
    assert is_normalized(shards(after)) and not is_normalized(shards(before))


def test_normalized_z_non_finite_per_code_named_by_its_string(folders):
    run = validate_meds(folders[1], load_config())
    found = _findings(run)
    assert not RAW_ONLY & set(found), "normalized z are not raw values, and readiness is not run on them"
    assert run.ready is None
    bad = found["meds_normalized_non_finite"]
    assert bad["severity"] == "error" and bad["count"] == 10_197  # as MEDS-Transforms measured on these cases
    for code in NON_FINITE[:5]:
        assert code in bad["message"]
    assert "LAB//CANCELLATION//mg/dL (10,010 rows; NaN 446, inf 9,564; held_out 10, train 10,000)" in bad["message"]
    assert "+1 more" in bad["message"]  # SINGLE, the sixth
    assert run.exit_code == 1


def test_the_clean_fixture_normalized_is_ok(tmp_path):
    write_normalized(write_meds(tmp_path / "before").root, tmp_path / "after")
    run = validate_meds(tmp_path / "after", load_config())
    assert run.report.findings == [] and run.exit_code == 0
    assert run.report.summary[0][0].startswith("MEDS (normalized")


def test_a_z_beyond_warn_bound_is_a_warning(folders, tmp_path):
    config = tmp_path / "badpoints.toml"
    config.write_text("[scale]\nwarn_bound = 3\n")
    found = _findings(validate_meds(folders[1], load_config(config)))
    bound = found["meds_normalized_bound"]
    assert bound["severity"] == "warning" and bound["count"] == 4
    assert "LAB//50971//mEq/L (2 rows; largest |z| 3." in bound["message"]


def test_an_index_missing_from_the_vocabulary_is_named(folders, tmp_path):
    after = tmp_path / "after"
    write_normalized(folders[0], after)
    codes = pq.read_table(after / "metadata" / "codes.parquet")
    pq.write_table(codes.slice(1), after / "metadata" / "codes.parquet")  # drops vocab_index 1, ADMISSION//EMERGENCY
    found = _findings(validate_meds(after, load_config()))
    assert "vocab_index 1 (50 rows)" in found["meds_code_unlisted"]["message"]


def test_compare_ledger_and_codes_dropped_by_the_inner_join(folders):
    before, after = folders
    run = validate_meds(after, load_config(), compare=before)
    ledger = run.report.attrition["MEDS compare"]
    assert ledger["splits"]["held_out"] == {"rows_before": 205, "rows_after": 202, "subjects_before": 11,
                                            "subjects_after": 11}
    assert ledger["shards"]["train/1"] == {"rows_before": 5_400, "rows_after": 5_400}
    assert ledger["codes_dropped"] == {fixture.HELD_OUT_ONLY: 3}
    assert ledger["stages"] == ["fit_normalization", "fit_vocabulary_indices", "normalization"]
    dropped = _findings(run)["meds_compare_codes_dropped"]
    assert dropped["severity"] == "warning" and dropped["count"] == 3
    assert f"{fixture.HELD_OUT_ONLY} (3 rows)" in dropped["message"]
    assert "meds_compare_split_emptied" not in _findings(run)  # tuning was empty before


def test_a_filter_that_empties_a_split(tmp_path):
    before = write_meds(tmp_path / "before").root
    after = write_meds(tmp_path / "after", ("emptied_split",)).root
    (after / ".logs").mkdir()
    (after / ".logs" / "filter_subjects.done").touch()
    found = _findings(validate_meds(after, load_config(), compare=before))
    emptied = found["meds_compare_split_emptied"]
    assert emptied["severity"] == "error" and emptied["count"] == 140
    assert "split 'tuning' had 140 rows of 10 subjects" in emptied["message"]
    assert found["meds_split_empty"]["count"] == 10  # the folder alone says it too
    assert "meds_compare_codes_dropped" not in found  # a filter ran: the drop is declared


def test_the_report_is_the_same_whatever_the_workers(folders):
    before, after = folders
    runs = [validate_meds(after, load_config(), compare=before).report.as_json() for w in (1, 2, 1)]
    for report in runs[1:]:
        assert report["findings"] == runs[0]["findings"] and report["attrition"] == runs[0]["attrition"]


def test_the_cli_takes_compare(folders, tmp_path):
    before, after = folders
    result = runner.invoke(app, ["validate", str(after), "--compare", str(before), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 1
    assert "MEDS compare" in result.output and "held_out 205 -> 202 rows" in result.output
    assert "MEDS compare" in json.loads((tmp_path / "r.json").read_text())["attrition"]
    refused = runner.invoke(app, ["validate", str(after), "--compare", str(tmp_path)])
    assert refused.exit_code == 2 and "--compare takes two MEDS folders" in refused.output


@pytest.mark.skipif(not MEDS_PYTHON.is_file(), reason=f"MEDS-Transforms' environment not found at {MEDS_PYTHON}: "
                    "run `make meds-env`")
def test_the_real_normalization_output(folders, tmp_path):
    before, written = folders
    done = subprocess.run([str(MEDS_PYTHON), str(RUNNER), str(before), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout)
    run = validate_meds(tmp_path / "out", load_config(), compare=before)
    found = _findings(run)
    bad = found["meds_normalized_non_finite"]
    assert bad["count"] == sum(z["nan"] + z["posinf"] + z["neginf"] for z in measured["z"].values())
    for code in measured["non_finite_codes"][:5]:
        assert code in bad["message"]
    assert run.report.attrition["MEDS compare"]["codes_dropped"] == measured["dropped_by_code"]
    rows = run.report.attrition["MEDS compare"]["splits"]
    assert {s: (r["rows_before"], r["rows_after"]) for s, r in rows.items()} == {
        s: (r["in"], r["out"]) for s, r in measured["rows"].items()}
    # the fixture's writer makes the same findings as the real tool
    same = _findings(validate_meds(written, load_config(), compare=before))
    strip = lambda f: {k: v.replace(str(tmp_path / "out"), "AFTER").replace(str(written), "AFTER")  # noqa: E731
                       if isinstance(v, str) else v for k, v in f.items()}
    assert {c: strip(f) for c, f in found.items()} == {c: strip(f) for c, f in same.items()}
