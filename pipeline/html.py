"""The HTML report: one self-contained page that says in a minute what is wrong with the data and where.

Everything is inline: CSS, a tiny sorting script, and matplotlib figures as SVG;
a Content-Security-Policy forbids the page any network request. Every text that
comes from the data or the report is escaped, and raw values appear only when
the run was asked for them (``--show-values``). The same input gives the same
bytes: no time stamps, SVG ids from a fixed hash salt, no matplotlib metadata.

Sections: status and findings, the attrition funnel and the admissions' ledger, then the sections each stage draws
of itself in flow order (its ``sections`` hook: scale's z-score distributions and items, fill's missingness and
fills), the split sizes, and for builds the graphs and their memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.config import Config
from pipeline.engines import PANDAS
from pipeline import page
from pipeline.report import Report, item_names, write_atomic
from pipeline.shared import as_shown
from schemas.checks import CHECKS


DROPPED_OPEN = 20
"""The list of admissions in no graph shows open up to this many (longer, it opens on a click; all are listed)."""


_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
_NOUNS = {"error": "error", "warning": "warning", "info": "note"}
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


def html_report(result: Any, config: Config | None = None, *, show_values: bool = False) -> HtmlReport:
    """The report of a :class:`pipeline.flow.Validation` or :class:`pipeline.builds.Build`, for a notebook."""
    if config is None:
        from pipeline.config import load_config

        config = load_config()
    return HtmlReport(render(result, config, show_values=show_values))


def render(result: Any, config: Config, *, show_values: bool = False, engine: Any = None) -> str:
    """The whole page for a Validation or a Build (a Build has ``validation`` and its graphs). With the ``engine``
    that holds LABEVENTS in parts (``pipeline.engines``), what is read of every part is read where its parts are
    (the Dask engine's workers) and only per-part sums come back; without one, the parts are read here, one at a
    time."""
    engine = engine or PANDAS
    validation = getattr(result, "validation", result)
    report: Report = result.report
    prepared = validation.prepared
    graphs = list(getattr(result, "graphs", ()) or ())
    kind = "build" if validation is not result else "validate"
    sections = [
        _header(report, kind, getattr(validation, "cached", False)),
        _findings(report, show_values=show_values),
        _attrition(report),
        *_stage_sections(validation, report, config, engine=engine),
        _splits(prepared, graphs, engine=engine),
    ]
    if kind == "build":
        sections.append(_graphs(graphs, config, written=getattr(result, "out_dir", None) is not None))
    body = "\n".join(s for s in sections if s)
    return _PAGE.format(title=f"badpoints {kind}: {escape(report.status)}", css=_CSS, script=_SCRIPT, body=body,
                        version=escape(_version()))


# -- sections -----------------------------------------------------------------------------------
def _header(report: Report, kind: str, cached: bool) -> str:
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("error", "warning", "info")}
    inputs = page.table(["table", "file", "rows", "sha256"],
                        [[i.table, i.path, page.n(i.rows), i.sha256[:16]] for i in report.inputs],
                        numeric={2})
    overrides = ""
    if report.overrides:
        changed = ", ".join(f"{k} = {v}" for k, v in sorted(report.overrides.items()))
        overrides = f"<p>Severities changed by the config: <code>{escape(changed)}</code></p>"
    note = "<p class=note>This report was reused from the cache: only findings and attrition are shown.</p>" \
        if cached else ""
    return (f'<header><h1>badpoints {escape(kind)}</h1>'
            f'<p><span class="status {escape(report.status)}" id="status">status: {escape(report.status)}</span> '
            f'{counts["error"]} errors, {counts["warning"]} warnings, {counts["info"]} notes</p></header>'
            f'<section id="inputs"><h2>Inputs</h2>{inputs}{overrides}{note}</section>')


def _findings(report: Report, *, show_values: bool) -> str:
    findings = report.as_json()["findings"]
    place = {stage: n for n, stage in enumerate(report.stages)}  # the flow's order
    by_stage: dict[str, dict[str, int]] = {}
    for f in findings:
        by_stage.setdefault(f["stage"], {}).setdefault(f["severity"], 0)
        by_stage[f["stage"]][f["severity"]] += 1
    chips = " ".join(
        f'<span class="chip" style="border-color:{report.stages.get(stage, "#999")}">{escape(stage)}: '
        + ", ".join(f"{n} {escape(_NOUNS.get(sev, sev))}{'s' if n != 1 else ''}"
                    for sev, n in sorted(counts.items(), key=lambda kv: _SEVERITY_RANK.get(kv[0], 3)))
        + "</span>"
        for stage, counts in sorted(by_stage.items(), key=lambda kv: place.get(kv[0], 99)))
    head = ["severity", "stage", "check", "where", "count", "lines", "message"]
    rows = []
    for f in findings:
        where = ".".join(p for p in (f["table"], f["column"]) if p)
        shown = ", ".join(str(n) for n in f["lines"])
        more = f["count"] - len(f["lines"]) if f["lines"] else 0
        lines = escape(shown) + (f' <span class="more">(+{more:,} more)</span>' if more > 0 else "")
        message = escape(f["message"])
        if show_values and f.get("samples"):
            message += '<br><span class="values">values: ' + escape(", ".join(repr(v) for v in f["samples"])) \
                + "</span>"
        check = CHECKS.get(f["check"])
        title = f' title="{escape(check.title)}"' if check else ""
        rows.append(
            f'<tr class="{escape(f["severity"])}">'
            f'<td data-sort="{_SEVERITY_RANK.get(f["severity"], 3)}"><span class="sev {escape(f["severity"])}">'
            f'{escape(f["severity"])}</span></td>'
            f'<td data-sort="{place.get(f["stage"], 99)}">{escape(f["stage"])}</td>'
            f'<td{title}><code>{escape(f["check"])}</code></td><td>{escape(where)}</td>'
            f'<td class="num" data-sort="{f["count"]}">{f["count"]:,}</td>'
            f'<td class="lines" data-sort="{f["lines"][0] if f["lines"] else 0}">{lines}</td>'
            f'<td class="msg">{message}</td></tr>')
    header = "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
    table = (f'<table class="sortable" id="findings-table"><thead><tr>{header}</tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>') if rows else "<p>No findings.</p>"
    hint = "<p class=note>Click a column to sort. Line numbers are the source file's (header = line 1).</p>"
    return f'<section id="findings"><h2>Findings</h2><p>{chips}</p>{hint if rows else ""}{table}</section>'


def _attrition(report: Report) -> str:
    attrition = report.attrition or {}
    ledger = attrition.get("LABEVENTS")
    steps = attrition.get("steps") or []
    if not ledger:
        return ""
    equation = (f'<p class="ledger">LABEVENTS rows: read {ledger["read"]:,} = kept {ledger["kept"]:,} + '
                f'quarantined {ledger["quarantined"]:,} + deduplicated {ledger["deduplicated"]:,}</p>')
    stopped = (f'<p class="note">The run stopped at stage <b>{escape(str(attrition["stopped_at"]))}</b>; '
               "later stages did not run.</p>") if attrition.get("stopped_at") else ""
    funnel = [s for s in steps if s["table"] == "LABEVENTS" and s["rows_in"] != s["rows_out"]]
    chart = page.figure("funnel", "LABEVENTS rows after each step that removed or merged rows",
                        lambda: _funnel_chart(ledger["read"], funnel, report.stages)) if funnel else ""
    table = page.table(["table", "stage", "step", "rows in", "rows out", "quarantined", "merged", "clipped"],
                       [[s["table"], s["stage"], s["step"], page.n(s["rows_in"]), page.n(s["rows_out"]),
                         page.n(s["quarantined"]), page.n(s["merged"]), page.n(s["clipped"])] for s in steps],
                       numeric={3, 4, 5, 6, 7}, sortable=True)
    return (f'<section id="attrition"><h2>Attrition</h2>{equation}{_admissions(attrition.get("ADMISSIONS"))}'
            f'{stopped}{chart}{table}</section>')


def _admissions(ledger: dict | None) -> str:
    """The ADMISSIONS ledger: read = in graphs + dropped, per split, with the reason of every drop."""
    if not ledger:
        return ""
    reasons = list(ledger["dropped_by"])
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


def _stage_sections(validation: Any, report: Report, config: Config, *, engine: Any) -> list[str]:
    """The sections the stages draw of themselves (their ``sections`` hook), in flow order."""
    prepared = validation.prepared
    names = item_names(prepared.labitems)
    return [section for stage in prepared.order.stages if stage.sections is not None
            for section in stage.sections(stage.shown(config, tables=validation.tables, prepared=prepared,
                                                      report=report, engine=engine, names=names))]


def _split_sizes(part: pd.DataFrame) -> pd.DataFrame:
    """Per split: the part's admissions with edges, and its edges."""
    return part.groupby("SPLIT")["HADM_ID"].agg(["nunique", "size"]).reindex(_SPLITS, fill_value=0)


def _splits(prepared: Any, graphs: list[dict], *, engine: Any = PANDAS) -> str:
    splits = getattr(prepared, "splits", None)
    if splits is None:
        return ""
    edges = getattr(prepared, "edges", None)
    per_split = None  # per split: admissions with edges, edges (added up over parts: they share no admission)
    if edges is not None:
        per_split = sum(engine.per_part(_split_sizes, edges, columns=["SPLIT", "HADM_ID"]))
    rows = []
    for name in _SPLITS:
        part = splits[splits["SPLIT"] == name]
        row = [name, page.n(len(part)), page.n(int(per_split.loc[name, "nunique"])) if per_split is not None else "-",
               page.n(part["GROUP"].nunique() if "GROUP" in part else len(part)),
               page.n(int(per_split.loc[name, "size"])) if per_split is not None else "-"]
        if graphs:
            row.append(page.n(sum(g["split"] == name for g in graphs)))
        rows.append(row)
    head = ["split", "admissions", "in graphs", "patients", "lab edges"] + (["graphs"] if graphs else [])
    return (f'<section id="splits"><h2>Split sizes</h2>'
            f'{page.table(head, rows, numeric=set(range(1, len(head))))}</section>')


def _graphs(graphs: list[dict], config: Config, *, written: bool) -> str:
    if not graphs:
        return ('<section id="graphs"><h2>Graphs</h2><p>No graphs were built: the data has errors, fix them '
                "first.</p></section>")
    mb = 2 ** 20
    rows = [[g["split"], str(g["batch"]), page.n(g["admissions"]), page.n(g["labitems"]), page.n(g["edges"]),
             f'{g["memory"]["tensors"] / mb:.2f}', f'{g["memory"]["activations"] / mb:.2f}',
             f'{g["memory"]["total"] / mb:.2f}'] for g in graphs]
    table = page.table(["split", "batch", "admission nodes", "labitem nodes", "did edges", "tensors MB",
                    f"activations MB (hidden {config.graph.hidden}, {config.graph.layers} layers)", "total MB"],
                   rows, numeric={1, 2, 3, 4, 5, 6, 7}, sortable=True)
    largest = max(graphs, key=lambda g: g["memory"]["total"])
    note = (f'<p>Largest batch: {escape(largest["split"])}/batch {largest["batch"]} at '
            f'{largest["memory"]["total"] / mb:.2f} MB; budget {config.graph.memory_budget_mb:g} MB.'
            + ("" if written else " Not written: the build has errors.") + "</p>")
    chart = page.figure("graph-sizes", "did edges per graph, by split", lambda: _graph_chart(graphs))
    return f'<section id="graphs"><h2>Graphs</h2>{note}{chart}{table}</section>'


# -- charts (matplotlib, no pyplot: no global state, no GUI backend; pipeline.page draws them) ------
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


def _graph_chart(graphs: list[dict]):
    import matplotlib

    with matplotlib.rc_context(page.RC):
        figure = page.new_figure(8, 2.6)
        ax = figure.add_subplot()
        colours = {"train": "#1f77b4", "val": "#ff7f0e", "test": "#2ca02c"}
        x = np.arange(len(graphs))
        ax.bar(x, [g["edges"] for g in graphs], color=[colours.get(g["split"], "#999999") for g in graphs])
        ax.set_xticks(x, [f'{g["split"]}/{g["batch"]}' for g in graphs], rotation=45 if len(graphs) > 8 else 0,
                      ha="right" if len(graphs) > 8 else "center")
        ax.set_ylabel("did edges")
        return figure


def _version() -> str:
    try:
        return metadata.version("badpoints")
    except metadata.PackageNotFoundError:
        return "unknown"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 24px 48px;color:#222;background:#fff}
h1{font-size:22px;margin:24px 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:8px 0;min-width:50%;font-size:13px}#findings-table{width:100%}
th,td{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6;position:sticky;top:0;white-space:nowrap}table.sortable th{cursor:pointer;user-select:none}
table.sortable th:after{content:" \\2195";color:#aaa}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.lines{max-width:220px;font-variant-numeric:tabular-nums}td.msg{max-width:520px}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
.status{font-weight:600;padding:2px 10px;border-radius:10px;color:#fff}
.status.ok{background:#2e7d32}.status.warnings{background:#b26a00}.status.errors{background:#c62828}
.sev{font-weight:600;font-size:12px}.sev.error{color:#c62828}.sev.warning{color:#b26a00}.sev.info{color:#1565c0}
tr.error td{background:#fff5f5}
.chip{display:inline-block;border:2px solid #999;border-radius:10px;padding:0 8px;margin:2px 4px 2px 0;
font-size:12px}
.note{color:#666;font-size:12px}.more{color:#888}.values{color:#6a1b9a}
.ledger{font-weight:600}
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
