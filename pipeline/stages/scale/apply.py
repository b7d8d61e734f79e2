"""The scale stage applied: z of every row from the fitted stats (guarded: finite, under the error bound), the
censored rows whose bound is off their item's scale set aside, and the findings it makes of the rows it names
(constant, fallback and unseen items, |z| above the warn bound, checked against each row's reference range where
LABEVENTS has one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import pandas as pd

from pipeline.reporting.findings import Finding, finding_from_mask, format_items, summary_finding
from pipeline.kernel.calls import reads
from pipeline.kernel.quarantine import Kept, set_aside
from pipeline.stages.scale.fit import ZScoreStats, _transformed, row_transforms
from pipeline.stages.scale.options import BOUNDED, NAME, Options
from schemas.encode import EncodedEvents
from schemas.errors import SAMPLE_CAP, StageError
from schemas.guard import guarded
from schemas.scale import ScaledEvents
from schemas.text import CENSORED

if TYPE_CHECKING:
    from pipeline.kernel.engine import Engine

# Optional per-row reference ranges of LABEVENTS (MIMIC-IV's ref_range_lower / ref_range_upper).
RANGE_COLUMNS = ("REF_RANGE_LOWER", "REF_RANGE_UPPER")
OFF_SCALE = "censored bound off its item's scale"  # the quarantine reason of off_scale's rows


def scaled(events: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float = Options.warn_bound,
           strict: bool = True) -> tuple[pd.Series, pd.Series, pd.Series]:
    """The z of each row with a number (NaN elsewhere), whether a bound changed it (Z_BOUNDED: the soft bound, a
    constant item's ``constant_bound``, a 'clip' item's ``warn_bound``), and the z before any bound (what the
    error bound is held against: a bound must not hide a unit error): each item's values
    through its transform, then (x - mean) / scale with train stats; items unseen in train or rare get 0; constant items
    are clipped at the stats' ``constant_bound``, 'clip' items at ``warn_bound``, and the items of a bounded
    policy bounded softly (:func:`soft_bound`). Nothing is checked but, when ``strict``, the log1p domain:
    :func:`apply_zscore` guards the result."""
    values = _transformed(events, *row_transforms(events["ITEMID"], stats), strict=strict)
    table = stats.table()
    mean, scale = events["ITEMID"].map(table["mean"]), events["ITEMID"].map(table["scale"])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = ((values - mean) / scale).where(mean.notna() & ~events["ITEMID"].isin(stats.rare_items_), 0.0)
    unbounded = z.where(values.notna())
    constant = events["ITEMID"].isin(stats.constant_items_)
    clipped = events["ITEMID"].isin(stats.items_where(stats.policies, ("clip",)))
    limit = pd.Series(np.where(constant, stats.constant_bound, np.where(clipped, warn_bound, np.inf)), index=z.index)
    cut = z.abs() > limit  # a constant item's other values, a 'clip' item's beyond the warning bound
    z = z.clip(-limit, limit)
    bounded = events["ITEMID"].isin(stats.items_where(stats.policies, BOUNDED)) & ~constant & values.notna()
    z, drawn = soft_bound(z, stats.bound, bounded)
    return z.where(values.notna()), (drawn | cut) & values.notna(), unbounded


def soft_bound(z: pd.Series, bound: float, rows: pd.Series) -> tuple[pd.Series, pd.Series]:
    """``z`` of ``rows`` drawn in under ``bound``: |z| up to k = bound / 2 as it is, beyond it
    sign(z) (k + k e / (e + k)) with e = |z| - k (continuous, smooth, strictly increasing, always below bound);
    and the rows it changed."""
    knee = bound / 2
    drawn = rows & (z.abs() > knee)
    excess = z.abs() - knee
    with np.errstate(invalid="ignore", over="ignore"):
        inside = np.sign(z) * (knee + knee * excess / (excess + knee))
    return z.where(~drawn, inside), drawn


@guarded(stage=NAME, takes=EncodedEvents, gives=ScaledEvents, optional=("VALUE", "CODE"))
def apply_zscore(events: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float = Options.warn_bound,
                 error_bound: float = Options.error_bound) -> pd.DataFrame:
    """Z for every row with a number from the fitted stats (:func:`scaled`), with two 0/1 marks: Z_BOUNDED (the
    bound drew it in) and Z_UNSEEN (its item has no training row, or is rare: Z = 0 carries no measurement). Every
    row is held to the error bound, a censored one too: in flow, :func:`scale_events` sets aside the censored rows
    off their item's scale first. A frame without VALUE and CODE (a frame of numbers) has no text and no category
    code, and comes back without them."""
    return _zscored(events, stats, warn_bound=warn_bound, error_bound=error_bound)


@guarded(stage=NAME, takes=EncodedEvents, gives=ScaledEvents)
def scale_events(events: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float = Options.warn_bound,
                 error_bound: float = Options.error_bound) -> Kept:
    """The stage's call: the censored rows whose bound is off their item's scale (:func:`off_scale`) set aside,
    then :func:`apply_zscore`'s z of the others."""
    kept = set_aside(events, [(OFF_SCALE, off_scale(events, stats, error_bound=error_bound))], stage=NAME,
                     columns={OFF_SCALE: "VALUENUM"})
    return Kept(frame=_zscored(kept.frame, stats, warn_bound=warn_bound, error_bound=error_bound),
                quarantine=kept.quarantine, steps=kept.steps)


def off_scale(events: pd.DataFrame, stats: ZScoreStats, *, error_bound: float = Options.error_bound) -> pd.Series:
    """The censored rows (Z_CENSORED -1 or +1) whose bound's z, before any bound, is beyond ``error_bound`` or not
    finite (below a 'log' item's domain): a detection limit that is no measurement on its item's scale ('<0.01' of
    an item whose values are near 1e6), which would otherwise stop the run as ``z_error_bound``."""
    censored = (events[CENSORED] != 0) & events["VALUENUM"].notna() if CENSORED in events else None
    if censored is None or not censored.any():
        return pd.Series(False, index=events.index)
    _, _, unbounded = scaled(events[censored.to_numpy(bool)], stats, strict=False)
    numbers = unbounded.to_numpy("float64", na_value=np.nan)
    off = pd.Series(~np.isfinite(numbers) | (np.abs(numbers) > error_bound), index=unbounded.index)
    return off.reindex(events.index, fill_value=False)


def _zscored(events: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float, error_bound: float) -> pd.DataFrame:
    """:func:`apply_zscore` of rows already guarded."""
    z, drawn, unbounded = scaled(events, stats, warn_bound=warn_bound)
    number = events["VALUENUM"].notna()
    nonfinite = number & pd.Series(~np.isfinite(unbounded.to_numpy("float64", na_value=np.nan)), index=z.index)
    _raise_if(nonfinite, events, "z_finite",
              "z-score that is inf or NaN", "Check the item's mean and scale in stats.json")
    _raise_if(unbounded.abs() > error_bound, events, "z_error_bound", f"|z| above the error bound {error_bound:g}",
              "Beyond any real measurement: the mark of a failed std guard or a unit error")
    unseen = number & (~events["ITEMID"].isin(stats.items_) | events["ITEMID"].isin(stats.rare_items_))
    return events.assign(Z=z.astype("float64"), Z_BOUNDED=drawn.astype("int8"), Z_UNSEEN=unseen.astype("int8"))


@reads("ITEMID", "Z_BOUNDED")
def bounded_counts(scaled_events: pd.DataFrame, stats: ZScoreStats) -> pd.Series:
    """Per fitted item (all of them, in order), how many rows of :func:`apply_zscore`'s output a bound changed
    (Z_BOUNDED): parts add up."""
    marked = scaled_events["Z_BOUNDED"].to_numpy() == 1
    counts = scaled_events.loc[marked, "ITEMID"].value_counts()
    return counts.reindex(pd.Index(stats.items_, dtype="int64", name="ITEMID"), fill_value=0).astype("int64")


def _raise_if(failed: pd.Series, events: pd.DataFrame, check: str, what: str, advice: str) -> None:
    failed = failed.fillna(False).astype(bool)
    if not failed.any():
        return
    items = events.loc[failed, "ITEMID"].value_counts().sort_index()
    listed = ", ".join(f"{item} ({n})" for item, n in items.head(10).items())
    raise StageError(
        stage=NAME, side="output", check=check, column="Z", count=int(failed.sum()),
        failure_cases=pd.DataFrame({"line": events.index[failed]}), table="LABEVENTS",
        detail=f"{what} for ITEMID {listed}", advice=advice,
    )


def reference_ranges(labevents: Any, lines: pd.Index | None = None, engine: Engine | None = None
                     ) -> pd.DataFrame | None:
    """The typed raw LABEVENTS' REF_RANGE_LOWER and REF_RANGE_UPPER (index = line), or None without them; with
    ``lines``, only those rows (read on the ``engine`` when LABEVENTS is held in its parts)."""
    if labevents is None or not set(RANGE_COLUMNS) <= set(labevents.columns):
        return None
    if lines is None:
        return labevents[list(RANGE_COLUMNS)]
    if engine is None:
        return _at_lines(labevents, lines)[list(RANGE_COLUMNS)]
    return engine.rows(labevents, _at_lines, lines, columns=list(RANGE_COLUMNS))


def _at_lines(frame: pd.DataFrame, lines: pd.Index) -> pd.DataFrame:
    return frame[frame.index.isin(lines)]


def range_classes(values: pd.Series, ranges: pd.DataFrame, *, range_widths: float) -> pd.Series:
    """Each row's value against its own reference range (``ranges`` indexed like ``values``): 'real extreme'
    when it lies more than ``range_widths`` range widths beyond the nearer bound, 'suspect scale' when it lies
    within that (or inside the range), 'no range' without a usable range.

    The width is upper - lower; with one bound (or lower = upper), the bound's magnitude.
    """
    lower = ranges["REF_RANGE_LOWER"].reindex(values.index).astype("float64")
    upper = ranges["REF_RANGE_UPPER"].reindex(values.index).astype("float64")
    width = (upper - lower).where(upper > lower)
    width = width.fillna(np.fmax(lower.abs(), upper.abs()).where(lambda w: w > 0))
    beyond = pd.Series(np.fmax(lower - values, values - upper), index=values.index)
    usable = width.notna() & beyond.notna() & values.notna()
    classes = np.where(beyond > range_widths * width, "real extreme", "suspect scale")
    return pd.Series(np.where(usable, classes, "no range"), index=values.index)


def scale_findings(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float, max_lines: int = SAMPLE_CAP,
                   ranges: pd.DataFrame | None = None, range_widths: float = Options.range_widths,
                   names: Mapping[int, str] | None = None, bounded: pd.Series | None = None) -> list[Finding]:
    """Constant, fallback and unseen items, values of constant items other than their one value, and |z| above
    the warning bound, named by ITEMID (with ``names`` from :func:`pipeline.reporting.report.item_names`, at most
    ``max_lines`` of them) and the rule that scaled each item; with ``ranges`` (REF_RANGE_LOWER and
    REF_RANGE_UPPER by line), the rows above the bound are counted as real extremes or suspect scales; with
    ``bounded`` (:func:`bounded_counts` of all the rows), the rows the bound drew in, per item."""
    findings = [] if bounded is None else _bounded_finding(bounded, stats, names=names, max_lines=max_lines)
    unseen, beyond, off_constant = _named(scaled, stats, warn_bound=warn_bound)
    table = stats.table()

    def counted(mask: pd.Series) -> pd.Series:  # rows per item, ties by ITEMID
        return scaled.loc[mask, "ITEMID"].value_counts().sort_index()

    def items_of(mask: pd.Series, why: Callable[[int], str] | None = None) -> str:
        return format_items(counted(mask), names=names, why=why)

    findings += _item_sets(stats, table, names=names)
    fallback = stats.fallback_items_
    if fallback:
        reasons = table.loc[list(fallback)].assign(WHY=[_fallback_reason(table, i, stats.min_rows) for i in fallback])
        groups = "; ".join(f"{why}: ITEMID " + format_items(group["count"], names=names, unit="fitted row")
                           for why, group in reasons.groupby("WHY", sort=True))
        findings.append(summary_finding(
            stage=NAME, check="fallback_item", table="LABEVENTS", column="VALUENUM", count=len(fallback),
            message=f"{len(fallback)} item(s) scaled on all their training rows ([scale] min_rows "
                    f"{stats.min_rows}): {groups}", items=reasons["count"]))
    findings.append(finding_from_mask(stage=NAME, table="LABEVENTS", check="unseen_item", column="ITEMID",
                                      failed=unseen, what=f"numeric items unseen in train: ITEMID {items_of(unseen)}",
                                      max_lines=max_lines, items=counted(unseen)))
    findings.append(finding_from_mask(
        stage=NAME, table="LABEVENTS", check="constant_item_value", column="VALUENUM", failed=off_constant,
        what=f"a value other than their item's one training value (|z| at most {stats.constant_bound:g}): "
             f"ITEMID {items_of(off_constant)}", max_lines=max_lines, items=counted(off_constant)))
    against = ""
    if ranges is not None and beyond.any():
        classes = range_classes(scaled.loc[beyond, "VALUENUM"], ranges, range_widths=range_widths)
        counts = classes.value_counts()
        suspect = scaled.loc[classes.index[classes == "suspect scale"], "ITEMID"].value_counts().sort_index()
        against = (f"; against each row's own reference range: {counts.get('real extreme', 0)} real extreme(s) (more "
                   f"than {range_widths:g} range widths beyond the nearer bound), {counts.get('suspect scale', 0)} "
                   f"suspect scale(s) (within {range_widths:g} widths: the item's scale is likely too small"
                   + (f", ITEMID {format_items(suspect, names=names)}" if len(suspect) else "")
                   + f"), {counts.get('no range', 0)} without a range")
    findings.append(finding_from_mask(
        stage=NAME, table="LABEVENTS", check="z_warn_bound", column="Z", failed=beyond, max_lines=max_lines,
        what=f"|z| > {warn_bound:g}: ITEMID {items_of(beyond, lambda item: _cause(table, item, stats.min_rows))}"
             f"{against}", items=counted(beyond)))
    return [f for f in findings if f is not None]


def _item_sets(stats: ZScoreStats, table: pd.DataFrame, *, names: Mapping[int, str] | None) -> list[Finding]:
    """The constant items and the rare ones, each listed by training rows, the most first (ties by ITEMID): an
    item constant over many rows matters more than one row."""
    findings = []
    for check, items, what in (
            ("constant_item", stats.constant_items_, "whose training values are all equal"),
            ("rare_item", stats.rare_items_, f"seen in fewer than {stats.min_admissions} training admissions, kept "
                                             "out of stats.json and given z = 0 (Z_UNSEEN = 1)")):
        if items:
            counts = table.loc[sorted(items), "count"].sort_values(ascending=False, kind="stable")
            findings.append(summary_finding(
                stage=NAME, check=check, table="LABEVENTS", column="VALUENUM", count=len(items), items=counts,
                message=f"{len(items)} item(s) {what}: ITEMID {format_items(counts, names=names, unit='train row')}"))
    return findings


def _bounded_finding(bounded: pd.Series, stats: ZScoreStats, *, names: Mapping[int, str] | None,
                     max_lines: int) -> list[Finding]:
    """How many rows the bound drew in, per item, most first (ties by ITEMID)."""
    counts = bounded[bounded > 0].sort_index().sort_values(ascending=False, kind="stable")
    if counts.empty:
        return []
    total = int(counts.sum())
    return [summary_finding(
        stage=NAME, check="z_bounded", table="LABEVENTS", column="Z", count=total,
        message=f"{total} value(s) of {len(counts)} item(s) changed by a bound (beyond |z| {stats.bound / 2:g} "
                f"drawn in under [scale] bound {stats.bound:g}, order kept; a constant item's other values at "
                f"constant_bound {stats.constant_bound:g}), each marked Z_BOUNDED = 1 in edge_attr: ITEMID "
                f"{format_items(counts, names=names)}", items=counts)]


def _rows(n: int, what: str = "row") -> str:
    return f"{int(n)} {what}{'s' if int(n) != 1 else ''}"


def _fallback_reason(table: pd.DataFrame, item: int, min_rows: int) -> str:
    """Why an item was scaled on all its training rows."""
    normal = int(table.loc[item, "normal_count"])
    if normal == 0:
        why = "no normal rows"
    elif normal < min_rows:
        why = f"only {_rows(normal, 'normal row')}"
    else:
        why = "normal rows without spread"
    return why + (" and clipping left no spread (unclipped)" if table.loc[item, "rule"] == "all_unclipped" else "")


def _cause(table: pd.DataFrame, item: int, min_rows: int) -> str:
    """What a |z| above the warning bound means for an item, from the rule that scaled it."""
    rule, count = table.loc[item, "rule"], int(table.loc[item, "count"])
    if rule == "normal":
        return f"heavy tail on an item fitted on {_rows(count, 'normal row')}: real; 'clip' or 'log' bounds it"
    if rule == "constant":
        return "constant item"
    return (f"scaled on all its training rows ({count} fitted) because {_fallback_reason(table, item, min_rows)}: "
            "relative to the spread of the abnormal values, which is real")


@reads("VALUENUM", "ITEMID", "Z")


def reported_rows(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> pd.DataFrame:
    """The rows :func:`scale_findings` names (numeric items unseen in train, values of constant items other than
    their own, |z| above ``warn_bound``) and the columns it reads: its findings from these rows, in their order,
    are its findings from all the rows."""
    unseen, beyond, off_constant = _named(scaled, stats, warn_bound=warn_bound)
    return scaled.loc[unseen | beyond | off_constant, ["ITEMID", "VALUENUM", "Z"]]


def _named(scaled: pd.DataFrame, stats: ZScoreStats, *, warn_bound: float) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Rows of numeric items unseen in train, rows with |z| above ``warn_bound``, and rows of constant items whose
    value is not the item's one training value (z is 0 exactly on it)."""
    unseen = scaled["VALUENUM"].notna() & ~scaled["ITEMID"].isin(stats.items_)
    off_constant = scaled["ITEMID"].isin(stats.constant_items_) & scaled["Z"].notna() & (scaled["Z"] != 0)
    return unseen, scaled["Z"].abs() > warn_bound, off_constant
