"""Memory instructions: SMEM, MUBUF addressing/range checks, LDS DMA, DS, global atomics."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel

# V# for a raw buffer over the 'in' argument: s[8:11] = base, num_records=s10, flags
RSRC = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
s_waitcnt lgkmcnt(0)
s_mov_b32 s8, s4
s_and_b32 s9, s5, 0xffff
s_mov_b32 s11, 0x27000
"""


def launch(body, inp, nout=64, lds=0, block=64, hazards="strict", **kw):
    prog = gfx950emu.load(kernel(body, lds=lds, **kw))
    out = np.zeros(nout, np.uint32)
    res = gfx950emu.launch(prog, 1, block, [inp, out], hazards=hazards)
    assert res.hazards == []
    return out


def test_buffer_load_offsets_and_range_check():
    inp = np.arange(100, dtype=np.uint32) + 1000
    body = RSRC + """
s_movk_i32 s10, 0x100          ; num_records = 256 bytes = 64 dwords
v_lshlrev_b32_e32 v1, 2, v0
s_mov_b32 s12, 8               ; soffset: added to the address and counted in the range check
buffer_load_dword v2, v1, s[8:11], s12 offen offset:4
s_waitcnt vmcnt(0)
global_store_dword v1, v2, s[6:7]
s_endpgm
"""
    out = launch(body, inp)
    lane = np.arange(64)
    vgpr_off = 4 * lane + 4
    want = np.where(vgpr_off + 8 + 4 <= 256, inp[np.minimum((vgpr_off + 8) // 4, 99)], 0)
    assert np.array_equal(out, want)


def test_buffer_load_x4_checks_each_dword_and_store_drops_out_of_range():
    inp = np.arange(64, dtype=np.uint32) + 1
    body = RSRC + """
s_movk_i32 s10, 0x18           ; 24 bytes: dwords 0..5 in range
v_mov_b32_e32 v1, 8            ; every lane loads bytes 8..23, 16..31 straddles
v_mov_b32_e32 v6, 16
buffer_load_dwordx4 v[2:5], v1, s[8:11], 0 offen
buffer_load_dwordx4 v[7:10], v6, s[8:11], 0 offen
v_lshlrev_b32_e32 v11, 5, v0
s_mov_b32 s8, s6
s_and_b32 s9, s7, 0xffff
s_movk_i32 s10, 0x40           ; output V#: 64 bytes -> lanes 0 and 1 fit
s_waitcnt vmcnt(0)
buffer_store_dwordx4 v[2:5], v11, s[8:11], 0 offen
buffer_store_dwordx4 v[7:10], v11, s[8:11], 0 offen offset:16
s_endpgm
"""
    out = launch(body, inp, nout=64)
    assert list(out[:8]) == [3, 4, 5, 6, 5, 6, 0, 0]
    assert list(out[8:16]) == [3, 4, 5, 6, 5, 6, 0, 0]
    assert not out[16:].any()


def test_buffer_load_lds_uses_m0_inst_offset_and_lane_stride():
    inp = np.arange(64 * 4, dtype=np.uint32)
    body = RSRC + """
s_mov_b32 s10, 0x400
s_mov_b32 m0, 0x100
v_lshlrev_b32_e32 v1, 4, v0        ; also the one wait state an SALU write of M0 needs before LDS DMA
buffer_load_dwordx4 v1, s[8:11], 0 offen offset:16 lds
s_waitcnt vmcnt(0)
v_lshlrev_b32_e32 v2, 2, v0
ds_read_b32 v3, v2 offset:272      ; = 0x100 + 16
s_waitcnt lgkmcnt(0)
global_store_dword v2, v3, s[6:7]
s_endpgm
"""
    out = launch(body, inp, lds=2048)
    # LDS byte 0x110 + 16*l + 4*j holds global dword 4 + 4*l + j (lane l fetched bytes 16l+16..16l+31)
    assert np.array_equal(out, inp[4:68])


def test_ds_write_read_forms():
    inp = np.arange(64, dtype=np.uint32) * 7 + 1
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
s_waitcnt vmcnt(0)
v_add_u32_e32 v3, 1, v2
v_lshlrev_b32_e32 v4, 3, v0
ds_write2_b32 v4, v2, v3 offset1:1          ; lds[8l] = x, lds[8l+4] = x+1
ds_write_b32 v1, v2 offset:1024
s_waitcnt lgkmcnt(0)
ds_read_b64 v[5:6], v4
ds_read2_b32 v[7:8], v1 offset0:0 offset1:1
ds_read2st64_b32 v[9:10], v1 offset0:4 offset1:0    ; 4*64*4 = 1024
s_waitcnt lgkmcnt(0)
v_add_u32_e32 v11, v5, v6
v_add3_u32 v11, v11, v7, v8
v_add3_u32 v11, v11, v9, v10
global_store_dword v1, v11, s[6:7]
s_endpgm
"""
    out = launch(body, inp, lds=2048)
    lds = np.zeros(512, np.uint64)
    x = inp.astype(np.uint64)
    lds[0:128:2], lds[1:128:2] = x, x + 1
    lds[256:320] = x
    l = np.arange(64)
    want = (x + x + 1) + lds[l] + lds[l + 1] + lds[256 + l] + lds[l]
    assert np.array_equal(out, (want & 0xFFFFFFFF).astype(np.uint32))


def test_ds_read_b128_and_bpermute():
    inp = np.arange(64, dtype=np.uint32) + 10
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
s_waitcnt vmcnt(0)
ds_write_b32 v1, v2
v_xor_b32_e32 v3, 4, v1                     ; neighbour lane's address
ds_bpermute_b32 v4, v3, v2
s_waitcnt lgkmcnt(0)
v_lshlrev_b32_e32 v5, 4, v0
v_and_b32_e32 v5, 0xf0, v5                  ; lanes read 16-byte rows 0..15 again and again
ds_read_b128 v[6:9], v5
s_waitcnt lgkmcnt(0)
v_add_u32_e32 v10, v4, v9
global_store_dword v1, v10, s[6:7]
s_endpgm
"""
    out = launch(body, inp, lds=256)
    l = np.arange(64)
    assert np.array_equal(out, inp[l ^ 1] + inp[(l % 16) * 4 + 3])


def test_global_atomic_pk_add_bf16_accumulates_conflicting_lanes_in_order():
    def bf16(x):
        return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint32)
    vals = np.full(64, 0x3F80, np.uint32) | (bf16(np.float32(0.5)) << 16)   # lo 1.0, hi 0.5
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
v_and_b32_e32 v3, 12, v1                     ; 4 target dwords, 16 lanes each
v_mov_b32_e32 v4, 0
s_waitcnt vmcnt(0)
global_atomic_pk_add_bf16 v3, v2, s[6:7]
global_atomic_add v5, v4, v0, s[6:7] offset:64 sc0
s_waitcnt vmcnt(0)
global_store_dword v1, v5, s[6:7] offset:128
s_endpgm
"""
    out = launch(body, vals, nout=96)
    for k in range(4):
        lo = (np.uint32(out[k]) & 0xFFFF) << 16
        hi = (np.uint32(out[k]) >> 16) << 16
        assert np.uint32(lo).view(np.float32) == 16.0 and np.uint32(hi).view(np.float32) == 8.0
    assert out[16] == sum(range(64))
    assert np.array_equal(out[32:96], np.cumsum(np.arange(64)) - np.arange(64))   # returns pre-op values, lane order


def test_scalar_loads_and_s_buffer_load():
    inp = np.arange(64, dtype=np.uint32) * 3
    body = RSRC + """
s_load_dwordx8 s[12:19], s[4:5], 0x20
s_mov_b32 s10, 0x10                          ; 16 bytes in range
s_buffer_load_dwordx4 s[20:23], s[8:11], 0x8
s_waitcnt lgkmcnt(0)
v_mov_b32_e32 v1, 0
v_mov_b32_e32 v2, s19
v_mov_b32_e32 v3, s20
v_mov_b32_e32 v4, s21
v_mov_b32_e32 v5, s22
global_store_dword v1, v2, s[6:7]
global_store_dword v1, v3, s[6:7] offset:4
global_store_dword v1, v4, s[6:7] offset:8
global_store_dword v1, v5, s[6:7] offset:12
s_endpgm
"""
    out = launch(body, inp, nout=4)
    assert list(out) == [inp[15], inp[2], inp[3], 0]


def test_unmapped_global_address_is_a_memory_fault_naming_the_line():
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_mov_b32_e32 v1, 0x100000
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    with pytest.raises(gfx950emu.MemoryFault, match=r"line \d+: global access to unmapped address"):
        gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)])


def test_lds_dma_lane_stride_is_16_bytes_for_dwordx3_and_4_for_short_loads():
    inp = np.arange(256, dtype=np.uint32) + 1
    body = RSRC + """
s_mov_b32 s10, 0x400
s_mov_b32 m0, 0
v_mul_u32_u24_e32 v1, 12, v0
buffer_load_dwordx3 v1, s[8:11], 0 offen lds
s_movk_i32 m0, 0x400
v_lshlrev_b32_e32 v2, 2, v0
buffer_load_ushort v2, s[8:11], 0 offen lds
s_waitcnt vmcnt(0)
v_lshlrev_b32_e32 v3, 4, v0
ds_read_b128 v[4:7], v3
ds_read_b32 v8, v2 offset:1024
s_waitcnt lgkmcnt(0)
v_add_u32_e32 v9, v4, v6
v_add_u32_e32 v9, v9, v7                    ; dword 3 of each 16-byte slot stays 0
v_mul_u32_u24_e32 v10, 3, v0
global_store_dword v2, v9, s[6:7]
global_store_dword v2, v8, s[6:7] offset:256
s_endpgm
"""
    out = launch(body, inp, nout=128, lds=2048)
    l = np.arange(64)
    assert np.array_equal(out[:64], inp[3 * l] + inp[3 * l + 2])
    assert np.array_equal(out[64:], inp[l] & 0xFFFF)


def test_scratch_is_private_per_lane():
    body = """
s_load_dwordx2 s[6:7], s[0:1], 0x8
v_lshlrev_b32_e32 v1, 2, v0
v_add_u32_e32 v2, 100, v0
scratch_store_dword off, v2, off offset:8
v_mov_b32_e32 v3, 4
scratch_store_dword v3, v0, off offset:8          ; bytes 12..15 of each lane
scratch_load_dword v4, off, off offset:8
scratch_load_dword v5, off, off offset:12
s_waitcnt vmcnt(0) lgkmcnt(0)
v_add_u32_e32 v6, v4, v5
global_store_dword v1, v6, s[6:7]
s_endpgm
"""
    text = kernel(body).replace(".amdhsa_accum_offset", ".amdhsa_private_segment_fixed_size 16\n\t\t.amdhsa_accum_offset")
    prog = gfx950emu.load(text)
    out = np.zeros(64, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(1, np.uint32), out], hazards="strict")
    assert np.array_equal(out, 100 + 2 * np.arange(64))
    assert res.hazards == []
    bad = gfx950emu.load(text.replace("offset:12\n", "offset:16\n"))
    with pytest.raises(gfx950emu.ExecError, match="outside the kernel's 16-byte private segment"):
        gfx950emu.launch(bad, 1, 64, [np.zeros(1, np.uint32), out])


def test_buffer_atomics_with_and_without_return():
    inp = np.arange(64, dtype=np.uint32)
    body = RSRC + """
s_mov_b32 s8, s6
s_and_b32 s9, s7, 0xffff
s_movk_i32 s10, 0x100
v_lshlrev_b32_e32 v1, 2, v0
v_and_b32_e32 v2, 4, v1                      ; even lanes -> dword 0, odd -> dword 1
v_mov_b32_e32 v3, 1
s_setprio 3
buffer_atomic_add v3, v2, s[8:11], 0 offen
v_mov_b32_e32 v4, 0x3f80
buffer_atomic_pk_add_bf16 v4, v2, s[8:11], 0 offen offset:8
v_mov_b32_e32 v5, 2
buffer_atomic_add v5, v2, s[8:11], 0 offen offset:16 sc0
s_setprio 0
s_waitcnt 0
buffer_store_dword v5, v1, s[8:11], 0 offen offset:32
s_endpgm
"""
    out = launch(body, inp, nout=64)
    assert out[0] == 32 and out[1] == 32
    assert out[2] == out[3] == 0x4200          # 32 x bf16 1.0 = 32.0 in the low half
    assert out[4] == out[5] == 64
    assert np.array_equal(out[8:40], 2 * (np.arange(64) // 2)[:32])   # pre-op values in lane order
