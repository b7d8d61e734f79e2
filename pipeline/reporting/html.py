"""The HTML report: one self-contained page that says in a minute what is wrong with the data and where.

Everything is inline: CSS, a tiny sorting script, and matplotlib figures as SVG;
a Content-Security-Policy forbids the page any network request. Every text that
comes from the data or the report is escaped, and raw values appear only when
the run was asked for them (``--show-values``). The same input gives the same
bytes: no time stamps, SVG ids from a fixed hash salt, no matplotlib metadata.

The page starts with what to do: the status, the few actions that matter most (one per check with errors or
warnings, from the catalogue's title and advice), the two ledgers as one small picture, and a contents list. Then the
sections: the findings by stage (each stage's a collapsed ``<details>``, open when it holds errors), the attrition
funnel and the admissions' ledger, the sections each stage draws of itself in flow order (its ``sections`` hook:
scale's z-score distributions and items, fill's missingness and fills), the split sizes, for builds the graphs and
their memory, and the inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.kernel.engine import Engine
from pipeline.reporting import page
from pipeline.reporting.findings import LISTED
from pipeline.reporting.report import Report, as_shown, write_atomic
from schemas.catalogue import CHECKS, ERROR, INFO, WARNING


DROPPED_OPEN = 20
"""The list of admissions in no graph shows open up to this many (longer, it opens on a click; all are listed)."""

ACTIONS = 5
"""The page starts with at most this many actions (one per check with errors or warnings)."""

LINES_SHOWN = 5
"""A finding's first source lines shown in its row; the rest of those it lists open on a click."""


_SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2}
_NOUNS = {ERROR: "error", WARNING: "warning", INFO: "note"}
_SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class HtmlReport:
    """A rendered report: ``write`` it, or let Jupyter show it inline (``_repr_html_``)."""

    text: str

    def write(self, path: Path) -> None:
        """Write the page atomically (a temp file in the same folder, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, as_shown(self.text).encode("utf-8"))  # a data path's odd bytes as escapes

    def _repr_html_(self) -> str:
        # An iframe keeps the page's CSS and script away from the notebook's own.
        return (f'<iframe srcdoc="{escape(self.text, quote=True)}" title="badpoints report" '
                'style="width:100%;height:900px;border:1px solid #ddd" sandbox="allow-scripts"></iframe>')

    def __str__(self) -> str:
        return self.text


def html_report(result: Any, config: Any = None, *, show_values: bool = False) -> HtmlReport:
    """The report of a run (a :class:`pipeline.flow.Validation`, a MEDS run or a :class:`pipeline.builds.Build`), for
    a notebook, drawn with ``config`` (by default the config it ran with)."""
    validation = getattr(result, "validation", result)
    return HtmlReport(render(result, config if config is not None else validation.config, show_values=show_values))


SOURCE_LINES = "the source file's (header = line 1)"
"""What a finding's line numbers are, as the findings' section says: a run's and a check's read files."""


def render(result: Any, config: Any, *, show_values: bool = False, engine: Engine | None = None,
           kind: str | None = None, lines: str = SOURCE_LINES) -> str:
    """The whole page for a run or a build (a build has ``validation`` and what its target made). What is read of
    the rows held in the engine's parts (``engine``, by default the run's own) is read where its parts are (the
    Dask engine's workers) and only per-part sums come back. The sections after the findings and the attrition are
    the ones the run's stages draw of themselves (:attr:`pipeline.kernel.stage.Stage.sections`), in flow order.
    ``kind`` names what made the report in its title (by default ``build`` or ``validate``); ``lines`` says what
    its findings' line numbers are."""
    validation = getattr(result, "validation", result)
    built = result if validation is not result else None
    report: Report = result.report
    engine = engine or getattr(validation, "engine", None)
    sections = [
        _findings(report, show_values=show_values, names=getattr(validation, "names", {}), lines=lines),
        _attrition(report),
        *_stage_sections(validation, report, config, engine=engine, built=built),
        _inputs(report),
    ]
    sections = [s for s in sections if s]
    kind = kind or ("build" if built is not None else "validate")
    top = [_header(report, kind, getattr(validation, "cached", False)), _actions(report), _ledgers(report),
           _contents(sections)]
    body = "\n".join(s for s in [*top, *sections] if s)
    return _PAGE.format(title=f"badpoints {kind}: {escape(report.status)}", css=_CSS, script=_SCRIPT, body=body,
                        version=escape(_version()))


@dataclass(frozen=True)
class Action:
    """What to do about one check: its worst severity, its title and advice as the catalogue gives them (the check's
    id when the catalogue has it not), the count its findings add up to (rows, or the items or admissions the check
    counts), how many findings, and the stages and places (``TABLE.COLUMN``) they were found at, in report order."""

    severity: str
    check: str
    title: str
    advice: str
    count: int
    findings: int
    stages: tuple[str, ...]
    where: tuple[str, ...]


def actions(report: Report, most: int = ACTIONS) -> list[Action]:
    """The actions the page starts with: one per check with errors or warnings, errors first, then warnings, each
    by its count (most first), then by the flow order of its first stage and its id; at most ``most``."""
    place = {stage: n for n, stage in enumerate(report.stages)}
    by_check: dict[str, list[dict]] = {}
    for finding in report.as_json()["findings"]:
        if finding["severity"] in (ERROR, WARNING):
            by_check.setdefault(finding["check"], []).append(finding)
    made = []
    for check, found in by_check.items():
        info = CHECKS.get(check)
        made.append(Action(
            severity=min((f["severity"] for f in found), key=_SEVERITY_RANK.__getitem__),
            check=check, title=info.title if info else check, advice=info.advice if info else "",
            count=sum(f["count"] for f in found), findings=len(found),
            stages=tuple(dict.fromkeys(f["stage"] for f in found)),
            where=tuple(dict.fromkeys(w for w in (_where(f) for f in found) if w))))
    made.sort(key=lambda a: (_SEVERITY_RANK[a.severity], -a.count, min(place.get(s, 99) for s in a.stages), a.check))
    return made[:most]


def _where(finding: dict) -> str:
    return ".".join(p for p in (finding["table"], finding["column"]) if p)


# -- the top: status, actions, ledgers, contents ----------------------------------------------------------
def _header(report: Report, kind: str, cached: bool) -> str:
    counts = {s: sum(f.severity == s for f in report.findings) for s in (ERROR, WARNING, INFO)}
    overrides = ""
    if report.overrides:
        changed = ", ".join(f"{k} = {v}" for k, v in sorted(report.overrides.items()))
        overrides = f"<p>Severities changed by the config: <code>{escape(changed)}</code></p>"
    note = "<p class=note>This report was reused from the cache: only findings and attrition are shown.</p>" \
        if cached else ""
    return (f'<header><h1>badpoints {escape(kind)}</h1>'
            f'<p><span class="status {escape(report.status)}" id="status">status: {escape(report.status)}</span> '
            f'<span id="counts">{_counted(counts[ERROR], ERROR)}, {_counted(counts[WARNING], WARNING)}, '
            f'{_counted(counts[INFO], INFO)}</span></p>{overrides}{note}</header>')


def _counted(n: int, severity: str) -> str:
    noun = _NOUNS.get(severity, severity)
    return f"{n:,} {escape(noun)}{'' if n == 1 else 's'}"


def _actions(report: Report) -> str:
    """What to do first: the top actions (:func:`actions`), each linking to its stage's findings."""
    every = actions(report, most=len(report.findings))
    chosen, left = every[:ACTIONS], every[ACTIONS:]
    if not chosen:
        return ('<section id="actions" class="top"><h2>What to do</h2><p>Nothing: no errors and no warnings.'
                "</p></section>")
    items = []
    for action in chosen:
        where = "; ".join(action.where)
        found = f"{action.findings} findings" if action.findings != 1 else "1 finding"
        stage = action.stages[0]
        items.append(
            f'<li class="action {escape(action.severity)}"><span class="sev {escape(action.severity)}">'
            f'{escape(action.severity)}</span> <a href="#findings-{escape(stage)}"><b class="title">'
            f'{escape(action.title)}</b></a>: <span class="count">{action.count:,}</span> '
            f'<span class="note">(<code>{escape(action.check)}</code>, {escape(", ".join(action.stages))}'
            f'{": " + escape(where) if where else ""}; {found})</span>'
            + (f'<br><span class="advice">{escape(action.advice)}</span>' if action.advice else "") + "</li>")
    more = ""
    if left:
        what = "errors or warnings" if any(action.severity == ERROR for action in left) else "warnings"
        more = (f'<p class=note>and {len(left)} more {"check" if len(left) == 1 else "checks"} with {what}: see the '
                "findings.</p>")
    return (f'<section id="actions" class="top"><h2>What to do</h2><ol class="actions">{"".join(items)}</ol>{more}'
            "</section>")


_LEDGER_COLOURS = {"kept": "#2e7d32", "quarantined": "#e0a030", "deduplicated": "#90a4ae", "in graphs": "#2e7d32",
                   "dropped": "#c62828"}


def _ledgers(report: Report) -> str:
    """The LABEVENTS and ADMISSIONS ledgers as one small picture: a bar each, read split into where it went."""
    attrition = report.attrition or {}
    labs, admissions = attrition.get("LABEVENTS"), attrition.get("ADMISSIONS")
    bars = []
    if labs:
        bars.append(_bar("LABEVENTS rows", labs["read"], [(part, labs[part]) for part in
                                                         ("kept", "quarantined", "deduplicated")]))
    if admissions:
        bars.append(_bar("admissions", admissions["read"], [("in graphs", admissions["in_graphs"]),
                                                            ("dropped", admissions["dropped"])]))
    if not bars:
        return ""
    return (f'<section id="ledgers" class="top"><h2>Where the rows went</h2>{"".join(bars)}'
            '<p class=note>Every step and every dropped admission: <a href="#attrition">attrition</a>.</p></section>')


def _bar(what: str, read: int, parts: list[tuple[str, int]]) -> str:
    """One ledger: ``read`` as a bar cut into ``parts`` (name, count), with their counts and shares beside it."""
    segments, keys = [], []
    for name, count in parts:
        share = count / read if read else 0.0
        colour = _LEDGER_COLOURS.get(name, "#999999")
        if count:
            segments.append(f'<span class="seg" style="width:{100 * share:.2f}%;background:{colour}" '
                            f'title="{escape(name)} {count:,}"></span>')
        keys.append(f'<span class="key"><i style="background:{colour}"></i>{escape(name)} {count:,} '
                    f'({share:.0%})</span>')
    return (f'<div class="ledger-bar"><span class="what">{escape(what)}: read {read:,}&nbsp;&rarr;</span>'
            f'<span class="bar" role="img" aria-label="{escape(what)}">{"".join(segments)}</span>'
            f'<span class="keys">{" ".join(keys)}</span></div>')


_SECTION = re.compile(r'<section id="([^"]+)"[^>]*><h2>(.*?)</h2>', re.S)


def _contents(sections: list[str]) -> str:
    """Links to every section below (their id and heading, as drawn)."""
    found = [(ident, re.sub(r"<[^>]+>", "", title)) for section in sections for ident, title in
             _SECTION.findall(section)]
    if not found:
        return ""
    links = " &middot; ".join(f'<a href="#{ident}">{title}</a>' for ident, title in found)
    return f'<nav id="contents" aria-label="Contents"><b>Contents:</b> {links}</nav>'


# -- sections -----------------------------------------------------------------------------------
def _findings(report: Report, *, show_values: bool, names: dict[int, str] | None = None,
              lines: str = SOURCE_LINES) -> str:
    """The findings by stage, in flow order: each stage's table in a ``<details>`` (open when it holds errors) whose
    summary counts them; long messages and line lists are cut short, the rest a click away."""
    findings = report.as_json()["findings"]
    if not findings:
        return '<section id="findings"><h2>Findings</h2><p>No findings.</p></section>'
    place = {stage: n for n, stage in enumerate(report.stages)}  # the flow's order
    by_stage: dict[str, list[dict]] = {}
    for f in findings:
        by_stage.setdefault(f["stage"], []).append(f)
    groups = []
    for stage, found in sorted(by_stage.items(), key=lambda kv: place.get(kv[0], 99)):
        severities = sorted({f["severity"] for f in found}, key=lambda s: _SEVERITY_RANK.get(s, 3))
        counted = ", ".join(_counted(sum(f["severity"] == s for f in found), s) for s in severities)
        summary = (f'<span class="chip" style="border-color:{report.stages.get(stage, "#999")}">{escape(stage)}'
                   f'</span> {counted}')
        groups.append(page.details(summary, _findings_table(found, show_values=show_values, names=names or {}),
                                   ident=f"findings-{stage}", opened=ERROR in severities))
    hint = ("<p class=note>Findings by stage, in flow order: click a stage to open it, a column to sort. Line "
            f"numbers are {escape(lines)}.</p>")
    return f'<section id="findings"><h2>Findings</h2>{hint}{"".join(groups)}</section>'


_FINDING_COLUMNS = (("severity", "sev"), ("check", "check"), ("where", "where"), ("count", "count"),
                    ("lines", "lines"), ("message", "msg"))


def _findings_table(findings: list[dict], *, show_values: bool, names: dict[int, str]) -> str:
    rows = []
    for f in findings:
        message = page.clipped(f["message"])
        if len(f.get("items") or ()) > LISTED:  # the message lists the first few; the page keeps every one
            listed = ", ".join(f"{i} {names[i]}" if i in names else str(i) for i in f["items"])
            message += (f'<details class="more"><summary>all {len(f["items"]):,} items</summary>'
                        f'<div class="rest">{escape(listed)}</div></details>')
        if show_values and f.get("samples"):
            message += '<br><span class="values">values: ' + escape(", ".join(repr(v) for v in f["samples"])) \
                + "</span>"
        check = CHECKS.get(f["check"])
        title = f' title="{escape(check.title)}"' if check else ""
        rows.append(
            f'<tr class="{escape(f["severity"])}">'
            f'<td data-sort="{_SEVERITY_RANK.get(f["severity"], 3)}"><span class="sev {escape(f["severity"])}">'
            f'{escape(f["severity"])}</span></td>'
            f'<td{title}><code>{escape(f["check"])}</code></td><td>{page.breakable(_where(f))}</td>'
            f'<td class="num" data-sort="{f["count"]}">{f["count"]:,}</td>'
            f'<td class="lines" data-sort="{f["lines"][0] if f["lines"] else 0}">{_lines(f)}</td>'
            f'<td class="msg">{message}</td></tr>')
    columns = "".join(f'<col class="{c}">' for _, c in _FINDING_COLUMNS)
    header = "".join(f'<th scope="col">{escape(h)}</th>' for h, _ in _FINDING_COLUMNS)
    return (f'<table class="sortable findings"><colgroup>{columns}</colgroup><thead><tr>{header}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _lines(finding: dict) -> str:
    """A finding's first source lines; the rest of those it lists, and how many more rows it counts, on a click."""
    listed = [f"{n}" for n in finding["lines"]]
    unlisted = finding["count"] - len(listed) if listed else 0
    shown = escape(", ".join(listed[:LINES_SHOWN]))
    rest = listed[LINES_SHOWN:]
    if rest:
        more = f"{len(rest) + max(unlisted, 0):,}"
        tail = f' <span class="more">(+{unlisted:,} not listed)</span>' if unlisted > 0 else ""
        return (f'{shown}<details class="more"><summary>+{more} more</summary>{escape(", ".join(rest))}{tail}'
                "</details>")
    return shown + (f' <span class="more">(+{unlisted:,} more)</span>' if unlisted > 0 else "")


def _attrition(report: Report) -> str:
    attrition = report.attrition or {}
    ledger = attrition.get("LABEVENTS")
    steps = attrition.get("steps") or []
    if not ledger and not steps:
        return ""
    equation = (f'<p class="ledger">LABEVENTS rows: read {ledger["read"]:,} = kept {ledger["kept"]:,} + '
                f'quarantined {ledger["quarantined"]:,} + deduplicated {ledger["deduplicated"]:,}</p>'
                if ledger else "")
    stopped = (f'<p class="note">The run stopped at stage <b>{escape(str(attrition["stopped_at"]))}</b>; '
               "later stages did not run.</p>") if attrition.get("stopped_at") else ""
    funnel = [s for s in steps if s["table"] == "LABEVENTS" and s["rows_in"] != s["rows_out"]] if ledger else []
    chart = page.figure("funnel", "LABEVENTS rows after each step that removed or merged rows",
                        lambda: _funnel_chart(ledger["read"], funnel, report.stages)) if funnel else ""
    table = page.table(["table", "stage", "step", "rows in", "rows out", "quarantined", "merged", "clipped"],
                       [[s["table"], s["stage"], s["step"], page.n(s["rows_in"]), page.n(s["rows_out"]),
                         page.n(s["quarantined"]), page.n(s["merged"]), page.n(s["clipped"])] for s in steps],
                       numeric={3, 4, 5, 6, 7}, sortable=True)
    steps_shown = page.details(f"every step's rows in and out ({len(steps)} steps)", table, ident="steps",
                               opened=not ledger)  # without a ledger, the steps are all the section says
    return (f'<section id="attrition"><h2>Attrition</h2>{equation}{_admissions(attrition.get("ADMISSIONS"))}'
            f'{stopped}{chart}{steps_shown}</section>')


def _admissions(ledger: dict | None) -> str:
    """The ADMISSIONS ledger: read = in graphs + dropped, per split, with a column per reason that dropped any."""
    if not ledger:
        return ""
    reasons = [reason for reason, n in ledger["dropped_by"].items() if n]  # the reasons that dropped any admission
    equation = (f'<p class="ledger">ADMISSIONS: read {ledger["read"]:,} = in graphs {ledger["in_graphs"]:,} + '
                f'dropped {ledger["dropped"]:,}</p>')
    rows = [[name, page.n(split["read"]), page.n(split["in_graphs"]), page.n(split["dropped"]),
             *[page.n(split["dropped_by"][reason]) for reason in reasons]]
            for name, split in [*ledger["splits"].items(), ("all", ledger)]]
    head = ["split", "read", "in graphs", "dropped", *[r.removeprefix("admission_").replace("_", " ") for r in reasons]]
    stages = ledger.get("labs_quarantined_at") or {}
    note = ("<p class=note>Admissions whose lab rows were all quarantined lost their last rows at: "
            + escape(", ".join(f"{stage} {n}" for stage, n in stages.items())) + ".</p>") if stages else ""
    return equation + page.table(head, rows, numeric=set(range(1, len(head)))) + note + _dropped(ledger)


def _dropped(ledger: dict) -> str:
    """Every admission in no graph, by source line: its HADM_ID, split, reason and the stage that took its last lab
    rows (open when it is a short list)."""
    dropped = ledger.get("dropped_admissions") or []
    if not dropped:
        return ""
    rows = [[page.n(d["line"]), "-" if d["HADM_ID"] is None else str(d["HADM_ID"]), d["split"],
             d["reason"].removeprefix("admission_").replace("_", " "), d["stage"] or ""] for d in dropped]
    table = page.table(["ADMISSIONS line", "HADM_ID", "split", "reason", "last lab rows taken at"], rows,
                       numeric={0, 1}, sortable=True)
    noun = "admission" if len(dropped) == 1 else "admissions"
    return (f'<details id="dropped-admissions"{" open" if len(dropped) <= DROPPED_OPEN else ""}><summary>'
            f"{len(dropped):,} {noun} in no graph, every one named</summary>{table}</details>")


def _inputs(report: Report) -> str:
    if not report.inputs:
        return ""
    inputs = page.table(["table", "file", "rows", "sha256"],
                        [[i.table, i.path, page.n(i.rows), i.sha256[:16]] for i in report.inputs],
                        numeric={2})
    return f'<section id="inputs"><h2>Inputs</h2>{inputs}</section>'


def _stage_sections(validation: Any, report: Report, config: Any, *, engine: Engine, built: Any) -> list[str]:
    """The sections the run's stages draw of themselves (their ``sections`` hook), in flow order."""
    order = getattr(validation, "order", None)
    if order is None:
        return []
    return [section for stage in order.all if stage.sections is not None
            for section in stage.sections(stage.shown(config, read=validation.tables, prepared=validation.prepared,
                                                      report=report, engine=engine, names=validation.names,
                                                      built=built))]


# -- charts (matplotlib, no pyplot: no global state, no GUI backend; pipeline.reporting.page draws them) ------
def _funnel_chart(read: int, steps: list[dict], colour: dict[str, str]):
    import matplotlib

    with matplotlib.rc_context(page.RC):
        labels = ["read"] + [f'{s["stage"]}: {s["step"]}' for s in steps]
        values = [read] + [s["rows_out"] for s in steps]
        colours = ["#7f7f7f"] + [colour.get(s["stage"], "#999999") for s in steps]
        figure = page.new_figure(8, 0.45 * len(labels) + 0.9)
        ax = figure.add_subplot()
        y = np.arange(len(labels))[::-1]
        ax.barh(y, values, color=colours)
        ax.set_yticks(y, labels)
        ax.set_xlabel("LABEVENTS rows")
        ax.set_xlim(0, max(values) * 1.22 if max(values) else 1)
        for position, value, step in zip(y, values, [None] + steps):
            note = f"{value:,}"
            if step is not None:
                note += f'  (-{step["rows_in"] - step["rows_out"]:,} {"merged" if step["merged"] else "quarantined"})'
            ax.text(value, position, "  " + note, va="center", fontsize=8)
        return figure


def _version() -> str:
    try:
        return metadata.version("badpoints")
    except metadata.PackageNotFoundError:
        return "unknown"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 24px 48px;color:#222;background:#fff;overflow-wrap:break-word}
h1{font-size:22px;margin:20px 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}.top h2{font-size:16px;margin:16px 0 6px}
table{border-collapse:collapse;margin:8px 0;min-width:50%;max-width:100%;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6;position:sticky;top:0}table.sortable th{cursor:pointer;user-select:none}
table.sortable th:after{content:" \\2195";color:#aaa}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,td.msg,.rest,#inputs td,#contents,figcaption,.actions{overflow-wrap:anywhere}
table.findings{table-layout:fixed;width:100%}col.sev{width:7em}col.check{width:17%}col.where{width:15%}
col.count{width:6em}col.lines{width:9em}td.lines{font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
.status{font-weight:600;padding:2px 10px;border-radius:10px;color:#fff}
.status.ok{background:#2e7d32}.status.warnings{background:#b26a00}.status.errors{background:#c62828}
.sev{font-weight:600;font-size:12px}.sev.error{color:#c62828}.sev.warning{color:#b26a00}.sev.info{color:#1565c0}
tr.error td{background:#fff5f5}
.chip{display:inline-block;border:2px solid #999;border-radius:10px;padding:0 8px;margin:2px 4px 2px 0;
font-size:12px;font-weight:600}
.note{color:#666;font-size:12px}.more{color:#888}.values{color:#6a1b9a}
.ledger{font-weight:600}
ol.actions{margin:4px 0;padding-left:1.6em}ol.actions li{margin:0 0 6px}.advice{color:#444}
.ledger-bar{display:flex;flex-wrap:wrap;align-items:center;gap:4px 10px;margin:4px 0;font-size:13px}
.ledger-bar .what{flex:0 0 20em;font-weight:600}.ledger-bar .keys{font-size:12px;color:#444}
.bar{display:flex;width:240px;max-width:100%;height:14px;background:#eee;border-radius:3px;overflow:hidden}
.key i{display:inline-block;width:10px;height:10px;margin:0 4px 0 6px;border-radius:2px}
nav#contents{margin:12px 0 0;padding:6px 0;border-top:1px solid #ddd;border-bottom:1px solid #ddd;font-size:13px}
details{margin:4px 0}details>summary{cursor:pointer}section>details>summary{padding:4px 0}
details.more{margin:2px 0 0;font-size:12px}details.more>summary{color:#1565c0}
.rest{max-height:12em;overflow:auto;background:#fafafa;padding:2px 4px}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}figcaption{color:#666;font-size:12px}
footer{margin-top:40px;color:#888;font-size:12px}
"""

_SCRIPT = """
(function () {
  function key(cell) {
    var k = cell.getAttribute('data-sort');
    return k === null ? cell.textContent.trim().toLowerCase() : parseFloat(k);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, column) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var up = th.getAttribute('aria-sort') !== 'ascending';
        table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
        rows.sort(function (a, b) {
          var x = key(a.cells[column]), y = key(b.cells[column]);
          return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
  function reveal() {  // a link to a closed <details> (an action to its stage's findings) opens it
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.tagName === 'DETAILS') { target.open = true; target.scrollIntoView(); }
  }
  window.addEventListener('hashchange', reveal);
  reveal();
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; \
script-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
{body}
<footer>Made by badpoints {version}. No raw values are shown unless the run was given --show-values.</footer>
<script>{script}</script>
</body>
</html>
"""
