"""Modelled per-step deltas and the ablation summary (studies.modelled_*): tables from fake timing rows,
figures from stored tables without FlyDSL."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from mxfp4_ablation import provenance, results
from mxfp4_ablation.studies import modelled_runs as R
from mxfp4_ablation.studies import modelled_section as S
from mxfp4_ablation.studies import modelled_tables as A

LADDER = ["gemm-v0", "gemm-v1", "gemm-v2", "gemm-v3"]
SWITCHES = {"gemm-v1": "agpr_acc", "gemm-v2": "serpentine", "gemm-v3": "g2s_m0"}
TFLOPS = {"gemm-v0": 2000.0, "gemm-v1": 2500.0, "gemm-v2": 2600.0, "gemm-v3": 2590.0}


def _row(variant, shape, tflops, us=None):
    r = {c: None for c in R.SWEEP_COLUMNS}
    r.update(label="modelled", variant=variant, family="gemm", shape=shape, tflops=tflops, us=us or 1e6 / tflops,
             bound="compute", cycles=10000, cycles_per_mfma_loop=16.5, mfma_busy=0.8, model_version="0.1.0",
             clock_ghz=1.395, sample="1 workgroup(s)", cached=True)
    for i, reason in enumerate(A.REASONS):
        r[f"exposed_{reason}"] = 100.0 * (i + 1)
    return r


def _sweep(shapes=("8192x8192x8192", "16384x16384x16384"), scale=None):
    rows = []
    for k, s in enumerate(shapes):
        for v in LADDER:
            rows.append(_row(v, s, TFLOPS[v] * (1 + 0.1 * k)))
        for sw, t in (("agpr_acc", 2000.0), ("serpentine", 2580.0), ("g2s_m0", 2600.0)):
            rows.append(_row(f"gemm-v3-no-{sw}", s, t))
    return pd.DataFrame(rows, columns=R.SWEEP_COLUMNS)


def _calibration(tmp_path, bias=1.0, half=2.0, spread=0.9):
    """A calibration.csv with only the uncertainty rows step_interval reads."""
    csv = tmp_path / "calibration.csv"
    rows = ["label,kind,scheme,held_out,name,stage,M,N,K,modelled,published,error,unit,stderr,model_version,"
            "model_fingerprint,command"]
    for name, v in (("n", 11), ("bias_pp", bias), ("bias_low_pp", bias - 0.5), ("bias_high_pp", bias + 0.5),
                    ("spread_pp", spread), ("t", 1.81), ("level", 0.9), ("half_width_pp", half)):
        rows.append(f"modelled,uncertainty,held-out,,{name},,,,,{v},,,pp,,0.1.0,0.1.0+test,cmd")
    csv.write_text("\n".join(rows) + "\n")
    return csv


def test_error_band_is_the_held_out_interval(tmp_path):
    band = A.error_band(_calibration(tmp_path))
    assert band["band_pp"] == 2.0 and band["bias_pp"] == 1.0 and band["spread_pp"] == 0.9
    assert "held-out" in band["rule"] and "bias +1.00 pp" in band["rule"]
    with pytest.raises(Exception, match="no calibration table"):
        A.error_band(tmp_path / "missing.csv")


def test_committed_calibration_gives_an_interval():
    band = A.error_band()
    assert 0 < band["band_pp"] < 50


def test_step_deltas_and_labels(tmp_path):
    sw = _sweep()
    pairs = [(None, "gemm-v0"), ("gemm-v0", "gemm-v1"), ("gemm-v2", "gemm-v3")]
    d = A.step_deltas(sw, pairs, switches=SWITCHES, calibration=_calibration(tmp_path))
    assert (d["label"] == "modelled").all() and d["model_version"].notna().all() and d["clock_ghz"].notna().all()
    v1 = d[(d["variant"] == "gemm-v1") & (d["shape"] == "8192x8192x8192")].iloc[0]
    # bias-corrected: 25 - 1 = 24, +- 2
    assert v1["delta_pct"] == pytest.approx(25.0) and v1["resolved"] and v1["delta_low"] == pytest.approx(22.0)
    assert v1["delta_high"] == pytest.approx(26.0) and v1["bias_pp"] == 1.0
    v3 = d[(d["variant"] == "gemm-v3") & (d["shape"] == "8192x8192x8192")].iloc[0]
    assert v3["delta_pct"] == pytest.approx(100 * (2590 / 2600 - 1), abs=1e-3) and not v3["resolved"]
    assert math.isnan(d[d["variant"] == "gemm-v0"]["delta_pct"].iloc[0])


def test_a_small_delta_is_resolved_only_outside_the_interval(tmp_path):
    from mxfp4_ablation.studies.speed import step_interval

    cal = _calibration(tmp_path, bias=-1.0, half=0.5)
    assert step_interval(-0.2, path=cal)["resolved"]          # -0.2 + 1.0 = 0.8 +- 0.5 > 0
    assert not step_interval(-1.2, path=cal)["resolved"]      # -0.2 +- 0.5 holds 0
    iv = step_interval(float("nan"), path=cal)
    assert not iv["resolved"] and iv["low"] != iv["low"]


def test_waterfall_adds_up_per_shape():
    sw = _sweep()
    for shape in ("8192x8192x8192", "16384x16384x16384"):
        wf = A.waterfall(sw, LADDER, shape, SWITCHES)
        last = sw[(sw["shape"] == shape) & (sw["variant"] == LADDER[-1])]["tflops"].iloc[0]
        assert wf["delta"].sum() == pytest.approx(last)
        assert (wf["start"].iloc[1:].to_numpy() == wf["end"].iloc[:-1].to_numpy()).all()
        assert list(wf["switch"]) == ["base", "agpr_acc", "serpentine", "g2s_m0"]
    with pytest.raises(A.AblationError, match="no modelled row"):
        A.waterfall(sw, LADDER + ["gemm-v9"], "8192x8192x8192")


def test_leave_one_out_and_order_of_impact():
    sw = _sweep()
    loo = A.leave_one_out(sw, "gemm-v3", {s: f"gemm-v3-no-{s}" for s in ("agpr_acc", "serpentine", "g2s_m0")},
                          "8192x8192x8192")
    assert list(loo["switch"]) == ["agpr_acc", "serpentine", "g2s_m0"]  # biggest loss first
    assert loo.set_index("switch").loc["agpr_acc", "loss_pct"] == pytest.approx(100 * (2590 / 2000 - 1))
    d = A.step_deltas(sw, [("gemm-v0", "gemm-v1"), ("gemm-v1", "gemm-v2"), ("gemm-v2", "gemm-v3")], SWITCHES)
    order = (("serpentine", "first"), ("g2s_m0", "second"))
    table, stats = A.order_of_impact(d, loo, "8192x8192x8192", order)
    assert list(table["pr990_rank"]) == [1, 2] and stats["n"] == 2
    assert stats["rho_step"] == pytest.approx(1.0)  # serpentine +4%, g2s_m0 -0.4%: same order as the PR
    assert A.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(A.spearman([1], [1]))


def test_claims_and_verdicts():
    assert A.claimed_speedup("~7% faster at decode (M=4/8), parity by M~64") == (7.0, 7.0)
    assert A.claimed_speedup("~31% of gemm1's non-MFMA VALU removed, large M 2-6% faster") == (2.0, 6.0)
    assert A.claimed_speedup("hot-loop s_waitcnt 68 -> 8 per 4 K steps") is None
    assert A.verdict("x", 5.0, 2.0).startswith("sign seen")
    assert A.verdict("x", -5.0, 2.0).startswith("sign contradicted")
    assert A.verdict("x", 1.0, 2.0).startswith("sign unresolved")
    assert "size consistent" in A.verdict("~7% faster", 6.0, 2.0)
    assert "not consistent" in A.verdict("~7% faster", 1.0, 0.5)
    assert A.verdict("x", float("nan"), 2.0).startswith("no predecessor")


def test_moe_ratios_next_to_published():
    rows = []
    for M, (a, b) in {16: (100.0, 95.0), 4096: (300.0, 270.0)}.items():
        rows += [_row("moe2-v0", f"{M}x385x7168x512x9x16", 1.0, us=a), _row("moe2-v4", f"{M}x385x7168x512x9x16", 1.0, us=b)]
    sw = pd.DataFrame(rows, columns=R.SWEEP_COLUMNS)
    pub = pd.DataFrame({"kernel": ["gemm2", "gemm2"], "M": [4096, 4096], "stage": ["before", "after"],
                        "ratio": [1.11, 1.00]})
    r = A.moe_ratios(sw, {"gemm2": "moe2-v0"}, {"gemm2": "moe2-v4"}, pub).set_index("M")
    assert r.loc[4096, "modelled_last_over_first"] == pytest.approx(0.9)
    assert r.loc[4096, "published_after_over_before"] == pytest.approx(1.00 / 1.11)
    assert r.loc[16, "published_after_over_before"] is None or math.isnan(r.loc[16, "published_after_over_before"])


def _write(df, path):
    results.write_table(df, path, provenance.collect("static", settings={"kind": "modelled"}))


def _fake_step_run(run: Path, variant: str, baseline: str, tflops: dict):
    sw = pd.DataFrame([_row(v, s, t * f) for v, t in tflops.items() for s, f in (("8192x8192x8192", 1.0),
                                                                                 ("16384x16384x16384", 1.05))],
                      columns=R.SWEEP_COLUMNS)
    d = A.step_deltas(sw, [(baseline, variant)], {variant: "x"})
    tl = pd.DataFrame([{"variant": v, "shape": "8192x8192x8192", "track": t, "start": s, "end": s + 16,
                        "opcode": "v_mfma", "kind": "mfma" if "MFMA" in t else "valu", "line": 1,
                        "window_cycles": 400, "model_version": "0.1.0", "clock_ghz": 1.395}
                       for v in tflops for t in ("wave0", "wave1", "SIMD 0 MFMA") for s in range(0, 400, 20)])
    run.mkdir(parents=True)
    _write(sw, run / "modelled_sweep.parquet")
    _write(d, run / "modelled_delta.parquet")
    _write(A.cycles_table(sw[sw["shape"] == "8192x8192x8192"]), run / "modelled_cycles.parquet")
    _write(tl, run / "modelled_timeline.parquet")


def test_step_figures_distinct_and_labelled_without_flydsl(tmp_path):
    """Two steps' speed figures are different files (content hash), and say modelled with the clock."""
    _fake_step_run(tmp_path / "a", "gemm-v1", "gemm-v0", {"gemm-v0": 2000.0, "gemm-v1": 2500.0})
    _fake_step_run(tmp_path / "b", "gemm-v2", "gemm-v1", {"gemm-v1": 2500.0, "gemm-v2": 2600.0})
    code = textwrap.dedent(f"""
        import sys, hashlib
        sys.modules['flydsl'] = None  # any FlyDSL import fails
        from pathlib import Path
        from mxfp4_ablation import figures
        figures.load()
        out = {{}}
        for run in ('a', 'b'):
            for kind in ('speed_delta', 'speed_cycles'):
                name = 'gemm/0' + ('1' if run == 'a' else '2') + '_x_' + kind
                figures.FIGURES[name] = figures.Figure(name, None, 'x',
                                                       figures.FIGURES['gemm/01_agpr_acc_' + kind].draw)
                paths = figures.render(name, Path({str(tmp_path)!r}) / run, root=Path({str(tmp_path)!r}) / 'fig')
                svg = [p for p in paths if p.suffix == '.svg'][0]
                text = svg.read_text()
                assert 'modelled' in text and '1.395 GHz' in text, (name, 'label')
                out[name] = hashlib.sha256(svg.read_bytes()).hexdigest()
        assert len(set(out.values())) == len(out), out
        assert 'flydsl' not in [m for m in sys.modules if sys.modules[m] is not None]
        print('ok', len(out))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ok 4" in res.stdout


def test_summary_figures_from_tables(tmp_path):
    sw = _sweep()
    out = tmp_path / "run" / "modelled-gemm"
    out.mkdir(parents=True)
    wf = pd.concat([A.waterfall(sw, LADDER, s, SWITCHES) for s in dict.fromkeys(sw["shape"])])
    wf["model_version"], wf["clock_ghz"] = "0.1.0", 1.395
    pub = pd.DataFrame({"stage": ["before_990", "after_990", "aiter_asm"], "tflops": [4679, 5033, 5096],
                        "shape": ["8192x8192x8192"] * 3, "label": "published"})
    loo = A.leave_one_out(sw, "gemm-v3", {s: f"gemm-v3-no-{s}" for s in ("agpr_acc", "serpentine")}, "8192x8192x8192")
    _write(wf, out / "modelled_waterfall.parquet")
    _write(pub, out / "modelled_published.parquet")
    _write(loo, out / "modelled_leave_one_out.parquet")
    from mxfp4_ablation import figures

    figures.load()
    for name in ("gemm/modelled_waterfall", "gemm/modelled_leave_one_out"):
        paths = figures.render(name, tmp_path / "run", root=tmp_path / "fig")
        assert "modelled" in [p for p in paths if p.suffix == ".svg"][0].read_text()
    facts = A.findings("gemm", {"modelled_waterfall": wf, "modelled_published": pub}, {}, {"band_pp": 1.0})
    assert any("Modelled ladder at 8192x8192x8192" in f and "+29.50%" in f for f in facts)
    # the seed's span starts at the rung the fidelity view pairs with its before kernel (gemm-v1)
    span = [f for f in facts if f.startswith("The seed's own span at 8192x8192x8192 (from gemm-v1")]
    assert len(span) == 1 and "PR #990 published 4679 -> 5033" in span[0]


def test_committed_step_speed_figures_are_distinct_files():
    """Every committed per-step modelled speed figure has content of its own (none is a copy)."""
    from mxfp4_ablation import paths

    files = sorted(p for p in paths.figures_dir().glob("*/*_speed_*.svg"))
    if not files:
        pytest.skip("no per-step modelled speed figures committed yet (make reproduce draws them)")
    digests = {}
    for p in files:
        digests.setdefault(hashlib.sha256(p.read_bytes()).hexdigest(), []).append(p.name)
    copies = [names for names in digests.values() if len(names) > 1]
    assert not copies, f"byte-identical speed figures: {copies}"


def test_zero_inputs_scale_the_probe_layout():
    import types

    import torch

    def make_inputs(M, N, K, seed=0):
        return {"A": torch.ones(M, K // 2, dtype=torch.uint8), "S": torch.ones(N, K // 32, dtype=torch.uint8),
                "C": torch.ones(M, N, dtype=torch.bfloat16), "M": M, "N": N, "tag": "x"}

    z = R.zero_inputs(types.SimpleNamespace(make_inputs=make_inputs), M=1024, N=2048, K=4096)
    assert tuple(z["A"].shape) == (1024, 2048) and tuple(z["S"].shape) == (2048, 128)
    assert tuple(z["C"].shape) == (1024, 2048) and z["C"].dtype == torch.bfloat16 and not z["A"].any()
    assert z["M"] == 1024 and z["N"] == 2048 and z["tag"] == "x"

    def odd(M, N, K, seed=0):
        return {"X": torch.ones(M, 300)}

    with pytest.raises(ValueError, match="cannot scale X"):
        R.zero_inputs(types.SimpleNamespace(make_inputs=odd), M=1024, N=2048, K=4096)


def test_readme_columns_and_findings_from_a_summary_run(tmp_path):
    sw = _sweep(shapes=("8192x8192x8192",))
    d = A.step_deltas(sw, [(None, "gemm-v0"), ("gemm-v0", "gemm-v1")], switches=SWITCHES,
                      calibration=_calibration(tmp_path))
    base = tmp_path / "modelled-gemm"
    base.mkdir()
    _write(d, base / "modelled_delta.parquet")
    cols = S.readme_columns("gemm", tmp_path)
    assert cols[("gemm-v0", None)] == ("2000", "–")
    assert cols[("gemm-v1", None)] == ("2500", "+25.00% [+22.0, +26.0]")  # 25 - bias 1 +- 2
    assert "modelled" in S.readme_note("gemm", tmp_path) and "1.395 GHz" in S.readme_note("gemm", tmp_path)
    text = S.readme_findings("gemm", tmp_path)
    assert "gemm-v1 (agpr_acc) +25.00%" in text and "*(modelled)*" in text
    assert S.readme_columns("gemm", tmp_path / "nothing") == {} and S.readme_findings("gemm", None) is None


def test_zero_input_gemm_timing_equals_the_real_input_timing():
    """The dense GEMM's modelled timing does not depend on its data: zero inputs give the same cycles
    (one small compile + two ~1 s timing runs on the CI gate shape)."""
    pytest.importorskip("flydsl")
    from mxfp4_ablation import modelled

    shape = (256, 256, 1536)
    real = modelled.model("gemm-v0", shape, sample=1, use_cache=False)
    orig = modelled.model_isa
    try:
        modelled.model_isa = lambda *a, **k: orig(*a, **{**k, "use_cache": False})
        zero = R._model("gemm-v0", shape, 1)
    finally:
        modelled.model_isa = orig
    for key in ("cycles", "mfma_count", "cycles_per_mfma_loop", "exposed", "mfma_busy"):
        assert zero[key] == real[key], key
    assert zero["kernel"]["tflops"] == real["kernel"]["tflops"] and zero["label"] == "modelled"


def test_a_timeline_and_the_sweep_point_share_one_timing_run(monkeypatch, tmp_path):
    """On a cold cache the timeline's timing run also stores the sweep's point (one simulation, not two),
    with the cycles of a run of its own; and the timeline is the one a traced run of its own gives."""
    pytest.importorskip("flydsl")
    import gfx950emu

    from mxfp4_ablation import modelled

    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    shape, runs, launch = (256, 256, 1536), [], gfx950emu.launch
    monkeypatch.setattr(gfx950emu, "launch", lambda *a, **k: runs.append(k.get("timing_trace")) or launch(*a, **k))
    tl = R.timeline("gemm-v1", shape, sample=1)
    row = R.model_row("gemm-v1", shape, sample=1)
    assert runs == [True] and row["cached"] and len(tl)
    prep = modelled._prepare("gemm-v1", shape, 0)
    own = modelled.model_isa(prep["isa"], prep["grid"], prep["block"], prep["make_args"], flops=prep["flops"],
                             sample=1, use_cache=False)
    assert row["cycles"] == own["cycles"] and row["tflops"] == own["kernel"]["tflops"]
    assert R._timeline_rows("gemm-v1", shape, prep, 1, 2) == tl.to_dict("records")


def test_model_shapes_knob(monkeypatch):
    from mxfp4_ablation import family
    from mxfp4_ablation.studies import gemm

    monkeypatch.setenv("MXFP4_MODEL_SHAPES", "isa")
    assert S.default_shapes(gemm.STUDY) == [(8192, 8192, 8192)]
    assert {s for _, s in S.summary_plan(gemm.STUDY)} == {(8192, 8192, 8192)}
    monkeypatch.setenv("MXFP4_MODEL_SHAPES", "all")
    assert len(S.default_shapes(gemm.STUDY)) == 4
    plan = S.summary_plan(gemm.STUDY)
    rungs, loo = len(family.get("gemm").ladder), len(family.get("gemm").leave_one_out())
    assert len(plan) == rungs * 4 + loo and len(set(plan)) == len(plan)
    monkeypatch.setenv("MXFP4_MODEL_SHAPES", "some")
    with pytest.raises(A.AblationError, match="MXFP4_MODEL_SHAPES"):
        S.default_shapes(gemm.STUDY)


def test_verdict_says_when_the_memory_floor_binds_both():
    d = pd.DataFrame([{"variant": "moe2-v1", "switch": "int64_abi", "shape": "16x385", "delta_pct": 0.0,
                       "band_pp": 6.0, "bound": "memory", "baseline_bound": "memory"}])
    v = A.verdicts(d, {"moe2-v1": "~7 % faster at decode"})
    assert "memory-bound" in v["verdict"].iloc[0] and v["claimed_pct"].iloc[0] == "7-7"
