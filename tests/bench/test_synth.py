"""bench/synth/: seeded, MIMIC-III-shaped, and valid data at any scale."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import load_config, validate
from bench.synth import main, write_synthetic
from bench.synth.shape import N_ITEMS, OUTPATIENT_SHARE, ROWS_PER_ADMISSION, SHAPES, Shape

ROWS = 20_000
CSVS = ("ADMISSIONS.csv", "D_LABITEMS.csv", "LABEVENTS.csv")


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    write_synthetic(out, rows=ROWS, seed=7)
    return out


@pytest.fixture(scope="module")
def tables(synth):
    lab = pd.read_csv(synth / "LABEVENTS.csv", dtype=str, keep_default_na=False, na_values=[""])
    adm = pd.read_csv(synth / "ADMISSIONS.csv", dtype=str, keep_default_na=False, na_values=[""])
    items = pd.read_csv(synth / "D_LABITEMS.csv", dtype=str, keep_default_na=False, na_values=[""])
    info = json.loads((synth / "synth.json").read_text())
    return lab.astype({"ITEMID": "int64"}), adm, items, info


def test_same_seed_same_bytes_other_seed_other_bytes(synth, tmp_path):
    main([str(tmp_path / "again"), "--rows", str(ROWS), "--seed", "7"])  # the command line, too
    for name in CSVS:
        assert (tmp_path / "again" / name).read_bytes() == (synth / name).read_bytes(), name
    write_synthetic(tmp_path / "other", rows=ROWS, seed=8)
    assert (tmp_path / "other" / "LABEVENTS.csv").read_bytes() != (synth / "LABEVENTS.csv").read_bytes()


def test_columns_and_formats_are_the_samples(synth, sample_dir):
    for name in CSVS:
        ours = (synth / name).read_text().splitlines()
        theirs = (sample_dir / name).read_text().splitlines()
        assert ours[0] == theirs[0], name
    raw = (synth / "LABEVENTS.csv").read_bytes()
    assert b"\r" not in raw and b'"' not in raw and raw.endswith(b"\n")
    lab = pd.read_csv(synth / "LABEVENTS.csv", dtype=str, keep_default_na=False)
    assert lab["CHARTTIME"].str.fullmatch(r"2[12]\d\d-\d\d-\d\d \d\d:\d\d:00").all()
    assert lab["ROW_ID"].astype(int).tolist() == list(range(1, ROWS + 1))


def test_shaped_like_mimic(tables):
    lab, adm, items, info = tables
    assert len(lab) == ROWS and len(items) == N_ITEMS and items["ITEMID"].is_unique
    assert 0.8 * ROWS_PER_ADMISSION < len(lab) / len(adm) < 1.2 * ROWS_PER_ADMISSION
    assert adm["SUBJECT_ID"].nunique() < len(adm) and adm["HADM_ID"].is_unique
    outpatient = lab["HADM_ID"].isna()
    assert outpatient.mean() == pytest.approx(OUTPATIENT_SHARE, abs=0.01)
    assert lab.loc[outpatient, "SUBJECT_ID"].notna().all()

    # Skewed popularity: the top 10% of items hold most rows, and many items are rare.
    counts = lab["ITEMID"].value_counts()
    assert counts.iloc[: N_ITEMS // 10].sum() > 0.75 * ROWS
    assert 0.02 < counts.iloc[0] / ROWS < 0.06
    assert (counts <= 5).sum() > 100

    assert set(lab["FLAG"].dropna()) == {"abnormal", "delta"}
    assert 0.15 < lab["FLAG"].eq("abnormal").mean() < 0.4 and lab["FLAG"].isna().mean() > 0.5


def test_numeric_categorical_and_mixed_items(tables):
    lab, _, _, info = tables
    has_number = lab["VALUENUM"].notna().groupby(lab["ITEMID"]).mean()
    assert (has_number == 1).sum() > 300
    categorical = has_number.index[has_number == 0]
    mixed = has_number.index[(has_number > 0) & (has_number < 1)]
    assert len(categorical) >= 5 and len(mixed) >= 5
    tokens = set(lab.loc[lab["ITEMID"].isin(categorical), "VALUE"])
    assert {"NEG", "1+"} <= tokens
    assert {"<0.1", "See Comments"} & set(lab.loc[lab["ITEMID"].isin(mixed) & lab["VALUENUM"].isna(), "VALUE"])
    numbers = lab["VALUENUM"].notna()
    assert (lab.loc[numbers, "VALUE"] == lab.loc[numbers, "VALUENUM"]).all()


def test_quirks_are_there(tables):
    lab, adm, _, info = tables
    special = info["special_items"]
    values = lab.assign(X=lab["VALUENUM"].astype(float)).groupby("ITEMID")["X"]
    (ill,) = special["ill_conditioned"]
    assert values.mean()[ill] == pytest.approx(1e6, abs=1e-3)
    assert 5e-4 < values.std()[ill] < 2e-3 and values.count()[ill] > 30
    for item in special["constant"]:
        assert values.count()[item] > 10 and values.std()[item] == 0
    for item in special["single_observation"]:
        assert values.count()[item] == 1
        assert lab.loc[lab["ITEMID"] == item, "HADM_ID"].notna().all()
    assert not lab["ITEMID"].isin(special["never_ordered"]).any()

    inpatient = lab[lab["HADM_ID"].notna()]
    assert inpatient.duplicated(["HADM_ID", "ITEMID", "CHARTTIME"]).sum() > 0  # CHARTTIME ties
    stays = adm.set_index("HADM_ID")
    charted = pd.to_datetime(inpatient["CHARTTIME"])
    assert (charted < pd.to_datetime(inpatient["HADM_ID"].map(stays["ADMITTIME"]))).sum() > 0
    assert (charted > pd.to_datetime(inpatient["HADM_ID"].map(stays["DISCHTIME"]))).sum() > 0


def test_validates_with_warnings_only(synth, tables):
    validation = validate(synth, load_config())
    errors = [f for f in validation.report.findings if f.severity == "error"]
    assert errors == [] and validation.exit_code == 0
    found = {f.check: f.severity for f in validation.report.findings}
    assert found["mixed_item_text"] == "warning"  # the one decision: declare its words in [clean.text_values]
    assert {found[check] for check in ("constant_item", "before_admission", "quarantine_outpatient")} == {"info"}
    assert not {"hadm_id_missing", "charttime_outside_stay"} & set(found)  # counted by clean and bucket
    constant = next(f for f in validation.report.findings if f.check == "constant_item")
    special = tables[3]["special_items"]
    assert all(str(item) in constant.message for item in special["constant"])
    ledger = validation.prepared.ledger()
    assert ledger["read"] == ROWS and ledger["kept"] > 0.5 * ROWS


def test_tiny_scales_are_refused_large_ones_stream(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="at least"):
        write_synthetic(tmp_path, rows=10)
    # Chunks hold whole subjects: with small chunks the file is still sorted by subject and complete.
    monkeypatch.setattr("bench.synth.write.CHUNK_ROWS", 3_000)
    write_synthetic(tmp_path, rows=12_000, seed=3)
    lab = pd.read_csv(tmp_path / "LABEVENTS.csv", usecols=["ROW_ID", "SUBJECT_ID"])
    assert len(lab) == 12_000 and np.all(np.diff(lab["SUBJECT_ID"].to_numpy()) >= 0)


# -- --layout mimic4: MIMIC-IV 2.2's hosp module ------------------------------------------------------
ROWS_MIMIC4 = 200_000


@pytest.fixture(scope="module")
def synth4(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth4")
    main([str(out), "--rows", str(ROWS_MIMIC4), "--seed", "7", "--layout", "mimic4"])
    return out


@pytest.fixture(scope="module")
def lab4(synth4) -> pd.DataFrame:
    return pd.read_csv(synth4 / "hosp" / "labevents.csv.gz", dtype=str, keep_default_na=False, na_values=[""])


def test_mimic4_files_and_headers_are_mimic4s(synth4):
    from tests.mimic4 import LABEVENTS_HEADER

    assert sorted(p.name for p in (synth4 / "hosp").iterdir()) == [
        "admissions.csv.gz", "d_labitems.csv.gz", "labevents.csv.gz"]
    assert not list(synth4.glob("*.csv"))
    headers = {name: pd.read_csv(synth4 / "hosp" / name, nrows=0).columns.tolist()
               for name in ("admissions.csv.gz", "d_labitems.csv.gz", "labevents.csv.gz")}
    assert headers["labevents.csv.gz"] == LABEVENTS_HEADER
    assert headers["d_labitems.csv.gz"] == ["itemid", "label", "fluid", "category"]
    assert headers["admissions.csv.gz"] == [
        "subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type", "admit_provider_id",
        "admission_location", "discharge_location", "insurance", "language", "marital_status", "race",
        "edregtime", "edouttime", "hospital_expire_flag"]
    info = json.loads((synth4 / "synth.json").read_text())
    assert info["layout"] == "mimic4" and info["rows"] == ROWS_MIMIC4
    assert info["files"]["LABEVENTS"] == "hosp/labevents.csv.gz"


def test_mimic4_rows_look_like_mimic4s(synth4, lab4):
    from bench.synth.mimic4 import MIMIC4_OUTPATIENT_SHARE

    lab = lab4
    assert len(lab) == ROWS_MIMIC4 and lab["labevent_id"].astype(int).is_monotonic_increasing
    assert lab["hadm_id"].isna().mean() == pytest.approx(MIMIC4_OUTPATIENT_SHARE, abs=0.01)
    assert lab["hadm_id"].dropna().astype(int).min() >= 20_000_000 and lab["subject_id"].astype(int).min() >= 10_000_000
    # Results only in comments: value and valuenum empty; others carry a comment beside their value.
    only = lab["value"].isna() & lab["valuenum"].isna()
    assert only.mean() == pytest.approx(0.01, abs=0.003) and lab.loc[only, "comments"].notna().all()
    assert {"NEG.", "___"} <= set(lab.loc[only, "comments"])
    assert (lab["value"].notna() & lab["comments"].notna()).mean() == pytest.approx(0.03, abs=0.005)
    # Reference ranges on most rows with a number, never on text; flag 'abnormal' or empty.
    number = lab["valuenum"].notna()
    assert 0.8 < lab.loc[number, "ref_range_lower"].notna().mean() <= 0.96  # not on the sample's items without one
    assert lab.loc[~number, ["ref_range_lower", "ref_range_upper"]].isna().all().all()
    bounds = lab.loc[number & lab["ref_range_lower"].notna(), ["ref_range_lower", "ref_range_upper"]].astype(float)
    assert (bounds["ref_range_lower"] < bounds["ref_range_upper"]).all()
    assert set(lab["flag"].dropna()) == {"abnormal"}
    # One specimen per draw: a specimen's rows share their subject and charttime; storetime follows charttime.
    per_specimen = lab.groupby("specimen_id")[["subject_id", "charttime"]].nunique()
    assert (per_specimen == 1).all().all() and len(per_specimen) > ROWS_MIMIC4 / 20
    assert (pd.to_datetime(lab["storetime"]) > pd.to_datetime(lab["charttime"])).all()
    assert set(lab["priority"].dropna()) == {"ROUTINE", "STAT"}


def test_mimic4_same_seed_same_bytes(synth4, tmp_path):
    write_synthetic(tmp_path, rows=ROWS_MIMIC4, seed=7, layout="mimic4")
    for name in ("admissions.csv.gz", "d_labitems.csv.gz", "labevents.csv.gz"):
        assert (tmp_path / "hosp" / name).read_bytes() == (synth4 / "hosp" / name).read_bytes(), name
    with pytest.raises(ValueError, match="layout must be one of mimic3, mimic4"):
        write_synthetic(tmp_path, rows=ROWS_MIMIC4, layout="mimic5")


def test_mimic4_validates_without_load_errors(synth4):
    validation = validate(synth4, load_config())
    assert [f for f in validation.report.findings if f.severity == "error"] == []
    assert validation.exit_code == 0
    warned = {f.check for f in validation.report.findings if f.severity == "warning"}
    assert {"result_in_comments", "mixed_item_text"} <= warned
    ledger = validation.prepared.ledger()
    assert ledger["read"] == ROWS_MIMIC4 and ledger["kept"] > 0.3 * ROWS_MIMIC4


# -- shapes: the default's bytes as before, a preset's shares ----------------------------------------------------
# sha256 of the tables' text (mimic4: unzipped) as the generator wrote them before it had shapes; a change means the
# default shape's bytes moved (and VERSION must be bumped, which renames nothing but regenerates every dataset).
DEFAULT_TEXT_SHA256 = {
    "ADMISSIONS.csv": "474e2a699dcd6e782d84a61abb7108c7955db2cdd5328e81b2157084b18e423a",
    "D_LABITEMS.csv": "d7cf3e4fdc21c402a2ef745768552569f66d822719bdb25bddda17a57b09ade2",
    "LABEVENTS.csv": "0d5e1f2ad63af99fdf60955da924e5cbf8eaf6a0a5f01117dc837999cbb7573a",
    "hosp/admissions.csv.gz": "21335e53165e8aa425940877677c1ee237078abb57b3bce643235da4ac3f5896",
    "hosp/d_labitems.csv.gz": "5896ec11d92bd41b9882be33765cb9952081ea0fbb87fdc1beb8b433fd062915",
    "hosp/labevents.csv.gz": "f56be99b73f4354c69faea9cc16f5b4443a3b3e09a5b02dd5c65e4924aad2f64",
}
ROWS_HEAVY = 100_000


def _text_sha256(path: Path) -> str:
    raw = path.read_bytes()
    return hashlib.sha256(gzip.decompress(raw) if path.suffix == ".gz" else raw).hexdigest()


def test_the_default_shape_writes_the_bytes_of_before_shapes(synth, synth4):
    for name, digest in DEFAULT_TEXT_SHA256.items():
        assert _text_sha256((synth4 if name.startswith("hosp/") else synth) / name) == digest, name
    info = json.loads((synth4 / "synth.json").read_text())
    assert info["shape"] == {"name": "default", **asdict(Shape())} and Shape() == SHAPES["default"]


def test_shapes_are_checked_and_named():
    assert SHAPES["heavy"] != Shape() and SHAPES["heavy"].name == "heavy"
    assert all(getattr(SHAPES["heavy"], option) != getattr(Shape(), option)
               for option in ("outpatient_share", "early_draw_share", "late_draw_share", "repeat_share"))
    assert replace(SHAPES["heavy"], repeat_share=0.5).name == "custom"
    with pytest.raises(ValueError, match="repeat_share must lie in"):
        Shape(repeat_share=1.5)
    with pytest.raises(ValueError, match="at most 1"):
        Shape(early_draw_share=0.6, late_draw_share=0.6)


def test_the_command_line_overrides_a_presets_options(tmp_path, capsys):
    main([str(tmp_path), "--rows", "2000", "--shape", "heavy", "--repeat-share", "0.5"])
    info = json.loads((tmp_path / "synth.json").read_text())
    assert info["shape"] == {"name": "custom", **asdict(replace(SHAPES["heavy"], repeat_share=0.5))}
    assert "shape custom" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--rows", "2000", "--outpatient-share", "1.5"])
    assert "outpatient_share must lie in [0, 1]" in capsys.readouterr().err


@pytest.fixture(scope="module")
def heavy(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("heavy")
    main([str(out), "--rows", str(ROWS_HEAVY), "--seed", "7", "--layout", "mimic4", "--shape", "heavy"])
    return out


def test_heavy_rows_have_its_shares(heavy):
    shape = SHAPES["heavy"]
    lab = pd.read_csv(heavy / "hosp" / "labevents.csv.gz", usecols=["hadm_id", "itemid", "charttime"])
    adm = pd.read_csv(heavy / "hosp" / "admissions.csv.gz", usecols=["hadm_id", "admittime", "dischtime"],
                      parse_dates=["admittime", "dischtime"]).set_index("hadm_id")
    assert lab["hadm_id"].isna().mean() == pytest.approx(shape.outpatient_share, abs=0.01)
    inpatient = lab.dropna(subset=["hadm_id"])
    charted = pd.to_datetime(inpatient["charttime"])
    # Draws hold about DRAW_SIZE rows each, so the rows' shares are the draws' within a few points.
    before = (charted < inpatient["hadm_id"].map(adm["admittime"])).mean()
    after = (charted > inpatient["hadm_id"].map(adm["dischtime"])).mean()
    assert before == pytest.approx(shape.early_draw_share, abs=0.03)
    assert after == pytest.approx(shape.late_draw_share, abs=0.02)
    # Rows that repeat the item of another row of their admission and day: about repeat_share (a day of repeats
    # only keeps its items; a few more repeat by chance).
    repeated = inpatient.assign(day=charted.dt.floor("D")).duplicated(["hadm_id", "day", "itemid"]).mean()
    assert repeated == pytest.approx(shape.repeat_share, abs=0.05)


def test_heavy_builds_with_most_rows_quarantined_and_the_rest_mostly_merged(heavy):
    validation = validate(heavy, load_config())
    assert [f for f in validation.report.findings if f.severity == "error"] == []
    ledger = validation.prepared.ledger()
    assert ledger["read"] == ROWS_HEAVY
    assert ledger["quarantined"] >= 0.40 * ROWS_HEAVY
    assert ledger["deduplicated"] >= 0.75 * (ROWS_HEAVY - ledger["quarantined"])
    info = json.loads((heavy / "synth.json").read_text())
    assert info["shape"] == {"name": "heavy", **asdict(SHAPES["heavy"])}
