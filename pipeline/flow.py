"""The whole order of badpoints in one place: each run is a straight list of stage calls."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Config
from pipeline.load import TABLES, load_text_tables
from pipeline.parse import RawTables, check_raw
from pipeline.report import InputFile, Report, finding_from_error
from schemas.errors import require_validation

# Checks that mean the run could not happen at all (exit 2), rather than that the data is bad (exit 1).
CANNOT_RUN = ("file_missing", "file_unreadable")


@dataclass(frozen=True)
class Validation:
    report: Report
    tables: RawTables

    @property
    def exit_code(self) -> int:
        if any(f.check in CANNOT_RUN for f in self.report.findings):
            return 2
        return self.report.exit_code


def validate(data_dir: Path, config: Config, *, show_values: bool = False) -> Validation:
    """Read the raw tables, run every raw check, and collect all findings."""
    require_validation()
    text, problems = load_text_tables(Path(data_dir))
    report = Report(inputs=[
        InputFile(table=t.table, path=str(t.path), sha256=t.sha256, rows=t.rows)
        for t in (text[name] for name in TABLES if name in text)
    ])
    report.add(finding_from_error(problem) for problem in problems)
    raw = check_raw(
        {name: table.frame for name, table in text.items()},
        valuenum_abs_bound=config.raw.valuenum_abs_bound,
        stay_tolerance_hours=config.raw.stay_tolerance_hours,
        severity=config.severity,
        show_values=show_values,
        max_lines=config.report.max_lines,
    )
    report.add(raw.findings)
    return Validation(report=report.with_severities(dict(config.severity)), tables=raw.tables)
