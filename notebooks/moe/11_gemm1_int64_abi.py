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
# # MoE gemm1 ladder step 1 · `int64_abi`: bare 64-bit addresses as kernel arguments
#
# The first commit of aiter PR #3828 passes each buffer as an i64 address instead of a tensor
# descriptor, shrinking the kernarg segment and the s_load prologue that reads it (the decode claim:
# ~7% faster).

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "moe1-v1"

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
