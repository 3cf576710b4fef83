"""gfx950emu.load_code_object: a code object (.co) assembled from a .s loads into the same Program as
gfx950emu.load(.s) and runs bit-identically.

The code objects are made here from assembly text with llvm-mc + ld.lld (no GPU, no ROCm); the tests
need a gfx950-capable LLVM (ROCm's, or Debian's llvm-22 package) and skip with the reason otherwise.
"""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gfx950emu
from gfx950emu import codeobject

DATA = Path(__file__).parent / "data"


def _tools():
    try:
        return codeobject.find_llvm_tools()
    except codeobject.CodeObjectError as err:
        pytest.skip(f"no gfx950-capable LLVM tools (install llvm-22 or ROCm): {err}")


def _linker():
    tools = _tools()
    here = os.path.join(os.path.dirname(tools.objdump), "ld.lld")
    if os.access(here, os.X_OK):
        return [here]
    for name in ["ld.lld"] + sorted((os.path.basename(p) for d in os.environ.get("PATH", "").split(os.pathsep)
                                     for p in glob.glob(os.path.join(d, "ld.lld-*"))), reverse=True):
        if shutil.which(name):
            return [shutil.which(name)]
    for p in sorted(glob.glob("/usr/lib/llvm-*/bin/ld.lld"), reverse=True):
        return [p]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "ld.lld"]
    pytest.skip("no ld.lld to link a code object (lld package, ROCm, or PyPI ziglang)")


def assemble(isa: str, tmp_path: Path, name: str = "k") -> Path:
    """.s text -> linked code object, as the compiler's last steps would make it."""
    mc = os.path.join(os.path.dirname(_tools().objdump), "llvm-mc")
    if not os.access(mc, os.X_OK):
        pytest.skip(f"no llvm-mc next to {_tools().objdump}")
    target = re.search(r'\.amdgcn_target\s+"([^"]+)"', isa).group(1)
    triple = target.rsplit("-", 1)[0].rstrip("-") if target.count("-") >= 4 else "amdgcn-amd-amdhsa"
    src, obj, co = tmp_path / f"{name}.s", tmp_path / f"{name}.o", tmp_path / f"{name}.co"
    src.write_text(isa)
    subprocess.run([mc, f"-triple={triple}", "-mcpu=gfx950", "-filetype=obj", str(src), "-o", str(obj)],
                   check=True, capture_output=True)
    subprocess.run(_linker() + ["-shared", str(obj), "-o", str(co)], check=True, capture_output=True)
    return co


def _complete_metadata(isa: str, sgprs: int, vgprs: int) -> str:
    """The hand-written test kernels omit metadata fields the emulator ignores but llvm-mc requires."""
    return isa.replace("    .max_flat_workgroup_size:",
                       f"    .private_segment_fixed_size: 0\n    .sgpr_count: {sgprs}\n"
                       f"    .vgpr_count: {vgprs}\n    .max_flat_workgroup_size:", 1)


def _same_program(a, b):
    assert a.name == b.name
    assert len(a.instructions) == len(b.instructions)
    for x, y in zip(a.instructions, b.instructions):
        if x.operands and x.operands[0].kind == "label":
            assert x.opcode == y.opcode
            assert a.source.labels[x.operands[0].value] == b.source.labels[y.operands[0].value], x.text
        else:
            assert (x.opcode, x.operands, x.mods) == (y.opcode, y.operands, y.mods), (x.text, y.text)
    assert a.metadata == b.metadata
    assert (a.lds_size, a.accum_offset, a.kernarg_size, a.args) == (b.lds_size, b.accum_offset, b.kernarg_size, b.args)
    # every descriptor field the .s states and a code object stores is the same
    for key, val in a.descriptor.items():
        if key not in ("next_free_sgpr", "reserve_vcc"):
            assert b.descriptor[key] == val, key


def test_vadd_code_object_is_the_same_program_and_runs_identically(tmp_path):
    isa = _complete_metadata((DATA / "vadd.s").read_text(), 16, 8)
    prog_s = gfx950emu.load(isa)
    prog_co = gfx950emu.load_code_object(assemble(isa, tmp_path))
    _same_program(prog_s, prog_co)
    rng = np.random.default_rng(3)
    n = 200                                    # not a multiple of 64: the branch over the tail is taken
    a, b = (rng.integers(0, 1 << 30, 256, dtype=np.uint32) for _ in range(2))
    outs = []
    for prog in (prog_s, prog_co):
        out = np.zeros(256, np.uint32)
        res = gfx950emu.launch(prog, grid=(4, 1, 1), block=(64, 1, 1), args=[a, b, out, n], hazards="strict")
        outs.append((out, res.stats.by_opcode))
    assert np.array_equal(outs[0][0], outs[1][0])
    assert np.array_equal(outs[0][0][:n], a[:n] + b[:n] * 2) and not outs[0][0][n:].any()
    assert outs[0][1] == outs[1][1]


LOOP = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.text
\t.globl\tloop
\t.p2align\t8
\t.type\tloop,@function
loop:
\ts_load_dwordx2 s[4:5], s[0:1], 0x0
\ts_load_dword s6, s[0:1], 0x8
\tv_mov_b32_e32 v2, 0
\ts_mov_b32 s7, 0
\ts_waitcnt lgkmcnt(0)
.LBB0_1:
\tv_add_u32_e32 v2, v2, v0
\ts_add_u32 s7, s7, 1
\ts_cmp_lt_u32 s7, s6
\ts_cbranch_scc1 .LBB0_1
\ts_branch .LBB0_3
\ts_nop 0
.LBB0_3:
\tv_lshlrev_b32_e32 v1, 2, v0
\tglobal_store_dword v1, v2, s[4:5]
\ts_endpgm
.Lfunc_end0:
\t.size\tloop, .Lfunc_end0-loop
\t.rodata
\t.p2align\t6, 0x0
\t.amdhsa_kernel loop
\t\t.amdhsa_group_segment_fixed_size 0
\t\t.amdhsa_kernarg_size 12
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t\t.amdhsa_system_vgpr_workitem_id 0
\t\t.amdhsa_next_free_vgpr 8
\t\t.amdhsa_next_free_sgpr 16
\t\t.amdhsa_accum_offset 8
\t.end_amdhsa_kernel
\t.text
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           out
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .name:           n
        .offset:         8
        .size:           4
        .value_kind:     by_value
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 12
    .max_flat_workgroup_size: 64
    .name:           loop
    .private_segment_fixed_size: 0
    .sgpr_count:     16
    .symbol:         loop.kd
    .vgpr_count:     8
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
\t.end_amdgpu_metadata
"""


def test_backward_and_forward_branches_become_labels(tmp_path):
    co = assemble(LOOP, tmp_path)
    text = gfx950emu.code_object_to_isa(co)
    assert re.search(r"s_cbranch_scc1 \.L0_[0-9a-f]+", text) and re.search(r"s_branch \.L0_[0-9a-f]+", text)
    prog_s, prog_co = gfx950emu.load(LOOP), gfx950emu.load_code_object(co.read_bytes())   # bytes work too
    _same_program(prog_s, prog_co)
    outs = []
    for prog in (prog_s, prog_co):
        out = np.zeros(64, np.uint32)
        gfx950emu.launch(prog, grid=1, block=64, args=[out, 5], hazards="strict")
        outs.append(out)
    assert np.array_equal(outs[0], np.arange(64) * 5) and np.array_equal(outs[0], outs[1])


def test_flydsl_tile_code_object_runs_bit_identically(tmp_path):
    """A kernel FlyDSL compiled (the one-wave MXFP4 MFMA tile, LDS DMA and scaled MFMA) assembled into
    a code object gives the bytes its .s gives."""
    pytest.importorskip("flydsl")
    from mxfp4_ablation import toolchain
    from mxfp4_ablation.kernels import mfma_tile

    try:
        art = toolchain.compile("mxfp4_ablation.kernels.mfma_tile:compile_entry", {"K": 256})
    except toolchain.ToolchainError as err:
        pytest.skip(f"no offline compile here: {str(err).splitlines()[0]}")
    prog_s = gfx950emu.load(art.isa)
    prog_co = gfx950emu.load_code_object(assemble(art.isa, tmp_path))
    _same_program(prog_s, prog_co)
    outs = []
    for prog in (prog_s, prog_co):
        inputs = mfma_tile.make_inputs(256, seed=2)
        gfx950emu.launch(prog, grid=1, block=64, args=mfma_tile.kernel_args(inputs), hazards="strict")
        outs.append(inputs["C"].numpy().copy())
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    assert np.abs(outs[0]).sum() > 0


def test_descriptor_fields_decode_from_the_bytes():
    kd = bytearray(64)
    kd[0:4] = (2048).to_bytes(4, "little")              # group segment
    kd[8:12] = (120).to_bytes(4, "little")              # kernarg size
    kd[44:48] = ((28 // 4 - 1) | (1 << 16)).to_bytes(4, "little")          # rsrc3: accum_offset 28, tg_split
    kd[48:52] = ((3 << 0) | (2 << 6) | (3 << 16)).to_bytes(4, "little")   # 32 VGPRs, 24 SGPRs, denorm 3
    kd[52:56] = ((2 << 1) | (1 << 7) | (1 << 8) | (2 << 11)).to_bytes(4, "little")
    kd[56:58] = (1 << 3).to_bytes(2, "little")          # kernarg segment ptr
    kd[58:60] = (2 | (1 << 7)).to_bytes(2, "little")    # preload 2 dwords at offset 1
    d = codeobject.decode_descriptor(bytes(kd))
    assert d["group_segment_fixed_size"] == 2048 and d["kernarg_size"] == 120
    assert d["accum_offset"] == 28 and d["tg_split"] == 1
    assert d["next_free_vgpr"] == 32 and d["next_free_sgpr"] == 24 and d["float_denorm_mode_32"] == 3
    assert d["user_sgpr_count"] == 2 and d["user_sgpr_kernarg_segment_ptr"] == 1 and d["user_sgpr_dispatch_ptr"] == 0
    assert (d["system_sgpr_workgroup_id_x"], d["system_sgpr_workgroup_id_y"], d["system_sgpr_workgroup_id_z"]) == (1, 1, 0)
    assert d["system_vgpr_workitem_id"] == 2
    assert (d["user_sgpr_kernarg_preload_length"], d["user_sgpr_kernarg_preload_offset"]) == (2, 1)


def test_bad_inputs_are_one_clear_error(tmp_path):
    with pytest.raises(codeobject.CodeObjectError, match="not an ELF"):
        gfx950emu.load_code_object(b"hello, world")
    with pytest.raises(codeobject.CodeObjectError, match="cannot read code object"):
        gfx950emu.load_code_object(tmp_path / "missing.co")
    with pytest.raises(codeobject.CodeObjectError, match="takes bytes or a path"):
        gfx950emu.load_code_object(42)
    host = Path(sys.executable).resolve().read_bytes()[:1 << 16]
    with pytest.raises(codeobject.CodeObjectError, match="not AMDGPU"):
        codeobject.kernel_names(host + b"\0" * (1 << 20))


def test_a_code_object_for_another_gpu_is_refused(tmp_path):
    isa = _complete_metadata((DATA / "vadd.s").read_text(), 16, 8)
    data = bytearray(assemble(isa, tmp_path).read_bytes())
    assert codeobject.kernel_names(bytes(data)) == ["vadd"]
    data[48] = 0x4C                                     # e_flags mach -> gfx942
    with pytest.raises(codeobject.CodeObjectError, match="gfx942"):
        gfx950emu.load_code_object(bytes(data))


def test_missing_tools_name_rocm_and_llvm22(monkeypatch):
    old = [("/usr/bin/llvm-objdump", "/usr/bin/llvm-readelf", False)] if os.path.exists("/usr/bin/llvm-objdump") else []
    monkeypatch.setattr(codeobject, "_candidates", lambda: iter(old))
    codeobject.find_llvm_tools.cache_clear()
    try:
        with pytest.raises(codeobject.CodeObjectError) as err:
            codeobject.find_llvm_tools()
    finally:
        codeobject.find_llvm_tools.cache_clear()
    msg = str(err.value)
    assert "ROCm" in msg and "llvm-22" in msg and "\n" not in msg


def test_hand_written_style_code_object_without_symbol_size(tmp_path):
    """Like aiter's .co files: no .size on the kernel symbol and local label symbols, which llvm-objdump
    prints as branch operands; the kernel ends at its last s_endpgm (padding dropped)."""
    isa = LOOP.replace("\t.size\tloop, .Lfunc_end0-loop\n", "").replace(".LBB0_1", "loop_head")
    isa = isa.replace("\ts_endpgm\n", "\ts_endpgm\n\ts_nop 0\n\ts_nop 0\n")
    co = assemble(isa, tmp_path)
    prog = gfx950emu.load_code_object(co)
    assert prog.instructions[-1].opcode == "s_endpgm"
    _same_program(gfx950emu.load(LOOP), prog)
    out = np.zeros(64, np.uint32)
    gfx950emu.launch(prog, grid=1, block=64, args=[out, 3], hazards="strict")
    assert np.array_equal(out, np.arange(64) * 3)


def test_command_line_writes_the_isa_and_lists_kernels(tmp_path, capsys):
    co = assemble(LOOP, tmp_path)
    assert codeobject.main([str(co), "--list"]) == 0 and capsys.readouterr().out.split() == ["loop"]
    out = tmp_path / "loop.s"
    assert codeobject.main([str(co), "-o", str(out)]) == 0
    assert gfx950emu.load(out.read_text()).name == "loop"
    assert codeobject.main([str(tmp_path / "nothing.co")]) == 2
    assert "cannot read code object" in capsys.readouterr().err


def _reassembled_text_bytes(isa_text: str, name: str, tmp_path: Path) -> bytes:
    """The kernel's instructions as code_object_to_isa wrote them, assembled again (.text bytes)."""
    body, inside = ["\t.text"], False
    for line in isa_text.splitlines():
        if line == f"{name}:":
            inside = True
        elif line.startswith(".Lfunc_end"):
            inside = False
        elif inside:
            body.append(line)
    src, obj, raw = tmp_path / "rt.s", tmp_path / "rt.o", tmp_path / "rt.bin"
    src.write_text("\n".join(body) + "\n")
    bindir = os.path.dirname(_tools().objdump)
    subprocess.run([os.path.join(bindir, "llvm-mc"), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj",
                    str(src), "-o", str(obj)], check=True, capture_output=True)
    objcopy = os.path.join(bindir, "llvm-objcopy")
    if not os.access(objcopy, os.X_OK):
        pytest.skip(f"no llvm-objcopy next to {_tools().objdump}")
    subprocess.run([objcopy, "-O", "binary", "--only-section=.text", str(obj), str(raw)], check=True, capture_output=True)
    return raw.read_bytes()


def test_the_disassembly_loses_nothing_it_reassembles_to_the_same_bytes(tmp_path):
    """Labels instead of offsets, no encodings: the text still pins every bit (FlyDSL's GEMM with its
    runtime K loop when FlyDSL is here, else the hand-written loop kernel)."""
    isa, name = LOOP, "loop"
    if importlib.util.find_spec("flydsl") is not None:
        from mxfp4_ablation import toolchain

        try:
            isa = toolchain.compile("mxfp4_ablation.kernels.gemm:compile_entry", {"M": 256, "N": 256, "K": 1536}).isa
            name = "mxfp4_gemm_0"
        except toolchain.ToolchainError:
            pass
    co = assemble(isa, tmp_path)
    data = co.read_bytes()
    text = gfx950emu.code_object_to_isa(data)
    again = _reassembled_text_bytes(text, name, tmp_path)
    elf = codeobject._Elf(data, str(co))
    (k,) = [k for k in codeobject._kernels(elf, str(co)) if k.name == name]
    assert len(again) == k.end - k.start
    assert again == elf.read_vaddr(k.start, len(again))
