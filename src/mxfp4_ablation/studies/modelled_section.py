"""The modelled section of a step notebook and of the summary: what each step buys, *modelled*.

:func:`step_section` models a step and its predecessor at the study's device shapes and writes
``modelled_sweep / _delta / _cycles / _timeline / _verdict.parquet`` into the step's run folder;
:func:`summary_section` models the summary's points (:func:`summary_plan`) and writes the deltas,
leave-one-out and the family's own tables (:attr:`.engine.Spec.model_tables`: GEMM the waterfall and
PR #990's order of impact, :func:`ladder_tables`; MoE the last / first ratios, :func:`ratio_tables`)
into ``<run>/modelled-<study>/``. Both draw their figures (:mod:`.modelled_figures`) from those tables.
The README block of the section (the ladder tables' modelled columns, the findings) reads the summary
run's tables alone: :func:`readme_columns`, :func:`readme_note`, :func:`readme_findings`.

``python -m mxfp4_ablation.studies modelled [--study gemm|moe] [--quick]`` runs the summary's sweep
from the command line (:func:`main`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from .. import provenance, results
from .modelled_runs import LABEL, AblationError, shape_text, sweep, timeline
from .modelled_tables import (cycles_table, error_band, findings, leave_one_out, model_detail, moe_ratios,
                              order_of_impact, step_deltas, verdicts, waterfall)

def _prov(settings: dict) -> dict:
    return provenance.collect("modelled", settings={"kind": LABEL, **settings})


def _write(df: pd.DataFrame, path: Path, settings: dict) -> None:
    results.write_table(df, path, _prov(settings))


def isa_only() -> bool:
    """``MXFP4_MODEL_SHAPES=isa``: model at the ISA shapes only (GEMM 8192^3; MoE M=16 and M=4096), for a
    machine where the full grid is too slow; default ``all``."""
    import os

    value = os.environ.get("MXFP4_MODEL_SHAPES", "all")
    if value not in ("all", "isa"):
        raise AblationError(f"MXFP4_MODEL_SHAPES must be 'all' or 'isa', got {value!r}")
    return value == "isa"


def default_shapes(study) -> list[tuple]:
    """Where a step is modelled: every regime's device shapes (GEMM: PR #990's four; MoE: Kimi-K2.5 TP=4
    at M=16, decode, and M=4096, prefill); with :func:`isa_only` the first of each regime."""
    only = isa_only()
    return [tuple(s) for r in study.spec.regimes for s in (r.device[:1] if only else r.device)]


@dataclass
class StepModel:
    """A step's modelled speed section (the same data as the run folder's ``modelled_*.parquet``)."""

    variant: str
    baseline: str | None
    out_dir: Path
    sweep: pd.DataFrame
    deltas: pd.DataFrame
    cycles: pd.DataFrame
    timeline: pd.DataFrame
    verdicts: pd.DataFrame
    band: dict
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def table(self) -> pd.DataFrame:
        cols = ["shape", "baseline_tflops", "tflops", "baseline_us", "us", "delta_pct", "delta_low", "delta_high",
                "resolved", "bound", "model_version", "clock_ghz", "label"]
        return self.deltas[cols]

    def verdict_lines(self) -> str:
        return "\n".join(f"* {r.shape}: {r.verdict}" for r in self.verdicts.itertuples())

    def figure(self, kind: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[kind]))


def step_section(step, shapes: Sequence[Sequence[int]] | None = None, timeline_shape: Sequence[int] | None = None,
                 render: bool = True) -> StepModel:
    """Model a step notebook's variant and its predecessor; write ``modelled_sweep / _delta / _cycles
    / _timeline / _verdict.parquet`` into the step's run folder and draw its two figures."""
    t0 = time.perf_counter()
    study, variant, baseline = step.study, step.variant, step.baseline
    shapes = [tuple(s) for s in (shapes or default_shapes(study))]
    names = [n for n in (baseline, variant) if n]
    tl_shape = tuple(timeline_shape or shapes[study.spec.model_timeline])
    # the timelines first: a timeline's timing run also gives the sweep its point at that shape
    tl = pd.concat([timeline(n, tl_shape) for n in names], ignore_index=True)
    sw = sweep([(n, s) for s in shapes for n in names])
    band = error_band()
    switch = step.switch
    deltas = step_deltas(sw, [(baseline, variant)], {variant: switch})
    record = study.switch_record(study.variant(variant).family, switch) if switch else None
    claims = {variant: getattr(record, "claim", "") if record else ""}
    ver = verdicts(deltas, claims)
    cyc = cycles_table(sw[sw["shape"] == shape_text(tl_shape)])
    out = Path(step.out_dir)
    settings = {"variant": variant, "baseline": baseline, "shapes": [shape_text(s) for s in shapes],
                "error_band": band["rule"]}
    for name, df in (("modelled_sweep", sw), ("modelled_delta", deltas), ("modelled_cycles", cyc),
                     ("modelled_timeline", tl), ("modelled_verdict", ver)):
        _write(df, out / f"{name}.parquet", settings)
    sm = StepModel(variant, baseline, out, sw, deltas, cyc, tl, ver, band, seconds=round(time.perf_counter() - t0, 1))
    if render:
        from .. import figures

        slug = study.step_slug(variant)
        for kind in ("speed_delta", "speed_cycles"):
            sm.figures[kind] = figures.render(f"{study.name}/{slug}_{kind}", out)[0]
    return sm


@dataclass
class SummaryModel:
    """The summary's modelled tables (the same data as ``<run>/modelled-<study>/*.parquet``)."""

    study: str
    out_dir: Path
    sweep: pd.DataFrame
    deltas: pd.DataFrame
    tables: dict
    stats: dict
    band: dict
    figures: dict = field(default_factory=dict)
    seconds: float = 0.0

    def figure(self, name: str):
        from IPython.display import SVG

        return SVG(filename=str(self.figures[name]))

    def findings(self) -> list[str]:
        """Sentences generated from the tables (for the README and the closing note)."""
        return findings(self.study, self.tables, self.stats, self.band)


def _ladder_pairs(study, family: str) -> list[tuple]:
    names = study.ladder_names(family)
    return [(None, names[0])] + list(zip(names[:-1], names[1:]))


def summary_plan(study) -> list[tuple[str, tuple]]:
    """Which (variant, shape) points the summary models, per family: every rung at
    :func:`default_shapes`, the leave-one-out variants at the first device shape of the study's
    :attr:`~.engine.Spec.model_loo_regime`, and the first and last rungs at its
    :attr:`~.engine.Spec.model_sweep` shapes (MoE: the Kimi token counts; none with :func:`isa_only`), every
    rung at those of them in :attr:`~.engine.Spec.model_sweep_ladder`."""
    shapes = default_shapes(study)
    loo_at = [tuple(s) for r in study.spec.regimes if r.name == study.spec.model_loo_regime for s in r.device[:1]]
    sweep_at = [] if isa_only() else [tuple(s) for s in study.spec.model_sweep]
    every = {tuple(s) for s in study.spec.model_sweep_ladder}
    points = []
    for fam in study.spec.families:
        ladder = study.ladder_names(fam)
        points += [(n, s) for s in shapes for n in ladder]
        points += [(n, s) for s in loo_at for n in study.leave_one_out_names(fam)]
        points += [(n, s) for s in sweep_at for n in (ladder if s in every else (ladder[0], ladder[-1]))]
    return list(dict.fromkeys(points))


def summary_section(study, out_dir, points: Sequence | None = None, render: bool = True) -> SummaryModel:
    """Model the summary's points (:func:`summary_plan`), write the deltas, the leave-one-out table and
    the family's own (:attr:`~.engine.Spec.model_tables`) into ``<out_dir>/modelled-<study>/`` and draw
    the study's modelled figures (:attr:`~.engine.Spec.model_figures`)."""
    t0 = time.perf_counter()
    points = list(points) if points is not None else summary_plan(study)
    sw = sweep(points)
    band = error_band()
    out = Path(out_dir) / f"modelled-{study.name}"
    tables, stats = {}, {}
    all_deltas = []
    for fam in study.spec.families:
        switches = {n: study.step_switch(n) for n in study.ladder_names(fam)}
        pairs = [p for p in _ladder_pairs(study, fam) if p[1] in set(sw["variant"])]
        d = step_deltas(sw, pairs, switches)
        d.insert(1, "gemm", study.spec.families[fam])
        all_deltas.append(d)
        full = study.ladder_names(fam)[-1]
        loo_names = study.leave_one_out_names(fam)
        loo_map = {n.rsplit("-no-", 1)[1]: n for n in loo_names}
        loo_rows = []
        for shape in dict.fromkeys(sw.loc[sw["variant"].isin(loo_names), "shape"]):
            have = set(sw.loc[sw["shape"] == shape, "variant"])
            m = {s: v for s, v in loo_map.items() if v in have}
            if full in have and m:
                t = leave_one_out(sw, full, m, shape)
                t.insert(0, "gemm", study.spec.families[fam])
                loo_rows.append(t)
        if loo_rows:
            tables.setdefault("modelled_leave_one_out", []).append(pd.concat(loo_rows, ignore_index=True))
    deltas = pd.concat(all_deltas, ignore_index=True)
    tables["modelled_delta"] = deltas
    tables["modelled_sweep"] = sw
    if "modelled_leave_one_out" in tables:
        tables["modelled_leave_one_out"] = pd.concat(tables["modelled_leave_one_out"], ignore_index=True)
    if study.spec.model_tables is not None:
        study.spec.model_tables(study, sw, tables, stats)
    settings = {"study": study.name, "points": len(points), "error_band": band["rule"], **{
        f"rho_{k}": v for k, v in stats.get("order", {}).items() if k.startswith("rho")}}
    for name, df in tables.items():
        _write(df, out / f"{name}.parquet", settings)
    results.atomic_write_json(out / "modelled_stats.json", {"band": band, **stats})
    sm = SummaryModel(study.name, out, sw, deltas, tables, stats, band, seconds=round(time.perf_counter() - t0, 1))
    if render:
        from .. import figures

        for name in study.spec.model_figures:
            sm.figures[name] = figures.render(f"{study.name}/{name}", Path(out_dir))[0]
    return sm


def ladder_tables(study, sw: pd.DataFrame, tables: dict, stats: dict) -> None:
    """GEMM's own summary tables: the waterfall along the ladder at every shape that modelled every
    rung, PR #990's published figures beside it, and PR #990's order of impact against the model (at
    the first device shape)."""
    ladder = study.ladder_names()
    switches = {n: study.step_switch(n) for n in ladder}
    wfs = [waterfall(sw, ladder, s, switches) for s in dict.fromkeys(sw["shape"])
           if set(ladder) <= set(sw.loc[sw["shape"] == s, "variant"])]
    tables["modelled_waterfall"] = pd.concat(wfs, ignore_index=True)
    pub = study.spec.published.read().copy()
    pub["shape"] = [shape_text((r.M, r.N, r.K)) for r in pub.itertuples()]
    pub["label"] = "published"
    tables["modelled_published"] = pub
    first = shape_text(default_shapes(study)[0])
    order, ostats = order_of_impact(tables["modelled_delta"], tables.get("modelled_leave_one_out"), first)
    tables["modelled_order"] = order
    stats["order"] = ostats


def ratio_tables(study, sw: pd.DataFrame, tables: dict, stats: dict) -> None:
    """MoE's own summary table: each family's last / first rung time per token count, beside the seed's
    published change."""
    firsts = {label: study.ladder_names(f)[0] for f, label in study.spec.families.items()}
    lasts = {label: study.ladder_names(f)[-1] for f, label in study.spec.families.items()}
    tables["modelled_moe_ratios"] = moe_ratios(sw, firsts, lasts, study.spec.published.read())


# ============================================================================ README block


def readme_columns(study_name: str, run_dir: str | Path | None) -> dict:
    """``{(variant, regime): (modelled TFLOPS text, modelled delta text)}`` from a summary run's
    ``modelled-<study>/modelled_delta.parquet`` at each regime's first device shape (GEMM at 8192^3; MoE
    decode at M=16, prefill at M=4096: the ISA shapes); empty when the run has none. Reads files only
    (no FlyDSL)."""
    if run_dir is None:
        return {}
    path = Path(run_dir) / f"modelled-{study_name}" / "modelled_delta.parquet"
    if not path.is_file():
        return {}
    from . import get

    d = results.read_table(path)[0]
    where = {r.name: shape_text(r.device[0]) for r in get(study_name).spec.regimes}
    out = {}
    for regime, shape in where.items():
        for r in d[d["shape"] == shape].itertuples():
            delta = "–" if r.delta_pct != r.delta_pct else f"{r.delta_pct:+.2f}% [{r.delta_low:+.1f}, {r.delta_high:+.1f}]"
            value = f"{r.tflops:.0f}" if r.tflops >= 100 else f"{r.tflops:.1f}"
            out[(r.variant, regime)] = (value, delta)
    return out


def readme_note(study_name: str, run_dir) -> str:
    """The line under the README table saying what the modelled columns are."""
    path = Path(run_dir) / f"modelled-{study_name}" / "modelled_delta.parquet" if run_dir else None
    if path is None or not path.is_file():
        return ""
    d = results.read_table(path)[0]
    return (f"Modelled columns: the gfx950emu timing model ({model_detail(d)}), not measured; delta vs the "
            f"predecessor, [low, high] = its interval from the model's held-out modelled-vs-published residuals "
            f"({error_band()['rule']}).")


def findings_markers(name: str) -> tuple[str, str]:
    cmd = "python -m mxfp4_ablation.studies readme-table"
    return (f"<!-- {name}-modelled-findings:begin (generated: {cmd}) -->", f"<!-- {name}-modelled-findings:end -->")


def readme_findings(study_name: str, run_dir) -> str | None:
    """Markdown bullets generated from a summary run's modelled tables (None: the run has none)."""
    base = Path(run_dir) / f"modelled-{study_name}" if run_dir else None
    if base is None or not (base / "modelled_delta.parquet").is_file():
        return None
    tables = {p.stem: results.read_table(p)[0] for p in sorted(base.glob("*.parquet"))}
    stats_path = base / "modelled_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    band = stats.get("band") or error_band()
    return "\n".join(f"* {f} *(modelled)*" for f in findings(study_name, tables, stats, band))


# ============================================================================ command line


def main(args) -> int:
    """``python -m mxfp4_ablation.studies modelled [--study gemm|moe] [--out DIR] [--quick]``: run the
    summary's modelled sweep (cached), write its tables, print every step's modelled delta per shape and
    how long the sweep took (``--quick``: each regime's first device shape only, GEMM at 8192^3 and MoE
    at M=16 and M=4096)."""
    from .. import paths
    from . import get

    out = Path(args.out) if args.out else paths.cache_dir() / "scratch" / "ablation"
    for name in args.study or ["gemm", "moe"]:
        study = get(name)
        points = summary_plan(study)
        if args.quick:
            keep = {shape_text(r.device[0]) for r in study.spec.regimes}
            points = [p for p in points if shape_text(p[1]) in keep]
        t0 = time.perf_counter()
        sm = summary_section(study, out, points, render=not args.no_figures)
        took = time.perf_counter() - t0
        cached = int(sm.sweep["cached"].sum())
        print(f"# {name}: {len(sm.sweep)} modelled points ({cached} from the cache) in {took:.1f} s; "
              f"{model_detail(sm.sweep)}; interval: {sm.band['rule']}")
        cols = [c for c in ("gemm", "variant", "switch", "shape", "baseline_tflops", "tflops", "baseline_us", "us",
                            "delta_pct", "delta_low", "delta_high", "resolved", "bound") if c in sm.deltas.columns]
        print(sm.deltas[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        for key in ("modelled_leave_one_out", "modelled_order", "modelled_moe_ratios"):
            if key in sm.tables:
                print(f"\n## {key}\n" + sm.tables[key].drop(columns=["pr990_text"], errors="ignore")
                      .to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for f in sm.findings():
            print(f"* {f}")
    return 0
