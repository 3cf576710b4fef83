"""Loading, launch state, argument mapping, errors, statistics and multi-process runs."""
from pathlib import Path

import numpy as np
import pytest
import torch

import gfx950emu
from emu_asm import kernel
from gfx950emu.parser import parse_module, parse_yaml

DATA = Path(__file__).parent / "data"


def test_vadd_kernel_runs_over_a_grid_with_a_tail():
    prog = gfx950emu.load((DATA / "vadd.s").read_text())
    a = np.arange(300, dtype=np.uint32)
    b = np.arange(300, dtype=np.uint32) * 5
    out = np.zeros(300, np.uint32)
    res = gfx950emu.launch(prog, grid=(5, 1, 1), block=(64, 1, 1), args=[a, b, out, 250], hazards="strict")
    assert np.array_equal(out[:250], a[:250] + 2 * b[:250]) and not out[250:].any()
    assert res.hazards == [] and res.seconds > 0
    assert len(res.stats.per_wave) == 5
    assert res.stats.by_opcode["global_store_dword"] == 4       # the last workgroup skips its store
    assert res.stats.by_class["vmem"] == 4 * 3 + 0
    assert res.stats.per_wave[4]["by_class"].get("vmem", 0) == 0


def test_torch_tensors_are_written_back():
    prog = gfx950emu.load((DATA / "vadd.s").read_text())
    a = torch.arange(64, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int32)
    gfx950emu.launch(prog, 1, 64, [a, a, out, 64])
    assert torch.equal(out, 3 * a)


def test_launch_state_workgroup_ids_and_packed_workitem_ids():
    # grid (2,3,2) of (4,4,4) blocks: each workgroup writes its 64 packed v0 values
    # and its three workgroup-id SGPRs (s2, s3, s4 after the kernarg pointer).
    body = """
s_load_dwordx2 s[6:7], s[0:1], 0x8
s_mul_i32 s8, s4, 3
s_add_u32 s8, s8, s3
s_mul_i32 s8, s8, 2
s_add_u32 s8, s8, s2                 ; linear workgroup index
v_mbcnt_lo_u32_b32 v1, -1, 0
v_mbcnt_hi_u32_b32 v1, -1, v1
v_lshl_add_u32 v2, s8, 6, v1
v_lshlrev_b32_e32 v2, 2, v2
v_mov_b32_e32 v3, s2
v_mov_b32_e32 v4, s3
v_mov_b32_e32 v5, s4
s_mul_i32 s9, s8, 12
v_mov_b32_e32 v6, s9
s_waitcnt lgkmcnt(0)
global_store_dword v2, v0, s[6:7]
global_store_dword v6, v3, s[6:7] offset:3072
global_store_dword v6, v4, s[6:7] offset:3076
global_store_dword v6, v5, s[6:7] offset:3080
s_endpgm
"""
    text = kernel(body, workitem_id=2).replace(
        ".amdhsa_system_sgpr_workgroup_id_x 1",
        ".amdhsa_system_sgpr_workgroup_id_x 1\n\t\t.amdhsa_system_sgpr_workgroup_id_y 1\n"
        "\t\t.amdhsa_system_sgpr_workgroup_id_z 1")
    prog = gfx950emu.load(text)
    out = np.zeros(768 + 36, np.uint32)
    gfx950emu.launch(prog, (2, 3, 2), (4, 4, 4), [np.zeros(1, np.uint32), out])
    t = np.arange(64)
    packed = (t % 4) | (((t // 4) % 4) << 10) | ((t // 16) << 20)
    assert np.array_equal(out[:768].reshape(12, 64), np.tile(packed, (12, 1)))
    ids = out[768:].reshape(12, 3)
    assert [tuple(r) for r in ids] == [(x, y, z) for z in range(2) for y in range(3) for x in range(2)]


def test_argument_count_and_kind_errors_are_plain_sentences():
    prog = gfx950emu.load((DATA / "vadd.s").read_text())
    with pytest.raises(ValueError, match=r"takes 4 arguments \(a, b, out, n\), got 3"):
        gfx950emu.launch(prog, 1, 64, [np.zeros(4), np.zeros(4), np.zeros(4)])
    with pytest.raises(ValueError, match=r"argument 3 \(n\).*int or float"):
        gfx950emu.launch(prog, 1, 64, [np.zeros(4), np.zeros(4), np.zeros(4), "x"])
    with pytest.raises(ValueError, match="argument 0 .a. is a buffer"):
        gfx950emu.launch(prog, 1, 64, [3.5, np.zeros(4), np.zeros(4), 1])
    with pytest.raises(ValueError, match="hazards must be"):
        gfx950emu.launch(prog, 1, 64, [np.zeros(4)] * 3 + [1], hazards="loud")
    with pytest.raises(ValueError, match="grid must be"):
        gfx950emu.launch(prog, (0, 1), 64, [np.zeros(4)] * 3 + [1])
    with pytest.raises(ValueError, match="not C-contiguous"):
        gfx950emu.launch(prog, 1, 64, [np.zeros((4, 4))[:, 1], np.zeros(4), np.zeros(4), 1])


def test_unknown_opcode_and_modifier_are_errors_naming_the_line():
    with pytest.raises(gfx950emu.DecodeError, match=r"line 7: unknown or unsupported opcode 'v_frobnicate_b32'"):
        gfx950emu.load(kernel("v_frobnicate_b32 v1, v2\ns_endpgm"))
    with pytest.raises(gfx950emu.DecodeError, match=r"line 7: unsupported modifier 'sext_hi'"):
        gfx950emu.load(kernel("v_add_u32_e64 v1, v2, v3 sext_hi:1\ns_endpgm"))
    with pytest.raises(gfx950emu.DecodeError, match="unknown branch target"):
        gfx950emu.load(kernel("s_branch .LBB9_9\ns_endpgm"))
    with pytest.raises(ValueError, match="no kernel found"):
        gfx950emu.load("\t.text\n")


def test_running_off_the_end_is_an_error():
    prog = gfx950emu.load(kernel("s_nop 0"))
    with pytest.raises(gfx950emu.ExecError, match="without s_endpgm"):
        gfx950emu.launch(prog, 1, 64, [np.zeros(1), np.zeros(1)])


ATOMIC_BODY = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
global_load_dword v2, v1, s[4:5]
v_mov_b32_e32 v3, 0
v_lshl_add_u32 v4, s2, 8, v1
s_waitcnt vmcnt(0)
global_atomic_add_f32 v3, v2, s[6:7]
global_store_dword v4, v2, s[6:7] offset:16
s_endpgm
"""


def test_processes_give_identical_bytes_including_float_atomics():
    prog = gfx950emu.load(kernel(ATOMIC_BODY))
    rng = np.random.default_rng(0)
    inp = (rng.standard_normal(64) * 1e3).astype(np.float32)
    outs = []
    for procs in (1, 2, 3):
        out = np.zeros(4 + 64 * 7, np.float32)
        res = gfx950emu.launch(prog, 7, 64, [inp, out], processes=procs)
        outs.append(out.view(np.uint32).copy())
        assert res.stats.instructions == 7 * 10
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    # order-dependent float sum: the same as adding lane by lane, workgroup by workgroup
    acc = np.float32(0)
    for _ in range(7):
        for x in inp:
            acc = np.float32(acc + x)
    assert outs[0][0] == np.float32(acc).view(np.uint32)


def test_returning_atomics_refuse_multiple_processes():
    body = ATOMIC_BODY.replace("global_atomic_add_f32 v3, v2, s[6:7]", "global_atomic_add_f32 v5, v3, v2, s[6:7] sc0")
    prog = gfx950emu.load(kernel(body))
    with pytest.raises(ValueError, match="return values.*processes=1"):
        gfx950emu.launch(prog, 2, 64, [np.zeros(64, np.float32), np.zeros(600, np.float32)], processes=2)


def test_metadata_yaml_subset():
    y = parse_yaml("""---
amdhsa.kernels:
  - .args:
      - .name: a
        .offset: 0
      - .offset: 8
        .size: 4
    .name: k
    .reqd_workgroup_size:
      - 256
      - 1
      - 1
amdhsa.version:
  - 1
  - 2
...""")
    k = y["amdhsa.kernels"][0]
    assert k[".args"] == [{".name": "a", ".offset": 0}, {".offset": 8, ".size": 4}]
    assert k[".reqd_workgroup_size"] == [256, 1, 1] and y["amdhsa.version"] == [1, 2]


def test_descriptor_and_labels_are_parsed():
    ks = parse_module((DATA / "vadd.s").read_text())
    k = ks["vadd"]
    assert k.descriptor["accum_offset"] == 8 and k.descriptor["user_sgpr_count"] == 2
    assert k.labels == {".LBB0_2": 15}
    assert k.instructions[0].opcode == "s_load_dwordx4" and k.instructions[0].line == 9
