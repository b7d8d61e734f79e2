# badpoints: `make validate` and `make test` do all set-up on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   ?= data/sample
# make bench: LABEVENTS rows to generate (27800000 = MIMIC-III, 118000000 = MIMIC-IV), their layout (mimic3, or
# mimic4: MIMIC-IV's hosp/*.csv.gz), their shapes (default, heavy: most rows quarantined or merged by dedup; both by
# default, each run into $(BENCH_OUT)/<shape>/ and their memory side by side in $(BENCH_OUT)/shapes.json; one shape,
# SHAPE=default or SHAPE=heavy, writes $(BENCH_OUT)/bench.json as a single run), where results go, optionally where
# the generated data is kept (BENCH_DATA, with one SHAPE only; default $(BENCH_OUT)/data/...; reused while it
# matches ROWS, LAYOUT and SHAPE) and a mimic3 run's bench.json that a mimic4 run's seconds per row are held against
# (BENCH_REFERENCE, applied to every shape); BENCH_FLAGS=--dask adds the Dask engine step, BENCH_FLAGS=--meds the
# MEDS step (the rows as MEDS: badpoints validate beside MEDS-Transforms' normalization; skipped without make
# meds-env).
ROWS      ?= 2000000
LAYOUT    ?= mimic3
SHAPE     ?= default heavy
BENCH_OUT ?= out/bench
BENCH_DATA ?=
BENCH_REFERENCE ?=
BENCH_FLAGS ?=

# make meds-env: MEDS-Transforms 0.7.0 in an environment of its own (it pins polars<2; badpoints' bench extra
# wants polars>=2.1), for tests/bench/test_meds_transforms.py and bench/meds_transforms.py (docs/meds.md).
MEDS_VENV  := .venv-meds
MEDS_STAMP := $(MEDS_VENV)/.installed

.PHONY: validate build test bench mutants meds-env clean

# Install only when the venv is missing or the project's metadata changed (idempotent).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

validate: $(STAMP)
	$(BIN)/badpoints validate $(DATA)

build: $(STAMP)
	$(BIN)/badpoints build $(DATA) --out out/sample

# Two processes (pytest-xdist; a file's tests stay in one process, so its module fixtures are built once).
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The polars baseline needs the extra 'bench' (not needed by make test); without it that step is skipped.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	$(BIN)/python -m bench --rows $(ROWS) --layout $(LAYOUT) --shape $(SHAPE) --out $(BENCH_OUT) \
		$(if $(BENCH_DATA),--data $(BENCH_DATA)) $(if $(BENCH_REFERENCE),--reference $(BENCH_REFERENCE)) $(BENCH_FLAGS)

meds-env: $(MEDS_STAMP)

$(MEDS_STAMP):
	test -x $(MEDS_VENV)/bin/python || $(PYTHON) -m venv $(MEDS_VENV)
	$(MEDS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check 'meds-transforms==0.7.0'
	touch $(MEDS_STAMP)

# Mutation testing of schemas/ and the quarantine ledger (not in CI; hours on two cores). Settings: pyproject
# [tool.mutmut]; survivors: $(BIN)/mutmut results, one diff: $(BIN)/mutmut show NAME.
mutants: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,mutants]'
	$(BIN)/mutmut run
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) $(MEDS_VENV) out mutants .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
