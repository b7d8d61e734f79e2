"""pipeline/engines/registry.py and options.py: every engine by name, opened with the options its kind reads; the
options' defaults and the one rule between partitions and rows_per_part; the choice ``auto`` makes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from types import SimpleNamespace

import pytest
import typer

from pipeline import cli
from pipeline.engines import registry
from pipeline.engines.options import EngineKind, EngineOptions
from pipeline.engines.pandas import PANDAS
from pipeline.engines.parts import PartsEngine
from pipeline.kernel.options import ConfigError
from tests.pipeline.engines.rows import lab_frame


def _pid_and(value: int) -> tuple[int, int]:
    return os.getpid(), value * 2


@pytest.mark.parametrize("name", list(registry.ENGINES))
def test_every_registered_engine_opens_works_and_closes(name, tmp_path):
    """Opened by name with a small LocalCluster for Dask and one process for parts: each runs an item through
    ``each`` (the call a MEDS run makes), and what it made on disk is gone once it is closed."""
    options = EngineOptions(workers=1, memory_limit="1GB", partitions=2)
    with registry.open_engine(name, options) as engine:
        assert isinstance(engine.keeps_parts, bool)
        assert [value for _, value in engine.each(_pid_and, [1, 2, 3])] == [2, 4, 6]
        folder = getattr(engine, "folder", None)
        assert engine.keeps_parts == (folder is not None)
        assert folder is None or folder.is_dir()
    assert folder is None or not folder.exists()


def test_pandas_yields_the_pandas_engine_itself():
    with registry.open_engine("pandas") as engine:
        assert engine is PANDAS
    with registry.open_engine("auto", size=registry.InputSize(0)) as engine:
        assert engine is PANDAS  # a small input


def test_the_options_defaults_are_the_clis():
    assert EngineOptions() == EngineOptions(workers=2, memory_limit="4GB", partitions=None, rows_per_part=1_000_000,
                                            scheduler=None)
    command = typer.main.get_command(cli.app)
    for name in ("validate", "build"):
        defaults = {param.name: param.default for param in command.commands[name].params}
        assert {key: defaults[key] for key in ("workers", "memory_limit", "partitions", "scheduler")} == {
            key: getattr(EngineOptions(), key) for key in ("workers", "memory_limit", "partitions", "scheduler")}
        assert defaults["engine"] == registry.AUTO


def test_the_engine_choices_and_build_targets_come_from_their_declarations():
    from pipeline.builds import TARGETS

    assert [member.value for member in cli.EngineName] == [registry.AUTO, *registry.ENGINES]
    assert [member.value for member in cli.BuildTarget] == list(TARGETS)


def test_options_are_checked_when_made():
    with pytest.raises(ConfigError, match=r"\[engine\] workers must be a whole number >= 1, got 0"):
        EngineOptions(workers=0)
    with pytest.raises(ConfigError, match="partitions"):
        EngineOptions(partitions=0)


def test_partitions_win_over_rows_per_part():
    """One rule, on the options: a count of parts given, rows_per_part is not read."""
    counted = EngineOptions(partitions=3, rows_per_part=10)
    assert counted.part_rows is None and counted.parts_for(1_000) == 3 and counted.parts_for(0) == 3
    by_rows = EngineOptions(rows_per_part=10)
    assert by_rows.part_rows == 10 and by_rows.parts_for(95) == 10 and by_rows.parts_for(0) == 1


def test_the_parts_engine_cuts_as_the_options_say(tmp_path):
    frame = lab_frame()  # 300 rows of 30 admissions
    counted = PartsEngine(tmp_path, partitions=2, rows_per_part=1, workers=1).partition(frame)
    by_rows = PartsEngine(tmp_path, rows_per_part=100, workers=1).partition(frame)
    assert len(counted.paths) <= 2 < len(by_rows.paths)


def test_an_engine_opens_with_only_the_options_its_kind_reads():
    """The others are at their defaults: what a kind declares it reads is all it is handed."""
    with registry.open_engine("parts", EngineOptions(workers=1, memory_limit="9GB", scheduler="tcp://x:1")) as engine:
        assert engine.options == EngineOptions(workers=1)


def test_a_made_up_engine_registered_is_opened_by_its_name(monkeypatch):
    monkeypatch.setattr(registry, "ENGINES", dict(registry.ENGINES))
    opened = []

    @contextlib.contextmanager
    def echo(options: EngineOptions):
        opened.append(options)
        yield SimpleNamespace(keeps_parts=False, options=options)
        opened.append("closed")

    kind = registry.register(EngineKind("echo", echo, reads=("workers",), doc="a stand-in"))
    assert registry.names()[-1] == "echo" and registry.resolve("echo") is kind
    with registry.open_engine("echo", EngineOptions(workers=7, memory_limit="9GB")) as engine:
        assert engine.options == EngineOptions(workers=7)
    assert opened == [EngineOptions(workers=7), "closed"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(kind)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(dataclasses.replace(kind, name=registry.AUTO))


def test_a_kind_that_reads_an_option_that_does_not_exist_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="no engine option named threads"):
        EngineKind("bad", registry.ENGINES["pandas"].opens, reads=("threads",))
    assert EngineKind("quiet", registry.ENGINES["pandas"].opens).starts == "the quiet engine"
    assert registry.ENGINES["dask"].starts == "the Dask cluster"


def test_a_name_not_registered_and_auto_without_a_size_are_refused():
    with pytest.raises(ValueError, match="no engine named 'spark': one of auto, pandas, parts, dask"):
        registry.resolve("spark")
    with pytest.raises(ValueError, match="by the size of the input"):
        registry.resolve("auto")


# -- auto -------------------------------------------------------------------------------------------------------
def test_auto_takes_parts_from_the_text_labevents_holds(tmp_path, sample_dir, monkeypatch):
    size = (sample_dir / "LABEVENTS.csv").stat().st_size
    assert not registry.in_parts(sample_dir)  # the sample: far below 256 MiB, the pandas engine
    monkeypatch.setattr(registry, "AUTO_PARTS_BYTES", size)
    assert registry.in_parts(sample_dir)
    assert registry.resolve("auto", registry.labevents_size(sample_dir)).name == "parts"
    zipped = tmp_path / "hosp"
    zipped.mkdir()
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // registry.GZIP_TEXT_RATIO + 1))
    assert registry.in_parts(tmp_path)  # a .gz counts for the text it holds, about seven times its size
    (zipped / "labevents.csv.gz").write_bytes(b"\x1f\x8b" + bytes(size // registry.GZIP_TEXT_RATIO - 10))
    assert not registry.in_parts(tmp_path)
    assert not registry.in_parts(tmp_path / "nowhere")  # no LABEVENTS: pandas, and the run says why


def test_auto_weighs_a_meds_dataset_by_its_shards(tmp_path, monkeypatch):
    for shard in ("train/0", "train/1", "held_out/0"):
        path = tmp_path / "data" / f"{shard}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(1_000))
    (tmp_path / "data" / "notes.txt").write_bytes(bytes(10_000))  # not a shard
    size = registry.meds_size(tmp_path)
    assert size == registry.InputSize(3_000 * registry.MEDS_TEXT_RATIO, files=3)
    assert registry.auto_name(size) == "pandas"
    monkeypatch.setattr(registry, "AUTO_PARTS_BYTES", size.text_bytes)
    assert registry.auto_name(size) == "parts"
    assert registry.auto_name(dataclasses.replace(size, files=1)) == "pandas"  # one shard: one process reads it
    assert registry.meds_size(tmp_path / "nowhere") == registry.InputSize(0, files=0)


def test_auto_names_parts_for_any_input_from_the_bytes_of_text_it_holds():
    assert registry.auto_name(registry.InputSize(registry.AUTO_PARTS_BYTES)) == "parts"
    assert registry.auto_name(registry.InputSize(registry.AUTO_PARTS_BYTES - 1)) == "pandas"
    assert registry.auto_name(registry.InputSize(registry.AUTO_PARTS_BYTES, files=2)) == "parts"

