"""Dense MXFP4 GEMM reference, shared GEMM inputs, and the output comparison.

``C[M, N] = dequant(A)[M, K] @ dequant(B)[N, K].T`` - the same contract as FlyDSL's
``kernels/gemm/mxfp4_preshuffle.py`` (A row-major fp4, B given N-major like A, both
with per-32 E8M0 scales) and the torch check in its ``test_preshuffle_gemm.py``.
Plain torch on the CPU; no FlyDSL import.
"""

from __future__ import annotations

import math
from typing import Dict

import torch

from . import formats as F

__all__ = ["gemm_reference", "gemm_reference_from_inputs", "make_gemm_inputs", "compare"]


def gemm_reference(
    a_packed: torch.Tensor,
    a_scales: torch.Tensor,
    b_packed: torch.Tensor,
    b_scales: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    accum: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Reference MXFP4 x MXFP4 GEMM on UNshuffled operands.

    Args:
        a_packed: uint8 [M, K//2], row-major packed fp4 (low nibble = even k).
        a_scales: uint8 [M, K//32] E8M0, plain (not :func:`formats.shuffle_scales`).
        b_packed: uint8 [N, K//2], plain (not :func:`formats.shuffle_weight_b`).
        b_scales: uint8 [N, K//32] E8M0, plain.
        out_dtype: dtype of the result (default bfloat16, what the kernels write).
        accum: float32 (default, like the MFMA accumulator) or float64 (for tests).

    Returns:
        ``out_dtype`` tensor [M, N]: operands dequantised exactly, multiplied in
        ``accum``, then rounded once (round-to-nearest-even) to ``out_dtype``.
    """
    if accum not in (torch.float32, torch.float64):
        raise ValueError(f"accum must be torch.float32 or torch.float64, got {accum}.")
    for name, t in (("a_packed", a_packed), ("a_scales", a_scales), ("b_packed", b_packed), ("b_scales", b_scales)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D torch.Tensor.")
    M, KB = a_packed.shape
    N = b_packed.shape[0]
    if b_packed.shape[1] != KB:
        raise ValueError(f"A has {KB} bytes per row (K={2 * KB}) but B has {b_packed.shape[1]}; K must match.")
    if tuple(a_scales.shape) != (M, KB // 16) or tuple(b_scales.shape) != (N, KB // 16) or KB % 16:
        raise ValueError(
            f"scales must be unshuffled [rows, K//32]: expected A {(M, KB // 16)} and B {(N, KB // 16)}, "
            f"got {tuple(a_scales.shape)} and {tuple(b_scales.shape)} (K={2 * KB} must be a multiple of 32)."
        )
    a = F.dequantize_mxfp4(a_packed, a_scales).to(accum)
    b = F.dequantize_mxfp4(b_packed, b_scales).to(accum)
    return (a @ b.T).to(out_dtype)


def make_gemm_inputs(M: int, N: int, K: int, seed: int, *, scale_rule: str = "flydsl") -> Dict[str, object]:
    """Deterministic random GEMM operands in every form the kernels and checks need.

    ``a`` [M, K] and ``b`` [N, K] are float32 standard normals drawn, in that order,
    from ``torch.Generator().manual_seed(seed)`` (as FlyDSL's fp4 GEMM test uses
    ``randn``), then quantised with :func:`formats.quantize_mxfp4`.

    Keys: ``M, N, K, seed, scale_rule``; ``a, b`` (float32); ``a_packed`` uint8
    [M, K//2]; ``a_scales`` uint8 [M, K//32]; ``b_packed`` uint8 [N, K//2];
    ``b_scales`` uint8 [N, K//32]; ``b_packed_shuffled`` (:func:`formats.shuffle_weight_b`);
    ``b_scales_shuffled`` and ``a_scales_shuffled`` (:func:`formats.shuffle_scales`).
    ``a_scales_shuffled`` has ``ceil(M/32)*32`` rows: A is padded with zero rows
    before quantising (their scale byte is 0), exactly as FlyDSL's test pads M.

    Requires M >= 1, N % 32 == 0 and K % 256 == 0 (the preshuffle granularity).
    """
    for name, v in (("M", M), ("N", N), ("K", K), ("seed", seed)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name} must be an int, got {v!r}.")
    if M < 1 or N < 32 or N % 32 or K < 256 or K % 256:
        raise ValueError(f"make_gemm_inputs needs M >= 1, N % 32 == 0 and K % 256 == 0; got M={M}, N={N}, K={K}.")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g, dtype=torch.float32)
    b = torch.randn(N, K, generator=g, dtype=torch.float32)
    m_pad = -(-M // 32) * 32
    a_padded = torch.zeros(m_pad, K, dtype=torch.float32)
    a_padded[:M] = a
    a_packed_pad, a_scales_pad = F.quantize_mxfp4(a_padded, scale_rule)
    b_packed, b_scales = F.quantize_mxfp4(b, scale_rule)
    return {
        "M": M,
        "N": N,
        "K": K,
        "seed": seed,
        "scale_rule": scale_rule,
        "a": a,
        "b": b,
        "a_packed": a_packed_pad[:M].contiguous(),
        "a_scales": a_scales_pad[:M].contiguous(),
        "a_scales_shuffled": F.shuffle_scales(a_scales_pad),
        "b_packed": b_packed,
        "b_scales": b_scales,
        "b_packed_shuffled": F.shuffle_weight_b(b_packed),
        "b_scales_shuffled": F.shuffle_scales(b_scales),
    }


def gemm_reference_from_inputs(inputs: Dict[str, object], **kwargs) -> torch.Tensor:
    """:func:`gemm_reference` on the plain operands of a :func:`make_gemm_inputs` dict."""
    try:
        args = (inputs["a_packed"], inputs["a_scales"], inputs["b_packed"], inputs["b_scales"])
    except (KeyError, TypeError):
        raise ValueError("inputs must be a dict made by make_gemm_inputs.") from None
    return gemm_reference(*args, **kwargs)


def compare(out: torch.Tensor, ref: torch.Tensor, *, atol: float = 0.1, rtol: float = 0.1) -> Dict[str, float]:
    """Error summary of a kernel output against the reference (both [M, N], any float dtype).

    Computed in float64:

    * ``cosine`` - cosine similarity of the flattened tensors (1.0 when both are all
      zero; NaN if ``out`` has non-finite values).
    * ``logits_diff`` - ``1 - 2<x,y>/(|x|^2+|y|^2)``, FlyDSL's ``verify_output`` metric
      (its gate is ``<= 2e-3``).
    * ``max_abs_err`` - max ``|out - ref|``.
    * ``max_rel_err`` - max ``|out - ref| / |ref|`` over elements with
      ``|ref| >= 1e-3 * max|ref|`` (so near-zero references do not dominate).
    * ``mismatches`` - count of elements with ``|out - ref| > atol + rtol*|ref|`` or
      non-finite ``out`` (defaults 0.1/0.1, the tolerances of FlyDSL's fp4 test);
      ``numel`` - element count.
    """
    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor):
        raise ValueError("compare needs two torch tensors.")
    if out.shape != ref.shape:
        raise ValueError(f"out shape {tuple(out.shape)} differs from ref shape {tuple(ref.shape)}.")
    x = out.detach().to(torch.float64).flatten()
    y = ref.detach().to(torch.float64).flatten()
    diff = (x - y).abs()
    finite = torch.isfinite(x)
    bad = (~finite) | (diff > atol + rtol * y.abs())
    if not finite.all():
        cosine = logits_diff = float("nan")
        max_abs = float("inf")
    else:
        nx, ny = float(x.norm()), float(y.norm())
        dot = float(x @ y)
        if nx == 0.0 and ny == 0.0:
            cosine, logits_diff = 1.0, 0.0
        else:
            cosine = dot / (nx * ny) if nx > 0 and ny > 0 else 0.0
            logits_diff = 1.0 - 2.0 * dot / (nx * nx + ny * ny)
        max_abs = float(diff.max()) if diff.numel() else 0.0
    ymax = float(y.abs().max()) if y.numel() else 0.0
    sel = y.abs() >= 1e-3 * ymax if ymax > 0 else torch.zeros_like(y, dtype=torch.bool)
    max_rel = float((diff[sel] / y[sel].abs()).max()) if bool(sel.any()) else 0.0
    if not math.isfinite(max_rel):
        max_rel = float("inf")
    return {
        "cosine": cosine,
        "logits_diff": logits_diff,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "mismatches": int(bad.sum()),
        "numel": int(x.numel()),
    }
