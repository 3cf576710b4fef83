# MXFP4 kernel ablation lab. On a fresh machine you need exactly two commands:
#   make reproduce   # the whole study: compile, verify, measure (where hardware exists), figures
#   make test        # the CI test subset
# Both set themselves up (venv + pinned deps + Jupyter kernel) on first use.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
JUPYTER_KERNEL := mxfp4-ablation
SETUP_STAMP := $(VENV)/.setup-done
# Empty: auto-detect (device if a gfx950 GPU is visible, else emulated). Or device|emulated|static.
MODE ?=
export MODE
PYTEST_ARGS ?= -n auto

NOTEBOOKS := $(shell find notebooks -name '*.py' -not -path '*/.ipynb_checkpoints/*' | sort)
# Where the "this notebook ran with these inputs" stamps live (a variable so tests can use a scratch one).
STAMP_DIR ?= experiments/.stamps
STAMPS := $(patsubst notebooks/%.py,$(STAMP_DIR)/%.done,$(NOTEBOOKS))
SOURCES := $(shell find src -name '*.py' -not -path '*/__pycache__/*')
# Each notebook's own inputs (the modules it imports, followed through src/, its family's kernel
# modules, the data it reads), generated with the standard library only; see mxfp4_ablation.notebooks.
DEPS_MK := $(STAMP_DIR)/deps.mk
LOCK := $(STAMP_DIR)/reproduce.lock
# How one notebook is run (a variable so that the Makefile's own behaviour can be tested cheaply).
RUN_NOTEBOOK ?= $(PY) -m mxfp4_ablation.notebooks run

.PHONY: help setup test test-all reproduce _reproduce figures readme lab clean doctor llvm

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(SETUP_STAMP) ## venv with pinned deps and the Jupyter kernel (idempotent)

# A torch that the base interpreter already has (a ROCm or CUDA build) is kept: the venv then sees
# the system site-packages and the torch pin is left out. Otherwise torch==2.13.0 (CPU) is installed.
$(SETUP_STAMP): requirements.txt pyproject.toml
	@$(MAKE) --no-print-directory llvm
	@if $(PYTHON) -c 'import torch' >/dev/null 2>&1; then \
	  echo "setup: keeping the installed torch $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	  $(PYTHON) -m venv --system-site-packages $(VENV); \
	  grep -v '^torch==' requirements.txt > $(VENV)/requirements.txt; \
	else \
	  $(PYTHON) -m venv $(VENV); \
	  cp requirements.txt $(VENV)/requirements.txt; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name $(JUPYTER_KERNEL) --display-name "MXFP4 ablation" >/dev/null
	$(PY) -m mxfp4_ablation.cli doctor
	@touch $@

# gfx950-capable llvm-objdump / llvm-readelf (LLVM >= 20) for the code-object loader: a ROCm install,
# Debian's llvm-NN, or llvm-objdump-NN on PATH. Missing: Debian's llvm-22 is installed when we are root
# and apt-get exists; otherwise one line says why not (the tests that need it skip).
LLVM_DIRS ?= "$${ROCM_PATH:-/nonexistent}/llvm/bin" /opt/rocm/llvm/bin $$(ls -d /usr/lib/llvm-*/bin 2>/dev/null | sort -rV)
llvm: ## make sure a gfx950-capable llvm-objdump exists (installs Debian llvm-22 as root)
	@gfx950_objdump() { \
	  for d in $(LLVM_DIRS); do \
	    o="$$d/llvm-objdump"; [ -x "$$o" ] || continue; \
	    v=$$("$$o" --version 2>/dev/null) || continue; \
	    maj=$$(printf '%s\n' "$$v" | sed -n 's/.*LLVM version \([0-9][0-9]*\).*/\1/p' | head -n1); \
	    case "$$d" in *rocm*) maj=99;; esac; \
	    if [ "$${maj:-0}" -ge 20 ] && printf '%s\n' "$$v" | grep -q amdgcn; then echo "$$o"; return 0; fi; \
	  done; \
	  for n in $$(seq 30 -1 20); do command -v llvm-objdump-$$n >/dev/null 2>&1 && { command -v llvm-objdump-$$n; return 0; }; done; \
	  return 1; }; \
	if found=$$(gfx950_objdump); then echo "setup: gfx950-capable llvm-objdump: $$found"; \
	elif [ "$$(id -u)" != 0 ]; then echo "setup: no gfx950-capable llvm-objdump, and not root: not installing Debian llvm-22 (as root: apt-get install llvm-22; the code-object tests skip)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "setup: no gfx950-capable llvm-objdump, and no apt-get: install ROCm or an LLVM >= 20 yourself (the code-object tests skip)"; \
	else \
	  if ! apt-cache policy llvm-22 2>/dev/null | grep -q 'Candidate: [0-9]'; then apt-get update -qq; fi; \
	  if apt-get install -y -qq --no-install-recommends llvm-22 >/dev/null; then echo "setup: installed Debian llvm-22: $$(gfx950_objdump || echo '?')"; \
	  else echo "setup: apt-get install llvm-22 failed: the code-object tests skip"; fi; \
	fi

test: $(SETUP_STAMP) ## the CI subset: everything not marked slow
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

test-all: $(SETUP_STAMP) ## every test, slow ones included
	$(PY) -m pytest -q $(PYTEST_ARGS)

doctor: $(SETUP_STAMP) ## what the toolchain, torch and GPU look like, and the mode reproduce will use
	$(PY) -m mxfp4_ablation.cli doctor

# One `make reproduce` at a time: the lock is held by this recipe for the whole (sub-)make, so every
# notebook of a second run would otherwise run twice. `make -j2 reproduce` runs step notebooks two at
# a time; the summary still waits for all of them.
reproduce: $(SETUP_STAMP) ## run every notebook (papermill) into experiments/<run-id>/, figures into figures/
	@mkdir -p $(dir $(LOCK))
	@flock -n -E 75 $(LOCK) $(MAKE) --no-print-directory _reproduce || { rc=$$?; \
	  if [ $$rc = 75 ]; then echo "reproduce: another 'make reproduce' is running in this checkout (lock $(LOCK)); wait for it to finish or stop it" >&2; fi; \
	  exit $$rc; }

_reproduce: $(STAMPS)
	@echo "reproduce: up to date ($(words $(STAMPS)) notebooks)"

$(DEPS_MK): $(NOTEBOOKS) $(SOURCES) experiments/shapes.toml
	@mkdir -p $(@D)
	@PYTHONPATH=src $(PYTHON) -m mxfp4_ablation.notebooks deps --stamps $(STAMP_DIR) > $@.tmp && mv $@.tmp $@

# Only the targets that run notebooks need the dependency rules (`make help` stays instant).
ifneq ($(filter _reproduce $(STAMP_DIR)/%,$(MAKECMDGOALS)),)
include $(DEPS_MK)
endif

# A notebook reruns only when it or one of its inputs changed (the rules in $(DEPS_MK)). The stamp is
# touched only after the run published its folder; an interrupted run publishes nothing, stamps nothing.
$(STAMP_DIR)/%.done: notebooks/%.py $(SETUP_STAMP)
	$(RUN_NOTEBOOK) $<
	@mkdir -p $(@D) && touch $@

figures: $(SETUP_STAMP) ## redraw every figure from stored data alone (no compiling, no measuring)
	$(PY) -m mxfp4_ablation.figures

readme: $(SETUP_STAMP) ## regenerate README.md's generated tables from the latest summary run
	$(PY) -m mxfp4_ablation.studies readme-table --update README.md

lab: $(SETUP_STAMP) ## JupyterLab on the notebooks (jupytext opens the .py sources as notebooks)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

clean: ## remove caches and run stamps (keeps experiments/ results and figures/)
	rm -rf .cache $(STAMP_DIR) .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The summary reads what the step notebooks wrote: it runs after all of them.
$(STAMP_DIR)/summary.done: $(filter-out $(STAMP_DIR)/summary.done,$(STAMPS))

# Pipeline profile (a benchmark, measured: per-notebook wall / CPU time by phase, see
# src/mxfp4_ablation/bench_pipeline.py); BENCH_ARGS e.g. "--label after --cache warm notebooks/summary.py".
BENCH_ARGS ?= --label profile
.PHONY: bench-pipeline
bench-pipeline: $(SETUP_STAMP) ## profile a few notebooks by phase into experiments/bench-pipeline/ (measured)
	$(PY) -m mxfp4_ablation.bench_pipeline $(BENCH_ARGS)
