"""The memory levels of the timing model (gfx950emu.timing.memory, grid.memory_record): fluid queues
at the CU's bandwidth share, miss shares from touched lines, the switches that turn them off."""
import numpy as np
import pytest

import gfx950emu
from gfx950emu.timing import Params, grid, memory, micro


def test_a_fluid_queue_drains_its_last_byte_at_the_rate():
    assert memory.drain_cycles([1000], 128, 10.0) == pytest.approx(100)
    # 1000 B at cycle 128, 500 B at 384: the second burst starts on an empty queue
    assert memory.drain_cycles([0, 1000, 0, 500], 128, 10.0) == pytest.approx(384 + 50)
    # ... and at a lower rate queues behind the first
    assert memory.drain_cycles([0, 1000, 0, 500], 128, 2.0) == pytest.approx(128 + 1500 / 2)
    assert memory.drain_cycles([0, 0], 128, 10.0) == 0


def _rec(write, last_write, sim=20000):
    return {"bin_cycles": 128, "read_bytes": [0] * len(write), "write_bytes": write, "last_read": 0,
            "last_write": last_write, "sim_cycles": sim, "compulsory_bytes": sum(write), "miss_share": {},
            "cus_with_work": 256, "concurrency": 1.0}


def test_a_store_burst_waits_for_the_cus_share_a_trickle_does_not():
    p = Params()
    _, mall = memory.rates(_rec([0], 0), 1.5, p)
    n = 128 * 1024
    burst = [0] * 100 + [n] + [0] * 10                      # all of a C tile's stores in one bin
    cyc = memory.cu_cycles(_rec(burst, 100 * 128), 1.5, p)
    assert cyc == pytest.approx(20000 + n / mall - 128, rel=1e-6)   # from the end of its bin
    per_bin = int(mall * 128 * 0.9)                           # slower than the share: never queues
    trickle = [per_bin] * 100
    assert memory.cu_cycles(_rec(trickle, 99 * 128), 1.5, p) == pytest.approx(20000)
    # a higher clock has fewer bytes per cycle: the same burst costs more cycles
    assert memory.cu_cycles(_rec(burst, 100 * 128), 2.4, p) > cyc


def _broadcast_read(buf_bytes, sample):
    """Every workgroup of a 1024-workgroup grid reads the same 256 bytes (one buffer_load_dword)."""
    prog = gfx950emu.load(micro.kernel_text(["buffer_load_dword v1, v40, s[4:7], 0 offen", "s_waitcnt vmcnt(0)"]))
    buf = np.zeros(buf_bytes, np.uint8)
    return gfx950emu.launch(prog, 1024, 64, [buf], timing=True, timing_sample=sample).timing["kernel"]


def test_miss_share_counts_lines_shared_in_the_sample_and_caps_at_the_buffer():
    # four sampled workgroups read the same line: a quarter of their requests miss
    k = _broadcast_read(1 << 20, 4)
    assert k["memory"]["miss_share"] == {"arg0": pytest.approx(0.25)}
    assert k["memory"]["compulsory_bytes"] == 256 * 1024 // 4
    # one sampled workgroup of a 256-byte buffer: the buffer caps the grid's compulsory bytes
    k = _broadcast_read(256, 1)
    assert k["memory"]["compulsory_bytes"] == 256
    assert k["memory"]["miss_share"]["arg0"] == pytest.approx(1 / 1024, rel=1e-2)   # shown to 5 decimals
    assert k["bytes_hbm"] == 256


def test_the_switches_give_back_the_simple_model():
    k = _broadcast_read(1 << 20, 4)
    p_on = Params()
    off = Params(overrides={"memory.queues": False, "memory.touched_floor": False,
                            "memory.hbm_sustained_fraction": 1.0})
    on_t, off_t = grid.times(k, 1.5, p_on), grid.times(k, 1.5, off)
    assert off_t["queue_us"] == off_t["compute_us"]
    assert off_t["bytes_hbm"] == min(1 << 20, k["bytes_l2"]) and on_t["bytes_hbm"] == k["memory"]["compulsory_bytes"]
    assert on_t["queue_us"] >= on_t["compute_us"]


def test_a_stream_reaches_at_most_the_sustained_hbm_share():
    row = next(r for r in micro.hardware_rows() if r["case"] == "hbm_stream")
    assert row["case"] == "hbm_stream" and row["label"] == "modelled" and row["source"].startswith("[RS-8480]")
    assert row["bound"] == "memory"
    # launch and the per-round overhead keep it below the sustained fraction it is scored against
    assert 0.5 < row["modelled"] < Params().memory_hbm_sustained_fraction == row["hardware"]


def test_dependent_access_chains_stand_beside_the_published_gfx950_latencies():
    """One modelled figure per path (the model has one latency each), beside every level MT4G measured on a
    gfx950 MI350P: the vector chase is the vmcnt round trip the parameters document, the scalar and LDS
    chases their latency plus the wave's issue slots."""
    p = Params()
    rows = micro.chase_rows(p)
    by = {r["case"]: r for r in rows}
    assert [r["hardware"] for r in rows] == [112.0, 256.0, 444.0, 740.0, 48.0, 166.9, 48.0]
    assert all(r["source"].startswith(micro.MT4G_MI350P) and r["label"] == "modelled" for r in rows)
    expected = {c[0]: c[3] for c in micro.cases(p)}["vmcnt_round_trip"]
    assert {r["modelled"] for r in rows if r["case"].startswith("vmem_chase")} == {expected}
    slot = int(p.issue_cycles_per_issue_slot)
    assert by["smem_chase (scalar L1 hit)"]["modelled"] == micro._up(int(p.vmem_smem_latency_cycles), slot) + slot
    assert int(p.lds_latency_cycles) < by["lds_chase (LDS)"]["modelled"] <= int(p.lds_latency_cycles) + 2 * slot
    assert {r["case"] for r in micro.hardware_rows(p)} >= set(by)
