"""What the engine tests share: how many rows they generate, the lab rows and edge rows (in (split, HADM_ID) order)
they cut into parts, and the files a build wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from schemas.split import SPLITS

SYNTHETIC_ROWS = 40_000  # generated rows: ~90 admissions, a few seconds per run, every special item present


def output_files(out: Path) -> dict[str, bytes]:
    """Every file a build wrote, by its path in ``out`` (not the folder's owner marker)."""
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*"))
            if path.is_file() and path.name != ".badpoints"}


def lab_frame() -> pd.DataFrame:
    """300 lab rows of admissions 100..129 (some without HADM_ID), lines 2..301."""
    rng = np.random.default_rng(5)
    hadm = rng.integers(100, 130, size=300)
    return pd.DataFrame({
        "HADM_ID": pd.array(np.where(hadm % 11 == 0, pd.NA, hadm), dtype="Int64"),
        "VALUE": pd.Series(np.where(hadm % 3 == 0, None, "x" + pd.Series(hadm).astype(str)), dtype="str"),
        "VALUENUM": rng.normal(size=300),
        "CHARTTIME": pd.Timestamp("2150-01-01") + pd.to_timedelta(rng.integers(0, 1000, 300), unit="h"),
    }, index=pd.Index(np.arange(300) + 2, name="line"))


def edge_parts(seed: int, cuts: int) -> list[pd.DataFrame]:
    """Edge-like rows (SPLIT, HADM_ID) in (split, HADM_ID) order, cut into ``cuts`` parts at admission boundaries."""
    rng = np.random.default_rng(seed)
    hadm = np.unique(rng.integers(1_000, 9_000, 300))
    split = np.sort(rng.integers(0, 3, len(hadm)))
    per = rng.integers(1, 6, len(hadm))
    rows = pd.DataFrame({"SPLIT": np.repeat(np.array(SPLITS)[split], per), "HADM_ID": np.repeat(hadm, per)})
    bounds = np.unique(np.r_[0, np.sort(rng.choice(np.arange(1, len(hadm)), cuts - 1, replace=False)), len(hadm)])
    first_row = np.r_[0, np.cumsum(per)]
    return [rows.iloc[first_row[a]:first_row[b]] for a, b in zip(bounds[:-1], bounds[1:])]
