"""The baseline stages (``gemm-v0``): one class per slot of :class:`~.slots.Slots`, named by hardware
stage as FlyDSL's own kernel names them (``G2SLoaderAsm``, ``S2RLoaderFp4``, ``Mfma16x16x128Fp4``,
``ScaleGatherLDS``, ``StoreCFp4``, ...).  A step (``steps/NN_<switch>.py``) replaces one or a few of
them.

A stage object is made per kernel with the :class:`~.kernel.Pipeline` it emits into (``self.p``: the
workgroup's lane, wave, tile, buffer resources and LDS base) and emits at trace time.  Class attributes
(``ordered``, ``carried``, ...) and class methods (``units``, ...) describe what the stage issues, for
the trace-free :class:`~.schedule.Plan`.
"""

from .layout import BLOCK_M, GROUP_M, HALF, HALVES, N_XCD, STAGE

# FlyDSL takes seconds to import; :func:`.kernel.load_flydsl` fills these on the first build (they are
# used at trace time only), so that reading the switch records stays cheap.
fx = llvm = T = C = None


def inline_asm(result_type, operands, text, constraints):
    """One inline-asm instruction (side effects: the compiler moves nothing across it)."""
    return llvm.inline_asm(result_type, [C.raw(o) for o in operands], text, constraints, has_side_effects=True)


# ============================================================================ shape and addresses


class RuntimeShape:
    """M and N are kernel arguments; every address is computed at the kernel's start."""

    def __init__(self, p):
        self.p = p

    def mn(self, c_m, c_n):
        return c_m, c_n

    def lds_bases(self):
        """The global -> LDS loader's wave-uniform state (m0 bases), with the other LDS bases."""
        self.p.g2s.setup()

    def setup(self):
        """The end of the kernel's setup: DMA voffsets, ds_read offsets."""
        self.dma_addresses()
        self.p.s2r.addresses()

    def after_first_scales(self):
        """Right after the prologue's first scale loads are issued: nothing left to compute."""

    def dma_addresses(self):
        """Per-lane DMA voffsets of the A/B tiles."""
        p = self.p
        lane = p.lane
        # A DMA: instruction q of half h moves rows 8q..8q+7 (128 B each); lane -> row 8q + lane//8,
        # LDS slot lane%8, which holds global 16-byte chunk (lane%8) ^ (lane//8) (the XOR swizzle).
        chunk = (lane % 8) ^ (lane // 8)
        p.a_voff = {}
        p.b_voff = {}
        for r in range(4):
            q = p.wave + 4 * r
            for h in range(2):
                row = p.tile_i * BLOCK_M + h * 128 + q * 8 + lane // 8
                p.a_voff[h, r] = row * p.KB + chunk * 16
            for v in range(2):
                n0 = p.tile_j * 16 + v * 8 + q // 2
                p.b_voff[v, r] = (n0 * p.K0 + q % 2) * 1024 + lane * 16


# ============================================================================ global -> LDS


class G2SLoader:
    """A and B global -> LDS: the compiler's LDS-DMA intrinsic (it reads m0 from a VGPR wave id: one
    v_readfirstlane per load, FlyDSL's kernel before PR #990).  The compiler sees these DMAs and, not
    knowing where they write, would wait vmcnt(0) before any ds_read after one; one alias scope per LDS
    half-buffer (2 stages x 4) lets it wait only for DMAs into the buffer read (FlyDSL's kernel tags
    its loads likewise)."""

    ordered = False  #: the compiler may move other loads and MFMAs past it

    def __init__(self, p):
        self.p = p
        self.scopes = None

    def setup(self):
        names = [f"s{p}{h}" for p in range(2) for h in HALVES]
        attrs = C.lds_alias_scopes("mxfp4_gemm.lds", names)
        self.scopes = {(p, h): attrs[f"s{p}{h}"] for p in range(2) for h in HALVES}

    def load(self, parity, half, r, soff):
        """LDS-DMA instruction r (of 4) of one half into stage ``parity``; ``soff``: the K offset."""
        p = self.p
        is_a, hv = half[0] == "A", int(half[1])
        stage = p.lds + parity * STAGE
        if is_a:
            dst = stage + hv * HALF + (p.wave_v + 4 * r) * 1024
            rsrc, voff = p.a_rsrc, p.a_voff[hv, r]
        else:
            dst = stage + (2 + hv) * HALF + (p.wave_v + 4 * r) * 1024
            rsrc, voff = p.b_rsrc, p.b_voff[hv, r]
        C.lds_dma_dwordx4_scoped(rsrc, dst, voff, self.scopes, (parity, half), soffset=soff)


# ============================================================================ LDS -> registers


class S2RLoaderFp4:
    """A and B LDS -> VGPR: one ds_read_b128 per fragment (tile t, 128-K half ks)."""

    def __init__(self, p):
        self.p = p

    def addresses(self):
        """Per-lane ds_read offsets of A (per 128-K half ks) and B."""
        p = self.p
        i, g = p.lane % 16, p.lane // 16
        self.a_lane = [p.lds + p.wi * 8192 + i * 128 + ((g ^ (i % 8)) ^ (4 * ks)) * 16 for ks in range(2)]
        self.b_lane = p.lds + 2 * HALF + p.wj * 8192 + p.lane * 16

    def read_half(self, parity, half):
        """The 8 fragments of one half, flat in the carry's order (tile t, then K half ks)."""
        return [self.read(parity, half, ks, t) for t in range(4) for ks in range(2)]

    def read(self, parity, half, ks, t):
        """ds_read_b128 of fragment (tile t, K half ks) of one LDS half of stage ``parity``."""
        st = parity * STAGE + int(half[1]) * HALF
        if half[0] == "A":
            addr = self.a_lane[ks] + st + t * 2048
        else:
            addr = self.b_lane + st + (t * 2 + ks) * 1024
        scopes = self.p.g2s.scopes
        if scopes is None:
            return C.ds_read_b128(addr)
        return C.ds_read_b128_scoped(addr, scopes, (parity, half))


# ============================================================================ scales


class ScaleLoaderVGPR:
    """The scales: 8 buffer_load_dword per wave per K step straight to VGPRs, the next step's issued at
    the top of a step, before its first wait (FlyDSL daee90e4's ``_one_step`` starts with
    ``_load_scales_rt(kc_i + 1)``)."""

    def __init__(self, p):
        self.p = p

    @staticmethod
    def shared():
        """The kernel's LDS: the two tile stages."""

        @fx.struct
        class Shared:
            tiles: fx.Array[fx.Int8, 2 * STAGE, 16]

        return Shared

    def lds_bases(self, lds):
        pass

    def setup(self):
        pass

    # ---------------------------------------------------------------- what it issues (trace-free)
    @staticmethod
    def prologue_events(KI):
        return [("S", 0)] * 8

    @staticmethod
    def prologue_needs():
        return []

    @staticmethod
    def units(k, KI, loop):
        """``(before the top wait, in block (0,1), in block (1,0), the top wait's needs)`` of step k."""
        return ([("scale", 1, n) for n in range(8)] if k + 1 < KI else []), [], [], []

    @staticmethod
    def last_full_step(KI, loop):
        """Steps before this one issue every kind of load (the loop runs them)."""
        return KI - 2

    # ---------------------------------------------------------------- emission
    def prologue(self):
        """Issued before the prologue's DMAs: step 0's scale words."""
        return self.load(0)

    def first(self, loaded):
        """After the prologue's wait: step 0's scale words."""
        return loaded

    def emit(self, u, k, cache, new_scales):
        if "scale" not in cache:
            cache["scale"] = self.addrs(k + u[1])
        rsrc, voff = cache["scale"][u[2]]
        new_scales[u[2]] = C.buffer_load(rsrc, voff, 1)

    def addrs(self, k):
        """(rsrc, voffset) of the 8 buffer_load_dword of this wave's A and B scale words of K step k."""
        p = self.p
        out = []
        for rsrc, tile, w in ((p.sa_rsrc, p.tile_i, p.wi), (p.sb_rsrc, p.tile_j, p.wj)):
            for hv in range(2):
                for q in range(2):
                    r1 = tile * 8 + hv * 4 + w * 2 + q
                    out.append((rsrc, ((r1 * p.K1) * 64 + p.lane) * 4 + fx.Int32(k) * 256))
        return out

    def load(self, k):
        return [C.buffer_load(rsrc, voff, 1) for rsrc, voff in self.addrs(k)]


# ============================================================================ MFMA


class Mfma16x16x128Fp4:
    """``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4) as the compiler's op: it places the
    accumulators, and spills and shuffles them (FlyDSL's kernel before AGPR pinning)."""

    ordered = False  #: the compiler may move it past loads
    peel_first = 0  #: K steps that must be emitted before the loop for this MFMA's sake

    def __init__(self, p):
        self.p = p

    def initial_acc(self):
        return [C.zeros_f32x4() for _ in range(64)]

    def op(self, a, b, acc, sa, sb, opa, opb):
        """acc += a . b^T with fp4 scales ``sa``, ``sb`` (byte ``opa``, ``opb`` of each)."""
        return C.mfma_scale_fp4(a, b, acc, sa, sb, opa, opb)


class RowMajorOrder:
    """The MFMAs of a 64x64 block tile by tile, row by row; a block's loads one after each of its first
    MFMAs, the DMAs then the reads (FlyDSL daee90e4, ``Mfma16x16x128Fp4.call``: "one is issued after
    each MFMA", ``thunks[nth[0]]()`` after every MFMA; the thunk list ``_g2s_thunks(...) +
    _s2r_thunks(...)``), so a block with n loads leaves its last ``32 - n`` MFMAs without one."""

    @staticmethod
    def tiles():
        """(ti, tj) visiting order of a 4x4 block of 16x16 tiles."""
        return [(ti, tj) for ti in range(4) for tj in range(4)]

    @staticmethod
    def load_after(n_loads, n_mfma):
        """The MFMA index (0-based) after which each of ``n_loads`` loads is issued."""
        return [min(t, n_mfma - 1) for t in range(n_loads)]

    @staticmethod
    def mix(dmas, reads):
        """A block's load list from its DMAs and its reads."""
        return list(dmas) + list(reads)


# ============================================================================ K steps


class StepPerFragmentWaits:
    """PR #990's "before": the B half-1 fragments are read in the step that uses them (block (0,0)'s
    shadow, used in (0,1)), A half 1 in (0,1)'s, and the compiler waits for them fragment by fragment.
    Each block refills one half, as FlyDSL daee90e4's ``_one_step`` does (its thunk lists: A0 then the
    B1 reads in c00, B0 then the A1 reads in c01, B1 then the next A0 reads in c10, A1 then the next B0
    reads in c11): the top wait releases A0 and B0 (refilled in blocks (0,0), (0,1)), the middle one B1
    and A1 (refilled in (1,0), (1,1)).

    The one departure from the seed is the top wait's lgkmcnt(0).  The seed's top wait
    (``wait_barrier``: ``s_waitcnt vmcnt(n)`` + ``s_barrier``) has no lgkmcnt, so another wave's B0
    reads of this step, the last LDS reads before it (block (1,1) of the previous step), may still be
    in flight when this wave's B0 DMA overwrites that half (the emulator's checker reports
    ``lds_read_overwritten``).  Any count above 0 leaves some of those reads in flight, so lgkmcnt(0)
    is the smallest wait that closes the race; it also makes the compiler's per-fragment waits for B0
    in block (0,0) unnecessary (gemm-v1 at 8192^3: 22 s_waitcnt per loop trip of 2 K steps, daee90e4
    34)."""

    carried = ("A0", "B0")  #: halves of the next step read in this one (loop-carried)
    top_lgkmcnt = 0  #: LDS reads the top wait leaves in flight

    @staticmethod
    def top_blocks(dma, read, mix, scales):
        return [((0, 0), mix(dma("A0"), read("B1", 0))), ((0, 1), mix(dma("B0"), read("A1", 0)) + scales)]

    @staticmethod
    def refills(dma):
        """The halves block (1,0) refills."""
        return dma("B1")


class TwoStepLoop:
    """Two K steps per loop iteration (an even count keeps the LDS stage static), no peeled steps."""

    head = 0  #: K steps peeled before the loop
    unroll = 2  #: K steps per loop iteration (when the loop's steps divide by it, else 2)
    uniform_steps = False  #: every loop step issues the same loads (dummies past the end)


# ============================================================================ epilogue


class StoreCBf16:
    """C out after the last K step: one 2-byte buffer_store per bf16 (lane l holds 4 rows of column
    l % 16 of each 16x16 tile)."""

    transposed = False  #: the MFMAs compute C^T (operands swapped)
    per_block = False  #: each block stored right after its last MFMA

    def __init__(self, p):
        self.p = p

    def store_block(self, acc, h, v):
        p = self.p
        row0, col0 = p.block_origin(h, v)
        i, g = p.lane % 16, p.lane // 16
        for ti in range(4):
            for tj in range(4):
                vals = fx.arith.trunc_f(C.vec_type(4, T.bf16), C.raw(acc[((h * 2 + v) * 4 + ti) * 4 + tj]))
                for j in range(4):
                    e = llvm.extractelement(C.raw(vals), C.i32(j))
                    bits = llvm.BitcastOp(T.i16, e).result
                    row = row0 + ti * 16 + 4 * g + j
                    col = col0 + tj * 16 + i
                    C.buffer_store(bits, p.c_rsrc, (row * p.c_n + col) * 2)


# ============================================================================ tile order


def select(cond, a, b):
    """``a if cond else b``, at trace time when ``cond`` is a Python bool, else as an
    ``arith.select`` on i32 values."""
    if isinstance(cond, bool):
        return a if cond else b
    return fx.Int32(fx.arith.select(cond, fx.Int32(a), fx.Int32(b)))


def tile_order(wg, m_tiles, n_tiles):
    """XCD-aware tile order: (tile_i, tile_j) of workgroup ``wg``.

    The dispatcher deals workgroups round-robin over the 8 XCDs (each with its own
    L2), so ``wg`` and ``wg + 1`` land on different XCDs.  When the tile count is a
    multiple of 8 we first renumber so that each XCD gets a contiguous run of tile
    numbers, then walk the tiles in groups of GROUP_M tile rows (column by column
    inside a group) so that the workgroups of one XCD share A rows and B columns in
    their L2.  ``m_tiles``/``n_tiles`` are ints (static_prologue) or i32 values; with
    all-int arguments this is plain Python (tests check it is a permutation).
    """
    static = isinstance(m_tiles, int) and isinstance(n_tiles, int)
    div, mod = (_udiv, _umod) if static else (lambda a, b: a // b, lambda a, b: a % b)
    num = m_tiles * n_tiles
    remap = mod(wg, N_XCD) * (num // N_XCD) + div(wg, N_XCD)
    w = select(num % N_XCD == 0, remap, wg)
    per_group = GROUP_M * n_tiles
    group = div(w, per_group)
    first = group * GROUP_M
    left = m_tiles - first
    size = GROUP_M if isinstance(m_tiles, int) and m_tiles % GROUP_M == 0 else select(left < GROUP_M, left, GROUP_M)
    within = mod(w, per_group)
    return first + mod(within, size), div(within, size)


def _pow2(b) -> bool:
    return isinstance(b, int) and b > 0 and b & (b - 1) == 0


def _udiv(a, b):
    """``a // b`` for ``a >= 0`` (a workgroup id): a shift when ``b`` is a static power of two, so no
    signed-division fix-up is emitted (static_prologue)."""
    if isinstance(a, int) or not _pow2(b):
        return a // b
    return a >> (b.bit_length() - 1)


def _umod(a, b):
    """``a % b`` for ``a >= 0``: a mask when ``b`` is a static power of two."""
    if isinstance(a, int) or not _pow2(b):
        return a % b
    return a & (b - 1)

