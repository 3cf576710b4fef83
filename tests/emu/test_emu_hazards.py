"""s_waitcnt hazard checker: a kernel that needs every one of its waits is clean
when intact, and each deleted (or loosened) wait is reported at the early read."""
import re

import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel

# 4 waves.  Every s_waitcnt (tagged W1..W8) and the barriers (B1, B2) guard a later use.
BODY = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
s_waitcnt lgkmcnt(0)                ; W1: s[4:7] used below
v_lshlrev_b32_e32 v1, 2, v0
global_load_dword v2, v1, s[4:5]
global_load_dword v3, v1, s[4:5] offset:1024
s_waitcnt vmcnt(1)                  ; W2: v2 arrived (v3 may still be in flight)
v_add_u32_e32 v4, 1, v2
s_waitcnt vmcnt(0)                  ; W3: v3 arrived
v_add_u32_e32 v5, v3, v4
ds_write_b32 v1, v5
s_waitcnt lgkmcnt(0)                ; W4: the LDS write is done before the barrier
s_barrier                           ; B1
v_add_u32_e32 v6, 0x100, v1
v_and_b32_e32 v6, 0x3ff, v6         ; next wave's slot
ds_read_b32 v7, v6
s_waitcnt lgkmcnt(0)                ; W5: v7 arrived
global_store_dword v1, v7, s[6:7]
v_readfirstlane_b32 s12, v0
s_lshl_b32 s12, s12, 2
s_add_u32 m0, s12, 0x400            ; this wave's 256-byte DMA slot at 1024 + 256*wave
s_mov_b32 s8, s4
s_and_b32 s9, s5, 0xffff
s_movk_i32 s10, 0x800
s_mov_b32 s11, 0x27000
v_and_b32_e32 v8, 0xff, v1
buffer_load_dword v8, s[8:11], 0 offen lds
s_waitcnt vmcnt(0)                  ; W6: store + LDS DMA done before the barrier
s_barrier                           ; B2
v_add_u32_e32 v9, 0x500, v1         ; = 1024 + 256 + 4*tid: the next wave's DMA slot
v_and_b32_e32 v9, 0x3ff, v9
v_add_u32_e32 v9, 0x400, v9
ds_read_b32 v10, v9
s_waitcnt lgkmcnt(0)                ; W7: v10 arrived
global_store_dword v1, v10, s[6:7] offset:1024
s_endpgm
"""


def run(body, hazards="report"):
    prog = gfx950emu.load(kernel(body, lds=2048))
    inp = np.arange(512, dtype=np.uint32) * 3 + 1
    out = np.zeros(512, np.uint32)
    res = gfx950emu.launch(prog, 1, 256, [inp, out], hazards=hazards)
    return res, out, inp


def expected(inp):
    tid = np.arange(256)
    v5 = inp[tid] + 1 + inp[tid + 256]
    first = v5[(tid + 64) % 256]
    dma = inp[:64]                                  # each wave DMAs dwords 0..63 of 'in'
    return np.concatenate([first, dma[(tid % 64)]])


def _lines_with(tag):
    return [i for i, ln in enumerate(BODY.splitlines()) if f"; {tag}" in ln]


def test_intact_kernel_is_clean_and_correct():
    res, out, inp = run(BODY, hazards="strict")
    assert res.hazards == []
    assert np.array_equal(out, expected(inp))


def _without(tag):
    lines = BODY.splitlines()
    (i,) = _lines_with(tag)
    return "\n".join(lines[:i] + lines[i + 1:])


def _loosen(tag, new):
    lines = BODY.splitlines()
    (i,) = _lines_with(tag)
    lines[i] = new
    return "\n".join(lines)


@pytest.mark.parametrize("tag,kinds", [
    ("W1", {"read_pending"}),
    ("W2", {"read_pending"}),
    ("W3", {"read_pending"}),
    ("W4", {"lds_cross_wave"}),
    ("W5", {"read_pending"}),
    ("W6", {"lds_read_pending", "lds_cross_wave"}),
    ("W7", {"read_pending"}),
])
def test_every_deleted_waitcnt_is_reported(tag, kinds):
    res, _, _ = run(_without(tag))
    assert res.hazards, f"deleting {tag} went unnoticed"
    assert {h.kind for h in res.hazards} <= kinds | {"read_pending", "overwrite_pending"}
    assert {h.kind for h in res.hazards} & kinds
    for h in res.hazards:
        assert h.line > 0 and 0 <= h.wave < 4 and h.text


@pytest.mark.parametrize("tag,new,kind", [
    ("W2", "s_waitcnt vmcnt(2)", "read_pending"),       # leaves v2's load in flight
    ("W3", "s_waitcnt vmcnt(1)", "read_pending"),
    ("W6", "s_waitcnt vmcnt(1)", "lds_cross_wave"),     # stores count too: vmcnt(1) only retires the store
])
def test_loosened_counts_are_reported(tag, new, kind):
    res, _, _ = run(_loosen(tag, new))
    assert kind in {h.kind for h in res.hazards}


@pytest.mark.parametrize("tag", ["B1", "B2"])
def test_deleted_barrier_is_a_cross_wave_race(tag):
    res, _, _ = run(_without(tag))
    assert "lds_cross_wave" in {h.kind for h in res.hazards}


def test_report_names_line_wave_lanes_and_register():
    res, _, _ = run(_without("W2"))
    h = next(h for h in res.hazards if h.kind == "read_pending")
    src = kernel(_without("W2"), lds=2048).splitlines()
    assert src[h.line - 1].strip().startswith("v_add_u32_e32 v4, 1, v2")
    assert src[h.source_line - 1].strip().startswith("global_load_dword v2")
    assert h.register == "v2" and h.lanes == tuple(range(64))


def test_strict_mode_raises_on_the_first_report():
    with pytest.raises(gfx950emu.HazardError, match="v2"):
        run(_without("W2"), hazards="strict")


def test_scalar_loads_are_only_covered_by_lgkmcnt_zero():
    body = """
s_load_dword s4, s[0:1], 0x0
s_load_dword s5, s[0:1], 0x4
s_waitcnt lgkmcnt(1)
s_add_u32 s6, s4, 1
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)], hazards="report")
    assert [(h.kind, h.register) for h in res.hazards] == [("read_pending", "s4")]


def test_ds_ops_retire_in_order():
    body = """
v_lshlrev_b32_e32 v1, 2, v0
ds_read_b32 v2, v1
ds_read_b32 v3, v1 offset:256
s_waitcnt lgkmcnt(1)
v_mov_b32_e32 v4, v2
v_mov_b32_e32 v5, v3
s_endpgm
"""
    prog = gfx950emu.load(kernel(body, lds=512))
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)], hazards="report")
    assert [(h.kind, h.register) for h in res.hazards] == [("read_pending", "v3")]


def test_overwriting_a_pending_load_destination_is_reported():
    body = """
s_load_dwordx2 s[4:5], s[0:1], 0x0
v_mov_b32_e32 v1, 0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
v_mov_b32_e32 v2, 5
s_waitcnt vmcnt(0)
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)], hazards="report")
    assert [(h.kind, h.register) for h in res.hazards] == [("overwrite_pending", "v2")]


def test_exec_masked_lanes_do_not_count():
    body = """
s_load_dwordx2 s[4:5], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
s_mov_b64 exec, 0xff
global_load_dword v2, v1, s[4:5]
s_mov_b64 exec, 0xff00
v_mov_b32_e32 v3, v2
s_mov_b64 exec, -1
s_waitcnt vmcnt(0)
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(64, np.uint32), np.zeros(4, np.uint32)], hazards="report")
    assert res.hazards == []


def test_every_tagged_wait_exists():
    assert all(len(_lines_with(t)) == 1 for t in ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "B1", "B2"))
    assert len(re.findall(r"s_waitcnt", BODY)) == 7
