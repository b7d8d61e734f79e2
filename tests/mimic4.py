"""A small synthetic dataset shaped like MIMIC-IV's ``hosp/`` module, for tests that need its columns.

``hosp/labevents.csv.gz`` has MIMIC-IV's exact lower-case header, with ``comments`` and the reference range
bounds; ``hosp/admissions.csv.gz`` and ``hosp/d_labitems.csv.gz`` have theirs (the columns badpoints reads and a
few it ignores). Every admission has, per day, one creatinine row (a number with its reference range) and one
urine leukocytes row (text only). Troponin T (:data:`COMMENT_ITEM`) is numeric (a number on the third day), but
some of its rows have an empty ``value`` and ``valuenum`` and their result in ``comments``, as MIMIC-IV writes them:

- :data:`COMMON_COMMENT` ("NEG.") in every admission, on the first day: enough training admissions for a code;
- :data:`RARE_COMMENT` on the second day of one admission only (the first, or the one ``rare_hadm`` names): code 0;
- one creatinine row (:data:`NO_RESULT_ROW`) without any result: no value, valuenum nor comment.

Admissions come through the emergency department (``edregtime`` :data:`ED_LEAD` before ``admittime``), but every
fourth, whose ``edregtime`` is empty; :data:`ED_HADM` was registered the evening before, :data:`ED_EVENING` before
its ``admittime``, and its first day's labs (creatinine, leukocytes) were drawn there an hour after registration:
charted the day before its admission day, more than ``[bucket] ed_hours`` (12) before ``admittime``, in its ED stay.

The tables are a :class:`tests.corpus.Dataset`, so a test changes fields with ``set``/``plant`` and writes
them with ``write``; a row's source line is its index + 2.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.reading.load import load_text_tables
from tests.corpus import Dataset

LABEVENTS_HEADER = [
    "labevent_id", "subject_id", "hadm_id", "specimen_id", "itemid", "order_provider_id", "charttime",
    "storetime", "value", "valuenum", "valueuom", "ref_range_lower", "ref_range_upper", "flag", "priority",
    "comments",
]
ADMISSIONS_HEADER = ["subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type",
                     "admission_location", "discharge_location", "insurance", "language", "marital_status", "race",
                     "edregtime", "edouttime", "hospital_expire_flag"]
LABITEMS_HEADER = ["itemid", "label", "fluid", "category"]

NUMERIC_ITEM = 50912  # creatinine: a number with its reference range on every row
CATEGORICAL_ITEM = 51486  # urine leukocytes: text only
COMMENT_ITEM = 51003  # troponin T: numbers, and rows whose result is only in comments
COMMON_COMMENT = "NEG."
RARE_COMMENT = "RARE COMMENT"
NO_RESULT_ROW = 0  # the first lab row (line 2): creatinine without any result
DAYS = 3
ED_HADM = 20_000_002  # the second admission: registered in the ED the evening before, its first labs drawn there
ED_LEAD = pd.Timedelta(hours=3)  # edregtime before admittime (08:00), the same day
ED_EVENING = pd.Timedelta(hours=14)  # ED_HADM's: 18:00 the day before; its first creatinine at 19:00


def dataset(*, admissions: int = 40, rare_hadm: int | None = None) -> Dataset:
    """The MIMIC-IV-shaped tables: ``admissions`` admissions of as many patients, ``DAYS`` days each."""
    data = Dataset()
    data.header = {"ADMISSIONS": list(ADMISSIONS_HEADER), "D_LABITEMS": list(LABITEMS_HEADER),
                   "LABEVENTS": list(LABEVENTS_HEADER)}
    data.names = {"ADMISSIONS": "hosp/admissions.csv.gz", "D_LABITEMS": "hosp/d_labitems.csv.gz",
                  "LABEVENTS": "hosp/labevents.csv.gz"}
    data.rows = {
        "D_LABITEMS": [[str(NUMERIC_ITEM), "Creatinine", "Blood", "Chemistry"],
                       [str(CATEGORICAL_ITEM), "Leukocytes", "Urine", "Hematology"],
                       [str(COMMENT_ITEM), "Troponin T", "Blood", "Chemistry"]],
        "ADMISSIONS": [],
        "LABEVENTS": [],
    }
    first = pd.Timestamp("2150-01-01 08:00:00")
    hadm_ids = [20_000_001 + n for n in range(admissions)]
    rare_hadm = hadm_ids[0] if rare_hadm is None else rare_hadm
    for n, hadm in enumerate(hadm_ids):
        subject, admit = str(10_000_001 + n), first + pd.Timedelta(days=7 * n)
        registered = admit - (ED_EVENING if hadm == ED_HADM else ED_LEAD)
        ed = [_time(registered), _time(admit + pd.Timedelta(minutes=30))] if n % 4 != 3 else ["", ""]
        data.rows["ADMISSIONS"].append([subject, str(hadm), _time(admit), _time(admit + pd.Timedelta(days=DAYS)), "",
                                        "EW EMER.", "EMERGENCY ROOM", "HOME", "Medicare", "ENGLISH", "MARRIED",
                                        "WHITE", *ed, "0"])
        for day in range(DAYS):
            at = admit + pd.Timedelta(days=day, hours=1)
            if hadm == ED_HADM and day == 0:  # drawn in the ED, the evening before the admission day
                at = registered + pd.Timedelta(hours=1)
            number = f"{0.7 + 0.1 * ((n + day) % 5):.1f}"
            _lab(data, subject, hadm, NUMERIC_ITEM, at, number, number, "mg/dL", "0.5", "1.2")
            _lab(data, subject, hadm, CATEGORICAL_ITEM, at, "NEG", "", "", "", "")
            if day < 2:  # the days of its comment rows: one troponin row per admission and day, no merges
                continue
            troponin = f"{0.01 * (1 + (n + day) % 4):.2f}"
            _lab(data, subject, hadm, COMMENT_ITEM, at + pd.Timedelta(minutes=30), troponin, troponin, "ng/mL",
                 "0", "0.01")
        _lab(data, subject, hadm, COMMENT_ITEM, admit + pd.Timedelta(hours=5), "", "", "ng/mL", "", "",
             comments=COMMON_COMMENT)
        if hadm == rare_hadm:
            _lab(data, subject, hadm, COMMENT_ITEM, admit + pd.Timedelta(days=1, hours=5), "", "", "ng/mL", "", "",
                 comments=RARE_COMMENT)
    for column in ("value", "valuenum", "ref_range_lower", "ref_range_upper"):
        data.set("LABEVENTS", NO_RESULT_ROW, column, "")
    return data


def text_tables(data: Dataset, folder: Path) -> dict[str, pd.DataFrame]:
    """``data`` written under ``folder`` and read back as the raw stage gets it: text, index = source line."""
    tables, problems = load_text_tables(data.write(folder))
    if problems:
        raise problems[0]
    return {name: table.frame for name, table in tables.items()}


def lines_where(data: Dataset, **equal: str) -> list[int]:
    """Source lines of the LABEVENTS rows whose columns hold the given text (``itemid="51003"``)."""
    columns = {data.col("LABEVENTS", name): value for name, value in equal.items()}
    return [n + 2 for n, row in enumerate(data.rows["LABEVENTS"]) if all(row[i] == v for i, v in columns.items())]


def _time(stamp: pd.Timestamp) -> str:
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def _lab(data: Dataset, subject: str, hadm: int, item: int, at: pd.Timestamp, value: str, valuenum: str, unit: str,
         lower: str, upper: str, *, comments: str = "") -> None:
    rows = data.rows["LABEVENTS"]
    rows.append([str(len(rows) + 1), subject, str(hadm), str(70_000_000 + len(rows)), str(item), "P12345",
                 _time(at), _time(at + pd.Timedelta(hours=1)), value, valuenum, unit, lower, upper, "", "ROUTINE",
                 comments])


def in_mimic4_layout(mimic3: Path, folder: Path) -> Path:
    """MIMIC-III-layout tables (``ADMISSIONS.csv`` ...) written as MIMIC-IV lays them out: ``hosp/*.csv.gz`` with
    lower-case headers and MIMIC-IV's names (``ethnicity`` is ``race``); the values as they are. ``folder``."""
    names = {"ADMISSIONS": "admissions", "D_LABITEMS": "d_labitems", "LABEVENTS": "labevents"}
    (folder / "hosp").mkdir(parents=True, exist_ok=True)
    for table, name in names.items():
        frame = pd.read_csv(mimic3 / f"{table}.csv", dtype="str", keep_default_na=False)
        frame.columns = [{"ETHNICITY": "race"}.get(column, column.lower()) for column in frame.columns]
        frame.to_csv(folder / "hosp" / f"{name}.csv.gz", index=False, compression={"method": "gzip", "mtime": 0})
    return folder
