"""MoE gemm1 for gfx950: gate/up projection + silu(gate)*up + MXFP4 requantisation.

Per sorted row block ``b`` (``block_m`` rows of one expert ``e = sorted_expert_ids[b]``)
and per 128 intermediate columns, one workgroup computes::

    gate = x . Wgate_e^T,  up = x . Wup_e^T       (x = the block's rows of A, MXFP4)
    h    = silu(gate) * up                        (fp32)
    h_q  = MXFP4(h) per 1x32 with the MoE rule    (scale = ceil-exponent of amax/6)

Buffers (layouts of :mod:`mxfp4_ablation.moe.host`, read exactly as
``moe.host.emulate_gemm1`` reads them):

* ``a_quant`` ``uint8 [M, H/2]`` token-major; row ``r`` of the block is token
  ``m_indices[r]`` (padding rows hold ``M``: their load lands past the end of the
  buffer, whose bound is ``M*H/2`` bytes, and the hardware returns zeros);
* ``a_scale`` the sorted, preshuffled E8M0 scales (``sort_shuffle_scales``);
* ``w1`` / ``w1_scale`` from ``preshuffle_w1`` (separated: rows ``[0, I)`` gate,
  ``[I, 2I)`` up, not interleaved);
* ``sorted_expert_ids`` (one per block), ``num_valid_ids`` (``[padded rows, M]``),
  ``m_indices`` (token per sorted row);
* out: ``inter_quant uint8 [max_sorted, I/2]`` row-major and ``inter_scale`` (flat,
  ``round_up(max_sorted, 32) * I/32`` bytes, preshuffled like the A scales).
  Blocks past ``num_valid_ids[0]`` are not written (the buffers start zeroed).

Geometry: grid ``(max_sorted / block_m, I / 128)``; 256 threads = 4 waves; wave
``w`` owns intermediate columns ``128*tile + 32*w + [0, 32)`` of all ``block_m`` rows:
for each 16-row group two 16x16 gate and two 16x16 up accumulators (4 for
``block_m`` 16, 32 for 128).  Everything goes global -> VGPR with
``buffer_load_dwordx4`` (no LDS): one K step is 256 fp4 = two
``v_mfma_scale_f32_16x16x128_f8f6f4`` per accumulator (fp4 x fp4, E8M0 scales
inside the MFMA, the 128-K half and the 16-row half picked by ``op_sel``), and the
next step's operands are loaded while the current step's MFMAs run (register
double buffer, loop-carried).  The MFMA operands are swapped (W is ``src0``), so
lane ``l`` ends with token row ``l % 16`` and four consecutive columns ``4*(l//16)``.

Epilogue (per 16-row group): ``silu(g)*u`` with ``v_rcp_f32`` for the division and
one exp2 per element (the ``exp2`` switch), block amax over the 8 values of a lane
and across the 4 lanes sharing a row (``v_permlane16_swap`` + ``v_permlane32_swap``),
the MoE E8M0 rule in integer arithmetic, four ``v_cvt_scalef32_pk_fp4_f32`` per
lane (one dword = bytes ``2g, 2g+1`` of the first 16 columns and ``2g, 2g+1`` of
the second), stored as two ``buffer_store_short`` and one ``buffer_store_byte``
of the scale (the four lanes of a row write the same byte to the same address).

Variants are data: :data:`SWITCHES` holds the :class:`~mxfp4_ablation.family.Switch` records,
from which the registry derives the ladder (``moe1-v0`` .. ``moe1-v2``) and the
leave-one-out set (``moe1-v2-no-<switch>``).  The seed is aiter PR #3828
(merge b242ba66a6, "flydsl mxfp4 a4w4 MoE: bring gemm1/gemm2 to parity with the
HIP backend"), whose claims are quoted, never its code.
"""


from mxfp4_ablation import family as _family
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Switch

from .moe_shape import (  # noqa: F401 - the contract's shape names, re-exported
    BLOCK_MS, check, default_block_m, max_sorted, OPTIONAL_SHAPE_PARAMS, PR_3828, SHAPE_PARAMS,
)

NAME = "moe1"
LABEL = "moe1"
METRICS = "moe"

SWITCHES = _family.switch_table(
    Switch(
        "int64_abi", "Bare 64-bit base addresses as kernel arguments.", PR_3828,
        claim="(first commit) passing data_ptr() as fx.Int64 instead of full memref/tensor descriptors packs the "
        "addresses contiguously into the kernarg segment (a coalesced s_load prologue): ~7% faster at decode "
        "(M=4/8), parity by M~64.",
        mechanism="each global buffer is one 8-byte by_value argument; the buffer resource is built in the kernel "
        "from the address (rocdl.make.buffer.rsrc) with compile-time / token-count sizes, instead of a pointer "
        "plus a layout block (i32 dims + i64 strides) per tensor.",
        metric="kernarg bytes (metadata .kernarg_segment_size 208 -> 76) and entries (19 -> 10) fall; the "
        "s_load_dword* that read them fall 10 -> 3 (one s_load_dwordx16 + x2 + dword instead of nine x2 + one "
        "dword) while the dwords fetched stay 19 (the layout blocks were never read). Cost: building each V# "
        "from a bare address adds a few SALU (+9 instructions, +8 SGPRs at Kimi decode).",
        expects=(Expect("kernarg_bytes", "down", note="208 -> 76 in our kernel"),
                 Expect("s_load", "down", note="10 -> 3 in our kernel")),
    ),
    Switch(
        "exp2", "Hardware exp2 in silu.", PR_3828,
        claim="('flydsl mxfp4 gemm1: hardware exp2 in silu') rocdl.exp2 emits a bare v_exp_f32 instead of the "
        "library exp2 expansion with its v_ldexp and range-clamp v_cmp/v_cndmask; ~31% of gemm1's non-MFMA VALU "
        "removed, large M 2-6% faster.",
        mechanism="silu(g) = g * rcp(1 + exp2(-g*log2 e)), 8 exps per lane per 16-row group. ON: rocdl.exp2 -> "
        "llvm.amdgcn.exp2 -> one v_exp_f32 (a denormal result flushes to 0: harmless here). OFF: the "
        "library-style expansion written in FlyDSL arithmetic (see _exp2), because the real library call cannot "
        "be compiled offline: math.exp2 lowers to __ocml_exp2_f32, which needs the ROCm device-library bitcode, "
        "and FlyDSL's convert-gpu-to-rocdl pass marks llvm.intr.exp2 illegal. The expansion: n = rint(x) "
        "(v_rndne), v_exp_f32(x - n), v_cvt_i32 + v_ldexp_f32 by n, clamps x > 128 -> inf and x < -150 -> 0 "
        "(v_cmp + v_cndmask each). (The shorter denormal-scaling form - offset inputs below -126 by +64, scale "
        "back by 2^-64 - was tried too: LLVM folds its ldexp-by-select into a v_pk_mul + v_cndmask, so no "
        "v_ldexp is left to see.)",
        metric="over the epilogue: v_exp_f32 unchanged (one per element either way), v_ldexp_f32 -> 0, "
        "v_cndmask and v_cmp fall by 2 per element, non-MFMA VALU falls (157 -> 97 at Kimi decode, 1199 -> 724 "
        "at prefill).",
        expects=(Expect("epi_v_ldexp_f32", "zero"), Expect("epi_v_cndmask", "down"),
                 Expect("epi_valu", "down", note="seed: ~31% of non-MFMA VALU removed")),
    ),
)

#: Both outputs are quantised (fp4 bytes and E8M0 scale bytes), so both are compared byte for byte
#: with ``moe.host.emulate_gemm1``, which computes the same f32 silu*up and MoE E8M0 rule.
OUTPUTS = (
    Output("inter_quant", "exact", why="packed fp4 of silu(gate)*up: quantised values, bytes must match"),
    Output("inter_scale", "exact", why="E8M0 block scales (preshuffled): bytes must match"),
)

BLOCK_N = 128  # intermediate columns per workgroup (32 per wave)
N_WAVES = 4
K_STEP = 256  # fp4 per K step (two MFMAs of 128)
LOG2E = 1.4426950408889634
KERNEL_NAME = "mxfp4_moe_gemm1"
ARG_NAMES = ("a_quant", "a_scale", "w1", "w1_scale", "sorted_expert_ids", "num_valid_ids", "m_indices",
             "inter_quant", "inter_scale", "tokens")


def _fam():
    return _family.of_module(__name__)


def check_shape(tokens, experts, hidden, inter, topk, block_m=None) -> dict:
    """Validate a shape before any compile (one clear ValueError); returns it with ``block_m`` defaulted."""
    shape = check(tokens, experts, hidden, inter, topk, block_m)
    if hidden % K_STEP:
        raise UsageError(f"hidden must be a multiple of {K_STEP} (one K step), got {hidden}.")
    if tokens * hidden // 2 >= 1 << 32 or experts * inter * hidden >= 1 << 32:
        raise UsageError("a_quant and w1 must each stay below 4 GiB (32-bit buffer offsets).")
    return shape


def launch_config(tokens, experts, hidden, inter, topk, block_m=None):
    """``(grid, block)``: one workgroup per (sorted block, 128 intermediate columns)."""
    block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
    return (max_sorted(tokens, experts, topk, block_m) // block_m, inter // BLOCK_N, 1), (64 * N_WAVES, 1, 1)


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
# Buffer-resource dword 3 for gfx9 raw buffers, as FlyDSL's make_buffer_ptr builds it.
_RSRC_FLAGS = (7 << 12) | (4 << 15)


def _rsrc_from_addr(addr_i64, nbytes):
    """A buffer resource (V#) from a bare 64-bit address and a byte bound."""
    ptr = llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), C.raw(fx.Int64(addr_i64)))
    n = C.raw(fx.Int64(nbytes))
    return rocdl.make_buffer_rsrc(ir.Type.parse("!llvm.ptr<8>"), ptr, C.raw(fx.Int16(0)), n,
                                  C.raw(fx.Int32(_RSRC_FLAGS)))


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


def _swap_max(v, which: str):
    """Max of ``v`` with the lane 16 (``which`` = "16") or 32 ("32") rows away."""
    op = rocdl.permlane16_swap if which == "16" else rocdl.permlane32_swap
    bits = C.raw(_f32(v).bitcast(fx.Int32))
    res = op(ir.Type.parse("!llvm.struct<(i32, i32)>"), bits, bits, False, False)
    a = fx.Int32(llvm.extractvalue(T.i32, res, [0])).bitcast(fx.Float32)
    b = fx.Int32(llvm.extractvalue(T.i32, res, [1])).bitcast(fx.Float32)
    return fx.arith.maxnumf(a, b)


def _cvt_fp4(old, x0, x1, scale, byte):
    """``v_cvt_scalef32_pk_fp4_f32``: E2M1(x0/scale), E2M1(x1/scale) into byte ``byte`` of ``old``."""
    return rocdl.cvt_scalef32_pk_fp4_f32(T.i32, C.raw(old), C.raw(x0), C.raw(x1), C.raw(scale), byte)


def _block_is_valid(sw, num_valid_ids, block_m):
    """``block_idx.x * block_m < num_valid_ids[0]``: blocks past the padded rows exit at once."""
    if "int64_abi" in sw:
        rsrc = _rsrc_from_addr(num_valid_ids, 8)
    else:
        rsrc = C.buffer_rsrc(num_valid_ids)
    num_valid = fx.Int32(C.uniform(C.buffer_load(rsrc, 0, 1)))
    return fx.Int32(fx.block_idx.x) * block_m < num_valid


class _Emitter:
    """Emits one gemm1 kernel body for fixed sizes and switches."""

    def __init__(self, sw, experts, hidden, inter, block_m):
        self.sw = sw
        self.E, self.H, self.I, self.BM = experts, hidden, inter, block_m
        self.HB = hidden // 2  # bytes per A / W row
        self.K0 = hidden // 128  # 128-K blocks per W row
        self.K1 = hidden // K_STEP  # K steps = scale dwords per 32-row group
        self.RG = block_m // 16  # 16-row groups per block

    # ------------------------------------------------------------------ setup
    def setup(self, a_quant, a_scale, w1, w1_scale, eids, mind, out_q, out_s, tokens):
        """Buffer resources, the block's expert and the per-lane offsets."""
        HB = self.HB
        if "int64_abi" in self.sw:
            mk = _rsrc_from_addr
            self.a_rsrc = mk(a_quant, fx.Int64(tokens) * HB)
        else:
            def mk(t, _n):
                return C.buffer_rsrc(t)
            self.a_rsrc = C.buffer_rsrc(a_quant, fx.Int64(tokens) * HB)
        self.sa_rsrc = mk(a_scale, _UNBOUNDED)
        self.w_rsrc = mk(w1, _UNBOUNDED)
        self.sw_rsrc = mk(w1_scale, _UNBOUNDED)
        self.eid_rsrc = mk(eids, _UNBOUNDED)
        self.mi_rsrc = mk(mind, _UNBOUNDED)
        self.q_rsrc = mk(out_q, _UNBOUNDED)
        self.s_rsrc = mk(out_s, _UNBOUNDED)

        tid = fx.thread_idx.x
        self.lane = tid % 64
        self.wave = fx.Int32(C.uniform(tid // 64))
        self.blk = fx.Int32(fx.block_idx.x)
        self.ntile = fx.Int32(fx.block_idx.y)
        self.row0 = self.blk * self.BM  # first sorted row of the block
        lane, K0, K1, I = self.lane, self.K0, self.K1, self.I
        self.expert = fx.Int32(C.uniform(C.buffer_load(self.eid_rsrc, self.blk * 4, 1)))
        nl, kl = lane % 16, lane // 16
        self.nl, self.g = nl, kl
        # A: lane = (row nl of group rg, K bytes 16*kl of each 64-byte K block).
        self.a_voff = []
        for rg in range(self.RG):
            token = fx.Int32(C.buffer_load(self.mi_rsrc, (self.row0 + rg * 16 + nl) * 4, 1))
            self.a_voff.append(token * HB + kl * 16)
        # A scales: dword (r1*K1 + k1)*256 + 4*lane holds rows 32*r1 + 16*np + nl.
        self.a_sc_voff = []
        for rg in range(max(1, self.RG // 2)):
            r1 = (self.row0 + rg * 32) // 32
            self.a_sc_voff.append(r1 * (K1 * 256) + lane * 4)
        # W: this wave's gate tiles (n0 = 16-row block) and up tiles, per expert.
        col0 = self.ntile * BLOCK_N + self.wave * 32  # first intermediate column of the wave
        self.col0 = col0
        n0_gate = col0 // 16
        n0s = [n0_gate, n0_gate + 1, n0_gate + I // 16, n0_gate + 1 + I // 16]  # g0 g1 u0 u1
        self.w_voff = [n0 * (K0 * 1024) + lane * 16 for n0 in n0s]
        self.w_soff = fx.Int32(C.uniform(self.expert * (2 * I * HB)))
        r1_gate = col0 // 32
        self.ws_voff = [r * (K1 * 256) + lane * 4 for r in (r1_gate, r1_gate + I // 32)]  # gate, up
        self.ws_soff = fx.Int32(C.uniform(self.expert * (2 * I * (self.H // 32))))

    # ------------------------------------------------------------------ K loop
    def initial_state(self):
        """Zero accumulators + the operands of K step 0 (the loop-carried state)."""
        return self.pack([C.zeros_f32x4() for _ in range(4 * self.RG)], self.load_step(0))

    def pack(self, acc, ops):
        return [C.raw(x) for x in acc] + [C.raw(x) for x in ops]

    def unpack(self, state):
        state = list(state)
        return state[:4 * self.RG], state[4 * self.RG:]

    def load_step(self, k):
        """All operands of K step ``k``: A[rg][kp], W[j][kp], A-scale words, W-scale words."""
        a = [[C.buffer_load(self.a_rsrc, self.a_voff[rg] + (k * 2 + kp) * 64, 4) for kp in range(2)]
             for rg in range(self.RG)]
        w = [[C.buffer_load(self.w_rsrc, self.w_voff[j] + (k * 2 + kp) * 1024, 4, self.w_soff) for kp in range(2)]
             for j in range(4)]
        sa = [C.buffer_load(self.sa_rsrc, v + k * 256, 1) for v in self.a_sc_voff]
        sw = [C.buffer_load(self.sw_rsrc, v + k * 256, 1, self.ws_soff) for v in self.ws_voff]
        return [x for row in a for x in row] + [x for row in w for x in row] + sa + sw

    def split(self, ops):
        n_a = 2 * self.RG
        a = [ops[2 * rg: 2 * rg + 2] for rg in range(self.RG)]
        w = [ops[n_a + 2 * j: n_a + 2 * j + 2] for j in range(4)]
        rest = ops[n_a + 8:]
        n_sa = max(1, self.RG // 2)
        return a, w, rest[:n_sa], rest[n_sa:]

    def compute_step(self, acc, ops):
        """The step's 2 * 4 * RG MFMAs (W is src0, A is src1)."""
        a, w, sa, sw = self.split(ops)
        acc = list(acc)
        for rg in range(self.RG):
            if self.BM == 16:
                # One 16-row block = half of a 32-row scale group; which half is runtime.
                sa_word = fx.Int32(sa[0]) >> ((self.blk % 2) * 8)
                np_a = 0
            else:
                sa_word, np_a = sa[rg // 2], rg % 2
            for j in range(4):
                sw_word, np_w = sw[j // 2], j % 2
                for kp in range(2):
                    n = rg * 4 + j
                    acc[n] = C.mfma_scale_fp4(w[j][kp], a[rg][kp], acc[n], sw_word, sa_word,
                                              2 * kp + np_w, 2 * kp + np_a)
        return acc

    # ------------------------------------------------------------------ epilogue
    def epilogue(self, acc):
        """silu(gate)*up, per-row 32-column amax, MoE E8M0 scale, fp4 pack, stores."""
        hw = "exp2" in self.sw
        I = self.I
        blk32 = self.col0 // 32  # the wave's scale column
        for rg in range(self.RG):
            gate = [fx.Vector(acc[rg * 4 + t]) for t in range(2)]
            up = [fx.Vector(acc[rg * 4 + 2 + t]) for t in range(2)]
            h = []
            for t in range(2):
                for i in range(4):
                    g = _f32(gate[t][i])
                    e = _exp2(g * _f32(-LOG2E), hw)
                    sig = _f32(rocdl.rcp(T.f32, C.raw(_f32(1.0) + e)))
                    h.append(g * sig * _f32(up[t][i]))
            amax = fx.arith.maxnumf(fx.math.absf(h[0]), fx.math.absf(h[1]))
            for v in h[2:]:
                amax = fx.arith.maxnumf(amax, fx.math.absf(v))
            amax = _swap_max(amax, "16")
            amax = _swap_max(amax, "32")
            # MoE rule: exponent of float32(amax) * float32(1/6), rounded up, clamped to 254.
            bits = (_f32(amax) * _f32(1.0 / 6.0)).bitcast(fx.Int32)
            bexp = (bits + 0x7FFFFF).shrui(fx.Int32(23)) & 0xFF
            e8m0 = fx.Int32(fx.arith.select(C.raw(bexp < 254), C.raw(bexp), C.raw(fx.Int32(254))))
            scale = (e8m0 << 23).bitcast(fx.Float32)
            word = C.raw(fx.Int32(0))
            for n in range(4):
                word = _cvt_fp4(word, h[2 * n], h[2 * n + 1], scale, n)
            row = self.row0 + rg * 16 + self.nl
            base = row * (I // 2) + self.col0 // 2 + self.g * 2
            lo = _trunc(T.i16, word)
            hi = _trunc(T.i16, fx.Int32(word).shrui(fx.Int32(16)))
            C.buffer_store(lo, self.q_rsrc, base)
            C.buffer_store(hi, self.q_rsrc, base + 8)
            # Scale byte of (row, blk32) in the preshuffled layout (formats.shuffle_scales).
            r1, np_, k1, kp, kl = row // 32, (row // 16) % 2, blk32 // 8, (blk32 // 4) % 2, blk32 % 4
            off = ((r1 * (I // 256) + k1) * 4 + kl) * 64 + self.nl * 4 + kp * 2 + np_
            C.buffer_store(_trunc(T.i8, e8m0), self.s_rsrc, off)


def build(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None, **switches):
    """The ``@flyc.jit`` launcher for the given sizes and switches (names of
    :data:`SWITCHES` mapped to booleans; missing = off).  ``tokens`` only picks the
    default regime and the grid: the kernel reads the token count at run time."""
    block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
    sw = _fam().switch_kwargs(switches)
    _load_flydsl()
    proto = _Emitter(sw, experts, hidden, inter, block_m)
    KI = proto.K1
    attrs = {"rocdl.flat_work_group_size": "256,256"}

    Arg = fx.Int64 if "int64_abi" in sw else fx.Tensor  # one global buffer argument

    @flyc.kernel
    def mxfp4_moe_gemm1(
        a_quant: Arg, a_scale: Arg, w1: Arg, w1_scale: Arg, sorted_expert_ids: Arg, num_valid_ids: Arg,
        m_indices: Arg, inter_quant: Arg, inter_scale: Arg, tokens: fx.Int32,
    ):
        valid = _block_is_valid(sw, num_valid_ids, block_m)
        if valid:
            em = _Emitter(sw, experts, hidden, inter, block_m)
            em.setup(a_quant, a_scale, w1, w1_scale, sorted_expert_ids, m_indices, inter_quant, inter_scale, tokens)
            state = em.initial_state()
            if const_expr(KI > 1):
                for k, state in range(0, KI - 1, 1, init=state):
                    acc, cur = em.unpack(state)
                    nxt = em.load_step(fx.Int32(k) + 1)  # the next step's operands, in flight during the MFMAs
                    acc = em.compute_step(acc, cur)
                    state = yield em.pack(acc, nxt)
            acc, cur = em.unpack(state)
            em.epilogue(em.compute_step(acc, cur))

    @flyc.jit
    def launch(
        a_quant: Arg, a_scale: Arg, w1: Arg, w1_scale: Arg, sorted_expert_ids: Arg, num_valid_ids: Arg,
        m_indices: Arg, inter_quant: Arg, inter_scale: Arg, tokens: fx.Int32, grid_x: fx.Int32,
        stream: fx.Stream = fx.Stream(None),
    ):
        mxfp4_moe_gemm1(
            a_quant, a_scale, w1, w1_scale, sorted_expert_ids, num_valid_ids, m_indices, inter_quant,
            inter_scale, tokens, value_attrs=attrs,
        ).launch(grid=(grid_x, inter // BLOCK_N, 1), block=(64 * N_WAVES, 1, 1), stream=stream)

    return launch


# ============================================================================ host side


def make_inputs(tokens: int, experts: int, hidden: int, inter: int, topk: int, seed: int = 0,
                block_m: int = None) -> dict:
    """Every buffer of one launch (keys = :data:`ARG_NAMES`), built with ``moe.host``.

    Also carries ``problem``, ``sorting``, the plain (unshuffled) ``w1_quant`` /
    ``w1_scale_plain`` and ``block_m``.  ``inter_quant`` / ``inter_scale`` start zeroed (the kernel's outputs).
    """
    import torch

    from mxfp4_ablation.moe import host

    block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
    regime = "decode" if block_m == 16 else "prefill"
    problem = host.MoEProblem(experts=experts, hidden=hidden, intermediate=inter, topk=topk, tokens=tokens,
                              seed=seed, regime=regime)
    raw_in = host.make_moe_inputs(problem, with_weights=True)
    w1_q, w1_s = raw_in["w1_quant"], raw_in["w1_scale"]
    sorting = host.moe_sort(raw_in["topk_ids"], raw_in["topk_weights"], experts, block_m)
    w1_shuf, w1_scale_shuf = host.preshuffle_w1(w1_q, w1_s)
    rows = sorting.max_sorted
    return {
        "a_quant": raw_in["a_quant"].contiguous(),
        "a_scale": host.sort_shuffle_scales(raw_in["a_scale"], sorting).contiguous(),
        "w1": w1_shuf.contiguous(),
        "w1_scale": w1_scale_shuf.contiguous(),
        "sorted_expert_ids": sorting.sorted_expert_ids.to(torch.int32).contiguous(),
        "num_valid_ids": sorting.num_valid_ids.to(torch.int32).contiguous(),
        "m_indices": sorting.m_indices.to(torch.int32).contiguous(),
        "inter_quant": torch.zeros(rows, inter // 2, dtype=torch.uint8),
        "inter_scale": torch.zeros(-(-rows // 32) * 32 * (inter // 32), dtype=torch.uint8),
        "tokens": tokens,
        "problem": problem, "sorting": sorting, "w1_quant": w1_q, "w1_scale_plain": w1_s, "block_m": block_m,
    }


def reference(inputs: dict) -> dict:
    """What the kernel must write: ``moe.host.emulate_gemm1``'s fp4 bytes (``inter_quant``) and its
    preshuffled scale bytes (``inter_scale``)."""
    q, s = _emulated(inputs)
    return {"inter_quant": q, "inter_scale": s}


def _emulated(inputs: dict):
    from mxfp4_ablation.moe import host

    _check_inputs(inputs)
    if "_emulated" not in inputs:
        inputs["_emulated"] = host.emulate_gemm1(inputs["a_quant"], inputs["a_scale"], inputs["w1"],
                                                 inputs["w1_scale"], inputs["sorting"])
    return inputs["_emulated"]


def _check_inputs(inputs: dict):
    if not isinstance(inputs, dict):
        raise ValueError(f"moe1 inputs must be the dict of make_inputs, got {type(inputs).__name__}.")
    missing = [n for n in ARG_NAMES + ("sorting",) if n not in inputs]
    if missing:
        raise ValueError(f"moe1 inputs lack {', '.join(missing)}; build them with make_inputs().")


def kernel_args(inputs: dict, **switches) -> list:
    """The emulator's kernarg entries (metadata ``.args`` order, ``common.kernarg_entries``).

    Descriptor ABI: per tensor a pointer and its layout block, then ``tokens``.
    ``int64_abi``: per tensor one 8-byte address (an entry of kind ``global_buffer``
    carrying the tensor, which the emulator maps; the metadata calls it ``by_value``).
    ``switches`` are a variant's switches (only ``int64_abi`` changes the list)."""
    _check_inputs(inputs)
    int64_abi = "int64_abi" in _fam().switch_kwargs(switches)
    spec = [(n, inputs[n]) for n in ARG_NAMES]
    if not int64_abi:
        _load_flydsl()
        return C.kernarg_entries(spec)
    out = []
    for n, (name, value) in enumerate(spec[:-1]):
        out.append({"name": name, "kind": "global_buffer", "offset": 8 * n, "size": 8, "tensor": value})
    out.append({"name": "tokens", "kind": "by_value", "offset": 8 * (len(spec) - 1), "size": 4,
                "bytes": int(inputs["tokens"]).to_bytes(4, "little", signed=True)})
    return out


def device_args(inputs: dict, **switches) -> tuple:
    """The launcher's positional arguments for on-device tensors (``int64_abi`` passes
    ``data_ptr()`` addresses instead of the tensors)."""
    _check_inputs(inputs)
    int64_abi = "int64_abi" in _fam().switch_kwargs(switches)
    bufs = [inputs[n] for n in ARG_NAMES[:-1]]
    if int64_abi:
        bufs = [t.data_ptr() for t in bufs]
    grid_x = inputs["sorting"].max_sorted // inputs["block_m"]
    return (*bufs, int(inputs["tokens"]), grid_x)


def flops(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:
    """Useful floating-point operations of one launch: valid (token, expert) rows only
    (``moe.host.gemm1_flops``; padding rows are waste, not work)."""
    from mxfp4_ablation.moe.host import gemm1_flops

    return float(gemm1_flops(tokens * topk, hidden, inter))


def bytes(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None) -> float:  # noqa: A001
    """Compulsory DRAM traffic of one launch: the activations and their scales, the gate/up weights and
    scales of every expert the routing can touch (at most ``min(experts, tokens * topk)``), and the
    requantised output of the valid rows (fp4 + E8M0)."""
    active = min(experts, tokens * topk)
    rows = tokens * topk
    return float(tokens * hidden // 2 + tokens * hidden // 32 + active * 2 * inter * (hidden // 2 + hidden // 32)
                 + rows * (inter // 2 + inter // 32))


def compile_entry(tokens: int, experts: int, hidden: int, inter: int, topk: int, block_m: int = None,
                  variant_name: str = None, **switches):
    """``(jit_launcher, args)`` for ``toolchain.compile``; switches by name or a
    ladder / leave-one-out ``variant_name`` (e.g. ``"moe1-v1"``)."""
    import torch

    switches = _fam().resolve(variant_name, switches)
    block_m = check_shape(tokens, experts, hidden, inter, topk, block_m)["block_m"]
    _fam().switch_kwargs(switches)
    launcher = build(tokens, experts, hidden, inter, topk, block_m, **switches)
    rows = max_sorted(tokens, experts, topk, block_m)
    # Only shapes and dtypes matter for an offline compile: zero tensors are enough.
    tensors = (
        torch.zeros(tokens, hidden // 2, dtype=torch.uint8),
        torch.zeros(-(-rows // 32) * 32 * (hidden // 32), dtype=torch.uint8),
        torch.zeros(experts, 2 * inter, hidden // 2, dtype=torch.uint8),
        torch.zeros(experts, 2 * inter, hidden // 32, dtype=torch.uint8),
        torch.zeros(rows // block_m, dtype=torch.int32),
        torch.zeros(2, dtype=torch.int32),
        torch.zeros(rows, dtype=torch.int32),
        torch.zeros(rows, inter // 2, dtype=torch.uint8),
        torch.zeros(-(-rows // 32) * 32 * (inter // 32), dtype=torch.uint8),
    )
    if switches.get("int64_abi"):
        tensors = tuple(0x10000 * (n + 1) for n in range(len(tensors)))  # addresses: any value compiles
    return launcher, (*tensors, tokens, rows // block_m)


__doc__ = _family.document(__doc__, SWITCHES)
