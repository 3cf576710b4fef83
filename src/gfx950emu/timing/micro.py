"""Micro-kernels that check the timing model against the values its parameters document.

Each case is a tiny hand-written gfx950 kernel (one wave64) run with ``timing=True``; the measured
quantity is read off the model's timeline, and ``expected`` is what the cited parameter values say
it must be (so a test can assert it, and the benchmark / notebook print the table).

    python -m gfx950emu.timing --micro          # prints the table
"""
from __future__ import annotations

import numpy as np

from .. import asm
from .params import Params

N = 32      # repetitions in the stream cases
_FP4 = "cbsz:4 blgp:4"


def kernel_text(body: list, lds: int = 65536) -> str:
    lines = ["s_load_dwordx2 s[4:5], s[0:1], 0x0", "s_waitcnt lgkmcnt(0)", "s_and_b32 s5, s5, 0xffff",
             "s_mov_b32 s6, 0x100000", "s_mov_b32 s7, 0x27000", "s_mov_b32 m0, 0",
             "v_mov_b32_e32 v16, 0x7f7f7f7f", "v_mov_b32_e32 v17, 0x7f7f7f7f",
             "v_lshlrev_b32_e32 v40, 2, v0"] + body + ["s_endpgm"]
    return asm.kernel("\n".join(lines), args=("buf",), name="micro", lds=lds)


def _mfma(d, c, fp8=False):
    ab = "v[0:7], v[8:15]" if fp8 else "v[0:3], v[4:7]"
    mods = "cbsz:0 blgp:0" if fp8 else _FP4
    return f"v_mfma_scale_f32_16x16x128_f8f6f4 {d}, {ab}, {c}, v16, v17 op_sel_hi:[0,0,0] {mods}"


def _acc(j):
    return f"a[{4 * (j % 16)}:{4 * (j % 16) + 3}]"


def _up(x, slot):
    """x rounded up to the wave's next issue slot (the wave issues on multiples of the slot)."""
    return -(-x // slot) * slot


def _overrides(p: Params) -> dict | None:
    """The values of ``p`` that differ from the parameter file's (a launch's ``timing_params``)."""
    base = Params().values
    return {k: v for k, v in p.values.items() if v != base.get(k)} or None


def cases(p: Params | None = None) -> list:
    """[(name, body lines, measure, expected, what)]: ``measure`` names how to read the timeline."""
    p = p or Params()
    ppass = int(p.mfma_cycles_per_pass)
    ws = int(p.issue_cycles_per_wait_state)
    slot = int(p.issue_cycles_per_issue_slot)
    out = []
    out.append(("fp4_mfma_stream", [_mfma(_acc(j), _acc(j)) for j in range(N)], ("interval", "mfma"),
                4 * ppass, "independent FP4 x FP4 16x16x128 MFMAs: cycles per MFMA (4 passes)"))
    out.append(("fp8_mfma_stream", [_mfma(_acc(j), _acc(j), fp8=True) for j in range(N)], ("interval", "mfma"),
                8 * ppass, "independent FP8 x FP8 16x16x128 MFMAs: cycles per MFMA (8 passes)"))
    out.append(("srcc_chain", [_mfma("a[0:3]", "a[0:3]") for _ in range(N)], ("interval", "mfma"),
                4 * ppass, "dependent SrcC chain (D = C = a[0:3]): cycles per MFMA (back to back)"))
    read = int(p.mfma_read_ab_vmem_lds_wait_states_plus_passes)
    out.append(("mfma_then_valu", [_mfma("v[20:23]", "v[20:23]"), "v_add_f32_e32 v30, v20, v20"],
                ("gap", "mfma", "valu"), ws * (4 + read),
                "MFMA result read by a VALU: cycles from MFMA issue to the VALU's issue (passes + 4 wait states)"))
    body = []
    for j in range(N):
        body.append(_mfma(_acc(j), _acc(j)))
        body += [f"v_add_u32_e32 v{50 + k}, v{50 + k}, v40" for k in range(3)]
    out.append(("valu_in_shadow", body, ("interval", "mfma"), 4 * ppass,
                "3 independent VALU ops between FP4 MFMAs stay in the MFMA shadow: cycles per MFMA"))
    banks = int(p.lds_banks)
    rd = int(p.lds_read_bytes_per_clock)
    phases = 64 * 16 // rd
    for way, stride in ((0, 16), (2, 32), (4, 64)):
        setup = [f"v_mul_u32_u24_e32 v41, {stride}, v0"]
        reads = [f"ds_read_b128 v[{60 + 4 * (j % 8)}:{63 + 4 * (j % 8)}], v41" for j in range(N)]
        out.append((f"ds_read_b128_{way or 1}way", setup + reads + ["s_waitcnt lgkmcnt(0)"],
                    ("drain", "lds", int(p.lds_latency_cycles)),
                    max(slot, phases * max(1, way)),
                    f"ds_read_b128, lane stride {stride} B ({'no' if not way else f'{way}-way'} bank conflict, "
                    f"{banks} banks): cycles per instruction"))
    vm_lat = int(p.vmem_latency_cycles)
    l1 = int(p.vmem_l1_bytes_per_clock)
    dma = [f"buffer_load_dword v40, s[4:7], 0 offen lds" for _ in range(N)] + ["s_waitcnt vmcnt(0)", "v_mov_b32_e32 v1, 0"]
    per = max(int(p.vmem_issue_cycles), 256 // l1)
    # every DMA reads the same 256 B: with the vector L1 on, the first misses and the others hit; data
    # returns in order, so the wait ends with the later of the first (miss) and the last (hit)
    hit_lat = int(p.vmem_l1_hit_latency_cycles) if p.vmem_l1_cache else vm_lat
    out.append(("lds_dma_stream", dma, ("gap", "vmem", "valu"),
                _up(max(vm_lat, (N - 1) * per + hit_lat) + 256 // l1 + 256 // int(p.lds_dma_write_bytes_per_clock),
                    slot) + slot,
                f"{N} x buffer_load_dword ... lds (256 B each, one address) then s_waitcnt vmcnt(0): first DMA issue "
                "to the next instruction"))
    rt = ["buffer_load_dword v1, v40, s[4:7], 0 offen", "s_waitcnt vmcnt(0)", "v_mov_b32_e32 v2, v1"]
    out.append(("vmcnt_round_trip", rt, ("gap", "vmem", "valu"), _up(256 // l1 + vm_lat, slot) + slot,
                "one buffer_load_dword then s_waitcnt vmcnt(0): load issue to the dependent VALU's issue"))
    return out


def measure(res, what) -> float:
    ev = res.timing["trace_events"]
    how = what[0]
    if how == "interval":
        ts = [e[4] for e in ev if e[6] == what[1]]
        if len(ts) < 2:
            raise ValueError(f"micro-kernel has fewer than two {what[1]} instructions")
        # steady state: skip the first quarter
        k = len(ts) // 4
        return (ts[-1] - ts[k]) / (len(ts) - 1 - k)
    if how == "drain":
        # pipe throughput: first op's issue to the issue of the s_waitcnt that waits for all of them,
        # less the pipe's latency, per op (the wait issues on the wave's next 4-cycle slot: +-slot/N)
        ts = [e[4] for e in ev if e[6] == what[1]]
        wait = next(e[4] for e in ev if e[6] == "waitcnt" and e[4] > ts[-1])
        return (wait - ts[0] - what[2]) / len(ts)
    if how == "gap":
        first = next(e[4] for e in ev if e[6] == what[1])
        last = [e[4] for e in ev if e[6] == what[2] and e[4] > first]
        return float(last[-1] - first)
    raise ValueError(how)


def run(p: Params | None = None) -> list:
    """Run every case; rows of {case, modelled_cycles, expected_cycles, what}."""
    import gfx950emu
    p = p or Params()
    rows = []
    buf = np.zeros(1 << 20, dtype=np.uint8)
    for name, body, what, expected, text in cases(p):
        prog = gfx950emu.load(kernel_text(body))
        res = gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True,
                               timing_params=_overrides(p))
        rows.append({"case": name, "modelled_cycles": measure(res, what), "expected_cycles": float(expected),
                     "what": text, "model_version": p.version, "label": "modelled"})
    return rows


#: published hardware figures the whole model (grid + memory levels) is scored against, one micro-kernel
#: each: (case, what, hardware value, unit, source)
HARDWARE = (
    ("hbm_stream", "2048 workgroups streaming 256 KiB each through buffer_load_dwordx4 (no reuse): "
     "achieved share of the 8 TB/s HBM peak, launch and round overhead included", 0.90, "of peak",
     "[RS-8480] ROCm/rocm-systems PR #8480: TransferBench on an MI350X (gfx950, 8 TB/s HBM3E) reads 7200 GB/s, "
     "0.90 of peak (the PR's roofline kernel 6914 GB/s); the same figure is [memory].hbm_sustained_fraction, so "
     "this checks that the CU paths, queue depths, latency and launch let a stream reach it"),
)


#: gfx950 pointer-chase latencies (MT4G, caps-tum/mt4g, on an MI350P: gfx950, 128 CUs in 4 XCDs, 160 KiB LDS):
#: shader cycles as MT4G reports them (one thread; each load timed with s_memtime around it and its
#: s_waitcnt, so the timer and the wait are included; p50 of 255 samples, HBM of 2047).
MT4G_MI350P = ("[MT4G-MI350P] caps-tum/mt4g sample_results/AMD_Instinct_MI350P.json @ 52701e714e01 (gfx950 "
               "MI350P, 128 CUs, run 2026-09-16, hipcc 7.14): single-thread pointer chase, p50")

#: dependent-access micro-kernels scored against :data:`MT4G_MI350P`: (case, body, trace kind, what the chain
#: is, [(the hardware level, its published p50 in cycles, the JSON entry)]). The model's caches look at the
#: addresses: a chain over one line hits the vector / scalar L1 after its first access; a chain over lines
#: the wave touched before, pushed out of the vector L1 but not out of the CU's share of the L2, hits the L2;
#: a chain that moves to a new line every access misses them all and takes the one latency beyond
#: ([vmem].latency_cycles), so one modelled figure stands beside each of L2 (another CU's line), MALL and HBM.
CHASES = (
    ("vmem_chase", ["v_mov_b32_e32 v1, 0"] + ["buffer_load_dword v1, v1, s[4:7], 0 offen", "s_waitcnt vmcnt(0)"] * N,
     "vmem", "buffer_load_dword whose address is the previous load's result (one line), each followed by "
     "s_waitcnt vmcnt(0): cycles from one load's issue to the next's",
     (("vector L1 hit", 112.0, "memory.l1.latency.p50"),)),
    ("vmem_chase_l2", ["v_lshlrev_b32_e32 v42, 7, v0"]
     + [x for _ in range(6) for x in ("buffer_load_dword v43, v42, s[4:7], 0 offen", "v_add_u32_e32 v42, 0x2000, v42")]
     + ["s_waitcnt vmcnt(0)", "v_mov_b32_e32 v1, 0"] + [x for j in range(N) for x in (
        f"buffer_load_dword v1, v1, s[4:7], 0 offen offset:{128 * j}", "s_waitcnt vmcnt(0)")],
     "vmem", "six loads touch 48 KiB (one 128-byte line per lane; more than the 32 KiB vector L1), then "
     "buffer_load_dword whose address is the previous load's result plus the next of the first 32 lines, each "
     "followed by s_waitcnt vmcnt(0): cycles from one load's issue to the next's",
     (("L2 hit", 256.0, "memory.l2.latency.p50"),)),
    ("vmem_chase_new_lines", ["v_mov_b32_e32 v1, 0"] + [x for j in range(N) for x in (
        f"buffer_load_dword v1, v1, s[4:7], 0 offen offset:{128 * j}", "s_waitcnt vmcnt(0)")],
     "vmem", "buffer_load_dword whose address is the previous load's result plus a new 128-byte line each time, "
     "each followed by s_waitcnt vmcnt(0): cycles from one load's issue to the next's",
     (("L2 hit, a line another CU brought in", 256.0, "memory.l2.latency.p50"),
      ("MALL (Infinity Cache) hit", 444.0, "memory.l3.latency.p50"), ("HBM", 740.0, "memory.main.latency.p50"))),
    ("smem_chase", ["s_mov_b32 s10, 0"] + ["s_load_dword s10, s[4:5], s10", "s_waitcnt lgkmcnt(0)"] * N,
     "smem", "s_load_dword whose offset is the previous load's result (one line), each followed by "
     "s_waitcnt lgkmcnt(0): cycles from one load's issue to the next's",
     (("scalar L1 hit", 48.0, "memory.scalarL1.latency.p50"),)),
    ("smem_chase_new_lines", ["s_mov_b32 s10, 0"] + [x for j in range(N) for x in (
        f"s_add_u32 s11, s10, {64 * j}", "s_load_dword s10, s[4:5], s11", "s_waitcnt lgkmcnt(0)")],
     "smem", "s_load_dword whose offset is the previous load's result plus a new 64-byte line each time, each "
     "followed by s_waitcnt lgkmcnt(0): cycles from one load's issue to the next's (with the s_add_u32)",
     (("scalar L1 miss, L2 hit", 166.9, "memory.scalarL1.latency.p50 + missPenalty (118.9)"),)),
    ("lds_chase", ["v_mov_b32_e32 v1, 0"] + ["ds_read_b32 v1, v1", "s_waitcnt lgkmcnt(0)"] * N,
     "lds", "ds_read_b32 whose address is the previous read's result, each followed by s_waitcnt lgkmcnt(0): "
     "cycles from one read's issue to the next's",
     (("LDS", 48.0, "memory.shared.latency.p50"),)),
)


def chase_rows(p: Params | None = None) -> list:
    """Each :data:`CHASES` micro-kernel (one wave, the cycle model) beside the published gfx950 latency of
    every level its path can hit: rows of {case, level, modelled, hardware, unit, what, source, ...}."""
    import gfx950emu

    p = p or Params()
    over = _overrides(p)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    rows = []
    for name, body, kind, what, levels in CHASES:
        prog = gfx950emu.load(kernel_text(body))
        res = gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True, timing_params=over)
        modelled = measure(res, ("interval", kind))
        for level, hw, entry in levels:
            rows.append({"case": f"{name} ({level})", "modelled": round(modelled, 2), "hardware": hw,
                         "unit": "cycles per dependent access", "what": what,
                         "source": f"{MT4G_MI350P}, {entry}", "modelled_us": None, "bound": None,
                         "model_version": p.version, "clock_ghz": None, "label": "modelled"})
    return rows


#: MT4G's per-CU bandwidths on the gfx950 MI350P (GiB/s; the file's clockRate is 2.2 GHz, the clock during
#: the run is not logged): the model's rates (bytes per core clock, a one-wave stream through its pipe) are
#: put at that clock beside them
MT4G_CLOCK_GHZ = 2.2
#: (case, body, trace kind, bytes per instruction, latency to subtract, what, hardware GiB/s, JSON entry)
BANDWIDTHS = (
    ("lds_read_bandwidth", [f"ds_read_b128 v[{60 + 4 * (j % 8)}:{63 + 4 * (j % 8)}], v41" for j in range(N)]
     + ["s_waitcnt lgkmcnt(0)"], "lds", 1024, "lds", "ds_read_b128, lane stride 16 B (no bank conflict): bytes per "
     "clock through the CU's LDS pipe", 451.2, "memory.shared.readBandwidthPerCU"),
    ("lds_write_bandwidth", [f"ds_write_b128 v41, v[{60 + 4 * (j % 8)}:{63 + 4 * (j % 8)}]" for j in range(N)]
     + ["s_waitcnt lgkmcnt(0)"], "lds", 1024, "lds", "ds_write_b128, lane stride 16 B (no bank conflict): bytes per "
     "clock through the CU's LDS pipe", 153.9, "memory.shared.writeBandwidthPerCU"),
    ("vector_l1_read_bandwidth", ["v_lshlrev_b32_e32 v42, 4, v0"]
     + [f"buffer_load_dwordx4 v[{60 + 4 * (j % 8)}:{63 + 4 * (j % 8)}], v42, s[4:7], 0 offen" for j in range(N)]
     + ["s_waitcnt vmcnt(0)"], "vmem", 1024, "l1", "buffer_load_dwordx4 of the same 1 KiB (vector L1 hits after the "
     "first): bytes per clock through the CU's vector memory path", 214.4, "memory.l1.readBandwidthPerCU"),
)


def bandwidth_rows(p: Params | None = None) -> list:
    """Each :data:`BANDWIDTHS` stream (one wave) through the cycle model: bytes per clock, and GiB/s at
    :data:`MT4G_CLOCK_GHZ`, beside MT4G's per-CU figure on the gfx950 MI350P."""
    import gfx950emu

    p = p or Params()
    over = _overrides(p)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    lat = {"lds": int(p.lds_latency_cycles),
           "l1": int(p.vmem_l1_hit_latency_cycles if p.vmem_l1_cache else p.vmem_latency_cycles)}
    rows = []
    for name, body, kind, nbytes, which, what, hw, entry in BANDWIDTHS:
        prog = gfx950emu.load(kernel_text(["v_lshlrev_b32_e32 v41, 4, v0"] + body))
        res = gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True, timing_params=over)
        per_op = measure(res, ("drain", kind, lat[which]))
        bpc = nbytes / per_op
        rows.append({"case": name, "modelled": round(bpc * MT4G_CLOCK_GHZ * 1e9 / 2 ** 30, 1), "hardware": hw,
                     "unit": f"GiB/s per CU (model: {bpc:.0f} B/clock at {MT4G_CLOCK_GHZ} GHz)", "what": what,
                     "source": f"{MT4G_MI350P.replace(', p50', '')}, {entry}", "modelled_us": None, "bound": None,
                     "model_version": p.version, "clock_ghz": MT4G_CLOCK_GHZ, "label": "modelled"})
    return rows


def stream_text(wg_bytes: int) -> str:
    """Each 256-thread workgroup reads its own ``wg_bytes`` (16 B per lane per load, 4 KiB per load
    across the workgroup), 8 loads in flight per wave."""
    loads = wg_bytes // 4096
    body = ["s_load_dwordx2 s[4:5], s[0:1], 0x0", "s_waitcnt lgkmcnt(0)", "s_and_b32 s5, s5, 0xffff",
            "s_mov_b32 s6, -1", "s_mov_b32 s7, 0x27000", f"s_mul_i32 s8, s2, {wg_bytes}",
            "v_lshlrev_b32_e32 v40, 4, v0", "v_add_u32_e32 v40, s8, v40"]
    for j in range(loads):
        body += ["buffer_load_dwordx4 v[1:4], v40, s[4:7], 0 offen", "v_add_u32_e32 v40, 0x1000, v40"]
        if j % 8 == 7:
            body.append("s_waitcnt vmcnt(8)")
    body += ["s_waitcnt vmcnt(0)", "s_endpgm"]
    return asm.kernel("\n".join(body), args=("buf",), name="stream", vgprs=48, acc=48)   # 8 waves per SIMD


def hardware_rows(p: Params | None = None) -> list:
    """Each :data:`HARDWARE` micro-kernel through the whole model, beside its published hardware value,
    then the :func:`chase_rows` (dependent accesses) and :func:`bandwidth_rows` (per-CU streams), the cycle
    model alone."""
    import gfx950emu
    from gfx950emu.memory import LazyBuffer

    p = p or Params()
    over = _overrides(p)
    rows = []
    for case, what, hw, unit, source in HARDWARE:
        n_wg, wg_bytes = 2048, 256 * 1024
        prog = gfx950emu.load(stream_text(wg_bytes))
        k = gfx950emu.launch(prog, n_wg, 256, [LazyBuffer.zeros(n_wg * wg_bytes)], timing=True,
                             timing_params=over).timing["kernel"]
        frac = n_wg * wg_bytes / (k["us"] * 1e-6) / float(p.device_hbm_bytes_per_s)
        rows.append({"case": case, "modelled": round(frac, 4), "hardware": hw, "unit": unit, "what": what,
                     "source": source, "modelled_us": k["us"], "bound": k["bound"], "model_version": p.version,
                     "clock_ghz": k["clock_ghz"], "label": "modelled"})
    return rows + chase_rows(p) + bandwidth_rows(p)


def table(rows) -> str:
    w = max(len(r["case"]) for r in rows)
    out = [f"{'case':<{w}}  modelled  expected  what"]
    for r in rows:
        out.append(f"{r['case']:<{w}}  {r['modelled_cycles']:8.2f}  {r['expected_cycles']:8.1f}  {r['what']}")
    return "\n".join(out)
