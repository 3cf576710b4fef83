"""Emulator speed benchmark: ``python -m gfx950emu.bench [--k 2048] [--repeat 1]``.

It runs one workgroup of a 256x256-tile MXFP4 GEMM and prints instructions per
second and seconds per workgroup, with the hazard checker off and on.  The
kernel is generated here (``synthetic_gemm_isa``) so the benchmark depends on
nothing but this package: 4 waves in a 2x2 layout, each owning a 128x128
quadrant as 8x8 tiles of ``v_mfma_scale_f32_16x16x128_f8f6f4`` (fp4 x fp4,
E8M0 scales) accumulating in 256 AGPRs; per 128-wide K step the waves copy A
and B into LDS with ``buffer_load_dwordx4 ... lds``, load their scale bytes
with ``buffer_load_ubyte``, wait, meet at a barrier, read their fragments with
``ds_read_b128`` and issue 64 MFMAs.  It has the same MFMA count per wave as a
production 256x256 MXFP4 GEMM (K/128 * 64), so it is a fair speed yardstick,
and ``reference`` lets tests check its result.

``--isa FILE`` benchmarks any single-kernel ``.s`` instead, with zero-filled
buffers of ``--buffer-bytes`` for every global_buffer argument and 0 for every
by_value argument (good for timing straight-line kernels only).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import asm, launch, load

TILE = 256
_ARGS = ("A", "B", "A_scale", "B_scale", "C")


def synthetic_gemm_isa(K: int = 2048) -> str:
    """Assembly text of the benchmark GEMM for a given K (a multiple of 128)."""
    if not isinstance(K, int) or K <= 0 or K % 128:
        raise ValueError(f"K must be a positive multiple of 128, got {K!r}")
    ksteps = K // 128
    row_b, srow = K // 2, K // 32
    L = []
    e = L.append
    # kernarg pointers -> buffer descriptors A s[8:11], B s[12:15], SA s[16:19], SB s[20:23], C s[24:27]
    for k, base in enumerate((8, 12, 16, 20, 24)):
        e(f"s_load_dwordx2 s[{base}:{base + 1}], s[0:1], 0x{8 * k:x}")
    e("v_lshrrev_b32_e32 v1, 6, v0")
    e("v_readfirstlane_b32 s30, v1                 ; wave id")
    e("v_and_b32_e32 v2, 63, v0                    ; lane")
    e("s_lshr_b32 s31, s30, 1                      ; wm")
    e("s_and_b32 s32, s30, 1                       ; wn")
    e("s_waitcnt lgkmcnt(0)")
    sizes = (TILE * row_b, TILE * row_b, TILE * srow, TILE * srow, TILE * TILE * 4)
    for base, nbytes in zip((8, 12, 16, 20, 24), sizes):
        e(f"s_and_b32 s{base + 1}, s{base + 1}, 0xffff")
        e(f"s_mov_b32 s{base + 2}, 0x{nbytes:x}")
        e(f"s_mov_b32 s{base + 3}, 0x27000")
    # DMA voffset: row (lane/4) * row_b + (lane%4)*16
    e("v_lshrrev_b32_e32 v3, 2, v2")
    e(f"v_mul_u32_u24_e32 v3, 0x{row_b:x}, v3")
    e("v_and_b32_e32 v4, 3, v2")
    e("v_lshl_add_u32 v3, v4, 4, v3               ; v3: DMA voffset")
    e("v_and_b32_e32 v5, 15, v2                    ; r = lane % 16")
    e("v_lshrrev_b32_e32 v6, 4, v2                 ; g = lane / 16")
    # fragment read address for A: (128*wm + r)*64 + 16*g ; for B: 16384 + (128*wn + r)*64 + 16*g
    e("s_lshl_b32 s33, s31, 7")
    e("v_add_u32_e32 v7, s33, v5")
    e("v_lshlrev_b32_e32 v7, 6, v7")
    e("v_lshl_add_u32 v7, v6, 4, v7               ; v7: A fragment LDS address")
    e("s_lshl_b32 s34, s32, 7")
    e("v_add_u32_e32 v8, s34, v5")
    e("v_lshlrev_b32_e32 v8, 6, v8")
    e("v_lshl_add_u32 v8, v6, 4, v8")
    e("v_add_u32_e32 v8, 0x4000, v8               ; v8: B fragment LDS address")
    # scale voffsets: (128*wm + r)*srow + g  and (128*wn + r)*srow + g
    e("v_add_u32_e32 v9, s33, v5")
    e(f"v_mul_u32_u24_e32 v9, 0x{srow:x}, v9")
    e("v_add_u32_e32 v9, v9, v6                    ; v9: A scale voffset")
    e("v_add_u32_e32 v10, s34, v5")
    e(f"v_mul_u32_u24_e32 v10, 0x{srow:x}, v10")
    e("v_add_u32_e32 v10, v10, v6                  ; v10: B scale voffset")
    # C voffset: ((128*wm + 4*g)*256 + 128*wn + r)*4
    e("v_lshlrev_b32_e32 v11, 2, v6")
    e("v_add_u32_e32 v11, s33, v11")
    e("v_lshlrev_b32_e32 v11, 8, v11")
    e("v_add_u32_e32 v11, s34, v11")
    e("v_add_u32_e32 v11, v11, v5")
    e("v_lshlrev_b32_e32 v11, 2, v11               ; v11: C voffset")
    e("s_lshl_b32 s35, s30, 12                     ; wave's LDS slice: 4096*wave")
    e(f"s_mul_i32 s36, s30, 0x{64 * row_b:x}        ; wave's first DMA row * row_b")
    for k in range(256):
        e(f"v_accvgpr_write_b32 a{k}, 0")
    e("s_mov_b32 s40, 0                            ; k step")
    e(".LBB0_1:")
    e("s_lshl_b32 s41, s40, 6                      ; k step * 64 bytes")
    for mat, lds_base, rs in (("A", 0, 8), ("B", 0x4000, 12)):
        for j in range(4):
            e(f"s_add_u32 s42, s36, 0x{j * 16 * row_b:x}")
            e(f"s_add_u32 m0, s35, 0x{lds_base + 1024 * j:x}")
            e("s_add_u32 s42, s42, s41                    ; also the wait state M0 -> LDS DMA needs")
            e(f"buffer_load_dwordx4 v3, s[{rs}:{rs + 3}], s42 offen lds")
    e("s_lshl_b32 s43, s40, 2                      ; k step * 4 scale bytes")
    for t in range(8):
        e(f"s_add_u32 s44, s43, 0x{t * 16 * srow:x}")
        e(f"buffer_load_ubyte v{20 + t}, v9, s[16:19], s44 offen")
        e(f"buffer_load_ubyte v{28 + t}, v10, s[20:23], s44 offen")
    e("s_waitcnt vmcnt(0)")
    e("s_barrier")
    for t in range(8):
        e(f"ds_read_b128 v[{40 + 4 * t}:{43 + 4 * t}], v7 offset:{1024 * t}")
        e(f"ds_read_b128 v[{72 + 4 * t}:{75 + 4 * t}], v8 offset:{1024 * t}")
    e("s_waitcnt lgkmcnt(0)")
    for ti in range(8):
        for tj in range(8):
            acc = 4 * (8 * ti + tj)
            e(f"v_mfma_scale_f32_16x16x128_f8f6f4 a[{acc}:{acc + 3}], v[{40 + 4 * ti}:{43 + 4 * ti}], "
              f"v[{72 + 4 * tj}:{75 + 4 * tj}], a[{acc}:{acc + 3}], v{20 + ti}, v{28 + tj} "
              f"op_sel:[0,0,0] op_sel_hi:[0,0,0] cbsz:4 blgp:4")
    e("s_barrier")
    e("s_add_u32 s40, s40, 1")
    e(f"s_cmp_lt_u32 s40, {ksteps}")
    e("s_cbranch_scc1 .LBB0_1")
    e("s_nop 7")
    for ti in range(8):
        for tj in range(8):
            acc = 4 * (8 * ti + tj)
            for i in range(4):
                e(f"v_accvgpr_read_b32 v{104 + i}, a{acc + i}")
            e(f"s_mov_b32 s45, 0x{16384 * ti + 64 * tj:x}")
            for i in range(4):
                e(f"buffer_store_dword v{104 + i}, v11, s[24:27], s45 offen offset:{1024 * i}")
    e("s_endpgm")
    return asm.kernel("\n".join(L), args=_ARGS, name="gemm_synth", lds=32768, acc=256, vgprs=512,
                      reqd_workgroup_size=(256, 1, 1))


_FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def synthetic_gemm_inputs(K: int = 2048, seed: int = 0) -> dict:
    """Random packed fp4 A/B (element 2i in the low nibble), E8M0 scales and a zeroed C."""
    rng = np.random.default_rng(seed)
    return {
        "A": rng.integers(0, 256, (TILE, K // 2), dtype=np.uint8),
        "B": rng.integers(0, 256, (TILE, K // 2), dtype=np.uint8),
        "A_scale": rng.integers(120, 134, (TILE, K // 32), dtype=np.uint8),
        "B_scale": rng.integers(120, 134, (TILE, K // 32), dtype=np.uint8),
        "C": np.zeros((TILE, TILE), dtype=np.float32),
    }


def reference(inp: dict) -> np.ndarray:
    """float64 C = (A * sa) @ (B * sb)^T of the dequantised inputs."""
    def deq(q, s):
        v = np.empty((q.shape[0], q.shape[1] * 2))
        v[:, 0::2], v[:, 1::2] = _FP4[q & 15], _FP4[q >> 4]
        return v * np.repeat(2.0 ** (s.astype(np.float64) - 127), 32, axis=1)
    return deq(inp["A"], inp["A_scale"]) @ deq(inp["B"], inp["B_scale"]).T


def run_synthetic(K: int = 2048, hazards: str = "off", seed: int = 0, prog=None):
    """Run one workgroup; returns (result, inputs with C filled, program)."""
    prog = prog or load(synthetic_gemm_isa(K))
    inp = synthetic_gemm_inputs(K, seed)
    res = launch(prog, grid=(1, 1, 1), block=(256, 1, 1), args=[inp[n] for n in _ARGS], hazards=hazards)
    return res, inp, prog


def _bench_isa(prog, grid, block, nbytes, hazards):
    args = []
    for a in prog.args:
        kind = a.get(".value_kind", "")
        if kind.startswith("hidden_"):
            continue
        args.append(np.zeros(nbytes, np.uint8) if kind == "global_buffer" else 0)
    return launch(prog, grid=grid, block=block, args=args, hazards=hazards), prog


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gfx950emu.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=2048, help="K of the synthetic 256x256 GEMM tile (default 2048)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per mode; the fastest is reported")
    ap.add_argument("--isa", help="benchmark this .s file instead of the synthetic GEMM")
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--buffer-bytes", type=int, default=1 << 22)
    ap.add_argument("--timing", action="store_true",
                    help="benchmark the timing model instead: one 256x256 workgroup (default K=8192) with "
                         "timing=True; prints seconds, modelled cycles and the micro-kernel table")
    ns = ap.parse_args(argv)
    if ns.repeat < 1:
        ap.error("--repeat must be at least 1")
    if ns.timing:
        return _bench_timing(ns, argv)
    t0 = time.perf_counter()
    if ns.isa:
        try:
            text = open(ns.isa).read()
        except OSError as e:
            ap.error(f"cannot read --isa file: {e}")
        prog = load(text)
    else:
        prog = load(synthetic_gemm_isa(ns.k))
    print(f"load + decode: {time.perf_counter() - t0:.2f} s")
    from . import mfma as _mfma          # time spent inside the MFMA math, reported separately
    inner, spent = _mfma.execute, [0.0]

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t
    rows = {}
    _mfma.execute = timed
    try:
        _bench_modes(ns, prog, rows, spent)
    finally:
        _mfma.execute = inner
    mf = rows["off"][0].stats.by_class.get("mfma", 0)
    print(f"MFMAs: {mf}; hazard-mode slowdown: {rows['report'][0].seconds / rows['off'][0].seconds:.2f}x")
    return 0


def _bench_timing(ns, argv) -> int:
    from .timing import micro
    K = ns.k if "--k" in (argv if argv is not None else sys.argv) else 8192
    prog = load(open(ns.isa).read()) if ns.isa else load(synthetic_gemm_isa(K))
    best = None
    for _ in range(ns.repeat):
        if ns.isa:
            args = [np.zeros(ns.buffer_bytes, np.uint8) if a.get(".value_kind") == "global_buffer" else 0
                    for a in prog.args if not str(a.get(".value_kind", "")).startswith("hidden_")]
            res = launch(prog, (1, 1, 1), (ns.block, 1, 1), args, timing=True)
        else:
            inp = synthetic_gemm_inputs(K)
            res = launch(prog, (1, 1, 1), (256, 1, 1), [inp[n] for n in _ARGS], timing=True, flops=2.0 * TILE * TILE * K)
        if best is None or res.seconds < best.seconds:
            best = res
    t = best.timing
    what = ns.isa or f"synthetic 256x256 MXFP4 GEMM workgroup, K={K}"
    print(f"timing mode: {what}")
    print(f"  {best.seconds:.2f} s wall for one workgroup ({best.stats.instructions} instructions, "
          f"{best.stats.instructions / best.seconds:.0f} instr/s); target <= 10 s on one core")
    print(f"  modelled: {t['cycles']} cycles, {t['mfma_count']} MFMAs, cycles/MFMA (hot loop) "
          f"{t['cycles_per_mfma_loop']}, MFMA busy {t['mfma_busy']}, model {t['model_version']}, "
          f"clock {t['clock_ghz']} GHz")
    print(f"  exposed cycles (per SIMD): {t['exposed']}")
    print(f"  memory: {t['memory']}")
    print("micro-kernels (modelled cycles vs the documented values; I-cache and memory hierarchy off):")
    print(micro.table(micro.run()))
    print("micro-kernels against published hardware measurements (full model, at the model clock):")
    print(micro.hardware_table(micro.run_hardware()))
    return 0


def _bench_modes(ns, prog, rows, spent):
    for mode in ("off", "report"):
        best = None
        for _ in range(ns.repeat):
            spent[0] = 0.0
            if ns.isa:
                res, _ = _bench_isa(prog, (1, 1, 1), (ns.block, 1, 1), ns.buffer_bytes, mode)
            else:
                res, inp, _ = run_synthetic(ns.k, mode, prog=prog)
            if best is None or res.seconds < best[0].seconds:
                best = (res, spent[0])
        rows[mode] = best
        res, in_mfma = best
        n = res.stats.instructions
        print(f"hazards={mode:6s}: {res.seconds:7.3f} s/workgroup ({in_mfma:.3f} s in mfma.execute, "
              f"{res.seconds - in_mfma:.3f} s the rest), {n} instructions, {n / res.seconds:9.0f} instr/s, "
              f"{len(res.hazards)} hazard reports")
        if not ns.isa:
            ref = reference(inp)
            err = np.abs(inp["C"] - ref).max() / np.abs(ref).max()
            print(f"    max |C - reference| / max |reference| = {err:.3g}")


if __name__ == "__main__":
    sys.exit(main())
