"""Every figure the README and the docs state of the real MIMIC-III demo, read from the pages and held to real runs
of the demo, so that none can go stale: ``validate`` through the CLI (what the terminal prints), default graph builds
in MIMIC-III's layout and MIMIC-IV's (the README's table says both give the same figures), a build with every
model-ready default undone (the table's "each default undone"), and a build ``--to meds``.

:data:`PINS` reads each statement's figures off its page with a pattern (the page must hold it once) and compares
them with the runs; :func:`test_every_demo_figure_of_the_pages_is_pinned` fails on a number the pages say of the
demo that no pin reads and :data:`NOT_PINNED` does not explain (a figure of the MIMIC-IV demo, which is not here to
run, or a setting's default). Skips where the demo is absent (the ``mimic3demo`` fixture says why)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable

import pandas as pd
import pytest
from typer.testing import CliRunner

from bench.model_ready import figures
from pipeline import build
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.flow import validate
from pipeline.meds import validate_meds
from pipeline.stages.text import read_ranks, read_text
from tests.mimic4 import in_mimic4_layout

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
runner = CliRunner()

# The model-ready defaults undone, each by its setting (the README's "each default undone" column): the raw z, no lab
# kept from the ED stay, censored text left as text, every item with training values scaled however few its
# admissions, DISCHARGE_LOCATION among the admission features; and no word read as a number, which no setting
# undoes (the config adds its words to the declared ones), so the section is given an empty table here.
EARLIER = """
[scale.policy]
default = "none"
[bucket]
ed_hours = 0
[clean]
censored = false
[encode]
min_admissions = 1
[graph]
admission_features = ["ADMISSION_TYPE", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE", "LANGUAGE",
                      "RELIGION", "MARITAL_STATUS", "ETHNICITY", "RACE"]
"""


@dataclass(frozen=True)
class Runs:
    """What the pins read: ``validate``'s terminal output and JSON report, the typed tables and what the stages made
    (a validation in Python), the figures of the default builds (by layout) and of the earlier defaults' builds, the
    findings of the earlier defaults' builds, the ADMISSIONS read and the MEDS build's folder and terminal output."""

    printed: str
    report: dict
    validation: object
    now: dict
    then: dict
    then_findings: dict
    then_index: dict
    meds: Path
    meds_printed: str
    task_printed: str  # docs/tasks.md's example: a build of the demo in MIMIC-IV's layout --task mortality_24h
    task_report: dict
    future_report: dict  # the same task with min_stay_hours = 48


def _earlier_config(folder: Path):
    (folder / "earlier.toml").write_text(EARLIER)
    config = load_config(folder / "earlier.toml")
    return replace(config, clean=replace(config.clean, text_values=MappingProxyType({}), ordinal=MappingProxyType({})))


@pytest.fixture(scope="module")
def runs(mimic3demo, tmp_path_factory) -> Runs:
    root = tmp_path_factory.mktemp("demo-figures")
    layouts = {"mimic3": mimic3demo, "mimic4": in_mimic4_layout(mimic3demo, root / "mimic4")}
    done = runner.invoke(app, ["validate", str(mimic3demo), "--no-cache", "--json", str(root / "validate.json")])
    assert done.exit_code == 0, done.output
    now, then, then_findings, then_index = {}, {}, {}, {}
    for name, data in layouts.items():
        assert build(data, root / f"now-{name}", load_config(None)).exit_code == 0
        now[name] = figures(root / f"now-{name}")
        earlier = build(data, root / f"then-{name}", _earlier_config(root))
        assert earlier.exit_code == 0
        then[name] = figures(root / f"then-{name}")
        then_findings[name] = {f.check: f.count for f in earlier.report.findings}
        then_index[name] = set(pd.read_parquet(root / f"then-{name}" / "index.parquet")["HADM_ID"])
    made = runner.invoke(app, ["build", str(mimic3demo), "--out", str(root / "meds"), "--to", "meds", "--no-cache",
                               "-q"])
    assert made.exit_code == 0, made.output
    asked = runner.invoke(app, ["build", str(layouts["mimic4"]), "--out", str(root / "task"), "--task", "mortality_24h",
                                "--no-cache", "-q", "--json", str(root / "task.json")])
    assert asked.exit_code == 0, asked.output
    (root / "future.toml").write_text('[task]\nname = "mortality_24h"\nmin_stay_hours = 48\n')
    future = runner.invoke(app, ["validate", str(layouts["mimic4"]), "--task", str(root / "future.toml"), "--no-cache",
                                 "-q", "--json", str(root / "future.json")])
    assert future.exit_code == 1, future.output
    return Runs(printed=done.stdout + done.stderr, report=json.loads((root / "validate.json").read_text()),
                validation=validate(mimic3demo, load_config(None)), now=now, then=then, then_findings=then_findings,
                then_index=then_index, meds=root / "meds", meds_printed=made.stdout, task_printed=asked.stdout,
                task_report=json.loads((root / "task.json").read_text()),
                future_report=json.loads((root / "future.json").read_text()))


def task_summary(runs: Runs) -> tuple[str]:
    """docs/tasks.md's summary lines: from the funnel to the task's line, as the build printed them."""
    lines = runs.task_printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  funnel"))
    end = next(i for i, line in enumerate(lines) if line.startswith("  constant"))
    return (" ".join("\n".join(lines[start:end]).split()),)


def task_prose(runs: Runs) -> tuple:
    ledger = runs.task_report["attrition"]["task"]
    ended = {step["step"]: step["removed"] for step in ledger["steps"]}["ended by the prediction time"]
    late = next(f["count"] for f in runs.task_report["findings"] if f["check"] == "task_after_prediction")
    deaths = sum(s["positives"] for s in ledger["splits"].values())
    return n(ledger["read"]), n(ended), n(ledger["labelled"]), n(deaths), n(late)


def task_future(runs: Runs) -> tuple:
    found = next(f for f in runs.future_report["findings"] if f["check"] == "task_selection_on_future")
    return n(found["count"]), ", ".join(map(str, sorted(found["items"])))


# -- what the runs say, as the pages write it --------------------------------------------------------------------
def n(value: float) -> str:
    return f"{int(value):,}"


def count(runs: Runs, check: str) -> int:
    return sum(f["count"] for f in runs.report["findings"] if f["check"] == check)


def same_in_both_layouts(figures_by_layout: dict) -> dict:
    """A build's figures, which the README says both layouts give: they must."""
    mimic3, mimic4 = figures_by_layout["mimic3"], figures_by_layout["mimic4"]
    drop = ("attrition", "admission_x")  # MIMIC-IV names ETHNICITY race
    assert {k: v for k, v in mimic3.items() if k not in drop} == {k: v for k, v in mimic4.items() if k not in drop}
    return mimic3


def validate_line(runs: Runs) -> tuple:
    warnings = [f["check"] for f in runs.report["findings"] if f["severity"] == "warning"]
    # items kept on a biased share; text in numeric items; no SUBJECT_ID
    assert sorted(warnings) == ["biased_item", "mixed_item_text", "split_by_admission"]
    notes = sum(f["severity"] == "info" for f in runs.report["findings"])
    read = {i["table"]: i["rows"] for i in runs.report["inputs"]}
    kb = len(runs.printed.encode("utf-8")) / 1000
    return (n(runs.report["attrition"]["ADMISSIONS"]["read"]), n(read["LABEVENTS"]), Near(kb, 0.1),
            {3: "three"}[len(warnings)], n(count(runs, "biased_item")), n(count(runs, "mixed_item_text")), str(notes))


@dataclass(frozen=True)
class Near:
    """A figure that may differ by ``within`` from run to run (the terminal's bytes hold the progress lines'
    timings)."""

    value: float
    within: float

    def __eq__(self, said: object) -> bool:
        return isinstance(said, str) and abs(float(said) - self.value) <= self.within


def table_rows(runs: Runs) -> dict[str, tuple]:
    """The README's table of the demo, row by row: each default undone, then the defaults."""
    now, then = same_in_both_layouts(runs.now), same_in_both_layouts(runs.then)
    mixed_then = runs.then_findings["mimic3"]["mixed_item_text"]
    assert runs.then_findings["mimic4"] == runs.then_findings["mimic3"]
    mixed_now = count(runs, "mixed_item_text")
    read_as_numbers, read_as_ranks = inpatient_text_read(runs)
    admissions = runs.report["attrition"]["ADMISSIONS"]["read"]
    lost = set(runs.validation.prepared.admissions["HADM_ID"]) - runs.then_index["mimic3"]
    assert runs.then_index["mimic3"] == runs.then_index["mimic4"]
    return {
        "max": (n(round(then["max_abs_z"])), f"{now['max_abs_z']:.1f}"),
        "over": (n(round(then["share_over_10"] * then["edges"])), n(then["edges"]),
                 f"{100 * then['share_over_10']:.1f}", n(round(now["share_over_10"] * now["edges"])), n(now["edges"])),
        "marked": tuple(n(now["marked"][mark]) for mark in ("Z_BOUNDED", "Z_CENSORED", "Z_UNSEEN")),
        "admissions": (n(admissions), n(then["admissions_in_graphs"]), *map(str, sorted(lost)),
                       n(now["admissions_in_graphs"])),
        "kept": (n(then["kept_rows"]), n(now["kept_rows"])),
        "text": (n(mixed_then), n(sum(runs.then_findings["mimic3"].get(c, 0) for c in ("censored_value",
                                                                                          "mapped_text_value"))),
                 n(runs.then_findings["mimic3"].get("ranked_value", 0)), n(mixed_now), n(read_as_numbers),
                 n(read_as_ranks)),
        "discharge": (" ".join(c.removesuffix("_CODE") for c in then["admission_x_known_after"]),
                      " ".join(now["admission_x_known_after"]) or "none"),
    }


def inpatient_text_read(runs: Runs) -> tuple[int, int]:
    """The inpatient rows (of an admission, no raw error) whose text the text stage reads: as a number in numeric
    items (censored, or a declared word), as a rank in ordinal items; each is kept, none in the quarantine. Counted
    here with the stage's readers, and equal to what its fit counted per item."""
    validation, config = runs.validation, load_config(None)
    lab, admissions = validation.tables.labevents, validation.tables.admissions
    numbered = validation.prepared.fitted["text"]
    inpatient = lab[lab["HADM_ID"].isin(admissions["HADM_ID"]) & lab["REJECT"].isna()]
    text = inpatient[inpatient["VALUENUM"].isna() & inpatient["VALUE"].notna()]
    rows = text[text["ITEMID"].isin(numbered.items_of("numeric"))]
    read = read_text(rows, censored=config.clean.censored, text_values=config.clean.text_values)
    lines = set(read.index[read["NUMBER"].notna()])
    ranked = read_ranks(text, numbered).dropna()
    zeros = inpatient["ITEMID"].isin(numbered.items_of("ordinal")) & inpatient["VALUENUM"].eq(0)  # the lowest rank
    quarantined = validation.prepared.quarantine.whole()
    assert not (lines | set(ranked.index)) & set(quarantined.index[quarantined["TABLE"] == "LABEVENTS"])
    fitted = numbered.table()
    assert len(lines) == fitted.loc[fitted["KIND"] == "numeric", ["CENSORED", "MAPPED"]].to_numpy().sum()
    assert len(ranked) + zeros.sum() == fitted["RANKED"].sum()
    return len(lines), len(ranked) + int(zeros.sum())


def ed_rows(runs: Runs) -> tuple:
    """from_ed_stay's rows and admissions (its message), and the hours before ADMITTIME they lie within: over every
    row of an admission charted before its admission day that passed the raw checks (a superset of those kept) and
    over the edges (a subset), the same, so those of the rows kept too."""
    (ed,) = [f for f in runs.report["findings"] if f["check"] == "from_ed_stay"]
    admissions = int(re.search(r"rows of (\d+) admissions", ed["message"])[1])
    validation = runs.validation
    stays = validation.tables.admissions.set_index("HADM_ID")
    spans = []
    for rows in (validation.tables.labevents[validation.tables.labevents["REJECT"].isna()
                                             & validation.tables.labevents["HADM_ID"].isin(stays.index)],
                 validation.prepared.edges):
        admit = rows["HADM_ID"].map(stays["ADMITTIME"])
        early = rows["CHARTTIME"] < admit.dt.floor("D")
        hours = (admit - rows["CHARTTIME"])[early].dt.total_seconds() / 3600
        spans.append((round(hours.min(), 2), round(hours.max(), 2)))
    assert spans[0] == spans[1]
    low, high = spans[0]
    return n(ed["count"]), str(admissions), f"{low:.2f}", f"{high:.1f}"


def only_ed_labs(runs: Runs, hadm: int) -> str:
    """``hadm``, whose every lab row was drawn in the ED stay before its admission day."""
    validation = runs.validation
    labs = validation.tables.labevents[validation.tables.labevents["HADM_ID"] == hadm]
    admit = validation.tables.admissions.set_index("HADM_ID").loc[hadm, "ADMITTIME"]
    assert len(labs) and (labs["CHARTTIME"] < admit.floor("D")).all()
    return str(hadm)


def longest_stay(runs: Runs) -> tuple:
    stays = runs.validation.tables.admissions
    return (str(round((stays["DISCHTIME"] - stays["ADMITTIME"]).max() / pd.Timedelta(days=1))),)


BACTERIA, URINE_COLLECTION, LARGE_PLATELETS = 51463, 51087, 51240


def bacteria_results(runs: Runs) -> pd.Series:
    """Urine bacteria's inpatient results (of an admission, no raw error) by word, ``0`` for a VALUENUM of 0."""
    lab, admissions = runs.validation.tables.labevents, runs.validation.tables.admissions
    rows = lab[(lab["ITEMID"] == BACTERIA) & lab["HADM_ID"].isin(admissions["HADM_ID"]) & lab["REJECT"].isna()]
    return rows["VALUE"].astype("str").str.strip().str.upper().where(rows["VALUENUM"].ne(0), "0").value_counts()


def bacteria_readme(runs: Runs) -> tuple:
    """Its negatives, and the results the build keeps of it: every one, as ranks."""
    results = bacteria_results(runs)
    table = runs.validation.prepared.fitted["text"].table()
    assert table.loc[BACTERIA, "KIND"] == "ordinal" and table.loc[BACTERIA, "KEPT"] == results.sum()
    return n(results[["NONE", "NEG", "0"]].sum()), n(results.sum())


def bacteria_stages(runs: Runs) -> tuple:
    results = bacteria_results(runs)
    positives = ["FEW", "OCC", "MOD", "MANY", "RARE"]
    assert set(results.index) == {"NONE", "NEG", "0", *positives}
    return n(results["NONE"]), n(results["NEG"]), n(results["0"]), n(results[positives].sum())


def biased(runs: Runs) -> tuple:
    """The items biased_item names, and two of them as the fit counted them."""
    table = runs.validation.prepared.fitted["text"].table()
    return (n(count(runs, "biased_item")), *(n(table.loc[item, column]) for item in (URINE_COLLECTION, LARGE_PLATELETS)
                                             for column in ("KEPT", "RESULTS")))


def case_variants(runs: Runs) -> tuple:
    (fluid,) = [f for f in runs.report["findings"] if f["check"] == "category_case_variants" and f["column"] == "FLUID"]
    assert re.search(r"'Blood' \(\d+ items\) / 'BLOOD' \(\d+ items\)", fluid["message"])
    return ()


def meds_build(runs: Runs) -> tuple:
    manifest = json.loads((runs.meds / "manifest.json").read_text())
    labs = manifest["accounting"]["LABEVENTS"]["kept"]
    events = sum(pd.read_parquet(path).shape[0] for path in sorted((runs.meds / "data").glob("*/*.parquet")))
    predicted = validate_meds(runs.meds, load_config(None))  # MEDS-Transforms' normalization, reproduced to the bit
    (dropped,) = [f for f in json.loads((runs.meds / "report.json").read_text())["findings"]
                  if f["check"] == "meds_export_unseen_codes"]
    return (str(len(manifest["shards"])), n(labs), n(events - labs), str(int(predicted.ready["non_finite"].sum())),
            f"{predicted.ready['z_max'].max():.1f}", f"{load_config(None).scale.bound:g}", n(dropped["count"]),
            n(len(dropped["items"])))


def meds_summary(runs: Runs) -> tuple:
    """The MEDS build's summary line, as its terminal printed it (whitespace aside)."""
    (line,) = re.findall(r"  MEDS      MEDS-Transforms' normalization .*?JSON report", runs.meds_printed, flags=re.S)
    return (" ".join(line.split()),)


# -- the pins: each statement of a page, the figures it holds, and what the runs say they are -----------------------
@dataclass(frozen=True)
class Pin:
    page: str
    pattern: str  # each group one figure; whitespace in the page may be any run of spaces and newlines
    said: Callable[[Runs], tuple]
    table: str | None = None  # the table's header, when the pattern reads a row of it

    def text(self) -> str:
        text = (ROOT / self.page).read_text()
        if self.table is None:
            return text
        start = text.index(self.table)
        return text[start:text.index("\n\n", start)]

    def match(self) -> re.Match:
        found = list(re.finditer(self.pattern.replace(" ", r"\s+"), self.text()))
        assert len(found) == 1, f"{self.page} holds {len(found)} statements matching {self.pattern!r}"
        return found[0]


TABLE = "| real MIMIC-III demo, `badpoints build`"
PINS = {
    "validate": Pin("README.md", r"On the real MIMIC-III demo \(([\d,]+) admissions, ([\d,]+) lab rows\) the same "
                                 r"command prints (\d+\.\d) KB: (\w+) warnings \(([\d,]+) numeric items that keep less "
                                 r"than half their results; ([\d,]+) rows of text in numeric items; no SUBJECT_ID to "
                                 r"split patients by\) and (\d+) notes", validate_line),
    "max_z": Pin("README.md", r"\| max \\\|z\\\| over every edge \| ([\d,]+) \| ([\d.]+) \|",
                 lambda runs: table_rows(runs)["max"], TABLE),
    "over_10": Pin("README.md", r"\| edges with \\\|z\\\| > 10 \| ([\d,]+) of ([\d,]+) \(([\d.]+)%\) \| ([\d,]+) of "
                                r"([\d,]+) \|", lambda runs: table_rows(runs)["over"], TABLE),
    "marked": Pin("README.md", r"\| edges marked bounded / censored / unseen or rare in train \| - \| ([\d,]+) / "
                               r"([\d,]+) / ([\d,]+) \|", lambda runs: table_rows(runs)["marked"], TABLE),
    "admissions": Pin("README.md", r"\| admissions in graphs \(of (\d+)\) \| (\d+) \(HADM (\d+) lost\) \| (\d+) \|",
                      lambda runs: table_rows(runs)["admissions"], TABLE),
    "kept": Pin("README.md", r"\| lab rows kept as edges \| ([\d,]+) \| ([\d,]+) \|",
                lambda runs: table_rows(runs)["kept"], TABLE),
    "text": Pin("README.md", r"\| mixed-item text rows quarantined; censored or `NEG` results read as numbers; ordinal "
                             r"results read as ranks \| ([\d,]+); ([\d,]+); ([\d,]+) \| ([\d,]+); ([\d,]+); ([\d,]+) \|",
                lambda runs: table_rows(runs)["text"], TABLE),
    "discharge": Pin("README.md", r"\| `admission.x_cat` columns known only at discharge \| `(\w+)` \| (\w+) \|",
                     lambda runs: table_rows(runs)["discharge"], TABLE),
    "ed_readme": Pin("README.md", r"All ([\d,]+) such rows of the MIMIC-III demo lie within (\d+\.\d) h of `ADMITTIME`",
                     lambda runs: (ed_rows(runs)[0], ed_rows(runs)[3])),
    "ed_stages": Pin("docs/stages.md", r"the MIMIC-III demo's ([\d,]+) such rows, of (\d+) admissions, lie "
                                       r"(\d+\.\d+)-(\d+\.\d) h before ADMITTIME; HADM (\d+) had no other lab",
                     lambda runs: (*ed_rows(runs), only_ed_labs(runs, 160442))),
    "longest": Pin("docs/stages.md", r"the MIMIC-III demo's longest is (\d+)\)", longest_stay),
    "case": Pin("docs/stages.md", r"\(`BLOOD` and `Blood`, both in the MIMIC-III demo\)", case_variants),
    "bacteria_readme": Pin("README.md", r"the demo's urine bacteria would keep only its (\d+) negatives, constant at "
                                        r"z = 0; ordinal, it keeps all (\d+) results in order", bacteria_readme),
    "bacteria_stages": Pin("docs/stages.md", r"Urine bacteria \(51463\) of the MIMIC-III demo has (\d+) `NONE`, (\d+) "
                                             r"`NEG` and (\d+) `0` beside (\d+) `FEW`, `OCC`, `MOD`, `MANY` and `RARE`",
                           bacteria_stages),
    "biased": Pin("docs/stages.md", r"the MIMIC-III demo's (\d+): Length of Urine Collection keeps (\d+) of (\d+), Large "
                                    r"Platelets (\d+) of (\d+)\)", biased),
    "meds": Pin("docs/meds.md", r"On the real MIMIC-III demo: (\d+) shards, ([\d,]+) lab events and ([\d,]+) admission "
                                r"events; MEDS-Transforms 0\.7's normalization then gives (\d+) NaN or inf z, and the "
                                r"largest \|z\| is ([\d.]+) \(the build's bound, (\d+)\)\. It drops ([\d,]+) rows of "
                                r"([\d,]+) codes never seen in train", meds_build),
    "task_summary": Pin("docs/tasks.md", r"(  funnel    read [^`]*?)\n```", task_summary),
    "task_prose": Pin("docs/tasks.md", r"Of the (\d+) admissions, (\d+) ended \(died or left\) within 24 h and are not "
                                       r"asked; the other (\d+) are labelled, (\d+) of them deaths\. ([\d,]+) lab rows",
                      task_prose),
    "task_future": Pin("docs/tasks.md", r"removes (\d+) admissions for what happens after their prediction time: HADM_ID "
                                        r"([\d, ]+)\. Selection", task_future),
    "meds_summary": Pin("docs/meds.md", r"(  MEDS      MEDS-Transforms' normalization will drop [^`]*? JSON report)",
                        meds_summary),
}
# Numbers the pages say beside the demo that are no figure of a run here, with why.
NOT_PINNED = {
    ("README.md", "MIMIC-IV demo within 9 h"): "the MIMIC-IV demo is not here to run",
    ("docs/guarantees.md", "under 8 KB with no line over 200 characters"): "bounds tests/test_actions.py holds",
    ("docs/stages.md", "9,588 rows of the MIMIC-IV demo"): "the MIMIC-IV demo is not here to run",
    ("docs/stages.md", "the MIMIC-IV demo lost 7 admissions"): "the MIMIC-IV demo is not here to run",
    ("docs/stages.md", "MIMIC has stays of 200+ days"): "all of MIMIC, not the demo",
    ("docs/stages.md", "`max_stay_days` (1000 days)"): "a setting's default",
    ("docs/guarantees.md", "[0, cardinality) in `x_cat`"): "a range of indices, in a promise the demo's test holds",
    ("docs/check.md", "ends in 0 to 6) and guarded with `std + 1e-7`"): "what the page's own script does, in its code",
    ("docs/check.md", "z-scores up to 1.4e10"): "tests/pipeline/check/test_run.py runs the page's script on the demo",
}


@pytest.mark.parametrize("name", sorted(PINS))
def test_the_pages_say_what_the_demo_gives(runs, name):
    pin = PINS[name]
    said = tuple(" ".join(group.split()) for group in pin.match().groups())
    assert tuple(pin.said(runs)) == said, f"{pin.page}: {pin.pattern!r}"


NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def demo_lines(text: str) -> list[tuple[int, int]]:
    """Where the page speaks of the demo: each line naming it, the line after it (a sentence wrapped there), and the
    rows of a table whose header names it; as (start, end) offsets."""
    lines, spans, offset, demo_table = text.split("\n"), [], 0, False
    starts = []
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    for i, line in enumerate(lines):
        table_row = line.startswith("|")
        header = table_row and (i == 0 or not lines[i - 1].startswith("|"))
        demo_table = table_row and ("demo" in line.lower() if header else demo_table)
        if "demo" in line.lower() or demo_table:
            spans.append((starts[i], starts[i] + len(line)))
            if not table_row and i + 1 < len(lines):
                spans.append((starts[i + 1], starts[i + 1] + len(lines[i + 1])))
    return spans


def test_every_demo_figure_of_the_pages_is_pinned():
    """A number on a line that speaks of the demo is read by a pin or explained in NOT_PINNED: a new figure of the
    demo gets its pin when it is written."""
    covered: dict[str, list[tuple[int, int]]] = {}
    for pin in PINS.values():
        text = (ROOT / pin.page).read_text()
        match = pin.match()
        at = text.index(pin.text()) if pin.table else 0
        covered.setdefault(pin.page, []).append((at + match.start(), at + match.end()))
    for (page, phrase) in NOT_PINNED:
        text = (ROOT / page).read_text()
        assert text.count(phrase) == 1, (page, phrase)
        covered.setdefault(page, []).append((text.index(phrase), text.index(phrase) + len(phrase)))
    loose = []
    for page in PAGES:
        name, text = str(page.relative_to(ROOT)), page.read_text()
        for start, end in demo_lines(text):
            for number in NUMBER.finditer(text, start, end):
                if not any(a <= number.start() < b for a, b in covered.get(name, [])):
                    loose.append((name, text[max(0, number.start() - 30):number.end() + 30]))
    assert loose == []
