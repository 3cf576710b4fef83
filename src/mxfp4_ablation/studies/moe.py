"""The a4w4 MXFP4 MoE study: gemm1 (ladder ``moe1-v0`` .. ``moe1-v2``) and gemm2 (``moe2-v0`` ..
``moe2-v4``), their leave-one-out sets, and the evidence each variant carries.

Used by ``notebooks/moe/NN_<gemm>_<switch>.py`` (one per ladder step of each gemm, all calling
:func:`step_report`) and by the MoE section of ``notebooks/summary.py`` (:func:`summary_report`).
The GEMM study (:mod:`mxfp4_ablation.studies.gemm`) is the template; its generic pieces
(:func:`~mxfp4_ablation.studies.gemm.metric_wide`, :func:`~mxfp4_ablation.studies.gemm.isa_diff`,
the device A/B through the timing harness) are called, not copied. What differs here:

* every MoE kernel runs in two **regimes** -- decode (``block_m`` 16, atomic gemm2 epilogue) and
  prefill (``block_m`` 128) -- so every table carries a ``regime`` column and every check is made in
  both;
* shapes are ``(tokens, experts, hidden, inter, topk, block_m)``. The ISA is read at the Kimi-K2.5
  TP=4 shape (:data:`ISA_CASES`: decode M=16, prefill M=4096); the emulator runs the small test
  problem (:data:`EMULATED_CASES`);
* the seed (aiter PR #3828) published FlyDSL-time / HIP-time **ratios**, not TFLOPS, and only per
  gemm for the whole PR: :func:`published` loads them from
  ``experiments/reference/moe_published.csv``; they are shown labelled *published*, never as measured.

:data:`EXPECTATIONS` holds what each switch's docstring says its metric does;
:func:`expectation_table` checks it on the data in both regimes (ladder: step vs predecessor;
leave-one-out: full kernel vs full-minus-switch).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from .. import family, isa, metrics, paths, plots, provenance, results, toolchain, variants
from ..figures import figure
from . import gemm as G

#: Display name of each MoE kernel family (``variants.KERNEL_MODULES`` key -> gemm).
GEMMS = {"moe1": "gemm1", "moe2": "gemm2"}
#: First notebook number of each gemm's ladder: notebooks/moe/10_gemm1_baseline.py, 20_gemm2_...
SLUG_BASE = {"moe1": 10, "moe2": 20}
REGIMES = ("decode", "prefill")
#: Where the ISA is read: Kimi-K2.5 TP=4 (experts 385, hidden 7168, inter 512, topk 9).
ISA_CASES = {"decode": (16, 385, 7168, 512, 9, 16), "prefill": (4096, 385, 7168, 512, 9, 128)}
#: The emulator's problems: the small test MoE (8 experts, hidden 512, inter 256, topk 2).
EMULATED_CASES = {"decode": (16, 8, 512, 256, 2, 16), "prefill": (200, 8, 512, 256, 2, 128)}
#: On an MI355X: the Kimi shape at the seed's decode and prefill token counts.
DEVICE_CASES = {"decode": (16, 385, 7168, 512, 9, 16), "prefill": (4096, 385, 7168, 512, 9, 128)}
PUBLISHED_CSV = "moe_published.csv"
PUBLISHED_COLUMNS = ("kernel", "M", "stage", "ratio", "source", "note")
PUBLISHED_STAGES = ("before", "after")
SUMMARY_RUN = G.SUMMARY_RUN
#: The summary run's MoE tables (the GEMM half of the same run uses the unprefixed names).
SUMMARY_TABLES = {k: f"moe_{k}.parquet" for k in ("ladder", "expectations", "correctness", "published")}

#: What each switch should do to the ISA, per family, as ``(metric, "down" | "up")``; from the switch
#: docstrings in ``kernels/moe_gemm1.py`` / ``kernels/moe_gemm2.py`` (the seed's claims). Metric names
#: are :func:`study_metrics` keys.
EXPECTATIONS: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    f: {s.name: tuple((e.metric, e.direction) for e in s.expects) for s in family.get(f).switches.values()}
    for f in GEMMS}

#: Metrics the summary's ladder figure shows, with short labels (every switch's intended ones).
KEY_METRICS = (
    ("kernarg_bytes", "kernarg bytes"),
    ("s_load", "s_load_dword*"),
    ("epi_valu", "epilogue VALU (gemm1)"),
    ("epi_v_ldexp_f32", "epilogue v_ldexp_f32"),
    ("sign_shifts", "s/v ashr (sign fix-ups)"),
    ("loop_s_waitcnt", "K-loop s_waitcnt"),
    ("v_mad_u64_u32", "v_mad_u64_u32"),
    ("instructions", "instructions"),
)


class StudyError(G.StudyError):
    """Bad input to the MoE study; the message is meant for the user."""


# ============================================================================ variants


def moe_variants(family: str | None = None) -> dict[str, variants.Variant]:
    """The MoE variants (gemm1 then gemm2; ladder first, then leave-one-out), by name."""
    if family is not None and family not in GEMMS:
        raise StudyError(f"unknown MoE family {family!r} (known: {', '.join(GEMMS)})")
    out = {n: v for n, v in variants.all_variants().items()
           if v.family in GEMMS and (family is None or v.family == family)}
    if not out:
        raise StudyError("no MoE variants registered (kernels/moe_gemm1.py, moe_gemm2.py have no LADDER)")
    return out


def _variant(name: str) -> variants.Variant:
    known = moe_variants()
    if name not in known:
        raise StudyError(f"unknown MoE variant {name!r} (known: {', '.join(known)})")
    return known[name]


def ladder_names(family: str | None = None) -> list[str]:
    return [n for n, v in moe_variants(family).items() if v.kind == "ladder"]


def leave_one_out_names(family: str | None = None) -> list[str]:
    return [n for n, v in moe_variants(family).items() if v.kind == "leave-one-out"]


def step_switch(name: str) -> str | None:
    """The switch a variant adds to its predecessor (ladder) or drops from it (leave-one-out)."""
    v = _variant(name)
    if v.predecessor is None:
        return None
    changed = sorted(v.switches ^ _variant(v.predecessor).switches)
    if len(changed) != 1:
        raise StudyError(f"{name} differs from {v.predecessor} in {len(changed)} switches, not one")
    return changed[0]


def step_slug(name: str) -> str:
    """``NN_<gemm>_<switch>`` of a ladder step (``10_gemm1_baseline`` for moe1-v0)."""
    v = _variant(name)
    ladder = ladder_names(v.family)
    if name not in ladder:
        raise StudyError(f"{name!r} is not a MoE ladder step (ladders: {', '.join(ladder_names())})")
    return f"{SLUG_BASE[v.family] + ladder.index(name):02d}_{GEMMS[v.family]}_{step_switch(name) or 'baseline'}"


def step_run_name(name: str) -> str:
    """The run name :mod:`mxfp4_ablation.notebooks` gives the step's notebook."""
    return f"moe--{step_slug(name)}"


def switch_doc(family: str, switch: str) -> str:
    """The switch's docstring in the family's kernel module (the seed's claim, mechanism, metric)."""
    docs = getattr(importlib.import_module(variants.KERNEL_MODULES[family]), "SWITCHES", {})
    if switch not in docs:
        raise StudyError(f"unknown {GEMMS.get(family, family)} switch {switch!r} (known: {', '.join(docs)})")
    return " ".join(docs[switch].doc.split())


def intro_markdown(variant: str, baseline: str | None = None) -> str:
    """The step's prose for its notebook, built from the switch docstring (the seed's words)."""
    v = _variant(variant)
    baseline = baseline if baseline is not None else v.predecessor
    switch = step_switch(variant)
    gemm = GEMMS[v.family]
    lines = [f"**{variant}** ({gemm}) = switches {{{', '.join(sorted(v.switches)) or 'none'}}}; "
             f"compared against **{baseline or 'nothing (the baseline)'}**."]
    if switch is None:
        lines += ["", f"The {gemm} baseline: the kernel with every optimisation switch off, as the seed's FlyDSL "
                  "kernel stood before aiter PR #3828. Every later step adds one switch."]
        return "\n".join(lines)
    parts = G._doc_parts(switch_doc(v.family, switch))
    verb = "adds" if v.kind == "ladder" else "removes"
    lines += ["", f"This step {verb} `{switch}`: {parts['summary']}", ""]
    lines += [f"* {parts[k]}" for k in ("seed", "mechanism", "metric") if k in parts]
    module = variants.KERNEL_MODULES[v.family].rsplit(".", 1)[-1]
    lines += ["", f"*(Quoted from the `{switch}` docstring in `src/mxfp4_ablation/kernels/{module}.py`, which "
              "cites aiter PR #3828.)*"]
    exp = EXPECTATIONS[v.family].get(switch, ())
    if exp:
        lines += ["", "Checked below on the ISA, in both regimes: "
                  + ", ".join(f"`{m}` {d}" for m, d in exp) + "."]
    return "\n".join(lines)


# ============================================================================ static metrics


#: The MoE metric set (moved to :mod:`mxfp4_ablation.metrics`).
study_metrics = metrics.moe_metrics


def case_text(case: Sequence[int]) -> str:
    """``"M=16 E=385 H=7168 I=512 topk=9 BM=16"``."""
    return " ".join(f"{k}={int(v)}" for k, v in zip(("M", "E", "H", "I", "topk", "BM"), case))


def parse_cases(cases: Any, mode: str, isa_cases: bool = False) -> dict[str, tuple[int, ...]]:
    """Regime -> shape from a notebook parameter: None (the defaults), or a dict
    ``{"decode": "tokens,experts,hidden,inter,topk,block_m" | [...], "prefill": ...}``."""
    if cases is None:
        return dict(ISA_CASES if isa_cases else DEVICE_CASES if mode == "device" else EMULATED_CASES)
    if not isinstance(cases, dict) or not cases:
        raise StudyError(f"MoE shapes are a dict regime -> shape (regimes: {', '.join(REGIMES)}); got {cases!r}")
    out = {}
    for regime, shape in cases.items():
        if regime not in REGIMES:
            raise StudyError(f"unknown regime {regime!r} (known: {', '.join(REGIMES)})")
        try:
            shape = variants.parse_shape(shape) if isinstance(shape, str) else tuple(int(n) for n in shape)
        except (TypeError, ValueError) as err:
            raise StudyError(f"bad MoE shape {shape!r}: {err}") from None
        if len(shape) != 6 or any(n <= 0 for n in shape):
            raise StudyError(f"a MoE shape is six positive integers tokens,experts,hidden,inter,topk,block_m; "
                             f"got {shape!r} for {regime}")
        if shape[5] != (16 if regime == "decode" else 128):
            raise StudyError(f"{regime} runs block_m {16 if regime == 'decode' else 128}, got {shape[5]}")
        out[regime] = shape
    return out


def regime_metrics(names: Sequence[str], cases: dict[str, Sequence[int]], out_dir: str | Path | None = None,
                   roles: dict[str, str] | None = None) -> pd.DataFrame:
    """Compile ``names`` in every regime of ``cases`` (offline gfx950); long table
    ``variant, family, kind, switch, regime, shape, metric, value`` [, ``role``]. With ``out_dir`` the
    ``.s`` files go to ``out_dir/isa/<regime>/<variant>.s``."""
    rows = []
    for regime, case in cases.items():
        vs = [_variant(n) for n in names]
        arts = toolchain.compile_many([(v.target, v.params(tuple(case))) for v in vs])
        for v, art in zip(vs, arts):
            values = study_metrics(art.isa)
            values["compile_seconds"] = art.compile_seconds
            base = {"variant": v.name, "family": v.family, "kind": v.kind, "switch": step_switch(v.name) or "",
                    "regime": regime, "shape": case_text(case)}
            if roles:
                base["role"] = roles[v.name]
            rows += [{**base, "metric": k, "value": float(x) if x is not None else math.nan}
                     for k, x in values.items()]
            if out_dir is not None:
                results.atomic_write_text(Path(out_dir) / "isa" / regime / f"{v.name}.s", art.isa)
    return pd.DataFrame(rows)


def expectation_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Does each switch move its metric as :data:`EXPECTATIONS` says, in each regime of ``metrics``?

    Ladder steps compare the step (after) with its predecessor (before); leave-one-out variants
    compare the full kernel (after: the switch on) with ``<full>-no-<switch>`` (before: off).
    Columns: ``gemm, regime, comparison, variant, baseline, switch, metric, direction, before,
    after, delta, as_intended``. Variants missing from ``metrics`` are skipped.
    """
    cols = ["gemm", "regime", "comparison", "variant", "baseline", "switch", "metric", "direction", "before",
            "after", "delta", "as_intended"]
    rows = []
    for regime in [r for r in REGIMES if len(metrics) and r in set(metrics["regime"])]:
        wide = G.metric_wide(metrics[metrics["regime"] == regime])
        for name, v in moe_variants().items():
            if v.predecessor is None or name not in wide.index or v.predecessor not in wide.index:
                continue
            switch = step_switch(name)
            off, on = (v.predecessor, name) if v.kind == "ladder" else (name, v.predecessor)
            for metric, direction in EXPECTATIONS[v.family].get(switch, ()):
                before, after = (float(wide.at[n, metric]) if metric in wide.columns else math.nan for n in (off, on))
                rows.append({"gemm": GEMMS[v.family], "regime": regime, "comparison": v.kind, "variant": name,
                             "baseline": v.predecessor, "switch": switch, "metric": metric,
                             "direction": direction, "before": before, "after": after, "delta": after - before,
                             "as_intended": G._moved(before, after, direction)})
    return pd.DataFrame(rows, columns=cols)


def regime_isa_diff(metrics: pd.DataFrame, baseline: str, variant: str) -> pd.DataFrame:
    """:func:`gemm.isa_diff` per regime: ``regime, metric, baseline, variant, delta, ratio``."""
    parts = []
    for regime in [r for r in REGIMES if r in set(metrics["regime"])]:
        diff = G.isa_diff(metrics[metrics["regime"] == regime], baseline, variant)
        parts.append(diff.assign(regime=regime)[["regime"] + list(diff.columns)])
    return pd.concat(parts, ignore_index=True)


# ============================================================================ correctness


def verify_table(names: Sequence[str], cases: dict[str, Sequence[int]], seeds: Sequence[int],
                 mode: str) -> pd.DataFrame:
    """:func:`gemm.verify_table` per regime: the same columns plus ``regime`` (static mode: not run)."""
    parts = []
    for name in names:
        _variant(name)
    for regime, case in cases.items():
        table = G.verify_table(names, [case], seeds, mode)
        parts.append(table.assign(regime=regime, shape=case_text(case) if mode != "static" else ""))
    return pd.concat(parts, ignore_index=True)[["regime"] + list(parts[0].columns[:-1])]


def correctness_overview(checks: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: checks run / passed, regimes, worst cosine, hazards, status.

    ``status`` is ``passed`` only when every check passed and both regimes (decode and prefill) ran.
    """
    cols = ["gemm", "variant", "checks", "passed", "regimes", "min_cosine", "hazards", "status"]
    rows = []
    for name, v in moe_variants().items():
        sub = checks[(checks["variant"] == name) & (checks["status"] != "not run")] if len(checks) else checks
        if len(checks) == 0 or name not in set(checks["variant"]):
            continue
        npass = int((sub["status"] == "passed").sum())
        regimes = [r for r in REGIMES if r in set(sub["regime"])]
        status = ("not run" if sub.empty else "FAILED" if npass < len(sub)
                  else "passed" if len(regimes) == len(REGIMES) else "passed (one regime only)")
        rows.append({"gemm": GEMMS[v.family], "variant": name, "checks": int(len(sub)), "passed": npass,
                     "regimes": ", ".join(regimes), "min_cosine": float(sub["cosine"].min()) if npass else math.nan,
                     "hazards": float(sub["hazards"].sum()) if npass else math.nan, "status": status})
    return pd.DataFrame(rows, columns=cols)


# ============================================================================ published ratios


def published(path: str | Path | None = None) -> pd.DataFrame:
    """aiter PR #3828's FlyDSL-time / HIP-time ratios (before / after the PR, per gemm and M)."""
    path = Path(path) if path is not None else paths.reference_dir() / PUBLISHED_CSV
    if not path.is_file():
        raise StudyError(f"no published MoE figures at {path}")
    df = pd.read_csv(path)
    missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
    if missing:
        raise StudyError(f"{path.name} lacks column(s) {', '.join(missing)}")
    bad = sorted(set(df["stage"]) - set(PUBLISHED_STAGES)) + sorted(set(df["kernel"]) - set(GEMMS.values()))
    if bad:
        raise StudyError(f"{path.name}: unknown stage/kernel {', '.join(map(str, bad))} "
                         f"(stages: {', '.join(PUBLISHED_STAGES)}; kernels: {', '.join(GEMMS.values())})")
    if df["source"].isna().any() or (df["source"].astype(str).str.strip() == "").any():
        raise StudyError(f"{path.name}: every row needs a source")
    if not (df["ratio"] > 0).all():
        raise StudyError(f"{path.name}: every ratio must be a positive number")
    return df[list(PUBLISHED_COLUMNS)]


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
    df = published()
    prov = provenance.collect("published", settings={"file": f"experiments/reference/{PUBLISHED_CSV}"})
    results.write_table(df, path, prov)
    return df


# ============================================================================ one ladder step


@dataclass
class StepReport:
    """What :func:`step_report` wrote, as DataFrames (the same data as the run folder's parquet)."""

    variant: str
    baseline: str | None
    switch: str | None
    mode: str
    out_dir: Path
    cases: dict
    isa_cases: dict
    verify: pd.DataFrame
    metrics: pd.DataFrame
    isa_diff: pd.DataFrame | None
    expectations: pd.DataFrame
    timing: pd.DataFrame | None
    figures: list = field(default_factory=list)
    speed_note: str = ""

    @property
    def gemm(self) -> str:
        return GEMMS[_variant(self.variant).family]

    def show(self) -> None:
        """Display the step in a notebook: prose, correctness, ISA diff, expectations, speed, figures."""
        from IPython.display import SVG, Markdown, display

        display(Markdown(intro_markdown(self.variant, self.baseline)))
        display(Markdown(f"## Correctness ({self.mode} mode), both regimes"))
        display(self.verify)
        where = "; ".join(f"{r}: {case_text(c)}" for r, c in self.isa_cases.items())
        display(Markdown(f"## ISA (static, offline gfx950 compile) at {where}"))
        if self.isa_diff is None:
            display(G.metric_wide(self.metrics.assign(variant=self.metrics["regime"])).T)
        else:
            changed = self.isa_diff[self.isa_diff["delta"].fillna(0) != 0]
            display(Markdown(f"Metrics that changed from {self.baseline} to {self.variant} "
                             f"({len(changed)} of {len(self.isa_diff)} regime x metric):"))
            display(changed.set_index(["regime", "metric"]))
            display(Markdown("Does the switch move its metric the intended way (both regimes)?"))
            display(self.expectations)
        display(Markdown("## Speed"))
        if self.timing is not None:
            display(self.timing)
        else:
            note = (f"**Not timed:** {self.speed_note}" if self.speed_note else
                    "No gfx950 GPU in this run, so nothing was timed.")
            display(Markdown(note + f" aiter PR #3828 reports {self.gemm}'s FlyDSL time / HIP time only for the "
                             "whole PR, not per step; its figures, labelled *published*:"))
            display(published_wide(gemm=self.gemm))
        for path in self.figures:
            display(SVG(filename=str(path)))


def step_report(variant: str, baseline: str | None = None, cases: Any = None, mode: str = "emulated",
                seeds: Sequence[int] = (0,), out_dir: str | Path | None = None, iterations: int = 100,
                isa_cases: Any = None, render: bool = True) -> StepReport:
    """Everything one MoE ladder step's notebook shows, written to ``out_dir`` with provenance.

    * ``verify.parquet``: :func:`runner.verify` of ``variant`` in both regimes x ``seeds``;
    * ``metrics.parquet``: :func:`study_metrics` of ``variant`` and ``baseline`` at the Kimi shape,
      decode and prefill (``role`` = variant / baseline), their ``.s`` under ``isa/<regime>/``;
    * ``isa_diff.parquet`` and ``expectations.parquet`` (when there is a baseline);
    * ``published.parquet`` (aiter PR #3828's ratios) and, in device mode, the harness's tables
      (``timing*.parquet``, ``ratio.parquet``).
    """
    from ..modes import MODES

    if mode not in MODES:
        raise StudyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    v = _variant(variant)
    baseline = v.predecessor if baseline is None else baseline
    if baseline is not None and _variant(baseline).family != v.family:
        raise StudyError(f"{variant} ({GEMMS[v.family]}) cannot be compared with {baseline} "
                         f"({GEMMS[_variant(baseline).family]})")
    run_cases = parse_cases(cases, mode)
    isa_at = parse_cases(isa_cases, mode, isa_cases=True)
    seeds = [int(s) for s in (seeds if isinstance(seeds, (list, tuple)) else [seeds])]
    if not seeds:
        raise StudyError("give at least one seed")
    out_dir = Path(out_dir) if out_dir is not None else paths.cache_dir() / "scratch" / "moe" / variant
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {"variant": variant, "baseline": baseline, "seeds": seeds, "iterations": int(iterations),
                "cases": {r: list(c) for r, c in run_cases.items()},
                "isa_cases": {r: list(c) for r, c in isa_at.items()}}
    static_prov = provenance.collect("static", settings=settings)

    checks = verify_table([variant], run_cases, seeds, mode)
    results.write_table(checks, out_dir / "verify.parquet", provenance.collect(mode, settings=settings))
    names = [variant] + ([baseline] if baseline else [])
    roles = {variant: "variant", **({baseline: "baseline"} if baseline else {})}
    metrics = regime_metrics(names, isa_at, out_dir, roles=roles)
    results.write_table(metrics, out_dir / "metrics.parquet", static_prov)
    diff = None
    if baseline:
        diff = regime_isa_diff(metrics, baseline, variant)
        results.write_table(diff, out_dir / "isa_diff.parquet", static_prov)
    expectations = expectation_table(metrics if baseline else metrics.iloc[0:0])
    results.write_table(expectations, out_dir / "expectations.parquet", static_prov)
    _write_published(out_dir / "published.parquet")

    timing, speed_note = None, ""
    if mode == "device" and baseline:
        timing, speed_note = G._measure_or_why([(baseline, variant)], list(run_cases.values()), iterations,
                                               out_dir, table="ratio.parquet")

    report = StepReport(variant, baseline, step_switch(variant), mode, out_dir, run_cases, isa_at, checks, metrics,
                        diff, expectations, timing, speed_note=speed_note)
    if render and v.kind == "ladder":
        from .. import figures

        slug = step_slug(variant)
        if baseline:
            report.figures += figures.render(f"moe/{slug}_isa_diff", out_dir)[:1]
        report.figures += figures.render(f"moe/{slug}_speed", out_dir)[:1]
    return report


# ============================================================================ the summary


@dataclass
class SummaryReport:
    metrics: pd.DataFrame
    expectations: pd.DataFrame
    correctness: pd.DataFrame
    out_dir: Path
    timing: pd.DataFrame | None = None  # the step runs' measured A/B ratios (device mode only)
    figures: list = field(default_factory=list)

    def ladder_table(self, gemm: str, regime: str) -> pd.DataFrame:
        """Every metric per ladder step of one gemm in one regime (rows: metrics, columns: steps)."""
        family = {g: f for f, g in GEMMS.items()}.get(gemm)
        if family is None or regime not in REGIMES:
            raise StudyError(f"ladder_table takes a gemm ({', '.join(GEMMS.values())}) and a regime "
                             f"({', '.join(REGIMES)}); got {gemm!r}, {regime!r}")
        m = self.metrics
        sub = m[(m["regime"] == regime) & (m["family"] == family) & (m["kind"] == "ladder")]
        return G.metric_wide(sub).T

    def leave_one_out_table(self) -> pd.DataFrame:
        """Each ``<full>-no-<switch>`` against the full kernel: the switch's own metrics, both regimes."""
        e = self.expectations
        return e[e["comparison"] == "leave-one-out"].reset_index(drop=True)


def _latest_step_tables(table: str) -> list[pd.DataFrame]:
    """``table`` from the latest run of each ladder step's notebook that wrote one."""
    return results.latest_tables([step_run_name(name) for name in ladder_names()], table)


def summary_report(out_dir: str | Path | None = None, mode: str = "emulated", isa_cases: Any = None,
                   cases: Any = None, seeds: Sequence[int] = (0,), verify_leave_one_out: bool = True,
                   render: bool = True) -> SummaryReport:
    """The MoE half of ``notebooks/summary.py``: compile every MoE variant in both regimes, check every
    switch against its intended metric (ladder and leave-one-out), gather the step runs' correctness
    and verify the leave-one-out variants; writes the :data:`SUMMARY_TABLES`."""
    out_dir = Path(out_dir) if out_dir is not None else paths.cache_dir() / "scratch" / "moe" / SUMMARY_RUN
    out_dir.mkdir(parents=True, exist_ok=True)
    isa_at = parse_cases(isa_cases, mode, isa_cases=True)
    run_cases = parse_cases(cases, mode)
    seeds = [int(s) for s in (seeds if isinstance(seeds, (list, tuple)) else [seeds])]
    settings = {"isa_cases": {r: list(c) for r, c in isa_at.items()}, "seeds": seeds,
                "cases": {r: list(c) for r, c in run_cases.items()}, "verify_leave_one_out": bool(verify_leave_one_out)}
    static_prov = provenance.collect("static", settings=settings)
    metrics = regime_metrics(list(moe_variants()), isa_at, out_dir)
    results.write_table(metrics, out_dir / SUMMARY_TABLES["ladder"], static_prov)
    expectations = expectation_table(metrics)
    results.write_table(expectations, out_dir / SUMMARY_TABLES["expectations"], static_prov)

    checks, timing = _latest_step_tables("verify.parquet"), _latest_step_tables("ratio.parquet")
    if verify_leave_one_out:
        checks.append(verify_table(leave_one_out_names(), run_cases, seeds, mode))
    merged = pd.concat(checks, ignore_index=True) if checks else pd.DataFrame(columns=["variant", "status", "regime"])
    correctness = correctness_overview(merged)
    results.write_table(correctness, out_dir / SUMMARY_TABLES["correctness"],
                        provenance.collect(mode, settings=settings))
    _write_published(out_dir / SUMMARY_TABLES["published"])
    report = SummaryReport(metrics, expectations, correctness, out_dir,
                           pd.concat(timing, ignore_index=True) if timing else None)
    if render:
        from .. import figures

        for name in ("ladder_metrics", "leave_one_out", "published_ratios"):
            report.figures += figures.render(f"moe/{name}", out_dir)[:1]
    return report


# ============================================================================ figures


def _read(run_dir: Path, table: str) -> pd.DataFrame:
    return results.read_table(Path(run_dir) / table)[0]


def _shapes_detail(df: pd.DataFrame) -> str:
    """``offline gfx950 compile, E=385 H=7168 I=512 topk=9; decode M=16, prefill M=4096``."""
    if not len(df):
        return "offline gfx950 compile"
    shapes = df.drop_duplicates("regime").set_index("regime")["shape"]
    common = shapes.iloc[0].split(" ")[1:5]
    tokens = ", ".join(f"{r} {shapes[r].split(' ')[0]}" for r in REGIMES if r in shapes)
    return f"offline gfx950 compile, {' '.join(common)}; {tokens}"


def _relative(before: float, after: float) -> float:
    """Change from ``before`` to ``after`` in percent (+-100 when ``before`` is 0 and ``after`` is not)."""
    if before and not math.isnan(before):
        return (after / before - 1) * 100
    return 0.0 if not after else math.copysign(100.0, after)


def _draw_changes(ax, rows: pd.DataFrame, before: str, after: str, labels: list[str]) -> None:
    """Horizontal bars of the % change ``before`` -> ``after`` per row; green as intended, red not."""
    rel = [_relative(getattr(r, before), getattr(r, after)) for r in rows.itertuples()]
    y = list(range(len(rows)))
    ax.barh(y, rel, color=["#1b7837" if ok else "#b2182b" for ok in rows["as_intended"]])
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.8)
    for yi, r, x in zip(y, rows.itertuples(), rel):
        ax.text(x, yi, f" {G._fmt(getattr(r, before))} → {G._fmt(getattr(r, after))} ", va="center",
                ha="left" if x >= 0 else "right", fontsize=6)
    lim = max([abs(v) for v in rel] + [1.0]) * 1.9
    ax.set_xlim(-lim, lim)
    ax.tick_params(axis="x", labelsize=6)


def draw_switch_metrics(run_dir: Path):
    """The metrics the step's switch should move: % change predecessor -> step, decode and prefill."""
    import matplotlib.pyplot as plt

    exp = _read(run_dir, "expectations.parquet")
    metrics = _read(run_dir, "metrics.parquet")
    variant = metrics.loc[metrics["role"] == "variant", "variant"].iloc[0]
    baseline = metrics.loc[metrics["role"] == "baseline", "variant"].iloc[0]
    n = max(1, exp.groupby("regime").size().max() if len(exp) else 1)
    fig, axes = plt.subplots(1, len(REGIMES), figsize=(7.6, 0.3 * n + 1.5), squeeze=False)
    for ax, regime in zip(axes[0], REGIMES):
        sub = exp[exp["regime"] == regime].reset_index(drop=True)
        if sub.empty:
            ax.text(0.5, 0.5, "no expectation for this switch", ha="center", va="center", transform=ax.transAxes)
        else:
            _draw_changes(ax, sub, "before", "after", [f"{m} ({d})" for m, d in zip(sub["metric"], sub["direction"])])
        ax.set_title(regime, loc="left", fontsize=8)
        ax.set_xlabel(f"change from {baseline} (%)", fontsize=7)
    switch = exp["switch"].iloc[0] if len(exp) else "?"
    fig.suptitle(f"{variant} vs {baseline}: what `{switch}` should move (green = as intended)", x=0.01, ha="left",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.8))
    badge = fig.add_axes((0.0, 0.84, 0.99, 0.01))
    badge.axis("off")
    plots.source_badge(badge, "static", _shapes_detail(metrics))
    return fig


def _draw_published(ax, pub: pd.DataFrame, gemm: str | None) -> None:
    wide = published_wide(pub, gemm)
    labels = [f"{r.gemm}\nM={int(r.M)}" for r in wide.itertuples()]
    for i, (stage, colour) in enumerate(zip(PUBLISHED_STAGES, ("#b2abd2", "#e66101"))):
        xs = [j + (i - 0.5) * 0.4 for j in range(len(wide))]
        ax.bar(xs, wide[stage], 0.4, label=f"{stage} PR #3828", color=colour)
        for x, val in zip(xs, wide[stage]):
            ax.text(x, val, f"{val:.2f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(wide)), labels, fontsize=7)
    ax.set_ylabel("FlyDSL time / HIP time")
    low = float(wide[list(PUBLISHED_STAGES)].min().min())
    ax.set_ylim(min(0.95, low - 0.02), float(wide[list(PUBLISHED_STAGES)].max().max()) + 0.04)
    ax.legend(ncol=2, fontsize=7, frameon=False, loc="upper right", bbox_to_anchor=(1.0, 0.93))
    plots.source_badge(ax, "published", "aiter PR #3828 (MI355X); 1.0 = HIP parity")


def _draw_measured(ax, timing: pd.DataFrame) -> None:
    method = timing["method"].iloc[0]
    rows = timing[(timing["method"] == method) & (timing["arm"] == "B")].reset_index(drop=True)
    ys = list(range(len(rows)))
    err = [rows["ratio"] - rows["ratio_low"], rows["ratio_high"] - rows["ratio"]]
    ax.barh(ys, rows["ratio"], xerr=err, capsize=2, color="#1b7837")
    ax.set_yticks(ys, [f"{r.pair}\n{r.shape}" for r in rows.itertuples()], fontsize=6)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time ratio step / predecessor (median, 95% CI; < 1 = faster)")
    plots.source_badge(ax, "device", f"bench harness, {method}")


def draw_speed(run_dir: Path):
    """Measured A/B time ratio where the run timed anything, else PR #3828's published ratios."""
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    if (run_dir / "ratio.parquet").is_file():
        _draw_measured(ax, _read(run_dir, "ratio.parquet"))
        ax.set_title("A/B time ratio, measured", loc="left", pad=14)
    else:
        metrics = _read(run_dir, "metrics.parquet")
        gemm = GEMMS[metrics["family"].iloc[0]]
        _draw_published(ax, _read(run_dir, "published.parquet"), gemm)
        ax.set_title(f"Not timed here (no MI355X): {gemm} before/after the whole aiter PR #3828, as published",
                     loc="left", pad=14, fontsize=8)
    fig.tight_layout()
    return fig


@figure("moe/ladder_metrics", run=SUMMARY_RUN)
def draw_ladder_metrics(run_dir: Path):
    """Small multiples: each key metric along both ladders, decode and prefill side by side."""
    import matplotlib.pyplot as plt

    metrics = _read(run_dir, SUMMARY_TABLES["ladder"])
    ladder = metrics[metrics["kind"] == "ladder"]
    steps = list(dict.fromkeys(ladder["variant"]))
    keys = [(k, label) for k, label in KEY_METRICS if k in set(ladder["metric"])]
    cols = 4
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(10.4, 2.1 * rows + 0.7), squeeze=False)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.1, top=1 - 0.8 / (2.1 * rows + 0.7), hspace=0.6, wspace=0.3)
    for ax, (key, label) in zip(axes.flat, keys):
        for i, (regime, colour) in enumerate(zip(REGIMES, ("#5e3c99", "#e66101"))):
            sub = ladder[(ladder["metric"] == key) & (ladder["regime"] == regime)].set_index("variant")["value"]
            vals = sub.reindex(steps).astype(float).fillna(0)
            ax.bar([x + (i - 0.5) * 0.4 for x in range(len(steps))], vals, 0.4, color=colour, label=regime)
        ax.set_xticks(range(len(steps)), [s.replace("moe", "") for s in steps], fontsize=5, rotation=45)
        ax.set_title(label, fontsize=7, loc="left")
        ax.tick_params(axis="y", labelsize=6)
    axes.flat[0].legend(fontsize=6, frameon=False)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    fig.suptitle("MXFP4 MoE ladders (gemm1 1-v0..v2, gemm2 2-v0..v4): static ISA metrics per step", x=0.01,
                 ha="left", fontsize=10)
    badge = fig.add_axes((0.0, 1 - 0.6 / (2.1 * rows + 0.7), 0.99, 0.01))
    badge.axis("off")
    plots.source_badge(badge, "static", _shapes_detail(metrics))
    return fig


@figure("moe/leave_one_out", run=SUMMARY_RUN)
def draw_leave_one_out(run_dir: Path):
    """For each switch and regime: its intended metrics in the full kernel without and with it."""
    import matplotlib.pyplot as plt

    exp = _read(run_dir, SUMMARY_TABLES["expectations"])
    loo = exp[exp["comparison"] == "leave-one-out"].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8.8, max(1.6, 0.22 * len(loo) + 1.0)))
    if loo.empty:
        ax.text(0.5, 0.5, "no leave-one-out variants", ha="center", va="center", transform=ax.transAxes)
    else:
        labels = [f"{r.gemm} {r.regime}, {r.switch}: {r.metric}{' (up)' if r.direction == 'up' else ''}"
                  for r in loo.itertuples()]
        _draw_changes(ax, loo, "before", "after", labels)
    ax.set_xlabel("change from <full>-no-<switch> to the full kernel (%): what the switch is still worth; "
                  "(up) metrics should rise, the rest fall; green = as intended", fontsize=7)
    ax.set_title("Leave-one-out: moe1-v2 / moe2-v4 with and without each switch", loc="left", pad=14)
    plots.source_badge(ax, "static", _shapes_detail(_read(run_dir, SUMMARY_TABLES["ladder"])))
    fig.tight_layout()
    return fig


@figure("moe/published_ratios", run=SUMMARY_RUN)
def draw_published_ratios(run_dir: Path):
    """aiter PR #3828's FlyDSL / HIP time ratios per gemm and M, before and after the PR."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    _draw_published(ax, _read(run_dir, SUMMARY_TABLES["published"]), None)
    ax.set_title("a4w4 MoE on MI355X as published in aiter PR #3828", loc="left", pad=14)
    fig.tight_layout()
    return fig


def _register_step_figures() -> None:
    """``moe/NN_<gemm>_<switch>_isa_diff`` and ``..._speed`` for each ladder step of both gemms."""
    try:
        names = ladder_names()
    except StudyError:
        return
    for name in names:
        slug, run = step_slug(name), step_run_name(name)
        if _variant(name).predecessor is not None:
            figure(f"moe/{slug}_isa_diff", run=run)(draw_switch_metrics)
        figure(f"moe/{slug}_speed", run=run)(draw_speed)


_register_step_figures()
