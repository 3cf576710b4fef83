"""Statistics of an interleaved A/B timing run: paired ratios, BCa bootstrap CI, verdict.

Each block of the run times arm A once and arm B once, back to back, in the same
process, so slow drifts (clock, temperature, other tenants) hit both alike; the
paired ratio ``time_B / time_A`` of a block cancels them.  The median of those ratios
is the effect; its 95 % confidence interval comes from a bias-corrected and
accelerated (BCa) bootstrap, which copes with the skewed, heavy-tailed ratios that
timing produces better than a normal approximation does.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

FASTER = "faster"
SLOWER = "slower"
INDISTINGUISHABLE = "indistinguishable"


class StatsError(ValueError):
    """Too little or malformed data for the statistic asked for."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    n: int
    method: str

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def to_dict(self) -> dict:
        return asdict(self)


def _bootstrap(sample, confidence, n_resamples, seed, method):
    from scipy import stats

    kwargs = dict(
        n_resamples=n_resamples,
        confidence_level=confidence,
        method=method,
        vectorized=True,
        axis=-1,
    )
    rng = np.random.default_rng(seed)
    try:
        return stats.bootstrap((sample,), np.median, rng=rng, **kwargs)
    except TypeError:  # scipy < 1.15 names the generator random_state
        return stats.bootstrap((sample,), np.median, random_state=rng, **kwargs)


def median_ci(
    values,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
) -> Interval:
    """Median of ``values`` with a BCa bootstrap confidence interval.

    Falls back to the percentile bootstrap only when BCa is undefined (its
    acceleration needs a jackknife with some spread); a sample with no spread at all
    gets the zero-width interval at its one value.
    """
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        raise StatsError("no values to summarise")
    if not np.all(np.isfinite(x)):
        raise StatsError(f"{int(np.sum(~np.isfinite(x)))} of {x.size} values are not finite")
    if not 0 < confidence < 1:
        raise StatsError(f"confidence must be in (0, 1), got {confidence}")
    med = float(np.median(x))
    if x.size < 3 or np.ptp(x) == 0:
        if x.size < 3 and np.ptp(x) != 0:
            raise StatsError(f"need at least 3 values for a bootstrap interval, got {x.size}")
        return Interval(med, med, med, confidence, int(x.size), "degenerate")
    method = "BCa"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _bootstrap(x, confidence, n_resamples, seed, "BCa")
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            method = "percentile"
            res = _bootstrap(x, confidence, n_resamples, seed, "percentile")
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Interval(med, lo, hi, confidence, int(x.size), method)


def process_interval(process_medians, confidence: float = 0.95) -> Interval:
    """t-interval of the mean of per-process medians (P - 1 degrees of freedom).

    Ratios from one process share that process's luck: where its buffers landed,
    which algorithm a library picked, the clock state.  On the H200 the per-process
    medians of a 28 us GEMM's A/A ratio spread by +-0.1 %, more than the CI over the
    pairs of all processes (+-0.04 %), which therefore is overconfident.  Treating
    each process as one observation is the textbook answer for few clusters (a
    bootstrap over 3 to 6 processes is too coarse to be trusted).
    """
    from scipy import stats as sps

    m = np.asarray(process_medians, dtype=float).ravel()
    if m.size < 2:
        raise StatsError(f"need at least 2 processes for a process-level interval, got {m.size}")
    if not np.all(np.isfinite(m)):
        raise StatsError("process medians are not finite")
    mean = float(m.mean())
    half = float(sps.t.ppf(0.5 + confidence / 2, m.size - 1) * m.std(ddof=1) / math.sqrt(m.size))
    return Interval(mean, mean - half, mean + half, confidence, int(m.size), "t-processes")


def verdict(ci: Interval, noise_floor: float = 0.0) -> str:
    """Call B faster, slower or indistinguishable from A, from the CI of time_B/time_A.

    B is *slower* when the whole interval lies above ``1 + noise_floor`` and *faster*
    when it lies below ``1 / (1 + noise_floor)``; otherwise the run cannot tell them
    apart.  ``noise_floor`` (a fraction, e.g. 0.002) lets a measured A/A spread widen
    the dead band, so an effect smaller than what identical kernels show is not
    reported as real.
    """
    if noise_floor < 0:
        raise StatsError(f"noise floor must be >= 0, got {noise_floor}")
    if ci.low > 1.0 + noise_floor:
        return SLOWER
    if ci.high < 1.0 / (1.0 + noise_floor):
        return FASTER
    return INDISTINGUISHABLE


TRIAL_COLUMNS = ("experiment", "method", "process", "block", "arm", "time_per_launch_us")


def paired_ratios(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, method, process, block): A and B times and ratio B/A.

    ``trials`` is the long table the harness writes (one row per trial).  Blocks that
    lack either arm (an interrupted run) are dropped, never paired across blocks.
    """
    missing = [c for c in TRIAL_COLUMNS if c not in trials.columns]
    if missing:
        raise StatsError(f"trial table lacks columns {missing}")
    keys = ["experiment", "method", "process", "block"]
    wide = trials.pivot_table(
        index=keys, columns="arm", values="time_per_launch_us", aggfunc="first"
    )
    if "A" not in wide.columns or "B" not in wide.columns:
        raise StatsError("trial table needs rows for both arms 'A' and 'B'")
    wide = wide.dropna(subset=["A", "B"]).reset_index()
    wide.columns.name = None
    wide = wide.rename(columns={"A": "time_a_us", "B": "time_b_us"})
    wide["ratio"] = wide["time_b_us"] / wide["time_a_us"]
    return wide


def summarize(
    trials: pd.DataFrame,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    noise_floor: float = 0.0,
    cluster_min: int = 3,
) -> pd.DataFrame:
    """Per (experiment, method): median ratio, its BCa CI, verdict, TFLOPS of each arm.

    The point estimate is the median of all paired ratios.  Its CI (ci_low/ci_high,
    which the verdict uses) is the BCa bootstrap CI over pairs (pair_ci_*) joined with
    the process-level t-interval (proc_ci_*, :func:`process_interval`) when there are
    >= ``cluster_min`` processes: the union covers both the trial-to-trial noise and
    the process-to-process effects.  With fewer processes it is the pair CI alone.

    Columns: n_pairs, n_processes, ratio, ci_low, ci_high, ci_width, ci_method,
    verdict, time_a_us, time_b_us (medians), tflops_a, tflops_b (medians, where the
    trial table has a tflops column), flop_ratio (B/A), tflops_ratio (= flop_ratio /
    ratio: > 1 means B does more useful work per second), and the spread of the
    per-process medians (proc_ratio_min/max), a check that processes agree.
    """
    pairs = paired_ratios(trials)
    rows = []
    for (exp, method), grp in pairs.groupby(["experiment", "method"], sort=False):
        pair_ci = median_ci(grp["ratio"].to_numpy(), confidence, n_resamples, seed)
        per_proc = grp.groupby("process")["ratio"].median()
        proc_ci = None
        ci = pair_ci
        if len(per_proc) >= cluster_min:
            proc_ci = process_interval(per_proc.to_numpy(), confidence)
            ci = Interval(pair_ci.estimate, min(pair_ci.low, proc_ci.low),
                          max(pair_ci.high, proc_ci.high), confidence, pair_ci.n,
                          f"{pair_ci.method}+t-processes")
        row = dict(
            experiment=exp,
            method=method,
            n_pairs=int(len(grp)),
            n_processes=int(grp["process"].nunique()),
            ratio=ci.estimate,
            ci_low=ci.low,
            ci_high=ci.high,
            ci_width=ci.width,
            ci_method=ci.method,
            verdict=verdict(ci, noise_floor),
            time_a_us=float(grp["time_a_us"].median()),
            time_b_us=float(grp["time_b_us"].median()),
            proc_ratio_min=float(per_proc.min()),
            proc_ratio_max=float(per_proc.max()),
            pair_ci_low=pair_ci.low,
            pair_ci_high=pair_ci.high,
            proc_ci_low=proc_ci.low if proc_ci else np.nan,
            proc_ci_high=proc_ci.high if proc_ci else np.nan,
        )
        sub = trials[(trials["experiment"] == exp) & (trials["method"] == method)]
        if "tflops" in sub.columns and "flops" in sub.columns:
            fa = sub.loc[sub["arm"] == "A", "flops"]
            fb = sub.loc[sub["arm"] == "B", "flops"]
            row["tflops_a"] = float(sub.loc[sub["arm"] == "A", "tflops"].median())
            row["tflops_b"] = float(sub.loc[sub["arm"] == "B", "tflops"].median())
            if len(fa) and len(fb) and fa.iloc[0] > 0:
                row["flop_ratio"] = float(fb.iloc[0] / fa.iloc[0])
                row["tflops_ratio"] = row["flop_ratio"] / ci.estimate
                row["tflops_ratio_low"] = row["flop_ratio"] / ci.high
                row["tflops_ratio_high"] = row["flop_ratio"] / ci.low
        rows.append(row)
    return pd.DataFrame(rows)
