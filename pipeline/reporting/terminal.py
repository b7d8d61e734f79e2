"""The report in the terminal: every error and warning with its message, every note on one line, then a compact
summary (findings by stage, the ledgers, each stage's own lines, the status). Every text from the data is made safe
for a terminal first (:func:`printable`): shown, never obeyed."""

from __future__ import annotations

import contextlib
import os
import re
import textwrap
from typing import Any

from rich.console import Console
from rich.markup import escape

from pipeline.reporting.report import Report, as_shown, tally
from schemas.catalogue import CHECKS

# The terminal's findings: a message wrapped at this width, under an indent; a note is one line, its title.
_WIDTH, _INDENT = 110, " " * 8


_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


_NOUN = {"error": "error", "warning": "warning", "info": "note"}


_RANK = {"error": 0, "warning": 1, "info": 2}


class TerminalConsole(Console):
    """A console whose reader may leave early (``badpoints validate D | head -1``). rich exits 1 on a broken
    pipe, which reads as "the data has errors"; here the rest of that stream is dropped and the run goes on,
    so the JSON, HTML and JUnit files are written and the exit code says what the data is."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print with every text made safe for a terminal (:func:`printable`): a D_LABITEMS label holding
        ``ESC[2K`` must not rewrite the status line. The markup is ours; the JSON report keeps the text exact."""
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with contextlib.suppress(AttributeError, OSError, ValueError):  # later writes, and the flush at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # every control character, newline and tab too


def printable(text: str) -> str:
    """``text`` with each control character (ESC, CR, LF, TAB, BEL, DEL, C1 ...) written as its escape, ``\\x1b``:
    shown, never obeyed by the terminal. So a text is one line: what badpoints prints on several lines, it prints a
    line at a time, and a name from the data (a shard named ``0\\nstatus: ok``) never makes a line of its own."""
    return as_shown(_CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text))  # a path's odd bytes too


def consoles() -> tuple[Console, Console]:
    """stdout for the report, stderr for progress and problems; no colour where they are not terminals."""
    return TerminalConsole(highlight=False, soft_wrap=True), TerminalConsole(stderr=True, highlight=False, soft_wrap=True)


def print_report(console: Console, report: Report, *, quiet: bool = False) -> None:
    """The tables read, then what the input lacks (the findings of checks that ``announce``: a column absent or
    misnamed, and what the run does without it) with their messages, whatever their severity; then every other
    error and warning with its message, wrapped; every other note on one line, with its check's title (the JSON
    and HTML reports hold its message); errors only when quiet. Then the status line."""
    findings = report.as_json()["findings"]
    first = [] if quiet else [f for f in findings if CHECKS[f["check"]].announce]
    if not quiet:
        for source in report.inputs:
            counted = f"{source.counts}{'s' if source.rows != 1 else ''}"
            console.print(f"read {source.table:<10} {source.rows:>10,} {counted:<4}  {source.path}", markup=False)
    for finding in first:
        _print_whole(console, finding)
    notes = 0
    for finding in findings:
        if (quiet and finding["severity"] != "error") or finding in first:
            continue
        if finding["severity"] == "info":
            notes += 1
            style, label, head = _heading(finding)
            line = textwrap.shorten(f"{head}: {CHECKS[finding['check']].title}", _WIDTH + len(_INDENT) - 8)
            console.print(f"[{style}]{label:<7}[/] {escape(line)}")
            continue
        _print_whole(console, finding)
    if notes:
        console.print(f"{notes} note{'s' if notes != 1 else ''} in short: their messages are in the JSON (--json) "
                      "and HTML (--html) reports")


def _heading(finding: dict) -> tuple[str, str, str]:
    """A finding's style, label (``WARNING``) and head (``load/header_near_column LABEVENTS.VALUENUM (1)``)."""
    where = ".".join(p for p in (finding["table"], finding["column"]) if p)
    label = _NOUN.get(finding["severity"], finding["severity"]).upper()
    return (_STYLE.get(finding["severity"], ""), label,
            f"{finding['stage']}/{finding['check']} {where} ({finding['count']:,})")


def _print_whole(console: Console, finding: dict) -> None:
    """A finding's head, then its message wrapped under an indent (and its samples, with ``--show-values``)."""
    style, label, head = _heading(finding)
    console.print(f"[{style}]{label:<7}[/] {escape(head)}")
    for line in textwrap.wrap(printable(finding["message"]), _WIDTH, initial_indent=_INDENT,
                              subsequent_indent=_INDENT):  # wrapped as shown: escapes written out first
        console.print(escape(line))
    if finding.get("samples"):
        console.print(f"        values: {escape(', '.join(repr(v) for v in finding['samples']))}")


def print_summary(console: Console, report: Report) -> None:
    """The compact end: findings by stage, the LABEVENTS ledger and funnel, each stage's own lines (scale: its
    constant and fallback items), status."""
    console.print("[bold]summary[/]")
    counts = report.stage_counts()
    if counts:
        entries = [(f"{stage} " + ", ".join(f"{n} {_NOUN.get(sev, sev)}{'s' if n != 1 else ''}" for sev, n in ordered),
                    f"{stage} " + ", ".join(f"[{_STYLE.get(sev, '')}]{n} {_NOUN.get(sev, sev)}{'s' if n != 1 else ''}[/]"
                                            for sev, n in ordered))
                   for stage, levels in counts.items()
                   for ordered in [sorted(levels.items(), key=lambda kv: _RANK.get(kv[0], 3))]]
        lines, width = [[]], 12
        for plain, styled in entries:  # wrapped by the text shown, not by its markup
            if lines[-1] and width + 3 + len(plain) > _WIDTH + len(_INDENT):
                lines.append([])
                width = 12
            width += len(plain) + (3 if lines[-1] else 0)
            lines[-1].append(styled)
        for n, line in enumerate(lines):
            console.print(("  findings  " if n == 0 else " " * 12) + " · ".join(line))
    attrition = report.attrition or {}
    ledger = attrition.get("LABEVENTS")
    if not ledger and any(f.stage == "load" and f.severity == "error" for f in report.findings):
        console.print("  stages    not run: the run stopped before the stages (a table could not be read)")
    if ledger:
        console.print(f"  LABEVENTS read {ledger['read']:,} = kept {ledger['kept']:,} + quarantined "
                      f"{ledger['quarantined']:,} + deduplicated {ledger['deduplicated']:,}")
        funnel = [f"read {ledger['read']:,}"]
        last = ledger["read"]
        for stage, rows_out in _funnel(attrition.get("steps") or []):
            funnel.append(f"{stage} {rows_out:,} (-{last - rows_out:,})")
            last = rows_out
        stopped = f"  [bold red]stopped at {escape(str(attrition['stopped_at']))}[/]" \
            if attrition.get("stopped_at") else ""
        console.print(f"  funnel    {' -> '.join(funnel)}{stopped}")
    admissions = attrition.get("ADMISSIONS")
    if admissions:
        reasons = ", ".join(f"{n:,} {check.removeprefix('admission_').replace('_', ' ')}"
                            for check, n in admissions["dropped_by"].items() if n)
        splits = ", ".join(f"{name} {split['in_graphs']:,}/{split['read']:,}"
                           for name, split in admissions["splits"].items())
        console.print(f"  ADMISSIONS read {admissions['read']:,} = in graphs {admissions['in_graphs']:,} + dropped "
                      f"{admissions['dropped']:,}{f' ({reasons})' if reasons else ''}; in graphs/read: {splits}")
    for label, text in report.summary:  # the stages' own lines, as the run that made the report made them
        for line in textwrap.wrap(f"  {label:<9} {text}", _WIDTH + len(_INDENT), subsequent_indent=" " * 12):
            console.print(escape(line))
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = sum(f.severity == "warning" for f in report.findings)
    style = {"errors": "bold red", "warnings": "yellow", "ok": "green"}[report.status]
    console.print(f"[{style}]status: {report.status}[/] ({tally(errors, warnings, len(report.findings) - errors - warnings)})")
    if report.overrides:
        changed = ", ".join(f"{k}={v}" for k, v in sorted(report.overrides.items()))
        console.print(f"severities changed by config: {escape(changed)}")


def _funnel(steps: list[dict]) -> list[tuple[str, int]]:
    """LABEVENTS rows after each stage that removed or merged some (the stage's last step)."""
    after: dict[str, int] = {}
    changed: set[str] = set()
    for step in steps:
        if step["table"] != "LABEVENTS":
            continue
        after[step["stage"]] = step["rows_out"]
        if step["rows_in"] != step["rows_out"]:
            changed.add(step["stage"])
    return [(stage, rows) for stage, rows in after.items() if stage in changed]
