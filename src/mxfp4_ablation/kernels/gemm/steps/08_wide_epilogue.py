"""Step 8: the store slot writes 16 bytes per lane, which needs the MFMAs to compute C^T
(``transposed``: the pipeline swaps their operands), each block right after its last MFMA."""

from dataclasses import replace

from mxfp4_ablation.family import Expect, Switch

from .. import stages
from ..seeds import PR_990

fx = ir = llvm = rocdl = T = C = None  # FlyDSL, filled on the first build

SWITCH = Switch(
    "wide_epilogue", "16-byte epilogue stores (the MFMA operand swap).", PR_990,
    claim="computing C^T by swapping the MFMA operands gives each lane four consecutive columns of one row; "
    "cvt_pk_bf16 + v_permlane16_swap pair two tiles so a lane holds 8 consecutive bf16 = 16 bytes for one "
    "buffer_store_dwordx4, interleaved into the tail MFMAs.",
    mechanism="operands and scales swapped in every MFMA; each 64x64 block is stored right after its last "
    "MFMA of the last K step.",
    metric="buffer_store_by_width {2: 256} -> {16: 32}; 64 v_permlane16_swap appear.",
    expects=(Expect("buffer_store_2B", "down", note="256 -> 0 in our kernel"),
             Expect("buffer_store_16B", "up", note="0 -> 32 in our kernel")),
)


def _pk_bf16(acc4):
    """Two i32 words of packed bf16: (acc[0], acc[1]) and (acc[2], acc[3])."""
    v = fx.arith.trunc_f(C.vec_type(4, T.bf16), C.raw(acc4))
    pair = C.vec_type(2, T.i32)
    w = llvm.BitcastOp(pair, C.raw(v)).result
    return [llvm.extractelement(w, C.i32(n)) for n in range(2)]


def _permlane16_swap(a, b):
    res = rocdl.permlane16_swap(ir.Type.parse("!llvm.struct<(i32, i32)>"), C.raw(a), C.raw(b), False, False)
    return llvm.extractvalue(T.i32, res, [0]), llvm.extractvalue(T.i32, res, [1])


class StoreC16B(stages.StoreCBf16):
    """FlyDSL's ``StoreCFp4``: with C^T in the accumulators lane l holds 4 consecutive columns of row
    l % 16; two tiles packed to bf16 and paired across 16-lane rows by v_permlane16_swap give each lane
    8 consecutive bf16, one buffer_store_dwordx4."""

    transposed = True
    per_block = True

    def store_block(self, acc, h, v):
        p = self.p
        row0, col0 = p.block_origin(h, v)
        i, g = p.lane % 16, p.lane // 16
        for ti in range(4):
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
                C.buffer_store(vec, p.c_rsrc, (row * p.c_n + col) * 2)


def apply(slots):
    return replace(slots, store=StoreC16B)
