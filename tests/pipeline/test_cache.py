"""The cache: unchanged inputs are served parsed and checked; a change invalidates only its own table."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.mounts import small_tmpfs
from pipeline.cache import STALE_TMP_SECONDS, Cache
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.flow import validate
from pipeline.reading.parse import RawTables
from tests.corpus import SAMPLE

TABLE_NAMES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
RUNNER = CliRunner()


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


def test_the_cache_stays_within_its_size_bound_and_drops_the_least_recently_used_first(data, cache):
    config = load_config(None)
    validate(data, config, cache=cache, reuse_report=False)  # three tables, no report
    tables = cache.root / "tables"
    age = {"ADMISSIONS": 300, "D_LABITEMS": 200, "LABEVENTS": 100}  # seconds since last use
    keys = {}
    for meta in tables.glob("*.json"):
        table = json.loads(meta.read_text())["table"]
        keys[table] = meta.stem
        for path in (meta, meta.with_suffix(".parquet")):
            os.utime(path, (time.time() - age[table],) * 2)
    assert set(keys) == set(age)
    size = {t: sum(p.stat().st_size for p in tables.glob(f"{k}.*")) for t, k in keys.items()}
    # ADMISSIONS is the oldest entry but is used now, so D_LABITEMS becomes the least recently used.
    assert cache.get_table("ADMISSIONS", keys["ADMISSIONS"]) is not None
    bound = size["ADMISSIONS"] + size["LABEVENTS"]

    small = Cache(cache.root, max_bytes=bound)
    small.prune()

    left = {p.stem for p in tables.iterdir()}
    assert left == {keys["ADMISSIONS"], keys["LABEVENTS"]}
    assert sum(p.stat().st_size for p in cache.root.glob("*/*")) <= bound
    Cache(cache.root, max_bytes=size["ADMISSIONS"]).prune()  # LABEVENTS, unused for 100 s, goes next
    assert {p.stem for p in tables.iterdir()} == {keys["ADMISSIONS"]}


def test_a_small_cache_still_gives_the_same_report(data, tmp_path):
    small = Cache(tmp_path / "small", max_bytes=64 * 1024)
    config = load_config(None)
    first = validate(data, config, cache=small)

    assert sum(p.stat().st_size for p in small.root.glob("*/*")) <= 64 * 1024
    assert validate(data, config, cache=small).report.as_json() == first.report.as_json()


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


def test_a_failed_background_write_turns_the_cache_off_with_one_warning(data, cache, monkeypatch):
    """Tables are stored on a background thread; a full disk there is a warning, never an error at the end."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("pipeline.cache.pq.ParquetWriter", full)
    config = load_config(None)

    run = validate(data, config, cache=cache)

    assert run.report.as_json() == validate(data, config).report.as_json()
    warning = cache.warning()
    assert warning.startswith(f"the cache was not used: cannot write {cache.root / 'tables'}")
    assert "(No space left on device)" in warning
    assert not list(cache.root.glob("*/*"))  # nothing half-written left, no report stored after the failure


def _cli(args: list[str], env: dict[str, str] | None = None, monkeypatch=None):
    for name, value in (env or {}).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return RUNNER.invoke(app, args)


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("where", ["a file", "no home"])
def test_a_cache_folder_that_cannot_be_made_is_one_warning_and_the_no_cache_report(data, tmp_path, where,
                                                                                   monkeypatch):
    plain = RUNNER.invoke(app, ["validate", str(data), "--no-cache", "--json", str(tmp_path / "plain.json")])
    if where == "a file":
        (tmp_path / "cachefile").write_text("not a folder")
        args, env = ["--cache-dir", str(tmp_path / "cachefile")], {}
        expected = f"cannot create {tmp_path / 'cachefile' / 'tables'} (Not a directory)"
    else:
        args, env = [], {"BADPOINTS_CACHE_DIR": None, "XDG_CACHE_HOME": None, "HOME": "/proc/nohome"}
        expected = "cannot create /proc/nohome/.cache/badpoints ("
    run = _cli(["validate", str(data), "--json", str(tmp_path / "run.json"), *args], env, monkeypatch)

    assert run.exit_code == plain.exit_code == 0, run.output
    assert _report(tmp_path / "run.json") == _report(tmp_path / "plain.json")
    assert run.stderr.count("warning:") == 1 and expected in run.stderr, run.stderr
    assert "internal error" not in run.output


def test_no_home_at_all_is_a_warning(data, monkeypatch):
    def nowhere():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", nowhere)
    run = _cli(["validate", str(data), "-q"], {"BADPOINTS_CACHE_DIR": None, "XDG_CACHE_HOME": None}, monkeypatch)

    assert run.exit_code == 0, run.output
    assert run.stderr.count("warning:") == 1 and "no $BADPOINTS_CACHE_DIR" in run.stderr


def test_a_full_filesystem_is_one_warning(data, tmp_path):
    """A real full disk: a 64 KiB tmpfs (needs mount rights; skipped where the machine has none)."""
    with small_tmpfs(tmp_path / "small", "64k") as mount:
        plain = RUNNER.invoke(app, ["validate", str(data), "--no-cache", "--json", str(tmp_path / "plain.json")])
        run = RUNNER.invoke(app, ["validate", str(data), "--cache-dir", str(mount),
                                  "--json", str(tmp_path / "run.json")])
        left = [p.name for p in mount.rglob("*") if p.is_file()]
    assert run.exit_code == plain.exit_code == 0, run.output
    assert _report(tmp_path / "run.json") == _report(tmp_path / "plain.json")
    assert run.stderr.count("warning:") == 1 and f"cannot write {mount}" in run.stderr, run.stderr
    assert "No space left on device" in run.stderr
    assert not [name for name in left if name.endswith(".tmp")]


def test_a_corrupt_entry_is_one_warning_and_rebuilt(data, tmp_path):
    cache_dir = tmp_path / "cache"
    args = ["validate", str(data), "--cache-dir", str(cache_dir), "--json", str(tmp_path / "r.json")]
    assert RUNNER.invoke(app, args).exit_code == 0
    first = _report(tmp_path / "r.json")
    for path in (cache_dir / "reports").glob("*.json"):
        path.write_text("{not json")

    again = RUNNER.invoke(app, args)

    assert again.exit_code == 0 and _report(tmp_path / "r.json") == first
    assert again.stderr.count("warning:") == 1
    assert "a damaged cache entry ignored and rebuilt" in again.stderr and "(not valid JSON)" in again.stderr
    third = RUNNER.invoke(app, args)
    assert "warning:" not in third.stderr and "report reused from the cache" in third.stderr


def test_temporary_files_of_killed_runs_are_removed_at_the_next_run(data, cache):
    config = load_config(None)
    validate(data, config, cache=cache)
    stale = cache.root / "tables" / ".0123.parquet.999999.1.tmp"
    fresh = cache.root / "reports" / ".4567.json.999998.1.tmp"  # a concurrent run's write in progress
    for path in (stale, fresh):
        path.write_bytes(b"half written")
    old = time.time() - 2 * STALE_TMP_SECONDS
    os.utime(stale, (old, old))

    validate(data, config, cache=Cache(cache.root))  # a new run: its cache opens the folder

    assert not stale.exists() and fresh.exists()


def test_a_file_replaced_during_the_run_leaves_no_report_under_the_first_files_key(data, cache, monkeypatch):
    """The files are hashed, then read: a LABEVENTS replaced in between (mv, rsync) was read as the other file, and its
    report must not be served later for the original bytes."""
    import pipeline.flow as flow

    labevents = data / "LABEVENTS.csv"
    original = labevents.read_bytes()
    hashed = {path.name: flow.file_sha256(path, "LABEVENTS") for path in (labevents,)}
    lines = original.decode().split("\n")
    fields = lines[5].split(",")
    fields[6] = "not a number"  # VALUENUM: an error once read
    labevents.write_text("\n".join([*lines[:5], ",".join(fields), *lines[6:]]))
    real = flow.file_sha256
    monkeypatch.setattr(flow, "file_sha256", lambda path, table: hashed.get(Path(path).name) or real(path, table))
    replaced = validate(data, load_config(None), cache=cache)  # hashed as the original, read as the broken file
    assert replaced.exit_code == 1 and not replaced.cached
    assert entries(cache, "reports") == set()

    monkeypatch.setattr(flow, "file_sha256", real)
    labevents.write_bytes(original)
    again = validate(data, load_config(None), cache=cache)
    assert not again.cached and again.exit_code == 0  # the original's own report, not the broken file's


# -- where the cache is, who can read it, and `badpoints cache` -----------------------------------------------------
NOTICE = "badpoints: cache: parsed copies of the tables kept in {} (badpoints cache --clear removes them; " \
         "--no-cache keeps none)"


def _validate(data: Path, cache_dir: Path, *more: str):
    return RUNNER.invoke(app, ["validate", str(data), "-q", "--cache-dir", str(cache_dir), *more])


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (relative name -> mode)."""
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_the_first_run_says_where_the_cache_is_once_and_later_runs_do_not(data, tmp_path):
    cache_dir = tmp_path / "home" / ".cache" / "badpoints"
    assert _validate(data, cache_dir, "--no-cache").exit_code == 0 and not cache_dir.exists()  # --no-cache: none

    first = _validate(data, cache_dir)
    second = _validate(data, cache_dir)
    build = RUNNER.invoke(app, ["build", str(data), "--out", str(tmp_path / "out"), "-q", "--cache-dir", str(cache_dir)])

    assert first.exit_code == second.exit_code == build.exit_code == 0, first.output
    assert first.stderr.splitlines().count(NOTICE.format(cache_dir)) == 1, first.stderr
    assert "badpoints: cache:" not in second.stderr + build.stderr
    assert "report reused from the cache" in second.stderr  # it is the same cache, used


def test_a_relative_cache_dir_is_named_by_its_absolute_path(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = _validate(data, Path("rel"))
    assert NOTICE.format(tmp_path / "rel") in run.stderr.splitlines()


def test_the_cache_is_private_under_umask_022(data, tmp_path, umask_022):
    """Folders 0700 and every file 0600 (entries, metadata, reports, the tag), though the umask would give 0755 and
    0644; the folder's parents, not the cache's, keep the umask's mode."""
    cache_dir = tmp_path / "parent" / "badpoints"
    assert _validate(data, cache_dir).exit_code == 0
    assert RUNNER.invoke(app, ["validate", str(data), "-q", "--cache-dir", str(cache_dir), "--html",
                               str(tmp_path / "r.html")]).exit_code == 0  # tables served, no report written twice

    folders = {p: stat.S_IMODE(p.stat().st_mode) for p in [cache_dir, *cache_dir.iterdir()] if p.is_dir()}
    assert set(folders) == {cache_dir, cache_dir / "tables", cache_dir / "reports"}
    assert set(folders.values()) == {0o700}
    files = _files(cache_dir)
    assert len(files) == 1 + 2 * 3 + 1 and set(files.values()) == {0o600}, files  # tag, 3 tables x 2, 1 report
    assert "CACHEDIR.TAG" in files
    assert stat.S_IMODE((tmp_path / "parent").stat().st_mode) == 0o755


def test_the_cache_is_private_under_umask_000(data, tmp_path):
    before = os.umask(0)
    try:
        validate(data, load_config(None), cache=Cache(tmp_path / "c"))
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o700
    assert set(_files(tmp_path / "c").values()) == {0o600}


def test_an_existing_cache_others_could_read_is_made_private_and_says_so_once(data, tmp_path, umask_022):
    cache_dir = tmp_path / "cache"
    validate(data, load_config(None), cache=Cache(cache_dir))
    for path in [cache_dir, *cache_dir.rglob("*")]:  # as an older badpoints left it, or a chmod -R
        path.chmod(0o755 if path.is_dir() else 0o644)

    run = _validate(data, cache_dir)
    again = _validate(data, cache_dir)

    said = f"badpoints: cache: {cache_dir} could be read by others (mode 0755); made private (0700, its files 0600)"
    assert run.exit_code == 0 and said in run.stderr.splitlines(), run.stderr
    assert NOTICE.format(cache_dir) not in run.stderr  # the folder was a cache already
    assert "badpoints: cache:" not in again.stderr
    assert {stat.S_IMODE(p.stat().st_mode) for p in [cache_dir, *cache_dir.iterdir()] if p.is_dir()} == {0o700}
    assert set(_files(cache_dir).values()) == {0o600}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_cache_is_left_as_it_is(data, tmp_path):
    """Only a folder of this user's is made private: a shared cache another user set up keeps its mode (the entries
    this run writes into it are still 0600)."""
    cache_dir = tmp_path / "shared"
    validate(data, load_config(None), cache=Cache(cache_dir))
    for path in [cache_dir, *cache_dir.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)
        os.chown(path, 65534, 65534)
    for entry in (cache_dir / "reports").iterdir():
        entry.unlink()

    run = _validate(data, cache_dir)

    assert run.exit_code == 0 and "badpoints: cache:" not in run.stderr and "warning" not in run.stderr
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o777
    assert [stat.S_IMODE(p.stat().st_mode) for p in (cache_dir / "reports").iterdir()] == [0o600]
    shown = RUNNER.invoke(app, ["cache", "--cache-dir", str(cache_dir)]).stdout
    assert "  mode 0777, another user's folder: others can read it, and badpoints leaves it so" in shown


def test_a_cache_from_before_the_tag_is_recognised_marked_and_named_once(data, tmp_path):
    cache_dir = tmp_path / "cache"
    validate(data, load_config(None), cache=Cache(cache_dir))
    (cache_dir / "CACHEDIR.TAG").unlink()  # tables/ and reports/ with entries, nothing else

    run = _validate(data, cache_dir)

    assert run.exit_code == 0 and "report reused from the cache" in run.stderr
    assert NOTICE.format(cache_dir) in run.stderr.splitlines()
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    assert "badpoints: cache:" not in _validate(data, cache_dir).stderr


def test_a_folder_holding_other_files_is_not_used_as_a_cache_and_left_as_it_was(data, tmp_path):
    folder = tmp_path / "project"
    (folder / "tables").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "tables" / "results.csv").write_text("a,b\n")
    folder.chmod(0o755)
    before = _files(folder)
    plain = RUNNER.invoke(app, ["validate", str(data), "--no-cache", "--json", str(tmp_path / "plain.json")])

    run = _validate(data, folder, "--json", str(tmp_path / "run.json"))

    assert run.exit_code == plain.exit_code == 0
    assert _report(tmp_path / "run.json") == _report(tmp_path / "plain.json")
    assert run.stderr.count("warning:") == 1
    assert f"the cache was not used: {folder} is not a badpoints cache: it holds files badpoints did not write" \
        in run.stderr
    assert _files(folder) == before and stat.S_IMODE(folder.stat().st_mode) == 0o755  # nothing written, no chmod


def _damage(cache_dir: Path, how: str) -> None:
    """Every file of the cache damaged, its tag included: bytes flipped, or cut short."""
    for path in [cache_dir / "CACHEDIR.TAG", *cache_dir.glob("*/*")]:
        blob = path.read_bytes()
        path.write_bytes(bytes(b ^ 0x5A for b in blob[:8]) + blob[8:] if how == "flipped" else blob[:len(blob) // 3])


def test_a_cache_damaged_throughout_is_used_again_with_one_warning(data, tmp_path):
    cache_dir = tmp_path / "cache"
    first = _validate(data, cache_dir, "--json", str(tmp_path / "first.json"))
    _damage(cache_dir, "flipped")

    run = _validate(data, cache_dir, "--json", str(tmp_path / "run.json"))

    assert run.exit_code == first.exit_code == 0 and _report(tmp_path / "run.json") == _report(tmp_path / "first.json")
    assert run.stderr.count("warning:") == 1 and "not a badpoints cache" not in run.stderr, run.stderr
    assert f"damaged cache entries ignored and rebuilt: {cache_dir / 'CACHEDIR.TAG'} (not badpoints' tag" in run.stderr
    assert NOTICE.format(cache_dir) not in run.stderr  # the folder was a cache already
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    again = _validate(data, cache_dir)
    assert "warning" not in again.stderr and "report reused from the cache" in again.stderr


def test_clear_empties_a_cache_whose_tag_is_damaged_and_writes_the_tag_again(data, tmp_path):
    cache_dir = tmp_path / "cache"
    _validate(data, cache_dir)
    _damage(cache_dir, "truncated")
    shown = RUNNER.invoke(app, ["cache", "--cache-dir", str(cache_dir)])
    assert shown.exit_code == 0 and "  its CACHEDIR.TAG is damaged: the next run, or badpoints cache --clear, " \
                                     "writes it again" in shown.stdout.splitlines(), shown.output

    cleared = RUNNER.invoke(app, ["cache", "--clear", "--cache-dir", str(cache_dir)])

    assert cleared.exit_code == 0, cleared.output
    assert cleared.stdout.splitlines()[1].startswith("  removed 3 tables and 1 report, ")
    assert cleared.stdout.splitlines()[1].endswith("; the folder stays, marked as a cache (its damaged CACHEDIR.TAG "
                                                   "written again)")
    assert list(cache_dir.glob("*/*")) == []
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    run = _validate(data, cache_dir)
    assert run.exit_code == 0 and "warning" not in run.stderr and "badpoints: cache:" not in run.stderr


@pytest.mark.parametrize("where", ["the default folder", "a folder named by --cache-dir"])
def test_a_damaged_tag_beside_other_files_is_a_cache_only_in_the_default_folder(data, tmp_path, monkeypatch, where):
    """$XDG_CACHE_HOME/badpoints is badpoints' own: its damaged tag is written again and its entries cleared, a file
    put beside them left alone. Anywhere else a folder holding other files is not a cache: never used nor cleared."""
    monkeypatch.delenv("BADPOINTS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "xdg" / "badpoints" if where == "the default folder" else tmp_path / "elsewhere"
    for name in ("tables", "reports"):
        (folder / name).mkdir(parents=True)
    (folder / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache dir")
    (folder / "reports" / f"{'ab' * 32}.json").write_text("{not json")
    (folder / "notes.txt").write_text("mine")
    named = [] if where == "the default folder" else ["--cache-dir", str(folder)]

    cleared = RUNNER.invoke(app, ["cache", "--clear", *named])
    run = RUNNER.invoke(app, ["validate", str(data), "-q", *named])

    assert run.exit_code == 0 and (folder / "notes.txt").read_text() == "mine"
    if where == "the default folder":
        assert cleared.exit_code == 0 and "removed 0 tables and 1 report" in cleared.stdout, cleared.output
        assert "warning" not in run.stderr and len(list(folder.glob("tables/*.parquet"))) == 3
    else:
        assert cleared.exit_code == 2 and f"{folder} is not a badpoints cache" in cleared.stderr
        assert "the cache was not used" in run.stderr and "not a badpoints cache" in run.stderr
        assert list(folder.glob("*/*")) == [folder / "reports" / f"{'ab' * 32}.json"]


def test_cache_shows_where_it_is_what_it_holds_and_its_size(data, tmp_path):
    cache_dir = tmp_path / "cache"
    none_yet = RUNNER.invoke(app, ["cache", "--cache-dir", str(cache_dir)])
    assert none_yet.exit_code == 0 and not cache_dir.exists()  # showing makes nothing
    assert none_yet.stdout.splitlines()[:2] == [f"cache: {cache_dir}", "  none yet: the first validate or build "
                                                "without --no-cache makes it (private to you)"]
    _validate(data, cache_dir)

    shown = RUNNER.invoke(app, ["cache", "--cache-dir", str(cache_dir)])

    size = sum(p.stat().st_size for p in cache_dir.glob("*/*"))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines() == [
        f"cache: {cache_dir}",
        f"  holds 3 tables and 1 report, {size / 1024:.1f} KiB (at most 8.0 GiB: the least recently used go first)",
        "  mode 0700: private to you",
        "  parsed copies of the tables: badpoints cache --clear removes them; --no-cache keeps none"]


def test_cache_takes_its_folder_from_the_environment_as_a_run_does(data, tmp_path, monkeypatch):
    monkeypatch.setenv("BADPOINTS_CACHE_DIR", str(tmp_path / "env"))
    assert RUNNER.invoke(app, ["validate", str(data), "-q"]).exit_code == 0
    shown = RUNNER.invoke(app, ["cache"])
    assert shown.stdout.startswith(f"cache: {tmp_path / 'env'}\n  holds 3 tables and 1 report, ")


def test_clear_empties_the_cache_and_a_later_run_fills_it_again(data, tmp_path):
    cache_dir = tmp_path / "cache"
    cold = _validate(data, cache_dir, "--json", str(tmp_path / "cold.json"))
    size = sum(p.stat().st_size for p in cache_dir.glob("*/*"))

    cleared = RUNNER.invoke(app, ["cache", "--clear", "--cache-dir", str(cache_dir)])

    assert cleared.exit_code == 0, cleared.output
    assert cleared.stdout.splitlines() == [
        f"cache: {cache_dir}", f"  removed 3 tables and 1 report, {size / 1024:.1f} KiB; the folder stays, marked as "
                               "a cache"]
    assert list(cache_dir.glob("*/*")) == [] and (cache_dir / "CACHEDIR.TAG").is_file()
    assert "holds 0 tables and 0 reports, 0 B" in RUNNER.invoke(app, ["cache", "--cache-dir", str(cache_dir)]).stdout
    again = _validate(data, cache_dir, "--json", str(tmp_path / "again.json"))
    assert cold.exit_code == again.exit_code == 0
    assert "report reused" not in again.stderr and "badpoints: cache:" not in again.stderr  # rebuilt, not re-announced
    assert _report(tmp_path / "again.json") == _report(tmp_path / "cold.json")
    assert len(entries(Cache(cache_dir))) == 3 and len(entries(Cache(cache_dir), "reports")) == 1


@pytest.mark.parametrize("folder", ["a project folder", "a file", "a tables folder with other files",
                                    "another tool's tag"])
def test_clear_refuses_a_folder_that_is_not_a_badpoints_cache_and_removes_nothing(tmp_path, folder):
    target = tmp_path / "target"
    key = "ab" * 32
    if folder == "a file":
        target.write_text("not a folder")
    else:
        (target / "tables").mkdir(parents=True)
        (target / "tables" / f"{key}.parquet").write_bytes(b"named like an entry")
        if folder == "a project folder":
            (target / "thesis.tex").write_text("mine")
        elif folder == "a tables folder with other files":
            (target / "tables" / "results.csv").write_text("a,b\n")
        else:
            (target / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# cargo\n")
            (target / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in [target, *target.rglob("*")] if p.is_file()}

    for args in (["cache", "--clear"], ["cache"]):
        run = RUNNER.invoke(app, [*args, "--cache-dir", str(target)])
        assert run.exit_code == 2, run.output
        assert f"badpoints: cannot run: {target} is not a" in run.stderr and "nothing was touched" in run.stderr
        assert "Traceback" not in run.output
    assert {p: p.read_bytes() for p in [target, *target.rglob("*")] if p.is_file()} == before


def test_clear_leaves_files_the_cache_did_not_write_and_says_so(data, tmp_path):
    cache_dir = tmp_path / "cache"
    _validate(data, cache_dir)
    (cache_dir / "reports" / "keep.txt").write_text("someone put this here")
    (cache_dir / "tables" / "sub").mkdir()

    cleared = RUNNER.invoke(app, ["cache", "--clear", "--cache-dir", str(cache_dir)])

    assert cleared.exit_code == 0, cleared.output
    assert cleared.stdout.splitlines()[-1] == "  2 files the cache did not write, left alone: tables/sub, reports/keep.txt"
    assert sorted(str(p.relative_to(cache_dir)) for p in cache_dir.glob("*/*")) == ["reports/keep.txt", "tables/sub"]


def test_clear_of_a_folder_that_does_not_exist_does_nothing(tmp_path):
    run = RUNNER.invoke(app, ["cache", "--clear", "--cache-dir", str(tmp_path / "none")])
    assert run.exit_code == 0 and run.stdout.splitlines()[1] == "  nothing to clear: no such folder"
    assert not (tmp_path / "none").exists()


def test_cache_with_no_folder_to_name_cannot_run(monkeypatch):
    monkeypatch.setattr("pipeline.cli.default_cache_dir", lambda: None)
    run = RUNNER.invoke(app, ["cache"])
    assert run.exit_code == 2 and "cannot run: no cache folder to show" in run.stderr
