"""The report: every finding of a run, as JSON for CI and as text for people.

Findings (:mod:`pipeline.reporting.findings`) are ordered by the stage that made them, in the order the run hands the report
(:attr:`Report.stages`: the stage names and their colours, in flow order).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd

from pipeline.reporting.findings import (CLASS_SAMPLE, Finding, finding_from_error, finding_from_mask,  # noqa: F401 (re-exported)
                                         format_items, item_names, summary_finding)
from schemas.catalogue import CANNOT_RUN_CHECKS, ERROR, OFF, WARNING


def as_shown(text: str) -> str:
    """``text`` with the bytes of a path that are not UTF-8 (Python holds them as surrogates: ``data\\xff``)
    written as escapes, ``\\xff``: printable and encodable as UTF-8, never an error."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class InputFile:
    """A file a run read: the name findings give it, its path, its sha256, and how many ``rows`` it held, each a
    ``counts`` (a table's row; a graph of a .pt file's)."""

    table: str
    path: str
    sha256: str
    rows: int
    counts: str = "row"

    def as_json(self) -> dict[str, Any]:
        """Its record; ``counts`` only where it is not a row (a report of tables reads as it always has)."""
        record = asdict(self)
        if self.counts == "row":
            del record["counts"]
        return record


@dataclass
class Report:
    """Everything a run found. Severities from the config are applied by :meth:`with_severities`."""

    inputs: list[InputFile] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    overrides: dict[str, str] = field(default_factory=dict)
    attrition: dict[str, Any] = field(default_factory=dict)
    # The stages that report, in flow order, with their colours (the run's ``pipeline.kernel.stage.Order``): how findings
    # are ordered and drawn. Not part of the JSON.
    stages: dict[str, str] = field(default_factory=dict)
    # The stages' lines of the terminal summary (label, text), made by the run that made the report from what it
    # fitted: a report reused from the cache prints them as the run did (the terminal's alone: not in as_json).
    summary: list[tuple[str, str]] = field(default_factory=list)

    def _place(self, stage: str) -> int:
        return list(self.stages).index(stage) if stage in self.stages else 99

    @property
    def status(self) -> str:
        """``errors``, ``warnings`` or ``ok``: what the status line and the JSON say (the exit code follows it)."""
        severities = {f.severity for f in self.findings}
        if ERROR in severities:
            return "errors"
        return "warnings" if WARNING in severities else "ok"

    @property
    def exit_code(self) -> int:
        """2 when badpoints could not run (a check of ``CANNOT_RUN_CHECKS``), 1 for any other error, else 0.

        Taken from the findings alone, like :attr:`status`, so the two always agree: 0 is ``ok`` or
        ``warnings``, 1 and 2 are ``errors``.
        """
        if any(f.check in CANNOT_RUN_CHECKS and f.severity == ERROR for f in self.findings):
            return 2
        return 1 if self.status == "errors" else 0

    def add(self, findings: Iterable[Finding | None]) -> None:
        self.findings.extend(f for f in findings if f is not None)

    def with_severities(self, severity: dict[str, str]) -> "Report":
        """Apply the config's severity changes; changed findings say so, 'off' ones are dropped."""
        kept = []
        for finding in self.findings:
            level = severity.get(finding.check)
            if level is None or level == finding.severity:
                if finding.severity != OFF:  # a check off by default is reported only when the config says how
                    kept.append(finding)
            elif level != OFF:
                note = f" (severity changed from {finding.severity} to {level} by config)"
                kept.append(replace(finding, severity=level, default_severity=finding.severity,
                                    message=finding.message + note))
        return Report(inputs=list(self.inputs), findings=kept, overrides=dict(severity), attrition=self.attrition,
                      stages=self.stages)

    def findings_frame(self) -> pd.DataFrame:
        """The findings as a DataFrame (for notebooks)."""
        columns = ["severity", "stage", "table", "check", "column", "count", "lines", "message"]
        return pd.DataFrame([asdict(f) for f in self.findings], columns=columns + ["default_severity", "samples"])[
            columns
        ]

    def attrition_frame(self) -> pd.DataFrame:
        """Every filter, join and dedup with its rows in and out, as a DataFrame (for notebooks).

        The LABEVENTS ledger (read = kept + quarantined + deduplicated) is in ``frame.attrs["ledger"]``.
        """
        columns = ["table", "stage", "step", "rows_in", "rows_out", "quarantined", "merged", "clipped"]
        steps = (self.attrition or {}).get("steps") or []
        frame = pd.DataFrame(steps, columns=columns).astype(
            {c: "int64" for c in columns[3:]} if steps else {})
        frame["removed"] = frame["rows_in"] - frame["rows_out"]
        frame.attrs["ledger"] = dict((self.attrition or {}).get("LABEVENTS") or {})
        return frame

    def stage_counts(self) -> dict[str, dict[str, int]]:
        """Findings per stage (in flow order) and severity: ``{"raw": {"error": 2, "warning": 1}, ...}``."""
        counts: dict[str, dict[str, int]] = {}
        for finding in sorted(self.findings, key=lambda f: self._place(f.stage)):
            by_severity = counts.setdefault(finding.stage, {})
            by_severity[finding.severity] = by_severity.get(finding.severity, 0) + 1
        return counts

    def as_json(self) -> dict[str, Any]:
        order = {ERROR: 0, WARNING: 1}
        findings = sorted(self.findings, key=lambda f: (order.get(f.severity, 2), self._place(f.stage),
                                                        f.table or "", f.check, f.column or ""))
        return {
            "status": self.status,
            "inputs": [i.as_json() for i in self.inputs],
            "findings": [f.as_json() for f in findings],
            "overrides": dict(sorted(self.overrides.items())),
            "attrition": self.attrition,
        }

    def without_samples(self) -> "Report":
        """The report without any raw value (``--show-values``' samples): what travels with a build."""
        return replace(self, findings=[replace(f, samples=None) for f in self.findings])

    def write_json(self, path: Path) -> None:
        """Write the report atomically: a temp file in the same folder (umask applies), then rename."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.as_json(), indent=2) + "\n"
        write_atomic(path, text.encode("utf-8"))


def tally(errors: int, warnings: int, notes: int) -> str:
    """``'0 errors, 1 warning, 15 notes'``: how the status line and ``inspect`` count findings."""
    return ", ".join(f"{n} {noun}{'s' if n != 1 else ''}"
                     for n, noun in ((errors, "error"), (warnings, "warning"), (notes, "note")))


def write_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of it. A link is followed (its target is written, the
    link kept). A device, FIFO or socket, or anything named under /dev or /proc (``--json /dev/stdout``, whatever
    stdout is), is written in place, appended to: none is ever replaced by a file."""
    path = Path(path)
    try:
        mode = path.stat().st_mode  # through any link
    except FileNotFoundError:
        mode = None
    if mode is not None and (not stat.S_ISREG(mode) or str(path).startswith(("/dev/", "/proc/"))):
        with open(path, "ab") as handle:  # a folder is an OSError here
            handle.write(data)
        return
    with atomic_path(Path(os.path.realpath(path)) if path.is_symlink() else path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temp path beside ``path`` to write in any way; on success it is synced and renamed to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
