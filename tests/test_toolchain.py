"""Offline compiles: linker discovery, the artifact, the cache, and clear errors."""

import os
import stat
from pathlib import Path

import pytest

from mxfp4_ablation import toolchain

PROBE = "mxfp4_ablation.kernels.probe:compile_entry"


@pytest.fixture(scope="module")
def probe_artifact():
    return toolchain.compile(PROBE, {"rows": 64})


def test_probe_compiles_to_gfx950_isa(probe_artifact):
    art = probe_artifact
    assert '.amdgcn_target "amdgcn-amd-amdhsa--gfx950"' in art.isa or "gfx950" in art.isa.splitlines()[0]
    assert art.kernel_name == "double_kernel"
    # the kernel doubles with packed f32 adds and does one 16-byte load and store per lane
    assert "v_pk_add_f32" in art.isa
    assert "global_load_dwordx4" in art.isa and "global_store_dwordx4" in art.isa
    res = art.resources
    assert res["lds_bytes"] == 0 and res["scratch_bytes"] == 0
    assert res["agpr"] == 0 and 0 < res["arch_vgpr"] <= res["vgpr_unified"] <= 16
    assert res["kernarg_bytes"] > 0 and res["sgpr"] > 0


def test_cache_hit_returns_identical_isa(probe_artifact):
    again = toolchain.compile(PROBE, {"rows": 64})
    assert again.cached and again.key == probe_artifact.key and again.isa == probe_artifact.isa


def test_key_depends_on_params_and_arch():
    k1 = toolchain.cache_key(PROBE, {"rows": 64})
    assert k1 == toolchain.cache_key(PROBE, {"rows": 64})
    assert k1 != toolchain.cache_key(PROBE, {"rows": 128})
    assert k1 != toolchain.cache_key(PROBE, {"rows": 64}, arch="gfx942")


def test_flydsl_noise_is_captured_not_printed(capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    art = toolchain.compile(PROBE, {"rows": 8})
    out, err = capfd.readouterr()
    assert "[flydsl.compile]" not in out + err
    assert "[flydsl.compile]" in art.log
    assert art.compile_seconds > 0 and not art.cached


def test_bad_params_give_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    with pytest.raises(toolchain.ToolchainError, match="multiple of 4"):
        toolchain.compile(PROBE, {"rows": 6})


def test_bad_target_is_a_value_error():
    with pytest.raises(ValueError, match="package.module:function"):
        toolchain.compile("no_colon_here", {})
    with pytest.raises(ValueError, match="not found"):
        toolchain.compile("mxfp4_ablation.kernels.nonexistent:f", {})


def test_linker_order_prefers_rocm_then_path(tmp_path, monkeypatch):
    rocm = tmp_path / "rocm"
    lld = rocm / "llvm" / "bin" / "ld.lld"
    lld.parent.mkdir(parents=True)
    lld.write_text("#!/bin/sh\n")
    lld.chmod(lld.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    assert toolchain.find_linker().kind == "rocm"
    assert toolchain.toolkit_root() == rocm
    monkeypatch.delenv("ROCM_PATH")
    monkeypatch.delenv("HIP_PATH", raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for version in (17, 19):
        exe = bindir / f"ld.lld-{version}"
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    if Path("/opt/rocm/llvm/bin/ld.lld").exists():
        pytest.skip("a system ROCm install takes precedence on this machine")
    found = toolchain.find_linker()
    assert found.kind == "path" and found.command[0].endswith("ld.lld-19")


def test_no_linker_names_all_three_ways(monkeypatch):
    if Path("/opt/rocm/llvm/bin/ld.lld").exists():
        pytest.skip("a system ROCm install is present")
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.delenv("HIP_PATH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(toolchain.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(toolchain.ToolchainError) as info:
        toolchain.find_linker()
    message = str(info.value)
    assert "ROCM_PATH" in message and "lld-19" in message and "ziglang" in message


def test_staged_wrapper_runs_the_linker(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    monkeypatch.delenv("ROCM_PATH", raising=False)
    root = toolchain.toolkit_root()
    wrapper = root / "llvm" / "bin" / "ld.lld"
    assert os.access(wrapper, os.X_OK)
    import subprocess

    out = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "LLD" in out.stdout


def test_source_digest_ignores_comments_and_docstrings_not_code(tmp_path):
    """A comment / docstring edit of a kernel module keeps its compiles cached; a code edit does not."""
    f = tmp_path / "k.py"
    f.write_text('"""doc"""\ndef build(n):\n    """what it does"""\n    return n + 1  # one\n')
    base = toolchain._code_bytes(f)
    f.write_text('"""other doc"""\n# a new comment\n\ndef build(n):\n    """reworded"""\n    return n + 1  # two\n')
    assert toolchain._code_bytes(f) == base
    f.write_text('"""doc"""\ndef build(n):\n    """what it does"""\n    return n + 2\n')
    assert toolchain._code_bytes(f) != base
    f.write_text("def build(:\n")            # not Python: the raw bytes
    assert toolchain._code_bytes(f) == b"def build(:\n"


def test_a_compile_key_covers_only_the_steps_it_switches_on(monkeypatch):
    """An edit of GEMM step N changes the keys of the variants with step N on, never of those without it;
    a step another switched-on step builds on (07_zero_first_k on 01_agpr_acc) stays covered."""
    from mxfp4_ablation import variants

    def hashed(name, shape=(4096, 4096, 4096)):
        seen = []
        real = toolchain._file_code_digest

        def spy(f):
            seen.append(Path(f).name)
            return real(f)

        monkeypatch.setattr(toolchain, "_file_code_digest", spy)
        toolchain._file_digest.cache_clear()
        v = variants.get(name)
        toolchain._source_digest(v.target, v.params(shape))
        monkeypatch.setattr(toolchain, "_file_code_digest", real)
        return {s for s in seen if s[:2].isdigit()}

    assert hashed("gemm-v0") == set()
    assert hashed("gemm-v5") == {"01_agpr_acc.py", "02_serpentine.py", "03_g2s_m0.py", "04_scale_prefetch.py",
                                 "05_b_carry.py"}
    assert "01_agpr_acc.py" not in hashed("gemm-v9-no-agpr_acc")
    assert hashed("moe2-v4", (16, 385, 7168, 512, 9, 16)) == set()
    from mxfp4_ablation.kernels.gemm import steps

    assert "01_agpr_acc" not in {f.stem for f in steps.unused_files(["zero_first_k"])}


def test_a_gemm_compile_key_leaves_out_only_the_shape_the_launcher_takes_at_run_time():
    """M and N are kernel arguments unless static_prologue bakes them in: without it one key (one compile)
    serves every M, N at a K; K is always in the key, and so is every MoE shape number (its sizes are
    compile-time constants). The ISA behind a shared key is checked byte for byte by the slow test below."""
    from mxfp4_ablation import variants

    def key(name, shape):
        v = variants.get(name)
        return toolchain.cache_key(v.target, v.params(shape))

    assert key("gemm-v8", (256, 256, 3072)) == key("gemm-v8", (512, 768, 3072))
    assert key("gemm-v8", (256, 256, 3072)) != key("gemm-v8", (256, 256, 1536))
    assert key("gemm-v9", (256, 256, 3072)) != key("gemm-v9", (512, 768, 3072))
    assert key("gemm-v9-no-static_prologue", (8192, 8192, 8192)) == key("gemm-v9-no-static_prologue",
                                                                         (16384, 16384, 8192))
    gemm = variants.get("gemm-v9").target  # the variant_name spelling resolves its switches too
    assert toolchain.cache_key(gemm, {"M": 256, "N": 256, "K": 3072, "variant_name": "gemm-v9"}) != \
        toolchain.cache_key(gemm, {"M": 512, "N": 512, "K": 3072, "variant_name": "gemm-v9"})
    assert toolchain.cache_key(gemm, {"M": 256, "N": 256, "K": 3072, "variant_name": "gemm-v8"}) == \
        toolchain.cache_key(gemm, {"M": 512, "N": 512, "K": 3072, "variant_name": "gemm-v8"})
    assert key("moe2-v4", (16, 385, 7168, 512, 9, 16)) != key("moe2-v4", (128, 385, 7168, 512, 9, 16))


def test_requests_sharing_a_key_share_one_compile(tmp_path, monkeypatch):
    """compile_many compiles a key once, however many requests have it, and gives each request its own
    parameters back (here the probe is told its ``rows`` is a run-time value)."""
    from mxfp4_ablation.kernels import probe

    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    monkeypatch.setattr(probe, "runtime_params", lambda params: ("rows",), raising=False)
    jobs = []
    real = toolchain._run_worker

    def spy(batch, arch):
        jobs.extend(batch)
        return real(batch, arch)

    monkeypatch.setattr(toolchain, "_run_worker", spy)
    a, b = toolchain.compile_many([(PROBE, {"rows": 64}), (PROBE, {"rows": 128})])
    assert len(jobs) == 1 and a.key == b.key and a.isa == b.isa
    assert (a.params, b.params) == ({"rows": 64}, {"rows": 128})
    c = toolchain.compile(PROBE, {"rows": 256})
    assert c.cached and c.key == a.key and c.params == {"rows": 256} and len(jobs) == 1


def _gemm_variants() -> list[str]:
    from mxfp4_ablation import variants

    return [n for n in variants.all_variants() if n.startswith("gemm")]


@pytest.mark.slow
@pytest.mark.parametrize("name", _gemm_variants())
def test_two_gemm_shapes_share_a_compile_only_where_their_isa_is_byte_identical(name):
    """Compiled apart (no cache) at two M, N of one K: the keys are equal exactly when the ISA texts are."""
    from mxfp4_ablation import variants

    v = variants.get(name)
    params = [v.params(shape) for shape in ((256, 256, 3072), (512, 768, 3072))]
    keys = [toolchain.cache_key(v.target, p) for p in params]
    isas = [a.isa for a in toolchain.compile_many([(v.target, p) for p in params], use_cache=False)]
    assert (keys[0] == keys[1]) == (isas[0] == isas[1])
    assert (keys[0] == keys[1]) == ("static_prologue" not in v.switches)


def test_one_worker_process_serves_every_compile_of_a_process_until_a_source_changes(tmp_path, monkeypatch):
    """FlyDSL and torch are imported once per process, not once per compile: consecutive misses go to
    the same worker; an edited source file (the worker imported the old one) or a dead worker starts a
    new one, and the compile still succeeds."""
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    toolchain.compile(PROBE, {"rows": 4})
    first = toolchain._worker.proc
    assert toolchain.compile(PROBE, {"rows": 8}).isa and toolchain._worker.proc is first
    version = toolchain._src_version()
    monkeypatch.setattr(toolchain, "_src_version", lambda: version + (("an edited file", 0, 0, 0),))
    assert toolchain.compile(PROBE, {"rows": 12}).isa
    second = toolchain._worker.proc
    assert second is not first and first.poll() is not None
    second.kill()
    second.wait()
    assert toolchain.compile(PROBE, {"rows": 16}).isa and toolchain._worker.proc is not second


def test_a_kernel_that_traces_to_a_module_lowered_before_skips_the_lowering(tmp_path, monkeypatch):
    """The lowering cache (issue #24): a compile-cache miss whose traced module was lowered before -- an
    edit of the kernel's Python that traces the same -- takes that lowering's ISA; a different module, a
    corrupt entry and ``use_cache=False`` lower for real, to the same ISA."""
    import shutil

    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    first = toolchain.compile(PROBE, {"rows": 64})
    entries = list(toolchain.lowering_cache_dir().rglob("*.json"))
    assert not first.lowering_cached and len(entries) == 1
    shutil.rmtree(tmp_path / "compile")  # the artifact cache forgets, as after an edit of the kernel's code
    again = toolchain.compile(PROBE, {"rows": 64})
    assert not again.cached and again.lowering_cached
    assert again.isa == first.isa and again.kernels == first.kernels and again.resources == first.resources
    assert not toolchain.compile(PROBE, {"rows": 128}).lowering_cached  # another grid: another module
    shutil.rmtree(tmp_path / "compile")
    for damage in ("{not json", '{"a": 1}', "[]"):
        entries[0].write_text(damage)
        broken = toolchain.compile(PROBE, {"rows": 64})
        assert not broken.lowering_cached and broken.isa == first.isa
        shutil.rmtree(tmp_path / "compile")
    fresh = toolchain.compile(PROBE, {"rows": 64}, use_cache=False)
    assert not fresh.lowering_cached and fresh.isa == first.isa


def test_compile_arguments_at_the_largest_shapes_touch_no_buffer_memory():
    """An offline compile needs only the buffers' shapes: the arguments of the Kimi MoE at 4096 tokens
    (gemm1 1.6 GB, gemm2 0.8 GB of buffers) and of a 16384^3 GEMM (0.8 GB) are never written, so they
    cost no page faults and no resident memory (zero-filled, these compiles' workers passed 2 GB and paid
    seconds of sys time). The MoE's arguments are the buffers' addresses, so the count is of page faults."""
    import resource

    pytest.importorskip("flydsl")
    from mxfp4_ablation.kernels import gemm, moe_gemm1, moe_gemm2

    kimi = (4096, 385, 7168, 512, 9, 128)
    gemm.compile_entry(256, 256, 256, variant_name="gemm-v9")  # imports FlyDSL and the builders first
    moe_gemm1.compile_entry(16, 8, 512, 256, 2, 16, variant_name="moe1-v2")
    moe_gemm2.compile_entry(16, 8, 512, 256, 2, 16, variant_name="moe2-v4")
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    moe_gemm1.compile_entry(*kimi, variant_name="moe1-v2")
    moe_gemm2.compile_entry(*kimi, variant_name="moe2-v4")
    _, args = gemm.compile_entry(16384, 16384, 16384, variant_name="gemm-v9")
    touched = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) * os.sysconf("SC_PAGE_SIZE")
    assert sum(t.numel() * t.element_size() for t in args if hasattr(t, "numel")) > 8e8
    assert touched < 300e6, f"{touched / 1e6:.0f} MB of pages touched building compile arguments"


def test_the_worker_traces_without_source_locations_and_puts_them_back():
    """Inside the block every FlyDSL module's ``capture_user_location`` gives an unknown location (the
    ISA is the same: tests/test_isa_golden.py); after it, FlyDSL's own function is back everywhere."""
    pytest.importorskip("flydsl")
    import sys

    from flydsl.expr import meta

    from mxfp4_ablation import _compile_worker

    capture = meta.capture_user_location
    with _compile_worker._without_source_locations():
        holders = [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("flydsl")
                   and hasattr(m, "capture_user_location")]
        assert len(holders) >= 3 and all(m.capture_user_location is not capture for m in holders)
    assert all(m.capture_user_location is capture for m in holders)


_BOTH_LOWERINGS = r"""
import contextlib, json, os, sys
from pathlib import Path
from mxfp4_ablation import _compile_worker as cw
out = {}
for name, patched in (("flydsl", False), ("worker", True)):
    d = Path(sys.argv[1]) / name
    (d / "dump").mkdir(parents=True)
    os.environ["FLYDSL_DUMP_DIR"] = str(d / "dump")
    if not patched:
        real, cw._isa_dump_only = cw._isa_dump_only, contextlib.nullcontext
    job = {"target": sys.argv[2], "params": json.loads(sys.argv[3]), "key": "x", "dir": str(d), "lowering_cache": None}
    with cw._redirect_fds(d / "log.txt"):
        status = cw._run(job)
    if not patched:
        cw._isa_dump_only = real
    out[name] = {str(p.relative_to(d)): p.read_text() for p in sorted((d / "dump").rglob("*final_isa.s"))}
    assert status["ok"], (d / "log.txt").read_text()[-2000:]
from flydsl.compiler.jit_function import MlirCompiler
with cw._isa_dump_only():
    out["patched"] = MlirCompiler.compile.__func__.__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("target,params", [(PROBE, {"rows": 64}),
                                           ("mxfp4_ablation.kernels.mfma_tile:compile_entry", {"K": 128})])
def test_the_worker_lowering_renders_once_and_writes_flydsls_own_isa(tmp_path, target, params):
    """The compile worker's ISA-dump lowering (``_isa_dump_only``: the module rendered once, where the ISA
    dump reads it) writes the same final-ISA files, by name and byte, as FlyDSL's own compile does."""
    import json
    import subprocess
    import sys

    pytest.importorskip("flydsl")
    proc = subprocess.run([sys.executable, "-c", _BOTH_LOWERINGS, str(tmp_path), target, json.dumps(params)],
                          env=toolchain.compile_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["patched"] == "dump_only"  # this FlyDSL takes the worker's path, not the fallback
    assert out["worker"] and out["worker"] == out["flydsl"]
