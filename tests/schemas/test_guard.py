"""schemas/guard.py: a chain of stages validates each frame once; any other call validates its input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.stages.bucket import bucket
from pipeline.config import load_config
from pipeline.stages.dedup import dedup
from schemas import guard
from schemas.errors import StageError
from tests.pipeline.stages.sample import sample_filled


def _bucket():
    events, admissions = sample_filled()
    config = load_config()
    return bucket(events, admissions, interval_hours=config.bucket.interval_hours,
                  max_timestep=config.bucket.max_timestep,
                  after_discharge_hours=config.bucket.after_discharge_hours,
                  late_policy=config.bucket.late_policy).frame


@pytest.fixture(scope="module")
def bucketed():
    return _bucket()


def _counting(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = guard.check_frame

    def counted(model, frame, **kwargs):
        seen.append(f"{kwargs['stage']}:{kwargs['side']}:{model.__name__}")
        return real(model, frame, **kwargs)

    monkeypatch.setattr(guard, "check_frame", counted)
    return seen


def test_in_a_chain_the_next_stage_trusts_the_output_its_guard_just_passed(monkeypatch):
    seen = _counting(monkeypatch)
    with guard.trusted_chain():
        dedup(_bucket())

    assert seen[-2:] == ["bucket:output:BucketedEvents", "dedup:output:EdgeRows"]
    assert not any(entry.endswith(":input:BucketedEvents") for entry in seen)


def test_outside_a_chain_every_input_is_validated(monkeypatch, bucketed):
    seen = _counting(monkeypatch)
    dedup(bucketed)

    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]


def test_a_frame_changed_after_its_guard_passed_is_validated_again(bucketed):
    """A copy with a bad point is another object: the chain trusts only the very frame that passed."""
    with guard.trusted_chain():
        guard._LAST_OUTPUT.set((bucketed, dedup.takes))
        broken = bucketed.assign(Z=bucketed["Z"].where(bucketed.index != bucketed.index[0], np.inf))
        with pytest.raises(StageError) as raised:
            dedup(broken)

    assert (raised.value.stage, raised.value.side, raised.value.column) == ("dedup", "input", "Z")
    assert guard._LAST_OUTPUT.get() is guard._OUTSIDE


def test_a_vouched_part_read_back_skips_only_the_input_guard_it_passed(monkeypatch, bucketed):
    """An engine's part read back from disk is another object: vouched for with the schema it passed as output, the
    next stage's input guard skips it inside a chain; outside one, or vouched for a looser schema, it is validated."""
    seen = _counting(monkeypatch)
    read_back = bucketed.copy()
    with guard.trusted_chain():
        dedup(guard.vouch(read_back, dedup.takes))
    assert seen == ["dedup:output:EdgeRows"]
    seen.clear()
    dedup(guard.vouch(bucketed.copy(), dedup.takes))  # outside a chain: vouching changes nothing
    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]
    seen.clear()
    from schemas.raw import LabEvents

    with guard.trusted_chain():
        dedup(guard.vouch(bucketed.copy(), LabEvents))  # passed a looser schema than dedup takes: validated
    assert seen == ["dedup:input:BucketedEvents", "dedup:output:EdgeRows"]


def test_a_guard_validates_the_frame_itself_without_copying_or_changing_it(bucketed):
    """No schema coerces or adds columns, so validation in place must hand back the very frame, unchanged."""
    before = bucketed.copy()
    passed = guard.check_frame(dedup.takes, bucketed, stage="dedup", side="input")

    assert passed is bucketed
    assert list(bucketed.columns) == list(before.columns)
    pd.testing.assert_frame_equal(bucketed, before)


def test_a_guarded_stage_names_its_stage_and_schemas():
    from pipeline.stages import split
    from schemas.clean import CleanAdmissions, CleanEvents
    from schemas.split import SplitAssignment, SplitEvents

    assert (split.assign_splits.stage, split.assign_splits.takes, split.assign_splits.gives) == (
        "split", CleanAdmissions, SplitAssignment)
    assert (split.attach_split.stage, split.attach_split.takes, split.attach_split.gives) == (
        "split", CleanEvents, SplitEvents)


# -- the StageError a failing schema becomes: every field pinned ----------------------------------------------
import pandera.pandas as pa  # noqa: E402
from pandera.typing import Series  # noqa: E402


class _Rows(pa.DataFrameModel):
    """A small strict model: X finite and not below -10, Y not null, and no row where X equals Y."""

    X: Series[float] = pa.Field(finite=(), ge=-10)
    Y: Series[float] = pa.Field(nullable=False)

    @pa.dataframe_check
    def x_differs_from_y(cls, frame: pd.DataFrame) -> pd.Series:
        return frame["X"] != frame["Y"]

    class Config:
        strict = True


def _frame(**columns) -> pd.DataFrame:
    base = {"X": [1.0, 2.0, 3.0, 4.0], "Y": [5.0, 6.0, 7.0, 8.0]}
    return pd.DataFrame({**base, **columns}, index=pd.Index([11, 12, 13, 14], name="line"))


def _raised(frame: pd.DataFrame, *, side: str = "output", table: str | None = None) -> StageError:
    with pytest.raises(StageError) as raised:
        guard.check_frame(_Rows, frame, stage="scale", side=side, table=table)
    return raised.value


def test_a_column_check_names_stage_side_check_column_count_lines_and_value_classes():
    error = _raised(_frame(X=[1.0, np.inf, np.inf, np.inf]))
    assert (error.stage, error.side, error.check, error.column, error.count, error.table) == (
        "scale", "output", "finite", "X", 3, "_Rows")
    assert error.failure_cases["line"].tolist() == [12, 13, 14] and error.failure_cases["line"].dtype == "int64"
    assert error.failure_cases["value_class"].tolist() == ["inf", "inf", "inf"]
    assert error.detail == "_Rows failed"
    assert error.advice == "The stage produced data its schema forbids"


def test_other_failing_column_checks_are_named_in_the_detail_and_the_input_side_blames_the_stage_before():
    # X fails two checks (not below -10 on lines 13-14, finite on line 12), Y one: the first (column, check) is
    # reported with its own rows only, the two others named with their rows.
    error = _raised(_frame(X=[1.0, np.inf, -50.0, -60.0], Y=[5.0, np.nan, 7.0, 8.0]), side="input",
                    table="LABEVENTS")
    assert (error.check, error.column, error.count, error.table) == ("greater_than_or_equal_to(-10)", "X", 2,
                                                                     "LABEVENTS")
    assert error.failure_cases["line"].tolist() == [13, 14]
    assert error.detail == "_Rows failed; also failed: X finite (1 row), Y not_nullable (1 row)"
    assert error.advice == "The stage was handed data its schema forbids: fix the stage before it"


def test_a_frame_wide_check_counts_each_failing_row_once_and_names_no_column():
    error = _raised(_frame(Y=[1.0, 6.0, 3.0, 8.0]))
    assert (error.check, error.column, error.count) == ("x_differs_from_y", None, 2)
    assert error.failure_cases["line"].tolist() == [11, 13]
    assert "value_class" not in error.failure_cases
    assert error.detail == "_Rows failed"


def test_a_missing_column_names_that_column():
    error = _raised(_frame().drop(columns="Y"))
    assert (error.check, error.column, error.count) == ("column_in_dataframe", "Y", 1)
    assert error.failure_cases["line"].tolist() == []
    assert error.detail == "1 column missing: Y"  # _Rows describes no column


def test_guarded_applied_at_call_time_records_stage_and_schemas_and_guards_both_sides():
    """Decorated here, not at import, so the decorator itself runs under the test."""
    stage = guard.guarded(stage="scale", takes=_Rows, gives=_Rows)(lambda frame: frame.assign(X=-frame["X"]))
    assert (stage.stage, stage.takes, stage.gives) == ("scale", _Rows, _Rows)
    assert stage(_frame(X=[1.0, 2.0, 3.0, 4.0]))["X"].tolist() == [-1.0, -2.0, -3.0, -4.0]
    with pytest.raises(StageError) as raised:
        stage(_frame(X=[1.0, 2.0, 3.0, np.inf]))
    assert (raised.value.side, raised.value.check, raised.value.failure_cases["line"].tolist()) == (
        "input", "finite", [14])
    with pytest.raises(StageError) as raised:
        stage(_frame(X=[1.0, 2.0, 30.0, 40.0]))  # -30 and -40 are below the output's bound
    assert (raised.value.side, raised.value.failure_cases["line"].tolist()) == ("output", [13, 14])


def test_exactly_one_other_failing_check_is_named():
    error = _raised(_frame(X=[1.0, 2.0, -50.0, -60.0], Y=[5.0, np.nan, 7.0, 8.0]))
    assert error.detail == "_Rows failed; also failed: Y not_nullable (1 row)"


class _Many(pa.DataFrameModel):
    """Seven columns, each not below 0."""

    A: Series[float] = pa.Field(ge=0)
    B: Series[float] = pa.Field(ge=0)
    C: Series[float] = pa.Field(ge=0)
    D: Series[float] = pa.Field(ge=0)
    E: Series[float] = pa.Field(ge=0)
    F: Series[float] = pa.Field(ge=0)
    G: Series[float] = pa.Field(ge=0)


def test_the_other_failures_named_are_capped_and_the_rest_counted():
    frame = pd.DataFrame({name: [-1.0, 1.0] for name in "ABCDEFG"}, index=pd.Index([11, 12], name="line"))
    with pytest.raises(StageError) as raised:
        guard.check_frame(_Many, frame, stage="scale", side="input")
    others = ", ".join(f"{name} greater_than_or_equal_to(0) (1 row)" for name in "BCDEF")
    assert raised.value.detail == f"_Many failed; also failed: {others} (+1 more)"


# -- a user's own frame, handed to a stage function directly --------------------------------------------------
def _users_frame() -> pd.DataFrame:
    """Lab rows as a reader makes them in a notebook, with MIMIC-IV's lower-case names: four columns, lines 2-7."""
    return pd.DataFrame({"hadm_id": [1, 1, 2, 2, 3, 3], "itemid": [50912] * 6,
                         "valuenum": [1.0, 1.2, 0.9, 1.1, 1.3, 1.0], "split": ["train"] * 4 + ["val", "test"]},
                        index=pd.RangeIndex(2, 8, name="line"))


def test_a_frame_missing_columns_gets_one_message_naming_each_column_with_what_it_holds():
    from pipeline.stages import scale
    from schemas.raw import ABOUT

    with pytest.raises(StageError) as raised:
        scale.apply_zscore(_users_frame(), None)  # the guard stops it before the stats are read
    error = raised.value
    missing = ["CHARTTIME", "FLAG", "KIND"]  # hadm_id, itemid, valuenum and split are there, in lower case
    assert (error.stage, error.side, error.check, error.column, error.count) == (
        "scale", "input", "column_in_dataframe", None, len(missing))
    dtypes = {"CHARTTIME": "datetime64[ns]"}
    listed = "; ".join(f"{name} ({dtypes.get(name, 'str')}): {ABOUT[name]}" for name in missing)
    assert str(error) == (f"[scale:input] EncodedEvents column_in_dataframe: 3 columns missing: {listed}. "
                          "scale.apply_zscore takes EncodedEvents (schemas.encode): give the frame these columns")


def test_a_frame_missing_columns_names_the_present_columns_failures_too():
    from pipeline.stages import scale

    with pytest.raises(StageError) as raised:
        scale.fit_zscore(_users_frame().assign(split="training", itemid=-1))
    error = raised.value
    assert error.detail.startswith("2 columns missing: FLAG (str): ")
    assert error.detail.endswith("; also failed: ITEMID greater_than(0) (6 rows), "
                                 "SPLIT isin(('train', 'val', 'test')) (6 rows)")


def test_a_direct_call_is_told_the_function_and_the_schema_it_takes_and_the_flow_to_fix_the_stage_before():
    from pipeline.stages import scale
    from tests.pipeline.stages.sample import sample_stages

    stages = sample_stages()
    broken = stages.encoded.assign(SPLIT=stages.encoded["SPLIT"].where(stages.encoded.index != 2, "training"))
    with pytest.raises(StageError) as direct:
        scale.apply_zscore(broken, stages.stats)
    assert direct.value.advice == ("scale.apply_zscore takes EncodedEvents (schemas.encode): repair or drop the rows "
                                   "named and call it again")
    with guard.trusted_chain(), pytest.raises(StageError) as in_flow:
        scale.apply_zscore(broken, stages.stats)
    assert in_flow.value.advice == guard.FLOW_ADVICE == ("The stage was handed data its schema forbids: fix the "
                                                         "stage before it")
    with pytest.raises(StageError) as fit:
        scale.fit_zscore(_users_frame())
    assert fit.value.advice == ("scale.fit_zscore reads SPLIT, VALUENUM, ITEMID, FLAG, HADM_ID, KIND of SplitEvents "
                                "(schemas.split): give the frame these columns")


def _lab_rows() -> pd.DataFrame:
    """Eight lab rows of one numeric item with every column the scale stage takes, in MIMIC-III's upper case."""
    return pd.DataFrame({
        "HADM_ID": [101, 102, 103, 104, 105, 106, 107, 108], "ITEMID": [50912] * 8,
        "CHARTTIME": pd.Timestamp("2150-01-01 08:00") + pd.to_timedelta(range(8), unit="D"),
        "VALUENUM": [0.9, 1.1, 1.0, 1.3, 0.8, 2.4, 1.2, 1.0], "FLAG": [None] * 5 + ["abnormal", None, None],
        "KIND": "numeric", "SPLIT": ["train"] * 6 + ["val", "test"], "NOTE": "kept as it is",
    }, index=pd.RangeIndex(2, 10, name="line"))


def test_a_frame_with_mimic_iv_s_lower_case_names_is_read_without_case_and_comes_back_in_its_own_case():
    from pipeline.stages import scale

    upper = _lab_rows().assign(VALUE=lambda rows: rows["VALUENUM"].astype("str"),
                               CODE=pd.array([pd.NA] * 8, dtype="Int64"))
    lower = upper.rename(columns=str.lower)
    stats = scale.fit_zscore(lower)
    assert stats == scale.fit_zscore(upper)  # hadm_id is HADM_ID, valuenum VALUENUM, ...
    scaled = scale.apply_zscore(lower, stats)
    assert list(scaled.columns) == [*lower.columns, "z", "z_bounded", "z_unseen"]  # the stage's columns too
    expected = scale.apply_zscore(upper, stats).rename(columns=str.lower)
    pd.testing.assert_frame_equal(scaled, expected)
    mixed = upper.rename(columns={"HADM_ID": "hadm_id", "NOTE": "note"})  # one renamed: the stage's stay upper
    assert list(scale.apply_zscore(mixed, stats).columns) == [*mixed.columns, "Z", "Z_BOUNDED", "Z_UNSEEN"]
    assert list(lower.columns) == [name.lower() for name in upper.columns]  # the frame handed in is unchanged


def test_a_name_two_columns_match_without_case_is_read_from_neither():
    from pipeline.stages import scale

    rows = _lab_rows().rename(columns={"HADM_ID": "hadm_id"}).assign(Hadm_Id=1)
    with pytest.raises(StageError) as raised:
        scale.fit_zscore(rows)
    assert raised.value.check == "column_in_dataframe" and raised.value.detail.startswith("1 column missing: HADM_ID")
    assert "(the frame has hadm_id and Hadm_Id: rename the one that holds it to HADM_ID)" in str(raised.value)


def test_apply_zscore_reads_no_value_or_code_where_the_frame_has_none_and_adds_none():
    """VALUE and CODE carry a categorical result: a frame without them holds none, and comes back without them."""
    from pipeline.stages import scale

    rows = _lab_rows()
    stats = scale.fit_zscore(rows)
    scaled = scale.apply_zscore(rows, stats)
    assert list(scaled.columns) == [*rows.columns, "Z", "Z_BOUNDED", "Z_UNSEEN"]
    with_both = rows.assign(VALUE=rows["VALUENUM"].astype("str"), CODE=pd.array([pd.NA] * 8, dtype="Int64"))
    pd.testing.assert_series_equal(scaled["Z"], scale.apply_zscore(with_both, stats)["Z"])
    categorical = rows.assign(KIND=["numeric"] * 7 + ["categorical"])  # a categorical row needs its CODE
    with pytest.raises(StageError) as raised:
        scale.apply_zscore(categorical, stats)
    assert (raised.value.check, raised.value.failure_cases["line"].tolist()) == ("categorical_rows_have_code", [9])


def _stage_functions() -> list:
    """Every stage function that takes a frame its schema guards, and every stage's fit as its Fit declares it."""
    import importlib
    import pkgutil

    import pipeline.stages
    from pipeline.flow import ORDER

    found = {}
    for module in pkgutil.walk_packages(pipeline.stages.__path__, prefix="pipeline.stages."):
        for value in vars(importlib.import_module(module.name)).values():
            if callable(value) and getattr(value, "takes", None) is not None:
                found[f"{value.stage}.{value.__name__}"] = value
    for stage in ORDER.prepare:
        for function in (stage.fit.whole, stage.fit.partial) if stage.fit is not None else ():
            if function is not None:
                found[f"{stage.name}.{function.__name__}"] = function
    return sorted(found.items())


@pytest.mark.parametrize("name,function", _stage_functions(), ids=[name for name, _ in _stage_functions()])
def test_no_stage_function_raises_a_bare_key_error_on_a_users_frame(name, function):
    """Handed a frame of a few columns, every stage function (and fit) says which columns it lacks."""
    from pipeline.stages.fill import FillPolicy

    kwargs = {"policies": {"Z": FillPolicy(policy="mean")}} if name == "fill.fit_fill" else {}
    with pytest.raises(StageError) as raised:
        function(_users_frame(), **kwargs)
    assert raised.value.check == "column_in_dataframe" and "missing" in str(raised.value)
    assert len(_stage_functions()) >= 20


def test_every_column_of_a_schema_a_stage_takes_says_what_it_holds():
    """The descriptions the missing-columns message names: every input schema's columns have one."""
    schemas = {function.takes for _, function in _stage_functions() if getattr(function, "takes", None)}
    undescribed = [(model.__name__, name) for model in schemas for name, column in model.to_schema().columns.items()
                   if not column.description]
    assert len(schemas) >= 8 and undescribed == []


def test_a_check_that_runs_out_of_memory_raises_it_never_a_stage_error():
    """Pandera reports a check that raised as the check failing (its failure case 'MemoryError()'): guarded, that read
    as bad data (exit 1). Memory that runs out is raised as such."""
    class Checked(pa.DataFrameModel):
        X: Series[float]

        @pa.check("X")
        def exhausted(cls, values: pd.Series) -> pd.Series:
            raise MemoryError

    with pytest.raises(MemoryError):
        guard.check_frame(Checked, pd.DataFrame({"X": [1.0, 2.0]}), stage="scale", side="input")
