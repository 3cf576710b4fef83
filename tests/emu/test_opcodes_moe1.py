"""Opcodes the reworked MoE gemm1 (its BM16 in-kernel A quant) leans on, each against a per-lane
reference written from the CDNA4 ISA / LLVM definitions, plus the seed's own compiled gemm1 ISA
loading (engineer "moe1").  No opcode had to be added to gfx950emu for them; these pin the
semantics the kernel's bit-exact result depends on.

* ``v_pk_max_u16`` (VOP3P): per 16-bit half ``D.u16[i] = max(S0.u16[i], S1.u16[i])``, unsigned
  ([ISA] CDNA4 VOP3P table; LLVM selects it for ``umax <2 x i16>``).
* ``v_max_u32_dpp quad_perm`` (VOP2 + DPP): lane ``l`` reads ``src0`` from lane
  ``4*(l//4) + perm[l%4]`` ([ISA] "DPP", DPP_QUAD_PERM).
* ``v_cvt_scalef32_pk_fp4_bf16``: two bf16 -> E2M1 (divided by 2**(E - 127), E the f32 scale's
  exponent field, round to nearest even, saturating at 6) into byte ``op_sel[3:2]`` of the old
  dword; a scale whose bits are 0 (the inline quant's E8M0 of an all-zero block) gives 2**-127, so
  zeros stay code 0.
"""
import numpy as np
import pytest

import gfx950emu

from emu_asm import run_valu

rng = np.random.default_rng(1)
lane = np.arange(64)


def rnd(n=64):
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def test_v_pk_max_u16_is_an_unsigned_max_per_half():
    a, b = rnd(), rnd()
    a[:4] = [0x8000_0001, 0xFFFF_0000, 0x7FFF_8000, 0]
    b[:4] = [0x7FFF_FFFF, 0x0001_FFFF, 0x8000_7FFF, 0]
    out = run_valu("v_pk_max_u16 v20, v10, v11", [a, b])[0]
    want = (np.maximum(a & 0xFFFF, b & 0xFFFF) | (np.maximum(a >> 16, b >> 16) << 16)).astype(np.uint32)
    assert np.array_equal(out, want)


@pytest.mark.parametrize("perm", [(1, 0, 3, 2), (2, 3, 0, 1)])
def test_v_max_u32_dpp_quad_perm_reduces_over_a_quad(perm):
    a = rnd()
    text = ",".join(map(str, perm))
    out = run_valu(f"v_mov_b32_e32 v20, v10\n"
                   f"v_max_u32_dpp v20, v20, v20 quad_perm:[{text}] row_mask:0xf bank_mask:0xf bound_ctrl:1", [a])[0]
    src = a[4 * (lane // 4) + np.array(perm)[lane % 4]]
    assert np.array_equal(out, np.maximum(src, a))
    # the kernel's two steps (xor 1, then xor 2) leave every lane of a quad with the quad's max
    both = run_valu("v_mov_b32_e32 v20, v10\n"
                    "v_max_u32_dpp v20, v20, v20 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf bound_ctrl:1\n"
                    "v_max_u32_dpp v20, v20, v20 quad_perm:[2,3,0,1] row_mask:0xf bank_mask:0xf bound_ctrl:1", [a])[0]
    assert np.array_equal(both, np.repeat(a.reshape(16, 4).max(axis=1), 4))


def _bf16(x):
    b = int(np.float32(x).view(np.uint32))
    assert b & 0xFFFF == 0
    return b >> 16


def test_cvt_scalef32_pk_fp4_bf16_with_the_inline_quants_scales():
    # scale 2**-2 (E8M0 125 as f32 bits 125 << 23): bf16 (1.0, -1.75) -> (4.0, -7 -> -6 saturated)
    src = np.full(64, _bf16(1.0) | (_bf16(-1.75) << 16), dtype=np.uint32)
    scale = np.full(64, 125 << 23, dtype=np.uint32)
    old = np.full(64, 0xAABBCCDD, dtype=np.uint32)
    out = run_valu("v_mov_b32_e32 v20, v12\nv_cvt_scalef32_pk_fp4_bf16 v20, v10, v11 op_sel:[0,0,1,0]",
                   [src, scale, old])[0]
    assert np.all(out == 0xAABBF6DD)  # byte 1: code(-7 -> -6) = 0xF high, code(4.0) = 0x6 low
    # scale bits 0 (E8M0 0 of an all-zero block): 2**-127, zeros stay code 0, the other bytes kept
    zero = np.zeros(64, dtype=np.uint32)
    out = run_valu("v_mov_b32_e32 v20, v12\nv_cvt_scalef32_pk_fp4_bf16 v20, v10, v11 op_sel:[0,0,1,1]",
                   [zero, zero, old])[0]
    assert np.all(out == 0x00BBCCDD)

@pytest.mark.upstream
@pytest.mark.parametrize("commit", ["46ecc4489", "b242ba66a"])
@pytest.mark.parametrize("regime", ["decode", "prefill"])
def test_the_seeds_gemm1_isa_loads(commit, regime):
    from conftest import need, upstream_out

    path = need(upstream_out() / "aiter" / commit / f"gemm1_{regime}.s", f"aiter {commit}'s compiled gemm1 ISA")
    prog = gfx950emu.load(path.read_text())
    ops = {i.opcode for i in prog.instructions} if hasattr(prog.instructions[0], "opcode") else None
    assert prog.lds_size == {"decode": 16384, "prefill": 131072}[regime]
    if ops is not None and regime == "decode":
        assert "v_pk_max_u16" in ops
