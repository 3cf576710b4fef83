"""Hazard checker additions (issue #12): gfx950 wait-state (s_nop) hazards after LLVM's
GCNHazardRecognizer, LDS-DMA write-after-write, a pending DS read overwritten across a barrier, and
FLAT ops counted on both vmcnt and lgkmcnt.  Each case: the hazard is reported, and the padded /
waited form is clean."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel

HEAD = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
s_mov_b32 s8, s6
s_and_b32 s9, s7, 0xffff
s_movk_i32 s10, 0x1000
s_mov_b32 s11, 0x27000
"""


def reports(body, lds=1024, block=64, wave_order="forward", delivery="issue"):
    prog = gfx950emu.load(kernel(HEAD + body + "\ns_endpgm", lds=lds))
    inp = np.arange(1024, dtype=np.uint32)
    out = np.zeros(1024, np.uint32)
    res = gfx950emu.launch(prog, 1, block, [inp, out], hazards="report", wave_order=wave_order, delivery=delivery)
    return res.hazards, out


def kinds(hs):
    return [(h.kind, h.text.split(" ")[0]) for h in hs]


# ---- checkVALUHazardsHelper / createsVALUHazard: VALU overwrites >64-bit store data
@pytest.mark.parametrize("pad, soffset, flagged", [("", "0", True), ("s_nop 0", "0", True), ("s_nop 1", "0", False),
                                                   ("", "s12", False)])
def test_valu_overwriting_wide_store_data(pad, soffset, flagged):
    body = f"""
s_mov_b32 s12, 0
v_lshlrev_b32_e32 v6, 4, v0
buffer_store_dwordx4 v[2:5], v6, s[8:11], {soffset} offen
{pad}
v_mov_b32_e32 v3, 7
"""
    hs, _ = reports(body)
    assert kinds(hs) == ([("wait_states", "v_mov_b32_e32")] if flagged else [])
    if flagged:
        assert "store data v3" in hs[0].text and "needs 2" in hs[0].text


def test_overwriting_the_store_address_is_not_this_hazard():
    hs, _ = reports("""
v_lshlrev_b32_e32 v6, 4, v0
buffer_store_dwordx4 v[2:5], v6, s[8:11], 0 offen
v_mov_b32_e32 v6, 7
""")
    assert hs == []


# ---- checkReadM0Hazards: SALU write of M0 -> LDS DMA
@pytest.mark.parametrize("pad, flagged", [("", True), ("s_nop 0", False), ("v_mov_b32_e32 v9, 0", False)])
def test_m0_write_then_lds_dma(pad, flagged):
    hs, _ = reports(f"""
s_movk_i32 m0, 0x100
{pad}
buffer_load_dword v1, s[8:11], 0 offen lds
s_waitcnt vmcnt(0)
""")
    assert kinds(hs) == ([("wait_states", "buffer_load_dword")] if flagged else [])


# ---- checkPermlaneHazards: VALU write -> permlane read (2), v_cmpx -> permlane (4)
@pytest.mark.parametrize("pad, flagged", [("", True), ("s_nop 0", True), ("s_nop 1", False)])
def test_valu_write_then_permlane_swap(pad, flagged):
    hs, _ = reports(f"""
v_mov_b32_e32 v2, 1
v_mov_b32_e32 v3, 2
{pad}
v_permlane32_swap_b32_e32 v2, v3
""")
    assert kinds(hs) == ([("wait_states", "v_permlane32_swap_b32_e32")] if flagged else [])


@pytest.mark.parametrize("pad, flagged", [("s_nop 2", True), ("s_nop 3", False)])
def test_vcmpx_then_permlane_swap(pad, flagged):
    hs, _ = reports(f"""
v_mov_b32_e32 v2, 1
v_mov_b32_e32 v3, 2
s_nop 4
v_cmpx_le_u32_e32 vcc, 0, v0
{pad}
v_permlane16_swap_b32_e32 v2, v3
""")
    assert kinds(hs) == ([("wait_states", "v_permlane16_swap_b32_e32")] if flagged else [])
    if flagged:
        assert "needs 4" in hs[0].text


# ---- checkMAIVALUHazards: XDL MFMA result written / read by a VALU (16x16 bf16: 8 passes -> 12)
@pytest.mark.parametrize("consumer", ["v_mov_b32_e32 v11, 0", "v_add_u32_e32 v20, v11, v0",
                                      "global_store_dword v1, v11, s[6:7]"])
@pytest.mark.parametrize("pad, flagged", [("s_nop 7", True), ("s_nop 7\ns_nop 3", False)])
def test_mfma_result_then_valu_or_memory(consumer, pad, flagged):
    hs, _ = reports(f"""
v_mfma_f32_16x16x32_bf16 v[10:13], v[2:5], v[6:9], 0
{pad}
{consumer}
""")
    assert [h.kind for h in hs] == (["wait_states"] if flagged else [])
    if flagged:
        assert "v_mfma_f32_16x16x32_bf16" in hs[0].text and "needs 12" in hs[0].text


# ---- checkVALUHazards + hasCvtScaleForwardingHazard: cvt_scale writing a selected byte/word
@pytest.mark.parametrize("op_sel, pad, flagged", [("op_sel:[0,0,0,1]", "", True), ("op_sel:[0,0,1,0]", "", True),
                                                  ("op_sel:[0,0,0,1]", "s_nop 0", False), ("", "", False)])
def test_cvt_scale_fp4_byte_select_forwarding(op_sel, pad, flagged):
    hs, _ = reports(f"""
v_mov_b32_e32 v9, 0x3f800000
v_cvt_scalef32_pk_fp4_f32 v29, v4, v2, v9 {op_sel}
{pad}
v_lshrrev_b32_e32 v0, 16, v29
""")
    assert kinds(hs) == ([("wait_states", "v_lshrrev_b32_e32")] if flagged else [])


# ---- LDS DMA write-after-write: a DS write to bytes a DMA still owns
@pytest.mark.parametrize("wait, flagged", [("", True), ("s_waitcnt vmcnt(0)", False)])
def test_ds_write_to_bytes_an_lds_dma_still_owns(wait, flagged):
    hs, _ = reports(f"""
s_movk_i32 m0, 0x0
s_nop 0
buffer_load_dword v1, s[8:11], 0 offen lds
{wait}
ds_write_b32 v1, v0
s_waitcnt vmcnt(0) lgkmcnt(0)
""")
    assert [h.kind for h in hs] == (["lds_dma_waw"] if flagged else [])


# ---- a DS read still pending at a barrier, overwritten by another wave after it
READ_ACROSS_BARRIER = """
v_lshrrev_b32_e32 v2, 6, v0           ; wave id
v_cmp_eq_u32_e32 vcc, 0, v2
v_and_b32_e32 v3, 63, v0
v_lshlrev_b32_e32 v3, 2, v3           ; lane * 4: both waves use bytes 0..255
v_add_u32_e32 v4, 100, v0
ds_write_b32 v3, v4 offset:512        ; scratch slot, so both waves have DS traffic
s_waitcnt lgkmcnt(0)
s_and_saveexec_b64 s[20:21], vcc      ; wave 0: write the old value, then read it
ds_write_b32 v3, v0
s_waitcnt lgkmcnt(0)
ds_read_b32 v5, v3
{wait0}
s_or_b64 exec, exec, s[20:21]
s_barrier
v_cmp_ne_u32_e32 vcc, 0, v2
s_and_saveexec_b64 s[22:23], vcc      ; wave 1: overwrite after the barrier
v_mov_b32_e32 v6, 999
ds_write_b32 v3, v6
s_waitcnt lgkmcnt(0)
s_or_b64 exec, exec, s[22:23]
s_waitcnt lgkmcnt(0)
global_store_dword v1, v5, s[6:7]
"""


@pytest.mark.parametrize("wait0, flagged", [("", True), ("s_waitcnt lgkmcnt(0)", False)])
@pytest.mark.parametrize("wave_order", ["forward", "reverse"])
def test_ds_read_pending_across_a_barrier_then_overwritten(wait0, flagged, wave_order):
    body = READ_ACROSS_BARRIER.format(wait0=wait0)
    hs, out = reports(body, block=128, wave_order=wave_order, delivery="late")
    kinds_ = {h.kind for h in hs}
    assert ("lds_read_overwritten" in kinds_) == flagged
    if wave_order == "reverse":     # the writer runs first: under late delivery the read samples its bytes
        assert np.array_equal(out[:64], np.full(64, 999) if flagged else np.arange(64))


# ---- FLAT ops count on vmcnt and lgkmcnt
@pytest.mark.parametrize("wait, flagged", [("s_waitcnt vmcnt(0)", True), ("s_waitcnt lgkmcnt(0)", True),
                                           ("s_waitcnt vmcnt(0) lgkmcnt(0)", False)])
def test_flat_loads_need_both_counters(wait, flagged):
    hs, _ = reports(f"""
v_mov_b32_e32 v4, s4
v_mov_b32_e32 v5, s5
v_add_co_u32_e32 v4, vcc, v4, v1
v_addc_co_u32_e32 v5, vcc, 0, v5, vcc
flat_load_dword v2, v[4:5]
{wait}
v_add_u32_e32 v3, 1, v2
""")
    assert [h.kind for h in hs] == (["read_pending"] if flagged else [])
