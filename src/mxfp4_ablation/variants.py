"""Kernel variants as data: every registered family's ladder and leave-one-out set, by name, and
any other valid switch subset on demand.

The families and their :class:`~mxfp4_ablation.family.Switch` records live in
:mod:`mxfp4_ablation.family` (one registry); this module flattens them into :class:`Variant` rows.
A ladder variant's predecessor is the previous rung; a leave-one-out variant's is the full ladder's
last rung. :func:`all_variants` lists the ladders and leave-one-out sets only (what the notebooks
step through); :func:`get` also resolves a *subset* name (``gemm+agpr_acc+k_unroll4``,
``gemm@0x21``, ``gemm-v9-no-g2s_m0``: see :meth:`mxfp4_ablation.family.Family.subset_name`) into a
``kind="subset"`` :class:`Variant` whose predecessor is the family's empty set (``gemm-v0``, the
A/B baseline of a subset), so every command that takes a VARIANT takes any valid subset.
:func:`subset_variants` lists a family's valid subsets.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import family
from .errors import UsageError

#: Family name -> kernel module (the registry's own list; kept under its old name for callers).
KERNEL_MODULES = family.FAMILIES


@dataclass(frozen=True)
class Variant:
    name: str
    family: str
    switches: frozenset
    predecessor: str | None
    kind: str  # "ladder", "leave-one-out" or "subset"

    @property
    def spec(self) -> family.Family:
        """The registered :class:`~mxfp4_ablation.family.Family`."""
        return family.get(self.family)

    @property
    def module(self):
        """The kernel module (the :class:`~mxfp4_ablation.family.KernelFamily` implementation)."""
        return self.spec.module

    @property
    def target(self) -> str:
        return self.spec.target

    @property
    def switch(self) -> str | None:
        """The one switch this variant adds to (ladder) or drops from (leave-one-out) its predecessor;
        None for the baseline."""
        if self.predecessor is None:
            return None
        changed = self.switches ^ get(self.predecessor).switches
        return next(iter(changed)) if len(changed) == 1 else None

    def shape(self, shape: tuple[int, ...]) -> dict:
        """``--shape`` numbers -> shape keywords (count checked here, values by the kernel module)."""
        return self.spec.shape(tuple(shape))

    def params(self, shape: tuple[int, ...]) -> dict:
        """Shape keywords plus ``switch=True`` for each switch: the ``toolchain.compile`` parameters."""
        return {**self.shape(shape), **{s: True for s in sorted(self.switches)}}

    def switch_kwargs(self) -> dict:
        return {s: True for s in sorted(self.switches)}


def family_variants(fam: family.Family) -> dict[str, Variant]:
    """One family's variants: the ladder in order, then the leave-one-out set."""
    out: dict[str, Variant] = {}
    previous = None
    for name, switches in fam.ladder:
        out[name] = Variant(name, fam.name, frozenset(switches), previous, "ladder")
        previous = name
    for name, switches in fam.leave_one_out():
        out[name] = Variant(name, fam.name, frozenset(switches), previous, "leave-one-out")
    return out


def all_variants() -> dict[str, Variant]:
    out: dict[str, Variant] = {}
    for fam in family.all_families().values():
        out.update(family_variants(fam))
    return out


def subset_variant(fam: family.Family, switches) -> Variant:
    """The :class:`Variant` of one valid switch set of ``fam``, under its canonical name (a ladder rung
    or leave-one-out set comes back as that variant)."""
    name = fam.subset_name(switches)
    known = family_variants(fam)
    if name in known:
        return known[name]
    return Variant(name, fam.name, frozenset(switches), fam.ladder[0][0], "subset")


def subset_variants(family_name: str) -> list[Variant]:
    """Every valid switch subset of a family, by size then mask (the empty set first)."""
    fam = family.get(family_name)
    return [subset_variant(fam, s) for s in fam.subsets()]


def get(name: str) -> Variant:
    """A ladder, leave-one-out or subset variant by name (UsageError for an unknown name, an unknown
    switch or a subset whose requirements do not hold)."""
    variants = all_variants()
    if name in variants:
        return variants[name]
    for fam in family.all_families().values():
        sw = fam.parse_subset(name)
        if sw is not None:
            return subset_variant(fam, sw)
    raise UsageError(f"unknown variant {name!r} (known: {', '.join(variants)}; or a valid switch subset "
                     f"FAMILY+SWITCH+SWITCH..., e.g. gemm+agpr_acc+k_unroll4, or FAMILY@HEXMASK)")


def parse_shape(text: str) -> tuple[int, ...]:
    """``"512,512,1024"`` -> ``(512, 512, 1024)``; positive integers only."""
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"shape {text!r} must be comma-separated integers, e.g. 512,512,1024") from None
    if not shape or any(n <= 0 for n in shape):
        raise UsageError(f"shape {text!r} must be positive integers")
    return shape
