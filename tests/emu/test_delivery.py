"""Load delivery and wave order as options of gfx950emu.launch: a kernel that waits correctly gives
the same bytes under every delivery and wave order; a kernel that misses a wait gives wrong numbers
under ``delivery="late"`` on its own, without the hazard checker."""
import numpy as np
import pytest

import gfx950emu
from emu_asm import kernel
from test_emu_hazards import BODY, _loosen, _without, expected

MODES = [("issue", "forward"), ("late", "forward"), ("late", "reverse"), ("late", "random"),
         ("random", "forward"), ("random", "random"), ("issue", "random"), ("issue", "reverse")]


def run(body, delivery, wave_order="forward", seed=0, hazards="off"):
    prog = gfx950emu.load(kernel(body, lds=2048))
    inp = np.arange(512, dtype=np.uint32) * 3 + 1
    out = np.zeros(512, np.uint32)
    res = gfx950emu.launch(prog, 1, 256, [inp, out], hazards=hazards, delivery=delivery,
                           wave_order=wave_order, seed=seed)
    return res, out, inp


@pytest.mark.parametrize("delivery, wave_order", MODES)
@pytest.mark.parametrize("seed", [0, 7])
def test_a_correctly_waiting_kernel_is_exact_in_every_mode(delivery, wave_order, seed):
    res, out, inp = run(BODY, delivery, wave_order, seed, hazards="report")
    assert res.hazards == []
    assert np.array_equal(out, expected(inp))


# every wait of the hazard kernel guards data: without it, late delivery alone gives wrong numbers
@pytest.mark.parametrize("tag", ["W1", "W2", "W3", "W4", "W5", "W6", "W7"])
def test_a_missing_wait_gives_wrong_results_under_late_delivery(tag):
    body = _without(tag)
    _, out_issue, inp = run(body, "issue")
    assert np.array_equal(out_issue, expected(inp)), "issue delivery hides the missing wait"
    if tag == "W1":         # the buffer pointers never arrived: the address is garbage -> a fault
        with pytest.raises(gfx950emu.MemoryFault, match="unmapped address"):
            run(body, "late")
        return
    _, out_late, _ = run(body, "late")
    assert not np.array_equal(out_late, expected(inp))


def test_loosened_vmcnt_gives_wrong_results_under_late_delivery():
    body = _loosen("W2", "s_waitcnt vmcnt(2)")
    _, out, inp = run(body, "late")
    assert not np.array_equal(out, expected(inp))


def test_random_delivery_is_seeded_and_legal():
    body = _without("W2")      # v4 = v2 + 1 read before v2's load may have landed
    outs = [run(body, "random", "forward", seed)[1] for seed in range(6)]
    assert np.array_equal(outs[0], run(body, "random", "forward", 0)[1])        # same seed, same bytes
    inp = np.arange(512, dtype=np.uint32) * 3 + 1
    assert any(not np.array_equal(o, expected(inp)) for o in outs)      # some seed lands v2 late


def test_missing_barrier_is_wrong_under_reverse_wave_order():
    body = _without("B1")      # waves read the next wave's LDS slot without a barrier
    _, out_fwd, inp = run(body, "issue", "reverse")
    assert not np.array_equal(out_fwd, expected(inp))


def test_delivery_applies_to_scalar_loads_in_any_order():
    body = """
s_load_dword s4, s[0:1], 0x0
s_load_dword s5, s[0:1], 0x4
s_waitcnt lgkmcnt(1)
s_load_dwordx2 s[6:7], s[0:1], 0x8
s_waitcnt lgkmcnt(0)
v_mov_b32_e32 v1, s4
v_mov_b32_e32 v2, s5
v_mov_b32_e32 v3, 0
global_store_dword v3, v1, s[6:7]
global_store_dword v3, v2, s[6:7] offset:4
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    outs = []
    for delivery in ("issue", "late", "random"):
        out = np.zeros(2, np.uint32)      # gets the kernarg's first 8 bytes: the address of argument 0
        res = gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), out], hazards="report", delivery=delivery)
        assert res.hazards == []
        outs.append(out)
    assert outs[0].any() and all(np.array_equal(o, outs[0]) for o in outs)


def test_ds_ops_complete_in_order_under_late_delivery():
    # a DS write then a DS read of the same bytes in one wave needs no wait between them
    body = """
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
v_add_u32_e32 v2, 5, v0
ds_write_b32 v1, v2
ds_read_b32 v3, v1
v_add_u32_e32 v2, 9, v0
ds_write_b32 v1, v2
s_waitcnt lgkmcnt(0)
global_store_dword v1, v3, s[6:7]
s_endpgm
"""
    prog = gfx950emu.load(kernel(body, lds=256))
    out = np.zeros(64, np.uint32)
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(64, np.uint32), out], hazards="report", delivery="late")
    assert res.hazards == []
    assert np.array_equal(out, np.arange(64) + 5)


@pytest.mark.parametrize("kw, msg", [({"delivery": "early"}, "delivery must be one of issue, late, random"),
                                     ({"wave_order": "sideways"}, "wave_order must be one of"),
                                     ({"delivery": "random", "seed": "x"}, "seed must be an integer")])
def test_bad_options_are_one_clear_error(kw, msg):
    prog = gfx950emu.load(kernel("s_endpgm"))
    with pytest.raises(ValueError, match=msg):
        gfx950emu.launch(prog, 1, 64, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)], **kw)


def test_late_and_random_delivery_in_worker_processes_match_one_process():
    prog = gfx950emu.load(kernel(BODY, lds=2048))
    inp = np.arange(512, dtype=np.uint32) * 3 + 1
    outs = []
    for procs in (1, 2):
        out = np.zeros(512, np.uint32)
        res = gfx950emu.launch(prog, 2, 256, [inp, out], hazards="report", delivery="random", wave_order="random",
                               seed=3, processes=procs)
        assert res.hazards == []
        outs.append(out)
    assert np.array_equal(outs[0], expected(inp)) and np.array_equal(outs[0], outs[1])
