"""``--backend emulated-device``: the device path -- FlyDSL ``build`` + ``device_args`` + FlyDSL's own
JIT launcher -- with the GPU replaced by gfx950emu behind an emulated HIP runtime.

What runs is what ``--backend device`` runs on an MI355X: the kernel module's ``build(**params)``
gives FlyDSL's ``@flyc.jit`` launcher, ``device_args`` picks its arguments from tensors "on the
device", and calling it makes FlyDSL compile the kernel for gfx950 in this process, create its MLIR
ExecutionEngine with ``libfly_jit_runtime.so``, load the code object (``hipModuleLoadData``), look up
the kernel (``hipModuleGetFunction``) and launch it (``hipModuleLaunchKernel``) with the kernel
arguments FlyDSL packed.  The only thing replaced is the GPU: ``libfly_jit_runtime.so`` binds to the
``libamdhip64.so.7`` shim of :mod:`gfx950emu.hip`, whose calls run the code object in gfx950emu with
the ``s_waitcnt`` hazard checker.

Tensors: torch here has no GPU, so "device memory" is what the emulated device's ``hipMalloc`` hands
out (host memory it owns); :func:`to_device` copies each input tensor there with ``hipMemcpy``
(host-to-device) and wraps it as a CPU torch tensor over that memory, so FlyDSL's ``data_ptr()`` is a
device pointer; :func:`to_host` copies every tensor back (device-to-host) and frees it.

FlyDSL is told the target the way a user without ``rocm_agent_enumerator`` would: ``ARCH`` /
``FLYDSL_GPU_ARCH`` = gfx950, and ``ROCM_PATH`` = the toolkit root with ``ld.lld``
(:func:`toolchain.toolkit_root`).  FlyDSL's own JIT cache goes under the project cache.

Times: ``seconds`` is the wall time of the launcher call on this CPU (FlyDSL's compile + emulation):
not a kernel time.  Events of the emulated device report 0 ms, or the timing model's modelled time
when it is on (``timing=True``); both are labelled by ``clock`` and are never measurements.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import time
import weakref
from typing import Any, Callable

from . import paths, toolchain
from .errors import UsageError

#: What a missing piece looks like to the user (one line each).
_NEEDS = "--backend emulated-device needs FlyDSL, torch, a C compiler (for the HIP shim) and gfx950 LLVM tools"


class EmulatedDeviceError(RuntimeError):
    """A HIP call on the emulated device failed (one line says which): a kernel or launcher problem."""


class EmulatedDeviceUnavailable(UsageError):
    """This machine cannot run the emulated device (no C compiler, LLVM tools, linker...): one line says what."""


def _env() -> None:
    os.environ.pop("COMPILE_ONLY", None)
    os.environ["ARCH"] = "gfx950"
    os.environ["FLYDSL_GPU_ARCH"] = "gfx950"
    os.environ["ROCM_PATH"] = str(toolchain.toolkit_root())
    os.environ.setdefault("GFX950EMU_CACHE", str(paths.cache_dir() / "gfx950emu"))
    os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", str(paths.cache_dir() / "flydsl-jit"))
    os.environ.setdefault("FLYDSL_RUNTIME_ENABLE_CACHE", "1")


def prepare(hazards: str = "report", timing: bool = False, processes: int = 1, clock: str | None = None):
    """Set FlyDSL's environment and load the emulated HIP runtime; returns the gfx950emu.hip Device."""
    import gfx950emu.hip as hip
    from gfx950emu.codeobject import CodeObjectError, find_llvm_tools

    try:
        find_llvm_tools()        # the code-object loader behind hipModuleGetFunction
        _env()
        return hip.load(hazards=hazards, timing=timing, processes=processes, clock=clock)
    except (hip.ShimBuildError, hip.HipError, toolchain.ToolchainError, CodeObjectError) as err:
        raise EmulatedDeviceUnavailable(f"{_NEEDS}: {err}") from None


def describe() -> dict:
    """What ``doctor`` prints about ``--backend emulated-device``: is each piece there (builds nothing)."""
    from gfx950emu.codeobject import CodeObjectError, find_llvm_tools
    from gfx950emu.hip import shim

    os.environ.setdefault("GFX950EMU_CACHE", str(paths.cache_dir() / "gfx950emu"))   # as _env() sets it
    out: dict[str, Any] = {}
    try:
        out["llvm_tools"] = find_llvm_tools().describe()
    except CodeObjectError as err:
        out["llvm_tools"] = None
        out["problem"] = str(err)
    if shim.library_path().is_file():
        out["hip_shim"] = str(shim.library_path())
    else:
        try:
            out["hip_shim"] = f"not built yet (will build with {shim.find_compiler()[0]})"
        except shim.ShimBuildError as err:
            out["hip_shim"] = None
            out.setdefault("problem", str(err))
    out["ok"] = "problem" not in out
    return out


def _lib():
    import gfx950emu.hip as hip

    lib = hip.library()
    if lib is None:
        raise EmulatedDeviceError("the emulated device is not loaded; call emulated_device.prepare() first")
    return lib


def _call(name: str, *args) -> None:
    import gfx950emu.hip as hip

    code = getattr(_lib(), name)(*args)
    if code:
        dev = hip.device()
        detail = dev.errors[-1]["message"] if dev and dev.errors else ""
        if dev:
            dev.errors.clear()
        raise EmulatedDeviceError(f"{name} failed with hipError {code}: {detail}")


def _nbytes(t) -> int:
    return t.untyped_storage().nbytes()


#: device pointer -> the finalizer that frees it (when its tensor dies, or in to_host)
_OWNED: dict = {}


def _free(ptr: int) -> None:
    _OWNED.pop(ptr, None)
    lib = __import__("gfx950emu.hip", fromlist=["library"]).library()
    if lib is not None:
        lib.hipFree(ctypes.c_void_p(ptr))


@contextlib.contextmanager
def _quiet():
    """FlyDSL's in-process compile and runtime print to the C-level stdout/stderr; keep it, show it on failure."""
    from ._compile_worker import redirect_fds

    with tempfile.TemporaryFile(mode="w+") as log, redirect_fds(log) as restore_stderr:
        try:
            yield log
        except BaseException:
            restore_stderr()
            log.seek(0)
            text = log.read().strip()
            if text:
                print(f"--- FlyDSL output (tail) ---\n{text[-2000:]}", file=sys.stderr)
            raise


def to_device(inputs: dict) -> dict:
    """Copy every torch tensor of ``inputs`` into emulated device memory (``hipMalloc`` + ``hipMemcpy``);
    other values pass through.  A tensor keeps its shape, strides and storage offset."""
    import torch

    out = {}
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            out[key] = value
            continue
        if value.device.type != "cpu":
            raise EmulatedDeviceError(f"input {key!r} is on {value.device}; the emulated device takes CPU tensors")
        n = _nbytes(value)
        if n == 0:
            out[key] = value.clone()
            continue
        ptr = ctypes.c_void_p()
        _call("hipMalloc", ctypes.byref(ptr), ctypes.c_size_t(n))
        _call("hipMemcpy", ptr, ctypes.c_void_p(value.untyped_storage().data_ptr()), ctypes.c_size_t(n), 1)
        raw = torch.frombuffer((ctypes.c_uint8 * n).from_address(ptr.value), dtype=torch.uint8)
        out[key] = raw.view(value.dtype).as_strided(value.shape, value.stride(), value.storage_offset())
        _OWNED[ptr.value] = weakref.finalize(out[key], _free, ptr.value)
    return out


def to_host(on_device: dict, like: dict) -> dict:
    """Copy every device tensor back into a new CPU tensor (``hipMemcpy`` device-to-host) and free it."""
    import torch

    out = {}
    for key, value in on_device.items():
        orig = like.get(key)
        if not isinstance(value, torch.Tensor) or not isinstance(orig, torch.Tensor) or _nbytes(orig) == 0:
            out[key] = value
            continue
        n = _nbytes(orig)
        host = torch.empty(n, dtype=torch.uint8)
        base = value.untyped_storage().data_ptr()
        _call("hipMemcpy", ctypes.c_void_p(host.data_ptr()), ctypes.c_void_p(base), ctypes.c_size_t(n), 2)
        fin = _OWNED.pop(base, None)
        if fin is not None:
            fin()
        out[key] = host.view(orig.dtype).as_strided(orig.shape, orig.stride(), orig.storage_offset())
    return out


def run(build: Callable[[], Any], inputs: dict, device_args: Callable[[dict], tuple], *,
        hazards: str = "report", processes: int = 1, timing: bool = False, **launch_options) -> dict[str, Any]:
    """Run one launcher on the emulated device: ``build()`` -> FlyDSL launcher, ``device_args(on_device)``
    -> its arguments.  Returns ``inputs`` (every tensor copied back to the host), ``seconds`` (wall time
    of the launcher call, compile included: not a kernel time), ``hazards`` (count over the launches),
    ``hazard_reports``, ``launches`` (the device's log: kernel, grid, block, emulator seconds, clock),
    ``hip_calls`` (HIP function -> calls, this run).
    ``launch_options`` go to every :func:`gfx950emu.launch` (e.g. ``delivery=``, ``wave_order=``)."""
    dev = prepare(hazards=hazards, timing=timing, processes=processes)
    dev.reset_log()
    dev.launch_options = dict(launch_options)
    try:
        launcher = build()
        on_device = to_device(inputs)
        try:
            start = time.perf_counter()
            with _quiet():
                launcher(*device_args(on_device))
            _call("hipDeviceSynchronize")
            seconds = time.perf_counter() - start
            failed = list(dev.errors)
        finally:
            host = to_host(on_device, inputs)
    finally:
        dev.launch_options = {}
    if failed:
        e = failed[0]
        raise EmulatedDeviceError(f"{e['call']} failed on the emulated device ({e['error']}): {e['message']}")
    if not dev.launches:
        raise EmulatedDeviceError("the launcher returned without launching a kernel on the emulated device")
    reports = [r for launch in dev.launches for r in launch["hazard_reports"]]
    return {
        "inputs": host,
        "seconds": round(seconds, 3),
        "hazards": sum(launch["hazards"] for launch in dev.launches),
        "hazard_reports": reports[:5],
        "wait_state_hazards": sum(launch.get("wait_state_hazards", 0) for launch in dev.launches),
        "launches": [dict(launch) for launch in dev.launches],
        "hip_calls": dict(sorted(dev.calls.items())),     # evidence of the path: which HIP calls ran, how often
    }


# --------------------------------------------------------------------------- bench harness


class _Stream:
    """A HIP stream handle in the form FlyDSL's ``fx.Stream`` reads (``.cuda_stream``)."""

    def __init__(self, handle: int):
        self.cuda_stream = handle


class EmulatedBackend:
    """The bench harness's backend (``HarnessSettings(backend="emulated")``) on the emulated device.

    It has the interface of ``bench.timing.TorchBackend`` -- events, synchronize, graph capture and
    replay -- through the HIP calls of the shim, plus ``to_device`` / ``stream`` for
    ``bench.launchers.kernel_case``.  Its clock (``clock``) is ``"launch-count"`` (1 us per launch:
    elapsed times count launches) or ``"modelled"`` with ``timing=True``: NEVER a measurement.  Graph
    capture records the launches (kernel, grid, block, argument bytes) and replays them, as HIP
    stream capture would.
    """

    name = "emulated"
    device = "emulated-gfx950"

    def __init__(self, index: int = 0, seed: int = 0, timing: bool = False, hazards: str = "report"):
        if index != 0:
            raise EmulatedDeviceError(f"the emulated machine has one device (0), not {index}")
        self.index = index
        self.dev = prepare(hazards=hazards, clock="modelled" if timing else "launch-count")
        self.dev.reset_log()
        self.clock = self.dev.clock
        handle = ctypes.c_void_p()
        _call("hipStreamCreate", ctypes.byref(handle))
        self._stream = _Stream(handle.value)

    def facts(self) -> dict:
        from gfx950emu.hip import PROPERTIES

        return {"index": self.index, "name": PROPERTIES["name"], "arch": "gfx950", "runtime": "gfx950emu.hip",
                "clock": self.clock, "l2_cache_bytes": 4 * 2**20, "llc_bytes": 256 * 2**20,
                "cu_count": PROPERTIES["multiProcessorCount"]}

    def to_device(self, tensor):
        return to_device({"t": tensor})["t"]

    def stream(self):
        return self._stream

    def event(self):
        ev = ctypes.c_void_p()
        _call("hipEventCreate", ctypes.byref(ev))
        return ev

    def _check(self):
        """Launches fail inside FlyDSL's launcher, which only prints; raise the first failure here."""
        if self.dev.errors:
            e = self.dev.errors[0]
            self.dev.errors.clear()
            raise EmulatedDeviceError(f"{e['call']} failed on the emulated device ({e['error']}): {e['message']}")

    def record(self, ev):
        self._check()
        _call("hipEventRecord", ev, ctypes.c_void_p(self._stream.cuda_stream))

    def elapsed_ms(self, start, end) -> float:
        self._check()
        ms = ctypes.c_float()
        _call("hipEventElapsedTime", ctypes.byref(ms), start, end)
        return float(ms.value)

    def synchronize(self):
        self._check()
        _call("hipDeviceSynchronize")

    def capture(self, fn):
        self.dev.begin_capture()
        try:
            fn()
        finally:
            graph = self.dev.end_capture()
        return graph

    def replay(self, graph):
        try:
            self.dev.replay(graph)
        except Exception as err:
            raise EmulatedDeviceError(f"a replayed launch failed on the emulated device: {type(err).__name__}: "
                                      f"{str(err).splitlines()[0] if str(err) else ''}") from None
        self._check()

    def empty_cache(self):
        pass


def run_variant(variant, module, params: dict, inputs: dict, opts: dict, call_with_switches) -> dict[str, Any]:
    """``runner.RUNNERS["emulated-device"]``: run a variant the way ``--backend device`` does, leave its
    buffers in ``inputs``; ``opts`` are the runner's launch options (``hazards``, ``processes``,
    ``delivery``/``wave_order``/``seed``)."""
    opts = dict(opts)
    hazards, processes = opts.pop("hazards", "report"), opts.pop("processes", 1)
    run_ = run(lambda: module.build(**params), inputs,
               lambda on_dev: call_with_switches(module.device_args, on_dev, variant.switches),
               hazards=hazards, processes=processes, **opts)
    inputs.update(run_.pop("inputs"))
    return run_


__all__ = ["EmulatedBackend", "EmulatedDeviceError", "EmulatedDeviceUnavailable", "prepare", "run", "run_variant", "to_device", "to_host"]
