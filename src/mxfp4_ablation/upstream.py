"""Upstream kernels compiled offline from a checkout, as a user would: FlyDSL's and aiter's.

The study decomposes two upstream changes (FlyDSL PR #990, aiter PR #3828). To say how close our
ladders come to them we compile *their* kernels -- from a checkout (``make upstream`` fetches them with
git into the repository's ignored ``upstream/`` folder), never from code committed here -- with the
pinned FlyDSL, and keep only numbers (see ``metrics.fingerprint``).

* :func:`build` is ``make upstream``: fetch the pinned commits (:data:`FLYDSL_COMMITS`,
  :data:`AITER_COMMITS`) from GitHub or a local clone/mirror (``FLYDSL_GIT`` / ``AITER_GIT``) into bare
  repositories, extract each, get the device-library bitcode (Debian's ``rocm-device-libs``) -- all
  :mod:`mxfp4_ablation.upstream_sources` -- compile everything into ``upstream/out`` and copy aiter's
  asm GEMM there; every ``.json`` records the repository-relative ``compile`` command that rebuilds it;
* :func:`flydsl_gemm_isa` compiles FlyDSL's ``kernels/gemm/fp4_gemm_4wave.py``;
* :func:`aiter_moe_isa` compiles aiter's ``aiter/ops/flydsl/kernels/mxfp4_gemm{1,2}.py`` (MoE);
* ``python -m mxfp4_ablation.upstream compile|fingerprints ...`` does both from the shell.

Compiles go through :mod:`mxfp4_ablation.toolchain`'s worker and on-disk cache. The cache key is
the upstream checkout's content (the kernel file and its helper packages), the entry point below,
the parameters, FlyDSL's version and the arch -- not our own kernels, so our edits never recompile
theirs, and not the folders (the same checkout elsewhere is a cache hit).

Two things stand between aiter's MoE kernels (written against flydsl 0.2.0, aiter's pin) and the
pinned flydsl 0.5.0, both handled here without touching upstream code: ``flydsl.expr.buffer_ops``
moved to FlyDSL's ``kernels/common`` (FlyDSL PR #880), so it is imported from a FlyDSL checkout
(``flydsl_helpers``); and kernels that call the ROCm device libraries (``__ocml_exp2_f32``,
``__ockl_get_num_groups``) need their bitcode, which no ROCm-less machine has (``device_libs``: a
folder of ``*.bc``, e.g. Debian's ``rocm-device-libs`` package unpacked). The ``.json`` written
beside each ``.s`` records which were used.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import paths, toolchain
from .upstream_sources import (AITER_ASM_COMMIT, AITER_COMMITS, AITER_URL, FLYDSL_COMMITS, FLYDSL_URL, HELPERS_COMMIT,
                               UpstreamError, checkout_dir, copy_aiter_asm, default_out, device_libs,
                               device_libs_digest, extract, fetch, upstream_root)

FLYDSL_GEMM_FILE = "kernels/gemm/fp4_gemm_4wave.py"
#: Folders of a FlyDSL checkout the GEMM imports from (hashed into the cache key).
FLYDSL_GEMM_DEPS = ("kernels/gemm/fp4_gemm_4wave.py", "kernels/gemm/fp8_gemm_utils.py", "kernels/common")
AITER_MOE_FILES = {"gemm1": "aiter/ops/flydsl/kernels/mxfp4_gemm1.py", "gemm2": "aiter/ops/flydsl/kernels/mxfp4_gemm2.py"}
AITER_MOE_DEPS = ("aiter/ops/flydsl/kernels",)

#: The shapes of FlyDSL PR #990's own benchmark (M, N, K).
PR990_SHAPES = ((8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192), (16384, 16384, 16384))

#: Bumped when an entry point below changes the way it calls upstream (invalidates the cache).
ENTRY_VERSION = 1


# --------------------------------------------------------------------------------------------
# Checkouts
# --------------------------------------------------------------------------------------------


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


def flydsl_gemm_entry(checkout: str, M: int, N: int, K: int, digest: str = "", device_libs: str | None = None,
                      device_libs_digest: str | None = None, flydsl_helpers: str | None = None, **kw):
    """FlyDSL's GEMM, called as that commit's own ``tests/kernels/test_fp4_gemm_4wave.py`` does:
    ``compile_fp4_gemm_4w(K=K, MN=(M, N))`` after PR #990, ``compile_fp4_gemm_4w(K=K,
    mn_aligned=...)`` before it; A, B, C, A_scale, B_scale flattened, then M, N, stream. A commit older
    than FlyDSL PR #853/#880 imports ``flydsl.expr.buffer_ops``, which the pinned flydsl lacks: with
    ``flydsl_helpers`` it is taken from that checkout (:func:`_flydsl_buffer_ops_shim`)."""
    import importlib

    import torch
    import flydsl.expr as fx

    if flydsl_helpers:
        try:
            importlib.import_module("flydsl.expr.buffer_ops")
        except ImportError:
            _flydsl_buffer_ops_shim(flydsl_helpers)
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


def _import_aiter(checkout: str, module: str):
    """Import ``aiter.ops.flydsl.kernels.<module>`` from ``checkout`` without running aiter's package
    ``__init__`` files (they load aiter's C++ extensions): the parent packages are bare namespace
    modules pointing at the checkout's folders, so only the kernel module and its own relative
    imports (``dpp_utils``...) execute."""
    import importlib
    import types

    for name in [n for n in sys.modules if n == "aiter" or n.startswith("aiter.")]:
        del sys.modules[name]
    folder = Path(checkout)
    for name in ("aiter", "aiter.ops", "aiter.ops.flydsl", "aiter.ops.flydsl.kernels"):
        folder = folder / name.rsplit(".", 1)[-1]
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(folder)]
        sys.modules[name] = pkg
    return importlib.import_module(f"aiter.ops.flydsl.kernels.{module}")


_MOE_DTYPES = {  # dtype of each buffer argument (the callers in aiter/ops/flydsl/mxfp4_gemm*_kernels.py)
    "arg_eids": "int32", "arg_cumsum": "int32", "arg_mind": "int32", "arg_stids": "int32",
    "arg_sweights": "float32", "arg_out": "bfloat16", "arg_hidden": "bfloat16",
}


def _flydsl_buffer_ops_shim(flydsl_helpers: str | None) -> None:
    """aiter's MoE kernels (written for flydsl 0.2.0, aiter's pin) import ``flydsl.expr.buffer_ops``;
    FlyDSL PR #880 (7dac0826) moved that module to the FlyDSL repo's ``kernels/common/buffer_ops.py``,
    so flydsl 0.5.0 has none. When it is missing, the moved module is imported from the FlyDSL checkout
    ``flydsl_helpers`` and registered under its old name (upstream code only; nothing of ours)."""
    import importlib

    try:
        importlib.import_module("flydsl.expr.buffer_ops")
        return
    except ImportError:
        pass
    if not flydsl_helpers:
        raise UpstreamError("this flydsl has no flydsl.expr.buffer_ops (moved to FlyDSL's kernels/common by "
                            "FlyDSL PR #880): pass flydsl_helpers=<a FlyDSL checkout> (CLI --flydsl-helpers).")
    import flydsl.expr

    mod = _import_from(flydsl_helpers, "kernels.common.buffer_ops")
    sys.modules["flydsl.expr.buffer_ops"] = mod
    flydsl.expr.buffer_ops = mod


def aiter_moe_entry(checkout: str, stage: str, BM: int, use_nt: bool, tokens: int, experts: int, hidden: int,
                    inter: int, topk: int, inline_quant: bool = False, epilog: str = "atomic", digest: str = "",
                    flydsl_helpers: str | None = None, device_libs: str | None = None,
                    device_libs_digest: str | None = None):
    """aiter's FlyDSL MoE gemm1/gemm2, built as ``aiter/ops/flydsl/mxfp4_gemm{1,2}_kernels.py`` build
    them (``compile_gemm1_a4w4_port(BM, use_nt, inline_quant, D_HIDDEN, D_INTER, NE, TOPK)`` /
    ``compile_gemm2_a4w4_port(BM, use_nt, NE, N_OUT=hidden, epilog, D_INTER)``), launched with
    each parameter's declared type: 0 for a ``fx.Int64`` address (after PR #3828), a small 1-D tensor
    for a ``fx.Tensor`` (before it; the kernels build their buffer resources from the base address
    and compile-time sizes, so a tensor's length does not reach the ISA -- checked: 46ecc4489's
    gemm2 decode gives byte-identical ISA with 64- and 2**20-element tensors), the token count /
    grid / max-m-blocks for the i32s."""
    import torch
    import flydsl.expr as fx

    _flydsl_buffer_ops_shim(flydsl_helpers)
    if stage == "gemm1":
        mod = _import_aiter(checkout, "mxfp4_gemm1")
        launcher = mod.compile_gemm1_a4w4_port(BM, use_nt, inline_quant, D_HIDDEN=hidden, D_INTER=inter,
                                               NE=experts, TOPK=topk)
        ints = {"i32_ntok": tokens, "i32_grid": mod.gemm1_grid(tokens, BM, NE=experts, TOPK=topk, INTER=inter)}
    elif stage == "gemm2":
        mod = _import_aiter(checkout, "mxfp4_gemm2")
        launcher = mod.compile_gemm2_a4w4_port(BM=BM, use_nt=use_nt, NE=experts, N_OUT=hidden, epilog=epilog,
                                               D_INTER=inter)
        max_sorted = tokens * topk + min(experts, tokens * topk) * (BM - 1)
        ints = {"i32_M": tokens, "i32_max_m_blocks": -(-max_sorted // BM)}
    else:
        raise ValueError(f"stage must be 'gemm1' or 'gemm2', got {stage!r}")
    sig = inspect.signature(getattr(launcher, "func", launcher))
    args = []
    for name, param in sig.parameters.items():
        ann = getattr(param.annotation, "__name__", str(param.annotation))
        if "Stream" in ann:
            args.append(fx.Stream(None))
        elif "Tensor" in ann:
            args.append(torch.zeros(64, dtype=getattr(torch, _MOE_DTYPES.get(name, "uint8"))))
        elif name in ints:
            args.append(int(ints[name]))
        else:
            args.append(0)
    return launcher, tuple(args)


# --------------------------------------------------------------------------------------------
# Compiling through toolchain's worker and cache
# --------------------------------------------------------------------------------------------


def _code_text(func) -> str:
    """A function's source without its docstring (so editing prose never invalidates the cache)."""
    import ast
    import textwrap

    node = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
    return ast.unparse(node)


def _entry_digest() -> str:
    """Hash of the entry points' code (docstrings and comments left out)."""
    funcs = (_import_from, _flat, flydsl_gemm_entry, _import_aiter, _flydsl_buffer_ops_shim, aiter_moe_entry)
    text = "\n".join(_code_text(f) for f in funcs) + json.dumps(_MOE_DTYPES, sort_keys=True)
    return hashlib.sha256(f"{ENTRY_VERSION}\n{text}".encode()).hexdigest()


#: Parameters that are places on this machine: left out of the cache key, which has their content
#: digests instead (``digest`` covers the checkout and the FlyDSL helpers, ``device_libs_digest`` the
#: bitcode), so the same checkout compiled from another folder is a cache hit.
_PLACES = ("checkout", "flydsl_helpers", "device_libs")


def _key(target: str, params: dict[str, Any], arch: str) -> str:
    content = {k: v for k, v in params.items() if k not in _PLACES}
    payload = json.dumps({"toolchain": toolchain.TOOLCHAIN_VERSION, "upstream": _entry_digest(), "target": target,
                          "params": content, "arch": arch, "flydsl": toolchain.flydsl_version()},
                         sort_keys=True, default=str)
    return "up-" + hashlib.sha256(payload.encode()).hexdigest()


def compile_upstream(target: str, params: dict[str, Any], *, arch: str = toolchain.DEFAULT_ARCH,
                     use_cache: bool = True) -> toolchain.Artifact:
    """Compile one upstream entry point with toolchain's worker; cached under a key of the
    checkout's content digest (``params['digest']``), the entry point and FlyDSL's version."""
    return compile_upstream_many([(target, params)], arch=arch, use_cache=use_cache)[0]


@contextlib.contextmanager
def _toolkit_with_device_libs(bitcode: str | None):
    """ROCM_PATH for the worker with ``amdgcn/bitcode`` = ``bitcode`` and toolchain's ``ld.lld``.

    FlyDSL links ocml/ockl from ``$ROCM_PATH/amdgcn/bitcode`` into kernels that call them
    (``__ocml_exp2_f32``, ``__ockl_get_num_groups``...); without ROCm none is there. The staged root
    is a temporary folder (toolchain accepts a ``ROCM_PATH`` with ``llvm/bin/ld.lld``)."""
    if not bitcode:
        yield
        return
    linker = toolchain.toolkit_root() / "llvm" / "bin" / "ld.lld"
    saved = os.environ.get("ROCM_PATH")
    with tempfile.TemporaryDirectory(prefix="mxfp4-devlibs-") as tmp:
        root = Path(tmp)
        (root / "llvm" / "bin").mkdir(parents=True)
        (root / "amdgcn").mkdir()
        shutil.copy2(linker, root / "llvm" / "bin" / "ld.lld")
        (root / "amdgcn" / "bitcode").symlink_to(Path(bitcode).resolve())
        os.environ["ROCM_PATH"] = str(root)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("ROCM_PATH", None)
            else:
                os.environ["ROCM_PATH"] = saved


def compile_upstream_many(requests: list[tuple[str, dict[str, Any]]], *, arch: str = toolchain.DEFAULT_ARCH,
                          use_cache: bool = True, keep_going: bool = False) -> list[Any]:
    """Several upstream compiles; the cache misses share one worker process (FlyDSL imports once).
    With ``keep_going`` a failed compile gives its :class:`UpstreamError` in its place instead of
    raising. A request whose params name ``device_libs`` compiles with that bitcode folder."""
    keys = [_key(t, p, arch) for t, p in requests]
    results: list[Any] = [(toolchain._load_cached(k) if use_cache else None) for k in keys]
    todo = [i for i, r in enumerate(results) if r is None]
    batches: list[list[int]] = []
    if keep_going:  # one worker per job: toolchain stops a batch at its first failure
        batches = [[i] for i in todo]
    else:
        for libs in dict.fromkeys(requests[i][1].get("device_libs") for i in todo):
            batches.append([i for i in todo if requests[i][1].get("device_libs") == libs])
    for batch in batches:
        try:
            with _toolkit_with_device_libs(requests[batch[0]][1].get("device_libs")):
                arts = toolchain._run_worker([(requests[i], keys[i]) for i in batch], arch)
        except toolchain.ToolchainError as err:
            if not keep_going:
                raise UpstreamError(str(err)) from None
            results[batch[0]] = UpstreamError(str(err))
            continue
        for i, art in zip(batch, arts):
            toolchain._store(art)
            results[i] = art
    return results


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


#: Kimi-K2.5 at TP=4 (aiter's ``kimik2_5_mxfp4_tuned_fmoe.csv``: NE 385, H 7168, E 512, top-k 9).
KIMI_K25_TP4 = {"experts": 385, "hidden": 7168, "inter": 512, "topk": 9}

#: The aiter MoE kernels the Kimi tuned config picks (b242ba66a's kimik2_5_mxfp4_tuned_fmoe.csv):
#: decode (1..128 tokens) ``..._BM16_INLINEQUANT`` + ``..._TOPK9_BM16_ATOMIC_NT``; prefill (4096)
#: ``..._BM128`` + ``..._BM128_NONATOMIC``. Token counts as in the study's ISA cases (16, 4096).
MOE_CASES = {
    ("gemm1", "decode"): {"BM": 16, "use_nt": True, "inline_quant": True, "tokens": 16},
    ("gemm1", "prefill"): {"BM": 128, "use_nt": False, "inline_quant": False, "tokens": 4096},
    ("gemm2", "decode"): {"BM": 16, "use_nt": True, "epilog": "atomic", "tokens": 16},
    ("gemm2", "prefill"): {"BM": 128, "use_nt": False, "epilog": "nonatomic", "tokens": 4096},
}


def _moe_params(root: Path, stage: str, regime: str | None, shape: dict[str, Any] | None, kw: dict) -> dict:
    if stage not in AITER_MOE_FILES:
        raise UpstreamError(f"stage must be one of {sorted(AITER_MOE_FILES)}, got {stage!r}.")
    if regime is not None and (stage, regime) not in MOE_CASES:
        raise UpstreamError(f"regime must be 'decode' or 'prefill', got {regime!r}.")
    params = dict(MOE_CASES[(stage, regime)]) if regime else {}
    params.update(shape or KIMI_K25_TP4)
    params.update(kw)
    missing = [k for k in ("BM", "use_nt", "tokens", "experts", "hidden", "inter", "topk") if k not in params]
    if missing:
        raise UpstreamError(f"aiter {stage} needs {', '.join(missing)} (or a regime).")
    if stage == "gemm1":
        params.pop("epilog", None)
    else:
        params.pop("inline_quant", None)
    libs = params.pop("device_libs", None)
    if libs:
        params["device_libs"] = str(Path(libs).resolve())
        params["device_libs_digest"] = device_libs_digest(libs)
    helpers = params.pop("flydsl_helpers", None)
    digest = tree_digest(root, AITER_MOE_DEPS)
    if helpers:
        params["flydsl_helpers"], digest = _with_helpers(digest, helpers)
    return {"checkout": str(root), "stage": stage, **params, "digest": digest}


def aiter_moe_artifact(checkout: Path | str, stage: str, regime: str | None = "decode",
                       shape: dict[str, Any] | None = None, *, arch: str = toolchain.DEFAULT_ARCH,
                       use_cache: bool = True, **kw) -> toolchain.Artifact:
    root = _check_checkout(checkout, AITER_MOE_FILES.get(stage, AITER_MOE_FILES["gemm1"]), "aiter")
    params = _moe_params(root, stage, regime, shape, kw)
    return compile_upstream("mxfp4_ablation.upstream:aiter_moe_entry", params, arch=arch, use_cache=use_cache)


def aiter_moe_isa(checkout: Path | str, stage: str, regime: str | None = "decode",
                  shape: dict[str, Any] | None = None, **kw) -> str:
    """ISA text of aiter's FlyDSL MoE ``stage`` ("gemm1"|"gemm2") from ``checkout``, compiled offline
    for gfx950. ``regime`` picks a :data:`MOE_CASES` entry (decode BM16 / prefill BM128); ``shape``
    overrides the Kimi-K2.5 TP=4 model dims (experts, hidden, inter, topk); keywords override
    anything (BM, use_nt, inline_quant, epilog, tokens)."""
    return aiter_moe_artifact(checkout, stage, regime, shape, **kw).isa


# --------------------------------------------------------------------------------------------
# Ready-made ISA for others: <out>/<source>/<commit>/<name>.s + .json
# --------------------------------------------------------------------------------------------


def _metadata_args(isa_text: str, kernel: str | None = None) -> list[dict[str, Any]]:
    from . import isa

    k = isa.kernel_of(isa_text, kernel)
    args = k.metadata.get(".args") or []
    return [{"offset": int(a.get(".offset", 0)), "size": int(a.get(".size", 0)),
             "value_kind": a.get(".value_kind")} for a in args if isinstance(a, dict)]


def named_args(isa_text: str, names: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The kernel's metadata ``.args`` with names: ``names`` is ``[(name, "tensor"|"i32"|"i64"), ...]``
    in parameter order; a tensor is two entries (``name`` = 8-byte pointer, ``name.layout`` = its
    by-value shape/stride block), an i32/i64 one. Hidden (implicit) arguments the runtime fills --
    ``hidden_block_count_x``... -- keep their value kind as name. Raises if the counts disagree."""
    md = _metadata_args(isa_text)
    explicit = [a for a in md if not str(a["value_kind"]).startswith("hidden_")]
    labels: list[str] = []
    for name, kind in names:
        labels += [name, f"{name}.layout"] if kind == "tensor" else [name]
    if len(labels) != len(explicit):
        raise UpstreamError(f"kernel has {len(explicit)} explicit kernargs but the call names {len(labels)} ({labels}).")
    it = iter(labels)
    return [{"name": a["value_kind"] if str(a["value_kind"]).startswith("hidden_") else next(it), **a} for a in md]


GEMM_ARG_NAMES = [("A", "tensor"), ("B_T", "tensor"), ("C", "tensor"), ("A_scale", "tensor"),
                  ("B_scale", "tensor"), ("c_m", "i32"), ("c_n", "i32")]


def write_isa(artifact: toolchain.Artifact, out: Path, info: dict[str, Any]) -> Path:
    """Write ``artifact.isa`` to ``out`` (``.s``) and ``info`` plus provenance beside it (``.json``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(artifact.isa)
    os.replace(tmp, out)
    from . import isa

    meta = {**info, "kernel": isa.parse(artifact.isa)[0].name, "flydsl_version": artifact.flydsl_version, "arch": artifact.arch,
            "resources": artifact.resources, "compile_seconds": artifact.compile_seconds,
            "cache_key": artifact.key, "env": {"COMPILE_ONLY": "1", "ARCH": artifact.arch,
                                               "FLYDSL_DEBUG_DUMP_ASM": "1"}}
    side = out.with_suffix(".json")
    side.with_name(f".{side.name}.tmp").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    os.replace(side.with_name(f".{side.name}.tmp"), side)
    return out


def repo_relative(path: Path | str) -> str:
    """``path`` relative to the repository root when it lies inside it (how committed data names
    places: ``upstream/out``), else as given."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(paths.REPO_ROOT)) if p.is_absolute() or p.exists() else str(p)
    except ValueError:
        return str(p)


def _cli_command(argv: list[str]) -> str:
    """The command as a reader reruns it from the repository root (paths inside it made relative)."""
    words = [repo_relative(a) if (os.sep in a and not a.startswith("-") and Path(a).exists()) else a for a in argv]
    return "PYTHONPATH=src python -m mxfp4_ablation.upstream " + " ".join(words)


def _record_failure(base: Path, art, text: str, what: str) -> bool:
    """Whether the compile ``art`` failed: then its error goes to ``<base>.error.txt`` (and one line to
    stderr); else a stale error file from an earlier run is removed."""
    err = base.with_suffix(".error.txt")
    if not isinstance(art, Exception):
        err.unlink(missing_ok=True)
        return False
    base.parent.mkdir(parents=True, exist_ok=True)
    err.write_text(text)
    print(f"error: {what}: {str(art).splitlines()[0]}", file=sys.stderr)
    return True


def _with_helpers(digest: str, flydsl_helpers) -> tuple[str, str]:
    """(the checked helpers checkout, ``digest`` extended by its ``kernels/common``) for
    ``flydsl.expr.buffer_ops``'s stand-in (:func:`_flydsl_buffer_ops_shim`)."""
    helpers = _check_checkout(flydsl_helpers, "kernels/common/buffer_ops.py", "FlyDSL (helpers)")
    return str(helpers), hashlib.sha256((digest + tree_digest(helpers, ("kernels/common",))).encode()).hexdigest()


def compile_flydsl_gemms(checkout: Path, commit: str, out_root: Path, shapes=PR990_SHAPES,
                         command: str = "", flydsl_helpers: Path | None = None, note: str = "",
                         keep_going: bool = False) -> list[Path]:
    """Compile FlyDSL's GEMM at every shape and write ``<out_root>/flydsl/<commit8>/M.._N.._K...s``.
    ``flydsl_helpers``: a FlyDSL checkout whose ``kernels/common/buffer_ops.py`` stands in for
    ``flydsl.expr.buffer_ops`` where the pinned flydsl lacks it (used only then). With ``keep_going`` a
    shape that does not compile is left out (its error in ``M.._N.._K...error.txt``) instead of raising."""
    root = _check_checkout(checkout, FLYDSL_GEMM_FILE, "FlyDSL")
    digest = tree_digest(root, FLYDSL_GEMM_DEPS)
    extra = {}
    if flydsl_helpers:
        extra["flydsl_helpers"], digest = _with_helpers(digest, flydsl_helpers)
    requests = [("mxfp4_ablation.upstream:flydsl_gemm_entry",
                 {"checkout": str(root), "M": int(M), "N": int(N), "K": int(K), "digest": digest, **extra})
                for M, N, K in shapes]
    written = []
    for (M, N, K), art in zip(shapes, compile_upstream_many(requests, keep_going=keep_going)):
        base = out_root / "flydsl" / commit[:8] / f"M{M}_N{N}_K{K}"
        if _record_failure(base, art, f"{art}\n", f"flydsl {commit[:8]} M{M}_N{N}_K{K}"):
            continue
        info = {"source": "flydsl", "commit": commit, "checkout": str(root), "file": FLYDSL_GEMM_FILE,
                "shape": {"M": M, "N": N, "K": K},
                "call": (f"compile_fp4_gemm_4w(K={K}, MN=({M}, {N}))" if _has_param(root, "MN")
                         else f"compile_fp4_gemm_4w(K={K}, mn_aligned=True)"),
                "grid": [(M // 256) * (N // 256), 1, 1], "block": [256, 1, 1],
                "args": named_args(art.isa, GEMM_ARG_NAMES),
                "args_note": "tensors are passed flattened 1-D (as upstream's test does): layout = i32 element count",
                "command": command, "flydsl_helpers": extra.get("flydsl_helpers"), "note": note}
        written.append(write_isa(art, base.with_suffix(".s"), info))
    return written


GEMM1_ARG_NAMES = ["arg_aq", "arg_ascale", "arg_bq", "arg_bscale", "arg_eids", "arg_cumsum", "arg_mind",
                    "i32_ntok", "arg_aqout", "arg_ascaleout", "arg_hidden"]
GEMM2_ARG_NAMES = ["arg_aq", "arg_ascale", "arg_bq", "arg_bscale", "arg_eids", "arg_cumsum", "arg_stids",
                    "arg_sweights", "i32_M", "arg_out", "arg_out_scale"]


def _moe_grid(p: dict[str, Any]) -> tuple[list[int], str]:
    """The launch grid the aiter host code computes (gemm1_grid / flydsl_mxfp4_gemm2)."""
    BM, T, E, K = p["BM"], p["tokens"], p["experts"], p["topk"]
    if p["stage"] == "gemm1":
        blocks = (T * K + (E if BM == 128 else min(T * K, E)) * (BM - 1) + BM - 1) // BM
        return [blocks * (2 * p["inter"] // 256), 1, 1], "gemm1_grid(tokens, BM, NE, TOPK, INTER)"
    max_sorted = T * K + min(E, T * K) * (BM - 1)
    tiles = -(-max_sorted // BM) * (p["hidden"] // 256)
    if p.get("epilog", "atomic") != "atomic":
        return [256 if tiles > 256 * 4 else tiles, 1, 1], "persistent: NUM_CU=256 if tiles > 1024 else tiles"
    return [tiles, 1, 1], "max_m_blocks * N_OUT/256"


def compile_aiter_moes(checkout: Path, commit: str, out_root: Path, command: str = "",
                       cases=None, flydsl_helpers: Path | None = None,
                       device_libs: Path | None = None) -> list[Path]:
    """Compile aiter's MoE gemm1/gemm2 for every :data:`MOE_CASES` entry and write
    ``<out_root>/aiter/<commit9>/<stage>_<regime>.s`` (+ ``.json``). Each case is compiled first
    without device libraries; one that needs them (it calls ocml/ockl) is compiled again with
    ``device_libs`` when given (its ``.json`` says so). A case that still does not compile gets
    ``<stage>_<regime>.error.txt`` (the error) instead, and the others still run."""
    root = _check_checkout(checkout, AITER_MOE_FILES["gemm1"], "aiter")
    cases = list(cases or MOE_CASES)
    extra = {"flydsl_helpers": str(flydsl_helpers)} if flydsl_helpers else {}
    target = "mxfp4_ablation.upstream:aiter_moe_entry"
    requests = [(target, _moe_params(root, s, r, None, dict(extra))) for s, r in cases]
    arts = compile_upstream_many(requests, keep_going=True)
    errors: dict[int, str] = {}
    for n, art in enumerate(arts):
        if isinstance(art, Exception) and device_libs and "bitcode" in str(art):
            errors[n] = str(art).splitlines()[0].rpartition(" failed: ")[2]
            stage, regime = cases[n]
            requests[n] = (target, _moe_params(root, stage, regime, None, {**extra, "device_libs": str(device_libs)}))
            arts[n] = compile_upstream_many([requests[n]], keep_going=True)[0]
    written = []
    for n, ((stage, regime), (_, params), art) in enumerate(zip(cases, requests, arts)):
        base = out_root / "aiter" / commit[:9] / f"{stage}_{regime}"
        if _record_failure(base, art, f"{params}\n{art}\n", f"aiter {commit[:9]} {stage} {regime}"):
            continue
        grid, rule = _moe_grid(params)
        names = GEMM1_ARG_NAMES if stage == "gemm1" else GEMM2_ARG_NAMES
        md = _metadata_args(art.isa)
        tensors = any(a["value_kind"] == "global_buffer" for a in md)
        kinds = [(name, "i32" if name.startswith("i32") else ("tensor" if tensors else "i64")) for name in names]
        try:
            args = named_args(art.isa, kinds)
        except UpstreamError:
            args = md
        notes = []
        if params.get("flydsl_helpers"):
            notes.append("aiter pins flydsl 0.2.0; compiled with this flydsl, flydsl.expr.buffer_ops taken from "
                         "flydsl_helpers' kernels/common/buffer_ops.py (moved there by FlyDSL PR #880)")
        if params.get("device_libs"):
            notes.append(f"without device libraries it failed ({errors.get(n, 'needs ocml/ockl')}); compiled "
                         f"with the bitcode in device_libs")
        info = {"source": "aiter", "commit": commit, "checkout": str(root), "file": AITER_MOE_FILES[stage],
                "stage": stage, "regime": regime,
                "shape": {k: params[k] for k in ("tokens", "experts", "hidden", "inter", "topk")},
                "config": {k: params[k] for k in ("BM", "use_nt", "inline_quant", "epilog") if k in params},
                "grid": grid, "grid_rule": rule, "block": [256, 1, 1], "args": args, "command": command,
                "flydsl_helpers": params.get("flydsl_helpers"), "device_libs": params.get("device_libs"),
                "device_libs_digest": params.get("device_libs_digest"), "note": "; ".join(notes)}
        written.append(write_isa(art, base.with_suffix(".s"), info))
    if commit == AITER_ASM_COMMIT:
        co = copy_aiter_asm(root, out_root)
        if co is not None:
            written.append(co)
    return written


def _has_param(root: Path, name: str) -> bool:
    text = (root / FLYDSL_GEMM_FILE).read_text()
    start = text.find("def compile_fp4_gemm_4w(")
    return f" {name}:" in text[start:text.find("):", start)] if start >= 0 else False


# --------------------------------------------------------------------------------------------
# Fingerprint table: every written .s + .json under an output root -> one CSV (numbers only)
# --------------------------------------------------------------------------------------------

FINGERPRINT_COLUMNS = ("source", "commit", "file", "flydsl_version", "kernel", "stage", "regime", "shape",
                       "config", "metric", "value", "command", "note")


def _shape_text(info: dict[str, Any]) -> str:
    shape = dict(info.get("shape") or {})
    if info.get("source") == "aiter" and "BM" in (info.get("config") or {}):
        shape["BM"] = info["config"]["BM"]
    return " ".join(f"{k}={v}" for k, v in shape.items())


def fingerprint_rows(out_root: Path | str) -> list[dict[str, Any]]:
    """One row per (kernel, fingerprint metric) for every ``.s`` with a ``.json`` beside it under
    ``out_root`` (as :func:`compile_flydsl_gemms` / :func:`compile_aiter_moes` write them), sorted."""
    from . import metrics

    root = Path(out_root)
    found = sorted(root.rglob("*.s"))
    if not found:
        raise UpstreamError(f"no compiled upstream kernels (*.s with a .json beside) under {root}.")
    rows = []
    for path in found:
        side = path.with_suffix(".json")
        if not side.is_file():
            continue
        info = json.loads(side.read_text())
        fp = metrics.fingerprint(path.read_text())
        config = info.get("config") or {}
        notes = []
        if info.get("flydsl_helpers"):
            notes.append(f"flydsl.expr.buffer_ops from {Path(info['flydsl_helpers']).name}/kernels/common "
                         "(moved by FlyDSL PR #880; aiter pins flydsl 0.2.0)")
        if info.get("device_libs"):
            libs = Path(info["device_libs"])
            named = next((part for part in libs.parts if part.startswith("rocm-device-libs")), str(libs))
            notes.append(f"calls ocml/ockl: linked {named} bitcode sha256:{str(info.get('device_libs_digest'))[:16]}")
        note = "; ".join(notes)
        for metric, value in fp.items():
            rows.append({
                "source": info["source"], "commit": info["commit"], "file": info["file"],
                "flydsl_version": info.get("flydsl_version"), "kernel": info.get("kernel"),
                "stage": info.get("stage", "gemm"), "regime": info.get("regime", ""), "shape": _shape_text(info),
                "config": " ".join(f"{k}={v}" for k, v in config.items() if k != "BM"),
                "metric": metric, "value": value, "command": info.get("command", ""), "note": note.strip(),
            })
    order = {k: n for n, k in enumerate(metrics.FINGERPRINT_KEYS)}
    rows.sort(key=lambda r: (r["source"], r["stage"], r["regime"], r["shape"], r["commit"], order[r["metric"]]))
    return rows


def write_fingerprints(out_root: Path | str, csv_path: Path | str) -> Path:
    """Write :func:`fingerprint_rows` of ``out_root`` to ``csv_path`` (atomically)."""
    import csv

    rows = fingerprint_rows(out_root)
    csv_path = Path(csv_path)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FINGERPRINT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "value": "" if row["value"] is None else row["value"]})
    os.replace(tmp, csv_path)
    return csv_path


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.lower().replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} must look like 8192x8192x8192") from None


def build(root: Path | str | None = None, *, flydsl_git: str = FLYDSL_URL, aiter_git: str = AITER_URL,
          libs: Path | str | None = None, deb: Path | str | None = None, out: Path | str | None = None,
          log=print) -> Path:
    """What ``make upstream`` does: fetch FlyDSL and aiter at the pinned commits into bare
    repositories under ``root`` (``git/``), extract each commit (``flydsl-<c8>``, ``aiter-<c9>``),
    get the device-library bitcode, compile every upstream kernel into ``out`` (default
    ``<root>/out``) and copy aiter's asm GEMM beside them. Each kernel's ``.json`` records the
    ``compile`` command that rebuilds it, with repository-relative paths. Compiles are cached."""
    root = Path(root) if root is not None else upstream_root()
    out = Path(out) if out is not None else root / "out"
    for project, source, commits in (("flydsl", flydsl_git, FLYDSL_COMMITS), ("aiter", aiter_git, AITER_COMMITS)):
        git_dir = fetch(source, root / "git" / f"{project}.git", commits)
        for commit in commits:
            log(f"upstream: {extract(git_dir, commit, checkout_dir(project, commit, root))}")
    libs = Path(libs) if libs else device_libs(root, deb)
    device_libs_digest(libs)  # one clear error for a folder without bitcode
    rel = repo_relative
    for commit in FLYDSL_COMMITS:
        ck = checkout_dir("flydsl", commit, root)
        cmd = _cli_command(["compile", "--flydsl", rel(ck), "--commit", commit, "--out", rel(out)])
        for path in compile_flydsl_gemms(ck, commit, out, PR990_SHAPES, cmd):
            log(f"upstream: {path}")
    helpers = checkout_dir("flydsl", HELPERS_COMMIT, root)
    for commit in AITER_COMMITS:
        ck = checkout_dir("aiter", commit, root)
        cmd = _cli_command(["compile", "--aiter", rel(ck), "--flydsl-helpers", rel(helpers), "--device-libs", rel(libs),
                            "--commit", commit, "--out", rel(out)])
        for path in compile_aiter_moes(ck, commit, out, cmd, flydsl_helpers=helpers, device_libs=libs):
            log(f"upstream: {path}")
    log(f"upstream: done: {out} (rebuild the committed tables: `python -m mxfp4_ablation.upstream fingerprints`, "
        "`python -m mxfp4_ablation.modelled validate --upstream-out upstream/out --write "
        "experiments/reference/timing_validation.csv`)")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.upstream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    bu = sub.add_parser("build", help="`make upstream`: fetch the pinned commits, extract, compile everything")
    bu.add_argument("--root", type=Path, default=upstream_root(),
                    help="folder for the git repositories, checkouts and outputs (default: upstream/, ignored)")
    bu.add_argument("--flydsl-git", default=os.environ.get("FLYDSL_GIT") or FLYDSL_URL,
                    help="FlyDSL to fetch from: URL, clone or mirror (default: $FLYDSL_GIT or GitHub)")
    bu.add_argument("--aiter-git", default=os.environ.get("AITER_GIT") or AITER_URL,
                    help="aiter to fetch from: URL, clone or mirror (default: $AITER_GIT or GitHub)")
    bu.add_argument("--device-libs", type=Path, default=os.environ.get("DEVICE_LIBS") or None,
                    help="ROCm amdgcn/bitcode folder (default: Debian rocm-device-libs unpacked under --root)")
    bu.add_argument("--device-libs-deb", type=Path, default=os.environ.get("ROCM_DEVICE_LIBS_DEB") or None,
                    help="a rocm-device-libs .deb to unpack instead of `apt-get download rocm-device-libs`")
    bu.add_argument("--out", type=Path, default=None, help="compiled kernels (default: <root>/out)")
    ex = sub.add_parser("extract", help="write one commit of a bare git dir into a folder")
    ex.add_argument("--git-dir", required=True, type=Path)
    ex.add_argument("--commit", required=True)
    ex.add_argument("--dest", required=True, type=Path)
    co = sub.add_parser("compile", help="compile upstream kernels and write .s + .json under --out")
    co.add_argument("--flydsl", type=Path, help="FlyDSL checkout (has kernels/gemm/fp4_gemm_4wave.py)")
    co.add_argument("--aiter", type=Path, help="aiter checkout (has aiter/ops/flydsl/kernels/mxfp4_gemm1.py)")
    co.add_argument("--commit", required=True, help="the checkout's commit id (labels the output folder)")
    co.add_argument("--flydsl-helpers", type=Path,
                    help="FlyDSL checkout whose kernels/common/buffer_ops.py stands in for flydsl.expr.buffer_ops "
                         "(aiter's kernels; FlyDSL commits older than PR #853)")
    co.add_argument("--device-libs", type=Path,
                    help="ROCm device-library bitcode folder (amdgcn/bitcode) for kernels that call ocml/ockl")
    co.add_argument("--shape", action="append", type=_parse_shape, help="GEMM MxNxK (default: PR #990's four)")
    co.add_argument("--out", type=Path, default=default_out(),
                    help="output folder (default: $MXFP4_UPSTREAM_OUT, else upstream/out, ignored by git)")
    fp = sub.add_parser("fingerprints", help="reduce every compiled .s (+ .json) under --out to a fingerprint CSV")
    fp.add_argument("--out", type=Path, default=default_out(),
                    help="the folder `compile` wrote to (default: $MXFP4_UPSTREAM_OUT, else upstream/out)")
    fp.add_argument("--csv", type=Path, default=paths.reference_dir() / "fingerprints.csv")
    args = parser.parse_args(argv)
    if args.cmd == "fingerprints" and not Path(args.out).is_dir():
        print(f"error: no compiled upstream kernels at {args.out}: run `make upstream` (or give --out DIR)",
              file=sys.stderr)
        return 2
    try:
        if args.cmd == "build":
            build(args.root, flydsl_git=args.flydsl_git, aiter_git=args.aiter_git, libs=args.device_libs,
                  deb=args.device_libs_deb, out=args.out)
        elif args.cmd == "extract":
            print(extract(args.git_dir, args.commit, args.dest))
        elif args.cmd == "fingerprints":
            print(write_fingerprints(args.out, args.csv))
        elif args.cmd == "compile":
            if not (args.flydsl or args.aiter):
                parser.error("give --flydsl PATH or --aiter PATH")
            if args.flydsl:
                for path in compile_flydsl_gemms(args.flydsl, args.commit, args.out,
                                                 tuple(args.shape or PR990_SHAPES), _cli_command(argv),
                                                 flydsl_helpers=args.flydsl_helpers):
                    print(path)
            if args.aiter:
                for path in compile_aiter_moes(args.aiter, args.commit, args.out, _cli_command(argv),
                                               flydsl_helpers=args.flydsl_helpers, device_libs=args.device_libs):
                    print(path)
    except (UpstreamError, toolchain.ToolchainError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
