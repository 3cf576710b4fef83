"""Vector ALU, 16-bit and packed (VOP3P) ops: f16 / u16 / i16 arithmetic on register halves, the packed
f16 and 16-bit integer forms, and the packed f32 ops (V_PK_*_F32)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .operands import U32, const_bits, vsrc, write_v
from .valu import as_f32, bitop3, fma_f32, from_f32, ftz

# [ISA] CDNA3/CDNA4 VOP2/VOP3 16-bit opcodes: D.f16/u16/i16 = f(S0, S1[, S2]) on the low
# halves; VOP3 op_sel[k] picks the high half of source k and op_sel[nsrc] writes the high
# half of D (keeping the low half).  Without op_sel the high half of D is zeroed on gfx9
# (LLVM GCNSubtarget::zeroesHigh16BitsOfDest: these ops "return getGeneration() <= GFX9";
# v_fmac_f16 preserves instead and is not implemented).  f16 arithmetic is done in f32 and
# rounded once to f16 (exact for add/sub/mul: 24 >= 2*11+2 bits), FMA in float64;
# denormals kept (float_denorm_mode_16_64 = 3).  Packed (VOP3P) forms: the low result
# takes source halves by op_sel, the high result by op_sel_hi (default all 1), neg_lo /
# neg_hi negate f16 inputs; an inline constant feeds both halves (LLVM treats packed
# inline constants as splats).
def _h2f(x):
    return (np.asarray(x, U32) & U32(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float32)


def _f2h(x):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16).view(np.uint16).astype(U32)


def _h_minmax(a, b, is_max):
    fa, fb = _h2f(a), _h2f(b)
    r = np.fmax(fa, fb) if is_max else np.fmin(fa, fb)
    rb = _f2h(r)
    z = ((np.asarray(a, U32) | np.asarray(b, U32)) & U32(0x7FFF)) == 0      # -0 < +0 (fix 5)
    return np.where(z, (a & b) if is_max else (a | b), rb) & U32(0xFFFF)


def _s16(x):
    return (np.asarray(x, U32) & U32(0xFFFF)).astype(np.uint16).view(np.int16).astype(np.int32)


_F16 = {
    "add": (2, lambda a, b: _f2h(_h2f(a) + _h2f(b))),
    "sub": (2, lambda a, b: _f2h(_h2f(a) - _h2f(b))),
    "subrev": (2, lambda a, b: _f2h(_h2f(b) - _h2f(a))),
    "mul": (2, lambda a, b: _f2h(_h2f(a) * _h2f(b))),
    "max": (2, lambda a, b: _h_minmax(a, b, True)),
    "min": (2, lambda a, b: _h_minmax(a, b, False)),
    "fma": (3, lambda a, b, c: _f2h(_h2f(a).astype(np.float64) * _h2f(b) + _h2f(c))),
}
_I16 = {
    "add_u16": (2, lambda a, b: a + b), "sub_u16": (2, lambda a, b: a - b),
    "subrev_u16": (2, lambda a, b: b - a), "mul_lo_u16": (2, lambda a, b: a * b),
    "lshlrev_b16": (2, lambda a, b: b << (a & U32(15))),
    "lshrrev_b16": (2, lambda a, b: (b & U32(0xFFFF)) >> (a & U32(15))),
    "ashrrev_i16": (2, lambda a, b: (_s16(b) >> (a & U32(15)).astype(np.int32)).astype(U32)),
    "max_u16": (2, lambda a, b: np.maximum(a & U32(0xFFFF), b & U32(0xFFFF))),
    "min_u16": (2, lambda a, b: np.minimum(a & U32(0xFFFF), b & U32(0xFFFF))),
    "max_i16": (2, lambda a, b: np.maximum(_s16(a), _s16(b)).astype(U32)),
    "min_i16": (2, lambda a, b: np.minimum(_s16(a), _s16(b)).astype(U32)),
    "mad_u16": (3, lambda a, b, c: (a & U32(0xFFFF)) * (b & U32(0xFFFF)) + c),
}
VALU16 = {f"v_{k}_f16": (n, "f16", f) for k, (n, f) in _F16.items()}
VALU16.update({f"v_{k}": (n, "u16", f) for k, (n, f) in _I16.items()})
VALU_PK16 = {f"v_pk_{k}_f16": (n, "f16", f) for k, (n, f) in _F16.items() if k not in ("sub", "subrev")}
VALU_PK16.update({f"v_pk_{k}": (n, "u16", f) for k, (n, f) in _I16.items()
                  if k in ("add_u16", "sub_u16", "mul_lo_u16", "lshlrev_b16", "lshrrev_b16", "ashrrev_i16",
                           "max_u16", "min_u16", "max_i16", "min_i16")})
#: the 16-bit names decoded by :func:`build_valu16` beyond the two tables
_VALU16_OTHER = ("v_pack_b32_f16", "v_bitop3_b16")
#: the packed f32 ops of :func:`build_pk_f32` and their source counts
PK_F32 = {"v_pk_mul_f32": 2, "v_pk_add_f32": 2, "v_pk_fma_f32": 3, "v_pk_mov_b32": 2}


def is_valu16(name):
    return name in VALU16 or name in VALU_PK16 or name in _VALU16_OTHER


def _half_getter(op, ctx, ftype):
    """Getter of a source's raw 32 bits for a 16-bit op (neg/abs applied per half later)."""
    plain = dataclasses.replace(op, neg=False, abs=False) if (op.neg or op.abs) else op
    g = vsrc(plain, ctx, "f16" if ftype == "f16" else "b16")
    if op.kind in ("imm", "fimm"):
        c = int(g(None)) & 0xFFFF
        c2 = U32(c | (c << 16))                # splat for the packed forms
        return (lambda w: c2), op.neg, op.abs
    return g, op.neg, op.abs


def build_valu16(ins, ctx, name):
    o = ins.operands
    m = ins.mods
    if name == "v_pack_b32_f16":
        allowed, nsrc, kind, fn, packed = {"op_sel"}, 2, "b16", None, False
    elif name == "v_bitop3_b16":
        allowed, nsrc, kind, packed = {"bitop3", "op_sel"}, 3, "b16", False
        fn = bitop3(int(m.get("bitop3", 0)))
    elif name in VALU16:
        nsrc, kind, fn = VALU16[name]
        allowed, packed = {"op_sel", "clamp"}, False
    else:
        nsrc, kind, fn = VALU_PK16[name]
        allowed, packed = {"op_sel", "op_sel_hi", "neg_lo", "neg_hi"}, True
    for k in m:
        if k not in allowed:
            raise ctx.err(f"unsupported modifier {k!r} on {name}")
    if m.get("clamp"):
        # f16: clamp to [0, 1] (NaN -> 0, as the f32 ops); u16 add/sub: unsigned saturation
        if kind == "f16" and not packed and name in VALU16:
            base = fn

            def fn(*a, base=base):
                f = _h2f(base(*a))
                return _f2h(np.where(np.isnan(f), np.float32(0), np.clip(f, np.float32(0), np.float32(1))))
        elif name in ("v_add_u16", "v_sub_u16", "v_subrev_u16"):
            sat = {"v_add_u16": lambda a, b: np.minimum((a & U32(0xFFFF)) + (b & U32(0xFFFF)), U32(0xFFFF)),
                   "v_sub_u16": lambda a, b: np.where((a & U32(0xFFFF)) >= (b & U32(0xFFFF)), (a - b) & U32(0xFFFF), U32(0)),
                   "v_subrev_u16": lambda a, b: np.where((b & U32(0xFFFF)) >= (a & U32(0xFFFF)), (b - a) & U32(0xFFFF), U32(0))}
            fn = sat[name]
        else:
            raise ctx.err(f"clamp on {name} is not implemented")
    if len(o) != nsrc + 1:
        raise ctx.err(f"{name} takes {nsrc + 1} operands, got {len(o)}")
    srcs = [_half_getter(x, ctx, kind) for x in o[1:]]
    if (not packed) and kind != "f16" and any(n_ or a_ for _, n_, a_ in srcs):
        raise ctx.err(f"neg/abs on an integer 16-bit op {name}")
    i = ctx.vidx(o[0])
    sel = tuple(m.get("op_sel", ())) + (0,) * 4
    if packed:
        if any(n_ or a_ for _, n_, a_ in srcs):
            raise ctx.err(f"{name}: write negation as neg_lo/neg_hi (VOP3P has no -x / |x| source modifiers)")
        sel_hi = tuple(m.get("op_sel_hi", (1,) * nsrc)) + (1,) * 4
        nlo = tuple(m.get("neg_lo", ())) + (0,) * 4
        nhi = tuple(m.get("neg_hi", ())) + (0,) * 4
        if kind != "f16" and (any(nlo) or any(nhi)):
            raise ctx.err(f"neg_lo/neg_hi on an integer packed op {name}")

        def half(k, hi, w):
            x = np.asarray(srcs[k][0](w), U32)
            x = (x >> U32(16)) if (sel_hi if hi else sel)[k] else x
            x = x & U32(0xFFFF)
            return x ^ U32(0x8000) if (nhi if hi else nlo)[k] else x

        def h(w):
            lo = np.asarray(fn(*[half(k, 0, w) for k in range(nsrc)]), U32) & U32(0xFFFF)
            hi = np.asarray(fn(*[half(k, 1, w) for k in range(nsrc)]), U32) & U32(0xFFFF)
            write_v(w, i, lo | (hi << U32(16)))
        return h

    def src(k, w):
        g, neg, ab = srcs[k]
        x = np.asarray(g(w), U32)
        x = ((x >> U32(16)) if sel[k] else x) & U32(0xFFFF)
        if ab:
            x = x & U32(0x7FFF)
        if neg:
            x = x ^ U32(0x8000)
        return x

    if name == "v_pack_b32_f16":
        # [ISA] V_PACK_B32_F16: D[15:0] = S0.f16, D[31:16] = S1.f16 (op_sel picks source halves)
        return lambda w: write_v(w, i, src(0, w) | (src(1, w) << U32(16)))
    dst_hi = bool(sel[nsrc])

    def h(w):
        r = np.asarray(fn(*[src(k, w) for k in range(nsrc)]), U32) & U32(0xFFFF)
        if dst_hi:
            r = (w.v[i] & U32(0xFFFF)) | (r << U32(16))
        write_v(w, i, r)
    return h


def build_pk_f32(ins, ctx, name):
    """VOP3P packed f32 ([ISA] V_PK_*_F32): lo result uses op_sel, hi uses op_sel_hi."""
    o = ins.operands
    nsrc = PK_F32[name]
    m = ins.mods
    op_sel = tuple(m.get("op_sel", (0,) * nsrc))
    op_sel_hi = tuple(m.get("op_sel_hi", (1,) * nsrc))
    neg_lo = tuple(m.get("neg_lo", (0,) * nsrc))
    neg_hi = tuple(m.get("neg_hi", (0,) * nsrc))
    for k in m:
        if k not in ("op_sel", "op_sel_hi", "neg_lo", "neg_hi"):
            raise ctx.err(f"unsupported modifier {k!r} on {name}")
    halves = []
    for x in o[1:]:
        if x.kind in ("v", "a"):
            b = ctx.vidx(x)
            halves.append((lambda w, b=b: w.v[b], lambda w, b=b: w.v[b + 1]))
        elif x.kind == "s":
            b = x.index
            halves.append((lambda w, b=b: U32(w.s[b]), lambda w, b=b: U32(w.s[b + 1])))
        elif x.kind in ("imm", "fimm"):
            c = U32(const_bits(x, 32, "f32"))
            halves.append((lambda w, c=c: c, lambda w, c=c: c))
        else:
            raise ctx.err(f"unsupported operand {x.text!r}")
    i = ctx.vidx(o[0])
    ftz = ctx.ftz32 and name != "v_pk_mov_b32"
    out_f = ftz if ftz else (lambda x: x)

    def pick(k, hi_result, w):
        sel = (op_sel_hi if hi_result else op_sel)[k]
        v = halves[k][1 if sel else 0](w)
        if ftz:
            v = ftz(v)
        neg = (neg_hi if hi_result else neg_lo)[k]
        if neg:
            v = v ^ U32(0x80000000)
        return v

    def h(w):
        out = []
        for hi in (0, 1):
            if name == "v_pk_mov_b32":
                # [ISA] V_PK_MOV_B32: D.lo = S0[op_sel[0]], D.hi = S1[op_sel[1]]
                out.append(halves[hi][1 if op_sel[hi] else 0](w))
                continue
            a = [pick(k, hi, w) for k in range(nsrc)]
            if name == "v_pk_mul_f32":
                out.append(from_f32(as_f32(a[0]) * as_f32(a[1])))
            elif name == "v_pk_add_f32":
                out.append(from_f32(as_f32(a[0]) + as_f32(a[1])))
            else:
                out.append(fma_f32(a[0], a[1], a[2]))
        write_v(w, i, out_f(out[0]))         # both halves computed before either is written
        write_v(w, i + 1, out_f(out[1]))
    return h
