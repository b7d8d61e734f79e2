"""pipeline/meds/metadata.py: codes.parquet and subject_splits.parquet that cannot be read, or lack what a run reads,
are a ``meds_metadata`` finding naming the file and why, read as absent, never an internal error; a codes.parquet of
no row is valid MEDS and just works."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.meds import validate_meds
from pipeline.meds.formula import Fitted, given_mean_std
from pipeline.meds.metadata import read_metadata
from tests.meds import write_meds


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("meds") / "clean"
    write_meds(root, ())
    return root


def _copy(clean: Path, tmp_path: Path) -> Path:
    root = tmp_path / "meds"
    shutil.copytree(clean, root)
    return root


def _codes(**columns) -> pa.Table:
    return pa.table(columns)


# file -> how it is broken, and what the finding says why
BROKEN = {
    "not parquet": ("codes.parquet", b"code\nLAB//1//U\n", "could not be read as Parquet (ArrowInvalid"),
    "no code column": ("codes.parquet", _codes(description=pa.array(["x"])), "no code column"),
    "a null code": ("codes.parquet", _codes(code=pa.array(["A", None])), "code has 1 null(s)"),
    "a mean of text": ("codes.parquet", _codes(code=pa.array(["A"]), **{"values/mean": pa.array(["1.0"])}),
                       "values/mean is string, not a number"),
    "splits not parquet": ("subject_splits.parquet", b"PAR1", "could not be read as Parquet"),
    "subject ids of text": ("subject_splits.parquet", _codes(subject_id=pa.array(["1"]), split=pa.array(["train"])),
                            "subject_id is string, not an integer"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_metadata_that_cannot_be_read_is_a_finding_naming_the_file_and_why(clean, tmp_path, case):
    name, content, why = BROKEN[case]
    root = _copy(clean, tmp_path)
    path = root / "metadata" / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        pq.write_table(content, path)
    meta = read_metadata(root)
    (problem,) = meta.problems
    assert (problem.name, problem.path) == (name, str(path)) and why in problem.why
    assert (meta.codes if name == "codes.parquet" else meta.splits) is None
    run = validate_meds(root, load_config())
    (finding,) = [f for f in run.report.findings if f.check == "meds_metadata"]
    assert (finding.table, finding.severity) == (name, "error") and str(path) in finding.message
    assert why in finding.message and "read it as absent" in finding.message
    assert "meds_code_unlisted" not in {f.check for f in run.report.findings}  # not every code: the file is refused
    assert run.exit_code == 1


def test_a_metadata_file_that_is_a_fifo_is_refused_unopened(clean, tmp_path):
    root = _copy(clean, tmp_path)
    path = root / "metadata" / "subject_splits.parquet"
    path.unlink()
    os.mkfifo(path)  # a read would wait for a writer for ever
    (problem,) = read_metadata(root).problems
    assert "a FIFO (named pipe)" in problem.why


def test_a_codes_parquet_of_no_row_lists_and_gives_nothing(clean, tmp_path):
    """Valid MEDS: every code of the data unlisted, none given a mean or std (each z null), no finding of the
    file."""
    root = _copy(clean, tmp_path)
    empty = pa.table({"code": pa.array([], pa.string()), "values/mean": pa.array([], pa.float32()),
                      "values/std": pa.array([], pa.float32())})
    pq.write_table(empty, root / "metadata" / "codes.parquet")
    meta = read_metadata(root)
    assert meta.problems == () and meta.listed().empty
    fitted = Fitted(np.array(["A", "B"], dtype=object), np.ones(2, np.int64), np.ones(2, np.float32),
                    np.ones(2, np.float32))
    mean, std, missing = given_mean_std(meta.codes, fitted)
    assert missing.tolist() == [True, True] and len(mean) == len(std) == 2
    run = validate_meds(root, load_config())
    checks = {f.check: f for f in run.report.findings}
    assert "meds_metadata" not in checks and checks["meds_code_unlisted"].count == len(run.combined.codes)
    assert run.exit_code == 0
