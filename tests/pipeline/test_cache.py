"""The cache: unchanged inputs are served parsed and checked; a change invalidates only its own table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipeline.cache import Cache
from pipeline.config import load_config
from pipeline.flow import validate
from pipeline.parse import RawTables
from tests.corpus import SAMPLE

TABLE_NAMES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(SAMPLE, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__", "*.png"))
    return folder


@pytest.fixture()
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path / "cache")


def entries(cache: Cache, kind: str = "tables") -> set[str]:
    return {p.name for p in (cache.root / kind).glob("*.parquet" if kind == "tables" else "*.json")}


def assert_same_tables(a: RawTables, b: RawTables) -> None:
    for table in TABLE_NAMES:
        pd.testing.assert_frame_equal(a.of(table), b.of(table))


def test_a_warm_run_gives_the_cold_runs_report_and_tables(data, cache):
    config = load_config(None)
    fresh = validate(data, config)
    cold = validate(data, config, cache=cache)
    tables_warm = validate(data, config, cache=cache, reuse_report=False)
    report_warm = validate(data, config, cache=cache)

    assert not cold.cached and not tables_warm.cached and report_warm.cached
    for run in (cold, tables_warm, report_warm):
        assert run.report.as_json() == fresh.report.as_json()
    assert_same_tables(tables_warm.tables, fresh.tables)
    pd.testing.assert_frame_equal(tables_warm.prepared.edges, fresh.prepared.edges)
    assert len(entries(cache)) == 3 and len(entries(cache, "reports")) == 1


def test_a_changed_input_invalidates_only_its_own_table(data, cache):
    config = load_config(None)
    validate(data, config, cache=cache)
    before = entries(cache)
    path = data / "LABEVENTS.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-5]))  # five fewer lab rows

    changed = validate(data, config, cache=cache)

    assert not changed.cached
    assert len(entries(cache) - before) == 1  # one new entry: LABEVENTS; the other two were served
    assert changed.report.as_json() == validate(data, config).report.as_json()
    assert changed.report.attrition["LABEVENTS"]["read"] == len(lines) - 1 - 5


def test_a_moved_data_folder_is_served_with_its_new_paths(data, cache, tmp_path):
    config = load_config(None)
    validate(data, config, cache=cache)
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)

    again = validate(moved, config, cache=cache)

    assert again.cached
    assert {Path(i.path).parent for i in again.report.inputs} == {moved}


@pytest.mark.parametrize("change", ["config", "show_values"])
def test_settings_that_change_findings_are_part_of_the_key(data, cache, tmp_path, change):
    config = load_config(None)
    validate(data, config, cache=cache)
    if change == "config":
        path = tmp_path / "bound.toml"
        path.write_text("[raw]\nvaluenum_abs_bound = 100.0\n")
        other, show = load_config(path), False
    else:
        other, show = config, True

    again = validate(data, other, cache=cache, show_values=show)

    assert not again.cached
    assert again.report.as_json() == validate(data, other, show_values=show).report.as_json()


def test_a_tampered_entry_is_ignored_and_rebuilt(data, cache):
    config = load_config(None)
    fresh = validate(data, config)
    validate(data, config, cache=cache, reuse_report=False)
    for path in (cache.root / "tables").glob("*.parquet"):
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
    (next((cache.root / "tables").glob("*.json"))).write_text("{not json")

    again = validate(data, config, cache=cache, reuse_report=False)

    assert again.report.as_json() == fresh.report.as_json()
    assert_same_tables(again.tables, fresh.tables)
    served = validate(data, config, cache=cache, reuse_report=False)  # rebuilt entries are good again
    assert_same_tables(served.tables, fresh.tables)


def test_the_cache_stays_within_its_size_bound(data, tmp_path):
    small = Cache(tmp_path / "small", max_bytes=64 * 1024)
    validate(data, load_config(None), cache=small)

    total = sum(p.stat().st_size for p in small.root.glob("*/*"))
    assert total <= 64 * 1024
    assert validate(data, load_config(None), cache=small).report.status in ("ok", "warnings", "errors")


def test_a_run_that_cannot_read_a_table_is_not_cached(data, cache):
    (data / "D_LABITEMS.csv").unlink()
    config = load_config(None)

    first = validate(data, config, cache=cache)

    assert first.exit_code == 2
    assert not (cache.root / "reports").exists() or not entries(cache, "reports")
    assert not validate(data, config, cache=cache).cached


def test_the_same_bytes_named_gz_are_not_served_from_the_plain_files_entry(data, cache):
    """Plain text named .gz is a compression error even when the same bytes were cached as a .csv."""
    config = load_config(None)
    validate(data, config, cache=cache)
    (data / "LABEVENTS.csv").rename(data / "LABEVENTS.csv.gz")

    renamed = validate(data, config, cache=cache)

    assert renamed.exit_code == 1 and not renamed.cached
    assert any(f.check == "compression" for f in renamed.report.findings)


def test_a_table_stored_in_many_slices_comes_back_whole(data, cache, monkeypatch):
    """Tables are written to Parquet slice by slice (bounded memory); the entry must still be the whole table."""
    monkeypatch.setattr("pipeline.cache.SLICE_ROWS", 1000)  # the sample's LABEVENTS: 14 slices
    config = load_config(None)
    fresh = validate(data, config)
    validate(data, config, cache=cache)
    warm = validate(data, config, cache=cache, reuse_report=False)

    assert_same_tables(warm.tables, fresh.tables)
    assert warm.tables.of("LABEVENTS").index.name == "line"
    assert warm.report.as_json() == fresh.report.as_json()


def test_a_failed_background_write_is_raised_when_the_run_ends(data, cache, monkeypatch):
    """Tables are stored on a background thread; its failure must not pass silently."""
    def refuse(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(Cache, "put_table", refuse)
    with pytest.raises(OSError, match="disk full"):
        validate(data, load_config(None), cache=cache)
