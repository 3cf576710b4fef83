"""The runner's edges: argument conversion, backend refusal, the gate's arithmetic."""

from pathlib import Path

import pytest
from mxfp4_ablation import runner, sources


def test_emulator_args_converts_entries():
    import torch

    t = torch.zeros(4, dtype=torch.uint8)
    entries = [
        {"name": "A", "kind": "global_buffer", "offset": 0, "size": 8, "tensor": t},
        {"name": "A.layout", "kind": "by_value", "offset": 8, "size": 8,
         "bytes": (4).to_bytes(4, "little") + (1).to_bytes(4, "little")},
        {"name": "M", "kind": "by_value", "offset": 16, "size": 4, "bytes": (-1).to_bytes(4, "little", signed=True)},
        7,
    ]
    args = runner.emulator_args(entries)
    assert args[0] is t and args[1] == 4 + (1 << 32) and args[2] == 0xFFFFFFFF and args[3] == 7
    with pytest.raises(ValueError, match="unknown kind"):
        runner.emulator_args([{"name": "x", "kind": "hidden_arg"}])


def test_switches_reach_functions_that_take_them():
    def plain(inputs):
        return ["plain", inputs]

    def abi(inputs, int64_abi=False, exp2=False):
        return ["abi", int64_abi, exp2]

    assert runner._call_with_switches(plain, 1, frozenset({"int64_abi"})) == ["plain", 1]
    assert runner._call_with_switches(abi, 1, frozenset({"int64_abi"})) == ["abi", True, False]
    assert runner._call_with_switches(abi, 1, frozenset()) == ["abi", False, False]


def test_unknown_backend_and_variant_are_clear():
    with pytest.raises(ValueError, match="backend 'gpu' is not one of"):
        runner.verify("gemm-v0", (256, 256, 256), backend="gpu")
    with pytest.raises(ValueError, match="unknown variant"):
        runner.verify("gemm-v99", (256, 256, 256))


def test_device_backend_refused_without_gfx950(monkeypatch):
    from mxfp4_ablation import modes

    monkeypatch.setattr(modes, "visible_gpu", lambda: modes.GPU("NVIDIA H200", "sm_90", "cuda"))
    with pytest.raises(ValueError, match=r"needs a gfx950 GPU \(MI355X\); this machine has NVIDIA H200 \(sm_90\)"):
        runner.verify("gemm-v0", (256, 256, 256), backend="device")
    monkeypatch.setattr(modes, "visible_gpu", lambda: None)
    with pytest.raises(ValueError, match="this machine has no GPU"):
        runner.verify("gemm-v0", (256, 256, 256), backend="device")


@pytest.mark.slow
def test_emulator_runs_are_reused_by_content(tmp_path, monkeypatch):
    """A second verify of the same ISA on the same bytes reads the stored outputs (issue #24) and reaches
    the same verdict; other inputs (another seed) run the emulator again."""
    monkeypatch.setattr(runner, "_emulation_cache", lambda key: tmp_path / "emulate" / key[:2] / key)
    fresh = iter(range(100))  # no verification cache here: every check reaches the emulator's
    monkeypatch.setattr(runner, "_verification_cache", lambda key: tmp_path / "verify" / f"{next(fresh)}.json")
    first = runner.verify("moe2-v0", (16, 8, 512, 256, 2, 16))
    again = runner.verify("moe2-v0", (16, 8, 512, 256, 2, 16))
    assert first["emulator_cached"] is False and again["emulator_cached"] is True
    for key in ("passed", "outputs", "hazards", "hazard_reports", "out_of_range", "buffers_sha256"):
        assert again[key] == first[key], key
    other = runner.verify("moe2-v0", (16, 8, 512, 256, 2, 16), seed=1)
    assert other["emulator_cached"] is False and other["passed"]
    monkeypatch.setenv("MXFP4_EMULATE_CACHE", "0")
    assert runner.verify("moe2-v0", (16, 8, 512, 256, 2, 16))["emulator_cached"] is False


@pytest.mark.slow
def test_a_check_whose_inputs_are_unchanged_is_read_not_rerun(tmp_path, monkeypatch):
    """A second emulator check of the same ISA, switch set, shape, seed and options, under the same code,
    is the stored result (issue #24: the summary reads the checks its sweep ran): no inputs are built;
    everything but ``emulator_cached`` is what the first check returned. Another seed or other launch
    options check again; a torn entry is a miss."""
    from mxfp4_ablation import variants

    monkeypatch.setattr(runner, "_verification_cache", lambda key: tmp_path / "verify" / f"{key}.json")
    shape = (16, 8, 512, 256, 2, 16)
    first = runner.verify("moe2-v0", shape)
    module = variants.get("moe2-v0").module
    real = module.make_inputs
    monkeypatch.setattr(module, "make_inputs", lambda **kw: pytest.fail("inputs built for a stored check"))
    again = runner.verify("moe2-v0", shape)
    assert again["emulator_cached"] is True and again["passed"]
    assert {k: v for k, v in again.items() if k != "emulator_cached"} == \
        {k: v for k, v in first.items() if k != "emulator_cached"}
    built = []
    monkeypatch.setattr(module, "make_inputs", lambda **kw: built.append(kw) or real(**kw))
    assert runner.verify("moe2-v0", shape, seed=1)["passed"]
    assert runner.verify("moe2-v0", shape, wave_order="reverse")["passed"]
    assert len(built) == 2
    for entry in (tmp_path / "verify").glob("*.json"):  # torn writes: misses, checked and stored again
        entry.write_text(entry.read_text()[:10])
    assert runner.verify("moe2-v0", shape)["passed"] and len(built) == 3
    assert runner.verify("moe2-v0", shape)["emulator_cached"] and len(built) == 3


def test_a_stored_check_is_keyed_by_the_isa_the_inputs_and_the_code():
    """The verification key changes with the ISA text, the seed, the launch options and the code of the
    runner (the comparison) and the kernel module (inputs, reference); not with the process count."""
    from mxfp4_ablation import variants

    v = variants.get("gemm-v3")
    params = v.params((256, 256, 3072))

    def key(isa="isa", seed=0, **opts):
        base = {"variant": v.name, "shape": [256, 256, 3072], "seed": seed}
        return runner._verification_key(isa, v, params, base, {"hazards": "report", "processes": 1, **opts})

    assert key() == key(processes=2)
    assert len({key(), key("other isa"), key(seed=1), key(wave_order="reverse")}) == 4
    files = {p.name for p in sources.module_closure({"mxfp4_ablation.runner", "mxfp4_ablation.kernels.gemm"})}
    assert {"runner.py", "reference.py", "formats.py", "machine.py"} <= files


def test_a_run_keyed_by_its_isa_leaves_the_kernel_builder_out_of_its_code_digest():
    """The emulator checks and timing runs key on the ISA plus the code that runs besides the kernel
    (``runner.launch_sources``): the GEMM's pipeline, stages and steps reach a run only through the ISA, so
    they are left out (an edit of a step that keeps its ISA keeps those runs) -- while the compile key of a
    variant with that step on still covers it. No run-side contract function lives in a builder file."""
    import inspect

    from mxfp4_ablation import toolchain, variants
    from mxfp4_ablation.kernels import gemm, moe_gemm1

    names = {p.relative_to(sources.SRC).as_posix() for p in runner.launch_sources(gemm)}
    assert {"mxfp4_ablation/kernels/gemm/__init__.py", "mxfp4_ablation/kernels/gemm/layout.py",
            "mxfp4_ablation/reference.py", "mxfp4_ablation/runner.py", "gfx950emu/machine.py"} <= names
    assert not {n for n in names if "/gemm/steps/0" in n or n.endswith(("gemm/kernel.py", "gemm/stages.py"))}
    builder = {Path(f).resolve() for f in gemm.builder_sources()}
    for name in ("check_shape", "make_inputs", "reference", "launch_config", "kernel_args", "device_args",
                 "flops", "bytes"):
        assert Path(inspect.getsourcefile(getattr(gemm, name))).resolve() not in builder, name
    step5 = next(f for f in builder if f.name == "05_b_carry.py")
    v5 = variants.get("gemm-v5")
    compiled = sources.module_closure({v5.target.partition(":")[0], *toolchain.COMPILE_MODULES})
    unused = {Path(f).resolve() for f in gemm.unused_sources(v5.params((256, 256, 3072)))}
    assert step5 in {f.resolve() for f in compiled} - unused
    # a family without builder_sources (its switches live beside its inputs) keeps its whole closure
    assert Path(moe_gemm1.__file__) in runner.launch_sources(moe_gemm1)
