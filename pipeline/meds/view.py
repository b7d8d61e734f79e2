"""How the MEDS stage shows (its report hooks): the terminal summary's lines and the HTML report's section of a MEDS
run's ledgers (and ``--compare``'s), drawn with :mod:`pipeline.reporting.page` as the rest of the page."""

from __future__ import annotations

from html import escape

from pipeline.kernel.stage import Shown
from pipeline.reporting import page


def summary(shown: Shown) -> list[tuple[str, str]]:
    """The terminal summary's lines: rows, shards and subjects per split (of a folder normalization wrote, said);
    with ``--compare``, rows and subjects in -> out per split, and the codes dropped."""
    attrition = shown.report.attrition or {}
    read, compared = attrition.get("MEDS"), attrition.get("MEDS compare")
    if not read:
        return []
    text = " · ".join(f"{name} {s['rows']:,} rows in {s['shards']} shard(s), {s['subjects']:,} subjects"
                      for name, s in read["splits"].items())
    normalized = getattr(shown.prepared, "normalized", False)
    lines = [("MEDS (normalized: integer codes, z)" if normalized else "MEDS", f"read {read['rows']:,} rows: {text}")]
    if compared:
        text = " · ".join(f"{split} {s['rows_before']:,} -> {s['rows_after']:,} rows, {s['subjects_before']:,} -> "
                          f"{s['subjects_after']:,} subjects" for split, s in compared["splits"].items())
        dropped = compared["codes_dropped"]
        gone = f"; {len(dropped)} code(s) dropped ({sum(dropped.values()):,} rows)" if dropped else ""
        left_out = compared.get("shards_left_out")
        refused = f"; refused, left out: {', '.join(left_out)}" if left_out else ""
        lines.append(("MEDS compare", f"{text}{gone}{refused}"))
    return lines


def ledgers(shown: Shown) -> list[str]:
    """A MEDS run's ledgers: per split its shards, rows and subjects; with ``--compare``, rows and subjects before
    and after the stage per split, and the codes it took out."""
    attrition = shown.report.attrition or {}
    read, compared = attrition.get("MEDS"), attrition.get("MEDS compare")
    if not read:
        return []
    rows = [[split, page.n(e["shards"]), page.n(e["rows"]), page.n(e["subjects"])] for split, e in read["splits"].items()]
    body = (f'<p class="ledger">MEDS rows read: {read["rows"]:,}</p>'
            + page.table(["split", "shards", "rows", "subjects"], rows, numeric={1, 2, 3}))
    if compared:
        before, after = compared["rows"]["before"], compared["rows"]["after"]
        stages = ", ".join(compared["stages"]) or "none marked in .logs/"
        splits = [[split, page.n(e["rows_before"]), page.n(e["rows_after"]), page.n(e["subjects_before"]),
                   page.n(e["subjects_after"])] for split, e in compared["splits"].items()]
        dropped = [[code, page.n(n)] for code, n in sorted(compared["codes_dropped"].items(), key=lambda kv: -kv[1])]
        left_out = compared.get("shards_left_out")
        refused = f'; refused, left out: {escape(", ".join(left_out))}' if left_out else ""
        body += (f'<h3>Compared with {escape(compared["before"])}</h3><p class="ledger">rows {before:,} &rarr; '
                 f'{after:,} (stages run: {escape(stages)}){refused}</p>'
                 + page.table(["split", "rows before", "rows after", "subjects before", "subjects after"], splits,
                              numeric={1, 2, 3, 4})
                 + (page.details(f"codes with rows before and none after ({len(dropped)})",
                                 page.table(["code", "rows before"], dropped, numeric={1}, sortable=True))
                    if dropped else ""))
    return [f'<section id="attrition"><h2>MEDS rows</h2>{body}</section>']
