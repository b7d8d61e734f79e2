"""Guard any PyG graph: :func:`check_graph` checks one ``Data`` or ``HeteroData`` in memory, and
:func:`check_graph_files` the ``.pt`` files that hold graphs (one file, or every ``*.pt`` under a folder).

Both run the guard badpoints runs on its own graphs (:func:`schemas.pyg.pyg_problems`) and give badpoints
:class:`~pipeline.kernel.finding.Finding` records, as a run reports them. A file is read once, hashed, and loaded
only with ``torch.load(..., weights_only=True)`` (:func:`pipeline.output.write.load_plain`): a file that needs
more is refused as ``graph_unsafe`` and nothing in it runs. torch and PyG load when a graph is checked, not when
this module is imported.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from pipeline.kernel.finding import Finding
from pipeline.output.paths import os_reason
from pipeline.output.write import load_plain, sha256_of
from pipeline.reporting.findings import finding_from_error
from pipeline.reporting.report import InputFile
from schemas.catalogue import ERROR, INFO, WARNING, check_info
from schemas.errors import StageError
from schemas.pyg import GraphRules, pyg_problems, size_text, tensor_bytes
from schemas.scale import Z_ERROR_BOUND

if TYPE_CHECKING:  # torch and PyG load when a graph is checked
    from torch_geometric.data import Data, HeteroData

MAX_BYTES = 2 ** 30  # a graph whose tensors hold more is a warning (graph_bytes)


@dataclass(frozen=True)
class GraphCheck:
    """What :func:`check_graph` found in one graph: its findings, as a run reports them, and the bytes of its
    tensors. ``ok`` when no finding is an error (warnings and notes may remain)."""

    findings: tuple[Finding, ...]
    bytes: int
    problems: tuple[StageError, ...] = field(default=(), repr=False)  # the findings' errors, in the same order

    @property
    def ok(self) -> bool:
        return not any(f.severity == ERROR for f in self.findings)

    def _counts(self) -> str:
        count = {severity: sum(f.severity == severity for f in self.findings) for severity in (ERROR, WARNING, INFO)}
        return (f"{count[ERROR]} error{'s' * (count[ERROR] != 1)}, {count[WARNING]} warning"
                f"{'s' * (count[WARNING] != 1)}, {count[INFO]} note{'s' * (count[INFO] != 1)}")

    def __repr__(self) -> str:
        head = f"GraphCheck(ok={self.ok}: {self._counts()}; {size_text(self.bytes)} of tensors)"
        return "\n".join([head, *(f"  {f.severity}: {f.message}" for f in self.findings)])

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(f.severity)}</td><td><code>{html.escape(f.check)}</code></td>"
            f"<td><code>{html.escape('.'.join(p for p in (f.table, f.column) if p))}</code></td>"
            f"<td style='text-align:right'>{f.count:,}</td><td>{html.escape(f.message)}</td></tr>"
            for f in self.findings)
        table = ("<table><tr><th>severity</th><th>check</th><th>where</th><th>count</th><th>message</th></tr>"
                 f"{rows}</table>") if rows else ""
        return (f"<div><b>GraphCheck</b>: {'ok' if self.ok else 'errors'} ({html.escape(self._counts())}; "
                f"{html.escape(size_text(self.bytes))} of tensors){table}</div>")


def check_graph(data: Data | HeteroData, *, num_classes: int | None = None, label: str = "y",
                max_abs: float | None = Z_ERROR_BOUND, max_bytes: int | None = MAX_BYTES, isolated: bool = True,
                where: str | None = None, raise_error: bool = False) -> GraphCheck:
    """Guard one PyG graph: finite floats, none but the labels above ``max_abs`` in magnitude (by default the error
    bound badpoints' scale stage holds z to: [scale] error_bound's default; None: no bound), edge indices int64
    [2, E] inside the node counts, one row per edge and per node, the labels (``label``) whole and in
    ``[0, num_classes)`` when ``num_classes`` is given (without it, a note says they were not checked), nodes in no
    edge (a note, unless ``isolated`` is False), at most ``max_bytes`` of tensors (a warning; None: no bound), and
    PyG's ``validate()``.

    ``where`` names the graph in every finding (its table). ``raise_error``: the first error is raised as the
    :class:`StageError` behind it (warnings and notes never raise). The graph is not changed."""
    from torch_geometric.data import Data, HeteroData

    if not isinstance(data, (Data, HeteroData)):
        raise TypeError(f"check_graph takes a torch_geometric Data or HeteroData, not {type(data).__name__}")
    rules = GraphRules(num_classes=num_classes, label=label, max_abs=max_abs, unchecked_labels=True,
                       max_bytes=max_bytes, isolated=isolated)
    problems = pyg_problems(data, rules, where=where, side="input")
    if raise_error:
        first = next((p for p in problems if check_info(p.check).severity == ERROR), None)
        if first is not None:
            raise first
    return GraphCheck(findings=tuple(finding_from_error(p) for p in problems), bytes=tensor_bytes(data),
                      problems=tuple(problems))


class GraphFiles(NamedTuple):
    """What :func:`check_graph_files` found: every finding, and the files it read, for a report's inputs (each an
    :class:`InputFile` whose ``table`` is the name findings give the file and whose ``rows`` counts its graphs)."""

    findings: list[Finding]
    inputs: list[InputFile]


def check_graph_files(path: Path | str, *, num_classes: int | None = None, label: str = "y",
                      max_abs: float | None = Z_ERROR_BOUND, max_bytes: int | None = MAX_BYTES,
                      isolated: bool = True) -> GraphFiles:
    """Guard the graphs of a ``.pt`` file, or of every ``*.pt`` under a folder (in name order), each as
    :func:`check_graph` does. A file must hold a graph's ``to_dict()`` (a ``Data``'s or a ``HeteroData``'s),
    or a list of them (the i-th named ``FILE[i]``), loaded with ``weights_only=True`` only: anything else is
    ``graph_unsafe``. Findings name a file by its path (under a folder: relative to it). A path that does not
    exist raises FileNotFoundError."""
    path = Path(path)
    if path.is_dir():
        files = [(file, file.relative_to(path).as_posix()) for file in sorted(path.rglob("*.pt")) if file.is_file()]
    elif path.exists():
        files = [(path, path.as_posix())]
    else:
        raise FileNotFoundError(f"no such file or folder: {str(path)!r}")
    findings: list[Finding] = []
    inputs: list[InputFile] = []
    for file, name in files:
        found, read = _check_file(file, name, num_classes=num_classes, label=label, max_abs=max_abs,
                                  max_bytes=max_bytes, isolated=isolated)
        findings += found
        if read is not None:
            inputs.append(read)
    return GraphFiles(findings, inputs)


def _check_file(file: Path, name: str, **options: Any) -> tuple[list[Finding], InputFile | None]:
    """One file's findings, and the file as read (None when it could not be read)."""
    try:
        content = file.read_bytes()
    except OSError as exc:
        return [finding_from_error(_file_problem("load", "file_unreadable", name, os_reason(exc)))], None
    read = InputFile(table=name, path=str(file), sha256=sha256_of(content), rows=0, counts="graph")
    try:
        graphs = _graphs_of(load_plain(content, name), name)
    except StageError as refused:
        return [finding_from_error(refused)], read
    findings = [f for where, data in graphs for f in check_graph(data, where=where, **options).findings]
    return findings, replace(read, rows=len(graphs), counts="graph")


def _graphs_of(record: Any, name: str) -> list[tuple[str, Data | HeteroData]]:
    """The graphs a loaded file holds, each with the name its findings give it: one graph's ``to_dict()``, or a
    list or tuple of them."""
    if isinstance(record, (list, tuple)) and record and all(isinstance(item, dict) for item in record):
        return [(f"{name}[{i}]", _graph_of(item, f"{name}[{i}]")) for i, item in enumerate(record)]
    return [(name, _graph_of(record, name))]


def _graph_of(record: Any, name: str) -> Data | HeteroData:
    """A graph from its ``to_dict()``: a ``HeteroData``'s when every value is a store (a dict), with node types
    as names and edge types as (source, relation, target); a ``Data``'s when none is and it holds an
    ``edge_index`` or an ``x`` tensor."""
    import torch
    from torch_geometric.data import Data, HeteroData

    if not isinstance(record, dict) or not record:
        raise _file_problem("graph", "graph_unsafe", name, f"holds {type(record).__name__}, not a graph's to_dict()")
    stores = [isinstance(value, dict) for value in record.values()]
    keys_ok = all(isinstance(k, str) or (isinstance(k, tuple) and len(k) == 3 and all(isinstance(p, str) for p in k))
                  for k in record)
    try:
        if all(stores) and keys_ok:
            return HeteroData.from_dict(record)
        if not any(stores) and all(isinstance(k, str) for k in record) and any(
                isinstance(record.get(key), torch.Tensor) for key in ("edge_index", "x")):
            return Data.from_dict(record)
    except (TypeError, ValueError, AttributeError, KeyError, RuntimeError) as exc:
        raise _file_problem("graph", "graph_unsafe", name,
                            f"holds a dict PyG cannot make a graph of ({type(exc).__name__})") from None
    raise _file_problem("graph", "graph_unsafe", name, "holds a dict that is not a graph's to_dict() (a Data's: "
                                                       "edge_index or x tensors; a HeteroData's: a dict per store)")


def _file_problem(stage: str, check: str, name: str, detail: str) -> StageError:
    """A problem of a whole file (it cannot be read, or holds no graph), naming the file as its table."""
    return StageError(stage=stage, side="input", check=check, column=None, count=1,
                      failure_cases=pd.DataFrame({"line": pd.Series([], dtype="int64")}), table=name,
                      detail=detail, advice=check_info(check).advice, whole_file=check == "file_unreadable")
