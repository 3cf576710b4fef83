"""Tests for mxfp4_ablation.formats: hand-worked bytes plus hypothesis properties."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mxfp4_ablation import formats as F

FAST = settings(max_examples=40, deadline=None)

# ----------------------------------------------------------------- E2M1 by hand


@pytest.mark.parametrize(
    "value, code",
    [
        (0.0, 0x0), (-0.0, 0x8), (0.5, 0x1), (1.0, 0x2), (1.5, 0x3), (2.0, 0x4), (3.0, 0x5),
        (4.0, 0x6), (6.0, 0x7), (-6.0, 0xF), (-0.5, 0x9), (-3.0, 0xD),
        # ties: round to the even code
        (0.25, 0x0), (0.75, 0x2), (1.25, 0x2), (1.75, 0x4), (2.5, 0x4), (3.5, 0x6), (5.0, 0x6),
        (-0.25, 0x8), (-5.0, 0xE),
        # just off the ties
        (0.2500001, 0x1), (0.7499999, 0x1), (4.9999, 0x6), (5.0001, 0x7),
        # saturation, infinities, tiny negatives keep the sign
        (6.5, 0x7), (1e30, 0x7), (-1e30, 0xF), (math.inf, 0x7), (-math.inf, 0xF), (-1e-20, 0x8),
    ],
)
def test_e2m1_encode_hand_cases(value, code):
    assert F.e2m1_encode(torch.tensor([value], dtype=torch.float32)).tolist() == [code]


def test_e2m1_decode_table():
    got = F.e2m1_decode(torch.arange(16, dtype=torch.uint8))
    assert got.dtype == torch.float32
    assert got.tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6]
    assert torch.signbit(got[8])  # code 8 is -0.0


def test_e2m1_encode_decode_every_code_round_trips():
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(F.e2m1_encode(F.e2m1_decode(codes)), codes)


def test_e2m1_nan_is_rejected():
    with pytest.raises(ValueError, match="NaN"):
        F.e2m1_encode(torch.tensor([1.0, math.nan]))


def test_e2m1_float64_is_rounded_once():
    # 0.25 + 2**-40 is above the tie in float64 but would round to 0.25 in float32
    x = torch.tensor([0.25 + 2.0**-40], dtype=torch.float64)
    assert F.e2m1_encode(x).tolist() == [1]


@FAST
@given(st.lists(st.floats(-8, 8, allow_nan=False, width=32), min_size=1, max_size=64))
def test_e2m1_encode_picks_a_nearest_value(vals):
    x = torch.tensor(vals, dtype=torch.float32)
    dec = F.e2m1_decode(F.e2m1_encode(x))
    grid = torch.tensor(F.E2M1_VALUES[:8])
    best = (x.abs().clamp(max=6).unsqueeze(-1) - grid).abs().min(dim=-1).values
    assert torch.equal((dec.abs() - x.abs().clamp(max=6)).abs(), best)
    assert torch.equal(torch.signbit(dec), torch.signbit(x))


# ----------------------------------------------------------------- packing


def test_pack_fp4_hand_bytes():
    codes = torch.tensor([[1, 2, 3, 4], [0xF, 0x0, 0x8, 0x7]], dtype=torch.uint8)
    assert F.pack_fp4(codes).tolist() == [[0x21, 0x43], [0x0F, 0x78]]
    assert F.unpack_fp4(torch.tensor([0x21, 0x43], dtype=torch.uint8)).tolist() == [1, 2, 3, 4]


@FAST
@given(st.lists(st.integers(0, 255), min_size=1, max_size=64))
def test_unpack_pack_round_trip(bytes_):
    packed = torch.tensor(bytes_, dtype=torch.uint8).reshape(1, -1)
    codes = F.unpack_fp4(packed)
    assert codes.shape == (1, 2 * len(bytes_)) and int(codes.max()) <= 15
    assert torch.equal(F.pack_fp4(codes), packed)


def test_as_bytes_views_one_byte_dtypes():
    assert F.as_bytes(torch.tensor([-1], dtype=torch.int8)).tolist() == [255]
    if hasattr(torch, "float8_e8m0fnu"):
        e = torch.tensor([127], dtype=torch.uint8).view(torch.float8_e8m0fnu)
        assert F.e8m0_decode(e).tolist() == [1.0]
    with pytest.raises(ValueError, match="w must hold raw bytes"):
        F.as_bytes(torch.zeros(2, dtype=torch.float16), "w")


def test_pack_errors():
    with pytest.raises(ValueError, match="even"):
        F.pack_fp4(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="0..15"):
        F.pack_fp4(torch.tensor([16, 0], dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        F.pack_fp4(torch.zeros(4, dtype=torch.int32))


# ----------------------------------------------------------------- E8M0


def test_e8m0_decode_hand_values():
    got = F.e8m0_decode(torch.tensor([0, 1, 125, 127, 128, 254, 255], dtype=torch.uint8))
    assert got.dtype == torch.float32
    assert got[:6].tolist() == [2.0**-127, 2.0**-126, 0.25, 1.0, 2.0, 2.0**127]
    assert math.isnan(got[6])


def test_e8m0_encode_exponent():
    assert F.e8m0_encode_exponent(torch.tensor([-127, -2, 0, 1, 127])).tolist() == [0, 125, 127, 128, 254]
    assert F.e8m0_encode_exponent(3).tolist() == 130
    for bad in (128, -128):
        with pytest.raises(ValueError, match="-127..127"):
            F.e8m0_encode_exponent(bad)
    with pytest.raises(ValueError, match="integer"):
        F.e8m0_encode_exponent(torch.tensor([0.5]))


@FAST
@given(st.integers(-120, 120))
def test_scale_rule_on_powers_of_two_and_mantissa_boundaries(e):
    def scale(m, rule):
        return int(F.e8m0_scale_for_amax(torch.tensor([m * 2.0**e], dtype=torch.float32), rule))

    below_15 = 1.5 - 2.0**-23
    below_175 = 1.75 - 2.0**-23
    base = e - 2 + 127  # amax/4 = 2**(e-2)
    # flydsl: round up iff mantissa of amax/4 >= 1.5
    assert scale(1.0, "flydsl") == base
    assert scale(below_15, "flydsl") == base
    assert scale(1.5, "flydsl") == base + 1
    assert scale(1.9, "flydsl") == base + 1
    # even (aiter/Quark): round up iff mantissa >= 1.75
    assert scale(1.5, "even") == base
    assert scale(below_175, "even") == base
    assert scale(1.75, "even") == base + 1
    # floor: never rounds up
    assert scale(1.0, "floor") == base == scale(1.99, "floor")


def test_scale_rule_zero_and_subnormal_amax():
    t = lambda v: torch.tensor([v], dtype=torch.float32)  # noqa: E731
    assert F.e8m0_scale_for_amax(t(0.0)).tolist() == [0]
    assert F.e8m0_scale_for_amax(t(0.0), "even").tolist() == [0]
    # amax/4 == 2**-127 exactly stays at byte 0; a hair above rounds up to 2**-126
    assert F.e8m0_scale_for_amax(t(2.0**-125)).tolist() == [0]
    assert F.e8m0_scale_for_amax(t(2.0**-125 * 1.5)).tolist() == [1]
    with pytest.raises(ValueError, match="scale_rule"):
        F.e8m0_scale_for_amax(t(1.0), "nearest")


# ----------------------------------------------------------------- quantiser


def test_quantize_hand_worked_block():
    x = torch.zeros(1, 64)
    # block 0: amax 6.1 -> 6.1/4 = 1.525 (mantissa >= 1.5) -> exponent 1, byte 0x80, scale 2
    x[0, :4] = torch.tensor([1.0, -2.5, 0.3, 6.1])  # /2 -> 0.5, -1.25 (tie->1.0), 0.15 (->0), 3.05 (->3)
    # block 1: amax 1.0 -> 0.25 -> byte 125, scale 0.25; 0.75 -> 3 (code 5), 1.0 -> 4 (code 6)
    x[0, 32:64] = 0.75
    x[0, 63] = 1.0
    packed, scales = F.quantize_mxfp4(x)
    expected = [0xA1, 0x50] + [0x00] * 14 + [0x55] * 15 + [0x65]
    assert packed.dtype == torch.uint8 and scales.dtype == torch.uint8
    assert packed.tolist() == [expected]
    assert scales.tolist() == [[0x80, 125]]
    deq = F.dequantize_mxfp4(packed, scales)
    assert deq[0, :4].tolist() == [1.0, -2.0, 0.0, 6.0]
    assert deq[0, 32] == 0.75 and deq[0, 63] == 1.0


def test_quantize_zero_and_negative_zero_block():
    x = torch.zeros(2, 32)
    x[1] = -0.0
    packed, scales = F.quantize_mxfp4(x)
    assert scales.tolist() == [[0], [0]]
    assert packed[0].tolist() == [0] * 16 and packed[1].tolist() == [0x88] * 16
    assert torch.equal(F.dequantize_mxfp4(packed, scales).abs(), torch.zeros(2, 32))


def test_quantize_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of 32"):
        F.quantize_mxfp4(torch.zeros(4, 48))
    with pytest.raises(ValueError, match="NaN or Inf"):
        F.quantize_mxfp4(torch.full((1, 32), math.inf))
    with pytest.raises(ValueError, match="NaN or Inf"):
        F.quantize_mxfp4(torch.full((1, 32), math.nan))
    with pytest.raises(ValueError, match="floating-point"):
        F.quantize_mxfp4(torch.zeros(1, 32, dtype=torch.int32))
    with pytest.raises(ValueError, match="share all but the last"):
        F.dequantize_mxfp4(torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(3, 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="16 bytes"):
        F.dequantize_mxfp4(torch.zeros(2, 16, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8))


_grid_le4 = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0])


@FAST
@given(st.lists(_grid_le4, min_size=31, max_size=31), st.integers(-100, 100), st.booleans(), st.integers(0, 31))
def test_quantize_is_exact_on_representable_blocks(vals, e, neg, pos):
    # A block whose max is +-4*2**e gets scale 2**e under every rule, so every grid value survives.
    vals = list(vals)
    vals.insert(pos, -4.0 if neg else 4.0)
    x = torch.tensor(vals, dtype=torch.float32).reshape(1, 32) * 2.0**e
    for rule in F.SCALE_RULES:
        packed, scales = F.quantize_mxfp4(x, rule)
        assert scales.tolist() == [[e + 127]]
        assert torch.equal(F.dequantize_mxfp4(packed, scales), x)


def test_flydsl_rule_drops_half_steps_when_amax_is_six():
    # amax 6 -> 6/4 = 1.5 -> scale 2, so 0.5 becomes a 0.25 tie and rounds to 0;
    # the floor rule keeps scale 1 and is exact.  (The one place the rules visibly differ.)
    x = torch.tensor([[6.0, 0.5] + [0.0] * 30])
    fl_p, fl_s = F.quantize_mxfp4(x, "flydsl")
    fo_p, fo_s = F.quantize_mxfp4(x, "floor")
    assert fl_s.tolist() == [[128]] and fo_s.tolist() == [[127]]
    assert F.dequantize_mxfp4(fl_p, fl_s)[0, :2].tolist() == [6.0, 0.0]
    assert torch.equal(F.dequantize_mxfp4(fo_p, fo_s), x)


@FAST
@given(st.integers(0, 2**31 - 1), st.sampled_from(F.SCALE_RULES), st.integers(-30, 30))
def test_quantize_error_bound_and_no_saturation(seed, rule, e):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 128, generator=g) * 2.0**e
    packed, scales = F.quantize_mxfp4(x, rule)
    s = F.e8m0_decode(scales).repeat_interleave(32, dim=-1)
    err = (F.dequantize_mxfp4(packed, scales) - x).abs()
    # the widest E2M1 gap is 4..6, so RNE error is at most 1 * scale (plus clipping for "floor")
    limit = s * (1.0 if rule != "floor" else 2.0)
    assert bool((err <= limit).all())
    if rule == "flydsl":  # block max lands in [3, 6): never clipped
        ratio = x.abs().reshape(3, 4, 32).amax(-1) / F.e8m0_decode(scales)
        assert bool(((ratio >= 3) & (ratio < 6)).all())


def test_quantize_keeps_leading_dims_and_accepts_bf16():
    x = torch.randn(2, 3, 64).to(torch.bfloat16)
    packed, scales = F.quantize_mxfp4(x)
    assert packed.shape == (2, 3, 32) and scales.shape == (2, 3, 2)
    p2, s2 = F.quantize_mxfp4(x.float())
    assert torch.equal(packed, p2) and torch.equal(scales, s2)


# ----------------------------------------------------------------- B weight shuffle


@pytest.mark.parametrize(
    "n, kbyte, K, offset",
    [
        (0, 0, 128, 0),
        (0, 1, 128, 1),
        (1, 0, 128, 16),       # next row = next lane (n_lane), 16 bytes on
        (15, 15, 128, 255),
        (0, 16, 128, 256),     # next 16 bytes of a row = next k_lane, 256 bytes on
        (3, 50, 128, 3 * 256 + 3 * 16 + 2),
        (0, 64, 256, 1024),    # next 128-K block of the same 16 rows = next 1 KiB block
        (16, 0, 256, 2048),    # next 16-row tile starts after all K0=2 blocks
        (17, 65, 256, 2048 + 1024 + 16 + 1),
    ],
)
def test_weight_b_shuffle_moves_each_byte_to_the_documented_offset(n, kbyte, K, offset):
    assert F.weight_b_shuffled_offset(n, kbyte, K) == offset
    packed = torch.zeros(32, K // 2, dtype=torch.uint8)
    packed[n, kbyte] = 0xAB
    flat = F.shuffle_weight_b(packed).flatten()
    assert torch.nonzero(flat).flatten().tolist() == [offset]


def test_weight_b_lane_gets_16_contiguous_bytes_of_one_row():
    # Lane L = 16*k_lane + n_lane of block (n0=0, k0=0) reads shuffled bytes [16L, 16L+16).
    K = 256
    codes = torch.arange(16 * K // 2, dtype=torch.int64).reshape(16, K // 2)
    packed = (codes % 251).to(torch.uint8)
    flat = F.shuffle_weight_b(packed).flatten()
    for lane in (0, 1, 17, 63):
        kl, nl = divmod(lane, 16)
        assert flat[16 * lane:16 * lane + 16].tolist() == packed[nl, 16 * kl:16 * kl + 16].tolist()


@FAST
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_weight_b_shuffle_inverse(batch, n_tiles, k_blocks, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(0, 256, (batch, 16 * n_tiles, 64 * k_blocks), dtype=torch.uint8, generator=g)
    s = F.shuffle_weight_b(w)
    assert s.shape == w.shape and s.dtype == torch.uint8
    assert torch.equal(F.unshuffle_weight_b(s), w)
    assert torch.equal(s.flatten().sort().values, w.flatten().sort().values)
    assert torch.equal(F.shuffle_weight_b(F.unshuffle_weight_b(w)), w)


def test_weight_b_shuffle_dimension_errors():
    with pytest.raises(ValueError, match="N % 16"):
        F.shuffle_weight_b(torch.zeros(8, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match="K % 128"):
        F.unshuffle_weight_b(torch.zeros(16, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        F.shuffle_weight_b(torch.zeros(64, dtype=torch.uint8))


# ----------------------------------------------------------------- scale shuffle


@pytest.mark.parametrize(
    "r, c, K, offset",
    [
        (0, 0, 256, 0),
        (16, 0, 256, 1),        # second 16-row tile of the pair = byte 1 (np)
        (0, 4, 256, 2),         # second 128-K half = byte 2 (2*kp)
        (16, 4, 256, 3),
        (1, 0, 256, 4),         # next row = next lane's word
        (0, 1, 256, 64),        # next 32-K group = lane + 16
        (15, 3, 256, 3 * 64 + 15 * 4),
        (32, 0, 256, 256),      # next row pair after K1=1 chunk
        (0, 8, 512, 256),       # next 256-K chunk
        (33, 9, 512, 512 + 256 + 64 + 4),
    ],
)
def test_scale_shuffle_moves_each_byte_to_the_documented_offset(r, c, K, offset):
    assert F.scale_shuffled_offset(r, c, K) == offset
    scales = torch.zeros(64, K // 32, dtype=torch.uint8)
    scales[r, c] = 0x7F
    flat = F.shuffle_scales(scales).flatten()
    assert torch.nonzero(flat).flatten().tolist() == [offset]


def test_scale_word_of_a_lane_holds_its_four_scales():
    # For lane L = 16*kl + nl the dword at index L (first chunk) packs bytes
    # [s(nl, kl), s(nl+16, kl), s(nl, kl+4), s(nl+16, kl+4)].
    scales = (torch.arange(32 * 8).reshape(32, 8) % 256).to(torch.uint8)
    words = F.shuffle_scales(scales).flatten().reshape(-1, 4)
    for lane in (0, 5, 21, 63):
        kl, nl = divmod(lane, 16)
        want = [scales[nl, kl], scales[nl + 16, kl], scales[nl, kl + 4], scales[nl + 16, kl + 4]]
        assert words[lane].tolist() == [int(v) for v in want]


@FAST
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_scale_shuffle_inverse(batch, row_pairs, chunks, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 256, (batch, 32 * row_pairs, 8 * chunks), dtype=torch.uint8, generator=g)
    sh = F.shuffle_scales(s)
    assert sh.shape == s.shape
    assert torch.equal(F.unshuffle_scales(sh), s)
    assert torch.equal(F.shuffle_scales(F.unshuffle_scales(s)), s)


def test_scale_shuffle_dimension_errors():
    with pytest.raises(ValueError, match="rows % 32"):
        F.shuffle_scales(torch.zeros(16, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="K % 256"):
        F.unshuffle_scales(torch.zeros(32, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        F.shuffle_scales(torch.zeros(32, 8, dtype=torch.float32))


def test_lane_layout_notes_are_available():
    notes = F.mfma_lane_layout_notes()
    assert "L = 16*g + i" in notes and "op_sel" in notes
