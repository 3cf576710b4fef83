"""Vector ALU semantics (64 lanes) against the CDNA3/CDNA4 ISA pseudocode; the
references here are written per lane with Python ints, independently of the
emulator's numpy code."""
import math

import numpy as np
import pytest

from emu_asm import as_f32, f32, run_valu

rng = np.random.default_rng(7)
M = 0xFFFFFFFF


def rnd(n=64):
    v = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    v[:4] = [0, 1, 0x80000000, M]
    return v


def sx(x):
    x = int(x) & M
    return x - (1 << 32) if x >> 31 else x


def per_lane(fn, *cols):
    return np.array([fn(*(int(c[i]) for c in cols)) & M for i in range(64)], dtype=np.uint32)


INT_CASES = [
    ("v_add_u32_e32 v20, v10, v11", 2, lambda a, b: a + b),
    ("v_sub_u32_e32 v20, v10, v11", 2, lambda a, b: a - b),
    ("v_subrev_u32_e32 v20, v10, v11", 2, lambda a, b: b - a),
    ("v_lshlrev_b32_e32 v20, v10, v11", 2, lambda a, b: b << (a & 31)),
    ("v_lshrrev_b32_e32 v20, v10, v11", 2, lambda a, b: b >> (a & 31)),
    ("v_ashrrev_i32_e32 v20, v10, v11", 2, lambda a, b: sx(b) >> (a & 31)),
    ("v_mul_lo_u32 v20, v10, v11", 2, lambda a, b: a * b),
    ("v_mul_hi_u32 v20, v10, v11", 2, lambda a, b: (a * b) >> 32),
    ("v_mul_u32_u24_e32 v20, v10, v11", 2, lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF)),
    ("v_min_i32_e32 v20, v10, v11", 2, lambda a, b: min(sx(a), sx(b))),
    ("v_max_u32_e32 v20, v10, v11", 2, lambda a, b: max(a, b)),
    ("v_lshl_add_u32 v20, v10, v11, v12", 3, lambda a, b, c: (a << (b & 31)) + c),
    ("v_add_lshl_u32 v20, v10, v11, v12", 3, lambda a, b, c: ((a + b) & M) << (c & 31)),
    ("v_lshl_or_b32 v20, v10, v11, v12", 3, lambda a, b, c: ((a << (b & 31)) & M) | c),
    ("v_and_or_b32 v20, v10, v11, v12", 3, lambda a, b, c: (a & b) | c),
    ("v_or3_b32 v20, v10, v11, v12", 3, lambda a, b, c: a | b | c),
    ("v_add3_u32 v20, v10, v11, v12", 3, lambda a, b, c: a + b + c),
    ("v_xad_u32 v20, v10, v11, v12", 3, lambda a, b, c: (a ^ b) + c),
    ("v_bfi_b32 v20, v10, v11, v12", 3, lambda a, b, c: (a & b) | (~a & c)),
    ("v_alignbit_b32 v20, v10, v11, v12", 3, lambda a, b, c: ((a << 32) | b) >> (c & 31)),
    ("v_mad_u32_u24 v20, v10, v11, v12", 3, lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c),
    ("v_med3_i32 v20, v10, v11, v12", 3, lambda a, b, c: sorted([sx(a), sx(b), sx(c)])[1]),
]


@pytest.mark.parametrize("line,n,fn", INT_CASES, ids=[c[0].split()[0] for c in INT_CASES])
def test_integer_ops(line, n, fn):
    ins = [rnd() for _ in range(n)]
    out = run_valu(line, ins)[0]
    assert np.array_equal(out, per_lane(fn, *ins))


def test_bfe_with_field_controls():
    a = rnd()
    off = rng.integers(0, 32, 64).astype(np.uint32)
    width = rng.integers(0, 32, 64).astype(np.uint32)

    def ref_u(x, o, w):
        return (x >> o) & ((1 << w) - 1) if w else 0

    def ref_i(x, o, w):
        if w == 0:
            return 0
        v = (x >> o) & ((1 << w) - 1)
        return v - (1 << w) if (v >> (w - 1)) & 1 else v
    assert np.array_equal(run_valu("v_bfe_u32 v20, v10, v11, v12", [a, off, width])[0], per_lane(ref_u, a, off, width))
    assert np.array_equal(run_valu("v_bfe_i32 v20, v10, v11, v12", [a, off, width])[0], per_lane(ref_i, a, off, width))


@pytest.mark.parametrize("ttbl", [0xDE, 0x96, 0xE8, 0x01, 0xF0, 0xCC, 0xAA])
def test_bitop3_truth_table(ttbl):
    a, b, c = rnd(), rnd(), rnd()

    def ref(x, y, z):
        r = 0
        for bit in range(32):
            idx = (((x >> bit) & 1) << 2) | (((y >> bit) & 1) << 1) | ((z >> bit) & 1)
            r |= ((ttbl >> idx) & 1) << bit
        return r
    out = run_valu(f"v_bitop3_b32 v20, v10, v11, v12 bitop3:0x{ttbl:x}", [a, b, c])[0]
    assert np.array_equal(out, per_lane(ref, a, b, c))


def test_perm_b32_byte_select_and_constants():
    a, b = rnd(), rnd()
    sel = rng.integers(0, 16, (64, 4))
    selw = (sel[:, 0] | (sel[:, 1] << 8) | (sel[:, 2] << 16) | (sel[:, 3] << 24)).astype(np.uint32)

    def ref(x, y, s):
        both = (x << 32) | y
        r = 0
        for k in range(4):
            q = (s >> (8 * k)) & 0xFF
            if q < 8:
                byte = (both >> (8 * q)) & 0xFF
            elif q == 8:
                byte = 0xFF if y & 0x8000 else 0
            elif q == 9:
                byte = 0xFF if y & 0x80000000 else 0
            elif q == 10:
                byte = 0xFF if x & 0x8000 else 0
            elif q == 11:
                byte = 0xFF if x & 0x80000000 else 0
            elif q == 12:
                byte = 0
            else:
                byte = 0xFF
            r |= byte << (8 * k)
        return r
    out = run_valu("v_perm_b32 v20, v10, v11, v12", [a, b, selw])[0]
    assert np.array_equal(out, per_lane(ref, a, b, selw))


def test_cvt_pk_bf16_f32_rounds_to_nearest_even():
    one = 0x3F800000
    lo = np.array([one + 0x8000, one + 0x18000, one + 0x8001, 0x7FC00001, 0xFF800000, 0x7F7FFFFF] + [one] * 58, np.uint32)
    hi = np.full(64, 0x40490FDB, np.uint32)          # pi -> 0x4049
    out = run_valu("v_cvt_pk_bf16_f32 v20, v10, v11", [lo, hi])[0]
    assert [int(x) & 0xFFFF for x in out[:6]] == [0x3F80, 0x3F82, 0x3F81, 0x7FC0, 0xFF80, 0x7F80]
    assert all((int(x) >> 16) == 0x4049 for x in out)


def test_float_ops_and_vop3_modifiers():
    a = (rng.standard_normal(64) * 10).astype(np.float32)
    b = (rng.standard_normal(64) * 10).astype(np.float32)
    out = run_valu("v_add_f32_e64 v20, -v10, |v11|\nv_mul_f32_e64 v21, v10, v11 clamp\n"
                   "v_add_f32_e64 v22, v10, v11 mul:2\nv_fma_f32 v23, v10, v11, v10\n"
                   "v_max_f32_e32 v24, v10, v11\nv_sub_f32_e32 v25, 1.0, v10", [f32(a), f32(b)], 6)
    assert np.array_equal(as_f32(out[0]), -a + np.abs(b))
    assert np.array_equal(as_f32(out[1]), np.clip(a * b, 0, 1))
    assert np.array_equal(as_f32(out[2]), a + b)   # omod ignored in IEEE mode (issue #12 fix 6)
    assert np.array_equal(as_f32(out[3]), (a.astype(np.float64) * b + a).astype(np.float32))
    assert np.array_equal(as_f32(out[4]), np.maximum(a, b))
    assert np.array_equal(as_f32(out[5]), np.float32(1) - a)


def test_transcendentals_within_one_ulp():
    x = np.linspace(-20, 20, 64).astype(np.float32)
    e = rng.integers(-10, 10, 64).astype(np.int32)
    out = run_valu("v_exp_f32_e32 v20, v10\nv_rcp_f32_e32 v21, v10\nv_ldexp_f32 v22, v10, v11",
                   [f32(x), e.view(np.uint32)], 3)
    for got, want in ((as_f32(out[0]), 2.0 ** x.astype(np.float64)), (as_f32(out[1]), 1 / x.astype(np.float64))):
        ulp = np.spacing(np.abs(want).astype(np.float32))
        assert np.all(np.abs(got - want) <= ulp)
    assert np.array_equal(as_f32(out[2]), (x.astype(np.float64) * 2.0 ** e).astype(np.float32))


def test_cvt_between_int_and_float():
    x = np.array([1.5, -1.5, 3e9, -7.9, np.nan, 1e10] + [2.0] * 58, np.float32)
    out = run_valu("v_cvt_u32_f32_e32 v20, v10\nv_cvt_i32_f32_e32 v21, v10\nv_cvt_f32_u32_e32 v22, v11",
                   [f32(x), np.arange(64)], 3)
    assert list(out[0][:6]) == [1, 0, 3000000000, 0, 0, M]
    assert [sx(v) for v in out[1][:6]] == [1, -1, 2**31 - 1, -7, 0, 2**31 - 1]
    assert np.array_equal(as_f32(out[2]), np.arange(64, dtype=np.float32))


def test_compare_to_vcc_and_sgpr_pair_then_cndmask():
    a, b = rnd(), rnd()
    out = run_valu("v_cmp_gt_u32_e32 vcc, v10, v11\nv_cndmask_b32_e32 v20, v12, v13, vcc\n"
                   "v_cmp_lt_i32_e64 s[30:31], v10, v11\nv_cndmask_b32_e64 v21, v12, v13, s[30:31]",
                   [a, b, np.zeros(64), np.ones(64)], 2)
    assert np.array_equal(out[0], (a > b).astype(np.uint32))
    assert np.array_equal(out[1], (a.view(np.int32) < b.view(np.int32)).astype(np.uint32))


def test_exec_mask_keeps_inactive_lanes():
    lanes = np.arange(64, dtype=np.uint32)
    out = run_valu("v_mov_b32_e32 v20, 5\nv_cmpx_lt_u32_e64 s[30:31], v10, 20\nv_mov_b32_e32 v20, 9\n"
                   "s_mov_b64 exec, -1", [lanes])[0]
    assert list(out) == [9] * 20 + [5] * 44


def test_lane_access_ops():
    lanes = np.arange(64, dtype=np.uint32) * 3
    out = run_valu("s_mov_b64 exec, 0xffff0000\nv_readfirstlane_b32 s30, v10\ns_mov_b64 exec, -1\n"
                   "v_readlane_b32 s31, v10, 5\nv_mov_b32_e32 v20, s30\nv_mov_b32_e32 v21, s31\n"
                   "v_mov_b32_e32 v22, v10\nv_writelane_b32 v22, s31, 63", [lanes], 3)
    assert set(out[0]) == {48} and set(out[1]) == {15}
    assert list(out[2][:63]) == list(lanes[:63]) and out[2][63] == 15


def test_permlane_swaps():
    x = np.arange(64, dtype=np.uint32)
    y = np.arange(100, 164, dtype=np.uint32)
    out = run_valu("v_mov_b32_e32 v20, v10\nv_mov_b32_e32 v21, v11\nv_permlane16_swap_b32_e32 v20, v21\n"
                   "v_mov_b32_e32 v22, v10\nv_mov_b32_e32 v23, v11\nv_permlane32_swap_b32_e32 v22, v23", [x, y], 4)
    # permlane16: odd rows of vdst <-> even rows of vsrc
    want_d, want_s = x.copy(), y.copy()
    for r in (1, 3):
        want_d[16 * r:16 * r + 16] = y[16 * (r - 1):16 * r]
        want_s[16 * (r - 1):16 * r] = x[16 * r:16 * r + 16]
    assert np.array_equal(out[0], want_d) and np.array_equal(out[1], want_s)
    assert np.array_equal(out[2], np.concatenate([x[:32], y[:32]]))
    assert np.array_equal(out[3], np.concatenate([x[32:], y[32:]]))


def test_64bit_valu_ops():
    lo, hi, c = rnd(), rnd(), rnd()
    out = run_valu("v_lshl_add_u64 v[20:21], v[10:11], 3, v[12:13]\n"
                   "v_mad_u64_u32 v[22:23], s[30:31], v10, v11, v[12:13]\n"
                   "v_add_co_u32_e32 v24, vcc, v10, v12\nv_addc_co_u32_e32 v25, vcc, v11, v13, vcc",
                   [lo, hi, c, c ^ 0x5555], 6)
    a64 = [int(lo[i]) | (int(hi[i]) << 32) for i in range(64)]
    c64 = [int(c[i]) | ((int(c[i]) ^ 0x5555) << 32) for i in range(64)]
    m64 = 2**64 - 1
    got = [int(out[0][i]) | (int(out[1][i]) << 32) for i in range(64)]
    assert got == [((a64[i] << 3) + c64[i]) & m64 for i in range(64)]
    got = [int(out[2][i]) | (int(out[3][i]) << 32) for i in range(64)]
    assert got == [(int(lo[i]) * int(hi[i]) + c64[i]) & m64 for i in range(64)]
    got = [int(out[4][i]) | (int(out[5][i]) << 32) for i in range(64)]
    assert got == [(a64[i] + c64[i]) & m64 for i in range(64)]


def test_accvgpr_moves_use_the_agpr_half_of_the_unified_file():
    x = rnd()
    out = run_valu("v_accvgpr_write_b32 a3, v10\nv_accvgpr_mov_b32 a4, a3\nv_accvgpr_read_b32 v20, a4\n"
                   "v_mov_b32_e32 v21, v131", [x], 2, acc=128)
    assert np.array_equal(out[0], x)
    assert np.array_equal(out[1], x)            # a3 is unified register 128+3 = v131


def test_dpp_quad_perm_and_row_shift():
    x = rng.integers(0, 1000, 64).astype(np.uint32)
    out = run_valu("v_mov_b32_e32 v20, v10\nv_max_i32_dpp v20, v20, v20 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf bound_ctrl:1\n"
                   "v_mov_b32_e32 v21, 7\nv_mov_b32_dpp v21, v10 row_shr:1 row_mask:0xf bank_mask:0xf\n"
                   "v_mov_b32_e32 v22, 7\nv_mov_b32_dpp v22, v10 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1",
                   [x], 3)
    l = np.arange(64)
    assert np.array_equal(out[0], np.maximum(x, x[l ^ 1]))
    shifted = np.where(l % 16 == 0, -1, l - 1)
    assert np.array_equal(out[1], np.where(shifted < 0, 7, x[np.maximum(shifted, 0)]))
    assert np.array_equal(out[2], np.where(shifted < 0, 0, x[np.maximum(shifted, 0)]))


def test_sdwa_byte_select():
    x = rnd()
    out = run_valu("s_mov_b32 s30, 0x40\nv_min_u32_sdwa v20, v10, s30 dst_sel:DWORD dst_unused:UNUSED_PAD "
                   "src0_sel:BYTE_1 src1_sel:DWORD", [x])[0]
    assert np.array_equal(out, np.minimum((x >> 8) & 0xFF, 0x40))


def test_packed_f32_with_op_sel_hi_and_constant():
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    out = run_valu("s_mov_b32 s30, 0x40000000\ns_mov_b32 s31, 0x40400000\n"
                   "v_pk_mul_f32 v[20:21], v[10:11], s[30:31] op_sel_hi:[1,0]\n"
                   "v_pk_add_f32 v[22:23], v[10:11], 1.0 op_sel_hi:[1,0]", [f32(a), f32(b)], 4)
    assert np.array_equal(as_f32(out[0]), a * 2)
    assert np.array_equal(as_f32(out[1]), b * 2)      # hi half uses the LOW dword of s[30:31]
    assert np.array_equal(as_f32(out[2]), a + 1)
    assert np.array_equal(as_f32(out[3]), b + 1)


def test_mbcnt_counts_lanes_below():
    out = run_valu("v_mbcnt_lo_u32_b32 v20, -1, 0\nv_mbcnt_hi_u32_b32 v20, -1, v20", [])[0]
    assert np.array_equal(out, np.arange(64))


def test_inline_float_constants_are_f32_bits_for_f32_ops():
    out = run_valu("v_mov_b32_e32 v20, 0.5\nv_mov_b32_e32 v21, -4.0\nv_add_f32_e32 v22, 2, v10",
                   [np.zeros(64, np.uint32)], 3)
    assert set(out[0]) == {0x3F000000} and set(out[1]) == {0xC0800000}
    assert set(out[2]) == {2}       # integer inline constant 2 is the bit pattern 2 (a denormal)


def test_math_sanity_of_sin_cos_in_revolutions():
    x = np.linspace(0, 1, 64).astype(np.float32)
    out = run_valu("v_sin_f32_e32 v20, v10", [f32(x)])[0]
    assert np.allclose(as_f32(out), np.sin(2 * math.pi * x.astype(np.float64)), atol=1e-6)


def test_mad_i64_i32_signed():
    a, b, c = rnd(), rnd(), rnd()
    out = run_valu("v_mad_i64_i32 v[20:21], s[30:31], v10, v11, v[12:13]", [a, b, c, c], 2)
    got = [int(out[0][i]) | (int(out[1][i]) << 32) for i in range(64)]
    c64 = [int(c[i]) | (int(c[i]) << 32) for i in range(64)]
    c64 = [x - (1 << 64) if x >> 63 else x for x in c64]
    assert got == [(sx(a[i]) * sx(b[i]) + c64[i]) & (2**64 - 1) for i in range(64)]


def test_scaled_fp4_convert_writes_the_selected_byte_and_keeps_the_rest():
    # fp4 codes: 1.0 -> 0x2, -6.0 -> 0xF; scale 2.0 (exponent 128) divides first
    x0 = f32(np.full(64, 2.0))
    x1 = f32(np.full(64, -12.0))
    scale = f32(np.full(64, 2.0))
    old = np.full(64, 0x11223344, np.uint32)
    out = run_valu("v_mov_b32_e32 v20, v13\nv_cvt_scalef32_pk_fp4_f32 v20, v10, v11, v12 op_sel:[0,0,1,1]\n"
                   "v_mov_b32_e32 v21, v13\nv_cvt_scalef32_pk_fp4_f32 v21, v10, v11, v12",
                   [x0, x1, scale, old], 2)
    assert set(out[0]) == {0xF2223344}
    assert set(out[1]) == {0x112233F2}


def test_float_specials_are_data_not_warnings(recwarn):
    x = f32(np.array([0.0, -0.0, np.inf, np.nan] * 16, np.float32))
    out = run_valu("v_rcp_f32_e32 v20, v10\nv_log_f32_e32 v21, v10", [x], 2)
    r = as_f32(out[0][:4])
    assert r[0] == np.inf and r[1] == -np.inf and r[2] == 0 and np.isnan(r[3])
    assert as_f32(out[1][:1])[0] == -np.inf
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
