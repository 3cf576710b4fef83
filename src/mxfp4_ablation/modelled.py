"""Modelled timing of a kernel variant: compile it, run :mod:`gfx950emu.timing` over its full grid.

Every dict returned here is labelled ``label="modelled"`` and carries ``model_version`` and
``clock_ghz`` (the model's single fitted parameter, see ``gfx950emu/timing/gfx950.toml``); the
flop count is the kernel module's ``flops(**shape)``, never counted from the ISA.  Results are
cached on disk like compiles (``paths.cache_dir()/timing``), keyed by the ISA's hash, the shape,
the sample, the code that builds the arguments (:func:`inputs_digest`) and the model -- its version,
parameter values and the digest of every file of ``gfx950emu`` (:func:`model_fingerprint`); a
corrupt entry is recomputed, a miss another process is simulating is waited for under a per-key lock
(:func:`diskcache.load_or_compute_one`) and ``use_cache=False`` neither reads nor writes -- so ``make reproduce``
pays one timing run per (variant, shape).

Inputs are built for the sample, not the grid (issue #24): ``make_inputs(..., lazy=True)`` gives the big
buffers as ``meta`` tensors -- every buffer but the MoE's routing, since the model reads data only
through addresses, EXEC and branches and these kernels' follow the routing alone -- and
:func:`lazy_buffers` maps them as zero :class:`gfx950emu.LazyBuffer`, so only the chunks the sampled
workgroups touch are ever made (``gemm-v4`` at 8192^3: 0.35 GB peak RSS instead of 1.35 GB; the Kimi
MoE at 16384 tokens, which passed 14 GB, fits in under 2 GB -- measured, ``experiments/bench-pipeline``).
``model(..., lazy=False)`` runs on the full eager (random) inputs; ``tests/test_modelled.py`` checks both
give the same cycles.

    from mxfp4_ablation import modelled
    r = modelled.model("gemm-v9", (8192, 8192, 8192))
    r["kernel"]["tflops"], r["cycles_per_mfma_loop"], r["exposed"]

:func:`model_isa` does the same for any ISA text (e.g. upstream FlyDSL's own kernel) with
caller-built arguments, and :func:`flydsl_upstream` for the ready-made upstream ISA files of
``mxfp4_ablation.upstream`` (``<out>/flydsl/<commit8>/M<M>_N<N>_K<K>.s`` + ``.json``).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

from . import diskcache, paths
from .errors import UsageError

LABEL = "modelled"
#: res.timing keys copied into every result (the big ones -- by_instruction -- only with full=True)
_KEEP = ("cycles", "wave_cycles", "mfma_count", "cycles_per_mfma_loop", "mfma_busy", "exposed", "hot_loop",
         "sampled_workgroups", "occupancy_workgroups_per_cu", "grid_workgroups", "lds_conflict_cycles",
         "model_version", "clock_ghz", "kernel", "activity")


def _timing():
    import gfx950emu.timing as T

    return T


def model_fingerprint() -> str:
    """Model version + digests of the parameter values, of every file of the ``gfx950emu`` package (the
    emulator and the timing model; the power model excepted, see below) and of this module (the upstream
    kernels' arguments are built here): any change to what a modelled number is computed from
    invalidates the cache."""
    from . import sources

    T = _timing()
    # Parameter values only (a reworded source keeps the cache). [power] and [memory] enter after the cycle
    # simulation (gfx950emu.timing.power.apply / grid.times with memory.py, re-applied on every cache hit),
    # so neither their values nor power.py / memory.py are part of the key: a calibration fit or a
    # mechanism switched off re-evaluates cached cycle results. Every other file of the package is (the
    # parameter file's values through ``values``).
    values = {k: e["value"] for k, e in T.table().items() if not k.startswith(_POST_HOC)}
    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:12]
    files = {p for p in sources.tree_files(sources.SRC / "gfx950emu")
             if p.name not in ("power.py", "memory.py") and p.suffix != ".toml"}
    tomls = "".join(_without_post_hoc_sections(p.read_text())
                    for p in sorted(sources.tree_files(sources.SRC / "gfx950emu")) if p.suffix == ".toml")
    code = hashlib.sha256((sources.digest(files) + sources.digest([Path(__file__)]) + tomls).encode())
    return f"{T.model_version()}+{digest}+{code.hexdigest()[:12]}"


#: parameter sections applied after the cycle simulation (not part of the cycle cache's key)
_POST_HOC = ("power.", "memory.")


def _without_post_hoc_sections(text: str) -> str:
    """A parameter file's text without its ``[power]`` and ``[memory]`` sections (applied after the
    cycle simulation, so they never key the cycle cache)."""
    out, skip = [], False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            skip = line.strip() in ("[power]", "[memory]")
        if not skip:
            out.append(line)
    return "".join(out)


def inputs_digest(variant_name: str) -> str:
    """Digest of the code that builds a study variant's launch arguments (its kernel module's import
    closure -- ``make_inputs``, ``kernel_args``, MoE routing -- and the runner's argument packing), less the
    kernel's builder code, which reaches a run only through the ISA (:func:`.runner.launch_digest`)."""
    from . import runner, variants

    return runner.launch_digest(variants.get(variant_name).spec.module)[:16]


def _cache_file(key: str) -> Path:
    return paths.cache_dir() / "timing" / key[:2] / f"{key}.json"


def _entry(key: str, kind: str) -> Path:
    return _cache_file(key) if kind == "timing" else paths.cache_dir() / kind / key[:2] / f"{key}.json"


def cache_load(key: str, kind: str = "timing", expect: type = dict) -> Any:
    """The cached value of ``key`` (under ``<cache>/<kind>/``), or None: a missing, truncated or
    unparsable entry, or one of the wrong type, is a miss -- recomputed by the caller, never fatal."""
    try:
        value = json.loads(_entry(key, kind).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, expect) else None


def cache_store(key: str, data: Any, kind: str = "timing") -> None:
    """Write a cache entry atomically (a reader sees the old entry, the new one or none)."""
    diskcache.atomic_write_text(_entry(key, kind), json.dumps(data, default=str))


def _cache_load(key: str) -> dict | None:
    hit = cache_load(key)
    # a hit must be a whole modelled result: anything else (an older or damaged entry) is recomputed
    if hit is None or hit.get("label") != LABEL or not isinstance(hit.get("kernel"), dict) or "cycles" not in hit:
        return None
    return hit


_cache_store = cache_store


#: the last lazily built inputs: ((kernel module, shape, seed), inputs) -- a sweep models a shape's
#: variants in a row, and lazy inputs are never written (the launch keeps its writes)
_LAZY_INPUTS: list = []


def lazy_inputs(module, shape_args: dict, seed: int) -> dict:
    """``module.make_inputs(**shape_args, seed=seed, lazy=True)``, the last one reused."""
    key = (module.__name__, tuple(sorted(shape_args.items())), seed)
    if _LAZY_INPUTS and _LAZY_INPUTS[0][0] == key:
        return _LAZY_INPUTS[0][1]
    _LAZY_INPUTS.clear()
    inputs = module.make_inputs(**shape_args, seed=seed, lazy=True)
    _LAZY_INPUTS.append((key, inputs))
    return inputs


def lazy_buffers(args: list) -> list:
    """Kernel-argument entries with every ``meta`` tensor (no storage) replaced by a zero
    :class:`gfx950emu.LazyBuffer` of its size: the emulator then builds only the chunks the sampled
    workgroups touch."""
    from gfx950emu import LazyBuffer

    def lazy(t, name):
        return LazyBuffer(t.numel() * t.element_size(), None, name)

    out = []
    for entry in args:
        if isinstance(entry, dict) and getattr(entry.get("tensor"), "is_meta", False):
            entry = {**entry, "tensor": lazy(entry["tensor"], entry.get("name"))}
        elif getattr(entry, "is_meta", False):
            entry = lazy(entry, None)
        out.append(entry)
    return out


def _prepare(variant_name: str, shape: tuple, seed: int, lazy: bool = True) -> dict:
    """Everything the timing run needs from the study side, in one place: the compile and the
    family contract's ``check_shape``, ``make_inputs``, ``kernel_args``, ``launch_config``, ``flops``.

    ``lazy`` (default): the inputs come from ``make_inputs(..., lazy=True)`` where the kernel module
    takes it -- big buffers as ``meta`` tensors mapped by :func:`lazy_buffers`, so a run that samples a
    few workgroups builds only what they touch (the Kimi MoE at 16384 tokens in well under 2 GB);
    ``lazy=False``: the full eager inputs (what the lazy path is checked against)."""
    from . import runner, toolchain, variants

    variant = variants.get(variant_name)
    module = variant.spec.module
    shape_args = variant.shape(tuple(shape))
    module.check_shape(**shape_args)  # one clear error before any compile
    art = toolchain.compile(variant.target, variant.params(tuple(shape)))
    lazy = lazy and "lazy" in inspect.signature(module.make_inputs).parameters

    def make_args():
        if lazy:
            inputs = lazy_inputs(module, shape_args, seed)
            entries = module.kernel_args(inputs, **variant.switch_kwargs())
            return runner.emulator_args(lazy_buffers(entries))
        inputs = module.make_inputs(**shape_args, seed=seed)
        return runner.emulator_args(module.kernel_args(inputs, **variant.switch_kwargs()))

    grid, block = module.launch_config(**shape_args)
    return {"isa": art.isa, "isa_key": art.key, "grid": tuple(grid), "block": tuple(block), "make_args": make_args,
            "flops": float(module.flops(**shape_args)), "variant": variant.name, "family": variant.family,
            "shape_args": shape_args}


def _reapply(hit: dict | None, overrides: dict | None = None) -> dict | None:
    """A cached result at the current post-hoc parameters ``[power]`` and ``[memory]``
    (:func:`gfx950emu.timing.power.evaluate`); None (re-simulate) when the power clock is on and the
    entry predates the activity counts."""
    if hit is None:
        return None
    from gfx950emu.timing import Params, power

    p = Params(overrides=overrides)
    if power.enabled(p) and not hit.get("activity"):
        return None
    hit["kernel"] = power.evaluate(hit["kernel"], hit.get("activity"), p)
    hit["clock_ghz"] = hit["kernel"]["clock_ghz"]
    return hit


def model_isa(isa: str, grid, block, make_args, *, flops: float | None, sample=None, trace: str | None = None,
              use_cache: bool = True, key_extra: Any = None, kernel: str | None = None,
              full: bool = False, overrides: dict | None = None, on_fresh=None) -> dict:
    """Timing-model one ISA text over ``grid`` x ``block``; ``make_args()`` builds the launch args
    (called only on a cache miss).  Returns the modelled dict (see the module doc).
    ``on_fresh(timing, prog)``: called after a simulation this call ran (not on a cache hit), with the
    whole ``res.timing`` -- its ``trace_events`` included, since the launch then records its trace
    (passive: the same cycles) -- so a caller that wants the timeline too gets it from the same run."""
    import gfx950emu

    fp = model_fingerprint()
    key = hashlib.sha256(json.dumps([hashlib.sha256(isa.encode()).hexdigest(), list(grid), list(block), flops,
                                     sample, fp, key_extra, kernel]
                                    + ([sorted(overrides.items())] if overrides else []),
                                    default=str).encode()).hexdigest()

    def simulate() -> dict:
        prog = gfx950emu.load(isa, kernel=kernel)
        res = gfx950emu.launch(prog, grid, block, make_args(), timing=True, flops=flops, timing_sample=sample,
                               timing_trace=bool(trace) or on_fresh is not None, timing_params=overrides)
        t = res.timing
        if trace:
            from gfx950emu.timing import trace as _trace

            _trace.write(trace, t, prog)
        if on_fresh is not None:
            on_fresh(t, prog)
        out = {k: t[k] for k in _KEEP if k in t}
        out.update(label=LABEL, model_fingerprint=fp, overrides=dict(overrides or {}), kernel_name=prog.name,
                   emulator_seconds=round(res.seconds, 2), by_instruction=t["by_instruction"], cached=False)
        if use_cache:  # --no-cache neither reads nor writes
            _cache_store(key, out)
        return out

    if use_cache and not trace:  # a miss another process is simulating is waited for, not run twice
        out, cached = diskcache.load_or_compute_one(
            _cache_file(key), lambda: _reapply(_cache_load(key), overrides), simulate)
        out["cached"] = cached
    else:
        out = simulate()
    return out if full else {k: v for k, v in out.items() if k != "by_instruction"}


def model(variant: str, shape, *, seed: int = 0, sample=None, trace: str | None = None, use_cache: bool = True,
          full: bool = False, lazy: bool = True) -> dict:
    """Modelled timing of ``variant`` at ``shape`` over its full grid (sampled workgroups, see
    ``gfx950emu.timing``): ``label``, ``model_version``, ``clock_ghz``, ``kernel`` (us, tflops,
    bound, rounds, bytes...), ``cycles``, ``cycles_per_mfma_loop``, ``mfma_busy``, ``exposed``, ...
    (``full=True`` adds ``by_instruction``; ``lazy``: see :func:`_prepare`, the same numbers)."""
    prep = _prepare(variant, tuple(shape), seed, lazy=lazy)
    out = model_isa(prep["isa"], prep["grid"], prep["block"], prep["make_args"], flops=prep["flops"], sample=sample,
                    trace=trace, use_cache=use_cache, key_extra=["variant", seed, inputs_digest(variant)], full=full)
    out.update(variant=prep["variant"], family=prep["family"], shape=list(shape), isa_key=prep["isa_key"], seed=seed)
    return out


# ------------------------------------------------------------------------ upstream FlyDSL ----
def flydsl_upstream_args(meta: dict, M: int, N: int, K: int):
    """Zero-filled arguments for FlyDSL's ``fp4_gemm_4wave`` kernel (flattened 1-D tensors, each
    followed by an i32 element count, then c_m, c_n -- the ``.json`` sidecar names them): A
    uint8[M*K/2], B_T uint8[N*K/2], C bf16[M*N], A_scale / B_scale uint8[M*K/32] / [N*K/32]."""
    import numpy as np

    sizes = {"A": M * K // 2, "B_T": N * K // 2, "C": M * N * 2, "A_scale": M * K // 32, "B_scale": N * K // 32}
    elems = {"A": M * K // 2, "B_T": N * K // 2, "C": M * N, "A_scale": M * K // 32, "B_scale": N * K // 32}
    args = []
    for a in meta["args"]:
        name = a["name"]
        if a["value_kind"] == "global_buffer":
            if name not in sizes:
                raise UsageError(f"upstream kernel argument {name!r} is not one of {', '.join(sizes)}")
            args.append(np.zeros(sizes[name], np.uint8))
        elif name.endswith(".layout"):
            args.append(elems[name[:-len(".layout")]])
        elif name in ("c_m", "c_n"):
            args.append(M if name == "c_m" else N)
        else:
            raise UsageError(f"upstream kernel argument {name!r} is not known")
    return args


def flydsl_upstream(out_dir, commit8: str, M: int, N: int, K: int, **kw) -> dict:
    """Model the upstream ISA ``<out_dir>/flydsl/<commit8>/M<M>_N<N>_K<K>.s`` (with its ``.json``)."""
    base = Path(out_dir) / "flydsl" / commit8 / f"M{M}_N{N}_K{K}"
    try:
        isa = base.with_suffix(".s").read_text()
        meta = json.loads(base.with_suffix(".json").read_text())
    except OSError as err:
        raise UsageError(f"no upstream ISA at {base}.s/.json ({err.strerror}); run python -m mxfp4_ablation.upstream "
                         f"compile first") from None
    out = model_isa(isa, tuple(meta["grid"]), tuple(meta["block"]), lambda: flydsl_upstream_args(meta, M, N, K),
                    flops=2.0 * M * N * K, **kw)
    out.update(source="flydsl", commit=meta.get("commit"), file=f"{base}.s", shape=[M, N, K],
               compile_command=meta.get("command"))
    return out


# ------------------------------------------------------------------ validation vs published ----
COMMITS = {"before_990": "daee90e4", "after_990": "741f3d6d"}
#: aiter's hand-written kernel PR #990 compares against (copied by mxfp4_ablation.upstream to <out>/aiter/)
AITER_CO = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co"
AITER_COMMIT = "b242ba66a610c02018daa55a5c9c9bdc33a5dabf"
SHAPES = ((8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192), (16384, 16384, 16384))
#: the one published point the clock is fitted on (gfx950.toml [clock].sustained_ghz)
FIT_POINT = ("after_990", (8192, 8192, 8192))


def published_gemm() -> dict:
    """{(stage, (M, N, K)): TFLOPS} from experiments/reference/gemm_published.csv (FlyDSL PR #990)."""
    import csv

    with open(paths.reference_dir() / "gemm_published.csv") as f:
        return {(r["stage"], (int(r["M"]), int(r["N"]), int(r["K"]))): float(r["tflops"]) for r in csv.DictReader(f)}


def upstream_validation(out_dir, *, sample=1, shapes=SHAPES, use_cache: bool = True) -> list:
    """Model FlyDSL's fp4_gemm_4wave before / after PR #990 at the PR's shapes; one row per point
    with the published TFLOPS beside the modelled ones (at the model's frozen clock)."""
    pub = published_gemm()
    rows = []
    co = Path(out_dir) / "aiter" / AITER_CO
    with_asm = co.is_file()
    for M, N, K in shapes:
        for stage, c8 in {**COMMITS, **({"aiter_asm": None} if with_asm else {})}.items():
            if c8 is None:
                r = aiter_asm(co, M, N, K, sample=sample, use_cache=use_cache)
                r["commit"] = AITER_COMMIT
            else:
                r = flydsl_upstream(out_dir, c8, M, N, K, sample=sample, use_cache=use_cache)
            k = r["kernel"]
            p = pub.get((stage, (M, N, K)))
            rows.append({"label": LABEL, "source": "flydsl", "stage": stage, "commit": r["commit"], "M": M, "N": N,
                         "K": K, "file": r["file"], "modelled_tflops": k["tflops"], "modelled_us": k["us"],
                         "bound": k["bound"], "compute_cycles": k["compute_cycles"],
                         "cycles_per_mfma_loop": r["cycles_per_mfma_loop"], "mfma_busy": r["mfma_busy"][0],
                         "clock_ghz": k["clock_ghz"], "model_version": r["model_version"],
                         "model_fingerprint": r["model_fingerprint"], "sample": sample,
                         "published_tflops": p,
                         "error_pct": round(100 * (k["tflops"] / p - 1), 2) if p else None,
                         "exposed": r["exposed"], "kernel": k})
    return rows


def ratio_table(rows) -> list:
    """Per shape: modelled and published after/before and aiter-asm/after ratios, error in points."""
    pub = published_gemm()
    by = {(r["stage"], (r["M"], r["N"], r["K"])): r for r in rows}
    out = []
    for shape in sorted({(r["M"], r["N"], r["K"]) for r in rows}):
        b, a = by.get(("before_990", shape)), by.get(("after_990", shape))
        s = by.get(("aiter_asm", shape))
        if not (a and b):
            continue
        mod = a["modelled_tflops"] / b["modelled_tflops"]
        pb = pub[("after_990", shape)] / pub[("before_990", shape)]
        asm = pub.get(("aiter_asm", shape))
        out.append({"label": LABEL, "M": shape[0], "N": shape[1], "K": shape[2],
                    "modelled_after_over_before": round(mod, 4), "published_after_over_before": round(pb, 4),
                    "error_pp": round(100 * (mod - pb), 2),
                    "published_aiter_asm_over_after": round(asm / pub[("after_990", shape)], 4) if asm else None,
                    "modelled_aiter_asm_over_after": round(s["modelled_tflops"] / a["modelled_tflops"], 4) if s else None,
                    "clock_ghz": a["clock_ghz"], "model_version": a["model_version"]})
    return out


def fit_clock(rows, point=FIT_POINT) -> float:
    """The clock (GHz) at which the model matches the published TFLOPS of ``point`` (the one fit)."""
    from gfx950emu.timing import Params, grid

    stage, shape = point
    row = next(r for r in rows if r["stage"] == stage and (r["M"], r["N"], r["K"]) == tuple(shape))
    return grid.fit_clock(row["kernel"], row["published_tflops"], Params())


def write_validation(out_dir, path, *, sample=1) -> list:
    """Write the validation CSV (numbers only; commit ids, file, command, model version per row)."""
    import csv

    rows = upstream_validation(out_dir, sample=sample)
    cmd = f"PYTHONPATH=src python -m mxfp4_ablation.modelled validate --upstream-out {out_dir} --sample {sample}"
    cols = ["label", "source", "stage", "commit", "M", "N", "K", "modelled_tflops", "published_tflops", "error_pct",
            "modelled_us", "bound", "compute_cycles", "cycles_per_mfma_loop", "mfma_busy", "clock_ghz",
            "model_version", "model_fingerprint", "sample", "file", "command"]
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "command": cmd})
        for q in ratio_table(rows):
            w.writerow({"label": LABEL, "source": "ratio after/before", "stage": "after_990/before_990",
                        "M": q["M"], "N": q["N"], "K": q["K"], "modelled_tflops": q["modelled_after_over_before"],
                        "published_tflops": q["published_after_over_before"], "error_pct": q["error_pp"],
                        "clock_ghz": q["clock_ghz"], "model_version": q["model_version"], "sample": sample,
                        "command": cmd})
            if q["modelled_aiter_asm_over_after"] is not None:
                w.writerow({"label": LABEL, "source": "ratio aiter_asm/after", "stage": "aiter_asm/after_990",
                            "M": q["M"], "N": q["N"], "K": q["K"],
                            "modelled_tflops": q["modelled_aiter_asm_over_after"],
                            "published_tflops": q["published_aiter_asm_over_after"],
                            "error_pct": round(100 * (q["modelled_aiter_asm_over_after"]
                                                      - q["published_aiter_asm_over_after"]), 2),
                            "clock_ghz": q["clock_ghz"], "model_version": q["model_version"], "sample": sample,
                            "command": cmd})
    os.replace(tmp, path)
    return rows


def main(argv=None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.modelled")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="model upstream FlyDSL before/after PR #990 and compare with published")
    v.add_argument("--upstream-out", required=True, help="the upstream ISA folder (<out>/flydsl/<commit8>/...)")
    v.add_argument("--sample", type=int, default=1)
    v.add_argument("--write", help="write the CSV here")
    v.add_argument("--fit", action="store_true", help="print the clock fitted on FIT_POINT")
    ns = ap.parse_args(argv)
    try:
        rows = write_validation(ns.upstream_out, ns.write, sample=ns.sample) if ns.write else \
            upstream_validation(ns.upstream_out, sample=ns.sample)
    except ValueError as err:
        print(f"python -m mxfp4_ablation.modelled: {err}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r['stage']:<11} {r['M']:>5} {r['N']:>5} {r['K']:>5}  modelled {r['modelled_tflops']:8.1f}  "
              f"published {r['published_tflops']}  error {r['error_pct']:+.1f} %  ({r['bound']}, "
              f"{r['cycles_per_mfma_loop']} cyc/MFMA, clock {r['clock_ghz']} GHz)")
    for q in ratio_table(rows):
        print(f"after/before {q['M']},{q['N']},{q['K']}: modelled {q['modelled_after_over_before']:.4f} "
              f"published {q['published_after_over_before']:.4f} error {q['error_pp']:+.2f} pp")
        if q["modelled_aiter_asm_over_after"] is not None:
            print(f"aiter_asm/after {q['M']},{q['N']},{q['K']}: modelled {q['modelled_aiter_asm_over_after']:.4f} "
                  f"published {q['published_aiter_asm_over_after']:.4f}")
    if ns.fit:
        print(f"clock fitted on {FIT_POINT}: {fit_clock(rows):.4f} GHz")
    return 0



#: low-confidence parameters and the values a what-if tries (never used to fit anything)
SENSITIVITY = {
    "issue.internal_instruction_cycles": (0, 4),
    "mfma.queue_depth": (0, 1, 2),
    "vmem.queue_depth": (4, 8, 32),
    "lds.queue_depth": (4, 8, 32),
    "vmem.latency_cycles": (300, 500, 800),
}


def sensitivity(out_dir, shape=(8192, 8192, 8192), *, sample=1, table=SENSITIVITY) -> list:
    """after/before ratio at ``shape`` when one low-confidence parameter takes another value."""
    pub = published_gemm()
    pb = pub[("after_990", tuple(shape))] / pub[("before_990", tuple(shape))]
    rows = []
    for key, values in table.items():
        for v in values:
            r = {s: flydsl_upstream(out_dir, c8, *shape, sample=sample, overrides={key: v}) for s, c8 in COMMITS.items()}
            ratio = r["after_990"]["kernel"]["tflops"] / r["before_990"]["kernel"]["tflops"]
            rows.append({"label": LABEL, "parameter": key, "value": v, "after_over_before": round(ratio, 4),
                         "published": round(pb, 4), "error_pp": round(100 * (ratio - pb), 2),
                         "after_tflops": r["after_990"]["kernel"]["tflops"],
                         "before_tflops": r["before_990"]["kernel"]["tflops"],
                         "model_version": r["after_990"]["model_version"], "clock_ghz": r["after_990"]["clock_ghz"]})
    return rows



# ------------------------------------------------------------------------ aiter hand-written asm ----
def aiter_asm_isa(co_path) -> str:
    """The ``.s`` text of aiter's ``f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co`` for the timing model:
    ``gfx950emu.codeobject.code_object_to_isa`` plus two timing-neutral rewrites the emulator needs
    (numerics only, no change of control flow or of any instruction's class): the FP32 denorm mode is
    set to 3 (the only one the emulator computes with), and ``v_add_i32 D, A, B`` without clamp -- the
    same bits as ``v_add_u32_e64`` -- is written as that."""
    import re

    from gfx950emu.codeobject import code_object_to_isa

    isa = code_object_to_isa(str(co_path))
    isa = re.sub(r"(\.amdhsa_float_denorm_mode_(?:32|16_64)) \d+", r"\1 3", isa)
    return re.sub(r"\bv_add_i32 (v\d+, [^\n;]*?)(\s*(?:;|\n))",
                  lambda mo: mo.group(0) if "clamp" in mo.group(1) else f"v_add_u32_e64 {mo.group(1)}{mo.group(2)}", isa)


def aiter_asm_args(prog, M: int, N: int, K: int) -> list:
    """Zero-filled arguments of aiter's asm a4w4 GEMM, as ``csrc/py_itfs_cu/asm_gemm_a4w4.cu`` fills its
    KernelArgs: D bf16[M, N], no bias (C = nullptr), A / B fp4x2 [M|N, K/2], alpha 1, beta 0, strides in
    elements (A0 = B0 = K, C0 = N), ScaleA / ScaleB e8m0 [M|N, K/32], log2_k_split 0."""
    import numpy as np

    vals = {"alpha": 1.0, "beta": 0.0, "strideC0": N, "strideA0": K, "strideB0": K, "Mdim": M, "Ndim": N, "Kdim": K,
            "strideScaleA0": K // 32, "strideScaleB0": K // 32, "log2_k_split": 0}
    bufs = {"D": M * N * 2, "A": M * K // 2, "B": N * K // 2, "ScaleA": M * K // 32, "ScaleB": N * K // 32, "C": None}
    args = []
    for a in prog.args:
        name, kind = a.get(".name"), a.get(".value_kind")
        if str(kind).startswith("hidden_"):
            continue
        if kind == "global_buffer":
            n = bufs.get(name, 0)
            args.append(None if n is None else np.zeros(max(16, n), np.uint8))
        else:
            args.append(vals.get(name, 0))
    return args


def aiter_asm(co_path, M: int, N: int, K: int, **kw) -> dict:
    """Model aiter's hand-written MXFP4 GEMM code object at M, N, K (grid N/256 x M/256, block 256)."""
    import gfx950emu

    isa = aiter_asm_isa(co_path)
    prog = gfx950emu.load(isa)
    out = model_isa(isa, (N // 256, M // 256, 1), (256, 1, 1), lambda: aiter_asm_args(prog, M, N, K),
                    flops=2.0 * M * N * K, **kw)
    out.update(source="aiter", file=str(co_path), shape=[M, N, K])
    return out


if __name__ == "__main__":
    raise SystemExit(main())
