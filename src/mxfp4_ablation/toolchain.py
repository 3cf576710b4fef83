"""Offline gfx950 compiles of FlyDSL kernels, with no GPU, and a content-addressed cache.

FlyDSL compiles for a GPU it cannot see when ``COMPILE_ONLY=1 ARCH=gfx950``; its last step links the
code object with ``ld.lld`` found at ``$ROCM_PATH/llvm/bin/ld.lld``, and ``FLYDSL_DEBUG_DUMP_ASM=1``
writes the final ISA (``.s``). This module

* finds a linker (a ROCm install, ``ld.lld``/``ld.lld-NN`` on PATH, or PyPI ``ziglang``'s
  ``python -m ziglang ld.lld``), staged into a project-local toolkit root used only for compiles;
* compiles a *target* -- ``"package.module:function"``, where ``function(**params)`` returns
  ``(jit_launcher, args)`` -- in a worker process (FlyDSL's console noise and env stay there), and
* caches the resulting :class:`Artifact` on disk under a key of the content of every source file the
  compile runs (the target's import closure with package data, every kernel module, this recipe and
  its worker, less the files its parameters switch off: :func:`_source_digest`), the parameters the
  code depends on (less those the launcher takes at run time: :func:`key_params`), FlyDSL version and
  arch, so an unchanged kernel is never compiled twice and a changed one never served stale. A
  corrupt entry is a miss; a miss another process is compiling is waited for under a per-key lock,
  not compiled again (:func:`diskcache.load_or_compute`). A miss whose kernel traces to a module
  FlyDSL lowered before takes that lowering's ISA (:func:`lowering_cache_dir`): an edit that leaves the
  traced module as it was costs the trace only.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable

from . import diskcache, paths

#: Bumped when the artifact format or the compile recipe changes (invalidates the cache).
TOOLCHAIN_VERSION = 1
DEFAULT_ARCH = "gfx950"

_INSTALL_HINT = (
    "no ld.lld found for offline gfx950 compiles. Provide one of: (1) a ROCm install "
    "(set ROCM_PATH so $ROCM_PATH/llvm/bin/ld.lld exists), (2) an ld.lld on PATH "
    "(e.g. Debian: apt-get install lld-19), or (3) PyPI ziglang in this environment "
    "(pip install ziglang; `make setup` does this)."
)


class ToolchainError(RuntimeError):
    """A compile could not run or failed; the message says why in one sentence plus a log tail."""


# --------------------------------------------------------------------------------------------
# Linker discovery and the staged toolkit root
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Linker:
    """Where ``ld.lld`` comes from. ``kind`` is ``rocm``, ``path`` or ``ziglang``."""

    kind: str
    command: tuple[str, ...]
    detail: str


def _rocm_roots() -> list[Path]:
    roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"]
    return [Path(r) for r in roots if r]


def find_linker() -> Linker:
    """The first usable ``ld.lld``, in the documented order; raises :class:`ToolchainError`."""
    for root in _rocm_roots():
        lld = root / "llvm" / "bin" / "ld.lld"
        if lld.is_file() and os.access(lld, os.X_OK) and paths.cache_dir() not in lld.parents:
            return Linker("rocm", (str(lld),), f"ROCm install at {root}")
    plain = shutil.which("ld.lld")
    if plain:
        return Linker("path", (plain,), plain)
    versioned = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        try:
            for entry in Path(folder).glob("ld.lld-*"):
                match = re.fullmatch(r"ld\.lld-(\d+)", entry.name)
                if match and os.access(entry, os.X_OK):
                    versioned.append((int(match.group(1)), str(entry)))
        except OSError:
            continue
    if versioned:
        _, best = max(versioned)
        return Linker("path", (best,), best)
    if importlib.util.find_spec("ziglang") is not None:
        return Linker("ziglang", (sys.executable, "-m", "ziglang", "ld.lld"), f"ziglang in {sys.prefix}")
    raise ToolchainError(_INSTALL_HINT)


def toolkit_root() -> Path:
    """A folder with ``llvm/bin/ld.lld`` that FlyDSL can use as ``ROCM_PATH`` for compiles.

    A real ROCm install is used as it is. Otherwise a small wrapper script is staged under the
    project cache (rewritten only when the linker changes), so nothing outside the project moves.
    """
    linker = find_linker()
    if linker.kind == "rocm":
        return Path(linker.command[0]).parents[2]
    root = paths.cache_dir() / "toolkit"
    target = root / "llvm" / "bin" / "ld.lld"
    script = "#!/bin/sh\nexec " + " ".join(_shell_quote(c) for c in linker.command) + ' "$@"\n'
    if not target.is_file() or target.read_text() != script:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".ld.lld.{os.getpid()}.tmp")
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    return root


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def compile_env(dump_dir: Path | None = None, arch: str = DEFAULT_ARCH) -> dict[str, str]:
    """Environment for an offline FlyDSL compile (FlyDSL's own cache off: ours is the cache)."""
    env = dict(os.environ)
    env.update(
        COMPILE_ONLY="1",
        ARCH=arch,
        ROCM_PATH=str(toolkit_root()),
        FLYDSL_DEBUG_DUMP_ASM="1",
        FLYDSL_RUNTIME_ENABLE_CACHE="0",
        PYTHONUNBUFFERED="1",
    )
    if dump_dir is not None:
        env["FLYDSL_DUMP_DIR"] = str(dump_dir)
    src = str(paths.REPO_ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# --------------------------------------------------------------------------------------------
# Artifacts
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Artifact:
    """One compiled launch: the gfx950 ISA of its kernel(s) and what it cost to make.

    ``isa`` is the main kernel's ``.s`` text (the first kernel FlyDSL emitted); ``kernels`` maps every
    emitted kernel name to its text; ``resources`` is read from the kernel descriptor and metadata
    (see :func:`resources_from_isa`); ``log`` is everything FlyDSL printed while compiling.
    """

    target: str
    params: dict[str, Any]
    arch: str
    key: str
    isa: str
    kernels: dict[str, str]
    resources: dict[str, Any]
    compile_seconds: float
    flydsl_version: str
    log: str = ""
    #: the compile traced the kernel but took FlyDSL's lowering from the lowering cache (the traced module
    #: was lowered before: ``_compile_worker._lowering_cache``)
    lowering_cached: bool = False
    cached: bool = False

    @property
    def kernel_name(self) -> str:
        return next(iter(self.kernels))

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("cached")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], cached: bool = False) -> "Artifact":
        return cls(**data, cached=cached)


_DESCRIPTOR_FIELDS = {
    "amdhsa_next_free_vgpr": "vgpr_unified",
    "amdhsa_accum_offset": "accum_offset",
    "amdhsa_next_free_sgpr": "next_free_sgpr",
    "amdhsa_group_segment_fixed_size": "lds_bytes",
    "amdhsa_private_segment_fixed_size": "scratch_bytes",
    "amdhsa_kernarg_size": "kernarg_bytes",
}


def resources_from_isa(isa: str) -> dict[str, Any]:
    """Register, LDS, scratch and kernarg usage of the first kernel in ``isa``.

    ``vgpr_unified`` is ``.amdhsa_next_free_vgpr`` (on gfx90a+ it counts arch VGPRs, padded to
    ``accum_offset``, plus AGPRs: LLVM AMDGPUUsage, "Code Object V3+ kernel descriptor");
    ``arch_vgpr``/``agpr`` come from the ``.set .L<kernel>.num_vgpr/num_agpr`` symbols and ``sgpr``
    from the metadata's ``.sgpr_count`` (which includes VCC and other reserved SGPRs).
    """
    res: dict[str, Any] = {}
    for directive, name in _DESCRIPTOR_FIELDS.items():
        match = re.search(rf"^\s*\.{directive}\s+(\d+)", isa, re.M)
        if match:
            res[name] = int(match.group(1))
    for symbol, name in (("num_vgpr", "arch_vgpr"), ("num_agpr", "agpr")):
        match = re.search(rf"^\s*\.set\s+\.L[\w.$]+\.{symbol},\s*(\d+)", isa, re.M)
        if match:
            res[name] = int(match.group(1))
    match = re.search(r"^\s*\.sgpr_count:\s*(\d+)", isa, re.M)
    if match:
        res["sgpr"] = int(match.group(1))
    return res


# --------------------------------------------------------------------------------------------
# Cache keys
# --------------------------------------------------------------------------------------------


def _module_file(target: str) -> Path:
    module, sep, func = target.partition(":")
    if not sep or not module or not func:
        raise ValueError(f"compile target {target!r} must look like 'package.module:function'")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"compile target {target!r}: module {module!r} not found")
    return Path(spec.origin)


#: Modules whose code makes a compile (besides the target's own closure): the recipe and its worker.
COMPILE_MODULES = ("mxfp4_ablation.toolchain", "mxfp4_ablation._compile_worker")


def _code_bytes(file: Path) -> bytes:
    """A module's code as its syntax tree, without comments and docstrings: editing a comment or a
    docstring of a kernel module keeps every compile cached (issue #24: a one-step edit reruns in
    minutes); any change to the code itself changes the digest.  Unparsable text: its raw bytes."""
    from . import sources

    return sources.code_bytes(file.read_bytes())


def _file_code_digest(file: Path) -> bytes:
    """sha256 of :func:`_code_bytes` of a ``.py`` file under ``src/`` (parsed once per file version, kept
    on disk: :func:`.sources.file_facts`), or of any other file's bytes."""
    from . import sources

    if file.suffix != ".py":
        return hashlib.sha256(file.read_bytes()).digest()
    if not file.resolve().is_relative_to(sources.SRC.resolve()):
        return hashlib.sha256(_code_bytes(file)).digest()
    return bytes.fromhex(sources.file_facts(file)["nodoc"])


def _source_digest(target: str, params: dict | None = None, extra: Iterable[str] = ()) -> str:
    """Digest of every file the compile of ``target`` with ``params`` runs: the target's module and
    every module of ours it imports (transitively, with their packages' data files), every kernel module
    (shared helpers reached by name), and this compile recipe with its worker (:data:`COMPILE_MODULES`),
    less the files a kernel module says the compile does not run (its ``unused_sources(params)``, if it
    has one: the GEMM's switched-off steps; for any other target, all of them). Python files count by
    their code (:func:`_code_bytes`: a comment or docstring edit keeps the cache), data files by their
    bytes. ``extra``: modules whose closure counts too (a verification's: :mod:`.runner`)."""
    from . import sources

    _module_file(target)  # a clear error for a malformed or unknown target
    module = target.partition(":")[0]
    kernels = paths.REPO_ROOT / "src" / "mxfp4_ablation" / "kernels"
    named = {f"mxfp4_ablation.kernels.{p.stem}" for p in kernels.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    skip = set()
    for name in {module, *named}:  # the target with its parameters; another kernel with nothing switched on
        unused = getattr(sys.modules.get(name) or importlib.import_module(name), "unused_sources", None)
        if unused is not None:
            skip |= {_resolved(Path(f)) for f in unused(dict(params or {}) if name == module else {})}
    digest = hashlib.sha256()
    for file in sorted(f for f in sources.module_closure({module, *COMPILE_MODULES, *named, *extra})
                       if _resolved(f) not in skip):
        try:
            name = _resolved(file).relative_to(sources.SRC).as_posix()
        except ValueError:
            name = file.name
        stat = file.stat()
        digest.update(name.encode() + b"\0")
        digest.update(_file_digest(file, (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)))
    sources.save_facts()
    return digest.hexdigest()


@functools.lru_cache(maxsize=4096)
def _resolved(path: Path) -> Path:
    """``path.resolve()``, once per process (a cache key resolves every file of the closure: ~60 µs each)."""
    return path.resolve()


@functools.lru_cache(maxsize=1024)
def _file_digest(file: Path, version: tuple[int, ...]) -> bytes:
    """sha256 of one file's :func:`_code_bytes` (``.py``) or bytes, once per process and file ``version``
    (its inode, size and times): parsing and dumping the syntax trees was most of every compile's cache
    key (0.18 CPU-s per call, each request of a :func:`compile_many` and every cache hit paid it)."""
    return _file_code_digest(file)


def flydsl_version() -> str:
    try:
        from importlib.metadata import version

        return version("flydsl")
    except Exception:  # not installed: compiles will fail with a clear message later
        return "missing"


def key_params(target: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters the code of a compile depends on: ``params`` less those the target's kernel module
    says the launcher takes at run time (its ``runtime_params(params)``, if it has one: the GEMM's M and N
    without static_prologue). A compile at one of them serves every value of the others."""
    _module_file(target)
    runtime = getattr(importlib.import_module(target.partition(":")[0]), "runtime_params", None)
    skip = set(runtime(dict(params))) if runtime is not None else set()
    return {name: value for name, value in params.items() if name not in skip}


def cache_key(target: str, params: dict[str, Any], arch: str = DEFAULT_ARCH) -> str:
    payload = json.dumps(
        {
            "toolchain": TOOLCHAIN_VERSION,
            "target": target,
            "params": key_params(target, params),
            "arch": arch,
            "flydsl": flydsl_version(),
            "source": _source_digest(target, params),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _cache_path(key: str) -> Path:
    return paths.cache_dir() / "compile" / key[:2] / f"{key}.json"


def _load_cached(key: str) -> Artifact | None:
    """The cached artifact of ``key``, or None: a missing, truncated, unparsable or mismatched entry
    (wrong key, no ISA) is a miss (recompiled and rewritten), never an error."""
    path = _cache_path(key)
    try:
        artifact = Artifact.from_json(json.loads(path.read_text()), cached=True)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if artifact.key != key or not isinstance(artifact.isa, str) or not artifact.isa \
            or not isinstance(artifact.kernels, dict) or not artifact.kernels:
        return None
    return artifact


def _store(artifact: Artifact) -> None:
    diskcache.atomic_write_text(_cache_path(artifact.key), json.dumps(artifact.to_json()))


# --------------------------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------------------------


def compile(  # noqa: A001 - the natural name for this module's verb
    target: str, params: dict[str, Any] | None = None, *, arch: str = DEFAULT_ARCH, use_cache: bool = True
) -> Artifact:
    """Compile one target offline for ``arch`` and return its :class:`Artifact` (cached)."""
    return compile_many([(target, params or {})], arch=arch, use_cache=use_cache)[0]


def compile_many(
    requests: Iterable[tuple[str, dict[str, Any]]], *, arch: str = DEFAULT_ARCH, use_cache: bool = True
) -> list[Artifact]:
    """Compile several targets; the cache misses share one worker process (FlyDSL imports once), and a
    miss another process is compiling at the same time is waited for, not compiled twice
    (:func:`diskcache.load_or_compute`). ``use_cache=False`` neither reads nor writes the cache."""
    requests = [(t, dict(p)) for t, p in requests]
    keys = [cache_key(t, p, arch) for t, p in requests]
    if not use_cache:
        artifacts = _run_worker(list(zip(requests, keys)), arch, lowering=False) if requests else []
        _log_compiles([(r, arch, a) for r, a in zip(requests, artifacts)])
        return artifacts
    first = {}  # key -> the first request with it: requests sharing a key share one compile
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    unique = list(first.values())

    def compile_and_store(todo: list[int]) -> list[Artifact]:
        artifacts = _run_worker([(requests[unique[j]], keys[unique[j]]) for j in todo], arch)
        for artifact in artifacts:
            _store(artifact)
        return artifacts

    found = diskcache.load_or_compute([_cache_path(keys[i]) for i in unique],
                                      lambda j: _load_cached(keys[unique[j]]), compile_and_store)
    by_key = {keys[i]: artifact for i, (artifact, _) in zip(unique, found)}
    _log_compiles([(requests[i], arch, by_key[keys[i]]) for i in unique])
    # each request gets its own parameters back (the compile may have run at another runtime value)
    return [dataclasses.replace(by_key[key], params=params) for (_, params), key in zip(requests, keys)]


# --------------------------------------------------------------------------------------------
# The compiles a process tree made (a notebook run's: mxfp4_ablation.notebooks)
# --------------------------------------------------------------------------------------------

#: A file path: every :func:`compile_many` of this process and its children (a notebook's kernel, its
#: local Dask workers) appends one JSON line per request -- target, params, arch and :func:`code_digest`
#: -- so the run can later be checked compile by compile (``notebooks.run``: an edit of builder code that
#: leaves every compile's code as it was does not rerun the notebook).
COMPILE_LOG_ENV = "MXFP4_COMPILE_LOG"


def code_digest(artifact: Artifact) -> str:
    """sha256 of what a compile gives a run: every kernel's ISA text and the resources read from it."""
    return hashlib.sha256(json.dumps([artifact.kernels, artifact.resources], sort_keys=True).encode()).hexdigest()


def _log_compiles(done: list[tuple[tuple[str, dict[str, Any]], str, Artifact]]) -> None:
    log = os.environ.get(COMPILE_LOG_ENV)
    if not log or not done:
        return
    try:
        text = "".join(json.dumps({"target": t, "params": p, "arch": arch, "code": code_digest(a)}, sort_keys=True)
                       + "\n" for (t, p), arch, a in done)
    except (TypeError, ValueError):  # parameters that do not round-trip through JSON cannot be replayed
        text = json.dumps({"incomplete": "parameters that are not JSON"}) + "\n"
    _append(log, text)


def _append(log: str, text: str) -> None:
    """One ``write`` of the whole text on an O_APPEND descriptor: lines of processes appending at the
    same time do not interleave (a buffered file could split a batch into several writes)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def compile_log_incomplete(reason: str) -> None:
    """Mark this process tree's compile log (if any) as not listing every compile (compiles ran where the
    log is not written: remote workers), so nothing is ever skipped on its strength."""
    log = os.environ.get(COMPILE_LOG_ENV)
    if log:
        _append(log, json.dumps({"incomplete": reason}) + "\n")


def read_compile_log(path: Path) -> list[tuple[str, dict[str, Any], str, str]] | None:
    """The distinct compiles a log lists, ``(target, params, arch, code digest)`` sorted; None when the
    log says it is incomplete, a line is damaged, or one request gave two different codes."""
    seen: dict[str, tuple[str, dict[str, Any], str, str]] = {}
    try:
        lines = Path(path).read_text().splitlines() if Path(path).exists() else []
        for line in lines:
            entry = json.loads(line)
            if "incomplete" in entry:
                return None
            request = json.dumps([entry["target"], entry["params"], entry["arch"]], sort_keys=True)
            item = (entry["target"], dict(entry["params"]), entry["arch"], entry["code"])
            if seen.setdefault(request, item)[3] != item[3]:
                return None
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return [seen[k] for k in sorted(seen)]


class _Worker:
    """One long-lived :mod:`._compile_worker` process (FlyDSL and torch imported once for every compile
    of this process, not once per batch): it is sent the path of a batch's ``jobs.json`` and answers
    ``done``. ``version`` is what it was started for -- the compile env and :func:`_src_version` -- so a
    changed env or an edited source file (the worker imported the old one) starts a new worker."""

    def __init__(self, env: dict[str, str], version: tuple):
        self.version = version
        self.owner = os.getpid()
        self.stderr = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.proc = subprocess.Popen([sys.executable, "-m", "mxfp4_ablation._compile_worker"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True)

    def run(self, jobs_file: Path) -> bool:
        """Compile one batch; False when the worker died (or had died) before answering."""
        try:
            self.proc.stdin.write(f"{jobs_file}\n")
            self.proc.stdin.flush()
            return self.proc.stdout.readline() == f"done {jobs_file}\n"
        except OSError:
            return False

    def tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-2000:]

    def close(self, kill: bool = False) -> None:
        """End the worker: at the end of its stdin (after the batch it is on), or at once (``kill``)."""
        if kill:
            self.proc.kill()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _src_version() -> tuple:
    """Every file under ``src/`` by path, inode, size and mtime: what a running worker has imported
    from (a few ms; checked before every batch)."""
    from . import sources

    out = []
    for p in sorted(sources.SRC.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        with contextlib.suppress(OSError):
            st = p.stat()
            out.append((str(p), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _worker_for(env: dict[str, str]) -> _Worker:
    """This process's worker for ``env`` (started, or restarted after a change; call under the lock)."""
    global _worker
    version = (tuple(sorted(env.items())), _src_version())
    if _worker is not None and _worker.owner != os.getpid():
        _worker = None  # inherited through a fork: the parent's worker, not ours to use or close
    if _worker is not None and (_worker.version != version or _worker.proc.poll() is not None):
        _worker.close()
        _worker = None
    if _worker is None:
        _worker = _Worker(env, version)
    return _worker


@atexit.register
def _close_worker(kill: bool = False) -> None:
    global _worker
    if _worker is not None and _worker.owner == os.getpid():
        _worker.close(kill)
    _worker = None


def lowering_cache_dir() -> Path:
    """Where the compile worker keeps FlyDSL lowerings by traced module (``_compile_worker._lowering_cache``):
    a cache miss of :func:`compile` whose kernel traces to a module lowered before skips the lowering."""
    return paths.cache_dir() / "lowering"


def _run_worker(jobs: list[tuple[tuple[str, dict[str, Any]], str]], arch: str, *,
                lowering: bool = True) -> list[Artifact]:
    """Compile ``jobs`` in this process's worker; ``lowering``: through the lowering cache (read and written)."""
    from .tempdirs import owned_tempdir  # a SIGKILLed compile's folder is removed by the next compile

    with owned_tempdir("compile-") as tmp:
        tmpdir = Path(tmp)
        spec = [{"target": t, "params": p, "key": k, "dir": str(tmpdir / f"job{n}"),
                 "lowering_cache": str(lowering_cache_dir()) if lowering else None}
                for n, ((t, p), k) in enumerate(jobs)]
        (tmpdir / "jobs.json").write_text(json.dumps(spec, default=str))
        with _worker_lock:
            worker = _worker_for(compile_env(arch=arch))
            try:
                finished = worker.run(tmpdir / "jobs.json")
            except BaseException:  # e.g. Ctrl-C while it compiles: its answer would come to nobody
                _close_worker(kill=True)
                raise
            if not finished:
                tail = worker.tail()
                _close_worker()
                missing = next(j for j in spec if not _read(Path(j["dir"]) / "status.json"))
                raise ToolchainError(f"compile worker died before finishing {missing['target']}:\n{tail}")
        artifacts = []
        for job in spec:
            job_dir = Path(job["dir"])
            log = _read(job_dir / "log.txt")
            status = _read(job_dir / "status.json")
            info = json.loads(status)
            if not info["ok"]:
                raise ToolchainError(
                    f"compiling {job['target']} with {job['params']} failed: {info['error']}\n"
                    f"--- FlyDSL log (tail) ---\n{log[-3000:]}"
                )
            kernels = {}
            for isa_file in sorted((job_dir / "dump").glob("*/*final_isa.s")):
                kernels[isa_file.parent.name.rsplit("_", 1)[0]] = isa_file.read_text()
            if not kernels:
                raise ToolchainError(f"compiling {job['target']} produced no ISA (did it launch a kernel?)\n{log[-2000:]}")
            isa = next(iter(kernels.values()))
            artifacts.append(
                Artifact(
                    target=job["target"],
                    params=job["params"],
                    arch=arch,
                    key=job["key"],
                    isa=isa,
                    kernels=kernels,
                    resources=resources_from_isa(isa),
                    compile_seconds=round(info["seconds"], 3),
                    flydsl_version=flydsl_version(),
                    log=log,
                    lowering_cached=bool(info.get("lowering_hits")) and not info.get("lowered"),
                )
            )
        return artifacts


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def linker_runs(linker: Linker) -> str | None:
    """None when ``ld.lld --version`` runs and says it is LLD; else why not (one line)."""
    try:
        proc = subprocess.run([*linker.command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{' '.join(linker.command)} does not run: {err}"
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or "LLD" not in text:
        tail = text.splitlines()[-1] if text else "no output"
        return f"{' '.join(linker.command)} --version failed (exit {proc.returncode}): {tail}"
    return None


def describe() -> dict[str, Any]:
    """What ``doctor`` prints about the compile toolchain: the linker found, and that it runs."""
    try:
        linker = find_linker()
    except ToolchainError as err:
        return {"linker": None, "linker_detail": str(err), "flydsl": flydsl_version(), "ok": False}
    broken = linker_runs(linker)
    if broken:
        return {"linker": linker.kind, "linker_detail": f"{linker.detail}: {broken}", "flydsl": flydsl_version(),
                "ok": False}
    return {"linker": linker.kind, "linker_detail": linker.detail, "flydsl": flydsl_version(), "ok": True}


__all__ = [
    "Artifact",
    "Linker",
    "ToolchainError",
    "cache_key",
    "code_digest",
    "compile",
    "compile_env",
    "compile_many",
    "describe",
    "find_linker",
    "resources_from_isa",
    "toolkit_root",
]
