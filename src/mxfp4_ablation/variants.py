"""Kernel variants as data: each kernel module declares its ladder; this module collects them.

A kernel module (e.g. ``mxfp4_ablation.kernels.gemm``) exposes

* ``LADDER``: ordered list of ``(variant_name, frozenset(switches))`` -- cumulative steps;
* ``leave_one_out()`` (optional): list of ``(variant_name, frozenset(switches))``;
* ``compile_entry(M, N, K, **switches)``: the toolchain target;
* ``SHAPE_PARAMS`` (default ``("M", "N", "K")``) and ``OPTIONAL_SHAPE_PARAMS``: the names of the numbers
  of ``--shape``.

A variant's predecessor is the previous ladder step (leave-one-out variants compare against the full
ladder's last step).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

#: Kernel family -> module. Modules that do not exist yet are skipped.
KERNEL_MODULES = {
    "gemm": "mxfp4_ablation.kernels.gemm",
    "moe1": "mxfp4_ablation.kernels.moe_gemm1",
    "moe2": "mxfp4_ablation.kernels.moe_gemm2",
}


@dataclass(frozen=True)
class Variant:
    name: str
    family: str
    switches: frozenset
    predecessor: str | None
    kind: str  # "ladder" or "leave-one-out"

    @property
    def target(self) -> str:
        return f"{KERNEL_MODULES[self.family]}:compile_entry"

    def params(self, shape: tuple[int, ...]) -> dict:
        module = importlib.import_module(KERNEL_MODULES[self.family])
        names = tuple(getattr(module, "SHAPE_PARAMS", ("M", "N", "K")))
        optional = tuple(getattr(module, "OPTIONAL_SHAPE_PARAMS", ()))
        if not len(names) <= len(shape) <= len(names) + len(optional):
            spec = ",".join(names) + "".join(f"[,{o}]" for o in optional)
            raise ValueError(f"{self.name} takes a shape {spec}; got {len(shape)} numbers")
        return {**dict(zip(names + optional, shape)), **{s: True for s in sorted(self.switches)}}


def _load(family: str):
    try:
        return importlib.import_module(KERNEL_MODULES[family])
    except ModuleNotFoundError as err:
        if err.name == KERNEL_MODULES[family]:
            return None
        raise


def all_variants() -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for family in KERNEL_MODULES:
        module = _load(family)
        if module is None or not hasattr(module, "LADDER"):
            continue
        previous = None
        for name, switches in module.LADDER:
            out[name] = Variant(name, family, frozenset(switches), previous, "ladder")
            previous = name
        last = previous
        for name, switches in getattr(module, "leave_one_out", lambda: [])():
            out[name] = Variant(name, family, frozenset(switches), last, "leave-one-out")
    return out


def get(name: str) -> Variant:
    variants = all_variants()
    if name not in variants:
        known = ", ".join(variants) or "none yet"
        raise ValueError(f"unknown variant {name!r} (known: {known})")
    return variants[name]


def parse_shape(text: str) -> tuple[int, ...]:
    """``"512,512,1024"`` -> ``(512, 512, 1024)``; positive integers only."""
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"shape {text!r} must be comma-separated integers, e.g. 512,512,1024") from None
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"shape {text!r} must be positive integers")
    return shape
