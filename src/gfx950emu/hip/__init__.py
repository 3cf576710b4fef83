"""An emulated HIP runtime: programs that launch through ROCm's ``libamdhip64.so.7`` run in gfx950emu.

    dev = gfx950emu.hip.load(hazards="report")   # build (once) + load the shim, install the server
    ...  # anything that now dlopens a library needing libamdhip64.so.7 (FlyDSL's
         # libfly_jit_runtime.so) binds to the shim; its HIP calls land in ``dev``
    dev.launches, dev.errors, dev.check()

The shim (:mod:`gfx950emu.hip.shim`) is a small C library with the HIP entry points and their
``hip_4.2`` symbol versions, soname ``libamdhip64.so.7``; each entry point calls a Python function of
the :class:`~gfx950emu.hip.server.Device` (:mod:`gfx950emu.hip.server`: memory, copies, streams,
events, modules, launches in the emulator).  Loading it before the first library that needs
``libamdhip64.so.7`` makes the dynamic loader use it for that NEEDED entry (a loaded library with a
matching soname satisfies it), so nothing has to be on ``LD_LIBRARY_PATH``.  A real HIP runtime
already in the process is refused: two runtimes cannot both answer.

``python -m gfx950emu.hip build`` compiles the shim (with the system C compiler) and prints its path;
``python -m gfx950emu.hip info`` says what the emulated device reports.
"""
from __future__ import annotations

import ctypes
import os

from .shim import ShimBuildError, build, library_path
from .server import PROPERTIES, Device, HipError

__all__ = ["load", "device", "Device", "HipError", "ShimBuildError", "build", "library_path", "PROPERTIES",
           "loaded_hip_libraries"]

_STATE = {"lib": None, "device": None}


def loaded_hip_libraries() -> list:
    """Paths of every ``libamdhip64`` mapped into this process (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "libamdhip64" in line}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/"))


def load(hazards: str = "report", timing: bool = False, processes: int = 1, clock: str | None = None) -> Device:
    """Build (first use) and load the shim; returns the process's emulated device (one per process).

    ``clock`` is the events' clock (``"zero"``, ``"launch-count"``, ``"modelled"``; ``timing=True``
    means ``"modelled"``); see :mod:`gfx950emu.hip.server`.  Calling it again returns the same device
    with the new options.  Raises :class:`ShimBuildError` when no C compiler is found,
    :class:`HipError` when a real HIP runtime is already loaded.
    """
    if hazards not in ("off", "report", "strict"):
        raise ValueError(f"hazards must be 'off', 'report' or 'strict', got {hazards!r}")
    if timing and clock not in (None, "modelled"):
        raise ValueError(f"timing=True is the 'modelled' clock, not {clock!r}")
    mode = clock or ("modelled" if timing else "zero")
    dev = _STATE["device"]
    if dev is not None:
        dev.hazards, dev.processes = hazards, processes
        dev.set_clock(mode)
        return dev
    path = build()
    others = [p for p in loaded_hip_libraries() if os.path.realpath(p) != os.path.realpath(path)]
    if others:
        raise HipError(3, f"a HIP runtime is already loaded ({others[0]}); the emulated device must be the "
                          "process's only libamdhip64 (load it before anything that uses HIP)")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.gfx950emu_hip_set.argtypes = [ctypes.c_int, ctypes.c_void_p]
    dev = Device(hazards=hazards, processes=processes)
    dev.set_clock(mode)
    dev.install(lib)
    _STATE["lib"], _STATE["device"] = lib, dev
    return dev


def device() -> Device | None:
    """The loaded emulated device, or None before :func:`load`."""
    return _STATE["device"]


def library():
    """The loaded shim (a ctypes.CDLL) for calling HIP functions from Python, or None before :func:`load`."""
    return _STATE["lib"]
