"""s_waitcnt hazard checker: finds reads of data that memory ops have not delivered yet.

The emulator completes every memory op when it issues (so results are
deterministic); this module keeps the *pending* view a real wave would have
and reports what the program does too early.  The counter model ([ISA]
"S_WAITCNT"; LLVM SIInsertWaitcnts for gfx9):

* vector memory (loads, stores, atomics, LDS DMA ``buffer_load ... lds``)
  counts on vmcnt and completes in issue order: ``s_waitcnt vmcnt(N)`` retires
  all but the N youngest;
* DS (LDS) ops count on lgkmcnt and complete in order: ``lgkmcnt(N)`` retires
  all but the N youngest DS ops;
* scalar memory loads also count on lgkmcnt but may return out of order, so
  only ``lgkmcnt(0)`` is known to cover them;
* ``s_endpgm`` retires everything; ``s_barrier`` retires nothing (gfx90a+
  barriers do not wait for memory).

Reported kinds (``HazardReport.kind``):

``read_pending``
    an instruction reads a VGPR/AGPR/SGPR that a pending load will still
    write (in the lanes both have active);
``overwrite_pending``
    an instruction writes a register a pending load of another counter (or a
    non-memory op) will still write -- the load may land afterwards;
``lds_read_pending``
    a DS read of LDS bytes that this wave's own LDS DMA has not finished
    writing (DS ops are ordered with DS ops of the same wave, so a DS write
    followed by a DS read in one wave is fine);
``lds_cross_wave``
    a DS read of LDS bytes that another wave wrote and that are not yet
    visible: the write is still pending, or it completed after the last
    ``s_barrier`` both waves passed (the writer did not wait before the
    barrier, or there is no barrier between them);
``lds_race``
    a DS write / DMA to bytes another wave read in the same barrier interval.
``lds_dma_waw``
    a DS write to LDS bytes an LDS DMA has not finished writing (vmcnt and lgkmcnt
    are not ordered with each other, so the DMA may land afterwards);
``lds_read_overwritten``
    a DS write to bytes another wave's DS read had not completed by the last
    barrier before the write (the reader did not wait before ``s_barrier``),
    in any wave order;
``wait_states``
    a gfx950 no-interlock hazard that needs ``s_nop`` wait states (see
    :class:`_WaitStates`, after LLVM's GCNHazardRecognizer);
``lds_outside``
    (from :class:`EventLog`, in every hazard mode) an LDS access outside the
    kernel's allocation.

FLAT ops count on both vmcnt and lgkmcnt (they may reach LDS); their results are
covered only once both counters have been waited for (lgkmcnt(0), as LLVM does).

Waves of a workgroup run in wave order between barriers, so a read that
another wave's later write in the same interval would change is found as
``lds_race`` when the write happens.

Store data and addresses are taken as read when the store issues (so
overwriting them afterwards is not reported).  Some compilers treat a vmcnt
queue that mixes loads and stores as unordered (LLVM SIInsertWaitcnts then
waits for vmcnt(0)); here vmcnt is in issue order for all of them, as the ISA
guide describes the counter.

Wait-state hazards are checked for the cases :class:`_WaitStates` lists (not
every row of the ISA guide's table: e.g. VALU SGPR writes read by VMEM are not).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

_INF = np.int64(1 << 62)
_RANDOM_DELAY = 40      # delivery="random": an op lands 0..39 instructions after issue (or when a wait forces it)
_SNAMES = {106: "vcc_lo", 107: "vcc_hi", 124: "m0", 126: "exec_lo", 127: "exec_hi"}


@dataclass
class HazardReport:
    """One early read / overwrite found by the checker."""

    kind: str
    line: int
    wave: int
    lanes: tuple
    register: str | None
    bytes: tuple | None        # (first, last) LDS byte address for LDS kinds
    text: str
    workgroup: tuple = (0, 0, 0)
    source_line: int | None = None   # line of the memory op that was not waited for

    def __str__(self):
        return f"[{self.kind}] line {self.line}, wave {self.wave}: {self.text}"


class HazardError(RuntimeError):
    """Raised by hazards='strict' on the first report."""

    def __init__(self, report: HazardReport):
        super().__init__(str(report))
        self.report = report


class _Op:
    __slots__ = ("id", "counter", "wave", "line", "vregs", "sregs", "exec", "lds", "dma", "land", "due",
                 "rlds", "need", "epoch")

    def __init__(self, oid, counter, wave, line, vregs, sregs, ex, lds, dma, land=None, due=0):
        self.id, self.counter, self.wave, self.line = oid, counter, wave, line
        self.vregs, self.sregs, self.exec, self.lds, self.dma = vregs, sregs, ex, lds, dma
        self.land, self.due = land, due     # deferred delivery: the write still to do, when it may land
        self.rlds = None                    # LDS dwords a DS read still reads (it samples them when it completes)
        self.need = 1                       # flat ops retire after both vmcnt and lgkmcnt(0) covered them
        self.epoch = 0


class _WaveQ:
    __slots__ = ("vm", "ds", "smem", "vpend", "spend", "clock", "valu_w", "mfma_w", "store_data",
                 "m0_w", "cmpx", "fwd", "mfma_last")

    def __init__(self):
        self.vm, self.ds, self.smem = deque(), deque(), []
        self.vpend, self.spend = {}, {}
        # wait-state clocks (see _WaitStates): the wave's position in wait states, and producers by register
        self.clock = 0
        self.valu_w = {}        # vgpr -> (clock, line) of the last VALU write
        self.mfma_w = {}        # vgpr -> (clock, wait states a VALU/memory access needs, line, opcode)
        self.store_data = {}    # vgpr -> (clock, line) of a >64-bit store that still reads it
        self.m0_w = None        # (clock, line) of the last SALU write of M0
        self.cmpx = None        # (clock, line) of the last v_cmpx (writes EXEC)
        self.fwd = None         # (clock, regs, line, opcode): a cvt_scale / dst-sel forwarding producer
        self.mfma_last = 0      # clock of the last MFMA


def _lanes(mask: int) -> tuple:
    return tuple(i for i in range(64) if (mask >> i) & 1)


class HazardTracker:
    """Pending-op bookkeeping for the waves of one workgroup."""

    MAX_REPORTS = 10000

    def __init__(self, mode: str, lds_bytes: int, workgroup=(0, 0, 0), acc_offset: int = 256, rng=None,
                 instructions=None):
        self.mode = mode
        self.ws = _WaitStates(self, instructions)
        self.rng = rng          # delivery="random": a random.Random that draws each op's landing time
        self.wg = tuple(workgroup)
        self.acc = acc_offset
        self.reports = []
        n = lds_bytes // 4 + 1
        self.lds_pend = np.zeros(n, dtype=np.int64)      # id of the pending writer op (0: none)
        self.lds_pdma = np.zeros(n, dtype=bool)          # pending writer is an LDS DMA
        self.lds_writer = np.full(n, -1, dtype=np.int16)
        self.lds_vis = np.zeros(n, dtype=np.int64)       # epoch from which other waves may read
        self.lds_rd_mark = np.full(n, -64, dtype=np.int64)   # see check_lds_read
        self.lds_wr_line = np.zeros(n, dtype=np.int64)
        self.lds_rpend = np.zeros(n, dtype=np.int64)     # id of a pending DS read of the dword (0: none)
        self.lds_rwave = np.full(n, -1, dtype=np.int16)
        self.lds_repoch = np.zeros(n, dtype=np.int64)
        self.lds_rretire = np.full(n, -1, dtype=np.int64)   # epoch in which that read completed (-1: pending)
        self.lds_rline = np.zeros(n, dtype=np.int64)
        self._rstash = None
        self.q = {}
        self._next = 1
        self.lds_size = lds_bytes
        self._outside = set()
        self._stash = None
        self._cur = None

    # ------------------------------------------------------------ reports --
    def _report(self, kind, line, w, lanes, reg, byts, text, src_line=None):
        r = HazardReport(kind, line, w.id, lanes, reg, byts, text, self.wg, src_line)
        if len(self.reports) < self.MAX_REPORTS:
            self.reports.append(r)
        if self.mode == "strict":
            raise HazardError(r)

    def _vname(self, r):
        return f"a{r - self.acc}" if r >= self.acc else f"v{r}"

    @staticmethod
    def _sname(r):
        return _SNAMES.get(r, f"s{r}")

    def _wq(self, w):
        q = self.q.get(w.id)
        if q is None:
            q = self.q[w.id] = _WaveQ()
        return q

    # ------------------------------------------------- per instruction --
    def before(self, w, d):
        self._cur = d
        q = self._wq(w)
        self.ws.check(w, q, d)
        p = d.pend
        if p is not None and p[0] == "wait":
            self.wait(w, p[1], p[2])
            return
        if q.vpend:
            ex = w.s[126] | (w.s[127] << 32)
            vp = q.vpend
            for r in sorted(vp.keys() & d.vreads):
                op = vp[r]
                lanes = op.exec & ex
                if lanes:
                    self._report("read_pending", d.line, w, _lanes(lanes), self._vname(r), None,
                                 f"{d.opcode} reads {self._vname(r)} before the load at line {op.line} "
                                 f"completed (missing s_waitcnt {self._cnt(op)})", op.line)
            if d.vwrites:
                for r in sorted(vp.keys() & d.vwrites):
                    op = vp[r]
                    if p is not None and p[0] == op.counter and op.counter != "smem":
                        continue        # same in-order queue: the newer load lands last
                    lanes = op.exec & ex
                    if lanes:
                        self._report("overwrite_pending", d.line, w, _lanes(lanes), self._vname(r), None,
                                     f"{d.opcode} writes {self._vname(r)} while the load at line {op.line} "
                                     f"may still write it (missing s_waitcnt {self._cnt(op)})", op.line)
        if q.spend:
            sp = q.spend
            for r in sorted(sp.keys() & d.sreads):
                op = sp[r]
                self._report("read_pending", d.line, w, (), self._sname(r), None,
                             f"{d.opcode} reads {self._sname(r)} before the scalar load at line {op.line} "
                             f"completed (missing s_waitcnt lgkmcnt(0))", op.line)
            for r in sorted(sp.keys() & d.swrites):
                op = sp[r]
                self._report("overwrite_pending", d.line, w, (), self._sname(r), None,
                             f"{d.opcode} writes {self._sname(r)} while the scalar load at line {op.line} "
                             f"may still write it", op.line)

    @staticmethod
    def _cnt(op):
        return "vmcnt" if op.counter == "vm" else "lgkmcnt"

    def after(self, w, d):
        p = d.pend
        stash, self._stash = self._stash, None
        rstash, self._rstash = self._rstash, None
        if p is None or p[0] == "wait":
            return
        counter, vregs, sregs, flag = p
        q = self._wq(w)
        ex = w.s[126] | (w.s[127] << 32)
        dma = counter == "vm" and bool(flag)
        lds = None
        if stash is not None:
            lds = stash[0] if len(stash) == 1 else np.concatenate(stash)
        op = _Op(self._next, counter, w.id, d.line, vregs, sregs, ex, lds, dma, w.land)
        op.epoch = w.epoch
        w.land = None
        if lds is not None and lds.size:
            self._dma_waw(w, d, lds, dma)
        if rstash is not None:
            r = rstash[0] if len(rstash) == 1 else np.concatenate(rstash)
            op.rlds = r
            self.lds_rpend[r] = op.id
            self.lds_rwave[r] = w.id
            self.lds_repoch[r] = w.epoch
            self.lds_rretire[r] = -1
            self.lds_rline[r] = d.line
        if self.rng is not None and op.land is not None:
            op.due = w.executed + self.rng.randrange(_RANDOM_DELAY)
        self._next += 1
        if lds is not None and lds.size:
            self.lds_pend[lds] = op.id
            self.lds_pdma[lds] = dma
            self.lds_writer[lds] = w.id
            self.lds_vis[lds] = _INF
            self.lds_wr_line[lds] = d.line
        if counter == "vm":
            q.vm.append(op)
            if d.opcode.startswith("flat_"):      # FLAT counts on vmcnt and lgkmcnt (it may reach LDS)
                op.need = 2
                q.smem.append(op)
        elif counter == "ds":
            q.ds.append(op)
        else:
            q.smem.append(op)
        for r in vregs:
            q.vpend[r] = op
        for r in sregs:
            q.spend[r] = op

    # ----------------------------------------------------------- LDS ---
    # LDS read marks: one int64 per dword = epoch * 64 + (reader wave + 2); reader code 0
    # means "several waves read it in that epoch".
    def note_lds_write(self, w, byte_idx, lanes, nbytes):
        """Called by DS-write / DMA handlers with the LDS byte offsets written [L, nbytes]."""
        dw = (np.asarray(byte_idx, dtype=np.int64) >> 2).reshape(-1)
        dw = dw[dw < self.lds_pend.size]
        if dw.size:
            mark = self.lds_rd_mark[dw]
            conflict = ((mark >> 6) == w.epoch) & ((mark & 63) != w.id + 2)
            if conflict.any():
                bad = dw[conflict]
                d = self._cur
                self._report("lds_race", d.line if d else 0, w, tuple(int(x) for x in np.asarray(lanes)[:1]), None,
                             (int(bad.min()) * 4, int(bad.max()) * 4 + 3),
                             f"{d.opcode if d else 'write'} writes LDS bytes another wave read since the last barrier "
                             f"(missing s_barrier between the read and this write)")
        if dw.size:
            rw = self.lds_rwave[dw]
            if (rw >= 0).any():
                # the read was issued before a barrier this write is behind, and it was still pending at that
                # barrier: pending now, or completed only in this write's interval or later (any wave order)
                late = (self.lds_rpend[dw] != 0) | (self.lds_rretire[dw] >= w.epoch)
                hit = (rw >= 0) & (rw != w.id) & (self.lds_repoch[dw] < w.epoch) & late
                if hit.any():
                    bad = dw[hit]
                    d = self._cur
                    src = int(self.lds_rline[bad[0]])
                    self._report("lds_read_overwritten", d.line if d else 0, w, (), None,
                                 (int(bad.min()) * 4, int(bad.max()) * 4 + 3),
                                 f"{d.opcode if d else 'write'} writes LDS bytes that wave {int(self.lds_rwave[bad[0]])}'s "
                                 f"DS read at line {src} may not have read yet: the read was still pending at the "
                                 f"barrier (missing s_waitcnt lgkmcnt before s_barrier)", src)
        if self._stash is None:
            self._stash = []
        self._stash.append(dw)

    def _dma_waw(self, w, d, lds, dma):
        """A write to LDS dwords an LDS DMA still owns: DS ops (lgkmcnt) and DMA (vmcnt) are not ordered,
        so the DMA may land after the write and overwrite it."""
        pend = self.lds_pend[lds]
        own = (pend != 0) & self.lds_pdma[lds] & (pend != self._next)
        if not dma and own.any():
            bad = lds[own]
            src = int(self.lds_wr_line[bad[0]])
            self._report("lds_dma_waw", d.line, w, (), None, (int(bad.min()) * 4, int(bad.max()) * 4 + 3),
                         f"{d.opcode} writes LDS bytes the LDS DMA at line {src} (wave {int(self.lds_writer[bad[0]])}) "
                         f"has not finished writing; the DMA may land afterwards (missing s_waitcnt vmcnt)", src)

    def check_lds_read(self, w, addr, nbytes, lanes, line):
        """Called by DS-read handlers before the data is used: addr int64 [L] byte addresses."""
        if addr.size == 0:
            return
        dw = (addr[:, None] + np.arange(0, nbytes, 4, dtype=np.int64)[None, :]) >> 2
        dw = np.clip(dw, 0, self.lds_pend.size - 1)
        flat = dw.reshape(-1)
        if self._rstash is None:
            self._rstash = []
        self._rstash.append(flat)
        # reads are recorded first so a later write by another wave in this interval is a race
        mark = self.lds_rd_mark[flat]
        mine = w.epoch * 64 + w.id + 2
        self.lds_rd_mark[flat] = np.where(((mark >> 6) == w.epoch) & (mark != mine), w.epoch * 64, mine)
        vis = self.lds_vis[dw]
        if not (vis > w.epoch).any():       # fast path: every byte visible to everyone
            return
        wr = self.lds_writer[dw]
        same = (wr == w.id) & self.lds_pdma[dw]
        other = (wr >= 0) & (wr != w.id) & (vis > w.epoch)
        d = self._cur
        if same.any():
            rows = same.any(axis=1)
            bad = dw[same]
            src = int(self.lds_wr_line[bad[0]])
            self._report("lds_read_pending", line, w, tuple(int(x) for x in np.asarray(lanes)[rows]), None,
                         (int(bad.min()) * 4, int(bad.max()) * 4 + 3),
                         f"{d.opcode if d else 'ds read'} reads LDS bytes the LDS DMA at line {src} has not "
                         f"finished writing (missing s_waitcnt vmcnt)", src)
        if other.any():
            rows = other.any(axis=1)
            bad = dw[other]
            src = int(self.lds_wr_line[bad[0]])
            pending = bool((self.lds_pend[bad] != 0).any())
            why = ("is still pending (the writer had not waited for it before the barrier)" if pending else
                   "completed after the last barrier both waves passed (missing s_waitcnt before s_barrier, "
                   "or missing s_barrier)")
            self._report("lds_cross_wave", line, w, tuple(int(x) for x in np.asarray(lanes)[rows]), None,
                         (int(bad.min()) * 4, int(bad.max()) * 4 + 3),
                         f"{d.opcode if d else 'ds read'} reads LDS bytes written by wave {int(self.lds_writer[bad[0]])} "
                         f"at line {src}; that write {why}", src)

    # ---------------------------------------------------------- retire ---
    def _retire(self, w, q, op):
        op.need -= 1
        if op.need > 0:             # a flat op still counted on the other counter
            return
        if op.rlds is not None:
            mine = op.rlds[self.lds_rpend[op.rlds] == op.id]
            self.lds_rpend[mine] = 0
            self.lds_rretire[mine] = w.epoch
        if op.land is not None:
            f, op.land = op.land, None
            f(w)
        for r in op.vregs:
            if q.vpend.get(r) is op:
                del q.vpend[r]
        for r in op.sregs:
            if q.spend.get(r) is op:
                del q.spend[r]
        if op.lds is not None and op.lds.size:
            mine = op.lds[self.lds_pend[op.lds] == op.id]
            self.lds_pend[mine] = 0
            self.lds_pdma[mine] = False
            self.lds_vis[mine] = w.epoch + 1

    def wait(self, w, vm, lgkm):
        q = self._wq(w)
        while len(q.vm) > vm:
            self._retire(w, q, q.vm.popleft())
        while len(q.ds) > lgkm:
            self._retire(w, q, q.ds.popleft())
        if lgkm == 0:
            for op in q.smem:
                self._retire(w, q, op)
            q.smem.clear()

    def endpgm(self, w):
        self.wait(w, 0, 0)

    def land_due(self, w):
        """delivery="random": land the deferred ops whose drawn time has come -- in issue order
        within vmcnt and within the DS ops, in any order for scalar loads.  They stay pending for the
        checker (the program has not waited for them)."""
        q = self.q.get(w.id)
        if q is None:
            return
        now = w.executed
        for dq in (q.vm, q.ds):
            for op in dq:
                if op.land is None:
                    continue
                if op.due > now:
                    break
                f, op.land = op.land, None
                f(w)
        for op in q.smem:
            if op.land is not None and op.due <= now:
                f, op.land = op.land, None
                f(w)


class EventLog:
    """Per-workgroup record of accesses that hardware resolves silently, on whatever the hazard mode:

    * an LDS access outside the kernel's allocation (hardware drops the write and reads 0; a
      foreign kernel launched without its dynamic LDS size would otherwise return zeros quietly)
      is a ``lds_outside`` report, once per (line, wave);
    * out-of-range buffer lanes (loads read 0, stores/atomics dropped -- legal, but a user wants to
      see that a kernel relied on the range check) are counted per (opcode, line) for ``res.stats``.
    """

    def __init__(self, mode: str, lds_bytes: int, workgroup=(0, 0, 0)):
        self.mode = mode
        self.lds_size = lds_bytes
        self.wg = tuple(workgroup)
        self.reports = []
        self.out_of_range = {}
        self._seen = set()

    def lds_outside(self, w, byte_idx, what, line, opcode):
        b = np.asarray(byte_idx).reshape(-1)
        if not b.size or (line, w.id) in self._seen:
            return
        self._seen.add((line, w.id))
        r = HazardReport("lds_outside", line, w.id, (), None, (int(b.min()), int(b.max())),
                         f"{opcode} {what} of LDS bytes {int(b.min())}..{int(b.max())}, outside the kernel's "
                         f"{self.lds_size}-byte LDS allocation (hardware drops such writes and reads 0; pass the "
                         f"dynamic LDS size with launch(..., lds_bytes=N))", self.wg)
        self.reports.append(r)
        if self.mode == "strict":
            raise HazardError(r)

    def buffer_oob(self, opcode, line, lanes):
        key = (opcode, line)
        self.out_of_range[key] = self.out_of_range.get(key, 0) + int(lanes)


# ------------------------------------------------------------------ wait states ----

def _mfma_passes(opcode):
    """Lower bound on an MFMA's passes (LLVM: TSchedModel.computeInstrLatency): 4x4 -> 2, 16x16 -> 8,
    32x32 -> 16; the gfx950 f8f6f4 forms run at their fastest (fp4) rate, 4 / 8 passes.  A lower bound
    keeps the check from flagging code LLVM padded for the real (possibly longer) latency."""
    if "_4x4x" in opcode:
        return 2
    fast = "f8f6f4" in opcode
    if "_16x16x" in opcode:
        return 4 if fast else 8
    return 8 if fast else 16


def _is_xdl(opcode):
    # GFX940+ XDL MFMAs: everything but the f32 / xf32 / f64 source forms (AMDGPU::getMAIIsGFX940XDL)
    return not opcode.endswith(("_f32", "x1f32", "x2f32", "x4f32", "_xf32", "_f64"))


_K_VALU, _K_PERMLANE, _K_CMPX, _K_MEM, _K_DMA, _K_MFMA, _K_M0 = 1, 2, 3, 4, 5, 6, 7
_MAX_MFMA_WAIT = 21     # the longest MFMA -> VALU/memory wait modelled (16 passes + 4) + 1


class _WaitStates:
    """No-interlock hazards that need wait states (``s_nop N`` = N+1 of them; any other instruction 1),
    after LLVM's GCNHazardRecognizer.cpp for gfx950 (checked against ROCm/llvm-project@03a23131):

    * ``checkVALUHazardsHelper`` / ``createsVALUHazard``: a VALU write of VGPRs that a preceding VMEM
      store of more than 64 bits of data still reads (MUBUF without an SGPR soffset, or global/flat)
      needs ``VALUWaitStates`` = 2 on gfx940+;
    * ``checkReadM0Hazards`` (``hasReadM0LdsDmaHazard`` && ``isLdsDma``): an SALU write of M0 then an LDS
      DMA needs ``ReadM0WaitStates`` = 1;
    * ``checkPermlaneHazards``: a VALU write of a VGPR that ``v_permlane16/32_swap`` reads needs
      ``VALUWritesVDstWaitStates`` = 2, a ``v_cmpx`` (writes EXEC) before it ``VCmpXWritesExecWaitStates`` = 4;
    * ``checkMAIVALUHazards``: an XDL MFMA's result written or read by a VALU / VMEM / DS op needs
      ``GFX940_XDL_N_PassWriteVgprVALUWawWaitStates`` / ``..MemExpReadWaitStates`` = passes + 3 (+1 on
      gfx950 unless 2 passes), a non-XDL one passes + 2 (passes: see _mfma_passes);
    * ``checkVALUHazards`` with ``hasCvtScaleForwardingHazard`` (``getDstSelForwardingOperand``): a
      ``v_cvt_scalef32_sr_pk_fp4_*`` (any op_sel), or a ``v_cvt_scalef32*`` to FP4/FP8/BF8 that writes a
      selected byte/word (op_sel[2] or op_sel[3] set), then a VALU that reads or writes that VGPR needs
      ``Shift16DefWaitstates`` = 1 (LLVM's own output agrees: it puts an ``s_nop 0`` after
      ``v_cvt_scalef32_pk_fp4_f32 ... op_sel:[0,0,0,1]`` and none after op_sel 0).

    Reported as kind ``wait_states`` with the producing line as ``source_line``.  Wait states follow the
    executed path of one wave (LLVM looks along every predecessor).
    """

    def __init__(self, tracker, instructions):
        self.t = tracker
        self.ins = instructions
        self.info = {}

    def _info(self, d):
        hit = self.info.get(d.index)
        if hit is not None:
            return hit
        op = d.opcode
        ins = self.ins[d.index] if self.ins is not None and d.index < len(self.ins) else None
        mods = ins.mods if ins is not None else {}
        nwait = 1
        if op == "s_nop":
            nwait = (int(ins.operands[0].value) if ins is not None and ins.operands else 0) + 1
        big_store = ()
        if d.cls == "vmem" and "store" in op and not op.startswith("scratch_") and ins is not None \
                and op.endswith(("dwordx3", "dwordx4")):
            data = ins.operands[0] if op.startswith("buffer_") else ins.operands[1]
            big_store = tuple(range(data.index + (self.t.acc if data.kind == "a" else 0),
                                    data.index + (self.t.acc if data.kind == "a" else 0) + data.count))
            if op.startswith("buffer_") and len(ins.operands) > 3 and ins.operands[3].kind == "s":
                big_store = ()          # createsVALUHazard: MUBUF only without a register soffset
        fwd = False
        if op.startswith("v_cvt_scalef32_"):
            tail = op[len("v_cvt_scalef32_"):]
            fmts = [t for t in tail.split("_") if t not in ("sr", "pk", "pk32")]
            dest = fmts[0] if fmts else ""
            sel = tuple(mods.get("op_sel") or ())
            if tail.startswith("sr_pk_fp4"):
                fwd = True                      # "nop is required for all the opsel values for fp4 sr variant"
            elif dest in ("fp4", "fp8", "bf8"):
                fwd = any(sel[2:4])             # dst byte/word select: op_sel[2] (src2 OP_SEL_0) or op_sel[3]
        cls = d.cls
        kind, regs, need = 0, frozenset(), 0
        if cls == "valu":
            kind = _K_VALU
            if op.startswith(("v_permlane16_swap", "v_permlane32_swap")):
                kind = _K_PERMLANE
            elif op.startswith("v_cmpx"):
                kind = _K_CMPX
            regs = d.vreads | d.vwrites
        elif cls == "mfma":
            kind = _K_MFMA
            passes = _mfma_passes(op)
            need = passes + 3 + (passes != 2) if _is_xdl(op) else passes + 2
        elif cls in ("vmem", "lds"):
            kind = _K_DMA if (d.pend is not None and d.pend[0] == "vm" and d.pend[3]) else _K_MEM
            regs = d.vreads
        elif cls == "salu" and 124 in d.swrites:
            kind = _K_M0
        info = (nwait, big_store, fwd, kind, regs, need)
        self.info[d.index] = info
        return info

    def _flag(self, w, d, need, have, src_line, what):
        self.t._report("wait_states", d.line, w, (), None, None,
                       f"{d.opcode} {what} {have} wait state{'s' if have != 1 else ''} after line {src_line}; "
                       f"it needs {need} (add s_nop {need - have - 1})", src_line)

    def check(self, w, q, d):
        info = self.info.get(d.index)
        if info is None:
            info = self._info(d)
        nwait, big_store, fwd, kind, regs, mfma_need = info
        c = q.clock
        if kind:
            self._check(w, q, d, c, kind, regs)
            # ---- record this instruction as a producer
            if kind <= _K_CMPX:                         # VALU
                line = d.line
                for r in d.vwrites:
                    q.valu_w[r] = (c, line)
                if q.mfma_w:
                    for r in d.vwrites:
                        q.mfma_w.pop(r, None)
                if kind == _K_CMPX:
                    q.cmpx = (c, line)
                if fwd:
                    q.fwd = (c, d.vwrites, line, d.opcode)
            elif kind == _K_MFMA:
                e = (c, mfma_need, d.line, d.opcode)
                for r in d.vwrites:
                    q.mfma_w[r] = e
                q.mfma_last = c
            elif kind == _K_M0:
                q.m0_w = (c, d.line)
        for r in big_store:             # the store's data VGPRs (vdata), > 64 bits
            q.store_data[r] = (c, d.line)
        q.clock = c = c + nwait
        if q.mfma_w and c - q.mfma_last > _MAX_MFMA_WAIT:
            q.mfma_w.clear()            # every MFMA result is older than the longest wait any needs
        if len(q.store_data) > 32:
            q.store_data = {r: v for r, v in q.store_data.items() if c - v[0] <= 3}

    def _check(self, w, q, d, c, kind, regs):
        if kind <= _K_CMPX:                             # VALU consumers
            if q.store_data:
                for r in d.vwrites:
                    v = q.store_data.get(r)
                    if v is not None and c - v[0] - 1 < 2:
                        self._flag(w, d, 2, c - v[0] - 1, v[1], f"overwrites store data {self.t._vname(r)}")
                        break
            if q.fwd is not None:
                pc, fregs, line, pop = q.fwd
                if c - pc - 1 < 1 and not fregs.isdisjoint(regs):
                    self._flag(w, d, 1, c - pc - 1, line, f"uses the forwarded result of {pop} with")
            if kind == _K_PERMLANE:
                for r in d.vreads:
                    pw = q.valu_w.get(r)
                    if pw is not None and c - pw[0] - 1 < 2:
                        self._flag(w, d, 2, c - pw[0] - 1, pw[1], f"reads {self.t._vname(r)} (written by a VALU) with")
                        break
                if q.cmpx is not None and c - q.cmpx[0] - 1 < 4:
                    self._flag(w, d, 4, c - q.cmpx[0] - 1, q.cmpx[1], "follows a v_cmpx (EXEC write) by")
        if q.mfma_w and kind != _K_MFMA and kind != _K_M0:
            for r in regs:
                e = q.mfma_w.get(r)
                if e is None:
                    continue
                have = c - e[0] - 1
                if have < e[1]:
                    what = "writes" if r in d.vwrites and r not in d.vreads else "reads"
                    self._flag(w, d, e[1], have, e[2], f"{what} {self.t._vname(r)}, a result of {e[3]}, with")
                    break
        if kind == _K_DMA and q.m0_w is not None and c - q.m0_w[0] - 1 < 1:
            self._flag(w, d, 1, c - q.m0_w[0] - 1, q.m0_w[1], "(LDS DMA) reads M0 written by an SALU with")
