"""MXFP4 number formats and the byte layouts the gfx950 kernels consume.

Everything here is plain torch on the CPU (no FlyDSL import), so the kernels, the
emulator and the notebooks can share one definition of "the right bytes".

Formats
-------
* **E2M1 (fp4)** - 4-bit code ``s eem``: bit 3 is the sign, the 3 low bits index the
  magnitudes ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (OCP MX spec v1.0, section 5.3.3).
* **E8M0** - an 8-bit biased power of two, ``2**(e - 127)``; ``0xFF`` is NaN
  (OCP MX spec v1.0, section 5.4.1).  ``0x00`` decodes to ``2**-127``, a float32
  subnormal (torch on the CPU keeps subnormals, so this is exact).
* **MXFP4 block** - 32 consecutive fp4 values along K share one E8M0 scale.

Packing: two fp4 codes per byte, element ``2j`` in the LOW nibble and ``2j+1`` in
the HIGH nibble (as FlyDSL's and aiter's ``pack_uint4`` do, and as the MFMA reads).

Where the quantiser rule comes from (checked 2026-11-30)
--------------------------------------------------------
* FlyDSL ``tests/kernels/utils/gemm_common_utils.py::per_1x32_f4_quant`` (the input
  builder of FlyDSL's fp4 GEMM tests, ``test_preshuffle_gemm.py`` and
  ``test_fp4_gemm_4wave.py``): ``scale = f32_to_e8m0(amax / 4)`` where
  ``f32_to_e8m0`` takes the float32 exponent field and adds one when mantissa bit 22
  is set (mantissa >= 1.5) - for subnormal ``amax/4`` only when some lower bit is
  also set.  Elements are then ``x / 2**(e-127)`` rounded to E2M1 with round-to-
  nearest-even and saturation (the torchao ``_f32_to_floatx_unpacked`` routine).
  This is our default, ``scale_rule="flydsl"``, reproduced bit for bit.
* aiter ``aiter/utility/fp4_utils.py::dynamic_mxfp4_quant`` (Triton, Quark "even"
  mode) instead adds ``0x200000`` to the float32 bits of ``amax`` and truncates the
  mantissa: the carry reaches the exponent only for mantissa >= 1.75 (its comment
  says "1.5x threshold", but ``(m + 0x200000) >= 0x800000`` means m >= 0x600000,
  i.e. 1.75).  Unbiased exponent ``floor(log2(.)) - 2`` is clamped to [-127, 127].
  Available as ``scale_rule="even"``.
* aiter's newer ``f32_to_e8m0`` helper is a plain floor of ``amax/4`` (OCP
  "RoundDown").  Available as ``scale_rule="floor"``; values above 6 then saturate.
* The element rounding (RNE, saturate at 6, sign kept on zero) is the same in all
  three public routines.

Choices we made where the references are silent
-----------------------------------------------
* NaN input -> ``ValueError`` (the public routines produce garbage codes for NaN).
* +-inf -> saturates to +-6 in :func:`e2m1_encode`; :func:`quantize_mxfp4` rejects
  non-finite input, because its block scale would be NaN.
* Negative zero and negative values that round to zero encode as ``0x8`` (the
  reference keeps the sign bit); ``e2m1_decode(0x8)`` returns ``-0.0``.
"""

from __future__ import annotations

from typing import Tuple

import torch

__all__ = [
    "E2M1_VALUES",
    "MX_BLOCK",
    "as_bytes",
    "SCALE_RULES",
    "e2m1_encode",
    "e2m1_decode",
    "pack_fp4",
    "unpack_fp4",
    "e8m0_decode",
    "e8m0_encode_exponent",
    "e8m0_scale_for_amax",
    "quantize_mxfp4",
    "dequantize_mxfp4",
    "shuffle_weight_b",
    "unshuffle_weight_b",
    "weight_b_shuffled_offset",
    "shuffle_scales",
    "unshuffle_scales",
    "scale_shuffled_offset",
    "mfma_lane_layout_notes",
]

#: Elements per MX block (one E8M0 scale per 32 fp4 values along K).
MX_BLOCK = 32

#: Decoded value of each of the 16 E2M1 codes (index = code).
E2M1_VALUES: Tuple[float, ...] = (
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
)

#: Scale rules accepted by :func:`quantize_mxfp4` / :func:`e8m0_scale_for_amax`.
SCALE_RULES = ("flydsl", "even", "floor")

# Midpoints between consecutive E2M1 magnitudes, with the tie direction that
# round-to-nearest-even gives: at a tie we move up only if the upper code is even.
# (midpoint, inclusive?)  code k+1 is even <=> k is odd <=> tie rounds up.
_E2M1_MIDPOINTS = (
    (0.25, False),  # 0   | 0.5  -> tie to code 0
    (0.75, True),   # 0.5 | 1    -> tie to code 2
    (1.25, False),  # 1   | 1.5  -> tie to code 2
    (1.75, True),   # 1.5 | 2    -> tie to code 4
    (2.5, False),   # 2   | 3    -> tie to code 4
    (3.5, True),    # 3   | 4    -> tie to code 6
    (5.0, False),   # 4   | 6    -> tie to code 6
)

# B-weight preshuffle geometry (fp4 bytes).
_B_NLANE = 16   # rows of one tile (= MFMA N)
_B_KLANE = 4    # lane groups along K (64 lanes / 16)
_B_KPACK = 16   # contiguous bytes each lane loads (= 32 fp4)
_B_KBYTES = _B_KLANE * _B_KPACK  # 64 bytes = 128 fp4 per row per block

# Scale preshuffle geometry (E8M0 bytes).
_S_NLANE = 16
_S_NPACK = 2    # two 16-row tiles share a word
_S_KLANE = 4
_S_KPACK = 2    # two 128-K halves share a word
_S_ROWS = _S_NLANE * _S_NPACK  # 32
_S_COLS = _S_KLANE * _S_KPACK  # 8 scale columns = 256 K


# --------------------------------------------------------------------------- helpers


def _require_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    return x


def _as_bytes(x, name: str) -> torch.Tensor:
    """Accept any 1-byte dtype (uint8, int8, float4_e2m1fn_x2, float8_e8m0fnu) as raw bytes."""
    x = _require_tensor(x, name)
    if x.dtype == torch.uint8:
        return x
    if x.dtype == torch.int8 or x.dtype in _byte_float_dtypes():
        return x.contiguous().view(torch.uint8)
    raise ValueError(f"{name} must hold raw bytes (uint8), got dtype {x.dtype}.")


def as_bytes(x, name: str = "tensor") -> torch.Tensor:
    """View a 1-byte tensor (uint8, int8, float4_e2m1fn_x2, float8_e8m0fnu) as uint8.

    Anything else raises ``ValueError`` naming ``name``.  Public so other modules can
    accept the same inputs the format helpers do.
    """
    return _as_bytes(x, name)


def _byte_float_dtypes():
    names = ("float4_e2m1fn_x2", "float8_e8m0fnu")
    return tuple(getattr(torch, n) for n in names if hasattr(torch, n))


def _as_float(x, name: str) -> torch.Tensor:
    x = _require_tensor(x, name)
    if not x.dtype.is_floating_point or x.element_size() == 1:
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}.")
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()  # exact widening
    return x


# --------------------------------------------------------------------------- E2M1


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round a float tensor to E2M1 codes (uint8, same shape, values 0..15).

    Round-to-nearest, ties to the even code; magnitudes >= 6 (and +-inf) saturate
    to +-6; the sign bit (bit 3) is copied from the input, so ``-0.0`` and small
    negatives give code ``0x8``.  NaN raises ``ValueError``.

    Comparisons run in the input's own precision (fp16/bf16 are widened to float32
    exactly), so a float64 input is rounded once, not twice.  For float32 input the
    result equals the FlyDSL/aiter reference conversion bit for bit.
    """
    xf = _as_float(x, "x")
    if torch.isnan(xf).any():
        raise ValueError("e2m1_encode got NaN values; E2M1 has no NaN encoding.")
    mag = xf.abs()
    code = torch.zeros(xf.shape, dtype=torch.uint8)
    for mid, inclusive in _E2M1_MIDPOINTS:
        step = (mag >= mid) if inclusive else (mag > mid)
        code += step.to(torch.uint8)
    sign = torch.signbit(xf).to(torch.uint8) << 3
    return code | sign


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Decode E2M1 codes (uint8 0..15, any shape) to float32 of the same shape."""
    codes = _as_bytes(codes, "codes")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError("e2m1_decode expects codes in 0..15 (one fp4 per byte); unpack packed bytes first.")
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    return table[codes.long()]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack fp4 codes ``uint8[..., K]`` into ``uint8[..., K//2]``.

    Byte ``j`` holds element ``2j`` in its low nibble and ``2j+1`` in its high nibble.
    """
    codes = _as_bytes(codes, "codes")
    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4 needs an even last dimension, got shape {tuple(codes.shape)}.")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError("pack_fp4 expects codes in 0..15.")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_fp4`: ``uint8[..., K//2]`` -> codes ``uint8[..., K]``."""
    packed = _as_bytes(packed, "packed")
    if packed.dim() == 0:
        raise ValueError("unpack_fp4 needs at least a 1-D tensor of packed bytes.")
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# --------------------------------------------------------------------------- E8M0


def e8m0_decode(e: torch.Tensor) -> torch.Tensor:
    """Decode E8M0 bytes to float32: ``2**(e - 127)``, and NaN for ``0xFF``.

    Built from the float32 bit pattern so it is exact, including ``e = 0`` ->
    ``2**-127`` (the subnormal with only mantissa bit 22 set).
    """
    e = _as_bytes(e, "e").to(torch.int32)
    bits = e << 23
    bits = torch.where(e == 0, torch.full_like(bits, 0x00400000), bits)
    out = bits.view(torch.float32).clone()
    out[e == 0xFF] = float("nan")
    return out


def e8m0_encode_exponent(exponent) -> torch.Tensor:
    """Encode unbiased power-of-two exponents (int tensor or int) as E8M0 bytes.

    Valid exponents are -127..127 (the byte ``e + 127``); anything else would land on
    NaN or wrap, so it raises ``ValueError``.
    """
    t = torch.as_tensor(exponent)
    if t.dtype == torch.bool or (t.dtype.is_floating_point and not torch.equal(t, t.floor())):
        raise ValueError("e8m0_encode_exponent needs integer exponents.")
    t = t.to(torch.int64)
    if t.numel() and (int(t.min()) < -127 or int(t.max()) > 127):
        raise ValueError("E8M0 exponents must lie in -127..127 (0xFF is reserved for NaN).")
    return (t + 127).to(torch.uint8)


def _f32_fields(v: torch.Tensor):
    bits = v.contiguous().view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def e8m0_scale_for_amax(amax: torch.Tensor, scale_rule: str = "flydsl") -> torch.Tensor:
    """E8M0 block scale (uint8) for per-block ``amax`` (float32 >= 0, finite).

    ``scale_rule``:

    * ``"flydsl"`` (default) - exponent of ``amax/4`` (float32 division), plus one
      when its mantissa is >= 1.5; for a subnormal ``amax/4`` plus one only when it
      exceeds ``2**-127``.  Bit-exact with FlyDSL's ``per_1x32_f4_quant``.
    * ``"even"`` - aiter/Quark even rounding: ``amax`` bits + 0x200000, mantissa
      truncated, ``floor(log2) - 2`` clamped to -127..127 (rounds up at 1.75).
    * ``"floor"`` - exponent of ``amax/4`` (OCP RoundDown).

    For "flydsl" the block max maps to ``4*m`` with ``m`` in [1, 1.5) or ``2*m`` in
    [1.5, 2) - i.e. to [3, 6) - so nothing saturates.
    """
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}.")
    amax = _require_tensor(amax, "amax").to(torch.float32)
    if scale_rule == "even":
        bits = amax.contiguous().view(torch.int32)
        rounded = ((bits.to(torch.int64) + 0x200000) & 0x7F800000).to(torch.int32)
        exp_field = rounded >> 23
        unbiased = torch.clamp(exp_field - 127 - 2, -127, 127)
        # exp_field == 0 (zero or tiny amax): floor(log2) <= -127, so the clamp gives -127.
        return (unbiased + 127).to(torch.uint8)
    exp_field, mant = _f32_fields(amax / 4.0)
    if scale_rule == "floor":
        return exp_field.to(torch.uint8)
    bump = ((mant & 0x400000) != 0) & (((mant & 0x3FFFFF) != 0) | (exp_field > 0))
    return (exp_field + bump.to(torch.int32)).to(torch.uint8)


# --------------------------------------------------------------------------- MXFP4 quantiser


def quantize_mxfp4(x: torch.Tensor, scale_rule: str = "flydsl") -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantise ``x[..., K]`` to MXFP4 with one E8M0 scale per 32 values along K.

    Returns ``(packed uint8[..., K//2], scales uint8[..., K//32])`` - the plain
    (unshuffled) row-major layouts.  ``x`` is first converted to float32 (as the
    public references do), each block is divided by its scale ``2**(e-127)`` and
    rounded with :func:`e2m1_encode`.  See the module docstring for the rules and
    their sources.  K must be a positive multiple of 32; x must be finite.
    """
    x = _as_float(x, "x")
    if x.dim() == 0 or x.shape[-1] == 0 or x.shape[-1] % MX_BLOCK:
        raise ValueError(
            f"quantize_mxfp4 needs the last dimension K to be a positive multiple of {MX_BLOCK}, "
            f"got shape {tuple(x.shape)}."
        )
    x32 = x.to(torch.float32)
    if not torch.isfinite(x32).all():
        raise ValueError("quantize_mxfp4 got NaN or Inf values; MXFP4 block scales need finite input.")
    lead, K = x32.shape[:-1], x32.shape[-1]
    blocks = x32.reshape(*lead, K // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1)
    scales = e8m0_scale_for_amax(amax, scale_rule)
    y = blocks / e8m0_decode(scales).unsqueeze(-1)
    codes = e2m1_encode(y).reshape(*lead, K)
    return pack_fp4(codes), scales


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Expand ``(packed uint8[..., K//2], scales uint8[..., K//32])`` to float32 ``[..., K]``.

    Each value is ``e2m1_decode(code) * 2**(scale - 127)`` (exact in float32 except
    where the product underflows; NaN where the scale byte is 0xFF).
    """
    packed = _as_bytes(packed, "packed")
    scales = _as_bytes(scales, "scales")
    if packed.dim() == 0 or scales.dim() == 0 or packed.shape[:-1] != scales.shape[:-1]:
        raise ValueError(
            f"packed {tuple(packed.shape)} and scales {tuple(scales.shape)} must share all but the last dimension."
        )
    if packed.shape[-1] != scales.shape[-1] * (MX_BLOCK // 2):
        raise ValueError(
            f"packed has {packed.shape[-1]} bytes per row but scales imply {scales.shape[-1] * MX_BLOCK // 2} "
            f"(16 bytes = 32 fp4 per scale)."
        )
    vals = e2m1_decode(unpack_fp4(packed))
    lead, K = vals.shape[:-1], vals.shape[-1]
    vals = vals.reshape(*lead, K // MX_BLOCK, MX_BLOCK) * e8m0_decode(scales).unsqueeze(-1)
    return vals.reshape(*lead, K)


# --------------------------------------------------------------------------- preshuffles


def _check_2d_tail(t: torch.Tensor, name: str, row_mult: int, col_mult: int, what: str):
    if t.dim() < 2:
        raise ValueError(f"{name} must have at least 2 dimensions [..., rows, cols], got shape {tuple(t.shape)}.")
    rows, cols = t.shape[-2], t.shape[-1]
    if rows % row_mult or cols % col_mult or rows == 0 or cols == 0:
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} cannot be preshuffled: {what} "
            f"(rows % {row_mult} == 0 and cols % {col_mult} == 0)."
        )


def shuffle_weight_b(packed: torch.Tensor) -> torch.Tensor:
    """Preshuffle packed fp4 B ``uint8[..., N, K//2]`` into 16x128-fp4 tiles (same shape).

    Each 1 KiB block holds 16 rows x 64 bytes (128 fp4); inside it lane
    ``L = 16*k_lane + n_lane`` owns 16 contiguous bytes.  With ``n = 16*n0 + nl`` and
    byte column ``c = 64*k0 + 16*kl + kp`` (per leading index, K0 = K//128)::

        shuffled_flat[((n0*K0 + k0)*4 + kl)*256 + nl*16 + kp] = packed[n, c]

    This equals FlyDSL ``shuffle_weight_w4(src, NLane=16, gate_up=False,
    moe_gemm=False)`` (tests/kernels/utils/gemm_common_utils.py) and aiter
    ``shuffle_weight(x, layout=(16, 16), is_guinterleave=True)``; the layout the
    FlyDSL ``kernels/gemm/mxfp4_preshuffle.py`` ``_bq_view`` reads.  aiter's default
    ``shuffle_weight(x, layout=(16, 16))`` describes its tiles as 16 rows x 32 bytes, yet on
    packed fp4 it is the same byte permutation (checked numerically; tests/test_moe_host.py).
    Requires N % 16 == 0 and K % 128 == 0 (K//2 % 64 == 0).
    """
    packed = _as_bytes(packed, "packed")
    _check_2d_tail(packed, "packed", _B_NLANE, _B_KBYTES, "B needs N % 16 == 0 and K % 128 == 0")
    N, KB = packed.shape[-2:]
    t = packed.reshape(-1, N // _B_NLANE, _B_NLANE, KB // _B_KBYTES, _B_KLANE, _B_KPACK)
    # (b, n0, nl, k0, kl, kp) -> (b, n0, k0, kl, nl, kp)
    return t.permute(0, 1, 3, 4, 2, 5).contiguous().reshape(packed.shape)


def unshuffle_weight_b(shuffled: torch.Tensor) -> torch.Tensor:
    """Exact inverse of :func:`shuffle_weight_b` (same shape and requirements)."""
    shuffled = _as_bytes(shuffled, "shuffled")
    _check_2d_tail(shuffled, "shuffled", _B_NLANE, _B_KBYTES, "B needs N % 16 == 0 and K % 128 == 0")
    N, KB = shuffled.shape[-2:]
    t = shuffled.reshape(-1, N // _B_NLANE, KB // _B_KBYTES, _B_KLANE, _B_NLANE, _B_KPACK)
    # (b, n0, k0, kl, nl, kp) -> (b, n0, nl, k0, kl, kp)
    return t.permute(0, 1, 4, 2, 3, 5).contiguous().reshape(shuffled.shape)


def weight_b_shuffled_offset(n: int, kbyte: int, K: int) -> int:
    """Flat byte offset (within one [N, K//2] matrix) where ``packed[n, kbyte]`` lands
    after :func:`shuffle_weight_b`; K is the fp4 K (row length 2*(K//2))."""
    if K % 128:
        raise ValueError(f"K must be a multiple of 128, got {K}.")
    n0, nl = divmod(n, _B_NLANE)
    k0, rem = divmod(kbyte, _B_KBYTES)
    kl, kp = divmod(rem, _B_KPACK)
    K0 = (K // 2) // _B_KBYTES
    return ((n0 * K0 + k0) * _B_KLANE + kl) * (_B_NLANE * _B_KPACK) + nl * _B_KPACK + kp


def shuffle_scales(scales: torch.Tensor) -> torch.Tensor:
    """Preshuffle E8M0 scales ``uint8[..., R, K//32]`` for the dense GEMM (same shape).

    Every 32-bit word is what one lane passes to the scaled MFMA: lane
    ``L = 16*kl + nl`` of row-pair ``r1`` and K-chunk ``k1`` (256 K) gets four bytes,
    byte ``2*kp + np`` = scale of row ``32*r1 + 16*np + nl`` and scale column
    ``8*k1 + 4*kp + kl`` (kp = which 128-K half, np = which 16-row tile of the pair;
    the kernel picks the byte with op_sel).  With K1 = (K//32)//8::

        shuffled_flat[((r1*K1 + k1)*4 + kl)*64 + nl*4 + kp*2 + np] = scales[r, c]

    Equal to FlyDSL ``shuffle_scale_w4(src, experts_cnt=1, gate_up=False)`` and to
    ``e8m0_shuffle`` / aiter ``shuffle_scale`` (which also pads rows to 256 and
    columns to 8 - we require exact multiples instead).
    Requires R % 32 == 0 and K % 256 == 0 (K//32 % 8 == 0).
    """
    scales = _as_bytes(scales, "scales")
    _check_2d_tail(scales, "scales", _S_ROWS, _S_COLS, "scales need rows % 32 == 0 and K % 256 == 0")
    R, C = scales.shape[-2:]
    t = scales.reshape(-1, R // _S_ROWS, _S_NPACK, _S_NLANE, C // _S_COLS, _S_KPACK, _S_KLANE)
    # (b, r1, np, nl, k1, kp, kl) -> (b, r1, k1, kl, nl, kp, np)
    return t.permute(0, 1, 4, 6, 3, 5, 2).contiguous().reshape(scales.shape)


def unshuffle_scales(shuffled: torch.Tensor) -> torch.Tensor:
    """Exact inverse of :func:`shuffle_scales` (same shape and requirements)."""
    shuffled = _as_bytes(shuffled, "shuffled")
    _check_2d_tail(shuffled, "shuffled", _S_ROWS, _S_COLS, "scales need rows % 32 == 0 and K % 256 == 0")
    R, C = shuffled.shape[-2:]
    t = shuffled.reshape(-1, R // _S_ROWS, C // _S_COLS, _S_KLANE, _S_NLANE, _S_KPACK, _S_NPACK)
    # (b, r1, k1, kl, nl, kp, np) -> (b, r1, np, nl, k1, kp, kl)
    return t.permute(0, 1, 6, 4, 2, 5, 3).contiguous().reshape(shuffled.shape)


def scale_shuffled_offset(r: int, c: int, K: int) -> int:
    """Flat byte offset (within one [R, K//32] matrix) where ``scales[r, c]`` lands after
    :func:`shuffle_scales`."""
    if K % 256:
        raise ValueError(f"K must be a multiple of 256, got {K}.")
    r1, rem = divmod(r, _S_ROWS)
    np_, nl = divmod(rem, _S_NLANE)
    k1, rem = divmod(c, _S_COLS)
    kp, kl = divmod(rem, _S_KLANE)
    K1 = (K // MX_BLOCK) // _S_COLS
    return ((r1 * K1 + k1) * _S_KLANE + kl) * (_S_NLANE * 4) + nl * 4 + kp * 2 + np_


def mfma_lane_layout_notes() -> str:
    """Which lane of ``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4) holds what.

    One wave = 64 lanes; write ``L = 16*g + i`` with ``i = L % 16``, ``g = L // 16``.

    * A (16 x 128 fp4, row-major [M, K//2] bytes): lane L supplies row ``i`` and fp4
      columns ``32*g .. 32*g+31`` of the 128-K step, i.e. the 16 contiguous bytes
      ``A_packed[m0 + i, 64*kstep + 16*g : +16]`` (low nibble = even k).  FlyDSL's
      kernel reads exactly that from LDS (read_a: row = mi*16 + lane%16, column
      block lane//16).
    * B (16 x 128 fp4, N-major like A): lane L supplies column ``n = i`` and fp4
      ``32*g .. +31``; after :func:`shuffle_weight_b` these 16 bytes sit at
      ``shuffled_flat[((n0*K0 + kstep)*4 + g)*256 + 16*i]`` - one 16-byte load per
      lane, the whole 1 KiB block per wave.
    * Scales: each lane passes one 32-bit VGPR and op_sel picks a byte; the chosen
      byte is the E8M0 scale of that lane's (row/col ``i``, K-group of 32 = ``g``).
      After :func:`shuffle_scales` lane L's word for row tile pair r1 and 256-K chunk
      k1 is at dword ``(r1*K1 + k1)*64 + L``; byte ``2*kp + np`` serves 128-K half
      ``kp`` of the chunk for 16-row tile ``np`` of the pair.
    * C (16 x 16 float32): lane L holds ``C[4*g + j, i]`` for ``j = 0..3`` (FlyDSL
      epilogue: row = 16*mi + 4*(lane//16) + ii, col = lane%16).

    Sources: FlyDSL kernels/gemm/mxfp4_preshuffle.py (read_a, _bq_view, sc_lane,
    epilogue) and the CDNA4 block-scaled MFMA description in Modular's
    ``mxfp4_matmul_amd`` docs (lane_row = lane % 16, lane_k_group = lane // 16,
    16 contiguous bytes and one scale byte per lane).
    """
    return mfma_lane_layout_notes.__doc__
