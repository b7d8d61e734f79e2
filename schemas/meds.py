"""A MEDS dataset (``data/{split}/*.parquet`` shards, ``metadata/codes.parquet``, ``subject_splits.parquet``): the
checks ``badpoints validate`` runs on it (stage ``meds``). The shards' types and nulls are ``meds``' own
``DataSchema``; the rest is what that schema does not look at and MEDS-Transforms' normalization does not survive
(docs/meds.md), checked by pandera on the small tables a run puts together from its shards (per shard, split,
subject and code: the models below), each check named by its catalogue id."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.catalogue import ERROR, WARNING, CheckInfo

STAGE = "meds"
_FIX = ("Give every code its values/mean and values/std in metadata/codes.parquet (MEDS-Transforms' normalization "
        "uses them instead of its own sums; `badpoints build --to meds` will write them), or drop the code's "
        "values before normalization")

CHECKS = (
    CheckInfo("meds_schema", STAGE, ERROR, "shard that fails meds' DataSchema (types, null subject_id or code)",
              "Rewrite the shard with meds.DataSchema's types (subject_id int64, time timestamp[us], code string, "
              "numeric_value float32) and no null subject_id or code; its rows were not checked further."),
    CheckInfo("meds_metadata", STAGE, ERROR, "metadata file that cannot be read or is not MEDS metadata",
              "Rewrite metadata/codes.parquet (code text, never null; values/mean and values/std numbers; "
              "code/vocab_index an integer) or metadata/subject_splits.parquet (subject_id an int64, split text, "
              "neither null) as Parquet: MEDS-Transforms' stages read them too. This run read the file as absent."),
    CheckInfo("meds_shard_empty", STAGE, WARNING, "shard with no rows",
              "A filter stage emptied it or the extraction wrote nothing there; remove the file or rerun the stage "
              "that made it."),
    CheckInfo("meds_split_empty", STAGE, ERROR, "split with no rows",
              "subject_splits.parquet names subjects in this split but no shard holds a row of it (a filter "
              "emptied it): a model would be tuned or tested on nothing. Loosen the filter or reassign splits."),
    CheckInfo("meds_subject_shards", STAGE, ERROR, "subject whose rows are in more than one shard",
              "MEDS keeps each subject's rows in one shard; reshard (MEDS-Extract's split_and_shard_subjects) so "
              "per-shard stages see every row of a subject."),
    CheckInfo("meds_subject_split", STAGE, ERROR, "subject whose rows sit outside its split",
              "Rows in a split other than subject_splits.parquet's (or of a subject it does not name) leak between "
              "train and evaluation; move the rows or fix subject_splits.parquet."),
    CheckInfo("meds_subject_order", STAGE, ERROR, "subject whose rows are not contiguous and sorted by time",
              "MEDS shards are sorted by subject_id, then time; sort the shard (stable), or sequence models read "
              "events out of order."),
    CheckInfo("meds_code_unlisted", STAGE, WARNING, "code in the data missing from codes.parquet",
              "Add the code (description, parent_codes) to metadata/codes.parquet; MEDS-Transforms fits it "
              "anyway, with no description and no parents."),
    CheckInfo("meds_value_finite", STAGE, ERROR, "numeric_value that is inf or NaN",
              "MEDS-Transforms counts inf as a value (its code's z all become NaN) and skips NaN; write null for "
              "a missing value and repair or drop the infinite ones."),
    CheckInfo("meds_value_bound", STAGE, ERROR, "numeric_value beyond [raw] valuenum_abs_bound",
              "No lab value is this large: a unit or parse error upstream; repair the rows or raise [raw] "
              "valuenum_abs_bound."),
    CheckInfo("meds_code_mixed", STAGE, WARNING, "code with numeric rows and rows that have text only",
              "Normalization gives the text rows a null z and writes no text_value: their text is lost. Map the "
              "text to numbers (censored '<1') or give it a code of its own."),
    CheckInfo("meds_code_unseen", STAGE, WARNING, "code with rows only outside train",
              "fit_normalization has no row of it, and normalization's inner join drops its rows without a word; "
              "map it to a code seen in train, or accept the drop."),
    CheckInfo("meds_z_non_finite", STAGE, ERROR, "code whose normalized z will be NaN or inf",
              f"{_FIX}. MEDS-Transforms' one-pass float32 variance gives std 0 or NaN for these codes."),
    CheckInfo("meds_z_noise", STAGE, ERROR, "code whose train values are all equal and whose z will be noise",
              f"{_FIX}. MEDS-Transforms' one-pass variance of equal values is a rounding residue: here a tiny "
              f"positive one, so every z is finite and means nothing; at another scale, shard layout or thread "
              f"count it rounds to 0 or below and every z is NaN or inf."),
    CheckInfo("meds_z_bound", STAGE, WARNING, "code whose normalized |z| will pass [scale] warn_bound",
              f"A real outlier or heavy tail (look at the code's largest values), or a float32 variance residue "
              f"where the values are nearly equal (all equal: meds_z_noise). {_FIX}."),
    # the output of MEDS-Transforms' normalization (integer code, z in numeric_value): pipeline/meds/zscored.py
    CheckInfo("meds_normalized_non_finite", STAGE, ERROR, "normalized z that is NaN or inf",
              f"normalization wrote these z; a model reads NaN as missing and inf breaks it. {_FIX}, then rerun "
              f"normalization (run `badpoints validate` on its input first: meds_z_non_finite names them)."),
    CheckInfo("meds_normalized_bound", STAGE, WARNING, "normalized |z| beyond [scale] warn_bound",
              f"A finite z this large is most often a float32 variance residue of a near-constant code. {_FIX}."),
    # two folders, before and after a stage: `badpoints validate AFTER --compare BEFORE`
    CheckInfo("meds_compare_split_emptied", STAGE, ERROR, "split with rows before the stage and none after",
              "The stage (a filter's threshold, most often) removed every row of the split: a model would be "
              "tuned or tested on nothing, and MEDS-Transforms exits 0. Loosen the threshold or reassign splits."),
    CheckInfo("meds_compare_codes_dropped", STAGE, WARNING, "code whose rows all went, with no filter stage run",
              "No stage that declares a drop ran, so these rows went without a word (normalization's inner join "
              "drops every code with no train row). Map the codes to ones seen in train, or filter them on "
              "purpose with a filter stage."),
)


# -- the tables the checks read, one model each: a check is named by its catalogue id, and the rows that fail it are
# the ones its finding names (pipeline/meds/checks.py reads them from pandera's failure cases) -------------------
class MedsShards(pa.DataFrameModel):
    """Per shard (index: its name, ``train/0``): its split, its rows and its split's rows over every shard."""

    split: Series[str]
    rows: Series[np.int64] = pa.Field(ge=0)
    split_rows: Series[np.int64] = pa.Field(ge=0)

    @pa.dataframe_check(name="meds_shard_empty")
    def has_rows(cls, frame: pd.DataFrame) -> pd.Series:
        """A shard has rows, unless its whole split has none (that is the split's finding)."""
        return (frame["rows"] > 0) | (frame["split_rows"] == 0)


class MedsSplits(pa.DataFrameModel):
    """Per split (index) a shard or subject_splits.parquet names: its rows over every shard."""

    rows: Series[np.int64] = pa.Field(ge=0)

    @pa.check("rows", name="meds_split_empty")
    def has_rows(cls, rows: pd.Series) -> pd.Series:
        return rows > 0


class MedsSubjects(pa.DataFrameModel):
    """Per subject (index: subject_id): how many shards and splits hold its rows, the first split by name, the split
    subject_splits.parquet gives it (without the file: its first split; null: it names none), and whether its rows in
    a shard are out of order."""

    shards: Series[np.int64] = pa.Field(ge=1)
    splits: Series[np.int64] = pa.Field(ge=1)
    split: Series[str]
    expected: Series[str] = pa.Field(nullable=True)
    out_of_order: Series[bool]

    @pa.check("shards", name="meds_subject_shards")
    def in_one_shard(cls, shards: pd.Series) -> pd.Series:
        return shards == 1

    @pa.check("out_of_order", name="meds_subject_order")
    def in_order(cls, out_of_order: pd.Series) -> pd.Series:
        return ~out_of_order

    @pa.dataframe_check(name="meds_subject_split")
    def in_its_split(cls, frame: pd.DataFrame) -> pd.Series:
        """All its rows in one split, the one subject_splits.parquet gives it."""
        return (frame["splits"] == 1) & (frame["split"] == frame["expected"])


class MedsCodes(pa.DataFrameModel):
    """Per code (index), over every split: its rows, those with a number and those with text only, and whether
    codes.parquet lists it."""

    rows: Series[np.int64] = pa.Field(ge=0)
    numeric: Series[np.int64] = pa.Field(ge=0)
    text_only: Series[np.int64] = pa.Field(ge=0)
    listed: Series[bool]

    @pa.check("listed", name="meds_code_unlisted")
    def is_listed(cls, listed: pd.Series) -> pd.Series:
        return listed

    @pa.dataframe_check(name="meds_code_mixed")
    def numbers_or_text(cls, frame: pd.DataFrame) -> pd.Series:
        """Not both: rows with numbers and rows with text and no number."""
        return ~((frame["numeric"] > 0) & (frame["text_only"] > 0))


class MedsFitted(pa.DataFrameModel):
    """Per code (index) with rows: its rows over every split, and whether the fitted (train) rows hold it (else
    normalization's inner join with the fit drops every row of it)."""

    rows: Series[np.int64] = pa.Field(gt=0)
    fitted: Series[bool]

    @pa.check("fitted", name="meds_code_unseen")
    def is_fitted(cls, fitted: pd.Series) -> pd.Series:
        return fitted


class MedsValues(pa.DataFrameModel):
    """Per split and code: its values that are NaN, +-inf, and finite beyond the run's bound."""

    split: Series[str]
    code: Series[str]
    nan: Series[np.int64] = pa.Field(ge=0)
    inf: Series[np.int64] = pa.Field(ge=0)
    beyond: Series[np.int64] = pa.Field(ge=0)

    @pa.check("beyond", name="meds_value_bound")
    def within_bound(cls, beyond: pd.Series) -> pd.Series:
        return beyond == 0

    @pa.dataframe_check(name="meds_value_finite")
    def finite(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["nan"] + frame["inf"] == 0


class MedsReadiness(pa.DataFrameModel):
    """Per fitted code, what MEDS-Transforms' normalization will make of its rows: the rows whose z will be NaN or
    inf, whether its std is a rounding residue of equal values (noise), and whether its largest finite |z| passes
    [scale] warn_bound (``beyond``)."""

    non_finite: Series[np.int64] = pa.Field(ge=0)
    noise: Series[bool]
    beyond: Series[bool]

    @pa.check("non_finite", name="meds_z_non_finite")
    def finite_z(cls, non_finite: pd.Series) -> pd.Series:
        return non_finite == 0

    @pa.check("noise", name="meds_z_noise")
    def not_noise(cls, noise: pd.Series) -> pd.Series:
        return ~noise

    @pa.dataframe_check(name="meds_z_bound")
    def bounded(cls, frame: pd.DataFrame) -> pd.Series:
        """A largest |z| within the bound, or noise (reported as noise, not as a bound)."""
        return ~frame["beyond"] | frame["noise"]


class MedsNormalized(pa.DataFrameModel):
    """Per code of a folder normalization wrote: its z that are NaN or inf, and finite beyond [scale] warn_bound."""

    bad: Series[np.int64] = pa.Field(ge=0)
    beyond: Series[np.int64] = pa.Field(ge=0)

    @pa.check("bad", name="meds_normalized_non_finite")
    def finite_z(cls, bad: pd.Series) -> pd.Series:
        return bad == 0

    @pa.check("beyond", name="meds_normalized_bound")
    def within_bound(cls, beyond: pd.Series) -> pd.Series:
        return beyond == 0


class MedsCompared(pa.DataFrameModel):
    """Per split of two folders, before and after a stage: its rows on each side."""

    rows_before: Series[np.int64] = pa.Field(ge=0)
    rows_after: Series[np.int64] = pa.Field(ge=0)

    @pa.dataframe_check(name="meds_compare_split_emptied")
    def not_emptied(cls, frame: pd.DataFrame) -> pd.Series:
        return (frame["rows_before"] == 0) | (frame["rows_after"] > 0)


class MedsDropped(pa.DataFrameModel):
    """Per code with rows before a stage and none after: its rows before, and whether a stage that ran declares a
    drop (a filter)."""

    rows_before: Series[np.int64] = pa.Field(gt=0)
    filtered: Series[bool]

    @pa.dataframe_check(name="meds_compare_codes_dropped")
    def dropped_on_purpose(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["filtered"]
