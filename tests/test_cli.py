"""The command line: one-line errors with exit 2, JSON output, doctor's facts."""

import json
import subprocess
import sys

import pytest

from mxfp4_ablation import cli, modes


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "mxfp4_ablation.cli", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_doctor_json_reports_linker_and_mode():
    rc, out, err = run_cli("doctor", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["flydsl"] == "0.5.0"
    assert data["ld_lld"]["ok"] and data["ld_lld"]["linker"] in ("rocm", "path", "ziglang")
    assert data["mode"] in modes.MODES and data["mode_reason"]


@pytest.mark.parametrize("args, needle", [
    (("compile", "no-such-variant", "--shape", "256,256,256"), "unknown variant 'no-such-variant'"),
    (("isa", "no-such-variant", "--shape", "256,256,x"), "unknown variant"),
])
def test_user_errors_are_one_line_exit_2(args, needle):
    rc, out, err = run_cli(*args)
    assert rc == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_parse_shape_errors():
    from mxfp4_ablation.variants import parse_shape

    assert parse_shape("512,256,1024") == (512, 256, 1024)
    with pytest.raises(ValueError, match="comma-separated integers"):
        parse_shape("512x512")
    with pytest.raises(ValueError, match="positive"):
        parse_shape("0,1,2")


def test_mode_override(monkeypatch):
    monkeypatch.setenv("MODE", "static")
    assert modes.detect()[0] == "static"
    monkeypatch.setenv("MODE", "fast")
    with pytest.raises(ValueError, match="not one of"):
        modes.detect()


def test_main_returns_2_on_bad_mode(monkeypatch, capsys):
    monkeypatch.setenv("MODE", "bogus")
    assert cli.main(["doctor"]) == 2
    assert "MODE='bogus'" in capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (("verify", "gemm-v7", "--shape", "256,256,100"), "K must be a multiple of 256"),
    (("verify", "moe1-v2", "--shape", "16,8,512"), "moe1 takes a shape tokens,experts,hidden,inter,topk[,block_m]"),
    (("compile", "gemm-v0", "--shape", "kimi"), "neither comma-separated positive integers"),
    (("verify", "gemm-v0", "--shape", "256,256,256", "--backend", "device"), "needs a gfx950 GPU"),
])
def test_bad_requests_are_usage_errors(args, needle):
    rc, out, err = run_cli(*args)
    assert rc == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_internal_errors_show_their_traceback(monkeypatch, capsys):
    """A bug (any exception that is not a UsageError / ToolchainError) is not turned into a usage error:
    its traceback, and exit 3 -- not 1, which means "verification failed"."""
    from mxfp4_ablation import variants
    from mxfp4_ablation.errors import EXIT_INTERNAL

    def broken():
        raise ValueError("an internal bug")

    monkeypatch.setattr(variants, "all_variants", broken)
    assert cli.main(["variants"]) == EXIT_INTERNAL == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: an internal bug" in err


def test_verify_json_reports_every_output_of_a_named_shape():
    pytest.importorskip("gfx950emu")
    rc, out, err = run_cli("verify", "moe1-v2", "--shape", "small-decode", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["passed"] and data["shape"] == [16, 8, 512, 256, 2, 16]
    assert {n: (o["compare"], o["passed"], o["mismatches"]) for n, o in data["outputs"].items()} == {
        "inter_quant": ("exact", True, 0), "inter_scale": ("exact", True, 0)}


def test_variants_lists_each_step_with_its_switch_record():
    rc, out, err = run_cli("variants", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["gemm-v5"]["switch"] == "b_carry" and rows["gemm-v5"]["predecessor"] == "gemm-v4"
    assert rows["gemm-v5"]["seed"] == "https://github.com/ROCm/FlyDSL/pull/990"
    assert rows["moe2-v4-no-unsigned_div"]["kind"] == "leave-one-out"
    assert rows["moe2-v4-no-unsigned_div"]["summary"].startswith("Unsigned division")


# ------------------------------------------------------------------- the real CLI, every backend (#18)


def _in_process(capsys, *args):
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _check_verify_output(rc, out, err, as_json, backend):
    assert rc == 0, err
    assert "Traceback" not in err
    if as_json:
        data = json.loads(out)
        assert data["passed"] and data["backend"] == backend and data["outputs"]
        return data
    assert out.startswith("PASS ") and f"backend={backend}" in out
    return out


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_verify_cli_emulator_fast(capsys, as_json):
    """The CLI itself (main(argv)), emulator backend, a one-workgroup GEMM."""
    pytest.importorskip("gfx950emu")
    rc, out, err = _in_process(capsys, "verify", "gemm-v0", "--shape", "256,256,256", *(["--json"] if as_json else []))
    _check_verify_output(rc, out, err, as_json, "emulator")


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_verify_cli_emulated_device_fast(capsys, as_json):
    """The CLI itself on the emulated device; gemm-v3 (g2s_m0) has s_nop wait-state reports, which used
    to crash the text and JSON output (KeyError: 'wait_state_reports', issue #18)."""
    from mxfp4_ablation import emulated_device

    if not emulated_device.describe().get("ok"):
        pytest.skip("the emulated device needs a gfx950-capable llvm-objdump (make llvm)")
    rc, out, err = _in_process(capsys, "verify", "gemm-v3", "--shape", "256,256,256", "--backend", "emulated-device",
                               *(["--json"] if as_json else []))
    got = _check_verify_output(rc, out, err, as_json, "emulated-device")
    if as_json:
        assert got["wait_state_hazards"] > 0  # the case that crashed
    else:
        assert "wait-state hazards (s_nop)" in got


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_verify_cli_device_without_a_gpu_is_one_line(as_json):
    if modes.visible_gpu() is not None:
        pytest.skip("a GPU is visible")
    rc, out, err = run_cli("verify", "gemm-v0", "--shape", "256,256,256", "--backend", "device",
                           *(["--json"] if as_json else []))
    assert rc == 2 and "needs a gfx950 GPU" in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["emulator", "emulated-device"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_verify_cli_subprocess_every_backend(backend, as_json):
    """`python -m mxfp4_ablation.cli verify` in a subprocess: gemm-v9 at 256,256,3072 (every rung from g2s_m0
    on has wait-state reports) and the MoE gemm1 decode shape."""
    pytest.importorskip("gfx950emu")
    if backend == "emulated-device":
        from mxfp4_ablation import emulated_device

        if not emulated_device.describe().get("ok"):
            pytest.skip("the emulated device needs a gfx950-capable llvm-objdump (make llvm)")
    for variant, shape in (("gemm-v9", "256,256,3072"), ("moe1-v2", "small-decode")):
        rc, out, err = run_cli("verify", variant, "--shape", shape, "--backend", backend,
                               *(["--json"] if as_json else []))
        _check_verify_output(rc, out, err, as_json, backend)


# ------------------------------------------------------------------- user errors are one line (#19)


@pytest.mark.parametrize("args, needle", [
    (("verify", "gemm-v0", "--shape", "256,256,256", "--processes", "0"), "--processes: must be at least 1, got 0"),
    (("verify", "gemm-v0", "--shape", "256,256,256", "--processes", "-1"), "--processes: must be at least 1, got -1"),
    (("verify", "gemm-v0", "--shape", "-256,256,256"), "neither comma-separated positive integers"),
    (("compile", "gemm-v0", "--shape", "-256,256,256"), "neither comma-separated positive integers"),
    (("verify", "gemm-v0", "--shape", "1048576,1048576,1048576"), "the limit is"),
    (("verify", "moe1-v2", "--shape", "16000000,8,512,256,2"), "must each stay below 4 GiB"),
    (("model", "gemm-v0", "--shape", "1048576,1048576,1048576"), "the limit is"),
    (("model", "--aiter-co", "/nonexistent/x.co", "--shape", "256,256,256"), "no such file"),
    (("model", "--aiter-co", __file__, "--shape", "256,256,256"), "not a code object"),
    (("model", "gemm-v0", "--shape", "256,256,256", "--trace", "/nonexistent/dir/t.json"), "does not exist"),
    (("verify", "gemm-v0", "--shape", "256,256,256", "--backend", "gpu"), "invalid choice"),
    (("verify",), "required"),
])
def test_more_user_errors_are_one_line_exit_2(capsys, args, needle):
    """In process (main(argv), as the console script calls it): argparse's own errors exit through
    SystemExit(2), ours return 2."""
    try:
        rc = cli.main(list(args))
    except SystemExit as stop:
        rc = stop.code
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_size_limit_is_checked_before_allocating(monkeypatch, capsys):
    """The limit is in the message and nothing is allocated (make_inputs never runs)."""
    from mxfp4_ablation.kernels import gemm

    monkeypatch.setenv("MXFP4_MAX_INPUT_GIB", "0.001")
    monkeypatch.setattr(gemm, "make_inputs", lambda **kw: pytest.fail("allocated"))
    rc, out, err = _in_process(capsys, "verify", "gemm-v0", "--shape", "256,256,256")
    assert rc == 2 and "limit is 0.0 GiB" in err and "MXFP4_MAX_INPUT_GIB" in err


def test_model_builds_only_the_sampled_data_so_the_eager_size_limit_does_not_apply(monkeypatch, capsys):
    """`model` maps the inputs lazily (sampled workgroups only): the Kimi MoE at M=4096 (19.6 GiB eager)
    needs its packed buffers' heap only, so a limit that refuses `verify` lets it run."""
    from mxfp4_ablation import modelled

    reached = []

    def model(variant, shape, **kw):
        reached.append(variant)
        return {"variant": variant, "kernel": {"tflops": 1.0, "us": 1.0, "bound": "memory", "rounds": 1},
                "model_version": "x", "clock_ghz": 2.4, "cycles": 1, "cycles_per_mfma_loop": None, "mfma_busy": [],
                "exposed": {}, "sampled_workgroups": [[0, 0, 0]], "grid_workgroups": 256}

    monkeypatch.setenv("MXFP4_MAX_INPUT_GIB", "6")
    monkeypatch.setattr(modelled, "model", model)
    rc, out, err = _in_process(capsys, "verify", "moe2-v0", "--shape", "4096,385,7168,512,9,128")
    assert rc == 2 and "the limit is 6.0 GiB" in err and not reached
    rc, out, err = _in_process(capsys, "model", "moe2-v0", "--shape", "4096,385,7168,512,9,128")
    assert rc == 0 and reached == ["moe2-v0"], err


def test_doctor_fails_for_a_linker_that_does_not_run(tmp_path):
    """A $ROCM_PATH/llvm/bin/ld.lld that exists but does not run is reported, not 'ok'."""
    lld = tmp_path / "llvm" / "bin" / "ld.lld"
    lld.parent.mkdir(parents=True)
    lld.write_text("#!/bin/sh\nexit 1\n")
    lld.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "mxfp4_ablation.cli", "doctor", "--json"], capture_output=True,
                          text=True, env={**__import__("os").environ, "ROCM_PATH": str(tmp_path)})
    data = json.loads(proc.stdout)
    assert proc.returncode == 2 and data["ld_lld"]["ok"] is False
    assert "--version failed" in data["ld_lld"]["linker_detail"]
