"""The benchmark CLI runs and reports throughput (small K to stay fast)."""
import re

from gfx950emu import bench


def test_bench_cli_prints_speed_for_both_modes(capsys):
    assert bench.main(["--k", "128"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"hazards=off\s*:\s+[\d.]+ s/workgroup .* instr/s, 0 hazard reports", out)
    assert re.search(r"hazards=report:\s+[\d.]+ s/workgroup", out)
    assert "MFMAs: 256" in out
    err = float(re.search(r"max \|C - reference\| / max \|reference\| = ([\d.e+-]+)", out).group(1))
    assert err < 1e-6


def test_synthetic_gemm_rejects_bad_k():
    import pytest
    with pytest.raises(ValueError, match="multiple of 128"):
        bench.synthetic_gemm_isa(100)
