# Everything runs inside a local virtual environment (.venv) that this Makefile creates.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
OUT    ?= report
# On the developers' and CI machines the benchmark data sit beside the checkout.
export ROBUSTEP_DATA ?= $(abspath $(wildcard ../shared/datasets))
# Worker processes for make demo / make test: every core (make demo JOBS=1 for one).
JOBS   ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
# Multithreaded OpenBLAS is pathologically slow on the small triangular solves of
# EP sweeps when the cores are busy (python benchmarks/blas_threads.py: 24 ms against
# 3 us for n = 42 at load average 14; about equal on an idle machine); the test
# workers and experiments run one BLAS thread each.
export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1

.PHONY: install demo test test-all lint format bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,dev,experiments]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	MPLBACKEND=Agg $(BIN)/robustep reproduce all --quick --jobs $(JOBS) --out $(OUT)/

test: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest -m "not slow" -n $(JOBS) -q

test-all: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest -n $(JOBS) -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

# The documentation site into docs/_build/html (warnings are errors; runs examples/).
docs: $(DOCS_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m sphinx -b html -W --keep-going docs docs/_build/html

bench: $(STAMP)
	for f in benchmarks/*.py; do $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache build src/*.egg-info \
		docs/_build docs/auto_examples docs/api/generated docs/sg_execution_times.rst
