"""Small helpers shared by our FlyDSL kernels (gfx950 only).

The kernels in this package talk to the hardware through a handful of
primitives: buffer resources, ``buffer_load`` to VGPRs, ``buffer_load ... lds``
(LDS DMA), ``ds_read`` through a raw LDS pointer, ``buffer_store``, the scaled
MFMA, and -- for the MoE kernels, which may take their buffers as bare 64-bit
addresses -- global memory by address (buffer resources, pointers, loads and
stores from an argument's address) and an ``scf.if`` block.  Keeping them here
lets the kernels read like the data movement they describe instead of like MLIR
plumbing.

The IR helpers must be called from inside a ``@flyc.kernel`` body (they emit IR
at the current insertion point); the kernarg helpers at the bottom
(``kernarg_entries``, ``kernarg_values``, ``metadata_args``) are plain Python.
"""

from __future__ import annotations

import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import llvm, scf
from flydsl.expr import rocdl
from flydsl.expr.typing import T

#: MFMA operand format code for E2M1 (fp4) in the ``cbsz`` / ``blgp`` fields of
#: ``v_mfma_scale_f32_16x16x128_f8f6f4`` (0=fp8 e4m3, 1=bf8, 2=fp6, 3=bf6, 4=fp4).
FMT_FP4 = 4


def raw(v):
    """Unwrap an fx value (Int32, Vector, ...) into a plain ``ir.Value``."""
    return v if isinstance(v, ir.Value) else fx.as_ir_value(v)


def i32(v):
    """Coerce a Python int or fx/ir integer into an ``ir.Value`` of type i32."""
    if isinstance(v, ir.Value) and v.type == T.i32:
        return v
    return raw(fx.Int32(v))


def vec_type(n: int, elem=None):
    """``vector<n x elem>`` (elem defaults to i32)."""
    return ir.VectorType.get([n], elem if elem is not None else T.i32)


def buffer_rsrc(tensor, nbytes=None):
    """A buffer resource (V#) for ``tensor``; ``nbytes`` enables the hardware
    out-of-bounds check against that many bytes (loads past it return 0,
    stores are dropped)."""
    bt = fx.rocdl.make_buffer_tensor(tensor, max_size=nbytes is None, num_records_bytes=nbytes)
    return fx.rocdl.get_buffer_rsrc(fx.get_iter(bt))


def uniform(v):
    """``v_readfirstlane``: force a (wave-uniform) value into an SGPR."""
    return rocdl.readfirstlane(T.i32, i32(v))


def buffer_load(rsrc, voffset, n_dwords: int, soffset=0):
    """``buffer_load_dword{,x2,x3,x4}``: n_dwords i32 per lane from ``rsrc`` at
    byte offset ``voffset`` (per lane) + ``soffset`` (scalar)."""
    ty = T.i32 if n_dwords == 1 else vec_type(n_dwords)
    return rocdl.raw_ptr_buffer_load(ty, raw(rsrc), i32(voffset), i32(soffset), aux=0)


def buffer_store(value, rsrc, voffset, soffset=0):
    """``buffer_store_dword*`` of ``value`` (i32 or vector of i32/f32)."""
    aux = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0)
    rocdl.raw_ptr_buffer_store(raw(value), raw(rsrc), i32(voffset), i32(soffset), aux=aux)


def lds_ptr(addr_i32):
    """An ``!llvm.ptr<3>`` (LDS pointer) from an i32 byte address."""
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), i32(addr_i32))


def lds_addr(field):
    """Byte address (i32) of an allocated LDS field (``lds.<name>``)."""
    return fx.Int32(fx.ptrtoint(field.ptr))


def lds_dma_dwordx4(rsrc, lds_base, voffset, soffset=0):
    """``buffer_load_dwordx4 ... offen lds``: every lane fetches 16 bytes from
    global ``voffset``+``soffset`` and the hardware writes lane ``l``'s bytes to
    LDS ``M0 + 16*l`` (M0 = ``lds_base``, which must be wave-uniform).  The data
    never passes through VGPRs."""
    rocdl.raw_ptr_buffer_load_lds(raw(rsrc), lds_ptr(lds_base), i32(16), i32(voffset), i32(soffset), i32(0), i32(0))


def ds_read_b128(addr_i32):
    """``ds_read_b128``: 16 bytes per lane from LDS byte address ``addr_i32``
    (per lane, 16-byte aligned), as ``vector<4xi32>``."""
    return llvm.LoadOp(vec_type(4), lds_ptr(addr_i32), alignment=16).result


def ds_read_b32(addr_i32):
    """``ds_read_b32``: one i32 per lane from LDS byte address ``addr_i32``."""
    return llvm.LoadOp(T.i32, lds_ptr(addr_i32), alignment=4).result


def fp4_operand(v4i32):
    """Widen a 16-byte fp4 operand (32 E2M1 values per lane) to the 8-dword
    operand the scaled-MFMA intrinsic expects (the upper half is ignored for
    fp4, so it is zero)."""
    zero = raw(fx.Int32(0))
    parts = [llvm.extractelement(raw(v4i32), raw(fx.Int32(i))) for i in range(4)]
    return raw(fx.Vector.from_elements([fx.Int32(p) for p in parts] + [fx.Int32(zero)] * 4, fx.Int32))


def mfma_scale_fp4(a, b, acc, scale_a, scale_b, opsel_a=0, opsel_b=0):
    """The plain (compiler-allocated) ``v_mfma_scale_f32_16x16x128_f8f6f4`` with
    both operands fp4 (cbsz=blgp=4): returns ``acc + (A*sa) x (B*sb)`` as
    ``vector<4xf32>``.  ``a``/``b`` are 16-byte ``vector<4xi32>`` operands;
    ``scale_a``/``scale_b`` i32 registers whose byte ``opsel_*`` is the E8M0
    scale of this lane's 32-element K block."""
    return rocdl.mfma_scale_f32_16x16x128_f8f6f4(
        vec_type(4, T.f32),
        [fp4_operand(a), fp4_operand(b), raw(acc), FMT_FP4, FMT_FP4, opsel_a, i32(scale_a), opsel_b, i32(scale_b)],
    )


def zeros_f32x4():
    """A ``vector<4xf32>`` of zeros (an accumulator's initial value)."""
    return raw(fx.Vector.from_elements([fx.Float32(0.0)] * 4, fx.Float32))


def allocate_lds(nbytes: int):
    """A kernel's LDS block, allocated (call it in the kernel body): one 16-byte-aligned array of ``nbytes``
    bytes, ``.buf`` (its byte address: :func:`lds_addr`)."""
    shared = fx.struct(type("Shared", (), {"__annotations__": {"buf": fx.Array[fx.Int8, nbytes, 16]}}))
    return fx.SharedAllocator().allocate(shared).peek()


# --------------------------------------------------------------------------- global memory by address
#
# A global buffer reaches a kernel as an ``fx.Tensor`` argument (a pointer and its layout block) or, with
# the MoE kernels' ``int64_abi``, as a bare 64-bit address (``fx.Int64``); from its address a kernel builds
# buffer resources and plain global pointers alike.

#: Buffer resource (V#) dword 3 for gfx9 raw buffers (32-bit data format, no swizzle), as FlyDSL's
#: ``make_buffer_ptr`` builds it.
BUFFER_FLAGS = (7 << 12) | (4 << 15)


def buffer_arg(bare_address: bool):
    """The parameter type of a global buffer argument: ``fx.Int64`` (its bare address) or ``fx.Tensor``."""
    return fx.Int64 if bare_address else fx.Tensor


def address(arg):
    """The base address (an i64 ``ir.Value``) of a global buffer argument, whichever type it has
    (:func:`buffer_arg`)."""
    if isinstance(arg, fx.Tensor):
        return raw(fx.Int64(fx.ptrtoint(fx.get_iter(arg))))
    return raw(fx.Int64(arg))


def global_ptr(addr_i64):
    """An ``!llvm.ptr<1>`` (global pointer) from an i64 address."""
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), raw(addr_i64))


def gep(ptr, off):
    """``getelementptr i8, ptr, off``: ``ptr`` (any address space) plus ``off`` bytes (an i32, sign-extended,
    or an i64 ``ir.Value``)."""
    off = off if isinstance(off, ir.Value) and off.type == T.i64 else i32(off)
    return llvm.GEPOp(ptr.type, ptr, [off], [-(2 ** 31)], T.i8, None).result


def global_load(addr_i64, off, ty=None, const=0):
    """One ``ty`` (default i32) from global memory at ``addr_i64 + off`` (+ ``const`` bytes: a constant
    GEP, which rides in the instruction's offset): ``s_load`` when the address is uniform, else
    ``global_load``."""
    ptr = gep(global_ptr(addr_i64), off)
    if const:
        ptr = llvm.GEPOp(ptr.type, ptr, [], [const], T.i8, None).result
    return llvm.LoadOp(ty or T.i32, ptr, alignment=4).result


def global_store(value, addr_i64, off, align):
    """``value`` to global memory at ``addr_i64 + off`` (``global_store_*``; ``align`` in bytes)."""
    llvm.StoreOp(raw(value), gep(global_ptr(addr_i64), off), alignment=align)


def buffer_rsrc_at(addr_i64, nbytes):
    """A buffer resource (V#) for the buffer at ``addr_i64`` with a bound of ``nbytes`` (a Python int or an
    i64 value; ``0xFFFFFFFF``: unbounded)."""
    n = raw(fx.Int64(nbytes))
    return rocdl.make_buffer_rsrc(ir.Type.parse("!llvm.ptr<8>"), global_ptr(addr_i64), raw(fx.Int16(0)), n,
                                  raw(fx.Int32(BUFFER_FLAGS)))


class if_then:
    """``with if_then(cond):`` -- an ``scf.if`` without results or else branch; its block closes with the
    yield."""

    def __init__(self, cond):
        self.op = scf.IfOp(raw(cond), [], has_else=False)

    def __enter__(self):
        self.ip = ir.InsertionPoint(self.op.then_block)
        self.ip.__enter__()

    def __exit__(self, *exc):
        if exc[0] is None:
            scf.YieldOp([])
        self.ip.__exit__(*exc)


# --------------------------------------------------------------------------- kernargs
#
# How FlyDSL 0.5 lays out the kernel arguments (read off the metadata ``.args`` of
# our compiled kernels, and FlyDSL's ``compiler/jit_argument.py``):
#
# * an ``fx.Tensor`` becomes TWO entries: a ``global_buffer`` (the 8-byte base
#   pointer) followed by a ``by_value`` block holding every dimension as an i32,
#   then the stride of every non-unit-stride dimension as an i64 (a 2-D row-major
#   tensor: ``<i32 rows, i32 cols, i64 row_stride>`` = 16 bytes);
# * an ``fx.Int32`` becomes one 4-byte ``by_value``;
# * an ``fx.Int64`` holding a buffer's bare address (the MoE kernels' ``int64_abi``) is one 8-byte
#   ``by_value``.
#
# Each entry is aligned to its natural alignment (8 for pointers and for blocks
# holding an i64, else 4).


def _tensor_layout_bytes(t) -> bytes:
    import struct

    shape = [int(d) for d in t.shape]
    strides = [int(s) for s in t.stride()]
    dyn_strides = [s for s in strides if s != 1]
    return struct.pack("<" + "i" * len(shape) + "q" * len(dyn_strides), *shape, *dyn_strides)


def kernarg_values(spec) -> list:
    """The kernarg list ``gfx950emu.launch(args=...)`` takes, one value per metadata
    ``.args`` entry: the tensor itself for a ``global_buffer``, and for a
    ``by_value`` its bytes as one little-endian int (the emulator packs an int into
    the entry's size)."""
    return [e["tensor"] if e["kind"] == "global_buffer" else int.from_bytes(e["bytes"], "little")
            for e in kernarg_entries(spec)]


def kernarg_entries(spec, bare_addresses: bool = False) -> list:
    """Turn ``[(name, value), ...]`` (a torch tensor or a Python int each, in the
    kernel's parameter order) into a described kernarg list, one dict per
    metadata ``.args`` entry, in order:

    * ``{"name", "kind": "global_buffer", "offset", "size": 8, "tensor"}`` -- the
      emulator allocates ``tensor``'s bytes and writes their address here;
    * ``{"name", "kind": "by_value", "offset", "size", "bytes"}`` -- raw bytes.

    ``bare_addresses``: every tensor is one 8-byte address (an ``fx.Int64`` parameter, the MoE kernels'
    ``int64_abi``; the metadata calls it ``by_value``) instead of a pointer and its layout block.  Every
    offset follows from the entries before it and each entry's alignment, whatever the order.
    """
    out, offset = [], 0
    for name, value in spec:
        for entry, align in _kernarg_pieces(name, value, bare_addresses):
            offset = -(-offset // align) * align
            out.append({**entry, "offset": offset})
            offset += entry["size"]
    return out


def _kernarg_pieces(name, value, bare_address: bool) -> list:
    """The metadata entries of one kernel argument with their alignments: ``[(entry, align), ...]``."""
    if isinstance(value, bool) or not (isinstance(value, int) or hasattr(value, "stride")):
        raise ValueError(f"kernel argument {name!r} must be a torch tensor or an int, got {type(value).__name__}.")
    if isinstance(value, int):
        return [({"name": name, "kind": "by_value", "size": 4,
                  "bytes": int(value).to_bytes(4, "little", signed=True)}, 4)]
    pointer = ({"name": name, "kind": "global_buffer", "size": 8, "tensor": value}, 8)
    if bare_address:
        return [pointer]
    layout = _tensor_layout_bytes(value)
    align = 8 if len(layout) % 8 == 0 and len(layout) > len(value.shape) * 4 else 4
    return [pointer, ({"name": f"{name}.layout", "kind": "by_value", "size": len(layout), "bytes": layout}, align)]


def metadata_args(isa_text: str) -> list:
    """The ``.args`` list of the first kernel in an ``.s`` file's AMDGPU metadata,
    as ``[{"offset", "size", "value_kind"}, ...]`` (for checking kernarg_entries)."""
    lines = isa_text.split(".amdgpu_metadata", 1)[-1].splitlines()
    start = next((n for n, line in enumerate(lines) if line.strip() == ".args:"), None)
    if start is None:
        raise ValueError("the ISA text has no AMDGPU metadata .args list.")
    indent = len(lines[start]) - len(lines[start].lstrip())
    args = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        text = line.strip()
        if text.startswith("- "):
            args.append({})
            text = text[2:]
        if text.startswith(".") and ":" in text and args:
            key, _, value = text[1:].partition(":")
            args[-1][key.strip()] = value.strip()
    return [{"offset": int(a["offset"]), "size": int(a["size"]), "value_kind": a["value_kind"]} for a in args]


# --------------------------------------------------------------------------- LDS alias scopes
#
# The compiler waits vmcnt before every ds_read that may read what an LDS-DMA still in flight
# writes; without alias information that is every LDS-DMA issued so far (a vmcnt(0) before a
# ds_read that follows one).  Tagging each DMA and each ds_read with the scope of the LDS buffer it
# touches (and "no alias" with every other buffer's) lets it wait only for DMAs into the same buffer.


def lds_alias_scopes(domain: str, names) -> dict:
    """One ``#llvm.alias_scope`` per LDS buffer name, all in one domain: ``{name: attribute}``."""
    dom = f'#llvm.alias_scope_domain<id = "{domain}">'
    return {n: ir.Attribute.parse(f'#llvm.alias_scope<id = "{domain}.{n}", domain = {dom}>') for n in names}


def tag_lds_alias(op, scopes: dict, name):
    """Mark ``op`` (an LDS access) as touching buffer ``name`` only: alias scope ``name``, no alias
    with every other scope in ``scopes``."""
    op = getattr(op, "operation", op)
    op.attributes["alias_scopes"] = ir.ArrayAttr.get([scopes[name]])
    op.attributes["noalias_scopes"] = ir.ArrayAttr.get([s for n, s in scopes.items() if n != name])
    return op


def lds_dma_dwordx4_scoped(rsrc, lds_base, voffset, scopes: dict, name, soffset=0):
    """:func:`lds_dma_dwordx4` into LDS buffer ``name`` of ``scopes`` (see :func:`tag_lds_alias`)."""
    op = rocdl.raw_ptr_buffer_load_lds(raw(rsrc), lds_ptr(lds_base), i32(16), i32(voffset), i32(soffset), i32(0),
                                       i32(0))
    tag_lds_alias(op, scopes, name)


def ds_read_b128_scoped(addr_i32, scopes: dict, name):
    """:func:`ds_read_b128` from LDS buffer ``name`` of ``scopes`` (see :func:`tag_lds_alias`)."""
    op = llvm.LoadOp(vec_type(4), lds_ptr(addr_i32), alignment=16)
    tag_lds_alias(op, scopes, name)
    return op.result
