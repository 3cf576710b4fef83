"""Issue #12 semantic fixes 2-8 (engineer "emufix"): each test here failed on the emulator
before its fix.  References are written from the ISA pseudocode / LLVM sources cited in
the emulator next to each fix, per lane with Python floats where possible."""
import numpy as np
import pytest

import gfx950emu
from gfx950emu import fpformats as fpf
from gfx950emu import mfma
from gfx950emu.errors import DecodeError, ExecError

import emu_asm
from emu_asm import as_f32, f32, run_valu

OP16 = "v_mfma_scale_f32_16x16x128_f8f6f4"


def run_text(op_lines, inputs, nout=1, patch=None):
    """run_valu with a hook that edits the kernel text (descriptor directives)."""
    return emu_asm.run_valu(op_lines, inputs or [0], nout=nout, patch=patch)


def _directive(extra):
    def patch(t):
        key = extra.split()[0]
        t = "\n".join(ln for ln in t.split("\n") if ln.split()[:1] != [key])   # replace, do not duplicate
        return t.replace("\t\t.amdhsa_next_free_vgpr 256", "\t\t.amdhsa_next_free_vgpr 256\n" + extra)
    return patch


# ---------------------------------------------------------------- fix 2 ----
FP4_ONES = 0x22222222        # eight fp4 1.0 codes per dword


@pytest.mark.parametrize("scale_a,setup,scale_b,expect", [
    ("1.0", "s_mov_b32 s40, 0x40000000", "s40", 128.0 * 2.0),      # 1.0 -> 127 (x1), 2.0 -> 128 (x2)
    ("s41", "s_mov_b32 s41, 0x3e800000", "0.5", 128.0 * 0.25 * 0.5),  # 0.25 -> 125, 0.5 -> 126
])
def test_scaled_mfma_scale_from_sgpr_or_constant_uses_exponent_bits(scale_a, setup, scale_b, expect):
    """A scale operand that is not a VGPR supplies E8M0 = bits [30:23] of its 32-bit value
    (so the f32 constant 1.0 means 2**0), whatever op_sel says."""
    ones = [np.full(64, FP4_ONES, np.uint32)] * 8
    lines = f"""{setup}
v_mfma_scale_f32_16x16x128_f8f6f4 v[20:23], v[10:13], v[14:17], 0, {scale_a}, {scale_b} op_sel:[1,1,0] op_sel_hi:[1,0,0] cbsz:4 blgp:4
s_nop 7
s_nop 7
"""
    out = as_f32(run_text(lines, ones, nout=4))
    assert np.all(out == np.float32(expect)), np.unique(out)


# ---------------------------------------------------------------- fix 3 ----
def test_fp6_operands_are_contiguous_in_k():
    """fp6/bf6 operands of the f8f6f4 MFMAs hold a contiguous run of K per lane (only the
    8-bit formats use the two 16-element halves)."""
    assert mfma.a_coords(OP16, 0, 16, cbsz=2) == (0, 16)
    assert mfma.a_coords(OP16, 17, 20, cbsz=3) == (1, 32 + 20)
    assert mfma.b_coords(OP16, 33, 31, blgp=2) == (64 + 31, 1)
    # A (fp6): one 1.0 at lane 0 slot 16 -> row 0, k 16; B (fp4): one 1.0 at (k 16, col 0)
    a_codes = np.zeros((64, 32), np.int64)
    a_codes[0, 16] = 0x08
    b_codes = np.zeros((64, 32), np.int64)
    b_codes[0, 16] = 0x2
    a, b = fpf.pack(a_codes, 6), fpf.pack(b_codes, 4)
    s = np.full(64, 0x7F7F7F7F, np.uint32)
    d = mfma.execute(OP16, a, b, np.zeros((64, 4), np.uint32), scale_a=s, scale_b=s, cbsz=2, blgp=4)
    d = d.view(np.float32)
    assert d[0, 0] == 1.0 and np.count_nonzero(d) == 1


# ---------------------------------------------------------------- fix 4 ----
def _lane_vals(base):
    return (np.arange(64, dtype=np.uint32) + np.uint32(base))


@pytest.mark.parametrize("op,rows", [("v_permlane16_swap_b32", 16), ("v_permlane32_swap_b32", 32)])
def test_permlane_swap_active_lane_takes_partner_value_whatever_partner_exec(op, rows):
    x, y = _lane_vals(1000), _lane_vals(2000)
    # EXEC = lanes 0..15 only: vdst's lanes in odd rows are inactive, vsrc's lanes 0..15 active
    lines = f"""v_mov_b32_e32 v20, v10
v_mov_b32_e32 v21, v11
s_mov_b64 exec, 0xffff
s_nop 1
{op}_e32 v20, v21
s_mov_b64 exec, -1
"""
    out = run_text(lines, [x, y], nout=2)
    lane = np.arange(64)
    if rows == 16:
        partner_of_src = lane + 16          # vsrc lane b (even row) <-> vdst lane b+16
    else:
        partner_of_src = lane + 32
    want_src = y.copy()
    want_src[:16] = x[partner_of_src[:16]]
    assert np.array_equal(out[0], x), "inactive vdst lanes must keep their value"
    assert np.array_equal(out[1], want_src)


def test_permlane_swap_fi_and_bound_ctrl_are_refused():
    for mod in ("fi:1", "bound_ctrl:1"):
        with pytest.raises(DecodeError, match=r"line \d+.*(fi|bound_ctrl)"):
            run_text(f"v_permlane16_swap_b32_e64 v20, v21 {mod}", [], nout=1)


# ---------------------------------------------------------------- fix 5 ----
P0, N0 = 0x00000000, 0x80000000


@pytest.mark.parametrize("line,srcs,want", [
    ("v_max_f32_e32 v20, v10, v11", (P0, N0), P0),
    ("v_max_f32_e32 v20, v10, v11", (N0, P0), P0),
    ("v_max_f32_e32 v20, v10, v11", (N0, N0), N0),
    ("v_min_f32_e32 v20, v10, v11", (P0, N0), N0),
    ("v_min_f32_e32 v20, v10, v11", (N0, P0), N0),
    ("v_min_f32_e32 v20, v10, v11", (P0, P0), P0),
    ("v_max3_f32 v20, v10, v11, v12", (N0, P0, N0), P0),
    ("v_max3_f32 v20, v10, v11, v12", (N0, N0, P0), P0),
    ("v_min3_f32 v20, v10, v11, v12", (P0, N0, P0), N0),
    ("v_min3_f32 v20, v10, v11, v12", (P0, P0, N0), N0),
    ("v_med3_f32 v20, v10, v11, v12", (P0, N0, N0), N0),
    ("v_med3_f32 v20, v10, v11, v12", (N0, P0, P0), P0),
])
def test_min_max_order_signed_zeros(line, srcs, want):
    """IEEE-754 2019 maximum/minimum-number on zeros as the CDNA3/4 pseudocode: -0 < +0."""
    out = run_valu(line, [np.full(64, s, np.uint32) for s in srcs])[0]
    assert np.all(out == want), f"{line} on {[hex(s) for s in srcs]}: got {hex(out[0])}"


# ---------------------------------------------------------------- fix 6 ----
def test_omod_is_ignored_in_ieee_mode_and_applied_without_it():
    a = f32(np.linspace(-3, 3, 64))
    b = f32(np.full(64, 0.5))
    plain = as_f32(a) + as_f32(b)
    for mod in ("mul:2", "mul:4", "div:2"):
        got = as_f32(run_text(f"v_add_f32_e64 v20, v10, v11 {mod}", [a, b])[0])   # IEEE mode by default
        assert np.array_equal(got, plain), mod
    got = as_f32(run_text("v_add_f32_e64 v20, v10, v11 mul:2", [a, b], patch=_directive("\t\t.amdhsa_ieee_mode 0"))[0])
    assert np.array_equal(got, 2 * plain)
    got = as_f32(run_text("v_add_f32_e64 v20, v10, v11 mul:2", [a, b], patch=_directive("\t\t.amdhsa_ieee_mode 1"))[0])
    assert np.array_equal(got, plain)


@pytest.mark.parametrize("directive", [".amdhsa_float_denorm_mode_32 1", ".amdhsa_float_denorm_mode_16_64 1",
                                       ".amdhsa_float_round_mode_32 1", ".amdhsa_float_round_mode_16_64 2"])
def test_unmodelled_float_modes_are_refused_at_load(directive):
    with pytest.raises(DecodeError, match=directive.split()[0].lstrip(".").replace("amdhsa_", "")):
        run_text("v_add_f32_e32 v20, v10, v11", [0, 0], patch=_directive("\t\t" + directive))


def _ftz_kernel(t):
    assert "\t\t.amdhsa_float_denorm_mode_32 3" in t
    return t.replace("\t\t.amdhsa_float_denorm_mode_32 3", "\t\t.amdhsa_float_denorm_mode_32 0")


DEN = 0x00000100                      # a positive f32 denormal
NDEN = 0x80000100


def test_flush_to_zero_mode_is_honoured_for_f32_alu():
    """.amdhsa_float_denorm_mode_32 0 (the assembler default): f32 denormal inputs read as
    zeros and denormal results are written as zeros; 3 keeps them."""
    a = np.full(64, DEN, np.uint32)
    a[1] = NDEN
    tiny = f32(np.full(64, 2.0 ** -70))
    lines = """v_mul_f32_e32 v20, 1.0, v10
v_mul_f32_e32 v21, v11, v11
v_cmp_eq_f32_e32 vcc, 0, v10
v_cndmask_b32_e64 v22, 0, 1, vcc
v_max_f32_e32 v23, v10, v10
v_mov_b32_e32 v24, v10
v_fma_f32 v25, v11, v11, v10"""
    out = run_text(lines, [a, tiny], nout=6, patch=_ftz_kernel)
    assert list(out[0][:2]) == [0, 0x80000000]          # denormal input flushed (sign kept)
    assert np.all(out[1] == 0)                            # 2**-140 is a denormal result: flushed
    assert np.all(out[2] == 1)                            # the denormal compares equal to 0
    assert list(out[3][:2]) == [0, 0x80000000]
    assert np.all(out[4] == a)                            # moves do not flush
    assert np.all(out[5] == 0)
    keep = run_text(lines, [a, tiny], nout=6)
    assert list(keep[0][:2]) == [DEN, NDEN] and np.all(keep[1] == f32(np.float32(2.0 ** -140)))
    assert np.all(keep[2] == 0)


def test_setreg_denormal_toggle_is_tracked_along_straight_line_code():
    """LLVM's f32 division in flush-to-zero kernels turns f32 denormals on around the Newton
    steps with s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3 and back off with 0."""
    a = np.full(64, DEN, np.uint32)
    lines = """v_add_f32_e32 v20, 0, v10
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3
v_add_f32_e32 v21, 0, v10
s_getreg_b32 s40, hwreg(HW_REG_MODE, 4, 2)
v_mov_b32_e32 v22, s40
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 0
v_add_f32_e32 v23, 0, v10"""
    out = run_text(lines, [a], nout=4, patch=_ftz_kernel)
    assert np.all(out[0] == 0) and np.all(out[1] == DEN) and np.all(out[2] == 3) and np.all(out[3] == 0)
    branchy = """s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 3
s_cbranch_scc0 .Lx
.Lx:
v_add_f32_e32 v20, 0, v10
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 2), 0"""
    with pytest.raises(DecodeError, match=r"line \d+: a branch target inside a region where s_setreg changed MODE"):
        run_text(branchy, [a], patch=_ftz_kernel)
    with pytest.raises(DecodeError, match=r"line \d+: s_setreg_imm32_b32 changes MODE"):
        run_text("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 2), 1", [a], patch=_ftz_kernel)


# ---------------------------------------------------------------- fix 7 ----
def test_mfma_model_and_kernel_agree_on_partial_exec():
    z = np.zeros((64, 4), np.uint32)
    s = np.full(64, 0x7F7F7F7F, np.uint32)
    mask = np.ones(64, bool)
    mask[5] = False
    with pytest.raises(ValueError, match="partial EXEC"):
        mfma.execute(OP16, z, z, z, scale_a=s, scale_b=s, cbsz=4, blgp=4, exec_mask=mask)
    mfma.execute(OP16, z, z, z, scale_a=s, scale_b=s, cbsz=4, blgp=4, exec_mask=np.ones(64, bool))
    assert "partial EXEC" in mfma.__doc__ and "refuse" in mfma.__doc__
    lines = """s_mov_b64 exec, 0xff
v_mfma_scale_f32_16x16x128_f8f6f4 v[20:23], v[10:13], v[14:17], 0, v10, v10 cbsz:4 blgp:4
s_mov_b64 exec, -1
s_nop 7
s_nop 7"""
    with pytest.raises(ExecError, match=r"line \d+: MFMA with a partial EXEC"):
        run_text(lines, [0] * 8, nout=4)


# ---------------------------------------------------------------- fix 8 ----
def _one_hot_fp4(positions):
    """fp4 codes [64, 32] with 1.0 at (lane, slot) positions."""
    c = np.zeros((64, 32), np.int64)
    for lane, slot in positions:
        c[lane, slot] = 0x2
    return fpf.pack(c, 4)


def test_mfma_accumulates_blocks_in_f32_not_in_one_exact_sum():
    """D = C + s0*P0 + s1*P1 in f32, one rounding per K block: with C = 1 and two blocks each
    adding 2**-24 (half an ulp of 1), both round away: D = 1.0, while the exact sum rounded
    once would be 1 + 2**-23."""
    # 16x16x128 fp4, row 0 / col 0: block kb is lane group kb (lane 16*kb), 32 slots
    a = _one_hot_fp4([(0, 0), (16, 0)])            # A[0, 0] = A[0, 32] = 1
    b = _one_hot_fp4([(0, 0), (16, 0)])            # B[0, 0] = B[32, 0] = 1
    s = np.full(64, 0x73737373, np.uint32)         # E8M0 115 = 2**-12; sa*sb = 2**-24
    c = np.zeros((64, 4), np.uint32)
    c[0, 0] = np.float32(1.0).view(np.uint32)      # D[0][0] is lane 0 reg 0
    d = mfma.execute(OP16, a, b, c, scale_a=s, scale_b=s, cbsz=4, blgp=4).view(np.float32)
    assert d[0, 0] == np.float32(1.0), d[0, 0]
    assert "Per block and output element" in mfma.__doc__


def test_mfma_block_is_an_f32_fma_chain():
    """Inside a 32-K block the products are accumulated by a chain of f32 FMAs in K order:
    448*448 + 30 products of 2**-18 - 448*448 is 0 in that chain (the small terms are lost
    against 200704), not the exact 30 * 2**-18."""
    a = np.zeros((64, 32), np.int64)
    b = np.zeros((64, 32), np.int64)
    # fp8 A: lane 0 holds row 0, slots 0..15 -> k 0..15, slots 16..31 -> k 64..79 (two halves)
    a[0, 0], b[0, 0] = 0x7E, 0x7E                  # 448 * 448 at k = 0
    for j in range(1, 16):
        a[0, j], b[0, j] = 0x01, 0x01              # 2**-9 * 2**-9 at k = 1..15
    a[0, 15], b[0, 15] = 0xFE, 0x7E                # -448 * 448 at k = 15 (last of the block's first half)
    a = fpf.pack(a, 8)
    b = fpf.pack(b, 8)
    s = np.full(64, 0x7F7F7F7F, np.uint32)
    d = mfma.execute(OP16, a, b, np.zeros((64, 4), np.uint32), scale_a=s, scale_b=s, cbsz=0, blgp=0)
    assert d.view(np.float32)[0, 0] == 0.0


@pytest.mark.parametrize("fa,fb", [("fp8", "fp8"), ("bf8", "fp4"), ("fp6", "bf8"), ("bf16", "bf16"), ("f16", "f16")])
def test_mfma_chain_implementations_agree(fa, fb):
    """The f32 chain used when products are exact f32 values equals the step-by-step FMA chain."""
    rng = np.random.default_rng(3)
    dec = {"bf16": lambda c: fpf.f32_from_bf16_bits(c).astype(np.float64),
           "f16": lambda c: c.astype(np.uint16).view(np.float16).astype(np.float64)}

    def vals(fmt, shape):
        if fmt in dec:
            e = 20 if fmt == "bf16" else 4
            x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-e, e, shape)).astype(np.float32)
            codes = fpf.bf16_bits_from_f32(x.view(np.uint32)) if fmt == "bf16" else x.astype(np.float16).view(np.uint16)
            return dec[fmt](np.asarray(codes))
        c = rng.integers(0, 1 << fpf.BITS[fmt], shape)
        v = fpf.decode(fmt, c)
        return np.where(np.isfinite(v), v, 1.0)
    Ab, Bb = vals(fa, (4, 16, 32)), vals(fb, (4, 32, 16))
    if fa == "bf16":
        assert mfma._bf16_products_exact(Ab, Bb)
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.array_equal(mfma._f32_chain(Ab, Bb), mfma._fma_chain(Ab, Bb), equal_nan=True)
    assert not mfma._bf16_products_exact(np.array([[1e30]]), np.array([[1e10]]))
