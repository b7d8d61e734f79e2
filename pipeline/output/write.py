"""Writing a build, and reading it back safely: with :mod:`pipeline.output.staged` (staging and switching the files
in), the only modules that write outputs.

A build writes every file that changes, and its manifest, into a staging folder
inside OUT_DIR (each file atomically), while the previous build stays as it was.
Only then does it switch: the old manifest is moved aside, the staged files are
renamed into place and the new manifest last (renames only, no new data: a full
disk fails before the switch, never during it). Readers (``inspect``,
``load_graphs``) therefore see the previous build, then for the milliseconds of
the renames no manifest ("no finished build"), then the new one; a rebuild whose
files are all unchanged only replaces the manifest. Afterwards it removes the
files that only the previous manifest listed, and nothing else. Graph
files hold ``HeteroData.to_dict()`` (plain tensors, strings and tuples) and are
loaded only with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.kernel.quarantine import Quarantine, empty_quarantine
from pipeline.output.paths import MARKER, OutputError, check_output_dir, os_reason  # noqa: F401  (re-exported)
from pipeline.output.staged import (MANIFEST, PREVIOUS, STAGING, StagedBuild, StagedFile,  # noqa: F401  (re-exported)
                                    json_bytes, sha256_of, stage_file, write_scratch)
from schemas.catalogue import check_info
from schemas.errors import StageError
from schemas.graph import EDGE, FEATURES, REVERSE, Column, GraphLimits, graph_problems  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # torch and PyG load where graphs are serialised or read, not where a build is only written
    from torch_geometric.data import HeteroData

FORMAT = 3  # categorical columns in int64 x_cat and edge_attr_cat, each column's kind and cardinality in "features"
PACKAGES = ("badpoints", "pandas", "pandera", "numpy", "pyarrow", "torch", "torch_geometric")


def graph_path(split: str, batch: int) -> str:
    """A graph's path relative to OUT_DIR: names come from the split and batch number, never from data."""
    return f"graphs/{split}/batch_{batch:05d}.pt"


def graph_bytes(data: HeteroData) -> bytes:
    """The graph's bytes: deterministic (no file name, no time stamp in the archive)."""
    import torch

    buffer = io.BytesIO()
    torch.save(data.to_dict(), buffer)
    return buffer.getvalue()



ROW_GROUP = 1024 * 1024  # rows per Parquet row group (pyarrow's default)


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    sink = pa.BufferOutputStream()
    _parquet_of([frame], sink)
    return sink.getvalue().to_pybytes()


def _parquet_of(frames: Iterable[pd.DataFrame], sink: pa.NativeFile, empty: pd.DataFrame | None = None) -> None:
    """One Parquet file of ``frames`` in turn (index dropped) into ``sink``, the bytes one frame of them all would
    give: rows are written in whole row groups as they come, so only a row group's worth waits (``empty``: the file
    of none)."""
    writer, waiting, written = None, None, False
    for frame in frames:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        waiting = table if waiting is None else pa.concat_tables([waiting, table])
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema, compression="zstd")
        whole = len(waiting) // ROW_GROUP * ROW_GROUP
        if whole:
            writer.write_table(waiting.slice(0, whole).combine_chunks(), row_group_size=ROW_GROUP)
            waiting, written = waiting.slice(whole), True
    if writer is None:
        waiting = pa.Table.from_pandas(empty if empty is not None else pd.DataFrame(), preserve_index=False)
        writer = pq.ParquetWriter(sink, waiting.schema, compression="zstd")
    if len(waiting) or not written:  # no rows at all: one empty row group, as a whole empty frame gives
        writer.write_table(waiting.combine_chunks(), row_group_size=ROW_GROUP)
    writer.close()


QUARANTINE = "quarantine.parquet"


def quarantine_parquet(quarantine: Quarantine, sink: pa.NativeFile) -> None:
    """``quarantine.parquet``: every record, by table, source line and stage, written a line range at a time."""
    _parquet_of((part.reset_index() for part in quarantine.in_order()), sink, empty=empty_quarantine().reset_index())



def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "unknown"
    return found


@dataclass(frozen=True)
class GraphFile:
    """A graph as a build writes it: its file's hash and size (its bytes, until they were staged) and what the
    manifest says of it."""

    split: str
    batch: int
    sha256: str
    bytes: int
    admissions: int
    edges: int
    data: bytes | None = None

    @property
    def where(self) -> str:
        return f"{self.split}/batch {self.batch}"

    @property
    def path(self) -> str:
        return graph_path(self.split, self.batch)


def stage_quarantine(quarantine: Quarantine, staged: "StagedBuild", *,
                     where: Callable[..., Any] | None = None) -> "StagedFile":
    """``quarantine.parquet`` written straight into the staging folder, a line range at a time (at MIMIC-IV scale
    its 49M records are 124 MB of Parquet, never in memory whole): its hash and size. ``where(function, *args)``
    runs the writing: an engine's ``call``, which may run it on a Dask worker that sees OUT_DIR (here by default)."""
    run = where or (lambda function, *args: function(*args))
    records = Quarantine(quarantine.sources)  # what it was read for (summaries, masks) stays here
    return staged.add_written(QUARANTINE, lambda path: run(write_quarantine, records, path))


def write_quarantine(quarantine: Quarantine, path: Path) -> None:
    """``quarantine.parquet`` at ``path`` (:func:`quarantine_parquet`)."""
    with open(path, "wb") as handle, pa.PythonFile(handle, mode="w") as sink:  # a path of any bytes (out\xff)
        quarantine_parquet(quarantine, sink)


def write_parquet(table: pa.Table, path: Path) -> None:
    """``table`` as Parquet at ``path``, a path of any bytes (``out\\xff``): pyarrow writes to the file Python
    opened."""
    with open(path, "wb") as handle, pa.PythonFile(handle, mode="w") as sink:
        pq.write_table(table, sink)


@dataclass(frozen=True)
class BuildOutputs:
    """Everything a build writes, as bytes, before any of it touches the disk (graph files staged before: by
    hash)."""

    files: dict[str, bytes]
    manifest: dict[str, Any]


LABELS, LABEL_SPLITS = "labels.parquet", "label_splits.parquet"
# labels.parquet as MEDS 0.4's label schema has it (meds.LabelSchema: no other column), and its rows' splits.
LABEL_SCHEMA = pa.schema([pa.field("subject_id", pa.int64(), nullable=False),
                          pa.field("prediction_time", pa.timestamp("us"), nullable=False),
                          pa.field("boolean_value", pa.bool_(), nullable=False)])
SPLIT_SCHEMA = pa.schema([pa.field("subject_id", pa.int64(), nullable=False),
                          pa.field("prediction_time", pa.timestamp("us"), nullable=False),
                          pa.field("split", pa.string(), nullable=False)])


def label_files(labels: pd.DataFrame) -> dict[str, bytes]:
    """``labels.parquet`` (MEDS' label schema) and ``label_splits.parquet`` (each label's split, row for row) of
    ``labels``: subject_id, prediction_time, boolean_value and split per labelled admission, sorted by subject and
    prediction time."""
    rows = labels.sort_values(["subject_id", "prediction_time"], kind="stable", ignore_index=True)
    times = pa.array(rows["prediction_time"].astype("datetime64[us]"), type=pa.timestamp("us"))
    subjects = pa.array(rows["subject_id"].astype("int64"), type=pa.int64())
    tables = {LABELS: pa.Table.from_arrays([subjects, times, pa.array(rows["boolean_value"].astype(bool))],
                                           schema=LABEL_SCHEMA),
              LABEL_SPLITS: pa.Table.from_arrays([subjects, times, pa.array(rows["split"].astype(str))],
                                                 schema=SPLIT_SCHEMA)}
    files = {}
    for name, table in tables.items():
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        files[name] = sink.getvalue().to_pybytes()
    return files


def build_outputs(*, graphs: list[GraphFile], limits: GraphLimits, config: dict, inputs: list[dict],
                  fitted: dict, quarantine: Quarantine | StagedFile, index: pd.DataFrame, report: dict,
                  accounting: dict, splits: dict, memory: dict, features: dict[str, list[dict[str, Any]]],
                  report_html: bytes | None = None, item_names: dict[int, str] | None = None,
                  labels: pd.DataFrame | None = None) -> BuildOutputs:
    """Serialise every output and the manifest that names their hashes (pure: no I/O).

    ``accounting`` holds the ledgers by table (LABEVENTS rows, ADMISSIONS); ``features`` describes the columns of
    each feature tensor (``schemas.graph.FEATURES``), in order: name, kind, cardinality of a categorical column
    and the training statistics (:func:`pipeline.stages.graph.stats.feature_stats`, of the columns the tensors
    were built from); ``limits`` gives the last timestep; ``item_names`` how findings name the lab items the edges
    carry (ITEMID -> 'NTproBNP (Blood)'); ``labels`` a task's labels (:func:`label_files`, None: next_labs, whose
    labels are the graphs' own). A graph already staged (a :class:`GraphFile` without its bytes: :func:`stage_file`) is
    listed by its hash; its bytes are not among ``files``, and so is a quarantine staged already
    (:func:`stage_quarantine`).
    """
    files = {g.path: g.data for g in graphs if g.data is not None}
    files["stats.json"] = json_bytes(fitted)
    if isinstance(quarantine, Quarantine):
        sink = pa.BufferOutputStream()
        quarantine_parquet(quarantine, sink)
        files[QUARANTINE] = sink.getvalue().to_pybytes()
    files["index.parquet"] = _parquet_bytes(index)
    if labels is not None:
        files.update(label_files(labels))
    files["report.json"] = json_bytes(report)
    if report_html is not None:
        files["report.html"] = report_html
    listed = {name: {"sha256": sha256_of(data), "bytes": len(data)} for name, data in files.items()}
    listed.update({g.path: {"sha256": g.sha256, "bytes": g.bytes} for g in graphs if g.data is None})
    if isinstance(quarantine, StagedFile):
        listed[quarantine.name] = {"sha256": quarantine.sha256, "bytes": quarantine.bytes}
    manifest = {
        "format": FORMAT,
        "config": config,
        "versions": versions(),
        "inputs": inputs,
        "outputs": dict(sorted(listed.items())),
        "graphs": [{"split": g.split, "batch": g.batch, "path": g.path,
                    "admissions": g.admissions, "edges": g.edges, "memory": memory[g.where]} for g in graphs],
        "features": {name: [dict(column) for column in features[name]] for name in FEATURES},
        "item_names": {str(item): name for item, name in sorted((item_names or {}).items())},
        "limits": {"max_timestep": limits.max_timestep},
        "splits": splits,
        "accounting": accounting,
    }
    return BuildOutputs(files=files, manifest=manifest)


def meds_manifest(files: Iterable[StagedFile], *, config: dict, inputs: list[dict], shards: list[dict],
                  splits: dict, accounting: dict) -> dict[str, Any]:
    """The manifest of a build written as MEDS (``--to meds``): every file's hash, the shards, the splits and the
    ledgers; ``kind`` says it holds no graphs."""
    return {"format": FORMAT, "kind": "meds", "config": config, "versions": versions(), "inputs": inputs,
            "outputs": {f.name: {"sha256": f.sha256, "bytes": f.bytes} for f in sorted(files, key=lambda f: f.name)},
            "shards": shards, "splits": splits, "accounting": accounting}


def write_build(out_dir: Path, outputs: BuildOutputs, staged: "StagedBuild | None" = None) -> None:
    """Stage the files that change, switch them in by renames (manifest last), then drop what only the
    previous build listed (``staged``: where some, the graphs, were staged already).

    A failed write raises :class:`OutputError` with the path and the OS reason; until the switch the
    previous build is untouched. The caller holds the folder (:func:`pipeline.output.paths.claim_output_dir`).
    """
    staged = staged or StagedBuild(out_dir)
    for name, data in sorted(outputs.files.items()):
        staged.add(name, data)
    staged.commit(outputs.manifest)


# -- reading back ---------------------------------------------------------------------------------
def read_manifest(out_dir: Path) -> dict[str, Any]:
    """The manifest, checked for the shape ``load_graphs`` and ``inspect`` rely on."""
    path = Path(out_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _problem("graph_manifest", MANIFEST, "no manifest: the folder holds no finished build") from None
    except (OSError, ValueError) as exc:
        raise _problem("graph_manifest", MANIFEST, f"unreadable manifest ({type(exc).__name__})") from None
    if not _manifest_shape_ok(manifest):
        raise _problem("graph_manifest", MANIFEST, "the manifest lacks the outputs, graphs, limits, features or "
                                                   "accounting of a badpoints build")
    if manifest.get("format") != FORMAT:
        raise _problem("graph_manifest", MANIFEST, f"format {manifest.get('format')!r} is not this badpoints' "
                                                   f"format {FORMAT}: rebuild the graphs")
    return manifest


def _manifest_shape_ok(manifest: Any) -> bool:
    try:
        outputs = manifest["outputs"]
        ok = isinstance(outputs, dict) and all(isinstance(v["sha256"], str) for v in outputs.values())
        if manifest.get("kind") == "meds":  # a build written as MEDS (``--to meds``): shards, not graphs
            ledger = manifest["accounting"]["LABEVENTS"]
            return bool(ok and all(s["path"] in outputs and isinstance(s["edges"], int) for s in manifest["shards"])
                        and all(isinstance(ledger[k], int) for k in ("read", "kept", "quarantined", "deduplicated")))
        ok &= all(isinstance(g["split"], str) and isinstance(g["batch"], int) and g["path"] in outputs
                  and isinstance(g["memory"]["total"], int) for g in manifest["graphs"])
        limits_of(manifest)  # every feature tensor's columns, each with a name, a kind and a categorical's cardinality
        ledger = manifest["accounting"]["LABEVENTS"]
        ok &= all(isinstance(ledger[k], int) for k in ("read", "kept", "quarantined", "deduplicated"))
        return bool(ok)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def _problem(check: str, where: str, detail: str) -> StageError:
    return StageError(stage="graph", side="input", check=check, column=None, count=1,
                      failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=where,
                      detail=detail, advice=check_info(check).advice)


def verified_bytes(out_dir: Path, manifest: dict[str, Any], name: str) -> bytes:
    """An output's bytes, read once, refused unless they match the manifest's sha256."""
    path = Path(out_dir) / name
    if not path.is_file():
        raise _problem("graph_manifest", name, "listed in the manifest but missing")
    data = path.read_bytes()
    if sha256_of(data) != manifest["outputs"][name]["sha256"]:
        raise _problem("graph_manifest", name, "sha256 differs from the manifest's")
    return data


def verify_outputs(out_dir: Path, manifest: dict[str, Any], *, skip: frozenset[str] = frozenset()) -> list[StageError]:
    """Every output file (but those in ``skip``) missing or differing from the manifest's hash."""
    problems = []
    for name in manifest["outputs"]:
        if name in skip:
            continue
        try:
            verified_bytes(out_dir, manifest, name)
        except StageError as problem:
            problems.append(problem)
    return problems


_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    """Only plain containers, scalars and exact torch.Tensor: no PyG class, no tensor subclass."""
    import torch

    if type(value) is torch.Tensor or isinstance(value, _PLAIN):
        return True
    if type(value) in (dict, tuple, list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return all(isinstance(k, (str, int, tuple)) and _plain(v) for k, v in items)
    return False


def _graph_shaped(record: dict) -> bool:
    import torch

    stores = [record.get(key) for key in ("admission", "labitem", EDGE, REVERSE)]
    return all(isinstance(store, dict) for store in stores) and all(
        type(record[edge].get("edge_index")) is torch.Tensor for edge in (EDGE, REVERSE))


def load_plain(data: bytes, name: str) -> Any:
    """What a file's bytes hold, loaded with ``torch.load(..., weights_only=True)`` and required to be plain
    (tensors, numbers, strings and containers of them; no PyG class, no tensor subclass): a ``graph_unsafe``
    StageError naming ``name`` otherwise. Nothing in the bytes runs."""
    import torch

    try:
        record = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, AttributeError, TypeError) as exc:
        raise _problem("graph_unsafe", name, f"refused by torch.load(weights_only=True) "
                                             f"({type(exc).__name__})") from None
    if not _plain(record):
        raise _problem("graph_unsafe", name, PLAIN_ONLY)
    return record


PLAIN_ONLY = "holds objects other than plain tensors, numbers, strings and containers"


def load_graph_bytes(data: bytes, name: str) -> HeteroData:
    """A graph from its bytes, loaded with weights_only=True and then required to be plain graph data."""
    from torch_geometric.data import HeteroData

    record = load_plain(data, name)
    if not isinstance(record, dict):
        raise _problem("graph_unsafe", name, PLAIN_ONLY)
    if not _graph_shaped(record):
        raise _problem("graph_unsafe", name, "is not a badpoints graph (admission and labitem nodes, did and "
                                             "rev_did edges)")
    return HeteroData.from_dict(record)


def load_graph_file(path: Path) -> HeteroData:
    """One graph file, loaded safely (see :func:`load_graph_bytes`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise _problem("graph_manifest", str(path), f"unreadable ({exc.strerror})") from None
    return load_graph_bytes(data, str(path))


def limits_of(manifest: dict[str, Any]) -> GraphLimits:
    """What the manifest holds the graphs to: its last timestep, and each feature tensor's columns (a ValueError
    when a column is not described as a column is)."""
    features = manifest["features"]

    def column(described: dict[str, Any]) -> Column:
        cardinality = described.get("cardinality")
        if not isinstance(described["name"], str) or not (cardinality is None or type(cardinality) is int):
            raise ValueError(f"a feature column described as {described!r}")
        return Column(described["name"], described["kind"], cardinality)

    return GraphLimits(max_timestep=int(manifest["limits"]["max_timestep"]),
                       features={tensor: tuple(column(c) for c in features[tensor]) for tensor in FEATURES})


def feature_names(manifest: dict[str, Any], tensor: str) -> list[str]:
    """The names of a feature tensor's columns, in order, as the manifest records them (``tensor``: one of
    ``schemas.graph.FEATURES``, e.g. ``edge_attr``)."""
    return [column["name"] for column in manifest["features"][tensor]]


def read_graph(out_dir: Path, manifest: dict[str, Any], entry: dict[str, Any]) -> HeteroData:
    """The graph of one manifest entry: read once, checked against the manifest's hash, loaded safely."""
    content = verified_bytes(out_dir, manifest, entry["path"])
    return load_graph_bytes(content, entry["path"])  # the bytes that were hashed, not a second read


def where_of(entry: dict[str, Any]) -> str:
    """How findings name a manifest entry's graph, e.g. 'train/batch 3'."""
    return f"{entry['split']}/batch {entry['batch']}"


def load_graph(out_dir: Path, manifest: dict[str, Any], entry: dict[str, Any], limits: GraphLimits) -> HeteroData:
    """The graph of one manifest entry, read as :func:`read_graph` does and re-guarded (its first problem raised)."""
    data = read_graph(out_dir, manifest, entry)
    problems = graph_problems(data, limits, where=where_of(entry))
    if problems:
        raise problems[0]
    return data


def load_graphs(out_dir: Path, split: str) -> list[HeteroData]:
    """The graphs of one split, each checked against the manifest's hash, loaded safely and re-guarded."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    if manifest.get("kind") == "meds":
        raise _problem("graph_manifest", MANIFEST, "the build was written as MEDS (--to meds) and holds no graphs: "
                                                   "read its data/ shards, or build again without --to meds")
    limits = limits_of(manifest)
    return [load_graph(out_dir, manifest, entry, limits) for entry in manifest["graphs"] if entry["split"] == split]
