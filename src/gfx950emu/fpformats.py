"""Narrow floating-point formats of gfx950 (CDNA4) and its scaled convert ops.

Everything here is numpy on raw bit patterns.  Values are decoded to float64,
which holds every fp4/fp6/fp8/bf16/f32 value (and every product of two of
them times two E8M0 scales) exactly, so the decoders are exact.

Formats (names used throughout ``gfx950emu``):

=======  =========  ====  ==========================================  ===========
name     layout     bias  special codes                                max finite
=======  =========  ====  ==========================================  ===========
``fp8``  E4M3 (FN)  7     S.1111.111 is NaN; no infinity               448
``bf8``  E5M2       15    exp 31: mantissa 0 is +-inf, else NaN         57344
``fp6``  E2M3       1     none (every code is a finite number)          7.5
``bf6``  E3M2       3     none                                          28
``fp4``  E2M1       1     none                                          6
``e8m0`` E8M0       127   0xFF is NaN; value 2**(code-127), no sign     2**127
=======  =========  ====  ==========================================  ===========

Sources: OCP Microscaling Formats (MX) v1.0 spec, sections 5.3 (FP8 E4M3/E5M2),
5.3.2/5.3.3 (FP6 E2M3/E3M2, FP4 E2M1) and 5.4 (E8M0 scale, 0xFF = NaN).  gfx950
uses the OCP encodings, not the "fnuz" ones of gfx942: AMD's HIP headers build
their OCP fp8 types (``__AMD_OCP_E4M3``) from the gfx950 builtins
(``HIP_ENABLE_GFX950_OCP_BUILTINS``), and FlyDSL's own kernels pick
``Float8E4M3FN`` on gfx950 and ``Float8E4M3FNUZ`` on gfx942
(kernels/attention/pa_decode_tile.py, qk_norm_rope_quant.py).  The fp8/bf8
and E8M0 tables are cross-checked against torch's float8_e4m3fn /
float8_e5m2 / float8_e8m0fnu in the tests.

Packing: a register holding narrow values is read as one little-endian bit
string; element ``i`` of width ``w`` occupies bits ``[w*i, w*i+w)``.  For fp4
that is 8 values per dword with element 0 in bits 3:0 (the low nibble; AMD's
HIP ``__amd_cvt_floatx2_to_fp4x2`` puts ``val[0]`` in the low nibble), for fp8
4 per dword with element 0 in bits 7:0, and for fp6 32 values in 6 dwords
with element 5 straddling dwords 0 and 1.  The fp6 bit order is the natural
extension (same rule as fp4/fp8) and is NOT confirmed by a primary source.

Scaled converts (``v_cvt_scalef32_*``): the CDNA4 ISA instruction summary says
they "scale ... using the exponent provided by the ... single-precision float
input", i.e. only the exponent field ``E`` of the f32 scale is used, as the
power of two ``2**(E-127)``.  Conversions *to* a narrow format divide by it,
conversions *from* a narrow format multiply by it (AMD's quantisers pass
``amax / max_code`` as the scale; FlyDSL documents the fp4 op as "E2M1 of
v / scale").  Rounding is round-to-nearest-even (ISA summary).  Out-of-range
magnitudes saturate to the largest finite code and NaN inputs give the NaN
code (fp8/bf8) or the largest magnitude (fp4, which has no NaN): a modelling
choice, not verified on hardware; the MoE requant never produces them because
its scale is derived from the block maximum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "FORMATS",
    "BITS",
    "decode",
    "encode",
    "decode_e8m0",
    "unpack",
    "pack",
    "f32_from_bits",
    "bits_from_f32",
    "bf16_bits_from_f32",
    "f32_from_bf16_bits",
    "is_convert",
    "convert",
    "dst_dwords",
    "CONVERT_OPS",
]


@dataclass(frozen=True)
class MiniFloat:
    """A sign + exponent + mantissa format of at most 8 bits."""

    name: str
    ebits: int
    mbits: int
    bias: int
    specials: str  # "fn" (only all-ones is NaN), "ieee" (inf/NaN at max exp), "none"

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits


FORMATS = {
    "fp8": MiniFloat("fp8", 4, 3, 7, "fn"),
    "bf8": MiniFloat("bf8", 5, 2, 15, "ieee"),
    "fp6": MiniFloat("fp6", 2, 3, 1, "none"),
    "bf6": MiniFloat("bf6", 3, 2, 3, "none"),
    "fp4": MiniFloat("fp4", 2, 1, 1, "none"),
}

#: element width in bits per format name
BITS = {name: f.bits for name, f in FORMATS.items()}


def _fmt(name: str) -> MiniFloat:
    if name not in FORMATS:
        raise ValueError(f"unknown narrow float format {name!r}; expected one of {sorted(FORMATS)}")
    return FORMATS[name]


@lru_cache(maxsize=None)
def _table(name: str) -> np.ndarray:
    """float64 value of every code of format ``name`` (index = code)."""
    f = _fmt(name)
    n = 1 << f.bits
    codes = np.arange(n)
    sign = np.where(codes >> (f.bits - 1), -1.0, 1.0)
    exp = (codes >> f.mbits) & ((1 << f.ebits) - 1)
    man = codes & ((1 << f.mbits) - 1)
    frac = man / float(1 << f.mbits)
    normal = np.ldexp(1.0 + frac, exp - f.bias)
    subnormal = np.ldexp(frac, 1 - f.bias)
    vals = sign * np.where(exp == 0, subnormal, normal)
    max_exp = (1 << f.ebits) - 1
    if f.specials == "fn":
        vals[(exp == max_exp) & (man == (1 << f.mbits) - 1)] = np.nan
    elif f.specials == "ieee":
        vals[(exp == max_exp) & (man == 0)] = sign[(exp == max_exp) & (man == 0)] * np.inf
        vals[(exp == max_exp) & (man != 0)] = np.nan
    vals.setflags(write=False)
    return vals


@lru_cache(maxsize=None)
def _positive_finite(name: str) -> np.ndarray:
    """Values of codes 0, 1, 2, ... up to the largest finite positive code.

    Positive codes are ordered by value, so the position in this array is the
    code itself; that is what makes "ties to even" mean "ties to even code".
    """
    vals = _table(name)[: 1 << (_fmt(name).bits - 1)]
    finite = np.isfinite(vals)
    last = int(np.nonzero(finite)[0][-1])
    return vals[: last + 1]


def decode(name: str, codes) -> np.ndarray:
    """Decode integer codes of format ``name`` to float64 (NaN/inf where the format has them)."""
    f = _fmt(name)
    c = np.asarray(codes)
    if c.size and (c.min() < 0 or c.max() >= (1 << f.bits)):
        raise ValueError(f"{name} codes must lie in [0, {1 << f.bits}), got range [{c.min()}, {c.max()}]")
    return _table(name)[c.astype(np.int64)]


def encode(name: str, x) -> np.ndarray:
    """Round float values to the nearest code of ``name`` (ties to even), saturating.

    Magnitudes above the largest finite value become that value (the sign is
    kept); NaN becomes the format's NaN code, or the largest magnitude for
    formats without NaN.  Returns uint8 codes.
    """
    f = _fmt(name)
    x = np.asarray(x, dtype=np.float64)
    pos = _positive_finite(name)
    a = np.abs(x)
    a_clean = np.where(np.isnan(a), 0.0, a)
    hi = np.searchsorted(pos, a_clean, side="left")  # first index with pos[hi] >= a
    hi = np.minimum(hi, len(pos) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo = a_clean - pos[lo]
    d_hi = pos[hi] - a_clean
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(take_hi, hi, lo)
    code = np.where(a_clean >= pos[-1], len(pos) - 1, code)  # saturate (inf included)
    sign_bit = 1 << (f.bits - 1)
    code = np.where(np.signbit(x), code | sign_bit, code)
    nan = np.isnan(x)
    if nan.any():
        if f.specials == "fn":
            nan_code = (1 << (f.bits - 1)) - 1  # S.1111.111
        elif f.specials == "ieee":
            nan_code = (((1 << f.ebits) - 1) << f.mbits) | ((1 << f.mbits) - 1)
        else:
            nan_code = len(pos) - 1  # no NaN in the format: largest magnitude
        code = np.where(nan, (code & sign_bit) | nan_code, code)
    return code.astype(np.uint8)


def decode_e8m0(codes) -> np.ndarray:
    """E8M0 scale bytes to float64: ``2**(code-127)``, 0xFF is NaN (OCP MX v1.0 section 5.4)."""
    c = np.asarray(codes).astype(np.int64)
    if c.size and (c.min() < 0 or c.max() > 255):
        raise ValueError("E8M0 codes must be bytes in [0, 255]")
    return np.where(c == 0xFF, np.nan, np.ldexp(1.0, c - 127))


# ----------------------------------------------------------------------------
# bit packing
# ----------------------------------------------------------------------------


def unpack(words, width: int) -> np.ndarray:
    """Split dwords ``[..., n]`` into ``32*n//width`` codes of ``width`` bits (element 0 lowest)."""
    w = np.asarray(words).astype(np.uint64) & 0xFFFFFFFF
    if width not in (4, 6, 8, 16):
        raise ValueError(f"element width must be 4, 6, 8 or 16 bits, got {width}")
    nbits = 32 * w.shape[-1]
    if nbits % width:
        raise ValueError(f"{w.shape[-1]} dwords do not hold a whole number of {width}-bit elements")
    # element i starts at bit width*i; read the dword it starts in and the
    # next one as one 64-bit window, so elements straddling dwords come out whole
    start = np.arange(nbits // width) * width
    d = start // 32
    lo = w[..., d]
    hi = w[..., np.minimum(d + 1, w.shape[-1] - 1)] * (d + 1 < w.shape[-1])
    window = lo | (hi << np.uint64(32))
    return ((window >> (start % 32).astype(np.uint64)) & np.uint64((1 << width) - 1)).astype(np.int64)


def pack(codes, width: int) -> np.ndarray:
    """Inverse of :func:`unpack`: codes ``[..., m]`` to uint32 dwords ``[..., m*width//32]``."""
    c = np.asarray(codes).astype(np.uint64)
    if width not in (4, 6, 8, 16):
        raise ValueError(f"element width must be 4, 6, 8 or 16 bits, got {width}")
    if c.size and int(c.max()) >= (1 << width):
        raise ValueError(f"a code does not fit in {width} bits")
    nbits = c.shape[-1] * width
    if nbits % 32:
        raise ValueError(f"{c.shape[-1]} elements of {width} bits do not fill whole dwords")
    bits = (c[..., :, None] >> np.arange(width, dtype=np.uint64)) & 1
    bits = bits.reshape(*c.shape[:-1], nbits // 32, 32)
    weights = (1 << np.arange(32, dtype=np.uint64))
    return (bits * weights).sum(axis=-1).astype(np.uint32)


# ----------------------------------------------------------------------------
# f32 / bf16 helpers
# ----------------------------------------------------------------------------


def f32_from_bits(bits) -> np.ndarray:
    """Reinterpret uint32 bit patterns as float32."""
    return np.ascontiguousarray(np.asarray(bits, dtype=np.uint32)).view(np.float32)


def bits_from_f32(x) -> np.ndarray:
    """float values -> uint32 bit patterns of the float32 nearest to them (numpy rounding: RNE)."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32)


def bf16_bits_from_f32(bits) -> np.ndarray:
    """Round f32 bit patterns to bf16 (round to nearest even) -> uint16 bits.

    NaN stays NaN (quiet bit forced, sign kept); overflow rounds to infinity as
    IEEE rounding does.  This is the rounding of ``v_cvt_pk_bf16_f32``.
    """
    b = np.asarray(bits, dtype=np.uint32)
    hi = b >> 16
    # in uint32: b + 0x8000 wraps only for NaN patterns (> 0xFF800000), which are replaced below
    out = (b + (0x7FFF + (hi & 1))) >> 16
    is_nan = (b & 0x7FFFFFFF) > 0x7F800000          # exponent all ones, mantissa not 0
    if is_nan.any():
        out = np.where(is_nan, hi | 0x0040, out)
    return out.astype(np.uint16)


def f32_from_bf16_bits(h) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32 values (exact)."""
    return f32_from_bits(np.asarray(h, dtype=np.uint32) << 16)


def _scale_pow2(scale_bits) -> np.ndarray:
    """The power of two an f32 scale operand stands for: only its exponent field counts.

    Exponent field 255 (an inf/NaN scale) is modelled as NaN (unverified).
    """
    e = (np.asarray(scale_bits, dtype=np.uint32) >> 23) & 0xFF
    return decode_e8m0(e)


# ----------------------------------------------------------------------------
# convert ops
# ----------------------------------------------------------------------------

#: opcode -> number of destination dwords
CONVERT_OPS = {
    "v_cvt_scalef32_pk_fp4_f32": 1,
    "v_cvt_scalef32_pk_fp4_bf16": 1,
    "v_cvt_scalef32_pk_fp8_f32": 1,
    "v_cvt_scalef32_pk_fp8_bf16": 1,
    "v_cvt_scalef32_pk_bf8_f32": 1,
    "v_cvt_scalef32_pk_bf8_bf16": 1,
    "v_cvt_scalef32_pk_f32_fp4": 2,
    "v_cvt_pk_bf16_f32": 1,
    "v_cvt_scalef32_pk_f16_fp4": 1,
    "v_cvt_scalef32_pk_bf16_fp4": 1,
    "v_cvt_scalef32_pk_bf16_fp8": 1,
    "v_cvt_pk_fp8_f32": 1,
    "v_cvt_pk_f16_f32": 1,
}

_NSRC = {
    "v_cvt_scalef32_pk_fp4_f32": 3,
    "v_cvt_scalef32_pk_fp4_bf16": 2,
    "v_cvt_scalef32_pk_fp8_f32": 3,
    "v_cvt_scalef32_pk_fp8_bf16": 2,
    "v_cvt_scalef32_pk_bf8_f32": 3,
    "v_cvt_scalef32_pk_bf8_bf16": 2,
    "v_cvt_scalef32_pk_f32_fp4": 2,
    "v_cvt_pk_bf16_f32": 2,
    "v_cvt_scalef32_pk_f16_fp4": 2,
    "v_cvt_scalef32_pk_bf16_fp4": 2,
    "v_cvt_scalef32_pk_bf16_fp8": 2,
    "v_cvt_pk_fp8_f32": 2,
    "v_cvt_pk_f16_f32": 2,
}

# Ops that write only part of vdst and keep the rest (the old value is a tied input).
_PARTIAL_WRITE = {
    "v_cvt_scalef32_pk_fp4_f32",
    "v_cvt_scalef32_pk_fp4_bf16",
    "v_cvt_scalef32_pk_fp8_f32",
    "v_cvt_scalef32_pk_fp8_bf16",
    "v_cvt_scalef32_pk_bf8_f32",
    "v_cvt_scalef32_pk_bf8_bf16",
    "v_cvt_pk_fp8_f32",
}


def _norm(opcode: str) -> str:
    op = opcode.strip().lower()
    for suffix in ("_e64", "_e32", "_vop3"):
        if op.endswith(suffix):
            op = op[: -len(suffix)]
    return op


def is_convert(opcode: str) -> bool:
    """True for the convert opcodes :func:`convert` implements."""
    return _norm(opcode) in CONVERT_OPS


def dst_dwords(opcode: str) -> int:
    """How many dwords the convert op writes (2 for ``v_cvt_scalef32_pk_f32_fp4``)."""
    op = _norm(opcode)
    if op not in CONVERT_OPS:
        raise ValueError(f"{opcode!r} is not a convert op this module implements")
    return CONVERT_OPS[op]


def _bit(op_sel, i: int) -> int:
    return int(op_sel[i]) & 1 if i < len(op_sel) else 0


def convert(opcode: str, srcs, *, op_sel=(0, 0, 0, 0), dst_old=None, active=None) -> np.ndarray:
    """Execute one scaled / packed convert op for all lanes.

    ``srcs`` are the source operands in assembly order, each uint32 ``[64]``
    (or any common lane count).  ``op_sel`` is the op_sel list as written in
    the assembly (missing entries count as 0).  ``dst_old`` is the old vdst
    value, required by the ops that write only a byte or half of it.  ``active`` (bool
    lanes, optional) limits the refusals below to the lanes that are written.
    Returns uint32 ``[lanes]``, or ``[lanes, 2]`` for ``v_cvt_scalef32_pk_f32_fp4``.

    Operand and selector rules.  The intrinsics (IntrinsicsAMDGPU.td,
    llvm.amdgcn.cvt.scalef32.*) take a byte index (``dst_sel_index`` /
    ``src_sel_index``, 0..3) or a ``word_sel`` flag; how LLVM encodes them
    into op_sel was checked by compiling one-op probe kernels with flydsl
    0.5.0's LLVM for gfx950: pk_fp4_f32 and pk_fp4_bf16 index 1/2/3 ->
    op_sel:[0,0,1,0]/[0,0,0,1]/[0,0,1,1]; pk_f32_fp4 index 1/2/3 ->
    op_sel:[1,0,0]/[0,1,0]/[1,1,0]; pk_fp8_f32 word_sel -> op_sel:[0,0,0,1];
    pk_fp8_bf16 word_sel -> op_sel:[0,0,1].  Hence:

    * ``v_cvt_scalef32_pk_fp4_f32 vdst, s0, s1, scale``: fp4(s0) -> low
      nibble, fp4(s1) -> high nibble of byte ``op_sel[2] + 2*op_sel[3]`` of
      vdst; other bytes kept.
    * ``v_cvt_scalef32_pk_fp4_bf16 vdst, s0(bf16x2), scale``: low half ->
      low nibble; same byte rule.
    * ``v_cvt_scalef32_pk_{fp8,bf8}_f32 vdst, s0, s1, scale``: fp8(s0) ->
      bits 7:0, fp8(s1) -> bits 15:8 of the 16-bit half ``op_sel[3]``; other
      half kept.
    * ``v_cvt_scalef32_pk_{fp8,bf8}_bf16 vdst, s0(bf16x2), scale``: same,
      half selected by ``op_sel[2]`` (the dst bit of a 3-entry op_sel).
    * ``v_cvt_scalef32_pk_f32_fp4 vdst[2], s0, scale``: byte
      ``op_sel[0] + 2*op_sel[1]`` of s0; low nibble -> vdst[0], high -> vdst[1].
    * ``v_cvt_pk_bf16_f32 vdst, s0, s1``: bf16(s0) in bits 15:0, bf16(s1) in
      bits 31:16, round to nearest even.
    * ``v_cvt_pk_f16_f32 vdst, s0, s1``: the same with IEEE f16 (round to nearest even,
      overflow to inf).
    * ``v_cvt_scalef32_pk_{f16,bf16}_fp4 vdst, s0, scale``: byte ``op_sel[0] + 2*op_sel[1]``
      of s0 (the pk_f32_fp4 rule); low nibble * scale -> bits 15:0, high nibble -> 31:16
      (fp4 * 2**e is exact in f16/bf16 within range; f16 overflows to inf).
    * ``v_cvt_scalef32_pk_bf16_fp8 vdst, s0, scale``: 16-bit half ``op_sel[0]`` of s0
      (word_sel; aiter's hk_mla_utils cvt_scalef32_pk_bf16_fp8: no op_sel reads the low
      fp8 pair, op_sel:[1,0,0] the high pair); byte 0 * scale -> bits 15:0, byte 1 -> 31:16.
    * ``v_cvt_pk_fp8_f32 vdst, s0, s1``: OCP e4m3 (gfx950's fp8) of s0 -> bits 7:0, s1 ->
      15:8 of the half ``op_sel[2]`` (the dst bit after the two sources); other half kept.
      Round to nearest even; an input that would round beyond 448 raises ValueError (the
      unclamped op does not saturate: aiter clamps to +-448 before it and notes MODE bit 23
      FP16_OVFL as the saturating alternative -- neither is modelled); ``clamp`` is refused
      by the decoder.  Half selection: aiter's pack_4f32_to_fp8 writes the front half
      without op_sel and the back half with op_sel:[0,0,1].
    Sources: [ISA] CDNA4 VOP3 opcode table descriptions of these ops and LLVM
    IntrinsicsAMDGPU.td (llvm.amdgcn.cvt.scalef32.pk.*, llvm.amdgcn.cvt.pk.fp8.f32 with
    its word_sel operand).
    """
    op = _norm(opcode)
    if op not in CONVERT_OPS:
        raise ValueError(f"{opcode!r} is not a convert op this module implements; known: {sorted(CONVERT_OPS)}")
    if len(srcs) != _NSRC[op]:
        raise ValueError(f"{op} takes {_NSRC[op]} source operands, got {len(srcs)}")
    s = [np.asarray(v, dtype=np.uint32) for v in srcs]
    if op in _PARTIAL_WRITE:
        if dst_old is None:
            raise ValueError(f"{op} writes only part of its destination; pass the old vdst value as dst_old")
        old = np.asarray(dst_old, dtype=np.uint32)

    if op == "v_cvt_pk_bf16_f32":
        lo, hi = bf16_bits_from_f32(np.stack(np.broadcast_arrays(s[0], s[1]))).astype(np.uint32)   # one pass
        return (lo | (hi << 16)).astype(np.uint32)

    if op == "v_cvt_pk_f16_f32":
        with np.errstate(over="ignore"):
            lo = f32_from_bits(s[0]).astype(np.float16).view(np.uint16).astype(np.uint32)
            hi = f32_from_bits(s[1]).astype(np.float16).view(np.uint16).astype(np.uint32)
        return (lo | (hi << 16)).astype(np.uint32)

    if op in ("v_cvt_scalef32_pk_f16_fp4", "v_cvt_scalef32_pk_bf16_fp4", "v_cvt_scalef32_pk_bf16_fp8"):
        scale = _scale_pow2(s[1])
        if op.endswith("fp4"):
            byte = _bit(op_sel, 0) + 2 * _bit(op_sel, 1)
            pair = (s[0] >> (8 * byte)) & 0xFF
            lo, hi = decode("fp4", pair & 0xF) * scale, decode("fp4", pair >> 4) * scale
        else:
            word = (s[0] >> (16 * _bit(op_sel, 0))) & 0xFFFF
            lo, hi = decode("fp8", word & 0xFF) * scale, decode("fp8", word >> 8) * scale
        with np.errstate(over="ignore"):
            if "_f16_" in op:
                bl = lo.astype(np.float16).view(np.uint16).astype(np.uint32)
                bh = hi.astype(np.float16).view(np.uint16).astype(np.uint32)
            else:
                bl = bf16_bits_from_f32(bits_from_f32(lo)).astype(np.uint32)
                bh = bf16_bits_from_f32(bits_from_f32(hi)).astype(np.uint32)
        return (bl | (bh << 16)).astype(np.uint32)

    if op == "v_cvt_pk_fp8_f32":
        word = _bit(op_sel, 2)
        x0 = f32_from_bits(s[0]).astype(np.float64)
        x1 = f32_from_bits(s[1]).astype(np.float64)
        with np.errstate(invalid="ignore"):
            ovf = (np.abs(x0) >= 464.0) | (np.abs(x1) >= 464.0)   # would round past 448
        if np.any(ovf if active is None else ovf & active):
            raise ValueError(f"{op}: an input rounds beyond E4M3's 448; the unclamped overflow result "
                             f"(NaN, or saturation under MODE.FP16_OVFL) is not modelled -- clamp first")
        val = encode("fp8", x0).astype(np.uint32) | (encode("fp8", x1).astype(np.uint32) << 8)
        mask = np.uint32(0xFFFF << (16 * word))
        return ((old & ~mask) | (val << np.uint32(16 * word))).astype(np.uint32)

    if op == "v_cvt_scalef32_pk_f32_fp4":
        byte = _bit(op_sel, 0) + 2 * _bit(op_sel, 1)
        pair = (s[0] >> (8 * byte)) & 0xFF
        scale = _scale_pow2(s[1])
        lo = decode("fp4", pair & 0xF) * scale
        hi = decode("fp4", pair >> 4) * scale
        return np.stack([bits_from_f32(lo), bits_from_f32(hi)], axis=-1)

    # narrowing converts: the two inputs as float64
    if op.endswith("_f32"):
        x0 = f32_from_bits(s[0]).astype(np.float64)
        x1 = f32_from_bits(s[1]).astype(np.float64)
        scale_bits = s[2]
    else:  # _bf16: one packed bf16x2 source
        x0 = f32_from_bf16_bits(s[0] & 0xFFFF).astype(np.float64)
        x1 = f32_from_bf16_bits(s[0] >> 16).astype(np.float64)
        scale_bits = s[1]
    scale = _scale_pow2(scale_bits)
    with np.errstate(invalid="ignore"):
        y0, y1 = x0 / scale, x1 / scale

    if "_pk_fp4_" in op:
        byte = _bit(op_sel, 2) + 2 * _bit(op_sel, 3)
        val = encode("fp4", y0).astype(np.uint32) | (encode("fp4", y1).astype(np.uint32) << 4)
        mask = np.uint32(0xFF << (8 * byte))
        return ((old & ~mask) | (val << np.uint32(8 * byte))).astype(np.uint32)

    fmt = "fp8" if "_pk_fp8_" in op else "bf8"
    word = _bit(op_sel, 3) if op.endswith("_f32") else _bit(op_sel, 2)
    val = encode(fmt, y0).astype(np.uint32) | (encode(fmt, y1).astype(np.uint32) << 8)
    mask = np.uint32(0xFFFF << (16 * word))
    return ((old & ~mask) | (val << np.uint32(16 * word))).astype(np.uint32)
