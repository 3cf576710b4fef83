"""gfx950emu: a functional emulator for gfx950 (AMD CDNA4 / MI355X) assembly text.

It executes the ``.s`` text LLVM writes for a kernel (FlyDSL's
``22_final_isa.s``) on the CPU with numpy, 64 lanes at a time, and can check
that every use of memory results is covered by an ``s_waitcnt``.

    prog = gfx950emu.load(isa_text)                 # parse + pre-decode once
    prog = gfx950emu.load_code_object("k.co")       # or a .co/.hsaco (needs gfx950 llvm-objdump)
    res = gfx950emu.launch(prog, grid=(4, 1, 1), block=(256, 1, 1),
                           args=[a, b, c, 128], hazards="report")
    res.hazards, res.stats.by_opcode, res.seconds
    res = gfx950emu.launch(prog, grid, block, args, timing=True)   # modelled clock
    res.timing["cycles"], res.timing["kernel"]["tflops"]          # see gfx950emu.timing

A buffer argument may be a ``gfx950emu.LazyBuffer(nbytes, fill)``: its bytes are made by ``fill(lo, hi)``
only where the kernel touches them (big launches map every buffer this way, chunk by chunk; see
``memory``), so a timing run of a few workgroups of a multi-GB problem builds only what they read.

``launch(..., delivery="late")`` lands every load only when a wait forces it (``"random"``: a seeded
legal moment), and ``wave_order="reverse"|"random"`` reorders / interleaves the waves: a kernel that waits
correctly gives the same bytes in every mode.

Depends on numpy only.  Module map: lexer + parser (text -> instructions, descriptor,
metadata), kernel (instruction -> handler: the dispatch, SOPP and MFMA) over the instruction families
operands (decode context, operand access), salu, valu (+ DPP / SDWA / VOPC), valu16 (16-bit and
packed), valu_special, convert and memops (memory instructions), errors, machine (launch state, the
interpreter loop, wave scheduling, processes), hazards (s_waitcnt checker), memory (flat address
space, buffer descriptors, atomics), mfma / fpformats (matrix cores and narrow float formats), timing
(the cycle model: CU + MI355X grid, parameters in timing/gfx950.toml).
"""
from .errors import DecodeError, ExecError, MemoryFault, ParseError
from .hazards import HazardError, HazardReport
from .machine import Program, Result, Stats, launch, load
from .memory import LazyBuffer

__all__ = [
    "load", "launch", "Program", "Result", "Stats", "HazardReport", "HazardError",
    "DecodeError", "ParseError", "ExecError", "MemoryFault", "LazyBuffer",
    "load_code_object", "code_object_to_isa", "CodeObjectError",
]


def __getattr__(name):
    # the code-object loader is imported on first use (so ``python -m gfx950emu.codeobject`` runs clean)
    if name in ("load_code_object", "code_object_to_isa", "CodeObjectError"):
        from . import codeobject
        return getattr(codeobject, name)
    raise AttributeError(f"module 'gfx950emu' has no attribute {name!r}")
