"""The walking skeleton end to end: notebook -> compile -> ISA metrics -> table -> figure."""

import pytest

from mxfp4_ablation import figures, notebooks, results


def test_walkthrough_notebook_runs_and_draws_its_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "experiments"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MODE", "static")
    run = notebooks.run("notebooks/00_walkthrough.py")
    assert run.parent == tmp_path / "experiments" and run.name.endswith("-00_walkthrough")
    assert (run / "00_walkthrough.ipynb").is_file()
    metrics, prov = results.read_table(run / "metrics.parquet")
    assert prov["mode"] == "static" and prov["arch"] == "gfx950"
    mfma = metrics[(metrics.kernel.str.startswith("mfma tile")) & (metrics.metric == "mfma")]["value"]
    assert list(mfma) == [2.0]  # K=256: two K steps of one scaled MFMA each
    svg = tmp_path / "figures" / "walkthrough" / "opcode_mix.svg"
    first = svg.read_bytes()
    # `make figures` redraws from the stored data alone, byte for byte.
    figures.render("walkthrough/opcode_mix", run)
    assert svg.read_bytes() == first


def test_failed_notebook_leaves_no_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "experiments"))
    bad = tmp_path / "bad.py"
    bad.write_text("# %%\nraise RuntimeError('boom')\n")
    monkeypatch.setattr(notebooks, "run_name", lambda source: "bad")
    with pytest.raises(Exception, match="boom"):
        notebooks.run(bad)
    leftovers = [p.name for p in (tmp_path / "experiments").iterdir()]
    assert leftovers == [".failed"] and (tmp_path / "experiments" / ".failed" / "bad.ipynb").is_file()


def test_notebook_runner_rejects_non_notebooks(tmp_path):
    with pytest.raises(ValueError, match="not a jupytext"):
        notebooks.run(tmp_path / "missing.py")
