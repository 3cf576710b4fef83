"""Study-side analysis of the gfx950 assembly (``.s``) that FlyDSL/LLVM emits for a kernel.

The questions an ablation asks of a kernel's ISA are simple -- how many registers, how much LDS,
how many MFMAs and waits in the hot loop, what the stores look like -- but each needs the ``.s``
text taken apart the same way every time. This module does that, for the AMDGPU assembly LLVM
prints (``FLYDSL_DEBUG_DUMP_ASM=1`` -> ``22_final_isa.s``), with no AMDGPU tools installed.

* :func:`parse` splits the text into :class:`Kernel` objects: each kernel's instruction stream
  (labels, directives and comments dropped; inline-asm lines between ``;;#ASMSTART`` and
  ``;;#ASMEND`` kept and flagged), its branch-target labels, its ``.amdhsa_*`` kernel descriptor,
  its ``.set .L<kernel>.<field>`` resource symbols and its entry of the ``amdgpu_metadata`` YAML.
* :func:`loops` / :func:`hot_loop` find the kernel's loops and its hottest one; :func:`histogram`,
  :func:`operand_reuse` and :func:`max_lds_run` look at a run of instructions.

The metrics (every number the study reads off a kernel) are :mod:`mxfp4_ablation.metrics`' table.
The occupancy model is documented on :func:`occupancy`; its constants are cited there. This parser
is for studying kernels; the emulator has its own, stricter one (both read the text through
:mod:`gfx950emu.lexer`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable, Sequence

from gfx950emu.lexer import lex, split_top_level

__all__ = [
    "Instruction",
    "Kernel",
    "Loop",
    "parse",
    "kernel_of",
    "occupancy",
    "unified_vgprs",
    "hot_loop",
    "hottest",
    "loop_histogram",
    "loops",
    "histogram",
    "mfma_operand_reuse",
    "operand_reuse",
    "max_lds_run",
    "store_width",
]

# --------------------------------------------------------------------------------------------
# gfx950 constants used by the occupancy model (see `occupancy` for the sources).
# --------------------------------------------------------------------------------------------

#: Unified (arch + accumulation) VGPRs per SIMD lane on gfx90a/gfx942/gfx950.
VGPRS_PER_SIMD = 512
#: VGPR allocation granule (registers) in unified-register-file mode.
VGPR_ALLOC_GRANULE = 8
#: Arch VGPRs are padded to this multiple before the AGPRs start (``.amdhsa_accum_offset``).
ACCUM_OFFSET_GRANULE = 4
#: Hardware wave slots per SIMD on gfx90a/gfx942/gfx950.
MAX_WAVES_PER_SIMD = 8
SIMDS_PER_CU = 4
WAVE_SIZE = 64
#: LDS per CU on gfx950 (160 KiB) and its allocation block (320 dwords).
LDS_BYTES_PER_CU = 160 * 1024
LDS_ALLOC_GRANULE = 320 * 4



# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One machine instruction as written in the ``.s`` file.

    ``operands`` are the comma-separated operands (``v[0:3]``, ``s[4:7]``, ``0x10``...);
    ``modifiers`` are the space-separated words after the last operand (``offen``,
    ``offset:16``, ``cbsz:4``, ``op_sel:[0,1]``...). ``s_waitcnt`` counters (``vmcnt(0)
    lgkmcnt(0)``) are its operands. ``line`` is 1-based in the parsed text; ``text`` is the
    line without indentation or trailing comment; ``in_asm_block`` says it came from inline
    assembly (between ``;;#ASMSTART`` and ``;;#ASMEND``), i.e. the compiler did not schedule it.
    """

    opcode: str
    operands: tuple[str, ...]
    modifiers: tuple[str, ...]
    line: int
    text: str
    in_asm_block: bool = False

    @property
    def is_branch(self) -> bool:
        """Whether this is a direct scalar branch (``s_branch`` or any ``s_cbranch_*``)."""
        return self.opcode == "s_branch" or self.opcode.startswith("s_cbranch_")

    @property
    def branch_target(self) -> str | None:
        """The label a direct branch jumps to, else None."""
        if self.is_branch and self.operands:
            return self.operands[0]
        return None


@dataclasses.dataclass
class Kernel:
    """One kernel function of a ``.s`` file.

    ``labels`` maps each label inside the function to the index (into ``instructions``) of the
    instruction that follows it. ``descriptor`` holds the ``.amdhsa_*`` directives without the
    ``.amdhsa_`` prefix (``next_free_vgpr``, ``accum_offset``, ``group_segment_fixed_size``...).
    ``symbols`` holds the ``.set .L<kernel>.<field>, value`` resource symbols by field
    (``num_vgpr``, ``num_agpr``, ``numbered_sgpr``, ``private_seg_size``...). ``metadata`` is
    this kernel's entry of ``amdhsa.kernels`` in the ``amdgpu_metadata`` YAML, keys as written
    (``.sgpr_count``, ``.max_flat_workgroup_size``...). Values that are not plain integers are
    kept as their text.
    """

    name: str
    instructions: list[Instruction]
    descriptor: dict[str, Any]
    metadata: dict[str, Any]
    labels: dict[str, int] = dataclasses.field(default_factory=dict)
    symbols: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Loop:
    """A natural loop found as a backward branch: ``instructions[start:end + 1]`` is its body.

    ``start`` is the index of the branch target's first instruction, ``end`` the index of the
    backward ``s_branch``/``s_cbranch_*`` itself (included in the body).
    """

    label: str
    start: int
    end: int
    body: tuple[Instruction, ...]

    @property
    def mfma(self) -> int:
        return sum(1 for i in self.body if is_mfma(i.opcode))

    @property
    def s_waitcnt(self) -> int:
        return sum(1 for i in self.body if is_waitcnt(i.opcode))


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_TYPE_FUNC_RE = re.compile(r"^\.type\s+([^\s,]+)\s*,\s*[@%]function\b")
_SIZE_RE = re.compile(r"^\.size\s+([^\s,]+)\s*,")
_KD_BEGIN_RE = re.compile(r"^\.amdhsa_kernel\s+(\S+)")
_KD_FIELD_RE = re.compile(r"^\.amdhsa_(\w+)\s+(.+)$")
_SET_RE = re.compile(r"^\.set\s+([^\s,]+)\s*,\s*(.+)$")
_INT_RE = re.compile(r"^[-+]?(0x[0-9a-fA-F]+|\d+)$")
_FUNCTION_END_LABEL = re.compile(r"^\.Lfunc_end\d*$")


def _parse_instruction(text: str, line: int, in_asm: bool) -> Instruction:
    """Split ``opcode op0, op1, op2 mod0 mod1`` into its parts (see :class:`Instruction`)."""
    pieces = text.split(None, 1)
    opcode = pieces[0].lower()
    rest = pieces[1].strip() if len(pieces) > 1 else ""
    if not rest:
        return Instruction(opcode, (), (), line, text, in_asm)
    if opcode.startswith("s_waitcnt") and "," not in rest:
        # ``s_waitcnt vmcnt(0) lgkmcnt(0)`` (counters joined by spaces or '&'): all operands.
        words = [w for w in re.split(r"[\s&]+", rest) if w]
        return Instruction(opcode, tuple(words), (), line, text, in_asm)
    parts = split_top_level(rest, ",")
    words = split_top_level(parts[-1], None)
    operands = [p for p in parts[:-1]] + words[:1]
    modifiers = words[1:]
    return Instruction(opcode, tuple(operands), tuple(modifiers), line, text, in_asm)


def _to_value(text: str) -> Any:
    """An integer if ``text`` is one (decimal or hex), otherwise the stripped text."""
    text = text.strip()
    if _INT_RE.match(text):
        return int(text, 0)
    return text


def _resolve(value: Any, table: dict[str, Any], depth: int = 0) -> Any:
    """Evaluate a resource-symbol expression: integers, known symbols and ``max(...)``.

    LLVM writes e.g. ``.set .Lk.num_vgpr, max(32, .Lcallee.num_vgpr)`` when a kernel calls
    functions; anything beyond symbols, ``max``, ``+`` and integers is returned as text.
    """
    if not isinstance(value, str) or depth > 20:
        return value
    text = value.strip()
    if _INT_RE.match(text):
        return int(text, 0)
    if text in table:
        return _resolve(table[text], table, depth + 1)
    m = re.fullmatch(r"max\((.*)\)", text)
    if m:
        args = [_resolve(a, table, depth + 1) for a in split_top_level(m.group(1), ",")]
        if args and all(isinstance(a, int) for a in args):
            return max(args)
        return value
    if "+" in text:
        args = [_resolve(a, table, depth + 1) for a in split_top_level(text, "+")]
        if args and all(isinstance(a, int) for a in args):
            return sum(args)
    return value


def _parse_metadata_yaml(text: str) -> dict[str, Any]:
    """The ``amdgpu_metadata`` document as a dict (PyYAML when present, else a tiny fallback)."""
    try:
        import yaml  # PyYAML: present in the venv as a dependency of jupytext/papermill

        data = yaml.safe_load(text)
        return data if isinstance(data, dict) else {}
    except ImportError:
        return _parse_metadata_fallback(text)
    except Exception as err:  # malformed YAML: one clear sentence
        raise ValueError(f"the amdgpu_metadata block is not valid YAML ({type(err).__name__}).") from None


def _parse_metadata_fallback(text: str) -> dict[str, Any]:
    """Scalar fields of each ``amdhsa.kernels`` entry, for when PyYAML is missing.

    LLVM writes each kernel as a list item at two spaces (``  - .agpr_count: 0``) with its
    scalar fields at four; nested lists/maps (``.args``, ``.reqd_workgroup_size``) are read
    only for ``.reqd_workgroup_size`` (a list of three integers).
    """
    kernels: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    pending_list: str | None = None
    for raw in text.splitlines():
        m = re.match(r"^  - (\.[\w]+):\s*(.*)$", raw)
        if m:
            current = {}
            kernels.append(current)
            raw = "    " + m.group(1) + ": " + m.group(2)
        if current is None:
            continue
        m = re.match(r"^    (\.[\w]+):\s*(.*)$", raw)
        if m:
            key, val = m.group(1), m.group(2).strip()
            pending_list = key if val == "" and key == ".reqd_workgroup_size" else None
            if val:
                current[key] = _to_value(val) if val not in ("true", "false") else val == "true"
            elif pending_list:
                current[key] = []
            continue
        m = re.match(r"^      - (\S+)\s*$", raw)
        if m and pending_list:
            current[pending_list].append(_to_value(m.group(1)))
        elif re.match(r"^\S", raw):
            current = None
    return {"amdhsa.kernels": kernels}


def parse(isa_text: str) -> list[Kernel]:
    """Split FlyDSL/LLVM AMDGPU assembly into its kernels (see :class:`Kernel`).

    A kernel function starts at the label named by a ``.type <name>,@function`` directive and
    ends at LLVM's ``.Lfunc_end<N>:`` label, a ``.size <name>`` directive or the next function.
    Inside it, every line that is not blank, a comment, a label or a directive (starting with
    ``.``) is one instruction; lines of inline asm between ``;;#ASMSTART`` and ``;;#ASMEND`` are
    taken the same way and flagged ``in_asm_block``. Raises ValueError when the text holds no
    kernel function.
    """
    if not isinstance(isa_text, str):
        raise ValueError(f"parse() needs the .s text as a str, got {type(isa_text).__name__}.")
    lines, meta_text = lex(isa_text)
    functions: set[str] = set()
    kernels: dict[str, Kernel] = {}
    order: list[str] = []
    symbols: dict[str, Any] = {}
    descriptors: dict[str, dict[str, Any]] = {}
    current: Kernel | None = None
    in_kd: str | None = None

    for ln in lines:
        line = ln.text
        if in_kd is not None:
            if line.startswith(".end_amdhsa_kernel"):
                in_kd = None
            else:
                m = _KD_FIELD_RE.match(line)
                if m:
                    descriptors[in_kd][m.group(1)] = _to_value(m.group(2))
            continue
        if ln.kind == "label":
            if line in functions:
                current = Kernel(line, [], {}, {})
                kernels[line] = current
                order.append(line)
            elif current is not None:
                if _FUNCTION_END_LABEL.match(line):
                    current = None
                else:
                    current.labels[line] = len(current.instructions)
            continue
        if ln.kind == "directive":
            m = _KD_BEGIN_RE.match(line)
            if m:
                in_kd = m.group(1)
                descriptors.setdefault(in_kd, {})
                current = None
                continue
            m = _TYPE_FUNC_RE.match(line)
            if m:
                functions.add(m.group(1))
                continue
            m = _SIZE_RE.match(line)
            if m and current is not None and m.group(1) == current.name:
                current = None
                continue
            m = _SET_RE.match(line)
            if m:
                symbols[m.group(1)] = m.group(2).strip()
                continue
            if line.startswith((".section", ".text", ".data", ".rodata")) and not ln.in_asm:
                current = None
            continue
        if current is not None:
            current.instructions.append(_parse_instruction(line, ln.number, ln.in_asm))
    if not order:
        raise ValueError(
            "no kernel function found in the .s text (expected a '.type <name>,@function' "
            "directive followed by the '<name>:' label)."
        )

    metadata_by_name: dict[str, dict[str, Any]] = {}
    if meta_text:
        doc = _parse_metadata_yaml(meta_text)
        for entry in doc.get("amdhsa.kernels") or []:
            if isinstance(entry, dict) and ".name" in entry:
                metadata_by_name[str(entry[".name"])] = entry

    for name in order:
        kernel = kernels[name]
        kernel.descriptor = {k: _resolve(v, symbols) for k, v in descriptors.get(name, {}).items()}
        kernel.metadata = metadata_by_name.get(name, {})
        for key, value in symbols.items():
            for prefix in (f".L{name}.", f"{name}."):
                if key.startswith(prefix) and "." not in key[len(prefix):]:
                    kernel.symbols[key[len(prefix):]] = _resolve(value, symbols)
    return [kernels[n] for n in order]


def _select(kernels: list[Kernel], kernel: str | None) -> Kernel:
    """The kernel called ``kernel`` (or ``kernel`` + FlyDSL's ``_<n>`` suffix); the only one if None."""
    names = [k.name for k in kernels]
    if kernel is None:
        if len(kernels) == 1:
            return kernels[0]
        raise ValueError(f"the .s text holds {len(kernels)} kernels ({', '.join(names)}); pass kernel=<name>.")
    for k in kernels:
        if k.name == kernel:
            return k
    suffixed = [k for k in kernels if re.fullmatch(re.escape(kernel) + r"_\d+", k.name)]
    if len(suffixed) == 1:
        return suffixed[0]
    raise ValueError(f"no kernel named {kernel!r} in the .s text; it holds: {', '.join(names)}.")


def _text_of(isa: Any) -> str:
    """The ``.s`` text of ``isa``: a str, or anything with a str ``.isa`` (a toolchain Artifact)."""
    text = getattr(isa, "isa", isa)
    if not isinstance(text, str):
        raise ValueError(f"expected the .s text (a str) or a toolchain Artifact, got {type(isa).__name__}.")
    return text


def kernel_of(isa: Any, kernel: str | None = None) -> Kernel:
    """``isa`` (a :class:`Kernel`, the ``.s`` text or an Artifact) parsed and its kernel picked (FlyDSL's
    ``_<n>`` suffix may be left off; None when the text holds one)."""
    if isinstance(isa, Kernel):
        return isa
    return _select(parse(_text_of(isa)), kernel)


# --------------------------------------------------------------------------------------------
# Opcode classes
# --------------------------------------------------------------------------------------------


def is_mfma(opcode: str) -> bool:
    """Matrix-core instructions: ``v_mfma_*`` (incl. ``v_mfma_scale_*``) and ``v_smfmac_*``."""
    return opcode.startswith(("v_mfma", "v_smfmac"))


def is_waitcnt(opcode: str) -> bool:
    return opcode == "s_waitcnt" or opcode.startswith("s_waitcnt_")


#: Bytes per lane written by each ``buffer_store_<suffix>`` (CDNA3/CDNA4 ISA guides, MUBUF).
_STORE_WIDTH = {
    "byte": 1,
    "b8": 1,
    "byte_d16_hi": 1,
    "short": 2,
    "b16": 2,
    "short_d16_hi": 2,
    "dword": 4,
    "b32": 4,
    "dwordx2": 8,
    "b64": 8,
    "dwordx3": 12,
    "b96": 12,
    "dwordx4": 16,
    "b128": 16,
}


def store_width(opcode: str) -> int | None:
    """Bytes per lane of a ``buffer_store_*`` opcode; None for format stores and other opcodes."""
    if not opcode.startswith("buffer_store_"):
        return None
    return _STORE_WIDTH.get(opcode[len("buffer_store_"):])


# --------------------------------------------------------------------------------------------
# Loops
# --------------------------------------------------------------------------------------------


def loops(isa: Any, kernel: str | None = None) -> list[Loop]:
    """Every backward branch of a kernel, as a :class:`Loop`, in program order of the branch."""
    k = kernel_of(isa, kernel)
    found = []
    for idx, inst in enumerate(k.instructions):
        target = inst.branch_target
        if target is None or target not in k.labels:
            continue
        start = k.labels[target]
        if start <= idx:
            found.append(Loop(target, start, idx, tuple(k.instructions[start: idx + 1])))
    return found


def hottest(found: Iterable[Loop]) -> Loop | None:
    """The hot loop among ``found``: the most MFMAs, ties broken by the most instructions (so an outer
    loop beats the inner one it contains when both hold the same MFMAs); None for none."""
    best = None
    for loop in found:
        if best is None or (loop.mfma, len(loop.body)) > (best.mfma, len(best.body)):
            best = loop
    return best


def hot_loop(isa_text: Any, kernel: str | None = None) -> list[Instruction] | None:
    """The body of the kernel's hot loop (:func:`hottest` of its :func:`loops`), or None when it has no
    loop. A loop is a backward ``s_branch``/``s_cbranch_*`` whose target label comes at or before it; its
    body runs from the target's first instruction to the branch, both included."""
    return _hottest_body(kernel_of(isa_text, kernel))


def _hottest_body(k) -> list[Instruction] | None:
    best = hottest(loops(k))
    return list(best.body) if best is not None else None


def loop_histogram(isa_text: Any, kernel: str | None = None) -> dict[str, int] | None:
    """``{opcode: count}`` over the hot loop's body (most frequent first), None without a loop.

    For "in the loop" questions the whole-kernel ``opcode_histogram`` cannot answer, e.g. how many
    ``buffer_load_dword`` or ``v_readfirstlane_b32`` run per iteration.
    """
    body = hot_loop(isa_text, kernel)
    if body is None:
        return None
    return histogram(body)


def mfma_operand_reuse(isa_text: Any, kernel: str | None = None, *, loop_only: bool = False) -> float | None:
    """Share of consecutive MFMA pairs whose second MFMA repeats the first's A or B operand.

    Over the MFMAs in program order (only the hot loop's with ``loop_only``), a pair counts when
    ``src0`` (operand 1, A) or ``src1`` (operand 2, B) is the same register (range) text in both.
    Reusing an operand register back to back is what an MFMA issue order tuned for operand
    locality does (e.g. a serpentine walk of the tile). None with fewer than two MFMAs.
    """
    return operand_reuse(hot_loop(isa_text, kernel) if loop_only else kernel_of(isa_text, kernel).instructions)


def operand_reuse(insts: Sequence[Instruction] | None) -> float | None:
    """:func:`mfma_operand_reuse` over the MFMAs of ``insts`` (None for none)."""
    mfmas = [i for i in insts or [] if is_mfma(i.opcode) and len(i.operands) >= 3]
    if len(mfmas) < 2:
        return None
    pairs = list(zip(mfmas, mfmas[1:]))
    shared = sum(1 for a, b in pairs if a.operands[1] == b.operands[1] or a.operands[2] == b.operands[2])
    return shared / len(pairs)


def is_lds_traffic(inst: Instruction) -> bool:
    """An LDS read (``ds_read*``) or a global -> LDS DMA (``buffer_load_* ... lds``)."""
    return inst.opcode.startswith("ds_read") or (inst.opcode.startswith("buffer_load") and "lds" in inst.modifiers)


def max_lds_run(body: Sequence[Instruction] | None) -> int | None:
    """The longest run of LDS traffic (:func:`is_lds_traffic`) in ``body`` with no MFMA in between, in
    program order (other instructions do not break a run); None for no body. 1 means every LDS read and
    DMA of the loop is issued among the MFMAs; a large number, a batch issued before the MFMAs that
    need it (whose latency the MFMAs cannot hide)."""
    if body is None:
        return None
    best = run = 0
    for inst in body:
        if inst.opcode.startswith("v_mfma"):
            run = 0
        elif is_lds_traffic(inst):
            run += 1
            best = max(best, run)
    return best


def histogram(insts: Iterable[Instruction]) -> dict[str, int]:
    """``{opcode: count}``, most frequent first, ties in alphabetical order."""
    hist: dict[str, int] = {}
    for inst in insts:
        hist[inst.opcode] = hist.get(inst.opcode, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


# --------------------------------------------------------------------------------------------
# Registers and occupancy
# --------------------------------------------------------------------------------------------


def _round_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule


def unified_vgprs(arch_vgpr: int, agpr: int) -> int:
    """VGPRs a wave takes from gfx90a+'s unified register file.

    With AGPRs in use the AGPRs start after the arch VGPRs rounded up to 4 (the
    ``accum_offset`` granule), so the total is ``roundup(arch_vgpr, 4) + agpr``; without AGPRs it
    is ``arch_vgpr``. This is LLVM's ``AMDGPU::getTotalNumVGPRs`` (AMDGPUBaseInfo.cpp) and what it
    writes as ``.amdhsa_next_free_vgpr`` (LLVM AMDGPUUsage, "Code Object V3 Kernel Descriptor":
    ``.amdhsa_accum_offset``, GFX90A/GFX942/GFX950).
    """
    if agpr > 0:
        return _round_up(arch_vgpr, ACCUM_OFFSET_GRANULE) + agpr
    return arch_vgpr


def workgroup_size(kernel: Kernel) -> int | None:
    """Work-items per workgroup: ``.reqd_workgroup_size`` product, else ``.max_flat_workgroup_size``."""
    reqd = kernel.metadata.get(".reqd_workgroup_size")
    if isinstance(reqd, list) and reqd and all(isinstance(v, int) for v in reqd):
        return math.prod(reqd)
    flat = kernel.metadata.get(".max_flat_workgroup_size")
    return flat if isinstance(flat, int) else None


def occupancy(vgpr_unified: int | None, sgpr: int | None = None, lds_bytes: int | None = 0,
              workgroup_size: int | None = None) -> dict[str, int | None]:
    """Waves per SIMD a gfx950 kernel can keep resident, and which resource limits it.

    Returns ``{"vgpr": .., "sgpr": .., "lds": .., "waves_per_simd": min of those and 8}``; a
    limit whose input is unknown (None) is None and left out of the minimum.

    * VGPRs: ``min(8, floor(512 / roundup(max(vgpr_unified, 1), 8)))`` -- 512 unified VGPRs per
      SIMD lane, allocated in blocks of 8 (LLVM ``AMDGPU::IsaInfo::getVGPRAllocGranule`` and
      ``getNumWavesPerEUWithNumVGPRs`` for gfx90a+; the gfx90a ISA guide §3.6.4, as quoted in
      LLVM commit b7611370 "Use correct VGPR threshold ... unified register file case": 512
      registers per lane in all, at most 256 arch + 256 acc).
    * SGPRs: the GFX8/GFX9 table of LLVM ``GCNSubtarget::getOccupancyWithNumSGPRs``: up to 80 SGPRs
      -> 10, 88 -> 9, 100 -> 8, more -> 7 waves (so on gfx950 it only bites above 100).
      ``sgpr`` is the metadata ``.sgpr_count`` (VCC/FLAT_SCRATCH/XNACK included).
    * LDS: a CU has 160 KiB (163840 bytes) of LDS on gfx950, allocated in 320-dword (1280-byte)
      blocks (LLVM AMDGPUUsage, COMPUTE_PGM_RSRC2 ``LDS_SIZE`` granularity for GFX950). Resident
      workgroups per CU = ``floor(163840 / roundup(lds_bytes, 1280))``; their
      ``ceil(workgroup_size / 64)`` waves spread over 4 SIMDs, so the busiest SIMD holds
      ``ceil(workgroups * waves_per_workgroup / 4)``. 0 when one workgroup does not fit.
      Needs ``workgroup_size``; only the static LDS (``group_segment_fixed_size``) is known from
      the ``.s``, so dynamic LDS passed at launch is not counted.

    Not modelled: the per-CU workgroup-slot and barrier limits, a workgroup needing all its waves
    resident at once (VGPR-limited occupancy is not rounded to whole workgroups), scratch, and
    ``amdgpu-waves-per-eu`` hints. The result is an upper bound for what the hardware schedules.
    """
    limits: dict[str, int | None] = {"vgpr": None, "sgpr": None, "lds": None}
    if vgpr_unified is not None:
        alloc = _round_up(max(int(vgpr_unified), 1), VGPR_ALLOC_GRANULE)
        limits["vgpr"] = min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD // alloc)
    if sgpr is not None:
        s = int(sgpr)
        table = 10 if s <= 80 else 9 if s <= 88 else 8 if s <= 100 else 7
        limits["sgpr"] = min(MAX_WAVES_PER_SIMD, table)
    if lds_bytes is not None and workgroup_size:
        if lds_bytes <= 0:
            limits["lds"] = MAX_WAVES_PER_SIMD
        else:
            groups = LDS_BYTES_PER_CU // _round_up(int(lds_bytes), LDS_ALLOC_GRANULE)
            waves_per_group = -(-int(workgroup_size) // WAVE_SIZE)
            limits["lds"] = min(MAX_WAVES_PER_SIMD, -(-groups * waves_per_group // SIMDS_PER_CU))
    known = [v for v in limits.values() if v is not None]
    return {**limits, "waves_per_simd": min(known + [MAX_WAVES_PER_SIMD]) if known else None}
