"""MoE gemm1 (gate/up + silu*mul + MXFP4 requant): variants, ISA effect of each switch, and
byte-exact results in the gfx950 emulator against ``moe.emulate.emulate_gemm1``.

The fast subset compiles two variants at the small decode shape (disk-cached after the
first run); the ladder at every small shape, the Kimi-K2.5 shape and most emulator runs
are ``slow``.
"""

import pytest
import torch

from mxfp4_ablation import family, isa, metrics, toolchain
from mxfp4_ablation.kernels import moe_gemm1 as K

F = family.get("moe1")

TARGET = "mxfp4_ablation.kernels.moe_gemm1:compile_entry"
SMALL = dict(experts=8, hidden=512, inter=256, topk=2)
KIMI = dict(experts=385, hidden=7168, inter=512, topk=9)
ALL_VARIANTS = F.ladder + F.leave_one_out()


def _compile(shape, switches, block_m=None):
    params = dict(shape, **{s: True for s in sorted(switches)})
    if block_m is not None:
        params["block_m"] = block_m
    return toolchain.compile(TARGET, params)


def _metrics(shape, switches, block_m=None):
    return metrics.moe_metrics(_compile(shape, switches, block_m))


def _emulate(shape, switches, block_m=None, seed=0):
    """Run one variant in gfx950emu; returns (inputs after the run, hazard count)."""
    gfx950emu = pytest.importorskip("gfx950emu")
    from mxfp4_ablation import runner

    art = _compile(shape, switches, block_m)
    inputs = K.make_inputs(**shape, seed=seed, block_m=block_m)
    grid, block = K.launch_config(**shape, block_m=block_m)
    entries = K.kernel_args(inputs, **{s: True for s in switches})
    res = gfx950emu.launch(gfx950emu.load(art.isa), grid=grid, block=block, args=runner.emulator_args(entries),
                           hazards="report")
    return inputs, len(res.hazards)


def _assert_byte_exact(inputs):
    want = K.reference(inputs)
    want_q, want_s = want["inter_quant"], want["inter_scale"]
    real = inputs["sorting"].valid_row_mask()
    assert float((want_q[real] != 0).float().mean()) > 0.5  # the check is not vacuous
    assert torch.equal(inputs["inter_quant"], want_q), int((inputs["inter_quant"] != want_q).sum())
    assert torch.equal(inputs["inter_scale"], want_s), int((inputs["inter_scale"] != want_s).sum())


# --------------------------------------------------------------------------- variants as data


def test_ladder_and_leave_one_out_are_cumulative_and_named():
    assert [n for n, _ in F.ladder] == ["moe1-v0", "moe1-v1", "moe1-v2"]
    assert [sorted(s) for _, s in F.ladder] == [[], ["int64_abi"], ["exp2", "int64_abi"]]
    assert dict(F.leave_one_out()) == {"moe1-v2-no-int64_abi": frozenset({"exp2"}),
                                      "moe1-v2-no-exp2": frozenset({"int64_abi"})}
    assert F.switch_set("moe1-v1") == frozenset({"int64_abi"})
    assert K.SHAPE_PARAMS == ("tokens", "experts", "hidden", "inter", "topk")
    for switch in K.SWITCHES.values():
        assert "Seed claim" in switch.doc and "Metric" in switch.doc


def test_registry_sees_the_family():
    from mxfp4_ablation import variants

    v = variants.get("moe1-v2-no-exp2")
    assert v.family == "moe1" and v.predecessor == "moe1-v2" and v.kind == "leave-one-out"
    assert v.params((16, 8, 512, 256, 2)) == dict(tokens=16, **SMALL, int64_abi=True)


@pytest.mark.parametrize("bad", [
    dict(tokens=0), dict(hidden=500), dict(inter=192), dict(topk=9), dict(tokens=1 << 24), dict(block_m=32),
    dict(tokens=True),
])
def test_bad_shapes_are_one_value_error(bad):
    shape = dict(tokens=16, **SMALL)
    shape.update(bad)
    with pytest.raises(ValueError):
        K.check_shape(**shape)
    with pytest.raises(ValueError):
        K.compile_entry(**shape)


def test_bad_switches_and_inputs_are_value_errors():
    with pytest.raises(ValueError, match="unknown moe1 switch"):
        K.compile_entry(tokens=16, **SMALL, agpr_acc=True)
    with pytest.raises(ValueError, match="True/False"):
        K.build(16, **SMALL, exp2=1)
    with pytest.raises(ValueError, match="unknown moe1 variant"):
        F.switch_set("moe1-v9")
    with pytest.raises(ValueError, match="make_inputs"):
        K.kernel_args({"a_quant": torch.zeros(1)})
    with pytest.raises(ValueError, match="unknown moe1 switch"):
        K.kernel_args(K.make_inputs(tokens=16, **SMALL), wide=True)


def test_regime_and_grid():
    assert K.default_block_m(16) == 16 and K.default_block_m(4096) == 128
    grid, block = K.launch_config(tokens=16, **SMALL)
    assert block == (256, 1, 1)
    from mxfp4_ablation.moe.host import max_sorted_rows

    rows = max_sorted_rows(16, SMALL["topk"], SMALL["experts"], 16)
    assert grid == (rows // 16 * (SMALL["inter"] // 128), 1, 1)  # 1-D, the intermediate tile fastest
    inputs = K.make_inputs(tokens=200, **SMALL, block_m=128)
    assert inputs["sorting"].block_m == 128 and inputs["inter_quant"].shape == (inputs["sorting"].max_sorted, 128)


def test_lds_layout_is_the_seeds_union():
    # Kimi: 7 KiB of A scales + 6 KiB of A stages under the 16 KiB f32 epilogue tile (BM16); 28 + 48 KiB
    # under 128 KiB (BM128).
    decode, prefill = (K.Geometry(tokens=16, **KIMI, block_m=bm) for bm in (16, 128))
    assert decode.lds_bytes == 16384 and decode.scale_bytes == 7168
    assert prefill.lds_bytes == 131072 and prefill.a_bytes == 3 * 16384
    with pytest.raises(ValueError, match="LDS"):
        K.check_shape(tokens=16, experts=8, hidden=65536, inter=256, topk=2, block_m=128)


def test_inline_quant_rule_and_decode_inputs():
    from mxfp4_ablation import formats
    from mxfp4_ablation.moe import host

    # amax 1.0 (bf16 0x3F80): exponent 127 - 2 -> scale 2**-2, 1.0 -> 4.0 (code 6); 1.75 rounds the exponent
    # up (mantissa >= 0.75): scale 2**-1, 1.75 -> 3.5, a tie -> 4.0 (even code 6); 1.5 does not: 1.5 / 0.25 = 6.
    assert host.inline_e8m0(torch.tensor([0x3F80, 0x3FE0, 0x3FC0, 0])).tolist() == [125, 126, 125, 0]
    x = torch.zeros(3, 32, dtype=torch.bfloat16)
    x[0, 0], x[1, 0], x[2, 0], x[2, 1] = 1.0, -1.75, 1.5, 0.3
    q, sc = host.quantize_activations_inline(x)
    codes = formats.unpack_fp4(q)
    assert sc[:, 0].tolist() == [125, 126, 125]
    assert codes[0, 0] == 6 and codes[1, 0] == 0x8 | 6 and codes[2, 0] == 7 and codes[2, 1] == 2  # 0.3/.25=1.2 -> 1
    with pytest.raises(ValueError, match="NaN or Inf"):
        host.quantize_activations_inline(torch.full((1, 32), float("inf")))
    # block_m 16: A is the kernel's own quantisation of the bf16 hidden states (the seed's inline rule)
    dec = K.make_inputs(tokens=16, **SMALL)
    want_q, want_s = host.quantize_activations_inline(dec["hidden_states"])
    assert torch.equal(dec["a_quant"], want_q)
    assert torch.equal(dec["a_scale"], host.sort_shuffle_scales(want_s, dec["sorting"]))
    pre = K.make_inputs(tokens=200, **SMALL, block_m=128)  # prefill: the MoE-rule MXFP4 of the same kind of data
    moe_q, _ = host.quantize_activations(pre["hidden_states"])
    assert torch.equal(pre["a_quant"], moe_q)


# --------------------------------------------------------------------------- fast: v0 vs v2, both regimes


@pytest.fixture(scope="module")
def small_pair():
    shape = dict(tokens=16, **SMALL)
    return {name: _compile(shape, sw) for name, sw in (F.ladder[0], F.ladder[-1])}


@pytest.fixture(scope="module")
def small_prefill():
    return _compile(dict(tokens=200, **SMALL), F.ladder[-1][1], 128)


def _structure(art):
    m = metrics.kernel_metrics(art.isa)
    fp = metrics.fingerprint(art.isa)
    return m, fp, m["opcode_histogram"]


def test_decode_block_stages_an_inline_quantised_a_through_lds(small_pair):
    kt = SMALL["hidden"] // 256
    for art in small_pair.values():
        m, fp, hist = _structure(art)
        assert m["lds_bytes"] == 16384 and m["scratch_bytes"] == 0
        assert not isa.loops(isa.parse(art.isa)[0]) and m["loop_mfma"] is None  # K fully unrolled
        assert m["mfma"] == 8 * kt and m["s_barrier"] == kt + 2  # one per K tile + two around the epilogue
        # the in-kernel quant: per tile 2 x 8 bf16 per lane -> 2 x 4 pk_fp4_bf16, 3 pk_max_u16 each, 2 DPP
        # maxes each; its fp4 and scale dwords are ds_written, nothing is DMA'd (no m0)
        assert hist["v_cvt_scalef32_pk_fp4_bf16"] == 8 * kt and hist["v_pk_max_u16"] == 6 * kt
        assert fp["m0_writes"] == 0 and not any(op.startswith("v_permlane") for op in hist)
        assert fp["ds_read"] == 3 * kt + 4  # per tile 2 A fragments + 1 scale dword; epilogue 4 x b128
        assert hist["v_cvt_scalef32_pk_fp4_f32"] == 4 and hist["v_exp_f32_e32"] == 8
        assert fp["global_store"] == 2 and fp["buffer_store"] == 0  # one dword of 8 fp4 + one scale byte


def test_prefill_block_dmas_a_and_its_scales_into_lds(small_prefill):
    kt = SMALL["hidden"] // 256
    m, fp, hist = _structure(small_prefill)
    assert m["lds_bytes"] == 131072 and m["scratch_bytes"] == 0
    assert not isa.loops(isa.parse(small_prefill.isa)[0])
    assert m["mfma"] == 8 * 8 * kt and m["s_barrier"] == kt + 2
    lds_dma = sum(c for op, c in hist.items() if op.startswith("buffer_load")) - 8 * kt - 2 * kt  # minus W loads
    # A: 4 dwordx4 DMAs per wave per tile; scales: 512 bytes per 32-row chunk = one dword DMA (2 waves) x 4
    assert lds_dma == fp["m0_writes"] == 4 * kt + 4
    assert "v_cvt_scalef32_pk_fp4_bf16" not in hist and "v_pk_max_u16" not in hist
    assert fp["global_store"] == 12 and hist["global_store_short"] == 4  # 8 rows x dword + 4 scale pairs
    assert fp["ds_write"] == 4 * 4 * 8 - 32 and hist["ds_write2_b32"] == 32  # the f32 tile: 128 per lane


def test_kernel_args_match_the_compiled_metadata(small_pair):
    inputs = K.make_inputs(tokens=16, **SMALL)
    for name, art in small_pair.items():
        entries = K.kernel_args(inputs, **{s: True for s in F.switch_set(name)})
        from mxfp4_ablation.kernels import common  # FlyDSL

        meta = common.metadata_args(art.isa)
        meta = [a for a in meta if not a["value_kind"].startswith("hidden_")]
        assert [(e["offset"], e["size"]) for e in entries] == [(a["offset"], a["size"]) for a in meta], name


def test_one_packer_places_every_kernarg_by_its_type_whatever_the_order():
    """Both kernels' kernargs come from one packer (``BufferABI`` -> ``common.kernarg_entries``): each entry
    at the next multiple of its alignment, so an i32 between two addresses pads the next one to 8 (gemm1's
    order) and an i32 last pads nothing (gemm2's)."""
    from mxfp4_ablation.kernels.moe_common import BufferABI

    t = torch.zeros(2, 4, dtype=torch.uint8)
    inputs = {"a": t, "n": 5, "b": t}
    place = lambda names, on: [(e["name"], e["offset"], e["size"], e["kind"])  # noqa: E731
                               for e in BufferABI(names, on).kernel_args(inputs)]
    assert place(("a", "n", "b"), True) == [("a", 0, 8, "global_buffer"), ("n", 8, 4, "by_value"),
                                            ("b", 16, 8, "global_buffer")]
    assert place(("a", "b", "n"), True) == [("a", 0, 8, "global_buffer"), ("b", 8, 8, "global_buffer"),
                                            ("n", 16, 4, "by_value")]
    # descriptor ABI: every buffer flattened 1-D, a pointer and a one-i32 layout block (its length)
    assert place(("a", "n", "b"), False) == [
        ("a", 0, 8, "global_buffer"), ("a.layout", 8, 4, "by_value"), ("n", 12, 4, "by_value"),
        ("b", 16, 8, "global_buffer"), ("b.layout", 24, 4, "by_value")]
    assert BufferABI(("a", "n"), True).compile_args(inputs) == (0, 5)
    flat, n = BufferABI(("a", "n"), False).device_args(inputs)
    assert flat.shape == (8,) and flat.data_ptr() == t.data_ptr() and n == 5


def test_int64_abi_shrinks_the_kernargs_and_their_scalar_loads(small_pair):
    off, on = (metrics.moe_metrics(small_pair[n]) for n in ("moe1-v0", "moe1-v2"))
    assert (off["kernarg_bytes"], off["kernarg_entries"]) == (156, 21)  # 10 x (pointer + i32 length) + tokens
    assert (on["kernarg_bytes"], on["kernarg_entries"]) == (88, 11)  # the seed's 88
    assert (off["s_load"], on["s_load"]) == (11, 7)


def test_exp2_leaves_a_bare_v_exp_in_the_epilogue(small_pair):
    off, on = (metrics.moe_metrics(small_pair[n]) for n in ("moe1-v0", "moe1-v2"))
    assert on["epi_v_exp_f32"] == off["epi_v_exp_f32"] > 0
    assert off["epi_v_ldexp_f32"] == off["epi_v_exp_f32"] and on["epi_v_ldexp_f32"] == 0
    assert on["epi_v_cndmask"] == on["epi_v_cmp"] == 0 < off["epi_v_cndmask"]
    assert off["epi_valu"] - on["epi_valu"] >= 7 * off["epi_v_exp_f32"]  # ~7 VALU per element go


def test_decode_block_is_byte_exact_in_the_emulator(small_pair):
    inputs, hazards = _emulate(dict(tokens=16, **SMALL), F.ladder[-1][1])
    assert hazards == 0
    _assert_byte_exact(inputs)


def test_prefill_block_is_byte_exact_in_the_emulator(small_prefill):
    inputs, hazards = _emulate(dict(tokens=200, **SMALL), F.ladder[-1][1], 128)
    assert hazards == 0
    _assert_byte_exact(inputs)


# --------------------------------------------------------------------------- slow: the whole ladder


def _neighbour_pairs():
    """(switch, variant without it, variant with it): ladder steps and leave-one-out."""
    pairs = [(sorted(b - a)[0], a, b) for (_, a), (_, b) in zip(F.ladder, F.ladder[1:])]
    full = F.ladder[-1][1]
    pairs += [(sorted(full - s)[0], s, full) for _, s in F.leave_one_out()]
    return pairs


def _assert_switch_moves(switch, off, on):
    if switch == "int64_abi":
        assert on["kernarg_bytes"] < off["kernarg_bytes"] and on["s_load"] < off["s_load"]
        assert on["epi_v_ldexp_f32"] == off["epi_v_ldexp_f32"]
    else:
        assert on["epi_v_exp_f32"] == off["epi_v_exp_f32"] > 0 and on["epi_v_ldexp_f32"] == 0 < off["epi_v_ldexp_f32"]
        assert on["epi_v_cndmask"] < off["epi_v_cndmask"] and on["epi_v_cmp"] < off["epi_v_cmp"]
        assert on["epi_valu"] < off["epi_valu"]
        assert on["kernarg_bytes"] == off["kernarg_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("tokens,block_m", [(16, None), (200, None), (200, 128)])
def test_each_switch_moves_its_metric_at_the_small_shape(tokens, block_m):
    shape = dict(tokens=tokens, **SMALL)
    for switch, a, b in _neighbour_pairs():
        _assert_switch_moves(switch, _metrics(shape, a, block_m), _metrics(shape, b, block_m))


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [16, 4096])  # decode (BM16) and prefill (BM128)
def test_every_variant_has_the_seeds_structure_at_the_kimi_shape(tokens):
    shape = dict(tokens=tokens, **KIMI)
    bm = K.default_block_m(tokens)
    for name, sw in ALL_VARIANTS:
        m = metrics.kernel_metrics(_compile(shape, sw).isa)
        assert m["scratch_bytes"] == 0, name
        # 28 K tiles unrolled: 224 / 1792 MFMAs, 30 barriers, 16 / 128 KiB of LDS, as the seed's kernels
        assert m["mfma"] == 8 * 28 * bm // 16 and m["loop_mfma"] is None, name
        assert m["s_barrier"] == 30 and m["lds_bytes"] == {16: 16384, 128: 131072}[bm], name
    for switch, a, b in _neighbour_pairs():
        _assert_switch_moves(switch, _metrics(shape, a), _metrics(shape, b))


# hidden 512: 2 K tiles (prologue + drain only), 1024: 4 (two steady steps), 4352: 17 (a dwordx4 A-scale DMA
# and a partial round; the W-scale offset past 15 tiles).
_EMU_CASES = [(name, sw, shape) for name, sw in (F.ladder[0], F.ladder[-1])
              for shape in [(200, 16, 512), (200, 128, 512), (40, 16, 1024), (40, 128, 1024)]]
_EMU_CASES += [(name, sw, (200, 16, 512)) for name, sw in F.ladder[1:-1] + F.leave_one_out()]
_EMU_CASES += [(F.ladder[-1][0], F.ladder[-1][1], (8, bm, 4352)) for bm in (16, 128)]


@pytest.mark.slow
@pytest.mark.parametrize("name,switches,case", _EMU_CASES, ids=[f"{n}-{c}" for n, _, c in _EMU_CASES])
def test_variants_are_byte_exact_in_the_emulator(name, switches, case):
    tokens, block_m, hidden = case
    shape = dict(SMALL, tokens=tokens, hidden=hidden)
    inputs, hazards = _emulate(shape, switches, block_m)
    assert hazards == 0
    _assert_byte_exact(inputs)


@pytest.mark.slow
def test_runner_verify_passes_for_the_descriptor_variant():
    from mxfp4_ablation import runner

    out = runner.verify("moe1-v0", (16, 8, 512, 256, 2))
    assert out["passed"] and out["mismatches"] == 0
