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
# # MoE gemm2 ladder step 1 · `int64_abi`: bare 64-bit addresses as kernel arguments
#
# The same ABI change as gemm1's step 1, applied to gemm2: one 8-byte argument per buffer instead of
# a pointer plus a layout block, so fewer kernarg bytes and fewer s_load before the first memory
# access.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
variant = "moe2-v1"
baseline = None  # None: the ladder predecessor
cases = None  # None: the mode's defaults (off-device: the small test MoE, decode and prefill)
isa_cases = None  # None: Kimi-K2.5 at TP 4, decode 16 tokens (block_m 16) and prefill 4096 (block_m 128)
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
modelled = True  # the timing model's speed too (labelled modelled)
modelled_shapes = None  # None: the Kimi shape at 16 and 4096 tokens; or [[tokens, 385, 7168, 512, 9, block_m]]
hot_loop_lines = 80  # rows of the side-by-side hot loop shown; None: all

# %% [markdown]
# The switch's own record (the seed's claim, the mechanism, the metric it should move), rendered:

# %%
from mxfp4_ablation.studies import moe

step = moe.step_report(variant, baseline, cases, mode, seeds, out_dir, iterations, isa_cases,
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
# Per regime, the first `hot_loop_lines` rows (the parameter; None: all); a kernel without a loop says
# so. `step.hot_loop(regime, lines=None)` is the whole loop, `step.isa_text(name, regime)` the whole `.s`.

# %%
from IPython.display import Markdown, display

for regime in step.isa_cases:
    loop = step.hot_loop(regime, lines=None)
    where = f"{regime}: " if regime else ""
    if loop.empty or not (loop != "").any().any():
        display(Markdown(f"*{where}no loop in either kernel* (straight-line code)."))
        continue
    shown = len(loop) if hot_loop_lines is None else min(len(loop), hot_loop_lines)
    display(Markdown(f"{where}{len(loop)} loop rows, the first {shown} shown (`hot_loop_lines`)."))
    display(loop.head(shown))

# %% [markdown]
# ## Speed
# Every value says its kind: *measured* (an MI355X, paired A/B with CIs), *modelled* (the gfx950emu timing
# model) or *published* (the seed's own figures); a kind that is missing says why.

# %%
step.speed_table()

# %%
step.figure("speed")

# %% [markdown]
# ## What this step buys, *modelled*
# The gfx950emu timing model (every value labelled *modelled*, with the model's version and clock; never
# measured): the step and its predecessor at the Kimi-K2.5 TP=4 shape,
# decode (M=16) and prefill (M=4096) (parameter `modelled_shapes`); the delta in % with
# its interval from the model's held-out residuals (the rule is printed below, from
# `experiments/reference/calibration.csv`; resolved = the interval excludes 0) and what bounds it.

# %%
from mxfp4_ablation.studies import modelled_section

model = modelled_section.step_section(step, modelled_shapes) if modelled else None
display(model.table() if model else Markdown("*Not modelled in this run* (`modelled = False`)."))
if model:
    display(Markdown(f"Interval: {model.band['rule']}."))

# %% [markdown]
# The seed's claim for this step, and whether the model sees it (sign; size where the claim states one):

# %%
if model:
    display(Markdown(model.verdict_lines()))
    display(model.figure("speed_delta"))

# %% [markdown]
# ### Where the cycles go (modelled)
# MFMA-busy and exposed cycles by reason per SIMD (predecessor | step), and each one's timeline (4 waves
# + the MFMA pipes): two trips of the hot loop, or, for a kernel without one (MoE gemm1), the window
# where wave 0's instruction stream differs from the predecessor's (e.g. exp2's epilogue).

# %%
if model:
    display(model.figure("speed_cycles"))
