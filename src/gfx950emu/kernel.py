"""Turn a parsed kernel into a list of :class:`~gfx950emu.operands.Decoded` handlers.

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

from . import memops, salu, valu, valu16
from . import mfma as _mfma
from .errors import DecodeError, ExecError
from .operands import BARRIER, ENDPGM, U32, Ctx, Decoded, const_bits, sdst, sreg_bits, ssrc, vsrc
from .valu_special import build_valu_special

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
        return lambda w: ENDPGM
    if name == "s_barrier":
        return lambda w: BARRIER
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


# ---- s_getreg / s_setreg / s_sendmsg / s_trap -----------------------------------------
# [ISA] CDNA3/CDNA4 "Hardware registers" (HW_REG_MODE = hwreg id 1): MODE bits 3:0
# FP_ROUND (0 = round to nearest even for f32 [1:0] and f16/f64 [3:2]), 7:4 FP_DENORM
# (3 = keep denormals for f32 [5:4] and f16/f64 [7:6]), 8 DX10_CLAMP, 9 IEEE, 10+ exception
# enables and debug controls (all 0 at launch).  The emulator's MODE is the launch value
# built from the kernel descriptor; s_getreg reads it; s_setreg of a value equal to the
# current field is a no-op; any change is refused with an ExecError naming the line (the
# emulator does not model other rounding/denormal/IEEE/exception modes).  Other hardware
# registers are refused at load.  Syntax: hwreg(HW_REG_MODE[, offset, size]) or the numeric
# simm16 (id bits 5:0, offset 10:6, size-1 15:11) as LLVM prints them.
_SPECIAL_SALU = {"s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32", "s_sendmsg", "s_trap"}
_HWREG_IDS = {"HW_REG_MODE": 1}


def _hwreg(op, ctx):
    """(id, offset, size) of a hwreg operand."""
    if op.kind == "imm":
        v = op.value & 0xFFFF
        return v & 0x3F, (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1
    t = op.text.strip() if op.kind == "func" else ""
    if not t.startswith("hwreg(") or not t.endswith(")"):
        raise ctx.err(f"expected a hwreg(...) operand, got {op.text!r}")
    parts = [p.strip() for p in t[6:-1].split(",")]
    name = parts[0]
    rid = _HWREG_IDS.get(name, None)
    if rid is None:
        try:
            rid = int(name, 0)
        except ValueError:
            raise ctx.err(f"hardware register {name} is not modelled (only HW_REG_MODE)") from None
    off = int(parts[1], 0) if len(parts) > 1 else 0
    size = int(parts[2], 0) if len(parts) > 2 else 32
    return rid, off, size


def _mode_value(desc):
    g = lambda k: desc.get(k, _FLOAT_DEFAULTS[k])
    return (g("float_round_mode_32") | g("float_round_mode_16_64") << 2
            | g("float_denorm_mode_32") << 4 | g("float_denorm_mode_16_64") << 6
            | desc.get("dx10_clamp", 1) << 8 | desc.get("ieee_mode", 1) << 9)


def _build_special_salu(ins, ctx, name, d):
    o = ins.operands
    line = ins.line
    if ins.mods:
        raise ctx.err(f"unsupported modifier {next(iter(ins.mods))!r}")
    if name == "s_sendmsg":
        # A message to the SPI/host (interrupt, GS/ordered-count messages ...): it does not
        # change this kernel's registers or memory, so the emulator accepts it as a no-op.
        return lambda w: None
    if name == "s_trap":
        def h(w):
            raise ExecError(f"line {line}: s_trap {o[0].text if o else ''} -- the kernel trapped "
                            f"(trap handlers are not modelled)")
        return h
    if name == "s_getreg_b32":
        rid, off, size = _hwreg(o[1], ctx)
        if rid != 1:
            raise ctx.err(f"hardware register id {rid} is not modelled (only HW_REG_MODE)")
        val = (ctx.mode >> off) & ((1 << size) - 1)
        wr = sdst(o[0], ctx)
        d.swrites = frozenset(range(o[0].index, o[0].index + 1))
        return lambda w: wr(w, val)
    rid, off, size = _hwreg(o[0], ctx)
    if rid != 1:
        raise ctx.err(f"hardware register id {rid} is not modelled (only HW_REG_MODE)")
    mask = ((1 << size) - 1) << off
    cur = ctx.mode & mask
    if name == "s_setreg_imm32_b32":
        # an immediate write is applied statically, in program order, to the MODE the
        # following instructions are decoded with; the only change modelled is the f32
        # denormal field (bits 5:4) between 0 (flush) and 3 (keep), as LLVM's f32 division
        # expansion does in flush-to-zero kernels
        new_mode = (ctx.mode & ~mask) | (((o[1].value & 0xFFFFFFFF) << off) & mask)
        if (new_mode ^ ctx.mode) & ~0x30 or ((new_mode >> 4) & 3) not in (0, 3):
            raise ctx.err(f"s_setreg_imm32_b32 changes MODE {ctx.mode:#x} -> {new_mode:#x}; only the f32 "
                          f"denormal field (0 = flush, 3 = keep) may change")
        ctx.mode = new_mode
        ctx.ftz32 = ((new_mode >> 4) & 3) == 0
        return lambda w: None
    else:
        g = ssrc(o[1], ctx)
        d.sreads = frozenset(sreg_bits(o[1], ctx)[1])
    mode = ctx.mode

    def h(w):
        new = (g(w) << off) & mask
        if new != cur:
            raise ExecError(f"line {line}: s_setreg changes MODE from {mode:#x} to {(mode & ~mask) | new:#x}; "
                            f"only the launch MODE (round to nearest even, denormals kept, "
                            f"IEEE={mode >> 9 & 1}) is modelled")
    return h


def _build_mfma(ins, ctx, name, d):
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
        cconst = np.full((64, nC), const_bits(o[3], 32, "f32"), dtype=U32)
    gsa = _scale_getter(o[4], ctx) if scaled else None
    gsb = _scale_getter(o[5], ctx) if scaled else None
    line = ins.line
    reads = set(range(ai, ai + nA)) | set(range(bi, bi + nB))
    if ci is not None:
        reads |= set(range(ci, ci + nC))
    sreads = set()
    if scaled:
        for x in (o[4], o[5]):
            v, s = sreg_bits(x, ctx)
            reads |= v
            sreads |= s
    d.vreads = frozenset(reads)
    d.vwrites = frozenset(range(di, di + nC))
    d.sreads = frozenset(sreads)
    kw = dict(cbsz=cbsz, blgp=blgp, op_sel=op_sel, op_sel_hi=op_sel_hi, abid=abid)
    zsel = _mfma.zero_shortcut(name, **kw)          # A, B, C all +0 -> D = +0 (mfma.zero_shortcut)
    czero = ci is not None or not cconst.any()
    nnz = np.count_nonzero

    def h(w):
        if not w.exec_full:
            raise ExecError(f"line {line}: MFMA with a partial EXEC mask is not modelled")
        v = w.v
        if zsel is not False and czero and not nnz(v[ai:ai + nA]) and not nnz(v[bi:bi + nB]) and (
                ci is None or not nnz(v[ci:ci + nC])) and (
                zsel is None or not (_mfma.nan_scale(gsa(w), zsel[0]) or _mfma.nan_scale(gsb(w), zsel[1]))):
            v[di:di + nC] = 0
            return
        a = w.v[ai:ai + nA].T
        b = w.v[bi:bi + nB].T
        c = w.v[ci:ci + nC].T if ci is not None else cconst
        if scaled:
            r = _mfma.execute(name, a, b, c, scale_a=gsa(w), scale_b=gsb(w), **kw)
        else:
            r = _mfma.execute(name, a, b, c, **kw)
        w.v[di:di + nC] = np.asarray(r, dtype=U32).T
    return h


def _scale_getter(op, ctx):
    """Scale operand of a ``v_mfma_scale_*``.

    A VGPR supplies four E8M0 bytes per lane, op_sel/op_sel_hi pick one (mfma.py).  An SGPR
    or an inline constant is a 32-bit value whose exponent field, bits [30:23], is the E8M0
    scale (so the f32 constant 1.0 means 2**0, E8M0 127) and op_sel does not pick a byte of
    it (issue #12 fix 2: the audit's hardware behaviour; the same "only the exponent field
    of an f32 scale counts" rule as the v_cvt_scalef32_* scale operand, fpformats._scale_pow2).
    Modelled by replicating that byte into all four byte positions.
    """
    if op.kind in ("v", "a"):
        return _lane_getter(op, ctx)
    g = vsrc(op, ctx)

    def f(w):
        e = (int(g(w)) >> 23) & 0xFF
        return np.full(64, e * 0x01010101, dtype=U32)
    return f


def _lane_getter(op, ctx):
    """Getter returning a uint32 [64] array for any VALU source (registers need no copy)."""
    if op.kind in ("v", "a") and not (op.neg or op.abs):
        i = ctx.vidx(op)
        return lambda w: w.v[i]
    g = vsrc(op, ctx)
    return lambda w: np.full(64, g(w), dtype=U32)


def _regs_of(ops, ctx):
    v, s = set(), set()
    for x in ops:
        a, b = sreg_bits(x, ctx)
        v |= a
        s |= b
    return v, s


def _valu_regs(ins, ctx, name, d):
    """Default VALU read/write sets: operand 0 written, the rest read."""
    o = ins.operands
    nwrite = 1
    if name.startswith(("v_add_co_", "v_sub_co_", "v_subrev_co_", "v_addc_co_", "v_subb_co_",
                        "v_subbrev_co_", "v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale_f32")):
        nwrite = 2
    wv, ws = _regs_of(o[:nwrite], ctx)
    rv, rs = _regs_of(o[nwrite:], ctx)
    if name.startswith(("v_fmac", "v_mac", "v_writelane", "v_permlane")) or name.startswith("v_cvt_scalef32_pk_fp") \
            or name.startswith("v_cvt_scalef32_pk_bf8") or "sdwa" in ins.opcode or "dpp" in ins.opcode:
        rv |= wv
    if name.startswith("v_permlane") or name == "v_swap_b32":
        wv |= rv
    osel = ins.mods.get("op_sel", ())
    if name in ("v_swap_b32", "v_cvt_pk_fp8_f32") or (name in valu16.VALU16 and len(osel) > len(o) - 1 and osel[len(o) - 1]):
        rv |= wv
    if name == "v_div_fmas_f32":
        rs |= {106, 107}
    if ins.opcode.endswith("_e32") and name in ("v_cndmask_b32", "v_addc_co_u32", "v_subb_co_u32", "v_subbrev_co_u32"):
        rs |= {106, 107}
    if name in ("v_cmp", ) or name.startswith(("v_cmpx",)):
        ws |= {126, 127}
    d.vreads, d.vwrites = frozenset(rv), frozenset(wv)
    d.sreads, d.swrites = frozenset(rs), frozenset(ws)


#: kernel-descriptor float controls.  [LLVM] AMDGPUUsage "Kernel Descriptor" / .amdhsa_
#: directives: FLOAT_ROUND_MODE_* 0 = round to nearest even (the only one modelled);
#: FLOAT_DENORM_MODE_32: 3 = keep f32 denormals (numpy's behaviour), 0 = flush f32 denormal
#: inputs and results to zero (honoured for the f32 VALU ops, see valu.ftz); the
#: assembler's defaults when a directive is missing: round 0, denorm_32 0 (!), denorm_16_64 3.
#: Anything else is refused (issue #12 fix 6).
_FLOAT_DEFAULTS = {"float_round_mode_32": 0, "float_round_mode_16_64": 0,
                   "float_denorm_mode_32": 0, "float_denorm_mode_16_64": 3}
_FLOAT_OK = {"float_round_mode_32": (0,), "float_round_mode_16_64": (0,),
             "float_denorm_mode_32": (0, 3), "float_denorm_mode_16_64": (3,)}


def float_modes(desc: dict) -> dict:
    """Check a kernel descriptor's float-mode directives; return {"ieee": bool, "ftz32": bool}."""
    for key, ok in _FLOAT_OK.items():
        v = desc.get(key, _FLOAT_DEFAULTS[key])
        if v not in ok:
            what = "rounding other than nearest-even" if "round" in key else "this denormal mode"
            raise DecodeError(f".amdhsa_{key} {v} is not modelled ({what}); the emulator models "
                              f"{key} in {ok} only; refusing rather than guessing")
    ieee = desc.get("ieee_mode", 1)
    if ieee not in (0, 1):
        raise DecodeError(f".amdhsa_ieee_mode {ieee!r} must be 0 or 1")
    return {"ieee": bool(ieee), "ftz32": desc.get("float_denorm_mode_32", 0) == 0}


def decode_kernel(ks, acc_offset: int, nvgpr: int = 512) -> list:
    """Decode every instruction of a KernelSource; unknown opcodes are errors."""
    fm = float_modes(ks.descriptor)
    ctx = Ctx(acc_offset, ks.labels, nvgpr, ieee=fm["ieee"])
    ctx.mode = ctx.launch_mode = _mode_value(ks.descriptor)
    ctx.ftz32 = fm["ftz32"]
    targets = set(ks.labels.values())
    out = []
    for idx, ins in enumerate(ks.instructions):
        ctx.line, ctx.text = ins.line, ins.text
        if idx in targets and ctx.mode != ctx.launch_mode:
            raise DecodeError(f"line {ins.line}: a branch target inside a region where s_setreg changed MODE "
                              f"({ctx.launch_mode:#x} -> {ctx.mode:#x}); the emulator tracks MODE changes "
                              f"only along straight-line code")
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
    name = valu.base_name(op)
    dpp = sdwa = None
    if name.endswith("_dpp"):
        name = name[:-4]
        dpp = valu.Dpp(ins.mods, ctx)
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
                d.sreads = frozenset(sreg_bits(o[1], ctx)[1] | (sreg_bits(o[2], ctx)[1] if len(o) > 2 else set()))
                d.swrites = frozenset(range(o[0].index, o[0].index + o[0].count))
                d.pend = ("smem", frozenset(), d.swrites, False)
        elif cls in ("waitcnt", "barrier", "nop", "branch", "end"):
            fn = _build_sopp(ins, ctx, name, d)
        elif name in _SPECIAL_SALU:
            fn = _build_special_salu(ins, ctx, name, d)
        else:
            if ins.mods:
                raise ctx.err(f"unsupported modifier {next(iter(ins.mods))!r}")
            fn = salu.build_salu(ins, ctx, d)
            if fn is not None:
                r, w_ = salu.salu_regs(ins, ctx)
                d.sreads, d.swrites = frozenset(r), frozenset(w_)
    elif cls == "mfma":
        fn = _build_mfma(ins, ctx, name, d)
    elif cls == "lds":
        r = memops.build_ds(ins, ctx, name)
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
            r = memops.build_buffer(ins, ctx, name)
            if r is not None:
                fn, kind, ret, lds_mode, di, ndw, ai, o = r
                reads = set(range(ai, ai + (2 if ("idxen" in ins.mods and "offen" in ins.mods) else 1))) if ai is not None else set()
                sreads = set(range(o[2].index, o[2].index + 4)) | sreg_bits(o[3], ctx)[1]
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
            r = memops.build_global(ins, ctx, name)
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
            if name not in valu.VALU32:
                raise ctx.err(f"SDWA form of {name} not implemented")
            sdwa = valu.Sdwa(ins.mods, ctx, valu.VALU32[name][1])
        if name.startswith(("v_cmp_", "v_cmpx_")):
            if dpp or sdwa:
                raise ctx.err("DPP/SDWA compare not implemented")
            fn = valu.build_vopc(ins, ctx, d, name)
        elif name in valu.VALU32 and name not in ("v_cndmask_b32",):
            fn = valu.build_valu32(ins, ctx, d, name, dpp=dpp, sdwa=sdwa)
        else:
            if dpp or sdwa:
                raise ctx.err(f"DPP/SDWA form of {name} not implemented")
            fn = build_valu_special(ins, ctx, name)
        if fn is not None:
            _valu_regs(ins, ctx, name, d)
            if name.startswith("v_cmpx"):
                d.swrites = d.swrites | {126, 127}
    if fn is None:
        raise ctx.err(f"unknown or unsupported opcode {op!r}")
    d.fn = fn
    return d
