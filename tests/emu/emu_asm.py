"""Helpers that wrap a few lines of hand-written gfx950 assembly into a complete
``.s`` kernel (descriptor + metadata) and run it on the emulator.

Conventions of the generated kernels: the kernarg pointer is s[0:1], the
workgroup id x is s2, v0 is the work-item id; f32 denormals are kept
(.amdhsa_float_denorm_mode_32 3, as our compiled kernels state; the assembler's
default would be 0 = flush).  ``run_valu`` loads per-lane
inputs into v10, v11, ... and stores v20, v21, ...; ``run_salu`` loads scalar
inputs into s10, s11, ... and stores s20, s21, ... and SCC.
"""
from __future__ import annotations

import numpy as np

import gfx950emu
import gfx950emu.asm

def kernel(body: str, args=("in", "out"), name: str = "k", lds: int = 0, acc: int = 128,
           workitem_id: int = 0, scalars=()) -> str:
    """:func:`gfx950emu.asm.kernel` with f32 denormals kept (the tests' convention)."""
    return gfx950emu.asm.kernel(body, args=args, name=name, lds=lds, acc=acc, workitem_id=workitem_id,
                                scalars=scalars, denorm_mode_32=3)


def run_valu(op_lines: str, inputs, nout: int = 1, acc: int = 128, patch=None):
    """Run VALU lines on 64 lanes: inputs[k] (uint32 [64]) arrive in v(10+k);
    returns the uint32 [nout, 64] values of v20.. afterwards. ``patch(text) -> text`` may edit the
    kernel text first (e.g. its descriptor directives)."""
    inputs = [np.broadcast_to(np.asarray(x, dtype=np.uint32), (64,)) for x in inputs]
    loads = "\n".join(f"global_load_dword v{10 + k}, v1, s[4:5] offset:{256 * k}" for k in range(len(inputs)))
    stores = "\n".join(f"global_store_dword v1, v{20 + k}, s[6:7] offset:{256 * k}" for k in range(nout))
    body = f"""
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_lshlrev_b32_e32 v1, 2, v0
s_waitcnt lgkmcnt(0)
{loads}
s_waitcnt vmcnt(0)
{op_lines}
{stores}
s_endpgm
"""
    text = kernel(body, acc=acc)
    prog = gfx950emu.load(patch(text) if patch else text)
    inp = np.concatenate(inputs) if inputs else np.zeros(64, np.uint32)
    out = np.zeros(64 * nout, dtype=np.uint32)
    res = gfx950emu.launch(prog, grid=1, block=64, args=[inp, out], hazards="strict")
    assert res.hazards == []
    return out.reshape(nout, 64)


def run_salu(op_lines: str, inputs, nout: int = 1):
    """Run scalar lines: inputs[k] arrive in s(10+k); returns ([s20..], scc)."""
    inputs = [int(x) & 0xFFFFFFFF for x in inputs] or [0]
    n = len(inputs)
    loads = "\n".join(f"s_load_dword s{10 + k}, s[4:5], {4 * k}" for k in range(n))
    movs = "\n".join(f"v_mov_b32_e32 v{20 + k}, s{20 + k}" for k in range(nout))
    stores = "\n".join(f"global_store_dword v1, v{20 + k}, s[6:7] offset:{4 * k}" for k in range(nout))
    body = f"""
s_load_dwordx4 s[4:7], s[0:1], 0x0
v_mov_b32_e32 v1, 0
s_waitcnt lgkmcnt(0)
{loads}
s_waitcnt lgkmcnt(0)
{op_lines}
s_cselect_b32 s40, 1, 0
{movs}
v_mov_b32_e32 v30, s40
{stores}
global_store_dword v1, v30, s[6:7] offset:{4 * nout}
s_endpgm
"""
    prog = gfx950emu.load(kernel(body))
    out = np.zeros(nout + 1, dtype=np.uint32)
    gfx950emu.launch(prog, grid=1, block=64, args=[np.array(inputs, dtype=np.uint32), out], hazards="strict")
    return [int(x) for x in out[:nout]], int(out[nout])


def f32(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def as_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)
