"""Calibration of the timing model's power-limited clock, with a declared fit set and held-out error.

One command does all of it (re-run it whenever the model changes)::

    PYTHONPATH=src python -m mxfp4_ablation.calibration fit --upstream-out <out> [--aiter-co <.co>] [--write]

1. **Points** (``experiments/reference/hardware_points.csv``): every public MI355X figure the model
   touches, with its source, kernel + commit, shape, metric, value and role -- ``fit`` (FlyDSL PR
   #990's before / after / aiter-asm TFLOPS at its four shapes: 12 points, nothing else) or
   ``validate`` (never fitted: aiter PR #3828's MoE ratios, ...).  FlyDSL's commit-message figures
   are not in it.
2. **Fit** at most 4 parameters (:data:`FIT_PARAMS`, ``gfx950.toml [power]``) by least squares on
   log time over the fit points.  They all enter *after* the cycle simulation
   (:func:`gfx950emu.timing.power.apply`), so the fit re-evaluates the cached cycle results of the
   upstream kernels (one simulation per point, then never again).  Uncertainties: the Jacobian's
   covariance scaled by the residual variance (``s^2 (J^T J)^-1``).
3. **Cross-validation**: leave-one-shape-out (fit on 3 shapes, predict the 4th) and
   leave-one-kernel-out (fit on 2 kernels, predict the 3rd); the validation set is predicted with
   the full fit.
4. **Per-step uncertainty** (:func:`uncertainty`): the held-out residuals of *speed-up* predictions
   (modelled minus published speed-up in percentage points: PR #990 after/before and aiter-asm/after
   at each held-out shape, and the validation set's MoE ratios) give a bias (their mean, with a
   bootstrap interval) and a spread (their standard deviation); a modelled step delta ``d`` then
   carries the predictive interval ``d - bias +- t(n-1) * spread * sqrt(1 + 1/n)``
   (:func:`mxfp4_ablation.studies.speed.step_interval`).  A step is *resolved* when that interval
   excludes 0.

5. **Mechanisms** (:func:`mechanism_table`): each mechanism of the model switched off in turn -- the
   post-hoc ones (:data:`MECHANISMS`) re-evaluate the cached cycle results, the ones inside the cycle
   simulation (:data:`CYCLE_MECHANISMS`) simulate the 12 fit points again with the switch flipped.

``--write`` stores the fitted values (with fit provenance) in ``gfx950.toml [power]`` and turns the
power clock on, and writes ``experiments/reference/calibration.csv`` (the fit, the CV table, the
validation rows and the uncertainty model) and ``timing_mechanisms.csv`` (the mechanism table).  Every number is *modelled* and carries the model version
and fingerprint it came from.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from . import paths
from .errors import UsageError

LABEL = "modelled"
FIT_PARAMS = ("power.ref_ghz", "power.operand_weight_per_byte", "power.round_overhead_us")
#: starting values and bounds (physical ranges: a clock between 0.5 GHz and the 2.4 GHz peak, a
#: non-negative operand energy, a non-negative per-round overhead)
START = {"power.ref_ghz": 1.4, "power.operand_weight_per_byte": 1e-4, "power.round_overhead_us": 1.0}
BOUNDS = {"power.ref_ghz": (0.5, 2.4), "power.operand_weight_per_byte": (0.0, 5e-3),
          "power.round_overhead_us": (0.0, 50.0)}
POINTS_CSV = "hardware_points.csv"
CALIBRATION_CSV = "calibration.csv"
MECHANISMS_CSV = "timing_mechanisms.csv"
POINT_COLUMNS = ["point", "role", "kernel", "stage", "commit", "M", "N", "K", "shape", "metric", "value", "unit",
                 "source_url", "note"]
CAL_COLUMNS = ["label", "kind", "scheme", "held_out", "name", "stage", "M", "N", "K", "modelled", "published",
               "error", "unit", "stderr", "model_version", "model_fingerprint", "command"]
MECH_COLUMNS = ["label", "mechanism_off", "value_off", "what", "params", "case", "M", "N", "K", "modelled",
                "published", "error", "unit", "mean_abs_tflops_error", "model_version", "model_fingerprint", "command"]
GEMM_STAGES = ("before_990", "after_990", "aiter_asm")
STAGE_COMMIT = {"before_990": "daee90e4", "after_990": "741f3d6d"}
LEVEL = 0.9


def command_text(upstream_out: str = "<upstream-out>") -> str:
    return f"PYTHONPATH=src python -m mxfp4_ablation.calibration fit --upstream-out {upstream_out} --write"


# ============================================================================ the declared points


def read_reference_csv(path: str | Path | None, name: str, columns: Sequence[str], missing_text: str) -> list[dict]:
    """The rows of ``path`` (default ``experiments/reference/<name>``), with one clear error when the file is
    missing (``missing_text`` + its path) or has no rows or lacks one of ``columns``."""
    path = Path(path) if path is not None else paths.reference_dir() / name
    if not path.is_file():
        raise UsageError(f"{missing_text} at {path}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in columns if rows and c not in rows[0]]
    if missing or not rows:
        raise UsageError(f"{path.name} lacks column(s) {', '.join(missing) or 'and rows'}")
    return rows


def read_points(path: str | Path | None = None) -> list[dict]:
    """The rows of ``hardware_points.csv`` (checked: columns, roles, one source per row)."""
    rows = read_reference_csv(path, POINTS_CSV, POINT_COLUMNS, "no hardware points")
    path = Path(path) if path is not None else paths.reference_dir() / POINTS_CSV
    for r in rows:
        if r["role"] not in ("fit", "validate", "not_used"):
            raise UsageError(f"{path.name}: point {r['point']} has role {r['role']!r} (fit | validate | not_used)")
        if not r["source_url"].strip():
            raise UsageError(f"{path.name}: point {r['point']} has no source")
    fit = [r for r in rows if r["role"] == "fit"]
    bad = [r["point"] for r in fit if r["kernel"] != "gemm" or r["stage"] not in GEMM_STAGES]
    if bad:
        raise UsageError(f"{path.name}: the fit set is PR #990's GEMM points only; not: {', '.join(bad)}")
    return rows


# ============================================================================ model evaluation


def _params(theta: dict):
    from gfx950emu.timing import Params

    return Params(overrides={"power.enabled": True, **theta})


def predict_us(raw: dict, theta: dict) -> float:
    """Kernel time (us) of one cached modelled result at post-hoc parameters ``theta`` (``[power]``,
    ``[memory]``; no re-simulation).  ``power.enabled = False`` in ``theta``: the constant clock."""
    from gfx950emu.timing import power

    return float(power.evaluate_us(raw["kernel"], raw["activity"], _params(theta)))


def predict(raw: dict, theta: dict) -> dict:
    from gfx950emu.timing import power

    return power.evaluate(raw["kernel"], raw["activity"], _params(theta))


def model_fit_points(points: list[dict], upstream_out, aiter_co=None, sample: int = 1,
                     overrides: dict | None = None) -> list[dict]:
    """The modelled (cycle) result of every fit point's kernel, with the published value beside it.
    Simulates on a cache miss only (``modelled`` caches by ISA, shape, sample, model and ``overrides``:
    cycle-model parameters, :data:`CYCLE_MECHANISMS`)."""
    from . import modelled

    out_dir = Path(upstream_out)
    co = Path(aiter_co) if aiter_co else out_dir / "aiter" / modelled.AITER_CO
    rows = []
    for p in points:
        if p["role"] != "fit":
            continue
        M, N, K = int(p["M"]), int(p["N"]), int(p["K"])
        if p["stage"] == "aiter_asm" and not co.is_file():
            raise UsageError(f"no aiter asm code object at {co}; pass --aiter-co (aiter's "
                             f"hsa/gfx950/f4gemm/{modelled.AITER_CO})")

        def get(use_cache=True):
            if p["stage"] == "aiter_asm":
                return modelled.aiter_asm(co, M, N, K, sample=sample, use_cache=use_cache, overrides=overrides)
            return modelled.flydsl_upstream(out_dir, STAGE_COMMIT[p["stage"]], M, N, K, sample=sample,
                                            use_cache=use_cache, overrides=overrides)
        raw = get()
        if not raw.get("activity"):  # cached before the activity counts existed: simulate once more
            raw = get(use_cache=False)
        flops = float(raw["kernel"]["flops"])
        rows.append({**p, "M": M, "N": N, "K": K, "raw": raw, "published_tflops": float(p["value"]),
                     "published_us": flops / (float(p["value"]) * 1e6)})
    return rows


def fit(rows: list[dict], params: Sequence[str] = FIT_PARAMS, fixed: dict | None = None) -> dict:
    """Least squares on log time over ``rows``; returns values, standard errors, residuals."""
    from scipy.optimize import least_squares

    if len(params) > 4:
        raise UsageError(f"at most 4 fitted parameters, got {len(params)}")
    fixed = dict(fixed or {})

    def theta_of(x):
        return {**fixed, **dict(zip(params, map(float, x)))}

    def resid(x):
        th = theta_of(x)
        return np.array([math.log(predict_us(r["raw"], th)) - math.log(r["published_us"]) for r in rows])

    x0 = np.array([START[p] for p in params])
    lo = np.array([BOUNDS[p][0] for p in params])
    hi = np.array([BOUNDS[p][1] for p in params])
    scale = np.array([max(abs(v), 1e-6) for v in x0])
    sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale, method="trf", diff_step=1e-3)
    r = sol.fun
    n, k = len(r), len(params)
    dof = max(1, n - k)
    s2 = float(r @ r) / dof
    # the Jacobian for the uncertainties by absolute steps (1 % of each parameter's starting scale), so a
    # parameter at its bound (e.g. 0) still gets a curvature-based standard error
    J = np.empty((n, k))
    for j in range(k):
        h = 1e-2 * scale[j]
        x1 = sol.x.copy()
        x1[j] = x1[j] + h if x1[j] + h <= hi[j] else x1[j] - h
        J[:, j] = (resid(x1) - r) / (x1[j] - sol.x[j])
    try:
        cov = np.linalg.pinv(J.T @ J) * s2
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        se = np.full(k, float("nan"))
    at_bound = [bool(abs(v - a) < 1e-9 * max(1, abs(a)) or abs(v - b) < 1e-9 * max(1, abs(b)))
                for v, a, b in zip(sol.x, lo, hi)]
    x = np.array([a if ab and abs(v - a) <= abs(v - b) else (b if ab else v)
                  for v, a, b, ab in zip(sol.x, lo, hi, at_bound)])  # a parameter at its bound: the bound
    return {"values": theta_of(x), "stderr": dict(zip(params, map(float, se))), "params": list(params),
            "at_bound": dict(zip(params, at_bound)), "residuals_log": [float(x) for x in r],
            "rms_pct": float(100 * math.sqrt(float(r @ r) / n)), "n": n, "dof": dof}


# ============================================================================ tables


def _tflops(raw, theta):
    return float(predict(raw, theta)["tflops"])


def point_table(rows, theta) -> list[dict]:
    out = []
    for r in rows:
        t = _tflops(r["raw"], theta)
        out.append({"stage": r["stage"], "M": r["M"], "N": r["N"], "K": r["K"], "modelled": t,
                    "published": r["published_tflops"], "error": 100 * (t / r["published_tflops"] - 1)})
    return out


def ratio_rows(rows, theta, shapes=None) -> list[dict]:
    """Speed-up predictions (modelled vs published, in %) at each shape: after/before, aiter-asm/after."""
    by = {(r["stage"], (r["M"], r["N"], r["K"])): r for r in rows}
    out = []
    for shape in sorted({(r["M"], r["N"], r["K"]) for r in rows}):
        if shapes is not None and shape not in shapes:
            continue
        for num, den in (("after_990", "before_990"), ("aiter_asm", "after_990")):
            a, b = by.get((num, shape)), by.get((den, shape))
            if not (a and b):
                continue
            mod = 100 * (_tflops(a["raw"], theta) / _tflops(b["raw"], theta) - 1)
            pub = 100 * (a["published_tflops"] / b["published_tflops"] - 1)
            out.append({"name": f"{num}/{den}", "M": shape[0], "N": shape[1], "K": shape[2], "modelled": mod,
                        "published": pub, "error": mod - pub})
    return out


def cross_validate(rows, params=FIT_PARAMS) -> list[dict]:
    """Leave-one-shape-out and leave-one-kernel-out: each fold's held-out TFLOPS and speed-up errors."""
    out = []
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows})
    for s in shapes:
        train = [r for r in rows if (r["M"], r["N"], r["K"]) != s]
        th = fit(train, params)["values"]
        held = [r for r in rows if (r["M"], r["N"], r["K"]) == s]
        tag = "x".join(map(str, s))
        out += [{"scheme": "leave-one-shape-out", "held_out": tag, "kind": "cv_point", "name": p["stage"], **p,
                 "unit": "% TFLOPS"} for p in point_table(held, th)]
        out += [{"scheme": "leave-one-shape-out", "held_out": tag, "kind": "cv_ratio", **q, "stage": q["name"],
                 "unit": "pp speed-up"} for q in ratio_rows(rows, th, shapes={s})]
    for k in GEMM_STAGES:
        train = [r for r in rows if r["stage"] != k]
        if len(train) == len(rows) or len(train) < len(params) + 1:
            continue
        th = fit(train, params)["values"]
        held = [r for r in rows if r["stage"] == k]
        out += [{"scheme": "leave-one-kernel-out", "held_out": k, "kind": "cv_point", "name": p["stage"], **p,
                 "unit": "% TFLOPS"} for p in point_table(held, th)]
        out += [{"scheme": "leave-one-kernel-out", "held_out": k, "kind": "cv_ratio", **q, "stage": q["name"],
                 "unit": "pp speed-up"} for q in ratio_rows(rows, th) if k in q["name"]]
    return out


def moe_validation(points, theta) -> list[dict]:
    """aiter PR #3828's MoE ratios (validate rows of kernel gemm1/gemm2, metric time_ratio_after_over_before)
    against our MoE ladders' last / first rung (which stand for the seed's after / before kernels),
    modelled at the same power parameters."""
    from . import family
    from .studies import modelled_runs

    out = []
    for p in points:
        if p["role"] == "validate" and p["metric"] == "decode_speedup_sign":
            out += _sign_rows(p, theta)
            continue
        if p["role"] != "validate" or p["metric"] != "time_ratio_after_over_before":
            continue
        fam = {"gemm1": "moe1", "gemm2": "moe2"}[p["kernel"]]
        names = [name for name, _ in family.get(fam).ladder]
        shape = tuple(int(x) for x in p["shape"].split("x"))
        first, last = (_moe_result(n, shape) for n in (names[0], names[-1]))
        if not (first.get("activity") and last.get("activity")):
            raise UsageError("MoE results lack activity counts (cached before the power model): re-model them")
        t0, t1 = predict_us(first, theta), predict_us(last, theta)
        pub = float(p["value"])
        mod_speedup, pub_speedup = 100 * (t0 / t1 - 1), 100 * (1 / pub - 1)
        out.append({"kind": "validate", "scheme": "validation", "held_out": p["point"], "name": p["point"],
                    "stage": f"{names[-1]}/{names[0]}", "M": shape[0], "N": "", "K": "", "modelled": t1 / t0,
                    "published": pub, "error": mod_speedup - pub_speedup, "unit": "pp speed-up",
                    "modelled_speedup": mod_speedup, "published_speedup": pub_speedup})
    return out


def _moe_result(name: str, shape: tuple) -> dict:
    """The study's modelled MoE point (``modelled_runs.modelled_source``: its sample and inputs), simulated
    again when the cached entry predates the activity counts."""
    from . import modelled
    from .studies import modelled_runs

    r = modelled_runs.modelled_source(name, shape)
    if r.get("activity"):
        return r
    orig = modelled._cache_load
    modelled._cache_load = lambda key: None  # one fresh simulation (stored, with its activity)
    try:
        return modelled_runs.modelled_source(name, shape)
    finally:
        modelled._cache_load = orig


def _sign_rows(p: dict, theta: dict) -> list[dict]:
    """The sign of the modelled step that adds ``p["stage"]`` (a switch) in each MoE ladder, at the
    point's shape, against the published sign (no size: the PR's decode shape is not ours)."""
    from . import family
    from .studies import modelled_runs

    shape = tuple(int(x) for x in p["shape"].split("x"))
    rows = []
    for fam in ("moe1", "moe2"):
        ladder = family.get(fam).ladder
        for (bname, bsw), (vname, vsw) in zip(ladder, ladder[1:]):
            if p["stage"] in vsw and p["stage"] not in bsw:
                b, v = (_moe_result(n, shape) for n in (bname, vname))
                if not (b.get("activity") and v.get("activity")):
                    raise UsageError("MoE results lack activity counts (cached before the power model): re-model them")
                d = 100 * (predict_us(b, theta) / predict_us(v, theta) - 1)
                rows.append({"kind": "validate_sign", "scheme": "validation", "held_out": p["point"],
                             "name": f"{p['point']} ({fam})", "stage": f"{vname}/{bname}", "M": shape[0],
                             "modelled": d, "published": float(p["value"]), "error": None,
                             "unit": "% speed-up (sign checked)",
                             "sign_right": bool((d > 0) == (float(p["value"]) > 0))})
    return rows


def uncertainty(residuals_pp: Sequence[float], *, level: float = LEVEL, n_boot: int = 4000, seed: int = 0) -> dict:
    """Bias (mean held-out speed-up error, with a bootstrap interval) and spread (sd) of the held-out
    residuals, and the predictive half-width ``t(n-1) * spread * sqrt(1 + 1/n)`` at ``level``."""
    from scipy import stats

    r = np.asarray([x for x in residuals_pp if x == x], float)
    n = len(r)
    if n < 3:
        raise UsageError(f"need at least 3 held-out residuals for an uncertainty model, got {n}")
    bias = float(r.mean())
    spread = float(r.std(ddof=1))
    rng = np.random.default_rng(seed)
    boots = rng.choice(r, size=(n_boot, n), replace=True).mean(axis=1)
    a = (1 - level) / 2
    t = float(stats.t.ppf(1 - a, n - 1))
    return {"n": n, "bias_pp": bias, "bias_low_pp": float(np.quantile(boots, a)),
            "bias_high_pp": float(np.quantile(boots, 1 - a)), "spread_pp": spread, "t": t, "level": level,
            "half_width_pp": t * spread * math.sqrt(1 + 1 / n), "residuals_pp": [float(x) for x in r]}


# ============================================================================ mechanisms

#: each post-hoc mechanism of the model and the value that switches it off (``gfx950.toml``; the table
#: re-evaluates cached cycle results, see :func:`mechanism_table`)
MECHANISMS = (
    ("memory.queues", False, "bandwidth shares off: the CU's own L2 path only"),
    ("memory.loaded_latency", False, "no loaded latency: each queue only adds its overhang past its last request"),
    ("memory.mall_writes", False, "every write at the MALL's rate, every written byte in the HBM floor"),
    ("memory.touched_floor", False, "HBM floor over whole touched buffers"),
    ("memory.hbm_sustained_fraction", 1.0, "HBM at its 8 TB/s peak"),
    ("power.enabled", False, "constant clock ([clock].sustained_ghz)"),
    ("power.round_overhead_us", 0.0, "no per-round overhead"),
)
#: mechanisms inside the cycle simulation and the value that switches each off (or, for a what-if that is
#: off in ``gfx950.toml``, on): their rows simulate PR #990's kernels again (:func:`model_fit_points` with
#: the override; cached like every timing run); the MoE validation rows are not simulated again
CYCLE_MECHANISMS = (
    ("vmem.l1_cache", False, "vector L1 off: every vector load the one latency beyond it"),
    ("vmem.l2_cache", False, "the CU's L2 share off: every access past the vector L1 the one latency beyond "
     "it, scratch past both caches"),
    ("vmem.scalar_cache", False, "scalar L1 off: every s_load the miss latency"),
    ("lds.dma_contends", True, "what-if ON: LDS-DMA data written through the LDS pipe (no source gives the rate)"),
)


def mechanism_table(rows: list[dict], theta: dict, points: list[dict] | None = None, *,
                    mechanisms=MECHANISMS, cycle_rows=None) -> list[dict]:
    """PR #990's points with each mechanism switched off in turn: per shape the after/before and
    aiter-asm/after speed-up errors (pp) and the mean absolute TFLOPS error, at the full model's fitted
    ``theta`` ("fixed") and with the fitted parameters fitted again without the mechanism ("refit";
    a fitted parameter that is the switch itself stays off).  With ``points``, the MoE validation
    ratios too (:func:`moe_validation`, at the fixed parameters).  ``cycle_rows``: ``{(key, value): rows}``
    of :data:`CYCLE_MECHANISMS`, the fit points simulated again with the override (their rows follow).
    Every number is modelled."""
    out = []
    todo = [(key, off, what, rows) for key, off, what in (("", None, "full model"),) + tuple(mechanisms)]
    todo += [(key, val, what, alt) for (key, val, what), alt in
             ((m, (cycle_rows or {}).get(m[:2])) for m in CYCLE_MECHANISMS) if alt is not None]
    for key, off, what, mrows in todo:
        cycle = mrows is not rows
        extra = {key: off} if key and not cycle else {}
        params = tuple(q for q in FIT_PARAMS if q not in extra)
        fits = [("fixed", {**theta, **extra})]
        if key and key != "power.enabled":  # the constant clock has no fitted parameter
            fits.append(("refit", {**fit(mrows, params, fixed=extra)["values"], **extra}))
        for how, th in fits:
            pts = point_table(mrows, th)
            base = {"label": LABEL, "mechanism_off": key or "none", "value_off": "" if off is None else off,
                    "what": what, "params": how}
            for q in ratio_rows(mrows, th):
                shape_pts = [x for x in pts if (x["M"], x["N"], x["K"]) == (q["M"], q["N"], q["K"])]
                out.append({**base, "case": q["name"], "M": q["M"], "N": q["N"], "K": q["K"],
                            "modelled": q["modelled"], "published": q["published"], "error": q["error"],
                            "unit": "pp speed-up",
                            "mean_abs_tflops_error": float(np.mean([abs(x["error"]) for x in shape_pts]))})
            if points is not None and how == "fixed" and not cycle:
                for v in moe_validation(points, th):
                    out.append({**base, "case": v["name"], "M": v["M"], "N": "", "K": "", "modelled": v["modelled"],
                                "published": v["published"], "error": v["error"], "unit": v["unit"]})
    return out


# ============================================================================ writing


def _fmt(v, sig=6):
    return "" if v is None or v == "" else (f"{v:.{sig}g}" if isinstance(v, float) else v)


def write_toml(result: dict, provenance: dict, path: Path | None = None, enable: bool = True) -> None:
    """Store the fitted values (and turn the power clock on) in ``gfx950.toml`` ``[power]``, each entry
    keeping its unit and gaining ``fitted``, ``stderr``, ``fit_set``, ``fit_model``, ``fit_command``."""
    from gfx950emu.timing import PARAMS_FILE

    path = Path(path or PARAMS_FILE)
    text = path.read_text()
    sec = text.index("\n[power]")
    head, body = text[:sec], text[sec:]

    def entry(key: str, line: str) -> str:
        rx = re.compile(rf"^{re.escape(key)} = \{{.*\}}$", re.M)
        if not rx.search(body):
            raise UsageError(f"{path.name}: no [power].{key} entry to write")
        return rx.sub(lambda _m: line, body, count=1)

    for full in result["params"]:
        key = full.split(".", 1)[1]
        v, se = result["values"][full], result["stderr"][full]
        unit = re.search(rf"^{re.escape(key)} = \{{.*?unit = \"([^\"]*)\"", body, re.M).group(1)
        src = (f"fitted: least squares on log time over the declared fit set ({provenance['fit_set']}); "
               f"+- {se:.3g} (1 sd, s^2 (J^T J)^-1); held-out error in experiments/reference/calibration.csv")
        line = (f'{key} = {{ value = {v:.6g}, unit = "{unit}", source = "{src}", fitted = "yes", '
                f'stderr = {se:.3g}, fit_model = "{provenance["model_fingerprint"]}", '
                f'fit_command = "{provenance["command"]}" }}')
        body = entry(key, line)
    if enable:
        body = entry("enabled", 'enabled = { value = true, unit = "", source = "switch: on = the power-limited '
                                'clock (power.py) with the fitted [power] values; false = the constant '
                                '[clock].sustained_ghz" }')
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(head + body)
    os.replace(tmp, path)
    from gfx950emu.timing import params as _p

    _p._load.cache_clear()


def write_csv(rows: list[dict], path: Path, columns: Sequence[str] = CAL_COLUMNS) -> None:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k)) for k in columns})
    os.replace(tmp, path)


def read_uncertainty(path: str | Path | None = None) -> dict:
    """The uncertainty model stored by ``fit --write`` (``kind == "uncertainty"`` rows of calibration.csv)."""
    path = Path(path) if path is not None else paths.reference_dir() / CALIBRATION_CSV
    if not path.is_file():
        raise UsageError(f"no calibration table at {path}; run `{command_text()}`")
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "uncertainty"]
    if not rows:
        raise UsageError(f"{path.name} has no uncertainty rows; run `{command_text()}`")
    vals = {r["name"]: float(r["modelled"]) for r in rows}
    vals["model_version"] = rows[0]["model_version"]
    vals["model_fingerprint"] = rows[0]["model_fingerprint"]
    return vals


# ============================================================================ the one command


def run(upstream_out, *, aiter_co=None, sample: int = 1, write: bool = False, moe: bool = True,
        points_path=None, out_csv=None, log=print) -> dict:
    from .modelled import model_fingerprint
    from gfx950emu.timing import model_version

    points = read_points(points_path)
    rows = model_fit_points(points, upstream_out, aiter_co, sample)
    res = fit(rows)
    th = res["values"]
    fp, ver = model_fingerprint(), model_version()
    log(f"fit ({len(rows)} points, model {fp}): " + ", ".join(
        f"{k.split('.', 1)[1]} = {res['values'][k]:.5g} +- {res['stderr'][k]:.2g}"
        + (" (at bound)" if res["at_bound"][k] else "") for k in res["params"]) + f"; in-sample rms {res['rms_pct']:.2f} %")
    cv = cross_validate(rows)
    val = moe_validation(points, th) if moe else []
    held = [c["error"] for c in cv if c["kind"] == "cv_ratio" and c["scheme"] == "leave-one-shape-out"] \
        + [v["error"] for v in val if v["kind"] == "validate"]
    unc = uncertainty(held)
    cmd = command_text("<upstream-out>")
    common = {"label": LABEL, "model_version": ver, "model_fingerprint": fp, "command": cmd}
    table = [{**common, "kind": "fit_param", "scheme": "in-sample", "name": k, "modelled": res["values"][k],
              "stderr": res["stderr"][k], "unit": ""} for k in res["params"]]
    table += [{**common, "kind": "fit_point", "scheme": "in-sample", "name": p["stage"], **p, "unit": "% TFLOPS"}
              for p in point_table(rows, th)]
    table += [{**common, "kind": "fit_ratio", "scheme": "in-sample", **q, "stage": q["name"], "unit": "pp speed-up"}
              for q in ratio_rows(rows, th)]
    table += [{**common, **c} for c in cv]
    table += [{**common, **v} for v in val]
    table += [{**common, "kind": "uncertainty", "scheme": "held-out", "name": k, "modelled": unc[k], "unit": "pp"}
              for k in ("n", "bias_pp", "bias_low_pp", "bias_high_pp", "spread_pp", "t", "level", "half_width_pp")]
    for c in cv:
        if c["kind"] == "cv_ratio":
            log(f"  {c['scheme']:22s} {c['held_out']:18s} {c['name']:22s} modelled {c['modelled']:+6.2f} % "
                f"published {c['published']:+6.2f} %  error {c['error']:+5.2f} pp")
        else:
            log(f"  {c['scheme']:22s} {c['held_out']:18s} {c['name']:22s} {c['modelled']:7.1f} vs "
                f"{c['published']:7.1f} TFLOPS ({c['error']:+5.2f} %)")
    for v in val:
        if v["kind"] == "validate_sign":
            log(f"  validation {v['name']}: modelled step {v['stage']} {v['modelled']:+.2f} % "
                f"(published sign {v['published']:+.0f}: {'right' if v['sign_right'] else 'WRONG'})")
            continue
        log(f"  validation {v['name']}: modelled time ratio {v['modelled']:.3f} vs published {v['published']:.3f} "
            f"(speed-up error {v['error']:+.2f} pp)")
    log(f"uncertainty (held-out, n={unc['n']}): bias {unc['bias_pp']:+.2f} pp "
        f"[{unc['bias_low_pp']:+.2f}, {unc['bias_high_pp']:+.2f}], spread {unc['spread_pp']:.2f} pp, "
        f"{int(100 * unc['level'])} % half-width {unc['half_width_pp']:.2f} pp")
    cycle_rows = {(key, val): model_fit_points(points, upstream_out, aiter_co, sample, overrides={key: val})
                  for key, val, _ in CYCLE_MECHANISMS}
    mech = [{**common, **m} for m in mechanism_table(rows, th, points if moe else None, cycle_rows=cycle_rows)]
    for m in mech:
        if m["unit"] == "pp speed-up" and m["case"] == "after_990/before_990":
            log(f"  mechanism off: {m['mechanism_off']:30s} {m['params']:5s} {m['M']}x{m['N']}x{m['K']}: after/before "
                f"error {m['error']:+5.2f} pp, mean |TFLOPS error| {m['mean_abs_tflops_error']:.2f} %")
    if write:
        write_csv(mech, paths.reference_dir() / MECHANISMS_CSV, MECH_COLUMNS)
        write_csv(table, Path(out_csv) if out_csv else paths.reference_dir() / CALIBRATION_CSV)
        write_toml(res, {"fit_set": f"{len(rows)} points of {POINTS_CSV} role=fit", "model_fingerprint": fp,
                         "command": cmd})
        log(f"wrote experiments/reference/{CALIBRATION_CSV}, {MECHANISMS_CSV} and gfx950.toml [power] (power clock on)")
    return {"fit": res, "cv": cv, "validation": val, "uncertainty": unc, "table": table, "mechanisms": mech}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.calibration")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit the [power] parameters on the declared fit set, cross-validate, write")
    f.add_argument("--upstream-out", required=True, help="the compiled upstream kernels (<out>/flydsl/<commit8>/...)")
    f.add_argument("--aiter-co", help=f"aiter's asm GEMM code object (default <upstream-out>/aiter/<name>.co)")
    f.add_argument("--sample", type=int, default=1)
    f.add_argument("--no-moe", action="store_true", help="skip the MoE validation rows")
    f.add_argument("--write", action="store_true", help="write gfx950.toml [power] and calibration.csv")
    ns = ap.parse_args(argv)
    try:
        if not Path(ns.upstream_out).is_dir():
            raise UsageError(f"--upstream-out {ns.upstream_out} is not a folder")
        run(ns.upstream_out, aiter_co=ns.aiter_co, sample=ns.sample, write=ns.write, moe=not ns.no_moe)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# ============================================================================ for notebooks/timing_model.py


def read_table(path: str | Path | None = None):
    """``experiments/reference/calibration.csv`` as a DataFrame (the committed fit, CV and validation)."""
    import pandas as pd

    path = Path(path) if path is not None else paths.reference_dir() / CALIBRATION_CSV
    if not path.is_file():
        raise UsageError(f"no calibration table at {path}; run `{command_text()}`")
    return pd.read_csv(path)


def fit_summary(table=None):
    """The fitted parameters with their standard errors (rows ``kind == "fit_param"``)."""
    t = read_table() if table is None else table
    out = t[t["kind"] == "fit_param"][["name", "modelled", "stderr", "model_fingerprint"]]
    return out.rename(columns={"modelled": "value"}).reset_index(drop=True)


def cv_table(table=None):
    """The cross-validation table: per scheme and held-out fold, modelled vs published and the error."""
    t = read_table() if table is None else table
    cols = ["scheme", "held_out", "kind", "stage", "M", "N", "K", "modelled", "published", "error", "unit"]
    return t[t["kind"].isin(["cv_point", "cv_ratio", "validate", "validate_sign"])][cols].reset_index(drop=True)


def mechanism_summary(path: str | Path | None = None):
    """``experiments/reference/timing_mechanisms.csv`` (written by ``fit --write``) as one row per mechanism
    setting (``switch=value``: off, or on for a what-if that is off in the model) and parameter handling
    (fixed / refit): the after/before speed-up error (pp) at each of
    PR #990's shapes, the aiter-asm/after errors, the mean |TFLOPS error| (%) and the MoE validation
    ratios (modelled, the published value in the column name)."""
    import pandas as pd

    path = Path(path) if path is not None else paths.reference_dir() / MECHANISMS_CSV
    if not path.is_file():
        raise UsageError(f"no mechanism table at {path}; run `{command_text()}`")
    t = pd.read_csv(path)
    # the row's setting, not just the switch's name: "memory.queues=False", a what-if "lds.dma_contends=True"
    t["mechanism_off"] = [m if pd.isna(v) else f"{m}={v}" for m, v in zip(t["mechanism_off"], t["value_off"])]
    is_gemm = t["case"].isin(["after_990/before_990", "aiter_asm/after_990"])
    gemm = t[is_gemm].copy()
    gemm["shape"] = gemm["M"].astype(int).astype(str) + "x" + gemm["N"].astype(str).str.replace(r"\.0$", "", regex=True) \
        + "x" + gemm["K"].astype(str).str.replace(r"\.0$", "", regex=True)
    keys = ["mechanism_off", "params"]
    order = list(dict.fromkeys(zip(t["mechanism_off"], t["params"])))
    ab = gemm[gemm["case"] == "after_990/before_990"].pivot_table(index=keys, columns="shape", values="error")
    ab.columns = [f"after/before {c} (pp)" for c in ab.columns]
    aa = gemm[gemm["case"] == "aiter_asm/after_990"].groupby(keys)["error"].agg(lambda x: float(np.abs(x).max()))
    tf = gemm.groupby(keys)["mean_abs_tflops_error"].mean()
    out = ab.join(aa.rename("max |aiter-asm/after| (pp)")).join(tf.rename("mean |TFLOPS error| (%)"))
    moe = t[~is_gemm & t["modelled"].notna()]
    for case, g in moe.groupby("case", sort=False):
        pub, unit = g["published"].iloc[0], str(g["unit"].iloc[0])
        name = f"{case} (% speed-up; published sign {pub:+g})" if "sign" in unit else f"{case} (published {pub:g})"
        out = out.join(g.set_index(keys)["modelled"].rename(name))
    return out.reindex(order).reset_index()


def plot_validation(table=None):
    """Modelled vs published, one point per hardware figure: the fit points in-sample (TFLOPS, left),
    held-out speed-ups (leave-one-shape-out and the validation set, right); every number modelled
    against published."""
    import matplotlib.pyplot as plt

    from . import plots

    t = read_table() if table is None else table
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4))
    fp = t[t["kind"] == "fit_point"]
    for stage, mk in zip(GEMM_STAGES, "os^"):
        s = fp[fp["name"] == stage]
        a.scatter(s["published"], s["modelled"], marker=mk, label=stage)
    lo, hi = float(fp[["published", "modelled"]].min().min()) * 0.97, float(fp[["published", "modelled"]].max().max()) * 1.03
    a.plot([lo, hi], [lo, hi], color="#888", lw=0.8)
    a.set(xlabel="published TFLOPS (MI355X)", ylabel="modelled TFLOPS", title="fit set, in-sample")
    a.legend(fontsize=7)
    ho = t[(t["kind"].isin(["cv_ratio", "validate"])) & (t["scheme"].isin(["leave-one-shape-out", "validation"]))]
    for (scheme, stage), s in ho.groupby(["scheme", "stage"]):
        pub = s["published"] if scheme != "validation" else 100 * (1 / s["published"] - 1)
        mod = pub + s["error"]
        b.scatter(pub, mod, label=f"{stage} ({scheme})", s=18)
    b.axhline(0, color="#bbb", lw=0.6)
    b.axvline(0, color="#bbb", lw=0.6)
    lim = [min(-2, float(ho["error"].min()) - 2), 16]
    b.plot(lim, lim, color="#888", lw=0.8)
    b.set(xlabel="published speed-up (%)", ylabel="modelled speed-up (%)")
    b.set_title("held out", loc="left")
    b.legend(fontsize=6)
    plots.source_badge(b, "modelled", "vs published")
    fig.tight_layout()
    return fig


def plot_residuals(table=None):
    """The held-out speed-up residuals (modelled - published, pp) with the bias and the interval."""
    import matplotlib.pyplot as plt

    from . import plots

    t = read_table() if table is None else table
    ho = t[(t["kind"].isin(["cv_ratio", "validate"])) & (t["scheme"].isin(["leave-one-shape-out", "validation"]))]
    u = {r["name"]: float(r["modelled"]) for _, r in t[t["kind"] == "uncertainty"].iterrows()}
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [f"{r.stage} @ {r.held_out}" for r in ho.itertuples()]
    ax.barh(range(len(ho)), ho["error"], color="#2166ac")
    ax.set_yticks(range(len(ho)), labels, fontsize=6)
    ax.axvline(u.get("bias_pp", 0), color="#d6604d", lw=1, label=f"bias {u.get('bias_pp', 0):+.2f} pp")
    hw = u.get("half_width_pp", 0)
    ax.axvspan(u.get("bias_pp", 0) - hw, u.get("bias_pp", 0) + hw, color="#d6604d", alpha=0.12,
               label=f"{int(100 * u.get('level', 0.9))} % predictive +-{hw:.2f} pp")
    ax.axvline(0, color="#888", lw=0.6)
    ax.set(xlabel="held-out speed-up error (modelled - published, pp)")
    ax.invert_yaxis()
    ax.legend(fontsize=7)
    plots.source_badge(ax, "modelled", "held-out residuals")
    fig.tight_layout()
    return fig
