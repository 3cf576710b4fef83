"""The summary's work list (studies.summary_work): it plans exactly what the sections compute."""

import pandas as pd

from mxfp4_ablation import fidelity as fid
from mxfp4_ablation.studies import attribution, get, modelled_section, summary_work, sweep


def _by_kind(tasks):
    out = {}
    for t in tasks:
        out.setdefault(t.what, set()).add((t.variant, t.shape))
    return out


def test_plan_is_the_sections_work():
    gemm, moe = get("gemm"), get("moe")
    tasks = summary_work.plan(["gemm", "moe"], "emulated", attribution_pairs={"gemm": 2})
    kinds = _by_kind(tasks)
    assert len(tasks) == len(set(tasks))
    isa = {(v, tuple(r.isa)) for st in (gemm, moe) for r in st.spec.regimes for v in st.variants()}
    assert isa <= kinds["compile"]
    assert set(fid.compile_requests(["gemm"])) <= kinds["compile"]
    loo = {(v, tuple(s)) for st in (gemm, moe) for r in st.spec.regimes for s in r.emulated
           for v in st.leave_one_out_names()}
    assert kinds["verify"] == loo
    modelled = {(v, tuple(s)) for st in (gemm, moe) for v, s in modelled_section.summary_plan(st)}
    subsets = {(t.variant, t.shape) for name, pairs in (("gemm", 2), ("moe", attribution.DEFAULT_PAIRS))
               for t in attribution.tasks_for(attribution.study_plans(name, method="auto", pairs=pairs))}
    assert kinds["model"] == modelled | subsets
    assert len(subsets - modelled) > 10  # the attribution's subsets are most of the model work


def test_plan_follows_the_switches():
    none = _by_kind(summary_work.plan(["gemm"], "static", fidelity=False, modelled=False))
    assert set(none) == {"compile"}  # static mode: no emulator runs; nothing modelled
    no_attr = _by_kind(summary_work.plan(["gemm"], "emulated", attribution=False))
    assert no_attr["model"] == {(v, tuple(s)) for v, s in modelled_section.summary_plan(get("gemm"))}
    other = summary_work.plan(["gemm"], "emulated", cases={"gemm": ([4096, 4096, 4096], None)}, modelled=False)
    assert ("gemm-v9", (4096, 4096, 4096)) in _by_kind(other)["compile"]


def test_compile_requests_are_what_the_fidelity_table_compiles(monkeypatch):
    asked = []

    def fake(requests):
        asked.extend(requests)
        return {tuple(r): {} for r in requests}

    monkeypatch.setattr(fid, "our_fingerprints", fake)
    fid.fidelity_table(["gemm", "moe1", "moe2"])
    assert asked == fid.compile_requests(["gemm", "moe1", "moe2"])


def test_prefetch_runs_the_plan_and_counts_it(monkeypatch):
    ran = []

    def fake(v, shape, opts):
        ran.append((v.name, shape))
        return {"label": "static", "cached": len(ran) % 2 == 0}

    monkeypatch.setattr(sweep, "RUNNERS", {**sweep.RUNNERS, "compile": fake, "verify": fake, "model": fake})
    rows = summary_work.prefetch(["gemm"], "emulated", scheduler="inline", attribution_pairs={"gemm": 2})
    assert len(rows) == len(ran) == len(summary_work.plan(["gemm"], "emulated", attribution_pairs={"gemm": 2}))
    ov = summary_work.overview(rows).set_index("what")
    assert int(ov["tasks"].sum()) == len(rows) and int(ov["failed"].sum()) == 0
    assert int(ov["cached"].sum()) == len(ran) // 2
    assert list(summary_work.overview(pd.DataFrame()).columns) == ["what", "tasks", "cached", "failed", "cpu_seconds"]
