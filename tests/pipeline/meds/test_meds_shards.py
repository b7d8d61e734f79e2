"""pipeline/meds/shards.py and combine.py: a shard's partial on small tables, and partials that add up to what the
whole data gives (the float64 reference std two-pass, whatever the shards); a shard that is not a regular file is
never opened, and one named with any bytes is read."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.meds.combine import combine
from pipeline.meds.formula import readiness
from pipeline.meds.shards import read_shard, shard_name, subject_spans


def _write(path, subjects, times, codes, values, text=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.asarray(values, dtype=np.float32)
    table = pa.table({
        "subject_id": pa.array(subjects, pa.int64()),
        "time": pa.array(np.asarray(times, dtype="datetime64[us]"), pa.timestamp("us")),
        "code": pa.array(codes, pa.string()),
        "numeric_value": pa.array(values, pa.float32(), mask=np.isnan(values)),
        "text_value": pa.array(text or [None] * len(codes), pa.large_string()),
    })
    with open(path, "wb") as handle:  # a path of any bytes
        pq.write_table(table, handle)
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


def _within(seconds: float, read: Callable[[], object], release: Callable[[], None]) -> object:
    """``read()`` run aside: what it returned, or a failure if it is still running after ``seconds`` (then
    ``release()`` unblocks it)."""
    done: list = []
    aside = threading.Thread(target=lambda: done.append(read()), daemon=True)
    aside.start()
    aside.join(seconds)
    if aside.is_alive():
        release()
        pytest.fail(f"still reading after {seconds} s")
    return done[0]


def _unblock(fifo: Path) -> Callable[[], None]:
    """A writer that opens and closes ``fifo``: a reader waiting on it reads the end."""
    return lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_shard_that_is_not_a_regular_file_is_unreadable_and_never_opened(tmp_path, kind):
    """A FIFO would wait for a writer for ever, /dev/zero be hashed without end: each is refused by stat alone."""
    path = tmp_path / "train" / "0.parquet"
    path.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(path)
        release, what = _unblock(path), "a FIFO (named pipe)"
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero on this machine")
        path.symlink_to("/dev/zero")
        release, what = (lambda: None), "a character device (a link to /dev/zero)"
    part = _within(10, lambda: read_shard(path, "train/0", fit=True, bound=1e10), release)
    assert part.unreadable == f"It is not a regular file but {what}; badpoints reads regular files only"
    assert part.rows == 0 and part.sha256 == ""


def test_a_shard_named_with_bytes_that_are_not_utf8_is_read_and_named_with_escapes(tmp_path):
    data = tmp_path / "data"
    path = Path(os.fsdecode(bytes(data) + b"/train/\xff\xfe.parquet"))
    _write(path, [1, 1], [0, 1], ["A", "A"], [1.0, 2.0])
    name = shard_name(data, path)
    assert name == "train/\\xff\\xfe"
    part = read_shard(path, name, fit=True, bound=1e10)
    assert part.unreadable is None and part.rows == 2 and combine([part]).codes.loc["A", "rows"] == 2


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
