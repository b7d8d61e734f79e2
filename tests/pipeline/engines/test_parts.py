"""pipeline/engines/parts.py: the partitioned flow (PartsEngine): LABEVENTS cut by admission right after the raw
checks, every stage and fit run one part at a time from Parquet files. With 1, 2 or many parts it gives the
in-memory run's report, stats.json and graph files byte for byte, on the sample, on every corpus case and on
generated data with constant, tied, late and outpatient rows (the Dask engine's build is compared in
tests/pipeline/engines/test_dask.py)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.engines.parts import PartsEngine, parts_engine
from pipeline.engines.stored import Stored
from pipeline.builds import build
from pipeline.flow import validate
from pipeline.kernel.calls import Call, Link
from pipeline.kernel.quarantine import Kept, Step
from tests.corpus import CASES, build as build_case
from tests.pipeline.engines.rows import SYNTHETIC_ROWS, edge_parts, lab_frame, output_files



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
    with parts_engine(partitions=partitions, workers=1) as engine:
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
    one of two worker processes (``pipeline.reading.parse.check_and_route``): the in-memory run's report and rows."""
    import pipeline.reading.load

    expected = validate(synthetic, _config())
    monkeypatch.setitem(pipeline.reading.load.read_blocks.__kwdefaults__, "block_bytes", 64 * 2**10)  # dozens of blocks
    with parts_engine(partitions=3, workers=2, folder=tmp_path) as engine:
        got = validate(synthetic, _config(), engine=engine)
        routed = {one.path for part in got.tables.labevents.paths for one in part}
        assert engine._pool is not None and len(routed) > 20  # each block a file, written in the worker processes
        assert_same_validation(got, expected)


def _rows_in(block: pd.DataFrame, *, plus: int) -> int:
    return len(block) + plus


def test_blocks_handed_to_worker_processes_are_deleted_once_their_results_are_read(tmp_path):
    engine = PartsEngine(tmp_path, workers=2)
    try:
        blocks = (lab_frame().iloc[start:start + 50] for start in range(0, 300, 50))
        results = engine.blocks(_rows_in, blocks, plus=1)
        assert next(results) == 51 and len(list(tmp_path.glob("part-*.arrow"))) >= 2  # the next blocks, handed on
        assert list(results) == [51] * 5
    finally:
        engine.close()
    assert not list(tmp_path.glob("part-*.arrow"))


def test_quarantine_kept_in_many_line_ranges_writes_the_same_files(synthetic, tmp_path, monkeypatch):
    """Quarantine records on disk in many line ranges, quarantine.parquet written in many row groups: the files of
    the in-memory run, whose quarantine is one frame."""
    import pyarrow.parquet as pq

    from pipeline.engines.stored import Ranged

    monkeypatch.setattr("pipeline.output.write.ROW_GROUP", 500)
    assert build(synthetic, tmp_path / "whole", _config()).exit_code == 0
    for module in ("pipeline.kernel.quarantine", "pipeline.engines.stored"):
        monkeypatch.setattr(f"{module}.LINE_RANGE", 3_000)
    with parts_engine(partitions=3, workers=1) as engine:
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
    with parts_engine(partitions=partitions, workers=1) as engine:
        parted = build(sample_dir, tmp_path / "parts", load_config(), engine=engine)
    assert parted.report.as_json() == whole.report.as_json()
    assert output_files(tmp_path / "parts") == output_files(tmp_path / "whole")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_corpus_case_in_parts_gives_the_same_report(tmp_path, name):
    build_case(name, tmp_path)
    expected = validate(tmp_path, load_config())
    # Three parts here (at most one per admission); 1, 2 and many are compared on the sample and generated data.
    with parts_engine(partitions=3, workers=1) as engine:
        assert_same_validation(validate(tmp_path, load_config(), engine=engine), expected)


def test_rows_per_part_sets_how_many_parts(synthetic):
    tables = validate(synthetic, load_config()).tables
    with parts_engine(rows_per_part=SYNTHETIC_ROWS // 4, workers=1) as engine:
        stored = engine.partition(tables.labevents)
        assert 3 <= len(stored.paths) <= 4 and len(stored) == SYNTHETIC_ROWS
        assert engine.collect(stored).sort_index().equals(tables.labevents.sort_index())


# -- the pieces ------------------------------------------------------------------------------------------------
def test_parts_round_trip_through_arrow_files_in_row_order(tmp_path):
    frame = lab_frame()
    splits = pd.DataFrame({"HADM_ID": np.arange(100, 130), "SPLIT": pd.Series(["train", "val", "test"] * 10,
                                                                             dtype="str")})
    engine = PartsEngine(tmp_path, partitions=4, workers=1)
    stored = engine.partition(frame, splits)
    assert isinstance(stored, Stored) and len(stored.paths) <= 4 and len(stored) == len(frame)
    pd.testing.assert_frame_equal(engine.rows(stored), frame)
    pd.testing.assert_frame_equal(engine.rows(stored, columns=["VALUENUM"]), frame[["VALUENUM"]])
    owners = [set(engine._read(path)["HADM_ID"].dropna()) for path in stored.paths]
    assert sum(map(len, owners)) == len(set().union(*owners))  # every admission in one part
    assert engine._read(stored.paths[-1])["HADM_ID"].isna().any()  # rows of no admission come last


def test_the_partitioned_flow_never_holds_labevents_whole(sample_dir):
    """With the parts engine, the raw tables' LABEVENTS is its parts (the checked blocks went straight there)."""
    with parts_engine(partitions=2, workers=1) as engine:
        validation = validate(sample_dir, load_config(), engine=engine)
        labevents = validation.tables.labevents
        assert isinstance(labevents, Stored) and len(labevents) == validation.report.attrition["LABEVENTS"]["read"]
        assert "REJECT" in labevents.columns


def test_a_chain_adds_up_steps_and_quarantine_of_the_parts(tmp_path):
    frame = lab_frame()
    engine = PartsEngine(tmp_path, partitions=3, workers=1)
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
    with parts_engine(partitions=2, folder=tmp_path, workers=1) as engine:
        engine.partition(lab_frame())
        assert any(tmp_path.rglob("*.arrow"))
    assert not any(tmp_path.iterdir())
    with pytest.raises(RuntimeError), parts_engine(partitions=2, folder=tmp_path, workers=1) as engine:
        engine.partition(lab_frame())
        raise RuntimeError("a failed run")
    assert not any(tmp_path.iterdir())


def test_a_killed_runs_parts_folder_is_removed_by_the_next_run(tmp_path):
    """A run killed for memory leaves its parts (tens of GB at MIMIC-IV scale); the next run removes the folders
    whose owner is gone, and leaves a live run's folder and anything it cannot judge."""
    import subprocess
    import sys

    from pipeline.engines.parts import OWNER, PARTS_PREFIX

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan, live, unknown = (tmp_path / f"{PARTS_PREFIX}{name}" for name in ("orphan", "live", "unknown"))
    for folder in (orphan, live, unknown):
        folder.mkdir()
        (folder / "part-000000.arrow").write_bytes(b"rows")
    (orphan / OWNER).write_text(gone.stdout.strip())
    (live / OWNER).write_text(str(os.getpid()))
    with parts_engine(partitions=2, folder=tmp_path, workers=1) as engine:
        assert (engine.folder / OWNER).read_text() == str(os.getpid())
        assert not orphan.exists() and live.exists() and unknown.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, unknown.name]


def _named_where_made(parts, names, *, batch_size, start=None):
    """A stand-in for made_graphs: which process saw which rows, numbered from ``start``, their admissions named by
    ``names`` (a frame handed to every piece)."""
    import os

    rows = pd.concat(list(parts))
    yield os.getpid(), dict(start or {}), names.loc[rows["HADM_ID"], "NAME"].tolist()


@pytest.mark.parametrize("workers", [2, 1])
def test_pieces_of_batches_are_made_in_the_parts_engines_worker_processes(tmp_path, workers):
    """With worker processes, the parts engine makes each piece of whole batches in one of them (a frame among the
    arguments read there from the parts folder), yielded in the rows' order; without, here, as one stream."""
    import os

    parts = edge_parts(7, 6)
    hadm = pd.concat(parts)["HADM_ID"]
    names = pd.DataFrame({"NAME": ("adm-" + hadm.astype(str)).to_numpy()}, index=hadm.to_numpy()).drop_duplicates()
    engine = PartsEngine(tmp_path, workers=workers)
    try:
        edges = Stored(paths=tuple(engine._write(part) for part in parts), lengths=tuple(map(len, parts)), order=None,
                       columns=("SPLIT", "HADM_ID"))
        made = list(engine.in_batches(_named_where_made, edges, names, batch_size=16, sees=tmp_path))
    finally:
        engine.close()
    assert [name for _, _, rows in made for name in rows] == ("adm-" + hadm.astype(str)).tolist()
    pids = {pid for pid, _, _ in made}
    if workers > 1:
        assert len(made) > 1 and os.getpid() not in pids and len(pids) <= 2
        assert made[0][1] == {"train": 0} and all(n % 16 == 0 for _, start, _ in made for n in start.values())
    else:
        assert pids == {os.getpid()} and len(made) == 1


def _loads_torch(parts, *, batch_size, start=None):
    import os

    import torch  # noqa: F401 (what the graphs load in a worker)

    yield os.getpid(), len(pd.concat(list(parts)))


def _pid_and_torch(part):
    import os
    import sys

    return os.getpid(), "torch" in sys.modules


def test_the_workers_after_a_pass_of_batches_are_fresh(tmp_path):
    """The pieces of batches (the graphs) load torch in the workers; the passes after them run in new processes
    that never did, so what the graphs loaded and fragmented is not held through the report."""
    parts = edge_parts(7, 4)
    engine = PartsEngine(tmp_path, workers=2)
    try:
        edges = Stored(paths=tuple(engine._write(part) for part in parts), lengths=tuple(map(len, parts)), order=None,
                       columns=("SPLIT", "HADM_ID"))
        made = list(engine.in_batches(_loads_torch, edges, batch_size=16, sees=tmp_path))
        after = list(engine.per_part(_pid_and_torch, edges))
    finally:
        engine.close()
    assert sum(rows for _, rows in made) == sum(map(len, parts))
    assert {pid for pid, _ in made}.isdisjoint({pid for pid, _ in after}) and len(after) == len(parts)
    assert not any(loaded for _, loaded in after)
