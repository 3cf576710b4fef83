"""Benchmark of the sweep engine on a full attribution (a script, not a test).

    python -m mxfp4_ablation.studies.sweep_bench [--study gemm] [--shape 8192,8192,8192]
        [--workers 1,2] [--method sampled] [--pairs 2] [--out experiments/attribution-bench]

For each worker count it runs, in a fresh child process with a fresh, empty compile + timing cache
(``MXFP4_CACHE`` pointed at a new temporary folder, so every run is cold): the plan's compile tasks,
then its model tasks, on a ``LocalCluster`` of that many single-threaded workers, then the attribution.
It records wall seconds per phase, user + system CPU seconds of the whole process tree (the child and
its reaped Dask workers, ``RUSAGE_CHILDREN``) and each task's own seconds, and writes
``<out>/sweep_bench.json`` + ``<out>/sweep_tasks.csv``. The CPU of the box may be shared with other
work: wall time then overstates what the engine needs, the CPU seconds do not, and the JSON says how
many cores the box has and its load average before and after.

``--limit N`` runs only the plan's first N subsets (on a box shared with other work a full cold run
may not fit the time at hand); the JSON then says ``sets`` < ``plan_sets`` and the full plan's wall
time is a projection only.

The projection to 1, 2 and ``--project`` (64) workers: a greedy longest-first list schedule of the
measured mean per-variant task CPU seconds (compile + model, one worker) over the plan's subsets (sampled)
and over every valid subset (exact), plus the measured fixed cost (cluster start + attribution).
It assumes each worker has a core to itself (the measured seconds on a loaded box overstate that) and
ignores the scheduler's per-task overhead (milliseconds). Labelled a projection, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(args) -> int:
    """One cold run (inside the fresh process)."""
    from . import attribution as A, sweep

    shape = tuple(int(x) for x in args.shape.split(","))
    t0 = time.perf_counter()
    plans = A.study_plans(args.study, shape, method=args.method, pairs=args.pairs, seed=0)
    names = [n for p in plans for n in p.variant_names()]
    out = {"workers": args.child, "plan_sets": len(names)}
    if args.limit:
        names = names[:args.limit]
    out["sets"] = len(names)
    with sweep.client(f"local:{args.child}") as c:
        out["cluster_start_s"] = round(time.perf_counter() - t0, 2)
        t1 = time.perf_counter()
        comp = sweep.run(sweep.tasks(names, [shape], ["compile"]), client_=c, progress=False)
        out["compile_wall_s"] = round(time.perf_counter() - t1, 2)
        t2 = time.perf_counter()
        mod = sweep.run(sweep.tasks(names, [shape], ["model"]), client_=c, progress=False)
        out["model_wall_s"] = round(time.perf_counter() - t2, 2)
    t3 = time.perf_counter()
    if len(names) == out["plan_sets"]:
        res = [A.attribute(p, mod) for p in plans]
        out["total_log_pct"] = res[0].total_log_pct
    out["attribute_s"] = round(time.perf_counter() - t3, 2)
    out["total_wall_s"] = round(time.perf_counter() - t0, 2)
    out["failed"] = sweep.failures(comp) + sweep.failures(mod)
    import pandas as pd

    rows = pd.concat([comp, mod], ignore_index=True)[["variant", "what", "seconds", "cpu_seconds", "cached", "pid"]]
    rows["workers"] = args.child
    rows.to_csv(args.tasks_csv, index=False)
    Path(args.result).write_text(json.dumps(out))
    return 0


def _schedule(durations, workers: int) -> float:
    """Greedy longest-first list schedule: the makespan."""
    import heapq

    loads = [0.0] * workers
    heapq.heapify(loads)
    for d in sorted(durations, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + d)
    return max(loads)


def summarise(runs: list, tasks, args, argv=None) -> dict:
    """The benchmark's JSON from the runs and the per-task table (also ``--resummarise``)."""
    from .. import family, provenance

    one = tasks[tasks["workers"] == tasks["workers"].min()]
    comp = one[one["what"] == "compile"]["cpu_seconds"].tolist()  # CPU: what a worker with its own core needs
    mod = one[one["what"] == "model"]["cpu_seconds"].tolist()
    comp_wall = one[one["what"] == "compile"]["seconds"].tolist()
    mod_wall = one[one["what"] == "model"]["seconds"].tolist()
    fixed = runs[0]["cluster_start_s"] + runs[0]["attribute_s"]
    valid = len(family.get(args.study if args.study == "gemm" else "moe2").subsets())
    per = (sum(comp) + sum(mod)) / max(1, len(comp))
    plan_sets = runs[0]["plan_sets"]
    proj = {"label": "projection (list schedule of the measured 1-worker task CPU seconds, mean per-variant "
                     "cost for subsets not measured; a core per worker)", "per_variant_s": round(per, 2), "plan_sets": plan_sets,
            "exact_sets": valid}
    for w in sorted({1, 2, args.project}):
        proj[f"sampled_wall_s_{w}_workers"] = round(_schedule([per] * plan_sets, w) + fixed, 1)
        proj[f"exact_wall_s_{w}_workers"] = round(_schedule([per] * valid, w) + fixed, 1)
    summary = {"label": "measured", "study": args.study, "shape": args.shape, "method": args.method,
               "pairs": args.pairs, "cores": os.cpu_count(), "git": provenance.git_state(),
               "valid_subsets": {f: len(family.get(f).subsets()) for f in ("gemm", "moe1", "moe2")},
               "compile_s_per_variant": {"cpu_mean": round(sum(comp) / len(comp), 2), "cpu_max": round(max(comp), 2),
                                         "wall_mean": round(sum(comp_wall) / len(comp_wall), 2)},
               "model_s_per_variant": {"cpu_mean": round(sum(mod) / len(mod), 2), "cpu_max": round(max(mod), 2),
                                       "wall_mean": round(sum(mod_wall) / len(mod_wall), 2)},
               "runs": runs, "projection": proj,
               "command": "python -m mxfp4_ablation.studies.sweep_bench " + " ".join(argv or sys.argv[1:])}
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.studies.sweep_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="gemm")
    ap.add_argument("--shape", default="8192,8192,8192")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--method", default="sampled", choices=("auto", "exact", "sampled"))
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--project", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="run only the plan's first N subsets (a partial run on a "
                    "busy box; the full plan's wall time is then projected from the measured tasks)")
    ap.add_argument("--out", default="experiments/attribution-bench")
    ap.add_argument("--resummarise", action="store_true", help="recompute sweep_bench.json from --out's stored runs")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--tasks-csv", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)
    if args.resummarise:
        import pandas as pd

        out_dir = Path(args.out)
        old = json.loads((out_dir / "sweep_bench.json").read_text())
        summary = summarise(old["runs"], pd.read_csv(out_dir / "sweep_tasks.csv"), args, argv)
        summary["command"] = old["command"]
        (out_dir / "sweep_bench.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary, indent=2))
        return 0
    import pandas as pd

    from .. import family, provenance

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs, task_frames = [], []
    for n in [int(x) for x in args.workers.split(",")]:
        with tempfile.TemporaryDirectory(prefix="mxfp4-bench-cache-") as cache:
            env = {**os.environ, "MXFP4_CACHE": cache}
            res_file, csv_file = Path(cache) / "result.json", Path(cache) / "tasks.csv"
            load0 = os.getloadavg()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mxfp4_ablation.studies.sweep_bench", "--child", str(n),
                            "--study", args.study, "--shape", args.shape, "--method", args.method,
                            "--pairs", str(args.pairs), "--limit", str(args.limit), "--result", str(res_file),
                            "--tasks-csv", str(csv_file)],
                           env=env, check=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = json.loads(res_file.read_text())
            r.update(process_wall_s=round(wall, 2), user_s=round(after.ru_utime - before.ru_utime, 1),
                     sys_s=round(after.ru_stime - before.ru_stime, 1), loadavg_before=load0,
                     loadavg_after=os.getloadavg())
            runs.append(r)
            task_frames.append(pd.read_csv(csv_file))
            print(json.dumps(r), flush=True)
    tasks = pd.concat(task_frames, ignore_index=True)
    summary = summarise(runs, tasks, args, argv)
    (out_dir / "sweep_bench.json").write_text(json.dumps(summary, indent=2) + "\n")
    tasks.to_csv(out_dir / "sweep_tasks.csv", index=False)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
