"""MUBUF range checking (issue #12, fix 1): soffset counts toward the range; only idxen with a
non-zero stride uses the index check (index < num_records, whatever the offset); ADD_TID buffers
are not range-checked; voffset + inst_offset wraps at 32 bits.  Out-of-range lanes are counted in
``res.stats.out_of_range`` (opcode -> {line: lanes})."""
import numpy as np

import gfx950emu
from emu_asm import kernel

RSRC = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
s_waitcnt lgkmcnt(0)
s_mov_b32 s8, s4
s_and_b32 s9, s5, 0xffff
s_mov_b32 s11, 0x27000
"""
STORE = """
s_waitcnt vmcnt(0)
v_lshlrev_b32_e32 v9, 2, v0
global_store_dword v9, v2, s[6:7]
s_endpgm
"""


def run(body, inp):
    prog = gfx950emu.load(kernel(RSRC + body + STORE))
    out = np.zeros(64, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [inp, out], hazards="strict")
    return out, res, prog


def _line_of(prog, opcode):
    return next(d.line for d in prog.decoded if d.opcode == opcode)


def test_soffset_counts_toward_the_range():
    inp = np.arange(128, dtype=np.uint32) + 1000
    out, res, prog = run("""
s_movk_i32 s10, 0x100          ; num_records = 256 bytes
v_lshlrev_b32_e32 v1, 2, v0
s_mov_b32 s12, 8               ; soffset
buffer_load_dword v2, v1, s[8:11], s12 offen offset:4
""", inp)
    lane = np.arange(64)
    off = 4 * lane + 4 + 8
    want = np.where(off + 4 <= 256, inp[np.minimum(off // 4, 127)], 0)
    assert np.array_equal(out, want)
    # lanes 61..63 are out of range, counted per opcode and line
    assert res.stats.out_of_range == {"buffer_load_dword": {_line_of(prog, "buffer_load_dword"): 3}}


def test_structured_buffer_checks_only_the_index():
    inp = np.arange(256, dtype=np.uint32) + 7
    out, res, _ = run("""
s_or_b32 s9, s9, 0x100000       ; stride 16 bytes
s_mov_b32 s10, 10               ; num_records = 10 records
v_mov_b32_e32 v1, v0            ; index = lane
buffer_load_dword v2, v1, s[8:11], 0 idxen offset:20
""", inp)
    lane = np.arange(64)
    # offset 20 >= stride 16 is still in range: only index < num_records is checked
    want = np.where(lane < 10, inp[np.minimum((16 * lane + 20) // 4, 255)], 0)
    assert np.array_equal(out, want)
    assert sum(res.stats.out_of_range["buffer_load_dword"].values()) == 54


def test_raw_buffer_with_a_stride_but_no_idxen_checks_bytes():
    inp = np.arange(64, dtype=np.uint32) + 3
    out, _, _ = run("""
s_or_b32 s9, s9, 0x100000       ; stride 16, but no idxen: the byte offset is checked
s_movk_i32 s10, 0x40            ; 64 bytes
v_lshlrev_b32_e32 v1, 2, v0
buffer_load_dword v2, v1, s[8:11], 0 offen
""", inp)
    lane = np.arange(64)
    assert np.array_equal(out, np.where(lane < 16, inp, 0))


def test_add_tid_buffers_are_not_range_checked():
    inp = np.arange(64, dtype=np.uint32) + 11
    out, res, _ = run("""
s_or_b32 s9, s9, 0x40000        ; stride 4
s_mov_b32 s10, 1                ; num_records = 1: would cut every lane but 0
s_or_b32 s11, s11, 0x800000     ; ADD_TID_ENABLE: index = lane id
buffer_load_dword v2, off, s[8:11], 0
""", inp)
    assert np.array_equal(out, inp)
    assert res.stats.out_of_range == {}


def test_voffset_plus_offset_wraps_at_32_bits():
    inp = np.arange(64, dtype=np.uint32) + 100
    out, res, _ = run("""
s_movk_i32 s10, 0x100
v_mov_b32_e32 v1, -4            ; 0xfffffffc + offset 8 = 4 (mod 2^32)
buffer_load_dword v2, v1, s[8:11], 0 offen offset:8
""", inp)
    assert np.array_equal(out, np.full(64, inp[1]))
    assert res.stats.out_of_range == {}
