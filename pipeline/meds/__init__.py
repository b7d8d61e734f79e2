"""``badpoints validate DIR`` on a MEDS dataset (a folder with ``data/`` and ``metadata/``): each shard read on its
own (:mod:`pipeline.meds.shards`, in ``workers`` processes), the partials put together (:mod:`.combine`), what
MEDS-Transforms' normalization will make of each code predicted (:mod:`.normalization`), and every finding of
``schemas/meds.py`` made (:mod:`.checks`) into the same :class:`pipeline.report.Report` as a MIMIC run's.

Nothing outside this package imports it but the CLI."""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path

import meds
import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.config import Config
from pipeline.meds import checks
from pipeline.meds.combine import Combined, combine
from pipeline.meds.normalization import given_mean_std, readiness
from pipeline.meds.shards import ShardPartial, read_shard, shard_name
from pipeline.report import InputFile, Report
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


def validate_meds(path: Path, config: Config, *, workers: int = 1) -> MedsValidation:
    """Check a MEDS dataset: every shard against meds' DataSchema, its subjects, codes and values, and whether
    MEDS-Transforms' normalization will give each code finite, bounded z. Every finding at once."""
    root = Path(path)
    data = root / meds.data_subdirectory
    paths = sorted(data.rglob("*.parquet"))
    assigned = subject_splits(root)
    partials = read_shards(data, paths, fit=fitted_subjects(data, paths, assigned), workers=workers,
                           bound=config.raw.valuenum_abs_bound)
    report = Report(inputs=[InputFile(p.name, p.path, p.sha256, p.rows) for p in partials], stages=dict(COLOURS))
    report.add(checks.cannot_read(partials, len(paths)))
    if report.exit_code == 2:
        return MedsValidation(report.with_severities(dict(config.severity)))
    combined = combine(partials)
    ready = readiness(combined.fitted, combined.codes, given_mean_std(root, combined.fitted))
    report.add([*checks.schema(partials), *checks.empty(partials, assigned), *checks.subjects(combined, assigned),
                *checks.codes(combined, listed_codes(root)), *checks.values(combined, config.raw.valuenum_abs_bound),
                *checks.normalization(ready, config.scale.warn_bound)])
    report.attrition = ledger(partials, assigned)
    checked = report.with_severities(dict(config.severity))
    return MedsValidation(replace(checked, summary=summary(report.attrition)), combined, ready)


def read_shards(data: Path, paths: list[Path], *, fit, workers: int, bound: float) -> list[ShardPartial]:
    """Each shard's partial, in name order; in ``workers`` processes (spawned, as the parts engine's) when there
    are several shards and workers, else here."""
    names = [shard_name(data, p) for p in paths]
    fits = [fit if isinstance(fit, np.ndarray) else name.startswith("train/") for name in names]
    read = functools.partial(_read, bound=bound)
    if workers <= 1 or len(paths) <= 1:
        return [read(p, name, f) for p, name, f in zip(paths, names, fits)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(paths)), mp_context=context) as pool:
        return list(pool.map(read, paths, names, fits))


def _read(path: Path, name: str, fit, *, bound: float) -> ShardPartial:
    return read_shard(path, name, fit=fit, bound=bound)


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
    """The attrition's MEDS ledger: per split its shards, rows and subjects named in subject_splits.parquet."""
    splits: dict[str, dict[str, int]] = {}
    for p in partials:
        entry = splits.setdefault(p.split, {"shards": 0, "rows": 0, "subjects": 0})
        entry["shards"] += 1
        entry["rows"] += p.rows
    if assigned is not None:
        for split, n in assigned.value_counts().sort_index().items():
            splits.setdefault(str(split), {"shards": 0, "rows": 0, "subjects": 0})["subjects"] = int(n)
    return {"MEDS": {"rows": sum(p.rows for p in partials), "splits": dict(sorted(splits.items()))}}


def summary(attrition: dict) -> list[tuple[str, str]]:
    """The terminal summary's line: rows, shards and subjects per split."""
    splits = attrition["MEDS"]["splits"]
    text = " · ".join(f"{name} {s['rows']:,} rows in {s['shards']} shard(s), {s['subjects']:,} subjects"
                      for name, s in splits.items())
    return [("MEDS", f"read {attrition['MEDS']['rows']:,} rows: {text}")]
