"""``mxfp4-ablation model``: modelled timing (gfx950emu.timing) of one variant at one shape."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

from ..errors import UsageError
from . import positive_int, writable_file


def _code_object(path: str) -> str:
    """``--aiter-co FILE``: an existing ELF file (a code object), checked before anything runs."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--aiter-co {path}: no such file")
    with open(file, "rb") as handle:
        magic = handle.read(4)
    if magic != b"\x7fELF":
        raise UsageError(f"--aiter-co {path}: not a code object (an AMDGPU ELF file starts with \\x7fELF)")
    return path


def cmd_model(args: argparse.Namespace) -> int:
    from .. import modelled, shapes, variants
    from . import check_size, emit

    shape = shapes.resolve(args.shape)
    if args.sample is not None and args.sample < 1:
        raise UsageError(f"--sample must be a positive number of workgroups, got {args.sample}")
    if args.variant:
        variant = variants.get(args.variant)
        variant.module.check_shape(**variant.shape(shape))
        # a lazily mapped module builds only the sampled workgroups' data (its heap is still reserved)
        check_size(variant, shape, lazy="lazy" in inspect.signature(variant.module.make_inputs).parameters)
    kw = dict(sample=args.sample, trace=args.trace, use_cache=not args.no_cache)
    picked = [x for x in (args.variant, args.upstream, args.aiter_co) if x]
    if len(picked) != 1:
        raise UsageError("give exactly one of: a VARIANT, --upstream OUT_DIR --commit SHA8, --aiter-co FILE")
    if (args.upstream or args.aiter_co) and len(shape) != 3:
        raise UsageError("upstream GEMMs take --shape M,N,K")
    if args.upstream:
        if not args.commit:
            raise UsageError("--upstream needs --commit (the 8-hex folder under OUT_DIR/flydsl/)")
        result = modelled.flydsl_upstream(args.upstream, args.commit[:8], *shape, **kw)
        result["variant"] = f"flydsl@{args.commit[:8]}"
    elif args.aiter_co:
        result = modelled.aiter_asm(_code_object(args.aiter_co), *shape, **kw)
        result["variant"] = "aiter-asm"
    else:
        result = modelled.model(args.variant, shape, seed=args.seed, **kw)
    k = result["kernel"]
    text = (f"{result['variant']} {args.shape}: {k['tflops']} TFLOPS, {k['us']} us ({k['bound']}-bound, "
            f"{k['rounds']} rounds) -- modelled, gfx950emu.timing {result['model_version']}, clock {result['clock_ghz']} GHz\n"
            f"  workgroup {result['cycles']} cycles, cycles/MFMA (hot loop) {result['cycles_per_mfma_loop']}, "
            f"MFMA busy {result['mfma_busy']}\n"
            f"  exposed cycles per SIMD: {result['exposed']}\n"
            f"  sampled workgroups: {len(result['sampled_workgroups'])} of {result['grid_workgroups']}"
            f"{' (cached)' if result.get('cached') else ''}")
    if args.trace:
        text += f"\n  timeline: {args.trace} (Chrome trace / Perfetto)"
    emit(args, result, text)
    return 0


def register(sub) -> None:
    p = sub.add_parser("model", help="modelled cycles / TFLOPS of a variant (gfx950 timing model, no GPU needed)",
                       description="Compile a variant and run the gfx950emu timing model over its full grid "
                                   "(a sample of workgroups, extrapolated). Every number is modelled.")
    p.add_argument("variant", nargs="?", help="a study variant (see `mxfp4-ablation variants`)")
    p.add_argument("--shape", required=True, help="the variant's shape, e.g. M,N,K")
    p.add_argument("--upstream", metavar="OUT_DIR", help="model upstream FlyDSL's fp4_gemm_4wave ISA from "
                   "OUT_DIR/flydsl/<commit8>/M<M>_N<N>_K<K>.s (python -m mxfp4_ablation.upstream compile)")
    p.add_argument("--commit", help="with --upstream: the FlyDSL commit (8+ hex digits)")
    p.add_argument("--aiter-co", metavar="FILE", help="model aiter's hand-written a4w4 GEMM code object "
                   "(f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co; needs gfx950emu.codeobject)")
    p.add_argument("--seed", type=int, default=0, help="input seed (MoE routing depends on it)")
    p.add_argument("--sample", type=positive_int, help="simulate only this many of the first CU's workgroups")
    p.add_argument("--trace", type=writable_file, help="write the Chrome-trace / Perfetto timeline of the sampled workgroups here")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the timing cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_model)
