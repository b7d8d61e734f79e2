"""Graph stage: deduplicated edge rows to PyTorch Geometric heterographs, one per batch of admissions.

Per split, admissions are taken in HADM_ID order and batched; each batch is a ``HeteroData`` with ``admission``
nodes (``x_cat`` = the category indices of the admission columns ``[graph] admission_features`` chooses, by default
those known at admission; ``x`` = their numerical columns, none), ``labitem`` nodes (``x_cat`` = FLUID and CATEGORY
indices; the whole dictionary in every graph, so an index means the same item everywhere), ``(admission, did,
labitem)`` edges with ``edge_attr`` = [z-score, the marks the stages wrote: Z_BOUNDED, Z_UNSEEN, fill's indicators,
...], ``edge_attr_cat`` = [the category code of a categorical result] and ``timestep``, and the reverse
``(labitem, rev_did, admission)``. Categorical columns are int64 indices inside their cardinality, numerical ones
float32. As in PyG's heterograph tutorials, ``node_id`` is ``arange(num_nodes)`` (what ``torch.nn.Embedding``
indexes); the raw identifiers are ``admission.hadm_id`` and ``labitem.itemid``. The name, kind and cardinality of
every feature column come from :func:`feature_columns` and :func:`graph_features`, the one place the tensors take
them from; ``stats`` fits on the training split what PyTorch Frame's encoders read of each column. The edge rows are
sorted once and sliced by offsets: no rescan per batch.

The stage is this package: its options (``options``), the tensors (``tensors``: pure, no I/O), the training
split's column statistics (``stats``), the build that writes them (``build``: its target ``graphs``) and how it
shows in the HTML report (``view``); here, its declaration.
"""

from __future__ import annotations

from pipeline.kernel.finding import Finding
from pipeline.kernel.stage import Stage, Target
from pipeline.reporting.findings import summary_finding
from pipeline.stages.graph.build import STEPS, write_graphs
from pipeline.stages.graph.options import NAME, Options
from pipeline.stages.graph.tensors import (FEATURES, LABITEM_FEATURES, GraphBatch,  # noqa: F401
                                          admission_feature_columns, build_graphs, check_graphs,
                                          edge_feature_columns, feature_columns, graph_batches, graph_columns,
                                          graph_features, graph_limits, memory_estimate, stream_graphs)
from pipeline.stages.graph.view import TARGET, sections
from schemas.dedup import EdgeRows
from schemas.raw import KNOWN_AFTER_ADMISSION


def features_known_after_admission(options: Options) -> list[Finding]:
    """A warning when ``[graph] admission_features`` chooses a column recorded at or after discharge (the stage's
    :attr:`Stage.checks_options`: every run of the stages reports it, validate's too)."""
    leaking = [column for column in options.admission_features if column in KNOWN_AFTER_ADMISSION]
    if not leaking:
        return []
    return [summary_finding(
        stage=NAME, check="feature_known_after_admission", table="ADMISSIONS", column=", ".join(leaking),
        count=len(leaking), message="chosen in [graph] admission_features for admission.x_cat, but recorded at or "
                                    "after discharge")]


# Built by ``pipeline.builds`` from the edge rows when a build's target is ``graphs`` (torch and PyG load only then).
STAGE = Stage(NAME, colour="#e377c2", options=Options, takes=EdgeRows, progress=STEPS,
              checks_options=features_known_after_admission, target=Target(TARGET, write=write_graphs),
              sections=sections)
