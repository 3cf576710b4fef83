"""``mxfp4-ablation bench`` and ``mxfp4-ablation harness-check``.

``bench VARIANT --vs BASELINE --shape M,N,K`` times two gfx950 kernel variants
interleaved (A = baseline, B = variant) and reports the median time ratio with its
95 % BCa CI and a verdict.  It refuses to run anywhere but on a gfx950 GPU.
``harness-check`` validates the harness itself on whatever GPU is present.
Errors the user can fix print one line and exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _usage_error():
    from . import UsageError

    return UsageError


def _add_settings_args(p: argparse.ArgumentParser, trials: int, processes: int) -> None:
    p.add_argument("--trials", type=int, default=trials,
                   help=f"A/B pairs per process per timing method (default {trials})")
    p.add_argument("--processes", type=int, default=processes,
                   help=f"fresh processes, each running every trial (default {processes})")
    p.add_argument("--launches", type=int, default=None,
                   help="launches per trial (default: sized to --target-trial-ms)")
    p.add_argument("--target-trial-ms", type=float, default=20.0)
    p.add_argument("--warmup", type=int, default=3, help="untimed launches before each trial")
    p.add_argument("--methods", default="events,graph", help="events, graph or both")
    p.add_argument("--order", default="abba", choices=("abba", "random"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--noise-floor", type=float, default=0.0,
                   help="dead band around ratio 1 for the verdict, e.g. the A/A CI half-width")
    p.add_argument("--cache-bytes", type=int, default=None,
                   help="override the last-level cache size used to size input rotation")
    p.add_argument("--rotation-factor", type=float, default=2.0,
                   help="input sets together cover this many times the cache (default 2)")
    p.add_argument("--device", type=int, default=0, help="GPU index")
    p.add_argument("--out", default=None,
                   help="write result tables into this folder (default: a new experiments/ run)")
    p.add_argument("--no-write", action="store_true", help="print only, write no files")
    p.add_argument("--no-progress", action="store_true", help="log lines instead of tqdm bars")


def settings_from_args(args):
    from ..bench.abtest import BenchError, HarnessSettings

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if args.trials < 3:
        raise _usage_error()(f"--trials must be >= 3 for a confidence interval (got {args.trials})")
    try:
        return HarnessSettings(
            pairs=args.trials, launches=args.launches, target_trial_ms=args.target_trial_ms,
            warmup=args.warmup, methods=methods, order=args.order, processes=args.processes,
            seed=args.seed, confidence=args.confidence, noise_floor=args.noise_floor,
            cache_bytes=args.cache_bytes, rotation_factor=args.rotation_factor,
            progress=not args.no_progress,
        ).validate()
    except BenchError as exc:
        raise _usage_error()(str(exc)) from None


def require_gfx950(index: int = 0) -> dict:
    """Facts of GPU ``index`` if it is a gfx950; otherwise a UsageError saying why not."""
    from ..bench import device_info

    if not device_info.gpu_available():
        raise _usage_error()("bench needs a gfx950 GPU (MI350X/MI355X) and torch sees no GPU "
                             "here; gfx950 code cannot run on this machine")
    facts = device_info.probe(index)
    if facts["arch"] != "gfx950":
        raise _usage_error()(f"bench needs a gfx950 GPU; GPU {index} is {facts['name']} "
                             f"({facts['arch']}), which cannot run gfx950 code")
    return facts


def _write(out: str | None, run_name: str, tables: dict, provenance: dict) -> str:
    """Write every table; with --out directly (each file atomic), else as a new run folder
    that appears under experiments/ only once all of its files are written."""
    from ..results import run_dir, write_table

    if out is not None:
        for name, df in tables.items():
            write_table(df, Path(out) / f"{name}.parquet", provenance)
        return str(out)
    with run_dir(run_name) as run:
        for name, df in tables.items():
            write_table(df, run / f"{name}.parquet", provenance)
    return str(run.final)


def _summary_records(summary):
    cols = ["experiment", "method", "n_pairs", "ratio", "ci_low", "ci_high", "ci_width",
            "verdict", "time_a_us", "time_b_us", "tflops_a", "tflops_b", "tflops_ratio"]
    return summary[[c for c in cols if c in summary.columns]].to_dict(orient="records")


def _summary_text(summary) -> str:
    lines = [f"{'comparison':<28} {'method':<6} {'pairs':>5} {'B/A time':>9} "
             f"{'95% CI':>21} {'TFLOPS A':>9} {'TFLOPS B':>9}  verdict"]
    for r in summary.itertuples():
        lines.append(f"{r.experiment:<28} {r.method:<6} {r.n_pairs:>5} {r.ratio:>9.5f} "
                     f"[{r.ci_low:.5f}, {r.ci_high:.5f}] {getattr(r, 'tflops_a', float('nan')):>9.2f} "
                     f"{getattr(r, 'tflops_b', float('nan')):>9.2f}  {r.verdict}")
    return "\n".join(lines)


def cmd_bench(args) -> int:
    from .. import variants
    from ..bench import peers as peers_mod
    from ..bench.abtest import BenchError, Comparison, run_comparisons
    from ..bench.launchers import LauncherError, launcher_for
    from ..bench.timing import DeviceContext, TorchBackend

    UsageError = _usage_error()
    shape = variants.parse_shape(args.shape)
    settings = settings_from_args(args)
    require_gfx950(args.device)
    try:
        a = launcher_for(args.vs, shape)
        b = launcher_for(args.variant, shape)
    except LauncherError as exc:
        raise UsageError(str(exc)) from None
    comps = [Comparison(f"{args.variant}_vs_{args.vs}", a=a, b=b)]
    notes = []
    if args.peers:
        if len(shape) != 3:
            raise UsageError("--peers needs a GEMM shape M,N,K")
        ctx = DeviceContext(TorchBackend(args.device), args.device)
        for peer in peers_mod.discover(ctx):
            if peer.available:
                comps.append(Comparison(f"{peer.name}_vs_{args.vs}", a=a,
                                        b=peers_mod.peer_factory(peer, *shape)))
            notes.append(f"peer {peer.name}: {peer.note}")
    try:
        result = run_comparisons(comps, settings, device_index=args.device)
    except BenchError as exc:
        raise UsageError(str(exc)) from None
    result.provenance["bench"]["peers"] = notes
    written = None
    if not args.no_write:
        written = _write(args.out, f"bench-{args.variant}-vs-{args.vs}",
                         {"trials": result.trials, "summary": result.summary}, result.provenance)
    from . import emit

    data = {"summary": _summary_records(result.summary), "notes": notes, "written": written}
    emit(args, data, _summary_text(result.summary) + "".join(f"\n{n}" for n in notes)
         + (f"\nwritten: {written}" if written else ""))
    return 0


def cmd_harness_check(args) -> int:
    from ..bench import device_info, peers as peers_mod
    from ..bench.abtest import BenchError
    from ..bench.timing import DeviceContext, TorchBackend
    from ..bench.validation import harness_check

    UsageError = _usage_error()
    settings = settings_from_args(args)
    if not device_info.gpu_available():
        raise UsageError("harness-check times real kernels and torch sees no GPU here "
                         "(needs a CUDA or ROCm device)")
    try:
        result, checks = harness_check(settings, device_index=args.device, quick=args.quick,
                                       suite=args.suite)
        peer_notes = [f"{p.name}: {p.note}" for p in
                      peers_mod.discover(DeviceContext(TorchBackend(args.device), args.device))]
    except BenchError as exc:
        raise UsageError(str(exc)) from None
    result.provenance["bench"]["peers"] = peer_notes
    written = None
    if not args.no_write:
        written = _write(args.out, "harness-validation",
                         {"trials": result.trials, "summary": result.summary, "checks": checks},
                         result.provenance)
    from . import emit

    val = result.provenance["bench"]["validation"]
    data = {"checks": checks.to_dict(orient="records"), "summary": _summary_records(result.summary),
            "validation": val, "peers": peer_notes, "written": written}
    text = (_summary_text(result.summary) + "\n\n" + "\n".join(
        f"{'PASS' if r.passed else ('FAIL' if r.kind == 'requirement' else 'note')} "
        f"{r.check:<27} {r.experiment:<21} {r.method:<6} {r.detail}"
        for r in checks.sort_values(["kind", "check"], kind="stable").itertuples())
        + f"\n\nsmallest planted delta resolved: {val['smallest_delta_resolved']}"
        + f"\nGPU seconds: {val['gpu_seconds']:.1f}\npeers: " + "; ".join(peer_notes)
        + (f"\nwritten: {written}" if written else ""))
    emit(args, data, text)
    if args.quick:
        return 0
    required = checks[checks["kind"] == "requirement"]
    return 0 if bool(required["passed"].all()) else 1


def register(subparsers) -> None:
    """Add ``bench`` and ``harness-check`` to the mxfp4-ablation command line."""
    p = subparsers.add_parser("bench", help="time a gfx950 variant against a baseline, interleaved",
                              description=cmd_bench.__doc__ or __doc__.splitlines()[0])
    p.add_argument("variant")
    p.add_argument("--vs", required=True, metavar="BASELINE")
    p.add_argument("--shape", required=True, help="M,N,K")
    p.add_argument("--peers", action="store_true",
                   help="also time aiter gemm_a4w4 / torch MX scaled_mm against the baseline")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_settings_args(p, trials=50, processes=6)
    p.set_defaults(func=cmd_bench)

    p = subparsers.add_parser("harness-check",
                              help="validate the timing harness on the GPU present "
                                   "(A/A, planted 1 %% and 3 %%, cache, methods)")
    p.add_argument("--quick", action="store_true", help="a few trials: exercise the flow only")
    p.add_argument("--suite", default="all", choices=("main", "exact", "all"),
                   help="main: A/A, K+1 %%/3 %%, linearity, cache; exact: slowdowns planted "
                        "exactly by extra launches (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_settings_args(p, trials=40, processes=6)
    p.set_defaults(func=cmd_harness_check)


if __name__ == "__main__":  # pragma: no cover - convenience: python -m mxfp4_ablation.cli.bench
    from . import main

    sys.exit(main(sys.argv[1:]))
