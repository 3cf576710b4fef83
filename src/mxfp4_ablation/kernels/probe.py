"""A tiny FlyDSL kernel of ours for exercising the toolchain: ``y = x + x`` over float32.

Not part of the study. It is the smallest real kernel (global loads, one VALU op, global stores) that
the toolchain and ISA tests compile, so they do not depend on the big GEMM/MoE builders.
"""

from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch


@flyc.kernel
def double_kernel(X: fx.Tensor, Y: fx.Tensor, tiled_copy: fx.TiledCopy):
    tid = fx.thread_idx.x
    bid = fx.block_idx.x
    tile = tiled_copy.tile_mn
    gX = fx.flat_divide(X, tile)[None, None, bid, 0]
    gY = fx.flat_divide(Y, tile)[None, None, bid, 0]
    thr = tiled_copy.get_slice(tid)
    sX = thr.partition_S(gX)
    dY = thr.partition_D(gY)
    rX = fx.make_fragment_like(sX)
    rY = fx.make_fragment_like(dY)
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    fx.copy(atom, sX, rX)
    rY.store(rX.load() + rX.load())
    fx.copy(atom, rY, dY)


@flyc.jit
def double(X: fx.Tensor, Y: fx.Tensor, rows: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    atom = fx.make_copy_atom(fx.UniversalCopy128b(), fx.Float32)
    tiled = fx.make_tiled_copy_tv(
        atom, fx.make_ordered_layout((4, 16), order=(1, 0)), fx.make_ordered_layout((1, 4), order=(0, 1))
    )
    double_kernel(X, Y, tiled).launch(grid=(rows // 4, 1, 1), block=(64, 1, 1), stream=stream)


def compile_entry(rows: int = 64):
    """Toolchain entry: ``rows`` x 64 float32 in, the same out (rows a multiple of 4)."""
    if rows % 4:
        raise ValueError(f"probe kernel needs rows to be a multiple of 4, got {rows}")
    x = torch.zeros(rows, 64, dtype=torch.float32)
    return double, (x, torch.empty_like(x), rows)
