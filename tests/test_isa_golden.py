"""Every variant's ISA is byte-identical to the one recorded before a restructuring (issue #20's rule).

``tests/data/isa_golden.json`` holds the SHA-256 of each variant's final ``.s`` text (the main kernel,
as ``toolchain.compile`` returns it) at the shapes below, recorded from the tree before the kernel
modules were restructured. A pure refactor keeps every hash; a change that is meant to alter a kernel
re-records them in its own commit (``python tests/test_isa_golden.py --write``), so the diff says which
variants moved.

Slow: it compiles every variant at its two shapes (62 compiles, ~6 CPU-s each when the cache is cold).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "data" / "isa_golden.json"
# GEMM: the ISA shape and one gate tile (static_prologue bakes M and N into the code); MoE: a decode and
# a prefill block size at the Kimi shape (block_m changes the kernel).
SHAPES = {"gemm": ["8192,8192,8192", "256,256,3072"],
          "moe": ["16,385,7168,512,9,16", "4096,385,7168,512,9,128"]}


def _cases() -> list[tuple[str, str]]:
    from mxfp4_ablation import variants

    out = []
    for name in variants.all_variants():
        group = "gemm" if name.startswith("gemm") else "moe"
        out += [(name, shape) for shape in SHAPES[group]]
    return out


def _digest(name: str, shape: str) -> str:
    from mxfp4_ablation import shapes, toolchain, variants

    v = variants.get(name)
    art = toolchain.compile(v.target, v.params(shapes.resolve(shape)))
    return hashlib.sha256(art.isa.encode()).hexdigest()


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name,shape", _cases())
def test_isa_is_byte_identical_to_the_recorded_one(name, shape):
    golden = _golden()
    key = f"{name}@{shape}"
    assert key in golden, f"{key} has no recorded ISA: record it with python tests/test_isa_golden.py --write"
    assert _digest(name, shape) == golden[key], f"{key}: the ISA changed"


def test_every_variant_has_a_recorded_isa():
    assert sorted(_golden()) == sorted(f"{n}@{s}" for n, s in _cases())


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps({f"{n}@{s}": _digest(n, s) for n, s in _cases()}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
