"""A small MEDS 0.4 dataset written from nothing, with the MEDS cases docs/meds.md lists planted on request.

:func:`write_meds` writes ``data/{train,tuning,held_out}/*.parquet``, ``metadata/codes.parquet``,
``metadata/subject_splits.parquet`` and ``metadata/dataset.json`` with the ``meds`` package's own pyarrow
schemas, from a seeded Generator: the same ``cases`` and ``seed`` give the same bytes.

Without cases it is a valid, unremarkable dataset: :data:`TRAIN_SUBJECTS` subjects in two train shards,
:data:`TUNING_SUBJECTS` in ``tuning/0`` and :data:`HELD_OUT_SUBJECTS` in ``held_out/0``; each subject has a
``MEDS_BIRTH``, an ``ADMISSION//EMERGENCY`` and :data:`DRAWS` lab draws six hours apart with one value of each of
the :data:`BASE_LABS` (codes as MEDS-Extract's MIMIC-IV configuration names them, ``LAB//itemid//unit``). Each
shard's rows are grouped by subject (ascending) and sorted by time.

Each case in :data:`CASES` is a function that adds or moves rows; its :class:`Case` says what it plants and what
MEDS-Transforms 0.7 makes of it (``fit_normalization`` -> ``fit_vocabulary_indices`` -> ``normalization``,
measured by ``tests/bench/test_meds_transforms.py``; the float32 arithmetic is :mod:`bench.meds_formula`). Every
case is valid under ``meds``' schema check (types and nulls only), which is the point: nothing before
normalization notices any of them.

The draft keeps a value as float64 with NaN meaning null (no case plants a NaN value); it is cast to float32 when
written, as MEDS stores it: 1e6 +- 1e-3 is then 1e6 exactly (float32's spacing there is 0.0625).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import meds
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SPLITS = ("train", "tuning", "held_out")
TRAIN_SUBJECTS, TUNING_SUBJECTS, HELD_OUT_SUBJECTS = 40, 10, 10
TRAIN_SHARDS = 2  # train/0 holds the first half of the train subjects, train/1 the rest
FIRST_ID = {"train": 1001, "tuning": 2001, "held_out": 3001}
DRAWS = 4
DRAW_GAP = np.timedelta64(6, "h")
EPOCH = np.datetime64("2130-01-01T08:00:00", "us")  # MIMIC-IV-like shifted dates
CREATED_AT = "2026-01-01T00:00:00"  # fixed, so that dataset.json is the same bytes every time

# code: (mean, sd, description, parent code)
BASE_LABS = {
    "LAB//50912//mg/dL": (1.0, 0.3, "Creatinine", "LOINC/2160-0"),
    "LAB//50971//mEq/L": (4.2, 0.5, "Potassium", "LOINC/2823-3"),
    "LAB//51221//%": (35.0, 5.0, "Hematocrit", "LOINC/4544-3"),
}
BIRTH, ADMISSION = meds.birth_code, "ADMISSION//EMERGENCY"

CONSTANT = "LAB//CONSTANT//U"  # 1.0, whose square is exact in float32
CONSTANT_TENTH = "LAB//CONSTANT_TENTH//U"  # 0.1, whose float32 square is rounded
SINGLE = "LAB//SINGLE//mg/dL"
LARGE_OFFSET = "LAB//LARGE_OFFSET//pg/mL"  # 1e6 +- 1e-3
CANCELLATION = "LAB//CANCELLATION//mg/dL"  # 10,000 +- 0.01 over 10,000 train rows
CANCELLATION_ROWS = 10_000
INF_INPUT = "LAB//INF_INPUT//mmol/L"
HELD_OUT_ONLY = "LAB//HELD_OUT_ONLY//U"
TUNING_ONLY = "LAB//TUNING_ONLY//U"
MIXED = "LAB//MIXED//U"
NOT_IN_CODES = "LAB//NOT_IN_CODES//U"
MANY = "LAB//MANY//mg/dL"
MANY_ROWS = 70_000  # past 65,535: the counts' type becomes uint32
MANY_OUTLIER = 100.0 + 15.0 * 1_000  # a held_out value 1,000 sds out: a real, finite |z| past warn_bound
UNSORTED_SUBJECT = FIRST_ID["train"] + TRAIN_SUBJECTS // 2  # the first subject of train/1
SHARD_SPLIT_SUBJECT = FIRST_ID["train"] + 1  # train/0; its later base-lab rows in train/1
SPLIT_SPLIT_SUBJECT = FIRST_ID["train"] + TRAIN_SUBJECTS // 2 + 1  # train/1; its later base-lab rows in held_out/0
EMPTIED_SPLIT = "tuning"

COLUMNS = ["shard", "subject_id", "time", "code", "numeric_value", "text_value"]


@dataclass(frozen=True)
class Case:
    """A planted problem: its codes (the codes it adds; none where it moves rows), what it plants, and what
    MEDS-Transforms 0.7's normalization makes of it."""

    name: str
    codes: tuple[str, ...]
    plants: str
    meds_transforms: str


@dataclass
class Draft:
    """The dataset being made: every row with its shard, the codes ever added (codes.parquet lists them, as an
    extraction does before any filter) and those to leave out, and the subjects whose rows are written in
    reverse time order."""

    rng: np.random.Generator
    subjects: pd.DataFrame  # subject_id, split, shard, admit
    rows: pd.DataFrame
    listed: set[str]
    unlisted: set[str]
    reversed_subjects: set[int]

    def add(self, frame: pd.DataFrame) -> None:
        self.rows = pd.concat([self.rows, frame[COLUMNS]], ignore_index=True)
        self.listed |= set(frame["code"])

    def of(self, split: str) -> pd.DataFrame:
        return self.subjects[self.subjects["split"] == split]


CASES: dict[str, Case] = {}
_PLANT: dict[str, Callable[[Draft], None]] = {}


def case(name: str, *, codes: tuple[str, ...] = (), plants: str, meds_transforms: str):
    """Register a case's planting function under ``name``, with what it plants and what MEDS-Transforms makes
    of it."""

    def register(plant: Callable[[Draft], None]) -> Callable[[Draft], None]:
        CASES[name] = Case(name, codes, plants, meds_transforms)
        _PLANT[name] = plant
        return plant

    return register


@dataclass(frozen=True)
class MedsFixture:
    """What :func:`write_meds` wrote: the folder, the cases planted, every data row (``shard``, ``split``, and
    the MEDS columns; ``numeric_value`` float32 with NaN for null) and every subject's split."""

    root: Path
    cases: tuple[str, ...]
    rows: pd.DataFrame
    subjects: pd.DataFrame

    def codes(self, *cases: str) -> set[str]:
        """The codes the given cases planted (all planted cases without arguments)."""
        return {code for name in (cases or self.cases) for code in CASES[name].codes}

    def shard_paths(self) -> list[Path]:
        return sorted((self.root / meds.data_subdirectory).rglob("*.parquet"))


def write_meds(root: Path, cases: Iterable[str] = (), *, seed: int = 0,
               code_stats: Mapping[str, tuple[float, float]] | None = None, draws: int = DRAWS) -> MedsFixture:
    """Write a small MEDS 0.4 dataset into ``root`` with the named :data:`CASES` planted (:data:`PLANTED_CASES`:
    the cases docs/meds.md lists; ``CASES``: those and ``many_values``); returns what was written.

    ``code_stats`` (code: (mean, std)) adds ``values/mean`` and ``values/std`` columns to codes.parquet, null for
    the other codes, as a fit made elsewhere hands them to MEDS-Transforms' normalization (which then uses them
    instead of its own, and gives every row of a code with a null there a null z). ``draws``: each subject's lab
    draws (three rows each); more than :data:`DRAWS` make a dataset that takes workers a while to read."""
    asked = set(cases)
    if asked - set(CASES):
        raise ValueError(f"unknown MEDS fixture cases {sorted(asked - set(CASES))}; known: {sorted(CASES)}")
    cases = tuple(name for name in CASES if name in asked)  # planted in the declared order, whatever the caller's
    draft = _base(np.random.default_rng(seed), draws)
    for name in cases:
        _PLANT[name](draft)
    rows = _ordered(draft)
    root = Path(root)
    _write(root, rows, draft, code_stats or {})
    rows = rows.assign(split=rows["shard"].str.split("/").str[0])
    return MedsFixture(root=root, cases=cases, rows=rows, subjects=draft.subjects[["subject_id", "split"]].copy())


# The base dataset ---------------------------------------------------------------------------------------------


def _base(rng: np.random.Generator, draws_each: int = DRAWS) -> Draft:
    subjects = _subjects()
    draft = Draft(rng=rng, subjects=subjects, rows=pd.DataFrame(columns=COLUMNS), listed=set(), unlisted=set(),
                  reversed_subjects=set())
    n = len(subjects)
    years = rng.integers(20, 90, n)
    draft.add(subjects.assign(time=subjects["admit"] - years * np.timedelta64(365, "D"), code=BIRTH,
                              numeric_value=np.nan, text_value=None))
    draft.add(subjects.assign(time=subjects["admit"], code=ADMISSION, numeric_value=np.nan, text_value=None))
    draws = subjects.loc[subjects.index.repeat(draws_each)].reset_index(drop=True)
    draws["time"] = draws["admit"] + np.tile(np.arange(draws_each), n) * DRAW_GAP
    for code, (mean, sd, _, _) in BASE_LABS.items():
        values = np.round(np.maximum(rng.normal(mean, sd, len(draws)), 0.1), 1)
        draft.add(draws.assign(code=code, numeric_value=values, text_value=None))
    return draft


def _subjects() -> pd.DataFrame:
    """Every subject with its split, its shard and its admission time (a day and an hour apart each)."""
    counts = {"train": TRAIN_SUBJECTS, "tuning": TUNING_SUBJECTS, "held_out": HELD_OUT_SUBJECTS}
    parts = []
    for split, count in counts.items():
        ids = FIRST_ID[split] + np.arange(count)
        shards = (f"{split}/" + (np.arange(count) * TRAIN_SHARDS // count).astype(str) if split == "train"
                  else np.full(count, f"{split}/0"))
        parts.append(pd.DataFrame({"subject_id": ids, "split": split, "shard": shards}))
    subjects = pd.concat(parts, ignore_index=True)
    subjects["admit"] = EPOCH + np.arange(len(subjects)) * np.timedelta64(25, "h")
    return subjects


def _rows_at(subjects: pd.DataFrame, code: str, values, *, draw: int = 1, text=None) -> pd.DataFrame:
    """One row of ``code`` per subject, at its draw ``draw``, with the given values (and text)."""
    return subjects.assign(time=subjects["admit"] + draw * DRAW_GAP, code=code,
                           numeric_value=np.asarray(values, dtype=np.float64), text_value=text)


# The cases, in the order they are planted ---------------------------------------------------------------------


@case("constant", codes=(CONSTANT, CONSTANT_TENTH),
      plants=f"{CONSTANT}: every train value 1.0 (one per train subject), held_out 1.0 and 2.0; {CONSTANT_TENTH}: "
             "the same with 0.1, held_out 0.1 and 0.2",
      meds_transforms="float32: sum_sqd/n - mean^2 is 0 for both, std 0: the 40 train z and held_out x are NaN "
                      "(0/0), held_out 2x is +inf. With many_values (float64 arithmetic) 1.0 is the same, but 0.1's "
                      "rounded float32 square leaves a residue: std 3.0e-5, every z finite, held_out 0.2 at 3,344")
def _constant(draft: Draft) -> None:
    train, held_out = draft.of("train"), draft.of("held_out").iloc[:2]
    for code, value in ((CONSTANT, 1.0), (CONSTANT_TENTH, 0.1)):
        draft.add(_rows_at(train, code, np.full(len(train), value)))
        draft.add(_rows_at(held_out, code, [value, 2 * value]))


@case("single_value", codes=(SINGLE,),
      plants="one train value, 5.5; tuning: 4.0; held_out: 5.5 and 7.0",
      meds_transforms="n = 1: var = x^2 - x^2 = 0, std = 0: the train row and held_out 5.5 NaN, held_out 7.0 "
                      "+inf, tuning 4.0 -inf (gone with emptied_split); 5.5's square is exact, so the same in float64")
def _single_value(draft: Draft) -> None:
    draft.add(_rows_at(draft.of("train").iloc[:1], SINGLE, [5.5]))
    draft.add(_rows_at(draft.of("tuning").iloc[:1], SINGLE, [4.0]))
    draft.add(_rows_at(draft.of("held_out").iloc[:2], SINGLE, [5.5, 7.0]))


@case("ill_conditioned", codes=(LARGE_OFFSET, CANCELLATION),
      plants=f"{LARGE_OFFSET}: 1e6 + U(-1e-3, 1e-3), one per train and held_out subject (1e6 exactly in "
             f"float32); {CANCELLATION}: 10,000 + U(-0.01, 0.01), {CANCELLATION_ROWS:,} train rows "
             f"({CANCELLATION_ROWS // TRAIN_SUBJECTS} per train subject, a minute apart) and one per held_out subject",
      meds_transforms="sum_sqd/n - mean^2 cancels. Float32: both variances 0; every large-offset z NaN; the "
                      "cancellation code's std is 0, not 0.0058: of its 10,010 z 4,763 +inf, 4,801 -inf, 446 NaN "
                      "(x = mean). Float64 (with many_values): negative residues, every z of both NaN")
def _ill_conditioned(draft: Draft) -> None:
    rng = draft.rng
    train, held_out = draft.of("train"), draft.of("held_out")
    for subjects in (train, held_out):
        draft.add(_rows_at(subjects, LARGE_OFFSET, 1e6 + rng.uniform(-1e-3, 1e-3, len(subjects)), draw=2))
    per = CANCELLATION_ROWS // len(train)
    rows = train.loc[train.index.repeat(per)].reset_index(drop=True)
    rows["time"] = rows["admit"] + np.timedelta64(1, "D") + np.tile(np.arange(per), len(train)) * np.timedelta64(1, "m")
    draft.add(rows.assign(code=CANCELLATION, numeric_value=1e4 + rng.uniform(-0.01, 0.01, len(rows)), text_value=None))
    draft.add(_rows_at(held_out, CANCELLATION, 1e4 + rng.uniform(-0.01, 0.01, len(held_out)), draw=3))


@case("inf_input", codes=(INF_INPUT,),
      plants="N(2, 0.2) for every train and held_out subject, but the first train subject's value is +inf",
      meds_transforms="inf is 'present' (not null, not NaN): sum = sum_sqd = inf, var = inf - inf = NaN: every z "
                      "of the code NaN, in every split")
def _inf_input(draft: Draft) -> None:
    train, held_out = draft.of("train"), draft.of("held_out")
    values = np.round(draft.rng.normal(2.0, 0.2, len(train)), 2)
    values[0] = np.inf
    draft.add(_rows_at(train, INF_INPUT, values))
    draft.add(_rows_at(held_out, INF_INPUT, np.round(draft.rng.normal(2.0, 0.2, len(held_out)), 2)))


@case("unsorted", plants=f"subject {UNSORTED_SUBJECT}'s rows (train/1) written in reverse time order",
      meds_transforms="not noticed: the stages group by code, and normalization keeps the input's row order")
def _unsorted(draft: Draft) -> None:
    draft.reversed_subjects.add(UNSORTED_SUBJECT)


@case("split_subject",
      plants=f"subject {SHARD_SPLIT_SUBJECT}'s base-lab rows after its second draw in train/1 (its others in "
             f"train/0); subject {SPLIT_SPLIT_SUBJECT}'s (train/1, 'train' in subject_splits) in held_out/0",
      meds_transforms="not noticed: the fit reads the train/ shards by prefix, so the held_out rows of a train "
                      "subject are left out of the fit and normalized like any held_out row")
def _split_subject(draft: Draft) -> None:
    rows = draft.rows
    later = rows["code"].isin(list(BASE_LABS)) & (rows["time"] > rows["subject_id"].map(
        draft.subjects.set_index("subject_id")["admit"]) + DRAW_GAP)
    rows.loc[later & (rows["subject_id"] == SHARD_SPLIT_SUBJECT), "shard"] = "train/1"
    rows.loc[later & (rows["subject_id"] == SPLIT_SPLIT_SUBJECT), "shard"] = "held_out/0"


@case("unseen", codes=(HELD_OUT_ONLY, TUNING_ONLY),
      plants=f"{HELD_OUT_ONLY} on three held_out subjects, {TUNING_ONLY} on two tuning subjects (gone with "
             "emptied_split); never in train; both listed in codes.parquet",
      meds_transforms="no train rows, so fit_normalization's codes.parquet (a left join from the codes seen in "
                      "train) drops them, they get no vocabulary index, and normalization's inner join drops "
                      "their rows without a word")
def _unseen(draft: Draft) -> None:
    draft.add(_rows_at(draft.of("held_out").iloc[:3], HELD_OUT_ONLY, [3.0, 4.0, 5.0]))
    draft.add(_rows_at(draft.of("tuning").iloc[:2], TUNING_ONLY, [1.0, 2.0]))


@case("text_and_numbers", codes=(MIXED,),
      plants="a number (N(50, 10)) for most subjects, but every fifth has only text ('<1' or 'HEMOLYZED') and no "
             "number",
      meds_transforms="numbers normalized from the numeric rows only; the text rows' z is null and normalization "
                      "writes no text_value column, so their text is gone")
def _text_and_numbers(draft: Draft) -> None:
    for split in ("train", "held_out"):
        subjects = draft.of(split)
        values = np.round(draft.rng.normal(50.0, 10.0, len(subjects)), 1)
        text = pd.Series([None] * len(subjects), dtype=object, index=subjects.index)
        texty = np.arange(len(subjects)) % 5 == 4
        values[texty] = np.nan
        text[texty] = np.where(np.arange(texty.sum()) % 2 == 0, "<1", "HEMOLYZED")
        draft.add(_rows_at(subjects, MIXED, values, text=text))


@case("missing_from_codes", codes=(NOT_IN_CODES,),
      plants="N(10, 2) for every train and held_out subject; the code is left out of metadata/codes.parquet",
      meds_transforms="not noticed: fit_normalization's codes.parquet starts from the codes seen in train, so it "
                      "is fitted and normalized like any other (description and parent_codes null)")
def _missing_from_codes(draft: Draft) -> None:
    for split in ("train", "held_out"):
        subjects = draft.of(split)
        draft.add(_rows_at(subjects, NOT_IN_CODES, np.round(draft.rng.normal(10.0, 2.0, len(subjects)), 1)))
    draft.unlisted.add(NOT_IN_CODES)


@case("many_values", codes=(MANY,),
      plants=f"{MANY_ROWS:,} train values N(100, 15) ({MANY_ROWS // TRAIN_SUBJECTS:,} per train subject, a second "
             f"apart) and one held_out outlier, {MANY_OUTLIER:,.0f} (1,000 sds out); not one of the planted cases, "
             "and not in PLANTED_CASES",
      meds_transforms="the largest count passes 65,535, so the reducer's counts become uint32 and normalization "
                      "divides float32 sums by them in float64: a constant code whose float32 square is rounded "
                      "(0.1) gets a positive variance residue, hence finite z of noise (held_out 0.2 at 3,344); "
                      "see constant and ill_conditioned. The outlier's z is finite, about 1,000")
def _many_values(draft: Draft) -> None:
    train = draft.of("train")
    per = MANY_ROWS // len(train)
    rows = train.loc[train.index.repeat(per)].reset_index(drop=True)
    rows["time"] = rows["admit"] + np.timedelta64(2, "D") + np.tile(np.arange(per), len(train)) * np.timedelta64(1, "s")
    draft.add(rows.assign(code=MANY, numeric_value=np.round(draft.rng.normal(100.0, 15.0, len(rows)), 1),
                          text_value=None))
    draft.add(_rows_at(draft.of("held_out").iloc[:1], MANY, [MANY_OUTLIER], draw=2))


@case("emptied_split", plants=f"every {EMPTIED_SPLIT} row removed (planted last, so the rows other cases put "
      f"there go too): {EMPTIED_SPLIT}/0.parquet has 0 rows, as filter_subjects leaves a split it empties; "
      f"subject_splits still names its subjects",
      meds_transforms="reads the 0-row shard, writes a 0-row shard and exits 0")
def _emptied_split(draft: Draft) -> None:
    draft.rows = draft.rows[~draft.rows["shard"].str.startswith(EMPTIED_SPLIT + "/")].reset_index(drop=True)


PLANTED_CASES = tuple(name for name in CASES if name != "many_values")

# The codes MEDS-Transforms 0.7 writes NaN or inf z for on write_meds(root, PLANTED_CASES), sorted: measured by
# tests/bench/test_meds_transforms.py, predicted by bench.meds_formula. With many_values CONSTANT_TENTH is finite.
NON_FINITE = [CANCELLATION, CONSTANT, CONSTANT_TENTH, INF_INPUT, LARGE_OFFSET, SINGLE]


# Writing ------------------------------------------------------------------------------------------------------


def _ordered(draft: Draft) -> pd.DataFrame:
    """Each shard's rows grouped by subject and sorted by time (stable), but for the reversed subjects."""
    rows = draft.rows.assign(time=pd.to_datetime(draft.rows["time"]).astype("datetime64[us]"))
    rows = rows.sort_values(["shard", "subject_id", "time"], kind="stable").reset_index(drop=True)
    for subject in draft.reversed_subjects:
        at = np.flatnonzero(rows["subject_id"].to_numpy() == subject)
        rows.iloc[at] = rows.iloc[at[::-1]].to_numpy()
    rows["numeric_value"] = rows["numeric_value"].astype(np.float64).astype(np.float32)
    rows["subject_id"] = rows["subject_id"].astype(np.int64)
    return rows


def _write(root: Path, rows: pd.DataFrame, draft: Draft, code_stats: Mapping[str, tuple[float, float]]) -> None:
    root = Path(root)
    shards = set(draft.subjects["shard"]) | set(rows["shard"])
    for shard in sorted(shards):
        path = root / meds.data_subdirectory / f"{shard}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_data_table(rows[rows["shard"] == shard]), path)
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    pq.write_table(_codes_table(sorted(draft.listed - draft.unlisted), code_stats), root / meds.code_metadata_filepath)
    subjects = draft.subjects.sort_values("subject_id")
    splits = pa.table({"subject_id": pa.array(subjects["subject_id"], pa.int64()),
                       "split": pa.array(subjects["split"], pa.string())}, schema=meds.SubjectSplitSchema.schema())
    pq.write_table(splits, root / meds.subject_splits_filepath)
    (root / meds.dataset_metadata_filepath).write_text(json.dumps(dataset_metadata(), indent=2) + "\n")


def _data_table(rows: pd.DataFrame) -> pa.Table:
    values = rows["numeric_value"].to_numpy(dtype=np.float32)
    return pa.table({
        "subject_id": pa.array(rows["subject_id"].to_numpy(dtype=np.int64), pa.int64()),
        "time": pa.array(rows["time"].to_numpy(dtype="datetime64[us]"), pa.timestamp("us")),
        "code": pa.array(rows["code"].tolist(), pa.string()),
        "numeric_value": pa.array(values, pa.float32(), mask=np.isnan(values)),
        "text_value": pa.array(rows["text_value"], pa.large_string(), from_pandas=True),
    }, schema=meds.DataSchema.schema())


def _codes_table(codes: list[str], code_stats: Mapping[str, tuple[float, float]]) -> pa.Table:
    planted = {code: f"planted: {name}" for name, spec in CASES.items() for code in spec.codes}
    described = {code: (spec[2], [spec[3]]) for code, spec in BASE_LABS.items()}
    described |= {BIRTH: ("Birth", None), ADMISSION: ("Admission through the emergency department", None)}
    table = pa.table({
        "code": pa.array(codes, pa.string()),
        "description": pa.array([described.get(code, (planted.get(code), None))[0] for code in codes], pa.string()),
        "parent_codes": pa.array([described.get(code, (None, None))[1] for code in codes], pa.list_(pa.string())),
    }, schema=meds.CodeMetadataSchema.schema())
    if code_stats:
        for i, name in enumerate(("values/mean", "values/std")):
            given = [code_stats[code][i] if code in code_stats else None for code in codes]
            table = table.append_column(name, pa.array(given, pa.float64()))
    return table


def dataset_metadata() -> dict:
    return {"dataset_name": "badpoints MEDS fixture", "dataset_version": "1", "etl_name": "tests/meds.py",
            "etl_version": "1", "meds_version": meds.__version__, "created_at": CREATED_AT}


# What MEDS-Transforms' normalization writes -------------------------------------------------------------------


def write_normalized(before: Path, root: Path) -> None:
    """Write into ``root`` what MEDS-Transforms 0.7's ``fit_normalization`` -> ``fit_vocabulary_indices`` ->
    ``normalization`` writes for the MEDS folder ``before``, without it: ``data/{split}/*.parquet`` with ``code``
    as its vocabulary index (numbered from 1 over the fitted codes, sorted; the smallest unsigned type), the z in
    ``numeric_value`` (float32; the formula of :mod:`pipeline.meds.formula`, equal to the tool's bit for bit)
    and no ``text_value``; ``metadata/codes.parquet`` with ``code/vocab_index``; ``.logs/normalization.done``.
    Rows of a code with no fitted row are dropped, as the tool's inner join drops them."""
    from pipeline.meds.formula import given_mean_std, zscore  # the reproduced formula
    from pipeline.meds.metadata import read_metadata
    from bench.meds_formula import fit_folder

    before, root = Path(before), Path(root)
    fitted = fit_folder(before)
    given = given_mean_std(read_metadata(before).codes, fitted)
    index_type = next(t for t in (pa.uint8(), pa.uint16(), pa.uint32()) if len(fitted.codes) < 2 ** t.bit_width)
    for path in sorted((before / meds.data_subdirectory).rglob("*.parquet")):
        table = pq.read_table(path)
        codes = np.asarray(table["code"].to_pylist(), dtype=object)
        null = table["numeric_value"].is_null().to_numpy(zero_copy_only=False)
        values = table["numeric_value"].to_numpy(zero_copy_only=False).astype(np.float32)
        kept, z, z_null = zscore(fitted, codes, values, null, given)
        index = np.searchsorted(fitted.codes, codes[kept]) + 1
        out = pa.table({"subject_id": table["subject_id"].filter(pa.array(kept)),
                        "time": table["time"].filter(pa.array(kept)),
                        "code": pa.array(index, index_type),
                        "numeric_value": pa.array(z, pa.float32(), mask=z_null)})
        target = root / path.relative_to(before)
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(out, target)
    listed = pq.read_table(before / meds.code_metadata_filepath)
    at = {code: i for i, code in enumerate(listed["code"].to_pylist())}
    vocab = pa.table({"code": pa.array(fitted.codes.tolist(), pa.string()),
                      "description": pa.array([listed["description"][at[c]].as_py() if c in at else None
                                               for c in fitted.codes], pa.string()),
                      "code/vocab_index": pa.array(np.arange(1, len(fitted.codes) + 1), index_type)})
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    pq.write_table(vocab, root / meds.code_metadata_filepath)
    (root / ".logs").mkdir(parents=True, exist_ok=True)
    for stage in ("fit_normalization", "fit_vocabulary_indices", "normalization"):
        (root / ".logs" / f"{stage}.done").touch()
