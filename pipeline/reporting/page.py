"""What every part of the HTML report is drawn with: escaped tables, and matplotlib figures as inline SVG that give
the same bytes for the same data (no pyplot, no time stamps, ids from a fixed hash salt). The report's page
(``pipeline.reporting.html``) and the sections a stage draws of itself (a :class:`pipeline.kernel.stage.Stage`'s ``sections``) use it.
"""

from __future__ import annotations

import io
import re
from html import escape
from typing import Any, Iterable

import numpy as np


def figure(ident: str, caption: str, draw) -> str:
    """The figure ``draw()`` makes, as inline SVG under the id ``fig-IDENT``, with its caption."""
    drawn = svg(draw(), ident)
    return f'<figure id="fig-{escape(ident)}">{drawn}<figcaption>{escape(caption)}</figcaption></figure>'


RC = {"svg.hashsalt": "badpoints", "svg.fonttype": "none", "text.parse_math": False, "font.size": 9,
      "axes.spines.top": False, "axes.spines.right": False}
"""matplotlib settings of every chart: the same bytes for the same data, text as text."""


def new_figure(width: float, height: float):
    """A figure of its own (no pyplot: no global state, no GUI backend)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def svg(figure, ident: str) -> str:
    """The figure as inline SVG: no XML prolog, no metadata, ids prefixed so figures do not clash."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context(RC):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\bid="([^"]+)"', rf'id="{ident}-\1"', text)
    text = re.sub(r'(url\(#|href="#)([^")]+)', rf"\1{ident}-\2", text)
    return text.replace("<svg ", f'<svg role="img" aria-label="{escape(ident)}" ', 1)


def fewer(values: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` of ``values``, spread evenly over their sorted order (the smallest and largest kept)."""
    ordered = np.sort(values)
    if len(ordered) <= most:
        return ordered
    return ordered[np.unique(np.linspace(0, len(ordered) - 1, most).round().astype("int64"))]


def n(value: Any) -> str:
    return f"{int(value):,}"


SHORT = 300
"""How many characters of a long text a cell shows; the rest opens on a click (:func:`clipped`)."""


def clipped(text: str, *, limit: int = SHORT) -> str:
    """``text`` escaped, its first ``limit`` or so characters shown (cut at a space) and the rest in a nested
    ``<details>`` whose box scrolls: a finding that lists 20 items is a few lines, never a cell 80 lines tall."""
    if len(text) <= limit * 1.2:  # a short rest is not worth a click
        return escape(text)
    cut = text.rfind(" ", limit // 2, limit)
    cut = cut if cut > 0 else limit
    rest = text[cut:]
    return (f'{escape(text[:cut])}<details class="more"><summary>&hellip; {len(rest):,} more characters</summary>'
            f'<div class="rest">{escape(rest)}</div></details>')


def breakable(text: str) -> str:
    """``text`` escaped, with a break allowed after each ``.`` and ``_`` (``LABEVENTS.<wbr>CHARTTIME``,
    ``hadm_<wbr>id_<wbr>missing``), so a narrow column breaks a name where it reads well."""
    return re.sub(r"([._])", r"\1<wbr>", escape(text))


def details(summary: str, body: str, *, ident: str | None = None, opened: bool = False) -> str:
    """``body`` under a ``<details>`` whose ``summary`` (HTML, escaped by the caller) shows; collapsed unless
    ``opened``."""
    ident = f' id="{escape(ident)}"' if ident else ""
    return f'<details{ident}{" open" if opened else ""}><summary>{summary}</summary>{body}</details>'


def table(head: list[str], rows: Iterable[list[str]], *, numeric: set[int] = frozenset(),
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
