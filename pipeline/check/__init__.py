"""badpoints' guards pointed at what a user's own pipeline makes: a table of any size checked against a schema of the
user's (``badpoints check``: :mod:`.run`, on the ``check`` stage: :mod:`.stage`; the table read in blocks:
:mod:`.table`; the schema loaded or inferred: :mod:`.schema`), the user's own preprocessing functions guarded call by
call (:mod:`.guard`: :class:`~pipeline.check.guard.Guard`), and any PyG graph, or the ``.pt`` files that hold graphs
(:mod:`.graph`)."""

_GRAPH = ["MAX_BYTES", "GraphCheck", "GraphFiles", "check_graph", "check_graph_files"]
__all__ = [*_GRAPH, "Guard"]


def __getattr__(name: str):
    """Each imported only when asked for: the graph checks use torch and PyG, so checking a table stays light."""
    if name == "Guard":
        from pipeline.check.guard import Guard

        return Guard
    if name in _GRAPH:
        from pipeline.check import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'pipeline.check' has no attribute {name!r}")
