"""make setup's bytecode step (mxfp4_ablation.bytecode): pip installs with --no-compile, and the
modules the pipeline imports get their bytecode written once."""

from __future__ import annotations

import importlib
import sys
import sysconfig
from importlib.util import cache_from_source
from pathlib import Path

from mxfp4_ablation import bytecode


def test_the_imported_modules_of_the_venv_get_their_bytecode_once(tmp_path, monkeypatch, request):
    site, elsewhere = tmp_path / "venv" / "site-packages", tmp_path / "src"
    for folder, name in ((site, "bc_probe_site"), (elsewhere, "bc_probe_src")):
        folder.mkdir(parents=True)
        (folder / f"{name}.py").write_text("X = 1\n")
        monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)   # as with PYTHONDONTWRITEBYTECODE=1
    for name in ("bc_probe_site", "bc_probe_src"):
        importlib.import_module(name)
        request.addfinalizer(lambda name=name: sys.modules.pop(name, None))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"purelib": str(site), "platlib": str(site)})
    written, failed = bytecode.compile_imported()
    assert (written, failed) == (1, 0)
    assert Path(cache_from_source(str(site / "bc_probe_site.py"))).is_file()
    assert not Path(cache_from_source(str(elsewhere / "bc_probe_src.py"))).exists()  # not the venv's: left alone
    assert bytecode.compile_imported() == (0, 0)  # already there: nothing written again
