# rlbook: `make lab` opens the book, `make test` checks it. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlbook-installed
LAB_ARGS ?=
PYTEST_ARGS ?=
# The CI size: every notebook and test reads RLBOOK_SIZE (see rlbook/runtime.py).
TEST_SIZE ?= ci
# OpenMP threads that sleep, not spin, while they wait (override: OMP_WAIT_POLICY=active make ...). With
# the default spinning, two PyTorch threads on a 2-core machine wait on each other whenever any other
# program is busy: four Dr.GRPO steps took 127 s, against 2.3 s single-threaded (README, "Hardware tiers").
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: lab test unit notebooks execute bench zoo clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# Keep a torch the user installed first (e.g. a CUDA build); otherwise take the CPU build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m ipykernel install --sys-prefix --name rlbook --display-name "Python (rlbook)" >/dev/null
	@touch $(STAMP)

# Jupyter refuses to start as root unless told to (containers and CI machines often run as root).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_ARGS) $(LAB_ARGS)

test: unit notebooks

unit: $(STAMP)
	RLBOOK_SIZE=$(TEST_SIZE) $(PY) -m pytest -q $(PYTEST_ARGS) tests

notebooks: $(STAMP)
	RLBOOK_SIZE=$(TEST_SIZE) $(PY) -m pytest -q --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=600 -p no:cacheprovider notebooks

# Re-run lessons at full size and store their outputs: make execute NB="notebooks/00_tour.ipynb"
NB ?= notebooks/[0-9][0-9]_*.ipynb
execute: $(STAMP)
	RLBOOK_SIZE=full $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace $(NB)

bench: $(STAMP)
	$(PY) benchmarks/rollout.py
	$(PY) benchmarks/grpo_vs_trl.py

# Rebuild every zoo checkpoint and its card (single-threaded: deterministic, and fastest for
# models this small).
zoo: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m rlbook.zoo build all

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
