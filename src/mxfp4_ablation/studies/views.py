"""The study's figures, drawn from a run folder's stored tables alone (no FlyDSL, no compiling).

A family's :class:`View` names what differs in its pictures (the published and measured drawers, a few
titles); the drawers here are shared. :func:`register` puts a view's figures into the one registry of
:mod:`mxfp4_ablation.figures`: the summary figures, and per step notebook found under
``notebooks/<study>/`` (``NN_<slug>.py``) its ``<study>/NN_<slug>_isa_diff`` (not for a baseline) and
``<study>/NN_<slug>_speed``. Steps come from the notebook files, not from the kernel registry, so
``make figures`` never imports a kernel module.

A step's ``_speed`` figure shows that step alone: measured where its run timed it, else its *modelled*
change vs its predecessor per shape with the interval the run stored (``modelled_delta.parquet``:
``delta_low .. delta_high``, labelled by :func:`interval_label`). No step has a published number of its
own (the seeds publish their whole PR's before / after: the summary's published figure), and the figure
says so. A metric missing on either side of a change (``– → –``) is drawn as "n/a", never as a bar.
Every figure passes :func:`mxfp4_ablation.plots.layout_problems` (``tests/test_figure_layout.py``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from .. import paths, plots, results
from . import tables
from .tables import fmt

GREEN, RED, GREY = "#1b7837", "#b2182b", "#7570b3"
REGIME_COLOURS = ("#5e3c99", "#e66101", "#1b7837", "#2166ac")


@dataclass(frozen=True)
class View:
    name: str  # the study's name: figure group, notebook folder, run-name prefix
    title: str  # "MXFP4 GEMM ladder" ...
    key_metrics: tuple  # (metric, label) for the ladder figure
    draw_published: Callable  # (ax, published table, kernel label | None) -> None
    draw_measured: Callable  # (ax, measured table) -> None
    measured_table: str  # the step run's measured table ("tflops.parquet" / "ratio.parquet")
    published_title: str  # the summary's published figure's title
    published_figure: str  # its name: "published_tflops" / "published_ratios"
    loo_title: str
    short: Callable[[str], str] = lambda name: name  # a variant's tick label
    summary_prefix: str = ""  # the summary run's table names
    label_of: Callable[[pd.DataFrame], str | None] = lambda metrics: None  # a step's kernel label
    summary_figures: tuple = field(default=("ladder_metrics", "leave_one_out"))
    published_note: str = "the seed publishes its whole PR's before / after only"


def read(run_dir: Path, table: str) -> pd.DataFrame:
    return results.read_table(Path(run_dir) / table)[0]


def shapes_detail(df: pd.DataFrame) -> str:
    """``offline gfx950 compile, M,N,K = 8192x8192x8192`` (or ``decode: ...; prefill: ...``)."""
    if not len(df) or "shape" not in df.columns:
        return "offline gfx950 compile"
    if "regime" not in df.columns:
        return f"offline gfx950 compile, M,N,K = {df['shape'].iloc[0]}"
    shapes = df.drop_duplicates("regime").set_index("regime")["shape"]
    return "offline gfx950 compile, " + "; ".join(f"{r}: {s}" for r, s in shapes.items())


def _badge(fig, y: float, source: str, detail: str) -> None:
    badge = fig.add_axes((0.0, y, 0.99, 0.01))
    badge.axis("off")
    plots.source_badge(badge, source, detail)


def change_or_none(before, after) -> float | None:
    """The % change ``before`` -> ``after``, or None when either side is missing (drawn as "n/a", never
    as a +-100 % bar)."""
    if tables.is_missing(before) or tables.is_missing(after):
        return None
    return tables.relative(float(before), float(after))


def draw_changes(ax, rel: list, labels: list, colours: list, notes: list, lim_scale: float = 2.2) -> str:
    """Horizontal bars of % changes, each with its ``before → after`` note; a change of None (a side
    missing) is no bar but an "n/a" note. Returns what to add to the axis label ("" or the scale used)."""
    y = list(range(len(rel)))
    ax.barh(y, [0.0 if v is None else v for v in rel], color=colours)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_ylim(len(rel) - 0.4, -0.6)
    ax.tick_params(axis="x", labelsize=7)
    for yi, x, note in zip(y, rel, notes):
        if x is None:
            ax.text(0, yi, f" n/a: {note} (missing) ", va="center", ha="left", fontsize=7, color="#4d4d4d")
        else:
            ax.text(x, yi, f" {note} ", va="center", ha="left" if x >= 0 else "right", fontsize=7)
    vals = [v for v in rel if v is not None]
    lo, hi = min(vals + [0.0]), max(vals + [0.0])
    small = sorted(abs(v) for v in vals if v)
    if small and max(small) > 300 and max(small) > 20 * small[len(small) // 2]:
        # one change dwarfs the rest (e.g. 2 -> 64 = +3100 %): a symmetric-log axis keeps the others visible
        ax.set_xscale("symlog", linthresh=10.0)
        ax.set_xlim(lo * 60 if lo < 0 else -5.0, hi * 60 if hi > 0 else 5.0)
        return "; symmetric-log axis (linear within ±10 %)"
    span = max(hi - lo, 1.0)
    # room for the notes on the side each bar points to (and for an "n/a" note right of 0)
    ax.set_xlim(lo - (span * (lim_scale - 1) if lo < 0 else span * 0.1),
                hi + (span * (lim_scale - 1) if hi > 0 or len(vals) < len(rel) else span * 0.1))
    return ""


# ============================================================================ per step


def draw_step_isa_diff(view: View, run_dir: Path):
    """Per regime: every metric that moved from the baseline to the step, and every metric the switch
    is meant to move (green: as intended, red: not -- judged on the expectation table's numbers)."""
    import matplotlib.pyplot as plt

    diff = read(run_dir, "isa_diff.parquet")
    metrics = read(run_dir, "metrics.parquet")
    exp_path = Path(run_dir) / "expectations.parquet"
    exp = read(run_dir, "expectations.parquet") if exp_path.is_file() else pd.DataFrame(columns=["metric"])
    variant = metrics.loc[metrics["role"] == "variant", "variant"].iloc[0]
    baseline = metrics.loc[metrics["role"] == "baseline", "variant"].iloc[0]
    regimes = tables.regimes_of(diff)
    panels = []
    for regime in regimes:
        sub = tables.per_regime(diff, regime)
        e = tables.per_regime(exp, regime) if len(exp) else exp
        intended = {r.metric: tables.moved(r.before, r.after, r.direction) for r in e.itertuples()}
        moved = tables.changed_metrics(sub, intended).sort_values("metric").reset_index(drop=True)
        panels.append((regime, moved, intended))
    n = max([len(m) for _, m, _ in panels] + [1])
    height = max(1.8, 0.26 * n + 1.3)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 if len(panels) == 1 else 8.8, height), squeeze=False)
    for ax, (regime, moved, intended) in zip(axes[0], panels):
        scale = ""
        if moved.empty:
            ax.text(0.5, 0.5, "no metric changed", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        else:
            rel = [change_or_none(r.baseline, r.variant) for r in moved.itertuples()]
            colours = [GREY if m not in intended else GREEN if intended[m] else RED for m in moved["metric"]]
            labels = [f"{m}{' *' if m in intended else ''}" for m in moved["metric"]]
            notes = [f"{fmt(r.baseline)} → {fmt(r.variant)}" for r in moved.itertuples()]
            scale = draw_changes(ax, rel, labels, colours, notes)
        if regime is not None:
            ax.set_title(regime, loc="left", fontsize=8)
        ax.set_xlabel(f"change from {baseline} (%); * = intended{scale}", fontsize=7)
    fig.text(0.01, 1 - 0.05 / height, f"{variant} vs {baseline}: ISA metrics (green = intended move, red = not)",
             ha="left", va="top", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.48 / height))
    _badge(fig, 1 - 0.42 / height, "static", shapes_detail(metrics))  # below the title (a long one reaches it)
    return fig


def _modelled(run_dir: Path) -> pd.DataFrame:
    """The step's modelled rows (``speed.parquet``), empty when the run has none."""
    path = Path(run_dir) / "speed.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=["variant", "kind", "shape", "metric", "value", "detail", "available"])
    speed = read(run_dir, "speed.parquet")
    return speed[speed["kind"] == "modelled"]


def step_modelled_deltas(run_dir: Path) -> pd.DataFrame:
    """The step's modelled change vs its predecessor per shape: ``shape, baseline_tflops, tflops,
    delta_pct, low, high, interval, detail`` (``low``/``high``: the interval the run stored with the delta
    in ``modelled_delta.parquet``, NaN where the run stored none). Empty when the run has no modelled rows."""
    run_dir = Path(run_dir)
    cols = ["shape", "baseline_tflops", "tflops", "delta_pct", "low", "high", "interval", "detail"]
    stored = run_dir / "modelled_delta.parquet"
    if stored.is_file():
        d = read(run_dir, "modelled_delta.parquet")
        rows = []
        for r in d.itertuples():
            low, high = getattr(r, "delta_low", float("nan")), getattr(r, "delta_high", float("nan"))
            rows.append({"shape": r.shape, "baseline_tflops": r.baseline_tflops, "tflops": r.tflops,
                         "delta_pct": r.delta_pct, "low": low, "high": high, "interval": interval_label(d),
                         "detail": f"model {r.model_version}, {float(r.clock_ghz):g} GHz"})
        return pd.DataFrame(rows, columns=cols)
    m = _modelled(run_dir)
    ok = m[m["available"] & (m["metric"] == "tflops")] if len(m) else m
    if not len(ok):
        return pd.DataFrame(columns=cols)
    base = ok["baseline"].dropna().iloc[0] if ok["baseline"].notna().any() else None
    variant = next((v for v in dict.fromkeys(ok["variant"]) if v != base), base)
    rows = []
    for shape in dict.fromkeys(ok["shape"]):
        sub = ok[ok["shape"] == shape].set_index("variant")["value"]
        t = float(sub.get(variant, float("nan")))
        b = float(sub.get(base, float("nan"))) if base else float("nan")
        rows.append({"shape": shape, "baseline_tflops": b, "tflops": t,
                     "delta_pct": 100.0 * (t / b - 1.0) if b == b and b else float("nan"), "low": float("nan"),
                     "high": float("nan"), "interval": "no interval stored in this run",
                     "detail": str(ok["detail"].iloc[0])})
    return pd.DataFrame(rows, columns=cols)


def interval_label(d: pd.DataFrame) -> str:
    """What the stored ``delta_low .. delta_high`` of a modelled-delta table is, in words."""
    if "interval" in d.columns and d["interval"].notna().any():  # a table that names its own interval
        return str(d["interval"].dropna().iloc[0])
    if not {"delta_low", "delta_high"} <= set(d.columns) or not d["delta_low"].notna().any():
        return "no interval stored in this run"
    if "band_pp" in d.columns and d["band_pp"].notna().any():
        half = (d["delta_high"] - d["delta_pct"]).dropna().round(2)
        band = d["band_pp"].dropna().round(2)
        if len(half) and len(set(half)) == 1 and len(set(band)) == 1 and float(half.iloc[0]) == float(band.iloc[0]):
            return f"the model's error band, +-{float(band.iloc[0]):.2f} pp (same for every step)"
    return "per-step interval stored with the delta"


def draw_step_modelled_delta(ax, d: pd.DataFrame, variant: str, baseline: str | None, switch: str = "") -> None:
    """One bar per shape: the step's modelled % change vs its predecessor (from 0), with the stored
    interval as an error bar; a first rung (no predecessor) shows its modelled TFLOPS instead."""
    xs = list(range(len(d)))
    if baseline:
        missing = [not (float(v) == float(v)) for v in d["delta_pct"]]  # a side not modelled: n/a, no bar
        vals = [0.0 if m else float(v) for v, m in zip(d["delta_pct"], missing)]
        lo = [v - float(l) if l == l and not m else 0.0 for v, l, m in zip(vals, d["low"], missing)]
        hi = [float(h) - v if h == h and not m else 0.0 for v, h, m in zip(vals, d["high"], missing)]
        has_iv = any(l == l for l in d["low"])
        ax.bar(xs, vals, 0.55, color=[GREEN if v >= 0 else RED for v in vals],
               yerr=[lo, hi] if has_iv else None, capsize=4, ecolor="#333333", error_kw={"linewidth": 0.9})
        ax.axhline(0, color="black", linewidth=0.8)
        tops, bottoms = [v + b for v, b in zip(vals, hi)], [v - a for v, a in zip(vals, lo)]
        span = max(max(tops + [0.0]) - min(bottoms + [0.0]), 1.0)
        for x, v, t, b, m in zip(xs, vals, tops, bottoms, missing):
            txt = "n/a (not modelled)" if m else f"{v:+.2f} %" + (f"\n[{b:+.1f}, {t:+.1f}]" if has_iv else "")
            # above the upper whisker for a gain, below the lower one for a loss
            ax.text(x, t + 0.04 * span if v >= 0 else b - 0.04 * span, txt, ha="center",
                    va="bottom" if v >= 0 else "top", fontsize=7)
        ax.set_ylim(min(bottoms + [0.0]) - (0.45 if min(vals) < 0 else 0.08) * span,
                    max(tops + [0.0]) + (0.45 if max(vals) >= 0 else 0.08) * span)
        ax.set_ylabel(f"% change vs {baseline}\n(modelled)", fontsize=8)
        ax.set_title(f"{variant}{f' ({switch})' if switch else ''} vs {baseline}: modelled change per shape"
                     + ("" if has_iv else " (no interval stored)"), loc="left", pad=16, fontsize=9)
    else:
        vals = [float(v) for v in d["tflops"]]
        ax.bar(xs, vals, 0.55, color="#4d4d4d")
        for x, v in zip(xs, vals):
            ax.text(x, v, f"{v:.0f}" if v >= 100 else f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, max(vals + [1.0]) * 1.2)
        ax.set_ylabel("TFLOPS (modelled)", fontsize=8)
        ax.set_title(f"{variant}: first rung, modelled TFLOPS per shape (no predecessor)", loc="left", pad=16,
                     fontsize=9)
    ax.set_xticks(xs, [shape_tick(s) for s in d["shape"]], fontsize=7)
    ax.set_xlim(-0.6, len(d) - 0.4)
    plots.source_badge(ax, "modelled", d["detail"].iloc[0] if len(d) else "")


def shape_tick(shape: str) -> str:
    """A shape as a tick label: long MoE shapes (6 numbers) on two lines."""
    parts = str(shape).split("x")
    return "x".join(parts[:3]) + "\nx" + "x".join(parts[3:]) if len(parts) > 4 else str(shape)


def draw_step_speed(view: View, run_dir: Path):
    """The step's own speed: measured where the run timed it; else the step's *modelled* change vs its
    predecessor per shape with the stored interval. No step has a published number of its own (the
    seeds publish their whole PR's before / after: the summary's published figure), so none is drawn
    here; the figure says so."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    metrics = read(run_dir, "metrics.parquet")
    variant = metrics.loc[metrics["role"] == "variant", "variant"].iloc[0] if "role" in metrics.columns else ""
    baseline = None
    if "role" in metrics.columns and (metrics["role"] == "baseline").any():
        baseline = metrics.loc[metrics["role"] == "baseline", "variant"].iloc[0]
    fig, ax = plt.subplots(figsize=(7.2, 3.4))
    notes = []
    if (run_dir / view.measured_table).is_file():
        view.draw_measured(ax, read(run_dir, view.measured_table))
        ax.set_title(f"{variant}: speed, measured", loc="left", pad=16)
    else:
        d = step_modelled_deltas(run_dir)
        if baseline == variant:
            baseline = None
        if len(d):
            switch = ""
            if "switch" in metrics.columns:
                sw = metrics.loc[(metrics["variant"] == variant) & metrics["switch"].notna(), "switch"]
                switch = str(sw.iloc[0]) if len(sw) and str(sw.iloc[0]) else ""
            draw_step_modelled_delta(ax, d, variant, baseline, switch)
            if baseline and d["low"].notna().any():
                notes.append(f"Error bars: {d['interval'].iloc[0]}.")
        else:
            ax.axis("off")
            ax.text(0.5, 0.6, f"{variant}: not timed here (no MI355X) and not modelled in this run",
                    ha="center", va="center", fontsize=9, transform=ax.transAxes)
            plots.source_badge(ax, "static", "no speed data in this run")
    fig.text(0.01, 0.015, f"Published: no figure for this step alone ({view.published_note}; see "
             f"{view.name}/{view.published_figure}).", fontsize=7, color=plots.SOURCES["published"][1])
    if notes:
        fig.text(0.01, 0.065, " ".join(notes), fontsize=7, color="#4d4d4d")
    fig.tight_layout(rect=(0, 0.11 if notes else 0.06, 1, 1))
    return fig


# ============================================================================ the summary


def draw_ladder_metrics(view: View, run_dir: Path):
    """Small multiples: each key static metric along the ladder(s), regimes side by side."""
    import matplotlib.pyplot as plt

    metrics = read(run_dir, f"{view.summary_prefix}ladder.parquet")
    ladder = metrics[metrics["kind"] == "ladder"]
    steps = list(dict.fromkeys(ladder["variant"]))
    regimes = tables.regimes_of(ladder)
    keys = [(k, label) for k, label in view.key_metrics if k in set(ladder["metric"])]
    cols = 4
    rows = -(-len(keys) // cols)
    height = 2.1 * rows + 0.7
    fig, axes = plt.subplots(rows, cols, figsize=(10.0, height), squeeze=False)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.1, top=1 - 0.8 / height, hspace=0.6, wspace=0.3)
    width = 0.8 / len(regimes)
    missing = False
    for ax, (key, label) in zip(axes.flat, keys):
        for i, regime in enumerate(regimes):
            sub = tables.per_regime(ladder, regime)
            vals = sub[sub["metric"] == key].set_index("variant")["value"].reindex(steps).astype(float)
            xs = [x + (i - (len(regimes) - 1) / 2) * width for x in range(len(steps))]
            ax.bar(xs, vals.fillna(0), width, color=REGIME_COLOURS[i % len(REGIME_COLOURS)], label=regime)
            for x, v in zip(xs, vals):  # missing (e.g. no K loop at decode): no bar, and said so
                if v != v:
                    ax.plot([x], [0], marker="x", color=REGIME_COLOURS[i % len(REGIME_COLOURS)], markersize=3)
                    missing = True
        ax.set_xticks(range(len(steps)), [view.short(s) for s in steps], fontsize=5 if len(steps) > 8 else 6,
                      rotation=45 if len(steps) > 8 else 0)
        ax.set_title(label, fontsize=7, loc="left")
        ax.tick_params(axis="y", labelsize=6)
    if regimes != [None] and keys:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, frameon=False, loc="upper right", bbox_to_anchor=(0.99, 1.0),
                   ncol=len(labels))
    if missing:
        fig.text(0.99, 0.01, "x = no value (the metric does not exist in that kernel, e.g. no K loop)", ha="right",
                 va="bottom", fontsize=6)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(f"{view.title}: static ISA metrics per step", x=0.01, ha="left", fontsize=10)
    _badge(fig, 1 - 0.6 / height, "static", shapes_detail(metrics))
    return fig


def draw_leave_one_out(view: View, run_dir: Path):
    """For each switch (and regime): its intended metrics in the full kernel without and with it."""
    import matplotlib.pyplot as plt

    exp = read(run_dir, f"{view.summary_prefix}expectations.parquet")
    loo = exp[exp["comparison"] == "leave-one-out"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8.8, max(1.9, 0.26 * len(loo) + 1.3)))
    scale = ""
    if loo.empty:
        ax.text(0.5, 0.5, "no leave-one-out variants", ha="center", va="center", transform=ax.transAxes)
    else:
        rel = [change_or_none(r.after, r.before) for r in loo.itertuples()]
        where = [" ".join(str(getattr(r, c)) for c in ("gemm", "regime") if c in loo.columns) for r in loo.itertuples()]
        labels = [f"{w + ', ' if w else ''}−{r.switch}: {r.metric}{'' if r.as_intended else ' ✗'}"
                  for w, r in zip(where, loo.itertuples())]
        scale = draw_changes(ax, rel, labels, [GREEN if ok else RED for ok in loo["as_intended"]],
                             [f"{fmt(r.after)} → {fmt(r.before)}" for r in loo.itertuples()])
    ax.set_xlabel(f"change when the switch is removed from the full kernel (%);  ✗ = not as intended"
                  + (f"\n{scale[2:]}" if scale else ""), fontsize=7)
    height = fig.get_figheight()
    fig.text(0.01, 1 - 0.06 / height, view.loo_title, ha="left", va="top", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / height))
    _badge(fig, 1 - 0.42 / height, "static", shapes_detail(read(run_dir, f"{view.summary_prefix}ladder.parquet")))
    return fig


def draw_published(view: View, run_dir: Path):
    """The seed's own speed figures, as published (MI355X)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    view.draw_published(ax, read(run_dir, f"{view.summary_prefix}published.parquet"), None)
    ax.set_title(view.published_title, loc="left", pad=14)
    fig.tight_layout()
    return fig


def draw_summary_speed(view: View, run_dir: Path):
    """Measured speed of every step where the step runs had an MI355X, else the published figures."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    for table in (f"{view.summary_prefix}measured_all.parquet", view.measured_table):
        if (run_dir / table).is_file():
            view.draw_measured(ax, read(run_dir, table))
            ax.set_title("Speed per variant, measured", loc="left", pad=14)
            break
    else:
        view.draw_published(ax, read(run_dir, f"{view.summary_prefix}published.parquet"), None)
        ax.set_title("Not timed here (no MI355X): the seed's own figures", loc="left", pad=14)
    fig.tight_layout()
    return fig


# ============================================================================ registration


def draw_fidelity(view: View, run_dir: Path):
    """The summary's fidelity figure: the first / last rung against the seed's before / after kernels,
    metric by metric (static counts; :func:`mxfp4_ablation.fidelity.plot_fidelity`)."""
    from .. import fidelity

    return fidelity.plot_fidelity(read(run_dir, f"{view.summary_prefix}fidelity.parquet"))


def step_slugs(study: str) -> list[str]:
    """The step notebooks' names under ``notebooks/<study>/`` (FlyDSL-free: files, not the registry)."""
    folder = paths.REPO_ROOT / "notebooks" / study
    return sorted(p.stem for p in folder.glob("*.py")) if folder.is_dir() else []


def register_step(view: View, slug: str, baseline: bool) -> None:
    from ..figures import figure

    run = f"{view.name}--{slug}"
    if not baseline:
        figure(f"{view.name}/{slug}_isa_diff", run=run)(functools.partial(draw_step_isa_diff, view))
    figure(f"{view.name}/{slug}_speed", run=run)(functools.partial(draw_step_speed, view))


def register(view: View, summary_run: str = "summary") -> None:
    """Register the view's summary figures and one pair per step notebook."""
    from ..figures import figure

    drawers = {"ladder_metrics": draw_ladder_metrics, "leave_one_out": draw_leave_one_out,
               view.published_figure: draw_published, "tflops": draw_summary_speed}
    for name in view.summary_figures:
        figure(f"{view.name}/{name}", run=summary_run)(functools.partial(drawers[name], view))
    figure(f"{view.name}/fidelity", run=summary_run)(functools.partial(draw_fidelity, view))
    for slug in step_slugs(view.name):
        register_step(view, slug, baseline=slug.endswith("baseline"))
