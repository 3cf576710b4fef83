"""Lex the AMDGPU assembly text (``.s``) LLVM writes into classified lines: the one tokenizer under the
emulator's :mod:`.parser` and any other reader of ``.s`` files (the study's ISA analysis uses it too).

Syntax (LLVM "AMDGPU Instruction Syntax" and AMDGPUUsage): a comment runs from ``;`` or ``//`` to the
end of the line (outside a quoted string); a label is ``name:`` (an instruction may follow it on the
same line); a directive starts with ``.``; every other non-blank line is one instruction.  The YAML
between ``.amdgpu_metadata`` and ``.end_amdgpu_metadata`` is returned as one text; lines between the
``;;#ASMSTART`` and ``;;#ASMEND`` markers LLVM puts around inline assembly are flagged ``in_asm``.
What a kernel is (which labels start and end one, what the directives mean) is the reader's business.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ParseError

_LABEL_RE = re.compile(r"^([A-Za-z_.$0-9][\w.$]*):(.*)$")


@dataclass(frozen=True)
class Line:
    """One line of assembly: ``kind`` is ``"label"`` (``text`` is the label's name), ``"directive"`` or
    ``"instruction"`` (``text`` without indentation and comment); ``number`` is 1-based."""

    number: int
    kind: str
    text: str
    in_asm: bool = False


def strip_comment(line: str) -> str:
    """Drop an AMDGPU asm comment (from ``;`` or ``//`` to the end of line) outside quotes."""
    quoted = False
    for pos, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif not quoted and (ch == ";" or line.startswith("//", pos)):
            return line[:pos].rstrip()
    return line.rstrip()


def split_top_level(text: str, sep: str | None) -> list[str]:
    """Split on ``sep`` (a comma, or None for runs of whitespace) outside ``[]`` and ``()``; parts are
    stripped (comma parts may be empty, whitespace parts never are)."""
    parts, cur, depth = [], [], 0
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        is_sep = (ch.isspace() if sep is None else ch == sep) and depth == 0
        if is_sep:
            if cur or sep is not None:
                parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or (sep is not None and parts):
        parts.append("".join(cur).strip())
    return [p for p in parts if p] if sep is None else parts


def lex(text: str) -> tuple[list[Line], str]:
    """(the lines of ``text`` that hold something, the ``amdgpu_metadata`` YAML text or "")."""
    lines: list[Line] = []
    meta: list[str] | None = None
    meta_text = ""
    in_asm = False
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if meta is not None:
            if stripped == ".end_amdgpu_metadata":
                meta_text, meta = "\n".join(meta), None
            else:
                meta.append(raw)
            continue
        if stripped == ".amdgpu_metadata":
            meta = []
            continue
        if stripped.startswith(";;#ASMSTART"):
            in_asm = True
            continue
        if stripped.startswith(";;#ASMEND"):
            in_asm = False
            continue
        line = strip_comment(stripped)
        if not line:
            continue
        m = _LABEL_RE.match(line)
        if m:
            lines.append(Line(number, "label", m.group(1), in_asm))
            rest = m.group(2).strip()       # rare: ``label: instruction``
            if rest and not rest.startswith("."):
                lines.append(Line(number, "instruction", rest, in_asm))
        else:
            lines.append(Line(number, "directive" if line.startswith(".") else "instruction", line, in_asm))
    if meta is not None:
        raise ParseError("the .s text has an .amdgpu_metadata block without .end_amdgpu_metadata.")
    return lines, meta_text
