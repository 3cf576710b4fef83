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
# # The gfx950 timing model: what it assumes, and how wrong it is
#
# `gfx950emu.timing` gives the emulator a clock: an issue-level, cycle-approximate model of one CDNA4
# compute unit (4 SIMDs, per-wave in-order issue, one MFMA pipe per SIMD, CU-wide VMEM / LDS / SMEM
# pipes with bank conflicts from the real lane addresses, `s_waitcnt`, `s_barrier`) plus a grid model
# of the MI355X (256 CUs in 8 XCDs, occupancy, rounds, an L2 / HBM traffic floor). It runs the same
# decoded program and functional state as the emulator, so addresses, trip counts and EXEC are exact.
#
# Model 0.2 adds the mechanisms that decide step deltas (issue #21), each with a switch in
# `gfx950.toml [mechanisms]`: the memory hierarchy in ns from the real addresses (vector L1 per CU,
# L2 per XCD with the sharing between co-resident workgroups read off address probes of their own
# workgroup-id arithmetic, MALL, HBM3E; the CU's share of each level's bandwidth, so a round's
# chip-wide prologue / epilogue bursts queue), instruction fetch (64 KiB I-cache shared by two CUs),
# the dependent-VALU latency, LDS-DMA writes on the LDS pipe, the wave-launch ramp, scalar loads in ns.
#
# **Every number below is *modelled*** (label, model version and clock on every table and figure),
# except the column marked *published* (FlyDSL PR #990's own MI355X measurements). The parameters come
# from public sources (`src/gfx950emu/timing/gfx950.toml`, one entry each with unit and source);
# exactly one is fitted: the sustained clock, on one named published point.
#
# 1. micro-kernels: does the model reproduce the cycle counts its parameters document?
# 2. upstream FlyDSL `fp4_gemm_4wave` before / after PR #990 at the PR's four shapes against the
#    published TFLOPS (needs the upstream ISA folder; without it the committed numbers are shown);
# 3. where the model's cycles go, and how sensitive the before/after ratio is to the parameters the
#    sources pin down least.

# %% tags=["parameters"]
upstream_out = None  # folder with flydsl/<commit8>/M<M>_N<N>_K<K>.s (+.json) from `python -m mxfp4_ablation.upstream compile`
sample = 1  # workgroups simulated per point (the first CU's first; 1 vs all 4 at 8192^3 differ by 0.07 %)
run_sensitivity = False  # re-run the before/after pair with each low-confidence parameter changed (~2 min)
run_mechanisms = False  # recompute the mechanism table (each mechanism off in turn; ~1 h on 2 cores) instead of reading the committed CSV
ladder_shape = None  # e.g. [8192, 8192, 8192]: also model the study's GEMM ladder there (compiles every step)
out_dir = None  # set by the runner
mode = None  # set by the runner; this notebook is modelled in every mode

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display
import pandas as pd

from gfx950emu.timing import Params, micro, table
from mxfp4_ablation import modelled, paths, plots

plots.apply_style()
P = Params()
TAG = f"modelled: gfx950emu.timing {P.version}, clock {P.clock_sustained_ghz} GHz (fitted)"
print(TAG)
save = Path(out_dir) if out_dir else None

# %% [markdown]
# ## The parameters and their sources
# Confidence is stated where the public source is weak (latencies, queue depths); those are the ones
# the sensitivity section varies.

# %%
params = pd.DataFrame([{"parameter": k, "value": e["value"], "unit": e["unit"],
                        "confidence": e.get("confidence", "documented"), "source": e["source"]}
                       for k, e in table().items()])
pd.set_option("display.max_colwidth", 160)
params

# %% [markdown]
# ## 1. Micro-kernels against their documented values
# Each is a hand-written one-wave gfx950 kernel (`gfx950emu.timing.micro`); *expected* is what the cited
# parameters say (FP4 16x16x128 MFMA 4 passes = 16 cycles, FP8 8 passes = 32, SrcC chains back to back,
# an MFMA result read by a VALU after passes + 4 wait states, VALU work in the MFMA's shadow, ds_read_b128
# with 0 / 2 / 4-way bank conflicts on 64 banks, an LDS-DMA stream, a vmcnt round trip).
# The tests (`tests/emu/test_timing.py`) assert the same table.

# %%
micro_rows = pd.DataFrame(micro.run())
micro_rows[["case", "modelled_cycles", "expected_cycles", "what"]]

# %% [markdown]
# ### 1b. Micro-kernels against published hardware measurements
# The full model (every mechanism on, at the model clock) against a *published* measurement per
# latency / throughput the model uses: gfx950 where one exists, else MI300X (CDNA3). Rows marked
# `by_construction` use the published value as the model's parameter, so they check only that the
# rest of the path (issue slot, data cycles, `s_waitcnt`) adds little; the MFMA rates are independent
# (the model derives passes from the per-CU rate, the white paper states the chip's peak). Core-clocked
# quantities (LDS) are published in ns at the chip's clock and modelled at the fitted clock, so they
# differ by the clock ratio.

# %%
hw_rows = pd.DataFrame(micro.run_hardware())
hw_rows[["case", "modelled", "published", "unit", "error_pct", "by_construction", "source"]]

# %% [markdown]
# ## 2. Upstream FlyDSL before / after PR #990 against the published TFLOPS
# ISA: FlyDSL's own `kernels/gemm/fp4_gemm_4wave.py` at daee90e4 (before) and 741f3d6d (after),
# compiled offline for gfx950 with FlyDSL 0.5.0 from an ignored checkout
# (`PYTHONPATH=src python -m mxfp4_ablation.upstream compile --flydsl PATH --commit SHA`); never
# vendored. Arguments are zero-filled buffers of the kernel's sizes (a GEMM's control flow does not
# depend on the data). The clock is fitted on **after, M=N=K=8192 = 5033 TFLOPS** only.

# %%
committed = pd.read_csv(paths.reference_dir() / "timing_validation.csv")
if upstream_out and Path(upstream_out, "flydsl").is_dir():
    rows = modelled.upstream_validation(upstream_out, sample=sample)
    points = pd.DataFrame(rows).drop(columns=["kernel"])
    ratios = pd.DataFrame(modelled.ratio_table(rows))
    fitted = modelled.fit_clock(rows)
    print(f"clock that matches the fit point with this model: {fitted:.4f} GHz (frozen value {P.clock_sustained_ghz})")
    source = f"computed now from {upstream_out}"
else:
    print("upstream_out not given (or has no flydsl/ folder): skipping the upstream runs and showing the committed "
          "numbers from experiments/reference/timing_validation.csv instead. To recompute, pass "
          "-p upstream_out /path/to/upstream/out (see `python -m mxfp4_ablation.upstream compile`).")
    rows = None
    points = committed[committed["source"] == "flydsl"].copy()
    ratios = committed[committed["source"] == "ratio after/before"].rename(
        columns={"modelled_tflops": "modelled_after_over_before", "published_tflops": "published_after_over_before",
                 "error_pct": "error_pp"})
    asm = committed[committed["source"] == "ratio aiter_asm/after"].set_index(["M", "N", "K"])
    ratios = ratios.join(asm[["modelled_tflops", "published_tflops"]].rename(
        columns={"modelled_tflops": "modelled_aiter_asm_over_after",
                 "published_tflops": "published_aiter_asm_over_after"}), on=["M", "N", "K"])
    source = "committed experiments/reference/timing_validation.csv"
print(source)
points[["stage", "commit", "M", "N", "K", "modelled_tflops", "published_tflops", "error_pct", "bound",
        "cycles_per_mfma_loop", "mfma_busy", "clock_ghz", "model_version"]]

# %% [markdown]
# ### Error table
# Goals (issue #10): after/before within +-2 percentage points at every shape; absolute TFLOPS within
# +-10 % after the single clock fit; aiter-asm/after on the right side of 1. The aiter kernel is the
# hand-written code object `<upstream_out>/aiter/f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co`, loaded
# with `gfx950emu.codeobject` (two timing-neutral text rewrites, see `modelled.aiter_asm_isa`); without
# the loader its rows are skipped.

# %%
ratios[["M", "N", "K", "modelled_after_over_before", "published_after_over_before", "error_pp",
        "modelled_aiter_asm_over_after", "published_aiter_asm_over_after"]].assign(
    within_2pp=lambda d: d["error_pp"].abs() <= 2,
    asm_side_ok=lambda d: (d["modelled_aiter_asm_over_after"] > 1) == (d["published_aiter_asm_over_after"] > 1))

# %%
abs_err = points[["stage", "M", "N", "K", "error_pct"]].assign(within_10pct=lambda d: d["error_pct"].abs() <= 10)
abs_err

# %%
fig, ax = plt.subplots(figsize=(9, 3.6))
labels = [f"{m}x{n}x{k}" for m, n, k in points[["M", "N", "K"]].drop_duplicates().itertuples(index=False)]
x = range(len(labels))
for j, (stage, col) in enumerate((("before_990", "#9ab"), ("after_990", "#346"))):
    d = points[points["stage"] == stage]
    ax.bar([i + 0.2 * (2 * j - 1) - 0.1 for i in x], d["published_tflops"], 0.18, color=col, alpha=0.35,
           label=f"{stage} published")
    ax.bar([i + 0.2 * (2 * j - 1) + 0.1 for i in x], d["modelled_tflops"], 0.18, color=col,
           label=f"{stage} modelled")
ax.set_xticks(list(x), labels)
ax.set_ylabel("TFLOPS")
ax.legend(ncol=2, fontsize=8, loc="lower right")
ax.set_title("FlyDSL fp4_gemm_4wave on MI355X: published vs modelled")
ax.text(0.01, 0.98, TAG, transform=ax.transAxes, va="top", fontsize=7)
if save:
    fig.savefig(save / "timing_validation.svg")

# %% [markdown]
# ## 3. Where the model's cycles go (8192^3, one workgroup, per SIMD)
# `exposed`: cycles in which a SIMD's MFMA pipe is idle, by what its wave was waiting for. `issue`
# means the wave was issuing other instructions at one per 4-cycle slot (the pipe ran dry because the
# code between MFMAs is longer than the MFMA).

# %%
if rows is not None:
    ex = pd.DataFrame({f"{r['stage']}": r["exposed"] for r in rows if (r["M"], r["N"], r["K"]) == (8192, 8192, 8192)}).T
    ax = ex.plot.barh(stacked=True, figsize=(8, 2.4))
    ax.set_xlabel("exposed cycles per SIMD (one 256x256 workgroup, K=8192)")
    ax.text(0.01, 1.02, TAG, transform=ax.transAxes, fontsize=7)
    if save:
        ax.figure.savefig(save / "timing_exposed.svg")
    display(ex)
else:
    print("needs upstream_out (the committed CSV holds the totals only)")

# %% [markdown]
# ### Sensitivity of the after/before ratio to the low-confidence parameters
# Not a fit: each row changes one parameter and reruns both kernels. (Run with `run_sensitivity=True`.)

# %%
if rows is not None and run_sensitivity:
    sens = pd.DataFrame(modelled.sensitivity(upstream_out, sample=sample))
    display(sens)
else:
    print("skipped (needs upstream_out and run_sensitivity=True)")

# %% [markdown]
# ## 3b. Each mechanism switched off in turn
# PR #990's before / after / aiter-asm at its four shapes with all of model 0.2's mechanisms on
# (`all`) and with one switched off (`gfx950.toml [mechanisms]`, 0 = the 0.1 behaviour), at the frozen
# clock. Not a fit, and no mechanism was kept or dropped by this table: it shows what each one does to
# the published ratio. Committed numbers: `experiments/reference/timing_mechanisms.csv`
# (`python -m mxfp4_ablation.modelled mechanisms --upstream-out OUT --write ...`; `run_mechanisms=True`
# recomputes them).

# %%
mech_csv = paths.reference_dir() / "timing_mechanisms.csv"
if upstream_out and run_mechanisms:
    mech = pd.DataFrame(modelled.mechanism_table(upstream_out, sample=sample))
    print(f"computed now from {upstream_out}")
elif mech_csv.is_file():
    mech = pd.read_csv(mech_csv)
    print(f"committed {mech_csv.name}")
else:
    mech = None
    print("no committed mechanism table and run_mechanisms=False: skipped")
if mech is not None:
    display(mech[["mechanism_off", "M", "N", "K", "before_tflops", "after_tflops", "aiter_asm_tflops",
                  "after_over_before", "published_after_over_before", "error_pp", "model_version"]])
    piv = mech.pivot_table(index="mechanism_off", columns=["M", "N", "K"], values="error_pp")
    print("after/before error (points) by mechanism switched off (modelled):")
    display(piv)

# %% [markdown]
# ## 4. The study's own GEMM ladder (optional: `ladder_shape`)
# Modelled TFLOPS and cycles per MFMA of `gemm-v0` .. `gemm-v9` (one workgroup sampled).
# `serpentine` is the in-wave MFMA emission order (XDL operand reuse): nothing in this model sees
# operand reuse (its channel is power, the calibration issue), so v1 -> v2 is 0 by construction.

# %%
if ladder_shape:
    from mxfp4_ablation import variants

    names = [n for n, v in variants.all_variants().items() if v.family == "gemm" and v.kind == "ladder"]
    lad = pd.DataFrame([{**{"variant": n}, **{k: r[k] for k in ("cycles", "cycles_per_mfma_loop", "model_version",
                                                                  "clock_ghz")},
                         "tflops": r["kernel"]["tflops"], "mfma_busy": r["mfma_busy"][0]}
                        for n in names for r in [modelled.model(n, tuple(ladder_shape), sample=sample)]])
    lad["delta_pct"] = (lad["tflops"].pct_change() * 100).round(2)
    display(lad)
else:
    print("skipped (set ladder_shape, e.g. [8192, 8192, 8192])")

# %% [markdown]
# ## What the model leaves out, and where it misses
# * Left out: power and DVFS (folded into the one fitted clock; the calibration issue replaces it),
#   TLB, VALU register-bank conflicts, dual-issue of packed FP32, the L2 atomic unit's throughput
#   (bf16 atomics cost an L2 round trip and L2 bandwidth only), the slowest of several sampled CUs
#   (the first CU's workgroups stand for all), MoE M=16384 (the full Kimi inputs are built).
# * Assumptions no public source pins (low confidence, see the parameter table): the instruction
#   prefetch depth (1 line), the HBM sustained fraction (0.8), the wave-launch rate, the CDNA3 latencies
#   standing for CDNA4. A cold I-cache is paid once per CU (compute_cycles = warm rounds + cold_cycles).
#
# ### Closing note: the model's error, as measured (model 0.2.0, sample = 1, clock 1.753 GHz fitted on
# after 8192^3 = 5033 TFLOPS; every number modelled except the published column)
# Measured at 8192^3 after the probe-coverage fix (the other three shapes and the full mechanism
# table are regenerated by `make reproduce` / `python -m mxfp4_ablation.modelled mechanisms`):
#
# | kernel | modelled TFLOPS | published | error |
# |---|---|---|---|
# | before (daee90e4) | 4145.7 | 4679 | -11.4 % |
# | after (741f3d6d) | 5030.4 | 5033 | -0.05 % (fit point) |
# | aiter asm | 5106.3 | 5096 | +0.2 % |
#
# * PR #990 after/before at 8192^3: modelled 1.2134 vs published 1.0757 = **+13.8 pp** (model 0.1.0:
#   +5.98 pp). The new mechanisms make the one-sided error larger, not smaller. With the memory
#   hierarchy switched off (fixed 500-cycle VMEM latency) the ratio is 1.0858 (+1.0 pp): the
#   hierarchy is what separates the kernels -- the after kernel's XCD remap gives its co-resident
#   workgroups 5.2 sharers per line against the before kernel's 2.3 (address probes), so the before
#   kernel sends ~2x the bytes beyond L2 and queues on its MALL / HBM share. On the chip that
#   difference costs far less than the model says: the per-CU fluid bandwidth share over-penalises
#   bursts and/or the MI300X latencies are too high for CDNA4. Reported as measured, not tuned.
#   Each mechanism off in turn at 8192^3 (after/before, error vs 1.0757; aiter-asm/after):
#   all on 1.2134 (+13.8 pp; 1.0151) | memory hierarchy off 1.0858 (+1.0 pp; 1.0543) |
#   L2 sharing off 1.2000 (+12.4 pp; 1.0318) | bandwidth queueing off 1.1070 (+3.1 pp; 0.9974) |
#   I-cache off 1.2870 (+21.1 pp; 0.9666) | dependent-VALU latency off 1.2134 (+13.8 pp; 1.0172) --
#   `experiments/reference/timing_mechanisms.csv`. The
#   bandwidth shares (queueing of the chip-wide bursts) carry most of the extra miss.
# * aiter-asm / after at 8192^3: modelled 1.0151 vs published 1.0125 (right side of 1).
# * MoE (M = 4096, measured before the probe-coverage fix, model fingerprint 0.2.0+36765f27dbd3):
#   gemm1 last/first time ratio (moe1-v2 / moe1-v0) = 1375.96 / 1471.97 TFLOPS -> **0.935** vs
#   published 0.981; gemm2 (moe2-v4 / moe2-v0) not measured in time (moe2-v0: 634.4 us).
# * Decode (kimi-decode, M = 16): the CU path now pays the kernarg `s_load`s and the routing loads
#   in ns: moe1-v0 -> moe1-v1 (`int64_abi`, 44 -> 28 scalar loads) is 43.53 -> 43.36 us of CU time
#   (-0.4 %, the right sign), but both kernels sit on the HBM floor (571 MB of expert-weight lines
#   at 0.8 x 8 TB/s = 89.3 us), so the modelled kernel delta is +0.01 %.
