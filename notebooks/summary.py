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
# `gemm-v9` adds one switch per step; the leave-one-out variants `gemm-v9-no-<switch>` remove one switch
# from the full kernel, to show what it is still worth on top of all the others.
#
# * the **static** numbers (every ISA metric per step, and whether each switch moves the metric it is
#   meant to move) come from offline gfx950 compiles, here, on any machine;
# * **correctness** is gathered from the step notebooks' runs (`notebooks/gemm/NN_<switch>.py`), plus
#   the leave-one-out variants checked here (emulator off-device, the GPU on an MI355X);
# * **TFLOPS with confidence intervals** (*measured*) exist only where an MI355X measured them; no
#   number in this notebook is measured off-device;
# * **modelled** TFLOPS and step deltas come from the gfx950emu timing model (labelled *modelled* with
#   its version and clock, each delta with the model's error band; never a measurement), beside PR
#   #990's own figures, labelled *published*.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
isa_shape = [8192, 8192, 8192]  # where the ISA metrics are read (static_prologue bakes M and N in)
shapes = None  # correctness/timing shapes of the leave-one-out variants; None: the mode's defaults
seeds = [0]
iterations = 100  # timed A/B pairs per process (device mode only)
verify_leave_one_out = True
modelled = True  # the timing model's per-step deltas, waterfall, leave-one-out, order of impact, MoE ratios
fidelity = True  # first/last rungs vs the seeds' before/after kernels (compiles both rungs at the upstream shapes)
attribution = True  # Shapley attribution over switch subsets (modelled; needs modelled = True)
attribution_pairs = 2  # GEMM: antithetic pairs of sampled orderings (its 240 subsets are `make attribution-exact`)
attribution_scheduler = "local"  # the sweep engine's Dask scheduler for the GEMM subsets when work_first is off (local, local:N, an address)
work_first = True  # run the sections' compiles, emulator runs and model points first, spread over workers
work_scheduler = "local"  # where that work runs (the sweep engine's schedulers: local, local:N, inline, an address)

# %% [markdown]
# ## The work first
# What the sections below compute -- every compile, the leave-one-out emulator runs, every modelled
# point and attribution subset -- is cached on disk by content, so it runs here first as one sweep over
# the sweep engine's workers (one per core); the sections then read it from the caches and show the same
# tables and figures. One row per kind of task: how many, how many were already cached, their CPU time.

# %%
from mxfp4_ablation.studies import summary_work

if work_first:
    work = summary_work.prefetch(["gemm", "moe"], mode, cases={"gemm": (isa_shape, shapes)},
                                 verify_leave_one_out=verify_leave_one_out, fidelity=fidelity, modelled=modelled,
                                 attribution=attribution, attribution_pairs={"gemm": attribution_pairs},
                                 scheduler=work_scheduler)
    display(summary_work.overview(work))

# %%
from IPython.display import Markdown, display

from mxfp4_ablation import fidelity as fid_view
from mxfp4_ablation.studies import gemm

report = gemm.summary_report(out_dir, mode, isa_shape, shapes, seeds, iterations, verify_leave_one_out,
                             fidelity=fidelity)

# %% [markdown]
# ## GEMM ladder: every static metric per step

# %%
report.ladder_table()

# %%
report.figure("ladder_metrics")

# %% [markdown]
# ## Does each switch move its metric the intended way?
# `before` is the predecessor (switch off), `after` the step (switch on); the expectations are the
# switch records' expected metric moves.

# %%
report.expectations[report.expectations["comparison"] == "ladder"].reset_index(drop=True)

# %% [markdown]
# ## Leave-one-out: `gemm-v9` with one switch removed
# `g2s_m0` has no leave-one-out variant: `scale_prefetch` and `b_carry` depend on it.

# %%
report.leave_one_out_table()

# %%
report.figure("leave_one_out")

# %% [markdown]
# ## Correctness of every variant

# %%
report.correctness

# %% [markdown]
# ## Speed: measured or published
# Measured TFLOPS per step with 95% bootstrap CIs where this run (or the step runs) had an MI355X;
# otherwise PR #990's published before/after/aiter-asm figures (*published*). The modelled speed of every
# step follows in the next section.

# %%
display(report.measured if report.measured is not None else gemm.published_wide())
display(report.figure("published_tflops"))

# %% [markdown]
# ## What each step buys, *modelled* (GEMM)
# The gfx950emu timing model over every rung at PR #990's four shapes and every leave-one-out variant at
# 8192^3 (labelled *modelled* with the model's version and clock; never measured). The waterfall, one
# column per shape: `agpr_acc` (PR #756, before the seed) on its own axis, then PR #990's span from
# `gemm-v1` as a waterfall of each step's modelled % change with the interval its delta table stores,
# the modelled total, and PR #990's published before -> after (orange, *published*).

# %%
from mxfp4_ablation.studies import modelled_section

gemm_model = modelled_section.summary_section(gemm.STUDY, report.out_dir) if modelled else None
if gemm_model:
    display(Markdown(f"Error band of a modelled delta: {gemm_model.band['rule']}."))
    display(gemm_model.deltas[["variant", "switch", "shape", "baseline_tflops", "tflops", "delta_pct", "band_pp",
                               "resolved", "bound", "model_version", "clock_ghz"]])
    display(gemm_model.figure("modelled_waterfall"))

# %% [markdown]
# ### Leave-one-out, modelled: what removing each switch from `gemm-v9` costs

# %%
if gemm_model:
    display(gemm_model.tables["modelled_leave_one_out"])
    display(gemm_model.figure("modelled_leave_one_out"))

# %% [markdown]
# ### Order of impact: PR #990's list ("roughly in descending order of impact") against the model
# The PR ranks serpentine, scale through LDS, the m0 idiom and the wide epilogue in that order (the items
# we could read; `agpr_acc` is PR #756's). Spearman's rho of the PR's rank against the modelled step delta
# and the modelled leave-one-out loss at 8192^3:

# %%
if gemm_model:
    display(gemm_model.tables["modelled_order"])
    display(Markdown(f"rho (step deltas) = {gemm_model.stats['order']['rho_step']:.2f}, rho (leave-one-out) = "
                     f"{gemm_model.stats['order']['rho_loo']:.2f} over {gemm_model.stats['order']['n']} switches"))
    display(Markdown("\n".join(f"* {f}" for f in gemm_model.findings())))

# %% [markdown]
# ### What each step buys, independent of the ladder order: Shapley attribution, *modelled*
# A ladder delta is a switch's gain given the switches before it; a leave-one-out loss its gain given all
# the others. The Shapley share averages its gain over every order (a switch whose requirement is off does
# nothing: `g2s_m0` shares in what `scale_prefetch` and `b_carry`, which need it, buy), so the shares add
# up exactly to the whole ladder's log gain. GEMM: 240 valid subsets, so the pipeline samples orderings
# (the ladder order and its reverse first, antithetic pairs; `make attribution-exact` does all 240); the
# interval adds the sampling interval and the model's per-step uncertainty. Three views side by side, all in
# log-% of TFLOPS; then the pairwise interactions (the pairs that make orders disagree) and PR #990's order
# of impact against the Shapley ranking, with a bootstrap interval on the rank correlation.

# %%
from mxfp4_ablation.studies import attribution_views

# After the work-first sweep every subset is in the timing cache: read here, no cluster to start.
gemm_attr = (attribution_views.summary_section("gemm", report.out_dir, pairs=attribution_pairs,
                                               scheduler="inline" if work_first else attribution_scheduler)
             if modelled and attribution else None)
if gemm_attr:
    display(gemm_attr.table())
    display(gemm_attr.figure("attribution_shares"))
    display(gemm_attr.figure("attribution_interactions"))
    display(gemm_attr.tables["attribution_order"])
    display(Markdown("\n".join(f"* {f}" for f in gemm_attr.findings())))

# %% [markdown]
# ## Fidelity: does the ladder start at the seed's "before" and end at its "after"?
# Our first and last rungs against FlyDSL's kernel before and after PR #990, fingerprint metric by metric
# (static counts; the upstream numbers are committed in `experiments/reference/fingerprints.csv`).

# %%
if report.fidelity is not None:
    display(fid_view.summary(report.fidelity))
    display(fid_view.wide(report.fidelity[report.fidelity["case"] == fid_view.FIGURE_CASES["gemm"]]))
    display(report.figure("fidelity"))
else:
    display(Markdown(f"*Not shown:* {report.fidelity_note}"))

# %% [markdown]
# ## The README's ladder table (generated from the tables above)
# The same table `make readme` writes into README.md: static counts, correctness and, where this run
# modelled them, the *modelled* TFLOPS and deltas with the model's error band.

# %%
from mxfp4_ablation.studies import readme as readme_mod

Markdown(readme_mod.ladder_table(gemm.STUDY, report.metrics, report.expectations, report.correctness,
                                 modelled_section.readme_columns("gemm", report.out_dir) if modelled else None,
                                 modelled_section.readme_note("gemm", report.out_dir) if modelled else ""))

# %% [markdown]
# ## MoE (a4w4, aiter PR #3828)
# **gemm1** (gate/up + silu·mul + requantisation; ladder `moe1-v0` .. `moe1-v2`) and **gemm2** (down
# projection; `moe2-v0` .. `moe2-v4`), each switch one step; the leave-one-out variants
# `moe1-v2-no-<switch>` / `moe2-v4-no-<switch>` remove one switch from the full kernel. The ISA is read at
# the Kimi-K2.5 TP=4 shape (385 experts, hidden 7168, inter 512, top-9) in both regimes: decode (16
# tokens, block_m 16, atomic gemm2) and prefill (4096 tokens, block_m 128). Correctness comes from the
# step notebooks (`notebooks/moe/NN_<gemm>_<switch>.py`) plus the leave-one-out variants checked here.
# aiter PR #3828 published FlyDSL-time / HIP-time ratios for the whole PR only; they are shown labelled
# *published*, and the timing model's last/first ratios beside them, labelled *modelled* (nothing in this
# notebook is measured off-device).

# %%
from mxfp4_ablation.studies import moe

moe_report = moe.summary_report(out_dir, mode, seeds=seeds, verify_leave_one_out=verify_leave_one_out,
                                fidelity=fidelity)

# %% [markdown]
# ### MoE ladders: every static metric per step, per gemm and regime

# %%
for gemm_name in ("gemm1", "gemm2"):
    for regime in moe.REGIMES:
        display(Markdown(f"**{gemm_name}, {regime}**"))
        display(moe_report.ladder_table(gemm_name, regime))

# %%
moe_report.figure("ladder_metrics")

# %% [markdown]
# ### Does each MoE switch move its metric the intended way (both regimes)?
# `before` is the predecessor (switch off), `after` the step (switch on); the expectations are the switch
# records' expected metric moves.

# %%
moe_report.expectations[moe_report.expectations["comparison"] == "ladder"].reset_index(drop=True)

# %% [markdown]
# ### MoE leave-one-out: the full kernel with one switch removed

# %%
moe_report.leave_one_out_table()

# %%
moe_report.figure("leave_one_out")

# %% [markdown]
# ### MoE correctness of every variant (passed = every check passed, in both regimes)

# %%
moe_report.correctness

# %% [markdown]
# ### MoE speed
# Measured A/B time ratios (step / predecessor, 95% CIs) where the step runs had an MI355X; otherwise
# only aiter PR #3828's own FlyDSL-time / HIP-time ratios, labelled *published* (nothing here is measured).

# %%
display(moe_report.measured if moe_report.measured is not None else moe.published_wide())
display(moe_report.figure("published_ratios"))

# %% [markdown]
# ### MoE, *modelled*: last rung / first rung per token count, beside aiter PR #3828
# Modelled time of `moe1-v2` / `moe1-v0` (gemm1) and `moe2-v4` / `moe2-v0` (gemm2) at the Kimi-K2.5 TP=4
# shape for M = 16, 128, 1024 (decode, block_m 16) and 4096, 16384 (prefill, block_m 128; the timing runs
# build only the sampled workgroups' inputs: a model run at 16384 tokens peaked at 908-921 MB, measured in
# `experiments/bench-pipeline/README.md`). The published column is PR #3828's change of its FlyDSL-time /
# HIP-time ratio, after / before (the HIP time cancels), where the PR states one.

# %%
moe_model = modelled_section.summary_section(moe.STUDY, report.out_dir) if modelled else None
if moe_model:
    display(moe_model.tables["modelled_moe_ratios"])
    display(moe_model.figure("modelled_ratios"))
    display(moe_model.deltas[["gemm", "variant", "switch", "shape", "baseline_us", "us", "delta_pct", "band_pp",
                              "bound", "model_version", "clock_ghz"]])
    display(moe_model.figure("modelled_leave_one_out"))
    display(Markdown("\n".join(f"* {f}" for f in moe_model.findings())))

# %% [markdown]
# ### MoE: what each step buys, independent of the ladder order (Shapley attribution, *modelled*)
# Exact (every valid subset: 4 for gemm1, 16 for gemm2) at the decode and prefill ISA shapes, run in this
# process (the Kimi-shape inputs take GBs per process, so no extra workers); aiter PR #3828's quantified
# claims against the Shapley ranking.

# %%
moe_attr = (attribution_views.summary_section("moe", report.out_dir, scheduler="inline")
            if modelled and attribution else None)
if moe_attr:
    display(moe_attr.table())
    display(moe_attr.figure("attribution_shares"))
    display(moe_attr.figure("attribution_interactions"))
    display(moe_attr.tables["attribution_order"])
    display(Markdown("\n".join(f"* {f}" for f in moe_attr.findings())))

# %% [markdown]
# ### MoE fidelity: first/last rungs against aiter's kernels before and after PR #3828

# %%
if moe_report.fidelity is not None:
    display(fid_view.summary(moe_report.fidelity))
    display(fid_view.wide(moe_report.fidelity))
    display(moe_report.figure("fidelity"))
else:
    display(Markdown(f"*Not shown:* {moe_report.fidelity_note}"))
