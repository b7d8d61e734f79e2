"""How the scale stage shows in the HTML report: the z-score distributions of the most extreme items (a box per
item from every row, the rows above the warn bound marked, each item named as D_LABITEMS names it), every item's
fitted stats and largest |z| in one sortable table, and its constant, rare, fallback and unseen
items. The z are computed from the raw LABEVENTS and the fitted stats, on the rows the stage saw, so the chart exists
even when the stage stopped the run on an error bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from pipeline.reporting import page
from pipeline.reporting.findings import format_items
from pipeline.kernel.quarantine import LineMask
from pipeline.kernel.stage import Shown
from pipeline.stages.scale.apply import scaled
from pipeline.stages.scale.fit import ZScoreStats, stats_table
from pipeline.stages.scale.options import Options

TOP_ITEMS = 8
"""How many items the z-score chart shows (those with the largest |z|); the item table below it lists them all."""

LABEL_CHARS = 48
"""An item's label on the chart (ITEMID and name) is cut to this many characters."""


FLAGGED_POINTS = 200
"""At most this many flagged points are drawn per item (the most extreme ones); the table counts all."""


FLIERS = 400
"""At most this many outliers are drawn per item, evenly spread over their order (MIMIC-IV's items have hundreds of
thousands: drawn all, they made a 44 MB report); the box and whiskers are computed from every row."""


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


def z_scores(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, warn_bound: float, error_bound: float = math.inf,
             items: Iterable[int] | None = None) -> pd.DataFrame:
    """The z of each scaled lab row of a part of LABEVENTS (index = source line), computed from the fitted stats: the
    rows the scale stage saw (LABEVENTS less what clean quarantined: ``cleaned``), so the chart exists even when the
    scale stage stopped the run on an error bound; of ``items`` only, when given. ``seen`` is False for items unseen
    in train (z = 0). ``beyond``: the z handed on is above ``warn_bound``, or the z before [scale] bound drew it
    in is above ``error_bound`` or not finite (what stops the stage)."""
    chosen = ~cleaned.of(part.index.to_numpy("int64")) & part["VALUENUM"].notna().to_numpy() \
        & part["ITEMID"].notna().to_numpy()
    if items is not None:
        chosen &= part["ITEMID"].isin(list(items)).to_numpy()
    rows = part.loc[chosen, ["ITEMID", "VALUENUM"]].astype({"ITEMID": "int64", "VALUENUM": "float64"})
    z, _, before = scaled(rows, stats, warn_bound=warn_bound, strict=False)
    beyond = (z.abs() > warn_bound) | (before.abs() > error_bound) | ~np.isfinite(before)
    return pd.DataFrame({"ITEMID": rows["ITEMID"], "Z": z.astype("float64"), "seen": rows["ITEMID"].isin(stats.items_),
                         "beyond": beyond.to_numpy(bool)}, index=rows.index)


def _z_sources(shown: Shown) -> tuple | None:
    """What the z passes need: the fitted stats and the lines clean quarantined (None: no z to draw)."""
    labevents, stats = shown.read.labevents, shown.state
    if labevents is None or stats is None or "VALUENUM" not in labevents.columns:
        return None
    return stats, shown.prepared.quarantine.taken("LABEVENTS", "clean")


def _part_summary(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, warn_bound: float,
                  error_bound: float = math.inf) -> pd.DataFrame:
    """Per ITEMID of one part: rows, non-finite z, max finite |z|, rows above the bound or not finite, seen."""
    z = z_scores(part, stats, cleaned, warn_bound=warn_bound, error_bound=error_bound)
    absolute = z["Z"].abs()
    finite = np.isfinite(z["Z"])
    frame = pd.DataFrame({"ITEMID": z["ITEMID"], "abs": absolute.where(finite),
                          "nonfinite": (~finite).astype("int64"),
                          "flagged": (z["beyond"] | ~finite).astype("int64"), "seen": z["seen"]})
    return frame.groupby("ITEMID", sort=True).agg(
        rows=("abs", "size"), nonfinite=("nonfinite", "sum"), max_abs=("abs", "max"), flagged=("flagged", "sum"),
        seen=("seen", "any"))


def z_summary(shown: Shown) -> pd.DataFrame:
    """Per ITEMID (sorted): rows, non-finite z, max finite |z| (0 without one), rows above the bound or not finite,
    and whether the item was seen in train; summed up part by part (:func:`z_scores`), where the parts are."""
    sources = _z_sources(shown)
    summaries = [] if sources is None else list(shown.engine.per_part(
        _part_summary, shown.read.labevents, *sources, columns=["ITEMID", "VALUENUM"],
        warn_bound=shown.options.warn_bound, error_bound=shown.options.error_bound))
    if not summaries:
        return pd.DataFrame({"rows": [], "nonfinite": [], "max_abs": [], "flagged": [], "seen": []},
                            index=pd.Index([], name="ITEMID", dtype="int64")).astype(
            {"rows": "int64", "nonfinite": "int64", "max_abs": "float64", "flagged": "int64", "seen": "bool"})
    summary = pd.concat(summaries).groupby(level="ITEMID", sort=True).agg(
        {"rows": "sum", "nonfinite": "sum", "max_abs": "max", "flagged": "sum", "seen": "any"})
    return summary.assign(max_abs=summary["max_abs"].fillna(0.0))


def _part_drawn(part: pd.DataFrame, stats: Any, cleaned: LineMask, *, warn_bound: float, items: list[int],
                error_bound: float = math.inf) -> dict[int, DrawnZ]:
    """The drawn items' z of one part (:class:`DrawnZ`), by ITEMID."""
    z = z_scores(part, stats, cleaned, warn_bound=warn_bound, error_bound=error_bound, items=items)
    z = z[z["seen"] & np.isfinite(z["Z"])]
    order = np.argsort(z["ITEMID"].to_numpy("int64"), kind="stable")  # by item, each in the part's row order
    item, values, lines = (z["ITEMID"].to_numpy("int64")[order], z["Z"].to_numpy("float64")[order],
                           z.index.to_numpy("int64")[order])
    starts = np.flatnonzero(np.r_[True, item[1:] != item[:-1]]) if len(item) else np.array([], dtype="int64")
    beyond = z["beyond"].to_numpy(bool)[order]
    return {int(item[start]): DrawnZ(values=np.sort(values[start:stop]), beyond=values[start:stop][beyond[start:stop]],
                                     lines=lines[start:stop][beyond[start:stop]])
            for start, stop in zip(starts, [*starts[1:], len(item)])}


def drawn_z(shown: Shown, items: Iterable[int]) -> dict[int, DrawnZ]:
    """The z of ``items`` (:class:`DrawnZ`), by ITEMID, gathered part by part from where the parts are."""
    sources = _z_sources(shown)
    found: dict[int, list[DrawnZ]] = {}
    if sources is not None:
        for drawn in shown.engine.per_part(_part_drawn, shown.read.labevents, *sources,
                                           columns=["ITEMID", "VALUENUM"],
                                           error_bound=shown.options.error_bound, warn_bound=shown.options.warn_bound, items=[int(item) for item in items]):
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


def _zscores(drawn: dict[int, DrawnZ], top: pd.DataFrame, stats: ZScoreStats, summary: pd.DataFrame,
             options: Options, names: Mapping[int, str]) -> str:
    warn, error = options.warn_bound, options.error_bound
    if top.empty:
        return ""
    chart = page.figure("zscores", f"z-scores of the {len(top)} items with the largest |z|; dashed: |z| = {warn:g} "
                               f"(warn bound); red points: rows above it",
                        lambda: _z_chart(drawn, top, warn, error, names=names))
    return (f'<section id="zscores"><h2>z-score distributions</h2><p>Per item, z from the training stats, on '
            f"the rows the scale stage saw. Bounds: warning above {warn:g}, error above {error:g}.</p>"
            f"{chart}{_item_table(item_stats(stats, summary), names)}</section>")


def item_stats(stats: ZScoreStats, summary: pd.DataFrame) -> pd.DataFrame:
    """Every item the stage fitted or saw (from :func:`z_summary`), per ITEMID: its fitted stats as ``stats.json``
    keeps them (:func:`stats_table`: rule, transform, mean, scale, count; missing for an item unseen in train), rows,
    max |z|, rows above the bound and non-finite z; non-finite first, then by max |z| descending, then ITEMID."""
    table = stats_table(stats.as_json()).join(summary[["rows", "nonfinite", "max_abs", "flagged"]], how="outer")
    table = table.fillna({"rows": 0, "nonfinite": 0, "flagged": 0}).astype(
        {"rows": "int64", "nonfinite": "int64", "flagged": "int64"})
    table = table.assign(_nonfinite=table["nonfinite"] > 0, _item=table.index)
    table = table.sort_values(["_nonfinite", "max_abs", "_item"], ascending=[False, False, True], kind="stable",
                              na_position="last")
    return table.drop(columns=["_nonfinite", "_item"])


def _figure(value: Any, how: str) -> str:
    """A fitted figure in ``how``'s format (``d``: a whole number), or ``-`` where there is none (unseen in train)."""
    if value is None or pd.isna(value):
        return "-"
    return f"{int(value):,}" if how == "d" else format(value, how)


def _item_table(every: pd.DataFrame, names: Mapping[int, str]) -> str:
    """Every item of :func:`item_stats` in one sortable table, collapsed."""
    rows = [[str(item), names.get(int(item), "-"), _figure(r.rule, ""), _figure(r.transform, ""),
             _figure(r.mean, ".4g"), _figure(r.scale, ".4g"), _figure(r.count, "d"), page.n(r.rows),
             _figure(r.max_abs, ".4g"), page.n(r.flagged), page.n(r.nonfinite)]
            for item, r in zip(every.index, every.itertuples())]
    table = page.table(["ITEMID", "name", "rule", "transform", "mean", "scale", "train rows", "rows", "max |z|",
                        "rows above the warn bound", "non-finite z"], rows, numeric={0, 4, 5, 6, 7, 8, 9, 10},
                       sortable=True)
    note = ("<p class=note>mean and scale are those of stats.json, after the item's transform; "
            "- : not fitted (the item is unseen in train: z = 0). Click a column to sort.</p>")
    return page.details(f"All {len(every):,} items: rule, transform, mean, scale and max |z|", note + table,
                        ident="z-items")


def _items(stats: ZScoreStats | None, summary: pd.DataFrame, names: Mapping[int, str], max_lines: int) -> str:
    if stats is None:
        return ""
    counts = dict(zip(stats.items_, stats.count_))
    unseen = summary.loc[~summary["seen"], "rows"]
    groups = [
        ("constant", "every training value equal: z = 0 on it, other values' z bounded by [scale] constant_bound",
         stats.constant_items_),
        ("rare", f"seen in fewer than {stats.min_admissions} training admissions ([encode] min_admissions): z = 0, "
                 "nothing of their values kept in stats.json", stats.rare_items_),
        ("fallback", "fewer than [scale] min_rows normal training rows (or none with spread): fitted on all "
                     "their training rows", stats.fallback_items_),
        ("unseen", "numeric items not in the training split: z = 0", list(unseen.index)),
    ]
    rows = []
    for name, what, items in groups:
        if name == "unseen":  # every item: the HTML keeps the lists the terminal cuts short
            listed = format_items(unseen, names=names, limit=len(unseen))
        else:
            listed = format_items({item: counts.get(item, 0) for item in items}, names=names,
                                  limit=len(items), unit="train row")
        rows.append([name, str(len(items)), listed or "none", what])
    table = page.table(["items", "count", "ITEMID", "meaning"], rows, numeric={1})
    counted = ", ".join(f"{len(items):,} {name}" for name, _, items in groups)
    return (f'<section id="items"><h2>Constant, rare, fallback and unseen items</h2>'
            f'{page.details(counted, table)}</section>')


def _label(item: int, names: Mapping[int, str]) -> str:
    """An item as the chart names it: ``'50912 Creatinine (Blood)'``, cut to :data:`LABEL_CHARS`."""
    label = format_items([item], names=names)
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1].rstrip() + "\u2026"


def _z_chart(drawn: dict[int, DrawnZ], top: pd.DataFrame, warn: float, error: float, *, names: Mapping[int, str]):
    import matplotlib
    from matplotlib import cbook
    from matplotlib.ticker import FuncFormatter

    with matplotlib.rc_context(page.RC):
        items = list(top.index)
        figure = page.new_figure(8, 0.55 * len(items) + 1.1)
        ax = figure.add_subplot()
        positions = np.arange(len(items))[::-1]
        boxes, flagged_x, flagged_y = [], [], []
        for item, position in zip(items, positions):
            values = drawn[item].values if item in drawn else np.array([], dtype="float64")
            (box,) = cbook.boxplot_stats(values if len(values) else np.array([0.0]))
            box["fliers"] = page.fewer(box["fliers"], FLIERS)  # the box from every row, a few of its outliers drawn
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
        ax.set_yticks(positions, [_label(int(item), names) for item in items])
        ax.set_xlabel("z (symmetric log scale)")
        if flagged_x:
            ax.legend(loc="lower right", fontsize=8, frameon=False)
        return figure


def sections(shown: Shown) -> list[str]:
    """The stage's sections of the HTML report: the z-score distributions of the items with the largest |z| and
    every item's stats and largest |z|, and its constant, rare, fallback and unseen items. Two passes
    over LABEVENTS (part by part where its parts are): per-item summaries, then the z of the items drawn."""
    summary = z_summary(shown)
    top = extreme_items(summary)
    drawn = drawn_z(shown, top.index) if len(top) else {}
    parts = [_zscores(drawn, top, shown.state, summary, shown.options, shown.names),
             _items(shown.state, summary, shown.names, shown.max_lines)]
    return [part for part in parts if part]
