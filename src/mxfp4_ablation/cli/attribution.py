"""``mxfp4-ablation sweep`` and ``mxfp4-ablation attribution``: the Dask sweep engine on the command line.

``sweep`` runs (variant, shape, what) tasks -- any variant name, subsets included (``gemm+agpr_acc+k_unroll4``,
``gemm@0x21``), or ``--subsets FAMILY`` for every valid subset of a family -- and writes one parquet
row per task with provenance. ``attribution`` plans, sweeps and attributes one study (Shapley shares
with intervals, ladder deltas, leave-one-out losses, interactions, the seed's order of impact).
Both take ``--scheduler local|local:N|inline|slurm|pbs|ADDRESS`` (default ``local``: a LocalCluster
sized to the machine). Bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import UsageError


def _shapes(texts) -> list[tuple[int, ...]]:
    from .. import shapes

    return [tuple(shapes.resolve(t)) for t in texts]


def _out_dir(out: str | None, name: str):
    """``--out DIR`` (written directly, each file atomic) or a fresh experiments/ run folder."""
    from ..results import run_dir

    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        return None, Path(out)
    ctx = run_dir(name)
    return ctx, None


def cmd_sweep(args: argparse.Namespace) -> int:
    from .. import variants
    from ..studies import sweep
    from . import emit

    names = [n.strip() for n in (args.variants or "").split(",") if n.strip()]
    for fam in args.subsets or ():
        names += [v.name for v in variants.subset_variants(fam)]
    if not names:
        raise UsageError("give --variants NAME[,NAME...] and/or --subsets FAMILY")
    if not args.shape:
        raise UsageError("give at least one --shape")
    whats = [w.strip() for w in args.what.split(",") if w.strip()]
    sweep.parse_scheduler(args.scheduler, args.workers)  # a bad scheduler is one line before any work
    todo = sweep.tasks(names, _shapes(args.shape), whats)
    df = sweep.run(todo, scheduler=args.scheduler, workers=args.workers, progress=not args.no_progress,
                   fn=sweep.probe if args.check else None)
    if args.check:
        hosts = df.groupby(["host", "pid"]).size()
        data = {"workers": len(hosts), "tasks": len(df), "flydsl": sorted(set(df["flydsl"].astype(str))),
                "caches": sorted(set(df["cache"]))}
        emit(args, data)
        return 0
    settings = {"scheduler": args.scheduler, "workers": args.workers, "tasks": len(todo), "what": whats}
    written = None
    if not args.no_write and not args.check:
        ctx, out = _out_dir(args.out, "sweep")
        if ctx is None:
            written = str(sweep.write(df, out, settings))
        else:
            with ctx as run:
                sweep.write(df, run.path, settings)
            written = str(run.final / "sweep.parquet")
    bad = sweep.failures(df)
    data = {"tasks": len(df), "failed": bad, "written": written,
            "rows": json.loads(df.to_json(orient="records")) if args.json else None}
    cols = [c for c in ("variant", "shape", "what", "label", "ok", "tflops", "passed", "cached", "seconds") if c in df]
    emit(args, data, df[cols].to_string(index=False) + (f"\nwritten: {written}" if written else "")
         + "".join(f"\nFAILED {b}" for b in bad))
    return 1 if bad else 0


def _text(res) -> str:
    lines = []
    for a in res:
        d = a.detail
        lines.append(f"{a.family} at {'x'.join(map(str, a.shape))}: {a.method} Shapley on log(TFLOPS), {d['label']}"
                     + (f" (model {d.get('model_version')}, {d.get('clock_ghz')} GHz)" if d["label"] == "modelled" else "")
                     + f"; {d['sets']} subsets ({d['valid_sets']} valid), {d['orderings'] or 'all'} orderings")
        lines.append(f"  {'switch':<28} {'Shapley log-%':>13} {'interval':>20} {'ladder %':>9} {'LOO %':>8}")
        for n, r in a.switches.items():
            lines.append(f"  {n:<28} {r['shapley_log_pct']:>+13.2f} [{r['ci_low']:>+8.2f}, {r['ci_high']:>+8.2f}] "
                         f"{r['ladder_pct']:>+9.2f} {r['loo_pct']:>+8.2f}"
                         + (f"  (LOO also drops {r['loo_dropped_too']})" if r["loo_dropped_too"] else ""))
        lines.append(f"  total {a.total_log_pct:+.2f} log-%; interval: sampling + {d['evidence_rule']}")
        top = sorted(a.interactions.items(), key=lambda kv: -abs(kv[1][0]) if kv[1][0] == kv[1][0] else 0)[:5]
        lines.append("  largest interactions (log-%): " + "; ".join(f"{x}x{y} {v:+.2f}" for (x, y), (v, _) in top))
        o = a.order
        lines.append(f"  order vs seed ({o['source']}): {' > '.join(o['claimed']) or '(no ranked claim)'}: "
                     f"rho {o['rho']} {o['ci']}: {o['verdict']}")
    return "\n".join(lines)


def cmd_attribution(args: argparse.Namespace) -> int:
    from ..studies import attribution as A, sweep
    from . import emit

    sweep.parse_scheduler(args.scheduler, args.workers)
    shape = _shapes([args.shape])[0] if args.shape else None
    families = [f.strip() for f in args.family.split(",")] if args.family else None
    what = "bench" if args.measured else "model"
    bench_options = {"device": args.device} if args.measured else None
    if args.measured:
        from .bench import require_gfx950

        require_gfx950(args.device)  # one line, before planning anything
    res, rows = A.run(args.study, shape, families, what=what, scheduler=args.scheduler, workers=args.workers,
                      progress=not args.no_progress, method=args.method, pairs=args.pairs, seed=args.seed,
                      exact_limit=args.exact_limit, bench_options=bench_options)
    if not args.no_write:
        settings = {"study": args.study, "shape": args.shape, "method": args.method, "pairs": args.pairs,
                    "seed": args.seed, "what": what, "scheduler": args.scheduler}
        ctx, out = _out_dir(args.out, f"attribution-{args.study}")
        if ctx is None:
            A.write(res, out, settings)
            sweep.write(rows, out, settings)
        else:
            with ctx as run:
                A.write(res, run.path, settings)
                sweep.write(rows, run.path, settings)
            out = run.final
        print(f"written: {out}", file=sys.stderr)
    data = res[0].json() if len(res) == 1 else {f"{a.family}@{'x'.join(map(str, a.shape))}": a.json() for a in res}
    emit(args, data, _text(res))
    return 0


def register(sub) -> None:
    def common(p):
        p.add_argument("--scheduler", default="local",
                       help="local (default: a LocalCluster sized to this machine), local:N, inline (no Dask), "
                            "slurm / pbs (dask-jobqueue), or a running scheduler's address (tcp://host:8786)")
        p.add_argument("--workers", type=int, help="workers to start (local, slurm, pbs)")
        p.add_argument("--out", help="write the tables into this folder (default: a new experiments/ run)")
        p.add_argument("--no-write", action="store_true", help="print only, write no files")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("sweep", help="run (variant, shape, what) tasks on a Dask cluster; parquet rows",
                       description=__doc__.splitlines()[0])
    p.add_argument("--variants", help="comma-separated variant names (ladder, leave-one-out or subset names)")
    p.add_argument("--subsets", action="append", metavar="FAMILY", help="every valid switch subset of FAMILY")
    p.add_argument("--shape", action="append", help="a shape (repeatable)")
    p.add_argument("--what", default="model", help="compile, verify, model, bench (comma-separated)")
    p.add_argument("--check", action="store_true", help="run no-work probe tasks: which workers answer, "
                   "with which flydsl and cache folder (nothing is written)")
    common(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("attribution", help="Shapley attribution of a study's switches (modelled, or measured on gfx950)",
                       description="Shapley shares of each switch on log(TFLOPS), with intervals, beside the ladder "
                                   "deltas and leave-one-out losses; pairwise interactions; the seed's order of impact.")
    p.add_argument("--study", required=True, help="gemm or moe")
    p.add_argument("--shape", help="one shape (default: the study's ISA shapes)")
    p.add_argument("--family", help="MoE: moe1, moe2 or both (default)")
    p.add_argument("--method", default="auto", choices=("auto", "exact", "sampled"),
                   help="exact (every valid subset), sampled (orderings), auto: exact up to --exact-limit subsets")
    p.add_argument("--exact-limit", type=int, default=32, help="auto: the most valid subsets to do exactly (default 32)")
    p.add_argument("--pairs", type=int, default=2, help="sampled: antithetic pairs of orderings (default 2)")
    p.add_argument("--seed", type=int, default=0, help="sampled: the orderings' seed")
    p.add_argument("--measured", action="store_true",
                   help="time every subset on a gfx950 GPU (paired A/B against the empty set's kernel) instead of modelling")
    p.add_argument("--device", type=int, default=0, help="with --measured: the GPU index")
    common(p)
    p.set_defaults(func=cmd_attribution)
