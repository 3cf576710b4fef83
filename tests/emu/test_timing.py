"""The timing model (gfx950emu.timing): res.timing schema, micro-kernels against their documented
cycle counts, functional exactness in timing mode, grid sampling, bad input."""
import numpy as np
import pytest

import gfx950emu
from gfx950emu.bench import _ARGS, reference, synthetic_gemm_inputs, synthetic_gemm_isa
from gfx950emu.timing import Params, first_cu_workgroups, micro, table

KEYS = {"cycles", "wave_cycles", "mfma_count", "cycles_per_mfma_loop", "mfma_busy", "exposed", "by_instruction",
        "kernel", "sampled_workgroups", "label", "model_version", "clock_ghz"}
KERNEL_KEYS = {"us", "tflops", "bound", "clock_ghz", "rounds", "bytes_hbm", "bytes_l2"}
REASONS = {"vmcnt", "lgkmcnt", "barrier", "dependency", "issue", "lds_bank", "other"}


@pytest.fixture(scope="module")
def micro_rows():
    return {r["case"]: r for r in micro.run()}


@pytest.mark.parametrize("case", [c[0] for c in micro.cases()])
def test_micro_kernel_matches_documented_cycles(micro_rows, case):
    r = micro_rows[case]
    # pipe-throughput cases end on the wave's next 4-cycle issue slot: exact to slot / N
    tol = 4 / micro.N if "ds_read" in case else 0
    assert r["modelled_cycles"] == pytest.approx(r["expected_cycles"], abs=tol), r["what"]


def test_micro_documented_values_are_the_issue_numbers(micro_rows):
    # the values issue #10 names: FP4 MFMA 16 cycles, FP8 32; bank conflicts scale the DS cost
    assert micro_rows["fp4_mfma_stream"]["modelled_cycles"] == 16
    assert micro_rows["fp8_mfma_stream"]["modelled_cycles"] == 32
    one = micro_rows["ds_read_b128_1way"]["modelled_cycles"]
    assert micro_rows["ds_read_b128_2way"]["modelled_cycles"] == pytest.approx(2 * one, abs=0.2)
    assert micro_rows["ds_read_b128_4way"]["modelled_cycles"] == pytest.approx(4 * one, abs=0.2)


@pytest.fixture(scope="module")
def gemm_run():
    K = 256
    prog = gfx950emu.load(synthetic_gemm_isa(K))
    inp = synthetic_gemm_inputs(K)
    res = gfx950emu.launch(prog, (1, 1, 1), (256, 1, 1), [inp[a] for a in _ARGS], timing=True,
                           flops=2.0 * 256 * 256 * K)
    return res, inp


def test_timing_schema(gemm_run):
    res, _ = gemm_run
    t = res.timing
    assert KEYS <= set(t)
    assert KERNEL_KEYS <= set(t["kernel"])
    assert set(t["exposed"]) == REASONS
    assert t["label"] == "modelled" and t["model_version"] == Params().version
    assert t["clock_ghz"] == t["kernel"]["clock_ghz"] > 0
    assert len(t["wave_cycles"]) == 4 and max(t["wave_cycles"]) <= t["cycles"]
    assert t["mfma_count"] == 4 * (256 // 128) * 64
    assert t["kernel"]["bound"] in ("compute", "memory")
    assert t["by_instruction"] and {"line", "opcode", "issue_cycle", "stall_cycles", "reason"} <= set(t["by_instruction"][0])
    busy = sum(t["mfma_busy"]) / 4 * t["cycles"]
    # MFMA-busy + exposed cycles account for the workgroup's span (per SIMD, rounded)
    assert busy + sum(t["exposed"].values()) == pytest.approx(t["cycles"], rel=0.01)
    import json
    json.dumps(t)


def test_timing_mode_keeps_results_exact(gemm_run):
    res, inp = gemm_run
    ref = reference(inp)
    err = np.abs(inp["C"] - ref).max() / np.abs(ref).max()
    assert err < 1e-5


def test_plain_launch_has_no_timing():
    prog = gfx950emu.load(micro.kernel_text(["s_nop 0"]))
    res = gfx950emu.launch(prog, 1, 64, [np.zeros(16, np.uint8)])
    assert res.timing is None


def test_first_cu_receives_every_256th_workgroup():
    wgs = [(i, 0, 0) for i in range(1024)]
    assert first_cu_workgroups(wgs, Params()) == [(0, 0, 0), (256, 0, 0), (512, 0, 0), (768, 0, 0)]


def test_grid_extrapolates_rounds_from_the_sample():
    prog = gfx950emu.load(micro.kernel_text([micro._mfma("a[0:3]", "a[0:3]")] * 8, lds=163840))   # 1 WG per CU
    buf = np.zeros(1 << 20, np.uint8)
    one = gfx950emu.launch(prog, 256, 64, [buf], timing=True).timing
    four = gfx950emu.launch(prog, 1024, 64, [buf], timing=True, timing_sample=1).timing
    assert one["kernel"]["rounds"] == 1 and four["sampled_workgroups"] == [[0, 0, 0]]
    assert four["occupancy_workgroups_per_cu"] == 1 and four["kernel"]["rounds"] == 4
    assert four["kernel"]["compute_cycles"] == pytest.approx(4 * one["kernel"]["compute_cycles"])
    assert four["kernel"]["flops_source"] == "mfma"


def test_bad_input_is_one_clear_error():
    prog = gfx950emu.load(micro.kernel_text(["s_nop 0"]))
    buf = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="hazard"):
        gfx950emu.launch(prog, 1, 64, [buf], timing=True, hazards="report")
    with pytest.raises(ValueError, match="sample"):
        gfx950emu.launch(prog, 1, 64, [buf], timing=True, timing_sample=0)
    with pytest.raises(ValueError, match="unknown timing parameter"):
        gfx950emu.launch(prog, 1, 64, [buf], timing=True, timing_params={"mfma.nope": 1})


def test_every_parameter_has_value_unit_and_source():
    t = table()
    assert len(t) > 30
    for key, e in t.items():
        assert {"value", "unit", "source"} <= set(e), key
        assert e["source"].strip(), key
    fitted = [k for k, e in t.items() if "fit" in e["source"].split(":")[0]]
    # the constant clock's one fit, and the power clock's fitted parameters (mxfp4_ablation.calibration)
    assert fitted == ["clock.sustained_ghz", "power.ref_ghz", "power.operand_weight_per_byte",
                      "power.round_overhead_us"]


def test_cli_runs_any_s_file_with_synthesised_args(tmp_path, capsys):
    import json

    from gfx950emu.timing.__main__ import main
    f = tmp_path / "k.s"
    f.write_text(micro.kernel_text([micro._mfma(micro._acc(j), micro._acc(j)) for j in range(8)]))
    trace = tmp_path / "t.json"
    assert main([str(f), "--grid", "512", "--block", "64", "--buffers", "buf=4096", "--json",
                 "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    n = len(out["sampled_workgroups"])          # the first CU's workgroups: 512 / 256 CUs = 2
    assert n == 2 and out["mfma_count"] == 8 * n and out["label"] == "modelled" and "trace_events" not in out
    assert out["kernel"]["flops_source"] == "mfma"
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("pid") == 1 and e.get("ph") == "X" for e in events) == 8 * n   # slices on the MFMA pipe tracks
    assert main([str(f), "--buffers", "nope=1"]) == 2
    assert "no kernel argument named 'nope'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.s")]) == 2


def test_lds_bank_conflicts_come_from_real_addresses():
    from gfx950emu.timing.cu import lds_cycles
    lanes = np.arange(64)
    assert lds_cycles(lanes * 16, 16, 64, 256) == (4, 4)          # 4 phases of 16 lanes, conflict-free
    assert lds_cycles(lanes * 64, 16, 64, 256) == (16, 4)         # 4-way
    assert lds_cycles(np.zeros(64, np.int64), 16, 64, 256) == (4, 4)   # broadcast of one address
    assert lds_cycles(lanes * 4 * 64, 4, 64, 256) == (64, 1)      # b32, every lane in bank 0


def test_lds_cycles_per_pattern_equal_the_direct_count():
    """lds_cycles answers once per pattern (the addresses less their lowest dword): any dword shift of
    the same addresses, unaligned ones too, costs what the bank count itself says."""
    from gfx950emu.timing import cu
    rng = np.random.default_rng(0)
    for _ in range(200):
        nbytes = int(rng.choice([1, 2, 4, 8, 12, 16]))
        addr = rng.integers(0, 1 << 12, 64) * int(rng.choice([1, 2, 4, 16, 64])) + int(rng.integers(0, 4))
        for shift in (0, 4, 4 * 7, 4 * 64, 4 * 12345):
            a = (addr + shift).astype(np.int64)
            for bpc in (128, 256):
                assert cu.lds_cycles(a, nbytes, 64, bpc) == cu._lds_cycles(a, nbytes, 64, bpc)


@pytest.mark.parametrize("fold", [1 << 20, 1])
def test_touched_lines_and_buffers_the_same_however_often_they_are_folded(monkeypatch, fold):
    from gfx950emu.memory import HEAP_BASE, FlatMemory
    from gfx950emu.timing import track_touched
    monkeypatch.setattr(track_touched, "FOLD", fold)
    mem = FlatMemory()
    a, b = mem.reserve("arg0", 4096), mem.reserve("arg1", 1024)
    mem.reserve("kernarg", 64)
    mem.finalize()
    touched = track_touched(mem)
    mem.starts(np.array([a, a + 130, a + 4000, a + 4], np.uint64), 4, 1)
    mem.offsets(np.array([b + 256], np.uint64), 8, 2)
    touched.detach()
    assert touched.lines == {(x - HEAP_BASE) // 128 for x in (a, a + 130, a + 4000, b + 256)}
    assert touched.buffer_bytes() == 4096 + 1024          # both argument buffers, not the kernarg segment


def test_timeline_window_has_wave_and_pipe_tracks():
    from gfx950emu.timing import trace
    prog = gfx950emu.load(micro.kernel_text([micro._mfma(micro._acc(j), micro._acc(j)) for j in range(8)]))
    t = gfx950emu.launch(prog, 1, 64, [np.zeros(4096, np.uint8)], timing=True, timing_trace=True).timing
    first = min(e[4] for e in t["trace_events"] if e[6] == "mfma")
    iv = trace.timeline(t, prog, first, first + 32)
    pipe = [x for x in iv if x["track"].endswith("MFMA")]
    assert len(pipe) == 2 and pipe[1]["start"] - pipe[0]["start"] == 16 and pipe[0]["end"] - pipe[0]["start"] == 16
    assert {x["track"] for x in iv} == {"wg0 wave0", "SIMD 0 MFMA"}
