"""JUnit XML for CI: one test case per check, so a CI system lists the checks that failed and why.

Each check the run ran (a validation or a build: every check of the catalogue, ``schemas.catalogue.CHECKS``; a
``badpoints check``: its schema's, or the graph guard's) is a ``<testcase>`` with
``classname`` = its stage and ``name`` = its id, in a ``<testsuite>`` per stage.
Findings of severity error are its ``<failure>`` (every message, with its
lines); warnings and notes go to ``<system-out>``, which CI systems show with the
test case; a check the config set to ``off`` is ``<skipped>``. Raw values appear
only when the run was given ``--show-values`` (as in the JSON report).
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

from pipeline.reporting.report import Finding, Report, write_atomic
from schemas.catalogue import in_flow_order
from schemas.catalogue import CHECKS, ERROR, OFF

# Characters XML 1.0 cannot carry (NUL and most control characters), written as \\xNN instead.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MESSAGE_CAP = 1000
"""A failure's ``message`` attribute is cut at this many characters; its text holds every message whole."""


def _text(value: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


def _line(finding: Finding) -> str:
    where = ".".join(p for p in (finding.table, finding.column) if p)
    text = f"{finding.severity.upper()} {finding.stage}/{finding.check} {where} ({finding.count:,}): {finding.message}"
    if finding.samples:
        text += "\n  values: " + ", ".join(repr(v) for v in finding.samples)
    return text


def junit_tree(report: Report, *, name: str = "badpoints", checks: Sequence[str] | None = None) -> ET.ElementTree:
    """The report as a JUnit tree: ``<testsuites>``, a ``<testsuite>`` per stage, a ``<testcase>`` per check:
    each of ``checks`` (the ids of the checks the run ran; None: every check of the catalogue), and any check a
    finding names besides."""
    by_check: dict[str, list[Finding]] = {}
    for finding in sorted(report.findings, key=lambda f: (f.stage, f.table or "", f.column or "", f.message)):
        by_check.setdefault(finding.check, []).append(finding)
    listed = set(CHECKS) if checks is None else set(checks) | set(by_check)
    stages: dict[str, list[str]] = {}
    for info in in_flow_order([info for check, info in CHECKS.items() if check in listed], list(report.stages)):
        stages.setdefault(info.stage, []).append(info.id)
    for check in sorted(set(by_check) - set(CHECKS)):  # a check the catalogue does not know still shows
        stages.setdefault(by_check[check][0].stage, []).append(check)

    root = ET.Element("testsuites", name=name)
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for stage, checks in stages.items():
        suite = ET.SubElement(root, "testsuite", name=f"{name}.{stage}")
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="status", value=report.status)
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for check in checks:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=stage, name=check, time="0")
            findings = by_check.get(check, [])
            default = CHECKS[check].severity if check in CHECKS else None
            if report.overrides.get(check, default) == OFF and not findings:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="severity set to 'off' by the config")
                continue
            errors = [f for f in findings if f.severity == ERROR]
            if errors:
                counts["failures"] += 1
                first = errors[0].message
                message = first if len(first) <= MESSAGE_CAP else first[:MESSAGE_CAP - 1] + "…"
                if len(errors) > 1:
                    message = f"{len(errors)} findings; first: {message}"
                failure = ET.SubElement(case, "failure", message=_text(message), type=check)
                failure.text = _text("\n".join(_line(f) for f in errors))
            others = [f for f in findings if f.severity != ERROR]
            if others:
                ET.SubElement(case, "system-out").text = _text("\n".join(_line(f) for f in others))
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("errors", "0")
        suite.set("time", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("errors", "0")
    root.set("time", "0")
    ET.indent(root)
    return ET.ElementTree(root)


def junit_xml(report: Report, *, name: str = "badpoints", checks: Sequence[str] | None = None) -> bytes:
    """The JUnit XML document, UTF-8 with an XML declaration."""
    buffer = io.BytesIO()
    junit_tree(report, name=name, checks=checks).write(buffer, encoding="utf-8", xml_declaration=True)
    return buffer.getvalue() + b"\n"


def write_junit(report: Report, path: Path, *, name: str = "badpoints", checks: Sequence[str] | None = None) -> None:
    """Write the JUnit file atomically (a temp file in the same folder, then rename); ``checks`` as
    :func:`junit_tree` takes them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, junit_xml(report, name=name, checks=checks))
