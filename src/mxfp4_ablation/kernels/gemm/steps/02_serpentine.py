"""Step 2: the order slot walks a block's MFMAs as a serpentine of 2x2 micro-blocks and spreads the
block's loads over all of them."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from ..seeds import PR_990

SWITCH = Switch(
    "serpentine", "Serpentine MFMA order.", PR_990,
    claim="an issue order learnt from aiter's asm keeps operands hot.",
    mechanism="each 64x64 block is walked as 2x2 micro-blocks of MFMAs sharing one A-scale and one B-scale "
    "register (only op_sel changes); consecutive MFMAs alternately reuse the A or the B operand and the "
    "micro-block rows snake (left-right, then right-left). The same method of the seed "
    "(Mfma16x16x128Fp4.call) also changed where a block's loads go, so this switch carries that too: "
    "before it one load after each of the block's first MFMAs, DMAs then reads (daee90e4: 'one is "
    "issued after each MFMA'); with it the loads riffled and spread over all 32 MFMAs, load t after MFMA "
    "floor(32 t / n) (741f3d6d: slots = {(t * n_mfma) // len(thunks)}); see SerpentineOrder.load_after "
    "(before it stages.RowMajorOrder.load_after).",
    metric="mfma_operand_reuse (share of consecutive MFMA pairs with a common src0 or src1) rises; MFMA "
    "count unchanged.",
    expects=(Expect("mfma_operand_reuse", "up"),),
)


def spread(first, second):
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


class SerpentineOrder:
    """FlyDSL 741f3d6d's ``Mfma16x16x128Fp4._order`` ("xdl buffer emission order learn from aiter's
    asm") and its load slots ``{(t * n_mfma) // len(thunks)}``: load t follows MFMA ``floor(32 t / n)``,
    so ``31 - floor(32 (n - 1) / n)`` MFMAs at a block's end carry no load (2 for 12 or 14 loads, 1 for
    20, 5 for 6); the DMAs and reads riffled (``_riffle``, "proportionally like aiter's asm")."""

    @staticmethod
    def tiles():
        order = []
        for pi in range(2):
            right = pi % 2 == 0
            for pj in ([0, 1] if right else [1, 0]):
                # Enter on the side we came from, so the hop into this micro-block shares an operand.
                cols = (0, 1) if right else (1, 0)
                walk = [(0, cols[0]), (1, cols[0]), (1, cols[1]), (0, cols[1])]
                order += [(2 * pi + a, 2 * pj + b) for a, b in walk]
        return order

    @staticmethod
    def load_after(n_loads, n_mfma):
        return [(t * n_mfma) // n_loads for t in range(n_loads)]

    mix = staticmethod(spread)


def apply(slots):
    return replace(slots, order=SerpentineOrder)
