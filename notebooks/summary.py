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
# # Summary: every optimisation step, side by side
#
# **Dense MXFP4 GEMM** (seed: FlyDSL PR #990 and the AGPR pinning of PR #756). The ladder `gemm-v0` ..
# `gemm-v7` adds one switch per step; the leave-one-out variants `gemm-v7-no-<switch>` remove one switch
# from the full kernel, to show what it is still worth on top of all the others.
#
# * the **static** numbers (every ISA metric per step, and whether each switch moves the metric it is
#   meant to move) come from offline gfx950 compiles, here, on any machine;
# * **correctness** is gathered from the step notebooks' runs (`notebooks/gemm/NN_<switch>.py`), plus
#   the leave-one-out variants checked here (emulator off-device, the GPU on an MI355X);
# * **TFLOPS with confidence intervals** exist only where an MI355X measured them; anywhere else the
#   only TFLOPS shown are PR #990's own, labelled *published*.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
isa_shape = [8192, 8192, 8192]  # where the ISA metrics are read (static_prologue bakes M and N in)
shapes = None  # correctness/timing shapes of the leave-one-out variants; None: the mode's defaults
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
verify_leave_one_out = True

# %%
from IPython.display import SVG, Markdown, display

from mxfp4_ablation.studies import gemm

report = gemm.summary_report(out_dir, mode, isa_shape, shapes, seeds, iterations, verify_leave_one_out)

# %% [markdown]
# ## GEMM ladder: every static metric per step

# %%
report.ladder_table()

# %%
display(SVG(filename=str(report.figures[0])))

# %% [markdown]
# ## Does each switch move its metric the intended way?
# `before` is the predecessor (switch off), `after` the step (switch on); the expectations are the
# switch docstrings' "Metric:" claims (`gemm.EXPECTATIONS`).

# %%
report.expectations[report.expectations["comparison"] == "ladder"].reset_index(drop=True)

# %% [markdown]
# ## Leave-one-out: `gemm-v7` with one switch removed
# `g2s_m0` has no leave-one-out variant: `scale_prefetch` and `b_carry` depend on it.

# %%
report.leave_one_out_table()

# %%
display(SVG(filename=str(report.figures[1])))

# %% [markdown]
# ## Correctness of every variant

# %%
report.correctness

# %% [markdown]
# ## Speed
# Measured TFLOPS per step with 95% bootstrap CIs where this run (or the step runs) had an MI355X;
# otherwise PR #990's published before/after/aiter-asm figures.

# %%
display(report.tflops if report.tflops is not None else gemm.published_wide())
display(SVG(filename=str(report.figures[2])))

# %% [markdown]
# ## The README's ladder table (generated from the tables above)

# %%
Markdown(gemm.readme_table(report.metrics, report.expectations, report.correctness))

# %% [markdown]
# ## MoE (a4w4, aiter PR #3828)
# The MoE half of the summary is added when its ladder lands.
