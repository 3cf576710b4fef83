"""Load an AMDGPU code object (``.co`` / ``.hsaco``, an ELF) into the same Program as ``load(isa_text)``.

A code object holds three things the emulator needs (LLVM AMDGPUUsage, "ELF Code Object",
"Code Object V3+ Metadata", "Code Object V3+ Kernel Descriptor"):

* the machine code of each kernel (``.text``, the kernel's ``STT_FUNC`` symbol): disassembled with
  a gfx950-capable ``llvm-objdump``; branch offsets become labels, encodings are dropped;
* the msgpack metadata note (``NT_AMDGPU_METADATA``): kernel arguments, ``.reqd_workgroup_size``,
  register counts...; read as YAML with ``llvm-readelf --notes``;
* the 64-byte kernel descriptor (``<kernel>.kd`` in ``.rodata``): LDS / scratch / kernarg sizes,
  user-SGPR enables, ``COMPUTE_PGM_RSRC1/2/3`` (workgroup-id SGPRs, work-item-id VGPRs,
  ``accum_offset``, ...); decoded here, field by field, into the ``.amdhsa_*`` names the assembler
  directives use.

:func:`code_object_to_isa` writes all of it back as assembly text (one ``.s`` with every kernel,
each instruction followed by its address as a comment), and :func:`load_code_object` hands that
text to :func:`gfx950emu.load`, so a code object and the ``.s`` it was built from give the same
Program.  Two descriptor values of the ``.s`` are not stored in a code object:
``.amdhsa_next_free_sgpr`` (here the SGPRs the hardware allocates: the descriptor's granulated
count, which includes VCC and the other reserved SGPRs) and ``.amdhsa_reserve_vcc`` (left out);
``.amdhsa_next_free_vgpr`` is the metadata's ``.vgpr_count`` (else the granulated count).  The
emulator uses neither.

``python -m gfx950emu.codeobject FILE.co [-o FILE.s]`` writes that text (``--list``: the kernel names).

Tools are looked for in this order: ``$GFX950EMU_LLVM_BIN``, ``$ROCM_PATH/llvm/bin``,
``/opt/rocm/llvm/bin``, ``/usr/lib/llvm-NN/bin`` (NN >= 20, newest first), ``llvm-objdump-NN`` /
``llvm-readelf-NN`` on ``PATH`` (NN >= 20), then plain ``llvm-objdump`` on ``PATH`` if it is
LLVM 20 or newer.  Older LLVMs (Debian's default LLVM 14, say) do not know gfx950.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["load_code_object", "code_object_to_isa", "find_llvm_tools", "CodeObjectError",
           "LlvmTools", "kernel_names"]


class CodeObjectError(ValueError):
    """The code object could not be read (or no gfx950-capable LLVM tools were found)."""


_TOOL_HINT = ("install ROCm (its llvm/bin has them; set ROCM_PATH) or Debian's `llvm-22` package "
              "(apt-get install llvm-22, tools in /usr/lib/llvm-22/bin)")
_MIN_LLVM = 20          # first upstream LLVM release with gfx950 (LLVM 20.1, 2025)

EM_AMDGPU = 224
# EF_AMDGPU_MACH values (LLVM BinaryFormat/ELF.h) for the processors a user may hand us.
_MACH = {0x3F: "gfx90a", 0x40: "gfx940", 0x4B: "gfx941", 0x4C: "gfx942", 0x4F: "gfx950",
         0x2C: "gfx908", 0x41: "gfx1100"}
_GFX950 = 0x4F
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


# ------------------------------------------------------------------ tools ----
@dataclass(frozen=True)
class LlvmTools:
    objdump: str
    readelf: str
    version: str        # "LLVM version ..." line of llvm-objdump --version

    def describe(self) -> str:
        return f"{self.objdump} ({self.version})"


def _version(tool: str):
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"LLVM version (\d+)[\w.\-]*", out)
    return (int(m.group(1)), m.group(0), "amdgcn" in out) if m else None


def _candidates():
    """(objdump, readelf, from_rocm) in the documented search order."""
    dirs = []
    if os.environ.get("GFX950EMU_LLVM_BIN"):
        dirs.append((os.environ["GFX950EMU_LLVM_BIN"], True))
    for root in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if root:
            dirs.append((os.path.join(root, "llvm", "bin"), True))
    debian = []
    for d in glob.glob("/usr/lib/llvm-*/bin"):
        m = re.fullmatch(r"/usr/lib/llvm-(\d+)/bin", d)
        if m and int(m.group(1)) >= _MIN_LLVM:
            debian.append((int(m.group(1)), d))
    dirs += [(d, False) for _, d in sorted(debian, reverse=True)]
    for d, rocm in dirs:
        yield os.path.join(d, "llvm-objdump"), os.path.join(d, "llvm-readelf"), rocm
    suffixed = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for entry in glob.glob(os.path.join(folder or ".", "llvm-objdump-*")):
            m = re.fullmatch(r"llvm-objdump-(\d+)", os.path.basename(entry))
            if m and int(m.group(1)) >= _MIN_LLVM:
                suffixed.append((int(m.group(1)), entry))
    for n, entry in sorted(suffixed, reverse=True):
        readelf = shutil.which(f"llvm-readelf-{n}") or os.path.join(os.path.dirname(entry), f"llvm-readelf-{n}")
        yield entry, readelf, False
    plain = shutil.which("llvm-objdump")
    if plain:
        yield plain, shutil.which("llvm-readelf") or os.path.join(os.path.dirname(plain), "llvm-readelf"), False


@functools.lru_cache(maxsize=1)
def find_llvm_tools() -> LlvmTools:
    """The first gfx950-capable llvm-objdump / llvm-readelf pair; CodeObjectError names the fix."""
    rejected = []
    for objdump, readelf, rocm in _candidates():
        if not (os.path.isfile(objdump) and os.access(objdump, os.X_OK)):
            continue
        if not (os.path.isfile(readelf) and os.access(readelf, os.X_OK)):
            rejected.append(f"{objdump} (no llvm-readelf next to it)")
            continue
        v = _version(objdump)
        if v is None or not v[2]:
            rejected.append(f"{objdump} (no AMDGPU target)")
            continue
        # ROCm's LLVM knew gfx950 before upstream's release numbering did (ROCm 6.4 is LLVM 19).
        if v[0] < (19 if rocm else _MIN_LLVM):
            rejected.append(f"{objdump} ({v[1]}: too old to know gfx950)")
            continue
        return LlvmTools(objdump, readelf, v[1])
    seen = f" Found but unusable: {'; '.join(rejected)}." if rejected else ""
    raise CodeObjectError("no gfx950-capable llvm-objdump/llvm-readelf found (looked in $GFX950EMU_LLVM_BIN, "
                          "$ROCM_PATH/llvm/bin, /opt/rocm/llvm/bin, /usr/lib/llvm-NN/bin for NN>=20, "
                          f"llvm-objdump-NN on PATH).{seen} To load code objects, {_TOOL_HINT}.")


def _run(cmd, what):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise CodeObjectError(f"{what}: cannot run {cmd[0]} ({e})") from None
    if p.returncode != 0:
        raise CodeObjectError(f"{what} failed: {(p.stderr or p.stdout).strip()[:500]}")
    if "not a recognized processor" in p.stderr:
        raise CodeObjectError(f"{cmd[0]} does not know gfx950 ({p.stderr.strip().splitlines()[0]}); {_TOOL_HINT}")
    return p.stdout


# -------------------------------------------------------------------- ELF ----
@dataclass
class _Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass
class _Symbol:
    name: str
    value: int
    size: int
    type: int      # STT_*
    shndx: int


def _read_input(data_or_path):
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        return bytes(data_or_path), "<code object bytes>"
    if isinstance(data_or_path, (str, os.PathLike)):
        p = Path(data_or_path)
        try:
            return p.read_bytes(), str(p)
        except OSError as e:
            raise CodeObjectError(f"cannot read code object {p}: {e.strerror or e}") from None
    raise CodeObjectError(f"load_code_object() takes bytes or a path, got {type(data_or_path).__name__}")


def _unbundle(data: bytes, where: str) -> bytes:
    """The gfx950 ELF of a clang offload bundle (``__CLANG_OFFLOAD_BUNDLE__`` header), else ``data``."""
    if not data.startswith(_BUNDLE_MAGIC):
        return data
    try:
        (n,) = struct.unpack_from("<Q", data, 24)
        pos, ids = 32, []
        for _ in range(n):
            off, size, idlen = struct.unpack_from("<QQQ", data, pos)
            ident = data[pos + 24:pos + 24 + idlen].decode("ascii", "replace")
            pos += 24 + idlen
            ids.append(ident)
            if "gfx950" in ident:
                return data[off:off + size]
    except struct.error:
        raise CodeObjectError(f"{where}: truncated clang offload bundle") from None
    raise CodeObjectError(f"{where}: clang offload bundle without a gfx950 entry (it holds: {', '.join(ids)})")


class _Elf:
    def __init__(self, data: bytes, where: str):
        self.data, self.where = data, where
        if data[:4] != b"\x7fELF":
            raise CodeObjectError(f"{where} is not an ELF code object (no ELF magic)")
        if data[4] != 2 or data[5] != 1:
            raise CodeObjectError(f"{where} is not a 64-bit little-endian ELF; AMDGPU code objects are")
        try:
            (self.type, self.machine, _, _, _, shoff, self.flags, _, _, _, shentsize, shnum,
             shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
            if self.machine != EM_AMDGPU:
                raise CodeObjectError(f"{where} is an ELF for machine {self.machine}, not AMDGPU ({EM_AMDGPU})")
            raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
            names = raw[shstrndx] if shstrndx < len(raw) else None
            self.sections = []
            for r in raw:
                nm = self._str(names[4], r[0]) if names else ""
                self.sections.append(_Section(nm, r[1], r[3], r[4], r[5], r[6], r[9]))
        except struct.error:
            raise CodeObjectError(f"{where}: truncated ELF (section headers run past the end)") from None

    def _str(self, table_off, idx):
        end = self.data.index(b"\0", table_off + idx)
        return self.data[table_off + idx:end].decode("utf-8", "replace")

    @property
    def mach(self) -> int:
        return self.flags & 0xFF

    def symbols(self):
        out = []
        for want in (2, 11):            # SHT_SYMTAB, else SHT_DYNSYM
            for sec in self.sections:
                if sec.type != want:
                    continue
                strtab = self.sections[sec.link]
                for k in range(sec.size // 24):
                    nm, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", self.data, sec.offset + 24 * k)
                    if nm:
                        out.append(_Symbol(self._str(strtab.offset, nm), value, size, info & 0xF, shndx))
            if out:
                return out
        return out

    def read_vaddr(self, addr: int, n: int) -> bytes:
        for sec in self.sections:
            if sec.type != 8 and sec.addr <= addr and addr + n <= sec.addr + sec.size and sec.addr:
                off = sec.offset + addr - sec.addr
                return self.data[off:off + n]
        raise CodeObjectError(f"{self.where}: address 0x{addr:x} (+{n}) is in no section")


# ---------------------------------------------------------- descriptor ----
def decode_descriptor(kd: bytes) -> dict:
    """The 64-byte kernel descriptor -> ``.amdhsa_*`` directive values (without the prefix).

    Layout and bit fields: LLVM AMDGPUUsage, "Code Object V3+ Kernel Descriptor" and its
    COMPUTE_PGM_RSRC1 / RSRC2 / RSRC3 (GFX90A, GFX942, GFX950) tables.
    """
    if len(kd) != 64:
        raise CodeObjectError(f"kernel descriptor is {len(kd)} bytes, not 64")
    (group, private, kernarg, _r0, entry, _r1, rsrc3, rsrc1, rsrc2, flags, preload,
     _r2) = struct.unpack("<IIIIq20sIIIHH4s", kd)

    def bits(v, lo, hi):
        return (v >> lo) & ((1 << (hi - lo + 1)) - 1)

    d = {
        "group_segment_fixed_size": group,
        "private_segment_fixed_size": private,
        "kernarg_size": kernarg,
        "user_sgpr_count": bits(rsrc2, 1, 5),
        "user_sgpr_private_segment_buffer": bits(flags, 0, 0),
        "user_sgpr_dispatch_ptr": bits(flags, 1, 1),
        "user_sgpr_queue_ptr": bits(flags, 2, 2),
        "user_sgpr_kernarg_segment_ptr": bits(flags, 3, 3),
        "user_sgpr_dispatch_id": bits(flags, 4, 4),
        "user_sgpr_flat_scratch_init": bits(flags, 5, 5),
        "user_sgpr_kernarg_preload_length": bits(preload, 0, 6),
        "user_sgpr_kernarg_preload_offset": bits(preload, 7, 15),
        "user_sgpr_private_segment_size": bits(flags, 6, 6),
        "wavefront_size32": bits(flags, 10, 10),
        "uses_dynamic_stack": bits(flags, 11, 11),
        "enable_private_segment": bits(rsrc2, 0, 0),
        "system_sgpr_workgroup_id_x": bits(rsrc2, 7, 7),
        "system_sgpr_workgroup_id_y": bits(rsrc2, 8, 8),
        "system_sgpr_workgroup_id_z": bits(rsrc2, 9, 9),
        "system_sgpr_workgroup_info": bits(rsrc2, 10, 10),
        "system_vgpr_workitem_id": bits(rsrc2, 11, 12),
        # GRANULATED_WORKITEM_VGPR_COUNT: (unified VGPRs rounded up to 8) / 8 - 1 on gfx90a+
        "next_free_vgpr": (bits(rsrc1, 0, 5) + 1) * 8,
        # GRANULATED_WAVEFRONT_SGPR_COUNT: (SGPRs incl. VCC etc. rounded up to 16) / 8 - 1 (GFX9)
        "next_free_sgpr": (bits(rsrc1, 6, 9) + 1) * 8,
        "accum_offset": (bits(rsrc3, 0, 5) + 1) * 4,
        "float_round_mode_32": bits(rsrc1, 12, 13),
        "float_round_mode_16_64": bits(rsrc1, 14, 15),
        "float_denorm_mode_32": bits(rsrc1, 16, 17),
        "float_denorm_mode_16_64": bits(rsrc1, 18, 19),
        "dx10_clamp": bits(rsrc1, 21, 21),
        "ieee_mode": bits(rsrc1, 23, 23),
        "fp16_overflow": bits(rsrc1, 26, 26),
        "tg_split": bits(rsrc3, 16, 16),
        "exception_fp_ieee_invalid_op": bits(rsrc2, 24, 24),
        "exception_fp_denorm_src": bits(rsrc2, 25, 25),
        "exception_fp_ieee_div_zero": bits(rsrc2, 26, 26),
        "exception_fp_ieee_overflow": bits(rsrc2, 27, 27),
        "exception_fp_ieee_underflow": bits(rsrc2, 28, 28),
        "exception_fp_ieee_inexact": bits(rsrc2, 29, 29),
        "exception_int_div_zero": bits(rsrc2, 30, 30),
    }
    d["_kernel_code_entry_byte_offset"] = entry
    d["_compute_pgm_rsrc1"], d["_compute_pgm_rsrc2"], d["_compute_pgm_rsrc3"] = rsrc1, rsrc2, rsrc3
    return d


# ------------------------------------------------------------ metadata ----
def _metadata_yaml(tools: LlvmTools, path: str) -> str:
    out = _run([tools.readelf, "--notes", path], "llvm-readelf --notes")
    lines, inside = [], False
    for raw in out.splitlines():
        s = raw.strip()
        if not inside and s == "---":
            inside = True
            lines.append("---")
            continue
        if inside:
            if s == "...":
                lines.append("...")
                break
            lines.append(raw)
    if not inside:
        raise CodeObjectError(f"{path}: no AMDGPU metadata note (NT_AMDGPU_METADATA); is it a code object v3+?")
    return "\n".join(lines)


# --------------------------------------------------------- disassembly ----
_DIS_LINE = re.compile(r"^\s+(\S.*?)\s*//\s*([0-9A-Fa-f]+):((?:\s+[0-9A-Fa-f]{8})*)\s*(<[^>]*>)?\s*$")
# SOPP branches; the target comes from the encoding (simm16 = low half of the first word), since
# llvm-objdump prints either the offset or a local symbol name there.
_BRANCH = re.compile(r"^(s_branch|s_cbranch_\w+)\s+\S+\s*$")


def _disassemble(tools: LlvmTools, path: str):
    """{address: (instruction text, first encoding word)} of every instruction in the text sections."""
    out = _run([tools.objdump, "-d", path], "llvm-objdump -d")
    insns = {}
    for raw in out.splitlines():
        m = _DIS_LINE.match(raw)
        if not m:
            continue
        text = m.group(1).strip()
        if text.startswith("<unknown>") or text.startswith(".long"):
            raise CodeObjectError(f"{path}: llvm-objdump could not decode the word at 0x{int(m.group(2), 16):x} "
                                  f"({tools.describe()}); {_TOOL_HINT}")
        words = m.group(3).split()
        insns[int(m.group(2), 16)] = (text, int(words[0], 16) if words else None)
    return insns


def _sizes(addrs):
    """Instruction byte sizes from consecutive addresses (the last one: 4, s_endpgm-sized)."""
    return {a: (b - a) for a, b in zip(addrs, addrs[1:])} | ({addrs[-1]: 4} if addrs else {})


@dataclass
class _Kernel:
    name: str
    start: int
    end: int
    descriptor: dict


def _kernels(elf: _Elf, where: str):
    syms = elf.symbols()
    by_name = {s.name: s for s in syms}
    found = []
    for s in syms:
        if not s.name.endswith(".kd") or s.type != 1:     # STT_OBJECT descriptors
            continue
        name = s.name[:-3]
        desc = decode_descriptor(elf.read_vaddr(s.value, 64))
        start = s.value + desc["_kernel_code_entry_byte_offset"]
        fn = by_name.get(name)
        if fn is not None and fn.value != start:
            raise CodeObjectError(f"{where}: kernel {name}: descriptor entry 0x{start:x} != symbol 0x{fn.value:x}")
        size = fn.size if fn is not None else 0
        if not size:     # hand-written asm without .size: up to the next function or the section's end
            text = next((sec for sec in elf.sections if sec.addr <= start < sec.addr + sec.size and sec.type == 1), None)
            later = [t.value for t in syms if t.value > start and t.type == 2]
            later += [t.value + decode_descriptor(elf.read_vaddr(t.value, 64))["_kernel_code_entry_byte_offset"]
                      for t in syms if t.name.endswith(".kd") and t.type == 1]
            end = min([v for v in later if v > start] + ([text.addr + text.size] if text else []), default=start)
        else:
            end = start + size
        found.append(_Kernel(name, start, end, desc))
    if not found:
        raise CodeObjectError(f"{where}: no kernel descriptor symbol (NAME.kd) in the code object")
    return sorted(found, key=lambda k: k.start)


# --------------------------------------------------------------- public ----
def _prepare(data_or_path):
    data, where = _read_input(data_or_path)
    data = _unbundle(data, where)
    elf = _Elf(data, where)
    if elf.mach != _GFX950:
        raise CodeObjectError(f"{where} is a code object for {_MACH.get(elf.mach, f'EF_AMDGPU_MACH 0x{elf.mach:x}')}; "
                              "gfx950emu runs gfx950 code")
    return data, where, elf


def kernel_names(data_or_path) -> list:
    """Names of the kernels in a code object (from its descriptor symbols); needs no LLVM tools."""
    data, where, elf = _prepare(data_or_path)
    return [k.name for k in _kernels(elf, where)]


@functools.lru_cache(maxsize=32)
def _to_isa_cached(digest: str, data: bytes, where: str) -> str:
    elf = _Elf(data, where)
    kernels = _kernels(elf, where)
    tools = find_llvm_tools()
    with tempfile.TemporaryDirectory(prefix="gfx950emu-co-") as tmp:
        path = os.path.join(tmp, "kernel.co")
        with open(path, "wb") as f:
            f.write(data)
        insns = _disassemble(tools, path)
        meta = _metadata_yaml(tools, path)
    from .parser import parse_yaml
    md = parse_yaml(meta) or {}
    meta_by_name = {k.get(".name"): k for k in (md.get("amdhsa.kernels") or []) if isinstance(k, dict)}
    target = md.get("amdhsa.target") or "amdgcn-amd-amdhsa--gfx950"
    addrs = sorted(insns)
    size = _sizes(addrs)
    out = [f'\t.amdgcn_target "{target}"',
           f"; disassembled from {where} with {tools.describe()} by gfx950emu.codeobject",
           "; every instruction is followed by its address in the code object"]
    for n, k in enumerate(kernels):
        mine = [a for a in addrs if k.start <= a < k.end]
        if not mine:
            raise CodeObjectError(f"{where}: kernel {k.name}: no instructions between 0x{k.start:x} and 0x{k.end:x}")
        if not any(insns[a][0].split()[0] == "s_endpgm" for a in mine):
            raise CodeObjectError(f"{where}: kernel {k.name} has no s_endpgm")
        if k.end == k.start or not any(s.name == k.name and s.size for s in elf.symbols()):
            # no symbol size: drop the padding (s_nop 0 / s_code_end) after the last s_endpgm
            last = max(i for i, a in enumerate(mine) if insns[a][0].split()[0] == "s_endpgm")
            tail = mine[last + 1:]
            if all(insns[a][0] in ("s_nop 0", "s_code_end") for a in tail):
                mine = mine[:last + 1]
        body, targets = [], {}
        for a in mine:
            text, word = insns[a]
            m = _BRANCH.match(text)
            if m:
                if word is None:
                    raise CodeObjectError(f"{where}: llvm-objdump printed no encoding for {text!r} at 0x{a:x}")
                tgt = a + 4 + 4 * _simm16(word)
                if not k.start <= tgt <= mine[-1] + size[mine[-1]]:
                    raise CodeObjectError(f"{where}: kernel {k.name}: {text} at 0x{a:x} jumps outside the kernel")
                lab = targets.setdefault(tgt, f".L{n}_{tgt:x}")
                text = f"{m.group(1)} {lab}"
            body.append((a, text))
        out += ["\t.text", f"\t.globl\t{k.name}", "\t.p2align\t8", f"\t.type\t{k.name},@function", f"{k.name}:"]
        valid = {a for a, _ in body} | {mine[-1] + size[mine[-1]]}
        bad = sorted(set(targets) - valid)
        if bad:
            raise CodeObjectError(f"{where}: kernel {k.name}: a branch lands inside an instruction (0x{bad[0]:x})")
        for a, text in body:
            if a in targets:
                out.append(f"{targets[a]}:")
            out.append(f"\t{text:<60s} ; 0x{a:x}")
        end_addr = mine[-1] + size[mine[-1]]
        if end_addr in targets:
            out.append(f"{targets[end_addr]}:")
        out += [f".Lfunc_end{n}:", f"\t.size\t{k.name}, .Lfunc_end{n}-{k.name}", "", "\t.rodata",
                f"\t.amdhsa_kernel {k.name}"]
        desc = dict(k.descriptor)
        m = meta_by_name.get(k.name, {})
        if isinstance(m.get(".vgpr_count"), int):
            desc["next_free_vgpr"] = m[".vgpr_count"]
        for key, val in desc.items():
            if not key.startswith("_"):
                out.append(f"\t\t.amdhsa_{key} {val}")
        out += ["\t.end_amdhsa_kernel", "\t.text", ""]
        out.append(f"; descriptor words: kernel_code_entry_byte_offset {desc['_kernel_code_entry_byte_offset']}, "
                   f"compute_pgm_rsrc1 0x{desc['_compute_pgm_rsrc1']:08x}, rsrc2 0x{desc['_compute_pgm_rsrc2']:08x}, "
                   f"rsrc3 0x{desc['_compute_pgm_rsrc3']:08x}")
    out += ["\t.amdgpu_metadata", meta, "\t.end_amdgpu_metadata", ""]
    return "\n".join(out)


def _simm16(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


def code_object_to_isa(data_or_path) -> str:
    """The assembly text (``.s``) of every kernel of a gfx950 code object, as :func:`gfx950emu.load` reads it."""
    data, where, _ = _prepare(data_or_path)
    return _to_isa_cached(hashlib.sha256(data).hexdigest(), data, where)


def load_code_object(data_or_path, kernel: str | None = None):
    """Load one kernel of a gfx950 code object (bytes or a path) -> the Program ``load(isa_text)`` gives.

    ``kernel`` picks a kernel by name when the code object holds several.  Needs a gfx950-capable
    ``llvm-objdump``/``llvm-readelf`` (see :func:`find_llvm_tools`); without one the error says
    where to get it.
    """
    from .machine import load
    return load(code_object_to_isa(data_or_path), kernel=kernel)


def main(argv=None) -> int:
    """``python -m gfx950emu.codeobject FILE.co [--list] [-o FILE.s]``: a code object's kernels as .s text."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m gfx950emu.codeobject", description=main.__doc__)
    ap.add_argument("code_object")
    ap.add_argument("--list", action="store_true", help="print the kernel names only")
    ap.add_argument("-o", "--output", help="write the .s here instead of stdout")
    ns = ap.parse_args(argv)
    try:
        if ns.list:
            print("\n".join(kernel_names(ns.code_object)))
            return 0
        text = code_object_to_isa(ns.code_object)
    except CodeObjectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if ns.output:
        Path(ns.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
