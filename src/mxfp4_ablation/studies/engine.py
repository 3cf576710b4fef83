"""One study engine for every kernel family: a :class:`Study` is a :class:`Spec` (configuration) plus
the generic machinery below.

A study covers one or more kernel families (GEMM: ``gemm``; MoE: ``moe1`` and ``moe2``) in one or more
*regimes* (GEMM: one, unnamed; MoE: decode and prefill), each regime with the shape its ISA is read at
and the shapes its correctness checks and timings run at, per mode. For every variant it gathers:

* **correctness** -- :func:`.correctness.verify_table` (:func:`mxfp4_ablation.runner.verify`: the emulator
  off-device, the GPU on an MI355X) and :func:`.correctness.correctness_overview` (the family's gate);
* **static metrics** -- :meth:`Study.metrics` (offline gfx950 compiles through the family's
  ``study_metrics``), :meth:`Study.isa_diff`;
* **expectations** -- :meth:`Study.expectation_table`: does each switch move the metric its seed says?
* **speed** -- :mod:`mxfp4_ablation.studies.speed`: *measured* (device mode, the paired A/B harness),
  *modelled* (the timing model, a pluggable source) and *published* (the seed's own figures); every
  value carries its kind, and a kind that is not available says why;
* **fidelity** -- a pluggable section (:attr:`Spec.fidelity`), filled by ``mxfp4_ablation.fidelity``
  when it exists.

Step notebooks call :meth:`Study.step_report`, the summary :meth:`Study.summary_report`; both write
their tables with provenance into the run folder, and the figures (:mod:`mxfp4_ablation.figures`) draw
from those tables alone. Nothing here imports FlyDSL at import time.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from .. import paths, provenance, results
from . import SUMMARY_RUN, correctness
from . import speed as speed_mod
from . import tables
from .reports import StepReport, SummaryReport
from .tables import StudyError

EXPECTATION_COLUMNS = ["comparison", "variant", "baseline", "switch", "metric", "direction", "before", "after",
                       "delta", "as_intended"]


@dataclass(frozen=True)
class Regime:
    """Where a study looks at its kernels: the ISA shape, and the run shapes per mode."""

    name: str | None  # None: the study has one regime, and its tables carry no regime column
    isa: tuple
    emulated: tuple  # shapes the emulator checks
    device: tuple  # shapes an MI355X checks and times


@dataclass(frozen=True)
class Spec:
    """A family's configuration: everything in which GEMM and MoE differ."""

    name: str  # "gemm": run names ``<name>--<slug>``, figures ``<name>/...``, notebooks/<name>/
    title: str  # "GEMM" / "MoE": used in messages
    families: dict  # kernel family -> display label
    regimes: tuple  # of Regime
    shape_text: Callable[[Sequence[int]], str]
    check_shape: Callable[[str | None, tuple], None]  # raise StudyError for a bad shape in a regime
    expectations: Any  # family -> switch -> ((metric, direction), ...), or a callable (family, switch, regime) -> same
    key_metrics: tuple  # (metric, label) the ladder figure and README table show
    study_metrics: Callable[[Any], dict]  # ISA -> metric dict
    gate: Callable[[pd.DataFrame, "Study"], tuple]  # the ran checks of one variant -> (coverage, status)
    coverage_column: str  # "shapes" / "regimes"
    published: speed_mod.Published
    seed: str  # "FlyDSL PR #990 / PR #756": cited in the notebook intros
    baseline_text: str  # the intro of a family's first rung
    measured_table: str = "tflops.parquet"
    label_column: str | None = None  # "gemm" for MoE: the family's label in every table
    slug: Callable[["Study", str], str] | None = None  # default: NN_<switch>
    summary_prefix: str = ""  # the summary run's table names: <prefix>ladder.parquet, ...
    flops: Callable[[tuple], float] | None = None
    #: The pluggable fidelity view: (study) -> (table | None, note); default :func:`fidelity_section`.
    fidelity: Callable[["Study"], tuple] | None = None
    compile: Callable | None = None  # (names, shape) -> artifacts; default toolchain.compile_many
    summary_figures: tuple = ()  # the figures (``<name>/<figure>``) the summary renders, in order
    # ---- the modelled section (:mod:`.modelled_section`)
    model_sample: Callable[[tuple | None], int | None] = lambda shape: 1  # workgroups one point simulates
    model_timeline: int = 0  # which of a step's modelled shapes its timeline is traced at
    model_loo_regime: str | None = None  # the regime whose first device shape models the leave-one-out set
    model_sweep: tuple = ()  # shapes the first and last rungs are modelled at too (MoE: the Kimi token counts)
    model_sweep_ladder: tuple = ()  # of those, the shapes every rung is modelled at (their step deltas too)
    #: (study, sweep, tables, stats) -> None: adds the family's own summary tables (and stats)
    model_tables: Callable | None = None
    model_figures: tuple = ("modelled_leave_one_out",)  # the summary's modelled figures, in order


def compile_variants(variants_, shape: Sequence[int]) -> list:
    """Offline gfx950 compiles of ``variants_`` at ``shape`` (one worker for all cache misses)."""
    from .. import toolchain

    return toolchain.compile_many([(v.target, v.params(tuple(shape))) for v in variants_])


def _doc_parts(doc: str) -> dict[str, str]:
    """Split a switch docstring into its summary, 'Seed claim', 'Mechanism' and 'Metric' parts."""
    parts = re.split(r"\b(Seed claim(?: \([^)]*\))?|Mechanism|Metric(?:, [^:.]*)?):\s*", doc)
    out = {"summary": parts[0].strip()}
    for head, body in zip(parts[1::2], parts[2::2]):
        key = "seed" if head.startswith("Seed") else "metric" if head.startswith("Metric") else head.lower()
        out[key] = f"{head}: {body.strip()}"
    return out


def switch_parts(record) -> dict[str, str]:
    """A switch's summary / seed / mechanism / metric, from a ``Switch`` record or its docstring text."""
    if hasattr(record, "parts"):  # mxfp4_ablation.family.Switch renders its own parts
        return dict(record.parts())
    return _doc_parts(" ".join(str(record).split()))


def seeds_list(seeds) -> list[int]:
    seeds = [int(s) for s in (seeds if isinstance(seeds, (list, tuple)) else [seeds])]
    if not seeds:
        raise StudyError("give at least one seed")
    return seeds


class Study:
    """The generic study of one :class:`Spec`."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.name = spec.name

    # ================================================================ variants

    @property
    def regimed(self) -> bool:
        return any(r.name is not None for r in self.spec.regimes)

    @property
    def regime_names(self) -> list:
        return [r.name for r in self.spec.regimes]

    def variants(self, family: str | None = None) -> dict:
        """The study's variants (per family: ladder first, then leave-one-out), by name."""
        from .. import variants

        if family is not None and family not in self.spec.families:
            raise StudyError(f"unknown {self.spec.title} family {family!r} (known: {', '.join(self.spec.families)})")
        out = {n: v for n, v in variants.all_variants().items()
               if v.family in self.spec.families and (family is None or v.family == family)}
        if not out:
            raise StudyError(f"no {self.spec.title} variants registered (the kernel modules have no LADDER)")
        return out

    def variant(self, name: str):
        """A ladder / leave-one-out variant, or any valid switch subset of one of the study's families
        (``gemm+agpr_acc+k_unroll4``, :func:`mxfp4_ablation.variants.get`)."""
        known = self.variants()
        if name not in known:
            from .. import variants
            from ..errors import UsageError

            try:
                v = variants.get(name)
            except UsageError:
                v = None
            if v is not None and v.family in self.spec.families:
                return v
            raise StudyError(f"unknown {self.spec.title} variant {name!r} (known: {', '.join(known)}, or a valid "
                             f"switch subset such as {next(iter(self.spec.families))}+SWITCH+SWITCH)")
        return known[name]

    def ladder_names(self, family: str | None = None) -> list[str]:
        return [n for n, v in self.variants(family).items() if v.kind == "ladder"]

    def leave_one_out_names(self, family: str | None = None) -> list[str]:
        return [n for n, v in self.variants(family).items() if v.kind == "leave-one-out"]

    def label(self, name: str) -> str:
        return self.spec.families[self.variant(name).family]

    def step_switch(self, name: str) -> str | None:
        """The switch a variant adds to its predecessor (ladder) or drops from it (leave-one-out)."""
        v = self.variant(name)
        if v.predecessor is None:
            return None
        changed = sorted(v.switches ^ self.variant(v.predecessor).switches)
        if len(changed) != 1:
            raise StudyError(f"{name} differs from {v.predecessor} in {len(changed)} switches, not one")
        return changed[0]

    def step_index(self, name: str) -> int:
        """Position of a ladder variant in its family's ladder (the first rung is 0)."""
        ladder = self.ladder_names(self.variant(name).family)
        if name not in ladder:
            raise StudyError(f"{name!r} is not a {self.spec.title} ladder step (ladder: {', '.join(ladder)})")
        return ladder.index(name)

    def step_slug(self, name: str) -> str:
        """``NN_<switch>`` of a ladder step: its notebook's and its figures' name."""
        if self.spec.slug is not None:
            return self.spec.slug(self, name)
        return f"{self.step_index(name):02d}_{self.step_switch(name) or 'baseline'}"

    def step_run_name(self, name: str) -> str:
        """The run name :mod:`mxfp4_ablation.notebooks` gives the step's notebook."""
        return f"{self.name}--{self.step_slug(name)}"

    def switch_record(self, family: str, switch: str):
        module = importlib.import_module(_kernel_module(family))
        docs = getattr(module, "SWITCHES", {})
        if switch not in docs:
            raise StudyError(f"unknown {self.spec.families.get(family, family)} switch {switch!r} "
                             f"(known: {', '.join(docs)})")
        return docs[switch]

    def expected(self, family: str, switch: str | None, regime: str | None = None) -> tuple:
        """``((metric, direction), ...)`` the switch should cause (in ``regime``, for a regimed study)."""
        if not switch:
            return ()
        exp = self.spec.expectations
        return tuple(exp(family, switch, regime) if callable(exp) else exp.get(family, {}).get(switch, ()))

    def intro_markdown(self, variant: str, baseline: str | None = None) -> str:
        """The step's prose for its notebook, rendered from the switch record (the seed's words)."""
        v = self.variant(variant)
        baseline = baseline if baseline is not None else v.predecessor
        switch = self.step_switch(variant)
        label = f" ({self.spec.families[v.family]})" if len(self.spec.families) > 1 else ""
        lines = [f"**{variant}**{label} = switches {{{', '.join(sorted(v.switches)) or 'none'}}}; "
                 f"compared against **{baseline or 'nothing (the baseline)'}**."]
        if switch is None:
            return "\n".join(lines + ["", self.spec.baseline_text])
        record = self.switch_record(v.family, switch)
        parts = switch_parts(record)
        verb = "adds" if v.kind == "ladder" else "removes"
        lines += ["", f"This step {verb} `{switch}`: {parts['summary']}", ""]
        lines += [f"* {parts[k]}" for k in ("seed", "mechanism", "metric") if k in parts]
        lines += ["", f"*(Quoted from the `{switch}` switch record in `{_repo_path(record.defined_in)}`, which "
                  f"cites {self.spec.seed}.)*"]
        per = {r: self.expected(v.family, switch, r) for r in self.regime_names}
        if any(per.values()):
            def listed(exp):
                return ", ".join(f"`{m}` {d}" for m, d in exp)

            if len(set(per.values())) == 1:
                where = ", in every regime" if self.regimed else ""
                lines += ["", f"Checked below on the ISA{where}: {listed(next(iter(per.values())))}."]
            else:
                lines += ["", "Checked below on the ISA: " + "; ".join(f"at {r}, {listed(e)}" for r, e in per.items())
                          + " (`same`: the switch does not act in that regime, as in the seed)."]
        return "\n".join(lines)

    # ================================================================ shapes

    def parse_cases(self, value: Any, mode: str, isa: bool = False) -> dict:
        """Regime -> list of shapes from a notebook parameter.

        ``None``: the defaults (the ISA shape, or the mode's run shapes). A one-regime study takes a
        shape (``"M,N,K"`` or a list of ints) or a list of them; a study with regimes takes a dict
        ``{regime: shape | [shape, ...]}`` naming some of its regimes.
        """
        if value is None:
            return {r.name: [tuple(r.isa)] if isa else [tuple(s) for s in (r.device if mode == "device"
                                                                            else r.emulated)]
                    for r in self.spec.regimes}
        if self.regimed:
            if not isinstance(value, dict) or not value:
                raise StudyError(f"{self.spec.title} shapes are a dict regime -> shape (regimes: "
                                 f"{', '.join(self.regime_names)}); got {value!r}")
            out = {}
            for regime, shapes in value.items():
                if regime not in self.regime_names:
                    raise StudyError(f"unknown regime {regime!r} (known: {', '.join(self.regime_names)})")
                out[regime] = self._shapes(shapes, regime)
            return out
        return {None: self._shapes(value, None)}

    def _shapes(self, value: Any, regime) -> list[tuple]:
        from ..variants import parse_shape

        one = isinstance(value, str) or (isinstance(value, (list, tuple)) and value and
                                         all(isinstance(n, int) for n in value))
        out = []
        for s in ([value] if one else list(value)):
            try:
                shape = parse_shape(s) if isinstance(s, str) else tuple(int(n) for n in s)
            except (TypeError, ValueError) as err:
                raise StudyError(f"bad {self.spec.title} shape {s!r}: {err}") from None
            self.spec.check_shape(regime, shape)
            out.append(shape)
        if not out:
            raise StudyError(f"no {self.spec.title} shapes given")
        return out

    # ================================================================ static metrics

    def compile_variants(self, names: Sequence[str], shape: Sequence[int]) -> list:
        vs = [self.variant(n) for n in names]
        if self.spec.compile is not None:
            return self.spec.compile(names, shape)
        return compile_variants(vs, shape)

    def metrics(self, names: Sequence[str], cases: dict, out_dir: str | Path | None = None,
                roles: dict | None = None) -> pd.DataFrame:
        """Compile ``names`` at each regime's ISA shape (offline gfx950); long table ``variant, family,
        kind, switch, [regime,] shape, metric, value [, role]``; ``compile_seconds`` is one of the metrics.
        With ``out_dir`` the ``.s`` of each variant goes to ``out_dir/isa/[<regime>/]<variant>.s``."""
        names = list(names)
        rows = []
        for regime, shapes in cases.items():
            for shape in shapes:
                for name, art in zip(names, self.compile_variants(names, shape)):
                    v = self.variant(name)
                    values = self.spec.study_metrics(art.isa)
                    values["compile_seconds"] = art.compile_seconds
                    base = {"variant": name, "family": v.family, "kind": v.kind, "switch": self.step_switch(name) or "",
                            "regime": regime, "shape": self.spec.shape_text(shape)}
                    if roles:
                        base["role"] = roles[name]
                    rows += [{**base, "metric": k, "value": float(x) if x is not None else math.nan}
                             for k, x in values.items()]
                    if out_dir is not None:
                        folder = Path(out_dir) / "isa" / (regime or "")
                        results.atomic_write_text(folder / f"{name}.s", art.isa)
        cols = ["variant", "family", "kind", "switch", "regime", "shape", "metric", "value"] + (["role"] if roles else [])
        return self._drop_regime(pd.DataFrame(rows, columns=cols))

    def _drop_regime(self, df: pd.DataFrame) -> pd.DataFrame:
        return df if self.regimed or "regime" not in df.columns else df.drop(columns="regime")

    def side_by_side(self, metrics: pd.DataFrame, names, keys=None) -> pd.DataFrame:
        return tables.side_by_side(metrics, names, keys)

    def isa_diff(self, metrics: pd.DataFrame, baseline: str, variant: str) -> pd.DataFrame:
        return tables.isa_diff(metrics, baseline, variant)

    def expectation_table(self, metrics: pd.DataFrame) -> pd.DataFrame:
        """Does each switch move its metric as the family's expectations say, on this data (per regime)?

        Ladder steps compare the step (after) with its predecessor (before); leave-one-out variants
        compare the full kernel (after: the switch on) with ``<full>-no-<switch>`` (before: off).
        Variants missing from ``metrics`` are skipped.
        """
        lead = ([self.spec.label_column] if self.spec.label_column else []) + (["regime"] if self.regimed else [])
        cols = lead + EXPECTATION_COLUMNS
        rows = []
        regimes = [r for r in self.regime_names if len(metrics) and (r is None or r in set(metrics["regime"]))]
        for regime in regimes:
            wide = tables.metric_wide(tables.per_regime(metrics, regime))
            for name, v in self.variants().items():
                if v.predecessor is None or name not in wide.index or v.predecessor not in wide.index:
                    continue
                switch = self.step_switch(name)
                off, on = (v.predecessor, name) if v.kind == "ladder" else (name, v.predecessor)
                for metric, direction in self.expected(v.family, switch, regime):
                    before, after = (float(wide.at[n, metric]) if metric in wide.columns else math.nan
                                     for n in (off, on))
                    row = {"regime": regime, "comparison": v.kind, "variant": name, "baseline": v.predecessor,
                           "switch": switch, "metric": metric, "direction": direction, "before": before,
                           "after": after, "delta": after - before,
                           "as_intended": tables.moved(before, after, direction)}
                    if self.spec.label_column:
                        row[self.spec.label_column] = self.spec.families[v.family]
                    rows.append(row)
        return pd.DataFrame(rows, columns=cols)

    def ladder_table(self, metrics: pd.DataFrame, label: str | None = None, regime: str | None = None) -> pd.DataFrame:
        """Every metric per ladder step of one family (``label``) in one regime (rows: metrics)."""
        family = None
        if len(self.spec.families) > 1 or label is not None:
            family = {lab: f for f, lab in self.spec.families.items()}.get(label)
        bad_family = len(self.spec.families) > 1 and family is None
        bad_regime = self.regimed and regime not in self.regime_names
        if bad_family or bad_regime:
            raise StudyError(f"ladder_table takes a kernel ({', '.join(self.spec.families.values())}) and a "
                             f"regime ({', '.join(map(str, self.regime_names))}); got {label!r}, {regime!r}")
        m = metrics[metrics["kind"] == "ladder"]
        if family is not None:
            m = m[m["family"] == family]
        m = tables.per_regime(m, regime if self.regimed else None)
        return tables.metric_wide(m).T

    # ================================================================ one ladder step

    def _scratch(self, name: str) -> Path:
        """Where a notebook opened by hand (no ``out_dir``) writes: never into a published run."""
        return paths.cache_dir() / "scratch" / self.name / name

    def step_report(self, variant: str, baseline: str | None = None, cases: Any = None, mode: str = "emulated",
                    seeds: Sequence[int] = (0,), out_dir: str | Path | None = None, iterations: int = 100,
                    isa_cases: Any = None, render: bool = True, modelled: bool = False) -> StepReport:
        """Everything one ladder step's notebook shows, written to ``out_dir`` with provenance.

        * ``verify.parquet``: the correctness checks of ``variant`` at ``cases`` x ``seeds``;
        * ``metrics.parquet``: the study metrics of ``variant`` and ``baseline`` at the ISA shapes
          (``role`` = variant / baseline), their ``.s`` under ``isa/``;
        * ``isa_diff.parquet`` (when there is a baseline) and ``expectations.parquet``;
        * ``published.parquet`` (the seed's figures), ``speed.parquet`` (every speed value with its kind,
          or why a kind is not available) and, in device mode, the harness's tables.
        ``baseline`` defaults to the variant's predecessor; ``out_dir`` (None when a notebook is opened by
        hand) to a scratch folder under the cache. ``modelled``: ask the modelled-speed sources
        (:data:`speed.MODELLED_SOURCES`, the timing model) for the step and its baseline at the ISA shapes.
        """
        from ..modes import MODES

        if mode not in MODES:
            raise StudyError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        v = self.variant(variant)
        baseline = v.predecessor if baseline is None else baseline
        if baseline is not None and self.variant(baseline).family != v.family:
            raise StudyError(f"{variant} ({self.label(variant)}) cannot be compared with {baseline} "
                             f"({self.label(baseline)})")
        run_cases = self.parse_cases(cases, mode)
        isa_at = self.parse_cases(isa_cases, mode, isa=True)
        seeds = seeds_list(seeds)
        out_dir = Path(out_dir) if out_dir is not None else self._scratch(variant)
        out_dir.mkdir(parents=True, exist_ok=True)
        settings = {"variant": variant, "baseline": baseline, "seeds": seeds, "iterations": int(iterations),
                    **self._settings(run_cases, "cases"), **self._settings(isa_at, "isa_cases")}
        static_prov = provenance.collect("static", settings=settings)

        checks = correctness.verify_table(self, [variant], run_cases, seeds, mode)
        results.write_table(checks, out_dir / "verify.parquet", provenance.collect(mode, settings=settings))
        names = [variant] + ([baseline] if baseline else [])
        roles = {variant: "variant", **({baseline: "baseline"} if baseline else {})}
        metrics = self.metrics(names, isa_at, out_dir, roles=roles)
        results.write_table(metrics, out_dir / "metrics.parquet", static_prov)
        diff = None
        if baseline:
            diff = self.isa_diff(metrics, baseline, variant)
            results.write_table(diff, out_dir / "isa_diff.parquet", static_prov)
        expectations = self.expectation_table(metrics if baseline else metrics.iloc[0:0])
        results.write_table(expectations, out_dir / "expectations.parquet", static_prov)
        published = self.spec.published.write(out_dir / "published.parquet")

        measured, note = None, ""
        if mode == "device" and baseline:
            measured, note = speed_mod.measure_or_why([(baseline, variant)], self._flat(run_cases), iterations,
                                                      out_dir, table=self.spec.measured_table, flops=self.spec.flops)
        speed = speed_mod.speed_table(self, variant, baseline, isa_at, measured, note, published,
                                      modelled=modelled)
        results.write_table(speed, out_dir / "speed.parquet", provenance.collect("static", settings=settings))
        report = StepReport(self, variant, baseline, self.step_switch(variant), mode, out_dir, run_cases, isa_at,
                            checks, metrics, diff, expectations, speed, measured, speed_note=note)
        if render and v.kind == "ladder":
            from .. import figures

            slug = self.step_slug(variant)
            kinds = (["isa_diff"] if baseline else []) + ["speed"]
            for kind in kinds:
                name = f"{self.name}/{slug}_{kind}"
                report.figures[name] = figures.render(name, out_dir)[0]
        return report

    def _settings(self, cases: dict, key: str) -> dict:
        if self.regimed:
            return {key: {r: [list(s) for s in shapes] if len(shapes) > 1 else list(shapes[0])
                          for r, shapes in cases.items()}}
        return {"shapes" if key == "cases" else "isa_shape": [list(s) for s in cases[None]] if key == "cases"
                else list(cases[None][0])}

    @staticmethod
    def _flat(cases: dict) -> list:
        return [s for shapes in cases.values() for s in shapes]

    # ================================================================ the summary

    def summary_table(self, key: str) -> str:
        """The summary run's table name for ``key`` (ladder, expectations, correctness, published)."""
        return f"{self.spec.summary_prefix}{key}.parquet"

    def latest_step_tables(self, table: str) -> list[pd.DataFrame]:
        """``table`` from the latest run of each ladder step's notebook that wrote one."""
        return results.latest_tables([self.step_run_name(n) for n in self.ladder_names()], table)

    def summary_report(self, out_dir: str | Path | None = None, mode: str = "emulated", isa_cases: Any = None,
                       cases: Any = None, seeds: Sequence[int] = (0,), iterations: int = 100,
                       verify_leave_one_out: bool = True, render: bool = True,
                       fidelity: bool = False) -> SummaryReport:
        """The study's part of ``notebooks/summary.py``: compile every variant at the ISA shapes, check
        every switch against its intended metric (ladder and leave-one-out), gather the step runs'
        correctness and measured speed, verify (and in device mode time) the leave-one-out variants.
        ``fidelity``: add the fidelity section (``<prefix>fidelity.parquet``; it compiles the first and
        last rungs at the seed's shapes)."""
        out_dir = Path(out_dir) if out_dir is not None else self._scratch(SUMMARY_RUN)
        out_dir.mkdir(parents=True, exist_ok=True)
        isa_at = self.parse_cases(isa_cases, mode, isa=True)
        run_cases = self.parse_cases(cases, mode)
        seeds = seeds_list(seeds)
        settings = {**self._settings(isa_at, "isa_cases"), **self._settings(run_cases, "cases"), "seeds": seeds,
                    "iterations": int(iterations), "verify_leave_one_out": bool(verify_leave_one_out)}
        static_prov = provenance.collect("static", settings=settings)
        metrics = self.metrics(list(self.variants()), isa_at, out_dir)
        results.write_table(metrics, out_dir / self.summary_table("ladder"), static_prov)
        expectations = self.expectation_table(metrics)
        results.write_table(expectations, out_dir / self.summary_table("expectations"), static_prov)

        checks = self.latest_step_tables("verify.parquet")
        loo = self.leave_one_out_names()
        if verify_leave_one_out and loo:
            checks.append(correctness.verify_table(self, loo, run_cases, seeds, mode))
        overview = correctness.correctness_overview(self, checks)
        results.write_table(overview, out_dir / self.summary_table("correctness"),
                            provenance.collect(mode, settings=settings))
        self.spec.published.write(out_dir / self.summary_table("published"))

        parts = self.latest_step_tables(self.spec.measured_table)
        if mode == "device" and loo:
            for family in self.spec.families:
                names = self.leave_one_out_names(family)
                if not names:
                    continue
                full = self.ladder_names(family)[-1]
                got, _why = speed_mod.measure_or_why([(full, n) for n in names], self._flat(run_cases), iterations,
                                                     out_dir, f"timing-loo-{family}", table=f"loo-{family}.parquet",
                                                     flops=self.spec.flops)
                if got is not None:
                    parts.append(got)
        measured = None
        if parts:
            measured = pd.concat(parts, ignore_index=True)
            measured = measured[[c for c in measured.columns if c not in provenance.ROW_FIELDS and c != "settings"]]
            results.write_table(measured, out_dir / self.summary_table("measured_all"),
                                provenance.collect("device", settings=settings))
        fid, fid_note = None, "not asked for (summary_report(..., fidelity=True))"
        if fidelity:
            fid, fid_note = (self.spec.fidelity or fidelity_section)(self)
            if fid is not None:
                results.write_table(fid, out_dir / self.summary_table("fidelity"), static_prov)
        report = SummaryReport(self, metrics, expectations, overview, out_dir, measured, fidelity=fid,
                               fidelity_note=fid_note)
        from . import readme

        results.atomic_write_text(out_dir / f"{self.spec.summary_prefix}readme_table.md",
                                  readme.ladder_table(self, metrics, expectations, overview) + "\n")
        if render:
            from .. import figures

            for name in self.spec.summary_figures + (("fidelity",) if fid is not None else ()):
                full = f"{self.name}/{name}"
                report.figures[full] = figures.render(full, out_dir)[0]
        return report


def fidelity_section(study: "Study") -> tuple:
    """The default fidelity view: :func:`mxfp4_ablation.fidelity.fidelity_table` for the seeds whose
    rungs are this study's, or ``(None, why)`` when no seed starts its ladder."""
    from .. import fidelity as fid

    mine = study.variants()
    seeds = [name for name, seed in fid.SEEDS.items() if getattr(seed, "first", None) in mine]
    if not seeds:
        return None, f"no seed of mxfp4_ablation.fidelity starts a {study.spec.title} ladder"
    return fid.fidelity_table(seeds), ""


def switch_expectations(family: str, switch: str, regime: str | None = None) -> tuple:
    """``((metric, direction), ...)`` from the switch's :class:`mxfp4_ablation.family.Switch` record; in a
    regime the switch does not act in (``Expect.regimes``) the direction is ``same``."""
    from .. import family as families

    record = families.get(family).switches.get(switch)
    return tuple((e.metric, e.direction_in(regime)) for e in record.expects) if record is not None else ()


def expectations_of(family: str) -> dict:
    """switch -> ``((metric, direction), ...)`` for every switch of ``family`` that expects something."""
    from .. import family as families

    return {name: tuple((e.metric, e.direction) for e in rec.expects)
            for name, rec in families.get(family).switches.items() if rec.expects}


def _kernel_module(family: str) -> str:
    from .. import variants

    return variants.KERNEL_MODULES[family]


def _repo_path(file: str) -> str:
    """``file`` relative to the checkout (as the notebooks cite it); as given when outside it."""
    try:
        return Path(file).resolve().relative_to(paths.REPO_ROOT).as_posix()
    except ValueError:
        return file
