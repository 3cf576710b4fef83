"""MoE gemm1 for gfx950: gate/up projection + silu(gate)*up + MXFP4 requantisation.

Per sorted row block ``b`` (``block_m`` rows of one expert ``e = sorted_expert_ids[b]``)
and per 128 intermediate columns ``n``, one workgroup computes::

    gate = x . Wgate_e^T,  up = x . Wup_e^T       (x = the block's rows of A, MXFP4)
    h    = silu(gate) * up                        (fp32)
    h_q  = MXFP4(h) per 1x32 with the MoE rule    (scale = ceil-exponent of amax/6)

The kernel has the structure of the seed's (aiter b242ba66a ``aiter/ops/flydsl/kernels/
mxfp4_gemm1.py``, a port of HIP ``gemm1_a4w4``), written in our own FlyDSL:

* **Tile**: 256 W1 rows (128 gate + 128 up columns) x 256 K per step, 4 waves; wave ``w`` owns gate
  and up columns ``32w + [0, 32)``: per 16-row group four 16x16 accumulators (W tiles gate0, gate1,
  up0, up1), two ``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4, E8M0 scales inside the MFMA,
  the 128-K half and the 16-row half picked by ``op_sel``) per accumulator and K tile; A is src0.
* **K fully unrolled** (no loop): a 2-tile prologue, then one step per tile -- ``s_barrier``
  (``gpu.barrier``: its fence makes the compiler wait for this wave's LDS-DMA / ``ds_write`` of the tile
  first), ``ds_read_b128`` of the A fragments and ``ds_read_b32`` of the A-scale dwords, the A tile
  ``t + 2`` into its stage, then per W tile the MFMAs and the W loads of tile ``t + 2`` into the freed
  registers (``sched_barrier`` between; at block_m 16 also ``s_setprio 1/0`` around the MFMAs, as the
  seed).  Kimi-K2.5 (hidden 7168 = 28 tiles): 224 MFMAs at block_m 16, 1792 at 128, 30 barriers.
* **A through LDS** in 3 stages of ``block_m x 128`` bytes, rows XOR-swizzled (16-byte chunk ``c`` of
  row ``r`` at ``c ^ ((r & 14) >> 1)``, the seed's ``lds_swizzle_mask``):

  - block_m 128 (prefill): ``buffer_load_dwordx4 ... lds`` (LDS DMA; ``m0`` = the wave's 8-row slice),
    lane ``l`` fetching row ``l // 8``'s chunk ``(l % 8) ^ mask`` of its token (``m_indices``; padding
    rows hold ``M`` and read zeros past the buffer's bound); the A scales of every K tile (the sorted,
    preshuffled ``a_scale`` of the block's four 32-row chunks) by LDS DMA once in the prologue
    (dwordx4 per 4 KiB, dword per 1 KiB, the rest by fewer waves);
  - block_m 16 (decode, the seed's ``inline_quant``): A arrives as the bf16 ``hidden_states`` and is
    quantised in the kernel, two tiles ahead: each lane loads 2 x 8 bf16 (row ``4w + l // 16``, 32-block
    ``(l >> 2) & 3``, quarter ``l & 3``), takes the block amax as bf16 bits (``& 0x7FFF7FFF``, three
    ``v_pk_max_u16``, a DPP quad max over the 4 lanes of the block), the seed's E8M0 rule
    (``_inline_e8m0``), 4 ``v_cvt_scalef32_pk_fp4_bf16`` -> one ``ds_write_b32`` into the stage, and
    the tile's two scale bytes (one per 128-K half) -> one ``ds_write_b32`` into the scale region.  The
    rule is the seed's, not our MoE rule; :func:`mxfp4_ablation.moe.host.quantize_activations_inline` is
    the same rule in torch (``make_inputs`` / ``reference`` use it for block_m 16).
* **W to VGPRs**: two ``buffer_load_dwordx4`` per W tile (lane ``l`` at ``16 l`` of each preshuffled
  1 KiB block, the expert's tile base in ``soffset``), double-buffered in registers; the gate and up
  scale dwords per tile (the tile offset in the immediate, a second scalar base past 15 tiles).
* **Epilogue through LDS** (the seed's "cshuffle"): after a barrier the f32 accumulators go to an
  LDS tile ``[block_m, 256]`` (gate columns 0..127, up 128..255; ``ds_write_b32`` / ``ds_write2_b32``),
  which overlaps the A regions; after another barrier thread ``t`` takes 8 columns ``8 (t % 4) +
  32 ((t % 16) // 4)`` of row ``t // 16`` per 16 rows (4 ``ds_read_b128``), ``silu(g)*u`` with
  ``v_rcp_f32`` and one exp2 per element (the ``exp2`` switch), amax over the 8 values and the lane
  quad (DPP), our MoE E8M0 rule, 4 ``v_cvt_scalef32_pk_fp4_f32`` -> one ``global_store_dword`` of 8
  fp4, and the scale byte (block_m 16) or the two 16-row halves' bytes as one short (128) with
  ``global_store`` (the 4 lanes of a quad store the same value).
* **Grid** 1-D, ``(max_sorted / block_m) * (inter / 128)`` workgroups, the intermediate tile fastest;
  workgroups past ``num_valid_ids[0] / block_m`` blocks exit at once (signed i32, as the seed's bound).

LDS: 16 KiB at block_m 16 (the 16 KiB epilogue tile covers 7 KiB of scales + 6 KiB of A stages at Kimi),
128 KiB at 128 (28 KiB + 48 KiB), as the seed.  Buffers (layouts of :mod:`mxfp4_ablation.moe.host`):
``a_quant`` ``uint8 [M, H/2]`` token-major, ``a_scale`` (``sort_shuffle_scales``), ``w1`` / ``w1_scale``
(``preshuffle_w1``, gate rows ``[0, I)`` then up ``[I, 2I)``), ``sorted_expert_ids``, ``num_valid_ids``,
``m_indices``, ``tokens``; out ``inter_quant`` ``uint8 [max_sorted, I/2]`` row-major and
``inter_scale`` (``round_up(max_sorted, 32) * I/32`` bytes, preshuffled like the A scales: what gemm2
reads); ``hidden_states`` bf16 ``[M, H]`` (read at block_m 16 only; ``a_quant`` / ``a_scale`` only at 128,
as the seed's argument list).  Every tensor is passed flattened 1-D.  Blocks past ``num_valid_ids[0]``
are not written (the buffers start zeroed).

Where we differ from the seed, on purpose: 3 A stages at block_m 128 too (the seed uses 2 there and
refills the stage it has just read after one barrier; in our schedule that refill could overwrite a stage
another wave is still reading unless the LDS-DMA lands late, the kind of ordering our emulator's random
delivery is there to catch, so we keep 3; whether the seed's own schedule has that race was not checked
here), W rows separated gate/up (the
seed interleaves 16-row tiles; same loads), our MoE requant rule in the epilogue (the seed's
``_e8m0_from_amax`` rounds differently; gemm2 and the study's reference consume ours).

Fidelity (``python -m mxfp4_ablation.fidelity moe1``, Kimi-K2.5 TP=4, band 15 %, measured 2026-12-01):
decode 18 of 19 metrics (``moe1-v0`` vs 46ecc4489) and 18 of 18 (``moe1-v2`` vs b242ba66a); prefill 19 of
21 and 18 of 20.  Outside: decode ``insts_before_first_buffer_load`` of v0, 87 vs 112 (-22 %): the same
setup instructions, but the seed's before-kernel had 25 more of its W / scale base computations scheduled
ahead of the first hidden-state load (its after-kernel: 94, ours 89).  Prefill ``s_waitcnt`` 268 vs 170
(before) / 195 (after) and so ``s_waitcnt_per_128_mfma``: the extra waits are all in the unrolled K
steps (209 vs 144 there, decode 107 vs 107): the compiler orders each step's first W-tile MFMAs in
``ds_read`` order, waiting for the fragments one by one (lgkmcnt 14, 12, 11, 7, ... 0: ~9 waits per
step), where the seed's schedule starts with the late fragments after one ``lgkmcnt(4)`` (~5 per step);
the instructions, reads and MFMAs per step are the same (``ds_read`` 536 vs 551).  The count is a
scheduling outcome, not structure: one ``sched_barrier`` after the step's reads (not in the seed) folds
the waits and gives 114-125 for the whole kernel, measured.

Variants are data: :data:`SWITCHES` holds the :class:`~mxfp4_ablation.family.Switch` records,
from which the registry derives the ladder (``moe1-v0`` .. ``moe1-v2``) and the
leave-one-out set (``moe1-v2-no-<switch>``).  The seed is aiter PR #3828
(merge b242ba66a6, "flydsl mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the
HIP backend"), whose claims are quoted, never its code.
"""

from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Switch

from .moe_common import (  # noqa: F401 - the contract's shape names, re-exported
    BufferABI, check_inputs, default_block_m, expert_weights, INT64_ABI, MoEGeometry, N_WAVES,
    OPTIONAL_SHAPE_PARAMS, PR_3828, routed_problem, SHAPE_PARAMS, switch_flags, WORKGROUP_ATTRS,
)

NAME = "moe1"
LABEL = "moe1"
METRICS = "moe"

SWITCHES = _family.switch_table(
    INT64_ABI,
    Switch(
        "exp2", "Hardware exp2 in silu.", PR_3828,
        claim="('flydsl mxfp4 gemm1: hardware exp2 in silu') rocdl.exp2 emits a bare v_exp_f32 instead of the "
        "library exp2 expansion with its v_ldexp and range-clamp v_cmp/v_cndmask; ~31% of gemm1's non-MFMA VALU "
        "removed, large M 2-6% faster.",
        mechanism="silu(g) = g * rcp(1 + exp2(-g*log2 e)) in the epilogue, 8 exps per thread per 16 rows. ON: "
        "rocdl.exp2 -> llvm.amdgcn.exp2 -> one v_exp_f32 (a denormal result flushes to 0: harmless here). OFF: the "
        "library-style expansion written in FlyDSL arithmetic (see _exp2), because the real library call cannot "
        "be compiled offline: math.exp2 lowers to __ocml_exp2_f32, which needs the ROCm device-library bitcode, "
        "and FlyDSL's convert-gpu-to-rocdl pass marks llvm.intr.exp2 illegal. The expansion: n = rint(x) "
        "(v_rndne), v_exp_f32(x - n), v_cvt_i32 + v_ldexp_f32 by n, clamps x > 128 -> inf and x < -150 -> 0 "
        "(v_cmp + v_cndmask each). (The shorter denormal-scaling form - offset inputs below -126 by +64, scale "
        "back by 2^-64 - was tried too: LLVM folds its ldexp-by-select into a v_pk_mul + v_cndmask, so no "
        "v_ldexp is left to see.)",
        metric="over the kernel (K is unrolled, so the epilogue counts cover everything): v_exp_f32 unchanged "
        "(one per element: 8 at Kimi decode, 64 at prefill), v_ldexp_f32 8 -> 0 / 64 -> 0 (the seed's: the same), "
        "v_cndmask and v_cmp fall by 2 per element (16 -> 0, 128 -> 0), non-MFMA VALU 1155 -> 710 at prefill "
        "(-39 %) but only 1338 -> 1277 at decode, where the in-kernel A quant's VALU dominates; instructions "
        "4821 -> 4196 (prefill), 2596 -> 2524 (decode).",
        expects=(Expect("epi_v_ldexp_f32", "zero"), Expect("epi_v_cndmask", "down"),
                 Expect("epi_valu", "down", note="seed: ~31% of non-MFMA VALU removed")),
    ),
)

#: Both outputs are quantised (fp4 bytes and E8M0 scale bytes), so both are compared byte for byte
#: with ``moe.emulate.emulate_gemm1``, which computes the same f32 silu*up and MoE E8M0 rule.
OUTPUTS = (
    Output("inter_quant", "exact", why="packed fp4 of silu(gate)*up: quantised values, bytes must match"),
    Output("inter_scale", "exact", why="E8M0 block scales (preshuffled): bytes must match"),
)

BLOCK_N = 128  # intermediate columns per workgroup = 256 W1 rows (128 gate + 128 up), 32 + 32 per wave
K_STEP = 256  # fp4 per K tile (two MFMAs of 128 per accumulator)
A_STAGES = 3  # LDS stages of the A tile (read t, t+1 in flight, t+2 being written)
B_STAGES = 2  # register stages of the W operands
TILE_BYTES = K_STEP // 2  # bytes of one A row in one K tile
LDS_LIMIT = 160 * 1024  # gfx950 LDS per workgroup
LOG2E = 1.4426950408889634
KERNEL_NAME = "mxfp4_moe_gemm1"
#: Kernel parameters in order (the seed's order: ... m_indices, tokens, outputs, hidden states).
ARG_NAMES = ("a_quant", "a_scale", "w1", "w1_scale", "sorted_expert_ids", "num_valid_ids", "m_indices",
             "tokens", "inter_quant", "inter_scale", "hidden_states")


def _flags(switches):
    """The switch keywords as ``sw.<switch>`` booleans (validated)."""
    return switch_flags(_family.of_module(__name__), switches)


def _abi(switches) -> BufferABI:
    return BufferABI(ARG_NAMES, _flags(switches).int64_abi)


def inline_quant(block_m: int) -> bool:
    """The decode block (16 rows) quantises A in the kernel from the bf16 hidden states (the seed's
    BM16 ``inline_quant`` config); the prefill block (128) reads the pre-quantised MXFP4 A."""
    return block_m == 16


def check_shape(tokens, experts, hidden, inter, topk, block_m=None) -> dict:
    """Validate a shape before any compile (one clear ValueError); returns it with ``block_m`` defaulted."""
    return Geometry(tokens, experts, hidden, inter, topk, block_m).shape


class Geometry(MoEGeometry):
    """Every compile-time number of one gemm1 shape (sizes in bytes unless named otherwise): the shared
    MoE numbers (:class:`~mxfp4_ablation.kernels.moe_common.MoEGeometry`), this kernel's checks, its K
    tiling and its LDS regions -- the A scales of every K tile (at ``lds_scales``), then the A stages (at
    ``lds_a``), and the f32 epilogue tile ``[block_m, 256]`` (at 0) that overlaps both (a union: it is
    written after the last MFMA, behind a barrier).  The scales come first so their ``ds_read`` offsets stay
    inside the 16-bit DS offset field (pairs merge into ``ds_read2st64_b32``)."""

    def __init__(self, tokens, experts, hidden, inter, topk, block_m=None):
        super().__init__(tokens, experts, hidden, inter, topk, block_m)
        if hidden % K_STEP:
            raise UsageError(f"hidden must be a multiple of {K_STEP} (one K tile), got {hidden}.")
        if tokens * hidden * 2 >= 1 << 32 or experts * inter * hidden >= 1 << 32:
            raise UsageError("the hidden states (bf16), a_quant and w1 must each stay below 4 GiB (32-bit buffer "
                             "offsets).")
        BM = self.BM
        self.inline = inline_quant(BM)
        self.HB = hidden // 2  # bytes per A / W row
        self.K0 = hidden // 128  # 128-K blocks per W row
        self.KT = hidden // K_STEP  # K tiles = scale dwords per 32-row group and lane
        self.RG = BM // 16  # 16-row groups per block
        self.n_tiles = inter // BLOCK_N  # intermediate tiles (workgroups per row block)
        self.subs = 1 if BM < 32 else BM // 32  # 32-row A-scale chunks of the block
        self.lds_scales, self.scale_bytes = 0, self.subs * self.KT * 256
        self.lds_a, self.a_bytes = self.scale_bytes, A_STAGES * BM * TILE_BYTES
        self.acc_bytes = BM * 2 * BLOCK_N * 4
        self.lds_bytes = max(self.a_bytes + self.scale_bytes, self.acc_bytes)
        if self.lds_bytes > LDS_LIMIT:
            raise UsageError(f"hidden {hidden} needs {self.lds_bytes} bytes of LDS at block_m {BM} (A scales of "
                             f"every K tile are staged), more than gfx950's {LDS_LIMIT}.")


def launch_config(tokens, experts, hidden, inter, topk, block_m=None):
    """``(grid, block)``: one workgroup per (sorted block, 128 intermediate columns), in a 1-D grid
    (workgroup ``b * inter/128 + n``: block ``b``, intermediate tile ``n``)."""
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    return (g.m_blocks * g.n_tiles, 1, 1), (64 * N_WAVES, 1, 1)


# ============================================================================ kernel emission
#
# The emission helpers live in a module-level class (not inside the @kernel body) so
# FlyDSL's AST rewriter leaves their Python loops alone: they unroll at trace time.

# FlyDSL takes seconds to import; it loads on the first build() / kernel_args() so that registering
# the family (reading its records) stays cheap. The names are filled in by _load_flydsl().
flyc = fx = ir = _arith = llvm = const_expr = rocdl = T = C = None


def _load_flydsl():
    from .lazy import load_flydsl

    load_flydsl(globals())


_UNBOUNDED = 0xFFFFFFFF


def _gload(base, off, const=0):
    """One i32 (``fx.Int32``) from global memory at ``base + off`` (+ ``const``): :func:`common.global_load`
    (a byte GEP, so the offset is sign-extended: the seed's ``_gep1`` addressing)."""
    return fx.Int32(C.global_load(base, off, const=const))


def _trunc(ty, v):
    """Low bits of an i32 as ``ty`` (i16 / i8) for a short / byte store."""
    return _arith.trunci(ty, C.raw(v))


def _f32(v):
    return fx.Float32(v)


def _exp2(x, hardware: bool):
    """2**x: a bare ``v_exp_f32`` (``hardware``) or the library-style expansion.

    The expansion is written out in FlyDSL arithmetic because the library call needs
    the ROCm device-library bitcode (math.exp2 lowers to ``__ocml_exp2_f32``) and
    FlyDSL's convert-gpu-to-rocdl pass rejects ``llvm.intr.exp2`` offline.  It is the
    range-reduced form of the library exponentials: ``n = rint(x)``, ``2**(x-n)`` on the
    hardware (its argument stays in [-0.5, 0.5], so no denormal flush), ``v_ldexp_f32``
    by ``n`` (gradual underflow done right), then the range clamps ``x > 128 -> inf``
    and ``x < -150 -> 0`` (v_cmp + v_cndmask each; they also make +-inf inputs exact).
    """
    if hardware:
        return _f32(rocdl.exp2(T.f32, C.raw(x)))
    x = _f32(x)
    n = _f32(llvm.intr_rint(C.raw(x)))
    r = rocdl.exp2(T.f32, C.raw(x - n))
    y = _f32(llvm.intr_ldexp(T.f32, r, C.raw(n.to(fx.Int32))))
    y = _f32(fx.arith.select(C.raw(x > _f32(128.0)), C.raw(_f32(float("inf"))), C.raw(y)))
    return _f32(fx.arith.select(C.raw(x < _f32(-150.0)), C.raw(_f32(0.0)), C.raw(y)))


def _dpp(v_i32, ctrl):
    """``v_mov_b32_dpp`` (all rows and banks, bound_ctrl): lane ``l`` gets the lane ``ctrl`` picks."""
    return fx.Int32(rocdl.update_dpp(T.i32, C.raw(v_i32), C.raw(v_i32), ctrl, 0xF, 0xF, True))


_QUAD_SWAP1, _QUAD_SWAP2 = 0xB1, 0x4E  # quad_perm [1,0,3,2] and [2,3,0,1]: lanes l^1 and l^2


def _umax(a, b):
    return fx.Int32(_arith.maxui(C.raw(fx.Int32(a)), C.raw(fx.Int32(b))))


def _pk_max_u16(a, b):
    """Both 16-bit halves' unsigned max (``umax <2 x i16>``: one ``v_pk_max_u16``)."""
    v2 = ir.VectorType.get([2], ir.IntegerType.get_signless(16))
    va = llvm.bitcast(v2, C.raw(fx.Int32(a)))
    vb = llvm.bitcast(v2, C.raw(fx.Int32(b)))
    return fx.Int32(llvm.bitcast(T.i32, _arith.maxui(va, vb)))


def _quad_fmax(v):
    """Max of an f32 over the 4 lanes of a quad (two DPP quad permutations)."""
    for ctrl in (_QUAD_SWAP1, _QUAD_SWAP2):
        other = _dpp(_f32(v).bitcast(fx.Int32), ctrl).bitcast(fx.Float32)
        v = fx.arith.maxnumf(_f32(v), other)
    return v


def _inline_e8m0(amax_u16):
    """The in-kernel A quant's scale byte from the block amax as bf16 bits (|x| as u16): the exponent of
    the f32 ``amax_u16 << 16`` rounded up from a mantissa of 0.75 on (``+ 0x200000``), minus 2, clamped to
    [0, 254] (aiter b242ba66a ``_inline_e8m0`` / HIP ``inline_quant_encode_e8m0``, our own code; the same
    rule in torch is ``moe.host.quantize_activations_inline``)."""
    bexp = ((fx.Int32(amax_u16) << 16) + 0x200000).shrui(fx.Int32(23)) & 0xFF
    e = bexp - 2
    e = fx.Int32(fx.arith.select(C.raw(e > 0), C.raw(e), C.raw(fx.Int32(0))))
    return fx.Int32(fx.arith.select(C.raw(e < 254), C.raw(e), C.raw(fx.Int32(254))))


def _moe_e8m0(amax):
    """Our requant rule (``moe.reference.e8m0_scale_moe``): exponent of f32(amax) * f32(1/6), rounded up,
    clamped to 254."""
    bits = (_f32(amax) * _f32(1.0 / 6.0)).bitcast(fx.Int32)
    bexp = (bits + 0x7FFFFF).shrui(fx.Int32(23)) & 0xFF
    return fx.Int32(fx.arith.select(C.raw(bexp < 254), C.raw(bexp), C.raw(fx.Int32(254))))


def _block_is_valid(num_valid_ids, block_m, n_tiles):
    """``block_idx.x < (num_valid_ids[0] / block_m) * n_tiles``: workgroups past the padded rows exit
    at once (signed i32 arithmetic, as the seed's bound)."""
    num_valid = _gload(C.address(num_valid_ids), 0)
    return fx.Int32(fx.block_idx.x) < (num_valid // block_m) * n_tiles


class _Emitter:
    """Emits one gemm1 kernel body for fixed sizes and switches."""

    def __init__(self, g: Geometry, sw):
        self.g, self.sw = g, sw

    # ------------------------------------------------------------------ setup
    def setup(self, args, lds):
        """Buffer resources, the block's expert, the per-lane offsets."""
        HB, BM, I = self.g.HB, self.g.BM, self.g.I
        tokens = fx.Int32(args["tokens"])

        def mk(name, n):
            return C.buffer_rsrc_at(C.address(args[name]), n)

        tid = fx.thread_idx.x
        self.tid = fx.Int32(tid)
        self.lane = fx.Int32(tid % 64)
        self.wave = fx.Int32(C.uniform(tid // 64))
        # 1-D grid, the intermediate tile fastest (consecutive workgroups share the block's A rows).
        bx = fx.Int32(fx.block_idx.x)
        self.blk = bx // self.g.n_tiles
        self.ntile = bx % self.g.n_tiles
        self.row0 = self.blk * BM  # first sorted row of the block
        self.lds = fx.Int32(C.uniform(C.lds_addr(lds.buf)))
        self.s_aq = self.lds + self.g.lds_a
        self.s_asc = self.lds + self.g.lds_scales
        lane, wave = self.lane, self.wave
        self.q_base = C.address(args["inter_quant"])
        self.s_base = C.address(args["inter_scale"])
        mind = C.address(args["m_indices"])
        self.expert = fx.Int32(C.uniform(_gload(C.address(args["sorted_expert_ids"]), self.blk * 4)))
        # A rows: the token of each row this lane moves (out-of-range tokens read zeros).
        if self.g.inline:
            self.h_rsrc = mk("hidden_states", fx.Int64(tokens) * (self.g.H * 2))
            r = wave * 4 + lane // 16  # row of the block; 16 lanes per row, 4 rows per wave
            self.q_row = r
            token = _gload(mind, (self.row0 + r) * 4)
            blk4, quad = (lane >> 2) & 3, lane & 3
            self.q_blk, self.q_quad = blk4, quad
            self.h_voff = token * (self.g.H * 2) + blk4 * 64 + quad * 16
        else:
            self.a_rsrc = mk("a_quant", fx.Int64(tokens) * HB)
            self.sa_rsrc = mk("a_scale", _UNBOUNDED)
            self.dma_token, self.dma_row, self.dma_voff = [], [], None
            rows = (self.row0 + wave * (BM // 4) + lane // 8) * 4
            for sub in range(self.g.subs):
                lds_row = wave * (BM // 4) + sub * 8  # 8 rows of 128 bytes per DMA instruction
                self.dma_token.append(_gload(mind, rows, sub * 32))
                self.dma_row.append(lds_row)
        self.w_rsrc = mk("w1", _UNBOUNDED)
        self.sw_rsrc = mk("w1_scale", _UNBOUNDED)
        # W: this wave's 16-row tiles J = gate0, gate1, up0, up1 (separated gate/up rows).
        col0 = self.ntile * BLOCK_N + wave * 32
        n0 = [col0 // 16, col0 // 16 + 1, col0 // 16 + I // 16, col0 // 16 + 1 + I // 16]
        ebase = self.expert * (2 * I // 16)
        self.w_sbase = [fx.Int32(C.uniform((ebase + n) * (self.g.K0 * 1024))) for n in n0]
        r1 = [col0 // 32, col0 // 32 + I // 32]  # gate, up 32-row scale groups
        self.ws_sbase = [fx.Int32(C.uniform((self.expert * (2 * I // 32) + r) * (self.g.KT * 256))) for r in r1]
        # ds_read of the A fragments: row 16 i + lane % 16, 16-byte chunk 4 k + lane // 16, XOR-swizzled.
        nl = lane % 16
        self.a_rd = [nl * TILE_BYTES + (((lane // 16) * 16 + k * 64) ^ ((nl & 14) << 3)) for k in range(2)]

    # ------------------------------------------------------------------ A: global -> LDS
    def a_scales_to_lds(self):
        """Prologue (non-inline): the A scales of every K tile, ``subs`` 32-row chunks of ``KT*256``
        bytes, by LDS DMA: dwordx4 per 4 KiB (all waves), dword per 1 KiB, the rest by fewer waves."""
        cb = self.g.KT * 256
        wave, lane = self.wave, self.lane
        for sub in range(self.g.subs):
            chunk = fx.Int32(C.uniform((self.row0 // 32 + sub) * cb))
            dst = self.s_asc + sub * cb
            off = 0
            while cb - off >= 4096:
                self._dma(self.sa_rsrc, dst + off + wave * 1024, (wave * 64 + lane) * 16, chunk + off, 16)
                off += 4096
            while cb - off >= 1024:
                self._dma(self.sa_rsrc, dst + off + wave * 256, (wave * 64 + lane) * 4, chunk + off, 4)
                off += 1024
            if cb - off:
                with C.if_then(wave < (cb - off) // 256):
                    self._dma(self.sa_rsrc, dst + off + wave * 256, (wave * 64 + lane) * 4, chunk + off, 4)

    def _dma(self, rsrc, m0, voff, soff, size):
        rocdl.raw_ptr_buffer_load_lds(C.raw(rsrc), C.lds_ptr(fx.Int32(C.uniform(m0))), C.i32(size), C.i32(voff),
                                      C.i32(C.uniform(soff)), C.i32(0), C.i32(0))

    def a_tile_to_lds(self, t):
        """Non-inline: K tile ``t`` of A (BM x 128 bytes) into stage ``t % 3`` by LDS DMA."""
        if self.dma_voff is None:  # on first use: after the A-scale DMA, which needs no token
            lane, HB = self.lane, self.g.HB
            self.dma_voff = [token * HB + (((lane % 8) * 16) ^ (((lds_row + lane // 8) & 14) << 3))
                             for token, lds_row in zip(self.dma_token, self.dma_row)]
        stage = self.s_aq + (t % A_STAGES) * (self.g.BM * TILE_BYTES)
        for voff, lds_row in zip(self.dma_voff, self.dma_row):
            C.lds_dma_dwordx4(self.a_rsrc, fx.Int32(C.uniform(stage + lds_row * TILE_BYTES)), voff, t * TILE_BYTES)

    def hidden_load(self, t):
        """Inline: this lane's 2 x 8 bf16 of K tile ``t`` (two 128-K halves)."""
        return [C.buffer_load(self.h_rsrc, self.h_voff, 4, t * 512 + half * 256) for half in range(2)]

    def quant_to_lds(self, t, h):
        """Inline: MXFP4 of the two halves' 8 bf16 (block amax over a lane quad, the seed's e8m0 rule,
        ``v_cvt_scalef32_pk_fp4_bf16``) -> one dword each into stage ``t % 3``, both scale bytes -> the
        tile's scale dword."""
        r, blk4, quad = self.q_row, self.q_blk, self.q_quad
        dws = [[fx.Int32(llvm.extractelement(C.raw(v), C.raw(fx.Int32(j)))) for j in range(4)] for v in h]
        amax = []
        for dw in dws:  # both halves' stages interleaved, so one's DPP latency hides behind the other
            m = [d & 0x7FFF7FFF for d in dw]
            m = _pk_max_u16(_pk_max_u16(m[0], m[1]), _pk_max_u16(m[2], m[3]))
            amax.append(_umax(m & 0xFFFF, m.shrui(fx.Int32(16))))
        for ctrl in (_QUAD_SWAP1, _QUAD_SWAP2):
            amax = [_umax(a, _dpp(a, ctrl)) for a in amax]
        e8 = [_inline_e8m0(a) for a in amax]
        stage = self.s_aq + (t % A_STAGES) * (self.g.BM * TILE_BYTES) + r * TILE_BYTES
        bf2 = ir.VectorType.get([2], ir.BF16Type.get())
        for half, dw in enumerate(dws):
            scale = C.raw((e8[half] << 23).bitcast(fx.Float32))
            pk = C.raw(fx.Int32(0))
            for j in range(4):
                pk = rocdl.cvt_scalef32_pk_fp4_bf16(T.i32, pk, llvm.bitcast(bf2, C.raw(dw[j])), scale, j)
            chunk = (half * 4 + blk4) * 16
            llvm.StoreOp(pk, C.lds_ptr(stage + (chunk ^ ((r & 14) << 3)) + quad * 4), alignment=4)
        word = e8[0] | (e8[1] << 16)  # byte 2*k_half + 0 (one 16-row block = row half 0)
        llvm.StoreOp(C.raw(word), C.lds_ptr(self.s_asc + t * 256 + (blk4 * 16 + r) * 4), alignment=4)

    # ------------------------------------------------------------------ W: global -> VGPR
    def w_load(self, t, j):
        """W tile ``j`` of K tile ``t``: two 16x128 fp4 fragments (lane ``l`` at ``16*l`` of each 1 KiB)."""
        return [C.buffer_load(self.w_rsrc, self.lane * 16 + (2 * t + h) * 1024, 4, self.w_sbase[j]) for h in range(2)]

    def w_scale_load(self, t):
        """Gate and up scale dwords of K tile ``t`` (the tile's byte offset rides in the instruction's
        immediate up to 15 tiles, then in a second scalar base)."""
        return [C.buffer_load(self.sw_rsrc, self.lane * 4 + (t % 16) * 256, 1,
                              fx.Int32(C.uniform(b + (t // 16) * 4096)) if t >= 16 else b)
                for b in self.ws_sbase]

    # ------------------------------------------------------------------ LDS -> VGPR, MFMA
    def a_read(self, t):
        """This wave's A fragments of tile ``t`` (every row group, both 128-K halves) and A-scale dwords."""
        stage = self.s_aq + (t % A_STAGES) * (self.g.BM * TILE_BYTES)
        a = [[None, None] for _ in range(self.g.RG)]
        for k in range(2):  # the first 128-K half of every row group first (the scheduler reorders anyway)
            for i in range(self.g.RG):
                a[i][k] = C.ds_read_b128(stage + i * 16 * TILE_BYTES + self.a_rd[k])
        sa = [C.ds_read_b32(self.s_asc + sub * (self.g.KT * 256) + t * 256 + self.lane * 4)
              for sub in range(self.g.subs)]
        return a, sa

    def mfma(self, acc, a, sa, w, ws, j):
        """The 2 * RG MFMAs of W tile ``j`` (A is src0, W src1), per 32-row scale group: both 16-row
        halves' first 128-K half, then their second."""
        groups = [[0]] if self.g.RG == 1 else [[2 * p, 2 * p + 1] for p in range(self.g.RG // 2)]
        for rows in groups:
            for k in range(2):
                for i in rows:
                    sa_word, np_a = (sa[0], 0) if self.g.inline else (sa[i // 2], i % 2)
                    n = i * 4 + j
                    acc[n] = C.mfma_scale_fp4(a[i][k], w[j][k], acc[n], sa_word, ws[j // 2], 2 * k + np_a,
                                              2 * k + j % 2)

    # ------------------------------------------------------------------ the unrolled K tiles
    def main(self):
        KT, inline, hint = self.g.KT, self.g.inline, self.g.BM != 128
        if not inline:
            self.a_scales_to_lds()
        w = [None] * B_STAGES
        ws = [None] * B_STAGES
        for t in range(min(B_STAGES, KT)):
            if inline:
                h = self.hidden_load(t)
                w[t] = [self.w_load(t, j) for j in range(4)]
                self.quant_to_lds(t, h)
            else:
                self.a_tile_to_lds(t)
                w[t] = [self.w_load(t, j) for j in range(4)]
            ws[t] = self.w_scale_load(t)
        acc = [C.zeros_f32x4() for _ in range(4 * self.g.RG)]
        for t in range(KT):
            nt = t + B_STAGES
            fx.gpu.barrier()  # stage t % 3 landed (DMA / ds_write of every wave), stage (t+2) % 3 is free
            a, sa = self.a_read(t)
            slot = t % B_STAGES
            cur_w, cur_ws = w[slot], ws[slot]
            if nt < KT:
                if inline:
                    h = self.hidden_load(nt)
                    rocdl.sched_barrier(0)
                else:
                    self.a_tile_to_lds(nt)
                nxt = [None] * 4
            for j in range(4):
                if hint and nt < KT:
                    rocdl.sched_barrier(0)
                    rocdl.s_setprio(1)
                self.mfma(acc, a, sa, cur_w, cur_ws, j)
                if nt < KT:
                    if hint:
                        rocdl.s_setprio(0)
                    rocdl.sched_barrier(0)
                    nxt[j] = self.w_load(nt, j)
                    rocdl.sched_barrier(0)
            if nt < KT:
                w[slot] = nxt
                ws[slot] = self.w_scale_load(nt)
                if inline:
                    self.quant_to_lds(nt, h)
        return acc

    # ------------------------------------------------------------------ epilogue
    def epilogue(self, acc):
        """Accumulators -> LDS f32 tile [BM, 256] (gate cols 0..127, up 128..255), then per thread
        8 columns of one row: silu(gate)*up, amax over the lane quad (32 columns), our E8M0 rule,
        fp4 pack, one dword store; the scale byte (short for two 16-row halves at BM128)."""
        fx.gpu.barrier()  # every wave is done with the A stages (the f32 tile overlaps them)
        lane, wave = self.lane, self.wave
        for i in range(self.g.RG):
            vec = [fx.Vector(acc[i * 4 + j]) for j in range(4)]
            for v in range(4):
                row = i * 16 + (lane // 16) * 4 + v
                for j in range(4):  # gate0, gate1 (16 columns apart: one ds_write2), up0, up1
                    col = (j // 2) * BLOCK_N + wave * 32 + (j % 2) * 16 + lane % 16
                    llvm.StoreOp(C.raw(_f32(vec[j][v])), C.lds_ptr(self.lds + (row * 2 * BLOCK_N + col) * 4),
                                 alignment=4)
        fx.gpu.barrier()
        hw = self.sw.exp2
        I = self.g.I
        m_lane, n_lane = self.tid // 16, self.tid % 16
        wgrp, kk = n_lane // 4, n_lane % 4
        e8 = []
        for mr in range(self.g.RG):
            row_local = mr * 16 + m_lane
            base = self.lds + (row_local * 2 * BLOCK_N + wgrp * 32 + kk * 8) * 4
            gate = [fx.Vector(llvm.bitcast(ir.VectorType.get([4], T.f32), C.ds_read_b128(base + 16 * p)))
                    for p in range(2)]
            up = [fx.Vector(llvm.bitcast(ir.VectorType.get([4], T.f32), C.ds_read_b128(base + BLOCK_N * 4 + 16 * p)))
                  for p in range(2)]
            h = []
            for p in range(2):
                for v in range(4):
                    g = _f32(gate[p][v])
                    e = _exp2(g * _f32(-LOG2E), hw)
                    sig = _f32(rocdl.rcp(T.f32, C.raw(_f32(1.0) + e)))
                    h.append(g * sig * _f32(up[p][v]))
            amax = fx.arith.maxnumf(fx.math.absf(h[0]), fx.math.absf(h[1]))
            for v in h[2:]:
                amax = fx.arith.maxnumf(amax, fx.math.absf(v))
            e = _moe_e8m0(_quad_fmax(amax))
            e8.append(e)
            scale = C.raw((e << 23).bitcast(fx.Float32))
            word = C.raw(fx.Int32(0))
            for n in range(4):
                word = rocdl.cvt_scalef32_pk_fp4_f32(T.i32, word, C.raw(h[2 * n]), C.raw(h[2 * n + 1]), scale, n)
            row = self.row0 + row_local
            C.global_store(word, self.q_base, row * (I // 2) + self.ntile * (BLOCK_N // 2) + wgrp * 16 + kk * 4, 4)
        # Scale bytes in the preshuffled layout (formats.shuffle_scales) of column block ntile*4 + wgrp:
        # byte ((r1 * I/256 + ntile//2) * 4 + wgrp) * 64 + 4 * m_lane + 2 * (ntile % 2) + np. The 4 lanes of a
        # quad store the same value to the same address.
        k1, kp = self.ntile.shrui(fx.Int32(1)), self.ntile & 1
        if self.g.RG == 1:
            r1, np_ = self.blk.shrui(fx.Int32(1)), self.blk & 1
            off = ((r1 * (I // 256) + k1) * 4 + wgrp) * 64 + m_lane * 4 + kp * 2 + np_
            C.global_store(_trunc(T.i8, e8[0]), self.s_base, off, 1)
        else:
            for s in range(self.g.RG // 2):
                r1 = self.blk * (self.g.BM // 32) + s
                off = ((r1 * (I // 256) + k1) * 4 + wgrp) * 64 + m_lane * 4 + kp * 2
                C.global_store(_trunc(T.i16, e8[2 * s] | (e8[2 * s + 1] << 8)), self.s_base, off, 2)


def build(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None, **switches):
    """The ``@flyc.jit`` launcher for the given sizes and switches (names of
    :data:`SWITCHES` mapped to booleans; missing = off).  ``tokens`` only picks the
    default regime and the grid: the kernel reads the token count at run time."""
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    sw = _flags(switches)
    _load_flydsl()
    Arg = C.buffer_arg(sw.int64_abi)  # one global buffer argument

    @flyc.kernel
    def mxfp4_moe_gemm1(
        a_quant: Arg, a_scale: Arg, w1: Arg, w1_scale: Arg, sorted_expert_ids: Arg, num_valid_ids: Arg,
        m_indices: Arg, tokens: fx.Int32, inter_quant: Arg, inter_scale: Arg, hidden_states: Arg,
    ):
        lds = C.allocate_lds(g.lds_bytes)
        valid = _block_is_valid(num_valid_ids, g.BM, g.n_tiles)
        if valid:
            em = _Emitter(g, sw)
            em.setup(dict(a_quant=a_quant, a_scale=a_scale, w1=w1, w1_scale=w1_scale,
                          sorted_expert_ids=sorted_expert_ids, m_indices=m_indices, tokens=tokens,
                          inter_quant=inter_quant, inter_scale=inter_scale, hidden_states=hidden_states), lds)
            em.epilogue(em.main())

    @flyc.jit
    def launch(
        a_quant: Arg, a_scale: Arg, w1: Arg, w1_scale: Arg, sorted_expert_ids: Arg, num_valid_ids: Arg,
        m_indices: Arg, tokens: fx.Int32, inter_quant: Arg, inter_scale: Arg, hidden_states: Arg, grid_x: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        mxfp4_moe_gemm1(
            a_quant, a_scale, w1, w1_scale, sorted_expert_ids, num_valid_ids, m_indices, tokens, inter_quant,
            inter_scale, hidden_states, value_attrs=WORKGROUP_ATTRS,
        ).launch(grid=(grid_x * g.n_tiles, 1, 1), block=(64 * N_WAVES, 1, 1), stream=stream)

    return launch


# ============================================================================ host side


def make_inputs(tokens: int, experts: int, hidden: int, inter: int, topk: int, seed: int = 0,
                block_m: int = None, lazy: bool = False) -> dict:
    """Every buffer of one launch (keys = :data:`ARG_NAMES`), built with ``moe.host``.

    ``hidden_states`` holds the bf16 hidden states. At ``block_m`` 16 (inline quant) the kernel quantises
    them itself, so ``a_quant`` / ``a_scale`` are their quantisation with the kernel's rule
    (``moe.host.quantize_activations_inline``; the kernel does not read them, the reference does); at
    128 they are the MoE-rule MXFP4 of ``moe.host.make_moe_inputs`` and ``hidden_states`` is not read.
    Also carries ``problem``, ``sorting``, the plain (unshuffled) ``w1_quant`` / ``w1_scale_plain``
    and ``block_m``.  ``inter_quant`` / ``inter_scale`` start zeroed (the kernel's outputs).

    ``lazy=True`` (a timing run's inputs): the routing and its sorting as usual; the weights, the
    activations (``a_quant``, ``a_scale``, ``hidden_states``) and the outputs are ``meta`` tensors of
    their shapes (no storage), which the timing run maps as zeros. The model reads data only through
    addresses, EXEC and branches, and this kernel's follow the routing alone
    (``tests/test_modelled.py`` checks the modelled cycles on these against the eager random inputs,
    decode and prefill).  No plain weights: such inputs have no reference.
    """
    import torch

    from mxfp4_ablation.moe import host

    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    problem, raw_in, sorting = routed_problem(g, seed, lazy)
    w1, w1_scale = expert_weights(problem, raw_in, "w1", lazy)
    out = {"device": "meta" if lazy else "cpu", "dtype": torch.uint8}
    if lazy:
        states = torch.empty(tokens, hidden, dtype=torch.bfloat16, device="meta")
        a_q = torch.empty(tokens, hidden // 2, **out)
        a_s_sorted = torch.empty(g.scale_rows * (hidden // 32), **out)
    else:
        states, a_q, a_s = raw_in["hidden_states"], raw_in["a_quant"], raw_in["a_scale"]
        if g.inline:
            a_q, a_s = host.quantize_activations_inline(states)
        a_s_sorted = host.sort_shuffle_scales(a_s, sorting)
    inputs = {
        "a_quant": a_q.contiguous(),
        "a_scale": a_s_sorted.contiguous(),
        "w1": w1.contiguous(),
        "w1_scale": w1_scale.contiguous(),
        "sorted_expert_ids": sorting.sorted_expert_ids.to(torch.int32).contiguous(),
        "num_valid_ids": sorting.num_valid_ids.to(torch.int32).contiguous(),
        "m_indices": sorting.m_indices.to(torch.int32).contiguous(),
        "tokens": tokens,
        "inter_quant": torch.zeros(g.max_sorted, inter // 2, **out),
        "inter_scale": torch.zeros(g.scale_rows * (inter // 32), **out),
        "hidden_states": states.contiguous(),
        "problem": problem, "sorting": sorting, "block_m": g.BM,
        "w1_quant": None if lazy else raw_in["w1_quant"], "w1_scale_plain": None if lazy else raw_in["w1_scale"],
    }
    return inputs


def reference(inputs: dict) -> dict:
    """What the kernel must write: ``moe.emulate.emulate_gemm1``'s fp4 bytes (``inter_quant``) and its
    preshuffled scale bytes (``inter_scale``), on the A the kernel multiplies (at ``block_m`` 16 the
    in-kernel quantisation of ``hidden_states``, recomputed here from them)."""
    q, s = _emulated(inputs)
    return {"inter_quant": q, "inter_scale": s}


def _emulated(inputs: dict):
    from mxfp4_ablation.moe import emulate, host

    _check_inputs(inputs)
    if "_emulated" not in inputs:
        a_q, a_s = inputs["a_quant"], inputs["a_scale"]
        if inline_quant(inputs["sorting"].block_m):
            a_q, a_s = host.quantize_activations_inline(inputs["hidden_states"])
            a_s = host.sort_shuffle_scales(a_s, inputs["sorting"])
        inputs["_emulated"] = emulate.emulate_gemm1(a_q, a_s, inputs["w1"], inputs["w1_scale"], inputs["sorting"])
    return inputs["_emulated"]


def _check_inputs(inputs: dict):
    check_inputs(inputs, ARG_NAMES + ("sorting",), LABEL)


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg entries (metadata ``.args`` order): :meth:`BufferABI.kernel_args`;
    ``switches`` are a variant's switches (only ``int64_abi`` changes the list)."""
    _check_inputs(inputs)
    return _abi(switches).kernel_args(inputs)


def device_args(inputs: dict, **switches) -> tuple:
    """The launcher's positional arguments for on-device tensors (:meth:`BufferABI.device_args`), then
    the grid's row blocks."""
    _check_inputs(inputs)
    return (*_abi(switches).device_args(inputs), inputs["sorting"].max_sorted // inputs["block_m"])


def flops(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:
    """Useful floating-point operations of one launch: valid (token, expert) rows only
    (``moe.host.gemm1_flops``; padding rows are waste, not work)."""
    from mxfp4_ablation.moe.host import gemm1_flops

    return float(gemm1_flops(tokens * topk, hidden, inter))


def bytes(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:  # noqa: A001
    """Compulsory DRAM traffic of one launch: the activations (bf16 hidden states at ``block_m`` 16,
    which quantises them in the kernel; MXFP4 + scales at 128), the gate/up weights and scales of every
    expert the routing can touch (at most ``min(experts, tokens * topk)``), and the requantised output
    of the valid rows (fp4 + E8M0)."""
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    active = min(experts, tokens * topk)
    rows = tokens * topk
    act = tokens * hidden * 2 if g.inline else tokens * hidden // 2 + tokens * hidden // 32
    return float(act + active * 2 * inter * (hidden // 2 + hidden // 32) + rows * (inter // 2 + inter // 32))


def compile_entry(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None,
                  variant_name: str = None, **switches):
    """``(jit_launcher, args)`` for ``toolchain.compile``; switches by name or a
    ladder / leave-one-out ``variant_name`` (e.g. ``"moe1-v1"``)."""
    import torch

    switches = _family.of_module(__name__).resolve(variant_name, switches)
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    launcher = build(tokens, experts, hidden, inter, topk, g.BM, **switches)
    u8 = torch.uint8
    # uninitialised: an offline compile needs only shapes, and untouched pages cost no memory (zero-filled,
    # the Kimi shape's buffers are 1.6 GB at 4096 tokens, and touching them cost the compile seconds of sys time)
    buffers = dict(
        a_quant=torch.empty(tokens * hidden // 2, dtype=u8),
        a_scale=torch.empty(g.scale_rows * (hidden // 32), dtype=u8),
        w1=torch.empty(experts * 2 * inter * hidden // 2, dtype=u8),
        w1_scale=torch.empty(experts * 2 * inter * hidden // 32, dtype=u8),
        sorted_expert_ids=torch.empty(g.m_blocks, dtype=torch.int32),
        num_valid_ids=torch.empty(2, dtype=torch.int32),
        m_indices=torch.empty(g.max_sorted, dtype=torch.int32),
        inter_quant=torch.empty(g.max_sorted * inter // 2, dtype=u8),
        inter_scale=torch.empty(g.scale_rows * (inter // 32), dtype=u8),
        hidden_states=torch.empty(tokens * hidden, dtype=torch.bfloat16),
        tokens=tokens,
    )
    return launcher, (*_abi(switches).compile_args(buffers), g.m_blocks)


__doc__ = _family.document(__doc__, SWITCHES)
