"""Memory opcodes a compiler-generated gfx950 kernel may use (issue #12): ds_read_b64_tr_b4/b8/b16,
ds_swizzle_b32, ds_wrxchg_rtn_b32, buffer_wbl2, buffer_inv, global_/buffer_atomic_cmpswap."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel

HEAD = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
"""


def run(body, inp, nout=64, lds=0, delivery="issue"):
    prog = gfx950emu.load(kernel(HEAD + body, lds=lds))
    out = np.zeros(nout, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [inp, out], hazards="strict", delivery=delivery)
    assert res.hazards == []
    return out


# ---------------------------------------------------------------- ds_read_b64_tr ----
@pytest.mark.parametrize("bits", [16, 8, 4])
@pytest.mark.parametrize("delivery", ["issue", "late"])
def test_ds_read_b64_tr_turns_a_column_major_block_into_k_runs(bits, delivery):
    """A 16 x n (non-K x K) block per 16 lanes stored non-K-contiguous (column-major A): each lane reads
    the 8 bytes at (K = L // (16/n), non-K block L mod (16/n)); afterwards lane j holds row j, K = 0..n-1."""
    n = 64 // bits
    rng = np.random.default_rng(bits)
    nvals = 1 << bits
    A = rng.integers(0, nvals, size=(4, 16, n), dtype=np.int64)      # [group, non-K, K]
    # LDS image: group g at byte 128*g, column k (16 non-K elements of `bits`) at 8*(16/n)... i.e. K-major
    elems = np.transpose(A, (0, 2, 1)).reshape(4, -1)                # [group, K * 16 + nonK]
    if bits == 4:
        image = (elems[:, 0::2] | (elems[:, 1::2] << 4)).astype(np.uint8)
    else:
        image = elems.astype(np.uint8 if bits == 8 else np.uint16).view(np.uint8).reshape(4, -1)
    lds = image.reshape(-1).view(np.uint32)                          # 512 bytes
    blocks = 16 // n                                                 # lanes per K column
    # lane L of group g reads 8 bytes at 128*g + 8 * L (K = L // blocks, non-K block L % blocks)
    body = f"""
global_load_dword v2, v1, s[4:5]
global_load_dword v3, v1, s[4:5] offset:256
s_waitcnt vmcnt(0)
ds_write_b32 v1, v2
ds_write_b32 v1, v3 offset:256
s_waitcnt lgkmcnt(0)
v_lshlrev_b32_e32 v4, 3, v0
ds_read_b64_tr_b{bits} v[6:7], v4
s_waitcnt lgkmcnt(0)
v_lshlrev_b32_e32 v5, 3, v0
global_store_dwordx2 v5, v[6:7], s[6:7]
s_endpgm
"""
    out = run(body, lds.copy(), nout=128, lds=512, delivery=delivery).reshape(64, 2)
    got = out.view(np.uint8).reshape(64, 8)
    if bits == 4:
        got_el = np.empty((64, 16), np.int64)
        got_el[:, 0::2], got_el[:, 1::2] = got & 0xF, got >> 4
    else:
        got_el = got.view(np.uint8 if bits == 8 else "<u2").astype(np.int64)
    want = A.reshape(64, n)                                          # lane 16g + j: row j of group g
    assert blocks * n == 16
    assert np.array_equal(got_el, want)


# --------------------------------------------------------------------- ds_swizzle ----
@pytest.mark.parametrize("offset, src", [
    ("0x801b", lambda l: (l & ~3) | np.array([3, 2, 1, 0])[l & 3]),            # QUAD_PERM 3,2,1,0
    ("swizzle(QUAD_PERM,0,0,2,2)", lambda l: (l & ~3) | np.array([0, 0, 2, 2])[l & 3]),
    ("swizzle(BITMASK_PERM,\"00p11\")", lambda l: (l & 0x20) | (l & 4) | 3),
    ("swizzle(SWAP,16)", lambda l: l ^ 16),
    ("swizzle(REVERSE,8)", lambda l: l ^ 7),
    ("swizzle(BROADCAST,8,5)", lambda l: (l & ~7) | 5),
    ("0x041f", lambda l: l ^ 1),                                              # and 0x1f, xor 1
])
def test_ds_swizzle_b32(offset, src):
    inp = np.arange(64, dtype=np.uint32) * 3 + 100
    body = f"""
global_load_dword v2, v1, s[4:5]
s_waitcnt vmcnt(0)
ds_swizzle_b32 v3, v2 offset:{offset}
s_waitcnt lgkmcnt(0)
global_store_dword v1, v3, s[6:7]
s_endpgm
"""
    out = run(body, inp)
    assert np.array_equal(out, inp[src(np.arange(64))])


def test_ds_swizzle_bad_pattern_is_one_clear_error():
    with pytest.raises(gfx950emu.DecodeError, match="swizzle mode FFT is not modelled"):
        gfx950emu.load(kernel("ds_swizzle_b32 v3, v2 offset:swizzle(FFT,3)\ns_endpgm"))


# -------------------------------------------------------------- ds_wrxchg_rtn_b32 ----
@pytest.mark.parametrize("delivery", ["issue", "late"])
def test_ds_wrxchg_rtn_b32_swaps_and_returns_the_old_value(delivery):
    inp = np.arange(64, dtype=np.uint32) + 500
    body = """
global_load_dword v2, v1, s[4:5]
v_add_u32_e32 v3, 7, v0
s_waitcnt vmcnt(0)
ds_write_b32 v1, v2
ds_wrxchg_rtn_b32 v4, v1, v3
s_waitcnt lgkmcnt(0)
ds_read_b32 v5, v1
s_waitcnt lgkmcnt(0)
global_store_dword v1, v4, s[6:7]
global_store_dword v1, v5, s[6:7] offset:256
s_endpgm
"""
    out = run(body, inp, nout=128, lds=256, delivery=delivery)
    assert np.array_equal(out[:64], inp)
    assert np.array_equal(out[64:], np.arange(64) + 7)


# ------------------------------------------------------------- buffer_wbl2 / inv ----
def test_buffer_wbl2_and_buffer_inv_decode_count_on_vmcnt_and_keep_data():
    inp = np.arange(64, dtype=np.uint32) + 1
    body = """
global_load_dword v2, v1, s[4:5]
s_waitcnt vmcnt(0)
global_store_dword v1, v2, s[6:7]
buffer_wbl2 sc1
s_waitcnt vmcnt(0)
buffer_inv sc0 sc1
s_waitcnt vmcnt(0)
global_load_dword v3, v1, s[6:7]
s_waitcnt vmcnt(0)
v_add_u32_e32 v3, 1, v3
global_store_dword v1, v3, s[6:7]
s_endpgm
"""
    assert np.array_equal(run(body, inp), inp + 1)
    prog = gfx950emu.load(kernel(HEAD + body))
    assert [d.pend[0] for d in prog.decoded if d.opcode in ("buffer_wbl2", "buffer_inv")] == ["vm", "vm"]


# ------------------------------------------------------------------------ cmpswap ----
RSRC = """
s_mov_b32 s8, s6
s_and_b32 s9, s7, 0xffff
s_movk_i32 s10, 0x100
s_mov_b32 s11, 0x27000
"""


@pytest.mark.parametrize("form", ["global", "buffer"])
@pytest.mark.parametrize("delivery", ["issue", "late"])
def test_atomic_cmpswap_swaps_where_memory_equals_compare(form, delivery):
    """Every lane hits word 0: lane order makes exactly one of them win when the compare values chain."""
    inp = np.zeros(64, np.uint32)
    atom = ("global_atomic_cmpswap v4, v9, v[2:3], s[6:7] sc0" if form == "global"
            else "buffer_atomic_cmpswap v[2:3], v9, s[8:11], 0 offen sc0")
    ret = "v4" if form == "global" else "v2"
    body = RSRC + f"""
v_mov_b32_e32 v9, 0
v_add_u32_e32 v2, 1, v0            ; new value: lane + 1
v_mov_b32_e32 v3, v0               ; compare: lane -> lane l swaps iff memory holds l
{atom}
s_waitcnt vmcnt(0)
global_store_dword v1, {ret}, s[6:7] offset:256
s_endpgm
"""
    prog = gfx950emu.load(kernel(HEAD + body))
    out = np.zeros(128, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [inp, out], hazards="report", delivery=delivery)
    assert res.hazards == []
    assert out[0] == 64                                   # lanes 0..63 each swapped in turn
    assert np.array_equal(out[64:], np.arange(64))       # each returned the pre-op value


def test_global_atomic_cmpswap_x2_without_return():
    inp = np.zeros(2, np.uint32)
    body = """
v_mov_b32_e32 v9, 0
v_mov_b32_e32 v2, 5                ; new = 0x0000000500000005 (lo, hi)
v_mov_b32_e32 v3, 5
v_mov_b32_e32 v4, 0                ; compare = 0
v_mov_b32_e32 v5, 0
s_mov_b64 exec, 1
global_atomic_cmpswap_x2 v9, v[2:5], s[6:7]
s_waitcnt vmcnt(0)
s_endpgm
"""
    out = run(body, inp, nout=2)
    assert list(out) == [5, 5]
