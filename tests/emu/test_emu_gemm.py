"""End-to-end: multi-wave MXFP4 GEMM kernels on the emulator.

* the benchmark's synthetic 256x256 GEMM (4 waves, LDS DMA, barriers, a K loop,
  64 scaled fp4 MFMAs per step) against a float64 reference, and its hazard
  checks when waits or barriers are removed;
* (slow) our FlyDSL one-wave MXFP4 tile kernel, compiled offline for gfx950,
  against its reference, and with each of its s_waitcnt deleted in turn.
"""
import re

import numpy as np
import pytest

import gfx950emu
from gfx950emu import bench


@pytest.fixture(scope="module")
def synth_text():
    return bench.synthetic_gemm_isa(256)


def _run(text, hazards="report"):
    prog = gfx950emu.load(text)
    return bench.run_synthetic(256, hazards, seed=1, prog=prog)


def test_synthetic_gemm_matches_reference_and_is_hazard_free(synth_text):
    res, inp, _ = _run(synth_text, "strict")
    ref = bench.reference(inp)
    assert res.hazards == []
    assert np.allclose(inp["C"], ref, rtol=1e-5, atol=1e-3 * np.abs(ref).max() * 1e-3)
    assert res.stats.by_opcode["v_mfma_scale_f32_16x16x128_f8f6f4"] == 4 * 64 * 2
    assert len(res.stats.per_wave) == 4


def _drop_nth(text, pattern, n):
    lines = text.splitlines()
    hits = [i for i, ln in enumerate(lines) if re.match(pattern, ln.strip())]
    del lines[hits[n]]
    return "\n".join(lines)


@pytest.mark.parametrize("pattern,n,kinds", [
    (r"s_waitcnt vmcnt\(0\)", 0, {"lds_read_pending", "lds_cross_wave", "read_pending"}),
    (r"s_waitcnt lgkmcnt\(0\)$", 1, {"read_pending"}),
    (r"s_barrier", 0, {"lds_cross_wave"}),
    (r"s_barrier", 1, {"lds_cross_wave", "lds_race"}),
], ids=["no-vmcnt", "no-lgkmcnt", "no-first-barrier", "no-second-barrier"])
def test_synthetic_gemm_missing_sync_is_reported(synth_text, pattern, n, kinds):
    res, _, _ = _run(_drop_nth(synth_text, pattern, n))
    assert {h.kind for h in res.hazards} & kinds


# ----------------------------------------------------------------- FlyDSL ----
TARGET = "mxfp4_ablation.kernels.mfma_tile:compile_entry"


@pytest.fixture(scope="module")
def tile_isa():
    toolchain = pytest.importorskip("mxfp4_ablation.toolchain")
    return {K: toolchain.compile(TARGET, {"K": K}).isa for K in (128, 512)}


@pytest.mark.slow
@pytest.mark.parametrize("K", [128, 512])
def test_flydsl_mfma_tile_matches_reference(tile_isa, K):
    from mxfp4_ablation.kernels import mfma_tile
    inp = mfma_tile.make_inputs(K, seed=5)
    prog = gfx950emu.load(tile_isa[K])
    res = gfx950emu.launch(prog, grid=1, block=64, args=mfma_tile.kernel_args(inp), hazards="strict")
    ref = mfma_tile.reference(inp)
    assert res.hazards == []
    assert np.allclose(inp["C"].numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_flydsl_mfma_tile_each_deleted_wait_that_matters_is_reported(tile_isa):
    from mxfp4_ablation.kernels import mfma_tile
    text = tile_isa[512]
    lines = text.splitlines()
    waits = [i for i, ln in enumerate(lines) if ln.strip().startswith("s_waitcnt")]
    assert len(waits) >= 3
    flagged = 0
    for i in waits:
        variant = "\n".join(lines[:i] + lines[i + 1:])
        inp = mfma_tile.make_inputs(512, seed=5)
        res = gfx950emu.launch(gfx950emu.load(variant), 1, 64, mfma_tile.kernel_args(inp), hazards="report")
        # every wait in this kernel guards a later use, so every deletion must be reported
        assert res.hazards, f"deleting line {i + 1} ({lines[i].strip()}) went unnoticed"
        flagged += 1
    assert flagged == len(waits)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gemm-v0", "gemm-v7"])
def test_our_gemm_variants_are_bf16_exact_and_hazard_free(variant):
    """Our FlyDSL MXFP4 GEMM (first and last rung of the ladder), one 256x256 tile at K=512."""
    toolchain = pytest.importorskip("mxfp4_ablation.toolchain")
    import torch
    from mxfp4_ablation import formats
    from mxfp4_ablation.kernels import gemm
    M = N = 256
    K = 512
    art = toolchain.compile("mxfp4_ablation.kernels.gemm:compile_entry",
                            {"M": M, "N": N, "K": K, "variant_name": variant})
    inp = gemm.make_inputs(M, N, K, seed=2)
    res = gfx950emu.launch(gfx950emu.load(art.isa), 1, 256, gemm.kernel_args(inp), hazards="report")
    a = formats.dequantize_mxfp4(inp["A_q"], inp["A_s"]).double()
    b = formats.dequantize_mxfp4(inp["B_q"], inp["B_s"]).double()
    assert torch.equal(inp["C"], (a @ b.T).to(torch.bfloat16))
    # s_waitcnt / LDS ordering: clean.  s_nop wait states are counted apart: the g2s_m0 rungs inherit an
    # M0 -> LDS-DMA wait-state hazard from FlyDSL's inline-asm DMA idiom (issue #12 report).
    assert [str(h) for h in res.hazards if h.kind != "wait_states"] == []


@pytest.mark.slow
def test_our_moe_gemm1_writes_the_reference_fp4_and_scales():
    toolchain = pytest.importorskip("mxfp4_ablation.toolchain")
    import torch
    from mxfp4_ablation.kernels import moe_gemm1 as m1
    shape = dict(tokens=32, experts=4, hidden=256, inter=256, topk=2)
    art = toolchain.compile("mxfp4_ablation.kernels.moe_gemm1:compile_entry", shape)
    inp = m1.make_inputs(**shape, seed=1)
    grid, _ = m1.launch_config(**shape)
    res = gfx950emu.launch(gfx950emu.load(art.isa), grid, 64 * m1.N_WAVES, m1.kernel_args(inp), hazards="report")
    assert res.hazards == []
    want = m1.reference(inp)
    assert torch.equal(inp["inter_quant"], want["inter_quant"])
    assert torch.equal(inp["inter_scale"], want["inter_scale"])


@pytest.mark.slow
@pytest.mark.parametrize("tokens,block_m", [(32, 16), (256, 128)], ids=["decode-atomic", "prefill"])
def test_our_moe_gemm2_matches_reference_with_one_and_two_processes(tokens, block_m):
    toolchain = pytest.importorskip("mxfp4_ablation.toolchain")
    import torch
    from mxfp4_ablation.kernels import moe_gemm2 as m2
    shape = dict(tokens=tokens, experts=4, hidden=256, inter=256, topk=2, block_m=block_m)
    art = toolchain.compile("mxfp4_ablation.kernels.moe_gemm2:compile_entry", shape)
    prog = gfx950emu.load(art.isa)
    inp = m2.make_inputs(**shape, seed=1)
    geo = m2.Geometry(*shape.values())
    ref = m2.reference(inp)["out"]
    for procs in (1, 2):
        inp["out"].zero_()
        res = gfx950emu.launch(prog, geo.grid, 256, m2.kernel_args(inp), hazards="report", processes=procs)
        assert res.hazards == []
        assert torch.equal(inp["out"], ref)
