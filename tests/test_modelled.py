"""mxfp4_ablation.modelled and `mxfp4-ablation model`: modelled timing of a compiled variant."""
import json

import numpy as np
import pytest

from mxfp4_ablation import modelled

SHAPE = (256, 256, 512)


@pytest.fixture()
def timing_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(modelled, "_cache_file", lambda key: tmp_path / "timing" / f"{key}.json")
    return tmp_path


def test_model_is_labelled_and_cached(timing_cache):
    r = modelled.model("gemm-v0", SHAPE)
    assert r["label"] == "modelled" and r["model_version"] and r["clock_ghz"] > 0
    k = r["kernel"]
    assert {"us", "tflops", "bound", "clock_ghz", "rounds", "bytes_hbm", "bytes_l2"} <= set(k)
    assert k["flops_source"] == "caller" and k["flops"] == 2.0 * 256 * 256 * 512
    assert k["tflops"] == pytest.approx(k["flops"] / (k["us"] * 1e-6) / 1e12, rel=1e-3)
    # one workgroup per 256x256 tile, 4 waves x 64 MFMAs per 128-deep K slice
    assert r["mfma_count"] == 4 * (512 // 128) * 64
    assert r["cached"] is False
    again = modelled.model("gemm-v0", SHAPE)
    assert again["cached"] is True and again["kernel"] == k


def test_model_trace_is_a_chrome_trace(timing_cache, tmp_path):
    path = tmp_path / "t.json"
    modelled.model("gemm-v0", SHAPE, trace=str(path))
    data = json.loads(path.read_text())
    tracks = {e["args"]["name"] for e in data["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert sum(t.startswith("wg0 wave") for t in tracks) == 4
    assert sum(t.endswith("MFMA") for t in tracks) == 4
    assert data["otherData"]["label"] == "modelled"


def test_upstream_args_follow_the_sidecar():
    meta = {"args": [{"name": "A", "value_kind": "global_buffer"}, {"name": "A.layout", "value_kind": "by_value"},
                     {"name": "c_m", "value_kind": "by_value"}]}
    a, layout, cm = modelled.flydsl_upstream_args(meta, 512, 256, 1024)
    assert isinstance(a, np.ndarray) and a.size == 512 * 1024 // 2 and layout == a.size and cm == 512
    with pytest.raises(ValueError, match="not one of"):
        modelled.flydsl_upstream_args({"args": [{"name": "Z", "value_kind": "global_buffer"}]}, 1, 1, 1)


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown variant"):
        modelled.model("gemm-v99", SHAPE)
    with pytest.raises(ValueError, match="no upstream ISA"):
        modelled.flydsl_upstream(tmp_path, "deadbeef", 8192, 8192, 8192)


def test_cli_model_json(timing_cache, capsys):
    from mxfp4_ablation.cli import main

    assert main(["model", "gemm-v0", "--shape", "256,256,512", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["label"] == "modelled" and out["variant"] == "gemm-v0"
    assert main(["model", "gemm-v0", "--shape", "256,256"]) == 2
    assert "takes a shape" in capsys.readouterr().err


def test_cli_model_needs_exactly_one_kernel(capsys):
    from mxfp4_ablation.cli import main

    assert main(["model", "--shape", "256,256,512"]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert main(["model", "--upstream", "/nonexistent", "--shape", "8192,8192,8192"]) == 2
    assert "--commit" in capsys.readouterr().err
    assert main(["model", "--upstream", "/nonexistent", "--commit", "741f3d6d", "--shape", "8192,8192,8192"]) == 2
    assert "no upstream ISA" in capsys.readouterr().err


def test_model_counts_out_of_range_lanes_of_a_kernel_that_relies_on_the_range_check(timing_cache):
    # moe1 at a single token reads padding rows through the buffer range check (res.stats.out_of_range):
    # the timing path must give its waves the same event log as a plain launch does.
    r = modelled.model("moe1-v0", (1, 8, 512, 256, 2), use_cache=False)
    assert r["label"] == "modelled" and r["kernel"]["us"] > 0


# ------------------------------------------------------------- sampled (lazily mapped) inputs ----
def _same_model(variant, shape, sample, monkeypatch):
    """The timing model on the full eager inputs and on lazily mapped ones (forced chunk by chunk)."""
    from gfx950emu import memory

    eager = modelled.model(variant, shape, sample=sample, use_cache=False, lazy=False)
    monkeypatch.setattr(memory, "LAZY_MIN_BYTES", 0)
    modelled._LAZY_INPUTS.clear()
    lazy = modelled.model(variant, shape, sample=sample, use_cache=False, lazy=True)
    assert lazy["cycles"] == eager["cycles"]
    for key in ("wave_cycles", "mfma_count", "exposed", "kernel", "hot_loop", "lds_conflict_cycles",
                "sampled_workgroups"):
        assert lazy[key] == eager[key], key
    return eager, lazy


def test_lazy_moe_inputs_model_the_same_cycles(monkeypatch):
    _same_model("moe1-v2", (200, 8, 512, 256, 2, 128), 1, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("variant,shape,sample", [("gemm-v4", (512, 512, 3072), 1),
                                                  ("moe2-v4", (200, 8, 512, 256, 2, 128), 2),
                                                  ("moe2-v0", (16, 8, 512, 256, 2, 16), 4),
                                                  ("moe1-v0", (16, 8, 512, 256, 2, 16), 4)])
def test_lazy_inputs_model_the_same_cycles_slow(variant, shape, sample, monkeypatch):
    """Zero lazy buffers (MoE: but the routing) against random eager ones, GEMM and MoE decode and
    prefill: the modelled timing does not read these kernels' data."""
    _same_model(variant, shape, sample, monkeypatch)


def test_lazy_moe_inputs_are_the_eager_routing_and_zero_data():
    import torch

    from mxfp4_ablation.kernels import moe_gemm1, moe_gemm2

    for block_m in (16, 128):
        shape = dict(tokens=16, experts=8, hidden=512, inter=256, topk=2, block_m=block_m)
        for module in (moe_gemm1, moe_gemm2):
            eager = module.make_inputs(**shape, seed=3)
            lazy = module.make_inputs(**shape, seed=3, lazy=True)
            assert torch.equal(lazy["sorting"].sorted_token_ids, eager["sorting"].sorted_token_ids)
            for name in module.ARG_NAMES:
                want, got = eager[name], lazy[name]
                if not isinstance(want, torch.Tensor):
                    assert got == want, name
                elif got.is_meta:      # data: the same shape and type, no storage (mapped as zeros)
                    assert (got.shape, got.dtype) == (want.shape, want.dtype), name
                else:                  # the routing: the eager bytes
                    assert torch.equal(got, want), name
            metas = {n for n in module.ARG_NAMES if getattr(lazy[n], "is_meta", False)}
            assert metas >= ({"w1", "w1_scale", "a_quant", "hidden_states"} if module is moe_gemm1
                             else {"w2", "w2_scale", "inter", "inter_scale", "out"})
