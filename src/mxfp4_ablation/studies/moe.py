"""The a4w4 MXFP4 MoE study: one configuration of the generic engine (:mod:`.engine`).

Two kernel families -- gemm1 (ladder ``moe1-v0`` .. ``moe1-v2``) and gemm2 (``moe2-v0`` .. ``moe2-v4``),
seed aiter PR #3828 -- in two **regimes**: decode (``block_m`` 16, atomic gemm2 epilogue) and prefill
(``block_m`` 128), so every table carries a ``regime`` column and every check is made in both. Shapes are
``(tokens, experts, hidden, inter, topk, block_m)``; the ISA is read at the Kimi-K2.5 TP=4 shape, the
emulator runs the small test problem. The seed published FlyDSL-time / HIP-time **ratios** for the
whole PR only (``experiments/reference/moe_published.csv``): shown labelled *published*, never as
measured.

Used by ``notebooks/moe/NN_<gemm>_<switch>.py`` (:func:`step_report`) and the MoE section of
``notebooks/summary.py`` (:func:`summary_report`). Everything here is configuration.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from .. import metrics, plots, shapes
from . import SUMMARY_RUN, correctness, engine, modelled_figures, modelled_section, speed, tables, views
from .tables import StudyError

#: Display name of each MoE kernel family.
GEMMS = {"moe1": "gemm1", "moe2": "gemm2"}
#: First notebook number of each gemm's ladder: notebooks/moe/10_gemm1_baseline.py, 20_gemm2_...
SLUG_BASE = {"moe1": 10, "moe2": 20}
#: Shapes are data (experiments/shapes.toml, group "moe"): regimes and their block_m, where the ISA is
#: read (Kimi-K2.5 TP=4: decode M=16, prefill M=4096), the emulator's problems (the small test MoE) and
#: an MI355X's (the Kimi shape at the seed's token counts).
REGIMES = tuple(shapes.regimes("moe"))
BLOCK_M = {r: int(v["block_m"]) for r, v in shapes.regimes("moe").items()}
ISA_CASES = {r: s[0] for r, s in shapes.by_regime("moe", "isa").items()}
EMULATED_CASES = {r: s[0] for r, s in shapes.by_regime("moe", "emulated").items()}
DEVICE_CASES = {r: s[0] for r, s in shapes.by_regime("moe", "device").items()}
#: The summary run's MoE tables (the GEMM half of the same run uses the unprefixed names).
SUMMARY_TABLES = {k: f"moe_{k}.parquet" for k in ("ladder", "expectations", "correctness", "published")}
#: The MoE metric set (:mod:`mxfp4_ablation.metrics`).
study_metrics = metrics.moe_metrics

#: Metrics the summary's ladder figure and README table show (in this order), with short labels.
KEY_METRICS = tuple({
    "kernarg_bytes": "kernarg bytes",
    "s_load": "s_load_dword*",
    "epi_valu": "epilogue VALU (gemm1)",
    "epi_v_ldexp_f32": "epilogue v_ldexp_f32",
    "sign_shifts": "s/v ashr (sign fix-ups)",
    "loop_s_waitcnt": "K-loop s_waitcnt",
    "v_mad_u64_u32": "v_mad_u64_u32",
    "instructions": "instructions",
}.items())

PUBLISHED = speed.Published(csv="moe_published.csv", columns=("kernel", "M", "stage", "ratio", "source", "note"),
                            stages=("before", "after"), what="MoE figures", source="aiter PR #3828", value="ratio",
                            kernels=tuple(GEMMS.values()), positive=True)
PUBLISHED_CSV, PUBLISHED_STAGES = PUBLISHED.csv, PUBLISHED.stages


# ============================================================================ the configuration


def case_text(case: Sequence[int]) -> str:
    """``"M=16 E=385 H=7168 I=512 topk=9 BM=16"``."""
    return " ".join(f"{k}={int(v)}" for k, v in zip(("M", "E", "H", "I", "topk", "BM"), case))


def _check_shape(regime: str, shape: tuple) -> None:
    if len(shape) != 6 or any(n <= 0 for n in shape):
        raise StudyError(f"a MoE shape is six positive integers tokens,experts,hidden,inter,topk,block_m; "
                         f"got {shape!r} for {regime}")
    if shape[5] != BLOCK_M[regime]:
        raise StudyError(f"{regime} runs block_m {BLOCK_M[regime]}, got {shape[5]}")


def _gate(ran: pd.DataFrame, study) -> tuple[str, str]:
    """Passed only when every check passed and every regime ran."""
    regimes = [r for r in REGIMES if r in set(ran["regime"])]
    return ", ".join(regimes), "passed" if len(regimes) == len(REGIMES) else "passed (one regime only)"


#: How many of the workgroups the first CU receives a modelled point simulates, per regime (block_m):
#: decode (16-row blocks) all of them (16 at M=16, cheap: the kernel is memory bound); prefill (128-row
#: blocks, ~40 s of simulation for the 11 the first CU gets at M=4096) the first 4.
MODEL_SAMPLE = {16: 16, 128: 4}
#: The largest token count the summary models. At M=16384 building the full Kimi inputs took the process
#: past 14 GB RSS (measured); the timing runs now map their inputs lazily (only the sampled workgroups'
#: experts are built, ``modelled._prepare``), so every token count of the sweep is modelled.
MODEL_MAX_TOKENS = 16384
#: The first and last rungs are modelled at the Kimi token counts up to :data:`MODEL_MAX_TOKENS` too.
MODEL_SWEEP = tuple(tuple(s) for r in shapes.by_regime("moe", "kimi_sweep").values() for s in r
                    if int(s[0]) <= MODEL_MAX_TOKENS)
#: Every rung is modelled at the largest prefill token count too (the ISA shapes' M=4096 gemm2 sits on the HBM
#: floor in the model, so its step deltas are 0 there; at M=16384 they are not)
MODEL_SWEEP_LADDER = tuple(s for s in MODEL_SWEEP if int(s[0]) == max(int(x[0]) for x in MODEL_SWEEP))


def _model_sample(shape) -> int:
    """:data:`MODEL_SAMPLE` by block_m (the shape's 6th number; without one, the kernels' own rule: decode
    below 4096 tokens; without a shape, decode's)."""
    if shape is None:
        return MODEL_SAMPLE[16]
    block_m = int(shape[5]) if len(shape) > 5 else (16 if int(shape[0]) < 4096 else 128)
    return MODEL_SAMPLE.get(block_m, MODEL_SAMPLE[16])


def _slug(study, name: str) -> str:
    family = study.variant(name).family
    return f"{SLUG_BASE[family] + study.step_index(name):02d}_{GEMMS[family]}_{study.step_switch(name) or 'baseline'}"


SPEC = engine.Spec(
    name="moe", title="MoE", families=dict(GEMMS),
    regimes=tuple(engine.Regime(r, ISA_CASES[r], (EMULATED_CASES[r],), (DEVICE_CASES[r],)) for r in REGIMES),
    shape_text=case_text, check_shape=_check_shape, expectations=engine.switch_expectations, key_metrics=KEY_METRICS,
    study_metrics=lambda text: study_metrics(text), gate=_gate, coverage_column="regimes", published=PUBLISHED,
    seed="aiter PR #3828",
    baseline_text="The baseline: the kernel with every optimisation switch off, as the seed's FlyDSL kernel stood "
                  "before aiter PR #3828. Every later step adds one switch.",
    measured_table="ratio.parquet", label_column="gemm", slug=_slug, summary_prefix="moe_",
    summary_figures=("ladder_metrics", "leave_one_out", "published_ratios"),
    model_sample=_model_sample, model_timeline=-1, model_loo_regime="prefill", model_sweep=MODEL_SWEEP,
    model_sweep_ladder=MODEL_SWEEP_LADDER,
    model_tables=modelled_section.ratio_tables, model_figures=("modelled_leave_one_out", "modelled_ratios"),
)
STUDY = engine.Study(SPEC)


# ============================================================================ the figures' part


def published(path: str | Path | None = None) -> pd.DataFrame:
    """aiter PR #3828's FlyDSL-time / HIP-time ratios (before / after the PR, per gemm and M)."""
    return PUBLISHED.read(path)


def published_wide(df: pd.DataFrame | None = None, gemm: str | None = None) -> pd.DataFrame:
    """One row per (gemm, M): ratio before, after, and the PR's gain (% less time)."""
    df = published() if df is None else df
    if gemm is not None:
        df = df[df["kernel"] == gemm]
    wide = df.pivot_table(index=["kernel", "M"], columns="stage", values="ratio", aggfunc="first")
    wide = wide[[s for s in PUBLISHED_STAGES if s in wide.columns]]
    if set(PUBLISHED_STAGES) <= set(wide.columns):
        wide["time_saved_pct"] = (1 - wide["after"] / wide["before"]) * 100
    wide.columns.name = None
    return wide.reset_index().rename(columns={"kernel": "gemm"})


def _write_published(path: Path) -> pd.DataFrame:
    return PUBLISHED.write(path)


def _draw_published(ax, pub: pd.DataFrame, gemm: str | None) -> None:
    wide = published_wide(pub, gemm)
    for i, (stage, colour) in enumerate(zip(PUBLISHED_STAGES, ("#b2abd2", "#e66101"))):
        xs = [j + (i - 0.5) * 0.4 for j in range(len(wide))]
        ax.bar(xs, wide[stage], 0.4, label=f"{stage} PR #3828", color=colour)
        for x, val in zip(xs, wide[stage]):
            ax.text(x, val, f"{val:.2f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(wide)), [f"{r.gemm}\nM={int(r.M)}" for r in wide.itertuples()], fontsize=7)
    ax.set_ylabel("FlyDSL time / HIP time")
    stages = list(PUBLISHED_STAGES)
    ax.set_ylim(0, float(wide[stages].max().max()) * 1.3)  # bars from 0: no truncated axis
    ax.legend(ncol=2, fontsize=7, frameon=False, loc="upper left")
    plots.source_badge(ax, "published", "aiter PR #3828 (MI355X); 1.0 = HIP parity")


def _draw_measured(ax, timing: pd.DataFrame) -> None:
    method = timing["method"].iloc[0]
    rows = timing[(timing["method"] == method) & (timing["arm"] == "B")].reset_index(drop=True)
    ys = list(range(len(rows)))
    ax.barh(ys, rows["ratio"], xerr=[rows["ratio"] - rows["ratio_low"], rows["ratio_high"] - rows["ratio"]],
            capsize=2, color=views.GREEN)
    ax.set_yticks(ys, [f"{r.pair}\n{r.shape}" for r in rows.itertuples()], fontsize=6)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time ratio step / predecessor (median, 95% CI; < 1 = faster)")
    plots.source_badge(ax, "device", f"bench harness, {method}")


VIEW = views.View(
    name="moe", title="MXFP4 MoE ladders (gemm1 1-v0..v2, gemm2 2-v0..v4)", key_metrics=KEY_METRICS,
    draw_published=_draw_published, draw_measured=_draw_measured, measured_table="ratio.parquet",
    published_title="a4w4 MoE on MI355X as published in aiter PR #3828", published_figure="published_ratios",
    loo_title="Leave-one-out: moe1-v2 / moe2-v4 with and without each switch", short=lambda n: n.replace("moe", ""),
    summary_prefix="moe_", label_of=lambda m: GEMMS.get(m["family"].iloc[0]) if "family" in m.columns else None,
    summary_figures=("ladder_metrics", "leave_one_out", "published_ratios"),
)
views.register(VIEW, SUMMARY_RUN)
modelled_figures.register(VIEW, SPEC.model_figures, SUMMARY_RUN)


def _register_step_figures() -> None:
    for name in STUDY.ladder_names():
        views.register_step(VIEW, STUDY.step_slug(name), baseline=STUDY.variant(name).predecessor is None)


# ============================================================================ the API notebooks call


def moe_variants(family: str | None = None) -> dict:
    """The MoE variants (gemm1 then gemm2; ladder first, then leave-one-out), by name."""
    return STUDY.variants(family)


_variant = STUDY.variant
ladder_names, leave_one_out_names = STUDY.ladder_names, STUDY.leave_one_out_names
step_switch, step_slug, step_run_name = STUDY.step_switch, STUDY.step_slug, STUDY.step_run_name
intro_markdown, expectation_table = STUDY.intro_markdown, STUDY.expectation_table
correctness_overview = functools.partial(correctness.correctness_overview, STUDY)
regime_isa_diff, metric_wide = tables.isa_diff, tables.metric_wide


def parse_cases(cases: Any, mode: str, isa_cases: bool = False) -> dict[str, tuple[int, ...]]:
    """Regime -> shape from a notebook parameter: None (the defaults), or a dict
    ``{"decode": "tokens,experts,hidden,inter,topk,block_m" | [...], "prefill": ...}``."""
    parsed = STUDY.parse_cases(cases, mode, isa=isa_cases)
    return {r: shapes[0] for r, shapes in parsed.items()}


def regime_metrics(names: Sequence[str], cases: dict, out_dir: str | Path | None = None,
                   roles: dict | None = None) -> pd.DataFrame:
    """Compile ``names`` in every regime of ``cases`` (offline gfx950); long table with ``regime``."""
    return STUDY.metrics(names, {r: [tuple(c)] for r, c in cases.items()}, out_dir, roles)


def verify_table(names: Sequence[str], cases: dict, seeds: Sequence[int], mode: str) -> pd.DataFrame:
    return correctness.verify_table(STUDY, names, {r: [tuple(c)] for r, c in cases.items()}, seeds, mode)


def step_report(variant: str, baseline: str | None = None, cases: Any = None, mode: str = "emulated",
                seeds: Sequence[int] = (0,), out_dir: str | Path | None = None, iterations: int = 100,
                isa_cases: Any = None, render: bool = True, modelled: bool = False):
    """:meth:`engine.Study.step_report` with the MoE notebook's parameters."""
    return STUDY.step_report(variant, baseline, cases, mode, seeds, out_dir, iterations, isa_cases, render, modelled)


def summary_report(out_dir: str | Path | None = None, mode: str = "emulated", isa_cases: Any = None,
                   cases: Any = None, seeds: Sequence[int] = (0,), iterations: int = 100,
                   verify_leave_one_out: bool = True, render: bool = True, fidelity: bool = False):
    """:meth:`engine.Study.summary_report` with the MoE summary's parameters."""
    return STUDY.summary_report(out_dir, mode, isa_cases, cases, seeds, iterations, verify_leave_one_out, render,
                                fidelity)


def __getattr__(name: str):
    if name == "EXPECTATIONS":  # lazily: the Switch records live with the kernel modules (FlyDSL)
        return {f: engine.expectations_of(f) for f in GEMMS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
