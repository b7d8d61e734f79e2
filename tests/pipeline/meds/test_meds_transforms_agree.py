"""The validator's prediction against the real MEDS-Transforms 0.7.0 (bench/meds_transforms.py in ``.venv-meds``):
the codes ``badpoints validate`` names as non-finite are exactly those whose z the tool writes NaN or inf, with the
same rows, its noise codes come out finite with the largest |z| it predicts, and the codes it names as unseen are
those whose rows the tool drops. Skips without ``.venv-meds``."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipeline.config import load_config
from pipeline.meds import validate_meds
from tests.bench.test_meds_transforms import MEDS_PYTHON, RUNNER
from tests.meds import CASES, CONSTANT_TENTH, PLANTED_CASES, write_meds

pytestmark = pytest.mark.skipif(not MEDS_PYTHON.is_file(), reason=f"MEDS-Transforms' environment not found at "
                                f"{MEDS_PYTHON}: run `make meds-env`")


@pytest.mark.parametrize("cases", [PLANTED_CASES, tuple(CASES)], ids=["planted", "many_values"])
def test_validate_names_the_codes_meds_transforms_makes_non_finite(tmp_path, cases):
    write_meds(tmp_path / "meds", cases)
    done = subprocess.run([str(MEDS_PYTHON), str(RUNNER), str(tmp_path / "meds"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout)
    run = validate_meds(tmp_path / "meds", load_config())
    ready = run.ready
    named = ready[ready["non_finite"] > 0]
    assert sorted(named.index) == measured["non_finite_codes"]
    for code, z in measured["z"].items():
        assert (ready.loc[code, "non_finite"] if code in ready.index else 0) == z["nan"] + z["posinf"] + z["neginf"]
    # A noise code (all train values equal, a positive residue): here MEDS-Transforms' z are finite, the largest as
    # readiness says (CONSTANT_TENTH with many_values; none on the planted cases, in float32).
    noise = ready[ready["noise"]]
    assert list(noise.index) == ([CONSTANT_TENTH] if "many_values" in cases else [])
    for code, largest in noise["z_max"].items():
        assert measured["z"][code]["max_abs_finite"] == pytest.approx(largest, rel=1e-6)
    unseen = [f for f in run.report.findings if f.check == "meds_code_unseen"]
    assert sum(f.count for f in unseen) == measured["rows_dropped"]
    for code in measured["dropped_by_code"]:
        assert code in unseen[0].message
