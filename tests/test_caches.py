"""Every cache is keyed by the content of everything that can change its value, ``--no-cache`` neither
reads nor writes, and a corrupt entry is recomputed, never fatal (issue #19, findings 2 and the
truncated-timeline crash)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from fakes import fake_kernel
from mxfp4_ablation import modelled, paths, sources, toolchain


@pytest.fixture
def src_copy(tmp_path, monkeypatch):
    """A copy of src/ that the digests read instead of the checkout's (so a test can edit it)."""
    copy = tmp_path / "src"
    shutil.copytree(paths.REPO_ROOT / "src", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sources, "SRC", copy)
    return copy


@pytest.mark.parametrize("rel", ["gfx950emu/timing/__init__.py", "gfx950emu/valu.py", "gfx950emu/mfma.py",
                                 "gfx950emu/timing/cu.py", "gfx950emu/timing/gfx950.toml"])
def test_the_timing_key_covers_every_file_of_the_model(src_copy, rel):
    before = modelled.model_fingerprint()
    path = src_copy / rel
    path.write_text("# an edit\n" + path.read_text())  # at the top: outside the parameter file's [power] section
    assert modelled.model_fingerprint() != before, f"an edit of {rel} keeps the timing cache"


def test_the_power_model_never_keys_the_cycle_cache(src_copy):
    """[power] is applied after the cycle simulation, on every cache hit too: a calibration fit (new
    [power] values, or an edit of power.py) re-evaluates cached cycle results instead of re-simulating."""
    before = modelled.model_fingerprint()
    with open(src_copy / "gfx950emu/timing/power.py", "a") as f:
        f.write("\n# an edit\n")
    toml = src_copy / "gfx950emu/timing/gfx950.toml"
    assert "\n[power]\n" in toml.read_text()
    toml.write_text(toml.read_text().replace("\n[power]\n", "\n[power]\n# an edit of the power section\n"))
    assert modelled.model_fingerprint() == before


@pytest.mark.parametrize("rel", ["mxfp4_ablation/_compile_worker.py", "mxfp4_ablation/toolchain.py",
                                 "mxfp4_ablation/formats.py", "mxfp4_ablation/kernels/common.py",
                                 "mxfp4_ablation/kernels/gemm/__init__.py",
                                 "mxfp4_ablation/kernels/gemm/stages.py",
                                 "mxfp4_ablation/kernels/gemm/steps/08_wide_epilogue.py"])
def test_the_compile_key_covers_the_kernel_and_the_recipe(src_copy, rel):
    target = "mxfp4_ablation.kernels.gemm:build"
    before = toolchain.cache_key(target, {"M": 256})
    with open(src_copy / rel, "a") as f:
        f.write("\n_AN_EDIT = 1  # a code change (a comment alone keeps the compile cache)\n")
    assert toolchain.cache_key(target, {"M": 256}) != before, f"an edit of {rel} keeps the compile cache"


@pytest.mark.parametrize("rel, compiled, launch", [("mxfp4_ablation/kernels/gemm/steps/05_b_carry.py", True, False),
                                                   ("mxfp4_ablation/kernels/gemm/stages.py", True, False),
                                                   ("mxfp4_ablation/kernels/gemm/__init__.py", True, True),
                                                   ("mxfp4_ablation/formats.py", True, True),
                                                   ("mxfp4_ablation/runner.py", False, True)])
def test_an_edit_of_the_kernel_builder_keeps_the_runs_keyed_by_the_isa(src_copy, rel, compiled, launch):
    """A code edit of a GEMM step or stage changes the compile key of a variant that has it (the ISA is
    compiled again) but not the code digest of its emulator checks and timing runs (those key on the ISA
    it compiles to, plus :func:`runner.launch_digest`); an edit of inputs, formats or the runner changes
    both (the runner is no part of a compile)."""
    from mxfp4_ablation import runner, variants
    from mxfp4_ablation.kernels import gemm

    v = variants.get("gemm-v5")
    compile_before = toolchain._source_digest(v.target, v.params((256, 256, 3072)))
    launch_before = runner.launch_digest(gemm)
    with open(src_copy / rel, "a") as f:
        f.write("\n_AN_EDIT = 1\n")
    assert (toolchain._source_digest(v.target, v.params((256, 256, 3072))) != compile_before) is compiled
    assert (runner.launch_digest(gemm) != launch_before) is launch


def test_parsed_source_facts_follow_the_file_and_a_damaged_store_is_a_miss(tmp_path, monkeypatch):
    """Each file's parse (code digests, imports) is kept on disk by file version: an edit is parsed
    again, a damaged store is ignored (parsed again, then rewritten), a file that is not Python hashes
    by its bytes."""
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sources, "_facts", None)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)  # only a checkout's own files are kept on disk
    f = tmp_path / "k.py"
    f.write_text('"""doc"""\nimport mxfp4_ablation.formats\nX = 1  # one\n')
    first = sources.file_facts(f)
    assert first["imports"] == ["mxfp4_ablation.formats"]
    sources.save_facts()
    assert str(f.resolve()) in json.loads(sources._facts_file().read_text())
    f.write_text('"""doc"""\nimport mxfp4_ablation.formats\nX = 1  # two\n')  # a comment: same code
    second = sources.file_facts(f)
    assert second["version"] != first["version"] and (second["code"], second["nodoc"]) == (first["code"], first["nodoc"])
    f.write_text('"""other doc"""\nX = 2\n')
    third = sources.file_facts(f)
    assert third["code"] != first["code"] and third["imports"] == []
    sources.save_facts()
    for damage in (b"{not json", b"[1, 2]", b'{"%s": 7}' % str(f.resolve()).encode()):
        sources._facts_file().write_bytes(damage)
        monkeypatch.setattr(sources, "_facts", None)
        assert sources.file_facts(f)["code"] == third["code"]
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.py"  # not this checkout's: memory only
    elsewhere.write_text("X = 3\n")
    sources.file_facts(elsewhere)
    sources.save_facts()
    assert str(elsewhere.resolve()) not in json.loads(sources._facts_file().read_text())
    elsewhere.unlink()
    f.write_text("def broken(:\n")
    assert sources.file_facts(f)["imports"] is None
    with pytest.raises(SyntaxError):
        sources._file_imports(f, "k")


def test_a_notebook_input_closure_has_the_package_data():
    files = {p.relative_to(sources.SRC).as_posix() for p in sources.module_closure(["gfx950emu.timing"])}
    assert "gfx950emu/timing/gfx950.toml" in files


def test_a_kept_module_closure_follows_edits_new_files_and_removals(monkeypatch, tmp_path):
    """module_closure answers again from memory only while every file it read and folder it looked in
    is as it was: an added import, a new package data file, a module appearing or removed all show."""
    import time

    src = tmp_path / "src"
    pkg = src / "pkgx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("Y = 2\n")
    monkeypatch.setattr(sources, "SRC", src)
    monkeypatch.setattr(sources, "PACKAGES", ("pkgx",))
    monkeypatch.setattr(sources, "_CLOSURES", {})

    def names(*modules):
        return {p.relative_to(src).as_posix() for p in sources.module_closure(modules)}

    def touch_later(path, text):  # a new mtime even on a coarse clock
        time.sleep(0.01)
        path.write_text(text)

    assert names("pkgx.a") == {"pkgx/__init__.py", "pkgx/a.py"}
    assert names("pkgx.a") == {"pkgx/__init__.py", "pkgx/a.py"}  # from memory
    touch_later(pkg / "a.py", "from pkgx import b\nX = 1\n")
    assert names("pkgx.a") == {"pkgx/__init__.py", "pkgx/a.py", "pkgx/b.py"}
    touch_later(pkg / "data.toml", "k = 1\n")
    assert "pkgx/data.toml" in names("pkgx.a")
    assert names("pkgx.c") == set()  # no such module (yet)
    touch_later(pkg / "c.py", "")
    assert names("pkgx.c") == {"pkgx/__init__.py", "pkgx/c.py", "pkgx/data.toml"}
    (pkg / "b.py").unlink()
    assert names("pkgx.a") == {"pkgx/__init__.py", "pkgx/a.py", "pkgx/data.toml"}


# ------------------------------------------------------------------------------------ timing cache

class _FakeEmu:
    """gfx950emu.load / launch stand-ins that count the launches (no ISA is run)."""

    def __init__(self):
        self.launches = 0

    def load(self, isa, kernel=None):
        return SimpleNamespace(name="k")

    def launch(self, prog, grid, block, args, **kw):
        self.launches += 1
        timing = {"cycles": 100 + self.launches, "kernel": fake_kernel(), "model_version": "x",
                  "clock_ghz": 2.4, "by_instruction": {}}
        return SimpleNamespace(timing=timing, seconds=0.0)


@pytest.fixture
def fake_emu(monkeypatch, tmp_path):
    import gfx950emu

    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    emu = _FakeEmu()
    monkeypatch.setattr(gfx950emu, "load", emu.load)
    monkeypatch.setattr(gfx950emu, "launch", emu.launch)
    from gfx950emu.timing import power

    monkeypatch.setattr(power, "enabled", lambda p: False)  # the stand-in records no activity counts
    return emu, tmp_path / "cache"


def _model(**kw):
    return modelled.model_isa("s_endpgm", (1, 1, 1), (64, 1, 1), lambda: [], flops=1.0, **kw)


def test_no_cache_neither_reads_nor_writes(fake_emu):
    emu, cache = fake_emu
    first = _model(use_cache=False)
    assert not first["cached"] and emu.launches == 1
    assert not list(cache.rglob("*.json")), "--no-cache wrote the cache"
    stored = _model()  # now stored ...
    assert emu.launches == 2 and list(cache.rglob("*.json"))
    again = _model(use_cache=False)  # ... and --no-cache does not read it
    assert emu.launches == 3 and not again["cached"]
    assert _model()["cached"] and _model()["cycles"] == stored["cycles"]


@pytest.mark.parametrize("damage", [b"", b'{"cycles": 1', b"\xff\xfe", b"[1, 2]", b'{"label": "modelled"}'])
def test_a_corrupt_timing_entry_is_recomputed(fake_emu, damage):
    emu, cache = fake_emu
    _model()
    (entry,) = cache.rglob("*.json")
    entry.write_bytes(damage)
    out = _model()
    assert not out["cached"] and emu.launches == 2
    assert json.loads(entry.read_text())["cycles"] == out["cycles"]  # rewritten whole


@pytest.mark.parametrize("damage", [b"", b'[{"track": "a"', b"{}", b"\x00\x01"])
def test_a_corrupt_timeline_entry_is_a_miss(monkeypatch, tmp_path, damage):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path))
    modelled.cache_store("ab" * 32, [{"track": "x", "start": 0, "end": 1}], kind="timing-timeline")
    assert modelled.cache_load("ab" * 32, "timing-timeline", expect=list) == [{"track": "x", "start": 0, "end": 1}]
    (entry,) = tmp_path.rglob("*.json")
    entry.write_bytes(damage)
    assert modelled.cache_load("ab" * 32, "timing-timeline", expect=list) is None


# ----------------------------------------------------------------------------------- compile cache

def _artifact(key):
    return toolchain.Artifact(target="mxfp4_ablation.kernels.gemm:build", params={}, arch="gfx950", key=key,
                              isa="s_endpgm", kernels={"k": "s_endpgm"}, resources={}, compile_seconds=0.0,
                              flydsl_version="0.5.0")


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("MXFP4_CACHE", str(tmp_path / "cache"))
    calls = []

    def worker(jobs, arch, *, lowering=True):
        calls.append((jobs, lowering))
        return [_artifact(key) for (_, key) in jobs]

    monkeypatch.setattr(toolchain, "_run_worker", worker)
    return calls, tmp_path / "cache"


def _compile_entries(cache):
    # the parsed-sources store (cache/sources/, mxfp4_ablation.sources) is the key's input, kept by any
    # process that computes a key; whether it is written depends on what this process parsed before
    return [f for f in cache.rglob("*.json") if "sources" not in f.relative_to(cache).parts]


def test_compile_without_cache_neither_reads_nor_writes(fake_compiler):
    calls, cache = fake_compiler
    toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1}, use_cache=False)
    assert len(calls) == 1 and not _compile_entries(cache)
    assert calls[0][1] is False  # nor the lowering cache
    toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1})
    assert len(calls) == 2 and _compile_entries(cache) and calls[1][1] is True
    assert toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1}).cached and len(calls) == 2
    assert not toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1}, use_cache=False).cached


@pytest.mark.parametrize("damage", [b"", b'{"target": ', b"null", b'{"a": 1}'])
def test_a_corrupt_compile_entry_is_recompiled(fake_compiler, damage):
    calls, cache = fake_compiler
    toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1})
    (entry,) = cache.rglob("*.json")
    entry.write_bytes(damage)
    art = toolchain.compile("mxfp4_ablation.kernels.gemm:build", {"M": 1})
    assert not art.cached and len(calls) == 2 and json.loads(entry.read_text())["isa"] == "s_endpgm"
