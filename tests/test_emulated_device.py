"""--backend emulated-device: every variant through the device path (the kernel module's ``build`` +
``device_args`` + FlyDSL's own JIT launcher, libfly_jit_runtime.so on the gfx950emu HIP shim) gives
the bytes the ``--backend emulator`` path gives -- every buffer of the launch, not only the output --
with no hazards, one launch of the expected grid, at the small gate shapes.

Needs FlyDSL, a C compiler (the shim) and gfx950 LLVM tools (the code-object loader); skips with the
reason where one is missing.
"""
import pytest

from mxfp4_ablation import runner, toolchain, variants

ALL = variants.all_variants()
SHAPES = {"gemm": (256, 256, 1536), "moe1": (16, 8, 512, 256, 2), "moe2": (200, 8, 512, 256, 2, 128)}


def _require_stack():
    pytest.importorskip("flydsl")
    from gfx950emu import codeobject
    from gfx950emu.hip import shim as build

    try:
        codeobject.find_llvm_tools()
    except codeobject.CodeObjectError as err:
        pytest.skip(f"no gfx950 LLVM tools (apt-get install llvm-22): {err}")
    if not build.library_path().is_file():
        try:
            build.find_compiler()
        except build.ShimBuildError as err:
            pytest.skip(str(err))
    try:
        toolchain.find_linker()
    except toolchain.ToolchainError as err:
        pytest.skip(str(err))


def _setup(name):
    variant = variants.get(name)
    shape = SHAPES[variant.family]
    return variant, variant.params(shape), variant.module, variant.shape(shape)


def _bytes(t):
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("name", list(ALL))
def test_emulated_device_equals_the_emulator_bit_for_bit(name):
    _require_stack()
    import gfx950emu
    import torch

    from mxfp4_ablation import emulated_device

    variant, params, module, shape_args = _setup(name)
    # --backend emulator
    emu_inputs = module.make_inputs(**shape_args, seed=1)
    art = toolchain.compile(variant.target, params)
    grid, block = module.launch_config(**shape_args)
    gfx950emu.launch(gfx950emu.load(art.isa), grid=grid, block=block, hazards="report",
                     args=runner._call_with_switches(module.kernel_args, emu_inputs, variant.switches))
    # --backend emulated-device
    dev_inputs = module.make_inputs(**shape_args, seed=1)
    run = emulated_device.run(lambda: module.build(**params), dev_inputs,
                              lambda on_dev: runner._call_with_switches(module.device_args, on_dev, variant.switches))
    assert run["hazards"] == 0, run["hazard_reports"]
    assert len(run["launches"]) == 1
    launch = run["launches"][0]
    assert (tuple(launch["grid"]), tuple(launch["block"])) == (tuple(grid), tuple(block))
    assert launch["clock"] == "zero"
    out = run["inputs"]
    tensors = [k for k, v in emu_inputs.items() if isinstance(v, torch.Tensor)]
    outputs = [o.name for o in variant.spec.outputs]
    assert outputs and set(outputs) <= set(tensors)
    for key in tensors:
        assert torch.equal(_bytes(out[key]), _bytes(emu_inputs[key])), f"{name}: {key} differs"
    assert _bytes(out[outputs[0]]).any()               # the kernel did write its output


def test_verify_cli_path_passes_on_the_emulated_device():
    _require_stack()
    result = runner.verify("gemm-v7", SHAPES["gemm"], backend="emulated-device", seed=3)
    assert result["passed"] and result["hazards"] == 0 and result["backend"] == "emulated-device"
    assert result["launches"][0]["kernel"].startswith("mxfp4_gemm")
    calls = result["hip_calls"]       # FlyDSL's own launch path: its module load, lookup and launch
    assert calls["hipModuleLaunchKernel"] == 1 and calls["hipModuleGetFunction"] >= 1
    assert calls["hipMalloc"] == calls["hipFree"] and calls["hipMemcpy"] == 2 * calls["hipMalloc"]


def test_unknown_backend_is_one_clear_error():
    from mxfp4_ablation.errors import UsageError

    with pytest.raises(UsageError, match="emulated-device"):
        runner.verify("gemm-v7", SHAPES["gemm"], backend="emulated")


def test_bench_harness_device_plumbing_through_the_emulated_device():
    """The harness's own device path -- launcher_for -> kernel_case (FlyDSL build, input sets moved to
    the device, launches on a stream), events and graph capture/replay, rotation sets -- on the
    emulated device.  Its clock counts launches (1 us each): every "time" here is a launch count,
    not a measurement, and the provenance says mode=emulated, clock=launch-count.  Arm B (moe1-v2) passes
    data_ptr() integers (int64_abi): its input sets' tensors must stay alive for the whole run."""
    _require_stack()
    from gfx950emu import hip

    from mxfp4_ablation.bench import abtest, inputs, launchers

    shape = (1, 8, 512, 256, 2)                            # one token: two experts' blocks
    comp = abtest.Comparison(name="v0_vs_v2", a=launchers.launcher_for("moe1-v0", shape),
                             b=launchers.launcher_for("moe1-v2", shape))
    settings = abtest.HarnessSettings(pairs=3, launches=1, warmup=1, warmup_pairs=0, methods=("events", "graph"),
                                      processes=1, fresh_processes=False, backend="emulated", cache_bytes=200_000,
                                      progress=False)
    res = abtest.run_comparisons([comp], settings, mode="emulated")
    dev = hip.device()
    trials = res.trials
    assert len(trials) == 2 * 2 * 3                        # methods x arms x pairs
    # launch-count clock: each timed window holds exactly `launches` launches, warm-ups outside it
    assert trials["time_per_launch_us"].to_numpy() == pytest.approx(1.0, rel=1e-6)
    assert (trials["time_source"] == "launch-count").all() and trials["tflops"].isna().all()   # no fake rates
    assert len(dev.launches) == len(trials) * (settings.launches + settings.warmup)
    assert all(entry["hazards"] == 0 and entry["clock"] == "launch-count" for entry in dev.launches)
    # rotation: enough sets to exceed 2x the cache, and launch after launch walks through them
    set_bytes = int(trials["set_bytes"].iloc[0])
    n_sets = inputs.rotation_for(set_bytes, settings.cache_bytes).n_sets
    assert n_sets >= 2 and (trials["n_sets"] == n_sets).all()
    first_args = [e["pointers"][0] for e in dev.launches]
    assert len(set(first_args)) == 2 * n_sets              # both arms' sets, all used, all distinct
    assert res.provenance["mode"] == "emulated"
    facts = res.provenance["bench"]["device_facts"]
    assert facts["clock"] == "launch-count" and facts["arch"] == "gfx950"


def test_events_report_modelled_time_when_the_timing_model_is_on():
    """With the timing model (issue #10) the emulated device's events report its modelled kernel time,
    labelled "modelled"; without it this test skips."""
    _require_stack()
    import inspect

    import gfx950emu

    if "timing" not in inspect.signature(gfx950emu.launch).parameters:
        pytest.skip("this gfx950emu has no timing model (launch(..., timing=True))")
    from mxfp4_ablation import emulated_device

    variant, params, module, shape_args = _setup("gemm-v7")
    backend = emulated_device.EmulatedBackend(timing=True)
    try:
        launcher = module.build(**params)
        on_dev = emulated_device.to_device(module.make_inputs(**shape_args, seed=0))
        start, end = backend.event(), backend.event()
        backend.record(start)
        launcher(*module.device_args(on_dev), stream=backend.stream())
        backend.record(end)
        entry = backend.dev.launches[-1]
        assert entry["clock"] == "modelled" and entry["modelled_us"] > 0
        assert backend.elapsed_ms(start, end) == pytest.approx(entry["modelled_us"] / 1000, rel=1e-6)
    finally:
        backend.dev.set_clock("zero")
