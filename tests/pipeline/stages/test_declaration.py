"""pipeline/stages/__init__.py: the one list of the stages (each declared in its module, on the kernel's
:class:`pipeline.kernel.stage.Stage`), and everything that derives from it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pandas as pd
import pytest

from pipeline import flow
from pipeline.config import load_config
from pipeline.engines.pandas import PandasEngine
from pipeline.flow import ORDER
from pipeline.ledgers import dropped
from pipeline.kernel.stage import Stage
from pipeline.stages import STAGES

BEFORE, AFTER, PREPARE, REASONS = ORDER.before, ORDER.after, ORDER.prepare, ORDER.reasons
STAGE_ORDER, COLOURS = ORDER.index, ORDER.colours
from schemas.catalogue import CHECKS

ROOT = Path(__file__).resolve().parents[3]


def test_the_report_order_is_the_declared_order():
    assert list(STAGE_ORDER) == ["load", "raw", "meds", "check", *(stage.name for stage in STAGES), "flow"]
    assert [name for name in STAGE_ORDER if name in ("clean", "split", "encode", "scale", "fill", "bucket", "dedup",
                                                      "graph")] == ["clean", "split", "encode", "scale", "fill",
                                                                    "bucket", "dedup", "graph"]
    assert [stage.name for stage in ORDER.all] == [*(s.name for s in BEFORE), *(s.name for s in STAGES),
                                                   *(s.name for s in AFTER)]
    assert set(COLOURS) == set(STAGE_ORDER)


def test_the_report_is_handed_the_order_and_the_colours(sample_dir):
    validation = flow.validate(sample_dir, load_config())
    assert validation.report.stages == COLOURS and list(validation.report.stages) == list(STAGE_ORDER)


def test_names_are_unique_and_every_stage_has_a_colour():
    names = [stage.name for stage in ORDER.all]
    assert len(names) == len(set(names))
    assert all(stage.colour.startswith("#") and len(stage.colour) == 7 for stage in ORDER.all)


def test_each_stage_takes_what_the_one_before_gives():
    """What a stage gives satisfies the schema the next one takes: the same, or one that extends it (a stage that
    adds a column hands on rows its successor's schema still describes); every build target takes what the last
    stage gives."""
    chain = [stage for stage in (*BEFORE, *PREPARE) if stage.takes is not None or stage.gives is not None]
    for before, after in zip(chain, chain[1:]):
        assert issubclass(before.gives, after.takes), (before.name, after.name)
    assert ORDER.targets and all(issubclass(PREPARE[-1].gives, target.takes) for target in ORDER.targets.values())
    assert [stage for stage in STAGES if stage.plan is None] == list(ORDER.targets.values())


@pytest.mark.parametrize("task", [None, "mortality_24h"])
def test_progress_shows_the_declared_stages_in_order(task):
    """Every stage the config does not leave idle, in flow order (the default task, next_labs, leaves the task
    stage idle: it shows only when a task is asked)."""
    config = load_config(task=task)
    names = {s.name for s in PREPARE}
    validate_steps, build_steps = flow.steps(config), flow.steps(config, build="graphs")
    shown = [name for step in validate_steps for name in step.split("+") if name in names]
    assert shown == [stage.name for stage in PREPARE if not stage.idle_in(config)]  # in passes: clean+split, ...
    assert ("task" in shown) == (task is not None)
    assert build_steps[len(validate_steps):] == (
        *ORDER.targets["graphs"].steps, "report", "write")


@pytest.mark.parametrize("stage", PREPARE, ids=lambda stage: stage.name)
def test_a_stage_is_its_module_its_section_and_its_tests(stage: Stage):
    module = ROOT / "pipeline" / "stages" / f"{stage.name}.py"
    package = ROOT / "pipeline" / "stages" / stage.name / "__init__.py"  # a large stage is a package of its own
    assert module.is_file() != package.is_file()
    assert stage.plan.__module__ == f"pipeline.stages.{stage.name}"
    assert importlib.import_module(stage.plan.__module__).STAGE is stage  # declared beside its code
    assert stage.section in {field.name for field in dataclasses.fields(load_config(None))}
    tests = ROOT / "tests" / "pipeline" / "stages" / f"test_{stage.name}.py"
    assert tests.is_file(), f"{stage.name} has no test module"
    text = tests.read_text()
    assert f"pipeline.stages.{stage.name}" in text or f"import {stage.name}" in text or stage.name in text


@pytest.mark.parametrize("stage", [s for s in PREPARE if s.fit is not None], ids=lambda stage: stage.name)
def test_a_fit_learns_frozen_state_saved_as_json(stage: Stage):
    fit = stage.fit
    assert dataclasses.is_dataclass(fit.state) and fit.state.__dataclass_params__.frozen
    assert callable(getattr(fit.state, "as_json", None))
    own = (stage.plan.__module__, f"{stage.plan.__module__}.")  # its module, or a module of its package
    assert fit.whole.__module__ == own[0] or fit.whole.__module__.startswith(own[1])
    for function in (fit.partial, fit.combine, fit.finish):
        assert function is None or function.__module__ == own[0] or function.__module__.startswith(own[1])
    saved = [s.fit.saved_as for s in PREPARE if s.fit is not None]
    assert len(saved) == len(set(saved))


def test_every_declared_reason_is_reported_by_a_catalogued_check():
    declared = [reason for stage in STAGES for reason in stage.reasons]
    assert len({reason.text for reason in declared}) == len(declared)
    assert all(reason.check in CHECKS for reason in declared), [r.check for r in declared if r.check not in CHECKS]
    drops = [reason.drops for reason in declared if reason.drops is not None]
    assert drops and all(drop.check in CHECKS for drop in drops)
    checks = list(dict.fromkeys(drop.check for drop in drops))  # two reasons may drop for one check
    assert list(dropped(ORDER))[-len(checks):] == checks  # after the run's own, in flow order


def test_the_engines_name_no_stage():
    stage_modules = {f"pipeline.stages.{stage.name}" for stage in STAGES}
    modules = sorted((ROOT / "pipeline" / "engines").glob("*.py"))
    assert {path.stem for path in modules} >= {"__init__", "base", "pandas", "parts", "dask"}
    for path in modules:
        tree = ast.parse(path.read_text())
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not stage_modules & set(imported), path.name
        assert not {"pipeline.stages", "pipeline.kernel.stage"} & set(imported), path.name  # not the list, not the kernel


def test_schemas_never_import_pipeline():
    for path in sorted((ROOT / "schemas").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            assert not any(name.split(".")[0] == "pipeline" for name in names), path.name


class _Recording(PandasEngine):
    """A pandas engine that runs every chain link by link, keeping each stage's rows in and out."""

    def __init__(self) -> None:
        self.seen: list[tuple[pd.DataFrame, pd.DataFrame]] = []

    def chain(self, events, links, fits=()):
        frame = events
        for link in links:
            out = super().chain(frame, [link]).events
            self.seen.append((frame, out))
            frame = out
        return super().chain(events, links, fits)


@pytest.mark.parametrize("task", [None, "long_stay_3d"])
def test_each_stage_keeps_its_rows_and_columns_as_declared(sample_dir, task):
    """A stage declared ``filters=False`` hands on every row it takes, and one that declares ``writes`` adds or
    changes no other column (what lets a fit read the rows of a stage before it: ``Fit.early``), on the sample;
    with the default task (the task stage idle) and with one."""
    from pipeline.flow import validate

    engine, config = _Recording(), load_config(task=task)
    assert validate(sample_dir, config, engine=engine).exit_code == 0
    running = [stage for stage in PREPARE if not stage.idle_in(config)]
    assert len(engine.seen) == len(running) == len(PREPARE) - (task is None)
    for stage, (taken, given) in zip(running, engine.seen):
        if not stage.filters:
            assert given.index.equals(taken.index), stage.name
        if stage.writes is not None:
            assert set(given.columns) - set(taken.columns) <= set(stage.writes), stage.name
            kept = [column for column in given.columns if column in taken.columns and column not in stage.writes]
            pd.testing.assert_frame_equal(given[kept], taken.loc[given.index, kept], obj=stage.name)


def test_a_fit_read_ahead_is_the_fit_of_its_own_stages_rows(sample_dir):
    """The z-score fit is read from split's rows, before encode (``Fit.early``): it is the state fitted on the rows
    scale takes."""
    from pipeline.flow import validate
    from pipeline.stages.scale import fit_zscore

    config = load_config()
    engine = _Recording()
    validation = validate(sample_dir, config, engine=engine)
    running = [stage for stage in PREPARE if not stage.idle_in(config)]  # what the engine saw, in order
    scale = [n for n, stage in enumerate(running) if stage.name == "scale"][0]
    assert running[scale].fit.early
    options = config.scale
    assert validation.prepared.fitted.get("scale") == fit_zscore(
        engine.seen[scale][0], eps=options.eps, clip_sigma=options.clip_sigma, min_rows=options.min_rows,
        constant_bound=options.constant_bound, policy=options.policy, min_admissions=config.encode.min_admissions)


def test_each_declared_stage_has_a_colour_of_its_own():
    """The HTML report tells stages apart by colour: two stages of the list never share one."""
    colours = [stage.colour for stage in STAGES]
    assert len(set(colours)) == len(colours), colours
