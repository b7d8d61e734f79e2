"""A finding: what a stage or check found, as one frozen record (the reports make and hold them:
``pipeline.reporting``). It names the severity, stage, table, check, column, how many rows, the first source lines
and a message that says what was found and what to do; raw values appear only in ``samples``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    severity: str
    stage: str
    table: str | None
    check: str
    column: str | None
    count: int
    lines: list[int]
    message: str
    default_severity: str | None = None
    samples: list[str] | None = None
    items: list[int | str] | None = None  # all the message names (ITEMIDs; MEDS codes, subjects), most rows first

    def as_json(self) -> dict[str, Any]:
        record = asdict(self)
        if record["default_severity"] is None or record["default_severity"] == record["severity"]:
            record.pop("default_severity")
        for key in ("samples", "items"):
            if record[key] is None:
                record.pop(key)
        return record
