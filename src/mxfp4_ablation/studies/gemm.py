"""The dense MXFP4 GEMM study: the ladder ``gemm-v0`` .. ``gemm-v7``, its leave-one-out set, and the
evidence each variant carries.

Used by ``notebooks/gemm/NN_<switch>.py`` (one per ladder step, all calling :func:`step_report`) and by
``notebooks/summary.py`` (:func:`summary_report`). Everything reusable lives here so the notebooks only
hold their parameters, a title, and calls:

* **Correctness** -- :func:`verify_table` runs :func:`mxfp4_ablation.runner.verify` per shape and seed
  (the emulator off-device, the GPU on an MI355X).
* **Static** -- :func:`study_metrics` extends :func:`mxfp4_ablation.isa.metrics` with the few counts
  the switches' docstrings name (hot-loop m0 writes, scale loads, 2-byte stores ...);
  :func:`ladder_metrics` compiles every variant offline and returns them in long format;
  :data:`EXPECTATIONS` says which metric each switch should move and which way, and
  :func:`expectation_table` checks it on data, step against predecessor and ``gemm-v7`` against
  each ``gemm-v7-no-<switch>``.
* **Speed** -- on a gfx950 GPU, :func:`measure_pairs` times each variant against its predecessor with
  :mod:`mxfp4_ablation.bench` (paired A/B, bootstrap CIs). Anywhere else the only TFLOPS shown are
  FlyDSL PR #990's own, loaded by :func:`published` from ``experiments/reference/gemm_published.csv``
  and labelled *published*.

Figures are registered with :func:`mxfp4_ablation.figures.figure` and draw from a run folder's
tables alone. ``python -m mxfp4_ablation.studies.gemm readme-table`` prints the README's ladder table
from the latest summary run (see :func:`readme_table`).
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from .. import family, isa, metrics, paths, plots, provenance, results, toolchain, variants
from ..figures import figure

FAMILY = "gemm"
KERNEL_MODULE = variants.KERNEL_MODULES[FAMILY]
#: File name of the published figures under ``experiments/reference/``.
PUBLISHED_CSV = "gemm_published.csv"
PUBLISHED_STAGES = ("before_990", "after_990", "aiter_asm")
PUBLISHED_LABELS = {"before_990": "before #990", "after_990": "after #990", "aiter_asm": "aiter asm"}
PUBLISHED_COLUMNS = ("kernel", "M", "N", "K", "stage", "tflops", "source", "note")

#: The shape the ISA is read at: the PR's first benchmark shape. With a runtime K loop in every
#: variant (K/256 = 32 steps) and M, N that static_prologue can fold (1024 tiles, a multiple of 8).
ISA_SHAPE = (8192, 8192, 8192)
#: Emulator shapes: one workgroup, and 2x2 workgroups (multi-tile). K = 2048 (8 K steps) is the
#: smallest K at which every variant keeps a runtime K loop (two trips; LLVM folds a one-trip loop away,
#: as at K = 1536), so the emulator runs the loop body, the code that matters; the kernel itself
#: accepts any multiple of 256.
EMULATED_SHAPES = ((256, 256, 2048), (512, 512, 2048))
#: On an MI355X: the PR's benchmark shapes (M = N, K).
DEVICE_SHAPES = ((8192, 8192, 8192), (8192, 8192, 16384), (16384, 16384, 8192), (16384, 16384, 16384))
#: MFMAs per wave per K step (4 blocks x 16 accumulators x 2 MFMAs of 128 K each).
MFMA_PER_K_STEP = 128
#: Run name of ``notebooks/summary.py`` (its tables feed the summary figures and the README table).
SUMMARY_RUN = "summary"

#: What each switch should do to the ISA, as ``(metric, "down" | "up")``; taken from the switch
#: docstrings in ``kernels/gemm.py`` (the seed's claims). Metric names are :func:`study_metrics` keys.
EXPECTATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    s.name: tuple((e.metric, e.direction) for e in s.expects) for s in family.get(FAMILY).switches.values()}

#: Metrics the ladder figure and README table show (in this order), with short labels.
KEY_METRICS = (
    ("vgpr_unified", "unified VGPRs"),
    ("v_accvgpr_write", "v_accvgpr_write"),
    ("mfma_operand_reuse", "MFMA operand reuse (loop)"),
    ("loop_s_mov_b32_m0", "loop s_mov_b32 m0"),
    ("loop_buffer_load_dword", "loop buffer_load_dword"),
    ("loop_s_waitcnt_per_4k", "loop s_waitcnt / 4 K-steps"),
    ("buffer_store_16B", "16-byte stores"),
    ("insts_before_first_buffer_load", "insts before 1st buffer_load"),
)


class StudyError(ValueError):
    """Bad input to the GEMM study; the message is meant for the user."""


# ============================================================================ variants


def _kernel_module():
    return importlib.import_module(KERNEL_MODULE)


def gemm_variants() -> dict[str, variants.Variant]:
    """The GEMM family's variants (ladder first, then leave-one-out), by name."""
    out = {n: v for n, v in variants.all_variants().items() if v.family == FAMILY}
    if not out:
        raise StudyError(f"no GEMM variants registered ({KERNEL_MODULE} has no LADDER)")
    return out


def ladder_names() -> list[str]:
    return [n for n, v in gemm_variants().items() if v.kind == "ladder"]


def leave_one_out_names() -> list[str]:
    return [n for n, v in gemm_variants().items() if v.kind == "leave-one-out"]


def _variant(name: str) -> variants.Variant:
    known = gemm_variants()
    if name not in known:
        raise StudyError(f"unknown GEMM variant {name!r} (known: {', '.join(known)})")
    return known[name]


def step_switch(name: str) -> str | None:
    """The switch a variant adds to its predecessor (ladder) or drops from it (leave-one-out)."""
    v = _variant(name)
    if v.predecessor is None:
        return None
    other = _variant(v.predecessor).switches
    changed = sorted(v.switches ^ other)
    if len(changed) != 1:
        raise StudyError(f"{name} differs from {v.predecessor} in {len(changed)} switches, not one")
    return changed[0]


def step_index(name: str) -> int:
    """Position of a ladder variant in the ladder (gemm-v0 is 0)."""
    ladder = ladder_names()
    if name not in ladder:
        raise StudyError(f"{name!r} is not a GEMM ladder step (ladder: {', '.join(ladder)})")
    return ladder.index(name)


def step_slug(name: str) -> str:
    """``NN_<switch>`` of a ladder step (``00_baseline`` for gemm-v0): its notebook and figure name."""
    return f"{step_index(name):02d}_{step_switch(name) or 'baseline'}"


def step_run_name(name: str) -> str:
    """The run name :mod:`mxfp4_ablation.notebooks` gives the step's notebook."""
    return f"{FAMILY}--{step_slug(name)}"


def switch_doc(switch: str) -> str:
    """The switch's docstring in the kernel module: the seed's claim, mechanism and metric."""
    docs = getattr(_kernel_module(), "SWITCHES", {})
    if switch not in docs:
        raise StudyError(f"unknown GEMM switch {switch!r} (known: {', '.join(docs)})")
    return " ".join(docs[switch].doc.split())


def _doc_parts(doc: str) -> dict[str, str]:
    """Split a switch docstring into its summary, 'Seed claim', 'Mechanism' and 'Metric' parts."""
    parts = re.split(r"\b(Seed claim(?: \([^)]*\))?|Mechanism|Metric(?:, [^:.]*)?):\s*", doc)
    out = {"summary": parts[0].strip()}
    for head, body in zip(parts[1::2], parts[2::2]):
        key = "seed" if head.startswith("Seed") else "metric" if head.startswith("Metric") else head.lower()
        out[key] = f"{head}: {body.strip()}"
    return out


def intro_markdown(variant: str, baseline: str | None = None) -> str:
    """The step's prose for its notebook, built from the switch docstring (the seed's words)."""
    v = _variant(variant)
    baseline = baseline if baseline is not None else v.predecessor
    switch = step_switch(variant)
    lines = [f"**{variant}** = switches {{{', '.join(sorted(v.switches)) or 'none'}}}; "
             f"compared against **{baseline or 'nothing (the baseline)'}**."]
    if switch is None:
        lines += ["", "The baseline: the same 4-wave 256x256-tile kernel with every optimisation switch off. "
                  "Every later step adds one switch to it."]
        return "\n".join(lines)
    verb = "adds" if v.kind == "ladder" else "removes"
    parts = _doc_parts(switch_doc(switch))
    lines += ["", f"This step {verb} `{switch}`: {parts['summary']}", ""]
    for key in ("seed", "mechanism", "metric"):
        if key in parts:
            lines.append(f"* {parts[key]}")
    lines += ["", f"*(Quoted from the `{switch}` docstring in `src/mxfp4_ablation/kernels/gemm.py`, which cites "
              "FlyDSL PR #990 / PR #756.)*"]
    if switch in EXPECTATIONS:
        exp = ", ".join(f"`{m}` {d}" for m, d in EXPECTATIONS[switch])
        lines += ["", f"Checked below on the ISA: {exp}."]
    return "\n".join(lines)


# ============================================================================ static metrics


def _count(insts, pred) -> int:
    return sum(1 for i in insts or () if pred(i))


def _writes_m0(inst, opcode: str) -> bool:
    return inst.opcode == opcode and bool(inst.operands) and inst.operands[0] == "m0"


#: The GEMM metric set (moved to :mod:`mxfp4_ablation.metrics`).
study_metrics = metrics.gemm_metrics


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(n)) for n in shape)


def parse_shapes(shapes: Any, mode: str) -> list[tuple[int, int, int]]:
    """Shapes from a notebook parameter: None (the mode's defaults), ``"M,N,K"``, or a list of them."""
    if shapes is None:
        return [tuple(s) for s in (DEVICE_SHAPES if mode == "device" else EMULATED_SHAPES)]
    if isinstance(shapes, str):
        shapes = [shapes]
    out = []
    for s in shapes:
        try:
            shape = variants.parse_shape(s) if isinstance(s, str) else tuple(int(n) for n in s)
        except (TypeError, ValueError) as err:
            raise StudyError(f"bad GEMM shape {s!r}: {err}") from None
        if len(shape) != 3 or any(n <= 0 for n in shape):
            raise StudyError(f"a GEMM shape is three positive integers M,N,K; got {s!r}")
        out.append(shape)
    if not out:
        raise StudyError("no GEMM shapes given")
    return out


def compile_variants(names: Sequence[str], shape: Sequence[int]) -> list:
    """Offline gfx950 compiles of ``names`` at ``shape`` (one worker for all cache misses)."""
    vs = [_variant(n) for n in names]
    return toolchain.compile_many([(v.target, v.params(tuple(shape))) for v in vs])


def _metric_rows(name: str, art, shape, role: str | None = None) -> list[dict]:
    v = _variant(name)
    values = study_metrics(art.isa)
    values["compile_seconds"] = art.compile_seconds
    rows = []
    for metric, value in values.items():
        row = {"variant": name, "kind": v.kind, "switch": step_switch(name) or "", "shape": _shape_text(shape),
               "metric": metric, "value": float(value) if value is not None else math.nan}
        if role is not None:
            row["role"] = role
        rows.append(row)
    return rows


def ladder_metrics(shape: Sequence[int] = ISA_SHAPE, names: Sequence[str] | None = None,
                   out_dir: str | Path | None = None) -> pd.DataFrame:
    """Compile every GEMM variant (or ``names``) at ``shape``; long table
    ``variant, kind, switch, shape, metric, value`` (``compile_seconds`` is one of the metrics).
    With ``out_dir`` the ``.s`` of each variant is written there too."""
    names = list(names) if names is not None else list(gemm_variants())
    arts = compile_variants(names, shape)
    rows = []
    for name, art in zip(names, arts):
        rows += _metric_rows(name, art, shape)
        if out_dir is not None:
            results.atomic_write_text(Path(out_dir) / "isa" / f"{name}.s", art.isa)
    return pd.DataFrame(rows, columns=["variant", "kind", "switch", "shape", "metric", "value"])


def metric_wide(metrics: pd.DataFrame) -> pd.DataFrame:
    """Long metrics -> one row per variant (in table order), one column per metric."""
    order = list(dict.fromkeys(metrics["variant"]))
    cols = list(dict.fromkeys(metrics["metric"]))
    wide = metrics.pivot_table(index="variant", columns="metric", values="value", aggfunc="first", dropna=False)
    return wide.reindex(index=order, columns=cols)


def _moved(before: float, after: float, direction: str) -> bool:
    return family.Expect("metric", direction).holds(before, after)


def expectation_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Does each switch move its metric as :data:`EXPECTATIONS` says, on this data?

    Ladder steps compare the step (after) with its predecessor (before); leave-one-out variants
    compare ``gemm-v7`` (after: the switch on) with ``gemm-v7-no-<switch>`` (before: off).
    Columns: ``comparison, variant, baseline, switch, metric, direction, before, after, delta,
    as_intended``. Variants missing from ``metrics`` are skipped.
    """
    wide = metric_wide(metrics)
    rows = []
    for name, v in gemm_variants().items():
        if v.predecessor is None or name not in wide.index or v.predecessor not in wide.index:
            continue
        switch = step_switch(name)
        if v.kind == "ladder":
            off, on = v.predecessor, name
        else:
            off, on = name, v.predecessor
        for metric, direction in EXPECTATIONS.get(switch, ()):
            before = wide.at[off, metric] if metric in wide.columns else math.nan
            after = wide.at[on, metric] if metric in wide.columns else math.nan
            rows.append({"comparison": v.kind, "variant": name, "baseline": v.predecessor, "switch": switch,
                         "metric": metric, "direction": direction, "before": float(before),
                         "after": float(after), "delta": float(after - before),
                         "as_intended": _moved(before, after, direction)})
    cols = ["comparison", "variant", "baseline", "switch", "metric", "direction", "before", "after", "delta",
            "as_intended"]
    return pd.DataFrame(rows, columns=cols)


def isa_diff(metrics: pd.DataFrame, baseline: str, variant: str) -> pd.DataFrame:
    """``metric, baseline, variant, delta, ratio`` for every metric of two variants in ``metrics``."""
    wide = metric_wide(metrics)
    for n in (baseline, variant):
        if n not in wide.index:
            raise StudyError(f"no metrics for {n!r} in this table")
    rows = []
    for metric in wide.columns:
        if metric == "compile_seconds":
            continue
        a, b = float(wide.at[baseline, metric]), float(wide.at[variant, metric])
        delta = b - a
        ratio = 1.0 if a == b else (b / a if a not in (0.0,) and not math.isnan(a) else math.nan)
        rows.append({"metric": metric, "baseline": a, "variant": b, "delta": delta, "ratio": ratio})
    return pd.DataFrame(rows, columns=["metric", "baseline", "variant", "delta", "ratio"])


# ============================================================================ correctness


def _backend(mode: str) -> str:
    return "device" if mode == "device" else "emulator"


def verify_table(names: Iterable[str], shapes: Sequence[Sequence[int]], seeds: Sequence[int],
                 mode: str) -> pd.DataFrame:
    """:func:`mxfp4_ablation.runner.verify` for each variant x shape x seed.

    ``status`` is ``passed`` / ``FAILED`` / ``not run`` (static mode, or the runner cannot run this
    kernel yet: ``error`` says why). A failed check is recorded, not raised, so the table shows it.
    """
    cols = ["variant", "shape", "seed", "backend", "status", "passed", "cosine", "max_abs_err", "hazards",
            "seconds", "error"]
    names = list(names)
    rows = []
    if mode == "static":
        for n in names:
            rows.append({"variant": n, "shape": "", "seed": -1, "backend": "none", "status": "not run",
                         "error": "static mode: no emulator and no gfx950 GPU"})
        return pd.DataFrame(rows, columns=cols)
    from .. import runner

    for n in names:
        variants.get(n)  # any family: the MoE study uses this table too
        for shape in shapes:
            for seed in seeds:
                row = {"variant": n, "shape": _shape_text(shape), "seed": int(seed), "backend": _backend(mode)}
                try:
                    res = runner.verify(n, tuple(shape), backend=_backend(mode), seed=int(seed))
                except (ValueError, NotImplementedError, ImportError) as err:
                    row.update(status="not run", error=str(err).splitlines()[0] if str(err) else type(err).__name__)
                else:
                    row.update(status="passed" if res["passed"] else "FAILED", passed=bool(res["passed"]),
                               cosine=res.get("cosine"), max_abs_err=res.get("max_abs_err"),
                               hazards=res.get("hazards"), seconds=res.get("seconds"), error="")
                rows.append(row)
    return pd.DataFrame(rows, columns=cols)


# ============================================================================ speed


def _tflops(trials: pd.DataFrame, shape: Sequence[int]) -> pd.Series:
    if "tflops" in trials.columns and trials["tflops"].notna().all():
        return trials["tflops"]
    m, n, k = shape
    return 2.0 * m * n * k / (trials["time_per_launch_us"] * 1e-6) / 1e12


def measure_pairs(pairs: Sequence[tuple[str, str]], shapes: Sequence[Sequence[int]], iterations: int,
                  out_dir: str | Path, name: str = "timing", settings=None,
                  table: str = "tflops.parquet") -> pd.DataFrame:
    """Time each ``(baseline, variant)`` pair at each shape on the GPU (paired A/B, arm A = baseline).

    Writes ``<name>.parquet`` (trials) and ``<name>-summary.parquet`` (the harness's) and ``table``
    (default ``tflops.parquet``): one row per pair x shape x arm with the median TFLOPS and its bootstrap CI, plus the
    B/A time ratio and its CI (``ratio < 1``: the variant is faster).
    """
    from .. import bench
    from ..bench import launchers

    settings = settings or bench.HarnessSettings(pairs=int(iterations))
    comps, meta = [], {}
    for base, var in pairs:
        for shape in shapes:
            label = f"{var} vs {base} @ {_shape_text(shape)}"
            comps.append(bench.Comparison(label, a=launchers.launcher_for(base, tuple(shape)),
                                          b=launchers.launcher_for(var, tuple(shape))))
            meta[label] = (base, var, tuple(shape))
    result = bench.run_comparisons(comps, settings)
    bench.write_result(result, out_dir, name)
    rows = []
    for label, (base, var, shape) in meta.items():
        sub = result.trials[result.trials["experiment"] == label]
        summ = result.summary[result.summary["experiment"] == label]
        for method, grp in sub.groupby("method", sort=False):
            s = summ[summ["method"] == method].iloc[0]
            for arm, vname in (("A", base), ("B", var)):
                ci = bench.median_ci(_tflops(grp[grp["arm"] == arm], shape).to_numpy(), settings.confidence,
                                     settings.n_resamples, settings.seed)
                rows.append({"variant": vname, "baseline": base, "pair": f"{var} vs {base}", "arm": arm,
                             "shape": _shape_text(shape), "method": method, "tflops": ci.estimate,
                             "tflops_low": ci.low, "tflops_high": ci.high, "ratio": float(s["ratio"]),
                             "ratio_low": float(s["ci_low"]), "ratio_high": float(s["ci_high"]),
                             "verdict": s["verdict"]})
    frame = pd.DataFrame(rows)
    results.write_table(frame, Path(out_dir) / table, result.provenance)
    return frame


def _measure_or_why(pairs, shapes, iterations, out_dir, name: str = "timing",
                    table: str = "tflops.parquet") -> tuple[pd.DataFrame | None, str]:
    """:func:`measure_pairs`, or ``(None, reason)`` when a variant has no device launcher yet."""
    from ..bench.launchers import LauncherError

    try:
        return measure_pairs(pairs, shapes, iterations, out_dir, name, table=table), ""
    except LauncherError as err:
        return None, str(err)


# ============================================================================ published figures


def published(path: str | Path | None = None) -> pd.DataFrame:
    """FlyDSL PR #990's TFLOPS table (before / after the PR / aiter asm on MI355X), with sources."""
    path = Path(path) if path is not None else paths.reference_dir() / PUBLISHED_CSV
    if not path.is_file():
        raise StudyError(f"no published GEMM figures at {path}")
    df = pd.read_csv(path)
    missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
    if missing:
        raise StudyError(f"{path.name} lacks column(s) {', '.join(missing)}")
    bad = sorted(set(df["stage"]) - set(PUBLISHED_STAGES))
    if bad:
        raise StudyError(f"{path.name}: unknown stage(s) {', '.join(bad)} (known: {', '.join(PUBLISHED_STAGES)})")
    if df["source"].isna().any() or (df["source"].astype(str).str.strip() == "").any():
        raise StudyError(f"{path.name}: every row needs a source")
    return df[list(PUBLISHED_COLUMNS)]


def published_wide(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (M=N, K), a column per stage, plus the PR's gains."""
    df = published() if df is None else df
    wide = df.pivot_table(index=["M", "K"], columns="stage", values="tflops", aggfunc="first")
    wide = wide[[s for s in PUBLISHED_STAGES if s in wide.columns]]
    if {"before_990", "after_990"} <= set(wide.columns):
        wide["gain_990_pct"] = (wide["after_990"] / wide["before_990"] - 1) * 100
    if {"after_990", "aiter_asm"} <= set(wide.columns):
        wide["vs_aiter_pct"] = (wide["after_990"] / wide["aiter_asm"] - 1) * 100
    wide.columns.name = None
    return wide.reset_index()


def _write_published(out_dir: Path) -> pd.DataFrame:
    df = published()
    prov = provenance.collect("published", settings={"file": f"experiments/reference/{PUBLISHED_CSV}"})
    results.write_table(df, out_dir / "published.parquet", prov)
    return df


# ============================================================================ one ladder step


def _scratch(name: str) -> Path:
    """Where a notebook opened by hand (no ``out_dir``) writes: never into a published run."""
    return paths.cache_dir() / "scratch" / FAMILY / name


@dataclass
class StepReport:
    """What :func:`step_report` wrote, as DataFrames (the same data as the run folder's parquet)."""

    variant: str
    baseline: str | None
    switch: str | None
    mode: str
    out_dir: Path
    shapes: list
    isa_shape: tuple
    verify: pd.DataFrame
    metrics: pd.DataFrame
    isa_diff: pd.DataFrame | None
    expectations: pd.DataFrame
    tflops: pd.DataFrame | None
    figures: list = field(default_factory=list)
    speed_note: str = ""  # why nothing was timed on a device (e.g. no launcher for the variant yet)

    def show(self) -> None:
        """Display the step in a notebook: prose, correctness, ISA diff, speed, figures."""
        from IPython.display import SVG, Markdown, display

        display(Markdown(intro_markdown(self.variant, self.baseline)))
        display(Markdown(f"## Correctness ({self.mode} mode)"))
        display(self.verify)
        display(Markdown(f"## ISA at M,N,K = {_shape_text(self.isa_shape)} (static, offline gfx950 compile)"))
        if self.isa_diff is None:
            display(metric_wide(self.metrics).T)
        else:
            changed = self.isa_diff[self.isa_diff["delta"].fillna(0) != 0]
            display(Markdown(f"Metrics that changed from {self.baseline} to {self.variant} "
                             f"({len(changed)} of {len(self.isa_diff)}):"))
            display(changed.set_index("metric"))
            if len(self.expectations):
                display(Markdown("Does the switch move its metric the intended way?"))
                display(self.expectations)
        display(Markdown("## Speed"))
        if self.tflops is not None:
            display(self.tflops)
        elif self.speed_note:
            display(Markdown(f"**Not timed:** {self.speed_note}"))
        else:
            display(Markdown("No gfx950 GPU in this run, so nothing was timed. FlyDSL PR #990 reports only the "
                             "combined effect of its changes (steps 2-7 of this ladder), not one per step; its own "
                             "TFLOPS on MI355X, labelled *published*:"))
            display(published_wide())
        for path in self.figures:
            display(SVG(filename=str(path)))


def step_report(variant: str, baseline: str | None = None, shapes: Any = None, mode: str = "emulated",
                seeds: Sequence[int] = (0,), out_dir: str | Path | None = None, iterations: int = 100,
                isa_shape: Sequence[int] = ISA_SHAPE, render: bool = True) -> StepReport:
    """Everything one ladder step's notebook shows, written to ``out_dir`` with provenance.

    * ``verify.parquet``: the correctness checks of ``variant`` at ``shapes`` x ``seeds``;
    * ``metrics.parquet``: :func:`study_metrics` of ``variant`` and ``baseline`` at ``isa_shape``
      (long format, ``role`` = variant / baseline), their ``.s`` under ``isa/``;
    * ``isa_diff.parquet`` and ``expectations.parquet`` (when there is a baseline);
    * ``published.parquet`` (PR #990's figures) and, in device mode, the timing tables
      (``timing*.parquet``, ``tflops.parquet``).
    ``baseline`` defaults to the variant's predecessor; ``shapes`` to the mode's defaults; ``out_dir``
    (None when a notebook is opened by hand) to a scratch folder under the cache.
    """
    from ..modes import MODES

    if mode not in MODES:
        raise StudyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    v = _variant(variant)
    baseline = v.predecessor if baseline is None else baseline
    if baseline is not None:
        _variant(baseline)
    shape_list = parse_shapes(shapes, mode)
    isa_shape = parse_shapes([isa_shape], mode)[0]
    seeds = [int(s) for s in (seeds if isinstance(seeds, (list, tuple)) else [seeds])]
    if not seeds:
        raise StudyError("give at least one seed")
    out_dir = Path(out_dir) if out_dir is not None else _scratch(variant)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {"variant": variant, "baseline": baseline, "shapes": [list(s) for s in shape_list], "seeds": seeds,
                "iterations": int(iterations), "isa_shape": list(isa_shape)}
    prov = provenance.collect(mode, settings=settings)
    static_prov = provenance.collect("static", settings=settings)

    checks = verify_table([variant], shape_list, seeds, mode)
    results.write_table(checks, out_dir / "verify.parquet", prov)

    names = [variant] + ([baseline] if baseline else [])
    arts = compile_variants(names, isa_shape)
    rows = []
    for name, art, role in zip(names, arts, ("variant", "baseline")):
        rows += _metric_rows(name, art, isa_shape, role)
        results.atomic_write_text(out_dir / "isa" / f"{name}.s", art.isa)
    metrics = pd.DataFrame(rows)
    results.write_table(metrics, out_dir / "metrics.parquet", static_prov)
    diff = expectations = None
    if baseline:
        diff = isa_diff(metrics, baseline, variant)
        results.write_table(diff, out_dir / "isa_diff.parquet", static_prov)
        expectations = expectation_table(metrics)
    else:
        expectations = expectation_table(metrics.iloc[0:0])
    results.write_table(expectations, out_dir / "expectations.parquet", static_prov)
    _write_published(out_dir)

    tflops, speed_note = None, ""
    if mode == "device" and baseline:
        tflops, speed_note = _measure_or_why([(baseline, variant)], shape_list, iterations, out_dir)

    report = StepReport(variant, baseline, step_switch(variant), mode, out_dir, shape_list, tuple(isa_shape),
                        checks, metrics, diff, expectations, tflops, speed_note=speed_note)
    if render:
        from .. import figures

        if v.kind == "ladder":
            if baseline:
                report.figures += figures.render(f"{FAMILY}/{step_slug(variant)}_isa_diff", out_dir)[:1]
            report.figures += figures.render(f"{FAMILY}/{step_slug(variant)}_speed", out_dir)[:1]
    return report


# ============================================================================ the summary


@dataclass
class SummaryReport:
    metrics: pd.DataFrame
    expectations: pd.DataFrame
    correctness: pd.DataFrame
    tflops: pd.DataFrame | None
    out_dir: Path
    figures: list = field(default_factory=list)

    def ladder_table(self) -> pd.DataFrame:
        """Every metric per ladder step (rows: metrics, columns: gemm-v0 .. gemm-v7)."""
        wide = metric_wide(self.metrics)
        return wide.loc[[n for n in wide.index if _variant(n).kind == "ladder"]].T

    def leave_one_out_table(self) -> pd.DataFrame:
        """Each ``gemm-v7-no-<switch>`` against ``gemm-v7``: the switch's own metrics."""
        e = self.expectations
        return e[e["comparison"] == "leave-one-out"].reset_index(drop=True)


def _latest_step_tables(table: str) -> list[pd.DataFrame]:
    return results.latest_tables([step_run_name(name) for name in ladder_names()], table)


def summary_report(out_dir: str | Path | None = None, mode: str = "emulated", isa_shape: Sequence[int] = ISA_SHAPE,
                   shapes: Any = None, seeds: Sequence[int] = (0,), iterations: int = 100,
                   verify_leave_one_out: bool = True, render: bool = True) -> SummaryReport:
    """The GEMM half of ``notebooks/summary.py``: compile all variants, check every switch against its
    intended metric (ladder and leave-one-out), gather the steps' correctness and timing, verify (and
    in device mode time) the leave-one-out variants, write ``ladder.parquet``, ``expectations.parquet``,
    ``correctness.parquet``, ``published.parquet`` [, ``tflops.parquet``] and ``readme_table.md``."""
    out_dir = Path(out_dir) if out_dir is not None else _scratch(SUMMARY_RUN)
    out_dir.mkdir(parents=True, exist_ok=True)
    isa_shape = parse_shapes([isa_shape], mode)[0]
    shape_list = parse_shapes(shapes, mode)
    seeds = [int(s) for s in (seeds if isinstance(seeds, (list, tuple)) else [seeds])]
    settings = {"isa_shape": list(isa_shape), "shapes": [list(s) for s in shape_list], "seeds": seeds,
                "iterations": int(iterations), "verify_leave_one_out": bool(verify_leave_one_out)}
    static_prov = provenance.collect("static", settings=settings)
    metrics = ladder_metrics(isa_shape, out_dir=out_dir)
    results.write_table(metrics, out_dir / "ladder.parquet", static_prov)
    expectations = expectation_table(metrics)
    results.write_table(expectations, out_dir / "expectations.parquet", static_prov)

    checks = _latest_step_tables("verify.parquet")
    loo = leave_one_out_names()
    if verify_leave_one_out and loo:
        checks.append(verify_table(loo, shape_list, seeds, mode))
    correctness = _correctness_overview(checks)
    results.write_table(correctness, out_dir / "correctness.parquet", provenance.collect(mode, settings=settings))
    _write_published(out_dir)

    tflops_parts = _latest_step_tables("tflops.parquet")
    if mode == "device" and loo:
        full = ladder_names()[-1]
        measured, _why = _measure_or_why([(full, n) for n in loo], shape_list, iterations, out_dir, "timing-loo",
                                         table="tflops-loo.parquet")
        if measured is not None:
            tflops_parts.append(measured)
    tflops = pd.concat(tflops_parts, ignore_index=True) if tflops_parts else None
    if tflops is not None:
        keep = [c for c in tflops.columns if c not in provenance.ROW_FIELDS and c != "settings"]
        tflops = tflops[keep]
        results.write_table(tflops, out_dir / "tflops_all.parquet", provenance.collect("device", settings=settings))
    report = SummaryReport(metrics, expectations, correctness, tflops, out_dir)
    results.atomic_write_text(out_dir / "readme_table.md", readme_table(metrics, expectations, correctness) + "\n")
    if render:
        from .. import figures

        for name in ("ladder_metrics", "leave_one_out", "tflops"):
            report.figures += figures.render(f"{FAMILY}/{name}", out_dir)[:1]
    return report


def _correctness_overview(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per variant: checks run / passed, shapes, worst cosine, total hazards, status.

    ``status`` is ``passed`` only when every check passed at >= 2 shapes, one of them multi-tile (the
    study's correctness gate; each check itself needs cosine >= 0.99999 and zero hazards).
    """
    cols = ["variant", "checks", "passed", "shapes", "min_cosine", "hazards", "status"]
    if not tables:
        return pd.DataFrame(columns=cols)
    df = pd.concat(tables, ignore_index=True)
    rows = []
    for name in [n for n in gemm_variants() if n in set(df["variant"])]:
        sub = df[df["variant"] == name]
        ran = sub[sub["status"] != "not run"]
        npass = int((ran["status"] == "passed").sum())
        shapes = sorted(set(ran["shape"]))
        multi_tile = any(int(m) > 256 or int(n) > 256 for m, n, _ in (sh.split("x") for sh in shapes))
        if ran.empty:
            status = "not run"
        elif npass < len(ran):
            status = "FAILED"
        elif len(shapes) >= 2 and multi_tile:
            status = "passed"
        else:
            status = "passed (too few shapes)"
        rows.append({"variant": name, "checks": int(len(ran)), "passed": npass, "shapes": ", ".join(shapes),
                     "min_cosine": float(ran["cosine"].min()) if not ran.empty else math.nan,
                     "hazards": float(ran["hazards"].sum()) if not ran.empty else math.nan, "status": status})
    return pd.DataFrame(rows, columns=cols)


# ============================================================================ README table


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}"


def readme_table(metrics: pd.DataFrame, expectations: pd.DataFrame,
                 correctness: pd.DataFrame | None = None) -> str:
    """The README's ladder table (markdown), from the summary run's tables.

    One row per ladder step: the switch it adds, its intended metric(s) predecessor -> step with a
    check mark when it moved the intended way, a few key static metrics, and its correctness status.
    """
    wide = metric_wide(metrics)
    exp = expectations[expectations["comparison"] == "ladder"] if len(expectations) else expectations
    status = {}
    if correctness is not None and len(correctness):
        status = dict(zip(correctness["variant"], correctness["status"]))
    shape = metrics["shape"].iloc[0] if len(metrics) else "?"
    show = [(k, label) for k, label in KEY_METRICS if k in wide.columns]
    head = ["step", "switch", "intended ISA change (predecessor → step)"] + [label for _, label in show] + ["correct"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * len(show) + ["---"]) + "|"]
    for name in [n for n in wide.index if _variant(n).kind == "ladder"]:
        sub = exp[exp["variant"] == name]
        change = "; ".join(f"{r.metric} {_fmt(r.before)} → {_fmt(r.after)} {'✓' if r.as_intended else '✗'}"
                           for r in sub.itertuples()) or "baseline"
        cells = [name, step_switch(name) or "–", change] + [_fmt(wide.at[name, k]) for k, _ in show]
        cells.append(status.get(name, "not run"))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Static counts from the offline gfx950 compile at M,N,K = {shape} (not measured speed); "
                 "generated by `python -m mxfp4_ablation.studies.gemm readme-table`.")
    return "\n".join(lines)


README_BEGIN = "<!-- gemm-ladder-table:begin (generated: python -m mxfp4_ablation.studies.gemm readme-table) -->"
README_END = "<!-- gemm-ladder-table:end -->"


def replace_between_markers(text: str, table: str) -> str:
    """``text`` with the part between :data:`README_BEGIN` and :data:`README_END` replaced by ``table``."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < 0 or end < start:
        raise StudyError(f"the file has no '{README_BEGIN}' ... '{README_END}' markers (in that order)")
    return text[: start + len(README_BEGIN)] + "\n" + table.strip("\n") + "\n" + text[end:]


def readme_table_from_run(run: str | Path | None = None) -> str:
    run = Path(run) if run is not None else results.latest_run(SUMMARY_RUN)
    if run is None or not (Path(run) / "ladder.parquet").is_file():
        raise StudyError("no summary run with a ladder table yet; run `make reproduce` "
                         "(or `python -m mxfp4_ablation.notebooks run notebooks/summary.py`) first")
    metrics = results.read_table(run / "ladder.parquet")[0]
    expectations = results.read_table(run / "expectations.parquet")[0]
    corr = run / "correctness.parquet"
    correctness = results.read_table(corr)[0] if corr.is_file() else None
    return readme_table(metrics, expectations, correctness)


# ============================================================================ figures


def _read(run_dir: Path, table: str) -> pd.DataFrame:
    return results.read_table(Path(run_dir) / table)[0]


def _isa_source(df: pd.DataFrame) -> str:
    shape = df["shape"].iloc[0] if "shape" in df.columns and len(df) else "?"
    return f"offline gfx950 compile, M,N,K = {shape}"


def draw_isa_diff(run_dir: Path):
    """Relative change of every metric that moved between the step's baseline and the step."""
    import matplotlib.pyplot as plt


    diff = _read(run_dir, "isa_diff.parquet")
    metrics = _read(run_dir, "metrics.parquet")
    exp_path = Path(run_dir) / "expectations.parquet"
    intended = set(_read(run_dir, "expectations.parquet")["metric"]) if exp_path.is_file() else set()
    variant = metrics.loc[metrics["role"] == "variant", "variant"].iloc[0]
    baseline = metrics.loc[metrics["role"] == "baseline", "variant"].iloc[0]
    moved = diff[(diff["delta"].fillna(0) != 0) | diff["metric"].isin(intended)].copy()
    moved = moved.sort_values("metric").reset_index(drop=True)
    height = max(1.6, 0.26 * len(moved) + 0.9)
    fig, ax = plt.subplots(figsize=(6.4, height))
    if moved.empty:
        ax.text(0.5, 0.5, "no metric changed", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    else:
        rel = []
        for r in moved.itertuples():
            if r.baseline and not math.isnan(r.baseline):
                rel.append((r.variant / r.baseline - 1) * 100)
            else:
                rel.append(100.0 if r.variant > 0 else -100.0)
        colours = ["#d95f02" if m in intended else "#7570b3" for m in moved["metric"]]
        y = list(range(len(moved)))
        ax.barh(y, rel, color=colours)
        ax.set_yticks(y, [f"{m}{' *' if m in intended else ''}" for m in moved["metric"]])
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.8)
        for yi, r, x in zip(y, moved.itertuples(), rel):
            ax.text(x, yi, f" {_fmt(r.baseline)} → {_fmt(r.variant)} ", va="center",
                    ha="left" if x >= 0 else "right", fontsize=6)
        lim = max(abs(v) for v in rel) * 1.6 or 1
        ax.set_xlim(-lim, lim)
    ax.set_xlabel(f"change from {baseline} (%); unchanged ones shown only if intended (*)")
    ax.set_title(f"{variant} vs {baseline}: ISA metrics", loc="left", pad=14)
    plots.source_badge(ax, "static", _isa_source(metrics))
    fig.tight_layout()
    return fig


def _draw_published(ax, pub: pd.DataFrame) -> None:
    wide = published_wide(pub)
    labels = [f"M=N={int(r.M)}\nK={int(r.K)}" for r in wide.itertuples()]
    stages = [s for s in PUBLISHED_STAGES if s in wide.columns]
    width = 0.8 / len(stages)
    colours = ("#b2abd2", "#e66101", "#5e3c99")
    for i, stage in enumerate(stages):
        xs = [j + (i - (len(stages) - 1) / 2) * width for j in range(len(wide))]
        ax.bar(xs, wide[stage], width, label=PUBLISHED_LABELS[stage], color=colours[i % len(colours)])
        for x, v in zip(xs, wide[stage]):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(wide)), labels, fontsize=7)
    ax.set_ylabel("TFLOPS (MI355X)")
    low = float(min(wide[s].min() for s in stages))
    ax.set_ylim(low * 0.9, float(max(wide[s].max() for s in stages)) * 1.1)
    ax.legend(ncol=3, fontsize=7, frameon=False, loc="upper left")
    plots.source_badge(ax, "published", "FlyDSL PR #990")


def _draw_measured(ax, tflops: pd.DataFrame) -> None:
    method = tflops["method"].iloc[0]
    tflops = tflops[tflops["method"] == method]
    # Each variant's TFLOPS from the comparison where it is the candidate (arm B); a variant that is
    # only ever a baseline (gemm-v0, or gemm-v7 in leave-one-out pairs) from its arm A.
    arms = tflops[tflops["arm"] == "B"]
    only_a = tflops[(tflops["arm"] == "A") & ~tflops["variant"].isin(set(arms["variant"]))]
    arms = pd.concat([arms, only_a.drop_duplicates(["variant", "shape"])], ignore_index=True)
    order = [n for n in gemm_variants() if n in set(arms["variant"])]
    shapes = list(dict.fromkeys(arms["shape"]))
    width = 0.8 / max(1, len(shapes))
    for i, shape in enumerate(shapes):
        sub = arms[arms["shape"] == shape].set_index("variant").reindex(order)
        xs = [j + (i - (len(shapes) - 1) / 2) * width for j in range(len(order))]
        err = [sub["tflops"] - sub["tflops_low"], sub["tflops_high"] - sub["tflops"]]
        ax.bar(xs, sub["tflops"], width, yerr=err, capsize=2, label=shape)
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
    ax.set_ylabel("TFLOPS (median, 95% CI)")
    ax.legend(fontsize=7, frameon=False)
    plots.source_badge(ax, "device", f"bench harness, {method}")


def draw_speed(run_dir: Path):
    """Measured TFLOPS with CIs where the run timed anything, else PR #990's published figures."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    for table in ("tflops_all.parquet", "tflops.parquet"):
        if (run_dir / table).is_file():
            _draw_measured(ax, _read(run_dir, table))
            ax.set_title("TFLOPS per variant, measured", loc="left", pad=14)
            break
    else:
        _draw_published(ax, _read(run_dir, "published.parquet"))
        ax.set_title("Not timed here (no MI355X): FlyDSL PR #990's own TFLOPS", loc="left", pad=14)
    fig.tight_layout()
    return fig


@figure(f"{FAMILY}/ladder_metrics", run=SUMMARY_RUN)
def draw_ladder_metrics(run_dir: Path):
    """Small multiples: each key static metric along the ladder gemm-v0 .. gemm-v7."""
    import matplotlib.pyplot as plt


    metrics = _read(run_dir, "ladder.parquet")
    ladder = metrics[metrics["kind"] == "ladder"]
    wide = metric_wide(ladder)
    keys = [(k, label) for k, label in KEY_METRICS if k in wide.columns]
    cols = 4
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(9.6, 2.0 * rows + 0.6), squeeze=False)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.08, top=1 - 0.75 / (2.0 * rows + 0.6), hspace=0.55,
                        wspace=0.3)
    steps = [n.replace("gemm-", "") for n in wide.index]
    for ax, (key, label) in zip(axes.flat, keys):
        values = wide[key].astype(float)
        ax.bar(range(len(values)), values.fillna(0), color="#5e3c99")
        ax.set_xticks(range(len(values)), steps, fontsize=6)
        ax.set_title(label, fontsize=7, loc="left")
        ax.tick_params(axis="y", labelsize=6)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle("MXFP4 GEMM ladder: static ISA metrics per step", x=0.01, ha="left", fontsize=10)
    badge = fig.add_axes((0.0, 1 - 0.55 / (2.0 * rows + 0.6), 0.99, 0.01))
    badge.axis("off")
    plots.source_badge(badge, "static", _isa_source(metrics))
    return fig


@figure(f"{FAMILY}/leave_one_out", run=SUMMARY_RUN)
def draw_leave_one_out(run_dir: Path):
    """For each switch: its intended metric in gemm-v7 with and without it."""
    import matplotlib.pyplot as plt


    exp = _read(run_dir, "expectations.parquet")
    loo = exp[exp["comparison"] == "leave-one-out"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(6.4, max(1.6, 0.3 * len(loo) + 0.9)))
    if loo.empty:
        ax.text(0.5, 0.5, "no leave-one-out variants", ha="center", va="center", transform=ax.transAxes)
    else:
        rel = [((r.before / r.after - 1) * 100) if r.after else (100.0 if r.before else 0.0) for r in loo.itertuples()]
        y = list(range(len(loo)))
        ax.barh(y, rel, color=["#1b7837" if ok else "#b2182b" for ok in loo["as_intended"]])
        ax.set_yticks(y, [f"−{r.switch}: {r.metric}{'' if r.as_intended else ' ✗'}" for r in loo.itertuples()],
                      fontsize=7)
        ax.invert_yaxis()
        ax.axvline(0, color="black", linewidth=0.8)
        for yi, r, x in zip(y, loo.itertuples(), rel):
            ax.text(x, yi, f" {_fmt(r.after)} → {_fmt(r.before)} ", va="center", ha="left" if x >= 0 else "right",
                    fontsize=6)
        lim = max(abs(v) for v in rel) * 1.6 or 1
        ax.set_xlim(-lim, lim)
    ax.set_xlabel("change when removed from gemm-v7 (%);  ✗ = not as intended")
    ax.set_title("Leave-one-out: gemm-v7 minus one switch", loc="left", pad=14)
    plots.source_badge(ax, "static", "offline gfx950 compile")
    fig.tight_layout()
    return fig


@figure(f"{FAMILY}/published_tflops", run=SUMMARY_RUN)
def draw_published_tflops(run_dir: Path):
    """FlyDSL PR #990's TFLOPS: before the PR, after it, aiter's hand-written asm (MI355X)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    _draw_published(ax, _read(run_dir, "published.parquet"))
    ax.set_title("MXFP4 GEMM on MI355X as published in FlyDSL PR #990", loc="left", pad=14)
    fig.tight_layout()
    return fig


figure(f"{FAMILY}/tflops", run=SUMMARY_RUN)(draw_speed)


def _register_step_figures() -> None:
    """``gemm/NN_<switch>_isa_diff`` and ``gemm/NN_<switch>_speed`` for each ladder step."""
    try:
        names = ladder_names()
    except StudyError:
        return
    for name in names:
        slug, run = step_slug(name), step_run_name(name)
        if _variant(name).predecessor is not None:
            figure(f"{FAMILY}/{slug}_isa_diff", run=run)(draw_isa_diff)
        figure(f"{FAMILY}/{slug}_speed", run=run)(draw_speed)


_register_step_figures()


# ============================================================================ command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mxfp4_ablation.studies.gemm")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("readme-table", help="print the README's GEMM ladder table (markdown) from the data")
    p.add_argument("--run", help="summary run folder (default: the latest experiments/*-summary)")
    p.add_argument("--update", metavar="FILE",
                   help=f"instead of printing, replace the table between the markers in FILE ({README_BEGIN} ...)")
    args = parser.parse_args(argv)
    try:
        table = readme_table_from_run(args.run)
        if args.update:
            target = Path(args.update)
            if not target.is_file():
                raise StudyError(f"no file {target}")
            results.atomic_write_text(target, replace_between_markers(target.read_text(), table))
            print(f"updated the GEMM ladder table in {target}")
        else:
            print(table)
    except (StudyError, FileNotFoundError) as err:
        print(f"gemm study: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
