"""Step 3: the global -> LDS slot becomes inline asm that sets m0 once per batch of four loads."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..layout import HALF, STAGE
from ..seeds import PR_990

fx = C = None  # FlyDSL, filled on the first build

SWITCH = Switch(
    "g2s_m0", "Cheap LDS-DMA addressing.", PR_990,
    claim="the wave-uniform LDS base is read-first-laned once, m0 is set once per batch of loads then "
    "advanced with s_add_u32, and the K offset rides in the scalar soffset so each lane's voffset is "
    "loop-invariant.",
    mechanism="the DMA becomes inline asm 's_mov_b32 m0 | s_add_u32 m0 ; buffer_load_dwordx4 ... offen lds' "
    "(4 loads per m0 batch, the 4 of one LDS half never split by another DMA) with per-stage m0 bases "
    "precomputed in SGPRs, instead of the compiler intrinsic. The K offset already rides in soffset "
    "before this switch (FlyDSL's kernel before PR #990 passes it so too).",
    metric="s_mov_b32 m0 per K step 16 -> 4, s_add_u32 m0 0 -> 12, v_readfirstlane one per load -> none in "
    "the loop (program: 67 -> 3 at 8192^3, upstream before: 67); the hot loop 489 -> 458 instructions "
    "at 8192^3 (2 K steps). Side effect: the compiler no longer sees the DMA, so its own waits for the VGPR "
    "scale loads count only those (vmcnt(3) .. vmcnt(0) before their first use) and drain the LDS-DMAs "
    "in flight (loop_s_waitcnt 22 -> 24: with B0 waited for at the top barrier, some of them no longer "
    "share an s_waitcnt with an LDS wait; the modelled cost of those drains is in the generated tables; "
    "scale_prefetch removes those loads).",
    expects=(Expect("loop_s_mov_b32_m0", "down", note="per K step 16 -> 4 in our kernel"),
             Expect("loop_v_readfirstlane", "down", note="one per LDS-DMA load -> 0"),
             Expect("loop_s_add_u32_m0", "up", note="per K step 0 -> 12 in our kernel")),
)


class G2SLoaderAsm(stages.G2SLoader):
    """FlyDSL's ``G2SLoaderAsm``: ``s_mov_b32 m0`` for the first load of a half, ``s_add_u32 m0`` for
    the next three (the 4 instructions of a half are 4 x 1 KiB apart in LDS).  The compiler does not
    see these DMAs, so no alias scopes."""

    ordered = True

    def setup(self):
        """The wave's m0 for each (stage, batch), read-first-laned once here, outside the K loop."""
        p = self.p
        self.m0_base = [[fx.Int32(C.uniform(p.lds + s * STAGE + b * HALF + p.wave * 1024)) for b in range(4)]
                        for s in range(2)]

    def load(self, parity, half, r, soff):
        p = self.p
        is_a, hv = half[0] == "A", int(half[1])
        voff = p.a_voff[hv, r] if is_a else p.b_voff[hv, r]
        rsrc = p.a_rsrc if is_a else p.b_rsrc
        if r == 0:
            m0 = self.m0_base[parity][hv if is_a else 2 + hv]
            stages.inline_asm(None, [m0, voff, rsrc, soff],
                              "s_mov_b32 m0, $0\n\tbuffer_load_dwordx4 $1, $2, $3 offen lds", "s,v,s,s,~{m0}")
        else:
            # s_add_u32 writes SCC: without the clobber the compiler keeps the loop counter's carry
            # in SCC across it (s_add_u32 ... s_addc_u32 around an interleaved DMA) and the loop exits.
            stages.inline_asm(None, [voff, rsrc, soff],
                              "s_add_u32 m0, m0, 4096\n\tbuffer_load_dwordx4 $0, $1, $2 offen lds",
                              "v,s,s,~{m0},~{scc}")


def apply(slots):
    return replace(slots, g2s=G2SLoaderAsm)
