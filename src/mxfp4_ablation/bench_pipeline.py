"""Profile of the notebook pipeline: per notebook, wall and CPU time by phase (a benchmark, not a test).

    python -m mxfp4_ablation.bench_pipeline [NOTEBOOK ...] [--label after] [--out experiments/bench-pipeline]
        [--cache cold|warm] [--model CASE ...]

Each notebook is executed once in a fresh Python process (the way a papermill kernel runs it: its code
cells in order, with the runner's ``out_dir`` / ``mode`` parameters; run folders and figures go into a
scratch directory, never into the checkout) with the pipeline's expensive calls wrapped, and its time
split into exclusive phases:

* ``imports``  -- torch, pandas, matplotlib, FlyDSL and the study modules, imported up front;
* ``compile``  -- ``toolchain.compile`` (the offline gfx950 compile; a cache hit is cheap);
* ``inputs``   -- the kernel modules' ``make_inputs`` and ``reference``;
* ``emulate``  -- ``gfx950emu.launch`` without timing (the correctness runs);
* ``model``    -- ``gfx950emu.launch(timing=True)`` (the timing model);
* ``figures``  -- ``matplotlib`` ``savefig``;
* ``other``    -- the rest (tables, parquet, the notebook's own code).

``kernel_start`` is measured apart: a papermill run of a one-cell notebook (kernel start-up, papermill's
own overhead, the interpreter) -- every notebook of ``make reproduce`` pays it once.  ``--model CASE``
(``VARIANT@SHAPE``, e.g. ``gemm-v4@8192,8192,8192``) adds a timing-model run of the CLI
(``mxfp4-ablation model ... --sample 1 --no-cache``) with its wall, user + sys CPU time and peak RSS.

Every number is **measured** on this machine (wall clock and ``getrusage`` CPU time of the process and
its children; peak RSS = the largest process); the table records the machine, the date, the load
average before and after and the cache state (``cold``: a fresh empty ``MXFP4_CACHE``; ``warm``: the
one in the environment).  On a shared machine wall time depends on the other load: user + sys CPU time
is the steadier figure.  Output: ``<out>/<label>.csv`` and ``<out>/<label>.md``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import paths

PHASES = ("imports", "compile", "inputs", "emulate", "model", "figures", "other")
DEFAULT_NOTEBOOKS = ("notebooks/gemm/04_scale_prefetch.py", "notebooks/moe/22_gemm2_unsigned_div.py",
                     "notebooks/summary.py")
COLUMNS = ["label", "what", "cache", "wall_s", "user_s", "sys_s", "max_rss_mb"] + [f"{p}_s" for p in PHASES] + \
          ["compile_calls", "compile_hits", "model_calls", "model_hits", "emulate_calls", "rc"]


# ------------------------------------------------------------------------------------ phases ----
class _Phases:
    """Exclusive time per phase: a nested call's time counts for the inner phase only."""

    def __init__(self):
        self.t = dict.fromkeys(PHASES, 0.0)
        self.stack = []       # [phase, start, child time]
        self.counts = {"compile_calls": 0, "compile_hits": 0, "model_calls": 0, "model_hits": 0, "emulate_calls": 0}

    def wrap(self, phase, fn, pick=None):
        def inner(*a, **kw):
            ph = pick(a, kw) if pick else phase
            self.stack.append([ph, time.perf_counter(), 0.0])
            try:
                return fn(*a, **kw)
            finally:
                name, t0, child = self.stack.pop()
                dt = time.perf_counter() - t0
                self.t[name] += dt - child
                if self.stack:
                    self.stack[-1][2] += dt
        inner.__wrapped__ = fn
        return inner


def _instrument(ph: _Phases) -> None:
    import importlib

    import matplotlib.figure

    import gfx950emu
    from gfx950emu import machine

    from . import modelled, toolchain, variants

    real_compile = toolchain.compile

    def compile_counted(*a, **kw):
        art = real_compile(*a, **kw)
        ph.counts["compile_calls"] += 1
        ph.counts["compile_hits"] += bool(getattr(art, "cached", False))
        return art
    toolchain.compile = ph.wrap("compile", compile_counted)

    def launch_phase(a, kw):
        if kw.get("timing"):
            ph.counts["model_calls"] += 1
            return "model"
        ph.counts["emulate_calls"] += 1
        return "emulate"
    gfx950emu.launch = machine.launch = ph.wrap(None, machine.launch, launch_phase)

    real_model_isa = modelled.model_isa

    def model_isa_counted(*a, **kw):
        out = real_model_isa(*a, **kw)
        ph.counts["model_hits"] += bool(out.get("cached"))
        return out
    modelled.model_isa = model_isa_counted
    for name in sorted(set(variants.KERNEL_MODULES.values())):
        mod = importlib.import_module(name)
        for fn in ("make_inputs", "reference"):
            if hasattr(mod, fn):
                setattr(mod, fn, ph.wrap("inputs", getattr(mod, fn)))
    matplotlib.figure.Figure.savefig = ph.wrap("figures", matplotlib.figure.Figure.savefig)


def _cells(source: Path) -> list[tuple[bool, str]]:
    """The code cells of a jupytext percent notebook as ``(is the parameters cell, code)``."""
    cells, cur, code, params = [], [], False, False
    for line in source.read_text().splitlines():
        if line.startswith("# %%"):
            if code and cur:
                cells.append((params, "\n".join(cur)))
            cur, code, params = [], "[markdown]" not in line, "parameters" in line
            continue
        if code:
            cur.append(line)
    if code and cur:
        cells.append((params, "\n".join(cur)))
    return cells


def _phases_child(notebook: str, out_json: str) -> int:
    """(In a fresh process.) Import, instrument, run the notebook's code cells; write the phase times."""
    t_start = time.perf_counter()
    ph = _Phases()
    ph.stack.append(["imports", t_start, 0.0])
    import matplotlib

    matplotlib.use("Agg")
    import pandas  # noqa: F401
    import torch  # noqa: F401

    try:
        import flydsl.compiler  # noqa: F401
    except ImportError:
        pass
    from . import studies  # noqa: F401
    from .studies import gemm, moe  # noqa: F401
    from . import modes

    _instrument(ph)
    ph.t["imports"] += time.perf_counter() - t_start
    ph.stack.clear()
    run_dir = Path(tempfile.mkdtemp(prefix="bench-nb-", dir=os.environ.get("MXFP4_EXPERIMENTS")))
    mode, _ = modes.detect()
    ns = {"__name__": "__main__", "display": lambda *a, **k: None}
    t0 = time.perf_counter()
    rc = 0
    cells = _cells(Path(notebook))
    try:
        for k, (is_params, cell) in enumerate(cells):
            exec(compile(cell, f"{notebook}[cell {k}]", "exec"), ns)
            if is_params:                     # what papermill injects after the parameters cell
                ns.update(out_dir=str(run_dir), mode=mode)
    except Exception as err:  # a benchmark reports a failing notebook, it does not hide it
        print(f"bench_pipeline: {notebook} failed in a cell: {type(err).__name__}: {err}", file=sys.stderr)
        rc = 1
    total = time.perf_counter() - t0
    ph.t["other"] = max(0.0, total - sum(v for k, v in ph.t.items() if k not in ("imports", "other")))
    Path(out_json).write_text(json.dumps({"phases": ph.t, "counts": ph.counts, "rc": rc}))
    return rc


# ------------------------------------------------------------------------------------ running ----
def _measure(cmd: list[str], env: dict, cwd: Path | None = None, log: Path | None = None) -> dict:
    """Run ``cmd`` (in ``cwd``, default the checkout); wall, user + sys CPU (the process and its children)
    and the peak RSS of the largest; its output's tail, or with ``log`` its whole output appended there."""
    t0 = time.perf_counter()
    sink = open(log, "ab") if log is not None else subprocess.PIPE
    try:
        proc = subprocess.Popen(cmd, env=env, cwd=str(cwd or paths.REPO_ROOT), stdout=sink, stderr=subprocess.STDOUT)
        out = proc.stdout.read() if log is None else b""
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        if log is not None:
            sink.close()
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 2), "user_s": round(ru.ru_utime, 2), "sys_s": round(ru.ru_stime, 2),
            "max_rss_mb": round(ru.ru_maxrss / 1024, 1), "rc": os.waitstatus_to_exitcode(status),
            "output": out.decode(errors="replace")[-2000:]}


def bench_notebook(notebook: str, env: dict, label: str, cache: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_json = f.name
    m = _measure([sys.executable, "-m", "mxfp4_ablation.bench_pipeline", "_phases", notebook, out_json], env)
    try:
        data = json.loads(Path(out_json).read_text())
    except (OSError, ValueError):
        data = {"phases": {}, "counts": {}, "rc": m["rc"]}
    finally:
        Path(out_json).unlink(missing_ok=True)
    if m["rc"]:
        print(m["output"], file=sys.stderr)
    row = {"label": label, "what": notebook, "cache": cache, **{k: m[k] for k in ("wall_s", "user_s", "sys_s",
                                                                                    "max_rss_mb", "rc")}}
    row.update({f"{p}_s": round(data["phases"].get(p, 0.0), 2) for p in PHASES})
    row.update(data.get("counts", {}))
    return row


_EMPTY_NOTEBOOK = '''# %% tags=["parameters"]
out_dir = None
mode = "emulated"

# %%
print("kernel up")
'''


def _kernel_start_child(tmp: str) -> int:
    """(In a fresh process.) papermill a one-cell notebook on the study's Jupyter kernel, as
    ``mxfp4_ablation.notebooks.run`` does (jupytext -> ipynb -> papermill), without a run folder."""
    import jupytext
    import papermill

    from .notebooks import KERNEL_NAME, _kernel_manager_class

    src = Path(tmp) / "bench_empty.ipynb"
    jupytext.write(jupytext.reads(_EMPTY_NOTEBOOK, fmt="py:percent"), src)
    papermill.execute_notebook(str(src), str(Path(tmp) / "out.ipynb"), parameters={"out_dir": tmp},
                               kernel_name=KERNEL_NAME, language="python", progress_bar=False,
                               kernel_manager_class=_kernel_manager_class())
    return 0


def bench_kernel_start(env: dict, label: str, cache: str) -> dict:
    """A papermill run of a one-cell notebook (what every notebook pays before its first cell)."""
    with tempfile.TemporaryDirectory(prefix="bench-empty-") as tmp:
        m = _measure([sys.executable, "-m", "mxfp4_ablation.bench_pipeline", "_kernel_start", tmp], env)
    return {"label": label, "what": "kernel_start (papermill, one-cell notebook)", "cache": cache,
            **{k: m[k] for k in ("wall_s", "user_s", "sys_s", "max_rss_mb", "rc")}}


def bench_model(case: str, env: dict, label: str, cache: str) -> dict:
    variant, _, shape = case.partition("@")
    cmd = [sys.executable, "-m", "mxfp4_ablation.cli", "compile", variant, "--shape", shape]
    subprocess.run(cmd, env=env, cwd=str(paths.REPO_ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m = _measure([sys.executable, "-m", "mxfp4_ablation.cli", "model", variant, "--shape", shape, "--sample", "1",
                  "--no-cache"], env)
    return {"label": label, "what": f"model {variant} --shape {shape} --sample 1 --no-cache (compile cached)",
            "cache": cache, **{k: m[k] for k in ("wall_s", "user_s", "sys_s", "max_rss_mb", "rc")}}


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = int(next(x for x in Path("/proc/meminfo").read_text().splitlines()
                       if x.startswith("MemTotal")).split()[1]) // (1024 * 1024)
    except (OSError, StopIteration, ValueError):
        mem = "?"
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def write(rows: list[dict], out: Path, label: str, meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{label}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    cols = ["what", "cache", "wall_s", "user_s", "sys_s", "max_rss_mb"] + [f"{p}_s" for p in PHASES] + \
           ["compile_calls", "compile_hits", "model_calls", "model_hits", "emulate_calls"]
    lines = [f"# Pipeline profile `{label}` (measured)", "",
             f"Measured {meta['date']} on {meta['machine']}; checkout {meta['commit']}; command: `{meta['command']}`.",
             f"Load average before / after: {meta['load_before']} / {meta['load_after']} (the machine is shared: "
             "wall time includes waiting for the CPU; user + sys is the steadier figure).", "",
             "Phases are exclusive seconds of wall time inside the notebook process (see "
             "`python -m mxfp4_ablation.bench_pipeline --help`); wall / user / sys / max RSS are the whole process "
             "with its children (compile workers), measured.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
    (out / f"{label}.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_phases"]:
        return _phases_child(argv[1], argv[2])
    if argv[:1] == ["_kernel_start"]:
        return _kernel_start_child(argv[1])
    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.bench_pipeline", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help=f"notebooks to profile (default: {', '.join(DEFAULT_NOTEBOOKS)})")
    ap.add_argument("--label", default="profile", help="name of the output files")
    ap.add_argument("--out", default="experiments/bench-pipeline", help="where the CSV and markdown go")
    ap.add_argument("--cache", default="cold",
                    help="cold: one fresh MXFP4_CACHE for this whole run; warm: the environment's; a folder: that "
                         "one (cold when empty: rerun with the same folder to measure a warm rerun)")
    ap.add_argument("--model", action="append", default=[], metavar="VARIANT@SHAPE",
                    help="also time `mxfp4-ablation model VARIANT --shape SHAPE --sample 1 --no-cache`")
    ap.add_argument("--no-kernel-start", action="store_true", help="skip the one-cell papermill run")
    ns = ap.parse_args(argv)
    notebooks = ns.notebooks or list(DEFAULT_NOTEBOOKS)
    for nb in notebooks:
        if not (paths.REPO_ROOT / nb).is_file():
            print(f"bench_pipeline: no notebook {nb}", file=sys.stderr)
            return 2
    for case in ns.model:
        if "@" not in case:
            print(f"bench_pipeline: --model takes VARIANT@SHAPE, got {case!r}", file=sys.stderr)
            return 2
    scratch = tempfile.mkdtemp(prefix="bench-pipeline-")
    env = dict(os.environ, MXFP4_EXPERIMENTS=f"{scratch}/experiments", MXFP4_FIGURES=f"{scratch}/figures",
               PYTHONPATH=os.pathsep.join([str(paths.REPO_ROOT / "src")] + ([os.environ["PYTHONPATH"]]
                                                                              if os.environ.get("PYTHONPATH") else [])))
    Path(env["MXFP4_EXPERIMENTS"]).mkdir(parents=True)
    cache = ns.cache
    if ns.cache == "cold":
        env["MXFP4_CACHE"] = f"{scratch}/cache"
    elif ns.cache != "warm":
        folder = Path(ns.cache).resolve()
        cache = "cold (empty folder)" if not folder.is_dir() or not any(folder.iterdir()) else "warm (folder reused)"
        folder.mkdir(parents=True, exist_ok=True)
        env["MXFP4_CACHE"] = str(folder)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(paths.REPO_ROOT), capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=str(paths.REPO_ROOT),
                           capture_output=True, text=True).stdout.strip()
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_line(),
            "commit": commit + ("+local changes" if dirty else ""), "load_before": "%.2f %.2f %.2f" % os.getloadavg(),
            "command": "python -m mxfp4_ablation.bench_pipeline " + " ".join(argv)}
    rows = []
    if not ns.no_kernel_start:
        rows.append(bench_kernel_start(env, ns.label, cache))
        print(rows[-1], flush=True)
    for nb in notebooks:
        rows.append(bench_notebook(nb, env, ns.label, cache))
        print(rows[-1], flush=True)
    for case in ns.model:
        rows.append(bench_model(case, env, ns.label, cache))
        print(rows[-1], flush=True)
    meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    write(rows, paths.REPO_ROOT / ns.out if not Path(ns.out).is_absolute() else Path(ns.out), ns.label, meta)
    return 0 if all(r.get("rc", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
