"""The kernel-family contract: records, registration checks, ladder / leave-one-out / lookup derived once,
metric names that exist, docstrings rendered from the records, and registration without FlyDSL."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from mxfp4_ablation import family, metrics, variants
from mxfp4_ablation.errors import UsageError
from mxfp4_ablation.family import Expect, Output, Seed, Switch

SEED = Seed("ROCm/FlyDSL", 990, "741f3d6d")


def _switch(name, requires=(), expects=()):
    return Switch(name, f"{name} summary.", SEED, claim="a claim.", mechanism="a mechanism.", metric="a metric.",
                  expects=expects, requires=requires)


def _stub_module(name="stub", switches=("a", "b", "c"), requires=None, drop=()):
    """A minimal kernel module implementing KernelFamily (no FlyDSL), optionally missing members."""
    mod = types.ModuleType(f"tests_stub_{name}")
    requires = requires or {}
    mod.NAME, mod.LABEL, mod.METRICS = name, name.upper(), "gemm"
    mod.SWITCHES = family.switch_table(*[_switch(s, requires.get(s, ())) for s in switches])
    mod.SHAPE_PARAMS, mod.OPTIONAL_SHAPE_PARAMS = ("M", "N"), ()
    mod.OUTPUTS = (Output("C", "exact", why="integers"),)
    mod.check_shape = lambda M, N: {"M": M, "N": N}
    mod.make_inputs = lambda M, N, seed=0: {}
    mod.reference = lambda inputs: {}
    mod.launch_config = lambda M, N: ((1, 1, 1), (64, 1, 1))
    mod.kernel_args = lambda inputs, **switches: []
    mod.device_args = lambda inputs, **switches: ()
    mod.build = lambda M, N, **switches: None
    mod.compile_entry = lambda M, N, variant_name=None, **switches: (None, ())
    mod.flops = lambda M, N: 2.0 * M * N
    mod.bytes = lambda M, N: 4.0 * M * N
    for member in drop:
        delattr(mod, member)
    sys.modules[mod.__name__] = mod
    return mod


@pytest.fixture
def stub():
    made = []

    def make(*args, **kw):
        mod = _stub_module(*args, **kw)
        made.append(mod)
        return mod

    yield make
    for mod in made:
        family.unregister(mod.NAME)
        sys.modules.pop(mod.__name__, None)


# ---------------------------------------------------------------------------------------- records


def test_records_refuse_bad_values():
    with pytest.raises(ValueError, match="direction must be one of"):
        Expect("x", "sideways")
    with pytest.raises(ValueError, match="needs max_ulp or max_abs"):
        Output("C", "close", why="bf16")
    with pytest.raises(ValueError, match="compare must be one of"):
        Output("C", "roughly", why="bf16")
    with pytest.raises(ValueError, match="say why"):
        Output("C", "exact", why=" ")
    with pytest.raises(ValueError, match="mechanism is empty"):
        Switch("x", "s.", SEED, claim="c", mechanism="", metric="m")
    with pytest.raises(ValueError, match="requires b, which must be declared before it"):
        family.switch_table(_switch("a", requires=("b",)), _switch("b"))
    with pytest.raises(ValueError, match="declared twice"):
        family.switch_table(_switch("a"), _switch("a"))


@pytest.mark.parametrize("direction, before, after, holds", [
    ("down", 5, 3, True), ("down", 3, 3, False), ("up", 1, 2, True), ("zero", 4, 0, True), ("zero", 4, 1, False),
    ("zero", 0, 0, False),
    ("same", 2, 2, True), ("same", 2, 3, False), ("down", float("nan"), 1, False), ("up", None, 1, False),
    ("same", None, float("nan"), True), ("same", None, 1, False), ("down", None, None, False),
])
def test_expect_holds(direction, before, after, holds):
    assert Expect("m", direction).holds(before, after) is holds


def test_expect_regimes_expect_no_change_where_the_switch_does_not_act():
    e = Expect("mad_64", "down", 64, 2, regimes=("prefill",))
    assert [e.direction_in(r) for r in ("prefill", "decode", None)] == ["down", "same", "down"]
    assert Expect("m", "up").direction_in("decode") == "up"
    assert e.text() == "`mad_64` down (prefill only) (seed: 64 -> 2)"


def test_expect_text_quotes_the_seed_numbers():
    assert Expect("loop_s_waitcnt_per_4k", "down", 68, 8).text() == "`loop_s_waitcnt_per_4k` down (seed: 68 -> 8)"
    assert SEED.label == "FlyDSL PR #990, 741f3d6d" and SEED.url == "https://github.com/ROCm/FlyDSL/pull/990"


# ------------------------------------------------------------------------------------ registration


def test_every_family_registers_and_implements_the_protocol():
    fams = family.all_families()
    assert {"gemm", "moe1", "moe2"} <= set(fams)
    for fam in fams.values():
        assert isinstance(fam.module, family.KernelFamily), fam.name
        assert fam.outputs and fam.switches and fam.ladder[0] == (f"{fam.name}-v0", frozenset())


def test_a_module_missing_members_is_refused_naming_each(stub):
    mod = stub("broken", drop=("OUTPUTS", "bytes", "launch_config"))
    with pytest.raises(family.ContractError) as err:
        family.register(mod)
    msg = str(err.value)
    assert mod.__name__ in msg and "OUTPUTS is missing" in msg
    assert "launch_config() is missing" in msg and "bytes() is missing" in msg  # every problem at once
    mod.OUTPUTS = ()
    with pytest.raises(family.ContractError, match="OUTPUTS must be a non-empty tuple of Output records"):
        family.register(mod)


def test_signatures_are_checked_at_registration(stub):
    mod = stub("sig")
    mod.make_inputs = lambda M, seed=0: {}  # lacks N
    mod.kernel_args = lambda inputs: []  # takes no switches
    with pytest.raises(family.ContractError, match=r"make_inputs\(\) does not take the shape parameter\(s\) N.*"
                                                   r"kernel_args\(\) does not take the switches"):
        family.register(mod)


def test_appending_a_step_names_every_variant_from_the_last_rung(stub):
    fam = family.register(stub("toy", switches=("a", "b", "c"), requires={"c": ("a",)}))
    assert [n for n, _ in fam.ladder] == ["toy-v0", "toy-v1", "toy-v2", "toy-v3"]
    assert dict(fam.leave_one_out()) == {"toy-v3-no-b": frozenset({"a", "c"}), "toy-v3-no-c": frozenset({"a", "b"})}
    family.unregister("toy")
    fam = family.register(stub("toy", switches=("a", "b", "c", "d"), requires={"c": ("a",)}))
    assert fam.full == "toy-v4"
    assert [n for n, _ in fam.leave_one_out()] == ["toy-v4-no-b", "toy-v4-no-c", "toy-v4-no-d"]
    vs = variants.all_variants()
    assert vs["toy-v4-no-d"].predecessor == "toy-v4" and vs["toy-v4-no-d"].kind == "leave-one-out"
    assert vs["toy-v2"].predecessor == "toy-v1" and vs["toy-v2"].switch == "b"


def test_lookup_and_switch_validation_are_one_clear_error(stub):
    fam = family.register(stub("look", switches=("a", "b"), requires={"b": ("a",)}))
    assert fam.switch_set("look-v1") == {"a"}
    with pytest.raises(UsageError, match="unknown LOOK variant 'look-v9'; known: look-v0, look-v1, look-v2"):
        fam.switch_set("look-v9")
    with pytest.raises(UsageError, match="switch b depends on a"):
        fam.check_switches({"b"})
    with pytest.raises(UsageError, match="unknown LOOK switch"):
        fam.check_switches({"z"})
    with pytest.raises(UsageError, match="True/False"):
        fam.switch_kwargs({"a": 1})
    assert fam.resolve("look-v2", {}) == {"a": True, "b": True}
    with pytest.raises(UsageError, match="either variant_name or"):
        fam.resolve("look-v2", {"a": True})
    with pytest.raises(UsageError, match="takes a shape M,N; got 3 numbers"):
        fam.shape((1, 2, 3))
    with pytest.raises(UsageError, match="unknown kernel family 'nope'"):
        family.get("nope")


# ---------------------------------------------------------------------------------- records in use


SYNTHETIC_ISA = """\t.type\tk,@function
k:
\ts_load_dwordx2 s[0:1], s[4:5], 0x0
\tbuffer_load_dword v7, v8, s[0:3], 0 offen
.LBB0_1:
\tv_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]
\ts_waitcnt vmcnt(0)
\ts_cbranch_scc1 .LBB0_1
\tv_exp_f32 v1, v2
\tbuffer_store_short v0, v9, s[4:7], 0 offen
\ts_endpgm
.Lfunc_end0:
"""


def test_every_expected_metric_is_a_key_of_the_family_metric_set():
    for fam in family.all_families().values():
        keys = set(metrics.metric_set(fam.metrics)(SYNTHETIC_ISA))
        for s in fam.switches.values():
            assert s.expects, f"{fam.name}.{s.name} expects nothing"
            for e in s.expects:
                assert e.metric in keys, f"{fam.name}.{s.name}: {e.metric} is not a {fam.metrics} metric"


def test_module_docstrings_are_rendered_from_the_records():
    for fam in family.all_families().values():
        doc = fam.module.__doc__
        for s in fam.switches.values():
            assert s.name in doc and s.seed.url in doc and s.summary in doc, (fam.name, s.name)
            assert "Seed claim" in s.doc and "Mechanism" in s.doc and "Metric" in s.doc
            assert set(s.parts()) == {"summary", "seed", "mechanism", "metric"}


def test_registering_every_family_does_not_import_flydsl():
    code = ("import sys; sys.modules['flydsl'] = None\n"
            "from mxfp4_ablation import family, variants\n"
            "assert len(variants.all_variants()) == 17 + 5 + 9, len(variants.all_variants())\n"
            "for f in family.all_families().values(): f.module.check_shape(**f.shape((256, 256, 256)[:len(f.shape_params)]"
            " if f.name == 'gemm' else (16, 8, 512, 256, 2)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_flops_and_bytes_of_every_family_at_its_study_shapes():
    from mxfp4_ablation import shapes

    for fam in family.all_families().values():
        for case in shapes.cases(fam.name, "isa"):
            kw = fam.shape(case.shape)
            flops, nbytes = fam.module.flops(**kw), fam.module.bytes(**kw)
            assert flops > 0 and nbytes > 0, fam.name
            assert flops / nbytes > 1, fam.name  # every one of these kernels does more than one FLOP per byte
    # GEMM: 2MNK, and every operand byte counted once (fp4 A, B + E8M0 scales + bf16 C).
    g = family.get("gemm").module
    assert g.flops(M=8192, N=8192, K=8192) == 2 * 8192 ** 3
    assert g.bytes(M=256, N=256, K=256) == 256 * 128 * 2 + 2 * 256 * 8 + 2 * 256 * 256
