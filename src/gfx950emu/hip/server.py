"""The Python side of the emulated HIP runtime: one emulated MI355X (gfx950) behind the shim's entry points.

Memory is host memory.  ``hipMalloc`` hands out 256-byte aligned host allocations that this server
owns; ``hipHostRegister`` makes existing host memory (say a CPU torch tensor's storage) a region
kernels may use, and ``hipHostGetDevicePointer`` returns the same address.  Copies and memsets are
plain host memory moves, done at once: every stream is synchronous, so ``*Async`` calls finish before
they return and synchronisation calls have nothing to wait for.

``hipModuleLoadData`` keeps the code object (its size read from the ELF headers);
``hipModuleGetFunction`` loads the named kernel with :func:`gfx950emu.load_code_object`;
``hipModuleLaunchKernel`` reads the kernel arguments -- from ``kernelParams`` (one pointer per argument,
as MLIR's runtime passes them) or the ``extra`` HIP_LAUNCH_PARAM_BUFFER_POINTER buffer -- at the
offsets and sizes of the kernel's metadata ``.args``, turns every pointer (a ``global_buffer``, or an
8-byte ``by_value`` that points into a known region) into a view of that region, and runs
:func:`gfx950emu.launch` with the hazard checker.  Each launch is logged in :attr:`Device.launches`
(kernel, grid, block, hazards, emulator seconds, modelled time when on).

Events: the device keeps one clock, in one of three modes (:attr:`Device.clock`), none a measurement:

* ``"zero"`` (default): it stands still; every elapsed time is 0 ms;
* ``"launch-count"``: each kernel launch advances it by exactly 1 us, so an elapsed time counts the
  launches between two events (for checking a harness's launch counts, not a time);
* ``"modelled"``: each launch advances it by the timing model's kernel time (needs a gfx950emu whose
  ``launch`` takes ``timing=True``).  The timing model executes only its sample of workgroups and no
  hazard checker, so buffers then hold only the sampled workgroups' writes: a clock for timing
  harnesses, not for verification.

Graph capture: between :meth:`Device.begin_capture` and :meth:`Device.end_capture` launches are
recorded (function, grid, block, a copy of the argument bytes) instead of run, as HIP stream capture
records kernel nodes; :meth:`Device.replay` runs them again in order.

Errors: a failing call returns its hipError_t and is recorded in :attr:`Device.errors` with a one-line
reason; :meth:`Device.check` raises the first one as :class:`HipError`.
"""
from __future__ import annotations

import bisect
import ctypes as C
import inspect
import struct
import threading

import numpy as np

from .shim import ERRORS, SPEC

# hipError_t values (hip_runtime_api.h)
SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NOT_INITIALIZED = 0, 1, 2, 3
INVALID_DEVICE_FUNCTION, INVALID_DEVICE, INVALID_IMAGE = 98, 101, 200
INVALID_HANDLE, NOT_FOUND, ILLEGAL_ADDRESS, LAUNCH_FAILURE, NOT_SUPPORTED, UNKNOWN = 400, 500, 700, 719, 801, 999

# hipMemcpyKind
H2H, H2D, D2H, D2D, DEFAULT = 0, 1, 2, 3, 4
# the ``extra`` launch keys (hip_runtime_api.h: HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE/END)
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 1, 2, 3

#: What the device says it is.  Hardware limits: AMD CDNA4 ISA reference / MI355X data sheet
#: (256 CUs, 160 KiB LDS per CU, 288 GB HBM3E); waves per SIMD from LLVM AMDGPUBaseInfo
#: (getMaxWavesPerEU: 8 on gfx90a and later); 512 unified VGPRs per lane (AMDGPUUsage, gfx90a+).
PROPERTIES = {
    "name": "AMD Instinct MI355X (emulated by gfx950emu)",
    "gcnArchName": "gfx950:sramecc+:xnack-",
    "multiProcessorCount": 256,
    "warpSize": 64,
    "maxThreadsPerBlock": 1024,
    "maxSharedMemoryPerMultiProcessor": 163840,
    "totalGlobalMem": 288 * 10**9,
    "simdPerCU": 4,
    "maxWavesPerSimd": 8,
    "vgprsPerLane": 512,
    "runtimeVersion": 70000000,
}

CLOCKS = ("zero", "launch-count", "modelled")

_CT = {"void**": C.c_void_p, "void*": C.c_void_p, "const void*": C.c_void_p, "int*": C.c_void_p,
       "float*": C.c_void_p, "size_t*": C.c_void_p, "char*": C.c_void_p, "const char*": C.c_void_p,
       "unsigned int": C.c_uint, "int": C.c_int, "size_t": C.c_size_t, "unsigned short": C.c_ushort}


class HipError(RuntimeError):
    """A HIP call the emulated device refused; ``code`` is its hipError_t."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _put(ptr, ctype, value):
    if not ptr:
        raise HipError(INVALID_VALUE, "a NULL output pointer")
    ctype.from_address(ptr).value = value


def _elf_size(image: int) -> int:
    """Bytes of the ELF (or clang offload bundle) at ``image``, from its headers."""
    head = C.string_at(image, 64)
    if head.startswith(b"__CLANG_OFFLOAD_BUNDLE__"):
        (n,) = struct.unpack_from("<Q", head, 24)
        end, pos = 32, 32
        for _ in range(n):
            off, size, idlen = struct.unpack_from("<QQQ", C.string_at(image + pos, 24))
            end = max(end, off + size)
            pos += 24 + idlen
        return max(end, pos)
    if head[:4] != b"\x7fELF" or head[4] != 2:
        raise HipError(INVALID_IMAGE, "hipModuleLoadData: the image is not a 64-bit ELF code object")
    phoff, shoff = struct.unpack_from("<QQ", head, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
    end = max(64, phoff + phentsize * phnum, shoff + shentsize * shnum)
    for k in range(shnum):
        sh = C.string_at(image + shoff + k * shentsize, 64)
        if struct.unpack_from("<I", sh, 4)[0] != 8:            # not SHT_NOBITS
            off, size = struct.unpack_from("<QQ", sh, 24)
            end = max(end, off + size)
    for k in range(phnum):
        off, filesz = struct.unpack_from("<Q16xQ", C.string_at(image + phoff + k * phentsize, 40), 8)
        end = max(end, off + filesz)
    return end


class _Function:
    def __init__(self, module, name, program):
        self.module, self.name, self.program = module, name, program


class Device:
    """One emulated gfx950 device; :func:`gfx950emu.hip.load` wires it to the shim."""

    def __init__(self, hazards: str = "report", timing: bool = False, processes: int = 1):
        self.hazards, self.processes = hazards, processes
        self.clock = "zero"
        self.set_timing(timing)
        self._capture = None
        self.launch_options = {}       # extra gfx950emu.launch keywords (delivery=, wave_order=, ...)
        self._lock = threading.RLock()
        self.allocations = {}          # base -> (size, keep-alive numpy array)
        self.registered = {}           # base -> size (host memory made visible to kernels)
        self.freed = []                # (base, end) of the last hipFree'd allocations, for diagnostics
        self._starts, self._regions = [], []
        self.modules, self.functions, self.streams, self.events = {}, {}, {0}, {}
        self._next = 0x1000
        self.device = 0
        self.clock_us = 0.0
        self.launches = []
        self.errors = []
        self.calls = {}
        self._callbacks = []

    # ------------------------------------------------------------- set-up ----
    @property
    def timing(self) -> bool:
        return self.clock == "modelled"

    def set_timing(self, on: bool) -> None:
        """``True``: the modelled clock; ``False``: back to ``"zero"``."""
        self.set_clock("modelled" if on else "zero")

    def set_clock(self, mode: str) -> None:
        if mode not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {mode!r}")
        if mode == "modelled":
            from .. import launch
            if "timing" not in inspect.signature(launch).parameters:
                raise HipError(NOT_SUPPORTED, "this gfx950emu has no timing model (launch(..., timing=True)); "
                                              "use the 'zero' or 'launch-count' clock")
        self.clock = mode

    # ---------------------------------------------------------- capture ----
    def begin_capture(self) -> None:
        if self._capture is not None:
            raise HipError(NOT_SUPPORTED, "a capture is already open")
        self._capture = []

    def end_capture(self) -> list:
        graph, self._capture = self._capture, None
        if graph is None:
            raise HipError(NOT_SUPPORTED, "end_capture without begin_capture")
        return graph

    def replay(self, graph: list) -> None:
        with self._lock:
            for node in graph:
                self._execute(*node)

    def install(self, lib) -> None:
        """Fill the shim's slot table with this device's methods (ctypes callbacks)."""
        if lib.gfx950emu_hip_nslots() != len(SPEC):
            raise HipError(NOT_INITIALIZED, "the loaded HIP shim was built from another gfx950emu version")
        for k, (name, params) in enumerate(SPEC):
            proto = C.CFUNCTYPE(C.c_int, *[_CT[t] for t in params])
            cb = proto(self._wrap(name, getattr(self, name)))
            self._callbacks.append(cb)
            lib.gfx950emu_hip_set(k, C.cast(cb, C.c_void_p))

    def _wrap(self, name, fn):
        def call(*args):
            self.calls[name] = self.calls.get(name, 0) + 1
            try:
                with self._lock:
                    r = fn(*args)
                return SUCCESS if r is None else int(r)
            except HipError as e:
                self._record(name, e.code, str(e))
                return e.code
            except Exception as e:           # a Python failure must never unwind into C
                from ..errors import MemoryFault
                code = UNKNOWN
                if name == "hipModuleLaunchKernel":
                    code = ILLEGAL_ADDRESS if isinstance(e, MemoryFault) else LAUNCH_FAILURE
                self._record(name, code, f"{type(e).__name__}: {e}")
                return code
        return call

    def _record(self, name, code, message):
        self.errors.append({"call": name, "code": code, "error": ERRORS.get(code, "hipErrorUnknown"),
                            "message": str(message).strip().splitlines()[0] if str(message).strip() else ""})

    def check(self) -> None:
        """Raise the first recorded error (and forget them all)."""
        if self.errors:
            e, self.errors = self.errors[0], []
            raise HipError(e["code"], f"{e['call']} failed ({e['error']}): {e['message']}")

    def reset_log(self) -> None:
        self.launches, self.errors, self.calls = [], [], {}

    def _handle(self):
        self._next += 0x10
        return self._next

    # ------------------------------------------------------------- memory ----
    def _reindex(self):
        regions = sorted([(b, b + s, "malloc") for b, (s, _) in self.allocations.items()]
                         + [(b, b + s, "registered") for b, s in self.registered.items()])
        self._regions, self._starts = regions, [r[0] for r in regions]

    def region(self, addr: int):
        """(start, end, kind) of the known region holding ``addr``, or None."""
        k = bisect.bisect_right(self._starts, addr) - 1
        if k >= 0 and self._regions[k][0] <= addr < self._regions[k][1]:
            return self._regions[k]
        return None

    def _check_range(self, addr, n, what):
        r = self.region(addr)
        if r is None or addr + n > r[1]:
            raise HipError(INVALID_VALUE, f"{what}: 0x{addr:x}+{n} is not inside memory from hipMalloc or hipHostRegister")

    def hipMalloc(self, out, size):
        if size == 0:
            _put(out, C.c_void_p, None)
            return
        free = PROPERTIES["totalGlobalMem"] - sum(s for s, _ in self.allocations.values())
        if size > free:
            raise HipError(OUT_OF_MEMORY, f"hipMalloc({size}): the emulated device has {free} bytes left")
        buf = np.zeros(size + 256, dtype=np.uint8)
        base = (buf.ctypes.data + 255) & ~255
        self.allocations[base] = (size, buf)
        self._reindex()
        _put(out, C.c_void_p, base)

    def hipFree(self, ptr):
        if not ptr:
            return
        if ptr not in self.allocations:
            raise HipError(INVALID_VALUE, f"hipFree(0x{ptr:x}): not an address hipMalloc returned")
        self.freed = (self.freed + [(ptr, ptr + self.allocations[ptr][0])])[-4096:]
        del self.allocations[ptr]
        self._reindex()

    def hipHostRegister(self, ptr, size, flags):
        if not ptr or not size:
            raise HipError(INVALID_VALUE, "hipHostRegister: NULL pointer or zero size")
        if ptr in self.registered:
            raise HipError(INVALID_VALUE, f"hipHostRegister(0x{ptr:x}): already registered")
        self.registered[ptr] = size
        self._reindex()

    def hipHostUnregister(self, ptr):
        if self.registered.pop(ptr or 0, None) is None:
            raise HipError(INVALID_VALUE, f"hipHostUnregister(0x{ptr or 0:x}): not registered")
        self._reindex()

    def hipHostGetDevicePointer(self, out, host, flags):
        r = self.region(host or 0)
        if r is None or r[2] != "registered":
            raise HipError(INVALID_VALUE, f"hipHostGetDevicePointer(0x{host or 0:x}): not registered host memory")
        _put(out, C.c_void_p, host)

    def hipMemcpy(self, dst, src, n, kind):
        if not n:
            return
        if not dst or not src:
            raise HipError(INVALID_VALUE, "hipMemcpy: NULL pointer")
        if kind not in (H2H, H2D, D2H, D2D, DEFAULT):
            raise HipError(INVALID_VALUE, f"hipMemcpy: unknown hipMemcpyKind {kind}")
        if kind in (H2D, D2D):
            self._check_range(dst, n, "hipMemcpy destination")
        if kind in (D2H, D2D):
            self._check_range(src, n, "hipMemcpy source")
        C.memmove(dst, src, n)

    def hipMemcpyAsync(self, dst, src, n, kind, stream):
        self._stream(stream)
        return self.hipMemcpy(dst, src, n, kind)

    def _fill(self, dst, value, count, dtype, what):
        if not count:
            return
        nbytes = count * np.dtype(dtype).itemsize
        self._check_range(dst or 0, nbytes, what)
        np.ctypeslib.as_array((C.c_uint8 * nbytes).from_address(dst)).view(dtype)[:] = value

    def hipMemset(self, dst, value, n):
        self._fill(dst, value & 0xFF, n, np.uint8, "hipMemset")

    def hipMemsetAsync(self, dst, value, n, stream):
        self._stream(stream)
        self._fill(dst, value & 0xFF, n, np.uint8, "hipMemsetAsync")

    def hipMemsetD16Async(self, dst, value, count, stream):
        self._stream(stream)
        self._fill(dst, value & 0xFFFF, count, np.uint16, "hipMemsetD16Async")

    def hipMemsetD32Async(self, dst, value, count, stream):
        self._stream(stream)
        self._fill(dst, value & 0xFFFFFFFF, count, np.uint32, "hipMemsetD32Async")

    def hipMemGetInfo(self, free_out, total_out):
        total = PROPERTIES["totalGlobalMem"]
        _put(free_out, C.c_size_t, total - sum(s for s, _ in self.allocations.values()))
        _put(total_out, C.c_size_t, total)

    # ------------------------------------------------------------ devices ----
    def hipGetDevice(self, out):
        _put(out, C.c_int, self.device)

    def hipSetDevice(self, dev):
        if dev != 0:
            raise HipError(INVALID_DEVICE, f"hipSetDevice({dev}): the emulated machine has one device (0)")

    def hipGetDeviceCount(self, out):
        _put(out, C.c_int, 1)

    def hipDeviceGetName(self, buf, length, dev):
        if dev != 0:
            raise HipError(INVALID_DEVICE, f"hipDeviceGetName: no device {dev}")
        name = PROPERTIES["name"].encode()[:max(length - 1, 0)] + b"\0"
        C.memmove(buf, name, len(name))

    def hipRuntimeGetVersion(self, out):
        _put(out, C.c_int, PROPERTIES["runtimeVersion"])

    def hipDriverGetVersion(self, out):
        _put(out, C.c_int, PROPERTIES["runtimeVersion"])

    def hipDeviceSynchronize(self):
        return None

    # ----------------------------------------------------- streams, events ----
    def _stream(self, stream):
        if (stream or 0) not in self.streams:
            raise HipError(INVALID_HANDLE, f"unknown stream 0x{stream:x}")

    def hipStreamCreate(self, out):
        h = self._handle()
        self.streams.add(h)
        _put(out, C.c_void_p, h)

    def hipStreamCreateWithFlags(self, out, flags):
        return self.hipStreamCreate(out)

    def hipStreamDestroy(self, stream):
        if not stream or stream not in self.streams:
            raise HipError(INVALID_HANDLE, f"hipStreamDestroy: unknown stream 0x{stream or 0:x}")
        self.streams.discard(stream)

    def hipStreamSynchronize(self, stream):
        self._stream(stream)

    def hipStreamQuery(self, stream):
        self._stream(stream)

    def hipStreamWaitEvent(self, stream, event, flags):
        self._stream(stream)
        self._event(event)

    def _event(self, event):
        if not event or event not in self.events:
            raise HipError(INVALID_HANDLE, f"unknown event 0x{event or 0:x}")

    def hipEventCreateWithFlags(self, out, flags):
        h = self._handle()
        self.events[h] = None
        _put(out, C.c_void_p, h)

    def hipEventCreate(self, out):
        return self.hipEventCreateWithFlags(out, 0)

    def hipEventDestroy(self, event):
        self._event(event)
        del self.events[event]

    def hipEventRecord(self, event, stream):
        self._event(event)
        self._stream(stream)
        self.events[event] = self.clock_us

    def hipEventSynchronize(self, event):
        self._event(event)

    def hipEventQuery(self, event):
        self._event(event)

    def hipEventElapsedTime(self, out, start, stop):
        self._event(start)
        self._event(stop)
        if self.events[start] is None or self.events[stop] is None:
            raise HipError(INVALID_HANDLE, "hipEventElapsedTime: an event was never recorded")
        _put(out, C.c_float, (self.events[stop] - self.events[start]) / 1000.0)

    # ------------------------------------------------------------ modules ----
    def hipModuleLoadData(self, out, image):
        if not image:
            raise HipError(INVALID_VALUE, "hipModuleLoadData: NULL image")
        data = C.string_at(image, _elf_size(image))
        from ..codeobject import CodeObjectError, kernel_names
        try:
            names = kernel_names(data)
        except CodeObjectError as e:
            raise HipError(INVALID_IMAGE, f"hipModuleLoadData: {e}") from None
        h = self._handle()
        self.modules[h] = {"data": data, "kernels": names}
        _put(out, C.c_void_p, h)

    def hipModuleLoad(self, out, path):
        from pathlib import Path
        data = Path(C.string_at(path).decode()).read_bytes()
        buf = C.create_string_buffer(data, len(data))
        return self.hipModuleLoadData(out, C.addressof(buf))

    def hipModuleUnload(self, module):
        if module not in self.modules:
            raise HipError(INVALID_HANDLE, f"hipModuleUnload: unknown module 0x{module or 0:x}")
        del self.modules[module]
        for h in [h for h, f in self.functions.items() if f.module == module]:
            del self.functions[h]

    def hipModuleGetFunction(self, out, module, name_ptr):
        if module not in self.modules:
            raise HipError(INVALID_HANDLE, f"hipModuleGetFunction: unknown module 0x{module or 0:x}")
        name = C.string_at(name_ptr).decode()
        mod = self.modules[module]
        if name not in mod["kernels"]:
            raise HipError(NOT_FOUND, f"hipModuleGetFunction: no kernel {name!r} in the module "
                                      f"(it holds {', '.join(mod['kernels'])})")
        from ..codeobject import load_code_object
        prog = load_code_object(mod["data"], kernel=name)
        h = self._handle()
        self.functions[h] = _Function(module, name, prog)
        _put(out, C.c_void_p, h)

    def _function(self, f):
        if f not in self.functions:
            raise HipError(INVALID_DEVICE_FUNCTION, f"unknown function handle 0x{f or 0:x}")
        return self.functions[f]

    def hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(self, out, f, block_size, dyn_lds):
        _put(out, C.c_int, occupancy(self._function(f).program, block_size, dyn_lds))

    # ------------------------------------------------------------- launch ----
    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        fn = self._function(f)
        self._stream(stream)
        prog = fn.program
        user = [a for a in prog.args if not str(a.get(".value_kind", "")).startswith("hidden_")]
        raw = self._argument_bytes(prog, user, params, extra)
        node = (fn, (gx, gy, gz), (bx, by, bz), int(shmem), raw)
        if self._capture is not None:
            self._capture.append(node)
            return
        self._execute(*node)

    def _execute(self, fn, grid, block, shmem, raw):
        prog = fn.program
        user = [a for a in prog.args if not str(a.get(".value_kind", "")).startswith("hidden_")]
        args, pointers = self._launch_args(prog, user, raw)
        from .. import launch
        kw = {"hazards": self.hazards, "processes": self.processes, "lds_bytes": shmem, **self.launch_options}
        if self.timing:     # the timing model runs its sample of workgroups, without the hazard checker
            kw.update(timing=True, hazards="off")
        res = launch(prog, grid=grid, block=block, args=args, **kw)
        ordering = [h for h in res.hazards if h.kind != "wait_states"]
        entry = {"kernel": prog.name, "grid": list(grid), "block": list(block), "dynamic_lds": shmem,
                 "pointers": pointers,
                 # s_waitcnt / LDS-ordering hazards apart from s_nop wait-state reports (kind "wait_states")
                 "hazards": len(ordering), "hazard_reports": [str(h) for h in ordering[:5]],
                 "wait_state_hazards": len(res.hazards) - len(ordering),
                 "emulator_seconds": round(res.seconds, 4), "clock": self.clock}
        timing = getattr(res, "timing", None)
        if self.clock == "modelled" and timing:
            us = float(timing["kernel"]["us"])
            entry.update(modelled_us=us, outputs="sampled workgroups only (timing model)",
                         sampled_workgroups=timing.get("sampled_workgroups"))
            self.clock_us += us
        elif self.clock == "launch-count":
            self.clock_us += 1.0
        self.launches.append(entry)

    def _argument_bytes(self, prog, user, params, extra):
        """Each user argument's bytes, from kernelParams or the extra buffer."""
        if extra:
            buf = size = None
            k = 0
            while True:
                key = C.c_void_p.from_address(extra + 8 * k).value or 0
                if key == _PARAM_END:
                    break
                val = C.c_void_p.from_address(extra + 8 * k + 8).value or 0
                if key == _PARAM_BUFFER_POINTER:
                    buf = val
                elif key == _PARAM_BUFFER_SIZE:
                    size = C.c_size_t.from_address(val).value if val else None
                else:
                    raise HipError(INVALID_VALUE, f"hipModuleLaunchKernel: unknown extra key {key}")
                k += 2
                if k > 64:
                    raise HipError(INVALID_VALUE, "hipModuleLaunchKernel: extra has no HIP_LAUNCH_PARAM_END")
            if not buf or size is None:
                raise HipError(INVALID_VALUE, "hipModuleLaunchKernel: extra lacks the argument buffer or its size")
            need = max((int(a[".offset"]) + int(a[".size"]) for a in user), default=0)
            if size < need:
                raise HipError(INVALID_VALUE, f"hipModuleLaunchKernel: argument buffer of {size} bytes; "
                                              f"{prog.name}'s arguments need {need}")
            blob = C.string_at(buf, size)
            return [blob[int(a[".offset"]):int(a[".offset"]) + int(a[".size"])] for a in user]
        if not params:
            if user:
                raise HipError(INVALID_VALUE, f"hipModuleLaunchKernel: {prog.name} takes {len(user)} arguments, "
                                              "got neither kernelParams nor extra")
            return []
        out = []
        for k, a in enumerate(user):
            p = C.c_void_p.from_address(params + 8 * k).value
            if not p:
                raise HipError(INVALID_VALUE, f"hipModuleLaunchKernel: kernelParams[{k}] is NULL")
            out.append(C.string_at(p, int(a[".size"])))
        return out

    def _launch_args(self, prog, user, raw):
        """(gfx950emu.launch args, pointer values): each pointer -> a view of its region, up to the next
        argument's pointer."""
        ptrs = {}
        for k, (a, b) in enumerate(zip(user, raw)):
            kind = a.get(".value_kind")
            if len(b) == 8 and kind in ("global_buffer", "by_value"):
                p = int.from_bytes(b, "little")
                if p and (kind == "global_buffer" or self.region(p) is not None):
                    ptrs[k] = p
        args = []
        for k, (a, b) in enumerate(zip(user, raw)):
            what = f"{prog.name} argument {k} ({a.get('.name') or a.get('.value_kind')})"
            if len(b) == 8 and k not in ptrs:
                v = int.from_bytes(b, "little")
                if any(lo <= v < hi for lo, hi in self.freed):
                    raise HipError(INVALID_VALUE, f"{what} = 0x{v:x} points into no memory from hipMalloc or "
                                                  "hipHostRegister; it lies in memory released with hipFree "
                                                  "(use after free?)")
            if k not in ptrs:
                if a.get(".value_kind") == "global_buffer":
                    args.append(None)                   # a NULL pointer
                elif a.get(".value_kind") == "by_value":
                    args.append(bytes(b))
                else:
                    raise HipError(NOT_SUPPORTED, f"{what}: argument kind {a.get('.value_kind')!r} is not supported")
                continue
            p = ptrs[k]
            r = self.region(p)
            if r is None:
                why = ("it lies in memory released with hipFree (use after free?)"
                       if any(lo <= p < hi for lo, hi in self.freed) else "a host pointer the device cannot see?")
                raise HipError(INVALID_VALUE, f"{what} = 0x{p:x} points into no memory from hipMalloc or "
                                              f"hipHostRegister ({why})")
            same = [j for j, q in ptrs.items() if q == p and j != k]
            if same:
                raise HipError(NOT_SUPPORTED, f"{what} and argument {same[0]} are the same pointer 0x{p:x}; the "
                                              "emulated device maps each pointer argument separately")
            end = min([q for q in ptrs.values() if p < q < r[1]] + [r[1]])
            args.append(np.ctypeslib.as_array((C.c_uint8 * (end - p)).from_address(p)))
        return args, [ptrs[k] for k in sorted(ptrs)]


def occupancy(prog, block_size: int, dynamic_lds: int = 0) -> int:
    """Workgroups of ``prog`` one CU holds at once: waves (VGPRs, 8 per SIMD), LDS, and 1024 items."""
    if block_size < 1 or block_size > 1024:
        raise HipError(INVALID_VALUE, f"block size {block_size} is not in 1..1024")
    waves = -(-block_size // 64)
    vgpr = int(prog.descriptor.get("next_free_vgpr", 512) or 512)
    vgpr = max(8, -(-vgpr // 8) * 8)
    per_simd = min(PROPERTIES["maxWavesPerSimd"], PROPERTIES["vgprsPerLane"] // vgpr)
    by_waves = per_simd * PROPERTIES["simdPerCU"] // waves
    lds = prog.lds_size + int(dynamic_lds)
    by_lds = PROPERTIES["maxSharedMemoryPerMultiProcessor"] // lds if lds else by_waves
    return max(0, min(by_waves, by_lds))
