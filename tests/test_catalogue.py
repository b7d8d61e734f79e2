"""Every check of the catalogue (``badpoints checks``) fires where it should, and only there.

:data:`FIRES` maps each check id to a run that breaks what it guards and to what that run's report must say of
it: severity and count. Runs are the cases of ``tests/corpus.py`` and the sample under a changed config, through
the real CLI (each run once per session, shared by every check it fires), and, for checks no dataset can reach
(the guards behind the stages, the graph checks of a corrupted graph), the real code those checks run in. A new
check without an entry fails :func:`test_every_check_has_a_firing_case`. A check off by default fires under a
config whose ``[severity]`` turns it on, and is not in the default run's report.

The clean dataset (the sample without the rows and values that MIMIC's own quirks make it report) builds with
no error or warning at all: every check that is not a plain count stays silent there.
"""

from __future__ import annotations

import atexit
import copy
import functools
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch_geometric.data import HeteroData
from typer.testing import CliRunner

from pipeline.stages import fill, graph, scale, split, text
from pipeline.cli import app
from pipeline.config import load_config
from pipeline.reporting.findings import LISTED
from pipeline.reporting.report import finding_from_error
from schemas.catalogue import CHECKS, INFO, OFF, WARNING
from schemas.errors import StageError
from schemas.graph import EDGE, REVERSE, GraphRules, graph_problems, pyg_problems
from schemas.guard import check_frame
from schemas.scale import Z_ERROR_BOUND
from schemas.split import SplitAssignment
from tests.corpus import Dataset, build
from tests.meds import CASES as MEDS_CASES
from tests.meds import PLANTED_CASES, write_meds, write_normalized
from tests.meds_labels import DEATH, LABEL_CASES, write_labels
from tests.pipeline.stages.sample import sample_stages

runner = CliRunner()
ROOT = Path(tempfile.mkdtemp(prefix="badpoints-catalogue-"))  # the runs' data and outputs, removed at exit
atexit.register(shutil.rmtree, ROOT, ignore_errors=True)


# -- runs, each once per session -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    exit_code: int
    findings: tuple[dict, ...]
    out: Path | None = None  # the build's folder


def _cli(command: str, data: Path, config: str, out: Path | None = None, to: str | None = None) -> Run:
    folder = data.parent
    args = [command, str(data), "--json", str(folder / f"{command}.json")]
    if out is not None:
        args += ["--out", str(out)]
    if to is not None:
        args += ["--to", to]
    if config:
        (folder / "badpoints.toml").write_text(config)
        args += ["--config", str(folder / "badpoints.toml")]
    result = runner.invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    report = json.loads((folder / f"{command}.json").read_text())
    return Run(result.exit_code, tuple(report["findings"]), out)


@functools.cache
def corpus(name: str, config: str = "") -> Run:
    """``badpoints validate`` of a corpus case (``config``: badpoints.toml)."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix=name))
    build(name, folder / "data")
    return _cli("validate", folder / "data", config)


@functools.cache
def sample(config: str = "", command: str = "validate") -> Run:
    """``badpoints validate`` (or ``build``) of the sample as it is, with ``config`` as badpoints.toml."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="sample"))
    Dataset.sample().write(folder / "data")
    return _cli(command, folder / "data", config, out=folder / "out" if command == "build" else None)


@functools.cache
def meds_build() -> Run:
    """``badpoints build --to meds`` of the sample as it is."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="meds_build"))
    Dataset.sample().write(folder / "data")
    return _cli("build", folder / "data", "", out=folder / "out", to="meds")


@functools.cache
def meds_run(cases: tuple[str, ...] = PLANTED_CASES, breaking: str = "", config: str = "") -> Run:
    """``badpoints validate`` of tests/meds.py's MEDS fixture with ``cases``; ``breaking``: "empty_shard" adds a
    0-row train/2 shard, "null_code" nulls every code of held_out/0 (meds' DataSchema refuses it), "codes_text"
    makes metadata/codes.parquet text that is not Parquet; ``config``: badpoints.toml."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="meds"))
    write_meds(folder / "data", cases)
    shard = folder / "data" / "data" / ("train/2.parquet" if breaking == "empty_shard" else "held_out/0.parquet")
    table = pq.read_table(folder / "data" / "data" / "held_out" / "0.parquet")
    if breaking == "empty_shard":
        pq.write_table(table.slice(0, 0), shard)
    elif breaking == "null_code":
        pq.write_table(table.set_column(2, "code", pa.array([None] * table.num_rows, pa.string())), shard)
    elif breaking == "codes_text":
        (folder / "data" / "metadata" / "codes.parquet").write_text("code\nLAB//1//U\n")
    return _cli("validate", folder / "data", config)


@functools.cache
def meds_stage_run(stage: str, config: str = "") -> Run:
    """``badpoints validate AFTER --compare BEFORE`` of a stage's output on tests/meds.py's fixture: "normalization"
    writes what MEDS-Transforms' normalization writes for PLANTED_CASES (``write_normalized``); "filter" empties the
    tuning split of the clean fixture, as a filter_subjects run that marks itself done."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="meds_stage"))
    before, after = folder / "before", folder / "data"
    if stage == "normalization":
        write_normalized(write_meds(before, PLANTED_CASES).root, after)
    else:
        write_meds(before)
        write_meds(after, ("emptied_split",))
        (after / ".logs").mkdir()
        (after / ".logs" / "filter_subjects.done").touch()
    if config:
        (folder / "badpoints.toml").write_text(config)
    args = ["validate", str(after), "--compare", str(before), "--json", str(folder / "validate.json")]
    result = runner.invoke(app, args + (["--config", str(folder / "badpoints.toml")] if config else []))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return Run(result.exit_code, tuple(json.loads((folder / "validate.json").read_text())["findings"]), None)


@functools.cache
def meds_labels_run(cases: tuple[str, ...]) -> Run:
    """``badpoints check LABELS --meds MEDS_DIR --label-code MEDS_DEATH`` of tests/meds_labels.py's fixture with
    ``cases`` planted."""
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="meds_labels"))
    fixture = write_labels(folder, cases)
    result = runner.invoke(app, ["check", str(fixture.labels), "--meds", str(fixture.meds), "--label-code", DEATH,
                                 "--json", str(folder / "check.json")])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return Run(result.exit_code, tuple(json.loads((folder / "check.json").read_text())["findings"]), None)


LABEL_LEAKS = tuple(case for case in LABEL_CASES if case != "schema")  # all at once: one finding of each


def clean_dataset() -> Dataset:
    """The sample without what MIMIC's quirks make it report: outpatient rows, rows charted outside their stay,
    mixed, ordinal, fallback, rare and unseen items, rows beyond the z warning bound, and admission values too rare
    in train to be coded."""
    stages, config = sample_stages(), load_config()
    data = Dataset.sample()
    lab, adm = data.header["LABEVENTS"], data.header["ADMISSIONS"]
    labs = pd.DataFrame(data.rows["LABEVENTS"], columns=lab)
    admissions = pd.DataFrame(data.rows["ADMISSIONS"], columns=adm)
    stay = labs.merge(admissions[["HADM_ID", "ADMITTIME", "DISCHTIME"]], on="HADM_ID", how="left")
    scaled = stages.scaled
    items = set(stages.events.quarantine["ITEMID"].dropna().astype(int))  # mixed items' text rows
    items |= set(text.fit_numbered(stages.tables.labevents).items_of("ordinal"))  # their words read as ranks
    items |= set(stages.stats.fallback_items_) | set(stages.stats.rare_items_)
    items |= set(scaled["ITEMID"]) - set(stages.stats.items_)
    items |= set(scaled.loc[scaled["Z"].abs() > config.scale.warn_bound, "ITEMID"])
    drop = ((stay["HADM_ID"] == "") | (stay["CHARTTIME"] < stay["ADMITTIME"]) | (stay["CHARTTIME"] > stay["DISCHTIME"])
            | stay["ITEMID"].astype(int).isin(items))
    data.rows["LABEVENTS"] = [row for row, dropped in zip(data.rows["LABEVENTS"], drop) if not dropped]
    train = stages.split_admissions[stages.split_admissions["SPLIT"] == "train"]
    for column in ("ETHNICITY", "ADMISSION_LOCATION", "ADMISSION_TYPE", "DISCHARGE_LOCATION", "INSURANCE",
                   "LANGUAGE", "MARITAL_STATUS", "RELIGION"):
        counts = train[column].value_counts()
        seen = set(counts.index[counts >= config.encode.min_admissions])  # coded: neither unseen nor rare
        i = data.col("ADMISSIONS", column)
        for row in data.rows["ADMISSIONS"]:
            if row[i] and row[i] not in seen:
                row[i] = ""
    return data


@functools.cache
def clean_build() -> Run:
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="clean"))
    clean_dataset().write(folder / "data")
    return _cli("build", folder / "data", "", out=folder / "out")


# -- checks no dataset reaches: the real code they run in, fed what only a bug could make -------------------------
def guard_failure() -> Run:
    """A stage handed a frame its input schema forbids (no SPLIT column): the guard stops it."""
    stages = sample_stages()
    with pytest.raises(StageError) as caught:
        split.attach_split(stages.events.frame.drop(columns="CHARTTIME"), stages.splits)
    return Run(1, (finding_from_error(caught.value).as_json(),))


def overlapping_splits() -> Run:
    """The split assignment with one admission of a two-admission patient moved to another split."""
    splits = sample_stages().splits
    group = splits["GROUP"].value_counts().loc[lambda n: n == 2].index[0]
    row = splits.index[splits["GROUP"] == group][0]
    splits.loc[row, "SPLIT"] = next(s for s in ("train", "val", "test") if s != splits.loc[row, "SPLIT"])
    with pytest.raises(StageError) as caught:
        check_frame(SplitAssignment, splits, stage="split", side="output")
    return Run(1, (finding_from_error(caught.value).as_json(),))


def infinite_z() -> Run:
    """Stats as memory corruption could hold them (scale 0, which the constructor refuses): z is inf."""
    stages = sample_stages()
    stats = copy.copy(stages.stats)  # the cached stats stay sound
    object.__setattr__(stats, "scale_", (0.0, *stats.scale_[1:]))  # the first item's
    with pytest.raises(StageError) as caught:
        scale.apply_zscore(stages.encoded, stats)
    return Run(1, (finding_from_error(caught.value).as_json(),))


def infinite_training_value() -> Run:
    """Split's rows as the z-score fit reads them, with one training VALUENUM inf, as only a frame made by hand
    could hold it (the raw checks quarantine it): the fit refuses it."""
    events = sample_stages().split_events.copy()
    events.loc[events.index[(events["SPLIT"] == "train") & events["VALUENUM"].notna()][0], "VALUENUM"] = float("inf")
    with pytest.raises(StageError) as caught:
        scale.fit_zscore(events)
    return Run(1, (finding_from_error(caught.value).as_json(),))


@functools.cache
def sample_graph() -> tuple:
    stages = sample_stages()
    prepared = sample_prepared()
    graphs = graph.build_graphs(prepared.edges, prepared.admissions, prepared.labitems, batch_size=16)
    limits = graph.graph_limits(prepared.fitted.get("encode"), prepared.edges, prepared.admissions,
                                max_timestep=load_config().bucket.max_timestep)
    del stages
    return graphs[0].data, limits


@functools.cache
def sample_prepared():
    from pipeline.flow import prepare
    from tests.pipeline.stages.sample import typed
    return prepare(typed(), load_config())


def broken_graph(breaking: Callable) -> Callable[[], Run]:
    def run() -> Run:
        data, limits = sample_graph()
        data = copy.deepcopy(data)
        breaking(data, limits)
        problems = graph_problems(data, limits, where="train/batch 0")
        return Run(1, tuple(finding_from_error(p).as_json() for p in problems))
    return run


def _set(store, attr, value):
    store[attr] = value


def pyg_rejects() -> Run:
    """What only HeteroData.validate() knows is wrong: every such case is caught by a check above first, so its
    verdict is stood in for."""
    def rejects(self, raise_on_error=True):
        raise ValueError("'edge_index' of edge type ('admission', 'did', 'labitem') is odd")

    data, limits = sample_graph()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeteroData, "validate", rejects)
        problems = graph_problems(copy.deepcopy(data), limits, where="train/batch 0")
    return Run(1, tuple(finding_from_error(p).as_json() for p in problems))


def any_graph(breaking: Callable, **rules) -> Callable[[], Run]:
    """The guard of any PyG graph on PyG's Karate Club (shipped with PyG: no download) after ``breaking``: the
    checks every PyG graph gets and badpoints' own builds never report (nodes in no edge, a graph's bytes)."""
    def run() -> Run:
        from torch_geometric.datasets import KarateClub

        data = KarateClub()[0]
        breaking(data)
        problems = pyg_problems(data, GraphRules(**{"num_classes": 4, **rules}))
        errors = any(CHECKS[p.check].severity == "error" for p in problems)
        return Run(int(errors), tuple(finding_from_error(p).as_json() for p in problems))
    return run


def _without_node(data, node: int) -> None:
    """Every edge of ``node`` dropped: the node is in no edge."""
    data.edge_index = data.edge_index[:, (data.edge_index != node).all(dim=0)]


@functools.cache
def constant_item() -> Run:
    """Item 50868 (anion gap) is 5 in every row but one test row, which is 7."""
    splits = sample_stages().splits.set_index("HADM_ID")["SPLIT"]
    data = Dataset.sample()
    item, hadm = data.col("LABEVENTS", "ITEMID"), data.col("LABEVENTS", "HADM_ID")
    rows = [n for n, r in enumerate(data.rows["LABEVENTS"]) if r[item] == "50868" and r[hadm]]
    for row in rows:
        data.set("LABEVENTS", row, "VALUENUM", "5")
        data.set("LABEVENTS", row, "VALUE", "5")
    test = next(n for n in rows if splits[int(data.rows["LABEVENTS"][n][hadm])] == "test")
    data.set("LABEVENTS", test, "VALUENUM", "7")
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="constant"))
    data.write(folder / "data")
    return _cli("validate", folder / "data", "")


def missing_z() -> Run:
    """The sample's scaled rows with the z of the first item's rows (50802, all numeric) lost, as only a bug in
    scale could leave them: real missing values, which fill counts (filled) apart from the values its rows do not
    have by construction (structural_fill). Every row with a number has its z on real data."""
    scaled = sample_stages().scaled.copy()  # the cached frame stays sound
    first = scaled["ITEMID"] == scaled["ITEMID"].min()
    assert scaled.loc[first, "VALUENUM"].notna().all()
    scaled.loc[first, "Z"] = float("nan")
    return Run(0, tuple(f.as_json() for f in fill.fill_findings(scaled, load_config().fill)))


def broken_meds_shard() -> Run:
    """A build written as MEDS whose glucose values (50931) reach its shards as inf, as only a bug in the export
    could write them: the first shard's guard stops the build before anything is staged."""
    from unittest import mock

    from pipeline.builds import build as run_build
    from pipeline.stages.scale.fit import ZScoreStats

    transformed = ZScoreStats.transformed

    def broken(self, events):
        return transformed(self, events).mask(events["ITEMID"].to_numpy() == 50931, float("inf"))

    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix="meds_export"))
    Dataset.sample().write(folder / "data")
    with mock.patch.object(ZScoreStats, "transformed", broken):
        built = run_build(folder / "data", folder / "out", load_config(), to="meds")
    assert built.out_dir is None and not (folder / "out" / "data").exists()
    return Run(built.exit_code, tuple(f.as_json() for f in built.report.findings))


# A user's table (``badpoints check``): a few rows and a schema of badpoints' checks, each with one way to break it.
USER_TABLE = ("HADM_ID,ITEMID,VALUENUM,Z,CODE,T,SUBJECT,SPLIT\n10,1,5,0,0,1,1,train\n11,1,5,0,1,2,1,train\n"
              "12,1,6,10000000,2,3,2,test\n13,2,1,-1.2,2,1,3,train\n14,2,2,0,1,0,3,val\n15,2,3,1.2,0,2,4,val\n"
              "16,3,7,0,3,5,5,test\n16,3,7,inf,1,6,5,test\n")


@functools.cache
def user_table(name: str) -> Run:
    """``badpoints check`` of :data:`USER_TABLE` against a schema whose one check is ``name``'s (or, for
    table_schema, a column typed int that holds text)."""
    import pandera.pandas as pa

    checks = {
        "finite": ({"Z": [pa.Check.finite()]}, []), "z_within": ({"Z": [pa.Check.z_within(bound=10)]}, []),
        "code_in_range": ({"CODE": [pa.Check.code_in_range(n=3)]}, []),
        "label_in_range": ({"CODE": [pa.Check.label_in_range(num_classes=2)]}, []),
        "values_within": ({"T": [pa.Check.values_within(low=0, high=5)]}, []),
        "z_explained": ({}, [pa.Check.z_explained(column="Z", values="VALUENUM", by="ITEMID")]),
        "keys_unique": ({}, [pa.Check.keys_unique(columns=["HADM_ID"])]),
        "monotone_within": ({}, [pa.Check.monotone_within(column="T", by="ITEMID")]),
        "one_value_per_group": ({}, [pa.Check.one_value_per_group(column="SPLIT", by="SUBJECT")]),
        "not_empty": ({}, [pa.Check.not_empty()]), "kept_share": ({}, [pa.Check.kept_share(rows_in=100, at_least=0.5)]),
        "added_share": ({}, [pa.Check.added_share(rows_in=4, at_most=0.5)]),  # 8 rows from 4: more than 6
        "table_schema": ({"CODE": [pa.Check.ge(1)]}, []),  # CODE 0 twice
    }
    columns, frame_checks = checks[name]
    folder = Path(tempfile.mkdtemp(dir=ROOT, prefix=f"check-{name}"))
    text = USER_TABLE if name != "not_empty" else USER_TABLE.split("\n", 1)[0] + "\n"
    (folder / "t.csv").write_text(text)
    types = {"CODE": int, "T": int}
    schema = pa.DataFrameSchema({"Z": pa.Column(float, nullable=True), **{
        column: pa.Column(types.get(column), checks=column_checks) for column, column_checks in columns.items()
        if column != "Z"}}, checks=frame_checks)
    if "Z" in columns:
        schema = schema.update_column("Z", checks=columns["Z"])
    (folder / "s.yaml").write_text(schema.to_yaml())
    result = runner.invoke(app, ["check", str(folder / "t.csv"), "--schema", str(folder / "s.yaml"), "--json",
                                 str(folder / "r.json")])
    report = json.loads((folder / "r.json").read_text())
    return Run(result.exit_code, tuple(f for f in report["findings"] if f["check"] == name or
                                       (name != "table_schema" and f["check"] != "table_schema")))


def check_run(name: str, count: int) -> Fires:
    return Fires(functools.partial(user_table, name), count, exit_code=1)


def no_manifest() -> Run:
    from pipeline.output import write
    with pytest.raises(StageError) as caught:
        write.read_manifest(Path(tempfile.mkdtemp(dir=ROOT)))
    return Run(1, (finding_from_error(caught.value).as_json(),))


def unsafe_graph() -> Run:
    from pipeline.output import write
    buffer = io.BytesIO()
    torch.save({"admission": {"x": torch.zeros(1)}, "code": Path("anything")}, buffer)  # needs unpickling a class
    with pytest.raises(StageError) as caught:
        write.load_graph_bytes(buffer.getvalue(), "train/batch_0.pt")
    return Run(1, (finding_from_error(caught.value).as_json(),))


# -- what each check's run must report ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Fires:
    run: Callable[[], Run]
    count: int
    table: str | None = None  # which of the check's findings, when the run has several
    column: str | None = None
    text: str | None = None  # a phrase of its message, when table and column do not single it out
    exit_code: int | None = None  # the run's exit code, where it is part of what the check guarantees
    severity: str | None = None  # the level the run's config sets, for a check off by default


def case(name: str, count: int, **where) -> Fires:
    return Fires(functools.partial(corpus, name), count, **where)


def config(toml: str, count: int, *, command: str = "validate", **where) -> Fires:
    return Fires(functools.partial(sample, toml, command), count, **where)


AS_IS = functools.partial(sample, "")
MORTALITY, LONG_STAY, READMISSION = (f'[task]\nname = "{name}"\n' for name in ("mortality_24h", "long_stay_3d",
                                                                               "readmission_30d"))
LEAKING_FEATURE = '[graph]\nadmission_features = ["ADMISSION_TYPE", "DISCHARGE_LOCATION"]\n'

RAW_Z = "[scale.policy]\ndefault = \"none\"\n"  # today's raw z: the heavy tails the default bounds
TURNED_ON = "[severity]\nhadm_id_missing = \"warning\"\ncharttime_outside_stay = \"warning\"\n"  # off by default
FIRES: dict[str, Fires] = {
    # load
    "file_missing": case("missing_file", 1, exit_code=2),
    "file_unreadable": case("table_is_a_folder", 1, exit_code=2),
    "file_ambiguous": case("two_files_for_one_table", 1, exit_code=0),
    "file_empty": case("empty_file", 1, exit_code=1),
    "compression": case("truncated_gzip", 1, exit_code=1),
    "decompression_bound": case("gzip_bomb", 1, exit_code=2),
    "encoding": case("undecodable_bytes", 1, exit_code=1),
    "duplicate_header": case("duplicate_header", 1, exit_code=1),
    "header_near_column": case("valuenum_header_one_edit_away", 1, exit_code=0),
    "missing_column": case("missing_required_column", 1, exit_code=1),
    "malformed_row": case("ragged_row", 1, exit_code=1),
    "field_too_long": case("field_of_a_megabyte", 1, exit_code=1),
    "table_empty": case("header_only", 1, exit_code=1),
    # raw
    "id_missing": case("empty_itemid", 1, exit_code=1),
    "id_positive_integer": case("text_in_itemid", 1, exit_code=1),
    "id_float_format": case("float_formatted_ids", 1, exit_code=0),
    "hadm_id_missing": config(TURNED_ON, 660, severity=WARNING, exit_code=0),  # the outpatient rows
    "valuenum_numeric": case("text_in_valuenum", 1, exit_code=1),
    "valuenum_finite": case("inf_valuenum", 1, exit_code=1),
    "valuenum_bound": case("huge_valuenum", 1, exit_code=1),
    "valuenum_derived": case("no_valuenum_column", 12702, exit_code=0),  # VALUE that is a number
    "ref_range_numeric": case("ref_range_text", 1, exit_code=0),
    "flag_value": case("unknown_flag", 1, exit_code=0),
    "datetime_missing": case("empty_charttime", 1, exit_code=1),
    "datetime_iso": case("two_digit_year", 1, exit_code=1),
    "edregtime_iso": case("edregtime_text", 1, exit_code=0),
    "deathtime_iso": case("deathtime_text", 1, exit_code=0),
    "primary_key_unique": case("duplicate_admission", 2, exit_code=1),
    "foreign_key": case("unknown_itemid", 1, exit_code=1),
    "subject_mismatch": case("subject_mismatch", 1, exit_code=1),
    "discharge_before_admit": case("discharge_before_admit", 1, exit_code=1),
    "charttime_outside_stay": config(TURNED_ON, 136, text="before the admission's ADMITTIME", severity=WARNING),
    # every stage
    "stage_guard": Fires(guard_failure, 1),  # the missing column
    "fit_finite": Fires(infinite_training_value, 1),
    "step_empty": case("every_lab_outpatient", 13041, exit_code=1),
    "step_removed_most": config("[filters]\nwarn_removed_fraction = 0.01\n", 660, text="outpatient", exit_code=0),
    "step_removed_nearly_all": case("almost_every_lab_outpatient", 12976, exit_code=1),
    "attrition": Fires(AS_IS, 13041),
    # clean
    "quarantine_outpatient": Fires(AS_IS, 660),
    "quarantine_raw_error": case("text_in_valuenum", 1),
    "quarantine_admission": case("discharge_before_admit", 169),  # the lab rows of the rejected admission
    "mixed_item_text": Fires(AS_IS, 5),
    # text
    "censored_value": Fires(AS_IS, 32),
    "mapped_text_value": Fires(AS_IS, 25),
    "ranked_value": Fires(AS_IS, 69),  # urine protein's NEG, TR, 1+, 2+, 3+ (51492)
    "biased_item": config("[clean]\nmin_kept_share = 0.99\n", 1, exit_code=0),  # troponin T keeps 80 of 85
    "result_in_comments": case("result_only_in_comments", 1),
    "no_result": case("lab_row_without_result", 1, exit_code=0),
    # split
    "split_by_admission": case("admissions_without_subject_id", 120, exit_code=0),
    "split_empty": case("two_patients", 1, exit_code=1),
    "split_overlap": Fires(overlapping_splits, 2),
    # encode
    "unseen_category": Fires(AS_IS, 2, table="ADMISSIONS", text="in 1 column(s) (admissions): ETHNICITY 2."),
    "category_case_variants": case("fluid_case_variants", 8, exit_code=0),  # the items with either spelling
    "rare_category": Fires(AS_IS, 51, table="ADMISSIONS", text=(  # every admission column's, the most first
        "in 8 column(s) (admissions): ETHNICITY 13, MARITAL_STATUS 8, LANGUAGE 7, INSURANCE 6, RELIGION 6, "
        "ADMISSION_LOCATION 4, DISCHARGE_LOCATION 4, ADMISSION_TYPE 3.")),
    # scale
    "constant_item": Fires(constant_item, 1),
    "rare_item": config("[encode]\nmin_admissions = 10\n", 1, text="ITEMID 50963 NTproBNP (Blood) (9 train rows)",
                        exit_code=0),
    "fallback_item": Fires(AS_IS, 2),
    "constant_item_value": Fires(constant_item, 1),
    "unseen_item": Fires(AS_IS, 2),
    "z_finite": Fires(infinite_z, 163),  # the rows of the first item, 50802
    "z_warn_bound": config(RAW_Z, 5),
    "z_error_bound": config("[scale]\nerror_bound = 500.0\n" + RAW_Z, 3, exit_code=1),
    "z_bounded": Fires(AS_IS, 714),
    "policy_group_unknown": config("[scale.policy]\n\"Chemstry\" = \"log\"\n", 1, exit_code=0),
    "censored_off_scale": case("censored_bound_off_the_item_s_scale", 4, exit_code=0),  # 2 '<0.01', 2 '>1000'
    "log_domain": config("[scale.policy]\n50802 = \"log\"\n", 75, exit_code=1),
    # fill
    "filled": Fires(missing_z, 163, column="Z"),  # the rows of the first item, 50802
    "structural_fill": Fires(AS_IS, 12169, column="CODE", text="values of rows with a number (no category by "
                                                                "construction)"),
    "fill_collides": config("[fill.CODE]\npolicy = \"constant\"\nvalue = 1\n", 141, exit_code=1),
    # the categorical rows, as structural_fill's Z counts: no earlier z in their admission
    "fill_left_nulls": config("[fill.Z]\npolicy = \"ffill\"\n", 207, exit_code=1),
    # bucket
    "before_admission": Fires(AS_IS, 85),
    "from_ed_stay": case("lab_in_the_ed_the_evening_before", 1, exit_code=0),
    "after_discharge": Fires(AS_IS, 67),
    "beyond_max_stay": case("discharge_decades_late", 1, exit_code=0),
    "beyond_max_timestep": config("[bucket]\nmax_timestep = 2\n", 5479, exit_code=0),
    # dedup
    "merged": Fires(AS_IS, 2843),
    "below_min_timesteps": config("[graph]\nmin_timesteps = 3\n", 311, exit_code=0),
    # the admission ledger
    "admission_no_labs": case("admission_without_labs", 1, exit_code=0),
    "admission_rejected": case("negative_hadm_id", 1, exit_code=1),
    "admission_labs_quarantined": case("admission_labs_all_a_year_early", 1, exit_code=0),
    "admission_below_min_timesteps": config("[graph]\nmin_timesteps = 3\n", 9, exit_code=0),
    # task: what the model is asked, and when (docs/tasks.md)
    "task_window_geometry": config(f"{MORTALITY}label_window = [\"admit + 12h\", \"discharge\"]\n", 1, exit_code=1),
    "task_needs_column": Fires(functools.partial(corpus, "admissions_without_subject_id", READMISSION), 120,
                               exit_code=1),  # every admission: none has a SUBJECT_ID
    "task_label_in_features": config(MORTALITY + LEAKING_FEATURE, 1, exit_code=1),
    "task_feature_after_prediction": config(
        READMISSION + 'prediction_time = "discharge - 24h"\nlabel_window = ["discharge", "discharge + 30d"]\n'
        + LEAKING_FEATURE, 1, table="ADMISSIONS", exit_code=1),
    # the stays of 24 to 48 h: decided at their discharge, after the prediction time
    "task_selection_on_future": config(MORTALITY + "min_stay_hours = 48\n", 11, exit_code=1),
    "task_criterion_removes_none": config(
        LONG_STAY + 'admission_types = ["EMERGENCY", "ELECTIVE", "URGENT", "NEWBORN"]\n', 0, exit_code=0),
    "task_criterion_removes_all": config(LONG_STAY + 'admission_types = ["TRAUMA"]\n', 120, exit_code=1),
    "task_outside_cohort": config(LONG_STAY, 43),  # the rows of the one admission discharged within 24 h
    "task_after_prediction": config(LONG_STAY, 8293),
    "task_cohort": config(LONG_STAY, 119),
    "task_prevalence": config(LONG_STAY, 85),
    "task_few_positives": config(MORTALITY, 2, exit_code=1),  # val and test hold none of the sample's 9 deaths
    "task_window_by_class": config(LONG_STAY + "class_tolerance = 1.01\n", 119, exit_code=0),
    "task_excluded": config(LONG_STAY + 'admission_types = ["EMERGENCY"]\n', 29, exit_code=0),
    "task_left_before_prediction": config(LONG_STAY, 1),
    "task_label_censored": config(READMISSION, 1),  # the last discharge's 30 days run past the data's end
    "task_no_observed_data": config(LONG_STAY + 'observation_window = ["prediction - 1h", "prediction"]\n', 107),
    "meds_export_shard": Fires(broken_meds_shard, 25, exit_code=1),  # held_out/0's glucose values
    "meds_export_unseen_codes": Fires(meds_build, 2, exit_code=0),  # two codes of one held_out row each
    # check: a user's table against a schema of theirs
    "table_schema": Fires(functools.partial(user_table, "table_schema"), 2, text="greater_than_or_equal_to",
                          exit_code=1),
    "finite": check_run("finite", 1),
    "z_within": check_run("z_within", 1),
    "z_explained": check_run("z_explained", 1),
    "code_in_range": check_run("code_in_range", 1),
    "label_in_range": check_run("label_in_range", 3),
    "values_within": check_run("values_within", 1),
    "keys_unique": check_run("keys_unique", 2),
    "monotone_within": check_run("monotone_within", 1),
    "one_value_per_group": check_run("one_value_per_group", 2),
    "not_empty": check_run("not_empty", 1),
    "kept_share": check_run("kept_share", 1),
    "added_share": check_run("added_share", 1),
    # graph
    "graph_finite": Fires(broken_graph(lambda g, _: g[EDGE].edge_attr.__setitem__((5, 0), float("inf"))), 1),
    "graph_edge_index": Fires(broken_graph(lambda g, _: _set(g[EDGE], "edge_index", g[EDGE].edge_index.int())), 1),
    "graph_index_bounds": Fires(broken_graph(
        lambda g, _: g[EDGE].edge_index.__setitem__((1, 10), g["labitem"].num_nodes)), 1),
    "graph_empty": Fires(broken_graph(
        lambda g, _: [_set(g[t], "edge_index", g[t].edge_index[:, :0]) for t in (EDGE, REVERSE)]), 1,
        column="admission__did__labitem.edge_index"),
    "graph_edge_rows": Fires(broken_graph(lambda g, _: _set(g[EDGE], "timestep", g[EDGE].timestep[:-1])), 1),
    "graph_node_rows": Fires(broken_graph(lambda g, _: _set(g["admission"], "x_cat", g["admission"].x_cat[:-1])), 1),
    "graph_node_ids": Fires(broken_graph(
        lambda g, _: _set(g["labitem"], "node_id", g["labitem"].node_id.flip(0))), 46),
    "graph_timestep_range": Fires(broken_graph(
        lambda g, limits: g[EDGE].timestep.__setitem__([2, 30], -1)), 2),
    "graph_code_range": Fires(broken_graph(
        lambda g, limits: g[EDGE].edge_attr_cat.__setitem__((12, 0), limits.cardinalities("edge_attr_cat")[0])), 1),
    "graph_label_range": Fires(broken_graph(lambda g, _: g["admission"].y.__setitem__((7, 3), 2.0)), 1),
    "graph_pyg": Fires(pyg_rejects, 1),
    "graph_isolated_nodes": Fires(any_graph(lambda g: _without_node(g, 11)), 1, exit_code=0),
    "graph_bytes": Fires(any_graph(lambda g: None, max_bytes=1024), 1, exit_code=0),  # 7.3 KiB of tensors
    "graph_magnitude": Fires(any_graph(lambda g: g.x.__setitem__(([3, 5], 0), 3e11), max_abs=Z_ERROR_BOUND), 2,
                             exit_code=1),
    "graph_labels_unchecked": Fires(any_graph(lambda g: None, num_classes=None, unchecked_labels=True), 1,
                                    exit_code=0),
    "feature_known_after_admission": config('[graph]\nadmission_features = ["ADMISSION_TYPE", "DISCHARGE_LOCATION"]\n',
                                            1, exit_code=0),
    "graph_memory": config("[graph]\nmemory_budget_mb = 0.01\n", 3, command="build", exit_code=0),  # 3 batches
    "graph_manifest": Fires(no_manifest, 1),
    "graph_unsafe": Fires(unsafe_graph, 1),
    # a MEDS dataset (tests/meds.py's cases; docs/meds.md)
    "meds_schema": Fires(functools.partial(meds_run, (), "null_code"), 140, exit_code=1),  # every held_out row
    "meds_metadata": Fires(functools.partial(meds_run, (), "codes_text"), 1, exit_code=1),
    "meds_shard_empty": Fires(functools.partial(meds_run, (), "empty_shard"), 1, exit_code=0),
    "meds_split_empty": Fires(meds_run, 10, exit_code=1),  # the tuning subjects subject_splits names
    "meds_subject_shards": Fires(meds_run, 2),
    "meds_subject_split": Fires(meds_run, 1),
    "meds_subject_order": Fires(meds_run, 1),
    "meds_code_unlisted": Fires(meds_run, 1),
    "meds_value_finite": Fires(meds_run, 1),
    "meds_value_bound": Fires(functools.partial(meds_run, PLANTED_CASES, "", "[raw]\nvaluenum_abs_bound = 9e5\n"), 40,
                              table="train", exit_code=1),  # LARGE_OFFSET's train rows, 1e6 each
    "meds_code_mixed": Fires(meds_run, 10),
    "meds_code_unseen": Fires(meds_run, 3),
    "meds_z_non_finite": Fires(meds_run, 10_197),  # every row of the six codes, as MEDS-Transforms measured
    "meds_z_noise": Fires(functools.partial(meds_run, tuple(MEDS_CASES)), 42, exit_code=1),  # CONSTANT_TENTH's rows
    "meds_z_bound": Fires(functools.partial(meds_run, tuple(MEDS_CASES)), 1, exit_code=1),  # MANY's held_out outlier
    # the output of a MEDS-Transforms stage, and --compare BEFORE
    "meds_normalized_non_finite": Fires(functools.partial(meds_stage_run, "normalization"), 10_197, exit_code=1),
    "meds_normalized_bound": Fires(functools.partial(meds_stage_run, "normalization", "[scale]\nwarn_bound = 3\n"),
                                   4, exit_code=1),  # 4 rows of base labs and MIXED past 3
    # tuning's 10 subjects x 14 rows
    "meds_compare_split_emptied": Fires(functools.partial(meds_stage_run, "filter"), 140, exit_code=1),
    "meds_compare_codes_dropped": Fires(functools.partial(meds_stage_run, "normalization"), 3),  # HELD_OUT_ONLY
    # a task defined elsewhere: a MEDS label file against its dataset (tests/meds_labels.py's plants, one label each)
    "meds_label_schema": Fires(functools.partial(meds_labels_run, ("schema",)), 1, exit_code=1),
    "meds_label_subject_unknown": Fires(functools.partial(meds_labels_run, LABEL_LEAKS), 1, exit_code=1),
    "meds_label_after_last_event": Fires(functools.partial(meds_labels_run, LABEL_LEAKS), 1),
    "meds_label_no_history": Fires(functools.partial(meds_labels_run, LABEL_LEAKS), 1),
    "meds_label_split": Fires(functools.partial(meds_labels_run, LABEL_LEAKS), 1),  # one subject
    "meds_label_code_seen": Fires(functools.partial(meds_labels_run, LABEL_LEAKS), 1),
}


# -- the tests ----------------------------------------------------------------------------------------------------
def test_every_check_has_a_firing_case():
    assert sorted(set(CHECKS) - set(FIRES)) == []
    assert sorted(set(FIRES) - set(CHECKS)) == []


def findings_of(check: str) -> tuple[Run, list[dict]]:
    fires = FIRES[check]
    run = fires.run()
    found = [f for f in run.findings if f["check"] == check
             and (fires.table is None or f["table"] == fires.table)
             and (fires.column is None or f["column"] == fires.column)
             and (fires.text is None or fires.text in f["message"])]
    return run, found


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_check_fires_with_its_severity_and_count(check):
    fires = FIRES[check]
    run, found = findings_of(check)
    assert len(found) == 1, [(f["check"], f["table"], f["column"], f["count"]) for f in run.findings]
    (finding,) = found
    assert finding["severity"] == (fires.severity or CHECKS[check].severity)
    assert finding.get("default_severity", finding["severity"]) == CHECKS[check].severity
    assert finding["count"] == fires.count, finding["message"]
    assert finding["message"]
    if fires.exit_code is not None:
        assert run.exit_code == fires.exit_code, [(f["check"], f["severity"]) for f in run.findings]


@pytest.mark.parametrize("check", sorted(check for check, info in CHECKS.items() if info.severity == OFF))
def test_check_off_by_default_is_reported_only_when_the_config_turns_it_on(check):
    fires = FIRES[check]
    assert fires.severity not in (None, OFF)  # its firing run's config turns it on
    assert [f["message"] for f in AS_IS().findings if f["check"] == check] == []
    _, (finding,) = findings_of(check)
    assert finding["message"].endswith(f"(severity changed from off to {fires.severity} by config)")


@pytest.mark.parametrize("check", ["unseen_category", "rare_category"])
def test_admission_columns_share_one_finding_per_check(check):
    """ADMISSIONS' codes of every column in one finding: the count is the sum of the columns' counts, listed the
    most admissions first."""
    (finding,) = [f for f in AS_IS().findings if f["check"] == check and f["table"] == "ADMISSIONS"]
    assert finding["column"] is None
    columns = re.findall(r"\b([A-Z_]+) (\d+)\b", finding["message"].split("(admissions): ")[1].split(". ")[0])
    counts = [int(n) for _, n in columns]
    assert sum(counts) == finding["count"] and counts == sorted(counts, reverse=True)
    assert f"in {len(columns)} column(s)" in finding["message"]


def test_a_message_lists_the_first_items_and_lines_and_the_finding_keeps_every_item():
    """At most LISTED items (the most rows first) or lines in a message, then how many more; the finding's items
    hold every item it names."""
    findings = {f["check"]: f for f in AS_IS().findings if f["table"] == "LABEVENTS"}
    bounded = findings["z_bounded"]  # 714 values of 24 items
    items, message = bounded["items"], bounded["message"]
    assert len(items) == len(set(items)) == 24
    at = [message.index(f" {item} ") for item in items[:LISTED]]
    assert at == sorted(at)  # in the items' order: the most rows first
    rows = [int(re.match(r" \d+ .*? \(([\d,]+) rows?\)", message[i:]).group(1).replace(",", "")) for i in at]
    assert rows == sorted(rows, reverse=True) and rows[0] == 304  # 50931 Glucose (Blood)
    assert all(f" {item} " not in message for item in items[LISTED:])
    assert f"+{len(items) - LISTED} more in the JSON report" in message
    outpatient = findings["quarantine_outpatient"]  # 660 rows
    shown = ", ".join(map(str, outpatient["lines"][:LISTED]))
    assert f"(lines {shown} (+{outpatient['count'] - LISTED} more))" in outpatient["message"]


COUNTS = {"attrition", "merged", "structural_fill", "z_bounded"}  # what every build reports: how many rows went where


@pytest.mark.parametrize("check", sorted(set(CHECKS) - COUNTS))
def test_check_is_silent_on_clean_data(check):
    run = clean_build()
    assert run.exit_code == 0
    assert [f["message"] for f in run.findings if f["check"] == check] == []


def test_the_clean_dataset_builds_with_only_the_counts():
    run = clean_build()
    assert {f["check"] for f in run.findings} == COUNTS
    assert {f["severity"] for f in run.findings} == {INFO}
    assert (run.out / "manifest.json").is_file()
