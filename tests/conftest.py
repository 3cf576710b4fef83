"""Shared test plumbing: the ``upstream`` marker and its count.

Tests that need the upstream kernels ``make upstream`` builds (FlyDSL / aiter checkouts at the pinned
commits and their offline compiles, under the repository's ignored ``upstream/`` folder, or where
``MXFP4_UPSTREAM`` / ``MXFP4_UPSTREAM_OUT`` point) carry ``@pytest.mark.upstream`` and skip with a
message that says how to get them. So that a skipped one is never silent, the end of every run prints
one line: how many upstream tests ran, passed and did not run (``-m upstream`` runs only those).

Also: pytest takes ``src/`` from the checkout it runs in -- not from wherever the venv's editable
install points (a copied or moved checkout, or another worktree sharing a venv) -- and so do the
subprocesses the tests start (``PYTHONPATH``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
if sys.path[:1] != [SRC]:
    sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join([SRC] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                    if p and p != SRC])
for name in [m for m in sys.modules if m == "mxfp4_ablation" or m.startswith(("mxfp4_ablation.", "gfx950emu"))]:
    if not str(getattr(sys.modules[name], "__file__", "") or "").startswith(SRC):
        del sys.modules[name]  # imported from elsewhere before this file ran (a plugin): take ours

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HOW = "run `make upstream` (or set MXFP4_UPSTREAM_OUT / MXFP4_UPSTREAM to an upstream build)"


def upstream_root() -> Path:
    """The folder ``make upstream`` fills (checkouts ``flydsl-<c8>``, ``aiter-<c9>``, ``out/``)."""
    value = os.environ.get("MXFP4_UPSTREAM")
    return Path(value) if value else REPO / "upstream"


def upstream_out() -> Path:
    """The compiled upstream kernels (``<out>/flydsl/<c8>/*.s``, ``<out>/aiter/<c9>/*.s``)."""
    value = os.environ.get("MXFP4_UPSTREAM_OUT")
    return Path(value) if value else upstream_root() / "out"


def need(path: Path, what: str) -> Path:
    """``path``, or skip saying which upstream piece is missing and how to get it."""
    if not path.exists():
        pytest.skip(f"needs {what} ({path} is missing): {HOW}")
    return path


_COUNTS = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_configure(config):
    config.addinivalue_line("markers", "upstream: needs the upstream FlyDSL / aiter build of `make upstream`; "
                                       "counted at the end of every run")


def pytest_runtest_logreport(report):
    if "upstream" not in report.keywords:
        return
    if report.failed:
        _COUNTS["failed"] += 1
    elif report.skipped:
        _COUNTS["skipped"] += 1
    elif report.when == "call" and report.passed:
        _COUNTS["passed"] += 1


def pytest_terminal_summary(terminalreporter):
    if hasattr(terminalreporter.config, "workerinput"):  # an xdist worker: the controller reports
        return
    n = sum(_COUNTS.values())
    if not n:
        return
    line = (f"upstream tests: {_COUNTS['passed']} passed, {_COUNTS['failed']} failed, {_COUNTS['skipped']} did not "
            f"run (no upstream build: {HOW})" if _COUNTS["skipped"] else
            f"upstream tests: {_COUNTS['passed']} passed, {_COUNTS['failed']} failed (upstream build at {upstream_root()})")
    terminalreporter.write_sep("-", line, yellow=bool(_COUNTS["skipped"]))
