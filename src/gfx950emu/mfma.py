"""Functional model of the gfx950 (CDNA4) matrix-core (MFMA) instructions.

One call to :func:`execute` runs one MFMA for a whole wave: the 64 lanes'
source registers go in, the 64 lanes' accumulator registers come out.  The
emulator core owns registers and decoding of the assembly; this module only
knows the arithmetic and the lane layouts.

Lane layouts (M x N x K, ``G = 64 // M`` lane groups; lane ``l`` is in
group ``g = l // M``; element ``j`` of a lane is the ``j``-th element of its
registers read as one little-endian bit string, ``fpformats.unpack``):

* A (src0, M x K): lane ``l`` holds row ``l % M``; B (src1, K x N): lane
  ``l`` holds column ``l % N``.  The K index of element ``j``:
  - plain MFMAs (bf16/f16/fp8 of CDNA3 and the gfx950 double-rate bf16/f16)
    and fp4 operands of the f8f6f4 MFMAs: ``k = g*P + j`` with
    ``P = K // G`` (contiguous run per lane group);
  - fp6/bf6 operands of the f8f6f4 MFMAs: contiguous too, ``k = g*P + j``
    (issue #12 fix 3: only the 8-bit formats use the 16-element chunking);
  - fp8/bf8 operands of the f8f6f4 MFMAs: two halves of 16 elements,
    ``k = (j // 16) * K/2 + 16*g + j % 16``.
* C/D (M x N, f32): 16x16: register ``r`` (0..3) of lane ``l`` is
  ``D[4*(l//16) + r][l % 16]``; 32x32: register ``r`` (0..15) is
  ``D[8*(r//4) + 4*(l//32) + r%4][l % 32]``.

Sources: AMD Matrix Instruction Calculator (github.com/ROCm/amd_matrix_instruction_calculator),
CDNA3 tables, queried for v_mfma_f32_{16x16x32,32x32x16}_fp8_fp8 and
v_mfma_f32_16x16x16_bf16 (e.g. 16x16x32 fp8: lane 37 reg 3 is D[11][5], B
reg 1 of lane 37 holds B[20..23][5]; 32x32x16 fp8: lane 33 reg 5 is D[13][1]).
The calculator has no CDNA4 tables.  For the f8f6f4 operands: FlyDSL's a8w4
MoE kernel (kernels/moe/mxfp_moe/gemm1.py, run on MI355X with per-32-block
scales) loads its fp8 A operand as "two 16 B halves 64 B apart in the row
(f8f6f4 ABI)", i.e. bytes 0..15 of lane group g are K 16g.., bytes 16..31 are
K 64+16g.., while its fp4 B operand (and fp4 A in a4w4) is one contiguous
16 B = 32-element run at K 32g..; AMD's CDNA3/CDNA4 matrix-core blog
(Salykov et al., 2025, section 5.4/5.5) shows the same two layouts for
32x32x64 (fp8: K 16g + 32i + j; fp4: contiguous) and notes the fp8 scheme
is "valid only if both input matrices A and B have FP8 type".  Register
counts: fp8/bf8 8 dwords, fp6/bf6 6, fp4 4 (LLVM test
llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4.ll: <8 x i32>, <6 x i32>,
<4 x i32>).  fp6/bf6 (6 dwords = 32 contiguous 6-bit values per lane) pack
contiguously in K like fp4: the 16-element split is a property of the
byte-wide formats only (issue #12 audit, fix 3; the Salykov et al. blog's
remark that the split scheme holds "only if both ... have FP8 type").  No
kernel of ours uses fp6.  For unscaled same-format MFMAs the within-lane K
order is unobservable (any consistent permutation of K gives the same D).

Scales (``v_mfma_scale_*``): each lane's scale VGPR holds four E8M0 bytes.
For operand A the byte is ``op_sel[0] + 2*op_sel_hi[0]``, for B it is
``op_sel[1] + 2*op_sel_hi[1]`` (LLVM encodes the intrinsic's 2-bit
``scale_sel`` as op_sel bit = low bit, op_sel_hi bit = high bit: checked by
compiling probe kernels with flydsl 0.5.0's LLVM for gfx950, e.g. intrinsic
opsel_a=1, opsel_b=2 -> ``op_sel:[1,0,0] op_sel_hi:[0,1,0]`` and 3, 0 ->
``op_sel:[1,0,0] op_sel_hi:[1,0,0]``; FlyDSL's fp4_gemm_4wave docstring states
the same rule).  In assembly the A scale VGPR is the 5th operand and the B
scale the 6th: ``v_mfma_scale_f32_16x16x128_f8f6f4 vdst, A, B, C, scaleA,
scaleB op_sel:[..] op_sel_hi:[..] cbsz:.. blgp:..`` (same probe).  The byte
of lane ``l`` scales A row ``l % M`` (B: column ``l % N``) over the logical
K block ``l // M`` (``k`` in ``32*(l//M) .. +31``), whatever the data format:
FlyDSL's MXFP4 scale pre-shuffle (tests/kernels/utils shuffle_scale_w4: lane
= 16*K_Lane + N_Lane) and its a8w4 inline quantiser (scale of block kb of
row r written to lane 16*kb + r) both use it.  For fp4 that block is
exactly the lane's own 32 values; for fp8 a lane's values span two blocks.  An E8M0
byte of 0xFF is NaN (OCP MX v1.0, 5.4): every D element whose dot product
uses that block becomes NaN (hardware behaviour not verified beyond the spec).

Arithmetic (rounding model, issue #12 fix 8).  K is cut into blocks of 32
(one block when K < 32; for the scaled MFMAs these are exactly the blocks one
E8M0 scale covers).  Per block and output element:

1. ``P_b = fma(a_31, b_31, ... fma(a_1, b_1, a_0 * b_0))`` -- a chain of f32
   FMAs in K order on the *unscaled* decoded values (each step one
   round-to-nearest-even to f32);
2. ``Q_b = rn_f32(P_b * sa_b * sb_b)`` -- the block's two E8M0 scales applied
   (exact unless it over/underflows f32; 1 for the unscaled MFMAs);
3. ``D = rn_f32(... rn_f32(rn_f32(C + Q_0) + Q_1) ... + Q_last)`` -- f32
   accumulation onto C in K-block order.

This is the "per-32-K-block f32 FMA chain, then scale, then f32 accumulate"
that the issue-#12 audit describes for the hardware, instead of one exact
float64 sum rounded once; the order of the f32 adds in step 3 (C first, then
the blocks in K order) is this model's choice, unverified.  Step 1 is
computed fast when it is provably exact: every product is a multiple of the
two formats' smallest subnormals ``qa*qb`` and, if ``sum |a_k b_k| <=
2**24 * qa*qb``, every partial sum is an f32 value, so the chain equals the
exact float64 block dot product.  That holds always for fp4/fp6/bf6 operands
(e.g. fp4 x fp4: 32*36 <= 2**24/4) and is checked per MFMA otherwise; when it
fails the chain is run step by step, in f32 when every product is an exact f32
value (always for the 8/6/4-bit formats and f16, checked for bf16), else from
float64 per step.  Cost: the fp4/fp6 MFMAs (our kernels) run as fast as the old
one-matmul model; bf16 and fp8 MFMAs whose data fails the exactness bound run
the 32-step chain (about 1.5x / 3x the old cost per MFMA, measured in-process).  f32 subnormal inputs and results are
kept (no flush-to-zero modelled); a chain step rounds ``a*b + acc`` from
float64, exact except for rare double-rounding ties with extreme exponent
spread.  An E8M0 byte 0xFF makes its block's Q (hence D) NaN.

EXEC (issue #12 fix 7): an MFMA under a partial EXEC mask is refused, here
(``execute(..., exec_mask=...)`` raises ValueError) and in the emulator core
(kernel.py raises ExecError naming the line): which lanes of D hardware then
writes is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import fpformats as fpf

__all__ = [
    "is_mfma",
    "register_counts",
    "execute",
    "spec",
    "MfmaSpec",
    "F8F6F4_FORMATS",
    "a_coords",
    "b_coords",
    "d_coords",
    "scale_lane",
]

#: cbsz / blgp value -> operand format of the f8f6f4 MFMAs (LLVM AMDGPUUsage /
#: IntrinsicsAMDGPU.td for llvm.amdgcn.mfma.scale.*: 0 fp8 e4m3, 1 bf8 e5m2,
#: 2 fp6 e2m3, 3 bf6 e3m2, 4 fp4 e2m1)
F8F6F4_FORMATS = {0: "fp8", 1: "bf8", 2: "fp6", 3: "bf6", 4: "fp4"}


@dataclass(frozen=True)
class MfmaSpec:
    """Shape and operand kinds of one MFMA opcode."""

    m: int
    n: int
    k: int
    a_fmt: str  # "f8f6f4" (format from cbsz), "bf16", "f16", "fp8", "bf8"
    b_fmt: str  # "f8f6f4" (format from blgp), ...
    scaled: bool = False

    @property
    def groups(self) -> int:
        """Lane groups along K (4 for 16x16, 2 for 32x32)."""
        return 64 // self.m

    @property
    def per_lane(self) -> int:
        """Consecutive K elements each lane holds."""
        return self.k // self.groups

    @property
    def acc_regs(self) -> int:
        return self.m * self.n // 64


def _build_table() -> dict:
    t = {}
    for m, k in ((16, 128), (32, 64)):
        t[f"v_mfma_scale_f32_{m}x{m}x{k}_f8f6f4"] = MfmaSpec(m, m, k, "f8f6f4", "f8f6f4", scaled=True)
        t[f"v_mfma_f32_{m}x{m}x{k}_f8f6f4"] = MfmaSpec(m, m, k, "f8f6f4", "f8f6f4")
    for ty in ("bf16", "f16"):
        t[f"v_mfma_f32_16x16x32_{ty}"] = MfmaSpec(16, 16, 32, ty, ty)  # gfx950 double rate
        t[f"v_mfma_f32_32x32x16_{ty}"] = MfmaSpec(32, 32, 16, ty, ty)  # gfx950 double rate
        t[f"v_mfma_f32_16x16x16_{ty}"] = MfmaSpec(16, 16, 16, ty, ty)
        t[f"v_mfma_f32_32x32x8_{ty}"] = MfmaSpec(32, 32, 8, ty, ty)
    for a in ("fp8", "bf8"):
        for b in ("fp8", "bf8"):
            t[f"v_mfma_f32_16x16x32_{a}_{b}"] = MfmaSpec(16, 16, 32, a, b)
            t[f"v_mfma_f32_32x32x16_{a}_{b}"] = MfmaSpec(32, 32, 16, a, b)
    # spellings of the same instructions used by older LLVM / gfx908-style names
    aliases = {
        "v_mfma_f32_16x16x16f16": "v_mfma_f32_16x16x16_f16",
        "v_mfma_f32_32x32x8f16": "v_mfma_f32_32x32x8_f16",
        "v_mfma_f32_16x16x16bf16_1k": "v_mfma_f32_16x16x16_bf16",
        "v_mfma_f32_32x32x8bf16_1k": "v_mfma_f32_32x32x8_bf16",
    }
    for alias, name in aliases.items():
        t[alias] = t[name]
    return t


_TABLE = _build_table()

_BITS = {"bf16": 16, "f16": 16, **fpf.BITS}


def _norm(opcode: str) -> str:
    op = opcode.strip().lower()
    if op.endswith("_e64"):
        op = op[:-4]
    return op


def is_mfma(opcode: str) -> bool:
    """True for every MFMA opcode this module can execute."""
    return _norm(opcode) in _TABLE


def spec(opcode: str) -> MfmaSpec:
    """The :class:`MfmaSpec` of ``opcode`` (ValueError if unknown)."""
    op = _norm(opcode)
    if op not in _TABLE:
        raise ValueError(f"{opcode!r} is not an MFMA opcode this model implements")
    return _TABLE[op]


def _formats(sp: MfmaSpec, cbsz: int, blgp: int, abid: int) -> tuple:
    """Operand formats, checking the modifiers the model does not implement."""
    if abid:
        raise ValueError(f"abid={abid} (A-block broadcast) is not modelled; only abid=0 is supported")
    if sp.a_fmt == "f8f6f4":
        if cbsz not in F8F6F4_FORMATS or blgp not in F8F6F4_FORMATS:
            raise ValueError(f"cbsz and blgp select the f8f6f4 formats and must be 0..4, got cbsz={cbsz} blgp={blgp}")
        return F8F6F4_FORMATS[cbsz], F8F6F4_FORMATS[blgp]
    if cbsz or blgp:
        raise ValueError(f"cbsz={cbsz} / blgp={blgp} broadcast/swizzle is not modelled for this MFMA; only 0 is supported")
    return sp.a_fmt, sp.b_fmt


def register_counts(opcode: str, cbsz: int = 0, blgp: int = 0) -> tuple:
    """Dwords per lane of (src0 = A, src1 = B, src2 = C = vdst)."""
    sp = spec(opcode)
    fa, fb = _formats(sp, cbsz, blgp, 0)
    return (sp.per_lane * _BITS[fa] // 32, sp.per_lane * _BITS[fb] // 32, sp.acc_regs)


# ----------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------


def _k_of_slot(sp: MfmaSpec, fmt: str, lane, j):
    """Logical K index of element ``j`` of ``lane`` for an operand of format ``fmt``.

    Every lane group ``g = lane // M`` holds ``P`` elements.  For fp4 (and for
    all non-f8f6f4 MFMAs) they are the contiguous run ``k = g*P + j``.  For
    the 8-bit operands of the f8f6f4 MFMAs the 32 elements are two
    halves of 16: half ``h = j // 16`` covers ``k = h*K/2 + 16*g + j % 16``.
    """
    g = lane // sp.m
    if sp.a_fmt == "f8f6f4" and fmt in ("fp8", "bf8"):   # fp6/bf6 contiguous (issue #12 fix 3)
        return (j // 16) * (sp.k // 2) + 16 * g + j % 16
    return g * sp.per_lane + j


def _operand_format(sp: MfmaSpec, which: str, code: int) -> str:
    fixed = sp.a_fmt if which == "a" else sp.b_fmt
    if fixed != "f8f6f4":
        return fixed
    if code not in F8F6F4_FORMATS:
        raise ValueError(f"the f8f6f4 format code must be 0..4, got {code}")
    return F8F6F4_FORMATS[code]


def a_coords(opcode: str, lane: int, j: int, cbsz: int = 0) -> tuple:
    """(row, k) of A held by ``lane`` as its ``j``-th element (cbsz: f8f6f4 A format)."""
    sp = spec(opcode)
    return lane % sp.m, int(_k_of_slot(sp, _operand_format(sp, "a", cbsz), lane, j))


def b_coords(opcode: str, lane: int, j: int, blgp: int = 0) -> tuple:
    """(k, col) of B held by ``lane`` as its ``j``-th element (blgp: f8f6f4 B format)."""
    sp = spec(opcode)
    return int(_k_of_slot(sp, _operand_format(sp, "b", blgp), lane, j)), lane % sp.n


def scale_lane(opcode: str, index: int, k: int) -> int:
    """The lane whose scale byte scales row (A) / column (B) ``index`` for K index ``k``."""
    sp = spec(opcode)
    return (k // 32) * sp.m + index


def d_coords(opcode: str, lane: int, r: int) -> tuple:
    """(row, col) of D (and C) in accumulator register ``r`` of ``lane``."""
    rows, cols = _d_index_arrays(spec(opcode))
    return int(rows[lane, r]), int(cols[lane, r])


def _d_index_arrays(sp: MfmaSpec) -> tuple:
    lanes = np.arange(64)[:, None]
    regs = np.arange(sp.acc_regs)[None, :]
    if sp.m == 16:
        rows = 4 * (lanes // 16) + regs
        cols = np.broadcast_to(lanes % 16, rows.shape)
    else:
        rows = 8 * (regs // 4) + 4 * (lanes // 32) + regs % 4
        cols = np.broadcast_to(lanes % 32, rows.shape)
    return rows, cols


@dataclass(frozen=True)
class _Plan:
    """Index arrays of one (opcode, A format, B format), computed once."""

    a_scale_lane: np.ndarray  # [M, K] lane whose scale byte scales A[i][k]
    b_scale_lane: np.ndarray  # [K, N]
    # A[i][k] / B[k][n] (row-major, flat) is lane element a_order[.] / b_order[.] (flat lane * P + j):
    # lane element j of lane l is A[l % M][k of slot j] (_k_of_slot), B[k of slot j][l % N]
    a_order: np.ndarray  # [M*K]
    b_order: np.ndarray  # [K*N]
    # 4-bit operands: the byte (flat lane * P / 2 + j / 2) holding each pair of K neighbours A[i][2q],
    # A[i][2q+1] (B[2q][n], B[2q+1][n]: B^T row-major) as its low and high nibble; None for other widths
    a_pairs: np.ndarray | None
    b_pairs: np.ndarray | None
    d_flat: np.ndarray  # [64, R] flat index (row * N + col) of D in each accumulator register
    d_order: np.ndarray  # [M*N] flat (lane, register) of each D[i][j]


@lru_cache(maxsize=None)
def _plan(sp: MfmaSpec, fa: str, fb: str) -> _Plan:
    lanes = np.arange(64)[:, None]
    slots = np.arange(sp.per_lane)[None, :]
    k_block = np.arange(sp.k) // 32
    d_rows, d_cols = _d_index_arrays(sp)
    a_rows = np.broadcast_to(lanes % sp.m, (64, sp.per_lane))
    a_ks = _k_of_slot(sp, fa, lanes, slots)
    b_ks = _k_of_slot(sp, fb, lanes, slots)
    b_cols = np.broadcast_to(lanes % sp.n, (64, sp.per_lane))
    a_order = np.argsort(_bijection(a_rows * sp.k + a_ks, sp.m * sp.k))
    b_order = np.argsort(_bijection(b_ks * sp.n + b_cols, sp.k * sp.n))
    d_flat = _bijection(d_rows * sp.n + d_cols, sp.m * sp.n)
    return _Plan(
        # lane (k//32)*M + i holds the scale of row i (A) / column i (B) for K block k//32
        a_scale_lane=k_block[None, :] * sp.m + np.arange(sp.m)[:, None],
        b_scale_lane=k_block[:, None] * sp.n + np.arange(sp.n)[None, :],
        a_order=a_order,
        b_order=b_order,
        a_pairs=_nibble_pairs(a_order) if _BITS[fa] == 4 else None,
        b_pairs=_nibble_pairs(np.argsort(b_cols * sp.k + b_ks, axis=None)) if _BITS[fb] == 4 else None,
        d_flat=d_flat.reshape(d_rows.shape),
        d_order=np.argsort(d_flat),
    )


def _nibble_pairs(order: np.ndarray) -> np.ndarray:
    """Byte index of every (even, odd) pair of matrix entries, checked to be one byte's (low, high)
    nibbles (lane elements 2b and 2b + 1: every 4-bit layout holds K-contiguous runs)."""
    lo, hi = order[0::2], order[1::2]
    if (lo % 2).any() or not np.array_equal(hi, lo + 1):
        raise AssertionError("a 4-bit MFMA operand layout does not keep K neighbours in one byte")
    return lo // 2


def _bijection(flat: np.ndarray, size: int) -> np.ndarray:
    """``flat`` (the flat matrix index of every lane element) as a 1-D array, checked to hit every one
    of the ``size`` entries exactly once (the lane layouts are bijections onto A, B and D)."""
    flat = np.asarray(flat).reshape(-1)
    if not np.array_equal(np.sort(flat), np.arange(size)):
        raise AssertionError("an MFMA lane layout is not a bijection onto its matrix")
    return flat


_E8M0 = fpf.decode_e8m0(np.arange(256))  # float64 value of every scale byte


def _decode_values(fmt: str, regs: np.ndarray) -> np.ndarray:
    """Lane registers [64, n] (uint32) -> float64 element values [64, per_lane] through
    :func:`fpformats.unpack` (the 6- and 16-bit formats; :func:`_matrix` looks 4- and 8-bit codes up
    directly).
    """
    width = _BITS[fmt]
    codes = fpf.unpack(regs, width)
    if fmt == "bf16":
        return fpf.f32_from_bf16_bits(codes).astype(np.float64)
    if fmt == "f16":
        return codes.astype(np.uint16).view(np.float16).astype(np.float64)
    return fpf.decode(fmt, codes)


@lru_cache(maxsize=None)
def _pair_table(fmt: str) -> np.ndarray:
    """complex128 [256]: byte -> (value of its low nibble, value of its high nibble) of a 4-bit format,
    so that a table lookup of bytes viewed as float64 gives the elements in order."""
    t = fpf._table(fmt)
    codes = np.arange(256)
    return np.ascontiguousarray(np.stack([t[codes & 0x0F], t[codes >> 4]], axis=1)).view(np.complex128).reshape(256)


def _matrix(fmt: str, regs: np.ndarray, order: np.ndarray, pairs, shape: tuple, k_rows: bool) -> np.ndarray:
    """Lane registers [64, n] (uint32) -> the operand matrix (float64, C-contiguous ``shape``) whose flat
    entry ``p`` is lane element ``order[p]``, element 0 in a register's lowest bits (as
    :func:`fpformats.unpack`).  4- and 8-bit codes are looked up in the format's table straight from the
    little-endian register bytes (``pairs``: see :class:`_Plan`; ``k_rows``: K is the first axis, B) --
    the MFMA is the emulator's hottest instruction; other widths go through :func:`_decode_values`."""
    width = _BITS[fmt]
    if width == 8:
        data = np.ascontiguousarray(regs, dtype="<u4").view(np.uint8).reshape(-1)
        return fpf._table(fmt)[data[order]].reshape(shape)
    if width == 4:
        data = np.ascontiguousarray(regs, dtype="<u4").view(np.uint8).reshape(-1)
        m = _pair_table(fmt)[data[pairs]].view(np.float64)
        return np.ascontiguousarray(m.reshape(shape[::-1]).T) if k_rows else m.reshape(shape)
    return _decode_values(fmt, regs).astype(np.float64, copy=False).reshape(-1)[order].reshape(shape)


def _lane_scales(scale, sel: int, name: str) -> np.ndarray:
    s = np.asarray(scale)
    if s.shape != (64,):
        raise ValueError(f"{name} must hold one scale VGPR value per lane, shape (64,), got {s.shape}")
    return _E8M0[_scale_bytes(s, sel)]


def _scale_bytes(scale, sel: int) -> np.ndarray:
    """Byte ``sel`` of each lane's scale value (uint8 [64])."""
    return np.ascontiguousarray(scale, dtype="<u4").view(np.uint8)[sel::4]


def _scale_selects(op_sel, op_sel_hi) -> tuple[int, int]:
    """The scale byte op_sel / op_sel_hi pick for A and for B (bit 0 / bit 1 of each)."""
    return _bit(op_sel, 0) + 2 * _bit(op_sel_hi, 0), _bit(op_sel, 1) + 2 * _bit(op_sel_hi, 1)


def _check_regs(x, n: int, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.shape != (64, n):
        raise ValueError(f"{name} must be the wave's registers, shape (64, {n}), got {a.shape}")
    if a.dtype.kind not in "ui":
        raise ValueError(f"{name} must hold raw register bits as unsigned integers, got dtype {a.dtype}")
    return a.astype(np.uint32, copy=False)


def _bit(t, i: int) -> int:
    return int(t[i]) & 1 if i < len(t) else 0


def _grain(fmt: str):
    """(largest finite |value|, smallest positive value) of an operand format, or None."""
    if fmt == "bf16":
        return None                     # q = 2**-133: products can fall below f32's range
    if fmt == "f16":
        return 65504.0, 2.0 ** -24
    pos = fpf._positive_finite(fmt)
    return float(pos[-1]), float(pos[1])


@lru_cache(maxsize=None)
def _chain_bound(fa: str, fb: str, kb: int):
    """(always_exact, bound): the chain of step 1 is exact when sum|a b| <= bound (None: never known)."""
    ga, gb = _grain(fa), _grain(fb)
    if ga is None or gb is None:
        return False, None
    bound = 2.0 ** 24 * ga[1] * gb[1]
    return kb * ga[0] * gb[0] <= bound, bound


@lru_cache(maxsize=None)
def _resolve(opcode: str, cbsz: int, blgp: int, abid: int):
    """Everything execute() needs that depends only on the opcode and its format modifiers."""
    sp = spec(opcode)
    fa, fb = _formats(sp, cbsz, blgp, abid)
    na, nb, nc = register_counts(opcode, cbsz, blgp)
    always, bound = _chain_bound(fa, fb, min(32, sp.k))
    return sp, fa, fb, na, nb, nc, _plan(sp, fa, fb), always, bound


#: formats whose pairwise products are always exact f32 values (<= 22 significant bits,
#: magnitudes between 2**-48 and 2**32): then fma(a, b, acc) == rn_f32(acc + rn_f32(a*b))
_F32_EXACT_PRODUCTS = {"fp4", "fp6", "bf6", "fp8", "bf8", "f16"}


def _f32_chain(Ab: np.ndarray, Bb: np.ndarray) -> np.ndarray:
    """Step 1 when every product is an exact f32 value: f32 products, then f32 adds in K order
    (the same values as the FMA chain, ~3x faster than _fma_chain)."""
    a = np.ascontiguousarray(Ab.transpose(2, 0, 1), dtype=np.float32)     # [KB, nb, M]
    b = np.ascontiguousarray(Bb.transpose(1, 0, 2), dtype=np.float32)     # [KB, nb, N]
    prod = a[:, :, :, None] * b[:, :, None, :]                             # [KB, nb, M, N]
    acc = prod[0] + np.float32(0)          # fma(a0, b0, +0): a -0 product gives +0
    for j in range(1, prod.shape[0]):
        np.add(acc, prod[j], out=acc)
    return acc


def _bf16_products_exact(A: np.ndarray, B: np.ndarray) -> bool:
    """bf16 products (16 significant bits) are exact f32 values unless they leave f32's normal range."""
    aa, ab = np.abs(A), np.abs(B)
    amax, bmax = aa.max(), ab.max()
    if amax == 0 or bmax == 0:
        return True
    amin, bmin = aa[aa > 0].min(), ab[ab > 0].min()
    return bool(amax * bmax < 2.0 ** 127 and amin * bmin >= 2.0 ** -126)


def _fma_chain(Ab: np.ndarray, Bb: np.ndarray) -> np.ndarray:
    """Step 1 run step by step: Ab [nb, M, KB], Bb [nb, KB, N] float64 -> float32 [nb, M, N]."""
    acc = np.zeros((Ab.shape[0], Ab.shape[1], Bb.shape[2]), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(Ab.shape[2]):
            acc = (Ab[:, :, j, None] * Bb[:, None, j, :] + acc).astype(np.float32)
    return acc


def _blocks(sp, fa, fb, a, b, plan, always, bound, nblk, kb, sa, sb) -> np.ndarray:
    """Steps 1-2 of :func:`execute`: the scaled f32 block products Q [nblk, M, N]."""
    A = _matrix(fa, a, plan.a_order, plan.a_pairs, (sp.m, sp.k), False)
    B = _matrix(fb, b, plan.b_order, plan.b_pairs, (sp.k, sp.n), True)
    Ab = A.reshape(sp.m, nblk, kb).transpose(1, 0, 2)   # [nb, M, KB]
    Bb = B.reshape(nblk, kb, sp.n)                      # [nb, KB, N]
    # step 1: per-block f32 FMA chain (exact float64 block dot product when provably equal)
    if always or (bound is not None and np.all(np.matmul(np.abs(Ab), np.abs(Bb)) <= bound)):
        P = np.matmul(Ab, Bb)          # float64, and every value is exactly an f32 one
    elif (fa in _F32_EXACT_PRODUCTS and fb in _F32_EXACT_PRODUCTS) or (
            fa == fb == "bf16" and _bf16_products_exact(A, B)):
        P = _f32_chain(Ab, Bb)
    else:
        P = _fma_chain(Ab, Bb)
    # step 2: the block's scales (lane b*M + i holds row i's / column i's scale of block b)
    if sa is not None:
        S = sa.reshape(nblk, sp.m)[:, :, None] * sb.reshape(nblk, sp.n)[:, None, :]
        return (P * S).astype(np.float32)
    return P.astype(np.float32, copy=False)


def zero_shortcut(opcode: str, cbsz: int = 0, blgp: int = 0, op_sel=(0, 0, 0), op_sel_hi=(0, 0, 0),
                  abid: int = 0):
    """The scale bytes ``(sel_a, sel_b)`` (``None`` for an unscaled MFMA) under which a caller holding A,
    B and C all +0 bits may write D = +0 bits without calling :func:`execute`, or ``False`` when the
    modifiers are ones :func:`execute` refuses (then call it, for its error).

    The rule is execute's own zero shortcut: A and B +0 and no NaN scale make every product and block
    +0, so D = C + (+0) per block; with C +0 that is +0 -- bit for bit what execute returns.  A caller
    checks the scales with :func:`nan_scale` (the timing model's inputs are all zero: its hottest case)."""
    try:
        sp = _resolve(opcode, cbsz, blgp, abid)[0]
    except ValueError:
        return False
    if not sp.scaled:
        return None if not (any(op_sel) or any(op_sel_hi)) else False
    if _bit(op_sel, 2) or _bit(op_sel_hi, 2):
        return False
    return _scale_selects(op_sel, op_sel_hi)


_E8M0_NAN = np.isnan(_E8M0)
assert not _E8M0_NAN[0]  # nan_scale's zero register


def nan_scale(scale: np.ndarray, sel: int) -> bool:
    """Whether byte ``sel`` of any lane's scale value (uint32 [64]) is a NaN E8M0 scale (an all-zero
    register holds none: byte 0 is 2**-127)."""
    if not np.count_nonzero(scale):
        return False
    return bool(np.count_nonzero(_E8M0_NAN[_scale_bytes(scale, sel)]))


def execute(
    opcode: str,
    a,
    b,
    c,
    *,
    scale_a=None,
    scale_b=None,
    cbsz: int = 0,
    blgp: int = 0,
    op_sel=(0, 0, 0),
    op_sel_hi=(0, 0, 0),
    abid: int = 0,
    exec_mask=None,
) -> np.ndarray:
    """Run one MFMA for the whole wave and return D's raw f32 bits, uint32 [64, nC].

    ``a``/``b`` are uint32 [64, nA]/[64, nB] (the lanes' src0/src1 registers),
    ``c`` uint32 [64, nC] (raw accumulator bits; pass zeros for an inline 0),
    ``scale_a``/``scale_b`` uint32 [64] (each lane's scale VGPR) for the
    ``v_mfma_scale_*`` forms only.  ``exec_mask`` (bool [64], optional): a
    partial mask is refused with ValueError.  See the module docstring for
    layouts, scale-byte selection and the rounding model.
    """
    sp, fa, fb, na, nb, nc, plan, always, bound = _resolve(opcode, cbsz, blgp, abid)
    a = _check_regs(a, na, "a (src0)")
    b = _check_regs(b, nb, "b (src1)")
    c = _check_regs(c, nc, "c (src2)")
    if exec_mask is not None and not np.all(exec_mask):
        raise ValueError(f"{opcode} with a partial EXEC mask is not modelled (refused; see the mfma module docstring)")

    kb = min(32, sp.k)
    nblk = sp.k // kb
    if sp.scaled:
        if scale_a is None or scale_b is None:
            raise ValueError(f"{opcode} needs scale_a and scale_b (the two scale VGPRs)")
        if _bit(op_sel, 2) or _bit(op_sel_hi, 2):
            raise ValueError("op_sel[2]/op_sel_hi[2] must be 0: the accumulator has no scale")
        sel_a, sel_b = _scale_selects(op_sel, op_sel_hi)
        sa = _lane_scales(scale_a, sel_a, "scale_a")
        sb = _lane_scales(scale_b, sel_b, "scale_b")
    else:
        if scale_a is not None or scale_b is not None:
            raise ValueError(f"{opcode} is not a scaled MFMA; scale_a/scale_b must be None")
        if any(op_sel) or any(op_sel_hi):
            raise ValueError(f"op_sel/op_sel_hi are not modelled for {opcode}; they must be 0")

    with np.errstate(invalid="ignore", over="ignore"):
        if not a.any() and not b.any() and not (sp.scaled and (np.isnan(sa).any() or np.isnan(sb).any())):
            # A and B all +0 (code 0 in every format) and no NaN scale: every product, block sum and
            # scaled block is exactly +0, so step 3 adds +0 once per block, element by element -- in the
            # registers' own layout (the timing model's zero inputs: the emulator's hottest case)
            D = fpf.f32_from_bits(c)
            for _ in range(nblk):
                D = D + np.float32(0)
            return D.view(np.uint32)
        Q = _blocks(sp, fa, fb, a, b, plan, always, bound, nblk, kb, sa if sp.scaled else None,
                    sb if sp.scaled else None)
        # step 3: f32 accumulation onto C in K-block order
        D = fpf.f32_from_bits(c).reshape(-1)[plan.d_order].reshape(sp.m, sp.n)
        for q in Q:
            D = D + q
    return D.reshape(-1)[plan.d_flat].view(np.uint32)
