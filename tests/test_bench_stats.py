"""Statistics of the harness on synthetic data with known answers."""
import numpy as np
import pandas as pd
import pytest

from mxfp4_ablation.bench.stats import (FASTER, INDISTINGUISHABLE, SLOWER, Interval, StatsError,
                                        median_ci, paired_ratios, summarize, verdict)


def test_median_ci_covers_true_median_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    small = median_ci(1.01 + 0.004 * rng.standard_normal(50), n_resamples=2000)
    large = median_ci(1.01 + 0.004 * rng.standard_normal(800), n_resamples=2000)
    assert small.method == large.method == "BCa"
    assert small.contains(1.01) and large.contains(1.01)
    assert large.width < small.width / 2.5  # ~1/sqrt(16) = 1/4


def test_median_ci_coverage_is_near_nominal():
    # 95 % intervals over 200 independent skewed samples: coverage within a loose band.
    rng = np.random.default_rng(7)
    true_median = 1.0  # lognormal(0, s) has median exactly 1
    hits = sum(median_ci(rng.lognormal(0.0, 0.01, 60), n_resamples=999, seed=i).contains(true_median)
               for i in range(200))
    assert 0.88 <= hits / 200 <= 0.99


def test_median_ci_degenerate_and_bad_input():
    ci = median_ci([2.0, 2.0, 2.0, 2.0])
    assert (ci.low, ci.estimate, ci.high, ci.method) == (2.0, 2.0, 2.0, "degenerate")
    with pytest.raises(StatsError, match="no values"):
        median_ci([])
    with pytest.raises(StatsError, match="not finite"):
        median_ci([1.0, np.nan, 1.0])
    with pytest.raises(StatsError, match="confidence"):
        median_ci([1.0, 1.1, 1.2], confidence=1.5)


@pytest.mark.parametrize("low,high,floor,expected", [
    (1.002, 1.010, 0.0, SLOWER),
    (0.990, 0.998, 0.0, FASTER),
    (0.998, 1.004, 0.0, INDISTINGUISHABLE),
    (1.002, 1.010, 0.005, INDISTINGUISHABLE),  # inside the A/A dead band
    (1.006, 1.010, 0.005, SLOWER),
    (0.990, 0.994, 0.005, FASTER),
])
def test_verdict(low, high, floor, expected):
    ci = Interval((low + high) / 2, low, high, 0.95, 100, "BCa")
    assert verdict(ci, floor) == expected


def _trials(ratio, n_blocks=200, noise=0.003, seed=0, drop_last_b=False):
    rng = np.random.default_rng(seed)
    rows = []
    for blk in range(n_blocks):
        drift = 1 + 0.05 * np.sin(blk / 10)  # strong common drift: pairing must cancel it
        a = 100 * drift * np.exp(noise * rng.standard_normal())
        b = 100 * ratio * drift * np.exp(noise * rng.standard_normal())
        for arm, t, fl in (("A", a, 1e9), ("B", b, 1e9 * ratio)):
            rows.append(dict(experiment="x", method="events", process=blk % 2, block=blk // 2,
                             arm=arm, time_per_launch_us=t, flops=fl, tflops=fl / t / 1e6))
    df = pd.DataFrame(rows)
    # blocks are (process, block) pairs: make block unique within process
    df["block"] = df.index // 2 // 2
    if drop_last_b:
        df = df.iloc[:-1]
    return df


def test_paired_ratios_drop_incomplete_blocks():
    df = _trials(1.0, n_blocks=10, drop_last_b=True)
    pairs = paired_ratios(df)
    assert len(pairs) == 9
    with pytest.raises(StatsError, match="lacks columns"):
        paired_ratios(df.drop(columns=["arm"]))


@pytest.mark.parametrize("planted", [1.0, 1.01, 1.03, 0.99])
def test_summarize_recovers_planted_ratio_despite_drift(planted):
    s = summarize(_trials(planted, n_blocks=400), n_resamples=2000).iloc[0]
    assert s.ci_low <= planted <= s.ci_high
    assert s.ci_width < 0.002
    expected = INDISTINGUISHABLE if planted == 1.0 else (SLOWER if planted > 1 else FASTER)
    assert s.verdict == expected
    # B does planted x the FLOPs in planted x the time: TFLOPS ratio ~ 1
    assert s.tflops_ratio_low <= 1.0 <= s.tflops_ratio_high


def test_process_interval_uses_t_with_p_minus_1_df():
    from scipy import stats as sps

    from mxfp4_ablation.bench.stats import process_interval

    m = [1.001, 1.003, 0.999, 1.002]
    ci = process_interval(m)
    half = sps.t.ppf(0.975, 3) * np.std(m, ddof=1) / 2
    assert ci.estimate == pytest.approx(np.mean(m))
    assert ci.high - ci.estimate == pytest.approx(half)
    with pytest.raises(StatsError, match="at least 2"):
        process_interval([1.0])


def test_summarize_widens_ci_by_process_spread():
    # Each process has its own offset (as buffer placement gives on a real GPU): the CI
    # over pairs alone misses the truth, the reported CI (pairs joined with processes)
    # must contain it.
    rng = np.random.default_rng(3)
    rows = []
    offsets = [0.996, 1.004, 0.998, 1.003]
    for p, off in enumerate(offsets):
        for blk in range(100):
            a = 100 * np.exp(0.001 * rng.standard_normal())
            b = 100 * off * np.exp(0.001 * rng.standard_normal())
            rows += [dict(experiment="x", method="graph", process=p, block=blk, arm="A",
                          time_per_launch_us=a),
                     dict(experiment="x", method="graph", process=p, block=blk, arm="B",
                          time_per_launch_us=b)]
    s = summarize(pd.DataFrame(rows), n_resamples=999).iloc[0]
    assert s.n_processes == 4
    assert s.ci_low <= s.pair_ci_low and s.ci_high >= s.pair_ci_high
    assert s.ci_low <= 1.0 <= s.ci_high
    assert s.proc_ci_low <= 1.0 <= s.proc_ci_high
    assert s.verdict == INDISTINGUISHABLE
