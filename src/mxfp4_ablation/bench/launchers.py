"""Variant name -> launcher factory, so ``mxfp4-ablation bench VARIANT`` is only a lookup.

Two sources, first match wins:

1. :func:`register_launcher` -- explicit registrations (name -> builder(shape) -> factory).
2. The kernel family module of a variant known to :mod:`mxfp4_ablation.variants`, if it
   defines ``make_case(ctx, shape, switches) -> Case`` (kernel engineers add it).

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


def variant_case(ctx, module: str, shape: tuple, switches: tuple):
    """Module-level (picklable) factory: builds a kernel module's case in the worker."""
    mod = importlib.import_module(module)
    return mod.make_case(ctx, tuple(shape), frozenset(switches))


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
    if not hasattr(mod, "make_case"):
        raise LauncherError(f"variant {name!r} ({module}) has no launcher yet (no make_case)")
    return functools.partial(variant_case, module=module, shape=tuple(shape),
                             switches=tuple(sorted(v.switches)))
