"""pipeline/engines/tasks.py: a part's work as a worker runs it, with no flow around it."""

from __future__ import annotations

import pandas as pd

from pipeline.engines.tasks import block_part, chain_part
from pipeline.kernel.handed import write_part
from pipeline.kernel.calls import Call, Link
from tests.pipeline.engines.rows import lab_frame


def test_a_part_vouched_for_is_not_validated_again_by_the_next_stage_in_a_worker(tmp_path):
    """``chain_part`` as a worker process runs it (no flow around it): a part that passed the stage before's guard
    (``schema``) is not validated again as the next stage's input; a part not vouched for is."""
    import pandera.pandas as pa

    from schemas.guard import guarded

    validated = []

    class Counted(pa.DataFrameModel):
        @pa.dataframe_check
        def counted(cls, frame: pd.DataFrame) -> bool:
            validated.append(len(frame))
            return True

    @guarded(stage="scale", takes=Counted)
    def halve(part: pd.DataFrame) -> pd.DataFrame:
        return part.assign(VALUENUM=part["VALUENUM"] / 2)

    source = tmp_path / "part.arrow"
    write_part(lab_frame(), source)
    work = ((Link(calls=(Call(halve),)),), ())
    done = chain_part((source, tmp_path / "vouched.arrow"), work=work, schema=Counted)
    assert done.rows == len(lab_frame()) and validated == []
    chain_part((source, tmp_path / "not.arrow"), work=work, schema=None)
    assert validated == [len(lab_frame())]


def test_a_block_task_run_again_finds_its_block(tmp_path):
    """A Dask task whose worker was lost is run again on another: the block's file is still there (the engine, not
    the task, deletes it once it has the result)."""
    path = tmp_path / "block.arrow"
    write_part(lab_frame(), path)
    assert block_part(path, call=len, kwargs={}) == block_part(path, call=len, kwargs={}) == 300
