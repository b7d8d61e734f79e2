"""No leaks: a canary planted in every broken dataset reaches no output unless ``--show-values``.

Every case of ``tests/corpus.py`` plants :data:`CANARY` in its data (and some a raw bad value of their own,
``Expect.secret``). Each case runs through the real CLI in-process (typer's CliRunner, as
``tests/test_corpus.py`` does): ``validate --json`` and, where validation did not refuse to run (exit 0 or 1),
``build --out --json``. Neither may appear in stdout, stderr, log records, Python warnings, the JSON reports
or any byte of any file the build wrote: JSON, the parquet files (read raw and decoded, as they are
compressed) and the graph archives (read raw and member by member). With ``--show-values`` they may appear,
but only in a finding's ``samples``, which never hold more than ``[report] max_lines`` values.

A dataset that otherwise builds, with a canary as the one-row value of categorical columns that do flow to
the outputs (an admission's ETHNICITY, a categorical lab VALUE), checks that a rare value reaches neither
the graphs nor the reports nor ``stats.json`` (a value enters a vocabulary only when ``[encode]
min_admissions`` training admissions have it).

A validate takes ~0.9 s and a build of the sample ~0.6 s once torch is imported, so the module runs in
about two minutes on two cores.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_config
from schemas.errors import SAMPLE_CAP
from tests import mimic4
from tests.corpus import CANARY, CASES, Dataset, Expect, build
from tests.pipeline.stages.sample import sample_stages

runner = CliRunner()
NAMES = sorted(CASES)
MAX_LINES = load_config().report.max_lines
SAMPLE_LINE = "        values: "  # how the CLI prints a finding's samples (pipeline/cli.py _print_report)


# -- helpers ------------------------------------------------------------------------------------------
@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str
    logs: str
    warnings: str
    report: dict | None


@contextmanager
def log_records():
    """Every log record of any logger that propagates to the root, at any level, while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def invoke(*args: str, json_path: Path) -> Run:
    """One CLI run in-process, with everything it said: stdout, stderr, log records, warnings and the report."""
    with warnings.catch_warnings(record=True) as caught, log_records() as records:
        warnings.simplefilter("always")
        result = runner.invoke(app, [*args, "--json", str(json_path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "internal error" not in result.output + result.stderr
    report = json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists() else None
    return Run(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
               logs="\n".join(r.getMessage() for r in records),
               warnings="\n".join(f"{w.category.__name__}: {w.message}" for w in caught), report=report)


def needles(expect: Expect) -> tuple[str, ...]:
    """What must not leak: the canary, and the case's own planted raw value."""
    assert expect.secret is not None
    return tuple(dict.fromkeys((CANARY, expect.secret)))


def readable(path: Path) -> bytes:
    """A file's bytes, plus what compression hides: parquet decoded to text, a zip (graph archive) by member."""
    data = path.read_bytes()
    parts = [data]
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        parts.append(table.to_pandas().to_csv().encode("utf-8"))
        parts.extend(key + b"=" + value for key, value in (table.schema.metadata or {}).items())
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            parts.extend(archive.read(name) for name in archive.namelist())
    return b"\n".join(parts)


def written(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` (hidden and temp files too), readable."""
    return {p.relative_to(out).as_posix(): readable(p) for p in sorted(out.rglob("*")) if p.is_file()}


def where(found: tuple[str, ...], texts: dict[str, str | bytes]) -> list[str]:
    """'name: needle' for each text that holds a needle."""
    return [f"{name}: {needle!r}" for name, text in texts.items() for needle in found
            if (needle.encode("utf-8") if isinstance(text, bytes) else needle) in text]


def said(run: Run, label: str) -> dict[str, str]:
    return {f"{label} stdout": run.stdout, f"{label} stderr": run.stderr, f"{label} logs": run.logs,
            f"{label} warnings": run.warnings,
            f"{label} report": json.dumps(run.report, ensure_ascii=False) if run.report is not None else ""}


def without_samples(run: Run) -> Run:
    """The run with every finding's capped ``samples`` taken out (JSON) and the lines printing them (stdout)."""
    report = None
    if run.report is not None:
        report = {**run.report, "findings": [{k: v for k, v in f.items() if k != "samples"}
                                             for f in run.report["findings"]]}
    stdout = "\n".join(line for line in run.stdout.splitlines() if not line.startswith(SAMPLE_LINE))
    return Run(run.exit_code, stdout, run.stderr, run.logs, run.warnings, report)


def assert_samples_capped(report: dict, cap: int) -> None:
    for finding in report["findings"]:
        samples = finding.get("samples")
        if samples is not None:
            assert isinstance(samples, list) and all(isinstance(s, str) for s in samples), finding["check"]
            assert len(samples) <= cap, (finding["check"], len(samples))
            assert len(samples) <= finding["count"], finding["check"]


def case_data(tmp_path: Path, name: str) -> tuple[Path, Expect]:
    data = tmp_path / "data"
    return data, build(name, data)


# -- every case carries a canary ----------------------------------------------------------------------------
def _unpacked(data: bytes) -> bytes:
    """The bytes, and what a (possibly truncated) gzip stream of them decompresses to."""
    if data[:2] != b"\x1f\x8b":
        return data
    return data + zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)


def test_every_case_plants_the_canary_and_a_secret(tmp_path):
    missing = []
    for name in NAMES:
        folder, expect = case_data(tmp_path / name, name)
        files = b"".join(_unpacked(p.read_bytes()) for p in folder.rglob("*") if p.is_file())
        if expect.secret is None or CANARY.encode() not in files or expect.secret.encode() not in files:
            missing.append(name)
    assert missing == []


# -- no leak without --show-values ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_no_canary_reaches_any_output_without_show_values(tmp_path, name):
    folder, expect = case_data(tmp_path, name)
    found = needles(expect)
    validated = invoke("validate", str(folder), json_path=tmp_path / "validate.json")
    assert validated.exit_code == expect.exit_code, validated.stdout
    assert validated.report is not None
    assert where(found, said(validated, "validate")) == []
    if expect.exit_code == 2:  # could not run: nothing to build
        return
    out = tmp_path / "out"
    built = invoke("build", str(folder), "--out", str(out), json_path=tmp_path / "build.json")
    assert built.exit_code == expect.exit_code, built.stdout
    assert where(found, said(built, "build")) == []
    files = written(out) if out.exists() else {}
    if expect.exit_code == 0:  # a real build: graphs, parquet, stats, manifest and report were all checked
        assert {"manifest.json", "stats.json", "index.parquet", "quarantine.parquet", "report.json"} <= set(files)
        assert any(name.endswith(".pt") for name in files)
    else:  # errors: nothing written, so nothing can leak
        assert files == {}
    assert where(found, {**files, "file names": "\n".join(files)}) == []


# -- --show-values: only in capped samples -------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_show_values_puts_the_canary_only_in_capped_samples(tmp_path, name):
    folder, expect = case_data(tmp_path, name)
    found = needles(expect)
    validated = invoke("validate", str(folder), "--show-values", json_path=tmp_path / "validate.json")
    assert validated.exit_code == expect.exit_code
    assert_samples_capped(validated.report, MAX_LINES)
    assert where(found, said(without_samples(validated), "validate")) == []
    if expect.exit_code != 0:
        return
    out = tmp_path / "out"
    built = invoke("build", str(folder), "--out", str(out), "--show-values",
                   json_path=tmp_path / "build.json")
    assert built.exit_code == 0
    assert where(found, said(without_samples(built), "build")) == []
    files = written(out)
    # Every file of the build travels with its graphs: report.json and report.html hold no raw value, even with
    # --show-values (the samples are in --json's report alone), so every file is checked whole.
    assert "report.html" in files and "report.json" in files
    assert not any("samples" in f for f in json.loads(files["report.json"])["findings"])
    assert where(found, files) == []
    assert json.loads(files["report.json"]) == without_samples(built).report


@pytest.mark.parametrize("max_lines", [None, 3], ids=["default", "config"])
def test_show_values_samples_stop_at_max_lines(tmp_path, max_lines):
    """45 rows each with its own canary FLAG: samples hold the first max_lines, the rest appear nowhere."""
    data = Dataset.sample()
    canaries = [f"{CANARY}-{n:02d}" for n in range(45)]
    for row, canary in enumerate(canaries):
        data.set("LABEVENTS", 100 + row, "FLAG", canary)
    data.write(tmp_path / "data")
    config = []
    if max_lines is not None:
        (tmp_path / "badpoints.toml").write_text(f"[report]\nmax_lines = {max_lines}\n")
        config = ["--config", str(tmp_path / "badpoints.toml")]
    cap = SAMPLE_CAP if max_lines is None else max_lines
    run = invoke("validate", str(tmp_path / "data"), "--show-values", *config, json_path=tmp_path / "report.json")
    assert run.exit_code == 0
    assert_samples_capped(run.report, cap)
    flag = next(f for f in run.report["findings"] if f["check"] == "flag_value")
    assert flag["count"] == 45
    assert flag["samples"] == canaries[:cap]
    assert where(tuple(canaries[cap:]), said(run, "validate")) == []
    assert where((CANARY,), said(without_samples(run), "validate")) == []


# -- rare categorical values that flow to the outputs ---------------------------------------------------------
CATEGORICAL_ITEM = 51466  # urine blood: NEG, TR, SM, MOD, LG


@pytest.fixture(scope="module")
def rare_values(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The sample with a one-row canary in a train admission's ETHNICITY, a test admission's ETHNICITY and a
    train lab row's categorical VALUE; built once through the CLI."""
    splits = sample_stages().splits.set_index("HADM_ID")["SPLIT"]
    data = Dataset.sample()
    hadm_col, item_col = data.col("LABEVENTS", "HADM_ID"), data.col("LABEVENTS", "ITEMID")

    def split_of(hadm: str) -> str | None:
        return splits.get(int(hadm)) if hadm else None

    lab_row = next(n for n, r in enumerate(data.rows["LABEVENTS"])
                   if r[item_col] == str(CATEGORICAL_ITEM) and split_of(r[hadm_col]) == "train")
    hadm_of = [r[data.col("ADMISSIONS", "HADM_ID")] for r in data.rows["ADMISSIONS"]]
    planted = {
        "train ETHNICITY": data.plant("ADMISSIONS", next(n for n, h in enumerate(hadm_of) if split_of(h) == "train"),
                                      "ETHNICITY", prefix="ETHNICITY-"),
        "test ETHNICITY": data.plant("ADMISSIONS", next(n for n, h in enumerate(hadm_of) if split_of(h) == "test"),
                                     "ETHNICITY", prefix="UNSEEN-"),
        "train VALUE": data.plant("LABEVENTS", lab_row, "VALUE", prefix=f"{CATEGORICAL_ITEM}-"),
    }
    root = tmp_path_factory.mktemp("rare")
    data.write(root / "data")
    return root, planted


@pytest.fixture(scope="module")
def rare_build(rare_values) -> tuple[Run, dict[str, bytes]]:
    root, _ = rare_values
    run = invoke("build", str(root / "data"), "--out", str(root / "out"), json_path=root / "build.json")
    assert run.exit_code == 0, run.stdout
    return run, written(root / "out")


def test_rare_categorical_values_reach_no_graph_report_or_parquet(rare_build, rare_values):
    run, files = rare_build
    checked = dict(files)
    assert any(name.endswith(".pt") for name in checked) and "manifest.json" in checked
    assert where((CANARY,), {**said(run, "build"), **checked}) == []
    # The planted rows did get through: the unseen test value was reported (without its text).
    assert any(f["check"] == "unseen_category" and f["table"] == "ADMISSIONS" and "ETHNICITY " in f["message"]
               for f in run.report["findings"])


def test_rare_categorical_values_never_reach_stats_json(rare_build, rare_values):
    _, files = rare_build
    _, planted = rare_values
    assert where(tuple(planted.values()), {"stats.json": files["stats.json"]}) == []


# -- numeric items of few training admissions: their mean and scale would give the values back ------------------
def test_numeric_items_of_few_training_admissions_keep_nothing_of_their_values_in_stats_json(tmp_path):
    """A lab item with one training row (31337.777) and one with two rows in two admissions (111.111, 222.222):
    a mean and scale fitted on them give the values back, so stats.json holds neither, nor their mean or std."""
    splits = sample_stages().splits.set_index("HADM_ID")["SPLIT"]
    data = Dataset.sample()
    hadm, item = data.col("LABEVENTS", "HADM_ID"), data.col("LABEVENTS", "ITEMID")
    used = {r[item] for r in data.rows["LABEVENTS"]}
    spare = [r[data.col("D_LABITEMS", "ITEMID")] for r in data.rows["D_LABITEMS"]
             if r[data.col("D_LABITEMS", "ITEMID")] not in used][:2]
    train = [n for n, r in enumerate(data.rows["LABEVENTS"]) if r[hadm] and splits.get(int(r[hadm])) == "train"
             and data.rows["LABEVENTS"][n][data.col("LABEVENTS", "VALUENUM")]]
    rows, seen = [], set()
    for n in train:  # three rows of three training admissions
        if data.rows["LABEVENTS"][n][hadm] not in seen:
            rows.append(n)
            seen.add(data.rows["LABEVENTS"][n][hadm])
        if len(rows) == 3:
            break
    planted = {rows[0]: (spare[0], "31337.777"), rows[1]: (spare[1], "111.111"), rows[2]: (spare[1], "222.222")}
    for n, (itemid, value) in planted.items():
        data.set("LABEVENTS", n, "ITEMID", itemid)
        data.set("LABEVENTS", n, "VALUE", value)
        data.set("LABEVENTS", n, "VALUENUM", value)
        data.set("LABEVENTS", n, "FLAG", "")
    data.write(tmp_path / "data")
    run = invoke("build", str(tmp_path / "data"), "--out", str(tmp_path / "out"), json_path=tmp_path / "build.json")
    assert run.exit_code == 0, run.stdout
    text = (tmp_path / "out" / "stats.json").read_text(encoding="utf-8")
    assert where(("31337.777", "111.111", "222.222", "166.666", "78.567"), {"stats.json": text}) == []
    stats = json.loads(text)["scale"]
    fitted = {int(i): (m, s, r) for i, m, s, r in zip(stats["items"], stats["mean"], stats["scale"], stats["rule"])}
    assert fitted[int(spare[0])] == fitted[int(spare[1])] == (0.0, 1.0, "rare")
    (rare,) = [f for f in run.report["findings"] if f["check"] == "rare_item"]
    assert rare["severity"] == "info" and spare[0] in rare["message"] and spare[1] in rare["message"]
    assert "fewer than 5 training admissions" in rare["message"]


# -- MIMIC-IV comments: free text that may name a patient -----------------------------------------------------
@pytest.mark.parametrize("empty_value", ["quarantine", "category"])
def test_comment_canary_reaches_no_output(tmp_path, empty_value):
    """A MIMIC-IV dataset whose one-admission comment (a result only in comments) is the canary: quarantined, or
    a categorical VALUE too rare in train to be coded, it reaches no report, parquet, graph or stats.json."""
    data = mimic4.dataset()
    row = mimic4.lines_where(data, comments=mimic4.RARE_COMMENT)[0] - 2
    canary = data.plant("LABEVENTS", row, "comments", prefix="COMMENT-")
    data.write(tmp_path / "data")
    (tmp_path / "badpoints.toml").write_text(f'[comments]\nempty_value = "{empty_value}"\n')
    config = ["--config", str(tmp_path / "badpoints.toml")]
    built = invoke("build", str(tmp_path / "data"), "--out", str(tmp_path / "out"), *config,
                   json_path=tmp_path / "build.json")
    assert built.exit_code == 0, built.stdout
    files = written(tmp_path / "out")
    assert "stats.json" in files and any(name.endswith(".pt") for name in files)
    assert where((canary,), {**said(built, "build"), **files}) == []
    checks = {f["check"] for f in built.report["findings"]}
    # The planted row did get through: quarantined with its reason, or coded 0 as a rare training value.
    assert ("result_in_comments" if empty_value == "quarantine" else "rare_category") in checks
    shown = invoke("validate", str(tmp_path / "data"), "--show-values", *config, json_path=tmp_path / "shown.json")
    assert_samples_capped(shown.report, MAX_LINES)
    assert where((canary,), said(without_samples(shown), "validate")) == []
