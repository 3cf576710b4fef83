"""What the two MoE kernels share about a shape (FlyDSL-free): the parameters, the regime rule and the
checks every MoE launch needs. Each kernel adds only its own tiling constraints.
"""

from __future__ import annotations

from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Seed

#: The seed of both MoE kernels' switches.
PR_3828 = Seed("ROCm/aiter", 3828, "b242ba66a6",
               "flydsl mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the HIP backend")

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
