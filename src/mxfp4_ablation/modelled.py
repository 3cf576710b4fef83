"""Modelled timing of a kernel variant: compile it, run :mod:`gfx950emu.timing` over its full grid.

Every dict returned here is labelled ``label="modelled"`` and carries ``model_version`` and
``clock_ghz`` (the model's single fitted parameter, see ``gfx950emu/timing/gfx950.toml``); the
flop count is the kernel module's ``flops(**shape)``, never counted from the ISA.  Results are
cached on disk like compiles (``paths.cache_dir()/timing``), keyed by the ISA's hash, the shape,
the sample, and the model version + parameter file, so ``make reproduce`` pays one timing run per
(variant, shape).

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
import tempfile
from pathlib import Path
from typing import Any

from . import paths
from .errors import UsageError

LABEL = "modelled"
#: res.timing keys copied into every result (the big ones -- by_instruction -- only with full=True)
_KEEP = ("cycles", "wave_cycles", "mfma_count", "cycles_per_mfma_loop", "mfma_busy", "exposed", "hot_loop",
         "sampled_workgroups", "occupancy_workgroups_per_cu", "grid_workgroups", "lds_conflict_cycles",
         "model_version", "clock_ghz", "kernel", "memory", "activity")


def _timing():
    import gfx950emu.timing as T

    return T


def model_fingerprint() -> str:
    """Model version + digests of the parameter values and the model code (a change invalidates the cache)."""
    T = _timing()
    values = {k: e["value"] for k, e in T.table().items()}          # values only: a reworded source keeps the cache
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]
    cu = b"".join(Path(T.__file__).with_name(f).read_bytes() for f in ("cu.py", "grid.py", "memory.py", "probe.py",
                                                                        "__init__.py"))
    return f"{T.model_version()}+{digest}+{hashlib.sha256(cu).hexdigest()[:8]}"


def _cache_file(key: str) -> Path:
    return paths.cache_dir() / "timing" / key[:2] / f"{key}.json"


def _cache_load(key: str) -> dict | None:
    try:
        return json.loads(_cache_file(key).read_text())
    except (OSError, ValueError):
        return None


def _cache_store(key: str, data: dict) -> None:
    path = _cache_file(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def _prepare(variant_name: str, shape: tuple, seed: int) -> dict:
    """Everything the timing run needs from the study side, in one place: the compile and the
    family contract's ``check_shape``, ``make_inputs``, ``kernel_args``, ``launch_config``, ``flops``."""
    from . import runner, toolchain, variants

    variant = variants.get(variant_name)
    module = variant.spec.module
    shape_args = variant.shape(tuple(shape))
    module.check_shape(**shape_args)  # one clear error before any compile
    art = toolchain.compile(variant.target, variant.params(tuple(shape)))

    def make_args():
        inputs = module.make_inputs(**shape_args, seed=seed)
        return runner.emulator_args(module.kernel_args(inputs, **variant.switch_kwargs()))

    grid, block = module.launch_config(**shape_args)
    return {"isa": art.isa, "isa_key": art.key, "grid": tuple(grid), "block": tuple(block), "make_args": make_args,
            "flops": float(module.flops(**shape_args)), "variant": variant.name, "family": variant.family,
            "shape_args": shape_args}


def model_isa(isa: str, grid, block, make_args, *, flops: float | None, sample=None, trace: str | None = None,
              use_cache: bool = True, key_extra: Any = None, kernel: str | None = None,
              full: bool = False, overrides: dict | None = None) -> dict:
    """Timing-model one ISA text over ``grid`` x ``block``; ``make_args()`` builds the launch args
    (called only on a cache miss).  Returns the modelled dict (see the module doc)."""
    import gfx950emu

    fp = model_fingerprint()
    key = hashlib.sha256(json.dumps([hashlib.sha256(isa.encode()).hexdigest(), list(grid), list(block), flops,
                                     sample, fp, key_extra, kernel]
                                    + ([sorted(overrides.items())] if overrides else []),
                                    default=str).encode()).hexdigest()
    if use_cache and not trace:
        hit = _cache_load(key)
        if hit is not None:
            hit["cached"] = True
            return hit if full else {k: v for k, v in hit.items() if k != "by_instruction"}
    prog = gfx950emu.load(isa, kernel=kernel)
    res = gfx950emu.launch(prog, grid, block, make_args(), timing=True, flops=flops, timing_sample=sample,
                           timing_trace=bool(trace), timing_params=overrides)
    t = res.timing
    if trace:
        from gfx950emu.timing import trace as _trace

        _trace.write(trace, t, prog)
    out = {k: t[k] for k in _KEEP if k in t}
    out.update(label=LABEL, model_fingerprint=fp, overrides=dict(overrides or {}), kernel_name=prog.name, emulator_seconds=round(res.seconds, 2),
               by_instruction=t["by_instruction"], cached=False)
    _cache_store(key, out)
    return out if full else {k: v for k, v in out.items() if k != "by_instruction"}


def model(variant: str, shape, *, seed: int = 0, sample=None, trace: str | None = None, use_cache: bool = True,
          full: bool = False) -> dict:
    """Modelled timing of ``variant`` at ``shape`` over its full grid (sampled workgroups, see
    ``gfx950emu.timing``): ``label``, ``model_version``, ``clock_ghz``, ``kernel`` (us, tflops,
    bound, rounds, bytes...), ``cycles``, ``cycles_per_mfma_loop``, ``mfma_busy``, ``exposed``, ...
    (``full=True`` adds ``by_instruction``)."""
    prep = _prepare(variant, tuple(shape), seed)
    out = model_isa(prep["isa"], prep["grid"], prep["block"], prep["make_args"], flops=prep["flops"], sample=sample,
                    trace=trace, use_cache=use_cache, key_extra=["variant", seed], full=full)
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
    m = sub.add_parser("mechanisms", help="PR #990 before/after/aiter-asm with each timing-model mechanism off in turn")
    m.add_argument("--upstream-out", required=True)
    m.add_argument("--sample", type=int, default=1)
    m.add_argument("--write", help="write the CSV here")
    m.add_argument("--shapes", default=None, help="e.g. 8192,8192,8192;16384,16384,16384 (default: PR #990's four)")
    ns = ap.parse_args(argv)
    if ns.cmd == "mechanisms":
        return _mechanisms_main(ns)
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
    "memory.hbm_ns": (250, 350, 500),
    "memory.l2_hit_ns": (80, 118, 200),
    "icache.prefetch_lines": (0, 1, 3),
}

#: the timing model's mechanisms (gfx950.toml [mechanisms]); ``mechanism_table`` switches each off in turn
MECHANISMS = ("memory_hierarchy", "l2_sharing", "bandwidth_queue", "icache", "valu_dependency", "lds_dma_pipe",
              "dispatch_ramp", "smem_ns")


def mechanism_table(out_dir, *, sample=1, shapes=SHAPES, mechanisms=MECHANISMS, use_cache: bool = True,
                    progress=None) -> list:
    """PR #990's before / after / aiter-asm at ``shapes`` with all mechanisms on ("all") and with each
    mechanism switched off in turn: one row per (mechanism off, shape) with the three modelled TFLOPS,
    the after/before and aiter-asm/after ratios and their errors against the published ones (points).
    Not a fit: the frozen clock throughout."""
    pub = published_gemm()
    co = Path(out_dir) / "aiter" / AITER_CO
    rows = []
    for off in ("all",) + tuple(mechanisms):
        ov = None if off == "all" else {f"mechanisms.{off}": 0}
        for M, N, K in shapes:
            tf = {}
            for stage, c8 in COMMITS.items():
                tf[stage] = flydsl_upstream(out_dir, c8, M, N, K, sample=sample, overrides=ov,
                                            use_cache=use_cache)["kernel"]["tflops"]
            if co.is_file():
                tf["aiter_asm"] = aiter_asm(co, M, N, K, sample=sample, overrides=ov, use_cache=use_cache)["kernel"]["tflops"]
            sh = (M, N, K)
            pb = pub[("after_990", sh)] / pub[("before_990", sh)]
            ab = tf["after_990"] / tf["before_990"]
            row = {"label": LABEL, "mechanism_off": off, "M": M, "N": N, "K": K,
                   "before_tflops": tf["before_990"], "after_tflops": tf["after_990"],
                   "aiter_asm_tflops": tf.get("aiter_asm"),
                   "after_over_before": round(ab, 4), "published_after_over_before": round(pb, 4),
                   "error_pp": round(100 * (ab - pb), 2)}
            if "aiter_asm" in tf and ("aiter_asm", sh) in pub:
                pa = pub[("aiter_asm", sh)] / pub[("after_990", sh)]
                row.update(aiter_asm_over_after=round(tf["aiter_asm"] / tf["after_990"], 4),
                           published_aiter_asm_over_after=round(pa, 4))
            from gfx950emu.timing import Params
            P = Params()
            row.update(model_version=P.version, clock_ghz=P.clock_sustained_ghz, sample=sample)
            rows.append(row)
            if progress:
                progress(row)
    return rows


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


def _mechanisms_main(ns) -> int:
    import csv
    import sys

    try:
        shapes = SHAPES if not ns.shapes else tuple(tuple(int(x) for x in s.split(",")) for s in ns.shapes.split(";"))
        if any(len(s) != 3 for s in shapes):
            raise ValueError
    except ValueError:
        print(f"python -m mxfp4_ablation.modelled: --shapes must be M,N,K[;M,N,K...], got {ns.shapes!r}", file=sys.stderr)
        return 2
    out = []

    def show(r):
        print(f"off={r['mechanism_off']:<17} {r['M']},{r['N']},{r['K']}: before {r['before_tflops']:.1f} after "
              f"{r['after_tflops']:.1f} asm {r['aiter_asm_tflops']} after/before {r['after_over_before']:.4f} "
              f"(published {r['published_after_over_before']:.4f}, {r['error_pp']:+.2f} pp)", flush=True)
        out.append(r)
    try:
        mechanism_table(ns.upstream_out, sample=ns.sample, shapes=shapes, progress=show)
    except (ValueError, UsageError) as err:
        print(f"python -m mxfp4_ablation.modelled: {err}", file=sys.stderr)
        return 2
    if ns.write:
        tmp = f"{ns.write}.tmp"
        cmd = (f"PYTHONPATH=src python -m mxfp4_ablation.modelled mechanisms --upstream-out UPSTREAM_OUT "
               f"--sample {ns.sample}")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]) + ["command"], extrasaction="ignore")
            w.writeheader()
            for r in out:
                w.writerow({**r, "command": cmd})
        os.replace(tmp, ns.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
