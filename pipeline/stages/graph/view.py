"""How the graph stage shows in the HTML report (its ``sections`` hook): the split sizes, what reached the graphs
per split, and for a build its graphs with their memory estimates."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np
import pandas as pd

from pipeline.kernel.engine import Engine
from pipeline.kernel.stage import Shown
from pipeline.reporting import page
from pipeline.stages.graph.options import Options
from schemas.split import SPLITS

TARGET = "graphs"  # the build target whose graphs the stage draws


def sections(shown: Shown) -> list[str]:
    """The split sizes (and what a build made per split), then a graph build's graphs."""
    built = shown.built
    made = list((built.graphs if built.to == TARGET else built.shards) if built is not None else ())
    drawn = [_splits(shown.prepared, made, engine=shown.engine, unit="graphs" if built is None or built.to == TARGET
                     else "shards")]
    if built is not None and built.to == TARGET:
        drawn.append(_graphs(made, shown.options, written=built.out_dir is not None))
    return drawn


def _split_sizes(part: pd.DataFrame) -> pd.DataFrame:
    """Per split: the part's admissions with edges, and its edges."""
    return part.groupby("SPLIT")["HADM_ID"].agg(["nunique", "size"]).reindex(SPLITS, fill_value=0)


def _splits(prepared: Any, made: list[dict], *, engine: Engine, unit: str) -> str:
    """Per split: its admissions, those in graphs, patients and lab edges; with a build, what it made per split
    (``unit``: graphs or shards)."""
    splits = getattr(prepared, "splits", None)
    if splits is None:
        return ""
    edges = getattr(prepared, "edges", None)
    per_split = None  # per split: admissions with edges, edges (added up over parts: they share no admission)
    if edges is not None:
        per_split = sum(engine.per_part(_split_sizes, edges, columns=["SPLIT", "HADM_ID"]))
    rows = []
    for name in SPLITS:
        part = splits[splits["SPLIT"] == name]
        row = [name, page.n(len(part)), page.n(int(per_split.loc[name, "nunique"])) if per_split is not None else "-",
               page.n(part["GROUP"].nunique() if "GROUP" in part else len(part)),
               page.n(int(per_split.loc[name, "size"])) if per_split is not None else "-"]
        if made:
            row.append(page.n(sum(g["split"] == name for g in made)))
        rows.append(row)
    head = ["split", "admissions", "in graphs", "patients", "lab edges"] + ([unit] if made else [])
    return (f'<section id="splits"><h2>Split sizes</h2>'
            f'{page.table(head, rows, numeric=set(range(1, len(head))))}</section>')


def _graphs(graphs: list[dict], options: Options, *, written: bool) -> str:
    """A build's graphs: per graph its nodes, edges and memory estimate, the largest against the budget."""
    if not graphs:
        return ('<section id="graphs"><h2>Graphs</h2><p>No graphs were built: the data has errors, fix them '
                "first.</p></section>")
    mb = 2 ** 20
    rows = [[g["split"], str(g["batch"]), page.n(g["admissions"]), page.n(g["labitems"]), page.n(g["edges"]),
             f'{g["memory"]["tensors"] / mb:.2f}', f'{g["memory"]["activations"] / mb:.2f}',
             f'{g["memory"]["total"] / mb:.2f}'] for g in graphs]
    table = page.table(["split", "batch", "admission nodes", "labitem nodes", "did edges", "tensors MB",
                    f"activations MB (hidden {options.hidden}, {options.layers} layers)", "total MB"],
                   rows, numeric={1, 2, 3, 4, 5, 6, 7}, sortable=True)
    largest = max(graphs, key=lambda g: g["memory"]["total"])
    note = (f'<p>Largest batch: {escape(largest["split"])}/batch {largest["batch"]} at '
            f'{largest["memory"]["total"] / mb:.2f} MB; budget {options.memory_budget_mb:g} MB.'
            + ("" if written else " Not written: the build has errors.") + "</p>")
    chart = page.figure("graph-sizes", "did edges per graph, by split", lambda: _graph_chart(graphs))
    return f'<section id="graphs"><h2>Graphs</h2>{note}{chart}{table}</section>'


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
