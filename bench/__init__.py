"""The benchmark and the synthetic data it runs on: a folder of the source checkout, not of the installed badpoints.

``python -m bench --rows N --out DIR`` (``make bench``) times badpoints against the pyarrow floor and a careful
user's plain pandas and polars (:mod:`bench.run`); ``python -m bench.synth OUT_DIR --rows N`` writes only the
data (:mod:`bench.synth`). Run from the checkout's root (``make bench`` does), so ``bench`` is importable;
nothing in ``pipeline/`` or ``schemas/`` imports it.
"""
