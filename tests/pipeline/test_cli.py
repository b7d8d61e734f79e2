"""pipeline/cli.py: the command-line contract (exit codes, JSON report, no tracebacks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import cli
from pipeline.reporting import terminal
from pipeline.cli import app
from schemas.catalogue import CHECKS

ROOT = Path(__file__).resolve().parents[2]
BADPOINTS = Path(sys.executable).with_name("badpoints")
runner = CliRunner()


def _badpoints(*args, env=None):
    return subprocess.run([str(BADPOINTS), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_validate_sample_as_a_subprocess(tmp_path):
    report_path = tmp_path / "report.json"
    done = _badpoints("validate", "data/sample", "--json", str(report_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "status: warnings" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["status"] == "warnings"
    assert [i["table"] for i in report["inputs"]] == ["ADMISSIONS", "D_LABITEMS", "LABEVENTS"]
    for source in report["inputs"]:
        assert set(source) == {"table", "path", "sha256", "rows"} and source["rows"] > 0
    for finding in report["findings"]:
        assert {"severity", "stage", "table", "check", "column", "count", "lines", "message"} <= set(finding)
        assert finding["lines"] == sorted(finding["lines"]) and len(finding["lines"]) <= 20


def test_missing_data_dir_exits_2_without_traceback(tmp_path):
    done = _badpoints("validate", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "Traceback" not in done.stdout + done.stderr
    assert "nowhere" in done.stdout + done.stderr


def test_missing_table_exits_2_and_names_tried_files(tmp_path, sample_dir):
    for name in ("ADMISSIONS.csv", "D_LABITEMS.csv"):
        shutil.copy(sample_dir / name, tmp_path / name)
    result = runner.invoke(app, ["validate", str(tmp_path), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 2
    assert "hosp/labevents.csv.gz" in result.output
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "errors"


def test_pandera_switched_off_refuses_to_run():
    done = _badpoints("validate", "data/sample", env={"PANDERA_VALIDATION_ENABLED": "False"})
    assert done.returncode == 2
    assert "PANDERA_VALIDATION_ENABLED" in done.stderr
    assert "status:" not in done.stdout


def test_config_downgrade_is_applied_and_reported(tmp_path, sample_dir):
    data = tmp_path / "data"
    shutil.copytree(sample_dir, data, ignore=shutil.ignore_patterns("*.py"))
    events = (data / "LABEVENTS.csv").read_text().split("\n")
    fields = events[5].split(",")
    fields[6] = "2e11"
    events[5] = ",".join(fields)
    (data / "LABEVENTS.csv").write_text("\n".join(events))
    strict = runner.invoke(app, ["validate", str(data)])
    assert strict.exit_code == 1
    config = tmp_path / "quirks.toml"
    config.write_text('[severity]\nvaluenum_bound = "warning"\n')
    downgraded = runner.invoke(app, ["validate", str(data), "--config", str(config)])
    assert downgraded.exit_code == 1  # the value now reaches the scale stage, whose error bound catches it
    assert "scale/z_error_bound" in downgraded.output and "WARNING raw/valuenum_bound" in downgraded.output
    config.write_text('[severity]\nvaluenum_bound = "warning"\n[scale]\nerror_bound = 1e12\n')
    lenient = runner.invoke(app, ["validate", str(data), "--config", str(config), "--json", str(tmp_path / "r.json")])
    assert lenient.exit_code == 0, lenient.output
    report = json.loads((tmp_path / "r.json").read_text())
    bound = next(f for f in report["findings"] if f["check"] == "valuenum_bound")
    assert bound["severity"] == "warning" and bound["default_severity"] == "error"
    assert "changed from error to warning by config" in bound["message"]
    assert report["overrides"] == {"valuenum_bound": "warning"}
    assert "2e11" not in lenient.output


def test_bad_config_exits_2(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[severity]\nno_such_check = "off"\n')
    result = runner.invoke(app, ["validate", "data/sample", "--config", str(config)])
    assert result.exit_code == 2
    assert "no_such_check" in result.output


def test_bad_usage_exits_2():
    assert runner.invoke(app, ["validate"]).exit_code == 2
    assert runner.invoke(app, ["validate", "data/sample", "--no-such-flag"]).exit_code == 2


def test_checks_command_lists_every_check():
    result = runner.invoke(app, ["checks"])
    assert result.exit_code == 0
    for check in CHECKS:
        assert check in result.output


def test_config_command_prints_every_sections_documented_defaults_as_a_config_file(tmp_path):
    """`badpoints config` prints each stage's section from its module beside the run's: saved as a --config file,
    it gives the default config."""
    from pipeline.config import SECTIONS, load_config

    result = runner.invoke(app, ["config"])
    assert result.exit_code == 0
    assert set(tomllib.loads(result.output)) == {*SECTIONS, "severity"}
    assert "# Each item is scaled by the first rule of a chain" in result.output  # the scale stage's own text
    path = tmp_path / "printed.toml"
    path.write_text(result.output, encoding="utf-8")
    assert {**load_config(path).as_json(), "source": None} == load_config().as_json()


def test_log_mode_prints_plain_progress_to_stderr_and_the_summary_last(tmp_path):
    done = _badpoints("validate", "data/sample", "--html", str(tmp_path / "r.html"), "--junit", str(tmp_path / "j.xml"),
                      "--no-cache")
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout + done.stderr  # not a terminal: no colour, no bars
    progress = done.stderr.splitlines()
    assert [line.split()[1] for line in progress[:2]] == ["read", "check"]
    assert any(line.startswith("badpoints: text+clean") and "rows/s" in line for line in progress)
    assert "badpoints:" not in done.stdout
    summary = done.stdout[done.stdout.index("summary\n"):].splitlines()
    assert summary[-1] == "status: warnings (0 errors, 1 warning, 16 notes)"
    assert any(line.split()[:1] == ["funnel"] and "dedup 9,381" in line for line in summary)
    assert "  constant  none" in summary
    assert "  fallback  50963 NTproBNP (Blood), 51100 Sodium, Urine (Urine)" in summary
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "j.xml").read_bytes().startswith(b"<?xml")


def test_quiet_prints_only_errors_and_the_summary(tmp_path):
    from tests.corpus import build as build_case

    build_case("inf_valuenum", tmp_path / "data")
    result = runner.invoke(app, ["validate", str(tmp_path / "data"), "--quiet", "--no-cache"])
    assert result.exit_code == 1
    assert "ERROR   raw/valuenum_finite" in result.output
    assert "WARNING" not in result.output and "badpoints: " not in result.output and "read LABEVENTS" not in result.output
    assert "summary" in result.output and "status: errors" in result.output


def test_unwritable_html_or_junit_path_exits_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for option in ("--html", "--junit"):
        result = runner.invoke(app, ["validate", "data/sample", "--quiet", option, str(blocker / "report")])
        assert result.exit_code == 2, result.output
        assert "cannot write" in result.output and "Traceback" not in result.output


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux's /proc/self/mem for a real I/O error")
@pytest.mark.parametrize("cache", [[], ["--no-cache"]], ids=["cache", "no-cache"])
def test_an_unreadable_table_is_file_unreadable_with_or_without_the_cache(tmp_path, sample_dir, cache):
    """A regular file whose read fails (here /proc/self/mem: EIO at offset 0, even as root) is reported as
    file_unreadable, exit 2: with the cache on, it is hashed before it is read, and that must not be a bug."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("ADMISSIONS.csv", "D_LABITEMS.csv"):
        shutil.copy(sample_dir / name, data / name)
    (data / "LABEVENTS.csv").symlink_to("/proc/self/mem")
    done = _badpoints("validate", str(data), "--json", str(tmp_path / "r.json"), *cache)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stdout + done.stderr
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    assert [(f["check"], f["table"]) for f in findings if f["severity"] == "error"] == [("file_unreadable", "LABEVENTS")]
    assert "Input/output error" in done.stdout


def test_the_demo_as_published_names_its_admissions_file_and_prints_no_ledger(tmp_path, mimic3demo):
    """The MIMIC-III demo re-publication named its admissions file Admission.csv: the report says which file was
    meant, counts no rows for a missing file, and prints no ledger for stages that never ran."""
    data = tmp_path / "demo"
    data.mkdir()
    for name in ("D_LABITEMS.csv", "LABEVENTS.csv"):
        (data / name).symlink_to(mimic3demo / name)
    (data / "Admission.csv").symlink_to(mimic3demo / "ADMISSIONS.csv")
    done = _badpoints("validate", str(data), "--json", str(tmp_path / "r.json"))
    assert done.returncode == 2, done.stdout + done.stderr
    shown = " ".join(done.stdout.split())  # an error's message is wrapped
    assert "did you mean 'Admission.csv'? Rename it to ADMISSIONS.csv" in shown.replace("Did", "did")
    assert "file_missing failed on" not in done.stdout and "LABEVENTS read" not in done.stdout
    assert "stages    not run: the run stopped before the stages" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["attrition"] == {}
    assert [i["table"] for i in report["inputs"]] == ["D_LABITEMS", "LABEVENTS"]


@pytest.mark.parametrize("command", [[], ["validate"], ["build"], ["inspect"], ["checks"], ["cache"]])
def test_help_shows_flags_as_flags(command):
    """On/off options take no value: their help line shows no type (typer renders one as '<bool>')."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    rows = [line.strip("│ ").removeprefix("* ").split() for line in result.output.splitlines()]
    options = {row[0]: row[1:] for row in rows if row and row[0].startswith("--")}
    assert options["--help"] == "Show this message and exit.".split()
    if command in (["validate"], ["build"]):
        assert options["--quiet"][:2] == ["-q", "No"] and options["--no-cache"][0] == "Neither"
        assert options["--show-values"][:3] == ["Include", "capped", "raw"]
        assert options["--json"][0] == "<path>"  # options that take a value still say which
    if not command:
        assert "[severity] in the config" in result.output


@pytest.mark.parametrize(("check", "removed"), [("file_missing", "LABEVENTS.csv"), ("table_empty", None)])
def test_a_could_not_run_check_cannot_be_switched_off(tmp_path, sample_dir, check, removed):
    """With file_missing or table_empty "off", a run without LABEVENTS' rows said "status: ok" and exited 0."""
    data = tmp_path / "data"
    shutil.copytree(sample_dir, data, ignore=shutil.ignore_patterns("*.py", "*.png"))
    if removed:
        (data / removed).unlink()
    else:
        events = data / "LABEVENTS.csv"
        events.write_text(events.read_text().splitlines()[0] + "\n")
    config = tmp_path / "quiet.toml"
    config.write_text(f'[severity]\n{check} = "off"\n')
    done = _badpoints("validate", str(data), "--config", str(config), "--no-cache")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot run: [severity] {check} cannot be set to 'off': it stays an error because" in done.stderr
    assert "status:" not in done.stdout


def test_a_config_that_would_write_inf_into_graphs_is_refused(tmp_path):
    """graph_finite "off" and a Z fill of 1e39 (inf in float32) wrote graphs holding inf, said "status: warnings"
    and exited 1; each is now refused, with the reason, before anything runs."""
    config = tmp_path / "inf.toml"
    for text, said in (('[severity]\ngraph_finite = "off"\n', "graph_finite cannot be set to 'off'"),
                       ("[fill.Z]\nvalue = 1e39\n", "[fill.Z] value must be a finite number in [-3.402823e+38, "
                                                    "3.402823e+38], got 1e+39 (float)")):
        config.write_text(text)
        done = _badpoints("build", "data/sample", "--out", str(tmp_path / "out"), "--config", str(config))
        assert done.returncode == 2 and said in done.stderr, done.stdout + done.stderr
        assert not (tmp_path / "out").exists()


def _first_line_only(*args: str) -> tuple[str, int]:
    """Run badpoints with stdout read by a reader that leaves after one line (as `| head -1` does)."""
    child = subprocess.Popen([str(BADPOINTS), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    first = child.stdout.readline().decode()
    child.stdout.close()
    return first, child.wait(timeout=300)


def test_a_reader_leaving_early_does_not_change_the_exit_code(tmp_path):
    """`badpoints validate D | head -1` exited 1 ("data errors") on data without errors: rich exits 1 on a
    broken pipe. The rest of the output is dropped; the run finishes, writes its files and exits for its data."""
    from tests.corpus import build as build_case

    first, code = _first_line_only("validate", "data/sample", "--no-cache", "--json", str(tmp_path / "ok.json"))
    assert first.startswith("read ADMISSIONS") and code == 0
    assert json.loads((tmp_path / "ok.json").read_text())["status"] == "warnings"
    build_case("inf_valuenum", tmp_path / "bad")
    first, code = _first_line_only("validate", str(tmp_path / "bad"), "--no-cache")
    assert first and code == 1


def test_inspect_of_a_folder_that_is_not_there_could_not_run(tmp_path):
    (tmp_path / "a-file").write_text("")
    for path, said in ((tmp_path / "nowhere", "does not exist"), (tmp_path / "a-file", "is not a folder")):
        result = runner.invoke(app, ["inspect", str(path)])
        assert result.exit_code == 2, result.output
        assert "cannot run" in result.output and said in result.output and "status:" not in result.output


def test_checks_shows_which_severities_are_fixed_and_every_id_whole():
    result = runner.invoke(app, ["checks"], terminal_width=80)
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    for check, info in CHECKS.items():
        assert check in rows, check  # never cut to 'charttime_outside_s…'
        assert info.locked is None or info.locked in rows[check], rows[check]
    assert "graph file" in rows["graph_finite"] and "cannot run" in rows["file_missing"]
    assert "graph file" not in rows["graph_memory"]
    assert 'may set it to "error" only' in result.output


INJECTION = "Troponin \x1b[1A\x1b[2K\x1b[32mstatus: ok\x1b[0m\x07"  # moves up, erases, paints a fake status, rings


@pytest.mark.parametrize("terminal", [False, True])
def test_escape_sequences_in_a_label_are_shown_never_obeyed(tmp_path, terminal):
    """A D_LABITEMS LABEL reaches finding messages (items are named by it): the terminal gets its escapes written
    out, the JSON report keeps it exact."""
    from tests.corpus import Dataset

    data = Dataset.sample()
    row = data.first("D_LABITEMS", "ITEMID", lambda value: value == "51003")
    data.set("D_LABITEMS", row, "LABEL", INJECTION)
    data.write(tmp_path / "data")
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color"} if terminal else {"NO_COLOR": "1", "TERM": "dumb"}
    done = _badpoints("validate", str(tmp_path / "data"), "--json", str(tmp_path / "r.json"), "--no-cache",
                      env={**os.environ, **env})
    named = "Troponin \\x1b[1A\\x1b[2K\\x1b[32mstatus: ok\\x1b[0m\\x07"
    shown = " ".join(done.stdout.split())  # a warning's message is wrapped: at the label's space, maybe
    assert named in shown
    data_escapes = shown.replace(named, "")
    assert "[1A" not in data_escapes and "\x07" not in done.stdout
    if not terminal:
        assert "\x1b" not in done.stdout + done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert any(INJECTION in finding["message"] for finding in report["findings"])


def test_a_warm_run_prints_the_report_and_summary_of_the_cold_run(tmp_path):
    """A report reused from the cache has no fitted stats: the stages' summary lines (scale's constant and fallback
    items) come with it, as the run that made it printed them."""
    cache = ["--cache-dir", str(tmp_path / "cache")]
    cold = _badpoints("validate", "data/sample", *cache)
    warm = _badpoints("validate", "data/sample", *cache)
    assert "report reused from the cache" in warm.stderr and "report reused" not in cold.stderr
    summary = cold.stdout[cold.stdout.index("summary\n"):]
    assert "  fallback  50963 NTproBNP (Blood), 51100 Sodium, Urine (Urine)" in summary
    assert warm.stdout == cold.stdout


@pytest.mark.parametrize("engine", ["parts", "dask"])
def test_a_full_temporary_disk_is_exit_2_naming_the_file_and_the_reason(tmp_path, engine):
    from tests.mounts import small_tmpfs

    with small_tmpfs(tmp_path / "tmp", "256k") as tiny:
        done = _badpoints("validate", "data/sample", "--engine", engine, "--partitions", "4", "--no-cache",
                          env={"TMPDIR": str(tiny)})
        leftovers = sorted(p.name for p in tiny.iterdir() if p.name.startswith("badpoints-parts"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot run: could not write" in done.stderr and "No space left on device" in done.stderr
    assert "internal error" not in done.stderr and leftovers == []


def test_json_to_dev_stdout_prints_the_report_after_the_summary():
    """--json /dev/stdout: the JSON follows the terminal report on stdout, whether stdout is a pipe or a file."""
    done = _badpoints("validate", "data/sample", "--json", "/dev/stdout", "-q", "--no-cache")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "status: warnings" in text and '"status": "warnings"' in text
    assert text.index("status: warnings") < text.index('"status": "warnings"')
    assert json.loads(text[text.index("{"):])["status"] == "warnings"


def test_paths_that_are_not_utf8_are_read_written_and_shown_as_escapes(tmp_path):
    """A data folder and an output folder named with a byte that is not UTF-8 (b'data\\xff'): a strict UTF-8 stdout
    printed a traceback, --html and the quarantine writer failed as internal errors."""
    data = Path(os.fsdecode(bytes(tmp_path) + b"/data\xff"))
    out = Path(os.fsdecode(bytes(tmp_path) + b"/out\xff"))
    shutil.copytree(ROOT / "data" / "sample", data, ignore=shutil.ignore_patterns("*.py", "*.png"))
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    checked = _badpoints("validate", str(data), "--html", str(tmp_path / "r.html"), "--no-cache", env=strict)
    assert checked.returncode == 0, checked.stderr
    assert "data\\xff" in checked.stdout and "Traceback" not in checked.stderr
    assert "data\\xff" in (tmp_path / "r.html").read_text(encoding="utf-8")
    built = _badpoints("build", str(ROOT / "data" / "sample"), "--out", str(out), "--no-cache", env=strict)
    assert built.returncode == 0, built.stderr
    assert "out\\xff" in built.stdout and (out / "quarantine.parquet").is_file()
    assert _badpoints("inspect", str(out), env=strict).returncode == 0


def test_a_meds_build_and_its_validation_on_paths_that_are_not_utf8(tmp_path):
    """``build --to meds`` into ``out\\xff``, then ``validate`` of it with a shard renamed ``\\xff\\xfe.parquet``:
    pyarrow was handed paths holding surrogates (an internal error). The terminal shows the names with escapes, and
    so do the JSON and HTML reports."""
    out = Path(os.fsdecode(bytes(tmp_path) + b"/out\xff"))
    built = runner.invoke(app, ["build", str(ROOT / "data" / "sample"), "--out", str(out), "--to", "meds",
                                "--no-cache", "-q"])
    assert built.exit_code == 0, built.output
    shard = out / "data" / "train" / "0.parquet"
    shard.rename(Path(os.fsdecode(bytes(shard.parent) + b"/\xff\xfe.parquet")))
    report, page = tmp_path / "r.json", tmp_path / "r.html"
    checked = runner.invoke(app, ["validate", str(out), "--json", str(report), "--html", str(page)])
    assert checked.exit_code in (0, 1) and "internal error" not in checked.output, checked.output
    assert "read train/\\xff\\xfe" in checked.output and "out\\xff/data/train/\\xff\\xfe.parquet" in checked.output
    assert "train/\\xff\\xfe" in [i["table"] for i in json.loads(report.read_text())["inputs"]]
    assert "out\\xff" in page.read_text(encoding="utf-8")


# -- engines, through the registry --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def meds_folder(tmp_path_factory):
    from tests.meds import write_meds

    root = tmp_path_factory.mktemp("cli-meds") / "meds"
    write_meds(root)
    return root


def test_a_shard_name_never_makes_a_line_of_its_own(meds_folder, tmp_path):
    """A shard named ``0\\nstatus: ok (...).parquet`` (0 rows: its finding names it too) put a status line of its
    own in stdout, before the real one: every name printed has its newline (and every control character) written
    as its escape, in the read lines, the findings and the summary."""
    forged = "status: ok (0 errors, 0 warnings, 0 notes)"
    root = tmp_path / "meds"
    shutil.copytree(meds_folder, root)
    shard = root / "data" / "train" / "0.parquet"
    pq.write_table(pq.read_table(shard).slice(0, 0), root / "data" / "train" / f"0\n{forged}\t.parquet")
    shard.unlink()
    result = runner.invoke(app, ["validate", str(root)])
    lines = result.output.splitlines()
    assert [line for line in lines if line.startswith("status:")] == [lines[-1]] and forged not in lines
    assert f"read train/0\\x0a{forged}\\x09 " in result.output
    assert f"meds/meds_shard_empty train/0\\x0a{forged}\\x09" in result.output
    assert terminal.printable("a\nb\tc\x1b") == "a\\x0ab\\x09c\\x1b"


@pytest.mark.parametrize(("engine", "large", "opened"), [
    ("auto", False, "PandasEngine"), ("pandas", True, "PandasEngine"), ("auto", True, "PartsEngine"),
    ("parts", False, "PartsEngine")])
def test_a_meds_run_always_hands_validate_meds_the_engine_the_registry_opens(meds_folder, monkeypatch, engine,
                                                                             large, opened):
    """auto weighs the shards' bytes: the pandas engine for a small dataset, parts for a large one of several
    shards; an engine named is the one opened; validate_meds is never left to choose."""
    from pipeline.engines import registry

    handed = []
    real = cli.validate_meds

    def validate_meds(*args, **kwargs):
        engine = kwargs["engine"]
        handed.append((type(engine).__name__, getattr(getattr(engine, "options", None), "workers", 1)))
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "validate_meds", validate_meds)
    if large:
        monkeypatch.setattr(registry, "AUTO_PARTS_BYTES", 1)
    result = runner.invoke(app, ["validate", str(meds_folder), "-q", "--engine", engine, "--workers", "1"])
    assert result.exit_code in (0, 1), result.output
    assert handed == [(opened, 1)]


def test_an_engine_that_cannot_start_is_cannot_run_naming_it(monkeypatch):
    """A Dask cluster that does not start: exit 2, what did not start and why, no traceback."""
    import dataclasses

    from pipeline.engines import registry

    def refused(options):
        raise OSError("no cluster here")

    monkeypatch.setitem(registry.ENGINES, "dask", dataclasses.replace(registry.ENGINES["dask"], opens=refused))
    result = runner.invoke(app, ["validate", "data/sample", "-q", "--no-cache", "--engine", "dask"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "cannot run: the Dask cluster did not start (OSError: no cluster here)" in said
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("quiet", "logs"), [(["-q"], "error"), ([], "warning")])
def test_quiet_opens_a_dask_cluster_that_logs_errors_only(monkeypatch, meds_folder, quiet, logs):
    """-q means errors and the summary only: the cluster's own processes (nannies, workers) log errors only; a
    cluster that cannot start still says so, exit 2."""
    import dataclasses

    from pipeline.engines import registry

    opened = []

    def refused(options):
        opened.append(options.logs)
        raise OSError("no cluster here")

    monkeypatch.setitem(registry.ENGINES, "dask", dataclasses.replace(registry.ENGINES["dask"], opens=refused))
    result = runner.invoke(app, ["validate", str(meds_folder), *quiet, "--engine", "dask"])
    assert result.exit_code == 2 and opened == [logs], result.output
    assert "cannot run: the Dask cluster did not start (OSError: no cluster here)" in " ".join(result.output.split())
