"""The modelled section's figures, drawn from stored tables alone (no FlyDSL, no compiling).

Per step (from the step run's ``modelled_*.parquet``): :func:`draw_step_delta` (step vs predecessor,
modelled TFLOPS per shape with the stored interval) and :func:`draw_step_cycles` (where the cycles go,
and each kernel's timeline; for a kernel without a hot loop the window where its ISA differs from its
predecessor's: :func:`diff_windows`). The summary's (from ``<run>/modelled-<study>/``):
:func:`draw_waterfall`, :func:`draw_loo`, :func:`draw_moe_ratios`. :func:`register` puts a study's into
the registry of :mod:`mxfp4_ablation.figures` (its configuration module calls it).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import pandas as pd

from .. import plots, results
from . import views
from .modelled_tables import _seed_first_rung, model_detail

GREEN, RED = "#1b7837", "#b2182b"
REASON_COLOURS = {"mfma busy": "#332288", "vmcnt": "#88CCEE", "lgkmcnt": "#44AA99", "barrier": "#882255",
                  "dependency": "#CC6677", "issue": "#DDCC77", "lds_bank": "#117733", "other": "#DDDDDD"}
# (colour-blind safe: Paul Tol's muted palette, plots.CATEGORICAL)


def _read(run_dir: Path, name: str) -> pd.DataFrame:
    return results.read_table(Path(run_dir) / f"{name}.parquet")[0]


def draw_step_delta(run_dir: Path):
    """Step vs predecessor, modelled TFLOPS per shape (one panel each, every axis from 0), with the delta
    and the interval the delta table stores."""
    import matplotlib.pyplot as plt

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
        head = views.shape_tick(r.shape)
        if has_base:
            lo, hi = getattr(r, "delta_low", float("nan")), getattr(r, "delta_high", float("nan"))
            head += "\n" + _interval_text(float(r.delta_pct), float(lo), float(hi)) + " %"
        ax.set_title(head, loc="left", fontsize=7)
    axes[0][0].set_ylabel("TFLOPS (modelled)", fontsize=8)
    title = f"{variant}" + (f" vs {base}" if has_base else "") + ": modelled TFLOPS per shape"
    fig.suptitle(title, x=0.01, ha="left", fontsize=9)
    text, colour = plots.SOURCES["modelled"]
    note = f"{text}: {model_detail(d)}" + (f"; delta vs {base}, interval: {views.interval_label(d)}" if has_base else "")
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
    iv_label = views.interval_label(deltas) if len(deltas) else "no interval stored"
    iv = {(r.variant, r.shape): (float(r.delta_low), float(r.delta_high)) for r in deltas.itertuples()}
    shapes = list(dict.fromkeys(wf["shape"]))
    seed_first = _seed_first_rung(Path(run_dir).name.removeprefix("modelled-"))  # modelled-<study>/
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
    fig.suptitle(f"MoE ladders: last / first rung time per token count\n({text}: {model_detail(r)}; orange: "
                 "published)", x=0.01, ha="left", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


#: The summary's modelled figures (``<study>/<name>``), each drawn from ``<run>/modelled-<study>/``.
SUMMARY_DRAWERS = {"modelled_leave_one_out": draw_loo, "modelled_waterfall": draw_waterfall,
                   "modelled_ratios": draw_moe_ratios}


def register(view, figures_: Sequence[str], summary_run: str) -> None:
    """Register the per-step ``<study>/<slug>_speed_delta`` / ``_speed_cycles`` figures of every step
    notebook of ``view`` and the summary's ``figures_`` (names in :data:`SUMMARY_DRAWERS`)."""
    from ..figures import figure

    for slug in views.step_slugs(view.name):
        run = f"{view.name}--{slug}"
        figure(f"{view.name}/{slug}_speed_delta", run=run)(draw_step_delta)
        figure(f"{view.name}/{slug}_speed_cycles", run=run)(draw_step_cycles)
    for name in figures_:
        figure(f"{view.name}/{name}", run=summary_run)(functools.partial(_summary_figure, view.name,
                                                                         SUMMARY_DRAWERS[name]))


def _summary_figure(study: str, draw, run_dir: Path):
    """The summary run keeps each study's modelled tables in ``modelled-<study>/``."""
    return draw(Path(run_dir) / f"modelled-{study}")
