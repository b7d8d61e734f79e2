"""pipeline/reporting/html.py: the self-contained HTML report (sections, escaping, no raw values, same bytes twice)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pipeline import load_config, validate
from pipeline.reporting import page
from pipeline.cli import app
from pipeline.reporting.findings import item_names
from pipeline.reporting.html import ACTIONS, HtmlReport, actions, html_report, render
from pipeline.stages.scale import view as scale_view
from pipeline.reporting.report import Finding, Report
from schemas.catalogue import CHECKS
from tests.corpus import CANARY, Dataset
from tests.corpus import build as build_case

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"
SECTIONS = ("actions", "ledgers", "inputs", "findings", "attrition", "zscores", "items", "missingness", "splits")
runner = CliRunner()


class Tags(HTMLParser):
    """Every start tag with its attributes, and whether the document parsed to the end."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags_of(page: str) -> list[tuple[str, dict]]:
    parser = Tags()
    parser.feed(page)
    parser.close()
    return parser.tags


def rows_of(page: str, ident: str) -> list[list[str]]:
    """The text of every cell of every body row of the first table in the element with id ``ident``."""
    table = page[page.index(f'id="{ident}"'):]
    table = table[table.index("<tbody>"):table.index("</table>")]
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)]


def assert_self_contained(page: str) -> None:
    tags = tags_of(page)
    for tag, attrs in tags:
        for name in ("src", "href", "xlink:href", "action", "data"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value or value.startswith(("#", "data:")), (tag, name, value)
        assert tag not in ("link", "img", "iframe", "object", "embed"), tag
        if tag == "script":
            assert "src" not in attrs
    assert "@import" not in page and not re.search(r"url\((?!#)", page)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


@pytest.fixture(scope="module")
def config():
    return load_config()


@pytest.fixture(scope="module")
def sample(config):
    return validate(SAMPLE, config)


@pytest.fixture(scope="module")
def sample_page(sample, config):
    return render(sample, config)


def test_sample_report_has_every_section_and_is_self_contained(sample_page):
    ids = {attrs.get("id") for _, attrs in tags_of(sample_page)}
    assert set(SECTIONS) <= ids, set(SECTIONS) - ids
    assert {"contents", "findings-clean", "findings-scale", "z-items", "fig-funnel", "fig-zscores", "status"} <= ids
    assert sample_page.count("<svg") == 2  # funnel and z-scores (graphs only in a build)
    assert "status: warnings" in sample_page
    for check in ("quarantine_outpatient", "fallback_item", "z_bounded", "mixed_item_text", "attrition"):
        assert f"<code>{check}</code>" in sample_page
    assert "read 13,041 = kept 9,381 + quarantined 817 + deduplicated 2,843" in sample_page
    assert "50963 NTproBNP (Blood) (9 train rows)" in sample_page  # one normal row: a fallback item, on all rows
    assert_self_contained(sample_page)


def test_ids_are_unique_across_the_inline_figures(sample_page):
    ids = [attrs["id"] for _, attrs in tags_of(sample_page) if "id" in attrs]
    assert len(ids) == len(set(ids))
    referenced = set(re.findall(r'(?:url\(#|href="#)([^")]+)', sample_page))
    assert referenced <= set(ids), referenced - set(ids)


def test_same_input_renders_the_same_bytes(sample_page, config):
    again = render(validate(SAMPLE, config), config)  # a fresh run, not the same objects
    assert again == sample_page


def test_findings_are_escaped():
    finding = Finding(severity="error", stage="raw", table="LABEVENTS", check="valuenum_numeric", column="VALUENUM",
                      count=1, lines=[7], message='<script>alert("x")</script> & <b>bold</b>')
    page = render(_Result(Report(findings=[finding])), load_config())
    assert "<script>alert" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "status: errors" in page


@pytest.mark.parametrize("case", ["unknown_flag", "text_in_itemid", "inf_valuenum", "missing_file",
                                  "duplicate_admission"])
def test_broken_data_shows_its_findings_and_no_raw_value(tmp_path, config, case):
    expect = build_case(case, tmp_path / "data")
    validation = validate(tmp_path / "data", config)
    page = render(validation, config)
    assert f"<code>{expect.check}</code>" in page
    finding = next(f for f in validation.report.findings if f.check == expect.check)
    for line in expect.lines:
        assert str(line) in finding.message and re.search(rf"\b{line}\b", page)
    for secret in {CANARY, expect.secret} - {None}:
        assert secret not in page
    assert_self_contained(page)


def test_show_values_opts_in_to_samples(tmp_path, config):
    build_case("text_in_valuenum", tmp_path / "data")
    validation = validate(tmp_path / "data", config, show_values=True)
    assert CANARY not in render(validation, config)  # the run carried samples, the page was not asked for them
    assert f"values: &#x27;{CANARY}&#x27;" in render(validation, config, show_values=True)


def test_z_chart_marks_the_items_beyond_the_error_bound(tmp_path):
    data = Dataset.sample()
    row = data.first("LABEVENTS", "VALUENUM", lambda v: v not in ("", "0"))
    data.set("LABEVENTS", row, "VALUENUM", "2e11")
    data.write(tmp_path / "data")
    config_file = tmp_path / "quirks.toml"
    config_file.write_text('[severity]\nvaluenum_bound = "warning"\n')
    config = load_config(config_file)
    validation = validate(tmp_path / "data", config)
    assert validation.report.attrition["stopped_at"] == "scale"
    page = render(validation, config)
    assert "<code>z_error_bound</code>" in page and "stopped at stage <b>scale</b>" in page
    assert 'id="fig-zscores"' in page  # the distributions exist although the scale stage stopped the run
    item = int(validation.tables.labevents.loc[row + 2, "ITEMID"])
    first = rows_of(page, "z-items")[0]
    assert first[0] == str(item) and int(first[9]) >= 1, \
        "the planted item leads the item table, with a flagged row"


def test_notebook_objects(sample, config):
    report = html_report(sample, config)
    assert isinstance(report, HtmlReport)
    inline = report._repr_html_()
    assert inline.startswith("<iframe srcdoc=\"") and "<html" not in inline and "&lt;html" in inline
    frame = sample.report.attrition_frame()
    assert list(frame.columns[:5]) == ["table", "stage", "step", "rows_in", "rows_out"]
    ledger = frame.attrs["ledger"]
    assert ledger["read"] == ledger["kept"] + ledger["quarantined"] + ledger["deduplicated"]
    labevents = frame[frame["table"] == "LABEVENTS"]
    assert int(labevents["quarantined"].sum()) == ledger["quarantined"]
    assert int(labevents["merged"].sum()) == ledger["deduplicated"]
    assert Report().attrition_frame().empty
    assert sample.report.stage_counts()["scale"] == {"info": 3}  # fallback and unseen items, z_bounded: notes


def test_build_writes_report_html_listed_in_the_manifest(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(SAMPLE), "--out", str(out), "--html", str(tmp_path / "copy.html"),
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert "report.html" in manifest["outputs"]
    page = (out / "report.html").read_text()
    assert (tmp_path / "copy.html").read_text() == page
    assert 'id="graphs"' in page and 'id="fig-graph-sizes"' in page and page.count("<svg") == 3
    assert "did edges" in page and "total MB" in page
    assert_self_contained(page)


class _Result:
    """A validation with nothing but a report (a run that stopped before reading anything)."""

    def __init__(self, report: Report) -> None:
        from pipeline.ledgers import Prepared
        from pipeline.reading.parse import RawTables

        self.report, self.tables, self.prepared = report, RawTables(), Prepared()


def test_build_folder_report_never_shows_raw_values(tmp_path):
    expect = build_case("unknown_flag", tmp_path / "data")  # a warning: the build goes through
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(tmp_path / "data"), "--out", str(out), "--show-values", "--quiet",
                                 "--html", str(tmp_path / "with-values.html")])
    assert result.exit_code == 0, result.output
    assert CANARY not in (out / "report.html").read_text()  # listed in the manifest, shared with the graphs
    shown = (tmp_path / "with-values.html").read_text()
    assert f"values: &#x27;{CANARY}&#x27;" in shown and 'id="graphs"' in shown
    assert f"<code>{expect.check}</code>" in shown


def test_z_chart_draws_a_bounded_sample_of_outliers_and_the_box_of_every_row():
    """An item with thousands of outliers (MIMIC-IV has items with hundreds of thousands) draws at most FLIERS of
    them, evenly spread, the extremes kept; its box and whiskers are those of all its rows."""
    import numpy as np
    from matplotlib import cbook


    rng = np.random.default_rng(7)
    values = np.concatenate([rng.normal(size=20_000), rng.normal(scale=40.0, size=4_000)])
    beyond = np.abs(values) > 100
    drawn = {50878: scale_view.DrawnZ(values=np.sort(values), beyond=values[beyond], lines=np.flatnonzero(beyond))}
    top = pd.DataFrame({"rows": [len(values)], "nonfinite": [0], "max_abs": [float(np.abs(values).max())],
                        "flagged": [int(beyond.sum())]}, index=pd.Index([50878], name="ITEMID"))
    figure = scale_view._z_chart(drawn, top, 100.0, 1e6, names={50878: "Alanine Aminotransferase (ALT) (Blood)"})
    (box,) = cbook.boxplot_stats(values)
    (ax,) = figure.axes
    drawn = [line for line in ax.lines if line.get_marker() == "."]
    (fliers,) = drawn
    shown = np.sort(fliers.get_xdata())
    assert len(box["fliers"]) > 5 * scale_view.FLIERS and len(shown) <= scale_view.FLIERS
    assert shown[0] == box["fliers"].min() and shown[-1] == box["fliers"].max()
    assert set(shown) <= set(box["fliers"])
    medians = [line for line in ax.lines if line.get_color() == "#1f77b4"]
    assert medians and np.allclose(medians[0].get_xdata(), box["med"])
    assert page.svg(figure, "z").count("<use") <= scale_view.FLIERS + scale_view.FLAGGED_POINTS + 10  # a few KB, not MB


# -- the top of the page: status, actions, ledgers, contents -------------------------------------------------------
def _finding(check: str, severity: str, count: int, *, stage: str = "raw", column: str = "VALUENUM",
             message: str = "found") -> Finding:
    return Finding(severity=severity, stage=stage, table="LABEVENTS", check=check, column=column, count=count,
                   lines=[], message=message)


def test_actions_are_errors_first_then_warnings_by_count_one_per_check():
    a, b, c, d, e, f, g, h = sorted(CHECKS)[:8]  # any checks: titles and advice are read from the catalogue
    report = Report(findings=[
        _finding(a, "warning", 10), _finding(a, "warning", 500, column="VALUE"),  # one action: 510
        _finding(b, "warning", 300),
        _finding(c, "error", 1),
        _finding(d, "info", 10_000),  # a note is no action, however many rows
        _finding(e, "error", 7, stage="clean"),
        _finding(f, "warning", 2, stage="clean"), _finding(g, "warning", 2),  # a tie: the earlier stage first
        _finding(h, "warning", 1)], stages={"raw": "#111111", "clean": "#222222"})
    chosen = actions(report)
    assert [action.check for action in chosen] == [e, c, a, b, g] and len(chosen) == ACTIONS == 5
    assert [action.severity for action in chosen] == ["error", "error", "warning", "warning", "warning"]
    merged = chosen[2]
    assert (merged.count, merged.findings, merged.stages) == (510, 2, ("raw",))
    assert set(merged.where) == {"LABEVENTS.VALUE", "LABEVENTS.VALUENUM"}
    for action in chosen:
        assert (action.title, action.advice) == (CHECKS[action.check].title, CHECKS[action.check].advice)
    assert [action.check for action in actions(report, most=10)] == [e, c, a, b, g, f, h]


def test_the_page_starts_with_the_status_then_the_actions_with_their_titles_counts_and_advice(config):
    a, b, c = sorted(CHECKS)[:3]
    report = Report(findings=[_finding(a, "warning", 1_234), _finding(b, "error", 3, stage="clean"),
                              _finding(c, "info", 99)], stages={"raw": "#111111", "clean": "#222222"})
    shown = render(_Result(report), config)
    status, listed, findings = (shown.index(f'id="{ident}"') for ident in ("status", "actions", "findings"))
    assert status < listed < shown.index('id="contents"') < findings
    top = shown[listed:findings]
    assert "0 warnings" not in shown[status:listed] and "1 error, 1 warning, 1 note" in shown[status:listed]
    for check, count, stage in ((b, "3", "clean"), (a, "1,234", "raw")):
        info = CHECKS[check]
        assert html.escape(info.title) in top and html.escape(info.advice) in top
        assert f'<span class="count">{count}</span>' in top and f'href="#findings-{stage}"' in top
    assert top.index(html.escape(CHECKS[b].title)) < top.index(html.escape(CHECKS[a].title))  # the error first
    assert html.escape(CHECKS[c].title) not in top  # a note is no action
    assert 'id="findings-clean" open' in shown and 'id="findings-raw">' in shown  # errors' stage open, others not


def test_actions_escape_a_check_the_catalogue_does_not_know(config):
    report = Report(findings=[_finding('<img src=x onerror="alert(1)">', "warning", 1)])
    shown = render(_Result(report), config)
    assert "<img" not in shown and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in shown


def test_a_report_without_errors_or_warnings_says_there_is_nothing_to_do(config):
    shown = render(_Result(Report(findings=[_finding(sorted(CHECKS)[0], "info", 5)])), config)
    assert "Nothing: no errors and no warnings." in shown and "status: ok" in shown


def test_the_ledgers_and_the_contents_on_the_sample(sample_page, sample):
    ledgers = sample_page[sample_page.index('id="ledgers"'):sample_page.index('id="contents"')]
    labs, admissions = sample.report.attrition["LABEVENTS"], sample.report.attrition["ADMISSIONS"]
    assert f"LABEVENTS rows: read {labs['read']:,}" in ledgers and f"admissions: read {admissions['read']:,}" in ledgers
    for name, count in [*((part, labs[part]) for part in ("kept", "quarantined", "deduplicated")),
                        ("in graphs", admissions["in_graphs"]), ("dropped", admissions["dropped"])]:
        assert f"{name} {count:,} (" in ledgers
    contents = sample_page[sample_page.index('<nav id="contents"'):]
    contents = contents[:contents.index("</nav>")]
    below = sample_page[sample_page.index("</nav>"):]
    sections = re.findall(r'<section id="([^"]+)"', below)
    assert sections[0] == "findings" and re.findall(r'href="#([^"]+)"', contents) == sections


def test_findings_are_grouped_by_stage_in_collapsed_details(sample_page, sample):
    findings = sample_page[sample_page.index('<section id="findings"'):sample_page.index('<section id="attrition"')]
    groups = re.findall(r'<details id="findings-([^"]+)"( open)?>', findings)
    assert [stage for stage, _ in groups] == list(sample.report.stage_counts())  # every stage with findings, in order
    assert not any(opened for _, opened in groups)  # the sample has no errors
    assert findings.count('<table class="sortable findings">') == len(groups)
    shown_rows = sum(len(rows_of(findings, f"findings-{stage}")) for stage, _ in groups)
    assert shown_rows == len(sample.report.findings)


def test_a_long_message_shows_its_start_and_the_rest_on_a_click(config):
    message = " ".join(f"{50000 + n} Item number {n} (Blood) ({n} rows)," for n in range(150))  # ~5,000 characters
    shown = render(_Result(Report(findings=[_finding("fallback_item", "warning", 150, message=message)])), config)
    cell = shown[shown.index('<td class="msg">') + len('<td class="msg">'):]
    cell = cell[:cell.index("</td>")]
    start, rest = cell.split('<details class="more">', 1)
    assert 150 <= len(start) <= page.SHORT and message.startswith(start)
    assert '<div class="rest">' in rest  # the rest in a box that scrolls
    assert start + html.unescape(re.sub(r"<summary>.*?</summary>|<[^>]+>", "", rest)) == message
    assert page.clipped("short & sweet") == "short &amp; sweet"


def test_a_long_line_list_shows_its_first_lines_and_the_rest_on_a_click(config):
    finding = Finding(severity="warning", stage="raw", table="LABEVENTS", check="charttime_outside_stay",
                      column="CHARTTIME", count=5_172, lines=list(range(49, 69)), message="m")
    shown = render(_Result(Report(findings=[finding])), config)
    cell = re.search(r'<td class="lines"[^>]*>(.*?)</td>', shown, re.S).group(1)
    assert cell.startswith("49, 50, 51, 52, 53<details") and "+5,167 more" in cell
    assert "54, 55" in cell and "68" in cell and "+5,152 not listed" in cell


def test_the_z_chart_names_its_items_and_the_item_table_lists_every_item(sample_page, sample):
    names = item_names(sample.tables.labitems)
    chart = sample_page[sample_page.index('id="fig-zscores"'):]
    chart = chart[:chart.index("</figure>")]
    labels = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", chart) if re.match(r"\d+ ", t)]
    assert len(labels) == scale_view.TOP_ITEMS
    for label in labels:
        item, name = label.split(" ", 1)
        assert names[int(item)].startswith(name.rstrip("\u2026")), label
    stats = sample.prepared.fitted["scale"]
    rows = rows_of(sample_page, "z-items")
    assert {int(row[0]) for row in rows} >= set(stats.items_)
    by_item = {int(row[0]): row for row in rows}
    for item, mean, scale, rule in zip(stats.items_, stats.mean_, stats.scale_, stats.rule_):
        assert by_item[item][1:6] == [names.get(item, "-"), rule, by_item[item][3], f"{mean:.4g}", f"{scale:.4g}"]
    largest = [float(row[8]) for row in rows if row[8] != "-"]
    assert largest == sorted(largest, reverse=True)  # by max |z|, the largest first
    assert '<details id="z-items">' in sample_page  # collapsed
    table = sample_page[sample_page.index('<details id="z-items">'):]
    assert table.index('<table class="sortable">') < table.index("</details>")


def test_a_meds_compare_run_shows_its_ledgers_rows_before_and_after_and_the_dropped_codes(tmp_path):
    from pipeline.config import load_config
    from pipeline.reporting.html import render
    from pipeline.meds import validate_meds
    from tests import meds as fixture

    before, after = tmp_path / "before", tmp_path / "after"
    fixture.write_meds(before, fixture.PLANTED_CASES)
    fixture.write_normalized(before, after)
    page = render(validate_meds(after, load_config(), compare=before), load_config())
    section = page[page.index("<h2>MEDS rows</h2>"):]
    section = section[:section.index("</section>")]
    assert f"Compared with {before}" in section and "rows before" in section
    assert fixture.HELD_OUT_ONLY in section  # the code the inner join dropped, in the collapsed list
