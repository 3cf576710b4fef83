"""``make reproduce`` from a fresh clone, and what a one-step edit costs (a benchmark, not a test).

    python -m mxfp4_ablation.bench_reproduce [--label reproduce] [--out experiments/bench-pipeline]
        [--keep FOLDER] [--step gemm/05_b_carry]

In a scratch folder (or ``--keep FOLDER``, left in place) it clones this checkout's committed HEAD (local
changes are not in the clone; the table says so), then measures, one after another:

1. ``make reproduce`` with an empty ``MXFP4_CACHE`` and no venv -- setup (venv, pip from the pip cache
   this machine has, the Jupyter kernel) included;
2. ``make reproduce`` again, nothing changed;
3. a comment added to one step's kernel file (``--step``: the GEMM step ``05_b_carry``), then
   ``make reproduce``;
4. a code edit of that file that keeps its ISA (one more module constant), then ``make reproduce``:
   what changing a switch's implementation costs the pipeline beyond the compiles themselves;
5. a code edit that changes one step's ISA (:data:`ISA_EDIT`: ``wide_epilogue`` stores its C rows in
   the other order, the same C), then ``make reproduce``: that step, the steps after it and the summary
   rerun.

Each row: wall time, user + sys CPU time of make and everything under it, the peak RSS of its largest
process (``getrusage`` of the children), the notebooks run and those skipped (inputs changed only in
comments or in builder code that compiles to the same code), and make's exit code. Every number is
**measured** on this machine; the load average before and after is recorded (on a shared machine wall
time includes waiting for the CPU). Output: ``<out>/<label>.csv`` and ``<out>/<label>.md``, and the cold
run by notebook (:func:`cold_profile`: when each started after ``make reproduce`` did, papermill's own
duration and its slowest cell, read from the executed notebooks of the clone's run folders) in
``<out>/<label>_by_notebook.csv`` and a section of the markdown.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import paths
from .bench_pipeline import _measure, machine_line

COLUMNS = ["step", "what", "wall_s", "user_s", "sys_s", "max_rss_mb", "notebooks_run", "notebooks_skipped", "rc"]
PROFILE_COLUMNS = ["notebook", "start_s", "papermill_s", "slowest_cell_s", "slowest_cell"]
#: The ISA-changing edit: (GEMM step file, text, its replacement) -- the C stores in reversed row order.
ISA_EDIT = ("08_wide_epilogue", "        for ti in range(4):\n", "        for ti in reversed(range(4)):\n")


def cold_profile(clone: Path, t0: float) -> list[dict]:
    """One row per notebook the clone published: its start (s after ``t0``, the UTC epoch at which the cold
    ``make reproduce`` started), papermill's duration and its slowest cell (first line of its source)."""
    import json
    from datetime import datetime

    rows = []
    for run in sorted((clone / "experiments").glob("2*")):
        nbs = sorted(run.glob("*.ipynb"))
        if not run.is_dir() or not nbs:
            continue
        nb = json.loads(nbs[0].read_text())
        pm = nb.get("metadata", {}).get("papermill", {})
        cells = [((c.get("metadata", {}).get("papermill", {}) or {}).get("duration") or 0.0,
                  next((ln for ln in "".join(c.get("source", "")).splitlines() if ln.strip()), ""))
                 for c in nb.get("cells", []) if c.get("cell_type") == "code"]
        slow = max(cells, default=(0.0, ""))
        start = datetime.fromisoformat(pm["start_time"]).timestamp() if pm.get("start_time") else None
        name = run.name.split("-", 2)[-1].replace("dirty-", "", 1)
        rows.append({"notebook": name, "start_s": round(start - t0, 1) if start is not None else "",
                     "papermill_s": round(float(pm.get("duration") or 0), 1), "slowest_cell_s": round(slow[0], 1),
                     "slowest_cell": slow[1][:100]})
    return sorted(rows, key=lambda r: (r["start_s"] == "", r["start_s"]))


def _counts(text: str) -> tuple[int, int]:
    """Notebooks run (``[name] done ->``) and skipped (``not rerun``) in a stretch of make's output."""
    return len(re.findall(r"^\[[^\]]+\] done -> ", text, re.M)), len(re.findall(r"^\[[^\]]+\] .*not rerun", text, re.M))


def _edits(clone: Path, step_file: Path, isa_file: Path) -> list[tuple]:
    """The measured steps: (key, what, edit) -- edit None (nothing), a text appended to ``step_file``,
    or ``(old, new)`` replaced once in ``isa_file``."""
    return [
        ("cold", "make reproduce, fresh clone, empty caches, setup included", None),
        ("again", "make reproduce again, nothing changed", None),
        ("comment", f"a comment added to {step_file.relative_to(clone)}, then make reproduce",
         "\n# bench_reproduce: a comment\n"),
        ("code", f"a code edit of {step_file.relative_to(clone)} that keeps its ISA (a module constant), "
                 "then make reproduce", "\n_BENCH_REPRODUCE_EDIT = 1\n"),
        ("isa", f"a code edit of {isa_file.relative_to(clone)} that changes its ISA (C rows stored in reversed "
                "order), then make reproduce", ISA_EDIT[1:]),
    ]


def run(clone: Path, step: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV",
                                                             "PYTHONPATH", "MXFP4_EXPERIMENTS", "MXFP4_FIGURES")}
    env["MXFP4_CACHE"] = str(clone / ".cache")
    subprocess.run(["git", "clone", "--quiet", str(paths.REPO_ROOT), str(clone)], check=True)
    log = clone.parent / f"{clone.name}.log"
    step_file = clone / "src" / "mxfp4_ablation" / "kernels" / "gemm" / "steps" / f"{Path(step).name}.py"
    if not step_file.is_file():
        raise SystemExit(f"bench_reproduce: no step file {step_file.relative_to(clone)}")
    isa_file = step_file.with_name(f"{ISA_EDIT[0]}.py")
    if not isa_file.is_file() or isa_file.read_text().count(ISA_EDIT[1]) != 1:
        raise SystemExit(f"bench_reproduce: {isa_file.relative_to(clone)} lacks the one line the ISA edit changes")
    edits = _edits(clone, step_file, isa_file)
    rows, cold = [], None
    for key, what, append in edits:
        if isinstance(append, tuple):
            isa_file.write_text(isa_file.read_text().replace(*append))
        elif append is not None:
            with open(step_file, "a") as f:
                f.write(append)
        start = log.stat().st_size if log.exists() else 0
        t0 = time.time()
        m = _measure(["make", "--no-print-directory", "reproduce"], env, cwd=clone, log=log)
        if key == "cold":
            cold = cold_profile(clone, t0)
        m = {k: round(v, 1) if isinstance(v, float) else v for k, v in m.items() if k != "output"}
        text = log.read_bytes()[start:].decode(errors="replace")
        ran, skipped = _counts(text)
        rows.append({"step": key, "what": what, **m, "notebooks_run": ran, "notebooks_skipped": skipped})
        print(f"bench_reproduce: {key}: {m['wall_s']} s wall, {m['user_s']} + {m['sys_s']} s CPU, "
              f"{ran} notebooks run, {skipped} skipped, rc {m['rc']}", flush=True)
        if m["rc"]:
            print(text[-3000:], file=sys.stderr)
            break
    return rows, cold


def write(rows: list[dict], out: Path, label: str, meta: dict, cold: list[dict] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, columns, data in ((f"{label}.csv", COLUMNS, rows), (f"{label}_by_notebook.csv", PROFILE_COLUMNS, cold)):
        if data is None:
            continue
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(data)
    lines = [f"# `make reproduce` from a fresh clone, and a one-step edit (`{label}`, measured)", "",
             f"Measured {meta['date']} on {meta['machine']}; clone of {meta['commit']}; command: "
             f"`{meta['command']}`. Load average before / after: {meta['load_before']} / {meta['load_after']}. "
             "Wall time, user + sys CPU of make and everything under it, peak RSS of the largest process.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in rows]
    if cold:
        lines += [""] + profile_lines(cold, label)
    (out / f"{label}.md").write_text("\n".join(lines) + "\n")


def profile_lines(cold: list[dict], label: str) -> list[str]:
    """The markdown section of :func:`cold_profile`'s rows."""
    lines = [f"## The cold run by notebook (`{label}_by_notebook.csv`)", "",
             "Start: seconds after the cold `make reproduce` started (before the first notebook: setup, the "
             "dependency rules and the mode detection); papermill's own duration; the slowest cell (its first "
             "line). Notebooks run two at a time, the summary last.", "",
             "| " + " | ".join(PROFILE_COLUMNS) + " |", "|" + "---|" * len(PROFILE_COLUMNS)]
    return lines + ["| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in PROFILE_COLUMNS) + " |"
                    for r in cold]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.bench_reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="reproduce", help="name of the output files")
    ap.add_argument("--out", default="experiments/bench-pipeline", help="where the CSV and markdown go")
    ap.add_argument("--keep", help="clone into this (new) folder and leave it there")
    ap.add_argument("--step", default="gemm/05_b_carry", help="the GEMM step whose kernel file the edits change")
    ns = ap.parse_args(argv)
    if ns.keep and Path(ns.keep).exists():
        print(f"bench_reproduce: --keep {ns.keep} exists; give a new folder", file=sys.stderr)
        return 2
    git = lambda *a: subprocess.run(["git", *a], cwd=paths.REPO_ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    dirty = git("status", "--porcelain", "--untracked-files=no")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_line(),
            "commit": git("rev-parse", "--short", "HEAD") + (" (the checkout has local changes: not in the clone)"
                                                              if dirty else ""),
            "load_before": "%.2f %.2f %.2f" % os.getloadavg(),
            "command": "python -m mxfp4_ablation.bench_reproduce " + " ".join(  # no machine path in committed data
                "<folder>" if ns.keep and a == ns.keep else a for a in (argv if argv is not None else sys.argv[1:]))}
    scratch = Path(tempfile.mkdtemp(prefix="bench-reproduce-")) if not ns.keep else None
    clone = Path(ns.keep).resolve() if ns.keep else scratch / "clone"
    try:
        rows, cold = run(clone, ns.step)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    write(rows, Path(ns.out), ns.label, meta, cold)
    print(f"bench_reproduce: wrote {Path(ns.out) / (ns.label + '.md')}")
    return 0 if rows and all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
