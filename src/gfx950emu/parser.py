"""Parse the AMDGPU assembly text (``.s``) that LLVM writes for gfx950 kernels.

What we read, and where the format is defined:

* the instruction stream between the kernel's entry label and its
  ``.Lfunc_end`` label (LLVM "AMDGPU Instruction Syntax" pages, gfx950 variant);
* the ``.amdhsa_kernel`` ... ``.end_amdhsa_kernel`` descriptor directives
  (LLVM AMDGPUUsage, "Code Object V3+ Kernel Descriptor" / "AMDHSA Kernel
  Assembler Directives");
* the YAML ``.amdgpu_metadata`` block (LLVM AMDGPUUsage, "Code Object V3+
  Metadata", the ``amdhsa.kernels`` list and its ``.args`` entries).

The metadata is parsed with a tiny indentation-based YAML reader so the
package depends on numpy only.  Only what the kernels need is understood:
mappings, ``-`` sequences and plain scalars.

Every instruction keeps its 1-based source line so that errors and hazard
reports can point at the text the user is looking at.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import ParseError
from .lexer import lex, split_top_level

__all__ = [
    "Operand", "Instruction", "KernelSource", "ParseError",
    "parse_module", "parse_operand", "SGPR_SPECIAL",
]


# SGPR-space encodings of named scalar registers on GFX9 (LLVM AMDGPUUsage,
# "Register" syntax page for gfx9/gfx950: vcc = s[106:107], m0 = 124,
# exec = s[126:127], flat_scratch = s[102:103], xnack_mask = s[104:105],
# trap temporaries ttmp0.. start at 108).
SGPR_SPECIAL = {
    "flat_scratch": (102, 2), "flat_scratch_lo": (102, 1), "flat_scratch_hi": (103, 1),
    "xnack_mask": (104, 2), "xnack_mask_lo": (104, 1), "xnack_mask_hi": (105, 1),
    "vcc": (106, 2), "vcc_lo": (106, 1), "vcc_hi": (107, 1),
    "m0": (124, 1),
    "exec": (126, 2), "exec_lo": (126, 1), "exec_hi": (127, 1),
}
TTMP_BASE = 108
NUM_SGPR_SLOTS = 128


@dataclass(frozen=True)
class Operand:
    """One parsed operand.

    kind: ``v`` / ``a`` / ``s`` (register ranges; named SGPRs such as vcc map
    to ``s`` with their encoding), ``imm`` (integer, value is the int as
    written), ``fimm`` (floating inline constant, value is the float),
    ``label``, ``off``, ``scc``/``vccz``/``execz`` (condition sources).
    neg/abs are the VOP3 source modifiers written as ``-x`` / ``|x|``.
    """

    kind: str
    index: int = 0
    count: int = 1
    value: object = None
    neg: bool = False
    abs: bool = False
    text: str = ""

    @property
    def is_reg(self) -> bool:
        return self.kind in ("v", "a", "s")


@dataclass
class Instruction:
    line: int
    text: str
    opcode: str
    operands: tuple
    mods: dict


@dataclass
class KernelSource:
    name: str
    instructions: list
    labels: dict                 # label -> instruction index it precedes
    descriptor: dict             # ".amdhsa_xxx" without prefix -> int
    metadata: dict               # this kernel's entry in amdhsa.kernels (may be {})
    target: str = ""
    extra: dict = field(default_factory=dict)


_REG_RE = re.compile(r"^([vsa])(\d+)$")
_RANGE_RE = re.compile(r"^([vsa])\[(\d+):(\d+)\]$")
_TTMP_RE = re.compile(r"^ttmp(\d+)$")
_TTMP_RANGE_RE = re.compile(r"^ttmp\[(\d+):(\d+)\]$")
_INT_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_FLOAT_RE = re.compile(r"^-?(\d+\.\d*([eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf|nan)$")
_LABEL_RE = re.compile(r"^[A-Za-z_.$][\w.$]*$")


def parse_operand(tok: str, line: int = 0) -> Operand:
    """Parse one operand token (``v[2:5]``, ``-|v1|``, ``s7``, ``0x40``, ``1.0``...)."""
    text = tok
    t = tok.strip()
    neg = absf = False
    if t.startswith("neg(") and t.endswith(")"):
        neg, t = True, t[4:-1].strip()
    if t.startswith("abs(") and t.endswith(")"):
        absf, t = True, t[4:-1].strip()
    if t.startswith("-") and len(t) > 1 and not _INT_RE.match(t) and not _FLOAT_RE.match(t):
        neg, t = True, t[1:].strip()
    if t.startswith("|") and t.endswith("|") and len(t) > 2:
        absf, t = True, t[1:-1].strip()
    if t.startswith(("hwreg(", "sendmsg(")) and t.endswith(")"):
        return Operand("func", value=t, text=t)   # s_getreg/s_setreg/s_sendmsg operands (decoded there)
    if t.startswith("lit(") and t.endswith(")"):
        t = t[4:-1].strip()
    m = _REG_RE.match(t)
    if m:
        return Operand(m.group(1), int(m.group(2)), 1, neg=neg, abs=absf, text=text)
    m = _RANGE_RE.match(t)
    if m:
        lo, hi = int(m.group(2)), int(m.group(3))
        if hi < lo:
            raise ParseError(f"line {line}: bad register range {tok!r}")
        return Operand(m.group(1), lo, hi - lo + 1, neg=neg, abs=absf, text=text)
    if t in SGPR_SPECIAL:
        idx, cnt = SGPR_SPECIAL[t]
        return Operand("s", idx, cnt, neg=neg, abs=absf, text=text)
    m = _TTMP_RE.match(t)
    if m:
        return Operand("s", TTMP_BASE + int(m.group(1)), 1, text=text)
    m = _TTMP_RANGE_RE.match(t)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        return Operand("s", TTMP_BASE + lo, hi - lo + 1, text=text)
    if t in ("scc", "src_scc"):
        return Operand("scc", text=text)
    if t in ("vccz", "src_vccz"):
        return Operand("vccz", text=text)
    if t in ("execz", "src_execz"):
        return Operand("execz", text=text)
    if t == "off":
        return Operand("off", text=text)
    if _INT_RE.match(t):
        return Operand("imm", value=int(t, 0), neg=neg, abs=absf, text=text)
    if _FLOAT_RE.match(t):
        return Operand("fimm", value=float(t), neg=neg, abs=absf, text=text)
    if _LABEL_RE.match(t):
        return Operand("label", value=t, text=text)
    raise ParseError(f"line {line}: cannot parse operand {tok!r}")


def _parse_mod_value(v: str):
    v = v.strip()
    if v.startswith("[") and v.endswith("]"):
        return tuple(int(x, 0) for x in v[1:-1].split(",") if x.strip())
    try:
        return int(v, 0)
    except ValueError:
        return v


def parse_instruction(text: str, line: int) -> Instruction:
    """Split ``opcode op, op, op mod mod:val`` into operands and modifiers."""
    parts = text.split(None, 1)
    opcode = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    mods: dict = {}
    operands: list = []
    if opcode == "s_waitcnt" or opcode.startswith("s_waitcnt_"):
        # counters written as vmcnt(N) expcnt(N) lgkmcnt(N), possibly joined by & or ,
        for m in re.finditer(r"(vmcnt|expcnt|lgkmcnt)\((\d+)\)", rest):
            mods[m.group(1)] = int(m.group(2))
        if not mods and rest.strip():
            try:
                mods["simm16"] = int(rest.strip(), 0)
            except ValueError:
                raise ParseError(f"line {line}: cannot parse s_waitcnt operand {rest!r}") from None
        return Instruction(line, text, opcode, (), mods)
    for piece in split_top_level(rest, ","):
        toks = split_top_level(piece, None)
        if not toks:
            continue
        first, extra = toks[0], toks[1:]
        if ":" in first and not first.startswith(("v[", "s[", "a[", "ttmp[")) and "[" not in first.split(":")[0]:
            extra = toks  # a modifier in operand position (no operands left)
        elif first in _BARE_MODS and operands:
            extra = toks
        else:
            operands.append(parse_operand(first, line))
        for tok in extra:
            if ":" in tok:
                k, v = tok.split(":", 1)
                mods[k] = _parse_mod_value(v)
            elif tok in _BARE_MODS:
                mods[tok] = True
            else:
                raise ParseError(f"line {line}: unexpected token {tok!r} in {text!r}")
    return Instruction(line, text, opcode, tuple(operands), mods)


_BARE_MODS = {
    "offen", "idxen", "lds", "glc", "slc", "nt", "sc0", "sc1", "clamp", "gds",
    "tfe", "lwe", "bound_ctrl", "row_mirror", "row_half_mirror", "addr64",
    "dlc", "scc_mod", "sext",
}


# ----------------------------------------------------------------- YAML ----
def _yaml_scalar(s: str):
    s = s.strip()
    if not s:
        return None
    if (s[0] == s[-1]) and s[0] in "'\"" and len(s) >= 2:
        return s[1:-1]
    if s in ("true", "false"):
        return s == "true"
    if s.startswith("[") and s.endswith("]"):
        return [_yaml_scalar(x) for x in s[1:-1].split(",") if x.strip()]
    try:
        return int(s, 0)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def parse_yaml(text: str):
    """Read the block-style YAML subset LLVM writes for amdgpu_metadata."""
    rows = []
    for raw in text.splitlines():
        if not raw.strip() or raw.strip() in ("---", "...") or raw.strip().startswith("#"):
            continue
        rows.append([len(raw) - len(raw.lstrip(" ")), raw.strip()])
    pos = [0]

    def block(indent):
        if pos[0] >= len(rows):
            return None
        if rows[pos[0]][1].startswith("- ") or rows[pos[0]][1] == "-":
            return seq(rows[pos[0]][0])
        return mapping(rows[pos[0]][0])

    def seq(indent):
        out = []
        while pos[0] < len(rows) and rows[pos[0]][0] == indent and rows[pos[0]][1].startswith("-"):
            body = rows[pos[0]][1][1:].strip()
            if not body:
                pos[0] += 1
                out.append(block(indent + 1))
            elif re.match(r"^[^'\"\s][^:]*:(\s|$)", body):
                # "- key: value" opens a mapping whose keys sit at indent+2
                rows[pos[0]] = [indent + 2, body]
                out.append(mapping(indent + 2))
            else:
                out.append(_yaml_scalar(body))
                pos[0] += 1
        return out

    def mapping(indent):
        out = {}
        while pos[0] < len(rows) and rows[pos[0]][0] == indent and not rows[pos[0]][1].startswith("- "):
            key, _, val = rows[pos[0]][1].partition(":")
            pos[0] += 1
            if val.strip():
                out[key.strip()] = _yaml_scalar(val)
            elif pos[0] < len(rows) and (rows[pos[0]][0] > indent or
                                        (rows[pos[0]][0] == indent and rows[pos[0]][1].startswith("-"))):
                out[key.strip()] = block(rows[pos[0]][0])
            else:
                out[key.strip()] = None
        return out

    return block(0) if rows else {}


# --------------------------------------------------------------- module ----
def parse_module(text: str) -> dict:
    """Parse a whole ``.s`` file into {kernel name: KernelSource}."""
    if not isinstance(text, str) or not text.strip():
        raise ParseError("the ISA text is empty")
    lines, meta_text = lex(text)
    functions, descriptors, target = set(), {}, ""
    cur_desc = None
    for ln in lines:
        if ln.kind != "directive":
            continue
        s = ln.text
        m = re.match(r"^\.type\s+([\w.$]+)\s*,\s*@function", s)
        if m:
            functions.add(m.group(1))
        m = re.match(r'^\.amdgcn_target\s+"([^"]+)"', s)
        if m:
            target = m.group(1)
        m = re.match(r"^\.amdhsa_kernel\s+([\w.$]+)", s)
        if m:
            cur_desc = descriptors.setdefault(m.group(1), {})
            continue
        if s.startswith(".end_amdhsa_kernel"):
            cur_desc = None
            continue
        if cur_desc is not None:
            m = re.match(r"^\.amdhsa_(\w+)\s+(\S+)", s)
            if m:
                try:
                    cur_desc[m.group(1)] = int(m.group(2), 0)
                except ValueError:
                    cur_desc[m.group(1)] = m.group(2)
    meta = parse_yaml(meta_text) if meta_text else {}
    meta_by_name = {}
    if isinstance(meta, dict):
        for k in meta.get("amdhsa.kernels") or []:
            if isinstance(k, dict) and "name" in {kk.lstrip(".") for kk in k}:
                meta_by_name[k.get(".name")] = k
    kernels = {}
    names = set(descriptors) | functions
    cur = None
    for ln in lines:
        if ln.kind == "label":
            lab = ln.text
            if lab in names:
                cur = KernelSource(lab, [], {}, descriptors.get(lab, {}), meta_by_name.get(lab, {}), target)
                kernels[lab] = cur
            elif lab.startswith(".Lfunc_end"):
                cur = None
            elif cur is not None:
                cur.labels[lab] = len(cur.instructions)
        elif ln.kind == "instruction" and cur is not None:
            cur.instructions.append(parse_instruction(ln.text, ln.number))
    if not kernels:
        raise ParseError("no kernel found in the ISA text (no '.type NAME,@function' entry label)")
    return kernels
