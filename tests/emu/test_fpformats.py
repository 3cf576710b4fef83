"""Tests of gfx950emu.fpformats: narrow float decode/encode, packing, convert ops.

Expected values are hand-written from the OCP Microscaling Formats (MX) v1.0
spec tables (FP4 E2M1 value list, FP6/FP8 min/max normal and subnormal rows,
E8M0 definition) and from hand-computed bit patterns.
"""

import numpy as np
import pytest

from gfx950emu import fpformats as fpf

# --- OCP MX v1.0: the 16 FP4 E2M1 values, code = index --------------------------------
FP4_TABLE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

# --- anchor codes: (format, code, value) -------------------------------------------------
ANCHORS = [
    # FP6 E2M3: bias 1, min subnormal 2^0*1/8, max subnormal 7/8, min normal 1, max 7.5
    ("fp6", 0x00, 0.0),
    ("fp6", 0x01, 0.125),
    ("fp6", 0x07, 0.875),
    ("fp6", 0x08, 1.0),
    ("fp6", 0x1F, 7.5),
    ("fp6", 0x3F, -7.5),
    ("fp6", 0x20, -0.0),
    # BF6 E3M2: bias 3, min subnormal 2^-2*1/4, min normal 2^-2, max 28
    ("bf6", 0x01, 0.0625),
    ("bf6", 0x03, 0.1875),
    ("bf6", 0x04, 0.25),
    ("bf6", 0x0C, 1.0),
    ("bf6", 0x1F, 28.0),
    ("bf6", 0x3F, -28.0),
    # FP8 E4M3 (OCP "FN"): bias 7, min subnormal 2^-9, min normal 2^-6, max 448
    ("fp8", 0x01, 2.0**-9),
    ("fp8", 0x07, 7 * 2.0**-9),
    ("fp8", 0x08, 2.0**-6),
    ("fp8", 0x38, 1.0),
    ("fp8", 0x77, 240.0),
    ("fp8", 0x7E, 448.0),
    ("fp8", 0xFE, -448.0),
    ("fp8", 0x80, -0.0),
    # BF8 E5M2: bias 15, min subnormal 2^-16, min normal 2^-14, max 57344
    ("bf8", 0x01, 2.0**-16),
    ("bf8", 0x04, 2.0**-14),
    ("bf8", 0x3C, 1.0),
    ("bf8", 0x7B, 57344.0),
    ("bf8", 0x7C, np.inf),
    ("bf8", 0xFC, -np.inf),
]

NAN_CODES = [("fp8", 0x7F), ("fp8", 0xFF), ("bf8", 0x7D), ("bf8", 0x7E), ("bf8", 0xFF)]


def _f32(x):
    return int(np.float32(x).view(np.uint32))


def test_every_fp4_code_matches_ocp_table():
    got = fpf.decode("fp4", np.arange(16))
    for code, want in enumerate(FP4_TABLE):
        assert got[code] == want and np.signbit(got[code]) == np.signbit(want), f"fp4 code {code:#x}: got {got[code]}, want {want}"


@pytest.mark.parametrize("fmt,code,want", ANCHORS)
def test_anchor_codes(fmt, code, want):
    got = fpf.decode(fmt, [code])[0]
    assert got == want and np.signbit(got) == np.signbit(want), f"{fmt} code {code:#x}: got {got}, want {want}"


@pytest.mark.parametrize("fmt,code", NAN_CODES)
def test_nan_codes(fmt, code):
    assert np.isnan(fpf.decode(fmt, [code])[0]), f"{fmt} code {code:#x} should be NaN"


def test_fp8_has_no_infinity_and_formats_without_specials_are_all_finite():
    assert not np.isinf(fpf.decode("fp8", np.arange(256))).any()
    for fmt, n in (("fp6", 64), ("bf6", 64), ("fp4", 16)):
        assert np.isfinite(fpf.decode(fmt, np.arange(n))).all(), fmt


def test_e8m0():
    got = fpf.decode_e8m0([0, 1, 126, 127, 128, 254, 255])
    assert list(got[:6]) == [2.0**-127, 2.0**-126, 0.5, 1.0, 2.0, 2.0**127]
    assert np.isnan(got[6])


@pytest.mark.parametrize("fmt", ["fp8", "bf8", "fp6", "bf6", "fp4"])
def test_encode_inverts_decode_on_every_number_code(fmt):
    n = 1 << fpf.BITS[fmt]
    codes = np.arange(n)
    vals = fpf.decode(fmt, codes)
    finite = np.isfinite(vals)
    back = fpf.encode(fmt, vals[finite])
    assert (back == codes[finite]).all(), f"{fmt}: codes {codes[finite][back != codes[finite]]} do not round-trip"


def test_encode_ties_go_to_even_code():
    # fp4 midpoints between neighbours: 0.25 (0|0.5), 0.75 (0.5|1), 1.25, 2.5, 5
    assert list(fpf.encode("fp4", [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])) == [0, 2, 2, 4, 4, 6, 6]
    # fp8: 1 + 1/16 lies between 0x38 (1.0) and 0x39 (1.125); 1.1875 between 0x39 and 0x3A
    assert list(fpf.encode("fp8", [1.0625, 1.1875, -1.0625])) == [0x38, 0x3A, 0xB8]
    # just off the midpoint goes to the nearer value
    assert list(fpf.encode("fp4", [0.2500001, 2.4999])) == [1, 4]


def test_encode_saturates_and_handles_nan():
    assert list(fpf.encode("fp4", [7.0, -100.0, np.inf])) == [0x7, 0xF, 0x7]
    assert list(fpf.encode("fp8", [1000.0, -np.inf])) == [0x7E, 0xFE]
    assert list(fpf.encode("bf8", [1e6])) == [0x7B]
    assert fpf.encode("fp8", [np.nan])[0] == 0x7F
    assert np.isnan(fpf.decode("bf8", fpf.encode("bf8", [np.nan])))[0]


def test_encode_matches_brute_force_nearest():
    rng = np.random.default_rng(1)
    for fmt in ("fp4", "fp6", "bf6", "fp8"):
        table = fpf.decode(fmt, np.arange(1 << fpf.BITS[fmt]))
        top = np.nanmax(table)
        x = rng.uniform(-top, top, 2000)
        got = fpf.decode(fmt, fpf.encode(fmt, x))
        best = np.nanmin(np.abs(table[None, :] - x[:, None]), axis=1)
        assert np.array_equal(np.abs(got - x), best), fmt


def test_pack_fp4_element0_in_low_nibble():
    assert int(fpf.pack([[1, 2, 3, 4, 5, 6, 7, 8]], 4)[0, 0]) == 0x87654321
    assert list(fpf.unpack([[0x87654321]], 4)[0]) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_pack_fp8_byte_order():
    assert int(fpf.pack([[0x11, 0x22, 0x33, 0x44]], 8)[0, 0]) == 0x44332211


def test_pack_fp6_straddles_dwords():
    codes = np.zeros(32, dtype=np.int64)
    codes[0] = 0x3F  # bits 5:0 of dword 0
    codes[5] = 0x3F  # bits 35:30 -> dword 0 bits 31:30, dword 1 bits 3:0
    codes[31] = 0x21  # bits 191:186 -> dword 5 bits 31:26
    words = fpf.pack(codes[None], 6)[0]
    assert [hex(int(w)) for w in words] == ["0xc000003f", "0xf", "0x0", "0x0", "0x0", "0x84000000"]
    assert np.array_equal(fpf.unpack(words[None], 6)[0], codes)


def test_pack_unpack_roundtrip_random():
    rng = np.random.default_rng(2)
    for width, ndw in ((4, 4), (6, 6), (8, 8), (16, 4)):
        codes = rng.integers(0, 1 << width, (64, 32 * ndw // width))
        assert np.array_equal(fpf.unpack(fpf.pack(codes, width), width), codes), width


def test_pack_rejects_bad_input():
    with pytest.raises(ValueError, match="fit"):
        fpf.pack([[16] * 8], 4)
    with pytest.raises(ValueError, match="whole dwords"):
        fpf.pack([[1] * 7], 4)


def test_bf16_round_to_nearest_even():
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7FC00001, 0xBF800000], dtype=np.uint32)
    got = fpf.bf16_bits_from_f32(bits)
    assert [hex(int(h)) for h in got[:4]] == ["0x3f80", "0x3f82", "0x3f81", "0x7f80"]
    assert np.isnan(fpf.f32_from_bf16_bits(got[4:5]))[0]
    assert int(got[5]) == 0xBF80


# --- convert ops --------------------------------------------------------------------------

ONE = _f32(1.0)


@pytest.mark.parametrize("op_sel,byte", [((0, 0, 0, 0), 0), ((0, 0, 1, 0), 1), ((0, 0, 0, 1), 2), ((0, 0, 1, 1), 3)])
def test_pk_fp4_f32_byte_select_and_preserve(op_sel, byte):
    old = np.full(64, 0xAABBCCDD, dtype=np.uint32)
    src0 = np.full(64, _f32(1.0), dtype=np.uint32)  # fp4 0x2
    src1 = np.full(64, _f32(-6.0), dtype=np.uint32)  # fp4 0xF
    got = fpf.convert("v_cvt_scalef32_pk_fp4_f32", [src0, src1, np.full(64, ONE, np.uint32)], op_sel=op_sel, dst_old=old)
    want = (0xAABBCCDD & ~(0xFF << (8 * byte)) | (0xF2 << (8 * byte))) & 0xFFFFFFFF
    assert int(got[0]) == want, f"op_sel {op_sel}: got {int(got[0]):#010x}, want {want:#010x} (byte {byte})"


def test_pk_fp4_f32_uses_only_the_scale_exponent_and_divides():
    x = np.full(64, _f32(8.0), dtype=np.uint32)
    zero = np.zeros(64, dtype=np.uint32)
    # scale 4.0: 8/4 = 2 -> code 4.  scale 6.0 = 1.5*2^2: exponent 2^2 only -> also code 4
    for scale in (4.0, 6.0):
        got = fpf.convert("v_cvt_scalef32_pk_fp4_f32", [x, x, np.full(64, _f32(scale), np.uint32)], dst_old=zero)
        assert int(got[0]) == 0x44, f"scale {scale}: got {int(got[0]):#x}, want 0x44"


def test_pk_fp4_bf16():
    src = np.full(64, 0x3F80 | (0x4040 << 16), dtype=np.uint32)  # bf16 (1.0, 3.0)
    got = fpf.convert(
        "v_cvt_scalef32_pk_fp4_bf16", [src, np.full(64, ONE, np.uint32)], op_sel=(0, 0, 1, 1), dst_old=np.zeros(64, np.uint32)
    )
    assert int(got[0]) == 0x52000000


def test_pk_fp8_f32_word_select():
    old = np.full(64, 0x12345678, dtype=np.uint32)
    a = np.full(64, _f32(1.0), np.uint32)
    b = np.full(64, _f32(-2.0), np.uint32)
    s = np.full(64, ONE, np.uint32)
    lo = fpf.convert("v_cvt_scalef32_pk_fp8_f32", [a, b, s], dst_old=old)
    hi = fpf.convert("v_cvt_scalef32_pk_fp8_f32", [a, b, s], op_sel=(0, 0, 0, 1), dst_old=old)
    assert (int(lo[0]), int(hi[0])) == (0x1234C038, 0xC0385678)


def test_pk_fp8_bf16_word_select_and_scale():
    src = np.full(64, 0x3F80 | (0xC000 << 16), dtype=np.uint32)  # bf16 (1.0, -2.0)
    s = np.full(64, _f32(0.5), np.uint32)  # divide by 0.5: (2.0, -4.0) -> fp8 0x40, 0xC8
    got = fpf.convert("v_cvt_scalef32_pk_fp8_bf16", [src, s], op_sel=(0, 0, 1), dst_old=np.full(64, 0xFFFF, np.uint32))
    assert int(got[0]) == 0xC840FFFF


def test_pk_f32_fp4_byte_select_and_scale():
    src = np.full(64, 0x0000F200, dtype=np.uint32)
    got = fpf.convert("v_cvt_scalef32_pk_f32_fp4", [src, np.full(64, _f32(2.0), np.uint32)], op_sel=(1, 0, 0))
    assert got.shape == (64, 2)
    assert list(got[0].view(np.float32)) == [2.0, -12.0]
    assert fpf.dst_dwords("v_cvt_scalef32_pk_f32_fp4") == 2


def test_cvt_pk_bf16_f32():
    a = np.full(64, 0x3F808000, np.uint32)  # tie -> 0x3F80
    b = np.full(64, 0x3F818000, np.uint32)  # tie -> 0x3F82
    assert int(fpf.convert("v_cvt_pk_bf16_f32", [a, b])[0]) == 0x3F823F80


def test_requant_roundtrip_through_the_two_fp4_convert_ops():
    """Quantise 8 floats per lane with four pk_fp4_f32 (bytes 0..3), decode with pk_f32_fp4."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    scale = np.full(64, _f32(0.25), np.uint32)
    word = np.zeros(64, np.uint32)
    for sel in range(4):
        word = fpf.convert(
            "v_cvt_scalef32_pk_fp4_f32",
            [x[:, 2 * sel].view(np.uint32), x[:, 2 * sel + 1].view(np.uint32), scale],
            op_sel=(0, 0, sel & 1, sel >> 1),
            dst_old=word,
        )
    back = np.concatenate(
        [fpf.convert("v_cvt_scalef32_pk_f32_fp4", [word, scale], op_sel=(sel & 1, sel >> 1, 0)).view(np.float32) for sel in range(4)],
        axis=1,
    )
    want = fpf.decode("fp4", fpf.encode("fp4", x.astype(np.float64) / 0.25)) * 0.25
    assert np.array_equal(back, want.astype(np.float32))


def test_flydsl_emitted_converts_are_supported():
    # found by compiling FlyDSL kernels/gemm/fp4_gemm_4wave.py and kernels/moe/mxfp_moe offline for gfx950
    for op in (
        "v_cvt_scalef32_pk_fp4_f32",
        "v_cvt_scalef32_pk_fp4_bf16",
        "v_cvt_scalef32_pk_fp8_f32",
        "v_cvt_scalef32_pk_fp8_bf16",
        "v_cvt_pk_bf16_f32",
    ):
        assert fpf.is_convert(op), op
    assert not fpf.is_convert("v_add_f32")


def test_convert_errors():
    z = np.zeros(64, np.uint32)
    with pytest.raises(ValueError, match="dst_old"):
        fpf.convert("v_cvt_scalef32_pk_fp4_f32", [z, z, z])
    with pytest.raises(ValueError, match="source operands"):
        fpf.convert("v_cvt_scalef32_pk_fp4_f32", [z, z], dst_old=z)
    with pytest.raises(ValueError, match="not a convert op"):
        fpf.convert("v_add_f32", [z, z])
    with pytest.raises(ValueError, match="unknown narrow float format"):
        fpf.decode("fp5", [0])


# --- cross-check against torch's independent OCP fp8 / e8m0 implementation ----------------

@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("fmt,dtype", [("fp8", "float8_e4m3fn"), ("bf8", "float8_e5m2")])
def test_fp8_tables_agree_with_torch_ocp_dtypes(fmt, dtype, torch):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ref = codes.view(getattr(torch, dtype)).to(torch.float64).numpy()
    got = fpf.decode(fmt, np.arange(256))
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    assert same.all(), f"{fmt}: codes {np.nonzero(~same)[0]} differ from torch.{dtype}"


@pytest.mark.parametrize("fmt,dtype", [("fp8", "float8_e4m3fn"), ("bf8", "float8_e5m2")])
def test_fp8_rounding_agrees_with_torch_in_range(fmt, dtype, torch):
    rng = np.random.default_rng(4)
    top = float(np.nanmax(fpf.decode(fmt, np.arange(128))[np.isfinite(fpf.decode(fmt, np.arange(128)))]))
    x = np.concatenate([rng.uniform(-top, top, 3000), rng.normal(scale=1e-3, size=1000)]).astype(np.float32)
    ref = torch.from_numpy(x).to(getattr(torch, dtype)).view(torch.uint8).numpy()
    got = fpf.encode(fmt, x.astype(np.float64))
    assert np.array_equal(got, ref), f"{fmt}: {np.count_nonzero(got != ref)} of {x.size} values round differently from torch"


def test_e8m0_agrees_with_torch(torch):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ref = codes.view(torch.float8_e8m0fnu).to(torch.float64).numpy()
    got = fpf.decode_e8m0(np.arange(256))
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    assert same.all(), f"e8m0 codes {np.nonzero(~same)[0]} differ from torch"
