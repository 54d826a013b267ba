# pelab: `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default. For a GPU: `make install TORCH="torch==2.13.0" TORCH_INDEX=<your CUDA wheel index>`
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: help install train test test-faults test-slow test-full test-slurm benchmark lint clean

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@

install: $(VENV)/.installed ## create .venv and install pelab (torch first, CPU build)

train: install ## train the default run: pe=rope task=copy
	$(PY) scripts/train.py pe=rope task=copy

test: install ## the test suite without the slow learning runs (what CI runs; ~10 min on 2 cores)
	$(PY) -m pytest -m "not slow"

test-faults: install ## the fault-injection campaign alone (68 tests, ~3 min; also part of make test)
	$(PY) -m pytest -m "faults and not slow"

test-slow: install ## the slow tests: a small model learns each task in distribution (~17.5 min before the eight tasks of 2026-11-24, which add ~20 min by their measured runs)
	$(PY) -m pytest -m slow

test-full: install ## every test, slow ones included
	$(PY) -m pytest

test-slurm: install ## the real-SLURM campaign (root): starts a single-node cluster from Debian's packages (scripts/slurm_cluster.sh), skips saying why where it cannot start (~6 min)
	@if scripts/slurm_cluster.sh start; then \
		PELAB_SLURM=1 $(PY) -m pytest -p no:cacheprovider -v tests/slurm; \
	else \
		echo "make test-slurm: SKIPPED: no single-node SLURM could start here (above: why; needs root and Debian's slurmctld slurmd slurm-client slurmdbd munge mariadb-server: scripts/slurm_cluster.sh install)"; \
	fi

benchmark: install ## pelab's training step vs a minimal PyTorch loop
	$(PY) scripts/benchmark.py

lint: install ## ruff lint and format check
	$(PY) -m ruff check src scripts tests benchmarks
	$(PY) -m ruff format --check src scripts tests benchmarks

clean: ## remove run outputs and caches (keeps .venv)
	rm -rf logs multirun outputs wandb .cache .pytest_cache
