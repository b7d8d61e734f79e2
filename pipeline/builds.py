"""A build: validate, then hand the finished run to the stage that makes the build's target (``--to``: the graph
stage's graphs, or the MEDS export's dataset), which makes, guards and stages its files; they and the report, the
fitted state, the quarantine and the manifest are written only if nothing is an error (``badpoints build``).

This module names no stage: the targets are declared by the stages that make them
(:attr:`pipeline.kernel.stage.Stage.target`), found in the one list through ``flow.ORDER``.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.cache import Cache
from pipeline.config import Config
from pipeline.engines import PANDAS, Engine
from pipeline.flow import ORDER, validate
from pipeline.output import write
from pipeline.output.built import Build
from pipeline.output.paths import check_output_dir, claim_output_dir
from pipeline.reporting.progress import NO_PROGRESS, Progress

TARGETS = tuple(ORDER.targets)  # what a build can write (``--to``), each declared by the stage that makes it
__all__ = ["TARGETS", "Build", "build"]


def build(data_dir: Path, out_dir: Path, config: Config, *, show_values: bool = False,
          cache: Cache | None = None, progress: Progress | None = None, engine: Engine | None = None,
          to: str = TARGETS[0]) -> Build:
    """Validate, run every stage, make and guard the target ``to`` (PyG graphs by default; ``"meds"``: a MEDS
    dataset), and write it only if nothing is an error.

    ``cache`` serves the raw-checked tables as in :func:`validate`; the stages always run. The output folder
    is checked and held before any work (:func:`claim_output_dir`): a second build into it is refused.
    """
    if to not in TARGETS:
        raise ValueError(f"a build writes one of {', '.join(TARGETS)}, not {to!r}")
    out = check_output_dir(out_dir, data_dir)
    with claim_output_dir(out):
        return _build_into(out, data_dir, config, show_values=show_values, cache=cache, progress=progress,
                           engine=engine or PANDAS, to=to)


def _build_into(out: Path, data_dir: Path, config: Config, *, show_values: bool, cache: Cache | None,
                progress: Progress | None, engine: Engine, to: str) -> Build:
    progress = progress or NO_PROGRESS
    validation = validate(data_dir, config, show_values=show_values, cache=cache, reuse_report=False, engine=engine,
                          progress=progress)
    if validation.exit_code or validation.prepared.edges is None:
        return Build(validation=validation, report=validation.report, out_dir=None, to=to)
    # The target's files are staged in OUT_DIR as they are made (the previous build stays as it was); a build that
    # finds errors, or fails, drops them.
    staged = write.StagedBuild(out)
    try:
        built = ORDER.targets[to].target.write(staged, validation, config, progress, engine=engine,
                                               data_dir=data_dir)
    except BaseException:
        staged.abandon()
        raise
    if built.out_dir is None:
        staged.abandon()
    return built
