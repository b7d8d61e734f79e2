"""Write a small, deterministic MIMIC-III-shaped sample: ADMISSIONS, D_LABITEMS, LABEVENTS.

Usage: ``python data/sample/generate.py [OUT_DIR]`` (default: this folder).

The files follow MIMIC-III v1.4: upper-case headers, minimal quoting, empty fields
for nulls, datetimes ``YYYY-MM-DD HH:MM:SS`` shifted into 2100-2200, real ITEMIDs,
labels (including MIMIC's own "Asparate" spelling) and LOINC codes. About 120
admissions of 90 subjects carry 30-200 lab rows each, drawn as panels (CHEM, CBC,
COAG, ...) several times a day, so a 24-hour bucket holds many events.

Every ID, date, FLAG and foreign key is valid. The quirks below are deliberate,
because later stages of badpoints are tested on them:

1. Numeric items: VALUE is the number as text, VALUENUM the same number, with
   FLAG 'abnormal' outside a reference range. AST (50878) is heavy-tailed: mostly
   15-40 IU/L with a few values in the thousands (max 12940), as in shock liver.
2. Categorical urine items (51492 Protein, 51486 Leukocytes, 51487 Nitrite,
   51466 Blood): VALUE 'NEG', 'TR', '1+', 'MOD', ..., VALUENUM empty.
3. Mixed items: Troponin T (51003) has '<0.01' and 'See Comments', Urobilinogen
   (51514) 'NEG' and '>8', PTT (51275) '>150'; those rows have VALUENUM empty.
4. Sodium, Urine (51100): every normal (FLAG empty) value is exactly 20 while
   abnormal values differ, so a standard deviation fitted on normal rows is zero.
5. NTproBNP (50963): exactly one normal observation, the other rows abnormal.
6. Lipase (50956) and Potassium, Body Fluid (51041) occur exactly once.
   Four D_LABITEMS items (50835, 50852, 51009, 51439) never occur.
7. About 5% of rows are outpatient labs: HADM_ID empty, charted 7-365 days away
   from any admission of the subject.
8. About 1% of rows are charted 2-48 hours before ADMITTIME (ED labs) and about
   1% 1-72 hours after DISCHTIME, still carrying the admission's HADM_ID.
9. About 2% of rows carry FLAG 'delta' (the largest changes from the subject's
   previous value of the item); re-run panels give exact CHARTTIME ties for the
   same HADM_ID and ITEMID.

Output is byte-identical for a given seed: one numpy Generator consumed in a fixed
order, no set or hash ordering, every value formatted to text before writing,
naive timestamps only (no time zone), UTF-8 without BOM and '\\n' line endings.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SEED = 2101
EPOCH = pd.Timestamp("2101-01-01")
DAY = 24 * 60  # times are kept as integer minutes after EPOCH until written

N_SUBJECTS = 90
ADMISSION_COUNTS = np.repeat([1, 2, 3], [65, 20, 5])  # admissions per subject: 120 in all
NEWBORNS = 3
DEATHS = 9
DRAWS_PER_DAY = 3.0
ADMISSION_PANELS = ("CHEM", "CBC", "COAG")
PRE_ADMISSION_DRAWS = 8  # admission panels moved 2-48 h before ADMITTIME
POST_DISCHARGE_DRAWS = 18  # one CHEM or CBC panel 1-72 h after DISCHTIME
RERUN_DRAWS = 6  # panels repeated at the same CHARTTIME
BNP_DRAWS = 12
OUTPATIENT_VISITS = 44  # CHEM + CBC with no HADM_ID
DELTA_SHARE = 0.02
AST_EXTREMES = (1140, 2390, 4475, 7820, 12940)
AST_MODERATE_SHARE = 0.03
BNP_NORMAL_VALUE = 88
URINE_SODIUM_NORMAL_VALUE = 20

# D_LABITEMS rows and how each item is simulated. DIST is 'norm' (CENTER = mean,
# SPREAD = sd) or 'lognorm' (CENTER = median, SPREAD = sigma); items without DIST
# take their VALUE from TOKENS. LO..HI is the reference range, DEC the decimals.
ITEM_COLUMNS = ["ITEMID", "LABEL", "FLUID", "CATEGORY", "LOINC_CODE", "PANEL", "UOM",
                "DIST", "CENTER", "SPREAD", "LO", "HI", "DEC"]
NA = np.nan
ITEMS = pd.DataFrame([
    (50983, "Sodium", "Blood", "Chemistry", "2951-2", "CHEM", "mEq/L", "norm", 138, 4.5, 133, 145, 0),
    (50971, "Potassium", "Blood", "Chemistry", "2823-3", "CHEM", "mEq/L", "norm", 4.1, 0.55, 3.3, 5.1, 1),
    (50902, "Chloride", "Blood", "Chemistry", "2075-0", "CHEM", "mEq/L", "norm", 103, 5, 96, 108, 0),
    (50882, "Bicarbonate", "Blood", "Chemistry", "1963-8", "CHEM", "mEq/L", "norm", 25, 4, 22, 32, 0),
    (51006, "Urea Nitrogen", "Blood", "Chemistry", "3094-0", "CHEM", "mg/dL", "lognorm", 19, 0.6, 6, 20, 0),
    (50912, "Creatinine", "Blood", "Chemistry", "2160-0", "CHEM", "mg/dL", "lognorm", 1.0, 0.5, 0.5, 1.2, 1),
    (50931, "Glucose", "Blood", "Chemistry", "2345-7", "CHEM", "mg/dL", "lognorm", 125, 0.3, 70, 100, 0),
    (50868, "Anion Gap", "Blood", "Chemistry", "1863-0", "CHEM", "mEq/L", "norm", 14, 3, 8, 20, 0),
    (51301, "White Blood Cells", "Blood", "Hematology", "804-5", "CBC", "K/uL", "lognorm", 9, 0.45, 4, 11, 1),
    (51222, "Hemoglobin", "Blood", "Hematology", "718-7", "CBC", "g/dL", "norm", 11, 1.8, 12, 16, 1),
    (51221, "Hematocrit", "Blood", "Hematology", "4544-3", "CBC", "%", "norm", 32.5, 5.5, 36, 48, 1),
    (51265, "Platelet Count", "Blood", "Hematology", "777-3", "CBC", "K/uL", "lognorm", 220, 0.45, 150, 440, 0),
    (51250, "MCV", "Blood", "Hematology", "787-2", "CBC", "fL", "norm", 90, 6, 82, 98, 0),
    (51249, "MCHC", "Blood", "Hematology", "786-4", "CBC", "%", "norm", 33.8, 1.2, 31, 35, 1),
    (51277, "RDW", "Blood", "Hematology", "788-0", "CBC", "%", "norm", 14.8, 1.8, 10.5, 15.5, 1),
    (50960, "Magnesium", "Blood", "Chemistry", "2601-3", "LYTES", "mg/dL", "norm", 2.0, 0.3, 1.6, 2.6, 1),
    (50970, "Phosphate", "Blood", "Chemistry", "2777-1", "LYTES", "mg/dL", "norm", 3.4, 0.9, 2.7, 4.5, 1),
    (50893, "Calcium, Total", "Blood", "Chemistry", "2000-8", "LYTES", "mg/dL", "norm", 8.6, 0.6, 8.4, 10.3, 1),
    (51274, "PT", "Blood", "Hematology", "5902-2", "COAG", "sec", "lognorm", 13.8, 0.15, 10.4, 13.4, 1),
    (51275, "PTT", "Blood", "Hematology", "3173-2", "COAG", "sec", "lognorm", 32, 0.3, 22, 35, 1),
    (50861, "Alanine Aminotransferase (ALT)", "Blood", "Chemistry", "1742-6", "LFT", "IU/L", "lognorm", 28, 0.7, 0, 40, 0),
    (50878, "Asparate Aminotransferase (AST)", "Blood", "Chemistry", "1920-8", "LFT", "IU/L", "lognorm", 26, 0.28, 0, 40, 0),
    (50863, "Alkaline Phosphatase", "Blood", "Chemistry", "6768-6", "LFT", "IU/L", "lognorm", 90, 0.5, 39, 117, 0),
    (50885, "Bilirubin, Total", "Blood", "Chemistry", "1975-2", "LFT", "mg/dL", "lognorm", 0.7, 0.8, 0, 1.5, 1),
    (50862, "Albumin", "Blood", "Chemistry", "1751-7", "LFT", "g/dL", "norm", 3.3, 0.6, 3.5, 5.2, 1),
    (50820, "pH", "Blood", "Blood Gas", "11558-4", "ABG", "units", "norm", 7.38, 0.07, 7.35, 7.45, 2),
    (50818, "pCO2", "Blood", "Blood Gas", "11557-6", "ABG", "mm Hg", "norm", 41, 8, 35, 45, 0),
    (50821, "pO2", "Blood", "Blood Gas", "11556-8", "ABG", "mm Hg", "lognorm", 110, 0.5, 85, 105, 0),
    (50802, "Base Excess", "Blood", "Blood Gas", "11555-0", "ABG", "mEq/L", "norm", -1, 4, -3, 3, 0),
    (50813, "Lactate", "Blood", "Blood Gas", "32693-4", "ABG", "mmol/L", "lognorm", 1.7, 0.55, 0.5, 2.0, 1),
    (51491, "pH", "Urine", "Hematology", "5803-2", "UA", "units", "norm", 6.0, 0.6, 5, 8, 1),
    (51492, "Protein", "Urine", "Hematology", "5804-0", "UA", "", None, NA, NA, NA, NA, 0),
    (51486, "Leukocytes", "Urine", "Hematology", "5799-2", "UA", "", None, NA, NA, NA, NA, 0),
    (51487, "Nitrite", "Urine", "Hematology", "5802-4", "UA", "", None, NA, NA, NA, NA, 0),
    (51466, "Blood", "Urine", "Hematology", "5794-3", "UA", "", None, NA, NA, NA, NA, 0),
    (51514, "Urobilinogen", "Urine", "Hematology", "5818-0", "UA", "EU/dL", None, NA, NA, NA, NA, 0),
    (51003, "Troponin T", "Blood", "Chemistry", "6598-7", "CARD", "ng/mL", "lognorm", 0.05, 1.0, 0, 0.03, 2),
    (51100, "Sodium, Urine", "Urine", "Chemistry", "2955-3", "ULYTES", "mEq/L", "lognorm", 40, 0.9, 10, 100, 0),
    (51082, "Creatinine, Urine", "Urine", "Chemistry", "2161-8", "ULYTES", "mg/dL", "lognorm", 80, 0.6, 20, 300, 0),
    (50963, "NTproBNP", "Blood", "Chemistry", "33762-6", "BNP", "pg/mL", "lognorm", 2500, 0.8, 0, 125, 0),
    (50956, "Lipase", "Blood", "Chemistry", "3040-3", "LIPASE", "IU/L", "lognorm", 35, 0.5, 0, 60, 0),
    (51041, "Potassium, Body Fluid", "Other Body Fluid", "Chemistry", "2821-7", "FLUID", "mEq/L", "norm", 4.2, 0.5, NA, NA, 1),
    (50852, "% Hemoglobin A1c", "Blood", "Chemistry", "4548-4", None, "", None, NA, NA, NA, NA, 0),
    (51009, "Vancomycin", "Blood", "Chemistry", "20578-1", None, "", None, NA, NA, NA, NA, 0),
    (50835, "Albumin, Ascites", "Ascites", "Chemistry", "1749-1", None, "", None, NA, NA, NA, NA, 0),
    (51439, "WBC, Other Fluid", "Other Body Fluid", "Hematology", "26466-3", None, "", None, NA, NA, NA, NA, 0),
], columns=ITEM_COLUMNS).sort_values("ITEMID", ignore_index=True)

# Text results in percent. Items whose shares sum to 100 are categorical; the
# others are mixed: the remaining share of their rows is numeric.
TOKENS = pd.DataFrame([
    (51492, "NEG", 55, False), (51492, "TR", 15, False), (51492, "1+", 15, True),
    (51492, "2+", 10, True), (51492, "3+", 5, True),
    (51486, "NEG", 50, False), (51486, "TR", 12, False), (51486, "SM", 15, True),
    (51486, "MOD", 13, True), (51486, "LG", 10, True),
    (51487, "NEG", 88, False), (51487, "POS", 12, True),
    (51466, "NEG", 55, False), (51466, "TR", 10, False), (51466, "SM", 12, True),
    (51466, "MOD", 10, True), (51466, "LG", 13, True),
    (51514, "NEG", 30, False), (51514, "0.2", 37, False), (51514, "1", 12, False),
    (51514, "2", 8, True), (51514, "4", 5, True), (51514, "8", 3, True), (51514, ">8", 5, True),
    (51003, "<0.01", 25, False), (51003, "See Comments", 3, False),
    (51275, ">150", 3, True),
], columns=["ITEMID", "VALUE", "PCT", "ABNORMAL"])

PANEL_WEIGHTS = (("CHEM", 0.28), ("CBC", 0.24), ("LYTES", 0.14), ("COAG", 0.08), ("LFT", 0.07),
                 ("ABG", 0.09), ("UA", 0.04), ("CARD", 0.04), ("ULYTES", 0.02))
QUIRK_ITEMS = (51100, 50963, 50956, 51041)  # kept out of the 'delta' pick

ETHNICITY = (("WHITE", 0.68), ("BLACK/AFRICAN AMERICAN", 0.10), ("UNKNOWN/NOT SPECIFIED", 0.08),
             ("HISPANIC OR LATINO", 0.04), ("ASIAN", 0.03), ("OTHER", 0.03),
             ("HISPANIC/LATINO - PUERTO RICAN", 0.02), ("UNABLE TO OBTAIN", 0.02))
RELIGION = (("CATHOLIC", 0.33), ("NOT SPECIFIED", 0.18), ("PROTESTANT QUAKER", 0.13),
            ("UNOBTAINABLE", 0.10), ("JEWISH", 0.08), ("OTHER", 0.04), ("EPISCOPALIAN", 0.02),
            ("CHRISTIAN SCIENTIST", 0.01), ("GREEK ORTHODOX", 0.01), ("BUDDHIST", 0.01),
            ("MUSLIM", 0.01), (None, 0.08))
LANGUAGE = (("ENGL", 0.55), ("SPAN", 0.04), ("RUSS", 0.02), ("PTUN", 0.02), ("CANT", 0.01), (None, 0.36))
MARITAL_STATUS = (("MARRIED", 0.42), ("SINGLE", 0.24), ("WIDOWED", 0.12), ("DIVORCED", 0.06),
                  ("SEPARATED", 0.01), ("UNKNOWN (DEFAULT)", 0.01), (None, 0.14))
INSURANCE = (("Medicare", 0.47), ("Private", 0.36), ("Medicaid", 0.10), ("Government", 0.04),
             ("Self Pay", 0.03))
ADMISSION_TYPE = (("EMERGENCY", 0.75), ("ELECTIVE", 0.17), ("URGENT", 0.08))
EMERGENCY_LOCATION = (("EMERGENCY ROOM ADMIT", 0.70), ("TRANSFER FROM HOSP/EXTRAM", 0.14),
                      ("CLINIC REFERRAL/PREMATURE", 0.12), ("TRANSFER FROM SKILLED NUR", 0.04))
URGENT_LOCATION = (("TRANSFER FROM HOSP/EXTRAM", 0.75), ("PHYS REFERRAL/NORMAL DELI", 0.25))
DISCHARGE_LOCATION = (("HOME", 0.35), ("HOME HEALTH CARE", 0.25), ("SNF", 0.18),
                      ("REHAB/DISTINCT PART HOSP", 0.12), ("LONG TERM CARE HOSPITAL", 0.04),
                      ("HOSPICE-HOME", 0.02), ("DISC-TRAN CANCER/CHLDRN H", 0.02),
                      ("LEFT AGAINST MEDICAL ADVI", 0.02))
DIAGNOSES = ("PNEUMONIA", "SEPSIS", "CONGESTIVE HEART FAILURE",
             "CORONARY ARTERY DISEASE\\CORONARY ARTERY BYPASS GRAFT /SDA", "GASTROINTESTINAL BLEED",
             "ALTERED MENTAL STATUS", "CHEST PAIN", "S/P FALL", "ACUTE RENAL FAILURE",
             "DIABETIC KETOACIDOSIS", "UPPER GI BLEED", "ABDOMINAL PAIN", "INTRACRANIAL HEMORRHAGE",
             "PNEUMONIA;TELEMETRY", "HYPOTENSION, RENAL FAILURE", "CHEST PAIN, R/O MYOCARDIAL INFARCTION",
             "FEVER, NEUTROPENIA", "LIVER FAILURE, HEPATIC ENCEPHALOPATHY")

ADMISSIONS_HEADER = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "ADMITTIME", "DISCHTIME", "DEATHTIME",
                     "ADMISSION_TYPE", "ADMISSION_LOCATION", "DISCHARGE_LOCATION", "INSURANCE",
                     "LANGUAGE", "RELIGION", "MARITAL_STATUS", "ETHNICITY", "EDREGTIME", "EDOUTTIME",
                     "DIAGNOSIS", "HOSPITAL_EXPIRE_FLAG", "HAS_CHARTEVENTS_DATA"]
LABITEMS_HEADER = ["ROW_ID", "ITEMID", "LABEL", "FLUID", "CATEGORY", "LOINC_CODE"]
LABEVENTS_HEADER = ["ROW_ID", "SUBJECT_ID", "HADM_ID", "ITEMID", "CHARTTIME", "VALUE", "VALUENUM",
                    "VALUEUOM", "FLAG"]


def _pick(rng: np.random.Generator, table: tuple, size: int) -> np.ndarray:
    """Draw `size` values from a ((value, probability), ...) table."""
    values = np.array([value for value, _ in table], dtype=object)
    return rng.choice(values, size=size, p=[p for _, p in table])


def _timestamp_text(minutes: pd.Series) -> pd.Series:
    """Minutes after EPOCH as MIMIC datetime text; missing stays missing."""
    return (EPOCH + pd.to_timedelta(minutes, unit="min")).dt.strftime("%Y-%m-%d %H:%M:%S")


def _admissions(rng: np.random.Generator) -> pd.DataFrame:
    """One row per admission, times as minutes after EPOCH, in (SUBJECT_ID, ADMITTIME) order."""
    subjects = np.sort(rng.choice(np.arange(100, 100_000), size=N_SUBJECTS, replace=False))
    counts = rng.permutation(ADMISSION_COUNTS)
    n = int(counts.sum())
    adm = pd.DataFrame({"SUBJECT_ID": np.repeat(subjects, counts),
                        "HADM_ID": rng.choice(np.arange(100_000, 200_000), size=n, replace=False)})
    seq = adm.groupby("SUBJECT_ID").cumcount().to_numpy()
    is_last = seq == np.repeat(counts, counts) - 1

    stay = np.clip(np.round(rng.lognormal(np.log(5 * DAY), 0.65, n)), DAY, 20 * DAY).astype(np.int64)
    step = stay + rng.integers(30 * DAY, 900 * DAY, n)  # readmissions come 30-900 days after discharge
    before = pd.Series(step).groupby(adm["SUBJECT_ID"]).cumsum().to_numpy() - step
    adm["ADMIT"] = np.repeat(rng.integers(0, 89 * 365 * DAY, N_SUBJECTS), counts) + before
    adm["DISCH"] = adm["ADMIT"] + stay

    newborn = np.zeros(n, dtype=bool)
    newborn[rng.choice(np.flatnonzero(np.repeat(counts, counts) == 1), NEWBORNS, replace=False)] = True
    expired = np.zeros(n, dtype=bool)
    expired[rng.choice(np.flatnonzero(is_last & ~newborn), DEATHS, replace=False)] = True
    adm["EXPIRED"] = expired

    kind = np.where(newborn, "NEWBORN", _pick(rng, ADMISSION_TYPE, n))
    adm["ADMISSION_TYPE"] = kind
    adm["ADMISSION_LOCATION"] = np.select(
        [kind == "EMERGENCY", kind == "URGENT"],
        [_pick(rng, EMERGENCY_LOCATION, n), _pick(rng, URGENT_LOCATION, n)],
        "PHYS REFERRAL/NORMAL DELI")
    adm["DISCHARGE_LOCATION"] = np.where(expired, "DEAD/EXPIRED", _pick(rng, DISCHARGE_LOCATION, n))
    adm["INSURANCE"] = np.where(newborn, "Private", _pick(rng, INSURANCE, n))
    per_subject = {"LANGUAGE": LANGUAGE, "RELIGION": RELIGION,
                   "MARITAL_STATUS": MARITAL_STATUS, "ETHNICITY": ETHNICITY}
    for column, table in per_subject.items():
        adm[column] = np.repeat(_pick(rng, table, N_SUBJECTS), counts)
    adm.loc[newborn, ["LANGUAGE", "MARITAL_STATUS"]] = None

    from_ed = adm["ADMISSION_LOCATION"].eq("EMERGENCY ROOM ADMIT").to_numpy()
    adm["EDREG"] = np.where(from_ed, adm["ADMIT"] - rng.integers(60, 600, n), np.nan)
    adm["EDOUT"] = np.where(from_ed, adm["ADMIT"] + rng.integers(5, 90, n), np.nan)
    adm["DIAGNOSIS"] = np.where(newborn, "NEWBORN", rng.choice(np.array(DIAGNOSES, dtype=object), n))
    adm["HAS_CHARTEVENTS_DATA"] = (rng.random(n) < 0.95).astype(int)
    return adm


def _inpatient_draws(adm: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Specimen draws (one panel at one time) that belong to an admission."""
    n = len(adm)
    admit, disch = adm["ADMIT"].to_numpy(), adm["DISCH"].to_numpy()
    stay = disch - admit

    per_stay = np.round(stay / DAY * DRAWS_PER_DAY * rng.lognormal(0, 0.25, n))
    at = np.repeat(np.arange(n), np.clip(per_stay, 5, 27).astype(int))
    routine = pd.DataFrame({"AT": at, "T": admit[at] + (rng.random(len(at)) * stay[at]).astype(np.int64),
                            "PANEL": _pick(rng, PANEL_WEIGHTS, len(at))})

    first = admit + rng.integers(0, 120, n)
    early = rng.choice(np.flatnonzero(adm["ADMISSION_TYPE"].eq("EMERGENCY")), PRE_ADMISSION_DRAWS, replace=False)
    first[early] = admit[early] - rng.integers(2 * 60, 2 * DAY, PRE_ADMISSION_DRAWS)
    admission_labs = pd.DataFrame({"AT": np.repeat(np.arange(n), len(ADMISSION_PANELS)),
                                   "T": np.repeat(first, len(ADMISSION_PANELS)),
                                   "PANEL": np.tile(ADMISSION_PANELS, n)})

    late = rng.choice(np.flatnonzero(~adm["EXPIRED"]), POST_DISCHARGE_DRAWS, replace=False)
    after_discharge = pd.DataFrame({"AT": late, "T": disch[late] + rng.integers(60, 3 * DAY, len(late)),
                                    "PANEL": rng.choice(np.array(["CHEM", "CBC"], dtype=object), len(late))})

    reruns = routine.iloc[np.sort(rng.choice(len(routine), RERUN_DRAWS, replace=False))]

    rare_panels = np.array(["BNP"] * BNP_DRAWS + ["LIPASE", "FLUID"], dtype=object)
    rare_at = rng.integers(0, n, len(rare_panels))
    rare = pd.DataFrame({"AT": rare_at, "PANEL": rare_panels,
                         "T": admit[rare_at] + (rng.random(len(rare_at)) * stay[rare_at]).astype(np.int64)})

    draws = pd.concat([admission_labs, routine, reruns, after_discharge, rare], ignore_index=True)
    ids = adm[["SUBJECT_ID", "HADM_ID"]].iloc[draws["AT"]].reset_index(drop=True)
    return pd.concat([ids.astype({"HADM_ID": "Int64"}), draws[["T", "PANEL"]]], axis=1)


def _outpatient_draws(adm: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """CHEM + CBC panels with no HADM_ID, 7-365 days before the first or after the last stay.

    Subjects who died in hospital only get visits before; newborns only after.
    """
    span = (adm.assign(NEWBORN=adm["ADMISSION_TYPE"].eq("NEWBORN"))
            .groupby("SUBJECT_ID")
            .agg(FIRST=("ADMIT", "min"), LAST=("DISCH", "max"), DIED=("EXPIRED", "any"), BORN=("NEWBORN", "any")))
    who = span.iloc[rng.integers(0, len(span), OUTPATIENT_VISITS)]
    away = rng.integers(7 * DAY, 365 * DAY, OUTPATIENT_VISITS)
    before = ((rng.random(OUTPATIENT_VISITS) < 0.6) & ~who["BORN"].to_numpy()) | who["DIED"].to_numpy()
    visits = pd.DataFrame({"SUBJECT_ID": who.index.to_numpy(),
                           "HADM_ID": pd.array([pd.NA] * OUTPATIENT_VISITS, dtype="Int64"),
                           "T": np.where(before, who["FIRST"] - away, who["LAST"] + away)})
    return pd.concat([visits.assign(PANEL="CHEM"), visits.assign(PANEL="CBC")], ignore_index=True)


def _numeric_values(events: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """Draw each row's number from its item's distribution, rounded to the item's decimals."""
    z = np.clip(rng.standard_normal(len(events)), -3.5, 3.5)
    center, spread = events["CENTER"].to_numpy(), events["SPREAD"].to_numpy()
    raw = np.where(events["DIST"].eq("lognorm"), center * np.exp(spread * z), center + spread * z)
    scale = 10.0 ** events["DEC"].to_numpy()
    raw = np.where(events["LO"] >= 0, np.maximum(raw, 1 / scale), raw)  # no zeros or negatives

    item = events["ITEMID"].to_numpy()
    ast = np.flatnonzero(item == 50878)
    tail = rng.choice(ast, len(AST_EXTREMES) + round(AST_MODERATE_SHARE * len(ast)), replace=False)
    raw[tail[: len(AST_EXTREMES)]] = AST_EXTREMES
    raw[tail[len(AST_EXTREMES):]] = rng.lognormal(np.log(180), 0.7, len(tail) - len(AST_EXTREMES))
    raw[rng.choice(np.flatnonzero(item == 50963))] = BNP_NORMAL_VALUE

    value = np.round(raw * scale) / scale + 0.0  # + 0.0 turns -0.0 into 0.0
    normal = (value >= events["LO"].to_numpy()) & (value <= events["HI"].to_numpy())
    return np.where((item == 51100) & normal, URINE_SODIUM_NORMAL_VALUE, value)


def _text_results(events: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Which rows get a text VALUE from TOKENS, indexed like `events`."""
    bands = TOKENS.assign(HI=TOKENS.groupby("ITEMID")["PCT"].cumsum())
    bands["LO"] = bands["HI"] - bands["PCT"]
    draws = pd.DataFrame({"ITEMID": events["ITEMID"], "U": 100 * rng.random(len(events))})
    hits = draws.reset_index(names="ROW").merge(bands, on="ITEMID")
    hits = hits[(hits["U"] >= hits["LO"]) & (hits["U"] < hits["HI"])]
    return hits.set_index("ROW")[["VALUE", "ABNORMAL"]]


def _delta_rows(events: pd.DataFrame, number: pd.Series, flag: pd.Series) -> pd.Index:
    """Rows with the largest relative change from the subject's previous value of the item."""
    previous = number.groupby([events["SUBJECT_ID"], events["ITEMID"]]).shift()
    change = ((number - previous).abs() / previous.abs()).where(
        flag.eq("") & previous.gt(0) & ~events["ITEMID"].isin(QUIRK_ITEMS))
    return change.dropna().sort_values(ascending=False, kind="stable").index[: round(DELTA_SHARE * len(events))]


def _labevents(adm: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """LABEVENTS rows, sorted by (SUBJECT_ID, CHARTTIME, ITEMID), every field as text."""
    draws = pd.concat([_inpatient_draws(adm, rng), _outpatient_draws(adm, rng)], ignore_index=True)
    events = (draws.merge(ITEMS, on="PANEL")
              .sort_values(["SUBJECT_ID", "T", "ITEMID"], kind="stable", ignore_index=True))

    value = _numeric_values(events, rng)
    formats = "%." + events["DEC"].astype(int).astype(str) + "f"
    text = pd.Series(np.char.mod(formats.to_numpy(str), value), index=events.index, dtype=object)
    abnormal = pd.Series((value < events["LO"]) | (value > events["HI"]), index=events.index)
    tokens = _text_results(events, rng)
    text[tokens.index] = tokens["VALUE"].to_numpy()
    abnormal[tokens.index] = tokens["ABNORMAL"].to_numpy(bool)

    number = pd.to_numeric(text, errors="coerce")
    flag = pd.Series(np.where(abnormal, "abnormal", ""), index=events.index, dtype=object)
    flag[_delta_rows(events, number, flag)] = "delta"

    return pd.DataFrame({
        "ROW_ID": np.arange(1, len(events) + 1),
        "SUBJECT_ID": events["SUBJECT_ID"],
        "HADM_ID": events["HADM_ID"],
        "ITEMID": events["ITEMID"],
        "CHARTTIME": _timestamp_text(events["T"]),
        "VALUE": text,
        "VALUENUM": text.where(number.notna(), ""),
        "VALUEUOM": events["UOM"],
        "FLAG": flag,
    })[LABEVENTS_HEADER]


def _admissions_table(adm: pd.DataFrame) -> pd.DataFrame:
    """ADMISSIONS.csv columns, datetimes as text."""
    return adm.assign(
        ROW_ID=np.arange(1, len(adm) + 1),
        ADMITTIME=_timestamp_text(adm["ADMIT"]),
        DISCHTIME=_timestamp_text(adm["DISCH"]),
        DEATHTIME=_timestamp_text(adm["DISCH"].where(adm["EXPIRED"])),
        EDREGTIME=_timestamp_text(adm["EDREG"]),
        EDOUTTIME=_timestamp_text(adm["EDOUT"]),
        HOSPITAL_EXPIRE_FLAG=adm["EXPIRED"].astype(int),
    )[ADMISSIONS_HEADER]


def _labitems_table() -> pd.DataFrame:
    """D_LABITEMS.csv columns, ROW_ID in ITEMID order."""
    return ITEMS.assign(ROW_ID=np.arange(1, len(ITEMS) + 1))[LABITEMS_HEADER]


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    """MIMIC-style CSV: minimal quoting, empty nulls, UTF-8 without BOM, '\\n' endings."""
    table.to_csv(path, index=False, encoding="utf-8", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)


def write_sample(out_dir: Path, *, seed: int = SEED) -> None:
    """Write ADMISSIONS.csv, D_LABITEMS.csv and LABEVENTS.csv into `out_dir`."""
    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed)
    adm = _admissions(rng)
    labevents = _labevents(adm, rng)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_csv(_admissions_table(adm), out_dir / "ADMISSIONS.csv")
    _write_csv(_labitems_table(), out_dir / "D_LABITEMS.csv")
    _write_csv(labevents, out_dir / "LABEVENTS.csv")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    write_sample(target)
    for name in ("ADMISSIONS.csv", "D_LABITEMS.csv", "LABEVENTS.csv"):
        print(f"{target / name}: {(target / name).stat().st_size:,} bytes")
