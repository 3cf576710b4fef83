"""Torch models of the two MoE kernels, reading exactly the buffers the kernels read.

:func:`emulate_gemm1` and :func:`emulate_gemm2` take the sorted, preshuffled buffers of
:mod:`mxfp4_ablation.moe.host` and compute what gemm1 / gemm2 must write, one M-block at a time
(the study's kernel references); :func:`run_moe_pipeline` chains the whole staged host pipeline
(sort, scale sort, preshuffles, gemm1, requant, gemm2, atomic add or scatter-reduce) so that every
layout decision is checked against the direct reference (:mod:`mxfp4_ablation.moe.reference`)
without a GPU.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn.functional as F

from mxfp4_ablation import formats
from mxfp4_ablation.moe.host import (
    MoEProblem, MoESorting, REGIMES, moe_sort, preshuffle_w1, preshuffle_w2, raw_bytes, round_up, scatter_reduce,
    sort_shuffle_scales, unpack_sorted_ids, unpreshuffle_w1, unpreshuffle_w2, unshuffle_sorted_scales,
)
from mxfp4_ablation.moe.reference import MOE_SCALE_RULE, quantize_mxfp4_moe

__all__ = ["emulate_gemm1", "emulate_gemm2", "atomic_accumulate_bf16", "run_moe_pipeline"]


def _sorted_scales_rows(buf, cols: int, sorting: MoESorting, name: str) -> torch.Tensor:
    """Unshuffle a sorted scale buffer and keep its first ``max_sorted`` rows."""
    need = round_up(sorting.max_sorted, 32) * cols
    if not isinstance(buf, torch.Tensor) or buf.numel() != need:
        got = buf.numel() if isinstance(buf, torch.Tensor) else type(buf).__name__
        raise ValueError(f"{name} must hold round_up(max_sorted, 32) * {cols} = {need} bytes, got {got}.")
    return unshuffle_sorted_scales(buf, cols)[: sorting.max_sorted]


def _gather_rows_zero_pad(a_quant: torch.Tensor, m_indices: torch.Tensor, tokens: int) -> torch.Tensor:
    """Rows ``a_quant[m_indices]``; out-of-range indices read zeros (the dropped buffer load)."""
    out = torch.zeros(m_indices.numel(), a_quant.shape[1], dtype=torch.uint8)
    tok = m_indices.to(torch.int64)
    valid = torch.nonzero(tok < tokens, as_tuple=True)[0]
    out[valid] = a_quant[tok[valid]]
    return out


def _valid_blocks(sorting: MoESorting):
    """(block index, expert, row slice) for each block the kernels process."""
    bm = sorting.block_m
    for b in range(sorting.num_valid_blocks):
        yield b, int(sorting.sorted_expert_ids[b]), slice(b * bm, (b + 1) * bm)


def emulate_gemm1(a_quant, a_scale_sorted_shuffled, w1_shuf, w1_scale_shuf, sorting: MoESorting,
                  interleave: bool = False, scale_rule: str = MOE_SCALE_RULE):
    """Torch model of gemm1 reading the kernel's own buffers, one M-block at a time.

    Each valid block (expert ``sorted_expert_ids[b]``) gathers its A rows through
    ``m_indices``, multiplies by that expert's gate and up rows, applies
    ``silu(gate) * up`` and requantises each row per 32 columns.  Returns
    ``(inter_quant uint8 [max_sorted, I/2], inter_scale_shuffled uint8 flat)``.
    """
    a_quant = raw_bytes(a_quant, "a_quant")
    if a_quant.dim() != 2 or a_quant.shape[0] != sorting.tokens:
        raise ValueError(f"a_quant must be [tokens={sorting.tokens}, H/2], got {tuple(a_quant.shape)}.")
    w1_q, w1_s = unpreshuffle_w1(w1_shuf, w1_scale_shuf, interleave)
    if w1_q.shape[2] != a_quant.shape[1] or w1_q.shape[0] != sorting.num_experts:
        raise ValueError(
            f"w1 {tuple(w1_q.shape)} does not match a_quant {tuple(a_quant.shape)} and {sorting.num_experts} experts."
        )
    inter = w1_q.shape[1] // 2
    a_rows = _gather_rows_zero_pad(a_quant, sorting.m_indices, sorting.tokens)
    a_sc = _sorted_scales_rows(a_scale_sorted_shuffled, a_quant.shape[1] // 16, sorting, "a_scale_sorted_shuffled")
    a = formats.dequantize_mxfp4(a_rows, a_sc)
    h = torch.zeros(sorting.max_sorted, inter, dtype=torch.float32)
    w_cache: Dict[int, torch.Tensor] = {}
    for _, e, rows in _valid_blocks(sorting):
        if e not in w_cache:
            w_cache[e] = formats.dequantize_mxfp4(w1_q[e], w1_s[e])
        gu = a[rows] @ w_cache[e].T
        h[rows] = F.silu(gu[:, :inter]) * gu[:, inter:]
    h_q, h_s = quantize_mxfp4_moe(h, scale_rule)
    h_s_pad = torch.zeros(round_up(sorting.max_sorted, 32), h_s.shape[1], dtype=torch.uint8)
    h_s_pad[: sorting.max_sorted] = h_s
    return h_q, formats.shuffle_scales(h_s_pad).reshape(-1)


def atomic_accumulate_bf16(contrib: torch.Tensor, token: torch.Tensor, tokens: int) -> torch.Tensor:
    """Add bf16 rows ``contrib[r]`` into a zeroed bf16 ``[tokens, H]`` at ``token[r]``, in row order.

    Models a bf16 atomic add: every addition is rounded to bf16.  Rows whose token
    is ``>= tokens`` (padding) are skipped, as the kernel's epilogue does.  The
    device order of the atomics is not fixed; we use sorted-row order.
    """
    out = torch.zeros(tokens, contrib.shape[1], dtype=torch.bfloat16)
    token = token.to(torch.int64)
    keep = torch.nonzero(token < tokens, as_tuple=True)[0]
    token, contrib = token[keep], contrib[keep].to(torch.bfloat16)
    # Round r adds the r-th contribution of every token, so each token gets its
    # additions in row order and one index_put never hits a token twice.
    if token.numel():
        order = torch.sort(token, stable=True).indices
        first = torch.cumsum(torch.bincount(token, minlength=tokens), 0) - torch.bincount(token, minlength=tokens)
        rank = torch.empty_like(token)
        rank[order] = torch.arange(token.numel()) - first[token[order]]
        for r in range(int(rank.max()) + 1):
            sel = torch.nonzero(rank == r, as_tuple=True)[0]
            out[token[sel]] = (out[token[sel]].float() + contrib[sel].float()).to(torch.bfloat16)
    return out


def emulate_gemm2(inter_quant, inter_scale_shuffled, w2_shuf, w2_scale_shuf, sorting: MoESorting,
                  epilog: str = "atomic") -> Dict[str, torch.Tensor]:
    """Torch model of gemm2 (down projection) on the sorted intermediate.

    ``epilog="atomic"`` (decode): each row adds ``bf16(w * y)`` into the bf16 output
    (:func:`atomic_accumulate_bf16`).  ``epilog="nonatomic"`` (prefill): rows are
    written unweighted as bf16 ``flat_out [max_sorted, H]`` and reduced by
    :func:`scatter_reduce`.  Returns ``out`` (bf16 ``[M, H]``) and, for non-atomic,
    ``flat_out``.
    """
    if epilog not in ("atomic", "nonatomic"):
        raise ValueError(f"epilog must be 'atomic' or 'nonatomic', got {epilog!r}.")
    inter_quant = raw_bytes(inter_quant, "inter_quant")
    if inter_quant.dim() != 2 or inter_quant.shape[0] != sorting.max_sorted:
        raise ValueError(f"inter_quant must be [max_sorted={sorting.max_sorted}, I/2], got {tuple(inter_quant.shape)}.")
    w2_q, w2_s = unpreshuffle_w2(w2_shuf, w2_scale_shuf)
    if w2_q.shape[2] != inter_quant.shape[1] or w2_q.shape[0] != sorting.num_experts:
        raise ValueError(f"w2 {tuple(w2_q.shape)} does not match inter_quant {tuple(inter_quant.shape)}.")
    h_sc = _sorted_scales_rows(inter_scale_shuffled, inter_quant.shape[1] // 16, sorting, "inter_scale_shuffled")
    h = formats.dequantize_mxfp4(inter_quant, h_sc)
    y = torch.zeros(sorting.max_sorted, w2_q.shape[1], dtype=torch.float32)
    w_cache: Dict[int, torch.Tensor] = {}
    for _, e, rows in _valid_blocks(sorting):
        if e not in w_cache:
            w_cache[e] = formats.dequantize_mxfp4(w2_q[e], w2_s[e])
        y[rows] = h[rows] @ w_cache[e].T
    token, _ = unpack_sorted_ids(sorting.sorted_token_ids)
    if epilog == "atomic":
        contrib = (sorting.sorted_weights.unsqueeze(-1) * y).to(torch.bfloat16)
        return {"out": atomic_accumulate_bf16(contrib, token, sorting.tokens)}
    flat = y.to(torch.bfloat16)
    return {"out": scatter_reduce(flat, sorting), "flat_out": flat}


def run_moe_pipeline(inputs: dict, regime: Optional[str] = None, interleave: bool = False,
                     pad_style: str = "mxfp4_aux", scale_rule: str = MOE_SCALE_RULE) -> Dict[str, object]:
    """The staged host pipeline end to end: sort, sort scales, preshuffle, gemm1, gemm2.

    ``regime`` defaults to ``inputs["problem"].regime``.  Returns every buffer a
    kernel launch would see (``sorting``, ``a_scale_sorted_shuffled``, ``w1_shuf``,
    ``w1_scale_shuf``, ``w2_shuf``, ``w2_scale_shuf``, ``inter_quant``,
    ``inter_scale_shuffled``) plus ``out`` (bf16 ``[M, H]``) and, for prefill, ``flat_out``.
    """
    problem = inputs.get("problem") if isinstance(inputs, dict) else None
    if not isinstance(problem, MoEProblem):
        raise ValueError("run_moe_pipeline needs the dict returned by make_moe_inputs (with weights).")
    for key in ("w1_quant", "w1_scale", "w2_quant", "w2_scale"):
        if key not in inputs:
            raise ValueError(f"inputs lack {key!r}; build them with make_moe_inputs(problem, with_weights=True).")
    name = problem.regime if regime is None else regime
    if name not in REGIMES:
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, got {name!r}.")
    cfg = REGIMES[name]
    sorting = moe_sort(inputs["topk_ids"], inputs["topk_weights"], problem.experts, cfg.block_m, pad_style)
    a_sc = sort_shuffle_scales(inputs["a_scale"], sorting)
    w1_shuf, w1_scale_shuf = preshuffle_w1(inputs["w1_quant"], inputs["w1_scale"], interleave)
    w2_shuf, w2_scale_shuf = preshuffle_w2(inputs["w2_quant"], inputs["w2_scale"])
    inter_q, inter_s = emulate_gemm1(inputs["a_quant"], a_sc, w1_shuf, w1_scale_shuf, sorting, interleave, scale_rule)
    g2 = emulate_gemm2(inter_q, inter_s, w2_shuf, w2_scale_shuf, sorting, cfg.gemm2_epilog)
    return dict(regime=cfg, sorting=sorting, a_scale_sorted_shuffled=a_sc, w1_shuf=w1_shuf,
                w1_scale_shuf=w1_scale_shuf, w2_shuf=w2_shuf, w2_scale_shuf=w2_scale_shuf,
                inter_quant=inter_q, inter_scale_shuffled=inter_s, **g2)
