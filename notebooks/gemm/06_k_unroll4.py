# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: MXFP4 ablation
#     language: python
#     name: mxfp4-ablation
# ---

# %% [markdown]
# # GEMM ladder step 6 · `k_unroll4`: four K steps per loop iteration, two peeled (PR #990)
#
# PR #990 runs the K loop four steps at a time (two when the step count does not divide), with K steps
# 0 and 1 before the loop and the last two after it: the loop body's MFMAs go from 256 to 512 and the
# program's from 768 to 1024 (8192^3).
#
# The seed's own words for this step (from the switch docstring in `src/mxfp4_ablation/kernels/gemm.py`),
# the correctness checks, the ISA diff against the predecessor and the speed view all come from
# `mxfp4_ablation.studies.gemm.step_report`; tables land in this run's folder, figures under
# `figures/gemm/`.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
baseline = None  # None: the ladder predecessor
shapes = None  # None: the mode's defaults (emulated: 256x256x2048 and 512x512x2048; device: PR #990's shapes)
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
variant = "gemm-v6"

# %%
from mxfp4_ablation.studies import gemm

gemm.step_report(variant, baseline, shapes, mode, seeds, out_dir, iterations).show()
