"""Upstream kernels compiled offline from a checkout, as a user would: FlyDSL's and aiter's.

The study decomposes two upstream changes (FlyDSL PR #990, aiter PR #3828). To say how close our
ladders come to them we compile *their* kernels -- from a checkout path the caller gives, never from
code in this repository -- with the pinned FlyDSL, and keep only numbers (see ``isa.fingerprint``).

* :func:`extract` writes one commit of a bare git dir into a folder (``git archive | tar -x``);
* :func:`flydsl_gemm_isa` compiles FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py``;
* :func:`aiter_moe_isa` compiles aiter's ``aiter/ops/flydsl/kernels/mxfp4_gemm{1,2}.py`` (MoE);
* ``python -m mxfp4_ablation.upstream compile|fingerprints ...`` does both from the shell.

Compiles go through :mod:`mxfp4_ablation.toolchain`'s worker and on-disk cache. The cache key is
the upstream checkout's content (the kernel file and its helper packages), the entry point below,
the parameters, FlyDSL's version and the arch -- not our own kernels, so our edits never recompile
theirs.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from . import toolchain

FLYDSL_GEMM_FILE = "kernels/gemm/fp4_gemm_4wave.py"
#: Folders of a FlyDSL checkout the GEMM imports from (hashed into the cache key).
FLYDSL_GEMM_DEPS = ("kernels/gemm/fp4_gemm_4wave.py", "kernels/gemm/fp8_gemm_utils.py", "kernels/common")
AITER_MOE_FILES = {"gemm1": "aiter/ops/flydsl/kernels/mxfp4_gemm1.py", "gemm2": "aiter/ops/flydsl/kernels/mxfp4_gemm2.py"}
AITER_MOE_DEPS = ("aiter/ops/flydsl/kernels",)

#: The shapes of FlyDSL PR #990's own benchmark (M, N, K).
PR990_SHAPES = ((8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192), (16384, 16384, 16384))

#: Bumped when an entry point below changes the way it calls upstream (invalidates the cache).
ENTRY_VERSION = 1


class UpstreamError(RuntimeError):
    """A checkout is missing or is not the expected project, or an upstream compile failed."""


# --------------------------------------------------------------------------------------------
# Checkouts
# --------------------------------------------------------------------------------------------


def extract(git_dir: Path | str, commit: str, dest: Path | str) -> Path:
    """Write ``commit`` of the (bare) git dir ``git_dir`` into ``dest`` (created; an existing
    non-empty ``dest`` is kept as it is). Returns ``dest``. One clear error for a bad git dir/commit."""
    git_dir, dest = Path(git_dir), Path(dest)
    if dest.is_dir() and any(dest.iterdir()):
        return dest
    if not git_dir.exists():
        raise UpstreamError(f"git dir {git_dir} does not exist.")
    probe = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise UpstreamError(f"{git_dir} has no commit {commit!r}.")
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=False)
    archive = subprocess.Popen(["git", "--git-dir", str(git_dir), "archive", commit], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
        tar.extractall(tmp, filter="tar") if hasattr(tarfile, "data_filter") else tar.extractall(tmp)
    if archive.wait() != 0:
        raise UpstreamError(f"git archive {commit} from {git_dir} failed.")
    if dest.exists():
        dest.rmdir()
    os.replace(tmp, dest)
    return dest


def commit_of(git_dir: Path | str, commit: str) -> str:
    """The full 40-hex id of ``commit`` in ``git_dir``."""
    out = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise UpstreamError(f"{git_dir} has no commit {commit!r}.")
    return out.stdout.strip()


def _check_checkout(checkout: Path | str, required: str, project: str) -> Path:
    root = Path(checkout).expanduser()
    if not root.is_dir():
        raise UpstreamError(f"{project} checkout {root} does not exist (extract one with `upstream extract`).")
    if not (root / required).is_file():
        raise UpstreamError(f"{root} is not a {project} checkout with {required} (wrong folder or commit?).")
    return root.resolve()


def tree_digest(root: Path, parts: tuple[str, ...]) -> str:
    """sha256 over the ``.py`` files at ``parts`` (files or folders) of a checkout."""
    digest = hashlib.sha256()
    for part in parts:
        path = root / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        for file in files:
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Entry points run in toolchain's worker process: (jit_launcher, args)
# --------------------------------------------------------------------------------------------


def _import_from(checkout: str, module: str):
    """Import ``module`` with ``checkout`` first on sys.path (upstream's helpers come from there)."""
    import importlib

    if checkout not in sys.path:
        sys.path.insert(0, checkout)
    top = module.split(".")[0]
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        mod_file = getattr(sys.modules[name], "__file__", None) or ""
        if not mod_file.startswith(checkout):
            del sys.modules[name]
    return importlib.import_module(module)


def _flat(n: int, dtype):
    import torch

    # Only shapes and dtypes matter offline; torch.empty does not touch the pages.
    return torch.empty(n, dtype=dtype)


def flydsl_gemm_entry(checkout: str, M: int, N: int, K: int, digest: str = "", **kw):
    """FlyDSL's GEMM, called as that commit's own ``tests/kernels/test_fp4_gemm_4wave.py`` does:
    ``compile_fp4_gemm_4w(K=K, MN=(M, N))`` after PR #990, ``compile_fp4_gemm_4w(K=K,
    mn_aligned=...)`` before it; A, B, C, A_scale, B_scale flattened, then M, N, stream."""
    import torch
    import flydsl.expr as fx

    mod = _import_from(checkout, "kernels.gemm.fp4_gemm_4wave")
    build = mod.compile_fp4_gemm_4w
    params = inspect.signature(build).parameters
    if "MN" in params:
        kw.setdefault("MN", (M, N))
    elif "mn_aligned" in params:
        kw.setdefault("mn_aligned", M % 256 == 0 and N % 256 == 0)
    launcher = build(K=K, **kw)
    args = (
        _flat(M * K // 2, torch.uint8),
        _flat(N * K // 2, torch.uint8),
        _flat(M * N, torch.bfloat16),
        _flat(M * K // 32, torch.uint8),
        _flat(N * K // 32, torch.uint8),
        M,
        N,
        fx.Stream(None),
    )
    return launcher, args


# --------------------------------------------------------------------------------------------
# Compiling through toolchain's worker and cache
# --------------------------------------------------------------------------------------------


def _entry_digest() -> str:
    """Hash of the entry-point functions' source (not the whole module: docs edits keep the cache)."""
    text = "".join(inspect.getsource(f) for f in (_import_from, _flat, flydsl_gemm_entry))
    return hashlib.sha256(f"{ENTRY_VERSION}\n{text}".encode()).hexdigest()


def _key(target: str, params: dict[str, Any], arch: str) -> str:
    payload = json.dumps({"toolchain": toolchain.TOOLCHAIN_VERSION, "upstream": _entry_digest(), "target": target,
                          "params": params, "arch": arch, "flydsl": toolchain.flydsl_version()},
                         sort_keys=True, default=str)
    return "up-" + hashlib.sha256(payload.encode()).hexdigest()


def compile_upstream(target: str, params: dict[str, Any], *, arch: str = toolchain.DEFAULT_ARCH,
                     use_cache: bool = True) -> toolchain.Artifact:
    """Compile one upstream entry point with toolchain's worker; cached under a key of the
    checkout's content digest (``params['digest']``), the entry point and FlyDSL's version."""
    key = _key(target, params, arch)
    if use_cache:
        hit = toolchain._load_cached(key)
        if hit is not None:
            return hit
    try:
        (artifact,) = toolchain._run_worker([((target, params), key)], arch)
    except toolchain.ToolchainError as err:
        raise UpstreamError(str(err)) from None
    toolchain._store(artifact)
    return artifact


def flydsl_gemm_artifact(checkout: Path | str, M: int, N: int, K: int, *, arch: str = toolchain.DEFAULT_ARCH,
                         use_cache: bool = True, **kw) -> toolchain.Artifact:
    root = _check_checkout(checkout, FLYDSL_GEMM_FILE, "FlyDSL")
    params = {"checkout": str(root), "M": int(M), "N": int(N), "K": int(K),
              "digest": tree_digest(root, FLYDSL_GEMM_DEPS), **kw}
    return compile_upstream("mxfp4_ablation.upstream:flydsl_gemm_entry", params, arch=arch, use_cache=use_cache)


def flydsl_gemm_isa(checkout: Path | str, M: int, N: int, K: int, **kw) -> str:
    """ISA text of FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py`` from ``checkout``, compiled offline
    for gfx950 at (M, N, K). Extra keywords go to ``compile_fp4_gemm_4w``."""
    return flydsl_gemm_artifact(checkout, M, N, K, **kw).isa


# --------------------------------------------------------------------------------------------
# Ready-made ISA for others: <out>/<source>/<commit>/<name>.s + .json
# --------------------------------------------------------------------------------------------


def _metadata_args(isa_text: str, kernel: str | None = None) -> list[dict[str, Any]]:
    from . import isa

    k = isa._kernel_of(isa_text, kernel)
    args = k.metadata.get(".args") or []
    return [{"offset": int(a.get(".offset", 0)), "size": int(a.get(".size", 0)),
             "value_kind": a.get(".value_kind")} for a in args if isinstance(a, dict)]


def named_args(isa_text: str, names: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The kernel's metadata ``.args`` with names: ``names`` is ``[(name, "tensor"|"i32"), ...]`` in
    parameter order; a tensor is two entries (``name`` = 8-byte pointer, ``name.layout`` = its
    by-value shape/stride block), an i32 one. Raises if the counts disagree."""
    md = _metadata_args(isa_text)
    labels: list[str] = []
    for name, kind in names:
        labels += [name, f"{name}.layout"] if kind == "tensor" else [name]
    if len(labels) != len(md):
        raise UpstreamError(f"kernel has {len(md)} kernargs but the call names {len(labels)} ({labels}).")
    return [{"name": n, **a} for n, a in zip(labels, md)]


GEMM_ARG_NAMES = [("A", "tensor"), ("B_T", "tensor"), ("C", "tensor"), ("A_scale", "tensor"),
                  ("B_scale", "tensor"), ("c_m", "i32"), ("c_n", "i32")]


def write_isa(artifact: toolchain.Artifact, out: Path, info: dict[str, Any]) -> Path:
    """Write ``artifact.isa`` to ``out`` (``.s``) and ``info`` plus provenance beside it (``.json``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(artifact.isa)
    os.replace(tmp, out)
    meta = {**info, "kernel": artifact.kernel_name, "flydsl_version": artifact.flydsl_version, "arch": artifact.arch,
            "resources": artifact.resources, "compile_seconds": artifact.compile_seconds,
            "cache_key": artifact.key, "env": {"COMPILE_ONLY": "1", "ARCH": artifact.arch,
                                               "FLYDSL_DEBUG_DUMP_ASM": "1"}}
    side = out.with_suffix(".json")
    side.with_name(f".{side.name}.tmp").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    os.replace(side.with_name(f".{side.name}.tmp"), side)
    return out


def _cli_command(argv: list[str]) -> str:
    return "PYTHONPATH=src python -m mxfp4_ablation.upstream " + " ".join(argv)


def compile_flydsl_gemms(checkout: Path, commit: str, out_root: Path, shapes=PR990_SHAPES,
                         command: str = "") -> list[Path]:
    """Compile FlyDSL's GEMM at every shape and write ``<out_root>/flydsl/<commit8>/M.._N.._K...s``."""
    root = _check_checkout(checkout, FLYDSL_GEMM_FILE, "FlyDSL")
    written = []
    for M, N, K in shapes:
        art = flydsl_gemm_artifact(root, M, N, K)
        info = {"source": "flydsl", "commit": commit, "checkout": str(root), "file": FLYDSL_GEMM_FILE,
                "shape": {"M": M, "N": N, "K": K},
                "call": (f"compile_fp4_gemm_4w(K={K}, MN=({M}, {N}))" if _has_param(root, "MN")
                         else f"compile_fp4_gemm_4w(K={K}, mn_aligned=True)"),
                "grid": [(M // 256) * (N // 256), 1, 1], "block": [256, 1, 1],
                "args": named_args(art.isa, GEMM_ARG_NAMES),
                "args_note": "tensors are passed flattened 1-D (as upstream's test does): layout = i32 element count",
                "command": command}
        written.append(write_isa(art, out_root / "flydsl" / commit[:8] / f"M{M}_N{N}_K{K}.s", info))
    return written


def _has_param(root: Path, name: str) -> bool:
    text = (root / FLYDSL_GEMM_FILE).read_text()
    start = text.find("def compile_fp4_gemm_4w(")
    return f" {name}:" in text[start:text.find("):", start)] if start >= 0 else False


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.lower().replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} must look like 8192x8192x8192") from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.upstream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="write one commit of a bare git dir into a folder")
    ex.add_argument("--git-dir", required=True, type=Path)
    ex.add_argument("--commit", required=True)
    ex.add_argument("--dest", required=True, type=Path)
    co = sub.add_parser("compile", help="compile upstream kernels and write .s + .json under --out")
    co.add_argument("--flydsl", type=Path, help="FlyDSL checkout (has kernels/gemm/fp4_gemm_4wave.py)")
    co.add_argument("--aiter", type=Path, help="aiter checkout (has aiter/ops/flydsl/kernels/mxfp4_gemm1.py)")
    co.add_argument("--commit", required=True, help="the checkout's commit id (labels the output folder)")
    co.add_argument("--shape", action="append", type=_parse_shape, help="GEMM MxNxK (default: PR #990's four)")
    co.add_argument("--out", type=Path, default=Path("/work/upstream/out"))
    args = parser.parse_args(argv)
    try:
        if args.cmd == "extract":
            print(extract(args.git_dir, args.commit, args.dest))
        elif args.cmd == "compile":
            if not (args.flydsl or args.aiter):
                parser.error("give --flydsl PATH or --aiter PATH")
            if args.flydsl:
                for path in compile_flydsl_gemms(args.flydsl, args.commit, args.out,
                                                 tuple(args.shape or PR990_SHAPES), _cli_command(argv)):
                    print(path)
            if args.aiter:
                for path in compile_aiter_moes(args.aiter, args.commit, args.out, _cli_command(argv)):
                    print(path)
    except (UpstreamError, toolchain.ToolchainError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
