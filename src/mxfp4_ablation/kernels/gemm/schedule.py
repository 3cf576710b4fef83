"""The issue schedule of every K step, and how many loads may still be in flight at each wait.

Trace-free: it reads the slot table (:class:`~.slots.Slots`) and never emits anything, so ``min_k_for_loop``
and the tests use it without FlyDSL.
"""

from .layout import HALVES


def head_steps(slots, KI) -> int:
    """K steps emitted before the runtime loop: the loop slot's peeled steps (2 with k_unroll4, like
    PR #990), at least the MFMA slot's (1 when step 0's first K half has src2 = 0), never more than
    there are."""
    return min(max(slots.loop.head, slots.mfma.peel_first), KI)


def _group(u, k):
    """The wait group a vector-memory unit of step ``k`` belongs to (None for an LDS read)."""
    if u[0] == "dma":
        return u[1], k + u[2]
    if u[0] == "gather":
        return "G", k + u[1]
    if u[0] == "scale":
        return "S", k + u[1]
    return None


class Plan:
    """The issue schedule of every K step, and how many loads may still be in flight at each wait.

    One step is two waits and four 64x64 blocks of 32 MFMAs; each block carries a list of *units*
    (one load instruction each) that the pipeline issues among its MFMAs (the order slot's
    ``load_after``). vmcnt counts this wave's vector-memory instructions in issue order, so a wait for
    group X may leave in flight exactly the instructions issued after X's last one.  The plan replays
    the units in issue order (per concrete K step) and reads the counts off it, so moving a load
    between waits moves its count with it.  Groups: ``(half, k)`` (4 LDS-DMA of one LDS half of step
    k's tiles), ``("G", k)`` (the scale gather of step k, 1), ``("S", k)`` (8 scale loads to VGPRs).
    """

    def __init__(self, slots, KI):
        self.slots, self.KI = slots, KI
        self.events = []  # one (kind, step) per vector-memory instruction, in issue order
        self.waits = {}
        self._prologue()
        for k in range(KI):
            self._step(k)

    def issues(self, k):
        """Groups issued inside step k: [(kind, step, n_instructions)] in the order their first
        instruction is issued (read off :meth:`segments`)."""
        out = {}
        for seg in self.segments(k):
            if seg[0] == "wait":
                continue
            for u in seg[2]:
                key = _group(u, k)
                if key is not None:
                    out[key] = out.get(key, 0) + 1
        return [(kind, step, n) for (kind, step), n in out.items()]

    def segments(self, k):
        """Step k as ``[("issue", tag, units) | ("wait", tag, needs) | ("block", (h, v), units)]`` in
        issue order (``issue``: loads outside any block, the VGPR scale loads at the step's top).

        Units: ``("dma", half, rel, r)`` (LDS-DMA instruction r of that half of step k+rel, into the
        stage step k reads), ``("read", half, rel, ks, t)`` (the ds_read_b128 of fragment (t, ks) of
        step k+rel's half), and the scale slot's units (``("scale", rel, n)``, ``("ring", rel, n)``,
        ``("gather", rel)``).  The step slot places the top half's units (blocks (0,0), (0,1)) and says
        which halves the top wait releases; the middle wait follows, then the next step's fragments
        (the step slot's ``carried`` halves) are read from the other stage among blocks (1,0), (1,1).
        """
        s, KI = self.slots, self.KI
        refill = k + 2 < KI
        nxt = k + 1 < KI
        mix = s.order.mix

        def dma(half):
            return [("dma", half, 2, r) for r in range(4)] if refill else []

        def read(half, rel):
            return [("read", half, rel, ks, t) for ks in range(2) for t in range(4)]

        before, scales, gather, needs = s.scales.units(k, KI, s.loop)
        segs = [("issue", "scales", before)] if before else []
        segs.append(("wait", "top", [("A1", k)] + needs))
        segs += [("block", hv, units) for hv, units in s.step.top_blocks(dma, read, mix, scales)]
        later = s.step.carried  # the next step's, read here
        nreads = [u for h in later for u in read(h, 1)] if nxt else []
        if refill or nreads:
            segs.append(("wait", "mid", [(h, k + 1) for h in later] if nxt else []))
        ra = [u for u in nreads if u[1] == "A0"]
        rb = [u for u in nreads if u[1] != "A0"]
        # The halves stay whole (g2s_m0 advances m0 from one instruction of a half to the next).
        segs.append(("block", (1, 0), mix(s.step.refills(dma), ra) + gather))
        segs.append(("block", (1, 1), mix(dma("A1"), rb)))
        return segs

    # ---------------------------------------------------------------- replay
    def _count_after(self, need):
        pos = max((i for i, e in enumerate(self.events) if e in need), default=None)
        if pos is None:
            return None
        return len(self.events) - pos - 1

    def _prologue(self):
        KI = self.KI
        self.events += self.slots.scales.prologue_events(KI)
        for k in range(min(2, KI)):
            self.events += [(h, k) for h in HALVES for _ in range(4)]
        need = [(h, 0) for h in self.slots.step.carried] + self.slots.scales.prologue_needs()
        self.waits["prologue"] = self._count_after(need)

    def _step(self, k):
        for seg in self.segments(k):
            if seg[0] == "wait":
                self.waits[seg[1], k] = self._count_after(seg[2])
            else:
                self.events += [g for g in (_group(u, k) for u in seg[2]) if g is not None]

    def loop_range(self, head):
        """``(lo, hi, unroll)``: steps [lo, hi) run by the runtime loop, ``unroll`` per iteration (the
        loop slot's, when the loop steps divide by it, else 2); the rest is unrolled."""
        s = self.slots
        last = s.scales.last_full_step(self.KI, s.loop)  # steps < last issue every kind of load
        n = max(0, last - head)
        unroll = s.loop.unroll if n and n % s.loop.unroll == 0 else 2
        return head, head + unroll * (n // unroll), unroll

    def loop_wait(self, kind, ks):
        """The wait used in the loop body: the smallest count over the steps it stands for."""
        vals = [self.waits[kind, k] for k in ks if self.waits.get((kind, k)) is not None]
        return min(vals) if vals else None
