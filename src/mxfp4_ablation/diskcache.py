"""The two primitives of every on-disk cache and result file: atomic writes, and compute-once.

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: write a temp file beside the target, fsync,
  then ``os.replace`` -- readers see the old file or the new one, never a torn one.
* :func:`load_or_compute`: a cache lookup that computes each missing entry in ONE process (issue #24:
  ``make reproduce`` runs two notebooks at once, and neighbouring steps model the same variants). On a
  miss it takes an exclusive ``flock`` on ``<entry>.lock`` beside the entry, looks again under the lock
  and computes (and stores) only what is still missing; a process that finds the lock taken waits for
  it, holding no other lock, then finds the entry stored. One lock per key and never a wait while
  holding one, so no deadlock; the kernel drops a killed holder's lock, so none is ever stale.

Standard library only: the compile cache (:mod:`.toolchain`, below the results layer) uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; caches and results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def lock_path(entry: Path) -> Path:
    """The lock file of a cache entry (a file or a folder): ``<entry>.lock`` beside it."""
    return entry.with_name(entry.name + ".lock")


def _acquire(path: Path, blocking: bool) -> int | None:
    """A descriptor holding the exclusive flock of ``path``; None when another holds it and not ``blocking``.

    The holder removes the lock file when it is done (:func:`_release`), so a lock taken on a file that is
    no longer at ``path`` is on a dead file: it is dropped and ``path`` opened again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _release(path: Path, fd: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # while still holding it: a waiter on this file then sees it gone and retries
    os.close(fd)


def load_or_compute(entries: Sequence[Path], load: Callable[[int], T | None],
                    compute: Callable[[list[int]], list[T]]) -> list[tuple[T, bool]]:
    """``(value, cached)`` for every cache entry ``entries[i]``: ``load(i)`` (None: a miss -- a missing,
    partial or corrupt entry), else what ``compute(indices)`` returns for it, in the order given.
    ``compute`` must store every value it returns before it returns (it runs under the entries' locks).

    The misses whose locks are free are looked up again under their locks and the ones still missing
    computed in one ``compute`` call (a batch: e.g. one compile worker for many kernels); a miss whose
    lock another process or thread holds is waited for afterwards, with no lock held, and computed
    alone only if that holder stored nothing (it failed or was killed)."""
    values: list = [load(i) for i in range(len(entries))]
    cached = [v is not None for v in values]
    held: dict[int, int] = {}
    busy: list[int] = []
    try:
        for i in (i for i, v in enumerate(values) if v is None):
            fd = _acquire(lock_path(entries[i]), blocking=False)
            if fd is None:
                busy.append(i)
                continue
            held[i] = fd
            values[i] = load(i)  # another process may have stored it since the first look
            cached[i] = values[i] is not None
        todo = [i for i in held if values[i] is None]
        if todo:
            for i, value in zip(todo, compute(todo), strict=True):
                values[i] = value
    finally:
        for i, fd in held.items():
            _release(lock_path(entries[i]), fd)
    for i in busy:
        fd = _acquire(lock_path(entries[i]), blocking=True)
        try:
            values[i] = load(i)
            cached[i] = values[i] is not None
            if values[i] is None:
                (values[i],) = compute([i])
        finally:
            _release(lock_path(entries[i]), fd)
    return list(zip(values, cached))


def load_or_compute_one(entry: Path, load: Callable[[], T | None], compute: Callable[[], T]) -> tuple[T, bool]:
    """:func:`load_or_compute` of one entry: ``(load() or compute()'s value, cached)``."""
    return load_or_compute([entry], lambda _: load(), lambda _: [compute()])[0]
