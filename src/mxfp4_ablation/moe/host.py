"""Host side of the MXFP4 a4w4 MoE: routing, sorting, quantisation, preshuffles, reduce.

Everything a gfx950 kernel launch needs around gemm1 / gemm2, in plain torch on the
CPU.  The torch *emulations* of the two kernels, which read exactly the buffers built
here, are :mod:`mxfp4_ablation.moe.emulate`: they check every layout decision against
the direct reference (:mod:`mxfp4_ablation.moe.reference`) without a GPU.

Sources (read, not copied; checked 2026-11-30):

* aiter e4048607a5 - ``aiter/fused_moe.py`` (``_adaptive_moe_sort``,
  ``_mxfp4_a4w4_stage1/2``), ``aiter/ops/moe_mxfp4_aux.py`` and the HIP aux kernels
  ``csrc/kernels/mxfp4_moe/moe_aux/{moe_3stage_sort,moe_sort_scales,
  moe_scatter_reduce,moe_sort_quant}.cuh`` that feed the FlyDSL kernels of
  aiter PR #3828 (merge b242ba66a6).
* FlyDSL 11c4174d - ``kernels/moe/mxfp_moe/{host,gemm1,gemm2,mxfp4_gemm_common}.py``
  (the ported kernels' index math) and ``tests/kernels/test_moe_gemm.py``.

Layout decisions (each one is tested in ``tests/test_moe_host.py``)
-----------------------------------------------------------------
* **Sorted ids**: ``(slot << 24) | token`` in int32 (slot = position in the token's
  top-k list), as the aux sort writes it.  Rows of one expert are padded up to a
  multiple of ``block_m``; the padding value is the token count ``M`` with no slot
  bits (``pad_style="mxfp4_aux"``, default) - the aux sort pads this way so that
  the A-row load ``m_indices * row_bytes`` lands past the end of ``a_quant`` and the
  hardware returns zeros.  ``pad_style="ck"`` gives CK/aiter ``moe_sorting``'s
  ``(topk << 24) | M`` instead.  Either way a row is padding iff ``id & 0xFFFFFF >= M``.
* Within an expert, rows follow the (token, slot) pair order.  The HIP sort places
  them with atomics, so its order is arbitrary; ours is stable so runs repeat.
* **num_valid_ids** (``cumsum_tensor``) = ``[total padded rows, M]``;
  **sorted_expert_ids** has one id per ``block_m`` rows, ``-1`` after the last valid
  block (the HIP sort leaves those entries unwritten; kernels never read them).
  **m_indices** = token id per sorted row (``M`` for padding);
  **reverse_sorted** ``[M*topk]`` = sorted row of pair ``t*topk + k`` (for the reduce).
* **Buffer size** ``max_sorted = round_up(M*topk + min(E, M*topk)*(block_m-1), block_m)``
  (``_adaptive_moe_sort``): every active expert wastes at most ``block_m - 1`` rows.
* **Activations** stay token-major ``[M, H/2]`` (gemm1 gathers rows through
  ``m_indices``); their E8M0 scales are gathered into sorted order and preshuffled
  with :func:`mxfp4_ablation.formats.shuffle_scales` (rows padded to 32).  This is the
  byte order of ``moe_sort_scales.cuh`` (dword ``(chunk32, k8, k_lane, n_lane)``,
  byte ``2*k_half + m_half``) - the same as the dense ``e8m0_shuffle``.
* **W1 / W2 preshuffle**: :func:`mxfp4_ablation.formats.shuffle_weight_b` per expert
  (16 rows x 64 bytes tiles: gemm1 loads lane ``16*kl + nl`` at byte
  ``256*kl + 16*nl (+1024 per 128-K half, +2048 per 256-K step)`` from the tile
  base ``(e*N + row0) * K/2``) and :func:`mxfp4_ablation.formats.shuffle_scales`
  per expert (dword ``((e*N/32 + n32)*K/256 + k256)*64 + 16*kl + nl``).
  Both tilings in circulation are this one permutation: aiter/FlyDSL
  ``shuffle_weight(w, layout=(16, 16))`` (16 x 32-byte view, what FlyDSL's a4w4 test
  feeds) and the 16 x 64-byte view put byte ``c`` of row ``n`` at
  ``(n - n%16)*K/2 + (c//16)*256 + (n%16)*16 + c%16`` (checked in the tests).
* **Gate/up**: W1 rows ``[0, I)`` are gate, ``[I, 2I)`` up ("separated", aiter
  ``GateMode.SEPARATED``).  With ``interleave=True`` (``GateMode.INTERLEAVE``) the
  rows - and their scale rows - are reordered in 16-row tiles
  ``g0 u0 g1 u1 ...`` before the preshuffle: gemm1's interleaved B address is
  ``n_block*256 + wave*64 + 16*j`` with ``j`` even = gate, odd = up, and its
  interleaved scale base walks 32-row groups ``n_block*8 + 2*wave (+1)``.  This is
  also aiter ``shuffle_weight(w, is_guinterleave=True, gate_up=True)``'s row order
  (``aiter/ops/shuffle.py``).
* **Intermediate** (gemm1 -> gemm2): fp4 row-major ``[max_sorted, I/2]`` in sorted
  order, scales ``[round_up(max_sorted, 32), I/32]`` preshuffled like the A scales
  (gemm1's epilogue writes dword ``(chunk32, k8, k_lane, m_lane)``, byte
  ``2*k_half + m_half``).
* **gemm2 output**: decode (``block_m`` 16) accumulates ``bf16(w * y)`` atomically
  into a zeroed bf16 ``[M, H]``; prefill (``block_m`` 128) writes unweighted bf16 rows
  ``[max_sorted, H]`` and :func:`scatter_reduce` sums ``w * row`` per token in fp32,
  in slot order, rounding once to bf16 (``moe_scatter_reduce.cuh``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch

from mxfp4_ablation import formats
from mxfp4_ablation.moe.reference import MOE_SCALE_RULE, quantize_mxfp4_moe

__all__ = [
    "TOKEN_BITS",
    "TOKEN_MASK",
    "RegimeConfig",
    "REGIMES",
    "MoEProblem",
    "KIMI_K25_TP4",
    "SMALL_TEST",
    "SMALL_TEST_TOKENS",
    "kimi_k25_tp4",
    "small_test_problem",
    "make_moe_inputs",
    "expert_mxfp4",
    "weight_shapes",
    "route_topk",
    "MoESorting",
    "max_sorted_rows",
    "moe_sort",
    "pack_sorted_id",
    "unpack_sorted_ids",
    "quantize_activations",
    "inline_e8m0",
    "quantize_activations_inline",
    "sort_shuffle_scales",
    "unshuffle_sorted_scales",
    "interleave_gate_up",
    "deinterleave_gate_up",
    "preshuffle_w1",
    "preshuffle_w2",
    "unpreshuffle_w1",
    "unpreshuffle_w2",
    "raw_bytes",
    "round_up",
    "scatter_reduce",
    "gemm1_flops",
    "gemm2_flops",
    "moe_flops",
    "sorting_stats",
]

#: Low bits of a sorted id that hold the token; the slot sits above them.
TOKEN_BITS = 24
TOKEN_MASK = (1 << TOKEN_BITS) - 1
_MAX_TOPK = 127  # keeps (slot << 24 | token) a non-negative int32


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class RegimeConfig:
    """How one regime tiles the MoE: rows per M-block and the gemm2 epilogue."""

    name: str
    block_m: int
    gemm2_epilog: str  # "atomic" or "nonatomic"
    note: str = ""


#: The two regimes of the seed (aiter PR #3828 / FlyDSL mxfp_moe host): BM16 atomic
#: for decode, BM128 non-atomic + scatter-reduce for prefill.
REGIMES: Dict[str, RegimeConfig] = {
    "decode": RegimeConfig("decode", 16, "atomic",
                           "small M; gemm1 quantises A inline from bf16 (its own rule: quantize_activations_inline); "
                           "gemm2 adds bf16(w*y) atomically into the zeroed output"),
    "prefill": RegimeConfig("prefill", 128, "nonatomic",
                            "large M; gemm2 writes per-row bf16, then a weighted scatter-reduce"),
}


@dataclass(frozen=True)
class MoEProblem:
    """One MoE layer instance: sizes, token count, seed and regime.

    ``hidden`` and ``intermediate`` must be multiples of 256 (the kernels' K step
    and the scale preshuffle's 8-column word group).
    """

    experts: int
    hidden: int
    intermediate: int
    topk: int
    tokens: int
    seed: int = 0
    regime: str = "decode"
    renormalize: bool = True

    def __post_init__(self):
        for name in ("experts", "hidden", "intermediate", "topk", "tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"MoEProblem.{name} must be a positive int, got {v!r}.")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"MoEProblem.seed must be an int, got {self.seed!r}.")
        if self.regime not in REGIMES:
            raise ValueError(f"MoEProblem.regime must be one of {sorted(REGIMES)}, got {self.regime!r}.")
        if self.hidden % 256 or self.intermediate % 256:
            raise ValueError(
                f"hidden ({self.hidden}) and intermediate ({self.intermediate}) must be multiples of 256."
            )
        if self.topk > self.experts:
            raise ValueError(f"topk ({self.topk}) cannot exceed the number of experts ({self.experts}).")
        if self.topk > _MAX_TOPK:
            raise ValueError(f"topk must be at most {_MAX_TOPK} so a sorted id fits an int32, got {self.topk}.")
        if self.tokens > TOKEN_MASK:
            raise ValueError(f"tokens must be below 2**24 (24-bit token field), got {self.tokens}.")

    @property
    def block_m(self) -> int:
        return REGIMES[self.regime].block_m

    @property
    def valid_rows(self) -> int:
        """(token, expert) pairs = rows of useful work in each gemm."""
        return self.tokens * self.topk


#: Kimi-K2.5 at TP=4 as the seed's kernels see it: 384 routed + 1 shared expert
#: (NE=385), top-8 + shared (TOPK=9), model dim 7168, per-shard intermediate
#: 2048/4 = 512 (glossary of aiter/ops/moe_mxfp4_aux.py; FlyDSL PR #667 constants).
KIMI_K25_TP4 = dict(experts=385, hidden=7168, intermediate=512, topk=9)

#: Small shape for the CPU tests (fits in well under a second per stage).
SMALL_TEST = dict(experts=8, hidden=512, intermediate=256, topk=2)
SMALL_TEST_TOKENS = (16, 200)

#: From this many tokens on, the Kimi tuned config picks BM128 for gemm1
#: (FlyDSL PR #667 table: 1..128 -> BM16, 256..2048 -> BM32, 4096..32768 -> BM128).
PREFILL_FROM_TOKENS = 4096


def kimi_k25_tp4(tokens: int, regime: Optional[str] = None, seed: int = 0) -> MoEProblem:
    """Kimi-K2.5 TP=4 problem; regime defaults to prefill from 4096 tokens on."""
    if regime is None:
        regime = "prefill" if isinstance(tokens, int) and tokens >= PREFILL_FROM_TOKENS else "decode"
    return MoEProblem(tokens=tokens, seed=seed, regime=regime, **KIMI_K25_TP4)


def small_test_problem(tokens: int = 16, regime: str = "decode", seed: int = 0) -> MoEProblem:
    """The small test shape (8 experts, hidden 512, intermediate 256, top-2)."""
    return MoEProblem(tokens=tokens, seed=seed, regime=regime, **SMALL_TEST)


# --------------------------------------------------------------------------- routing


def route_topk(router_logits: torch.Tensor, topk: int, renormalize: bool = True):
    """Softmax over experts (fp32), then top-k -> ``(weights float32 [M,k], ids int32 [M,k])``.

    ``renormalize`` divides the k kept probabilities by their sum (Kimi/DeepSeek
    ``norm_topk_prob``).  Ties go to the lower expert id (``torch.topk`` on the CPU).
    """
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("router_logits must be a 2-D tensor [tokens, experts].")
    if not router_logits.dtype.is_floating_point or not torch.isfinite(router_logits).all():
        raise ValueError("router_logits must be finite floating-point values.")
    E = router_logits.shape[1]
    if not isinstance(topk, int) or not 1 <= topk <= min(E, _MAX_TOPK):
        raise ValueError(f"topk must be an int in 1..{min(E, _MAX_TOPK)}, got {topk!r}.")
    probs = torch.softmax(router_logits.to(torch.float32), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.contiguous(), ids.to(torch.int32).contiguous()


# --------------------------------------------------------------------------- inputs


def _expert_generator(seed: int, tag: str, expert: int) -> torch.Generator:
    """The generator of one expert's weights: seeded from ``(seed, tag, expert)`` alone, so any expert's
    bytes are the same whatever the number of experts drawn."""
    import hashlib

    digest = hashlib.sha256(f"mxfp4-ablation/moe/{tag}/{int(seed)}/{int(expert)}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def expert_mxfp4(seed: int, tag: str, expert: int, rows: int, cols: int, k: int):
    """One expert's random fp4 bytes ``uint8 [rows, cols/2]`` and E8M0 scales ``[rows, cols/32]``, sized so
    that ``|w| ~ 1/sqrt(k)``; ``tag`` names the weight ("w1", "w2").  Drawing codes directly (instead of
    quantising a float matrix) keeps the Kimi weights affordable (1.4 GB of bytes, no 5.6 GB float
    tensor first); one generator per expert (:func:`_expert_generator`) keeps an expert's bytes the
    same whatever the expert count drawn."""
    gen = _expert_generator(seed, tag, expert)
    packed = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
    base = 127 - 2 - round(math.log2(math.sqrt(k)))  # mean |E2M1 code| ~ 2.25 = 2**1.2
    scales = torch.randint(base - 1, base + 2, (rows, cols // 32), generator=gen).to(torch.uint8)
    return packed, scales


def _random_mxfp4(seed: int, tag: str, rows: int, cols: int, lead: int, k: int):
    """Every expert's :func:`expert_mxfp4`, stacked: ``([lead, rows, cols/2], [lead, rows, cols/32])``."""
    packed = torch.empty(lead, rows, cols // 2, dtype=torch.uint8)
    scales = torch.empty(lead, rows, cols // 32, dtype=torch.uint8)
    for e in range(lead):
        packed[e], scales[e] = expert_mxfp4(seed, tag, e, rows, cols, k)
    return packed, scales


#: the (rows, cols, k) of each weight of a problem: W1 [E, 2I, H] (gate/up), W2 [E, H, I] (down)
def _weight_dims(p: "MoEProblem", tag: str):
    return (2 * p.intermediate, p.hidden, p.hidden) if tag == "w1" else (p.hidden, p.intermediate, p.intermediate)


def weight_shapes(problem: "MoEProblem", tag: str):
    """``(quant_shape, scale_shape)`` of weight ``tag`` ("w1", "w2") as :func:`preshuffle_w1` /
    :func:`preshuffle_w2` leave it: ``[E, rows, cols/2]`` and ``[E, rows, cols/32]``."""
    if tag not in ("w1", "w2"):
        raise ValueError(f"weight tag must be 'w1' or 'w2', got {tag!r}.")
    rows, cols, _ = _weight_dims(problem, tag)
    return (problem.experts, rows, cols // 2), (problem.experts, rows, cols // 32)


def _by_rows(fn, x: torch.Tensor, rows: int = 1024):
    """``fn`` (a per-row quantiser returning ``(packed, scales)``) applied ``rows`` rows at a time:
    the same bytes as one call, with temporaries of ``rows`` rows only."""
    if x.shape[0] <= rows:
        return fn(x)
    parts = [fn(x[i:i + rows]) for i in range(0, x.shape[0], rows)]
    return torch.cat([q for q, _ in parts]), torch.cat([s for _, s in parts])


def make_moe_inputs(problem: MoEProblem, with_weights: bool = True, with_activations: bool = True) -> dict:
    """Build every input of one problem deterministically from ``problem.seed``.

    Returns ``hidden_states`` (bf16 ``[M, H]``), ``router_logits`` (fp32 ``[M, E]``),
    ``topk_weights`` / ``topk_ids`` (:func:`route_topk`), ``a_quant`` / ``a_scale``
    (the MoE-rule MXFP4 of the hidden states) and, with ``with_weights``, plain
    (unshuffled) ``w1_quant [E, 2I, H/2]``, ``w1_scale [E, 2I, H/32]``,
    ``w2_quant [E, H, I/2]``, ``w2_scale [E, H, I/32]`` (each expert from its own generator,
    :func:`expert_mxfp4`).  Without ``with_activations`` (a timing run's inputs: the routing only)
    ``hidden_states``, ``a_quant`` and ``a_scale`` are None: the hidden states are still drawn, since
    the router logits come after them from the same generator, but neither kept nor quantised.
    ``problem`` rides along.
    """
    if not isinstance(problem, MoEProblem):
        raise ValueError(f"make_moe_inputs needs a MoEProblem, got {type(problem).__name__}.")
    p = problem
    gen = torch.Generator().manual_seed(p.seed)
    hidden_states = torch.randn(p.tokens, p.hidden, generator=gen).to(torch.bfloat16)
    router_logits = torch.randn(p.tokens, p.experts, generator=gen)
    topk_weights, topk_ids = route_topk(router_logits, p.topk, p.renormalize)
    if with_activations:
        a_quant, a_scale = _by_rows(quantize_activations, hidden_states)
    else:
        hidden_states = a_quant = a_scale = None
    out = dict(problem=p, hidden_states=hidden_states, router_logits=router_logits,
               topk_weights=topk_weights, topk_ids=topk_ids, a_quant=a_quant, a_scale=a_scale)
    if with_weights:
        for tag in ("w1", "w2"):
            rows, cols, k = _weight_dims(p, tag)
            out[f"{tag}_quant"], out[f"{tag}_scale"] = _random_mxfp4(p.seed, tag, rows, cols, p.experts, k)
    return out


def quantize_activations(hidden_states: torch.Tensor, scale_rule: str = MOE_SCALE_RULE):
    """MXFP4 of the hidden states, token-major: ``(a_quant [M, H/2], a_scale [M, H/32])``.

    Default rule = the aux quant kernel's (see :mod:`mxfp4_ablation.moe.reference`).
    The decode gemm1's in-kernel ("inline") quant has its own rule:
    :func:`quantize_activations_inline`.
    """
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 2:
        raise ValueError("hidden_states must be a 2-D tensor [tokens, hidden].")
    return quantize_mxfp4_moe(hidden_states, scale_rule)


def inline_e8m0(amax_bf16_bits: torch.Tensor) -> torch.Tensor:
    """E8M0 byte of the decode gemm1's in-kernel A quant from a block amax given as bf16 bits.

    The rule of aiter b242ba66a ``mxfp4_gemm1.py`` ``_inline_e8m0`` (HIP
    ``inline_quant_encode_e8m0``, "the -2/clamp variant matching moe_sort_quant"; quoted as
    behaviour, not code): take the amax as the f32 whose high half is its bf16 bits, add
    ``0x200000`` (a quarter of the mantissa range, so a mantissa of 0.75 or more rounds the
    exponent up), keep the exponent field, subtract 2 and clamp to ``[0, 254]``.  The block max
    then lands in [4, 7) before the element conversion saturates it at 6.
    """
    if not isinstance(amax_bf16_bits, torch.Tensor) or amax_bf16_bits.dtype.is_floating_point:
        raise ValueError("inline_e8m0 needs an integer tensor of bf16 bit patterns.")
    bits = (amax_bf16_bits.to(torch.int64) & 0xFFFF) << 16
    bexp = ((bits + 0x200000) >> 23) & 0xFF
    return torch.clamp(bexp - 2, 0, 254).to(torch.uint8)


def quantize_activations_inline(hidden_states: torch.Tensor):
    """MXFP4 of bf16 hidden states with the decode gemm1's in-kernel rule -> ``(a_quant [M, H/2],
    a_scale [M, H/32])``, token-major like :func:`quantize_activations`.

    Per 1x32 block (aiter b242ba66a ``mxfp4_gemm1.py`` ``_inline_quant_core``: ``_pkmax_u16``
    over the sign-cleared bf16 bits, ``_inline_dpp_quad_amax`` across the 4 lanes holding the
    block, ``_inline_e8m0``, then ``v_cvt_scalef32_pk_fp4_bf16``): the amax is the max of
    ``|x|`` compared as bf16 bit patterns (``bits & 0x7FFF`` as unsigned 16-bit: for finite
    values the same order as the magnitudes), the scale is :func:`inline_e8m0`, and each element
    is ``x / 2**(e - 127)`` rounded to E2M1 (nearest even, saturating at 6; the sign kept), which
    is :func:`mxfp4_ablation.formats.e2m1_encode` (exact here: a bf16 divided by a power of two
    is exact in f32).  NaN/Inf inputs are refused.
    """
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 2:
        raise ValueError("hidden_states must be a 2-D tensor [tokens, hidden].")
    if hidden_states.shape[1] == 0 or hidden_states.shape[1] % formats.MX_BLOCK:
        raise ValueError(f"hidden must be a positive multiple of 32, got {hidden_states.shape[1]}.")
    x = hidden_states.to(torch.bfloat16)
    if not torch.isfinite(x).all():
        raise ValueError("quantize_activations_inline got NaN or Inf values.")
    M, H = x.shape
    bits = x.contiguous().view(torch.int16).to(torch.int64) & 0x7FFF
    amax = bits.reshape(M, H // formats.MX_BLOCK, formats.MX_BLOCK).amax(dim=-1)
    scales = inline_e8m0(amax)
    blocks = x.to(torch.float32).reshape(M, H // formats.MX_BLOCK, formats.MX_BLOCK)
    codes = formats.e2m1_encode(blocks / formats.e8m0_decode(scales).unsqueeze(-1))
    return formats.pack_fp4(codes.reshape(M, H)), scales


# --------------------------------------------------------------------------- sorting


def pack_sorted_id(token, slot):
    """``(slot << 24) | token`` - the sorted-id encoding of the aux sort."""
    return (slot << TOKEN_BITS) | token


def unpack_sorted_ids(ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Split sorted ids into ``(token, slot)`` int64 tensors (padding keeps token >= M)."""
    ids = ids.to(torch.int64)
    return ids & TOKEN_MASK, (ids >> TOKEN_BITS) & 0xFF


def max_sorted_rows(tokens: int, topk: int, num_experts: int, block_m: int) -> int:
    """Sorted-buffer rows aiter allocates: at most ``block_m - 1`` padding rows per active expert."""
    pairs = tokens * topk
    active = min(num_experts, pairs)
    return -(-(pairs + active * (block_m - 1)) // block_m) * block_m


@dataclass
class MoESorting:
    """Output of :func:`moe_sort` - the routing buffers both kernels read."""

    sorted_token_ids: torch.Tensor   # int32 [max_sorted]
    sorted_weights: torch.Tensor     # float32 [max_sorted], 0 on padding
    sorted_expert_ids: torch.Tensor  # int32 [max_sorted // block_m], -1 after the last valid block
    num_valid_ids: torch.Tensor      # int32 [2] = [total padded rows, M]  (the kernels' cumsum_tensor)
    m_indices: torch.Tensor          # int32 [max_sorted], token per row, M on padding
    reverse_sorted: torch.Tensor     # int32 [M * topk], sorted row of pair t*topk + k
    block_m: int
    tokens: int
    topk: int
    num_experts: int
    pad_style: str = "mxfp4_aux"
    sentinel: int = field(default=0)

    @property
    def max_sorted(self) -> int:
        return int(self.sorted_token_ids.numel())

    @property
    def total_padded(self) -> int:
        """Rows inside valid blocks, padding included (``num_valid_ids[0]``)."""
        return int(self.num_valid_ids[0])

    @property
    def num_valid_blocks(self) -> int:
        return self.total_padded // self.block_m

    def valid_row_mask(self) -> torch.Tensor:
        """True for sorted rows that hold a real (token, slot) pair."""
        tok, _ = unpack_sorted_ids(self.sorted_token_ids)
        return tok < self.tokens


def moe_sort(topk_ids: torch.Tensor, topk_weights: torch.Tensor, num_experts: int, block_m: int,
             pad_style: str = "mxfp4_aux") -> MoESorting:
    """Group the (token, slot) pairs by expert into ``block_m``-row blocks (see module docstring)."""
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.shape[0] < 1:
        raise ValueError("topk_ids must be a non-empty 2-D tensor [tokens, topk].")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        raise ValueError(f"topk_ids must hold integer expert ids, got dtype {topk_ids.dtype}.")
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_weights must have the shape of topk_ids {tuple(topk_ids.shape)}.")
    if not isinstance(num_experts, int) or num_experts < 1:
        raise ValueError(f"num_experts must be a positive int, got {num_experts!r}.")
    if not isinstance(block_m, int) or isinstance(block_m, bool) or block_m < 1:
        raise ValueError(f"block_m must be a positive int, got {block_m!r}.")
    if pad_style not in ("mxfp4_aux", "ck"):
        raise ValueError(f"pad_style must be 'mxfp4_aux' or 'ck', got {pad_style!r}.")
    M, k = topk_ids.shape
    if M > TOKEN_MASK or k > _MAX_TOPK:
        raise ValueError(f"at most 2**24-1 tokens and top-{_MAX_TOPK} fit the sorted-id encoding, got {M}x{k}.")
    ids = topk_ids.to(torch.int64).reshape(-1)
    if int(ids.min()) < 0 or int(ids.max()) >= num_experts:
        raise ValueError(f"topk_ids must lie in 0..{num_experts - 1}, got {int(ids.min())}..{int(ids.max())}.")

    counts = torch.bincount(ids, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded          # first sorted row of each expert
    first_pair = torch.cumsum(counts, 0) - counts      # first index of each expert after the stable sort
    order = torch.sort(ids, stable=True).indices        # pair indices grouped by expert, pair order kept
    exp_sorted = ids[order]
    pos = starts[exp_sorted] + torch.arange(order.numel()) - first_pair[exp_sorted]

    max_sorted = max_sorted_rows(M, k, num_experts, block_m)
    sentinel = M if pad_style == "mxfp4_aux" else pack_sorted_id(M, k)
    token = order // k
    slot = order % k
    sorted_token_ids = torch.full((max_sorted,), sentinel, dtype=torch.int32)
    sorted_token_ids[pos] = pack_sorted_id(token, slot).to(torch.int32)
    sorted_weights = torch.zeros(max_sorted, dtype=torch.float32)
    sorted_weights[pos] = topk_weights.reshape(-1).to(torch.float32)[order]
    m_indices = torch.full((max_sorted,), M, dtype=torch.int32)
    m_indices[pos] = token.to(torch.int32)
    reverse_sorted = torch.empty(M * k, dtype=torch.int32)
    reverse_sorted[order] = pos.to(torch.int32)

    total = int(padded.sum())
    sorted_expert_ids = torch.full((max_sorted // block_m,), -1, dtype=torch.int32)
    blocks = torch.repeat_interleave(torch.arange(num_experts, dtype=torch.int32), padded // block_m)
    sorted_expert_ids[: blocks.numel()] = blocks
    num_valid_ids = torch.tensor([total, M], dtype=torch.int32)
    return MoESorting(sorted_token_ids, sorted_weights, sorted_expert_ids, num_valid_ids, m_indices,
                      reverse_sorted, block_m, M, k, num_experts, pad_style, sentinel)


# --------------------------------------------------------------------------- scale layouts


def raw_bytes(x, name: str) -> torch.Tensor:
    """Raw bytes of a 1-byte tensor (uint8, int8, fp4x2, e8m0) - the kernels see only bytes."""
    if not isinstance(x, torch.Tensor) or x.element_size() != 1 or x.dtype == torch.bool:
        raise ValueError(f"{name} must be a tensor of raw bytes (uint8), got {getattr(x, 'dtype', type(x).__name__)}.")
    return x if x.dtype == torch.uint8 else x.contiguous().view(torch.uint8)


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def sort_shuffle_scales(scales: torch.Tensor, sorting: MoESorting) -> torch.Tensor:
    """Gather token-major E8M0 scales ``[M, K/32]`` into sorted order and preshuffle them.

    Returns flat uint8 ``[round_up(max_sorted, 32) * K/32]``.  Padding rows get
    byte 0 (the HIP ``moe_sort_scales`` copies token 0's scales there, the Triton
    ``moe_mxfp4_sort`` zeros - either way the padded A rows are zero and their
    outputs are dropped).  Needs ``K % 256 == 0``.
    """
    scales = raw_bytes(scales, "scales")
    if scales.dim() != 2 or scales.shape[0] != sorting.tokens:
        raise ValueError(f"scales must be [tokens={sorting.tokens}, K/32], got shape {tuple(scales.shape)}.")
    rows = round_up(sorting.max_sorted, 32)
    gathered = torch.zeros(rows, scales.shape[1], dtype=torch.uint8)
    tok = sorting.m_indices.to(torch.int64)
    valid = torch.nonzero(tok < sorting.tokens, as_tuple=True)[0]
    gathered[valid] = scales[tok[valid]]
    return formats.shuffle_scales(gathered).reshape(-1)


def unshuffle_sorted_scales(buf: torch.Tensor, cols: int) -> torch.Tensor:
    """Inverse of the preshuffle in :func:`sort_shuffle_scales`: flat bytes -> ``[rows, cols]``."""
    buf = raw_bytes(buf, "buf").reshape(-1)
    if cols < 1 or buf.numel() % (32 * cols):
        raise ValueError(f"a shuffled scale buffer of {buf.numel()} bytes is not whole 32-row groups of {cols} columns.")
    return formats.unshuffle_scales(buf.reshape(-1, cols))


# --------------------------------------------------------------------------- weight layouts

_GU_TILE = 16


def interleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """``[E, 2I, C]`` gate-then-up rows -> 16-row tiles ``g0 u0 g1 u1 ...`` (same shape)."""
    if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[1] % (2 * _GU_TILE):
        raise ValueError("interleave_gate_up needs [E, 2I, C] with I a multiple of 16.")
    E, two_i, C = t.shape
    return t.reshape(E, 2, two_i // (2 * _GU_TILE), _GU_TILE, C).transpose(1, 2).reshape(E, two_i, C).contiguous()


def deinterleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`interleave_gate_up`."""
    if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[1] % (2 * _GU_TILE):
        raise ValueError("deinterleave_gate_up needs [E, 2I, C] with I a multiple of 16.")
    E, two_i, C = t.shape
    return t.reshape(E, two_i // (2 * _GU_TILE), 2, _GU_TILE, C).transpose(1, 2).reshape(E, two_i, C).contiguous()


def _check_expert_weights(q: torch.Tensor, s: torch.Tensor, name: str):
    q = raw_bytes(q, f"{name}_quant")
    s = raw_bytes(s, f"{name}_scale")
    if q.dim() != 3 or s.dim() != 3 or q.shape[:2] != s.shape[:2] or q.shape[2] != 16 * s.shape[2]:
        raise ValueError(
            f"{name} must be packed [E, N, K/2] with scales [E, N, K/32]; got {tuple(q.shape)} and {tuple(s.shape)}."
        )
    return q, s


def preshuffle_w1(w1_quant, w1_scale, interleave: bool = False):
    """W1 ``[E, 2I, H/2]`` + scales ``[E, 2I, H/32]`` -> the bytes gemm1 reads (same shapes)."""
    q, s = _check_expert_weights(w1_quant, w1_scale, "w1")
    if interleave:
        q, s = interleave_gate_up(q), interleave_gate_up(s)
    return formats.shuffle_weight_b(q), formats.shuffle_scales(s)


def unpreshuffle_w1(w1_shuf, w1_scale_shuf, interleave: bool = False):
    """Inverse of :func:`preshuffle_w1` (back to plain gate-then-up rows)."""
    q, s = _check_expert_weights(w1_shuf, w1_scale_shuf, "w1")
    q, s = formats.unshuffle_weight_b(q), formats.unshuffle_scales(s)
    if interleave:
        q, s = deinterleave_gate_up(q), deinterleave_gate_up(s)
    return q, s


def preshuffle_w2(w2_quant, w2_scale):
    """W2 ``[E, H, I/2]`` + scales ``[E, H, I/32]`` -> the bytes gemm2 reads (same shapes)."""
    q, s = _check_expert_weights(w2_quant, w2_scale, "w2")
    return formats.shuffle_weight_b(q), formats.shuffle_scales(s)


def unpreshuffle_w2(w2_shuf, w2_scale_shuf):
    """Inverse of :func:`preshuffle_w2`."""
    q, s = _check_expert_weights(w2_shuf, w2_scale_shuf, "w2")
    return formats.unshuffle_weight_b(q), formats.unshuffle_scales(s)


# --------------------------------------------------------------------------- reduce


def scatter_reduce(flat_out: torch.Tensor, sorting: MoESorting) -> torch.Tensor:
    """Per-token weighted sum of the non-atomic gemm2 rows -> bf16 ``[M, H]``.

    ``out[t] = bf16( sum_k sorted_weights[p] * float(flat_out[p]) )`` with
    ``p = reverse_sorted[t*topk + k]``, accumulated in fp32 in slot order
    (``moe_scatter_reduce.cuh``).
    """
    if not isinstance(flat_out, torch.Tensor) or flat_out.dim() != 2 or flat_out.shape[0] != sorting.max_sorted:
        raise ValueError(f"flat_out must be [max_sorted={sorting.max_sorted}, H].")
    pos = sorting.reverse_sorted.to(torch.int64).reshape(sorting.tokens, sorting.topk)
    acc = torch.zeros(sorting.tokens, flat_out.shape[1], dtype=torch.float32)
    for k in range(sorting.topk):
        p = pos[:, k]
        acc += sorting.sorted_weights[p].unsqueeze(-1) * flat_out[p].float()
    return acc.to(torch.bfloat16)


# --------------------------------------------------------------------------- FLOPs


def gemm1_flops(valid_rows: int, hidden: int, intermediate: int) -> int:
    """gemm1 FLOPs: ``2 * rows * hidden * 2*intermediate`` (gate and up).

    Counts only valid (token, expert) rows - the padding rows a kernel also runs
    are waste, not work - and leaves out silu/requant (O(rows * I)).
    """
    return 2 * valid_rows * hidden * 2 * intermediate


def gemm2_flops(valid_rows: int, hidden: int, intermediate: int) -> int:
    """gemm2 FLOPs: ``2 * rows * intermediate * hidden``; valid rows only, weighted sum not counted."""
    return 2 * valid_rows * intermediate * hidden


def sorting_stats(sorting: MoESorting) -> Dict[str, float]:
    """How much of the sorted work is padding - the price of a block size.

    ``valid_rows`` (real pairs), ``executed_rows`` (rows in valid blocks, what the
    kernels multiply), ``blocks``, ``active_experts`` and ``padding_fraction``
    (= 1 - valid/executed).  FLOPs for TFLOPS use ``valid_rows`` (:func:`moe_flops`).
    """
    if not isinstance(sorting, MoESorting):
        raise ValueError(f"sorting_stats needs a MoESorting, got {type(sorting).__name__}.")
    valid = sorting.tokens * sorting.topk
    executed = sorting.total_padded
    blocks = sorting.num_valid_blocks
    active = int(torch.unique(sorting.sorted_expert_ids[:blocks]).numel())
    return {"valid_rows": valid, "executed_rows": executed, "blocks": blocks, "active_experts": active,
            "padding_fraction": 1.0 - valid / executed}


def moe_flops(problem: MoEProblem) -> Dict[str, int]:
    """``{"valid_rows", "gemm1", "gemm2", "total"}`` for TFLOPS = flops / seconds / 1e12."""
    if not isinstance(problem, MoEProblem):
        raise ValueError(f"moe_flops needs a MoEProblem, got {type(problem).__name__}.")
    rows = problem.valid_rows
    g1 = gemm1_flops(rows, problem.hidden, problem.intermediate)
    g2 = gemm2_flops(rows, problem.hidden, problem.intermediate)
    return {"valid_rows": rows, "gemm1": g1, "gemm2": g2, "total": g1 + g2}
