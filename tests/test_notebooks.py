"""The notebooks and their runner, cheaply: every notebook's imports, names and parameters resolve
(without executing it); step notebooks are their template; the Makefile reruns a notebook only when its
own inputs change, runs -j2 with the summary last, refuses a second concurrent run; an interrupted run
kills its kernel and publishes nothing. One small step notebook is executed in a slow test."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxfp4_ablation import notebooks, paths, sources, variants
from mxfp4_ablation.studies import STUDIES, get, reports, step_notebook

NOTEBOOKS = notebooks.notebook_sources()
STEP_NOTEBOOKS = [nb for nb in NOTEBOOKS if nb.parent.name in STUDIES]
#: Names a notebook's code may use on these objects: the engine's report classes.
REPORTS = {"step": reports.StepReport, "report": reports.SummaryReport, "moe_report": reports.SummaryReport}


def _code(nb: Path) -> ast.Module:
    return ast.parse(nb.read_text(), str(nb))


def _parameters(nb: Path) -> dict:
    """The names the notebook's ``parameters`` cell assigns (papermill overrides those)."""
    text = nb.read_text()
    cell = text.split('# %% tags=["parameters"]', 1)[1].split("# %%", 1)[0]
    return {t.id for node in ast.parse(cell).body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)}


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.REPO_ROOT)))
def test_every_notebook_resolves_without_running(nb):
    tree = _code(nb)
    params = _parameters(nb)
    assert {"out_dir", "mode"} <= params, "the runner passes out_dir and mode"
    modules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mxfp4_ablation":
            mod = importlib.import_module(node.module)
            for alias in node.names:
                obj = getattr(mod, alias.name, None)
                if obj is None:
                    obj = importlib.import_module(f"{node.module}.{alias.name}")
                modules[alias.asname or alias.name] = obj
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mxfp4_ablation":
                    importlib.import_module(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = modules.get(node.value.id) or REPORTS.get(node.value.id)
            if owner is not None:
                fields = {f.name for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else set()
                assert hasattr(owner, node.attr) or node.attr in fields, f"{node.value.id}.{node.attr} does not exist"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in modules:
            func = getattr(modules[node.func.value.id], node.func.attr)
            if callable(func) and not inspect.isclass(func):
                try:
                    sig = inspect.signature(func)
                except (TypeError, ValueError):
                    continue
                sig.bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords if k.arg})


@pytest.mark.parametrize("nb", STEP_NOTEBOOKS, ids=lambda p: str(p.relative_to(paths.REPO_ROOT)))
def test_a_step_notebook_carries_its_title_variant_and_sentence_and_calls_the_sections(nb):
    parts = step_notebook.parse(nb.read_text())
    assert parts["variant"] in variants.all_variants() and parts["title"] and parts["sentence"]
    called = {node.func.attr for node in ast.walk(_code(nb)) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "nb"}
    assert called == {"run", "intro", "correctness", "isa", "hot_loop", "speed", "modelled"}
    assert len(nb.read_text().splitlines()) < 60, "a step notebook carries only what is its own"


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_the_switch_records_are_the_step_list(name):
    """One step notebook per ladder rung, named by the rung's slug, and no other."""
    study = get(name)
    on_disk = sorted(p.stem for p in (paths.REPO_ROOT / "notebooks" / name).glob("*.py"))
    assert on_disk == sorted(study.step_slug(n) for n in study.ladder_names())
    for n in study.ladder_names():
        text = (paths.REPO_ROOT / "notebooks" / name / f"{study.step_slug(n)}.py").read_text()
        assert step_notebook.parse(text)["variant"] == n


def test_adding_a_step_writes_its_notebook_from_the_template(tmp_path, monkeypatch):
    from mxfp4_ablation.studies import gemm

    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    path = step_notebook.new_step(gemm.STUDY, "gemm-v3", "GEMM ladder step 3 · `g2s_m0`",
                                  "One sentence on what it does.")
    assert path == tmp_path / "notebooks" / "gemm" / "03_g2s_m0.py"
    assert step_notebook.parse(path.read_text()) == {"title": "GEMM ladder step 3 · `g2s_m0`",
                                                     "sentence": "One sentence on what it does.", "variant": "gemm-v3"}
    with pytest.raises(ValueError, match="exists"):
        step_notebook.new_step(gemm.STUDY, "gemm-v3", "t", "s")


# --------------------------------------------------------------------------------------------- dependencies


def _deps(rel: str) -> set[str]:
    return {p.relative_to(paths.REPO_ROOT).as_posix() for p in notebooks.notebook_dependencies(paths.REPO_ROOT / rel)}


def test_a_notebook_depends_on_its_family_and_shared_code_only():
    gemm, moe = _deps("notebooks/gemm/01_agpr_acc.py"), _deps("notebooks/moe/11_gemm1_int64_abi.py")
    harness, summary = _deps("notebooks/harness_validation.py"), _deps("notebooks/summary.py")
    kernels = {sources._module_file(m).relative_to(paths.REPO_ROOT).as_posix() for m in variants.KERNEL_MODULES.values()}
    gemm_kernel = "src/mxfp4_ablation/kernels/gemm/__init__.py"
    assert gemm_kernel in gemm and not {k for k in kernels if "moe" in k} & gemm
    steps = "src/mxfp4_ablation/kernels/gemm/steps/"
    # a step notebook runs its variant and the predecessor: the steps they switch on, not the later ones
    assert f"{steps}01_agpr_acc.py" in gemm and f"{steps}02_serpentine.py" not in gemm
    last = _deps("notebooks/gemm/09_static_prologue.py")
    assert f"{steps}08_wide_epilogue.py" in last  # found by its package, not imported by name
    assert {f"{steps}__init__.py", "src/mxfp4_ablation/kernels/gemm/stages.py"} <= gemm & last
    # a MoE step notebook runs its own gemm's kernel
    assert "src/mxfp4_ablation/kernels/moe_gemm1.py" in moe and "src/mxfp4_ablation/kernels/moe_gemm2.py" not in moe
    assert "src/mxfp4_ablation/kernels/moe_common.py" in moe and gemm_kernel not in moe
    assert "src/mxfp4_ablation/kernels/moe_gemm2.py" in _deps("notebooks/moe/21_gemm2_int64_abi.py")
    assert kernels <= summary
    for shared in ("src/mxfp4_ablation/studies/engine.py", "src/mxfp4_ablation/runner.py",
                   "src/mxfp4_ablation/isa.py"):
        assert shared in gemm and shared in moe
    assert not {p for p in harness if "/kernels/" in p or "gfx950emu" in p}
    assert "experiments/harness-validation/README.md" in harness
    assert "experiments/reference/gemm_published.csv" in gemm
    # package data is an input too: the timing model's parameter file (issue #19, finding 1)
    assert "src/gfx950emu/timing/gfx950.toml" in gemm and "src/gfx950emu/timing/gfx950.toml" in moe
    # Every family's kernel module is its study notebooks' input, from shapes.toml's groups.
    named = set().union(*(notebooks.family_modules(str(nb.relative_to(paths.REPO_ROOT))) for nb in STEP_NOTEBOOKS))
    assert set(variants.KERNEL_MODULES.values()) <= named
    rules = notebooks.make_rules("S").splitlines()[1:]
    assert len(rules) == len(NOTEBOOKS) and all(r.startswith("S/") for r in rules)


# --------------------------------------------------------------------------------------------- Makefile

FAKE_RUN = """#!/bin/sh
echo "start $1" >> "$LOG"; sleep "${FAKE_SLEEP:-0.1}"; echo "end $1" >> "$LOG"
"""


@pytest.fixture
def fake_make(tmp_path):
    if shutil.which("make") is None or shutil.which("flock") is None:
        pytest.skip("needs make and flock")
    run = tmp_path / "run.sh"
    run.write_text(FAKE_RUN)
    run.chmod(0o755)
    setup = tmp_path / "setup-done"
    setup.touch()
    log = tmp_path / "log"

    def make(*args, env=None, background=False):
        cmd = ["make", "--no-print-directory", *args, f"SETUP_STAMP={setup}", f"STAMP_DIR={tmp_path}/stamps",
               f"RUN_NOTEBOOK={run}", f"PYTHON={sys.executable}"]
        e = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        e.update(LOG=str(log), **(env or {}))
        if background:
            return subprocess.Popen(cmd, cwd=paths.REPO_ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        return subprocess.run(cmd, cwd=paths.REPO_ROOT, env=e, capture_output=True, text=True, timeout=300)

    return make, log, tmp_path


def test_make_j2_reproduce_runs_the_summary_last_and_then_nothing(fake_make):
    make, log, _ = fake_make
    proc = make("-j2", "reproduce")
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    starts = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("start")]
    assert sorted(starts) == sorted(str(p.relative_to(paths.REPO_ROOT)) for p in NOTEBOOKS)
    assert lines[-2:] == ["start notebooks/summary.py", "end notebooks/summary.py"]
    assert any(a.startswith("start") and b.startswith("start") for a, b in zip(lines, lines[1:])), "ran 2 at once"
    log.write_text("")
    assert make("reproduce").returncode == 0 and log.read_text() == ""  # up to date: nothing reruns


def test_a_second_make_reproduce_is_refused_with_a_clear_message(fake_make):
    make, log, tmp = fake_make
    first = make("reproduce", env={"FAKE_SLEEP": "3"}, background=True)
    try:
        for _ in range(300):  # the first detects the mode (imports torch) before it takes the lock
            if log.is_file() and log.read_text():
                break
            time.sleep(0.1)
        second = make("reproduce")
        assert second.returncode != 0
        assert "another 'make reproduce' is running" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_the_refusal_of_a_second_reproduce_is_one_line(fake_make):
    make, log, tmp = fake_make
    lock = tmp / "stamps" / "reproduce.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(["flock", str(lock), "sleep", "60"])
    try:
        for _ in range(50):
            if subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0:
                break
            time.sleep(0.1)
        second = make("reproduce")
        assert second.returncode != 0 and "another 'make reproduce' is running" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert not log.exists()
    finally:
        holder.kill()
        holder.wait()


def _session_alive(sid: int) -> list[int]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat: the session id
            alive.append(int(proc.name))
    return alive


def test_sigterm_to_makes_pid_alone_stops_the_whole_run_and_frees_the_lock(fake_make, tmp_path):
    """What CI runners and supervisors send: SIGTERM to make's own PID, not to its group."""
    make, log, tmp = fake_make
    cmd = ["make", "--no-print-directory", "reproduce", f"SETUP_STAMP={tmp}/setup-done",
           f"STAMP_DIR={tmp}/stamps", f"RUN_NOTEBOOK={tmp}/run.sh", f"PYTHON={sys.executable}"]
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(LOG=str(log), FAKE_SLEEP="60")
    proc = subprocess.Popen(cmd, cwd=paths.REPO_ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if log.is_file() and log.read_text():
                break
            time.sleep(0.1)
        assert log.read_text(), "no notebook started"
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        for _ in range(100):
            if not _session_alive(proc.pid):
                break
            time.sleep(0.1)
        assert not _session_alive(proc.pid), "the sub-make or a notebook outlived SIGTERM to make"
        assert subprocess.run(["flock", "-n", str(tmp / "stamps" / "reproduce.lock"), "true"]).returncode == 0
        assert "end" not in log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_reproduce_runs_in_parallel_by_default(fake_make):
    make, log, _ = fake_make
    proc = make("reproduce", "JOBS=3", env={"FAKE_SLEEP": "0.3"})
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert lines[-2:] == ["start notebooks/summary.py", "end notebooks/summary.py"]
    assert any(a.startswith("start") and b.startswith("start") for a, b in zip(lines, lines[1:])), "ran 1 at a time"


def test_internal_targets_take_the_lock_and_dry_runs_plan(fake_make):
    make, log, tmp = fake_make
    direct = make("_reproduce")
    assert direct.returncode == 2 and "_reproduce is internal: run 'make reproduce'" in direct.stderr
    assert len(direct.stderr.strip().splitlines()) == 1 and not log.exists()
    dry = make("-n", "_reproduce")
    assert dry.returncode == 0 and "notebooks/summary.py" in dry.stdout and not log.exists()


def test_concurrent_deps_regeneration_does_not_collide(fake_make):
    make, log, tmp = fake_make
    procs = [make("-n", "_reproduce", background=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    deps = (tmp / "stamps" / "deps.mk").read_text().splitlines()
    assert len(deps) == len(NOTEBOOKS) + 1 and not list((tmp / "stamps").glob("*.tmp"))


@pytest.mark.parametrize("mode, needle", [("bogus", "MODE='bogus' is not one of device, emulated, static"),
                                          ("device", "MODE=device needs a gfx950 GPU")])
def test_a_bad_mode_is_one_line_before_anything_runs(fake_make, mode, needle):
    from mxfp4_ablation import modes

    if mode == "device" and modes.visible_gpu() is not None:
        pytest.skip("a GPU is visible")
    make, log, _ = fake_make
    proc = make("reproduce", env={"MODE": mode})
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not log.exists()


def test_a_copied_checkouts_venv_is_rebuilt(fake_make):
    """The setup stamp records the checkout's path: another path means another checkout's venv."""
    make, log, tmp = fake_make
    stamp = tmp / "setup-done"
    stamp.write_text("/somewhere/else/mxfp4-ablation\n")
    proc = make("-n", "setup")
    assert "was made for /somewhere/else/mxfp4-ablation, not this checkout" in proc.stdout
    assert "-m venv --clear" in proc.stdout and f'echo "{paths.REPO_ROOT}" >' in proc.stdout
    stamp.write_text(f"{paths.REPO_ROOT}\n")
    assert "rebuilding" not in make("-n", "setup").stdout


def test_make_lab_prints_its_url_and_starts_as_root(fake_make):
    make, log, tmp = fake_make
    proc = make("-n", "lab")
    assert "--no-browser" in proc.stdout
    assert ("--allow-root" in proc.stdout) == (os.geteuid() == 0)


def test_pytest_takes_src_from_this_checkout():
    import mxfp4_ablation

    assert Path(mxfp4_ablation.__file__).resolve().is_relative_to((Path(__file__).parents[1] / "src").resolve())
    out = subprocess.run([sys.executable, "-c", "import mxfp4_ablation; print(mxfp4_ablation.__file__)"],
                         capture_output=True, text=True).stdout
    assert Path(out.strip()).resolve().is_relative_to((Path(__file__).parents[1] / "src").resolve())


# --------------------------------------------------------------------------------------------- the runner

SLEEPY = """# %% tags=["parameters"]
out_dir = None
mode = None
pid_file = None
# %%
import os, time
open(pid_file, "w").write(str(os.getpid()))
time.sleep(120)
open(os.path.join(out_dir, "late.txt"), "w").write("never")
"""

RUN_SLEEPY = """
import sys
from mxfp4_ablation import notebooks
notebooks.run_name = lambda source: "sleepy"
sys.exit(notebooks.main(["run", sys.argv[1], "-p", "pid_file", sys.argv[2]]))
"""


def test_ctrl_c_kills_the_kernel_within_seconds_and_publishes_nothing(tmp_path):
    nb, pid_file = tmp_path / "sleepy.py", tmp_path / "kernel.pid"
    nb.write_text(SLEEPY)
    env = {**os.environ, "MXFP4_EXPERIMENTS": str(tmp_path / "exp"), "MODE": "static",
           "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", RUN_SLEEPY, str(nb), str(pid_file)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if pid_file.is_file() and pid_file.read_text():
                break
            if proc.poll() is not None:
                pytest.fail(f"the runner exited early: {proc.communicate()}")
            time.sleep(0.1)
        kernel = int(pid_file.read_text())
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=10)
        assert time.monotonic() - start < 5 and rc == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    alive = Path(f"/proc/{kernel}").exists() and "zombie" not in Path(f"/proc/{kernel}/status").read_text().lower()
    assert not alive, "the kernel outlived the interrupted run"
    assert not (tmp_path / "exp").exists() or not list((tmp_path / "exp").iterdir())  # no run, .partial, .failed


def test_one_run_of_a_notebook_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path))
    nb = tmp_path / "x.py"
    nb.write_text("# %%\n1\n")
    monkeypatch.setattr(notebooks, "run_name", lambda source: "x")
    with notebooks._lock(nb, "x"):
        with pytest.raises(notebooks.NotebookError, match=r"x is already running \(another process holds"):
            notebooks.run(nb)


@pytest.mark.slow
def test_one_small_step_notebook_executes(tmp_path, monkeypatch):
    """The GEMM baseline step in static mode (one compile at 8192^3; cached after the first run)."""
    from mxfp4_ablation import results

    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "experiments"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MODE", "static")
    run = notebooks.run(paths.REPO_ROOT / "notebooks" / "gemm" / "00_baseline.py")
    assert run.name.endswith("-gemm--00_baseline") and (run / "00_baseline.ipynb").is_file()
    speed, prov = results.read_table(run / "speed.parquet")
    assert set(speed["kind"]) == {"measured", "published"} and prov["mode"] == "static"  # modelled: its own section
    assert not speed.loc[speed["kind"] == "measured", "available"].any()
    assert (tmp_path / "figures" / "gemm" / "00_baseline_speed.svg").is_file()


def test_papermill_reads_every_parameter_of_the_step_template(caplog):
    """papermill parses each parameter line (one `=` per line: a comment holding another `=`, like
    'TP=4', makes it warn 'Unable to parse line N' and drop that parameter from its inspection)."""
    import logging

    from papermill.translators import PythonTranslator

    text = step_notebook.render("x-v1", "t", "s")
    cell = text.split('# %% tags=["parameters"]\n', 1)[1].split("\n# %%", 1)[0]
    names = [line.split("=", 1)[0].strip() for line in cell.splitlines() if line.strip() and not line.startswith("#")]
    with caplog.at_level(logging.WARNING, logger="papermill"):
        found = [p.name for p in PythonTranslator.inspect({"source": cell})]
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert found == names == ["out_dir", "mode", "variant"]  # the rest are the section functions' arguments


def test_a_published_run_redraws_its_figures_from_its_final_tables(monkeypatch, tmp_path):
    """What a run publishes is what `make figures` would draw from it: a figure a cell drew before a later
    cell stored more of its data is drawn again from the final run folder (a missing table: skipped)."""
    from mxfp4_ablation import figures, notebooks

    drawn = []
    monkeypatch.setattr(figures, "FIGURES", {})
    monkeypatch.setattr(figures, "load", lambda: figures.FIGURES)
    figures.figure("t/mine", run="gemm--01_x")(lambda run_dir: None)
    figures.figure("t/other", run="gemm--02_y")(lambda run_dir: None)
    figures.figure("t/missing", run="gemm--01_x")(lambda run_dir: None)

    def render(name, run_dir=None, root=None):
        if name == "t/missing":
            raise FileNotFoundError("no result table")
        drawn.append((name, run_dir))
        return [tmp_path / f"{name}.svg"]

    monkeypatch.setattr(figures, "render", render)
    out = notebooks.redraw_figures("gemm--01_x", tmp_path)
    assert drawn == [("t/mine", tmp_path)] and out == [tmp_path / "t/mine.svg"]


def _empty_figure_registry(monkeypatch, tmp_path):
    """Figures, run folders and caches under ``tmp_path``, and a figure registry with nothing in it."""
    from mxfp4_ablation import figures

    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "fig"))
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(figures, "FIGURES", {})
    monkeypatch.setattr(figures, "load", lambda: figures.FIGURES)


def test_a_figure_the_run_drew_from_its_final_data_is_not_drawn_again(monkeypatch, tmp_path):
    """At a run's end (its last cell, in the .partial folder) and after it, a figure drawn when the run
    folder already held every data file it holds now is left as drawn; one drawn before a later cell
    wrote a table (a step's speed figure before its modelled section: the drawing only checked that
    table's absence), one whose file changed since, and any figure of another run folder are drawn again."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from mxfp4_ablation import figures, results

    _empty_figure_registry(monkeypatch, tmp_path)
    calls = []

    def draw(tag):
        def drawer(run_dir):
            calls.append(tag)
            fig, ax = plt.subplots()
            ax.plot(results.read_table(run_dir / "t.parquet")[0]["x"])
            if (run_dir / "later.parquet").is_file():  # drawn differently once the later table exists
                ax.set_title("with the later table")
            return fig
        return drawer

    figures.figure("t/early", run="gemm--01_x")(draw("early"))
    figures.figure("t/late", run="gemm--01_x")(draw("late"))
    partial = tmp_path / "exp" / "20260101T000000Z-abc-gemm--01_x.k3y.partial"
    partial.mkdir(parents=True)
    (partial / ".owner").write_text("")  # a run in progress holds its lock file, gone once published
    results.write_table(pd.DataFrame({"x": [1, 2]}), partial / "t.parquet", {"mode": "emulated"})
    figures.render("t/early", partial)
    results.write_table(pd.DataFrame({"y": [1]}), partial / "later.parquet", {"mode": "emulated"})
    figures.render("t/late", partial)
    calls.clear()
    notebooks.redraw_figures("gemm--01_x", partial, keep_current=True)  # the runner's last cell (publish_cell)
    assert calls == ["early"]
    final = partial.with_name("20260101T000000Z-abc-gemm--01_x")
    (partial / ".owner").unlink()
    partial.rename(final)
    (final / "notebook.ipynb").write_text("{}")  # the executed notebook, copied in last: no data
    calls.clear()
    assert notebooks.redraw_figures("gemm--01_x", final, keep_current=True) == [] and calls == []
    notebooks.redraw_figures("gemm--01_x", final)  # make figures' way: everything
    assert calls == ["early", "late"]
    calls.clear()
    svg = tmp_path / "fig" / "t" / "late.svg"
    svg.write_text(svg.read_text() + "<!-- edited -->")
    notebooks.redraw_figures("gemm--01_x", final, keep_current=True)
    assert calls == ["late"]
    calls.clear()
    other = final.with_name("20260102T000000Z-abc-gemm--01_x")
    shutil.copytree(final, other)  # another run with the same tables: drawn again from it
    notebooks.redraw_figures("gemm--01_x", other, keep_current=True)
    assert calls == ["early", "late"]


def test_a_figure_is_drawn_again_only_when_what_it_read_or_looked_for_changed(monkeypatch, tmp_path):
    """A drawing's record holds what it read of its run folder (opened, stat'ed, listed): a table a
    later cell adds that the drawing never looked at leaves it current (the summary drew most of its
    figures twice); a change to a table it read, a new file in a folder it listed, or a drawing that
    touched nothing there (the whole folder counts then) draws it again."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from mxfp4_ablation import figures, results

    _empty_figure_registry(monkeypatch, tmp_path)
    calls = []

    def drawer(tag, read):
        def draw(run_dir):
            calls.append(tag)
            fig, ax = plt.subplots()
            read(run_dir)
            return fig
        return draw

    figures.figure("t/table", run="gemm--01_x")(drawer("table", lambda d: results.read_table(d / "t.parquet")))
    figures.figure("t/listing", run="gemm--01_x")(drawer("listing", lambda d: sorted((d / "m").glob("*.parquet"))))
    figures.figure("t/nothing", run="gemm--01_x")(drawer("nothing", lambda d: None))
    run = tmp_path / "exp" / "20260101T000000Z-abc-gemm--01_x"
    (run / "m").mkdir(parents=True)
    results.write_table(pd.DataFrame({"x": [1]}), run / "t.parquet", {"mode": "emulated"})
    for name in ("t/table", "t/listing", "t/nothing"):
        figures.render(name, run)
    calls.clear()
    results.write_table(pd.DataFrame({"y": [1]}), run / "unrelated.parquet", {"mode": "emulated"})
    notebooks.redraw_figures("gemm--01_x", run, keep_current=True)
    assert calls == ["nothing"]  # it read nothing of the folder: any new data file counts
    calls.clear()
    results.write_table(pd.DataFrame({"y": [2]}), run / "m" / "a.parquet", {"mode": "emulated"})
    notebooks.redraw_figures("gemm--01_x", run, keep_current=True)
    assert calls == ["listing", "nothing"]
    calls.clear()
    results.write_table(pd.DataFrame({"x": [1, 2]}), run / "t.parquet", {"mode": "emulated"})
    notebooks.redraw_figures("gemm--01_x", run, keep_current=True)
    assert calls == ["table", "nothing"]
    calls.clear()
    assert notebooks.redraw_figures("gemm--01_x", run, keep_current=True) == [] and calls == []


def test_make_reproduce_passes_the_mode_it_detected_once(monkeypatch):
    """`make reproduce` detects the mode once (it imports torch) and passes it on; MODE still wins, and a
    malformed value is ignored (detected again)."""
    from mxfp4_ablation import modes

    monkeypatch.delenv("MODE", raising=False)
    monkeypatch.setenv(modes.DETECTED_ENV, "emulated\tno GPU visible; verifying in the gfx950emu emulator")
    monkeypatch.setattr(modes, "visible_gpu", lambda: pytest.fail("detected again"))
    assert modes.detect() == ("emulated", "no GPU visible; verifying in the gfx950emu emulator")
    monkeypatch.setenv("MODE", "static")
    assert modes.detect()[0] == "static"
    monkeypatch.delenv("MODE")
    monkeypatch.setenv(modes.DETECTED_ENV, "warp-drive\tbecause")
    monkeypatch.setattr(modes, "visible_gpu", lambda: None)
    assert modes.detect()[0] in ("emulated", "static")
    out = subprocess.run([sys.executable, "-m", "mxfp4_ablation.notebooks", "detect-mode"], capture_output=True,
                         text=True, env={**os.environ, "MODE": "static", "PYTHONPATH": str(paths.REPO_ROOT / "src")})
    assert out.returncode == 0 and out.stdout == "static\tMODE=static set in the environment\n"


def test_a_rerun_whose_inputs_changed_only_in_comments_is_skipped(tmp_path, monkeypatch):
    """`make reproduce` passes the stamp: a comment or layout edit of a code input reruns nothing; a code
    edit, an edit of the notebook's own text (its markdown cells are comments) or a run by hand does."""
    import shutil

    import papermill

    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "fig"))
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    code = tmp_path / "src" / "k.py"
    code.parent.mkdir()
    code.write_text('"""doc"""\nX = 1\n')
    nb = tmp_path / "notebooks" / "x.py"
    nb.parent.mkdir()
    nb.write_text("# %%\n1\n")
    monkeypatch.setattr(notebooks, "notebook_dependencies", lambda source: [code])
    monkeypatch.setattr(notebooks, "redraw_figures", lambda name, run_dir, **kw: [])
    ran = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda src, out, **kw: (ran.append(1), shutil.copy(src, out)))
    stamp = tmp_path / "stamps" / "x.done"
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 1
    code.write_text('"""doc"""\n# a comment\n\nX = 1  # still one\n')
    assert notebooks.run(nb, stamp=stamp) is None and len(ran) == 1
    for text in ('"""reworded doc"""\nX = 1\n', '"""reworded doc"""\nX = 2\n'):  # docstrings render: they count
        code.write_text(text)
        assert notebooks.run(nb, stamp=stamp) is not None
    nb.write_text("# %% [markdown]\n# new words\n# %%\n1\n")
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 4
    assert notebooks.run(nb) is not None and len(ran) == 5  # by hand: always runs
    shutil.rmtree(tmp_path / "exp")  # the stamped run is gone: it runs again
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 6


def test_an_edit_of_builder_code_that_keeps_every_compile_reruns_nothing(tmp_path, monkeypatch):
    """A run records its compiles (target, params, arch, code digest: the kernel's log through
    MXFP4_COMPILE_LOG). When only kernel builder files changed since, the runner compiles them again and
    skips the run if each gives the code it gave; a changed code, a changed Switch record, a changed file
    that is not builder code, or a log that does not know every compile, reruns it."""
    import shutil
    import types

    import papermill

    from mxfp4_ablation import toolchain
    from mxfp4_ablation.kernels import gemm

    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setenv("MXFP4_FIGURES", str(tmp_path / "fig"))
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    (tmp_path / "src").mkdir()
    other, builder = tmp_path / "src" / "k.py", tmp_path / "src" / "step.py"
    other.write_text("X = 1\n")
    builder.write_text("Y = 1\n")
    nb = tmp_path / "notebooks" / "x.py"
    nb.parent.mkdir()
    nb.write_text("# %%\n1\n")
    monkeypatch.setattr(notebooks, "notebook_dependencies", lambda source: [other, builder])
    monkeypatch.setattr(notebooks, "redraw_figures", lambda name, run_dir, **kw: [])
    monkeypatch.setattr(gemm, "builder_sources", lambda: {builder})
    code = {"now": "c1"}  # what compiling the recorded request gives now
    log_lines = [{"target": "m:f", "params": {"K": 256, "b_carry": True}, "arch": "gfx950"}]

    def execute(src, out, **kw):  # the kernel compiles (and logs) as a notebook would
        ran.append(1)
        with open(os.environ[toolchain.COMPILE_LOG_ENV], "a") as log:
            for line in log_lines:
                log.write(json.dumps({**line, "code": code["now"]} if "target" in line else line) + "\n")
        shutil.copy(src, out)

    ran, replayed = [], []
    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr(toolchain, "compile_many", lambda requests, arch: (
        replayed.append((list(requests), arch)), [types.SimpleNamespace(code=code["now"]) for _ in requests])[1])
    monkeypatch.setattr(toolchain, "code_digest", lambda artifact: artifact.code)
    stamp = tmp_path / "stamps" / "x.done"
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 1
    assert json.loads(stamp.read_text())["compiles"] == [["m:f", {"K": 256, "b_carry": True}, "gfx950", "c1"]]
    assert os.environ.get(toolchain.COMPILE_LOG_ENV) is None  # set for the kernel only
    builder.write_text("Y = 2\n")  # builder code changed, the compile's code did not: not rerun
    assert notebooks.run(nb, stamp=stamp) is None and len(ran) == 1
    assert replayed == [([("m:f", {"K": 256, "b_carry": True})], "gfx950")]
    assert notebooks.run(nb, stamp=stamp) is None and len(replayed) == 1  # the stamp took the new inputs
    builder.write_text("Y = 3\n")
    code["now"] = "c2"  # now the code differs: it reruns
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 2
    monkeypatch.setattr(gemm, "SWITCHES", {**gemm.SWITCHES, "new": None})  # a Switch record changed: reruns
    builder.write_text("Y = 4\n")
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 3
    other.write_text("X = 2\n")  # a file that is not builder code: reruns, whatever the compiles give
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 4
    log_lines.append({"incomplete": "remote workers"})  # a log that may miss compiles proves nothing
    other.write_text("X = 3\n")
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 5
    assert json.loads(stamp.read_text())["compiles"] is None
    builder.write_text("Y = 6\n")
    assert notebooks.run(nb, stamp=stamp) is not None and len(ran) == 6


def test_a_compile_log_that_cannot_prove_every_compile_reads_as_none(tmp_path):
    from mxfp4_ablation import toolchain

    log = tmp_path / "log.jsonl"
    a = {"target": "m:f", "params": {"K": 256}, "arch": "gfx950", "code": "c1"}
    assert toolchain.read_compile_log(log) == []  # nothing compiled
    log.write_text(json.dumps(a) + "\n" + json.dumps(a) + "\n")
    assert toolchain.read_compile_log(log) == [("m:f", {"K": 256}, "gfx950", "c1")]  # one request once
    for tail in ('{"target": "m:f", "par', json.dumps({**a, "code": "c2"}), json.dumps({"incomplete": "x"})):
        log.write_text(json.dumps(a) + "\n" + tail + "\n")  # damaged; one request, two codes; incomplete
        assert toolchain.read_compile_log(log) is None


def test_compile_many_logs_each_distinct_request_with_its_code_where_the_variable_points(tmp_path, monkeypatch):
    from mxfp4_ablation import toolchain

    art = toolchain.Artifact(target="m:f", params={}, arch="gfx950", key="k", isa="s_endpgm", kernels={"f": "s_endpgm"},
                             resources={"vgpr_unified": 8}, compile_seconds=0.0, flydsl_version="x")
    log = tmp_path / "log.jsonl"
    toolchain._log_compiles([(("m:f", {"K": 256}), "gfx950", art)])  # no variable: nothing written
    assert not log.exists()
    monkeypatch.setenv(toolchain.COMPILE_LOG_ENV, str(log))
    toolchain._log_compiles([(("m:f", {"K": 256}), "gfx950", art), (("m:f", {"K": 512}), "gfx950", art)])
    assert toolchain.read_compile_log(log) == [("m:f", {"K": 256}, "gfx950", toolchain.code_digest(art)),
                                               ("m:f", {"K": 512}, "gfx950", toolchain.code_digest(art))]
    toolchain._log_compiles([(("m:f", {"dtype": object()}), "gfx950", art)])  # cannot be replayed: incomplete
    assert toolchain.read_compile_log(log) is None
    log.unlink()
    toolchain.compile_log_incomplete("remote workers")
    assert toolchain.read_compile_log(log) is None
    log.unlink()  # a compile that bypasses the cache is logged too
    monkeypatch.setattr(toolchain, "_run_worker", lambda jobs, arch, **kw: [art for _ in jobs])
    target = "mxfp4_ablation.kernels.gemm:compile_entry"
    toolchain.compile_many([(target, {"M": 256, "N": 256, "K": 3072})], use_cache=False)
    assert toolchain.read_compile_log(log) == [(target, {"M": 256, "N": 256, "K": 3072}, "gfx950",
                                                toolchain.code_digest(art))]


def test_the_summarys_builder_skip_keys_on_the_step_runs_it_reads(tmp_path, monkeypatch):
    """A step notebook that reran (a new published run) changes the summary's second digest, so the summary
    reruns even when its own compiles give the same code; another notebook's digest does not see it."""
    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    (tmp_path / "notebooks" / "gemm").mkdir(parents=True)
    summary, step = tmp_path / notebooks.SUMMARY, tmp_path / "notebooks" / "gemm" / "05_x.py"
    for nb in (summary, step):
        nb.write_text("# %%\n1\n")
    monkeypatch.setattr(notebooks, "notebook_dependencies", lambda source: [])
    assert notebooks._read_runs(summary) == ["-"] and notebooks._read_runs(step) == []
    (tmp_path / "exp" / "20260101T000000Z-abc1234-gemm--05_x").mkdir(parents=True)
    before = notebooks._digests(summary, "emulated")
    step_before = notebooks._digests(step, "emulated")
    assert notebooks._read_runs(summary) == ["20260101T000000Z-abc1234-gemm--05_x"]
    (tmp_path / "exp" / "20260102T000000Z-abc1234-gemm--05_x").mkdir()  # the step reran
    after = notebooks._digests(summary, "emulated")
    assert after[0] == before[0] and after[1] != before[1]
    assert notebooks._digests(step, "emulated") == step_before


def test_every_run_ends_with_the_figure_publishing_cell(tmp_path, monkeypatch):
    """The runner appends one cell that redraws the run's stale figures in the notebook's own kernel
    (it no longer imports the figure code itself); the executed notebook shows it."""
    import papermill

    monkeypatch.setenv("MXFP4_EXPERIMENTS", str(tmp_path / "exp"))
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    nb = tmp_path / "notebooks" / "x.py"
    nb.parent.mkdir()
    nb.write_text("# %%\n1\n")
    monkeypatch.setattr(notebooks, "notebook_dependencies", lambda source: [])
    seen = []

    def execute(src, out, **kw):
        cells = json.loads(Path(src).read_text())["cells"]
        seen.append(cells[-1])
        shutil.copy(src, out)

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    run = notebooks.run(nb)
    (last,) = seen
    assert notebooks.PUBLISH_TAG in last["metadata"]["tags"]
    assert "_redraw('x', out_dir, keep_current=True)" in "".join(last["source"])
    assert (run / "x.ipynb").is_file()
