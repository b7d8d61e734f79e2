"""pipeline/check/stage.py: the check stage's call on a frame (``checked_block``), which ``badpoints check`` runs on
each block of a table and the Guard on each frame a guarded function takes or gives."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pytest
from pandera.typing import Series

from pipeline import Guard
from pipeline.check.stage import checked_block
from schemas.errors import StageError

ROOT = Path(__file__).resolve().parents[3]
PYTHON_PAGE = ROOT / "docs" / "python.md"


def test_the_python_page_s_guard_of_a_schema_whose_check_lacks_its_bound_raises_what_the_page_prints(capsys,
                                                                                                     monkeypatch):
    """docs/python.md's guarded function whose schema has a z_within without its bound: the call raises, in collect
    mode too, a StageError with what the page's comment shows, and the guard reports no finding of the rows."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", PYTHON_PAGE.read_text(), flags=re.S)
                 if "class Unbounded" in b)
    page = types.ModuleType("python_page")  # pandera reads a model's annotations in its module
    monkeypatch.setitem(sys.modules, page.__name__, page)
    namespace = page.__dict__
    namespace.update(pa=pa, Series=Series, Guard=Guard, StageError=StageError,
                     lab_rows=pd.read_csv(ROOT / "data" / "sample" / "LABEVENTS.csv"))
    exec(block, namespace)  # noqa: S102
    printed = " ".join(capsys.readouterr().out.split())
    shown = re.search(r"print\(error\)\s+# (.*)", block).group(1)
    assert re.match(re.escape(shown).replace(r"\.\.\.", ".*?"), printed), (shown, printed)
    assert "Add bound: 1000 beside its other arguments" in printed
    assert namespace["unbounded"].report.findings == []


@pytest.mark.parametrize(("check", "said"), [
    (pa.Check.z_explained(column="Z", values="X", by="ITEM"), "names the column ITEM, which call 1 output lacks"),
    (pa.Check.values_within(low="low", high=1), "values_within(low=low, high=1) could not run"),
])
def test_a_check_that_cannot_run_on_a_frame_raises_rather_than_failing_its_rows(check, said):
    frame = pd.DataFrame({"ITEMID": [1, 1, 2], "X": [1.0, 2.0, 3.0], "Z": [0.0, 1.0, 2.0]})
    columns = {"Z": pa.Column(float, checks=[check])} if check.name == "values_within" else {}
    schema = pa.DataFrameSchema(columns, checks=[] if columns else [check])
    with pytest.raises(StageError) as refused:
        checked_block(frame, schema=schema, states={}, max_lines=20, show_values=False, table="call 1 output")
    assert said in str(refused.value) and refused.value.check == "file_unreadable"
