"""What the two MoE kernels share, FlyDSL-free: the seed, the workgroup, the shape parameters, the regime
rule and the checks every MoE launch needs (:class:`MoEGeometry`; each kernel's ``Geometry`` adds its own
checks and tiling), the switch flags, the common part of the inputs (problem, routing, sorting, expert
weights), and ``int64_abi`` -- the step both kernels take from the seed -- as one Switch record
(:data:`INT64_ABI`, first in both kernels' tables) and one implementation: :class:`BufferABI`, how a launch
passes its buffers (the host side), and :func:`mxfp4_ablation.kernels.common.buffer_arg` /
:func:`~mxfp4_ablation.kernels.common.address` (the kernel side). The emission primitives both kernels use
are in :mod:`mxfp4_ablation.kernels.common`.
"""

from __future__ import annotations

import types

from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Family, Seed, Switch

#: The seed of both MoE kernels' switches.
PR_3828 = Seed("ROCm/aiter", 3828, "b242ba66a6",
               "flydsl mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the HIP backend")

#: ``int64_abi``, the seed's one change to both kernels: one record, first in both kernels' ladders.
INT64_ABI = Switch(
    "int64_abi", "Bare 64-bit base addresses as kernel arguments.", PR_3828,
    claim="(gemm1: the first commit; gemm2 likewise) passing data_ptr() as fx.Int64 instead of full memref/tensor "
    "descriptors packs the addresses contiguously into the kernarg segment (a coalesced s_load prologue: a "
    "launch-bound kernel pays for every kernarg load before its first memory access): ~7% faster at decode "
    "(M=4/8), parity by M~64.",
    mechanism="each global buffer is one 8-byte argument (fx.Int64, a by_value entry) instead of an fx.Tensor -- "
    "a pointer plus its layout block, here one i32 length: both kernels take every buffer flattened 1-D, as the "
    "seed's -- so the addresses sit contiguously in the kernarg segment and the prologue's kernarg loads "
    "coalesce. Either way the kernel works from the buffer's address: its buffer resources "
    "(rocdl.make.buffer.rsrc, with compile-time or token-count bounds) and the global loads/stores of the "
    "routing ids and outputs (kernels.moe_common.BufferABI is the host side, kernels.common.address the "
    "kernel side).",
    metric="kernarg bytes (.kernarg_segment_size) fall: gemm1 156 -> 88 (entries 21 -> 11; the seed's 156 -> "
    "88), gemm2 144 -> 76 at Kimi decode and 400 -> 336 at prefill, which adds the 256 bytes of implicit "
    "arguments its persistent grid reads (the seed's 156 -> 88 and 416 -> 344); so do the s_load_dword* that "
    "read them: gemm1 11 -> 7 at decode and 12 -> 7 at prefill (the seed's the same; s_load_dwordx8 + x2 "
    "instead of x2 pairs, the dwords fetched 19 -> 19 at decode, 21 -> 23 at prefill), gemm2 12 -> 5 and "
    "10 -> 6 (the seed's the same). gemm1's instructions are unchanged (2596 decode, 4821 prefill).",
    expects=(Expect("kernarg_bytes", "down", seed_before=156, seed_after=88,
                    note="decode; ours: gemm1 156 -> 88, gemm2 144 -> 76 (prefill 400 -> 336)"),
             Expect("s_load", "down", note="Kimi decode / prefill: gemm1 11 -> 7 / 12 -> 7, gemm2 12 -> 5 / 10 -> "
                    "6, as the seed's")),
)

#: Both kernels run workgroups of 4 waves (256 threads).
N_WAVES = 4
WORKGROUP_ATTRS = {"rocdl.flat_work_group_size": f"{64 * N_WAVES},{64 * N_WAVES}"}

SHAPE_PARAMS = ("tokens", "experts", "hidden", "inter", "topk")
#: A sixth --shape number picks the row block (16: decode, 128: prefill); default by token count.
OPTIONAL_SHAPE_PARAMS = ("block_m",)
BLOCK_MS = (16, 128)  # decode, prefill
REGIMES = {16: "decode", 128: "prefill"}


def default_block_m(tokens: int) -> int:
    """Rows per block of the seed's Kimi config: 16 (decode) below ``moe.host.PREFILL_FROM_TOKENS``
    (4096) tokens, else 128 (prefill)."""
    from mxfp4_ablation.moe.host import PREFILL_FROM_TOKENS

    return 16 if tokens < PREFILL_FROM_TOKENS else 128


def regime(block_m: int) -> str:
    """``"decode"`` for block_m 16, ``"prefill"`` for 128."""
    return REGIMES[block_m]


def check(tokens, experts, hidden, inter, topk, block_m=None) -> dict:
    """One clear ValueError for a MoE shape no kernel can run; returns the shape with ``block_m``
    defaulted by the regime rule."""
    if block_m is None and isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
        block_m = default_block_m(tokens)
    for name, v in (("tokens", tokens), ("experts", experts), ("hidden", hidden), ("inter", inter),
                    ("topk", topk), ("block_m", block_m)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UsageError(f"{name} must be a positive integer, got {v!r}.")
    if block_m not in BLOCK_MS:
        raise UsageError(f"block_m must be 16 (decode) or 128 (prefill), got {block_m}.")
    if inter % 256:
        raise UsageError(f"inter must be a multiple of 256 (the scale preshuffle's 8-word group), got {inter}.")
    if topk > experts:
        raise UsageError(f"topk ({topk}) cannot exceed experts ({experts}).")
    if tokens >= 1 << 24:
        raise UsageError(f"tokens must be below 2**24 (the sorted id's token field), got {tokens}.")
    return {"tokens": tokens, "experts": experts, "hidden": hidden, "inter": inter, "topk": topk,
            "block_m": block_m}


def max_sorted(tokens, experts, topk, block_m) -> int:
    """Rows of the sorted buffers (``moe.host.max_sorted_rows``)."""
    from mxfp4_ablation.moe.host import max_sorted_rows

    return max_sorted_rows(tokens, topk, experts, block_m)


class MoEGeometry:
    """The compile-time numbers of one MoE launch that both kernels share, for a checked shape (one clear
    error from :func:`check`; ``block_m`` defaulted by the regime rule): the sizes ``M, E, H, I, topk, BM``,
    ``shape`` (the checked keywords), ``regime``, the sorted buffers' rows ``max_sorted`` and row blocks
    ``m_blocks``, and ``scale_rows`` (the sorted rows padded to the scale preshuffle's 32-row group). Each
    kernel's ``Geometry`` adds its own checks and tiling numbers."""

    def __init__(self, tokens, experts, hidden, inter, topk, block_m=None):
        self.shape = check(tokens, experts, hidden, inter, topk, block_m)
        self.M, self.E, self.H, self.I, self.topk = tokens, experts, hidden, inter, topk
        self.BM = self.shape["block_m"]
        self.regime = regime(self.BM)
        self.max_sorted = max_sorted(tokens, experts, topk, self.BM)
        self.m_blocks = self.max_sorted // self.BM
        self.scale_rows = -(-self.max_sorted // 32) * 32


def routed_problem(g: MoEGeometry, seed: int, lazy: bool):
    """The host side of one launch's inputs: ``(problem, raw, sorting)`` -- the
    :class:`~mxfp4_ablation.moe.host.MoEProblem` of ``g``'s shape, its inputs
    (``moe.host.make_moe_inputs``; the routing only when ``lazy``) and their ``block_m`` sorting."""
    from mxfp4_ablation.moe import host

    problem = host.MoEProblem(experts=g.E, hidden=g.H, intermediate=g.I, topk=g.topk, tokens=g.M, seed=seed,
                              regime=g.regime)
    raw = host.make_moe_inputs(problem, with_weights=not lazy, with_activations=not lazy)
    return problem, raw, host.moe_sort(raw["topk_ids"], raw["topk_weights"], g.E, g.BM)


def expert_weights(problem, raw: dict, tag: str, lazy: bool):
    """Weight ``tag`` (``"w1"``, ``"w2"``) as a kernel reads it: ``(bytes, scales)``, preshuffled
    (``moe.host.preshuffle_w1`` / ``preshuffle_w2``) from ``raw``'s plain weights; ``lazy`` (a timing
    run): ``meta`` tensors of the same shapes (no storage; the timing run maps them as zeros)."""
    import torch

    from mxfp4_ablation.moe import host

    if lazy:
        meta = {"device": "meta", "dtype": torch.uint8}
        return tuple(torch.empty(shape, **meta) for shape in host.weight_shapes(problem, tag))
    preshuffle = host.preshuffle_w1 if tag == "w1" else host.preshuffle_w2
    return preshuffle(raw[f"{tag}_quant"], raw[f"{tag}_scale"])


def switch_flags(family: Family, switches) -> types.SimpleNamespace:
    """A variant's switches (``{name: True/False}`` build keywords, validated by ``family``) as one boolean
    attribute per switch of the family: ``sw.exp2``. A misspelt switch is an AttributeError, not a
    silent False."""
    on = family.switch_kwargs(switches)
    return types.SimpleNamespace(**{name: name in on for name in family.switches})


def check_inputs(inputs, names, label: str) -> None:
    """One clear ValueError unless ``inputs`` is a dict holding every key of ``names``."""
    if not isinstance(inputs, dict):
        raise ValueError(f"{label} inputs must be the dict of make_inputs, got {type(inputs).__name__}.")
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ValueError(f"{label} inputs lack {', '.join(missing)}; build them with make_inputs().")


class BufferABI:
    """How a MoE kernel's launch passes its arguments ``names`` (global buffers and the i32 ``tokens``):
    the host side of ``int64_abi``, in one place for both kernels.

    Descriptor ABI (``int64_abi`` off): each buffer is an ``fx.Tensor``, passed flattened 1-D -- a pointer
    plus a layout block of one i32 length, as the seed passes them. ``int64_abi``: each buffer is its bare
    64-bit address (``fx.Int64``; on a device ``data_ptr()``). Ints (``tokens``) pass as they are."""

    def __init__(self, names, int64_abi: bool):
        self.names, self.int64_abi = tuple(names), bool(int64_abi)

    @staticmethod
    def flat(value):
        """A buffer as the kernel takes it: flattened 1-D (a view sharing its storage, so the kernel's stores
        land in the caller's tensor); ints pass through."""
        return value if isinstance(value, int) else value.reshape(-1)

    def kernel_args(self, inputs: dict) -> list:
        """The emulator's kernarg entries in the metadata ``.args`` order (``common.kernarg_entries``; with
        ``int64_abi`` a buffer is one 8-byte entry of kind ``global_buffer`` carrying the tensor, which the
        emulator maps -- the metadata calls it ``by_value``)."""
        from . import common  # FlyDSL

        return common.kernarg_entries([(n, self.flat(inputs[n])) for n in self.names],
                                      bare_addresses=self.int64_abi)

    def device_args(self, inputs: dict) -> tuple:
        """The launcher's positional arguments for on-device tensors: the flattened tensors, or with
        ``int64_abi`` their ``data_ptr()`` addresses; ints as ints."""
        def one(v):
            if isinstance(v, int):
                return int(v)
            return int(v.data_ptr()) if self.int64_abi else self.flat(v)
        return tuple(one(inputs[n]) for n in self.names)

    def compile_args(self, buffers: dict) -> tuple:
        """Arguments for an offline compile, where only shapes and dtypes matter: ``buffers`` (zero
        tensors, ints for the i32 arguments) flattened, or with ``int64_abi`` address 0 for each buffer."""
        def one(v):
            if isinstance(v, int):
                return v
            return 0 if self.int64_abi else self.flat(v)
        return tuple(one(buffers[n]) for n in self.names)
