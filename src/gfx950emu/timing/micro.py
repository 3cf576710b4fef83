"""Micro-kernels: the timing model against its own documented values, and against hardware.

Each case is a tiny hand-written gfx950 kernel (one wave64) run with ``timing=True``; the measured
quantity is read off the model's timeline.

* :func:`run` -- internal consistency: ``expected`` is what the cited parameter values say the pipes
  must give (run with the I-cache and the memory hierarchy switched off, so a fixed
  ``vmem.latency_cycles`` stands for memory: the pipe arithmetic is what is checked);
* :func:`run_hardware` -- the full model (every mechanism on) against a *published* hardware
  measurement per latency / throughput the model uses (gfx950 where one exists, else MI300X),
  in the published unit.  ``by_construction`` marks rows whose published value is also the model's
  parameter (there the check is that the rest of the path -- issue, data cycles, waits -- adds
  little); the others are independent.

    python -m gfx950emu.timing --micro          # prints the tables
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
    out.append(("lds_dma_stream", dma, ("gap", "vmem", "valu"),
                _up((N - 1) * per + 256 // l1 + vm_lat + 256 // int(p.lds_dma_write_bytes_per_clock), slot) + slot,
                f"{N} x buffer_load_dword ... lds (256 B each) then s_waitcnt vmcnt(0): first DMA issue to the "
                "next instruction"))
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


#: the switches the internal-consistency cases run with (pipe arithmetic, fixed memory latency)
CONSISTENCY = {"mechanisms.icache": 0, "mechanisms.memory_hierarchy": 0, "mechanisms.smem_ns": 0}


def run(p: Params | None = None) -> list:
    """Run every case; rows of {case, modelled_cycles, expected_cycles, what}."""
    import gfx950emu
    p = p or Params(overrides=CONSISTENCY)
    rows = []
    buf = np.zeros(1 << 20, dtype=np.uint8)
    base = Params().values
    for name, body, what, expected, text in cases(p):
        prog = gfx950emu.load(kernel_text(body))
        res = gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True,
                               timing_params={k: v for k, v in p.values.items() if v != base.get(k)} or None)
        rows.append({"case": name, "modelled_cycles": measure(res, what), "expected_cycles": float(expected),
                     "what": text, "model_version": p.version, "label": "modelled"})
    return rows


def table(rows) -> str:
    w = max(len(r["case"]) for r in rows)
    out = [f"{'case':<{w}}  modelled  expected  what"]
    for r in rows:
        out.append(f"{r['case']:<{w}}  {r['modelled_cycles']:8.2f}  {r['expected_cycles']:8.1f}  {r['what']}")
    return "\n".join(out)


# ------------------------------------------------------------------ against hardware ----
#: published measurements: (value, unit, source, by_construction)
PUBLISHED = {
    "l1_hit_latency": (57.0, "ns", "[CNC-MI300X] vector L1 hit latency (MI300X, CDNA3; read off the plot)", True),
    "l2_hit_latency": (118.0, "ns", "[CNC-MI300X] / [MALL-SC25] L2 hit latency (MI300X, CDNA3)", True),
    "hbm_latency": (350.0, "ns", "[CNC-MI300X] / [MALL-SC25] HBM latency, MALL miss (MI300X, CDNA3)", True),
    "scalar_hit_latency": (30.0, "ns", "[MALL-SC25] scalar L1 hit latency order (MI300X, CDNA3)", True),
    "lds_latency": (30.0, "ns", "[CNC-MI300X] LDS latency order (~64 cycles at 2.1 GHz, MI300X)", True),
    "valu_dependent_chain": (8.0, "cycles/op", "[TRITON-LAT] gfx950 dependent VALU latency", True),
    "fp4_mfma_rate": (10.1, "PFLOPS at 2.4 GHz, 256 CUs",
                      "[CDNA4-WP] MI355X MXFP4 dense peak 10.1 PFLOPS (16x16x128 FP4 MFMA stream)", False),
    "fp8_mfma_rate": (5.0, "PFLOPS at 2.4 GHz, 256 CUs",
                      "[CDNA4-WP] MI355X FP8 dense peak 5.0 PFLOPS (16x16x128 FP8 MFMA stream)", False),
}


def _hw_cases():
    """[(name, body, how)]: ``how`` = ("gap", first kind, index of first, last kind) or
    ("interval", kind) or ("chain", kind)."""
    out = []
    ld = "buffer_load_dword v1, v40, s[4:7], 0 offen"
    use = "v_mov_b32_e32 v2, v1"
    # L1 hit: the same line twice (the first miss fills L1)
    out.append(("l1_hit_latency", [ld, "s_waitcnt vmcnt(0)", use, ld, "s_waitcnt vmcnt(0)", use],
                ("gap", "vmem", 1, "valu", 0)))
    # L2 hit: a store writes the line through to L2 without allocating in L1; the load hits L2
    st = "buffer_store_dword v40, v40, s[4:7], 0 offen offset:4096"
    ld2 = "buffer_load_dword v1, v40, s[4:7], 0 offen offset:4096"
    out.append(("l2_hit_latency", [st, "s_waitcnt vmcnt(0)", ld2, "s_waitcnt vmcnt(0)", use],
                ("gap", "vmem", 1, "valu", 0)))
    out.append(("hbm_latency", [ld, "s_waitcnt vmcnt(0)", use], ("gap", "vmem", 0, "valu", 0)))
    sl = "s_load_dword s10, s[0:1], 0x0"
    out.append(("scalar_hit_latency", [sl, "s_waitcnt lgkmcnt(0)", "s_mov_b32 s11, s10", sl, "s_waitcnt lgkmcnt(0)",
                                       "s_mov_b32 s11, s10"], ("gap", "smem", 1, "salu", 0)))
    out.append(("lds_latency", ["ds_read_b32 v1, v40", "s_waitcnt lgkmcnt(0)", use], ("gap", "lds", 0, "valu", 0)))
    out.append(("valu_dependent_chain", [f"v_add_u32_e32 v1, v1, v40" for _ in range(N)], ("interval", "valu")))
    out.append(("fp4_mfma_rate", [_mfma(_acc(j), _acc(j)) for j in range(N)], ("rate", 2 * 16 * 16 * 128)))
    out.append(("fp8_mfma_rate", [_mfma(_acc(j), _acc(j), fp8=True) for j in range(N)], ("rate", 2 * 16 * 16 * 128)))
    return out


def run_hardware(p: Params | None = None) -> list:
    """The full model's micro-kernel values against published hardware measurements (see the module doc)."""
    import gfx950emu
    p = p or Params()
    clk = float(p.clock_sustained_ghz)
    rows = []
    buf = np.zeros(1 << 20, dtype=np.uint8)
    base = Params().values
    for name, body, how in _hw_cases():
        prog = gfx950emu.load(kernel_text(body))
        res = gfx950emu.launch(prog, (1, 1, 1), (64, 1, 1), [buf], timing=True, timing_trace=True,
                               timing_params={**{k: v for k, v in p.values.items() if v != base.get(k)},
                                              "mechanisms.icache": 0})
        ev = [e for e in res.timing["trace_events"] if e[3] >= 9]        # the body (after kernel_text's set-up)
        if how[0] == "gap":
            firsts = [e[4] for e in ev if e[6] == how[1]]
            t0 = firsts[how[2]]
            lasts = [e[4] for e in ev if e[6] == how[3] and e[4] > t0]
            cyc = float(lasts[how[4]] - t0)
            val = cyc / clk
        elif how[0] == "interval":
            ts = [e[4] for e in ev if e[6] == how[1]]
            k = len(ts) // 4
            val = (ts[-1] - ts[k]) / (len(ts) - 1 - k)
        else:
            ts = [e[4] for e in ev if e[6] == "mfma"]
            k = len(ts) // 4
            per = (ts[-1] - ts[k]) / (len(ts) - 1 - k)           # cycles per MFMA on one SIMD
            val = how[1] / per * int(p.device_simds_per_cu) * 256 * 2.4e9 / 1e15
        pub, unit, src, by_c = PUBLISHED[name]
        rows.append({"case": name, "modelled": round(val, 2), "published": pub, "unit": unit,
                     "error_pct": round(100 * (val / pub - 1), 1), "by_construction": by_c, "source": src,
                     "model_version": p.version, "clock_ghz": clk, "label": "modelled"})
    return rows


def hardware_table(rows) -> str:
    w = max(len(r["case"]) for r in rows)
    out = [f"{'case':<{w}}  modelled  published  unit / source"]
    for r in rows:
        out.append(f"{r['case']:<{w}}  {r['modelled']:8.2f}  {r['published']:9.2f}  {r['unit']}; {r['source']}"
                   + ("  (by construction)" if r["by_construction"] else ""))
    return "\n".join(out)
