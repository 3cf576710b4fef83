"""Grid-level model of the MI355X: workgroups over 256 CUs (8 XCDs x 32), occupancy, rounds, the
chip's shared memory levels, kernel time = max(CU path, memory floor) + launch cost.

Compute path: the simulated first CU (it receives ceil(n / 256) workgroups, the most of any CU, so it
finishes last); when fewer workgroups than its share were simulated, its time is scaled by share /
simulated.  CU memory path (``[memory].queues``, :mod:`gfx950emu.timing.memory`): the same CU with its
HBM reads and MALL writes drained at its share of the chip's bandwidth, their lateness stalling the CU
where a wave waited for them (``[memory].loaded_latency``) (:func:`memory_record` weights
each request by the share of its buffer that misses every on-chip level).  Memory floor: ``bytes_l2`` =
bytes the sampled workgroups requested through VMEM, times n / simulated, over the aggregate L2
bandwidth (8 x 2048 B/clock); ``bytes_hbm`` = the compulsory bytes (``[memory].touched_floor``: the
distinct lines touched per buffer, extrapolated to the grid, capped at the buffer; off: every touched
buffer whole), capped at ``bytes_l2``, less the written lines the MALL still holds at the end
(``[memory].mall_writes``), over the sustained HBM bandwidth.  Not modelled: L2 capacity
misses from the tile order (a workgroup order whose concurrent footprint exceeds 4 MB per XCD), lines
shared with workgroups outside the sample (only the buffer's size caps them), clock ramp.
"""
from __future__ import annotations

import math

import numpy as np


def _vgprs(prog) -> int:
    d = prog.descriptor
    nv = int(d.get("next_free_vgpr", 0) or 0)
    acc = int(prog.accum_offset)
    meta = prog.metadata or {}
    agpr = int(meta.get(".agpr_count", 0) or 0)
    vg = int(meta.get(".vgpr_count", 0) or 0)
    if agpr:
        return max(nv, acc + agpr, vg)
    return max(nv, vg, 1)


def occupancy(prog, nwaves: int, lds_size: int, p) -> int:
    """Workgroups resident per CU: limited by wave slots, the unified VGPR file and LDS."""
    simds = int(p.device_simds_per_cu)
    gran = int(p.device_vgpr_granule)
    v = _vgprs(prog)
    v = -(-v // gran) * gran
    waves_per_simd = min(int(p.device_wave_slots_per_simd), int(p.device_vgprs_per_simd_lane) // max(v, gran))
    waves_per_simd = max(1, waves_per_simd)
    per_simd_of_wg = -(-nwaves // simds)
    by_waves = max(1, waves_per_simd // per_simd_of_wg)
    by_lds = int(p.device_lds_bytes_per_cu) // lds_size if lds_size else by_waves
    return max(1, min(by_waves, by_lds))


def memory_record(cu, touched, *, n_wg: int, sampled: int, occupancy: int, sim_cycles: int, cus: int,
                  bins: int = 128) -> dict:
    """What the sampled CU's VMEM stream asks of the memory hierarchy (JSON-ready; evaluated at a
    clock by :mod:`gfx950emu.timing.memory`, after the cycle simulation).

    Per argument buffer ``b``: ``R_b`` bytes requested by the sampled workgroups, ``U_b`` bytes of
    distinct 128-byte lines they touch, ``S_b`` its size.  Extrapolated to the grid (x n / sampled),
    the compulsory bytes are ``C_b = min(S_b, U_b x n / sampled)`` and the share of a request that
    misses every on-chip level is ``f_b = C_b / (R_b x n / sampled)``: a line that ``k`` workgroups of
    the grid read is fetched from HBM once and hit ``k - 1`` times (mean field: every CU sees the
    grid's average).  Per 128-cycle bin of issue time: load bytes x f (HBM reads) and store bytes x f
    (writes, into the MALL), and per bin the least slack of its ops that a wave waited for (cycles from
    the op's return to the wave's first wait for it; -1: none); ``written_bytes``: the compulsory bytes
    of the buffers the grid stores to."""
    ev_t, ev_b, ev_s, ev_r = cu.vmem_events
    t = np.asarray(ev_t, dtype=np.int64)
    nb = np.asarray(ev_b, dtype=np.float64)
    st = np.asarray(ev_s, dtype=bool)
    reg = np.asarray(ev_r, dtype=np.int64) if len(ev_r) == len(ev_t) else np.full(t.size, -1, np.int64)
    regions = touched.mem.regions if touched is not None else []
    lines = touched.region_lines() if touched is not None else {}   # no probe: every buffer unknown (f = 1)
    scale = n_wg / max(1, sampled)
    f = {}
    compulsory = 0.0
    written = 0.0           # the compulsory bytes of the buffers the grid stores to
    for k, n_lines in lines.items():
        req = float(nb[reg == k].sum())
        if req <= 0:
            continue
        c = min(float(regions[k][2]), n_lines * touched.LINE * scale)
        compulsory += c
        if st[reg == k].any():
            written += c
        f[k] = min(1.0, c / (req * scale))
    # with a probe, an access outside the argument buffers (scratch: private lines the CU's caches hold,
    # none of them in the compulsory bytes) weighs 0; without one every buffer is unknown (f = 1)
    other = 0.0 if touched is not None else 1.0
    arg = {k for k in range(len(regions)) if regions[k][0].startswith("arg")}
    w = nb * np.array([f.get(int(k), 1.0 if k in arg else other) for k in reg], dtype=np.float64)
    nbin = int(sim_cycles) // bins + 1
    idx = np.minimum(t // bins, nbin - 1)
    read = np.bincount(idx[~st], weights=w[~st], minlength=nbin)
    write = np.bincount(idx[st], weights=w[st], minlength=nbin)
    # per bin the least slack (cycles from an op's return to the first wave that waited for it) of the
    # ops issued in it that some wave waited for; -1: none (gfx950emu.timing.memory: loaded latency)
    done = np.asarray(cu.vmem_done, dtype=np.int64)
    need = np.asarray(cu.vmem_need, dtype=np.int64)
    none = np.iinfo(np.int64).max
    slack = {}
    for name, sel in (("read_slack", ~st), ("write_slack", st)):
        out = np.full(nbin, none, dtype=np.int64)
        m = sel & (need >= 0)
        np.minimum.at(out, idx[m], np.maximum(0, need[m] - done[m]))
        slack[name] = [int(x) if x != none else -1 for x in out]
    return {
        "bin_cycles": bins,
        "read_bytes": [int(round(x)) for x in read],
        "write_bytes": [int(round(x)) for x in write],
        **slack,
        "last_read": int(t[~st].max()) if (~st).any() else 0,
        "last_write": int(t[st].max()) if st.any() else 0,
        "sim_cycles": int(sim_cycles),
        "compulsory_bytes": int(round(compulsory)),
        "written_bytes": int(round(written)),
        "miss_share": {regions[k][0]: round(v, 5) for k, v in sorted(f.items())},
        "cus_with_work": int(min(n_wg, cus)),
        "concurrency": round(min(sampled, occupancy) / max(1, occupancy), 5),
    }


def kernel(p, prog, L, *, n_wg, share, sampled, sim_cycles, occupancy, vmem_bytes, mfma_flops, flops=None,
           clock_ghz=None, touched=None, memory=None) -> dict:
    """The grid figures (see the module doc) at ``clock_ghz`` (default ``[clock].sustained_ghz``)."""
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    # the first CU runs `share` workgroups, `occupancy` at a time; scale the simulated rounds up
    sim_rounds = math.ceil(sampled / occupancy) if sampled else 1
    cu_rounds = math.ceil(share / occupancy) if share else 1
    bytes_l2 = int(vmem_bytes * n_wg / max(1, sampled))
    if touched is not None:
        buf = touched.buffer_bytes()
        footprint = len(touched.lines) * touched.LINE // max(1, sampled)
    else:
        buf = sum(int(view.size) for _, view, _ in getattr(L, "mapped", []))
        footprint = None
    if flops is None:
        flops = mfma_flops * n_wg / max(1, sampled)
        flops_source = "mfma"
    else:
        flops_source = "caller"
    kern = {
        "rounds": int(math.ceil(n_wg / (ncu * occupancy))),
        "round_scale": cu_rounds / sim_rounds,
        "compute_cycles": round(sim_cycles * cu_rounds / sim_rounds, 1),
        "bytes_l2": bytes_l2,
        "bytes_buffers": int(min(buf, bytes_l2)) if bytes_l2 else int(buf),
        "launch_us": float(p.device_launch_overhead_us),
        "flops": float(flops),
        "flops_source": flops_source,
        "cus": ncu,
        "workgroups_first_cu": int(share),
        "footprint_bytes_per_workgroup": footprint,
        "memory": memory,
    }
    return at_clock(kern, clock_ghz or p.clock_sustained_ghz, p)


def times(kern: dict, clock_ghz: float, p) -> dict:
    """Unrounded time figures of ``kern`` at ``clock_ghz`` (cycles and bytes fixed): the compute path
    (simulated cycles), the CU's memory path (:func:`gfx950emu.timing.memory.cu_cycles`: the CU's share
    of HBM and MALL bandwidth as fluid queues; ``[memory].queues``), the chip's memory floor
    (compulsory bytes over sustained HBM bandwidth, requested bytes over L2 bandwidth)."""
    from . import memory as _memory

    clk = float(clock_ghz)
    compute = float(kern["compute_cycles"])
    rec = kern.get("memory")
    queue = compute
    if rec and bool(p.memory_queues):
        queue = max(compute, _memory.cu_cycles(rec, clk, p) * float(kern["round_scale"]))
    hbm_bytes = kern["bytes_buffers"]
    if rec and bool(p.memory_touched_floor):
        hbm_bytes = min(hbm_bytes, rec["compulsory_bytes"]) if hbm_bytes else rec["compulsory_bytes"]
    if rec and bool(p.memory_mall_writes) and rec.get("written_bytes"):
        # the written lines the MALL still holds at the end never reach HBM
        hbm_bytes = max(0, hbm_bytes - (1.0 - _memory.spill_share(rec, p)) * rec["written_bytes"])
    hbm_bw = float(p.device_hbm_bytes_per_s) * float(p.memory_hbm_sustained_fraction)
    l2_bw = float(p.device_l2_bytes_per_clock_per_xcd) * int(p.device_xcds) * clk * 1e9
    mem_us = max(hbm_bytes / hbm_bw, kern["bytes_l2"] / l2_bw) * 1e6
    compute_us = compute / (clk * 1e3)
    queue_us = queue / (clk * 1e3)
    us = max(queue_us, mem_us) + float(kern["launch_us"])
    return {"clock_ghz": clk, "compute_us": compute_us, "queue_us": queue_us, "memory_us": mem_us,
            "bytes_hbm": int(hbm_bytes), "us": us}


def at_clock(kern: dict, clock_ghz: float, p) -> dict:
    """The kernel figures at ``clock_ghz``: ``us``, ``tflops``, ``bound`` (``memory`` when the memory
    path or floor sets the time more than 10 % above the compute path), ``compute_us``,
    ``memory_exposed_us`` (what the memory path adds to it), ``memory_us`` (the floor), ``bytes_hbm``."""
    t = times(kern, clock_ghz, p)
    out = dict(kern)
    mem = max(t["queue_us"], t["memory_us"])
    out.update(clock_ghz=t["clock_ghz"], compute_us=round(t["compute_us"], 3), memory_us=round(t["memory_us"], 3),
               memory_exposed_us=round(max(0.0, mem - t["compute_us"]), 3), bytes_hbm=t["bytes_hbm"],
               us=round(t["us"], 3), bound="memory" if mem > 1.1 * t["compute_us"] else "compute",
               tflops=round(kern["flops"] / (t["us"] * 1e-6) / 1e12, 2) if t["us"] > 0 else None)
    return out


def fit_clock(kern: dict, tflops: float, p) -> float:
    """The clock at which ``kern`` reaches ``tflops`` (compute-bound: us = cycles / f + launch)."""
    us = kern["flops"] / (tflops * 1e12) * 1e6 - kern["launch_us"]
    if us <= 0:
        raise ValueError(f"{tflops} TFLOPS is faster than the launch overhead alone")
    clk = kern["compute_cycles"] / (us * 1e3)
    if at_clock(kern, clk, p)["bound"] != "compute":
        raise ValueError("the fit point is memory-bound at the fitted clock; pick a compute-bound point")
    return clk
