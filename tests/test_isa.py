"""Tests for mxfp4_ablation.isa: hand-written .s edge cases, and real FlyDSL kernels compiled offline.

The compiled kernels are built by the ``build_*`` functions below (compile targets for
``mxfp4_ablation.toolchain.compile``: each returns ``(jit_launcher, args)``). FlyDSL is imported only
inside them, in the toolchain's worker process, so collecting this file stays fast.
"""

# No `from __future__ import annotations` here: FlyDSL reads kernel annotations (fx.Constexpr) as objects.
import json
import os
import sys
from pathlib import Path

import pytest

from mxfp4_ablation import isa, metrics

DATA = Path(__file__).parent / "data" / "isa"

# ----------------------------------------------------------------------------------------------
# Compile targets (run in the toolchain worker)
# ----------------------------------------------------------------------------------------------

#: Loop GEMM tile: a 64x64 block of C, 4 waves in a 2x2 grid of 16x16x4 f32 MFMAs, K tiles of 8.
LOOP_BM, LOOP_BN, LOOP_BK = 64, 64, 8
#: Per K-tile each wave issues (32/16) x (32/16) tiles x (8/4) k-steps = 8 MFMAs and loads its
#: 32x8 A and 32x8 B fragments, 4 + 4 dwords per lane.
MFMA_PER_KTILE = 8
LOADS_PER_KTILE = 8


def _partition_s(thr_copy, tensor):
    # Called from a dynamic loop body: FlyDSL's AST rewriter treats a method call on an outer
    # variable inside the loop as a loop-carried assignment, so the call lives out here.
    return thr_copy.partition_S(tensor)


def build_loop_gemm(unroll: int = 1, k: int = 64):
    """A runtime K loop around 8 MFMAs; ``unroll`` is the loop's unroll count hint to LLVM."""
    import torch

    import flydsl.compiler as flyc
    import flydsl.expr as fx

    @flyc.kernel
    def isa_loop_gemm(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, unroll_count: fx.Constexpr[int]):
        tid = fx.thread_idx.x
        bid = fx.block_idx.x
        _, K = A.shape.unpack()
        A = fx.rocdl.make_buffer_tensor(A)
        B = fx.rocdl.make_buffer_tensor(B)
        C = fx.rocdl.make_buffer_tensor(C)
        bA = fx.zipped_divide(A, (LOOP_BM, LOOP_BK))
        bB = fx.zipped_divide(B, (LOOP_BN, LOOP_BK))
        bC = fx.slice(fx.zipped_divide(C, (LOOP_BM, LOOP_BN)), (None, bid))
        mma_atom = fx.make_mma_atom(fx.rocdl.MFMA(16, 16, 4, fx.Float32))
        tiled_mma = fx.make_tiled_mma(mma_atom, fx.make_layout((2, 2, 1), (1, 2, 0)))
        thr_mma = tiled_mma.thr_slice(tid)
        copy_atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
        thr_copy_A = fx.make_tiled_copy_A(copy_atom, tiled_mma).get_slice(tid)
        thr_copy_B = fx.make_tiled_copy_B(copy_atom, tiled_mma).get_slice(tid)
        thr_copy_C = fx.make_tiled_copy_C(copy_atom, tiled_mma).get_slice(tid)
        frag_A = thr_mma.make_fragment_A(fx.slice(bA, (None, (bid, 0))))
        frag_B = thr_mma.make_fragment_B(fx.slice(bB, (None, (0, 0))))
        frag_C = thr_mma.make_fragment_C(bC)
        copy_frag_A = thr_copy_A.retile(frag_A)
        copy_frag_B = thr_copy_B.retile(frag_B)
        copy_frag_C = thr_copy_C.retile(frag_C)
        frag_C.fill(0)
        for kt in range(K // LOOP_BK, unroll=unroll_count):
            fx.copy(copy_atom, _partition_s(thr_copy_A, fx.slice(bA, (None, (bid, kt)))), copy_frag_A, pred=None)
            fx.copy(copy_atom, _partition_s(thr_copy_B, fx.slice(bB, (None, (0, kt)))), copy_frag_B, pred=None)
            fx.gemm(mma_atom, frag_C, frag_A, frag_B, frag_C)
        fx.copy(copy_atom, copy_frag_C, _partition_s(thr_copy_C, bC), pred=None)

    @flyc.jit
    def launch(A: fx.Tensor, B: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        isa_loop_gemm(A, B, C, unroll).launch(grid=(1, 1, 1), block=(256, 1, 1), stream=stream)

    a = torch.zeros(LOOP_BM, k)
    b = torch.zeros(LOOP_BN, k)
    c = torch.zeros(LOOP_BM, LOOP_BN)
    return launch, (a, b, c)


#: Threads of the LDS kernel's workgroup (4 waves).
LDS_THREADS = 256
#: The 3-instruction inline asm block of the LDS kernel, in order.
ASM_BLOCK = ("v_mul_f32", "v_add_f32", "v_max_f32")


def build_lds_asm(lds_floats: int = 16384):
    """LDS round trip (write, s_barrier, read reversed) plus inline asm: a 3-line block and an AGPR
    round trip (``v_accvgpr_write_b32`` / ``v_accvgpr_read_b32`` via the ``a`` constraint)."""
    import torch

    import flydsl.compiler as flyc
    import flydsl.expr as fx
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import llvm

    @flyc.kernel
    def isa_lds_asm(A: fx.Tensor, C: fx.Tensor, n: fx.Constexpr[int]):
        tid = fx.thread_idx.x
        tA = fx.logical_divide(fx.rocdl.make_buffer_tensor(A), fx.make_layout(1, 1))
        tC = fx.logical_divide(fx.rocdl.make_buffer_tensor(C), fx.make_layout(1, 1))
        atom = fx.make_copy_atom(fx.rocdl.BufferCopy32b(), fx.Float32)
        r = fx.make_rmem_tensor(1, fx.Float32)
        fx.copy_atom_call(atom, fx.slice(tA, (None, tid)), r)
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Float32, n]).peek()
        lds[tid] = r[0]
        fx.gpu.barrier()
        x = lds[n - 1 - tid].ir_value()
        f32 = ir.F32Type.get()
        y = llvm.inline_asm(f32, [x], "v_mul_f32 $0, $1, $1\n\tv_add_f32 $0, $0, $1\n\tv_max_f32 $0, $0, $1",
                            "=&v,v", has_side_effects=True)
        acc = llvm.inline_asm(f32, [y], "v_accvgpr_write_b32 $0, $1", "=a,v", has_side_effects=True)
        z = llvm.inline_asm(f32, [acc], "v_accvgpr_read_b32 $0, $1", "=v,a", has_side_effects=True)
        r[0] = fx.Float32(z)
        fx.copy_atom_call(atom, r, fx.slice(tC, (None, tid)))

    @flyc.jit
    def launch(A: fx.Tensor, C: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        isa_lds_asm(A, C, lds_floats).launch(grid=(1, 1, 1), block=(LDS_THREADS, 1, 1), stream=stream)

    return launch, (torch.zeros(LDS_THREADS), torch.zeros(LDS_THREADS))


# ----------------------------------------------------------------------------------------------
# Compiling the targets above (one toolchain worker, cached on disk by the toolchain)
# ----------------------------------------------------------------------------------------------

TARGETS = {
    "loop_u1": ("build_loop_gemm", {"unroll": 1}),
    "loop_u2": ("build_loop_gemm", {"unroll": 2}),
    "lds_asm": ("build_lds_asm", {"lds_floats": 16384}),
}


@pytest.fixture(scope="session")
def compiled():
    """``{name: Artifact}`` for TARGETS, compiled offline for gfx950 through the project toolchain."""
    from mxfp4_ablation import toolchain

    # The worker imports this file by its module name; make the folder that name lives under
    # importable there (tests/ when pytest imports us as ``test_isa``, the repo root for ``tests.test_isa``).
    import_root = Path(__file__).resolve().parents[__name__.count(".")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(import_root), os.environ.get("PYTHONPATH")])))
        if str(import_root) not in sys.path:
            mp.syspath_prepend(str(import_root))
        requests = [(f"{__name__}:{func}", params) for func, params in TARGETS.values()]
        artifacts = toolchain.compile_many(requests)
    return dict(zip(TARGETS, artifacts))


# ----------------------------------------------------------------------------------------------
# Hand-written snippets: parsing
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_kernels():
    return (DATA / "two_kernels.s").read_text()


def test_parse_finds_each_kernel_with_its_labels_descriptor_symbols_and_metadata(two_kernels):
    alpha, beta = isa.parse(two_kernels)
    assert (alpha.name, beta.name) == ("alpha", "beta")
    assert (len(alpha.instructions), len(beta.instructions)) == (25, 5)
    assert alpha.labels == {".LBB0_1": 4, ".LBB0_2": 5}
    assert beta.labels == {".LBB1_2": 4}
    assert alpha.descriptor["next_free_vgpr"] == 42 and alpha.descriptor["accum_offset"] == 24
    assert alpha.descriptor["group_segment_fixed_size"] == 65536
    # ``max(12, .Lhelper.numbered_sgpr)`` resolves through the helper's symbol; foreign symbols stay out.
    assert alpha.symbols == {"num_vgpr": 21, "num_agpr": 18, "numbered_sgpr": 16, "private_seg_size": 16}
    assert beta.symbols == {"num_vgpr": 2, "num_agpr": 0, "numbered_sgpr": 4}
    assert alpha.metadata[".sgpr_count"] == 22 and alpha.metadata[".max_flat_workgroup_size"] == 512
    assert beta.metadata[".reqd_workgroup_size"] == [64, 1, 1]
    assert beta.metadata[".args"][0][".value_kind"] == "global_buffer"


def test_instructions_keep_operands_modifiers_lines_and_asm_flag(two_kernels):
    alpha = isa.parse(two_kernels)[0]
    lines = two_kernels.splitlines()
    by_op = {i.opcode: i for i in alpha.instructions}
    load = by_op["buffer_load_dwordx4"]
    assert load.operands == ("v[4:7]", "v0", "s[8:11]", "0") and load.modifiers == ("offen", "offset:16")
    mfma = by_op["v_mfma_scale_f32_16x16x128_f8f6f4"]
    assert mfma.operands == ("a[0:3]", "v[4:11]", "v[12:19]", "a[0:3]", "v20", "v21")
    assert mfma.modifiers == ("op_sel_hi:[0,0,0]", "cbsz:4", "blgp:4")
    assert alpha.instructions[3].operands == ("vmcnt(0)", "lgkmcnt(0)")  # s_waitcnt counters
    assert by_op["s_load_dwordx4"].text == "s_load_dwordx4 s[0:3], s[0:1], 0x0"  # comment dropped
    for inst in alpha.instructions:
        assert lines[inst.line - 1].strip().startswith(inst.text)
    asm = [i for i in alpha.instructions if i.in_asm_block]
    assert [(i.opcode, i.operands, i.modifiers) for i in asm] == [
        ("v_pk_mul_f32", ("v[0:1]", "v[2:3]", "v[2:3]"), ("op_sel_hi:[1,1]",)),
        ("s_nop", ("1",), ()),  # the '//' comment inside the block is dropped
    ]
    assert by_op["s_cbranch_scc0"].branch_target == ".LBB0_1" and not by_op["s_nop"].is_branch


def test_metadata_fallback_parser_agrees_with_yaml(two_kernels):
    yaml = pytest.importorskip("yaml", reason="the fallback is compared against PyYAML")
    block = two_kernels.split(".amdgpu_metadata\n", 1)[1].split(".end_amdgpu_metadata")[0].rstrip()
    full = yaml.safe_load(block)["amdhsa.kernels"]
    fallback = isa._parse_metadata_fallback(block)["amdhsa.kernels"]
    assert [e[".name"] for e in fallback] == ["alpha", "beta"]
    for got, want in zip(fallback, full):
        assert got == {k: v for k, v in want.items() if k != ".args"}


# ----------------------------------------------------------------------------------------------
# Hand-written snippets: metrics, loops, occupancy
# ----------------------------------------------------------------------------------------------


def test_metrics_of_a_kernel_with_nested_loops_agprs_and_lds(two_kernels):
    m = metrics.kernel_metrics(two_kernels, "alpha")
    assert list(m) == list(metrics.KERNEL_KEYS)
    assert json.loads(json.dumps(m)) is not None  # JSON-friendly
    expected = {
        "vgpr_unified": 42,  # roundup(21, 4) + 18 AGPRs, = .amdhsa_next_free_vgpr
        "arch_vgpr": 21,
        "agpr": 18,
        "sgpr": 22,  # metadata .sgpr_count (numbered SGPRs + VCC etc.)
        "lds_bytes": 65536,
        "scratch_bytes": 16,
        # 64 KiB LDS -> 2 workgroups of 8 waves per CU -> 4 waves on each of the 4 SIMDs.
        "occupancy_waves_per_simd": 4,
        "instructions": 25,
        "mfma": 2,
        "s_waitcnt": 2,
        "s_barrier": 1,
        # Both loops hold the 2 MFMAs; the outer one (14 instructions) wins the tie on size.
        "loop_instructions": 14,
        "loop_mfma": 2,
        "loop_s_waitcnt": 1,
        "insts_before_first_buffer_load": 2,
        "v_accvgpr_write": 1,
        "v_accvgpr_read": 1,
        "distinct_opcodes": 22,
    }
    assert {k: m[k] for k in expected} == expected
    assert m["buffer_store_by_width"] == {1: 1, 2: 1, 4: 1, 8: 1, 16: 2}
    assert sum(m["opcode_histogram"].values()) == 25
    assert list(m["opcode_histogram"].items())[:3] == [("buffer_store_dwordx4", 2), ("s_cmp_lg_u32", 2), ("s_waitcnt", 2)]


def test_metrics_of_a_kernel_without_loop_or_buffer_ops(two_kernels):
    m = metrics.kernel_metrics(two_kernels, "beta")
    assert m["loop_instructions"] is m["loop_mfma"] is m["loop_s_waitcnt"] is None  # forward branch only
    assert m["insts_before_first_buffer_load"] is None  # a global_load is not a buffer_load
    assert m["buffer_store_by_width"] == {}
    assert (m["instructions"], m["vgpr_unified"], m["sgpr"]) == (5, 2, 105)
    assert m["occupancy_waves_per_simd"] == 7  # more than 100 SGPRs
    assert isa.hot_loop(two_kernels, "beta") is None


def test_loops_and_hot_loop(two_kernels):
    found = isa.loops(two_kernels, "alpha")
    assert [(lp.label, lp.start, lp.end, lp.mfma) for lp in found] == [(".LBB0_2", 5, 10, 2), (".LBB0_1", 4, 17, 2)]
    body = isa.hot_loop(two_kernels, "alpha")
    assert [i.opcode for i in (body[0], body[-1])] == ["v_accvgpr_write_b32", "s_cbranch_scc0"]


def _kernel_text(body: str, name: str = "k") -> str:
    return f"\t.type\t{name},@function\n{name}:\n{body}\ts_endpgm\n.Lfunc_end0:\n"


def test_hot_loop_prefers_more_mfma_over_more_instructions():
    text = _kernel_text(
        ".LBB0_1:\n" + "\tv_add_u32 v0, v0, v1\n" * 6 + "\ts_cbranch_scc1 .LBB0_1\n"
        ".LBB0_2:\n\tv_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]\n"
        "\tv_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]\n\ts_cbranch_vccnz .LBB0_2\n"
    )
    m = metrics.kernel_metrics(text)
    assert (m["loop_instructions"], m["loop_mfma"]) == (3, 2)
    assert m["vgpr_unified"] is None and m["occupancy_waves_per_simd"] is None  # no resource info at all


def test_mfma_operand_reuse_and_loop_histogram(two_kernels):
    mfma = "\tv_mfma_f32_16x16x32_bf16 v[0:3], {}, {}, v[0:3]\n"
    pairs = [("v[4:7]", "v[8:11]"), ("v[4:7]", "v[12:15]"), ("v[16:19]", "v[12:15]"), ("v[20:23]", "v[24:27]")]
    text = _kernel_text(".LBB0_1:\n" + "".join(mfma.format(a, b) for a, b in pairs[:3]) + "\ts_cbranch_scc1 .LBB0_1\n"
                        + mfma.format(*pairs[3]))
    assert isa.mfma_operand_reuse(text) == pytest.approx(2 / 3)  # A reused, then B reused, then neither
    assert isa.mfma_operand_reuse(text, loop_only=True) == 1.0
    assert isa.mfma_operand_reuse(two_kernels, "beta") is None
    assert isa.loop_histogram(text) == {"v_mfma_f32_16x16x32_bf16": 3, "s_cbranch_scc1": 1}
    assert isa.loop_histogram(two_kernels, "beta") is None
    assert sum(isa.loop_histogram(two_kernels, "alpha").values()) == 14


def test_unified_vgprs_follows_the_gfx90a_rule():
    assert isa.unified_vgprs(21, 18) == 42
    assert isa.unified_vgprs(24, 8) == 32
    assert isa.unified_vgprs(45, 0) == 45  # no AGPRs: no padding (LLVM getTotalNumVGPRs)
    assert isa.unified_vgprs(3, 1) == 5
    # Published gfx90a data points (LLVM test CodeGen/AMDGPU/agpr-register-count.ll):
    # 9 VGPRs + 32 AGPRs -> next_free_vgpr 44; 40 VGPRs + 16 AGPRs -> 56, occupancy 8.
    assert isa.unified_vgprs(9, 32) == 44
    assert isa.unified_vgprs(40, 16) == 56 and isa.occupancy(56)["waves_per_simd"] == 8


@pytest.mark.parametrize(
    "vgpr, sgpr, lds, wg, expected",
    [
        (64, None, None, None, {"vgpr": 8, "waves_per_simd": 8}),
        (128, None, None, None, {"vgpr": 4, "waves_per_simd": 4}),
        (129, None, None, None, {"vgpr": 3, "waves_per_simd": 3}),  # 136 allocated, 512 // 136
        (256, None, None, None, {"vgpr": 2, "waves_per_simd": 2}),
        (512, None, None, None, {"vgpr": 1, "waves_per_simd": 1}),
        (0, None, None, None, {"vgpr": 8, "waves_per_simd": 8}),
        (32, 100, None, None, {"sgpr": 8, "waves_per_simd": 8}),
        (32, 102, None, None, {"sgpr": 7, "waves_per_simd": 7}),
        (32, None, 65536, 256, {"lds": 2, "waves_per_simd": 2}),
        (32, None, 160 * 1024, 256, {"lds": 1, "waves_per_simd": 1}),
        (32, None, 160 * 1024 + 1, 256, {"lds": 0, "waves_per_simd": 0}),  # does not fit
        (32, None, 1281, 64, {"lds": 8, "waves_per_simd": 8}),  # 2560 B blocks -> 64 groups
        (32, None, 40960, 64, {"lds": 1, "waves_per_simd": 1}),  # 4 one-wave groups over 4 SIMDs
        (32, None, 81920, 512, {"lds": 4, "waves_per_simd": 4}),  # 2 groups x 8 waves over 4 SIMDs
        (32, None, 65536, None, {"lds": None, "waves_per_simd": 8}),  # workgroup size unknown
    ],
)
def test_occupancy_model(vgpr, sgpr, lds, wg, expected):
    occ = isa.occupancy(vgpr, sgpr, lds, wg)
    assert {k: occ[k] for k in expected} == expected


# ----------------------------------------------------------------------------------------------
# diff
# ----------------------------------------------------------------------------------------------


def test_diff_and_diff_table(two_kernels):
    a, b = metrics.kernel_metrics(two_kernels, "alpha"), metrics.kernel_metrics(two_kernels, "beta")
    d = metrics.diff(a, b)
    assert set(d) == {"metrics", "opcodes", "buffer_store_by_width"}
    assert d["metrics"]["instructions"] == {"a": 25, "b": 5, "delta": -20, "ratio": 0.2}
    assert d["metrics"]["loop_mfma"] == {"a": 2, "b": None, "delta": None, "ratio": None}
    assert d["metrics"]["scratch_bytes"] == {"a": 16, "b": 0, "delta": -16, "ratio": 0.0}
    assert d["opcodes"]["global_load_dword"] == {"a": 0, "b": 1, "delta": 1, "ratio": None}
    assert d["opcodes"]["s_endpgm"]["ratio"] == 1.0
    assert d["buffer_store_by_width"][16] == {"a": 2, "b": 0, "delta": -2, "ratio": 0.0}
    # A JSON round trip turns store widths into strings; diff reads them back as integers.
    same = metrics.diff(a, json.loads(json.dumps(a)))
    assert all(c["delta"] in (0, None) for section in same.values() for c in section.values())
    assert set(same["buffer_store_by_width"]) == {1, 2, 4, 8, 16}

    table = metrics.diff_table(a, b)
    assert list(table.columns) == ["section", "name", "a", "b", "delta", "ratio"]
    assert len(table) == len(d["metrics"]) + len(d["opcodes"]) + len(d["buffer_store_by_width"])
    row = table[(table.section == "metrics") & (table.name == "mfma")].iloc[0]
    assert (row.a, row.b, row.delta) == (2, 0, -2)
    changed = metrics.diff_table(a, b, changed_only=True)
    assert "s_endpgm" not in set(changed.name) and "mfma" in set(changed.name)


# ----------------------------------------------------------------------------------------------
# Bad input: one clear ValueError
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda t: isa.parse("\t.text\n\ts_endpgm\n"), "no kernel function found"),
        (lambda t: isa.parse(b"bytes"), "needs the .s text as a str"),
        (lambda t: metrics.kernel_metrics(t), "holds 2 kernels \\(alpha, beta\\); pass kernel="),
        (lambda t: metrics.kernel_metrics(t, "gamma"), "no kernel named 'gamma'"),
        (lambda t: isa.parse(t.replace(".end_amdgpu_metadata", "")), "without .end_amdgpu_metadata"),
        (lambda t: isa.parse(t.replace("amdhsa.kernels:", "amdhsa.kernels: [")), "not valid YAML"),
        (lambda t: metrics.diff({"mfma": 1}, metrics.kernel_metrics(t, "beta")), "argument a is not one"),
    ],
)
def test_bad_input_raises_one_clear_value_error(two_kernels, call, match):
    with pytest.raises(ValueError, match=match):
        call(two_kernels)


def test_numeric_local_labels_in_asm_blocks_are_labels():
    text = _kernel_text("\t;;#ASMSTART\n1:\n\ts_sub_u32 s0, s0, 1\n\ts_cbranch_scc1 1b\n\t;;#ASMEND\n")
    kernel = isa.parse(text)[0]
    assert [i.opcode for i in kernel.instructions] == ["s_sub_u32", "s_cbranch_scc1", "s_endpgm"]
    assert kernel.labels == {"1": 0} and all(i.in_asm_block for i in kernel.instructions[:2])


def test_kernel_name_may_omit_flydsl_suffix(two_kernels):
    text = two_kernels.replace("beta", "beta_0")
    assert metrics.kernel_metrics(text, "beta")["sgpr"] == 105


# ----------------------------------------------------------------------------------------------
# Real kernels compiled offline for gfx950
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, unroll", [("loop_u1", 1), ("loop_u2", 2)])
def test_compiled_loop_kernel_hot_loop_issues_the_mfmas_of_each_k_tile(compiled, name, unroll):
    text = compiled[name].isa
    m = metrics.kernel_metrics(text)
    assert m["loop_mfma"] == MFMA_PER_KTILE * unroll
    body = isa.hot_loop(text)
    assert len(body) == m["loop_instructions"]
    assert {i.opcode for i in body if i.opcode.startswith("v_mfma")} == {"v_mfma_f32_16x16x4_f32"}
    assert sum(i.opcode == "buffer_load_dword" for i in body) == LOADS_PER_KTILE * unroll
    # The body runs from the backward branch's target label to the branch itself.
    kernel = isa.parse(text)[0]
    assert body[-1].is_branch and kernel.labels[body[-1].branch_target] == kernel.instructions.index(body[0])
    assert m["loop_s_waitcnt"] >= 1 and m["s_waitcnt"] >= m["loop_s_waitcnt"]
    # Epilogue: the 64x64 f32 tile of C is 16 dwords per lane, stored one dword at a time.
    assert m["buffer_store_by_width"] == {4: 16}
    assert m["mfma"] >= m["loop_mfma"] and m["lds_bytes"] == 0 and m["s_barrier"] == 0
    assert m["insts_before_first_buffer_load"] > 0


def test_compiled_unroll_doubles_the_loop(compiled):
    u1, u2 = metrics.kernel_metrics(compiled["loop_u1"].isa), metrics.kernel_metrics(compiled["loop_u2"].isa)
    d = metrics.diff(u1, u2)
    assert d["metrics"]["loop_mfma"]["ratio"] == 2.0
    assert d["metrics"]["loop_instructions"]["delta"] > 0
    assert d["opcodes"]["v_mfma_f32_16x16x4_f32"]["delta"] > 0


@pytest.mark.parametrize("name", list(TARGETS))
def test_compiled_register_counts_agree_with_metadata(compiled, name):
    text = compiled[name].isa
    kernel = isa.parse(text)[0]
    m = metrics.kernel_metrics(text)
    # vgpr_unified is what the descriptor allocates; the toolchain's quick reader agrees.
    assert m["vgpr_unified"] == kernel.descriptor["next_free_vgpr"] == compiled[name].resources["vgpr_unified"]
    assert m["vgpr_unified"] >= isa.unified_vgprs(m["arch_vgpr"], m["agpr"]) == kernel.metadata[".vgpr_count"]
    assert m["agpr"] == kernel.metadata[".agpr_count"]
    assert m["sgpr"] == kernel.metadata[".sgpr_count"]
    assert m["lds_bytes"] == kernel.metadata[".group_segment_fixed_size"]
    assert m["scratch_bytes"] == 0 and m["occupancy_waves_per_simd"] >= 1
    if m["agpr"] == 0:
        assert m["vgpr_unified"] == kernel.metadata[".vgpr_count"]
    assert metrics.kernel_metrics(compiled[name]) == m  # an Artifact is accepted as it is


def test_compiled_lds_kernel_with_inline_asm(compiled):
    text = compiled["lds_asm"].isa
    m = metrics.kernel_metrics(text)
    assert m["lds_bytes"] == 16384 * 4
    # 64 KiB per workgroup -> 2 workgroups per CU, 4 waves each -> 2 waves per SIMD.
    assert m["occupancy_waves_per_simd"] == 2
    assert m["s_barrier"] == 1
    assert m["loop_instructions"] is None
    asm = [i.opcode for i in isa.parse(text)[0].instructions if i.in_asm_block]
    assert asm == [*ASM_BLOCK, "v_accvgpr_write_b32", "v_accvgpr_read_b32"]
    assert (m["v_accvgpr_write"], m["v_accvgpr_read"]) == (1, 1)
    # Inline asm naming an AGPR: the symbols say 3 arch VGPRs + 1 AGPR (5 unified), yet LLVM
    # writes a much larger .amdhsa_next_free_vgpr, and that is what the hardware allocates.
    assert m["agpr"] >= 1 and isa.unified_vgprs(m["arch_vgpr"], m["agpr"]) == 5
    assert m["vgpr_unified"] > 5
    ds = [o for o in m["opcode_histogram"] if o.startswith("ds_")]
    assert sorted(ds) == ["ds_read_b32", "ds_write_b32"]


def test_max_lds_run_counts_lds_traffic_between_mfmas():
    text = _kernel_text(
        ".LBB0_1:\n\tbuffer_load_dwordx4 v1, s[0:3], 0 offen lds\n\tds_read_b128 v[2:5], v0\n"
        "\tv_add_u32 v6, v6, v7\n\tds_read_b128 v[8:11], v0 offset:64\n"
        "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[2:5], v[8:11], v[0:3]\n"
        "\tbuffer_load_dwordx4 v[12:15], v1, s[0:3], 0 offen\n\tds_read_b128 v[2:5], v0\n"
        "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[2:5], v[8:11], v[0:3]\n\ts_cbranch_scc1 .LBB0_1\n"
    )
    body = isa.hot_loop(text)
    # the DMA and two ds_reads before the first MFMA (the VALU between them does not break the run);
    # a plain buffer_load is not LDS traffic
    assert isa.max_lds_run(body) == 3
    assert isa.max_lds_run(None) is None
    assert metrics.fingerprint(text)["loop_max_lds_run"] == 3
