"""Device facts and telemetry: missing tools are recorded, never fatal."""
from types import SimpleNamespace

from mxfp4_ablation.bench import device_info


def test_arch_on_rocm_and_cuda():
    props = SimpleNamespace(gcnArchName="gfx950:sramecc+:xnack-", major=9, minor=5)
    assert device_info.arch_of(props, is_hip=True) == "gfx950"
    # CUDA builds of torch fill gcnArchName with the product name: must not be trusted
    h200 = SimpleNamespace(gcnArchName="NVIDIA H200", major=9, minor=0)
    assert device_info.arch_of(h200, is_hip=False) == "sm_90"


def test_snapshot_without_any_tool(monkeypatch):
    monkeypatch.setattr(device_info.shutil, "which", lambda name: None)
    monkeypatch.setattr(device_info, "_importable", lambda mod: False)
    snap = device_info.snapshot(0)
    assert snap["missing"] == ["nvml", "nvidia-smi", "amd-smi", "rocm-smi"]
    assert snap["status"] == "no telemetry tool available"


def test_snapshot_keeps_a_failing_tool_and_tries_the_next(monkeypatch):
    monkeypatch.setattr(device_info, "_importable", lambda mod: False)
    monkeypatch.setattr(device_info.shutil, "which",
                        lambda name: "/usr/bin/" + name if name in ("nvidia-smi", "rocm-smi")
                        else None)

    def fake_run(cmd):
        if cmd[0] == "nvidia-smi":
            return 9, "", "NVIDIA-SMI has failed"
        return 0, '{"card0": {"Temperature (Sensor edge) (C)": "41.0"}}', ""

    monkeypatch.setattr(device_info, "_run", fake_run)
    snap = device_info.snapshot(0)
    assert snap["readings"][0]["error"].startswith("NVIDIA-SMI has failed")
    assert snap["readings"][1]["tool"] == "rocm-smi"
    assert "card0" in snap["readings"][1]["data"]
    assert snap["missing"] == ["nvml", "amd-smi"]
