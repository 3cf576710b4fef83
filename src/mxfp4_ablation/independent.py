"""The timing model's independent check: FlyDSL's own MI355X figures for the steps of PR #756's branch.

While FlyDSL's ``fp4_gemm_4wave`` was written (the branch of PR #756, June-July 2026, and PR #990's
first commit), most commit messages gave the kernel's TFLOPS on an MI355X at M = N = K = 8192. Those
figures (and, from late June, at 16384^3 too) are the model's *independent check* (DEVELOPERS.md): never
fitted, never used to tune a parameter or to choose a mechanism -- only reported. The steps are declared in
``experiments/reference/independent_steps.csv`` (shape, before / after commit, the published TFLOPS as
the messages give them, which message, and a flag where a step is not one change measured one way).

For each commit this compiles the kernel offline with the pinned flydsl, as ``make upstream`` compiles
daee90e4 and 741f3d6d (:mod:`mxfp4_ablation.upstream`; a commit older than the move of the file to
``kernels/gemm/`` on 2026-07-07 has it copied there, code unchanged, and one older than FlyDSL PR #853
takes ``buffer_ops`` from FlyDSL daee90e4), models it at the step's shape
(:func:`mxfp4_ablation.modelled.flydsl_upstream`, one sampled workgroup) and sets each step's modelled
speed-up beside the published one::

    PYTHONPATH=src python -m mxfp4_ablation.independent --flydsl-git <FlyDSL clone, mirror or URL> [--write]

``--write`` stores ``experiments/reference/independent_check.csv`` (every number labelled, with the model
fingerprint and the command). Checkouts and compiled kernels go to ``upstream/indep/`` (ignored by git;
apart from ``upstream/out``, whose kernels ``upstream fingerprints`` reduces).
Caveat the table carries: the June commits are compiled with flydsl 0.5.0 and a later ``buffer_ops``,
not the FlyDSL their authors ran, so a step whose ISA differs from the measured one is a compile
artefact, not a model error (b2c0e12f is left out: its message gives times, not TFLOPS, and its 0.5.0
compile spills 196 bytes of scratch, which the message does not mention).
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path
from typing import Sequence

from . import paths
from .errors import UsageError
from .upstream_sources import FLYDSL_COMMITS

STEPS_CSV = "independent_steps.csv"
CHECK_CSV = "independent_check.csv"
STEP_COLUMNS = ["step", "shape", "before", "after", "published_before_tflops", "published_after_tflops", "source", "flag",
                "flag_note"]
CHECK_COLUMNS = ["step", "shape", "before", "after", "flag", "published_before_tflops", "published_after_tflops",
                 "published_speedup_pct", "modelled_before_tflops", "modelled_after_tflops", "modelled_speedup_pct",
                 "error_pp", "label", "model_version", "model_fingerprint", "sample", "command"]
#: the FlyDSL checkout whose ``kernels/common/buffer_ops.py`` stands in for ``flydsl.expr.buffer_ops`` (the
#: study's before-PR-#990 commit, which ``make upstream`` extracts anyway)
HELPERS = FLYDSL_COMMITS[0]
OLD_FILE = "kernels/fp4_gemm_4wave.py"


def command_text(flydsl_git: str = "<FlyDSL git>") -> str:
    return f"PYTHONPATH=src python -m mxfp4_ablation.independent --flydsl-git {flydsl_git} --write"


def read_steps(path: str | Path | None = None) -> list[dict]:
    """The declared steps (checked: columns, 40-hex commits, positive figures, a source per row)."""
    from .calibration import read_reference_csv

    rows = read_reference_csv(path, STEPS_CSV, STEP_COLUMNS, "no declared steps")
    path = Path(path) if path is not None else paths.reference_dir() / STEPS_CSV
    out = []
    for r in rows:
        for k in ("before", "after"):
            if len(r[k]) != 40 or any(ch not in "0123456789abcdef" for ch in r[k]):
                raise UsageError(f"{path.name}: step {r['step']}: {k} {r[k]!r} is not a 40-hex commit id")
        try:
            pb, pa = float(r["published_before_tflops"]), float(r["published_after_tflops"])
            shape = tuple(int(x) for x in r["shape"].split("x"))
        except ValueError:
            raise UsageError(f"{path.name}: step {r['step']}: published figures must be numbers and the shape "
                             f"MxNxK") from None
        if len(shape) != 3:
            raise UsageError(f"{path.name}: step {r['step']}: shape {r['shape']!r} is not MxNxK")
        if pb <= 0 or pa <= 0 or not r["source"].strip():
            raise UsageError(f"{path.name}: step {r['step']}: needs positive figures and a source")
        out.append({**r, "published_before_tflops": pb, "published_after_tflops": pa, "shape": shape})
    return out


def step_rows(steps: list[dict], modelled: dict[tuple, float], *, fingerprint: str, version: str,
              command: str, sample: int = 1) -> list[dict]:
    """One row per step: published and modelled speed-up (after / before - 1, %) and their difference (pp);
    ``modelled``: {(commit, shape): modelled TFLOPS}. A step with a kernel that has no modelled figure is
    left out."""
    rows = []
    for s in steps:
        b, a = modelled.get((s["before"], s["shape"])), modelled.get((s["after"], s["shape"]))
        if b is None or a is None:
            continue
        pub = 100 * (s["published_after_tflops"] / s["published_before_tflops"] - 1)
        mod = 100 * (a / b - 1)
        rows.append({"step": int(s["step"]), "shape": "x".join(map(str, s["shape"])), "before": s["before"][:8], "after": s["after"][:8], "flag": s["flag"],
                     "published_before_tflops": s["published_before_tflops"],
                     "published_after_tflops": s["published_after_tflops"], "published_speedup_pct": round(pub, 3),
                     "modelled_before_tflops": round(b, 2), "modelled_after_tflops": round(a, 2),
                     "modelled_speedup_pct": round(mod, 3), "error_pp": round(mod - pub, 3), "label": "modelled",
                     "model_version": version, "model_fingerprint": fingerprint, "sample": sample,
                     "command": command})
    return rows


def summary(rows: list[dict], shape: str | None = None) -> dict:
    """Over the unflagged steps (of one ``shape``, "MxNxK", or all): n, mean / median / sd of the error (pp), mean |error|, the steps whose
    published speed-up is not 0 and how many of them the model gives the same sign."""
    rows = [r for r in rows if shape is None or r["shape"] == shape]
    errs = [float(r["error_pp"]) for r in rows if not r["flag"]]
    if not errs:
        return {"n": 0}
    n = len(errs)
    mean = sum(errs) / n
    sd = math.sqrt(sum((e - mean) ** 2 for e in errs) / (n - 1)) if n > 1 else float("nan")
    srt = sorted(errs)
    med = srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
    moved = [r for r in rows if not r["flag"] and float(r["published_speedup_pct"]) != 0]
    same = sum((float(r["modelled_speedup_pct"]) > 0) == (float(r["published_speedup_pct"]) > 0) for r in moved)
    worst = max((r for r in rows if not r["flag"]), key=lambda r: abs(float(r["error_pp"])))
    return {"n": n, "mean_pp": mean, "median_pp": med, "sd_pp": sd, "mean_abs_pp": sum(map(abs, errs)) / n,
            "signed": len(moved), "same_sign": same, "worst_step": int(worst["step"]),
            "worst_pp": float(worst["error_pp"])}


def read_check(path: str | Path | None = None) -> list[dict]:
    """The committed check (``independent_check.csv``)."""
    from .calibration import read_reference_csv

    return read_reference_csv(path, CHECK_CSV, CHECK_COLUMNS, f"no independent check (run `{command_text()}`)")


def table(path: str | Path | None = None):
    """The committed check as a DataFrame (for notebooks/timing_model.py)."""
    import pandas as pd

    t = pd.DataFrame(read_check(path))
    for c in ("published_speedup_pct", "modelled_speedup_pct", "error_pp"):
        t[c] = t[c].astype(float)
    return t[["step", "shape", "before", "after", "flag", "published_before_tflops", "published_after_tflops",
              "published_speedup_pct", "modelled_speedup_pct", "error_pp"]]


def prepare(git_dir: Path, commit: str, root: Path) -> tuple[Path, str]:
    """Extract ``commit`` into ``<root>/indep/flydsl-<commit8>`` and give its kernel the path the compile
    expects (a copy of ``kernels/fp4_gemm_4wave.py`` at ``kernels/gemm/``, code unchanged, for commits
    before 2026-07-07). Returns (checkout, note)."""
    from .upstream import FLYDSL_GEMM_FILE
    from .upstream_sources import extract

    ck = extract(git_dir, commit, root / "indep" / f"flydsl-{commit[:8]}")
    new, old = ck / FLYDSL_GEMM_FILE, ck / OLD_FILE
    if new.is_file():
        return ck, ""
    if not old.is_file():
        raise UsageError(f"FlyDSL {commit[:8]} has neither {FLYDSL_GEMM_FILE} nor {OLD_FILE}")
    new.parent.mkdir(exist_ok=True)
    if (ck / "kernels" / "__init__.py").is_file() and not (new.parent / "__init__.py").exists():
        (new.parent / "__init__.py").write_text("")
    shutil.copy2(old, new)
    return ck, f"{OLD_FILE} copied to {FLYDSL_GEMM_FILE} (code unchanged)"


def run(flydsl_git: str, *, root: Path | None = None, out: Path | None = None, write: bool = False,
        steps_path=None, log=print) -> dict:
    """Fetch, compile and model every declared commit, then the step table (see the module doc)."""
    from gfx950emu.timing import model_version

    from . import modelled, upstream
    from .upstream_sources import checkout_dir, extract, fetch, upstream_root

    steps = read_steps(steps_path)
    root = Path(root) if root is not None else upstream_root()
    out = Path(out) if out is not None else root / "indep" / "out"   # apart from `make upstream`'s fingerprinted out
    commits = list(dict.fromkeys(c for s in steps for c in (s["before"], s["after"])))
    git_dir = fetch(flydsl_git, root / "git" / "flydsl.git", commits + [HELPERS])
    helpers = extract(git_dir, HELPERS, checkout_dir("flydsl", HELPERS, root))
    cmd = command_text()   # committed data names no machine's paths
    tflops, failed = {}, {}
    for c in commits:
        ck, note = prepare(git_dir, c, root)
        shapes = list(dict.fromkeys(s["shape"] for s in steps if c in (s["before"], s["after"])))
        todo = [sh for sh in shapes if not (out / "flydsl" / c[:8] / "M{}_N{}_K{}.s".format(*sh)).is_file()]
        if todo:
            upstream.compile_flydsl_gemms(ck, c, out, tuple(todo), cmd, flydsl_helpers=helpers, note=note,
                                          keep_going=True)
        for sh in shapes:
            s_file = out / "flydsl" / c[:8] / "M{}_N{}_K{}.s".format(*sh)
            if not s_file.is_file():
                failed[(c, sh)] = (s_file.with_suffix(".error.txt").read_text().strip().splitlines() or ["?"])[-1][:200]
                log(f"independent: {c[:8]} at {sh} did not compile: {failed[(c, sh)]}")
                continue
            tflops[(c, sh)] = float(modelled.flydsl_upstream(out, c[:8], *sh, sample=1)["kernel"]["tflops"])
            log(f"independent: {c[:8]} at {'x'.join(map(str, sh))}: {tflops[(c, sh)]:.1f} TFLOPS (modelled)")
    rows = step_rows(steps, tflops, fingerprint=modelled.model_fingerprint(), version=model_version(), command=cmd)
    for r in rows:
        flag = f" ({r['flag']})" if r["flag"] else ""
        log(f"  step {r['step']:2d} {r['shape']} {r['before']} -> {r['after']}{flag}: "
            f"published {r['published_speedup_pct']:+7.2f} %  modelled {r['modelled_speedup_pct']:+7.2f} %  "
            f"error {r['error_pp']:+6.2f} pp")
    for sh in [None] + list(dict.fromkeys(r["shape"] for r in rows)):
        s = summary(rows, sh)
        if not s["n"]:
            continue
        log(f"unflagged steps ({sh or 'every shape'}): n={s['n']}, error mean {s['mean_pp']:+.2f} pp, median "
            f"{s['median_pp']:+.2f} pp, sd {s['sd_pp']:.2f} pp, mean |error| {s['mean_abs_pp']:.2f} pp; same sign "
            f"{s['same_sign']} of {s['signed']}; largest: step {s['worst_step']} ({s['worst_pp']:+.2f} pp)")
    s = summary(rows)
    if write:
        from .calibration import write_csv

        dest = paths.reference_dir() / CHECK_CSV
        write_csv(rows, dest, CHECK_COLUMNS)
        log(f"wrote {upstream.repo_relative(dest)}")
    return {"rows": rows, "summary": s, "failed": failed}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.independent", description=__doc__.splitlines()[0])
    ap.add_argument("--flydsl-git", required=True, help="FlyDSL to fetch the declared commits from: URL, clone or mirror")
    ap.add_argument("--root", type=Path, default=None, help="git dirs and checkouts (default: upstream/, ignored)")
    ap.add_argument("--out", type=Path, default=None, help="compiled kernels (default: <root>/indep/out)")
    ap.add_argument("--write", action="store_true", help=f"write experiments/reference/{CHECK_CSV}")
    ns = ap.parse_args(argv)
    from .upstream_sources import UpstreamError

    try:
        run(ns.flydsl_git, root=ns.root, out=ns.out, write=ns.write)
    except (UsageError, UpstreamError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
