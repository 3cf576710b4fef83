"""Variant name -> launcher factory, so ``mxfp4-ablation bench VARIANT`` is only a lookup.

Two sources, first match wins:

1. :func:`register_launcher` -- explicit registrations (name -> builder(shape) -> factory).
2. The kernel family module of a variant known to :mod:`mxfp4_ablation.variants`: its own
   ``make_case(ctx, shape, switches) -> Case`` if it has one, else :func:`kernel_case`, built from
   the module's contract (``build``, ``make_inputs``, ``device_args``, ``flops``).

Factories must be picklable (module-level functions or functools.partial of them),
because each measurement runs in fresh processes.
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable

_REGISTRY: dict[str, Callable] = {}


class LauncherError(ValueError):
    """No launcher for the requested variant."""


def register_launcher(name: str, builder: Callable) -> None:
    """``builder(shape: tuple[int, ...]) -> factory(ctx) -> Case``."""
    _REGISTRY[name] = builder


def unregister_launcher(name: str) -> None:
    _REGISTRY.pop(name, None)


#: What a kernel module needs for :func:`kernel_case`.
CASE_CONTRACT = ("build", "make_inputs", "device_args", "flops")


def variant_case(ctx, module: str, shape: tuple, switches: tuple):
    """Module-level (picklable) factory: builds a kernel module's case in the worker."""
    mod = importlib.import_module(module)
    if hasattr(mod, "make_case"):
        return mod.make_case(ctx, tuple(shape), frozenset(switches))
    return kernel_case(ctx, mod, tuple(shape), frozenset(switches))


def kernel_case(ctx, mod, shape: tuple, switches: frozenset):
    """A timing case for a kernel variant on the GPU (gfx950), from the kernel module's contract.

    Compiles the variant with FlyDSL's JIT, makes enough input sets (``make_inputs`` with distinct
    seeds) that their bytes exceed the last-level cache, moves their tensors to the device and
    launches on torch's current stream, so graph capture records the launches. ``flops(**shape)``
    counts the useful work of one launch. Off-device it runs on the ``emulated`` backend (the backend's
    ``to_device`` / ``stream`` replace torch's); timing it needs an MI355X.
    """
    import torch

    from ..runner import _call_with_switches
    from .timing import Case

    names = tuple(getattr(mod, "SHAPE_PARAMS", ("M", "N", "K"))) + tuple(getattr(mod, "OPTIONAL_SHAPE_PARAMS", ()))
    params = dict(zip(names, shape))
    launcher = mod.build(**params, **{name: True for name in sorted(switches)})

    to_device = getattr(ctx.backend, "to_device", None) or (lambda t: t.to(ctx.device))
    stream = getattr(ctx.backend, "stream", None) or torch.cuda.current_stream

    def on_device(seed: int) -> tuple:
        inputs = mod.make_inputs(**params, seed=seed)
        moved = {k: (to_device(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        return _call_with_switches(mod.device_args, moved, switches), moved

    first_args, first = on_device(ctx.seed * 1000)
    set_bytes = sum(v.nbytes for v in first.values() if isinstance(v, torch.Tensor))
    rot = ctx.rotation(set_bytes)
    # Keep every set's tensors alive, not only its launcher arguments: an ABI that passes data_ptr()
    # integers (int64_abi) would otherwise launch on freed (and reused) device memory.
    made = [(first_args, first)] + [on_device(ctx.seed * 1000 + i) for i in range(1, rot.n_sets)]
    sets = [args for args, _ in made]

    def launch(i: int):
        launcher(*sets[i], stream=stream())

    return Case(name=f"{mod.__name__.rsplit('.', 1)[-1]}_{'x'.join(map(str, shape))}", launch=launch, rotation=rot,
                flops=float(mod.flops(**params)), bytes_moved=float(set_bytes),
                meta={**params, "switches": sorted(switches)}, release=lambda: (sets.clear(), made.clear()))


def launcher_for(name: str, shape: tuple[int, ...]) -> Callable:
    """The launcher factory of variant ``name`` at ``shape``; LauncherError if none."""
    if name in _REGISTRY:
        return _REGISTRY[name](tuple(shape))
    from .. import variants

    try:
        v = variants.get(name)
    except ValueError as exc:
        raise LauncherError(str(exc)) from None
    except Exception as exc:  # a kernel module that does not import (work in progress)
        raise LauncherError(f"cannot list variants to find {name!r}: "
                            f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    module = variants.KERNEL_MODULES[v.family]
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        raise LauncherError(f"cannot import {module} for {name!r}: "
                            f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    missing = [f for f in CASE_CONTRACT if not hasattr(mod, f)]
    if not hasattr(mod, "make_case") and missing:
        raise LauncherError(f"variant {name!r} ({module}) has no launcher yet (lacks {', '.join(missing)})")
    return functools.partial(variant_case, module=module, shape=tuple(shape),
                             switches=tuple(sorted(v.switches)))
