"""Run a kernel variant on a backend and check EVERY output it declares against the reference.

Backends:

``emulator``  compile offline for gfx950, execute the ISA in :mod:`gfx950emu` with the ``s_waitcnt``
              hazard checker, compare with the reference. Works on any machine.
``device``    run on a visible gfx950 GPU through FlyDSL's own launcher and compare. Needs an MI355X
              (refused with one clear line anywhere else).
``emulated-device``  the device path (``build`` + ``device_args`` + FlyDSL's launcher) with the GPU
              replaced by gfx950emu behind an emulated HIP runtime (:mod:`.emulated_device`).

The kernel module of a variant's family implements :class:`mxfp4_ablation.family.KernelFamily`
(``make_inputs``, ``reference`` -> one tensor per declared output, ``kernel_args``, ``launch_config``,
``build``, ``device_args``, ``OUTPUTS``). Each :class:`~mxfp4_ablation.family.Output` is compared as it
declares: ``exact`` byte for byte, ``close`` within its ulp / absolute bound and minimum cosine.

The verdict -- every output passes, zero hazards -- is the project's correctness gate.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from . import diskcache, family, modes, paths, reference, toolchain, variants
from .errors import UsageError

#: The gate's cosine for outputs that declare no ``min_cosine`` of their own, and the historical
#: single-output gate (kept for callers that read it).
COSINE_MIN = 0.99999
BACKENDS = ("emulator", "device", "emulated-device")  # each has a RUNNERS entry


def emulator_args(entries: list) -> list:
    """Kernel-module kernarg entries -> plain :func:`gfx950emu.launch` args (tensors and little-endian
    ints); values that are not ``common.kernarg_entries`` dicts pass through unchanged."""
    args = []
    for entry in entries:
        if not isinstance(entry, dict):
            args.append(entry)
        elif entry.get("kind") == "global_buffer":
            args.append(entry["tensor"])
        elif entry.get("kind") == "by_value":
            args.append(int.from_bytes(entry["bytes"], "little"))
        else:
            raise ValueError(f"kernel argument {entry.get('name')!r} has unknown kind {entry.get('kind')!r}")
    return args


def _call_with_switches(func, inputs: dict, switches: frozenset):
    """``func(inputs, **switches)`` when ``func`` takes switches (e.g. an ABI switch changes the
    kernel arguments), else ``func(inputs)``."""
    params = inspect.signature(func).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params) or switches & {p.name for p in params}:
        return func(inputs, **{name: True for name in sorted(switches)})
    return func(inputs)


def buffers_digest(inputs: dict) -> str:
    """SHA-256 over the bytes of every tensor in ``inputs`` (name order): two runs wrote the same bits
    into every buffer exactly when their digests agree."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(inputs):
        value = inputs[name]
        if hasattr(value, "detach"):
            value = value.detach().contiguous().reshape(-1).view(__import__("torch").uint8).numpy()
        if hasattr(value, "tobytes"):
            h.update(name.encode() + b"\0" + value.tobytes())
    return h.hexdigest()


def _as_bits(t):
    """A tensor's elements as integers of the same width (the bytes, element by element)."""
    import torch

    t = t.detach().contiguous()
    if not t.dtype.is_floating_point and t.dtype != torch.bool:
        return t
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(ints[t.element_size()])


def ulp(ref):
    """The spacing of ``ref``'s dtype at ``|ref|`` (float64 tensor): ``eps * 2**floor(log2|ref|)``,
    the subnormal spacing below the smallest normal."""
    import torch

    info = torch.finfo(ref.dtype)
    mag = ref.detach().to(torch.float64).abs().clamp_min(info.tiny)
    return torch.ldexp(torch.full_like(mag, info.eps), torch.floor(torch.log2(mag)).to(torch.int32))


def compare_output(spec: family.Output, got, want) -> dict[str, Any]:
    """One declared output against its reference: ``compare, passed, mismatches, max_abs_err,
    max_rel_err, cosine, numel`` (+ ``max_ulp_err`` for ``close``). ``exact`` counts elements whose
    bytes differ; ``close`` counts elements outside ``max_ulp * ulp(|want|) + max_abs`` (non-finite
    values always count). ``cosine`` is over the values as numbers (for ``exact`` integer outputs, a
    summary only: the verdict is ``mismatches == 0``)."""
    import torch

    if tuple(got.shape) != tuple(want.shape):
        raise ValueError(f"output {spec.name}: kernel buffer shape {tuple(got.shape)} differs from the "
                         f"reference's {tuple(want.shape)}")
    stats = reference.compare(got, want)
    out: dict[str, Any] = {"compare": spec.compare, "cosine": float(stats["cosine"]),
                           "max_abs_err": float(stats["max_abs_err"]), "max_rel_err": float(stats["max_rel_err"]),
                           "numel": int(stats["numel"])}
    if spec.compare == "exact":
        if got.dtype != want.dtype:
            raise ValueError(f"output {spec.name}: dtype {got.dtype} differs from the reference's {want.dtype}")
        out["mismatches"] = int((_as_bits(got) != _as_bits(want)).sum())
        out["passed"] = out["mismatches"] == 0
        return out
    x, y = got.detach().to(torch.float64), want.detach().to(torch.float64)
    diff = (x - y).abs()
    step = ulp(want) if want.dtype.is_floating_point else torch.ones_like(y)
    bound = (spec.max_ulp or 0.0) * step + (spec.max_abs or 0.0)
    bad = ~torch.isfinite(x) | (diff > bound)
    ratio = diff / step
    out["max_ulp_err"] = float(ratio.max()) if ratio.numel() and bool(torch.isfinite(x).all()) else math.inf
    out["mismatches"] = int(bad.sum())
    min_cos = spec.min_cosine if spec.min_cosine is not None else COSINE_MIN
    cos_ok = math.isfinite(out["cosine"]) and out["cosine"] >= min_cos
    out["passed"] = out["mismatches"] == 0 and cos_ok
    return out


def compare_outputs(fam: family.Family, buffers: dict, expected: dict) -> dict[str, dict[str, Any]]:
    """Every declared output of ``fam``: name -> :func:`compare_output`'s dict."""
    missing = [o.name for o in fam.outputs if o.name not in expected]
    if missing:
        raise ValueError(f"{fam.module_name}.reference() gives no {', '.join(missing)} (declared in OUTPUTS)")
    return {o.name: compare_output(o, buffers[o.name], expected[o.name]) for o in fam.outputs}


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise UsageError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "device":
        gpu = modes.visible_gpu()
        if gpu is None or gpu.arch != "gfx950":
            where = f"{gpu.name} ({gpu.arch})" if gpu else "no GPU"
            raise UsageError(f"--backend device needs a gfx950 GPU (MI355X); this machine has {where}")


#: gfx950emu's modules whose code decides what an emulator run computes (the timing model, the HIP shim
#: and the code-object loader do not): their digest is part of the emulation cache key
_EMU_MODULES = ("asm", "decode", "fpformats", "hazards", "kernel", "machine", "memops", "memory", "mfma", "parser")


def _emulator_digest() -> str:
    import hashlib

    import gfx950emu

    root = Path(gfx950emu.__file__).parent
    h = hashlib.sha256()
    for name in _EMU_MODULES:
        f = root / f"{name}.py"
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _arg_views(args: list) -> list:
    """(index, uint8 numpy view) of every buffer argument (CPU tensors / arrays), sharing its memory."""
    import numpy as np

    out = []
    for k, a in enumerate(args):
        if hasattr(a, "detach") and a.device.type == "cpu":
            flat = a.detach().reshape(-1)
            out.append((k, flat.view(__import__("torch").uint8).numpy() if flat.numel() else np.zeros(0, np.uint8)))
        elif isinstance(a, np.ndarray):
            out.append((k, a.reshape(-1).view(np.uint8)))
    return out


def _emulation_key(isa: str, grid, block, args: list, opts: dict) -> str:
    """What an emulator run computes from: the ISA text, grid, block, every argument's bytes (and the
    plain values), the launch options and gfx950emu's own code."""
    import hashlib

    h = hashlib.sha256()
    h.update(json.dumps([hashlib.sha256(isa.encode()).hexdigest(), list(grid), list(block),
                         sorted((k, v) for k, v in opts.items() if k != "processes"), _emulator_digest()],
                        default=str).encode())
    views = dict(_arg_views(args))
    for k, a in enumerate(args):
        h.update(f"|{k}:".encode())
        h.update(views[k].tobytes() if k in views else repr(a).encode())
    return h.hexdigest()


def _emulation_cache(key: str) -> Path:
    return paths.cache_dir() / "emulate" / key[:2] / key


def _emulate(program, isa: str, grid, block, args: list, opts: dict) -> tuple[dict, bool]:
    """``gfx950emu.launch`` through a content-keyed cache (issue #24): a run whose ISA, arguments, options
    and emulator code are byte-identical to a stored one is not executed again -- the stored outputs (the
    bytes of every buffer the kernel changed) are written into the arguments and the stored hazard
    reports returned; a run another process is doing at the same time is waited for, not done twice
    (:func:`diskcache.load_or_compute_one`).  ``MXFP4_EMULATE_CACHE=0`` turns it off.  Returns
    ``(summary, cached)``."""
    import gfx950emu
    import numpy as np

    views = _arg_views(args)

    def run() -> dict:
        start = time.perf_counter()
        out = gfx950emu.launch(program, grid=grid, block=block, args=args, **opts)
        seconds = round(time.perf_counter() - start, 3)
        ordering = [h for h in out.hazards if h.kind != "wait_states"]
        waits = [h for h in out.hazards if h.kind == "wait_states"]
        return {"seconds": seconds, "hazards": len(ordering), "hazard_reports": [str(h) for h in ordering[:5]],
                "wait_state_hazards": len(waits), "wait_state_reports": [str(h) for h in waits[:5]],
                "out_of_range": out.stats.out_of_range}

    if os.environ.get("MXFP4_EMULATE_CACHE", "1") == "0":
        return run(), False
    folder = _emulation_cache(_emulation_key(isa, grid, block, args, opts))

    def load() -> dict | None:
        try:
            summary = json.loads((folder / "summary.json").read_text())
            with np.load(folder / "outputs.npz") as data:
                stored = {int(name[1:]): data[name] for name in data.files}
            if any(k in stored and stored[k].size != view.size for k, view in views):
                raise ValueError("stored output of another size")
            oob: dict = {}
            for opcode, line, n in summary["out_of_range"]:
                oob.setdefault(opcode, {})[line] = n
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
            return None  # missing, partial or corrupt: a miss
        for k, view in views:
            if k in stored:
                view[:] = stored[k]
        return {**summary, "out_of_range": oob}

    def run_and_store() -> dict:
        before = {k: view.copy() for k, view in views}
        summary = run()
        changed = {f"a{k}": view.copy() for k, view in views if not np.array_equal(view, before[k])}
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".tmp-"))
        np.savez(tmp / "outputs.npz", **changed)
        oob = [[op, line, n] for op, per in summary["out_of_range"].items() for line, n in per.items()]
        (tmp / "summary.json").write_text(json.dumps({**summary, "out_of_range": oob}, default=str))
        shutil.rmtree(folder, ignore_errors=True)  # a corrupt entry (we hold its lock: nobody else writes it)
        try:
            os.replace(tmp, folder)
        except OSError:  # stored meanwhile by a process that takes no lock (an older checkout on this cache)
            shutil.rmtree(tmp, ignore_errors=True)
        return summary

    return diskcache.load_or_compute_one(folder, load, run_and_store)


def _run_emulator(variant, module, params, shape_kw, inputs, opts) -> dict[str, Any]:
    """Compile offline, run the ISA in gfx950emu; ``opts``: ``hazards``, ``processes`` and any
    further :func:`gfx950emu.launch` keywords (``delivery``, ``wave_order``, ``seed``).  Runs go
    through :func:`_emulate`'s content-keyed cache (``emulator_cached`` says when one was reused)."""
    import gfx950emu

    art = toolchain.compile(variant.target, params)
    grid, block = module.launch_config(**shape_kw)
    program = gfx950emu.load(art.isa)
    args = emulator_args(_call_with_switches(module.kernel_args, inputs, variant.switches))
    run, cached = _emulate(program, art.isa, grid, block, args, opts)
    return {"seconds": run["seconds"], "compile_seconds": art.compile_seconds,
            "hazards": run["hazards"], "hazard_reports": run["hazard_reports"],
            "wait_state_hazards": run["wait_state_hazards"], "wait_state_reports": run["wait_state_reports"],
            "out_of_range": run["out_of_range"], "buffers_sha256": buffers_digest(inputs),
            "emulator_cached": cached}


def _run_device(variant, module, params, shape_kw, inputs, opts) -> dict[str, Any]:
    """Run on the visible gfx950 GPU through FlyDSL's launcher (no hazard checker there)."""
    import torch

    on_gpu = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in inputs.items()}
    launcher = module.build(**params)
    start = time.perf_counter()
    launcher(*_call_with_switches(module.device_args, on_gpu, variant.switches))
    torch.cuda.synchronize()
    seconds = round(time.perf_counter() - start, 3)
    inputs.update({k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in on_gpu.items()})
    return {"seconds": seconds, "hazards": 0, "hazard_reports": []}


def _run_emulated_device(variant, module, params, shape_kw, inputs, opts) -> dict[str, Any]:
    """The device path on the gfx950emu HIP runtime (see :mod:`.emulated_device`)."""
    from . import emulated_device

    return emulated_device.run_variant(variant, module, params, inputs, opts, _call_with_switches)


#: Backend name -> ``run(variant, module, params, shape_kw, inputs, opts) -> dict`` that runs the kernel,
#: leaves its outputs in ``inputs`` and returns ``seconds``, ``hazards``, ``hazard_reports`` (+ extras).
RUNNERS = {"emulator": _run_emulator, "device": _run_device, "emulated-device": _run_emulated_device}


def verify(variant_name: str, shape: tuple[int, ...], *, backend: str = "emulator", seed: int = 0,
           hazards: str = "report", processes: int = 1, delivery: str = "issue",
           wave_order: str = "forward", delivery_seed: int = 0) -> dict[str, Any]:
    """Run ``variant_name`` at ``shape`` and compare every declared output with the reference.

    Returns a JSON-ready dict: ``passed`` (every output passed and no hazards), ``outputs`` (name ->
    ``passed, mismatches, max_abs_err, cosine, ...``, see :func:`compare_output`), ``failed_outputs``;
    for compatibility the primary (first declared) output's ``cosine``, ``max_abs_err``,
    ``max_rel_err`` and ``mismatches`` at top level; ``hazards`` (count), ``hazard_reports`` (first
    few, as text), ``backend``, ``variant``, ``shape``, ``seed``, ``seconds`` (backend time) and, on
    the emulator, ``compile_seconds``. ``delivery`` / ``wave_order`` / ``delivery_seed`` pick the
    emulator's load delivery and wave scheduling order (:func:`gfx950emu.launch`; passed on only when
    not the defaults) and are recorded in the result. An emulator check whose inputs are all unchanged
    is read from the verification cache (:func:`_verification_key`; ``MXFP4_EMULATE_CACHE=0`` turns it
    off with the emulation cache), ``emulator_cached`` then true.
    """
    _check_backend(backend)
    variant = variants.get(variant_name)
    module = variant.module
    params = variant.params(tuple(shape))
    shape_kw = variant.shape(tuple(shape))
    module.check_shape(**shape_kw)  # one clear error before any compile
    result: dict[str, Any] = {"variant": variant.name, "shape": list(shape), "seed": seed, "backend": backend,
                              "delivery": delivery, "wave_order": wave_order, "delivery_seed": delivery_seed}
    opts: dict[str, Any] = {"hazards": hazards, "processes": processes}
    if (delivery, wave_order) != ("issue", "forward"):
        opts.update(delivery=delivery, wave_order=wave_order, seed=delivery_seed)
    if backend != "emulator" or os.environ.get("MXFP4_EMULATE_CACHE", "1") == "0":
        return _check(variant, module, params, shape_kw, result, opts)
    entry = _verification_cache(_verification_key(toolchain.compile(variant.target, params).isa, variant, params,
                                                  result, opts))

    def load() -> dict | None:
        try:
            stored = json.loads(entry.read_text())
        except (OSError, ValueError):
            return None  # missing, partial or corrupt: a miss
        if not isinstance(stored, dict) or "passed" not in stored:
            return None
        return {**stored, **result, "emulator_cached": True}

    def check_and_store() -> dict:
        text = json.dumps(_check(variant, module, params, shape_kw, result, opts), default=str)
        diskcache.atomic_write_text(entry, text)
        return json.loads(text)  # what a later hit reads (JSON: its dicts' keys are strings)

    return diskcache.load_or_compute_one(entry, load, check_and_store)[0]


def _verification_cache(key: str) -> Path:
    return paths.cache_dir() / "verify" / key[:2] / f"{key}.json"


def launch_sources(module) -> set[Path]:
    """The code a run of a compiled variant of kernel ``module`` executes besides the kernel itself: the
    module's import closure (inputs, reference, arguments, launch config, MoE routing) and this module's
    (argument packing, comparison, the emulator), less the files the kernel module says reach a launch
    only through the compiled code (its ``builder_sources()``, if it has one: the GEMM's pipeline, stages
    and steps)."""
    from . import sources

    ours = paths.REPO_ROOT / "src"  # the files by their names under src/ (sources.SRC may be a copy: tests)
    skip = {Path(f).resolve().relative_to(ours.resolve()) for f in getattr(module, "builder_sources", set)()}
    return {f for f in sources.module_closure({module.__name__, __name__})
            if f.resolve().relative_to(sources.SRC.resolve()) not in skip}


def launch_digest(module) -> str:
    """Digest of :func:`launch_sources`: runs keyed by their ISA and this (an emulator check, a timing run)
    survive an edit of a step's code that keeps the ISA; the compile key still sees every such edit."""
    from . import sources

    return _launch_digest(module, sources.SRC, sources._stamp())


@functools.lru_cache(maxsize=64)
def _launch_digest(module, src: Path, stamp: tuple) -> str:  # src: a copy of src/ keeps its files' times
    from . import sources

    return sources.digest(launch_sources(module))


def _verification_key(isa: str, variant, params: dict, result: dict, opts: dict) -> str:
    """What an emulator verification computes from: the ISA, the switch set (kernel arguments follow some
    switches), shape, seed, launch options, and the code besides the kernel that the run executes
    (:func:`launch_digest`: inputs, reference, comparison, the emulator) -- so the summary reads the
    leave-one-out checks its work-first sweep ran, a step notebook the check of its predecessor that the
    previous step ran (issue #24), and an edit that keeps a variant's ISA keeps its checks."""
    import hashlib

    payload = [hashlib.sha256(isa.encode()).hexdigest(), variant.family, sorted(variant.switches),
               result["shape"], result["seed"], sorted((k, v) for k, v in opts.items() if k != "processes"),
               launch_digest(variant.module), _emulator_digest()]
    return hashlib.sha256(json.dumps(payload, default=str).encode()).hexdigest()


def _check(variant, module, params: dict, shape_kw: dict, result: dict, opts: dict) -> dict[str, Any]:
    """:func:`verify`'s work: build the inputs and the reference, run, compare every output."""
    fam = variant.spec
    backend = result["backend"]
    inputs = module.make_inputs(**shape_kw, seed=result["seed"])
    expected = module.reference(inputs)
    result = dict(result)
    result.update(RUNNERS[backend](variant, module, params, shape_kw, inputs, opts))
    outputs = compare_outputs(fam, inputs, expected)
    primary = outputs[fam.outputs[0].name]
    result.update({k: primary[k] for k in ("cosine", "max_abs_err", "max_rel_err", "mismatches")})
    result["outputs"] = outputs
    result["failed_outputs"] = [n for n, o in outputs.items() if not o["passed"]]
    result["passed"] = bool(not result["failed_outputs"] and result["hazards"] == 0)
    return result
