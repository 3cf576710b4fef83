"""gfx950emu.hip: the libamdhip64.so.7 shim and its Python device, called through the C entry points
exactly as a HIP program (FlyDSL's libfly_jit_runtime.so) calls them.

Needs a C compiler for the shim (skips with the reason otherwise); the launch tests also need the
gfx950 LLVM tools of the code-object loader (see test_codeobject.py).
"""
import ctypes as C
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gfx950emu.hip import shim

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def hip():
    import gfx950emu.hip as H

    try:
        path = H.build()
    except H.ShimBuildError as err:
        pytest.skip(str(err))
    dev = H.load(hazards="strict")
    lib = H.library()
    lib.hipGetErrorName.restype = C.c_char_p
    dev.reset_log()
    yield lib, dev, path
    H.load(hazards="report")
    dev.reset_log()


def test_the_shim_exports_what_flydsl_needs_with_hip_4_2_versions(hip):
    lib, dev, path = hip
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to list dynamic symbols")
    out = subprocess.run([nm, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    wanted = {f"{name}@@hip_4.2" for name, _ in shim.SPEC} | {"hipGetLastError@@hip_4.2", "hipGetErrorName@@hip_4.2"}
    assert wanted <= exported
    flydsl = pytest.importorskip("flydsl")
    runtime = Path(flydsl.__file__).parent / "_mlir" / "_mlir_libs" / "libfly_jit_runtime.so"
    und = subprocess.run([nm, "-D", "--undefined-only", str(runtime)], capture_output=True, text=True).stdout
    needed = {line.split()[-1].replace("@", "@@", 1) for line in und.splitlines() if "hip" in line}
    assert needed and needed <= exported, sorted(needed - exported)
    readelf = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert "[libamdhip64.so.7]" in readelf


def test_memory_copies_and_memsets(hip):
    lib, dev, _ = hip
    ptr = C.c_void_p()
    assert lib.hipMalloc(C.byref(ptr), C.c_size_t(1000)) == 0 and ptr.value % 256 == 0
    src = np.arange(250, dtype=np.uint32)
    assert lib.hipMemcpy(ptr, C.c_void_p(src.ctypes.data), C.c_size_t(1000), 1) == 0
    back = np.zeros(250, np.uint32)
    assert lib.hipMemcpy(C.c_void_p(back.ctypes.data), ptr, C.c_size_t(1000), 2) == 0
    assert np.array_equal(back, src)
    assert lib.hipMemsetD32Async(ptr, C.c_int(7), C.c_size_t(10), None) == 0
    assert lib.hipMemsetD16Async(C.c_void_p(ptr.value + 40), C.c_ushort(0xABCD), C.c_size_t(2), None) == 0
    assert lib.hipMemset(C.c_void_p(ptr.value + 44), C.c_int(0x11), C.c_size_t(4)) == 0
    lib.hipMemcpy(C.c_void_p(back.ctypes.data), ptr, C.c_size_t(1000), 2)
    assert list(back[:12]) == [7] * 10 + [0xABCDABCD, 0x11111111] and back[12] == 12
    # a copy that runs off the allocation is refused, and says why
    assert lib.hipMemcpy(ptr, C.c_void_p(src.ctypes.data), C.c_size_t(1001), 1) == 1
    assert "not inside memory from hipMalloc" in dev.errors[-1]["message"]
    assert lib.hipGetLastError() == 1 and lib.hipGetLastError() == 0
    assert lib.hipFree(ptr) == 0
    assert lib.hipFree(ptr) == 1 and lib.hipGetErrorName(1) == b"hipErrorInvalidValue"
    dev.reset_log()


def test_device_queries_streams_and_events(hip):
    lib, dev, _ = hip
    n, d = C.c_int(), C.c_int(-1)
    assert lib.hipGetDeviceCount(C.byref(n)) == 0 and n.value == 1
    assert lib.hipGetDevice(C.byref(d)) == 0 and d.value == 0
    assert lib.hipSetDevice(0) == 0 and lib.hipSetDevice(1) == 101
    name = C.create_string_buffer(128)
    assert lib.hipDeviceGetName(name, 128, 0) == 0 and b"MI355X" in name.value
    s, e0, e1 = C.c_void_p(), C.c_void_p(), C.c_void_p()
    assert lib.hipStreamCreate(C.byref(s)) == 0
    assert lib.hipEventCreateWithFlags(C.byref(e0), 0) == 0 and lib.hipEventCreate(C.byref(e1)) == 0
    assert lib.hipEventRecord(e0, s) == 0 and lib.hipEventRecord(e1, s) == 0
    assert lib.hipStreamWaitEvent(s, e1, 0) == 0 and lib.hipStreamSynchronize(s) == 0
    ms = C.c_float(-1)
    assert lib.hipEventElapsedTime(C.byref(ms), e0, e1) == 0 and ms.value == 0.0 and dev.clock == "zero"
    assert lib.hipEventDestroy(e0) == 0 and lib.hipEventDestroy(e1) == 0 and lib.hipStreamDestroy(s) == 0
    assert lib.hipStreamSynchronize(s) == 400          # destroyed: invalid handle
    dev.reset_log()


def _vadd_module(hip, tmp_path):
    from test_codeobject import _complete_metadata, assemble

    lib, dev, _ = hip
    co = assemble(_complete_metadata((DATA / "vadd.s").read_text(), 16, 8), tmp_path).read_bytes()
    image = C.create_string_buffer(co, len(co))
    mod, fn = C.c_void_p(), C.c_void_p()
    assert lib.hipModuleLoadData(C.byref(mod), image) == 0, dev.errors
    del image                                           # the device keeps its own copy
    assert lib.hipModuleGetFunction(C.byref(fn), mod, b"nope") == 500
    assert "no kernel 'nope'" in dev.errors[-1]["message"]
    assert lib.hipModuleGetFunction(C.byref(fn), mod, b"vadd") == 0, dev.errors
    return lib, dev, mod, fn


def _device_array(lib, host):
    ptr = C.c_void_p()
    assert lib.hipMalloc(C.byref(ptr), C.c_size_t(host.nbytes)) == 0
    assert lib.hipMemcpy(ptr, C.c_void_p(host.ctypes.data), C.c_size_t(host.nbytes), 1) == 0
    return ptr


def test_load_and_launch_a_code_object_both_argument_conventions(hip, tmp_path):
    lib, dev, mod, fn = _vadd_module(hip, tmp_path)
    dev.reset_log()
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 1 << 20, 256, dtype=np.uint32) for _ in range(2))
    da, db = _device_array(lib, a), _device_array(lib, b)
    for convention in ("kernelParams", "extra"):
        dout = _device_array(lib, np.zeros(256, np.uint32))
        n = C.c_int(200)
        if convention == "kernelParams":
            vals = [C.c_void_p(da.value), C.c_void_p(db.value), C.c_void_p(dout.value), n]
            params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
            rc = lib.hipModuleLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None)
        else:
            buf = (C.c_uint8 * 28)()
            C.c_uint64.from_buffer(buf, 0).value, C.c_uint64.from_buffer(buf, 8).value = da.value, db.value
            C.c_uint64.from_buffer(buf, 16).value, C.c_int32.from_buffer(buf, 24).value = dout.value, 200
            size = C.c_size_t(28)
            extra = (C.c_void_p * 5)(1, C.addressof(buf), 2, C.addressof(size), 3)
            rc = lib.hipModuleLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, None, extra)
        assert rc == 0, dev.errors
        out = np.zeros(256, np.uint32)
        lib.hipMemcpy(C.c_void_p(out.ctypes.data), dout, C.c_size_t(1024), 2)
        assert np.array_equal(out[:200], a[:200] + 2 * b[:200]) and not out[200:].any()
        lib.hipFree(dout)
    assert [entry["grid"] for entry in dev.launches] == [[4, 1, 1]] * 2
    assert all(entry["hazards"] == 0 and entry["kernel"] == "vadd" for entry in dev.launches)
    # a pointer the device never saw is a launch failure with the reason, not a segfault
    stray = np.zeros(256, np.uint32)
    vals = [C.c_void_p(da.value), C.c_void_p(db.value), C.c_void_p(stray.ctypes.data), C.c_int(200)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    assert lib.hipModuleLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 1
    assert "points into no memory from hipMalloc or hipHostRegister" in dev.errors[-1]["message"]
    # ... unless it is registered host memory
    assert lib.hipHostRegister(C.c_void_p(stray.ctypes.data), C.c_size_t(stray.nbytes), 0) == 0
    dp = C.c_void_p()
    assert lib.hipHostGetDevicePointer(C.byref(dp), C.c_void_p(stray.ctypes.data), 0) == 0
    assert dp.value == stray.ctypes.data
    assert lib.hipModuleLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0
    assert np.array_equal(stray[:200], a[:200] + 2 * b[:200])
    assert lib.hipHostUnregister(C.c_void_p(stray.ctypes.data)) == 0
    # a kernel that runs off its buffers faults like a GPU would: hipErrorIllegalAddress
    dout = _device_array(lib, np.zeros(256, np.uint32))
    vals = [C.c_void_p(da.value), C.c_void_p(db.value), C.c_void_p(dout.value), C.c_int(300)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    assert lib.hipModuleLaunchKernel(fn, 5, 1, 1, 64, 1, 1, 0, None, params, None) == 700
    assert "unmapped address" in dev.errors[-1]["message"]
    lib.hipFree(dout)
    blocks = C.c_int()
    assert lib.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(C.byref(blocks), fn, 64, C.c_size_t(0)) == 0
    assert blocks.value == 32                           # 8 VGPRs: 8 waves per SIMD x 4 SIMDs, one wave each
    assert lib.hipModuleUnload(mod) == 0 and lib.hipModuleLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, None, params, None) == 98
    lib.hipFree(da)
    lib.hipFree(db)
    # launching on freed memory is named as such
    vals = [C.c_void_p(da.value), C.c_void_p(db.value), C.c_void_p(da.value + 4), C.c_int(1)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    lib2, dev2, mod2, fn2 = _vadd_module(hip, tmp_path)
    assert lib.hipModuleLaunchKernel(fn2, 1, 1, 1, 64, 1, 1, 0, None, params, None) == 1
    assert "use after free" in dev.errors[-1]["message"]
    lib.hipModuleUnload(mod2)
    dev.reset_log()


def test_a_wrong_block_is_refused_by_the_launch(hip, tmp_path):
    lib, dev, mod, fn = _vadd_module(hip, tmp_path)
    vals = [C.c_void_p(0), C.c_void_p(0), C.c_void_p(0), C.c_int(0)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    assert lib.hipModuleLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, None, params, None) == 719
    assert "limit is 1024" in dev.errors[-1]["message"]
    lib.hipModuleUnload(mod)
    dev.reset_log()


def test_no_c_compiler_is_one_clear_refusal(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(shim.ShimBuildError, match="no C compiler.*apt-get install gcc"):
        shim.find_compiler()
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(shim.ShimBuildError, match="CC='no-such-cc'"):
        shim.find_compiler()


def test_generated_source_matches_the_slot_table():
    src = shim.c_source()
    assert f"#define NSLOTS {len(shim.SPEC)}" in src
    for k, (name, _) in enumerate(shim.SPEC):
        assert f"hipError_t {name}(" in src and f"slots[{k}]" in src
    assert "hip_4.2 {" in shim.version_script() and "local: *;" in shim.version_script()
    assert os.path.basename(str(shim.library_path())) == "libamdhip64.so.7"


def test_capture_replay_and_the_launch_count_clock(hip, tmp_path):
    lib, dev, mod, fn = _vadd_module(hip, tmp_path)
    dev.reset_log()
    dev.set_clock("launch-count")
    try:
        a = np.arange(64, dtype=np.uint32)
        da, db, dout = (_device_array(lib, x) for x in (a, a, np.zeros(64, np.uint32)))
        vals = [C.c_void_p(da.value), C.c_void_p(db.value), C.c_void_p(dout.value), C.c_int(64)]
        params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
        e0, e1 = C.c_void_p(), C.c_void_p()
        lib.hipEventCreate(C.byref(e0))
        lib.hipEventCreate(C.byref(e1))
        dev.begin_capture()
        for _ in range(3):
            assert lib.hipModuleLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, None, params, None) == 0
        graph = dev.end_capture()
        assert len(graph) == 3 and dev.launches == []      # recorded, not run
        vals[3].value = 0                                   # the graph holds a copy of the arguments
        lib.hipEventRecord(e0, None)
        dev.replay(graph)
        lib.hipEventRecord(e1, None)
        ms = C.c_float()
        lib.hipEventElapsedTime(C.byref(ms), e0, e1)
        assert ms.value == pytest.approx(0.003) and len(dev.launches) == 3
        out = np.zeros(64, np.uint32)
        lib.hipMemcpy(C.c_void_p(out.ctypes.data), dout, C.c_size_t(256), 2)
        assert np.array_equal(out, 3 * a)
        with pytest.raises(ValueError, match="clock must be one of"):
            dev.set_clock("wall")
    finally:
        dev.set_clock("zero")
        lib.hipModuleUnload(mod)
        dev.reset_log()
