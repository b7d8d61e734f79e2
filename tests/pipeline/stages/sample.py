"""The sample carried through the real stages, so each stage's tests start from what ``flow.prepare`` hands it.

``run_stages`` calls clean -> split -> encode -> scale in the order and with the
arguments of :func:`pipeline.flow.prepare`; ``sample_stages`` does it once for
``data/sample`` and hands out fresh copies, so a test may change what it gets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.stages import clean, encode, fill, scale, split
from pipeline.config import Config, load_config
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import RawTables, check_raw
from pipeline.kernel.quarantine import Kept

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"


@dataclass(frozen=True)
class Stages:
    """The intermediate frames of one run, named for the stage output they are."""

    tables: RawTables  # typed raw tables (the clean stage's input)
    admissions: Kept  # clean_admissions
    labitems: Kept  # clean_labitems
    events: Kept  # clean_events
    splits: pd.DataFrame  # assign_splits
    split_admissions: pd.DataFrame  # clean admissions with SPLIT, merged as flow.prepare does
    split_events: pd.DataFrame  # attach_split
    vocabularies: encode.Vocabularies  # fit_vocabularies
    encoded: pd.DataFrame  # encode_events
    stats: scale.ZScoreStats  # fit_zscore
    scaled: pd.DataFrame  # apply_zscore (the fill stage's input)


def sample_text() -> dict[str, pd.DataFrame]:
    """The sample's tables as text, index = source line (fresh copies)."""
    return {name: frame.copy() for name, frame in _sample_text().items()}


def typed(text: dict[str, pd.DataFrame] | None = None) -> RawTables:
    """The raw stage's typed tables of ``text`` (the sample when None)."""
    return check_raw(sample_text() if text is None else text).tables


def run_stages(tables: RawTables, config: Config | None = None) -> Stages:
    """clean -> split -> encode -> scale on ``tables``, exactly as ``flow.prepare`` chains them."""
    config = config or load_config()
    admissions = clean.clean_admissions(tables.admissions)
    labitems = clean.clean_labitems(tables.labitems)
    events = clean.clean_events(tables.labevents, admissions.frame, labitems.frame,
                                empty_value=config.comments.empty_value)
    splits = split.assign_splits(admissions.frame, train=config.split.train, val=config.split.val,
                                 test=config.split.test, seed=config.split.seed)
    split_events = split.attach_split(events.frame, splits)
    split_admissions = admissions.frame.merge(splits[["HADM_ID", "SPLIT"]], on="HADM_ID", validate="one_to_one")
    vocabularies = encode.fit_vocabularies(split_events, split_admissions, labitems.frame,
                                           min_admissions=config.encode.min_admissions,
                                           fold_case=config.encode.fold_case)
    encoded = encode.encode_events(split_events, vocabularies)
    stats = scale.fit_zscore(encoded, eps=config.scale.eps, clip_sigma=config.scale.clip_sigma,
                             min_rows=config.scale.min_rows, constant_bound=config.scale.constant_bound,
                             bound=config.scale.bound, skew=config.scale.skew,
                             policy=scale.item_policies(config.scale.policy, labitems.frame),
                             min_admissions=config.encode.min_admissions)
    scaled = scale.apply_zscore(encoded, stats, warn_bound=config.scale.warn_bound,
                                error_bound=config.scale.error_bound)
    return Stages(tables=tables, admissions=admissions, labitems=labitems, events=events, splits=splits,
                  split_admissions=split_admissions, split_events=split_events, vocabularies=vocabularies,
                  encoded=encoded, stats=stats, scaled=scaled)


def sample_stages() -> Stages:
    """The sample through every stage up to fill, with the default config (fresh copies)."""
    return _fresh(_sample_stages())


def sample_filled() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sample's lab rows after fill (the bucket stage's input), and the admissions with SPLIT."""
    stages, config = sample_stages(), load_config()
    filled = fill.apply_fill(stages.scaled, fill.fit_fill(stages.scaled, policies=config.fill), config.fill).frame
    return filled, stages.split_admissions


def shuffled(frame: pd.DataFrame, seed: int = 7) -> pd.DataFrame:
    """The same rows (and source lines) in another order."""
    shuffled_frame = frame.sample(frac=1.0, random_state=seed)
    if shuffled_frame.index.equals(frame.index):  # pragma: no cover - a one-row frame
        raise ValueError("shuffling did not change the row order")
    return shuffled_frame


@functools.cache
def _sample_text() -> dict[str, pd.DataFrame]:
    tables, problems = load_text_tables(SAMPLE)
    if problems:
        raise problems[0]
    return {name: table.frame for name, table in tables.items()}


@functools.cache
def _sample_stages() -> Stages:
    return run_stages(typed())


def _fresh(value: Any) -> Any:
    if isinstance(value, pd.DataFrame):
        return value.copy()
    if hasattr(value, "__dataclass_fields__") and any(
            isinstance(getattr(value, f.name), (pd.DataFrame, Kept, RawTables)) for f in fields(value)):
        return replace(value, **{f.name: _fresh(getattr(value, f.name)) for f in fields(value)})
    return value
