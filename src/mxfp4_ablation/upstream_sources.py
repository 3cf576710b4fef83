"""Where the upstream kernels come from: FlyDSL's and aiter's pinned commits, fetched with git into bare
repositories and extracted into checkouts, and the ROCm device libraries their MoE kernels link.

:func:`fetch` brings the pinned commits (:data:`FLYDSL_COMMITS`, :data:`AITER_COMMITS`) from GitHub or a
local clone/mirror into a bare repository; :func:`extract` writes one commit into a folder named by
:func:`checkout_dir` under :func:`upstream_root` (the repository's ignored ``upstream/``);
:func:`device_libs` finds or unpacks Debian's ``rocm-device-libs``; :func:`copy_aiter_asm` copies aiter's
hand-written GEMM code object next to the compiled kernels. :mod:`mxfp4_ablation.upstream` compiles the
checkouts (``make upstream`` is its ``build``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from . import paths


class UpstreamError(RuntimeError):
    """A checkout is missing or is not the expected project, or an upstream compile failed."""


FLYDSL_URL = "https://github.com/ROCm/FlyDSL.git"
AITER_URL = "https://github.com/ROCm/aiter.git"
#: FlyDSL before PR #990 and its merge; aiter before PR #3828 and its merge (the study's seeds).
FLYDSL_COMMITS = ("daee90e485e7e872c54a2ebd147228219f0b367e", "741f3d6d322182b451f7b48600385ec9a5415794")
AITER_COMMITS = ("46ecc4489dfd9935c6877665eeae480f54d010b4", "b242ba66a610c02018daa55a5c9c9bdc33a5dabf")
#: The FlyDSL checkout whose ``kernels/common/buffer_ops.py`` aiter's kernels import (FlyDSL PR #880).
HELPERS_COMMIT = FLYDSL_COMMITS[1]
#: aiter's hand-written MXFP4 GEMM that PR #990 compares against (a code object, copied to
#: ``<out>/aiter/`` from the aiter checkout at :data:`AITER_ASM_COMMIT` for the timing model's validation).
AITER_ASM_CO = "hsa/gfx950/f4gemm/f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co"
AITER_ASM_COMMIT = AITER_COMMITS[1]
DEVICE_LIBS_PACKAGE = "rocm-device-libs"
_BITCODE = "usr/lib/x86_64-linux-gnu/amdgcn/bitcode"


def upstream_root() -> Path:
    """Where ``make upstream`` puts everything: the repository's ignored ``upstream/`` folder
    (``MXFP4_UPSTREAM`` overrides it)."""
    value = os.environ.get("MXFP4_UPSTREAM")
    return Path(value) if value else paths.REPO_ROOT / "upstream"


def default_out() -> Path:
    """The compiled upstream kernels: ``MXFP4_UPSTREAM_OUT``, else ``<upstream_root()>/out``."""
    value = os.environ.get("MXFP4_UPSTREAM_OUT")
    return Path(value) if value else upstream_root() / "out"


def checkout_dir(project: str, commit: str, root: Path | str | None = None) -> Path:
    """``<root>/flydsl-<commit8>`` or ``<root>/aiter-<commit9>`` (how ``build`` names its checkouts)."""
    root = Path(root) if root is not None else upstream_root()
    return root / (f"flydsl-{commit[:8]}" if project == "flydsl" else f"aiter-{commit[:9]}")


def _git(*args: str, git_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True)


def fetch(source: str, git_dir: Path | str, commits) -> Path:
    """Make the bare repository ``git_dir`` hold every commit of ``commits``, fetched from ``source``
    (a URL, a clone or a bare mirror): commits already there are not fetched again; each missing one
    is fetched alone (``--depth 1``, what GitHub serves by id), and if the source refuses that, its
    branches are fetched whole. One clear error if a commit is still missing."""
    git_dir = Path(git_dir)
    if not (git_dir / "HEAD").is_file():
        git_dir.mkdir(parents=True, exist_ok=True)
        init = subprocess.run(["git", "init", "--quiet", "--bare", str(git_dir)], capture_output=True, text=True)
        if init.returncode != 0:
            raise UpstreamError(f"git init {git_dir} failed: {init.stderr.strip()}")
    have = lambda c: _git("cat-file", "-e", f"{c}^{{commit}}", git_dir=git_dir).returncode == 0  # noqa: E731
    missing = [c for c in commits if not have(c)]
    for commit in missing:
        got = _git("fetch", "--quiet", "--depth", "1", source, commit, git_dir=git_dir)
        if got.returncode != 0 or not have(commit):
            _git("fetch", "--quiet", source, "+refs/heads/*:refs/remotes/source/*", git_dir=git_dir)
        if not have(commit):
            why = (got.stderr.strip().splitlines() or ["not found"])[-1]
            raise UpstreamError(f"could not fetch {commit[:12]} from {source} ({why}); with no network, point "
                                "FLYDSL_GIT= / AITER_GIT= at a local clone or mirror.")
    return git_dir


def _deb_version(deb: Path) -> str:
    out = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True)
    if out.returncode != 0:
        raise UpstreamError(f"{deb} is not a .deb dpkg-deb can read ({out.stderr.strip() or 'no dpkg-deb'}).")
    return out.stdout.strip().split("-")[0]


def device_libs(root: Path | str, deb: Path | str | None = None) -> Path:
    """The ROCm device-library bitcode folder for the kernels that call ocml/ockl: Debian's
    ``rocm-device-libs`` unpacked under ``<root>/rocm-device-libs-<version>/`` -- from ``deb`` when
    given, else ``apt-get download rocm-device-libs`` (no root needed) -- or one already there."""
    root = Path(root)
    if deb is None:
        found = sorted(root.glob(f"{DEVICE_LIBS_PACKAGE}-*/{_BITCODE}"))
        if found:
            return found[-1]
        if not shutil.which("apt-get"):
            raise UpstreamError("no device-library bitcode: without apt-get, give DEVICE_LIBS=<ROCm's "
                                "amdgcn/bitcode folder> (or ROCM_DEVICE_LIBS_DEB=<rocm-device-libs .deb>).")
        with tempfile.TemporaryDirectory(prefix="mxfp4-devlibs-") as tmp:
            got = subprocess.run(["apt-get", "download", DEVICE_LIBS_PACKAGE], cwd=tmp, capture_output=True, text=True)
            debs = sorted(Path(tmp).glob(f"{DEVICE_LIBS_PACKAGE}_*.deb"))
            if got.returncode != 0 or not debs:
                why = (got.stderr.strip().splitlines() or ["no package"])[-1]
                raise UpstreamError(f"apt-get download {DEVICE_LIBS_PACKAGE} failed ({why}); give DEVICE_LIBS=<an "
                                    "amdgcn/bitcode folder> or ROCM_DEVICE_LIBS_DEB=<the .deb>.")
            return device_libs(root, debs[0])
    deb = Path(deb)
    if not deb.is_file():
        raise UpstreamError(f"{deb} does not exist (ROCM_DEVICE_LIBS_DEB).")
    dest = root / f"{DEVICE_LIBS_PACKAGE}-{_deb_version(deb)}"
    if not (dest / _BITCODE).is_dir():
        tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        out = subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], capture_output=True, text=True)
        if out.returncode != 0 or not (tmp / _BITCODE).is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            raise UpstreamError(f"{deb} has no {_BITCODE} ({out.stderr.strip() or 'wrong package'}).")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest / _BITCODE


def copy_aiter_asm(checkout: Path | str, out_root: Path | str) -> Path | None:
    """Copy aiter's hand-written f4gemm code object (:data:`AITER_ASM_CO`) to ``<out_root>/aiter/``."""
    src = Path(checkout) / AITER_ASM_CO
    if not src.is_file():
        return None
    dest = Path(out_root) / "aiter" / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)
    return dest


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


def device_libs_digest(folder: Path | str) -> str:
    """sha256 over the ``*.bc`` files of a ROCm device-library folder (``amdgcn/bitcode``)."""
    root = Path(folder)
    files = sorted(root.glob("*.bc"))
    if not files:
        raise UpstreamError(f"{root} holds no device-library bitcode (*.bc: ocml.bc, ockl.bc...).")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()
