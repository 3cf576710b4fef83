"""Fidelity: how close each ladder's first and last rungs come to the seed's "before" and "after".

An ablation of an upstream change decomposes it only if its first rung is the kernel the change
started from and its last rung the kernel it merged. This module compares, metric by metric
(:func:`mxfp4_ablation.metrics.fingerprint`), our rungs with the upstream kernels whose fingerprints are
committed in ``experiments/reference/fingerprints.csv`` (made by :mod:`mxfp4_ablation.upstream`;
no upstream checkout is needed here):

* :data:`SEEDS`: per seed (kernel family) the upstream source, the before/after commits, the
  upstream stage and the band (GEMM 10 %, MoE 15 %);
* :func:`fidelity_table`: the long table ``seed, stage, case, pair, metric, upstream_commit,
  upstream, variant, ours, diff_pct, band_pct, within_band`` (``pair`` = ``first~before`` or
  ``last~after``), compiling our rungs with :mod:`mxfp4_ablation.toolchain` at the upstream shapes;
* :func:`summary`: per (seed, case, pair) how many metrics fall inside the band;
* :func:`plot_fidelity`: the % differences as a deterministic figure (``plots`` conventions);
* :func:`speed_table` / :func:`speed_markdown`: the *modelled* speed rows (TFLOPS, cycles per MFMA,
  exposed cycles by reason) of the same pairs, ours and upstream in the same timing model
  (``python -m mxfp4_ablation.fidelity gemm --upstream-out <out>``).

``diff_pct`` is ``100 * (ours - upstream) / upstream``; when upstream is 0 it is 0 if ours is 0 too,
else infinite (outside any band); a metric neither kernel has (both None: e.g. hot-loop counts of
two loop-free kernels) is left out, one that only one has is outside the band with no percentage.
Every number of :func:`fidelity_table` is *static* (counted in the ISA), labelled so in the figure;
the speed rows are *modelled* (``label`` column, model fingerprint per row).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from . import metrics, paths, plots, toolchain, variants


class FidelityError(ValueError):
    """Bad input to the fidelity view; the message is meant for the user."""


@dataclasses.dataclass(frozen=True)
class Seed:
    """One upstream change our ladder decomposes."""

    family: str  # variants.KERNEL_MODULES key
    source: str  # "flydsl" | "aiter" (fingerprints.csv ``source``)
    stage: str  # fingerprints.csv ``stage``
    before: str  # upstream commit the change started from (full id)
    after: str  # the change's merge (full id)
    first: str  # our rung that should match ``before``
    band_pct: float
    pr: str

    def last(self) -> str:
        """Our rung that should match ``after``: the family's last ladder rung."""
        ladder = [n for n, v in variants.all_variants().items() if v.family == self.family and v.kind == "ladder"]
        if not ladder:
            raise FidelityError(f"kernel family {self.family!r} has no ladder")
        return ladder[-1]


FLYDSL_BEFORE = "daee90e485e7e872c54a2ebd147228219f0b367e"
FLYDSL_AFTER = "741f3d6d322182b451f7b48600385ec9a5415794"
AITER_BEFORE = "46ecc4489dfd9935c6877665eeae480f54d010b4"
AITER_AFTER = "b242ba66a610c02018daa55a5c9c9bdc33a5dabf"

#: The seeds. GEMM: our first rung is ``gemm-v1`` (AGPR accumulators, which FlyDSL had before PR
#: #990: they came with FlyDSL PR #756); ``gemm-v0`` is our own no-AGPR baseline, not upstream's.
SEEDS: dict[str, Seed] = {
    "gemm": Seed("gemm", "flydsl", "gemm", FLYDSL_BEFORE, FLYDSL_AFTER, "gemm-v1", 10.0, "FlyDSL PR #990"),
    "moe1": Seed("moe1", "aiter", "gemm1", AITER_BEFORE, AITER_AFTER, "moe1-v0", 15.0, "aiter PR #3828"),
    "moe2": Seed("moe2", "aiter", "gemm2", AITER_BEFORE, AITER_AFTER, "moe2-v0", 15.0, "aiter PR #3828"),
}

#: The figure's and the README block's default: one GEMM shape (the four PR #990 shapes give the same
#: fingerprints up to a few instructions, measured), every MoE regime.
FIGURE_CASES = {"gemm": "8192x8192x8192"}

COLUMNS = ("seed", "stage", "case", "pair", "metric", "upstream_commit", "upstream", "variant", "ours",
           "diff_pct", "band_pct", "within_band")

PAIRS = ("first~before", "last~after")


# ------------------------------------------------------------------------------------ inputs


def load_fingerprints(path: str | Path | None = None) -> pd.DataFrame:
    """The committed upstream fingerprints (``experiments/reference/fingerprints.csv``)."""
    path = Path(path) if path is not None else paths.reference_dir() / "fingerprints.csv"
    if not path.is_file():
        raise FidelityError(f"no upstream fingerprints at {path} (make them with `python -m "
                            "mxfp4_ablation.upstream fingerprints`, see experiments/reference/README.md).")
    df = pd.read_csv(path, dtype={"commit": str, "regime": str, "config": str, "note": str},
                     keep_default_na=False, na_values={"value": [""]})
    missing = {"source", "commit", "stage", "regime", "shape", "metric", "value"} - set(df.columns)
    if missing:
        raise FidelityError(f"{path} lacks the columns {', '.join(sorted(missing))}.")
    return df


def case_label(row: Mapping[str, Any]) -> str:
    """``"8192x8192x8192"`` for a GEMM row, ``"decode"``/``"prefill"`` for a MoE row."""
    if row.get("regime"):
        return str(row["regime"])
    return "x".join(v for _, v in _shape_items(str(row["shape"])))


def _shape_items(text: str) -> list[tuple[str, str]]:
    items = re.findall(r"(\w+)=(\d+)", text)
    if not items:
        raise FidelityError(f"unreadable shape {text!r} in the fingerprints table")
    return items


def our_shape(seed: Seed, shape_text: str) -> tuple[int, ...]:
    """Our kernel's shape tuple for an upstream row's shape: ``(M, N, K)`` for the GEMM,
    ``(tokens, experts, hidden, inter, topk, block_m)`` for the MoE."""
    got = dict(_shape_items(shape_text))
    names = ("M", "N", "K") if seed.family == "gemm" else ("tokens", "experts", "hidden", "inter", "topk", "BM")
    try:
        return tuple(int(got[n]) for n in names)
    except KeyError as err:
        raise FidelityError(f"shape {shape_text!r} has no {err.args[0]} for the {seed.family} seed") from None


def upstream_cases(df: pd.DataFrame, seed: Seed) -> dict[str, str]:
    """Case label -> upstream shape text, for the cases where both commits were fingerprinted."""
    rows = df[(df["source"] == seed.source) & (df["stage"] == seed.stage)]
    out = {}
    for (regime, shape), group in rows.groupby(["regime", "shape"], sort=False):
        if {seed.before, seed.after} <= set(group["commit"]):
            out[case_label({"regime": regime, "shape": shape})] = shape
    return out


def our_fingerprints(requests: Sequence[tuple[str, tuple[int, ...]]]) -> dict[tuple[str, tuple[int, ...]], dict]:
    """Compile ``(variant, shape)`` pairs (one toolchain worker for the cache misses) -> fingerprints."""
    vs = [(variants.get(name), shape) for name, shape in requests]
    arts = toolchain.compile_many([(v.target, v.params(tuple(shape))) for v, shape in vs])
    return {(name, tuple(shape)): metrics.fingerprint(art.isa) for (name, shape), art in zip(requests, arts)}


# ------------------------------------------------------------------------------------ comparing


def compare(upstream: Any, ours: Any, band_pct: float) -> tuple[float | None, bool] | None:
    """``(diff_pct, within_band)`` of one metric, or None when neither kernel has it."""
    up = None if upstream is None or (isinstance(upstream, float) and math.isnan(upstream)) else float(upstream)
    me = None if ours is None or (isinstance(ours, float) and math.isnan(ours)) else float(ours)
    if up is None and me is None:
        return None
    if up is None or me is None:
        return None, False
    if up == 0:
        pct = 0.0 if me == 0 else math.copysign(math.inf, me)
    else:
        pct = 100.0 * (me - up) / abs(up)
    return round(pct, 2), abs(pct) <= band_pct + 1e-9


def _plan(df: pd.DataFrame, seeds: Sequence[str] | None, cases: Sequence[str] | None = None,
          rungs: Mapping[str, tuple[str, str]] | None = None) -> list[tuple]:
    """``(seed name, Seed, case, shape text, first rung, last rung)`` per upstream case to compare."""
    names = list(seeds) if seeds is not None else list(SEEDS)
    unknown = [n for n in names if n not in SEEDS]
    if unknown:
        raise FidelityError(f"unknown seed(s) {', '.join(unknown)} (known: {', '.join(SEEDS)})")
    plan = []
    for name in names:
        seed = SEEDS[name]
        first, last = (rungs or {}).get(name, (seed.first, None))
        last = last or seed.last()
        for label, shape in upstream_cases(df, seed).items():
            if cases is None or label in cases:
                plan.append((name, seed, label, shape, first, last))
    if not plan:
        raise FidelityError("no upstream case to compare (the fingerprints table has no before+after pair "
                            f"for {', '.join(names)}{' at ' + ', '.join(cases) if cases else ''}).")
    return plan


def _requests(plan: Sequence[tuple]) -> list[tuple[str, tuple[int, ...]]]:
    return list(dict.fromkeys((variant, our_shape(seed, shape)) for _, seed, _, shape, first, last in plan
                              for variant in (first, last)))


def compile_requests(seeds: Sequence[str] | None = None, *, fingerprints: pd.DataFrame | str | Path | None = None
                     ) -> list[tuple[str, tuple[int, ...]]]:
    """The ``(variant, shape)`` pairs :func:`fidelity_table` compiles for ``seeds`` (the summary's work
    list runs them ahead, :mod:`mxfp4_ablation.studies.summary_work`)."""
    df = fingerprints if isinstance(fingerprints, pd.DataFrame) else load_fingerprints(fingerprints)
    return _requests(_plan(df, seeds))


def fidelity_table(seeds: Sequence[str] | None = None, *, fingerprints: pd.DataFrame | str | Path | None = None,
                   ours: Mapping[tuple[str, tuple[int, ...]], Mapping[str, Any]] | None = None,
                   cases: Sequence[str] | None = None, rungs: Mapping[str, tuple[str, str]] | None = None
                   ) -> pd.DataFrame:
    """Per seed and upstream case: our first rung vs upstream before, our last rung vs upstream
    after, every fingerprint metric (long table, :data:`COLUMNS`).

    ``fingerprints``: the upstream table (default: the committed CSV). ``ours``: precomputed
    fingerprints by ``(variant, shape tuple)``; missing ones are compiled. ``cases`` limits the
    case labels (e.g. ``["8192x8192x8192", "decode"]``); ``rungs`` overrides ``{seed: (first, last)}``.
    """
    df = fingerprints if isinstance(fingerprints, pd.DataFrame) else load_fingerprints(fingerprints)
    plan = _plan(df, seeds, cases, rungs)
    have = dict(ours or {})
    need = [key for key in _requests(plan) if key not in have]
    if need:
        have.update(our_fingerprints(need))
    rows = []
    for name, seed, label, shape, first, last in plan:
        for pair, commit, variant in (("first~before", seed.before, first), ("last~after", seed.after, last)):
            up = df[(df["source"] == seed.source) & (df["stage"] == seed.stage) & (df["shape"] == shape)
                     & (df["commit"] == commit)]
            up_values = dict(zip(up["metric"], up["value"]))
            mine = have[(variant, our_shape(seed, shape))]
            for metric in metrics.FINGERPRINT_KEYS:
                result = compare(up_values.get(metric), mine.get(metric), seed.band_pct)
                if result is None:
                    continue
                pct, inside = result
                rows.append({"seed": name, "stage": seed.stage, "case": label, "pair": pair, "metric": metric,
                             "upstream_commit": commit[:9], "upstream": _num(up_values.get(metric)),
                             "variant": variant, "ours": _num(mine.get(metric)), "diff_pct": pct,
                             "band_pct": seed.band_pct, "within_band": inside})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    return float(value)


def wide(table: pd.DataFrame, *, drop_both_zero: bool = True) -> pd.DataFrame:
    """One row per (seed, case, metric): ``before``, ``first`` (ours), ``first_pct``, ``first_in``,
    ``after``, ``last`` (ours), ``last_pct``, ``last_in`` -- the layout of a fidelity table in prose.
    ``drop_both_zero`` leaves out metrics that are 0 on all four kernels."""
    rows = []
    for (seed, case), group in table.groupby(["seed", "case"], sort=False):
        by_pair = {pair: group[group["pair"] == pair].set_index("metric") for pair in PAIRS}
        first = by_pair["first~before"]
        last = by_pair["last~after"]
        for metric in dict.fromkeys(list(first.index) + list(last.index)):
            row: dict[str, Any] = {"seed": seed, "case": case, "metric": metric}
            for pair, (up, ours) in zip(PAIRS, (("before", "first"), ("after", "last"))):
                part = by_pair[pair]
                have = metric in part.index
                row[up] = part.at[metric, "upstream"] if have else math.nan
                row[ours] = part.at[metric, "ours"] if have else math.nan
                row[f"{ours}_pct"] = part.at[metric, "diff_pct"] if have else math.nan
                row[f"{ours}_in"] = bool(part.at[metric, "within_band"]) if have else None
            values = [row[k] for k in ("before", "first", "after", "last")]
            if drop_both_zero and all(v == 0 for v in values):
                continue
            rows.append(row)
    out = pd.DataFrame(rows)
    if not out.empty:
        variants_used = table.groupby("pair")["variant"].first().to_dict()
        out.attrs["first"], out.attrs["last"] = variants_used.get("first~before"), variants_used.get("last~after")
    return out


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, case, pair): ``metrics`` compared (leaving out those 0 on both kernels, which
    match trivially), how many are ``within_band``, and the ``outside`` ones by name."""
    out = []
    for (seed, case, pair), group in table.groupby(["seed", "case", "pair"], sort=False):
        both_zero = (group["upstream"] == 0) & (group["ours"] == 0)
        informative = group[~both_zero]
        outside = informative[~informative["within_band"].astype(bool)]
        out.append({"seed": seed, "case": case, "pair": pair, "variant": group["variant"].iloc[0],
                    "upstream_commit": group["upstream_commit"].iloc[0], "metrics": len(informative),
                    "within_band": int(informative["within_band"].astype(bool).sum()),
                    "outside": ", ".join(outside["metric"])})
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame, *, cases: Mapping[str, str] | None = FIGURE_CASES) -> str:
    """The fidelity summary as a markdown table (the README's generated block): per seed, case and pair,
    how many informative metrics are within the band and, for the others, ours vs upstream.

    ``cases`` picks one case per seed as :func:`plot_fidelity` does; the other cases of that seed are
    summed up in one sentence (their in-band counts)."""
    if table.empty:
        raise FidelityError("the fidelity table is empty")
    summ = summary(table)
    keep = summ.apply(lambda r: cases is None or cases.get(r["seed"], r["case"]) == r["case"], axis=1)
    lines = ["| seed | case | ours ~ upstream | within band | outside: ours vs upstream (difference) |",
             "|---|---|---|---:|---|"]
    for row in summ[keep].itertuples():
        sub = table[(table["seed"] == row.seed) & (table["case"] == row.case) & (table["pair"] == row.pair)]
        out = sub[~sub["within_band"].astype(bool) & ~((sub["upstream"] == 0) & (sub["ours"] == 0))]
        cells = [f"{m} {_fmt(o)} vs {_fmt(u)} ({_pct(d)})"
                 for m, o, u, d in zip(out["metric"], out["ours"], out["upstream"], out["diff_pct"])]
        band = f"{row.within_band} / {row.metrics} (band {_fmt(sub['band_pct'].iloc[0])} %)"
        lines.append(f"| {row.seed} | {row.case} | {row.variant} ~ {row.upstream_commit[:8]} | {band} | "
                     f"{'; '.join(cells) or '–'} |")
    rest = summ[~keep]
    if len(rest):
        other = "; ".join(f"{r.seed} {r.case} {r.pair} {r.within_band}/{r.metrics}" for r in rest.itertuples())
        lines += ["", f"Also compared (in band / metrics): {other}."]
    lines += ["", "Static counts of the offline gfx950 compiles (ours at the upstream shapes; upstream from "
              "`experiments/reference/fingerprints.csv`), per case our first rung against the seed's before kernel, "
              "then our last rung against its after; for each metric outside the band the kernel module's "
              "docstring says why it differs, measured, or that it is not explained yet. Generated by "
              "`python -m mxfp4_ablation.studies readme-table`."]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ speed (modelled)

#: Speed rows: the timing model on ours and upstream, same model, same sample (GEMM: 1 workgroup).
SPEED_BAND_PCT = 3.0
SPEED_REASONS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other")
SPEED_SHAPES = {"gemm": ((8192, 8192, 8192),)}
#: upstream kernel per (seed, pair): the FlyDSL commit whose ISA ``modelled.flydsl_upstream`` reads
SPEED_UPSTREAM = {("gemm", "first~before"): "daee90e4", ("gemm", "last~after"): "741f3d6d"}


def _speed_metrics(r: Mapping[str, Any]) -> dict[str, float]:
    k = r["kernel"]
    out = {"modelled_tflops": float(k["tflops"]), "modelled_us": float(k["us"]),
           "cycles_per_mfma_loop": float(r["cycles_per_mfma_loop"]) if r.get("cycles_per_mfma_loop") else math.nan,
           "mfma_busy": float(r["mfma_busy"][0]) if r.get("mfma_busy") else math.nan,
           "compute_cycles": float(k["compute_cycles"])}
    for reason in SPEED_REASONS:
        out[f"exposed_{reason}"] = float((r.get("exposed") or {}).get(reason, 0))
    return out


def speed_table(upstream_out: str | Path, seeds: Sequence[str] = ("gemm",), *, sample: int = 1,
                shapes: Mapping[str, Sequence[tuple[int, ...]]] | None = None,
                model=None, upstream=None) -> pd.DataFrame:
    """Modelled speed of our first / last rung beside the seed's before / after kernel, same model,
    same sample: ``modelled_tflops``, ``cycles_per_mfma_loop`` (hot-loop cycles per MFMA), ``mfma_busy``
    and the exposed cycles per SIMD by reason (``exposed_*``: where the two kernels' cycles differ).
    Long table, :data:`COLUMNS` plus ``label`` ("modelled") and ``model_fingerprint``; the band
    (:data:`SPEED_BAND_PCT`) applies to TFLOPS and cycles per MFMA, the exposed rows are the diff.
    Only the GEMM seed: its upstream ISA is read from ``<upstream_out>/flydsl/<commit8>/`` (the
    aiter MoE kernels need argument builders this module does not have yet).

    ``model`` / ``upstream`` replace :func:`mxfp4_ablation.modelled.model` and
    :func:`~mxfp4_ablation.modelled.flydsl_upstream` (tests)."""
    from . import modelled

    model = model or modelled.model
    upstream = upstream or modelled.flydsl_upstream
    rows = []
    for name in seeds:
        if name not in SEEDS:
            raise FidelityError(f"unknown seed {name!r} (known: {', '.join(SEEDS)})")
        if name not in SPEED_SHAPES:
            raise FidelityError(f"no modelled speed rows for seed {name!r} yet (only: {', '.join(SPEED_SHAPES)})")
        seed = SEEDS[name]
        for shape in (shapes or SPEED_SHAPES)[name]:
            for pair, variant, commit in (("first~before", seed.first, seed.before),
                                          ("last~after", seed.last(), seed.after)):
                ours = model(variant, tuple(shape), sample=sample)
                up = upstream(upstream_out, SPEED_UPSTREAM[(name, pair)], *shape, sample=sample)
                mo, mu = _speed_metrics(ours), _speed_metrics(up)
                for metric in mo:
                    banded = metric in ("modelled_tflops", "cycles_per_mfma_loop")
                    result = compare(mu[metric], mo[metric], SPEED_BAND_PCT if banded else math.inf)
                    pct, inside = result if result is not None else (None, False)
                    rows.append({"seed": name, "stage": seed.stage, "case": "x".join(map(str, shape)), "pair": pair,
                                 "metric": metric, "upstream_commit": commit[:9], "upstream": mu[metric],
                                 "variant": variant, "ours": mo[metric], "diff_pct": pct,
                                 "band_pct": SPEED_BAND_PCT if banded else math.nan,
                                 "within_band": bool(inside) if banded else None, "label": "modelled",
                                 "model_fingerprint": ours.get("model_fingerprint")})
    return pd.DataFrame(rows, columns=list(COLUMNS) + ["label", "model_fingerprint"])


def speed_markdown(speed: pd.DataFrame) -> str:
    """The speed rows as a markdown table: per pair TFLOPS, cycles per MFMA and the exposed cycles that
    differ most (modelled)."""
    if speed.empty:
        raise FidelityError("the speed table is empty")
    lines = ["| seed | case | ours ~ upstream | TFLOPS (modelled) | cycles / MFMA | largest exposed-cycle differences |",
             "|---|---|---|---:|---:|---|"]
    for (seed, case, pair), g in speed.groupby(["seed", "case", "pair"], sort=False):
        m = g.set_index("metric")
        exp = m[m.index.str.startswith("exposed_")].copy()
        exp["d"] = exp["ours"] - exp["upstream"]
        top = exp.reindex(exp["d"].abs().sort_values(ascending=False).index).head(3)
        cells = "; ".join(f"{i[8:]} {o:.0f} vs {u:.0f}" for i, o, u in zip(top.index, top["ours"], top["upstream"]))
        t, c = m.loc["modelled_tflops"], m.loc["cycles_per_mfma_loop"]
        lines.append(f"| {seed} | {case} | {g['variant'].iloc[0]} ~ {g['upstream_commit'].iloc[0][:8]} | "
                     f"{t['ours']:.0f} vs {t['upstream']:.0f} ({_pct(t['diff_pct'])}) | "
                     f"{c['ours']:.2f} vs {c['upstream']:.2f} ({_pct(c['diff_pct'])}) | {cells} |")
    lines += ["", f"Modelled (gfx950emu.timing, model {speed['model_fingerprint'].iloc[0]}, one workgroup sampled), "
              f"ours and upstream in the same model; band {SPEED_BAND_PCT:g} % on TFLOPS and cycles per MFMA; "
              "exposed cycles are per SIMD over the sampled workgroup."]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return str(int(v)) if float(v).is_integer() else f"{float(v):.3g}"


def _pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "only one has it"
    if math.isinf(v):
        return "upstream 0"
    return f"{v:+.0f} %"


# ------------------------------------------------------------------------------------ figure




def plot_fidelity(table: pd.DataFrame, *, cases: Mapping[str, str] | None = FIGURE_CASES, clip_pct: float = 100.0):
    """One panel per (seed, case): each metric's % difference, first~before and last~after,
    clipped to +-``clip_pct`` (clipped ones drawn as triangles at the edge), the band shaded.

    ``cases`` picks one case per seed (seeds not named: every case; None: every case of every
    seed). Returns the figure
    (deterministic under :data:`mxfp4_ablation.plots.STYLE`; save it with ``plots.savefig``)."""
    import matplotlib.pyplot as plt

    if table.empty:
        raise FidelityError("the fidelity table is empty: nothing to plot")
    panels = [(s, c) for s, c in dict.fromkeys(zip(table["seed"], table["case"]))
              if cases is None or cases.get(s, c) == c]
    if not panels:
        raise FidelityError(f"no (seed, case) of the table matches {dict(cases or {})}")
    names = [m for m in metrics.FINGERPRINT_KEYS if m in set(table["metric"])]
    colours = {"first~before": "#2166ac", "last~after": "#b2182b"}
    with plt.rc_context(plots.STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(max(5.6, 2.6 * len(panels) + 1.6), 0.17 * len(names) + 1.6),
                                 sharey=True, squeeze=False)
        for ax, (seed, case) in zip(axes[0], panels):
            sub = table[(table["seed"] == seed) & (table["case"] == case)]
            band = float(sub["band_pct"].iloc[0])
            ax.axvspan(-band, band, color="#dddddd", zorder=0)
            ax.axvline(0, color="#777777", lw=0.6)
            for n, pair in enumerate(PAIRS):
                part = sub[sub["pair"] == pair].set_index("metric")
                ys, xs, edge_y, edge_x = [], [], [], []
                for y, metric in enumerate(names):
                    if metric not in part.index:
                        continue
                    pct = part.at[metric, "diff_pct"]
                    if pct is None or (isinstance(pct, float) and math.isnan(pct)):
                        continue
                    offset = y + (n - 0.5) * 0.3
                    if abs(pct) > clip_pct:
                        edge_y.append(offset)
                        edge_x.append(math.copysign(clip_pct, pct))
                    else:
                        ys.append(offset)
                        xs.append(pct)
                label = f"{part['variant'].iloc[0]} vs {part['upstream_commit'].iloc[0][:8]}" if len(part) else pair
                ax.scatter(xs, ys, s=10, color=colours[pair], label=label, zorder=3)
                for sign, marker in ((1, ">"), (-1, "<")):
                    pts = [(x, y) for x, y in zip(edge_x, edge_y) if math.copysign(1, x) == sign]
                    ax.scatter([x for x, _ in pts], [y for _, y in pts], s=14, marker=marker, color=colours[pair],
                               zorder=3)
            ax.set_xlim(-clip_pct * 1.05, clip_pct * 1.05)
            ax.set_title(f"{seed} {case}", fontsize=8, loc="left")
            ax.set_xlabel("ours vs upstream, %")
            ax.legend(fontsize=6, loc="lower right")
        axes[0][0].set_yticks(range(len(names)))
        axes[0][0].set_yticklabels(names, fontsize=6)
        axes[0][0].invert_yaxis()
        height = fig.get_figheight()
        fig.text(0.01, 1 - 0.05 / height, "Fidelity: our first / last rung vs the seed's before / after kernel, "
                 "metric by metric", ha="left", va="top", fontsize=9)
        text, colour = plots.SOURCES["static"]
        fig.text(0.995, 1 - 0.25 / height, f"{text}: offline gfx950 compiles; band shaded", ha="right", va="top",
                 fontsize=7, color=colour, fontweight="bold")
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.42 / height))
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mxfp4_ablation.fidelity [seed ...]``: print the summary and the :func:`wide` table."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    up_out = None
    if "--upstream-out" in args:  # add the modelled speed rows (needs the compiled upstream ISA)
        i = args.index("--upstream-out")
        if i + 1 >= len(args):
            print("error: --upstream-out needs a folder", file=sys.stderr)
            return 2
        up_out = args[i + 1]
        del args[i:i + 2]
        if not Path(up_out).is_dir():
            print(f"error: --upstream-out {up_out} is not a folder", file=sys.stderr)
            return 2
    try:
        table = fidelity_table(args or None)
        speed = speed_table(up_out, [a for a in (args or ["gemm"]) if a in SPEED_SHAPES]) if up_out else None
    except (FidelityError, toolchain.ToolchainError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    with pd.option_context("display.width", 200, "display.max_rows", 2000, "display.max_colwidth", 120):
        print(summary(table).to_string(index=False))
        print()
        print(wide(table).to_string(index=False))
        if speed is not None and len(speed):
            print()
            print(speed_markdown(speed))
            print()
            print(speed.drop(columns=["stage", "band_pct"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
