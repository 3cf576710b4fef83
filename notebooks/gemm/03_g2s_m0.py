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
baseline = None  # None: the ladder predecessor
shapes = None  # None: the mode's defaults (emulated: 256x256x2048 and 512x512x2048; device: PR #990's)
isa_shape = [8192, 8192, 8192]  # where the ISA is read
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
modelled = True  # the timing model's speed too, where mxfp4_ablation.modelled exists

# %% [markdown]
# The switch's own record (the seed's claim, the mechanism, the metric it should move), rendered:

# %%
from mxfp4_ablation.studies import gemm

step = gemm.step_report(variant, baseline, shapes, mode, seeds, out_dir, iterations, isa_shape,
                        modelled=modelled)
step.intro()

# %% [markdown]
# ## Correctness
# Every check of this variant (the emulator off-device, the GPU on an MI355X), at every shape and seed.

# %%
step.verify

# %% [markdown]
# ## ISA: what changed from the predecessor
# Static counts of the offline gfx950 compile; `step.changed(only_intended=True)` keeps the switch's own.

# %%
step.changed()

# %%
step.expectations

# %%
step.figure("isa_diff")

# %% [markdown]
# ## The hot loop, side by side (predecessor | step)
# `step.hot_loop(regime, lines=None)` shows all of it; `step.isa_text(name)` is the whole `.s`.

# %%
step.hot_loop()

# %% [markdown]
# ## Speed
# Every value says its kind: *measured* (an MI355X, paired A/B with CIs), *modelled* (the timing model,
# where it exists) or *published* (the seed's own figures); a kind that is missing says why.

# %%
step.speed_table()

# %%
step.figure("speed")
