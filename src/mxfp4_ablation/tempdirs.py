"""Temporary and partial folders that a killed process cannot leave behind for good.

A folder made here holds an flock on its ``.owner`` file for as long as the process that made it is
alive (the kernel drops the lock when the process dies, however it dies). :func:`clean_stale` removes
the folders whose lock is free: a run killed with SIGKILL leaves its folder, and the next run of the
same kind cleans it up. A folder whose owner is alive is never touched, so parallel runs are safe.
Standard library only (the toolchain, below the results layer, uses it too).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from . import paths

#: The file in a partial / temporary folder whose flock says "my run is still alive".
OWNER = ".owner"


def _hold(folder: Path):
    """Take the liveness lock of a fresh folder (kept until the returned handle is closed)."""
    import fcntl

    handle = open(folder / OWNER, "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _abandoned(folder: Path) -> bool:
    """True when no live process holds ``folder``'s liveness lock (its run was killed)."""
    import fcntl

    try:
        handle = open(folder / OWNER, "r+")
    except FileNotFoundError:
        # an owner-less folder: from before the lock, or a run killed between mkdtemp and _hold;
        # stale only when it is not brand new
        try:
            return time.time() - folder.stat().st_mtime > 60
        except OSError:
            return False
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def clean_stale(root: str | Path, pattern: str = "*.partial") -> list[Path]:
    """Remove the folders under ``root`` matching ``pattern`` that a killed run left (no live owner)."""
    root = Path(root)
    removed = []
    if not root.is_dir():
        return removed
    for folder in sorted(root.glob(pattern)):
        if folder.is_dir() and _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def owned_tempdir(prefix: str, root: str | Path | None = None) -> Iterator[Path]:
    """A temporary folder under ``root`` (default: the cache's ``tmp/``) that a killed process cannot
    leave behind for long: the next call removes every abandoned folder of the same prefix."""
    root = Path(root) if root is not None else paths.cache_dir() / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root, f"{prefix}*")
    folder = Path(tempfile.mkdtemp(dir=root, prefix=prefix))
    owner = _hold(folder)
    try:
        yield folder
    finally:
        owner.close()
        shutil.rmtree(folder, ignore_errors=True)
