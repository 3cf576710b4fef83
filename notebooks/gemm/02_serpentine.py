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
# # GEMM ladder step 2 · `serpentine`: serpentine MFMA issue order (PR #990)
#
# PR #990 lists this first among its changes by impact: MFMAs are emitted in 2x2 micro-blocks that
# snake across the tile, so consecutive MFMAs reuse an operand register.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "gemm-v2"

# %%
from mxfp4_ablation.studies import step_notebook as nb

step = nb.run(variant, mode, out_dir)  # e.g. nb.run(variant, mode, cases=..., seeds=[0, 1]): see nb.run
nb.intro(step)

# %%
nb.correctness(step)

# %%
nb.isa(step)

# %%
nb.hot_loop(step)  # lines=None: the whole loop

# %%
nb.speed(step)

# %%
nb.modelled(step)  # e.g. shapes=[[8192, 8192, 8192]]: the step at one shape
