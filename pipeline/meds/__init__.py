"""``badpoints validate DIR`` on a MEDS dataset (a folder with ``data/`` and ``metadata/``): each shard read on its
own (:mod:`pipeline.meds.shards`, in ``workers`` processes), the partials put together (:mod:`.combine`), what
MEDS-Transforms' normalization will make of each code predicted (:mod:`.normalization`), and every finding of
``schemas/meds.py`` made (:mod:`.checks`) into the same :class:`pipeline.reporting.report.Report` as a MIMIC run's.

Beside it, :mod:`.export` writes a build as MEDS (``badpoints build --to meds``, for :mod:`pipeline.builds`) and
:mod:`.view` draws the HTML report's MEDS sections."""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import meds
import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.config import Config
from pipeline.kernel.engine import Engine
from pipeline.meds import checks, normalized
from pipeline.meds.combine import Combined, combine
from pipeline.meds.compare import compare as compared
from pipeline.meds.compare import ledger as compare_ledger
from pipeline.meds.compare import per_split
from pipeline.meds.compare import summary as compare_summary
from pipeline.meds.normalization import given_mean_std, readiness
from pipeline.meds.shards import ShardPartial, read_shard, shard_name
from pipeline.reporting.report import InputFile, Report
from schemas.meds import STAGE

COLOURS = {"load": "#7f7f7f", STAGE: "#1f77b4"}  # as flow.ORDER draws them


def is_meds(path: Path) -> bool:
    """A MEDS dataset: a folder holding ``data/`` and ``metadata/`` folders."""
    path = Path(path)
    return (path / meds.data_subdirectory).is_dir() and (path / "metadata").is_dir()


@dataclass(frozen=True)
class MedsValidation:
    """A MEDS run: its report, what was read and combined (None where no shard could be read), and the readiness
    table of every fitted code (:func:`pipeline.meds.normalization.readiness`)."""

    report: Report
    combined: Combined | None = None
    ready: pd.DataFrame | None = None

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def validate_meds(path: Path, config: Config, *, workers: int = 1, compare: Path | None = None,
                  engine: Engine | None = None) -> MedsValidation:
    """Check a MEDS dataset: every shard against meds' DataSchema, its subjects, codes and values, and whether
    MEDS-Transforms' normalization will give each code finite, bounded z. A folder normalization wrote
    (:mod:`pipeline.meds.normalized`) is checked for the z it holds instead. With ``compare`` (the folder before
    the stage), also the rows, subjects and codes the stage took out (:mod:`pipeline.meds.compare`). Every finding
    at once. The shards are read where an ``engine``'s parts are worked on (its worker processes, or a Dask
    cluster's workers: :meth:`pipeline.engines.base.Engine.each`), else in ``workers`` processes of this machine."""
    folder = read_folder(Path(path), config, workers=workers, engine=engine)
    earlier = read_folder(Path(compare), config, workers=workers, engine=engine) if compare is not None else None
    inputs = [InputFile(p.name, p.path, p.sha256, p.rows) for p in folder.partials]
    if earlier is not None:
        inputs += [InputFile(f"before {p.name}", p.path, p.sha256, p.rows) for p in earlier.partials]
    report = Report(inputs=inputs, stages=dict(COLOURS))
    report.add(checks.cannot_read(folder.partials, folder.shards))
    if earlier is not None:
        report.add(checks.cannot_read(earlier.partials, earlier.shards))
    if report.exit_code == 2:
        return MedsValidation(report.with_severities(dict(config.severity)))
    combined, ready = combine(folder.partials), None
    report.add([*checks.schema(folder.partials), *checks.empty(folder.partials, folder.assigned),
                *checks.subjects(combined, folder.assigned)])
    if folder.vocab is None:
        ready = readiness(combined.fitted, combined.codes, given_mean_std(folder.root, combined.fitted))
        report.add([*checks.codes(combined, listed_codes(folder.root)),
                    *checks.values(combined, config.raw.valuenum_abs_bound),
                    *checks.normalization(ready, config.scale.warn_bound)])
    else:  # z already: no raw bound, no readiness
        known = pd.Index(sorted(folder.vocab.values())) if folder.vocab else listed_codes(folder.root)
        report.add([*checks.unlisted(combined, known), *checks.normalized(combined, config.scale.warn_bound)])
    report.attrition = ledger(folder.partials, folder.assigned)
    lines = summary(report.attrition, normalized=folder.vocab is not None)
    if earlier is not None:
        comparison = compared(earlier.root, folder.root, earlier.partials, folder.partials,
                              combine(earlier.partials), combined)
        report.add(checks.compared(comparison))
        report.attrition["MEDS compare"] = compare_ledger(comparison)
        lines += compare_summary(comparison)
    checked = report.with_severities(dict(config.severity))
    return MedsValidation(replace(checked, summary=lines), combined, ready)


@dataclass(frozen=True)
class Folder:
    """A MEDS folder read: its shards' partials, how many shards, subject_splits.parquet (None without), and the
    vocabulary of a folder normalization wrote (None for a MEDS dataset)."""

    root: Path
    partials: list[ShardPartial]
    shards: int
    assigned: pd.Series | None
    vocab: dict[int, str] | None


def read_folder(root: Path, config: Config, *, workers: int, engine: Engine | None = None) -> Folder:
    """Every shard of ``root/data`` read into its partial; a normalized folder's with [scale] warn_bound as the
    bound and nothing fitted, a MEDS dataset's with [raw] valuenum_abs_bound and MEDS-Transforms' fitted rows."""
    data = root / meds.data_subdirectory
    paths = sorted(data.rglob("*.parquet"))
    assigned = subject_splits(root)
    if normalized.is_normalized(paths):
        vocab = normalized.vocabulary(root)
        partials = read_shards(data, paths, fit=False, workers=workers, bound=config.scale.warn_bound, vocab=vocab,
                               engine=engine)
    else:
        vocab = None
        partials = read_shards(data, paths, fit=fitted_subjects(data, paths, assigned), workers=workers,
                               bound=config.raw.valuenum_abs_bound, engine=engine)
    return Folder(root, partials, len(paths), assigned, vocab)


def read_shards(data: Path, paths: list[Path], *, fit, workers: int, bound: float,
                vocab: dict[int, str] | None = None, engine: Engine | None = None) -> list[ShardPartial]:
    """Each shard's partial, in name order: with an ``engine``, where it works on parts; else in ``workers``
    processes (spawned, as the parts engine's) when there are several shards and workers, else here."""
    names = [shard_name(data, p) for p in paths]
    fits = [fit if isinstance(fit, np.ndarray) else bool(fit) and name.startswith("train/") for name in names]
    if engine is not None:
        return list(engine.each(_read_item, list(zip(paths, names, fits)), bound=bound, vocab=vocab))
    read = functools.partial(_read, bound=bound, vocab=vocab)
    if workers <= 1 or len(paths) <= 1:
        return [read(p, name, f) for p, name, f in zip(paths, names, fits)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(paths)), mp_context=context) as pool:
        return list(pool.map(read, paths, names, fits))


def _read(path: Path, name: str, fit, *, bound: float, vocab: dict[int, str] | None) -> ShardPartial:
    return read_shard(path, name, fit=fit, bound=bound, vocab=vocab)


def _read_item(item: tuple[Path, str, Any], *, bound: float, vocab: dict[int, str] | None) -> ShardPartial:
    """:func:`_read` of one (path, name, fit), as :meth:`Engine.each` hands it."""
    return _read(*item, bound=bound, vocab=vocab)


def fitted_subjects(data: Path, paths: list[Path], assigned: pd.Series | None) -> bool | np.ndarray:
    """Which rows MEDS-Transforms fits on: the train/ shards (True), or, without any, the subjects
    subject_splits.parquet puts in train (their ids)."""
    if any(shard_name(data, p).startswith("train/") for p in paths) or assigned is None:
        return True
    return assigned.index[assigned == "train"].to_numpy()


def subject_splits(root: Path) -> pd.Series | None:
    """subject_splits.parquet as subject_id -> split (the first where a subject is named twice), or None."""
    path = root / meds.subject_splits_filepath
    if not path.is_file():
        return None
    table = pq.read_table(path, columns=["subject_id", "split"])
    splits = pd.Series(table["split"].to_numpy(zero_copy_only=False), index=table["subject_id"].to_numpy())
    return splits[~splits.index.duplicated()].sort_index()


def listed_codes(root: Path) -> pd.Index | None:
    """The codes codes.parquet lists, or None without the file."""
    path = root / meds.code_metadata_filepath
    if not path.is_file():
        return None
    return pd.Index(pc.unique(pq.read_table(path, columns=["code"])["code"]).to_pylist())


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


def summary(attrition: dict, *, normalized: bool = False) -> list[tuple[str, str]]:
    """The terminal summary's line: rows, shards and subjects per split (of a folder normalization wrote, said)."""
    splits = attrition["MEDS"]["splits"]
    text = " · ".join(f"{name} {s['rows']:,} rows in {s['shards']} shard(s), {s['subjects']:,} subjects"
                      for name, s in splits.items())
    label = "MEDS (normalized: integer codes, z)" if normalized else "MEDS"
    return [(label, f"read {attrition['MEDS']['rows']:,} rows: {text}")]
