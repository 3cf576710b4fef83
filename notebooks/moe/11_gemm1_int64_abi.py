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
# The first commit of aiter PR #3828 passes each buffer as an i64 address instead of a tensor descriptor,
# shrinking the kernarg segment and the s_load prologue that reads it (the decode claim: ~7% faster).
#
# The seed's own words for this step (from the switch docstring in the kernel module), the emulator
# checks in both regimes (decode: block_m 16, atomic gemm2; prefill: block_m 128), the ISA diff against
# the predecessor at the Kimi-K2.5 TP=4 shape (decode M=16, prefill M=4096) and the speed view all come
# from `mxfp4_ablation.studies.moe.step_report`; tables land in this run's folder, figures under
# `figures/moe/`.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
baseline = None  # None: the ladder predecessor
cases = None  # None: the mode's defaults ({"decode": "16,8,512,256,2,16", "prefill": "200,8,512,256,2,128"} off-device)
isa_cases = None  # None: the Kimi-K2.5 TP4 shape, decode 16 tokens (block_m 16) and prefill 4096 tokens (block_m 128)
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
variant = "moe1-v1"

# %%
from mxfp4_ablation.studies import moe

moe.step_report(variant, baseline, cases, mode, seeds, out_dir, iterations, isa_cases).show()
