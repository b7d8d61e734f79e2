"""A MEDS folder's ``metadata/`` as a run reads it: ``codes.parquet`` (its ``code`` and the columns normalization
reads: ``values/mean``, ``values/std``, ``code/vocab_index``) and ``subject_splits.parquet`` (subject_id -> split).

Each file is read through Python (:mod:`pipeline.reading.arrow`: a path of any bytes; a FIFO or a device is never
opened), and the columns a run reads are checked as MEDS-Transforms reads them: present where required, of their
kind (a code and a split text, string or large_string as MEDS-Transforms writes them; a subject id and a vocabulary
index integers; a mean and a std numbers), never null where required. A file that cannot be read, or that fails
this, is a :class:`Problem` naming it and why (the finding ``meds_metadata``), and the run reads it as absent. A file
with no row is valid: nothing listed, nothing given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import meds
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.reading.arrow import NotRegular, parquet_schema, read_parquet

CODES = Path(meds.code_metadata_filepath)  # metadata/codes.parquet
SPLITS = Path(meds.subject_splits_filepath)  # metadata/subject_splits.parquet
GIVEN = ("values/mean", "values/std")  # normalization uses them in place of its own fit
VOCAB_INDEX = "code/vocab_index"  # fit_vocabulary_indices' numbering, the codes of a normalized folder

Read = TypeVar("Read")


@dataclass(frozen=True)
class Problem:
    """A metadata file the run read as absent: its name (``codes.parquet``), its path and why."""

    name: str
    path: str
    why: str


@dataclass(frozen=True)
class Metadata:
    """``codes``: codes.parquet's ``code`` and those of :data:`GIVEN` and :data:`VOCAB_INDEX` it holds;
    ``splits``: subject_splits.parquet as subject_id -> split (the first where a subject is named twice), sorted;
    each None without its file or where it was refused; ``problems``: the files refused."""

    codes: pa.Table | None = None
    splits: pd.Series | None = None
    problems: tuple[Problem, ...] = ()

    def refused(self, name: str) -> bool:
        """Whether the file ``name`` (``codes.parquet``) is there and was refused."""
        return any(problem.name == name for problem in self.problems)

    def listed(self) -> pd.Index | None:
        """The codes codes.parquet lists, or None without it."""
        return None if self.codes is None else pd.Index(pc.unique(self.codes["code"]).to_pylist(), dtype=object)

    def vocabulary(self) -> dict[int, str]:
        """``code/vocab_index`` -> ``code`` (empty without the file or the column)."""
        if self.codes is None or VOCAB_INDEX not in self.codes.column_names:
            return {}
        table = self.codes.filter(pc.is_valid(self.codes[VOCAB_INDEX]))
        return dict(zip(table[VOCAB_INDEX].to_pylist(), table["code"].to_pylist()))


class _Refused(Exception):
    """A metadata file its schema refuses; the message says why."""


def read_metadata(root: Path) -> Metadata:
    """``root/metadata``'s codes.parquet and subject_splits.parquet, each read as absent where it is refused."""
    codes, code_problem = _read(Path(root) / CODES, _codes)
    splits, split_problem = _read(Path(root) / SPLITS, _splits)
    return Metadata(codes, splits, tuple(p for p in (code_problem, split_problem) if p is not None))


def _read(path: Path, read: Callable[[Path], Read]) -> tuple[Read | None, Problem | None]:
    """``read(path)``, or None without the file; where it cannot be read or is refused, None and the problem."""
    if not os.path.lexists(path):
        return None, None
    try:
        return read(path), None
    except (NotRegular, _Refused) as exc:
        why = str(exc)
    except (OSError, pa.ArrowException) as exc:
        why = f"could not be read as Parquet ({type(exc).__name__}: {exc})"[:300]
    return None, Problem(path.name, str(path), why)


_TEXT = ("text", (pa.types.is_string, pa.types.is_large_string))
_INTEGER = ("an integer", (pa.types.is_integer,))
_NUMBER = ("a number", (pa.types.is_integer, pa.types.is_floating))
CODE_COLUMNS = {"code": _TEXT, GIVEN[0]: _NUMBER, GIVEN[1]: _NUMBER, VOCAB_INDEX: _INTEGER}
SPLIT_COLUMNS = {"subject_id": _INTEGER, "split": _TEXT}


def _codes(path: Path) -> pa.Table:
    """codes.parquet's :data:`CODE_COLUMNS`: ``code`` required and never null."""
    return _columns(path, CODE_COLUMNS, required=("code",))


def _splits(path: Path) -> pd.Series:
    """subject_splits.parquet as subject_id -> split: both columns required, never null."""
    table = _columns(path, SPLIT_COLUMNS, required=("subject_id", "split"))
    splits = pd.Series(table["split"].to_numpy(zero_copy_only=False), index=table["subject_id"].to_numpy())
    return splits[~splits.index.duplicated()].sort_index()


def _columns(path: Path, kinds: dict[str, tuple[str, tuple]], *, required: tuple[str, ...]) -> pa.Table:
    """The columns of ``kinds`` the file holds, each of its kind; the ``required`` ones present and never null."""
    names = parquet_schema(path).names
    table = read_parquet(path, columns=[name for name in kinds if name in names])
    types = {name: table.schema.field(name).type for name in table.column_names}
    wrong = [f"{name} is {types[name]}, not {kinds[name][0]}" for name in table.column_names
             if not any(test(types[name]) for test in kinds[name][1])]
    why = ([f"no {name} column" for name in required if name not in names] + wrong
           + [f"{name} has {table[name].null_count:,} null(s)" for name in required
              if name in table.column_names and table[name].null_count])
    if why:
        raise _Refused(f"is not MEDS metadata as MEDS-Transforms reads it: {'; '.join(why)}")
    return table
