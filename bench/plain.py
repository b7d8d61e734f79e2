"""The measured steps' own code: the pyarrow floor and a careful user's plain pandas and polars.

Run in a child process as a script, ``python -P bench/plain.py NAME DATA_DIR RESULT_JSON`` (-P: its folder is not
on ``sys.path``), so nothing of badpoints, nor of the rest of ``bench``, is imported: a step's seconds and memory
are the plain script's alone. Each step writes what it found (rows read, edges, ...) to RESULT_JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TABLES = ("ADMISSIONS", "D_LABITEMS", "LABEVENTS")
LAB_COLUMNS = ("HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM", "FLAG")  # what both baselines read
# schemas.raw.ADMISSION_CATEGORICALS (MIMIC-III's ETHNICITY, MIMIC-IV's RACE); not imported: a step imports no badpoints
ADMISSION_CATEGORICALS = ("ADMISSION_TYPE", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE", "LANGUAGE",
                          "RELIGION", "MARITAL_STATUS", "ETHNICITY", "RACE")


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


def plain_pandas(data_dir: Path, *, max_timestep: int | None = None, max_stay_days: float = 1000.0,
                 after_discharge_hours: float = 24.0) -> dict:
    """The baseline: badpoints' stages as a careful user writes them in vectorized pandas, with no validation.

    Its rows match badpoints' kept edges exactly on valid data: outpatient rows, rows without any result
    (MIMIC-IV's results only in comments) and the text rows of mixed items are dropped, timesteps count whole
    days from the midnight of the admission day (not from ADMITTIME), and rows before that midnight, more than
    ``max_stay_days`` after it, past ``max_timestep`` (none by default) or more than ``after_discharge_hours``
    after discharge are dropped, as badpoints' bucket stage does. It differs
    where counts do not: the split is by a hash of SUBJECT_ID (badpoints permutes patients with a
    seed), vocabularies are sorted (badpoints orders them by frequency), z-scores use every training
    row with std 0 set to 1 (badpoints fits on normal rows with 3-sigma clipping), and it writes no graphs.
    Column names are read in any case (MIMIC-III upper, MIMIC-IV lower).
    """
    import numpy as np
    import pandas as pd

    def read(table: str, wanted: tuple[str, ...] | None = None) -> pd.DataFrame:
        path = _table_path(data_dir, table)
        names = _columns(path, wanted)
        frame = pd.read_csv(path, engine="pyarrow", usecols=list(names.values()))
        return frame.rename(columns={name: upper for upper, name in names.items()})

    lab = read("LABEVENTS", LAB_COLUMNS)
    read_rows = len(lab)
    adm = read("ADMISSIONS")
    items = read("D_LABITEMS", ("ITEMID", "FLUID", "CATEGORY"))
    categorical = [c for c in ADMISSION_CATEGORICALS if c in adm]
    adm = adm[["SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME", *categorical]]

    # Outpatient rows and rows without any result out; item kinds on the rest; the text rows of mixed items out.
    lab = lab[lab["HADM_ID"].notna() & (lab["VALUE"].notna() | lab["VALUENUM"].notna())].astype({"HADM_ID": "int64"})
    share = lab["VALUENUM"].notna().groupby(lab["ITEMID"]).mean()
    mixed = share.index[(share > 0) & (share < 1)]
    lab = lab[~(lab["ITEMID"].isin(mixed) & lab["VALUENUM"].isna())]

    # Split admissions by patient: a stable hash of SUBJECT_ID, 80/10/10.
    bucket = pd.util.hash_array(adm["SUBJECT_ID"].to_numpy()) % 10
    adm["SPLIT"] = np.select([bucket < 8, bucket == 8], [0, 1], 2)  # 0 train, 1 val, 2 test
    lab = lab.merge(adm[["HADM_ID", "ADMITTIME", "DISCHTIME", "SPLIT"]], on="HADM_ID", how="inner")
    train = lab["SPLIT"] == 0

    # Codes from sorted training vocabularies; 0 for missing and unseen.
    text = lab["VALUENUM"].isna()
    vocab = (lab.loc[text & train, ["ITEMID", "VALUE"]].drop_duplicates()
             .sort_values(["ITEMID", "VALUE"], ignore_index=True))
    vocab["CODE"] = vocab.groupby("ITEMID").cumcount() + 1
    codes = lab.loc[text, ["ITEMID", "VALUE"]].merge(vocab, on=["ITEMID", "VALUE"], how="left")["CODE"]
    lab["CODE"] = 0.0
    lab.loc[text, "CODE"] = codes.fillna(0).to_numpy()
    train_adm = adm["SPLIT"] == 0
    node_x = [pd.Index(np.sort(adm.loc[train_adm, c].dropna().unique())).get_indexer(adm[c]) + 1  # -1 + 1 = 0
              for c in categorical]
    item_x = [pd.Index(np.sort(items[c].dropna().unique())).get_indexer(items[c]) + 1 for c in ("FLUID", "CATEGORY")]

    # z-score per ITEMID with the training rows' mean and std (a constant item gets std 1); then fill.
    stats = lab.loc[train & ~text].groupby("ITEMID")["VALUENUM"].agg(["mean", "std"])
    std = stats["std"].where(stats["std"] > 0, 1.0)
    lab["Z"] = ((lab["VALUENUM"] - lab["ITEMID"].map(stats["mean"])) / lab["ITEMID"].map(std)).fillna(0.0)

    # 24-hour timesteps from the midnight of the admission day; early and late rows out.
    day = pd.Timedelta(hours=24)
    elapsed = lab["CHARTTIME"] - lab["ADMITTIME"].dt.floor("D")
    lab["TIMESTEP"] = elapsed // day
    keep = ((elapsed >= pd.Timedelta(0)) & (elapsed <= pd.Timedelta(days=max_stay_days))
            & (lab["CHARTTIME"] <= lab["DISCHTIME"] + pd.Timedelta(hours=after_discharge_hours)))
    if max_timestep is not None:
        keep &= lab["TIMESTEP"] <= max_timestep
    lab = lab[keep]

    # One row per (HADM_ID, TIMESTEP, ITEMID): the latest CHARTTIME; sorted for slicing by offsets.
    lab = lab.sort_values(["SPLIT", "HADM_ID", "TIMESTEP", "ITEMID", "CHARTTIME"], kind="stable")
    lab = lab[~lab.duplicated(["HADM_ID", "TIMESTEP", "ITEMID"], keep="last")]

    # Edge arrays: admission and item node indices, [code, z] attributes.
    admissions = np.sort(adm["HADM_ID"].to_numpy())
    item_ids = np.sort(items["ITEMID"].to_numpy())
    edge_index = np.vstack([np.searchsorted(admissions, lab["HADM_ID"].to_numpy()),
                            np.searchsorted(item_ids, lab["ITEMID"].to_numpy())]).astype(np.int64)
    edge_attr = np.column_stack([lab["CODE"].to_numpy(), lab["Z"].to_numpy()]).astype(np.float32)
    timestep = lab["TIMESTEP"].to_numpy(np.int64)
    return _baseline_result(read_rows, edge_index, edge_attr, timestep, node_x, item_x)


def _baseline_result(read_rows: int, edge_index, edge_attr, timestep, node_x: list, item_x: list) -> dict:
    """What both baselines report: counts, and two sums that show they coded and scaled the same rows alike."""
    import numpy as np

    return {"read": read_rows, "edges": int(edge_index.shape[1]), "finite": bool(np.isfinite(edge_attr).all()),
            "admission_features": len(node_x), "item_features": len(item_x),
            "max_timestep": int(timestep.max()) if len(timestep) else None,
            "coded": int((edge_attr[:, 0] > 0).sum()),
            "z_abs_sum": float(np.abs(edge_attr[:, 1]).sum(dtype=np.float64)),
            "item_index_sum": int(edge_index[1].sum())}


def plain_polars(data_dir: Path, *, max_timestep: int | None = None, max_stay_days: float = 1000.0,
                 after_discharge_hours: float = 24.0) -> dict:
    """:func:`plain_pandas` written in polars: the same tables, columns, stages and results (and the same split:
    pandas' ``hash_array`` of SUBJECT_ID is a splitmix64 finalizer, done here in numpy on the small ADMISSIONS)."""
    import numpy as np
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
    read_rows = lab.height
    adm = read("ADMISSIONS", None, ids)
    items = read("D_LABITEMS", ("ITEMID", "FLUID", "CATEGORY"), ids)
    moment = "%Y-%m-%d %H:%M:%S"
    lab = lab.with_columns(pl.col("CHARTTIME").str.to_datetime(moment))
    categorical = [c for c in ADMISSION_CATEGORICALS if c in adm.columns]
    adm = adm.select("SUBJECT_ID", "HADM_ID", pl.col("ADMITTIME").str.to_datetime(moment),
                     pl.col("DISCHTIME").str.to_datetime(moment), *categorical)

    # Outpatient rows and rows without any result out; item kinds on the rest; the text rows of mixed items out.
    text = pl.col("VALUENUM").is_null()
    lab = lab.filter(pl.col("HADM_ID").is_not_null() & (pl.col("VALUE").is_not_null() | ~text))
    share = lab.group_by("ITEMID").agg((~text).mean().alias("SHARE"))
    mixed = share.filter((pl.col("SHARE") > 0) & (pl.col("SHARE") < 1)).select("ITEMID", MIXED=pl.lit(True))
    lab = lab.join(mixed, on="ITEMID", how="left").filter(~(pl.col("MIXED").fill_null(False) & text)).drop("MIXED")

    # Split admissions by patient: the same hash of SUBJECT_ID as pandas, 80/10/10.
    hashed = adm["SUBJECT_ID"].to_numpy().astype(np.int64).view(np.uint64).copy()
    for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        hashed ^= hashed >> np.uint64(shift)
        if factor:
            hashed *= np.uint64(factor)
    bucket = hashed % np.uint64(10)
    adm = adm.with_columns(pl.Series("SPLIT", np.select([bucket < 8, bucket == 8], [0, 1], 2)))
    lab = lab.join(adm.select("HADM_ID", "ADMITTIME", "DISCHTIME", "SPLIT"), on="HADM_ID", how="inner")
    train = pl.col("SPLIT") == 0

    # Codes from sorted training vocabularies; 0 for missing and unseen.
    vocab = (lab.filter(text & train).select("ITEMID", "VALUE").unique().sort("ITEMID", "VALUE")
             .with_columns(CODE=(pl.int_range(pl.len()).over("ITEMID") + 1).cast(pl.Float64)))
    lab = lab.join(vocab, on=["ITEMID", "VALUE"], how="left").with_columns(
        CODE=pl.when(text).then(pl.col("CODE").fill_null(0.0)).otherwise(0.0))
    train_adm = adm.filter(train)

    def codes(frame: pl.DataFrame, vocabulary: pl.DataFrame, column: str) -> pl.Series:
        known = vocabulary[column].drop_nulls().unique().sort()
        table = pl.DataFrame({column: known, "CODE": np.arange(1, len(known) + 1)})
        return frame.select(column).join(table, on=column, how="left", maintain_order="left")["CODE"].fill_null(0)

    node_x = [codes(adm, train_adm, c) for c in categorical]
    item_x = [codes(items, items, c) for c in ("FLUID", "CATEGORY")]

    # z-score per ITEMID with the training rows' mean and std (a constant item gets std 1); then fill.
    stats = lab.filter(train & ~text).group_by("ITEMID").agg(MEAN=pl.col("VALUENUM").mean(),
                                                             STD=pl.col("VALUENUM").std())
    stats = stats.with_columns(STD=pl.when(pl.col("STD") > 0).then(pl.col("STD")).otherwise(1.0))
    lab = lab.join(stats, on="ITEMID", how="left").with_columns(
        Z=((pl.col("VALUENUM") - pl.col("MEAN")) / pl.col("STD")).fill_nan(0.0).fill_null(0.0))

    # 24-hour timesteps from the midnight of the admission day; early and late rows out.
    elapsed = pl.col("CHARTTIME") - pl.col("ADMITTIME").dt.truncate("1d")
    lab = lab.with_columns(ELAPSED=elapsed).with_columns(TIMESTEP=pl.col("ELAPSED").dt.total_seconds() // 86_400)
    keep = ((pl.col("ELAPSED") >= pl.duration(seconds=0)) & (pl.col("ELAPSED") <= pl.duration(days=max_stay_days))
            & (pl.col("CHARTTIME") <= pl.col("DISCHTIME") + pl.duration(hours=after_discharge_hours)))
    if max_timestep is not None:
        keep &= pl.col("TIMESTEP") <= max_timestep
    lab = lab.filter(keep)

    # One row per (HADM_ID, TIMESTEP, ITEMID): the latest CHARTTIME; sorted for slicing by offsets.
    lab = lab.sort("SPLIT", "HADM_ID", "TIMESTEP", "ITEMID", "CHARTTIME", maintain_order=True)
    lab = lab.unique(["HADM_ID", "TIMESTEP", "ITEMID"], keep="last", maintain_order=True)

    # Edge arrays: admission and item node indices, [code, z] attributes.
    admissions = np.sort(adm["HADM_ID"].to_numpy())
    item_ids = np.sort(items["ITEMID"].to_numpy())
    edge_index = np.vstack([np.searchsorted(admissions, lab["HADM_ID"].to_numpy()),
                            np.searchsorted(item_ids, lab["ITEMID"].to_numpy())]).astype(np.int64)
    edge_attr = np.column_stack([lab["CODE"].to_numpy(), lab["Z"].to_numpy()]).astype(np.float32)
    timestep = lab["TIMESTEP"].to_numpy().astype(np.int64)
    return _baseline_result(read_rows, edge_index, edge_attr, timestep, node_x, item_x)


STEP_FUNCTIONS = {"floor": pyarrow_floor, "baseline": plain_pandas, "baseline_polars": plain_polars}


def run_step(name: str, data_dir: Path, result_path: Path) -> int:
    """The child's side of a measured step: run it, write what it found as JSON."""
    found = STEP_FUNCTIONS[name](Path(data_dir))
    Path(result_path).write_text(json.dumps(found) + "\n")
    return 0


def main(argv: list[str]) -> int:
    """``NAME DATA_DIR RESULT_JSON``: run the step NAME, write what it found."""
    name, data_dir, result_path = argv
    return run_step(name, Path(data_dir), Path(result_path))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
