"""An LDS access outside the kernel's allocation is reported (kind ``lds_outside``) whatever the
hazard mode: hardware drops such writes and reads 0, so a kernel launched without its dynamic LDS
size would otherwise return zeros with no sign of why (issue #12)."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel

BODY = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
v_add_u32_e32 v2, 1, v0
ds_write_b32 v1, v2
s_waitcnt lgkmcnt(0)
ds_read_b32 v3, v1
s_waitcnt lgkmcnt(0)
global_store_dword v1, v3, s[6:7]
s_endpgm
"""


def run(lds, lds_bytes=0, hazards="off", body=BODY):
    prog = gfx950emu.load(kernel(body, lds=lds))
    out = np.zeros(64, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(64, np.uint32), out], hazards=hazards, lds_bytes=lds_bytes)
    return res, out


@pytest.mark.parametrize("hazards", ["off", "report"])
def test_a_kernel_without_its_dynamic_lds_is_reported(hazards):
    res, out = run(0, hazards=hazards)         # 256 bytes needed, none allocated
    assert not out.any()                       # what hardware does: writes dropped, reads 0
    kinds = [(h.kind, h.line) for h in res.hazards]
    assert len(kinds) == 2 and {k for k, _ in kinds} == {"lds_outside"}
    assert "lds_bytes" in res.hazards[0].text and res.hazards[0].bytes == (0, 255)


def test_with_its_dynamic_lds_size_it_is_clean():
    res, out = run(0, lds_bytes=256, hazards="report")
    assert res.hazards == []
    assert np.array_equal(out, np.arange(64) + 1)


def test_a_partly_outside_access_names_the_bytes():
    res, out = run(128)                         # lanes 32..63 fall outside
    assert np.array_equal(out, np.where(np.arange(64) < 32, np.arange(64) + 1, 0))
    assert {h.bytes for h in res.hazards} == {(128, 255)}


def test_strict_mode_raises():
    with pytest.raises(gfx950emu.HazardError, match="outside the kernel's 0-byte LDS allocation"):
        run(0, hazards="strict")


def test_lds_dma_outside_the_allocation_is_reported():
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
s_waitcnt lgkmcnt(0)
s_mov_b32 s8, s4
s_and_b32 s9, s5, 0xffff
s_movk_i32 s10, 0x100
s_mov_b32 s11, 0x27000
s_movk_i32 m0, 0x80
v_lshlrev_b32_e32 v1, 2, v0
buffer_load_dword v1, s[8:11], 0 offen lds
s_waitcnt vmcnt(0)
s_endpgm
"""
    res, _ = run(256, body=body)
    assert [(h.kind, h.bytes) for h in res.hazards] == [("lds_outside", (256, 383))]
