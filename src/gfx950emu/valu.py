"""Vector ALU, the 32-bit table: VOP1, VOP2 and VOP3 ops of the form D = f(S0[, S1[, S2]]), their
modifiers (VOP3 clamp / omod, the f32 denormal flush), DPP and SDWA forms, and VOPC compares; plus the
f32 lane-value helpers the other VALU families share.  [ISA] VOP1/VOP2/VOP3/VOPC opcode tables and the
"DPP"/"SDWA" sections (cited per group below)."""
from __future__ import annotations

import math

import numpy as np

from .operands import I32, M32, U32, U64, mask_to_int, sdst, vsrc, vsrc64, vwriter, write_v


# ---- lane values ----
def as_f32(x):
    return x.view(np.float32)


def _shl(a, s):
    return a << (s & U32(31))


def _shr(a, s):
    return a >> (s & U32(31))


def _sext24(x):
    x = (x & U32(0xFFFFFF)).astype(np.int64)
    return np.where(x & 0x800000, x - 0x1000000, x)


def _bfe_u32(a, b, c):
    w = c & U32(31)
    return (a >> (b & U32(31))) & ((U32(1) << w) - U32(1))


def _bfe_i32(a, b, c):
    off = (b & U32(31)).astype(np.int64)
    w = (c & U32(31)).astype(np.int64)
    x = (np.asarray(a).astype(np.int64) >> off) & ((np.int64(1) << w) - 1)
    sign = (x >> np.maximum(w - 1, 0)) & 1
    x = np.where((w > 0) & (sign == 1), x - (np.int64(1) << w), x)
    x = np.where(w == 0, 0, x)
    return (x & M32).astype(U32)


def popcnt32(a):
    a = np.asarray(a, dtype=U32)
    return np.unpackbits(a.view(np.uint8).reshape(-1, 4), axis=1).sum(axis=1).astype(U32).reshape(a.shape)


def _perm(s0, s1, sel):
    """V_PERM_B32 [ISA VOP3 table]: byte-select from {S0,S1} with sign/const codes."""
    s0 = np.broadcast_to(np.asarray(s0, dtype=U32), (64,))
    s1 = np.broadcast_to(np.asarray(s1, dtype=U32), (64,))
    sel = np.broadcast_to(np.asarray(sel, dtype=U32), (64,))
    both = (s1.astype(U64) | (s0.astype(U64) << U64(32)))
    out = np.zeros(64, dtype=U32)
    for k in range(4):
        sk = ((sel >> U32(8 * k)) & U32(0xFF)).astype(np.int64)
        byte = ((both[None, :] >> (np.arange(8, dtype=U64)[:, None] * U64(8))) & U64(0xFF)).astype(U32)
        val = byte[np.clip(sk, 0, 7), np.arange(64)]
        val = np.where(sk == 8, np.where(s1 & U32(0x8000), 0xFF, 0), val)
        val = np.where(sk == 9, np.where(s1 & U32(0x80000000), 0xFF, 0), val)
        val = np.where(sk == 10, np.where(s0 & U32(0x8000), 0xFF, 0), val)
        val = np.where(sk == 11, np.where(s0 & U32(0x80000000), 0xFF, 0), val)
        val = np.where(sk == 12, 0, val)
        val = np.where(sk >= 13, 0xFF, val)
        out |= (val.astype(U32) & U32(0xFF)) << U32(8 * k)
    return out


def bitop3(ttbl):
    """V_BITOP3_B32 (gfx950): bit i of D = TTBL[{S0_i, S1_i, S2_i}]; 0xF0/0xCC/0xAA are S0/S1/S2
    ([LLVM] gfx950 bitop3 modifier; same convention as LLVM's BITOP3 selection)."""
    terms = [k for k in range(8) if (ttbl >> k) & 1]

    def f(a, b, c):
        na, nb, nc = ~a, ~b, ~c
        r = U32(0)
        for k in terms:
            r = r | ((a if k & 4 else na) & (b if k & 2 else nb) & (c if k & 1 else nc))
        return r
    return f


def _cvt_u32_f32(x):
    f = as_f32(x).astype(np.float64)
    f = np.where(np.isnan(f), 0, f)
    return np.clip(np.trunc(f), 0, M32).astype(np.uint64).astype(U32)


def _cvt_i32_f32(x):
    f = as_f32(x).astype(np.float64)
    f = np.where(np.isnan(f), 0, f)
    return np.clip(np.trunc(f), -2**31, 2**31 - 1).astype(np.int64).astype(np.int32).view(U32)


def from_f32(x):
    return np.asarray(x, dtype=np.float32).view(U32)


def fma_f32(a, b, c):
    # product of two f32 is exact in f64; one rounding of the f64 sum to f32
    # (exact except for rare double-rounding ties)
    return from_f32((as_f32(a).astype(np.float64) * as_f32(b).astype(np.float64) + as_f32(c).astype(np.float64)).astype(np.float32))


def _ldexp(a, b):
    e = np.asarray(b, dtype=U32).view(np.int32).astype(np.int64)
    return from_f32(np.ldexp(as_f32(a).astype(np.float64), np.clip(e, -400, 400)).astype(np.float32))


def ftz(x):
    """Flush f32 denormals (raw bits) to a zero of the same sign."""
    x = np.asarray(x, dtype=U32)
    return np.where((x & U32(0x7F800000)) == 0, x & U32(0x80000000), x)


def ftz_getter(g):
    return lambda w: ftz(g(w))


def _fmax_bits(a, b):
    """V_MAX_F32 on raw bits: IEEE maxNum (a NaN operand loses) with -0 < +0, so max(+0, -0) is
    +0 in either operand order (issue #12 fix 5, the audit's hardware rule; it is the
    IEEE-754-2019 maximumNumber/minimumNumber zero ordering, which LLVM relies on when it
    selects v_max_f32/v_min_f32 for llvm.maximumnum/minimumnum in IEEE mode).  numpy's fmax
    returns its first argument on equal zeros, hence the fix-up: equal zeros combine their
    sign bits with AND (max) / OR (min).  The fix-up runs only when a result is a zero."""
    r = from_f32(np.fmax(as_f32(a), as_f32(b)))
    if np.any(r & U32(0x7FFFFFFF) == 0):
        z = ((a | b) & U32(0x7FFFFFFF)) == 0
        r = np.where(z, a & b, r)
    return r


def _fmaximum_bits(a, b):
    """IEEE maximum (NaN-propagating, -0 < +0) on raw f32 bits; NaN results are quieted."""
    r = from_f32(np.maximum(as_f32(a), as_f32(b)))
    r = np.where((r & U32(0x7F800000)) == U32(0x7F800000), np.where(r & U32(0x7FFFFF), r | U32(0x400000), r), r)
    z = ((a | b) & U32(0x7FFFFFFF)) == 0
    return np.where(z, a & b, r)


def _fminimum_bits(a, b):
    """IEEE minimum (NaN-propagating, -0 < +0) on raw f32 bits; NaN results are quieted."""
    r = from_f32(np.minimum(as_f32(a), as_f32(b)))
    r = np.where((r & U32(0x7F800000)) == U32(0x7F800000), np.where(r & U32(0x7FFFFF), r | U32(0x400000), r), r)
    z = ((a | b) & U32(0x7FFFFFFF)) == 0
    return np.where(z, a | b, r)


def _fmin_bits(a, b):
    """V_MIN_F32 on raw bits: IEEE minNum with -0 < +0 (see _fmax_bits)."""
    r = from_f32(np.fmin(as_f32(a), as_f32(b)))
    if np.any(r & U32(0x7FFFFFFF) == 0):
        z = ((a | b) & U32(0x7FFFFFFF)) == 0
        r = np.where(z, a | b, r)
    return r


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


def as_i32(x):
    return np.asarray(x, dtype=U32).view(I32)


# 32-bit VALU ops on uint32 lanes: name -> (n_sources, source float type, fn).
# Semantics: [ISA] VOP1/VOP2/VOP3 opcode tables (the D = f(S0, S1, S2) pseudocode per
# opcode).  Shift amounts use the low 5 bits, 24-bit multiplies the low 24 bits, BFE
# takes offset/width from S1[4:0]/S2[4:0], MIN/MAX_F32 follow IEEE minNum/maxNum
# (NaN operands lose), V_CVT_*_F32 to integers truncate and saturate with NaN -> 0.
# Transcendentals (EXP/LOG/RCP/RSQ/SQRT/SIN/COS) are computed correctly rounded;
# the hardware is specified to 1 ULP, so bit-exact agreement there is not promised.
VALU32 = {
    "v_mov_b32": (1, "b32", lambda a: a),
    "v_not_b32": (1, "b32", lambda a: ~a),
    "v_bfrev_b32": (1, "b32", lambda a: _brev(a)),
    "v_ffbh_u32": (1, "b32", lambda a: _ffbh(a)),
    "v_ffbl_b32": (1, "b32", lambda a: _ffbl(a)),
    "v_add_u32": (2, "b32", lambda a, b: a + b),
    "v_sub_u32": (2, "b32", lambda a, b: a - b),
    "v_subrev_u32": (2, "b32", lambda a, b: b - a),
    "v_and_b32": (2, "b32", lambda a, b: a & b),
    "v_or_b32": (2, "b32", lambda a, b: a | b),
    "v_xor_b32": (2, "b32", lambda a, b: a ^ b),
    "v_lshlrev_b32": (2, "b32", lambda a, b: _shl(b, a)),
    "v_lshrrev_b32": (2, "b32", lambda a, b: _shr(b, a)),
    "v_ashrrev_i32": (2, "b32", lambda a, b: (as_i32(b) >> as_i32(a & U32(31))).view(U32)),
    "v_mul_lo_u32": (2, "b32", lambda a, b: (np.asarray(a, U64) * np.asarray(b, U64)).astype(U32)),
    "v_mul_hi_u32": (2, "b32", lambda a, b: ((np.asarray(a, U64) * np.asarray(b, U64)) >> U64(32)).astype(U32)),
    "v_mul_hi_i32": (2, "b32", lambda a, b: ((as_i32(a).astype(np.int64) * as_i32(b).astype(np.int64)) >> 32).astype(np.int64).astype(U32)),
    "v_mul_u32_u24": (2, "b32", lambda a, b: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF))),
    "v_mul_hi_u32_u24": (2, "b32", lambda a, b: ((np.asarray(a & U32(0xFFFFFF), U64) * np.asarray(b & U32(0xFFFFFF), U64)) >> U64(32)).astype(U32)),
    "v_mul_i32_i24": (2, "b32", lambda a, b: (_sext24(a) * _sext24(b)).astype(U32)),
    "v_min_u32": (2, "b32", lambda a, b: np.minimum(a, b)),
    "v_max_u32": (2, "b32", lambda a, b: np.maximum(a, b)),
    "v_min_i32": (2, "b32", lambda a, b: np.minimum(as_i32(a), as_i32(b)).view(U32)),
    "v_max_i32": (2, "b32", lambda a, b: np.maximum(as_i32(a), as_i32(b)).view(U32)),
    "v_bfm_b32": (2, "b32", lambda a, b: ((U32(1) << (a & U32(31))) - U32(1)) << (b & U32(31))),
    "v_bcnt_u32_b32": (2, "b32", lambda a, b: popcnt32(a) + b),
    "v_lshl_add_u32": (3, "b32", lambda a, b, c: _shl(a, b) + c),
    "v_add_lshl_u32": (3, "b32", lambda a, b, c: _shl(a + b, c)),
    "v_lshl_or_b32": (3, "b32", lambda a, b, c: _shl(a, b) | c),
    "v_and_or_b32": (3, "b32", lambda a, b, c: (a & b) | c),
    "v_or3_b32": (3, "b32", lambda a, b, c: a | b | c),
    "v_xad_u32": (3, "b32", lambda a, b, c: (a ^ b) + c),
    "v_add3_u32": (3, "b32", lambda a, b, c: a + b + c),
    "v_bfe_u32": (3, "b32", _bfe_u32),
    "v_bfe_i32": (3, "b32", _bfe_i32),
    "v_bfi_b32": (3, "b32", lambda a, b, c: (a & b) | (~a & c)),
    "v_alignbit_b32": (3, "b32", lambda a, b, c: (((np.asarray(a, U64) << U64(32)) | np.asarray(b, U64)) >> np.asarray(c & U32(31), U64)).astype(U32)),
    "v_alignbyte_b32": (3, "b32", lambda a, b, c: (((np.asarray(a, U64) << U64(32)) | np.asarray(b, U64)) >> (np.asarray(c & U32(3), U64) * U64(8))).astype(U32)),
    "v_mad_u32_u24": (3, "b32", lambda a, b, c: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)) + c),
    "v_mad_i32_i24": (3, "b32", lambda a, b, c: (_sext24(a) * _sext24(b) + as_i32(c)).astype(U32)),
    "v_min3_u32": (3, "b32", lambda a, b, c: np.minimum(np.minimum(a, b), c)),
    "v_max3_u32": (3, "b32", lambda a, b, c: np.maximum(np.maximum(a, b), c)),
    "v_min3_i32": (3, "b32", lambda a, b, c: np.minimum(np.minimum(as_i32(a), as_i32(b)), as_i32(c)).view(U32)),
    "v_max3_i32": (3, "b32", lambda a, b, c: np.maximum(np.maximum(as_i32(a), as_i32(b)), as_i32(c)).view(U32)),
    "v_med3_u32": (3, "b32", _med3),
    "v_med3_i32": (3, "b32", lambda a, b, c: _med3(as_i32(a), as_i32(b), as_i32(c)).view(U32)),
    "v_perm_b32": (3, "b32", _perm),
    "v_cvt_f32_u32": (1, "b32", lambda a: from_f32(np.asarray(a, U32).astype(np.float32))),
    "v_cvt_f32_i32": (1, "b32", lambda a: from_f32(as_i32(a).astype(np.float32))),
    "v_cvt_u32_f32": (1, "f32", _cvt_u32_f32),
    "v_cvt_i32_f32": (1, "f32", _cvt_i32_f32),
    "v_cvt_f32_ubyte0": (1, "b32", lambda a: from_f32((a & U32(0xFF)).astype(np.float32))),
    "v_cvt_f32_ubyte1": (1, "b32", lambda a: from_f32(((a >> U32(8)) & U32(0xFF)).astype(np.float32))),
    "v_cvt_f32_ubyte2": (1, "b32", lambda a: from_f32(((a >> U32(16)) & U32(0xFF)).astype(np.float32))),
    "v_cvt_f32_ubyte3": (1, "b32", lambda a: from_f32((a >> U32(24)).astype(np.float32))),
    # f32 arithmetic (numpy float32 is IEEE round-to-nearest-even; denormals kept,
    # matching the float_denorm_mode_32 = 3 FlyDSL kernels use)
    "v_add_f32": (2, "f32", lambda a, b: from_f32(as_f32(a) + as_f32(b))),
    "v_sub_f32": (2, "f32", lambda a, b: from_f32(as_f32(a) - as_f32(b))),
    "v_subrev_f32": (2, "f32", lambda a, b: from_f32(as_f32(b) - as_f32(a))),
    "v_mul_f32": (2, "f32", lambda a, b: from_f32(as_f32(a) * as_f32(b))),
    "v_max_f32": (2, "f32", lambda a, b: _fmax_bits(a, b)),
    "v_min_f32": (2, "f32", lambda a, b: _fmin_bits(a, b)),
    "v_max3_f32": (3, "f32", lambda a, b, c: _fmax_bits(_fmax_bits(a, b), c)),
    "v_min3_f32": (3, "f32", lambda a, b, c: _fmin_bits(_fmin_bits(a, b), c)),
    "v_med3_f32": (3, "f32", lambda a, b, c: _fmax_bits(_fmin_bits(a, b), _fmin_bits(_fmax_bits(a, b), c))),
    # gfx950 V_MAXIMUM3_F32 / V_MINIMUM3_F32: IEEE-754-2019 maximum/minimum (a NaN operand gives
    # a quiet NaN, -0 < +0) of three values ([LLVM] gfx950 VOP3 v_maximum3_f32, selected for
    # llvm.maximum.f32 / fmaximum3; emitted by aiter's MoE kernels for abs-max reductions)
    "v_maximum3_f32": (3, "f32", lambda a, b, c: _fmaximum_bits(_fmaximum_bits(a, b), c)),
    "v_minimum3_f32": (3, "f32", lambda a, b, c: _fminimum_bits(_fminimum_bits(a, b), c)),
    "v_fma_f32": (3, "f32", fma_f32),
    "v_mad_f32": (3, "f32", lambda a, b, c: from_f32(as_f32(a) * as_f32(b) + as_f32(c))),
    "v_exp_f32": (1, "f32", lambda a: from_f32(np.exp2(as_f32(a)))),
    "v_log_f32": (1, "f32", lambda a: from_f32(np.log2(as_f32(a)))),
    "v_rcp_f32": (1, "f32", lambda a: from_f32(np.float32(1.0) / as_f32(a))),
    # [ISA] V_RCP_IFLAG_F32: D = 1/S0 like V_RCP_F32; only the integer-divide exception flag
    # it raises differs (exceptions are not modelled)
    "v_rcp_iflag_f32": (1, "f32", lambda a: from_f32(np.float32(1.0) / as_f32(a))),
    "v_rsq_f32": (1, "f32", lambda a: from_f32(np.float32(1.0) / np.sqrt(as_f32(a)))),
    "v_sqrt_f32": (1, "f32", lambda a: from_f32(np.sqrt(as_f32(a)))),
    "v_floor_f32": (1, "f32", lambda a: from_f32(np.floor(as_f32(a)))),
    "v_ceil_f32": (1, "f32", lambda a: from_f32(np.ceil(as_f32(a)))),
    "v_trunc_f32": (1, "f32", lambda a: from_f32(np.trunc(as_f32(a)))),
    "v_rndne_f32": (1, "f32", lambda a: from_f32(np.rint(as_f32(a)))),
    "v_fract_f32": (1, "f32", lambda a: from_f32(np.minimum(as_f32(a) - np.floor(as_f32(a)), np.float32(0.99999994)))),
    "v_sin_f32": (1, "f32", lambda a: from_f32(np.sin(as_f32(a).astype(np.float64) * 2 * math.pi))),
    "v_cos_f32": (1, "f32", lambda a: from_f32(np.cos(as_f32(a).astype(np.float64) * 2 * math.pi))),
    "v_ldexp_f32": (2, "f32", _ldexp),
}
_INT_SRC1 = {"v_ldexp_f32"}   # second source of ldexp is an integer exponent


def _brev(a):
    a = np.asarray(a, dtype=U32)
    out = np.zeros_like(a)
    for k in range(32):
        out |= ((a >> U32(k)) & U32(1)) << U32(31 - k)
    return out


def _ffbh(a):
    a = np.asarray(a, dtype=U32)
    r = np.full(a.shape, M32, dtype=U32)
    nz = a != 0
    r[nz] = (31 - np.floor(np.log2(a[nz].astype(np.float64)))).astype(U32)
    return r


def _ffbl(a):
    a = np.asarray(a, dtype=U32)
    r = np.full(a.shape, M32, dtype=U32)
    nz = a != 0
    low = a[nz] & (~a[nz] + U32(1))
    r[nz] = np.log2(low.astype(np.float64)).astype(U32)
    return r


def omod_clamp(mods, ctx, is_float):
    """Post-processing for VOP3 clamp and output modifiers (mul:2/4, div:2) on f32 results.

    omod is ignored by the hardware when MODE.IEEE is set (issue #12 fix 6; LLVM
    SIFoldOperands: "omod is ignored by hardware if IEEE bit is enabled", which is why
    LLVM never folds omod in IEEE-mode functions).  IEEE mode is the compute default
    (.amdhsa_ieee_mode 1); only a kernel with .amdhsa_ieee_mode 0 gets omod applied.
    """
    omod = 1.0
    if "mul" in mods:
        if int(mods["mul"]) not in (1, 2, 4):
            raise ctx.err(f"output modifier mul:{mods['mul']} does not exist")
        omod = float(mods["mul"])
    if "div" in mods:
        if int(mods["div"]) not in (1, 2):
            raise ctx.err(f"output modifier div:{mods['div']} does not exist")
        omod = 1.0 / float(mods["div"])
    if getattr(ctx, "ieee", True):
        omod = 1.0
    clamp = bool(mods.get("clamp"))
    if not (clamp or omod != 1.0):
        return None
    if not is_float:
        raise ctx.err("clamp/omod on an integer op is not implemented")
    om = np.float32(omod)

    def post(x):
        f = x.view(np.float32)
        if om != 1:
            f = f * om
        if clamp:
            f = np.where(np.isnan(f), np.float32(0), np.clip(f, np.float32(0), np.float32(1)))
        return np.asarray(f, dtype=np.float32).view(U32)
    return post


_VALU_OK_MODS = {"clamp", "mul", "div"}

# VOP3 / SDWA ``clamp`` on the unsigned add/sub ops saturates in the unsigned integer domain
# (LLVM lowers llvm.usub.sat / llvm.uadd.sat to these ops with clamp on gfx9, e.g.
# llvm/test/CodeGen/AMDGPU/usubsat.ll GFX9: "v_sub_u16_e64 v0, v0, v1 clamp").
_INT_CLAMP = {
    "v_add_u32": lambda a, b: np.minimum(np.asarray(a, U64) + np.asarray(b, U64), U64(M32)).astype(U32),
    "v_sub_u32": lambda a, b: np.where(np.asarray(a, U32) >= b, np.asarray(a, U32) - b, U32(0)).astype(U32),
    "v_subrev_u32": lambda a, b: np.where(np.asarray(b, U32) >= a, np.asarray(b, U32) - a, U32(0)).astype(U32),
}


def base_name(op):
    """The opcode without its encoding suffix (``_e32`` / ``_e64``)."""
    for sfx in ("_e32", "_e64"):
        if op.endswith(sfx):
            return op[: -len(sfx)]
    return op


def build_valu32(ins, ctx, d, name, dpp=None, sdwa=None):
    n, ftype, fn = VALU32[name]
    o = ins.operands
    if ins.mods.get("clamp") and ftype == "b32":
        if name not in _INT_CLAMP:
            raise ctx.err(f"clamp (integer saturation) on {name} is not implemented")
        fn = _INT_CLAMP[name]
        ins = type(ins)(ins.line, ins.text, ins.opcode, ins.operands, {k: v for k, v in ins.mods.items() if k != "clamp"})
    if len(o) != n + 1:
        raise ctx.err(f"{name} takes {n + 1} operands, got {len(o)}")
    getters = []
    for k, x in enumerate(o[1:]):
        ft = "b32" if (name in _INT_SRC1 and k == 1) else ftype
        getters.append(vsrc(x, ctx, ft))
    if sdwa is not None:
        getters = [sdwa.wrap_src(g, k) for k, g in enumerate(getters)]
    if dpp is not None:
        getters[0] = dpp.wrap_src0(getters[0])
    post = omod_clamp(ins.mods, ctx, ftype == "f32")
    if ctx.ftz32 and ftype == "f32":
        # MODE.FP_DENORM f32 = 0 ([ISA] "flush input and output denormals"): f32 denormal
        # sources read as signed zeros, denormal results are written as signed zeros
        getters = [g if (name in _INT_SRC1 and k == 1) else ftz_getter(g) for k, g in enumerate(getters)]
        if name.startswith("v_cvt_") and not name.startswith(("v_cvt_f32_", "v_cvt_rpi", "v_cvt_flr")):
            pass                                   # f32 -> integer: only the input flush matters
        else:
            inner = post
            post = (lambda x: ftz(x)) if inner is None else (lambda x: ftz(inner(x)))
    i, _ = vwriter(ctx, o[0])
    for m in ins.mods:
        if m not in _VALU_OK_MODS and not (dpp and m in dpp.MODS) and not (sdwa and m in sdwa.MODS):
            raise ctx.err(f"unsupported modifier {m!r}")
    if dpp is not None:
        return dpp.make_handler(fn, getters, i, post)
    if sdwa is not None:
        return sdwa.make_handler(fn, getters, i)
    if n == 1:
        g0 = getters[0]
        if post is None:
            def h(w):
                write_v(w, i, fn(g0(w)))
        else:
            def h(w):
                write_v(w, i, post(np.asarray(fn(g0(w)), dtype=U32)))
    elif n == 2:
        g0, g1 = getters
        if post is None:
            def h(w):
                write_v(w, i, fn(g0(w), g1(w)))
        else:
            def h(w):
                write_v(w, i, post(np.asarray(fn(g0(w), g1(w)), dtype=U32)))
    else:
        g0, g1, g2 = getters
        if post is None:
            def h(w):
                write_v(w, i, fn(g0(w), g1(w), g2(w)))
        else:
            def h(w):
                write_v(w, i, post(np.asarray(fn(g0(w), g1(w), g2(w)), dtype=U32)))
    return h


# ---- DPP ([ISA] "DPP": row = 16 lanes, bank = 4 lanes) ----
class Dpp:
    MODS = {"quad_perm", "row_shl", "row_shr", "row_ror", "row_mirror", "row_half_mirror",
            "row_bcast", "row_mask", "bank_mask", "bound_ctrl", "fi", "wave_shl", "wave_shr",
            "wave_rol", "wave_ror", "row_newbcast"}

    def __init__(self, mods, ctx):
        lane = np.arange(64)
        row_base = lane & ~15
        if "quad_perm" in mods:
            qp = mods["quad_perm"]
            src = (lane & ~3) + np.array(qp)[lane & 3]
        elif "row_shl" in mods:
            src = lane + int(mods["row_shl"])
            src = np.where((src & ~15) == row_base, src, -1)
        elif "row_shr" in mods:
            src = lane - int(mods["row_shr"])
            src = np.where((src >= 0) & ((src & ~15) == row_base), src, -1)
        elif "row_ror" in mods:
            src = row_base + ((lane - int(mods["row_ror"])) & 15)
        elif mods.get("row_mirror"):
            src = row_base + (15 - (lane & 15))
        elif mods.get("row_half_mirror"):
            src = (lane & ~7) + (7 - (lane & 7))
        elif "row_bcast" in mods and int(mods["row_bcast"]) == 15:
            src = np.where(lane >= 16, (lane & ~15) - 1, -1)      # lane 15 of the previous row
        elif "row_bcast" in mods and int(mods["row_bcast"]) == 31:
            src = np.where(lane >= 32, 31, -1)
        elif "row_newbcast" in mods:
            src = row_base + int(mods["row_newbcast"])
        else:
            raise ctx.err("DPP control not implemented")
        self.src = np.asarray(src, dtype=np.int64)
        rm = int(mods.get("row_mask", 0xF))
        bm = int(mods.get("bank_mask", 0xF))
        self.enabled = (((rm >> (lane >> 4)) & 1) == 1) & (((bm >> ((lane >> 2) & 3)) & 1) == 1)
        # bound_ctrl (written bound_ctrl:0 or :1 by LLVM, both meaning "read 0")
        self.zero_fill = "bound_ctrl" in mods
        self.valid_src = self.src >= 0
        self.src_clipped = np.clip(self.src, 0, 63)

    def wrap_src0(self, g):
        src_c, valid = self.src_clipped, self.valid_src

        def f(w):
            x = np.broadcast_to(np.asarray(g(w), dtype=U32), (64,))
            ok = valid & w.exec_mask[src_c]
            self._ok = ok
            return np.where(ok, x[src_c], U32(0)).astype(U32)
        return f

    def make_handler(self, fn, getters, i, post):
        def h(w):
            vals = [g(w) for g in getters]
            r = np.asarray(fn(*vals), dtype=U32)
            if post is not None:
                r = post(r)
            lanes = self.enabled & w.exec_mask
            if not self.zero_fill:
                lanes = lanes & self._ok
            np.copyto(w.v[i], np.broadcast_to(r, (64,)), where=lanes, casting="unsafe")
        return h


class Sdwa:
    """SDWA sub-dword selects ([ISA] "SDWA"): integer ops only."""

    MODS = {"dst_sel", "dst_unused", "src0_sel", "src1_sel", "sext", "clamp"}
    SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8),
           "WORD_0": (0, 16), "WORD_1": (16, 16), "DWORD": (0, 32)}

    def __init__(self, mods, ctx, ftype):
        for key in ("dst_sel", "src0_sel", "src1_sel"):
            if key in mods and mods[key] not in self.SEL:
                raise ctx.err(f"SDWA select {mods[key]!r} not implemented")
        if ftype != "b32":
            raise ctx.err("SDWA on a float op is not implemented")
        if mods.get("sext"):
            raise ctx.err("SDWA sext not implemented")
        if mods.get("clamp") and mods.get("dst_sel", "DWORD") != "DWORD":
            raise ctx.err("SDWA clamp with a sub-dword dst_sel is not implemented")
        self.src_sel = [self.SEL[mods.get("src0_sel", "DWORD")], self.SEL[mods.get("src1_sel", "DWORD")]]
        self.dst_sel = self.SEL[mods.get("dst_sel", "DWORD")]
        self.dst_unused = mods.get("dst_unused", "UNUSED_PAD")
        if self.dst_unused not in ("UNUSED_PAD", "UNUSED_PRESERVE"):
            raise ctx.err(f"SDWA dst_unused {self.dst_unused!r} not implemented")

    def wrap_src(self, g, k):
        sh, width = self.src_sel[min(k, 1)]
        if width == 32:
            return g
        m = U32((1 << width) - 1)
        return lambda w: (np.asarray(g(w), dtype=U32) >> U32(sh)) & m

    def make_handler(self, fn, getters, i):
        sh, width = self.dst_sel
        fullmask = U32(((1 << width) - 1) << sh) if width < 32 else U32(M32)

        def h(w):
            r = np.asarray(fn(*[g(w) for g in getters]), dtype=U32)
            r = (r << U32(sh)) & fullmask
            if self.dst_unused == "UNUSED_PRESERVE":
                r = (w.v[i] & ~fullmask) | r
            write_v(w, i, r)
        return h


# ---- VOPC ([ISA] VOPC: result bit is 0 for inactive lanes) ----
_CMP = {
    "f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
    "tru": lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
    "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater,
    "ne": np.not_equal, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
    "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
    "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
}


def build_vopc(ins, ctx, d, name):
    for k in ins.mods:
        raise ctx.err(f"unsupported modifier {k!r}")
    parts = name.split("_")          # v_cmp[x]_<cond>_<type>
    cmpx = parts[1] == "cmpx"
    cond, typ = parts[2], parts[3]
    o = ins.operands
    if len(o) != 3:
        raise ctx.err(f"{name} takes 3 operands")
    if cond == "class":
        if typ != "f32":
            raise ctx.err(f"{name} not implemented")
        g0, g1 = vsrc(o[1], ctx, "f32"), vsrc(o[2], ctx)

        def test(w):
            x = np.broadcast_to(as_f32(np.asarray(g0(w), U32)), (64,))
            m = np.broadcast_to(np.asarray(g1(w), U32), (64,))
            neg = np.signbit(x)
            fin = np.isfinite(x)
            sub = fin & (x != 0) & (np.abs(x) < np.float32(1.1754944e-38))
            cls = [np.isnan(x) & (x.view(U32) & U32(0x400000) == 0), np.isnan(x) & (x.view(U32) & U32(0x400000) != 0),
                   np.isinf(x) & neg, fin & neg & ~sub & (x != 0), sub & neg, (x == 0) & neg,
                   (x == 0) & ~neg, sub & ~neg, fin & ~neg & ~sub & (x != 0), np.isinf(x) & ~neg]
            r = np.zeros(64, bool)
            for k, c in enumerate(cls):
                r |= c & (((m >> U32(k)) & U32(1)) == 1)
            return r
    else:
        if cond not in _CMP:
            raise ctx.err(f"compare {cond!r} not implemented")
        cmp = _CMP[cond]
        if typ in ("u32", "i32", "f32"):
            g0, g1 = vsrc(o[1], ctx, typ if typ == "f32" else "b32"), vsrc(o[2], ctx, typ if typ == "f32" else "b32")
            if typ == "f32" and ctx.ftz32:          # flushed denormals compare as zeros
                g0, g1 = ftz_getter(g0), ftz_getter(g1)
            conv = {"u32": lambda x: np.asarray(x, U32), "i32": as_i32, "f32": lambda x: as_f32(np.asarray(x, U32))}[typ]
        elif typ in ("u64", "i64"):
            g0, g1 = vsrc64(o[1], ctx), vsrc64(o[2], ctx)
            conv = (lambda x: np.asarray(x, U64)) if typ == "u64" else (lambda x: np.asarray(x, U64).view(np.int64))
        else:
            raise ctx.err(f"{name}: compare type {typ!r} not implemented")

        def test(w):
            return np.broadcast_to(cmp(conv(g0(w)), conv(g1(w))), (64,))
    if o[0].kind != "s" or o[0].count != 2:
        raise ctx.err(f"{name}: destination must be vcc or an SGPR pair")
    wr = sdst(o[0], ctx, 64)

    def h(w):
        r = test(w) & w.exec_mask
        bits = mask_to_int(r)
        if cmpx:
            w.s[126], w.s[127] = bits & M32, bits >> 32
            w.sync_exec()
        wr(w, bits)
    return h
