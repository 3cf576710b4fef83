"""Shapley attribution over switch subsets and the Dask sweep engine (issue #23).

Synthetic games with known values (additive, symmetric interaction, requirements), subset naming and
validity, the attribution tables on synthetic sweep rows, and a two-worker LocalCluster reached by
its address (no-work probe tasks, fast); the real thing (compile + model on workers) is slow-marked.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time

import pandas as pd
import pytest

from mxfp4_ablation import family, variants
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.studies import attribution as A
from mxfp4_ablation.studies import shapley as G
from mxfp4_ablation.studies import sweep


def _game(struct, fn):
    return {s: fn(s) for s in struct.subsets()}


# ---------------------------------------------------------------------------- game theory


def test_additive_game_values_equal_the_terms():
    st = G.Structure(("a", "b", "c", "d", "e"))
    terms = {"a": 0.3, "b": -0.1, "c": 0.05, "d": 0.0, "e": 1.2}
    v = _game(st, lambda s: 2.0 + sum(terms[p] for p in s))
    phi = G.shapley_exact(st, v)
    assert phi == pytest.approx(terms, abs=1e-12)
    assert all(x == pytest.approx(0, abs=1e-12) for x in G.interactions_exact(st, v).values())


def test_symmetric_interaction_is_split_evenly_and_is_the_pair_index():
    st = G.Structure(("a", "b", "c", "d"))
    v = _game(st, lambda s: 0.4 * ("c" in s) + (0.6 if {"a", "b"} <= s else 0.0))
    phi = G.shapley_exact(st, v)
    assert phi["a"] == pytest.approx(0.3) and phi["b"] == pytest.approx(0.3)
    assert phi["c"] == pytest.approx(0.4) and phi["d"] == pytest.approx(0.0, abs=1e-12)
    inter = G.interactions_exact(st, v)
    assert inter[("a", "b")] == pytest.approx(0.6)
    assert all(x == pytest.approx(0, abs=1e-12) for k, x in inter.items() if k != ("a", "b"))


def test_efficiency_and_requirements_use_valid_sets_only():
    st = G.Structure(("a", "b", "c", "d"), {"c": ("a",), "d": ("a",)})
    rng = random.Random(3)
    v = {s: rng.uniform(-1, 1) for s in st.subsets()}  # only valid sets have a value
    phi = G.shapley_exact(st, v)
    full = frozenset(st.players)
    assert sum(phi.values()) == pytest.approx(v[full] - v[frozenset()])
    # a switch nothing requires and that requires nothing keeps the plain Shapley axioms (null player)
    v2 = _game(st, lambda s: 0.5 * ("a" in s) + 0.25 * ("c" in s))
    phi2 = G.shapley_exact(st, v2)
    assert phi2["b"] == pytest.approx(0, abs=1e-12) and phi2["d"] == pytest.approx(0, abs=1e-12)
    # c does nothing without a: what c buys is shared with the switch that enables it
    assert phi2["a"] == pytest.approx(0.5 + 0.125) and phi2["c"] == pytest.approx(0.125)
    with pytest.raises(G.GameError, match="no value"):
        G.shapley_exact(st, {frozenset(): 0.0})


def test_sampling_over_all_orderings_is_exact_and_keeps_efficiency():
    st = G.Structure(("a", "b", "c", "d"), {"c": ("a",)})
    rng = random.Random(7)
    v = {s: rng.uniform(-1, 1) for s in st.subsets()}
    everything = list(itertools.permutations(st.players))
    sm = G.shapley_sampled(st, v, everything, resamples=50)
    assert sm.values == pytest.approx(G.shapley_exact(st, v))
    exact_i = G.interactions_exact(st, v)
    for k, (x, n) in G.interactions_sampled(st, v, everything).items():
        assert x == pytest.approx(exact_i[k]) and n > 0
    few = G.sample_orderings(st, 2, seed=1)
    assert few[0] == st.players and few[1] == st.players[::-1] and len(few) == 4
    total = v[frozenset(st.players)] - v[frozenset()]
    for o in few:
        assert sum(G.marginals(st, v, o).values()) == pytest.approx(total)
    lo, hi = G.shapley_sampled(st, v, few, resamples=200).ci["a"]
    assert lo <= hi
    assert set(G.needed_sets(st, few)) <= set(st.subsets())


def test_rank_correlation_verdicts():
    vals = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}
    tight = G.rank_correlation(["a", "b", "c", "d"], lambda rng: vals, resamples=100)
    assert tight["rho"] == pytest.approx(1.0) and tight["verdict"] == "agrees"
    rev = G.rank_correlation(["d", "c", "b", "a"], lambda rng: vals, resamples=100)
    assert rev["verdict"] == "disagrees"

    def noisy(rng):
        return vals if rng is None else {k: rng.uniform(-10, 10) for k in vals}

    assert noisy_verdict(noisy).startswith("cannot decide")
    assert G.rank_correlation(["a", "b"], lambda rng: vals)["verdict"].startswith("cannot decide: 2 ranked")


def noisy_verdict(draw):
    return G.rank_correlation(["a", "b", "c", "d"], draw, resamples=300)["verdict"]


# ---------------------------------------------------------------------------- subsets as variants


def test_valid_subset_counts_and_validity():
    counts = {f: len(family.get(f).subsets()) for f in ("gemm", "moe1", "moe2")}
    assert counts == {"gemm": 240, "moe1": 4, "moe2": 16}
    g = family.get("gemm")
    assert not g.is_valid({"scale_prefetch"}) and g.is_valid({"g2s_m0", "scale_prefetch"})
    assert all(g.is_valid(s) for s in g.subsets())
    with pytest.raises(UsageError, match="depends on g2s_m0"):
        variants.get("gemm+scale_prefetch")
    with pytest.raises(UsageError, match="unknown GEMM switch"):
        variants.get("gemm+nope")
    with pytest.raises(UsageError, match="twice"):
        variants.get("gemm+agpr_acc+agpr_acc")
    with pytest.raises(UsageError, match="hexadecimal"):
        variants.get("gemm@xyz")


@pytest.mark.parametrize("fam_name", ["gemm", "moe1", "moe2"])
def test_subset_names_round_trip(fam_name):
    fam = family.get(fam_name)
    names = set()
    for s in fam.subsets():
        name = fam.subset_name(s)
        names.add(name)
        v = variants.get(name)
        assert v.switches == s and v.name == name and v.family == fam_name
        assert variants.get(f"{fam_name}@{fam.mask(s):x}").name == name
        shuffled = sorted(s, reverse=True)
        assert variants.get(f"{fam_name}+" + "+".join(shuffled)).name == name  # "gemm+": the empty set
        assert fam.from_mask(fam.mask(s)) == s
    assert len(names) == len(fam.subsets())  # one name per set
    assert fam.subset_name(frozenset()) == f"{fam_name}-v0"
    assert fam.subset_name(frozenset(fam.switches)) == fam.full


def test_leave_one_out_for_every_switch_names_its_dependents():
    g = family.get("gemm")
    loo = {n: (s, dropped) for n, s, dropped in g.leave_one_out_all()}
    assert len(loo) == len(g.switches)
    s, dropped = loo["gemm-v9-no-g2s_m0"]
    assert dropped == {"scale_prefetch", "b_carry"} and not s & {"g2s_m0", "scale_prefetch", "b_carry"}
    assert loo["gemm-v9-no-agpr_acc"][1] == {"zero_first_k"}
    assert loo["gemm-v9-no-serpentine"][1] == frozenset()
    v = variants.get("gemm-v9-no-g2s_m0")
    assert v.kind == "subset" and v.predecessor == "gemm-v0" and v.switch is None
    assert variants.get("gemm-v9-no-serpentine").kind == "leave-one-out"  # the existing set keeps its kind
    from mxfp4_ablation import studies

    assert studies.get("gemm").variant("gemm+agpr_acc+k_unroll4").switches == {"agpr_acc", "k_unroll4"}


# ---------------------------------------------------------------------------- attribution on synthetic rows


def _rows(plan, tflops_of):
    fam = family.get(plan.family)
    rows = []
    for s in plan.sets:
        rows.append({"variant": fam.subset_name(s), "family": plan.family, "mask": fam.mask(s),
                     "shape": "x".join(map(str, plan.shape)), "what": "model", "ok": True, "error": "",
                     "label": "modelled", "tflops": tflops_of(s), "model_version": "test", "clock_ghz": 1.0})
    return pd.DataFrame(rows)


def test_attribution_json_schema_and_views_on_a_known_game():
    # a multiplicative (log-additive) GEMM: each switch multiplies TFLOPS by a known factor, except that
    # g2s_m0 alone costs 15 % and scale_prefetch (which needs it) wins 20 % back
    factor = {s: 1.0 + 0.01 * i for i, s in enumerate(family.get("gemm").switches)}

    def tflops(s):
        t = 1000.0 * math.prod(factor[x] for x in s if x not in ("g2s_m0", "scale_prefetch"))
        if "g2s_m0" in s:
            t *= 0.85
        if "scale_prefetch" in s:
            t *= 1.2
        return t

    p = A.plan("gemm", (8192, 8192, 8192), "exact")
    res = A.attribute(p, _rows(p, tflops), resamples=200)
    out = res.json()
    assert set(out) == {"switches", "total_log_pct", "interactions", "order_vs_seed"}
    assert set(out["switches"]) == set(family.get("gemm").switches)
    for r in out["switches"].values():
        assert set(r) == {"shapley_log_pct", "ci", "ladder_pct", "loo_pct"}
        assert r["ci"][0] <= r["shapley_log_pct"] <= r["ci"][1]
    total = sum(r["shapley_log_pct"] for r in out["switches"].values())
    assert total == pytest.approx(out["total_log_pct"], abs=0.01)
    sw = out["switches"]
    assert sw["k_unroll4"]["shapley_log_pct"] == pytest.approx(100 * math.log(factor["k_unroll4"]), abs=1e-3)
    # the restricted game: half of what scale_prefetch and b_carry buy lands on g2s_m0, which enables both
    want = math.log(0.85) + 0.5 * math.log(1.2) + 0.5 * math.log(factor["b_carry"])
    assert sw["g2s_m0"]["shapley_log_pct"] == pytest.approx(100 * want, abs=1e-3)
    assert sw["scale_prefetch"]["shapley_log_pct"] == pytest.approx(50 * math.log(1.2), abs=1e-3)
    assert sw["g2s_m0"]["ladder_pct"] == pytest.approx(-15.0, abs=1e-3)
    assert sw["g2s_m0"]["loo_pct"] == pytest.approx(100 * (0.85 * 1.2 * factor["b_carry"] - 1), abs=1e-3)
    assert out["interactions"]["g2s_m0,scale_prefetch"]["log_pct"] == pytest.approx(100 * math.log(1.2), abs=1e-3)
    assert out["order_vs_seed"]["n"] == 4 and out["order_vs_seed"]["verdict"]
    json.dumps(out)  # JSON-ready
    tabs = A.tables([res])
    assert set(tabs) == {"attribution_switches", "attribution_interactions", "attribution_order", "attribution_values"}
    assert (tabs["attribution_switches"]["label"] == "modelled").all()
    assert len(tabs["attribution_values"]) == 240
    assert A.findings(tabs["attribution_switches"], tabs["attribution_order"])


def test_sampled_plan_includes_the_ladder_and_every_leave_one_out():
    p = A.plan("gemm", (8192, 8192, 8192), "sampled", pairs=2)
    fam = family.get("gemm")
    assert {s for _, s in fam.ladder} <= set(p.sets)
    assert {s for _, s, _ in fam.leave_one_out_all()} <= set(p.sets)
    assert len(p.sets) < len(fam.subsets())
    assert A.plan("moe2", (16, 385, 7168, 512, 9, 16)).method == "exact"
    with pytest.raises(UsageError, match="at least 2"):
        A.plan("gemm", (8192, 8192, 8192), "sampled", pairs=1)


def test_plugged_in_step_uncertainty_widens_the_interval():
    p = A.plan("moe1", (16, 8, 512, 256, 2, 16), "exact")
    rows = _rows(p, lambda s: 100.0 * (1.1 if "exp2" in s else 1.0))
    try:
        A.set_step_uncertainty(lambda fam, sw, shape: (0.01, 0.03) if sw == "exp2" else (0.0, 0.0), rule="test rule")
        res = A.attribute(p, rows, resamples=50)
    finally:
        A.set_step_uncertainty(None)
    r = res.switches["exp2"]
    assert r["ci_low"] == pytest.approx(r["shapley_log_pct"] - 1.0, abs=1e-3)
    assert r["ci_high"] == pytest.approx(r["shapley_log_pct"] + 3.0, abs=1e-3)
    assert res.detail["evidence_rule"] == "test rule"
    with pytest.raises(UsageError, match="non-negative width"):
        A.set_step_uncertainty(lambda *a: (-1.0, 0.0))
        try:
            A.attribute(p, rows, resamples=10)
        finally:
            A.set_step_uncertainty(None)


def test_measured_game_carries_the_harness_cis_linearly():
    p = A.plan("moe1", (16, 8, 512, 256, 2, 16), "exact")
    fam = family.get("moe1")
    rows = []
    for s in p.sets:
        ratio = 0.9 if "exp2" in s else 1.0
        rows.append({"variant": fam.subset_name(s), "family": "moe1", "mask": fam.mask(s), "shape": "16x8x512x256x2x16",
                     "what": "bench", "ok": True, "error": "", "label": "measured", "ratio": ratio,
                     "ci_low": ratio * 0.99, "ci_high": ratio * 1.01})
    res = A.attribute(p, pd.DataFrame(rows), what="bench", resamples=50)
    r = res.switches["exp2"]
    assert r["shapley_log_pct"] == pytest.approx(-100 * math.log(0.9), abs=1e-3)
    assert r["ci_low"] < r["shapley_log_pct"] < r["ci_high"]
    assert res.detail["label"] == "measured"


# ---------------------------------------------------------------------------- the sweep engine


def test_scheduler_parsing_and_bad_tasks():
    assert sweep.parse_scheduler(None, None) == ("local", None)
    assert sweep.parse_scheduler("local:3", None) == ("local", 3)
    assert sweep.parse_scheduler("tcp://10.0.0.1:8786", None) == ("address", None)
    for bad in ("local:x", "local:0", "nonsense"):
        with pytest.raises(UsageError):
            sweep.parse_scheduler(bad, None)
    with pytest.raises(UsageError, match="what must be"):
        sweep.Task("gemm-v0", (1, 1, 1), "fly")
    with pytest.raises(UsageError, match="unknown variant"):
        sweep.tasks(["gemm-v99"], [(256, 256, 3072)], ["compile"])
    with pytest.raises(UsageError, match="takes a shape"):
        sweep.tasks(["gemm-v0"], [(256, 256)], ["compile"])


def test_inline_run_keeps_order_and_reports_failures_as_rows():
    todo = sweep.tasks(["gemm-v1", "gemm+k_unroll4"], [(8, 8, 8)], ["compile"])
    rows = sweep.run(todo[:1], scheduler="inline", progress=False, fn=sweep.probe)
    assert list(rows["variant"]) == ["gemm-v1"]
    before = time.time()
    bad = sweep.run_task(sweep.Task("gemm-v1", (7, 8, 8), "compile"))  # check_shape refuses: one line, a row
    assert bad["ok"] is False and bad["error"] and "\n" not in bad["error"]
    assert before <= bad["started"] <= time.time()  # when it ran: the rows are a timeline of the workers
    assert sweep.failures(pd.DataFrame([bad]))[0].startswith("compile:gemm-v1@7x8x8")


def test_two_worker_local_cluster_by_address():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40, env=sweep._worker_env()) as cluster:
        names = [v.name for v in variants.subset_variants("moe2")]
        todo = sweep.tasks(names, [(16, 8, 512, 256, 2, 16)], ["model"])
        rows = sweep.run(todo, scheduler=cluster.scheduler_address, progress=False, fn=sweep.probe)
        assert list(rows["variant"]) == names  # rows come back in task order
        assert rows["ok"].all() and len(rows) == 16
        assert set(rows["mask"]) == set(range(16))
        assert rows["pid"].nunique() == 2  # both workers took tasks
        with distributed.Client(cluster) as c:
            again = sweep.run(todo[:3], client_=c, progress=False, fn=sweep.probe)
        assert list(again["variant"]) == names[:3]


def test_sweep_cli_check_and_bad_input(capsys):
    from mxfp4_ablation.cli import main

    assert main(["sweep", "--variants", "gemm+agpr_acc", "--shape", "256,256,3072", "--check",
                 "--scheduler", "inline", "--no-progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workers"] == 1 and data["tasks"] == 1
    assert main(["sweep", "--variants", "gemm+scale_prefetch", "--shape", "256,256,3072", "--scheduler", "inline"]) == 2
    assert "depends on g2s_m0" in capsys.readouterr().err
    assert main(["variants", "--subsets", "moe2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 16 and rows[0]["name"] == "moe2-v0" and rows[-1]["name"] == "moe2-v4"
    assert main(["attribution", "--study", "gemm", "--scheduler", "bogus"]) == 2
    assert main(["attribution", "--study", "fp8"]) == 2


def test_measured_path_refuses_without_a_gfx950(capsys):
    """The device path (paired A/B per subset against the empty set's kernel) is built but cannot run
    here: one line and exit 2 from the CLI, an ok=False row from the engine, before any timing."""
    from mxfp4_ablation.bench import device_info
    from mxfp4_ablation.cli import main

    if device_info.gpu_available():
        pytest.skip("a GPU is visible")
    assert main(["attribution", "--study", "moe", "--family", "moe1", "--measured", "--scheduler", "inline"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gfx950" in err
    row = sweep.run_task(sweep.Task("moe1+exp2", (16, 8, 512, 256, 2, 16), "bench"))
    assert row["ok"] is False and "gfx950" in row["error"]


@pytest.mark.slow
def test_attribution_end_to_end_on_a_two_worker_cluster(tmp_path):
    """Compile + model every moe1 subset at the small decode shape on two workers reached by address."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40, memory_limit=0, env=sweep._worker_env()) as cluster:
        res, rows = A.run("moe", (16, 8, 512, 256, 2, 16), ["moe1"], scheduler=cluster.scheduler_address,
                          progress=False)
    out = res[0].json()
    assert set(out["switches"]) == {"int64_abi", "exp2"}
    assert sum(r["shapley_log_pct"] for r in out["switches"].values()) == pytest.approx(out["total_log_pct"], abs=0.01)
    assert (rows["label"] == "modelled").all() and rows["ok"].all()
    A.write(res, tmp_path, {"test": True})
    assert (tmp_path / "attribution_switches.parquet").is_file()


def test_summary_section_writes_tables_draws_figures_and_fills_the_readme(tmp_path, monkeypatch):
    from mxfp4_ablation.studies import attribution_views as V
    from mxfp4_ablation.studies import readme as R

    def fake_run(study, **kw):
        out = []
        for p in A.study_plans(study, method=kw.get("method", "auto"), pairs=kw.get("pairs", 2)):
            rows = _rows(p, lambda s: 1000.0 * (1.05 if "k_unroll4" in s or "exp2" in s else 1.0) * (0.9 if "g2s_m0" in s else 1))
            out.append(A.attribute(p, rows, resamples=50))
        return out, None

    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setattr(A, "run", fake_run)
    for study in ("gemm", "moe"):
        sec = V.summary_section(study, tmp_path, render=False)
        assert (tmp_path / f"attribution-{study}" / "attribution_switches.parquet").is_file()
        assert sec.findings() and len(sec.table())
    assert set(sec.tables["attribution_switches"]["family"]) == {"moe1", "moe2"}
    sec = V.summary_section("gemm", tmp_path)
    assert set(sec.figures) == {"attribution_shares", "attribution_interactions"}
    assert all(p.is_file() for p in sec.figures.values())
    readme = tmp_path / "README.md"
    begin, end = V.readme_markers("gemm")
    readme.write_text(f"x\n{begin}\nSTALE-BLOCK\n{end}\ny\n")
    block = V.readme_block("gemm", tmp_path)
    assert "| gemm | 8192x8192x8192 | g2s_m0 |" in block and "also drops scale_prefetch, b_carry" in block
    text = R.replace_between_markers(readme.read_text(), block, begin, end)
    assert "STALE-BLOCK" not in text and "*(modelled)*" in text
    assert V.readme_block("gemm", tmp_path / "nothing") is None
