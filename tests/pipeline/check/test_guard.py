"""``Guard`` (pipeline/check/guard.py): a researcher's own preprocessing functions guarded call by call, with their
findings, rows in and out, report and ledger.

The pipeline here is a user's, on the sample's lab rows (and on the real MIMIC-III demo where it is present), with
the mistakes this field's bug reports are full of: a filter on dates that MIMIC shifted into the 22nd century, which
empties the frame; ADMISSIONS joined on SUBJECT_ID instead of HADM_ID, which repeats every lab row of a patient with
more admissions; a z-score fitted on the normal rows with ``std + 1e-7``, which gives an item whose normal values
are all equal z-scores of millions; and a log of values that may be 0. Each finding is checked against what an
independent count of the same rows says."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest
from pandera.typing import Series

from pipeline import Guard
from pipeline.check.guard import COLLECT, FRAME
from pipeline.reporting.junit import junit_xml
from schemas import StageError
from schemas.catalogue import CHECKS
from schemas.errors import ValidationDisabled

ROOT = Path(__file__).resolve().parents[3]
BOUND = 1000.0  # no real lab value is this many standard deviations out


class Labs(pa.DataFrameModel):
    """Lab rows as the user's pipeline reads them."""

    HADM_ID: Series[float] = pa.Field(nullable=True)
    ITEMID: Series[int]
    VALUENUM: Series[float] = pa.Field(nullable=True)


class Scored(Labs):
    """Lab rows with the z-score of VALUENUM per item: finite, within the bound, explained by the item's values."""

    Z: Series[float] = pa.Field(nullable=True, finite=())

    class Config:
        z_within = {"column": "Z", "bound": BOUND, "by": "ITEMID"}
        z_explained = {"column": "Z", "values": "VALUENUM", "by": "ITEMID"}


class Logged(Labs):
    LOG_VALUE: Series[float] = pa.Field(nullable=True, finite=())


def user_pipeline(guard: Guard, *, fixed: bool = False) -> SimpleNamespace:
    """The user's functions, guarded by ``guard``: as first written, or ``fixed``."""

    @guard.stage(takes=Labs, gives=Labs, keeps=0.5)
    def in_study_period(labs: pd.DataFrame) -> pd.DataFrame:
        """MIMIC's dates are shifted into 2100-2200: a cut-off in real years removes every row."""
        cutoff = labs["CHARTTIME"].max() if fixed else pd.Timestamp("2020-01-01")
        return labs[labs["CHARTTIME"] <= cutoff]

    @guard.stage(takes=Labs, adds=0)
    def with_admissions(labs: pd.DataFrame, admissions: pd.DataFrame) -> pd.DataFrame:
        """Each lab row with its admission's time; on SUBJECT_ID, a patient's rows come once per admission."""
        key = "HADM_ID" if fixed else "SUBJECT_ID"
        return labs.merge(admissions[[key, "ADMITTIME"]], on=key, how="left")

    @guard.stage(takes=Labs, gives=Scored)
    def zscore(labs: pd.DataFrame) -> pd.DataFrame:
        """Scaled by the item's normal rows (FLAG empty) with ``std + 1e-7`` as the guard against a zero std; fixed,
        by all its rows, an item whose values are all equal scaled by 1."""
        fitted = labs if fixed else labs[labs["FLAG"].isna()]
        stats = fitted.groupby("ITEMID")["VALUENUM"].agg(["mean", "std"])
        mean, std = labs["ITEMID"].map(stats["mean"]), labs["ITEMID"].map(stats["std"])
        scale = std.where(std > 0, 1.0) if fixed else std + 1e-7
        return labs.assign(Z=(labs["VALUENUM"] - mean) / scale)

    @guard.stage(takes=Labs, gives=Logged)
    def log_value(labs: pd.DataFrame) -> pd.DataFrame:
        """A log of skewed values; a value of 0 makes it -inf."""
        with np.errstate(divide="ignore", invalid="ignore"):
            logged = np.log1p(labs["VALUENUM"].clip(lower=0)) if fixed else np.log(labs["VALUENUM"])
        return labs.assign(LOG_VALUE=logged)

    return SimpleNamespace(in_study_period=in_study_period, with_admissions=with_admissions, zscore=zscore,
                           log_value=log_value)


def read_labs(folder: Path) -> pd.DataFrame:
    """LABEVENTS as the user reads it: VALUENUM from VALUE where the file has none (the MIMIC-III demo)."""
    labs = pd.read_csv(folder / "LABEVENTS.csv", parse_dates=["CHARTTIME"])
    if "VALUENUM" not in labs:
        labs["VALUENUM"] = pd.to_numeric(labs["VALUE"], errors="coerce")
    return labs


@pytest.fixture(scope="module")
def labs() -> pd.DataFrame:
    return read_labs(ROOT / "data" / "sample")


@pytest.fixture(scope="module")
def admissions() -> pd.DataFrame:
    return pd.read_csv(ROOT / "data" / "sample" / "ADMISSIONS.csv", parse_dates=["ADMITTIME"])


def run_all(guard: Guard, labs: pd.DataFrame, admissions: pd.DataFrame, *, fixed: bool = False) -> dict:
    """Every function of the user's pipeline called once on the lab rows, in order; what each returned."""
    user = user_pipeline(guard, fixed=fixed)
    return {"in_study_period": user.in_study_period(labs), "with_admissions": user.with_admissions(labs, admissions),
            "zscore": user.zscore(labs), "log_value": user.log_value(labs)}


def bad_z(labs: pd.DataFrame) -> pd.Series:
    """|z| beyond the bound, counted here without the guard: the user's z-score, recomputed."""
    normal = labs[labs["FLAG"].isna()].groupby("ITEMID")["VALUENUM"].agg(["mean", "std"])
    z = (labs["VALUENUM"] - labs["ITEMID"].map(normal["mean"])) / (labs["ITEMID"].map(normal["std"]) + 1e-7)
    return z.abs() > BOUND


def only(guard: Guard, check: str) -> dict:
    (finding,) = [f for f in guard.report.as_json()["findings"] if f["check"] == check]
    return finding


# -- the happy path ---------------------------------------------------------------------------------------------
def test_the_fixed_pipeline_passes_and_each_call_hands_back_what_the_function_returned(labs, admissions):
    guard = Guard()
    out = run_all(guard, labs, admissions, fixed=True)
    plain = run_all(Guard(errors=COLLECT), labs, admissions, fixed=True)  # the same functions, nothing raised
    assert guard.report.findings == [] and guard.report.status == "ok" and guard.exit_code == 0
    for name, frame in out.items():
        pd.testing.assert_frame_equal(frame, plain[name])
    assert len(out["with_admissions"]) == len(labs)  # one admission per HADM_ID: no row repeated
    ledger = guard.ledger()
    assert ledger.to_dict("list") == {
        "stage": ["in_study_period", "with_admissions", "zscore", "log_value"],
        "step": ["call 1"] * 4, "rows_in": [len(labs)] * 4, "rows_out": [len(labs)] * 4,  # each function's first
        "removed": [0] * 4, "errors": [0] * 4, "warnings": [0] * 4}
    assert repr(guard) == "<Guard: 4 calls of 4 guarded functions, status ok (0 errors, 0 warnings, 0 notes)>"


def test_a_guarded_function_returns_the_very_frame_its_function_made_and_leaves_its_input_alone(labs):
    made = []
    coercing = pa.DataFrameSchema({"HADM_ID": pa.Column("str", coerce=True, nullable=True)})  # on a copy

    @Guard().stage(takes=coercing, gives=coercing)
    def head(frame: pd.DataFrame) -> pd.DataFrame:
        made.append(frame.head(5))
        return made[-1]

    before = labs.copy()
    assert head(labs) is made[0]
    assert made[0]["HADM_ID"].dtype == "float64"
    pd.testing.assert_frame_equal(labs, before)


# -- each mistake, as its finding says it -----------------------------------------------------------------------
def test_the_filter_that_empties_the_frame_raises_and_is_in_the_report(labs):
    guard = Guard()
    user = user_pipeline(guard)
    with pytest.raises(StageError) as raised:
        user.in_study_period(labs)
    error = raised.value
    assert (error.stage, error.side, error.check, error.table, error.count) == (
        "in_study_period", "output", "not_empty", "call 1 output", len(labs))
    assert str(error).startswith(f"[in_study_period:output] call 1 output not_empty: no row of the {len(labs):,} it "
                                 "was handed: in_study_period emptied the frame")
    assert "Loosen the step that removed every row" in CHECKS["not_empty"].advice  # what to do, said last
    assert str(error).endswith(CHECKS["not_empty"].advice)
    finding = only(guard, "not_empty")
    assert (finding["stage"], finding["table"], finding["severity"], finding["count"]) == (
        "in_study_period", "call 1 output", "error", len(labs))
    assert not (labs["CHARTTIME"] < pd.Timestamp("2020-01-01")).any()  # every date is in MIMIC's shifted years
    assert guard.ledger()[["rows_in", "rows_out", "errors"]].to_dict("records") == [
        {"rows_in": len(labs), "rows_out": 0, "errors": 1}]
    assert [f["check"] for f in guard.report.as_json()["findings"]] == ["not_empty"]  # not also kept_share


def test_the_join_on_the_wrong_key_repeats_rows_and_says_how_many(labs, admissions):
    guard = Guard()
    with pytest.raises(StageError, match=r"\[with_admissions:output\] call 1 output added_share"):
        user_pipeline(guard).with_admissions(labs, admissions)
    per_subject = admissions["SUBJECT_ID"].value_counts()
    joined = int(labs["SUBJECT_ID"].map(per_subject).fillna(1).sum())  # each lab row once per admission
    assert joined > len(labs)
    finding = only(guard, "added_share")
    assert finding["count"] == joined - len(labs)
    assert finding["message"].startswith(f"call 1 output: {joined:,} rows from {len(labs):,} "
                                         f"({joined / len(labs):.2f} times as many), more than adds=0 allows. A join")
    assert guard.ledger().loc[0, "removed"] == len(labs) - joined  # negative: rows added


def test_the_z_score_with_std_plus_1e_7_names_the_items_and_rows_it_blew_up(labs):
    guard = Guard()
    with pytest.raises(StageError) as raised:
        user_pipeline(guard).zscore(labs)
    bad = bad_z(labs)
    items = labs.loc[bad, "ITEMID"].value_counts()
    assert 51100 in items  # Sodium, Urine: its normal values are all equal, so its std is 0
    z_within = only(guard, "z_within")
    assert (z_within["stage"], z_within["table"], z_within["column"], z_within["count"]) == (
        "zscore", "call 1 output", "Z", int(bad.sum()))
    assert z_within["lines"] == [int(line) for line in labs.index[bad][:20]]
    assert z_within["items"] == [int(i) for i in items.index]
    assert f"z_within(column=Z, bound={BOUND:g}" in z_within["message"]
    explained = only(guard, "z_explained")  # the same std guard, found from the item's own values
    assert 51100 in explained["items"] and explained["column"] == "Z"
    error = raised.value  # the first error, by check id; the other named
    assert (error.stage, error.side, error.check, error.column, error.lines) == (
        "zscore", "output", "z_explained", "Z", explained["lines"])
    assert "; also: call 1 output.Z z_within; every finding of the call is in the guard's report." in str(error)


def test_the_log_of_zero_is_an_inf_on_the_rows_that_hold_a_zero(labs):
    guard = Guard()
    with pytest.raises(StageError) as raised:
        user_pipeline(guard).log_value(labs)
    zeros = labs.index[labs["VALUENUM"] == 0]
    assert len(zeros)
    finding = only(guard, "finite")
    assert (finding["column"], finding["count"], finding["lines"]) == ("LOG_VALUE", len(zeros),
                                                                       [int(i) for i in zeros[:20]])
    assert str(raised.value).startswith(f"[log_value:output] call 1 output.LOG_VALUE finite failed on {len(zeros)} "
                                        f"rows (lines {', '.join(map(str, zeros[:5]))}")
    assert f"-inf ×{len(zeros)}" in str(raised.value)  # described by class, not by value


def test_an_input_the_schema_refuses_is_not_handed_to_the_function_unless_the_guard_collects(labs):
    calls = []

    def scaled(guard: Guard):
        @guard.stage(takes=Labs)
        def zscore(frame: pd.DataFrame) -> pd.DataFrame:
            calls.append(len(frame))
            return frame

        return zscore

    broken = labs.drop(columns=["VALUENUM"]).assign(ITEMID=labs["ITEMID"].astype("str"))
    guard = Guard()
    with pytest.raises(StageError) as raised:
        scaled(guard)(broken)
    error = raised.value
    assert calls == [] and (error.stage, error.side, error.check, error.column, error.table) == (
        "zscore", "input", "table_schema", "ITEMID", "call 1 input")
    assert str(error).startswith("[zscore:input] call 1 input.ITEMID table_schema: the table fails dtype('int64'): "
                                 "found str (the column's dtype)")  # what it was, and what it should be
    found = {(f["table"], f["column"], f["check"]) for f in guard.report.as_json()["findings"]}
    assert found == {("call 1 input", "ITEMID", "table_schema"), ("call 1 input", "VALUENUM", "table_schema")}
    assert "also: call 1 input." in str(raised.value)
    assert guard.ledger().empty  # the function did not run: no rows out
    collecting = Guard(errors=COLLECT)
    assert scaled(collecting)(broken) is broken and calls == [len(labs)]
    assert collecting.report.findings == guard.report.findings


def test_an_input_with_failing_rows_names_the_function_the_column_the_rows_and_their_values(labs):
    class Finite(Labs):
        VALUENUM: Series[float] = pa.Field(nullable=True, finite=())

    calls = []
    guard = Guard()

    @guard.stage(takes=Finite)
    def zscore(frame: pd.DataFrame) -> pd.DataFrame:
        calls.append(len(frame))
        return frame

    planted = labs.assign(VALUENUM=labs["VALUENUM"].where(~labs.index.isin([4, 40, 400]), np.inf))
    with pytest.raises(StageError) as raised:
        zscore(planted)
    error = raised.value
    assert calls == []
    assert (error.stage, error.side, error.check, error.column, error.count, error.lines) == (
        "zscore", "input", "finite", "VALUENUM", 3, [4, 40, 400])
    assert error.failure_cases.to_dict("list") == {"line": [4, 40, 400], "value_class": ["inf"] * 3}
    assert str(error).startswith("[zscore:input] call 1 input.VALUENUM finite failed on 3 rows (lines 4, 40, 400): "
                                 "inf ×3.")
    assert str(error).endswith(CHECKS["finite"].advice)
    finding = only(guard, "finite")
    assert (finding["stage"], finding["table"], finding["column"], finding["count"]) == (
        "zscore", "call 1 input", "VALUENUM", 3)
    assert guard.ledger().empty


def test_a_step_that_keeps_less_than_its_share_raises_saying_how_many_it_kept(labs):
    guard = Guard()

    @guard.stage(keeps=0.9)
    def abnormal_only(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["FLAG"].notna()]

    kept = int(labs["FLAG"].notna().sum())
    assert kept < 0.9 * len(labs)
    with pytest.raises(StageError) as raised:
        abnormal_only(labs)
    error = raised.value
    assert (error.stage, error.side, error.check, error.column, error.count) == (
        "abnormal_only", "output", "kept_share", None, len(labs) - kept)
    assert str(error).startswith(f"[abnormal_only:output] call 1 output kept_share: kept {kept:,} of {len(labs):,} "
                                 f"rows ({kept / len(labs):.1%}), fewer than keeps=0.9")
    assert guard.ledger()[["rows_in", "rows_out", "removed", "errors"]].to_dict("records") == [
        {"rows_in": len(labs), "rows_out": kept, "removed": len(labs) - kept, "errors": 1}]
    guard.stage(keeps=0.3)(abnormal_only.__wrapped__)(labs)  # the share it does keep: no finding
    assert [f.check for f in guard.report.findings] == ["kept_share"]


# -- call after call: the report, the ledger, the HTML, CI --------------------------------------------------------
def test_collected_calls_add_up_to_one_report_with_every_finding_and_an_exit_code(labs, admissions, tmp_path):
    guard = Guard(errors=COLLECT)
    out = run_all(guard, labs, admissions)
    assert len(out["in_study_period"]) == 0  # handed back as the function made it
    report = guard.report
    assert report.status == "errors" and guard.exit_code == 1
    assert [(f.stage, f.table, f.check) for f in report.findings] == [
        ("in_study_period", "call 1 output", "not_empty"), ("with_admissions", "call 1 output", "added_share"),
        ("zscore", "call 1 output", "z_explained"), ("zscore", "call 1 output", "z_within"),
        ("log_value", "call 1 output", "finite")]
    ledger = guard.ledger()
    assert ledger["errors"].tolist() == [1, 1, 2, 1] and ledger["rows_out"].tolist()[0] == 0
    report.write_json(tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["status"] == "errors"
    assert [(step["stage"], step["step"]) for step in written["attrition"]["steps"]] == [
        ("in_study_period", "call 1"), ("with_admissions", "call 1"), ("zscore", "call 1"), ("log_value", "call 1")]
    assert {step["table"] for step in written["attrition"]["steps"]} == {FRAME}
    frame = report.findings_frame()
    assert frame["stage"].tolist() == ["in_study_period", "with_admissions", "zscore", "zscore", "log_value"]
    junit = ET.fromstring(junit_xml(report, name="my preprocessing"))
    failed = {case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None}
    assert failed == {"not_empty", "added_share", "z_explained", "z_within", "finite"}
    assert junit.get("failures") == "5"


def test_calls_of_the_same_function_are_told_apart_by_their_number(labs):
    guard = Guard(errors=COLLECT)
    log_value = user_pipeline(guard).log_value
    log_value(labs[labs["VALUENUM"] > 0])
    log_value(labs)
    assert [(f.table, f.check) for f in guard.report.findings] == [("call 2 output", "finite")]
    assert guard.ledger()[["stage", "step", "errors"]].values.tolist() == [
        ["log_value", "call 1", 0], ["log_value", "call 2", 1]]
    guard.clear()
    assert guard.calls == 0 and guard.report.findings == [] and guard.ledger().empty


def test_calls_in_a_per_item_loop_are_named_by_their_group_and_numbered_per_function(labs):
    """A per-item outlier filter run item by item: each call is named by the item it was handed (``key``: a column
    holding one value in the call, or a parameter), and counted among the calls of its own function."""
    guard = Guard(errors=COLLECT)

    @guard.stage
    def numbers_only(labs: pd.DataFrame) -> pd.DataFrame:
        return labs.dropna(subset=["VALUENUM"])

    @guard.stage(key="ITEMID")
    def within_three_sigma(rows: pd.DataFrame) -> pd.DataFrame:
        """z by the item's own rows: an item of one row, or of equal values, has no std and loses every row."""
        z = (rows["VALUENUM"] - rows["VALUENUM"].mean()) / rows["VALUENUM"].std()
        return rows[z.abs() < 3]

    numbers = numbers_only(labs)
    items = sorted(numbers["ITEMID"].unique())
    for item in items:
        within_three_sigma(numbers[numbers["ITEMID"] == item])
    spread = numbers.groupby("ITEMID")["VALUENUM"].std()
    emptied = [item for item in items if not spread[item] > 0]  # counted here: no std, or none at all
    assert emptied  # the sample has such items
    assert [(f.stage, f.table, f.check) for f in guard.report.findings] == [
        ("within_three_sigma", f"call {items.index(item) + 1} (ITEMID={item}) output", "not_empty")
        for item in emptied]
    steps = guard.ledger()[["stage", "step"]].values.tolist()
    assert steps == [["numbers_only", "call 1"], *(["within_three_sigma", f"call {i} (ITEMID={item})"]
                                                   for i, item in enumerate(items, 1))]
    assert guard.ledger()["errors"].sum() == len(emptied) and guard.calls == len(items) + 1

    @guard.stage(key="item")  # a parameter of the function: its argument names the call
    def rows_of(labs: pd.DataFrame, item: int) -> pd.DataFrame:
        return labs[labs["ITEMID"] == item]

    @guard.stage(key=lambda labs, fluid: fluid.lower())  # or a function of the call's arguments
    def of_fluid(labs: pd.DataFrame, fluid: str) -> pd.DataFrame:
        return labs

    rows_of(labs, item=-1)
    of_fluid(labs, "URINE")
    assert [f.table for f in guard.report.findings[-1:]] == ["call 1 (item=-1) output"]
    assert guard.ledger()["step"].tolist()[-2:] == ["call 1 (item=-1)", "call 1 (urine)"]
    with pytest.raises(ValueError, match="key names a parameter of rows_of or a column of its frame"):
        guard.stage(key="nothing")(rows_of.__wrapped__)(labs, 1)


def test_a_finding_handed_on_from_call_to_call_is_reported_once_where_it_first_appears(labs):
    """Collected, the z-scores a call blew up reach the next call's input and output: the same rows fail the same
    check there, and the report names them once, at the call that made them. Fewer of them, after a filter, are a
    finding of the call that filtered."""
    guard = Guard(errors=COLLECT)
    zscore = user_pipeline(guard).zscore

    @guard.stage(takes=Scored, gives=Scored)
    def by_time(scored: pd.DataFrame) -> pd.DataFrame:
        return scored.sort_values("CHARTTIME", kind="stable").sort_index()

    @guard.stage(takes=Scored, gives=Scored)
    def even_lines(scored: pd.DataFrame) -> pd.DataFrame:
        return scored[scored.index % 2 == 0]

    even_lines(by_time(zscore(labs)))
    bad = bad_z(labs)
    found = [(f.stage, f.table, f.check) for f in guard.report.findings]
    assert found[:2] == [("zscore", "call 1 output", "z_explained"), ("zscore", "call 1 output", "z_within")]
    assert {stage for stage, _, _ in found[2:]} == {"even_lines"} and ("even_lines", "call 1 output", "z_within") in \
        found[2:]  # by_time handed on the very rows: nothing of its own; even_lines' input was zscore's output
    assert [f.count for f in guard.report.findings if f.check == "z_within"] == [
        int(bad.sum()), int(bad[labs.index % 2 == 0].sum())]
    assert guard.ledger()["errors"].tolist() == [2, 0, len(found) - 2]
    zscore(labs)  # called again on the same rows: what it finds, the report holds already
    assert len(guard.report.findings) == len(found) and guard.ledger()["errors"].tolist()[-1] == 0


def test_the_same_calls_give_the_same_report_ledger_and_page(labs, admissions):
    made = []
    for _ in range(2):
        guard = Guard(errors=COLLECT)
        run_all(guard, labs, admissions)
        made.append((guard.report.as_json(), guard.ledger(), guard.html().text))
    assert made[0][0] == made[1][0] and made[0][2] == made[1][2]
    pd.testing.assert_frame_equal(made[0][1], made[1][1])


def test_the_guard_shows_itself_as_the_html_report_with_its_findings_and_each_call_s_rows(labs, admissions):
    guard = Guard(errors=COLLECT)
    run_all(guard, labs, admissions)
    page = guard.html().text
    assert "<title>badpoints guard: errors</title>" in page
    for stage in ("in_study_period", "with_admissions", "zscore", "log_value"):
        assert f'id="findings-{stage}"' in page
    assert '<section id="attrition"><h2>Attrition</h2>' in page and "every step's rows in and out (4 steps)" in page
    assert f"<td>frame</td><td>in_study_period</td><td>call 1</td><td class=\"num\" data-sort=\"{float(len(labs))}\">" \
           f"{len(labs):,}</td>" in page
    assert "Line numbers are each frame&#x27;s index" in page
    assert "LABEVENTS rows: read" not in page  # the guard has no LABEVENTS ledger
    inline = guard._repr_html_()
    assert inline.startswith("<iframe srcdoc=") and "badpoints guard" in inline


def test_no_raw_value_reaches_the_report_unless_asked(labs):
    canary = 98765.4321
    planted = labs.assign(VALUENUM=labs["VALUENUM"].where(labs.index != 7, canary))
    schema = pa.DataFrameSchema({"VALUENUM": pa.Column(float, pa.Check.le(1e4), nullable=True)})
    for show_values in (False, True):
        guard = Guard(errors=COLLECT, show_values=show_values)
        guard.stage(gives=schema)(lambda frame: frame)(planted)
        text = json.dumps(guard.report.as_json()) + guard.html().text
        assert ("98765.4321" in text) == show_values


# -- options ------------------------------------------------------------------------------------------------------
def test_a_severity_turned_down_is_reported_as_such_and_does_not_raise(labs):
    guard = Guard(severity={"kept_share": "warning"})

    @guard.stage(keeps=0.9)
    def abnormal_only(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["FLAG"].notna()]

    kept = abnormal_only(labs)
    assert len(kept) == labs["FLAG"].notna().sum()
    finding = only(guard, "kept_share")
    assert (finding["severity"], finding["default_severity"], finding["count"]) == (
        "warning", "error", len(labs) - len(kept))
    assert f"kept {len(kept):,} of {len(labs):,} rows ({len(kept) / len(labs):.1%}), fewer than keeps=0.9" in \
        finding["message"]
    assert guard.exit_code == 0 and guard.report.status == "warnings"
    assert guard.ledger()["warnings"].tolist() == [1]


def test_used_bare_the_decorator_counts_rows_and_refuses_an_emptied_frame_unless_it_may_empty():
    guard = Guard(errors=COLLECT)

    @guard.stage
    def nothing(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.iloc[:0]

    @guard.stage(empties=True)
    def nothing_allowed(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.iloc[:0]

    frame = pd.DataFrame({"A": [1, 2, 3]})
    nothing(frame)
    nothing_allowed(frame)
    nothing(frame.iloc[:0])  # nothing in, nothing out: not the function's doing
    assert [(f.stage, f.check) for f in guard.report.findings] == [("nothing", "not_empty")]
    assert guard.ledger()["rows_out"].tolist() == [0, 0, 0]


def test_the_frame_may_be_given_by_keyword_and_a_function_must_take_and_give_a_frame():
    guard = Guard()

    @guard.stage(keeps=1.0)
    def first_rows(frame: pd.DataFrame, n: int = 2) -> pd.DataFrame:
        return frame.head(n)

    frame = pd.DataFrame({"A": [1, 2]})
    assert first_rows(frame=frame).equals(frame)
    with pytest.raises(TypeError, match="first_rows's first argument is a list"):
        first_rows([1, 2])

    @guard.stage
    def as_list(frame: pd.DataFrame) -> list:
        return frame["A"].tolist()

    with pytest.raises(TypeError, match="what as_list returned is a list"):
        as_list(frame)
    assert guard.calls == 2


def test_rows_of_a_frame_without_unique_integer_labels_are_named_by_position():
    guard = Guard(errors=COLLECT)
    schema = pa.DataFrameSchema({"Z": pa.Column(float, pa.Check.finite())})
    frame = pd.DataFrame({"Z": [0.0, np.inf, 1.0, -np.inf]}, index=["a", "b", "c", "d"])
    guard.stage(takes=schema)(lambda frame: frame)(frame)
    assert guard.report.findings[0].lines == [1, 3]


def test_the_options_are_checked_where_they_are_given():
    with pytest.raises(ValueError, match="errors is 'raise' or 'collect'"):
        Guard(errors="ignore")
    guard = Guard()
    guard.errors = COLLECT
    with pytest.raises(ValueError, match="errors is 'raise' or 'collect'"):
        guard.errors = "warn"
    assert guard.errors == COLLECT
    with pytest.raises(ValueError, match="severity maps a check id"):
        Guard(severity={"no_such_check": "warning"})
    with pytest.raises(ValueError, match="keeps is a share"):
        Guard().stage(keeps=50)
    with pytest.raises(TypeError, match="takes is a pandera DataFrameSchema or DataFrameModel"):
        Guard().stage(takes=dict)


def test_a_guard_refuses_to_run_with_pandera_switched_off(monkeypatch):
    from pandera.config import config_context

    @Guard().stage(gives=pa.DataFrameSchema({"A": pa.Column(int)}))
    def same(frame: pd.DataFrame) -> pd.DataFrame:
        return frame

    with config_context(validation_enabled=False), pytest.raises(ValidationDisabled):
        same(pd.DataFrame({"A": [1]}))


# -- the real MIMIC-III demo --------------------------------------------------------------------------------------
def test_the_mistakes_on_the_real_mimic_iii_demo(mimic3demo):
    labs = read_labs(mimic3demo)
    guard = Guard(errors=COLLECT)
    user = user_pipeline(guard)
    user.in_study_period(labs)
    user.zscore(labs)
    user.log_value(labs)
    labitems = pd.read_csv(mimic3demo / "D_LABITEMS.csv").rename(columns=str.upper)
    guard.stage(takes=Labs, adds=0)(lambda frame: frame.merge(labitems, on="ITEMID", how="left"))(labs)
    found = {f.check: f for f in guard.report.findings}
    assert set(found) == {"not_empty", "z_within", "z_explained", "finite"}
    bad = bad_z(labs)
    assert found["z_within"].count == int(bad.sum()) and 51003 in found["z_within"].items  # Troponin T
    assert found["finite"].count == int((labs["VALUENUM"] == 0).sum())
    assert guard.ledger()["rows_out"].tolist() == [0, len(labs), len(labs), len(labs)]
