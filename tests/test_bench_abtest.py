"""Interleaved A/B runs on the simulated GPU: ordering, planted effects, writing, locks."""
import functools
import json
import threading

import numpy as np
import pandas as pd
import pytest

from mxfp4_ablation.bench import device_info
from mxfp4_ablation.bench.abtest import (BenchError, Comparison, HarnessSettings, Job,
                                         block_order, run_comparisons, run_sweep, write_result)
from mxfp4_ablation.bench.stats import INDISTINGUISHABLE, SLOWER
from mxfp4_ablation.bench.timing import CaseTimer, DeviceContext, SimBackend, sim_case
from mxfp4_ablation.bench.validation import planted_case

FAST = HarnessSettings(pairs=30, launches=10, warmup_pairs=1, processes=2,
                       fresh_processes=False, backend="sim", progress=False, n_resamples=499)


@pytest.fixture(autouse=True)
def _locks_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_ABLATION_LOCK_DIR", str(tmp_path / "locks"))


def sim(base_us=100.0, **kw):
    return functools.partial(sim_case, base_us=base_us, noise=0.005, **kw)


def test_abba_order_alternates_and_random_order_is_seeded():
    rng = np.random.default_rng(0)
    assert [block_order(b, "abba", rng) for b in range(4)] == [
        ("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]
    r1 = [block_order(b, "random", np.random.default_rng(5)) for b in range(1)]
    r2 = [block_order(b, "random", np.random.default_rng(5)) for b in range(1)]
    assert r1 == r2


def test_trials_interleave_and_each_block_holds_both_arms():
    res = run_comparisons([Comparison("aa", sim(), sim())], FAST)
    t = res.trials
    assert len(t) == 2 * 2 * 2 * 30  # processes x methods x arms x pairs
    per_block = t.groupby(["process", "method", "block"])["arm"].apply(lambda s: "".join(s))
    assert set(per_block) == {"AB", "BA"}
    assert (per_block.iloc[:4].tolist() == ["AB", "BA", "AB", "BA"])
    s = res.summary
    assert set(s["method"]) == {"events", "graph"}
    assert (s["verdict"] == INDISTINGUISHABLE).all()
    assert ((s["ci_low"] <= 1.0) & (s["ci_high"] >= 1.0)).all()


@pytest.mark.parametrize("planted", [1.01, 1.03])
def test_planted_kernel_slowdown_is_recovered(planted):
    res = run_comparisons([Comparison("p", sim(), sim(100.0 * planted, flops=1e9 * planted))],
                          FAST)
    for r in res.summary.itertuples():
        assert r.verdict == SLOWER
        assert r.ci_low - 0.002 <= planted <= r.ci_high + 0.002
        assert abs(r.ratio - planted) < 0.003
        assert r.flop_ratio == pytest.approx(planted)


def test_exact_plant_by_extra_launches():
    base = sim(50.0)
    comp = Comparison("exact", base, functools.partial(planted_case, inner=base, extra=3),
                      launches=100)
    res = run_comparisons([comp], FAST)
    b_rows = res.trials[res.trials["arm"] == "B"]
    assert (b_rows["extra_launches"] == 3).all() and (b_rows["launches"] == 100).all()
    for r in res.summary.itertuples():
        assert r.verdict == SLOWER
        assert abs(r.ratio - 1.03) < 0.003


def test_graph_method_rotates_through_every_set():
    backend = SimBackend()
    ctx = DeviceContext(backend, cache_bytes=64 * 2**20)
    seen = []
    case = sim_case(ctx, set_bytes=4 * 2**20)  # 32 sets
    inner = case.launch
    case.launch = lambda i: (seen.append(i), inner(i))
    timer = CaseTimer(case, backend, "graph", launches=10, warmup=0)
    assert len(timer._graphs) == 4  # ceil(32 / 10)
    assert sorted(set(seen)) == list(range(32))


def test_settings_are_validated_with_one_clear_message():
    with pytest.raises(BenchError, match="pairs must be >= 3.*order must be"):
        HarnessSettings(pairs=1, order="zigzag").validate()
    with pytest.raises(BenchError, match="methods"):
        HarnessSettings(methods=("stopwatch",)).validate()


def test_unpicklable_factory_is_refused_for_fresh_processes():
    settings = HarnessSettings(**{**FAST.to_dict(), "fresh_processes": True})
    with pytest.raises(BenchError, match="importable module-level"):
        run_comparisons([Comparison("x", lambda ctx: None, sim())], settings)


def test_write_result_writes_parquet_and_provenance(tmp_path):
    res = run_comparisons([Comparison("aa", sim(), sim())], FAST)
    paths = write_result(res, tmp_path)
    assert [p.name for p in paths] == ["trials.parquet", "trials-summary.parquet"]
    trials = pd.read_parquet(paths[0])
    assert len(trials) == len(res.trials) and "git_sha" in trials.columns
    prov = json.loads((tmp_path / "trials.json").read_text())
    assert prov["mode"] == "simulated"
    assert prov["settings"]["pairs"] == 30 and prov["settings"]["backend"] == "sim"
    assert prov["bench"]["comparisons"][0]["a"].startswith("mxfp4_ablation.bench.timing.sim_case")
    assert not list(tmp_path.glob("*.tmp"))


def test_failure_midway_writes_nothing(tmp_path):
    def boom(ctx):
        raise RuntimeError("kernel exploded")

    with pytest.raises(BenchError, match="kernel exploded"):
        res = run_comparisons([Comparison("aa", sim(), sim()), Comparison("bad", sim(), boom)],
                              FAST)
        write_result(res, tmp_path)
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob("*.json"))


def test_device_lock_is_exclusive(tmp_path):
    with device_info.device_lock(0, directory=tmp_path):
        with pytest.raises(device_info.DeviceError, match="GPU 0 is busy"):
            with device_info.device_lock(0, timeout_s=0.2, directory=tmp_path, poll_s=0.05):
                pass
        with device_info.device_lock(1, timeout_s=0.2, directory=tmp_path):
            pass  # another GPU is free


def test_sweep_runs_one_job_per_device_concurrently(monkeypatch):
    active, peak, lock = set(), [0], threading.Lock()
    real = run_comparisons

    def tracking(comparisons, settings, device_index=0, mode="device"):
        with lock:
            assert device_index not in active  # never two jobs on one GPU
            active.add(device_index)
            peak[0] = max(peak[0], len(active))
        try:
            return real(comparisons, settings, device_index=device_index, mode=mode)
        finally:
            with lock:
                active.discard(device_index)

    monkeypatch.setattr("mxfp4_ablation.bench.abtest.run_comparisons", tracking)
    settings = HarnessSettings(**{**FAST.to_dict(), "pairs": 5, "processes": 1})
    jobs = [Job(f"j{i}", (Comparison("aa", sim(), sim()),)) for i in range(4)]
    results = run_sweep(jobs, settings, devices=[0, 1])
    assert sorted(results) == ["j0", "j1", "j2", "j3"]
    assert {r.provenance["bench"]["job"] for r in results.values()} == set(results)
    with pytest.raises(BenchError, match="listed twice"):
        run_sweep(jobs, settings, devices=[0, 0])


@pytest.mark.slow
def test_fresh_processes_give_distinct_pids():
    settings = HarnessSettings(**{**FAST.to_dict(), "fresh_processes": True, "pairs": 5})
    res = run_comparisons([Comparison("aa", sim(), sim())], settings)
    assert res.trials.groupby("process")["pid"].nunique().eq(1).all()
    assert res.trials["pid"].nunique() == 2
