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
# # The summary's work, ahead of it
#
# What `notebooks/summary.py` computes -- every compile at the ISA and the seeds' shapes, the
# leave-one-out emulator runs, every modelled point and attribution subset -- depends on the kernels and the
# model alone, not on the step notebooks' runs, and is cached on disk by content. `make reproduce` runs this
# notebook first, beside the step notebooks (one worker per core of the sweep engine's Dask cluster), so
# that the summary, which must wait for all of them, finds it in the caches. A point a step notebook is
# computing at the same time is waited for, never computed twice. Below: one row per kind of task (how
# many, how many were already cached, their CPU time, *measured*); `summary_work.parquet` in the run folder
# holds every task's row (seconds, CPU seconds, worker).

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # device | emulated | static (set by the runner)
isa_shape = [8192, 8192, 8192]  # as the summary's parameters
shapes = None
verify_leave_one_out = True
modelled = True
fidelity = True
attribution = True
attribution_pairs = 2
work_scheduler = "local"  # the sweep engine's schedulers: local, local:N, inline, an address

# %%
from mxfp4_ablation.studies import summary_work, sweep

settings = {"isa_shape": isa_shape, "shapes": shapes, "verify_leave_one_out": verify_leave_one_out,
            "modelled": modelled, "fidelity": fidelity, "attribution": attribution,
            "attribution_pairs": attribution_pairs}
work = summary_work.prefetch(["gemm", "moe"], mode, cases={"gemm": (isa_shape, shapes)},
                             verify_leave_one_out=verify_leave_one_out, fidelity=fidelity, modelled=modelled,
                             attribution=attribution, attribution_pairs={"gemm": attribution_pairs},
                             scheduler=work_scheduler)
if out_dir is not None:
    sweep.write(work, out_dir, settings=settings, name="summary_work")
summary_work.overview(work)
