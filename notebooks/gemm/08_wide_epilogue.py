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
# # GEMM ladder step 8 · `wide_epilogue`: 16-byte C stores (PR #990)
#
# The epilogue computes C transposed (swapped MFMA operands) and pairs tiles with
# `v_permlane16_swap`, so each lane stores 16 bytes at once instead of 2.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "gemm-v8"

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
