"""Run a kernel variant on a backend and check it against the torch reference.

Backends:

``emulator``  compile offline for gfx950, execute the ISA in :mod:`gfx950emu` with the ``s_waitcnt``
              hazard checker, compare with the reference. Works on any machine.
``device``    run on a visible gfx950 GPU through FlyDSL's own launcher and compare. Needs an MI355X
              (refused with one clear line anywhere else).

The kernel module of a variant family provides the pieces (see ``mxfp4_ablation.kernels.gemm``):

* ``make_inputs(*shape, seed=...) -> dict`` of torch tensors in the kernel's layouts;
* ``reference(inputs) -> Tensor``: what the kernel must produce;
* ``OUTPUT``: the key of the output tensor in ``inputs``;
* ``kernel_args(inputs[, **switches]) -> list``: the kernarg list for :func:`gfx950emu.launch`, one
  entry per metadata ``.args`` item (tensors, ints, or ``common.kernarg_entries`` dicts);
* ``launch_config(*shape) -> (grid, block)``;
* ``build(*shape, **switches)``: the FlyDSL launcher, and ``device_args(inputs[, **switches])`` for the
  device path.

The verdict (:data:`COSINE_MIN`, zero hazards) is the project's correctness gate.
"""

from __future__ import annotations

import importlib
import inspect
import time
from typing import Any

from . import modes, reference, toolchain, variants

#: The correctness gate: cosine similarity against the reference and no hazard reports.
COSINE_MIN = 0.99999
BACKENDS = ("emulator", "device")


def _module(variant: variants.Variant):
    return importlib.import_module(variants.KERNEL_MODULES[variant.family])


def _require(module, *names: str) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise ValueError(f"{module.__name__} does not provide {', '.join(missing)} (needed to run it)")


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


def _compare(out, ref) -> dict[str, Any]:
    stats = reference.compare(out, ref)
    return {
        "cosine": float(stats["cosine"]),
        "max_abs_err": float(stats["max_abs_err"]),
        "max_rel_err": float(stats["max_rel_err"]),
        "mismatches": int(stats["mismatches"]),
    }


def verify(variant_name: str, shape: tuple[int, ...], *, backend: str = "emulator", seed: int = 0,
           hazards: str = "report", processes: int = 1, delivery: str = "issue", wave_order: str = "forward",
           delivery_seed: int = 0) -> dict[str, Any]:
    """Run ``variant_name`` at ``shape`` and compare it with the reference.

    Returns a JSON-ready dict: ``passed``, ``cosine``, ``max_abs_err``, ``max_rel_err``,
    ``mismatches``, ``hazards`` (count), ``hazard_reports`` (first few, as text), ``backend``,
    ``variant``, ``shape``, ``seed``, ``seconds`` (backend time), ``compile_seconds``.
    ``delivery`` / ``wave_order`` / ``delivery_seed``: the emulator's load delivery and wave
    scheduling (:func:`gfx950emu.launch`); a kernel that waits correctly gives the same bytes in all.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "device":
        gpu = modes.visible_gpu()
        if gpu is None or gpu.arch != "gfx950":
            where = f"{gpu.name} ({gpu.arch})" if gpu else "no GPU"
            raise ValueError(f"--backend device needs a gfx950 GPU (MI355X); this machine has {where}")
    variant = variants.get(variant_name)
    params = variant.params(tuple(shape))
    module = _module(variant)
    _require(module, "make_inputs", "reference", "OUTPUT", "launch_config")
    shape_args = {k: v for k, v in params.items() if k not in variant.switches}
    inputs = module.make_inputs(**shape_args, seed=seed)
    expected = module.reference(inputs)
    result: dict[str, Any] = {"variant": variant.name, "shape": list(shape), "seed": seed, "backend": backend}

    if backend == "emulator":
        import gfx950emu

        _require(module, "kernel_args")
        art = toolchain.compile(variant.target, params)
        grid, block = module.launch_config(**shape_args)
        program = gfx950emu.load(art.isa)
        start = time.perf_counter()
        run = gfx950emu.launch(program, grid=grid, block=block, args=_call_with_switches(module.kernel_args, inputs, variant.switches),
                               hazards=hazards, processes=processes, delivery=delivery,
                               wave_order=wave_order, seed=delivery_seed)
        result.update(delivery=delivery, wave_order=wave_order, delivery_seed=delivery_seed,
                      buffers_sha256=buffers_digest(inputs))
        result["seconds"] = round(time.perf_counter() - start, 3)
        result["compile_seconds"] = art.compile_seconds
        # s_nop wait-state reports (gfx950emu.hazards._WaitStates) are counted apart from the s_waitcnt /
        # LDS-ordering hazards the gate has always meant: several GEMM rungs inherit an M0 -> LDS-DMA
        # wait-state hazard from FlyDSL's inline-asm DMA idiom (issue #12 report).
        ordering = [h for h in run.hazards if h.kind != "wait_states"]
        waits = [h for h in run.hazards if h.kind == "wait_states"]
        result["hazards"] = len(ordering)
        result["hazard_reports"] = [str(h) for h in ordering[:5]]
        result["wait_state_hazards"] = len(waits)
        result["wait_state_reports"] = [str(h) for h in waits[:5]]
        result["out_of_range"] = run.stats.out_of_range
    else:
        import torch

        _require(module, "build", "device_args")
        on_gpu = {k: (v.cuda() if hasattr(v, "cuda") else v) for k, v in inputs.items()}
        launcher = module.build(**params)
        start = time.perf_counter()
        launcher(*_call_with_switches(module.device_args, on_gpu, variant.switches))
        torch.cuda.synchronize()
        result["seconds"] = round(time.perf_counter() - start, 3)
        result["hazards"] = 0
        result["hazard_reports"] = []
        inputs = {k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in on_gpu.items()}

    result.update(_compare(inputs[module.OUTPUT], expected))
    result["passed"] = bool(result["cosine"] >= COSINE_MIN and result["hazards"] == 0)
    return result
