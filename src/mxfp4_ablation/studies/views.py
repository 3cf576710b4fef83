"""The study's figures, drawn from a run folder's stored tables alone (no FlyDSL, no compiling).

A family's :class:`View` names what differs in its pictures (the published and measured drawers, a few
titles); the drawers here are shared. :func:`register` puts a view's figures into the one registry of
:mod:`mxfp4_ablation.figures`: the summary figures, and per step notebook found under
``notebooks/<study>/`` (``NN_<slug>.py``) its ``<study>/NN_<slug>_isa_diff`` (not for a baseline) and
``<study>/NN_<slug>_speed``. Steps come from the notebook files, not from the kernel registry, so
``make figures`` never imports a kernel module.
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


def draw_changes(ax, rel: list, labels: list, colours: list, notes: list, lim_scale: float = 1.8) -> None:
    """Horizontal bars of % changes, each with its ``before → after`` note."""
    y = list(range(len(rel)))
    ax.barh(y, rel, color=colours)
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    for yi, x, note in zip(y, rel, notes):
        ax.text(x, yi, f" {note} ", va="center", ha="left" if x >= 0 else "right", fontsize=6)
    lim = max([abs(v) for v in rel] + [1.0]) * lim_scale
    ax.set_xlim(-lim, lim)
    ax.tick_params(axis="x", labelsize=6)


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
        if moved.empty:
            ax.text(0.5, 0.5, "no metric changed", ha="center", va="center", transform=ax.transAxes)
            ax.set_yticks([])
        else:
            rel = [tables.relative(r.baseline, r.variant) for r in moved.itertuples()]
            colours = [GREY if m not in intended else GREEN if intended[m] else RED for m in moved["metric"]]
            labels = [f"{m}{' *' if m in intended else ''}" for m in moved["metric"]]
            notes = [f"{fmt(r.baseline)} → {fmt(r.variant)}" for r in moved.itertuples()]
            draw_changes(ax, rel, labels, colours, notes)
        if regime is not None:
            ax.set_title(regime, loc="left", fontsize=8)
        ax.set_xlabel(f"change from {baseline} (%); * = intended", fontsize=7)
    fig.text(0.01, 1 - 0.06 / height, f"{variant} vs {baseline}: ISA metrics (green = intended move, red = not)",
             ha="left", va="top", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.42 / height))
    _badge(fig, 1 - 0.36 / height, "static", shapes_detail(metrics))
    return fig


def _modelled(run_dir: Path) -> pd.DataFrame:
    """The step's modelled rows (``speed.parquet``), empty when the run has none."""
    path = Path(run_dir) / "speed.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=["variant", "kind", "shape", "metric", "value", "detail", "available"])
    speed = read(run_dir, "speed.parquet")
    return speed[speed["kind"] == "modelled"]


def _draw_modelled(ax, rows: pd.DataFrame) -> None:
    """Modelled TFLOPS of the baseline and the step per shape, with the model's version and clock."""
    ok = rows[rows["available"] & (rows["metric"] == "tflops")]
    baseline = ok["baseline"].dropna().iloc[0] if ok["baseline"].notna().any() else None
    names = sorted(dict.fromkeys(ok["variant"]), key=lambda n: n != baseline)  # the baseline first
    shapes = list(dict.fromkeys(ok["shape"]))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        sub = ok[ok["variant"] == name].set_index("shape")["value"].reindex(shapes)
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(shapes))]
        ax.bar(xs, sub, width, label=name, color=REGIME_COLOURS[i % len(REGIME_COLOURS)])
        for x, v in zip(xs, sub):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(shapes)), shapes, fontsize=6)
    ax.set_ylabel("TFLOPS (modelled)")
    ax.legend(fontsize=6, frameon=False)
    plots.source_badge(ax, "modelled", ok["detail"].iloc[0])


def draw_step_speed(view: View, run_dir: Path):
    """The step's speed: measured where the run timed anything, else the seed's published figures; and
    beside it the modelled speed of the step and its baseline where the run has it (else a line why)."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    modelled = _modelled(run_dir)
    have_model = bool(len(modelled)) and bool((modelled["available"] & (modelled["metric"] == "tflops")).any())
    fig, axes = plt.subplots(1, 2 if have_model else 1, figsize=(9.6 if have_model else 6.4, 2.9), squeeze=False)
    ax = axes[0][0]
    metrics = read(run_dir, "metrics.parquet")
    variant = metrics.loc[metrics["role"] == "variant", "variant"].iloc[0] if "role" in metrics.columns else ""
    if (run_dir / view.measured_table).is_file():
        view.draw_measured(ax, read(run_dir, view.measured_table))
        ax.set_title(f"{variant}: speed, measured", loc="left", pad=14)
    else:
        label = view.label_of(metrics)
        view.draw_published(ax, read(run_dir, "published.parquet"), label)
        ax.set_title(f"{variant}: not timed here (no MI355X); {label + ' ' if label else ''}as published for the "
                     "whole seed PR", loc="left", pad=14, fontsize=8)
    if have_model:
        _draw_modelled(axes[0][1], modelled)
        axes[0][1].set_title("modelled (timing model)", loc="left", pad=14, fontsize=8)
    elif len(modelled):
        fig.text(0.01, 0.01, f"modelled: {modelled['detail'].iloc[0]}", fontsize=6,
                 color=plots.SOURCES["modelled"][1])
    fig.tight_layout(rect=(0, 0.05 if len(modelled) and not have_model else 0, 1, 1))
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
    for ax, (key, label) in zip(axes.flat, keys):
        for i, regime in enumerate(regimes):
            sub = tables.per_regime(ladder, regime)
            vals = sub[sub["metric"] == key].set_index("variant")["value"].reindex(steps).astype(float).fillna(0)
            xs = [x + (i - (len(regimes) - 1) / 2) * width for x in range(len(steps))]
            ax.bar(xs, vals, width, color=REGIME_COLOURS[i % len(REGIME_COLOURS)], label=regime)
        ax.set_xticks(range(len(steps)), [view.short(s) for s in steps], fontsize=5 if len(steps) > 8 else 6,
                      rotation=45 if len(steps) > 8 else 0)
        ax.set_title(label, fontsize=7, loc="left")
        ax.tick_params(axis="y", labelsize=6)
    if regimes != [None] and keys:
        axes.flat[0].legend(fontsize=6, frameon=False)
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
    fig, ax = plt.subplots(figsize=(8.0, max(1.6, 0.24 * len(loo) + 1.0)))
    if loo.empty:
        ax.text(0.5, 0.5, "no leave-one-out variants", ha="center", va="center", transform=ax.transAxes)
    else:
        rel = [tables.relative(r.after, r.before) for r in loo.itertuples()]
        where = [" ".join(str(getattr(r, c)) for c in ("gemm", "regime") if c in loo.columns) for r in loo.itertuples()]
        labels = [f"{w + ', ' if w else ''}−{r.switch}: {r.metric}{'' if r.as_intended else ' ✗'}"
                  for w, r in zip(where, loo.itertuples())]
        draw_changes(ax, rel, labels, [GREEN if ok else RED for ok in loo["as_intended"]],
                     [f"{fmt(r.after)} → {fmt(r.before)}" for r in loo.itertuples()])
    ax.set_xlabel("change when the switch is removed from the full kernel (%);  ✗ = not as intended", fontsize=7)
    ax.set_title(view.loo_title, loc="left", pad=14)
    plots.source_badge(ax, "static", shapes_detail(read(run_dir, f"{view.summary_prefix}ladder.parquet")))
    fig.tight_layout()
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


def step_slugs(view: View) -> list[str]:
    """The step notebooks' names under ``notebooks/<view.name>/`` (FlyDSL-free: files, not the registry)."""
    folder = paths.REPO_ROOT / "notebooks" / view.name
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
    for slug in step_slugs(view):
        register_step(view, slug, baseline=slug.endswith("baseline"))
