"""The MoE gemm2 (down projection) kernel: variants as data, offline gfx950 compiles, the ISA
metric each switch moves, and bit-exact runs in the gfx950emu emulator against
``moe.emulate.emulate_gemm2`` (which reads the same buffers)."""

import functools
import re

import pytest
import torch

from mxfp4_ablation import family, isa, metrics, toolchain, variants
from mxfp4_ablation.kernels import common
from mxfp4_ablation.kernels import moe_gemm2 as m2
from mxfp4_ablation.moe import emulate, host

TARGET = "mxfp4_ablation.kernels.moe_gemm2:compile_entry"
F = family.get("moe2")
SMALL = dict(experts=8, hidden=512, inter=256, topk=2)
KIMI = dict(experts=385, hidden=7168, inter=512, topk=9)
#: (tokens, block_m): decode (atomic) and prefill (per-row stores) at the small shape.
SMALL_CASES = {"decode": (16, 16), "prefill": (200, 128)}
KIMI_CASES = {"decode": (16, 16), "prefill": (16384, 128)}
LADDER = [n for n, _ in F.ladder]
LOO = [n for n, _ in F.leave_one_out()]


def _shape(base, case):
    tokens, block_m = case
    return dict(base, tokens=tokens, block_m=block_m)


def _compile(shape, names):
    arts = toolchain.compile_many([(TARGET, {**shape, "variant_name": n}) for n in names])
    return {n: a for n, a in zip(names, arts)}


def _on(name):
    """A variant's switches as the keywords kernel_args / build take."""
    return {s: True for s in F.switch_set(name)}


def _hist(art):
    return metrics.kernel_metrics(art.isa)["opcode_histogram"]


def _count(art, *prefixes):
    return sum(v for k, v in _hist(art).items() if k.startswith(prefixes))


def _asm_waits(art):
    """s_waitcnt instructions that came from inline asm."""
    return sum(1 for i in isa.parse(art.isa)[0].instructions if i.opcode == "s_waitcnt" and i.in_asm_block)


def _epilogue_instructions(art):
    """Instructions after the last MFMA (the epilogue)."""
    ops = [i.opcode for i in isa.parse(art.isa)[0].instructions]
    last = max(n for n, op in enumerate(ops) if op.startswith("v_mfma"))
    return len(ops) - last - 1


@pytest.fixture(scope="module", params=sorted(SMALL_CASES))
def small_ladder(request):
    shape = _shape(SMALL, SMALL_CASES[request.param])
    return request.param, shape, _compile(shape, LADDER)


# --------------------------------------------------------------------------- variants as data


def test_ladder_is_cumulative_and_leave_one_out_covers_every_switch():
    assert LADDER == [f"moe2-v{i}" for i in range(5)]
    for (_, prev), (_, cur) in zip(F.ladder, F.ladder[1:]):
        assert prev < cur and len(cur - prev) == 1
    assert F.ladder[-1][1] == frozenset(m2.SWITCHES)
    assert LOO == [f"moe2-v4-no-{s}" for s in m2.SWITCHES]
    for name, sw in F.leave_one_out():
        assert frozenset(m2.SWITCHES) - sw == {name.removeprefix("moe2-v4-no-")}


def test_every_switch_documents_claim_mechanism_and_metric():
    for name, switch in m2.SWITCHES.items():
        doc = switch.doc
        assert "Seed claim" in doc and "Mechanism" in doc and "Metric" in doc, name


def test_int64_abi_is_one_record_first_in_both_moe_ladders():
    from mxfp4_ablation.kernels import moe_common, moe_gemm1

    assert m2.SWITCHES["int64_abi"] is moe_gemm1.SWITCHES["int64_abi"] is moe_common.INT64_ABI
    assert next(iter(m2.SWITCHES)) == next(iter(moe_gemm1.SWITCHES)) == "int64_abi"
    assert "gemm1" in moe_common.INT64_ABI.metric and "gemm2" in moe_common.INT64_ABI.metric


def test_the_registry_knows_the_moe2_variants():
    v = variants.get("moe2-v3")
    assert v.family == "moe2" and v.predecessor == "moe2-v2" and v.kind == "ladder"
    assert variants.get("moe2-v4-no-int64_abi").predecessor == "moe2-v4"
    params = v.params((16, 8, 512, 256, 2))
    assert params["tokens"] == 16 and params["unsigned_div"] is True and "int64_abi" in params
    assert "block_m" not in params  # an optional keyword: the regime rule picks it


def test_block_m_defaults_to_the_regime_rule():
    assert m2.default_block_m(16) == 16 and m2.default_block_m(4095) == 16 and m2.default_block_m(4096) == 128
    assert m2.Geometry(tokens=16384, **KIMI).BM == 128 and m2.Geometry(tokens=200, **SMALL).BM == 16
    assert m2.launch_config(tokens=16, **SMALL) == m2.launch_config(tokens=16, block_m=16, **SMALL)


def test_launch_config_and_geometry():
    grid, block = m2.launch_config(tokens=16, block_m=16, **SMALL)
    sort_rows = host.max_sorted_rows(16, 2, 8, 16)
    assert block == (256, 1, 1) and grid == (sort_rows // 16 * 2, 1, 1)
    g = m2.Geometry(tokens=16384, block_m=128, **KIMI)
    assert g.n_blocks == 28 and g.KT == 2 and g.MC == 8 and g.out_rows == g.max_sorted
    # Prefill: a persistent grid of 256 workgroups past 1024 tiles (the seed's rule), else one per tile.
    assert g.tiles > 1024 and g.grid == 256 and m2.launch_config(tokens=16384, block_m=128, **KIMI)[0] == (256, 1, 1)
    small = m2.Geometry(tokens=200, block_m=128, **SMALL)
    assert small.grid == small.tiles == small.m_blocks * 2
    # LDS: decode 16 KiB (the f32 epilogue tile; the A slots fit in it), prefill two 16 KiB A slots.
    assert m2.Geometry(tokens=16, block_m=16, **KIMI).lds_bytes == 16384 and g.lds_bytes == 32768
    assert small.lds_bytes == 16384  # inter 256: one K tile


@pytest.mark.parametrize("change, match", [
    (dict(block_m=32), "block_m must be 16"),
    (dict(hidden=300), "hidden must be a multiple of 256"),
    (dict(inter=384), "inter must be a multiple of 256"),
    (dict(inter=768), "inter must be at most 512"),
    (dict(topk=9), "topk"),
    (dict(tokens=0), "tokens must be a positive integer"),
    (dict(tokens=1 << 24), "tokens must be below"),
    (dict(experts=True), "experts must be a positive integer"),
])
def test_bad_shapes_are_one_clear_value_error(change, match):
    shape = dict(SMALL, tokens=16, block_m=16)
    shape.update(change)
    with pytest.raises(ValueError, match=match):
        m2.check_shape(**shape)


def test_bad_switches_and_names_are_value_errors():
    with pytest.raises(ValueError, match="unknown MoE gemm2 switch"):
        F.check_switches({"agpr_acc"})
    with pytest.raises(ValueError, match="unknown MoE gemm2 variant"):
        F.switch_set("moe2-v9")
    with pytest.raises(ValueError, match="True/False"):
        m2.build(tokens=16, block_m=16, int64_abi=1, **SMALL)
    with pytest.raises(ValueError, match="either variant_name or"):
        m2.compile_entry(tokens=16, block_m=16, variant_name="moe2-v1", int64_abi=True, **SMALL)
    with pytest.raises(ValueError, match="inputs lack"):
        m2.kernel_args({"inter": torch.zeros(1)})


# --------------------------------------------------------------------------- inputs and reference


@pytest.mark.parametrize("regime", sorted(SMALL_CASES))
def test_inputs_are_the_host_pipeline_buffers(regime):
    tokens, block_m = SMALL_CASES[regime]
    inp = m2.make_inputs(tokens=tokens, block_m=block_m, seed=1, **SMALL)
    g = m2.Geometry(tokens=tokens, block_m=block_m, **SMALL)
    assert inp["inter"].shape == (g.max_sorted, 128) and inp["w2"].shape == (8 * 512, 128)
    assert inp["out"].shape == ((16, 512) if regime == "decode" else (g.max_sorted, 512))
    assert int(inp["out"].abs().sum()) == 0
    ref = m2.reference(inp)["out"]
    assert ref.shape == inp["out"].shape and ref.dtype == torch.bfloat16
    assert ref.float().abs().max() > 0.5
    if regime == "prefill":  # the host's weighted reduce of the flat rows is the token output
        full = emulate.emulate_gemm2(inp["inter"], inp["inter_scale"], inp["w2_shuf"], inp["w2_scale_shuf"],
                                     inp["sorting"], "nonatomic")
        torch.testing.assert_close(host.scatter_reduce(ref, inp["sorting"]), full["out"])


# --------------------------------------------------------------------------- compiled kernels


def _dma(art):
    """LDS-DMA instructions (``buffer_load_dword* ... lds``)."""
    return sum(1 for i in isa.parse(art.isa)[0].instructions
               if i.opcode.startswith("buffer_load") and "lds" in i.modifiers)


def test_every_ladder_variant_has_the_seeds_lds_staged_structure(small_ladder):
    regime, shape, arts = small_ladder
    mc = shape["block_m"] // 16
    for name, art in arts.items():
        met = metrics.kernel_metrics(art.isa)
        mfmas = re.findall(r"v_mfma_scale_f32_16x16x128_f8f6f4 .*", art.isa)
        assert all("cbsz:4" in x and "blgp:4" in x for x in mfmas), name
        assert art.resources["scratch_bytes"] == 0, name
        assert met["lds_bytes"] == 16384, name  # decode: the f32 epilogue tile; prefill: one 16 KiB A slot
        hist = met["opcode_histogram"]
        if regime == "decode":
            # One tile per workgroup, K = 256: one K tile of 2 x 4 MFMAs, no loop; A through LDS (one DMA
            # per loading wave), two ds_read_b128, the LDS round trip of the epilogue, 8 packed-bf16 atomics.
            assert len(mfmas) == met["mfma"] == 8 and met["loop_mfma"] is None, name
            assert _dma(art) == 1 and hist.get("ds_read_b128") == 2 and hist.get("ds_read_b64") == 8, name
            assert hist.get("ds_write2_b32") == 8, name
            assert met["s_barrier"] == 3, name  # K-tile fence + the epilogue's two
            assert hist.get("global_atomic_pk_add_bf16") == 8, name
        else:
            # The persistent grid: the first tile peeled, then a loop whose body is one whole tile.
            assert len(mfmas) == met["mfma"] == 2 * 8 * mc and met["loop_mfma"] == 8 * mc, name
            assert _dma(art) == 2 * 4 and hist.get("ds_read_b128") == 2 * 2 * mc, name
            assert met["s_barrier"] == 3, name  # the fence of each copy + the loop-top LDS reuse barrier
            assert hist.get("global_store_short") == 2 * 16 * mc, name  # one bf16 per store
        assert sum(1 for i in isa.parse(art.isa)[0].instructions
                   if i.operands and i.operands[0] == "m0" and i.opcode.startswith("s_")) >= 1, name


def test_kernel_args_match_the_compiled_metadata(small_ladder):
    regime, shape, arts = small_ladder
    inp = m2.make_inputs(**shape)
    for name in ("moe2-v0", "moe2-v1"):
        entries = m2.kernel_args(inp, **_on(name))
        # (the emulator fills the implicit arguments the prefill grid-stride loop reads)
        meta = [a for a in common.metadata_args(arts[name].isa) if not a["value_kind"].startswith("hidden_")]
        assert [(e["offset"], e["size"]) for e in entries] == [(a["offset"], a["size"]) for a in meta], name
    assert len(m2.kernel_args(inp, **_on("moe2-v1"))) == len(m2.ARG_NAMES)
    with pytest.raises(ValueError, match="True/False"):
        m2.kernel_args(inp, int64_abi="yes")


def test_int64_abi_shrinks_the_kernargs_and_their_loads(small_ladder):
    regime, _, arts = small_ladder
    v0, v1 = arts["moe2-v0"], arts["moe2-v1"]
    assert v1.resources["kernarg_bytes"] < v0.resources["kernarg_bytes"]
    # 9 addresses + tokens; the prefill grid-stride loop reads the grid size from the implicit arguments.
    assert v1.resources["kernarg_bytes"] == (8 * 9 + 4 if regime == "decode" else 80 + 256)
    assert v0.resources["kernarg_bytes"] == (144 if regime == "decode" else 400)  # 16 bytes per 1-D tensor
    assert _count(v1, "s_load") < _count(v0, "s_load")
    assert _count(v1, "s_load") <= 6


def test_unsigned_div_drops_the_sign_corrections(small_ladder):
    regime, _, arts = small_ladder
    v1, v2 = arts["moe2-v1"], arts["moe2-v2"]
    signs = [_count(a, "s_ashr_i32", "v_ashrrev_i32") for a in (v1, v2)]
    # Small shape: decode 9 -> 4 (the rest: sign-extended 32-bit atomic offsets, as in the seed), prefill
    # 36 -> 24 (the rest: the per-element sign extensions that epilogue_strength_reduction removes).
    assert signs == ([9, 4] if regime == "decode" else [36, 24])
    assert _count(arts["moe2-v4"], "s_ashr_i32", "v_ashrrev_i32") == (4 if regime == "decode" else 0)
    assert metrics.kernel_metrics(v2.isa)["instructions"] < metrics.kernel_metrics(v1.isa)["instructions"]


def _asm_barriers(art):
    return sum(1 for i in isa.parse(art.isa)[0].instructions if i.opcode == "s_barrier" and i.in_asm_block)


def test_backend_waitcnt_replaces_the_non_atomic_fence(small_ladder):
    regime, _, arts = small_ladder
    v2, v3 = metrics.kernel_metrics(arts["moe2-v2"].isa), metrics.kernel_metrics(arts["moe2-v3"].isa)
    if regime == "decode":
        # The atomic path keeps the seed's hand-counted fence in both PR sides: the same kernel.
        assert arts["moe2-v2"].isa.split(".amdgpu_metadata")[0] == arts["moe2-v3"].isa.split(".amdgpu_metadata")[0]
        assert _asm_waits(arts["moe2-v3"]) == _asm_barriers(arts["moe2-v3"]) == 1
        assert "s_waitcnt vmcnt(11)" in arts["moe2-v3"].isa  # 1 K tile: 1 + 2 scale words + 8 W2 loads after it
        return
    # Prefill: 's_waitcnt vmcnt(N) lgkmcnt(0)' + a bare s_barrier per K tile (peeled tile + loop body) ...
    assert _asm_waits(arts["moe2-v2"]) == _asm_barriers(arts["moe2-v2"]) == 2
    assert re.search(r"s_waitcnt vmcnt\(14\) lgkmcnt\(0\)", arts["moe2-v2"].isa)  # 16 capped: 14 loads follow
    # ... becomes a plain barrier with LLVM's own waits.
    assert _asm_waits(arts["moe2-v3"]) == _asm_barriers(arts["moe2-v3"]) == 0
    assert v3["s_barrier"] == v2["s_barrier"] and v3["mfma"] == v2["mfma"]
    assert v3["s_waitcnt"] < v2["s_waitcnt"]


def test_epilogue_strength_reduction_shrinks_the_non_atomic_epilogue(small_ladder):
    regime, _, arts = small_ladder
    v3, v4 = (metrics.kernel_metrics(arts[n].isa) for n in ("moe2-v3", "moe2-v4"))
    if regime == "decode":  # the atomic epilogue's offsets are 32-bit in both PR sides: the same kernel
        assert arts["moe2-v3"].isa.split(".amdgpu_metadata")[0] == arts["moe2-v4"].isa.split(".amdgpu_metadata")[0]
        return
    assert _epilogue_instructions(arts["moe2-v4"]) < _epilogue_instructions(arts["moe2-v3"])
    assert v4["instructions"] < v3["instructions"] and v4["loop_instructions"] < v3["loop_instructions"]
    assert _count(arts["moe2-v3"], "v_ashrrev_i32") > 0 == _count(arts["moe2-v4"], "v_ashrrev_i32")


@pytest.mark.slow
@pytest.mark.parametrize("regime", sorted(SMALL_CASES))
def test_leave_one_out_variants_lose_their_switch_effect(regime):
    shape = _shape(SMALL, SMALL_CASES[regime])
    arts = _compile(shape, ["moe2-v4"] + LOO)
    full = arts["moe2-v4"]
    assert arts["moe2-v4-no-int64_abi"].resources["kernarg_bytes"] > full.resources["kernarg_bytes"]
    assert _count(arts["moe2-v4-no-unsigned_div"], "s_ashr_i32", "v_ashrrev_i32") > _count(
        full, "s_ashr_i32", "v_ashrrev_i32")
    if regime == "prefill":
        assert _asm_waits(arts["moe2-v4-no-backend_waitcnt"]) == 2 and _asm_waits(full) == 0
        assert metrics.kernel_metrics(arts["moe2-v4-no-epilogue_strength_reduction"].isa)["instructions"] > metrics.kernel_metrics(
            full.isa)["instructions"]


@pytest.mark.slow
@pytest.mark.parametrize("regime", sorted(KIMI_CASES))
def test_kimi_shape_compiles_and_each_switch_moves_its_metric(regime):
    shape = _shape(KIMI, KIMI_CASES[regime])
    arts = _compile(shape, LADDER)
    met = {n: metrics.kernel_metrics(a.isa) for n, a in arts.items()}
    for n in LADDER:  # the seed's MFMA counts: 16 at decode (no loop), 256 at prefill (128 in the tile loop)
        assert met[n]["mfma"] == (16 if regime == "decode" else 256)
        assert met[n]["loop_mfma"] == (None if regime == "decode" else 128)
        assert met[n]["lds_bytes"] == (16384 if regime == "decode" else 32768)
    assert arts["moe2-v1"].resources["kernarg_bytes"] < arts["moe2-v0"].resources["kernarg_bytes"]
    assert _count(arts["moe2-v1"], "s_load") < _count(arts["moe2-v0"], "s_load")
    # 28 column blocks: the block split is a signed -> unsigned high multiply.
    assert _count(arts["moe2-v1"], "s_mul_hi_i32") >= 1 and _count(arts["moe2-v2"], "s_mul_hi_i32") == 0
    assert _count(arts["moe2-v2"], "s_mul_hi_u32") >= 1
    assert _count(arts["moe2-v2"], "s_ashr_i32", "v_ashrrev_i32") < _count(arts["moe2-v1"], "s_ashr_i32",
                                                                           "v_ashrrev_i32")
    if regime == "prefill":
        assert met["moe2-v3"]["loop_s_waitcnt"] < met["moe2-v2"]["loop_s_waitcnt"]
        # N_OUT 7168: one 64-bit row product per lane (per tile copy) instead of one per stored row.
        assert _count(arts["moe2-v3"], "v_mad_i64_i32", "v_mad_u64_u32") == 64
        assert _count(arts["moe2-v4"], "v_mad_i64_i32", "v_mad_u64_u32") == 2


# --------------------------------------------------------------------------- emulator


@functools.lru_cache(maxsize=None)
def _inputs(shape_items, seed):
    """Inputs and reference of one shape, built once per test session (the output is copied per run)."""
    inp = m2.make_inputs(**dict(shape_items), seed=seed)
    return inp, m2.reference(inp)["out"]


def _run_emulator(shape, name, seed=0):
    gfx950emu = pytest.importorskip("gfx950emu")
    from mxfp4_ablation import runner

    art = toolchain.compile(TARGET, {**shape, "variant_name": name})
    cached, ref = _inputs(tuple(sorted(shape.items())), seed)
    inp = dict(cached, out=torch.zeros_like(cached["out"]))
    grid, block = m2.launch_config(**shape)
    run = gfx950emu.launch(gfx950emu.load(art.isa), grid=grid, block=block, hazards="report",
                           args=runner.emulator_args(m2.kernel_args(inp, **_on(name))))
    return inp[m2.OUTPUTS[0].name], ref, run


@pytest.mark.parametrize("name", ["moe2-v0", "moe2-v4"])
@pytest.mark.parametrize("regime", sorted(SMALL_CASES))
def test_emulator_matches_the_host_emulation_bit_for_bit(regime, name):
    out, ref, run = _run_emulator(_shape(SMALL, SMALL_CASES[regime]), name)
    assert len(run.hazards) == 0, [str(h) for h in run.hazards[:3]]
    assert ref.float().abs().max() > 0.5
    assert torch.equal(out, ref)


@pytest.mark.parametrize("name", ["moe2-v0", "moe2-v4"])
@pytest.mark.parametrize("regime", sorted(SMALL_CASES))
def test_emulator_two_k_tiles_like_kimi(regime, name):
    """inter 512 (Kimi's): two LDS slots, two fences (decode: the hand-counted vmcnt(23) then (22))."""
    out, ref, run = _run_emulator(_shape(dict(SMALL, inter=512), SMALL_CASES[regime]), name, seed=3)
    assert len(run.hazards) == 0
    assert torch.equal(out, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["moe2-v1", "moe2-v2", "moe2-v3"] + LOO)
@pytest.mark.parametrize("case", [(16, 16), (200, 128), (200, 16), (16, 128)])
def test_emulator_all_variants_both_regimes(case, name):
    out, ref, run = _run_emulator(_shape(SMALL, case), name, seed=2)
    assert len(run.hazards) == 0
    assert torch.equal(out, ref)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["moe2-v0", "moe2-v4"])
def test_emulator_persistent_prefill_grid_walks_every_tile(name):
    """1064 tiles (38 row blocks x 28 column blocks) on the 256-workgroup persistent grid: the peeled
    first tile and three or four trips of the tile loop per workgroup (LDS slots reused across tiles)."""
    shape = dict(experts=8, hidden=7168, inter=256, topk=2, tokens=1900, block_m=128)
    assert m2.launch_config(**shape)[0] == (256, 1, 1) and m2.Geometry(**shape).tiles == 1064
    out, ref, run = _run_emulator(shape, name)
    assert len(run.hazards) == 0
    assert torch.equal(out, ref)
