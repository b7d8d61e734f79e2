"""pipeline/meds/shards.py and combine.py: a shard's partial on small tables, and partials that add up to what the
whole data gives (the float64 reference std two-pass, whatever the shards)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.meds.combine import combine
from pipeline.meds.formula import readiness
from pipeline.meds.shards import read_shard, subject_spans


def _write(path, subjects, times, codes, values, text=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.asarray(values, dtype=np.float32)
    pq.write_table(pa.table({
        "subject_id": pa.array(subjects, pa.int64()),
        "time": pa.array(np.asarray(times, dtype="datetime64[us]"), pa.timestamp("us")),
        "code": pa.array(codes, pa.string()),
        "numeric_value": pa.array(values, pa.float32(), mask=np.isnan(values)),
        "text_value": pa.array(text or [None] * len(codes), pa.large_string()),
    }), path)
    return path


def test_subject_spans_catch_a_split_run_and_time_going_back():
    frame = pd.DataFrame({"subject_id": [1, 1, 2, 1, 3, 3], "time": [0, 1, 0, 2, 5, 4]})
    spans = subject_spans(frame).set_index("subject_id")
    assert spans["out_of_order"].to_dict() == {1: True, 2: False, 3: True}
    assert spans["rows"].to_dict() == {1: 3, 2: 1, 3: 2}


def test_a_partial_counts_values_text_and_bounds(tmp_path):
    path = _write(tmp_path / "train" / "0.parquet", [1, 1, 1, 1], [0, 1, 2, 3], ["A", "A", "A", "B"],
                  [1.0, np.inf, np.nan, 5e12], text=[None, None, "<1", None])
    part = read_shard(path, "train/0", fit=True, bound=1e10)
    a, b = part.codes.loc["A"], part.codes.loc["B"]
    assert (a["rows"], a["numeric"], a["inf"], a["text_only"], a["fit_n"]) == (3, 2, 1, 1, 1)
    assert b["beyond"] == 1 and part.fitted.n.tolist() == [2, 1]  # inf counts for MEDS-Transforms, not NaN


def test_the_reference_std_is_the_whole_data_s_whatever_the_shards(tmp_path):
    rng = np.random.default_rng(0)
    x = (1e4 + rng.uniform(-1e-2, 1e-2, 300)).astype(np.float32)
    parts = []
    for i, chunk in enumerate(np.array_split(x, 3)):
        path = _write(tmp_path / "train" / f"{i}.parquet", list(range(len(chunk))), [0] * len(chunk),
                      ["A"] * len(chunk), chunk)
        parts.append(read_shard(path, f"train/{i}", fit=True, bound=1e10))
    combined = combine(parts[::-1])
    assert np.isclose(combined.codes.loc["A", "std64"], np.std(x.astype(np.float64)), rtol=1e-9)
    assert combined.fitted.n.tolist() == [300]
    ready = readiness(combined.fitted, combined.codes)
    assert ready.loc["A", "std64"] > 0.005 and ready.loc["A", "non_finite"] == 300  # float32 cancels: std 0 or NaN
    assert "cancellation" in ready.loc["A", "why"]


def test_a_shard_read_when_memory_runs_out_raises_it_never_an_unreadable_shard(tmp_path, monkeypatch):
    """Arrow's MemoryError is an ArrowException too: it was reported as the shard being unreadable (a finding about
    the data)."""
    import pytest

    from pipeline.meds import shards

    path = _write(tmp_path / "train" / "0.parquet", [1], [0], ["A"], [1.0])

    def exhausted(*args, **kwargs):
        raise pa.lib.ArrowMemoryError("malloc of size 4096 failed")

    monkeypatch.setattr(shards.pq, "read_table", exhausted)
    with pytest.raises(MemoryError):
        read_shard(path, "train/0", fit=True, bound=1e10)
