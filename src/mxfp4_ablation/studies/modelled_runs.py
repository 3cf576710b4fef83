"""The modelled section's runs: one timing-model point per (variant, shape), cached on disk.

Every number here comes from the timing model (:func:`mxfp4_ablation.modelled.model_isa`, through
``modelled._prepare``) and is labelled ``modelled`` with the model's version and clock; nothing is ever
shown as measured. :func:`model_row` is one point as a flat row (:data:`SWEEP_COLUMNS`), :func:`sweep`
many, :func:`timeline` the hot-loop trace window of one variant (a kernel without a hot loop whole).
:func:`modelled_source` is the same point as ``modelled.model``'s dict (the calibration and the
engine's speed slot read it), so they all share one cache entry.

Sample: how many workgroups a point simulates is the study's (:attr:`.engine.Spec.model_sample`): GEMM
workgroups are all alike, so a GEMM point models one (the setting the validation table was made with);
MoE workgroups differ (empty experts, partial blocks), so a MoE point models some of those the first CU
receives. Imports the runner layer lazily (compiles and runs the model on a cache miss).
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from .. import diskcache, paths, results

LABEL = "modelled"
REASONS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other")
SWEEP_COLUMNS = ["label", "variant", "family", "shape", "tflops", "us", "bound", "compute_us", "memory_us",
                 "cycles", "cycles_per_mfma_loop", "mfma_busy", *[f"exposed_{r}" for r in REASONS],
                 "model_version", "clock_ghz", "model_fingerprint", "sample", "emulator_seconds", "cached",
                 "wall_seconds"]


class AblationError(ValueError):
    """Bad input to a modelled table (one clear line)."""


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(n)) for n in shape)


def default_sample(variant: str, shape: Sequence[int] | None = None):
    """How many workgroups a point of ``variant`` at ``shape`` simulates: its study's rule
    (:attr:`.engine.Spec.model_sample`)."""
    from .. import variants
    from . import study_of

    return study_of(variants.get(variant).family).spec.model_sample(shape)


#: A small GEMM shape whose dims are all distinct (M, N, K, K/2, K/32): the layout of zero inputs.
_PROBE = {"M": 512, "N": 768, "K": 2048}


def zero_inputs(module, **shape) -> dict:
    """Zero-filled inputs of a GEMM at ``shape``, laid out like ``module.make_inputs`` (probed at a small
    shape whose dims are distinct, then scaled). A dense GEMM's timing does not depend on its data (no
    data-dependent branch, address or EXEC), so the model needs no random, quantised inputs -- which cost
    ~1 min at 16384^3. ValueError when a buffer's dims cannot be mapped."""
    import torch

    M, N, K = (int(shape[k]) for k in ("M", "N", "K"))
    small = module.make_inputs(**_PROBE, seed=0)
    dims = {512: M, 768: N, 2048: K, 1024: K // 2, 64: K // 32}
    out = {}
    for key, value in small.items():
        if isinstance(value, torch.Tensor):
            bad = [d for d in value.shape if d not in dims and d > 16]
            if bad:
                raise ValueError(f"zero_inputs: cannot scale {key} {tuple(value.shape)}")
            out[key] = torch.zeros(tuple(dims.get(d, d) for d in value.shape), dtype=value.dtype)
        elif key in shape:
            out[key] = shape[key]
        elif isinstance(value, int) and value in dims:
            out[key] = dims[value]
        else:
            out[key] = value
    return out


def _model(variant: str, shape: tuple, sample) -> dict:
    """``modelled.model`` at seed 0 (same cache key): lazily mapped inputs, so only what the sampled
    workgroups touch is built (a dense GEMM on zero buffers, see ``kernels.gemm.make_inputs(lazy=True)``;
    the MoE on zero buffers but its real routing)."""
    from .. import modelled

    prep = modelled._prepare(variant, shape, 0)
    out = _model_isa(prep, sample)
    out.update(variant=prep["variant"], family=prep["family"], shape=list(shape), isa_key=prep["isa_key"], seed=0)
    return out


def _model_isa(prep: dict, sample, on_fresh=None) -> dict:
    """``modelled.model_isa`` of a prepared variant at seed 0: the one cache key that :func:`_model` and
    :func:`timeline` share."""
    from .. import modelled

    return modelled.model_isa(prep["isa"], prep["grid"], prep["block"], prep["make_args"], flops=prep["flops"],
                              sample=sample, key_extra=["variant", 0], on_fresh=on_fresh)


def modelled_source(variant: str, shape: Sequence[int]) -> dict:
    """The engine's modelled-speed source (:data:`speed.MODELLED_SOURCES`): ``modelled.model``'s dict at
    this module's sample policy (GEMM on zero inputs), so a step's speed table and its deltas share one
    cached timing run."""
    shape = tuple(int(n) for n in shape)
    return _model(variant, shape, default_sample(variant, shape))


def model_row(variant: str, shape: Sequence[int], sample="auto") -> dict:
    """One modelled point as a flat row (see :data:`SWEEP_COLUMNS`)."""
    sample = default_sample(variant, shape) if sample == "auto" else sample
    t0 = time.perf_counter()
    r = _model(variant, tuple(int(n) for n in shape), sample)
    k = r["kernel"]
    busy = r.get("mfma_busy") or [float("nan")]
    used = [b for b in busy if b > 0] or busy
    row = {"label": r.get("label", LABEL), "variant": variant, "family": r.get("family"), "shape": shape_text(shape),
           "tflops": float(k["tflops"]), "us": float(k["us"]), "bound": k.get("bound"),
           "compute_us": k.get("compute_us"), "memory_us": k.get("memory_us"), "cycles": r.get("cycles"),
           "cycles_per_mfma_loop": r.get("cycles_per_mfma_loop"), "mfma_busy": float(sum(used) / len(used)),
           "model_version": r.get("model_version"), "clock_ghz": r.get("clock_ghz", k.get("clock_ghz")),
           "model_fingerprint": r.get("model_fingerprint"), "sample": "first CU" if sample is None else f"{sample} workgroup(s)",
           "emulator_seconds": r.get("emulator_seconds"), "cached": bool(r.get("cached")),
           "wall_seconds": round(time.perf_counter() - t0, 2)}
    for reason in REASONS:
        row[f"exposed_{reason}"] = float((r.get("exposed") or {}).get(reason, 0))
    if row["label"] != LABEL:
        raise AblationError(f"modelled.model returned a row labelled {row['label']!r}")
    return row


def sweep(points: Iterable[tuple[str, Sequence[int]]], sample="auto") -> pd.DataFrame:
    """Model every ``(variant, shape)`` (duplicates once); one row each, in order."""
    todo = list(dict.fromkeys((variant, tuple(int(n) for n in shape)) for variant, shape in points))
    # one family + shape after another, so a MoE shape's inputs are built once (modelled.lazy_inputs)
    order = sorted(range(len(todo)), key=lambda i: (todo[i][0].split("-")[0], todo[i][1]))
    rows = {}
    try:
        for i in order:
            rows[i] = model_row(*todo[i], sample)
    finally:
        from .. import modelled

        modelled._LAZY_INPUTS.clear()
        gc.collect()
    return pd.DataFrame([rows[i] for i in range(len(todo))], columns=SWEEP_COLUMNS)


def _timeline_cache(key: str) -> Path:
    return paths.cache_dir() / "timing-timeline" / key[:2] / f"{key}.json"


def timeline(variant: str, shape: Sequence[int], iterations: int = 2, sample="auto") -> pd.DataFrame:
    """The hot loop of ``variant`` at ``shape`` as intervals, ``iterations`` loop trips from the middle
    trip of wave 0 on: one track per wave of the first workgroup and one per MFMA pipe. A kernel with no
    hot loop (MoE gemm1) is kept whole, so a figure can show where a step's ISA change lands (e.g. the
    epilogue). Columns ``variant, shape, track, start, end, opcode, kind, line`` (cycles from the window's
    start), ``window`` (``hot loop`` / ``whole kernel``), ``window_cycles``, ``model_version, clock_ghz``.
    Cached on disk (keyed by the ISA, shape, sample and model). On a miss the timeline comes from the
    timing run of :func:`model_row` at the same point when that run is not cached yet (it is then
    stored for the sweep: one simulation for both), else from a traced run of its own."""
    from .. import modelled

    sample = default_sample(variant, shape) if sample == "auto" else sample
    prep = modelled._prepare(variant, tuple(shape), 0)
    fp = modelled.model_fingerprint()
    isa = hashlib.sha256(prep["isa"].encode()).hexdigest()  # the ISA itself: an edit that keeps it keeps this
    key = hashlib.sha256(json.dumps([isa, list(shape), sample, fp, iterations, variant,
                                     "whole-kernel-without-loop", modelled.inputs_digest(variant)]).encode()).hexdigest()
    cache = _timeline_cache(key)

    def load():
        hit = modelled.cache_load(key, "timing-timeline", expect=list)  # a corrupt entry is a miss: recomputed
        ok = hit is not None and all(isinstance(r, dict) and {"track", "start", "end"} <= r.keys() for r in hit)
        return hit if ok else None

    def compute():
        # under this entry's lock the model entry's lock is taken (always in this order: no deadlock)
        rows = []
        _model_isa(prep, sample, on_fresh=lambda t, prog: rows.extend(_window(variant, shape, t, prog, iterations)))
        if not rows:  # the model's point was cached: no simulation ran, so a traced run of its own
            rows = _timeline_rows(variant, shape, prep, sample, iterations)
        cache.parent.mkdir(parents=True, exist_ok=True)
        results.atomic_write_text(cache, json.dumps(rows))
        return rows

    # a miss two processes share is computed once (the per-key lock of the other caches)
    rows, _ = diskcache.load_or_compute_one(cache, load, compute)
    return pd.DataFrame(rows)


def _timeline_rows(variant, shape, prep, sample, iterations) -> list:
    import gfx950emu

    prog = gfx950emu.load(prep["isa"])
    res = gfx950emu.launch(prog, prep["grid"], prep["block"], prep["make_args"](), timing=True, flops=prep["flops"],
                           timing_sample=sample, timing_trace=True)
    return _window(variant, shape, res.timing, prog, iterations)


def _window(variant, shape, t, prog, iterations) -> list:
    """The timeline rows of a traced timing run ``t`` (see :func:`timeline`)."""
    from gfx950emu.timing import trace as _trace

    ivs = [iv for iv in _trace.timeline(t, prog) if iv["track"].startswith("wg0 ") or "MFMA" in iv["track"]]
    hot = t.get("hot_loop") or {}
    heads = sorted(iv["start"] for iv in ivs if iv["track"] == "wg0 wave0" and iv["line"] == hot.get("first_line"))
    if len(heads) >= 2:
        mid = len(heads) // 2
        lo = heads[mid]
        hi = heads[min(len(heads) - 1, mid + iterations)] if mid + iterations < len(heads) else \
            lo + iterations * (heads[mid] - heads[mid - 1])
        window = "hot loop"
    else:  # no hot loop: the whole kernel (the figure picks the part a step changes)
        lo = min((iv["start"] for iv in ivs), default=0)
        hi = max((iv["end"] for iv in ivs), default=lo)
        window = "whole kernel"
    rows = [{"variant": variant, "shape": shape_text(shape), "track": iv["track"].replace("wg0 ", ""),
             "start": int(iv["start"] - lo), "end": int(min(iv["end"], hi) - lo), "opcode": iv["opcode"],
             "kind": iv["kind"], "line": int(iv["line"]), "window": window, "window_cycles": int(hi - lo),
             "model_version": t["model_version"], "clock_ghz": float(t["clock_ghz"])}
            for iv in ivs if iv["end"] > lo and iv["start"] < hi]
    return rows
