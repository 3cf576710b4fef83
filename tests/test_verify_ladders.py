"""The correctness gate, in CI: every ladder and leave-one-out variant, run in the gfx950 emulator
with the s_waitcnt hazard checker, matches the torch reference in every declared output (exact ones byte
for byte, floating ones within their bound; cosine >= 0.99999) with no hazards.

GEMM shapes: one 256x256 tile with the runtime K loop present for every variant (K=1536), and a
multi-tile 512x512 launch (4 workgroups, XCD tile order). MoE: the small test problem (8 experts,
hidden 512, intermediate 256, top-2) in both regimes, with padding rows, and a single token (so
most experts are empty).
"""

import pytest

from mxfp4_ablation import family, runner, shapes, variants

ALL = variants.all_variants()
# experiments/shapes.toml's "gate" sets: GEMM (256,256,3072) (every variant's runtime K loop, two trips or more) and (512,512,512);
# MoE tokens,experts,hidden,intermediate,topk[,block_m]: decode blocks at M=16 and M=200, prefill blocks
# (128 rows, mostly padding) at M=200, and a single token.
GEMM_SHAPES = shapes.shapes("gemm", "gate")
MOE_SHAPES = shapes.shapes("moe", "gate")


def _cases(family, shapes):
    return [pytest.param(name, shape, id=f"{name}-{'x'.join(map(str, shape))}")
            for name, v in ALL.items() if v.family == family for shape in shapes]


@pytest.mark.parametrize("name, shape", _cases("gemm", GEMM_SHAPES) + _cases("moe1", MOE_SHAPES)
                         + _cases("moe2", MOE_SHAPES))
def test_variant_passes_the_gate(name, shape):
    result = runner.verify(name, shape, backend="emulator", seed=1)
    assert result["hazards"] == 0, result["hazard_reports"]
    assert result["cosine"] >= runner.COSINE_MIN, result
    outputs = result["outputs"]
    assert list(outputs) == [o.name for o in family.get(ALL[name].family).outputs]  # every declared output
    assert all(o["passed"] for o in outputs.values()), outputs
    assert result["passed"]


def test_every_family_has_variants():
    families = {v.family for v in ALL.values()}
    assert {"gemm", "moe1"} <= families
    assert sum(v.family == "gemm" for v in ALL.values()) == 10 + 7  # ladder + leave-one-out
