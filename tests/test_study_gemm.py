"""The GEMM study layer: published figures, the metrics/expectations logic, step and summary reports on a
stub variant set with synthetic ISA, deterministic figures, and the README table generator."""

from __future__ import annotations

import functools
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from mxfp4_ablation import figures, paths, plots, results, runner, variants
from mxfp4_ablation.studies import gemm as G

REAL_CSV = paths.REPO_ROOT / "experiments" / "reference" / G.PUBLISHED_CSV

# --------------------------------------------------------------------------------------------- stubs

STUB_LADDER = [("gemm-v0", ()), ("gemm-v1", ("wide_epilogue",)), ("gemm-v2", ("wide_epilogue", "static_prologue"))]
STUB_LOO = [("gemm-v2-no-wide_epilogue", ("static_prologue",))]
MFMA = "\tv_mfma_f32_16x16x32_bf16 v[0:3], {}, {}, v[0:3]\n"


def synthetic_isa(switches) -> str:
    """A tiny kernel whose counts move the way wide_epilogue / static_prologue say they should."""
    sw = set(switches)
    if "static_prologue" in sw:
        prologue = "\ts_mov_b32 s4, 0\n"
    else:
        prologue = "\tv_rcp_iflag_f32 v1, v2\n\tv_cvt_f32_u32 v3, v4\n\tv_add_u32 v5, v5, v6\n"
    loop = (".LBB0_1:\n" + MFMA.format("v[4:7]", "v[8:11]") + MFMA.format("v[4:7]", "v[12:15]")
            + "\tbuffer_load_dword v7, v8, s[0:3], 0 offen\n\ts_waitcnt vmcnt(0)\n\ts_cbranch_scc1 .LBB0_1\n")
    if "wide_epilogue" in sw:
        store = "\tbuffer_store_dwordx4 v[0:3], v9, s[4:7], 0 offen\n"
    else:
        store = "\tbuffer_store_short v0, v9, s[4:7], 0 offen\n" * 4
    body = prologue + "\tbuffer_load_dword v7, v8, s[0:3], 0 offen\n" + loop + store
    return f"\t.type\tk,@function\nk:\n{body}\ts_endpgm\n.Lfunc_end0:\n"


@dataclass
class FakeArtifact:
    isa: str
    compile_seconds: float = 1.5


def stub_variants() -> dict:
    out, prev = {}, None
    for name, sw in STUB_LADDER:
        out[name] = variants.Variant(name, "gemm", frozenset(sw), prev, "ladder")
        prev = name
    for name, sw in STUB_LOO:
        out[name] = variants.Variant(name, "gemm", frozenset(sw), prev, "leave-one-out")
    return out


def fake_verify(name, shape, *, backend="emulator", seed=0):
    return {"passed": True, "cosine": 0.9999995, "max_abs_err": 0.01, "hazards": 0, "seconds": 0.5,
            "variant": name, "shape": list(shape), "seed": seed, "backend": backend}


@pytest.fixture
def stub(monkeypatch, tmp_path):
    """Stub variant set + compiles + runner; experiments and figures under tmp_path."""
    vs = stub_variants()
    monkeypatch.setattr(variants, "all_variants", lambda: dict(vs))
    monkeypatch.setattr(G, "compile_variants",
                        lambda names, shape: [FakeArtifact(synthetic_isa(vs[n].switches)) for n in names])
    monkeypatch.setattr(runner, "verify", fake_verify)
    figures.load()  # register every study's figures first, so the copy below loses none
    monkeypatch.setattr(figures, "FIGURES", dict(figures.FIGURES))  # restored after the test
    G._register_step_figures()  # the stub ladder's step figures
    exp = tmp_path / "experiments"
    (exp / "reference").mkdir(parents=True)
    shutil.copy(REAL_CSV, exp / "reference" / G.PUBLISHED_CSV)
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(exp))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    return vs


def stub_metrics() -> pd.DataFrame:
    rows = []
    for name, v in stub_variants().items():
        for metric, value in G.study_metrics(synthetic_isa(v.switches)).items():
            rows.append({"variant": name, "kind": v.kind, "switch": "", "shape": "8192x8192x8192", "metric": metric,
                         "value": float(value) if value is not None else math.nan})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------- published


def test_published_csv_holds_the_pr_990_numbers_with_their_source():
    df = G.published(REAL_CSV)
    got = {(r.M, r.N, r.K, r.stage): r.tflops for r in df.itertuples()}
    expected = {}
    for (mn, k), (before, after, asm) in {(8192, 8192): (4679, 5033, 5096), (8192, 16384): (5078, 5443, 5520),
                                         (16384, 8192): (4639, 5004, 5136), (16384, 16384): (5052, 5495, 5590)}.items():
        expected.update({(mn, mn, k, "before_990"): before, (mn, mn, k, "after_990"): after,
                         (mn, mn, k, "aiter_asm"): asm})
    assert got == expected
    assert df["source"].str.contains("FlyDSL PR #990").all()
    wide = G.published_wide(df).set_index(["M", "K"])
    # The PR's own "vs before" / "vs aiter" columns. It computed them from unrounded TFLOPS, so the
    # rounded table reproduces them to within 0.02 percentage points.
    pr_columns = {(8192, 8192): (7.57, -1.23), (8192, 16384): (7.20, -1.38), (16384, 8192): (7.87, -2.58),
                  (16384, 16384): (8.78, -1.70)}
    for key, (gain, vs_aiter) in pr_columns.items():
        assert wide.at[key, "gain_990_pct"] == pytest.approx(gain, abs=0.02)
        assert wide.at[key, "vs_aiter_pct"] == pytest.approx(vs_aiter, abs=0.02)


@pytest.mark.parametrize("edit, match", [
    (lambda df: df.drop(columns="source"), "lacks column"),
    (lambda df: df.assign(stage="later"), "unknown stage"),
    (lambda df: df.assign(source=""), "needs a source"),
])
def test_published_rejects_a_bad_file_with_one_clear_error(tmp_path, edit, match):
    bad = tmp_path / "bad.csv"
    edit(pd.read_csv(REAL_CSV)).to_csv(bad, index=False)
    with pytest.raises(G.StudyError, match=match):
        G.published(bad)
    with pytest.raises(G.StudyError, match="no published GEMM figures"):
        G.published(tmp_path / "missing.csv")


# --------------------------------------------------------------------------------------------- metrics


def test_study_metrics_count_what_the_switches_are_judged_by():
    base = G.study_metrics(synthetic_isa(()))
    wide = G.study_metrics(synthetic_isa(("wide_epilogue", "static_prologue")))
    assert (base["buffer_store_2B"], base["buffer_store_16B"]) == (4, 0)
    assert (wide["buffer_store_2B"], wide["buffer_store_16B"]) == (0, 1)
    assert (base["int_div_idiom"], wide["int_div_idiom"]) == (2, 0)
    assert (base["insts_before_first_buffer_load"], wide["insts_before_first_buffer_load"]) == (3, 1)
    assert base["loop_buffer_load_dword"] == 1 and base["mfma_operand_reuse"] == 1.0
    # 2 loop MFMAs = 2/128 K steps, so 1 wait per loop = 256 waits per 4 K steps.
    assert base["loop_k_steps"] == pytest.approx(2 / 128)
    assert base["loop_s_waitcnt_per_4k"] == pytest.approx(256)


def test_expectations_and_isa_diff_on_a_stub_ladder(stub):
    metrics = stub_metrics()
    exp = G.expectation_table(metrics)
    assert exp["as_intended"].all()
    ladder = exp[exp["comparison"] == "ladder"]
    assert set(zip(ladder["variant"], ladder["metric"])) == {
        ("gemm-v1", "buffer_store_2B"), ("gemm-v1", "buffer_store_16B"),
        ("gemm-v2", "insts_before_first_buffer_load"), ("gemm-v2", "int_div_idiom")}
    loo = exp[exp["comparison"] == "leave-one-out"].set_index("metric")
    assert (loo.at["buffer_store_2B", "before"], loo.at["buffer_store_2B", "after"]) == (4, 0)  # v7-no-X -> v7
    # A switch that moved its metric the wrong way is flagged, not hidden.
    flipped = metrics.copy()
    flipped.loc[(flipped["variant"] == "gemm-v2") & (flipped["metric"] == "int_div_idiom"), "value"] = 5.0
    bad = G.expectation_table(flipped)
    assert list(bad.loc[~bad["as_intended"], "metric"]) == ["int_div_idiom"]
    diff = G.isa_diff(metrics, "gemm-v0", "gemm-v1").set_index("metric")
    assert diff.at["buffer_store_2B", "delta"] == -4 and diff.at["buffer_store_2B", "ratio"] == 0
    assert diff.at["mfma", "ratio"] == 1.0
    with pytest.raises(G.StudyError, match="no metrics for"):
        G.isa_diff(metrics, "gemm-v0", "gemm-v9")


def test_bad_input_gives_one_clear_error(stub):
    with pytest.raises(G.StudyError, match="unknown GEMM variant 'gemm-v9'"):
        G.step_report("gemm-v9", mode="emulated", render=False)
    with pytest.raises(G.StudyError, match="mode 'fast'"):
        G.step_report("gemm-v1", mode="fast", render=False)
    with pytest.raises(G.StudyError, match="three positive integers"):
        G.parse_shapes([[256, 256]], "emulated")
    with pytest.raises(G.StudyError, match="bad GEMM shape"):
        G.parse_shapes("256,x,512", "emulated")
    assert G.parse_shapes(None, "emulated") == list(G.EMULATED_SHAPES)
    assert G.parse_shapes(None, "device") == list(G.DEVICE_SHAPES)
    assert G.parse_shapes("512,512,1536", "emulated") == [(512, 512, 1536)]


# --------------------------------------------------------------------------------------------- reports


def test_step_report_writes_its_tables_with_provenance(stub, tmp_path):
    out = tmp_path / "run"
    rep = G.step_report("gemm-v1", None, [[256, 256, 1536], "512,512,1536"], "emulated", [0, 1], out)
    assert rep.baseline == "gemm-v0" and rep.switch == "wide_epilogue"
    for table in ("verify", "metrics", "isa_diff", "expectations", "published"):
        df, prov = results.read_table(out / f"{table}.parquet")
        assert len(df) and {"git_sha", "mode", "flydsl_version", "utc"} <= set(df.columns)
        assert prov["mode"] == ("published" if table == "published" else "static" if table != "verify" else "emulated")
    verify, prov = results.read_table(out / "verify.parquet")
    assert prov["settings"]["variant"] == "gemm-v1" and prov["settings"]["seeds"] == [0, 1]
    assert sorted(zip(verify["shape"], verify["seed"])) == [("256x256x1536", 0), ("256x256x1536", 1),
                                                           ("512x512x1536", 0), ("512x512x1536", 1)]
    assert (verify["status"] == "passed").all() and (verify["backend"] == "emulator").all()
    metrics, _ = results.read_table(out / "metrics.parquet")
    assert set(zip(metrics["variant"], metrics["role"])) == {("gemm-v1", "variant"), ("gemm-v0", "baseline")}
    assert (out / "isa" / "gemm-v1.s").read_text() == synthetic_isa({"wide_epilogue"})
    assert rep.expectations["as_intended"].all() and set(rep.expectations["variant"]) == {"gemm-v1"}
    assert rep.measured is None  # nothing is timed off-device
    names = [p.name for p in rep.figures.values()]
    assert names == ["01_wide_epilogue_isa_diff.svg", "01_wide_epilogue_speed.svg"]
    assert all(p.is_file() and p.with_suffix(".png").is_file() for p in rep.figures.values())


def test_verify_table_records_what_did_not_run(stub, monkeypatch):
    static = G.verify_table(["gemm-v1"], [(256, 256, 1536)], [0], "static")
    assert list(static["status"]) == ["not run"] and "static mode" in static["error"].iloc[0]

    def refuse(*args, **kwargs):
        raise ValueError("mxfp4_ablation.kernels.gemm does not provide reference (needed to run it)\nmore")

    monkeypatch.setattr(runner, "verify", refuse)
    df = G.verify_table(["gemm-v1"], [(256, 256, 1536)], [0], "emulated")
    assert list(df["status"]) == ["not run"] and df["error"].iloc[0].endswith("(needed to run it)")
    monkeypatch.setattr(runner, "verify", lambda *a, **k: {**fake_verify(*a, **k), "passed": False, "cosine": 0.5})
    assert list(G.verify_table(["gemm-v1"], [(256, 256, 1536)], [0], "emulated")["status"]) == ["FAILED"]


def test_summary_gathers_the_step_runs_and_writes_the_readme_table(stub, tmp_path, capsys):
    exp = paths.experiments_dir()
    with results.run_dir(G.step_run_name("gemm-v1"), root=exp) as rd:
        G.step_report("gemm-v1", shapes="256,256,1536", mode="emulated", out_dir=rd.path, render=False)
    rep = G.summary_report(tmp_path / "summary-run", "emulated", shapes=["256,256,1536", "512,256,1536"],
                           render=False)
    corr = rep.correctness.set_index("variant")
    # One shape only: every check passed, but the gate wants >= 2 shapes, one multi-tile.
    assert corr.at["gemm-v1", "status"] == "passed (too few shapes)" and corr.at["gemm-v1", "checks"] == 1
    assert corr.at["gemm-v2-no-wide_epilogue", "checks"] == 2  # verified by the summary itself, at both shapes
    assert corr.at["gemm-v2-no-wide_epilogue", "status"] == "passed"
    assert "gemm-v0" not in corr.index  # no run of its notebook: not claimed
    assert list(rep.ladder_table().columns) == ["gemm-v0", "gemm-v1", "gemm-v2"]
    assert list(rep.leave_one_out_table()["variant"].unique()) == ["gemm-v2-no-wide_epilogue"]
    md = (tmp_path / "summary-run" / "readme_table.md").read_text()
    assert G.main(["readme-table", "--run", str(tmp_path / "summary-run")]) == 0
    assert capsys.readouterr().out == md


def test_readme_table_is_generated_from_the_data(stub):
    metrics = stub_metrics()
    exp = G.expectation_table(metrics)
    corr = pd.DataFrame({"variant": ["gemm-v0", "gemm-v1"], "status": ["passed", "FAILED"]})
    lines = G.readme_table(metrics, exp, corr).splitlines()
    assert lines[0].startswith("| step | switch | intended ISA change (predecessor → step) | unified VGPRs |")
    assert lines[0].endswith("| correct |")
    assert lines[2].startswith("| gemm-v0 | – | baseline |") and lines[2].endswith("| passed |")
    assert lines[3].startswith("| gemm-v1 | wide_epilogue | "
                               "buffer_store_2B 4 → 0 ✓; buffer_store_16B 0 → 1 ✓ |")
    assert lines[3].endswith("| FAILED |")
    assert lines[4].startswith("| gemm-v2 | static_prologue | insts_before_first_buffer_load 3 → 1 ✓; "
                               "int_div_idiom 2 → 0 ✓ |") and lines[4].endswith("| not run |")
    assert "| 256 |" in lines[2]  # loop s_waitcnt per 4 K-steps, from the data
    assert len([ln for ln in lines if ln.startswith("| gemm-")]) == 3  # leave-one-out rows stay out
    assert "8192x8192x8192" in lines[-1] and "not measured" in lines[-1]


def test_readme_markers_and_cli_errors(stub, tmp_path, capsys):
    text = f"intro\n{G.README_BEGIN}\nold table\n{G.README_END}\noutro\n"
    new = G.replace_between_markers(text, "| a |\n")
    assert new == f"intro\n{G.README_BEGIN}\n| a |\n{G.README_END}\noutro\n"
    assert G.replace_between_markers(new, "| a |") == new  # idempotent
    with pytest.raises(G.StudyError, match="markers"):
        G.replace_between_markers("no markers", "| a |")
    assert G.main(["readme-table"]) == 2  # no summary run under this experiments folder
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no summary run" in err


# --------------------------------------------------------------------------------------------- figures


def _svg(fig_name: str, run: Path, root: Path) -> bytes:
    """Draw a registered figure from ``run`` (as figures.render does) and save the SVG only (fast)."""
    import matplotlib.pyplot as plt

    plots.apply_style()
    fig = figures.FIGURES[fig_name].draw(run)
    try:
        return plots.savefig(fig, fig_name, root=root, formats=("svg",))[0].read_bytes()
    finally:
        plt.close(fig)


def test_figures_draw_from_stored_tables_deterministically(stub, tmp_path):
    run = tmp_path / "run"
    G.step_report("gemm-v2", shapes="256,256,1536", mode="emulated", out_dir=run, render=False)
    summ = tmp_path / "summary"
    G.summary_report(summ, "static", render=False)
    cases = [("gemm/02_static_prologue_isa_diff", run), ("gemm/02_static_prologue_speed", run),
             ("gemm/ladder_metrics", summ), ("gemm/leave_one_out", summ), ("gemm/published_tflops", summ)]
    first = {}
    for name, source in cases:
        first[name] = _svg(name, source, tmp_path / "a")
        assert first[name] == _svg(name, source, tmp_path / "b"), name
    # The figure follows the stored table, not the live code: change the table, the figure changes.
    diff, prov = results.read_table(run / "isa_diff.parquet")
    diff.loc[diff["metric"] == "int_div_idiom", "variant"] = 1.0
    results.write_table(diff[[c for c in ("metric", "baseline", "variant", "delta", "ratio")]],
                        run / "isa_diff.parquet", prov)
    assert _svg(cases[0][0], run, tmp_path / "c") != first[cases[0][0]]


def test_speed_figure_uses_measured_tflops_when_present(stub, tmp_path):
    from mxfp4_ablation import provenance

    run = tmp_path / "run"
    G.step_report("gemm-v1", shapes="256,256,1536", mode="emulated", out_dir=run, render=False)
    published_svg = _svg("gemm/01_wide_epilogue_speed", run, tmp_path / "a")
    rows = [dict(variant=v, baseline="gemm-v0", pair="gemm-v1 vs gemm-v0", arm=a, shape="8192x8192x8192",
                 method="events", tflops=t, tflops_low=t - 20, tflops_high=t + 20, ratio=0.9, ratio_low=0.88,
                 ratio_high=0.92, verdict="faster") for v, a, t in (("gemm-v0", "A", 4600.0), ("gemm-v1", "B", 5000.0))]
    results.write_table(pd.DataFrame(rows), run / "tflops.parquet", provenance.collect("device"))
    assert _svg("gemm/01_wide_epilogue_speed", run, tmp_path / "b") != published_svg


def test_measure_pairs_with_the_simulated_harness(stub, tmp_path, monkeypatch):
    from mxfp4_ablation import bench
    from mxfp4_ablation.bench import launchers, timing

    speed = {"gemm-v0": 110.0, "gemm-v1": 100.0}
    monkeypatch.setattr(launchers, "launcher_for",
                        lambda name, shape: functools.partial(timing.sim_case, base_us=speed[name], noise=0.002,
                                                              flops=2.0 * 256 * 256 * 1536))
    settings = bench.HarnessSettings(pairs=8, processes=1, fresh_processes=False, backend="sim", methods=("events",),
                                     n_resamples=200, progress=False, warmup_pairs=1, launches=2)
    table = G.measure_pairs([("gemm-v0", "gemm-v1")], [(256, 256, 1536)], 8, tmp_path, settings=settings)
    assert set(zip(table["variant"], table["arm"])) == {("gemm-v0", "A"), ("gemm-v1", "B")}
    row = table.set_index("arm").loc["B"]
    assert row["ratio"] == pytest.approx(100 / 110, rel=0.05) and row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    assert row["tflops_low"] <= row["tflops"] <= row["tflops_high"]
    assert (tmp_path / "tflops.parquet").is_file() and (tmp_path / "timing-summary.parquet").is_file()


# --------------------------------------------------------------------------------------------- the real ladder


def test_every_real_ladder_step_has_its_notebook_and_figures():
    for name in G.ladder_names():
        nb = paths.REPO_ROOT / "notebooks" / "gemm" / f"{G.step_slug(name)}.py"
        assert nb.is_file(), nb
        assert re.search(rf'^variant = "{re.escape(name)}"$', nb.read_text(), re.M), nb
        assert f"gemm/{G.step_slug(name)}_speed" in figures.FIGURES
        if variants.get(name).predecessor:
            assert f"gemm/{G.step_slug(name)}_isa_diff" in figures.FIGURES
            assert G.step_switch(name) in G.EXPECTATIONS
            assert G.intro_markdown(name).count("* ") >= 2  # the seed's claim and mechanism, from the docstring
    assert {G.step_switch(n) for n in G.leave_one_out_names()} <= set(G.EXPECTATIONS)


#: Claims of the seed that our kernel does not reproduce on the ISA, found by this study (none since
#: b_carry's "before" waits per B1 fragment like FlyDSL's: 40 -> 8 per 4 K steps). Listed so that a change
#: either way (a fix, or another switch regressing) fails this test.
KNOWN_MISSES = set()


@pytest.mark.slow
def test_every_switch_moves_its_metric_on_the_real_kernel():
    """Compiles all 14 GEMM variants at the ISA shape (minutes on a cold cache)."""
    exp = G.expectation_table(G.ladder_metrics(G.ISA_SHAPE))
    wrong = exp.loc[~exp["as_intended"], ["switch", "metric", "variant", "before", "after", "direction"]]
    assert set(zip(wrong["switch"], wrong["metric"])) == KNOWN_MISSES, wrong.to_string()
    assert len(exp) == sum(len(G.EXPECTATIONS[G.step_switch(n)]) for n in G.gemm_variants() if G.step_switch(n))


@pytest.mark.slow
def test_emulated_shapes_run_the_k_loop_in_every_variant():
    metrics = G.ladder_metrics(G.EMULATED_SHAPES[0])
    loops = metrics[metrics["metric"] == "loop_mfma"].set_index("variant")["value"]
    assert (loops >= G.MFMA_PER_K_STEP).all(), loops.to_string()


def test_device_mode_step_says_why_nothing_was_timed(stub, tmp_path, monkeypatch):
    from mxfp4_ablation.bench import launchers

    def no_launcher(name, shape):
        raise launchers.LauncherError(f"variant {name!r} (mxfp4_ablation.kernels.gemm) has no launcher yet")

    monkeypatch.setattr(launchers, "launcher_for", no_launcher)
    rep = G.step_report("gemm-v1", shapes="8192,8192,8192", mode="device", out_dir=tmp_path, render=False)
    assert list(rep.verify["backend"]) == ["device"] and list(rep.verify["status"]) == ["passed"]
    assert rep.measured is None and "has no launcher yet" in rep.speed_note
    assert not (tmp_path / "tflops.parquet").exists()
