"""The README's Python examples run as written (on the sample), so the docs cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run(capsys, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    out = capsys.readouterr().out
    assert "warnings" in out
    assert "valuenum_finite" in out
    assert "(50963, 51100)" in out  # the seed's zero-std items are caught as constant
    assert "[scale:output] LABEVENTS.Z z_error_bound" in out
    assert namespace["validation"].exit_code == 0
    assert namespace["check"].ok, namespace["check"].problems  # the documented model passes preflight
    assert "True []" in out


def test_readme_documents_every_check():
    from schemas.checks import CHECKS

    text = (ROOT / "README.md").read_text()
    missing = [check for check in CHECKS if f"`{check}`" not in text]
    assert not missing, missing
