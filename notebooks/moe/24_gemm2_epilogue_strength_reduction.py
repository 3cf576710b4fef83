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
# # MoE gemm2 ladder step 4 · `epilogue_strength_reduction`: one row product per lane
#
# aiter PR #3828 computes the non-atomic (prefill) epilogue's row x N_OUT byte offset once per lane
# and adds compile-time offsets per stored element, instead of a 64-bit multiply-add per stored row.
# The atomic (decode) epilogue's offsets are 32-bit on both sides of the PR: at decode this rung is
# the same kernel as its predecessor.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "moe2-v4"

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
