"""Turn a parsed kernel into a list of :class:`~gfx950emu.decode.Decoded` handlers.

Also holds the SOPP (program control) and MFMA handlers and works out, for
every instruction, which registers it reads and writes and whether it is a
memory op that completes later -- the facts the hazard checker needs.

Counter assignment ([ISA] "S_WAITCNT" and "Data dependency resolution"; LLVM
SIInsertWaitcnts for gfx9): vector memory loads, stores, atomics and LDS DMA
count on VM_CNT and complete in issue order; DS ops count on LGKM_CNT and
complete in order; scalar memory loads count on LGKM_CNT and may complete in
any order.  ``s_waitcnt`` simm16 layout on gfx9: vmcnt = bits 3:0 | 15:14 << 4,
expcnt = bits 6:4, lgkmcnt = bits 11:8.
"""
from __future__ import annotations

import numpy as np

from . import decode as D
from . import memops
from .decode import Ctx, Decoded, DecodeError, U32

try:
    from . import mfma as _mfma
except ImportError:  # pragma: no cover
    _mfma = None

_NOPS = {"s_nop", "s_setprio", "s_sleep", "s_icache_inv", "s_incperflevel", "s_decperflevel",
         "s_ttracedata", "s_sched_barrier", "s_sched_group_barrier", "s_set_inst_prefetch_distance"}


def _cls(name):
    if name == "s_waitcnt":
        return "waitcnt"
    if name == "s_barrier":
        return "barrier"
    if name in _NOPS:
        return "nop"
    if name.startswith(("s_branch", "s_cbranch")):
        return "branch"
    if name == "s_endpgm":
        return "end"
    if name.startswith(("s_load", "s_buffer_load", "s_dcache", "s_memtime", "s_memrealtime")):
        return "smem"
    if name.startswith("s_"):
        return "salu"
    if name.startswith("v_mfma"):
        return "mfma"
    if name.startswith("ds_"):
        return "lds"
    if name.startswith(("buffer_", "global_", "flat_", "scratch_")):
        return "vmem"
    if name.startswith("v_"):
        return "valu"
    return "other"


def waitcnt_counts(mods):
    """(vmcnt, lgkmcnt) of an s_waitcnt; counters not named do not wait."""
    if "simm16" in mods:
        s = mods["simm16"]
        return (s & 0xF) | (((s >> 14) & 3) << 4), (s >> 8) & 0xF
    return mods.get("vmcnt", 63), mods.get("lgkmcnt", 15)


def _build_sopp(ins, ctx, name, d):
    o = ins.operands
    if name in _NOPS:
        return lambda w: None
    if name == "s_endpgm":
        return lambda w: D.ENDPGM
    if name == "s_barrier":
        return lambda w: D.BARRIER
    if name == "s_waitcnt":
        vm, lgkm = waitcnt_counts(ins.mods)
        d.pend = ("wait", vm, lgkm)
        return lambda w: None
    if name.startswith(("s_branch", "s_cbranch_")):
        if not o or o[0].kind != "label":
            raise ctx.err("branch without a label")
        lab = o[0].value
        if lab not in ctx.labels:
            raise ctx.err(f"unknown branch target {lab!r}")
        t = ctx.labels[lab]
        cond = name[len("s_cbranch_"):] if name != "s_branch" else None
        if cond is None:
            def h(w):
                w.pc = t
        elif cond in ("scc0", "scc1"):
            want = int(cond[-1])

            def h(w):
                if w.scc == want:
                    w.pc = t
        elif cond in ("vccz", "vccnz"):
            z = cond == "vccz"

            def h(w):
                if ((w.s[106] | w.s[107]) == 0) == z:
                    w.pc = t
        elif cond in ("execz", "execnz"):
            z = cond == "execz"

            def h(w):
                if ((w.s[126] | w.s[127]) == 0) == z:
                    w.pc = t
        else:
            raise ctx.err(f"branch {name} not implemented")
        return h
    return None


def _build_mfma(ins, ctx, name, d):
    if _mfma is None:
        raise ctx.err("MFMA support (gfx950emu.mfma) is not available")
    o = ins.operands
    m = ins.mods
    for k in m:
        if k not in ("cbsz", "blgp", "abid", "op_sel", "op_sel_hi", "neg_lo", "neg_hi"):
            raise ctx.err(f"unsupported modifier {k!r}")
    if m.get("neg_lo") or m.get("neg_hi"):
        raise ctx.err("neg_lo/neg_hi on MFMA not implemented")
    cbsz, blgp, abid = int(m.get("cbsz", 0)), int(m.get("blgp", 0)), int(m.get("abid", 0))
    op_sel = tuple(m.get("op_sel", (0, 0, 0)))
    op_sel_hi = tuple(m.get("op_sel_hi", (0, 0, 0)))
    try:
        nA, nB, nC = _mfma.register_counts(name, cbsz=cbsz, blgp=blgp)
    except ValueError as e:
        raise ctx.err(str(e)) from None
    scaled = "_scale_" in name
    if len(o) != (6 if scaled else 4):
        raise ctx.err(f"{name} takes {6 if scaled else 4} operands, got {len(o)}")
    for op_, n, what in ((o[0], nC, "D"), (o[1], nA, "A"), (o[2], nB, "B"), (o[3], nC, "C")):
        if op_.kind in ("v", "a") and op_.count != n:
            raise ctx.err(f"{name} operand {what} {op_.text!r} has {op_.count} registers, expected {n}")
    di, ai, bi = ctx.vidx(o[0]), ctx.vidx(o[1]), ctx.vidx(o[2])
    if o[3].kind in ("v", "a"):
        ci = ctx.vidx(o[3])
        cconst = None
    else:
        ci = None
        cconst = np.full((64, nC), D.const_bits(o[3], 32, "f32"), dtype=U32)
    gsa = _lane_getter(o[4], ctx) if scaled else None
    gsb = _lane_getter(o[5], ctx) if scaled else None
    line = ins.line
    reads = set(range(ai, ai + nA)) | set(range(bi, bi + nB))
    if ci is not None:
        reads |= set(range(ci, ci + nC))
    sreads = set()
    if scaled:
        for x in (o[4], o[5]):
            v, s = D.sreg_bits(x, ctx)
            reads |= v
            sreads |= s
    d.vreads = frozenset(reads)
    d.vwrites = frozenset(range(di, di + nC))
    d.sreads = frozenset(sreads)
    kw = dict(cbsz=cbsz, blgp=blgp, op_sel=op_sel, op_sel_hi=op_sel_hi, abid=abid)

    def h(w):
        if not w.exec_full:
            raise memops.ExecError(f"line {line}: MFMA with a partial EXEC mask is not modelled")
        a = w.v[ai:ai + nA].T
        b = w.v[bi:bi + nB].T
        c = w.v[ci:ci + nC].T if ci is not None else cconst
        if scaled:
            r = _mfma.execute(name, a, b, c, scale_a=gsa(w), scale_b=gsb(w), **kw)
        else:
            r = _mfma.execute(name, a, b, c, **kw)
        w.v[di:di + nC] = np.asarray(r, dtype=U32).T
    return h


def _lane_getter(op, ctx):
    """Getter returning a uint32 [64] array for any VALU source (registers need no copy)."""
    if op.kind in ("v", "a") and not (op.neg or op.abs):
        i = ctx.vidx(op)
        return lambda w: w.v[i]
    g = D.vsrc(op, ctx)
    return lambda w: np.full(64, g(w), dtype=U32)


def _regs_of(ops, ctx):
    v, s = set(), set()
    for x in ops:
        a, b = D.sreg_bits(x, ctx)
        v |= a
        s |= b
    return v, s


def _valu_regs(ins, ctx, name, d):
    """Default VALU read/write sets: operand 0 written, the rest read."""
    o = ins.operands
    nwrite = 1
    if name.startswith(("v_add_co_", "v_sub_co_", "v_subrev_co_", "v_addc_co_", "v_subb_co_",
                        "v_subbrev_co_", "v_mad_u64_u32", "v_mad_i64_i32")):
        nwrite = 2
    wv, ws = _regs_of(o[:nwrite], ctx)
    rv, rs = _regs_of(o[nwrite:], ctx)
    if name.startswith(("v_fmac", "v_mac", "v_writelane", "v_permlane")) or name.startswith("v_cvt_scalef32_pk_fp") \
            or name.startswith("v_cvt_scalef32_pk_bf8") or "sdwa" in ins.opcode or "dpp" in ins.opcode:
        rv |= wv
    if name.startswith("v_permlane"):
        wv |= rv
    if ins.opcode.endswith("_e32") and name in ("v_cndmask_b32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"):
        rs |= {106, 107}
    if name in ("v_cmp", ) or name.startswith(("v_cmpx",)):
        ws |= {126, 127}
    d.vreads, d.vwrites = frozenset(rv), frozenset(wv)
    d.sreads, d.swrites = frozenset(rs), frozenset(ws)


def decode_kernel(ks, acc_offset: int, nvgpr: int = 512) -> list:
    """Decode every instruction of a KernelSource; unknown opcodes are errors."""
    ctx = Ctx(acc_offset, ks.labels, nvgpr)
    out = []
    for idx, ins in enumerate(ks.instructions):
        ctx.line, ctx.text = ins.line, ins.text
        try:
            d = _decode_one(ins, ctx)
        except DecodeError:
            raise
        except (KeyError, IndexError, AttributeError, TypeError) as e:
            raise DecodeError(f"line {ins.line}: cannot decode {ins.text!r} ({type(e).__name__}: {e})") from None
        d.index = idx
        out.append(d)
    return out


def _decode_one(ins, ctx):
    op = ins.opcode
    name, sfx = D._base_name(op)
    dpp = sdwa = None
    if name.endswith("_dpp"):
        name = name[:-4]
        dpp = D.Dpp(ins.mods, ctx)
    elif name.endswith("_sdwa"):
        name = name[:-5]
    cls = _cls(name)
    d = Decoded(None, ins.line, op, cls, ins.text)
    fn = None
    if name.startswith("s_"):
        if cls == "smem":
            fn = memops.build_smem(ins, ctx, name)
            if fn is not None and name.startswith(("s_load", "s_buffer_load")):
                o = ins.operands
                d.sreads = frozenset(D.sreg_bits(o[1], ctx)[1] | (D.sreg_bits(o[2], ctx)[1] if len(o) > 2 else set()))
                d.swrites = frozenset(range(o[0].index, o[0].index + o[0].count))
                d.pend = ("smem", frozenset(), d.swrites, False)
        elif cls in ("waitcnt", "barrier", "nop", "branch", "end"):
            fn = _build_sopp(ins, ctx, name, d)
        else:
            if ins.mods:
                raise ctx.err(f"unsupported modifier {next(iter(ins.mods))!r}")
            fn = D.build_salu(ins, ctx, d)
            if fn is not None:
                r, w_ = D.salu_regs(ins, ctx)
                d.sreads, d.swrites = frozenset(r), frozenset(w_)
    elif cls == "mfma":
        fn = _build_mfma(ins, ctx, name, d)
    elif cls == "lds":
        r = memops.build_ds(ins, ctx, name, {})
        if r is not None:
            fn, kind, di, nd, reads = r
            d.vreads = frozenset(reads)
            d.vwrites = frozenset(range(di, di + nd)) if di is not None else frozenset()
            d.pend = ("ds", d.vwrites, frozenset(), kind == "write" or "_rtn" in name or name.startswith("ds_add"))
    elif cls == "vmem":
        if name.startswith("scratch_"):
            r = memops.build_scratch(ins, ctx, name)
            if r is not None:
                fn, reads, writes, sreads = r
                d.vreads, d.vwrites, d.sreads = frozenset(reads), frozenset(writes), frozenset(sreads)
                d.pend = ("vm", d.vwrites, frozenset(), False)
        elif name in memops.BUFFER_CACHE_OPS:
            fn = memops.build_buffer_cache(ins, ctx, name)
            d.pend = ("vm", frozenset(), frozenset(), False)
        elif name.startswith("buffer_"):
            r = memops.build_buffer(ins, ctx, name, {})
            if r is not None:
                fn, kind, ret, lds_mode, di, ndw, ai, o = r
                reads = set(range(ai, ai + (2 if ("idxen" in ins.mods and "offen" in ins.mods) else 1))) if ai is not None else set()
                sreads = set(range(o[2].index, o[2].index + 4)) | D.sreg_bits(o[3], ctx)[1]
                if lds_mode:
                    sreads.add(124)
                writes = set()
                if kind == "load" and not lds_mode:
                    writes = set(range(di, di + ndw))
                elif kind in ("store", "atomic"):
                    reads |= set(range(di, di + ndw))
                    if ret:
                        writes = set(range(di, di + ndw))
                d.vreads, d.vwrites, d.sreads = frozenset(reads), frozenset(writes), frozenset(sreads)
                d.pend = ("vm", d.vwrites, frozenset(), lds_mode)
        else:
            r = memops.build_global(ins, ctx, name, {})
            if r is not None:
                fn, kind, ret, lds_mode, di, ai, saddr, si = r
                nb = 2 if not saddr else 1
                reads = set(range(ai, ai + nb))
                sreads = set(range(si, si + 2)) if saddr else set()
                if lds_mode:
                    sreads.add(124)
                o = ins.operands
                writes = set()
                if kind == "load" and not lds_mode:
                    writes = set(range(di, di + o[0].count))
                elif kind == "store":
                    reads |= set(range(di, di + o[1].count))
                else:
                    dat = o[2] if ret else o[1]
                    reads |= set(range(ctx.vidx(dat), ctx.vidx(dat) + dat.count))
                    if ret:
                        writes = set(range(di, di + o[0].count))
                d.vreads, d.vwrites, d.sreads = frozenset(reads), frozenset(writes), frozenset(sreads)
                d.pend = ("vm", d.vwrites, frozenset(), lds_mode)
    elif cls == "valu":
        if ins.opcode.endswith("_sdwa"):
            if name not in D.VALU32:
                raise ctx.err(f"SDWA form of {name} not implemented")
            sdwa = D.Sdwa(ins.mods, ctx, D.VALU32[name][1])
        if name.startswith(("v_cmp_", "v_cmpx_")):
            if dpp or sdwa:
                raise ctx.err("DPP/SDWA compare not implemented")
            fn = D.build_vopc(ins, ctx, d, name)
        elif name in D.VALU32 and name not in ("v_cndmask_b32",):
            fn = D.build_valu32(ins, ctx, d, name, dpp=dpp, sdwa=sdwa)
        else:
            if dpp or sdwa:
                raise ctx.err(f"DPP/SDWA form of {name} not implemented")
            fn = D.build_valu_special(ins, ctx, d, name, sfx)
        if fn is not None:
            _valu_regs(ins, ctx, name, d)
            if name.startswith("v_cmpx"):
                d.swrites = d.swrites | {126, 127}
    if fn is None:
        raise ctx.err(f"unknown or unsupported opcode {op!r}")
    d.fn = fn
    return d
