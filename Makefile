# rlbook: `make lab` opens the book, `make test` checks it. Both create .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlbook-installed
LAB_ARGS ?=
PYTEST_ARGS ?=
# The CI size: every notebook and test reads RLBOOK_SIZE (see rlbook/runtime.py).
TEST_SIZE ?= ci
# One PyTorch thread (override: OMP_NUM_THREADS=2 make ...). The book's models are ~1 M parameters, so a
# step is thousands of small operations: a second thread gains little when the machine is idle, and when
# any other program keeps a core busy, spinning threads wait on each other (a GRPO step 6x slower) while
# sleeping ones (OMP_WAIT_POLICY=PASSIVE) are slower than one thread even when idle. Measured by
# `make bench` (README, "Hardware tiers" and "Benchmarks").
export OMP_NUM_THREADS ?= 1

.PHONY: lab test unit-and-notebooks unit notebooks execute bench report zoo clean book browser-deps assignments grade gradescope

# Every package at the version in constraints.txt (the versions the stored outputs were made with), with
# all four extras: scale (lesson 21: trl, accelerate), book, grade and test.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# Keep a torch the user installed first (e.g. a CUDA build); otherwise take the CPU build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[scale,book,grade,llm,test]"
	$(PY) -m ipykernel install --sys-prefix --name rlbook --display-name "Python (rlbook)" >/dev/null
	@touch $(STAMP)

# Jupyter refuses to start as root unless told to (containers and CI machines often run as root).
ROOT_ARGS := $(if $(filter 0,$(shell id -u)),--allow-root)

# book/lab.py trusts the lessons (so their stored widgets show on first open) and starts JupyterLab on
# notebooks/, serving the site that `make book` built at /static/index.html of the same server.
lab: $(STAMP)
	$(PY) book/lab.py $(ROOT_ARGS) $(LAB_ARGS)

test: browser-deps unit-and-notebooks

# Browser tests (tests/browser) drive the system's Chromium through Playwright (a test extra; Playwright's
# own browser download needs the network). Installed with apt-get when root and missing; otherwise say
# exactly what to install, and fail in CI.
browser-deps: $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || test -x "$$RLBOOK_CHROMIUM" || \
	{ test "$$(id -u)" = 0 && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }; }; } || \
	{ echo "browser tests need Chromium: apt-get install chromium (or set RLBOOK_CHROMIUM=/path/to/chromium)"; \
	  test "$$CI" != true; }

# Workers for pytest-xdist: one per core, one PyTorch thread each. A notebook's cells share a kernel, so
# a file goes to one worker whole (--dist loadfile); the lessons come first, the longest ones before the rest.
JOBS ?= $(shell $(PYTHON) -c "import os; print(len(os.sched_getaffinity(0)))" 2>/dev/null || echo 2)
XDIST := -n $(JOBS) --dist loadfile
NBVAL := --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p no:cacheprovider

# make test runs the unit tests and the lessons in one pytest run, so both cores stay busy to the end.
unit-and-notebooks: $(STAMP)
	RLBOOK_SIZE=$(TEST_SIZE) $(PY) -m pytest -q $(XDIST) $(NBVAL) $(PYTEST_ARGS) notebooks tests

unit: $(STAMP)
	RLBOOK_SIZE=$(TEST_SIZE) $(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS) tests

notebooks: $(STAMP)
	RLBOOK_SIZE=$(TEST_SIZE) $(PY) -m pytest -q $(XDIST) $(NBVAL) $(PYTEST_ARGS) notebooks

# Re-run lessons at full size and store their outputs: make execute NB="notebooks/00_tour.ipynb"
# (rlbook.execute: nbconvert's engine, without the stall nbconvert shows after some widget cells).
NB ?= notebooks/[0-9][0-9]_*.ipynb
execute: $(STAMP)
	RLBOOK_SIZE=full $(PY) -m rlbook.execute $(NB)

# Ratios against HF generate and TRL's GRPOTrainer, measured in one run each (README "Benchmarks"):
# the zoo's arith-base, then the real SmolLM2-135M-Instruct (its three took about 10 minutes of CPU time here).
# Offline: the real model must already be built in rlbook's cache (the script says how if not).
bench: $(STAMP)
	$(PY) benchmarks/report.py --print-only

# The same benchmarks, and the README's table of their results rewritten from this run (machine, commit, date).
report: $(STAMP)
	$(PY) benchmarks/report.py

# Rebuild every zoo checkpoint and its card (single-threaded whatever OMP_NUM_THREADS says: the
# recorded checkpoints and cards are reproduced bit for bit).
zoo: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m rlbook.zoo build all

# Course assignments (assignments/README.md): student versions and autograders into build/assignments/.
assignments: $(STAMP)
	$(PY) assignments/build.py

# Grade a folder of submitted notebooks: make grade ASSIGNMENT=a2_ppo SUBMISSIONS=subs/ OUT=a2_scores.csv
grade: assignments
	$(PY) assignments/grade.py $(SUBMISSIONS) --assignment $(ASSIGNMENT) --out $(OUT)

# A Gradescope autograder for one assignment (assignments/README.md, "Gradescope"): every package as a wheel in
# the zip, torch's CPU build, installed offline by its setup.sh. make gradescope ASSIGNMENT=a2_ppo SEED=2026
SEED ?= 0
gradescope: $(STAMP)
	$(PY) assignments/gradescope.py build $(ASSIGNMENT) --seed $(SEED)

# The book as a static site from the lessons' stored outputs (nothing executed): book/_build/html/index.html.
book: $(STAMP)
	$(PY) book/build.py --out book/_build
	@echo "book: read it at /static/index.html of the JupyterLab that make lab starts (its lesson links open the notebooks there), or open book/_build/html/index.html"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis book/_build
