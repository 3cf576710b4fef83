"""Bytecode for the venv's third-party modules that the pipeline imports (``make setup``, issue #24).

``pip install`` byte-compiles every module of every package it installs: about a minute of a cold
``make reproduce`` on 2 cores, most of it for modules nothing here imports (test suites, unused
backends). ``make setup`` installs with ``--no-compile`` and then runs ``python -m
mxfp4_ablation.bytecode``: it imports what the pipeline imports -- the third-party packages and the
notebook, kernel, Dask and test machinery of :data:`EXTRA` (their bytecode written as they load), then
every module of ``mxfp4_ablation`` and ``gfx950emu`` -- and writes the bytecode of each imported module
that lives in this venv's own site-packages and has none yet (``py_compile``, to the path Python reads
it from). Every later process reads those files, also one run with
``PYTHONDONTWRITEBYTECODE`` set; a module imported only later is compiled when it is imported, as
without pip's step. Our own sources (``src/``) and a kept system torch are left as they are.
"""

from __future__ import annotations

import importlib
import pkgutil
import py_compile
import sys
import sysconfig
import time
from pathlib import Path

#: Imported besides our own packages: the third-party packages they import, and what a notebook kernel,
#: papermill, a Dask worker, the figures and ``make test`` load that our modules import only when they run.
EXTRA = ("numpy", "torch", "pandas", "scipy", "matplotlib", "pyarrow", "flydsl", "dask", "distributed", "IPython", "IPython.display", "ipykernel.kernelapp", "ipykernel.ipkernel", "jupyter_client",
         "nbclient", "nbformat", "papermill", "jupytext", "traitlets", "pygments", "yaml", "PIL.Image",
         "PIL.PngImagePlugin", "matplotlib.pyplot", "matplotlib.backends.backend_agg",
         "matplotlib.backends.backend_svg", "pyarrow.parquet", "pyarrow.dataset", "scipy.stats", "scipy.optimize",
         "seaborn", "dask.distributed", "distributed.nanny", "distributed.worker", "distributed.deploy.local",
         "tqdm", "pytest", "xdist.plugin", "hypothesis", "nbmake.pytest_plugin")

#: Modules of our packages that run something when imported.
_SKIP = ("__main__", "_compile_worker")


def _import(names) -> list[str]:
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module missing only loses its bytecode
            failed.append(name)
    return failed


def _import_all() -> list[str]:
    """Import :data:`EXTRA` (writing their bytecode as they load: third-party only), then our packages'
    modules (as the environment says); the names that failed to import (optional extras)."""
    keep = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        failed = _import(EXTRA)
    finally:
        sys.dont_write_bytecode = keep
    import gfx950emu
    import mxfp4_ablation

    return failed + _import(m.name for pkg in (mxfp4_ablation, gfx950emu)
                            for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
                            if m.name.rsplit(".", 1)[-1] not in _SKIP)


def _fresh(source: Path, pyc: Path) -> bool:
    try:
        return pyc.stat().st_mtime >= source.stat().st_mtime
    except OSError:
        return False


def compile_imported() -> tuple[int, int]:
    """Write the bytecode of every imported module under this venv's site-packages; (written, failed)."""
    roots = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    roots = {r for r in roots if str(r).startswith(str(Path(sys.prefix).resolve()))}
    written = failed = 0
    from importlib.util import cache_from_source

    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        p = Path(path).resolve()
        if not any(r in p.parents for r in roots) or _fresh(p, Path(cache_from_source(str(p)))):
            continue
        try:
            py_compile.compile(str(p), doraise=True)
            written += 1
        except (py_compile.PyCompileError, OSError):
            failed += 1
    return written, failed


def main() -> int:
    t0 = time.perf_counter()
    missing = _import_all()
    written, failed = compile_imported()
    note = f"; not importable: {', '.join(missing)}" if missing else ""
    print(f"setup: bytecode of {written} imported modules written ({failed} failed) in "
          f"{time.perf_counter() - t0:.1f} s{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
