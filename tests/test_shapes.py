"""Shapes, seeds and regimes as data: experiments/shapes.toml loads, every shape in it is one its families
can run, the study's named shapes are there, and a broken file is one clear error."""

from __future__ import annotations

import pytest

from mxfp4_ablation import family, shapes
from mxfp4_ablation.errors import UsageError


def _groups():
    return [g for g in shapes.load() if g != "names"]


def test_every_family_has_a_group_whose_params_are_its_shape_params():
    for fam in family.all_families().values():
        g = shapes.group(fam.name)
        assert tuple(g["params"]) == fam.shape_params + fam.optional_shape_params, fam.name
        assert g["seeds"] and all(isinstance(s, int) for s in g["seeds"])


@pytest.mark.parametrize("group", ["gemm", "moe"])
def test_every_shape_of_every_set_passes_its_families_checks(group):
    g = shapes.group(group)
    for set_name in g["sets"]:
        for case in shapes.cases(group, set_name):
            for name in g["families"]:
                fam = family.get(name)
                checked = fam.module.check_shape(**fam.shape(case.shape))
                if case.regime is not None:
                    assert checked["block_m"] == shapes.regimes(group)[case.regime]["block_m"]
    for shape in shapes.load()["names"].values():
        fits = [f for f in family.all_families().values()
                if len(f.shape_params) <= len(shape) <= len(f.shape_params) + len(f.optional_shape_params)]
        assert fits, shape
        for f in fits:
            f.module.check_shape(**f.shape(tuple(shape)))


def test_the_study_shapes_are_in_the_file():
    assert shapes.shapes("gemm", "device") == [(8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192),
                                               (16384, 16384, 16384)]  # FlyDSL PR #990's four
    assert shapes.shapes("gemm", "isa") == [(8192, 8192, 8192)]
    kimi = shapes.model("moe1", "kimi-k2_5-tp4")
    assert (kimi["experts"], kimi["hidden"], kimi["inter"], kimi["topk"]) == (385, 7168, 512, 9)
    assert kimi["tokens"] == [16, 128, 1024, 4096, 16384]
    sweep = shapes.by_regime("moe2", "kimi_sweep")
    assert [s[0] for s in sweep["decode"]] == [16, 128, 1024] and {s[5] for s in sweep["decode"]} == {16}
    assert [s[0] for s in sweep["prefill"]] == [4096, 16384] and {s[5] for s in sweep["prefill"]} == {128}
    assert shapes.by_regime("moe1", "isa") == {"decode": [(16, 385, 7168, 512, 9, 16)],
                                               "prefill": [(4096, 385, 7168, 512, 9, 128)]}
    assert shapes.regimes("moe") == {"decode": {"block_m": 16}, "prefill": {"block_m": 128}}
    assert shapes.resolve("kimi-decode") == (16, 385, 7168, 512, 9, 16) and shapes.resolve("1,2,3") == (1, 2, 3)
    assert shapes.note("gemm", "device")


def test_unknown_names_are_usage_errors():
    with pytest.raises(UsageError, match="no shape set 'nope' for gemm"):
        shapes.cases("gemm", "nope")
    with pytest.raises(UsageError, match="no shapes for 'fp8'"):
        shapes.group("fp8")
    with pytest.raises(UsageError, match="has no regimes"):
        shapes.by_regime("gemm", "device")
    with pytest.raises(UsageError, match="neither comma-separated positive integers"):
        shapes.resolve("kimi")


@pytest.mark.parametrize("text, needle", [
    ('[g]\nfamilies=["x"]\nparams=["M"]\nseeds=[0]\n[g.sets.s]\nshapes=[[0]]\n', "[g.sets.s] shape [0] must be"),
    ('[g]\nfamilies=["x"]\nparams=["M"]\nseeds=[0]\n[g.sets.s]\nshapes=[[1, 2]]\n', "more numbers than M"),
    ('[g]\nfamilies=["x"]\nparams=["M"]\nseeds=[0]\n[g.sets.s]\nfast=[[1]]\n', "'fast' is neither 'shapes' nor a regime"),
    ('[g]\nfamilies=["x"]\nparams=["M", "block_m"]\nseeds=[0]\n[g.regimes.decode]\nblock_m=16\n'
     '[g.sets.s]\ndecode=[[1, 128]]\n', "regime decode must have block_m 16"),
    ('[g]\nfamilies=["x"]\nparams=["M"]\nseeds=[0]\n', "[g] lacks 'sets'"),
    ('[g\n', "shapes.toml"),
])
def test_a_broken_file_is_one_error_naming_the_key(tmp_path, text, needle):
    path = tmp_path / "shapes.toml"
    path.write_text(text)
    with pytest.raises(shapes.ShapesError) as err:
        shapes.load(path)
    assert needle in str(err.value) and str(path) in str(err.value)
