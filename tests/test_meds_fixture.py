"""tests/meds.py: the MEDS fixture is valid under ``meds``' own schema checks with every case planted (none of
the planted cases is a schema error), is the same bytes for the same seed, and plants what each case says."""

from __future__ import annotations

import json

import meds
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests import meds as fixture
from tests.meds import CASES, PLANTED_CASES, write_meds


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Every case planted at once (the fixture's own order)."""
    return write_meds(tmp_path_factory.mktemp("meds") / "all", CASES)


def _schema_checked(root) -> None:
    """``meds``' schema checks of every file; they raise on a wrong type, column or null."""
    for path in sorted((root / meds.data_subdirectory).rglob("*.parquet")):
        meds.DataSchema.validate(pq.read_table(path))
    meds.CodeMetadataSchema.validate(pq.read_table(root / meds.code_metadata_filepath))
    meds.SubjectSplitSchema.validate(pq.read_table(root / meds.subject_splits_filepath))
    meds.DatasetMetadataSchema.validate(json.loads((root / meds.dataset_metadata_filepath).read_text()))


@pytest.mark.parametrize("cases", [(), *[(name,) for name in CASES], PLANTED_CASES, tuple(CASES)],
                         ids=["base", *CASES, "planted", "all"])
def test_every_case_passes_meds_own_schema_check(tmp_path, cases):
    written = write_meds(tmp_path, cases)
    _schema_checked(tmp_path)
    assert written.cases == tuple(name for name in CASES if name in cases)
    assert {p.relative_to(tmp_path).as_posix() for p in written.shard_paths()} == {
        "data/train/0.parquet", "data/train/1.parquet", "data/tuning/0.parquet", "data/held_out/0.parquet"}


def test_the_base_dataset_is_unremarkable(tmp_path):
    written = write_meds(tmp_path)
    rows = written.rows
    assert np.isfinite(rows["numeric_value"].dropna()).all()
    for shard, part in rows.groupby("shard"):
        subjects = part["subject_id"].to_numpy()
        assert (np.diff(subjects) >= 0).all(), shard  # grouped by subject, ascending
        assert part.groupby("subject_id")["time"].apply(lambda t: t.is_monotonic_increasing).all(), shard
    assert rows.groupby("subject_id")["shard"].nunique().max() == 1
    listed = set(pq.read_table(tmp_path / meds.code_metadata_filepath)["code"].to_pylist())
    assert listed == set(rows["code"])
    splits = pq.read_table(tmp_path / meds.subject_splits_filepath).to_pandas()
    assert splits.groupby("split").size().to_dict() == {"train": 40, "tuning": 10, "held_out": 10}


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_values(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write_meds(tmp_path / name, PLANTED_CASES, seed=seed)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    assert (tmp_path / "a/data/train/0.parquet").read_bytes() != (tmp_path / "c/data/train/0.parquet").read_bytes()


def test_an_unknown_case_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown MEDS fixture cases \\['constnat'\\]"):
        write_meds(tmp_path, ["constnat"])


def _train(rows, code):
    return rows[(rows["split"] == "train") & (rows["code"] == code)]["numeric_value"].to_numpy()


def test_each_case_plants_what_it_says(planted):
    rows = planted.rows
    for code, value in ((fixture.CONSTANT, 1.0), (fixture.CONSTANT_TENTH, np.float32(0.1))):
        assert len(_train(rows, code)) == 40 and (_train(rows, code) == value).all()
    assert _train(rows, fixture.SINGLE).tolist() == [5.5]
    assert (_train(rows, fixture.LARGE_OFFSET) == 1e6).all()  # 1e6 +- 1e-3 is 1e6 in float32
    cancellation = _train(rows, fixture.CANCELLATION)
    assert len(cancellation) == 10_000 and 0.015 < np.ptp(cancellation) <= 0.02 and np.std(cancellation) > 0.005
    assert np.isposinf(_train(rows, fixture.INF_INPUT)).sum() == 1
    assert len(_train(rows, fixture.MANY)) == 70_000
    outlier = rows[(rows["split"] == "held_out") & (rows["code"] == fixture.MANY)]["numeric_value"]
    assert outlier.tolist() == [15_100.0] == [fixture.MANY_OUTLIER]


def test_the_subject_cases(planted):
    rows = planted.rows
    unsorted = rows[rows["subject_id"] == fixture.UNSORTED_SUBJECT]["time"]
    assert unsorted.is_monotonic_decreasing and unsorted.nunique() > 1
    shards = rows.groupby("subject_id")["shard"].unique().map(sorted)
    assert shards[fixture.SHARD_SPLIT_SUBJECT] == ["train/0", "train/1"]
    assert shards[fixture.SPLIT_SPLIT_SUBJECT] == ["held_out/0", "train/1"]
    splits = planted.subjects.set_index("subject_id")["split"]
    assert splits[fixture.SPLIT_SPLIT_SUBJECT] == "train"


def test_the_split_and_code_cases(planted):
    rows, root = planted.rows, planted.root
    assert pq.read_table(root / "data/tuning/0.parquet").num_rows == 0
    assert (planted.subjects["split"] == "tuning").sum() == 10  # subject_splits still names them
    train_codes = set(rows[rows["split"] == "train"]["code"])
    assert fixture.HELD_OUT_ONLY not in train_codes and (rows["code"] == fixture.HELD_OUT_ONLY).sum() == 3
    assert fixture.TUNING_ONLY not in set(rows["code"])  # its tuning rows went with the emptied split
    listed = set(pq.read_table(root / meds.code_metadata_filepath)["code"].to_pylist())
    assert fixture.TUNING_ONLY in listed and fixture.NOT_IN_CODES not in listed
    assert set(rows["code"]) - listed == {fixture.NOT_IN_CODES}
    mixed = rows[rows["code"] == fixture.MIXED]
    texty = mixed["text_value"].notna()
    assert texty.any() and mixed.loc[texty, "numeric_value"].isna().all()
    assert mixed.loc[~texty, "numeric_value"].notna().all()
