"""LABEVENTS, one chunk of whole subjects at a time: specimen draws, their items, values, tokens and flags, vectorized
and formatted with pyarrow compute (no Python loop over rows)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from bench.synth.shape import DELTA_SHARE, DRAW_SIZE, EPOCH, FLAGS, MINUTES_PER_DAY, REPICK_ROUNDS, SINGLE_ITEMS, Shape
from bench.synth.tables import Items


@dataclass(frozen=True)
class Rows:
    """A chunk's lab rows before their values, sorted by (SUBJECT_ID, minute, ITEMID): one array per field."""

    subject: np.ndarray
    hadm: np.ndarray  # 0 for outpatient rows
    outpatient: np.ndarray
    minute: np.ndarray  # minutes after EPOCH
    item: np.ndarray  # row of the item table
    draw: np.ndarray  # specimen draw, numbered from 0 in the chunk


def chunk_events(rng: np.random.Generator, items: Items, adm: pd.DataFrame, subjects: pd.DataFrame, first_row: int,
                 inject_single: bool, *, draws: bool = False, shape: Shape = Shape()) -> pa.Table:
    """LABEVENTS rows of the given admissions and subjects, sorted by (SUBJECT_ID, CHARTTIME, ITEMID), spread as
    ``shape`` says (draws outside the stay, repeated items; its outpatient share is in the admissions' ROWS).

    With ``draws``, two more columns: ``_DRAW`` (the row's specimen draw, numbered from 0 in this chunk)
    and ``_ITEM`` (its row of the item table), for :func:`bench.synth.mimic4.labevents`; they take nothing
    from ``rng``.
    """
    rows = _rows(rng, items, adm, subjects, inject_single, shape)
    value, dec, abnormal = _numbers(rng, items.table, rows.item)
    token, flag = _tokens_and_flags(rng, items, rows.item, abnormal)
    return _labevents_table(items, rows, value, dec, token, flag, first_row=first_row, draws=draws)


def _rows(rng: np.random.Generator, items: Items, adm: pd.DataFrame, subjects: pd.DataFrame,
          inject_single: bool, shape: Shape) -> Rows:
    """The admissions' and the subjects' outpatient rows, each with its draw's minute and its item; with
    ``inject_single``, the single-observation items on three inpatient rows."""
    in_subject, in_hadm, in_time, draw, n_draws = _inpatient_rows(rng, adm, shape)
    out_subject, out_time, out_draw = _outpatient_rows(rng, subjects)
    subject = np.concatenate([in_subject, out_subject])
    hadm = np.concatenate([in_hadm, np.zeros(len(out_subject), dtype=np.int64)])
    outpatient = np.concatenate([np.zeros(len(in_hadm), dtype=bool), np.ones(len(out_subject), dtype=bool)])
    minute = np.concatenate([in_time, out_time])
    draw_key = np.concatenate([draw, n_draws + out_draw])
    item = _items_for_draws(rng, items.cdf, draw_key)
    if shape.repeat_share > 0:  # draws nothing from rng otherwise: the default shape's bytes are as before
        item[:len(in_hadm)] = _repeated_items(rng, item[:len(in_hadm)], in_hadm, in_time, shape.repeat_share)
    if inject_single and len(in_hadm) >= SINGLE_ITEMS:
        singles = np.flatnonzero(items.table["ITEMID"].isin(items.special["single_observation"]).to_numpy())
        item[rng.choice(len(in_hadm), SINGLE_ITEMS, replace=False)] = singles
    order = np.lexsort((items.table["ITEMID"].to_numpy()[item], minute, subject))
    return Rows(subject=subject[order], hadm=hadm[order], outpatient=outpatient[order], minute=minute[order],
                item=item[order], draw=draw_key[order])


def _inpatient_rows(rng: np.random.Generator, adm: pd.DataFrame, shape: Shape
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Per row of the admissions: SUBJECT_ID, HADM_ID, minute and draw; and how many draws. Some draws (``shape``'s
    shares) are charted 2-48 h before ADMITTIME or 1-72 h after DISCHTIME."""
    day = MINUTES_PER_DAY
    admit, disch = adm["ADMIT"].to_numpy(), adm["DISCH"].to_numpy()
    owner, draw, draw_time, draw_owner = _draw_rows(rng, adm["ROWS"].to_numpy(), admit, disch - admit)
    n_draws = len(draw_time)
    moved = rng.random(n_draws)
    early, late = moved < shape.early_draw_share, moved > 1 - shape.late_draw_share
    draw_time = np.where(early, admit[draw_owner] - rng.integers(2 * 60, 2 * day, n_draws), draw_time)
    draw_time = np.where(late, disch[draw_owner] + rng.integers(60, 3 * day, n_draws), draw_time)
    return adm["SUBJECT_ID"].to_numpy()[owner], adm["HADM_ID"].to_numpy()[owner], draw_time[draw], draw, n_draws


def _outpatient_rows(rng: np.random.Generator, subjects: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per outpatient row: SUBJECT_ID, minute and draw (numbered from 0). Visits lie 7-365 days before the
    subject's first stay, or after the last one (not for those who died)."""
    day = MINUTES_PER_DAY
    out_rows = subjects["OUT_ROWS"].to_numpy()
    after = (rng.random(len(subjects)) < 0.4) & ~subjects["DIED"].to_numpy()
    away = rng.integers(7 * day, 365 * day, len(subjects))
    start = np.where(after, subjects["LAST"].to_numpy() + away, subjects["FIRST"].to_numpy() - away)
    owner, draw, draw_time, _ = _draw_rows(rng, out_rows, start, np.full(len(subjects), 180 * day))
    return subjects["SUBJECT_ID"].to_numpy()[owner], draw_time[draw], draw


def _draw_rows(rng: np.random.Generator, n_rows: np.ndarray, start: np.ndarray, span: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Specimen draws of each owner (admission or subject) and the rows that share them.

    Returns per row its owner and its draw, and per draw its minute (uniform in [start, start + span])
    and its owner.
    """
    draws = np.maximum(1, np.round(n_rows / DRAW_SIZE)).astype(np.int64)
    draws[n_rows == 0] = 0
    owner_of_draw = np.repeat(np.arange(len(n_rows)), draws)
    draw_time = start[owner_of_draw] + (rng.random(len(owner_of_draw)) * span[owner_of_draw]).astype(np.int64)
    first = np.cumsum(draws) - draws
    owner = np.repeat(np.arange(len(n_rows)), n_rows)
    draw = first[owner] + (rng.random(len(owner)) * draws[owner]).astype(np.int64)
    return owner, draw, draw_time, owner_of_draw


def _items_for_draws(rng: np.random.Generator, cdf: np.ndarray, draw: np.ndarray) -> np.ndarray:
    """Item (row of the item table) per row; an item repeated within a draw is re-drawn a few times."""
    item = np.searchsorted(cdf, rng.random(len(draw)), side="right")  # u < 1 = cdf[-1]: never past the end
    for _ in range(REPICK_ROUNDS):
        order = np.lexsort((item, draw))
        repeated = np.zeros(len(draw), dtype=bool)
        repeated[order[1:]] = (draw[order[1:]] == draw[order[:-1]]) & (item[order[1:]] == item[order[:-1]])
        if not repeated.any():
            break
        item[repeated] = np.searchsorted(cdf, rng.random(int(repeated.sum())), side="right")
    return item


def _repeated_items(rng: np.random.Generator, item: np.ndarray, hadm: np.ndarray, minute: np.ndarray,
                    share: float) -> np.ndarray:
    """``item`` with ``share`` of the rows made repeats: a repeat takes the item of a row of its admission and
    calendar day (the same timestep at [bucket] interval_hours 24) that is no repeat, drawn at random, as a lab
    ordered again that day; dedup merges it. A day of repeats only keeps its items."""
    repeat = rng.random(len(item)) < share
    day = minute // MINUTES_PER_DAY
    order = np.lexsort((repeat, day, hadm))  # per admission and day, the rows kept first, then the repeats
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = (hadm[order][1:] != hadm[order][:-1]) | (day[order][1:] != day[order][:-1])
    first = np.flatnonzero(starts)
    group = np.cumsum(starts) - 1
    kept = np.add.reduceat(~repeat[order], first) if len(first) else np.zeros(0, dtype=np.int64)
    source = first[group] + (rng.random(len(order)) * kept[group]).astype(np.int64)
    taken = repeat[order] & (kept[group] > 0)
    repeated = item.copy()
    repeated[order[taken]] = item[order[source[taken]]]
    return repeated


def fixed(values: np.ndarray, dec: np.ndarray) -> pa.Array:
    """Numbers as text with a fixed number of decimals per row ('%.{dec}f'), without a Python loop."""
    scale = 10 ** dec.astype(np.int64)
    units = np.rint(values * scale).astype(np.int64)
    sign = pa.array(np.where(units < 0, "-", ""))
    magnitude = np.abs(units)
    whole = pa.array(magnitude // scale).cast(pa.string())
    text = whole
    for d in np.unique(dec[dec > 0]).astype(int):
        frac = pc.utf8_lpad(pa.array(magnitude % scale).cast(pa.string()), d, "0")
        text = pc.if_else(pa.array(dec == d), pc.binary_join_element_wise(whole, frac, "."), text)
    return pc.binary_join_element_wise(sign, text, "")


def _numbers(rng: np.random.Generator, table: pd.DataFrame, item: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's number drawn from its item's distribution and rounded to its decimals, the decimals, and
    whether the number lies outside the item's reference range."""
    dist = table["DIST"].to_numpy()[item]
    center = table["CENTER"].to_numpy(float)[item]
    spread = table["SPREAD"].to_numpy(float)[item]
    dec = table["DEC"].to_numpy(float)[item].astype(np.int64)
    z = np.clip(rng.standard_normal(len(item)), -3.2, 3.2)
    value = np.where(dist == "lognorm", center * np.exp(spread * np.where(dist == "lognorm", z, 0.0)),
                     center + spread * z)
    value = np.where(dist == "constant", center, value)
    floor = 10.0 ** -dec
    value = np.where(table["LO"].to_numpy(float)[item] >= 0, np.maximum(value, floor), value)
    value = np.rint(value * 10.0 ** dec) / 10.0 ** dec + 0.0
    abnormal = (value < table["LO"].to_numpy(float)[item]) | (value > table["HI"].to_numpy(float)[item])
    return value, dec, abnormal


def _tokens_and_flags(rng: np.random.Generator, items: Items, item: np.ndarray, abnormal: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's token (row of the token table, -1 for a number) and FLAG (index into FLAGS, -1 for none):
    'abnormal' outside the range or on an abnormal token, 'delta' on a few normal numbers of non-constant items."""
    token = _tokens(rng, items, item)
    is_token = token >= 0
    abnormal = np.where(is_token, items.tokens["ABNORMAL"].to_numpy(bool)[np.maximum(token, 0)], abnormal)
    varies = items.table["DIST"].to_numpy()[item] != "constant"
    delta = ~abnormal & ~is_token & varies & (rng.random(len(item)) < DELTA_SHARE)
    return token, np.where(abnormal, 0, np.where(delta, 1, -1))


def _tokens(rng: np.random.Generator, items: Items, item: np.ndarray) -> np.ndarray:
    """Row of the token table for rows drawn as text, -1 for numbers (one searchsorted, no merge)."""
    tokens = items.tokens
    bound = tokens["ITEM"].to_numpy() * 100.0 + tokens.groupby("ITEM")["PCT"].cumsum().to_numpy()
    key = item * 100.0 + 100.0 * rng.random(len(item))
    hit = np.searchsorted(bound, key, side="right")
    inside = hit < len(bound)
    hit = np.minimum(hit, len(bound) - 1)
    return np.where(inside & (tokens["ITEM"].to_numpy()[hit] == item), hit, -1)


def _labevents_table(items: Items, rows: Rows, value: np.ndarray, dec: np.ndarray, token: np.ndarray,
                     flag: np.ndarray, *, first_row: int, draws: bool) -> pa.Table:
    """The LABEVENTS columns as text where MIMIC writes text (numbers at their item's decimals, times)."""
    table, tokens = items.table, items.tokens
    item = rows.item
    number = fixed(value, dec)
    token_value = pa.array(tokens["VALUE"], pa.string(), from_pandas=True).take(pa.array(np.maximum(token, 0)))
    token_num = pa.array(tokens["VALUENUM"], pa.string(), from_pandas=True).take(pa.array(np.maximum(token, 0)))
    token_mask = pa.array(token >= 0)
    minutes = pa.array((rows.minute + int(EPOCH.value // 60_000_000_000)) * 60).cast(pa.timestamp("s"))
    extra = {"_DRAW": pa.array(rows.draw.astype(np.int64)), "_ITEM": pa.array(item.astype(np.int64))} if draws else {}
    return pa.table({
        "ROW_ID": pa.array(np.arange(first_row, first_row + len(item), dtype=np.int64)),
        "SUBJECT_ID": pa.array(rows.subject.astype(np.int64)),
        "HADM_ID": pa.array(rows.hadm.astype(np.int64), mask=rows.outpatient),
        "ITEMID": pa.array(table["ITEMID"].to_numpy(np.int64)[item]),
        "CHARTTIME": minutes.cast(pa.string()),
        "VALUE": pc.if_else(token_mask, token_value, number),
        "VALUENUM": pc.if_else(token_mask, token_num, number),
        "VALUEUOM": pa.array(table["UOM"], pa.string(), from_pandas=True).take(pa.array(item)),
        "FLAG": pa.array(list(FLAGS), pa.string()).take(pa.array(np.maximum(flag, 0), mask=flag < 0)),
        **extra,
    })
