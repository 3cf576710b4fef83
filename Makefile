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

# Which python can run our standard-library-only helpers before setup (the venv's once it exists).
PYX := $(if $(wildcard $(PY)),$(PY),$(PYTHON))
# `make -n ...`: a dry run (it plans, runs nothing but the deps.mk regeneration).
DRY_RUN := $(findstring n,$(filter-out -%,$(firstword $(MAKEFLAGS))))

NOTEBOOKS := $(shell find notebooks -name '*.py' -not -path '*/.ipynb_checkpoints/*' | sort)
# Where the "this notebook ran with these inputs" stamps live (a variable so tests can use a scratch one).
STAMP_DIR ?= experiments/.stamps
STAMPS := $(patsubst notebooks/%.py,$(STAMP_DIR)/%.done,$(NOTEBOOKS))
# Every file under src/ (sources and package data), for regenerating the dependency rules.
SOURCES := $(shell find src -type f -not -path '*/__pycache__/*' -not -name '*.pyc')
# Each notebook's own inputs (the modules it imports, followed through src/, with their packages' data
# files such as gfx950emu/timing/gfx950.toml, its family's kernel modules, the data it reads),
# generated with the standard library only; see mxfp4_ablation.notebooks.
DEPS_MK := $(STAMP_DIR)/deps.mk
LOCK := $(STAMP_DIR)/reproduce.lock
# How one notebook is run (a variable so that the Makefile's own behaviour can be tested cheaply).
RUN_NOTEBOOK ?= $(PY) -m mxfp4_ablation.notebooks run
# Notebooks `make reproduce` runs at once (default: one per core; `make -jN reproduce` or JOBS=N wins).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: help setup test test-all chaos reproduce _reproduce figures readme lab clean doctor llvm

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(SETUP_STAMP) ## venv with pinned deps and the Jupyter kernel (idempotent)

# The venv belongs to the checkout it was made in: its editable install, script shebangs and Jupyter
# kernelspec name that path. The stamp records it; in a copied or moved checkout it (or the venv's own
# VIRTUAL_ENV) differs, and the venv is rebuilt from scratch (venv --clear) before anything runs.
SETUP_PATH := $(filter /%,$(strip $(shell head -c 4096 $(SETUP_STAMP) 2>/dev/null | head -n1)))
VENV_PATH := $(strip $(shell sed -n "s/^ *VIRTUAL_ENV=['\"]\{0,1\}\([^'\"]*\).*/\1/p" $(VENV)/bin/activate 2>/dev/null | head -n1))
ifneq ($(wildcard $(SETUP_STAMP)),)
ifneq ($(or $(and $(SETUP_PATH),$(filter-out $(CURDIR),$(SETUP_PATH))),$(and $(VENV_PATH),$(filter-out $(abspath $(VENV)),$(VENV_PATH)))),)
$(info setup: $(VENV) was made for $(or $(filter-out $(CURDIR),$(SETUP_PATH)),$(VENV_PATH)), not this checkout ($(CURDIR)): rebuilding it)
VENV_CLEAR := --clear
$(SETUP_STAMP): FORCE
endif
endif
.PHONY: FORCE
FORCE:

# A torch that the base interpreter already has (a ROCm or CUDA build) is kept: the venv then sees
# the system site-packages and the torch pin is left out. Otherwise torch==2.13.0 (CPU) is installed.
# pip byte-compiles nothing (--no-compile: a minute on 2 cores, mostly modules nothing imports); the
# bytecode of the modules the pipeline imports is written next (mxfp4_ablation.bytecode, ~25 s).
$(SETUP_STAMP): requirements.txt pyproject.toml
	@$(MAKE) --no-print-directory llvm
	@if $(PYTHON) -c 'import torch' >/dev/null 2>&1; then \
	  echo "setup: keeping the installed torch $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	  $(PYTHON) -m venv $(VENV_CLEAR) --system-site-packages $(VENV); \
	  grep -v '^torch==' requirements.txt > $(VENV)/requirements.txt; \
	else \
	  $(PYTHON) -m venv $(VENV_CLEAR) $(VENV); \
	  cp requirements.txt $(VENV)/requirements.txt; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -r $(VENV)/requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -e .
	$(PY) -m mxfp4_ablation.bytecode
	$(PY) -m ipykernel install --sys-prefix --name $(JUPYTER_KERNEL) --display-name "MXFP4 ablation" >/dev/null
	$(PY) -m mxfp4_ablation.cli doctor
	@echo "$(CURDIR)" > $@

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

chaos: $(SETUP_STAMP) ## break the results as a user would (edit, SIGKILL, flip bytes, run by hand): nothing stale
	$(PY) -m pytest -m chaos -q $(PYTEST_ARGS) tests/test_chaos.py

test-all: $(SETUP_STAMP) ## every test, slow ones included
	$(PY) -m pytest -q $(PYTEST_ARGS)

doctor: $(SETUP_STAMP) ## what the toolchain, torch and GPU look like, and the mode reproduce will use
	$(PY) -m mxfp4_ablation.cli doctor

# One `make reproduce` at a time: the lock is held by this recipe for the whole (sub-)make, so every
# notebook of a second run would otherwise run twice; a second one is refused in one line (checked
# when the Makefile is read, and again, race-free, by flock). The sub-make runs JOBS notebooks at once
# (the summary still waits for all of them) in its own process group: SIGINT / SIGTERM / SIGHUP to
# make (or to this recipe) are forwarded to that whole group, so the sub-make, the notebook runners
# and their kernels stop, and the lock is released when the last of them exits.
REPRODUCE_REFUSED = reproduce: another 'make reproduce' is running in this checkout (lock $(LOCK)); wait for it to finish or stop it
ifneq ($(filter reproduce,$(MAKECMDGOALS)),)
ifeq ($(shell mkdir -p $(dir $(LOCK)) && flock -n $(LOCK) true 2>/dev/null && echo free),)
$(error $(REPRODUCE_REFUSED))
endif
endif
# MODE is checked before anything runs: a bad value, or MODE=device without a gfx950 GPU, is one line.
ifneq ($(filter reproduce _reproduce $(STAMP_DIR)/%,$(MAKECMDGOALS)),)
ifneq ($(strip $(MODE)),)
ifeq ($(filter $(strip $(MODE)),device emulated static),)
$(error MODE='$(MODE)' is not one of device, emulated, static (or leave it unset: auto-detect))
endif
ifeq ($(strip $(MODE)),device)
MODE_ERROR := $(shell PYTHONPATH=src $(PYX) -m mxfp4_ablation.notebooks check-mode 2>&1)
ifneq ($(MODE_ERROR),)
$(error $(MODE_ERROR))
endif
endif
endif
endif
# The internal targets run notebooks only under the lock (`make -n` may plan them without it).
ifneq ($(filter _reproduce $(STAMP_DIR)/%,$(MAKECMDGOALS)),)
ifeq ($(REPRODUCE_LOCK_HELD)$(DRY_RUN),)
$(error $(firstword $(filter _reproduce $(STAMP_DIR)/%,$(MAKECMDGOALS))) is internal: run 'make reproduce' (it takes the lock)$(if $(shell flock -n $(LOCK) true 2>/dev/null || echo held), -- and another one is running now))
endif
endif

# When a notebook is to run, the mode is detected once here (it imports torch) and passed to every
# notebook run (MXFP4_DETECTED_MODE); `make -q` asks whether anything is stale, running nothing.
reproduce: $(SETUP_STAMP) ## run every notebook (papermill) into experiments/<run-id>/, figures into figures/
	@mkdir -p $(dir $(LOCK))
	@set -m; \
	if ! REPRODUCE_LOCK_HELD=1 $(MAKE) -q --no-print-directory $(STAMPS) >/dev/null 2>&1 && \
	  detected=$$(PYTHONPATH=src $(PYX) -m mxfp4_ablation.notebooks detect-mode 2>/dev/null); then \
	  export MXFP4_DETECTED_MODE="$$detected"; fi; \
	REPRODUCE_LOCK_HELD=1 flock -n -E 75 $(LOCK) $(MAKE) --no-print-directory \
	  $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS)) --output-sync=line _reproduce & pid=$$!; \
	for sig in INT TERM HUP; do trap "kill -s $$sig -- -$$pid 2>/dev/null || true" $$sig; done; \
	rc=0; while :; do wait $$pid && rc=0 || rc=$$?; kill -0 $$pid 2>/dev/null || break; done; \
	if [ $$rc = 75 ]; then echo "$(REPRODUCE_REFUSED)" >&2; fi; \
	exit $$rc

_reproduce: $(STAMPS)
	@echo "reproduce: up to date ($(words $(STAMPS)) notebooks)"

# A unique temp name: two makes (a run and a `make -n`) may regenerate it at once.
$(DEPS_MK): $(NOTEBOOKS) $(SOURCES) experiments/shapes.toml
	@mkdir -p $(@D)
	@tmp=$$(mktemp $@.XXXXXX.tmp) && trap 'rm -f "$$tmp"' EXIT && \
	  PYTHONPATH=src $(PYX) -m mxfp4_ablation.notebooks deps --stamps $(STAMP_DIR) > "$$tmp" && mv "$$tmp" $@

# Only the targets that run notebooks need the dependency rules (`make help` stays instant).
ifneq ($(filter _reproduce $(STAMP_DIR)/%,$(MAKECMDGOALS)),)
include $(DEPS_MK)
endif

# A notebook reruns only when it or one of its inputs changed (the rules in $(DEPS_MK)). The stamp is
# touched only after the run published its folder; an interrupted run publishes nothing, stamps nothing.
# The runner records the inputs' digest and the run's compiles in the stamp (MXFP4_STAMP) and skips a run
# whose inputs changed only in comments or layout, or only in kernel builder code that still compiles to
# the same code (mxfp4_ablation.notebooks.run).
$(STAMP_DIR)/%.done: export MXFP4_STAMP = $@
$(STAMP_DIR)/%.done: notebooks/%.py $(SETUP_STAMP)
	$(RUN_NOTEBOOK) $<
	@mkdir -p $(@D) && touch $@

figures: $(SETUP_STAMP) ## redraw every figure from stored data alone (no compiling, no measuring)
	$(PY) -m mxfp4_ablation.figures

readme: $(SETUP_STAMP) ## regenerate README.md's generated tables from the latest summary run
	$(PY) -m mxfp4_ablation.studies readme-table --update README.md

# --no-browser: print the URL to open (a headless machine has no browser); --allow-root: Jupyter refuses
# to start as root without it (containers).
LAB_FLAGS ?= --no-browser $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(SETUP_STAMP) ## JupyterLab on the notebooks (jupytext opens the .py sources as notebooks)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(LAB_FLAGS)

clean: ## remove caches and run stamps (keeps experiments/ results and figures/)
	rm -rf .cache $(STAMP_DIR) .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The summary reads what the step notebooks wrote: it runs after all of them.
$(STAMP_DIR)/summary.done: $(filter-out $(STAMP_DIR)/summary.done,$(STAMPS))

# ---- make upstream -------------------------------------------------------------------------------
# The upstream kernels the study compares against, as a user would get them: FlyDSL (daee90e4, 741f3d6d)
# and aiter (46ecc4489, b242ba66a) fetched with git at the pinned commits into the ignored upstream/
# folder, Debian's rocm-device-libs bitcode (apt-get download; the three kernels that call ocml/ockl
# need it), every kernel compiled offline into upstream/out (cached). Without network point the
# sources at a local clone or mirror: make upstream FLYDSL_GIT=/path/FlyDSL AITER_GIT=/path/aiter;
# DEVICE_LIBS=<amdgcn/bitcode folder> or ROCM_DEVICE_LIBS_DEB=<the .deb> skip apt-get.
# Then: python -m mxfp4_ablation.upstream fingerprints (experiments/reference/fingerprints.csv),
# python -m mxfp4_ablation.modelled validate --upstream-out upstream/out --write experiments/reference/timing_validation.csv
.PHONY: upstream
UPSTREAM_DIR ?= upstream
FLYDSL_GIT ?= https://github.com/ROCm/FlyDSL.git
AITER_GIT ?= https://github.com/ROCm/aiter.git
DEVICE_LIBS ?=
ROCM_DEVICE_LIBS_DEB ?=
upstream: $(SETUP_STAMP) ## fetch + compile the upstream FlyDSL / aiter kernels into upstream/ (ignored)
	PYTHONPATH=src $(PY) -m mxfp4_ablation.upstream build --root $(UPSTREAM_DIR) \
	  --flydsl-git "$(FLYDSL_GIT)" --aiter-git "$(AITER_GIT)" \
	  $(if $(DEVICE_LIBS),--device-libs "$(DEVICE_LIBS)") $(if $(ROCM_DEVICE_LIBS_DEB),--device-libs-deb "$(ROCM_DEVICE_LIBS_DEB)")

# ---- Shapley attribution over switch subsets (#23), on the Dask sweep engine. `make reproduce` runs the
# sampled GEMM form in the summary (the MoE forms are exact there); this target does every valid subset
# (GEMM: 240) into experiments/<run-id>-attribution-<study>/. ATTRIB_SCHEDULER: local (a LocalCluster sized
# to this machine), local:N, slurm / pbs (dask-jobqueue), or a running scheduler's address.
ATTRIB_SCHEDULER ?= local
.PHONY: attribution-exact attribution-bench
attribution-exact: $(SETUP_STAMP) ## exact Shapley attribution of both studies (every valid subset, Dask)
	$(PY) -m mxfp4_ablation.cli attribution --study gemm --method exact --scheduler $(ATTRIB_SCHEDULER)
	$(PY) -m mxfp4_ablation.cli attribution --study moe --method exact --scheduler $(ATTRIB_SCHEDULER)

attribution-bench: $(SETUP_STAMP) ## time a cold GEMM attribution on 1 and 2 Dask workers (writes experiments/attribution-bench)
	$(PY) -m mxfp4_ablation.studies.sweep_bench --workers 1,2

# Pipeline profile (a benchmark, measured: per-notebook wall / CPU time by phase, see
# src/mxfp4_ablation/bench_pipeline.py); BENCH_ARGS e.g. "--label after --cache warm notebooks/summary.py".
BENCH_ARGS ?= --label profile
.PHONY: bench-pipeline
bench-pipeline: $(SETUP_STAMP) ## profile a few notebooks by phase into experiments/bench-pipeline/ (measured)
	$(PY) -m mxfp4_ablation.bench_pipeline $(BENCH_ARGS)

# `make reproduce` from a fresh clone of HEAD (setup included), again, then after a comment and after a
# code edit of one step (a benchmark, measured; src/mxfp4_ablation/bench_reproduce.py). About half an hour.
.PHONY: bench-reproduce
bench-reproduce: $(SETUP_STAMP) ## time make reproduce from a fresh clone, then a one-step edit (measured)
	$(PY) -m mxfp4_ablation.bench_reproduce $(BENCH_REPRODUCE_ARGS)
