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
# # 00 · Walkthrough: from a FlyDSL kernel to gfx950 ISA, with no AMD GPU
#
# Every later notebook stands on this pipe: a FlyDSL kernel of ours is compiled **offline** for
# gfx950 (`COMPILE_ONLY=1 ARCH=gfx950`, with `ld.lld` staged by `mxfp4_ablation.toolchain`), its final
# ISA is parsed into metrics (`mxfp4_ablation.isa`), the numbers are stored with provenance
# (`experiments/<run-id>/*.parquet` + `.json`) and drawn into a deterministic figure.
#
# The kernels here are the two smallest of the project: a `y = 2x` probe, and one wave computing a
# 16x16 tile with the scaled MFMA `v_mfma_scale_f32_16x16x128_f8f6f4` (fp4 x fp4, E8M0 scales applied
# inside the MFMA). All numbers below are **static** (read from the ISA), not measured.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "static"  # device | emulated | static (set by the runner)

# %%
from pathlib import Path

import pandas as pd

from mxfp4_ablation import figures, toolchain
from mxfp4_ablation.studies import walkthrough

out_dir = Path(out_dir) if out_dir else Path(".")
toolchain.describe()

# %% [markdown]
# ## Compile and measure the ISA

# %%
metrics, opcodes = walkthrough.collect(out_dir, mode)
table = metrics.pivot(index="metric", columns="kernel", values="value")
table

# %% [markdown]
# ## Instruction mix
# Static counts by opcode class. The MFMA tile is mostly address arithmetic around a handful of
# matrix instructions: the optimisation steps of the GEMM ladder are about exactly this overhead.

# %%
paths = figures.render("walkthrough/opcode_mix", out_dir)
from IPython.display import SVG, display  # noqa: E402

display(SVG(filename=str(paths[0])))

# %%
opcodes.pivot_table(index="opcode", columns="kernel", values="count", fill_value=0).astype(int)
