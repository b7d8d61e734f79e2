"""pipeline/meds/combine.py: the shards' partials put together give the checks tables of the types their models
declare whatever was left out, so a shard meds' DataSchema refuses (a column of the wrong type) is one
``meds_schema`` error naming it, the column and the type found, its rows not checked further and the other shards
checked as ever; where every shard is refused, or has no row, nothing is left to put together and the run still
ends with its findings, exit 1, never an internal error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.meds.combine import combine
from pipeline.meds.shards import ShardPartial
from schemas.meds import MedsCodes, MedsSubjects
from tests import meds as fixture
from tests.meds import write_meds, write_normalized

runner = CliRunner()

# each column meds.DataSchema declares -> a type it refuses there (a code as normalization's integer index)
WRONG = {"subject_id": pa.string(), "time": pa.string(), "code": pa.int64(), "numeric_value": pa.string(),
         "text_value": pa.int64()}


@pytest.fixture(scope="module")
def unsorted(tmp_path_factory) -> Path:
    """The clean fixture with one subject of train/1 out of order: a finding the other shards' check gives."""
    root = tmp_path_factory.mktemp("meds") / "unsorted"
    write_meds(root, ("unsorted",))
    return root


def _wrong_typed(shard: Path, column: str) -> None:
    table = pq.read_table(shard)
    kind = WRONG[column]
    values = pa.array(np.arange(table.num_rows), kind) if column == "code" else table[column].cast(kind)
    pq.write_table(table.set_column(table.column_names.index(column), column, values), shard)


def _validate(root: Path, tmp_path: Path) -> tuple[int, str, list[dict]]:
    report = tmp_path / "report.json"
    result = runner.invoke(app, ["validate", str(root), "--json", str(report)])
    findings = json.loads(report.read_text())["findings"] if report.exists() else []
    return result.exit_code, result.output, findings


def _refused(findings: list[dict]) -> dict[str, str]:
    return {f["table"]: f["message"] for f in findings if f["check"] == "meds_schema"}


@pytest.mark.parametrize("split", fixture.SPLITS)
@pytest.mark.parametrize("column", sorted(WRONG))
def test_a_shard_with_a_column_of_the_wrong_type_is_meds_schema_naming_it(unsorted, tmp_path, column, split):
    root = tmp_path / "meds"
    shutil.copytree(unsorted, root)
    _wrong_typed(root / "data" / split / "0.parquet", column)
    code, output, findings = _validate(root, tmp_path)
    assert code == 1 and "internal error" not in output, output
    refused = _refused(findings)
    assert list(refused) == [f"{split}/0"]  # the one shard: a wrong code is not the folder's kind
    assert f"{column} (want" in refused[f"{split}/0"] and f"got {WRONG[column]}" in refused[f"{split}/0"]
    assert "rows were not checked further" in refused[f"{split}/0"]
    # the other shards are checked: train/1's subject out of order is still found
    (order,) = [f for f in findings if f["check"] == "meds_subject_order"]
    assert str(fixture.UNSORTED_SUBJECT) in order["message"]


@pytest.mark.parametrize(("column", "normalized"), [
    *((column, False) for column in sorted(set(WRONG) - {"code"})),  # every code an integer: normalization's output
    ("subject_id", True)])
def test_every_shard_with_a_column_of_the_wrong_type_is_each_named_and_nothing_else_breaks(unsorted, tmp_path,
                                                                                          column, normalized):
    root = tmp_path / "meds"
    if normalized:
        write_normalized(unsorted, root)
    else:
        shutil.copytree(unsorted, root)
    shards = sorted((root / "data").rglob("*.parquet"))
    for shard in shards:
        _wrong_typed(shard, column)
    code, output, findings = _validate(root, tmp_path)
    assert code == 1 and "internal error" not in output, output
    assert sorted(_refused(findings)) == ["held_out/0", "train/0", "train/1", "tuning/0"]
    assert all(f"{column} (want" in message for message in _refused(findings).values())


def test_shards_of_no_row_leave_every_split_empty_and_the_run_ends_with_its_findings(unsorted, tmp_path):
    root = tmp_path / "meds"
    shutil.copytree(unsorted, root)
    for shard in (root / "data").rglob("*.parquet"):
        pq.write_table(pq.read_table(shard).slice(0, 0), shard)
    code, output, findings = _validate(root, tmp_path)
    assert code == 1 and "internal error" not in output, output
    assert sorted((f["check"], f["table"]) for f in findings) == [
        ("meds_split_empty", "held_out"), ("meds_split_empty", "train"), ("meds_split_empty", "tuning")]


def test_nothing_put_together_is_typed_as_the_models_declare():
    """No partial, or only refused ones: every table is empty and of its model's types, so pandera finds nothing
    wrong with it (it refused an untyped empty column as not text)."""
    refused = ShardPartial("train/0", "train/0.parquet", "train", rows=3, schema="subject_id (want int64, got string)",
                           schema_rows=3)
    for combined in (combine([]), combine([refused])):
        assert combined.subjects.empty and combined.codes.empty and combined.by_split.empty
        assert combined.subjects.index.dtype == np.int64 and combined.codes["std64"].dtype == np.float64
        table = combined.subjects[["shards", "splits", "split", "out_of_order"]].assign(
            expected=combined.subjects["split"])
        MedsSubjects.validate(table)
        MedsCodes.validate(combined.codes[["rows", "numeric", "text_only"]].assign(listed=False))
