"""The GEMM kernel: the :class:`Pipeline` that puts the slots' stages in order, and :func:`build`.

Everything here runs while FlyDSL traces the kernel.  The emission code lives in module-level
classes (not inside the ``@kernel`` body) so FlyDSL's AST rewriter leaves their Python loops alone:
they unroll at trace time.
"""

from .. import lazy
from . import stages, steps
from .layout import BLOCK_K, BLOCK_M, BLOCK_N, HALVES
from .schedule import Plan, head_steps

# FlyDSL names, filled on the first build (:func:`load_flydsl`).
flyc = fx = rocdl = C = const_expr = range_constexpr = None


def load_flydsl():
    """Fill the FlyDSL names of every module that emits (this one, the stages, the steps)."""
    import sys

    for module in (sys.modules[__name__], stages, *steps.STEPS):
        lazy.load_flydsl(vars(module))


def _wait(vmcnt=None, lgkmcnt=None, barrier=True):
    rocdl.sched_barrier(0)
    fx.rocdl.s_waitcnt(vmcnt=vmcnt, lgkmcnt=lgkmcnt)
    if barrier:
        rocdl.s_barrier()
    rocdl.sched_barrier(0)


def _div(a, b):
    return a // b if isinstance(a, int) else fx.Int32(a) // b


def _i64(v):
    return v if isinstance(v, int) else fx.Int64(v)


class Pipeline:
    """One GEMM kernel body for a slot table and a shape: setup, prologue, K steps (unrolled and as the
    loop body), epilogue.  Holds what every stage reads (lane, wave, tile, buffer resources, LDS base,
    the DMA voffsets) and one object per slot."""

    def __init__(self, slots, M, N, K):
        self.slots = slots
        self.M, self.N, self.K = M, N, K
        self.KB = K // 2  # bytes per row of A / B
        self.KI = K // BLOCK_K  # K steps
        self.K0 = K // 128  # 128-K blocks per B row
        self.K1 = K // 256  # 256-K chunks per scale row
        self.plan = Plan(slots, self.KI)
        self.head = head_steps(slots, self.KI)
        self.lo, self.hi, self.unroll = self.plan.loop_range(self.head)
        # The compiler may move compiler-visible loads and MFMAs past each other, so with its own MFMA
        # op every load unit is fenced (sched_barrier).  An inline-asm MFMA (side effects) already keeps
        # every load on its side, so nothing is fenced and the compiler may still move the loads'
        # address arithmetic (the v_readfirstlane / m0 writes) between them, as in FlyDSL daee90e4,
        # whose ``Mfma16x16x128Fp4.call`` issues its thunks with no scheduling barrier at all.
        self.pin = not slots.mfma.ordered
        self.shape, self.g2s, self.s2r = slots.shape(self), slots.g2s(self), slots.s2r(self)
        self.scales, self.mfma, self.store = slots.scales(self), slots.mfma(self), slots.store(self)

    # ------------------------------------------------------------------ setup
    def setup(self, A, B, Cout, A_scale, B_scale, c_m, c_n, lds):
        c_m, c_n = self.shape.mn(c_m, c_n)
        self.c_n = c_n
        tid = fx.thread_idx.x
        self.lane = tid % 64
        self.wave = fx.Int32(C.uniform(tid // 64))
        # The wave id as the compiler sees it in a VGPR (divergent): LDS-DMA destinations built from it
        # need one v_readfirstlane per load for m0 (FlyDSL's kernel before PR #990; g2s_m0 removes them).
        self.wave_v = fx.Int32(tid // 64)
        self.wi = self.wave // 2
        self.wj = self.wave % 2
        self.tile_i, self.tile_j = stages.tile_order(fx.block_idx.x, _div(c_m, BLOCK_M), _div(c_n, BLOCK_N))
        self.a_rsrc = C.buffer_rsrc(A, _i64(c_m * self.KB))
        self.b_rsrc = C.buffer_rsrc(B, _i64(c_n * self.KB))
        self.sa_rsrc = C.buffer_rsrc(A_scale, _i64(c_m * (self.K // 32)))
        self.sb_rsrc = C.buffer_rsrc(B_scale, _i64(c_n * (self.K // 32)))
        self.c_rsrc = C.buffer_rsrc(Cout, _i64(c_m * c_n * 2))
        self.lds = fx.Int32(C.uniform(C.lds_addr(lds.tiles)))
        # the wave-uniform LDS bases first, then the per-lane offsets
        self.scales.lds_bases(lds)
        self.shape.lds_bases()
        self.scales.setup()
        self.shape.setup()

    def block_origin(self, h, v):
        """(row, column) of C where this wave's 64x64 block (h, v) starts."""
        row0 = self.tile_i * BLOCK_M + h * 128 + self.wi * 64
        col0 = self.tile_j * BLOCK_N + v * 128 + self.wj * 64
        return row0, col0

    # ------------------------------------------------------------------ K pipeline
    def prologue(self):
        """Step 0's scales, the DMAs of steps 0 and 1, the first wait, step 0's carried fragments."""
        loaded = self.scales.prologue()
        self.shape.after_first_scales()
        for k in range(min(2, self.KI)):
            rocdl.sched_barrier(0)
            for half in HALVES:
                for r in range(4):
                    self.dma(k, k % 2, half, r, {})
        rocdl.sched_barrier(0)
        _wait(vmcnt=self.plan.waits["prologue"])
        carry = list(self.scales.first(loaded))
        for half in self.slots.step.carried:  # in this order: a step's top wait counts on B0 (B1) being read last
            rocdl.sched_barrier(0)
            carry += self.s2r.read_half(0, half)
        rocdl.sched_barrier(0)
        return self.mfma.initial_acc(), carry

    def dma(self, k, parity, half, r, cache):
        """LDS-DMA instruction r (of 4) of one half of step k's tiles into stage ``parity``."""
        is_a = half[0] == "A"
        key = ("soff", is_a)  # the K offset rides in the scalar soffset (FlyDSL's kernel too, before #990)
        if key not in cache:
            cache[key] = C.uniform(fx.Int32(k) * (128 if is_a else 2048))
        self.g2s.load(parity, half, r, cache[key])

    def loop_body(self, kk, state):
        """One loop iteration: ``unroll`` K steps from the loop's i32 step ``kk``."""
        lo, hi, u = self.lo, self.hi, self.unroll
        acc, carry = self.unpack(state)
        for j in range(u):
            acc, carry = self.step(kk + j, (lo + j) % 2, acc, carry, lo + j, list(range(lo + j, hi, u)))
        return self.pack(acc, carry)

    # state = 64 accumulators + 8 scale words + the next step's carried fragments
    def pack(self, acc, carry):
        return [C.raw(x) for x in acc] + [C.raw(x) for x in carry]

    def unpack(self, state):
        state = list(state)
        return state[:64], state[64:]

    def block(self, acc, h, v, af, bf, scales, first, thunks=()):
        """32 MFMAs of 64x64 block (h, v): both 128-K halves, tiles in the order slot's order.
        ``thunks`` (one load instruction each) are issued right after the MFMAs the order slot's
        ``load_after`` names."""
        sa = scales[0:4]
        sb = scales[4:8]
        thunks = list(thunks)
        order = self.slots.order
        tiles = order.tiles()
        after = {}
        for t, slot in enumerate(order.load_after(len(thunks), 2 * len(tiles))):
            after.setdefault(slot, []).append(thunks[t])
        m = 0
        for ks in range(2):
            for ti, tj in tiles:
                idx = ((h * 2 + v) * 4 + ti) * 4 + tj
                a, b = af[ti][ks], bf[tj][ks]
                s_a, s_b, opa, opb = sa[h * 2 + ti // 2], sb[v * 2 + tj // 2], 2 * ks + ti % 2, 2 * ks + tj % 2
                if self.store.transposed:  # C^T = B . A^T: swap operands and their scales
                    a, b, s_a, s_b, opa, opb = b, a, s_b, s_a, opb, opa
                acc[idx] = self.mfma.op(a, b, None if (first and ks == 0) else acc[idx], s_a, s_b, opa, opb)
                for th in after.get(m, ()):
                    th()
                m += 1

    def step(self, k, parity, acc, carry, plan_k, loop_ks=None):
        """Emit K step ``k`` (int, or the loop's i32 value) reading LDS stage ``parity``.

        ``plan_k`` is a concrete step number whose issue pattern (:meth:`Plan.segments`) this
        emission follows; ``loop_ks`` lists the concrete steps a loop-body emission stands for (waits
        use the most conservative of them).
        """
        plan = self.plan
        ks_list = loop_ks or [plan_k]
        first = acc[0] is None
        scales = carry[:8]
        frags = {}  # (half, rel) -> [t][ks]
        for n, half in enumerate(self.slots.step.carried):
            flat = carry[8 + 8 * n: 16 + 8 * n]
            frags[half, 0] = [[flat[2 * t], flat[2 * t + 1]] for t in range(4)]
        new_scales = [None] * 8
        cache = {}

        def unit(u):
            if u[0] == "dma":
                self.dma(k + u[2], parity, u[1], u[3], cache)
            elif u[0] == "read":
                _, half, rel, ks, t = u
                frags.setdefault((half, rel), [[None, None] for _ in range(4)])
                frags[half, rel][t][ks] = self.s2r.read((plan_k + rel) % 2, half, ks, t)
            else:
                self.scales.emit(u, k, cache, new_scales)
            if self.pin:
                rocdl.sched_barrier(0)

        last = plan_k == self.KI - 1
        store_each = last and self.store.per_block
        acc = list(acc)
        for seg in plan.segments(plan_k):
            if seg[0] == "wait":
                lgkm = self.slots.step.top_lgkmcnt if seg[1] == "top" else 0
                _wait(vmcnt=plan.loop_wait(seg[1], ks_list), lgkmcnt=lgkm)
                continue
            if seg[0] == "issue":  # loads issued outside any block (before the step's first wait)
                for u in seg[2]:
                    unit(u)
                continue
            (h, v), units = seg[1], seg[2]
            a = frags["A%d" % h, 0]
            b = frags["B%d" % v, 0]
            self.block(acc, h, v, a, b, scales, first, [lambda u=u: unit(u) for u in units])
            if store_each:
                self.store.store_block(acc, h, v)
        if last:
            if not store_each:
                for h in range(2):
                    for v in range(2):
                        self.store.store_block(acc, h, v)
            return acc, []
        carry = list(new_scales)
        for half in self.slots.step.carried:
            carry += [f for t in frags[half, 1] for f in t]
        return acc, carry


def build(slots, M: int, N: int, K: int):
    """The ``@flyc.jit`` launcher of the GEMM for a slot table and shape (M and N are only baked into
    the code by a static shape slot; otherwise the launcher passes them at run time and they merely
    pick the grid here)."""
    load_flydsl()
    layout = Pipeline(slots, M, N, K)  # trace-free: only to know the loop's range here
    lo, hi, unroll = layout.lo, layout.hi, layout.unroll
    KI = K // BLOCK_K
    Shared = slots.scales.shared()

    @flyc.kernel
    def mxfp4_gemm(
        A: fx.Tensor, B: fx.Tensor, Cout: fx.Tensor, A_scale: fx.Tensor, B_scale: fx.Tensor,
        c_m: fx.Int32, c_n: fx.Int32,
    ):
        lds = fx.SharedAllocator().allocate(Shared).peek()
        em = Pipeline(slots, M, N, K)
        em.setup(A, B, Cout, A_scale, B_scale, c_m, c_n, lds)
        acc, carry = em.prologue()
        for k0 in range_constexpr(em.head):
            acc, carry = em.step(k0, k0 % 2, acc, carry, k0)
        state = em.pack(acc, carry)
        if const_expr(hi > lo):
            for kk, state in range(lo, hi, unroll, init=state):
                state = yield em.loop_body(kk, state)
        acc, carry = em.unpack(state)
        for k1 in range_constexpr(hi, KI):
            acc, carry = em.step(k1, k1 % 2, acc, carry, k1)

    @flyc.jit
    def launch(
        A: fx.Tensor,
        B: fx.Tensor,
        Cout: fx.Tensor,
        A_scale: fx.Tensor,
        B_scale: fx.Tensor,
        c_m: fx.Int32,
        c_n: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        grid = (c_m // BLOCK_M) * (c_n // BLOCK_N)
        mxfp4_gemm(
            A, B, Cout, A_scale, B_scale, c_m, c_n,
            value_attrs={"rocdl.waves_per_eu": 1, "rocdl.flat_work_group_size": "256,256"},
        ).launch(grid=(grid, 1, 1), block=(256, 1, 1), stream=stream)

    return launch
