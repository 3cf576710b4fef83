"""Worker process for :mod:`mxfp4_ablation.toolchain`: compiles batches of targets offline.

Runs with the env from ``toolchain.compile_env`` and lives as long as the process that started it
(issue #24: importing torch and FlyDSL was ~2.3 of a cold compile's ~5.7 CPU-s when every compile
started its own worker). It reads the path of one batch's ``jobs.json`` per line on stdin and answers
``done <path>`` on its own stdout when the batch is written; it exits at the end of stdin. For each job it
points FlyDSL's ISA dump at the job's folder, sends FlyDSL's stdout/stderr (C++ level too) into
``log.txt``, calls ``function(**params)`` to get ``(jit_launcher, args)`` and launches it (a
compile-only launch that stops at the ISA: :func:`_without_code_object`), then writes ``status.json``.

A job with a ``lowering_cache`` folder keeps FlyDSL's lowering (its MLIR passes and LLVM codegen, 58-70 %
of a GEMM compile's CPU in two measured runs) behind a cache keyed by the traced module: :func:`_lowering_cache`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path


@contextlib.contextmanager
def redirect_fds(log):
    """Point the C-level stdout/stderr (fds 1 and 2: FlyDSL's C++ prints there too) at the open file
    ``log`` for the block; ``restore_stderr()`` (yielded) puts fd 2 back early, e.g. to report a failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
        yield lambda: (sys.stderr.flush(), os.dup2(saved[1], 2))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


@contextlib.contextmanager
def _redirect_fds(path: Path):
    with open(path, "w") as log, redirect_fds(log):
        yield


@contextlib.contextmanager
def _without_code_object():
    """Leave out FlyDSL's last pass, ``gpu-module-to-binary{format=fatbin}``, for the block: an offline
    compile keeps only the ISA that ``FLYDSL_DEBUG_DUMP_ASM`` writes, which FlyDSL makes by its own LLVM
    codegen of the module *before* that pass (``_dump_isa``); the code object nobody reads was a second
    codegen plus an ``ld.lld`` link, about 1 of a cold gemm-v4 compile's 7 CPU-s (issue #24). The ISA
    is the same (``tests/test_isa_golden.py``)."""
    from flydsl.compiler import jit_function

    compiler = jit_function.MlirCompiler
    prepare = compiler.prepare.__func__

    def isa_only(cls, module, **kw):
        asm, config = prepare(cls, module, **kw)
        config.fragments = [f for f in config.fragments if not f.lstrip().startswith("gpu-module-to-binary")]
        return asm, config

    compiler.prepare = classmethod(isa_only)
    try:
        yield
    finally:
        compiler.prepare = classmethod(prepare)


@contextlib.contextmanager
def _isa_dump_only():
    """For the block, FlyDSL's lowering with ``FLYDSL_DEBUG_DUMP_ASM`` prints the module once, where the ISA
    dump reads it, not after every pass fragment: ``MlirCompiler.compile`` renders the whole module with
    its locations after each of its ~19 fragments and reads one of those texts (the one after
    ``reconcile-unrealized-casts``, which :func:`flydsl.compiler.jit_function._dump_isa` lowers to the
    ISA); timed around each fragment of one gemm-v9 8192^3 compile, the renders took 0.83 s and the passes
    0.19 s, and the compile went from 2.76 to 2.06 s (measured, issue #24). The same fragments
    run in the same order, each in its own pass manager as FlyDSL runs them, and FlyDSL's own
    ``_dump_isa`` writes the file it names, so the ISA is the same (``tests/test_isa_golden.py``). Any
    other mode (the IR dump, external codegen, a pipeline without that fragment) is FlyDSL's own, and so
    is every compile under a FlyDSL that lacks one of the functions used here."""
    from flydsl._mlir import ir
    from flydsl._mlir.passmanager import PassManager
    from flydsl.compiler import jit_function as jf
    from flydsl.utils import env

    try:
        from flydsl.compiler.llvm_options import llvm_options
    except ImportError:
        llvm_options = None
    used = ("_infer_kernel_names_from_asm", "_sanitize_path_component", "_dump_isa", "_run_pass_manager")
    if llvm_options is None or not all(hasattr(jf, f) for f in used):
        yield
        return
    compiler = jf.MlirCompiler
    lower = compiler.compile.__func__
    marker = "reconcile-unrealized-casts"

    def dump_only(cls, asm, *, func_name, config):
        frags = list(config.fragments)
        if not env.debug.dump_asm or env.debug.dump_ir or config.external or marker not in (f.strip() for f in frags):
            return lower(cls, asm, func_name=func_name, config=config)
        module = ir.Module.parse(asm)
        names = jf._infer_kernel_names_from_asm(asm)
        sub = names[0] if len(names) == 1 else (func_name or "module")
        dump_dir = Path(env.debug.dump_dir).resolve() / jf._sanitize_path_component(sub)
        with llvm_options(config.llvm_opts) if config.llvm_opts else contextlib.nullcontext():
            for frag in frags:
                pm = PassManager.parse(f"builtin.module({frag})")
                pm.enable_verifier(env.debug.enable_verifier)
                jf._run_pass_manager(pm, module)
                if frag.strip() == marker:
                    asm_for_isa = module.operation.get_asm(enable_debug_info=True)
            stage = f"{1 + len(frags):02d}_final_isa"
            out = jf._dump_isa(dump_dir=dump_dir, ctx=module.context, asm=asm_for_isa,
                               verify=env.debug.enable_verifier, stage_name=stage)
            if out is not None:
                print(f"[flydsl.compile] dump {stage} -> {out}")
        return module

    compiler.compile = classmethod(dump_only)
    try:
        yield
    finally:
        compiler.compile = classmethod(lower)


#: Bumped when what :func:`_lowering_cache` stores, or how it keys it, changes.
LOWERING_CACHE_VERSION = 1


def lowering_key(asm: str, config, backend, link_libs=None) -> str | None:
    """The key of one lowering: FlyDSL's own artifact key of the prepared module text (``asm``: the traced
    module without source locations, unless debug info is on), its pass pipeline and LLVM options, the
    target, and its toolchain fingerprint (``_disk_cache_key``), under this module's version. None when
    FlyDSL lacks those functions (another FlyDSL version: the lowering is not cached)."""
    import hashlib

    from flydsl.compiler import jit_function as jf

    artifact_key, disk_key = getattr(jf, "_artifact_cache_key", None), getattr(jf, "_disk_cache_key", None)
    if artifact_key is None or disk_key is None:
        return None
    key = disk_key(artifact_key(asm, config, backend, link_libs=link_libs))
    return hashlib.sha256(f"mxfp4-lowering-{LOWERING_CACHE_VERSION}\n{key}".encode()).hexdigest()


@contextlib.contextmanager
def _lowering_cache(root: Path | None, dump_dir: Path, stats: dict):
    """For the block, a lowering whose traced module, pipeline and toolchain were lowered before is not
    lowered again: the final-ISA files it wrote under ``dump_dir`` are written again from
    ``root/<key>.json`` and the module is returned unlowered (a compile-only launch reads nothing else of
    it). An edit of a kernel's Python that traces to the same module -- a constant moved, a helper
    renamed -- then costs the trace only (issue #24). ``stats`` counts ``lowered`` / ``lowering_hits``.
    ``root`` None: every lowering runs (``stats`` still counts)."""
    from flydsl._mlir import ir
    from flydsl.compiler import jit_function

    from . import diskcache

    compiler = jit_function.MlirCompiler
    prepare, lower = compiler.prepare.__func__, compiler.compile.__func__
    pending: list = []  # the key of the latest prepared module: FlyDSL lowers right after preparing it

    def keyed(cls, module, **kw):
        asm, config = prepare(cls, module, **kw)
        pending[:] = [None if root is None else lowering_key(asm, config, kw["backend"], kw.get("link_libs"))]
        return asm, config

    def cached(cls, asm, *, func_name, config):
        key = pending.pop() if pending else None
        entry = None if key is None else root / key[:2] / f"{key}.json"
        files = None
        if entry is not None:
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):  # missing or corrupt: a miss
                files = json.loads(entry.read_text())["files"]
        if isinstance(files, dict) and files:
            for rel, text in files.items():
                out = dump_dir / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text)
            stats["lowering_hits"] = stats.get("lowering_hits", 0) + 1
            return ir.Module.parse(asm)
        before = set(dump_dir.rglob("*final_isa.s"))
        module = lower(cls, asm, func_name=func_name, config=config)
        stats["lowered"] = stats.get("lowered", 0) + 1
        made = {str(f.relative_to(dump_dir)): f.read_text() for f in sorted(set(dump_dir.rglob("*final_isa.s")) - before)}
        if entry is not None and made:
            diskcache.atomic_write_text(entry, json.dumps({"files": made}))
        return module

    compiler.prepare, compiler.compile = classmethod(keyed), classmethod(cached)
    try:
        yield
    finally:
        compiler.prepare, compiler.compile = classmethod(prepare), classmethod(lower)


@contextlib.contextmanager
def _without_source_locations():
    """Trace without FlyDSL's source locations (``capture_user_location`` walks the Python stack for every
    op it builds: ~0.4 of a GEMM compile's ~3 CPU-s, measured): an offline compile keeps only the ISA,
    which carries no debug lines (no ``.loc``), and the lowering key is taken from the module printed
    without locations, so the ISA and both caches are the same (``tests/test_isa_golden.py``). A failed
    compile is traced again with them, for its error message (:func:`_run`)."""
    import flydsl.compiler  # noqa: F401 - every module that imports the function by name, before the swap
    from flydsl._mlir import ir
    from flydsl.expr import meta

    capture = meta.capture_user_location

    def unknown():
        return ir.Location.unknown()

    def swap(old, new):
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith("flydsl") and getattr(m, "capture_user_location", None) is old:
                m.capture_user_location = new

    swap(capture, unknown)
    try:
        yield
    finally:
        swap(unknown, capture)  # a module first imported inside the block included


def _run(job: dict) -> dict:
    try:
        with _without_source_locations():
            return _run_once(job)
    except Exception:  # the same compile with source locations: its error names the kernel's lines
        for stale in Path(job["dir"], "dump").rglob("*"):
            if stale.is_file():
                stale.unlink()
        return _run_once(job)


def _run_once(job: dict) -> dict:
    module_name, _, func_name = job["target"].partition(":")
    start = time.perf_counter()
    func = getattr(importlib.import_module(module_name), func_name)
    launcher, args = func(**job["params"])
    root = job.get("lowering_cache")
    stats: dict = {}
    # FlyDSL's in-process artifact memo would serve a module this worker compiled before without lowering
    # it, so without writing its ISA dump (and the fallback below then compiled the whole code object)
    getattr(launcher, "_mem_cache", {}).clear()
    with _without_code_object(), _isa_dump_only(), _lowering_cache(root and Path(root), Path(job["dir"], "dump"), stats):
        launcher(*args)
    if not any(Path(job["dir"], "dump").glob("*/*final_isa.s")):
        # the ISA dump swallows a codegen error (e.g. ocml bitcode missing): the full pipeline raises it
        launcher(*args)
    return {"ok": True, "seconds": time.perf_counter() - start, **stats}


def main(jobs_file: str) -> int:
    for job in json.loads(Path(jobs_file).read_text()):
        job_dir = Path(job["dir"])
        (job_dir / "dump").mkdir(parents=True, exist_ok=True)
        os.environ["FLYDSL_DUMP_DIR"] = str(job_dir / "dump")
        with _redirect_fds(job_dir / "log.txt"):
            try:
                status = _run(job)
            except BaseException as err:  # reported to the parent as one line + the log
                traceback.print_exc()
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                status = {"ok": False, "error": f"{type(err).__name__}: {first}"}
        (job_dir / "status.json").write_text(json.dumps(status))
    return 0


def serve() -> int:
    """Compile the batch of every ``jobs.json`` path read on stdin; answer ``done`` after each."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever prints between jobs goes to stderr, never into the replies
    for line in sys.stdin:
        jobs_file = line.rstrip("\n")
        main(jobs_file)
        replies.write(f"done {jobs_file}\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve())
