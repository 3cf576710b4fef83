"""The "chaos" check of issue #19: what its author did to break the results, done again, asserting that
nothing stale is ever served. ``make chaos`` runs every case (``pytest -m chaos``); the fast ones are
in the CI subset, the slow ones (a real notebook through papermill) are also marked ``slow``.

* a parameter / data file edited: the notebooks that read it are planned by ``make -n`` (and only they);
* a run SIGKILLed mid-notebook: the results read afterwards are the last complete run's, and the next
  run removes the killed one's folder;
* bytes flipped in a stored table: reading it, ``make readme`` and ``make figures`` say which file is
  corrupt instead of serving it;
* a step notebook run by hand (no ``out_dir``): ``figures/`` is untouched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from mxfp4_ablation import figures, paths, results

pytestmark = pytest.mark.chaos

NOTEBOOKS = sorted(p.relative_to(paths.REPO_ROOT).as_posix() for p in (paths.REPO_ROOT / "notebooks").rglob("*.py")
                   if ".ipynb_checkpoints" not in p.parts)


# ------------------------------------------------------------------ an edited parameter file is planned

@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    """Every notebook stamped as run (by a no-op stand-in runner), in a scratch stamp folder."""
    tmp_path = tmp_path_factory.mktemp("stamped")
    if not all(map(lambda t: subprocess.run(["which", t], capture_output=True).returncode == 0, ("make", "flock"))):
        pytest.skip("needs make and flock")
    setup = tmp_path / "setup-done"
    setup.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    base = ["make", "--no-print-directory", f"SETUP_STAMP={setup}", f"STAMP_DIR={tmp_path}/stamps",
            f"PYTHON={sys.executable}"]

    def make(*args):
        return subprocess.run(base + [f"RUN_NOTEBOOK=echo RUN", *args], cwd=paths.REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    first = make("reproduce")
    assert first.returncode == 0, first.stderr
    assert make("-n", "_reproduce").stdout.count("echo RUN") == 0  # up to date
    return make


def _planned(make) -> set[str]:
    out = make("-n", "_reproduce").stdout
    return {line.split("echo RUN ", 1)[1].strip() for line in out.splitlines() if line.startswith("echo RUN ")}


@pytest.mark.parametrize("rel, expect_some, never", [
    ("src/gfx950emu/timing/gfx950.toml", "notebooks/gemm/01_agpr_acc.py", "notebooks/harness_validation.py"),
    ("src/gfx950emu/valu.py", "notebooks/moe/22_gemm2_unsigned_div.py", "notebooks/harness_validation.py"),
    ("experiments/reference/gemm_published.csv", "notebooks/gemm/05_b_carry.py", "notebooks/harness_validation.py"),
])
def test_an_edited_input_file_plans_the_notebooks_that_read_it(stamped, rel, expect_some, never):
    path = paths.REPO_ROOT / rel
    st = path.stat()
    try:
        os.utime(path, ns=(st.st_atime_ns, time.time_ns() + 5_000_000_000))  # "edited" (content kept)
        planned = _planned(stamped)
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert expect_some in planned and never not in planned, sorted(planned)
    if rel.endswith("gfx950.toml"):  # every notebook that models timing
        assert {"notebooks/summary.py", "notebooks/timing_model.py"} <= planned


# ------------------------------------------------------------------ SIGKILL mid-run, then read results

KILLED = """
import sys, time
import pandas as pd
from mxfp4_ablation import results
with results.run_dir("gemm--01_agpr_acc") as rd:
    results.write_table(pd.DataFrame({"tflops": [1.0]}), rd / "speed.parquet", {"mode": "static"})
    (rd / "late.parquet").write_bytes(b"PAR1 half")
    print("written", flush=True)
    time.sleep(120)
"""


def test_sigkill_mid_run_serves_the_last_complete_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path))
    with results.run_dir("gemm--01_agpr_acc") as good:
        results.write_table(pd.DataFrame({"tflops": [229.0]}), good / "speed.parquet", {"mode": "static"})
    proc = subprocess.Popen([sys.executable, "-c", KILLED], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "MXFP4_EXPERIMENTS": str(tmp_path)})
    try:
        assert proc.stdout.readline().strip() == "written"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    (partial,) = tmp_path.glob("*.partial")
    assert results.latest_run("gemm--01_agpr_acc") == good.final
    assert [t["tflops"].tolist() for t in results.latest_tables(["gemm--01_agpr_acc"], "speed.parquet")] == [[229.0]]
    with results.run_dir("next"):
        pass
    assert not partial.exists(), "the killed run's folder was not cleaned by the next run"


SLEEPY_WRITER = """# %% tags=["parameters"]
out_dir = None
mode = None
# %%
import os, time
import pandas as pd
from mxfp4_ablation import results
results.write_table(pd.DataFrame({"tflops": [3183.0]}), os.path.join(out_dir, "speed.parquet"), {"mode": "static"})
open(os.path.join(os.environ["CHAOS_FLAG"]), "w").write("written")
time.sleep(120)
"""

RUN_IT = """
import sys
from mxfp4_ablation import notebooks
notebooks.run_name = lambda source: "gemm--01_agpr_acc"
sys.exit(notebooks.main(["run", sys.argv[1]]))
"""


@pytest.mark.slow
def test_sigkill_of_the_real_notebook_runner_serves_the_last_complete_run(tmp_path):
    """The same through papermill: the runner SIGKILLed while its kernel is mid-notebook."""
    exp = tmp_path / "exp"
    env = {**os.environ, "MXFP4_EXPERIMENTS": str(exp), "MODE": "static", "CHAOS_FLAG": str(tmp_path / "flag")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MXFP4_EXPERIMENTS", str(exp))
        with results.run_dir("gemm--01_agpr_acc") as good:
            results.write_table(pd.DataFrame({"tflops": [229.0]}), good / "speed.parquet", {"mode": "static"})
        nb = tmp_path / "writer.py"
        nb.write_text(SLEEPY_WRITER)
        proc = subprocess.Popen([sys.executable, "-c", RUN_IT, str(nb)], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(1200):
                if (tmp_path / "flag").is_file():
                    break
                assert proc.poll() is None, "the runner exited early"
                time.sleep(0.1)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert list(exp.glob("*.partial")), "expected the killed run's partial folder"
        assert results.latest_run("gemm--01_agpr_acc") == good.final
        tables = results.latest_tables(["gemm--01_agpr_acc"], "speed.parquet")
        assert [t["tflops"].tolist() for t in tables] == [[229.0]]  # not the killed run's 3183


# ------------------------------------------------------------------ flipped bytes in a stored table

def test_flipped_bytes_in_a_summary_table_are_never_served(tmp_path, monkeypatch):
    from mxfp4_ablation.studies import get, readme
    from mxfp4_ablation.studies.tables import StudyError

    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    study = get("gemm")
    with results.run_dir("summary") as rd:
        for key in ("ladder", "expectations", "correctness"):
            results.write_table(pd.DataFrame({"variant": ["gemm-v0"], "metric": ["vgpr"], "value": [229.0]}),
                                rd / study.summary_table(key), {"mode": "static"})
    table = rd.final / study.summary_table("ladder")
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0x20
    table.write_bytes(bytes(data))
    with pytest.raises(results.CorruptTable, match="is corrupt"):
        results.read_table(table)
    doc = tmp_path / "README.md"
    begin, end = readme.markers("gemm")
    doc.write_text(f"{begin}\nOLD\n{end}\n")
    with pytest.raises(StudyError, match=rf"{table.name} is corrupt.*README.md was not changed"):
        readme.update(doc, [study], rd.final)
    assert doc.read_text() == f"{begin}\nOLD\n{end}\n"


def test_make_figures_names_a_corrupt_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    with results.run_dir("chaos-figure") as rd:
        results.write_table(pd.DataFrame({"x": [1.0, 2.0]}), rd / "t.parquet", {"mode": "static"})
    (rd.final / "t.parquet").write_bytes((rd.final / "t.parquet").read_bytes()[:-7] + b"garbage")

    def draw(run_dir):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot(results.read_table(run_dir / "t.parquet")[0]["x"])
        return fig

    monkeypatch.setattr(figures, "load", lambda: figures.FIGURES)
    monkeypatch.setattr(figures, "FIGURES", {"chaos/x": figures.Figure("chaos/x", "chaos-figure", None, draw)})
    assert figures.main() == 1
    out = capsys.readouterr().out
    assert "chaos/x" in out and "t.parquet is corrupt" in out
    assert not (tmp_path / "figures").exists()


# ------------------------------------------------------------------ an interactive run leaves figures/ alone

def _draw_line(run_dir):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2])
    return fig


def test_figures_of_an_interactive_run_never_go_to_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(figures, "load", lambda: figures.FIGURES)
    monkeypatch.setitem(figures.FIGURES, "chaos/line", figures.Figure("chaos/line", "x", None, _draw_line))
    scratch = tmp_path / "cache" / "scratch" / "gemm-v1"  # where engine.step_report writes without out_dir
    scratch.mkdir(parents=True)
    drawn = figures.render("chaos/line", scratch)
    assert not (tmp_path / "figures").exists(), "an interactive run wrote into figures/"
    assert all(p.is_relative_to(figures.scratch_root()) for p in drawn)
    with results.run_dir("x") as rd:  # the pipeline's run folder publishes
        published = figures.render("chaos/line", rd.path)
    assert all(p.is_relative_to(tmp_path / "figures") for p in published)


@pytest.mark.slow
def test_a_step_notebook_run_by_hand_leaves_figures_untouched(tmp_path):
    """The GEMM agpr_acc step executed as JupyterLab would (no out_dir), static mode: figures/ unchanged."""
    import jupytext
    import papermill

    figs = tmp_path / "figures"
    figs.mkdir()
    env_backup = dict(os.environ)
    os.environ.update(MXFP4_FIGURES=str(figs), MXFP4_EXPERIMENTS=str(tmp_path / "exp"))
    try:
        nb = jupytext.read(paths.REPO_ROOT / "notebooks" / "gemm" / "01_agpr_acc.py")
        src = tmp_path / "in.ipynb"
        jupytext.write(nb, src)
        papermill.execute_notebook(str(src), str(tmp_path / "out.ipynb"), parameters={"mode": "static"},
                                   kernel_name="mxfp4-ablation", cwd=str(paths.REPO_ROOT / "notebooks" / "gemm"),
                                   progress_bar=False)
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    assert not list(figs.rglob("*")), "the interactive run wrote figures into figures/"
    assert not (tmp_path / "exp").exists() or not [p for p in (tmp_path / "exp").iterdir() if results.is_published(p)]
