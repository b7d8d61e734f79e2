"""The load stage's problems: each a :class:`schemas.StageError` of stage ``load``, side ``input``, naming the
table, the file and its lines. Finding the tables (:mod:`pipeline.reading.locate`), reading them (:mod:`pipeline.reading.load`)
and decoding their text (:mod:`pipeline.reading.decode`) raise them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from schemas.catalogue import check_info
from schemas.errors import SAMPLE_CAP, StageError

# Problems of the file as a whole: their message counts no rows.
WHOLE_FILE = frozenset({"file_missing", "file_unreadable", "file_empty", "compression", "table_empty"})


def load_error(
    table: str,
    check: str,
    *,
    path: Path | None = None,
    lines: list[int] | None = None,
    count: int = 1,
    column: str | None = None,
    detail: str = "",
) -> StageError:
    """A problem of ``table`` found by ``check`` in ``path`` (the first :data:`SAMPLE_CAP` of ``lines`` kept)."""
    where = f"{path}" if path is not None else table
    lines = lines or []
    return StageError(
        stage="load",
        side="input",
        check=check,
        column=column,
        count=count,
        failure_cases=pd.DataFrame({"line": pd.Series(lines[:SAMPLE_CAP], dtype="int64")}),
        table=table,
        detail=f"{check_info(check).title} in {where}" + (f". {detail}" if detail else ""),
        advice=check_info(check).advice,
        whole_file=check in WHOLE_FILE,
    )

