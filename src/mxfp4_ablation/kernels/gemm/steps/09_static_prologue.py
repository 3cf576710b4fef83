"""Step 9: the shape slot bakes M and N in and computes the tile addresses after the first scale
loads are on their way (only their lane part before)."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..layout import BLOCK_M
from ..seeds import PR_990

SWITCH = Switch(
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
)


class StaticShape(stages.RuntimeShape):
    """FlyDSL's ``compile_fp4_gemm_4w(MN=(M, N))``: M and N are constants (the tile order's divisions
    by powers of two become shifts and masks, :func:`~..stages.tile_order`); before the first scale
    loads only the tile-independent lane part of the DMA voffsets, after them the m0 bases, the DMA
    voffsets' tile part and the ds_read offsets."""

    def mn(self, c_m, c_n):
        return self.p.M, self.p.N

    def lds_bases(self):
        """The m0 bases wait for the first scale loads too."""

    def setup(self):
        p = self.p
        lane = p.lane
        chunk = (lane % 8) ^ (lane // 8)
        self.a_lane_off, self.b_lane_off = {}, {}
        for r in range(4):
            q = p.wave + 4 * r
            self.a_lane_off[r] = (q * 8 + lane // 8) * p.KB + chunk * 16
            self.b_lane_off[r] = ((q // 2) * p.K0 + q % 2) * 1024 + lane * 16

    def after_first_scales(self):
        self.p.g2s.setup()
        self.dma_addresses()
        self.p.s2r.addresses()

    def dma_addresses(self):
        p = self.p
        p.a_voff = {(h, r): self.a_lane_off[r] + (p.tile_i * BLOCK_M + h * 128) * p.KB
                    for h in range(2) for r in range(4)}
        p.b_voff = {(v, r): self.b_lane_off[r] + (p.tile_j * 16 + v * 8) * p.K0 * 1024
                    for v in range(2) for r in range(4)}


def apply(slots):
    return replace(slots, shape=StaticShape)
