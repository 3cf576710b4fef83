"""The study's MXFP4 MoE gemm2 (down projection) for gfx950, one switch per optimisation.

For every sorted row ``r`` (token ``t``, slot ``s``, expert ``e`` of its block)::

    y[r, :] = h[r, :] . W2[e]^T        (fp4 x fp4, E8M0 block scales, f32 accumulate)

* **decode** (``block_m`` 16): ``out[t, :] += bf16(w[r] * y[r, :])`` with packed-bf16
  atomics (``global_atomic_pk_add_bf16``) into a zeroed bf16 ``[M, H]``; padding rows
  (token ``>= M``) add nothing;
* **prefill** (``block_m`` 128): ``flat_out[r, :] = bf16(y[r, :])`` for every row of a
  valid block, a plain store into bf16 ``[max_sorted, H]`` that the host's
  :func:`mxfp4_ablation.moe.host.scatter_reduce` weights and sums.

Buffers (exactly those :func:`mxfp4_ablation.moe.host.emulate_gemm2` reads):

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

Geometry (fixed, simple on purpose): one workgroup = 4 waves computes ``block_m`` sorted
rows x 256 hidden columns; wave ``w`` owns columns ``64w .. 64w+63`` as four 16-column
tiles, for all ``block_m/16`` row tiles.  Workgroup ``pid`` takes row block
``pid // (H/256)`` and column block ``pid % (H/256)``; blocks past ``num_valid_ids[0]``
exit at once.  The K loop (a real loop, one iteration per 128 fp4 of the intermediate)
loads every operand straight into VGPRs with ``buffer_load_dwordx4`` (A: row ``l%16``,
bytes ``16*(l//16)`` of the row's 64-byte K step; B: the preshuffled 1 KiB block,
lane ``l`` at ``16*l``) and the scale words with ``buffer_load_dword``, one step ahead
of the MFMAs (a register double buffer carried round the loop).  Each MFMA is
``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4, ``cbsz:4 blgp:4``) with the operands
swapped (W2's fragment is src0), so lane ``l`` ends with ``y[row l%16, 4(l//16)..+3]``:
four consecutive bf16 of one row = two packed-bf16 atomics or one 8-byte store.
The scale word of a lane holds four E8M0 bytes, byte ``2*kp + np`` (kp = 128-K half,
np = 16-row tile of the 32-row pair); the kernel shifts the wanted byte down to byte 0.

Variants are data: :data:`SWITCHES` holds the :class:`~mxfp4_ablation.family.Switch` records
(the seed's claim, the mechanism and the ISA metric each should move), from which the registry
derives the ladder (``moe2-v0`` .. ``moe2-v4``) and the leave-one-out set (``moe2-v4-no-<switch>``).  The seed is aiter PR #3828 ("flydsl
mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the HIP backend"); its claims are
quoted, never its code.
"""

from __future__ import annotations

from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Switch

from .moe_shape import (  # noqa: F401 - the contract's shape names, re-exported
    BLOCK_MS, check, default_block_m, OPTIONAL_SHAPE_PARAMS, PR_3828, regime, SHAPE_PARAMS,
)

NAME = "moe2"
LABEL = "MoE gemm2"
METRICS = "moe"

SWITCHES = _family.switch_table(
    Switch(
        "int64_abi", "Bare 64-bit base addresses as kernel arguments.", PR_3828,
        claim="passing each buffer as an i64 address instead of a memref/tensor descriptor makes gemm2 ~7 % "
        "faster at decode, with parity by M~64 (a launch-bound kernel pays for every kernarg load before its "
        "first memory access).",
        mechanism="a FlyDSL fx.Tensor argument is a pointer plus a layout block (dims as i32, strides as i64) "
        "that the kernel loads to size its buffer resources; with int64_abi each buffer is one 8-byte argument "
        "and every size is a compile-time constant.",
        metric="kernarg_bytes falls (180 -> 76 here) and the s_load_dword* count falls (18 -> 3 at decode, "
        "13 -> 3 at prefill).",
        expects=(Expect("kernarg_bytes", "down", note="180 -> 76 in our kernel"),
                 Expect("s_load", "down", note="18 -> 3 decode, 13 -> 3 prefill in our kernel")),
    ),
    Switch(
        "unsigned_div", "Unsigned division for non-negative index math.", PR_3828,
        claim="divui/remui instead of the signed forms removes the sign-correction SALU of every division in the "
        "index prologue.",
        mechanism="a signed divide by a constant is a high multiply (s_mul_hi_i32) or shift plus a correction "
        "that adds the sign bit (s_ashr_i32 / s_lshr_b32 31 + s_add_i32), a signed remainder a further "
        "multiply-subtract; every index here is >= 0, so arith.divui/remui give the same numbers without it.",
        metric="s_ashr_i32 + v_ashrrev_i32 count falls to 0, s_mul_hi_i32 becomes s_mul_hi_u32 (Kimi: H/256 = "
        "28 column blocks), instruction count falls.",
        expects=(Expect("sign_shifts", "zero"), Expect("s_mul_hi_i32", "down"),
                 Expect("instructions", "down")),
    ),
    Switch(
        "backend_waitcnt", "Let LLVM own the K-loop waits.", PR_3828,
        claim="the hand-written inline-asm s_waitcnt vmcnt(N) in the K loop came on top of the waits LLVM's "
        "SIInsertWaitcnts pass inserts anyway (it cannot see into inline asm), so every K step waited twice - "
        "the large-M bubble.",
        mechanism="drop the inline-asm wait after each step's prefetch; the pass's own per-register vmcnt waits "
        "remain and are sufficient (the asm, a scheduling barrier, also stops going in the scheduler's way).",
        metric="loop_s_waitcnt falls (9 -> 3 small decode, 18 -> 6 small prefill, by one at the Kimi shape), "
        "loop_instructions fall, MFMA count unchanged.",
        expects=(Expect("loop_s_waitcnt", "down"), Expect("loop_instructions", "down")),
    ),
    Switch(
        "epilogue_strength_reduction", "Hoist the row x N_OUT multiply out of the store loop.", PR_3828,
        claim="the bf16 epilogue computed a 64-bit (row * N_OUT + col) * 2 byte offset for every stored element; "
        "computing the lane's base address once and adding compile-time offsets per element removes the 64-bit "
        "multiply-adds.",
        mechanism="element (row tile mt, column tile nt) is at lane_base + 2 * (16 * mt * N_OUT + 16 * nt) with "
        "lane_base the only run-time product.",
        metric="v_mad_u64_u32 falls to 1 (Kimi N_OUT 7168: 32 -> 1 at prefill, 7 -> 1 at decode); with a "
        "power-of-two N_OUT the product is a shift, and the epilogue's instruction count falls instead (small "
        "shape: -23 at decode, -56 at prefill).",
        expects=(Expect("v_mad_u64_u32", "down", note="to 1 at the Kimi shape"),
                 Expect("epilogue_instructions", "down")),
    ),
)

#: ``out`` is bf16. Prefill stores ``bf16(y)`` per row: one rounding of an f32 dot product of ``inter``
#: exact products, summed in an order that may differ from ``moe.host.emulate_gemm2``'s: <= 1 bf16 ulp
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
N_WAVES = 4
K_STEP = 128  # fp4 per MFMA (and per K-loop iteration)


def _fam():
    return _family.of_module(__name__)


def check_shape(tokens, experts, hidden, inter, topk, block_m=None) -> dict:
    """One clear ValueError for a shape this kernel cannot run; returns it with ``block_m`` defaulted."""
    shape = check(tokens, experts, hidden, inter, topk, block_m)
    if hidden % BLOCK_N:
        raise UsageError(f"hidden must be a multiple of {BLOCK_N} (one 256-column block per workgroup), got {hidden}.")
    return shape


class Geometry:
    """Every compile-time number of one shape (sizes in bytes unless named otherwise)."""

    def __init__(self, tokens, experts, hidden, inter, topk, block_m=None):
        block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
        from mxfp4_ablation.moe.host import max_sorted_rows

        self.M, self.E, self.H, self.I, self.topk, self.BM = tokens, experts, hidden, inter, topk, block_m
        self.atomic = block_m == 16
        self.max_sorted = max_sorted_rows(tokens, topk, experts, block_m)
        self.m_blocks = self.max_sorted // block_m
        self.n_blocks = hidden // BLOCK_N
        self.grid = self.m_blocks * self.n_blocks
        self.KB = inter // 2  # bytes per intermediate row
        self.KI = inter // K_STEP  # K-loop iterations
        self.K0 = inter // 128  # 1 KiB B blocks per 16 W2 rows
        self.K1 = inter // 256  # scale words per lane per 32 rows
        self.MT = block_m // 16  # row tiles per wave
        self.scale_rows = -(-self.max_sorted // 32) * 32
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


_BUFFER_FLAGS = (7 << 12) | (4 << 15)  # gfx9 buffer resource word 3: 32-bit data format, no swizzle


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
    """Emits one gemm2 kernel body for a fixed shape and switch set."""

    def __init__(self, g: Geometry, sw: frozenset):
        self.g, self.sw = g, sw
        self.unsigned = "unsigned_div" in sw

    # ------------------------------------------------------------------ index math
    def div(self, a, b):
        """``a / b`` for a >= 0: divui with unsigned_div, else the signed divsi."""
        return (arith.DivUIOp if self.unsigned else arith.DivSIOp)(_v(a), _v(b)).result

    def rem(self, a, b):
        """``a % b`` for a >= 0: remui with unsigned_div, else the signed remsi."""
        return (arith.RemUIOp if self.unsigned else arith.RemSIOp)(_v(a), _v(b)).result

    # ------------------------------------------------------------------ arguments
    def rsrc(self, arg, name):
        """The buffer resource of one argument (OOB-checked against the buffer's size)."""
        if "int64_abi" in self.sw:
            base = llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), C.raw(arg))
            return rocdl.make_buffer_rsrc(ir.Type.parse("!llvm.ptr<8>"), base, _c(0, T.i16),
                                          _c(self.g.nbytes[name], T.i64), _c(_BUFFER_FLAGS))
        # Descriptor ABI: the size comes from the tensor's layout block (kernarg loads).
        bt = fx.rocdl.make_buffer_tensor(arg, max_size=False)
        return fx.rocdl.get_buffer_rsrc(fx.get_iter(bt))

    def global_base(self, arg):
        """The output's base address as an i64."""
        if "int64_abi" in self.sw:
            return C.raw(arg)
        return C.raw(fx.ptrtoint(fx.get_iter(arg)))

    def setup(self, args):
        g = self.g
        (inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids, num_valid_ids,
         out, tokens) = args
        self.tokens = C.raw(tokens)
        tid = C.raw(fx.thread_idx.x)
        pid = C.raw(fx.block_idx.x)
        self.lane = self.rem(tid, 64)
        self.wave = C.uniform(self.div(tid, 64))
        self.i = self.rem(self.lane, 16)  # row of the A fragment / of the result
        self.q = self.div(self.lane, 16)  # 32-element K block of the fragment; result columns 4q..4q+3
        self.m_blk = self.div(pid, g.n_blocks)
        self.n_blk = self.rem(pid, g.n_blocks)
        self.r = {n: self.rsrc(a, n) for n, a in (
            ("inter", inter), ("inter_scale", inter_scale), ("w2", w2), ("w2_scale", w2_scale),
            ("sorted_ids", sorted_ids), ("sorted_weights", sorted_weights),
            ("sorted_expert_ids", sorted_expert_ids), ("num_valid_ids", num_valid_ids))}
        self.out = out

    def body(self):
        """Early exit for blocks past the valid rows, then the K loop and the epilogue."""
        g = self.g
        valid_rows = C.uniform(C.buffer_load(self.r["num_valid_ids"], _c(0), 1))
        row0 = _mul(self.m_blk, g.BM)
        inside = arith.CmpIOp(arith.CmpIPredicate.slt, row0, valid_rows).result
        if_op = scf.IfOp(inside, has_else=False)
        with ir.InsertionPoint(if_op.then_block):
            self.row0 = row0
            self.expert = C.uniform(C.buffer_load(self.r["sorted_expert_ids"], _mul(self.m_blk, 4), 1))
            acc = self.k_loop()
            self.out_base = self.global_base(self.out)
            if g.atomic:
                self.epilogue_atomic(acc)
            else:
                self.epilogue_rows(acc)
            scf.YieldOp([])

    # ------------------------------------------------------------------ loads (one K step)
    def load_step(self, k):
        """Issue every load of K step ``k`` (i32): [A frags], [A scale words], [B frags], [B scale words]."""
        g = self.g
        kpair = self.div(k, 2)  # 256-K scale column of this step
        # A: row tile mt, lane row i, bytes 16q of the 64-byte K step.
        a = []
        for mt in range(g.MT):
            row = _add(_add(self.row0, 16 * mt), self.i)
            a.append(C.buffer_load(self.r["inter"], _add(_mul(row, g.KB), _mul(self.q, 16)), 4,
                                   C.uniform(_mul(k, 64))))
        # A scales: one word per 32-row group (a 16-row block shares its group with a neighbour).
        sa = []
        for p in range(max(1, g.MT // 2)):
            r1 = self.div(_add(self.row0, 32 * p), 32)
            sa.append(self._scale_word("inter_scale", r1, kpair))
        # B: W2 rows e*H + 256 n_blk + 64 wave + 16 nt; the 1 KiB block of (16 rows, 128 K) at lane*16.
        b = []
        col0 = _add(_add(_mul(self.expert, g.H), _mul(self.n_blk, BLOCK_N)), _mul(self.wave, 64))
        for nt in range(4):
            n0 = self.div(_add(col0, 16 * nt), 16)
            b.append(C.buffer_load(self.r["w2"], _add(_mul(_mul(n0, g.K0), 1024), _mul(self.lane, 16)), 4,
                                   C.uniform(_mul(k, 1024))))
        sb = []
        for p in range(2):
            r1 = self.div(_add(col0, 32 * p), 32)
            sb.append(self._scale_word("w2_scale", r1, kpair))
        return a, sa, b, sb

    def _scale_word(self, name, r1, kpair):
        """The lane's preshuffled scale word of 32-row group ``r1`` and 256-K column ``kpair``:
        dword ``(r1 * K/256 + kpair) * 64 + lane`` (``formats.shuffle_scales``)."""
        word = _add(_mul(_add(_mul(r1, self.g.K1), kpair), 64), self.lane)
        return C.buffer_load(self.r[name], _mul(word, 4), 1)

    def n_loads(self):
        """Vector-memory instructions :meth:`load_step` issues."""
        g = self.g
        return g.MT + max(1, g.MT // 2) + 4 + 2

    # ------------------------------------------------------------------ MFMA (one K step)
    def mfmas(self, k, frags, acc):
        g = self.g
        a, sa, b, sb = frags
        kp = self.rem(k, 2)  # which 128-K half of the scale word
        # Byte 2*kp + np of each scale word, shifted down to byte 0 (op_sel 0).
        a_sel = []
        for mt in range(g.MT):
            if g.MT == 1:
                np_ = self.rem(self.div(self.row0, 16), 2)
            else:
                np_ = _c(mt % 2)
            a_sel.append(_shr(sa[mt // 2 if g.MT > 1 else 0], _mul(_add(_mul(kp, 2), np_), 8)))
        b_sel = [_shr(sb[nt // 2], _mul(_add(_mul(kp, 2), nt % 2), 8)) for nt in range(4)]
        out = list(acc)
        for mt in range(g.MT):
            for nt in range(4):
                idx = mt * 4 + nt
                # Swapped operands: W2 is src0, so lane l gets y[row l%16, cols 4(l//16)..+3].
                out[idx] = C.mfma_scale_fp4(b[nt], a[mt], out[idx], b_sel[nt], a_sel[mt])
        return out

    # ------------------------------------------------------------------ K loop
    def k_loop(self):
        """Prologue loads step 0; iteration k issues step k+1 (the last re-issues itself), waits
        for step k and runs its MFMAs.  State: accumulators + step k's fragments."""
        g = self.g
        frags = self.load_step(_c(0))
        acc = [C.zeros_f32x4() for _ in range(g.MT * 4)]
        init = acc + _flat(frags)
        lb = arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr.get(ir.IndexType.get(), 0)).result
        ub = arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr.get(ir.IndexType.get(), g.KI)).result
        one = arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr.get(ir.IndexType.get(), 1)).result
        loop = scf.ForOp(lb, ub, one, [C.raw(v) for v in init])
        # Keep the K loop a loop (LLVM would fully unroll a 2..4-trip loop): the hot-loop
        # metrics of the ablation need a loop body to read.
        loop.operation.attributes["loop_annotation"] = ir.Attribute.parse(
            "#llvm.loop_annotation<unroll = <disable = true>>")
        with ir.InsertionPoint(loop.body):
            k = arith.IndexCastOp(T.i32, loop.induction_variable).result
            state = list(loop.inner_iter_args)
            acc_k, cur = state[: len(acc)], _unflat(state[len(acc):], frags)
            nxt_k = arith.MinSIOp(_add(k, 1), _c(g.KI - 1)).result
            nxt = self.load_step(nxt_k)
            if "backend_waitcnt" not in self.sw:
                # Step k's loads were issued before the n_loads() just issued: wait for them by hand.
                _asm(None, [], f"s_waitcnt vmcnt({self.n_loads()})", "")
            acc_k = self.mfmas(k, cur, acc_k)
            scf.YieldOp([C.raw(v) for v in acc_k + _flat(nxt)])
        return list(loop.results)[: len(acc)]

    # ------------------------------------------------------------------ epilogues
    def _col(self, nt, extra=0):
        """Hidden column of the lane's first value in column tile ``nt`` (+ ``extra``)."""
        return _add(_add(_add(_mul(self.n_blk, BLOCK_N), _mul(self.wave, 64)), 16 * nt + extra), _mul(self.q, 4))

    def _addresses(self, rows, cols):
        """``out + (rows[a] * H + col_b) * 2`` for every (a, b), as ``!llvm.ptr<1>``.

        ``rows[a]`` must be ``rows[0] + 16 a``; ``cols[b]`` is a pair ``(col_b, d_b)`` with
        ``col_b - col_0 = d_b - d_0`` a compile-time constant.  Without epilogue_strength_reduction each
        address is computed from scratch - a 64-bit ``row * H`` multiply-add per element; with it
        the lane's base address is computed once and every element adds a constant.
        """
        g, i64 = self.g, T.i64
        ptr = ir.Type.parse("!llvm.ptr<1>")

        def addr(row, col):
            elem = arith.AddIOp(arith.MulIOp(arith.ExtUIOp(i64, _v(row)).result, _c(g.H, i64)).result,
                                arith.ExtUIOp(i64, _v(col)).result).result
            return arith.AddIOp(self.out_base, arith.MulIOp(elem, _c(2, i64)).result).result

        if "epilogue_strength_reduction" not in self.sw:
            return [[llvm.inttoptr(ptr, addr(r, c)) for c, _ in cols] for r in rows]
        lane = addr(rows[0], cols[0][0])
        d0 = cols[0][1]
        return [[llvm.inttoptr(ptr, arith.AddIOp(lane, _c(2 * (16 * a * g.H + d - d0), i64)).result) for _, d in cols]
                for a in range(len(rows))]

    def epilogue_rows(self, acc):
        """Prefill: four bf16 (8 bytes) of the lane's row per tile, unweighted, every row of the block."""
        g = self.g
        rows = [_add(_add(self.row0, 16 * mt), self.i) for mt in range(g.MT)]
        addrs = self._addresses(rows, [(self._col(nt), 16 * nt) for nt in range(4)])
        for mt in range(g.MT):
            for nt in range(4):
                bf = arith.TruncFOp(C.vec_type(4, T.bf16), C.raw(acc[mt * 4 + nt])).result
                words = llvm.BitcastOp(C.vec_type(2, T.i32), bf).result
                llvm.StoreOp(words, addrs[mt][nt], alignment=8)

    def epilogue_atomic(self, acc):
        """Decode: out[token] += bf16(w * y) as two packed-bf16 atomics per tile; padding rows skip."""
        g = self.g
        row = _add(self.row0, self.i)
        sid = C.buffer_load(self.r["sorted_ids"], _mul(row, 4), 1)
        w = llvm.BitcastOp(T.f32, C.buffer_load(self.r["sorted_weights"], _mul(row, 4), 1)).result
        token = _and(sid, 0xFFFFFF)
        real = arith.CmpIOp(arith.CmpIPredicate.ult, token, self.tokens).result
        if_op = scf.IfOp(real, has_else=False)
        with ir.InsertionPoint(if_op.then_block):
            cols = [(self._col(nt, 2 * half), 16 * nt + 2 * half) for nt in range(4) for half in range(2)]
            (addrs,) = self._addresses([token], cols)
            wv = llvm.mlir_undef(C.vec_type(4, T.f32))
            for j in range(4):
                wv = llvm.insertelement(wv, w, _c(j))
            for nt in range(4):
                y = arith.MulFOp(C.raw(acc[nt]), wv).result
                bf = arith.TruncFOp(C.vec_type(4, T.bf16), y).result
                for half in range(2):
                    pair = llvm.shufflevector(C.vec_type(2, T.bf16), bf, bf, [2 * half, 2 * half + 1])
                    llvm.AtomicRMWOp(llvm.AtomicBinOp.fadd, addrs[2 * nt + half], pair,
                                     llvm.AtomicOrdering.monotonic, syncscope="agent", alignment=4)
            scf.YieldOp([])


def _flat(frags):
    return [v for group in frags for v in group]


def _unflat(values, like):
    out, n = [], 0
    for group in like:
        out.append(values[n:n + len(group)])
        n += len(group)
    return out


def build(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None, **switches):
    """The ``@flyc.jit`` launcher of gemm2 for one shape and switch set (names of
    :data:`SWITCHES` mapped to booleans, missing = off; ``block_m`` None = :func:`default_block_m`)."""
    sw = _fam().switch_kwargs(switches)
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    _load_flydsl()
    attrs = {"rocdl.flat_work_group_size": "256,256"}

    if "int64_abi" in sw:

        @flyc.kernel
        def mxfp4_moe_gemm2(
            inter: fx.Int64, inter_scale: fx.Int64, w2: fx.Int64, w2_scale: fx.Int64, sorted_ids: fx.Int64,
            sorted_weights: fx.Int64, sorted_expert_ids: fx.Int64, num_valid_ids: fx.Int64, out: fx.Int64,
            tokens: fx.Int32,
        ):
            em = _Emitter(g, sw)
            em.setup((inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids,
                      num_valid_ids, out, tokens))
            em.body()

        @flyc.jit
        def launch(
            inter: fx.Int64, inter_scale: fx.Int64, w2: fx.Int64, w2_scale: fx.Int64, sorted_ids: fx.Int64,
            sorted_weights: fx.Int64, sorted_expert_ids: fx.Int64, num_valid_ids: fx.Int64, out: fx.Int64,
            tokens: fx.Int32, stream: fx.Stream = fx.Stream(None),
        ):
            mxfp4_moe_gemm2(inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids,
                            num_valid_ids, out, tokens, value_attrs=attrs).launch(
                grid=(g.grid, 1, 1), block=(N_WAVES * 64, 1, 1), stream=stream)

    else:

        @flyc.kernel
        def mxfp4_moe_gemm2(
            inter: fx.Tensor, inter_scale: fx.Tensor, w2: fx.Tensor, w2_scale: fx.Tensor, sorted_ids: fx.Tensor,
            sorted_weights: fx.Tensor, sorted_expert_ids: fx.Tensor, num_valid_ids: fx.Tensor, out: fx.Tensor,
            tokens: fx.Int32,
        ):
            em = _Emitter(g, sw)
            em.setup((inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids,
                      num_valid_ids, out, tokens))
            em.body()

        @flyc.jit
        def launch(
            inter: fx.Tensor, inter_scale: fx.Tensor, w2: fx.Tensor, w2_scale: fx.Tensor, sorted_ids: fx.Tensor,
            sorted_weights: fx.Tensor, sorted_expert_ids: fx.Tensor, num_valid_ids: fx.Tensor, out: fx.Tensor,
            tokens: fx.Int32, stream: fx.Stream = fx.Stream(None),
        ):
            mxfp4_moe_gemm2(inter, inter_scale, w2, w2_scale, sorted_ids, sorted_weights, sorted_expert_ids,
                            num_valid_ids, out, tokens, value_attrs=attrs).launch(
                grid=(g.grid, 1, 1), block=(N_WAVES * 64, 1, 1), stream=stream)

    return launch


# ============================================================================ host side


def _zero_buffers(g: Geometry) -> dict:
    """Zero tensors of the kernel's buffer shapes (an offline compile needs only shapes)."""
    import torch

    u8 = torch.uint8
    return {
        "inter": torch.zeros(g.max_sorted, g.KB, dtype=u8),
        "inter_scale": torch.zeros(g.scale_rows * (g.I // 32), dtype=u8),
        "w2": torch.zeros(g.E * g.H, g.KB, dtype=u8),
        "w2_scale": torch.zeros(g.E * g.H, g.I // 32, dtype=u8),
        "sorted_ids": torch.zeros(g.max_sorted, dtype=torch.int32),
        "sorted_weights": torch.zeros(g.max_sorted, dtype=torch.float32),
        "sorted_expert_ids": torch.zeros(g.m_blocks, dtype=torch.int32),
        "num_valid_ids": torch.zeros(2, dtype=torch.int32),
        "out": torch.zeros(g.out_rows, g.H, dtype=torch.bfloat16),
        "tokens": g.M,
    }


def make_inputs(tokens: int, experts: int, hidden: int, inter: int, topk: int, seed: int = 0,
                block_m: int = None) -> dict:
    """The kernel's buffers for one random MoE layer (keys = :data:`ARG_NAMES`).

    Builds the problem with :mod:`mxfp4_ablation.moe.host` (routing, sort, preshuffled W2)
    and a random intermediate ``h`` quantised with the MoE rule (gemm2 does not care
    where ``h`` came from, and emulating gemm1 would only cost time).  Also returns
    ``sorting`` (the :class:`~mxfp4_ablation.moe.host.MoESorting`), ``regime``,
    ``w2_shuf`` / ``w2_scale_shuf`` in their ``[E, H, *]`` shapes, and ``out`` zeroed.
    """
    import torch

    from mxfp4_ablation import formats
    from mxfp4_ablation.moe import host
    from mxfp4_ablation.moe.reference import quantize_mxfp4_moe

    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    block_m = g.BM
    reg = regime(block_m)
    problem = host.MoEProblem(experts=experts, hidden=hidden, intermediate=inter, topk=topk, tokens=tokens,
                              seed=seed, regime=reg)
    data = host.make_moe_inputs(problem, with_weights=True)
    sorting = host.moe_sort(data["topk_ids"], data["topk_weights"], experts, block_m)
    w2_shuf, w2_scale_shuf = host.preshuffle_w2(data["w2_quant"], data["w2_scale"])
    gen = torch.Generator().manual_seed(seed + 1)
    # h: rows of valid pairs random, padding rows zero (as gemm1 writes them: silu(0) * 0).
    h = torch.randn(g.max_sorted, inter, generator=gen)
    h[~sorting.valid_row_mask()] = 0
    h_q, h_s = quantize_mxfp4_moe(h)
    h_s_pad = torch.zeros(g.scale_rows, inter // 32, dtype=torch.uint8)
    h_s_pad[: g.max_sorted] = h_s
    bufs = {
        "inter": h_q.contiguous(),
        "inter_scale": formats.shuffle_scales(h_s_pad).reshape(-1).contiguous(),
        "w2": w2_shuf.reshape(experts * hidden, inter // 2),
        "w2_scale": w2_scale_shuf.reshape(experts * hidden, inter // 32),
        "sorted_ids": sorting.sorted_token_ids.contiguous(),
        "sorted_weights": sorting.sorted_weights.contiguous(),
        "sorted_expert_ids": sorting.sorted_expert_ids.contiguous(),
        "num_valid_ids": sorting.num_valid_ids.contiguous(),
        "out": torch.zeros(g.out_rows, hidden, dtype=torch.bfloat16),
        "tokens": tokens,
    }
    return {**bufs, "sorting": sorting, "regime": reg, "w2_shuf": w2_shuf, "w2_scale_shuf": w2_scale_shuf,
            "block_m": block_m}


def reference(inputs: dict) -> dict:
    """What the kernel must leave in ``out``: :func:`mxfp4_ablation.moe.host.emulate_gemm2` on the
    same buffers - ``out`` (bf16 ``[M, H]``) for decode, ``flat_out`` (bf16 ``[max_sorted, H]``,
    before the host's scatter-reduce) for prefill."""
    from mxfp4_ablation.moe import host

    _check_inputs(inputs)
    epilog = "atomic" if inputs["block_m"] == 16 else "nonatomic"
    res = host.emulate_gemm2(inputs["inter"], inputs["inter_scale"], inputs["w2_shuf"], inputs["w2_scale_shuf"],
                             inputs["sorting"], epilog)
    return {"out": res["out"] if epilog == "atomic" else res["flat_out"]}


def _check_inputs(inputs: dict):
    missing = [n for n in ARG_NAMES + ("sorting", "w2_shuf", "w2_scale_shuf", "block_m") if n not in inputs]
    if missing:
        raise ValueError(f"MoE gemm2 inputs lack {', '.join(missing)}; build them with make_inputs().")


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg list in the metadata ``.args`` order.

    ``switches`` are a variant's switches as keywords (``int64_abi=True``; only that one
    changes the list).  Descriptor ABI (default): each buffer is a ``global_buffer`` entry plus
    its layout block, ``tokens`` an i32 (see ``common.kernarg_entries``).  With ``int64_abi``
    each buffer is one 8-byte entry: kind ``global_buffer`` (the emulator maps the tensor and
    writes its address there; the metadata calls it an 8-byte ``by_value``), ``tokens`` an i32.
    """
    _check_inputs(inputs)
    sw = _fam().switch_kwargs(switches)
    spec = [(n, inputs[n]) for n in ARG_NAMES]
    if "int64_abi" not in sw:
        _load_flydsl()
        return C.kernarg_entries(spec)
    out, offset = [], 0
    for name, value in spec:
        if isinstance(value, int):
            out.append({"name": name, "kind": "by_value", "offset": offset, "size": 4,
                        "bytes": int(value).to_bytes(4, "little", signed=True)})
            offset += 4
        else:
            out.append({"name": name, "kind": "global_buffer", "offset": offset, "size": 8, "tensor": value})
            offset += 8
    return out


def device_args(inputs: dict, **switches) -> tuple:
    """The launcher's positional arguments for a device run (tensors on the GPU): the tensors
    themselves, or with ``int64_abi`` their ``data_ptr()`` addresses; ``tokens`` as an int."""
    _check_inputs(inputs)
    sw = _fam().switch_kwargs(switches)
    if "int64_abi" in sw:
        return tuple(v if isinstance(v, int) else int(v.data_ptr()) for v in (inputs[n] for n in ARG_NAMES))
    return tuple(inputs[n] for n in ARG_NAMES)


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
    switches = _fam().resolve(variant_name, switches)
    launcher = build(tokens, experts, hidden, inter, topk, block_m, **switches)
    g = Geometry(tokens, experts, hidden, inter, topk, block_m)
    bufs = _zero_buffers(g)
    if switches.get("int64_abi"):
        args = tuple(0 if n != "tokens" else g.M for n in ARG_NAMES)
    else:
        args = tuple(bufs[n] for n in ARG_NAMES)
    return launcher, args


__doc__ = _family.document(__doc__, SWITCHES)
