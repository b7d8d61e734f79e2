"""The quarantine ledger (pipeline/kernel/quarantine.py): which rows a filter sets aside, under which reason, and the
record kept of them (source line, table, stage, reason and keys, never the values)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.kernel.quarantine import (QUARANTINE_COLUMNS, LineMask, Quarantine, combine, empty_quarantine, quarantine_frame,
                                        set_aside)

LINES = pd.Index([2, 3, 5, 8], name="line")


def _events() -> pd.DataFrame:
    return pd.DataFrame({"HADM_ID": pd.array([10, None, 11, 12], dtype="Int64"), "ITEMID": [50, 51, 52, 53],
                         "VALUE": ["secret", "a", "b", "c"]}, index=LINES)


def test_a_row_goes_to_the_first_reason_that_takes_it():
    events = _events()
    kept = set_aside(events, [("outpatient", events["HADM_ID"].isna()), ("item", events["ITEMID"] >= 51)],
                     stage="clean", columns={"outpatient": "HADM_ID"})
    assert kept.frame.index.tolist() == [2]
    assert kept.quarantine["REASON"].to_dict() == {3: "outpatient", 5: "item", 8: "item"}
    assert [(s.step, s.rows_in, s.rows_out, s.quarantined, s.table, s.column) for s in kept.steps] == [
        ("outpatient", 4, 3, 1, "LABEVENTS", "HADM_ID"), ("item", 3, 1, 2, "LABEVENTS", None)]


def test_the_record_keeps_keys_and_lines_never_values():
    events = _events()
    kept = set_aside(events, [("item", events["ITEMID"] == 52)], stage="clean")
    assert list(kept.quarantine.columns) == list(QUARANTINE_COLUMNS)
    assert kept.quarantine.index.name == "line"
    assert kept.quarantine.loc[5].tolist() == ["LABEVENTS", "clean", "item", 11, 52]
    assert "secret" not in kept.quarantine.to_csv()


def test_a_step_names_the_table_it_filtered():
    admissions = pd.DataFrame({"HADM_ID": [10, 11]}, index=pd.Index([2, 3], name="line"))
    kept = set_aside(admissions, [("rejected", admissions["HADM_ID"] == 11)], stage="clean", table="ADMISSIONS")
    assert kept.steps[0].table == "ADMISSIONS"
    assert kept.quarantine["TABLE"].tolist() == ["ADMISSIONS"]
    assert kept.quarantine["ITEMID"].isna().all()  # a table without the key keeps it empty


def test_a_mask_with_missing_answers_or_rows_takes_only_rows_it_says_true_of():
    events = _events()
    unknown = pd.Series([True, pd.NA, False, pd.NA], index=LINES, dtype="boolean")
    partial = pd.Series([True], index=pd.Index([8], name="line"))  # says nothing of lines 2, 3 and 5
    kept = set_aside(events, [("unknown", unknown), ("partial", partial)], stage="clean")
    assert kept.quarantine["REASON"].to_dict() == {2: "unknown", 8: "partial"}
    assert kept.frame.index.tolist() == [3, 5]


def test_a_filter_that_takes_nothing_keeps_every_row_and_records_an_empty_step():
    events = _events()
    kept = set_aside(events, [("none", pd.Series(False, index=LINES))], stage="clean")
    pd.testing.assert_frame_equal(kept.frame, events)
    assert kept.steps[0].quarantined == 0 and kept.quarantine.empty


def test_an_empty_quarantine_has_the_record_of_a_filled_one():
    events = _events()
    filled = set_aside(events, [("item", events["ITEMID"] == 52)], stage="clean").quarantine
    pd.testing.assert_frame_equal(empty_quarantine(), filled.iloc[:0])
    pd.testing.assert_frame_equal(combine([]), filled.iloc[:0])
    assert empty_quarantine().reset_index().columns.tolist() == ["line", *QUARANTINE_COLUMNS]


def test_combine_orders_by_table_line_and_stage_whatever_the_order_of_its_parts():
    events = _events()
    late = quarantine_frame(events.loc[[8, 2]], "LABEVENTS", "bucket", "late")
    early = quarantine_frame(events.loc[[5]], "LABEVENTS", "clean", "item")
    admissions = quarantine_frame(pd.DataFrame({"HADM_ID": [12]}, index=pd.Index([4], name="line")),
                                  "ADMISSIONS", "clean", "rejected")
    expected = [("ADMISSIONS", 4, "clean"), ("LABEVENTS", 2, "bucket"), ("LABEVENTS", 5, "clean"),
                ("LABEVENTS", 8, "bucket")]
    for parts in ([late, early, admissions], [admissions, early, late], [early, empty_quarantine(), late, admissions]):
        whole = combine(parts)
        assert list(zip(whole["TABLE"], whole.index, whole["STAGE"])) == expected


@pytest.mark.parametrize("reason", ["item", pd.Series(["item", "other"], index=pd.Index([5, 8], name="line"))])
def test_reasons_are_text_given_once_or_per_row(reason):
    events = _events().loc[[5, 8]]
    record = quarantine_frame(events, "LABEVENTS", "fill", reason)
    assert record["REASON"].dtype == "str"
    assert record["REASON"].tolist() == (["item", "item"] if isinstance(reason, str) else ["item", "other"])


class _ByLines:
    """Records kept by line range, as a parts engine keeps them (in memory here)."""

    def __init__(self, records: pd.DataFrame, width: int) -> None:
        number = records.index // width
        self.kept = {int(n): rows for n, rows in records.groupby(number)}

    def ranges(self) -> tuple[int, ...]:
        return tuple(sorted(self.kept))

    def range(self, number: int, columns=None) -> pd.DataFrame:
        rows = self.kept[number].sort_index()
        return rows if columns is None else rows[list(columns)]


def _records(seed: int) -> list[pd.DataFrame]:
    """Quarantine records of several stages and tables, lines shuffled."""
    rng = np.random.default_rng(seed)
    lines = rng.permutation(np.arange(2, 400))
    events = pd.DataFrame({"HADM_ID": pd.array(rng.integers(10, 20, len(lines)), dtype="Int64"),
                           "ITEMID": rng.integers(50, 55, len(lines))}, index=pd.Index(lines, name="line"))
    events.loc[events.index[:40], "HADM_ID"] = pd.NA
    return [quarantine_frame(events.iloc[:150], "LABEVENTS", "clean", "outpatient"),
            quarantine_frame(events.iloc[150:300], "LABEVENTS", "bucket", "late"),
            quarantine_frame(events.iloc[300:], "LABEVENTS", "dedup", "short")]


def test_records_kept_by_line_range_read_as_the_same_quarantine(monkeypatch):
    monkeypatch.setattr("pipeline.kernel.quarantine.LINE_RANGE", 64)
    clean, bucket, dedup = _records(seed=3)
    admissions = quarantine_frame(pd.DataFrame({"HADM_ID": [12, 13]}, index=pd.Index([70, 4], name="line")),
                                  "ADMISSIONS", "clean", "rejected")
    held = Quarantine((admissions, clean, bucket, dedup))
    kept = Quarantine((admissions, _ByLines(clean, 64), _ByLines(bucket, 64), dedup))
    expected = combine([admissions, clean, bucket, dedup])
    pd.testing.assert_frame_equal(held.whole(), expected)
    pd.testing.assert_frame_equal(kept.whole(), expected)
    chunks = list(kept.in_order())
    assert len(chunks) > 3 and all(len(chunk) <= 64 for chunk in chunks[1:])  # ADMISSIONS, then a range at a time
    pd.testing.assert_frame_equal(pd.concat(chunks), expected)
    assert kept.count("LABEVENTS") == held.count("LABEVENTS") == len(clean) + len(bucket) + len(dedup)
    assert kept.count("ADMISSIONS") == 2
    np.testing.assert_array_equal(kept.taken("LABEVENTS", "bucket").lines(), np.sort(bucket.index.to_numpy()))
    np.testing.assert_array_equal(held.taken("LABEVENTS", "bucket").lines(), np.sort(bucket.index.to_numpy()))


def test_by_reason_counts_rows_first_lines_items_and_admissions_of_each_reason(monkeypatch):
    monkeypatch.setattr("pipeline.kernel.quarantine.LINE_RANGE", 50)
    records = _records(seed=5)
    whole = combine(records)
    for quarantine in (Quarantine(tuple(records)), Quarantine(tuple(_ByLines(r, 50) for r in records))):
        found = quarantine.by_reason(lines=7)
        assert list(found) == sorted(found) == [("LABEVENTS", "bucket", "late"), ("LABEVENTS", "clean", "outpatient"),
                                                ("LABEVENTS", "dedup", "short")]
        for (table, stage, reason), summary in found.items():
            rows = whole[(whole["STAGE"] == stage) & (whole["REASON"] == reason)]
            assert summary.rows == len(rows)
            assert summary.lines.tolist() == sorted(rows.index)[:7]
            assert summary.items.to_dict() == rows["ITEMID"].astype("int64").value_counts().sort_index().to_dict()
            assert summary.admissions.tolist() == sorted(rows["HADM_ID"].dropna().astype("int64").unique())
        assert quarantine.by_reason(lines=3)[("LABEVENTS", "dedup", "short")].lines.tolist() == \
            sorted(records[2].index)[:3]


def test_an_empty_quarantine_reads_as_empty():
    empty = Quarantine()
    assert empty.whole().empty and list(empty.in_order()) == [] and empty.count("LABEVENTS") == 0
    assert empty.by_reason(lines=5) == {} and len(empty.taken("LABEVENTS", "clean").lines()) == 0
    assert not empty.taken("LABEVENTS", "clean").of(np.array([0, 1, 7, 8])).any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_line_mask_holds_exactly_the_lines_added_range_by_range(seed):
    """Lines added in chunks (a range at a time, in any order, some twice) read back as the set of them all; lines
    outside it (beyond the largest, negative, at byte edges) are not in it."""
    rng = np.random.default_rng(seed)
    lines = np.unique(rng.integers(0, 5_000, 900))
    mask = LineMask.empty()
    for chunk in np.array_split(rng.permutation(np.r_[lines, lines[:50]]), 7):
        before, held = mask, mask.lines()
        mask = mask.with_lines(chunk)
        np.testing.assert_array_equal(before.lines(), held)  # a new mask: the one before is unchanged
    np.testing.assert_array_equal(mask.lines(), lines)
    probe = np.r_[-1, 0, 7, 8, lines, lines + 1, lines.max() + 1, 10**9]
    np.testing.assert_array_equal(mask.of(probe), np.isin(probe, lines))
    assert len(mask.bits) <= lines.max() // 8 + 1
