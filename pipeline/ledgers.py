"""The run's ledgers: what the stages made (:class:`Prepared`), LABEVENTS rows read = kept + quarantined +
deduplicated, every ADMISSIONS row's fate (in the graphs, or the check that says why not), and the findings they
make. Stages say which admissions they leave out through their declared reasons (:attr:`pipeline.kernel.stage.Reason.drops`);
nothing here names a stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from pipeline.engines import PANDAS, Engine
from pipeline.reporting.findings import LISTED, Finding, finding_from_mask, format_items, summary_finding
from pipeline.reading.parse import RawTables
from pipeline.kernel.calls import Events
from pipeline.kernel.quarantine import Kept, Quarantine, Step
from pipeline.kernel.stage import Order
from schemas.errors import StageError
from schemas.split import SPLITS

IN_GRAPHS = "in_graphs"
UNSPLIT = "unsplit"  # admissions rejected before the split have none
LABS_QUARANTINED = "admission_labs_quarantined"
# Why an admission read from ADMISSIONS is in no graph, whatever the stages: the check that reports it and what it
# says of them (the stages' own drops follow, in flow order).
RUN_DROPS = {
    "admission_rejected": "failed a raw check",
    "admission_no_labs": "without any lab row",
    LABS_QUARANTINED: "whose every lab row was quarantined",
}


class Ledger:
    """What the stages hand back besides their rows (the kernel's :class:`pipeline.kernel.stage.Ledger`):
    quarantines, steps, findings and the lab items' names.

    It outlives a stage that stops the run, so everything found until then is reported. An empty step is a
    :class:`StageError`; a step that removes more than the ``[filters]`` fractions, a finding.
    """

    def __init__(self, *, warn_removed_fraction: float, error_removed_fraction: float) -> None:
        self.warn_removed_fraction = warn_removed_fraction
        self.error_removed_fraction = error_removed_fraction
        self.quarantines: list[pd.DataFrame] = []
        self.steps: list[Step] = []
        self.findings: list[Finding] = []
        self.names: dict[int, str] = {}  # how findings name lab items: '50963 NTproBNP (Blood)'

    def take(self, kept: Kept) -> Events:
        self.quarantines.append(kept.quarantine)
        self.steps.extend(kept.steps)
        for step in kept.steps:
            self._judge(step)
        return kept.frame

    def _judge(self, step: Step) -> None:
        if step.rows_in == 0:
            return
        removed = (step.rows_in - step.rows_out) / step.rows_in
        where = f"{step.stage} step '{step.step}'"
        if step.rows_out == 0:
            raise StageError(stage=step.stage, side="output", check="step_empty", column=step.column,
                             count=step.rows_in,
                             failure_cases=pd.DataFrame({"line": []}), table=step.table,
                             detail=f"{where} removed all {step.rows_in} rows",
                             advice="Nothing would reach the graphs; check the inputs and this step's settings")
        if step.planned:
            return
        check = ("step_removed_nearly_all" if removed > self.error_removed_fraction
                 else "step_removed_most" if removed > self.warn_removed_fraction else None)
        if check:
            self.findings.append(summary_finding(
                stage=step.stage, check=check, table=step.table, column=step.column,
                count=step.rows_in - step.rows_out,
                message=f"{where} removed {removed:.1%} of its {step.rows_in} rows"))


def dropped(order: Order) -> dict[str, str]:
    """Every reason an admission is in no graph, by the check that reports it: the run's, then the stages'."""
    return {**RUN_DROPS, **{reason.drops.check: reason.drops.what for reason in order.reasons.values()
                            if reason.drops is not None}}


@dataclass(frozen=True)
class Prepared:
    """What the stages made: edge rows, encoded node tables, fitted state, quarantine and ledger."""

    edges: pd.DataFrame | None = None
    admissions: pd.DataFrame | None = None
    labitems: pd.DataFrame | None = None
    splits: pd.DataFrame | None = None
    fitted: Mapping[str, Any] = field(default_factory=dict)  # by stage name: what each stage's Fit learned
    quarantine: Quarantine = field(default_factory=Quarantine)
    steps: tuple[Step, ...] = ()
    findings: tuple[Finding, ...] = ()
    stopped_at: str | None = None
    read: int = 0
    fates: pd.DataFrame | None = None  # per ADMISSIONS line: HADM_ID, SPLIT, FATE (in_graphs or a dropped() check)
    ledgers: Mapping[str, dict] = field(default_factory=dict)  # the stages' own ledgers (Stage.closes), by stage
    order: Order = field(default_factory=lambda: Order(()))  # the run's stages, in the report's order

    def saved_state(self) -> dict[str, Any]:
        """The fitted state as JSON, by the name each stage's Fit saves it under (``stats.json``)."""
        return {stage.fit.saved_as: self.fitted[stage.name].as_json() for stage in self.order.stages
                if stage.fit is not None and stage.name in self.fitted}

    def state_of(self, kind: type) -> Any:
        """The fitted state of the kind ``kind`` (a stage's :attr:`Fit.state`: ``ZScoreStats``), None when no
        stage fitted one: how a later stage or a build target reads an earlier stage's fit."""
        return next((state for state in self.fitted.values() if isinstance(state, kind)), None)

    def ledger(self) -> dict[str, int]:
        """LABEVENTS rows read = kept + quarantined + deduplicated."""
        quarantined = self.quarantine.count("LABEVENTS")
        merged = sum(step.merged for step in self.steps if step.table == "LABEVENTS")
        kept = 0 if self.edges is None else len(self.edges)
        return {"read": self.read, "kept": kept, "quarantined": quarantined, "deduplicated": merged}

    def admission_ledger(self) -> dict | None:
        """ADMISSIONS read = in graphs + dropped, per split and per reason (None when the stages did not finish)."""
        if self.fates is None:
            return None
        fates, reasons = self.fates, dropped(self.order)

        def count(rows: pd.DataFrame) -> dict:
            fate = rows["FATE"].value_counts()
            return {"read": len(rows), IN_GRAPHS: int(fate.get(IN_GRAPHS, 0)),
                    "dropped": int(len(rows) - fate.get(IN_GRAPHS, 0)),
                    "dropped_by": {check: int(fate.get(check, 0)) for check in reasons}}

        splits = [name for name in (*SPLITS, UNSPLIT) if name != UNSPLIT or (fates["SPLIT"] == UNSPLIT).any()]
        emptied = fates.loc[fates["FATE"] == LABS_QUARANTINED, "STAGE"].value_counts()
        # Every admission in no graph, named (the findings list the first few): source line, HADM_ID, split, the
        # reason and, for one whose lab rows were all quarantined, the stage that took the last of them.
        left_out = fates[fates["FATE"] != IN_GRAPHS].rename_axis("line").reset_index().rename(
            columns={"SPLIT": "split", "FATE": "reason", "STAGE": "stage"})[["line", "HADM_ID", "split", "reason",
                                                                            "stage"]]
        return {**count(fates), "splits": {name: count(fates[fates["SPLIT"] == name]) for name in splits},
                "labs_quarantined_at": {stage: int(n) for stage, n in sorted(emptied.items(),
                                                                            key=lambda kv: self.order.index[kv[0]])},
                "dropped_admissions": left_out.astype(object).where(left_out.notna(), None).to_dict("records")}

    def attrition(self) -> dict:
        """The ledgers and every step's rows in and out, as plain JSON."""
        admissions = self.admission_ledger()
        return {
            "LABEVENTS": self.ledger(),
            **({"ADMISSIONS": admissions} if admissions is not None else {}),
            **dict(self.ledgers),
            "stopped_at": self.stopped_at,
            "steps": [step.as_json() for step in self.steps],
        }


def admission_fates(tables: RawTables, prepared: Prepared, *, engine: Engine = PANDAS) -> pd.DataFrame:
    """Per ADMISSIONS row (index = source line): HADM_ID, SPLIT and FATE, ``in_graphs`` or the check that says
    why it is in no graph; for admissions whose labs were all quarantined, STAGE: the stage that took the last.

    In graphs means having an edge row: the graph stage makes one admission node per HADM_ID among the edges.
    """
    admissions = tables.admissions
    hadm = admissions["HADM_ID"]
    split = hadm.map(prepared.splits.set_index("HADM_ID")["SPLIT"]).astype("object")
    rejected = admissions["REJECT"].notna() if "REJECT" in admissions else pd.Series(False, index=admissions.index)
    split = split.where(~rejected & split.notna(), UNSPLIT)
    lab_rows = engine.rows(tables.labevents, _admissions_of, columns=["HADM_ID"])["HADM_ID"].dropna().unique()
    edges = engine.rows(prepared.edges, _admissions_of, columns=["HADM_ID"])["HADM_ID"].unique()
    reasons = prepared.quarantine.by_reason()
    # A stage's own reasons, the latest stage's first: an admission whose rows two stages set aside for reasons that
    # drop it (a task's window, then dedup's timesteps) is dropped for the later one, which took its last rows.
    drops = [(text, reason.drops.check) for text, reason in reversed(prepared.order.reasons.items()) if reason.drops]
    dropped_by = [hadm.isin(np.concatenate([np.array([], dtype="int64"), *(
        s.admissions for (table, _, why), s in reasons.items() if table == "LABEVENTS" and why == text)])).to_numpy()
        for text, _ in drops]  # admissions a stage leaves out for a reason of its own (dedup: too few timesteps)
    fate = np.select([rejected.to_numpy(), hadm.isin(edges).to_numpy(), ~hadm.isin(lab_rows).to_numpy(), *dropped_by],
                     ["admission_rejected", IN_GRAPHS, "admission_no_labs", *(check for _, check in drops)],
                     default=LABS_QUARANTINED)
    # The stage that took an admission's last lab rows: the latest stage that quarantined any of them (read only
    # when some admission's labs were all quarantined: most runs have none, and millions of records).
    quarantined = hadm[fate == LABS_QUARANTINED].dropna().to_numpy("int64")
    latest = pd.Series(dtype="int64")  # folded frame by frame: one number per admission, not per frame
    for records in prepared.quarantine.frames(["TABLE", "STAGE", "HADM_ID"]) if len(quarantined) else ():
        records = records[(records["TABLE"] == "LABEVENTS") & records["HADM_ID"].isin(quarantined)]
        order = records["STAGE"].map(prepared.order.index).groupby(records["HADM_ID"]).max()
        latest = order if latest.empty else pd.concat([latest, order]).groupby(level=0).max()
    last = latest.map(dict(enumerate(prepared.order.names)))
    stage = hadm.map(last).where(fate == LABS_QUARANTINED)
    return pd.DataFrame({"HADM_ID": hadm.astype("Int64"), "SPLIT": split.astype("str"), "FATE": fate,
                         "STAGE": stage.astype("object")}, index=admissions.index)


def _admissions_of(labevents: pd.DataFrame) -> pd.DataFrame:
    """The first row of each admission (HADM_ID) among ``labevents``."""
    return labevents[~labevents["HADM_ID"].duplicated()]


def admission_findings(prepared: Prepared, *, max_lines: int) -> list[Finding]:
    """One finding per reason an admission is in no graph: its count per split and its first HADM_IDs."""
    if prepared.fates is None:
        return []
    findings = []
    cap = max_lines
    for check, what in dropped(prepared.order).items():
        rows = prepared.fates[prepared.fates["FATE"] == check]
        if rows.empty:
            continue
        per_split = rows["SPLIT"].value_counts()
        splits = ", ".join(f"{name} {int(per_split.get(name, 0))}" for name in (*SPLITS, UNSPLIT)
                           if name != UNSPLIT or name in per_split)
        stages = ""
        if check == LABS_QUARANTINED:
            taken = rows["STAGE"].value_counts()
            stages = "; the stage that set aside their last lab rows: " + ", ".join(
                f"{stage} ({int(taken[stage])} admission{'s' if int(taken[stage]) != 1 else ''})"
                for stage in sorted(taken.index, key=prepared.order.index.get))
        ids = rows["HADM_ID"].dropna().astype("int64").sort_values()
        shown = ", ".join(map(str, ids[:LISTED])) + (f" +{len(ids) - LISTED} more in the JSON report's "
                                                     f"attrition.ADMISSIONS.dropped_admissions"
                                                     if len(ids) > LISTED else "")
        noun = "admission" if len(rows) == 1 else "admissions"
        findings.append(summary_finding(
            stage="flow", check=check, table="ADMISSIONS", column=None, count=len(rows),
            lines=[int(line) for line in rows.index[:cap]],
            message=f"{len(rows)} {noun} {what}, in no graph ({splits}){stages}; HADM_ID {shown or '-'}"))
    return findings


def quarantine_findings(quarantine: Quarantine, order: Order, *, max_lines: int, names: dict[int, str] | None = None
                        ) -> list[Finding]:
    """One finding per quarantine reason, with the first source lines (LABEVENTS rows); items named."""
    findings = []
    for (table, stage, reason), rows in quarantine.by_reason(lines=max_lines).items():
        items, listed = "", None
        declared = order.reasons.get(reason)
        check = declared.check if declared is not None else "quarantine_raw_error"
        if declared is not None and declared.per_item:
            items, listed = ": items " + format_items(rows.items, names=names), rows.items
        if declared is not None and declared.per_admission:
            n = len(rows.admissions)
            items = f", in {n} admission{'s' if n != 1 else ''}"
        failed = pd.Series(True, index=rows.lines)
        findings.append(finding_from_mask(stage=stage, table=table, check=check, column=None, failed=failed,
                                          verb="quarantined:", what=f"{reason}{items}",
                                          max_lines=max_lines, count=rows.rows, items=listed))
    return [f for f in findings if f is not None]


def attrition_finding(prepared: Prepared) -> Finding:
    ledger = prepared.ledger()
    funnel = " -> ".join(f"{s.stage}/{s.step}: {s.rows_out}" for s in prepared.steps
                         if s.table == "LABEVENTS" and (s.quarantined or s.merged))
    sizes = ""
    admissions = prepared.admission_ledger()
    if admissions is not None:
        splits = admissions["splits"]
        sizes = ("; admissions in graphs per split: "
                 + ", ".join(f"{name} {splits[name][IN_GRAPHS]}" for name in SPLITS)
                 + f"; ADMISSIONS read {admissions['read']} = in graphs {admissions[IN_GRAPHS]} + dropped "
                 + f"{admissions['dropped']}"
                 + "".join(f" ({n} {check})" for check, n in admissions["dropped_by"].items() if n))
    stopped = f"; stopped at stage {prepared.stopped_at}" if prepared.stopped_at else ""
    return summary_finding(
        stage="flow", check="attrition", table="LABEVENTS", column=None, count=ledger["read"],
        message=f"read {ledger['read']} = kept {ledger['kept']} + quarantined {ledger['quarantined']} + "
                f"deduplicated {ledger['deduplicated']}{stopped}{sizes}; funnel: {funnel or 'no rows removed'}")


def check_built(made: tuple[dict, ...], accounting: Mapping[str, dict], *, rows: str = "edges") -> None:
    """What a build made (graphs, or MEDS shards: per entry its split, admissions and ``rows``) holds every kept row
    and every admission the ledgers count in graphs (else a bug in badpoints)."""
    held = sum(entry[rows] for entry in made)
    kept = accounting["LABEVENTS"]["kept"]
    if held != kept:
        raise RuntimeError(f"the build holds {held} lab rows but {kept} rows were kept")
    admissions = accounting["ADMISSIONS"]
    nodes = {name: sum(entry["admissions"] for entry in made if entry["split"] == name) for name in SPLITS}
    counted = {name: admissions["splits"][name][IN_GRAPHS] for name in SPLITS}
    if nodes != counted:
        raise RuntimeError(f"the build holds admissions {nodes} per split but the ledger counted {counted}")
