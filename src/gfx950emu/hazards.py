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

Waves of a workgroup run in wave order between barriers, so a read that
another wave's later write in the same interval would change is found as
``lds_race`` when the write happens.

Store data and addresses are taken as read when the store issues (so
overwriting them afterwards is not reported).  Some compilers treat a vmcnt
queue that mixes loads and stores as unordered (LLVM SIInsertWaitcnts then
waits for vmcnt(0)); here vmcnt is in issue order for all of them, as the ISA
guide describes the counter.

No-interlock wait-state hazards (the ``s_nop`` counts the ISA requires, e.g.
between an MFMA and a read of its result, or after VALU writes of SGPRs used
by VMEM) are NOT checked: the emulator does not model pipeline timing.
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
    __slots__ = ("id", "counter", "wave", "line", "vregs", "sregs", "exec", "lds", "dma", "land", "due")

    def __init__(self, oid, counter, wave, line, vregs, sregs, ex, lds, dma, land=None, due=0):
        self.id, self.counter, self.wave, self.line = oid, counter, wave, line
        self.vregs, self.sregs, self.exec, self.lds, self.dma = vregs, sregs, ex, lds, dma
        self.land, self.due = land, due     # deferred delivery: the write still to do, when it may land


class _WaveQ:
    __slots__ = ("vm", "ds", "smem", "vpend", "spend")

    def __init__(self):
        self.vm, self.ds, self.smem = deque(), deque(), []
        self.vpend, self.spend = {}, {}


def _lanes(mask: int) -> tuple:
    return tuple(i for i in range(64) if (mask >> i) & 1)


class HazardTracker:
    """Pending-op bookkeeping for the waves of one workgroup."""

    MAX_REPORTS = 10000

    def __init__(self, mode: str, lds_bytes: int, workgroup=(0, 0, 0), acc_offset: int = 256, rng=None):
        self.mode = mode
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
        w.land = None
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
        if self._stash is None:
            self._stash = []
        self._stash.append(dw)

    def check_lds_read(self, w, addr, nbytes, lanes, line):
        """Called by DS-read handlers before the data is used: addr int64 [L] byte addresses."""
        if addr.size == 0:
            return
        dw = (addr[:, None] + np.arange(0, nbytes, 4, dtype=np.int64)[None, :]) >> 2
        dw = np.clip(dw, 0, self.lds_pend.size - 1)
        flat = dw.reshape(-1)
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
