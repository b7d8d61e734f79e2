"""pipeline/kernel/handed.py: objects every task reads, written once; the columns a part's function declares it reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.engines.parts import PartsEngine
from pipeline.kernel.quarantine import LineMask
from pipeline.kernel.handed import ScratchError, Shared, share, value_of, write_part
from pipeline.kernel.calls import reads


def test_a_shared_frame_is_read_back_equal_and_once_per_process(tmp_path):
    stays = pd.DataFrame({"SUBJECT_ID": pd.array([1, None], dtype="Int64"),
                          "ADMITTIME": pd.to_datetime(["2101-01-01 10:00", "2102-02-02 00:00"]),
                          "KIND": pd.Series(["numeric", None], dtype="str")},
                         index=pd.Index([10, 20], name="HADM_ID"))
    handed = share(stays, tmp_path / "stays.arrow")
    assert isinstance(handed, Shared) and handed.path.exists()
    first = value_of(handed)
    pd.testing.assert_frame_equal(first, stays)
    assert value_of(handed) is first  # read once, then the same frame
    assert value_of(stays) is stays  # a frame handed as itself is itself
    ranges = pd.Series([0, 0, 1], index=pd.Index([7, 8, 9], dtype="int64"))
    pd.testing.assert_series_equal(value_of(share(ranges, tmp_path / "ranges.arrow")), ranges)
    items = pd.Series([50, 51], name="ITEMID")
    pd.testing.assert_series_equal(value_of(share(items, tmp_path / "items.arrow")), items)


def test_a_shared_line_mask_is_its_bits_and_read_back_once_per_process(tmp_path):
    """The report's mask of quarantined lines goes to the Dask workers as a file too (a broadcast scatter hung the
    build when a worker was lost during it)."""
    mask = LineMask.empty().with_lines(np.array([2, 9, 4000]))
    handed = share(mask, tmp_path / "mask.npy")
    assert isinstance(handed, Shared) and handed.mask and handed.path.read_bytes().startswith(b"\x93NUMPY")
    first = value_of(handed)
    assert isinstance(first, LineMask) and first.of(np.array([1, 2, 9, 10, 4000])).tolist() == [
        False, True, True, False, True]
    assert value_of(handed) is first


def test_a_part_function_reads_only_the_columns_it_declares(tmp_path):
    frame = pd.DataFrame({"HADM_ID": np.repeat([1, 2, 3], 4), "VALUENUM": np.arange(12.0),
                          "VALUE": pd.Series(list("abcdefghijkl"), dtype="str")}, index=pd.RangeIndex(2, 14))
    engine = PartsEngine(tmp_path, partitions=3, workers=1)
    stored = engine.partition(frame)
    seen: list[tuple[str, ...]] = []

    @reads("VALUENUM", "COMMENTS")  # COMMENTS is optional: a part without it is read without it
    def total_value(part: pd.DataFrame) -> float:
        seen.append(tuple(part.columns))
        return float(part["VALUENUM"].sum())

    assert sum(engine.per_part(total_value, stored)) == frame["VALUENUM"].sum()
    assert set(seen) == {("VALUENUM",)}

    @reads("HADM_ID", "VALUENUM")
    def late_rows(part: pd.DataFrame) -> pd.DataFrame:
        return part[part["VALUENUM"] > 8]

    picked = engine.rows(stored, late_rows)
    pd.testing.assert_frame_equal(picked, frame.loc[frame["VALUENUM"] > 8, ["HADM_ID", "VALUENUM"]])


def test_a_part_that_does_not_fit_its_disk_is_a_scratch_error_naming_it_and_left_out(tmp_path):
    from tests.mounts import small_tmpfs

    frame = pd.DataFrame({"X": np.arange(200_000, dtype="float64")})
    with small_tmpfs(tmp_path / "tiny", "256k") as tiny:
        path = tiny / "part.arrow"
        with pytest.raises(ScratchError, match=r"could not write .*part\.arrow: No space left on device"):
            write_part(frame, path)
        assert not path.exists()  # what it wrote is removed, the disk freed
