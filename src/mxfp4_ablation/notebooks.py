"""Run a jupytext percent-format notebook with papermill into a fresh ``experiments/<run-id>/``.

``python -m mxfp4_ablation.notebooks run notebooks/gemm/01_agpr_acc.py [-p name value ...]``

The executed ``.ipynb`` is an output: it lands in the run folder, which is published (renamed from its
``.partial`` name) only when the notebook ran to the end. A failed run leaves its partly executed
notebook in ``experiments/.failed/<name>.ipynb`` for debugging, and no run folder. An interrupted run
(Ctrl-C, SIGTERM, SIGHUP) kills the notebook's kernel at once and publishes nothing.
The notebook receives the parameters ``out_dir`` (the run folder) and ``mode`` (device, emulated or
static, from :func:`mxfp4_ablation.modes.detect`) on top of its own.

Two runs of one notebook at a time are refused with one clear line (an flock on the notebook's source).

``python -m mxfp4_ablation.notebooks deps`` prints the Makefile rules that make a notebook rerun when
*its* inputs change: the modules it imports (followed through ``src/``) with the package data of
their packages (every non-Python file in a package folder, e.g. ``gfx950emu/timing/gfx950.toml``;
:func:`mxfp4_ablation.sources.module_closure`), the kernel modules of its family
(:func:`family_modules`) and the data it reads (:data:`DATA`). It needs only the standard
library, so ``make`` can run it before any setup.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Iterator

from . import paths, sources

KERNEL_NAME = "mxfp4-ablation"
SRC = sources.SRC
PACKAGES = sources.PACKAGES

#: Modules a notebook needs beyond what it imports, by notebook path (fnmatch, first match wins): kernel
#: modules reached by name (importlib), not by an import statement. The study notebooks
#: (``notebooks/<group>/*.py``) need not be listed: their kernels are the families of that group in
#: ``experiments/shapes.toml`` (and the summary's, every family); see :func:`family_modules`.
FAMILY_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("notebooks/00_walkthrough.py", ("mxfp4_ablation.kernels.probe", "mxfp4_ablation.kernels.mfma_tile")),
)
#: Committed data a notebook reads, by notebook path (fnmatch, first match wins); folders are taken whole.
DATA: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("notebooks/harness_validation.py", ("experiments/harness-validation",)),
    ("notebooks/*.py", ("experiments/reference", "experiments/shapes.toml")),
)


#: The notebook that reads the other notebooks' published tables (its inputs include their sources, and
#: the runs it read key its stamp: :func:`_read_runs`).
SUMMARY = "notebooks/summary.py"


class NotebookError(ValueError):
    """Bad input to the runner, or a run refused (the message is meant for the user)."""


def run_name(source: Path) -> str:
    rel = source.resolve().relative_to((paths.REPO_ROOT / "notebooks").resolve())
    return str(rel.with_suffix("")).replace(os.sep, "--")


# ============================================================================ dependencies


_imports = sources.imports
module_closure = sources.module_closure


def notebook_imports(source: Path) -> set[str]:
    """Modules of ours the notebook's code imports (jupytext percent cells are plain Python)."""
    tree = ast.parse(Path(source).read_text(), str(source))
    return _imports(tree, "__notebook__", False)


def _first(table, rel: str) -> tuple[str, ...]:
    for pattern, value in table:
        if fnmatch.fnmatch(rel, pattern):
            return value
    return ()


def family_modules(rel: str) -> set[str]:
    """The kernel modules a notebook at ``rel`` (repo-relative) runs: a step notebook's variant's family
    (:func:`notebook_variant`), else its shapes.toml group's families for ``notebooks/<group>/*``, every
    family for the summary, else :data:`FAMILY_MODULES`."""
    import tomllib

    from .family import FAMILIES

    groups = tomllib.loads((paths.REPO_ROOT / "experiments" / "shapes.toml").read_text())
    parts = rel.split("/")
    if rel == SUMMARY:
        return set(FAMILIES.values())
    name = notebook_variant(paths.REPO_ROOT / rel) if len(parts) == 3 else None
    if name is not None:
        from . import variants

        return {FAMILIES[variants.get(name).family]}
    if len(parts) == 3 and parts[1] in groups and "families" in groups[parts[1]]:
        return {FAMILIES[f] for f in groups[parts[1]]["families"]}
    return set(_first(FAMILY_MODULES, rel))


def study_modules(rel: str) -> set[str]:
    """The study configuration a step notebook at ``rel`` reaches by name (its cells find the variant's
    study with :func:`mxfp4_ablation.studies.study_of`): ``notebooks/<study>/*``."""
    from .studies import STUDIES

    parts = rel.split("/")
    return {STUDIES[parts[1]]} if len(parts) == 3 and parts[1] in STUDIES else set()


def notebook_variant(source: Path) -> str | None:
    """The ``variant = "..."`` a step notebook's parameters set (None: not a step notebook)."""
    for node in ast.parse(Path(source).read_text(), str(source)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["variant"] \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    return None


def unused_sources(source: Path) -> set[Path]:
    """Kernel files a step notebook never runs: those its variant and the variant's predecessor both
    leave out (their kernel module's ``unused_sources``, as the compile cache key does: the GEMM's
    switched-off steps), so an edit of step N reruns the notebooks of steps N, N+1, ... alone."""
    import importlib

    from . import variants

    name = notebook_variant(source)
    if name is None:
        return set()
    v = variants.get(name)
    unused = getattr(importlib.import_module(v.target.partition(":")[0]), "unused_sources", None)
    if unused is None:
        return set()
    names = [n for n in (v.name, v.predecessor) if n]
    skip = [{Path(f).resolve() for f in unused({s: True for s in variants.get(n).switches})} for n in names]
    return set.intersection(*skip)


def notebook_dependencies(source: Path) -> list[Path]:
    """Everything a notebook's result depends on, besides the notebook itself and the environment."""
    source = Path(source).resolve()
    rel = source.relative_to(paths.REPO_ROOT).as_posix()
    modules = notebook_imports(source) | family_modules(rel) | study_modules(rel) | {"mxfp4_ablation.family"}
    files = module_closure(modules) - unused_sources(source)
    if rel == SUMMARY:  # it reads the other notebooks' published tables
        files |= {p.resolve() for p in notebook_sources() if p.resolve() != source}
    for item in _first(DATA, rel):
        path = paths.REPO_ROOT / item
        if path.is_dir():
            files |= {p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        elif path.is_file():
            files.add(path)
    return sorted(files)


def notebook_sources(root: Path | None = None) -> list[Path]:
    root = root or paths.REPO_ROOT / "notebooks"
    return sorted(p for p in root.rglob("*.py") if ".ipynb_checkpoints" not in p.parts)


def make_rules(stamps: str = "experiments/.stamps") -> str:
    """``<stamp>: <its inputs>`` for every notebook (repo-relative paths, one rule per notebook)."""
    lines = ["# generated by `python -m mxfp4_ablation.notebooks deps`; do not edit"]
    for nb in notebook_sources():
        rel = nb.relative_to(paths.REPO_ROOT)
        stamp = f"{stamps}/{rel.relative_to('notebooks').with_suffix('')}.done"
        deps = [p.relative_to(paths.REPO_ROOT).as_posix() for p in notebook_dependencies(nb)]
        lines.append(f"{stamp}: {' '.join([rel.as_posix()] + deps)}")
    return "\n".join(lines) + "\n"


# ============================================================================ running


#: Kernel processes started by this process (their pids; each leads its own session).
_KERNELS: set[int] = set()


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked kernel process
    """Linux: the kernel gets SIGKILL when the process that started it dies, however it dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kernel_manager_class():
    from jupyter_client import AsyncKernelManager

    class TiedKernelManager(AsyncKernelManager):
        """A kernel that dies with its parent, and whose pid the runner knows (to kill it on Ctrl-C)."""

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if sys.platform.startswith("linux"):
                kw.setdefault("preexec_fn", _die_with_parent)
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                _KERNELS.add(process.pid)

    return TiedKernelManager


def _kill_kernels() -> None:
    for pid in list(_KERNELS):
        for kill in (os.killpg, os.kill):  # the kernel leads its own session: take its children too
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                kill(pid, signal.SIGKILL)
        _KERNELS.discard(pid)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; nothing was published."""


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[dict]:
    """SIGINT / SIGTERM / SIGHUP kill the kernel at once and raise :class:`Interrupted`.

    papermill (through nbclient) otherwise lets the running cell finish, and may swallow the
    KeyboardInterrupt; ``state["signal"]`` is checked again before anything is published.
    """
    state: dict = {"signal": None}

    def handler(signum, frame):
        state["signal"] = signum
        _kill_kernels()
        raise Interrupted(f"stopped by {signal.Signals(signum).name}")

    import threading

    if threading.current_thread() is not threading.main_thread():
        yield state  # signals are delivered to the main thread only; nothing to install
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield state
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _kill_kernels()


@contextlib.contextmanager
def _lock(source: Path, name: str) -> Iterator[None]:
    """One run of a notebook at a time: an flock on its source file (no lock files to clean up)."""
    import fcntl

    with open(source, "rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NotebookError(f"{name} is already running (another process holds the lock on {source}); "
                                "wait for it or stop it") from None
        yield


def inputs_digest(source: Path, mode: str) -> str:
    """What a run of ``source`` in ``mode`` is computed from: the notebook's text and its inputs
    (:func:`notebook_dependencies`, code files by their syntax: :func:`.sources.digest`)."""
    return _digests(source, mode)[0]


def _digests(source: Path, mode: str) -> tuple[str, str]:
    """:func:`inputs_digest`, and the same less the kernel builder files among the inputs (those a family
    module's ``builder_sources()`` names: the GEMM's pipeline, stages, slots, issue plan and steps), which
    reach a run only through the kernels it compiles -- plus what else they hold that a notebook shows: the
    family's :class:`~mxfp4_ablation.family.Switch` records (intros, tables and docstrings render from them)."""
    import hashlib
    import importlib

    from .family import FAMILIES

    source = Path(source).resolve()
    deps = notebook_dependencies(source)
    builder, records = set(), []
    for family, module_name in sorted(FAMILIES.items()):
        module = importlib.import_module(module_name)
        files = {Path(f).resolve() for f in getattr(module, "builder_sources", set)()} & set(deps)
        if files:
            builder |= files
            records.append(f"{family} {module.SWITCHES!r}")
    for run in _read_runs(source):  # the summary's tables come from these runs: one rerun, the summary reruns
        records.append(f"run {run}")
    full = f"{mode} " + sources.digest([source, *deps], code=True)
    outer = f"{mode} " + sources.digest([source, *(d for d in deps if d not in builder)], code=True) + " " + \
        hashlib.sha256("\n".join(records).encode()).hexdigest()
    return full, outer


def _read_runs(source: Path) -> list[str]:
    """The published runs of other notebooks whose tables ``source`` reads (the summary: every other
    notebook's latest run), by folder name; "-" for one that has none."""
    from . import results

    if Path(source).resolve() != (paths.REPO_ROOT / SUMMARY).resolve():
        return []
    others = [p for p in notebook_sources() if p.resolve() != Path(source).resolve()]
    return [getattr(results.latest_run(run_name(p)), "name", "-") for p in others]


def _read_stamp(stamp: Path) -> dict:
    """A stamp's record: ``digest`` (:func:`inputs_digest`), ``outer`` (:func:`_digests`' second) and
    ``compiles`` (the run's compiles: :func:`.toolchain.read_compile_log`, None if unknown); an older
    stamp holds the digest alone; an unreadable one is ``{}``."""
    try:
        text = stamp.read_text().strip()
    except OSError:
        return {}
    if not text.startswith("{"):
        return {"digest": text}
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _stamped_run(record: dict, name: str, digest: str) -> Path | None:
    """The published run a stamp (its :func:`_read_stamp` record) that records ``digest`` stands for
    (None: the stamp records another digest, or that run is gone)."""
    from . import results

    return results.latest_run(name) if record.get("digest") == digest else None


def _same_code(compiles: list) -> bool:
    """Every compile of the list -- ``(target, params, arch, code digest)`` -- compiled now (a trace, the
    lowering from its cache where the traced module is unchanged) gives the code it gave then."""
    from . import toolchain

    by_arch: dict[str, list] = {}
    for target, params, arch, code in compiles:
        by_arch.setdefault(arch, []).append((target, params, code))
    try:
        for arch, items in by_arch.items():
            artifacts = toolchain.compile_many([(t, p) for t, p, _ in items], arch=arch)
            if any(toolchain.code_digest(a) != code for a, (_, _, code) in zip(artifacts, items)):
                return False
    except Exception:  # noqa: BLE001 - a compile that fails now is the run's to report, not this check's
        return False
    return True


def _unchanged_code_run(record: dict, name: str, outer: str) -> Path | None:
    """The published run a stamp (its :func:`_read_stamp` record) stands for when, since that run, only
    kernel builder code changed and every compile the run made gives the same code again
    (:func:`_same_code`). None otherwise (then the notebook runs)."""
    from . import results

    compiles = record.get("compiles")
    if record.get("outer") != outer or not isinstance(compiles, list):
        return None
    kept = results.latest_run(name)
    return kept if kept is not None and _same_code(compiles) else None


def _write_stamp(stamp: Path, digest: str, outer: str, compiles: list | None) -> None:
    from . import results

    stamp.parent.mkdir(parents=True, exist_ok=True)
    results.atomic_write_text(stamp, json.dumps({"digest": digest, "outer": outer, "compiles": compiles}) + "\n")


def run(source: str | Path, parameters: dict | None = None, kernel_name: str = KERNEL_NAME,
        stamp: str | Path | None = None) -> Path | None:
    """Execute ``source`` into a new run folder (its path). ``stamp`` (``make reproduce`` passes its
    stamp file): when it records the :func:`inputs_digest` this run would have -- an edit that changed
    only comments or layout of the notebook's code inputs -- nothing runs (None); nor when only kernel
    builder code changed (the GEMM's pipeline, stages or steps: :func:`_digests`) and every compile the
    stamped run made, compiled again, gives the code it gave (:func:`_same_code`: a trace each, the
    lowering cached). After a run the stamp records the digests and the run's compiles (its kernel and
    local workers log them: :data:`.toolchain.COMPILE_LOG_ENV`)."""
    from . import modes

    source = Path(source)
    if not source.is_file() or source.suffix != ".py":
        raise NotebookError(f"{source} is not a jupytext .py notebook")
    name = run_name(source)
    mode, reason = modes.detect()
    digest, outer = _digests(source, mode) if stamp is not None and not parameters else (None, None)
    if digest is not None:
        record = _read_stamp(Path(stamp))
        kept = _stamped_run(record, name, digest)
        if kept is not None:
            print(f"[{name}] inputs changed in comments or layout only: not rerun ({kept.name})", flush=True)
            return None
        kept = _unchanged_code_run(record, name, outer)
        if kept is not None:
            _write_stamp(Path(stamp), digest, outer, record["compiles"])
            print(f"[{name}] only kernel builder code changed and all {len(record['compiles'])} compiles of the "
                  f"run give the same code: not rerun ({kept.name})", flush=True)
            return None
    # nbformat imports jsonschema, whose optional IRI format checks build 38 Lark grammars on import when
    # rfc3987_syntax is installed (JupyterLab's jupyter-events brings it): 1.4 s of every run's start,
    # measured. A notebook's schema has no IRI formats, so this process goes without those checks.
    sys.modules.setdefault("rfc3987_syntax", None)
    import jupytext  # after the skip check: a skipped run never pays for these imports
    import papermill

    from . import results, toolchain

    notebook = jupytext.read(source)
    notebook.cells.append(publish_cell(name))
    from .tempdirs import owned_tempdir

    with _lock(source, name), _stop_on_signals() as state, owned_tempdir("nb-") as tmp, \
            _compile_log(Path(tmp) / "compiles.jsonl") as compile_log:
        src_ipynb = Path(tmp) / f"{source.stem}.ipynb"
        jupytext.write(notebook, src_ipynb)
        executed = Path(tmp) / "out" / f"{source.stem}.ipynb"
        executed.parent.mkdir()
        try:
            with results.run_dir(name) as rd:
                params = {"out_dir": str(rd.path), "mode": mode, **(parameters or {})}
                print(f"[{name}] mode={mode} ({reason}) -> {rd.path.name}", flush=True)
                papermill.execute_notebook(
                    str(src_ipynb), str(executed), parameters=params,
                    kernel_name=kernel_name, language="python", cwd=str(paths.REPO_ROOT), progress_bar=False,
                    kernel_manager_class=_kernel_manager_class(),
                )
                if state["signal"] is not None:  # a swallowed interrupt: still publish nothing
                    raise Interrupted(f"stopped by {signal.Signals(state['signal']).name}")
                shutil.copy(executed, rd / executed.name)
        except Interrupted:
            print(f"[{name}] interrupted; nothing published", file=sys.stderr, flush=True)
            raise
        except BaseException:
            if executed.is_file():
                failed = paths.experiments_dir() / ".failed"
                failed.mkdir(parents=True, exist_ok=True)
                shutil.copy(executed, failed / f"{name}.ipynb")
                print(f"[{name}] FAILED; partly executed notebook: {failed / (name + '.ipynb')}", file=sys.stderr)
            raise
        compiles = toolchain.read_compile_log(compile_log)
    if digest is not None:
        _write_stamp(Path(stamp), digest, outer, compiles)
    print(f"[{name}] done -> {rd.final}", flush=True)
    return rd.final


@contextlib.contextmanager
def _compile_log(path: Path) -> Iterator[Path]:
    """The notebook's kernel and its local workers log their compiles to ``path`` (inherited environment:
    :data:`.toolchain.COMPILE_LOG_ENV`); this process's own variable is restored afterwards."""
    from .toolchain import COMPILE_LOG_ENV

    saved = os.environ.get(COMPILE_LOG_ENV)
    os.environ[COMPILE_LOG_ENV] = str(path)
    try:
        yield path
    finally:
        if saved is None:
            os.environ.pop(COMPILE_LOG_ENV, None)
        else:
            os.environ[COMPILE_LOG_ENV] = saved


#: The tag of the cell :func:`run` appends to every notebook it executes (:func:`publish_cell`).
PUBLISH_TAG = "publish-figures"


def publish_cell(name: str):
    """The last cell of every run: :func:`redraw_figures` in the notebook's own kernel, where FlyDSL-free
    figure code and matplotlib are already imported (in the runner they were ~2.2 of its ~3 CPU-s per
    notebook, measured), before the run folder is published."""
    import nbformat

    source = ("# Added by the runner (mxfp4_ablation.notebooks.run): every figure of this run whose data a later "
              "cell changed is drawn\n# again from the run folder, so what is published never depends on the "
              "order of the cells.\nfrom mxfp4_ablation.notebooks import redraw_figures as _redraw\n\n"
              f"_drawn = _redraw({name!r}, out_dir, keep_current=True)\n")
    return nbformat.v4.new_code_cell(source, metadata={"tags": [PUBLISH_TAG]})


def redraw_figures(name: str, run_dir: Path, keep_current: bool = False) -> list[Path]:
    """Draw every registered figure of run ``name`` again from the run folder's final tables (the run's
    last cell, :func:`publish_cell`, in its ``.partial`` folder; ``make figures`` from the published one), as
    ``make figures`` does: a cell may draw a figure before a later cell stores more of its data (a step's
    speed figure before its modelled section), and what is published must not depend on cell order.
    ``keep_current``: a figure whose files were drawn when the run folder's data files were all as they
    are now is left as it is (:func:`.figures.drawn_from`; its redraw would give the same bytes)."""
    from . import figures, results as results_mod

    drawn = []
    for fig in figures.load().values():
        if fig.run != name or (keep_current and figures.drawn_from(fig.name, run_dir)):
            continue
        try:
            drawn += figures.render(fig.name, run_dir)
        except (FileNotFoundError, results_mod.CorruptTable) as err:  # a figure this run has no data for
            print(f"[{name}] figure {fig.name} not drawn: {err}", file=sys.stderr, flush=True)
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.notebooks")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="execute one notebook into a new run folder")
    p.add_argument("notebook")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="papermill parameter (VALUE parsed as JSON when it parses)")
    d = sub.add_parser("deps", help="print Makefile rules: each notebook's stamp and the files it depends on")
    d.add_argument("--stamps", default="experiments/.stamps")
    sub.add_parser("check-mode", help="exit 2 with one line when MODE cannot be used on this machine")
    sub.add_parser("detect-mode", help="print the mode and why, tab-separated (make reproduce passes it on)")
    args = parser.parse_args(argv)
    if args.cmd == "deps":
        sys.stdout.write(make_rules(args.stamps))
        return 0
    if args.cmd in ("check-mode", "detect-mode"):
        from . import modes
        from .errors import UsageError

        try:
            mode, reason = modes.detect()
        except UsageError as err:
            print(err)
            return 2
        if args.cmd == "detect-mode":
            print(f"{mode}\t{reason}")
        return 0
    params = {}
    for key, value in args.parameter:
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    from .errors import UsageError

    try:
        run(args.notebook, params, stamp=os.environ.get("MXFP4_STAMP") or None)
    except (NotebookError, UsageError) as err:
        print(f"notebooks: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
