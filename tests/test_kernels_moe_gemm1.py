"""MoE gemm1 (gate/up + silu*mul + MXFP4 requant): variants, ISA effect of each switch, and
byte-exact results in the gfx950 emulator against ``moe.host.emulate_gemm1``.

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
    return metrics.moe_kernel_counts(_compile(shape, switches, block_m))


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
    rows = K.max_sorted(16, SMALL["experts"], SMALL["topk"], 16)
    assert grid == (rows // 16, SMALL["inter"] // 128, 1)
    inputs = K.make_inputs(tokens=200, **SMALL, block_m=128)
    assert inputs["sorting"].block_m == 128 and inputs["inter_quant"].shape == (inputs["sorting"].max_sorted, 128)


# --------------------------------------------------------------------------- fast: v0 vs v2 at decode


@pytest.fixture(scope="module")
def small_pair():
    shape = dict(tokens=16, **SMALL)
    return {name: _compile(shape, sw) for name, sw in (F.ladder[0], F.ladder[-1])}


def test_every_block_runs_8_mfmas_per_k_step_and_writes_fp4(small_pair):
    for art in small_pair.values():
        hist = metrics.moe_kernel_counts(art)
        m = isa.metrics(art.isa)
        assert m["mfma"] == 8 * (SMALL["hidden"] // 256)  # 4 accumulators x 2 MFMAs per 256-K step
        assert m["opcode_histogram"]["v_cvt_scalef32_pk_fp4_f32"] == 4
        assert m["buffer_store_by_width"] == {1: 1, 2: 2}
        assert m["scratch_bytes"] == 0
        assert hist["v_exp_f32"] == 8  # one per element of a lane's 2 x 4 gate values


def test_kernel_args_match_the_compiled_metadata(small_pair):
    inputs = K.make_inputs(tokens=16, **SMALL)
    for name, art in small_pair.items():
        entries = K.kernel_args(inputs, **{s: True for s in F.switch_set(name)})
        from mxfp4_ablation.kernels import common  # FlyDSL

        meta = common.metadata_args(art.isa)
        meta = [a for a in meta if not a["value_kind"].startswith("hidden_")]
        assert [(e["offset"], e["size"]) for e in entries] == [(a["offset"], a["size"]) for a in meta], name


def test_int64_abi_shrinks_the_kernargs_and_their_scalar_loads(small_pair):
    off, on = (metrics.moe_kernel_counts(small_pair[n]) for n in ("moe1-v0", "moe1-v2"))
    assert (off["kernarg_bytes"], off["kernarg_entries"]) == (208, 19)
    assert (on["kernarg_bytes"], on["kernarg_entries"]) == (76, 10)
    assert on["s_load"] < off["s_load"]


def test_exp2_leaves_a_bare_v_exp_in_the_epilogue(small_pair):
    off, on = (metrics.moe_kernel_counts(small_pair[n]) for n in ("moe1-v0", "moe1-v2"))
    assert on["v_exp_f32"] == off["v_exp_f32"] > 0
    assert off["v_ldexp_f32"] == off["v_exp_f32"] and on["v_ldexp_f32"] == 0
    assert on["v_cndmask"] < off["v_cndmask"] and on["v_cmp"] < off["v_cmp"]
    assert on["valu"] < 0.75 * off["valu"]


def test_decode_block_is_byte_exact_in_the_emulator(small_pair):
    inputs, hazards = _emulate(dict(tokens=16, **SMALL), F.ladder[-1][1])
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
        assert on["v_ldexp_f32"] == off["v_ldexp_f32"]
    else:
        assert on["v_exp_f32"] == off["v_exp_f32"] > 0 and on["v_ldexp_f32"] == 0 < off["v_ldexp_f32"]
        assert on["v_cndmask"] < off["v_cndmask"] and on["v_cmp"] < off["v_cmp"] and on["valu"] < off["valu"]
        assert on["kernarg_bytes"] == off["kernarg_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("tokens,block_m", [(16, None), (200, None), (200, 128)])
def test_each_switch_moves_its_metric_at_the_small_shape(tokens, block_m):
    shape = dict(tokens=tokens, **SMALL)
    for switch, a, b in _neighbour_pairs():
        _assert_switch_moves(switch, _metrics(shape, a, block_m), _metrics(shape, b, block_m))


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [16, 4096])  # decode (BM16) and prefill (BM128)
def test_every_variant_compiles_at_the_kimi_shape(tokens):
    shape = dict(tokens=tokens, **KIMI)
    bm = K.default_block_m(tokens)
    for name, sw in ALL_VARIANTS:
        m = isa.metrics(_compile(shape, sw).isa)
        assert m["scratch_bytes"] == 0, name
        assert m["mfma"] >= 8 * bm // 16 and m["loop_mfma"] is not None, name  # the K loop survives
    for switch, a, b in _neighbour_pairs():
        _assert_switch_moves(switch, _metrics(shape, a), _metrics(shape, b))


_EMU_CASES = [(name, sw, shape) for name, sw in (F.ladder[0], F.ladder[-1])
              for shape in [(200, 16, 512), (200, 128, 512), (40, 16, 1024), (40, 128, 1024)]]
_EMU_CASES += [(name, sw, (200, 16, 512)) for name, sw in F.ladder[1:-1] + F.leave_one_out()]


@pytest.mark.slow
@pytest.mark.parametrize("name,switches,case", _EMU_CASES, ids=[f"{n}-{c}" for n, _, c in _EMU_CASES])
def test_variants_are_byte_exact_in_the_emulator(name, switches, case):
    tokens, block_m, hidden = case  # hidden 1024: the K loop really runs (4 K steps)
    shape = dict(SMALL, tokens=tokens, hidden=hidden)
    inputs, hazards = _emulate(shape, switches, block_m)
    assert hazards == 0
    _assert_byte_exact(inputs)


@pytest.mark.slow
def test_runner_verify_passes_for_the_descriptor_variant():
    from mxfp4_ablation import runner

    out = runner.verify("moe1-v0", (16, 8, 512, 256, 2))
    assert out["passed"] and out["mismatches"] == 0
