"""Checks of what badpoints did not make itself: any PyG graph, and the ``.pt`` files that hold graphs
(:mod:`pipeline.check.graph`)."""

from pipeline.check.graph import MAX_BYTES, GraphCheck, GraphFiles, check_graph, check_graph_files

__all__ = ["MAX_BYTES", "GraphCheck", "GraphFiles", "check_graph", "check_graph_files"]
