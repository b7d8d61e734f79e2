"""A MEDS run (``badpoints validate DIR`` on a folder with ``data/`` and ``metadata/``): the MEDS stage's fit read
on the engine (each shard a partial where the engine works, :meth:`pipeline.kernel.engine.Engine.each`: this process
for the pandas engine), what MEDS-Transforms' normalization will make of each code predicted
(:mod:`pipeline.meds.formula`), and every finding of ``schemas/meds.py`` made (:mod:`pipeline.meds.checks`) into the
same :class:`pipeline.reporting.report.Report` as a lab run's, in the run's order (:data:`pipeline.meds.stage.ORDER`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import meds
import numpy as np
import pandas as pd

from pipeline.engines import PANDAS
from pipeline.kernel.engine import Engine
from pipeline.kernel.stage import Order
from pipeline.meds import checks, zscored
from pipeline.meds.combine import Combined
from pipeline.meds.compare import Comparison, per_split
from pipeline.meds.compare import compare as compared
from pipeline.meds.compare import ledger as compare_ledger
from pipeline.meds.formula import given_mean_std, readiness
from pipeline.meds.metadata import CODES, Metadata, read_metadata
from pipeline.meds.shards import ShardPartial, shard_name
from pipeline.meds.stage import ORDER, STAGE, Shard
from pipeline.reporting.progress import NO_PROGRESS, Progress
from pipeline.reporting.report import InputFile, Report
from schemas.errors import require_validation


def is_meds(path: Path) -> bool:
    """A MEDS dataset: a folder holding ``data/`` and ``metadata/`` folders."""
    path = Path(path)
    return (path / meds.data_subdirectory).is_dir() and (path / "metadata").is_dir()


@dataclass(frozen=True)
class Folder:
    """A MEDS folder read: its shards' partials, how many shards, subject_splits.parquet (None without), the
    vocabulary of a folder normalization wrote (None for a MEDS dataset), the MEDS stage's fit of it (None where
    no shard could be read) and its metadata/ as read (:func:`pipeline.meds.metadata.read_metadata`)."""

    root: Path
    partials: list[ShardPartial]
    shards: int
    assigned: pd.Series | None
    vocab: dict[int, str] | None
    combined: Combined | None = None
    metadata: Metadata = Metadata()


@dataclass(frozen=True)
class Made:
    """What a MEDS run made, for its report hooks: the folder read, the one it was compared with, the readiness
    table of every fitted code (:func:`pipeline.meds.formula.readiness`; None for a folder normalization wrote) and
    the comparison."""

    folder: Folder
    earlier: Folder | None = None
    ready: pd.DataFrame | None = None
    comparison: Comparison | None = None

    @property
    def fitted(self) -> dict[str, Combined]:
        return {STAGE.name: self.folder.combined} if self.folder.combined is not None else {}

    @property
    def normalized(self) -> bool:
        return self.folder.vocab is not None


@dataclass(frozen=True)
class MedsValidation:
    """A MEDS run: its report, what it made (None where a shard could not be read), the config it ran with and the
    engine it read the shards on."""

    report: Report
    made: Made | None = None
    config: Any = None
    engine: Engine = PANDAS
    order: Order = ORDER
    tables: Any = None  # a MEDS run keeps no typed tables
    names: dict = field(default_factory=dict)  # its findings name codes and subjects as they are
    checks: tuple[str, ...] | None = None  # the checks it ran, by id (a label check's); None: the catalogue's

    @property
    def prepared(self) -> Made | None:
        return self.made

    @property
    def combined(self) -> Combined | None:
        return self.made.folder.combined if self.made is not None else None

    @property
    def ready(self) -> pd.DataFrame | None:
        return self.made.ready if self.made is not None else None

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def meds_steps() -> tuple[str, ...]:
    """The progress steps a MEDS run reports, in order: its order's stages' (reading the shards, checking them)."""
    return tuple(step for stage in ORDER.stages for step in stage.steps)


def validate_meds(path: Path, config: Any, *, compare: Path | None = None, engine: Engine | None = None,
                  progress: Progress | None = None) -> MedsValidation:
    """Check a MEDS dataset: every shard against meds' DataSchema, its subjects, codes and values, and whether
    MEDS-Transforms' normalization will give each code finite, bounded z. A folder normalization wrote
    (:mod:`pipeline.meds.zscored`) is checked for the z it holds instead. With ``compare`` (the folder before
    the stage), also the rows, subjects and codes the stage took out (:mod:`pipeline.meds.compare`). Every finding
    at once. The shards are read where the ``engine`` works (by default this process); pandera's validation must be
    on, as for every run."""
    require_validation()
    engine, progress = engine or PANDAS, progress or NO_PROGRESS
    reading, checking = meds_steps()
    progress.step(reading)
    folder = read_folder(Path(path), config, engine=engine)
    earlier = read_folder(Path(compare), config, engine=engine) if compare is not None else None
    progress.step(checking, rows=sum(p.rows for p in folder.partials))
    report = Report(inputs=_inputs(folder, earlier), stages=ORDER.colours)
    report.add([*checks.cannot_read(folder.partials, folder.shards), *checks.metadata(folder.metadata.problems)])
    if earlier is not None:
        report.add([*checks.cannot_read(earlier.partials, earlier.shards), *checks.metadata(earlier.metadata.problems)])
    if report.exit_code == 2:
        progress.end()
        return MedsValidation(report.with_severities(dict(config.severity)), config=config, engine=engine)
    made = _checked(report, folder, earlier, config)
    progress.end()
    checked = report.with_severities(dict(config.severity))
    validation = MedsValidation(checked, made, config=config, engine=engine)
    lines = [line for stage in ORDER.stages if stage.summary is not None
             for line in stage.summary(stage.shown(config, read=None, prepared=made, report=checked, engine=engine,
                                                   names={}))]
    return replace(validation, report=replace(checked, summary=lines))


def _inputs(folder: Folder, earlier: Folder | None) -> list[InputFile]:
    inputs = [InputFile(p.name, p.path, p.sha256, p.rows) for p in folder.partials]
    if earlier is not None:
        inputs += [InputFile(f"before {p.name}", p.path, p.sha256, p.rows) for p in earlier.partials]
    return inputs


def _checked(report: Report, folder: Folder, earlier: Folder | None, config: Any) -> Made:
    """Every finding of a readable folder (and of the comparison with ``earlier``) added to ``report``, with its
    ledgers; what the run made."""
    combined, ready, comparison = folder.combined, None, None
    report.add([*checks.schema(folder.partials), *checks.empty(folder.partials, folder.assigned),
                *checks.subjects(combined, folder.assigned)])
    meta = folder.metadata
    listing = not meta.refused(CODES.name)  # a codes.parquet refused lists nothing: its finding says so
    if folder.vocab is None:
        ready = readiness(combined.fitted, combined.codes, given_mean_std(meta.codes, combined.fitted))
        report.add([*checks.codes(combined, meta.listed(), listing=listing),
                    *checks.values(combined, config.raw.valuenum_abs_bound),
                    *checks.normalization(ready, config.scale.warn_bound)])
    else:  # z already: no raw bound, no readiness
        known = pd.Index(sorted(folder.vocab.values())) if folder.vocab else meta.listed()
        report.add([*(checks.unlisted(combined, known) if listing else []),
                    *checks.normalized(combined, config.scale.warn_bound)])
    report.attrition = ledger(folder.partials, folder.assigned)
    if earlier is not None:
        comparison = compared(earlier.root, folder.root, earlier.partials, folder.partials)
        report.add([*checks.schema(earlier.partials, side="before "), *checks.compared(comparison)])
        report.attrition["MEDS compare"] = compare_ledger(comparison)
    return Made(folder, earlier, ready, comparison)


def read_folder(root: Path, config: Any, *, engine: Engine) -> Folder:
    """Every shard of ``root/data`` read into its partial by the MEDS stage's fit, on the ``engine``; a normalized
    folder's with [scale] warn_bound as the bound and nothing fitted, a MEDS dataset's with [raw] valuenum_abs_bound
    and MEDS-Transforms' fitted rows."""
    data = root / meds.data_subdirectory
    paths = sorted(data.rglob("*.parquet"))
    meta = read_metadata(root)
    assigned = meta.splits
    names = [shard_name(data, p) for p in paths]
    if zscored.is_normalized(paths):
        vocab, bound, fit = meta.vocabulary(), config.scale.warn_bound, False
    else:
        vocab, bound, fit = None, config.raw.valuenum_abs_bound, fitted_subjects(data, paths, assigned)
    shards = [Shard(path, name, fit if isinstance(fit, np.ndarray) else bool(fit) and name.startswith("train/"))
              for path, name in zip(paths, names)]
    partials, combined = STAGE.fit.of_items(engine.each, shards, bound=bound, vocab=vocab)
    return Folder(root, partials, len(paths), assigned, vocab, combined, meta)


def fitted_subjects(data: Path, paths: list[Path], assigned: pd.Series | None) -> bool | np.ndarray:
    """Which rows MEDS-Transforms fits on: the train/ shards (True), or, without any, the subjects
    subject_splits.parquet puts in train (their ids)."""
    if any(shard_name(data, p).startswith("train/") for p in paths) or assigned is None:
        return True
    return assigned.index[assigned == "train"].to_numpy()


def ledger(partials: list[ShardPartial], assigned: pd.Series | None) -> dict:
    """The attrition's MEDS ledger: per split its shards, rows and subjects named in subject_splits.parquet (without
    it, as a stage's output has none: the subjects with rows there)."""
    splits: dict[str, dict[str, int]] = {}
    for p in partials:
        entry = splits.setdefault(p.split, {"shards": 0, "rows": 0, "subjects": 0})
        entry["shards"] += 1
        entry["rows"] += p.rows
    named = assigned.value_counts() if assigned is not None else per_split(partials)["subjects"]
    for split, n in named.sort_index().items():
        splits.setdefault(str(split), {"shards": 0, "rows": 0, "subjects": 0})["subjects"] = int(n)
    return {"MEDS": {"rows": sum(p.rows for p in partials), "splits": dict(sorted(splits.items()))}}
