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
# # GEMM ladder step 7 · `zero_first_k`: constant-zero first K step (PR #990)
#
# PR #990 stops zero-initialising the 256 AGPR accumulators: K step 0's first-K-half MFMAs take the
# inline constant 0 as src2, so the 256 `v_accvgpr_write` of PR #756's kernel go.
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
variant = "gemm-v7"

# %%
from mxfp4_ablation.studies import gemm

gemm.step_report(variant, baseline, shapes, mode, seeds, out_dir, iterations).show()
