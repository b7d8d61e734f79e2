"""A build: validate, then build every graph from the edge rows, guard it, and write the graphs with the report,
the fitted state, the quarantine and the manifest, only if nothing is an error (``badpoints build``).

The graphs are built, guarded, serialised and staged a few batches at a time where the edge rows are (this
process, or the engine's workers): what stays here is each graph's hash and summary. torch, PyG and matplotlib load
only here, when graphs are built.
"""

from __future__ import annotations

import concurrent.futures
import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd

from pipeline.cache import Cache
from pipeline.config import Config
from pipeline.engines import PANDAS, Engine
from pipeline.reporting.findings import Finding, finding_from_error, item_names, summary_finding
from pipeline.flow import ORDER, Validation, validate
from pipeline.ledgers import IN_GRAPHS
from pipeline.output.paths import check_output_dir, claim_output_dir
from pipeline.reporting.progress import NO_PROGRESS, Progress
from pipeline.reporting.report import Report
from schemas.graph import EDGE
from schemas.split import SPLITS


@dataclass(frozen=True)
class Build:
    """A build's report, and where its outputs went (None when errors kept it from writing)."""

    validation: Validation
    report: Report
    out_dir: Path | None
    graphs: tuple[dict, ...] = ()  # per graph: split, batch, admissions, labitems, edges, memory; per MEDS shard: path
    to: str = "graphs"  # what it wrote: graphs, or a MEDS dataset (its shards in ``graphs``)

    @property
    def exit_code(self) -> int:
        return self.report.exit_code  # the build's report holds the validation's findings and the graphs'


TARGETS = ("graphs", "meds")  # what a build writes: PyG graphs, or a MEDS dataset (``--to meds``)


def build(data_dir: Path, out_dir: Path, config: Config, *, show_values: bool = False,
          cache: Cache | None = None, progress: Progress | None = None, engine: Engine | None = None,
          to: str = "graphs") -> Build:
    """Validate, run every stage, build and guard the graphs (``to="meds"``: the MEDS dataset of
    :mod:`pipeline.meds.export`), and write them only if nothing is an error.

    ``cache`` serves the raw-checked tables as in :func:`validate`; the stages always run. The output folder
    is checked and held before any work (:func:`claim_output_dir`): a second build into it is refused.
    """
    if to not in TARGETS:
        raise ValueError(f"a build writes one of {', '.join(TARGETS)}, not {to!r}")
    out = check_output_dir(out_dir, data_dir)
    with claim_output_dir(out):
        return _build_into(out, data_dir, config, show_values=show_values, cache=cache, progress=progress,
                           engine=engine, to=to)


def _build_into(out: Path, data_dir: Path, config: Config, *, show_values: bool, cache: Cache | None,
                progress: Progress | None, engine: Engine | None, to: str = "graphs") -> Build:
    from pipeline.output import write  # torch and PyG load only when graphs are built

    progress = progress or NO_PROGRESS
    building, guarding = (step for stage in ORDER.built for step in stage.steps)
    validation = validate(data_dir, config, show_values=show_values, cache=cache, reuse_report=False, engine=engine,
                          progress=progress)
    report = validation.report
    prepared = validation.prepared
    if validation.exit_code or prepared.edges is None:
        return Build(validation=validation, report=report, out_dir=None, to=to)

    progress.step(building, rows=len(prepared.edges))
    # Graph files are staged in OUT_DIR as they are made (the previous build stays as it was); a build that finds
    # errors, or fails, drops them.
    staged = write.StagedBuild(out)
    into = functools.partial(_meds_into, data_dir=data_dir) if to == "meds" else _graphs_into
    try:
        built = into(staged, validation, config, progress, guarding=guarding, engine=engine or PANDAS)
    except BaseException:
        staged.abandon()
        raise
    if built.out_dir is None:
        staged.abandon()
    return built


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
    from pipeline.output import write
    from pipeline.stages import graph

    for g in graph.stream_graphs(parts, admissions, labitems, batch_size=batch_size, labels=labels,
                                 admission_features=admission_features, start=start):
        file = write.graph_file(g)
        try:
            staged: bool | OSError = write.stage_file(out_dir, file.path, file.data)
        except OSError as problem:
            staged = problem
        yield MadeGraph(file=replace(file, data=None), staged=staged, labitems=int(g.data["labitem"].num_nodes),
                        memory=graph.memory_estimate(g.data, hidden=hidden, layers=layers),
                        findings=tuple(finding_from_error(problem) for problem in graph.check_graphs([g], limits)),
                        node=g.data["admission"].node_id.numpy(), hadm=g.data["admission"].hadm_id.numpy(),
                        items=g.data["labitem"].itemid.numpy()[np.unique(g.data[EDGE].edge_index[1].numpy())])
        if not isinstance(staged, bool):
            return


def _graphs_into(staged: Any, validation: Validation, config: Config, progress: Progress, *, guarding: str,
                 engine: Engine = PANDAS) -> Build:
    """The graphs of a validated run built, guarded and (unless anything is an error) written with the rest."""
    from pipeline.stages import graph

    out, prepared = staged.out_dir, validation.prepared
    limits = graph.graph_limits(prepared.fitted.get("encode"), prepared.admissions,
                                max_timestep=config.bucket.max_timestep,
                                admission_features=config.graph.admission_features)
    # Built, guarded, serialised and staged a few batches at a time, from the edge rows' parts (only the columns
    # graphs read), on the engine's workers (here without any): what stays is each graph's hash and summary, never
    # all the graphs' tensors or bytes.
    made = engine.in_batches(made_graphs, prepared.edges, prepared.admissions, prepared.labitems,
                             batch_size=config.graph.batch_size, columns=graph.graph_columns(prepared.edges), sees=out,
                             out_dir=out, limits=limits, labels=config.graph.labels,
                             admission_features=config.graph.admission_features, hidden=config.graph.hidden,
                             layers=config.graph.layers)
    graphs = _Graphs.of(made, staged)
    progress.step(guarding, rows=len(graphs.summaries), unit="graphs")
    graphs.findings.extend(_over_budget(graphs.memory, config))
    accounting = {"LABEVENTS": prepared.ledger(), "ADMISSIONS": prepared.admission_ledger()}
    _check_ledgers(graphs.summaries, accounting)
    # A report of its own: the validation's findings (severities applied) and the graphs', in a new list.
    report = validation.report
    graph_findings = Report(findings=graphs.findings).with_severities(dict(config.severity)).findings
    report = Report(inputs=list(report.inputs), findings=[*report.findings, *graph_findings],
                    overrides=dict(report.overrides), attrition=report.attrition, stages=report.stages)
    if report.exit_code:
        progress.end()
        return Build(validation=validation, report=report, out_dir=None, graphs=graphs.summaries)
    built = Build(validation=validation, report=report, out_dir=out, graphs=graphs.summaries)
    _write(built, staged, graphs, config, progress, limits=limits, accounting=accounting, engine=engine)
    return built


def _meds_into(staged: Any, validation: Validation, config: Config, progress: Progress, *, guarding: str,
               engine: Engine = PANDAS, data_dir: Path) -> Build:
    """The edge rows of a validated run written as a MEDS dataset (:mod:`pipeline.meds.export`): each part's events
    as pieces where the parts are, then each shard sorted and staged with its admissions' events; then codes.parquet,
    subject_splits.parquet and dataset.json beside the report, the fitted state, the quarantine and the manifest."""
    from pipeline.output import write
    from pipeline.meds import export

    out, prepared = staged.out_dir, validation.prepared
    stats = prepared.fitted["scale"]
    labevents = next((Path(i.path) for i in validation.report.inputs if i.table == "LABEVENTS"), None)
    known = set(prepared.labitems["ITEMID"].astype("int64")) | set(stats.items_)
    items = export.item_table(stats, export.lab_codes(known, export.item_units(labevents)))
    accounting = {"LABEVENTS": prepared.ledger(), "ADMISSIONS": prepared.admission_ledger()}
    people = export.subjects(prepared.fates, prepared.splits, accounting["LABEVENTS"]["kept"])
    pieces = staged.stage / export.PIECES
    made = list(engine.in_batches(export.write_pieces, prepared.edges, items, people, stats,
                                  batch_size=config.graph.batch_size, columns=export.COLUMNS, sees=out, pieces=pieces))
    progress.step(guarding, rows=len(made), unit="pieces")
    admitted = export.admission_events(prepared.admissions, people)
    back = {meds_name: name for name, meds_name in export.MEDS_SPLITS.items()}
    sizes = pd.DataFrame([{"split": m["split"], "shard": m["shard"], "rows": m["rows"],
                           "admissions": len(m["admissions"])} for m in made], columns=["split", "shard", "rows",
                                                                                        "admissions"])
    sizes = sizes.groupby(["split", "shard"])[["rows", "admissions"]].sum()  # pieces share no admission
    files, shards = [], []
    for split, shard in people[["split", "shard"]].drop_duplicates().sort_values(["split", "shard"]).itertuples(
            index=False):
        path = f"data/{split}/{shard}.parquet"
        files.append(staged.add_written(path, export.parquet_writer(
            export.shard_table(pieces, split, int(shard), admitted))))
        size = sizes.loc[(split, shard)] if (split, shard) in sizes.index else {"rows": 0, "admissions": 0}
        shards.append({"split": back[split], "batch": int(shard), "path": path,
                       "admissions": int(size["admissions"]), "edges": int(size["rows"])})
    _check_ledgers(tuple(shards), accounting)
    counted = (pd.concat([m["per_code"] for m in made]).groupby(level=0).sum() if made
               else pd.DataFrame(columns=["bounded", "withheld"]))
    codes = export.codes_table(stats, items, item_names(prepared.labitems), admitted["code"], counted)
    inputs = [{"table": i.table, "sha256": i.sha256, "rows": i.rows, "file": Path(i.path).name}
              for i in validation.report.inputs]
    files += [staged.add_written("metadata/codes.parquet", export.parquet_writer(codes)),
              staged.add_written("metadata/subject_splits.parquet", export.parquet_writer(export.subject_splits(people))),
              staged.add("metadata/dataset.json", export.dataset_json(data_dir, write.versions()["badpoints"], inputs))]
    built = Build(validation=validation, report=validation.report, out_dir=out, graphs=tuple(shards), to="meds")
    _write_meds(built, staged, config, progress, files=files, accounting=accounting, inputs=inputs, engine=engine)
    return built


def _write_meds(built: Build, staged: Any, config: Config, progress: Progress, *, files: list,
                accounting: Mapping[str, dict], inputs: list[dict], engine: Engine) -> None:
    """A MEDS build's own files beside the dataset: report (JSON and HTML), fitted state, quarantine, manifest."""
    from pipeline.output import write
    from pipeline.reporting import html

    out, report, prepared = staged.out_dir, built.report, built.validation.prepared
    progress.step("report")
    files = [*files, write.stage_quarantine(prepared.quarantine, staged,
                                            where=lambda function, *args: engine.call(function, *args, sees=out)),
             staged.add("report.html", html.render(built, config, engine=engine).encode("utf-8")),
             staged.add("report.json", write.json_bytes(report.without_samples().as_json())),
             staged.add("stats.json", write.json_bytes(prepared.saved_state()))]
    splits = {name: {"admissions": sum(s["admissions"] for s in built.graphs if s["split"] == name),
                     "shards": sum(s["split"] == name for s in built.graphs),
                     "events": sum(s["edges"] for s in built.graphs if s["split"] == name)} for name in SPLITS}
    manifest = write.meds_manifest(files, config=config.as_json(), inputs=inputs, shards=list(built.graphs),
                                   splits=splits, accounting=accounting)
    progress.step("write", rows=len(manifest["outputs"]), unit="files")
    staged.commit(manifest)
    progress.end()


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


def _over_budget(memory: Mapping[str, dict[str, int]], config: Config) -> list[Finding]:
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


def _check_ledgers(summaries: tuple[dict, ...], accounting: Mapping[str, dict]) -> None:
    """The graphs hold every kept row as an edge and every admission the ledgers count in graphs (else a bug)."""
    edges_in_graphs = sum(g["edges"] for g in summaries)
    kept = accounting["LABEVENTS"]["kept"]
    if edges_in_graphs != kept:
        raise RuntimeError(f"graphs hold {edges_in_graphs} edges but {kept} rows were kept")
    admissions = accounting["ADMISSIONS"]
    nodes = {name: sum(g["admissions"] for g in summaries if g["split"] == name) for name in SPLITS}
    counted = {name: admissions["splits"][name][IN_GRAPHS] for name in SPLITS}
    if nodes != counted:
        raise RuntimeError(f"graphs hold admissions {nodes} per split but the ledger counted {counted}")


def _write(built: Build, staged: Any, graphs: _Graphs, config: Config, progress: Progress, *, limits: Any,
           accounting: Mapping[str, dict], engine: Engine) -> None:
    """The build's files written with the staged graphs: the report (JSON and HTML), the fitted state, the
    quarantine, the index and the manifest."""
    from pipeline.output import write  # matplotlib loads only when graphs are built
    from pipeline.reporting import html
    from pipeline.stages import graph

    out, report, prepared = staged.out_dir, built.report, built.validation.prepared
    index = graphs.index()
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
        features=graph.feature_columns(prepared.edges, prepared.admissions,
                                       admission_features=config.graph.admission_features),
        item_names=graphs.carried_names(prepared.labitems))
    progress.step("write", rows=len(outputs.manifest["outputs"]), unit="files")
    write.write_build(out, outputs, staged)
    progress.end()
