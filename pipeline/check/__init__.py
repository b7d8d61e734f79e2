"""badpoints' guards pointed at what a user's own pipeline makes: a table of any size checked against a schema of the
user's (``badpoints check``: :mod:`.run`, on the ``check`` stage: :mod:`.stage`; the table read in blocks:
:mod:`.table`; the schema loaded or inferred: :mod:`.schema`), and any PyG graph, or the ``.pt`` files that hold
graphs (:mod:`.graph`)."""

__all__ = ["MAX_BYTES", "GraphCheck", "GraphFiles", "check_graph", "check_graph_files"]


def __getattr__(name: str):
    """The graph checks use torch and PyG: imported only when asked for, so checking a table stays light."""
    if name in __all__:
        from pipeline.check import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'pipeline.check' has no attribute {name!r}")
