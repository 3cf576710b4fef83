"""The GEMM builder's slot table: which stage implementation fills each slot of the kernel.

The baseline (``gemm-v0``) fills every slot with a stage of :mod:`.stages`; each step of
:mod:`.steps` that is switched on replaces one or a few of them, in ladder order
(:func:`slots_for`).  How two steps interact is a property of a slot (``loop.uniform_steps`` makes the
scale gather issue a dummy past the end, ``store.transposed`` swaps the MFMA operands, ...), read by
the stage that cares.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import stages, steps


@dataclass(frozen=True)
class Slots:
    shape: type = stages.RuntimeShape  #: M, N and when addresses are computed (static_prologue)
    g2s: type = stages.G2SLoader  #: A/B global -> LDS (g2s_m0)
    s2r: type = stages.S2RLoaderFp4  #: A/B LDS -> VGPR
    scales: type = stages.ScaleLoaderVGPR  #: the E8M0 scales (scale_prefetch)
    mfma: type = stages.Mfma16x16x128Fp4  #: the scaled MFMA (agpr_acc, zero_first_k)
    order: type = stages.RowMajorOrder  #: MFMA order in a block and where its loads go (serpentine)
    step: type = stages.StepPerFragmentWaits  #: what one K step reads and where it waits (b_carry)
    loop: type = stages.TwoStepLoop  #: K steps per loop iteration, peeled steps (k_unroll4)
    store: type = stages.StoreCBf16  #: the epilogue (wide_epilogue)


def slots_for(switches) -> Slots:
    """The slot table of a (validated) switch set: the baseline with every switched-on step applied."""
    table = Slots()
    for step in steps.STEPS:
        if step.SWITCH.name in switches:
            table = step.apply(table)
    return table
