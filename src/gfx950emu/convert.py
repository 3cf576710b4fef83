"""Vector conversions between float formats: the narrow formats of :mod:`.fpformats` (fp4 / fp6 / bf6 /
fp8 / bf8, scaled and packed: ``v_cvt_scalef32_*``, ``v_cvt_pk_*``) and f32 <-> f16 / bf16.  (The f32 <->
integer conversions are rows of the VOP1 table in :mod:`.valu`.)"""
from __future__ import annotations

import numpy as np

from . import fpformats
from .errors import ExecError
from .operands import U32, lanes_of, vsrc, vwriter, write_v
from .valu import as_f32, from_f32

F16_CONVERTS = ("v_cvt_f32_f16", "v_cvt_f16_f32", "v_cvt_f32_bf16")


def is_convert(name):
    return fpformats.is_convert(name) or name in F16_CONVERTS


def build_convert(ins, ctx, name):
    o = ins.operands
    if not fpformats.is_convert(name):
        return _build_f16_convert(ins, ctx, name)
    nd = fpformats.dst_dwords(name)
    i = ctx.vidx(o[0])
    gs = [vsrc(x, ctx, "f32") for x in o[1:]]
    op_sel = tuple(ins.mods.get("op_sel", (0, 0, 0, 0)))
    for k in ins.mods:
        if k != "op_sel":
            raise ctx.err(f"unsupported modifier {k!r} on {name}")

    line = ins.line

    def h(w):
        srcs = [lanes_of(g(w)) for g in gs]
        try:
            r = fpformats.convert(name, srcs, op_sel=op_sel, dst_old=w.v[i].copy(), active=w.exec_mask)
        except ValueError as e:
            raise ExecError(f"line {line}: {e}") from None
        r = np.asarray(r, dtype=U32)
        if nd == 1:
            write_v(w, i, r.reshape(64))
        else:
            for k in range(nd):
                write_v(w, i + k, r[:, k])
    return h


def _build_f16_convert(ins, ctx, name):
    o = ins.operands
    g0 = vsrc(o[1], ctx, "f32" if name == "v_cvt_f16_f32" else "b32")
    i, _ = vwriter(ctx, o[0])
    if name == "v_cvt_f32_f16":
        f = lambda w: from_f32((np.asarray(g0(w), U32) & U32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32))
    elif name == "v_cvt_f32_bf16":
        f = lambda w: (np.asarray(g0(w), U32) & U32(0xFFFF)) << U32(16)
    else:
        f = lambda w: as_f32(np.asarray(g0(w), U32)).astype(np.float16).view(np.uint16).astype(U32)
    return lambda w: write_v(w, i, f(w))
