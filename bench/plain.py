"""The measured steps' own code: the pyarrow floor and a careful user's plain pandas and polars.

Run in a child process as a script, ``python -P bench/plain.py NAME DATA_DIR RESULT_JSON SETTINGS_JSON`` (-P: its
folder is not on ``sys.path``), so nothing of badpoints, nor of the rest of ``bench``, is imported: a step's seconds
and memory are the plain script's alone. What the baselines take from badpoints' config comes in SETTINGS_JSON
(:class:`Settings`, read by the parent from the stages' declarations); each step writes what it found (rows read,
edges, ...) to RESULT_JSON.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

TABLES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
LAB_COLUMNS = ("HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM", "FLAG")  # what both baselines read
KEPT = ("HADM_ID", "ITEMID", "CODE", "Z", "TIMESTEP")  # the kept rows' columns that make the edges


@dataclass(frozen=True)
class Settings:
    """What the baselines do as badpoints' config says, so that no default is written twice: the parent reads these
    from the stages' declarations (:func:`bench.steps.baseline_settings`) and hands them over as JSON."""

    interval_hours: float  # [bucket]: a timestep's length
    max_stay_days: float  # [bucket]: rows later after the admission day are dropped
    after_discharge_hours: float  # [bucket]: rows later after DISCHTIME are dropped
    ed_hours: float  # [bucket]: rows before the admission day are kept at 0 from the ED stay's start (else EDREGTIME)
    max_timestep: int | None  # [bucket]: rows past it are dropped (resolved: "none" is what max_stay_days reaches)
    train: float  # [split]: the share of patients in train ...
    val: float  # ... and in val (the baselines split by a hash, in tenths of patients)
    z_fill: float  # [fill.Z] value: a text row's z-score (and an unscaled item's)
    code_fill: float  # [fill.CODE] value: a numeric row's code
    admission_categoricals: tuple[str, ...]  # [graph] admission_features: the admission features
    censored: bool  # [clean]: censored results ('<0.01') of items that have numbers are read as their bound
    censoring: str  # the text stage's pattern of a censored result (sign, number), matched ignoring case
    text_values: dict[str, float]  # [clean.text_values]: declared words read as numbers
    text_bound: float  # a censored number beyond it stays text

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        values = json.loads(text)
        return cls(**{**values, "admission_categoricals": tuple(values["admission_categoricals"])})


def _table_path(data_dir: Path, table: str) -> Path:
    """The file of ``table`` in ``data_dir`` (or ``hosp/``), .csv or .csv.gz, any case."""
    for folder in (data_dir, data_dir / "hosp"):
        if folder.is_dir():
            names = {p.name.lower(): p for p in sorted(folder.iterdir())}
            for suffix in (".csv", ".csv.gz"):
                if table.lower() + suffix in names:
                    return names[table.lower() + suffix]
    raise FileNotFoundError(f"no {table}.csv or {table}.csv.gz in {data_dir}")


def pyarrow_floor(data_dir: Path) -> dict:
    """Parse the three CSVs with pyarrow (all columns, inferred types): nothing can read them faster."""
    import pyarrow.csv as pv

    return {table: pv.read_csv(_table_path(data_dir, table)).num_rows for table in TABLES}


def _columns(path: Path, wanted: tuple[str, ...] | None = None) -> dict[str, str]:
    """The file's column names by their upper-case name (MIMIC-IV writes them in lower case)."""
    import pyarrow.csv as pv

    with pv.open_csv(path) as reader:
        names = reader.schema.names
    return {name.upper(): name for name in names if wanted is None or name.upper() in wanted}


# -- pandas -------------------------------------------------------------------------------------------------------
def plain_pandas(data_dir: Path, settings: Settings) -> dict:
    """The baseline: badpoints' stages as a careful user writes them in vectorized pandas, with no validation.

    Its rows match badpoints' kept edges exactly on valid data: outpatient rows, rows without any result
    (MIMIC-IV's results only in comments) and the text rows of mixed items are dropped, timesteps count whole
    intervals from the midnight of the admission day (not from ADMITTIME), rows before that midnight drawn in the
    ED stay (from EDREGTIME where present and not after ADMITTIME, else ``ed_hours`` before ADMITTIME) get timestep
    0, and earlier rows, rows more than ``max_stay_days`` after that midnight, past ``max_timestep`` or more than
    ``after_discharge_hours`` after discharge are dropped, as badpoints' bucket stage does with the same
    ``settings``. It differs where counts do not: the split
    is by a hash of SUBJECT_ID (badpoints permutes patients with a seed), vocabularies are sorted (badpoints orders
    them by frequency), z-scores use every training row with std 0 set to 1 (badpoints fits on normal rows with
    3-sigma clipping), and it writes no graphs. Column names are read in any case (MIMIC-III upper, MIMIC-IV lower).
    """
    import pandas as pd

    lab, adm, items = _pandas_tables(data_dir, settings)
    read_rows = len(lab)
    lab = _pandas_usable(_pandas_text(lab, settings))
    # Split admissions by patient: a stable hash of SUBJECT_ID.
    adm = adm.assign(SPLIT=_split(pd.util.hash_array(adm["SUBJECT_ID"].to_numpy()), settings))
    stays = ["HADM_ID", "ADMITTIME", "DISCHTIME", *[c for c in ("EDREGTIME",) if c in adm], "SPLIT"]
    lab = lab.merge(adm[stays], on="HADM_ID", how="inner")
    lab = _pandas_zscores(_pandas_codes(lab, settings), settings)
    lab = _pandas_timesteps(lab, settings)
    # One row per (HADM_ID, TIMESTEP, ITEMID): the latest CHARTTIME; sorted for slicing by offsets.
    lab = lab.sort_values(["SPLIT", "HADM_ID", "TIMESTEP", "ITEMID", "CHARTTIME"], kind="stable")
    lab = lab[~lab.duplicated(["HADM_ID", "TIMESTEP", "ITEMID"], keep="last")]
    node_x, item_x = _pandas_features(adm, items, settings)
    return _baseline_result(read_rows, {column: lab[column].to_numpy() for column in KEPT},
                            adm["HADM_ID"].to_numpy(), items["ITEMID"].to_numpy(), node_x, item_x)


def _pandas_tables(data_dir: Path, settings: Settings):
    """LABEVENTS' columns both baselines read, the admissions with their categorical columns, the items."""
    import pandas as pd

    def read(table: str, wanted: tuple[str, ...] | None = None) -> pd.DataFrame:
        path = _table_path(data_dir, table)
        names = _columns(path, wanted)
        frame = pd.read_csv(path, engine="pyarrow", usecols=list(names.values()))
        return frame.rename(columns={name: upper for upper, name in names.items()})

    lab = read("LABEVENTS", LAB_COLUMNS)
    adm = read("ADMISSIONS")
    items = read("D_LABITEMS", ("ITEMID", "FLUID", "CATEGORY"))
    categorical = [c for c in settings.admission_categoricals if c in adm]
    if "EDREGTIME" in adm:  # an empty column is read as no type: as times, all null
        adm = adm.assign(EDREGTIME=pd.to_datetime(adm["EDREGTIME"]))
    registered = [c for c in ("EDREGTIME",) if c in adm]
    return lab, adm[["SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME", *registered, *categorical]], items


def _pandas_text(lab, settings: Settings):
    """In items that have numbers, censored results ('<0.01': 0.01) and the declared words read as numbers."""
    import re

    import pandas as pd

    numbered = lab.loc[lab["VALUENUM"].notna(), "ITEMID"].unique()
    text = lab["VALUENUM"].isna() & lab["VALUE"].notna() & lab["ITEMID"].isin(numbered)
    values = lab.loc[text, "VALUE"].astype("str")
    number = pd.Series(float("nan"), index=values.index)
    if settings.censored:
        number = pd.to_numeric(values.str.extract(settings.censoring, flags=re.IGNORECASE)[1], errors="coerce")
        number = number.where(number.abs() <= settings.text_bound)
    words = values.str.strip().str.rstrip(".").str.strip().str.upper().map(settings.text_values)
    return lab.assign(VALUENUM=lab["VALUENUM"].fillna(number.fillna(words).astype("float64")))


def _pandas_usable(lab):
    """Outpatient rows and rows without any result out; item kinds on the rest; the text rows of mixed items out."""
    lab = lab[lab["HADM_ID"].notna() & (lab["VALUE"].notna() | lab["VALUENUM"].notna())].astype({"HADM_ID": "int64"})
    share = lab["VALUENUM"].notna().groupby(lab["ITEMID"]).mean()
    mixed = share.index[(share > 0) & (share < 1)]
    return lab[~(lab["ITEMID"].isin(mixed) & lab["VALUENUM"].isna())]


def _pandas_codes(lab, settings: Settings):
    """CODE: text rows' codes from sorted training vocabularies (0 for unseen values); numeric rows' ``code_fill``."""
    text, train = lab["VALUENUM"].isna(), lab["SPLIT"] == 0
    vocab = (lab.loc[text & train, ["ITEMID", "VALUE"]].drop_duplicates()
             .sort_values(["ITEMID", "VALUE"], ignore_index=True))
    vocab["CODE"] = vocab.groupby("ITEMID").cumcount() + 1
    codes = lab.loc[text, ["ITEMID", "VALUE"]].merge(vocab, on=["ITEMID", "VALUE"], how="left")["CODE"]
    lab = lab.assign(CODE=settings.code_fill)
    lab.loc[text, "CODE"] = codes.fillna(0).to_numpy()
    return lab


def _pandas_features(adm, items, settings: Settings) -> tuple[list, list]:
    """Admission features (codes from the training admissions' sorted values) and item features (FLUID,
    CATEGORY); 0 for missing and unseen values."""
    import numpy as np
    import pandas as pd

    train = adm["SPLIT"] == 0
    categorical = [c for c in settings.admission_categoricals if c in adm]
    node_x = [pd.Index(np.sort(adm.loc[train, c].dropna().unique())).get_indexer(adm[c]) + 1  # -1 + 1 = 0
              for c in categorical]
    item_x = [pd.Index(np.sort(items[c].dropna().unique())).get_indexer(items[c]) + 1 for c in ("FLUID", "CATEGORY")]
    return node_x, item_x


def _pandas_zscores(lab, settings: Settings):
    """Z per ITEMID with the training rows' mean and std (a constant item gets std 1); ``z_fill`` where none."""
    train_numbers = (lab["SPLIT"] == 0) & lab["VALUENUM"].notna()
    stats = lab.loc[train_numbers].groupby("ITEMID")["VALUENUM"].agg(["mean", "std"])
    std = stats["std"].where(stats["std"] > 0, 1.0)
    z = (lab["VALUENUM"] - lab["ITEMID"].map(stats["mean"])) / lab["ITEMID"].map(std)
    return lab.assign(Z=z.fillna(settings.z_fill))


def _pandas_timesteps(lab, settings: Settings):
    """Timesteps of ``interval_hours`` from the midnight of the admission day, 0 for rows drawn in the ED stay
    before it; earlier and late rows out."""
    import pandas as pd

    elapsed = lab["CHARTTIME"] - lab["ADMITTIME"].dt.floor("D")
    start = lab["ADMITTIME"] - pd.Timedelta(hours=settings.ed_hours)
    if "EDREGTIME" in lab and settings.ed_hours > 0:
        start = lab["EDREGTIME"].where(lab["EDREGTIME"] <= lab["ADMITTIME"], start)
    from_ed = (elapsed < pd.Timedelta(0)) & (lab["CHARTTIME"] >= start)
    lab = lab.assign(TIMESTEP=(elapsed // pd.Timedelta(hours=settings.interval_hours)).where(~from_ed, 0))
    keep = (((elapsed >= pd.Timedelta(0)) | from_ed) & (elapsed <= pd.Timedelta(days=settings.max_stay_days))
            & (lab["CHARTTIME"] <= lab["DISCHTIME"] + pd.Timedelta(hours=settings.after_discharge_hours)))
    if settings.max_timestep is not None:
        keep &= lab["TIMESTEP"] <= settings.max_timestep
    return lab[keep]


# -- polars -------------------------------------------------------------------------------------------------------
def plain_polars(data_dir: Path, settings: Settings) -> dict:
    """:func:`plain_pandas` written in polars: the same tables, columns, stages and results (and the same split:
    pandas' ``hash_array`` of SUBJECT_ID is a splitmix64 finalizer, done here in numpy on the small ADMISSIONS)."""
    import polars as pl

    lab, adm, items = _polars_tables(data_dir, settings)
    read_rows = lab.height
    lab = _polars_usable(_polars_text(lab, settings))
    # Split admissions by patient: the same hash of SUBJECT_ID as pandas.
    adm = adm.with_columns(pl.Series("SPLIT", _split(_splitmix64(adm["SUBJECT_ID"].to_numpy()), settings)))
    stays = ["HADM_ID", "ADMITTIME", "DISCHTIME", *[c for c in ("EDREGTIME",) if c in adm.columns], "SPLIT"]
    lab = lab.join(adm.select(stays), on="HADM_ID", how="inner")
    lab = _polars_zscores(_polars_codes(lab, settings), settings)
    lab = _polars_timesteps(lab, settings)
    # One row per (HADM_ID, TIMESTEP, ITEMID): the latest CHARTTIME; sorted for slicing by offsets.
    lab = lab.sort("SPLIT", "HADM_ID", "TIMESTEP", "ITEMID", "CHARTTIME", maintain_order=True)
    lab = lab.unique(["HADM_ID", "TIMESTEP", "ITEMID"], keep="last", maintain_order=True)
    node_x, item_x = _polars_features(adm, items, settings)
    return _baseline_result(read_rows, {column: lab[column].to_numpy() for column in KEPT},
                            adm["HADM_ID"].to_numpy(), items["ITEMID"].to_numpy(), node_x, item_x)


def _polars_tables(data_dir: Path, settings: Settings):
    """:func:`_pandas_tables` in polars: IDs as Int64, VALUENUM as Float64, times parsed."""
    import polars as pl

    def read(table: str, wanted: tuple[str, ...] | None = None, types: dict | None = None) -> pl.DataFrame:
        path = _table_path(data_dir, table)
        names = _columns(path, wanted)
        overrides = {names[c]: t for c, t in (types or {}).items() if c in names}
        frame = pl.read_csv(path, columns=list(names.values()), schema_overrides=overrides, infer_schema=False)
        frame = frame.rename({name: upper for upper, name in names.items()})
        return frame.with_columns(pl.col(c).cast(t) for c, t in (types or {}).items() if c in frame.columns)

    ids = {"SUBJECT_ID": pl.Int64, "HADM_ID": pl.Int64, "ITEMID": pl.Int64}
    lab = read("LABEVENTS", LAB_COLUMNS, {**ids, "VALUENUM": pl.Float64})
    adm = read("ADMISSIONS", None, ids)
    items = read("D_LABITEMS", ("ITEMID", "FLUID", "CATEGORY"), ids)
    moment = "%Y-%m-%d %H:%M:%S"
    lab = lab.with_columns(pl.col("CHARTTIME").str.to_datetime(moment))
    categorical = [c for c in settings.admission_categoricals if c in adm.columns]
    registered = [pl.col("EDREGTIME").str.to_datetime(moment) for c in ("EDREGTIME",) if c in adm.columns]
    adm = adm.select("SUBJECT_ID", "HADM_ID", pl.col("ADMITTIME").str.to_datetime(moment),
                     pl.col("DISCHTIME").str.to_datetime(moment), *registered, *categorical)
    return lab, adm, items


def _polars_text(lab, settings: Settings):
    """:func:`_pandas_text` in polars."""
    import polars as pl

    numbered = lab.filter(pl.col("VALUENUM").is_not_null()).select(pl.col("ITEMID").unique(), NUMBERED=pl.lit(True))
    lab = lab.join(numbered, on="ITEMID", how="left")
    text = pl.col("VALUENUM").is_null() & pl.col("VALUE").is_not_null() & pl.col("NUMBERED").fill_null(False)
    number = pl.lit(None, dtype=pl.Float64)
    if settings.censored:
        parsed = pl.col("VALUE").str.extract(f"(?i){settings.censoring}", 2).cast(pl.Float64, strict=False)
        number = pl.when(parsed.abs() <= settings.text_bound).then(parsed)
    word = pl.col("VALUE").str.strip_chars().str.strip_chars_end(".").str.strip_chars().str.to_uppercase()
    words = word.replace_strict(settings.text_values, default=None, return_dtype=pl.Float64)
    read = pl.when(text).then(pl.coalesce(number, words))
    return lab.with_columns(VALUENUM=pl.coalesce(pl.col("VALUENUM"), read)).drop("NUMBERED")


def _polars_usable(lab):
    """Outpatient rows and rows without any result out; item kinds on the rest; the text rows of mixed items out."""
    import polars as pl

    text = pl.col("VALUENUM").is_null()
    lab = lab.filter(pl.col("HADM_ID").is_not_null() & (pl.col("VALUE").is_not_null() | ~text))
    share = lab.group_by("ITEMID").agg((~text).mean().alias("SHARE"))
    mixed = share.filter((pl.col("SHARE") > 0) & (pl.col("SHARE") < 1)).select("ITEMID", MIXED=pl.lit(True))
    return lab.join(mixed, on="ITEMID", how="left").filter(~(pl.col("MIXED").fill_null(False) & text)).drop("MIXED")


def _polars_codes(lab, settings: Settings):
    """:func:`_pandas_codes` in polars."""
    import polars as pl

    text, train = pl.col("VALUENUM").is_null(), pl.col("SPLIT") == 0
    vocab = (lab.filter(text & train).select("ITEMID", "VALUE").unique().sort("ITEMID", "VALUE")
             .with_columns(CODE=(pl.int_range(pl.len()).over("ITEMID") + 1).cast(pl.Float64)))
    return lab.join(vocab, on=["ITEMID", "VALUE"], how="left").with_columns(
        CODE=pl.when(text).then(pl.col("CODE").fill_null(0.0)).otherwise(settings.code_fill))


def _polars_features(adm, items, settings: Settings) -> tuple[list, list]:
    """:func:`_pandas_features` in polars."""
    import numpy as np
    import polars as pl

    def codes(frame: pl.DataFrame, vocabulary: pl.DataFrame, column: str) -> pl.Series:
        known = vocabulary[column].drop_nulls().unique().sort()
        table = pl.DataFrame({column: known, "CODE": np.arange(1, len(known) + 1)})
        return frame.select(column).join(table, on=column, how="left", maintain_order="left")["CODE"].fill_null(0)

    train_adm = adm.filter(pl.col("SPLIT") == 0)
    categorical = [c for c in settings.admission_categoricals if c in adm.columns]
    return ([codes(adm, train_adm, c) for c in categorical], [codes(items, items, c) for c in ("FLUID", "CATEGORY")])


def _polars_zscores(lab, settings: Settings):
    """:func:`_pandas_zscores` in polars."""
    import polars as pl

    stats = lab.filter((pl.col("SPLIT") == 0) & pl.col("VALUENUM").is_not_null()).group_by("ITEMID").agg(
        MEAN=pl.col("VALUENUM").mean(), STD=pl.col("VALUENUM").std())
    stats = stats.with_columns(STD=pl.when(pl.col("STD") > 0).then(pl.col("STD")).otherwise(1.0))
    return lab.join(stats, on="ITEMID", how="left").with_columns(
        Z=((pl.col("VALUENUM") - pl.col("MEAN")) / pl.col("STD")).fill_nan(settings.z_fill).fill_null(settings.z_fill))


def _polars_timesteps(lab, settings: Settings):
    """:func:`_pandas_timesteps` in polars (whole microseconds: an interval may be 3.6 s)."""
    import polars as pl

    interval_us = round(settings.interval_hours * 3_600_000_000)
    elapsed = pl.col("CHARTTIME") - pl.col("ADMITTIME").dt.truncate("1d")
    start = pl.col("ADMITTIME") - pl.duration(hours=settings.ed_hours)
    if "EDREGTIME" in lab.columns and settings.ed_hours > 0:  # a null EDREGTIME compares null: the window
        start = pl.when(pl.col("EDREGTIME") <= pl.col("ADMITTIME")).then(pl.col("EDREGTIME")).otherwise(start)
    lab = lab.with_columns(ELAPSED=elapsed).with_columns(
        FROM_ED=(pl.col("ELAPSED") < pl.duration(seconds=0)) & (pl.col("CHARTTIME") >= start))
    lab = lab.with_columns(TIMESTEP=pl.when(pl.col("FROM_ED")).then(0).otherwise(
        pl.col("ELAPSED").dt.total_microseconds() // interval_us))
    keep = (((pl.col("ELAPSED") >= pl.duration(seconds=0)) | pl.col("FROM_ED"))
            & (pl.col("ELAPSED") <= pl.duration(days=settings.max_stay_days))
            & (pl.col("CHARTTIME") <= pl.col("DISCHTIME") + pl.duration(hours=settings.after_discharge_hours)))
    if settings.max_timestep is not None:
        keep &= pl.col("TIMESTEP") <= settings.max_timestep
    return lab.filter(keep)


def _splitmix64(ids):
    """pandas' ``hash_array`` of int64 IDs (a splitmix64 finalizer), in numpy."""
    import numpy as np

    hashed = ids.astype(np.int64).view(np.uint64).copy()
    for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        hashed ^= hashed >> np.uint64(shift)
        if factor:
            hashed *= np.uint64(factor)
    return hashed


# -- both ---------------------------------------------------------------------------------------------------------
def _split(hashed, settings: Settings):
    """0 (train), 1 (val) or 2 (test) per patient hash: tenths of the patients, ``train`` and ``train + val``
    rounded to tenths."""
    import numpy as np

    cuts = np.rint(np.array([settings.train, settings.train + settings.val]) * 10)
    return np.searchsorted(cuts, hashed % np.uint64(10), side="right")


def _baseline_result(read_rows: int, kept: dict, admission_ids, item_ids, node_x: list, item_x: list) -> dict:
    """What both baselines report from their kept rows' columns (:data:`KEPT`): counts, and two sums that show they
    coded and scaled the same rows alike."""
    import numpy as np

    admissions, items = np.sort(admission_ids), np.sort(item_ids)
    edge_index = np.vstack([np.searchsorted(admissions, kept["HADM_ID"]),
                            np.searchsorted(items, kept["ITEMID"])]).astype(np.int64)
    edge_attr = np.column_stack([kept["CODE"], kept["Z"]]).astype(np.float32)
    timestep = kept["TIMESTEP"].astype(np.int64)
    return {"read": read_rows, "edges": int(edge_index.shape[1]), "finite": bool(np.isfinite(edge_attr).all()),
            "admission_features": len(node_x), "item_features": len(item_x),
            "max_timestep": int(timestep.max()) if len(timestep) else None,
            "coded": int((edge_attr[:, 0] > 0).sum()),
            "z_abs_sum": float(np.abs(edge_attr[:, 1]).sum(dtype=np.float64)),
            "item_index_sum": int(edge_index[1].sum())}


# -- the child's side of a step -----------------------------------------------------------------------------------
BASELINES = {"baseline": plain_pandas, "baseline_polars": plain_polars}


def run_step(name: str, data_dir: Path, result_path: Path, settings: Settings) -> int:
    """Run the step ``name`` (``floor`` or one of :data:`BASELINES`), write what it found as JSON."""
    found = pyarrow_floor(data_dir) if name == "floor" else BASELINES[name](data_dir, settings)
    Path(result_path).write_text(json.dumps(found) + "\n")
    return 0


def main(argv: list[str]) -> int:
    """``NAME DATA_DIR RESULT_JSON SETTINGS_JSON``: run the step NAME, write what it found."""
    name, data_dir, result_path, settings = argv
    return run_step(name, Path(data_dir), Path(result_path), Settings.from_json(settings))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
