# pelab: `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build by default. For a GPU: `make install TORCH="torch==2.13.0" TORCH_INDEX=<your CUDA wheel index>`
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
# pytest-xdist: one worker process per core (PYTEST_WORKERS=0: one process); a file's tests stay
# on one worker, so a module's fixture (a sweep, a trained run) is built once; files are handed
# out in the suite's order (tests/conftest.py: the Trainer's first), not re-sorted by test count
PYTEST_WORKERS ?= auto
XDIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: help install train test test-processes test-unit test-encoding test-faults test-slow test-full test-slurm benchmark gpu-check sync lint clean

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

test: install ## every in-process test (unit and Trainer runs) but slow, on all cores (CI runs it, then test-processes; --durations=25 shows the slowest)
	$(PY) -m pytest -m "not slow and not processes" $(XDIST)

test-processes: install ## the tests that start Python processes: scripts end to end, sweeps, interruptions from outside (CI runs it after test)
	$(PY) -m pytest -m "processes and not slow" $(XDIST)

test-unit: install ## the edit loop: no process starts, no Trainer runs (~1 min on 2 idle cores)
	$(PY) -m pytest -m "not slow and not integration and not processes" $(XDIST)

test-encoding: install ## one encoding's tests and every registry-driven test of it: make test-encoding PE=<name> (docs/encodings.md)
	@test -f configs/pe/$(PE).yaml || { echo "make test-encoding: PE=$(PE): no configs/pe/$(PE).yaml; name a registered encoding: make test-encoding PE=<name>"; exit 2; }
	$(PY) -m pytest -m "not slow and not processes" -k "$(PE)" $(XDIST)

test-faults: install ## the fault-injection campaign alone (also part of make test)
	$(PY) -m pytest -m "faults and not slow" $(XDIST)

test-slow: install ## the slow tests: a small model learns each task in distribution (~37 min in one process by earlier runs; split over the cores)
	$(PY) -m pytest -m slow $(XDIST)

test-full: install ## every test, slow ones included
	$(PY) -m pytest

test-slurm: install ## the real-SLURM campaign (root): starts a single-node cluster from Debian's packages (scripts/slurm_cluster.sh), skips saying why where it cannot start (12 tests, each interruption against its uninterrupted twin; ~21 min on 2 idle cores, 2026-11-28: six requeues wait ~2 min each; 27 min beside two training jobs, 2026-11-29)
	@if scripts/slurm_cluster.sh start; then \
		PELAB_SLURM=1 $(PY) -m pytest -p no:cacheprovider -v tests/slurm; \
	else \
		echo "make test-slurm: SKIPPED: no single-node SLURM could start here (above: why; needs root and Debian's slurmctld slurmd slurm-client slurmdbd munge mariadb-server: scripts/slurm_cluster.sh install)"; \
	fi

benchmark: install ## pelab's training step vs a minimal PyTorch loop
	$(PY) scripts/benchmark.py

gpu-check: ## does pelab fill a GPU? one table, exit 1 on a miss (meant to fit 9 min on one GPU, not yet timed there; docs/performance.md "On a GPU"); no install: it runs where torch and Lightning are (.venv if made)
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/gpu_check.py

sync: install ## upload every offline W&B run under logs/ not uploaded yet (W&B marks uploaded ones)
	@if [ -d logs ]; then find logs -type d -name 'offline-run-*' -print0 | sort -z | xargs -0r $(VENV)/bin/wandb sync; \
	else echo "make sync: no logs/ here (run it from the repo root): no runs to sync"; fi

lint: install ## ruff lint and format check
	$(PY) -m ruff check src scripts tests benchmarks
	$(PY) -m ruff format --check src scripts tests benchmarks

clean: ## remove run outputs and caches (keeps .venv)
	rm -rf logs multirun outputs wandb .cache .pytest_cache
