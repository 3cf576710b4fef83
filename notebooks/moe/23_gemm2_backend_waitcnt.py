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
# # MoE gemm2 ladder step 3 · `backend_waitcnt`: LLVM owns the non-atomic K-tile fence
#
# aiter PR #3828 replaces the hand-written inline-asm `s_waitcnt vmcnt(16) lgkmcnt(0)` + bare
# `s_barrier` before each K tile's `ds_read` in gemm2's non-atomic (prefill) path with a plain
# barrier: LLVM inserts the LDS-DMA -> `ds_read` wait itself. The atomic (decode) path keeps its
# hand-counted fence on both sides of the PR, so at decode this rung is the same kernel as its
# predecessor.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "moe2-v3"

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
