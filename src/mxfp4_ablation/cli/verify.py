"""``mxfp4-ablation verify``: the correctness gate for one variant at one shape."""

from __future__ import annotations

import argparse


def cmd_verify(args: argparse.Namespace) -> int:
    from .. import runner, variants
    from . import emit

    result = runner.verify(args.variant, variants.parse_shape(args.shape), backend=args.backend,
                           seed=args.seed, hazards="report", processes=args.processes,
                           delivery=args.delivery, wave_order=args.wave_order, delivery_seed=args.delivery_seed)
    text = (f"{'PASS' if result['passed'] else 'FAIL'} {result['variant']} {args.shape} "
            f"backend={result['backend']}{_modes(args)} cosine={result['cosine']:.7f} max_abs_err={result['max_abs_err']:.4g} "
            f"hazards={result['hazards']} ({result['seconds']} s)")
    for report in result["hazard_reports"]:
        text += f"\n  hazard: {report}"
    if result.get("wait_state_hazards"):
        text += f"\n  wait-state hazards (s_nop): {result['wait_state_hazards']}"
        for report in result["wait_state_reports"][:2]:
            text += f"\n  wait states: {report}"
    emit(args, result, text)
    return 0 if result["passed"] else 1


def _modes(args) -> str:
    if (args.delivery, args.wave_order) == ("issue", "forward"):
        return ""
    return f" delivery={args.delivery} wave-order={args.wave_order} delivery-seed={args.delivery_seed}"


def register(sub) -> None:
    p = sub.add_parser("verify", help="run a variant (emulator or gfx950 device) and compare with the reference",
                       description="Run a variant and compare it with the torch reference; exit 1 on a mismatch.")
    p.add_argument("variant")
    p.add_argument("--shape", required=True, help="M,N,K")
    p.add_argument("--backend", choices=("emulator", "device"), default="emulator")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=int, default=1, help="emulator worker processes (workgroups in parallel)")
    p.add_argument("--delivery", choices=("issue", "late", "random"), default="issue",
                   help="emulator: when loads land (late: only when a wait forces it; random: seeded)")
    p.add_argument("--wave-order", choices=("forward", "reverse", "random"), default="forward",
                   help="emulator: wave scheduling order (random: seeded interleaving)")
    p.add_argument("--delivery-seed", type=int, default=0, help="seed of the random delivery / wave order")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)
