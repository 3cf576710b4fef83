"""Device facts for provenance: identity, last-level cache, clocks/power/temperature.

Timings mean little without the state of the card: a throttled clock or a hot chip
moves results by more than the 1 % effects this study looks for.  We record what
the vendor tools report before and after a run.  Every tool is optional: a missing
one is written down as missing, never fatal.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# Last-level cache where torch's L2_cache_size does not see it.  On CDNA3/CDNA4 the
# 256 MB AMD Infinity Cache (MALL) sits behind the per-XCD L2 (AMD Instinct MI300X /
# MI355X data sheets); on NVIDIA the L2 is the last level and torch reports it.
KNOWN_LLC_BYTES = {
    "gfx942": 256 * 2**20,
    "gfx950": 256 * 2**20,
}

_SMI_TIMEOUT_S = 15


class DeviceError(RuntimeError):
    """No usable GPU, or the wrong one, for the requested operation."""


def gpu_available() -> bool:
    """True when torch sees at least one CUDA/HIP device (never raises)."""
    try:
        import torch

        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:
        return False


def arch_of(props, is_hip: bool | None = None) -> str:
    """gfx name on ROCm (e.g. 'gfx950'), 'sm_90' style on NVIDIA.

    Only trusts ``gcnArchName`` on a ROCm build: CUDA builds of torch also have the
    attribute and fill it with the marketing name ('NVIDIA H200')."""
    if is_hip is None:
        import torch

        is_hip = bool(getattr(torch.version, "hip", None))
    gcn = getattr(props, "gcnArchName", "") or ""
    if is_hip and gcn:
        return gcn.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def probe(index: int = 0) -> dict:
    """Static facts about GPU ``index`` as torch sees it."""
    import torch

    if not gpu_available():
        raise DeviceError("no GPU visible to torch")
    p = torch.cuda.get_device_properties(index)
    arch = arch_of(p)
    l2 = int(getattr(p, "L2_cache_size", 0) or 0)
    return {
        "index": index,
        "name": p.name,
        "arch": arch,
        "runtime": "hip" if getattr(torch.version, "hip", None) else "cuda",
        "runtime_version": getattr(torch.version, "hip", None) or torch.version.cuda,
        "total_memory": int(p.total_memory),
        "multi_processor_count": int(p.multi_processor_count),
        "l2_cache_bytes": l2,
        "llc_bytes": llc_bytes_for(arch, l2),
        "uuid": str(getattr(p, "uuid", "")) or None,
    }


def llc_bytes_for(arch: str, l2_bytes: int, override: int | None = None) -> int:
    """Last-level cache size: the override, else a known table entry, else torch's L2."""
    if override is not None:
        if override < 0:
            raise DeviceError(f"cache size override must be >= 0, got {override}")
        return int(override)
    return int(max(KNOWN_LLC_BYTES.get(arch, 0), l2_bytes))


# --------------------------------------------------------------------------- telemetry

_NVSMI_FIELDS = (
    "name,serial,uuid,pci.bus_id,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,"
    "power.draw,power.limit,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active"
)


def _run(cmd: list[str]) -> tuple[int, str, str]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=_SMI_TIMEOUT_S)
    return p.returncode, p.stdout, p.stderr


def _nvml(index: int) -> dict:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)

        def safe(fn, *a):
            try:
                v = fn(h, *a)
                return v.decode() if isinstance(v, bytes) else v
            except Exception as exc:  # not supported on this card / driver
                return f"unavailable: {type(exc).__name__}"

        return {
            "tool": "nvml",
            "name": safe(pynvml.nvmlDeviceGetName),
            "serial": safe(pynvml.nvmlDeviceGetSerial),
            "uuid": safe(pynvml.nvmlDeviceGetUUID),
            "sm_clock_mhz": safe(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": safe(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": safe(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
            "power_w": (lambda v: v / 1000 if isinstance(v, (int, float)) else v)(
                safe(pynvml.nvmlDeviceGetPowerUsage)),
            "temperature_c": safe(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
            "pstate": safe(pynvml.nvmlDeviceGetPerformanceState),
            "throttle_reasons": safe(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons),
        }
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi(index: int) -> dict:
    rc, out, err = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={_NVSMI_FIELDS}",
                         "--format=csv,noheader,nounits"])
    if rc != 0:
        return {"tool": "nvidia-smi", "error": (err or out).strip()[:300]}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    return {"tool": "nvidia-smi", **dict(zip(_NVSMI_FIELDS.split(","), values))}


def _json_tool(tool: str, args: list[str]) -> dict:
    rc, out, err = _run([tool, *args])
    if rc != 0:
        return {"tool": tool, "error": (err or out).strip()[:300]}
    try:
        return {"tool": tool, "data": json.loads(out)}
    except json.JSONDecodeError:
        return {"tool": tool, "text": out[:4000]}


def snapshot(index: int = 0) -> dict:
    """Clocks, power, temperature and serial of GPU ``index`` from whatever tool exists.

    Tries NVML (pynvml), nvidia-smi, amd-smi and rocm-smi in that order and keeps the
    first that answers; the names of the missing tools are listed.
    """
    snap: dict = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "missing": []}
    attempts = [
        ("nvml", lambda: _nvml(index), lambda: _importable("pynvml")),
        ("nvidia-smi", lambda: _nvidia_smi(index), lambda: shutil.which("nvidia-smi")),
        ("amd-smi", lambda: _json_tool("amd-smi", ["metric", "-g", str(index), "--json"]),
         lambda: shutil.which("amd-smi")),
        ("rocm-smi", lambda: _json_tool("rocm-smi", ["-d", str(index), "--showtemp",
                                                     "--showpower", "--showclocks",
                                                     "--showserial", "--json"]),
         lambda: shutil.which("rocm-smi")),
    ]
    for name, fn, present in attempts:
        if not present():
            snap["missing"].append(name)
            continue
        try:
            result = fn()
        except Exception as exc:
            result = {"tool": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        snap.setdefault("readings", []).append(result)
        if "error" not in result:
            break
    if not snap.get("readings"):
        snap["status"] = "no telemetry tool available"
    return snap


def _importable(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


# --------------------------------------------------------------------------- locking


def lock_dir() -> Path:
    return Path(os.environ.get("MXFP4_ABLATION_LOCK_DIR", tempfile.gettempdir()))


@contextlib.contextmanager
def device_lock(index: int, timeout_s: float = 3600.0, directory: Path | None = None,
                poll_s: float = 0.5):
    """Hold an exclusive lock on GPU ``index`` so two measurements never share it.

    A file lock (flock), released by the kernel even if the holder dies, so a crashed
    run leaves no stale lock.  Waits up to ``timeout_s`` and then fails clearly.
    """
    d = Path(directory) if directory is not None else lock_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"mxfp4-ablation-gpu{index}.lock"
    deadline = time.monotonic() + timeout_s
    with open(path, "a+") as fh:
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise DeviceError(
                        f"GPU {index} is busy: another measurement holds {path} "
                        f"(waited {timeout_s:g} s)") from None
                time.sleep(poll_s)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"{os.getpid()}\n")
            fh.flush()
            yield path
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
