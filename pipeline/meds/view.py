"""The HTML report's sections of MEDS: a MEDS run's ledgers (and ``--compare``'s), and the shards of a build written as
MEDS (``--to meds``); drawn with :mod:`pipeline.reporting.page` as the rest of the page."""

from __future__ import annotations

from html import escape

from pipeline.reporting import page
from pipeline.reporting.report import Report


def ledgers(report: Report) -> str:
    """A MEDS run's ledgers: per split its shards, rows and subjects; with ``--compare``, rows and subjects before
    and after the stage per split, and the codes it took out."""
    attrition = report.attrition or {}
    read, compared = attrition.get("MEDS"), attrition.get("MEDS compare")
    if not read:
        return ""
    rows = [[split, page.n(e["shards"]), page.n(e["rows"]), page.n(e["subjects"])] for split, e in read["splits"].items()]
    body = (f'<p class="ledger">MEDS rows read: {read["rows"]:,}</p>'
            + page.table(["split", "shards", "rows", "subjects"], rows, numeric={1, 2, 3}))
    if compared:
        before, after = compared["rows"]["before"], compared["rows"]["after"]
        stages = ", ".join(compared["stages"]) or "none marked in .logs/"
        splits = [[split, page.n(e["rows_before"]), page.n(e["rows_after"]), page.n(e["subjects_before"]),
                   page.n(e["subjects_after"])] for split, e in compared["splits"].items()]
        dropped = [[code, page.n(n)] for code, n in sorted(compared["codes_dropped"].items(), key=lambda kv: -kv[1])]
        body += (f'<h3>Compared with {escape(compared["before"])}</h3><p class="ledger">rows {before:,} &rarr; '
                 f'{after:,} (stages run: {escape(stages)})</p>'
                 + page.table(["split", "rows before", "rows after", "subjects before", "subjects after"], splits,
                              numeric={1, 2, 3, 4})
                 + (page.details(f"codes with rows before and none after ({len(dropped)})",
                                 page.table(["code", "rows before"], dropped, numeric={1}, sortable=True))
                    if dropped else ""))
    return f'<section id="attrition"><h2>MEDS rows</h2>{body}</section>'


def shards(shards: list[dict]) -> str:
    """A build written as MEDS (``--to meds``): its shards, with the admissions and lab events each holds."""
    rows = [[s["path"], s["split"], page.n(s["admissions"]), page.n(s["edges"])] for s in shards]
    table = page.table(["shard", "split", "admissions", "lab events"], rows, numeric={2, 3}, sortable=True)
    return (f'<section id="graphs"><h2>MEDS shards</h2><p>{len(shards)} shards; metadata/codes.parquet holds each '
            f'code\'s values/mean and values/std from the fit.</p>{table}</section>')
