"""What each step buys, *modelled*: per-step deltas, where the cycles go, and the ablation's summary.

Every number here comes from the timing model (:func:`mxfp4_ablation.modelled.model`, cached on disk)
and is labelled ``modelled`` with the model's version and clock; nothing here is ever shown as
measured. Two layers:

* **modelling** (imports the runner layer lazily; compiles and runs the model on a cache miss):
  :func:`sweep` (one row per variant x shape), :func:`timeline` (the hot-loop trace window of one
  variant), :func:`step_section` (a step notebook's speed section) and :func:`summary_section`;
* **tables and figures** (pure pandas / matplotlib, no FlyDSL): :func:`error_band`,
  :func:`step_deltas`, :func:`cycles_table`, :func:`verdicts`, :func:`waterfall`,
  :func:`leave_one_out`, :func:`order_of_impact`, :func:`moe_ratios`, and the figures registered in
  :func:`register` (drawn from the stored tables alone, so ``make figures`` redraws them).

The error band of a modelled delta (:func:`error_band`): the timing model's largest absolute error, in
percentage points, on a published *step* -- the after/before TFLOPS ratio of FlyDSL PR #990 at its four
shapes in ``experiments/reference/timing_validation.csv`` (rows ``source == "ratio after/before"``). A
modelled delta ``d`` is reported as ``d +- band``; its sign is *resolved* when ``|d| > band``.

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
REASONS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other")
REASON_COLOURS = {"mfma busy": "#4d4d4d", "vmcnt": "#2166ac", "lgkmcnt": "#67a9cf", "barrier": "#d6604d",
                  "dependency": "#f4a582", "issue": "#b2abd2", "lds_bank": "#5aae61", "other": "#bababa"}
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
    cs = ", ".join(sorted({f"{float(c):g} GHz" for c in df["clock_ghz"].dropna()}))
    return f"model {vs}, {cs}"


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
    trip of wave 0 on: one track per wave of the first workgroup and one per MFMA pipe. Columns
    ``variant, shape, track, start, end, opcode, kind, line`` (cycles from the window's start) plus
    ``model_version, clock_ghz``. Cached on disk (keyed by the ISA, shape, sample and model)."""
    import gfx950emu
    from gfx950emu.timing import trace as _trace

    from .. import modelled

    sample = default_sample(variant, shape) if sample == "auto" else sample
    prep = modelled._prepare(variant, tuple(shape), 0)
    fp = modelled.model_fingerprint()
    key = hashlib.sha256(json.dumps([prep["isa_key"], list(shape), sample, fp, iterations, variant]).encode()).hexdigest()
    cache = _timeline_cache(key)
    if cache.is_file():
        return pd.DataFrame(json.loads(cache.read_text()))
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
    else:  # no loop: the first 2000 cycles of wave 0's span
        lo = min((iv["start"] for iv in ivs), default=0)
        hi = lo + 2000
    rows = [{"variant": variant, "shape": shape_text(shape), "track": iv["track"].replace("wg0 ", ""),
             "start": int(iv["start"] - lo), "end": int(min(iv["end"], hi) - lo), "opcode": iv["opcode"],
             "kind": iv["kind"], "line": int(iv["line"]), "window_cycles": int(hi - lo),
             "model_version": t["model_version"], "clock_ghz": float(t["clock_ghz"])}
            for iv in ivs if iv["end"] > lo and iv["start"] < hi]
    cache.parent.mkdir(parents=True, exist_ok=True)
    results.atomic_write_text(cache, json.dumps(rows))
    return pd.DataFrame(rows)


# ============================================================================ tables (pure)


def error_band(path: str | Path | None = None) -> dict:
    """The model's error band for a step delta, from the validation table (see the module doc):
    ``{"band_pp", "rule", "errors_pp", "bias_pp"}``."""
    path = Path(path) if path is not None else paths.reference_dir() / "timing_validation.csv"
    if not path.is_file():
        raise AblationError(f"no timing validation table at {path}")
    df = pd.read_csv(path)
    ratio = df[df["source"] == "ratio after/before"]
    if ratio.empty:
        raise AblationError(f"{path.name} has no 'ratio after/before' rows to derive an error band from")
    errs = [float(e) for e in ratio["error_pct"]]
    band = max(abs(e) for e in errs)
    return {"band_pp": round(band, 2), "bias_pp": round(sum(errs) / len(errs), 2), "errors_pp": errs,
            "rule": (f"+-{band:.2f} pp = the largest |modelled - published| after/before ratio error of FlyDSL "
                     f"PR #990 over its {len(errs)} shapes ({path.name}); the model over-states that step by "
                     f"{min(errs):+.2f} .. {max(errs):+.2f} pp")}


def step_deltas(sweep_df: pd.DataFrame, pairs: Sequence[tuple[str | None, str]], band_pp: float,
                switches: dict | None = None) -> pd.DataFrame:
    """Per ``(baseline, variant)`` pair and shape: both modelled TFLOPS and us, the delta in % with
    the band, the bound. A pair with no baseline (the first rung) has no delta."""
    by = {(r.variant, r.shape): r for r in sweep_df.itertuples()}
    rows = []
    for base, var in pairs:
        for shape in dict.fromkeys(sweep_df.loc[sweep_df["variant"] == var, "shape"]):
            v = by[(var, shape)]
            b = by.get((base, shape)) if base else None
            if base and b is None:  # the predecessor was not modelled at this shape
                continue
            d = 100.0 * (v.tflops / b.tflops - 1.0) if b is not None else float("nan")
            rows.append({"label": LABEL, "variant": var, "baseline": base,
                         "switch": (switches or {}).get(var), "shape": shape,
                         "baseline_tflops": b.tflops if b is not None else float("nan"), "tflops": v.tflops,
                         "baseline_us": b.us if b is not None else float("nan"), "us": v.us,
                         "delta_pct": round(d, 3) if not math.isnan(d) else d, "band_pp": band_pp,
                         "delta_low": round(d - band_pp, 3) if not math.isnan(d) else d,
                         "delta_high": round(d + band_pp, 3) if not math.isnan(d) else d,
                         "resolved": bool(abs(d) > band_pp) if not math.isnan(d) else False,
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


def verdict(claim: str, delta_pct: float, band_pp: float) -> str:
    """Did the model see the claimed effect? One line: sign first, then size where the claim gives one."""
    if delta_pct is None or math.isnan(delta_pct):
        return "no predecessor: nothing to compare"
    size = claimed_speedup(claim)
    if abs(delta_pct) <= band_pp:
        sign = (f"sign unresolved: {delta_pct:+.2f}% is inside the model's +-{band_pp:.2f} pp band")
    elif delta_pct > 0:
        sign = f"sign seen: faster by {delta_pct:+.2f}% (+-{band_pp:.2f} pp)"
    else:
        sign = f"sign contradicted: slower by {delta_pct:+.2f}% (+-{band_pp:.2f} pp)"
    if size is None:
        return f"{sign}; the claim states no speed-up size"
    lo, hi = size
    hit = (delta_pct + band_pp) >= lo and (delta_pct - band_pp) <= hi
    claimed = f"~{lo:g}%" if lo == hi else f"{lo:g}-{hi:g}%"
    return (f"{sign}; the claim says {claimed} faster (in its own regime): size "
            f"{'consistent' if hit else 'not consistent'} with the model here")


def verdicts(deltas: pd.DataFrame, claims: dict) -> pd.DataFrame:
    """Per step and shape: the seed's claim and the verdict line."""
    rows = []
    for r in deltas.itertuples():
        claim = claims.get(r.variant, "")
        line = verdict(claim, r.delta_pct, r.band_pp)
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
                     "delta_pct": 100.0 * (t / prev - 1.0) if i else float("nan")})
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
        cols = ["shape", "baseline_tflops", "tflops", "baseline_us", "us", "delta_pct", "band_pp", "resolved",
                "bound", "model_version", "clock_ghz", "label"]
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
    deltas = step_deltas(sw, [(baseline, variant)], band["band_pp"], {variant: switch})
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
        d = step_deltas(sw, pairs, band["band_pp"], switches)
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
        wf["model_version"], wf["clock_ghz"] = sw["model_version"].iloc[0], sw["clock_ghz"].iloc[0]
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
                   f"{top['shape']} (band +-{band['band_pp']:.2f} pp); {int(dd['resolved'].sum())} of {len(dd)} "
                   f"step deltas are outside the band.")
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
    """Step vs predecessor, modelled TFLOPS per shape, with the delta and its band."""
    import matplotlib.pyplot as plt

    d = _read(run_dir, "modelled_delta")
    variant, base = d["variant"].iloc[0], d["baseline"].iloc[0]
    fig, ax = plt.subplots(figsize=(7.2, 2.9))
    xs = range(len(d))
    has_base = base is not None and isinstance(base, str)
    w = 0.38 if has_base else 0.6
    if has_base:
        ax.bar([x - w / 2 for x in xs], d["baseline_tflops"], w, color="#bababa", label=f"{base} (predecessor)")
    ax.bar([x + (w / 2 if has_base else 0) for x in xs], d["tflops"], w, color="#2166ac", label=variant)
    top = float(d["tflops"].max())
    for x, r in zip(xs, d.itertuples()):
        txt = (f"{r.delta_pct:+.2f}%\n±{r.band_pp:.1f} pp" + ("" if r.resolved else " (unresolved)")) if has_base \
            else f"{r.tflops:.0f}"
        ax.text(x, top * 1.02, txt, ha="center", va="bottom", fontsize=6)
        ax.text(x + (w / 2 if has_base else 0), r.tflops * 0.5, f"{r.tflops:.0f}\n{r.us:.0f} µs\n{r.bound}",
                ha="center", va="center", fontsize=5, color="white")
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(list(xs), list(d["shape"]), fontsize=6)
    ax.set_ylabel("TFLOPS (modelled)")
    ax.legend(fontsize=6, frameon=False, loc="lower right")
    ax.set_title(f"{variant}" + (f" vs {base}" if has_base else "") + ": modelled speed per shape", loc="left",
                 pad=14, fontsize=8)
    plots.source_badge(ax, "modelled", model_detail(d))
    fig.tight_layout()
    return fig


TIMELINE_COLOURS = {"mfma": "#4d4d4d", "vmem": "#2166ac", "lds": "#5aae61", "salu": "#b2abd2", "valu": "#f4a582",
                    "smem": "#67a9cf", "branch": "#d6604d", "nop": "#f7f7f7", "waitcnt": "#d6604d", "barrier": "#b2182b"}


def _draw_timeline(ax, tl: pd.DataFrame, title: str) -> None:
    tracks = sorted(set(tl["track"]), key=lambda t: (("MFMA" in t), t))
    colours = TIMELINE_COLOURS
    for y, track in enumerate(tracks):
        sub = tl[tl["track"] == track]
        for kind, g in sub.groupby("kind"):
            ax.broken_barh(list(zip(g["start"], (g["end"] - g["start"]).clip(lower=1))), (y - 0.4, 0.8),
                           facecolors=colours.get(kind, "#bababa"), linewidth=0,
                           rasterized=True)  # thousands of bars: pixels in the SVG, not one path each
    ax.set_yticks(range(len(tracks)), tracks, fontsize=5)
    ax.invert_yaxis()
    ax.set_xlabel("cycles from a middle hot-loop trip", fontsize=6)
    ax.tick_params(axis="x", labelsize=5)
    ax.set_title(title, loc="left", fontsize=7)


def draw_step_cycles(run_dir: Path):
    """Where the cycles go: MFMA-busy + exposed cycles by reason (predecessor vs step), and the hot-loop
    timelines (4 waves + MFMA pipes) side by side."""
    import matplotlib.pyplot as plt

    cyc = _read(run_dir, "modelled_cycles")
    tl = _read(run_dir, "modelled_timeline")
    d = _read(run_dir, "modelled_delta")
    variant, base = d["variant"].iloc[0], d["baseline"].iloc[0]
    names = [n for n in (base, variant) if isinstance(n, str)]
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(3.0 + 4.2 * len(names), 3.2),
                             gridspec_kw={"width_ratios": [1.0] + [2.2] * len(names)})
    ax = axes[0]
    bottoms = [0.0] * len(names)
    for reason in REASON_COLOURS:
        vals = [float(cyc[(cyc["variant"] == n) & (cyc["reason"] == reason)]["cycles"].sum()) for n in names]
        ax.bar(range(len(names)), vals, 0.6, bottom=bottoms, color=REASON_COLOURS[reason], label=reason)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_xticks(range(len(names)), names, fontsize=6)
    ax.set_ylabel("cycles per SIMD (sampled workgroups)", fontsize=6)
    ax.tick_params(axis="y", labelsize=5)
    ax.legend(fontsize=5, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"exposed cycles @ {cyc['shape'].iloc[0]}", loc="left", fontsize=7)
    for a, n in zip(axes[1:], names):
        sub = tl[tl["variant"] == n]
        w = int(sub["window_cycles"].iloc[0]) if len(sub) else 0
        _draw_timeline(a, sub, f"{n}: hot loop, {w} cycles (2 trips)")
    text, colour = plots.SOURCES["modelled"]
    fig.text(0.995, 0.985, f"{text}: {model_detail(tl if len(tl) else cyc)}", ha="right", va="top", fontsize=7,
             color=colour, fontweight="bold")
    kinds = sorted(set(tl["kind"])) if len(tl) else []
    handles = [plt.Rectangle((0, 0), 1, 1, color=TIMELINE_COLOURS.get(k, "#bababa")) for k in kinds]
    if handles:
        axes[-1].legend(handles, kinds, fontsize=5, frameon=False, ncol=len(kinds), loc="lower right",
                        bbox_to_anchor=(1.0, 1.06))
    fig.suptitle(f"{variant}: where the cycles go (modelled)", x=0.01, ha="left", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def draw_waterfall(run_dir: Path):
    """Modelled TFLOPS gemm-v0 -> last rung, one bar per step's delta, beside the published bars; one
    panel per shape."""
    import matplotlib.pyplot as plt

    wf = _read(run_dir, "modelled_waterfall")
    pub = _read(run_dir, "modelled_published")
    shapes = list(dict.fromkeys(wf["shape"]))
    fig, axes = plt.subplots(1, len(shapes), figsize=(3.4 * len(shapes), 3.2), squeeze=False, sharey=True)
    for ax, shape in zip(axes[0], shapes):
        sub = wf[wf["shape"] == shape].sort_values("step")
        n = len(sub)
        for i, r in enumerate(sub.itertuples()):
            colour = "#4d4d4d" if i == 0 else ("#1b7837" if r.delta >= 0 else "#b2182b")
            ax.bar(i, r.delta if i else r.end, bottom=r.start if i else 0, color=colour, width=0.7)
            if i:
                ax.text(i, max(r.start, r.end), f"{r.delta_pct:+.1f}%", ha="center", va="bottom", fontsize=5)
        ax.bar(n, sub["end"].iloc[-1], color="#2166ac", width=0.7)
        p = pub[pub["shape"] == shape].set_index("stage")["tflops"]
        stages = [s for s in ("before_990", "after_990", "aiter_asm") if s in p.index]
        for j, s in enumerate(stages):
            ax.bar(n + 1.5 + j, p[s], color="#b35806", width=0.7, alpha=0.6 + 0.2 * j)
        labels = ["v0"] + [str(s) for s in sub["switch"].iloc[1:]] + [sub["variant"].iloc[-1]] + \
            [s.replace("_990", "") + "\n(pub.)" for s in stages]
        ax.set_xticks(list(range(n + 1)) + [n + 1.5 + j for j in range(len(stages))], labels, rotation=60,
                      fontsize=5, ha="right")
        ax.set_title(shape, loc="left", fontsize=7)
        ax.tick_params(axis="y", labelsize=6)
    lo = min(float(wf["end"].min()), float(pub["tflops"].min()) if len(pub) else 1e12)
    hi = max(float(wf["end"].max()), float(pub["tflops"].max()) if len(pub) else 0.0)
    axes[0][0].set_ylim(lo * 0.85, hi * 1.06)
    axes[0][0].set_ylabel("TFLOPS (axis from %.0f)" % (lo * 0.85), fontsize=7)
    text, colour = plots.SOURCES["modelled"]
    fig.text(0.995, 0.985, f"{text}: {model_detail(wf)}; orange: published (PR #990, MI355X)", ha="right", va="top",
             fontsize=7, color=colour, fontweight="bold")
    fig.suptitle("GEMM ladder: modelled TFLOPS per step (grey/green/red) beside PR #990's published bars (orange)",
                 x=0.01, ha="left", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
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
    """Per token count, modelled last/first time for gemm1 and gemm2, beside aiter PR #3828's change."""
    import matplotlib.pyplot as plt

    r = _read(run_dir, "modelled_moe_ratios")
    gemms = list(dict.fromkeys(r["gemm"]))
    fig, axes = plt.subplots(1, len(gemms), figsize=(4.0 * len(gemms), 2.9), squeeze=False, sharey=True)
    for ax, g in zip(axes[0], gemms):
        sub = r[r["gemm"] == g].sort_values("M")
        xs = range(len(sub))
        ax.bar([x - 0.2 for x in xs], sub["modelled_last_over_first"], 0.4, color="#2166ac", label="modelled")
        pub = sub["published_after_over_before"]
        ax.bar([x + 0.2 for x in xs], pub.fillna(0), 0.4, color="#b35806", label="published (PR #3828)")
        for x, v, p in zip(xs, sub["modelled_last_over_first"], pub):
            ax.text(x - 0.2, v, f"{v:.3f}", ha="center", va="bottom", fontsize=5)
            if p == p and p is not None:
                ax.text(x + 0.2, p, f"{p:.3f}", ha="center", va="bottom", fontsize=5)
        ax.axhline(1.0, color="#4d4d4d", linewidth=0.6)
        ax.set_xticks(list(xs), [f"M={m}" for m in sub["M"]], fontsize=6)
        ax.set_ylim(min(0.8, float(sub["modelled_last_over_first"].min()) * 0.95), 1.1)
        ax.set_title(f"{g}: time {sub['last'].iloc[0]} / {sub['first'].iloc[0]}", loc="left", fontsize=7, pad=12)
        ax.legend(fontsize=5, frameon=False, loc="lower left")
    plots.source_badge(axes[0][-1], "modelled", model_detail(r))
    fig.tight_layout()
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
            delta = "–" if r.delta_pct != r.delta_pct else f"{r.delta_pct:+.2f}% ±{r.band_pp:.1f}"
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
            f"predecessor with the model's error band ({error_band()['rule']}).")


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
              f"{model_detail(sm.sweep)}; band: {sm.band['rule']}")
        cols = [c for c in ("gemm", "variant", "switch", "shape", "baseline_tflops", "tflops", "baseline_us", "us",
                            "delta_pct", "band_pp", "resolved", "bound") if c in sm.deltas.columns]
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
