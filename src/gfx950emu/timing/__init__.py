"""gfx950emu.timing: an issue-level, cycle-approximate clock for the emulator (CDNA4 CU + MI355X grid).

    res = gfx950emu.launch(prog, grid, block, args, timing=True, flops=2*M*N*K)
    res.timing["cycles"], res.timing["kernel"]["tflops"]      # modelled, with model_version and clock_ghz

``timing=True`` runs only a sample of the workgroups (by default those the first CU receives, see
:func:`first_cu_workgroups`) through :class:`~gfx950emu.timing.cu.CU` and extrapolates to the grid
with :mod:`gfx950emu.timing.grid`.  Buffers are written only by the sampled workgroups.  Before the
run, :mod:`gfx950emu.timing.probe` runs the sampled workgroup functionally (writes suppressed) and
the prologue + first loop trip of the workgroups that share its XCD and round, to read off which
lines they share (the L2 model of :mod:`gfx950emu.timing.memory`).  Every parameter is in
``gfx950.toml`` with its unit and public source; every mechanism has a switch there
(``[mechanisms]``).  ``python -m gfx950emu.timing`` runs any ``.s`` file.

``res.timing`` (JSON-ready; cycles are core clocks):

* ``cycles`` -- the first sampled workgroup, first wave start to last wave end; ``wave_cycles`` per wave;
* ``mfma_count`` -- MFMAs executed by the sampled workgroups;
* ``cycles_per_mfma_loop`` -- median hot-loop iteration (wave 0) / (MFMAs in the loop body x waves per
  SIMD); 16.0 is the FP4 16x16x128 ideal; ``hot_loop`` = {first_line, last_line, iterations_wave0};
* ``mfma_busy`` -- per SIMD, fraction of the CU's span its MFMA pipe is busy;
* ``exposed`` -- cycles no MFMA covers, per SIMD (mean over the SIMDs that run MFMAs), by reason:
  ``vmcnt``, ``lgkmcnt``, ``barrier``, ``dependency`` (MFMA-result wait states, s_nop), ``issue`` (the
  wave was issuing other instructions, one per 4-cycle slot), ``lds_bank`` (LDS queue full: bank
  conflicts / bandwidth), ``other`` (VMEM queue full, the workgroup's last wave draining);
  ``busy + sum(exposed)`` = the span per SIMD;
* ``by_instruction`` -- per instruction of the hot loop: index, line, opcode, issue_cycle (relative to
  the start of a middle iteration, wave 0), stall_cycles (mean per execution over all waves), reason
  (the dominant one: the ``exposed`` reasons plus ``mfma_pipe`` / ``vmem_pipe``);
* ``kernel`` -- the grid: us, tflops, bound (compute|memory), clock_ghz, rounds, bytes_hbm, bytes_l2,
  compute_us, compute_cycles, cold_cycles (the CU's once-only I-cache fill, not scaled by rounds),
  memory_us, launch_us, ramp_us (wave-launch ramp of a round), flops, flops_source (caller|mfma), cus,
  workgroups_first_cu, footprint_bytes_per_workgroup;
* ``memory`` -- the hierarchy's counters: line hits per level (``l1``, ``l2``, ``l2_shared``, ``mall``,
  ``hbm``, ``store``), bytes through each bandwidth share, ``hbm_fraction``, ``sharing_mean``,
  ``active_cus``, ``probed_workgroups``, ``icache_misses``, ``icache_stall_cycles``, ``code_bytes``;
* ``activity`` -- per event class what the sampled workgroups executed (``valu``, ``salu``, ``mfma``,
  ``mfma_passes``, ``vmem``, ``vmem_bytes``, ``lds``, ``lds_bytes``, ``smem``, ``branch``, ``other``):
  the input of a power-limited clock (:func:`gfx950emu.timing.grid.core_clock_ghz`);
* ``sampled_workgroups``, ``workgroups_simulated``, ``occupancy_workgroups_per_cu``, ``grid_workgroups``,
  ``lds_conflict_cycles``, ``cu_cycles``, ``label`` ("modelled"), ``model_version``, ``clock_ghz``;
* ``trace_events`` (only with ``timing_trace=True``): [workgroup, wave, simd, instruction, issue, end, kind]
  -- :mod:`gfx950emu.timing.trace` turns them into a Chrome trace / Perfetto JSON.
"""
from __future__ import annotations

import statistics

import numpy as np

from . import grid as _grid
from .cu import CU, REASONS, analyse
from .params import PARAMS_FILE, Params, table

LABEL = "modelled"


def model_version(params: Params | None = None) -> str:
    return (params or Params()).version


def first_cu_workgroups(wgs: list, params: Params, occupancy: int = 1) -> list:
    """The workgroups (in dispatch order) the first CU (XCD 0, CU 0) receives: linear workgroup
    ``i`` goes to XCD ``i % xcds`` (round robin), the XCD's ``j``-th workgroup to CU ``j % cus_per_xcd``."""
    xcds, cus = int(params.device_xcds), int(params.device_cus_per_xcd)
    return [wg for i, wg in enumerate(wgs) if i % xcds == 0 and (i // xcds) % cus == 0]


def _hot_loop(prog, counts):
    """(first, last) instruction index of the most executed backward branch's loop, or None."""
    labels = prog.source.labels
    best = None
    for i, ins in enumerate(prog.instructions):
        if not ins.opcode.startswith(("s_branch", "s_cbranch")) or not ins.operands:
            continue
        lab = ins.operands[0].value
        tgt = labels.get(lab)
        if tgt is None or tgt > i:
            continue
        if counts[i] > 1 and (best is None or counts[i] > best[0]):
            best = (int(counts[i]), tgt, i)
    return (best[1], best[2]) if best else None


class track_touched:
    """Records which argument buffers (and 128-byte lines) the sampled workgroups' VMEM ops touch,
    by wrapping the launch memory's address checks (``starts`` / ``offsets``) while the model runs."""

    LINE = 128

    def __init__(self, mem):
        self.mem = mem
        self.lines = set()
        self.regions = set()
        self.capture = None     # a list while the CU model / a probe reads one instruction's accesses
        self.mute = False       # probes: no footprint bookkeeping
        self._starts, self._offsets = mem.starts, mem.offsets
        mem.starts = self._wrap(self._starts)
        mem.offsets = self._wrap(self._offsets)

    def _wrap(self, fn):
        def f(addrs, nbytes, line):
            out = fn(addrs, nbytes, line)
            if self.capture is not None:
                self.capture.append((out, nbytes))
            if self.mute:
                return out
            if out.size:
                off = (out[:, 0] if out.ndim == 2 else out).astype(np.int64)
                self.lines.update(np.unique(off // self.LINE).tolist())
                st = self.mem._starts
                self.regions.update(np.unique(np.searchsorted(st, off, side="right") - 1).tolist())
            return out
        return f

    def regions_of(self, capture) -> set:
        st = self.mem._starts
        out = set()
        for off, _ in capture or ():
            off = np.asarray(off, dtype=np.int64)
            off = off[:, 0] if off.ndim == 2 else off
            if off.size:
                out.update(np.unique(np.searchsorted(st, off, side="right") - 1).tolist())
        return out

    def region_bytes(self, regions) -> int:
        tot = 0
        for k in regions:
            if 0 <= k < len(self.mem.regions):
                name, _, n = self.mem.regions[k]
                if name.startswith("arg"):
                    tot += int(n)
        return tot

    def detach(self):
        self.mem.starts, self.mem.offsets = self._starts, self._offsets

    def buffer_bytes(self) -> int:
        """Total size of the argument buffers touched (kernarg / dispatch packet excluded)."""
        tot = 0
        for k in self.regions:
            if 0 <= k < len(self.mem.regions):
                name, _, n = self.mem.regions[k]
                if name.startswith("arg"):
                    tot += int(n)
        return tot


def _memory(L, p, prog, static, wgs, chosen, make_waves, occ, clk, touched, probe_waves):
    """The CU's memory hierarchy: active CUs (bandwidth shares), the L2 sharing degree per VMEM
    instruction from address probes of the co-resident workgroups, the grid's HBM fraction."""
    from . import probe as _probe
    from .memory import Hierarchy
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    n = len(wgs)
    active = max(1, min(ncu, n))
    active_xcd = max(1, min(int(p.device_cus_per_xcd), -(-n // int(p.device_xcds))))
    info = {"active_cus": active, "active_cus_per_xcd": active_xcd, "probed_workgroups": 0}
    sharing, frac = None, 1.0
    if p.mechanisms_memory_hierarchy and touched is not None and probe_waves is not None and chosen and n > 1:
        index = {tuple(wg): k for k, wg in enumerate(wgs)}
        s0 = tuple(chosen[0])
        me = _probe.probe(prog, static, s0, probe_waves, touched, full=True)
        if True:
            others_idx = _probe.co_resident(wgs, index[s0], p, occ) if p.mechanisms_l2_sharing else []
            cap = int(p.memory_probe_max_workgroups)
            pick = others_idx if len(others_idx) <= cap else \
                [others_idx[int(k * len(others_idx) / cap)] for k in range(cap)]
            first = {i: ls for i, ls in me["lines"].items()}
            others = [_probe.probe(prog, static, tuple(wgs[j]), probe_waves, touched, targets=me["seen"])
                      for j in pick]
            sharing = _probe.sharing(first, others, len(others_idx)) if others_idx else {}
            info["probed_workgroups"] = len(others) + 1
            # grid bytes fetched beyond L2 (each line once per XCD's sharers) vs the compulsory bytes
            beyond = n * sum(me["bytes"][i] / (sharing or {}).get(i, 1) for i in me["bytes"]
                             if not static[i].store)
            compulsory = touched.region_bytes(me["regions"])
            if compulsory > float(p.device_mall_bytes) or beyond <= 0:
                frac = 1.0
            else:
                frac = min(1.0, compulsory / beyond)
            info.update(beyond_l2_bytes_grid=int(beyond), compulsory_bytes=int(compulsory))
    mem = Hierarchy(p, clk, active_cus=active, active_cus_xcd=active_xcd, sharing=sharing, hbm_fraction=frac)
    return mem, info


def simulate(L, wgs, make_waves, *, sample=None, flops=None, params=None, overrides=None, trace=False,
             occupancy=None, touched=None, probe_waves=None) -> dict:
    """Run the timing model for launch state ``L`` (machine._Launch) over workgroup list ``wgs``;
    returns the JSON-ready ``res.timing`` dict."""
    p = params or Params(overrides=overrides)
    prog = L.prog
    nwaves = (L.block[0] * L.block[1] * L.block[2] + 63) // 64
    occ = occupancy or _grid.occupancy(prog, nwaves, L.lds_size, p)
    if sample is None:
        chosen = first_cu_workgroups(wgs, p, occ)
    elif isinstance(sample, int) and not isinstance(sample, bool):
        if sample < 1:
            raise ValueError(f"timing sample must be a positive number of workgroups, got {sample}")
        chosen = first_cu_workgroups(wgs, p, occ)[:sample]
    else:
        chosen = [tuple(x) for x in sample]
        for wg in chosen:
            if wg not in set(wgs):
                raise ValueError(f"sampled workgroup {wg} is not in the grid")
    share = len(first_cu_workgroups(wgs, p, occ))
    static = analyse(prog, p)
    clk = _grid.core_clock_ghz(p)
    mem, mem_info = _memory(L, p, prog, static, wgs, chosen, make_waves, occ, clk, touched, probe_waves)
    cu = CU(prog, p, static, make_waves, occ, trace=trace, mem=mem, touched=touched, clock_ghz=clk,
            round0=occ)
    with np.errstate(all="ignore"):
        cu.run(chosen)
    out = summarise(prog, p, cu, nwaves)
    out["memory"] = {**mem_info, **mem.stats(), "icache_misses": cu.ic_misses,
                     "icache_stall_cycles": int(cu.ic_stall),
                     "code_bytes": int(static[-1].code_off + static[-1].code_bytes) if static else 0}
    out["activity"] = {k: int(v) for k, v in cu.activity.items()}
    out["sampled_workgroups"] = [list(map(int, wg)) for wg in chosen]
    sim_cycles = max(r["end"] for r in cu.wg_records)
    kern = _grid.kernel(p, prog, L, n_wg=len(wgs), share=share, sampled=len(chosen), sim_cycles=sim_cycles,
                        occupancy=occ, vmem_bytes=cu.vmem_bytes, mfma_flops=cu.mfma_flops,
                        flops=flops, touched=touched, nwaves=nwaves, activity=out["activity"],
                        cold_cycles=cu.exposed_ifetch / max(1, sum(1 for f in cu.simd_first if f is not None)))
    out["kernel"] = kern
    out["occupancy_workgroups_per_cu"] = occ
    out["grid_workgroups"] = len(wgs)
    out["label"] = LABEL
    out["model_version"] = p.version
    out["clock_ghz"] = kern["clock_ghz"]
    if trace:
        out["trace_events"] = [list(e) for e in cu.trace]
    return out


def summarise(prog, p, cu, nwaves) -> dict:
    """The CU part of ``res.timing``."""
    recs = cu.wave_records
    counts = np.zeros(len(prog.decoded), dtype=np.int64)
    for tw in recs:
        counts += tw.w.counts[:-1]
    wg0 = cu.wg_records[0]
    t0 = min(tw.start for tw in wg0["waves"])
    t1 = max(tw.end for tw in wg0["waves"])
    wave_cycles = [int(tw.end - tw.start) for tw in sorted(wg0["waves"], key=lambda x: x.w.id)]
    span = max(1, t1 - t0)
    total_span = max(1, max(tw.end for tw in recs) - min(tw.start for tw in recs))
    used = [s for s in range(cu.nsimd) if cu.simd_first[s] is not None]
    nused = max(1, len(used))
    exposed = {r: int(round(cu.exposed[r] / nused)) for r in REASONS}
    hot = _hot_loop(prog, counts)
    waves_per_simd = max(1, -(-nwaves * cu.occ // cu.nsimd))
    by_ins = []
    cpm = None
    if hot is not None:
        a, b = hot
        heads = cu.issue_rel.get(a, [])
        n_mfma = sum(1 for i in range(a, b + 1) if cu.st[i].kind == "mfma")
        if len(heads) >= 2:
            diffs = np.diff(heads)
            iter_len = float(np.median(diffs))
            if n_mfma:
                cpm = iter_len / (n_mfma * min(waves_per_simd, nwaves))
            mid = len(heads) // 2
            base = heads[mid]
            nxt = heads[mid + 1] if mid + 1 < len(heads) else None
        else:
            base, nxt = (heads[0] if heads else 0), None
        for i in range(a, b + 1):
            st = cu.st[i]
            times = cu.issue_rel.get(i, [])
            rel = None
            for x in times:
                if x >= base and (nxt is None or x < nxt):
                    rel = int(x - base)
                    break
            n = int(cu.count_by_ins[i])
            rb = cu.reason_by_ins[i]
            by_ins.append({
                "index": i, "line": st.line, "opcode": st.opcode, "issue_cycle": rel,
                "stall_cycles": round(float(cu.stall_by_ins[i]) / n, 2) if n else 0.0,
                "reason": max(rb, key=rb.get) if rb else None,
            })
    if cpm is None and cu.mfma_count:
        cpm = span / (cu.mfma_count / max(1, len(cu.wg_records)) / nused)
    return {
        "cycles": int(span),
        "wave_cycles": wave_cycles,
        "mfma_count": int(cu.mfma_count),
        "cycles_per_mfma_loop": round(cpm, 3) if cpm is not None else None,
        "mfma_busy": [round(cu.mfma_busy[s] / total_span, 4) for s in range(cu.nsimd)],
        "exposed": exposed,
        "by_instruction": by_ins,
        "hot_loop": {"first_line": prog.decoded[hot[0]].line, "last_line": prog.decoded[hot[1]].line,
                     "iterations_wave0": len(cu.issue_rel.get(hot[0], []))} if hot else None,
        "lds_conflict_cycles": int(cu.lds_conflict_cycles),
        "cu_cycles": int(total_span),
        "workgroups_simulated": len(cu.wg_records),
    }


__all__ = ["simulate", "Params", "table", "PARAMS_FILE", "first_cu_workgroups", "LABEL", "model_version"]
