"""Scalar ALU: SOP1, SOP2, SOPK and SOPC ([ISA] opcode tables; the SOPP program-control ops and
s_getreg/s_setreg are in :mod:`.kernel`)."""
from __future__ import annotations

from .operands import M32, M64, sdst, ssrc


def _sx32(x):
    x &= M32
    return x - (1 << 32) if x & 0x80000000 else x


def _sx64(x):
    x &= M64
    return x - (1 << 64) if x >> 63 else x


def _sxn(x, n):
    x &= (1 << n) - 1
    return x - (1 << n) if n and (x >> (n - 1)) & 1 else x


# [ISA] SOP2 table: SCC rules are spelled out per opcode ("SCC = carry out",
# "SCC = (D != 0)", "SCC = overflow", or SCC untouched).
def _ovf32(r):
    return 1 if r > 0x7FFFFFFF or r < -0x80000000 else 0


def _bfe_u(a, b, bits):
    off = b & (bits - 1)
    width = (b >> 16) & 0x7F
    return (a >> off) & ((1 << width) - 1) if width else 0


def _bfe_i(a, b, bits):
    off = b & (bits - 1)
    width = (b >> 16) & 0x7F
    if width == 0:
        return 0
    return _sxn(a >> off, width) & ((1 << bits) - 1)


SOP2 = {
    # name: (width, fn(a, b, scc) -> (result, new_scc or None))
    "s_add_u32": (32, lambda a, b, c: (a + b, (a + b) >> 32)),
    "s_sub_u32": (32, lambda a, b, c: (a - b, 1 if b > a else 0)),
    "s_add_i32": (32, lambda a, b, c: (a + b, _ovf32(_sx32(a) + _sx32(b)))),
    "s_sub_i32": (32, lambda a, b, c: (a - b, _ovf32(_sx32(a) - _sx32(b)))),
    "s_addc_u32": (32, lambda a, b, c: (a + b + c, (a + b + c) >> 32)),
    "s_subb_u32": (32, lambda a, b, c: (a - b - c, 1 if b + c > a else 0)),
    "s_min_i32": (32, lambda a, b, c: (a if _sx32(a) < _sx32(b) else b, int(_sx32(a) < _sx32(b)))),
    "s_min_u32": (32, lambda a, b, c: (min(a, b), int(a < b))),
    "s_max_i32": (32, lambda a, b, c: (a if _sx32(a) > _sx32(b) else b, int(_sx32(a) > _sx32(b)))),
    "s_max_u32": (32, lambda a, b, c: (max(a, b), int(a > b))),
    "s_cselect_b32": (32, lambda a, b, c: (a if c else b, None)),
    "s_cselect_b64": (64, lambda a, b, c: (a if c else b, None)),
    "s_mul_i32": (32, lambda a, b, c: (_sx32(a) * _sx32(b), None)),
    "s_mul_hi_u32": (32, lambda a, b, c: ((a * b) >> 32, None)),
    "s_mul_hi_i32": (32, lambda a, b, c: ((_sx32(a) * _sx32(b)) >> 32, None)),
    "s_bfm_b32": (32, lambda a, b, c: (((1 << (a & 31)) - 1) << (b & 31), None)),
    "s_bfe_u32": (32, lambda a, b, c: _nz(_bfe_u(a, b, 32))),
    "s_bfe_i32": (32, lambda a, b, c: _nz(_bfe_i(a, b, 32))),
    "s_absdiff_i32": (32, lambda a, b, c: _nz(abs(_sx32(a) - _sx32(b)) & M32)),
    "s_lshl1_add_u32": (32, lambda a, b, c: ((a << 1) + b, ((a << 1) + b) >> 32 and 1)),
    "s_lshl2_add_u32": (32, lambda a, b, c: ((a << 2) + b, ((a << 2) + b) >> 32 and 1)),
    "s_lshl3_add_u32": (32, lambda a, b, c: ((a << 3) + b, ((a << 3) + b) >> 32 and 1)),
    "s_lshl4_add_u32": (32, lambda a, b, c: ((a << 4) + b, ((a << 4) + b) >> 32 and 1)),
    "s_pack_ll_b32_b16": (32, lambda a, b, c: ((a & 0xFFFF) | ((b & 0xFFFF) << 16), None)),
    "s_pack_lh_b32_b16": (32, lambda a, b, c: ((a & 0xFFFF) | (b & 0xFFFF0000), None)),
    "s_pack_hh_b32_b16": (32, lambda a, b, c: ((a >> 16) | (b & 0xFFFF0000), None)),
}


def _nz(r):
    return r, int(r != 0)


for _w, _m in ((32, M32), (64, M64)):
    _sfx = "b32" if _w == 32 else "b64"
    SOP2.update({
        f"s_and_{_sfx}": (_w, lambda a, b, c: _nz(a & b)),
        f"s_or_{_sfx}": (_w, lambda a, b, c: _nz(a | b)),
        f"s_xor_{_sfx}": (_w, lambda a, b, c, m=_m: _nz((a ^ b) & m)),
        f"s_andn2_{_sfx}": (_w, lambda a, b, c, m=_m: _nz(a & ~b & m)),
        f"s_orn2_{_sfx}": (_w, lambda a, b, c, m=_m: _nz((a | ~b) & m)),
        f"s_nand_{_sfx}": (_w, lambda a, b, c, m=_m: _nz(~(a & b) & m)),
        f"s_nor_{_sfx}": (_w, lambda a, b, c, m=_m: _nz(~(a | b) & m)),
        f"s_xnor_{_sfx}": (_w, lambda a, b, c, m=_m: _nz(~(a ^ b) & m)),
        f"s_lshl_{_sfx}": (_w, lambda a, b, c, m=_m, w=_w: _nz((a << (b & (w - 1))) & m)),
        f"s_lshr_{_sfx}": (_w, lambda a, b, c, w=_w: _nz(a >> (b & (w - 1)))),
    })
SOP2["s_ashr_i32"] = (32, lambda a, b, c: _nz((_sx32(a) >> (b & 31)) & M32))
SOP2["s_ashr_i64"] = (64, lambda a, b, c: _nz((_sx64(a) >> (b & 63)) & M64))
SOP2["s_bfm_b64"] = (64, lambda a, b, c: ((((1 << (a & 63)) - 1) << (b & 63)) & M64, None))
SOP2["s_bfe_u64"] = (64, lambda a, b, c: _nz(_bfe_u(a, b, 64)))
SOP2["s_bfe_i64"] = (64, lambda a, b, c: _nz(_bfe_i(a, b, 64)))
# shift amounts / bfe controls of the 64-bit forms are 32-bit operands
_SOP2_SRC1_32 = {"s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfe_u64", "s_bfe_i64", "s_bfm_b64"}
_SOP2_SRC0_32 = {"s_bfm_b64"}


def _popcount(x):
    return bin(x).count("1")


def _ff1(x, bits):
    if x == 0:
        return M32
    return (x & -x).bit_length() - 1


def _flbit(x, bits):
    if x == 0:
        return M32
    return bits - x.bit_length()


SOP1 = {
    # name: (width_dst, width_src, fn(a, scc) -> (result, new_scc or None))
    "s_mov_b32": (32, 32, lambda a, c: (a, None)),
    "s_mov_b64": (64, 64, lambda a, c: (a, None)),
    "s_not_b32": (32, 32, lambda a, c: _nz(~a & M32)),
    "s_not_b64": (64, 64, lambda a, c: _nz(~a & M64)),
    "s_brev_b32": (32, 32, lambda a, c: (int(f"{a:032b}"[::-1], 2), None)),
    "s_bcnt0_i32_b32": (32, 32, lambda a, c: _nz(32 - _popcount(a))),
    "s_bcnt1_i32_b32": (32, 32, lambda a, c: _nz(_popcount(a))),
    "s_bcnt1_i32_b64": (32, 64, lambda a, c: _nz(_popcount(a))),
    "s_ff1_i32_b32": (32, 32, lambda a, c: (_ff1(a, 32), None)),
    "s_ff1_i32_b64": (32, 64, lambda a, c: (_ff1(a, 64), None)),
    "s_flbit_i32_b32": (32, 32, lambda a, c: (_flbit(a, 32), None)),
    "s_flbit_i32_b64": (32, 64, lambda a, c: (_flbit(a, 64), None)),
    "s_sext_i32_i8": (32, 32, lambda a, c: (_sxn(a, 8) & M32, None)),
    "s_sext_i32_i16": (32, 32, lambda a, c: (_sxn(a, 16) & M32, None)),
    "s_abs_i32": (32, 32, lambda a, c: _nz(abs(_sx32(a)) & M32)),
}

# [ISA] SOP1 *_saveexec: D = EXEC (old); EXEC = f(S0, EXEC); SCC = (EXEC != 0).
SAVEEXEC = {
    "s_and_saveexec_b64": lambda s, e: s & e,
    "s_or_saveexec_b64": lambda s, e: s | e,
    "s_xor_saveexec_b64": lambda s, e: s ^ e,
    "s_andn2_saveexec_b64": lambda s, e: s & ~e & M64,
    "s_orn2_saveexec_b64": lambda s, e: (s | ~e) & M64,
    "s_nand_saveexec_b64": lambda s, e: ~(s & e) & M64,
    "s_nor_saveexec_b64": lambda s, e: ~(s | e) & M64,
    "s_xnor_saveexec_b64": lambda s, e: ~(s ^ e) & M64,
    "s_andn1_saveexec_b64": lambda s, e: ~s & e & M64,
    "s_orn1_saveexec_b64": lambda s, e: (~s | e) & M64,
}

SOPC = {
    "eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}


def build_salu(ins, ctx, d):
    op = ins.opcode
    o = ins.operands
    if op in SOP2:
        width, fn = SOP2[op]
        if len(o) != 3:
            raise ctx.err(f"{op} takes 3 operands")
        ga = ssrc(o[1], ctx, 32 if op in _SOP2_SRC0_32 else width)
        gb = ssrc(o[2], ctx, 32 if op in _SOP2_SRC1_32 else width)
        wr = sdst(o[0], ctx, width)

        def h(w):
            r, c = fn(ga(w), gb(w), w.scc)
            if c is not None:
                w.scc = c
            wr(w, r)
        return h
    if op in SOP1:
        wd, wsrc, fn = SOP1[op]
        ga = ssrc(o[1], ctx, wsrc)
        wr = sdst(o[0], ctx, wd)

        def h(w):
            r, c = fn(ga(w), w.scc)
            if c is not None:
                w.scc = c
            wr(w, r)
        return h
    if op in ("s_cmov_b32", "s_cmov_b64"):
        width = 64 if op.endswith("64") else 32
        ga, wr = ssrc(o[1], ctx, width), sdst(o[0], ctx, width)

        def h(w):
            if w.scc:
                wr(w, ga(w))
        return h
    if op in SAVEEXEC:
        fn = SAVEEXEC[op]
        ga, wr = ssrc(o[1], ctx, 64), sdst(o[0], ctx, 64)

        def h(w):
            old = w.s[126] | (w.s[127] << 32)
            new = fn(ga(w), old)
            wr(w, old)
            w.s[126], w.s[127] = new & M32, new >> 32
            w.sync_exec()
            w.scc = int(new != 0)
        return h
    if op == "s_movk_i32":
        c = _sxn(o[1].value, 16) & M32
        wr = sdst(o[0], ctx)
        return lambda w: wr(w, c)
    if op == "s_cmovk_i32":
        c = _sxn(o[1].value, 16) & M32
        wr = sdst(o[0], ctx)

        def h(w):
            if w.scc:
                wr(w, c)
        return h
    if op == "s_addk_i32":
        c = _sxn(o[1].value, 16)
        i = o[0].index

        def h(w):
            r = _sx32(w.s[i]) + c
            w.scc = _ovf32(r)
            w.s[i] = r & M32
        return h
    if op == "s_mulk_i32":
        c = _sxn(o[1].value, 16)
        i = o[0].index

        def h(w):
            w.s[i] = (_sx32(w.s[i]) * c) & M32
        return h
    if op.startswith("s_cmpk_"):
        _, _, cond, typ = op.split("_")
        cmp = SOPC[cond]
        i = o[0].index
        if typ == "i32":
            c = _sxn(o[1].value, 16)

            def h(w):
                w.scc = int(cmp(_sx32(w.s[i]), c))
        else:
            c = o[1].value & 0xFFFF

            def h(w):
                w.scc = int(cmp(w.s[i], c))
        return h
    if op.startswith("s_cmp_"):
        _, _, cond, typ = op.split("_")
        cmp = SOPC[cond]
        if typ == "u64":
            ga, gb = ssrc(o[0], ctx, 64), ssrc(o[1], ctx, 64)

            def h(w):
                w.scc = int(cmp(ga(w), gb(w)))
        elif typ == "i32":
            ga, gb = ssrc(o[0], ctx), ssrc(o[1], ctx)

            def h(w):
                w.scc = int(cmp(_sx32(ga(w)), _sx32(gb(w))))
        else:
            ga, gb = ssrc(o[0], ctx), ssrc(o[1], ctx)

            def h(w):
                w.scc = int(cmp(ga(w), gb(w)))
        return h
    if op.startswith("s_bitcmp"):
        want = 0 if op.startswith("s_bitcmp0") else 1
        width = 64 if op.endswith("b64") else 32
        ga, gb = ssrc(o[0], ctx, width), ssrc(o[1], ctx)

        def h(w):
            w.scc = int(((ga(w) >> (gb(w) & (width - 1))) & 1) == want)
        return h
    if op in ("s_bitset0_b32", "s_bitset1_b32"):
        i = o[0].index
        gb = ssrc(o[1], ctx)
        setb = op.startswith("s_bitset1")

        def h(w):
            b = 1 << (gb(w) & 31)
            w.s[i] = (w.s[i] | b) if setb else (w.s[i] & ~b & M32)
        return h
    return None


def salu_regs(ins, ctx):
    """(reads, writes) SGPR sets of a scalar ALU op, for the hazard checker."""
    o = ins.operands
    reads, writes = set(), set()
    op = ins.opcode
    for k, x in enumerate(o):
        if x.kind != "s":
            continue
        cnt = x.count
        regs = set(range(x.index, x.index + cnt))
        if k == 0 and not op.startswith(("s_cmp", "s_bitcmp")):
            writes |= regs
            if op.startswith(("s_addk", "s_mulk", "s_bitset", "s_cmovk", "s_cmov")):
                reads |= regs
        else:
            reads |= regs
    if "saveexec" in op:
        reads |= {126, 127}
        writes |= {126, 127}
    return reads, writes
