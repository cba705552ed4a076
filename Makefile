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
# EP sweeps when the cores are busy (docs/performance.md#blas-threads: 26 ms against
# 0.23 ms for n = 42 at load average 15; about equal on an idle machine); the test
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

# The maintained suites in their quick form (about 10 minutes on 2 cores); each also has
# --full, the configuration of the numbers in docs/performance.md. Results go to
# benchmarks/results/local/ (docs/performance.md, "Running the suites").
BENCH_SUITES := engine gpc tgp likelihoods mrf peers sparse gpu multiclass \
	multiclass_sparse multiclass_label_noise auto_grid stress bad_input seam_regression \
	stochastic_ep learning
bench: $(STAMP)
	set -e; for s in $(BENCH_SUITES); do echo "== benchmarks/$$s.py --quick"; \
		MPLBACKEND=Agg $(BIN)/python benchmarks/$$s.py --quick; done

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache build src/*.egg-info \
		docs/_build docs/auto_examples docs/api/generated docs/sg_execution_times.rst
