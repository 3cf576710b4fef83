"""Adversarial load timing in CI: every variant, run in the emulator with loads landing at the last
moment their waits allow (``delivery="late"``) and in one seeded random landing order with random
wave interleaving, writes exactly the bits of the ``issue`` run into every buffer, with no hazards.

Shapes: the smallest ones the correctness gate (test_verify_ladders.py) already compiles -- one
256x256 GEMM tile with the runtime K loop, and the single-token MoE problem -- so the compiled
artifacts come from the cache the gate fills.
"""

import pytest

from mxfp4_ablation import runner, variants

ALL = variants.all_variants()
SHAPES = {"gemm": (256, 256, 1536), "moe1": (1, 8, 512, 256, 2), "moe2": (1, 8, 512, 256, 2)}
MODES = [("late", "forward", 0), ("random", "random", 12)]


@pytest.mark.parametrize("name", sorted(ALL))
def test_variant_is_bit_exact_under_late_and_random_delivery(name):
    shape = SHAPES[ALL[name].family]
    base = runner.verify(name, shape, backend="emulator", seed=1)
    assert base["passed"] and base["hazards"] == 0, base
    for delivery, wave_order, dseed in MODES:
        r = runner.verify(name, shape, backend="emulator", seed=1, delivery=delivery, wave_order=wave_order,
                          delivery_seed=dseed)
        assert (r["delivery"], r["wave_order"], r["delivery_seed"]) == (delivery, wave_order, dseed)
        assert r["hazards"] == 0, (delivery, r["hazard_reports"])
        assert r["buffers_sha256"] == base["buffers_sha256"], f"{name}: {delivery}/{wave_order} changed the output bits"
        assert r["passed"], r


def test_every_family_has_a_delivery_shape():
    assert {v.family for v in ALL.values()} <= set(SHAPES)


def test_cli_verify_takes_the_delivery_options(capsys):
    import json

    from mxfp4_ablation.cli import main

    code = main(["verify", "gemm-v0", "--shape", "256,256,1536", "--delivery", "late", "--wave-order", "reverse",
                 "--delivery-seed", "5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"]
    assert (out["delivery"], out["wave_order"], out["delivery_seed"]) == ("late", "reverse", 5)
