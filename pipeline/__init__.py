"""badpoints' preprocessing pipeline, stage by stage in flow order (see ``pipeline.flow``).

Notebook use::

    from pipeline.reading.load import load_text_tables
    from pipeline.reading.parse import check_raw
    from pipeline import check_graph  # any PyG graph, guarded as badpoints guards its own
    from pipeline import Guard  # your own preprocessing functions, guarded call by call
"""

from pipeline.config import Config, load_config
from pipeline.builds import Build, build
from pipeline.flow import Validation, validate
from pipeline.reading.load import load_text_tables, read_table
from pipeline.reading.locate import locate_table
from pipeline.reading.parse import RawResult, RawTables, check_raw
from pipeline.preflight import Preflight, preflight
from pipeline.reporting.report import Finding, Report


def __getattr__(name: str):
    """``load_graphs``, ``GraphDataset`` and the graph checks use torch and PyG: only when asked for, so validating
    stays light; ``Guard`` too."""
    if name == "Guard":
        from pipeline.check.guard import Guard

        return Guard
    if name in ("check_graph", "check_graph_files", "GraphCheck"):
        from pipeline.check import graph

        return getattr(graph, name)
    if name == "load_graphs":
        from pipeline.output.write import load_graphs

        return load_graphs
    if name == "GraphDataset":
        from pipeline.output.dataset import GraphDataset

        return GraphDataset
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")

__all__ = [
    "Build",
    "build",
    "Config",
    "Finding",
    "GraphCheck",
    "GraphDataset",
    "Guard",
    "RawResult",
    "RawTables",
    "Report",
    "Validation",
    "Preflight",
    "check_graph",
    "check_graph_files",
    "check_raw",
    "load_graphs",
    "preflight",
    "load_config",
    "load_text_tables",
    "locate_table",
    "read_table",
    "validate",
]
