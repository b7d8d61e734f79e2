"""The stages that turn the checked raw tables into graph edges, in flow order, then the build targets made from the
edges (the graph stage's graphs, the MEDS export's dataset): the one list.

Each stage is a module of this package that declares itself (its ``STAGE``, a :class:`pipeline.kernel.stage.Stage`)
beside its code; ``pipeline.flow`` runs this list, and the report's stage order, the HTML colours, the progress
steps, the config sections and the check catalogue's order derive from it. Adding a stage is its module, its
schema module in ``schemas/`` and one line here.
"""

from __future__ import annotations

from pipeline.stages import bucket, clean, dedup, encode, fill, graph, meds_export, scale, split, task, text

STAGES = (
    text.STAGE,
    clean.STAGE,
    split.STAGE,
    task.STAGE,
    encode.STAGE,
    scale.STAGE,
    fill.STAGE,
    bucket.STAGE,
    dedup.STAGE,
    graph.STAGE,
    meds_export.STAGE,
)
