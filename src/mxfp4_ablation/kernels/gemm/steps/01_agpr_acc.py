"""Step 1: the MFMA slot becomes inline asm whose result is pinned in AGPRs."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..seeds import PR_756

C = T = None  # FlyDSL, filled on the first build

SWITCH = Switch(
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
    "(gemm-v1) against FlyDSL daee90e4 at 8192^3, measured: 19 of 27 fingerprint metrics within 10 % "
    "(arch_vgpr 244 vs 250, hot loop 490 vs 495 instructions, every LDS read and DMA issued between "
    "MFMAs as there: loop_max_lds_run 1 vs 1); outside: loop s_waitcnt 22 vs 34 per 2 K steps (-35 %, "
    "and so per 128 MFMAs: our top wait is lgkmcnt(0), which closes the seed's LDS race on B0 and leaves "
    "the compiler no per-fragment B0 waits; stages.StepPerFragmentWaits), sgpr 53 vs 69 (-23 %, not "
    "explained yet), s_load 6 vs 8 (ours: 6 s_load_dwordx2; upstream also 2 s_load_dword), s_waitcnt "
    "57 vs 64 (-11 %: 22 vs 34 in the loop, 35 vs 30 outside it), s_barrier 8 vs 9 (one barrier fewer in "
    "our tail), insts_before_first_buffer_load 229 vs 199 (+15 %).",
    expects=(Expect("v_accvgpr_mov", "down", note="accumulator shuffling goes"),
             Expect("arch_vgpr", "down", seed_before=256, note="seed: arch VGPRs hit 256 before")),
)


class Mfma16x16x128Fp4Agpr(stages.Mfma16x16x128Fp4):
    """FlyDSL's ``Mfma16x16x128Fp4._mfma_agpr``: the accumulator is an AGPR tied to the result
    (``=a,...,0``); the byte selects are baked into the text (op_sel = tile in pair, op_sel_hi = K half)."""

    ordered = True  #: inline asm with side effects: nothing moves across it

    @staticmethod
    def modifiers(opa, opb):
        return f"op_sel:[{opa & 1},{opb & 1},0] op_sel_hi:[{opa >> 1},{opb >> 1},0] cbsz:4 blgp:4"

    def op(self, a, b, acc, sa, sb, opa, opb):
        return stages.inline_asm(C.vec_type(4, T.f32), [a, b, sa, sb, acc],
                                 f"v_mfma_scale_f32_16x16x128_f8f6f4 $0, $1, $2, $0, $3, $4 {self.modifiers(opa, opb)}",
                                 "=a,v,v,v,v,0")


def apply(slots):
    return replace(slots, mfma=Mfma16x16x128Fp4Agpr)
