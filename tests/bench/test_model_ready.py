"""bench/model_ready.py, and the "model-ready" targets it prints, held on the real MIMIC-III demo in both layouts:
MIMIC-III's (``ADMISSIONS.csv``) and MIMIC-IV's (``hosp/*.csv.gz``, lower-case headers, ``race``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.model_ready import figures, main
from pipeline import build, load_config
from pipeline.flow import validate
from pipeline.stages import scale
from tests.mimic4 import in_mimic4_layout

ED_ADMISSION = 160442  # its labs were all drawn in the ED, 1.8 to 2.3 h before ADMITTIME, the evening before


@pytest.fixture(scope="module", params=["mimic3", "mimic4"])
def demo(request, mimic3demo, tmp_path_factory) -> tuple[Path, Path]:
    """The demo in one layout, and its default build."""
    root = tmp_path_factory.mktemp(request.param)
    data = mimic3demo if request.param == "mimic3" else in_mimic4_layout(mimic3demo, root / "data")
    built = build(data, root / "out", load_config())
    assert built.exit_code == 0
    return data, root / "out"


def test_a_default_build_hands_the_model_bounded_z_and_every_admission(demo):
    _, out = demo
    found = figures(out)
    assert found["max_abs_z"] <= 10 and found["share_over_10"] == 0  # 1,113 and 3.7% with the raw z
    assert found["admissions_in_graphs"] == 129  # 128 before the ED stay's labs were kept
    assert found["admission_x_known_after"] == [] and found["admission_x"]
    assert found["marked"]["Z_BOUNDED"] > 0 and found["marked"]["Z_CENSORED"] > 0 and found["marked"]["Z_UNSEEN"] > 0
    index = pd.read_parquet(out / "index.parquet")
    assert ED_ADMISSION in set(index["HADM_ID"])


def test_no_item_breaks_the_order_of_its_values_and_every_bounded_value_is_marked(demo):
    data, _ = demo
    prepared = validate(data, load_config()).prepared
    edges, stats = prepared.edges, prepared.fitted["scale"]
    numbers = edges[edges["VALUENUM"].notna()]
    ordered = numbers.sort_values(["ITEMID", "VALUENUM", "Z"], kind="stable")
    assert (ordered.groupby("ITEMID")["Z"].diff().dropna() >= 0).all()
    _, _, unbounded = scale.scaled(numbers, stats)  # the z before any bound
    changed = (unbounded - numbers["Z"]).abs() > 1e-12
    assert (changed == (numbers["Z_BOUNDED"] == 1)).all()  # marked exactly where a bound changed the value
    (counted,) = [f for f in prepared.findings if f.check == "z_bounded"]
    assert counted.count >= int(numbers["Z_BOUNDED"].sum()) > 0  # counted before dedup merged some rows


def test_main_prints_each_builds_figures(demo, capsys):
    _, out = demo
    assert main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(str(out)) and '"max_abs_z"' in printed
