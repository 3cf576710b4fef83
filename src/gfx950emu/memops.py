"""Handlers for memory instructions: SMEM, MUBUF (buffer_*), global/flat, DS (LDS).

Semantics ([ISA] = AMD CDNA3/CDNA4 ISA guide):

* SMEM ([ISA] "Scalar Memory Operations"): address = base + offset with the
  low two bits ignored; ``s_buffer_load`` takes its base from a V# and returns
  0 for dwords at or beyond num_records.
* MUBUF ([ISA] "Buffer Addressing", see memory.py): raw and structured
  addressing; soffset counts toward the range check, idxen with a stride
  checks only the index, ADD_TID buffers are not checked; out-of-range loads
  read 0, out-of-range stores are dropped, both counted in stats.out_of_range.
* LDS DMA (``buffer_load_* ... lds``, ``global_load_lds_*``): each active
  lane's data goes to LDS at ``M0[17:0] + inst_offset + stride * lane`` with
  stride 4 for 1/2/4-byte loads and 16 for the gfx950 12/16-byte loads (LLVM
  "AMDGPU DMA Operations", GFX9 LDS DMA: "implicitly offset by 4 * lane_id
  bytes for sizes up to 4 bytes, and by 16 * lane_id bytes for larger sizes";
  the immediate offset is applied to both the global and the LDS address --
  stated there for the global form, and in the CDNA3 ISA guide's LDS_ADDR
  formula for MUBUF).  M0 is read when the instruction issues.  The 18-bit M0 field covers gfx950's 160 KiB LDS; FlyDSL's
  fp4 GEMM sets M0 above 64 KiB, so the 16-bit field of older chips cannot be
  right here.  Out-of-range lanes write zeros.
* Global ([ISA] "Global Instructions"): address = (saddr ? s[base:base+1] +
  zext(v32) : v[addr:addr+1]) + signed instruction offset.
* DS ([ISA] "Data Share Operations"): address = vaddr + offset (offset0/1 for
  the ``2`` forms, scaled by the element size, times 64 for ``st64``);
  out-of-range reads return 0 and out-of-range writes are dropped.
  ``ds_bpermute_b32``: lane i reads lane ``(addr_i + offset) / 4 mod 64``;
  a source lane that is inactive supplies 0.

Atomics apply lane by lane in lane order (memory.apply_atomic).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import ExecError
from .memory import apply_atomic, decode_vsharp
from .operands import M32, U32, U64, ssrc, write_v

_AR4 = [np.arange(k, dtype=np.int64) for k in range(17)]
_ALL_OK = [np.ones((64, k), dtype=bool) for k in range(5)]


# size in bytes and how loaded bytes land in the destination
_LOAD = {
    "ubyte": (1, "u"), "sbyte": (1, "s"), "ushort": (2, "u"), "sshort": (2, "s"),
    "dword": (4, "d"), "dwordx2": (8, "d"), "dwordx3": (12, "d"), "dwordx4": (16, "d"),
    "short_d16": (2, "lo"), "short_d16_hi": (2, "hi"), "ubyte_d16": (1, "lo"),
    "ubyte_d16_hi": (1, "hi"), "sbyte_d16": (1, "slo"), "sbyte_d16_hi": (1, "shi"),
}
_STORE = {
    "byte": (1, 0), "short": (2, 0), "dword": (4, 0), "dwordx2": (8, 0),
    "dwordx3": (12, 0), "dwordx4": (16, 0), "byte_d16_hi": (1, 16), "short_d16_hi": (2, 16),
}
_ATOMIC = {
    "add": "add", "sub": "sub", "swap": "swap", "and": "and", "or": "or", "xor": "xor",
    "smax": "smax", "smin": "smin", "umax": "umax", "umin": "umin", "inc": "inc", "dec": "dec",
    "add_f32": "add_f32", "pk_add_f16": "pk_add_f16", "pk_add_bf16": "pk_add_bf16",
    "add_f64": "add_f64", "cmpswap": "cmpswap",
}


def _dst_rows(data: np.ndarray, kind: str, old_row=None):
    """[L, n] bytes -> list of uint32 rows for the destination registers."""
    n = data.shape[1]
    if kind == "d":
        dw = np.ascontiguousarray(data).view("<u4")
        return [dw[:, k] for k in range(n // 4)]
    if n == 1:
        v = data[:, 0].astype(U32)
        sv = data[:, 0].view(np.int8).astype(np.int32).view(U32)
    else:
        v = np.ascontiguousarray(data).view("<u2")[:, 0].astype(U32)
        sv = np.ascontiguousarray(data).view("<i2")[:, 0].astype(np.int32).view(U32)
    if kind == "u":
        return [v]
    if kind == "s":
        return [sv]
    if kind in ("lo", "slo"):
        x = (sv & U32(0xFFFF)) if kind == "slo" else v
        return [(old_row & U32(0xFFFF0000)) | x]
    x = (sv & U32(0xFFFF)) if kind == "shi" else v
    return [(old_row & U32(0xFFFF)) | (x << U32(16))]


def _deliver(w, lanes, data, nbytes: int, di: int, how: str, lds_dma) -> None:
    """Hand loaded bytes to their destination: the VGPRs from ``di`` on, or -- for an LDS-DMA load
    (``lds_dma = (inst_offset, lane_stride, line, opcode)``) -- LDS at M0 + inst_offset + lane * lane_stride, with M0
    read now, at issue (LLVM AMDGPUUsage, "AMDGPU DMA Operations").

    This is the one delivery path of buffer, global and scratch loads: with ``w.defer`` set (delivery
    "late"/"random") the write is handed to the hazard tracker as ``w.land``, a closure it runs when
    the op completes (an ``s_waitcnt`` or the end of the wave forces it, or a random legal moment)."""
    if lds_dma is not None:
        inst_off, lane_stride = lds_dma[0], lds_dma[1]
        m0 = w.s[124] & 0x3FFFF
        laddr = m0 + inst_off + lanes.astype(np.int64) * lane_stride
        lidx = laddr[:, None] + _AR4[nbytes][None, :]
        inr = (lidx < w.lds.size).all(axis=1)
        if w.hz is not None:
            w.hz.note_lds_write(w, lidx[inr], lanes[inr], nbytes)
        if not inr.all():
            w.log.lds_outside(w, lidx[~inr], "LDS-DMA write", lds_dma[2], lds_dma[3])
        if w.defer:
            w.land = lambda w_, i=lidx[inr], b=data[inr]: _lds_put(w_, i, b)
        else:
            w.lds[lidx[inr]] = data[inr]
        return
    if w.defer:
        w.land = lambda w_: _vgpr_put(w_, lanes, data, di, how)
        return
    _vgpr_put(w, lanes, data, di, how)


def _lds_put(w, idx, data):
    w.lds[idx] = data


def _vgpr_put(w, lanes, data, di, how):
    """Write loaded bytes [L, n] into the destination VGPRs (d16 forms merge with the register now)."""
    if how == "d" and lanes.size == 64:
        w.v[di:di + data.shape[1] // 4] = np.ascontiguousarray(data).view("<u4").T
        return
    rows = _dst_rows(data, how, w.v[di][lanes] if how not in ("d", "u", "s") else None)
    for k, r in enumerate(rows):
        w.v[di + k, lanes] = r


def _src_bytes(w, vi, nbytes, shift, lanes):
    """Bytes [L, nbytes] of the data registers starting at unified index vi."""
    nd = max(1, (nbytes + 3) // 4)
    regs = w.v[vi:vi + nd][:, lanes].T
    if shift:
        regs = regs >> U32(shift)
    return np.ascontiguousarray(regs.astype("<u4")).view(np.uint8)[:, :nbytes]


class VmemOp(NamedTuple):
    """What a vector-memory opcode name says (see :func:`vmem_op`)."""

    kind: str          # "load", "store" or "atomic"
    nbytes: int
    how: str = "d"     # load: how the bytes land in the destination (_LOAD)
    shift: int = 0     # store: bit offset of the data in its register (the d16_hi forms)
    atomic: str = ""   # atomic: the memory.apply_atomic op
    lds: bool = False  # load_lds_*: an LDS-DMA load that says so in its name (global_load_lds_dword)


def vmem_op(rest):
    """The one decoder of buffer / global / flat / scratch opcode names: ``rest`` is the name after its
    prefix (``load_dwordx4``, ``store_short_d16_hi``, ``atomic_cmpswap_x2``, ``load_lds_dword``);
    None when it names no op of ours."""
    if rest.startswith("load_lds_"):
        op = vmem_op("load_" + rest[len("load_lds_"):])
        return None if op is None else op._replace(lds=True)
    kind, _, sfx = rest.partition("_")
    if kind == "load" and sfx in _LOAD:
        nbytes, how = _LOAD[sfx]
        return VmemOp("load", nbytes, how=how)
    if kind == "store" and sfx in _STORE:
        nbytes, shift = _STORE[sfx]
        return VmemOp("store", nbytes, shift=shift)
    if kind == "atomic":
        x2 = sfx.endswith("_x2")
        op = _ATOMIC.get(sfx[:-3] if x2 else sfx)
        if op is not None:
            return VmemOp("atomic", 8 if (x2 or op == "add_f64") else 4, atomic=op)
    return None


# ------------------------------------------------------------------ SMEM ----
def build_smem(ins, ctx, name):
    o = ins.operands
    if name in ("s_dcache_wb", "s_dcache_inv", "s_dcache_wb_vol", "s_dcache_inv_vol"):
        return lambda w: None
    if name in ("s_memtime", "s_memrealtime"):
        i = o[0].index

        def h(w):
            t = w.executed
            w.s[i], w.s[i + 1] = t & M32, (t >> 32) & M32
        return h
    buf = name.startswith("s_buffer_load_")
    sfx = name[len("s_buffer_load_"):] if buf else name[len("s_load_"):]
    n = {"dword": 1, "dwordx2": 2, "dwordx4": 4, "dwordx8": 8, "dwordx16": 16}.get(sfx)
    if n is None or not name.startswith(("s_load_", "s_buffer_load_")):
        return None
    di = o[0].index
    bi = o[1].index
    if len(o) > 2 and o[2].kind == "imm":
        c = int(o[2].value)            # immediate offsets are signed (21 bits on gfx9)
        goff = lambda w: c
    else:
        goff = ssrc(o[2], ctx) if len(o) > 2 else (lambda w: 0)
    extra = int(ins.mods.get("offset", 0))
    for k in ins.mods:
        if k not in ("glc", "offset", "nv", "dlc"):
            raise ctx.err(f"unsupported modifier {k!r}")
    line = ins.line

    def h(w):
        off = goff(w)
        if not buf:
            addr = ((w.s[bi] | (w.s[bi + 1] << 32)) + off + extra) & ~3
            idx = w.mem.offsets(np.array([addr], dtype=np.uint64), 4 * n, line)[0]
            vals = w.mem.heap[idx].view("<u4")
        else:
            vs = decode_vsharp(w.s[bi:bi + 4])
            base_off = (off + extra) & ~3
            vals = np.zeros(n, dtype=np.uint32)
            ok = [k for k in range(n) if base_off + 4 * k + 4 <= vs["num_records"]]
            if ok:
                addrs = np.array([vs["base"] + base_off + 4 * k for k in ok], dtype=np.uint64)
                idx = w.mem.offsets(addrs, 4, line)
                vals[ok] = w.mem.heap[idx].view("<u4")[:, 0]
        if w.defer:
            w.land = lambda w_, v=[int(x) for x in vals]: _sgpr_put(w_, di, v)
            return
        _sgpr_put(w, di, [int(x) for x in vals])
    return h


def _sgpr_put(w, di, vals):
    n = len(vals)
    w.s[di:di + n] = vals
    if di <= 127 < di + n or di <= 126 < di + n:
        w.sync_exec()


# ----------------------------------------------------------------- MUBUF ----
#: cache-control MUBUF ops: no data, no effect on the values a kernel sees (every access here is
#: coherent); they count on vmcnt like other VMEM ops (LLVM SIInsertWaitcnts carves only the
#: BUFFER_WBINVL1* / GL0/GL1_INV invalidates out of the VMEM events, and SIMemoryLegalizer follows a
#: gfx940 release's BUFFER_WBL2 with a vmcnt(0) wait).
BUFFER_CACHE_OPS = ("buffer_wbl2", "buffer_inv")


def build_buffer_cache(ins, ctx, name):
    for x in ins.operands:               # the parser reads "buffer_wbl2 sc1" as a label operand
        if x.kind != "label" or x.text not in ("sc0", "sc1", "nt"):
            raise ctx.err(f"{name} takes only sc0/sc1/nt, got {x.text!r}")
    for k in ins.mods:
        if k not in ("sc0", "sc1", "nt"):
            raise ctx.err(f"unsupported modifier {k!r}")
    return lambda w: None


def build_buffer(ins, ctx, name):
    o = ins.operands
    m = ins.mods
    for k in m:
        if k not in ("offen", "idxen", "offset", "lds", "glc", "slc", "nt", "sc0", "sc1"):
            raise ctx.err(f"unsupported modifier {k!r}")
    offen, idxen = bool(m.get("offen")), bool(m.get("idxen"))
    inst_off = int(m.get("offset", 0))
    lds_mode = bool(m.get("lds"))
    line = ins.line
    vop = vmem_op(name[len("buffer_"):])
    if vop is None or vop.lds:
        return None
    kind, nbytes, how, shift, op, _ = vop
    if kind == "atomic" and (m.get("glc") or m.get("sc0")):
        ret = True
    else:
        ret = False
    if lds_mode and len(o) == 3:
        # gfx950 syntax of LDS DMA omits vdata: "buffer_load_dwordx4 vaddr, s[rsrc], soffset offen lds"
        o = (o[0],) + tuple(o)
    if len(o) != 4:
        raise ctx.err(f"{name} takes 4 operands, got {len(o)}")
    vdata = o[0]
    vaddr = o[1]
    rsrc = o[2].index
    gsoff = ssrc(o[3], ctx)
    if (offen or idxen) and vaddr.kind not in ("v", "a"):
        raise ctx.err("offen/idxen need a VGPR address")
    ai = ctx.vidx(vaddr) if (offen or idxen) else None
    di = None if lds_mode else ctx.vidx(vdata)
    if lds_mode and kind != "load":
        raise ctx.err("lds modifier on a non-load")
    if lds_mode and how != "d" and nbytes > 4:
        raise ctx.err("unsupported LDS DMA size")
    ndw = (nbytes + 3) // 4
    if kind == "atomic" and op == "cmpswap":
        ndw *= 2            # data = (new, compare); the hazard sets over-approximate the returned half
    lane_stride = 4 if nbytes <= 4 else 16      # LLVM AMDGPUDMAOperations: 4*lane (<=4 B), 16*lane (12/16 B)
    lane_iota = np.arange(64, dtype=np.uint64)

    def address(w, lanes):
        """(addresses [L], in-range [L, ndw]) -- memory.py describes the range check."""
        vs = decode_vsharp(w.s[rsrc:rsrc + 4])
        if vs["swizzle_en"] or vs["cache_swizzle"]:
            raise ExecError(f"line {line}: swizzled buffer descriptors are not modelled")
        if offen:
            off = (w.v[ai + (1 if idxen else 0)][lanes].astype(np.int64) + inst_off) & M32
        else:
            off = np.full(len(lanes), inst_off, dtype=np.int64)
        soff = gsoff(w) & M32
        stride = vs["stride"]
        nr = vs["num_records"]
        off = off + soff                          # soffset counts toward the range
        base = vs["base"]
        if not idxen and not vs["add_tid"]:
            if int(off.max()) + nbytes <= nr:            # common case: everything in range
                return (off + base).astype(U64), _ALL_OK[ndw][:len(lanes)]
            dw_end = off[:, None] + np.minimum(4 * (_AR4[ndw] + 1), nbytes)[None, :]
            ok = dw_end <= nr                                  # [L, ndw] per-dword check
            return (off + base).astype(U64), ok
        vidx = w.v[ai][lanes].astype(U64) if idxen else np.zeros(len(lanes), U64)
        addr = U64(base) + off.astype(U64)
        if vs["add_tid"]:                         # ADD_TID buffers are not range-checked
            vidx = vidx + lane_iota[lanes]
            return addr + vidx * U64(stride), _ALL_OK[ndw][:len(lanes)]
        if stride == 0:                           # idxen with stride 0: the index adds nothing
            dw_end = off[:, None] + np.minimum(4 * (_AR4[ndw] + 1), nbytes)[None, :]
            return addr, dw_end <= nr
        ok = np.broadcast_to((vidx < nr)[:, None], (len(lanes), ndw))    # index check only
        return addr + vidx * U64(stride), ok

    def byte_ok(ok):
        return np.repeat(ok, 4, axis=1)[:, :nbytes]

    if kind == "load":
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            addr, ok = address(w, lanes)
            if ok.all():
                data = w.mem.gather(w.mem.starts(addr, nbytes, line), nbytes)
            elif ok.any():
                w.log.buffer_oob(name, line, int((~ok).any(axis=1).sum()))
                bok = byte_ok(ok)
                data = np.zeros((lanes.size, nbytes), dtype=np.uint8)
                good = bok.any(axis=1)
                idx = w.mem.offsets(addr[good], nbytes, line)
                data[good] = np.where(bok[good], w.mem.heap[idx], 0)
            else:
                w.log.buffer_oob(name, line, lanes.size)
                data = np.zeros((lanes.size, nbytes), dtype=np.uint8)
            _deliver(w, lanes, data, nbytes, di, how, (inst_off, lane_stride, line, name) if lds_mode else None)
    elif kind == "store":
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            addr, ok = address(w, lanes)
            data = _src_bytes(w, di, nbytes, shift, lanes)
            if ok.all():
                w.mem.scatter(w.mem.starts(addr, nbytes, line), data)
                return
            w.log.buffer_oob(name, line, int((~ok).any(axis=1).sum()))
            if ok.any():
                bok = byte_ok(ok)
                idx = addr[:, None].astype(np.int64) + _AR4[nbytes][None, :]
                keep = bok.reshape(-1)
                flat = idx.reshape(-1)[keep]
                w.mem.store(w.mem.offsets(flat.astype(U64), 1, line), data.reshape(-1)[keep].reshape(-1, 1))
    else:
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            addr, ok = address(w, lanes)
            good = ok.all(axis=1)
            if not good.all():
                w.log.buffer_oob(name, line, int((~good).sum()))
            vals = _atomic_data(w, di, nbytes, lanes, op)
            old = np.zeros(lanes.size, dtype=vals.dtype)
            if good.any():
                idx = w.mem.offsets(addr[good], nbytes, line)
                old[good] = w.mem.atomic(op, idx, vals[good], nbytes)
            if ret:
                _ret_put(w, di, lanes, old)
    return h, kind, ret, lds_mode, di, ndw, ai, o


def _atomic_data(w, di, nbytes, lanes, op):
    """Per-lane atomic operand: [L] words, or [L, 2] (new, compare) words for cmpswap."""
    n = nbytes // 4 * (2 if op == "cmpswap" else 1)
    vals = np.ascontiguousarray(w.v[di:di + n][:, lanes].T)
    if nbytes == 8:
        vals = vals.view("<u8")
    return vals if op == "cmpswap" else vals[:, 0]


def _ret_put(w, di, lanes, old):
    """The pre-op values an atomic returns (now, or when it completes under deferred delivery)."""
    o32 = old.view("<u4").reshape(lanes.size, -1)
    if w.defer:
        w.land = lambda w_: _ret_commit(w_, di, lanes, o32)
    else:
        _ret_commit(w, di, lanes, o32)


def _ret_commit(w, di, lanes, o32):
    for k in range(o32.shape[1]):
        w.v[di + k, lanes] = o32[:, k]


# ---------------------------------------------------------------- global ----
def build_global(ins, ctx, name):
    o = ins.operands
    m = ins.mods
    for k in m:
        if k not in ("offset", "glc", "slc", "nt", "sc0", "sc1", "lds"):
            raise ctx.err(f"unsupported modifier {k!r}")
    inst_off = int(m.get("offset", 0))
    flat = name.startswith("flat_")
    pre = "flat_" if flat else "global_"
    line = ins.line
    vop = vmem_op(name[len(pre):])
    if vop is None:
        return None
    kind, nbytes, how, shift, op, lds_mode = vop
    ret = kind == "atomic" and len(o) == (3 if flat else 4)
    if kind == "load" and not lds_mode:
        di, ao, so = ctx.vidx(o[0]), o[1], (o[2] if len(o) > 2 else None)
    elif lds_mode:
        di, ao, so = None, o[0], (o[1] if len(o) > 1 else None)
    elif kind == "store" or not ret:
        ao, di, so = o[0], ctx.vidx(o[1]), (o[2] if len(o) > 2 else None)
        ri = None
    else:
        ri, ao, di, so = ctx.vidx(o[0]), o[1], ctx.vidx(o[2]), (o[3] if len(o) > 3 else None)
    ai = ctx.vidx(ao)
    lane_stride = 4 if nbytes <= 4 else 16
    saddr = so is not None and so.kind == "s"
    si = so.index if saddr else None

    def address(w, lanes):
        if saddr:
            return U64(w.s[si] | (w.s[si + 1] << 32)) + w.v[ai][lanes].astype(U64) + U64(inst_off & 0xFFFFFFFFFFFFFFFF) if inst_off >= 0 else \
                U64(w.s[si] | (w.s[si + 1] << 32)) + w.v[ai][lanes].astype(U64) - U64(-inst_off)
        a = w.v[ai][lanes].astype(U64) | (w.v[ai + 1][lanes].astype(U64) << U64(32))
        return a + U64(inst_off) if inst_off >= 0 else a - U64(-inst_off)

    if kind == "load":
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            data = w.mem.gather(w.mem.starts(address(w, lanes), nbytes, line), nbytes)
            _deliver(w, lanes, data, nbytes, di, how, (inst_off, lane_stride, line, name) if lds_mode else None)
    elif kind == "store":
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            w.mem.scatter(w.mem.starts(address(w, lanes), nbytes, line), _src_bytes(w, di, nbytes, shift, lanes))
    else:
        def h(w):
            lanes = w.active
            if lanes.size == 0:
                return
            idx = w.mem.offsets(address(w, lanes), nbytes, line)
            vals = _atomic_data(w, di, nbytes, lanes, op)
            old = w.mem.atomic(op, idx, vals, nbytes)
            if ret:
                _ret_put(w, ri, lanes, old)
    return h, kind, ret, lds_mode, (ri if kind == "atomic" and ret else di), ai, saddr, si


# -------------------------------------------------------------------- DS ----
_DS_READ = {"b32": (4, "d"), "b64": (8, "d"), "b96": (12, "d"), "b128": (16, "d"),
            "u8": (1, "u"), "i8": (1, "s"), "u16": (2, "u"), "i16": (2, "s"),
            "u8_d16": (1, "lo"), "u8_d16_hi": (1, "hi"), "i8_d16": (1, "slo"), "i8_d16_hi": (1, "shi"),
            "u16_d16": (2, "lo"), "u16_d16_hi": (2, "hi")}
_DS_WRITE = {"b8": (1, 0), "b16": (2, 0), "b32": (4, 0), "b64": (8, 0), "b96": (12, 0), "b128": (16, 0),
             "b8_d16_hi": (1, 16), "b16_d16_hi": (2, 16)}
_DS_ATOMIC = {"add_u32": "add", "sub_u32": "sub", "and_b32": "and", "or_b32": "or", "xor_b32": "xor",
              "max_u32": "umax", "min_u32": "umin", "max_i32": "smax", "min_i32": "smin",
              "add_f32": "add_f32", "inc_u32": "inc", "dec_u32": "dec", "wrxchg_b32": "swap",
              "pk_add_bf16": "pk_add_bf16", "pk_add_f16": "pk_add_f16"}


def _lds_read(w, addr, nbytes, line=0, name="ds_read"):
    """Gather [L, nbytes] from LDS for byte addresses addr (int64 [L]); OOB reads 0 (and is logged)."""
    size = w.lds.size
    if nbytes % 4 == 0 and not (addr & 3).any() and addr.size and addr.max() + nbytes <= size:
        dw = w.lds32[(addr >> 2)[:, None] + _AR4[nbytes // 4][None, :]]
        return dw.view(np.uint8).reshape(addr.size, nbytes)
    idx = addr[:, None] + _AR4[nbytes][None, :]
    ok = (idx >= 0) & (idx < size)
    out = np.zeros(idx.shape, dtype=np.uint8)
    out[ok] = w.lds[idx[ok]]
    if not ok.all():
        w.log.lds_outside(w, idx[~ok], "read", line, name)
    return out


def _lds_index(w, addr, nbytes, what, line, name):
    """(byte indices [L, nbytes], in-range mask or None when all in range) of an LDS access; an access
    outside the kernel's allocation is logged (hardware drops such writes and reads 0)."""
    idx = addr[:, None] + _AR4[nbytes][None, :]
    if idx.size and (int(addr.min()) < 0 or int(addr.max()) + nbytes > w.lds.size):
        ok = (idx >= 0) & (idx < w.lds.size)
        w.log.lds_outside(w, idx[~ok], what, line, name)
        return idx, ok
    return idx, None


def _lds_write_at(w, idx, ok, data):
    if ok is None:
        w.lds[idx] = data
    else:
        w.lds[idx[ok]] = data[ok]


def _later(w, fn):
    """Run ``fn(w)`` now (delivery "issue") or hand it to the hazard tracker to run when the DS op
    completes: DS ops complete in order, so a deferred DS op reads and writes LDS at completion."""
    if w.defer:
        w.land = fn
    else:
        fn(w)


def build_ds(ins, ctx, name):
    o = ins.operands
    m = ins.mods
    for k in m:
        if k not in ("offset", "offset0", "offset1", "gds"):
            raise ctx.err(f"unsupported modifier {k!r}")
    if m.get("gds"):
        raise ctx.err("GDS is not modelled")
    rest = name[3:]
    raw_off = m.get("offset", 0)
    if isinstance(raw_off, str) and rest != "swizzle_b32":
        raise ctx.err(f"cannot read offset {raw_off!r}")
    off = 0 if rest == "swizzle_b32" else int(raw_off)
    line = ins.line

    def addr_of(w, ai, lanes, extra):
        return w.v[ai][lanes].astype(np.int64) + extra

    if rest.startswith("read_") and rest[5:] in _DS_READ:
        nbytes, how = _DS_READ[rest[5:]]
        di, ai = ctx.vidx(o[0]), ctx.vidx(o[1])

        def h(w):
            lanes = w.active
            a = addr_of(w, ai, lanes, off)
            if w.hz is not None:
                w.hz.check_lds_read(w, a, nbytes, lanes, line)
            if w.defer:
                w.land = lambda w_: _vgpr_put(w_, lanes, _lds_read(w_, a, nbytes, line, name), di, how)
                return
            _vgpr_put(w, lanes, _lds_read(w, a, nbytes, line, name), di, how)
        return h, "read", di, (nbytes + 3) // 4, [ai]
    if rest.startswith(("read2_", "read2st64_")) and rest.split("_", 1)[1] in ("b32", "b64"):
        st = 64 if rest.startswith("read2st64") else 1
        esz = 4 if rest.endswith("b32") else 8
        o0, o1 = int(m.get("offset0", 0)) * esz * st, int(m.get("offset1", 0)) * esz * st
        di, ai = ctx.vidx(o[0]), ctx.vidx(o[1])
        nd = esz // 4

        def h(w):
            lanes = w.active
            base = addr_of(w, ai, lanes, 0)
            if w.hz is not None:
                for oo in (o0, o1):
                    w.hz.check_lds_read(w, base + oo, esz, lanes, line)

            def land(w_):
                for k, oo in enumerate((o0, o1)):
                    dw = np.ascontiguousarray(_lds_read(w_, base + oo, esz, line, name)).view("<u4")
                    for j in range(nd):
                        w_.v[di + k * nd + j, lanes] = dw[:, j]
            _later(w, land)
        return h, "read", di, 2 * nd, [ai]
    if rest.startswith("write_") and rest[6:] in _DS_WRITE:
        nbytes, shift = _DS_WRITE[rest[6:]]
        ai, si = ctx.vidx(o[0]), ctx.vidx(o[1])

        def h(w):
            lanes = w.active
            a = addr_of(w, ai, lanes, off)
            data = _src_bytes(w, si, nbytes, shift, lanes)
            idx, ok = _lds_index(w, a, nbytes, "write", line, name)
            if w.hz is not None:
                w.hz.note_lds_write(w, idx if ok is None else idx[ok.all(axis=1)], lanes, nbytes)
            if w.defer:
                w.land = lambda w_: _lds_write_at(w_, idx, ok, data)
            else:
                _lds_write_at(w, idx, ok, data)
        return h, "write", None, 0, [ai] + [si + k for k in range((nbytes + 3) // 4)]
    if rest.startswith(("write2_", "write2st64_")) and rest.split("_", 1)[1] in ("b32", "b64"):
        st = 64 if rest.startswith("write2st64") else 1
        esz = 4 if rest.endswith("b32") else 8
        o0, o1 = int(m.get("offset0", 0)) * esz * st, int(m.get("offset1", 0)) * esz * st
        ai, s0, s1 = ctx.vidx(o[0]), ctx.vidx(o[1]), ctx.vidx(o[2])

        def h(w):
            lanes = w.active
            base = addr_of(w, ai, lanes, 0)
            parts = []
            for si_, oo in ((s0, o0), (s1, o1)):
                idx, ok = _lds_index(w, base + oo, esz, "write", line, name)
                if w.hz is not None:
                    w.hz.note_lds_write(w, idx if ok is None else idx[ok.all(axis=1)], lanes, esz)
                parts.append((idx, ok, _src_bytes(w, si_, esz, 0, lanes)))

            def land(w_):
                for idx, ok, data in parts:
                    _lds_write_at(w_, idx, ok, data)
            _later(w, land)
        return h, "write", None, 0, [ai] + [s + k for s in (s0, s1) for k in range(esz // 4)]
    if rest in ("bpermute_b32", "permute_b32"):
        di, ai, si = ctx.vidx(o[0]), ctx.vidx(o[1]), ctx.vidx(o[2])
        back = rest == "bpermute_b32"

        def h(w):
            sel = ((w.v[ai].astype(np.int64) + off) >> 2) & 63
            data = np.where(w.exec_mask, w.v[si], U32(0))
            if back:
                res = data[sel]
            else:
                res = np.zeros(64, dtype=U32)
                act = np.flatnonzero(w.exec_mask)
                res[sel[act]] = data[act]
            if w.defer:
                ex, full = w.exec_mask, w.exec_full
                w.land = lambda w_: _vrow_put(w_, di, res, ex, full)
            else:
                write_v(w, di, res)
        return h, "read", di, 1, [ai, si]
    if rest in ("read_b64_tr_b4", "read_b64_tr_b8", "read_b64_tr_b16"):
        di, ai = ctx.vidx(o[0]), ctx.vidx(o[1])
        src_lane, src_elem, bits = _tr_maps(int(rest.rsplit("_b", 1)[1]))

        def h(w):
            lanes = w.active
            a = addr_of(w, ai, lanes, off)
            if w.hz is not None:
                w.hz.check_lds_read(w, a, 8, lanes, line)

            def land(w_):
                raw = np.zeros((64, 8), dtype=np.uint8)       # an inactive lane supplies 0
                raw[lanes] = _lds_read(w_, a, 8, line, name)
                res = _transpose_b64(raw, src_lane, src_elem, bits)
                dw = res.view("<u4")
                w_.v[di, lanes] = dw[lanes, 0]
                w_.v[di + 1, lanes] = dw[lanes, 1]
            _later(w, land)
        return h, "read", di, 2, [ai]
    if rest == "swizzle_b32":
        di, si = ctx.vidx(o[0]), ctx.vidx(o[1])
        src_lane = _swizzle_lanes(m.get("offset", 0), ctx)

        def h(w):
            data = np.where(w.exec_mask, w.v[si], U32(0))     # an inactive source lane gives 0
            res = data[src_lane]
            if w.defer:
                ex, full = w.exec_mask, w.exec_full
                w.land = lambda w_: _vrow_put(w_, di, res, ex, full)
            else:
                write_v(w, di, res)
        return h, "read", di, 1, [si]
    atom_name = rest.replace("_rtn", "") if "_rtn_" in rest else rest
    if atom_name == "wrxchg_b32" and "_rtn_" not in rest:
        return None             # ds_wrxchg exists only as the returning form
    if atom_name in _DS_ATOMIC:
        op = _DS_ATOMIC[atom_name]
        ret = "_rtn_" in rest
        if ret:
            ri, ai, si = ctx.vidx(o[0]), ctx.vidx(o[1]), ctx.vidx(o[2])
        else:
            ri, ai, si = None, ctx.vidx(o[0]), ctx.vidx(o[1])

        def h(w):
            lanes = w.active
            a = addr_of(w, ai, lanes, off)
            ok = (a >= 0) & (a + 4 <= w.lds.size)
            idx = a[ok][:, None] + _AR4[4][None, :]
            vals = w.v[si][lanes][ok]
            if not ok.all():
                _lds_index(w, a, 4, "atomic", line, name)
            if w.hz is not None:
                if ok.any():
                    w.hz.check_lds_read(w, a[ok], 4, lanes[ok], line)
                    w.hz.note_lds_write(w, idx, lanes[ok], 4)

            def land(w_):
                old = np.zeros(lanes.size, dtype=U32)
                if ok.any():
                    old[ok] = apply_atomic(w_.lds, op, idx, vals, 4)
                if ret:
                    w_.v[ri, lanes] = old
            _later(w, land)
        return h, ("read" if ret else "write"), ri, (1 if ret else 0), [ai, si]
    return None


def _tr_maps(bits):
    """ds_read_b64_tr_b{16,8,4} (gfx950, CDNA4 ISA "MFMA Transpose Load from LDS"): each lane reads 64
    bits = n = 64/bits elements that run along the matrix's non-K dimension; within each group of 16
    lanes the 16 x n block is transposed so that lane j ends up with n consecutive K elements of
    non-K row j: lane j, element e comes from lane (j // n) + (16 // n) * e, element j mod n (Triton's chooseDotDsReadB64TrLayout: register
    bits -> non-K, the low lane bits -> non-K blocks of n, the next lane bits -> K)."""
    n = 64 // bits
    j = np.arange(64)[:, None]
    e = np.arange(n)[None, :]
    g = (j // 16) * 16
    jj = j % 16
    return g + jj // n + (16 // n) * e, np.broadcast_to(jj % n, (64, n)), bits


def _transpose_b64(raw, src_lane, src_elem, bits):
    """raw bytes [64, 8] -> transposed bytes [64, 8] (see _tr_maps)."""
    if bits == 16:
        el = raw.view("<u2")
    elif bits == 8:
        el = raw
    else:
        el = np.empty((64, 16), dtype=np.uint8)
        el[:, 0::2], el[:, 1::2] = raw & 0xF, raw >> 4       # low nibble is element 0
    out = el[src_lane, src_elem]
    if bits == 4:
        out = (out[:, 0::2] | (out[:, 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(out).view(np.uint8).reshape(64, 8)


def _swizzle_lanes(offset, ctx):
    """Source lane of each lane for ds_swizzle_b32 (GCN3/CDNA ISA "DS_SWIZZLE_B32"; LLVM AMDGPU asm
    "swizzle pattern"): offset[15] = 1 is quad-permute mode (lane 4g+i takes lane 4g + offset[2i+1:2i]);
    otherwise bit-mask mode within each 32 lanes: j = ((i & and) | or) ^ xor with and = offset[4:0],
    or = offset[9:5], xor = offset[14:10].  Takes the raw offset or LLVM's swizzle(...) macro."""
    if isinstance(offset, str):
        offset = _swizzle_macro(offset, ctx)
    offset = int(offset)
    if not 0 <= offset <= 0xFFFF:
        raise ctx.err(f"ds_swizzle offset {offset:#x} is not a 16-bit value")
    lane = np.arange(64)
    if offset & 0x8000:
        sel = np.array([(offset >> (2 * k)) & 3 for k in range(4)])
        return (lane & ~3) | sel[lane & 3]
    a, o_, x = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (lane & 0x20) | ((((lane & 0x1F) & a) | o_) ^ x)


def _swizzle_macro(text, ctx):
    import re
    mt = re.fullmatch(r"\s*swizzle\(\s*(\w+)\s*((?:,[^,)]*)*)\)\s*", text)
    if not mt:
        raise ctx.err(f"cannot read the swizzle pattern {text!r}")
    mode = mt.group(1).upper()
    args = [a.strip() for a in mt.group(2).split(",")[1:]]
    try:
        if mode == "QUAD_PERM":
            v = [int(a, 0) for a in args]
            return 0x8000 | v[0] | v[1] << 2 | v[2] << 4 | v[3] << 6
        if mode == "BITMASK_PERM":
            pat = args[0].strip('"')
            a = o_ = x = 0
            for k, c in enumerate(pat):
                bit = 1 << (4 - k)
                if c in "pi":
                    a |= bit
                if c == "i":
                    x |= bit
                if c == "1":
                    o_ |= bit
            return a | o_ << 5 | x << 10
        gs = int(args[0], 0)
        if mode == "BROADCAST":
            return (0x1F & ~(gs - 1)) | int(args[1], 0) << 5
        if mode == "SWAP":
            return 0x1F | gs << 10
        if mode == "REVERSE":
            return 0x1F | (gs - 1) << 10
    except (IndexError, ValueError):
        raise ctx.err(f"cannot read the swizzle pattern {text!r}") from None
    raise ctx.err(f"swizzle mode {mode} is not modelled")


def _vrow_put(w, di, res, ex, full):
    if full:
        w.v[di] = res
    else:
        np.copyto(w.v[di], res, where=ex, casting="unsafe")


# --------------------------------------------------------------- scratch ----
def build_scratch(ins, ctx, name):
    """scratch_load/store ([ISA] "Scratch Instructions"; gfx940+ architected flat scratch):
    per-lane private memory at byte address (vaddr | 0) + (saddr | 0) + offset.  The
    hardware's per-lane swizzle is invisible to the program, so each lane gets its own
    byte array of the kernel's private_segment_fixed_size."""
    o = ins.operands
    m = ins.mods
    for k in m:
        if k not in ("offset", "glc", "slc", "nt", "sc0", "sc1"):
            raise ctx.err(f"unsupported modifier {k!r}")
    inst_off = int(m.get("offset", 0))
    line = ins.line
    vop = vmem_op(name[len("scratch_"):])
    if vop is None or vop.lds or vop.kind == "atomic":
        return None
    kind, nbytes, how, shift, _, _ = vop
    if kind == "load":
        di, ao, so = ctx.vidx(o[0]), o[1], o[2]
    else:
        ao, di, so = o[0], ctx.vidx(o[1]), o[2]
    ai = ctx.vidx(ao) if ao.kind in ("v", "a") else None
    si = so.index if so.kind == "s" else None
    ar = np.arange(nbytes, dtype=np.int64)

    def offsets(w, lanes):
        a = np.full(lanes.size, inst_off, dtype=np.int64)
        if ai is not None:
            a = a + w.v[ai][lanes].astype(np.int64)
        if si is not None:
            a = a + w.s[si]
        w.private = (lanes, a)
        idx = a[:, None] + ar[None, :]
        if idx.size and (idx.min() < 0 or idx.max() >= w.scratch.shape[1]):
            raise ExecError(f"line {line}: scratch access at byte {int(idx.min())}..{int(idx.max())} is outside "
                            f"the kernel's {w.scratch.shape[1]}-byte private segment")
        return idx

    if kind == "load":
        def h(w):
            lanes = w.active
            data = w.scratch[lanes[:, None], offsets(w, lanes)]
            _deliver(w, lanes, data, nbytes, di, how, None)
        reads = {ai} if ai is not None else set()
        writes = set(range(di, di + (nbytes + 3) // 4))
    else:
        def h(w):
            lanes = w.active
            w.scratch[lanes[:, None], offsets(w, lanes)] = _src_bytes(w, di, nbytes, shift, lanes)
        reads = ({ai} if ai is not None else set()) | set(range(di, di + (nbytes + 3) // 4))
        writes = set()
    sreads = {si} if si is not None else set()
    return h, reads, writes, sreads
