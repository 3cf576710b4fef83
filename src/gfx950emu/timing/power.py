"""gfx950emu.timing.power: a power-limited sustained clock (MI355X), applied after the cycle simulation.

Why: MI300-class parts run dense GEMMs far below their peak clock because they are power-capped
(AMD ROCm blog "Measuring Max-Achievable FLOPs", part 2: MI300X GEMMs at 1115-1230 MHz of 2.1 GHz,
the clock rising on low-toggle data; MI355X: 1.4 kW board, 2.4 GHz peak, CDNA4 white paper).  A
constant clock over-states every gain: a kernel that keeps the MFMA pipes busier draws more power and
runs at a lower clock.

The model (every parameter in ``gfx950.toml`` ``[power]``, with its source or its fit)::

    activity a   = sum over events of weight x count / CU cycle   (in "FP4-MFMA units", see below)
    dynamic P    ~ u x a x f^3                (P = C V^2 f with V ~ f in the DVFS range)
    board cap    : u x a x f^3 <= a_ref x f_ref^3
    f            = min(f_boost, f_ref x (a_ref / (u x a))^(1/3))
    kernel us    = compute_cycles / f  (or the memory path / floor, grid.times)  + rounds x round_overhead_us + launch_us

* ``u`` = the share of CUs that hold a workgroup (a 16-workgroup decode launch lights 16 of 256 CUs:
  it runs at the boost clock); ``a_ref`` = 0.25, the activity of a CU whose 4 SIMDs each issue one
  4-pass FP4 MFMA every 16 cycles and nothing else; ``f_ref`` (fitted) is the clock the board
  sustains at that activity -- it absorbs board power, static power and the MFMA's energy, which the
  fit set cannot tell apart (only their ratio sets the clock);
* weights, relative to one FP4 16x16x128 MFMA (4 passes): an MFMA ``passes / 4`` (energy ~ datapath
  busy time, [LLVM-SCHED] pass counts); one operand byte read from the VGPR/AGPR file
  ``operand_weight_per_byte`` (fitted: the channel through which an MFMA order that reuses an operand
  -- ``serpentine`` -- saves power; ROCm Tensile PR #1823: "using same source for MFMA is a little
  power efficient"); LDS, VMEM (L2) bytes and VALU operand bytes relative to a register-file byte by
  the SRAM-size ratios of Horowitz (ISSCC 2014, "Computing's energy problem": 64-bit read of an 8 KB
  SRAM 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ);
* operand reuse: an MFMA's A (B) operand is not re-read when it names the same registers as the
  previous MFMA of the wave (program order; at the loop's back edge the loop's last MFMA).

``[power].enabled = false`` leaves every figure exactly as the constant ``[clock].sustained_ghz``
gives it (:func:`apply` returns the kernel dict unchanged).  Nothing here re-runs the cycle
simulation: :func:`apply` needs only the kernel dict and the ``activity`` dict of ``res.timing``, so
a fit (``mxfp4_ablation.calibration``) re-evaluates cached results.
"""
from __future__ import annotations

import math

#: activity of a CU whose 4 SIMDs each run one 4-pass FP4 MFMA every 16 cycles (nothing else)
A_REF = 0.25


def enabled(p) -> bool:
    return bool(getattr(p, "power_enabled", False))


def _reg_bytes(op) -> int:
    """Bytes a wave64 reads for one register operand (VGPR/AGPR): registers x 4 B x 64 lanes."""
    if op.kind not in ("v", "a"):
        return 0
    return int(op.count) * 4 * 64


def activity(prog, static, counts, *, sim_cycles: int, n_wg: int, sampled: int) -> dict:
    """Event counts of the sampled workgroups (``counts`` = executions per instruction, all waves),
    per the weights' classes: MFMA passes, operand bytes read (with reuse), LDS bytes, VMEM bytes,
    VALU instructions.  JSON-ready; :func:`apply` turns it into a clock."""
    n = len(static)
    mfma_idx = [i for i in range(n) if static[i].kind == "mfma"]
    # previous MFMA in program order (the loop's back edge closes the ring: the first MFMA's
    # predecessor is the last one, which is what a loop iteration sees)
    prev = {}
    for j, i in enumerate(mfma_idx):
        prev[i] = mfma_idx[j - 1] if j else (mfma_idx[-1] if len(mfma_idx) > 1 else None)
    mfma_passes = 0.0
    mfma_n = 0
    op_bytes = 0.0
    op_bytes_noreuse = 0.0
    reuse_pairs = 0
    lds_bytes = 0.0
    vmem_bytes = 0.0
    valu_n = 0
    for i in range(n):
        c = int(counts[i])
        if not c:
            continue
        st = static[i]
        if st.kind == "mfma":
            o = prog.instructions[i].operands
            mfma_n += c
            mfma_passes += c * st.passes
            sizes = [_reg_bytes(x) for x in o[1:]]  # A, B, C, scale A, scale B
            full = float(sum(sizes))
            op_bytes_noreuse += c * full
            saved = 0
            j = prev.get(i)
            if j is not None:
                q = prog.instructions[j].operands
                for k in (1, 2):  # A and B
                    if o[k].kind in ("v", "a") and (o[k].kind, o[k].index, o[k].count) == \
                            (q[k].kind, q[k].index, q[k].count):
                        saved += sizes[k - 1]
                reuse_pairs += c if saved else 0
            op_bytes += c * (full - saved)
        elif st.kind == "lds":
            lds_bytes += c * st.nbytes * 64
        elif st.kind == "vmem":
            vmem_bytes += c * st.nbytes * 64
        elif st.kind == "valu":
            valu_n += c
    return {"mfma": int(mfma_n), "mfma_passes": float(mfma_passes), "operand_bytes": float(op_bytes),
            "operand_bytes_without_reuse": float(op_bytes_noreuse), "mfma_reuse_pairs": int(reuse_pairs),
            "lds_bytes": float(lds_bytes), "vmem_bytes": float(vmem_bytes), "valu": int(valu_n),
            "sim_cycles": int(sim_cycles), "n_wg": int(n_wg), "sampled": int(sampled)}


def units(act: dict, p) -> float:
    """The sampled workgroups' activity in FP4-MFMA units (see the module doc)."""
    w = float(p.power_operand_weight_per_byte)
    rf = act["operand_bytes"] + float(p.power_lds_byte_over_rf) * act["lds_bytes"] \
        + float(p.power_vmem_byte_over_rf) * act["vmem_bytes"] \
        + float(p.power_valu_rf_bytes) * act["valu"]
    return act["mfma_passes"] / 4.0 + w * rf


def clock(kern: dict, act: dict, p) -> dict:
    """``{"clock_ghz", "limited", "activity_per_cycle", "cu_share"}`` of one kernel: the board-limited
    clock, iterated with the memory floor (a memory-bound kernel spreads its events over more time)."""
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    u = min(1.0, act["n_wg"] / ncu) if act.get("n_wg") else 1.0
    a0 = units(act, p) / max(1, act["sim_cycles"])  # per CU cycle while the CU computes
    f_ref, f_max = float(p.power_ref_ghz), float(p.clock_peak_ghz)
    from . import grid as _grid

    f = f_max
    for _ in range(8):
        k = _grid.times(kern, f, p)
        duty = min(1.0, k["compute_us"] / max(1e-12, k["queue_us"], k["memory_us"]))
        a = u * a0 * duty
        f_new = f_max if a <= 0 else min(f_max, f_ref * (A_REF / a) ** (1.0 / 3.0))
        if abs(f_new - f) < 1e-6:
            break
        f = f_new
    return {"clock_ghz": round(f, 4), "limited": bool(f < f_max - 1e-9), "activity_per_cycle": round(a0, 5),
            "cu_share": round(u, 4), "clock_ghz_exact": f}


def time_us(kern: dict, act: dict, p) -> float:
    """The kernel time (us) at the power-limited clock, unrounded (what a fit differentiates)."""
    from . import grid as _grid

    f = clock(kern, act, p)["clock_ghz_exact"]
    return _grid.times(kern, f, p)["us"] + float(p.power_round_overhead_us) * int(kern.get("rounds", 1) or 1)


def apply(kern: dict, act: dict | None, p) -> dict:
    """The kernel dict at the power-limited clock, plus the per-round overhead; unchanged when
    ``[power].enabled`` is false (or no activity was recorded)."""
    if not enabled(p) or not act:
        return kern
    c = clock(kern, act, p)
    from . import grid as _grid

    out = _grid.at_clock(kern, c.pop("clock_ghz_exact"), p)
    out["clock_ghz"] = c["clock_ghz"]
    extra = float(p.power_round_overhead_us) * int(kern.get("rounds", 1) or 1)
    us = out["us"] + extra
    out.update(us=round(us, 3), tflops=round(kern["flops"] / (us * 1e-6) / 1e12, 2),
               round_overhead_us=round(extra, 3), power=c)
    return out


def evaluate(kern: dict, act: dict | None, p) -> dict:
    """A (cached) kernel dict at ``p``'s post-hoc parameters: :func:`apply` with the power clock on, the
    constant ``[clock].sustained_ghz`` (no power figures) with it off; ``[memory]`` either way."""
    from . import grid as _grid

    if enabled(p):
        return apply(kern, act, p)
    return {k: v for k, v in _grid.at_clock(kern, p.clock_sustained_ghz, p).items()
            if k not in ("power", "round_overhead_us")}


def evaluate_us(kern: dict, act: dict | None, p) -> float:
    """:func:`evaluate`'s kernel time, unrounded (what a fit differentiates)."""
    from . import grid as _grid

    if enabled(p):
        return time_us(kern, act, p)
    return _grid.times(kern, p.clock_sustained_ghz, p)["us"]


__all__ = ["activity", "apply", "clock", "evaluate", "evaluate_us", "time_us", "units", "enabled", "A_REF"]
