"""Tests for mxfp4_ablation.reference: hand-worked GEMM, float64 cross-check, inputs, compare."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mxfp4_ablation import formats as F
from mxfp4_ablation import reference as R

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _u8(rows):
    return torch.tensor(rows, dtype=torch.uint8)


def test_gemm_reference_hand_worked():
    # K = 32, one scale per row.
    # A row 0: all 1.0 (code 2, scale 127 -> 1);  A row 1: 8 x 6 then 24 x -0.5 (codes 7, 9), scale 126 -> x0.5
    # B row 0: all 0.5 (code 1), scale 128 -> x2;  B row 1: 16 x 1.5 (code 3) then 0, scale 129 -> x4
    a_packed = _u8([[0x22] * 16, [0x77] * 4 + [0x99] * 12])
    b_packed = _u8([[0x11] * 16, [0x33] * 8 + [0x00] * 8])
    a_scales, b_scales = _u8([[127], [126]]), _u8([[128], [129]])
    # C[0,0] = 32*1*1 = 32;  C[0,1] = 16*1*6 = 96
    # C[1,0] = 8*3*1 + 24*(-0.25)*1 = 18;  C[1,1] = (8*3 + 8*(-0.25))*6 = 132
    out = R.gemm_reference(a_packed, a_scales, b_packed, b_scales)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 2)
    assert out.float().tolist() == [[32.0, 96.0], [18.0, 132.0]]


def _dequant_by_hand(packed, scales):
    rows = []
    for r in range(packed.shape[0]):
        row = []
        for j, byte in enumerate(packed[r].tolist()):
            for code in (byte & 0xF, byte >> 4):
                k = len(row)
                row.append(E2M1[code] * 2.0 ** (int(scales[r, k // 32]) - 127))
        rows.append(row)
    return rows


def _random_operands(M, N, K, seed, lo, hi):
    g = torch.Generator().manual_seed(seed)
    a_packed = torch.randint(0, 256, (M, K // 2), dtype=torch.uint8, generator=g)
    b_packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g)
    a_scales = torch.randint(lo, hi + 1, (M, K // 32), dtype=torch.uint8, generator=g)
    b_scales = torch.randint(lo, hi + 1, (N, K // 32), dtype=torch.uint8, generator=g)
    return a_packed, a_scales, b_packed, b_scales


def _hand_gemm(a_packed, a_scales, b_packed, b_scales):
    A, B = _dequant_by_hand(a_packed, a_scales), _dequant_by_hand(b_packed, b_scales)
    K = len(A[0])
    rows = [[math.fsum(a[k] * b[k] for k in range(K)) for b in B] for a in A]
    return torch.tensor(rows, dtype=torch.float64)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_gemm_reference_matches_float64_hand_computation(M, N, kblocks, seed):
    ops = _random_operands(M, N, 32 * kblocks, seed, 118, 136)  # sums stay exact in float64 (< 53 bits)
    got64 = R.gemm_reference(*ops, out_dtype=torch.float64, accum=torch.float64)
    assert torch.equal(got64, _hand_gemm(*ops))


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_gemm_reference_bf16_is_one_rounding_of_the_exact_sum(M, N, kblocks, seed):
    # With scales 125..129 every product is a multiple of 2**-6 and |sum| < 2**16, so the
    # float32 accumulation is exact and the bf16 output must equal the exact sum rounded once.
    ops = _random_operands(M, N, 32 * kblocks, seed, 125, 129)
    assert torch.equal(R.gemm_reference(*ops), _hand_gemm(*ops).to(torch.bfloat16))


def test_gemm_reference_errors():
    a, sa = torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8)
    with pytest.raises(ValueError, match="K must match"):
        R.gemm_reference(a, sa, torch.zeros(3, 32, dtype=torch.uint8), torch.zeros(3, 2, dtype=torch.uint8))
    with pytest.raises(ValueError, match="unshuffled"):
        R.gemm_reference(a, sa, torch.zeros(3, 16, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="accum"):
        R.gemm_reference(a, sa, a, sa, accum=torch.float16)
    with pytest.raises(ValueError, match="2-D"):
        R.gemm_reference(a.flatten(), sa, a, sa)


def test_make_gemm_inputs_forms_are_consistent():
    d = R.make_gemm_inputs(40, 64, 512, seed=7)
    M, N, K = 40, 64, 512
    assert d["a"].shape == (M, K) and d["b"].shape == (N, K)
    assert d["a_packed"].shape == (M, K // 2) and d["a_scales"].shape == (M, K // 32)
    assert d["b_packed"].shape == (N, K // 2) and d["b_scales"].shape == (N, K // 32)
    assert d["a_scales_shuffled"].shape == (64, K // 32)  # M padded to a multiple of 32
    qa, sa = F.quantize_mxfp4(d["a"])
    assert torch.equal(qa, d["a_packed"]) and torch.equal(sa, d["a_scales"])
    assert torch.equal(F.unshuffle_weight_b(d["b_packed_shuffled"]), d["b_packed"])
    assert torch.equal(F.unshuffle_scales(d["b_scales_shuffled"]), d["b_scales"])
    a_sc = F.unshuffle_scales(d["a_scales_shuffled"])
    assert torch.equal(a_sc[:M], d["a_scales"]) and int(a_sc[M:].max()) == 0  # zero padding rows -> byte 0
    for key in ("a_packed", "a_scales", "b_packed", "b_scales", "b_packed_shuffled", "b_scales_shuffled"):
        assert d[key].dtype == torch.uint8 and d[key].is_contiguous()


def test_make_gemm_inputs_is_deterministic():
    d1, d2, d3 = (R.make_gemm_inputs(32, 32, 256, seed=s) for s in (3, 3, 4))
    for key in ("a", "b", "a_packed", "b_packed_shuffled", "a_scales_shuffled"):
        assert torch.equal(d1[key], d2[key])
    assert not torch.equal(d1["a"], d3["a"])


def test_make_gemm_inputs_errors():
    with pytest.raises(ValueError, match="N % 32"):
        R.make_gemm_inputs(32, 48, 256, 0)
    with pytest.raises(ValueError, match="K % 256"):
        R.make_gemm_inputs(32, 32, 128, 0)
    with pytest.raises(ValueError, match="M >= 1"):
        R.make_gemm_inputs(0, 32, 256, 0)
    with pytest.raises(ValueError, match="int"):
        R.make_gemm_inputs(32.0, 32, 256, 0)


def test_reference_tracks_the_unquantised_product():
    d = R.make_gemm_inputs(64, 64, 1024, seed=0)
    ref = R.gemm_reference_from_inputs(d)
    stats = R.compare(ref, d["a"] @ d["b"].T, atol=1e9)
    # MXFP4 keeps ~2 mantissa bits: strongly correlated but clearly not exact
    assert 0.97 < stats["cosine"] < 0.999
    assert stats["mismatches"] == 0  # huge atol: only non-finite values could count


def test_compare_hand_values():
    ref = torch.tensor([[1.0, 2.0], [-4.0, 0.0]])
    same = R.compare(ref.to(torch.bfloat16), ref)
    assert same["cosine"] == pytest.approx(1.0) and same["max_abs_err"] == 0.0
    assert same["mismatches"] == 0 and same["numel"] == 4 and same["logits_diff"] == pytest.approx(0.0, abs=1e-15)
    out = torch.tensor([[1.0, 2.5], [-4.0, 0.05]])
    s = R.compare(out, ref)
    # |diff| = [0, .5, 0, .05]; tolerance .1 + .1*|ref| = [.2, .3, .5, .1] -> one mismatch (the 2.5)
    assert s["mismatches"] == 1
    assert s["max_abs_err"] == pytest.approx(0.5)
    assert s["max_rel_err"] == pytest.approx(0.25)  # 0.5 / 2 (the ref == 0 element is excluded)
    tiny = float(torch.tensor(0.05))  # 0.05 as stored in float32
    dot, nx, ny = 1 + 5 + 16, math.sqrt(1 + 6.25 + 16 + tiny * tiny), math.sqrt(21)
    assert s["cosine"] == pytest.approx(dot / (nx * ny), rel=1e-12)


def test_compare_flags_non_finite_and_shape_errors():
    ref = torch.ones(2, 2)
    s = R.compare(torch.tensor([[1.0, math.nan], [1.0, math.inf]]), ref)
    assert s["mismatches"] == 2 and math.isnan(s["cosine"])
    zero = R.compare(torch.zeros(2, 2), torch.zeros(2, 2))
    assert zero["cosine"] == 1.0 and zero["mismatches"] == 0
    with pytest.raises(ValueError, match="shape"):
        R.compare(torch.ones(2, 3), ref)
