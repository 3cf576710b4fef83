"""Grid-level model of the MI355X: workgroups over 256 CUs (8 XCDs x 32), occupancy, rounds,
a traffic floor, kernel time = max(compute, memory) + launch cost.

Compute path: the simulated first CU (it receives ceil(n / 256) workgroups, the most of any CU,
so it finishes last); when fewer workgroups than its share were simulated, its time is scaled by
share / simulated.  Memory floor: ``bytes_l2`` = bytes the sampled workgroups requested through
VMEM, times n / simulated, over the aggregate L2 bandwidth (8 x 2048 B/clock); ``bytes_hbm`` =
compulsory traffic, every argument buffer the sampled workgroups touch, once (the 256 MB MALL
holds the operands of the shapes studied here), capped at ``bytes_l2``, over 8 TB/s.  Not modelled: L2 capacity misses from the
tile order (a workgroup order whose concurrent footprint exceeds 4 MB per XCD), MALL bandwidth,
clock ramp, DVFS.
"""
from __future__ import annotations

import math


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


def kernel(p, prog, L, *, n_wg, share, sampled, sim_cycles, occupancy, vmem_bytes, mfma_flops, flops=None,
           clock_ghz=None, touched=None) -> dict:
    clk = float(clock_ghz or p.clock_sustained_ghz)
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    # the first CU runs `share` workgroups, `occupancy` at a time; scale the simulated rounds up
    sim_rounds = math.ceil(sampled / occupancy) if sampled else 1
    cu_rounds = math.ceil(share / occupancy) if share else 1
    compute_cycles = sim_cycles * cu_rounds / sim_rounds
    compute_us = compute_cycles / (clk * 1e3)
    bytes_l2 = int(vmem_bytes * n_wg / max(1, sampled))
    if touched is not None:
        buf = touched.buffer_bytes()
        footprint = len(touched.lines) * touched.LINE // max(1, sampled)
    else:
        buf = sum(int(view.size) for _, view, _ in getattr(L, "mapped", []))
        footprint = None
    bytes_hbm = int(min(buf, bytes_l2)) if bytes_l2 else int(buf)
    l2_bw = float(p.device_l2_bytes_per_clock_per_xcd) * int(p.device_xcds) * clk * 1e9
    mem_us = max(bytes_hbm / float(p.device_hbm_bytes_per_s), bytes_l2 / l2_bw) * 1e6
    bound = "compute" if compute_us >= mem_us else "memory"
    us = max(compute_us, mem_us) + float(p.device_launch_overhead_us)
    if flops is None:
        flops = mfma_flops * n_wg / max(1, sampled)
        flops_source = "mfma"
    else:
        flops_source = "caller"
    rounds = math.ceil(n_wg / (ncu * occupancy))
    return {
        "us": round(us, 3),
        "tflops": round(float(flops) / (us * 1e-6) / 1e12, 2) if us > 0 else None,
        "bound": bound,
        "clock_ghz": clk,
        "rounds": int(rounds),
        "bytes_hbm": bytes_hbm,
        "bytes_l2": bytes_l2,
        "compute_us": round(compute_us, 3),
        "compute_cycles": round(compute_cycles, 1),
        "memory_us": round(mem_us, 3),
        "launch_us": float(p.device_launch_overhead_us),
        "flops": float(flops),
        "flops_source": flops_source,
        "cus": ncu,
        "workgroups_first_cu": int(share),
        "footprint_bytes_per_workgroup": footprint,
    }


def at_clock(kern: dict, clock_ghz: float, p) -> dict:
    """The same kernel figures at another clock (compute cycles and bytes fixed)."""
    out = dict(kern)
    clk = float(clock_ghz)
    compute_us = kern["compute_cycles"] / (clk * 1e3)
    l2_bw = float(p.device_l2_bytes_per_clock_per_xcd) * int(p.device_xcds) * clk * 1e9
    mem_us = max(kern["bytes_hbm"] / float(p.device_hbm_bytes_per_s), kern["bytes_l2"] / l2_bw) * 1e6
    us = max(compute_us, mem_us) + kern["launch_us"]
    out.update(clock_ghz=clk, compute_us=round(compute_us, 3), memory_us=round(mem_us, 3), us=round(us, 3),
               bound="compute" if compute_us >= mem_us else "memory",
               tflops=round(kern["flops"] / (us * 1e-6) / 1e12, 2))
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
