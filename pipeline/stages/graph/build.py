"""The graph stage's build (its :class:`pipeline.kernel.stage.Target` ``graphs``): the graphs of a validated run
built, guarded, serialised and staged a few batches at a time where the edge rows are (this process, or the engine's
workers), so what stays here is each graph's hash and summary; then, unless anything is an error, the report, the
fitted state, the quarantine, the index and the manifest written with them. torch, PyG and matplotlib load only
here, when graphs are built."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from pipeline.kernel.engine import Engine
from pipeline.kernel.finding import Finding
from pipeline.ledgers import check_built
from pipeline.output import write
from pipeline.output.built import Build
from pipeline.reporting.findings import finding_from_error, item_names, summary_finding
from pipeline.reporting.progress import Progress
from pipeline.reporting.report import Report
from pipeline.stages.encode import Vocabularies
from pipeline.stages.graph.stats import EDGE_TENSORS, add_counts, count_frame, edge_counts, feature_stats
from pipeline.stages.task import task_labels
from pipeline.stages.graph.tensors import (GraphBatch, check_graphs, graph_columns, graph_limits, memory_estimate,
                                          stream_graphs)
from schemas.graph import EDGE
from schemas.split import SPLITS

BUILDING, GUARDING = STEPS = ("graphs", "guard")  # its progress steps: the graphs built, then guarded and staged


def graph_file(graph: GraphBatch) -> write.GraphFile:
    """A built graph serialised (its tensors can go)."""
    data = write.graph_bytes(graph.data)
    return write.GraphFile(split=graph.split, batch=graph.batch, sha256=write.sha256_of(data), bytes=len(data),
                     admissions=int(graph.data["admission"].num_nodes),
                     edges=int(graph.data[EDGE].edge_index.shape[1]), data=data)


@dataclass(frozen=True)
class MadeGraph:
    """A graph built, guarded, serialised and staged (where the edge rows are: this process, or a Dask worker):
    what the build keeps of it."""

    file: Any  # pipeline.output.write.GraphFile, without its bytes
    staged: bool | OSError  # whether its file was staged (pipeline.output.write.stage_file), or why it could not be
    labitems: int
    memory: dict[str, int]
    findings: tuple[Finding, ...]
    node: np.ndarray
    hadm: np.ndarray
    items: np.ndarray  # the ITEMIDs its edges carry, sorted


def made_graphs(parts: Iterable[pd.DataFrame], admissions: pd.DataFrame, labitems: pd.DataFrame, *, out_dir: Path,
                limits: Any, batch_size: int, labels: bool, admission_features: tuple[str, ...], hidden: int,
                layers: int, start: Mapping[str, int] | None = None) -> Iterator[MadeGraph]:
    """The graphs of edge rows in parts (:func:`pipeline.stages.graph.stream_graphs`) each built, guarded, sized,
    serialised and staged in ``out_dir`` at once, so only what :class:`MadeGraph` keeps stays."""
    for g in stream_graphs(parts, admissions, labitems, batch_size=batch_size, labels=labels,
                           admission_features=admission_features, start=start):
        file = graph_file(g)
        try:
            staged: bool | OSError = write.stage_file(out_dir, file.path, file.data)
        except OSError as problem:
            staged = problem
        yield MadeGraph(file=replace(file, data=None), staged=staged, labitems=int(g.data["labitem"].num_nodes),
                        memory=memory_estimate(g.data, hidden=hidden, layers=layers),
                        findings=tuple(finding_from_error(problem) for problem in check_graphs([g], limits)),
                        node=g.data["admission"].node_id.numpy(), hadm=g.data["admission"].hadm_id.numpy(),
                        items=g.data["labitem"].itemid.numpy()[np.unique(g.data[EDGE].edge_index[1].numpy())])
        if not isinstance(staged, bool):
            return


def write_graphs(staged: Any, validation: Any, config: Any, progress: Progress, *, engine: Engine,
                 data_dir: Path) -> Build:
    """The graphs of a validated run built, guarded and (unless anything is an error) written with the rest: the
    stage's :class:`pipeline.kernel.stage.Target` ``graphs``."""
    out, prepared = staged.out_dir, validation.prepared
    progress.step(BUILDING, rows=len(prepared.edges))
    limits = graph_limits(prepared.state_of(Vocabularies), prepared.edges, prepared.admissions,
                          max_timestep=config.bucket.max_timestep, admission_features=config.graph.admission_features)
    # Built, guarded, serialised and staged a few batches at a time, from the edge rows' parts (only the columns
    # graphs read), on the engine's workers (here without any): what stays is each graph's hash and summary, never
    # all the graphs' tensors or bytes.
    made = engine.in_batches(made_graphs, prepared.edges, prepared.admissions, prepared.labitems,
                             batch_size=config.graph.batch_size, columns=graph_columns(prepared.edges), sees=out,
                             out_dir=out, limits=limits, labels=config.graph.labels,
                             admission_features=config.graph.admission_features, hidden=config.graph.hidden,
                             layers=config.graph.layers)
    graphs = _Graphs.of(made, staged)
    progress.step(GUARDING, rows=len(graphs.summaries), unit="graphs")
    graphs.findings.extend(_over_budget(graphs.memory, config))
    accounting = {"LABEVENTS": prepared.ledger(), "ADMISSIONS": prepared.admission_ledger()}
    check_built(graphs.summaries, accounting)
    # A report of its own: the validation's findings (severities applied) and the graphs', in a new list.
    report = validation.report
    graph_findings = Report(findings=graphs.findings).with_severities(dict(config.severity)).findings
    report = Report(inputs=list(report.inputs), findings=[*report.findings, *graph_findings],
                    overrides=dict(report.overrides), attrition=report.attrition, stages=report.stages,
                    summary=list(report.summary))
    if report.exit_code:
        progress.end()
        return Build(validation=validation, report=report, out_dir=None, graphs=graphs.summaries)
    built = Build(validation=validation, report=report, out_dir=out, graphs=graphs.summaries)
    _write(built, staged, graphs, config, progress, limits=limits, accounting=accounting, engine=engine)
    return built


@dataclass
class _Graphs:
    """What the build keeps of its graphs: their files (without bytes), summaries, memory estimates, findings and
    node ids."""

    files: list = field(default_factory=list)
    summaries: tuple[dict, ...] = ()
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    nodes: list[tuple[str, int, np.ndarray, np.ndarray]] = field(default_factory=list)
    items: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype="int64"))  # ITEMIDs on edges, sorted

    @classmethod
    def of(cls, made: Iterable[MadeGraph], staged: Any) -> "_Graphs":
        graphs, summaries = cls(), []
        for g in made:
            staged.took(g.file.path, g.staged)  # a file that could not be staged: the staged files go, OutputError
            graphs.findings += g.findings
            graphs.memory[g.file.where] = g.memory
            summaries.append({"split": g.file.split, "batch": g.file.batch, "admissions": g.file.admissions,
                              "labitems": g.labitems, "edges": g.file.edges, "memory": g.memory})
            graphs.nodes.append((g.file.split, g.file.batch, g.node, g.hadm))
            graphs.items = np.union1d(graphs.items, g.items)
            graphs.files.append(g.file)
        graphs.summaries = tuple(summaries)
        return graphs

    def index(self) -> pd.DataFrame:
        """Which graph holds each admission: split, batch, node and HADM_ID (``index.parquet``)."""
        return pd.DataFrame({
            "split": np.concatenate([np.repeat(split, len(node)) for split, _, node, _ in self.nodes]),
            "batch": np.concatenate([np.repeat(batch, len(node)) for _, batch, node, _ in self.nodes]),
            "node": np.concatenate([node for _, _, node, _ in self.nodes]),
            "HADM_ID": np.concatenate([hadm for _, _, _, hadm in self.nodes]),
        }).astype({"split": "str", "batch": "int64", "node": "int64", "HADM_ID": "int64"})

    def carried_names(self, labitems: pd.DataFrame | None) -> dict[int, str]:
        """ITEMID -> the name findings give it (``'NTproBNP (Blood)'``), for the items the edges carry only: no
        other row of D_LABITEMS reaches the outputs."""
        names = item_names(labitems)
        return {int(item): names[int(item)] for item in self.items if int(item) in names}


def _over_budget(memory: Mapping[str, dict[str, int]], config: Any) -> list[Finding]:
    """A finding when some batch's estimated training memory is above ``[graph] memory_budget_mb``."""
    budget = config.graph.memory_budget_mb * 2**20
    over = {where: m["total"] for where, m in memory.items() if m["total"] > budget}
    if not over:
        return []
    largest = max(over, key=over.get)
    return [summary_finding(
        stage="graph", check="graph_memory", table=None, column=None, count=len(over),
        message=f"{len(over)} batch(es) above {config.graph.memory_budget_mb:g} MB, largest {largest} at "
                f"{over[largest] / 2**20:.1f} MB (hidden {config.graph.hidden}, {config.graph.layers} layers)")]


def _write(built: Build, staged: Any, graphs: _Graphs, config: Any, progress: Progress, *, limits: Any,
           accounting: Mapping[str, dict], engine: Engine) -> None:
    """The build's files written with the staged graphs: the report (JSON and HTML), the fitted state, the
    quarantine, the index and the manifest."""
    from pipeline.reporting import html  # matplotlib loads only when graphs are built

    out, report, prepared = staged.out_dir, built.report, built.validation.prepared
    index = graphs.index()
    features = feature_stats(limits.features, _train_counts(prepared, index, limits.features, engine))
    splits = {name: {"admissions": int((index["split"] == name).sum()),
                     "graphs": sum(g["split"] == name for g in graphs.summaries),
                     "edges": sum(g["edges"] for g in graphs.summaries if g["split"] == name)}
              for name in SPLITS}
    progress.step("report")
    # quarantine.parquet is written (Arrow's work, mostly free of the GIL) while the HTML report is drawn.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quarantine") as aside:
        writing = aside.submit(write.stage_quarantine, prepared.quarantine, staged,
                               where=lambda function, *args: engine.call(function, *args, sees=out))
        # OUT_DIR/report.html, in the manifest; no raw values even with show_values
        page = html.render(built, config, engine=engine)
        quarantine = writing.result()
    outputs = write.build_outputs(
        graphs=graphs.files, limits=limits, config=config.as_json(),
        inputs=[{"table": i.table, "sha256": i.sha256, "rows": i.rows, "file": Path(i.path).name}
                for i in report.inputs],
        # OUT_DIR/report.json travels with the graphs: no raw values even with show_values (--json has them)
        fitted=prepared.saved_state(), quarantine=quarantine, index=index, report=report.without_samples().as_json(),
        accounting=accounting, splits=splits,
        memory=graphs.memory, report_html=page.encode("utf-8"),
        features=features,
        item_names=graphs.carried_names(prepared.labitems),
        labels=task_labels(prepared.admissions, prepared.splits, index["HADM_ID"], index["split"]))
    progress.step("write", rows=len(outputs.manifest["outputs"]), unit="files")
    write.write_build(out, outputs, staged)
    progress.end()


def _train_counts(prepared: Any, index: pd.DataFrame, features: Mapping[str, Any], engine: Engine) -> dict:
    """The counts the training statistics of every feature column are made from (:mod:`.stats`): the training
    edges, counted part by part where the edge rows are; the admission nodes of the training graphs; the lab-item
    dictionary, once."""
    edge_columns = ["SPLIT", *(column.name for tensor in EDGE_TENSORS for column in features[tensor])]
    edges = add_counts(engine.per_part(edge_counts, prepared.edges, features, columns=edge_columns))
    trained = index.loc[index["split"] == "train", "HADM_ID"].to_numpy("int64")
    admissions = prepared.admissions.set_index("HADM_ID").loc[trained]
    return {**edges, **count_frame(admissions, features, ("admission.x", "admission.x_cat")),
            **count_frame(prepared.labitems, features, ("labitem.x", "labitem.x_cat"))}
