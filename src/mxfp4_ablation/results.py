"""Result files: never half-written, never overwriting an earlier run.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` (:mod:`.diskcache`'s, which the caches share):
  write a temp file beside the target, fsync, then ``os.replace`` -- readers see the old file or the
  new one, never a torn one.
* :func:`write_table`: a long-format parquet plus a ``.json`` provenance sidecar; every row also
  carries the provenance columns (:data:`provenance.ROW_FIELDS`) and the harness settings as JSON.
* :func:`run_dir`: a context manager yielding ``experiments/<run-id>.partial/``; on success it is
  renamed to ``experiments/<run-id>/``; on an exception it is removed. Run ids are UTC time + git sha,
  made unique, so no run ever lands on top of another. A partial folder holds an flock on its
  ``.owner`` file while its run is alive; one whose lock is free was left by a killed run and is
  removed by the next :func:`run_dir` (:func:`clean_stale`). :func:`latest_run` never returns one.
* Every table's sidecar records the parquet's ``sha256``; :func:`read_table` checks it and raises
  :class:`CorruptTable` (naming the file) on a mismatch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from . import paths
from .diskcache import atomic_write_bytes, atomic_write_text  # noqa: F401 - re-exported
from .provenance import git_state, row_columns, utc_now
from .tempdirs import OWNER, _hold, clean_stale, owned_tempdir  # noqa: F401 - re-exported


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


class CorruptTable(ValueError):
    """A stored table does not match the checksum its sidecar recorded (or cannot be read at all)."""


#: The sidecar key holding the parquet's sha256 (hex).
CHECKSUM_KEY = "table_sha256"


def write_table(df, path: str | Path, provenance: dict[str, Any]) -> Path:
    """Write ``df`` to ``path`` (.parquet) with provenance columns, plus ``path.json`` (full provenance
    and the parquet's sha256, :data:`CHECKSUM_KEY`).

    The parquet is written last, so a reader that finds it also finds its sidecar.
    """
    import pandas as pd

    path = Path(path)
    if path.suffix != ".parquet":
        raise ValueError(f"result tables are parquet files; got {path.name!r}")
    if not isinstance(df, pd.DataFrame):
        raise ValueError("write_table expects a pandas DataFrame")
    table = df.copy()
    for column, value in row_columns(provenance).items():
        table[column] = value
    table["settings"] = json.dumps(provenance.get("settings", {}), sort_keys=True, default=str)
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    data = buffer.getvalue()
    atomic_write_json(path.with_suffix(".json"), {**provenance, CHECKSUM_KEY: hashlib.sha256(data).hexdigest()})
    atomic_write_bytes(path, data)
    return path


def read_table(path: str | Path):
    """Read a table written by :func:`write_table`; returns ``(DataFrame, provenance dict)``.

    The parquet's bytes must match the sha256 in its sidecar: a missing or unreadable sidecar, a
    mismatch, or a table of a run folder whose sidecar has no checksum raise :class:`CorruptTable` naming
    the file (committed data outside run folders, which git guards, may predate the checksum)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no result table at {path}")
    sidecar = path.with_suffix(".json")
    try:
        prov = json.loads(sidecar.read_text())
    except FileNotFoundError:
        raise CorruptTable(f"{path}: its sidecar {sidecar.name} is missing (cannot check the table)") from None
    except (OSError, ValueError) as err:
        raise CorruptTable(f"{path}: its sidecar {sidecar.name} is unreadable ({err})") from None
    data = path.read_bytes()
    if not isinstance(prov, dict):
        raise CorruptTable(f"{path}: its sidecar {sidecar.name} is not a provenance record")
    want = prov.get(CHECKSUM_KEY)
    if want is None and _in_run_folder(path):
        raise CorruptTable(f"{path}: its sidecar records no checksum ({CHECKSUM_KEY}); written by an older "
                           "version -- rerun its notebook (make reproduce)")
    got = hashlib.sha256(data).hexdigest()
    if want is not None and got != want:
        raise CorruptTable(f"{path} is corrupt: sha256 {got[:12]}... does not match {want[:12]}... recorded in "
                           f"{sidecar.name}; rerun its notebook (make reproduce) or restore the file")
    try:
        return pd.read_parquet(io.BytesIO(data)), prov
    except Exception as err:  # noqa: BLE001 - the bytes are what was written, so this is a writer bug
        raise CorruptTable(f"{path}: matches its checksum but does not parse as parquet ({err})") from None


def _in_run_folder(path: Path) -> bool:
    """A table inside a run folder (``<run-id>[.partial]/...``), which this module always checksums; a
    committed data folder (``experiments/harness-validation/...``, under git) may predate the checksum."""
    return any(_RUN_ID.match(part) for part in Path(path).resolve().parts)


def new_run_id(name: str = "") -> str:
    """``<UTC yyyymmddThhmmssZ>-<sha7>[-dirty][-name]``."""
    state = git_state()
    sha = (state["git_sha"] or "nogit")[:7] + ("-dirty" if state["git_dirty"] else "")
    stamp = utc_now().replace("-", "").replace(":", "")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
    return "-".join(part for part in (stamp, sha, slug) if part)


class Run:
    """A run folder being written. Use it like a path (``run / "x.parquet"``, ``os.fspath(run)``).

    ``path`` is the partial folder while the run is going; ``final`` is set when it is published.
    """

    def __init__(self, path: Path):
        self.path = path
        self.final: Path | None = None

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Run(path={self.path!s}, final={self.final!s})"


@contextlib.contextmanager
def run_dir(name: str = "", root: str | Path | None = None) -> Iterator[Run]:
    """Yield a fresh partial run folder; publish it as ``<root>/<run-id>/`` only on success.

    Abandoned partial folders (of killed runs) under ``root`` are removed first."""
    root = Path(root) if root is not None else paths.experiments_dir()
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root)
    base = new_run_id(name)
    run = Run(Path(tempfile.mkdtemp(dir=root, prefix=f"{base}.", suffix=".partial")))
    owner = _hold(run.path)
    try:
        try:
            yield run
        except BaseException:
            shutil.rmtree(run.path, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):
            os.unlink(run.path / OWNER)
        final, n = root / base, 1
        while final.exists():
            n += 1
            final = root / f"{base}.{n}"
        os.rename(run.path, final)
        run.path = run.final = final
    finally:
        owner.close()


_RUN_ID = re.compile(r"\d{8}T\d{6}Z-")


def is_published(folder: Path) -> bool:
    """A published run folder: a run id, not a ``.partial`` (or other temporary) one."""
    return folder.is_dir() and bool(_RUN_ID.match(folder.name)) and not folder.name.endswith(".partial") \
        and not (folder / OWNER).exists()


def published_runs(name: str = "", root: str | Path | None = None) -> list[Path]:
    """Every published run folder whose id ends with ``name``, oldest first (partial ones never)."""
    root = Path(root) if root is not None else paths.experiments_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_published(p)
                  and (not name or _run_name(p.name).endswith(name)))


def _run_name(folder_name: str) -> str:
    """The id of a run folder without its ``.<n>`` uniqueness suffix."""
    return re.sub(r"\.\d+$", "", folder_name)


def latest_run(name: str = "", root: str | Path | None = None) -> Path | None:
    """The most recent published run folder whose id ends with ``name`` (None if none; never a
    ``.partial`` folder of a running or killed run)."""
    runs = published_runs(name, root)
    return runs[-1] if runs else None


def latest_tables(run_names, table: str) -> list:
    """``table`` (a parquet name) from the latest run of each of ``run_names`` that wrote one."""
    runs = [latest_run(name) for name in run_names]
    return [read_table(r / table)[0] for r in runs if r is not None and (r / table).is_file()]
