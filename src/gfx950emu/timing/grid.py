"""Grid-level model of the MI355X: workgroups over 256 CUs (8 XCDs x 32), occupancy, rounds,
a traffic floor, kernel time = max(compute, memory) + launch cost.

Compute path: the simulated first CU (it receives ceil(n / 256) workgroups, the most of any CU,
so it finishes last -- the partial last round included); when fewer workgroups than its share were
simulated, its time is scaled by share / simulated.  Since model 0.2 the CU's own run already pays
the memory hierarchy (latencies in ns, its share of L2 / MALL / HBM bandwidth with the chip's other
active CUs: the chip-wide prologue / epilogue bursts), so the floor below only catches kernels whose
sampled CU is not representative.  Dispatch: the SPI launches the waves of one round one after
another per XCD (``dispatch.wave_launch_ns`` each), so the last CU of a round starts
``(workgroups per XCD in the round - 1) x waves per workgroup`` launches after the first; the
kernel ends with that slowest CU (``ramp_us``).  Cycles become seconds in ONE place,
:func:`cycles_to_us` (the clock: :func:`core_clock_ghz`; a power-limited clock plugs in there).
Memory floor: ``bytes_l2`` = bytes the sampled workgroups requested through
VMEM, times n / simulated, over the aggregate L2 bandwidth (8 x 2048 B/clock); ``bytes_hbm`` =
compulsory traffic, every argument buffer the sampled workgroups touch, once -- at most the lines
they touched times the grid's workgroups (model 0.2: a buffer read only in part) -- (the 256 MB MALL
holds the operands of the shapes studied here), capped at ``bytes_l2``, over the sustained HBM
bandwidth.  Not modelled: clock ramp, DVFS (one fitted clock), the slowest of several sampled CUs.
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


def core_clock_ghz(p, activity: dict | None = None) -> float:
    """The core clock a kernel runs at: today the one fitted ``[clock].sustained_ghz``; ``activity``
    (``res.timing["activity"]``: instructions per class, MFMA passes, VMEM / LDS bytes) is what a
    power-limited clock would need."""
    return float(p.clock_sustained_ghz)


def cycles_to_us(p, cycles: float, activity: dict | None = None, clock_ghz: float | None = None) -> float:
    """THE conversion of core cycles to microseconds (the hook for a power-limited clock)."""
    clk = float(clock_ghz or core_clock_ghz(p, activity))
    return float(cycles) / (clk * 1e3)


def ramp_us(p, n_wg: int, occupancy: int, nwaves: int) -> float:
    """Wave-launch ramp of the first round (see the module doc)."""
    if not p.mechanisms_dispatch_ramp:
        return 0.0
    per_xcd = min(-(-n_wg // int(p.device_xcds)), int(p.device_cus_per_xcd) * max(1, occupancy))
    return max(0, per_xcd - 1) * max(1, nwaves) * float(p.dispatch_wave_launch_ns) * 1e-3


def kernel(p, prog, L, *, n_wg, share, sampled, sim_cycles, occupancy, vmem_bytes, mfma_flops, flops=None,
           clock_ghz=None, touched=None, nwaves=1, activity=None, cold_cycles=0.0) -> dict:
    clk = float(clock_ghz or core_clock_ghz(p, activity))
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    # the first CU runs `share` workgroups, `occupancy` at a time; scale the simulated rounds up
    sim_rounds = math.ceil(sampled / occupancy) if sampled else 1
    cu_rounds = math.ceil(share / occupancy) if share else 1
    # cold-start costs a CU pays once (its I-cache fills with the first workgroup) are not scaled up
    cold = min(float(cold_cycles), float(sim_cycles))
    compute_cycles = (sim_cycles - cold) * cu_rounds / sim_rounds + cold
    ramp = ramp_us(p, n_wg, occupancy, nwaves)
    compute_us = cycles_to_us(p, compute_cycles, activity, clk) + ramp
    bytes_l2 = int(vmem_bytes * n_wg / max(1, sampled))
    if touched is not None:
        buf = touched.buffer_bytes()
        footprint = len(touched.lines) * touched.LINE // max(1, sampled)
    else:
        buf = sum(int(view.size) for _, view, _ in getattr(L, "mapped", []))
        footprint = None
    bytes_hbm = int(min(buf, bytes_l2)) if bytes_l2 else int(buf)
    if footprint and p.mechanisms_memory_hierarchy:
        # a buffer the grid reads only in part (an MoE's expert weights at decode): the lines the
        # sampled workgroups touched, extrapolated to the grid, bound the compulsory bytes
        bytes_hbm = int(min(bytes_hbm, footprint * n_wg))
    l2_bw = float(p.device_l2_bytes_per_clock_per_xcd) * int(p.device_xcds) * clk * 1e9
    mem_us = max(bytes_hbm / _hbm_bw(p), bytes_l2 / l2_bw) * 1e6
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
        "cold_cycles": round(cold, 1),
        "memory_us": round(mem_us, 3),
        "launch_us": float(p.device_launch_overhead_us),
        "ramp_us": round(ramp, 3),
        "flops": float(flops),
        "flops_source": flops_source,
        "cus": ncu,
        "workgroups_first_cu": int(share),
        "footprint_bytes_per_workgroup": footprint,
    }


def _hbm_bw(p) -> float:
    frac = float(p.memory_hbm_sustained_fraction) if p.mechanisms_memory_hierarchy else 1.0
    return float(p.device_hbm_bytes_per_s) * frac


def at_clock(kern: dict, clock_ghz: float, p) -> dict:
    """The same kernel figures at another clock (compute cycles and bytes fixed)."""
    out = dict(kern)
    clk = float(clock_ghz)
    compute_us = cycles_to_us(p, kern["compute_cycles"], clock_ghz=clk) + kern.get("ramp_us", 0.0)
    l2_bw = float(p.device_l2_bytes_per_clock_per_xcd) * int(p.device_xcds) * clk * 1e9
    mem_us = max(kern["bytes_hbm"] / _hbm_bw(p), kern["bytes_l2"] / l2_bw) * 1e6
    us = max(compute_us, mem_us) + kern["launch_us"]
    out.update(clock_ghz=clk, compute_us=round(compute_us, 3), memory_us=round(mem_us, 3), us=round(us, 3),
               bound="compute" if compute_us >= mem_us else "memory",
               tflops=round(kern["flops"] / (us * 1e-6) / 1e12, 2))
    return out


def fit_clock(kern: dict, tflops: float, p) -> float:
    """The clock at which ``kern`` reaches ``tflops`` (compute-bound: us = cycles / f + launch)."""
    us = kern["flops"] / (tflops * 1e12) * 1e6 - kern["launch_us"] - kern.get("ramp_us", 0.0)
    if us <= 0:
        raise ValueError(f"{tflops} TFLOPS is faster than the launch overhead alone")
    clk = kern["compute_cycles"] / (us * 1e3)
    if at_clock(kern, clk, p)["bound"] != "compute":
        raise ValueError("the fit point is memory-bound at the fitted clock; pick a compute-bound point")
    return clk
