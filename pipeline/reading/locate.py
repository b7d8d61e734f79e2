"""Find the raw tables by name in DATA_DIR: MIMIC-III or MIMIC-IV naming (``LABEVENTS.csv``,
``hosp/labevents.csv.gz``), any case; when one is missing, the near name to suggest (``Admission.csv``).

Only names are looked at (folders listed, entries ``stat``-ed): no file is opened here, reading the tables is
:mod:`pipeline.reading.load`'s. A table that cannot be found raises :class:`schemas.StageError` with stage ``load``.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Iterator

from pipeline.kernel.stage import Stage
from pipeline.reading.load_error import load_error
from schemas.errors import StageError
from schemas.raw import TABLES

LOAD = Stage("load", colour="#7f7f7f")  # reading the files: what reports their problems, first in every run's order

SUFFIXES = (".csv", ".csv.gz")
SUBFOLDERS = ("", "hosp")
# A missing table's file name is compared with the names in DATA_DIR and its subfolders; one this close
# (difflib's ratio) is suggested: 'Admission.csv' for ADMISSIONS, 'labevents.tsv' for LABEVENTS.
NEAR_NAME_CUTOFF = 0.8
# The other tables of MIMIC-III and MIMIC-IV: a file named for one of them is that table, never a misspelling
# (D_ITEMS is near D_LABITEMS, CHARTEVENTS near LABEVENTS).
OTHER_MIMIC_TABLES = frozenset("""
    callout caregiver caregivers chartevents cptevents d_cpt d_hcpcs d_icd_diagnoses d_icd_procedures d_items
    datetimeevents diagnoses_icd drgcodes emar emar_detail hcpcsevents icustays ingredientevents inputevents
    inputevents_cv inputevents_mv microbiologyevents noteevents omr outputevents patients pharmacy poe poe_detail
    prescriptions procedureevents procedureevents_mv procedures_icd provider services transfers
""".split())
_NEAR_NAME_SCAN = 2000  # entries looked at, at most: DATA_DIR may be a large folder


def candidate_names(table: str) -> list[str]:
    """The file names tried for a table, relative to DATA_DIR (matched case-insensitively)."""
    return [str(Path(sub) / f"{table.lower()}{suffix}") for sub in SUBFOLDERS for suffix in SUFFIXES]


def locate_table(data_dir: Path, table: str) -> Path:
    """The file holding ``table`` under ``data_dir`` (MIMIC-III or MIMIC-IV naming, any case)."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise load_error(table, "file_unreadable", path=data_dir, detail="DATA_DIR is not a folder")
    found = next(_candidates(data_dir, table), None)
    if found is not None:
        return _regular(found, table)
    tried = ", ".join(candidate_names(table))
    near = near_name(data_dir, table)
    hint = ""
    if near is not None:
        target = f"{table}.csv" + (".gz" if near.name.lower().endswith(".gz") else "")
        relative = near.relative_to(data_dir).as_posix()
        hint = (f"Did you mean {relative!r}? Rename it to {target}. "
                if near.parent in (data_dir, data_dir / "hosp") else
                f"Did you mean {relative!r}? Move it to DATA_DIR as {target}, "
                "or give its folder as DATA_DIR. ")
    raise load_error(table, "file_missing", path=data_dir, detail=f"{hint}Tried (any case): {tried}")


def locate_tables(data_dir: Path) -> tuple[dict[str, Path], list[StageError]]:
    """Where each table is, collecting the tables that could not be found."""
    found: dict[str, Path] = {}
    problems: list[StageError] = []
    for table in TABLES:
        try:
            found[table] = locate_table(data_dir, table)
        except StageError as problem:
            problems.append(problem)
            continue
        others = [path for path in _candidates(Path(data_dir), table) if path != found[table]]
        if others:
            problems.append(load_error(
                table, "file_ambiguous", path=found[table], count=len(others),
                detail=f"Read {str(found[table])!r}; also found, not read: " + ", ".join(repr(str(p)) for p in others)))
    return found, problems


def near_name(data_dir: Path, table: str) -> Path | None:
    """The file in ``data_dir`` or one of its subfolders whose name is nearest one of ``table``'s names
    (``Admission.csv`` for ADMISSIONS), when it is near enough; files named for any MIMIC table are left out."""
    known = {name for other in TABLES for name in (f"{other.lower()}.csv", f"{other.lower()}.csv.gz")}
    wanted = [f"{table.lower()}.csv", f"{table.lower()}.csv.gz"]
    files: dict[str, Path] = {}  # lower-case name (with its subfolder) -> file
    try:
        for entry in _entries(data_dir):
            name = entry.name.lower()
            if entry.name.startswith(".") or name.split(".")[0] in OTHER_MIMIC_TABLES:
                continue
            if entry.is_dir():
                for inner in _entries(entry):
                    inner_name = inner.name.lower()
                    if inner.is_file() and inner_name.split(".")[0] not in OTHER_MIMIC_TABLES \
                            and (inner_name not in known or inner_name in wanted):
                        files.setdefault(f"{name}/{inner_name}", inner)
            elif name not in known and entry.is_file():
                files.setdefault(name, entry)
    except OSError:
        return None
    scored = sorted((-max(difflib.SequenceMatcher(None, key.rsplit("/", 1)[-1], w).ratio() for w in wanted),
                     key.count("/"), key) for key in files)
    if not scored or -scored[0][0] < NEAR_NAME_CUTOFF:
        return None
    return files[scored[0][2]]


def _entries(folder: Path) -> list[Path]:
    """The first entries of ``folder`` in name order (at most ``_NEAR_NAME_SCAN``)."""
    entries = []
    for entry in folder.iterdir():
        entries.append(entry)
        if len(entries) >= _NEAR_NAME_SCAN:
            break
    return sorted(entries)


def _candidates(data_dir: Path, table: str) -> Iterator[Path]:
    """Every entry named like ``table`` under ``data_dir``, the one to read first (exact case before other cases)."""
    for sub in SUBFOLDERS:
        folder = _child_ci(data_dir, sub) if sub else data_dir
        if folder is None or not folder.is_dir():
            continue
        for suffix in SUFFIXES:
            name = f"{table}{suffix}"
            exact = [folder / name] if os.path.lexists(folder / name) else []
            yield from exact + sorted(p for p in folder.iterdir() if p.name.lower() == name.lower() and p not in exact)


def _regular(path: Path, table: str) -> Path:
    """``path`` when it is a regular file (or a link to one); else file_unreadable, saying what it is
    (:func:`not_regular`)."""
    why = not_regular(path)
    if why is not None:
        raise load_error(table, "file_unreadable", path=path, detail=why)
    return path


def not_regular(path: Path) -> str | None:
    """Why ``path`` is not a regular file or a link to one (``"It is not a regular file but a FIFO (named pipe);
    ..."``), or None where it is one: what every reader of badpoints asks before it opens a file.

    Only ``stat`` is called: a FIFO is never opened, so reading never blocks on it, and a device (``/dev/zero``)
    is never read."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        what = "a link to nothing" if path.is_symlink() else (exc.strerror or type(exc).__name__)
        return f"It is not a regular file: {what}"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((kind for test, kind in kinds if test(mode)), "not a file")
    link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
    return f"It is not a regular file but {what}{link}; badpoints reads regular files only"


def _child_ci(folder: Path, name: str) -> Path | None:
    """The entry of ``folder`` named ``name`` case-insensitively (exact match preferred)."""
    exact = folder / name
    if exact.exists():
        return exact
    matches = sorted(p for p in folder.iterdir() if p.name.lower() == name.lower())
    return matches[0] if matches else None
