"""pipeline/flow.py: ``prepare`` runs every stage in order, stops at a StageError, and accounts for every row.

The ledger must close (read = kept + quarantined + deduplicated), every stage's
findings must reach the report, and no input, however broken, may reach the
edges with a non-finite z-score or make ``prepare`` raise.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pipeline.stages import bucket as bucket_stage
from pipeline.stages import encode, scale
from pipeline.config import load_config
from pipeline.flow import ORDER, prepare
from pipeline.ledgers import dropped
from pipeline.reading.load import load_text_tables
from pipeline.reading.parse import RawTables, check_raw

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
SEED_BUG_ITEMS = (50963, 51100)  # one normal observation; every normal value 20: they vary, so fallback items


# -- inputs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def config():
    return load_config()


@pytest.fixture(scope="module")
def text() -> dict[str, pd.DataFrame]:
    tables, problems = load_text_tables(SAMPLE)
    assert not problems
    return {name: table.frame for name, table in tables.items()}


@pytest.fixture(scope="module")
def tables(text, config) -> RawTables:
    return check_raw(text, valuenum_abs_bound=config.raw.valuenum_abs_bound,
                     stay_tolerance_hours=config.raw.stay_tolerance_hours).tables


@pytest.fixture(scope="module")
def prepared(tables, config):
    return prepare(tables, config)


def checks_of(prepared) -> dict[str, list]:
    found: dict[str, list] = {}
    for finding in prepared.findings:
        found.setdefault(finding.check, []).append(finding)
    return found


def closes(prepared) -> bool:
    ledger = prepared.ledger()
    return ledger["read"] == ledger["kept"] + ledger["quarantined"] + ledger["deduplicated"]


def with_events(tables: RawTables, events: pd.DataFrame) -> RawTables:
    return dataclasses.replace(tables, labevents=events)


# -- the sample ---------------------------------------------------------------------------------------
def test_sample_ledger_closes_and_every_kept_row_is_an_edge(prepared, tables):
    ledger = prepared.ledger()
    assert prepared.stopped_at is None
    assert ledger["read"] == len(tables.labevents) == prepared.read
    assert ledger["kept"] == len(prepared.edges) > 0
    assert ledger["quarantined"] > 0 and ledger["deduplicated"] > 0
    assert closes(prepared)
    quarantine = prepared.quarantine.whole()
    quarantined = quarantine.index[quarantine["TABLE"] == "LABEVENTS"]
    lines = pd.Index(prepared.edges.index).append(quarantined)
    assert lines.is_unique and lines.isin(tables.labevents.index).all()  # no row counted twice


def test_sample_edges_are_finite_and_complete(prepared):
    edges = prepared.edges
    assert edges["Z"].dtype == np.float64 and np.isfinite(edges["Z"]).all()
    assert edges["CODE"].notna().all() and (edges["CODE"] >= 0).all()
    assert not edges.duplicated(["HADM_ID", "TIMESTEP", "ITEMID"]).any()
    assert set(edges["SPLIT"]) == {"train", "val", "test"}
    assert set(SEED_BUG_ITEMS) <= set(edges["ITEMID"])  # the seed's bug items made it through, finite


def test_sample_fitted_state_is_kept(prepared):
    assert prepared.fitted.get("scale") is not None and set(SEED_BUG_ITEMS) <= set(prepared.fitted.get("scale").fallback_items_)
    assert prepared.fitted.get("encode") is not None and prepared.fitted.get("fill") is not None
    assert prepared.splits is not None and len(prepared.splits) == len(prepared.admissions)
    assert prepared.labitems is not None


def test_sample_findings_of_every_stage_are_present(prepared):
    found = checks_of(prepared)
    expected = {"attrition", "unseen_category", "fallback_item", "unseen_item", "z_bounded", "structural_fill",
                "censored_value", "mapped_text_value", "mixed_item_text", "quarantine_outpatient", "before_admission",
                "after_discharge", "merged"}
    assert expected <= set(found)
    assert {f.stage for f in prepared.findings} >= {"clean", "encode", "scale", "fill", "bucket", "flow"}
    assert not [f for f in prepared.findings if f.severity == "error"]
    (attrition,) = found["attrition"]
    ledger = prepared.ledger()
    assert attrition.severity == "info" and attrition.count == ledger["read"]
    assert attrition.message.startswith(
        f"LABEVENTS: read {ledger['read']} = kept {ledger['kept']} + quarantined {ledger['quarantined']} + "
        f"deduplicated {ledger['deduplicated']}")
    assert "51100" in found["fallback_item"][0].message and "50963" in found["fallback_item"][0].message
    (merged,) = found["merged"]
    assert merged.stage == "dedup" and merged.count == ledger["deduplicated"]


def test_sample_quarantine_findings_count_the_quarantined_rows(prepared):
    found = checks_of(prepared)
    reasons = prepared.quarantine.whole().groupby("REASON").size()
    assert found["before_admission"][0].count == reasons["charted before the admission day"]
    assert found["after_discharge"][0].count == reasons[bucket_stage.AFTER_DISCHARGE]
    assert "in 9 admissions" in found["after_discharge"][0].message
    assert found["quarantine_outpatient"][0].count == reasons["outpatient lab (no HADM_ID)"]
    assert "items 51003 Troponin T (Blood) (5 rows) (lines " in found["mixed_item_text"][0].message  # LABEL, FLUID


def as_text(config):
    """``config`` with the text stage reading nothing: every text row of a numeric item stays mixed text."""
    return dataclasses.replace(config, clean=dataclasses.replace(config.clean, censored=False,
                                                                 text_values=MappingProxyType({})))


def test_findings_list_their_items_most_rows_first_and_keep_every_one(tables, config):
    config = as_text(config)
    capped = dataclasses.replace(config, report=dataclasses.replace(config.report, max_lines=1))
    (mixed,) = checks_of(prepare(tables, capped))["mixed_item_text"]
    assert "items 51514 Urobilinogen (Urine) (28 rows), 51003 Troponin T (Blood) (24 rows)" in mixed.message
    assert mixed.items == [51514, 51003, 51275] and len(mixed.lines) == 1  # max_lines caps the lines alone
    unnamed = prepare(dataclasses.replace(tables, labitems=tables.labitems.drop(columns="LABEL")), config)
    assert "items 51514 (Urine) (28 rows), 51003 (Blood) (24 rows)" in checks_of(unnamed)["mixed_item_text"][0].message


def test_scale_findings_name_their_items_by_label_and_fluid(tables, config):
    (fallback,) = checks_of(prepare(tables, config))["fallback_item"]
    assert "ITEMID 50963 NTproBNP (Blood) (9 fitted rows)" in fallback.message
    assert "ITEMID 51100 Sodium, Urine (Urine) (24 fitted rows)" in fallback.message  # one more: a text result read as a number
    raw = dataclasses.replace(config, scale=dataclasses.replace(config.scale, policy=MappingProxyType(
        {"default": "none"})))  # the raw z: its heavy tails pass the warning bound
    (beyond,) = checks_of(prepare(tables, raw))["z_warn_bound"]
    assert "|z| > 100: ITEMID 5" in beyond.message and len(beyond.items) >= 1


def test_the_mimic3_demo_names_its_mixed_items(mimic3demo, config):
    text, problems = load_text_tables(mimic3demo)
    assert not problems
    result = prepare(check_raw({name: table.frame for name, table in text.items()}).tables, as_text(config))
    (mixed,) = checks_of(result)["mixed_item_text"]
    assert "items 51478 Glucose (Urine) (205 rows), 51484 Ketone (Urine) (" in mixed.message  # the most rows first
    assert f"+{len(mixed.items) - 5} more in the JSON report (lines " in mixed.message and len(mixed.items) == 55


def test_clip_policy_keeps_late_rows_and_the_ledger_still_closes(tables, config, prepared):
    clip = dataclasses.replace(config, bucket=dataclasses.replace(config.bucket, late_policy="clip"))
    clipped = prepare(tables, clip)
    assert clipped.stopped_at is None and closes(clipped)
    assert "after_discharge" not in checks_of(clipped)
    assert sum(step.clipped for step in clipped.steps) == checks_of(prepared)["after_discharge"][0].count
    assert clipped.edges["TIMESTEP"].max() <= config.bucket.max_timestep


def test_saved_stats_and_vocabularies_are_reused_not_refitted(tables, config, prepared):
    again = prepare(tables, config, fitted={"scale": scale.ZScoreStats.from_json(prepared.fitted["scale"].as_json()),
                                            "encode": encode.Vocabularies.from_json(prepared.fitted["encode"].as_json())})
    assert again.fitted.get("scale") == prepared.fitted.get("scale") and again.fitted.get("encode") == prepared.fitted.get("encode")
    pd.testing.assert_frame_equal(again.edges, prepared.edges)
    # Stats fitted elsewhere are used as they are: an item they do not know gets z = 0.
    without_ast = dataclasses.replace(prepared.fitted.get("scale"), **{
        name: tuple(v for i, v in zip(prepared.fitted.get("scale").items_, getattr(prepared.fitted.get("scale"), name)) if i != 50878)
        for name in ("items_", "mean_", "scale_", "count_", "rule_", "normal_count_", "transform_", "policy_")})
    reused = prepare(tables, config, fitted=(without_ast,))  # states in any order: by their kind
    assert (reused.edges.loc[reused.edges["ITEMID"] == 50878, "Z"] == 0.0).all()
    assert "50878" in next(f for f in reused.findings if f.check == "unseen_item").message


# -- a stage that fails stops the flow ----------------------------------------------------------------
def test_a_stage_error_stops_the_flow_and_is_reported(tables, config):
    strict = dataclasses.replace(config, scale=dataclasses.replace(
        config.scale, warn_bound=10.0, error_bound=50.0, policy=MappingProxyType({"default": "none"})))  # raw z
    stopped = prepare(tables, strict)
    assert stopped.stopped_at == "scale"
    assert stopped.edges is None and stopped.fitted.get("fill") is None
    assert stopped.fitted.get("scale") is not None  # fitted before apply failed: what was found until then is kept
    found = checks_of(stopped)
    (error,) = found["z_error_bound"]
    assert (error.severity, error.stage, error.column) == ("error", "scale", "Z")
    assert error.lines and "ITEMID" in error.message and "50878" in error.message
    assert not {"filled", "before_admission", "after_discharge"} & set(found)  # later stages never ran
    assert "stopped at stage scale" in found["attrition"][0].message


def test_a_build_reports_its_graph_findings_in_a_list_of_its_own(sample_dir, tmp_path, config):
    """The build's report holds the validation's findings and the graphs'; the validation's report keeps its
    own list, so a graph finding never reaches ``validation.exit_code``, and each exit code follows its status."""
    from pipeline.builds import build

    strict = dataclasses.replace(config, graph=dataclasses.replace(config.graph, memory_budget_mb=1e-6),
                                 severity={"graph_memory": "error"})
    built = build(sample_dir, tmp_path / "out", strict)
    assert [f.check for f in built.report.findings if f.stage == "graph"] == ["graph_memory"]
    assert [f.check for f in built.validation.report.findings if f.stage == "graph"] == []
    assert (built.validation.report.status, built.validation.exit_code) == ("warnings", 0)
    assert (built.report.status, built.exit_code, built.out_dir) == ("errors", 1, None)


def test_every_row_outpatient_is_an_empty_step(tables, config):
    events = tables.labevents.assign(HADM_ID=pd.Series(pd.NA, index=tables.labevents.index, dtype="Int64"))
    stopped = prepare(with_events(tables, events), config)
    assert stopped.stopped_at == "clean" and stopped.edges is None
    (empty,) = checks_of(stopped)["step_empty"]
    assert (empty.severity, empty.stage, empty.count) == ("error", "clean", len(events))
    assert "outpatient lab (no HADM_ID)" in empty.message and "removed all" in empty.message
    assert empty.column == "HADM_ID" and "LABEVENTS.HADM_ID step_empty" in empty.message


def test_every_row_charted_before_its_admission_day_is_an_empty_step_on_charttime(tables, config):
    """The step that empties LABEVENTS names the column its filter read: here the bucket stage's CHARTTIME."""
    events = tables.labevents.assign(CHARTTIME=pd.Timestamp("1900-01-01"))
    stopped = prepare(with_events(tables, events), config)
    assert stopped.stopped_at == "bucket" and stopped.edges is None
    (empty,) = checks_of(stopped)["step_empty"]
    assert (empty.stage, empty.table, empty.column) == ("bucket", "LABEVENTS", "CHARTTIME")
    assert "LABEVENTS.CHARTTIME step_empty" in empty.message and "charted before the admission day" in empty.message


def test_a_step_removing_most_rows_is_a_warning(tables, config):
    events = tables.labevents.copy()
    outpatient = events.index[: int(len(events) * 0.6)]
    events.loc[outpatient, "HADM_ID"] = pd.NA
    result = prepare(with_events(tables, events), config)
    assert result.stopped_at is None and closes(result)
    most = [f for f in checks_of(result)["step_removed_most"] if "outpatient" in f.message]
    assert len(most) == 1 and most[0].severity == "warning" and most[0].stage == "clean"
    assert most[0].column == "HADM_ID" and most[0].message.startswith("LABEVENTS.HADM_ID: ")
    assert most[0].count == int(events["HADM_ID"].isna().sum())
    assert "step_removed_nearly_all" not in checks_of(result)


def test_missing_tables_give_nothing_to_prepare(tables, config):
    empty = prepare(dataclasses.replace(tables, admissions=None), config)
    assert empty.edges is None and empty.findings == () and empty.read == 0


def test_admissions_with_only_the_required_columns_are_prepared(tables, config):
    minimal = tables.admissions[["HADM_ID", "ADMITTIME", "DISCHTIME", "SUBJECT_ID", "REJECT"]]
    result = prepare(dataclasses.replace(tables, admissions=minimal), config)
    assert result.stopped_at is None, [f.message for f in result.findings if f.severity == "error"]
    assert closes(result) and len(result.edges) > 0


# -- determinism --------------------------------------------------------------------------------------
def test_shuffled_raw_rows_give_identical_outputs(text, config, prepared):
    shuffled = {}
    for number, (name, frame) in enumerate(text.items()):
        frame = frame.sample(frac=1.0, random_state=number + 1)
        frame.index = pd.RangeIndex(2, len(frame) + 2, name="line")  # the file's rows in another order
        shuffled[name] = frame
    again = prepare(check_raw(shuffled).tables, config)
    pd.testing.assert_frame_equal(again.edges.reset_index(drop=True), prepared.edges.reset_index(drop=True))
    assert again.fitted.get("scale") == prepared.fitted.get("scale")
    assert again.fitted.get("encode") == prepared.fitted.get("encode")
    pd.testing.assert_frame_equal(again.splits, prepared.splits)
    assert again.ledger() == prepared.ledger()
    assert sorted((f.check, f.count) for f in again.findings) == sorted((f.check, f.count) for f in prepared.findings)


# -- property: any small dataset --------------------------------------------------------------------
SHAPES = ("spread", "constant", "extreme", "categorical", "mixed")
BAD_VALUENUM = ("inf", "-inf", "nan", "1e400", "12abc")


@st.composite
def datasets(draw) -> dict[str, pd.DataFrame]:
    """ADMISSIONS, D_LABITEMS and LABEVENTS as text, a few admissions and items, some rows broken."""
    subjects = draw(st.integers(3, 5))
    stays = []  # (SUBJECT_ID, HADM_ID, ADMITTIME)
    for subject in range(subjects):
        for k in range(draw(st.integers(1, 2))):
            admit = pd.Timestamp("2150-01-01") + pd.Timedelta(days=40 * subject + 10 * k,
                                                                minutes=draw(st.integers(0, 1439)))
            stays.append((1000 + subject, 100000 + 10 * subject + k, admit,
                          admit + pd.Timedelta(hours=draw(st.integers(0, 150)))))
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4))
    items = [50800 + i for i in range(len(shapes))]
    rows = []
    for _ in range(draw(st.integers(2, 40))):
        stay = draw(st.sampled_from(stays))
        i = draw(st.integers(0, len(items) - 1))
        shape = shapes[i]
        noise = draw(st.floats(-3.0, 3.0))
        flag = draw(st.sampled_from([None, None, None, "abnormal", "delta"]))
        if shape == "categorical" or (shape == "mixed" and noise > 1.5):
            value, valuenum = draw(st.sampled_from(["NEG", "TR", "1+", "<0.01"])), None
        else:
            number = {"spread": 10.0 + 2.0 * noise, "extreme": 1e6 + 1e-3 * noise, "mixed": noise,
                      "constant": 20.0 if flag is None else 20.0 + 50.0 * noise}[shape]  # the seed's bug
            value = valuenum = repr(number)
        if draw(st.integers(0, 9)) == 0:
            value = valuenum = draw(st.sampled_from(BAD_VALUENUM))
        outpatient = draw(st.integers(0, 9)) == 0
        minutes = draw(st.one_of(st.integers(-3000, 9000), st.sampled_from([0, 60, 1440])))  # ties: re-run panels
        charttime = stay[2] + pd.Timedelta(minutes=minutes)
        rows.append({
            "HADM_ID": None if outpatient else str(stay[1]), "ITEMID": str(items[i]),
            "CHARTTIME": charttime.strftime("%Y-%m-%d %H:%M:%S"), "VALUE": value, "FLAG": flag,
            "SUBJECT_ID": str(stay[0]), "VALUENUM": valuenum,
        })

    def frame(records: list[dict]) -> pd.DataFrame:
        out = pd.DataFrame(records).astype("str")
        out = out.where(pd.DataFrame(records).notna())
        out.index = pd.RangeIndex(2, len(out) + 2, name="line")
        return out.astype("str")

    ethnicity = st.sampled_from(["WHITE", "BLACK/AFRICAN AMERICAN", "UNKNOWN/NOT SPECIFIED", None])
    admissions = frame([{"HADM_ID": str(h), "ADMITTIME": a.strftime("%Y-%m-%d %H:%M:%S"),
                         "DISCHTIME": d.strftime("%Y-%m-%d %H:%M:%S"), "SUBJECT_ID": str(s),
                         "ETHNICITY": draw(ethnicity)} for s, h, a, d in stays])
    labitems = frame([{"ITEMID": str(item), "FLUID": "Blood", "CATEGORY": "Chemistry"} for item in items])
    return {"ADMISSIONS": admissions, "D_LABITEMS": labitems, "LABEVENTS": frame(rows)}


@settings(max_examples=20)
@given(data=datasets())
def test_any_small_dataset_stops_with_an_error_or_gives_finite_edges(data):
    config = load_config()
    raw = check_raw(data, valuenum_abs_bound=config.raw.valuenum_abs_bound)
    result = prepare(raw.tables, config)  # must never raise
    if result.stopped_at is not None:
        event(f"stopped at {result.stopped_at}")
        assert result.edges is None
        assert any(f.severity == "error" and f.stage == result.stopped_at for f in result.findings)
        return
    event("edges")
    edges = result.edges
    assert np.isfinite(edges["Z"].to_numpy("float64")).all()
    assert edges["CODE"].notna().all()
    assert closes(result) and result.ledger()["kept"] == len(edges)
    assert result.read == len(data["LABEVENTS"])
    bad = raw.tables.labevents.index[raw.tables.labevents["REJECT"].notna()]
    assert not edges.index.isin(bad).any()  # a rejected row never reaches a graph


def test_a_value_coded_zero_is_rare_when_train_saw_it_and_unseen_when_it_did_not(tmp_path, config):
    """A categorical VALUE in one train admission is too rare to code (a note); one only outside train is unseen
    (a warning); each finding names its own line."""
    from pipeline.flow import validate
    from tests.corpus import Dataset

    data = Dataset.sample()
    splits = validate(data.write(tmp_path / "before"), config).prepared.splits.set_index("HADM_ID")["SPLIT"]
    item, hadm, value = (data.col("LABEVENTS", c) for c in ("ITEMID", "HADM_ID", "VALUE"))
    rows = [n for n, row in enumerate(data.rows["LABEVENTS"]) if row[item] == "51466" and row[hadm]]
    train = next(n for n in rows if splits[int(data.rows["LABEVENTS"][n][hadm])] == "train")
    other = next(n for n in rows if splits[int(data.rows["LABEVENTS"][n][hadm])] != "train")
    rare_line = data.set("LABEVENTS", train, "VALUE", "ZZ-ONCE-IN-TRAIN")
    unseen_line = data.set("LABEVENTS", other, "VALUE", "ZZ-NEVER-IN-TRAIN")

    findings = validate(data.write(tmp_path / "after"), config).report.findings
    by_check = {f.check: f for f in findings if f.table == "LABEVENTS" and f.column == "VALUE"}

    rare, unseen = by_check["rare_category"], by_check["unseen_category"]
    assert (rare.severity, unseen.severity) == ("info", "info")
    assert rare_line in rare.lines and rare_line not in unseen.lines
    assert unseen_line in unseen.lines and unseen_line not in rare.lines


# -- every admission accounted for ---------------------------------------------------------------------
def _dropping_dataset(*, rejected: bool):
    """The sample with one admission without labs, one whose labs all come before its admission day, one whose
    labs all fall on its first day, and (``rejected``) one whose DISCHTIME precedes its ADMITTIME."""
    from tests.corpus import Dataset

    d = Dataset.sample()
    hadm_col, time_col = d.col("LABEVENTS", "HADM_ID"), d.col("LABEVENTS", "CHARTTIME")
    admissions = d.rows["ADMISSIONS"]
    admit_col, hadm_adm = d.col("ADMISSIONS", "ADMITTIME"), d.col("ADMISSIONS", "HADM_ID")
    picked = {"admission_no_labs": 5, "admission_labs_quarantined": 6, "admission_below_min_timesteps": 7}
    ids = {fate: int(admissions[row][hadm_adm]) for fate, row in picked.items()}
    admit = {fate: admissions[row][admit_col] for fate, row in picked.items()}
    d.rows["LABEVENTS"] = [r for r in d.rows["LABEVENTS"] if r[hadm_col] != str(ids["admission_no_labs"])]
    for record in d.rows["LABEVENTS"]:
        if record[hadm_col] == str(ids["admission_labs_quarantined"]):
            record[time_col] = f"{int(admit['admission_labs_quarantined'][:4]) - 1}{admit['admission_labs_quarantined'][4:]}"
        elif record[hadm_col] == str(ids["admission_below_min_timesteps"]):
            record[time_col] = admit["admission_below_min_timesteps"]
    lines = {fate: row + 2 for fate, row in picked.items()}
    if rejected:
        row = 8
        ids["admission_rejected"], lines["admission_rejected"] = int(admissions[row][hadm_adm]), row + 2
        d.set("ADMISSIONS", row, "DISCHTIME", f"{int(admissions[row][admit_col][:4]) - 1}{admissions[row][admit_col][4:]}")
    return d, ids, lines


@pytest.fixture(scope="module")
def dropping(tmp_path_factory, config):
    from pipeline.flow import validate

    d, ids, lines = _dropping_dataset(rejected=True)
    folder = d.write(tmp_path_factory.mktemp("dropping") / "data")
    short = dataclasses.replace(config, graph=dataclasses.replace(config.graph, min_timesteps=2))
    return validate(folder, short), validate(folder, config), ids, lines


def test_every_admission_is_in_a_graph_or_dropped_under_its_reason(dropping):
    validation, _, ids, lines = dropping
    prepared = validation.prepared
    fates = prepared.fates.set_index("HADM_ID")
    for fate, hadm in ids.items():
        assert fates.loc[hadm, "FATE"] == fate
    assert fates.loc[ids["admission_labs_quarantined"], "STAGE"] == "bucket"
    assert fates.loc[ids["admission_rejected"], "SPLIT"] == "unsplit"
    ledger = validation.report.attrition["ADMISSIONS"]
    assert ledger["read"] == len(validation.tables.admissions) == ledger["in_graphs"] + ledger["dropped"]
    assert ledger["dropped"] == sum(ledger["dropped_by"].values())
    assert ledger["labs_quarantined_at"] == {"bucket": 1}
    graphs = prepared.edges.groupby("SPLIT")["HADM_ID"].nunique()
    for name in ("train", "val", "test"):
        split = ledger["splits"][name]
        assert split["read"] == split["in_graphs"] + split["dropped"] == int((prepared.fates["SPLIT"] == name).sum())
        assert split["in_graphs"] == graphs[name]  # the report's per-split count is the graphs'
        assert split["dropped"] == sum(split["dropped_by"].values())
    assert ledger["splits"]["unsplit"] == {"read": 1, "in_graphs": 0, "dropped": 1, "dropped_by": {
        **{check: 0 for check in dropped(ORDER)}, "admission_rejected": 1}}  # every reason, the stages' included
    assert list(ledger["dropped_by"]) == list(dropped(ORDER))  # the run's reasons, then the stages' in flow order
    assert list(ledger["dropped_by"])[:3] == ["admission_rejected", "admission_no_labs", "admission_labs_quarantined"]
    assert "admission_below_min_timesteps" in ledger["dropped_by"]
    assert sum(s["read"] for s in ledger["splits"].values()) == ledger["read"]
    assert closes(prepared)  # the rows of short admissions went to quarantine: the LABEVENTS ledger still closes


def test_each_reason_is_a_finding_with_its_count_splits_lines_and_hadm_ids(dropping):
    validation, _, ids, lines = dropping
    found = {f.check: f for f in validation.report.findings if f.table == "ADMISSIONS" and f.stage == "flow"}
    fates = validation.prepared.fates.set_index("HADM_ID")
    for check, severity in (("admission_no_labs", "info"), ("admission_labs_quarantined", "warning"),
                            ("admission_rejected", "warning")):
        finding = found[check]
        split = fates.loc[ids[check], "SPLIT"]
        assert (finding.severity, finding.count, finding.lines) == (severity, 1, [lines[check]])
        assert f"HADM_ID {ids[check]}" in finding.message and f"{split} 1" in finding.message
    assert "the stage that set aside their last lab rows: bucket (1 admission)" in \
        found["admission_labs_quarantined"].message
    short = found["admission_below_min_timesteps"]
    edges = dropping[1].prepared.edges  # the same data with min_timesteps = 1
    one_step = edges.groupby("HADM_ID")["TIMESTEP"].nunique().pipe(lambda n: n[n < 2]).index
    assert short.severity == "info" and short.count == len(one_step) and ids["admission_below_min_timesteps"] in one_step
    assert str(ids["admission_below_min_timesteps"]) in short.message
    rows = next(f for f in validation.report.findings if f.check == "below_min_timesteps")
    assert rows.count == int(edges["HADM_ID"].isin(one_step).sum())
    assert f"in {len(one_step)} admission" in rows.message
    attrition = next(f for f in validation.report.findings if f.check == "attrition")
    ledger = validation.report.attrition["ADMISSIONS"]
    assert (f"ADMISSIONS read {ledger['read']} = in graphs {ledger['in_graphs']} + dropped {ledger['dropped']}"
            in attrition.message)


def test_every_admission_in_no_graph_is_named_in_the_ledger_and_the_page(dropping):
    """The ledger lists each dropped admission by source line (HADM_ID, split, reason, the stage that took its last
    lab rows), as many as it counts; report.html lists them too."""
    from pipeline.reporting.html import render

    validation, _, ids, lines = dropping
    ledger = validation.report.attrition["ADMISSIONS"]
    named = ledger["dropped_admissions"]
    assert len(named) == ledger["dropped"] and [d["line"] for d in named] == sorted(d["line"] for d in named)
    by_reason = {d["reason"]: d for d in named}
    fates = validation.prepared.fates
    for reason, hadm in ids.items():
        listed = by_reason[reason]
        assert (listed["HADM_ID"], listed["line"]) == (hadm, lines[reason])
        assert listed["split"] == fates.loc[lines[reason], "SPLIT"]
    assert by_reason["admission_labs_quarantined"]["stage"] == "bucket"
    assert by_reason["admission_no_labs"]["stage"] is None
    page = render(validation, load_config())
    listing = page[page.index('<details id="dropped-admissions"'):]
    listing = listing[:listing.index("</details>")]
    assert all(f"<td class=\"num\" data-sort=\"{hadm}.0\">{hadm}</td>" in listing for hadm in ids.values())


def test_admissions_beyond_a_findings_list_are_all_named_in_the_ledger(sample_dir, config):
    """More admissions in no graph than a finding lists (those below min_timesteps 3, with 3 lines a finding): the
    finding names the first ones and says where the rest are; the ledger names them all."""
    from pipeline.flow import validate

    few = dataclasses.replace(config, graph=dataclasses.replace(config.graph, min_timesteps=3),
                              report=dataclasses.replace(config.report, max_lines=3))
    validation = validate(sample_dir, few)
    ledger = validation.report.attrition["ADMISSIONS"]
    short = next(f for f in validation.report.findings if f.check == "admission_below_min_timesteps")
    assert short.count == ledger["dropped"] > 3
    assert f"+{short.count - 5} more in the JSON report's attrition.ADMISSIONS.dropped_admissions" in short.message
    named = ledger["dropped_admissions"]
    fates = validation.prepared.fates
    expected = fates[fates["FATE"] != "in_graphs"]
    assert [d["HADM_ID"] for d in named] == expected["HADM_ID"].astype("int64").tolist()
    assert {d["reason"] for d in named} == {"admission_below_min_timesteps"}


def test_min_timesteps_1_keeps_every_admission_with_a_kept_lab(dropping):
    _, everything, ids, _ = dropping
    ledger = everything.report.attrition["ADMISSIONS"]
    assert ledger["dropped_by"]["admission_below_min_timesteps"] == 0
    assert everything.prepared.fates.set_index("HADM_ID").loc[ids["admission_below_min_timesteps"], "FATE"] == "in_graphs"
    assert not [f for f in everything.report.findings if f.check == "below_min_timesteps"]


def test_the_built_graphs_hold_exactly_the_admissions_the_ledger_counts(tmp_path, config):
    import json

    from pipeline.builds import build
    from pipeline.config import load_config

    d, ids, _ = _dropping_dataset(rejected=False)
    folder = d.write(tmp_path / "data")
    settings = tmp_path / "config.toml"
    settings.write_text("[graph]\nmin_timesteps = 2\n")
    built = build(folder, tmp_path / "out", load_config(settings))
    assert built.out_dir is not None, [f.message for f in built.report.findings if f.severity == "error"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    ledger = manifest["accounting"]["ADMISSIONS"]
    assert ledger == built.report.attrition["ADMISSIONS"]
    index = pd.read_parquet(tmp_path / "out" / "index.parquet")  # per admission node: split, batch, HADM_ID
    nodes = {name: set(index.loc[index["split"] == name, "HADM_ID"]) for name in ("train", "val", "test")}
    for name, held in nodes.items():
        assert len(held) == ledger["splits"][name]["in_graphs"] == manifest["splits"][name]["admissions"]
    every = set().union(*nodes.values())
    assert not every & {ids["admission_no_labs"], ids["admission_labs_quarantined"],
                        ids["admission_below_min_timesteps"]}
    assert ledger["read"] == len(every) + ledger["dropped"]


def test_mimic3demo_every_admission_accounted_for_and_the_124_day_stay_whole(mimic3demo, tmp_path, config):
    from pipeline.builds import build

    built = build(mimic3demo, tmp_path / "out", config)
    assert built.out_dir is not None
    prepared = built.validation.prepared
    ledger = built.report.attrition["ADMISSIONS"]
    assert ledger["read"] == 129 == ledger["in_graphs"] + ledger["dropped"]
    index = pd.read_parquet(tmp_path / "out" / "index.parquet")
    for name, split in ledger["splits"].items():
        assert split["read"] == split["in_graphs"] + split["dropped"]
        assert split["in_graphs"] == int((index["split"] == name).sum())
    assert ledger["in_graphs"] == len(index) == 129
    # HADM_ID 160442: every lab row drawn in the ED the evening before its admission day, once all quarantined (the
    # admission dropped as admission_labs_quarantined), now kept at timestep 0.
    assert 160442 in set(index["HADM_ID"])
    assert "admission_labs_quarantined" not in {f.check for f in built.report.findings}
    edges = prepared.edges
    longest = edges.groupby("HADM_ID")["TIMESTEP"].max()
    assert longest.max() == 123 and set(range(100, 124)) <= set(edges.loc[edges["HADM_ID"] == longest.idxmax(),
                                                                         "TIMESTEP"])
    assert not {"beyond_max_timestep", "beyond_max_stay", "after_discharge"} & {f.check for f in built.report.findings}
    page = (tmp_path / "out" / "report.html").read_text()
    assert "ADMISSIONS: read 129 = in graphs 129 + dropped 0" in page


def test_a_deliberate_max_timestep_reports_under_its_own_check_with_rows_and_admissions(tables, config):
    capped = prepare(tables, dataclasses.replace(config, bucket=dataclasses.replace(config.bucket, max_timestep=3)))
    found = checks_of(capped)
    (beyond,) = found["beyond_max_timestep"]
    quarantine = capped.quarantine.whole()
    rows = quarantine[quarantine["REASON"] == bucket_stage.BEYOND_MAX]
    assert beyond.severity == "info" and beyond.stage == "bucket" and beyond.count == len(rows) > 0
    assert beyond.lines == sorted(rows.index)[:20]
    assert f"in {rows['HADM_ID'].nunique()} admissions" in beyond.message
    assert found["after_discharge"][0].count == checks_of(prepare(tables, config))["after_discharge"][0].count
    assert capped.edges["TIMESTEP"].max() == 3 and closes(capped)


# -- stages with no fit between them work on the rows in one go ----------------------------------------
class _Steps:
    """A progress that keeps the names of its steps."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def step(self, name: str, *, rows=None, unit: str = "rows") -> None:
        self.names.append(name)

    def rows(self, rows: int) -> None:
        pass

    def end(self) -> None:
        pass


def test_stages_run_in_one_pass_up_to_the_next_fit_that_reads_their_rows(tables, config, prepared):
    """text's fit reads the raw rows, clean's the rows text gives (its calls replayed on the raw rows: Stage.replay),
    encode's split's; the z-score fit is read with encode's (split's rows, which encode only adds CODE to) and
    fill's constants read no row: two passes. A fill by the mean waits for scale's
    rows; vocabularies and stats of an earlier run make one pass of all the stages. The results are the same."""
    steps = _Steps()
    assert prepare(tables, config, progress=steps).findings == prepared.findings
    assert steps.names == ["text+clean+split", "encode+scale+fill+bucket+dedup"]

    mean = dataclasses.replace(config, fill={**config.fill, "Z": dataclasses.replace(config.fill["Z"], policy="mean",
                                                                                        value=None)})
    steps = _Steps()
    by_mean = prepare(tables, mean, progress=steps)
    assert steps.names == ["text+clean+split", "encode+scale", "fill+bucket+dedup"]
    assert by_mean.fitted.get("fill") != prepared.fitted.get("fill") and by_mean.fitted.get("scale") == prepared.fitted.get("scale")

    steps = _Steps()
    again = prepare(tables, config, fitted={"scale": prepared.fitted["scale"], "encode": prepared.fitted["encode"]},
                    progress=steps)
    assert steps.names == ["text+clean+split+encode+scale+fill+bucket+dedup"]
    pd.testing.assert_frame_equal(again.edges, prepared.edges)
