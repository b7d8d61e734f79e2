"""pipeline/engines/pandas.py: the default engine, everything in this process on whole frames."""

from __future__ import annotations

import pandas as pd

from pipeline.engines.pandas import PANDAS
from pipeline.kernel.calls import Call, Link


def test_the_pandas_engine_runs_stages_on_the_whole_frame():
    frame = pd.DataFrame({"x": [3, 1, 2]}, index=pd.Index([7, 5, 6], name="line"))
    assert PANDAS.partition(frame) is frame and PANDAS.collect(frame) is frame
    assert PANDAS.chain(frame, [Link(calls=(Call(lambda f, k: f * k, (2,)),))]).events["x"].tolist() == [6, 2, 4]
    assert PANDAS.rows(frame, lambda f: f[f["x"] > 1]).index.tolist() == [7, 6]
