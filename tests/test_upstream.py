"""Tests for mxfp4_ablation.upstream (checkouts, CLI errors, named kernargs) and metrics.fingerprint.

Compiling upstream kernels needs an upstream checkout: the tests that do (marker ``upstream``, counted
at the end of the run) take ``make upstream``'s checkouts under ``upstream/`` or the paths in
``MXFP4_FLYDSL_CHECKOUT`` / ``MXFP4_AITER_CHECKOUT``, and skip without one saying how to get it.
Everything else runs on tiny synthetic trees and hand-written ISA.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mxfp4_ablation import metrics, upstream, upstream_sources

DATA = Path(__file__).parent / "data" / "isa"


# ---------------------------------------------------------------------------------- fingerprint


def _kernel_text(body: str, name: str = "k") -> str:
    return f"\t.type\t{name},@function\n{name}:\n{body}\ts_endpgm\n.Lfunc_end0:\n"


def test_fingerprint_of_a_kernel_with_nested_loops_reuses_metrics():
    text = (DATA / "two_kernels.s").read_text()
    fp = metrics.fingerprint(text, "alpha")
    m = metrics.kernel_metrics(text, "alpha")
    assert tuple(fp) == metrics.FINGERPRINT_KEYS
    json.dumps(fp)
    for key in ("vgpr_unified", "arch_vgpr", "agpr", "sgpr", "lds_bytes", "instructions", "mfma", "s_waitcnt",
                "s_barrier", "loop_instructions", "loop_mfma", "loop_s_waitcnt", "insts_before_first_buffer_load",
                "v_accvgpr_write", "v_accvgpr_read"):
        assert fp[key] == m[key], key
    assert fp["kernarg_bytes"] == 16  # .amdhsa_kernarg_size
    # stores {1: 1, 2: 1, 4: 1, 8: 1, 16: 2}
    assert (fp["buffer_store"], fp["buffer_store_1B"], fp["buffer_store_2B"], fp["buffer_store_4B"],
            fp["buffer_store_8B"], fp["buffer_store_12B"], fp["buffer_store_16B"]) == (6, 1, 1, 1, 1, 0, 2)
    assert fp["s_load"] == 1
    assert fp["s_waitcnt_per_128_mfma"] == 128.0  # 2 waits over 2 MFMAs
    assert fp["loop_s_waitcnt_per_128_mfma"] == 64.0 and fp["loop_instructions_per_128_mfma"] == 14 * 64


def test_fingerprint_counts_the_added_opcode_classes():
    body = (
        "\ts_mov_b32 m0, s4\n\tv_readfirstlane_b32 m0, v1\n\tv_readfirstlane_b32 s5, v1\n"
        "\ts_add_u32 m0, m0, 0x100\n\tv_mov_b32 v0, m0\n"  # m0 as a source is not a write
        "\tbuffer_load_dword v2, v0, s[8:11], 0 offen\n"
        "\tds_read_b128 v[4:7], v0\n\tds_read_b64_tr_b4 v[4:5], v0\n\tds_write_b32 v0, v1\n"
        "\tv_permlane16_swap_b32 v1, v2\n\tv_permlane32_swap_b32 v1, v2\n"
        "\tv_exp_f32_e32 v1, v2\n\tv_ldexp_f32 v1, v1, v3\n"
        "\tv_mad_u64_u32 v[4:5], s[0:1], v1, s2, v[4:5]\n\tv_mad_i64_i32 v[4:5], s[0:1], v1, s2, v[4:5]\n"
        "\ts_ashr_i32 s3, s2, 31\n\tv_ashrrev_i32_e32 v3, 31, v2\n"
        "\tglobal_store_dword v0, v1, s[0:1]\n\tglobal_atomic_pk_add_bf16 v0, v1, s[0:1]\n"
    )
    fp = metrics.fingerprint(_kernel_text(body))
    assert (fp["m0_writes"], fp["v_readfirstlane"], fp["insts_before_first_buffer_load"]) == (3, 2, 5)
    assert (fp["ds_read"], fp["ds_write"], fp["v_permlane"]) == (2, 1, 2)
    assert (fp["v_exp_f32"], fp["v_ldexp_f32"], fp["mad_64"], fp["sign_shifts"]) == (1, 1, 2, 2)
    assert (fp["global_store"], fp["global_atomic"], fp["buffer_store"]) == (1, 1, 0)
    # No MFMA and no loop: the per-128-MFMA ratios are not applicable.
    assert fp["mfma"] == 0 and fp["s_waitcnt_per_128_mfma"] is None and fp["loop_s_waitcnt_per_128_mfma"] is None
    assert fp["kernarg_bytes"] is None and fp["vgpr_unified"] is None


def test_fingerprint_bad_input_is_one_value_error():
    with pytest.raises(ValueError, match="pass kernel=<name>"):
        metrics.fingerprint((DATA / "two_kernels.s").read_text())
    with pytest.raises(ValueError, match="expected the .s text"):
        metrics.fingerprint(42)


# ---------------------------------------------------------------------------------- checkouts


@pytest.fixture()
def tiny_repo(tmp_path):
    git = tmp_path / "repo.git"
    work = tmp_path / "work"
    (work / "kernels" / "gemm").mkdir(parents=True)
    (work / "kernels" / "gemm" / "fp4_gemm_4wave.py").write_text("def compile_fp4_gemm_4w(*, K: int, MN: tuple = None):\n    pass\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    run = lambda *a, cwd=work: subprocess.run(["git", *a], cwd=cwd, check=True, capture_output=True, env=env)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("commit", "-qm", "x")
    run("clone", "-q", "--bare", str(work), str(git), cwd=tmp_path)
    sha = subprocess.run(["git", "--git-dir", str(git), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return git, sha


def test_extract_writes_the_commit_and_keeps_an_existing_folder(tiny_repo, tmp_path):
    git, sha = tiny_repo
    dest = upstream_sources.extract(git, sha[:8], tmp_path / "out" / f"flydsl-{sha[:8]}")
    assert (dest / upstream.FLYDSL_GEMM_FILE).is_file()
    assert upstream_sources.commit_of(git, sha[:8]) == sha
    assert upstream._has_param(dest, "MN") and not upstream._has_param(dest, "mn_aligned")
    (dest / "marker").write_text("kept")
    assert upstream_sources.extract(git, sha, dest) == dest and (dest / "marker").read_text() == "kept"
    digest = upstream.tree_digest(dest, upstream.FLYDSL_GEMM_DEPS)
    (dest / upstream.FLYDSL_GEMM_FILE).write_text("changed\n")
    assert upstream.tree_digest(dest, upstream.FLYDSL_GEMM_DEPS) != digest


def test_extract_bad_git_dir_or_commit_is_one_clear_error(tiny_repo, tmp_path):
    git, _ = tiny_repo
    with pytest.raises(upstream.UpstreamError, match="does not exist"):
        upstream_sources.extract(tmp_path / "nope.git", "abc", tmp_path / "d1")
    with pytest.raises(upstream.UpstreamError, match="has no commit 'deadbeef'"):
        upstream_sources.extract(git, "deadbeef", tmp_path / "d2")
    assert not (tmp_path / "d2").exists()


def test_missing_or_wrong_checkout_is_one_clear_error(tmp_path):
    with pytest.raises(upstream.UpstreamError, match="does not exist"):
        upstream.flydsl_gemm_isa(tmp_path / "missing", 256, 256, 256)
    with pytest.raises(upstream.UpstreamError, match="is not a FlyDSL checkout with kernels/gemm/fp4_gemm_4wave.py"):
        upstream.flydsl_gemm_isa(tmp_path, 256, 256, 256)
    with pytest.raises(upstream.UpstreamError, match="is not a aiter checkout"):
        upstream.aiter_moe_isa(tmp_path, "gemm1")


def test_aiter_bad_stage_or_regime(tmp_path):
    (tmp_path / "aiter/ops/flydsl/kernels").mkdir(parents=True)
    for f in upstream.AITER_MOE_FILES.values():
        (tmp_path / f).write_text("")
    with pytest.raises(upstream.UpstreamError, match="stage must be one of"):
        upstream.aiter_moe_isa(tmp_path, "gemm3")
    with pytest.raises(upstream.UpstreamError, match="regime must be 'decode' or 'prefill'"):
        upstream.aiter_moe_isa(tmp_path, "gemm1", "warmup")


def test_cli_reports_a_wrong_checkout_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(upstream.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "mxfp4_ablation.upstream", "compile", "--flydsl", str(tmp_path),
                           "--commit", "abc", "--out", str(tmp_path / "o")], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "is not a FlyDSL checkout" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_named_args_names_explicit_entries_and_keeps_hidden_ones():
    meta = """
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .offset:         8
        .size:           4
        .value_kind:     by_value
      - .offset:         12
        .size:           4
        .value_kind:     by_value
      - .offset:         16
        .size:           4
        .value_kind:     hidden_block_count_x
    .name:           k
    .symbol:         k.kd
...
\t.end_amdgpu_metadata
"""
    text = _kernel_text("\ts_nop 0\n") + meta
    args = upstream.named_args(text, [("A", "tensor"), ("n", "i32")])
    assert [a["name"] for a in args] == ["A", "A.layout", "n", "hidden_block_count_x"]
    assert args[0] == {"name": "A", "offset": 0, "size": 8, "value_kind": "global_buffer"}
    with pytest.raises(upstream.UpstreamError, match="3 explicit kernargs but the call names 2"):
        upstream.named_args(text, [("A", "i64"), ("n", "i32")])


def test_moe_grid_follows_the_aiter_host_rules():
    p = {"stage": "gemm1", "BM": 16, "tokens": 16, "experts": 385, "topk": 9, "inter": 512, "hidden": 7168}
    # active = min(144, 385) = 144 experts -> (144 + 144*15 + 15) // 16 = 144 blocks x 4 N blocks
    assert upstream._moe_grid(p)[0] == [576, 1, 1]
    assert upstream._moe_grid({**p, "stage": "gemm2", "epilog": "atomic"})[0] == [144 * 28, 1, 1]
    big = {**p, "stage": "gemm2", "BM": 128, "tokens": 4096, "epilog": "nonatomic"}
    assert upstream._moe_grid(big)[0] == [256, 1, 1]  # persistent: NUM_CU workgroups


def test_device_libs_digest_needs_bitcode(tmp_path):
    with pytest.raises(upstream.UpstreamError, match="no device-library bitcode"):
        upstream_sources.device_libs_digest(tmp_path)
    (tmp_path / "ocml.bc").write_bytes(b"BC")
    assert len(upstream_sources.device_libs_digest(tmp_path)) == 64


# ---------------------------------------------------------------------------------- real compiles


def _checkout(var: str, project: str, commit: str) -> Path:
    """``$var``, else ``make upstream``'s checkout of ``commit``; skip (counted) saying how to get one."""
    from conftest import need, upstream_root

    value = os.environ.get(var)
    return need(Path(value) if value else upstream_root() / f"{project}-{commit}", f"a {project} checkout at {commit}")


@pytest.mark.slow
@pytest.mark.upstream
def test_flydsl_gemm_compiles_from_a_checkout():
    root = _checkout("MXFP4_FLYDSL_CHECKOUT", "flydsl", "741f3d6d")
    text = upstream.flydsl_gemm_isa(root, 8192, 8192, 8192)
    fp = metrics.fingerprint(text)
    assert fp["mfma"] > 0 and fp["lds_bytes"] >= 128 * 1024 and fp["kernarg_bytes"] == 84


@pytest.mark.slow
@pytest.mark.upstream
def test_aiter_moe_gemm2_decode_compiles_from_a_checkout():
    root = _checkout("MXFP4_AITER_CHECKOUT", "aiter", "b242ba66a")
    helpers = _checkout("MXFP4_FLYDSL_CHECKOUT", "flydsl", "741f3d6d")
    fp = metrics.fingerprint(upstream.aiter_moe_isa(root, "gemm2", "decode", flydsl_helpers=helpers))
    assert fp["mfma"] == 16 and fp["global_atomic"] > 0 and fp["lds_bytes"] == 16384


@pytest.mark.upstream
def test_the_committed_fingerprints_are_what_the_upstream_build_gives():
    """experiments/reference/fingerprints.csv is regenerated from `make upstream`'s output, bit for bit."""
    from conftest import need, upstream_out

    out = need(upstream_out(), "the compiled upstream kernels")
    import csv

    with open(Path(upstream.__file__).parents[2] / "experiments" / "reference" / "fingerprints.csv") as f:
        committed = [{k: v for k, v in r.items() if k != "command"} for r in csv.DictReader(f)]
    built = [{k: ("" if r[k] is None else str(r[k])) for k in upstream.FINGERPRINT_COLUMNS if k != "command"}
             for r in upstream.fingerprint_rows(out)]
    assert built == committed


def test_fingerprint_rows_and_csv_from_written_isa(tmp_path):
    text = (DATA / "two_kernels.s").read_text()
    (tmp_path / "flydsl" / "abcdef12").mkdir(parents=True)
    s = tmp_path / "flydsl" / "abcdef12" / "M256_N256_K256.s"
    s.write_text(_kernel_text("\tv_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]\n"))
    info = {"source": "flydsl", "commit": "abcdef12" * 5, "file": upstream.FLYDSL_GEMM_FILE, "flydsl_version": "0.5.0",
            "kernel": "k", "shape": {"M": 256, "N": 256, "K": 256}, "command": "cmd"}
    s.with_suffix(".json").write_text(json.dumps(info))
    (tmp_path / "flydsl" / "abcdef12" / "orphan.s").write_text(text)  # no .json beside: ignored
    rows = upstream.fingerprint_rows(tmp_path)
    assert [r["metric"] for r in rows] == list(metrics.FINGERPRINT_KEYS)
    assert rows[0]["shape"] == "M=256 N=256 K=256" and rows[0]["stage"] == "gemm"
    assert {r["metric"]: r["value"] for r in rows}["mfma"] == 1
    out = upstream.write_fingerprints(tmp_path, tmp_path / "fp.csv")
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(upstream.FINGERPRINT_COLUMNS) and len(lines) == 1 + len(metrics.FINGERPRINT_KEYS)
    with pytest.raises(upstream.UpstreamError, match="no compiled upstream kernels"):
        upstream.fingerprint_rows(tmp_path / "empty")


# ---------------------------------------------------------------------------------- make upstream


def test_fetch_gets_pinned_commits_from_a_clone_once_and_says_what_is_missing(tiny_repo, tmp_path):
    git, sha = tiny_repo
    dest = upstream_sources.fetch(str(git), tmp_path / "git" / "flydsl.git", [sha])
    assert upstream_sources.commit_of(dest, sha) == sha
    assert upstream_sources.fetch(str(git), dest, [sha]) == dest  # already there: nothing fetched
    out = upstream_sources.extract(dest, sha, upstream_sources.checkout_dir("flydsl", sha, tmp_path))
    assert out.name == f"flydsl-{sha[:8]}" and (out / upstream.FLYDSL_GEMM_FILE).is_file()
    with pytest.raises(upstream.UpstreamError, match="could not fetch 0123456789ab .*FLYDSL_GIT"):
        upstream_sources.fetch(str(git), dest, ["0123456789abcdef0123456789abcdef01234567"])


def test_device_libs_unpacks_a_deb_once(tmp_path):
    import shutil

    if not shutil.which("dpkg-deb"):
        pytest.skip("no dpkg-deb")
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text("Package: rocm-device-libs\nVersion: 5.2.3-2\nArchitecture: amd64\n"
                                            "Maintainer: t <t@t>\nDescription: t\n")
    bc = pkg / "usr/lib/x86_64-linux-gnu/amdgcn/bitcode"
    bc.mkdir(parents=True)
    (bc / "ocml.bc").write_bytes(b"BC")
    deb = tmp_path / "rocm-device-libs_5.2.3-2_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(deb)], check=True, capture_output=True)
    root = tmp_path / "upstream"
    libs = upstream_sources.device_libs(root, deb)
    assert libs == root / "rocm-device-libs-5.2.3" / "usr/lib/x86_64-linux-gnu/amdgcn/bitcode"
    assert (libs / "ocml.bc").read_bytes() == b"BC"
    assert upstream_sources.device_libs(root) == libs  # found again without the .deb
    with pytest.raises(upstream.UpstreamError, match="does not exist"):
        upstream_sources.device_libs(root, tmp_path / "missing.deb")


def test_cache_key_and_recorded_command_do_not_depend_on_where_the_checkout_is(tmp_path):
    a = {"checkout": "/one/flydsl", "M": 256, "digest": "d", "device_libs": "/x/bitcode", "device_libs_digest": "b"}
    b = {**a, "checkout": "/two/flydsl", "device_libs": "/y/bitcode"}
    assert upstream._key("t", a, "gfx950") == upstream._key("t", b, "gfx950")
    assert upstream._key("t", a, "gfx950") != upstream._key("t", {**a, "digest": "e"}, "gfx950")
    inside = upstream.paths.REPO_ROOT / "upstream" / "flydsl-x"
    cmd = upstream._cli_command(["compile", "--flydsl", str(upstream.paths.REPO_ROOT / "src"), "--out", str(inside)])
    assert cmd == f"PYTHONPATH=src python -m mxfp4_ablation.upstream compile --flydsl src --out {inside}"
    assert upstream.repo_relative(upstream.paths.REPO_ROOT / "src" / "mxfp4_ablation") == "src/mxfp4_ablation"
    assert upstream.repo_relative(tmp_path) == str(tmp_path)


def test_fingerprints_without_a_build_is_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(upstream.__file__).parents[1])}
    proc = subprocess.run([sys.executable, "-m", "mxfp4_ablation.upstream", "fingerprints", "--out", str(tmp_path / "no"),
                           "--csv", str(tmp_path / "fp.csv")], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "make upstream" in proc.stderr
    assert not (tmp_path / "fp.csv").exists()


def test_make_upstream_passes_the_sources_and_the_folder_is_ignored():
    import shutil

    root = Path(upstream.__file__).parents[2]
    if not shutil.which("make") or not (root / ".git").exists():
        pytest.skip("needs make and a git checkout")
    out = subprocess.run(["make", "-s", "-n", "upstream", "SETUP_STAMP=", "FLYDSL_GIT=/m/FlyDSL", "AITER_GIT=/m/aiter",
                          "ROCM_DEVICE_LIBS_DEB=/d/libs.deb"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cmd = " ".join(out.stdout.replace("\\\n", " ").split())
    assert "-m mxfp4_ablation.upstream build --root upstream" in cmd
    assert '--flydsl-git "/m/FlyDSL" --aiter-git "/m/aiter"' in cmd and '--device-libs-deb "/d/libs.deb"' in cmd
    ignored = subprocess.run(["git", "check-ignore", "-q", "upstream/out/flydsl/x.s"], cwd=root)
    assert ignored.returncode == 0
