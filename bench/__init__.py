"""The benchmark and the synthetic data it runs on: a folder of the source checkout, not of the installed badpoints.

``python -m bench --rows N --out DIR`` (``make bench``) times badpoints against the pyarrow floor and a careful
user's plain pandas and polars; ``python -m bench.synth OUT_DIR --rows N`` writes only the data. Run from the
checkout's root (``make bench`` does), so ``bench`` is importable; nothing in ``pipeline/`` or ``schemas/``
imports it.

- :mod:`bench.run`: the run, every step in order, ``bench.json`` and the command line;
- :mod:`bench.steps`: each step in a process of its own, measured, and the data prepared for them;
- :mod:`bench.plain`: the floor and the plain pandas and polars baselines, the code those processes run;
- :mod:`bench.shapes`: several shapes in one run, their memory side by side (``shapes.json``);
- :mod:`bench.targets`: the speed and memory targets; :mod:`bench.show`: the tables printed;
- :mod:`bench.synth`: the generator of MIMIC-shaped tables at any scale.
"""
