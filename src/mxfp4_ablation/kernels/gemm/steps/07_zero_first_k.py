"""Step 7: the MFMA slot starts K step 0 from the inline constant 0 (src2 = 0), so the accumulators
need no zeroing; step 0 is emitted before the loop for it."""

import importlib
from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..seeds import PR_990

C = T = None  # FlyDSL, filled on the first build

# zero_first_k requires agpr_acc: its MFMA is the pinned one, with src2 = 0 where there is no accumulator yet.
agpr_acc = importlib.import_module(f"{__package__}.01_agpr_acc")

SWITCH = Switch(
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
)


class Mfma16x16x128Fp4ZeroAcc(agpr_acc.Mfma16x16x128Fp4Agpr):
    """FlyDSL's ``call(..., zero_acc=True)``: an accumulator of None (step 0, first K half) is the
    inline constant 0 as src2."""

    peel_first = 1

    def initial_acc(self):
        return [None] * 64

    def op(self, a, b, acc, sa, sb, opa, opb):
        if acc is not None:
            return super().op(a, b, acc, sa, sb, opa, opb)
        return stages.inline_asm(C.vec_type(4, T.f32), [a, b, sa, sb],
                                 f"v_mfma_scale_f32_16x16x128_f8f6f4 $0, $1, $2, 0, $3, $4 {self.modifiers(opa, opb)}",
                                 "=a,v,v,v,v")


def apply(slots):
    return replace(slots, mfma=Mfma16x16x128Fp4ZeroAcc)
