"""The study's dense MXFP4 GEMM for gfx950, with one switch per optimisation.

``C[M, N] (bf16, row-major) = A[M, K] . B[N, K]^T`` where A and B are MXFP4:
two E2M1 values per byte (``formats.pack_fp4``) and one E8M0 scale per 1x32
block along K.  A is row-major ``uint8[M, K/2]``; B is
``formats.shuffle_weight_b`` of ``uint8[N, K/2]``; both scale tensors are
``formats.shuffle_scales`` of ``uint8[rows, K/32]``.

Geometry (fixed): one workgroup = 256 threads = 4 waves in 2x2 computes a
256x256 tile of C; wave ``(wi, wj)`` owns four 64x64 blocks ``(h, v)`` with
rows ``128h + 64wi + [0, 64)`` and columns ``128v + 64wj + [0, 64)`` of the
tile, each a 4x4 grid of 16x16 accumulators fed by
``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4, ``cbsz:4 blgp:4``).  One K
step is 256 fp4 (two MFMAs per accumulator, the two 128-K halves being picked
by ``op_sel_hi`` out of the same scale word): 128 MFMAs per wave per K step.

Data movement: A and B go global -> LDS with ``buffer_load_dwordx4 ... lds``
(LDS DMA) into a two-stage ping-pong (stage = A half 0/1 + B half 0/1, 16 KiB
each, 128 KiB in all) while the MFMAs of the other stage run; A rows are
stored XOR-swizzled (16-byte slot ``c ^ (row % 8)``) so the ``ds_read_b128``
of 16 rows does not hit one bank group; B's preshuffled 1 KiB blocks are
copied verbatim, so lane ``l`` reads its operand at ``16*l``.  Workgroups walk
the tiles in an XCD-aware order (see :func:`tile_order`).

One K step ``k`` (stage ``k % 2``) is two waits and four 64x64 blocks of 32 MFMAs; each block
issues its loads where the seed puts them (:data:`INTERLEAVE_DOC`, :func:`load_slots`: one after
each of the first MFMAs before PR #990, evenly spread over all 32 after it; ``_Plan.segments`` lists
them, ``_Emitter.block`` places them).  With b_carry (PR #990's "after")::

    s_waitcnt vmcnt(N) lgkmcnt(0) ; s_barrier  # A1 of step k landed; stage k%2's A0/B0/B1 read by all
    block (0,0)  | LDS-DMA A0 of step k+2 x4, ds_read A1 of step k x8
    block (0,1)  | LDS-DMA B0 of k+2 x4, scales of k+1 x8 (ring ds_read_b32, or buffer_load_dword)
    s_waitcnt vmcnt(M) lgkmcnt(0) ; s_barrier  # stage (k+1)%2's A0/B0/B1 landed; A1 of k read by all
    block (1,0)  | LDS-DMA B1 of k+2 x4, ds_read A0 of step k+1 x8, scale gather of k+3
    block (1,1)  | LDS-DMA A1 of k+2 x4, ds_read B0, B1 of step k+1 x16

so the next step's A0/B0/B1 fragments arrive as loop-carried values and the only waits are the two
folded ones (N, M from :class:`_Plan`).  Without b_carry (PR #990's "before") B1 is read in the
step that uses it, and the waits stay per fragment::

    s_waitcnt vmcnt(N) lgkmcnt(8) ; s_barrier  # stage k%2's A0 read by all; B0's 8 reads may fly
    block (0,0)  | LDS-DMA A0 of k+2 x4, ds_read B1 of k x8   (the compiler waits lgkmcnt(n) per B0 fragment)
    block (0,1)  | ds_read A1 of k x8, scales of k+1 x8       (... and per B1 fragment)
    s_waitcnt vmcnt(M) lgkmcnt(0) ; s_barrier
    block (1,0)  | LDS-DMA B0, B1 of k+2 x8, ds_read A0 of k+1 x8, scale gather of k+3
    block (1,1)  | LDS-DMA A1 of k+2 x4, ds_read B0 of k+1 x8

The loop body holds two K steps (four with k_unroll4; an even count keeps the stage
static); the peeled head (step 0 with zero_first_k, steps 0 and 1 with k_unroll4)
and the last 2-3 steps, which issue fewer loads, are unrolled around it.  Any K
that is a multiple of 256 works; the runtime loop appears from K = 1024, 1280 or
1536 depending on the switches, see :func:`min_k_for_loop`.

Without g2s_m0 the LDS-DMA is the compiler's intrinsic; every DMA and ds_read then carries the
alias scope of its LDS half-buffer, so the compiler waits only for DMAs into the buffer a ds_read
reads (FlyDSL tags its loads likewise).

Kernel arguments: A, B, C, A_scale, B_scale are passed flattened 1-D (one pointer and
one i32 length each, as FlyDSL's own test passes them: 84 kernarg bytes), then M, N.  The
hand-placed vmcnt counts come from replaying the issue order (:class:`_Plan`);
``gfx950emu``'s waitcnt checker and numeric runs confirm them (tests).

Variants are data: :data:`SWITCHES` holds one :class:`~mxfp4_ablation.family.Switch`
record per optimisation (the seed's claim, the mechanism, the ISA metric that should
move); the registry (:mod:`mxfp4_ablation.family`) derives the cumulative ladder
``gemm-v0`` .. ``gemm-vN`` and the ``gemm-vN-no-<switch>`` sets from it.  ``gemm-v1``
(AGPR pinning, PR #756, with its zeroing writes) is FlyDSL's kernel before PR #990; every
later switch is PR #990's.  The "seed" is
FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py`` (ROCm/FlyDSL; PR #990 = commit
741f3d6d, and PR #756 for AGPR pinning), whose numbers are quoted, never its
code.
"""

from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Seed, Switch

#: The kernel family's name (its ladder is ``gemm-v0`` .. ``gemm-vN``) and how errors name it.
NAME = "gemm"
LABEL = "GEMM"
SHAPE_PARAMS = ("M", "N", "K")
OPTIONAL_SHAPE_PARAMS = ()
#: The metric set the study judges these switches by (:mod:`mxfp4_ablation.metrics`).
METRICS = "gemm"

PR_756 = Seed("ROCm/FlyDSL", 756, "20103433", "Add fp4_gemm_4wave: 4-wave MXFP4 GEMM kernel for gfx950")
PR_990 = Seed("ROCm/FlyDSL", 990, "741f3d6d", "[fp4_gemm_4wave] MXFP4 GEMM perf optimize")

SWITCHES = _family.switch_table(
    Switch(
        "agpr_acc", "Accumulators pinned in AGPRs.", PR_756,
        claim="with the plain scaled-MFMA op the compiler spilled accumulators to arch VGPRs and shuffled them "
        "with v_accvgpr_mov/read (1679 such ops), arch VGPRs hit 256 and scales spilled.",
        mechanism="every MFMA is inline asm whose result is constrained to an AGPR and tied to the accumulator "
        "input; the accumulators start as zero vectors, so the compiler zeroes the 256 AGPRs with "
        "v_accvgpr_write before the first K step (as FlyDSL's kernel did before PR #990).",
        metric="v_accvgpr_write/read/mov in the loop fall to 0, arch_vgpr falls, agpr = 256; v_accvgpr_write "
        "outside the loop = 256 (the zeroing, removed later by zero_first_k). Measured at 8192^3: gemm-v0 "
        "(no pinning) keeps arch_vgpr at 256 and spills (220 scratch bytes; per loop iteration 45 scratch "
        "loads, whose vmcnt waits drain the LDS-DMAs, and 376 v_accvgpr read/write/mov); the modelled step is in the "
        "generated tables (model version and interval there). Fidelity of this first rung "
        "(gemm-v1) against FlyDSL daee90e4 at 8192^3, measured: 21 of 27 fingerprint metrics within 10 % "
        "(arch_vgpr 252 vs 250, hot loop 529 vs 495 instructions and 33 vs 34 s_waitcnt per 2 K steps, every "
        "LDS read and DMA issued between MFMAs as there: loop_max_lds_run 1 vs 1); outside: sgpr 53 vs 69 (-23 %, not explained yet), s_load 6 vs 8 (ours: 6 "
        "s_load_dwordx2; upstream also 2 s_load_dword), s_waitcnt 74 vs 64 (+16 %: all of it outside the "
        "loop, 41 vs 30: our unrolled head and tail steps wait per fragment too), s_barrier 8 vs 9 (one "
        "barrier fewer in our tail), insts_before_first_buffer_load 229 vs 199 (+15 %).",
        expects=(Expect("v_accvgpr_mov", "down", note="accumulator shuffling goes"),
                 Expect("arch_vgpr", "down", seed_before=256, note="seed: arch VGPRs hit 256 before")),
    ),
    Switch(
        "serpentine", "Serpentine MFMA order.", PR_990,
        claim="an issue order learnt from aiter's asm keeps operands hot.",
        mechanism="each 64x64 block is walked as 2x2 micro-blocks of MFMAs sharing one A-scale and one B-scale "
        "register (only op_sel changes); consecutive MFMAs alternately reuse the A or the B operand and the "
        "micro-block rows snake (left-right, then right-left). The same method of the seed "
        "(Mfma16x16x128Fp4.call) also changed where a block's loads go, so this switch carries that too: "
        "before it one load after each of the block's first MFMAs, DMAs then reads (daee90e4: 'one is "
        "issued after each MFMA'); with it the loads riffled and spread over all 32 MFMAs, load t after MFMA "
        "floor(32 t / n) (741f3d6d: slots = {(t * n_mfma) // len(thunks)}); see gemm.load_slots.",
        metric="mfma_operand_reuse (share of consecutive MFMA pairs with a common src0 or src1) rises; MFMA "
        "count unchanged.",
        expects=(Expect("mfma_operand_reuse", "up"),),
    ),
    Switch(
        "g2s_m0", "Cheap LDS-DMA addressing.", PR_990,
        claim="the wave-uniform LDS base is read-first-laned once, m0 is set once per batch of loads then "
        "advanced with s_add_u32, and the K offset rides in the scalar soffset so each lane's voffset is "
        "loop-invariant.",
        mechanism="the DMA becomes inline asm 's_mov_b32 m0 | s_add_u32 m0 ; buffer_load_dwordx4 ... offen lds' "
        "(4 loads per m0 batch, the 4 of one LDS half never split by another DMA) with per-stage m0 bases "
        "precomputed in SGPRs, instead of the compiler intrinsic. The K offset already rides in soffset "
        "before this switch (FlyDSL's kernel before PR #990 passes it so too).",
        metric="s_mov_b32 m0 per K step 16 -> 4, s_add_u32 m0 0 -> 12, v_readfirstlane one per load -> none in "
        "the loop (program: 67 -> 3 at 8192^3, upstream before: 67); the hot loop 526 -> 468 instructions "
        "at 8192^3 (2 K steps). Side effect: the compiler no longer sees the DMA, so its own waits for the VGPR "
        "scale loads count only those (vmcnt(3) .. vmcnt(0) before their first use) and drain the LDS-DMAs "
        "in flight (loop_s_waitcnt 33 -> 33; the modelled cost of those drains is in the generated tables; "
        "scale_prefetch removes those loads).",
        expects=(Expect("loop_s_mov_b32_m0", "down", note="per K step 16 -> 4 in our kernel"),
                 Expect("loop_v_readfirstlane", "down", note="one per LDS-DMA load -> 0"),
                 Expect("loop_s_add_u32_m0", "up", note="per K step 0 -> 12 in our kernel")),
    ),
    Switch(
        "scale_prefetch", "Scale gather through an LDS ring.", PR_990,
        claim="per K step the tile's scales are one buffer_load_dwordx4 ... lds per wave into a 4-slot LDS ring, "
        "three K steps ahead, carried to VGPRs one step ahead, issued in the MFMA shadow.",
        mechanism="replaces 8 buffer_load_dword (to VGPR) per wave per K step; the 8 ring reads (ds_read_b32) "
        "of step k+1 are issued among the MFMAs of block (0,1), the gather of step k+3 after the LDS-DMAs of "
        "block (1,0).",
        metric="buffer_load_dword in the loop -> 0, one more LDS-DMA per step, lds_bytes +16 KiB; loop_s_waitcnt "
        "stays (33 per 2 K steps at 8192^3 before and after: the per-fragment LDS waits dominate until b_carry).",
        expects=(Expect("loop_buffer_load_dword", "zero"), Expect("loop_ds_read_b32", "up")),
        requires=("g2s_m0",),
    ),
    Switch(
        "b_carry", "Carry the next step's second B operand.", PR_990,
        claim="reading the second B fragment of the next K step in the current step and carrying it across the "
        "loop edge lets the waits fold into s_waitcnt vmcnt(N) lgkmcnt(0) + s_barrier; hot-loop s_waitcnt "
        "68 -> 8 per 4 K steps.",
        mechanism="the B half-1 fragments of step k+1 are ds_read in step k (with its A half-0 and B half-0 "
        "ones, among the MFMAs of blocks (1,0)/(1,1), after the middle wait) and carried across the loop edge; "
        "step k reads only A half 1 (among block (0,0)'s MFMAs, used in blocks (1,0)/(1,1)), so nothing is "
        "consumed in the step that reads it and each step's two waits fold into s_waitcnt vmcnt(N) lgkmcnt(0) "
        "+ s_barrier. Without it (PR #990's before) B half 1 is read in block (0,0) and used in (0,1), and the "
        "top wait leaves the carried B half-0 reads in flight (lgkmcnt(8)), so the compiler waits "
        "lgkmcnt(n) per fragment. Either way every load is issued between MFMAs, where the seed puts them "
        "(gemm.load_slots; the former QUIET_TAIL knob, tuned under the model, is gone).",
        metric="loop_s_waitcnt_per_4k 66 -> 8 at 8192^3 (seed: 68 -> 8; FlyDSL daee90e4 34 per 2 K steps, "
        "ours 33); no ds_read run outside the MFMA stream before or after (longest run of loads without an "
        "MFMA: 1, as upstream after). Its modelled sign used to depend on QUIET_TAIL (a knob chosen under "
        "the model: -1.8 % .. +0.9 %); the loads now sit where FlyDSL 741f3d6d puts them (gemm.load_slots), "
        "and the modelled step with its interval is in the generated tables.",
        expects=(Expect("loop_s_waitcnt_per_4k", "down", seed_before=68, seed_after=8,
                        note="ours 66 -> 8 per 4 K steps (8192^3)"),),
        requires=("g2s_m0",),
    ),
    Switch(
        "k_unroll4", "Four K steps per loop iteration, two peeled.", PR_990,
        claim="the K loop body holds 4 K steps instead of 2 (unroll 4 when (K/256 - 4) % 4 == 0, else 2); "
        "K steps 0 and 1 run before the loop and the last two after it; a full unroll would not fit the "
        "32 KiB instruction cache.",
        mechanism="the loop runs steps [2, K/256 - 2) four at a time; so that every loop step issues the same "
        "loads, the scale gather of step k + 3 is issued even at k = K/256 - 3 (global offset clamped to "
        "the last step, into the ring slot nobody reads any more); the tail is two steps.",
        metric="loop_mfma 256 -> 512, mfma 768 -> 1024 at 8192^3 (upstream: 256 -> 512 and 512 -> 1024).",
        expects=(Expect("loop_mfma", "up", seed_before=256, seed_after=512, note="loop body 2 -> 4 K steps"),
                 Expect("mfma", "up", seed_before=512, seed_after=1024, note="2 peeled + 4 loop + 2 tail steps")),
    ),
    Switch(
        "zero_first_k", "Constant-zero first K step.", PR_990,
        claim="the accumulators are not zero-initialised: K step 0 runs with zero_acc, its first-K-half MFMAs "
        "write C = A*B directly.",
        mechanism="K step 0 is peeled (already so with k_unroll4) and its first-K-half MFMAs use the inline "
        "constant 0 as src2 instead of a zeroed AGPR accumulator.",
        metric="v_accvgpr_write -> 0 (upstream 256 -> 0; ours 1 -> 0 at 8192^3: after k_unroll4 the compiler "
        "already emits only 1 v_accvgpr_write for the zeroing, against 256 in gemm-v5).",
        expects=(Expect("v_accvgpr_write", "down", seed_before=256, seed_after=0,
                        note="the zeroing writes go (src2 = 0 instead), to 0"),),
        requires=("agpr_acc",),
    ),
    Switch(
        "wide_epilogue", "16-byte epilogue stores (the MFMA operand swap).", PR_990,
        claim="computing C^T by swapping the MFMA operands gives each lane four consecutive columns of one row; "
        "cvt_pk_bf16 + v_permlane16_swap pair two tiles so a lane holds 8 consecutive bf16 = 16 bytes for one "
        "buffer_store_dwordx4, interleaved into the tail MFMAs.",
        mechanism="operands and scales swapped in every MFMA; each 64x64 block is stored right after its last "
        "MFMA of the last K step.",
        metric="buffer_store_by_width {2: 256} -> {16: 32}; 64 v_permlane16_swap appear.",
        expects=(Expect("buffer_store_2B", "down", note="256 -> 0 in our kernel"),
                 Expect("buffer_store_16B", "up", note="0 -> 32 in our kernel")),
    ),
    Switch(
        "static_prologue", "Compile-time M and N.", PR_990,
        claim="with M, N and the wave count compile-time constants no integer division runs before the first "
        "load; instructions before the first buffer_load 272 -> 88.",
        mechanism="M and N are baked in, so the XCD tile order (divisions by powers of two of the non-negative "
        "workgroup id: shifts and masks, no signed fix-up) and buffer sizes fold to constants; the prologue "
        "computes only what the first scale gathers need, plus the tile-independent lane part of the DMA "
        "voffsets (as FlyDSL does after PR #990), before them, and the tile bases, m0 bases and ds_read "
        "offsets after them.",
        metric="insts_before_first_buffer_load 247 -> 73 at 8192^3 (upstream after: 65, +12 %); the "
        "integer-division idiom (v_cvt_f32_u32 + v_rcp_f32) disappears. Measured alternatives (with the "
        "earlier, non-interleaved K step): computing every tile address after the gathers gives 49 (-25 %), "
        "computing them all before gives 123. "
        "Fidelity of the last rung (all switches) against FlyDSL 741f3d6d at 8192^3, measured: 23 of 27 "
        "fingerprint metrics within 10 % (its hot loop too: 863 vs 850 instructions, 8 vs 8 s_waitcnt, one "
        "load per 1-3 MFMAs as there, loop_max_lds_run 1 vs 1); outside: sgpr 43 vs 59 (-27 %, not explained yet), s_waitcnt 26 vs 23 "
        "(+13 %; the loop's 8 match: the last step waits for its 8 A half-1 fragments one by one, upstream "
        "in 5 waits, and the compiler sinks the C pointer's s_load past the loop and waits for it there), "
        "insts_before_first_buffer_load 73 vs 65 (+12 %, inside this switch's 15 % target).",
        expects=(Expect("insts_before_first_buffer_load", "down", seed_before=272, seed_after=88),
                 Expect("int_div_idiom", "down")),
    ),
)

#: C, bf16 [M, N]: every element is one f32 dot product of K exactly representable products
#: (fp4 x fp4 x 2^e), rounded once to bf16. The reference sums in a different order (torch f32
#: matmul), so the two f32 sums differ by a few f32 ulps and may round to neighbouring bf16 values:
#: at most one bf16 ulp, plus the f32 summation error where the sum cancels (bounded absolutely).
OUTPUTS = (
    Output("C", "close", max_ulp=1, max_abs=2.0 ** -10, min_cosine=0.99999,
           why="one bf16 rounding of an f32 sum whose order differs from the reference's: <= 1 bf16 ulp, "
           "plus <= 2^-10 absolute where the sum cancels (f32 reordering error of K <= 16384 exact products)"),
)

BLOCK_M = BLOCK_N = 256
BLOCK_K = 256  # fp4 per K step
N_WAVES = 4


def _fam():
    return _family.of_module(__name__)


def min_k_for_loop(switches) -> int:
    """Smallest K at which the variant has a runtime K loop (smaller K, down to the
    256 minimum, run fully unrolled): 1024 without a peeled head, 1280 once scale_prefetch
    keeps the ring three steps ahead (or zero_first_k peels step 0), 1536 with both or with
    k_unroll4's two peeled steps (tests: ``test_min_k_for_loop_per_rung``)."""
    sw = _fam().check_switches(switches)
    k_iters = 1
    while True:
        lo, hi, _u = _Plan(sw, k_iters).loop_range(_head(sw, k_iters))
        if hi > lo:
            return k_iters * BLOCK_K
        k_iters += 1


def _head(sw, k_iters) -> int:
    """K steps emitted before the runtime loop: 2 with k_unroll4 (like PR #990), 1 when zero_first_k
    peels step 0 for its src2 = 0, else 0 (never more than there are)."""
    head = 2 if "k_unroll4" in sw else 1 if "zero_first_k" in sw else 0
    return min(head, k_iters)


def check_shape(M, N, K) -> dict:
    """Validate a shape before any compile (one clear ValueError); returns it as keywords."""
    for name, v in (("M", M), ("N", N), ("K", K)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise UsageError(f"{name} must be a positive integer, got {v!r}.")
    if M % BLOCK_M or N % BLOCK_N:
        raise UsageError(f"M and N must be multiples of {BLOCK_M} (one 256x256 tile per workgroup), got M={M}, N={N}.")
    if K % BLOCK_K:
        raise UsageError(f"K must be a multiple of {BLOCK_K} (one K step = 256 fp4), got K={K}.")
    return {"M": M, "N": N, "K": K}


# ============================================================================ kernel emission
#
# Everything below runs while FlyDSL traces the kernel.  The emission helpers live
# in a module-level class (not inside the @kernel body) so FlyDSL's AST rewriter
# leaves their Python loops alone: they unroll at trace time.

# FlyDSL takes seconds to import; it is loaded on the first build() so that reading the
# switch records stays cheap.  The names below are filled in by
# _load_flydsl() and used by the emission code at trace time only.
flyc = fx = ir = llvm = rocdl = T = C = const_expr = range_constexpr = None


def _load_flydsl():
    from .lazy import load_flydsl

    load_flydsl(globals())


#: Kernel symbol stem (FlyDSL names the symbol ``mxfp4_gemm_0``).
KERNEL_NAME = "mxfp4_gemm"
ARG_NAMES = ("A", "B", "C", "A_scale", "B_scale", "M", "N")
HALF = 16 * 1024  # one LDS half-tile: 128 rows x 128 bytes (A) or 16 blocks of 1 KiB (B)
STAGE = 4 * HALF  # A half 0, A half 1, B half 0, B half 1
RING_SLOTS = 4
RING_SLOT = 4096  # one K step of the tile's scales: A 2 KiB + B 2 KiB
N_XCD = 8
GROUP_M = 4
LOADS_PER_STEP = 16  # LDS-DMA instructions per wave per K step (8 A + 8 B)
#: Where a block's loads sit among its MFMAs, as the seed's ``Mfma16x16x128Fp4.call`` puts them
#: (read off the seed's source; nothing here was chosen by looking at the timing model):
#:
#: * ``"front"`` -- FlyDSL daee90e4 (before PR #990), ``kernels/gemm/fp4_gemm_4wave.py``,
#:   ``Mfma16x16x128Fp4.call``: "one is issued after each MFMA" (``if nth[0] < len(thunks):
#:   thunks[nth[0]]()`` after every MFMA), so load t follows MFMA t and a block with n loads leaves
#:   its last ``32 - n`` MFMAs without a load (20 for 12 loads: the compiled daee90e4 hot loop reads
#:   ``MG MG MG MG MR x8`` then 20 bare MFMAs).  The thunk list is the DMAs, then the reads
#:   (``_g2s_thunks(...) + _s2r_thunks(...)``), not riffled.
#: * ``"spread"`` -- FlyDSL 741f3d6d (PR #990), same method:
#:   ``slots = {(t * n_mfma) // len(thunks) for t in range(len(thunks))}``: load t follows MFMA
#:   ``floor(32 t / n)``, so ``31 - floor(32 (n - 1) / n)`` MFMAs at a block's end carry no load
#:   (2 for 12 or 14 loads, 1 for 20, 5 for 6).  The DMAs and reads are riffled (``_riffle``,
#:   "proportionally like aiter's asm"; here :func:`_spread`).
#:
#: This replaces the former ``QUIET_TAIL = 3`` (no load in a block's last 3 MFMAs, for every rung),
#: which had been chosen while looking at modelled numbers.  PR #990 changed both inside the one
#: method that also emits the MFMAs in serpentine order (``order = self._order()``), so the
#: ``serpentine`` switch (the in-wave MFMA emission order) carries it: rungs without serpentine
#: use ``"front"``, rungs with it ``"spread"``.
INTERLEAVE_DOC = "front before PR #990 (daee90e4 Mfma16x16x128Fp4.call), spread after (741f3d6d slots)"


def interleave_rule(sw) -> str:
    """``"front"`` or ``"spread"`` (see :data:`INTERLEAVE_DOC`) for switch set ``sw``."""
    return "spread" if "serpentine" in sw else "front"


def load_slots(n_thunks: int, n_mfma: int, rule: str) -> list:
    """The MFMA index (0-based) after which each of ``n_thunks`` loads is issued, by the seed's rule."""
    if rule == "front":
        return [min(t, n_mfma - 1) for t in range(n_thunks)]
    if rule == "spread":
        return [(t * n_mfma) // n_thunks for t in range(n_thunks)]
    raise ValueError(f"unknown interleave rule {rule!r}")


def _mfma_order(serpentine: bool):
    """(ti, tj) visiting order of a 4x4 block of 16x16 tiles."""
    if not serpentine:
        return [(ti, tj) for ti in range(4) for tj in range(4)]
    order = []
    for pi in range(2):
        right = pi % 2 == 0
        for pj in ([0, 1] if right else [1, 0]):
            # Enter on the side we came from, so the hop into this micro-block shares an operand.
            cols = (0, 1) if right else (1, 0)
            walk = [(0, cols[0]), (1, cols[0]), (1, cols[1]), (0, cols[1])]
            order += [(2 * pi + a, 2 * pj + b) for a, b in walk]
    return order


def _asm(result_type, operands, text, constraints):
    return llvm.inline_asm(result_type, [C.raw(o) for o in operands], text, constraints, has_side_effects=True)


class _Emitter:
    """Emits one GEMM kernel body for a fixed switch set and K (and M, N if static)."""

    def __init__(self, sw, M, N, K):
        self.sw = sw
        self.K = K
        self.KB = K // 2  # bytes per row of A / B
        self.KI = K // BLOCK_K  # K steps
        self.K0 = K // 128  # 128-K blocks per B row
        self.K1 = K // 256  # 256-K chunks per scale row
        self.static_mn = (M, N) if "static_prologue" in sw else None

    # ------------------------------------------------------------------ setup
    def setup(self, A, B, Cout, A_scale, B_scale, c_m, c_n, lds):
        sw = self.sw
        if self.static_mn is not None:
            c_m, c_n = self.static_mn
        self.c_n = c_n
        tid = fx.thread_idx.x
        self.lane = tid % 64
        self.wave = fx.Int32(C.uniform(tid // 64))
        # The wave id as the compiler sees it in a VGPR (divergent): LDS-DMA destinations built from it
        # need one v_readfirstlane per load for m0 (FlyDSL's kernel before PR #990; g2s_m0 removes them).
        self.wave_v = fx.Int32(tid // 64)
        self.wi = self.wave // 2
        self.wj = self.wave % 2
        self.tile_i, self.tile_j = tile_order(fx.block_idx.x, _div(c_m, BLOCK_M), _div(c_n, BLOCK_N))
        self.a_rsrc = C.buffer_rsrc(A, _i64(c_m * self.KB))
        self.b_rsrc = C.buffer_rsrc(B, _i64(c_n * self.KB))
        self.sa_rsrc = C.buffer_rsrc(A_scale, _i64(c_m * (self.K // 32)))
        self.sb_rsrc = C.buffer_rsrc(B_scale, _i64(c_n * (self.K // 32)))
        self.c_rsrc = C.buffer_rsrc(Cout, _i64(c_m * c_n * 2))
        self.lds = fx.Int32(C.uniform(C.lds_addr(lds.tiles)))
        if "scale_prefetch" in sw:
            self.ring = fx.Int32(C.uniform(C.lds_addr(lds.ring)))
            self.ring_wave = fx.Int32(C.uniform(self.ring + self.wave * 1024))
        if self.static_mn is None:
            self.m0_bases()
        lane = self.lane
        if "scale_prefetch" in sw:
            is_a = self.wave < 2
            rp = (self.wave % 2) * 4 + lane // 16
            tile_x = fx.Int32(fx.arith.select(is_a, self.tile_i, self.tile_j))
            self.g_voff = (tile_x * 8 + rp) * (self.K1 * 256) + (lane % 16) * 16
            self.g_rsrc = llvm.SelectOp(C.raw(is_a), C.raw(self.sa_rsrc), C.raw(self.sb_rsrc)).result
        if self.static_mn is None:
            self.dma_addresses()
            self.read_addresses()
        else:
            self.dma_lane_offsets()

    def m0_bases(self):
        if "g2s_m0" in self.sw:
            # The wave's m0 for each (stage, batch), read-first-laned once here, outside the K loop.
            self.m0_base = [[fx.Int32(C.uniform(self.lds + p * STAGE + b * HALF + self.wave * 1024)) for b in range(4)]
                            for p in range(2)]

    def dma_lane_offsets(self):
        """static_prologue: the tile-independent part of the DMA voffsets (computed before the first
        load, like FlyDSL's lane offsets after PR #990); :meth:`dma_addresses` adds the tile bases."""
        lane = self.lane
        chunk = (lane % 8) ^ (lane // 8)
        self.a_lane_off, self.b_lane_off = {}, {}
        for r in range(4):
            q = self.wave + 4 * r
            self.a_lane_off[r] = (q * 8 + lane // 8) * self.KB + chunk * 16
            self.b_lane_off[r] = ((q // 2) * self.K0 + q % 2) * 1024 + lane * 16

    def dma_addresses(self):
        """Per-lane DMA voffsets of the A/B tiles."""
        lane = self.lane
        if self.static_mn is not None:
            self.a_voff = {(h, r): self.a_lane_off[r] + (self.tile_i * BLOCK_M + h * 128) * self.KB
                           for h in range(2) for r in range(4)}
            self.b_voff = {(v, r): self.b_lane_off[r] + (self.tile_j * 16 + v * 8) * self.K0 * 1024
                           for v in range(2) for r in range(4)}
            return
        # A DMA: instruction q of half h moves rows 8q..8q+7 (128 B each); lane -> row 8q + lane//8,
        # LDS slot lane%8, which holds global 16-byte chunk (lane%8) ^ (lane//8) (the XOR swizzle).
        chunk = (lane % 8) ^ (lane // 8)
        self.a_voff = {}
        self.b_voff = {}
        for r in range(4):
            q = self.wave + 4 * r
            for h in range(2):
                row = self.tile_i * BLOCK_M + h * 128 + q * 8 + lane // 8
                self.a_voff[h, r] = row * self.KB + chunk * 16
            for v in range(2):
                n0 = self.tile_j * 16 + v * 8 + q // 2
                self.b_voff[v, r] = (n0 * self.K0 + q % 2) * 1024 + lane * 16

    def read_addresses(self):
        """Per-lane ds_read offsets of the A/B fragments. With static_prologue they are computed after
        the prologue's scale gathers (:meth:`_Steps.prologue`), as FlyDSL's kernel does after PR #990."""
        lane = self.lane
        # ds_read lane offsets of A (per 128-K half ksub) and B.
        i, g = lane % 16, lane // 16
        self.a_lane = [self.lds + self.wi * 8192 + i * 128 + ((g ^ (i % 8)) ^ (4 * ks)) * 16 for ks in range(2)]
        self.b_lane = self.lds + 2 * HALF + self.wj * 8192 + lane * 16

    # ------------------------------------------------------------------ scales
    def scale_addrs(self, k):
        """(rsrc, voffset) of the 8 buffer_load_dword of this wave's A and B scale words of K step k
        (no ring: they go straight to VGPRs)."""
        out = []
        for rsrc, tile, w in ((self.sa_rsrc, self.tile_i, self.wi), (self.sb_rsrc, self.tile_j, self.wj)):
            for hv in range(2):
                for p in range(2):
                    r1 = tile * 8 + hv * 4 + w * 2 + p
                    out.append((rsrc, ((r1 * self.K1) * 64 + self.lane) * 4 + fx.Int32(k) * 256))
        return out

    def load_scales_vgpr(self, k):
        """8 buffer_load_dword: this wave's A and B scale words of K step k (no LDS)."""
        return [C.buffer_load(rsrc, voff, 1) for rsrc, voff in self.scale_addrs(k)]

    def gather_scales(self, k):
        """One buffer_load_dwordx4 ... lds per wave: a quarter of the tile's scales for step k -> ring."""
        m0 = self.ring_wave + (fx.Int32(k) % RING_SLOTS) * RING_SLOT
        # k_unroll4's dummy gather (k = K/256) reads the last step's scales into a slot no one reads.
        last = self.KI - 1
        kc = min(k, last) if isinstance(k, int) else _select(fx.Int32(k) < last, k, last)
        soff = C.uniform(fx.Int32(kc) * 256)
        _asm(None, [m0, self.g_voff, self.g_rsrc, soff],
             "s_mov_b32 m0, $0\n\tbuffer_load_dwordx4 $1, $2, $3 offen lds", "s,v,s,s,~{m0}")

    def ring_words(self, k):
        """LDS addresses of the 8 scale words of step k in the ring (same order as scale_addrs)."""
        slot = self.ring + (fx.Int32(k) % RING_SLOTS) * RING_SLOT + self.lane * 4
        return [slot + base + (hv * 4 + w * 2 + p) * 256
                for base, w in ((0, self.wi), (2048, self.wj)) for hv in range(2) for p in range(2)]

    def read_scales_ring(self, k):
        """8 ds_read_b32 of step k's scale words from the ring."""
        return [C.ds_read_b32(a) for a in self.ring_words(k)]

    # ------------------------------------------------------------------ MFMA
    def mfma(self, a, b, acc, sa, sb, opa, opb):
        """acc += A-tile . B-tile^T (or its transpose with wide_epilogue) with fp4 scales."""
        if "wide_epilogue" in self.sw:  # C^T = B . A^T: swap operands and their scales
            a, b, sa, sb, opa, opb = b, a, sb, sa, opb, opa
        if "agpr_acc" not in self.sw:
            return C.mfma_scale_fp4(a, b, acc if acc is not None else C.zeros_f32x4(), sa, sb, opa, opb)
        mods = f"op_sel:[{opa & 1},{opb & 1},0] op_sel_hi:[{opa >> 1},{opb >> 1},0] cbsz:4 blgp:4"
        res = C.vec_type(4, T.f32)
        if acc is None:  # zero_first_k, first K half: src2 is the inline constant 0, nothing to zero first
            return _asm(res, [a, b, sa, sb], f"v_mfma_scale_f32_16x16x128_f8f6f4 $0, $1, $2, 0, $3, $4 {mods}",
                        "=a,v,v,v,v")
        return _asm(res, [a, b, sa, sb, acc], f"v_mfma_scale_f32_16x16x128_f8f6f4 $0, $1, $2, $0, $3, $4 {mods}",
                    "=a,v,v,v,v,0")

    def block(self, acc, h, v, af, bf, scales, first, thunks=()):
        """32 MFMAs of 64x64 block (h, v): both 128-K halves, tiles in the switch's order.  ``thunks``
        (one load instruction each) are issued right after the MFMAs :func:`load_slots` names, by the
        seed's rule for this rung (:func:`interleave_rule`: one per MFMA from the first before PR #990,
        evenly spread over all 32 after it)."""
        sa = scales[0:4]
        sb = scales[4:8]
        thunks = list(thunks)
        order = _mfma_order("serpentine" in self.sw)
        n_mfma = 2 * len(order)
        after = {}
        for t, slot in enumerate(load_slots(len(thunks), n_mfma, interleave_rule(self.sw))):
            after.setdefault(slot, []).append(thunks[t])
        m = 0
        for ks in range(2):
            for ti, tj in order:
                idx = ((h * 2 + v) * 4 + ti) * 4 + tj
                acc[idx] = self.mfma(af[ti][ks], bf[tj][ks], None if (first and ks == 0) else acc[idx],
                                     sa[h * 2 + ti // 2], sb[v * 2 + tj // 2], 2 * ks + ti % 2, 2 * ks + tj % 2)
                for th in after.get(m, ()):
                    th()
                m += 1

    # ------------------------------------------------------------------ epilogue
    def store_block(self, acc, h, v):
        row0 = self.tile_i * BLOCK_M + h * 128 + self.wi * 64
        col0 = self.tile_j * BLOCK_N + v * 128 + self.wj * 64
        i, g = self.lane % 16, self.lane // 16
        n = self.c_n
        for ti in range(4):
            if "wide_epilogue" in self.sw:
                for tj in range(0, 4, 2):
                    lo = _pk_bf16(acc[((h * 2 + v) * 4 + ti) * 4 + tj])
                    hi = _pk_bf16(acc[((h * 2 + v) * 4 + ti) * 4 + tj + 1])
                    # Even 16-lane rows keep their own tile-tj dwords and receive the odd row's;
                    # odd rows end with tile tj+1: 8 consecutive bf16 per lane.
                    w0, w2 = _permlane16_swap(lo[0], hi[0])
                    w1, w3 = _permlane16_swap(lo[1], hi[1])
                    vec = fx.Vector.from_elements([fx.Int32(w) for w in (w0, w1, w2, w3)], fx.Int32)
                    row = row0 + ti * 16 + i
                    col = col0 + (tj + g % 2) * 16 + (g // 2) * 8
                    C.buffer_store(vec, self.c_rsrc, (row * n + col) * 2)
            else:
                for tj in range(4):
                    vals = fx.arith.trunc_f(C.vec_type(4, T.bf16), C.raw(acc[((h * 2 + v) * 4 + ti) * 4 + tj]))
                    for j in range(4):
                        e = llvm.extractelement(C.raw(vals), C.i32(j))
                        bits = llvm.BitcastOp(T.i16, e).result
                        row = row0 + ti * 16 + 4 * g + j
                        col = col0 + tj * 16 + i
                        C.buffer_store(bits, self.c_rsrc, (row * n + col) * 2)


def _pk_bf16(acc4):
    """Two i32 words of packed bf16: (acc[0], acc[1]) and (acc[2], acc[3])."""
    v = fx.arith.trunc_f(C.vec_type(4, T.bf16), C.raw(acc4))
    pair = C.vec_type(2, T.i32)
    w = llvm.BitcastOp(pair, C.raw(v)).result
    return [llvm.extractelement(w, C.i32(n)) for n in range(2)]


def _permlane16_swap(a, b):
    res = rocdl.permlane16_swap(ir.Type.parse("!llvm.struct<(i32, i32)>"), C.raw(a), C.raw(b), False, False)
    return llvm.extractvalue(T.i32, res, [0]), llvm.extractvalue(T.i32, res, [1])


def _select(cond, a, b):
    """``a if cond else b``, at trace time when ``cond`` is a Python bool, else as an
    ``arith.select`` on i32 values."""
    if isinstance(cond, bool):
        return a if cond else b
    return fx.Int32(fx.arith.select(cond, fx.Int32(a), fx.Int32(b)))


def _div(a, b):
    return a // b if isinstance(a, int) else fx.Int32(a) // b


def _i64(v):
    return v if isinstance(v, int) else fx.Int64(v)


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
    w = _select(num % N_XCD == 0, remap, wg)
    per_group = GROUP_M * n_tiles
    group = div(w, per_group)
    first = group * GROUP_M
    left = m_tiles - first
    size = GROUP_M if isinstance(m_tiles, int) and m_tiles % GROUP_M == 0 else _select(left < GROUP_M, left, GROUP_M)
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


# ============================================================================ schedule


def _wait(vmcnt=None, lgkmcnt=None, barrier=True):
    rocdl.sched_barrier(0)
    fx.rocdl.s_waitcnt(vmcnt=vmcnt, lgkmcnt=lgkmcnt)
    if barrier:
        rocdl.s_barrier()
    rocdl.sched_barrier(0)


#: The four LDS halves of a stage in the order a step refills them (A0 in block (0,0), B0 in
#: (0,1), B1 in (1,0), A1 in (1,1)); each is 4 LDS-DMA instructions per wave.
HALVES = ("A0", "B0", "B1", "A1")


def _spread(first, second):
    """Merge two unit lists so that the shorter one's units sit evenly among the longer one's
    (4 DMAs among 8 reads: D R R D R R ...); order inside each list is kept."""
    if len(first) < len(second):
        first, second = second, first
    if not second:
        return list(first)
    out, j = [], 0
    for i, u in enumerate(first):
        # put second[j] before first[i] once i has passed j's share of the first list
        while j < len(second) and j * len(first) <= i * len(second):
            out.append(second[j])
            j += 1
        out.append(u)
    return out + second[j:]


class _Plan:
    """The issue schedule of every K step, and how many loads may still be in flight at each wait.

    One step is two waits and four 64x64 blocks of 32 MFMAs; each block carries a list of *units*
    (one load instruction each) that the emitter issues one after every 1-3 MFMAs (:meth:`segments`).
    vmcnt counts this wave's vector-memory instructions in issue order, so a wait for group X may
    leave in flight exactly the instructions issued after X's last one.  The plan replays the units
    in issue order (per concrete K step) and reads the counts off it, so moving a load between waits
    moves its count with it.  Groups: ``(half, k)`` (4 LDS-DMA of one LDS half of step k's tiles),
    ``("G", k)`` (the scale gather of step k, 1), ``("S", k)`` (8 scale loads to VGPRs, no ring).
    """

    def __init__(self, sw, KI):
        self.sw, self.KI = sw, KI
        self.ring = "scale_prefetch" in sw
        self.carry_b = "b_carry" in sw
        self.unroll4 = "k_unroll4" in sw
        self.events = []  # one (kind, step) per vector-memory instruction, in issue order
        self.waits = {}
        self._prologue()
        for k in range(KI):
            self._step(k)

    # ---------------------------------------------------------------- what a step issues
    def gathers(self, k) -> bool:
        """Whether step k gathers the scales of step k + 3 (with k_unroll4 every step that refills a
        stage does, the one past the end being a dummy)."""
        return self.ring and (k + 3 < self.KI or (self.unroll4 and k + 2 < self.KI))

    def issues(self, k):
        """Groups issued inside step k: [(kind, step, n_instructions)] in the order their first
        instruction is issued (read off :meth:`segments`)."""
        out = {}
        for seg in self.segments(k):
            if seg[0] not in ("block", "issue"):
                continue
            for u in seg[2]:
                g = {"dma": lambda: (u[1], k + u[2]), "gather": lambda: ("G", k + u[1]),
                     "scale": lambda: ("S", k + u[1])}.get(u[0])
                if g is not None:
                    key = g()
                    out[key] = out.get(key, 0) + 1
        return [(kind, step, n) for (kind, step), n in out.items()]

    def top_lgkmcnt(self) -> int:
        """LDS reads the top wait of a step may leave in flight: with b_carry none (one folded
        lgkmcnt(0)); without it the previous step's last 8 reads (the B0 fragments this step starts
        with, which the compiler then waits for fragment by fragment, as in FlyDSL's kernel before
        PR #990), so only A0 is released at the top and B0 at the middle wait."""
        return 0 if self.carry_b else 8

    def segments(self, k):
        """Step k as ``[("issue", tag, units) | ("wait", tag, needs) | ("block", (h, v), units)]`` in
        issue order (``issue``: loads outside any block, the no-ring scale loads at the step's top).

        Units: ``("dma", half, rel, r)`` (LDS-DMA instruction r of that half of step k+rel, into the
        stage step k reads), ``("read", half, rel, ks, t)`` (the ds_read_b128 of fragment (t, ks) of
        step k+rel's half), ``("ring", rel, n)`` (ds_read_b32 n of step k+rel's scales),
        ``("scale", rel, n)`` (buffer_load_dword n of them, no ring) and ``("gather", rel)``.

        Stage k % 2 is released in two parts.  With b_carry the top wait (lgkmcnt(0) + s_barrier)
        follows the previous step's reads of A0/B0/B1, so blocks (0,0)/(0,1) refill A0/B0; the middle
        wait follows this step's reads of A1, so blocks (1,0)/(1,1) refill B1/A1.  Without it the top
        wait (lgkmcnt(8), :meth:`top_lgkmcnt`) releases only A0 (refilled in block (0,0)) and the middle
        one B0, B1 and A1 (refilled in (1,0)/(1,1)).  The next step's A0/B0 (and B1) fragments are read
        from the other stage after the middle wait.
        """
        KI, carry = self.KI, self.carry_b
        # the seed's thunk order: riffled after PR #990 (_riffle), the DMAs then the reads before it
        mix = _spread if interleave_rule(self.sw) == "spread" else (lambda a, b: list(a) + list(b))
        refill = k + 2 < KI
        nxt = k + 1 < KI

        def dma(half):
            return [("dma", half, 2, r) for r in range(4)] if refill else []

        def read(half, rel):
            return [("read", half, rel, ks, t) for ks in range(2) for t in range(4)]

        if self.ring:
            scales = [("ring", 1, n) for n in range(8)] if nxt else []
        else:
            scales = [("scale", 1, n) for n in range(8)] if nxt else []
        gather = [("gather", 3)] if self.gathers(k) else []
        later = ["A0", "B0", "B1"] if carry else ["A0", "B0"]  # the next step's, read here
        top = [("A1", k)] + ([("G", k + 1)] if self.ring and nxt else [])
        segs = []
        if not self.ring and scales:
            # FlyDSL daee90e4 (no LDS ring): `_one_step` starts with `_load_scales_rt(kc_i + 1)`, the 8
            # VGPR scale loads of the next step, before its first wait_barrier (compiled: 8
            # buffer_load_dword ahead of the step's first s_barrier); scale_prefetch moves them into
            # the MFMA shadow as ring reads
            segs.append(("issue", "scales", scales))
            scales = []
        segs.append(("wait", "top", top))
        if carry:
            segs.append(("block", (0, 0), mix(dma("A0"), read("A1", 0))))
            segs.append(("block", (0, 1), mix(dma("B0"), scales)))
        else:  # B1 read in block (0,0)'s shadow and consumed in (0,1); A1 in (0,1)'s, consumed after the wait
            segs.append(("block", (0, 0), mix(dma("A0"), read("B1", 0))))
            segs.append(("block", (0, 1), read("A1", 0) + scales))
        nreads = [u for h in later for u in read(h, 1)] if nxt else []
        if refill or nreads:
            segs.append(("wait", "mid", [(h, k + 1) for h in later] if nxt else []))
        ra = [u for u in nreads if u[1] == "A0"]
        rb = [u for u in nreads if u[1] != "A0"]
        # Without b_carry B0 was read at the end of the previous step: the middle wait releases it.
        # The halves stay whole (g2s_m0 advances m0 from one instruction of a half to the next).
        refills = dma("B1") if carry else dma("B0") + dma("B1")
        segs.append(("block", (1, 0), mix(refills, ra) + gather))
        segs.append(("block", (1, 1), mix(dma("A1"), rb)))
        return segs

    # ---------------------------------------------------------------- replay
    def _count_after(self, need):
        pos = max((i for i, e in enumerate(self.events) if e in need), default=None)
        if pos is None:
            return None
        return len(self.events) - pos - 1

    def _units(self, k, units):
        for u in units:
            if u[0] == "dma":
                self.events.append((u[1], k + u[2]))
            elif u[0] == "gather":
                self.events.append(("G", k + u[1]))
            elif u[0] == "scale":
                self.events.append(("S", k + u[1]))

    def _prologue(self):
        KI = self.KI
        if self.ring:
            self.events += [("G", k) for k in range(min(3, KI))]
        else:
            self.events += [("S", 0)] * 8
        for k in range(min(2, KI)):
            self.events += [(h, k) for h in HALVES for _ in range(4)]
        halves = ["A0", "B0", "B1"] if self.carry_b else ["A0", "B0"]
        need = [(h, 0) for h in halves] + ([("G", 0)] if self.ring else [])
        self.waits["prologue"] = self._count_after(need)

    def _step(self, k):
        for seg in self.segments(k):
            if seg[0] == "wait":
                self.waits[seg[1], k] = self._count_after(seg[2])
            else:
                self._units(k, seg[2])

    def loop_range(self, head):
        """``(lo, hi, unroll)``: steps [lo, hi) run by the runtime loop, ``unroll`` per iteration (4 with
        k_unroll4 when the loop steps divide by 4, else 2); the rest is unrolled."""
        # steps < last issue every kind of load (with k_unroll4 the gather past the end is a dummy)
        last = self.KI - (3 if self.ring and not self.unroll4 else 2)
        n = max(0, last - head)
        unroll = 4 if self.unroll4 and n % 4 == 0 and n else 2
        return head, head + unroll * (n // unroll), unroll

    def loop_wait(self, kind, ks):
        """The wait used in the loop body: the smallest count over the steps it stands for."""
        vals = [self.waits[kind, k] for k in ks if self.waits.get((kind, k)) is not None]
        return min(vals) if vals else None


class _Steps(_Emitter):
    """The K pipeline: prologue, one K step (used both unrolled and as the loop body), tail."""

    def __init__(self, sw, M, N, K):
        super().__init__(sw, M, N, K)
        self.plan = _Plan(sw, self.KI)
        self.head = _head(sw, self.KI)
        self.lo, self.hi, self.unroll = self.plan.loop_range(self.head)
        # The compiler may move compiler-visible loads and MFMAs past each other; with inline-asm
        # MFMAs and DMAs (side effects: nothing crosses them) the issue order is the emission order.
        self.pin = not ("agpr_acc" in sw and "g2s_m0" in sw)
        self.scopes = None  # set at trace time (needs an MLIR context) when the DMA is compiler-visible

    def alias_scopes(self):
        """Without g2s_m0 the compiler sees the LDS-DMA and, not knowing where it writes, waits
        vmcnt(0) before any ds_read after one; one alias scope per LDS half-buffer (2 stages x 4)
        lets it wait only for DMAs into the buffer read (FlyDSL's kernel tags its loads likewise)."""
        if "g2s_m0" not in self.sw:
            names = [f"s{p}{h}" for p in range(2) for h in HALVES]
            attrs = C.lds_alias_scopes("mxfp4_gemm.lds", names)
            self.scopes = {(p, h): attrs[f"s{p}{h}"] for p in range(2) for h in HALVES}

    def loop_body(self, kk, state):
        """One loop iteration: ``unroll`` K steps from the loop's i32 step ``kk``."""
        lo, hi, u = self.lo, self.hi, self.unroll
        acc, carry = self.unpack(state)
        for j in range(u):
            acc, carry = self.step(kk + j, (lo + j) % 2, acc, carry, lo + j, list(range(lo + j, hi, u)))
        return self.pack(acc, carry)

    # state = 64 accumulators + 8 scale words + the next step's A0, B0 (and B1 with b_carry) fragments
    def pack(self, acc, carry):
        return [C.raw(x) for x in acc] + [C.raw(x) for x in carry]

    def unpack(self, state):
        state = list(state)
        return state[:64], state[64:]

    def _carried(self):
        return ["A0", "B0", "B1"] if "b_carry" in self.sw else ["A0", "B0"]

    def prologue(self):
        sw = self.sw
        if "scale_prefetch" in sw:
            for k in range(min(3, self.KI)):
                self.gather_scales(k)
            scales = None
        else:
            scales = self.load_scales_vgpr(0)
        if self.static_mn is not None:  # the tile addresses once the scale gathers are on their way
            self.m0_bases()
            self.dma_addresses()
            self.read_addresses()
        for k in range(min(2, self.KI)):
            rocdl.sched_barrier(0)
            for half in HALVES:
                for r in range(4):
                    self.dma_one(k, k % 2, half, r, {})
        rocdl.sched_barrier(0)
        _wait(vmcnt=self.plan.waits["prologue"])
        if scales is None:
            scales = self.read_scales_ring(0)
        carry = list(scales)
        for half in self._carried():  # in this order: a step's top wait counts on B0 (B1) being read last
            rocdl.sched_barrier(0)
            carry += self.read_half(0, half)
        rocdl.sched_barrier(0)
        if "zero_first_k" in sw:
            acc = [None] * 64  # step 0's first K half writes them (src2 = 0)
        else:
            acc = [C.zeros_f32x4() for _ in range(64)]
        return acc, carry

    def read_half(self, parity, half):
        """The 8 fragments of one half, flat in the carry's order (tile t, then K half ks)."""
        return [self.read_one(parity, half, ks, t) for t in range(4) for ks in range(2)]

    def read_one(self, parity, half, ks, t):
        """ds_read_b128 of fragment (tile t, K half ks) of one LDS half of stage ``parity``."""
        st = parity * STAGE + int(half[1]) * HALF
        if half[0] == "A":
            addr = self.a_lane[ks] + st + t * 2048
        else:
            addr = self.b_lane + st + (t * 2 + ks) * 1024
        if self.scopes is None:
            return C.ds_read_b128(addr)
        return C.ds_read_b128_scoped(addr, self.scopes, (parity, half))

    def dma_one(self, k, parity, half, r, cache):
        """LDS-DMA instruction r (of 4) of one half of step k's tiles into stage ``parity``."""
        is_a, hv = half[0] == "A", int(half[1])
        key = ("soff", is_a)  # the K offset rides in the scalar soffset (FlyDSL's kernel too, before #990)
        if key not in cache:
            cache[key] = C.uniform(fx.Int32(k) * (128 if is_a else 2048))
        if "g2s_m0" in self.sw:
            voff = self.a_voff[hv, r] if is_a else self.b_voff[hv, r]
            rsrc = self.a_rsrc if is_a else self.b_rsrc
            if r == 0:
                m0 = self.m0_base[parity][hv if is_a else 2 + hv]
                _asm(None, [m0, voff, rsrc, cache[key]],
                     "s_mov_b32 m0, $0\n\tbuffer_load_dwordx4 $1, $2, $3 offen lds", "s,v,s,s,~{m0}")
            else:  # the 4 instructions of a half are 4 x 1 KiB apart in LDS
                # s_add_u32 writes SCC: without the clobber the compiler keeps the loop counter's carry
                # in SCC across it (s_add_u32 ... s_addc_u32 around an interleaved DMA) and the loop exits.
                _asm(None, [voff, rsrc, cache[key]],
                     "s_add_u32 m0, m0, 4096\n\tbuffer_load_dwordx4 $0, $1, $2 offen lds", "v,s,s,~{m0},~{scc}")
            return
        stage = self.lds + parity * STAGE
        if is_a:
            dst = stage + hv * HALF + (self.wave_v + 4 * r) * 1024
            rsrc, voff = self.a_rsrc, self.a_voff[hv, r]
        else:
            dst = stage + (2 + hv) * HALF + (self.wave_v + 4 * r) * 1024
            rsrc, voff = self.b_rsrc, self.b_voff[hv, r]
        C.lds_dma_dwordx4_scoped(rsrc, dst, voff, self.scopes, (parity, half), soffset=cache[key])

    def step(self, k, parity, acc, carry, plan_k, loop_ks=None):
        """Emit K step ``k`` (int, or the loop's i32 value) reading LDS stage ``parity``.

        ``plan_k`` is a concrete step number whose issue pattern (:meth:`_Plan.segments`) this
        emission follows; ``loop_ks`` lists the concrete steps a loop-body emission stands for (waits
        use the most conservative of them).
        """
        sw, plan = self.sw, self.plan
        ks_list = loop_ks or [plan_k]
        first = acc[0] is None
        scales = carry[:8]
        frags = {}  # (half, rel) -> [t][ks]
        for n, half in enumerate(self._carried()):
            flat = carry[8 + 8 * n: 16 + 8 * n]
            frags[half, 0] = [[flat[2 * t], flat[2 * t + 1]] for t in range(4)]
        new_scales = [None] * 8
        cache = {}

        def unit(u):
            kind = u[0]
            if kind == "dma":
                self.dma_one(k + u[2], parity, u[1], u[3], cache)
            elif kind == "read":
                _, half, rel, ks, t = u
                frags.setdefault((half, rel), [[None, None] for _ in range(4)])
                frags[half, rel][t][ks] = self.read_one((plan_k + rel) % 2, half, ks, t)
            elif kind == "ring":
                if "ring" not in cache:
                    cache["ring"] = self.ring_words(k + u[1])
                new_scales[u[2]] = C.ds_read_b32(cache["ring"][u[2]])
            elif kind == "scale":
                if "scale" not in cache:
                    cache["scale"] = self.scale_addrs(k + u[1])
                rsrc, voff = cache["scale"][u[2]]
                new_scales[u[2]] = C.buffer_load(rsrc, voff, 1)
            else:
                self.gather_scales(k + u[1])
            if self.pin:
                rocdl.sched_barrier(0)

        last = plan_k == self.KI - 1
        wide_tail = last and "wide_epilogue" in sw
        acc = list(acc)
        for seg in plan.segments(plan_k):
            if seg[0] == "wait":
                lgkm = plan.top_lgkmcnt() if seg[1] == "top" else 0
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
            if wide_tail:
                self.store_block(acc, h, v)
        if last:
            if not wide_tail:
                for h in range(2):
                    for v in range(2):
                        self.store_block(acc, h, v)
            return acc, []
        carry = list(new_scales)
        for half in self._carried():
            carry += [f for t in frags[half, 1] for f in t]
        return acc, carry


def build(M: int, N: int, K: int, **switches):
    """The ``@flyc.jit`` launcher of the GEMM for the given shape and switches.

    ``switches`` are the names in :data:`SWITCHES` mapped to booleans (missing =
    off).  M and N are only baked in with ``static_prologue``; otherwise the launcher
    passes them at run time and they merely pick the grid here.
    """
    check_shape(M, N, K)
    sw = _fam().switch_kwargs(switches)
    _load_flydsl()
    layout = _Steps(sw, M, N, K)  # trace-free: only to know the loop's range here
    lo, hi, unroll = layout.lo, layout.hi, layout.unroll
    KI = K // BLOCK_K

    if "scale_prefetch" in sw:

        @fx.struct
        class Shared:
            tiles: fx.Array[fx.Int8, 2 * STAGE, 16]
            ring: fx.Array[fx.Int8, RING_SLOTS * RING_SLOT, 16]

    else:

        @fx.struct
        class Shared:
            tiles: fx.Array[fx.Int8, 2 * STAGE, 16]

    @flyc.kernel
    def mxfp4_gemm(
        A: fx.Tensor, B: fx.Tensor, Cout: fx.Tensor, A_scale: fx.Tensor, B_scale: fx.Tensor,
        c_m: fx.Int32, c_n: fx.Int32,
    ):
        lds = fx.SharedAllocator().allocate(Shared).peek()
        em = _Steps(sw, M, N, K)
        em.setup(A, B, Cout, A_scale, B_scale, c_m, c_n, lds)
        em.alias_scopes()
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


def make_inputs(M: int, N: int, K: int, seed: int = 0, lazy: bool = False) -> dict:
    """Random MXFP4 GEMM inputs in the kernel's layouts (keys = ARG_NAMES), plus the
    unshuffled ``A_q, B_q, A_s, B_s`` for references.  Uses ``mxfp4_ablation.reference``
    when present, else quantises Gaussian data with ``formats``.

    ``lazy=True`` (for a timing run): every buffer is a ``meta`` tensor (shape and dtype, no storage)
    that the timing run maps as zeros, and there is no reference.  A dense GEMM's timing does not
    depend on its data (no data-dependent branch, address or EXEC; ``tests/test_modelled.py`` checks
    that the modelled cycles on random inputs and on these are the same)."""
    import torch

    from mxfp4_ablation import formats

    check_shape(M, N, K)
    if lazy:
        meta = {"device": "meta", "dtype": torch.uint8}
        return {"A": torch.empty(M, K // 2, **meta), "B": torch.empty(N, K // 2, **meta),
                "C": torch.empty(M, N, dtype=torch.bfloat16, device="meta"),
                "A_scale": torch.empty(M, K // 32, **meta), "B_scale": torch.empty(N, K // 32, **meta),
                "M": M, "N": N, "A_q": None, "B_q": None, "A_s": None, "B_s": None}
    gen = torch.Generator().manual_seed(seed)
    a_q, a_s = formats.quantize_mxfp4(torch.randn(M, K, generator=gen))
    b_q, b_s = formats.quantize_mxfp4(torch.randn(N, K, generator=gen))
    return {
        "A": a_q, "B": formats.shuffle_weight_b(b_q), "C": torch.zeros(M, N, dtype=torch.bfloat16),
        "A_scale": formats.shuffle_scales(a_s), "B_scale": formats.shuffle_scales(b_s), "M": M, "N": N,
        "A_q": a_q, "B_q": b_q, "A_s": a_s, "B_s": b_s,
    }


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg list (metadata ``.args`` order): A, B, C, A_scale, B_scale
    flattened 1-D, as pointer + i32 length each, then M and N as i32 (see ``common.kernarg_entries``).
    C (bf16 [M, N]) is the output. No switch changes the list (``switches`` are validated)."""
    _fam().switch_kwargs(switches)
    missing = [n for n in ARG_NAMES if n not in inputs]
    if missing:
        raise ValueError(f"GEMM inputs lack {', '.join(missing)} (need {', '.join(ARG_NAMES)}).")
    M, N = inputs["M"], inputs["N"]
    K = int(inputs["A"].shape[-1]) * 2
    check_shape(M, N, K)
    _load_flydsl()
    return C.kernarg_values([(n, _flat(inputs[n])) for n in ARG_NAMES])


def reference(inputs: dict) -> dict:
    """What C must hold (``{"C": ...}``): the dense reference on the unshuffled operands, rounded to bf16."""
    from mxfp4_ablation.reference import gemm_reference

    return {"C": gemm_reference(inputs["A_q"], inputs["A_s"], inputs["B_q"], inputs["B_s"])}


def launch_config(M: int, N: int, K: int):
    """``(grid, block)`` of one launch: one 256-thread workgroup (4 waves) per 256x256 tile."""
    check_shape(M, N, K)
    return ((M // BLOCK_M) * (N // BLOCK_N), 1, 1), (64 * N_WAVES, 1, 1)


def device_args(inputs: dict, **switches) -> tuple:
    """The FlyDSL launcher's arguments (tensors already on the GPU), in ``ARG_NAMES`` order."""
    _fam().switch_kwargs(switches)
    return tuple(_flat(inputs[n]) for n in ARG_NAMES)


def _flat(value):
    """A tensor argument as the kernel takes it: flattened 1-D (a view sharing its storage, so the
    kernel's stores land in the caller's tensor), as FlyDSL's own test passes them; ints pass through."""
    return value.reshape(-1) if hasattr(value, "reshape") else value


def flops(M: int, N: int, K: int) -> float:
    """Floating-point operations of one launch: 2*M*N*K (the timing harness's TFLOPS)."""
    return 2.0 * M * N * K


def bytes(M: int, N: int, K: int) -> float:  # noqa: A001 - the contract's name
    """Compulsory DRAM traffic of one launch: A and B (fp4) and their E8M0 scales read once, C (bf16)
    written once."""
    return float(M * K // 2 + N * K // 2 + (M + N) * (K // 32) + 2 * M * N)


def compile_entry(M: int, N: int, K: int, variant_name: str = None, **switches):
    """``(jit_launcher, args)`` for ``toolchain.compile``; pass switches by name or a
    ladder/leave-one-out ``variant_name`` (e.g. ``"gemm-v3"``)."""
    import torch

    switches = _fam().resolve(variant_name, switches)
    launcher = build(M, N, K, **switches)
    # Only shapes and dtypes matter for an offline compile: zero tensors are enough.
    # Tensors are flattened 1-D (see device_args): one pointer + one i32 length each, 84 kernarg bytes.
    args = (
        torch.zeros(M * K // 2, dtype=torch.uint8),
        torch.zeros(N * K // 2, dtype=torch.uint8),
        torch.zeros(M * N, dtype=torch.bfloat16),
        torch.zeros(M * K // 32, dtype=torch.uint8),
        torch.zeros(N * K // 32, dtype=torch.uint8),
        M,
        N,
    )
    return launcher, args


__doc__ = _family.document(__doc__, SWITCHES)
