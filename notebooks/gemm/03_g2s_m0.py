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
# # GEMM ladder step 3 · `g2s_m0`: m0 set once, `s_add` per LDS-DMA load (PR #990)
#
# The global-to-LDS copies stop recomputing the LDS pointer and the lane offsets per load: `m0` is
# set once per batch and advanced with `s_add_u32`, the K offset rides in `soffset`.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "gemm-v3"

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
