"""Issue #12 opcodes a compiler-generated gfx950 GEMM may use (engineer "emufix"), each
against a per-lane Python reference written from the CDNA3/CDNA4 ISA pseudocode (or the
LLVM intrinsic definition cited next to the implementation).  All of them were refused
("unknown or unsupported opcode") before."""
import math

import numpy as np
import pytest

import gfx950emu
from gfx950emu.errors import DecodeError, ExecError

from emu_asm import as_f32, f32, run_salu, run_valu

rng = np.random.default_rng(12)
M = 0xFFFFFFFF
lane = np.arange(64)


def u32(x):
    return np.asarray(x, dtype=np.uint64).astype(np.uint32)


def rnd(n=64):
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def h16(x):
    """Python float -> f16 bits (round to nearest even)."""
    with np.errstate(over="ignore"):
        return int(np.float16(x).view(np.uint16))


def f16v(b):
    return float(np.uint16(b & 0xFFFF).view(np.float16))


def bf16_of(x):
    """bf16 bits of a value exactly representable in bf16."""
    b = int(np.float32(x).view(np.uint32))
    assert b & 0xFFFF == 0
    return b >> 16


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def fp4v(c):
    return (-1.0 if c & 8 else 1.0) * FP4[c & 7]


def fp8v(c):
    """OCP E4M3 (bias 7, no inf, 0x7F/0xFF NaN)."""
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 0xF, c & 7
    if e == 0:
        return s * m / 8 * 2.0 ** -6
    return s * (1 + m / 8) * 2.0 ** (e - 7)


FP8_POS = [fp8v(c) for c in range(0x7F)]       # codes 0..0x7E, increasing


def fp8_code(x):
    """Nearest E4M3 code, ties to even code, saturating at 448."""
    a = min(abs(x), 448.0)
    best = min(range(0x7F), key=lambda c: (abs(FP8_POS[c] - a), c & 1))
    return best | (0x80 if math.copysign(1, x) < 0 else 0)


def per_lane(fn, *cols):
    return np.array([fn(*(int(c[i]) for c in cols)) & M for i in range(64)], dtype=np.uint32)


# ------------------------------------------------------------- f32 / converts ----
def test_rcp_iflag_f32():
    x = f32(rng.standard_normal(64) * 100)
    out = run_valu("v_rcp_iflag_f32_e32 v20, v10", [x])[0]
    assert np.array_equal(out, f32(np.float32(1) / as_f32(x)))


@pytest.mark.parametrize("op,half", [("v_cvt_scalef32_pk_f16_fp4", "f16"), ("v_cvt_scalef32_pk_bf16_fp4", "bf16")])
@pytest.mark.parametrize("osel", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cvt_scalef32_pk_16_fp4(op, half, osel):
    src = rnd()
    exps = rng.integers(120, 135, 64)
    scale = u32(exps << 23 | rng.integers(0, 1 << 23, 64))      # mantissa bits are ignored
    out = run_valu(f"{op} v20, v10, v11 op_sel:[{osel[0]},{osel[1]},0]", [src, scale])[0]
    byte = osel[0] + 2 * osel[1]

    def ref(s, sc):
        b = (s >> (8 * byte)) & 0xFF
        k = 2.0 ** (((sc >> 23) & 0xFF) - 127)
        lo, hi = fp4v(b & 0xF) * k, fp4v(b >> 4) * k
        enc = h16 if half == "f16" else bf16_of
        return enc(lo) | enc(hi) << 16
    assert np.array_equal(out, per_lane(ref, src, scale))


@pytest.mark.parametrize("word", [0, 1])
def test_cvt_scalef32_pk_bf16_fp8(word):
    src = rnd()
    src &= np.uint32(0x7E7E7E7E) | np.uint32(0x80808080)   # no NaN codes
    scale = u32(rng.integers(110, 140, 64) << 23)
    out = run_valu(f"v_cvt_scalef32_pk_bf16_fp8 v20, v10, v11 op_sel:[{word},0,0]", [src, scale])[0]

    def ref(s, sc):
        w = (s >> (16 * word)) & 0xFFFF
        k = 2.0 ** ((sc >> 23) - 127)
        return bf16_of(fp8v(w & 0xFF) * k) | bf16_of(fp8v(w >> 8) * k) << 16
    assert np.array_equal(out, per_lane(ref, src, scale))


@pytest.mark.parametrize("word", [0, 1])
def test_cvt_pk_fp8_f32(word):
    a = (rng.standard_normal(64) * 60).astype(np.float32)
    b = (rng.standard_normal(64) * 0.05).astype(np.float32)
    a = np.clip(a, -460, 460)
    a[:4] = [463.0, -450.0, 0.0, 17.0]                      # round to 448, to -448, 0, a tie (16 | 18)
    old = rnd()
    body = f"v_mov_b32_e32 v20, v12\nv_cvt_pk_fp8_f32 v20, v10, v11 op_sel:[0,0,{word}]"
    out = run_valu(body, [f32(a), f32(b), old])[0]

    def ref(x, y, o):
        val = fp8_code(float(np.uint32(x).view(np.float32))) | fp8_code(float(np.uint32(y).view(np.float32))) << 8
        keep = o & (0xFFFF0000 if word == 0 else 0xFFFF)
        return keep | val << (16 * word)
    assert np.array_equal(out, per_lane(ref, f32(a), f32(b), old))


def test_cvt_pk_fp8_f32_overflow_is_refused():
    with pytest.raises(ExecError, match=r"line \d+: v_cvt_pk_fp8_f32: an input rounds beyond E4M3's 448"):
        run_valu("v_cvt_pk_fp8_f32 v20, v10, v11", [f32(np.full(64, 464.0)), f32(np.ones(64))])


def test_cvt_pk_f16_f32_and_pack_b32_f16():
    a = (rng.standard_normal(64) * 1000).astype(np.float32)
    b = (rng.standard_normal(64) * 1e-3).astype(np.float32)
    a[0] = 1e6                                                # overflows to inf
    out = run_valu("v_cvt_pk_f16_f32 v20, v10, v11", [f32(a), f32(b)])[0]
    with np.errstate(over="ignore"):
        want = [h16(float(x)) | h16(float(y)) << 16 for x, y in zip(a, b)]
    assert list(out) == want
    x, y = rnd(), rnd()
    out = run_valu("v_pack_b32_f16 v20, v10, v11 op_sel:[1,0,0]\nv_pack_b32_f16 v21, v10, v11",
                   [x, y], nout=2)
    assert np.array_equal(out[0], (x >> 16) | (y << 16))
    assert np.array_equal(out[1], (x & 0xFFFF) | (y << 16))


@pytest.mark.parametrize("ttbl", [0xDE, 0x96, 0x80])
def test_bitop3_b16(ttbl):
    a, b, c = rnd(), rnd(), rnd()
    out = run_valu(f"v_bitop3_b16 v20, v10, v11, v12 bitop3:{ttbl:#x}", [a, b, c])[0]

    def ref(x, y, z):
        r = 0
        for k in range(16):
            idx = ((x >> k) & 1) << 2 | ((y >> k) & 1) << 1 | ((z >> k) & 1)
            r |= ((ttbl >> idx) & 1) << k
        return r
    assert np.array_equal(out, per_lane(ref, a, b, c))


# ------------------------------------------------------------- 16-bit VALU ----
def rnd_f16(n=64, scale=8.0):
    v = (rng.standard_normal(n) * scale).astype(np.float16).view(np.uint16).astype(np.uint32)
    return v | (rnd(n) & np.uint32(0xFFFF0000))               # junk in the high halves


F16_CASES = [
    ("v_add_f16_e32 v20, v10, v11", 2, lambda a, b: h16(f16v(a) + f16v(b))),
    ("v_sub_f16_e32 v20, v10, v11", 2, lambda a, b: h16(f16v(a) - f16v(b))),
    ("v_mul_f16_e32 v20, v10, v11", 2, lambda a, b: h16(f16v(a) * f16v(b))),
    ("v_fma_f16 v20, v10, v11, v12", 3, lambda a, b, c: h16(f16v(a) * f16v(b) + f16v(c))),
    ("v_fma_f16 v20, -v10, v11, |v12| op_sel:[0,1,1,0]", 3,
     lambda a, b, c: h16(-f16v(a) * f16v(b >> 16) + abs(f16v(c >> 16)))),
    ("v_max_f16_e32 v20, v10, v11", 2, lambda a, b: h16(max(f16v(a), f16v(b)))),
    ("v_min_f16_e32 v20, v10, v11", 2, lambda a, b: h16(min(f16v(a), f16v(b)))),
]


@pytest.mark.parametrize("line,n,fn", F16_CASES, ids=[c[0] for c in F16_CASES])
def test_f16_ops_write_the_low_half_and_zero_the_high_half(line, n, fn):
    ins = [rnd_f16() for _ in range(n)]
    out = run_valu(line, ins)[0]
    assert np.array_equal(out, per_lane(fn, *ins))


def test_f16_dst_op_sel_writes_the_high_half_and_keeps_the_low():
    a, b, c, old = rnd_f16(), rnd_f16(), rnd_f16(), rnd()
    out = run_valu("v_mov_b32_e32 v20, v13\nv_fma_f16 v20, v10, v11, v12 op_sel:[0,0,0,1]", [a, b, c, old])[0]
    assert np.array_equal(out, per_lane(lambda x, y, z, o: (o & 0xFFFF) | h16(f16v(x) * f16v(y) + f16v(z)) << 16,
                                        a, b, c, old))


def test_f16_max_min_order_signed_zeros():
    p, n = np.full(64, 0x0000, np.uint32), np.full(64, 0x8000, np.uint32)
    out = run_valu("v_max_f16_e32 v20, v10, v11\nv_max_f16_e32 v21, v11, v10\nv_min_f16_e32 v22, v10, v11\n"
                   "v_min_f16_e32 v23, v11, v10", [p, n], nout=4)
    assert list(out[:, 0]) == [0, 0, 0x8000, 0x8000]


def sx16(x):
    x &= 0xFFFF
    return x - 0x10000 if x & 0x8000 else x


U16_CASES = [
    ("v_add_u16_e32 v20, v10, v11", 2, lambda a, b: (a + b) & 0xFFFF),
    ("v_sub_u16_e32 v20, v10, v11", 2, lambda a, b: (a - b) & 0xFFFF),
    ("v_mul_lo_u16_e32 v20, v10, v11", 2, lambda a, b: (a * b) & 0xFFFF),
    ("v_lshlrev_b16_e32 v20, v10, v11", 2, lambda a, b: (b << (a & 15)) & 0xFFFF),
    ("v_lshrrev_b16_e32 v20, v10, v11", 2, lambda a, b: ((b & 0xFFFF) >> (a & 15))),
    ("v_ashrrev_i16_e32 v20, v10, v11", 2, lambda a, b: (sx16(b) >> (a & 15)) & 0xFFFF),
    ("v_max_i16_e32 v20, v10, v11", 2, lambda a, b: max(sx16(a), sx16(b)) & 0xFFFF),
    ("v_min_u16_e32 v20, v10, v11", 2, lambda a, b: min(a & 0xFFFF, b & 0xFFFF)),
    ("v_mad_u16 v20, v10, v11, v12", 3, lambda a, b, c: ((a & 0xFFFF) * (b & 0xFFFF) + c) & 0xFFFF),
]


@pytest.mark.parametrize("line,n,fn", U16_CASES, ids=[c[0] for c in U16_CASES])
def test_u16_i16_ops(line, n, fn):
    ins = [rnd() for _ in range(n)]
    out = run_valu(line, ins)[0]
    assert np.array_equal(out, per_lane(fn, *ins))


def _pk(fn_lo, fn_hi):
    return lambda *s: (fn_lo(*s) & 0xFFFF) | (fn_hi(*s) & 0xFFFF) << 16


PK_CASES = [
    ("v_pk_add_f16 v20, v10, v11", 2,
     _pk(lambda a, b: h16(f16v(a) + f16v(b)), lambda a, b: h16(f16v(a >> 16) + f16v(b >> 16)))),
    ("v_pk_mul_f16 v20, v10, v11 op_sel:[1,0] op_sel_hi:[0,1]", 2,
     _pk(lambda a, b: h16(f16v(a >> 16) * f16v(b)), lambda a, b: h16(f16v(a) * f16v(b >> 16)))),
    ("v_pk_fma_f16 v20, v10, v11, v12 neg_lo:[1,0,0] neg_hi:[0,0,1]", 3,
     _pk(lambda a, b, c: h16(-f16v(a) * f16v(b) + f16v(c)),
         lambda a, b, c: h16(f16v(a >> 16) * f16v(b >> 16) - f16v(c >> 16)))),
    ("v_pk_add_f16 v20, v10, 1.0", 1,
     _pk(lambda a: h16(f16v(a) + 1.0), lambda a: h16(f16v(a >> 16) + 1.0))),
    ("v_pk_add_u16 v20, v10, v11", 2, _pk(lambda a, b: a + b, lambda a, b: (a >> 16) + (b >> 16))),
    ("v_pk_mul_lo_u16 v20, v10, v11 op_sel_hi:[0,1]", 2, _pk(lambda a, b: a * b, lambda a, b: a * (b >> 16))),
]


@pytest.mark.parametrize("line,n,fn", PK_CASES, ids=[c[0] for c in PK_CASES])
def test_packed_16bit_ops(line, n, fn):
    ins = [(rnd_f16() & np.uint32(0xFFFF)) | (rnd_f16() << np.uint32(16)) for _ in range(n)]
    out = run_valu(line, ins)[0]
    assert np.array_equal(out, per_lane(fn, *ins))


# ------------------------------------------------------------- f32 division ----
# LLVM's f32 fdiv expansion for gfx9 with f32 denormals on (as compiled, e.g. by hipcc)
DIV = """v_div_scale_f32 v12, s[30:31], v11, v11, v10
v_div_scale_f32 v13, vcc, v10, v11, v10
v_rcp_f32_e32 v14, v12
v_fma_f32 v15, -v12, v14, 1.0
v_fmac_f32_e32 v14, v15, v14
v_mul_f32_e32 v15, v13, v14
v_fma_f32 v16, -v12, v15, v13
v_fmac_f32_e32 v15, v16, v14
v_fma_f32 v12, -v12, v15, v13
v_div_fmas_f32 v14, v12, v14, v15
v_div_fixup_f32 v20, v14, v11, v10"""


def test_div_scale_fmas_fixup_expansion_divides_correctly():
    num = (rng.standard_normal(64) * 2.0 ** rng.integers(-60, 60, 64)).astype(np.float32)
    den = (rng.standard_normal(64) * 2.0 ** rng.integers(-60, 60, 64)).astype(np.float32)
    special = [(1e30, 1e-8), (-3.0, 7.0), (1.0, 3.0), (5e-39, 3.0), (2.0, 1e38), (6e37, 0.25)]
    for k, (x, y) in enumerate(special):
        num[k], den[k] = x, y
    out = as_f32(run_valu(DIV, [f32(num), f32(den)])[0])
    want = (num.astype(np.float64) / den.astype(np.float64)).astype(np.float32)
    bad = [(float(num[i]), float(den[i]), float(out[i]), float(want[i])) for i in range(64) if out[i] != want[i]]
    assert not bad, bad[:4]


def test_div_fixup_special_cases():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    num = np.array([1.0, -1.0, 0.0, inf, 2.0, 0.0, nan, 3.0] + [1.0] * 56, np.float32)
    den = np.array([0.0, 0.0, 0.0, inf, inf, 5.0, 1.0, nan] + [1.0] * 56, np.float32)
    out = as_f32(run_valu(DIV, [f32(num), f32(den)])[0])
    assert out[0] == inf and out[1] == -inf
    assert np.isnan(out[2]) and np.isnan(out[3])          # 0/0, inf/inf
    assert out[4] == 0 and out[5] == 0
    assert np.isnan(out[6]) and np.isnan(out[7])
    assert np.all(out[8:] == 1.0)


# ------------------------------------------------------------- misc VALU ----
def test_swap_b32_under_partial_exec():
    x, y = u32(lane + 100), u32(lane + 200)
    body = """v_mov_b32_e32 v20, v10
v_mov_b32_e32 v21, v11
s_mov_b64 exec, 0xff00
v_swap_b32 v20, v21
s_mov_b64 exec, -1"""
    out = run_valu(body, [x, y], nout=2)
    act = (lane >= 8) & (lane < 16)
    assert np.array_equal(out[0], np.where(act, y, x)) and np.array_equal(out[1], np.where(act, x, y))


# ------------------------------------------------------------- scalar ----
def _patched(extra):
    import emu_asm
    orig = emu_asm.kernel

    def k(*a, **kw):
        return orig(*a, **kw).replace("\t\t.amdhsa_next_free_vgpr 256", "\t\t.amdhsa_next_free_vgpr 256\n" + extra)
    return k


def test_getreg_mode_reads_the_launch_mode():
    out, _ = run_salu("s_getreg_b32 s20, hwreg(HW_REG_MODE)\ns_getreg_b32 s21, hwreg(HW_REG_MODE, 4, 4)\n"
                      "s_getreg_b32 s22, hwreg(HW_REG_MODE, 9, 1)", [], nout=3)
    # round 0 (nearest even), denorm 0xF (keep f32 and f16/f64), DX10_CLAMP 1, IEEE 1
    assert out == [0x3F0, 0xF, 1]


def test_setreg_mode_same_value_is_a_noop_and_a_change_is_refused():
    out, _ = run_salu("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 4), 15\ns_mov_b32 s20, 7", [], nout=1)
    assert out == [7]
    out, _ = run_salu("s_setreg_b32 hwreg(HW_REG_MODE, 4, 4), s10\ns_mov_b32 s20, 7", [0xF], nout=1)
    assert out == [7]
    with pytest.raises(DecodeError, match=r"line \d+: s_setreg_imm32_b32 changes MODE 0x3f0 -> 0x3f1"):
        run_salu("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 2), 1", [], nout=1)
    with pytest.raises(ExecError, match=r"line \d+: s_setreg changes MODE"):
        run_salu("s_setreg_b32 hwreg(HW_REG_MODE, 4, 2), s10", [0], nout=1)
    with pytest.raises(ExecError, match=r"line \d+: s_setreg changes MODE"):
        run_salu("s_setreg_b32 hwreg(HW_REG_MODE, 9, 1), s10", [0], nout=1)


def test_getreg_of_other_hardware_registers_is_refused():
    with pytest.raises(DecodeError, match=r"line \d+: hardware register HW_REG_HW_ID is not modelled"):
        run_salu("s_getreg_b32 s20, hwreg(HW_REG_HW_ID)", [], nout=1)


def test_sendmsg_is_a_noop_and_trap_raises():
    out, _ = run_salu("s_sendmsg sendmsg(MSG_INTERRUPT)\ns_mov_b32 s20, 5", [], nout=1)
    assert out == [5]
    with pytest.raises(ExecError, match=r"line \d+: s_trap 2"):
        run_salu("s_trap 2", [], nout=1)


def test_unknown_opcode_and_modifier_still_name_the_line():
    with pytest.raises(DecodeError, match=r"line \d+: unknown or unsupported opcode 'v_frobnicate_f16'"):
        run_valu("v_frobnicate_f16 v20, v10, v11", [0, 0])
    with pytest.raises(DecodeError, match=r"line \d+: clamp on v_mul_lo_u16"):
        run_valu("v_mul_lo_u16_e64 v20, v10, v11 clamp", [0, 0])
    with pytest.raises(DecodeError, match=r"line \d+: unsupported modifier 'abid'"):
        run_valu("v_pk_add_f16 v20, v10, v11 abid:1", [0, 0])
    with pytest.raises(DecodeError, match=r"line \d+: v_pk_add_f16: write negation as neg_lo/neg_hi"):
        run_valu("v_pk_add_f16 v20, -v10, v11", [0, 0])


# ------------------------------------------- ops found in aiter's compiled MoE kernels ----
def _fbits(x):
    return int(np.float32(x).view(np.uint32))


def _maximum(x, y):
    """IEEE-754-2019 maximum on Python floats: NaN propagates, -0 < +0."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y == 0:
        return 0.0 if (math.copysign(1, x) > 0 or math.copysign(1, y) > 0) else -0.0
    return max(x, y)


def _minimum(x, y):
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y == 0:
        return -0.0 if (math.copysign(1, x) < 0 or math.copysign(1, y) < 0) else 0.0
    return min(x, y)


def test_maximum3_minimum3_f32():
    vals = [f32(rng.standard_normal(64)) for _ in range(3)]
    vals[0][:4] = f32([np.nan, 0.0, -0.0, 1.0])
    vals[1][:4] = f32([1.0, -0.0, -0.0, np.nan])
    vals[2][:4] = f32([2.0, -0.0, 0.0, 3.0])
    out = run_valu("v_maximum3_f32 v20, |v10|, v11, v12\nv_minimum3_f32 v21, v10, v11, v12", vals, nout=2)
    fl = [[float(np.uint32(v).view(np.float32)) for v in col] for col in vals]
    for i in range(64):
        mx = _maximum(_maximum(abs(fl[0][i]), fl[1][i]), fl[2][i])
        mn = _minimum(_minimum(fl[0][i], fl[1][i]), fl[2][i])
        for got, want in ((out[0][i], mx), (out[1][i], mn)):
            if math.isnan(want):
                assert (int(got) & 0x7FC00000) == 0x7FC00000, (i, hex(got))    # a quiet NaN
            else:
                assert int(got) == _fbits(want), (i, hex(got), want)


def test_integer_clamp_saturates_unsigned_add_sub():
    a, b = rnd(), rnd()
    a[:3] = [5, 0xFFFFFFF0, 7]
    b[:3] = [9, 0x20, 7]
    out = run_valu("v_sub_u32_e64 v20, v10, v11 clamp\nv_add_u32_e64 v21, v10, v11 clamp\n"
                   "v_subrev_u32_e64 v22, v10, v11 clamp\nv_sub_u32_e64 v23, v10, 2 clamp", [a, b], nout=4)
    assert np.array_equal(out[0], per_lane(lambda x, y: max(x - y, 0), a, b))
    assert np.array_equal(out[1], per_lane(lambda x, y: min(x + y, M), a, b))
    assert np.array_equal(out[2], per_lane(lambda x, y: max(y - x, 0), a, b))
    assert np.array_equal(out[3], per_lane(lambda x: max(x - 2, 0), a))
    out = run_valu("v_mov_b32_e32 v20, v10\n"
                   "v_sub_u32_sdwa v20, v20, v11 clamp dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:DWORD",
                   [a, b])[0]
    assert np.array_equal(out, per_lane(lambda x, y: max((x & 0xFF) - y, 0), a, b))
    with pytest.raises(DecodeError, match=r"line \d+: clamp \(integer saturation\) on v_xor_b32"):
        run_valu("v_xor_b32_e64 v20, v10, v11 clamp", [a, b])


def test_16bit_clamp():
    a, b = rnd(), rnd()
    out = run_valu("v_sub_u16_e64 v20, v10, v11 clamp\nv_add_u16_e64 v21, v10, v11 clamp", [a, b], nout=2)
    assert np.array_equal(out[0], per_lane(lambda x, y: max((x & 0xFFFF) - (y & 0xFFFF), 0), a, b))
    assert np.array_equal(out[1], per_lane(lambda x, y: min((x & 0xFFFF) + (y & 0xFFFF), 0xFFFF), a, b))
    x, y = rnd_f16(scale=1.0), rnd_f16(scale=1.0)
    out = run_valu("v_add_f16_e64 v20, v10, v11 clamp", [x, y])[0]
    assert np.array_equal(out, per_lane(lambda p, q: h16(min(max(f16v(p) + f16v(q), 0.0), 1.0)), x, y))
