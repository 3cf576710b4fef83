"""Offline gfx950 compiles of our one-wave MXFP4 tile kernel, checked at the ISA level."""

import re

import pytest
import torch

from mxfp4_ablation import toolchain
from mxfp4_ablation.kernels import common, mfma_tile

TARGET = "mxfp4_ablation.kernels.mfma_tile:compile_entry"


def _body(isa: str) -> str:
    """Instruction text of the kernel (comments and directives dropped)."""
    lines = isa.split(".Lfunc_end0")[0].splitlines()
    return "\n".join(l.split(";")[0].strip() for l in lines if l.strip() and not l.strip().startswith((";", ".")))


@pytest.fixture(scope="module", params=[128, 256, 512])
def compiled(request):
    return request.param, toolchain.compile(TARGET, {"K": request.param})


def test_tile_has_one_scaled_fp4_mfma_per_k_step(compiled):
    K, art = compiled
    body = _body(art.isa)
    mfmas = re.findall(r"^v_mfma_scale_f32_16x16x128_f8f6f4 .*$", body, re.M)
    assert len(mfmas) == K // 128
    assert all("cbsz:4" in m and "blgp:4" in m for m in mfmas)
    # The first K step needs no zeroed accumulator: src2 is the inline constant 0.
    assert mfmas[0].split(",")[3].strip() == "0"


def test_tile_moves_a_through_lds_dma_and_stores_16_bytes_per_lane(compiled):
    K, art = compiled
    body = _body(art.isa)
    assert len(re.findall(r"^buffer_load_dwordx4 .* offen lds$", body, re.M)) == K // 128
    assert len(re.findall(r"^ds_read_b128 ", body, re.M)) == K // 128
    assert len(re.findall(r"^buffer_store_dwordx4 ", body, re.M)) == 1
    assert "m0" in body
    assert art.resources["lds_bytes"] == 1024 * (K // 128)
    assert art.resources["scratch_bytes"] == 0


def test_kernel_args_match_the_compiled_metadata(compiled):
    K, art = compiled
    inputs = mfma_tile.make_inputs(K)
    entries = common.kernarg_entries([(n, inputs[n]) for n in mfma_tile.ARG_NAMES])
    meta = common.metadata_args(art.isa)
    assert [(e["offset"], e["size"], e["kind"]) for e in entries] == [
        (m["offset"], m["size"], m["value_kind"]) for m in meta
    ]
    layout = entries[1]["bytes"]
    assert int.from_bytes(layout[0:4], "little") == 16 and int.from_bytes(layout[4:8], "little") == K // 2
    assert int.from_bytes(layout[8:16], "little") == K // 2  # the row stride in elements
    values = mfma_tile.kernel_args(inputs)  # what gfx950emu.launch(args=...) takes
    assert values[0] is inputs["A"] and values[1] == int.from_bytes(layout, "little")
    assert len(values) == len(meta)


def _emulate(K, lds_dma):
    gfx950emu = pytest.importorskip("gfx950emu")
    art = toolchain.compile(TARGET, {"K": K} if lds_dma else {"K": K, "lds_dma": False})
    inputs = mfma_tile.make_inputs(K, seed=K)
    res = gfx950emu.launch(gfx950emu.load(art.isa), grid=(1, 1, 1), block=(64, 1, 1),
                           args=mfma_tile.kernel_args(inputs), hazards="report")
    return inputs["C"], mfma_tile.reference(inputs), res


def test_tile_computes_the_exact_product_in_the_emulator():
    out, ref, res = _emulate(128, True)
    assert res.hazards == []
    # Products of E2M1 values and power-of-two scales, summed in f32: exact for this data.
    assert torch.equal(out, ref)


@pytest.mark.slow
@pytest.mark.parametrize("K, lds_dma", [(256, True), (512, True), (128, False), (512, False)])
def test_tile_variants_compute_the_exact_product_in_the_emulator(K, lds_dma):
    out, ref, res = _emulate(K, lds_dma)
    assert res.hazards == []
    assert torch.equal(out, ref)


def test_reference_is_the_dequantised_product():
    inputs = mfma_tile.make_inputs(256, seed=3)
    ref = mfma_tile.reference(inputs)
    assert ref.shape == (16, 16) and ref.abs().max() > 0
    # Each dequantised element is a small multiple of a power of two, so float32 matmul agrees closely.
    from mxfp4_ablation import formats

    a = formats.dequantize_mxfp4(inputs["A"], inputs["A_scale"])
    b = formats.dequantize_mxfp4(inputs["B"], inputs["B_scale"])
    torch.testing.assert_close(a @ b.T, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K", [0, 64, 130, 640, "128", True])
def test_bad_k_is_a_clear_value_error(K):
    with pytest.raises(ValueError, match="K must be"):
        mfma_tile.check_params(K)


def test_kernel_args_reject_wrong_shapes():
    inputs = mfma_tile.make_inputs(128)
    inputs["C"] = torch.zeros(16, 8)
    with pytest.raises(ValueError, match="input C must be"):
        mfma_tile.kernel_args(inputs)
    del inputs["B"]
    with pytest.raises(ValueError, match="lack B"):
        mfma_tile.kernel_args(inputs)
