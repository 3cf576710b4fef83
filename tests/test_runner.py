"""The runner's edges: argument conversion, backend refusal, the gate's arithmetic."""

import pytest
import torch

from mxfp4_ablation import runner


def test_emulator_args_converts_entries():
    t = torch.zeros(4, dtype=torch.uint8)
    entries = [
        {"name": "A", "kind": "global_buffer", "offset": 0, "size": 8, "tensor": t},
        {"name": "A.layout", "kind": "by_value", "offset": 8, "size": 8, "bytes": (4).to_bytes(4, "little") + (1).to_bytes(4, "little")},
        {"name": "M", "kind": "by_value", "offset": 16, "size": 4, "bytes": (-1).to_bytes(4, "little", signed=True)},
    ]
    args = runner.emulator_args(entries)
    assert args[0] is t
    assert args[1] == 4 + (1 << 32)
    assert args[2] == 0xFFFFFFFF
    with pytest.raises(ValueError, match="unknown kind"):
        runner.emulator_args([{"name": "x", "kind": "hidden_arg"}])


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
