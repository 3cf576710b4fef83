"""``mxfp4-ablation verify``: the correctness gate for one variant at one shape, every output checked."""

from __future__ import annotations

import argparse

from . import positive_int


def _output_line(name: str, o: dict) -> str:
    if o["compare"] == "exact":
        how = f"exact: {o['mismatches']} of {o['numel']} elements differ"
    else:
        how = (f"close: {o['mismatches']} of {o['numel']} outside the bound, max_ulp_err={o['max_ulp_err']:.3g} "
               f"max_abs_err={o['max_abs_err']:.4g} cosine={o['cosine']:.7f}")
    return f"  {'ok  ' if o['passed'] else 'FAIL'} {name}: {how}"


def cmd_verify(args: argparse.Namespace) -> int:
    from .. import runner, shapes, variants
    from . import check_size, emit

    shape = shapes.resolve(args.shape)
    variant = variants.get(args.variant)
    variant.module.check_shape(**variant.shape(shape))  # one line for a bad shape, before anything runs
    check_size(variant, shape)                           # ... and for one too large to allocate
    result = runner.verify(args.variant, shape, backend=args.backend,
                           seed=args.seed, hazards="report", processes=args.processes,
                           delivery=args.delivery, wave_order=args.wave_order, delivery_seed=args.delivery_seed)
    text = (f"{'PASS' if result['passed'] else 'FAIL'} {result['variant']} {args.shape} "
            f"backend={result['backend']}{_modes(args)} hazards={result['hazards']} ({result['seconds']} s)")
    for name, o in result["outputs"].items():
        text += "\n" + _output_line(name, o)
    for report in result["hazard_reports"]:
        text += f"\n  hazard: {report}"
    if result.get("wait_state_hazards"):
        text += f"\n  wait-state hazards (s_nop): {result['wait_state_hazards']}"
        # the emulated device reports them per launch (its launches' log), the emulator in the result
        reports = result.get("wait_state_reports") or [
            r for launch in result.get("launches", []) for r in launch.get("wait_state_reports", [])]
        for report in reports[:2]:
            text += f"\n  wait states: {report}"
    emit(args, result, text)
    return 0 if result["passed"] else 1


def _modes(args) -> str:
    if (args.delivery, args.wave_order) == ("issue", "forward"):
        return ""
    return f" delivery={args.delivery} wave-order={args.wave_order} delivery-seed={args.delivery_seed}"


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
    p.add_argument("--backend", choices=("emulator", "device", "emulated-device"), default="emulator")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=positive_int, default=1, help="emulator worker processes (workgroups in parallel)")
    p.add_argument("--delivery", choices=("issue", "late", "random"), default="issue",
                   help="emulator: when loads land (late: only when a wait forces it; random: seeded)")
    p.add_argument("--wave-order", choices=("forward", "reverse", "random"), default="forward",
                   help="emulator: wave scheduling order (random: seeded interleaving)")
    p.add_argument("--delivery-seed", type=int, default=0, help="seed of the random delivery / wave order")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)
