"""What our code is made of: the modules a module imports (followed through ``src/``), the package
data beside them, and content digests of such file sets.

Used by the notebook dependency rules (:mod:`.notebooks`), the compile cache key (:mod:`.toolchain`)
and the timing cache key (:mod:`.modelled`), so that a result is recomputed whenever any file it was
computed from changes -- ``.py`` sources and the non-Python files of their packages (``.toml``,
``.csv``, templates: *package data*, everything in a package folder that is not Python or a cache).
Standard library only (``make`` runs it before any setup).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import hashlib
import json
from pathlib import Path
from typing import Iterable

from . import paths

SRC = paths.REPO_ROOT / "src"
#: Top-level packages of ours whose imports are followed.
PACKAGES = ("mxfp4_ablation", "gfx950emu")
#: Never inputs: byte-code caches and editor / OS litter.
_IGNORED_PARTS = {"__pycache__", ".ipynb_checkpoints"}
_IGNORED_SUFFIXES = {".pyc", ".pyo", ".swp", ".orig", ".rej"}


def _module_file(module: str) -> Path | None:
    base = SRC.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module of ours an AST imports (anywhere: lazy imports inside functions count too)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.add(prefix)
            out |= {f"{prefix}.{alias.name}" for alias in node.names}  # ``from pkg import module``
    return {m for m in out if m.split(".")[0] in PACKAGES}


def is_data_file(path: Path) -> bool:
    return path.is_file() and path.suffix not in _IGNORED_SUFFIXES and path.suffix != ".py" \
        and not _IGNORED_PARTS & set(path.parts) and not path.name.startswith(".")


def package_data(package_dir: Path) -> set[Path]:
    """The non-Python files directly in a package folder (its package data)."""
    return {p for p in package_dir.iterdir() if is_data_file(p)} if package_dir.is_dir() else set()


#: :func:`module_closure`'s answers in this process, by (source root, modules, data): the files, and the version of
#: every file and folder the answer was read from (:func:`_closure_versions`), checked on every use.
_CLOSURES: dict[tuple, tuple[frozenset, tuple]] = {}


def _closure_versions(paths_: Iterable[Path]) -> tuple:
    """(path, inode, size, mtime, ctime) of each path (None for one that is gone)."""
    out = []
    for p in sorted(paths_):
        try:
            st = p.stat()
        except OSError:
            out.append((p, None))
        else:
            out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def module_closure(modules: Iterable[str], data: bool = True) -> set[Path]:
    """Source files of ``modules`` and of every module of ours they import, transitively (and the
    ``__init__.py`` of each package on the way, with the modules of that package whose names are no
    identifier -- ``kernels/gemm/steps/01_agpr_acc.py``: only the package's own discovery imports
    them); with ``data`` also the package data of every package folder on the way
    (``gfx950emu/timing/gfx950.toml`` for ``gfx950emu.timing``).

    Kept for the process by its arguments and used again while every file it read and every folder it
    looked in (a new or removed file changes its folder) is as it was: a compile cache key asks the same
    closure for every request (~16 ms each, issue #24)."""
    key = (SRC, frozenset(modules), data)
    memo = _CLOSURES.get(key)
    if memo is not None and _closure_versions(p for p, *_ in memo[1]) == memo[1]:
        return set(memo[0])
    files, looked = _module_closure(key[1], data)
    _CLOSURES[key] = (frozenset(files), _closure_versions(files | looked))
    return files


def _module_closure(modules: Iterable[str], data: bool) -> tuple[set[Path], set[Path]]:
    """:func:`module_closure`'s files, and the folders it looked in for them."""
    seen: set[str] = set()
    files: set[Path] = set()
    looked: set[Path] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        folder = SRC.joinpath(*module.split("."))
        while folder != SRC and not folder.is_dir():  # where a file of this module would appear
            folder = folder.parent
        looked |= {folder, folder.parent}
        path = _module_file(module)
        if path is None:
            continue
        files.add(path)
        if data:
            files |= package_data(path.parent)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        todo += _file_imports(path, module)
        if path.name == "__init__.py":  # modules no import statement can name (``01_step.py``): the package finds them
            todo += [f"{module}.{p.stem}" for p in path.parent.glob("*.py") if not p.stem.isidentifier()]
    save_facts()
    return files, looked


def _file_imports(path: Path, module: str) -> tuple[str, ...]:
    """The modules of ours one file imports (parsed once per file version: :func:`file_facts`)."""
    found = file_facts(path, module).get("imports")
    if found is None:  # not Python: the parser's own error
        ast.parse(path.read_text(), str(path))
    return tuple(found)


# --------------------------------------------------------------------------- parsed once per file version
#: What one parse of a source file gives, kept on disk by file version (inode, size, mtime, ctime) under
#: the cache folder: every notebook run, compile key and timing key asks the same ~100 files, and parsing
#: and dumping their syntax trees was ~2 CPU-s of every process (issue #24). A damaged store is a miss.
_FACTS_VERSION = 1
_facts: dict[str, dict] | None = None
_facts_new = False


def _facts_file() -> Path:
    return paths.cache_dir() / "sources" / f"facts-v{_FACTS_VERSION}.json"


def _load_facts() -> dict[str, dict]:
    global _facts
    if _facts is None:
        try:
            loaded = json.loads(_facts_file().read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            loaded = {}
        _facts = loaded if isinstance(loaded, dict) else {}
    return _facts


def save_facts() -> None:
    """Write the facts parsed since the last save (atomically; a failure only costs a parse later): those
    of this checkout's files that still exist (a scratch copy's, a deleted file's are not kept)."""
    global _facts_new
    if not _facts_new or _facts is None:
        return
    from .diskcache import atomic_write_bytes  # standard library only, like this module

    root = str(paths.REPO_ROOT.resolve()) + "/"
    kept = {k: v for k, v in _facts.items() if k.startswith(root) and Path(k).is_file()}
    with contextlib.suppress(OSError):
        atomic_write_bytes(_facts_file(), json.dumps(kept).encode())
        _facts_new = False


atexit.register(save_facts)


def _version(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def file_facts(path: Path, module: str | None = None) -> dict:
    """One Python file's ``code`` (sha256 of its syntax tree: comments and layout do not count,
    docstrings do), ``nodoc`` (the same without docstrings: :func:`code_bytes`) and ``imports`` (the
    modules of ours it imports as ``module``, by default the one its path under ``src/`` names; None
    for a file that does not parse, whose hashes are then of its bytes)."""
    global _facts_new
    path = Path(path)
    key = str(path.resolve())
    version = _version(path)
    if module is None:
        try:
            rel = path.resolve().relative_to(SRC).with_suffix("")
        except ValueError:  # not ours (a test's scratch tree): its relative imports resolve as a top module
            rel = Path(path.stem)
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    store = _load_facts()
    entry = store.get(key)
    if isinstance(entry, dict) and entry.get("version") == version and entry.get("module") == module:
        return entry
    data = path.read_bytes()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        raw = hashlib.sha256(data).hexdigest()
        entry = {"code": raw, "nodoc": raw, "imports": None}
    else:
        entry = {"code": hashlib.sha256(ast.dump(tree).encode()).hexdigest(),
                 "imports": sorted(imports(tree, module, path.name == "__init__.py"))}
        entry["nodoc"] = hashlib.sha256(_strip_docstrings(tree)).hexdigest()
    entry.update(version=version, module=module)
    store[key] = entry
    _facts_new = True
    return entry


def _strip_docstrings(tree: ast.AST) -> bytes:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False).encode()


def code_bytes(data: bytes) -> bytes:
    """A module's code as its syntax tree, without comments and docstrings (unparsable text: its bytes)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return data
    return _strip_docstrings(tree)


def tree_files(folder: Path) -> set[Path]:
    """Every source and data file under ``folder`` (byte-code caches excluded)."""
    return {p for p in Path(folder).rglob("*") if p.is_file() and p.suffix not in _IGNORED_SUFFIXES
            and not _IGNORED_PARTS & set(p.parts)}


def digest(files: Iterable[Path], code: bool = False) -> str:
    """sha256 over the files' repo-relative names and contents (order-independent). ``code``: each
    ``src/`` Python file counts by its syntax tree (``ast.dump``), so editing a comment or the layout
    keeps the digest and editing code or a docstring (the notebooks render some) does not; any other
    file (a notebook's own text, whose markdown cells are comments; data) counts by its bytes."""
    h = hashlib.sha256()
    for file in sorted(Path(f) for f in files):
        try:
            name = file.resolve().relative_to(paths.REPO_ROOT).as_posix()
        except ValueError:
            name = file.name
        h.update(name.encode() + b"\0")
        if code and file.suffix == ".py" and name.startswith("src/"):
            h.update(bytes.fromhex(file_facts(file)["code"]))
        else:
            h.update(hashlib.sha256(file.read_bytes()).digest())
    save_facts()
    return h.hexdigest()


def package_digest(package: str) -> str:
    """Digest of every file of a package of ours (``gfx950emu``: the emulator and timing model,
    parameter file included)."""
    return digest(tree_files(SRC.joinpath(*package.split("."))))


def closure_digest(modules: Iterable[str]) -> str:
    """Digest of :func:`module_closure` of ``modules`` (with package data)."""
    return _closure_digest(tuple(sorted(set(modules))), _stamp())


@functools.lru_cache(maxsize=64)
def _closure_digest(modules: tuple[str, ...], stamp: tuple) -> str:
    return digest(module_closure(modules))


def _stamp() -> tuple:
    """A cheap "has anything under src/ changed" stamp (newest mtime, file count) for the memo above."""
    newest, count = 0, 0
    for p in SRC.rglob("*"):
        if "__pycache__" in p.parts:
            continue
        try:
            newest = max(newest, p.stat().st_mtime_ns)
        except OSError:
            continue
        count += 1
    return newest, count
