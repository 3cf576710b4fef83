"""FlyDSL on first use: a kernel module declares the FlyDSL names its emission code uses as ``None``
module globals and calls :func:`load_flydsl` (with its ``globals()``) on the first build; importing the
module -- reading its records -- then costs no FlyDSL import."""

from __future__ import annotations


def load_flydsl(namespace: dict) -> None:
    """Fill every FlyDSL name ``namespace`` declares (and still holds as None): ``flyc``, ``fx``, ``ir``,
    ``arith`` (or ``_arith``), ``llvm``, ``scf``, ``rocdl``, ``T``, ``C`` (:mod:`.common`),
    ``const_expr``, ``range_constexpr``."""
    if namespace.get("fx") is not None:
        return
    import flydsl.compiler as flyc
    import flydsl.expr as fx
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import arith, llvm, scf
    from flydsl.expr import const_expr, range_constexpr, rocdl
    from flydsl.expr.typing import T

    from . import common

    names = {"flyc": flyc, "fx": fx, "ir": ir, "arith": arith, "_arith": arith, "llvm": llvm, "scf": scf,
             "rocdl": rocdl, "T": T, "C": common, "const_expr": const_expr, "range_constexpr": range_constexpr}
    namespace.update({k: v for k, v in names.items() if k in namespace})
