"""The timing-harness validation's figures (``notebooks/harness_validation.py``), drawn from the
committed data under ``experiments/harness-validation/`` alone (measured on an NVIDIA H200).

Each figure takes the folder of the run it shows (default: :data:`FINAL_RUN`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import plots, results
from ..figures import figure

DATA = "harness-validation"
#: The run the headline numbers come from (6 processes).
FINAL_RUN = "run3-all-p6"
SOURCE = f"{DATA}/{FINAL_RUN}"
#: The A/A and planted-delta experiments, in display order, with the planted slowdown in %.
PLANTED = {"gemm_aa": 0, "gemm_k+1%": 1, "gemm_k+3%": 3, "exact_aa_4k": 0, "exact+1%": 1, "exact+3%": 3,
           "exact_aa_2k": 0, "exact+0.1%": 0.1, "exact+0.3%": 0.3}
METHODS = ("events", "graph")


def _summary(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "summary.parquet")


@figure("harness/planted_deltas", data=SOURCE)
def draw_planted_deltas(run_dir: Path):
    """Delta = ratio - 1 in per cent with its 95 % CI, per experiment and method; the planted value ticked."""
    import matplotlib.pyplot as plt

    order = list(PLANTED)
    s = _summary(run_dir).set_index(["experiment", "method"])
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for j, method in enumerate(METHODS):
        for i, exp in enumerate(order):
            if (exp, method) not in s.index:
                continue
            r = s.loc[(exp, method)]
            ax.errorbar(100 * (r.ratio - 1), i + (j - 0.5) * 0.3,
                        xerr=[[100 * (r.ratio - r.ci_low)], [100 * (r.ci_high - r.ratio)]],
                        fmt="o", ms=3, capsize=2, color=("C0", "C1")[j], label=method if i == 0 else None)
    ax.scatter([PLANTED[e] for e in order], range(len(order)), marker="|", s=200, color="k", label="planted")
    ax.set_xscale("symlog", linthresh=0.1)
    return _per_experiment(fig, ax, "B vs A time delta (%), 95 % CI", "A/A and planted slowdowns, 6 processes")


def _per_experiment(fig, ax, xlabel: str, title: str):
    """One row per planted experiment, labelled; legend, title and the device badge."""
    ax.set_yticks(range(len(PLANTED)), list(PLANTED))
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(loc="lower right")
    ax.set_title(title, loc="left")
    fig.tight_layout()
    plots.source_badge(ax, "device", "NVIDIA H200")
    return fig


@figure("harness/process_spread", data=SOURCE)
def draw_process_spread(run_dir: Path):
    """Each fresh process's median ratio minus the planted delta."""
    import matplotlib.pyplot as plt

    from ..bench.stats import paired_ratios

    trials, _ = results.read_table(Path(run_dir) / "trials.parquet")
    pairs = paired_ratios(trials)
    per_proc = pairs.groupby(["experiment", "method", "process"])["ratio"].median().reset_index()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for j, method in enumerate(METHODS):
        sub = per_proc[per_proc["method"] == method]
        for i, exp in enumerate(PLANTED):
            v = sub.loc[sub["experiment"] == exp, "ratio"].to_numpy()
            ax.scatter(100 * (v - 1 - PLANTED[exp] / 100), np.full(v.size, i + (j - 0.5) * 0.3), s=10,
                       color=("C0", "C1")[j], label=method if i == 0 else None)
    ax.axvline(0, color="k", lw=0.8)
    return _per_experiment(fig, ax, "per-process median delta minus planted delta (%)", "Process-to-process spread")


@figure("harness/cache_effect", data=SOURCE)
def draw_cache_effect(run_dir: Path):
    """A memory-bound op on one input set (hot in L2) vs rotated sets, per timing method."""
    import matplotlib.pyplot as plt

    trials, _ = results.read_table(Path(run_dir) / "trials.parquet")
    cache = trials[trials["experiment"].isin(["cache_hot_vs_rotated", "cache_rot2x_vs_4x"])]
    labels = {("cache_hot_vs_rotated", "A"): "1 set (hot)", ("cache_hot_vs_rotated", "B"): "rotated 2x",
              ("cache_rot2x_vs_4x", "A"): "rotated 2x", ("cache_rot2x_vs_4x", "B"): "rotated 4x"}
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2))
    for ax, method in zip(axes, METHODS):
        med = cache[cache["method"] == method].groupby(["experiment", "arm"])["time_per_launch_us"].median()
        ax.bar(range(len(med)), med.to_numpy(), color=["C2", "C3", "C3", "C4"][: len(med)])
        ax.set_xticks(range(len(med)), [labels[k] for k in med.index], rotation=20)
        ax.set_title(method, loc="left")
        ax.set_ylabel("us per launch (median)")
        plots.source_badge(ax, "device", "H200")
    fig.tight_layout()
    return fig


def k_slope(run_dir: Path) -> float:
    """Least-squares slope of time increase vs K increase (through the origin), events method."""
    lin, k_ratio = _k_points(run_dir)
    return float(np.sum(k_ratio * (lin["ratio"] - 1)) / np.sum(k_ratio ** 2))


def _k_points(run_dir: Path):
    s = _summary(run_dir)
    lin = s[(s["method"] == "events") & s["experiment"].str.startswith("gemm_k")]
    return lin, lin["experiment"].str.extract(r"\+(\d+)%")[0].astype(float) / 100


@figure("harness/k_linearity", data=SOURCE)
def draw_k_linearity(run_dir: Path):
    """GEMM time vs K (the premise of the K plants), with the fitted slope."""
    import matplotlib.pyplot as plt

    lin, k_ratio = _k_points(run_dir)
    slope = k_slope(run_dir)
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.errorbar(100 * k_ratio, 100 * (lin["ratio"] - 1),
                yerr=[100 * (lin["ratio"] - lin["ci_low"]), 100 * (lin["ci_high"] - lin["ratio"])], fmt="o", capsize=2)
    xs = np.linspace(0, 26, 10)
    ax.plot(xs, xs, "k:", lw=0.8, label="time proportional to K")
    ax.plot(xs, slope * xs, "C1-", lw=0.8, label=f"fit: slope {slope:.4f}")
    ax.set_xlabel("K increase (%)")
    ax.set_ylabel("time increase (%)")
    ax.legend()
    ax.set_title("8192x8192xK bf16 GEMM", loc="left")
    fig.tight_layout()
    plots.source_badge(ax, "device", "H200")
    return fig
