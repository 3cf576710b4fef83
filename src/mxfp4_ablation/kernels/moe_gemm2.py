"""The study's MXFP4 MoE gemm2 (down projection) for gfx950, one switch per optimisation.

For every sorted row ``r`` (token ``t``, slot ``s``, expert ``e`` of its block)::

    y[r, :] = h[r, :] . W2[e]^T        (fp4 x fp4, E8M0 block scales, f32 accumulate)

* **decode** (``block_m`` 16): ``out[t, :] += bf16(w[r] * y[r, :])`` with packed-bf16
  atomics (``global_atomic_pk_add_bf16``) into a zeroed bf16 ``[M, H]``; padding rows
  (token ``>= M``) add nothing;
* **prefill** (``block_m`` 128): ``flat_out[r, :] = bf16(y[r, :])`` for every row of a
  valid block, a plain store into bf16 ``[max_sorted, H]`` that the host's
  :func:`mxfp4_ablation.moe.host.scatter_reduce` weights and sums.

Buffers (exactly those :func:`mxfp4_ablation.moe.emulate.emulate_gemm2` reads; the kernel takes
each one 1-D, every size it needs being a compile-time constant):

* ``inter``: the requantised intermediate ``h``, fp4 row-major ``uint8 [max_sorted, I/2]``
  in sorted order;
* ``inter_scale``: its E8M0 scales, ``uint8 [round_up(max_sorted, 32) * I/32]``,
  preshuffled like the dense A scales (:func:`mxfp4_ablation.formats.shuffle_scales`);
* ``w2`` / ``w2_scale``: :func:`mxfp4_ablation.moe.host.preshuffle_w2`, viewed as
  ``uint8 [E*H, I/2]`` / ``uint8 [E*H, I/32]`` (the preshuffles are per expert, and an
  expert's block is contiguous, so expert ``e`` starts at row ``e*H``);
* ``sorted_ids`` (int32, ``(slot << 24) | token``), ``sorted_weights`` (f32),
  ``sorted_expert_ids`` (int32, one per block), ``num_valid_ids`` (int32 ``[2]`` =
  ``[rows in valid blocks, M]``), from :func:`mxfp4_ablation.moe.host.moe_sort`;
* ``out``: bf16 ``[M, H]`` (decode) or ``[max_sorted, H]`` (prefill);
* ``tokens``: M (i32).

Structure (the seed's, aiter's FlyDSL ``mxfp4_gemm2`` at the Kimi shapes; our own code): one
workgroup = 4 waves computes one *tile*: ``block_m`` sorted rows x 256 hidden columns, wave ``w``
owning columns ``64w .. 64w+63`` as four 16-column MFMA tiles for all ``block_m/16`` row chunks.
Tile ``t`` is row block ``t // (H/256)``, column block ``t % (H/256)``; tiles past
``num_valid_ids[0] / block_m`` row blocks do nothing.  K (``inter`` <= 512) is one or two 256-deep
K tiles, all preloaded (no K loop):

* **A** (``inter``) goes global -> LDS with ``buffer_load_dwordx4 ... lds`` (m0 = the slot's row
  base): one instruction moves 8 rows x 128 bytes, lane ``l`` fetching chunk ``(l%8) ^ ((row>>1)&7)``
  of row ``l/8`` (the XOR swizzle), so each K tile is a ``block_m`` x 128-byte LDS slot (decode: 2
  waves x 1 DMA per tile; prefill: 4 waves x 4); LDS 16 KiB at decode (the slots share it with the
  epilogue's f32 tile), 32 KiB at prefill (two 16 KiB slots).
* **B** (``w2``, non-temporal at decode) and both scale words go straight to VGPRs with
  ``buffer_load_dword{,x4}`` (row bases in soffset, the lane and K offsets in voffset), all K tiles up
  front, in the seed's order: A scales, B scales, W2.
* per K tile: a **fence** (every wave's DMA of the tile has landed: decode, hand-counted inline-asm
  ``s_waitcnt vmcnt(N)`` + bare ``s_barrier`` as in the seed; prefill see ``backend_waitcnt``),
  ``ds_read_b128`` of the A fragments (row ``16i + l%16``, bytes ``64h + 16(l/16)``), then the
  ``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4, ``cbsz:4 blgp:4``; A is src0, W2 src1) of every
  (row chunk, column tile, 128-K half): 8 MFMAs per K tile at decode, 64 at prefill, the scale bytes
  picked by ``op_sel`` (byte ``2*half + 16-row half of the 32-row group``).  Lane ``l`` ends with
  ``y[rows 16i + 4(l/16) + v, column 16j + l%16]``.
* **decode epilogue**: the f32 tile goes through LDS (``ds_write2_b32``; two ``s_barrier``) so that
  thread ``t`` holds columns ``2(t%32) + 64s`` of row ``t/32 (+8)``: ``ds_read_b64``, times the row's
  weight (prefetched), ``v_cvt_pk_bf16_f32``, ``global_atomic_pk_add_bf16`` -- 8 per lane.
* **prefill**: a persistent grid -- 256 workgroups once there are more than 1024 tiles, else one per
  tile -- walks the tiles in an XCD-interleaved order (the first tile peeled, then a grid-stride loop
  whose body is one whole tile: a barrier, the next DMA, loads, 128 MFMAs, stores); the epilogue
  stores every element as one ``global_store_short`` (128 per tile and lane).

Fidelity (``python -m mxfp4_ablation.fidelity moe2``: moe2-v0 vs aiter 46ecc4489, moe2-v4 vs aiter
b242ba66a, Kimi-K2.5 TP=4, band 15 %): at decode every metric is in band on both sides (18 of 18);
at prefill 23 of 25 (v0) and 21 of 25 (v4).  Outside, measured:

* ``agpr`` 24 vs 20 (v0), 20 vs 16 (v4): both kernels fill the 256 arch VGPRs and the allocator puts
  some of the second K tile's 16-byte A fragments (``ds_read_b128 a[..]``) in AGPRs -- ours 6 of 16
  (v0) and 5 (v4), the seed's 5 and 4; the unified totals differ by 1.5 % (280 vs 276, 276 vs 272).
* ``insts_before_first_buffer_load`` 103 vs 89 (v0, +16 %), 61 vs 47 (v4): we build all four buffer
  resources in the prologue (the seed builds three per tile), so their constants and the lane offsets
  of the later scale/W2 loads are scheduled ahead of the first DMA. Building them per tile gives 97
  (v0, in band) and 55 (v4) but moves the v4 tile loop's waits out of band (28 vs 24), so we do not.
* ``loop_max_lds_run`` 40 vs 24 (v4; v0 24 = 24): in the tile loop LLVM hoists the second K tile's 16
  ``ds_read_b128`` up to the first tile's, ahead of its MFMAs, once the strength-reduced epilogue frees
  registers (moe2-v3: 24).  A ``sched_barrier`` before the second tile's fence keeps them apart (24) but
  moves the loop's waits out of band (30 vs 24), so we leave the compiler's order.
* ``sign_shifts`` 0 vs 2 (v4): our strength-reduced epilogue zero-extends the lane's row and column
  (every index is >= 0), the seed sign-extends them (``fx.Int64``); sign-extending gives 4 (two
  v_ashrrev more than the seed's) and the loop's waits 28 vs 24.

Variants are data: :data:`SWITCHES` holds the :class:`~mxfp4_ablation.family.Switch` records
(the seed's claim, the mechanism and the ISA metric each should move), from which the registry
derives the ladder (``moe2-v0`` .. ``moe2-v4``) and the leave-one-out set (``moe2-v4-no-<switch>``).  The seed is aiter PR #3828 ("flydsl
mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the HIP backend"); its claims are
quoted, never its code.  Two of its gemm2 changes touch only the non-atomic (prefill) path --
``backend_waitcnt`` and ``epilogue_strength_reduction`` -- so at decode those rungs compile to the
same kernel as their predecessors, as the seed's do.
"""

from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Switch

from .moe_common import (  # noqa: F401 - the contract's shape names, re-exported
    BufferABI, check_inputs, default_block_m, expert_weights, INT64_ABI, MoEGeometry, N_WAVES,
    OPTIONAL_SHAPE_PARAMS, PR_3828, routed_problem, SHAPE_PARAMS, switch_flags, WORKGROUP_ATTRS,
)

NAME = "moe2"
#: The seed's backend_waitcnt and epilogue_strength_reduction touch only the non-atomic (prefill) path: at
#: decode their rung is the same kernel as its predecessor, so their expectations say ``regimes=PREFILL``.
PREFILL = ("prefill",)
LABEL = "MoE gemm2"
METRICS = "moe"

SWITCHES = _family.switch_table(
    INT64_ABI,
    Switch(
        "unsigned_div", "Unsigned division for non-negative index math.", PR_3828,
        claim="divui/remui instead of the signed forms removes the sign-correction SALU of every division in the "
        "index prologue.",
        mechanism="the tile-index math (valid rows / block_m, tile -> row and column block, the XCD split "
        "bound/8, bound%8, pid%8, pid/8, row0/32) uses FlyDSL's signed floor division (a high multiply or shift "
        "plus the s_ashr_i32 31 sign corrections) and remsi; every index is >= 0, so arith.divui/remui give the "
        "same numbers without them (and the column block becomes tile - row_block * H/256).",
        metric="sign_shifts (s_ashr_i32 + v_ashrrev_i32) fall (Kimi: 8 -> 3 at decode, 20 -> 8 at prefill -- "
        "12 -> 0 with the strength-reduced epilogue; aiter's 7 -> 3 and 20 -> 2), s_mul_hi_i32 "
        "becomes s_mul_hi_u32 (H/256 = 28 column blocks: 1 -> 0 decode, 2 -> 0 prefill), instructions fall "
        "(279 -> 248 decode, 1987 -> 1922 prefill).",
        expects=(Expect("sign_shifts", "down", seed_before=7, seed_after=3, note="decode; ours 8 -> 3"),
                 Expect("s_mul_hi_i32", "down", note="Kimi: 1 -> 0 decode, 2 -> 0 prefill"),
                 Expect("instructions", "down", note="Kimi: 279 -> 248 decode, 1987 -> 1922 prefill")),
    ),
    Switch(
        "backend_waitcnt", "Let LLVM own the non-atomic K-loop fence.", PR_3828,
        claim="the hand-written inline-asm s_waitcnt vmcnt(16) lgkmcnt(0) + s_barrier before each K tile's "
        "ds_read in the non-atomic (prefill) path came on top of the waits LLVM's SIInsertWaitcnts pass inserts "
        "anyway (it cannot see into inline asm): replace it with a plain barrier and let the backend insert the "
        "buffer_load ... lds -> ds_read wait.",
        mechanism="prefill only (the atomic decode path keeps its hand-counted vmcnt + bare s_barrier in both PR "
        "sides): without the switch each K tile's fence is inline asm 's_waitcnt vmcnt(16) lgkmcnt(0)' (the "
        "seed's count, capped by what our issue order allows) + a bare 's_barrier'; with it, rocdl.barrier(), "
        "before which LLVM places the vmcnt wait for the tile's DMA (or folds it into an earlier one).",
        metric="prefill: the inline-asm waits go (asm_s_waitcnt 4 -> 0 at Kimi, 2 -> 0 at the small shape), "
        "s_waitcnt falls (Kimi 66 -> 54, small 37 -> 35) and so does the tile loop's loop_s_waitcnt at Kimi "
        "(31 -> 25; aiter 29 -> 24; the small shape's one K tile: 17 -> 17); decode unchanged (the same kernel).",
        expects=(Expect("asm_s_waitcnt", "zero", note="Kimi 4 -> 0; decode keeps the seed's atomic fence",
                        regimes=PREFILL),
                 Expect("s_waitcnt", "down", seed_before=64, seed_after=52,
                        note="whole PR for aiter; ours 66 -> 54 for this switch at Kimi", regimes=PREFILL)),
    ),
    Switch(
        "epilogue_strength_reduction", "Hoist the row x N_OUT multiply out of the store loop.", PR_3828,
        claim="the non-atomic bf16 epilogue computed a 64-bit (row * N_OUT + col) * 2 byte offset for every stored "
        "element; computing the lane's base address once and adding compile-time offsets per element removes the "
        "64-bit multiply-adds.",
        mechanism="prefill only: element (row chunk i, value v, column tile j) of a lane is at "
        "lane_base + ((16 i + v) * N_OUT + 16 j) * 2 with lane_base = (row0 + 4 (l/16)) * N_OUT + column, the "
        "only run-time 64-bit product; without the switch every row's offset is sext(row) * N_OUT + sext(col) "
        "(a v_mad_i64_i32 each).",
        metric="prefill: the 64-bit multiply-adds (v_mad_i64_i32 + v_mad_u64_u32) fall 64 -> 2 (Kimi; aiter "
        "64 -> 2), instructions 1910 -> 1428, loop_instructions 911 -> 642 (aiter 924 -> 630 over the whole "
        "PR); decode unchanged (its atomic epilogue's offsets are 32-bit in both PR sides).",
        expects=(Expect("mad_64", "down", seed_before=64, seed_after=2,
                        note="Kimi 64 -> 2; 0 -> 0 where N_OUT is a power of two (a shift)", regimes=PREFILL),
                 Expect("instructions", "down", note="Kimi 1910 -> 1428", regimes=PREFILL),
                 Expect("loop_instructions", "down", note="Kimi 911 -> 642", regimes=PREFILL)),
    ),
)

#: ``out`` is bf16. Prefill stores ``bf16(y)`` per row: one rounding of an f32 dot product of ``inter``
#: exact products, summed in an order that may differ from ``moe.emulate.emulate_gemm2``'s: <= 1 bf16 ulp
#: (plus a tiny absolute term where the sum cancels). Decode adds ``bf16(w * y)`` of each of a token's
#: ``topk`` rows with packed-bf16 atomics, in whatever order the workgroups run: each add rounds to
#: bf16, so a different order moves the result by up to one bf16 ulp per add after the first (the
#: bound below allows topk = 9, Kimi's).
OUTPUTS = (
    Output("out", "close", max_ulp=9, max_abs=2.0 ** -10, min_cosine=0.99999,
           why="prefill: one bf16 rounding of a reordered f32 sum (<= 1 ulp); decode: topk bf16 atomic adds in "
           "any order (<= 1 ulp per add after the first; 9 covers topk <= 9 ... 10), plus 2^-10 absolute where "
           "a sum cancels"),
)

ARG_NAMES = ("inter", "inter_scale", "w2", "w2_scale", "sorted_ids", "sorted_weights", "sorted_expert_ids",
             "num_valid_ids", "out", "tokens")
KERNEL_NAME = "mxfp4_moe_gemm2"

BLOCK_N = 256  # hidden columns per workgroup
K_TILE = 256  # fp4 per K tile (one LDS slot; two MFMAs deep)
MAX_INTER = 512  # every K tile is preloaded into its own LDS slot (the seed's K <= 512 fast path)
NUM_CU = 256  # persistent grid (prefill): this many workgroups once there are more than 4x as many tiles
N_XCD = 8  # MI355X dies: the prefill tile order interleaves them
HAND_VMCNT = 16  # the seed's hand-tuned vmcnt of the non-atomic K-loop fence (before backend_waitcnt)


def _flags(switches):
    """The switch keywords as ``sw.<switch>`` booleans (validated)."""
    return switch_flags(_family.of_module(__name__), switches)


def _abi(switches) -> BufferABI:
    return BufferABI(ARG_NAMES, _flags(switches).int64_abi)


def check_shape(tokens, experts, hidden, inter, topk, block_m=None) -> dict:
    """One clear ValueError for a shape this kernel cannot run; returns it with ``block_m`` defaulted."""
    return Geometry(tokens, experts, hidden, inter, topk, block_m).shape


class Geometry(MoEGeometry):
    """Every compile-time number of one gemm2 shape (sizes in bytes unless named otherwise): the shared
    MoE numbers (:class:`~mxfp4_ablation.kernels.moe_common.MoEGeometry`), this kernel's checks, its tiles
    and its grid."""

    def __init__(self, tokens, experts, hidden, inter, topk, block_m=None):
        super().__init__(tokens, experts, hidden, inter, topk, block_m)
        if hidden % BLOCK_N:
            raise UsageError(f"hidden must be a multiple of {BLOCK_N} (one 256-column block per workgroup), "
                             f"got {hidden}.")
        if inter > MAX_INTER:
            raise UsageError(f"inter must be at most {MAX_INTER} (every 256-deep K tile is preloaded into its own "
                             f"LDS slot), got {inter}.")
        block_m = self.BM
        self.atomic = block_m == 16
        self.n_blocks = hidden // BLOCK_N
        self.tiles = self.m_blocks * self.n_blocks
        # Decode: one workgroup per tile. Prefill: persistent once there are more than 4 x NUM_CU tiles.
        self.grid = NUM_CU if not self.atomic and self.tiles > 4 * NUM_CU else self.tiles
        self.KB = inter // 2  # bytes per intermediate row
        self.KT = inter // K_TILE  # K tiles (LDS slots)
        self.K1 = inter // 256  # scale words per lane per 32 rows
        self.MC = block_m // 16  # 16-row MFMA chunks per wave
        self.load_waves = min(N_WAVES, block_m // 8)  # waves that DMA the A tile (8 rows per instruction)
        self.rows_per_wave = block_m // self.load_waves
        self.subs = self.rows_per_wave // 8  # DMA instructions per wave per K tile
        self.slot = block_m * (K_TILE // 2)  # bytes of one K tile of A in LDS
        # Decode reuses the LDS for the f32 output tile (block_m x 256) of its atomic epilogue.
        self.lds_bytes = max(self.KT * self.slot, block_m * BLOCK_N * 4 if self.atomic else 0)
        self.out_rows = tokens if self.atomic else self.max_sorted
        self.nbytes = {
            "inter": self.max_sorted * self.KB,
            "inter_scale": self.scale_rows * (inter // 32),
            "w2": experts * hidden * self.KB,
            "w2_scale": experts * hidden * (inter // 32),
            "sorted_ids": self.max_sorted * 4,
            "sorted_weights": self.max_sorted * 4,
            "sorted_expert_ids": self.m_blocks * 4,
            "num_valid_ids": 8,
        }


def launch_config(tokens, experts, hidden, inter, topk, block_m=None):
    """``(grid, block)`` of one launch: one workgroup of 256 threads per (row block, 256 columns)."""
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    return (g.grid, 1, 1), (N_WAVES * 64, 1, 1)


# ============================================================================ kernel emission
#
# The emission helpers live outside the @kernel body so FlyDSL's AST rewriter leaves their
# Python loops and ifs alone: they unroll at trace time.  Control flow that must exist at run
# time (the early exit, the K loop, the padding test) is built with scf ops directly.

# FlyDSL takes seconds to import; it loads on the first build() / kernel_args() so that registering
# the family (reading its records) stays cheap. The names are filled in by _load_flydsl().
flyc = fx = ir = arith = llvm = scf = rocdl = T = C = None


def _load_flydsl():
    from .lazy import load_flydsl

    load_flydsl(globals())


def _c(v, ty=None):
    """An i32 (or ``ty``) constant."""
    ty = ty or T.i32
    return arith.ConstantOp(ty, ir.IntegerAttr.get(ty, v)).result


def _v(x):
    """Anything integer-like -> an i32 ir.Value (Python ints become constants)."""
    if isinstance(x, int):
        return _c(x)
    return C.i32(x)


def _add(a, b):
    return arith.AddIOp(_v(a), _v(b)).result


def _mul(a, b):
    return arith.MulIOp(_v(a), _v(b)).result


def _and(a, b):
    return arith.AndIOp(_v(a), _v(b)).result


def _shr(a, b):
    return arith.ShRUIOp(_v(a), _v(b)).result


def _asm(result_type, operands, text, constraints):
    return llvm.inline_asm(result_type, [C.raw(o) for o in operands], text, constraints, has_side_effects=True)


class _Emitter:
    """Emits one gemm2 kernel body for a fixed shape and switch set (see the module docstring)."""

    def __init__(self, g: Geometry, sw, lds_base):
        self.g, self.sw = g, sw
        self.unsigned = sw.unsigned_div
        self.lds = lds_base  # i32 byte address of the kernel's LDS block

    # ------------------------------------------------------------------ index math
    def div(self, a, b):
        """Tile-index ``a / b`` (a >= 0): divui with unsigned_div, else the signed floor division
        (floordivsi: what FlyDSL's ``//`` on an Int32 gives, as in the seed's kernel before the PR)."""
        return (arith.DivUIOp if self.unsigned else arith.FloorDivSIOp)(_v(a), _v(b)).result

    def rem(self, a, b):
        """Tile-index ``a % b`` (a >= 0): remui with unsigned_div, else the signed remsi."""
        return (arith.RemUIOp if self.unsigned else arith.RemSIOp)(_v(a), _v(b)).result

    # ------------------------------------------------------------------ arguments
    def lds_at(self, off):
        """``!llvm.ptr<3>`` to LDS byte ``off`` (i32) of the kernel's block (a GEP from one base pointer,
        so that constant parts fold into the ds_* offset fields)."""
        return C.gep(self._lds_ptr, off)

    def ptr(self, name):
        """A global pointer to a buffer argument's base."""
        return C.global_ptr(C.address(self.args[name]))

    def rsrc(self, name):
        """The buffer resource of one argument, sized by the shape (compile-time bytes)."""
        return C.buffer_rsrc_at(C.address(self.args[name]), self.g.nbytes[name])

    def load_global(self, name, byte_off, ty=None):
        """One element of a global buffer through its pointer (``s_load`` when the offset is uniform)."""
        return C.global_load(C.address(self.args[name]), byte_off, ty)

    def setup(self, args):
        self.args = dict(zip(ARG_NAMES, args))
        self.tokens = C.raw(self.args["tokens"])
        self.tid = C.raw(fx.thread_idx.x)
        self.pid = C.raw(fx.block_idx.x)
        u = lambda op, a, b: op(_v(a), _v(b)).result  # noqa: E731 - lane math: thread ids are >= 0
        self.lane = u(arith.RemUIOp, self.tid, 64)
        self.wave = C.uniform(u(arith.DivUIOp, self.tid, 64))
        self.l16 = u(arith.RemUIOp, self.lane, 16)
        self.q = u(arith.DivUIOp, self.lane, 16)
        self.rs = {n: self.rsrc(n) for n in ("inter", "inter_scale", "w2", "w2_scale")}
        self._lds_ptr = C.lds_ptr(self.lds)

    # ------------------------------------------------------------------ control flow
    def body(self):
        g = self.g
        if g.atomic:
            # One-shot grid: the A tile's LDS DMA goes out before the valid-rows test (it depends on
            # the block id only), so its latency hides the num_valid_ids load.
            row0 = _mul(self.div(self.pid, g.n_blocks), g.BM)
            if g.load_waves < N_WAVES:  # block_m 16: waves 0 and 1 hold the 16 rows
                with C.if_then(arith.CmpIOp(arith.CmpIPredicate.ult, self.wave, _c(g.load_waves)).result):
                    self.issue_a(row0)
            else:
                self.issue_a(row0)
            rocdl.sched_barrier(0)
            bound = self.bound()
            with C.if_then(arith.CmpIOp(arith.CmpIPredicate.slt, self.pid, bound).result):
                self.run_tile(self.pid)
            return
        # Persistent grid (prefill): the first tile peeled, then grid-stride over the rest; tiles in
        # the XCD-interleaved order.
        bound = self.bound()
        self.xq, self.xr = self.div(bound, N_XCD), self.rem(bound, N_XCD)
        with C.if_then(arith.CmpIOp(arith.CmpIPredicate.slt, self.pid, bound).result):
            tile = self.xcd(self.pid, bound)
            self.issue_a(_mul(self.div(tile, g.n_blocks), g.BM))
            rocdl.sched_barrier(0)
            self.run_tile(tile)
        # The grid size from the dispatch's implicit kernel arguments (hidden_block_count_x at offset 0):
        # what gpu.grid_dim reads, without the device library gpu.grid_dim would pull in.
        implicit = llvm.call_intrinsic(ir.Type.parse("!llvm.ptr<4>"), "llvm.amdgcn.implicitarg.ptr", [], [], [])
        grid = llvm.LoadOp(T.i32, implicit, alignment=4, invariant=True).result
        idx = ir.IndexType.get()
        cast = lambda v: arith.IndexCastUIOp(idx, v).result  # noqa: E731 - all >= 0
        loop = scf.ForOp(cast(_add(self.pid, grid)), cast(bound), cast(grid), [])
        with ir.InsertionPoint(loop.body):
            tile_raw = arith.IndexCastUIOp(T.i32, loop.induction_variable).result
            # The previous tile's LDS reads are done before this tile's DMA overwrites the slots.
            rocdl.barrier()
            tile = self.xcd(tile_raw, bound)
            self.issue_a(_mul(self.div(tile, g.n_blocks), g.BM))
            # The DMAs stay first (the K-loop fences count the loads issued after them).
            rocdl.sched_barrier(0)
            self.run_tile(tile)
            scf.YieldOp([])

    def bound(self):
        """Tiles with rows to compute: (num_valid_ids[0] / block_m) row blocks x the column blocks."""
        valid = self.load_global("num_valid_ids", _c(0))
        return _mul(self.div(valid, self.g.BM), self.g.n_blocks)

    def xcd(self, pid, bound):
        """Workgroup ``pid`` -> tile: consecutive ids go to different XCDs (8 on MI355X), each XCD gets a
        contiguous run of tiles (a bijection on [0, bound))."""
        xq, xr = self.xq, self.xr  # bound / 8, bound % 8: once per kernel
        xc = self.rem(pid, N_XCD)
        return _add(_add(_mul(xc, xq), arith.MinSIOp(xc, xr).result), self.div(pid, N_XCD))

    # ------------------------------------------------------------------ A: global -> LDS
    def issue_a(self, row0):
        """LDS DMA of the block's A rows, every K tile: wave w loads rows ``rows_per_wave*w ..``, 8 rows
        (1 KiB) per ``buffer_load_dwordx4 ... lds``; lane l -> LDS ``m0 + 16 l`` (row l/8, 16-byte chunk
        l%8), fetching the row's chunk ``(l%8) ^ ((row>>1)&7)`` (the XOR swizzle ds_read undoes)."""
        g = self.g
        l8, chunk = _shr(self.lane, 3), _and(self.lane, 7)
        for kt in range(g.KT):
            for sub in range(g.subs):
                lds_row = _add(_mul(self.wave, g.rows_per_wave), 8 * sub)
                r = _add(lds_row, l8)
                voff = _add(arith.XOrIOp(_mul(chunk, 16), _swz(r)).result, _mul(_add(row0, r), g.KB))
                m0 = _add(_add(self.lds, kt * g.slot), _mul(lds_row, 128))
                C.lds_dma_dwordx4(self.rs["inter"], m0, voff, _c(kt * 128))

    def read_a(self, kt):
        """``ds_read_b128`` of K tile ``kt``: a[i][h] = row 16i + l%16, bytes 64h + 16(l/16) (swizzled)."""
        g = self.g
        mask = _swz(self.l16)
        out = []
        for i in range(g.MC):
            row = []
            for h in range(2):
                col = arith.XOrIOp(_add(_mul(self.q, 16), 64 * h), mask).result
                off = _add(_mul(self.l16, 128), col)
                row.append(llvm.LoadOp(C.vec_type(4), self.lds_at(_add(off, kt * g.slot + i * 16 * 128)),
                                       alignment=16).result)
            out.append(row)
        return out

    # ------------------------------------------------------------------ B and scales: global -> VGPR
    def load_operands(self, m_blk, n_blk, expert, row0):
        """Every scale word and W2 fragment of the tile, all K tiles, in the seed's order: A scales, B
        scales, B.  Scalar parts (row bases) go to soffset, the lane part and K offsets to voffset."""
        g = self.g
        col0 = _add(_add(_mul(expert, g.H), _mul(n_blk, BLOCK_N)), _mul(self.wave, 64))
        vs = _mul(self.lane, 4)
        vb = _mul(self.lane, 16)
        if g.MC == 1:
            a_s = [C.uniform(_mul(self.div(row0, 32), g.K1 * 256))]
        else:
            a_s = [C.uniform(_mul(_add(self.div(row0, 32), p), g.K1 * 256)) for p in range(g.MC // 2)]
        b_ss = [C.uniform(_mul(_add(self.div(col0, 32), mw), g.K1 * 256)) for mw in range(2)]
        b_s = [C.uniform(_mul(_add(col0, 16 * j), g.KB)) for j in range(4)]
        sa = [[_load(self.rs["inter_scale"], _add(vs, kt * 256), 1, s) for s in a_s] for kt in range(g.KT)]
        sb = [[_load(self.rs["w2_scale"], _add(vs, kt * 256), 1, s) for s in b_ss] for kt in range(g.KT)]
        rocdl.sched_barrier(0)  # scales first, then W2 (the seed's issue order)
        aux = 2 if g.atomic else 0  # decode streams W2 once: non-temporal loads (the seed's kUseNT)
        b = [[[_load(self.rs["w2"], _add(vb, kt * 2048 + h * 1024), 4, b_s[j], aux) for h in range(2)]
              for j in range(4)] for kt in range(g.KT)]
        if g.MC == 1:
            # A 16-row block shares its 32-row scale group: shift its byte pair down (np = m_blk % 2).
            sh = _mul(_and(m_blk, 1), 8)
            sa = [[_shr(w, sh) for w in ws] for ws in sa]
        return sa, sb, b

    def vm_after_dma(self, kt):
        """Vector-memory instructions a loading wave issues after K tile ``kt``'s last DMA."""
        g = self.g
        return (g.KT - 1 - kt) * g.subs + g.KT * (len(self._sa_words()) + 2 + 8)

    def _sa_words(self):
        return [0] if self.g.MC == 1 else list(range(self.g.MC // 2))

    def fence(self, kt):
        """Before K tile ``kt``'s ds_read: every wave's DMA of the tile has landed."""
        g = self.g
        if g.atomic:
            # The seed's atomic path: a hand-counted wait for this tile's DMA + a bare s_barrier (both PR sides).
            _asm(None, [], f"s_waitcnt vmcnt({self.vm_after_dma(kt)})", "")
            _asm(None, [], "s_barrier", "")
        elif self.sw.backend_waitcnt:
            # A plain barrier: LLVM inserts the DMA -> ds_read vmcnt wait itself.
            rocdl.barrier()
        else:
            # The seed's hand-tuned fence: vmcnt(16) lgkmcnt(0) (capped to what our issue order allows)
            # + a bare s_barrier, both inline asm (LLVM cannot see into them).
            _asm(None, [], f"s_waitcnt vmcnt({min(HAND_VMCNT, self.vm_after_dma(kt))}) lgkmcnt(0)", "")
            _asm(None, [], "s_barrier", "")

    # ------------------------------------------------------------------ one tile
    def run_tile(self, tile):
        g = self.g
        m_blk = self.div(tile, g.n_blocks)
        n_blk = _sub(tile, _mul(m_blk, g.n_blocks)) if self.unsigned else self.rem(tile, g.n_blocks)
        expert = C.uniform(self.load_global("sorted_expert_ids", _mul(m_blk, 4)))
        row0 = _mul(m_blk, g.BM)
        sa, sb, b = self.load_operands(m_blk, n_blk, expert, row0)
        acc = [[None] * 4 for _ in range(g.MC)]
        for kt in range(g.KT):
            self.fence(kt)
            a = self.read_a(kt)
            for j in range(4):
                for p in range(max(1, g.MC // 2)):
                    for h in range(2):
                        for i in (2 * p, 2 * p + 1)[: min(2, g.MC)]:
                            prev = acc[i][j] if (kt or h) else C.zeros_f32x4()
                            # A (h rows) is src0, W2 src1: lane l gets y[rows 16i + 4(l/16) + v, col 16j + l%16].
                            # Scale bytes: 2*(128-K half) + 16-row half of the 32-row group.
                            acc[i][j] = C.mfma_scale_fp4(a[i][h], b[kt][j][h], prev, sa[kt][p], sb[kt][j // 2],
                                                         opsel_a=2 * h + (i % 2 if g.MC > 1 else 0),
                                                         opsel_b=2 * h + j % 2)
        if g.atomic:
            self.epilogue_atomic(acc, row0, n_blk)
        else:
            self.epilogue_rows(acc, row0, n_blk)

    # ------------------------------------------------------------------ epilogues
    def epilogue_rows(self, acc, row0, n_blk):
        """Prefill: flat_out[row, col] = bf16(y), one 2-byte store per element, every row of the block.

        Without epilogue_strength_reduction every element's byte offset is ``(i64(row) * H + col) * 2``
        (a 64-bit multiply per row); with it the lane's base is computed once and each element adds the
        compile-time ``((16 i + v) * H + 16 j) * 2``."""
        g, i64 = self.g, T.i64
        base = self.ptr("out")
        col = _add(_add(_mul(n_blk, BLOCK_N), _mul(self.wave, 64)), self.l16)
        row_l = _add(row0, _mul(self.q, 4))
        # Without the switch, the seed's per-element fx.Int64(i32) (a sign extension); the hoisted lane base
        # is one zero-extended product (every index is >= 0).
        esr = self.sw.epilogue_strength_reduction
        ext = lambda v: (arith.ExtUIOp if esr else arith.ExtSIOp)(i64, _v(v)).result  # noqa: E731
        lane_off = None
        if esr:
            lane_off = arith.MulIOp(arith.AddIOp(arith.MulIOp(ext(row_l), _c(g.H, i64)).result, ext(col)).result,
                                    _c(2, i64)).result
        for i in range(g.MC):
            for j in range(4):
                for v in range(4):
                    if lane_off is not None:
                        off = arith.AddIOp(lane_off, _c(((16 * i + v) * g.H + 16 * j) * 2, i64)).result
                    else:
                        row = _add(row_l, 16 * i + v)
                        elem = arith.AddIOp(arith.MulIOp(ext(row), _c(g.H, i64)).result,
                                            ext(_add(col, 16 * j))).result
                        off = arith.MulIOp(elem, _c(2, i64)).result
                    y = llvm.extractelement(C.raw(acc[i][j]), _c(v))
                    llvm.StoreOp(arith.TruncFOp(T.bf16, y).result, C.gep(base, off), alignment=2)

    def epilogue_atomic(self, acc, row0, n_blk):
        """Decode: the tile goes through LDS (f32, row-major 16 x 256) so that thread t holds two
        adjacent columns of row ``t/32``; then ``out[token] += bf16(w * y)`` as packed-bf16 atomics,
        padding rows (token >= M) skipped."""
        g = self.g
        u = lambda op, a, b: op(_v(a), _v(b)).result  # noqa: E731
        m_lane, n_lane = u(arith.DivUIOp, self.tid, 32), u(arith.RemUIOp, self.tid, 32)
        col2 = _mul(n_lane, 2)
        reps = g.BM // 8
        sid, wt = [], []
        for mr in range(reps):  # prefetched before the LDS round trip
            pos4 = _mul(_add(_add(row0, 8 * mr), m_lane), 4)
            sid.append(self.load_global("sorted_ids", pos4))
            wt.append(self.load_global("sorted_weights", pos4, T.f32))
        rocdl.barrier()  # every wave is done reading the A tiles (the LDS is reused)
        for i in range(g.MC):
            for j in range(4):
                for v in range(4):
                    idx = _add(_mul(_add(_mul(self.q, 4), 16 * i + v), BLOCK_N),
                               _add(_mul(self.wave, 64), _add(self.l16, 16 * j)))
                    y = llvm.extractelement(C.raw(acc[i][j]), _c(v))
                    llvm.StoreOp(y, self.lds_at(_mul(idx, 4)), alignment=4)
        rocdl.barrier()
        out = self.ptr("out")
        v2f = C.vec_type(2, T.f32)
        for mr in range(reps):
            token = _and(sid[mr], 0xFFFFFF)
            with C.if_then(arith.CmpIOp(arith.CmpIPredicate.slt, token, self.tokens).result):
                row_off = _add(_add(_mul(token, g.H), _mul(n_blk, BLOCK_N)), col2)
                wv = llvm.insertelement(llvm.insertelement(llvm.mlir_undef(v2f), wt[mr], _c(0)), wt[mr], _c(1))
                for s in range(4):
                    idx = _add(_mul(_add(m_lane, 8 * mr), BLOCK_N), _add(col2, 64 * s))
                    y = llvm.LoadOp(v2f, self.lds_at(_mul(idx, 4)), alignment=8).result
                    pk = arith.TruncFOp(C.vec_type(2, T.bf16), arith.MulFOp(y, wv).result).result
                    llvm.AtomicRMWOp(llvm.AtomicBinOp.fadd, C.gep(out, _mul(_add(row_off, 64 * s), 2)), pk,
                                     llvm.AtomicOrdering.monotonic, syncscope="agent", alignment=4)


def _swz(row):
    """The A tile's XOR swizzle of 16-byte chunks for LDS row ``row``: ``(row & 14) << 3``."""
    return arith.ShLIOp(_and(row, 14), _c(3)).result


def _load(rsrc, voffset, n_dwords, soffset, aux=0):
    ty = T.i32 if n_dwords == 1 else C.vec_type(n_dwords)
    return rocdl.raw_ptr_buffer_load(ty, C.raw(rsrc), _v(voffset), _v(soffset), aux=aux)


def _sub(a, b):
    return arith.SubIOp(_v(a), _v(b)).result


def build(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None, **switches):
    """The ``@flyc.jit`` launcher of gemm2 for one shape and switch set (names of
    :data:`SWITCHES` mapped to booleans, missing = off; ``block_m`` None = :func:`default_block_m`)."""
    sw = _flags(switches)
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    _load_flydsl()
    Arg = C.buffer_arg(sw.int64_abi)  # one global buffer argument

    @flyc.kernel
    def mxfp4_moe_gemm2(
        inter: Arg, inter_scale: Arg, w2: Arg, w2_scale: Arg, sorted_ids: Arg, sorted_weights: Arg,
        sorted_expert_ids: Arg, num_valid_ids: Arg, out: Arg, tokens: fx.Int32,
    ):
        lds = C.allocate_lds(g.lds_bytes)
        em = _Emitter(g, sw, C.raw(fx.Int32(C.uniform(C.lds_addr(lds.buf)))))
        em.setup((inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids, num_valid_ids,
                  out, tokens))
        em.body()

    @flyc.jit
    def launch(
        inter: Arg, inter_scale: Arg, w2: Arg, w2_scale: Arg, sorted_ids: Arg, sorted_weights: Arg,
        sorted_expert_ids: Arg, num_valid_ids: Arg, out: Arg, tokens: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        mxfp4_moe_gemm2(inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids,
                        num_valid_ids, out, tokens, value_attrs=WORKGROUP_ATTRS).launch(
            grid=(g.grid, 1, 1), block=(N_WAVES * 64, 1, 1), stream=stream)

    return launch



# ============================================================================ host side


def _shape_buffers(g: Geometry) -> dict:
    """Uninitialised tensors of the kernel's buffer shapes: an offline compile needs only shapes, and pages
    never touched cost no memory (zero-filled, the Kimi shape's buffers are 0.8 GB at 4096 tokens)."""
    import torch

    u8 = torch.uint8
    return {
        "inter": torch.empty(g.max_sorted, g.KB, dtype=u8),
        "inter_scale": torch.empty(g.scale_rows * (g.I // 32), dtype=u8),
        "w2": torch.empty(g.E * g.H, g.KB, dtype=u8),
        "w2_scale": torch.empty(g.E * g.H, g.I // 32, dtype=u8),
        "sorted_ids": torch.empty(g.max_sorted, dtype=torch.int32),
        "sorted_weights": torch.empty(g.max_sorted, dtype=torch.float32),
        "sorted_expert_ids": torch.empty(g.m_blocks, dtype=torch.int32),
        "num_valid_ids": torch.empty(2, dtype=torch.int32),
        "out": torch.empty(g.out_rows, g.H, dtype=torch.bfloat16),
        "tokens": g.M,
    }


def make_inputs(tokens: int, experts: int, hidden: int, inter: int, topk: int, seed: int = 0,
                block_m: int = None, lazy: bool = False) -> dict:
    """The kernel's buffers for one random MoE layer (keys = :data:`ARG_NAMES`).

    Builds the problem with :mod:`mxfp4_ablation.moe.host` (routing, sort, preshuffled W2)
    and a random intermediate ``h`` quantised with the MoE rule (gemm2 does not care
    where ``h`` came from, and emulating gemm1 would only cost time).  Also returns
    ``sorting`` (the :class:`~mxfp4_ablation.moe.host.MoESorting`), ``regime``,
    ``w2_shuf`` / ``w2_scale_shuf`` in their ``[E, H, *]`` shapes, and ``out`` zeroed.

    ``lazy=True`` (a timing run's inputs): the routing and its sorting as usual; ``inter`` /
    ``inter_scale``, the weights (``w2`` / ``w2_scale``, ``w2_shuf`` / ``w2_scale_shuf``) and ``out``
    are ``meta`` tensors of their shapes (no storage), which the timing run maps as zeros. The model
    reads data only through addresses, EXEC and branches, and this kernel's follow the routing alone
    (``tests/test_modelled.py`` checks the modelled cycles on these against the eager random inputs,
    decode and prefill).  Such inputs have no reference.
    """
    import torch

    from mxfp4_ablation import formats
    from mxfp4_ablation.moe import host
    from mxfp4_ablation.moe.reference import quantize_mxfp4_moe

    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    problem, data, sorting = routed_problem(g, seed, lazy)
    w2_shuf, w2_scale_shuf = expert_weights(problem, data, "w2", lazy)
    del data
    if lazy:
        meta = {"device": "meta", "dtype": torch.uint8}
        h_q = torch.empty(g.max_sorted, inter // 2, **meta)
        h_scale = torch.empty(g.scale_rows * (inter // 32), **meta)
    else:
        gen = torch.Generator().manual_seed(seed + 1)
        # h: rows of valid pairs random, padding rows zero (as gemm1 writes them: silu(0) * 0).
        h = torch.randn(g.max_sorted, inter, generator=gen)
        h[~sorting.valid_row_mask()] = 0
        h_q, h_s = host._by_rows(quantize_mxfp4_moe, h)
        del h
        h_s_pad = torch.zeros(g.scale_rows, inter // 32, dtype=torch.uint8)
        h_s_pad[: g.max_sorted] = h_s
        h_scale = formats.shuffle_scales(h_s_pad).reshape(-1)
    bufs = {
        "inter": h_q.contiguous(),
        "inter_scale": h_scale.contiguous(),
        "w2": w2_shuf.reshape(experts * hidden, inter // 2),
        "w2_scale": w2_scale_shuf.reshape(experts * hidden, inter // 32),
        "sorted_ids": sorting.sorted_token_ids.contiguous(),
        "sorted_weights": sorting.sorted_weights.contiguous(),
        "sorted_expert_ids": sorting.sorted_expert_ids.contiguous(),
        "num_valid_ids": sorting.num_valid_ids.contiguous(),
        "out": torch.zeros(g.out_rows, hidden, dtype=torch.bfloat16, device="meta" if lazy else "cpu"),
        "tokens": tokens,
    }
    out = {**bufs, "sorting": sorting, "regime": g.regime, "w2_shuf": w2_shuf, "w2_scale_shuf": w2_scale_shuf,
           "block_m": g.BM}
    return out


def reference(inputs: dict) -> dict:
    """What the kernel must leave in ``out``: :func:`mxfp4_ablation.moe.emulate.emulate_gemm2` on the
    same buffers - ``out`` (bf16 ``[M, H]``) for decode, ``flat_out`` (bf16 ``[max_sorted, H]``,
    before the host's scatter-reduce) for prefill."""
    from mxfp4_ablation.moe import emulate

    _check_inputs(inputs)
    epilog = "atomic" if inputs["block_m"] == 16 else "nonatomic"
    res = emulate.emulate_gemm2(inputs["inter"], inputs["inter_scale"], inputs["w2_shuf"], inputs["w2_scale_shuf"],
                                inputs["sorting"], epilog)
    return {"out": res["out"] if epilog == "atomic" else res["flat_out"]}


def _check_inputs(inputs: dict):
    check_inputs(inputs, ARG_NAMES + ("sorting", "w2_shuf", "w2_scale_shuf", "block_m"), LABEL)


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg list in the metadata ``.args`` order (:meth:`BufferABI.kernel_args`);
    ``switches`` are a variant's switches as keywords (only ``int64_abi`` changes the list)."""
    _check_inputs(inputs)
    return _abi(switches).kernel_args(inputs)


def device_args(inputs: dict, **switches) -> tuple:
    """The launcher's positional arguments for a device run (tensors on the GPU):
    :meth:`BufferABI.device_args`."""
    _check_inputs(inputs)
    return _abi(switches).device_args(inputs)


def flops(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:
    """Useful floating-point operations of one launch: valid (token, expert) rows only
    (``moe.host.gemm2_flops``; padding rows are waste, not work)."""
    from mxfp4_ablation.moe.host import gemm2_flops

    return float(gemm2_flops(tokens * topk, hidden, inter))


def bytes(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:  # noqa: A001
    """Compulsory DRAM traffic of one launch: the valid rows of the intermediate (fp4 + E8M0), the down
    weights and scales of every expert the routing can touch (at most ``min(experts, tokens * topk)``),
    and the bf16 output (``[tokens, hidden]`` at decode, one row per valid pair at prefill)."""
    block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
    rows = tokens * topk
    active = min(experts, rows)
    out_rows = tokens if block_m == 16 else rows
    return float(rows * (inter // 2 + inter // 32) + active * hidden * (inter // 2 + inter // 32)
                 + out_rows * hidden * 2)


def compile_entry(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None,
                  variant_name: str = None, **switches):
    """``(jit_launcher, args)`` for ``toolchain.compile``; pass switches by name or a
    ladder/leave-one-out ``variant_name`` (e.g. ``"moe2-v2"``)."""
    switches = _family.of_module(__name__).resolve(variant_name, switches)
    launcher = build(tokens, experts, hidden, inter, topk, block_m, **switches)
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    return launcher, _abi(switches).compile_args(_shape_buffers(g))


__doc__ = _family.document(__doc__, SWITCHES)
