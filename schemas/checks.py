"""The catalogue of checks and the pandera check methods that run on raw text.

Every check has a stable id (used in reports, JUnit files and the config's
``[severity]`` table), a default severity, a short title and advice that says
what to do. A new check is one catalogue entry, plus one registered function
when it runs inside a pandera schema.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandera import extensions

ERROR = "error"
WARNING = "warning"
INFO = "info"  # reported, never changes the status (fills, merges, attrition)
OFF = "off"
SEVERITIES = (ERROR, WARNING, INFO, OFF)


@dataclass(frozen=True)
class CheckInfo:
    """What a check finds, how bad it is by default, and what the user should do."""

    id: str
    stage: str
    severity: str
    title: str
    advice: str


_CATALOGUE = [
    # -- files --------------------------------------------------------------------------
    CheckInfo("file_missing", "load", ERROR, "table file not found",
              "Put the table in DATA_DIR under one of the names tried (.csv or .csv.gz, any case)."),
    CheckInfo("file_unreadable", "load", ERROR, "file cannot be read",
              "Check the file's permissions and that it is a regular file."),
    CheckInfo("file_empty", "load", ERROR, "file has no bytes",
              "Re-export or re-download the table; an empty file has not even a header."),
    CheckInfo("compression", "load", ERROR, "gzip stream is truncated or corrupt",
              "Re-download the file or re-compress it with gzip; a file named .gz must be gzip."),
    CheckInfo("encoding", "load", ERROR, "bytes that are not UTF-8",
              "Re-export the table as UTF-8 (MIMIC ships UTF-8; a spreadsheet save may not)."),
    CheckInfo("duplicate_header", "load", ERROR, "header names a column twice",
              "Rename or drop the duplicated column so every header name is unique (case-insensitively)."),
    CheckInfo("missing_column", "load", ERROR, "required column absent",
              "Check the delimiter (badpoints reads comma-separated files) and the header names."),
    CheckInfo("malformed_row", "load", ERROR, "row that is not valid CSV",
              "Fix the rows: every row needs as many fields as the header, and every quote must close."),
    CheckInfo("table_empty", "load", ERROR, "table has a header but no rows",
              "Re-export the table with its rows; an empty table leaves nothing to train on."),
    # -- values -------------------------------------------------------------------------
    CheckInfo("id_missing", "raw", ERROR, "an empty required ID",
              "Every row needs this ID; drop or repair the rows."),
    CheckInfo("id_positive_integer", "raw", ERROR, "an ID that is not a positive integer",
              "IDs must be positive integers below 10^18; repair the export (no text, signs, or separators)."),
    CheckInfo("id_float_format", "raw", WARNING, "an integer ID written as a float ('123.0')",
              "Read as an integer; re-export with integer IDs (pandas writes 123.0 when the column had NaN)."),
    CheckInfo("hadm_id_missing", "raw", WARNING, "no HADM_ID (outpatient labs)",
              "Expected in MIMIC: outpatient labs have no admission. They are kept out of the graphs."),
    CheckInfo("valuenum_numeric", "raw", ERROR, "VALUENUM that is not a number",
              "VALUENUM must be a plain decimal number or empty; move text results to VALUE."),
    CheckInfo("valuenum_finite", "raw", ERROR, "VALUENUM that is inf or NaN",
              "Non-finite values poison the z-scores and the gradients; repair the export step that wrote them."),
    CheckInfo("valuenum_bound", "raw", ERROR, "VALUENUM beyond the configured magnitude bound",
              "No lab measurement is this large; raise [raw] valuenum_abs_bound only if it is real."),
    CheckInfo("valuenum_derived", "raw", WARNING, "VALUENUM derived from VALUE",
              "The table has no VALUENUM column; numbers were parsed from VALUE with a strict grammar."),
    CheckInfo("flag_value", "raw", WARNING, "FLAG other than 'abnormal' or 'delta'",
              "Unknown flags are treated as abnormal; map them to 'abnormal', 'delta' or empty."),
    CheckInfo("datetime_missing", "raw", ERROR, "an empty required time",
              "Every row needs this time; drop or repair the rows."),
    CheckInfo("datetime_iso", "raw", ERROR, "a time that is not ISO 'YYYY-MM-DD HH:MM:SS'",
              "Re-export the original file; a spreadsheet re-save rewrites dates and can lose the century."),
    # -- relations ----------------------------------------------------------------------
    CheckInfo("primary_key_unique", "raw", ERROR, "a key that appears more than once",
              "Each admission and lab item must appear once; drop the duplicated rows."),
    CheckInfo("foreign_key", "raw", ERROR, "a reference to a row that does not exist",
              "Every LABEVENTS HADM_ID must be in ADMISSIONS and every ITEMID in D_LABITEMS; "
              "check that the tables come from the same export."),
    CheckInfo("subject_mismatch", "raw", ERROR, "a SUBJECT_ID other than its admission's",
              "The lab row names a different patient than its admission; check the join that made it."),
    CheckInfo("discharge_before_admit", "raw", ERROR, "DISCHTIME earlier than ADMITTIME",
              "The stay has negative length; repair the admission's times."),
    CheckInfo("charttime_outside_stay", "raw", WARNING, "CHARTTIME outside the admission's stay",
              "Common in MIMIC (ED labs before admission, results after discharge); "
              "the bucket stage quarantines or clips them."),
    # -- every stage ---------------------------------------------------------------------
    CheckInfo("stage_guard", "all", ERROR, "rows that break the stage's schema",
              "A stage received or produced data its schema forbids; the message names the column and check."),
    CheckInfo("step_empty", "all", ERROR, "a filter, join or dedup that left no rows",
              "Nothing would reach the graphs; check the inputs and the step's settings."),
    CheckInfo("step_removed_most", "all", WARNING, "a step that removed more than the warning fraction",
              "Check that the step's settings fit this data ([filters] warn_removed_fraction)."),
    CheckInfo("step_removed_nearly_all", "all", ERROR, "a step that removed more than the error fraction",
              "Almost nothing survives this step; check its settings ([filters] error_removed_fraction)."),
    CheckInfo("attrition", "all", INFO, "rows read, kept, quarantined and merged per step",
              "Every row read is accounted for; quarantined rows keep their line and reason."),
    # -- clean ---------------------------------------------------------------------------
    CheckInfo("quarantine_outpatient", "clean", INFO, "outpatient lab rows (no HADM_ID) quarantined",
              "Expected in MIMIC; they belong to no admission and so to no graph."),
    CheckInfo("quarantine_raw_error", "clean", WARNING, "rows quarantined because they failed a raw check",
              "See the raw findings for each row; repair the export to keep them."),
    CheckInfo("quarantine_admission", "clean", WARNING, "lab rows of an admission that failed a raw check",
              "The admission's key or times are unusable; see the ADMISSIONS findings."),
    CheckInfo("mixed_item_text", "clean", WARNING, "non-numeric value in numeric item",
              "Mixed items' text rows ('<0.01', 'See Comments') are quarantined; map them to numbers to keep them."),
    # -- split ---------------------------------------------------------------------------
    CheckInfo("split_by_admission", "split", WARNING, "split by HADM_ID because SUBJECT_ID is absent",
              "A patient with several admissions may straddle splits; add SUBJECT_ID to ADMISSIONS."),
    CheckInfo("split_empty", "split", ERROR, "a split with no admissions",
              "Too few patients for the ratios; adjust [split] ratios or add data."),
    CheckInfo("split_overlap", "split", ERROR, "a patient or admission in more than one split",
              "Splits must be disjoint; this is a badpoints bug if it appears."),
    # -- encode --------------------------------------------------------------------------
    CheckInfo("unseen_category", "encode", WARNING, "categorical values not seen in the training split",
              "They get code 0 (missing/unseen); more training data or a coarser vocabulary avoids it."),
    CheckInfo("rare_category", "encode", INFO, "categorical values too rare in the training split to be coded",
              "Seen in fewer than [encode] min_admissions training admissions, they get code 0 and stay out "
              "of stats.json, so no value that could single out a patient is saved."),
    # -- scale ---------------------------------------------------------------------------
    CheckInfo("constant_item", "scale", WARNING, "lab item with constant training values",
              "Its std is below eps relative to its mean, or it has one normal observation: scale set to 1."),
    CheckInfo("fallback_item", "scale", WARNING, "lab item without normal training rows",
              "Its mean and scale were fitted on all its training rows instead of the normal ones."),
    CheckInfo("unseen_item", "scale", WARNING, "numeric lab item not seen in the training split",
              "Its rows get z = 0; they carry no information about the value."),
    CheckInfo("z_finite", "scale", ERROR, "z-score that is inf or NaN",
              "The scaling produced a non-finite value; check the item's stats in the report."),
    CheckInfo("z_warn_bound", "scale", WARNING, "|z| above the warning bound",
              "Heavy tails are real in labs; consider a per-item policy ('clip' or 'log') in [scale.policy]."),
    CheckInfo("z_error_bound", "scale", ERROR, "|z| above the error bound",
              "Beyond any real measurement: the mark of a failed std guard or a unit error."),
    CheckInfo("log_domain", "scale", ERROR, "value <= -1 in an item scaled with the 'log' policy",
              "log1p needs values above -1; use 'clip' or 'none' for this item."),
    # -- fill ----------------------------------------------------------------------------
    CheckInfo("filled", "fill", INFO, "missing values filled by the declared policy",
              "Declared in [fill]; add an indicator column to let the model see what was filled."),
    CheckInfo("fill_collides", "fill", ERROR, "fill value that equals a real code",
              "A filled value must not pose as a real category; fill codes with 0 (reserved)."),
    CheckInfo("fill_left_nulls", "fill", ERROR, "nulls left in a column that becomes a tensor",
              "Declare a fill policy for the column in [fill]."),
    # -- bucket --------------------------------------------------------------------------
    CheckInfo("before_admission", "bucket", WARNING, "lab rows charted before the admission day",
              "They have no timestep and are quarantined."),
    CheckInfo("late_rows", "bucket", WARNING, "lab rows beyond the maximum timestep or after discharge",
              "Quarantined or clipped by [bucket] late_policy."),
    # -- dedup ---------------------------------------------------------------------------
    CheckInfo("merged", "dedup", INFO, "rows merged into one per (HADM_ID, timestep, ITEMID)",
              "The latest CHARTTIME is kept; ties are broken by value, deterministically."),
    # -- graph ---------------------------------------------------------------------------
    CheckInfo("graph_finite", "graph", ERROR, "float tensor with inf or NaN",
              "A non-finite feature poisons every loss it touches; find the stage that let it through."),
    CheckInfo("graph_edge_index", "graph", ERROR, "edge_index that is not int64 of shape [2, E]",
              "PyG expects int64 [2, E]; rebuild the graph with badpoints or fix the code that made it."),
    CheckInfo("graph_index_bounds", "graph", ERROR, "edge_index outside the node counts",
              "An index past the node count (or negative) reads another node's memory or crashes scatter."),
    CheckInfo("graph_empty", "graph", ERROR, "graph without edges",
              "A batch with no edges trains nothing; check the batching and the stages' attrition."),
    CheckInfo("graph_edge_rows", "graph", ERROR, "per-edge tensor whose rows do not match the edges",
              "edge_attr, timestep and the other per-edge tensors need one row per edge."),
    CheckInfo("graph_node_rows", "graph", ERROR, "node features whose rows do not match the node count",
              "x needs one row per node."),
    CheckInfo("graph_timestep_range", "graph", ERROR, "timestep outside [0, max_timestep]",
              "Timesteps come from the bucket stage; check [bucket] max_timestep."),
    CheckInfo("graph_code_range", "graph", ERROR, "category code outside its vocabulary",
              "Codes index embeddings: one past the vocabulary crashes or reads garbage."),
    CheckInfo("graph_label_range", "graph", ERROR, "label outside {0, 1}",
              "Multi-hot labels must be 0 or 1."),
    CheckInfo("graph_pyg", "graph", ERROR, "graph that HeteroData.validate() rejects",
              "PyG's own validation failed; the message names the store."),
    CheckInfo("graph_memory", "graph", WARNING, "batch whose memory estimate exceeds the budget",
              "Lower [graph] batch_size or raise memory_budget_mb; whole-graph node counts are what ran "
              "the seed out of memory."),
    CheckInfo("graph_manifest", "graph", ERROR, "output file missing or different from the manifest",
              "Rebuild: the folder holds a half-written or altered build."),
    CheckInfo("graph_unsafe", "graph", ERROR, "graph file that does not load with weights_only=True",
              "Refused: it needs unsafe unpickling. Never load it; rebuild the graphs."),
]

CHECKS: dict[str, CheckInfo] = {info.id: info for info in _CATALOGUE}


def check_info(check_id: str) -> CheckInfo:
    """The catalogue entry for a check id (KeyError names the known ids)."""
    try:
        return CHECKS[check_id]
    except KeyError:
        raise KeyError(f"unknown check {check_id!r}; known checks: {', '.join(sorted(CHECKS))}") from None


# -- grammars of raw text ------------------------------------------------------------------
ID_TEXT = r"\s*\+?0*[1-9]\d{0,17}(?:\.0+)?\s*"
ID_FLOAT_TEXT = r"\s*\+?0*[1-9]\d{0,17}\.0+\s*"
NUMBER_TEXT = r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*"
NONFINITE_TEXT = r"(?i)\s*[+-]?(?:inf|infinity|nan)\s*"
ISO_DATETIME_TEXT = r"\s*\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?\s*"
FLAGS = ("abnormal", "delta")


def matches(text: pd.Series, pattern: str) -> pd.Series:
    """Whole-value regex match in pyarrow's RE2 (pandas falls back to Python's re per row); null is False."""
    arrow = pa.array(text, type=pa.large_string(), from_pandas=True)
    matched = pc.fill_null(pc.match_substring_regex(arrow, f"^(?:{pattern})$"), False)
    return pd.Series(matched.to_numpy(zero_copy_only=False), index=text.index, dtype=bool)


def number_values(text: pd.Series) -> pd.Series:
    """float64 of the text that follows the strict numeric grammar (1e309 gives inf); NaN elsewhere."""
    arrow = pa.array(text, type=pa.large_string(), from_pandas=True)
    valid = pc.fill_null(pc.match_substring_regex(arrow, f"^(?:{NUMBER_TEXT})$"), False)
    numbers = pc.cast(pc.utf8_trim_whitespace(pc.if_else(valid, arrow, None)), pa.float64())
    return pd.Series(numbers.to_numpy(zero_copy_only=False), index=text.index, dtype="float64")


@extensions.register_check_method(check_type="vectorized")
def id_positive_integer(text: pd.Series) -> pd.Series:
    """A positive integer below 10^18, optionally written with a '.0' tail."""
    return matches(text, ID_TEXT)


@extensions.register_check_method(check_type="vectorized")
def id_float_format(text: pd.Series) -> pd.Series:
    """Not an integer written as a float ('123.0')."""
    return ~matches(text, ID_FLOAT_TEXT)


@extensions.register_check_method(check_type="vectorized")
def valuenum_numeric(text: pd.Series) -> pd.Series:
    """A plain decimal number (inf and NaN tokens are left to ``valuenum_finite``)."""
    return matches(text, NUMBER_TEXT) | matches(text, NONFINITE_TEXT)


@extensions.register_check_method(check_type="vectorized")
def valuenum_finite(text: pd.Series) -> pd.Series:
    """Not inf, -inf, NaN, nor a number that overflows float64 (1e309)."""
    values = number_values(text)
    overflow = values.abs() == float("inf")
    return ~(matches(text, NONFINITE_TEXT) | overflow)


@extensions.register_check_method(statistics=["bound"], check_type="vectorized")
def valuenum_bound(text: pd.Series, *, bound: float) -> pd.Series:
    """|VALUENUM| within the configured bound (finite overflow is ``valuenum_finite``'s)."""
    values = number_values(text).abs()
    return ~((values > bound) & (values < float("inf")))


def parse_datetime_text(text: pd.Series) -> pd.Series:
    """ISO text to datetime64[ns]; anything else, impossible dates and years outside 1678-2261 to NaT."""
    iso = matches(text, ISO_DATETIME_TEXT)
    parsed = pd.to_datetime(text.where(iso).str.strip(), format="ISO8601", errors="coerce")
    year = parsed.dt.year
    in_range = (year >= 1678) & (year <= 2261)
    return parsed.where(in_range).astype("datetime64[ns]")


@extensions.register_check_method(check_type="vectorized")
def datetime_iso(text: pd.Series) -> pd.Series:
    """ISO 8601 'YYYY-MM-DD HH:MM[:SS[.f]]' without a time zone, as MIMIC writes it, and a real date."""
    return parse_datetime_text(text).notna()


@extensions.register_check_method(check_type="vectorized")
def flag_value(text: pd.Series) -> pd.Series:
    """FLAG is 'abnormal' or 'delta' (any case); empty means normal."""
    return text.str.strip().str.lower().isin(FLAGS)
