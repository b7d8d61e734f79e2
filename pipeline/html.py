"""The HTML report: one self-contained page that says in a minute what is wrong with the data and where.

Everything is inline: CSS, a tiny sorting script, and matplotlib figures as SVG;
a Content-Security-Policy forbids the page any network request. Every text that
comes from the data or the report is escaped, and raw values appear only when
the run was asked for them (``--show-values``). The same input gives the same
bytes: no time stamps, SVG ids from a fixed hash salt, no matplotlib metadata.

Sections: status and findings, attrition funnel, z-score distributions of the
most extreme items, constant / single-observation / fallback / unseen items,
missingness and fills, split sizes, and for builds the graphs and their memory.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from pipeline.config import Config
from pipeline.engines import PANDAS
from pipeline.quarantine import LineMask
from pipeline.report import Report, format_items, item_names, write_atomic
from pipeline.stages.scale import zscores
from schemas.checks import CHECKS

TOP_ITEMS = 8
"""How many items the z-score chart shows (those with the largest |z|)."""

DROPPED_OPEN = 20
"""The list of admissions in no graph shows open up to this many (longer, it opens on a click; all are listed)."""

FLAGGED_POINTS = 200
"""At most this many flagged points are drawn per item (the most extreme ones); the table counts all."""

FLIERS = 400
"""At most this many outliers are drawn per item, evenly spread over their order (MIMIC-IV's items have hundreds of
thousands: drawn all, they made a 44 MB report); the box and whiskers are computed from every row."""

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
        write_atomic(path, self.text.encode("utf-8"))

    def _repr_html_(self) -> str:
        # An iframe keeps the page's CSS and script away from the notebook's own.
        return (f'<iframe srcdoc="{escape(self.text, quote=True)}" title="badpoints report" '
                'style="width:100%;height:900px;border:1px solid #ddd" sandbox="allow-scripts"></iframe>')

    def __str__(self) -> str:
        return self.text


def html_report(result: Any, config: Config | None = None, *, show_values: bool = False) -> HtmlReport:
    """The report of a :class:`pipeline.flow.Validation` or :class:`pipeline.flow.Build`, for a notebook."""
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
    tables, prepared = validation.tables, validation.prepared
    graphs = list(getattr(result, "graphs", ()) or ())
    kind = "build" if validation is not result else "validate"
    # Two passes over LABEVENTS (part by part when it is held in parts): per-item summaries, then the z of the
    # items drawn.
    summary = z_summary(tables.labevents, prepared, config, engine=engine)
    top = extreme_items(summary)
    drawn = drawn_z(tables.labevents, prepared, config, items=top.index, engine=engine) if len(top) else {}
    names = item_names(getattr(prepared, "labitems", None))  # '50963 NTproBNP (Blood)'
    sections = [
        _header(report, kind, getattr(validation, "cached", False)),
        _findings(report, show_values=show_values),
        _attrition(report),
        _zscores(drawn, top, config, names),
        _items(prepared, summary, names, config),
        _missingness(tables, report, prepared, config, engine=engine),
        _splits(prepared, graphs, engine=engine),
    ]
    if kind == "build":
        sections.append(_graphs(graphs, config, written=getattr(result, "out_dir", None) is not None))
    body = "\n".join(s for s in sections if s)
    return _PAGE.format(title=f"badpoints {kind}: {escape(report.status)}", css=_CSS, script=_SCRIPT, body=body,
                        version=escape(_version()))


# -- data ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrawnZ:
    """What the chart draws of an item: its finite z sorted (the box, its whiskers and outliers depend only on
    the values), and those above the warn bound in source line order (the flagged points, the most extreme first,
    ties in line order), with their lines. 8 bytes a row, where a frame of the rows took 25 and more."""

    values: np.ndarray
    beyond: np.ndarray
    lines: np.ndarray

    @staticmethod
    def combine(parts: list["DrawnZ"]) -> "DrawnZ":
        """One item's z from its parts' (any order of parts: the values are sorted, the flagged points put in line
        order)."""
        lines = np.concatenate([p.lines for p in parts])
        order = np.argsort(lines, kind="stable")
        return DrawnZ(values=np.sort(np.concatenate([p.values for p in parts])),
                      beyond=np.concatenate([p.beyond for p in parts])[order], lines=lines[order])


def z_scores(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, policy: Any, warn_bound: float,
             items: Iterable[int] | None = None) -> pd.DataFrame:
    """The z of each scaled lab row of a part of LABEVENTS (index = source line), computed from the fitted stats: the
    rows the scale stage saw (LABEVENTS less what clean quarantined: ``cleaned``), so the chart exists even when the
    scale stage stopped the run on an error bound; of ``items`` only, when given. ``seen`` is False for items unseen
    in train (z = 0)."""
    chosen = ~cleaned.of(part.index.to_numpy("int64")) & part["VALUENUM"].notna().to_numpy() \
        & part["ITEMID"].notna().to_numpy()
    if items is not None:
        chosen &= part["ITEMID"].isin(list(items)).to_numpy()
    rows = part.loc[chosen, ["ITEMID", "VALUENUM"]].astype({"ITEMID": "int64", "VALUENUM": "float64"})
    z = zscores(rows, stats, policy=policy, warn_bound=warn_bound, strict=False)
    return pd.DataFrame({"ITEMID": rows["ITEMID"], "Z": z.astype("float64"), "seen": rows["ITEMID"].isin(stats.items_)})


def _z_sources(labevents: Any, prepared: Any) -> tuple | None:
    """What the z passes need: the fitted stats and the lines clean quarantined (None: no z to draw)."""
    stats = getattr(prepared, "stats", None)
    if labevents is None or stats is None or "VALUENUM" not in labevents.columns:
        return None
    return stats, prepared.quarantine.taken("LABEVENTS", "clean")


def _part_summary(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, policy: Any, warn_bound: float
                  ) -> pd.DataFrame:
    """Per ITEMID of one part: rows, non-finite z, max finite |z|, rows above the bound or not finite, seen."""
    z = z_scores(part, stats, cleaned, policy=policy, warn_bound=warn_bound)
    absolute = z["Z"].abs()
    finite = np.isfinite(z["Z"])
    frame = pd.DataFrame({"ITEMID": z["ITEMID"], "abs": absolute.where(finite),
                          "nonfinite": (~finite).astype("int64"),
                          "flagged": ((absolute > warn_bound) | ~finite).astype("int64"), "seen": z["seen"]})
    return frame.groupby("ITEMID", sort=True).agg(
        rows=("abs", "size"), nonfinite=("nonfinite", "sum"), max_abs=("abs", "max"), flagged=("flagged", "sum"),
        seen=("seen", "any"))


def z_summary(labevents: Any, prepared: Any, config: Config, *, engine: Any = PANDAS) -> pd.DataFrame:
    """Per ITEMID (sorted): rows, non-finite z, max finite |z| (0 without one), rows above the bound or not finite,
    and whether the item was seen in train; summed up part by part (:func:`z_scores`), where the parts are."""
    sources = _z_sources(labevents, prepared)
    summaries = [] if sources is None else list(engine.per_part(
        _part_summary, labevents, *sources, columns=["ITEMID", "VALUENUM"], policy=config.scale.policy,
        warn_bound=config.scale.warn_bound))
    if not summaries:
        return pd.DataFrame({"rows": [], "nonfinite": [], "max_abs": [], "flagged": [], "seen": []},
                            index=pd.Index([], name="ITEMID", dtype="int64")).astype(
            {"rows": "int64", "nonfinite": "int64", "max_abs": "float64", "flagged": "int64", "seen": "bool"})
    summary = pd.concat(summaries).groupby(level="ITEMID", sort=True).agg(
        {"rows": "sum", "nonfinite": "sum", "max_abs": "max", "flagged": "sum", "seen": "any"})
    return summary.assign(max_abs=summary["max_abs"].fillna(0.0))


def _part_drawn(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, policy: Any, warn_bound: float,
                items: list[int]) -> dict[int, DrawnZ]:
    """The drawn items' z of one part (:class:`DrawnZ`), by ITEMID."""
    z = z_scores(part, stats, cleaned, policy=policy, warn_bound=warn_bound, items=items)
    z = z[z["seen"] & np.isfinite(z["Z"])]
    order = np.argsort(z["ITEMID"].to_numpy("int64"), kind="stable")  # by item, each in the part's row order
    item, values, lines = (z["ITEMID"].to_numpy("int64")[order], z["Z"].to_numpy("float64")[order],
                           z.index.to_numpy("int64")[order])
    starts = np.flatnonzero(np.r_[True, item[1:] != item[:-1]]) if len(item) else np.array([], dtype="int64")
    beyond = np.abs(values) > warn_bound
    return {int(item[start]): DrawnZ(values=np.sort(values[start:stop]), beyond=values[start:stop][beyond[start:stop]],
                                     lines=lines[start:stop][beyond[start:stop]])
            for start, stop in zip(starts, [*starts[1:], len(item)])}


def drawn_z(labevents: Any, prepared: Any, config: Config, *, items: Iterable[int], engine: Any = PANDAS
            ) -> dict[int, DrawnZ]:
    """The z of ``items`` (:class:`DrawnZ`), by ITEMID, gathered part by part from where the parts are."""
    sources = _z_sources(labevents, prepared)
    found: dict[int, list[DrawnZ]] = {}
    if sources is not None:
        for drawn in engine.per_part(_part_drawn, labevents, *sources, columns=["ITEMID", "VALUENUM"],
                           policy=config.scale.policy, warn_bound=config.scale.warn_bound,
                           items=[int(item) for item in items]):
            for item, part in drawn.items():
                found.setdefault(item, []).append(part)
    return {item: DrawnZ.combine(parts) for item, parts in sorted(found.items())}


def extreme_items(summary: pd.DataFrame, top: int = TOP_ITEMS) -> pd.DataFrame:
    """Per item seen in train (from :func:`z_summary`): rows, non-finite z, max |z| and rows above the bound; the
    ``top`` largest."""
    seen = summary.loc[summary["seen"], ["rows", "nonfinite", "max_abs", "flagged"]]
    # Non-finite first, then by max |z|; ITEMID breaks ties so the order never depends on the input's.
    seen = seen.assign(_nonfinite=seen["nonfinite"] > 0, _item=seen.index)
    seen = seen.sort_values(["_nonfinite", "max_abs", "_item"], ascending=[False, False, True], kind="stable")
    return seen.drop(columns=["_nonfinite", "_item"]).head(top)


# -- sections -----------------------------------------------------------------------------------
def _header(report: Report, kind: str, cached: bool) -> str:
    counts = {s: sum(f.severity == s for f in report.findings) for s in ("error", "warning", "info")}
    inputs = _table(["table", "file", "rows", "sha256"],
                    [[i.table, i.path, _n(i.rows), i.sha256[:16]] for i in report.inputs],
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
    chart = _figure("funnel", "LABEVENTS rows after each step that removed or merged rows",
                    lambda: _funnel_chart(ledger["read"], funnel, report.stages)) if funnel else ""
    table = _table(["table", "stage", "step", "rows in", "rows out", "quarantined", "merged", "clipped"],
                   [[s["table"], s["stage"], s["step"], _n(s["rows_in"]), _n(s["rows_out"]), _n(s["quarantined"]),
                     _n(s["merged"]), _n(s["clipped"])] for s in steps], numeric={3, 4, 5, 6, 7}, sortable=True)
    return (f'<section id="attrition"><h2>Attrition</h2>{equation}{_admissions(attrition.get("ADMISSIONS"))}'
            f'{stopped}{chart}{table}</section>')


def _admissions(ledger: dict | None) -> str:
    """The ADMISSIONS ledger: read = in graphs + dropped, per split, with the reason of every drop."""
    if not ledger:
        return ""
    reasons = list(ledger["dropped_by"])
    equation = (f'<p class="ledger">ADMISSIONS: read {ledger["read"]:,} = in graphs {ledger["in_graphs"]:,} + '
                f'dropped {ledger["dropped"]:,}</p>')
    rows = [[name, _n(split["read"]), _n(split["in_graphs"]), _n(split["dropped"]),
             *[_n(split["dropped_by"][reason]) for reason in reasons]]
            for name, split in [*ledger["splits"].items(), ("all", ledger)]]
    head = ["split", "read", "in graphs", "dropped", *[r.removeprefix("admission_").replace("_", " ") for r in reasons]]
    stages = ledger.get("labs_quarantined_at") or {}
    note = ("<p class=note>Admissions whose lab rows were all quarantined lost their last rows at: "
            + escape(", ".join(f"{stage} {n}" for stage, n in stages.items())) + ".</p>") if stages else ""
    return equation + _table(head, rows, numeric=set(range(1, len(head)))) + note + _dropped(ledger)


def _dropped(ledger: dict) -> str:
    """Every admission in no graph, by source line: its HADM_ID, split, reason and the stage that took its last lab
    rows (open when it is a short list)."""
    dropped = ledger.get("dropped_admissions") or []
    if not dropped:
        return ""
    rows = [[_n(d["line"]), "-" if d["HADM_ID"] is None else str(d["HADM_ID"]), d["split"],
             d["reason"].removeprefix("admission_").replace("_", " "), d["stage"] or ""] for d in dropped]
    table = _table(["ADMISSIONS line", "HADM_ID", "split", "reason", "last lab rows taken at"], rows,
                   numeric={0, 1}, sortable=True)
    noun = "admission" if len(dropped) == 1 else "admissions"
    return (f'<details id="dropped-admissions"{" open" if len(dropped) <= DROPPED_OPEN else ""}><summary>'
            f"{len(dropped):,} {noun} in no graph, every one named</summary>{table}</details>")


def _zscores(drawn: dict[int, DrawnZ], top: pd.DataFrame, config: Config, names: dict[int, str]) -> str:
    warn, error = config.scale.warn_bound, config.scale.error_bound
    if top.empty:
        return ""
    chart = _figure("zscores", f"z-scores of the {len(top)} items with the largest |z|; dashed: |z| = {warn:g} "
                               f"(warn bound); red points: rows above it",
                    lambda: _z_chart(drawn, top, warn, error))
    table = _table(["ITEMID", "rows", "max |z|", "rows above the warn bound", "non-finite z"],
                   [[format_items([r.Index], names=names), _n(r.rows), f"{r.max_abs:.3g}", _n(r.flagged),
                     _n(r.nonfinite)]
                    for r in top.itertuples()], numeric={1, 2, 3, 4})
    return (f'<section id="zscores"><h2>z-score distributions</h2><p>Per ITEMID, z from the training stats, on '
            f"the rows the scale stage saw. Bounds: warning above {warn:g}, error above {error:g}.</p>"
            f"{chart}{table}</section>")


def _items(prepared: Any, summary: pd.DataFrame, names: dict[int, str], config: Config) -> str:
    stats = getattr(prepared, "stats", None)
    if stats is None:
        return ""
    counts = dict(zip(stats.items_, stats.count_))
    single = [item for item, count in counts.items() if count == 1]
    unseen = summary.loc[~summary["seen"], "rows"]
    groups = [
        ("constant", "every training value equal: z = 0 on it, other values' z bounded by [scale] constant_bound",
         stats.constant_items_),
        ("single-observation", "one training observation", single),
        ("fallback", "fewer than [scale] min_rows normal training rows (or none with spread): fitted on all "
                     "their training rows", stats.fallback_items_),
        ("unseen", "numeric items not in the training split: z = 0", list(unseen.index)),
    ]
    rows = []
    for name, what, items in groups:
        if name == "unseen":
            listed = format_items(unseen, names=names, limit=config.report.max_lines)
        else:
            listed = format_items({item: counts.get(item, 0) for item in items}, names=names,
                                  limit=config.report.max_lines, unit="train row")
        rows.append([name, str(len(items)), listed or "none", what])
    table = _table(["items", "count", "ITEMID", "meaning"], rows, numeric={1})
    return f'<section id="items"><h2>Constant, single-observation, fallback and unseen items</h2>{table}</section>'


def _null_counts(part: pd.DataFrame) -> pd.Series:
    return part.isna().sum()


def _missingness(tables: Any, report: Report, prepared: Any, config: Config, *, engine: Any = PANDAS) -> str:
    parts = []
    rows = []
    for name in ("admissions", "labitems", "labevents"):
        frame = getattr(tables, name, None)
        if frame is None:
            continue
        total = len(frame)
        counts = sum(engine.per_part(_null_counts, frame))
        for column in frame.columns:
            if column == "REJECT":
                continue
            missing = int(counts[column])
            rows.append([name.upper().replace("LABITEMS", "D_LABITEMS"), column, _n(total), _n(missing),
                         f"{missing / total:.1%}" if total else "-"])
    if rows:
        parts.append("<h3>Missing values per column</h3><p class=note>After the raw checks: a value that failed "
                     "an error check is counted as missing.</p>")
        parts.append(_table(["table", "column", "rows", "missing", "missing %"], rows, numeric={2, 3, 4},
                            sortable=True))
    filled = {f.column: f.count for f in report.findings if f.check == "filled"}
    fitted = dict(getattr(getattr(prepared, "fill_values", None), "values_", ()) or ())
    fills = [[column, policy.policy, f"{fitted[column]:.4g}" if column in fitted else "-",
              "yes" if policy.indicator else "no", _n(filled.get(column, 0))]
             for column, policy in sorted(config.fill.items())]
    if fills and getattr(prepared, "fill_values", None) is not None:
        parts.append("<h3>Fills per tensor column</h3>")
        parts.append(_table(["column", "policy", "value", "indicator", "values filled"], fills, numeric={4}))
    if not parts:
        return ""
    return f'<section id="missingness"><h2>Missingness and fills</h2>{"".join(parts)}</section>'


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
        row = [name, _n(len(part)), _n(int(per_split.loc[name, "nunique"])) if per_split is not None else "-",
               _n(part["GROUP"].nunique() if "GROUP" in part else len(part)),
               _n(int(per_split.loc[name, "size"])) if per_split is not None else "-"]
        if graphs:
            row.append(_n(sum(g["split"] == name for g in graphs)))
        rows.append(row)
    head = ["split", "admissions", "in graphs", "patients", "lab edges"] + (["graphs"] if graphs else [])
    return (f'<section id="splits"><h2>Split sizes</h2>'
            f'{_table(head, rows, numeric=set(range(1, len(head))))}</section>')


def _graphs(graphs: list[dict], config: Config, *, written: bool) -> str:
    if not graphs:
        return ('<section id="graphs"><h2>Graphs</h2><p>No graphs were built: the data has errors, fix them '
                "first.</p></section>")
    mb = 2 ** 20
    rows = [[g["split"], str(g["batch"]), _n(g["admissions"]), _n(g["labitems"]), _n(g["edges"]),
             f'{g["memory"]["tensors"] / mb:.2f}', f'{g["memory"]["activations"] / mb:.2f}',
             f'{g["memory"]["total"] / mb:.2f}'] for g in graphs]
    table = _table(["split", "batch", "admission nodes", "labitem nodes", "did edges", "tensors MB",
                    f"activations MB (hidden {config.graph.hidden}, {config.graph.layers} layers)", "total MB"],
                   rows, numeric={1, 2, 3, 4, 5, 6, 7}, sortable=True)
    largest = max(graphs, key=lambda g: g["memory"]["total"])
    note = (f'<p>Largest batch: {escape(largest["split"])}/batch {largest["batch"]} at '
            f'{largest["memory"]["total"] / mb:.2f} MB; budget {config.graph.memory_budget_mb:g} MB.'
            + ("" if written else " Not written: the build has errors.") + "</p>")
    chart = _figure("graph-sizes", "did edges per graph, by split", lambda: _graph_chart(graphs))
    return f'<section id="graphs"><h2>Graphs</h2>{note}{chart}{table}</section>'


# -- charts (matplotlib, no pyplot: no global state, no GUI backend) -----------------------------
def _figure(ident: str, caption: str, draw) -> str:
    svg = _svg(draw(), ident)
    return f'<figure id="fig-{escape(ident)}">{svg}<figcaption>{escape(caption)}</figcaption></figure>'


_RC = {"svg.hashsalt": "badpoints", "svg.fonttype": "none", "text.parse_math": False, "font.size": 9,
       "axes.spines.top": False, "axes.spines.right": False}


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _svg(figure, ident: str) -> str:
    """The figure as inline SVG: no XML prolog, no metadata, ids prefixed so figures do not clash."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(_RC):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{ident}-\1"', svg)
    svg = re.sub(r'(url\(#|href="#)([^")]+)', rf"\1{ident}-\2", svg)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{escape(ident)}" ', 1)


def _funnel_chart(read: int, steps: list[dict], colour: dict[str, str]):
    import matplotlib

    with matplotlib.rc_context(_RC):
        labels = ["read"] + [f'{s["stage"]}: {s["step"]}' for s in steps]
        values = [read] + [s["rows_out"] for s in steps]
        colours = ["#7f7f7f"] + [colour.get(s["stage"], "#999999") for s in steps]
        figure = _new_figure(8, 0.45 * len(labels) + 0.9)
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


def _fewer(values: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` of ``values``, spread evenly over their sorted order (the smallest and largest kept)."""
    ordered = np.sort(values)
    if len(ordered) <= most:
        return ordered
    return ordered[np.unique(np.linspace(0, len(ordered) - 1, most).round().astype("int64"))]


def _z_chart(drawn: dict[int, DrawnZ], top: pd.DataFrame, warn: float, error: float):
    import matplotlib
    from matplotlib import cbook
    from matplotlib.ticker import FuncFormatter

    with matplotlib.rc_context(_RC):
        items = list(top.index)
        figure = _new_figure(8, 0.55 * len(items) + 1.1)
        ax = figure.add_subplot()
        positions = np.arange(len(items))[::-1]
        boxes, flagged_x, flagged_y = [], [], []
        for item, position in zip(items, positions):
            values = drawn[item].values if item in drawn else np.array([], dtype="float64")
            (box,) = cbook.boxplot_stats(values if len(values) else np.array([0.0]))
            box["fliers"] = _fewer(box["fliers"], FLIERS)  # the box from every row, a few of its outliers drawn
            boxes.append(box)
            beyond = drawn[item].beyond if item in drawn else values
            beyond = beyond[np.argsort(-np.abs(beyond), kind="stable")][:FLAGGED_POINTS]
            flagged_x.extend(beyond)
            flagged_y.extend([position] * len(beyond))
        ax.bxp(boxes, positions=positions, orientation="horizontal", widths=0.6, showfliers=True,
               flierprops={"marker": ".", "markersize": 3, "markeredgecolor": "#888888"},
               medianprops={"color": "#1f77b4"})
        if flagged_x:
            ax.scatter(flagged_x, flagged_y, marker="x", color="#d62728", s=22, zorder=3, label=f"|z| > {warn:g}")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        for bound in (-warn, warn):
            ax.axvline(bound, color="#ff7f0e", linestyle="--", linewidth=1)
        largest = float(top["max_abs"].max())
        if largest >= error / 10:
            for bound in (-error, error):
                ax.axvline(bound, color="#d62728", linestyle="-", linewidth=1)
        limit = max(largest, warn) * 2
        ax.set_xlim(-limit, limit)
        ax.set_yticks(positions, [f"ITEMID {item}" for item in items])
        ax.set_xlabel("z (symmetric log scale)")
        if flagged_x:
            ax.legend(loc="lower right", fontsize=8, frameon=False)
        return figure


def _graph_chart(graphs: list[dict]):
    import matplotlib

    with matplotlib.rc_context(_RC):
        figure = _new_figure(8, 2.6)
        ax = figure.add_subplot()
        colours = {"train": "#1f77b4", "val": "#ff7f0e", "test": "#2ca02c"}
        x = np.arange(len(graphs))
        ax.bar(x, [g["edges"] for g in graphs], color=[colours.get(g["split"], "#999999") for g in graphs])
        ax.set_xticks(x, [f'{g["split"]}/{g["batch"]}' for g in graphs], rotation=45 if len(graphs) > 8 else 0,
                      ha="right" if len(graphs) > 8 else "center")
        ax.set_ylabel("did edges")
        return figure


# -- helpers ------------------------------------------------------------------------------------
def _rows(count: int, word: str = "row") -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _n(value: Any) -> str:
    return f"{int(value):,}"


def _table(head: list[str], rows: Iterable[list[str]], *, numeric: set[int] = frozenset(),
           sortable: bool = False) -> str:
    """A table of escaped cells; ``numeric`` columns are right-aligned and sort by number."""
    header = "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
    body = []
    for row in rows:
        cells = []
        for n, cell in enumerate(row):
            if n in numeric:
                key = _sort_key(cell)
                cells.append(f'<td class="num" data-sort="{escape(key)}">{escape(cell)}</td>')
            else:
                cells.append(f"<td>{escape(cell)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _sort_key(cell: str) -> str:
    """The number in a cell ('1,234', '12.5%', '3.2e+04') for sorting; '0' when there is none."""
    text = re.sub(r"[,%\s]", "", cell)
    try:
        return repr(float(text))
    except ValueError:
        return "0"


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
