"""Provenance for every result row: what code, which packages, which machine, which mode, when."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from . import paths

PACKAGES = ("flydsl", "torch", "numpy", "scipy", "pandas")

#: The columns :func:`row_columns` adds to each result row.
ROW_FIELDS = ("git_sha", "git_dirty", "flydsl_version", "torch_version", "arch", "device", "mode", "utc")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """``git_sha`` and ``git_dirty`` (tracked files modified) of the checkout. The committed figures
    (``figures/``) do not count: they are the pipeline's output, which a notebook running beside this one
    may be redrawing (a cold ``make reproduce`` otherwise marked rows of a clean clone dirty).

    A copy of the tree without ``.git`` (e.g. on a borrowed GPU machine) takes them from
    ``MXFP4_GIT_SHA`` / ``MXFP4_GIT_DIRTY=1``, set by whoever copied it, and says so in
    ``git_sha_source``; with neither, both are None.
    """
    sha = _git("rev-parse", "HEAD")
    if sha is None and os.environ.get("MXFP4_GIT_SHA"):
        return {"git_sha": os.environ["MXFP4_GIT_SHA"], "git_dirty": os.environ.get("MXFP4_GIT_DIRTY") == "1",
                "git_sha_source": "MXFP4_GIT_SHA (tree copied without .git)"}
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures")
    return {"git_sha": sha, "git_dirty": bool(status) if status is not None else None}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    try:
        import torch

        out["torch_hip"] = getattr(torch.version, "hip", None)
        out["torch_cuda"] = getattr(torch.version, "cuda", None)
    except ImportError:
        pass
    return out


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def collect(mode: str, *, settings: dict[str, Any] | None = None, arch: str | None = None) -> dict[str, Any]:
    """The provenance dict of a run. ``arch`` is the ISA target (default: the GPU's, else gfx950)."""
    from .modes import LABELS, visible_gpu

    if mode not in LABELS:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(LABELS)}")
    gpu = visible_gpu()
    versions = package_versions()
    return {
        **git_state(),
        "versions": versions,
        "flydsl_version": versions.get("flydsl"),
        "torch_version": versions.get("torch"),
        "arch": arch or (gpu.arch if gpu and gpu.arch.startswith("gfx") else "gfx950"),
        "device": gpu.name if gpu else f"cpu ({platform.machine()})",
        "gpu_backend": gpu.backend if gpu else None,
        "host": platform.node(),
        "mode": mode,
        "settings": settings or {},
        "utc": utc_now(),
    }


def row_columns(prov: dict[str, Any]) -> dict[str, Any]:
    """The per-row subset of a provenance dict (the full dict goes into the JSON sidecar)."""
    return {field: prov.get(field) for field in ROW_FIELDS}
