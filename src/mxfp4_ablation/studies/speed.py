"""Speed, in three kinds that are never mixed up: *measured*, *modelled*, *published*.

* **measured** -- on a gfx950 GPU, :func:`measure_pairs` times each ``(baseline, variant)`` pair with
  :mod:`mxfp4_ablation.bench` (paired A/B, bootstrap CIs). Nowhere else.
* **modelled** -- a pluggable source, :data:`MODELLED_SOURCES`: by default
  ``mxfp4_ablation.modelled.model(variant, shape)`` (the timing model; its dicts carry
  ``label="modelled"``, ``model_version`` and ``clock_ghz``). Where the source is missing, or cannot
  model a variant, the row says ``not available`` and why.
* **published** -- the seed's own figures (:class:`Published`: a CSV under ``experiments/reference/``
  with a source per row).

:func:`speed_table` gathers them for one step into one long table: ``variant, baseline, kind, shape,
metric, value, low, high, detail, available``; every value says its kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from .. import paths, provenance, results
from .tables import StudyError

KINDS = ("measured", "modelled", "published")
SPEED_COLUMNS = ["variant", "baseline", "kind", "shape", "metric", "value", "low", "high", "detail", "available"]


# ============================================================================ published


@dataclass(frozen=True)
class Published:
    """A seed's published speed figures: the CSV, its columns and the checks every row passes."""

    csv: str
    columns: tuple
    stages: tuple
    what: str  # "GEMM figures" / "MoE figures": in messages
    source: str  # the seed, as the figures' badge names it
    value: str  # the value column ("tflops" / "ratio")
    kernels: tuple = ()  # allowed values of the kernel column (empty: any)
    positive: bool = False  # every value must be > 0

    def read(self, path: str | Path | None = None) -> pd.DataFrame:
        path = Path(path) if path is not None else paths.reference_dir() / self.csv
        if not path.is_file():
            raise StudyError(f"no published {self.what} at {path}")
        df = pd.read_csv(path)
        missing = [c for c in self.columns if c not in df.columns]
        if missing:
            raise StudyError(f"{path.name} lacks column(s) {', '.join(missing)}")
        bad = sorted(set(df["stage"]) - set(self.stages))
        if self.kernels:
            bad += sorted(set(df["kernel"]) - set(self.kernels))
        if bad:
            what = "stage/kernel" if self.kernels else "stage(s)"
            known = f"stages: {', '.join(self.stages)}" + (f"; kernels: {', '.join(self.kernels)}" if self.kernels else "")
            raise StudyError(f"{path.name}: unknown {what} {', '.join(map(str, bad))} ({known})")
        if df["source"].isna().any() or (df["source"].astype(str).str.strip() == "").any():
            raise StudyError(f"{path.name}: every row needs a source")
        if self.positive and not (df[self.value] > 0).all():
            raise StudyError(f"{path.name}: every {self.value} must be a positive number")
        return df[list(self.columns)]

    def write(self, path: Path) -> pd.DataFrame:
        df = self.read()
        prov = provenance.collect("published", settings={"file": f"experiments/reference/{self.csv}"})
        results.write_table(df, path, prov)
        return df


# ============================================================================ measured


def _tflops(trials: pd.DataFrame, shape: Sequence[int], flops: Callable | None) -> pd.Series:
    if "tflops" in trials.columns and trials["tflops"].notna().all():
        return trials["tflops"]
    work = flops(tuple(shape)) if flops else float("nan")
    return work / (trials["time_per_launch_us"] * 1e-6) / 1e12


def measure_pairs(pairs: Sequence[tuple[str, str]], shapes: Sequence[Sequence[int]], iterations: int,
                  out_dir: str | Path, name: str = "timing", settings=None, table: str = "tflops.parquet",
                  flops: Callable | None = None, shape_text: Callable = None) -> pd.DataFrame:
    """Time each ``(baseline, variant)`` pair at each shape on the GPU (paired A/B, arm A = baseline).

    Writes ``<name>.parquet`` (trials), ``<name>-summary.parquet`` (the harness's) and ``table``: one
    row per pair x shape x arm with the median TFLOPS and its bootstrap CI, plus the B/A time ratio and
    its CI (``ratio < 1``: the variant is faster). Every row is *measured*.
    """
    from .. import bench
    from ..bench import launchers

    shape_text = shape_text or (lambda s: "x".join(str(int(n)) for n in s))
    settings = settings or bench.HarnessSettings(pairs=int(iterations))
    comps, meta = [], {}
    for base, var in pairs:
        for shape in shapes:
            label = f"{var} vs {base} @ {shape_text(shape)}"
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
                ci = bench.median_ci(_tflops(grp[grp["arm"] == arm], shape, flops).to_numpy(), settings.confidence,
                                     settings.n_resamples, settings.seed)
                rows.append({"variant": vname, "baseline": base, "pair": f"{var} vs {base}", "arm": arm,
                             "shape": shape_text(shape), "method": method, "tflops": ci.estimate,
                             "tflops_low": ci.low, "tflops_high": ci.high, "ratio": float(s["ratio"]),
                             "ratio_low": float(s["ci_low"]), "ratio_high": float(s["ci_high"]),
                             "verdict": s["verdict"]})
    frame = pd.DataFrame(rows)
    results.write_table(frame, Path(out_dir) / table, result.provenance)
    return frame


def measure_or_why(pairs, shapes, iterations, out_dir, name: str = "timing", table: str = "tflops.parquet",
                   flops: Callable | None = None) -> tuple[pd.DataFrame | None, str]:
    """:func:`measure_pairs`, or ``(None, reason)`` when a variant has no device launcher yet."""
    from ..bench.launchers import LauncherError

    try:
        return measure_pairs(pairs, shapes, iterations, out_dir, name, table=table, flops=flops), ""
    except LauncherError as err:
        return None, str(err)


# ============================================================================ modelled (pluggable)


def timing_model(variant: str, shape: tuple) -> dict:
    """The default modelled source: the timing model through :func:`.modelled_runs.modelled_source` (the
    per-step deltas' source: same sample, same cache entry)."""
    from .modelled_runs import modelled_source

    return modelled_source(variant, tuple(shape))


#: Modelled-speed sources, tried in order; each takes ``(variant, shape)`` and returns a dict with
#: ``label="modelled"``, ``model_version``, ``clock_ghz`` and ``tflops`` and/or ``us`` (the timing
#: model's keys), or raises NotImplementedError / ValueError with the reason it cannot.
MODELLED_SOURCES: list[Callable[[str, tuple], dict]] = [timing_model]


def modelled(variant: str, shape: tuple) -> tuple[dict | None, str]:
    """``(dict, "")`` from the first source that models ``variant`` at ``shape``, else ``(None, why)``."""
    why = "no modelled-speed source registered"
    for source in MODELLED_SOURCES:
        try:
            out = source(variant, tuple(shape))
        except (NotImplementedError, ValueError, ImportError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            continue
        if out is None:
            continue
        if out.get("label") != "modelled":
            raise StudyError(f"a modelled-speed source returned a dict labelled {out.get('label')!r}, not 'modelled'")
        return out, ""
    return None, why


def _modelled_rows(variant: str, baseline: str | None, shape: tuple, shape_text: str) -> list[dict]:
    rows = []
    for name in [n for n in (variant, baseline) if n]:
        got, why = modelled(name, shape)
        if got is None:
            rows.append({"variant": name, "baseline": baseline, "kind": "modelled", "shape": shape_text,
                         "metric": "tflops", "detail": f"not available: {why}", "available": False})
            continue
        detail = f"model {got.get('model_version', '?')}, {got.get('clock_ghz', '?')} GHz"
        kernel = got.get("kernel") if isinstance(got.get("kernel"), dict) else {}
        for metric in ("tflops", "us"):
            value = got.get(metric, kernel.get(metric))
            if value is not None:
                rows.append({"variant": name, "baseline": baseline, "kind": "modelled", "shape": shape_text,
                             "metric": metric, "value": float(value), "detail": detail, "available": True})
    return rows


# ============================================================================ a step's interval


def step_interval(delta_pct: float, *, path: str | Path | None = None) -> dict:
    """The interval of one step's modelled speed-up ``delta_pct`` (%), from held-out residuals.

    The uncertainty model is ``experiments/reference/calibration.csv`` (written by
    ``python -m mxfp4_ablation.calibration fit --write``, see :mod:`mxfp4_ablation.calibration`): the
    model's speed-up predictions that were *not* fitted -- PR #990's after/before and aiter-asm/after
    under leave-one-shape-out, aiter PR #3828's MoE ratios -- miss the published speed-up by ``bias``
    on average, with standard deviation ``spread``.  The step's interval is the bias-corrected delta
    ``delta - bias`` +- ``t(n-1) x spread x sqrt(1 + 1/n)`` (90 %); *resolved* = it excludes 0.

    Returns ``{"delta_pct", "centre_pct", "low", "high", "half_width_pp", "bias_pp", "spread_pp",
    "level", "resolved", "rule"}`` (NaN delta: NaN bounds, not resolved).  Callers: ``modelled_tables.step_deltas``
    (every step table, figure and README line) and helper code that needs the same interval.
    """
    from .. import calibration

    try:
        u = calibration.read_uncertainty(path)
    except Exception as err:  # UsageError: no calibration table yet
        raise StudyError(str(err)) from None
    d = float(delta_pct) if delta_pct is not None else float("nan")
    bias, hw = u["bias_pp"], u["half_width_pp"]
    centre = d - bias
    low, high = centre - hw, centre + hw
    ok = d == d
    rule = (f"{int(round(100 * u['level']))} % interval from {int(u['n'])} held-out speed-up residuals "
            f"(experiments/reference/calibration.csv, model {u['model_fingerprint']}): bias {bias:+.2f} pp "
            f"[{u['bias_low_pp']:+.2f}, {u['bias_high_pp']:+.2f}] removed, +-{hw:.2f} pp "
            f"(spread {u['spread_pp']:.2f} pp)")
    return {"delta_pct": d, "centre_pct": round(centre, 3) if ok else d, "low": round(low, 3) if ok else d,
            "high": round(high, 3) if ok else d, "half_width_pp": round(hw, 3), "bias_pp": round(bias, 3),
            "spread_pp": round(u["spread_pp"], 3), "level": u["level"],
            "resolved": bool(ok and (low > 0 or high < 0)), "rule": rule}


# ============================================================================ one step's speed


def speed_table(study, variant: str, baseline: str | None, isa_cases: dict, measured: pd.DataFrame | None,
                measured_note: str, published: pd.DataFrame, modelled: bool = True) -> pd.DataFrame:
    """Every speed value one step has, each with its kind; kinds that are missing say why."""
    rows = []
    if measured is not None and len(measured):
        for r in measured.itertuples():
            for metric, low, high in (("tflops", "tflops_low", "tflops_high"), ("ratio", "ratio_low", "ratio_high")):
                if hasattr(r, metric):
                    rows.append({"variant": r.variant, "baseline": r.baseline, "kind": "measured", "shape": r.shape,
                                 "metric": metric, "value": getattr(r, metric), "low": getattr(r, low, None),
                                 "high": getattr(r, high, None), "detail": f"bench harness, {r.method}",
                                 "available": True})
    else:
        why = measured_note or "no gfx950 GPU in this run"
        rows.append({"variant": variant, "baseline": baseline, "kind": "measured", "detail": f"not available: {why}",
                     "available": False})
    if modelled:
        for shapes in isa_cases.values():
            for shape in shapes:
                rows += _modelled_rows(variant, baseline, shape, study.spec.shape_text(shape))
    pub = study.spec.published
    label = study.label(variant) if study.spec.published.kernels else None
    sub = published[published["kernel"] == label] if label is not None else published
    for r in sub.itertuples():
        shape = "x".join(str(int(getattr(r, k))) for k in ("M", "N", "K") if hasattr(r, k))
        rows.append({"variant": f"{r.stage} ({r.kernel})", "baseline": None, "kind": "published", "shape": shape,
                     "metric": pub.value, "value": float(getattr(r, pub.value)), "detail": r.source,
                     "available": True})
    return pd.DataFrame(rows, columns=SPEED_COLUMNS)


def speed_view(speed: pd.DataFrame, kind: str) -> pd.DataFrame:
    """One kind's rows of a :func:`speed_table` (a "not available" row says why, instead of a number)."""
    if kind not in KINDS:
        raise StudyError(f"unknown speed kind {kind!r} (kinds: {', '.join(KINDS)})")
    sub = speed[speed["kind"] == kind]
    return sub.drop(columns=["kind"]).reset_index(drop=True)
