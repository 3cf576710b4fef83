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


def test_internal_errors_show_their_traceback(monkeypatch):
    """A bug (any exception that is not a UsageError / ToolchainError) is not turned into a usage error."""
    from mxfp4_ablation import variants

    def broken():
        raise ValueError("an internal bug")

    monkeypatch.setattr(variants, "all_variants", broken)
    with pytest.raises(ValueError, match="an internal bug"):
        cli.main(["variants"])


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
