"""The bench / harness-check command line: one-line errors, exit status 2."""
import pytest

from mxfp4_ablation.bench import device_info
from mxfp4_ablation.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err):
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(device_info, "gpu_available", lambda: False)


@pytest.fixture
def fake_gpu(monkeypatch):
    def use(arch, name):
        monkeypatch.setattr(device_info, "gpu_available", lambda: True)
        monkeypatch.setattr(device_info, "probe", lambda index=0: {"arch": arch, "name": name})
    return use


def test_bench_without_gpu_says_why(capsys, no_gpu):
    rc, out, err = run(capsys, "bench", "v1", "--vs", "v0", "--shape", "256,256,512")
    assert rc == 2 and out == ""
    assert "gfx950 code cannot run" in one_line(err)


def test_bench_on_a_non_gfx950_gpu_says_why(capsys, fake_gpu):
    fake_gpu("sm_90", "NVIDIA H200")
    rc, _, err = run(capsys, "bench", "v1", "--vs", "v0", "--shape", "256,256,512", "--json")
    assert rc == 2
    line = one_line(err)
    assert "NVIDIA H200 (sm_90)" in line and "cannot run gfx950 code" in line


def test_bench_unknown_variant_on_gfx950(capsys, fake_gpu, monkeypatch):
    from mxfp4_ablation import variants

    monkeypatch.setattr(variants, "all_variants", lambda: {})
    fake_gpu("gfx950", "AMD Instinct MI355X")
    rc, _, err = run(capsys, "bench", "gemm-v1", "--vs", "no-such-variant",
                     "--shape", "256,256,512")
    assert rc == 2
    assert "unknown variant 'no-such-variant'" in one_line(err)


def test_bench_broken_kernel_module_is_one_line(capsys, fake_gpu, monkeypatch):
    from mxfp4_ablation import variants

    def broken():
        raise SyntaxError("'(' was never closed")

    monkeypatch.setattr(variants, "all_variants", broken)
    fake_gpu("gfx950", "AMD Instinct MI355X")
    rc, _, err = run(capsys, "bench", "gemm-v1", "--vs", "gemm-v0", "--shape", "256,256,512")
    assert rc == 2
    assert "cannot list variants" in one_line(err)


def test_bench_registered_launcher_is_found(monkeypatch):
    import functools

    from mxfp4_ablation.bench import launchers
    from mxfp4_ablation.bench.timing import sim_case

    launchers.register_launcher("sim-x", lambda shape: functools.partial(sim_case, base_us=1.0))
    try:
        f = launchers.launcher_for("sim-x", (1, 2, 3))
        assert f.func is sim_case
    finally:
        launchers.unregister_launcher("sim-x")


@pytest.mark.parametrize("argv,match", [
    (["bench", "v1", "--vs", "v0", "--shape", "256,x,512"], "comma-separated integers"),
    (["bench", "v1", "--vs", "v0", "--shape", "256,256,512", "--trials", "2"], "--trials"),
    (["bench", "v1", "--vs", "v0", "--shape", "256,256,512", "--methods", "stopwatch"],
     "methods"),
    (["harness-check", "--confidence", "1.5"], "confidence"),
])
def test_bad_input_is_one_line(capsys, no_gpu, argv, match):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert match in one_line(err)


def test_harness_check_without_gpu(capsys, no_gpu):
    rc, out, err = run(capsys, "harness-check", "--json")
    assert rc == 2 and out == ""
    assert "no GPU" in one_line(err)


def test_bench_end_to_end_on_a_simulated_gfx950(capsys, fake_gpu, monkeypatch, tmp_path):
    """The whole bench command (lookup, interleaved run, writing, JSON) with the simulated
    backend standing in for the gfx950 GPU that CI does not have."""
    import dataclasses
    import functools
    import json

    from mxfp4_ablation.bench import launchers
    from mxfp4_ablation.bench.timing import sim_case
    from mxfp4_ablation.cli import bench as cli_bench

    fake_gpu("gfx950", "AMD Instinct MI355X")
    monkeypatch.setenv("MXFP4_ABLATION_LOCK_DIR", str(tmp_path / "locks"))
    real = cli_bench.settings_from_args
    monkeypatch.setattr(cli_bench, "settings_from_args", lambda args: dataclasses.replace(
        real(args), backend="sim", fresh_processes=False, n_resamples=299))
    launchers.register_launcher("sim-base", lambda s: functools.partial(sim_case, base_us=100.0))
    launchers.register_launcher("sim-fast", lambda s: functools.partial(sim_case, base_us=97.0))
    try:
        rc, out, err = run(capsys, "bench", "sim-fast", "--vs", "sim-base", "--shape", "64,64,64",
                           "--trials", "20", "--launches", "10", "--processes", "3",
                           "--no-progress", "--out", str(tmp_path), "--json")
    finally:
        launchers.unregister_launcher("sim-base")
        launchers.unregister_launcher("sim-fast")
    assert rc == 0, err
    data = json.loads(out[out.index("{"):])
    rows = data["summary"]
    assert {r["method"] for r in rows} == {"events", "graph"}
    assert all(r["verdict"] == "faster" and abs(r["ratio"] - 0.97) < 0.005 for r in rows)
    assert (tmp_path / "trials.parquet").exists() and (tmp_path / "summary.json").exists()
