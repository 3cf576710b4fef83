"""The decoder's building blocks: each gfx950 instruction is pre-decoded once into a Python closure
``h(wave)`` (the instruction families build them: :mod:`.salu`, :mod:`.valu`, :mod:`.valu16`,
:mod:`.valu_special`, :mod:`.convert`, :mod:`.memops`, SOPP and MFMA in :mod:`.kernel`); this module
holds what they share: the decode context, the :class:`Decoded` record, the handler signals, lane
masks, inline constants and the operand getters and writers.

The closures read the wave's register state (``wave.v``: the unified
VGPR/AGPR file as uint32 ``[512, 64]``; ``wave.s``: a list of 128 Python ints
in SGPR encoding order; ``wave.scc``; the EXEC mask) and do the whole 64-lane
operation with numpy.  Branch handlers set ``wave.pc``; ``s_barrier`` and
``s_endpgm`` return a signal to the scheduler.

Semantics sources (cited per group in the family modules):

* [ISA] AMD "AMD Instinct CDNA3 / CDNA4 Instruction Set Architecture" reference
  guides: SOP2/SOP1/SOPK/SOPC/SOPP opcode tables (which ops write SCC and how),
  VOP1/VOP2/VOP3/VOP3P/VOPC opcode tables, "Data Share Operations" (DS),
  "Buffer Instructions" (MUBUF addressing, range checking, LDS DMA),
  "Global/Flat Instructions", "DPP"/"SDWA" sections, "MAI" instructions.
* [LLVM] LLVM AMDGPUUsage and the AMDGPU instruction syntax / operand /
  modifier pages for gfx950 (operand order, inline constants, ``bitop3``,
  ``v_permlane16_swap`` / ``v_permlane32_swap`` and ``v_lshl_add_u64``).

Anything not in the families' tables is rejected at load time with an error
naming the opcode (or modifier) and its line: nothing is skipped silently.
"""
from __future__ import annotations

import struct

import numpy as np

from .errors import DecodeError

U32 = np.uint32
U64 = np.uint64
I32 = np.int32
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF
_LANE_BITS = (np.uint64(1) << np.arange(64, dtype=np.uint64))

BARRIER, ENDPGM = 1, 2


# ------------------------------------------------------------ lane masks ----
def mask_to_int(b: np.ndarray) -> int:
    """bool[64] -> 64-bit lane mask (lane 0 = bit 0)."""
    return int(np.packbits(b, bitorder="little").view("<u8")[0])


def int_to_mask(x: int) -> np.ndarray:
    return (np.uint64(x & M64) & _LANE_BITS) != 0


# ---------------------------------------------------------- constants ------
def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f16_bits(x: float) -> int:
    return int(np.float16(x).view(np.uint16))


def const_bits(op, width=32, ftype="b32") -> int:
    """Bits of an inline constant / literal for an operand of ``width`` bits.

    Integer inline constants (-16..64) are sign-extended to the operand width;
    float inline constants (+-0.5, 1, 2, 4, 1/(2*pi)) take the encoding of the
    operand's float type ([LLVM] AMDGPU operand syntax, "iconst"/"fconst").
    """
    if op.kind == "imm":
        v = op.value
        if width == 64:
            return v & M64
        if ftype in ("f16", "bf16", "b16") and -16 <= v <= 64:
            return v & 0xFFFF
        return v & M32
    if op.kind == "fimm":
        x = float(op.value)
        if width == 64:
            return struct.unpack("<Q", struct.pack("<d", x))[0]
        if ftype == "f16":
            return _f16_bits(x)
        if ftype == "bf16":
            return _f32_bits(x) >> 16
        return _f32_bits(x)
    raise DecodeError(f"operand {op.text!r} is not a constant")


# ------------------------------------------------------------ context ------
class Ctx:
    """Per-kernel decode context (AGPR base of the unified file, labels, line)."""

    def __init__(self, acc_offset: int, labels: dict, nvgpr: int = 512, ieee: bool = True):
        self.acc = acc_offset
        self.labels = labels
        self.nvgpr = nvgpr
        self.line = 0
        self.text = ""
        self.ieee = ieee        # MODE.IEEE from .amdhsa_ieee_mode (1, the compute default)
        self.ftz32 = False      # f32 denormals flushed (MODE.FP_DENORM[5:4] == 0) at this instruction

    def err(self, msg):
        return DecodeError(f"line {self.line}: {msg} in {self.text!r}")

    def vidx(self, op) -> int:
        """Unified-file index of a v/a register operand."""
        if op.kind == "v":
            base = op.index
        elif op.kind == "a":
            base = self.acc + op.index
        else:
            raise self.err(f"expected a VGPR/AGPR operand, got {op.text!r}")
        if base + op.count > self.nvgpr:
            raise self.err(f"register {op.text!r} is outside the {self.nvgpr}-entry register file")
        return base


class Decoded:
    """One pre-decoded instruction: handler plus hazard bookkeeping."""

    __slots__ = ("fn", "line", "opcode", "cls", "vreads", "vwrites", "sreads", "swrites",
                 "pend", "text", "index")

    def __init__(self, fn, line, opcode, cls, text):
        self.fn = fn
        self.line = line
        self.opcode = opcode
        self.cls = cls
        self.text = text
        self.vreads = frozenset()
        self.vwrites = frozenset()
        self.sreads = frozenset()
        self.swrites = frozenset()
        self.pend = None        # ("vm"|"ds"|"smem", vregs, sregs) for ops that complete later
        self.index = 0


# --------------------------------------------------- operand accessors -----
def vsrc(op, ctx, ftype="b32"):
    """Getter for a 32-bit VALU source: returns uint32 [64] or a uint32 scalar."""
    k = op.kind
    if k in ("v", "a"):
        i = ctx.vidx(op)
        f = lambda w: w.v[i]
    elif k == "s":
        i = op.index
        f = lambda w: U32(w.s[i])
    elif k in ("imm", "fimm"):
        c = U32(const_bits(op, 32, ftype))
        f = lambda w: c
    elif k == "scc":
        f = lambda w: U32(w.scc)
    elif k == "vccz":
        f = lambda w: U32(1 if (w.s[106] | w.s[107]) == 0 else 0)
    elif k == "execz":
        f = lambda w: U32(1 if (w.s[126] | w.s[127]) == 0 else 0)
    else:
        raise ctx.err(f"unsupported source operand {op.text!r}")
    if op.neg or op.abs:
        if ftype not in ("f32",):
            raise ctx.err(f"neg/abs modifier on a non-f32 operand {op.text!r}")
        g = f
        if op.abs and op.neg:
            f = lambda w: (g(w) & U32(0x7FFFFFFF)) ^ U32(0x80000000)
        elif op.abs:
            f = lambda w: g(w) & U32(0x7FFFFFFF)
        else:
            f = lambda w: g(w) ^ U32(0x80000000)
    return f


def vsrc64(op, ctx, ftype="b64"):
    """Getter for a 64-bit VALU source (register pair or constant) -> uint64."""
    k = op.kind
    if k in ("v", "a"):
        i = ctx.vidx(op)
        f = lambda w: w.v[i].astype(U64) | (w.v[i + 1].astype(U64) << U64(32))
    elif k == "s":
        i = op.index
        f = lambda w: U64(w.s[i] | (w.s[i + 1] << 32))
    elif k in ("imm", "fimm"):
        c = U64(const_bits(op, 64, ftype))
        f = lambda w: c
    else:
        raise ctx.err(f"unsupported 64-bit source operand {op.text!r}")
    if op.neg or op.abs:
        raise ctx.err("neg/abs on a 64-bit operand is not implemented")
    return f


def sreg_bits(op, ctx):
    """Register indices read by an operand (for hazards): (vregs, sregs)."""
    if op.kind in ("v", "a"):
        b = ctx.vidx(op)
        return set(range(b, b + op.count)), set()
    if op.kind == "s":
        return set(), set(range(op.index, op.index + op.count))
    if op.kind == "vccz":
        return set(), {106, 107}
    if op.kind == "execz":
        return set(), {126, 127}
    return set(), set()


def lanes_of(x, dtype=U32) -> np.ndarray:
    """A getter's result (a [64] array or a scalar) as a [64] array of ``dtype``: the array itself when it
    is one (callers do not write into it), a read-only broadcast of a scalar."""
    a = np.asarray(x, dtype)
    return a if a.shape == (64,) else np.broadcast_to(a, (64,))


def vwriter(ctx, op):
    """Return (index, fn(w, val)) writing a VGPR under EXEC."""
    i = ctx.vidx(op)

    def wr(w, val, i=i):
        if w.exec_full:
            w.v[i] = val
        else:
            np.copyto(w.v[i], val, where=w.exec_mask, casting="unsafe")
    return i, wr


def write_v(w, i, val):
    if w.exec_full:
        w.v[i] = val
    else:
        np.copyto(w.v[i], val, where=w.exec_mask, casting="unsafe")


def ssrc(op, ctx, width=32):
    """Getter for a scalar source as a Python int (32 or 64 bits)."""
    k = op.kind
    if k == "s":
        i = op.index
        if width == 64:
            return lambda w: w.s[i] | (w.s[i + 1] << 32)
        return lambda w: w.s[i]
    if k in ("imm", "fimm"):
        c = const_bits(op, width)
        return lambda w: c
    if k == "scc":
        return lambda w: w.scc
    if k == "vccz":
        return lambda w: 1 if (w.s[106] | w.s[107]) == 0 else 0
    if k == "execz":
        return lambda w: 1 if (w.s[126] | w.s[127]) == 0 else 0
    raise ctx.err(f"unsupported scalar operand {op.text!r}")


def sdst(op, ctx, width=32):
    """Writer fn(w, int) for a scalar destination; keeps the EXEC mask in sync."""
    if op.kind != "s":
        raise ctx.err(f"expected an SGPR destination, got {op.text!r}")
    i = op.index
    touches_exec = i <= 127 and (i + (width // 32) - 1) >= 126
    if width == 64:
        if touches_exec:
            def wr(w, x):
                w.s[i] = x & M32
                w.s[i + 1] = (x >> 32) & M32
                w.sync_exec()
        else:
            def wr(w, x):
                w.s[i] = x & M32
                w.s[i + 1] = (x >> 32) & M32
        return wr
    if touches_exec:
        def wr(w, x):
            w.s[i] = x & M32
            w.sync_exec()
    else:
        def wr(w, x):
            w.s[i] = x & M32
    return wr
