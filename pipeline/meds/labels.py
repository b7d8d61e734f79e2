"""``badpoints check LABELS --meds MEDS_DIR``: a task defined elsewhere, its MEDS label file checked against the
MEDS dataset it was made for.

Each label file is held to ``meds.LabelSchema``'s shape from its footer (``meds_label_schema``), then only its
``subject_id`` and ``prediction_time`` are read. Each shard of ``MEDS_DIR/data`` is read, where the engine works,
for its ``subject_id``, ``time`` and (with ``--label-code``) ``code`` alone, and summed per subject into a small
:class:`ShardTimes`: rows, first and last timed event, the earliest event of a label code. Put together with the
split of every shard a subject has rows in (and ``subject_splits.parquet``'s, and the split folder of a label file
under one), each label is a row of :class:`schemas.meds_labels.MedsLabelTimes`, whose checks pandera runs at once
(:func:`pipeline.meds.checks.failing`); the labels they fail are named by subject and prediction time.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.engines import PANDAS
from pipeline.kernel.engine import Engine
from pipeline.kernel.finding import Finding
from pipeline.meds.checks import failing
from pipeline.meds.metadata import read_metadata
from pipeline.meds.run import MedsValidation, is_meds, ledger
from pipeline.meds.shards import ShardPartial, shard_name
from pipeline.meds.stage import ORDER
from pipeline.reading.arrow import NotRegular, opened
from pipeline.reporting.findings import LISTED, summary_finding
from pipeline.reporting.report import InputFile, Report
from schemas.errors import out_of_memory, require_validation
from schemas.meds import STAGE
from schemas.meds_labels import CHECKS as LABEL_CHECK_INFO, MedsLabelTimes

LABEL_CHECKS = tuple(info.id for info in LABEL_CHECK_INFO)  # what a label check runs: its JUnit's cases

SUBJECT_TIMES = ["subject_id", "rows", "first_time", "last_time", "label_code_time"]
NEVER = np.iinfo(np.int64).min  # the time of an event with none (static): visible at every prediction time
KEYS = ("subject_id", "prediction_time")


@dataclass(frozen=True)
class ShardTimes:
    """One shard, small: its name (``train/0``), split, digest and rows, why it could not be read (or None), and
    per subject (:data:`SUBJECT_TIMES`) its rows, first and last timed event and earliest label-code event
    (microseconds; null where none)."""

    name: str
    path: str
    split: str
    sha256: str = ""
    rows: int = 0
    unreadable: str | None = None
    subjects: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUBJECT_TIMES))


def shard_times(shard: tuple[str, str], *, codes: tuple[str, ...]) -> ShardTimes:
    """The :class:`ShardTimes` of one shard (``(path, name)``), reading only the columns it needs."""
    path, name = Path(shard[0]), shard[1]
    split = name.split("/")[0]
    columns = ["subject_id", "time", *(["code"] if codes else [])]
    try:
        digest, lacking, table = _read_parquet(path, columns, lambda schema: _lacking(schema, columns))
    except NotRegular as exc:
        return ShardTimes(name, str(path), split, unreadable=str(exc))
    except (OSError, pa.ArrowException) as exc:
        if out_of_memory(exc):
            raise
        return ShardTimes(name, str(path), split, unreadable=f"{type(exc).__name__}: {exc}"[:300])
    if table is None:
        return ShardTimes(name, str(path), split, digest, unreadable=lacking)
    time = table["time"].cast(pa.timestamp("us")).cast(pa.int64())
    frame = pa.table({"subject_id": table["subject_id"].cast(pa.int64()), "time": time})
    seen = pa.nulls(table.num_rows, pa.int64())
    if codes:
        hit = pc.fill_null(pc.is_in(table["code"], value_set=pa.array(codes, table["code"].type)), False)
        seen = pc.if_else(hit, pc.fill_null(time, NEVER), pa.scalar(None, pa.int64()))
    grouped = frame.append_column("label_code_time", seen).group_by("subject_id").aggregate(
        [("subject_id", "count"), ("time", "min"), ("time", "max"), ("label_code_time", "min")])
    nullable = {pa.int64(): pd.Int64Dtype()}.get
    subjects = pd.DataFrame({"subject_id": grouped["subject_id"].to_numpy(), "rows": grouped["subject_id_count"].to_numpy(),
                             "first_time": grouped["time_min"].to_pandas(types_mapper=nullable),
                             "last_time": grouped["time_max"].to_pandas(types_mapper=nullable),
                             "label_code_time": grouped["label_code_time_min"].to_pandas(types_mapper=nullable)})
    return ShardTimes(name, str(path), split, digest, table.num_rows, subjects=subjects)


def _read_parquet(path: Path, columns: list[str],
                  problem: Callable[[pa.Schema], str | None]) -> tuple[str, str | None, pa.Table | None]:
    """A Parquet file opened once (a regular file only): its sha256, what ``problem`` says of its schema, and its
    ``columns`` where it says nothing (else None)."""
    with opened(path) as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        handle.seek(0)
        found = problem(pq.read_schema(handle))
        handle.seek(0)
        return digest, found, pq.read_table(handle, columns=columns) if found is None else None


def _lacking(schema: pa.Schema, columns: list[str]) -> str | None:
    """Why a shard cannot give ``columns`` as MEDS has them (subject_id an integer, time a timestamp, code text)."""
    kinds = {"subject_id": pa.types.is_integer, "time": pa.types.is_timestamp,
             "code": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)}
    wrong = [f"{c} ({'absent' if c not in schema.names else schema.field(c).type})" for c in columns
             if c not in schema.names or not kinds[c](schema.field(c).type)]
    return None if not wrong else (f"not a MEDS shard: {', '.join(wrong)}; `badpoints validate` of the dataset "
                                   "says what else is wrong")


# -- the label files ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LabelFiles:
    """The labels read: subject_id, prediction_time (microseconds), split (the split folder of its file, or
    null), one row per label in file order; the files as inputs; what kept a file from being read."""

    labels: pd.DataFrame
    inputs: list[InputFile]
    findings: list[Finding]


def label_files(path: Path) -> list[Path]:
    """The label files at ``path``: the file itself, or every ``.parquet`` under the folder, by name."""
    path = Path(path)
    return sorted(path.rglob("*.parquet")) if path.is_dir() else [path]


def read_labels(path: Path, splits: Iterable[str], *, max_lines: int) -> LabelFiles:
    """Every label file at ``path`` held to meds.LabelSchema's shape and read; ``splits``: the dataset's split
    names, which a label file's first folder under ``path`` may be."""
    path, splits = Path(path), set(splits)
    frames, inputs, findings = [], [], []
    for file in label_files(path):
        name = file.relative_to(path).as_posix() if path.is_dir() else file.name
        folder = name.split("/")[0] if "/" in name else None
        read = _label_file(file, name, max_lines=max_lines)
        if isinstance(read, Finding):
            findings.append(read)
            continue
        frame, digest = read
        frames.append(frame.assign(split=folder if folder in splits else None))
        inputs.append(InputFile(name, str(file), digest, len(frame)))
    empty = pd.DataFrame({"subject_id": pd.Series([], dtype=np.int64), "prediction_time": pd.Series([], dtype=np.int64),
                          "split": pd.Series([], dtype=object)})
    labels = pd.concat(frames, ignore_index=True) if frames else empty
    return LabelFiles(labels, inputs, findings)


def _label_file(file: Path, name: str, *, max_lines: int) -> tuple[pd.DataFrame, str] | Finding:
    try:
        digest, shape, table = _read_parquet(file, list(KEYS), _shape_problem)
    except (OSError, pa.ArrowException) as exc:
        if out_of_memory(exc):
            raise
        return summary_finding(stage="load", check="file_unreadable", table=name, column=None, count=1,
                               message=f"{file} could not be read as Parquet ({type(exc).__name__}: {exc})"[:400])
    if table is None:
        return summary_finding(stage=STAGE, check="meds_label_schema", table=name, column=None, count=1,
                               message=f"meds.LabelSchema refuses it: {shape}")
    for column in KEYS:
        null = np.flatnonzero(table[column].is_null().to_numpy(zero_copy_only=False))
        if len(null):
            return summary_finding(stage=STAGE, check="meds_label_schema", table=name, column=column,
                                   count=len(null), lines=null[:max_lines].tolist(),
                                   message=f"{len(null):,} label(s) with a null {column} (rows "
                                           f"{', '.join(map(str, null[:LISTED]))}{' ...' if len(null) > LISTED else ''})")
    frame = pd.DataFrame({"subject_id": table["subject_id"].to_numpy(),
                          "prediction_time": table["prediction_time"].cast(pa.int64()).to_numpy()})
    return frame, digest


def _shape_problem(schema: pa.Schema) -> str | None:
    """What meds.LabelSchema says of a file of ``schema`` (its columns and types), or None."""
    try:
        meds.LabelSchema.validate(schema.empty_table())
    except Exception as exc:  # noqa: BLE001 - flexible_schema's errors name the columns
        if out_of_memory(exc):
            raise
        return str(exc)
    return None


@dataclass(frozen=True)
class LabelsMade:
    """What a label check made, for the MEDS stage's report hooks: each label with its subject's times
    (:func:`label_times`) and no fitted state."""

    times: pd.DataFrame
    fitted: dict = field(default_factory=dict)


# -- the check ---------------------------------------------------------------------------------------------------
def check_labels(labels: Path, root: Path, config: Any, *, codes: tuple[str, ...] = (),
                 engine: Engine | None = None) -> MedsValidation:
    """Check the MEDS label file (or folder of them) ``labels`` against the MEDS dataset at ``root``: every finding
    of ``schemas/meds_labels.py`` at once. ``codes``: the codes whose event makes the label (``MEDS_DEATH``). The
    shards are read where the ``engine`` works (by default this process)."""
    require_validation()
    engine = engine or PANDAS
    report = Report(stages=ORDER.colours)
    missing = _missing(Path(labels), Path(root))
    if missing:
        report.add(missing)
        return MedsValidation(report.with_severities(dict(config.severity)), config=config, engine=engine,
                              checks=LABEL_CHECKS)
    data = Path(root) / meds.data_subdirectory
    names = [(str(p), shard_name(data, p)) for p in sorted(data.rglob("*.parquet"))]
    shards = list(engine.each(shard_times, names, codes=tuple(codes)))
    assigned = read_metadata(Path(root)).splits
    read = read_labels(Path(labels), {s.split for s in shards}, max_lines=config.report.max_lines)
    report.inputs.extend([*read.inputs, *(InputFile(s.name, s.path, s.sha256, s.rows) for s in shards)])
    report.add([*read.findings, *(summary_finding(stage="load", check="file_unreadable", table=s.name, column=None,
                                                  count=1, message=f"{s.path} could not be read ({s.unreadable})")
                                  for s in shards if s.unreadable is not None)])
    if not shards:
        report.add([summary_finding(stage="load", check="file_missing", table="data", column=None, count=1,
                                    message=f"no .parquet shard under {data} (a MEDS dataset keeps them in "
                                            "data/{split}/*.parquet)")])
    made = None
    if report.exit_code != 2:
        made = LabelsMade(label_times(read.labels, shards, assigned))
        report.add(label_findings(made.times, Path(labels).name, codes, max_lines=config.report.max_lines))
        report.attrition = {**ledger([_partial(s) for s in shards], assigned), "MEDS labels": _ledger(made.times)}
    checked = report.with_severities(dict(config.severity))
    made = made or LabelsMade(pd.DataFrame())
    return MedsValidation(replace(checked, summary=_summary(checked, made, config)), made, config=config, engine=engine,
                          checks=LABEL_CHECKS)


def _missing(labels: Path, root: Path) -> list[Finding]:
    """``file_missing`` for a label path or a MEDS dataset that is not there (exit 2)."""
    found = []
    if not labels.exists() or (labels.is_dir() and not label_files(labels)):
        found.append(summary_finding(stage="load", check="file_missing", table=labels.name, column=None, count=1,
                                     message=f"no label file (.parquet) at {labels}"))
    if not is_meds(root):
        found.append(summary_finding(stage="load", check="file_missing", table=root.name, column=None, count=1,
                                     message=f"{root} is not a MEDS dataset (a folder with data/ and metadata/)"))
    return found


def _partial(shard: ShardTimes) -> ShardPartial:
    """What the MEDS ledger reads of a shard: its name, split, rows and subjects; an unreadable shard is one."""
    return ShardPartial(shard.name, shard.path, shard.split, shard.sha256, shard.rows, unreadable=shard.unreadable,
                        subjects=shard.subjects[["subject_id"]])


def label_times(labels: pd.DataFrame, shards: list[ShardTimes], assigned: pd.Series | None) -> pd.DataFrame:
    """Per label, :class:`~schemas.meds_labels.MedsLabelTimes`' columns: its subject's times over every shard, and
    how many splits put the subject anywhere (its shards, subject_splits.parquet, its label files)."""
    parts = [s.subjects.assign(split=s.split) for s in shards if s.unreadable is None and len(s.subjects)]
    per_shard = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*SUBJECT_TIMES, "split"])
    subjects = per_shard.groupby("subject_id").agg(events=("rows", "sum"), first_time=("first_time", "min"),
                                                   last_time=("last_time", "max"),
                                                   label_code_time=("label_code_time", "min"))
    places = [per_shard[["subject_id", "split"]], labels[["subject_id", "split"]].dropna()]
    if assigned is not None:  # subject_splits.parquet's split, for the subjects labelled
        named = assigned[assigned.index.isin(labels["subject_id"])]
        places.append(pd.DataFrame({"subject_id": named.index.to_numpy(np.int64), "split": named.to_numpy(str)}))
    where = pd.concat(places, ignore_index=True).drop_duplicates().sort_values(["subject_id", "split"])
    count = where.groupby("subject_id").size()
    split = where.groupby("subject_id")["split"].first()
    spread = where[where["subject_id"].isin(count.index[count > 1])]  # few: their splits said by name
    split.update(spread.groupby("subject_id")["split"].agg(", ".join))
    times = labels[["subject_id", "prediction_time"]].join(subjects, on="subject_id")
    times["events"] = times["events"].fillna(0).astype(np.int64)
    for column in ("first_time", "last_time", "label_code_time"):
        times[column] = times[column].astype("Int64")
    times["split"] = times["subject_id"].map(split)
    times["splits"] = times["subject_id"].map(count).fillna(0).astype(np.int64)
    return times


def label_findings(times: pd.DataFrame, table: str, codes: tuple[str, ...], *, max_lines: int) -> list[Finding]:
    """Every label that fails a check of :class:`~schemas.meds_labels.MedsLabelTimes`, one finding per check."""
    failed = failing(MedsLabelTimes, times[list(MedsLabelTimes.to_schema().columns)])
    shown = functools.partial(_when, times)
    at = shown("prediction_time")
    said = {
        "meds_label_subject_unknown": ("label(s) of a subject with no event in the dataset", None),
        "meds_label_after_last_event": ("label(s) asked after the subject's last event", "last event " + shown("last_time")),
        "meds_label_no_history": ("label(s) asked before the subject's first event",
                                  ("first event " + shown("first_time")).fillna("only events with no time")),
        "meds_label_code_seen": (f"label(s) whose subject has an event of {', '.join(codes)} by the prediction time",
                                 ("at " + shown("label_code_time")).where(times["label_code_time"] != NEVER,
                                                                          "with no time (static)")),
    }
    found = []
    for check, (what, why) in said.items():
        mask = failed(check)
        if mask.any():
            names = times["subject_id"].astype(str) + " at " + at
            found.append(_named(check, table, mask, names, what, why, max_lines=max_lines))
    split = failed("meds_label_split")
    if split.any():
        spread = times[split].groupby("subject_id").agg(labels=("split", "size"), split=("split", "first"))
        listing = ", ".join(f"{s} ({row.split}; {row.labels} label(s))" for s, row in spread.head(LISTED).iterrows())
        more = f" +{len(spread) - LISTED} more in the JSON report" if len(spread) > LISTED else ""
        found.append(summary_finding(stage=STAGE, check="meds_label_split", table=table, column="subject_id",
                                     count=len(spread), lines=np.flatnonzero(split)[:max_lines].tolist(),
                                     items=[int(s) for s in spread.index],
                                     message=f"{len(spread):,} subject(s) in more than one split (their shards, "
                                             f"subject_splits.parquet, label files): {listing}{more}"))
    return found


def _when(times: pd.DataFrame, column: str) -> pd.Series:
    """The times of ``column`` (microseconds) as text, ``2130-01-01T08:00:00``; null where none (or no time)."""
    values = times[column].astype("Int64")
    known = values.notna() & (values != NEVER)
    text = np.datetime_as_string(values.where(known, 0).to_numpy(np.int64).astype("datetime64[us]"), unit="s")
    return pd.Series(text, index=times.index, dtype=object).where(known.to_numpy(), None)


def _named(check: str, table: str, mask: np.ndarray, names: pd.Series, what: str, why: pd.Series | None, *,
           max_lines: int) -> Finding:
    """One finding naming the labels of ``mask`` by subject and prediction time (``why``: what follows each)."""
    rows = np.flatnonzero(mask)
    listed = names.iloc[rows[:LISTED]]
    if why is not None:
        listed = listed + " (" + why.iloc[rows[:LISTED]].fillna("none") + ")"
    more = f" +{len(rows) - LISTED} more in the JSON report" if len(rows) > LISTED else ""
    return summary_finding(stage=STAGE, check=check, table=table, column="prediction_time", count=len(rows),
                           lines=rows[:max_lines].tolist(), items=names.iloc[rows].tolist(),
                           message=f"{len(rows):,} {what}: {', '.join(listed)}{more}")


def _ledger(times: pd.DataFrame) -> dict:
    """The labels per split of their subject (``several`` where it has more than one, ``none`` without any)."""
    split = times["split"].where(times["splits"] <= 1, "several").fillna("none")
    return {"labels": len(times), "subjects": int(times["subject_id"].nunique()),
            "splits": {str(k): int(v) for k, v in split.value_counts().sort_index().items()}}


def _summary(report: Report, made: LabelsMade, config: Any) -> list[tuple[str, str]]:
    """The terminal summary: the dataset's rows per split (the MEDS run's line) and the labels per split."""
    lines = [line for stage in ORDER.stages if stage.summary is not None
             for line in stage.summary(stage.shown(config, read=None, prepared=made, report=report, engine=PANDAS,
                                                   names={}))]
    labels = (report.attrition or {}).get("MEDS labels")
    if labels and labels["labels"]:
        splits = ", ".join(f"{split} {n:,}" for split, n in labels["splits"].items())
        lines.append(("labels", f"{labels['labels']:,} labels of {labels['subjects']:,} subjects: {splits}"))
    return lines
