"""What a build made (:class:`Build`): its validation and report, where its outputs went, and what its target
wrote: the graphs' summaries, or a MEDS dataset's shards."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Build:
    """A build's report, and where its outputs went (None when errors kept it from writing).

    ``to`` names its target (``build --to``); ``graphs`` holds per graph its split, batch, admissions, lab items,
    edges and memory estimate; ``shards`` per MEDS shard its split (badpoints' name), number, path, admissions and
    lab events."""

    validation: Any  # pipeline.flow.Validation
    report: Any  # pipeline.reporting.report.Report: the validation's findings and the target's
    out_dir: Path | None
    graphs: tuple[dict, ...] = ()
    to: str = "graphs"
    shards: tuple[dict, ...] = ()

    @property
    def exit_code(self) -> int:
        return self.report.exit_code
