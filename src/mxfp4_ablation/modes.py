"""Which mode a run is in, and why.

``device``   a gfx950 GPU is visible: kernels run and are timed on it.
``emulated`` no gfx950: kernels are verified in the gfx950emu emulator; speed comes from static ISA
             metrics and published figures, labelled as such.
``static``   compile + ISA metrics only (no emulator available).
``modelled`` and ``published`` are not run modes: they label rows and figures from the gfx950emu
timing model (with its version and clock) and figures we cite (experiments/reference/*.csv).
Auto-detected; the ``MODE`` environment variable overrides (``make reproduce MODE=static``).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from .errors import UsageError

MODES = ("device", "emulated", "static")
LABELS = ("device", "emulated", "static", "modelled", "published")


@dataclass(frozen=True)
class GPU:
    name: str
    arch: str  # e.g. "gfx950" on ROCm, "sm_90" on CUDA
    backend: str  # "rocm" or "cuda"


def visible_gpu() -> GPU | None:
    """The first GPU torch can see, or None (no torch, or no GPU)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    if getattr(torch.version, "hip", None):
        arch = getattr(props, "gcnArchName", "").split(":")[0]
        return GPU(props.name, arch, "rocm")
    return GPU(props.name, f"sm_{props.major}{props.minor}", "cuda")


#: ``make reproduce`` detects the mode once and passes it to every notebook run as ``mode<TAB>reason``
#: (each detection imports torch: ~2 CPU-s per notebook); ``MODE`` still wins.
DETECTED_ENV = "MXFP4_DETECTED_MODE"


def detect() -> tuple[str, str]:
    """``(mode, reason)``; ``MODE`` in the environment wins when it names a known mode; else the mode a
    ``make reproduce`` run detected once for all its notebooks (:data:`DETECTED_ENV`), else detected now."""
    forced = os.environ.get("MODE", "").strip()
    if not forced:
        mode, _, reason = os.environ.get(DETECTED_ENV, "").partition("\t")
        if mode in MODES and reason:
            return mode, reason
    if forced:
        if forced not in MODES:
            raise UsageError(f"MODE={forced!r} is not one of {', '.join(MODES)}")
        if forced == "device":
            gpu = visible_gpu()
            if gpu is None or gpu.arch != "gfx950":
                where = f"{gpu.name} ({gpu.arch})" if gpu else "no GPU"
                raise UsageError(f"MODE=device needs a gfx950 GPU (MI355X); this machine has {where}: "
                                 "leave MODE unset (auto-detect) or use MODE=emulated")
        return forced, f"MODE={forced} set in the environment"
    gpu = visible_gpu()
    if gpu is not None and gpu.arch == "gfx950":
        return "device", f"gfx950 GPU visible: {gpu.name}"
    why = f"GPU {gpu.name} ({gpu.arch}) cannot run gfx950 code" if gpu else "no GPU visible"
    if importlib.util.find_spec("gfx950emu") is not None:
        return "emulated", f"{why}; verifying in the gfx950emu emulator"
    return "static", f"{why}; no emulator importable, compile + ISA only"
