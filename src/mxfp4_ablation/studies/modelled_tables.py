"""The modelled section's tables (pure pandas, no FlyDSL): what each step buys, *modelled*.

From :mod:`.modelled_runs` rows: :func:`step_deltas` (per step and shape, the delta with its interval),
:func:`cycles_table` (where the cycles go), :func:`verdicts` (does the model see the seed's claim?),
:func:`waterfall`, :func:`leave_one_out`, :func:`order_of_impact` (PR #990's order against the model),
:func:`moe_ratios` (last / first rung beside aiter PR #3828) and :func:`findings` (generated sentences).

The interval of a modelled delta (:func:`.speed.step_interval`, summarised by :func:`error_band`): from
the model's *held-out* speed-up residuals (``experiments/reference/calibration.csv``, written by
``python -m mxfp4_ablation.calibration fit --write``): a delta ``d`` becomes ``d - bias +- half-width``;
its sign is *resolved* when that interval excludes 0.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from .modelled_runs import LABEL, REASONS, AblationError, shape_text

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
            line += "; both are memory-bound in the model (the memory stream hides the issue-side changes it overlaps)"
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
    if d is not None:
        # the step deltas at the sweep shapes that model every rung (Spec.model_sweep_ladder: MoE at M=16384),
        # which the README's ladder tables do not show
        from . import get

        for s in dict.fromkeys(shape_text(x) for x in get(study).spec.model_sweep_ladder):
            sub = d[(d["shape"] == s) & d["delta_pct"].notna()]
            if not len(sub):
                continue
            parts = [f"{x.variant} ({x.switch}) {x.delta_pct:+.2f}% [{x.delta_low:+.1f}, {x.delta_high:+.1f}]"
                     for x in sub.itertuples()]
            out.append(f"Modelled steps at {s} (every rung modelled there): " + "; ".join(parts) + ".")
    r = tables.get("modelled_moe_ratios")
    if r is not None and len(r):
        parts = [f"{x.gemm} M={x.M}: {x.modelled_last_over_first:.3f}" +
                 (f" (published {x.published_after_over_before:.3f})" if x.published_after_over_before == x.published_after_over_before and x.published_after_over_before is not None else "")
                 for x in r.itertuples()]
        out.append("Modelled MoE time last/first rung: " + "; ".join(parts) + ".")
    return out
