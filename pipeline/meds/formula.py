"""MEDS-Transforms 0.7.0's normalization, reproduced in numpy to the bit: what ``fit_normalization`` ->
``fit_vocabulary_indices`` -> ``normalization`` will make of a MEDS dataset, without running it; and
:func:`readiness`, which says per code whether its z will be finite, beside a float64 two-pass reference.

Read from its source (``MEDS_transforms`` 0.7.0 as installed by ``make meds-env``; polars 1.44) and checked
bit for bit against its output on ``tests/meds.py``'s fixture (``tests/bench/test_meds_transforms.py``,
``tests/pipeline/meds/``):

1. **Which rows are fitted.** A ``fit_*`` stage is a metadata stage, run ``train_only``
   (``configs/pipeline.py`` 415-417); the shard iterator then takes the shards whose name starts with ``train/``
   (``mapreduce/shard_iteration.py`` 295-298), or, without any, filters every shard to the subjects
   ``subject_splits.parquet`` puts in ``train`` (``mapreduce/stage.py`` 468-483).
2. **Per shard and code** (``stages/aggregate_code_metadata/aggregate_code_metadata.py`` 168-171, 237-240):
   a value is present when it is not null and not NaN (``+-inf`` *is* present);
   ``values/n_occurrences`` counts them, ``values/sum`` is ``sum(x)`` and ``values/sum_sqd`` is
   ``sum(x ** 2)``, where ``x ** 2`` is float32 and polars' grouped sum of a float32 column accumulates in
   float64 and rounds the total once to float32 (measured on codes interleaved as in any shard sorted by
   subject and time: it matches that for groups of 3 to 20,000 values, at 1, 2 and 16 threads; sequential
   float32 addition and numpy's pairwise float32 sum do not. A frame of one code only, one group, takes
   another path in polars, whose float32 sum changes with the thread count; not reproduced here).
3. **Across shards** (``aggregate_code_metadata.py`` 918-947: ``pl.sum_horizontal`` over
   ``values/sum/shard_i``): the float32 partial sums are added in float32, in the order the mapper visited the
   shards, sorted by ``sha256(str(worker) + shard_name)`` with ``worker`` 0 (``mapreduce/shard_iteration.py``
   23-67). The reducer then shrinks every numeric column to the smallest type holding its values
   (``mapreduce/reducer.py`` 261): the counts become uint8, uint16 or uint32 according to the *largest* count
   of any code, and float64 columns become float32.
4. **Kept codes** (``mapreduce/stage.py`` 509-545, 865-870): the fitted table is a left join from the codes
   seen in train onto the input ``metadata/codes.parquet``, so a code never seen in train has no row;
   ``fit_vocabulary_indices`` numbers the kept codes from 1 in lexicographic order.
5. **Normalization** (``stages/normalization/normalization.py`` 187-188, 206-222)::

       mean = values/sum / values/n_occurrences
       std  = (values/sum_sqd / values/n_occurrences - mean ** 2) ** 0.5
       z    = ((numeric_value - mean) / std).cast(Float32)

   after an *inner* join on the code (rows of a code without a fitted row are dropped). It is the population
   variance (divided by n), in one pass, with no guard: n = 1 gives ``x^2 - x^2 = 0``; equal values give 0
   (or a rounding residue of either sign); a negative residue gives NaN from ``** 0.5``; then ``0 / 0`` is
   NaN and ``(x - mean) / 0`` is +-inf; an inf input makes ``sum`` and ``sum_sqd`` inf and ``inf - inf`` NaN.
   The arithmetic is float32 when the counts' type is uint8 or uint16 (at most 65,535 values for every code)
   and float64 (on the float32 sums) from uint32 on: polars' supertype of Float32 and UInt32 is Float64.
   Where the input ``codes.parquet`` already holds ``values/mean`` and ``values/std``, those are used instead
   (normalization.py 190-199), after the reducer's shrink to float32; a null there makes every z of the code
   null.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

WORKER = 0  # MEDS-Transforms' default worker, the seed of its shard order
Given = tuple[np.ndarray | None, np.ndarray | None, np.ndarray]  # codes.parquet's mean, std, and where z is null


@dataclass(frozen=True)
class Fitted:
    """Per code (sorted): what ``fit_normalization`` writes, ``n`` (values/n_occurrences), ``total``
    (values/sum) and ``total_sqd`` (values/sum_sqd), the last two float32."""

    codes: np.ndarray
    n: np.ndarray
    total: np.ndarray
    total_sqd: np.ndarray

    def count_dtype(self) -> np.dtype:
        """The counts' type after the reducer's ``shrink_dtype``: the smallest unsigned type for the largest."""
        largest = int(self.n.max()) if len(self.n) else 0
        return next(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64) if largest <= np.iinfo(t).max)

    def arithmetic_dtype(self) -> np.dtype:
        """float32 against uint8/uint16 counts, float64 against uint32/uint64 (polars' supertypes)."""
        return np.dtype(np.float32 if self.count_dtype().itemsize <= 2 else np.float64)

    def mean_variance(self) -> tuple[np.ndarray, np.ndarray]:
        """``values/mean`` and the variance under ``values/std``'s root as normalization computes them
        (normalization.py 187-188): ``sum_sqd/n - mean^2``, of either sign."""
        dtype = self.arithmetic_dtype()
        n, total, total_sqd = (a.astype(dtype) for a in (self.n, self.total, self.total_sqd))
        with np.errstate(all="ignore"):
            mean = total / n
            return mean, total_sqd / n - mean * mean

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """``values/mean`` and ``values/std`` as normalization computes them (normalization.py 187-188)."""
        mean, variance = self.mean_variance()
        with np.errstate(invalid="ignore"):
            return mean, np.sqrt(variance)


def present(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    """``VAL_PRESENT``: not null and not NaN; +-inf is present."""
    return ~null & ~np.isnan(values)


def fit_shard(codes: np.ndarray, values: np.ndarray, null: np.ndarray) -> Fitted:
    """One shard's ``values/n_occurrences``, ``values/sum`` and ``values/sum_sqd`` per code (every code with a
    row, present values or not): float32 squares, summed in float64, rounded once to float32."""
    # The sorted distinct codes and each row's place among them: hashed, then only the distinct codes sorted (a
    # sort of a million code strings as Python objects was most of a MEDS validate).
    inverse, kept = pd.factorize(pd.Series(codes, dtype=object), sort=True)
    kept = np.asarray(kept, dtype=object)
    values = np.asarray(values, dtype=np.float32)
    here = present(values, null)
    at, x = inverse[here], values[here]
    with np.errstate(over="ignore", invalid="ignore"):
        squares = x * x  # float32, as polars' PRESENT_VALS ** 2
        total = np.bincount(at, weights=x.astype(np.float64), minlength=len(kept)).astype(np.float32)
        total_sqd = np.bincount(at, weights=squares.astype(np.float64), minlength=len(kept)).astype(np.float32)
    return Fitted(kept, np.bincount(at, minlength=len(kept)).astype(np.int64), total, total_sqd)


def shard_order(shards: Iterable[str], worker: int = WORKER) -> list[str]:
    """The order MEDS-Transforms visits shards (``shuffle_shards``), hence the order of the partial sums."""
    return sorted(shards, key=lambda s: int(hashlib.sha256((str(worker) + s).encode("utf-8")).hexdigest(), 16))


def reduce_shards(partials: Mapping[str, Fitted], worker: int = WORKER) -> Fitted:
    """The reducer: counts added, float32 sums added in float32 in the mapper's shard order."""
    codes = np.unique(np.concatenate([p.codes for p in partials.values()])) if partials else np.array([], object)
    n = np.zeros(len(codes), dtype=np.int64)
    total, total_sqd = np.zeros(len(codes), np.float32), np.zeros(len(codes), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for shard in shard_order(partials, worker):
            part = partials[shard]
            at = np.searchsorted(codes, part.codes)
            n[at] += part.n
            total[at] = total[at] + part.total  # float32 + float32
            total_sqd[at] = total_sqd[at] + part.total_sqd
    return Fitted(codes, n, total, total_sqd)


def zscore(fitted: Fitted, codes: np.ndarray, values: np.ndarray, null: np.ndarray,
           given: tuple[np.ndarray | None, np.ndarray | None, np.ndarray] | None = None,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalization of some rows: ``(kept, z, z_null)``. ``kept`` marks the rows the inner join keeps; for
    them, ``z`` (float32) and ``z_null``, where z is null: the input is null, or ``given`` (the input
    codes.parquet's ``values/mean``, ``values/std`` per fitted code, each None where the column is absent, and
    where either is null) has no number for the code. Mean and std default to :meth:`Fitted.mean_std`."""
    mean, std = fitted.mean_std()
    missing = np.zeros(len(fitted.codes), dtype=bool)
    if given is not None:
        mean = mean if given[0] is None else given[0]
        std = std if given[1] is None else given[1]
        missing = given[2]
    codes = np.asarray(codes, dtype=object)
    if len(fitted.codes) == 0:
        return np.zeros(len(codes), dtype=bool), np.zeros(0, np.float32), np.zeros(0, dtype=bool)
    at = np.minimum(np.searchsorted(fitted.codes, codes), len(fitted.codes) - 1)
    kept = fitted.codes[at] == codes
    at, x = at[kept], np.asarray(values, dtype=np.float32)[kept]
    with np.errstate(all="ignore"):
        z = ((x - mean[at]) / std[at]).astype(np.float32)  # numpy promotes float32 and float64 as polars does
    z_null = np.asarray(null)[kept] | missing[at]
    z[z_null] = np.nan
    return kept, z, z_null


def given_mean_std(codes: pa.Table | None, fitted: Fitted) -> Given | None:
    """The input codes.parquet's ``values/mean`` and ``values/std`` (``codes``: its table, None without it) for the
    fitted codes, float32 as the reducer shrinks them (None for an absent column), and which codes have a null in
    either or no row there; None without either column. The left join keeps them, and normalization uses them in
    place of its own (normalization.py 190-199): a code with a null there gets a null z on every row, whatever its
    sums."""
    columns = [name for name in ("values/mean", "values/std") if codes is not None and name in codes.column_names]
    if not columns:
        return None
    rows = {code: i for i, code in enumerate(codes["code"].to_pylist())}
    at = np.array([rows.get(code, -1) for code in fitted.codes], dtype=np.int64)  # -1: no row, the null past the end
    missing = at < 0
    found = []
    for name in ("values/mean", "values/std"):
        if name not in columns:
            found.append(None)
            continue
        column = codes[name]
        values = np.append(column.to_numpy(zero_copy_only=False).astype(np.float32), np.float32(np.nan))
        null = np.append(column.is_null().to_numpy(zero_copy_only=False), True)
        missing = missing | null[at]
        found.append(values[at])
    return found[0], found[1], missing


# Readiness: what the formula will make of each code ----------------------------------------------------------


def readiness(fitted: Fitted, codes: pd.DataFrame, given: Given | None = None) -> pd.DataFrame:
    """Per fitted code, what normalization will make of its rows: ``n``, ``mean``, ``variance`` (``sum_sqd/n -
    mean^2``) and ``std`` as MEDS-Transforms computes them (mean and std as ``given`` in codes.parquet where given),
    the float64 two-pass ``mean64`` and ``std64`` of ``codes`` (:class:`pipeline.meds.combine.Combined`'s),
    ``non_finite`` (rows whose z will be NaN or +-inf: every valued row of a code whose mean or std is not finite or
    whose std is 0, else its inf and NaN inputs), ``noise`` (two or more train values, all equal, and a std of
    MEDS-Transforms' own that is finite and > 0: a rounding residue, so every z of the code is noise, and NaN or
    inf where the residue rounds to 0 or below, as it may at another scale, shard layout or thread count),
    ``z_max`` (the largest finite |z|, from the code's min and max) and ``why``."""
    mean, variance = fitted.mean_variance()
    with np.errstate(invalid="ignore"):
        std = np.sqrt(variance)
    null_z = np.zeros(len(fitted.codes), dtype=bool)
    if given is not None:
        mean = mean if given[0] is None else given[0].astype(mean.dtype)
        std = std if given[1] is None else given[1].astype(std.dtype)
        null_z = given[2]
    frame = pd.DataFrame({"n": fitted.n, "total": fitted.total, "mean": mean, "variance": variance, "std": std,
                          "null_z": null_z}, index=pd.Index(fitted.codes, dtype=str, name="code"))
    frame = frame.join(codes[["numeric", "nan", "inf", "min", "max", "mean64", "std64"]], how="left")
    broken = ~np.isfinite(frame["mean"]) | ~np.isfinite(frame["std"]) | (frame["std"] == 0)
    rows = np.where(broken, frame["numeric"], frame["nan"] + frame["inf"])
    frame["non_finite"] = np.where(frame["null_z"], 0, rows).astype(np.int64)
    own_std = given is None or given[1] is None  # the std is MEDS-Transforms' residue, not codes.parquet's
    frame["noise"] = ((frame["n"] >= 2) & (frame["std64"] == 0) & ~broken & ~frame["null_z"] & own_std).astype(bool)
    with np.errstate(all="ignore"):
        spread = np.maximum(np.abs(frame["max"] - frame["mean"]), np.abs(frame["mean"] - frame["min"]))
        frame["z_max"] = np.where(broken | frame["null_z"], np.nan, spread / frame["std"])
    frame["why"] = why(frame, broken.to_numpy(), given is not None)
    return frame


def exact_zero(value: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Where ``n`` equal float32 values ``value`` have a variance of exactly 0 at any shard layout, thread count and
    count type: their square is exact in float32, and so is every partial sum of k values and of k squares (k <=
    n), since the odd part of the square's significand times n stays below 2^24. Elsewhere sum_sqd/n - mean^2
    is a rounding residue, whose sign the layout decides (a code of 1.0 is exact; 0.1 and 1e6 are not)."""
    x = np.asarray(value, dtype=np.float32)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(all="ignore"):
        square = (x * x).astype(np.float64)
        significand = (np.abs(np.frexp(square)[0]) * 2.0 ** 24).astype(np.int64)
        odd = significand // np.maximum(significand & -significand, 1)
        exact = ((square == x.astype(np.float64) ** 2) & (odd * n < 2.0 ** 24)
                 & (square * n <= np.finfo(np.float32).max))
    return (x == 0) | exact


def shown(numbers: pd.Series, spec: str) -> pd.Series:
    """Each number written with ``spec`` (``"{:.3g}"``): text, even where there is no number (no code fitted)."""
    return numbers.map(spec.format).astype(str)


def why(frame: pd.DataFrame, broken: np.ndarray, given: bool) -> pd.Series:
    """Why a code's z will be non-finite, noise or large: an inf input, no or one train value, equal values (a
    variance exactly 0, or a rounding residue of either sign), float32 cancellation beside the float64 std, a given
    std of 0, or non-finite inputs of an otherwise sound fit."""
    std64, std, variance = (shown(frame[name], "{:.3g}") for name in ("std64", "std", "variance"))
    equal = "all " + frame["n"].astype(str) + " train values equal"
    residue = ": the float32 variance sum_sqd/n - mean^2 is " + variance + " here, a rounding residue"
    cases = [
        broken & given,
        broken & ~np.isfinite(frame["total"]),
        broken & (frame["n"] == 0),
        broken & (frame["n"] == 1),
        broken & (frame["std64"] == 0) & exact_zero(frame["mean64"], frame["n"]),
        broken & (frame["std64"] == 0),
        broken & (frame["std"] == 0),
        broken,
        frame["noise"],
        np.isfinite(frame["z_max"]),
    ]
    choices = [
        "codes.parquet's values/mean or values/std is not a usable number",
        "an inf value in train makes values/sum and values/sum_sqd inf: mean inf, variance NaN",
        "no train value: mean 0/0",
        "one train value: variance x^2 - x^2 = 0",
        equal + ": variance 0, exactly (float32 holds their squares and sums exactly, whatever the shards)",
        equal + residue + ", whose sign is not reliable: at another scale, shard layout or thread count it may "
                          "come out positive, and every z of the code a finite z of noise",
        "cancellation: float32 sum_sqd/n - mean^2 is 0 where the float64 std is " + std64,
        "cancellation: float32 sum_sqd/n - mean^2 is negative (std NaN) where the float64 std is " + std64,
        equal + residue + " (std " + std + "), so every z of the code is noise; where it rounds to 0 or below, as "
                          "it may at another scale, shard layout or thread count, every z of the code is NaN or inf",
        "std " + std + " where the float64 std is " + std64,
    ]
    reason = np.select(cases, choices, default="")
    inputs = frame["nan"] + frame["inf"]
    extra = np.where(~broken & (inputs > 0), inputs.astype(str) + " inf or NaN inputs", "")
    return pd.Series(np.where(reason == "", extra, reason), index=frame.index, dtype=str)
