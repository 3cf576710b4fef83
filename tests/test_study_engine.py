"""The generic study engine beyond what the GEMM and MoE tests cover: every speed value carries its
kind, the modelled slot (a pluggable source; "not available" with its reason when absent), the fidelity
slot, the README renderer over several studies, and the CLI's user errors."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from mxfp4_ablation import results
from mxfp4_ablation.studies import cli, readme, speed
from mxfp4_ablation.studies import gemm as G

from test_study_gemm import _svg, stub  # noqa: F401  (the fixture: stub ladder, synthetic ISA, stubbed runner)


def fake_model(variant, shape):
    if variant == "gemm-v0":
        raise NotImplementedError("the model has no gemm-v0 yet")
    return {"label": "modelled", "model_version": "t-1", "clock_ghz": 2.4, "kernel": {"tflops": 4321.0, "us": 12.5}}


def test_modelled_speed_is_labelled_and_says_why_when_missing(stub, tmp_path, monkeypatch):
    monkeypatch.setattr(speed, "MODELLED_SOURCES", [])  # the timing model is merged: say why with none registered
    got, why = speed.modelled("gemm-v1", (8192, 8192, 8192))
    assert got is None and why
    monkeypatch.setattr(speed, "MODELLED_SOURCES", [fake_model])
    rep = G.step_report("gemm-v1", shapes="256,256,1536", out_dir=tmp_path / "run", render=False, modelled=True)
    table, prov = results.read_table(tmp_path / "run" / "speed.parquet")
    assert set(table["kind"]) == {"measured", "modelled", "published"}
    assert set(rep.speed_table()["kind"]) == set(speed.KINDS)
    measured = rep.speed_table("measured")
    assert list(measured["available"]) == [False] and measured["detail"].iloc[0].startswith("not available: no gfx950")
    mod = rep.speed_table("modelled").set_index(["variant", "metric"])
    assert mod.at[("gemm-v1", "tflops"), "value"] == 4321.0 and mod.at[("gemm-v1", "us"), "value"] == 12.5
    assert mod.at[("gemm-v1", "tflops"), "detail"] == "model t-1, 2.4 GHz"
    assert mod.loc["gemm-v0", "detail"].iloc[0] == "not available: the model has no gemm-v0 yet"
    pub = rep.speed_table("published")
    assert len(pub) == 12 and pub["detail"].str.contains("FlyDSL PR #990").all()
    with pytest.raises(speed.StudyError, match="unknown speed kind"):
        rep.speed_table("guessed")
    # The step's speed figure shows that step alone: its modelled change vs its predecessor per shape,
    # labelled modelled (here the predecessor has no modelled number: "n/a", no bar).
    import matplotlib.pyplot as plt

    from mxfp4_ablation import figures

    fig = figures.FIGURES["gemm/01_wide_epilogue_speed"].draw(tmp_path / "run")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]
    plt.close(fig)
    assert len(fig.axes) == 1 and any("n/a (not modelled)" in t for t in texts), texts
    assert any("model t-1, 2.4 GHz" in t for t in texts), texts
    svg = _svg("gemm/01_wide_epilogue_speed", tmp_path / "run", tmp_path / "a")
    plain = G.step_report("gemm-v1", shapes="256,256,1536", out_dir=tmp_path / "plain", render=False)
    assert plain.speed_table("modelled").empty
    assert _svg("gemm/01_wide_epilogue_speed", tmp_path / "plain", tmp_path / "b") != svg
    # A source that labels its numbers anything but "modelled" is refused, not shown.
    monkeypatch.setattr(speed, "MODELLED_SOURCES", [lambda v, s: {"label": "measured", "tflops": 1.0}])
    with pytest.raises(speed.StudyError, match="not 'modelled'"):
        speed.modelled("gemm-v1", (1, 1, 1))


def test_step_report_cells_a_reader_tweaks(stub, tmp_path):
    rep = G.step_report("gemm-v2", shapes="256,256,1536", out_dir=tmp_path / "run", render=False)
    loop = rep.hot_loop()
    assert list(loop.columns) == ["gemm-v1", "gemm-v2"] and loop.iloc[0, 0].startswith("v_mfma")
    assert set(rep.changed(only_intended=True).index) == {"insts_before_first_buffer_load", "int_div_idiom"}
    assert "int_div_idiom" in rep.changed().index
    assert rep.isa_text("gemm-v2").startswith("\t.type")


def test_fidelity_is_a_pluggable_section(stub, tmp_path, monkeypatch):
    rep = G.summary_report(tmp_path / "a", "static", render=False)
    assert rep.fidelity is None and "not asked for" in rep.fidelity_note
    table = pd.DataFrame({"seed": ["flydsl-990"], "pair": ["first~before"], "metric": ["vgpr"], "diff_pct": [3.0]})
    monkeypatch.setattr(G.STUDY, "spec", dataclasses.replace(G.SPEC, fidelity=lambda study: (table, "")))
    rep = G.summary_report(tmp_path / "b", "static", render=False, fidelity=True)
    assert rep.fidelity.equals(table)
    assert results.read_table(tmp_path / "b" / "fidelity.parquet")[0]["diff_pct"].tolist() == [3.0]
    monkeypatch.setattr(G.STUDY, "spec", G.SPEC)
    rep = G.summary_report(tmp_path / "c", "static", render=False, fidelity=True)
    assert (rep.fidelity is None) == bool(rep.fidelity_note)


def test_readme_update_fills_every_study_with_markers(stub, tmp_path, capsys):
    run = tmp_path / "summary"
    G.summary_report(run, "static", render=False)
    target = tmp_path / "README.md"
    begin, end = readme.markers("gemm")
    target.write_text(f"# x\n{begin}\nold\n{end}\n")
    assert cli.main(["readme-table", "--update", str(target), "--run", str(run)]) == 0
    text = target.read_text()
    assert "| gemm-v1 | wide_epilogue |" in text and "old" not in text
    assert cli.main(["readme-table", "--update", str(tmp_path / "none.md"), "--run", str(run)]) == 2
    target.write_text("no markers here\n")
    assert cli.main(["readme-table", "--update", str(target), "--run", str(run)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("studies: ") and "markers" in err[-1]
