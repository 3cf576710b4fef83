"""Scalar ALU semantics against the CDNA3/CDNA4 ISA pseudocode (SOP1/SOP2/SOPK/SOPC/SOPP),
with special care for which instructions write SCC and which leave it alone."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel, run_salu

M = 0xFFFFFFFF


def sx(x):
    x &= M
    return x - (1 << 32) if x >> 31 else x


@pytest.mark.parametrize("a,b", [(0xFFFFFFFF, 2), (1, 2), (0x80000000, 0x80000000)])
def test_add_sub_u32_carry_and_borrow(a, b):
    (r,), scc = run_salu("s_add_u32 s20, s10, s11", [a, b])
    assert (r, scc) == ((a + b) & M, int(a + b > M))
    (r,), scc = run_salu("s_sub_u32 s20, s10, s11", [a, b])
    assert (r, scc) == ((a - b) & M, int(b > a))


@pytest.mark.parametrize("a,b", [(0x7FFFFFFF, 1), (0xFFFFFFFF, 1), (0x80000000, 0xFFFFFFFF)])
def test_add_sub_i32_signed_overflow(a, b):
    (r,), scc = run_salu("s_add_i32 s20, s10, s11", [a, b])
    s = sx(a) + sx(b)
    assert (r, scc) == (s & M, int(not -2**31 <= s < 2**31))
    (r,), scc = run_salu("s_sub_i32 s20, s10, s11", [a, b])
    s = sx(a) - sx(b)
    assert (r, scc) == (s & M, int(not -2**31 <= s < 2**31))


def test_64bit_add_through_addc_and_subb():
    x, y = 0x1_FFFF_FFFF, 0x2_0000_0001
    (lo, hi), _ = run_salu("s_add_u32 s20, s10, s12\ns_addc_u32 s21, s11, s13", [x & M, x >> 32, y & M, y >> 32], 2)
    assert lo | (hi << 32) == x + y
    (lo, hi), scc = run_salu("s_sub_u32 s20, s10, s12\ns_subb_u32 s21, s11, s13", [x & M, x >> 32, y & M, y >> 32], 2)
    assert lo | (hi << 32) == (x - y) & (2**64 - 1) and scc == 1


@pytest.mark.parametrize("op,fn", [
    ("s_and_b32", lambda a, b: a & b), ("s_or_b32", lambda a, b: a | b), ("s_xor_b32", lambda a, b: a ^ b),
    ("s_andn2_b32", lambda a, b: a & ~b & M), ("s_orn2_b32", lambda a, b: (a | ~b) & M),
    ("s_nand_b32", lambda a, b: ~(a & b) & M), ("s_nor_b32", lambda a, b: ~(a | b) & M),
    ("s_xnor_b32", lambda a, b: ~(a ^ b) & M),
    ("s_lshl_b32", lambda a, b: (a << (b & 31)) & M), ("s_lshr_b32", lambda a, b: a >> (b & 31)),
    ("s_ashr_i32", lambda a, b: (sx(a) >> (b & 31)) & M),
])
@pytest.mark.parametrize("a,b", [(0xF0F0_1234, 0x0FF0_0024), (0x8000_0000, 33), (0x0000_00FF, 0xFFFF_FF00)])
def test_logic_and_shifts_set_scc_to_result_nonzero(op, fn, a, b):
    (r,), scc = run_salu(f"{op} s20, s10, s11", [a, b])
    assert r == fn(a, b)
    assert scc == int(r != 0)


@pytest.mark.parametrize("op", ["s_mul_i32 s20, s10, s11", "s_mov_b32 s20, s10", "s_cselect_b32 s20, s10, s11",
                                "s_bfm_b32 s20, s10, s11", "s_movk_i32 s20, 0x1234", "s_mul_hi_u32 s20, s10, s11",
                                "s_sext_i32_i8 s20, s10", "s_pack_ll_b32_b16 s20, s10, s11"])
@pytest.mark.parametrize("scc_in", [0, 1])
def test_ops_that_leave_scc_alone(op, scc_in):
    setup = "s_cmp_eq_u32 s10, s10" if scc_in else "s_cmp_lg_u32 s10, s10"
    _, scc = run_salu(f"{setup}\n{op}", [0, 0])
    assert scc == scc_in


def test_cselect_picks_on_scc():
    (r,), _ = run_salu("s_cmp_lt_u32 s10, s11\ns_cselect_b32 s20, s10, s11", [3, 7])
    assert r == 3
    (r,), _ = run_salu("s_cmp_lt_i32 s10, s11\ns_cselect_b32 s20, s10, s11", [0xFFFFFFFF, 7])
    assert r == 0xFFFFFFFF          # -1 < 7 signed
    (r,), _ = run_salu("s_cmp_lt_u32 s10, s11\ns_cselect_b32 s20, s10, s11", [0xFFFFFFFF, 7])
    assert r == 7                   # but not unsigned


@pytest.mark.parametrize("a,b", [(5, 9), (0xFFFFFFFE, 3), (4, 4)])
def test_min_max_scc_says_which_source_won(a, b):
    (r,), scc = run_salu("s_min_i32 s20, s10, s11", [a, b])
    assert r == (a if sx(a) < sx(b) else b) and scc == int(sx(a) < sx(b))
    (r,), scc = run_salu("s_max_u32 s20, s10, s11", [a, b])
    assert r == max(a, b) and scc == int(a > b)


def test_bfe_and_bcnt_and_not():
    a = 0xDEADBEEF
    (r,), scc = run_salu("s_bfe_u32 s20, s10, s11", [a, 4 | (12 << 16)])
    assert r == (a >> 4) & 0xFFF and scc == 1
    (r,), _ = run_salu("s_bfe_i32 s20, s10, s11", [a, 28 | (4 << 16)])
    assert r == 0xFFFFFFFD          # field 0xD sign-extended
    (r,), scc = run_salu("s_bcnt1_i32_b32 s20, s10", [a])
    assert r == bin(a).count("1") and scc == 1
    (r,), scc = run_salu("s_not_b32 s20, s10", [M])
    assert r == 0 and scc == 0


def test_movk_sign_extends_and_cmpk_compares():
    (r,), _ = run_salu("s_movk_i32 s20, 0x8000", [])
    assert r == 0xFFFF8000
    _, scc = run_salu("s_cmpk_lt_i32 s10, 0xfff0", [0xFFFFFFEF])     # -17 < -16
    assert scc == 1
    _, scc = run_salu("s_cmpk_lt_u32 s10, 0xfff0", [0xFFFFFFEF])     # but 0xffffffef > 0xfff0 unsigned
    assert scc == 0
    (r,), scc = run_salu("s_mov_b32 s20, s10\ns_addk_i32 s20, 0x1", [0x7FFFFFFF])
    assert r == 0x80000000 and scc == 1


def test_lshl_add_carry_and_64bit_ops():
    (r,), scc = run_salu("s_lshl2_add_u32 s20, s10, s11", [0x40000000, 5])
    assert r == 5 and scc == 1
    (lo, hi), scc = run_salu("s_mov_b32 s20, s10\ns_mov_b32 s21, s11\ns_lshl_b64 s[20:21], s[20:21], 4", [0x80000001, 1], 2)
    assert (lo, hi, scc) == (0x10, 0x18, 1)
    (lo, hi), scc = run_salu("s_cselect_b64 s[20:21], s[10:11], 0", [7, 9], 2)
    assert (lo, hi) == (0, 0)


def test_loop_with_conditional_branch():
    body = """
s_mov_b32 s20, 0
s_mov_b32 s21, 10
.LBB0_1:
s_add_u32 s20, s20, s21
s_sub_u32 s21, s21, 1
s_cmp_lg_u32 s21, 0
s_cbranch_scc1 .LBB0_1
"""
    (r,), scc = run_salu(body, [0])
    assert r == sum(range(1, 11)) and scc == 0


def test_saveexec_and_execz_branch_skip_inactive_work():
    body = """
s_load_dwordx2 s[6:7], s[0:1], 0x8
v_lshlrev_b32_e32 v1, 2, v0
v_mov_b32_e32 v2, 7
v_cmp_gt_u32_e32 vcc, 10, v0
s_and_saveexec_b64 s[8:9], vcc
s_cbranch_execz .LBB0_2
v_mov_b32_e32 v2, 1
.LBB0_2:
s_or_b64 exec, exec, s[8:9]
s_mov_b64 vcc, 0
s_and_saveexec_b64 s[10:11], vcc
s_cbranch_execz .LBB0_3
v_mov_b32_e32 v2, 99
.LBB0_3:
s_mov_b64 exec, s[10:11]
s_waitcnt lgkmcnt(0)
global_store_dword v1, v2, s[6:7]
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    out = np.zeros(64, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(1, np.uint32), out], hazards="strict")
    assert list(out) == [1] * 10 + [7] * 54
    assert res.stats.by_opcode["v_mov_b32_e32"] == 2      # the execz branch skipped the third move
