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
STAMPS := $(patsubst notebooks/%.py,experiments/.stamps/%.done,$(NOTEBOOKS))
SOURCES := $(shell find src -name '*.py' -not -path '*/__pycache__/*')
DATA := $(shell find experiments/reference experiments/harness-validation -type f 2>/dev/null)

.PHONY: help setup test test-all reproduce figures readme lab clean doctor

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(SETUP_STAMP) ## venv with pinned deps and the Jupyter kernel (idempotent)

# A torch that the base interpreter already has (a ROCm or CUDA build) is kept: the venv then sees
# the system site-packages and the torch pin is left out. Otherwise torch==2.13.0 (CPU) is installed.
$(SETUP_STAMP): requirements.txt pyproject.toml
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

test: $(SETUP_STAMP) ## the CI subset: everything not marked slow
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

test-all: $(SETUP_STAMP) ## every test, slow ones included
	$(PY) -m pytest -q $(PYTEST_ARGS)

doctor: $(SETUP_STAMP) ## what the toolchain, torch and GPU look like, and the mode reproduce will use
	$(PY) -m mxfp4_ablation.cli doctor

reproduce: $(SETUP_STAMP) $(STAMPS) ## run every notebook (papermill) into experiments/<run-id>/, figures into figures/
	@echo "reproduce: up to date ($(words $(STAMPS)) notebooks)"

# A notebook reruns only when it, the library or the committed data changed.
experiments/.stamps/%.done: notebooks/%.py $(SOURCES) $(DATA) $(SETUP_STAMP)
	$(PY) -m mxfp4_ablation.notebooks run $<
	@mkdir -p $(@D) && touch $@

figures: $(SETUP_STAMP) ## redraw every figure from stored data alone (no compiling, no measuring)
	$(PY) -m mxfp4_ablation.figures

readme: $(SETUP_STAMP) ## regenerate README.md's ladder table from the latest summary run
	$(PY) -m mxfp4_ablation.studies.gemm readme-table --update README.md

lab: $(SETUP_STAMP) ## JupyterLab on the notebooks (jupytext opens the .py sources as notebooks)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

clean: ## remove caches and run stamps (keeps experiments/ results and figures/)
	rm -rf .cache experiments/.stamps .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The summary reads what the step notebooks wrote: it runs after all of them.
experiments/.stamps/summary.done: $(filter-out experiments/.stamps/summary.done,$(STAMPS))
