"""Step 5: the step slot reads the next step's B half-1 fragments too and carries them across the loop
edge, so each step's two waits fold into ``s_waitcnt vmcnt(N) lgkmcnt(0)`` + ``s_barrier``."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from ..seeds import PR_990

SWITCH = Switch(
    "b_carry", "Carry the next step's second B operand.", PR_990,
    claim="reading the second B fragment of the next K step in the current step and carrying it across the "
    "loop edge lets the waits fold into s_waitcnt vmcnt(N) lgkmcnt(0) + s_barrier; hot-loop s_waitcnt "
    "68 -> 8 per 4 K steps.",
    mechanism="the B half-1 fragments of step k+1 are ds_read in step k (with its A half-0 and B half-0 "
    "ones, among the MFMAs of blocks (1,0)/(1,1), after the middle wait) and carried across the loop edge; "
    "step k reads only A half 1 (among block (0,0)'s MFMAs, used in blocks (1,0)/(1,1)), so nothing is "
    "consumed in the step that reads it and each step's two waits fold into s_waitcnt vmcnt(N) lgkmcnt(0) "
    "+ s_barrier. Without it (PR #990's before) B half 1 is read in block (0,0) and used in (0,1), so the "
    "compiler waits lgkmcnt(n) per B1 fragment (the seed per B0 fragment too: its top wait has no lgkmcnt, "
    "ours lgkmcnt(0), which closes the seed's LDS race on B0). Either way every load is issued between MFMAs, where the seed puts them "
    "(the order slot's load_after: stages.RowMajorOrder, SerpentineOrder; the former QUIET_TAIL knob, "
    "tuned under the model, is gone).",
    metric="loop_s_waitcnt_per_4k 40 -> 8 at 8192^3 (seed: 68 -> 8; FlyDSL daee90e4 34 per 2 K steps, "
    "ours 22 in gemm-v1, 20 in gemm-v4: no per-fragment B0 waits behind our lgkmcnt(0) top wait); no ds_read run outside the MFMA stream before or after (longest run of loads without an "
    "MFMA: 1, as upstream after). Its modelled sign used to depend on QUIET_TAIL (a knob chosen under "
    "the model: -1.8 % .. +0.9 %); the loads now sit where FlyDSL 741f3d6d puts them (SerpentineOrder.load_after), "
    "and the modelled step with its interval is in the generated tables.",
    expects=(Expect("loop_s_waitcnt_per_4k", "down", seed_before=68, seed_after=8,
                     note="ours 40 -> 8 per 4 K steps (8192^3)"),),
    requires=("g2s_m0",),
)


class StepCarryB:
    """PR #990's "after" (``_one_step(kc, a0f, b0f, b1f_in, ...)``): the top wait (lgkmcnt(0) +
    s_barrier) follows the previous step's reads of A0/B0/B1, so blocks (0,0)/(0,1) refill A0/B0 while
    this step reads its A1 fragments; the middle wait follows those, so blocks (1,0)/(1,1) refill B1/A1
    while the next step's A0, B0 and B1 fragments are read."""

    carried = ("A0", "B0", "B1")
    top_lgkmcnt = 0

    @staticmethod
    def top_blocks(dma, read, mix, scales):
        return [((0, 0), mix(dma("A0"), read("A1", 0))), ((0, 1), mix(dma("B0"), scales))]

    @staticmethod
    def refills(dma):
        return dma("B1")


def apply(slots):
    return replace(slots, step=StepCarryB)
