"""``badpoints build DATA --out OUT --to meds`` (pipeline/stages/meds_export.py): a MEDS 0.4 dataset of the graphs' rows whose
codes.parquet carries the guarded fit, so that MEDS-Transforms' normalization formula (reproduced bit for bit in
pipeline/meds/formula.py) gives every row the graphs' z. On the real MIMIC-III demo, in both layouts, and on
the MIMIC-IV fixture; MEDS-Transforms itself runs on it in tests/bench/test_meds_transforms.py."""

from __future__ import annotations

import gzip
import hashlib
import json

import meds
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from pipeline.output.write import STAGING
from pipeline.flow import validate
from pipeline.meds import validate_meds
from pipeline.stages import meds_export as export
from pipeline.meds.formula import Fitted, given_mean_std, zscore
from pipeline.meds.metadata import read_metadata
from tests import mimic4
from tests.corpus import SAMPLE
from tests.mimic4 import in_mimic4_layout
from tests.mounts import small_tmpfs

runner = CliRunner()


def _build(data, out, *extra):
    result = runner.invoke(app, ["build", str(data), "--out", str(out), "--no-cache", "-q", *extra])
    return result


@pytest.fixture(scope="module")
def demo(mimic3demo, tmp_path_factory):
    """The demo built as MEDS, and the same tables validated (whose edge rows carry the graphs' Z)."""
    root = tmp_path_factory.mktemp("export")
    made = _build(mimic3demo, root / "meds", "--to", "meds")
    assert made.exit_code == 0, made.output
    (root / "printed.txt").write_text(made.stdout)  # what the terminal showed
    return root, validate(mimic3demo, load_config(None)).prepared


def _events(root) -> pd.DataFrame:
    return pd.concat([pq.read_table(path).to_pandas().assign(split=path.parent.name)
                      for path in sorted((root / "data").glob("*/*.parquet"))], ignore_index=True)


def test_the_dataset_has_meds_schema_and_every_code_a_mean_and_a_std(demo):
    out = demo[0] / "meds"
    for path in sorted((out / "data").glob("*/*.parquet")):
        assert pq.read_schema(path).equals(meds.DataSchema.schema()), path
        meds.DataSchema.validate(pq.read_table(path))  # meds' own check: raises on a wrong type or column
        table = pq.read_table(path).to_pandas()
        keys = table[["subject_id", "time"]].to_records(index=False)
        assert (np.diff(table["subject_id"]) >= 0).all() and pd.Index(keys).is_monotonic_increasing, path
    assert {p.parent.name for p in (out / "data").glob("*/*.parquet")} == {"train", "tuning", "held_out"}
    codes = pq.read_table(out / meds.code_metadata_filepath)
    meds.CodeMetadataSchema.validate(codes)
    base = meds.CodeMetadataSchema.schema()
    assert codes.schema.names[:len(base.names)] == base.names
    codes = codes.to_pandas()
    events = _events(out)
    assert set(events["code"]) <= set(codes["code"])
    assert codes["values/mean"].notna().all() and codes["values/std"].notna().all()
    assert (codes["values/std"] > 0).all() and np.isfinite(codes["values/mean"]).all()
    splits = pq.read_table(out / meds.subject_splits_filepath)
    meds.SubjectSplitSchema.validate(splits)
    assert splits.schema.equals(meds.SubjectSplitSchema.schema())
    assert set(splits["subject_id"].to_pylist()) == set(events["subject_id"])
    meta = json.loads((out / meds.dataset_metadata_filepath).read_text())
    assert meta["etl_name"] == "badpoints" and meta["meds_version"] == meds.__version__


def test_meds_transforms_formula_with_the_given_stats_gives_the_graphs_z_on_every_row(demo):
    """Normalization's formula (reproduced bit for bit) on the written values, with codes.parquet's mean and std:
    every z finite, within the bound, and the edge row's Z (the demo's subject is its admission: its ADMISSIONS
    has no SUBJECT_ID; an edge row is one per admission, item and CHARTTIME)."""
    out, prepared = demo[0] / "meds", demo[1]
    labs = _events(out)
    labs = labs[labs["code"].str.startswith("LAB//")].reset_index(drop=True)
    codes = np.array(sorted(set(labs["code"])), dtype=object)
    fitted = Fitted(codes, np.ones(len(codes), np.int64), np.zeros(len(codes), np.float32),
                    np.zeros(len(codes), np.float32))
    kept, z, z_null = zscore(fitted, labs["code"].to_numpy(object), labs["numeric_value"].to_numpy(np.float32),
                             labs["numeric_value"].isna().to_numpy(), given_mean_std(read_metadata(out).codes, fitted))
    assert kept.all() and np.isfinite(z[~z_null]).all() and np.abs(z[~z_null]).max() <= 10
    labs = labs.assign(z=z, z_null=z_null, ITEMID=labs["code"].str.split("//").str[1].astype("int64"))
    edges = prepared.edges.rename(columns={"HADM_ID": "subject_id", "CHARTTIME": "time"})
    joined = labs.merge(edges, on=["subject_id", "time", "ITEMID"], how="outer", indicator=True, validate="1:1")
    assert (joined["_merge"] == "both").all()
    valued = joined[~joined["z_null"]]
    assert len(valued) > 35_000 and np.allclose(valued["z"], valued["Z"], atol=1e-4)
    # a null value: a text row, or a rare or unseen item's number (its Z is 0, marked Z_UNSEEN)
    number = joined["VALUENUM"].notna()
    assert (joined.loc[joined["z_null"] & number, "Z_UNSEEN"] == 1).all()
    assert (joined.loc[~number, "text_value"] == joined.loc[~number, "VALUE"]).all()


def test_rare_and_unseen_items_are_written_without_a_value_and_counted_in_codes(demo):
    out = demo[0] / "meds"
    codes = pq.read_table(out / meds.code_metadata_filepath).to_pandas().set_index("code")
    events = _events(out)
    rare = codes[codes["badpoints/rule"] == "rare"]
    assert len(rare) > 0 and (rare["values/mean"] == 0).all() and (rare["values/std"] == 1).all()
    of_rare = events[events["code"].isin(rare.index)]
    assert of_rare["numeric_value"].isna().all()
    withheld = codes["badpoints/withheld"]
    numbers = events[events["code"].str.startswith("LAB//")]
    null_numbers = numbers[numbers["numeric_value"].isna() & numbers["text_value"].isna()]
    assert int(withheld.sum()) == len(null_numbers) > 0
    assert set(codes.loc[withheld > 0, "badpoints/rule"]) <= {"rare", "unfitted"}


def test_the_lab_events_are_the_graphs_edges_and_the_admissions_those_in_graphs(demo):
    out, prepared = demo[0] / "meds", demo[1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "meds"
    lab, admissions = prepared.ledger(), prepared.admission_ledger()
    assert manifest["accounting"] == json.loads(json.dumps({"LABEVENTS": lab, "ADMISSIONS": admissions}))
    events = _events(out)
    assert (events["code"].str.startswith("LAB//")).sum() == lab["kept"] == len(prepared.edges)
    admitted = events[events["code"].str.startswith("HOSPITAL_ADMISSION//")]
    discharged = events[events["code"].str.startswith("HOSPITAL_DISCHARGE//")]
    assert len(admitted) == len(discharged) == admissions["in_graphs"]
    for name, split in export.MEDS_SPLITS.items():
        assert (admitted["split"] == split).sum() == admissions["splits"][name]["in_graphs"]
    for name, entry in manifest["outputs"].items():
        data = (out / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name


def test_badpoints_validate_of_the_output_finds_no_error_and_predicts_no_bad_z(demo):
    run = validate_meds(demo[0] / "meds", load_config(None))
    checks = {f.check for f in run.report.findings}
    assert run.exit_code == 0
    assert not checks & {"meds_z_non_finite", "meds_z_bound", "meds_value_finite", "meds_subject_unsorted"}
    assert int(run.ready["non_finite"].sum()) == 0


def test_the_build_names_the_codes_and_rows_meds_transforms_normalization_will_drop(demo):
    """Codes written with no row in train (held_out or tuning only): MEDS-Transforms' normalization drops their rows
    (196 of 97 codes on the demo, as its own run does: tests/bench/test_meds_export_normalization.py). The build's
    report names them, counted from the shards it wrote, as `badpoints validate` of the dataset does."""
    out = demo[0] / "meds"
    (found,) = [f for f in json.loads((out / "report.json").read_text())["findings"]
                if f["check"] == "meds_export_unseen_codes"]
    events = _events(out)
    train = set(events.loc[events["split"] == meds.train_split, "code"])
    dropped = events.loc[~events["code"].isin(train), "code"].value_counts()
    assert (found["count"], len(found["items"])) == (int(dropped.sum()), len(dropped)) == (196, 97)
    assert set(found["items"]) == set(dropped.index)
    assert found["severity"] == "info" and found["stage"] == "meds_export"
    assert "196 rows of 97 code(s) with no row in the fitted (train) rows" in found["message"]
    (named,) = [f for f in validate_meds(out, load_config(None)).report.findings if f.check == "meds_code_unseen"]
    assert (named.count, named.items) == (found["count"], found["items"])
    printed = " ".join((demo[0] / "printed.txt").read_text().split())
    assert ("MEDS MEDS-Transforms' normalization will drop 196 rows of 97 codes with no row in train: "
            f"{', '.join(found['items'][:5])} +92 more in the JSON report") in printed
    assert "will drop 196 rows of 97 codes" in (out / "report.html").read_text()


def test_a_second_build_writes_the_same_bytes(demo, mimic3demo, tmp_path):
    again = _build(mimic3demo, tmp_path / "again", "--to", "meds", "--engine", "parts", "--workers", "2")
    assert again.exit_code == 0, again.output
    out = demo[0] / "meds"
    for path in sorted(out.glob("*/**/*.parquet")) + [out / meds.dataset_metadata_filepath]:
        name = path.relative_to(out)
        assert (tmp_path / "again" / name).read_bytes() == path.read_bytes(), name


def test_the_mimic4_layout_names_codes_by_its_lowercase_valueuom(mimic3demo, tmp_path):
    data = in_mimic4_layout(mimic3demo, tmp_path / "data")
    made = _build(data, tmp_path / "out", "--to", "meds")
    assert made.exit_code == 0, made.output
    codes = set(pq.read_table(tmp_path / "out" / meds.code_metadata_filepath)["code"].to_pylist())
    assert "LAB//50912//mg/dL" in codes and "LAB//51221//%" in codes


def test_subjects_are_patients_where_admissions_has_subject_id(tmp_path):
    data = mimic4.dataset().write(tmp_path / "data")
    made = _build(data, tmp_path / "out", "--to", "meds")
    assert made.exit_code == 0, made.output
    events = _events(tmp_path / "out")
    assert events["subject_id"].min() >= 10_000_001 and events["subject_id"].max() < 20_000_000
    assert f"LAB//{mimic4.NUMERIC_ITEM}//mg/dL" in set(events["code"])


def test_data_with_errors_writes_no_meds(tmp_path):
    data = mimic4.dataset().write(tmp_path / "data")
    path = data / "hosp" / "labevents.csv.gz"
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header = lines[0].split(",")
    broken = lines[1].split(",")
    broken[header.index("charttime")] = "not a time"
    path.write_bytes(gzip.compress("\n".join([lines[0], ",".join(broken), *lines[2:]]).encode() + b"\n"))
    made = _build(data, tmp_path / "out", "--to", "meds")
    assert made.exit_code == 1, made.output
    assert "no MEDS shards written" in made.stdout
    assert not (tmp_path / "out" / "data").exists()


def test_item_units_takes_each_items_most_common_unit(tmp_path):
    path = tmp_path / "LABEVENTS.csv"
    path.write_text("ROW_ID,ITEMID,VALUEUOM\n1,7,mg/dL\n2,7,mg/dL\n3,7,MG/DL\n4,8,\n5,9,b\n6,9,a\n")
    units = export.item_units(path)
    assert units.to_dict() == {7: "mg/dL", 9: "a"}
    assert export.lab_codes([7, 8, 9], units).to_dict() == {7: "LAB//7//mg/dL", 8: "LAB//8//UNK", 9: "LAB//9//a"}
    (tmp_path / "NOUNIT.csv").write_text("ITEMID,VALUE\n7,1\n")
    assert export.item_units(tmp_path / "NOUNIT.csv").empty


def test_inspect_checks_a_meds_build_by_its_hashes_and_load_graphs_says_it_holds_none(demo, tmp_path):
    import shutil

    from pipeline.output.write import load_graphs
    from schemas.errors import StageError

    out = tmp_path / "copy"
    shutil.copytree(demo[0] / "meds", out)
    ok = runner.invoke(app, ["inspect", str(out)])
    assert ok.exit_code == 0, ok.output
    assert "3 shards" in ok.stdout and "files: ok (every hash matches the manifest)" in ok.stdout
    with pytest.raises(StageError, match="written as MEDS"):
        load_graphs(out, "train")
    with open(out / "data" / "train" / "0.parquet", "ab") as handle:
        handle.write(b"x")
    broken = runner.invoke(app, ["inspect", str(out)])
    assert broken.exit_code == 1 and "data/train/0.parquet" in broken.stdout


# -- a full disk ----------------------------------------------------------------------------------------------------
def _left(mount) -> list[str]:
    return sorted(p.relative_to(mount).as_posix() for p in mount.rglob("*"))


@pytest.mark.parametrize("engine", ["parts", "dask"])
def test_a_full_disk_at_the_first_piece_is_exit_2_naming_it_and_leaves_the_folder_as_it_was(tmp_path, engine):
    """The engine's workers write the pieces: the first one does not fit (a tmpfs holding the marker and no more;
    needs mount rights). The empty folder the build was given is left empty, without a marker."""
    with small_tmpfs(tmp_path / "small", "8k") as mount:
        (mount / "out").mkdir()
        made = _build(SAMPLE, mount / "out", "--to", "meds", "--engine", engine, "--workers", "1")
        left = _left(mount)
    assert made.exit_code == 2, made.output
    said = " ".join(made.output.split())
    assert f"cannot run: cannot write '{mount / 'out' / STAGING / export.PIECES}/" in said, said
    assert "No space left on device" in said and "internal error" not in said
    assert left == ["out"]


def test_a_full_disk_after_the_pieces_is_exit_2_naming_the_file_and_leaves_no_folder(tmp_path):
    """The pieces fit, a staged file does not: exit 2 naming it; the folder the build made goes, with no data/ or
    metadata/ folder in it (made only at the switch) and no marker."""
    with small_tmpfs(tmp_path / "small", "100k") as mount:
        made = _build(SAMPLE, mount / "out", "--to", "meds")
        left = _left(mount)
    assert made.exit_code == 2, made.output
    said = " ".join(made.output.split())
    assert f"No space left on device: {mount / 'out' / STAGING}/" in said, said
    assert left == []
