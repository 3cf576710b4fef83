"""Issue-level, cycle-approximate model of one CDNA4 compute unit.

The waves of the sampled workgroups execute their decoded handlers (the same functional
state as :func:`gfx950emu.launch`: real addresses, trip counts, EXEC) but in cycle order:

* per SIMD an issue slot every ``cycles_per_issue_slot`` clocks (SIMD ``s`` at cycles
  ``t % 4 == s``); in one slot at most one instruction of each type (VALU incl. MFMA, SALU,
  VMEM, LDS, SMEM, branch/message) and one per wave, oldest wave (then ``s_setprio``) first;
* per wave in-order issue, with a scoreboard: outstanding vmcnt ops (in order) and lgkmcnt ops
  (DS in order, SMEM any order) with completion cycles; register-ready cycles of MFMA results
  for VALU / VMEM / LDS / MFMA-A/B reads (gfx950 wait states of GCNHazardRecognizer);
* per SIMD one MFMA pipe: ``passes x 4`` cycles per MFMA, independent ops and exact SrcC chains
  back to back; VALU and other instructions issue in the MFMA's shadow;
* CU-wide pipes: VMEM (address issue + L2->L1 bytes/clock, in-order return per wave; the latency
  of a load whose lines all hit the CU's vector L1 -- an LRU over the lines of the real addresses --
  is the L1's; past the L1 the CU's share of its XCD's L2 holds the lines the CU itself touched
  (loads, stores, scratch), so a re-read hits there; any other access takes the one latency beyond
  (other CUs' lines in L2, MALL, HBM); ``buffer_load ... lds`` writes its data through the LDS
  pipe when it arrives), LDS (bank conflicts from the real lane addresses: per phase the busiest
  bank's count of distinct dwords), SMEM (scalar L1 hit or miss from the real address, LRU);
* ``s_waitcnt`` stalls until the counters allow (per VMEM op the cycle a wave first waited for it is
  kept, for the loaded latency of :mod:`.memory`), ``s_barrier`` joins the workgroup's waves,
  ``s_nop N`` costs N+1 wait states, ``s_sleep``, taken branches a refill penalty.

Left out: instruction fetch / I-cache (the GEMM hot loops fit in the I-cache), power and clock
throttling (:mod:`.power`, applied after), hits on lines other CUs brought into L2 or MALL (one
latency beyond the CU's own lines), TLB,
export/GDS, VALU register-bank conflicts, dual-issue of packed FP32.
"""
from __future__ import annotations

import heapq
import re

import numpy as np

from .. import mfma as _mfma
from .. import operands as D
from ..errors import ExecError

KINDS_BRANCHLIKE = ("branch", "waitcnt", "barrier", "nop", "end", "other")
_ITYPE = {"valu": "V", "mfma": "V", "salu": "S", "vmem": "M", "lds": "L", "smem": "K"}
_TRANS = ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_")
_VMEM_BYTES = (("dwordx4", 16), ("dwordx3", 12), ("dwordx2", 8), ("dword", 4), ("ubyte", 1), ("sbyte", 1),
               ("ushort", 2), ("sshort", 2), ("short", 2), ("byte", 1), ("b128", 16), ("b96", 12), ("b64", 8),
               ("b32", 4), ("b16", 2), ("u16", 2), ("i16", 2), ("b8", 1), ("u8", 1), ("i8", 1))
_EXPOSED_AS = {"mfma_pipe": "dependency", "vmem_pipe": "other"}
REASONS = ("vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other")
_FLOP_CLASS = {"fp4": "fp4", "fp6": "fp4", "bf6": "fp4", "fp8": "fp8", "bf8": "fp8", "f16": "f16",
               "bf16": "f16", "xf32": "xf32", "f32": "f32", "f64": "f64", "i8": "fp8"}


def _bytes_of(name):
    for suf, n in _VMEM_BYTES:
        if name.endswith(suf) or f"_{suf}_" in name + "_":
            return n
    return 4


class Static:
    """Per-instruction facts the scheduler needs (computed once per program)."""

    __slots__ = ("kind", "itype", "passes", "flops", "ab", "c", "dst", "vreads", "wait", "nop_cycles",
                 "nbytes", "lds_dma", "store", "ds_addr", "ds_offs", "ds_write", "is_cond_branch", "line",
                 "opcode", "prio", "l1", "scratch")


def analyse(prog, p) -> list:
    """One :class:`Static` per decoded instruction."""
    out = []
    for idx, d in enumerate(prog.decoded):
        ins = prog.instructions[idx]
        st = Static()
        st.kind, st.line, st.opcode = d.cls, d.line, d.opcode
        st.itype = _ITYPE.get(d.cls, "B")
        st.passes = 0
        st.flops = 0
        st.ab = st.c = st.dst = frozenset()
        st.vreads = d.vreads
        st.wait = None
        st.nop_cycles = 0
        st.nbytes = 0
        st.lds_dma = st.store = st.ds_write = st.is_cond_branch = False
        st.ds_addr = None
        st.ds_offs = (0,)
        st.prio = None
        st.l1 = st.scratch = False
        name = d.opcode
        if d.cls == "mfma":
            _mfma_static(st, ins, prog, p)
        elif d.cls == "waitcnt":
            st.wait = (d.pend[1], d.pend[2]) if d.pend else (63, 15)
        elif d.cls == "nop":
            o = ins.operands
            n = int(o[0].value) if o and o[0].kind == "imm" else 0
            if name == "s_nop":
                st.nop_cycles = (n + 1) * p.issue_cycles_per_wait_state
            elif name == "s_sleep":
                st.nop_cycles = max(1, n & 0x7F) * p.issue_sleep_cycles_per_unit
            elif name == "s_setprio":
                st.prio = n & 3
        elif d.cls == "branch":
            st.is_cond_branch = name != "s_branch"
        elif d.cls == "vmem":
            st.nbytes = _bytes_of(name.split("_e")[0])
            st.lds_dma = bool(d.pend and d.pend[3])
            st.store = "store" in name or ("atomic" in name and not d.vwrites)
            # a load may hit the vector L1; stores and atomics go to L2, and so does a load whose scope
            # reaches past the CU (gfx94x/gfx950 sc1: device or system scope; glc on the older encoding)
            m = ins.mods
            st.l1 = "load" in name and "atomic" not in name and not (m.get("sc1") or m.get("glc"))
            st.scratch = name.startswith("scratch_")
        elif d.cls == "smem":
            # bytes per address the handler checks: s_load one span, s_buffer_load one dword each
            n = {"dword": 1, "dwordx2": 2, "dwordx4": 4, "dwordx8": 8, "dwordx16": 16}.get(name.rsplit("_", 1)[-1], 1)
            st.nbytes = 4 if name.startswith("s_buffer_load") else 4 * n
        elif d.cls == "lds":
            _ds_static(st, ins, prog, name)
        elif d.cls == "valu" and name.startswith(_TRANS):
            st.nop_cycles = (p.issue_valu_trans_slots - 1) * p.issue_cycles_per_issue_slot
        out.append(st)
    return out


def _mfma_static(st, ins, prog, p):
    m = ins.mods
    cbsz, blgp = int(m.get("cbsz", 0)), int(m.get("blgp", 0))
    sp = _mfma.spec(ins.opcode)
    fa, fb = (_mfma.F8F6F4_FORMATS[cbsz], _mfma.F8F6F4_FORMATS[blgp]) if sp.a_fmt == "f8f6f4" else (sp.a_fmt, sp.b_fmt)
    cls = "fp4"
    for f in (fa, fb):
        c = _FLOP_CLASS.get(f, "f16")
        order = ("fp4", "fp8", "f16", "xf32", "f32", "f64")
        if order.index(c) > order.index(cls):
            cls = c
    st.flops = 2 * sp.m * sp.n * sp.k
    per_simd_clk = getattr(p, f"mfma_flops_per_clock_per_cu_{cls}") / 4
    cycles = st.flops / per_simd_clk
    st.passes = max(1, int(round(cycles / p.mfma_cycles_per_pass)))
    acc = prog.accum_offset

    def regs(op):
        if op.kind not in ("v", "a"):
            return frozenset()
        base = op.index + (acc if op.kind == "a" else 0)
        return frozenset(range(base, base + op.count))
    o = ins.operands
    st.dst, st.c = regs(o[0]), regs(o[3])
    st.ab = regs(o[1]) | regs(o[2])
    if len(o) > 5:
        st.ab = st.ab | regs(o[4]) | regs(o[5])


_DS_B = {"b128": 16, "b96": 12, "b64": 8, "b32": 4, "u16": 2, "i16": 2, "b16": 2, "u8": 1, "i8": 1, "b8": 1}


def _ds_static(st, ins, prog, name):
    rest = name[3:]
    o = ins.operands
    m = ins.mods
    acc = prog.accum_offset

    def vi(op):
        return op.index + (acc if op.kind == "a" else 0)
    suffix = rest.rsplit("_", 1)[-1]
    st.nbytes = _DS_B.get(suffix.replace("d16", "").replace("hi", ""), 4)
    if rest.startswith("read") and len(o) >= 2:
        st.ds_addr = vi(o[1])
    elif rest.startswith("write") and o:
        st.ds_addr = vi(o[0])
        st.ds_write = True
    elif o:
        st.ds_addr = None          # permute / atomics: no bank model, one phase per 64 lanes
        st.ds_write = "write" in rest
    if rest.startswith(("read2", "write2")):
        sc = st.nbytes * (64 if "st64" in rest else 1)
        st.ds_offs = (int(m.get("offset0", 0)) * sc, int(m.get("offset1", 0)) * sc)
    else:
        st.ds_offs = (int(m.get("offset", 0)),)


#: :func:`lds_cycles` by access pattern: the lanes' addresses less their lowest dword-aligned one.
_LDS_SEEN: dict = {}


def lds_cycles(addr_lanes: np.ndarray, nbytes: int, banks: int, bytes_per_clock: int) -> tuple:
    """(cycles, conflict-free cycles) of one DS access: lanes in phases of ``bytes_per_clock //
    nbytes``; per phase the busiest bank's number of distinct dword addresses (a broadcast of one
    dword to several lanes costs one).

    The answer is the same for the addresses moved by any multiple of 4 bytes (every dword index moves
    by one constant: the same distinct dwords per phase, each bank's count moved to another bank), so
    it is computed once per pattern: the addresses less their lowest one rounded down to a dword."""
    n = addr_lanes.size
    if n == 0:
        return 1, 1
    a = addr_lanes.astype(np.int64, copy=False)
    rel = a - (int(a.min()) & ~3)
    key = (rel.tobytes(), nbytes, banks, bytes_per_clock)
    seen = _LDS_SEEN.get(key)
    if seen is None:
        if len(_LDS_SEEN) >= 1 << 16:
            _LDS_SEEN.clear()
        seen = _LDS_SEEN[key] = _lds_cycles(rel, nbytes, banks, bytes_per_clock)
    return seen


def _lds_cycles(addr_lanes: np.ndarray, nbytes: int, banks: int, bytes_per_clock: int) -> tuple:
    n = addr_lanes.size
    per = max(1, bytes_per_clock // max(nbytes, 4))
    ndw = max(1, nbytes // 4)
    dw = (addr_lanes.astype(np.int64) >> 2)[:, None] + np.arange(ndw)[None, :]
    nph = -(-n // per)
    # every phase at once: the distinct (phase, dword) pairs, then per phase each bank's count
    lo = int(dw.min())
    span = int(dw.max()) - lo + 1
    key = np.sort(((np.arange(n) // per)[:, None] * span + (dw - lo)).ravel())
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    phase, word = key // span, key % span + lo
    cnt = np.bincount(phase * banks + word % banks, minlength=nph * banks).reshape(nph, banks)
    return int(cnt.max(axis=1).sum()), nph


# --------------------------------------------------------------------------------- waves ----
class TWave:
    __slots__ = ("w", "wg", "simd", "age", "prio", "ready", "vm", "lgkm", "lgkm_smem", "mready", "mready_c",
                 "segs", "start", "end", "blocked", "issue_log", "stall_log", "last_mfma_end", "arrive",
                 "hot_marks", "wgi", "slot", "vme")

    def __init__(self, w, wg, wgi, simd, age, start):
        self.w, self.wg, self.wgi, self.simd, self.age = w, wg, wgi, simd, age
        self.prio = 0
        self.ready = start
        self.start = start
        self.end = None
        self.vm = []            # completion cycles, issue order (monotone)
        self.vme = []           # the CU's VMEM event index of each entry of vm
        self.lgkm = []          # completion cycles of DS + SMEM ops
        self.mready = {}        # reg -> cycle its MFMA result may be read by VALU/VMEM/LDS/MFMA-A/B
        self.mready_c = {}      # reg -> (cycle a partially overlapping SrcC may read, exact-chain cycle, dst set)
        self.segs = []          # stall segments (from, to, reason) since the last MFMA issue
        self.blocked = False
        self.arrive = None
        self.slot = None


class CU:
    """One compute unit running a list of workgroups (``occupancy`` of them resident at once)."""

    def __init__(self, prog, params, static, make_waves, occupancy, hot=None, trace=False, probe=None):
        self.prog, self.p, self.st = prog, params, static
        self.probe = probe                  # track_touched: the buffer each VMEM op's lanes address
        self.make_waves = make_waves        # wg -> list of emulator Waves (initialised)
        self.occ = max(1, int(occupancy))
        self.fns = [d.fn for d in prog.decoded]
        self.nsimd = int(params.device_simds_per_cu)
        self.slot = int(params.issue_cycles_per_issue_slot)
        self.trace = [] if trace else None
        self.hot = hot                      # (first, last) instruction index of the hot loop, or None
        n = len(prog.decoded)
        self.stall_by_ins = np.zeros(n, dtype=np.float64)
        self.count_by_ins = np.zeros(n, dtype=np.int64)
        self.reason_by_ins = [dict() for _ in range(n)]
        self.issue_rel = {}                 # instruction index -> issue cycles (wave 0 of wg 0) for the hot loop
        self.exposed = {r: 0.0 for r in REASONS}
        self.mfma_busy = [0.0] * self.nsimd
        self.mfma_count = 0
        self.mfma_flops = 0
        self.vmem_bytes = 0
        self.vmem_events = ([], [], [], [])  # per VMEM op: issue cycle, bytes, store?, buffer (region index)
        self.vmem_done = []                 # per VMEM op: the cycle its data (or acknowledgement) returned
        self.vmem_need = []                 # per VMEM op: first cycle a wave waited for it (s_waitcnt, end), -1 never
        self.lines = set()
        self.lds_conflict_cycles = 0
        self.budget = 50_000_000
        self.internal = int(params.issue_internal_instruction_cycles)
        self.mfma_queue = int(params.mfma_queue_depth)
        self.cpp = int(params.mfma_cycles_per_pass)
        self.mfma_start = 0
        # caches from the real addresses (gfx950.toml: [vmem].l1_cache / scalar_cache; LRU = dict order)
        self.l1 = {} if params.vmem_l1_cache and probe is not None else None
        self.l1_line = int(params.device_cache_line_bytes)
        self.l1_cap = int(params.device_l1_bytes_per_cu) // self.l1_line
        self.l2 = {} if params.vmem_l2_cache and probe is not None else None
        self.l2_cap = int(params.device_l2_bytes_per_xcd) // int(params.device_cus_per_xcd) // self.l1_line
        self.sl1 = {} if params.vmem_scalar_cache and probe is not None else None
        self.sl1_line = int(params.vmem_scalar_line_bytes)
        self.sl1_cap = int(params.device_scalar_l1_bytes) // self.sl1_line
        self.dma_contends = bool(params.lds_dma_contends)
        self.l1_hits = self.l1_loads = self.sl1_hits = self.sl1_loads = self.l2_hits = self.l2_lookups = 0

    # ------------------------------------------------------------------ run ----
    def run(self, wgs):
        p = self.p
        self.pipe_free = [0] * self.nsimd
        self.accounted = [0] * self.nsimd
        self.last_used = [dict() for _ in range(self.nsimd)]
        self.vmem_free = 0
        self.lds_free = 0
        self.vmem_q, self.lds_q = [], []        # start cycles of queued instructions (CU pipes)
        self.dma_pending = []                   # (arrival, write cycles) of LDS-DMA data not yet written
        self.vmem_depth = int(p.vmem_queue_depth)
        self.lds_depth = int(p.lds_queue_depth)
        self.heap = []
        self.seq = 0
        self.age = 0
        self.pending = list(wgs)
        self.resident = {}
        self.simd_load = [0] * self.nsimd
        self.wave_records = []
        self.wg_records = []
        self.simd_first = [None] * self.nsimd
        self.simd_last = [0] * self.nsimd
        for _ in range(min(self.occ, len(self.pending))):
            self._dispatch(0)
        heap = self.heap
        slot = self.slot
        while heap:
            t, _, tw = heapq.heappop(heap)
            t += (tw.simd - t) % slot if slot > 1 else 0
            self._step(tw, t)
        return self

    def _push(self, tw, t):
        self.seq += 1
        heapq.heappush(self.heap, (t, (-tw.prio, tw.age, self.seq), tw))

    def _dispatch(self, t):
        wg = self.pending.pop(0)
        waves = self.make_waves(wg)
        wgi = len(self.wg_records)
        rec = {"workgroup": list(wg), "start": t, "end": None, "waves": [], "live": len(waves), "barrier": []}
        self.wg_records.append(rec)
        tws = []
        for k, w in enumerate(waves):
            simd = int(np.argmin(self.simd_load))
            self.simd_load[simd] += 1
            self.age += 1
            tw = TWave(w, wg, wgi, simd, self.age, t + k)
            tws.append(tw)
            rec["waves"].append(tw)
            self._push(tw, t + k)
        self.resident[wgi] = tws

    # ---------------------------------------------------------------- one step ----
    def _stall(self, tw, t, until, reason):
        if until > t:
            tw.segs.append((t, until, reason))
        self._push(tw, until)

    def _step(self, tw, t):
        w = tw.w
        i = w.pc
        st = self.st[i] if i < len(self.st) else None
        if st is None:
            raise ExecError(f"wave {w.id} ran past the last instruction without s_endpgm")
        p = self.p
        slot = self.slot
        # per-slot type arbitration
        lu = self.last_used[tw.simd]
        if lu.get(st.itype) == t:
            self._stall(tw, t, t + slot, "issue")
            return
        kind = st.kind
        # dependencies / resources: earliest cycle this instruction may issue
        need, reason = t, None
        if kind == "waitcnt":
            vm, lgkm = st.wait
            if len(tw.vm) > vm:             # the ops this s_waitcnt waits for are needed from t on
                nd = self.vmem_need
                for k in tw.vme[:len(tw.vm) - vm]:
                    if nd[k] < 0:
                        nd[k] = t
            e = _wait_until(tw.vm, vm, t)
            if e > need:
                need, reason = e, "vmcnt"
            e = _wait_until(tw.lgkm, lgkm, t)
            if e > need:
                need, reason = e, "lgkmcnt"
        else:
            if tw.mready:
                # the ready cycles (all >= 0) of the registers read that an MFMA writes
                mr = tw.mready
                if kind == "mfma":
                    e = max([mr[r] for r in mr.keys() & st.ab], default=0)
                    mc = tw.mready_c
                    if mc:
                        for r in mc.keys() & st.c:
                            c = mc[r]
                            e = max(e, c[1] if st.c == c[2] else c[0])
                else:
                    e = max([mr[r] for r in mr.keys() & st.vreads], default=0)
                if e > need:
                    need, reason = e, "dependency"
            if kind == "mfma":
                pf = self.pipe_free[tw.simd] - self.mfma_queue * st.passes * self.cpp
                if pf > need:
                    need, reason = pf, "mfma_pipe"
            elif kind == "lds":
                e = _queue_full_until(self.lds_q, self.lds_depth, need)
                if e > need:
                    need, reason = e, "lds_bank"
            elif kind == "vmem":
                e = _queue_full_until(self.vmem_q, self.vmem_depth, need)
                if e > need:
                    need, reason = e, "vmem_pipe"
        if need > t:
            need += (tw.simd - need) % slot
            self._stall(tw, t, need, reason)
            return
        # ---- issue at t
        lu[st.itype] = t
        self._account(tw, i, t)
        if st.prio is not None:
            tw.prio = st.prio
        fin = t + (self.internal if kind in ("waitcnt", "barrier") or st.prio is not None else slot)
        if kind == "mfma":
            self._issue_mfma(tw, st, t)
        elif kind == "lds":
            self._issue_lds(tw, st, t)
        elif kind == "waitcnt":
            vm, lgkm = st.wait
            _retire_vm(tw, t)
            _retire(tw.lgkm, lgkm, t)
        elif kind == "barrier":
            pass
        if st.nop_cycles:
            tw.segs.append((fin, fin + st.nop_cycles, "dependency" if kind == "nop" else "issue"))
        fin += st.nop_cycles
        w.pc = i + 1
        w.counts[i] += 1
        r = self.fns[i](w)
        # memory ops are timed after their handler ran: the caches look at the addresses it used
        if kind == "vmem":
            offs = None
            if self.probe is not None:
                offs = self.probe.take_offsets()
                self.vmem_events[3].append(self.probe.take_region())
                if st.scratch:      # the private segment's addresses; with [vmem].l2_cache off none (0.4.0)
                    offs = self._private_addresses(tw, st) if self.l2 is not None else None
            self._issue_vmem(tw, st, i, t, offs)
        elif kind == "smem":
            offs = self.probe.take_offsets() if self.probe is not None else None
            hit = self.sl1 is not None and offs is not None and self._lookup(
                self.sl1, self.sl1_line, self.sl1_cap, offs, max(4, st.nbytes))
            if self.sl1 is not None and offs is not None:
                self.sl1_loads += 1
                self.sl1_hits += hit
            tw.lgkm.append(t + (p.vmem_smem_hit_latency_cycles if hit else p.vmem_smem_latency_cycles))
        w.executed += 1
        if w.executed > self.budget:
            raise ExecError(f"wave {w.id} executed more than {self.budget} instructions (endless loop?)")
        if self.trace is not None:
            self.trace.append((tw.wgi, tw.w.id, tw.simd, i, t, fin if kind != "mfma" else
                               self.mfma_start + st.passes * p.mfma_cycles_per_pass, kind))
        if kind == "branch" and w.pc != i + 1:
            tw.segs.append((fin, fin + p.issue_branch_taken_cycles, "other"))
            fin += p.issue_branch_taken_cycles
        tw.ready = fin
        if r == D.ENDPGM:
            self._end_wave(tw, t + slot)
            return
        if r == D.BARRIER:
            self._barrier(tw, fin)
            return
        self._push(tw, fin)

    def _account(self, tw, i, t):
        """Stall bookkeeping of the instruction issuing at t (its stall = t - its earliest slot)."""
        segs = tw.segs
        if segs:
            st_tot = 0
            rb = self.reason_by_ins[i]
            k = len(segs) - 1
            ready = tw.ready
            while k >= 0 and segs[k][1] > ready:
                a, b, r = segs[k]
                a = max(a, ready)
                rb[r] = rb.get(r, 0) + (b - a)
                st_tot += b - a
                k -= 1
            self.stall_by_ins[i] += st_tot
        self.count_by_ins[i] += 1
        if tw.wgi == 0 and tw.w.id == 0:
            self.issue_rel.setdefault(i, []).append(t)
        tw.ready = t + self.slot

    def _gap(self, tw, a, b):
        """Attribute the MFMA-idle gap [a, b) of tw's SIMD to the stall reasons of tw in it."""
        s = tw.simd
        a = max(a, self.accounted[s])
        if b <= a:
            return
        self.accounted[s] = b
        covered = 0
        for s0, s1, r in tw.segs:
            lo, hi = max(s0, a), min(s1, b)
            if hi > lo:
                r = _EXPOSED_AS.get(r, r)
                self.exposed[r] += hi - lo
                covered += hi - lo
        self.exposed["issue"] += max(0, (b - a) - covered)

    def _issue_mfma(self, tw, st, t):
        p = self.p
        s = tw.simd
        dur = st.passes * p.mfma_cycles_per_pass
        pf = self.pipe_free[s]
        a = pf if self.simd_first[s] is not None else self._simd_start(s, tw)
        self._gap(tw, a, t)
        tw.segs = []
        t = max(t, pf)                # with an MFMA queue (mfma.queue_depth > 0) it starts when the pipe frees
        self.mfma_start = t
        self.pipe_free[s] = t + dur
        self.simd_last[s] = t + dur
        self.mfma_busy[s] += dur
        self.mfma_count += 1
        self.mfma_flops += st.flops
        ws = p.issue_cycles_per_wait_state
        rd = t + ws * (st.passes + p.mfma_read_ab_vmem_lds_wait_states_plus_passes)
        ov = t + ws * (st.passes + p.mfma_srcc_overlap_wait_states_plus_passes)
        ex = t + ws * p.mfma_srcc_exact_wait_states      # exact chain: back to back (the pipe orders them)
        mr, mc = tw.mready, tw.mready_c
        for r in st.dst:
            mr[r] = rd
            mc[r] = (ov, ex, st.dst)
        if len(mr) > 4096:
            tw.mready = {k: v for k, v in mr.items() if v > t}
            tw.mready_c = {k: v for k, v in mc.items() if v[0] > t}

    def _simd_start(self, s, tw):
        self.simd_first[s] = tw.start
        return tw.start

    @staticmethod
    def _lookup(cache, line, cap, offs, nbytes) -> bool:
        """Whether every line the accesses at heap offsets ``offs`` (``nbytes`` each) touch is in
        ``cache`` (an LRU: a dict in use order); the lines are then the most recently used."""
        a = offs // line
        b = (offs + (nbytes - 1)) // line
        lines = np.unique(np.concatenate((a, b)) if (a != b).any() else a).tolist()
        hit = True
        for x in lines:
            if cache.pop(x, False) is False:
                hit = False
            cache[x] = True
        while len(cache) > cap:
            del cache[next(iter(cache))]
        return hit

    @staticmethod
    def _private_addresses(tw, st):
        """Addresses, for the caches, of the scratch access the wave's handler just made: the private
        segment interleaves the wave's lanes by dword (AMDGPUUsage "Memory Spaces": wavefront-scratch-base +
        private-address * wavefront-size * 4 + lane-id * 4), so lane ``l``'s dword ``d`` lies at
        ``d * 256 + l * 4`` of the wave's slab; slabs are negative so no heap line aliases them.
        One offset per dword (look them up as 4-byte accesses); None when no lane was active."""
        w = tw.w
        if w.private is None:
            return None
        lanes, a = w.private
        w.private = None
        if not lanes.size:
            return None
        base = -((1 + tw.wgi * 64 + w.id) << 36)
        dw = a // 4
        per = np.arange(max(1, st.nbytes // 4), dtype=np.int64)
        return (base + (dw[:, None] + per[None, :]) * 256 + (lanes.astype(np.int64) * 4)[:, None]).ravel()

    def _issue_vmem(self, tw, st, i, t, offs=None):
        p = self.p
        w = tw.w
        lanes = int(w.active.size)
        nbytes = lanes * st.nbytes
        self.vmem_bytes += nbytes
        data = -(-nbytes // int(p.vmem_l1_bytes_per_clock))
        start = max(t, self.vmem_free)
        ev = self.vmem_events
        ev[0].append(start)
        ev[1].append(nbytes)
        ev[2].append(st.store)
        self.vmem_free = start + max(int(p.vmem_issue_cycles), data)
        _enqueue(self.vmem_q, start, t)
        latency = int(p.vmem_latency_cycles)
        if offs is not None and offs.size:
            nb = 4 if st.scratch else st.nbytes
            hit = False
            if self.l1 is not None and st.l1:
                self.l1_loads += 1
                hit = self._lookup(self.l1, self.l1_line, self.l1_cap, offs, nb)
                if hit:
                    self.l1_hits += 1
                    latency = int(p.vmem_l1_hit_latency_cycles)
            # past the L1 (a miss, a store, an atomic, an sc1 load): the CU's share of its XCD's L2 holds
            # the lines it touched (the L2 is write-back: a store allocates); a returning access whose lines
            # all hit there takes the L2's latency, a store's acknowledgement keeps the one beyond the L1
            if not hit and self.l2 is not None:
                self.l2_lookups += 1
                if self._lookup(self.l2, self.l1_line, self.l2_cap, offs, nb):
                    self.l2_hits += 1
                    if not st.store:
                        latency = int(p.vmem_l2_hit_latency_cycles)
        done = start + data + latency
        if st.lds_dma:
            wcyc = -(-nbytes // int(p.lds_dma_write_bytes_per_clock))
            if self.dma_contends:
                heapq.heappush(self.dma_pending, (done, wcyc))
            done += wcyc
        if tw.vm and tw.vm[-1] > done:
            done = tw.vm[-1]
        if len(tw.vm) > 64:
            _retire_vm(tw, t)
        tw.vm.append(done)
        tw.vme.append(len(ev[0]) - 1)
        self.vmem_done.append(done)
        self.vmem_need.append(-1)

    def _issue_lds(self, tw, st, t):
        p = self.p
        w = tw.w
        lanes = w.active
        if st.ds_addr is not None and lanes.size:
            base = w.v[st.ds_addr][lanes].astype(np.int64)
            bpc = int(p.lds_write_bytes_per_clock if st.ds_write else p.lds_read_bytes_per_clock)
            cyc = ideal = 0
            for off in st.ds_offs:
                c, i0 = lds_cycles(base + off, st.nbytes, int(p.lds_banks), bpc)
                cyc += c
                ideal += i0
            self.lds_conflict_cycles += cyc - ideal
        else:
            cyc = 1
        start = max(t, self.lds_free)
        dp = self.dma_pending
        while dp and dp[0][0] <= start:     # LDS-DMA data that arrived first is written first
            arr, wcyc = heapq.heappop(dp)
            self.lds_free = max(self.lds_free, arr) + wcyc
            start = max(t, self.lds_free)
        self.lds_free = start + cyc
        _enqueue(self.lds_q, start, t)
        done = start + cyc + int(p.lds_latency_cycles)
        if len(tw.lgkm) > 64:
            _retire(tw.lgkm, 0, t)
        tw.lgkm.append(done)

    def _barrier(self, tw, t):
        rec = self.wg_records[tw.wgi]
        tw.arrive = t
        rec["barrier"].append(tw)
        self._maybe_release(rec)

    def _maybe_release(self, rec):
        if rec["barrier"] and len(rec["barrier"]) >= rec["live"]:
            rel = max(x.arrive for x in rec["barrier"]) + int(self.p.issue_barrier_cycles)
            for x in rec["barrier"]:
                x.w.epoch += 1
                rel_x = rel + (x.simd - rel) % self.slot
                if rel_x > x.arrive:
                    x.segs.append((x.arrive, rel_x, "barrier"))
                self._push(x, rel_x)
            rec["barrier"] = []

    def _end_wave(self, tw, t):
        # outstanding memory drains before the wave's slot is freed
        end = max([t] + tw.vm[-1:] + (tw.lgkm and [max(tw.lgkm)] or []))
        nd = self.vmem_need
        for k in tw.vme:                    # the wave's end waits for what is still outstanding
            if nd[k] < 0:
                nd[k] = t
        tw.end = end
        s = tw.simd
        if self.simd_first[s] is not None:
            a = max(self.pipe_free[s], tw.start)
            if end > t:
                tw.segs.append((t, end, "vmcnt"))
            self._gap(tw, a, end)
        tw.segs = []
        self.simd_load[s] -= 1
        self.simd_last[s] = max(self.simd_last[s], end)
        rec = self.wg_records[tw.wgi]
        rec["live"] -= 1
        self.wave_records.append(tw)
        self._maybe_release(rec)
        if rec["live"] == 0:
            rec["end"] = max(x.end for x in rec["waves"])
            for s2 in {x.simd for x in rec["waves"]}:       # SIMDs idle while the workgroup's last wave drains
                if self.simd_first[s2] is not None and self.accounted[s2] < rec["end"]:
                    self.exposed["other"] += rec["end"] - max(self.accounted[s2], self.pipe_free[s2])
                    self.accounted[s2] = rec["end"]
            del self.resident[tw.wgi]
            if self.pending:
                self._dispatch(rec["end"] + int(self.p.device_workgroup_dispatch_cycles))


def _queue_full_until(q, depth, t):
    """Earliest cycle >= t at which fewer than ``depth`` queued instructions have not started."""
    waiting = [s for s in q if s > t]
    if len(waiting) < depth:
        return t
    waiting.sort()
    return waiting[len(waiting) - depth]


def _enqueue(q, start, t):
    if len(q) > 32:
        q[:] = [s for s in q if s > t]
    q.append(start)


def _wait_until(q, n, t):
    """Earliest cycle >= t at which at most n of the completions in q are still in the future."""
    if len(q) <= n:
        return t
    pend = [c for c in q if c > t]
    if len(pend) <= n:
        return t
    pend.sort()
    return pend[len(pend) - n - 1]


def _retire(q, n, t):
    q[:] = [c for c in q if c > t]


def _retire_vm(tw, t):
    """Drop the wave's VMEM ops complete by ``t`` (a prefix: vm is monotone) and their event indices."""
    vm = tw.vm
    k = 0
    while k < len(vm) and vm[k] <= t:
        k += 1
    if k:
        del vm[:k]
        del tw.vme[:k]
