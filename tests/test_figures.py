"""The figure registry: every figure is redrawn by `make figures` from stored tables alone, with FlyDSL
unimportable, byte for byte the same as the notebooks drew it; notebooks name figures, never list them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from mxfp4_ablation import figures, paths, results, runner, variants
from mxfp4_ablation.studies import gemm as G

from test_study_gemm import FakeArtifact, fake_verify, stub_variants, synthetic_isa

#: A meta-path finder that makes `import flydsl` fail, then `make figures`' entry point.
BLOCKED_REDRAW = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "flydsl" or name.startswith("flydsl."):
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, Block())
import runpy
try:
    runpy.run_module("mxfp4_ablation.figures", run_name="__main__")  # what `make figures` runs (python -m)
    rc = 0
except SystemExit as stop:
    rc = stop.code
assert not [m for m in sys.modules if m.startswith(("flydsl", "mxfp4_ablation.kernels"))], "a kernel was imported"
sys.exit(rc)
"""


@pytest.fixture
def stored_runs(monkeypatch, tmp_path):
    """A step run of gemm step 2 and a summary run (stub variants, synthetic ISA), plus the committed
    harness-validation data, under a temporary experiments folder."""
    vs = stub_variants()
    monkeypatch.setattr(variants, "all_variants", lambda: dict(vs))
    monkeypatch.setattr(G, "compile_variants",
                        lambda names, shape: [FakeArtifact(synthetic_isa(vs[n].switches)) for n in names])
    monkeypatch.setattr(runner, "verify", fake_verify)
    exp = tmp_path / "experiments"
    shutil.copytree(paths.REPO_ROOT / "experiments" / "harness-validation", exp / "harness-validation")
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(exp))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    # The stub's gemm-v2 stored under the real step 2's run name: figures draw from tables, not kernels.
    with results.run_dir("gemm--02_serpentine") as rd:
        G.step_report("gemm-v2", shapes="256,256,1536", mode="emulated", out_dir=rd.path, render=False,
                      modelled=False)
    with results.run_dir(G.SUMMARY_RUN) as rd:
        G.summary_report(rd.path, "static", render=False)
    return tmp_path


def test_make_figures_redraws_from_stored_tables_with_flydsl_blocked(stored_runs):
    figures.load()
    expected = ["gemm/02_serpentine_isa_diff", "gemm/02_serpentine_speed", "gemm/ladder_metrics",
                "gemm/leave_one_out", "gemm/published_tflops", "harness/planted_deltas",
                "harness/process_spread", "harness/cache_effect", "harness/k_linearity"]
    first = {}
    for name in expected:
        source = figures.FIGURES[name].source()
        first[name] = figures.render(name, source, root=stored_runs / "first")[0].read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", BLOCKED_REDRAW], env=env, capture_output=True, text=True,
                          timeout=300)
    # rc 1: some figures have no run here (the other steps, the MoE half of the summary); none may crash.
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for name in expected:
        svg = stored_runs / "figures" / f"{name}.svg"
        assert svg.is_file(), (name, proc.stdout)
        assert svg.read_bytes() == first[name], name  # deterministic, and the same as a notebook's render
        assert (stored_runs / "figures" / f"{name}.png").is_file()


def test_every_figure_has_a_source_and_a_unique_name():
    reg = figures.load()
    assert len(reg) == len({f.name for f in reg.values()})
    for fig in reg.values():
        assert (fig.run is None) != (fig.data is None), fig.name
        assert re.fullmatch(r"[a-z0-9_]+/[A-Za-z0-9_]+", fig.name), fig.name
    with pytest.raises(ValueError, match="exactly one of run= and data="):
        figures.figure("x/y")
    with pytest.raises(ValueError, match="unknown figure"):
        figures.render("gemm/no_such_figure", paths.REPO_ROOT)


def test_notebooks_refer_to_figures_by_registered_name():
    """No `report.figures[0]`-style positions; every figure name a notebook renders is registered."""
    reg = figures.load()
    for nb in sorted((paths.REPO_ROOT / "notebooks").rglob("*.py")):
        text = nb.read_text()
        assert not re.search(r"figures\[\d+\]", text), nb
        for name in re.findall(r"""(?:render|show|figure)\(\s*["']([a-z0-9_]+/[A-Za-z0-9_]+)["']""", text):
            assert name in reg, (nb, name)
        assert "plots.savefig" not in text, f"{nb}: draws a figure outside the registry"
