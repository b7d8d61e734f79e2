"""pipeline/engines/routing.py: LABEVENTS cut into admission-range parts, whole (``admission_parts``) or block
by block as the blocks are checked (``Router``): every admission in one part, parts in (split, HADM_ID) order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.engines.base import in_row_order
from pipeline.engines.parts import PartsEngine
from pipeline.engines.routing import ADMISSIONS_PER_RANGE, FEWEST_RANGES, admission_parts, packed, range_count
from pipeline.engines.stored import Stored
from schemas.split import SPLITS
from tests.pipeline.engines.rows import lab_frame


def test_admission_parts_keep_admissions_whole_and_ordered():
    rng = np.random.default_rng(3)
    hadm = rng.integers(100, 160, size=2_000)
    split = pd.Series(np.array(SPLITS)[hadm % 3], dtype="str")
    frame = pd.DataFrame({"HADM_ID": hadm, "SPLIT": split}, index=pd.Index(rng.permutation(2_000) + 2, name="line"))
    for partitions in (1, 2, 5, 40, 500):
        parts = admission_parts(frame, partitions)
        assert 1 <= len(parts) <= min(partitions, frame["HADM_ID"].nunique())
        assert all(len(p) for p in parts)
        pd.testing.assert_frame_equal(in_row_order(parts, frame.index), frame)
        owner = pd.concat([p["HADM_ID"].drop_duplicates().to_frame().assign(part=n) for n, p in enumerate(parts)])
        assert owner["HADM_ID"].is_unique  # every admission in exactly one part
        for part in parts:  # each part keeps the input's row order
            assert (frame.index.get_indexer(part.index) == np.sort(frame.index.get_indexer(part.index))).all()
        order = owner.assign(split=owner["HADM_ID"].map(frame.groupby("HADM_ID")["SPLIT"].first())
                             .map({s: n for n, s in enumerate(SPLITS)}))
        ranked = order.sort_values(["split", "HADM_ID"])["part"]
        assert ranked.is_monotonic_increasing  # contiguous ranges of (split, HADM_ID)
    sizes = [len(p) for p in admission_parts(frame, 4)]
    assert max(sizes) < 2 * min(sizes)  # about equal rows
    assert len(admission_parts(frame.iloc[:0], 4)) == 1


def _splits() -> pd.DataFrame:
    """Admissions 100..127 (128 and 129 are in no split: rows of no known admission, like rows without HADM_ID)."""
    return pd.DataFrame({"HADM_ID": np.arange(100, 128),
                         "SPLIT": pd.Series(["train", "val", "test", "train"] * 7, dtype="str")})


def _routed(engine: PartsEngine, frame: pd.DataFrame, splits: pd.DataFrame, block: int) -> Stored:
    router = engine.router(splits)
    for start in range(0, len(frame), block):
        router.add(frame.iloc[start:start + block])
    return router.finish()


@pytest.mark.parametrize("partitions", [1, 2, 5])
def test_routed_blocks_make_the_parts_partition_cuts(tmp_path, partitions):
    """Blocks routed as they come give what cutting the whole table gives: every admission in one part, parts in
    (split, HADM_ID) order, each in source line order, rows of no known admission last; in row order, the table."""
    frame, splits = lab_frame(), _splits()
    engine = PartsEngine(tmp_path, partitions=partitions, workers=1)
    stored = _routed(engine, frame, splits, block=37)
    assert len(stored) == len(frame) and stored.columns == tuple(frame.columns)
    pd.testing.assert_frame_equal(engine.rows(stored), frame)
    parts = list(stored.read())
    assert [len(part) for part in parts] == list(stored.lengths)
    assert all(part.index.is_monotonic_increasing for part in parts)
    owners = [set(part["HADM_ID"].dropna()) for part in parts]
    assert sum(map(len, owners)) == len(set().union(*owners))
    split = splits.set_index("HADM_ID")["SPLIT"].map({"train": 0, "val": 1, "test": 2})
    known = [part[part["HADM_ID"].isin(split.index)] for part in parts]
    keys = pd.concat([pd.DataFrame({"SPLIT": part["HADM_ID"].map(split), "HADM_ID": part["HADM_ID"]})
                      .drop_duplicates().sort_values(["SPLIT", "HADM_ID"]) for part in known])
    assert keys.equals(keys.sort_values(["SPLIT", "HADM_ID"]))  # part order is (split, HADM_ID) order
    unknown = frame["HADM_ID"].isna() | ~frame["HADM_ID"].isin(split.index)
    last = parts[-1]
    assert (~last["HADM_ID"].isin(split.index)).all() and len(last) == int(unknown.sum())
    assert len(parts) <= partitions + 1  # the known admissions' parts, and one of the rest


def test_routed_rows_of_no_known_admission_are_cut_by_rows(tmp_path):
    frame = lab_frame()
    engine = PartsEngine(tmp_path, rows_per_part=20, workers=1)
    stored = _routed(engine, frame, pd.DataFrame({"HADM_ID": [], "SPLIT": pd.Series([], dtype="str")}), block=25)
    # No admission is known: every row is of no known admission, in parts of about 20 rows in source line order.
    assert len(stored.paths) > 5 and max(stored.lengths) <= 25 + 25
    assert pd.concat(stored.read()).index.is_monotonic_increasing
    pd.testing.assert_frame_equal(engine.rows(stored), frame)


def test_admission_ranges_grow_with_admissions_so_a_range_stays_a_fraction_of_a_part():
    assert [range_count(n) for n in (0, 1, 28, FEWEST_RANGES, 10_000)] == [1, 1, 28, FEWEST_RANGES, FEWEST_RANGES]
    # MIMIC-IV's 431,231 admissions: 843 ranges of at most 512 admissions, not 64 of 6,738 (1.1-1.3M rows each)
    assert range_count(431_231) == 843 and -(-431_231 // range_count(431_231)) <= ADMISSIONS_PER_RANGE


def test_ranges_are_packed_into_parts_of_at_most_the_rows_asked():
    rows = np.array([300, 300, 300, 300, 1_500, 100, 0, 900, 200])
    part = packed(rows, 1_000)
    assert part.tolist() == [0, 0, 0, 1, 2, 3, 3, 3, 4]  # a range over 1,000 rows is a part alone
    sums = pd.Series(rows).groupby(part).sum()
    assert (sums[sums.index != 2] <= 1_000).all() and np.all(np.diff(part) >= 0)
    assert packed(np.array([], dtype="int64"), 10).tolist() == []


def test_routed_parts_hold_at_most_rows_per_part_when_no_admission_is_larger(tmp_path):
    """The known admissions' parts stay within rows_per_part (each admission is a range here), cut in order; a part
    of whole ranges used to run past it by up to a range."""
    frame, splits = lab_frame(), _splits()
    engine = PartsEngine(tmp_path, rows_per_part=40, workers=1)
    stored = _routed(engine, frame, splits, block=37)
    known = frame["HADM_ID"].isin(splits["HADM_ID"])
    assert frame[known].groupby("HADM_ID").size().max() <= 40
    lengths = list(stored.lengths)
    parts = list(stored.read())
    known_parts = [n for n, part in enumerate(parts) if part["HADM_ID"].isin(splits["HADM_ID"]).all()]
    assert len(known_parts) >= 5 and all(lengths[n] <= 40 for n in known_parts)
    assert sum(lengths[n] for n in known_parts) == int(known.sum())
    pd.testing.assert_frame_equal(engine.rows(stored), frame)
