"""runner.verify checks EVERY declared output as it declares (issue #12's first bullet): exact outputs byte
for byte, floating ones within their ulp / absolute bound and cosine; the gate fails if any output fails."""

from __future__ import annotations

import json

import pytest
import torch

from mxfp4_ablation import family, runner
from mxfp4_ablation.family import Output

EXACT = Output("q", "exact", why="quantised")
CLOSE = Output("c", "close", max_ulp=1, min_cosine=0.99999, why="one bf16 rounding")


def test_exact_counts_elements_whose_bytes_differ():
    want = torch.arange(64, dtype=torch.uint8)
    got = want.clone()
    assert runner.compare_output(EXACT, got, want)["passed"]
    got[[3, 40]] ^= 1
    res = runner.compare_output(EXACT, got, want)
    assert not res["passed"] and res["mismatches"] == 2 and res["compare"] == "exact"
    # +0.0 and -0.0 are equal numbers but different bytes: an exact output sees it.
    z = torch.zeros(4, dtype=torch.bfloat16)
    assert runner.compare_output(EXACT, -z, z)["mismatches"] == 4


def test_close_allows_one_ulp_and_no_more():
    want = torch.tensor([1.0, 3.0, -100.0, 0.5], dtype=torch.bfloat16)
    one_ulp = torch.tensor([1.0078125, 3.015625, -100.5, 0.5], dtype=torch.bfloat16)
    res = runner.compare_output(CLOSE, one_ulp, want)
    assert res["passed"] and res["max_ulp_err"] == 1.0 and res["mismatches"] == 0
    two_ulp = one_ulp.clone()
    two_ulp[0] = 1.015625
    res = runner.compare_output(CLOSE, two_ulp, want)
    assert not res["passed"] and res["mismatches"] == 1 and res["max_ulp_err"] == 2.0
    nan = want.clone()
    nan[1] = float("nan")
    assert not runner.compare_output(CLOSE, nan, want)["passed"]


def test_close_also_needs_the_cosine():
    want = torch.ones(8, dtype=torch.float32)
    loose = Output("c", "close", max_abs=10.0, min_cosine=0.999, why="test")
    assert not runner.compare_output(loose, -want, want)["passed"]  # within 10 but pointing the other way


def test_shape_mismatch_is_an_internal_error_not_a_failure():
    with pytest.raises(ValueError, match="shape"):
        runner.compare_output(EXACT, torch.zeros(3, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8))


def test_every_family_declares_outputs_its_reference_gives():
    for fam in family.all_families().values():
        names = [o.name for o in fam.outputs]
        assert len(names) == len(set(names)), fam.name
    assert [(o.name, o.compare) for o in family.get("moe1").outputs] == [("inter_quant", "exact"),
                                                                       ("inter_scale", "exact")]
    assert [(o.name, o.compare) for o in family.get("gemm").outputs] == [("C", "close")]


def test_a_wrong_scale_fails_the_gate_even_when_the_values_match(monkeypatch):
    """moe1's scales are compared too: one wrong E8M0 byte fails verify, naming inter_scale."""
    pytest.importorskip("gfx950emu")
    module = family.get("moe1").module
    real = module.reference

    def one_wrong_scale(inputs):
        out = dict(real(inputs))
        scale = out["inter_scale"].clone()
        scale[0] ^= 1
        out["inter_scale"] = scale
        return out

    good = runner.verify("moe1-v2", (16, 8, 512, 256, 2), seed=1)
    assert good["passed"] and set(good["outputs"]) == {"inter_quant", "inter_scale"}
    assert all(o["passed"] and o["mismatches"] == 0 for o in good["outputs"].values())
    json.dumps(good)  # JSON-ready
    monkeypatch.setattr(module, "reference", one_wrong_scale)
    monkeypatch.setenv("MXFP4_EMULATE_CACHE", "0")  # a reference patched in memory: no cache key sees it
    bad = runner.verify("moe1-v2", (16, 8, 512, 256, 2), seed=1)
    assert not bad["passed"] and bad["failed_outputs"] == ["inter_scale"]
    assert bad["outputs"]["inter_scale"]["mismatches"] == 1 and bad["outputs"]["inter_quant"]["passed"]
    assert bad["cosine"] == good["cosine"]  # the old single-output number could not see it
