"""Every figure of the study, registered by name, drawn from stored data alone.

A figure is ``@figure("group/name", run="<notebook run name>")`` (it draws from the latest published run
of that notebook) or ``@figure("group/name", data="<folder under experiments/>")`` (committed data). Its
function takes that folder and returns a matplotlib figure. Notebooks call :func:`render` by name right
after writing their data; ``make figures`` (``python -m mxfp4_ablation.figures``) redraws every
registered figure from stored tables without compiling, measuring or importing FlyDSL.

The modules in :data:`FIGURE_MODULES` register their figures on import; they must import neither
FlyDSL nor the kernel registry at import time (``tests/test_figures.py`` blocks ``flydsl`` and runs
the redraw).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import paths, plots, results
from .studies import STUDIES

#: Modules whose figures are registered on import: the two single notebooks' and every study's.
FIGURE_MODULES = ("mxfp4_ablation.studies.walkthrough", "mxfp4_ablation.studies.harness", *STUDIES.values(),
                  "mxfp4_ablation.studies.attribution_views")  # Shapley shares + interactions (#23)


@dataclass(frozen=True)
class Figure:
    name: str
    run: str | None  # the notebook run it draws from (latest published run), or
    data: str | None  # a committed folder under experiments/
    draw: Callable

    def source(self) -> Path | None:
        """The folder this figure draws from now (None: no run of its notebook yet)."""
        if self.data is not None:
            path = paths.experiments_dir() / self.data
            return path if path.is_dir() else None
        return results.latest_run(self.run)


FIGURES: dict[str, Figure] = {}


def figure(name: str, run: str | None = None, data: str | None = None):
    if (run is None) == (data is None):
        raise ValueError(f"figure {name!r}: give exactly one of run= and data=")

    def register(func):
        FIGURES[name] = Figure(name, run, data, func)
        return func

    return register


def load() -> dict[str, Figure]:
    """Import every figure module (registering its figures); the registry."""
    for module in FIGURE_MODULES:
        importlib.import_module(module)
    return FIGURES




def publishes(run_dir: Path) -> bool:
    """Whether figures drawn from ``run_dir`` go to ``figures/``: only a run folder of the pipeline (a
    published or partial run under ``experiments/``) or committed data there. A notebook opened by hand
    (no ``out_dir``: a scratch folder under the cache) never overwrites the committed figures."""
    try:
        Path(run_dir).resolve().relative_to(paths.experiments_dir().resolve())
    except ValueError:
        return False
    return True


def scratch_root() -> Path:
    """Where an interactive run's figures go (never ``figures/``)."""
    return paths.cache_dir() / "scratch" / "figures"


def render(name: str, run_dir: str | Path | None = None, root: str | Path | None = None) -> list[Path]:
    """Draw figure ``name`` from ``run_dir`` (default: its source) and save it (svg + png) under figures/
    -- or, for a ``run_dir`` outside ``experiments/`` (an interactive run), under :func:`scratch_root`."""
    import matplotlib.pyplot as plt

    load()
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r} (known: {', '.join(sorted(FIGURES))})")
    run_dir = Path(run_dir) if run_dir is not None else FIGURES[name].source()
    if run_dir is None:
        raise ValueError(f"figure {name!r}: no stored data to draw from yet")
    plots.apply_style()
    if root is None and not publishes(Path(run_dir)):
        root = scratch_root()
    with _watching(Path(run_dir)) as seen:
        fig = FIGURES[name].draw(Path(run_dir))
    try:
        out = plots.savefig(fig, name, root=root)
    finally:
        plt.close(fig)
    # a drawing writes nothing into its run folder: what it read is as it was when it read it
    state = {"read": _read_state(Path(run_dir), seen)} if seen.paths or seen.folders else \
        {"folder": _data_state(Path(run_dir))}
    _record_drawn(name, Path(run_dir), state, out)
    return out


class _Seen:
    """What a drawing asked of its run folder: the paths it opened or stat'ed (an existence check
    included) and the folders it listed, relative to the folder."""

    def __init__(self, root: Path):
        self.root = os.path.abspath(root) + os.sep
        self.paths: set[str] = set()
        self.folders: set[str] = set()

    def note(self, path, into: set) -> None:
        if isinstance(path, int) or path is None:  # a file descriptor, not a path
            return
        try:
            full = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if (full + os.sep).startswith(self.root):
            into.add(os.path.relpath(full, self.root))


_SEEN: _Seen | None = None
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    seen = _SEEN
    if seen is None or not args:
        return
    if event == "open":
        seen.note(args[0], seen.paths)
    elif event in ("os.scandir", "os.listdir"):
        seen.note(args[0] if args[0] is not None else ".", seen.folders)


@contextlib.contextmanager
def _watching(run_dir: Path):
    """Record what the drawing inside reads of ``run_dir``: every ``open`` and folder listing (Python's
    audit events) and every ``os.stat`` (``Path.exists`` / ``is_file`` / ``is_dir`` and ``os.path``'s
    checks call it), so a figure is drawn again only when something it read or looked for changed
    (:func:`drawn_from`), not whenever a later cell adds an unrelated table to the folder (the summary
    drew most of its figures twice: issue #24)."""
    global _SEEN, _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True
    seen, real_stat = _Seen(run_dir), os.stat

    def stat(path, *args, **kwargs):
        seen.note(path, seen.paths)
        return real_stat(path, *args, **kwargs)

    _SEEN, os.stat = seen, stat
    try:
        yield seen
    finally:
        _SEEN, os.stat = None, real_stat


def _read_state(run_dir: Path, seen: _Seen) -> dict:
    """The state of what a drawing read of ``run_dir`` (:class:`_Seen`): each path's [size, mtime_ns]
    ("dir" for a folder, None for a path that does not exist) and each listed folder's entries (less the
    executed notebook and the lock file, as :func:`_data_state`)."""
    from .tempdirs import OWNER

    state: dict = {}
    for rel in sorted(seen.paths):
        path = run_dir / rel
        try:
            st = path.stat()
        except OSError:
            state[f"path:{rel}"] = None
            continue
        state[f"path:{rel}"] = "dir" if path.is_dir() else [st.st_size, st.st_mtime_ns]
    for rel in sorted(seen.folders):
        try:
            names = sorted(p.name for p in (run_dir / rel).iterdir()
                           if p.suffix != ".ipynb" and p.name != OWNER)
        except OSError:
            names = None
        state[f"list:{rel}"] = names
    return state


def _drawn_record(name: str) -> Path:
    return paths.cache_dir() / "figure-inputs" / f"{name}.json"


def _data_state(run_dir: Path) -> dict:
    """Every data file of a run folder (the executed notebook, copied in last, is none; nor is the
    ``.owner`` lock file of a run in progress, gone once it is published): name -> [size, mtime_ns]. A
    drawing may read any of them or only check that one exists, so it is the whole folder."""
    from .tempdirs import OWNER

    state = {}
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and p.suffix != ".ipynb" and p.name != OWNER:
            st = p.stat()
            state[p.relative_to(run_dir).as_posix()] = [st.st_size, st.st_mtime_ns]
    return state


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _run_id(run_dir: Path) -> str:
    """A run folder's id: its name without the ``.<random>.partial`` of a run in progress."""
    return run_dir.name.split(".")[0]


def _record_drawn(name: str, run_dir: Path, state: dict, out: list[Path]) -> None:
    """The run folder figure ``name`` was just drawn from (its data files as they were) and its files."""
    record = {"run": _run_id(run_dir), "data": state, "outputs": {str(p.resolve()): _sha(p) for p in out}}
    with contextlib.suppress(OSError):
        results.atomic_write_text(_drawn_record(name), json.dumps(record))


def drawn_from(name: str, run_dir: str | Path) -> bool:
    """Whether figure ``name``'s files are its last drawing, made from ``run_dir`` (or from the ``.partial``
    folder that was published as it) with everything the drawing read or looked for there as it is now
    (:func:`_watching`; a drawing that touched nothing there: every data file of the folder): a redraw
    would read the same and give the same bytes (figures are drawn from stored data alone)."""
    try:
        record = json.loads(_drawn_record(name).read_text())
        run, state, outputs = str(record["run"]), dict(record["data"]), dict(record["outputs"])
    except (OSError, ValueError, TypeError, KeyError):
        return False
    run_dir = Path(run_dir)
    if "read" in state:  # what the drawing read (render's _watching) or, where it read nothing, the folder
        now = {"read": _read_state(run_dir, _seen_of(run_dir, state["read"]))}
    else:
        now = {"folder": _data_state(run_dir)}
    if not outputs or run != _run_id(run_dir) or state != now:
        return False
    return all(_sha(Path(p)) == sha for p, sha in outputs.items())


def _seen_of(run_dir: Path, read: dict) -> _Seen:
    """The :class:`_Seen` a recorded :func:`_read_state` was taken of."""
    seen = _Seen(run_dir)
    for key in read:
        kind, _, rel = key.partition(":")
        (seen.paths if kind == "path" else seen.folders).add(rel)
    return seen


def main(argv: list[str] | None = None) -> int:
    load()
    missing = 0
    for fig in sorted(FIGURES.values(), key=lambda f: f.name):
        source = fig.source()
        if source is None:
            print(f"figures: {fig.name}: no run of {fig.run or fig.data!r} yet (make reproduce writes one)")
            missing += 1
            continue
        try:
            drawn = render(fig.name, source)
        except FileNotFoundError as err:  # a run from before this figure existed
            print(f"figures: {fig.name}: {source.name} lacks its data ({err})")
            missing += 1
            continue
        except results.CorruptTable as err:  # a damaged table: say which, draw nothing from it
            print(f"figures: {fig.name}: {err}")
            missing += 1
            continue
        for path in drawn:
            print(f"figures: {path} <- {source.name}")
    return 0 if not missing else 1


if __name__ == "__main__":
    # `python -m mxfp4_ablation.figures` runs this file as __main__, a second module object: the figure
    # modules register into the imported mxfp4_ablation.figures, so its main() must be the one that runs.
    from mxfp4_ablation import figures as _registry

    sys.exit(_registry.main())
