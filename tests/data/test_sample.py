"""data/sample: the committed sample is exactly what its generator makes, and holds the quirks it promises."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


def _generator():
    spec = importlib.util.spec_from_file_location("sample_generate", SAMPLE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_reproduces_the_committed_sample_byte_for_byte(tmp_path):
    _generator().write_sample(tmp_path)
    for name in ("ADMISSIONS.csv", "D_LABITEMS.csv", "LABEVENTS.csv"):
        assert (tmp_path / name).read_bytes() == (SAMPLE / name).read_bytes(), name


def test_sample_is_small_and_holds_its_quirks():
    assert sum(p.stat().st_size for p in SAMPLE.glob("*.csv")) < 2_000_000
    events = pd.read_csv(SAMPLE / "LABEVENTS.csv")
    admissions = pd.read_csv(SAMPLE / "ADMISSIONS.csv", parse_dates=["ADMITTIME", "DISCHTIME"])
    assert events["HADM_ID"].isna().any()  # outpatient
    by_item = events.groupby("ITEMID")["VALUENUM"]
    assert (by_item.count() == 0).any()  # categorical items
    mixed = (by_item.count() > 0) & (by_item.count() < events.groupby("ITEMID").size())
    assert mixed.sum() >= 2
    assert events["VALUE"].str.startswith("<").any()
    assert set(events["FLAG"].dropna()) == {"abnormal", "delta"}
    assert (events["ITEMID"].value_counts() == 1).sum() >= 2
    normal = events[events["FLAG"].isna() & events["VALUENUM"].notna()]
    abnormal = events[events["FLAG"].eq("abnormal")]
    constant = normal.groupby("ITEMID")["VALUENUM"].agg(["std", "count"])
    differing = abnormal.groupby("ITEMID")["VALUENUM"].nunique()
    zero_std = constant[(constant["std"] == 0) & (constant["count"] > 1)].index
    assert any(differing.get(item, 0) > 1 for item in zero_std)
    single = constant[constant["count"] == 1].index
    assert any(differing.get(item, 0) > 1 for item in single)
    stays = events.dropna(subset=["HADM_ID"]).merge(admissions, on="HADM_ID")
    charted = pd.to_datetime(stays["CHARTTIME"])
    assert (charted < stays["ADMITTIME"]).any() and (charted > stays["DISCHTIME"]).any()
