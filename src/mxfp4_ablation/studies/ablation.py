"""What each step buys, *modelled*: per-step deltas, where the cycles go, and the ablation's summary.

Every number here comes from the timing model (:func:`mxfp4_ablation.modelled.model`, cached on disk)
and is labelled ``modelled`` with the model's version and clock; nothing here is ever shown as
measured. Two layers:

* **modelling** (imports the runner layer lazily; compiles and runs the model on a cache miss):
  :func:`sweep` (one row per variant x shape), :func:`timeline` (the hot-loop trace window of one
  variant; a kernel without a hot loop whole, the figure showing where its ISA change lands:
  :func:`diff_windows`), :func:`step_section` (a step notebook's speed section) and :func:`summary_section`;
* **tables and figures** (pure pandas / matplotlib, no FlyDSL): :func:`error_band`,
  :func:`step_deltas`, :func:`cycles_table`, :func:`verdicts`, :func:`waterfall`,
  :func:`leave_one_out`, :func:`order_of_impact`, :func:`moe_ratios`, and the figures registered in
  :func:`register` (drawn from the stored tables alone, so ``make figures`` redraws them).

The interval of a modelled delta (:func:`.speed.step_interval`, summarised by :func:`error_band`): from
the model's *held-out* speed-up residuals (``experiments/reference/calibration.csv``, written by
``python -m mxfp4_ablation.calibration fit --write``): a delta ``d`` becomes ``d - bias +- half-width``;
its sign is *resolved* when that interval excludes 0.

Sample: GEMM workgroups are all alike, so a GEMM point models one workgroup (``sample=1``, the setting
the validation table was made with); MoE workgroups differ (empty experts, partial blocks), so a MoE
point models some of the workgroups the first CU receives (:data:`MOE_SAMPLE`: all 16 in decode, 4 in
prefill). The engine's modelled speed slot uses the same policy, so both share one cache entry.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from .. import paths, plots, provenance, results

LABEL = "modelled"
GREEN, RED = "#1b7837", "#b2182b"
REASONS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other")
REASON_COLOURS = {"mfma busy": "#332288", "vmcnt": "#88CCEE", "lgkmcnt": "#44AA99", "barrier": "#882255",
                  "dependency": "#CC6677", "issue": "#DDCC77", "lds_bank": "#117733", "other": "#DDDDDD"}
# (colour-blind safe: Paul Tol's muted palette, plots.CATEGORICAL)
SWEEP_COLUMNS = ["label", "variant", "family", "shape", "tflops", "us", "bound", "compute_us", "memory_us",
                 "cycles", "cycles_per_mfma_loop", "mfma_busy", *[f"exposed_{r}" for r in REASONS],
                 "model_version", "clock_ghz", "model_fingerprint", "sample", "emulator_seconds", "cached",
                 "wall_seconds"]
#: FlyDSL PR #990's "Main changes", "roughly in descending order of impact" (the PR description,
#: https://github.com/ROCm/FlyDSL/pull/990), mapped to our switches. Only the items we could read are
#: listed; b_carry and static_prologue come later in the PR's list (their exact ranks unread), and
#: agpr_acc is PR #756's, not #990's.
PR990_ORDER = (
    ("serpentine", "Serpentine 2x2 MFMA emission order so consecutive MFMAs reuse XDL operands."),
    ("scale_prefetch", "Scale also goes through LDS, so we can issue buffer_load_b128...lds now."),
    ("g2s_m0", "g2s uses the m0 set-once + s_add idiom; the wave-uniform LDS base is readfirstlane'd once."),
    ("wide_epilogue", "Epilogue: C stores use dwordx4 stores via MFMA operand swap + ..."),
)
PR990_URL = "https://github.com/ROCm/FlyDSL/pull/990"


class AblationError(ValueError):
    """Bad input to an ablation table (one clear line)."""


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(n)) for n in shape)


def model_detail(df: pd.DataFrame) -> str:
    """``model 0.1.0, 1.395 GHz`` (every version and clock the rows carry)."""
    if not len(df):
        return "no modelled rows"
    vs = ", ".join(sorted({str(v) for v in df["model_version"].dropna()}))
    return f"model {vs}, {clock_text(df['clock_ghz'])}"


def clock_text(clocks) -> str:
    """``1.395 GHz`` for one clock; ``power-limited clock 1.52-2.4 GHz (per kernel)`` for several (the
    ``[power]`` model gives each kernel its own sustained clock)."""
    cs = sorted({round(float(c), 4) for c in clocks if c == c and c is not None})
    if len(cs) <= 1:
        return f"{cs[0]:g} GHz" if cs else "no clock"
    return f"power-limited clock {cs[0]:.3g}-{cs[-1]:.3g} GHz (per kernel)"


# ============================================================================ modelling


#: MoE: how many of the workgroups the first CU receives are simulated, per regime (block_m): decode
#: (16-row blocks) all of them (16 at M=16, cheap: the kernel is memory bound); prefill (128-row blocks,
#: ~40 s of simulation for the 11 the first CU gets at M=4096) the first 4.
MOE_SAMPLE = {16: 16, 128: 4}


#: The largest MoE token count the summary models. At M=16384 building the full Kimi inputs took the
#: process past 14 GB RSS (measured); the timing runs now map their inputs lazily (only the sampled
#: workgroups' experts are built, ``modelled._prepare``), so every token count of the sweep is modelled.
MOE_MAX_TOKENS = 16384


def default_sample(variant: str, shape: Sequence[int] | None = None):
    """GEMM: one workgroup (all alike; the validation's setting). MoE: :data:`MOE_SAMPLE` by block_m
    (the shape's 6th number; without one, the kernels' own rule: decode below 4096 tokens)."""
    if variant.startswith("gemm"):
        return 1
    if shape is None:
        return MOE_SAMPLE[16]
    block_m = int(shape[5]) if len(shape) > 5 else (16 if int(shape[0]) < 4096 else 128)
    return MOE_SAMPLE.get(block_m, MOE_SAMPLE[16])


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
    the MoE with its real routing and the touched experts' weights)."""
    from .. import modelled

    prep = modelled._prepare(variant, shape, 0)
    out = modelled.model_isa(prep["isa"], prep["grid"], prep["block"], prep["make_args"], flops=prep["flops"],
                             sample=sample, key_extra=["variant", 0])
    out.update(variant=prep["variant"], family=prep["family"], shape=list(shape), isa_key=prep["isa_key"], seed=0)
    return out


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
    Cached on disk (keyed by the ISA, shape, sample and model)."""
    import gfx950emu
    from gfx950emu.timing import trace as _trace

    from .. import modelled

    sample = default_sample(variant, shape) if sample == "auto" else sample
    prep = modelled._prepare(variant, tuple(shape), 0)
    fp = modelled.model_fingerprint()
    key = hashlib.sha256(json.dumps([prep["isa_key"], list(shape), sample, fp, iterations, variant,
                                     "whole-kernel-without-loop", modelled.inputs_digest(variant)]).encode()).hexdigest()
    cache = _timeline_cache(key)
    hit = modelled.cache_load(key, "timing-timeline", expect=list)  # a corrupt entry is a miss: recomputed
    if hit is not None and all(isinstance(r, dict) and {"track", "start", "end"} <= r.keys() for r in hit):
        return pd.DataFrame(hit)
    prog = gfx950emu.load(prep["isa"])
    res = gfx950emu.launch(prog, prep["grid"], prep["block"], prep["make_args"](), timing=True, flops=prep["flops"],
                           timing_sample=sample, timing_trace=True)
    t = res.timing
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
    cache.parent.mkdir(parents=True, exist_ok=True)
    results.atomic_write_text(cache, json.dumps(rows))
    return pd.DataFrame(rows)


# ============================================================================ tables (pure)


def error_band(path: str | Path | None = None) -> dict:
    """The model's uncertainty for a step delta (see the module doc): the held-out-residual model of
    :func:`.speed.step_interval` (``path``: a calibration.csv), as ``{"band_pp"`` (the interval's
    half-width), ``"bias_pp"``, ``"spread_pp"``, ``"rule"}``."""
    from .speed import step_interval

    iv = step_interval(0.0, path=path)
    return {"band_pp": iv["half_width_pp"], "bias_pp": iv["bias_pp"], "spread_pp": iv["spread_pp"],
            "rule": iv["rule"], "path": path}


def step_deltas(sweep_df: pd.DataFrame, pairs: Sequence[tuple[str | None, str]],
                switches: dict | None = None, calibration: str | Path | None = None) -> pd.DataFrame:
    """Per ``(baseline, variant)`` pair and shape: both modelled TFLOPS and us, the delta in % with
    its interval from held-out residuals (:func:`.speed.step_interval`: ``delta_low`` / ``delta_high``,
    ``bias_pp``, ``band_pp`` = the half-width; ``resolved`` = the interval excludes 0), the bound. A
    pair with no baseline (the first rung) has no delta."""
    from .speed import step_interval

    by = {(r.variant, r.shape): r for r in sweep_df.itertuples()}
    rows = []
    for base, var in pairs:
        for shape in dict.fromkeys(sweep_df.loc[sweep_df["variant"] == var, "shape"]):
            v = by[(var, shape)]
            b = by.get((base, shape)) if base else None
            if base and b is None:  # the predecessor was not modelled at this shape
                continue
            d = 100.0 * (v.tflops / b.tflops - 1.0) if b is not None else float("nan")
            iv = step_interval(d, path=calibration)
            rows.append({"label": LABEL, "variant": var, "baseline": base,
                         "switch": (switches or {}).get(var), "shape": shape,
                         "baseline_tflops": b.tflops if b is not None else float("nan"), "tflops": v.tflops,
                         "baseline_us": b.us if b is not None else float("nan"), "us": v.us,
                         "delta_pct": round(d, 3) if not math.isnan(d) else d, "band_pp": iv["half_width_pp"],
                         "bias_pp": iv["bias_pp"], "delta_centre": iv["centre_pct"],
                         "delta_low": iv["low"], "delta_high": iv["high"], "resolved": iv["resolved"],
                         "bound": v.bound, "baseline_bound": b.bound if b is not None else None,
                         "model_version": v.model_version, "clock_ghz": v.clock_ghz})
    return pd.DataFrame(rows)


def cycles_table(sweep_df: pd.DataFrame) -> pd.DataFrame:
    """Long table ``variant, shape, reason, cycles``: the CU's span per SIMD over the sampled workgroups,
    split into MFMA-busy cycles and the exposed cycles by reason (the model's ``busy + sum(exposed) =
    span``, so busy = mfma_busy / (1 - mfma_busy) x sum(exposed))."""
    rows = []
    for r in sweep_df.itertuples():
        exposed = {x: float(getattr(r, f"exposed_{x}")) for x in REASONS}
        b = float(r.mfma_busy)
        busy = b / (1.0 - b) * sum(exposed.values()) if 0 <= b < 1 else float("nan")
        rows.append({"variant": r.variant, "shape": r.shape, "reason": "mfma busy", "cycles": busy})
        rows += [{"variant": r.variant, "shape": r.shape, "reason": x, "cycles": c} for x, c in exposed.items()]
    out = pd.DataFrame(rows)
    out["model_version"] = sweep_df["model_version"].iloc[0] if len(sweep_df) else None
    out["clock_ghz"] = sweep_df["clock_ghz"].iloc[0] if len(sweep_df) else None
    return out


_PCT = re.compile(r"(?:~|about |\+)?(\d+(?:\.\d+)?)\s*(?:-|–|to)?\s*(\d+(?:\.\d+)?)?\s*%\s*(faster)?")


def claimed_speedup(claim: str) -> tuple[float, float] | None:
    """The speed-up in % a claim states (``"~7% faster"`` -> (7, 7), ``"2-6% faster"`` -> (2, 6)), or
    None when it states none (a percentage of instructions is not a speed-up: only ``faster`` counts)."""
    for mo in _PCT.finditer(claim):
        if mo.group(3):
            lo = float(mo.group(1))
            return lo, float(mo.group(2)) if mo.group(2) else lo
    return None


def verdict(claim: str, delta_pct: float, band_pp: float, low: float | None = None,
            high: float | None = None) -> str:
    """Did the model see the claimed effect? One line: sign first, then size where the claim gives one.
    ``low`` / ``high``: the step's interval (:func:`.speed.step_interval`); without them the symmetric
    ``delta_pct +- band_pp``."""
    if delta_pct is None or math.isnan(delta_pct):
        return "no predecessor: nothing to compare"
    if low is None or high is None or low != low:
        low, high = delta_pct - band_pp, delta_pct + band_pp
    size = claimed_speedup(claim)
    span = f"interval [{low:+.2f}, {high:+.2f}] %"
    if low <= 0 <= high:
        sign = f"sign unresolved: {delta_pct:+.2f}%, {span} holds 0"
    elif low > 0:
        sign = f"sign seen: faster by {delta_pct:+.2f}% ({span})"
    else:
        sign = f"sign contradicted: slower by {delta_pct:+.2f}% ({span})"
    if size is None:
        return f"{sign}; the claim states no speed-up size"
    lo, hi = size
    hit = high >= lo and low <= hi
    claimed = f"~{lo:g}%" if lo == hi else f"{lo:g}-{hi:g}%"
    return (f"{sign}; the claim says {claimed} faster (in its own regime): size "
            f"{'consistent' if hit else 'not consistent'} with the model here")


def verdicts(deltas: pd.DataFrame, claims: dict) -> pd.DataFrame:
    """Per step and shape: the seed's claim and the verdict line."""
    rows = []
    for r in deltas.itertuples():
        claim = claims.get(r.variant, "")
        line = verdict(claim, r.delta_pct, r.band_pp, getattr(r, "delta_low", None), getattr(r, "delta_high", None))
        if getattr(r, "bound", None) == "memory" and getattr(r, "baseline_bound", None) == "memory":
            line += "; both are memory-bound in the model (its memory floor hides issue-side changes)"
        rows.append({"label": LABEL, "variant": r.variant, "switch": r.switch, "shape": r.shape,
                     "claim": claim, "delta_pct": r.delta_pct, "band_pp": r.band_pp,
                     "claimed_pct": (lambda s: None if s is None else f"{s[0]:g}-{s[1]:g}")(claimed_speedup(claim)),
                     "verdict": line})
    return pd.DataFrame(rows)


def waterfall(sweep_df: pd.DataFrame, ladder: Sequence[str], shape: str,
              switches: dict | None = None) -> pd.DataFrame:
    """``step, variant, switch, start, delta, end`` in TFLOPS along ``ladder`` at ``shape``: the first
    row is the base (start 0), the deltas add up to the last rung exactly."""
    sub = sweep_df[sweep_df["shape"] == shape].set_index("variant")
    missing = [v for v in ladder if v not in sub.index]
    if missing:
        raise AblationError(f"waterfall at {shape}: no modelled row for {', '.join(missing)}")
    rows, prev = [], 0.0
    for i, v in enumerate(ladder):
        t = float(sub.loc[v, "tflops"])
        rows.append({"label": LABEL, "step": i, "variant": v, "switch": (switches or {}).get(v, "base" if i == 0 else v),
                     "shape": shape, "start": prev, "delta": t - prev, "end": t,
                     "delta_pct": 100.0 * (t / prev - 1.0) if i else float("nan"),
                     "model_version": sub.loc[v, "model_version"] if "model_version" in sub else None,
                     "clock_ghz": sub.loc[v, "clock_ghz"] if "clock_ghz" in sub else float("nan")})
        prev = t
    return pd.DataFrame(rows)


def leave_one_out(sweep_df: pd.DataFrame, full: str, loo: dict, shape: str) -> pd.DataFrame:
    """Per switch (``loo``: switch -> variant without it): the modelled loss of removing it from ``full``
    (TFLOPS and %; positive = the switch is worth that much on top of all the others)."""
    sub = sweep_df[sweep_df["shape"] == shape].set_index("variant")
    f = float(sub.loc[full, "tflops"])
    rows = []
    for s, v in loo.items():
        t = float(sub.loc[v, "tflops"])
        rows.append({"label": LABEL, "switch": s, "variant": v, "shape": shape, "full_tflops": f, "tflops": t,
                     "loss_tflops": f - t, "loss_pct": 100.0 * (f / t - 1.0),
                     "model_version": sub.loc[v, "model_version"], "clock_ghz": sub.loc[v, "clock_ghz"]})
    return pd.DataFrame(rows).sort_values("loss_pct", ascending=False).reset_index(drop=True)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN for fewer than two pairs."""
    if len(a) < 2:
        return float("nan")
    ra, rb = pd.Series(list(a)).rank(), pd.Series(list(b)).rank()
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(ra.corr(rb))


def order_of_impact(deltas: pd.DataFrame, loo: pd.DataFrame | None, shape: str,
                    order=PR990_ORDER) -> tuple[pd.DataFrame, dict]:
    """The PR's impact order against the modelled one (ladder step delta at ``shape``, and the
    leave-one-out loss), with Spearman's rho over the switches the PR ranks."""
    d = deltas[deltas["shape"] == shape].set_index("switch")["delta_pct"]
    l = loo.set_index("switch")["loss_pct"] if loo is not None and len(loo) else pd.Series(dtype=float)
    rows = []
    for rank, (sw, text) in enumerate(order, 1):
        rows.append({"label": LABEL, "switch": sw, "pr990_rank": rank, "pr990_text": text,
                     "modelled_step_delta_pct": float(d.get(sw, float("nan"))),
                     "modelled_loo_loss_pct": float(l.get(sw, float("nan"))), "shape": shape})
    df = pd.DataFrame(rows)
    df["modelled_step_rank"] = df["modelled_step_delta_pct"].rank(ascending=False)
    df["modelled_loo_rank"] = df["modelled_loo_loss_pct"].rank(ascending=False)
    ok = df.dropna(subset=["modelled_step_delta_pct"])
    okl = df.dropna(subset=["modelled_loo_loss_pct"])
    stats = {"rho_step": spearman(ok["pr990_rank"], ok["modelled_step_rank"]),
             "rho_loo": spearman(okl["pr990_rank"], okl["modelled_loo_rank"]), "n": len(ok), "n_loo": len(okl),
             "source": PR990_URL}
    return df, stats


def moe_ratios(sweep_df: pd.DataFrame, firsts: dict, lasts: dict, published: pd.DataFrame | None) -> pd.DataFrame:
    """Per gemm (``firsts``/``lasts``: label -> variant) and token count: modelled time last / first,
    beside aiter PR #3828's published change (after / before of its FlyDSL-time / HIP-time ratio: the
    HIP time cancels, leaving FlyDSL after / before)."""
    rows = []
    for gemm, first in firsts.items():
        last = lasts[gemm]
        a = sweep_df[sweep_df["variant"] == first].set_index("shape")
        b = sweep_df[sweep_df["variant"] == last].set_index("shape")
        for shape in [s for s in a.index if s in b.index]:
            M = int(shape.split("x")[0])
            pub = None
            if published is not None and len(published):
                p = published[(published["kernel"] == gemm) & (published["M"] == M)].set_index("stage")["ratio"]
                if {"before", "after"} <= set(p.index):
                    pub = float(p["after"]) / float(p["before"])
            rows.append({"label": LABEL, "gemm": gemm, "M": M, "shape": shape, "first": first, "last": last,
                         "first_us": float(a.loc[shape, "us"]), "last_us": float(b.loc[shape, "us"]),
                         "modelled_last_over_first": float(b.loc[shape, "us"]) / float(a.loc[shape, "us"]),
                         "published_after_over_before": pub, "bound": b.loc[shape, "bound"],
                         "model_version": b.loc[shape, "model_version"], "clock_ghz": b.loc[shape, "clock_ghz"]})
    out = pd.DataFrame(rows)
    return out.sort_values(["gemm", "M"]).reset_index(drop=True) if len(out) else out


# ============================================================================ a step notebook's section


def _prov(settings: dict) -> dict:
    return provenance.collect("modelled", settings={"kind": LABEL, **settings})


def _write(df: pd.DataFrame, path: Path, settings: dict) -> None:
    results.write_table(df, path, _prov(settings))


def isa_only() -> bool:
    """``MXFP4_MODEL_SHAPES=isa``: model at the ISA shapes only (GEMM 8192^3; MoE M=16 and M=4096), for a
    machine where the full grid is too slow; default ``all``."""
    import os

    value = os.environ.get("MXFP4_MODEL_SHAPES", "all")
    if value not in ("all", "isa"):
        raise AblationError(f"MXFP4_MODEL_SHAPES must be 'all' or 'isa', got {value!r}")
    return value == "isa"


def default_shapes(study) -> list[tuple]:
    """GEMM: PR #990's four shapes; MoE: Kimi-K2.5 TP=4 at M=16 (decode) and M=4096 (prefill)."""
    from .. import shapes as shapes_mod

    if study.name == "gemm":
        return [tuple(s) for s in shapes_mod.shapes("gemm", "device")][: 1 if isa_only() else None]
    return [tuple(s) for regime in shapes_mod.by_regime("moe", "device").values() for s in regime]


@dataclass
class StepModel:
    """A step's modelled speed section (the same data as the run folder's ``modelled_*.parquet``)."""

    variant: str
    baseline: str | None
    out_dir: Path
    sweep: pd.DataFrame
    deltas: pd.DataFrame
    cycles: pd.DataFrame
    timeline: pd.DataFrame
    verdicts: pd.DataFrame
    band: dict
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def table(self) -> pd.DataFrame:
        cols = ["shape", "baseline_tflops", "tflops", "baseline_us", "us", "delta_pct", "delta_low", "delta_high",
                "resolved", "bound", "model_version", "clock_ghz", "label"]
        return self.deltas[cols]

    def verdict_lines(self) -> str:
        return "\n".join(f"* {r.shape}: {r.verdict}" for r in self.verdicts.itertuples())

    def figure(self, kind: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[kind]))


def step_section(step, shapes: Sequence[Sequence[int]] | None = None, timeline_shape: Sequence[int] | None = None,
                 render: bool = True) -> StepModel:
    """Model a step notebook's variant and its predecessor; write ``modelled_sweep / _delta / _cycles
    / _timeline / _verdict.parquet`` into the step's run folder and draw its two figures."""
    t0 = time.perf_counter()
    study, variant, baseline = step.study, step.variant, step.baseline
    shapes = [tuple(s) for s in (shapes or default_shapes(study))]
    names = [n for n in (baseline, variant) if n]
    sw = sweep([(n, s) for s in shapes for n in names])
    band = error_band()
    switch = step.switch
    deltas = step_deltas(sw, [(baseline, variant)], {variant: switch})
    record = study.switch_record(study.variant(variant).family, switch) if switch else None
    claims = {variant: getattr(record, "claim", "") if record else ""}
    ver = verdicts(deltas, claims)
    tl_shape = tuple(timeline_shape or shapes[-1 if study.name != "gemm" else 0])
    tl = pd.concat([timeline(n, tl_shape) for n in names], ignore_index=True)
    cyc = cycles_table(sw[sw["shape"] == shape_text(tl_shape)])
    out = Path(step.out_dir)
    settings = {"variant": variant, "baseline": baseline, "shapes": [shape_text(s) for s in shapes],
                "error_band": band["rule"]}
    for name, df in (("modelled_sweep", sw), ("modelled_delta", deltas), ("modelled_cycles", cyc),
                     ("modelled_timeline", tl), ("modelled_verdict", ver)):
        _write(df, out / f"{name}.parquet", settings)
    sm = StepModel(variant, baseline, out, sw, deltas, cyc, tl, ver, band, seconds=round(time.perf_counter() - t0, 1))
    if render:
        from .. import figures

        slug = study.step_slug(variant)
        for kind in ("speed_delta", "speed_cycles"):
            sm.figures[kind] = figures.render(f"{study.name}/{slug}_{kind}", out)[0]
    return sm


@dataclass
class SummaryModel:
    """The summary's modelled tables (the same data as ``<run>/modelled-<study>/*.parquet``)."""

    study: str
    out_dir: Path
    sweep: pd.DataFrame
    deltas: pd.DataFrame
    tables: dict
    stats: dict
    band: dict
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def figure(self, name: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[name]))

    def findings(self) -> list[str]:
        """Sentences generated from the tables (for the README and the closing note)."""
        return findings(self.study, self.tables, self.stats, self.band)


def _ladder_pairs(study, family: str) -> list[tuple]:
    names = study.ladder_names(family)
    return [(None, names[0])] + list(zip(names[:-1], names[1:]))


def summary_plan(study) -> list[tuple[str, tuple]]:
    """Which (variant, shape) points the summary models. GEMM: every rung at PR #990's four shapes and
    the leave-one-out variants at 8192^3. MoE: every rung at M=16 and M=4096 (the ISA shapes), the
    leave-one-out variants at M=4096, and the first and last rungs at the Kimi token counts up to
    :data:`MOE_MAX_TOKENS` (16, 128, 1024, 4096, 16384)."""
    from .. import shapes as shapes_mod

    points = []
    if study.name == "gemm":
        device = default_shapes(study)
        points += [(n, s) for s in device for n in study.ladder_names("gemm")]
        points += [(n, device[0]) for n in study.leave_one_out_names("gemm")]
        return points
    by = shapes_mod.by_regime("moe", "device")
    isa = [tuple(s) for r in by.values() for s in r]
    prefill = [tuple(s) for s in by.get("prefill", [])]
    kimi = [tuple(s) for r in shapes_mod.by_regime("moe", "kimi_sweep").values() for s in r
            if int(s[0]) <= MOE_MAX_TOKENS and not isa_only()]
    for fam in study.spec.families:
        ladder = study.ladder_names(fam)
        points += [(n, s) for s in isa for n in ladder]
        points += [(n, s) for s in prefill for n in study.leave_one_out_names(fam)]
        points += [(n, s) for s in kimi for n in (ladder[0], ladder[-1])]
    return points


def summary_section(study, out_dir, points: Sequence | None = None, render: bool = True) -> SummaryModel:
    """Model the summary's points (:func:`summary_plan`), write the waterfall / leave-one-out /
    order-of-impact / MoE-ratio tables into ``<out_dir>/modelled-<study>/`` and draw the figures."""
    t0 = time.perf_counter()
    points = list(points) if points is not None else summary_plan(study)
    sw = sweep(points)
    band = error_band()
    out = Path(out_dir) / f"modelled-{study.name}"
    tables, stats = {}, {}
    all_deltas = []
    for fam in study.spec.families:
        switches = {n: study.step_switch(n) for n in study.ladder_names(fam)}
        pairs = [p for p in _ladder_pairs(study, fam) if p[1] in set(sw["variant"])]
        d = step_deltas(sw, pairs, switches)
        d.insert(1, "gemm", study.spec.families[fam])
        all_deltas.append(d)
        full = study.ladder_names(fam)[-1]
        loo_names = study.leave_one_out_names(fam)
        loo_map = {n.rsplit("-no-", 1)[1]: n for n in loo_names}
        loo_rows = []
        for shape in dict.fromkeys(sw.loc[sw["variant"].isin(loo_names), "shape"]):
            have = set(sw.loc[sw["shape"] == shape, "variant"])
            m = {s: v for s, v in loo_map.items() if v in have}
            if full in have and m:
                t = leave_one_out(sw, full, m, shape)
                t.insert(0, "gemm", study.spec.families[fam])
                loo_rows.append(t)
        if loo_rows:
            tables.setdefault("modelled_leave_one_out", []).append(pd.concat(loo_rows, ignore_index=True))
    deltas = pd.concat(all_deltas, ignore_index=True)
    tables["modelled_delta"] = deltas
    tables["modelled_sweep"] = sw
    if "modelled_leave_one_out" in tables:
        tables["modelled_leave_one_out"] = pd.concat(tables["modelled_leave_one_out"], ignore_index=True)
    if study.name == "gemm":
        ladder = study.ladder_names("gemm")
        switches = {n: study.step_switch(n) for n in ladder}
        wfs = [waterfall(sw, ladder, s, switches) for s in dict.fromkeys(sw["shape"])
               if set(ladder) <= set(sw.loc[sw["shape"] == s, "variant"])]
        wf = pd.concat(wfs, ignore_index=True)
        tables["modelled_waterfall"] = wf
        pub = study.spec.published.read().copy()
        pub["shape"] = [shape_text((r.M, r.N, r.K)) for r in pub.itertuples()]
        pub["label"] = "published"
        tables["modelled_published"] = pub
        first = shape_text(default_shapes(study)[0])
        order, ostats = order_of_impact(deltas, tables.get("modelled_leave_one_out"), first)
        tables["modelled_order"] = order
        stats["order"] = ostats
    else:
        pub = study.spec.published.read()
        firsts = {study.spec.families[f]: study.ladder_names(f)[0] for f in study.spec.families}
        lasts = {study.spec.families[f]: study.ladder_names(f)[-1] for f in study.spec.families}
        tables["modelled_moe_ratios"] = moe_ratios(sw, firsts, lasts, pub)
    settings = {"study": study.name, "points": len(points), "error_band": band["rule"], **{
        f"rho_{k}": v for k, v in stats.get("order", {}).items() if k.startswith("rho")}}
    for name, df in tables.items():
        _write(df, out / f"{name}.parquet", settings)
    results.atomic_write_json(out / "modelled_stats.json", {"band": band, **stats})
    sm = SummaryModel(study.name, out, sw, deltas, tables, stats, band, seconds=round(time.perf_counter() - t0, 1))
    if render:
        from .. import figures

        names = ["modelled_leave_one_out"] + (["modelled_waterfall"] if study.name == "gemm" else ["modelled_ratios"])
        for name in names:
            sm.figures[name] = figures.render(f"{study.name}/{name}", Path(out_dir))[0]
    return sm


def _seed_first_rung(study: str) -> str | None:
    """The rung the fidelity view pairs with the seed's before kernel (for a one-family study)."""
    try:
        from .. import fidelity
    except ImportError:
        return None
    seed = fidelity.SEEDS.get(study)
    return seed.first if seed is not None else None


def findings(study: str, tables: dict, stats: dict, band: dict) -> list[str]:
    """Generated sentences: the biggest modelled step, the waterfall's total vs published, the order's rho,
    the MoE ratios. Every one says modelled."""
    out = []
    d = tables.get("modelled_delta")
    if d is not None and len(d.dropna(subset=["delta_pct"])):
        dd = d.dropna(subset=["delta_pct"])
        top = dd.loc[dd["delta_pct"].idxmax()]
        out.append(f"Largest modelled step: {top['variant']} ({top['switch']}) {top['delta_pct']:+.2f}% at "
                   f"{top['shape']} (interval [{top['delta_low']:+.2f}, {top['delta_high']:+.2f}] %); "
                   f"{int(dd['resolved'].sum())} of {len(dd)} step deltas are resolved (their interval from "
                   f"held-out residuals excludes 0; bias {band['bias_pp']:+.2f} pp removed, +-{band['band_pp']:.2f} pp).")
    wf = tables.get("modelled_waterfall")
    pub = tables.get("modelled_published")
    if wf is not None and len(wf):
        s = wf["shape"].iloc[0]
        sub = wf[wf["shape"] == s]
        first, last = float(sub["end"].iloc[0]), float(sub["end"].iloc[-1])
        p = pub[pub["shape"] == s].set_index("stage")["tflops"] if pub is not None else {}
        pb = (f"; PR #990 published {p['before_990']:.0f} -> {p['after_990']:.0f} ({100 * (p['after_990'] / p['before_990'] - 1):+.2f}%)"
              if "before_990" in p and "after_990" in p else "")
        out.append(f"Modelled ladder at {s}: {sub['variant'].iloc[0]} {first:.0f} -> {sub['variant'].iloc[-1]} "
                   f"{last:.0f} TFLOPS ({100 * (last / first - 1):+.2f}%){pb}.")
        start = _seed_first_rung(study)
        names = list(sub["variant"])
        if start in names[1:]:
            begin = float(sub["end"].iloc[names.index(start)])
            out.append(f"The seed's own span at {s} (from {start}, the rung matching its before kernel, see the "
                       f"fidelity table): {begin:.0f} -> {last:.0f} TFLOPS ({100 * (last / begin - 1):+.2f}%){pb}.")
    o = stats.get("order")
    if o:
        out.append(f"PR #990's impact order vs the modelled step deltas over its {o['n']} ranked switches we map: "
                   f"Spearman rho = {o['rho_step']:.2f} (leave-one-out losses, {o.get('n_loo', '?')} switches with a "
                   f"leave-one-out variant: {o['rho_loo']:.2f}).")
    r = tables.get("modelled_moe_ratios")
    if r is not None and len(r):
        parts = [f"{x.gemm} M={x.M}: {x.modelled_last_over_first:.3f}" +
                 (f" (published {x.published_after_over_before:.3f})" if x.published_after_over_before == x.published_after_over_before and x.published_after_over_before is not None else "")
                 for x in r.itertuples()]
        out.append("Modelled MoE time last/first rung: " + "; ".join(parts) + ".")
    return out


# ============================================================================ figures (stored tables only)


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    return results.read_table(Path(run_dir) / f"{name}.parquet")[0]


def draw_step_delta(run_dir: Path):
    """Step vs predecessor, modelled TFLOPS per shape (one panel each, every axis from 0), with the delta
    and the interval the delta table stores."""
    import matplotlib.pyplot as plt

    from .views import interval_label, shape_tick

    d = _read(run_dir, "modelled_delta")
    variant, base = d["variant"].iloc[0], d["baseline"].iloc[0]
    has_base = base is not None and isinstance(base, str)
    fig, axes = plt.subplots(1, len(d), figsize=(max(7.2, 2.0 * len(d) + 0.8), 3.3), squeeze=False)
    for ax, r in zip(axes[0], d.itertuples()):
        names = ([base] if has_base else []) + [variant]
        vals = ([float(r.baseline_tflops)] if has_base else []) + [float(r.tflops)]
        us = ([float(r.baseline_us)] if has_base else []) + [float(r.us)]
        ax.bar(range(len(vals)), vals, 0.6, color=(["#bababa"] if has_base else []) + ["#2166ac"])
        for x, v, u in zip(range(len(vals)), vals, us):
            ax.text(x, v, f"{v:.0f}\n{u:.0f} µs" if v >= 100 else f"{v:.1f}\n{u:.0f} µs", ha="center", va="bottom",
                    fontsize=7)
        ax.set_ylim(0, max(vals) * 1.3)
        ax.set_xlim(-0.6, len(vals) - 0.4)
        ax.set_xticks(range(len(vals)), [n.replace("gemm-", "") for n in names], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        head = shape_tick(r.shape)
        if has_base:
            lo, hi = getattr(r, "delta_low", float("nan")), getattr(r, "delta_high", float("nan"))
            head += "\n" + _interval_text(float(r.delta_pct), float(lo), float(hi)) + " %"
        ax.set_title(head, loc="left", fontsize=7)
    axes[0][0].set_ylabel("TFLOPS (modelled)", fontsize=8)
    title = f"{variant}" + (f" vs {base}" if has_base else "") + ": modelled TFLOPS per shape"
    fig.suptitle(title, x=0.01, ha="left", fontsize=9)
    text, colour = plots.SOURCES["modelled"]
    note = f"{text}: {model_detail(d)}" + (f"; delta vs {base}, interval: {interval_label(d)}" if has_base else "")
    fig.text(0.01, 0.01, note, fontsize=7, color=colour, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


_C = plots.CATEGORICAL  # colour-blind-safe (Paul Tol's muted): indigo cyan teal green olive sand rose wine purple grey
TIMELINE_COLOURS = {"mfma": _C[0], "vmem": _C[1], "lds": _C[2], "smem": _C[3], "valu": _C[4], "salu": _C[5],
                    "waitcnt": _C[6], "barrier": _C[7], "branch": _C[8], "nop": _C[9], "end": "#777777"}
DIFF_COLOUR = "#000000"


def _wave0_ops(tl: pd.DataFrame) -> pd.DataFrame:
    return tl[tl["track"] == "wave0"].sort_values(["start", "end"]).reset_index(drop=True)


def diff_windows(tl: pd.DataFrame, base: str | None, variant: str, margin: float = 0.15) -> dict:
    """For a timeline of whole kernels: per variant, ``(lo, hi, spans)`` -- the cycle window around the
    instructions wave 0 executes differently from the other variant (opcode sequences aligned with
    difflib), with ``margin`` of the window's width either side, and the differing instructions'
    ``(start, end)`` spans. Empty when there is no other variant or nothing differs."""
    import difflib

    if not base or base == variant:
        return {}
    a, b = _wave0_ops(tl[tl["variant"] == base]), _wave0_ops(tl[tl["variant"] == variant])
    if not len(a) or not len(b):
        return {}
    sm = difflib.SequenceMatcher(None, list(a["opcode"]), list(b["opcode"]), autojunk=False)
    changed = {base: [], variant: []}
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        changed[base] += list(range(i1, i2))
        changed[variant] += list(range(j1, j2))
    out = {}
    for name, ops in ((base, a), (variant, b)):
        idx = changed[name]
        if not idx:
            continue
        spans = [(float(ops.loc[i, "start"]), float(ops.loc[i, "end"])) for i in idx]
        lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
        pad = max(margin * (hi - lo), 100.0)
        total = float(tl.loc[tl["variant"] == name, "end"].max())
        out[name] = (max(0.0, lo - pad), min(total, hi + pad), spans)
    if not out:
        return {}
    # the other side of a pure insertion / deletion: the same place in its own timeline
    for name, ops in ((base, a), (variant, b)):
        if name not in out:
            other = variant if name == base else base
            lo, hi, _ = out[other]
            out[name] = (lo, hi, [])
    return out


def _draw_timeline(ax, tl: pd.DataFrame, title: str, xlabel: str, window: tuple | None = None) -> None:
    tracks = sorted(set(tl["track"]), key=lambda t: (("MFMA" in t), t))
    lo, hi, spans = window if window else (None, None, [])
    if window:
        tl = tl[(tl["end"] > lo) & (tl["start"] < hi)]
    for y, track in enumerate(tracks):
        sub = tl[tl["track"] == track]
        for kind, g in sub.groupby("kind"):
            ax.broken_barh(list(zip(g["start"], (g["end"] - g["start"]).clip(lower=1))), (y - 0.4, 0.8),
                           facecolors=TIMELINE_COLOURS.get(kind, "#bababa"), linewidth=0,
                           rasterized=True)  # thousands of bars: pixels in the SVG, not one path each
    labels = list(tracks)
    if spans:  # one more row: the instructions of wave 0 that differ from the other variant
        ax.broken_barh([(s, max(e - s, 1.0)) for s, e in spans], (len(tracks) - 0.4, 0.8), facecolors=DIFF_COLOUR,
                       linewidth=0, rasterized=True)
        labels.append("wave0: ISA diff")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    if window:
        ax.set_xlim(lo, hi)
    ax.set_xlabel(xlabel, fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title, loc="left", fontsize=8)


def draw_step_cycles(run_dir: Path):
    """Where the cycles go: MFMA-busy + exposed cycles by reason (predecessor vs step), and each one's
    timeline (4 waves + MFMA pipes) below: two hot-loop trips, or -- for a kernel with no hot loop -- the
    window where the step's ISA differs from its predecessor's (the whole kernel for a first rung)."""
    import matplotlib.pyplot as plt

    cyc = _read(run_dir, "modelled_cycles")
    tl = _read(run_dir, "modelled_timeline")
    d = _read(run_dir, "modelled_delta")
    variant, base = d["variant"].iloc[0], d["baseline"].iloc[0]
    base = base if isinstance(base, str) else None
    names = [n for n in (base, variant) if isinstance(n, str)]
    whole = "window" in tl.columns and (tl["window"] == "whole kernel").any()
    windows = diff_windows(tl, base, variant) if whole else {}
    fig = plt.figure(figsize=(11.0, 2.2 + 2.3 * len(names)))
    gs = fig.add_gridspec(len(names), 2, width_ratios=[1.0, 3.2])
    ax = fig.add_subplot(gs[:, 0])
    bottoms = [0.0] * len(names)
    reasons = list(REASON_COLOURS)
    for reason in reasons:
        vals = [float(cyc[(cyc["variant"] == n) & (cyc["reason"] == reason)]["cycles"].sum()) for n in names]
        ax.bar(range(len(names)), vals, 0.6, bottom=bottoms, color=REASON_COLOURS[reason], label=reason)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylim(0, max(bottoms + [1.0]) * 1.55)
    ax.set_ylabel("cycles per SIMD (sampled workgroups)", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=6, frameon=False, loc="upper center", ncol=2)
    ax.set_title(f"cycles @ {cyc['shape'].iloc[0]}", loc="left", fontsize=8)
    for i, n in enumerate(names):
        a = fig.add_subplot(gs[i, 1])
        sub = tl[tl["variant"] == n]
        w = int(sub["window_cycles"].iloc[0]) if len(sub) else 0
        kind = str(sub["window"].iloc[0]) if len(sub) and "window" in sub.columns else None
        if kind == "whole kernel":
            win = windows.get(n)
            if win:
                other = base if n == variant else variant
                title = (f"{n}: no hot loop; cycles {win[0]:.0f}-{win[1]:.0f} of {w}, where wave 0's instruction "
                         f"stream differs from {other}'s")
            else:
                title = f"{n}: no hot loop; the whole kernel, {w} cycles"
            _draw_timeline(a, sub, title, "cycles from wave 0's first instruction", win)
        elif kind == "hot loop":
            _draw_timeline(a, sub, f"{n}: hot loop, two trips from the middle trip ({w} cycles)",
                           "cycles from the start of a middle hot-loop trip")
        else:  # a table from before the window column: say only what it is
            _draw_timeline(a, sub, f"{n}: timeline window of {w} cycles", "cycles from the window's start")
    text, colour = plots.SOURCES["modelled"]
    kinds = sorted(set(tl["kind"])) if len(tl) else []
    handles = [plt.Rectangle((0, 0), 1, 1, color=TIMELINE_COLOURS.get(k, "#bababa")) for k in kinds]
    if windows:
        kinds, handles = kinds + ["ISA diff"], handles + [plt.Rectangle((0, 0), 1, 1, color=DIFF_COLOUR)]
    fig.suptitle(f"{variant}: where the cycles go ({text}: {model_detail(tl if len(tl) else cyc)})", x=0.01,
                 ha="left", fontsize=9)
    if handles:
        fig.legend(handles, kinds, fontsize=7, frameon=False, ncol=len(kinds), loc="lower right",
                   bbox_to_anchor=(0.995, 0.0))
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    return fig


def _interval_text(d: float, lo: float, hi: float) -> str:
    if lo != lo or hi != hi:
        return f"{d:+.1f} %"
    if abs((hi - d) - (d - lo)) < 0.05:
        return f"{d:+.1f} ±{hi - d:.1f}"
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def draw_waterfall(run_dir: Path):
    """Per shape (one column each): the step before the seed PR (agpr_acc, PR #756: gemm-v0 -> the rung
    matching PR #990's before kernel) on its own axis, then PR #990's span as a waterfall in % of that
    rung: each step's modelled change with the interval the delta table stores, the modelled total, and
    PR #990's published before -> after. Every bar starts at 0 % (no truncated axis)."""
    import matplotlib.pyplot as plt

    wf = _read(run_dir, "modelled_waterfall")
    pub = _read(run_dir, "modelled_published")
    dpath = Path(run_dir) / "modelled_delta.parquet"
    deltas = _read(run_dir, "modelled_delta") if dpath.is_file() else pd.DataFrame(
        columns=["variant", "shape", "delta_low", "delta_high"])
    from .views import interval_label

    iv_label = interval_label(deltas) if len(deltas) else "no interval stored"
    iv = {(r.variant, r.shape): (float(r.delta_low), float(r.delta_high)) for r in deltas.itertuples()}
    shapes = list(dict.fromkeys(wf["shape"]))
    seed_first = _seed_first_rung("gemm")
    fig, axes = plt.subplots(2, len(shapes), figsize=(max(8.4, 3.7 * len(shapes) + 0.9), 5.6), squeeze=False,
                             gridspec_kw={"height_ratios": [1.0, 5.0]}, sharey="row")
    for col, shape in enumerate(shapes):
        sub = wf[wf["shape"] == shape].sort_values("step").reset_index(drop=True)
        names = list(sub["variant"])
        k = names.index(seed_first) if seed_first in names[1:] else 1
        # the steps before the seed's span, each on the top axis (today: agpr_acc alone)
        top = axes[0][col]
        pre = sub.iloc[1:k + 1]
        ys = list(range(len(pre)))
        pre_vals = [float(v) for v in pre["delta_pct"]]
        pre_iv = [iv.get((v, shape), (float("nan"), float("nan"))) for v in pre["variant"]]
        top.barh(ys, pre_vals, 0.6, color=[GREEN if v >= 0 else RED for v in pre_vals])
        for y, v, (lo, hi) in zip(ys, pre_vals, pre_iv):
            if lo == lo:
                top.errorbar([v], [y], xerr=[[v - lo], [hi - v]], fmt="none", ecolor="#333333", capsize=3, lw=0.9)
            top.text(max(v, hi if hi == hi else v), y, "  " + _interval_text(v, lo, hi), va="center", fontsize=7)
        top.set_yticks(ys, [f"{r.switch} ({r.variant})" for r in pre.itertuples()], fontsize=7)
        top.set_xlim(0, max(pre_vals + [1.0]) * 1.7)
        top.set_ylim(len(pre) - 0.5, -0.5)
        top.axvline(0, color="black", linewidth=0.8)
        top.tick_params(axis="x", labelsize=7)
        top.set_title(f"{shape}\nbefore the seed (PR #756), % vs {names[0]}", loc="left", fontsize=8)
        # PR #990's span: a waterfall in % of the seed's first rung
        ax = axes[1][col]
        base = float(sub.loc[k, "end"])
        rows = []
        for i in range(k + 1, len(sub)):
            r = sub.loc[i]
            start, end = 100.0 * (float(r["start"]) / base - 1.0), 100.0 * (float(r["end"]) / base - 1.0)
            lo, hi = iv.get((r["variant"], shape), (float("nan"), float("nan")))
            scale = float(r["start"]) / base  # a step's % of its predecessor, in % of the seed's first rung
            rows.append((str(r["switch"]), start, end, float(r["delta_pct"]), lo, hi, scale))
        ys = list(range(len(rows)))
        for y, (_, start, end, d, lo, hi, scale) in zip(ys, rows):
            ax.barh(y, end - start, 0.6, left=start, color=GREEN if end >= start else RED)
            if lo == lo:
                ax.errorbar([end], [y], xerr=[[(d - lo) * scale], [(hi - d) * scale]], fmt="none", ecolor="#333333",
                            capsize=3, lw=0.9)
        total = 100.0 * (float(sub["end"].iloc[-1]) / base - 1.0)
        p = pub[pub["shape"] == shape].set_index("stage")["tflops"]
        extra = [(f"total {names[k]} → {names[-1]} (modelled)", total, "#2166ac")]
        if {"before_990", "after_990"} <= set(p.index):
            extra.append(("PR #990 before → after (published)", 100.0 * (p["after_990"] / p["before_990"] - 1.0),
                          "#b35806"))
        for j, (_, v, colour) in enumerate(extra):
            ax.barh(len(rows) + 0.5 + j, v, 0.6, color=colour)
        ends = [max(start, end, end + ((hi - d) * scale if hi == hi else 0.0)) for _, start, end, d, lo, hi, scale in rows]
        lows = [min(start, end, end - ((d - lo) * scale if lo == lo else 0.0)) for _, start, end, d, lo, hi, scale in rows]
        right = max(ends + [v for _, v, _ in extra] + [0.0])
        left = min(lows + [v for _, v, _ in extra] + [0.0])
        span = max(right - left, 1.0)
        for y, (_, start, end, d, lo, hi, scale), e in zip(ys, rows, ends):
            ax.text(e + 0.02 * span, y, _interval_text(d, lo, hi), va="center", fontsize=7)
        for j, (_, v, _) in enumerate(extra):
            ax.text(max(v, 0.0) + 0.02 * span, len(rows) + 0.5 + j, f"{v:+.1f} %", va="center", fontsize=7)
        ax.set_xlim(left - 0.08 * span, right + 0.75 * span)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(ys + [len(rows) + 0.5 + j for j in range(len(extra))], [r[0] for r in rows] +
                      [e[0] for e in extra], fontsize=7)
        ax.set_ylim(len(rows) + len(extra) - 0.1, -0.6)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel(f"% vs {names[k]} (cumulative)", fontsize=7)
        ax.set_title(f"PR #990's span: step % vs predecessor", loc="left", fontsize=8)
    text, colour = plots.SOURCES["modelled"]
    fig.suptitle("GEMM ladder, modelled: each step's change; PR #990's span on its own axis, beside its "
                 "published before → after (orange)", x=0.01, ha="left", fontsize=9)
    fig.text(0.01, 0.01, f"{text}: {model_detail(wf)}. Error bars: {iv_label}. Orange: published (FlyDSL PR #990, "
             f"MI355X).", ha="left", va="bottom", fontsize=7, color=colour)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    return fig


def draw_loo(run_dir: Path):
    """Modelled loss of removing each switch from the full kernel."""
    import matplotlib.pyplot as plt

    loo = _read(run_dir, "modelled_leave_one_out")
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * max(1, len(loo)) + 1.2))
    labels = [f"{getattr(r, 'gemm', '') + ' ' if 'gemm' in loo.columns else ''}−{r.switch} @ {r.shape}"
              for r in loo.itertuples()]
    ax.barh(range(len(loo)), loo["loss_pct"], color=["#1b7837" if v >= 0 else "#b2182b" for v in loo["loss_pct"]])
    for y, v in enumerate(loo["loss_pct"]):
        ax.text(v, y, f" {v:+.2f}%", va="center", fontsize=6)
    ax.set_yticks(range(len(loo)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.axvline(0, color="#4d4d4d", linewidth=0.6)
    ax.set_xlabel("modelled loss when the switch is removed from the full kernel (%)", fontsize=7)
    ax.set_title("Leave-one-out, modelled", loc="left", pad=14, fontsize=8)
    plots.source_badge(ax, "modelled", model_detail(loo))
    fig.tight_layout()
    return fig


def draw_moe_ratios(run_dir: Path):
    """Per token count, modelled last/first time for gemm1 and gemm2, beside aiter PR #3828's change
    (where it published one; "n/a" where not). Bars from 0; 1.0 = no change."""
    import matplotlib.pyplot as plt

    r = _read(run_dir, "modelled_moe_ratios")
    gemms = list(dict.fromkeys(r["gemm"]))
    fig, axes = plt.subplots(1, len(gemms), figsize=(4.2 * len(gemms), 3.2), squeeze=False, sharey=True)
    top = 1.0
    for ax, g in zip(axes[0], gemms):
        sub = r[r["gemm"] == g].sort_values("M")
        xs = list(range(len(sub)))
        mod = [float(v) for v in sub["modelled_last_over_first"]]
        pub = [float(p) if p is not None and p == p else None for p in sub["published_after_over_before"]]
        ax.bar([x - 0.2 for x in xs], mod, 0.4, color="#2166ac", label="modelled")
        ax.bar([x + 0.2 for x, p in zip(xs, pub) if p is not None], [p for p in pub if p is not None], 0.4,
               color="#b35806", label="published (PR #3828)")
        for x, v, p in zip(xs, mod, pub):
            ax.text(x - 0.2, v, f"{v:.3f}", ha="center", va="bottom", fontsize=6, rotation=90)
            ax.text(x + 0.2, p if p is not None else 0.0, f"{p:.3f}" if p is not None else "n/a", ha="center",
                    va="bottom", fontsize=6, rotation=90)
        top = max([top] + mod + [p for p in pub if p is not None])
        ax.axhline(1.0, color="#4d4d4d", linewidth=0.6, linestyle="--")
        ax.set_xticks(xs, [f"M={m}" for m in sub["M"]], fontsize=7)
        ax.set_title(f"{g}: time {sub['last'].iloc[0]} / {sub['first'].iloc[0]} (< 1 = faster)", loc="left",
                     fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[0][0].set_ylim(0, top * 1.45)
    axes[0][0].legend(fontsize=7, frameon=False, loc="upper left", ncol=2)
    axes[0][0].set_ylabel("time ratio last / first rung", fontsize=8)
    text, colour = plots.SOURCES["modelled"]
    fig.suptitle(f"MoE ladders: last / first rung time per token count ({text}: {model_detail(r)}; orange: "
                 "published)", x=0.01, ha="left", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def step_slugs(study_name: str) -> list[str]:
    folder = paths.REPO_ROOT / "notebooks" / study_name
    return sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []


def register(summary_run: str = "summary") -> None:
    """Register the per-step ``<study>/<slug>_speed_delta`` / ``_speed_cycles`` figures and the summary's
    ``gemm/modelled_waterfall``, ``<study>/modelled_leave_one_out``, ``moe/modelled_ratios``."""
    from ..figures import figure

    for study in ("gemm", "moe"):
        for slug in step_slugs(study):
            run = f"{study}--{slug}"
            figure(f"{study}/{slug}_speed_delta", run=run)(draw_step_delta)
            figure(f"{study}/{slug}_speed_cycles", run=run)(draw_step_cycles)
        figure(f"{study}/modelled_leave_one_out", run=f"{summary_run}")(
            functools.partial(_study_figure, study, draw_loo))
    figure("gemm/modelled_waterfall", run=summary_run)(functools.partial(_study_figure, "gemm", draw_waterfall))
    figure("moe/modelled_ratios", run=summary_run)(functools.partial(_study_figure, "moe", draw_moe_ratios))


def _study_figure(study: str, draw, run_dir: Path):
    """The summary run keeps each study's modelled tables in ``modelled-<study>/``."""
    return draw(Path(run_dir) / f"modelled-{study}")


register()


# ============================================================================ README hooks


def readme_columns(study_name: str, run_dir: str | Path | None) -> dict:
    """``{(variant, regime): (modelled TFLOPS text, modelled delta text)}`` from a summary run's
    ``modelled-<study>/modelled_delta.parquet`` (GEMM at 8192^3; MoE decode at M=16, prefill at M=4096:
    the ISA shapes); empty when the run has none. Reads files only (no FlyDSL)."""
    if run_dir is None:
        return {}
    path = Path(run_dir) / f"modelled-{study_name}" / "modelled_delta.parquet"
    if not path.is_file():
        return {}
    from .. import shapes as shapes_mod

    d = results.read_table(path)[0]
    if study_name == "gemm":
        where = {None: shape_text(shapes_mod.shapes("gemm", "device")[0])}
    else:
        where = {r: shape_text(s[0]) for r, s in shapes_mod.by_regime("moe", "device").items()}
    out = {}
    for regime, shape in where.items():
        for r in d[d["shape"] == shape].itertuples():
            delta = "–" if r.delta_pct != r.delta_pct else f"{r.delta_pct:+.2f}% [{r.delta_low:+.1f}, {r.delta_high:+.1f}]"
            value = f"{r.tflops:.0f}" if r.tflops >= 100 else f"{r.tflops:.1f}"
            out[(r.variant, regime)] = (value, delta)
    return out


def readme_note(study_name: str, run_dir) -> str:
    """The line under the README table saying what the modelled columns are."""
    path = Path(run_dir) / f"modelled-{study_name}" / "modelled_delta.parquet" if run_dir else None
    if path is None or not path.is_file():
        return ""
    d = results.read_table(path)[0]
    return (f"Modelled columns: the gfx950emu timing model ({model_detail(d)}), not measured; delta vs the "
            f"predecessor, [low, high] = its interval from the model's held-out modelled-vs-published residuals "
            f"({error_band()['rule']}).")


def findings_markers(name: str) -> tuple[str, str]:
    cmd = "python -m mxfp4_ablation.studies readme-table"
    return (f"<!-- {name}-modelled-findings:begin (generated: {cmd}) -->", f"<!-- {name}-modelled-findings:end -->")


def readme_findings(study_name: str, run_dir) -> str | None:
    """Markdown bullets generated from a summary run's modelled tables (None: the run has none)."""
    base = Path(run_dir) / f"modelled-{study_name}" if run_dir else None
    if base is None or not (base / "modelled_delta.parquet").is_file():
        return None
    tables = {p.stem: results.read_table(p)[0] for p in sorted(base.glob("*.parquet"))}
    stats_path = base / "modelled_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    band = stats.get("band") or error_band()
    return "\n".join(f"* {f} *(modelled)*" for f in findings(study_name, tables, stats, band))


# ============================================================================ CLI


def main(argv: list[str] | None = None) -> int:
    """``python -m mxfp4_ablation.studies.ablation [--study gemm|moe] [--out DIR] [--quick]``: run the
    summary's modelled sweep (cached), write its tables, print every step's modelled delta per shape and
    how long the sweep took (``--quick``: GEMM at 8192^3 only, MoE at M=16 and M=4096 only)."""
    import argparse

    from . import get

    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.studies.ablation")
    ap.add_argument("--study", choices=("gemm", "moe"), action="append")
    ap.add_argument("--out", default=None, help="folder for the tables (default: a scratch folder in the cache)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-figures", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else paths.cache_dir() / "scratch" / "ablation"
    for name in args.study or ["gemm", "moe"]:
        study = get(name)
        points = summary_plan(study)
        if args.quick:
            keep = {shape_text(s) for s in default_shapes(study)[: 1 if name == "gemm" else 2]}
            points = [p for p in points if shape_text(p[1]) in keep]
        t0 = time.perf_counter()
        sm = summary_section(study, out, points, render=not args.no_figures)
        took = time.perf_counter() - t0
        cached = int(sm.sweep["cached"].sum())
        print(f"# {name}: {len(sm.sweep)} modelled points ({cached} from the cache) in {took:.1f} s; "
              f"{model_detail(sm.sweep)}; interval: {sm.band['rule']}")
        cols = [c for c in ("gemm", "variant", "switch", "shape", "baseline_tflops", "tflops", "baseline_us", "us",
                            "delta_pct", "delta_low", "delta_high", "resolved", "bound") if c in sm.deltas.columns]
        print(sm.deltas[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        for key in ("modelled_leave_one_out", "modelled_order", "modelled_moe_ratios"):
            if key in sm.tables:
                print(f"\n## {key}\n" + sm.tables[key].drop(columns=["pr990_text"], errors="ignore")
                      .to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for f in sm.findings():
            print(f"* {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
