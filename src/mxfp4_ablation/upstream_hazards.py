"""Upstream hazards: FlyDSL's own ``fp4_gemm_4wave`` in the emulator, under issue and late load delivery.

A FlyDSL maintainer's question is "is my kernel's wait accounting right?"; an emulator that lands every
load at issue cannot say, because a missing ``s_waitcnt`` then changes nothing.  This module runs the
kernel compiled from a checkout the caller gives (never vendored: :func:`mxfp4_ablation.upstream.flydsl_gemm_isa`)
at one 256x256 tile, with ``delivery="issue"`` (data at issue) and ``delivery="late"`` (data only when a wait
or the end of the wave forces it -- what the ISA guarantees and no more), and reports:

* the lines the s_waitcnt / LDS-ordering checker flags (reader line, the memory op it was not waited for);
* what late delivery does to the output (cosine, mismatching elements, max |error| against the reference);
* the smallest wait change that makes the kernel exact under late delivery and hazard-free: for each
  flagged read, the governing ``s_waitcnt`` (the last one before it in the text; the kernel is straight-line
  at a fixed K) is tightened to the largest count that clears it (binary search, one emulator run per try);
  each change is also tried alone, to tell the change that fixes the numbers from one that only clears a
  report (e.g. a DMA that rewrites bytes with the values they already hold);
* the s_nop wait-state reports (kind ``wait_states``), grouped, which late delivery cannot show.

Inputs: FlyDSL's test layout (A row-major fp4, B ``shuffle_weight_w4(16)``, both scales ``shuffle_scale_w4``),
which is our GEMM's own layout (:func:`mxfp4_ablation.kernels.gemm.make_inputs`); the reference is the dense
product of the unshuffled operands rounded to bf16.  Kernel arguments: each tensor flattened with its element
count (the ``layout`` i32), then M and N, as FlyDSL's ``tests/kernels/test_fp4_gemm_4wave.py`` calls it.

The committed evidence: ``python -m mxfp4_ablation.upstream_hazards --write
experiments/reference/upstream_hazards.json`` runs :func:`report` on ``make upstream``'s
``upstream/flydsl-741f3d6d`` and writes :func:`reference_record` (numbers and ``s_waitcnt`` text only,
with the command); ``notebooks/upstream_hazards.py`` shows it, rerun or committed.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: Hazard kinds about s_waitcnt / LDS ordering (the ones a wait change can fix).
ORDERING = ("read_pending", "overwrite_pending", "lds_read_pending", "lds_cross_wave", "lds_race",
            "lds_dma_waw", "lds_read_overwritten")
_WAIT_RE = re.compile(r"^(\s*)s_waitcnt\b(.*)$")


def compile_isa(checkout: str | Path, M: int = 256, N: int = 256, K: int = 2048) -> str:
    """The kernel's ISA text, compiled offline for gfx950 from ``checkout`` (cached)."""
    from . import upstream

    return upstream.flydsl_gemm_isa(checkout, M, N, K)


def make_inputs(M: int, N: int, K: int, seed: int = 0) -> dict:
    from .kernels import gemm

    return gemm.make_inputs(M, N, K, seed=seed)


def _args(inputs: dict, C) -> list:
    out: list = []
    for t in (inputs["A"], inputs["B"], C, inputs["A_scale"], inputs["B_scale"]):
        out += [t.reshape(-1), int(t.numel())]
    return out + [int(inputs["M"]), int(inputs["N"])]


def run(isa: str, inputs: dict, *, delivery: str = "issue", wave_order: str = "forward", seed: int = 0) -> dict:
    """One emulator launch (one 256x256 workgroup per tile): output statistics and the hazard reports."""
    import torch

    import gfx950emu
    from .reference import gemm_reference

    M, N = int(inputs["M"]), int(inputs["N"])
    if M % 256 or N % 256:
        raise ValueError(f"FlyDSL's fp4_gemm_4wave needs M and N multiples of 256, got {M}x{N}")
    prog = gfx950emu.load(isa)
    C = torch.zeros(M, N, dtype=torch.bfloat16)
    start = time.perf_counter()
    res = gfx950emu.launch(prog, ((M // 256) * (N // 256), 1, 1), (256, 1, 1), _args(inputs, C), hazards="report",
                           delivery=delivery, wave_order=wave_order, seed=seed)
    seconds = time.perf_counter() - start
    ref = gemm_reference(inputs["A_q"], inputs["A_s"], inputs["B_q"], inputs["B_s"])
    a, b = C.double().reshape(-1), ref.double().reshape(-1)
    cos = float(a @ b / (a.norm() * b.norm())) if a.norm() and b.norm() else 0.0
    bad = C != ref
    rows = sorted({int(r) for r in bad.nonzero()[:, 0].tolist()}) if bad.any() else []
    return {
        "delivery": delivery, "wave_order": wave_order, "seed": seed,
        "cosine": cos, "mismatches": int(bad.sum()), "elements": int(bad.numel()),
        "max_abs_err": float((a - b).abs().max()), "bad_rows": len(rows), "bad_cols": int(bad.any(0).sum()),
        "exact": not bool(bad.any()), "seconds": round(seconds, 3),
        "hazards": res.hazards,
        "ordering_hazards": sum(h.kind in ORDERING for h in res.hazards),
        "wait_state_hazards": sum(h.kind == "wait_states" for h in res.hazards),
    }


def flagged(reports: list, isa: str) -> list[dict]:
    """Ordering hazards grouped by (kind, reader line, source line), with the two lines' text."""
    lines = isa.splitlines()
    text = lambda n: lines[n - 1].strip() if n and 0 < n <= len(lines) else ""   # noqa: E731
    groups: dict = {}
    for h in reports:
        if h.kind not in ORDERING:
            continue
        g = groups.setdefault((h.kind, h.line, h.source_line), {"waves": set(), "reports": 0})
        g["waves"].add(h.wave)
        g["reports"] += 1
    return [{"kind": k, "line": line, "instruction": text(line), "source_line": src, "source": text(src),
             "waves": ",".join(map(str, sorted(g["waves"]))), "reports": g["reports"]}
            for (k, line, src), g in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][2] or 0, kv[0][0]))]


def wait_state_summary(reports: list) -> list[dict]:
    """The s_nop wait-state reports, grouped by what they say (registers and lines folded)."""
    c: Counter = Counter()
    first: dict = {}
    for h in reports:
        if h.kind != "wait_states":
            continue
        key = re.sub(r"\b[av]\d+\b", "<reg>", h.text.split(" with ")[0])
        c[key] += 1
        first.setdefault(key, (h.line, h.source_line, h.text))
    return [{"what": k, "reports": n, "first_line": first[k][0], "first_source_line": first[k][1],
             "example": first[k][2]} for k, n in c.most_common()]


def _wait_counts(line: str) -> dict:
    from gfx950emu.kernel import waitcnt_counts

    mods = {k: int(v) for k, v in re.findall(r"(vmcnt|lgkmcnt|expcnt)\((\d+)\)", line)}
    vm, lgkm = waitcnt_counts(mods)
    return {"vmcnt": vm, "lgkmcnt": lgkm}


def governing_wait(isa: str, line: int) -> int | None:
    """Line number of the last ``s_waitcnt`` before ``line`` (None if there is none)."""
    lines = isa.splitlines()
    for n in range(line - 1, 0, -1):
        if _WAIT_RE.match(lines[n - 1]):
            return n
    return None


def patch_wait(isa: str, wait_line: int, counter: str, value: int) -> str:
    """The ISA text with ``counter`` of the s_waitcnt at ``wait_line`` set to ``value`` (other lines kept)."""
    lines = isa.splitlines()
    old = lines[wait_line - 1]
    if not _WAIT_RE.match(old):
        raise ValueError(f"line {wait_line} is not an s_waitcnt: {old.strip()!r}")
    if f"{counter}(" in old:
        new = re.sub(rf"{counter}\(\d+\)", f"{counter}({value})", old)
    else:
        new = old.rstrip() + f" {counter}({value})"
    lines[wait_line - 1] = new
    return "\n".join(lines) + ("\n" if isa.endswith("\n") else "")


def _counter_of(h, isa: str) -> str:
    """The counter that covers the memory op a report names (its source line)."""
    src = isa.splitlines()[h.source_line - 1].strip() if h.source_line else ""
    return "vmcnt" if src.startswith(("buffer_", "global_", "flat_", "scratch_")) else "lgkmcnt"


def smallest_wait_fix(isa: str, inputs: dict, *, max_rounds: int = 12) -> dict:
    """Tighten waits until no ordering hazard is left: each round takes the earliest flagged reader line,
    finds its governing ``s_waitcnt`` and binary-searches the largest count that clears that line.
    Returns the patched text, the changes (wait line, counter, old -> new, the reader it fixes) and the
    number of emulator runs it took."""
    runs = 0
    changes = []

    def ordering(text):
        nonlocal runs
        runs += 1
        r = run(text, inputs)
        return [h for h in r["hazards"] if h.kind in ORDERING]

    cur = isa
    hs = ordering(cur)
    for _ in range(max_rounds):
        if not hs:
            break
        first = min(hs, key=lambda h: h.line)
        target = first.line
        counter = _counter_of(first, cur)
        w = governing_wait(cur, target)
        if w is None:
            raise ValueError(f"no s_waitcnt before line {target}; a wait has to be inserted there")
        old = _wait_counts(cur.splitlines()[w - 1])[counter]
        lo, hi = 0, old - 1            # the answer is the largest value in [lo, hi] that clears `target`
        best, best_hs = None, None
        while lo <= hi:
            mid = (lo + hi) // 2
            trial = patch_wait(cur, w, counter, mid)
            t_hs = ordering(trial)
            if any(h.line == target for h in t_hs):
                hi = mid - 1
            else:
                best, best_hs = mid, t_hs
                lo = mid + 1
        if best is None:
            raise ValueError(f"tightening line {w} to {counter}(0) does not clear line {target}")
        changes.append({"wait_line": w, "counter": counter, "old": old, "new": best, "fixes_line": target,
                        "source_line": first.source_line,
                        "before": cur.splitlines()[w - 1].strip(),
                        "after": patch_wait(cur, w, counter, best).splitlines()[w - 1].strip()})
        cur = patch_wait(cur, w, counter, best)
        hs = best_hs
    return {"isa": cur, "changes": changes, "remaining": len(hs), "runs": runs}


def report(checkout: str | Path, M: int = 256, N: int = 256, K: int = 2048, seed: int = 0,
           commit: str | None = None) -> dict:
    """Everything the notebook shows, JSON-ready but for the patched ISA text (key ``patched_isa``)."""
    from . import upstream

    root = Path(checkout)
    isa = compile_isa(root, M, N, K)
    inputs = make_inputs(M, N, K, seed=seed)
    issue = run(isa, inputs, delivery="issue")
    late = run(isa, inputs, delivery="late")
    fix = smallest_wait_fix(isa, inputs)
    lines = isa.splitlines()
    barriers = [n for n, t in enumerate(lines, 1) if t.strip() == "s_barrier"]
    for ch in fix["changes"]:          # what each change does on its own under late delivery
        alone = run(patch_wait(isa, ch["wait_line"], ch["counter"], ch["new"]), inputs, delivery="late")
        ch["alone_late_exact"] = alone["exact"]
        ch["alone_late_mismatches"] = alone["mismatches"]
        ch["alone_ordering_hazards"] = alone["ordering_hazards"]
        nxt = [b for b in barriers if b > ch["wait_line"]]
        ch["barrier"] = f"{barriers.index(nxt[0]) + 1} of {len(barriers)}" if nxt else None
    fixed_issue = run(fix["isa"], inputs, delivery="issue")
    fixed_late = run(fix["isa"], inputs, delivery="late")
    fixed_random = run(fix["isa"], inputs, delivery="random", wave_order="random", seed=7)
    strip = lambda r: {k: v for k, v in r.items() if k != "hazards"}   # noqa: E731
    return {
        "label": "emulated (gfx950emu, functional; no timing)",
        "kernel": upstream.FLYDSL_GEMM_FILE, "checkout": str(root), "commit": commit,
        "tree_digest": upstream.tree_digest(root, upstream.FLYDSL_GEMM_DEPS),
        "shape": {"M": M, "N": N, "K": K}, "seed": seed,
        "isa_lines": len(isa.splitlines()),
        "runs": {"issue": strip(issue), "late": strip(late), "fixed_issue": strip(fixed_issue),
                 "fixed_late": strip(fixed_late), "fixed_random": strip(fixed_random)},
        "flagged": flagged(issue["hazards"], isa),
        "wait_states": wait_state_summary(issue["hazards"]),
        "fix": {k: v for k, v in fix.items() if k != "isa"},
        "patched_isa": fix["isa"],
    }


# --------------------------------------------------------------------------------------------
# The committed evidence: experiments/reference/upstream_hazards.json (numbers, no upstream code)
# --------------------------------------------------------------------------------------------

REFERENCE = "upstream_hazards.json"
RUN_KEYS = ("cosine", "mismatches", "elements", "max_abs_err", "bad_rows", "bad_cols", "exact", "ordering_hazards",
            "wait_state_hazards")
CHANGE_KEYS = ("wait_line", "counter", "old", "new", "fixes_line", "before", "after", "alone_late_exact",
               "alone_late_mismatches", "alone_ordering_hazards", "barrier")


def command(checkout: str | Path, M: int = 256, N: int = 256, K: int = 2048, seed: int = 0) -> str:
    """The command that regenerates the committed record, as run from the repository root."""
    from .upstream import repo_relative

    return (f"PYTHONPATH=src python -m mxfp4_ablation.upstream_hazards --checkout {repo_relative(checkout)} "
            f"--shape {M},{N},{K} --seed {seed} --write experiments/reference/{REFERENCE}")


def reference_record(result: dict, cmd: str) -> dict:
    """What is committed of a :func:`report`: the numbers, the wait lines' ``s_waitcnt`` text before
    and after, the flagged readers counted by kind -- no upstream instruction text, no ISA."""
    import subprocess

    from . import paths

    sha = subprocess.run(["git", "-C", str(paths.REPO_ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                         capture_output=True, text=True).stdout.strip() or None
    kinds = Counter(f["kind"] for f in result["flagged"])
    return {
        "label": result["label"], "kernel": result["kernel"], "commit": result["commit"],
        "tree_digest": result["tree_digest"], "shape": result["shape"], "seed": result["seed"],
        "isa_lines": result["isa_lines"], "this_repository": sha,
        "runs": {name: {k: r[k] for k in RUN_KEYS} for name, r in result["runs"].items()},
        "flagged_readers": len(result["flagged"]), "flagged_by_kind": dict(sorted(kinds.items())),
        "fix": {"changes": [{k: c.get(k) for k in CHANGE_KEYS} for c in result["fix"]["changes"]],
                "remaining": result["fix"]["remaining"], "runs": result["fix"]["runs"]},
        "wait_states": [{"what": w["what"], "reports": w["reports"]} for w in result["wait_states"]],
        "command": cmd,
    }


def load_reference(path: str | Path | None = None) -> dict:
    """The committed record (``experiments/reference/upstream_hazards.json``)."""
    import json

    from . import paths

    return json.loads(Path(path or paths.reference_dir() / REFERENCE).read_text())


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    from . import upstream

    ap = argparse.ArgumentParser(prog="python -m mxfp4_ablation.upstream_hazards", description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=upstream.checkout_dir("flydsl", upstream.FLYDSL_COMMITS[1]),
                    help="FlyDSL checkout at 741f3d6d (default: make upstream's upstream/flydsl-741f3d6d)")
    ap.add_argument("--commit", default=upstream.FLYDSL_COMMITS[1][:8], help="its commit id (a label)")
    ap.add_argument("--shape", default="256,256,2048", help="M,N,K (M, N multiples of 256)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", type=Path, help="write the committed record (JSON) here")
    ns = ap.parse_args(argv)
    try:
        M, N, K = (int(v) for v in ns.shape.split(","))
    except ValueError:
        print(f"error: --shape {ns.shape!r} must be M,N,K", file=sys.stderr)
        return 2
    if not (ns.checkout / upstream.FLYDSL_GEMM_FILE).is_file():
        print(f"error: no FlyDSL checkout at {ns.checkout}: run `make upstream` (or give --checkout)", file=sys.stderr)
        return 2
    try:
        result = report(ns.checkout, M, N, K, seed=ns.seed, commit=ns.commit)
    except (upstream.UpstreamError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    record = reference_record(result, command(ns.checkout, M, N, K, ns.seed))
    text = json.dumps(record, indent=1, default=str) + "\n"
    if ns.write:
        tmp = ns.write.with_name(f".{ns.write.name}.tmp")
        tmp.write_text(text)
        tmp.replace(ns.write)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
