"""The README and the docs say what the code does, so they cannot rot: their Python examples run as written (on the
sample), every check is documented with its catalogue's stage, severity and lock, the guarantees name tests that
exist, and every link points at a file (and heading) that exists."""

from __future__ import annotations

import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, ROOT / "ARCHITECTURE.md", *DOCS]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _run(block: str, page: Path, namespace: dict) -> None:
    """Run ``block`` as a notebook cell runs it: without this module's ``from __future__`` imports (annotations left
    as text would keep a pandera DataFrameModel in the block from finding its types)."""
    code = compile(block, str(page.relative_to(ROOT)), "exec", dont_inherit=True)
    exec(code, namespace)  # noqa: S102 - our own documentation


def test_readme_python_blocks_run_each_on_its_own(capsys, monkeypatch):
    """Each README block runs alone, in a fresh namespace: a reader copies one block, not the whole page."""
    blocks = _python_blocks(README)
    assert len(blocks) >= 2
    monkeypatch.chdir(ROOT)
    names: dict = {}
    for block in blocks:
        namespace: dict = {}
        _run(block, README, namespace)
        names.update(namespace)
    out = capsys.readouterr().out
    assert names["validation"].exit_code == 0
    assert names["check"].ok, names["check"].problems  # the documented model passes preflight
    # "Guard your own pipeline": the frame's failing rows by check, and the graph's two errors, as the page shows
    shown = README.read_text().split("## Guard your own pipeline", 1)[1].split("```\n\n```\n", 1)[1].split("```")[0]
    for line in shown.splitlines():
        assert line.removesuffix(" ...") in out, line
    losses = [float(loss) for loss in re.findall(r"epoch \d+: loss (\S+)", out)]
    assert losses and all(math.isfinite(loss) for loss in losses), out  # it trains, on edge_attr, to a finite loss
    # What the README says the training example prints on the sample is what it prints: its losses and the
    # validation split's loss of the model and of each item's training base rate cannot go stale.
    (shown,) = re.findall(r"On the sample \(CPU\) it prints:\n\n```\n(.*?)```", README.read_text(), flags=re.S)
    assert [line for line in out.splitlines() if line.startswith(("True", "False", "epoch", "validation"))] == \
        shown.splitlines()
    model, base, positive, val = re.fullmatch(r"validation loss: model (\S+), base rate (\S+) \((\d+) of (\d+) "
                                              r"positive\)", shown.splitlines()[-1]).groups()
    model, base = float(model), float(base)
    assert f"({model:.4f} against {base:.4f})" in README.read_text()  # the prose states both figures
    assert f"On the {val} validation admissions" in README.read_text()
    assert model < base  # on admissions it never trained on, the documented model beats the training base rate
    # the baseline and the labels are what the README says they are: the task's, read back from the graphs
    assert (base, int(positive), int(val)) == _base_rate_loss(ROOT / "out" / "long_stay")
    assert names["x"].shape[:2] == (len(names["train"][0]["admission"].x_cat), len(names["columns"]))


def _base_rate_loss(out: Path) -> tuple[float, int, int]:
    """The task's training base rate (add-one smoothed) as a prediction for every validation admission: its binary
    cross-entropy (to four places), computed here from labels.parquet, and the validation split's positives and
    admissions."""
    import pandas as pd

    labels = pd.read_parquet(out / "labels.parquet").merge(pd.read_parquet(out / "label_splits.parquet"))
    train, val = (labels.loc[labels["split"] == name, "boolean_value"].astype(float) for name in ("train", "val"))
    rate = (train.sum() + 1) / (len(train) + 2)
    loss = float(-(val * math.log(rate) + (1 - val) * math.log(1 - rate)).mean())
    return round(loss, 4), int(val.sum()), len(val)


def test_python_guide_blocks_run_in_order(capsys, monkeypatch):
    """docs/python.md is one notebook: its blocks run in order in one namespace."""
    page = ROOT / "docs" / "python.md"
    blocks = _python_blocks(page)
    assert len(blocks) >= 4
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        _run(block, page, namespace)
    out = capsys.readouterr().out
    assert "warnings" in out
    assert "valuenum_finite" in out
    assert "(50963, 51100)" in out  # the seed's zero-std items are caught as constant
    assert "[scale:output] LABEVENTS.Z z_error_bound" in out
    assert namespace["validation"].exit_code == 0
    # "Your own frames": one message per missing column set, each column with what it holds; the inf refused
    assert ("[scale:input] SplitEvents.KIND column_in_dataframe: 1 column missing: KIND (str): the kind of its lab "
            "item") in out
    assert "scale.fit_zscore reads SPLIT, VALUENUM, ITEMID, FLAG, HADM_ID, KIND of SplitEvents" in out
    assert ("[scale:input] EncodedEvents.CHARTTIME column_in_dataframe: 1 column missing: CHARTTIME "
            "(datetime64[ns]): when the lab was charted.") in out
    assert "scale.apply_zscore takes EncodedEvents (schemas.encode): give the frame these columns" in out
    assert namespace["my_stats"].items_ == (50912,) and namespace["my_stats"].rule_ == ("all",)
    assert namespace["my_scaled"]["z"].notna().all() and len(namespace["my_scaled"]) == 8
    assert ("[scale:input] LABEVENTS.VALUENUM fit_finite failed on 1 row (line 4): inf ×1. In ITEMID 50912 (1 row) "
            "of the rows handed to scale.fit_zscore.") in out
    # "Your own functions": the filter that empties raises; collected, the join that repeats rows and the std guard
    assert ("[in_study_period:output] call 1 output not_empty: no row of the 13,041 it was handed: in_study_period "
            "emptied the frame") in out
    guard = namespace["guard"]
    assert guard.ledger()[["stage", "rows_in", "rows_out", "errors"]].values.tolist() == [
        ["in_study_period", 13041, 0, 1], ["with_admissions", 13041, 19948, 1], ["zscore", 13041, 13041, 1]]
    assert [(f.stage, f.check) for f in guard.report.findings] == [
        ("in_study_period", "not_empty"), ("with_admissions", "added_share"), ("zscore", "z_within")]
    assert 51100 in guard.report.findings[-1].items  # Sodium, Urine: its normal values are all equal
    assert "1 errors" in out and len(namespace["joined"]) == 19948


def test_graph_guide_blocks_run_in_order(capsys, monkeypatch):
    """docs/graphs.md's "Guard any PyG graph": its blocks run in order in one namespace and print what the page
    shows."""
    page = ROOT / "docs" / "graphs.md"
    blocks = _python_blocks(page)
    assert len(blocks) == 2
    text = page.read_text()
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        _run(block, page, namespace)
    out = capsys.readouterr().out
    shown = [line for block in re.findall(r"```\n(GraphCheck.*?|error .*?)```", text, flags=re.S)
             for line in block.splitlines()]
    assert len(shown) == 10
    for line in shown:  # each line the page shows, cut where it ends in "...", is printed
        assert line.removesuffix(" ...").strip() in out, line
    assert not namespace["result"].ok


def test_check_guide_blocks_run_in_order(capsys, monkeypatch):
    """docs/check.md's Python blocks run in order in one namespace: the schema in Python, a pipeline of the reader's
    on the sample, its table checked; what they print is the block the page shows after them."""
    page = ROOT / "docs" / "check.md"
    blocks = _python_blocks(page)
    assert len(blocks) == 3
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        _run(block, page, namespace)
    out = capsys.readouterr().out
    shown = re.search(r"```\n\n```\n(.*?)```", page.read_text().rsplit("```python\n", 1)[1], flags=re.S).group(1)
    assert out == shown
    assert namespace["run"].exit_code == 1


def test_readme_checks_agree_with_the_catalogue():
    """The README's table of the checks a user meets most says what the catalogue says (stage, default severity,
    fixed). Every check is documented where it is declared (``schemas/<stage>.py``) and printed by
    ``badpoints checks`` (tests/pipeline/test_cli.py), so a new stage's checks need no line here."""
    from schemas.catalogue import CHECKS

    text = README.read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| (\w+) \|([^|]*)\|", text, flags=re.M)
    table = {check: (stage, severity, fixed.strip()) for check, stage, severity, fixed in rows}
    assert len(table) == len(rows) >= 10  # each check once
    assert set(table) <= set(CHECKS), set(table) - set(CHECKS)
    wrong = {check: (row, (CHECKS[check].stage, CHECKS[check].severity, CHECKS[check].locked or ""))
             for check, row in table.items()
             if row != (CHECKS[check].stage, CHECKS[check].severity, CHECKS[check].locked or "")}
    assert not wrong, wrong  # README row vs the catalogue: (stage, default severity, fixed)


def test_the_guarantees_name_tests_that_exist():
    """docs/guarantees.md, which the README's guarantees section points to: each names tests that are there."""
    section = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", section)
    assert len(named) >= 15
    for path, test in named:
        assert (ROOT / path).is_file(), path
        if test:
            assert re.search(rf"^\s*def {test}\(", (ROOT / path).read_text(), flags=re.M), f"{path}::{test}"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_links_point_at_files_and_headings_that_exist():
    broken = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            linked = (page.parent / target).resolve() if target else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, broken


# "`check_id`, a warning" or "`check_id` (an error)": what README and docs/ say of a check's default severity.
SAID = re.compile(r"`(\w+)`(?:,| is| \()\s*an? (warning|error|note)\b")
SEVERITY_WORD = {"warning": "warning", "error": "error", "note": "info"}


def test_the_docs_say_each_check_s_severity_as_the_catalogue_does():
    """Every page that calls a catalogued check a warning, an error or a note says what the catalogue says (a note
    is severity info), so a check whose severity changes cannot leave a page behind."""
    from schemas.catalogue import CHECKS

    said = [(page.relative_to(ROOT), check, word) for page in (README, *DOCS)
            for check, word in SAID.findall(page.read_text()) if check in CHECKS]
    assert len(said) >= 8
    wrong = [(str(page), check, word, CHECKS[check].severity) for page, check, word in said
             if SEVERITY_WORD[word] != CHECKS[check].severity]
    assert not wrong, wrong


def test_the_readme_names_everything_a_skipped_test_needs():
    """The README says which tests may skip in a fresh clone and what they need; each reason a test skips for is
    one the README names (a new kind of skip needs its line there)."""
    section = README.read_text().split("## What badpoints guarantees", 1)[1].split("\n## ", 1)[0]
    named = {"mimic-iii demo": "../shared/real/", "meds-transforms": "make meds-env", "chromium": "Chromium",
             "polars": "polars", "mount": "mount"}
    reasons = re.findall(r"(?:pytest\.skip\(|reason=)\s*f?\"([^\"]+)\"",
                         "\n".join(path.read_text() for path in (ROOT / "tests").rglob("*.py")))
    unnamed = [reason for reason in reasons if not any(key in reason.lower() for key in named)
               and not any(machine in reason for machine in ("/proc/", "/dev/zero", "ignores case", "root"))]
    assert not unnamed, unnamed
    assert all(text in section for text in named.values())


def test_every_file_the_pages_name_exists():
    """A module or test a page names by path (``pipeline/stages/graph/tensors.py``, ``tests/...py``) is there: a
    moved module cannot leave a page pointing at nothing."""
    path = r"(?<![\w/.])((?:tests/)?(?:pipeline|schemas|bench)/[\w/]+\.(?:py|toml))"
    named = {(page.relative_to(ROOT), found) for page in PAGES for found in re.findall(path, page.read_text())}
    assert len(named) >= 40
    assert sorted((str(page), found) for page, found in named if not (ROOT / found).exists()) == []


def test_the_readme_stays_a_users_page_of_at_most_450_lines():
    """The README says what to run, what it shows and what to change; the rest belongs in docs/ (a new section
    there, a line here)."""
    assert len(README.read_text().splitlines()) <= 450
