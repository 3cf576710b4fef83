"""Where things live. Everything is relative to the repository root, overridable by env vars."""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root: the folder holding pyproject.toml above src/mxfp4_ablation.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _dir(env: str, default: Path) -> Path:
    value = os.environ.get(env)
    return Path(value).resolve() if value else default


def experiments_dir() -> Path:
    """Executed notebooks and result tables, one folder per run (``MXFP4_EXPERIMENTS``)."""
    return _dir("MXFP4_EXPERIMENTS", REPO_ROOT / "experiments")


def figures_dir() -> Path:
    """Deterministic figures for papers and posts (``MXFP4_FIGURES``)."""
    return _dir("MXFP4_FIGURES", REPO_ROOT / "figures")


def cache_dir() -> Path:
    """Compile cache and staged toolkit (``MXFP4_CACHE``); safe to delete."""
    return _dir("MXFP4_CACHE", REPO_ROOT / ".cache")


def reference_dir() -> Path:
    """Published figures we cite (CSV with their sources): committed inputs, not run outputs."""
    return REPO_ROOT / "experiments" / "reference"
