"""What each step buys, independent of ladder order: Shapley attribution over switch subsets.

A ladder delta is a switch's gain *given the switches before it*, so it depends on the order we
chose; a leave-one-out loss is its gain given *all* the others. The Shapley value averages a switch's
gain over every order, so the shares of all switches add up exactly to the whole ladder's gain. Here
the game is ``v(S) = ln TFLOPS`` of the kernel with switch set ``S`` (log, so gains add along an
ordering: ``shapley_log_pct`` is 100 x that share, and the shares sum to ``total_log_pct`` =
``100 ln(TFLOPS(all) / TFLOPS(none))``); the game theory, including how a switch whose requirement is
off is treated (the conjunctive permission structure), is in :mod:`mxfp4_ablation.studies.shapley`.

Per (family, shape):

* :func:`plan` -- which subsets to evaluate: **exact** (every valid subset) when there are at most
  ``exact_limit`` of them, else **sampled** (``pairs`` antithetic pairs of orderings, the ladder order
  and its reverse first, plus each adjacent pair's swapped prefix for the interaction estimate); the
  ladder rungs and every switch's leave-one-out set (:meth:`~mxfp4_ablation.family.Family.leave_one_out_all`:
  a switch others require is left out with its dependents, and says so) are always added;
* :func:`evaluate` -- model (``what="model"``) or time (``what="bench"``, on a gfx950 GPU) every
  planned subset with the sweep engine (:mod:`mxfp4_ablation.studies.sweep`, Dask);
* :func:`attribute` -- Shapley values with one interval each, pairwise interaction indices, ladder
  deltas and leave-one-out losses, and the seed's order of impact against the Shapley ranking.

**One interval per switch.** Two parts, added (conservative, no independence assumed):

1. *sampling*: exact -> none; sampled -> the percentile bootstrap over the orderings
   (:func:`~mxfp4_ablation.studies.shapley.shapley_sampled`);
2. *the evidence's own error*: modelled -> the model's per-step uncertainty ``(minus, plus)`` in log
   points from :func:`step_uncertainty`. A Shapley value is an average (weights summing to 1) of the
   switch's marginal gains, each one modelled step of that switch, so if every step of switch ``i``
   is off by at most ``(minus_i, plus_i)`` so is its Shapley value. The default is the calibrated
   per-step interval from held-out residuals (``studies.speed.step_interval``; its bias shifts the
   interval); any other per-step model plugs in through :func:`set_step_uncertainty` (a function
   ``(family, switch, shape) -> (minus, plus)`` in log points; see its docstring). Measured -> the harness's CIs of each subset's paired A/B ratio against
   the empty set's kernel, carried through the (linear) Shapley formula with the absolute weights
   (:func:`linear_halfwidths`).

**Order of impact.** FlyDSL PR #990 lists its changes "roughly in descending order of impact"
(:data:`mxfp4_ablation.studies.ablation.PR990_ORDER`); aiter PR #3828 quantifies a few claims
(:data:`AITER3828_ORDER`, per gemm and regime). Each is compared with the Shapley ranking by Spearman's
rho with a bootstrap interval (resampled orderings when sampled, plus a uniform draw within each
switch's evidence interval); the verdict says ``cannot decide`` whenever that interval holds 0 or
fewer than 3 switches are ranked.

Every number here is labelled: ``modelled`` (gfx950emu timing model, with its version and clock) or
``measured`` (the harness on a gfx950 GPU). Nothing in this module imports FlyDSL until
:func:`evaluate` runs a task.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import shapley as G
from .. import family as family_mod
from ..errors import UsageError

LABEL = "modelled"
#: The pipeline's default: exact when a family has at most this many valid subsets (moe1: 4, moe2: 16;
#: GEMM: 240 -> sampled). ``make attribution-exact`` raises it.
EXACT_LIMIT = 32
#: Antithetic pairs of orderings when sampling (the ladder + its reverse are the first pair).
DEFAULT_PAIRS = 2

#: aiter PR #3828's quantified claims (https://github.com/ROCm/aiter/pull/3828, the Switch records'
#: ``claim``), as a descending order of impact per (family, regime). Only claims with a number are
#: ranked: gemm1 int64_abi "~7% faster at decode (M=4/8), parity by M~64", exp2 "large M 2-6% faster";
#: gemm2 int64_abi "~7 % faster at decode, with parity by M~64" (its other steps carry no number).
AITER3828_ORDER = {
    ("moe1", "decode"): ("int64_abi", "exp2"),
    ("moe1", "prefill"): ("exp2", "int64_abi"),
    ("moe2", "decode"): ("int64_abi",),
    ("moe2", "prefill"): (),
}
AITER3828_URL = "https://github.com/ROCm/aiter/pull/3828"


class AttributionError(UsageError):
    """Bad attribution input or missing values (one line)."""


# ============================================================================ uncertainty interface


def _calibrated_interval() -> tuple[tuple[float, float], str]:
    """The calibrated per-step interval (:func:`.speed.step_interval`, from held-out residuals; its bias
    makes it asymmetric) as ``((minus, plus)`` log points around a step, its rule)."""
    from .speed import step_interval

    iv = step_interval(0.0)
    return (-math.log(1 + float(iv["low"]) / 100), math.log(1 + float(iv["high"]) / 100)), str(iv.get("rule", ""))


def _band_uncertainty(family: str, switch: str, shape: Sequence[int]) -> tuple[float, float]:
    """The default: the calibrated step interval, the same for every step."""
    return _calibrated_interval()[0]


_UNCERTAINTY: dict[str, Callable] = {"fn": _band_uncertainty, "rule": ""}


def set_step_uncertainty(fn: Callable[[str, str, Sequence[int]], tuple[float, float]] | None,
                         rule: str = "") -> None:
    """Plug in the model's per-step uncertainty: ``fn(family, switch, shape) -> (minus, plus)``, the
    most the model may over-state (``minus``) or under-state (``plus``) one step of ``switch`` at
    ``shape``, in log points of TFLOPS (``ln`` of the ratio; 0.058 ~ 6 %). ``rule``: one line saying
    where the numbers come from (shown beside every interval). ``None`` restores the default (the calibrated
    interval of :func:`.speed.step_interval` for every step)."""
    _UNCERTAINTY["fn"] = fn or _band_uncertainty
    _UNCERTAINTY["rule"] = rule if fn else ""


def step_uncertainty(family: str, switch: str, shape: Sequence[int]) -> tuple[float, float]:
    """``(minus, plus)`` in log points for one modelled step of ``switch`` (see :func:`set_step_uncertainty`):
    the step's true value lies in ``[modelled - minus, modelled + plus]``. One side may be negative
    (a bias-corrected interval that lies wholly on one side of the modelled value); the width
    ``minus + plus`` may not."""
    lo, hi = _UNCERTAINTY["fn"](family, switch, tuple(shape))
    if not (lo == lo and hi == hi and lo + hi >= 0):
        raise AttributionError(f"step uncertainty of {family}.{switch} must be (minus, plus) with a non-negative "
                               f"width, got {lo}, {hi}")
    return float(lo), float(hi)


def uncertainty_rule() -> str:
    if _UNCERTAINTY["rule"]:
        return _UNCERTAINTY["rule"]
    return "every modelled step's calibrated interval: " + _calibrated_interval()[1]


# ============================================================================ plan


def regime_of(family: str, shape: Sequence[int]) -> str | None:
    """``decode`` / ``prefill`` for a MoE shape (block_m 16 / 128, else the token-count rule); None
    for a family without regimes."""
    if not family.startswith("moe"):
        return None
    block_m = int(shape[5]) if len(shape) > 5 else (16 if int(shape[0]) < 4096 else 128)
    return "decode" if block_m == 16 else "prefill"


@dataclass
class Plan:
    """What to evaluate for one (family, shape)."""

    family: str
    shape: tuple[int, ...]
    method: str  # "exact" | "sampled"
    structure: G.Structure
    orderings: list = field(default_factory=list)
    game_sets: list = field(default_factory=list)  # the sets the Shapley / interaction formulas need
    loo: list = field(default_factory=list)  # (switch, set, dropped_too)
    pairs: int = 0
    seed: int = 0

    @property
    def sets(self) -> list[frozenset]:
        """Every set to evaluate: the game's, the ladder's rungs, every leave-one-out set."""
        fam = family_mod.get(self.family)
        extra = [s for _, s in fam.ladder] + [s for _, s, _ in self.loo]
        return list(dict.fromkeys(list(self.game_sets) + extra))

    def variant_names(self) -> list[str]:
        fam = family_mod.get(self.family)
        return [fam.subset_name(s) for s in self.sets]


def plan(family: str, shape: Sequence[int], method: str = "auto", pairs: int = DEFAULT_PAIRS, seed: int = 0,
         exact_limit: int = EXACT_LIMIT, interactions: bool = True) -> Plan:
    """The subsets one attribution needs (module doc). ``method``: ``auto`` | ``exact`` | ``sampled``."""
    if method not in ("auto", "exact", "sampled"):
        raise AttributionError(f"method must be auto, exact or sampled; got {method!r}")
    fam = family_mod.get(family)
    shape = tuple(int(n) for n in shape)
    fam.shape(shape)
    st = G.Structure.of_family(fam)
    valid = st.subsets()
    if method == "auto":
        method = "exact" if len(valid) <= exact_limit else "sampled"
    p = Plan(family, shape, method, st, loo=[(s, sw, dropped) for (_, sw, dropped), s in
                                            zip(fam.leave_one_out_all(), fam.switches)], seed=seed)
    if method == "exact":
        p.game_sets = valid
    else:
        if pairs < 2:
            raise AttributionError(f"sampling needs at least 2 antithetic pairs of orderings for an interval; got {pairs}")
        p.pairs = pairs
        p.orderings = G.sample_orderings(st, pairs, seed)
        p.game_sets = G.needed_sets(st, p.orderings, interactions=interactions)
    return p


# ============================================================================ evaluate


def tasks_for(plans: Sequence[Plan], what: str = "model", **options) -> list:
    from . import sweep

    out = []
    for p in plans:
        out += sweep.tasks(p.variant_names(), [p.shape], [what], **options)
    return list(dict.fromkeys(out))


def evaluate(plans: Sequence[Plan], what: str = "model", scheduler: str | None = "local", workers: int | None = None,
             progress: bool = True, client_=None, **options):
    """Run every planned subset through the sweep engine; the sweep rows (one per task)."""
    from . import sweep

    todo = tasks_for(plans, what, **options)
    rows = sweep.run(todo, scheduler=scheduler, workers=workers, progress=progress, desc=f"attribution ({what})",
                     client_=client_)
    bad = sweep.failures(rows)
    if bad:
        raise AttributionError(f"{len(bad)} of {len(rows)} tasks failed, first: {bad[0]}")
    return rows


# ============================================================================ attribute


def values_from_rows(p: Plan, rows, what: str = "model") -> tuple[dict[frozenset, float], dict[frozenset, float]]:
    """The game ``v(S)`` (log TFLOPS, or for bench ``-ln(time_S / time_empty)``) and, for bench, each
    set's log half-width from its CI; from sweep rows of this plan's family and shape."""
    fam = family_mod.get(p.family)
    shape = "x".join(map(str, p.shape))
    sub = rows[(rows["family"] == p.family) & (rows["shape"] == shape) & (rows["what"] == what)]
    v: dict[frozenset, float] = {}
    half: dict[frozenset, float] = {}
    for r in sub.itertuples():
        s = fam.from_mask(int(r.mask))
        if what == "model":
            v[s] = math.log(float(r.tflops))
        else:
            v[s] = -math.log(float(r.ratio))
            half[s] = (math.log(float(r.ci_high)) - math.log(float(r.ci_low))) / 2
    if what == "bench":
        v.setdefault(frozenset(), 0.0)
        half.setdefault(frozenset(), 0.0)
    missing = [fam.subset_name(s) for s in p.sets if s not in v]
    if missing:
        raise AttributionError(f"{p.family} at {shape}: no {what} value for {len(missing)} planned subset(s), "
                               f"e.g. {missing[0]}")
    return v, half


def linear_halfwidths(fn: Callable[[Mapping[frozenset, float]], Mapping], sets: Sequence[frozenset],
                      half: Mapping[frozenset, float]) -> dict:
    """``fn`` is linear in the game's values: the half-width of each output when every ``v(S)`` may be
    off by ``half[S]`` (worst case: sum of |coefficient| x half-width)."""
    zero = {s: 0.0 for s in sets}
    out: dict = {}
    for s in sets:
        if not half.get(s):
            continue
        coef = fn({**zero, s: 1.0})
        for k, c in coef.items():
            c = c[0] if isinstance(c, tuple) else c
            out[k] = out.get(k, 0.0) + abs(c) * half[s]
    return out


@dataclass
class Attribution:
    """One (family, shape)'s result; :meth:`json` is the CLI's ``--json`` form."""

    family: str
    shape: tuple
    method: str
    what: str
    switches: dict  # name -> row dict
    total_log_pct: float
    interactions: dict  # (a, b) -> (log_pct, samples or None)
    order: dict
    values: dict  # frozenset -> v
    detail: dict = field(default_factory=dict)

    def json(self) -> dict:
        """The CLI's ``--json`` form (NaN -- e.g. a sampled pair never adjacent -- becomes null)."""
        return _nan_to_none(self._json())

    def _json(self) -> dict:
        return {
            "switches": {n: {"shapley_log_pct": r["shapley_log_pct"], "ci": [r["ci_low"], r["ci_high"]],
                             "ladder_pct": r["ladder_pct"], "loo_pct": r["loo_pct"]} for n, r in self.switches.items()},
            "total_log_pct": self.total_log_pct,
            "interactions": {f"{a},{b}": {"log_pct": x, "samples": k} for (a, b), (x, k) in self.interactions.items()},
            "order_vs_seed": self.order,
        }


def _nan_to_none(x):
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nan_to_none(v) for v in x]
    return x


def _r(x: float, nd: int = 3) -> float:
    return round(float(x), nd) if x == x else float("nan")


def attribute(p: Plan, rows, what: str = "model", resamples: int = 2000, seed: int = 0) -> Attribution:
    """Shapley values, intervals, interactions, ladder / leave-one-out views and the order of impact."""
    fam = family_mod.get(p.family)
    st = p.structure
    v, half = values_from_rows(p, rows, what)
    full, empty = frozenset(fam.switches), frozenset()
    total = v[full] - v[empty]
    # --- Shapley + sampling interval
    if p.method == "exact":
        phi = G.shapley_exact(st, v)
        samp = {s: (phi[s], phi[s]) for s in st.players}
        inter = {k: (x, None) for k, x in G.interactions_exact(st, v).items()}
        per_ordering = None

        def phi_fn(vals):
            return G.shapley_exact(st, vals)

        def inter_fn(vals):
            return G.interactions_exact(st, vals)
    else:
        sm = G.shapley_sampled(st, v, p.orderings, resamples=resamples, seed=seed)
        phi, samp, per_ordering = sm.values, sm.ci, sm.per_ordering
        inter = G.interactions_sampled(st, v, p.orderings)

        def phi_fn(vals):
            return {k: sum(G.marginals(st, vals, o)[k] for o in p.orderings) / len(p.orderings) for k in st.players}

        def inter_fn(vals):
            return {k: x for k, (x, _) in G.interactions_sampled(st, vals, p.orderings).items()}
    # --- the evidence's own error
    if what == "model":
        unc = {s: step_uncertainty(p.family, s, p.shape) for s in st.players}
        unc_inter = {(a, b): unc[a][0] + unc[a][1] + unc[b][0] + unc[b][1] for a, b in inter}
        rule = uncertainty_rule()
    else:
        lin = linear_halfwidths(phi_fn, list(v), half)
        unc = {s: (lin.get(s, 0.0), lin.get(s, 0.0)) for s in st.players}
        lin_i = linear_halfwidths(inter_fn, list(v), half)
        unc_inter = {k: lin_i.get(k, 0.0) for k in inter}
        rule = "the harness's CIs of each subset's paired A/B ratio against the empty set, carried through linearly"
    # --- ladder and leave-one-out views
    ladder = fam.ladder
    ladder_pct = {}
    for (_, before), (_, after) in zip(ladder[:-1], ladder[1:]):
        (s,) = after - before
        ladder_pct[s] = (math.exp(v[after] - v[before]) - 1) * 100, (v[after] - v[before]) * 100
    loo = {s: ((math.exp(v[full] - v[sw]) - 1) * 100, (v[full] - v[sw]) * 100, dropped) for s, sw, dropped in p.loo}
    switches = {}
    for s in st.players:
        lo, hi = samp[s]
        m, pl = unc[s]
        switches[s] = {
            "shapley_log_pct": _r(100 * phi[s]), "ci_low": _r(100 * (lo - m)), "ci_high": _r(100 * (hi + pl)),
            "sampling_low": _r(100 * lo), "sampling_high": _r(100 * hi),
            "evidence_minus": _r(100 * m), "evidence_plus": _r(100 * pl),
            "ladder_pct": _r(ladder_pct[s][0]), "ladder_log_pct": _r(ladder_pct[s][1]),
            "loo_pct": _r(loo[s][0]), "loo_log_pct": _r(loo[s][1]),
            "loo_dropped_too": ",".join(x for x in fam.switches if x in loo[s][2]),
            "loo_variant": fam.subset_name(dict((a, b) for a, b, _ in p.loo)[s]),
        }
    # --- order of impact vs the seed
    order = order_vs_seed(p, phi, samp, unc, per_ordering, resamples=resamples, seed=seed)
    detail = {"method": p.method, "what": what, "label": "modelled" if what == "model" else "measured",
              "sets": len(p.sets), "game_sets": len(p.game_sets), "valid_sets": len(st.subsets()),
              "orderings": len(p.orderings), "pairs": p.pairs, "seed": p.seed, "evidence_rule": rule,
              "interaction_evidence": {f"{a},{b}": _r(100 * x) for (a, b), x in unc_inter.items()},
              "efficiency_gap": abs(sum(phi.values()) - total)}
    if what == "model":
        sub = rows[(rows["family"] == p.family) & (rows["shape"] == "x".join(map(str, p.shape))) & (rows["what"] == "model")]
        detail["model_version"] = ", ".join(sorted({str(x) for x in sub["model_version"].dropna()}))
        cs = sorted({round(float(x), 4) for x in sub["clock_ghz"].dropna()})
        detail["clock_ghz"] = f"{cs[0]:g}" if len(cs) == 1 else (f"{cs[0]:.3g}-{cs[-1]:.3g} (power-limited, per kernel)"
                                                                   if cs else "")
    return Attribution(p.family, p.shape, p.method, what, switches, _r(100 * total),
                       {k: (_r(100 * x), n) for k, (x, n) in inter.items()}, order, v, detail)


def order_vs_seed(p: Plan, phi: Mapping[str, float], samp: Mapping, unc: Mapping, per_ordering,
                  resamples: int = 2000, seed: int = 0) -> dict:
    """The seed's claimed order against the Shapley ranking (module doc)."""
    if p.family == "gemm":
        from .modelled_tables import PR990_ORDER, PR990_URL

        claimed, source = tuple(s for s, _ in PR990_ORDER), PR990_URL + " (\"roughly in descending order of impact\")"
    else:
        claimed = AITER3828_ORDER.get((p.family, regime_of(p.family, p.shape)), ())
        source = AITER3828_URL + " (its quantified claims, " + (regime_of(p.family, p.shape) or "") + ")"
    claimed = tuple(s for s in claimed if s in phi)
    units = None
    if per_ordering is not None:
        units = [per_ordering[i:i + 2] for i in range(0, len(per_ordering), 2)]

    def draw(rng):
        if rng is None:
            return dict(phi)
        if units is not None and len(units) > 1:
            pick = [r for _ in units for r in units[rng.randrange(len(units))]]
            base = {s: sum(r[s] for r in pick) / len(pick) for s in phi}
        else:
            base = dict(phi)
        return {s: base[s] + rng.uniform(-unc[s][0], unc[s][1]) for s in phi}

    out = G.rank_correlation(claimed, draw, resamples=resamples, seed=seed)
    out["source"] = source
    out["rho"] = _r(out["rho"])
    out["ci"] = [_r(x) for x in out["ci"]]
    out["shapley_order"] = sorted(phi, key=lambda s: -phi[s])
    return out


# ============================================================================ study level


def study_plans(study_name: str, shape: Sequence[int] | None = None, families: Sequence[str] | None = None,
                **kw) -> list[Plan]:
    """The plans of a study: every family of it (or ``families``) at ``shape`` (default: every regime's ISA
    shape; GEMM 8192^3, MoE both regimes' Kimi shapes)."""
    from . import STUDIES, get

    if study_name not in STUDIES:
        raise AttributionError(f"unknown study {study_name!r} (known: {', '.join(STUDIES)})")
    spec = get(study_name).spec
    fams = list(families) if families else list(spec.families)
    if not set(fams) <= set(spec.families):
        raise AttributionError(f"study {study_name} has no family {', '.join(fams)}")
    shape_list = [tuple(shape)] if shape is not None else [tuple(r.isa) for r in spec.regimes]
    return [plan(f, s, **kw) for s in shape_list for f in fams]


def tables(results: Sequence[Attribution]):
    """The stored tables: ``attribution_switches``, ``attribution_interactions``, ``attribution_order``,
    ``attribution_values`` (pandas; every row labelled)."""
    import pandas as pd

    sw, it, od, vals = [], [], [], []
    for a in results:
        fam = family_mod.get(a.family)
        base = {"family": a.family, "shape": "x".join(map(str, a.shape)), "regime": regime_of(a.family, a.shape),
                "method": a.method, "label": a.detail["label"], "model_version": a.detail.get("model_version"),
                "clock_ghz": a.detail.get("clock_ghz")}
        for rank, (n, r) in enumerate(a.switches.items(), 1):
            sw.append({**base, "switch": n, "ladder_rank": rank, **r, "total_log_pct": a.total_log_pct,
                       "evidence_rule": a.detail["evidence_rule"], "sets": a.detail["sets"],
                       "orderings": a.detail["orderings"]})
        for (x, y), (val, k) in a.interactions.items():
            it.append({**base, "a": x, "b": y, "index_log_pct": val, "samples": -1 if k is None else k,
                       "evidence_halfwidth": a.detail["interaction_evidence"].get(f"{x},{y}")})
        o = a.order
        od.append({**base, "source": o["source"], "claimed": ",".join(o["claimed"]), "rho": o["rho"],
                   "ci_low": o["ci"][0], "ci_high": o["ci"][1], "n": o["n"], "verdict": o["verdict"],
                   "shapley_order": ",".join(o["shapley_order"])})
        for s, val in sorted(a.values.items(), key=lambda t: fam.mask(t[0])):
            vals.append({**base, "variant": fam.subset_name(s), "mask": fam.mask(s), "log_value": val,
                         ("tflops" if a.what == "model" else "speedup_vs_empty"): math.exp(val)})
    return {"attribution_switches": pd.DataFrame(sw), "attribution_interactions": pd.DataFrame(it),
            "attribution_order": pd.DataFrame(od), "attribution_values": pd.DataFrame(vals)}


def write(results: Sequence[Attribution], out_dir: str | Path, settings: dict | None = None) -> Path:
    from .. import provenance, results as results_mod

    out = Path(out_dir)
    mode = "emulated" if all(a.what == "model" for a in results) else "device"
    prov = provenance.collect(mode, settings=settings or {})
    for name, df in tables(results).items():
        results_mod.write_table(df, out / f"{name}.parquet", prov)
    return out


def run(study_name: str, shape: Sequence[int] | None = None, families: Sequence[str] | None = None,
        what: str = "model", scheduler: str | None = "local", workers: int | None = None, progress: bool = True,
        client_=None, method: str = "auto", pairs: int = DEFAULT_PAIRS, seed: int = 0,
        exact_limit: int = EXACT_LIMIT, bench_options: dict | None = None):
    """Plan, evaluate (one sweep for every plan) and attribute; ``(results, sweep rows)``."""
    plans = study_plans(study_name, shape, families, method=method, pairs=pairs, seed=seed, exact_limit=exact_limit)
    rows = evaluate(plans, what, scheduler=scheduler, workers=workers, progress=progress, client_=client_,
                    **(bench_options or {}))
    return [attribute(p, rows, what, seed=seed) for p in plans], rows


def findings(switch_table, order_table) -> list[str]:
    """Generated sentences (README / summary): per (family, shape) what each switch buys with its
    interval, which are resolved (interval excludes 0), and the order-of-impact verdict."""
    out = []
    for (fam, shape), sub in switch_table.groupby(["family", "shape"], sort=False):
        lab = sub["label"].iloc[0]
        parts = []
        for r in sub.sort_values("shapley_log_pct", ascending=False).itertuples():
            resolved = r.ci_low > 0 or r.ci_high < 0
            parts.append(f"`{r.switch}` {r.shapley_log_pct:+.1f} [{r.ci_low:+.1f}, {r.ci_high:+.1f}]"
                         + ("" if resolved else " (undecided)"))
        n_res = int(((sub["ci_low"] > 0) | (sub["ci_high"] < 0)).sum())
        out.append(f"{fam} at {shape} ({sub['method'].iloc[0]} Shapley, {lab}): the steps' shares of the whole "
                   f"{sub['total_log_pct'].iloc[0]:+.1f} log-% gain: " + "; ".join(parts)
                   + f". {n_res} of {len(sub)} intervals exclude 0.")
    for r in order_table.itertuples():
        if r.n:
            out.append(f"{r.family} at {r.shape}: the seed's order ({r.claimed.replace(',', ' > ')}) vs the Shapley "
                       f"ranking: Spearman rho {r.rho:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}]: {r.verdict}.")
    return out


__all__ = ["LABEL", "EXACT_LIMIT", "AITER3828_ORDER", "set_step_uncertainty", "step_uncertainty", "regime_of", "Plan",
           "plan", "evaluate", "attribute", "Attribution", "order_vs_seed", "study_plans", "tables", "write", "run",
           "findings", "linear_halfwidths"]
