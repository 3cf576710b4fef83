"""Tests of gfx950emu.mfma: register counts, lane layouts, scale selection, arithmetic.

The layout tests put a single 1.0 into one lane/slot of A and of B and give
every lane a distinct E8M0 scale, so a wrong lane mapping, K-block
assignment, output layout or op_sel byte choice fails with a message that
names the lane, row, block and the scale that was actually applied.
"""

import zlib

import numpy as np
import pytest

from gfx950emu import fpformats as fpf
from gfx950emu import mfma

OP16 = "v_mfma_scale_f32_16x16x128_f8f6f4"
OP32 = "v_mfma_scale_f32_32x32x64_f8f6f4"
FMT = {"fp8": 0, "bf8": 1, "fp6": 2, "bf6": 3, "fp4": 4}
WIDTH = {"fp8": 8, "bf8": 8, "fp6": 6, "bf6": 6, "fp4": 4}
ONE = {"fp8": 0x38, "bf8": 0x3C, "fp6": 0x08, "bf6": 0x0C, "fp4": 0x2}


def shape(op):
    m = 16 if "16x16" in op else 32
    k = {"16x16x128": 128, "32x32x64": 64, "16x16x32": 32, "32x32x16": 16}[
        next(s for s in ("16x16x128", "32x32x64", "16x16x32", "32x32x16") if s in op)
    ]
    return m, k


def acc_position(m, lane, reg):
    """(row, col) of D in accumulator register ``reg`` of ``lane`` (CDNA3 calculator layout)."""
    if m == 16:
        return 4 * (lane // 16) + reg, lane % 16
    return 8 * (reg // 4) + 4 * (lane // 32) + reg % 4, lane % 32


def unlayout(d_bits, m):
    """Accumulator registers [64, R] -> D matrix [m, m] (float32 values)."""
    vals = np.asarray(d_bits, dtype=np.uint32).view(np.float32)
    D = np.full((m, m), np.float32(np.nan))
    for lane in range(64):
        for reg in range(vals.shape[1]):
            D[acc_position(m, lane, reg)] = vals[lane, reg]
    return D


def relayout(D, m):
    regs = m * m // 64
    out = np.zeros((64, regs), np.float32)
    for lane in range(64):
        for reg in range(regs):
            out[lane, reg] = D[acc_position(m, lane, reg)]
    return out.view(np.uint32)


def k_of(fmt, m, k, lane, s):
    """Logical K of element ``s`` of ``lane`` (f8f6f4 MFMAs).

    fp4 and fp6/bf6 (issue #12 fix 3): lane group g holds the contiguous run 32*g + s.
    fp8/bf8: two halves of 16, k = (s//16)*K/2 + 16*g + s%16 --
    FlyDSL's a8w4 MoE kernel loads its fp8 A operand as "two 16 B halves 64 B
    apart" while its fp4 B operand is one contiguous 16 B run per lane.
    """
    g = lane // m
    if fmt in ("fp8", "bf8"):
        return (s // 16) * (k // 2) + 16 * g + s % 16
    return 32 * g + s


def lanes_from_A(codes, m, k, fmt="fp4"):
    """Logical A codes [m, k] -> per-lane element codes [64, 32]."""
    return np.array([[codes[l % m, k_of(fmt, m, k, l, s)] for s in range(32)] for l in range(64)])


def lanes_from_B(codes, n, k, fmt="fp4"):
    return np.array([[codes[k_of(fmt, n, k, l, s), l % n] for s in range(32)] for l in range(64)])


def lanes_from_A16(codes, m, k):
    """Plain 16-bit MFMAs: lane group g holds the contiguous run g*P .. g*P+P-1."""
    p = k // (64 // m)
    return np.stack([codes[l % m, (l // m) * p : (l // m + 1) * p] for l in range(64)])


def lanes_from_B16(codes, n, k):
    p = k // (64 // n)
    return np.stack([codes[(l // n) * p : (l // n + 1) * p, l % n] for l in range(64)])


def e8m0_bytes(*bytes_):
    """Four E8M0 bytes (byte 0 first) -> one scale dword."""
    return sum(int(b) << (8 * i) for i, b in enumerate(bytes_))


# ----------------------------------------------------------------------------------------


def test_register_counts():
    for op, nc in ((OP16, 4), (OP32, 16)):
        for fa, na in (("fp8", 8), ("bf8", 8), ("fp6", 6), ("bf6", 6), ("fp4", 4)):
            for fb, nb in (("fp8", 8), ("fp6", 6), ("fp4", 4)):
                assert mfma.register_counts(op, FMT[fa], FMT[fb]) == (na, nb, nc), (op, fa, fb)
        assert mfma.register_counts(op.replace("_scale", ""), 4, 4) == (4, 4, nc)
    assert mfma.register_counts("v_mfma_f32_16x16x32_bf16") == (4, 4, 4)
    assert mfma.register_counts("v_mfma_f32_32x32x16_bf16") == (4, 4, 16)
    assert mfma.register_counts("v_mfma_f32_16x16x16_f16") == (2, 2, 4)
    assert mfma.register_counts("v_mfma_f32_16x16x32_fp8_fp8") == (2, 2, 4)
    assert mfma.register_counts("v_mfma_f32_32x32x16_bf8_fp8") == (2, 2, 16)


def test_flydsl_emitted_mfmas_are_supported():
    # compiled offline from FlyDSL kernels/gemm/fp4_gemm_4wave.py (cbsz:4 blgp:4) and
    # kernels/moe/mxfp_moe gemm1/gemm2 (a4w4: cbsz:4 blgp:4; a8w4: cbsz 0 (fp8 A), blgp:4)
    assert mfma.is_mfma(OP16)
    assert mfma.register_counts(OP16, 4, 4) == (4, 4, 4)
    assert mfma.register_counts(OP16, 0, 4) == (8, 4, 4)
    for op in ("v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16", OP32):
        assert mfma.is_mfma(op), op
    assert not mfma.is_mfma("v_add_f32")


@pytest.mark.parametrize(
    "op,fa,fb",
    [(OP16, "fp4", "fp4"), (OP16, "fp8", "fp8"), (OP16, "fp8", "fp4"), (OP32, "fp4", "fp4"), (OP32, "fp8", "fp8"), (OP32, "fp4", "bf8")],
)
def test_one_hot_lane_slot_and_scale_mapping(op, fa, fb):
    """For every A lane: one 1.0 in A and one in B at the same K; a distinct scale per lane."""
    m, k = shape(op)
    n = m
    na, nb, nc = mfma.register_counts(op, FMT[fa], FMT[fb])
    # byte 0 (the one op_sel=0 selects) is distinct per lane; bytes 1..3 are decoys
    sa = np.array([e8m0_bytes(60 + l, 200, 201, 202) for l in range(64)], np.uint32)
    sb = np.array([e8m0_bytes(140 + l, 20, 21, 22) for l in range(64)], np.uint32)
    c = np.zeros((64, nc), np.uint32)
    for la in range(64):
        j = (5 * la + 3) % 32
        row, kk = la % m, k_of(fa, m, k, la, j)
        col = (7 * la) % n
        lb, jb = next((l, s) for l in range(col, 64, n) for s in range(32) if k_of(fb, n, k, l, s) == kk)
        acodes = np.zeros((64, 32), np.int64)
        bcodes = np.zeros((64, 32), np.int64)
        acodes[la, j] = ONE[fa]
        bcodes[lb, jb] = ONE[fb]
        a = fpf.pack(acodes, WIDTH[fa])
        b = fpf.pack(bcodes, WIDTH[fb])
        assert a.shape == (64, na) and b.shape == (64, nb)
        d = mfma.execute(op, a, b, c, scale_a=sa, scale_b=sb, cbsz=FMT[fa], blgp=FMT[fb])
        D = unlayout(d, m)
        sl_a, sl_b = (kk // 32) * m + row, (kk // 32) * n + col  # lanes holding the block's scales
        want = 2.0 ** ((60 + sl_a - 127) + (140 + sl_b - 127))
        hits = list(zip(*np.nonzero(D)))
        where = (
            f"{op} {fa}x{fb}: A lane {la} slot {j} (row {row}, K {kk}, K-block {kk // 32}) "
            f"x B lane {lb} slot {jb} (col {col})"
        )
        assert len(hits) == 1, f"{where}: expected one nonzero at D[{row}][{col}], got {hits}"
        (r, cc) = hits[0]
        assert (r, cc) == (row, col), f"{where}: product landed at D[{r}][{cc}] instead of D[{row}][{col}]"
        got = float(D[r, cc])
        if got != want:
            used = int(round(np.log2(got))) - (140 + sl_b - 127) + 127 - 60
            raise AssertionError(
                f"{where}: value {got!r} != {want!r}: wrong scale lanes; expected A scale from lane {sl_a} and B "
                f"scale from lane {sl_b} (K-block {kk // 32}); if B's was right, A's came from lane {used}"
            )


def test_fp8_operand_uses_split_halves_like_flydsl_a8w4():
    """fp8 byte 16+6 of lane 0 is K = 64 + 6; fp4 nibble 6 of lane 32 is K = 2*32 + 6 = 70."""
    s = np.full(64, 0x7F7F7F7F, np.uint32)
    c = np.zeros((64, 4), np.uint32)
    b = np.zeros((64, 32), np.int64)
    b[32, 6] = ONE["fp4"]  # B[70][0]
    for a_slot, want in ((22, 1.0), (6, 0.0)):
        a = np.zeros((64, 32), np.int64)
        a[0, a_slot] = ONE["fp8"]
        d = mfma.execute(OP16, fpf.pack(a, 8), fpf.pack(b, 4), c, scale_a=s, scale_b=s, cbsz=0, blgp=4)
        got = float(d.view(np.float32)[0, 0])
        assert got == want, f"fp8 A lane 0 byte {a_slot} x fp4 B[70][0]: D[0][0] = {got}, want {want}"


@pytest.mark.parametrize("op", [OP16, OP32])
def test_op_sel_picks_the_scale_byte(op):
    m, _ = shape(op)
    nc = m * m // 64
    ones = fpf.pack(np.full((64, 32), ONE["fp4"]), 4)
    sa = np.full(64, e8m0_bytes(100, 101, 102, 103), np.uint32)
    sb = np.full(64, e8m0_bytes(110, 112, 114, 116), np.uint32)
    c = np.zeros((64, nc), np.uint32)
    for bits in range(16):
        osa, osb, hia, hib = bits & 1, (bits >> 1) & 1, (bits >> 2) & 1, (bits >> 3) & 1
        d = mfma.execute(op, ones, ones, c, scale_a=sa, scale_b=sb, cbsz=4, blgp=4, op_sel=(osa, osb, 0), op_sel_hi=(hia, hib, 0))
        byte_a, byte_b = osa + 2 * hia, osb + 2 * hib
        k = 128 if m == 16 else 64
        want = k * 2.0 ** ((100 + byte_a - 127) + (110 + 2 * byte_b - 127))
        got = d.view(np.float32)
        assert np.all(got == want), (
            f"{op} op_sel=[{osa},{osb},0] op_sel_hi=[{hia},{hib},0]: expected A byte {byte_a}, B byte {byte_b} "
            f"-> {want}, got {np.unique(got)}"
        )


@pytest.mark.parametrize("op", [OP16, OP32])
def test_nan_scale_poisons_exactly_its_row(op):
    m, k = shape(op)
    nc = m * m // 64
    ones = fpf.pack(np.full((64, 32), ONE["fp4"]), 4)
    lane = 5 if m == 16 else 40  # row 5 block 0 / row 8 block 1
    sa = np.full(64, 0x7F7F7F7F, np.uint32)
    sa[lane] = 0x7F7F7FFF
    sb = np.full(64, 0x7F7F7F7F, np.uint32)
    D = unlayout(mfma.execute(op, ones, ones, np.zeros((64, nc), np.uint32), scale_a=sa, scale_b=sb, cbsz=4, blgp=4), m)
    nan_rows = sorted(set(np.nonzero(np.isnan(D))[0]))
    assert nan_rows == [lane % m], f"{op}: NaN scale in lane {lane} should poison row {lane % m} only, got rows {nan_rows}"
    assert np.all(np.isnan(D[lane % m]))
    assert np.all(D[np.arange(m) != lane % m] == k)


def _random_operands(rng, op, fa, fb, lo=118, hi=136):
    m, k = shape(op)

    def codes(fmt, size):
        c = rng.integers(0, 1 << WIDTH[fmt], size)
        if fmt == "fp8":
            c[(c & 0x7F) == 0x7F] = 0x38  # no NaN
        if fmt == "bf8":
            c[(c & 0x7C) == 0x7C] = 0x3C  # no inf/NaN
        return c

    A = codes(fa, (m, k))
    B = codes(fb, (k, m))
    a = fpf.pack(lanes_from_A(A, m, k, fa), WIDTH[fa])
    b = fpf.pack(lanes_from_B(B, m, k, fb), WIDTH[fb])
    sa = rng.integers(lo, hi, (64, 4))
    sb = rng.integers(lo, hi, (64, 4))
    sa_w = (sa[:, 0] | sa[:, 1] << 8 | sa[:, 2] << 16 | sa[:, 3] << 24).astype(np.uint32)
    sb_w = (sb[:, 0] | sb[:, 1] << 8 | sb[:, 2] << 16 | sb[:, 3] << 24).astype(np.uint32)
    C = rng.normal(size=(m, m)).astype(np.float32)
    return A, B, a, b, sa, sb, sa_w, sb_w, C


@pytest.mark.parametrize(
    "op,fa,fb",
    [
        (OP16, "fp4", "fp4"),
        (OP16, "fp8", "fp4"),
        (OP16, "fp8", "fp8"),
        (OP16, "bf8", "fp6"),
        (OP16, "bf6", "bf8"),
        (OP32, "fp4", "fp4"),
        (OP32, "fp6", "fp8"),
    ],
)
def test_matches_numpy_matmul_of_decoded_values(op, fa, fb):
    """Random codes and scales (op_sel byte 1 for A, byte 2 for B) against decode + np.matmul."""
    rng = np.random.default_rng(zlib.crc32(f"{op}{fa}{fb}".encode()))
    m, k = shape(op)
    A, B, a, b, sa, sb, sa_w, sb_w, C = _random_operands(rng, op, fa, fb)
    d = mfma.execute(
        op, a, b, relayout(C, m), scale_a=sa_w, scale_b=sb_w, cbsz=FMT[fa], blgp=FMT[fb], op_sel=(1, 0, 0), op_sel_hi=(0, 1, 0)
    )
    # reference: scale of (row i, block kb) comes from lane kb*m + i, byte 1 for A / byte 2 for B
    Sa = np.zeros((m, k))
    Sb = np.zeros((k, m))
    for i in range(m):
        for kb in range(k // 32):
            Sa[i, kb * 32 : (kb + 1) * 32] = 2.0 ** (sa[kb * m + i, 1] - 127)
            Sb[kb * 32 : (kb + 1) * 32, i] = 2.0 ** (sb[kb * m + i, 2] - 127)
    ref = blocked_reference(fpf.decode(fa, A), fpf.decode(fb, B), Sa, Sb, C)
    got = unlayout(d, m)
    assert np.array_equal(got, ref), f"{op} {fa}x{fb}: max |diff| {np.max(np.abs(got - ref))}"
    # the exact sum rounded once is within a few f32 roundings of it (relative to the terms' size)
    exact = ((fpf.decode(fa, A) * Sa) @ (fpf.decode(fb, B) * Sb) + C.astype(np.float64))
    size = np.abs(fpf.decode(fa, A) * Sa) @ np.abs(fpf.decode(fb, B) * Sb) + np.abs(C)
    assert np.all(np.abs(got - exact) <= 2.0 ** -20 * size)


def blocked_reference(A, B, Sa, Sb, C):
    """The documented rounding model, element by element with Python floats and np.float32:
    per 32-K block an f32 FMA chain in K order on unscaled values, then x scales (one
    rounding), then f32 adds onto C in block order."""
    m, k = A.shape
    n = B.shape[1]
    D = np.zeros((m, n), np.float32)
    for i in range(m):
        for j in range(n):
            acc = np.float32(C[i, j])
            for kb in range(0, k, 32):
                p = np.float32(0)
                for kk in range(kb, kb + 32):
                    p = np.float32(float(A[i, kk]) * float(B[kk, j]) + float(p))
                q = np.float32(float(p) * float(Sa[i, kb]) * float(Sb[kb, j]))
                acc = np.float32(acc + q)
            D[i, j] = acc
    return D


@pytest.mark.parametrize("op,fa,fb", [(OP16, "fp4", "fp4"), (OP16, "fp8", "fp4"), (OP32, "bf8", "fp8")])
def test_incrementing_every_a_scale_doubles_the_result(op, fa, fb):
    rng = np.random.default_rng(7)
    m, _ = shape(op)
    nc = m * m // 64
    _, _, a, b, _, _, sa_w, sb_w, _ = _random_operands(rng, op, fa, fb)
    c = np.zeros((64, nc), np.uint32)
    d1 = mfma.execute(op, a, b, c, scale_a=sa_w, scale_b=sb_w, cbsz=FMT[fa], blgp=FMT[fb]).view(np.float32)
    d2 = mfma.execute(op, a, b, c, scale_a=sa_w + np.uint32(0x01010101), scale_b=sb_w, cbsz=FMT[fa], blgp=FMT[fb]).view(np.float32)
    assert np.any(d1 != 0)
    assert np.array_equal(d2, 2 * d1), f"{op} {fa}x{fb}: +1 on A's E8M0 scales did not double D exactly"


@pytest.mark.parametrize("op,fa,fb", [(OP16, "fp4", "fp4"), (OP16, "fp6", "fp4"), (OP32, "fp4", "bf6")])
def test_consistent_permutation_of_k_leaves_result_unchanged(op, fa, fb):
    """Permute the positions inside every 32-element K block, same for A and B: D is unchanged
    where the in-block f32 chain is exact (fp4/fp6/bf6 operands; issue #12 fix 8 rounding
    model: block order and, for wider formats, K order inside a block are observable)."""
    rng = np.random.default_rng(11)
    m, k = shape(op)
    nblk = k // 32
    A, B, a, b, sa, sb, sa_w, sb_w, C = _random_operands(rng, op, fa, fb, lo=124, hi=130)
    c = relayout(C, m)
    kw = dict(cbsz=FMT[fa], blgp=FMT[fb])
    d0 = mfma.execute(op, a, b, c, scale_a=sa_w, scale_b=sb_w, **kw)

    block_perm = rng.permutation(nblk)
    while np.all(block_perm == np.arange(nblk)):
        block_perm = rng.permutation(nblk)
    inner = rng.permutation(32)
    # new K position of old K index k: block block_perm[k // 32], offset inner[k % 32]
    new_k = np.array([block_perm[kk // 32] * 32 + inner[kk % 32] for kk in range(k)])
    A2 = np.zeros_like(A)
    B2 = np.zeros_like(B)
    A2[:, new_k] = A
    B2[new_k, :] = B
    # the scale of (row i, old block b) moves to the lane of (row i, new block block_perm[b])
    src_lane = np.zeros(64, np.int64)
    for lane in range(64):
        old_block = int(np.nonzero(block_perm == lane // m)[0][0])
        src_lane[lane] = old_block * m + lane % m
    a2 = fpf.pack(lanes_from_A(A2, m, k, fa), WIDTH[fa])
    b2 = fpf.pack(lanes_from_B(B2, m, k, fb), WIDTH[fb])
    # inner permutation only: same blocks, same scales
    new_k_inner = np.array([(kk // 32) * 32 + inner[kk % 32] for kk in range(k)])
    A3 = np.zeros_like(A)
    B3 = np.zeros_like(B)
    A3[:, new_k_inner] = A
    B3[new_k_inner, :] = B
    a3 = fpf.pack(lanes_from_A(A3, m, k, fa), WIDTH[fa])
    b3 = fpf.pack(lanes_from_B(B3, m, k, fb), WIDTH[fb])
    d1 = mfma.execute(op, a3, b3, c, scale_a=sa_w, scale_b=sb_w, **kw)
    assert np.array_equal(d0, d1), f"{op} {fa}x{fb}: permuting K inside the blocks changed D"
    # permuting blocks with their scales changes D by f32 rounding at most
    d1b = mfma.execute(op, a2, b2, c, scale_a=sa_w[src_lane], scale_b=sb_w[src_lane], **kw)
    np.testing.assert_allclose(d1b.view(np.float32), d0.view(np.float32), rtol=1e-5, atol=1e-5)

    # moving the data but not the scales must change the result (the scales are per block)
    d2 = mfma.execute(op, a2, b2, c, scale_a=sa_w, scale_b=sb_w, **kw)
    assert not np.array_equal(d0, d2)


@pytest.mark.parametrize("op", [OP16, OP32])
def test_accumulator_is_added_in_the_output_layout(op):
    rng = np.random.default_rng(5)
    m, kdim = shape(op)
    nc = m * m // 64
    zeros = np.zeros((64, 4), np.uint32)
    c = rng.integers(0, 2**32, (64, nc), dtype=np.uint64).astype(np.uint32)
    c[(c & 0x7F800000) == 0x7F800000] = 0  # keep C finite
    s = np.full(64, 0x7F7F7F7F, np.uint32)
    d = mfma.execute(op, zeros, zeros, c, scale_a=s, scale_b=s, cbsz=4, blgp=4)
    # 0*0 + C == C, except that -0 + +0 = +0
    same = (d == c) | ((c == 0x80000000) & (d == 0))
    assert same.all()
    # a product at D[i][j] adds to the C element in the register that holds D[i][j]
    for lane, reg in ((0, 0), (21, 2), (63, nc - 1)):
        i, j = acc_position(m, lane, reg)
        A = np.zeros((m, kdim), np.int64)
        B = np.zeros((kdim, m), np.int64)
        A[i, 3] = ONE["fp4"]
        B[3, j] = ONE["fp4"]
        cc = np.zeros((64, nc), np.float32)
        cc[lane, reg] = 0.5
        d = mfma.execute(
            op,
            fpf.pack(lanes_from_A(A, m, kdim), 4),
            fpf.pack(lanes_from_B(B, m, kdim), 4),
            cc.view(np.uint32),
            scale_a=s,
            scale_b=s,
            cbsz=4,
            blgp=4,
        ).view(np.float32)
        assert d[lane, reg] == 1.5 and np.count_nonzero(d) == 1, f"{op}: D[{i}][{j}] should be lane {lane} reg {reg}"


@pytest.mark.parametrize("op", ["v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16"])
def test_plain_16bit_mfma_one_hot_layout(op):
    m, k = shape(op)
    p = k // (64 // m)
    nc = m * m // 64
    two, three = (0x4000, 0x4040) if op.endswith("bf16") else (0x4000, 0x4200)
    c = np.zeros((64, nc), np.uint32)
    for la in range(64):
        j = (3 * la + 1) % p
        col = (5 * la + 2) % m
        lb = (la // m) * m + col
        ea = np.zeros((64, p), np.int64)
        eb = np.zeros((64, p), np.int64)
        ea[la, j] = two
        eb[lb, j] = three
        D = unlayout(mfma.execute(op, fpf.pack(ea, 16), fpf.pack(eb, 16), c), m)
        hits = list(zip(*np.nonzero(D)))
        assert hits == [(la % m, col)] and D[la % m, col] == 6.0, (
            f"{op}: A lane {la} slot {j} x B lane {lb} slot {j} should give 6 at D[{la % m}][{col}], got {hits}"
        )


def test_bad_input_raises_value_error():
    z4 = np.zeros((64, 4), np.uint32)
    s = np.zeros(64, np.uint32)
    with pytest.raises(ValueError, match="not an MFMA"):
        mfma.execute("v_mfma_f32_4x4x4_f16", z4, z4, z4)
    with pytest.raises(ValueError, match="shape"):
        mfma.execute(OP16, z4, z4, z4, scale_a=s, scale_b=s, cbsz=0, blgp=4)  # fp8 A needs 8 dwords
    with pytest.raises(ValueError, match="needs scale_a"):
        mfma.execute(OP16, z4, z4, z4, cbsz=4, blgp=4)
    with pytest.raises(ValueError, match="must be 0..4"):
        mfma.register_counts(OP16, 5, 4)
    with pytest.raises(ValueError, match="not a scaled MFMA"):
        mfma.execute("v_mfma_f32_16x16x128_f8f6f4", z4, z4, z4, scale_a=s, scale_b=s, cbsz=4, blgp=4)
    with pytest.raises(ValueError, match="abid"):
        mfma.execute(OP16, z4, z4, z4, scale_a=s, scale_b=s, cbsz=4, blgp=4, abid=1)
    with pytest.raises(ValueError, match="unsigned integers"):
        mfma.execute(OP16, z4.astype(np.float32), z4, z4, scale_a=s, scale_b=s, cbsz=4, blgp=4)


@pytest.mark.parametrize("op", ["v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_bf16", "v_mfma_f32_16x16x32_f16"])
def test_plain_16bit_mfma_matches_numpy(op):
    rng = np.random.default_rng(9)
    m, k = shape(op)
    x = rng.normal(size=(m, k)).astype(np.float32)
    y = rng.normal(size=(k, m)).astype(np.float32)
    if op.endswith("bf16"):
        A16, B16 = fpf.bf16_bits_from_f32(x.view(np.uint32)), fpf.bf16_bits_from_f32(y.view(np.uint32))
        A, B = fpf.f32_from_bf16_bits(A16), fpf.f32_from_bf16_bits(B16)
    else:
        A16, B16 = x.astype(np.float16).view(np.uint16), y.astype(np.float16).view(np.uint16)
        A, B = x.astype(np.float16), y.astype(np.float16)
    C = rng.normal(size=(m, m)).astype(np.float32)
    a = fpf.pack(lanes_from_A16(A16.astype(np.int64), m, k), 16)
    b = fpf.pack(lanes_from_B16(B16.astype(np.int64), m, k), 16)
    got = unlayout(mfma.execute(op, a, b, relayout(C, m)), m)
    ref = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6, err_msg=op)


def test_coordinate_helpers():
    assert mfma.a_coords(OP16, 0, 22, cbsz=0) == (0, 70)  # fp8: second half, K 64 + 6
    assert mfma.a_coords(OP16, 37, 5, cbsz=4) == (5, 69)  # fp4: lane group 2, K 64 + 5
    assert mfma.b_coords(OP32, 33, 17, blgp=1) == (32 + 16 + 1, 1)  # bf8, 32x32x64: K 32*1 + 16*1 + 1
    assert mfma.scale_lane(OP16, 5, 70) == 2 * 16 + 5
    assert mfma.d_coords(OP32, 33, 5) == (13, 1)
    assert mfma.d_coords(OP16, 37, 3) == (11, 5)
    assert mfma.a_coords("v_mfma_f32_16x16x32_bf16", 37, 3) == (5, 19)


@pytest.mark.parametrize("op", ["v_mfma_scale_f32_16x16x128_f8f6f4", "v_mfma_scale_f32_32x32x64_f8f6f4",
                                "v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x8_f16",
                                "v_mfma_f32_16x16x32_fp8_bf8"])
def test_zero_operands_give_the_bits_of_the_full_arithmetic(op, monkeypatch):
    """A and B all zero (the timing model's inputs) skip steps 1-2; D must be the bits the full
    arithmetic gives, for every accumulator value (-0, a NaN payload, -inf, a denormal) and scale."""
    rng = np.random.default_rng(3)
    kw = {"cbsz": 4, "blgp": 4} if "f8f6f4" in op else {}
    na, nb, nc = mfma.register_counts(op, kw.get("cbsz", 0), kw.get("blgp", 0))
    c = rng.integers(0, 2 ** 32, size=(64, nc), dtype=np.uint64).astype(np.uint32)
    c[0, :4] = [0x80000000, 0x7FC00001, 0xFF800000, 0x00000001]
    za, zb = np.zeros((64, na), np.uint32), np.zeros((64, nb), np.uint32)
    scales = [None]
    if mfma.spec(op).scaled:
        scales = [rng.integers(0, 0xFF, size=64, dtype=np.uint64).astype(np.uint32) * 0x01010101,
                  np.full(64, 0xFFFFFFFF, np.uint32)]                         # NaN scales: the full path
    real, full = mfma._blocks, []
    for s in scales:
        skw = dict(kw, scale_a=s, scale_b=s) if s is not None else kw
        calls = []
        monkeypatch.setattr(mfma, "_blocks", lambda *a_: calls.append(1) or real(*a_))
        fast = mfma.execute(op, za, zb, c, **skw)
        assert calls == ([1] if s is not None and s[0] == 0xFFFFFFFF else []), op
        # the same zeros through steps 1-2, the full arithmetic
        monkeypatch.setattr(mfma, "_blocks", real)
        sp_, fa, fb, _, _, _, plan, always, bound = mfma._resolve(op, kw.get("cbsz", 0), kw.get("blgp", 0), 0)
        kb = min(32, sp_.k)
        sa = mfma._lane_scales(s, 0, "s") if s is not None else None
        with np.errstate(invalid="ignore", over="ignore"):
            D = fpf.f32_from_bits(c).reshape(-1)[plan.d_order].reshape(sp_.m, sp_.n)
            for q in real(sp_, fa, fb, za, zb, plan, always, bound, sp_.k // kb, kb, sa, sa):
                D = D + q
        full.append(np.array_equal(D.reshape(-1)[plan.d_flat].view(np.uint32), fast))
    assert all(full), op


# ---- the kernel handler's own zero shortcut (kernel._build_mfma, mfma.zero_shortcut) ----
_ZERO_CASES = [
    # (MFMA line, C per lane, scale per lane, shortcut taken): inputs arrive in v10 (scale) and v11 (C);
    # both scale operands are v10, so op_sel / op_sel_hi pick byte (bit 0 | hi 0) for A, (bit 1 | hi 1) for B
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 cbsz:4 blgp:4", 0, 0x7F7F7F7F, True),
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 cbsz:4 blgp:4", 0, 0x7F7F7FFF, False),  # NaN byte 0
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 op_sel:[1,1,0] cbsz:4 blgp:4", 0, 0x7F7F7FFF, True),
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 op_sel:[1,0,0] cbsz:4 blgp:4", 0, 0x7F7F7FFF, False),
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 op_sel_hi:[1,1,0] cbsz:4 blgp:4", 0, 0xFF7F7F7F, True),
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 op_sel_hi:[0,1,0] cbsz:4 blgp:4", 0, 0x7FFF7F7F, False),
    (f"{OP16} v[20:23], v[30:33], v[34:37], v[40:43], v10, v10 cbsz:4 blgp:4", 0x80000000, 0x7F7F7F7F, False),  # -0
    (f"{OP16} v[20:23], v[30:33], v[34:37], 0, v10, v10 cbsz:4 blgp:4", 0, 0x7F7F7F7F, True),
    (f"{OP16} v[20:23], v[30:33], v[34:37], 1.0, v10, v10 cbsz:4 blgp:4", 0, 0x7F7F7F7F, False),
    ("v_mfma_f32_16x16x32_bf16 v[20:23], v[30:33], v[34:37], v[40:43]", 0, 0, True),
    ("v_mfma_f32_16x16x32_bf16 v[20:23], v[30:33], v[34:37], v[40:43]", 0x00000001, 0, False),          # denormal C
]


@pytest.mark.parametrize("line, c, scale, shortcut", _ZERO_CASES)
def test_kernel_zero_shortcut_gives_the_bits_execute_gives(line, c, scale, shortcut, monkeypatch):
    """The MFMA handler writes D = +0 without calling execute when A, B and C are +0 bits and no
    selected scale byte is NaN; D must be the bits execute gives, for -0 / denormal / inline C and NaN
    scales in the selected and the unselected byte (execute forced by switching the shortcut off)."""
    import emu_asm
    zeros = "\n".join(f"v_mov_b32_e32 v{r}, 0" for r in range(30, 38))
    cs = "\n".join(f"v_mov_b32_e32 v{r}, v11" for r in range(40, 44))
    lines = f"{zeros}\n{cs}\ns_nop 4\n{line}\ns_nop 7\ns_nop 7\ns_nop 7"
    lane = np.arange(64, dtype=np.uint32)
    inputs = [np.full(64, scale, np.uint32), np.where(lane % 3 == 0, np.uint32(c), np.uint32(0))]
    calls = []
    real = mfma.execute
    monkeypatch.setattr(mfma, "execute", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = emu_asm.run_valu(lines, inputs, nout=4)
    assert (not calls) == shortcut, line
    monkeypatch.setattr(mfma, "zero_shortcut", lambda *a, **k: False)
    full = emu_asm.run_valu(lines, inputs, nout=4)
    assert calls, "the forced full path calls execute"
    assert np.array_equal(fast, full), line


def test_nan_scale_reads_only_the_selected_byte():
    """nan_scale: a zero register holds no NaN scale; 0xFF in the selected byte of any lane is one, in
    another byte it is not."""
    s = np.zeros(64, np.uint32)
    assert not any(mfma.nan_scale(s, sel) for sel in range(4))
    for sel in range(4):
        s = np.full(64, 0x7F7F7F7F, np.uint32)
        s[17] |= np.uint32(0xFF << (8 * sel))
        assert [mfma.nan_scale(s, k) for k in range(4)] == [k == sel for k in range(4)]
