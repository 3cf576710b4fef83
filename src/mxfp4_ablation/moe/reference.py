"""Direct torch reference for the MXFP4 a4w4 MoE (the numbers every kernel must hit).

What is computed, per token ``t`` and each of its top-k experts ``e`` (weight ``w``)::

    gate, up = x_t . Wgate_e^T, x_t . Wup_e^T          (W1_e = [Wgate_e; Wup_e], rows 0..I-1 gate)
    h        = silu(gate) * up                          (fp32)
    h_q      = MXFP4(h)  with the MoE requant rule      (what gemm1 writes for gemm2)
    y_t     += w * (h_q . Wdown_e^T)                    (gemm2; output bf16)

``x``, ``W1`` and ``W2`` are MXFP4 (E2M1 + one E8M0 scale per 1x32 along K).  The
reference dequantises them exactly to float32 and does plain fp32 matmuls, one
expert at a time.  It never looks at the sorted / padded / preshuffled buffers of
:mod:`mxfp4_ablation.moe.host`, so it is an independent check of that pipeline.

The MoE scale rule (why it is not the dense-GEMM rule)
------------------------------------------------------
Both places where the a4w4 MoE pipeline quantises on the device use the same
rule, which differs from the ``per_1x32_f4_quant`` test helper that
:func:`mxfp4_ablation.formats.quantize_mxfp4` reproduces:

* the activation quant of aiter's HIP aux kernel
  (``csrc/kernels/mxfp4_moe/moe_aux/moe_sort_quant.cuh``, aiter e4048607a5) and
* gemm1's fused requant of ``h`` (FlyDSL ``kernels/moe/mxfp_moe/mxfp4_gemm_common.py``
  ``_e8m0_roundup(amax, 6.0)``, FlyDSL 11c4174d)

both take ``v = float32(amax) * float32(1/6)``, round its exponent UP whenever any
mantissa bit is set (``(bits(v) + 0x7FFFFF) >> 23``) and clamp to 254.  So the
block max lands in (3, 6] and nothing saturates.  Elements are then converted with
``v_cvt_scalef32_pk_fp4_*`` (divide by the scale, round to nearest even) - we
model that with :func:`mxfp4_ablation.formats.e2m1_encode`.
"""

from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F

from mxfp4_ablation import formats

__all__ = [
    "MOE_SCALE_RULE",
    "e8m0_scale_moe",
    "quantize_mxfp4_moe",
    "moe_gemm1_reference",
    "moe_gemm2_reference",
    "moe_reference",
]

#: Name of the MoE scale rule, accepted by :func:`quantize_mxfp4_moe`.
MOE_SCALE_RULE = "moe"

_INV6 = torch.tensor(1.0 / 6.0, dtype=torch.float32)


def e8m0_scale_moe(amax: torch.Tensor) -> torch.Tensor:
    """E8M0 byte per block amax with the MoE rule: ``ceil`` of the exponent of ``amax/6``.

    Exactly the integer recipe of the device code (see the module docstring):
    multiply by the float32 reciprocal of 6 (not a division), add ``0x7FFFFF`` to the
    bit pattern, keep the exponent field, clamp to 254.  ``amax == 0`` gives byte 0.
    """
    if not isinstance(amax, torch.Tensor) or not amax.dtype.is_floating_point:
        raise ValueError("e8m0_scale_moe needs a floating-point tensor of block maxima.")
    a = amax.to(torch.float32)
    if not torch.isfinite(a).all() or bool((a < 0).any()):
        raise ValueError("e8m0_scale_moe needs finite, non-negative block maxima.")
    bits = (a * _INV6).contiguous().view(torch.int32).to(torch.int64)
    bexp = ((bits + 0x7FFFFF) >> 23) & 0xFF
    return torch.clamp(bexp, max=254).to(torch.uint8)


def quantize_mxfp4_moe(x: torch.Tensor, scale_rule: str = MOE_SCALE_RULE):
    """Quantise ``x[..., K]`` to MXFP4 -> ``(packed uint8[..., K//2], scales uint8[..., K//32])``.

    ``scale_rule="moe"`` (default) is the MoE pipeline rule above; any rule of
    :data:`mxfp4_ablation.formats.SCALE_RULES` is handed to
    :func:`mxfp4_ablation.formats.quantize_mxfp4` unchanged, so ablations can swap it.
    The element rounding is the formats module's in every case.
    """
    if scale_rule != MOE_SCALE_RULE:
        return formats.quantize_mxfp4(x, scale_rule=scale_rule)
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise ValueError("quantize_mxfp4_moe needs a floating-point tensor.")
    if x.dim() == 0 or x.shape[-1] == 0 or x.shape[-1] % formats.MX_BLOCK:
        raise ValueError(
            f"quantize_mxfp4_moe needs the last dimension K to be a positive multiple of 32, got shape {tuple(x.shape)}."
        )
    x32 = x.to(torch.float32)
    if not torch.isfinite(x32).all():
        raise ValueError("quantize_mxfp4_moe got NaN or Inf values; MXFP4 block scales need finite input.")
    lead, K = x32.shape[:-1], x32.shape[-1]
    blocks = x32.reshape(*lead, K // formats.MX_BLOCK, formats.MX_BLOCK)
    scales = e8m0_scale_moe(blocks.abs().amax(dim=-1))
    codes = formats.e2m1_encode(blocks / formats.e8m0_decode(scales).unsqueeze(-1))
    return formats.pack_fp4(codes.reshape(*lead, K)), scales


def _check_routing(topk_ids: torch.Tensor, num_experts: int, tokens: int):
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens:
        raise ValueError(f"topk_ids must be [tokens={tokens}, topk], got shape {tuple(topk_ids.shape)}.")
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= num_experts):
        raise ValueError(f"topk_ids must lie in 0..{num_experts - 1}.")


def moe_gemm1_reference(a_quant, a_scale, w1_quant, w1_scale, topk_ids) -> torch.Tensor:
    """Stage 1: ``h[t, k, :] = silu(x_t Wgate^T) * (x_t Wup^T)`` for expert ``topk_ids[t, k]``.

    Shapes: ``a_quant [M, H/2]``, ``a_scale [M, H/32]``, ``w1_quant [E, 2I, H/2]``,
    ``w1_scale [E, 2I, H/32]`` (plain, unshuffled; gate rows first), ``topk_ids [M, k]``.
    Returns float32 ``[M, k, I]`` (before the requant).
    """
    x = formats.dequantize_mxfp4(a_quant, a_scale)
    E, two_i = w1_quant.shape[0], w1_quant.shape[1]
    if two_i % 2:
        raise ValueError(f"w1 must stack gate and up rows (2*I rows), got {two_i} rows.")
    _check_routing(topk_ids, E, x.shape[0])
    inter = two_i // 2
    M, k = topk_ids.shape
    h = torch.zeros(M, k, inter, dtype=torch.float32)
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        w = formats.dequantize_mxfp4(w1_quant[e], w1_scale[e])  # [2I, H]
        gu = x[tok] @ w.T
        h[tok, slot] = F.silu(gu[:, :inter]) * gu[:, inter:]
    return h


def moe_gemm2_reference(h_quant, h_scale, w2_quant, w2_scale, topk_ids, topk_weights) -> Dict[str, torch.Tensor]:
    """Stage 2: ``y[t] = sum_k w[t, k] * (h_q[t, k] . Wdown_e^T)``.

    Shapes: ``h_quant [M, k, I/2]``, ``h_scale [M, k, I/32]``, ``w2_quant [E, H, I/2]``,
    ``w2_scale [E, H, I/32]``.  Returns ``per_slot`` (fp32 ``[M, k, H]``, unweighted),
    ``out_f32`` (fp32 weighted sum in slot order) and ``out`` (``out_f32`` rounded to bf16).
    """
    h = formats.dequantize_mxfp4(h_quant, h_scale)
    E, H = w2_quant.shape[0], w2_quant.shape[1]
    _check_routing(topk_ids, E, h.shape[0])
    M, k = topk_ids.shape
    per_slot = torch.zeros(M, k, H, dtype=torch.float32)
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        w = formats.dequantize_mxfp4(w2_quant[e], w2_scale[e])  # [H, I]
        per_slot[tok, slot] = h[tok, slot] @ w.T
    out_f32 = (per_slot * topk_weights.to(torch.float32).unsqueeze(-1)).sum(dim=1)
    return {"per_slot": per_slot, "out_f32": out_f32, "out": out_f32.to(torch.bfloat16)}


def moe_reference(inputs: dict, scale_rule: str = MOE_SCALE_RULE) -> Dict[str, torch.Tensor]:
    """Both stages straight from the plain (unsorted, unshuffled) inputs of ``make_moe_inputs``.

    Returns ``h`` (fp32 ``[M, k, I]``), ``h_quant`` / ``h_scale`` (its requant),
    ``per_slot``, ``out_f32`` and ``out`` (bf16 ``[M, H]``).
    """
    h = moe_gemm1_reference(inputs["a_quant"], inputs["a_scale"], inputs["w1_quant"], inputs["w1_scale"],
                            inputs["topk_ids"])
    h_q, h_s = quantize_mxfp4_moe(h, scale_rule)
    out = moe_gemm2_reference(h_q, h_s, inputs["w2_quant"], inputs["w2_scale"], inputs["topk_ids"],
                              inputs["topk_weights"])
    return {"h": h, "h_quant": h_q, "h_scale": h_s, **out}
