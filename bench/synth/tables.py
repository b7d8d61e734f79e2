"""The small tables: the lab-item dictionary (with how each item is simulated) and the admissions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.synth.shape import (ADMISSIONS_PER_SUBJECT, CATEGORICAL_TOKENS, CATEGORIES, CONSTANT_RANKS, FLUIDS,
                               ILL_CONDITIONED_RANK, MIN_SUBJECTS, MINUTES_PER_DAY, MIXED_TOKENS, N_ITEMS,
                               NEVER_ORDERED, OUTPATIENT_SHARE, ROWS_PER_ADMISSION, SINGLE_ITEMS, SYNTHETIC_KINDS,
                               UNITS, ZIPF_EXPONENT, ZIPF_OFFSET, pick, sample_generator)


@dataclass(frozen=True)
class Items:
    """The lab-item dictionary and how each item is simulated, in popularity order (row i = rank i)."""

    table: pd.DataFrame  # ITEMID, LABEL, FLUID, CATEGORY, LOINC_CODE, KIND, DIST, CENTER, SPREAD, LO, HI, DEC, UOM, P
    tokens: pd.DataFrame  # ITEM (row of `table`), VALUE, VALUENUM (text or None), PCT, ABNORMAL
    cdf: np.ndarray  # cumulative popularity, exactly 1.0 from the last ordered item on
    special: dict[str, list[int]]


def lab_items(rng: np.random.Generator) -> Items:
    """753 items: the sample's 46 real ones first, then synthetic ones; specials at fixed ranks."""
    real, real_tokens = _real_items()
    ordered = real[real["KIND"] != "never"].sort_values("PANEL", key=_panel_rank, kind="stable")
    synth = _synthetic_items(rng, taken=set(real["ITEMID"]), n=N_ITEMS - len(real))
    # Popularity order: the sample's real items lead, then synthetic ones; the last are never ordered.
    synth_never = synth.iloc[-NEVER_ORDERED:]
    single = synth.iloc[-NEVER_ORDERED - SINGLE_ITEMS:-NEVER_ORDERED]
    ranked, ill, constant = _with_specials(pd.concat([ordered, synth.iloc[: -NEVER_ORDERED - SINGLE_ITEMS]],
                                                     ignore_index=True), first_synthetic=len(ordered))
    table = pd.concat([ranked, single.assign(KIND="numeric", DIST="norm"), synth_never,
                       real[real["KIND"] == "never"]], ignore_index=True)
    table["P"], cdf = _popularity(ordered=len(ranked))
    # Items without a distribution (categorical, never ordered) get harmless numbers that tokens replace.
    table = table.fillna({"CENTER": 0.0, "SPREAD": 0.0, "DEC": 0, "LOINC_CODE": "", "UOM": ""})
    tokens = _token_table(table, real_tokens, rng)
    special = {
        "ill_conditioned": [int(table.loc[ill, "ITEMID"])],
        "constant": [int(i) for i in table.loc[constant, "ITEMID"]],
        "single_observation": [int(i) for i in single["ITEMID"]],
        "never_ordered": sorted(int(i) for i in table.loc[table["P"] == 0, "ITEMID"]
                                if i not in set(single["ITEMID"])),
        "categorical": sorted(int(i) for i in table.loc[table["KIND"] == "categorical", "ITEMID"]),
        "mixed": sorted(int(i) for i in table.loc[table["KIND"] == "mixed", "ITEMID"]),
    }
    return Items(table=table, tokens=tokens, cdf=cdf, special=special)


def _real_items() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sample's items, each with its KIND (categorical, mixed, numeric, or never ordered), and their tokens."""
    gen = sample_generator()
    real = gen.ITEMS.copy()
    real_tokens = gen.TOKENS.copy()
    tokens_of = real_tokens.groupby("ITEMID")["PCT"].sum()
    real["KIND"] = np.select([real["ITEMID"].map(tokens_of).eq(100), real["ITEMID"].isin(tokens_of.index),
                              real["DIST"].notna()], ["categorical", "mixed", "numeric"], "never")
    return real, real_tokens


def _synthetic_items(rng: np.random.Generator, *, taken: set[int], n: int) -> pd.DataFrame:
    """``n`` synthetic items (ITEMIDs not ``taken``): kind, fluid, category, LOINC code, unit and distribution."""
    pool = np.array([i for i in range(50800, 51700) if i not in taken])
    ids = rng.choice(pool, n, replace=False)
    kind = pick(rng, SYNTHETIC_KINDS, n)
    center = 10.0 ** rng.uniform(-1.0, 3.3, n)
    lognorm = rng.random(n) < 0.5
    spread = np.where(lognorm, rng.uniform(0.15, 0.8, n), center * rng.uniform(0.05, 0.25, n))
    dec = np.clip(2 - np.floor(np.log10(center)), 0, 3)
    lo = np.where(lognorm, center * np.exp(-1.6 * spread), center - 1.6 * spread)
    hi = np.where(lognorm, center * np.exp(1.6 * spread), center + 1.6 * spread)
    return pd.DataFrame({
        "ITEMID": ids, "LABEL": [f"Lab test {i}" for i in ids],
        "FLUID": pick(rng, FLUIDS, n), "CATEGORY": pick(rng, CATEGORIES, n),
        "LOINC_CODE": np.where(rng.random(n) < 0.7,
                               [f"{a}-{b}" for a, b in zip(rng.integers(1000, 99999, n), rng.integers(0, 10, n))], ""),
        "KIND": kind, "DIST": np.where(kind == "categorical", None, np.where(lognorm, "lognorm", "norm")),
        "CENTER": center, "SPREAD": spread, "LO": lo, "HI": hi, "DEC": dec,
        "UOM": np.where(kind == "categorical", "", rng.choice(np.array(UNITS, dtype=object), n)),
    })


def _with_specials(ranked: pd.DataFrame, *, first_synthetic: int) -> tuple[pd.DataFrame, int, pd.Index]:
    """The ordered items with the ill-conditioned item (mean 1e6, std 1e-3) and the constant ones planted at their
    ranks among the synthetic items; their row labels."""
    ranked = ranked.copy()
    ill = ranked.index[first_synthetic + ILL_CONDITIONED_RANK]
    ranked.loc[ill, ["KIND", "DIST", "CENTER", "SPREAD", "LO", "HI", "DEC", "UOM"]] = (
        "numeric", "norm", 1e6, 1e-3, 1e6 - 0.0025, 1e6 + 0.0025, 4, "U/L")
    constant = ranked.index[[first_synthetic + rank for rank in CONSTANT_RANKS]]
    ranked.loc[constant, ["KIND", "DIST", "CENTER", "SPREAD", "DEC"]] = ("numeric", "constant", 20.0, 0.0, 0)
    ranked.loc[constant, ["LO", "HI"]] = (10.0, 40.0)
    return ranked, ill, constant


def _popularity(*, ordered: int) -> tuple[np.ndarray, np.ndarray]:
    """Each item's share of the rows, Zipf-like by rank (0 past the first ``ordered``), and their cumulative sum,
    exactly 1.0 from the last ordered item on."""
    rank = np.arange(N_ITEMS, dtype=float)
    p = np.where(rank < ordered, (rank + ZIPF_OFFSET) ** -ZIPF_EXPONENT, 0.0)
    share = p / p.sum()
    cdf = np.cumsum(share)
    cdf = cdf / cdf[ordered - 1]
    cdf[ordered - 1:] = 1.0
    return share, cdf


def _panel_rank(panel: pd.Series) -> pd.Series:
    """A real item's popularity rank: its panel's place in the sample's PANEL_WEIGHTS (other panels last)."""
    order = {name: n for n, (name, _) in enumerate(sample_generator().PANEL_WEIGHTS)}
    return panel.map(order).fillna(len(order))


def _token_table(table: pd.DataFrame, real_tokens: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """(ITEM row, VALUE, VALUENUM, PCT, ABNORMAL) for every categorical and mixed item, ITEM-ordered."""
    rows = []
    position = pd.Series(table.index, index=table["ITEMID"])
    for itemid, group in real_tokens.groupby("ITEMID", sort=False):
        rows += [(position[itemid], v, pct, ab) for v, pct, ab in group[["VALUE", "PCT", "ABNORMAL"]].itertuples(
            index=False)]
    synthetic = table.index[table["LABEL"].str.startswith("Lab test ") & table["KIND"].isin(["categorical", "mixed"])]
    for item in synthetic:
        sets = CATEGORICAL_TOKENS if table.at[item, "KIND"] == "categorical" else MIXED_TOKENS
        rows += [(item, v, pct, ab) for v, pct, ab in sets[rng.integers(len(sets))]]
    tokens = pd.DataFrame(rows, columns=["ITEM", "VALUE", "PCT", "ABNORMAL"]).sort_values("ITEM", kind="stable")
    numeric = pd.to_numeric(tokens["VALUE"], errors="coerce").notna()
    tokens["VALUENUM"] = tokens["VALUE"].where(numeric, None)  # '0.2' of Urobilinogen is a number
    return tokens.reset_index(drop=True)


# -- admissions ---------------------------------------------------------------------------------
def admissions(rng: np.random.Generator, rows: int, *, outpatient_share: float = OUTPATIENT_SHARE) -> pd.DataFrame:
    """One row per admission (times in minutes after EPOCH), sorted by (SUBJECT_ID, ADMIT); ROWS = its lab rows."""
    gen = sample_generator()
    mean_per_subject = sum(n * p for n, p in ADMISSIONS_PER_SUBJECT)
    n_subjects = max(MIN_SUBJECTS, round(rows / ROWS_PER_ADMISSION / mean_per_subject))
    counts = pick(rng, ADMISSIONS_PER_SUBJECT, n_subjects).astype(np.int64)
    n = int(counts.sum())
    subjects = np.sort(rng.choice(max(100_000, 4 * n_subjects), n_subjects, replace=False) + 1)
    adm = pd.DataFrame({"SUBJECT_ID": np.repeat(subjects, counts),
                        "HADM_ID": 100_000 + rng.choice(max(100_000, 4 * n), n, replace=False)})
    per_subject = np.repeat(counts, counts)
    seq = adm.groupby("SUBJECT_ID").cumcount().to_numpy()
    is_last = seq == per_subject - 1

    day = MINUTES_PER_DAY
    stay = np.clip(np.round(rng.lognormal(np.log(6 * day), 0.75, n)), 4 * 60, 80 * day).astype(np.int64)
    step = stay + rng.integers(30 * day, 900 * day, n)
    before = pd.Series(step).groupby(adm["SUBJECT_ID"]).cumsum().to_numpy() - step
    adm["ADMIT"] = np.repeat(rng.integers(0, 85 * 365 * day, n_subjects), counts) + before
    adm["DISCH"] = adm["ADMIT"] + stay
    died = np.repeat(rng.random(n_subjects) < 0.1, counts) & is_last
    adm["EXPIRED"] = died

    kind = pick(rng, gen.ADMISSION_TYPE, n)
    adm["ADMISSION_TYPE"] = kind
    adm["ADMISSION_LOCATION"] = np.select(
        [kind == "EMERGENCY", kind == "URGENT"],
        [pick(rng, gen.EMERGENCY_LOCATION, n), pick(rng, gen.URGENT_LOCATION, n)], "PHYS REFERRAL/NORMAL DELI")
    adm["DISCHARGE_LOCATION"] = np.where(died, "DEAD/EXPIRED", pick(rng, gen.DISCHARGE_LOCATION, n))
    adm["INSURANCE"] = pick(rng, gen.INSURANCE, n)
    for column, table in (("LANGUAGE", gen.LANGUAGE), ("RELIGION", gen.RELIGION),
                          ("MARITAL_STATUS", gen.MARITAL_STATUS), ("ETHNICITY", gen.ETHNICITY)):
        adm[column] = np.repeat(pick(rng, table, n_subjects), counts)
    from_ed = adm["ADMISSION_LOCATION"].eq("EMERGENCY ROOM ADMIT").to_numpy()
    adm["EDREG"] = np.where(from_ed, adm["ADMIT"] - rng.integers(60, 600, n), np.nan)
    adm["EDOUT"] = np.where(from_ed, adm["ADMIT"] + rng.integers(5, 90, n), np.nan)
    adm["DIAGNOSIS"] = rng.choice(np.array(gen.DIAGNOSES, dtype=object), n)
    adm["HAS_CHARTEVENTS_DATA"] = (rng.random(n) < 0.95).astype(int)

    inpatient = rows - round(outpatient_share * rows)
    base = min(5, inpatient // n)
    weight = (stay / day) ** 0.7 * rng.lognormal(0.0, 0.5, n)
    adm["ROWS"] = base + rng.multinomial(inpatient - base * n, weight / weight.sum())
    return adm


def admissions_table(adm: pd.DataFrame) -> pd.DataFrame:
    """ADMISSIONS.csv columns, as in the sample."""
    return sample_generator()._admissions_table(adm)


def labitems_table(items: Items) -> pd.DataFrame:
    """D_LABITEMS.csv columns, ROW_ID in ITEMID order."""
    table = items.table.sort_values("ITEMID", ignore_index=True)
    table = table.assign(ROW_ID=np.arange(1, len(table) + 1))
    return table[list(sample_generator().LABITEMS_HEADER)]
