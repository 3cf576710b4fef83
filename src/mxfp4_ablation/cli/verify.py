"""``mxfp4-ablation verify``: the correctness gate for one variant at one shape, every output checked."""

from __future__ import annotations

import argparse


def _output_line(name: str, o: dict) -> str:
    if o["compare"] == "exact":
        how = f"exact: {o['mismatches']} of {o['numel']} elements differ"
    else:
        how = (f"close: {o['mismatches']} of {o['numel']} outside the bound, max_ulp_err={o['max_ulp_err']:.3g} "
               f"max_abs_err={o['max_abs_err']:.4g} cosine={o['cosine']:.7f}")
    return f"  {'ok  ' if o['passed'] else 'FAIL'} {name}: {how}"


def cmd_verify(args: argparse.Namespace) -> int:
    from .. import runner, shapes
    from . import emit

    result = runner.verify(args.variant, shapes.resolve(args.shape), backend=args.backend,
                           seed=args.seed, hazards="report", processes=args.processes)
    text = (f"{'PASS' if result['passed'] else 'FAIL'} {result['variant']} {args.shape} "
            f"backend={result['backend']} hazards={result['hazards']} ({result['seconds']} s)")
    for name, o in result["outputs"].items():
        text += "\n" + _output_line(name, o)
    for report in result["hazard_reports"]:
        text += f"\n  hazard: {report}"
    emit(args, result, text)
    return 0 if result["passed"] else 1


def register(sub) -> None:
    p = sub.add_parser("verify", help="run a variant (emulator or gfx950 device) and compare every output with "
                       "the reference",
                       description="Run a variant and compare every output it declares with the torch reference "
                       "(exact outputs byte for byte, floating ones within their bound); exit 1 on a mismatch "
                       "or a hazard.")
    p.add_argument("variant")
    p.add_argument("--shape", required=True,
                   help="the family's shape numbers (M,N,K or tokens,experts,hidden,inter,topk[,block_m]) or a "
                   "name from experiments/shapes.toml")
    p.add_argument("--backend", choices=("emulator", "device"), default="emulator")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=int, default=1, help="emulator worker processes (workgroups in parallel)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)
