"""The dense MXFP4 GEMM study: one configuration of the generic engine (:mod:`.engine`).

The ladder ``gemm-v0`` .. ``gemm-v9`` (seed: FlyDSL PR #990 and the AGPR pinning of PR #756), its
leave-one-out set, one regime (no regime column): the ISA is read at 8192^3, the emulator checks
256x256x3072 and 512x512x3072 (K = 3072 keeps a runtime K loop with two trips in every variant,
k_unroll4's four-step loop included), an MI355X checks and times the PR's four benchmark shapes. Speed: measured TFLOPS on a
device; PR #990's own TFLOPS (``experiments/reference/gemm_published.csv``), labelled *published*,
anywhere else; modelled TFLOPS where the timing model exists.

Used by ``notebooks/gemm/NN_<switch>.py`` (:func:`step_report`) and ``notebooks/summary.py``
(:func:`summary_report`). Everything here is configuration; the machinery is the engine's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from .. import metrics, plots, shapes
from . import SUMMARY_RUN, correctness, engine, modelled_figures, modelled_section, readme, speed, tables, views
from .tables import StudyError

FAMILY = "gemm"
#: Shapes are data (experiments/shapes.toml, group "gemm"): the ISA shape (PR #990's first benchmark
#: shape), the emulator's shapes (one workgroup and 2x2 workgroups, K = 2048: two trips of the runtime K
#: loop in every variant) and an MI355X's (the PR's four benchmark shapes).
ISA_SHAPE = tuple(shapes.shapes("gemm", "isa")[0])
EMULATED_SHAPES = tuple(shapes.shapes("gemm", "emulated"))
DEVICE_SHAPES = tuple(shapes.shapes("gemm", "device"))
#: MFMAs per wave per K step (4 blocks x 16 accumulators x 2 MFMAs of 128 K each).
MFMA_PER_K_STEP = metrics.GEMM_MFMA_PER_K_STEP
#: The GEMM metric set (:mod:`mxfp4_ablation.metrics`).
study_metrics = metrics.gemm_metrics

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

PUBLISHED = speed.Published(csv="gemm_published.csv", columns=("kernel", "M", "N", "K", "stage", "tflops", "source", "note"),
                            stages=("before_990", "after_990", "aiter_asm"), what="GEMM figures",
                            source="FlyDSL PR #990", value="tflops")
PUBLISHED_CSV = PUBLISHED.csv
PUBLISHED_STAGES = PUBLISHED.stages
PUBLISHED_LABELS = {"before_990": "before #990", "after_990": "after #990", "aiter_asm": "aiter asm"}


# ============================================================================ the configuration


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(n)) for n in shape)


def _check_shape(regime, shape: tuple) -> None:
    if len(shape) != 3 or any(n <= 0 for n in shape):
        raise StudyError(f"a GEMM shape is three positive integers M,N,K; got {shape!r}")


def _gate(ran: pd.DataFrame, study) -> tuple[str, str]:
    """Passed only when every check passed at >= 2 shapes, one of them multi-tile."""
    shapes = sorted(set(ran["shape"]))
    multi_tile = any(int(m) > 256 or int(n) > 256 for m, n, _ in (sh.split("x") for sh in shapes))
    return ", ".join(shapes), "passed" if len(shapes) >= 2 and multi_tile else "passed (too few shapes)"


def compile_variants(names: Sequence[str], shape: Sequence[int]) -> list:
    """Offline gfx950 compiles of ``names`` at ``shape`` (one worker for all cache misses)."""
    return engine.compile_variants([STUDY.variant(n) for n in names], shape)


SPEC = engine.Spec(
    name=FAMILY, title="GEMM", families={"gemm": "GEMM"},
    regimes=(engine.Regime(None, ISA_SHAPE, EMULATED_SHAPES, DEVICE_SHAPES),),
    shape_text=shape_text, check_shape=_check_shape, expectations=engine.switch_expectations, key_metrics=KEY_METRICS,
    study_metrics=lambda text: study_metrics(text), gate=_gate, coverage_column="shapes", published=PUBLISHED,
    seed="FlyDSL PR #990 / PR #756",
    baseline_text="The baseline: the same 4-wave 256x256-tile kernel with every optimisation switch off. "
                  "Every later step adds one switch to it.",
    measured_table="tflops.parquet", flops=lambda s: 2.0 * s[0] * s[1] * s[2],
    compile=lambda names, shape: compile_variants(names, shape),  # late-bound: tests stub it
    summary_figures=("ladder_metrics", "leave_one_out", "published_tflops"),
    model_tables=modelled_section.ladder_tables, model_figures=("modelled_leave_one_out", "modelled_waterfall"),
)
STUDY = engine.Study(SPEC)


# ============================================================================ the figures' part


def published(path: str | Path | None = None) -> pd.DataFrame:
    """FlyDSL PR #990's TFLOPS table (before / after the PR / aiter asm on MI355X), with sources."""
    return PUBLISHED.read(path)


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


def _draw_published(ax, pub: pd.DataFrame, label=None) -> None:
    wide = published_wide(pub)
    stages = [s for s in PUBLISHED_STAGES if s in wide.columns]
    width = 0.8 / len(stages)
    colours = ("#b2abd2", "#e66101", "#5e3c99")
    for i, stage in enumerate(stages):
        xs = [j + (i - (len(stages) - 1) / 2) * width for j in range(len(wide))]
        ax.bar(xs, wide[stage], width, label=PUBLISHED_LABELS[stage], color=colours[i % len(colours)])
        for x, v in zip(xs, wide[stage]):
            ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(wide)), [f"M=N={int(r.M)}\nK={int(r.K)}" for r in wide.itertuples()], fontsize=7)
    ax.set_ylabel("TFLOPS (MI355X)")
    ax.set_ylim(0, float(max(wide[s].max() for s in stages)) * 1.35)  # bars from 0: no truncated axis
    ax.legend(ncol=3, fontsize=7, frameon=False, loc="upper left")
    plots.source_badge(ax, "published", "FlyDSL PR #990")


def _draw_measured(ax, tflops: pd.DataFrame) -> None:
    method = tflops["method"].iloc[0]
    tflops = tflops[tflops["method"] == method]
    # Each variant's TFLOPS from the comparison where it is the candidate (arm B); a variant that is only
    # ever a baseline (gemm-v0, or gemm-v7 in leave-one-out pairs) from its arm A.
    arms = tflops[tflops["arm"] == "B"]
    only_a = tflops[(tflops["arm"] == "A") & ~tflops["variant"].isin(set(arms["variant"]))]
    arms = pd.concat([arms, only_a.drop_duplicates(["variant", "shape"])], ignore_index=True)
    order = list(dict.fromkeys(sorted(arms["variant"], key=lambda n: (len(n), n))))
    shapes = list(dict.fromkeys(arms["shape"]))
    width = 0.8 / max(1, len(shapes))
    for i, shape in enumerate(shapes):
        sub = arms[arms["shape"] == shape].set_index("variant").reindex(order)
        xs = [j + (i - (len(shapes) - 1) / 2) * width for j in range(len(order))]
        ax.bar(xs, sub["tflops"], width, yerr=[sub["tflops"] - sub["tflops_low"], sub["tflops_high"] - sub["tflops"]],
               capsize=2, label=shape)
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
    ax.set_ylabel("TFLOPS (median, 95% CI)")
    ax.legend(fontsize=7, frameon=False)
    plots.source_badge(ax, "device", f"bench harness, {method}")


VIEW = views.View(
    name=FAMILY, title="MXFP4 GEMM ladder", key_metrics=KEY_METRICS, draw_published=_draw_published,
    draw_measured=_draw_measured, measured_table="tflops.parquet",
    published_title="MXFP4 GEMM on MI355X as published in FlyDSL PR #990", published_figure="published_tflops",
    loo_title="Leave-one-out: the last rung minus one switch", short=lambda n: n.replace("gemm-", ""),
    summary_figures=("ladder_metrics", "leave_one_out", "published_tflops"),  # no "tflops": it drew the same
)
views.register(VIEW, SUMMARY_RUN)
modelled_figures.register(VIEW, SPEC.model_figures, SUMMARY_RUN)


def _register_step_figures() -> None:
    """Register the step figures of the ladder the kernel registry has now (e.g. a test's stub ladder)."""
    for name in STUDY.ladder_names():
        views.register_step(VIEW, STUDY.step_slug(name), baseline=STUDY.variant(name).predecessor is None)


# ============================================================================ the API notebooks call


def gemm_variants() -> dict:
    """The GEMM family's variants (ladder first, then leave-one-out), by name."""
    return STUDY.variants()


ladder_names, leave_one_out_names = STUDY.ladder_names, STUDY.leave_one_out_names
step_switch, step_index, step_slug, step_run_name = STUDY.step_switch, STUDY.step_index, STUDY.step_slug, \
    STUDY.step_run_name
intro_markdown, expectation_table = STUDY.intro_markdown, STUDY.expectation_table
metric_wide, isa_diff = tables.metric_wide, tables.isa_diff


def measure_pairs(pairs, shapes, iterations, out_dir, name="timing", settings=None, table="tflops.parquet"):
    """:func:`speed.measure_pairs` with the GEMM's flop count."""
    return speed.measure_pairs(pairs, shapes, iterations, out_dir, name, settings, table, flops=SPEC.flops)


def parse_shapes(shapes: Any, mode: str) -> list[tuple[int, int, int]]:
    """Shapes from a notebook parameter: None (the mode's defaults), ``"M,N,K"``, or a list of them."""
    return STUDY.parse_cases(shapes, mode)[None]


def verify_table(names: Sequence[str], shapes: Sequence[Sequence[int]], seeds: Sequence[int], mode: str) -> pd.DataFrame:
    """:func:`.correctness.verify_table` at a list of shapes."""
    return correctness.verify_table(STUDY, names, {None: [tuple(s) for s in shapes]}, seeds, mode)


def ladder_metrics(shape: Sequence[int] = ISA_SHAPE, names: Sequence[str] | None = None,
                   out_dir: str | Path | None = None) -> pd.DataFrame:
    """Compile every GEMM variant (or ``names``) at ``shape``; long table (``compile_seconds`` included)."""
    return STUDY.metrics(list(names) if names is not None else list(STUDY.variants()), {None: [tuple(shape)]}, out_dir)


def step_report(variant: str, baseline: str | None = None, shapes: Any = None, mode: str = "emulated",
                seeds: Sequence[int] = (0,), out_dir: str | Path | None = None, iterations: int = 100,
                isa_shape: Sequence[int] = ISA_SHAPE, render: bool = True, modelled: bool = False):
    """:meth:`engine.Study.step_report` with the GEMM notebook's parameters."""
    return STUDY.step_report(variant, baseline, shapes, mode, seeds, out_dir, iterations, [list(isa_shape)],
                             render, modelled)


def summary_report(out_dir: str | Path | None = None, mode: str = "emulated", isa_shape: Sequence[int] = ISA_SHAPE,
                   shapes: Any = None, seeds: Sequence[int] = (0,), iterations: int = 100,
                   verify_leave_one_out: bool = True, render: bool = True, fidelity: bool = False):
    """:meth:`engine.Study.summary_report` with the GEMM summary's parameters."""
    return STUDY.summary_report(out_dir, mode, [list(isa_shape)], shapes, seeds, iterations, verify_leave_one_out,
                                render, fidelity)


README_BEGIN, README_END = readme.markers(FAMILY)


def readme_table(metrics: pd.DataFrame, expectations: pd.DataFrame, correctness: pd.DataFrame | None = None) -> str:
    return readme.ladder_table(STUDY, metrics, expectations, correctness)


def replace_between_markers(text: str, table: str) -> str:
    return readme.replace_between_markers(text, table, README_BEGIN, README_END)


def main(argv: list[str] | None = None) -> int:
    """``python -m mxfp4_ablation.studies <command> --study gemm ...``."""
    from .cli import main as cli_main

    return cli_main(argv, study=FAMILY)


def __getattr__(name: str):
    if name == "EXPECTATIONS":  # lazily: the Switch records live with the kernel module (FlyDSL)
        return engine.expectations_of(FAMILY)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
