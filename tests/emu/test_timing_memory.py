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


def _replay_rec(read, slack, sim=20000, write=None, wslack=None, written=0):
    n = len(read)
    return {"bin_cycles": 128, "read_bytes": read, "write_bytes": write or [0] * n, "read_slack": slack,
            "write_slack": wslack or [-1] * n, "last_read": 0, "last_write": 0, "sim_cycles": sim,
            "compulsory_bytes": sum(read), "written_bytes": written, "miss_share": {}, "cus_with_work": 256,
            "concurrency": 1.0}


def test_a_late_load_that_a_wave_waits_for_stalls_the_cu_and_what_follows():
    p = Params()
    hbm, mall = memory.rates(_replay_rec([0], [-1]), 1.5, p)
    n = 64 * 1024
    late = n / hbm - 128                                     # served past the end of its bin
    # waited for at once (slack 0): the CU stalls by the lateness; the second burst issues that much later
    two = [n] + [0] * 99 + [n] + [0] * 50
    waited = memory.replay_cycles(_replay_rec(two, [0] + [-1] * 99 + [0] + [-1] * 50), hbm, mall, p)
    assert waited == pytest.approx(20000 + 2 * late, rel=1e-9)
    # slack covers part of it: only the rest stalls
    part = memory.replay_cycles(_replay_rec(two, [1000] + [-1] * 99 + [1000] + [-1] * 50), hbm, mall, p)
    assert part == pytest.approx(20000 + 2 * (late - 1000), rel=1e-9)
    # nobody waited for them: the CU runs on; the span ends when the queue has served them
    free = memory.replay_cycles(_replay_rec(two, [-1] * 151), hbm, mall, p)
    assert free == pytest.approx(20000)
    # cu_cycles takes the replay with [memory].loaded_latency on, the 0.5.0 overhang with it off
    rec = dict(_replay_rec(two, [0] + [-1] * 99 + [0] + [-1] * 50), last_read=100 * 128)
    assert memory.cu_cycles(rec, 1.5, p) == pytest.approx(waited)
    off = Params(overrides={"memory.loaded_latency": False})    # only the last burst's overhang counts
    assert memory.cu_cycles(rec, 1.5, off) == pytest.approx(20000 + late, rel=1e-9)


def test_the_mall_holds_its_size_of_the_written_lines_the_rest_goes_to_hbm():
    p = Params()
    mall_bytes = p.device_mall_bytes
    small = _replay_rec([0], [-1], written=mall_bytes // 2)
    big = _replay_rec([0], [-1], written=4 * mall_bytes)
    assert memory.spill_share(small, p) == 0.0 and memory.spill_share(big, p) == pytest.approx(0.75)
    assert memory.spill_share(big, Params(overrides={"memory.mall_writes": False})) == 0.0
    # a written burst waited for at the end: at the HBM share when spilled, at the MALL's when held
    hbm, mall = memory.rates(small, 1.5, p)
    n = 256 * 1024
    w = [0] * 10 + [n] + [0] * 5
    ws = [-1] * 10 + [0] + [-1] * 5
    held = memory.replay_cycles(_replay_rec([0] * 16, [-1] * 16, sim=2000, write=w, wslack=ws,
                                            written=mall_bytes // 2), hbm, mall, p)
    spilled = memory.replay_cycles(_replay_rec([0] * 16, [-1] * 16, sim=2000, write=w, wslack=ws,
                                               written=4 * mall_bytes), hbm, mall, p)
    assert held == pytest.approx(2000 + n / mall - 128, rel=1e-9)
    assert spilled == pytest.approx(2000 + max(n / 4 / mall, 0.75 * n / hbm) - 128, rel=1e-9)
    # the chip's floor counts the written bytes the MALL does not hold at the end
    kern = {"compute_cycles": 1000.0, "round_scale": 1.0, "bytes_buffers": 10 * mall_bytes, "bytes_l2": 10 * mall_bytes,
            "launch_us": 0.0, "memory": dict(big, compulsory_bytes=5 * mall_bytes)}
    assert grid.times(kern, 1.5, p)["bytes_hbm"] == 5 * mall_bytes - mall_bytes
    assert grid.times(kern, 1.5, Params(overrides={"memory.mall_writes": False}))["bytes_hbm"] == 5 * mall_bytes


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


def test_a_load_waited_for_at_once_leaves_no_slack_one_never_waited_for_none():
    k = _broadcast_read(1 << 20, 1)
    rec = k["memory"]
    i = next(j for j, b in enumerate(rec["read_bytes"]) if b)
    assert rec["read_slack"][i] == 0          # s_waitcnt vmcnt(0) right after the load
    assert all(s == -1 for j, s in enumerate(rec["read_slack"]) if not rec["read_bytes"][j])


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
    """Chains over one line hit the vector / scalar L1 after their first access, a chain over lines pushed out
    of the vector L1 hits the CU's share of the L2, chains that move to a new line every access miss them;
    each stands beside the levels MT4G measured on a gfx950 MI350P (beyond the CU's own lines the model has
    one latency, so its one figure stands beside L2, MALL and HBM)."""
    p = Params()
    rows = micro.chase_rows(p)
    by = {r["case"]: r for r in rows}
    assert [r["hardware"] for r in rows] == [112.0, 256.0, 256.0, 444.0, 740.0, 48.0, 166.9, 48.0]
    assert all(r["source"].startswith(micro.MT4G_MI350P) and r["label"] == "modelled" for r in rows)
    slot = int(p.issue_cycles_per_issue_slot)
    expected = {c[0]: c[3] for c in micro.cases(p)}["vmcnt_round_trip"]
    assert {r["modelled"] for r in rows if r["case"].startswith("vmem_chase_new_lines")} == {expected}
    assert by["vmem_chase (vector L1 hit)"]["modelled"] == micro._up(4 + int(p.vmem_l1_hit_latency_cycles), slot) + slot
    assert by["vmem_chase_l2 (L2 hit)"]["modelled"] == micro._up(4 + int(p.vmem_l2_hit_latency_cycles), slot) + slot
    assert by["smem_chase (scalar L1 hit)"]["modelled"] == micro._up(int(p.vmem_smem_hit_latency_cycles), slot) + slot
    miss = by["smem_chase_new_lines (scalar L1 miss, L2 hit)"]["modelled"]
    assert int(p.vmem_smem_latency_cycles) < miss <= int(p.vmem_smem_latency_cycles) + 3 * slot
    assert int(p.lds_latency_cycles) < by["lds_chase (LDS)"]["modelled"] <= int(p.lds_latency_cycles) + 2 * slot
    # the caches switched off: every chain costs the one latency of its path again
    off = {r["case"]: r["modelled"] for r in micro.chase_rows(Params(overrides={
        "vmem.l1_cache": False, "vmem.scalar_cache": False, "vmem.l2_cache": False}))}
    assert off["vmem_chase (vector L1 hit)"] == off["vmem_chase_l2 (L2 hit)"] == expected
    assert off["smem_chase (scalar L1 hit)"] == micro._up(int(p.vmem_smem_latency_cycles), slot) + slot
    assert {r["case"] for r in micro.hardware_rows(p)} >= set(by)


def _one_wave(body, params=None):
    prog = gfx950emu.load(micro.kernel_text(body))
    buf = np.zeros(1 << 20, dtype=np.uint8)
    return gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True,
                            timing_params=params).timing


def _load_gaps(t):
    """Cycles from each vector load's issue to the issue of the next instruction after its wait."""
    ev = t["trace_events"]
    loads = [e[4] for e in ev if e[6] == "vmem"]
    after = [next(e[4] for e in ev if e[6] == "valu" and e[4] > x) for x in loads]
    return [b - a for a, b in zip(loads, after)]


def test_a_load_hits_the_vector_l1_only_where_its_lines_were_loaded_before():
    """The second load of a line returns at the L1's latency; a store does not bring its line into the L1
    (it does into the CU's L2 share: a load of it hits there), a load of device scope (sc1) goes past the L1
    to the L2, where the first load brought its line, and the switches off give every load the one latency."""
    p = Params()
    hit, miss = int(p.vmem_l1_hit_latency_cycles), int(p.vmem_latency_cycles)
    l2 = int(p.vmem_l2_hit_latency_cycles)
    wait = ["s_waitcnt vmcnt(0)", "v_mov_b32_e32 v2, v1"]
    ld = "buffer_load_dword v1, v40, s[4:7], 0 offen"
    body = ([ld] + wait + [ld] + wait                                            # miss, hit
            + ["buffer_store_dword v1, v40, s[4:7], 0 offen offset:2048", "s_waitcnt vmcnt(0)"]
            + ["buffer_load_dword v1, v40, s[4:7], 0 offen offset:2048"] + wait  # stored, not loaded: miss
            + [ld + " sc1"] + wait)                                              # device scope: past the L1
    t = _one_wave(body)
    g = _load_gaps(t)
    # the store sits among the loads in the trace; keep the loads followed by their own wait
    g = [g[0], g[1], g[3], g[4]]
    assert g[0] > miss and g[1] < hit + 16 and l2 < g[2] < l2 + 16 and l2 < g[3] < l2 + 16
    assert t["caches"]["vector_l1_loads"] == 3 and t["caches"]["vector_l1_hits"] == 1
    # past the L1: the first load's miss, the store, the stored line's load and the sc1 load; the last two hit
    assert t["caches"]["l2_share_lookups"] == 4 and t["caches"]["l2_share_hits"] == 2
    off = _one_wave(body, {"vmem.l1_cache": False, "vmem.l2_cache": False})
    assert min(_load_gaps(off)[k] for k in (0, 1, 3, 4)) > miss and off["caches"]["vector_l1_loads"] == 0


def test_the_vector_l1_keeps_the_most_recently_used_lines_it_has_room_for():
    p = Params()
    lines = int(p.device_l1_bytes_per_cu) // int(p.device_cache_line_bytes)
    ld = "buffer_load_dword v1, v41, s[4:7], 0 offen"
    set_up = ["v_lshlrev_b32_e32 v41, 7, v0"]                 # lane i -> byte 128 i: 64 lines per load
    sweep = []
    for k in range(lines // 64 + 1):                          # one more sweep of 64 lines than the L1 holds
        sweep += [f"v_add_u32_e32 v41, {64 * 128}, v41" if k else "v_mov_b32_e32 v2, 0", ld, "s_waitcnt vmcnt(0)"]
    again = ["v_lshlrev_b32_e32 v41, 7, v0", ld, "s_waitcnt vmcnt(0)", "v_mov_b32_e32 v2, v1"]
    t = _one_wave(set_up + sweep + again)
    assert t["caches"]["vector_l1_hits"] == 0        # the first 64 lines were evicted by the last sweep
    t2 = _one_wave(set_up + sweep[:3 * (lines // 64)] + again)
    assert t2["caches"]["vector_l1_hits"] == 1        # the same sweep that fits keeps them


def test_scratch_goes_through_the_caches_at_its_swizzled_addresses():
    """A spilled dword stored then reloaded: the store puts its lines (lane-interleaved: 64 lanes' dword
    = 256 bytes = 2 lines) in the CU's L2 share, not the L1, so the first reload hits the L2 and the second
    the L1; another workgroup's private segment shares none of those lines; the switch off gives model 0.4.0
    (scratch past both caches)."""
    p = Params()
    hit, l2, miss = int(p.vmem_l1_hit_latency_cycles), int(p.vmem_l2_hit_latency_cycles), int(p.vmem_latency_cycles)
    wait = ["s_waitcnt vmcnt(0)", "v_mov_b32_e32 v2, v1"]
    body = (["scratch_store_dword off, v0, off offset:8", "s_waitcnt vmcnt(0)"]
            + ["scratch_load_dword v1, off, off offset:8"] + wait + ["scratch_load_dword v1, off, off offset:8"] + wait)
    text = micro.kernel_text(body).replace(".amdhsa_accum_offset",
                                           ".amdhsa_private_segment_fixed_size 16\n\t\t.amdhsa_accum_offset")
    prog = gfx950emu.load(text)
    buf = np.zeros(1 << 12, dtype=np.uint8)

    def run(params=None, grid=1, sample=1):
        return gfx950emu.launch(prog, grid, 64, [buf], timing=True, timing_trace=True, timing_params=params,
                                timing_sample=sample).timing
    t = run()
    g = _load_gaps(t)[1:]               # the store, then the two reloads
    assert l2 < g[0] < l2 + 16 and hit < g[1] < hit + 16
    assert t["caches"]["vector_l1_loads"] == 2 and t["caches"]["vector_l1_hits"] == 1
    assert t["caches"]["l2_share_lookups"] == 2 and t["caches"]["l2_share_hits"] == 1
    # private lines are no HBM traffic: the CU's memory queues get none of their bytes
    assert sum(t["kernel"]["memory"]["read_bytes"]) == 0 == sum(t["kernel"]["memory"]["write_bytes"])
    two = run(grid=512, sample=2)["caches"]     # two workgroups on the CU: each its own slab, its own counts
    assert (two["l2_share_hits"], two["vector_l1_hits"]) == (2, 2)
    off = run({"vmem.l2_cache": False})
    assert min(_load_gaps(off)[1:]) > miss and off["caches"]["vector_l1_loads"] == 0


def test_scalar_loads_hit_the_scalar_l1_after_their_line_was_loaded():
    p = Params()
    t = _one_wave(["s_load_dword s10, s[4:5], 0x0", "s_waitcnt lgkmcnt(0)",
                   "s_load_dword s11, s[4:5], 0x4", "s_waitcnt lgkmcnt(0)",       # same line: hit
                   "s_load_dword s12, s[4:5], 0x40", "s_waitcnt lgkmcnt(0)"])     # next 64-byte line: miss
    # the kernel's own prologue loads the kernarg (one miss) before these three
    assert t["caches"]["scalar_loads"] == 4 and t["caches"]["scalar_hits"] == 1
    assert p.vmem_smem_hit_latency_cycles < p.vmem_smem_latency_cycles


def test_lds_dma_data_takes_lds_pipe_time_only_with_its_switch_on():
    """A DS read that would start after LDS-DMA data arrived waits for its write (what-if, off by default):
    64 back-to-back reads keep the LDS pipe busy while the 16 DMAs' data arrives, so they end later by the
    DMAs' write time; data that arrived while the pipe was idle delays nothing."""
    dma = ["buffer_load_dword v40, s[4:7], 0 offen lds"] * 16
    reads = ["s_sleep 7"] + [f"ds_read_b128 v[{60 + 4 * (j % 8)}:{63 + 4 * (j % 8)}], v40" for j in range(64)] \
        + ["s_waitcnt lgkmcnt(0)", "v_mov_b32_e32 v2, 0"]
    body = ["s_mov_b32 m0, 0x8000"] + dma + reads + ["s_waitcnt vmcnt(0)"]
    assert Params().lds_dma_contends is False
    miss = {"vmem.l1_cache": False, "vmem.l2_cache": False}   # every DMA's data after the one latency beyond
    off, on = _one_wave(body, miss), _one_wave(body, {**miss, "lds.dma_contends": True})
    last = lambda t: max(e[4] for e in t["trace_events"] if e[6] == "valu")   # noqa: E731
    p = Params()
    write = 16 * (256 // int(p.lds_dma_write_bytes_per_clock))
    assert last(on) - last(off) == pytest.approx(write, abs=2 * int(p.issue_cycles_per_issue_slot))
    idle = [x if x != "s_sleep 7" else "s_sleep 30" for x in body]
    assert last(_one_wave(idle, {**miss, "lds.dma_contends": True})) == last(_one_wave(idle, miss))


def test_per_cu_streams_stand_beside_the_published_gfx950_bandwidths():
    """A one-wave stream through each CU pipe gives the rate its parameter documents (bytes per clock), put at
    MT4G's listed clock beside MT4G's per-CU figure; a parameter change moves the modelled figure only."""
    p = Params()
    rows = {r["case"]: r for r in micro.bandwidth_rows(p)}
    gib = micro.MT4G_CLOCK_GHZ * 1e9 / 2 ** 30
    assert rows["lds_read_bandwidth"]["modelled"] == pytest.approx(int(p.lds_read_bytes_per_clock) * gib, rel=0.02)
    assert rows["lds_write_bandwidth"]["modelled"] == pytest.approx(int(p.lds_write_bytes_per_clock) * gib, rel=0.02)
    assert rows["vector_l1_read_bandwidth"]["modelled"] == pytest.approx(int(p.vmem_l1_bytes_per_clock) * gib, rel=0.03)
    assert [r["hardware"] for r in rows.values()] == [451.2, 153.9, 214.4]
    assert all(r["label"] == "modelled" and "MT4G-MI350P" in r["source"] for r in rows.values())
    half = {r["case"]: r for r in micro.bandwidth_rows(Params(overrides={"lds.write_bytes_per_clock": 64}))}
    assert half["lds_write_bandwidth"]["modelled"] == pytest.approx(rows["lds_write_bandwidth"]["modelled"] / 2, rel=0.02)
    assert half["lds_write_bandwidth"]["hardware"] == 153.9
