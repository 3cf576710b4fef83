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
# # MoE gemm1 ladder step 0 · Baseline: every switch off
#
# MoE gemm1 (gate/up projection + silu·mul + MXFP4 requantisation; A staged through LDS, in-kernel
# bf16 -> MXFP4 quantisation at decode, LDS-DMA at prefill, the K dimension fully unrolled, the
# epilogue through LDS) as aiter's FlyDSL kernel stood before aiter PR #3828: tensor-descriptor
# kernel arguments and the library-style exp2 in silu. Every later gemm1 step adds one switch. This
# notebook checks it in both regimes and records its ISA; there is no predecessor to diff against.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "moe1-v0"

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
