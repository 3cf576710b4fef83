"""Peer kernels timed the same interleaved way as ours: aiter's gemm_a4w4 and torch's
scaled matmul with MX block scales.  A peer that is not installed, or that the device
or torch build does not support, is skipped with a note -- never an error.

Both are MXFP4 GEMMs: A [M, K/2] and B [N, K/2] packed fp4 (e2m1, two per byte),
one e8m0 scale per 32 elements along K, bf16 output; FLOPs 2*M*N*K.
Neither has run here (no gfx950 / Blackwell GPU was available; on the H200 torch answered
"Invalid scaling configuration"): the availability
probe runs a tiny call, so a wrong guess at an API shows up as "unavailable: ...".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .timing import Case, DeviceContext

MX_BLOCK = 32


@dataclass(frozen=True)
class Peer:
    name: str
    available: bool
    note: str
    factory: object = None  # callable(ctx, m, n, k) -> Case when available


def _mx_operands(ctx: DeviceContext, m: int, n: int, k: int, n_sets: int):
    """Random packed-fp4 operands and e8m0 scales (as uint8 bytes: any byte pattern
    of e2m1 pairs is a valid fp4 value; scale bytes near 127 keep values near 1)."""
    import torch

    if k % (2 * MX_BLOCK):
        raise ValueError(f"MXFP4 needs K divisible by {2 * MX_BLOCK}, got {k}")
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed + 31 * k)
    sets = []
    for _ in range(n_sets):
        a = torch.randint(0, 256, (m, k // 2), device=ctx.device, dtype=torch.uint8, generator=gen)
        b = torch.randint(0, 256, (n, k // 2), device=ctx.device, dtype=torch.uint8, generator=gen)
        sa = torch.randint(120, 134, (m, k // MX_BLOCK), device=ctx.device, dtype=torch.uint8,
                           generator=gen)
        sb = torch.randint(120, 134, (n, k // MX_BLOCK), device=ctx.device, dtype=torch.uint8,
                           generator=gen)
        out = torch.empty(m, n, device=ctx.device, dtype=torch.bfloat16)
        sets.append((a, b, sa, sb, out))
    return sets


def _set_bytes(m, n, k):
    return m * k // 2 + n * k // 2 + (m + n) * (k // MX_BLOCK) + 2 * m * n


def torch_scaled_mm_mx_case(ctx: DeviceContext, m: int, n: int, k: int) -> Case:
    """torch._scaled_mm on float4_e2m1fn_x2 operands with float8_e8m0fnu block scales."""
    import torch

    rot = ctx.rotation(_set_bytes(m, n, k))
    raw = _mx_operands(ctx, m, n, k, rot.n_sets)
    sets = [(a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2),
             sa.view(torch.float8_e8m0fnu), sb.view(torch.float8_e8m0fnu), out)
            for a, b, sa, sb, out in raw]

    def launch(i: int):
        a, b, sa, sb, out = sets[i]
        torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16, out=out)

    return Case(name=f"torch_scaled_mm_mxfp4_{m}x{n}x{k}", launch=launch, rotation=rot,
                flops=2.0 * m * n * k, bytes_moved=float(rot.set_bytes),
                meta={"peer": "torch._scaled_mm", "m": m, "n": n, "k": k}, release=sets.clear)


def aiter_gemm_a4w4_case(ctx: DeviceContext, m: int, n: int, k: int) -> Case:
    """aiter.gemm_a4w4(A, B, A_scale, B_scale, out) on gfx950 (ROCm's aiter package)."""
    import aiter
    import torch

    rot = ctx.rotation(_set_bytes(m, n, k))
    fp4 = getattr(getattr(aiter, "dtypes", None), "fp4x2", torch.uint8)
    e8m0 = getattr(getattr(aiter, "dtypes", None), "fp8_e8m0", torch.uint8)
    sets = [(a.view(fp4), b.view(fp4), sa.view(e8m0), sb.view(e8m0), out)
            for a, b, sa, sb, out in _mx_operands(ctx, m, n, k, rot.n_sets)]

    def launch(i: int):
        a, b, sa, sb, out = sets[i]
        aiter.gemm_a4w4(a, b, sa, sb, out)

    return Case(name=f"aiter_gemm_a4w4_{m}x{n}x{k}", launch=launch, rotation=rot,
                flops=2.0 * m * n * k, bytes_moved=float(rot.set_bytes),
                meta={"peer": "aiter.gemm_a4w4", "m": m, "n": n, "k": k}, release=sets.clear)


def _try_tiny(factory, ctx) -> str | None:
    """Run a 256x256x256 launch once; None if it worked, else why not (one line)."""
    import torch

    try:
        tiny = DeviceContext(ctx.backend, ctx.index, cache_bytes=0, seed=ctx.seed)
        case = factory(tiny, 256, 256, 256)
        case.launch(0)
        torch.cuda.synchronize()
        if case.release:
            case.release()
        return None
    except Exception as exc:  # any failure means "not usable here"
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def discover(ctx: DeviceContext | None = None) -> list[Peer]:
    """Which peers can run here.  Without ``ctx`` (no GPU) only imports are checked."""
    import importlib.util

    peers = []
    try:
        import torch

        has_mx = hasattr(torch, "float4_e2m1fn_x2") and hasattr(torch, "float8_e8m0fnu")
    except ImportError:
        has_mx = False
    if not has_mx:
        peers.append(Peer("torch_scaled_mm_mx", False,
                          "this torch has no float4_e2m1fn_x2 / float8_e8m0fnu dtypes"))
    elif ctx is None:
        peers.append(Peer("torch_scaled_mm_mx", False, "no GPU to probe on"))
    else:
        why = _try_tiny(torch_scaled_mm_mx_case, ctx)
        peers.append(Peer("torch_scaled_mm_mx", why is None,
                          why and f"unsupported on this device/torch: {why}" or "ok",
                          torch_scaled_mm_mx_case if why is None else None))
    if importlib.util.find_spec("aiter") is None:
        peers.append(Peer("aiter_gemm_a4w4", False, "aiter is not installed"))
    elif ctx is None:
        peers.append(Peer("aiter_gemm_a4w4", False, "no GPU to probe on"))
    else:
        why = _try_tiny(aiter_gemm_a4w4_case, ctx)
        peers.append(Peer("aiter_gemm_a4w4", why is None,
                          why and f"unusable here: {why}" or "ok",
                          aiter_gemm_a4w4_case if why is None else None))
    return peers


def peer_factory(peer: Peer, m: int, n: int, k: int):
    """A picklable launcher factory for an available peer at one shape."""
    if not peer.available:
        raise ValueError(f"peer {peer.name} is unavailable: {peer.note}")
    return functools.partial(peer.factory, m=m, n=n, k=k)
