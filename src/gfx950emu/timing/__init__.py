"""gfx950emu.timing: an issue-level, cycle-approximate clock for the emulator (CDNA4 CU + MI355X grid).

    res = gfx950emu.launch(prog, grid, block, args, timing=True, flops=2*M*N*K)
    res.timing["cycles"], res.timing["kernel"]["tflops"]      # modelled, with model_version and clock_ghz

``timing=True`` runs only a sample of the workgroups (by default those the first CU receives, see
:func:`first_cu_workgroups`) through :class:`~gfx950emu.timing.cu.CU` and extrapolates to the grid
with :mod:`gfx950emu.timing.grid`.  Buffers are written only by the sampled workgroups.  Every
parameter is in ``gfx950.toml`` with its unit and public source.  ``python -m gfx950emu.timing``
runs any ``.s`` file.

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
  compute_us, compute_cycles, memory_us (the chip's floor), memory_exposed_us (what the memory path and
  floor add to the compute path), launch_us, flops, flops_source (caller|mfma), cus, workgroups_first_cu,
  footprint_bytes_per_workgroup, ``memory`` (the sampled CU's VMEM stream for
  :mod:`gfx950emu.timing.memory`: bytes per 128-cycle bin weighted by each buffer's miss share, the
  compulsory bytes);
* ``activity`` -- event counts of the sampled workgroups for the power-limited clock
  (:mod:`gfx950emu.timing.power`: MFMA passes, operand bytes read with and without operand reuse,
  LDS / VMEM bytes, VALU instructions); ``kernel["power"]`` says the clock it gave when ``[power]``
  is enabled;
* ``caches`` -- vector loads that looked their lines up in the CU's vector L1 and how many hit (all
  their lines), the same for scalar loads in the scalar L1, and for the accesses past the vector L1
  in the CU's share of the L2 (``l2_share_*``; ``[vmem].l1_cache`` / ``scalar_cache`` / ``l2_cache``);
* ``sampled_workgroups``, ``workgroups_simulated``, ``occupancy_workgroups_per_cu``, ``grid_workgroups``,
  ``lds_conflict_cycles``, ``cu_cycles``, ``label`` ("modelled"), ``model_version``, ``clock_ghz``;
* ``trace_events`` (only with ``timing_trace=True``): [workgroup, wave, simd, instruction, issue, end, kind]
  -- :mod:`gfx950emu.timing.trace` turns them into a Chrome trace / Perfetto JSON.
"""
from __future__ import annotations

import statistics

import numpy as np

from . import grid as _grid
from . import power as _power
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
    by wrapping the launch memory's address checks (``starts`` / ``offsets``) while the model runs.

    The touched offsets are collected as arrays and folded into the ``lines`` / ``regions`` sets in
    batches (a ``np.unique`` per VMEM op was a large share of a timing run)."""

    LINE = 128
    FOLD = 1 << 20          # offsets collected before they are folded into the sets

    def __init__(self, mem):
        self.mem = mem
        self._lines = set()
        self._regions = set()
        self._pending = []
        self._npending = 0
        self._last = None       # heap offset of the first lane of the last access (see take_region)
        self._since = []        # the lanes' heap offsets of the accesses since take_offsets (the caches)
        self._starts, self._offsets = mem.starts, mem.offsets
        mem.starts = self._wrap(self._starts)
        mem.offsets = self._wrap(self._offsets)

    def _wrap(self, fn):
        pending = self._pending

        def f(addrs, nbytes, line):
            out = fn(addrs, nbytes, line)
            if out.size:
                first = out[:, 0] if out.ndim == 2 else out
                self._last = int(first[0])
                first = first.astype(np.int64)
                self._since.append(first)
                pending.append(first)
                self._npending += out.shape[0]
                if self._npending > self.FOLD:
                    self._fold()
            return out
        return f

    def _fold(self):
        if self._pending:
            off = np.concatenate(self._pending)
            self._pending.clear()
            self._npending = 0
            self._lines.update(np.unique(off // self.LINE).tolist())
            self._regions.update(np.unique(np.searchsorted(self.mem._starts, off, side="right") - 1).tolist())

    @property
    def lines(self) -> set:
        """The 128-byte lines (heap offset // LINE) touched so far."""
        self._fold()
        return self._lines

    @property
    def regions(self) -> set:
        """The memory regions (indices into ``mem.regions``) touched so far."""
        self._fold()
        return self._regions

    def take_region(self) -> int:
        """The memory region (index into ``mem.regions``) the last access since the previous call
        addressed (its first lane), or -1 when nothing was accessed (no active lane)."""
        off, self._last = self._last, None
        if off is None:
            return -1
        return int(np.searchsorted(self.mem._starts, off, side="right") - 1)

    def take_offsets(self):
        """The heap offsets (int64, one per active lane) the accesses since the previous call addressed,
        or None when nothing was accessed."""
        since, self._since = self._since, []
        if not since:
            return None
        return since[0] if len(since) == 1 else np.concatenate(since)

    def region_lines(self) -> dict:
        """``{region index: touched 128-byte lines}`` of the argument buffers."""
        lines = np.fromiter(self.lines, dtype=np.int64, count=len(self.lines))
        reg = np.searchsorted(self.mem._starts, lines * self.LINE, side="right") - 1
        ks, counts = np.unique(reg, return_counts=True)
        return {int(k): int(c) for k, c in zip(ks, counts) if 0 <= k < len(self.mem.regions)
                and self.mem.regions[k][0].startswith("arg")}

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


def simulate(L, wgs, make_waves, *, sample=None, flops=None, params=None, overrides=None, trace=False,
             occupancy=None, touched=None) -> dict:
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
    cu = CU(prog, p, static, make_waves, occ, trace=trace, probe=touched)
    with np.errstate(all="ignore"):
        cu.run(chosen)
    out = summarise(prog, p, cu, nwaves)
    out["sampled_workgroups"] = [list(map(int, wg)) for wg in chosen]
    sim_cycles = max(r["end"] for r in cu.wg_records)
    ncu = int(p.device_xcds) * int(p.device_cus_per_xcd)
    memory = _grid.memory_record(cu, touched, n_wg=len(wgs), sampled=len(chosen), occupancy=occ,
                                 sim_cycles=sim_cycles, cus=ncu)
    kern = _grid.kernel(p, prog, L, n_wg=len(wgs), share=share, sampled=len(chosen), sim_cycles=sim_cycles,
                        occupancy=occ, vmem_bytes=cu.vmem_bytes, mfma_flops=cu.mfma_flops,
                        flops=flops, touched=touched, memory=memory)
    # the one place cycles become seconds besides grid.kernel: the power-limited clock (power.py);
    # a no-op while [power].enabled is false
    out["activity"] = _power.activity(prog, static, cu.count_by_ins, sim_cycles=sim_cycles, n_wg=len(wgs),
                                      sampled=len(chosen))
    kern = _power.apply(kern, out["activity"], p)
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
        "caches": {"vector_l1_loads": int(cu.l1_loads), "vector_l1_hits": int(cu.l1_hits),
                   "scalar_loads": int(cu.sl1_loads), "scalar_hits": int(cu.sl1_hits),
                   "l2_share_lookups": int(cu.l2_lookups), "l2_share_hits": int(cu.l2_hits)},
    }


__all__ = ["simulate", "Params", "table", "PARAMS_FILE", "first_cu_workgroups", "LABEL", "model_version"]
