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
# # Upstream hazards: FlyDSL's `fp4_gemm_4wave` under adversarial load timing
#
# FlyDSL's MXFP4 GEMM after PR #990 (`kernels/gemm/fp4_gemm_4wave.py`, commit `741f3d6d`) is compiled
# **offline** for gfx950 from a checkout you point at (nothing of it lives in this repository) and run in
# the gfx950 emulator at one 256x256 tile, K = 2048, twice:
#
# * `delivery="issue"` -- every load's data is there when it issues (how most emulators behave);
# * `delivery="late"` -- data lands only when an `s_waitcnt` or the end of the wave forces it: exactly what
#   the ISA guarantees, no more.
#
# A kernel whose waits are right gives the same bits both ways. Below: the lines the emulator's s_waitcnt /
# LDS-ordering checker flags, what late delivery does to the output, and the smallest wait change that makes
# the kernel exact and hazard-free -- found by patching the ISA text's `s_waitcnt` and rerunning. Every number
# here is **emulated** (functional emulation, no timing); nothing is measured on a GPU.
#
# Parameters: `flydsl_checkout` -- a FlyDSL source tree at 741f3d6d; None: `make upstream`'s
# `upstream/flydsl-741f3d6d`. Without one the notebook shows the committed record
# (`experiments/reference/upstream_hazards.json`, written by
# `python -m mxfp4_ablation.upstream_hazards --write ...` from that build) and says so.

# %% tags=["parameters"]
out_dir = None  # set by the runner: the run folder this notebook writes into
mode = "emulated"  # the notebook runner's mode (this notebook always emulates)
flydsl_checkout = None  # a FlyDSL checkout at 741f3d6d; None: make upstream's upstream/flydsl-741f3d6d
flydsl_commit = "741f3d6d"  # label recorded with the results (the tree digest is recorded too)
M, N, K = 256, 256, 2048
seed = 0

# %%
import json
from pathlib import Path

import pandas as pd

from mxfp4_ablation import upstream, upstream_hazards

out_dir = Path(out_dir) if out_dir else Path(".")
checkout = Path(flydsl_checkout) if flydsl_checkout else upstream.checkout_dir("flydsl", upstream.FLYDSL_COMMITS[1])
SKIP = not (checkout / upstream.FLYDSL_GEMM_FILE).is_file()
committed = upstream_hazards.load_reference()
if SKIP:
    print(f"No FlyDSL checkout at {checkout} (run `make upstream`, or -p flydsl_checkout PATH): showing the "
          f"committed record, experiments/reference/upstream_hazards.json, written by:\n  {committed['command']}")
    runs = pd.DataFrame(committed["runs"]).T
    display(runs)  # noqa: F821
    display(pd.DataFrame(committed["fix"]["changes"]))  # noqa: F821
else:
    result = upstream_hazards.report(checkout, M, N, K, seed=seed, commit=flydsl_commit)
    patched_isa = result.pop("patched_isa")
    record = upstream_hazards.reference_record(result, upstream_hazards.command(checkout, M, N, K, seed))
    same = {k: record[k] for k in ("runs", "fix", "flagged_by_kind")} == \
        {k: committed[k] for k in ("runs", "fix", "flagged_by_kind")}
    print("this run " + ("reproduces" if same else "DIFFERS FROM") + " the committed record "
          "(experiments/reference/upstream_hazards.json)")

# %% [markdown]
# ## Issue vs late delivery
# Cosine, mismatching bf16 elements and max |error| against the reference (the dense product of the
# unshuffled fp4 operands, rounded to bf16), and the hazard counts of each run.

# %%
if not SKIP:
    runs = pd.DataFrame(result["runs"]).T[["cosine", "mismatches", "elements", "max_abs_err", "bad_rows",
                                           "bad_cols", "exact", "ordering_hazards", "wait_state_hazards",
                                           "seconds"]]
    display(runs.loc[["issue", "late"]])  # noqa: F821

# %% [markdown]
# ## The flagged lines
# Each row: a reader the checker flagged (line of the ISA text), the memory op it was not waited for
# (`source_line`), the waves that did it. `lds_read_pending`: the wave's own LDS DMA had not landed;
# `lds_cross_wave`: another wave's DMA was still pending at the barrier both passed.

# %%
if not SKIP:
    flagged = pd.DataFrame(result["flagged"])
    by_site = (flagged.groupby(["source_line", "source"]).agg(readers=("line", "nunique"), first_reader=("line", "min"),
                                                              kinds=("kind", lambda k: ",".join(sorted(set(k)))))
               .reset_index())
    display(by_site)  # noqa: F821
    display(flagged.head(12))  # noqa: F821

# %% [markdown]
# ## The smallest wait change that makes it exact
# For the earliest flagged reader, the governing `s_waitcnt` (the last one before it; the kernel is
# straight-line at a fixed K) is tightened to the largest count that clears it (binary search, one emulator
# run per try); repeated until no ordering hazard is left. The patched kernel is rerun under issue, late and a
# seeded random delivery with random wave interleaving. Each change is also applied alone (`alone_*` columns):
# the one that makes late delivery exact by itself is the bug that changes numbers; a change that only clears
# reports points at a race whose values happen to agree (a DMA rewriting bytes with what they already hold).
# `barrier` is the ordinal of the `s_barrier` right after the wait, to find the `wait_barrier(...)` call in
# the kernel source.

# %%
if not SKIP:
    display(pd.DataFrame(result["fix"]["changes"]))  # noqa: F821
    print(f"{result['fix']['runs']} emulator runs; ordering hazards left: {result['fix']['remaining']}")
    display(runs.loc[["fixed_issue", "fixed_late", "fixed_random"]])  # noqa: F821

# %% [markdown]
# ## s_nop wait states (not visible to late delivery)
# The emulator also checks gfx950's no-interlock hazards after LLVM's `GCNHazardRecognizer`. The kernel's
# inline-asm DMA idiom (`s_mov_b32 m0, ...` / `s_add_u32 m0, ...` immediately followed by
# `buffer_load_dwordx4 ... lds`) gives M0 no wait state before the LDS DMA reads it; LLVM's
# `checkReadM0Hazards` asks for one (`ReadM0WaitStates = 1`) and pads compiler-generated code, but does not
# look inside inline asm. Whether the hardware hides it is not something an emulator can say.

# %%
if not SKIP:
    display(pd.DataFrame(result["wait_states"]))  # noqa: F821

# %% [markdown]
# ## Stored results
# `upstream_hazards.json` in the run folder: the numbers above with their provenance (commit label, tree
# digest, shape, seed, the command) and the wait changes as line numbers and before/after `s_waitcnt` text
# -- no upstream code or ISA is written out; the same record as the committed one when nothing changed.

# %%
if not SKIP:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "upstream_hazards.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(out_dir / "upstream_hazards.json")
