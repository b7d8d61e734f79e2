"""The partitioned flow (pipeline/engine.py's PartsEngine): LABEVENTS cut by admission right after the raw checks,
every stage and fit run one part at a time from Parquet files. With 1, 2 or many parts it gives the in-memory run's
report, stats.json and graph files byte for byte, on the sample, on every corpus case and on generated data with
constant, tied, late and outpatient rows (the Dask engine's build is compared in tests/pipeline/test_engine.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.engine import Link, PartsEngine, Stored, parts_engine
from pipeline.builds import build
from pipeline.flow import validate
from pipeline.work import Call
from pipeline.quarantine import Kept, Step
from bench.synth import write_synthetic
from tests.corpus import CASES, build as build_case

SYNTHETIC_ROWS = 40_000  # ~90 admissions, every special item of pipeline.synth, 15% outpatient rows


def output_files(out: Path) -> dict[str, bytes]:
    """Every file a build wrote, by its path in ``out`` (not the folder's owner marker)."""
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*"))
            if path.is_file() and path.name != ".badpoints"}


def assert_same_validation(got, expected) -> None:
    """The same report, fitted state (stats.json), quarantine, steps and edge rows, bit for bit."""
    assert got.report.as_json() == expected.report.as_json()
    assert got.prepared.saved_state() == expected.prepared.saved_state()
    assert got.prepared.steps == expected.prepared.steps
    pd.testing.assert_frame_equal(got.prepared.quarantine.whole(), expected.prepared.quarantine.whole(), check_exact=True)
    if expected.prepared.edges is None:
        assert got.prepared.edges is None
    else:  # the parts engine hands the edge rows on in their parts: read in part order, they are the same frame
        assert isinstance(got.prepared.edges, Stored)
        edges = pd.concat(list(got.prepared.edges.read()))
        pd.testing.assert_frame_equal(edges, expected.prepared.edges, check_exact=True)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic")
    write_synthetic(folder, rows=SYNTHETIC_ROWS, seed=11)
    return folder


@pytest.fixture(scope="module")
def built_whole(synthetic, tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "out"
    assert build(synthetic, out, _config()).exit_code == 0
    return output_files(out)


def _config():
    import dataclasses

    config = load_config()
    return dataclasses.replace(config, graph=dataclasses.replace(config.graph, batch_size=8))


@pytest.mark.parametrize("partitions", [1, 2, 11])
def test_generated_data_in_parts_builds_the_same_files(synthetic, built_whole, tmp_path, partitions):
    with parts_engine(partitions=partitions) as engine:
        built = build(synthetic, tmp_path / "out", _config(), engine=engine)
        reasons = set(built.validation.prepared.quarantine.whole()["REASON"])  # read while the engine's files last
    assert built.exit_code == 0 and len(built.graphs) > 6
    files = output_files(tmp_path / "out")
    assert sorted(files) == sorted(built_whole) and any(name.endswith(".pt") for name in files)
    assert [name for name in files if files[name] != built_whole[name]] == []
    assert {"outpatient lab (no HADM_ID)", "charted before the admission day"} <= reasons
    assert built.validation.prepared.ledger()["deduplicated"] > 0  # CHARTTIME ties merged in every part
    assert built.validation.prepared.fitted.get("scale").constant_items_


def test_parts_worked_on_by_two_processes_build_the_same_files(synthetic, built_whole, tmp_path):
    """``workers=2``: every part's stage, fit and pick runs in one of two spawned processes; the files are the same."""
    with parts_engine(partitions=5, workers=2) as engine:
        built = build(synthetic, tmp_path / "out", _config(), engine=engine)
        assert engine._pool is not None  # the work went to the processes
    assert engine._pool is None  # and they were stopped with the engine
    assert built.exit_code == 0
    files = output_files(tmp_path / "out")
    assert [name for name in files if files[name] != built_whole[name]] == [] and sorted(files) == sorted(built_whole)


def test_blocks_checked_and_routed_by_two_processes_give_the_same_validation(synthetic, tmp_path, monkeypatch):
    """LABEVENTS read in many small blocks, each checked, related, guarded and written into its admission ranges by
    one of two worker processes (``pipeline.parse.check_and_route``): the in-memory run's report and rows."""
    import pipeline.load

    expected = validate(synthetic, _config())
    monkeypatch.setitem(pipeline.load.read_blocks.__kwdefaults__, "block_bytes", 64 * 2**10)  # dozens of blocks
    with parts_engine(partitions=3, workers=2, folder=tmp_path) as engine:
        got = validate(synthetic, _config(), engine=engine)
        routed = {one.path for part in got.tables.labevents.paths for one in part}
        assert engine._pool is not None and len(routed) > 20  # each block a file, written in the worker processes
        assert_same_validation(got, expected)


def test_quarantine_kept_in_many_line_ranges_writes_the_same_files(synthetic, tmp_path, monkeypatch):
    """Quarantine records on disk in many line ranges, quarantine.parquet written in many row groups: the files of
    the in-memory run, whose quarantine is one frame."""
    import pyarrow.parquet as pq

    from pipeline.engine import Ranged

    monkeypatch.setattr("pipeline.write.ROW_GROUP", 500)
    assert build(synthetic, tmp_path / "whole", _config()).exit_code == 0
    for module in ("pipeline.quarantine", "pipeline.engine"):
        monkeypatch.setattr(f"{module}.LINE_RANGE", 3_000)
    with parts_engine(partitions=3) as engine:
        built = build(synthetic, tmp_path / "out", _config(), engine=engine)
        ranged = [s for s in built.validation.prepared.quarantine.sources if isinstance(s, Ranged)]
        assert ranged and max(len(s.ranges()) for s in ranged) > 5
    assert built.exit_code == 0
    files, whole = output_files(tmp_path / "out"), output_files(tmp_path / "whole")
    assert [name for name in files if files[name] != whole[name]] == []
    assert pq.ParquetFile(tmp_path / "out" / "quarantine.parquet").num_row_groups > 5


@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_the_sample_in_parts_builds_the_same_files(sample_dir, tmp_path, partitions):
    whole = build(sample_dir, tmp_path / "whole", load_config())
    with parts_engine(partitions=partitions) as engine:
        parted = build(sample_dir, tmp_path / "parts", load_config(), engine=engine)
    assert parted.report.as_json() == whole.report.as_json()
    assert output_files(tmp_path / "parts") == output_files(tmp_path / "whole")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_corpus_case_in_parts_gives_the_same_report(tmp_path, name):
    build_case(name, tmp_path)
    expected = validate(tmp_path, load_config())
    # Three parts here (at most one per admission); 1, 2 and many are compared on the sample and generated data.
    with parts_engine(partitions=3) as engine:
        assert_same_validation(validate(tmp_path, load_config(), engine=engine), expected)


def test_rows_per_part_sets_how_many_parts(synthetic):
    tables = validate(synthetic, load_config()).tables
    with parts_engine(rows_per_part=SYNTHETIC_ROWS // 4) as engine:
        stored = engine.partition(tables.labevents)
        assert 3 <= len(stored.paths) <= 4 and len(stored) == SYNTHETIC_ROWS
        assert engine.collect(stored).sort_index().equals(tables.labevents.sort_index())


# -- the pieces ------------------------------------------------------------------------------------------------
def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    hadm = rng.integers(100, 130, size=300)
    return pd.DataFrame({
        "HADM_ID": pd.array(np.where(hadm % 11 == 0, pd.NA, hadm), dtype="Int64"),
        "VALUE": pd.Series(np.where(hadm % 3 == 0, None, "x" + pd.Series(hadm).astype(str)), dtype="str"),
        "VALUENUM": rng.normal(size=300),
        "CHARTTIME": pd.Timestamp("2150-01-01") + pd.to_timedelta(rng.integers(0, 1000, 300), unit="h"),
    }, index=pd.Index(np.arange(300) + 2, name="line"))


def test_parts_round_trip_through_arrow_files_in_row_order(tmp_path):
    frame = _frame()
    splits = pd.DataFrame({"HADM_ID": np.arange(100, 130), "SPLIT": pd.Series(["train", "val", "test"] * 10,
                                                                             dtype="str")})
    engine = PartsEngine(tmp_path, partitions=4)
    stored = engine.partition(frame, splits)
    assert isinstance(stored, Stored) and len(stored.paths) <= 4 and len(stored) == len(frame)
    pd.testing.assert_frame_equal(engine.rows(stored), frame)
    pd.testing.assert_frame_equal(engine.rows(stored, columns=["VALUENUM"]), frame[["VALUENUM"]])
    owners = [set(engine._read(path)["HADM_ID"].dropna()) for path in stored.paths]
    assert sum(map(len, owners)) == len(set().union(*owners))  # every admission in one part
    assert engine._read(stored.paths[-1])["HADM_ID"].isna().any()  # rows of no admission come last


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
    frame, splits = _frame(), _splits()
    engine = PartsEngine(tmp_path, partitions=partitions)
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
    frame = _frame()
    engine = PartsEngine(tmp_path, rows_per_part=20)
    stored = _routed(engine, frame, pd.DataFrame({"HADM_ID": [], "SPLIT": pd.Series([], dtype="str")}), block=25)
    # No admission is known: every row is of no known admission, in parts of about 20 rows in source line order.
    assert len(stored.paths) > 5 and max(stored.lengths) <= 25 + 25
    assert pd.concat(stored.read()).index.is_monotonic_increasing
    pd.testing.assert_frame_equal(engine.rows(stored), frame)


def test_the_partitioned_flow_never_holds_labevents_whole(sample_dir):
    """With the parts engine, the raw tables' LABEVENTS is its parts (the checked blocks went straight there)."""
    with parts_engine(partitions=2) as engine:
        validation = validate(sample_dir, load_config(), engine=engine)
        labevents = validation.tables.labevents
        assert isinstance(labevents, Stored) and len(labevents) == validation.report.attrition["LABEVENTS"]["read"]
        assert "REJECT" in labevents.columns


def test_a_chain_adds_up_steps_and_quarantine_of_the_parts(tmp_path):
    frame = _frame()
    engine = PartsEngine(tmp_path, partitions=3)
    stored = engine.partition(frame)

    def keep_positive(part: pd.DataFrame) -> Kept:
        kept = part["VALUENUM"] > 0
        return Kept(frame=part[kept], steps=(Step(stage="scale", step="positive", rows_in=len(part),
                                                 rows_out=int(kept.sum())),))

    chained = engine.chain(stored, [Link(calls=(Call(keep_positive),))])
    (kept,) = chained.links[0].kept
    assert kept.steps == (Step(stage="scale", step="positive", rows_in=300, rows_out=int((frame["VALUENUM"] > 0).sum())),)
    pd.testing.assert_frame_equal(engine.rows(chained.events), frame[frame["VALUENUM"] > 0])


def test_the_parts_folder_is_deleted_after_the_run_and_on_error(tmp_path):
    with parts_engine(partitions=2, folder=tmp_path) as engine:
        engine.partition(_frame())
        assert any(tmp_path.rglob("*.arrow"))
    assert not any(tmp_path.iterdir())
    with pytest.raises(RuntimeError), parts_engine(partitions=2, folder=tmp_path) as engine:
        engine.partition(_frame())
        raise RuntimeError("a failed run")
    assert not any(tmp_path.iterdir())


def test_auto_takes_parts_from_the_text_labevents_holds(tmp_path, sample_dir, monkeypatch):
    from pipeline import engine as engines

    size = (sample_dir / "LABEVENTS.csv").stat().st_size
    assert not engines.in_parts(sample_dir)  # the sample: far below 256 MiB, the pandas engine
    monkeypatch.setattr(engines, "AUTO_PARTS_BYTES", size)
    assert engines.in_parts(sample_dir)
    zipped = tmp_path / "hosp"
    zipped.mkdir()
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // engines.GZIP_TEXT_RATIO + 1))
    assert engines.in_parts(tmp_path)  # a .gz counts for the text it holds, about seven times its size
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // engines.GZIP_TEXT_RATIO - 10))
    assert not engines.in_parts(tmp_path)
    assert not engines.in_parts(tmp_path / "nowhere")  # no LABEVENTS: pandas, and the run says why


def test_a_killed_runs_parts_folder_is_removed_by_the_next_run(tmp_path):
    """A run killed for memory leaves its parts (tens of GB at MIMIC-IV scale); the next run removes the folders
    whose owner is gone, and leaves a live run's folder and anything it cannot judge."""
    import subprocess
    import sys

    from pipeline.engine import OWNER, PARTS_PREFIX

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan, live, unknown = (tmp_path / f"{PARTS_PREFIX}{name}" for name in ("orphan", "live", "unknown"))
    for folder in (orphan, live, unknown):
        folder.mkdir()
        (folder / "part-000000.arrow").write_bytes(b"rows")
    (orphan / OWNER).write_text(gone.stdout.strip())
    (live / OWNER).write_text(str(os.getpid()))
    with parts_engine(partitions=2, folder=tmp_path) as engine:
        assert (engine.folder / OWNER).read_text() == str(os.getpid())
        assert not orphan.exists() and live.exists() and unknown.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, unknown.name]


def test_a_part_vouched_for_is_not_validated_again_by_the_next_stage_in_a_worker(tmp_path):
    """``_chain_part`` as a worker process runs it (no flow around it): a part that passed the stage before's guard
    (``schema``) is not validated again as the next stage's input; a part not vouched for is."""
    import pandera.pandas as pa

    from pipeline.engine import _chain_part, write_part
    from schemas.guard import guarded

    validated = []

    class Counted(pa.DataFrameModel):
        @pa.dataframe_check
        def counted(cls, frame: pd.DataFrame) -> bool:
            validated.append(len(frame))
            return True

    @guarded(stage="scale", takes=Counted)
    def halve(part: pd.DataFrame) -> pd.DataFrame:
        return part.assign(VALUENUM=part["VALUENUM"] / 2)

    source = tmp_path / "part.arrow"
    write_part(_frame(), source)
    work = ((Link(calls=(Call(halve),)),), ())
    done = _chain_part((source, tmp_path / "vouched.arrow"), work=work, schema=Counted)
    assert done.rows == len(_frame()) and validated == []
    _chain_part((source, tmp_path / "not.arrow"), work=work, schema=None)
    assert validated == [len(_frame())]


def _keeps_freed_memory(_: int) -> bool:
    """In a worker: whether it keeps what a part freed (Arrow's pool is not emptied between parts)."""
    from pipeline import engine

    return engine._GIVE_BACK_BARRIER is not None


def _give_back_barrier(_: int) -> tuple[bool, int]:
    """In a worker: whether the workers' give-back barrier broke (one worker never came), and who waits at it."""
    from pipeline import engine

    return engine._GIVE_BACK_BARRIER.broken, engine._GIVE_BACK_BARRIER.n_waiting


def _torch_threads(_: int) -> tuple[str | None, int]:
    """In a worker: OMP_NUM_THREADS, and the threads torch's loops run on once it is imported there."""
    import os

    import torch

    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


def test_workers_run_torch_on_one_thread_each(tmp_path):
    """Two workers on two cores: each runs torch's loops on one thread (with two each, OpenMP's threads spun against
    each other and the graphs took 3.5 times as long); this process keeps its own."""
    import os

    here = os.environ.get("OMP_NUM_THREADS")
    engine = PartsEngine(tmp_path, workers=2)
    try:
        assert set(engine._map(_torch_threads, range(4))) == {("1", 1)}
    finally:
        engine.close()
    assert os.environ.get("OMP_NUM_THREADS") == here


def test_workers_keep_freed_memory_during_a_pass_and_all_give_it_back_after(tmp_path):
    """A worker keeps the memory a part frees for its next part; when a pass's results are all read, each of the
    two workers gives it back once (they meet at a barrier, so neither takes both tasks and none waits alone)."""
    engine = PartsEngine(tmp_path, workers=2)
    try:
        assert all(engine._map(_keeps_freed_memory, range(8)))
        for _ in range(2):  # the pass after also ended with both workers at the barrier
            assert set(engine._map(_give_back_barrier, range(4))) == {(False, 0)}
    finally:
        engine.close()
    from pipeline import engine as here

    assert here._GIVE_BACK_BARRIER is None  # this process empties Arrow's pool before each part, as before
